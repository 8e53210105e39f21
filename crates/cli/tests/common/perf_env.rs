//! What the record tests need from this machine, checked once per test binary: root, a
//! perf that records, a C compiler; and small helpers they all use. A missing piece
//! skips the tests loudly, or fails them under `CI`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The effective uid, from `/proc/self/status` (no unsafe, no libc call).
pub fn euid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_owned))
        })
        .and_then(|u| u.parse().ok())
        .unwrap_or(u32::MAX)
}

/// True if root can `perf record -e cpu-clock EXTRA… -- true` here; otherwise a loud skip
/// naming `what` (the tests skipped), or a failure under CI.
pub fn perf_usable_with(what: &str, extra: &[&str]) -> bool {
    let why = if euid() != 0 {
        Some("not root".to_string())
    } else {
        match Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock"])
            .args(extra)
            .args(["-o", "/dev/null", "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Ok(s) if s.success() => None,
            Ok(s) => Some(format!("perf record {} failed ({s})", extra.join(" "))),
            Err(e) => Some(format!("perf not found ({e})")),
        }
    };
    match why {
        None => true,
        Some(w) => {
            assert!(std::env::var_os("CI").is_none(), "perf unusable in CI: {w}");
            eprintln!("!!!!!!!! SKIPPED {what}: {w}");
            false
        }
    }
}

/// [`perf_usable_with`] plain cpu-clock sampling.
pub fn perf_usable(what: &str) -> bool {
    perf_usable_with(what, &[])
}

/// Compiles C `src` into `dir/name` with gcc (`-O1 -g`, frame pointers, threads, and
/// `extra` flags).
pub fn build_c(dir: &Path, name: &str, src: &str, extra: &[&str]) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).expect("write C source");
    let exe = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"])
        .args(extra)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed on {name}.c");
    exe
}

/// The CPU time `pid` has used (user + system, in clock ticks), from `/proc/PID/stat`.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("target alive");
    // The fields after the command name, which is in parentheses and may contain spaces:
    // utime and stime (fields 14 and 15 of proc(5)) are the 12th and 13th from `state`.
    let after = &stat[stat.rfind(')').expect("stat") + 2..];
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|x| x.parse().expect("stat number"))
        .collect();
    f[0] + f[1]
}

/// Waits until `pid` has run `ticks` more clock ticks of CPU (however loaded the machine);
/// fails after 120 s.
pub fn wait_for_cpu(pid: u32, ticks: u64) {
    let start = cpu_ticks(pid);
    let deadline = Instant::now() + Duration::from_secs(120);
    while cpu_ticks(pid) < start + ticks {
        assert!(
            Instant::now() < deadline,
            "process {pid} ran less than {ticks} clock ticks of CPU in 120 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `perf record -e cpu-clock EXTRA… -o DATA -- sh -c LOOP`: a recording of a shell loop of
/// `iterations` steps (a fraction of a second per 100 000), which must succeed.
pub fn record_shell_loop(data: &Path, iterations: u32, extra: &[&str]) {
    let st = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock"])
        .args(extra)
        .arg("-o")
        .arg(data)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "i=0; while [ $i -lt {iterations} ]; do i=$((i+1)); done"
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("perf record");
    assert!(st.success(), "perf record failed");
}
