//! Times the emulate path's own part of a decode — block log → events, as `ptscope
//! decode` feeds them to the stack writer — without the writer or the output.
//!
//! Usage: `cargo run --release -p ptscope-emulate --example events_rate -- DIR [RUNS]`
//! where DIR is a `ptscope run --backend emulate --no-decode -w DIR` recording. Prints
//! the best of RUNS (default 3): wall time, events, events/s.

use ptscope_event::StringTable;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next() else {
        anyhow::bail!("usage: events_rate DIR [RUNS] (DIR: an emulate recording)");
    };
    let runs: u32 = match args.next() {
        Some(r) => r
            .to_str()
            .and_then(|r| r.parse().ok())
            .filter(|&r| r > 0)
            .ok_or_else(|| anyhow::anyhow!("RUNS must be a positive number"))?,
        None => 3,
    };
    let log = std::path::Path::new(&dir).join(ptscope_emulate::LOG_NAME);
    let mut best = f64::INFINITY;
    let mut events = 0u64;
    for _ in 0..runs {
        let start = Instant::now();
        let mut ev = ptscope_emulate::Events::open(
            &log,
            "bench",
            StringTable::new(),
            ptscope_emulate::ClockKind::default(),
        )?;
        let opened = start.elapsed().as_secs_f64();
        let mut n = 0u64;
        while ev.next_event().is_some() {
            n += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{n} events in {secs:.3} s (open + derive {opened:.3} s, events {:.3} s)",
            secs - opened
        );
        best = best.min(secs);
        events = n;
    }
    println!(
        "best of {runs}: {best:.3} s, {events} events, {:.2} M events/s",
        events as f64 / best / 1e6
    );
    Ok(())
}
