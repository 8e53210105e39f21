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

/// Decodes every event of `data` and writes it back with the same trace info.
fn reencode(data: &[u8]) -> Vec<u8> {
    let mut r = Reader::from_bytes(data).expect("reader");
    let mut w = memtrace::Writer::new(Vec::new(), r.info()).expect("writer");
    while let Some(ev) = r.next_event().expect("event") {
        w.put_event(&ev).expect("put_event");
    }
    w.finish().expect("finish")
}

#[test]
fn reencoding_reproduces_each_fixture_byte_for_byte() {
    for name in TRACES {
        let data = read(&format!("{name}.ctf"));
        let out = reencode(&data);
        if out != data {
            let at = out
                .iter()
                .zip(&data)
                .position(|(a, b)| a != b)
                .unwrap_or(out.len().min(data.len()));
            panic!(
                "{name}: first difference at byte {at} (len {} vs {})",
                out.len(),
                data.len()
            );
        }
    }
}
