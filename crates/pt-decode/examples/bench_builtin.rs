//! Decodes a perf.data with the builtin decoder and drops every event: what the
//! benchmarks time (`BENCHMARKS.md`, "Builtin Intel PT decoder"). Prints the events and
//! branches decoded; `THREADS` workers (default: one per core). With `CHECK=1` set, also
//! a digest of every event (its thread, time and what it is, names resolved): equal
//! digests before and after a change to the decoder mean the same trace.
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
    let check = std::env::var_os("CHECK").is_some();
    let mut digest = std::collections::hash_map::DefaultHasher::new();
    // Batches, as the pipeline takes them (`EventSource::next_events`).
    let mut batch = Vec::with_capacity(4096);
    loop {
        batch.clear();
        let more = src.next_events(&mut batch, 4096)?;
        for e in &batch {
            events += 1;
            if check {
                use std::hash::{Hash, Hasher};
                let strings = src.strings();
                format!("{e:?}").hash(&mut digest);
                if let Event::Ok {
                    data: EventData::Trace { src, dst, .. },
                    ..
                } = e
                {
                    for h in [src, dst] {
                        let l = strings.location(*h);
                        format!("{:?} {}", l.ip, l.offset).hash(&mut digest);
                    }
                }
                digest.finish().hash(&mut digest);
            }
            match e {
                Event::Ok {
                    data: EventData::Trace { change: None, .. },
                    ..
                } => branches += 1,
                Event::DecodeError { .. } => errors += 1,
                _ => {}
            }
        }
        if !more {
            break;
        }
    }
    println!(
        "{events} events, {branches} branches, {errors} errors, {:.3} s",
        t0.elapsed().as_secs_f64()
    );
    if check {
        use std::hash::Hasher;
        println!("digest {:016x}", digest.finish());
    }
    Ok(())
}
