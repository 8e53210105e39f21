//! Golden tests: our tools against the reference tools' outputs in the fixtures.

mod common;

use common::*;
use memtrace::{tools, Reader};

#[test]
fn dump_matches_reference_for_every_fixture() {
    for name in TRACES {
        let data = read(&format!("{name}.ctf"));
        let mut r = Reader::from_bytes(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = Vec::new();
        tools::dump(&mut r, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.notes().is_empty(), "{name}: {:?}", r.notes());
        assert_same_text(&out, &read_gz(&format!("{name}.dump.txt.gz")), name);
    }
}

#[test]
fn streaming_from_a_file_gives_the_same_dump() {
    let path = fixtures().join("multi.ctf");
    let mut r = Reader::open(&path).expect("open");
    assert_eq!(r.total_len(), Some(std::fs::metadata(&path).unwrap().len()));
    let mut out = Vec::new();
    tools::dump(&mut r, &mut out).expect("dump");
    assert_same_text(&out, &read_gz("multi.dump.txt.gz"), "multi via file");
}
