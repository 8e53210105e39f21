//! The checker flags each problem Perfetto or the Python reader would have.

use ptscope_fxt::check::{validate_bytes, IssueKind, Report};
use ptscope_fxt::{format, Arg, ArgValue as W, FxtWriter, ThreadId};

fn trace(f: impl FnOnce(&mut FxtWriter<Vec<u8>>, ThreadId)) -> Report {
    let mut w = FxtWriter::new(Vec::new());
    w.process(1, "p");
    w.thread_object(2, 1, "t");
    let t = w.thread(1, 2);
    f(&mut w, t);
    validate_bytes(&w.finish().unwrap())
}

fn kinds(r: &Report) -> Vec<IssueKind> {
    r.issues.iter().map(|i| i.kind.clone()).collect()
}

const T: (u64, u64) = (1, 2);

#[test]
fn well_formed_nesting_passes_and_is_counted() {
    let r = trace(|w, t| {
        w.begin(t, "", "a", 0, &[]);
        w.complete(t, "", "b", 1, 5, &[]);
        w.complete(t, "", "c", 2, 5, &[]); // nested in b, same end
        w.begin(t, "", "d", 5, &[]); // after b and c ended
        w.instant(t, "", "i", 6, &[]);
        w.end(t, "", "d", 7, &[]);
        w.complete(t, "", "b", 7, 7, &[]);
        w.end(t, "", "a", 8, &[]);
    });
    assert!(r.is_ok(), "{r}");
    assert_eq!(r.count("b"), 2);
    assert_eq!(r.count("a"), 2);
    assert_eq!(r.count("nope"), 0);
    assert_eq!(r.threads[&T].max_depth, 3);
    assert_eq!(r.threads[&T].first_timestamp, Some(0));
    assert_eq!(r.threads[&T].last_timestamp, Some(8));
    assert_eq!(r.ticks_per_second, Some(1_000_000_000));
}

#[test]
fn unmatched_and_mismatched_ends() {
    let r = trace(|w, t| {
        w.end(t, "", "x", 0, &[]);
        w.begin(t, "cat", "a", 1, &[]);
        w.end(t, "cat", "b", 2, &[]);
        w.begin(t, "cat", "a", 3, &[]);
        w.end(t, "other", "a", 4, &[]);
    });
    assert_eq!(
        kinds(&r),
        vec![
            IssueKind::UnmatchedEnd {
                thread: T,
                name: "x".into()
            },
            IssueKind::EndMismatch {
                thread: T,
                expected: "cat:a".into(),
                found: "cat:b".into()
            },
            IssueKind::EndMismatch {
                thread: T,
                expected: "cat:a".into(),
                found: "other:a".into()
            },
        ]
    );
    // magic, provider info and section, init, process, string "process", thread
    // object, thread record, string "x": the end is record 9.
    assert_eq!(r.issues[0].record, 9);
}

#[test]
fn unclosed_begins_are_reported_at_the_end() {
    let r = trace(|w, t| {
        w.begin(t, "", "a", 0, &[]);
        w.begin(t, "", "b", 1, &[]);
        w.end(t, "", "b", 2, &[]);
    });
    assert_eq!(
        kinds(&r),
        vec![IssueKind::UnclosedBegin {
            thread: T,
            name: "a".into()
        }]
    );
}

#[test]
fn time_going_backwards_on_one_thread() {
    let r = trace(|w, t| {
        let other = w.thread(1, 3);
        w.instant(t, "", "a", 10, &[]);
        w.instant(other, "", "b", 5, &[]); // another thread: fine
        w.counter(t, "", "c", 1, 0, &[Arg::new("v", W::Int(1))]); // counters are exempt
        w.complete(t, "", "d", 9, 20, &[]);
    });
    assert_eq!(
        kinds(&r),
        vec![IssueKind::TimeWentBackwards {
            thread: T,
            previous: 10,
            timestamp: 9
        }]
    );
}

#[test]
fn complete_problems() {
    let r = trace(|w, t| {
        w.complete(t, "", "backwards", 10, 5, &[]);
        w.complete(t, "", "parent", 20, 30, &[]);
        w.complete(t, "", "sticks_out", 25, 35, &[]);
        w.begin(t, "", "outer", 40, &[]);
        w.complete(t, "", "past_end", 41, 50, &[]);
        w.end(t, "", "outer", 45, &[]);
        w.complete(t, "", "frame", 60, 70, &[]);
        w.begin(t, "", "cut", 61, &[]);
        w.end(t, "", "cut", 75, &[]);
    });
    assert_eq!(
        kinds(&r),
        vec![
            IssueKind::CompleteEndsBeforeStart {
                thread: T,
                name: "backwards".into()
            },
            IssueKind::CompleteOverlapsParent {
                thread: T,
                name: "sticks_out".into()
            },
            IssueKind::CompleteOverlapsParent {
                thread: T,
                name: "past_end".into()
            },
            IssueKind::BeginOutlivesParent {
                thread: T,
                name: "cut".into()
            },
        ]
    );
}

#[test]
fn non_numeric_counter_args() {
    let r = trace(|w, t| {
        w.counter(
            t,
            "",
            "mem",
            0,
            1,
            &[
                Arg::new("bytes", W::UInt(5)),
                Arg::new("f", W::Double(0.5)),
                Arg::new("label", W::Str("x")),
            ],
        );
    });
    assert_eq!(
        kinds(&r),
        vec![IssueKind::NonNumericCounterArg {
            counter: "mem".into(),
            arg: "label".into()
        }]
    );
}

#[test]
fn kernel_object_problems() {
    let r = trace(|w, _| {
        w.kernel_object(format::object::THREAD, 5, "orphan", &[]);
        w.kernel_object(4, 6, "channel", &[]);
    });
    assert_eq!(
        kinds(&r),
        vec![
            IssueKind::ThreadWithoutProcess { koid: 5 },
            IssueKind::UnsupportedKernelObject(4),
        ]
    );
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn header_order_and_koid_problems() {
    // No magic, no provider info, no initialization; a thread with a 33-bit koid.
    let thread = 3 | (3 << 4) | (1 << 16);
    let instant = 4 | (2 << 4) | (1 << 24);
    let r = validate_bytes(&words(&[thread, 1, 1 << 32, instant, 0]));
    assert_eq!(
        kinds(&r),
        vec![
            IssueKind::MagicNotFirst,
            IssueKind::NoProviderInfo,
            IssueKind::KoidTooLarge(1 << 32),
            IssueKind::NoInitialization,
            IssueKind::KoidTooLarge(1 << 32),
        ]
    );
}

#[test]
fn unsupported_records_and_read_errors() {
    let mut bytes = FxtWriter::new(Vec::new()).finish().unwrap();
    let large = 15 | (1 << 4);
    let reserved = 11 | (1 << 4);
    let scheduling = 8 | (1 << 4);
    bytes.extend(words(&[large, reserved, scheduling, 2 | (1 << 16)]));
    let r = validate_bytes(&bytes);
    let k = kinds(&r);
    assert_eq!(k.len(), 3, "{r}");
    assert_eq!(
        k[0],
        IssueKind::UnsupportedRecord {
            record_type: 15,
            header: large
        }
    );
    assert_eq!(
        k[1],
        IssueKind::UnsupportedRecord {
            record_type: 11,
            header: reserved
        }
    );
    assert!(
        matches!(&k[2], IssueKind::Read(e) if e.kind == ptscope_fxt::reader::ErrorKind::ZeroSize)
    );
    assert!(!r.is_ok());
}
