//! Cost per allocation of `MemtraceAlloc`: tracing off vs on (default rate and a
//! high rate), for a 64-byte allocate-and-free loop on one thread.
//! Run: `cargo bench -p memtrace-alloc --bench overhead`.

use std::hint::black_box;
use std::time::Instant;

use memtrace_alloc::{MemtraceAlloc, TraceOptions};

#[global_allocator]
static ALLOC: MemtraceAlloc = MemtraceAlloc::system();

const N: u32 = 2_000_000;

#[inline(never)]
fn churn(n: u32) {
    for i in 0..n {
        black_box(Box::new([i as u8; 64]));
    }
}

/// Best of several runs, in ns per allocate+free pair.
fn ns_per_alloc() -> f64 {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            churn(N);
            t.elapsed().as_secs_f64() * 1e9 / f64::from(N)
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    churn(N / 10);
    let off = ns_per_alloc();
    println!("tracing off                      {off:6.1} ns per allocation");
    let tmp = tempfile::tempdir().expect("temporary directory");
    let path = tmp.path().join("overhead.ctf");
    for rate in [memtrace_alloc::DEFAULT_RATE, 1e-3, 1e-2] {
        let mut opts = TraceOptions::new(&path);
        opts.rate = rate;
        opts.seed = Some(1);
        memtrace_alloc::start(&opts).expect("start");
        let on = ns_per_alloc();
        memtrace_alloc::stop().expect("stop");
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        println!(
            "tracing on, rate {rate:<8e}         {on:6.1} ns per allocation (+{:.1} ns; trace {size} bytes)",
            on - off
        );
    }
    let _ = std::fs::remove_file(&path);
}
