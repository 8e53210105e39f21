//! libipt's block decoder (or, with `insn`, its instruction-flow decoder) over every
//! AUX queue of a perf.data, counting only: the libipt row of `BENCHMARKS.md`'s builtin
//! decoder table. Code is read from the files the recording mapped (one process).
//!
//! ```sh
//! cargo run --release -p ptscope-libipt-oracle --example bench_libipt -- perf.data [insn]
//! ```

use ptscope_intel_pt::decoder::Memory;
use ptscope_perf_data::{PerfData, Record, RecordAt};
use std::collections::BTreeMap;

struct Image {
    maps: Vec<(u64, u64, u64, usize)>,
    files: Vec<Vec<u8>>,
}

impl Memory for Image {
    fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
        let &(start, end, pgoff, f) = self.maps.iter().rev().find(|m| ip >= m.0 && ip < m.1)?;
        let bytes = &self.files[f];
        let off = usize::try_from(ip - start + pgoff).ok()?;
        let stop = usize::try_from(end - start + pgoff).ok()?.min(bytes.len());
        bytes.get(off..stop)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: bench_libipt PERF.DATA [insn]")?;
    let blocks = args.next().as_deref() != Some("insn");
    let t0 = std::time::Instant::now();
    let data = PerfData::open(&path)?;
    let mut image = Image {
        maps: Vec::new(),
        files: Vec::new(),
    };
    let mut paths: Vec<Vec<u8>> = Vec::new();
    let mut queues: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for r in data.records() {
        let Ok(RecordAt { record, .. }) = r else {
            continue;
        };
        match record {
            Record::Mmap(m) if m.exec && m.path.starts_with(b"/") => {
                let f = match paths.iter().position(|p| p == m.path) {
                    Some(f) => f,
                    None => {
                        let Ok(bytes) = std::fs::read(std::str::from_utf8(m.path)?) else {
                            continue;
                        };
                        paths.push(m.path.to_vec());
                        image.files.push(bytes);
                        paths.len() - 1
                    }
                };
                image.maps.push((m.start, m.start + m.len, m.pgoff, f));
            }
            Record::Auxtrace(a) => queues.entry(a.idx).or_default().extend_from_slice(a.data),
            _ => {}
        }
    }
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
