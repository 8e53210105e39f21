//! The segments writer stitching across decode errors inside a recursion, where the
//! function a new segment starts in is open at several depths.
//!
//! Measured on Debian's python3.11 (`realworld_sim`, python3 snapshot with 8 decode
//! errors): the recursion through the interpreter's C code oscillated at a steady depth,
//! and each gap was stitched on the innermost frame of the function the new segment
//! began in, as if the gap had only made calls. Every gap deepened the stack by a level
//! that never returned: 58 % suffix-correct, against 100 % once the alignment counts the
//! calls a gap must have made as well as its returns.

use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
use ptscope_event::{Sym, TraceStateChange};
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{StackWriter, WriterConfig};

const THREAD: Thread = Thread {
    pid: Some(1),
    tid: Some(1),
};

fn at(ip: u64, sym: Sym) -> Location {
    // Offset 1: inside the function, never taken for its entry.
    Location::new(ip, Symbol::FromPerf(sym), 1)
}

fn branch(s: &mut StringTable, time: u64, kind: Kind, src: Location, dst: Location) -> Event {
    let (src, dst) = (s.intern_location(src), s.intern_location(dst));
    Event::Ok {
        thread: THREAD,
        time,
        in_transaction: false,
        data: EventData::Trace {
            change: None,
            kind: Some(kind),
            src,
            dst,
        },
    }
}

/// A decode error at `time`, then tracing resumes at `resume` (perf's `tr strt`).
fn gap(s: &mut StringTable, time: u64, resume: Location) -> [Event; 2] {
    let unknown = s.intern_location(Location::new(0, Symbol::Unknown, 0));
    let resume = s.intern_location(resume);
    [
        Event::DecodeError {
            thread: THREAD,
            time: Some(time),
            ip: None,
            message: s.intern("Overflow packet"),
        },
        Event::Ok {
            thread: THREAD,
            time,
            in_transaction: false,
            data: EventData::Trace {
                change: Some(TraceStateChange::Start),
                kind: None,
                src: unknown,
                dst: resume,
            },
        },
    ]
}

/// The deepest stack the transcript shows (slices open at once).
fn max_depth(lines: &[String]) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for l in lines {
        if l.contains(" BEGIN ") {
            depth += 1;
            max = max.max(depth);
        } else if l.contains(" END ") {
            depth = depth.saturating_sub(1);
        }
    }
    max
}

/// `main > f > g > f > g`, then ten times: a gap in which `g` returns into `f`, tracing
/// resuming in `f`, which returns into `g`, which recurses back to `f > g`. The stack
/// never goes deeper than 5. Each new segment knows only `g > f` (the trace ends before
/// anything returns further), which lines up with the open `g` at depth 3 (one return
/// in the gap) or at depth 5 (one call in the gap): the same cost, and the longer
/// match, depth 3, is the one that keeps the depth.
#[test]
fn gaps_in_a_steady_recursion_do_not_deepen_the_stack() {
    let mut s = StringTable::new();
    let (main, f, g) = (s.intern("main"), s.intern("f"), s.intern("g"));
    let mut ev = vec![
        branch(&mut s, 0, Kind::Call, at(0x101, main), at(0x201, f)),
        branch(&mut s, 10, Kind::Call, at(0x211, f), at(0x301, g)),
        branch(&mut s, 20, Kind::Call, at(0x311, g), at(0x201, f)),
        branch(&mut s, 30, Kind::Call, at(0x211, f), at(0x301, g)),
    ];
    let mut t = 40;
    for _ in 0..10 {
        ev.extend(gap(&mut s, t, at(0x220, f)));
        ev.push(branch(
            &mut s,
            t + 10,
            Kind::Return,
            at(0x230, f),
            at(0x312, g),
        ));
        ev.push(branch(
            &mut s,
            t + 20,
            Kind::Call,
            at(0x311, g),
            at(0x201, f),
        ));
        ev.push(branch(
            &mut s,
            t + 30,
            Kind::Call,
            at(0x211, f),
            at(0x301, g),
        ));
        t += 40;
    }
    let mut w = SegmentsWriter::new(TranscriptSink::default(), WriterConfig::default());
    for e in &ev {
        w.write_event(e, &s);
    }
    let out = w.finish(&s);
    assert_eq!(
        max_depth(&out.lines),
        5,
        "main > f > g > f > g at most:\n{}",
        out.lines.join("\n")
    );
}
