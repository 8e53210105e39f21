//! Prints an emulate recording's events as `perf script` text (instruction clock), to look
//! at what the stack writers get; `ptscope decode --perf-script` reads the output back.
//!
//! `cargo run --release -p ptscope-emulate --example events -- DIR`

use ptscope_emulate::events::Events;
use ptscope_emulate::TimeBase;
use ptscope_event::EventSource;
use ptscope_groundtruth::render::render_event;
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: events DIR")?;
    let mut ev = Events::open_with_time_base(
        std::path::Path::new(&dir),
        "prog",
        0,
        TimeBase::Instructions,
    )?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    while let Some(e) = ev.next_event() {
        // Branches only: names, samples and the like have no `perf script` line here.
        if let Some(line) = render_event(&e, ev.strings()) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}
