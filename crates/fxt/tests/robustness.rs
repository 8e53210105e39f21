//! The reader and checker return errors, never panic, on damaged or random input.

use ptscope_fxt::check::{validate, validate_bytes, IssueKind};
use ptscope_fxt::reader::{self, ErrorKind, Reader};
use ptscope_fxt::{Arg, ArgValue as W, FxtWriter};

#[path = "../../../tests/xorshift.rs"]
mod xorshift;
use xorshift::Rng;

fn sample_trace() -> Vec<u8> {
    let mut w = FxtWriter::new(Vec::new());
    w.process(1, "proc");
    w.thread_object(2, 1, "main");
    let t = w.thread(1, 2);
    w.begin(t, "", "outer", 0, &[Arg::new("x", W::Int(1 << 40))]);
    w.complete(
        t,
        "",
        "inner",
        1,
        2,
        &[
            Arg::new("s", W::InlineStr("inline value")),
            Arg::new("d", W::Double(1.5)),
            Arg::new("b", W::Bool(true)),
        ],
    );
    w.instant(t, "", "i", 3, &[Arg::new("p", W::Pointer(0x1000))]);
    w.counter(t, "", "c", 4, 1, &[Arg::new("v", W::UInt(u64::MAX))]);
    w.end(t, "", "outer", 5, &[Arg::new("k", W::Koid(9))]);
    w.finish().unwrap()
}

/// Record start offsets of a valid trace, plus its length.
fn boundaries(data: &[u8]) -> Vec<usize> {
    let mut r = Reader::new(data);
    let mut out = vec![0];
    while let Some(rec) = r.next() {
        rec.unwrap();
        out.push(r.offset());
    }
    out
}

#[test]
fn every_truncated_prefix_is_an_error_or_a_clean_stop() {
    let data = sample_trace();
    let ends = boundaries(&data);
    assert_eq!(*ends.last().unwrap(), data.len());
    for len in 0..data.len() {
        let prefix = &data[..len];
        let items: Vec<_> = Reader::new(prefix).collect();
        let last = items.last();
        if ends.contains(&len) {
            assert!(items.iter().all(Result::is_ok), "prefix {len}");
            assert_eq!(items.len(), ends.iter().position(|&e| e == len).unwrap());
        } else {
            match last {
                Some(Err(e)) => {
                    assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
                    // The error points at the last, incomplete record.
                    assert_eq!(e.offset, *ends.iter().filter(|&&b| b < len).max().unwrap());
                }
                other => panic!("prefix {len}: expected a truncation error, got {other:?}"),
            }
            let report = validate_bytes(prefix);
            assert!(
                report
                    .issues
                    .iter()
                    .any(|i| matches!(i.kind, IssueKind::Read(_))),
                "prefix {len}: {report}"
            );
        }
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut errors = 0;
    for _ in 0..20_000 {
        let len = rng.below(256);
        let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let items: Vec<_> = Reader::new(&data).collect();
        // The iterator ends after at most one error.
        assert!(items.iter().rev().skip(1).all(Result::is_ok));
        errors += usize::from(items.last().is_some_and(Result::is_err));
        let _ = validate_bytes(&data);
    }
    assert!(errors > 10_000, "random bytes are mostly invalid: {errors}");
}

#[test]
fn mutated_traces_never_panic() {
    let base = sample_trace();
    let mut rng = Rng(42);
    let mut flagged = 0;
    for _ in 0..20_000 {
        let mut data = base.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        if rng.below(4) == 0 {
            data.truncate(rng.below(data.len()));
        }
        let _: Vec<_> = Reader::new(&data).collect();
        flagged += usize::from(!validate(Reader::new(&data)).is_ok());
    }
    // The damage must reach the error paths, not only bytes nobody checks.
    assert!(
        flagged > 10_000,
        "only {flagged} damaged traces were flagged"
    );
}

#[test]
fn zero_size_and_huge_large_records_are_errors() {
    let zero = 4u64.to_le_bytes();
    let err = reader::read_all(&zero).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ZeroSize);
    // A large record claiming 2^32-1 words.
    let large = (15u64 | (0xffff_ffffu64 << 4)).to_le_bytes();
    let err = reader::read_all(&large).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::Truncated { .. }));
}
