//! Measures FxtSink end to end into a file: `cargo run --release -p ptscope-output
//! --example sink_throughput [DIR]` writes `DIR/bench.fxt` and `DIR/bench.fxt.gz`
//! (DIR defaults to a fresh private directory under the system's temporary one) and
//! removes them afterwards.
//!
//! The workload is call-stack shaped: 2 000 recurring names on 8 threads, nested
//! begin/end pairs 1-30 deep with an int argument on each begin.

use ptscope_output::{open_trace_output, FxtSink};
use ptscope_stacks::{Arg, ArgValue, TraceSink};
use std::path::PathBuf;
use std::time::Instant;

const EVENTS: u64 = 10_000_000;

fn main() {
    // Not fixed names in /tmp, which another user could have planted links at.
    let scratch = tempfile::Builder::new()
        .prefix("ptscope-sink-bench-")
        .disable_cleanup(std::env::var_os("KEEP").is_some())
        .tempdir()
        .expect("temporary directory");
    let dir = std::env::args()
        .nth(1)
        .map_or_else(|| scratch.path().to_path_buf(), PathBuf::from);
    let names: Vec<String> = (0..2000)
        .map(|i| format!("Module{}.function_{i}", i % 50))
        .collect();
    for file in ["bench.fxt", "bench.fxt.gz"] {
        let path = dir.join(file);
        let cpu = cpu_ns();
        let start = Instant::now();
        let mut sink = FxtSink::new(open_trace_output(&path).expect("create output"));
        let pid = sink.allocate_pid("bench");
        let threads: Vec<_> = (0..8)
            .map(|t| sink.allocate_thread(pid, &format!("t{t}")))
            .collect();
        let mut depth = [0u64; 8];
        let mut time = 0i64;
        for i in 0..EVENTS / 2 {
            let t = (i % 8) as usize;
            let name = &names[(i * 7 % 2000) as usize];
            time += 1;
            // Walk the stack up and down so slices nest 1..30 deep.
            if depth[t] < 30 && (i / 8) % 60 < 30 {
                sink.duration_begin(
                    threads[t],
                    name,
                    time,
                    &[Arg::new("i", ArgValue::Int(i as i64))],
                );
                depth[t] += 1;
            } else if depth[t] > 0 {
                sink.duration_end(threads[t], name, time, &[]);
                depth[t] -= 1;
            } else {
                sink.duration_instant(threads[t], name, time, &[]);
            }
            time += 1;
            sink.duration_complete(threads[t], name, time, time, &[]);
        }
        for (t, d) in depth.iter().enumerate() {
            for _ in 0..*d {
                time += 1;
                sink.duration_end(threads[t], "", time, &[]);
            }
        }
        sink.finish_output().expect("write trace");
        let secs = start.elapsed().as_secs_f64();
        let cpu = match (cpu, cpu_ns()) {
            (Some(a), Some(b)) => format!(
                "  on-CPU {:>5.1} M events/s",
                EVENTS as f64 / ((b - a) as f64 / 1e9) / 1e6
            ),
            _ => String::new(),
        };
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        println!(
            "{file:13} {EVENTS} events  wall {:>5.1} M events/s{cpu}  {:>7.1} MB  {:>5.2} bytes/event",
            EVENTS as f64 / secs / 1e6,
            size as f64 / 1e6,
            size as f64 / EVENTS as f64
        );
        if std::env::var_os("KEEP").is_none() {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Nanoseconds this thread has spent on a CPU (Linux), so busy machines still give
/// the writer's own cost; `None` elsewhere.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}
