//! libipt's block decoder (or, with `insn`, its instruction-flow decoder) over every
//! AUX queue of a perf.data, counting only: the libipt row of `BENCHMARKS.md`'s builtin
//! decoder table. Code is read from the files the recording mapped (one process).
//!
//! ```sh
//! cargo run --release -p ptscope-libipt-oracle --example bench_libipt -- perf.data [insn]
//! ```

use ptscope_libipt_oracle::read_recording;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: bench_libipt PERF.DATA [insn]")?;
    let blocks = args.next().as_deref() != Some("insn");
    let t0 = std::time::Instant::now();
    let (image, queues) = read_recording(path.as_ref())?;
    let t1 = std::time::Instant::now();
    let mut total = ptscope_libipt_oracle::Counts::default();
    for trace in queues.values() {
        let c = ptscope_libipt_oracle::count(trace, &image, blocks)?;
        total.insns += c.insns;
        total.blocks += c.blocks;
        total.errors += c.errors;
    }
    println!(
        "{} instructions, {} blocks, {} errors; decode {:.3} s, with reading {:.3} s",
        total.insns,
        total.blocks,
        total.errors,
        t1.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
