//! Renders events as `perf script` text in the layout of magic-trace's fixtures, so a
//! generated scenario can also go through the real text decoder.

use ptscope_event::{Event, EventData, Kind, Location, StringTable, Symbol, TraceStateChange};
use std::fmt::Write;

fn location(out: &mut String, loc: &Location, strings: &StringTable) {
    let dso = loc.dso.map_or("[unknown]", |d| strings.get(d));
    let name = strings.display(loc.symbol);
    let _ = write!(out, "{:>16x} ", loc.ip);
    // The decoder turns `[unknown] (dso)` into `[unknown @ 0x… (dso)]`; render it back.
    if name.starts_with("[unknown @ ") || matches!(loc.symbol, Symbol::Unknown) {
        let _ = write!(out, "[unknown] ({dso})");
    } else {
        let _ = write!(out, "{name}+0x{:x} ({dso})", loc.offset);
    }
}

fn flags(change: Option<TraceStateChange>, kind: Option<Kind>, dst: &Location) -> &'static str {
    use Kind::*;
    use TraceStateChange::*;
    match (change, kind) {
        (Some(Start), None) => "tr strt",
        (Some(Start), Some(_)) => "tr strt jmp",
        (Some(End), None) => "tr end",
        (Some(End), Some(Async)) => "tr end  async",
        (Some(End), Some(Syscall)) => "tr end  syscall",
        (Some(End), Some(Call)) => "tr end  call",
        (Some(End), Some(Return)) => "tr end  return",
        (Some(End), Some(_)) => "tr end",
        (None, Some(Call)) => "call",
        (None, Some(Return)) => "return",
        (None, Some(Syscall)) => "syscall",
        (None, Some(Sysret)) => "sysret",
        (None, Some(HardwareInterrupt)) => "hw int",
        (None, Some(Interrupt)) => "int",
        (None, Some(Iret)) => "iret",
        (None, Some(TxAbort)) => "tx abrt",
        (None, Some(Async)) => "async",
        // The event model merges jmp and jcc; a jump to a function start reads as a jmp.
        (None, Some(Jump)) if dst.offset == 0 => "jmp",
        (None, Some(Jump)) => "jcc",
        (None, None) => "tr strt tr end",
    }
}

fn id(v: Option<u32>) -> u32 {
    v.unwrap_or(0)
}

/// One event as `perf script` prints it (no trailing newline); `None` for data the
/// generator never produces (samples, power, ptwrite).
pub fn render_event(event: &Event, strings: &StringTable) -> Option<String> {
    let mut out = String::with_capacity(200);
    match event {
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
            in_transaction,
        } => {
            let _ = write!(
                out,
                "{}/{} {}.{:09}:                           1    branches:uH:   {:<14}",
                id(thread.pid),
                id(thread.tid),
                time / 1_000_000_000,
                time % 1_000_000_000,
                flags(*change, *kind, strings.location(*dst)),
            );
            if *in_transaction {
                out.push_str(" (x)");
            }
            out.push_str("     ");
            location(&mut out, strings.location(*src), strings);
            out.push_str(" =>     ");
            location(&mut out, strings.location(*dst), strings);
        }
        Event::DecodeError {
            thread,
            time,
            ip,
            message,
        } => {
            out.push_str(" instruction trace error type 1 ");
            if let Some(t) = time {
                let _ = write!(out, "time {}.{:09} ", t / 1_000_000_000, t % 1_000_000_000);
            }
            let _ = write!(out, "cpu -1 pid {} tid {} ", id(thread.pid), id(thread.tid));
            match ip {
                Some(ip) => {
                    let _ = write!(out, "ip 0x{ip:x} ");
                }
                None => out.push_str("ip 0 "),
            }
            let _ = write!(out, "code 7: {}", strings.get(*message));
        }
        Event::Ok { .. } => return None,
    }
    Some(out)
}

/// All events as `perf script` text, one line each.
pub fn perf_script(events: &[Event], strings: &StringTable) -> String {
    let mut out = String::with_capacity(events.len() * 180);
    for e in events {
        if let Some(line) = render_event(e, strings) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
