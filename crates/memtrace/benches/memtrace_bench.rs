//! Throughput of reading (with full backtrace decoding) and of the flamegraph, on a
//! multi-MB trace made by replaying the `ocamlopt_v3.ctf` fixture 50 times (≈84 000
//! allocations). Run: `cargo bench -p memtrace --bench memtrace_bench`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use memtrace::{tools, EventKind, Reader, Writer};

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn fixture(name: &str) -> Vec<u8> {
    let p = fixtures::fixtures_dir().join("memtrace").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Replays the events of `data` `times` times, back to back, into one trace.
fn replay(data: &[u8], times: usize) -> Vec<u8> {
    let info = Reader::from_bytes(data).expect("fixture").info().clone();
    let mut w = Writer::new(Vec::new(), &info).expect("writer");
    let mut offset = 0i64;
    for _ in 0..times {
        let mut r = Reader::from_bytes(data).expect("fixture");
        let mut ids = HashMap::new();
        let mut last = 0;
        while let Some(ev) = r.next_event().expect("event") {
            let now = info.start_time + offset + ev.time;
            last = ev.time;
            match ev.kind {
                EventKind::Alloc(a) => {
                    let db = ev.db;
                    let id = w
                        .put_alloc(
                            now,
                            a.domain,
                            a.length,
                            a.nsamples,
                            a.source,
                            a.backtrace,
                            &mut |c| db.owned_locations(c),
                        )
                        .expect("alloc");
                    ids.insert(a.obj_id, id);
                }
                EventKind::Promote { obj_id, domain } => {
                    w.put_promote(now, domain, ids[&obj_id]).expect("promote")
                }
                EventKind::Collect { obj_id, domain } => {
                    w.put_collect(now, domain, ids[&obj_id]).expect("collect")
                }
            }
        }
        offset += last + 1;
    }
    w.finish().expect("finish")
}

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let trace = replay(&fixture("ocamlopt_v3.ctf"), 50);
    let mut r = Reader::from_bytes(&trace).expect("trace");
    let (mut allocs, mut events, mut frames) = (0u64, 0u64, 0u64);
    while let Some(ev) = r.next_event().expect("event") {
        events += 1;
        if let EventKind::Alloc(a) = ev.kind {
            allocs += 1;
            frames += a.backtrace.len() as u64;
        }
    }
    let mb = trace.len() as f64 / 1e6;
    println!("trace: {mb:.2} MB, {events} events, {allocs} allocations, {frames} decoded frames");
    let report = |what: &str, d: Duration| {
        let s = d.as_secs_f64();
        println!(
            "{what:<42} {:>8.2} ms  {:>7.0} MB/s  {:>6.1} M frames/s",
            s * 1e3,
            mb / s,
            frames as f64 / s / 1e6
        );
    };
    report(
        "read, backtraces decoded",
        best_of(10, || {
            let mut r = Reader::from_bytes(&trace).expect("trace");
            let mut n = 0usize;
            while let Some(ev) = r.next_event().expect("event") {
                if let EventKind::Alloc(a) = ev.kind {
                    n += a.backtrace.len();
                }
            }
            std::hint::black_box(n);
        }),
    );
    report(
        "read, backtraces skipped",
        best_of(10, || {
            let mut r = Reader::from_bytes(&trace)
                .expect("trace")
                .parse_backtraces(false);
            while r.next_event().expect("event").is_some() {}
        }),
    );
    let mut out = Vec::new();
    report(
        "flamegraph (read + fold + print)",
        best_of(10, || {
            out.clear();
            let mut r = Reader::from_bytes(&trace).expect("trace");
            tools::flamegraph(&mut r, &mut out).expect("flamegraph");
        }),
    );
    let tmp = tempfile::tempdir().expect("temporary directory");
    let path = tmp.path().join("bench.ctf");
    std::fs::write(&path, &trace).expect("write temp trace");
    report(
        "flamegraph from a file (streamed)",
        best_of(10, || {
            out.clear();
            let mut r = Reader::open(&path).expect("open");
            tools::flamegraph(&mut r, &mut out).expect("flamegraph");
        }),
    );
    report(
        "dump (every frame's locations printed)",
        best_of(3, || {
            out.clear();
            let mut r = Reader::from_bytes(&trace).expect("trace");
            tools::dump(&mut r, &mut out).expect("dump");
        }),
    );
    report(
        "re-encode (read + write v3)",
        best_of(5, || {
            let mut r = Reader::from_bytes(&trace).expect("trace");
            let mut w = Writer::new(Vec::with_capacity(trace.len()), r.info()).expect("writer");
            while let Some(ev) = r.next_event().expect("event") {
                w.put_event(&ev).expect("put");
            }
            std::hint::black_box(w.finish().expect("finish"));
        }),
    );
    let _ = std::fs::remove_file(&path);
}
