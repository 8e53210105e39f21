//! Decodes an emulate recording's threads and prints their exact steps (all, or with
//! `--count` only how many there are and how fast they came, per thread).
//!
//! `cargo run --release -p ptscope-emulate --example steps -- DIR [--count|--instructions]`

use ptscope_emulate::{ClockKind, Decoding, Recording};
use ptscope_event::exact::ExactKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .ok_or("usage: steps DIR [--count|--instructions]")?;
    let flag = args.next();
    let count = flag.as_deref() == Some("--count");
    let insns = flag.as_deref() == Some("--instructions");
    let rec = Recording::open(std::path::Path::new(&dir))?;
    let view = rec.view()?;
    for n in &view.notices {
        eprintln!("notice: {n}");
    }
    for s in 0..view.snapshots().len() {
        let d = if insns {
            Decoding::with_time_base(&view, s, ptscope_emulate::TimeBase::Instructions, "prog")
        } else {
            Decoding::new(&view, s, ClockKind::Host, "prog")
        };
        eprintln!("snapshot {s}: {}", d.clock_info());
        for (i, t) in d.threads().iter().enumerate() {
            let started = std::time::Instant::now();
            let mut w = d.walker(i);
            let mut buf = Vec::new();
            let mut steps = 0u64;
            while w.fill(&mut buf) {
                steps += buf.len() as u64;
                if !count {
                    let f = w.functions();
                    for st in &buf {
                        let what = match st.kind {
                            ExactKind::Start(r) => format!("start {r:?}"),
                            ExactKind::Call { ret } => format!("call (ret {ret:#x})"),
                            ExactKind::Return => "return".into(),
                            ExactKind::Jump { indirect } => {
                                format!("jump{}", if indirect { " (indirect)" } else { "" })
                            }
                            ExactKind::Syscall { sigreturn, .. } => {
                                format!("syscall{}", if sigreturn { " (sigreturn)" } else { "" })
                            }
                            ExactKind::Async => "async".into(),
                        };
                        println!(
                            "{} {:>12} {what:<24} {} {:#x}",
                            t.tid,
                            st.time,
                            f.name(st.to),
                            st.to_addr
                        );
                    }
                }
                buf.clear();
            }
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "thread {} ({}): {steps} steps, {:?}, {:.2} M steps/s{}",
                t.tid,
                t.name,
                w.stats,
                steps as f64 / secs / 1e6,
                w.problem
                    .as_deref()
                    .map(|p| format!("; {p}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}
