//! The decoder's memory savers — executions parsed at 4 bytes each
//! (`BlockLog::parse_compact`) and steps cut as they are derived
//! (`truth::derive_each_kept`) — give exactly what the plain paths give, on the block
//! logs of real programs (one taking signals, whose fix-ups edit steps after the fact).

use ptscope_emulate::{Events, KERNEL_INSNS};
use ptscope_event::{Event, StringTable};
use ptsim::blocklog::BlockLog;
use ptsim::truth::{self, Step, StepKind};
use std::ffi::OsString;
use std::path::Path;

/// What the decoder drops first: not-taken conditional branches.
fn keep(s: &Step) -> bool {
    !matches!(s.kind, StepKind::Jcc { taken: false })
}

fn events(log: &BlockLog) -> Vec<Event> {
    let mut ev = Events::from_log(log, "prog", StringTable::new(), &|c| c);
    let mut out = Vec::new();
    while let Some(e) = ev.next_event() {
        out.push(e);
    }
    out
}

/// Records `argv` in full and checks both savers against the plain paths.
fn check(argv: &[&str]) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
    let status = ptscope_emulate::record(&args, Path::new(argv[0]), dir.path(), None)
        .expect("recording under qemu");
    assert!(status.success(), "{argv:?} exited with {status}");
    let data = std::fs::read(dir.path().join(ptscope_emulate::LOG_NAME)).expect("block log");
    let full = BlockLog::parse(&data).expect("parse");
    let compact = BlockLog::parse_compact(&data).expect("compact parse");
    assert_eq!(full.total_execs(), compact.total_execs());

    let (traces, stats) = truth::derive(&full, KERNEL_INSNS);
    let mut kept = Vec::new();
    let kstats = truth::derive_each_kept(&compact, KERNEL_INSNS, keep, |t| kept.push(t));
    assert_eq!(stats, kstats);
    assert_eq!(traces.len(), kept.len());
    let mut asyncs = 0;
    for (t, k) in traces.iter().zip(&kept) {
        let want: Vec<Step> = t.steps.iter().copied().filter(keep).collect();
        assert_eq!(t.tid, k.tid);
        assert!(want == k.steps, "{argv:?}: thread {} steps differ", t.tid);
        asyncs += want
            .iter()
            .filter(|s| matches!(s.kind, StepKind::Async { .. }))
            .count();
    }
    eprintln!(
        "{argv:?}: {} blocks, {} async stops, {} guessed, steps identical",
        stats.blocks, asyncs, stats.guessed_outcomes
    );
    let (a, b) = (events(&full), events(&compact));
    assert!(!a.is_empty());
    assert!(a == b, "{argv:?}: events differ");
}

#[test]
fn compact_decode_matches_the_plain_one() {
    if !ptsim::testing::tools_available(&["qemu-x86_64", "gcc"]) {
        return;
    }
    let plugin = ptsim::testing::plugin().expect("the qemu plugin builds");
    std::env::set_var("PTSCOPE_EMULATE_PLUGIN", plugin);
    // A wall-clock timer interrupts a busy loop wherever it is: the signals arrive
    // asynchronously, between any two blocks.
    check(&[
        "/usr/bin/python3",
        "-c",
        "import signal\n\
         n = [0]\n\
         def h(*a): n[0] += 1\n\
         signal.signal(signal.SIGALRM, h)\n\
         signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)\n\
         while n[0] < 30: pass\n\
         signal.setitimer(signal.ITIMER_REAL, 0)",
    ]);
    let input = tempfile::tempdir().expect("temporary directory");
    let text = input.path().join("in.txt");
    let lines: String = (0..3000)
        .map(|i| format!("line {i} of some text\n"))
        .collect();
    std::fs::write(&text, lines).expect("input");
    check(&["/usr/bin/gzip", "-kf", text.to_str().expect("UTF-8 path")]);
}
