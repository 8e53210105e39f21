//! Shared helpers: fixture paths and gzip'd reference outputs.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;

/// Every trace in the fixtures directory.
pub const TRACES: &[&str] = &[
    "ocamlopt_v3",
    "wrap",
    "locs",
    "multi",
    "ocamlopt_v3.strip_names",
];

#[path = "../../../../tests/fixtures_dir.rs"]
mod fixtures;

/// The repository's `tests/fixtures/memtrace`.
pub fn fixtures() -> PathBuf {
    fixtures::fixtures_dir().join("memtrace")
}

pub fn read(name: &str) -> Vec<u8> {
    let p = fixtures().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("fixture {}: {e}", p.display()))
}

pub fn read_gz(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&read(name)[..])
        .read_to_end(&mut out)
        .expect("gunzip fixture");
    out
}

/// Points at the first differing line, for readable failures on big outputs.
pub fn assert_same_text(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let g: Vec<&[u8]> = got.split(|&b| b == b'\n').collect();
    let w: Vec<&[u8]> = want.split(|&b| b == b'\n').collect();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a != b {
            panic!(
                "{what}: line {} differs\n got: {}\nwant: {}",
                i + 1,
                String::from_utf8_lossy(a),
                String::from_utf8_lossy(b)
            );
        }
    }
    panic!("{what}: {} lines, want {}", g.len(), w.len());
}
