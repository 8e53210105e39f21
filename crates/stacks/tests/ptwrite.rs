//! A ptwrite event (a value the program wrote into the Intel PT stream) is shown by
//! both writers the same way: a `PTWRITE` slice on its thread's track, carrying the
//! payload. The segments writer used to drop it.

use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};

/// The complete slices a writer emits (ptwrite is one), args included.
#[derive(Default)]
struct Completes {
    lines: Vec<String>,
    tracks: u32,
}

impl TraceSink for Completes {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        self.allocate_thread(0, "")
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        self.tracks += 1;
        self.tracks
    }
    fn duration_complete(&mut self, t: u32, name: &str, s: i64, e: i64, args: &[Arg<'_>]) {
        self.lines.push(format!("{t} {name} {s}..{e} {args:?}"));
    }
    fn duration_begin(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn duration_end(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn duration_instant(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn counter(&mut self, _: u32, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

/// `main` calls `f`, which writes 0x2a with ptwrite, then returns.
fn events(s: &mut StringTable) -> Vec<Event> {
    let (main, f) = (s.intern("main"), s.intern("f"));
    let at = |ip, sym| Location::new(ip, Symbol::FromPerf(sym), 0);
    let thread = Thread {
        pid: Some(7),
        tid: Some(7),
    };
    let ok = |time, data| Event::Ok {
        thread,
        time,
        in_transaction: false,
        data,
    };
    let mut br = |kind, src, dst| EventData::Trace {
        change: None,
        kind: Some(kind),
        src: s.intern_location(src),
        dst: s.intern_location(dst),
    };
    let call = br(Kind::Call, at(0x1010, main), at(0x2000, f));
    let ret = br(Kind::Return, at(0x2010, f), at(0x1015, main));
    let ptwrite = EventData::Ptwrite {
        location: at(0x2008, f),
        data: 0x2a,
    };
    vec![ok(1_000, call), ok(1_020, ptwrite), ok(1_040, ret)]
}

/// Runs `events` through `w`, event `i` inside the `--filter` range if `keep(i)`.
fn run<S: TraceSink, W: StackWriter<S>>(mut w: W, keep: impl Fn(usize) -> bool) -> S {
    let mut s = StringTable::new();
    for (i, e) in events(&mut s).iter().enumerate() {
        w.write_event_filtered(e, keep(i), &s);
    }
    w.end_of_input();
    w.finish(&s)
}

fn config() -> WriterConfig {
    WriterConfig {
        earliest_time: 1_000,
        ..WriterConfig::default()
    }
}

/// The complete slices of both writers: (legacy, segments).
fn both(keep: impl Fn(usize) -> bool + Copy) -> (Vec<String>, Vec<String>) {
    let legacy = run(LegacyWriter::new(Completes::default(), config()), keep);
    let segments = run(SegmentsWriter::new(Completes::default(), config()), keep);
    (legacy.lines, segments.lines)
}

#[test]
fn segments_writer_shows_ptwrite_as_legacy_does() {
    let (legacy, segments) = both(|_| true);
    assert_eq!(legacy.len(), 1, "legacy: {legacy:#?}");
    assert!(legacy[0].contains("PTWRITE 20..20"), "{legacy:?}");
    assert!(legacy[0].contains("Str(\"0x2a\")"), "{legacy:?}");
    assert_eq!(segments, legacy);
}

#[test]
fn ptwrite_is_in_time_order_among_the_slices() {
    // The segments writer writes each thread in time order (FXT needs it), so the
    // payload comes between the begin and the end of the frame that wrote it.
    let w = SegmentsWriter::new(TranscriptSink::default(), config());
    assert_eq!(
        run(w, |_| true).lines,
        [
            "INPUT TRACE STREAM ENDED, any lines printed below this were deferred",
            "->      0ns BEGIN main",
            "->      0ns BEGIN f",
            "->     20ns BEGIN PTWRITE",
            "->     20ns END   PTWRITE",
            "->     40ns END   f",
            "->     40ns END   main",
        ]
    );
}

#[test]
fn ptwrite_outside_a_filter_range_is_left_out_by_both() {
    // Only the ptwrite (the second event) is outside the range.
    let (legacy, segments) = both(|i| i != 1);
    assert_eq!(legacy, Vec::<String>::new());
    assert_eq!(segments, legacy);
}
