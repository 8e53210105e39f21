//! libipt's instruction-flow decoder and ptscope's decoder on the same simulated
//! recordings (ptsim: real programs under QEMU, their trace written as Intel PT
//! packets): every queue must give the same instructions, in the same order, with no
//! error from either.

use ptscope_intel_pt::cache::BlockCache;
use ptscope_intel_pt::decoder::{Config, EventKind, Memory};
use ptscope_intel_pt::insn::{instruction_addresses, FactOptions};
use ptscope_libipt_oracle::{decode, read_recording, Flow, Image, AVAILABLE};
use std::path::Path;

/// Marks an overflow in the instruction lists.
const OVERFLOW: u64 = u64::MAX;

/// ptscope's instructions (and overflows) and errors for one queue.
fn ours(trace: &[u8], image: &Image) -> (Vec<u64>, usize) {
    let cfg = Config {
        blocks: true,
        ..Config::default()
    };
    let mut cache = BlockCache::new(FactOptions::default());
    let mut events = Vec::new();
    ptscope_intel_pt::decode_chunk(
        trace,
        0..trace.len(),
        cfg,
        image,
        &mut cache,
        0,
        &mut events,
    );
    let mut insns = Vec::new();
    let mut errors = 0;
    for e in &events {
        match e.kind {
            EventKind::Block {
                start,
                insns: n,
                bitness,
                ..
            } => {
                let code = image.code(0, start).expect("a block's code");
                insns.extend(instruction_addresses(code, start, u32::from(bitness), n));
            }
            // libipt reports an overflow as an event, not an error.
            EventKind::Error {
                error: ptscope_intel_pt::decoder::DecodeError::Overflow,
                ..
            } => insns.push(OVERFLOW),
            EventKind::Error { .. } => errors += 1,
            _ => {}
        }
    }
    (insns, errors)
}

fn compare(dir: &Path, what: &str) {
    let (image, queues) = read_recording(&dir.join("perf.data")).expect("perf.data");
    assert!(!queues.is_empty(), "{what}: no trace");
    let mut total = 0;
    for (idx, trace) in &queues {
        let mut theirs = Vec::new();
        let mut errors = Vec::new();
        decode(trace, &image, false, |f| match f {
            Flow::Insn(ip) => theirs.push(ip),
            Flow::Overflow(_) => theirs.push(OVERFLOW),
            Flow::Error { code, offset } => errors.push((code, offset, theirs.len())),
            _ => {}
        })
        .expect("libipt");
        let (mine, my_errors) = ours(trace, &image);
        for &(_, _, at) in &errors {
            eprintln!(
                "libipt error at insn {at}: libipt {:x?}\n ptscope {:x?}",
                &theirs[at.saturating_sub(4)..(at + 4).min(theirs.len())],
                &mine[at.saturating_sub(4)..(at + 4).min(mine.len())]
            );
        }
        assert!(
            errors.is_empty(),
            "{what}: queue {idx}: libipt errors {errors:?}, ptscope {my_errors}"
        );
        assert_eq!(
            my_errors, 0,
            "{what}: queue {idx}: ptscope's decoder reported errors"
        );
        if let Some(i) = mine.iter().zip(&theirs).position(|(a, b)| a != b) {
            panic!(
                "{what}: queue {idx}: instruction {i} differs: ptscope {:x?} libipt {:x?}",
                &mine[i.saturating_sub(3)..(i + 3).min(mine.len())],
                &theirs[i.saturating_sub(3)..(i + 3).min(theirs.len())]
            );
        }
        // ptscope leaves out the instructions after the trace's last packet that no
        // packet confirms (as perf does); libipt runs on to the next branch.
        assert!(
            mine.len() <= theirs.len() && theirs.len() - mine.len() < 64,
            "{what}: queue {idx}: {} instructions vs libipt's {}",
            mine.len(),
            theirs.len()
        );
        total += theirs.len();
    }
    eprintln!(
        "{what}: {} queues, {total} instructions, identical",
        queues.len()
    );
    assert!(total > 10_000, "{what}: only {total} instructions");
}

const PROGRAM: &str = r#"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static volatile int hits;
static void on_alarm(int s) { (void)s; hits++; }
static long work(long n) { long s = 0; for (long i = 0; i < n; i++) s += (i % 7 == 3) ? i : (i ^ s) & 15; return s; }
static void *thread(void *a) { (void)a; return (void *)work(60000); }
int main(void) {
    signal(SIGALRM, on_alarm);
    pthread_t t;
    pthread_create(&t, 0, thread, 0);
    long s = 0;
    for (int i = 0; i < 20; i++) { raise(SIGALRM); s += work(5000); }
    char buf[64];
    snprintf(buf, sizeof buf, "%ld %d", s, hits);
    pthread_join(t, 0);
    return strlen(buf) == 0;
}
"#;

/// A C program (two threads, signals), gzip, gzip with overflows, and a snapshot of
/// gzip.
#[test]
fn libipt_and_ptscope_walk_the_same_instructions() {
    if !AVAILABLE {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but libipt is missing (scripts/test installs libipt-dev)"
        );
        eprintln!("skipping: built without libipt");
        return;
    }
    if !ptsim::testing::tools_available(&["qemu-x86_64", "cc", "gzip"]) {
        return;
    }
    let dir = ptsim::testing::scratch_dir("oracle").unwrap();
    let exe = ptsim::testing::compile(
        dir.path(),
        "prog",
        "prog.c",
        PROGRAM,
        &["cc", "-O1", "-pthread"],
    )
    .unwrap();
    let run = |name: &str, argv: &[&Path], cfg: &ptsim::SimConfig| {
        let d = dir.path().join(format!("rec-{name}"));
        std::fs::create_dir(&d).unwrap();
        ptsim::testing::record(&d, argv, cfg).unwrap();
        compare(&d, name);
    };
    let all = std::env::var_os("ORACLE_SKIP").is_none();
    if all {
        run("prog", &[&exe], &ptsim::SimConfig::default());
    }
    let input = dir.path().join("input");
    let text: String = (0..1200)
        .map(|i| format!("line {i} {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let gzip = Path::new("/usr/bin/gzip");
    if all {
        run(
            "gzip",
            &[gzip, Path::new("-k"), Path::new("-f"), &input],
            &ptsim::SimConfig::default(),
        );
    }
    run(
        "gzip-overflows",
        &[gzip, Path::new("-k"), Path::new("-f"), &input],
        &ptsim::SimConfig {
            faults: ptsim::FaultSpec::parse("overflow=4").unwrap(),
            ..Default::default()
        },
    );
    run(
        "gzip-snapshot",
        &[gzip, Path::new("-k"), Path::new("-f"), &input],
        &ptsim::SimConfig {
            snapshot_size: Some(64 << 10),
            ..Default::default()
        },
    );
}
