//! What the sampling flight recorder adds at the end of a recording: the side band of
//! every piece taken in order, and each piece after the first written again with the
//! side band before it (to files beside the inputs' names in a temporary directory;
//! the inputs are not changed). Prints the time of each step and the sizes.
//!
//! `cargo run --release -p ptscope-perf-data --example sideband_rewrite -- DIR/perf.data.*`

use ptscope_perf_data::{PerfData, Sideband};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        return Err("usage: sideband_rewrite PERF.DATA...".into());
    }
    let out = tempfile::tempdir()?;
    let mut sideband = Sideband::default();
    let (mut take_s, mut write_s, mut bytes_in, mut bytes_out) = (0.0, 0.0, 0u64, 0u64);
    for (i, f) in files.iter().enumerate() {
        let data = PerfData::open(f)?;
        bytes_in += data.bytes().len() as u64;
        if i > 0 {
            let t = Instant::now();
            let path = out.path().join(format!("piece{i}"));
            let mut w = std::io::BufWriter::new(std::fs::File::create(&path)?);
            data.write_with_sideband(&sideband, &mut w)?;
            std::io::Write::flush(&mut w)?;
            drop(w);
            write_s += t.elapsed().as_secs_f64();
            bytes_out += std::fs::metadata(&path)?.len();
        }
        let t = Instant::now();
        sideband.take(&data);
        take_s += t.elapsed().as_secs_f64();
    }
    println!(
        "{} pieces, {:.1} MB: side band taken in {:.3} s ({} bytes held at the end); \
         pieces 2.. written again in {:.3} s ({:.1} MB)",
        files.len(),
        bytes_in as f64 / 1e6,
        take_s,
        sideband.len(),
        write_s,
        bytes_out as f64 / 1e6
    );
    Ok(())
}
