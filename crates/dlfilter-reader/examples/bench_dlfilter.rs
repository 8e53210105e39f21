//! Wall and CPU time of decoding one perf.data: text path, dlfilter path (for Intel PT
//! also with `keep_jumps`), and perf with a do-nothing dlfilter (the floor).
//! Usage: `bench_dlfilter PERF.DATA [RUNS] [PATHS] [pt|sampling]`, PATHS a comma list
//! of `text,dlf,keep,floor,early0,raw` or `all`. Best of RUNS for each figure. The kind is
//! read from the recording's header unless given.

use ptscope_decode::header::read_header;
use ptscope_decode::perf::default_perf;
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{install_filter, DlfilterOptions, DlfilterScript};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Timeval {
    sec: i64,
    usec: i64,
}

/// `struct rusage`: two timevals, then 14 longs.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Rusage {
    utime: Timeval,
    stime: Timeval,
    rest: [i64; 14],
}

extern "C" {
    fn getrusage(who: i32, usage: *mut Rusage) -> i32;
}

/// User + system CPU seconds of this process plus its waited-for children.
fn cpu_now() -> f64 {
    let mut t = 0.0;
    for who in [0, -1] {
        let mut r = Rusage::default();
        // SAFETY: getrusage writes one struct rusage into the pointer.
        if unsafe { getrusage(who, &mut r) } == 0 {
            for tv in [r.utime, r.stime] {
                t += tv.sec as f64 + tv.usec as f64 * 1e-6;
            }
        }
    }
    t
}

/// Runs `f` and returns (wall s, CPU s, its count).
fn timed(
    f: impl FnOnce() -> Result<u64, Box<dyn std::error::Error>>,
) -> Result<(f64, f64, u64), Box<dyn std::error::Error>> {
    let (w, c) = (Instant::now(), cpu_now());
    let n = f()?;
    Ok((w.elapsed().as_secs_f64(), cpu_now() - c, n))
}

fn text(data: &Path, kind: RecordingKind) -> Result<u64, Box<dyn std::error::Error>> {
    let mut o = PerfScriptOptions::new(data);
    o.kind = Some(kind);
    let mut s = PerfScript::spawn(&o)?;
    let mut n = 0u64;
    while s.next_event()?.is_some() {
        n += 1;
    }
    s.finish()?;
    Ok(n)
}

fn dlfilter(
    data: &Path,
    kind: RecordingKind,
    filter: &Path,
    keep_jumps: bool,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut o = DlfilterOptions::new(data);
    o.kind = Some(kind);
    o.filter = Some(filter.to_path_buf());
    o.keep_jumps = keep_jumps;
    let mut s = DlfilterScript::spawn(&o)?;
    let mut n = 0u64;
    while s.next_event()?.is_some() {
        n += 1;
    }
    s.finish()?;
    Ok(n)
}

fn perf_only(
    data: &Path,
    kind: RecordingKind,
    extra: &[&str],
) -> Result<u64, Box<dyn std::error::Error>> {
    let st = Command::new(default_perf())
        .arg("script")
        .arg("-i")
        .arg(data)
        .args(kind.script_args())
        .args(extra)
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        return Err("perf script failed".into());
    }
    Ok(0)
}

type Bench<'a> = (
    &'a str,
    &'a str,
    Box<dyn Fn() -> Result<u64, Box<dyn std::error::Error>> + 'a>,
);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let data = PathBuf::from(
        args.next()
            .ok_or("usage: bench_dlfilter PERF.DATA [RUNS] [PATHS]")?,
    );
    let runs: usize = args
        .next()
        .and_then(|a| a.to_str()?.parse().ok())
        .unwrap_or(1);
    let only: Option<String> = args
        .next()
        .and_then(|a| a.to_str().map(String::from))
        .filter(|a| a != "all");
    let kind = match args.next().as_ref().and_then(|a| a.to_str()) {
        Some("pt") => RecordingKind::IntelPt,
        Some("sampling") => RecordingKind::Sampling,
        Some(other) => return Err(format!("unknown kind {other}").into()),
        None => read_header(&data)?.kind(),
    };
    let installed = install_filter()?;
    let filter = installed.path().to_path_buf();
    let fs = filter.to_str().ok_or("filter path is not UTF-8")?;
    let (d, f) = (data.as_path(), filter.as_path());
    let mut benches: Vec<Bench> = vec![
        (
            "text",
            "text: perf script text + ptscope-decode parser",
            Box::new(move || text(d, kind)),
        ),
        (
            "dlf",
            "dlfilter path (default: jumps within a symbol dropped)",
            Box::new(move || dlfilter(d, kind, f, false)),
        ),
    ];
    if kind == RecordingKind::IntelPt {
        benches.push((
            "keep",
            "dlfilter path, keep_jumps (what ptscope decode uses)",
            Box::new(move || dlfilter(d, kind, f, true)),
        ));
    }
    benches.push((
        "floor",
        "floor: perf script + do-nothing dlfilter",
        Box::new(move || perf_only(d, kind, &["--dlfilter", fs, "--dlarg", "null"])),
    ));
    benches.push((
        "early0",
        "perf script + do-nothing dlfilter in filter_event_early (no symbol lookup)",
        Box::new(move || {
            perf_only(
                d,
                kind,
                &["--dlfilter", fs, "--dlarg", "null", "--dlarg", "early"],
            )
        }),
    ));
    benches.push((
        "raw",
        "perf script text to /dev/null (no parser)",
        Box::new(move || perf_only(d, kind, &[])),
    ));
    benches.retain(|b| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == b.0))
    });
    let mut best = vec![(f64::MAX, f64::MAX, 0u64); benches.len()];
    for _ in 0..runs {
        for (i, (_, _, f)) in benches.iter().enumerate() {
            let (w, c, n) = timed(f)?;
            best[i] = (best[i].0.min(w), best[i].1.min(c), n);
        }
    }
    println!("{kind:?} recording {}; best of {runs}", data.display());
    for ((key, what, _), (w, c, n)) in benches.iter().zip(&best) {
        println!("{key:6} {w:7.2} s wall {c:7.2} s CPU  {n:>10} events  {what}");
    }
    let get = |k: &str| benches.iter().position(|b| b.0 == k).map(|i| best[i]);
    for k in ["dlf", "keep"] {
        if let (Some(x), Some(t), Some(fl)) = (get(k), get("text"), get("floor")) {
            println!(
                "{k}: {:.1}x faster than text (CPU {:.1}x); {:.2}x the floor (CPU {:.2}x)",
                t.0 / x.0,
                t.1 / x.1,
                x.0 / fl.0,
                x.1 / fl.1
            );
        }
    }
    Ok(())
}
