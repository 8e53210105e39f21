//! A program with known allocations traced by `MemtraceAlloc` (its own global
//! allocator, hence `harness = false`): exact counts and sites at rate 1, sampled
//! totals within statistical bounds at the default rate, and a forked child that
//! must not write to the trace.

// Boxes inside Vecs are the point: each is one allocation at a known site.
#![allow(clippy::vec_box)]

use std::hint::black_box;
use std::path::Path;

use memtrace::{tools, EventKind, Reader};
use memtrace_alloc::{MemtraceAlloc, TraceOptions, DEFAULT_RATE};

#[global_allocator]
static ALLOC: MemtraceAlloc = MemtraceAlloc::system();

const SMALL: usize = 1000;
const BIG: usize = 50;
const STAT_ALLOCS: u64 = 200_000;

#[inline(never)]
fn site_small(out: &mut Vec<Box<[u8; 48]>>) {
    out.push(black_box(Box::new([1u8; 48])));
}

#[inline(never)]
fn site_big(out: &mut Vec<Vec<u8>>) {
    out.push(black_box(vec![2u8; 4000]));
}

#[inline(never)]
fn site_stat() {
    black_box(vec![3u8; 4096]);
}

#[inline(never)]
fn site_child(out: &mut Vec<Box<[u8; 48]>>) {
    out.push(black_box(Box::new([4u8; 48])));
}

#[derive(Default, Debug)]
struct Site {
    allocs: u64,
    samples: i64,
    words: i64,
    collects: u64,
}

/// Reads a trace strictly (any skipped packet is an error) and tallies the allocations
/// whose backtrace passes through each of `names`.
fn tally(path: &Path, names: &[&str]) -> (f64, Vec<Site>) {
    let data = std::fs::read(path).expect("trace written");
    // The reference tools must accept it: dump needs every location code defined.
    let mut r = Reader::from_bytes(&data).expect("trace info").strict(true);
    tools::dump(&mut r, &mut std::io::sink()).expect("strict dump");
    let mut r = Reader::from_bytes(&data).expect("trace info").strict(true);
    let rate = r.info().sample_rate;
    let mut sites: Vec<Site> = names.iter().map(|_| Site::default()).collect();
    let mut owner = std::collections::HashMap::new();
    while let Some(ev) = r.next_event().expect("strict read") {
        match ev.kind {
            EventKind::Alloc(a) => {
                let hit = names.iter().position(|n| {
                    a.backtrace.iter().any(|&code| {
                        ev.db.locations(code).unwrap_or(&[]).iter().any(|l| {
                            std::str::from_utf8(ev.db.string(l.defname))
                                .is_ok_and(|s| s.ends_with(n))
                        })
                    })
                });
                if let Some(i) = hit {
                    sites[i].allocs += 1;
                    sites[i].samples += a.nsamples;
                    sites[i].words += a.length;
                    owner.insert(a.obj_id, i);
                }
            }
            EventKind::Collect { obj_id, .. } => {
                if let Some(i) = owner.remove(&obj_id) {
                    sites[i].collects += 1;
                }
            }
            EventKind::Promote { .. } => panic!("no promotions outside a GC"),
        }
    }
    (rate, sites)
}

fn exact_counts(dir: &Path) {
    let path = dir.join("exact.ctf");
    let mut small = Vec::with_capacity(SMALL);
    let mut big = Vec::with_capacity(BIG);
    let mut opts = TraceOptions::new(&path);
    opts.rate = 1.0;
    memtrace_alloc::start(&opts).expect("start");
    for _ in 0..SMALL {
        site_small(&mut small);
    }
    for _ in 0..BIG {
        site_big(&mut big);
    }
    small.truncate(SMALL / 2);
    memtrace_alloc::stop().expect("stop");
    let (rate, s) = tally(&path, &["::site_small", "::site_big"]);
    assert_eq!(rate, 1.0);
    assert_eq!(s[0].allocs, SMALL as u64, "{s:?}");
    assert_eq!(s[0].words, 6 * SMALL as i64);
    assert_eq!(
        s[0].samples,
        6 * SMALL as i64,
        "every word is a sample at rate 1"
    );
    assert_eq!(s[0].collects, (SMALL / 2) as u64);
    assert_eq!(s[1].allocs, BIG as u64);
    assert_eq!(s[1].words, 500 * BIG as i64);
    assert_eq!(s[1].collects, 0);
    drop((small, big));
    // Allocator plumbing is dropped: the innermost frame is std's allocating
    // function (e.g. Box::new) and the innermost frame outside std is the site.
    let data = std::fs::read(&path).expect("trace");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let mut leaf_ok = 0;
    while let Some(ev) = r.next_event().expect("read") {
        if let EventKind::Alloc(a) = ev.kind {
            let names: Vec<String> = a
                .backtrace
                .iter()
                .rev()
                .flat_map(|&c| ev.db.locations(c).unwrap_or(&[]).iter().rev())
                .map(|l| String::from_utf8_lossy(ev.db.string(l.defname)).into_owned())
                .collect();
            let leaf = names.first().map(String::as_str).unwrap_or("");
            assert!(
                !(leaf.starts_with("<memtrace_alloc::")
                    || leaf.starts_with("backtrace::")
                    || leaf.contains("__rust_alloc")),
                "tracer frame at the leaf: {leaf}"
            );
            let user = names.iter().find(|n| {
                !(n.starts_with("alloc::") || n.starts_with("<alloc::") || n.starts_with("core::"))
            });
            if user.is_some_and(|n| n.ends_with("::site_small")) {
                leaf_ok += 1;
            }
        }
    }
    assert_eq!(
        leaf_ok, SMALL,
        "site_small is the leaf frame of its allocations"
    );
}

fn default_rate_totals(dir: &Path) {
    let path = dir.join("sampled.ctf");
    let mut opts = TraceOptions::new(&path);
    opts.seed = Some(12345);
    memtrace_alloc::start(&opts).expect("start");
    for _ in 0..STAT_ALLOCS {
        site_stat();
    }
    memtrace_alloc::stop().expect("stop");
    let (rate, s) = tally(&path, &["::site_stat"]);
    assert_eq!(rate, DEFAULT_RATE);
    let words = STAT_ALLOCS as f64 * 512.0;
    let expected = words * DEFAULT_RATE;
    let sd = expected.sqrt();
    let got = s[0].samples as f64;
    assert!(
        (got - expected).abs() < 5.0 * sd,
        "samples {got}, expected {expected} ± {sd}"
    );
    // Each sampled block is freed right away.
    assert_eq!(s[0].collects, s[0].allocs);
    let estimated_bytes = got / rate * 8.0;
    let true_bytes = words * 8.0;
    assert!(
        (estimated_bytes / true_bytes - 1.0).abs() < 0.2,
        "estimate {estimated_bytes} vs {true_bytes}"
    );
}

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}

fn forked_child_stops(dir: &Path) {
    let path = dir.join("fork.ctf");
    let mut opts = TraceOptions::new(&path);
    opts.rate = 1.0;
    memtrace_alloc::start(&opts).expect("start");
    let mut keep = Vec::with_capacity(10_000);
    for _ in 0..10 {
        site_small(&mut keep);
    }
    // SAFETY: the child only allocates and exits; no other thread holds locks here.
    let pid = unsafe { fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        for _ in 0..5000 {
            site_child(&mut keep);
        }
        std::process::exit(if memtrace_alloc::is_tracing() { 3 } else { 0 });
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { waitpid(pid, &mut status, 0) };
    assert_eq!(
        status, 0,
        "child still tracing after fork (status {status})"
    );
    for _ in 0..10 {
        site_small(&mut keep);
    }
    memtrace_alloc::stop().expect("stop");
    let (_, s) = tally(&path, &["::site_small", "::site_child"]);
    assert_eq!(s[0].allocs, 20, "{s:?}");
    assert_eq!(s[1].allocs, 0, "the child wrote to the parent's trace");
}

fn main() {
    let tmp = tempfile::Builder::new()
        .prefix("memtrace-alloc-test-")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().to_owned();
    exact_counts(&dir);
    println!("exact counts at rate 1 ... ok");
    default_rate_totals(&dir);
    println!("sampled totals at the default rate ... ok");
    forked_child_stops(&dir);
    println!("forked child stops tracing ... ok");
}
