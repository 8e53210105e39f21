//! Against perf itself: on the same perf.data, the per-function self sample counts a
//! sampled trace carries (the `samples` arg of each slice: samples with that frame as the
//! leaf, summed per function name) equal `perf report --no-children` for every function
//! perf names, and the samples taken in the kernel (perf names their kernel function, a
//! user-space trace shows one `[kernel: …]` frame) sum to the same. Three programs compiled here (C with named threads, C++ exceptions, Rust
//! without frame pointers), recorded by `ptscope run -w` with its default DWARF stacks.

use ptscope_fxt::reader::{ArgValue, EventKind, Reader, Record};
use ptscope_realworld::harness::{can_record, decode, record, system_tool};
use ptscope_realworld::programs;
use ptscope_realworld::trace::Trace;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Function name → self samples from the trace: the `samples` arg of each slice (on its
/// end record), summed per name over every thread.
fn trace_counts(t: &Trace) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for r in Reader::new(&t.bytes) {
        let Ok(Record::Event(e)) = r else { continue };
        if e.kind != EventKind::End {
            continue;
        }
        let n = match e.args.get("samples") {
            Some(ArgValue::Int64(n)) => n as u64,
            Some(ArgValue::Int32(n)) => n as u64,
            Some(ArgValue::UInt64(n)) => n,
            Some(ArgValue::UInt32(n)) => n as u64,
            _ => continue,
        };
        let name = if e.name.starts_with("[kernel") {
            KERNEL
        } else {
            e.name
        };
        *counts.entry(name.to_string()).or_insert(0) += n;
    }
    counts
}

/// Every sample taken in the kernel, summed: perf's `[k]` lines, the trace's `[kernel: …]`
/// frames.
const KERNEL: &str = "(in the kernel)";

/// The non-empty perf.data files of the working directory (the flight recorder may rotate
/// through several), in name order.
fn perf_data_files(work: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with("perf.data"))
                && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
        })
        .collect();
    files.sort();
    files
}

/// Symbol → self samples from `perf report --no-children --sort sym` on every perf.data
/// file of the working directory (the flight recorder may rotate through several), for
/// the sampling event only: the `sched:sched_switch` samples that give time off CPU its
/// stack are no time on the CPU, and the trace counts none of them.
/// Lines for code perf cannot name (`[unknown]`, a bare address) are left out of the
/// map (ptscope names such code `FILE+0xOFF`, per function) but counted in the total.
fn perf_counts(perf: &Path, work: &Path) -> (BTreeMap<String, u64>, u64, Vec<String>) {
    let mut counts = BTreeMap::new();
    let mut unnamed = Vec::new();
    let mut total = 0;
    let files = perf_data_files(work);
    assert!(!files.is_empty(), "no perf.data in {}", work.display());
    for f in files {
        let out = Command::new(perf)
            .args(["report", "--stdio", "--no-children", "-g", "none"])
            .args(["--sort", "sym", "-F", "sample,sym", "-i"])
            .arg(&f)
            .output()
            .expect("run perf report");
        assert!(
            out.status.success(),
            "perf report -i {} failed: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut switch_section = false;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // `      503  [.] __memmove_avx512_unaligned_erms`
            let line = line.trim();
            // `# Samples: 19  of event 'sched:sched_switch'` opens each event's section.
            if let Some((_, event)) = line
                .strip_prefix("# Samples:")
                .and_then(|l| l.split_once("of event"))
            {
                switch_section = event.contains("sched:sched_switch");
            }
            if line.is_empty() || line.starts_with('#') || switch_section {
                continue;
            }
            let Some((n, rest)) = line.split_once(char::is_whitespace) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            total += n;
            let rest = rest.trim_start();
            let sym = match rest.split_once("] ") {
                // perf names the kernel function a sample was in; a user-space trace has
                // one `[kernel: …]` frame over the user stack instead: compared summed.
                Some(("[k", _)) => {
                    *counts.entry(KERNEL.to_string()).or_insert(0) += n;
                    continue;
                }
                Some((_level, s)) => s.trim(),
                None => continue,
            };
            if sym.starts_with("0x") || sym.contains("[unknown]") {
                unnamed.push(line.to_string());
                continue;
            }
            *counts.entry(sym.to_string()).or_insert(0) += n;
        }
    }
    (counts, total, unnamed)
}

/// Samples to which perf gave no frame at all, in every perf.data file of `work`: in a
/// file the flight recorder rotated to as the program exited, perf may hold no memory
/// map of the process (seen under load: 213 samples of `after_trigger_work`, printed by
/// `perf script` as a bare header, by `perf report` as a bare address). Without a frame
/// there is nothing to place in a stack, so the trace cannot hold them.
fn stackless_samples(perf: &Path, work: &Path) -> u64 {
    let mut n = 0;
    for f in perf_data_files(work) {
        let out = Command::new(perf)
            .args(["script", "-F", "tid,ip,event", "-i"])
            .arg(&f)
            .output()
            .expect("run perf script");
        assert!(
            out.status.success(),
            "perf script -i {} failed",
            f.display()
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let header = !l.is_empty()
                && !l.starts_with(char::is_whitespace)
                && !l.contains("sched:sched_switch");
            let next_is_frame = lines
                .get(i + 1)
                .is_some_and(|x| x.starts_with(char::is_whitespace) && !x.trim().is_empty());
            if header && !next_is_frame {
                n += 1;
            }
        }
    }
    n
}

/// The comparison table (for the failure message and `--nocapture`).
fn table(perf: &BTreeMap<String, u64>, ours: &BTreeMap<String, u64>) -> String {
    let mut s = format!("{:>8} {:>8}  function\n", "perf", "ptscope");
    let mut names: Vec<&String> = perf.keys().chain(ours.keys()).collect();
    names.sort();
    names.dedup();
    for n in names {
        let p = perf.get(n).map_or("-".to_string(), u64::to_string);
        let o = ours.get(n).map_or("-".to_string(), u64::to_string);
        s += &format!("{p:>8} {o:>8}  {n}\n");
    }
    s
}

/// Records `command` with `ptscope run -w`, then checks the counts against perf's.
fn compare(test: &str, command: &[&dyn AsRef<OsStr>]) {
    let perf = system_tool("perf").expect("can_record found perf");
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("rec");
    let w = work.to_str().unwrap();
    let (run, t) = record(dir.path(), test, &["-w", w], command);
    let (theirs, perf_total, unnamed) = perf_counts(&perf, &work);
    assert!(
        perf_total > 100,
        "perf saw too few samples ({perf_total}) to compare"
    );
    // `perf report` names each sample's function from the symbol table; ptscope by
    // default expands inlined calls from DWARF, so the trace's leaf is the innermost
    // inlined function (`<u64>::wrapping_mul` inside `nofp::checksum`), under its DWARF
    // name. Those only move samples between names, so the run's own trace holds exactly
    // perf's samples…
    let ours = trace_counts(&t);
    let run_total: u64 = ours.values().sum();
    eprintln!(
        "{test}: run's trace (inlines expanded)\n{}",
        table(&theirs, &ours)
    );
    let stackless = stackless_samples(&perf, &work);
    let perf_total = perf_total - stackless;
    assert_eq!(
        run_total, perf_total,
        "{test}: the run's trace holds {run_total} samples, perf report {perf_total} with \
         a frame ({stackless} without); perf's lines without a name: {unnamed:?}"
    );
    // …and decoded with `--no-inline`, every function perf names has perf's count,
    // through both decoders. The functions perf cannot name (`[unknown]`) are named by
    // ptscope (`FILE+0xOFF`), so they are in the total above, not compared by name.
    for dec in ["text", "dlfilter"] {
        let out = dir.path().join(format!("{dec}.fxt"));
        let t = decode(&work, &out, &["--no-inline", "--decoder", dec], &run);
        let ours = trace_counts(&t);
        let table = table(&theirs, &ours);
        eprintln!("{test}: --no-inline --decoder {dec}\n{table}");
        for (name, &n) in &theirs {
            assert_eq!(
                ours.get(name).copied().unwrap_or(0),
                n,
                "{test} (--decoder {dec}): self samples of {name} differ from perf report's:\n{table}"
            );
        }
        let total: u64 = ours.values().sum();
        assert_eq!(total, perf_total, "{test} (--decoder {dec}): total samples");
    }
}

#[test]
fn c_named_threads_self_counts_equal_perf_report() {
    let test = "c_named_threads_self_counts_equal_perf_report";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::threads_c(test, dir.path()) else {
        return;
    };
    compare(test, &[&exe]);
}

#[test]
fn cpp_exceptions_self_counts_equal_perf_report() {
    let test = "cpp_exceptions_self_counts_equal_perf_report";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::throw_cpp(test, dir.path()) else {
        return;
    };
    compare(test, &[&exe, &"30000"]);
}

#[test]
fn rust_without_frame_pointers_self_counts_equal_perf_report() {
    let test = "rust_without_frame_pointers_self_counts_equal_perf_report";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = programs::nofp_rs(test, dir.path()) else {
        return;
    };
    compare(test, &[&exe, &"60"]);
}
