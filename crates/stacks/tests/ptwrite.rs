//! A ptwrite event (a value the program wrote into the Intel PT stream) is shown by
//! both writers the same way: a `PTWRITE` slice on its thread's track, carrying the
//! payload. The segments writer used to drop it.

use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};

/// Everything a writer emits, one line per call, args included.
#[derive(Default)]
struct Recorder {
    lines: Vec<String>,
    tracks: u32,
}

impl TraceSink for Recorder {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        self.tracks += 1;
        self.tracks
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        self.tracks += 1;
        self.tracks
    }
    fn duration_begin(&mut self, t: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.lines.push(format!("{t} {time} BEGIN {name} {args:?}"));
    }
    fn duration_end(&mut self, t: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.lines.push(format!("{t} {time} END {name} {args:?}"));
    }
    fn duration_complete(&mut self, t: u32, name: &str, s: i64, e: i64, args: &[Arg<'_>]) {
        self.lines
            .push(format!("{t} {s} COMPLETE {name} until {e} {args:?}"));
    }
    fn duration_instant(&mut self, t: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.lines
            .push(format!("{t} {time} INSTANT {name} {args:?}"));
    }
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
    let br = |kind, src, dst| EventData::Trace {
        change: None,
        kind: Some(kind),
        src,
        dst,
    };
    vec![
        ok(1_000, br(Kind::Call, at(0x1010, main), at(0x2000, f))),
        ok(
            1_020,
            EventData::Ptwrite {
                location: at(0x2008, f),
                data: 0x2a,
            },
        ),
        ok(1_040, br(Kind::Return, at(0x2010, f), at(0x1015, main))),
    ]
}

fn run<S: TraceSink, W: StackWriter<S>>(mut w: W, events: &[Event], s: &StringTable) -> S {
    for e in events {
        w.write_event(e, s);
    }
    w.end_of_input();
    w.finish(s)
}

fn config() -> WriterConfig {
    WriterConfig {
        earliest_time: 1_000,
        ..WriterConfig::default()
    }
}

#[test]
fn segments_writer_shows_ptwrite_as_legacy_does() {
    let mut s = StringTable::new();
    let events = events(&mut s);
    let legacy = run(
        LegacyWriter::new(Recorder::default(), config()),
        &events,
        &s,
    );
    let segments = run(
        SegmentsWriter::new(Recorder::default(), config()),
        &events,
        &s,
    );
    let ptwrites = |r: &Recorder| -> Vec<String> {
        r.lines
            .iter()
            .filter(|l| l.contains("PTWRITE"))
            .cloned()
            .collect()
    };
    let expected = ptwrites(&legacy);
    assert_eq!(expected.len(), 1, "legacy: {:#?}", legacy.lines);
    assert!(expected[0].contains("\"0x2a\""), "{expected:?}");
    assert_eq!(
        ptwrites(&segments),
        expected,
        "segments: {:#?}",
        segments.lines
    );
}

#[test]
fn ptwrite_is_in_time_order_among_the_slices() {
    // The segments writer writes each thread in time order (FXT needs it), so the
    // payload comes between the begin and the end of the frame that wrote it.
    let mut s = StringTable::new();
    let events = events(&mut s);
    let w = SegmentsWriter::new(TranscriptSink::default(), config());
    assert_eq!(
        run(w, &events, &s).lines,
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
    let mut s = StringTable::new();
    let events = events(&mut s);
    fn filtered<S: TraceSink, W: StackWriter<S>>(mut w: W, events: &[Event], s: &StringTable) -> S {
        // Only the ptwrite (the second event) is outside the range.
        for (i, e) in events.iter().enumerate() {
            w.write_event_filtered(e, i != 1, s);
        }
        w.finish(s)
    }
    let legacy = filtered(
        LegacyWriter::new(Recorder::default(), config()),
        &events,
        &s,
    );
    let segments = filtered(
        SegmentsWriter::new(Recorder::default(), config()),
        &events,
        &s,
    );
    for (writer, r) in [("legacy", legacy), ("segments", segments)] {
        assert!(
            !r.lines.iter().any(|l| l.contains("PTWRITE")),
            "{writer}: {:#?}",
            r.lines
        );
    }
}
