//! Decodes a perf.data with the builtin decoder and drops every event: what the
//! benchmarks time (`BENCHMARKS.md`, "Builtin Intel PT decoder"). Prints the events and
//! branches decoded; `THREADS` workers (default: one per core).
//!
//! ```sh
//! cargo run --release -p ptscope-pt-decode --example bench_builtin -- perf.data [THREADS]
//! ```

use ptscope_event::{Event, EventData, EventSource};

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: bench_builtin PERF.DATA [THREADS]")?;
    let threads = args.next().map(|t| t.parse()).transpose()?;
    let opts = ptscope_pt_decode::Options {
        threads,
        ..Default::default()
    };
    let t0 = std::time::Instant::now();
    let mut src = ptscope_pt_decode::open(path.as_ref(), &opts)?;
    let (mut events, mut branches, mut errors) = (0u64, 0u64, 0u64);
    while let Some(e) = src.next_event()? {
        events += 1;
        match e {
            Event::Ok {
                data: EventData::Trace { change: None, .. },
                ..
            } => branches += 1,
            Event::DecodeError { .. } => errors += 1,
            _ => {}
        }
    }
    println!(
        "{events} events, {branches} branches, {errors} errors, {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
