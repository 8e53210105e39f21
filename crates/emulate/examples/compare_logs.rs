//! Decodes two emulate recordings of one run (an every-block log and a stack-mode log,
//! e.g. ptsim's with `stack_log`), or of two runs of one deterministic single-threaded
//! program (two plugin builds), on the instruction clock and prints, per thread, the
//! first steps where they differ: a check that stack mode loses nothing.
//!
//! Two runs must be given environments of the same size: a variable of another length
//! (`X=ab` against `X=c`) moves the stack, and `ld.so`'s and libc's steps differ from
//! their first string comparisons on (seen on sqlite3 and python3).
//!
//! `cargo run -p ptscope-emulate --example compare_logs -- DIR_A DIR_B [CONTEXT]`

use ptscope_emulate::{Decoding, Recording, TimeBase};
use ptscope_event::exact::ExactStep;

/// Each thread's steps, with their functions' names.
type Threads = Vec<(u32, Vec<(ExactStep, String)>)>;

fn steps(dir: &str) -> Result<Threads, Box<dyn std::error::Error>> {
    let rec = Recording::open(std::path::Path::new(dir))?;
    let view = rec.view()?;
    let d = Decoding::with_time_base(&view, 0, TimeBase::Instructions, "p");
    let mut out = Vec::new();
    for (i, t) in d.threads().iter().enumerate() {
        let mut w = d.walker(i);
        let mut buf = Vec::new();
        let mut all = Vec::new();
        while w.fill(&mut buf) {
            for s in &buf {
                all.push((*s, w.functions().name(s.to).to_string()));
            }
            buf.clear();
        }
        for s in &mut all {
            s.0.time += d.origin();
        }
        out.push((t.tid, all));
    }
    Ok(out)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let context: usize = args.get(2).map(|c| c.parse()).transpose()?.unwrap_or(8);
    let a = steps(&args[0])?;
    let b = steps(&args[1])?;
    for (tid, sa) in &a {
        // Two runs of a one-thread program: their threads have different ids.
        let single = || (a.len() == 1 && b.len() == 1).then(|| &b[0]);
        let Some((_, sb)) = b.iter().find(|x| x.0 == *tid).or_else(single) else {
            println!("thread {tid}: only in {}", args[0]);
            continue;
        };
        let same = |x: &(ExactStep, String), y: &(ExactStep, String)| {
            x.0.kind == y.0.kind && x.1 == y.1 && x.0.time == y.0.time
        };
        match sa.iter().zip(sb.iter()).position(|(x, y)| !same(x, y)) {
            None if sa.len() == sb.len() => println!("thread {tid}: {} steps, identical", sa.len()),
            None => println!(
                "thread {tid}: same for {} steps, then lengths {} / {}",
                sa.len().min(sb.len()),
                sa.len(),
                sb.len()
            ),
            Some(i) => {
                println!(
                    "thread {tid}: differ at step {i} of {} / {}",
                    sa.len(),
                    sb.len()
                );
                let lo = i.saturating_sub(context);
                for k in lo..(i + context) {
                    let fa = sa
                        .get(k)
                        .map(|s| format!("{:>12} {:?} {}", s.0.time, s.0.kind, s.1))
                        .unwrap_or_default();
                    let fb = sb
                        .get(k)
                        .map(|s| format!("{:>12} {:?} {}", s.0.time, s.0.kind, s.1))
                        .unwrap_or_default();
                    println!("{}{k:6} | {fa:<70} | {fb}", if k == i { ">" } else { " " });
                }
            }
        }
    }
    Ok(())
}
