//! Measures FxtWriter throughput: `cargo run --release -p ptscope-fxt --example fxt_throughput [hot|churn]`.
//!
//! Two workloads over an in-memory sink (so disk speed does not count):
//! - "hot": 2 000 recurring names on 8 threads, begin/end pairs with one int arg —
//!   the shape of a call-stack trace;
//! - "churn": every event has a new name, over 400 threads, so the string table
//!   evicts on nearly every event and the thread table on many.

use ptscope_fxt::{Arg, ArgValue, FxtWriter};
use std::io::{self, Write};
use std::time::Instant;

/// Counts bytes and throws them away.
struct Null(u64);

impl Write for Null {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn report(label: &str, events: u64, bytes: u64, secs: f64, cpu_start: Option<u64>) {
    let cpu = match (cpu_start, cpu_ns()) {
        (Some(a), Some(b)) => format!(
            "  on-CPU {:>5.1} M events/s",
            events as f64 / ((b - a) as f64 / 1e9) / 1e6
        ),
        _ => String::new(),
    };
    println!(
        "{label:6} {events:>10} events  wall {:>5.1} M events/s{cpu}  {:>5.1} bytes/event",
        events as f64 / secs / 1e6,
        bytes as f64 / events as f64,
    );
}

/// Nanoseconds this thread has spent on a CPU (Linux), so busy machines still give
/// the writer's own cost; `None` elsewhere.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    if which != "churn" {
        hot();
    }
    if which != "hot" {
        churn();
    }
}

fn hot() {
    let names: Vec<String> = (0..2000)
        .map(|i| format!("Module{}.function_{i}", i % 50))
        .collect();

    let mut w = FxtWriter::new(Null(0));
    let threads: Vec<_> = (0..8).map(|t| w.thread(1, 2 + t)).collect();
    let cpu = cpu_ns();
    let start = Instant::now();
    let pairs = 5_000_000u64;
    for i in 0..pairs {
        let t = threads[(i % 8) as usize];
        let name = &names[(i * 7 % 2000) as usize];
        w.begin(
            t,
            "",
            name,
            i * 2,
            &[Arg::new("depth", ArgValue::Int((i % 30) as i64))],
        );
        w.end(t, "", name, i * 2 + 1, &[]);
    }
    let out = w.finish().expect("null sink");
    report("hot", pairs * 2, out.0, start.elapsed().as_secs_f64(), cpu);
}

fn churn() {
    let mut w = FxtWriter::new(Null(0));
    let threads: Vec<_> = (0..400).map(|t| w.thread(1 + t / 10, 1000 + t)).collect();
    let mut name = String::new();
    let n = 2_000_000u64;
    let cpu = cpu_ns();
    let start = Instant::now();
    for i in 0..n {
        name.clear();
        use std::fmt::Write as _;
        let _ = write!(name, "symbol_{i}");
        w.complete(threads[(i * 13 % 400) as usize], "", &name, i, i + 1, &[]);
    }
    let stats = w.stats().clone();
    let out = w.finish().expect("null sink");
    report("churn", n, out.0, start.elapsed().as_secs_f64(), cpu);
    println!(
        "       string evictions {}  thread evictions {}",
        stats.string_evictions, stats.thread_evictions
    );
}
