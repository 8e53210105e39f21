//! FxtSink driven through the `TraceSink` trait, written as gzip, read back and checked.

use ptscope_fxt::check::validate_bytes;
use ptscope_fxt::reader::{self, ArgValue as R, EventKind, Record};
use ptscope_output::{open_trace_output, read_trace_file, FxtSink};
use ptscope_stacks::{Arg, ArgValue, Name, TraceSink};
use std::path::PathBuf;

/// `name` in a fresh private directory, removed (with what is in it) when the guard
/// drops, also when the test fails.
fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join(name);
    (dir, path)
}

/// What a stack writer does, written only against the trait.
fn drive<S: TraceSink>(sink: &mut S) {
    let pid = sink.allocate_pid("demo [pid=7]");
    let main = sink.allocate_thread(pid, "main");
    let worker = sink.allocate_thread(pid, "worker");
    sink.duration_begin(main, "main", 0, &[]);
    sink.duration_begin(
        main,
        "parse",
        10,
        &[
            Arg::new("file", ArgValue::Interned("input.txt")),
            Arg::new("note", ArgValue::Str("one-off")),
        ],
    );
    sink.duration_complete(
        main,
        "read",
        11,
        15,
        &[
            Arg::new("fd", ArgValue::Int(3)),
            Arg::new("buf", ArgValue::Pointer(0x7fff_0000)),
            Arg::new("ratio", ArgValue::Float(0.25)),
            Arg::new("bytes", ArgValue::Int(1 << 40)),
        ],
    );
    sink.duration_instant(main, "checkpoint", 16, &[]);
    // The end names are informative only; the sink closes what is open.
    sink.duration_end(main, "whatever", 20, &[]);
    sink.counter(main, "CPU", 21, &[Arg::new("cycles", ArgValue::Int(1000))]);
    sink.counter(worker, "CPU", 22, &[Arg::new("cycles", ArgValue::Int(5))]);
    sink.counter(worker, "IPC", 22, &[Arg::new("ipc", ArgValue::Float(1.5))]);
    sink.duration_complete(worker, "job", 5, 30, &[]);
    sink.duration_end(main, "main", 40, &[]);
}

#[test]
fn gzip_trace_round_trips_through_the_trait() {
    let (_dir, path) = tmp("sink_round_trip.fxt.gz");
    let out = open_trace_output(&path).unwrap();
    assert!(out.is_gzip());
    let mut sink = FxtSink::new(out);
    drive(&mut sink);
    assert_eq!(sink.stats(), &Default::default());
    sink.finish_output().unwrap();

    let raw = std::fs::read(&path).unwrap();
    assert_eq!(&raw[..2], &[0x1f, 0x8b], "gzip magic");
    let bytes = read_trace_file(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    // koids come from one counter: process 1, threads 2 and 3.
    assert_eq!(report.processes[&1], "demo [pid=7]");
    assert_eq!(report.thread_names[&2].name, "main");
    assert_eq!(report.thread_names[&2].process, Some(1));
    assert_eq!(report.thread_names[&3].name, "worker");
    let main = &report.threads[&(1, 2)];
    assert_eq!(
        (
            main.begins,
            main.ends,
            main.completes,
            main.instants,
            main.counters
        ),
        (2, 2, 1, 1, 1)
    );
    assert_eq!(main.max_depth, 3);

    let events = reader::read_events(&bytes).unwrap();
    let summary: Vec<_> = events
        .iter()
        .map(|e| (e.tid, e.kind, e.timestamp, e.category, e.name))
        .collect();
    assert_eq!(
        summary,
        vec![
            (2, EventKind::Begin, 0, "", "main"),
            (2, EventKind::Begin, 10, "", "parse"),
            (2, EventKind::Complete { end: 15 }, 11, "", "read"),
            (2, EventKind::Instant, 16, "", "checkpoint"),
            (2, EventKind::End, 20, "", "parse"),
            (2, EventKind::Counter { id: 0 }, 21, "", "CPU"),
            (3, EventKind::Counter { id: 0 }, 22, "", "CPU"),
            (3, EventKind::Counter { id: 1 }, 22, "", "IPC"),
            (3, EventKind::Complete { end: 30 }, 5, "", "job"),
            (2, EventKind::End, 40, "", "main"),
        ]
    );
    let parse = &events[1].args;
    assert_eq!(parse.get("file"), Some(R::Str("input.txt")));
    assert_eq!(parse.get("note"), Some(R::Str("one-off")));
    let read = &events[2].args;
    assert_eq!(read.get("fd"), Some(R::Int32(3)));
    assert_eq!(read.get("buf"), Some(R::Pointer(0x7fff_0000)));
    assert_eq!(read.get("ratio"), Some(R::Double(0.25)));
    assert_eq!(read.get("bytes"), Some(R::Int64(1 << 40)));

    // Interned args go through the table, plain strings are inline.
    let strings: Vec<_> = reader::read_all(&bytes)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            Record::String { value, .. } => Some(value),
            _ => None,
        })
        .collect();
    assert!(strings.contains(&"input.txt"));
    assert!(!strings.contains(&"one-off"));
}

#[test]
fn raw_output_for_other_extensions() {
    let (_dir, path) = tmp("sink_raw.fxt");
    let out = open_trace_output(&path).unwrap();
    assert!(!out.is_gzip());
    let mut sink = FxtSink::new(out);
    drive(&mut sink);
    sink.finish_output().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(&bytes[..8], &ptscope_fxt::format::MAGIC.to_le_bytes());
    assert!(validate_bytes(&bytes).is_ok());
}

#[test]
fn bad_input_from_the_writer_is_repaired_and_counted() {
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let t = sink.allocate_thread(pid, "t");
    sink.duration_end(t, "nothing open", 0, &[]);
    sink.duration_begin(t, "a", -5, &[]);
    sink.duration_complete(t, "inverted", 10, 3, &[]);
    let many: Vec<Arg<'_>> = (0..20).map(|i| Arg::new("x", ArgValue::Int(i))).collect();
    sink.duration_instant(t, "many", 11, &many);
    sink.duration_end(t, "a", 12, &[]);
    let stats = sink.stats().clone();
    assert_eq!(stats.dropped_ends, 1);
    assert_eq!(stats.clamped_times, 1);
    assert_eq!(stats.clamped_completes, 1);
    assert_eq!(stats.dropped_args, 5);
    let bytes = sink.finish().unwrap();
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    let events = reader::read_events(&bytes).unwrap();
    assert_eq!(events.len(), 4);
    assert_eq!(events[0].timestamp, 0);
    assert_eq!(events[1].kind, EventKind::Complete { end: 10 });
    assert_eq!(events[2].args.len(), 15);
}

#[test]
fn foreign_thread_handles_are_ignored() {
    let mut other = FxtSink::new(Vec::new());
    let p = other.allocate_pid("p");
    let _ = other.allocate_thread(p, "a");
    let foreign = other.allocate_thread(p, "b");
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let _ = sink.allocate_thread(pid, "only");
    sink.duration_begin(foreign, "x", 0, &[]);
    sink.duration_end(foreign, "x", 1, &[]);
    assert_eq!(sink.stats().invalid_threads, 2);
    let bytes = sink.finish().unwrap();
    assert_eq!(reader::read_events(&bytes).unwrap().len(), 0);
}

#[test]
fn io_errors_are_remembered_until_finish() {
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("broken pipe"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut sink = FxtSink::new(Broken);
    let pid = sink.allocate_pid("p");
    let t = sink.allocate_thread(pid, "t");
    for i in 0..50_000 {
        sink.duration_begin(t, "f", i * 2, &[]);
        sink.duration_end(t, "f", i * 2 + 1, &[]);
    }
    assert!(sink.io_error().is_some());
    assert_eq!(sink.finish().err().unwrap().to_string(), "broken pipe");
}

#[test]
fn gzip_output_appears_only_after_finish_and_complete() {
    // The encoder's trailer is what `finish` adds: until then there is no file at all.
    let (_dir, path) = tmp("sink_unfinished.fxt.gz");
    let mut out = open_trace_output(&path).unwrap();
    std::io::Write::write_all(&mut out, b"0123456789").unwrap();
    std::io::Write::flush(&mut out).unwrap();
    assert!(!path.exists());
    out.finish().unwrap();
    assert_eq!(read_trace_file(&path).unwrap(), b"0123456789");
    std::fs::remove_file(&path).unwrap();
}

/// A begin keeps its first fifteen arguments, in order, whatever their number: the
/// sink and the writer hold up to six in narrow arrays and more in the format's full
/// width, and the counts on both sides of that boundary (and of fifteen) arrive whole,
/// by text and by a numbered name alike.
#[test]
fn begins_keep_every_argument_up_to_fifteen_on_both_sides_of_the_narrow_arrays() {
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let t = sink.allocate_thread(pid, "t");
    let names: Vec<String> = (0..18).map(|i| format!("arg{i}")).collect();
    let mut time = 0;
    for n in 0..=17 {
        let args: Vec<Arg<'_>> = names[..n]
            .iter()
            .enumerate()
            .map(|(i, name)| Arg::new(name, ArgValue::Int(100 * n as i64 + i as i64)))
            .collect();
        let by_text = format!("text{n}");
        sink.duration_begin(t, &by_text, time, &args);
        sink.duration_end(t, &by_text, time + 1, &[]);
        let by_key = format!("keyed{n}");
        sink.duration_begin_name(t, Name::new(n as u32, &by_key), time + 2, &args);
        sink.duration_end(t, &by_key, time + 3, &[]);
        time += 4;
    }
    // 16 and 17 arguments lose one and two, twice each.
    assert_eq!(sink.stats().dropped_args, 6);
    let bytes = sink.finish().unwrap();
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    let begins: Vec<_> = reader::read_events(&bytes)
        .unwrap()
        .into_iter()
        // A begin without arguments followed by its end is written as one complete.
        .filter(|e| matches!(e.kind, EventKind::Begin | EventKind::Complete { .. }))
        .collect();
    assert_eq!(begins.len(), 36);
    for (i, e) in begins.iter().enumerate() {
        let n = i / 2;
        let got: Vec<(&str, R<'_>)> = e.args.iter().map(|a| (a.name, a.value)).collect();
        let want: Vec<(&str, R<'_>)> = names[..n.min(15)]
            .iter()
            .enumerate()
            .map(|(k, name)| (name.as_str(), R::Int32(100 * n as i32 + k as i32)))
            .collect();
        assert_eq!(got, want, "{} with {n} arguments", e.name);
    }
}
