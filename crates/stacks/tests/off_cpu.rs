//! Sampled stacks and context switches: a frame the next sample does not share ends
//! when the thread left the CPU, not at that sample; time off CPU is an `[off-cpu]`
//! slice on top of the frames both samples share; without switches, a long gap ends
//! such frames one sampling period after their last sample. The legacy writer
//! (magic-trace's algorithm) ignores switches.

use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, Thread};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};

/// Counts the tracks a writer opens.
#[derive(Default)]
struct Tracks(usize);

impl TraceSink for Tracks {
    type Thread = usize;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        0
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> usize {
        self.0 += 1;
        self.0
    }
    fn duration_begin(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn duration_end(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn duration_complete(&mut self, _: usize, _: &str, _: i64, _: i64, _: &[Arg<'_>]) {}
    fn duration_instant(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn counter(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

const T: Thread = Thread {
    pid: Some(7),
    tid: Some(7),
};
const MS: u64 = 1_000_000;

/// A sample of `frames` (root first, `name@call-site` or `name`) at `time` on `thread`.
fn sample(s: &mut StringTable, thread: Thread, time: u64, frames: &[&str]) -> Event {
    let callstack: Vec<Location> = frames
        .iter()
        .map(|f| {
            let (name, ip) = match f.split_once('@') {
                Some((n, ip)) => (n, u64::from_str_radix(ip, 16).expect("hex call site")),
                None => (*f, 0x1000),
            };
            Location::new(ip, Symbol::FromPerf(s.intern(name)), 0)
        })
        .collect();
    Event::Ok {
        thread,
        time,
        in_transaction: false,
        data: EventData::StackSample {
            callstack: s.intern_stack(callstack),
        },
    }
}

/// The stack `thread` left the CPU in (a `sched:sched_switch` sample) at `time`.
fn switch_stack(s: &mut StringTable, thread: Thread, time: u64, frames: &[&str]) -> Event {
    let Event::Ok {
        data: EventData::StackSample { callstack },
        ..
    } = sample(s, thread, time, frames)
    else {
        unreachable!("sample() makes stack samples")
    };
    Event::Ok {
        thread,
        time,
        in_transaction: false,
        data: EventData::SwitchOutStack { callstack },
    }
}

fn switch(thread: Thread, time: u64, out: bool, preempt: bool) -> Event {
    Event::Ok {
        thread,
        time,
        in_transaction: false,
        data: EventData::Switch { out, preempt },
    }
}

fn segments(events: &[Event], s: &StringTable) -> Vec<String> {
    let mut w = SegmentsWriter::new(TranscriptSink::default(), WriterConfig::default());
    for e in events {
        w.write_event(e, s);
    }
    w.finish(s).lines
}

fn legacy(events: &[Event], s: &StringTable) -> Vec<String> {
    let mut w = LegacyWriter::new(TranscriptSink::default(), WriterConfig::default());
    for e in events {
        w.write_event(e, s);
    }
    w.finish(s).lines
}

/// `compute_a; usleep; compute_b`: compute_a ends at the switch-out, the sleep is off
/// CPU under main, compute_b starts at its first sample; main, calling from another call
/// site after the sleep, is the same call throughout (one slice).
#[test]
fn a_sleep_ends_the_function_before_it_and_shows_off_cpu() {
    let mut s = StringTable::new();
    let a = ["main@100", "compute_a"];
    let b = ["main@200", "compute_b"];
    let events = vec![
        sample(&mut s, T, 0, &a),
        sample(&mut s, T, MS, &a),
        sample(&mut s, T, 2 * MS, &a),
        switch(T, 2 * MS + MS / 2, true, false),
        switch(T, 1500 * MS, false, false),
        sample(&mut s, T, 1500 * MS + MS / 2, &b),
        sample(&mut s, T, 1501 * MS + MS / 2, &b),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN compute_a",
            "->    2.5ms END   compute_a",
            "->    2.5ms BEGIN [off-cpu]",
            "->     1.5s END   [off-cpu]",
            "->     1.5s BEGIN compute_b",
            "->   1.502s END   compute_b",
            "->   1.502s END   main",
        ]
    );
}

/// A thread preempted inside a function that goes on after it: the function stays
/// open, with the preemption nested in it; several intervals between two samples each
/// show, and what the thread shares with the next sample (main) stays open.
#[test]
fn frames_the_next_sample_shares_stay_open_through_time_off_cpu() {
    let mut s = StringTable::new();
    let f = ["main@100", "f"];
    let g = ["main@100", "f@300", "g"];
    let events = vec![
        sample(&mut s, T, 0, &f),
        switch(T, MS, true, true),
        switch(T, 3 * MS, false, false),
        sample(&mut s, T, 4 * MS, &g),
        switch(T, 5 * MS, true, false),
        switch(T, 6 * MS, false, false),
        switch(T, 7 * MS, true, false),
        switch(T, 8 * MS, false, false),
        sample(&mut s, T, 9 * MS, &["main@100", "h"]),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN f",
            "->      1ms BEGIN [off-cpu: preempted]",
            "->      3ms END   [off-cpu: preempted]",
            "->      4ms BEGIN g",
            "->      5ms END   g",
            "->      5ms END   f",
            "->      5ms BEGIN [off-cpu]",
            "->      6ms END   [off-cpu]",
            "->      7ms BEGIN [off-cpu]",
            "->      8ms END   [off-cpu]",
            "->      9ms BEGIN h",
            "->      9ms END   h",
            "->      9ms END   main",
        ]
    );
}

/// `compute_a; sleeper() { nanosleep }; compute_b` with the stack the thread left the
/// CPU in: `sleeper` and `nanosleep` begin when it left, the sleep is `[off-cpu]` inside
/// them, and they end at the next sample (which no longer holds them); `main` is one
/// call throughout. A preemption with its stack nests in the function preempted, which
/// goes on. The stacks count as no sample (`samples` stays the samples').
#[test]
fn time_off_cpu_nests_in_the_stack_the_thread_left_in() {
    let mut s = StringTable::new();
    let a = ["main@100", "compute_a"];
    let events = vec![
        sample(&mut s, T, 0, &a),
        sample(&mut s, T, MS, &a),
        switch_stack(&mut s, T, 2 * MS, &["main@200", "sleeper@300", "nanosleep"]),
        switch(T, 2 * MS + 1000, true, false),
        switch(T, 300 * MS, false, false),
        sample(&mut s, T, 301 * MS, &["main@400", "compute_b"]),
        switch_stack(&mut s, T, 302 * MS, &["main@400", "compute_b"]),
        switch(T, 302 * MS + 1000, true, true),
        switch(T, 303 * MS, false, false),
        sample(&mut s, T, 304 * MS, &["main@400", "compute_b"]),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN compute_a",
            "->      2ms END   compute_a",
            "->      2ms BEGIN sleeper",
            "->      2ms BEGIN nanosleep",
            "->  2.001ms BEGIN [off-cpu]",
            "->    300ms END   [off-cpu]",
            "->    301ms END   nanosleep",
            "->    301ms END   sleeper",
            "->    301ms BEGIN compute_b",
            "-> 302.001ms BEGIN [off-cpu: preempted]",
            "->    303ms END   [off-cpu: preempted]",
            "->    304ms END   compute_b",
            "->    304ms END   main",
        ]
    );
    // Without the stacks, the same switches put the sleep under main.
    let plain: Vec<Event> = events
        .iter()
        .filter(|e| {
            !matches!(
                e,
                Event::Ok {
                    data: EventData::SwitchOutStack { .. },
                    ..
                }
            )
        })
        .cloned()
        .collect();
    assert!(segments(&plain, &s).iter().all(|l| !l.contains("sleeper")));
}

/// The end of input: the stack ends at the first switch-out after the last sample; an
/// interval that came back shows, the last switch-out (exit, or still blocked) does not.
#[test]
fn at_the_end_the_stack_ends_when_the_thread_left_the_cpu() {
    let mut s = StringTable::new();
    let events = vec![
        sample(&mut s, T, 0, &["main@100", "f"]),
        sample(&mut s, T, MS, &["main@100", "f"]),
        switch(T, 2 * MS, true, false),
        switch(T, 5 * MS, false, false),
        switch(T, 6 * MS, true, false),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN f",
            "->      2ms END   f",
            "->      2ms END   main",
            "->      2ms BEGIN [off-cpu]",
            "->      5ms END   [off-cpu]",
        ]
    );
    // Only the last switch-out: the stack ends there.
    let events = vec![
        sample(&mut s, T, 0, &["main@100", "f"]),
        sample(&mut s, T, MS, &["main@100", "f"]),
        switch(T, 2 * MS, true, false),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN f",
            "->      2ms END   f",
            "->      2ms END   main",
        ]
    );
}

/// Switches of a thread never sampled open no track; a switch-in without a switch-out
/// (recording began while the thread was off CPU) ends nothing.
#[test]
fn switches_alone_show_nothing() {
    let mut s = StringTable::new();
    let other = Thread {
        pid: Some(7),
        tid: Some(8),
    };
    let events = vec![
        switch(other, 0, true, false),
        switch(T, MS / 2, false, false),
        sample(&mut s, T, MS, &["main@100", "f"]),
        switch(other, 3 * MS, false, false),
        sample(&mut s, T, 2 * MS, &["main@100", "f"]),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      1ms BEGIN main",
            "->      1ms BEGIN f",
            "->      2ms END   f",
            "->      2ms END   main",
        ]
    );
    let mut w = SegmentsWriter::new(Tracks::default(), WriterConfig::default());
    for e in &events {
        w.write_event(e, &s);
    }
    assert_eq!(w.finish(&s).0, 1, "one track: the sampled thread's");
}

/// Without switches in the recording, a gap of many periods ends the frames the next
/// sample does not share one period after their last sample (the period as estimated:
/// the shorter gaps, here 0.9 ms); gaps of about a period (a late timer) change nothing.
#[test]
fn without_switches_a_long_gap_ends_frames_a_period_after_their_last_sample() {
    let mut s = StringTable::new();
    let mut events = Vec::new();
    for i in 0..12 {
        // Timer jitter: gaps of 0.9 to 1.1 ms.
        let t = i * MS + if i % 2 == 1 { MS / 10 } else { 0 };
        events.push(sample(&mut s, T, t, &["main@100", "compute_a"]));
    }
    events.push(sample(
        &mut s,
        T,
        12 * MS,
        &["main@100", "compute_a@400", "x"],
    ));
    events.push(sample(&mut s, T, 500 * MS, &["main@200", "compute_b"]));
    events.push(sample(&mut s, T, 501 * MS, &["main@200", "compute_b"]));
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN main",
            "->      0ns BEGIN compute_a",
            "->     12ms BEGIN x",
            "->   12.9ms END   x",
            "->   12.9ms END   compute_a",
            "->    500ms BEGIN compute_b",
            "->    501ms END   compute_b",
            "->    501ms END   main",
        ]
    );
}

/// magic-trace's algorithm ignores switches: the same slices as without them.
#[test]
fn the_legacy_writer_ignores_switches() {
    let mut s = StringTable::new();
    let a = ["main@100", "compute_a"];
    let b = ["main@200", "compute_b"];
    let samples = vec![
        sample(&mut s, T, 0, &a),
        sample(&mut s, T, MS, &a),
        sample(&mut s, T, 1500 * MS, &b),
        sample(&mut s, T, 1501 * MS, &b),
    ];
    let mut with = samples.clone();
    with.insert(2, switch(T, 1500 * MS - 1, false, false));
    with.insert(2, switch(T, 2 * MS, true, false));
    let plain = legacy(&samples, &s);
    assert!(plain.iter().any(|l| l.contains("END   compute_a")));
    assert_eq!(legacy(&with, &s), plain);
}

/// A branch trace (`perf script` of Intel PT may print switches too) is exact about
/// when the thread ran: switches change nothing in it.
#[test]
fn switches_do_not_change_a_branch_trace() {
    let mut s = StringTable::new();
    let at = |s: &mut StringTable, ip, f: &str| {
        let loc = Location::new(ip, Symbol::FromPerf(s.intern(f)), 0);
        s.intern_location(loc)
    };
    let branch = |time, kind, src, dst| Event::Ok {
        thread: T,
        time,
        in_transaction: false,
        data: EventData::Trace {
            change: None,
            kind: Some(kind),
            src,
            dst,
        },
    };
    let (m1, f0, f1, m2) = (
        at(&mut s, 0x110, "main"),
        at(&mut s, 0x200, "f"),
        at(&mut s, 0x210, "f"),
        at(&mut s, 0x115, "main"),
    );
    let plain = vec![
        branch(MS, Kind::Call, m1, f0),
        branch(9 * MS, Kind::Return, f1, m2),
    ];
    let mut with = plain.clone();
    with.insert(1, switch(T, 5 * MS, false, false));
    with.insert(1, switch(T, 2 * MS, true, false));
    with.push(switch(T, 10 * MS, true, false));
    with.push(switch(T, 11 * MS, false, false));
    let expected = segments(&plain, &s);
    assert!(
        expected.iter().any(|l| l.contains("END   f")),
        "{expected:?}"
    );
    let got = segments(&with, &s);
    assert_eq!(got, expected);
}

/// perf's unwinder now and then stops early: one sample's stack starts at `run_batch`,
/// not at `_start`. It goes on the frames the stack before had below `run_batch`, so
/// `main` (and `run_batch`) stay one call, as the demo's trace must show.
#[test]
fn a_stack_the_unwinder_cut_short_goes_on_the_frames_below_it() {
    let mut s = StringTable::new();
    let whole = ["_start@10", "main@100", "run_batch@200", "snprintf"];
    let cut = ["run_batch@200", "snprintf@300", "vfprintf"];
    let events = vec![
        sample(&mut s, T, 0, &whole),
        sample(&mut s, T, MS, &cut),
        sample(&mut s, T, 2 * MS, &whole),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN _start",
            "->      0ns BEGIN main",
            "->      0ns BEGIN run_batch",
            "->      0ns BEGIN snprintf",
            "->      1ms BEGIN vfprintf",
            "->      2ms END   vfprintf",
            "->      2ms END   snprintf",
            "->      2ms END   run_batch",
            "->      2ms END   main",
            "->      2ms END   _start",
        ]
    );
}

/// Only a stack whose outermost function the current stack holds above its root is made
/// whole: another root (a new program after exec, a stack the current one knows
/// nothing of) is taken as it is, and in recursion the outermost place is used.
#[test]
fn only_stacks_rooted_inside_the_current_one_are_made_whole() {
    let mut s = StringTable::new();
    let events = vec![
        sample(&mut s, T, 0, &["_start@10", "main@100", "f@200", "g"]),
        // Rooted in a function the stack before does not hold: taken as it is.
        sample(&mut s, T, MS, &["other@50", "h"]),
        sample(
            &mut s,
            T,
            2 * MS,
            &["_start@10", "main@100", "f@200", "f@210", "f"],
        ),
        // Rooted in `f`, held twice: it goes on `main`, under the outer `f`.
        sample(&mut s, T, 3 * MS, &["f@200", "k"]),
    ];
    assert_eq!(
        segments(&events, &s),
        [
            "->      0ns BEGIN _start",
            "->      0ns BEGIN main",
            "->      0ns BEGIN f",
            "->      0ns BEGIN g",
            "->      1ms END   g",
            "->      1ms END   f",
            "->      1ms END   main",
            "->      1ms END   _start",
            "->      1ms BEGIN other",
            "->      1ms BEGIN h",
            "->      2ms END   h",
            "->      2ms END   other",
            "->      2ms BEGIN _start",
            "->      2ms BEGIN main",
            "->      2ms BEGIN f",
            "->      2ms BEGIN f",
            "->      2ms BEGIN f",
            "->      3ms END   f",
            "->      3ms END   f",
            "->      3ms BEGIN k",
            "->      3ms END   k",
            "->      3ms END   f",
            "->      3ms END   main",
            "->      3ms END   _start",
        ]
    );
}
