//! Prints an emulate recording's branch events, one line each (tid, instruction time,
//! kind, trace change, source => destination), to look at what the stack writers get.
//!
//! `cargo run --release -p ptscope-emulate --example events -- DIR`

use ptscope_emulate::events::Events;
use ptscope_emulate::TimeBase;
use ptscope_event::{Event, EventData, EventSource};
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
        match e {
            Event::Ok {
                thread,
                time,
                data:
                    EventData::Trace {
                        change,
                        kind,
                        src,
                        dst,
                    },
                ..
            } => {
                let s = ev.strings();
                let (a, b) = (s.location(src), s.location(dst));
                writeln!(
                    out,
                    "{:?} {time} {kind:?} {change:?} {}+{:#x} => {}+{:#x}",
                    thread.tid.unwrap_or(0),
                    s.display(a.symbol),
                    a.offset,
                    s.display(b.symbol),
                    b.offset
                )?;
            }
            Event::Ok { thread, time, .. } => {
                writeln!(out, "{} {time} other", thread.tid.unwrap_or(0))?
            }
            Event::DecodeError { thread, .. } => {
                writeln!(out, "{} error", thread.tid.unwrap_or(0))?
            }
        }
    }
    Ok(())
}
