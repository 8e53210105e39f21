//! Both writers group threads under their process and name processes and threads from
//! `Comm`/`Fork` events: a name arriving later renames, a fork passes the parent's
//! name on, a configured command line wins, and name events neither open tracks nor
//! move time.

use ptscope_event::{Event, EventData, Location, StringTable, Symbol, Thread};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::segments::SegmentsWriter;
use ptscope_stacks::{Arg, StackWriter, TraceSink, WriterConfig};
use std::collections::BTreeMap;

/// Keeps the latest name of every group and track, and each track's group and slices.
#[derive(Default)]
struct Names {
    groups: Vec<String>,
    tracks: Vec<(u32, String)>,
    slices: Vec<(usize, String, i64)>,
}

impl Names {
    /// Group name → its tracks' names.
    fn tree(&self) -> BTreeMap<String, Vec<String>> {
        let mut t: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (g, name) in &self.tracks {
            t.entry(self.groups[*g as usize].clone())
                .or_default()
                .push(name.clone());
        }
        t
    }
}

impl TraceSink for Names {
    type Thread = usize;
    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.groups.push(name.into());
        self.groups.len() as u32 - 1
    }
    fn allocate_thread(&mut self, pid: u32, name: &str) -> usize {
        self.tracks.push((pid, name.into()));
        self.tracks.len() - 1
    }
    fn rename_pid(&mut self, pid: u32, name: &str) {
        self.groups[pid as usize] = name.into();
    }
    fn rename_thread(&mut self, thread: usize, name: &str) {
        self.tracks[thread].1 = name.into();
    }
    fn duration_begin(&mut self, t: usize, name: &str, time: i64, _: &[Arg<'_>]) {
        self.slices.push((t, name.into(), time));
    }
    fn duration_end(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn duration_complete(&mut self, t: usize, name: &str, s: i64, _: i64, _: &[Arg<'_>]) {
        self.slices.push((t, name.into(), s));
    }
    fn duration_instant(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn counter(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

fn th(pid: u32, tid: u32) -> Thread {
    Thread {
        pid: Some(pid),
        tid: Some(tid),
    }
}

fn ev(thread: Thread, time: u64, data: EventData) -> Event {
    Event::Ok {
        thread,
        time,
        data,
        in_transaction: false,
    }
}

/// A shell (10) forks a child (11) that execs `prog`, which starts a thread (12) that
/// names itself, and a thread (13) that never does; a process (20) perf never named.
fn events(s: &mut StringTable) -> Vec<Event> {
    let sample = |s: &mut StringTable, t: Thread, time: u64, f: &str| {
        let f = Symbol::FromPerf(s.intern(f));
        ev(
            t,
            time,
            EventData::StackSample {
                callstack: s.intern_stack([Location::new(0x1000, f, 0)]),
            },
        )
    };
    let comm = |s: &mut StringTable, t: Thread, time: u64, name: &str, exec: bool| {
        ev(
            t,
            time,
            EventData::Comm {
                name: s.intern(name),
                exec,
            },
        )
    };
    vec![
        // perf's names for threads alive at the start come at time 0.
        comm(s, th(10, 10), 0, "sh", false),
        sample(s, th(10, 10), 1_000, "sh_main"),
        ev(th(11, 11), 1_100, EventData::Fork { parent: th(10, 10) }),
        sample(s, th(11, 11), 1_200, "sh_child"),
        comm(s, th(11, 11), 1_300, "prog", true),
        sample(s, th(11, 11), 1_400, "prog_main"),
        ev(th(11, 12), 1_500, EventData::Fork { parent: th(11, 11) }),
        ev(th(11, 13), 1_510, EventData::Fork { parent: th(11, 11) }),
        sample(s, th(11, 12), 1_600, "work"),
        comm(s, th(11, 12), 1_700, "worker-1", false),
        sample(s, th(11, 12), 1_800, "work"),
        sample(s, th(11, 13), 1_900, "other"),
        sample(s, th(20, 21), 2_000, "unnamed"),
    ]
}

fn run<W: StackWriter<Names>>(mut w: W, events: &[Event], s: &StringTable) -> Names {
    for e in events {
        w.write_event(e, s);
    }
    w.finish(s)
}

fn expected() -> BTreeMap<String, Vec<String>> {
    let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    BTreeMap::from([
        ("sh [pid=10]".into(), v(&["sh [tid=10]"])),
        (
            "prog [pid=11]".into(),
            v(&["prog [tid=11]", "worker-1 [tid=12]", "prog [tid=13]"]),
        ),
        ("[pid=20]".into(), v(&["[tid=21]"])),
    ])
}

#[test]
fn both_writers_name_and_group_tracks() {
    let mut s = StringTable::new();
    let evs = events(&mut s);
    // Time 0 is the first sample, as the CLI picks it.
    let config = WriterConfig {
        earliest_time: 1_000,
        ..WriterConfig::default()
    };
    let legacy = run(
        LegacyWriter::new(Names::default(), config.clone()),
        &evs,
        &s,
    );
    let segments = run(SegmentsWriter::new(Names::default(), config), &evs, &s);
    for (which, n) in [("legacy", &legacy), ("segments", &segments)] {
        assert_eq!(n.tree(), expected(), "{which}");
        // Only sampled threads have tracks; a name event opens none.
        assert_eq!(n.tracks.len(), 5, "{which}");
        // A name at time 0 did not start a thread's clock there.
        assert!(n.slices.iter().all(|s| s.2 >= 0), "{which}: {:?}", n.slices);
    }
}

#[test]
fn a_configured_command_line_wins_over_perfs_name() {
    let mut s = StringTable::new();
    let evs = events(&mut s);
    let mut config = WriterConfig {
        earliest_time: 1_000,
        ..WriterConfig::default()
    };
    config.process_names.insert(11, "./prog --flag".to_string());
    let n = run(SegmentsWriter::new(Names::default(), config), &evs, &s);
    assert!(
        n.tree().contains_key("./prog --flag [pid=11]"),
        "{:?}",
        n.tree()
    );
}
