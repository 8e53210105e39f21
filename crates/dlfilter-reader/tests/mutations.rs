//! Damaged dlfilter streams: bit flips, overwritten, zeroed, deleted, repeated and
//! inserted bytes, truncations, and more than 1 MiB of perf text pushed in between two
//! records (the 1 MiB text flush once panicked on every such stream). Each of 1,600
//! mutations of real streams (`perf script --dlfilter` output of a sampling recording,
//! and the committed fuzz seeds) must decode to events and at most one typed error —
//! never a panic — with both the default and a small text chunk.

mod common;

use common::*;
use ptscope_decode::RecordingKind;
use ptscope_dlfilter_reader::{install_filter, RecordReader};
use std::io::BufReader;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

#[path = "../../../tests/xorshift.rs"]
mod xorshift;
use xorshift::Rng;

/// Lines perf prints itself, for the text insertions: decode errors, side-band events
/// (which the reader drops) and a sample with its callchain (tab-led lines).
const TEXT_LINES: &[&str] = &[
    " instruction trace error type 1 time 1.000000011 cpu 0 pid 7 tid 7 ip 0x10 code 6: Overflow packet\n",
    "python3  4242 1.000000001: PERF_RECORD_MMAP2 4242/4242: [0x7f00(0x1000) @ 0 08:01 5 0]: r-xp /usr/lib/x.so\n",
    "python3  4242/4242 1.000000002:     10101 cpu-clock/freq=10000/u:\n",
    "\t          250a3f _PyEval_EvalFrame+0xcf (inlined)\n",
    "\t          158e6e object_vacall+0x12e (/usr/bin/python3.11)\n",
    "\n",
];

/// One mutation of `base`, and what it was.
fn mutate(base: &[u8], rng: &mut Rng, big: bool) -> (Vec<u8>, String) {
    let mut s = base.to_vec();
    let len = s.len().max(1);
    let at = rng.below(len);
    if big {
        // More than 1 MiB of text at a line or record boundary, or anywhere.
        let mut t = Vec::new();
        while t.len() <= (1 << 20) + rng.below(1 << 18) {
            t.extend_from_slice(TEXT_LINES[rng.below(TEXT_LINES.len())].as_bytes());
        }
        let at = if rng.below(2) == 0 {
            boundary(base, at)
        } else {
            at
        };
        let n = t.len();
        s.splice(at.min(s.len())..at.min(s.len()), t);
        return (s, format!("insert {n} bytes of text at {at}"));
    }
    let n = 1 + rng.below(64);
    let end = (at + n).min(s.len());
    let what = match rng.below(8) {
        0 => {
            let bit = rng.below(8);
            if let Some(b) = s.get_mut(at) {
                *b ^= 1 << bit;
            }
            format!("flip bit {bit} of byte {at}")
        }
        1 => {
            let v = rng.next() as u8;
            if let Some(b) = s.get_mut(at) {
                *b = v;
            }
            format!("set byte {at} to {v}")
        }
        2 => {
            s.truncate(at);
            format!("truncate at {at}")
        }
        3 => {
            s.drain(at.min(end)..end);
            format!("delete {at}..{end}")
        }
        4 => {
            for b in &mut s[at.min(end)..end] {
                *b = 0;
            }
            format!("zero {at}..{end}")
        }
        5 => {
            let dup = s[at.min(end)..end].to_vec();
            s.splice(end..end, dup);
            format!("repeat {at}..{end}")
        }
        6 => {
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            s.splice(at.min(s.len())..at.min(s.len()), bytes);
            format!("insert {n} random bytes at {at}")
        }
        _ => {
            // A length field made huge: the reader must not allocate it.
            let v = (rng.next() as u32) | 0x8000_0000;
            if at + 4 <= s.len() {
                s[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            format!("write {v:#x} at {at}")
        }
    };
    (s, what)
}

/// The first record or line boundary at or after `at`.
fn boundary(stream: &[u8], at: usize) -> usize {
    let mut i = 0;
    while i < stream.len() && i < at {
        if stream[i] == 0 && i + 6 <= stream.len() {
            let len =
                u32::from_le_bytes([stream[i + 2], stream[i + 3], stream[i + 4], stream[i + 5]]);
            i = i.saturating_add(6 + len as usize);
        } else {
            i += stream[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(stream.len() - i, |p| p + 1);
        }
    }
    i.min(stream.len())
}

/// Decodes `bytes` to the end: (events, errors).
fn decode(bytes: &[u8], chunk: Option<usize>) -> (u64, u32) {
    let mut r = RecordReader::new(BufReader::with_capacity(4096, bytes));
    if let Some(c) = chunk {
        r = r.with_text_chunk(c);
    }
    let (mut events, mut errors) = (0u64, 0u32);
    loop {
        match r.next_event() {
            Ok(Some(_)) => events += 1,
            Ok(None) => break,
            Err(_) => errors += 1,
        }
    }
    assert!(errors <= 1, "{errors} errors");
    assert!(r.is_finished());
    assert_eq!(r.stats().events, events);
    (events, errors)
}

/// A real stream: perf's dlfilter output for a cpu-clock recording with callchains.
fn real_stream(dir: &Path) -> Vec<u8> {
    let exe = build_prog(dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[&exe_s, "100"],
    );
    let filter = install_filter().expect("install filter");
    let out = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(&data)
        .args(RecordingKind::Sampling.script_args())
        .arg("--dlfilter")
        .arg(filter.path())
        .args(["--show-mmap-events", "--show-task-events"])
        .args(["--dlarg", "sideband"])
        .output()
        .expect("perf script --dlfilter");
    assert!(out.status.success());
    out.stdout
}

#[test]
fn damaged_streams_never_panic() {
    let mut bases: Vec<(String, Vec<u8>)> = Vec::new();
    let tmp = scratch("mutations");
    if perf_usable("damaged_streams_never_panic (real stream)") {
        bases.push(("real sampling stream".into(), real_stream(tmp.path())));
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/dlfilter_records");
    let mut seeds: Vec<_> = std::fs::read_dir(&corpus)
        .expect("the dlfilter fuzz seeds")
        .map(|e| e.expect("entry").path())
        .collect();
    seeds.sort();
    for p in seeds.iter().take(40) {
        let b = std::fs::read(p).expect("seed");
        // The fuzz target's first byte is its configuration, not stream.
        if b.len() > 1 {
            bases.push((p.display().to_string(), b[1..].to_vec()));
        }
    }
    assert!(!bases.is_empty());
    // The unmutated streams decode, the real one without an error.
    for (name, b) in &bases {
        let (events, errors) = decode(b, None);
        if name.starts_with("real") {
            assert!(
                events > 50 && errors == 0,
                "{name}: {events} events, {errors} errors"
            );
        }
    }
    let mut rng = Rng(0x5eed_d1f7_0000_0001);
    let mut panics = Vec::new();
    let mut errors = 0;
    const N: usize = 1600;
    for i in 0..N {
        // The real stream gets half the mutations; every 12th inserts > 1 MiB of text.
        let b = if i % 2 == 0 || bases.len() == 1 {
            0
        } else {
            1 + rng.below(bases.len() - 1)
        };
        let (name, base) = &bases[b];
        let (bytes, what) = mutate(base, &mut rng, i % 12 == 0);
        let chunk = (i % 3 == 0).then_some(1 + (i % 5000));
        match catch_unwind(AssertUnwindSafe(|| decode(&bytes, chunk))) {
            Ok((_, e)) => errors += e,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panics.push(format!("#{i} {name}: {what}, chunk {chunk:?}: {msg}"));
            }
        }
    }
    assert!(
        panics.is_empty(),
        "{} of {N} damaged streams panicked, e.g.:\n{}",
        panics.len(),
        panics[..panics.len().min(5)].join("\n")
    );
    // The damage reached the error paths (not only text the decoder shrugs off).
    assert!(
        errors as usize > N / 4,
        "only {errors} errors in {N} damaged streams"
    );
}
