//! Wall time of decoding one perf.data: text path, dlfilter path, and perf with a
//! do-nothing dlfilter (the floor). Usage: `bench_dlfilter PERF.DATA [RUNS]`.

use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{install_filter, DlfilterOptions, DlfilterScript};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let data = PathBuf::from(
        args.next()
            .ok_or("usage: bench_dlfilter PERF.DATA [RUNS]")?,
    );
    let runs: usize = args
        .next()
        .and_then(|a| a.to_str()?.parse().ok())
        .unwrap_or(1);
    let dir = std::env::temp_dir();
    let filter = install_filter(&dir)?;
    let kind = RecordingKind::Sampling;
    let mut best = [f64::MAX; 4];
    let mut counts = [0u64; 2];
    for _ in 0..runs {
        let t = Instant::now();
        let mut o = PerfScriptOptions::new(&data);
        o.kind = Some(kind);
        let mut s = PerfScript::spawn(&o)?;
        let mut n = 0u64;
        while s.next_event()?.is_some() {
            n += 1;
        }
        s.finish()?;
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        counts[0] = n;

        let t = Instant::now();
        let mut o = DlfilterOptions::new(&data);
        o.kind = Some(kind);
        o.filter = Some(filter.clone());
        let mut s = DlfilterScript::spawn(&o)?;
        let mut n = 0u64;
        while s.next_event()?.is_some() {
            n += 1;
        }
        s.finish()?;
        best[1] = best[1].min(t.elapsed().as_secs_f64());
        counts[1] = n;

        for (i, extra) in [
            (
                2,
                vec![
                    "--dlfilter",
                    filter.to_str().ok_or("path")?,
                    "--dlarg",
                    "null",
                ],
            ),
            (3, vec![]),
        ] {
            let t = Instant::now();
            let st = Command::new("perf")
                .arg("script")
                .arg("-i")
                .arg(&data)
                .args(kind.script_args())
                .args(&extra)
                .stdout(Stdio::null())
                .status()?;
            if !st.success() {
                return Err("perf script failed".into());
            }
            best[i] = best[i].min(t.elapsed().as_secs_f64());
        }
    }
    println!("events: text {} dlfilter {}", counts[0], counts[1]);
    println!("text path (perf script text + parser): {:.2} s", best[0]);
    println!("dlfilter path:                         {:.2} s", best[1]);
    println!("floor (perf + do-nothing dlfilter):    {:.2} s", best[2]);
    println!("perf script text to /dev/null:         {:.2} s", best[3]);
    println!(
        "speed-up vs text {:.1}x; vs floor {:.2}x",
        best[0] / best[1],
        best[1] / best[2]
    );
    Ok(())
}
