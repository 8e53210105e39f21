//! Every record and argument type the writer produces reads back unchanged.

use ptscope_fxt::check::validate_bytes;
use ptscope_fxt::reader::{self, ArgValue as R, EventKind, Reader, Record};
use ptscope_fxt::{format, Arg, ArgValue as W, FxtWriter};

fn events(bytes: &[u8]) -> Vec<reader::Event<'_>> {
    reader::read_events(bytes).expect("writer output must parse")
}

#[test]
fn header_records_come_first_and_in_order() {
    let bytes = FxtWriter::new(Vec::new()).finish().unwrap();
    assert_eq!(&bytes[..8], &format::MAGIC.to_le_bytes());
    let records = reader::read_all(&bytes).unwrap();
    assert_eq!(
        records,
        vec![
            Record::Magic,
            Record::ProviderInfo {
                id: 0,
                name: "ptscope"
            },
            Record::ProviderSection { id: 0 },
            Record::Initialization {
                ticks_per_second: 1_000_000_000
            },
        ]
    );
    assert!(validate_bytes(&bytes).is_ok());
}

#[test]
fn every_event_kind_round_trips() {
    let mut w = FxtWriter::new(Vec::new());
    let t = w.thread(7, 8);
    w.begin(t, "cat", "outer", 100, &[]);
    w.instant(t, "", "tick", 110, &[]);
    w.complete(t, "", "inner", 120, 130, &[]);
    w.counter(t, "", "CPU", 140, 3, &[Arg::new("cycles", W::Int(99))]);
    w.end(t, "cat", "outer", 150, &[]);
    let bytes = w.finish().unwrap();
    let ev = events(&bytes);
    let got: Vec<_> = ev
        .iter()
        .map(|e| (e.kind, e.timestamp, e.pid, e.tid, e.category, e.name))
        .collect();
    assert_eq!(
        got,
        vec![
            (EventKind::Begin, 100, 7, 8, "cat", "outer"),
            (EventKind::Instant, 110, 7, 8, "", "tick"),
            (EventKind::Complete { end: 130 }, 120, 7, 8, "", "inner"),
            (EventKind::Counter { id: 3 }, 140, 7, 8, "", "CPU"),
            (EventKind::End, 150, 7, 8, "cat", "outer"),
        ]
    );
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    let s = &report.threads[&(7, 8)];
    assert_eq!(
        (s.begins, s.ends, s.completes, s.instants, s.counters),
        (1, 1, 1, 1, 1)
    );
    assert_eq!(s.max_depth, 2);
}

#[test]
fn every_arg_type_round_trips() {
    let long_inline = "x".repeat(1000);
    let args = [
        Arg::new("null", W::Null),
        Arg::new("small", W::Int(-5)),
        Arg::new("i32max", W::Int(i64::from(i32::MAX))),
        Arg::new("big", W::Int(i64::MIN)),
        Arg::new("usmall", W::UInt(7)),
        Arg::new("ubig", W::UInt(u64::MAX)),
        Arg::new("pi", W::Double(std::f64::consts::PI)),
        Arg::new("interned", W::Str("hello")),
        Arg::new("inline", W::InlineStr("once ü")),
        Arg::new("long_inline", W::InlineStr(&long_inline)),
        Arg::new("empty", W::InlineStr("")),
        Arg::new("ptr", W::Pointer(0xdead_beef_0000)),
        Arg::new("koid", W::Koid(u32::MAX)),
        Arg::new("yes", W::Bool(true)),
        Arg::new("no", W::Bool(false)),
    ];
    let mut w = FxtWriter::new(Vec::new());
    let t = w.thread(1, 2);
    w.instant(t, "", "args", 5, &args);
    let bytes = w.finish().unwrap();
    let ev = events(&bytes);
    assert_eq!(ev.len(), 1);
    let got: Vec<_> = ev[0].args.iter().map(|a| (a.name, a.value)).collect();
    assert_eq!(
        got,
        vec![
            ("null", R::Null),
            ("small", R::Int32(-5)),
            ("i32max", R::Int32(i32::MAX)),
            ("big", R::Int64(i64::MIN)),
            ("usmall", R::UInt32(7)),
            ("ubig", R::UInt64(u64::MAX)),
            ("pi", R::Double(std::f64::consts::PI)),
            ("interned", R::Str("hello")),
            ("inline", R::Str("once ü")),
            ("long_inline", R::Str(&long_inline)),
            ("empty", R::Str("")),
            ("ptr", R::Pointer(0xdead_beef_0000)),
            ("koid", R::Koid(u64::from(u32::MAX))),
            ("yes", R::Bool(true)),
            ("no", R::Bool(false)),
        ]
    );
    // Inline values must not have gone through the string table.
    let strings: Vec<&str> = reader::read_all(&bytes)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            Record::String { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    assert!(strings.contains(&"hello"));
    assert!(!strings.contains(&"once ü"));
}

#[test]
fn kernel_objects_round_trip() {
    let mut w = FxtWriter::new(Vec::new());
    w.process(1, "proc [pid=5]");
    w.thread_object(2, 1, "main");
    w.kernel_object(
        format::object::PROCESS,
        3,
        "",
        &[Arg::new("extra", W::Int(4))],
    );
    let bytes = w.finish().unwrap();
    let objs: Vec<_> = reader::read_all(&bytes)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            Record::KernelObject(k) => Some(k),
            _ => None,
        })
        .collect();
    assert_eq!(objs.len(), 3);
    assert_eq!(
        (
            objs[0].obj_type,
            objs[0].koid,
            objs[0].name,
            objs[0].args.len()
        ),
        (1, 1, "proc [pid=5]", 0)
    );
    assert_eq!(
        (objs[1].obj_type, objs[1].koid, objs[1].name),
        (2, 2, "main")
    );
    assert_eq!(objs[1].args.get("process"), Some(R::Koid(1)));
    assert_eq!(
        (objs[2].name, objs[2].args.get("extra")),
        ("", Some(R::Int32(4)))
    );
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.processes[&1], "proc [pid=5]");
    assert_eq!(report.thread_names[&2].process, Some(1));
    assert_eq!(report.thread_names[&2].name, "main");
}

#[test]
fn strings_and_threads_are_registered_once() {
    let mut w = FxtWriter::new(Vec::new());
    let t = w.thread(1, 2);
    for i in 0..100 {
        w.begin(t, "", "f", i * 2, &[Arg::new("a", W::Str("v"))]);
        w.end(t, "", "f", i * 2 + 1, &[]);
    }
    let stats = w.stats().clone();
    let bytes = w.finish().unwrap();
    assert_eq!(stats.string_records, 3, "f, a and v");
    assert_eq!(stats.thread_records, 1);
    assert_eq!(stats.events, 200);
    // 4 header records (6 words), 3 strings (2 words each), 1 thread (3 words),
    // 100 begins with one indexed-string arg (3 words) and 100 ends (2 words).
    assert_eq!(bytes.len(), 8 * (6 + 3 * 2 + 3 + 100 * 3 + 100 * 2));
}

/// Hand-built records exercise reader paths the writer never takes.
mod handmade {
    use super::*;

    fn header(ty: u64, words: u64, rest: u64) -> u64 {
        ty | (words << 4) | (rest << 16)
    }

    fn bytes(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn inline_thread_and_inline_names() {
        // Event: begin, inline thread, inline category "ab" and name "hello", 0 args.
        let ev = header(
            4,
            1 + 1 + 2 + 1 + 1,
            2 | ((0x8000 | 2) << 16) | ((0x8000 | 5) << 32),
        );
        let data = bytes(&[
            format::MAGIC,
            ev,
            42,
            9,
            10,
            u64::from_le_bytes(*b"ab\0\0\0\0\0\0"),
            u64::from_le_bytes(*b"hello\0\0\0"),
        ]);
        let ev = reader::read_events(&data).unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (
                ev[0].kind,
                ev[0].timestamp,
                ev[0].pid,
                ev[0].tid,
                ev[0].category,
                ev[0].name
            ),
            (EventKind::Begin, 42, 9, 10, "ab", "hello")
        );
    }

    #[test]
    fn async_flow_and_other_records() {
        let thread = header(3, 3, 1);
        let mut words = vec![format::MAGIC, thread, 1, 2];
        for (ty, id) in [(5u64, 11u64), (6, 12), (7, 13), (8, 14), (9, 15), (10, 16)] {
            words.extend([header(4, 3, ty | (1 << 8)), 100, id]);
        }
        // A log record (type 9) and a blob (type 5) of 2 words each are skipped.
        words.extend([header(9, 2, 0), 0, header(5, 2, 0), 0]);
        let data = bytes(&words);
        let records = reader::read_all(&data).unwrap();
        let kinds: Vec<_> = records
            .iter()
            .filter_map(|r| match r {
                Record::Event(e) => Some(e.kind),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::AsyncBegin { id: 11 },
                EventKind::AsyncInstant { id: 12 },
                EventKind::AsyncEnd { id: 13 },
                EventKind::FlowBegin { id: 14 },
                EventKind::FlowStep { id: 15 },
                EventKind::FlowEnd { id: 16 },
            ]
        );
        assert!(matches!(
            records[records.len() - 2],
            Record::Other {
                record_type: 9,
                words: 2,
                ..
            }
        ));
    }

    #[test]
    fn string_replacement_is_honoured_per_record() {
        let s1 = header(2, 2, 5 | (3 << 16)); // index 5, len 3
        let s2 = header(2, 2, 5 | (3 << 16));
        let thread = header(3, 3, 1);
        let ev = header(4, 2, (1 << 8) | (5u64 << 32)); // instant, name ref 5
        let data = bytes(&[
            format::MAGIC,
            s1,
            u64::from_le_bytes(*b"one\0\0\0\0\0"),
            thread,
            1,
            2,
            ev,
            1,
            s2,
            u64::from_le_bytes(*b"two\0\0\0\0\0"),
            ev,
            2,
        ]);
        let names: Vec<_> = reader::read_events(&data)
            .unwrap()
            .iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec!["one", "two"]);
    }

    #[test]
    fn padding_after_a_record_is_skipped_but_overruns_are_errors() {
        let thread = header(3, 3, 1);
        // An instant with size 4 but only 2 words of content: 2 padding words.
        let ev = header(4, 4, 1 << 8);
        let data = bytes(&[thread, 1, 2, ev, 5, 0, 0]);
        let ev = reader::read_events(&data).unwrap();
        assert_eq!(ev[0].timestamp, 5);
        // Complete claiming 2 words but needing a trailer: overrun.
        let bad = header(4, 2, 4 | (1 << 8));
        let data = bytes(&[thread, 1, 2, bad, 5, 99]);
        let err = reader::read_events(&data).unwrap_err();
        assert_eq!(err.offset, 24);
        assert_eq!(err.kind, reader::ErrorKind::Overrun);
    }

    #[test]
    fn providers_and_ticks() {
        let name = u64::from_le_bytes(*b"p\0\0\0\0\0\0\0");
        let info = |id: u64| header(0, 2, 1 | (id << 4) | (1 << 36));
        let section = |id: u64| header(0, 1, 2 | (id << 4));
        let data = bytes(&[info(3), name, header(1, 2, 0), 1000, section(3)]);
        let mut r = Reader::new(&data);
        assert_eq!(
            r.next(),
            Some(Ok(Record::ProviderInfo { id: 3, name: "p" }))
        );
        assert_eq!(
            r.next(),
            Some(Ok(Record::Initialization {
                ticks_per_second: 1000
            }))
        );
        assert_eq!(r.ticks_per_second(), 1000);
        assert_eq!(r.next(), Some(Ok(Record::ProviderSection { id: 3 })));
        assert_eq!(r.next(), None);

        let dup = bytes(&[info(3), name, info(3), name]);
        let err = reader::read_all(&dup).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::DuplicateProvider(3));
        let unknown = bytes(&[section(4)]);
        let err = reader::read_all(&unknown).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::UnknownProvider(4));
    }

    #[test]
    fn unknown_refs_are_errors() {
        let ev = header(4, 2, 1 << 8);
        let err = reader::read_all(&bytes(&[ev, 0])).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::UnknownThread(1));
        let thread = header(3, 3, 1);
        let ev = header(4, 2, (1 << 8) | (77u64 << 32));
        let err = reader::read_all(&bytes(&[thread, 1, 2, ev, 0])).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::UnknownString(77));
        assert_eq!(err.offset, 24);
        let bad_magic = format::MAGIC ^ (1 << 30);
        let err = reader::read_all(&bytes(&[bad_magic])).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::BadMagic(bad_magic));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let s = header(2, 2, 1 | (2 << 16));
        let data = bytes(&[s, u64::from_le_bytes([0xff, 0xfe, 0, 0, 0, 0, 0, 0])]);
        let err = reader::read_all(&data).unwrap_err();
        assert_eq!(err.kind, reader::ErrorKind::InvalidUtf8);
    }

    #[test]
    fn argument_size_must_match_its_type() {
        let thread = header(3, 3, 1);
        // int64 argument claiming 1 word (it needs 2), name ref 0.
        let ev = header(4, 4, (1 << 4) | (1 << 8));
        let arg = 3 | (1 << 4);
        let data = bytes(&[thread, 1, 2, ev, 0, arg, 5]);
        let err = reader::read_all(&data).unwrap_err();
        assert_eq!(
            err.kind,
            reader::ErrorKind::ArgSize {
                arg_type: 3,
                claimed: 1,
                used: 2
            }
        );
        // An unknown argument type (blob, 10) is skipped by its size.
        let ev = header(4, 5, (1 << 4) | (1 << 8));
        let arg = 10 | (3 << 4) | (8 << 32);
        let data = bytes(&[thread, 1, 2, ev, 0, arg, 0x1234, 0x5678]);
        let ev = reader::read_events(&data).unwrap();
        assert_eq!(ev[0].args[0].value, R::Unknown { arg_type: 10 });
    }
}
