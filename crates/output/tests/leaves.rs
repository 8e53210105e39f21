//! The sink writes a leaf call (a begin without arguments whose thread's next event is
//! its end) as one complete event. These tests check that the slices a reader rebuilds are exactly the
//! ones the sink was given, whatever mix of events surrounds them; and that begins named
//! by number write what begins named by text write.

use ptscope_fxt::reader::{self, ArgValue as R, EventKind};
use ptscope_output::FxtSink;
use ptscope_stacks::{Arg, ArgValue, Name, TraceSink};

/// A slice as a person sees it: thread, name, start, end, depth, and its args as text.
type Slice = (u64, String, u64, u64, usize, String);

/// Rebuilds every slice (and instant, as a zero-length slice at its depth) from FXT bytes.
fn slices_in(bytes: &[u8]) -> Vec<Slice> {
    let mut open: std::collections::HashMap<u64, Vec<(String, u64, String)>> = Default::default();
    let mut out = Vec::new();
    let args_text = |a: &reader::Args<'_>| {
        a.iter()
            .map(|a| {
                let v = match a.value {
                    R::Int32(v) => v.to_string(),
                    R::Int64(v) => v.to_string(),
                    R::Pointer(p) => format!("{p:#x}"),
                    R::Str(s) => s.to_string(),
                    other => format!("{other:?}"),
                };
                format!("{}={v}", a.name)
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    for e in reader::read_events(bytes).expect("the sink's output reads back") {
        let stack = open.entry(e.tid).or_default();
        match e.kind {
            EventKind::Begin => stack.push((e.name.to_string(), e.timestamp, args_text(&e.args))),
            EventKind::End => {
                let (name, start, args) = stack.pop().expect("an end closes an open begin");
                out.push((e.tid, name, start, e.timestamp, stack.len(), args));
            }
            EventKind::Complete { end } => out.push((
                e.tid,
                e.name.to_string(),
                e.timestamp,
                end,
                stack.len(),
                args_text(&e.args),
            )),
            EventKind::Instant => out.push((
                e.tid,
                format!("instant {}", e.name),
                e.timestamp,
                e.timestamp,
                stack.len(),
                String::new(),
            )),
            _ => {}
        }
    }
    for (tid, stack) in open {
        assert!(stack.is_empty(), "thread {tid} left open: {stack:?}");
    }
    out.sort();
    out
}

/// One step a stack writer may take on a thread.
#[derive(Clone, Debug)]
enum Op {
    Begin(&'static str, bool),
    End(bool),
    Instant,
    Complete,
}

/// xorshift64*: a fixed, dependency-free sequence per seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMES: [&str; 5] = ["main", "parse", "read", "std::vec::Vec<T>::push", "f"];

/// Drives `ops` (per thread: koid-order tracks 2 and 3) into a sink, and returns what
/// the sink was told as slices (the truth) together with the FXT it wrote.
fn run(ops: &[(usize, Op)]) -> (Vec<Slice>, Vec<u8>) {
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let threads = [
        sink.allocate_thread(pid, "a"),
        sink.allocate_thread(pid, "b"),
    ];
    let mut truth = Vec::new();
    let mut stacks: [Vec<(String, u64, String)>; 2] = Default::default();
    let mut time = 0u64;
    for (t, op) in ops {
        time += 1 + (time % 3);
        let tid = *t as u64 + 2;
        let th = threads[*t];
        let stack = &mut stacks[*t];
        match *op {
            Op::Begin(name, with_args) => {
                let args = [
                    Arg::new("address", ArgValue::Pointer(0x4000 + time)),
                    Arg::new("symbol", ArgValue::Interned(name)),
                ];
                let args: &[Arg<'_>] = if with_args { &args } else { &[] };
                let text = if with_args {
                    format!("address={:#x},symbol={name}", 0x4000 + time)
                } else {
                    String::new()
                };
                // The name is passed from a fresh buffer each time, as a copy would be.
                let owned = name.to_string();
                sink.duration_begin(th, &owned, time as i64, args);
                stack.push((name.to_string(), time, text));
            }
            Op::End(with_args) => {
                let Some((name, start, args)) = stack.pop() else {
                    continue;
                };
                let end_args = [Arg::new("returned", ArgValue::Int(7))];
                let end_args: &[Arg<'_>] = if with_args { &end_args } else { &[] };
                sink.duration_end(th, &name, time as i64, end_args);
                truth.push((tid, name, start, time, stack.len(), args));
            }
            Op::Instant => {
                sink.duration_instant(th, "mark", time as i64, &[]);
                truth.push((
                    tid,
                    "instant mark".into(),
                    time,
                    time,
                    stack.len(),
                    String::new(),
                ));
            }
            Op::Complete => {
                sink.duration_complete(th, "io", time as i64 - 1, time as i64, &[]);
                truth.push((tid, "io".into(), time - 1, time, stack.len(), String::new()));
            }
        }
    }
    for (t, stack) in stacks.iter_mut().enumerate() {
        while let Some((name, start, args)) = stack.pop() {
            time += 1;
            sink.duration_end(threads[t], &name, time as i64, &[]);
            truth.push((t as u64 + 2, name, start, time, stack.len(), args));
        }
    }
    let bytes = sink.finish().expect("in memory");
    truth.sort();
    (truth, bytes)
}

#[test]
fn a_leaf_is_one_complete_event_and_its_callers_stay_begin_and_end() {
    let ops = [
        (0, Op::Begin("main", false)),
        (0, Op::Begin("parse", false)),
        (0, Op::End(false)),
        (0, Op::Begin("f", true)),
        (0, Op::End(false)),
        (0, Op::Begin("read", false)),
        (0, Op::Instant),
        (0, Op::End(false)),
        (0, Op::End(false)),
    ];
    let (truth, bytes) = run(&ops);
    assert_eq!(slices_in(&bytes), truth);
    let kinds: Vec<_> = reader::read_events(&bytes)
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.name))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EventKind::Begin, "main"),
            (EventKind::Complete { end: 4 }, "parse"),
            (EventKind::Begin, "f"),
            (EventKind::End, "f"),
            (EventKind::Begin, "read"),
            (EventKind::Instant, "mark"),
            (EventKind::End, "read"),
            (EventKind::End, "main"),
        ],
        "parse (a leaf) is one complete event; f has arguments (not held) and read an \
         instant inside, so they are not"
    );
}

#[test]
fn slices_read_back_are_the_slices_given_for_any_mix_of_events() {
    let mut leaves_seen = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let n = 1 + rng.below(60) as usize;
        let ops: Vec<(usize, Op)> = (0..n)
            .map(|_| {
                let t = rng.below(2) as usize;
                let op = match rng.below(10) {
                    0..=3 => Op::Begin(NAMES[rng.below(5) as usize], rng.below(2) == 0),
                    4..=7 => Op::End(rng.below(8) == 0),
                    8 => Op::Instant,
                    _ => Op::Complete,
                };
                (t, op)
            })
            .collect();
        let (truth, bytes) = run(&ops);
        assert_eq!(slices_in(&bytes), truth, "seed {seed}: {ops:?}");
        leaves_seen += reader::read_events(&bytes)
            .unwrap()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Complete { .. }) && e.name != "io")
            .count();
    }
    assert!(
        leaves_seen > 100,
        "leaves written as complete events: {leaves_seen}"
    );
}

#[test]
fn a_held_begin_survives_a_cut_and_a_full_string_table() {
    // Enough distinct names between a begin and its end to evict the begin's name from
    // the writer's string table, then a cut: the held begin must still be named right.
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let a = sink.allocate_thread(pid, "a");
    let b = sink.allocate_thread(pid, "b");
    sink.duration_begin(a, "outer", 1, &[]);
    sink.duration_begin(a, "held", 2, &[]);
    let names: Vec<String> = (0..40_000).map(|i| format!("name{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        sink.duration_complete(b, n, 3 + i as i64, 3 + i as i64, &[]);
    }
    sink.duration_end(a, "held", 50_000, &[]);
    sink.duration_begin(a, "held across a cut", 50_001, &[]);
    sink.cut();
    sink.duration_end(a, "held across a cut", 50_002, &[]);
    sink.duration_end(a, "outer", 50_003, &[]);
    let stats = sink.writer_stats().clone();
    let bytes = sink.finish().unwrap();
    assert!(
        stats.string_evictions > 0,
        "the names evicted others: {stats:?}"
    );
    let slices = slices_in(&bytes);
    let on_a: Vec<_> = slices.iter().filter(|s| s.0 == 2).collect();
    assert_eq!(
        on_a,
        vec![
            &(2, "held".to_string(), 2, 50_000, 1, String::new()),
            &(
                2,
                "held across a cut".to_string(),
                50_001,
                50_002,
                1,
                String::new()
            ),
            &(2, "outer".to_string(), 1, 50_003, 0, String::new()),
        ]
    );
}

/// One step of [`numbered_names_write_the_bytes_names_by_text_write`]'s threads.
#[derive(Clone, Debug)]
enum Step {
    /// A begin of name `name` of table `table` (numbered by its place there, or
    /// `u32::MAX`: too large to keep), from the table or `moved` to a new copy.
    Begin {
        table: usize,
        name: usize,
        large: bool,
        moved: bool,
        args: bool,
    },
    End,
    Instant,
    /// A cut: the string table is forgotten, every token goes stale.
    Cut,
    /// So many other names that the table evicts (the begins' names among them).
    Flood,
}

/// Drives `steps` into a sink, naming begins by text or by number.
fn drive(steps: &[(usize, Step)], numbered: bool) -> Vec<u8> {
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("p");
    let threads = [
        sink.allocate_thread(pid, "a"),
        sink.allocate_thread(pid, "b"),
    ];
    let mut depth = [0usize; 2];
    let flood: Vec<String> = (0..33_000).map(|i| format!("flood{i}")).collect();
    // Two callers' tables at once (two processes' functions): one number, two texts.
    let tables: [Vec<String>; 2] = [
        NAMES.iter().map(|n| n.to_string()).collect(),
        NAMES.iter().rev().map(|n| n.to_string()).collect(),
    ];
    for (time, (t, step)) in steps.iter().enumerate() {
        let (th, time) = (threads[*t], time as i64 * 10);
        match *step {
            Step::Begin {
                table,
                name,
                large,
                moved,
                args,
            } => {
                let text = &tables[table][name];
                let a = [Arg::new("symbol", ArgValue::Interned(text))];
                let a: &[Arg<'_>] = if args { &a } else { &[] };
                // A table that grew has its names elsewhere.
                let copy = text.clone();
                let text = if moved { &copy } else { text };
                let key = if large { u32::MAX } else { name as u32 };
                if numbered {
                    sink.duration_begin_name(th, Name::new(key, text), time, a);
                } else {
                    sink.duration_begin(th, text, time, a);
                }
                depth[*t] += 1;
            }
            Step::End if depth[*t] > 0 => {
                depth[*t] -= 1;
                sink.duration_end(th, "", time, &[]);
            }
            Step::End => {}
            Step::Instant => sink.duration_instant(th, "mark", time, &[]),
            Step::Cut => sink.cut(),
            Step::Flood => {
                for f in &flood {
                    sink.duration_complete(threads[1 - *t], f, time, time, &[]);
                }
            }
        }
    }
    for (t, d) in depth.iter().enumerate() {
        for _ in 0..*d {
            sink.duration_end(threads[t], "", 1 << 40, &[]);
        }
    }
    sink.finish().expect("in memory")
}

#[test]
fn numbered_names_write_the_bytes_names_by_text_write() {
    for seed in 1..=200u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let n = 1 + rng.below(80) as usize;
        let steps: Vec<(usize, Step)> = (0..n)
            .map(|_| {
                let t = rng.below(2) as usize;
                let step = match rng.below(20) {
                    0..=8 => Step::Begin {
                        table: usize::from(rng.below(4) == 0),
                        name: rng.below(5) as usize,
                        large: rng.below(8) == 0,
                        moved: rng.below(4) == 0,
                        args: rng.below(4) == 0,
                    },
                    9..=16 => Step::End,
                    17 => Step::Instant,
                    18 => Step::Cut,
                    _ if seed % 20 == 0 => Step::Flood,
                    _ => Step::End,
                };
                (t, step)
            })
            .collect();
        let by_text = drive(&steps, false);
        let by_number = drive(&steps, true);
        assert!(
            by_text == by_number,
            "seed {seed}: the bytes differ; slices by text {:?}, by number {:?}; {steps:?}",
            slices_in(&by_text),
            slices_in(&by_number)
        );
    }
}
