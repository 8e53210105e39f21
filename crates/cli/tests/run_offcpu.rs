//! `ptscope run` without Intel PT samples, and a sampled frame no longer lasts through
//! time its thread spent off CPU: it ends when the thread left the CPU (perf's context
//! switch records), and the time off CPU shows as an `[off-cpu]` slice. Real perf,
//! real programs built here; skips loudly without root and perf (fails in CI).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "common/perf_env.rs"]
mod perf_env;
use perf_env::*;

/// Busy, sleeps 1.5 s, busy again.
const SLEEP: &str = r#"
#include <unistd.h>
__attribute__((noinline)) long compute_a(void) { volatile long s = 0; for (long i = 0; i < 150000000; i++) s += i; return s; }
__attribute__((noinline)) long compute_b(void) { volatile long s = 0; for (long i = 0; i < 150000000; i++) s += i; return s; }
int main(void) { long t = compute_a(); usleep(1500000); t += compute_b(); return (int)(t & 1); }
"#;

/// The main thread computes, then waits in `pthread_join` while a worker computes, then
/// computes again.
const JOIN: &str = r#"
#define _GNU_SOURCE
#include <pthread.h>
__attribute__((noinline)) long resolve_map(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long finish_up(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
__attribute__((noinline)) long work(long n) { volatile long s = 0; for (long i = 0; i < n; i++) s += i; return s; }
static void *body(void *arg) { pthread_setname_np(pthread_self(), "worker"); return (void *)work((long)arg); }
int main(void) {
  long t = resolve_map(100000000);
  pthread_t th;
  pthread_create(&th, 0, body, (void *)400000000L);
  void *r; pthread_join(th, &r);
  t += (long)r + finish_up(100000000);
  return (int)(t & 1);
}
"#;

/// The sampling period of `--timer-resolution low` (1 kHz), in ns.
const PERIOD: i64 = 1_000_000;

fn ptscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptscope"))
}

fn ptscope_ok(args: &[&std::ffi::OsStr]) {
    let o = Command::new(ptscope())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "ptscope {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A slice: name, begin and end (ns), depth on its track (0 = outermost).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Slice {
    name: String,
    begin: i64,
    end: i64,
    depth: usize,
}

/// Thread name (without its `[tid=N]`) → its slices, in the order they ended.
type Threads = BTreeMap<String, Vec<Slice>>;

fn slices(path: &Path) -> Threads {
    use ptscope_fxt::reader::{EventKind, Reader, Record};
    let data = std::fs::read(path).unwrap();
    let report = ptscope_fxt::check::validate_bytes(&data);
    assert!(report.is_ok(), "{report}");
    let mut reader = Reader::new(&data);
    let mut names = BTreeMap::new();
    let mut open: BTreeMap<u64, Vec<(String, u64)>> = BTreeMap::new();
    let mut done: BTreeMap<u64, Vec<Slice>> = BTreeMap::new();
    let mut records = Vec::new();
    for r in reader.by_ref() {
        records.push(r.unwrap());
    }
    let tps = reader.ticks_per_second() as i128;
    let ns = |t: u64| (t as i128 * 1_000_000_000 / tps) as i64;
    for r in records {
        match r {
            Record::KernelObject(k) if k.obj_type == 2 => {
                let bare = k.name.split(" [").next().unwrap_or(k.name);
                names.insert(k.koid, bare.to_string());
            }
            Record::Event(e) => match e.kind {
                EventKind::Begin => open
                    .entry(e.tid)
                    .or_default()
                    .push((e.name.to_string(), e.timestamp)),
                EventKind::End => {
                    let stack = open.entry(e.tid).or_default();
                    let (name, begin) = stack.pop().expect("an end matches a begin");
                    assert_eq!(name, e.name);
                    done.entry(e.tid).or_default().push(Slice {
                        name,
                        begin: ns(begin),
                        end: ns(e.timestamp),
                        depth: stack.len(),
                    });
                }
                // A leaf call is one complete event.
                EventKind::Complete { end } => {
                    let depth = open.get(&e.tid).map_or(0, Vec::len);
                    done.entry(e.tid).or_default().push(Slice {
                        name: e.name.to_string(),
                        begin: ns(e.timestamp),
                        end: ns(end),
                        depth,
                    });
                }
                _ => {}
            },
            _ => {}
        }
    }
    done.into_iter()
        .map(|(tid, s)| (names.get(&tid).cloned().unwrap_or_default(), s))
        .collect()
}

/// Records `exe` with `ptscope run` (1 kHz, recording kept in DIR/rec), then decodes
/// the recording with the text and the dlfilter decoder: the three traces agree.
fn record(dir: &Path, exe: &Path) -> Threads {
    let rec = dir.join("rec");
    let run = dir.join("run.fxt");
    let os = std::ffi::OsStr::new;
    ptscope_ok(&[
        os("run"),
        os("--quiet"),
        os("--timer-resolution"),
        os("low"),
        os("-w"),
        rec.as_os_str(),
        os("-o"),
        run.as_os_str(),
        os("--"),
        exe.as_os_str(),
    ]);
    let t = slices(&run);
    for decoder in ["text", "dlfilter"] {
        let out = dir.join(format!("{decoder}.fxt"));
        ptscope_ok(&[
            os("decode"),
            os("--quiet"),
            rec.as_os_str(),
            os("--decoder"),
            os(decoder),
            os("-o"),
            out.as_os_str(),
        ]);
        assert_eq!(slices(&out), t, "the {decoder} decoder's trace differs");
    }
    t
}

/// The times (ns) of the samples in `rec/perf.data*` whose stack holds `function` (the
/// sampling flight recorder keeps its recording as several rotated files).
fn sample_times(dir: &Path, function: &str) -> Vec<i64> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("rec"))
        .expect("rec")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("perf.data"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no perf.data in {}", dir.display());
    let mut text = String::new();
    for f in &files {
        let o = Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(f)
            .args(["--ns", "-F", "time,ip,sym"])
            .stderr(Stdio::null())
            .output()
            .expect("perf script");
        assert!(o.status.success(), "perf script -i {}", f.display());
        text.push_str(&String::from_utf8_lossy(&o.stdout));
    }
    let mut times = Vec::new();
    let mut current = None;
    for line in text.lines() {
        if !line.starts_with('\t') {
            // `   2832.674054403: ` starts a sample; its frames follow, indented.
            current = line
                .trim()
                .trim_end_matches(':')
                .split_once('.')
                .map(|(s, f)| {
                    s.trim().parse::<i64>().unwrap() * 1_000_000_000 + f.parse::<i64>().unwrap()
                });
        } else if line.split_whitespace().nth(1) == Some(function) {
            if let Some(t) = current.take() {
                times.push(t);
            }
        }
    }
    times
}

#[test]
fn a_sleep_is_off_cpu_and_ends_the_function_before_it() {
    if !perf_usable_with("off-CPU tests", &["--switch-events"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = build_c(d.path(), "sleeper", SLEEP, &[]);
    let t = record(d.path(), &exe);
    let main = t.get("sleeper").unwrap_or_else(|| panic!("{t:#?}"));
    let off: Vec<&Slice> = main.iter().filter(|s| s.name == "[off-cpu]").collect();
    let sleep = off
        .iter()
        .find(|s| s.end - s.begin >= 1_400_000_000)
        .unwrap_or_else(|| panic!("no [off-cpu] slice covers the 1.5 s sleep: {off:#?}"));
    let a: Vec<&Slice> = main.iter().filter(|s| s.name == "compute_a").collect();
    let b: Vec<&Slice> = main.iter().filter(|s| s.name == "compute_b").collect();
    assert!(!a.is_empty() && !b.is_empty(), "{main:#?}");
    let a_end = a.iter().map(|s| s.end).max().unwrap();
    assert!(
        a_end <= sleep.begin,
        "compute_a ends at {a_end} ns, in the sleep from {} ns",
        sleep.begin
    );
    // Trace time against perf time: compute_b begins at its first sample.
    let (a_samples, b_samples) = (
        sample_times(d.path(), "compute_a"),
        sample_times(d.path(), "compute_b"),
    );
    let b_first = *b_samples.first().expect("compute_b samples");
    let offset = b_first - b.iter().map(|s| s.begin).min().unwrap();
    let a_last = *a_samples.last().expect("compute_a samples");
    // Time the thread spent switched out while runnable (a loaded machine: the trace
    // shows it as `[off-cpu: preempted]`) is no CPU time: the CPU clock did not tick.
    let from = a_last - offset;
    let preempted: i64 = main
        .iter()
        .filter(|s| s.name.starts_with("[off-cpu") && s.begin < sleep.begin)
        .map(|s| (s.end.min(a_end) - s.begin.max(from)).max(0))
        .sum();
    let after = a_end + offset - a_last - preempted;
    // The sleep's switch-out comes before the next tick would have sampled compute_a
    // again; that tick may fire a little late (CI: 1 008 733 ns, a KVM guest's timer).
    assert!(
        (0..=PERIOD * 11 / 10).contains(&after),
        "compute_a ends {after} ns after its last sample (more than one period and its jitter)"
    );
}

#[test]
fn a_thread_blocked_in_join_is_off_cpu_not_in_its_last_function() {
    if !perf_usable_with("off-CPU tests", &["--switch-events"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = build_c(d.path(), "joiner", JOIN, &[]);
    let t = record(d.path(), &exe);
    let main = t.get("joiner").unwrap_or_else(|| panic!("{t:#?}"));
    let worker = t.get("worker").unwrap_or_else(|| panic!("{t:#?}"));
    let work: Vec<&Slice> = worker.iter().filter(|s| s.name == "work").collect();
    let (w0, w1) = (
        work.iter()
            .map(|s| s.begin)
            .min()
            .expect("work was sampled"),
        work.iter().map(|s| s.end).max().unwrap(),
    );
    // While the worker computes, the joiner is in none of its functions...
    for s in main
        .iter()
        .filter(|s| s.name == "resolve_map" || s.name == "finish_up")
    {
        let overlap = s.end.min(w1) - s.begin.max(w0);
        assert!(
            overlap <= PERIOD,
            "{} overlaps the worker's work by {overlap} ns: {s:?}",
            s.name
        );
    }
    // ...but off CPU, for most of that time.
    let off: i64 = main
        .iter()
        .filter(|s| s.name.starts_with("[off-cpu"))
        .map(|s| (s.end.min(w1) - s.begin.max(w0)).max(0))
        .sum();
    assert!(
        off * 10 >= (w1 - w0) * 9,
        "the joiner is off CPU for {off} of the worker's {} ns",
        w1 - w0
    );
}

/// A recording without context switches (perf run by hand): the frames before the
/// sleep end about one sampling period after their last sample, not at the next one.
#[test]
fn without_switch_events_a_frame_ends_a_period_after_its_last_sample() {
    if !perf_usable_with("off-CPU tests", &["--switch-events"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let exe = build_c(d.path(), "sleeper", SLEEP, &[]);
    let rec = d.path().join("rec");
    std::fs::create_dir(&rec).unwrap();
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock/freq=1000/u",
            "--call-graph",
            "fp",
            "-o",
        ])
        .arg(rec.join("perf.data"))
        .arg("--")
        .arg(&exe)
        .stdout(Stdio::null())
        .status()
        .expect("perf record");
    assert!(st.success());
    let out = d.path().join("trace.fxt");
    let os = std::ffi::OsStr::new;
    ptscope_ok(&[
        os("decode"),
        os("--quiet"),
        rec.as_os_str(),
        os("-o"),
        out.as_os_str(),
    ]);
    let t = slices(&out);
    let main = t.get("sleeper").unwrap_or_else(|| panic!("{t:#?}"));
    assert!(main.iter().all(|s| !s.name.starts_with("[off-cpu")));
    let a_end = main
        .iter()
        .filter(|s| s.name == "compute_a")
        .map(|s| s.end)
        .max();
    let b_begin = main
        .iter()
        .filter(|s| s.name == "compute_b")
        .map(|s| s.begin)
        .min();
    let (Some(a_end), Some(b_begin)) = (a_end, b_begin) else {
        panic!("{main:#?}");
    };
    let (a_samples, b_samples) = (
        sample_times(d.path(), "compute_a"),
        sample_times(d.path(), "compute_b"),
    );
    let offset = b_samples.first().expect("compute_b samples") - b_begin;
    let after = a_end + offset - a_samples.last().expect("compute_a samples");
    // The period is estimated from the gaps between samples, which jitter a little.
    assert!(
        (0..=PERIOD * 11 / 10).contains(&after),
        "compute_a ends {after} ns after its last sample"
    );
}

/// python3 (not built here) computing, sleeping 1 s, computing: the sleep is one
/// `[off-cpu]` slice, and every slice that spans it is one of its callers.
#[test]
fn python_sleep_is_off_cpu_under_its_callers_only() {
    if !perf_usable_with("off-CPU tests", &["--switch-events"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let script = d.path().join("sleepy.py");
    std::fs::write(
        &script,
        "import time\n\
         def before():\n    return sum(i * i for i in range(3_000_000))\n\
         def after():\n    return sum(i * i for i in range(3_000_000))\n\
         before()\ntime.sleep(1)\nafter()\n",
    )
    .unwrap();
    let rec = d.path().join("rec");
    let out = d.path().join("trace.fxt");
    let os = std::ffi::OsStr::new;
    ptscope_ok(&[
        os("run"),
        os("--quiet"),
        os("--timer-resolution"),
        os("low"),
        os("-w"),
        rec.as_os_str(),
        os("-o"),
        out.as_os_str(),
        os("--"),
        os("python3"),
        script.as_os_str(),
    ]);
    let t = slices(&out);
    let main = t
        .iter()
        .find(|(name, _)| name.starts_with("python3"))
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no python3 thread: {:?}", t.keys()));
    let sleep = main
        .iter()
        .find(|s| s.name == "[off-cpu]" && s.end - s.begin >= 900_000_000)
        .unwrap_or_else(|| panic!("no [off-cpu] slice covers the 1 s sleep"));
    for s in main {
        let spans = s.begin < sleep.begin + PERIOD && s.end > sleep.end - PERIOD;
        if spans && s != sleep {
            assert!(
                s.depth < sleep.depth && s.begin <= sleep.begin && s.end >= sleep.end,
                "{s:?} spans the sleep {sleep:?} without being its caller"
            );
        }
    }
}
