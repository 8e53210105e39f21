//! Decode throughput and memory on one core.
//!
//! Builds inputs by repeating `hello_world_userspace/input.perf` with times shifted
//! forward on every repetition (written under /tmp, reused if present), decodes them,
//! and prints MB/s, lines/s and the peak RSS after each size, so a flat peak shows the
//! decoder's memory does not grow with the input.
//!
//! ```text
//! cargo run --release -p ptscope-decode --example bench_decode -- [SIZE_MB...]
//! ```
//! Default sizes: 100 and 1024 MB.

use ptscope_decode::Decoder;
use ptscope_event::{Event, EventData};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn fixture() -> PathBuf {
    fixtures::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf")
}

/// One fixture line, split around its timestamp when it is a header.
enum Line {
    Header {
        before: Vec<u8>,
        time_ns: u64,
        after: Vec<u8>,
    },
    Other(Vec<u8>),
}

fn split_lines(text: &[u8]) -> Vec<Line> {
    text.split(|&b| b == b'\n')
        .map(|l| {
            // `pid/tid SEC.FRAC:` — the first `.` before the first `:` is the time's.
            let colon = l.iter().position(|&b| b == b':');
            let dot = colon.and_then(|c| l[..c].iter().rposition(|&b| b == b'.'));
            let space = dot.and_then(|d| l[..d].iter().rposition(|&b| b == b' '));
            match (space, dot, colon, l.first()) {
                (Some(s), Some(d), Some(c), Some(&first)) if first != b'\t' => {
                    let sec: u64 = std::str::from_utf8(&l[s + 1..d])
                        .ok()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(0);
                    let frac: u64 = std::str::from_utf8(&l[d + 1..c])
                        .ok()
                        .and_then(|x| x.parse().ok())
                        .unwrap_or(0);
                    Line::Header {
                        before: l[..=s].to_vec(),
                        time_ns: sec * 1_000_000_000 + frac,
                        after: l[c..].to_vec(),
                    }
                }
                _ => Line::Other(l.to_vec()),
            }
        })
        .collect()
}

fn build_input(path: &Path, size: u64) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() >= size) {
        return Ok(());
    }
    let text = std::fs::read(fixture())?;
    let mut lines = split_lines(&text);
    if matches!(lines.last(), Some(Line::Other(l)) if l.is_empty()) {
        lines.pop();
    }
    let times = lines.iter().filter_map(|l| match l {
        Line::Header { time_ns, .. } => Some(*time_ns),
        Line::Other(_) => None,
    });
    let (lo, hi) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    let span = hi - lo + 1_000;
    let tmp = path.with_extension("partial");
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
    let mut written = 0u64;
    let mut rep = 0u64;
    while written < size {
        for line in &lines {
            match line {
                Line::Header {
                    before,
                    time_ns,
                    after,
                } => {
                    let t = time_ns + rep * span;
                    out.write_all(before)?;
                    let stamp = format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000);
                    out.write_all(stamp.as_bytes())?;
                    out.write_all(after)?;
                    written += (before.len() + stamp.len() + after.len()) as u64;
                }
                Line::Other(l) => {
                    out.write_all(l)?;
                    written += l.len() as u64;
                }
            }
            out.write_all(b"\n")?;
            written += 1;
        }
        rep += 1;
    }
    out.flush()?;
    drop(out);
    std::fs::rename(tmp, path)
}

/// Peak resident set size of this process so far, in KiB.
fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Nanoseconds this thread has spent on a CPU: unlike wall time, it does not count
/// time lost to other processes on a busy machine.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<u64> = {
        let args: Vec<u64> = std::env::args()
            .skip(1)
            .map(|a| a.parse())
            .collect::<Result<_, _>>()?;
        if args.is_empty() {
            vec![100, 1024]
        } else {
            args
        }
    };
    println!("input: hello_world_userspace/input.perf repeated, times shifted");
    for mb in sizes {
        // Kept between runs in the checkout's target directory, not a shared /tmp name.
        let dir = fixtures::fixtures_dir().join("../../target/bench-input");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("decode-{mb}MB.perf"));
        build_input(&path, mb << 20)?;
        // Reset the peak RSS (Linux ≥ 4.0) so building the input does not count.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let mut best = f64::MAX;
        let mut best_cpu = f64::MAX;
        let mut last = None;
        let runs = if mb <= 256 { 3 } else { 1 };
        for _ in 0..runs {
            let start = Instant::now();
            let cpu_start = cpu_ns();
            let mut decoder = Decoder::open(&path)?;
            let mut checksum = 0u64;
            while let Some(event) = decoder.next_event()? {
                if let Event::Ok {
                    data: EventData::Trace { dst, .. },
                    ..
                } = event
                {
                    checksum = checksum.wrapping_add(decoder.strings().location(dst).ip);
                }
            }
            let secs = start.elapsed().as_secs_f64();
            best = best.min(secs);
            best_cpu = best_cpu.min(cpu_ns().saturating_sub(cpu_start) as f64 / 1e9);
            last = Some((*decoder.stats(), checksum));
        }
        let (stats, checksum) = last.ok_or("no run")?;
        let mib = stats.bytes as f64 / (1 << 20) as f64;
        println!(
            "{mb:>5} MB: wall {:.3} s = {:.0} MB/s; on-CPU {:.3} s = {:.0} MB/s, {:.2} M lines/s, {:.2} M events/s; warnings {}; peak RSS {} KiB  (checksum {checksum:x})",
            best,
            mib / best,
            best_cpu,
            mib / best_cpu,
            stats.lines as f64 / 1e6 / best_cpu,
            stats.events as f64 / 1e6 / best_cpu,
            stats.warnings,
            vm_hwm_kib(),
        );
    }
    Ok(())
}
