//! Prints what the builtin decoder makes of a perf.data, one line per event, in the
//! shape of `perf script --itrace=be -F tid,time,flags,ip,sym,symoff,addr`: to compare
//! the two by eye or with `diff`.
//!
//! ```sh
//! cargo run --release -p ptscope-pt-decode --example pt_dump -- perf.data
//! ```

use ptscope_event::{Event, EventData, EventSource, Kind, StringTable, TraceStateChange};

fn loc(s: &StringTable, h: ptscope_event::LocationHandle) -> String {
    let l = s.location(h);
    format!("{:x} {}+{:#x}", l.ip, s.display(l.symbol), l.offset)
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let path = std::env::args().nth(1).ok_or("usage: pt_dump PERF.DATA")?;
    let mut src = ptscope_pt_decode::open(path.as_ref(), &Default::default())?;
    while let Some(e) = src.next_event()? {
        let s = src.strings();
        match e {
            Event::Ok {
                thread, time, data, ..
            } => match data {
                EventData::Trace {
                    change,
                    kind,
                    src: a,
                    dst: b,
                } => {
                    let flags = match (change, kind) {
                        (Some(TraceStateChange::Start), _) => "tr strt".to_string(),
                        (Some(TraceStateChange::End), k) => format!("tr end {}", kind_name(k)),
                        (None, k) => kind_name(k).to_string(),
                    };
                    println!(
                        "{} {}.{:09}: {} {} => {}",
                        thread.tid.unwrap_or(0),
                        time / 1_000_000_000,
                        time % 1_000_000_000,
                        flags.trim(),
                        loc(s, a),
                        loc(s, b)
                    );
                }
                other => println!("{} {time} {other:?}", thread.tid.unwrap_or(0)),
            },
            Event::DecodeError {
                thread,
                time,
                ip,
                message,
            } => println!(
                "{} {:?} ERROR {ip:x?} {}",
                thread.tid.unwrap_or(0),
                time,
                s.get(message)
            ),
        }
    }
    let f = Box::new(src).finish();
    for n in f.notices.iter().chain(&f.incomplete) {
        eprintln!("notice: {n}");
    }
    Ok(())
}

fn kind_name(k: Option<Kind>) -> &'static str {
    match k {
        Some(Kind::Call) => "call",
        Some(Kind::Return) => "return",
        Some(Kind::Jump) => "jmp",
        Some(Kind::Syscall) => "syscall",
        Some(Kind::Sysret) => "sysret",
        Some(Kind::Async) => "async",
        Some(Kind::Interrupt) => "int",
        Some(Kind::HardwareInterrupt) => "hw int",
        Some(Kind::Iret) => "iret",
        Some(Kind::TxAbort) => "tx abrt",
        None => "",
    }
}
