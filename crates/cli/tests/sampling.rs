//! Sampling (no Intel PT) end to end on this machine with real perf and real programs:
//! the trace scope applies to sampled call stacks. Needs root and a working perf; skips
//! loudly otherwise (fails in CI).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};

fn ptscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptscope"))
}

#[path = "common/perf_env.rs"]
mod perf_env;

/// True if perf can record here with call stacks; otherwise a loud skip (a failure in CI).
fn perf_usable() -> bool {
    perf_env::perf_usable_with("sampling tests", &["-g"])
}

/// dd copying in 16-byte blocks: almost all of its time is read/write system calls.
const DD: [&str; 5] = [
    "dd",
    "if=/dev/zero",
    "of=/dev/null",
    "bs=16",
    "count=300000",
];

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The frame names a transcript of `input` begins, decoded with `args`.
fn frames(input: &Path, args: &[&str]) -> Vec<String> {
    let out = ok(
        Command::new(ptscope())
            .arg("decode")
            .arg(input)
            .args(args)
            .args(["--format", "transcript", "-o", "-"])
            .output()
            .expect("run ptscope decode"),
        "ptscope decode",
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(" BEGIN ").map(|(_, n)| n.trim().to_owned()))
        .collect()
}

/// Names only the kernel has (the system-call path dd spends its time in).
fn kernel(names: &[String]) -> usize {
    names
        .iter()
        .filter(|n| {
            [
                "do_syscall_64",
                "entry_SYSCALL_64",
                "ksys_read",
                "ksys_write",
                "vfs_read",
                "vfs_write",
            ]
            .iter()
            .any(|k| n.starts_with(k))
        })
        .count()
}

/// Names only user space has (glibc's system-call wrappers and start-up).
fn user(names: &[String]) -> usize {
    names.iter().filter(|n| n.contains("libc")).count()
}

#[test]
fn decode_scope_keeps_only_its_frames_of_a_perf_record_g() {
    if !perf_usable() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("perf.data");
    // No modifier: perf counts user space and the kernel, and callchains hold both.
    ok(
        Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-g", "-o"])
            .arg(&data)
            .arg("--")
            .args(DD)
            .output()
            .expect("perf record"),
        "perf record",
    );
    // Unasked, a recording without a `k` modifier is a trace of user space (the time
    // in the kernel is a `[kernel: …]` frame in an FXT trace); `--scope uk` shows both.
    let unasked = frames(&data, &[]);
    assert!(
        kernel(&unasked) == 0 && user(&unasked) > 0,
        "user space only expected: {unasked:?}"
    );
    let all = frames(&data, &["--scope", "uk"]);
    assert!(
        kernel(&all) > 0 && user(&all) > 0,
        "both levels expected: {all:?}"
    );
    for decoder in ["dlfilter", "text"] {
        let u = frames(&data, &["--scope", "u", "--decoder", decoder]);
        assert_eq!(kernel(&u), 0, "--scope u ({decoder}) shows kernel frames");
        assert!(user(&u) > 0, "--scope u ({decoder}) lost the user frames");
        let k = frames(&data, &["--scope", "k", "--decoder", decoder]);
        assert_eq!(user(&k), 0, "--scope k ({decoder}) shows user frames");
        assert!(
            kernel(&k) > 0,
            "--scope k ({decoder}) lost the kernel frames"
        );
    }
}

#[test]
fn run_scopes_reach_the_sampled_stacks() {
    if !perf_usable() {
        return;
    }
    for (flag, want_kernel, want_user) in [
        (None, false, true),
        (Some("--trace-include-kernel"), true, true),
        (Some("--kernel-only"), true, false),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = dir.path().join("rec");
        let mut cmd = Command::new(ptscope());
        cmd.args(["run", "-q", "-w"]).arg(&work);
        cmd.args(flag);
        cmd.args(["-o"]).arg(dir.path().join("t.fxt.gz"));
        cmd.arg("--").args(DD);
        ok(cmd.output().expect("run ptscope"), "ptscope run");
        // `decode DIR` keeps the recording's scope, through both decoders: perf script
        // unwinds the user part of a kernel sample's dwarf stack, and the dlfilter
        // leaves such samples (its raw callchain has only the kernel part) to that text.
        for decoder in ["text", "dlfilter"] {
            let names = frames(&work, &["--decoder", decoder]);
            assert_eq!(
                kernel(&names) > 0,
                want_kernel,
                "{flag:?} ({decoder}): kernel frames: {:?}",
                &names[..names.len().min(30)]
            );
            assert_eq!(
                user(&names) > 0,
                want_user,
                "{flag:?} ({decoder}): user frames: {:?}",
                &names[..names.len().min(30)]
            );
        }
    }
}

/// sqlite3's shell, whose SQL engine is in a shared library (libsqlite3.so).
const SQLITE: [&str; 3] = [
    "sqlite3",
    ":memory:",
    "with recursive c(x) as (select 1 union all select x+1 from c where x<300000) select sum(x) from c;",
];

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn require(program: &str) -> bool {
    if have(program) {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{program} missing in CI");
    eprintln!("!!!!!!!! SKIPPED: {program} not installed");
    false
}

fn run_ptscope(args: &[&str], program: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("tempdir");
    Command::new(ptscope())
        .arg("run")
        .args(args)
        .arg("-o")
        .arg(dir.path().join("t.fxt.gz"))
        .arg("--")
        .args(program)
        .output()
        .expect("run ptscope")
}

#[test]
fn run_trigger_finds_a_function_in_a_shared_library() {
    if !perf_usable() || !require("sqlite3") {
        return;
    }
    let out = ok(
        run_ptscope(&["--trigger", "sqlite3_step"], &SQLITE),
        "run --trigger",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("trigger hit (sqlite3_step"), "{err}");
    assert!(err.contains("shared library"), "{err}");
}

#[test]
fn a_trigger_never_hit_is_said() {
    if !perf_usable() || !require("sqlite3") {
        return;
    }
    // In libsqlite3, never called by this query.
    let out = ok(
        run_ptscope(&["--trigger", "sqlite3_backup_init"], &SQLITE),
        "run --trigger",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`sqlite3_backup_init` was never hit"), "{err}");
}

#[test]
fn a_filter_that_never_matches_names_similar_functions() {
    if !perf_usable() || !have("/usr/bin/python3") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("perf.data");
    ok(
        Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-g", "-o"])
            .arg(&data)
            .args([
                "--",
                "/usr/bin/python3",
                "-c",
                "print(sum(i * i for i in range(1500000)))",
            ])
            .output()
            .expect("perf record"),
        "perf record",
    );
    let decode = |filter: &str| {
        let out = ok(
            Command::new(ptscope())
                .arg("decode")
                .arg(&data)
                .args(["--filter", filter, "-o"])
                .arg(dir.path().join("t.fxt.gz"))
                .output()
                .expect("ptscope decode"),
            "ptscope decode --filter",
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A misspelt START: nothing is kept, and the real name is suggested.
    let err = decode("PyEval_EvalFrameDefault,main");
    assert!(
        err.contains("no call to `PyEval_EvalFrameDefault` was seen")
            && err.contains("`_PyEval_EvalFrameDefault`"),
        "{err}"
    );
    // A STOP never called after START.
    let err = decode("_PyEval_EvalFrameDefault,no_such_function_here");
    assert!(
        err.contains("`no_such_function_here` was never called"),
        "{err}"
    );
    // A range that opens and closes says nothing.
    let err = decode("_PyEval_EvalFrameDefault,_PyEval_EvalFrameDefault");
    assert!(!err.contains("--filter"), "{err}");
}

#[test]
fn high_timer_resolution_states_its_cost() {
    if !perf_usable() {
        return;
    }
    let out = ok(
        run_ptscope(&["--timer-resolution", "high"], &["true"]),
        "run --timer-resolution high",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("times slower"), "{err}");
}

/// Times (s) of `perf script` lines in `file`: samples, and the EXIT records.
fn perf_times(file: &Path) -> (Vec<f64>, Vec<f64>) {
    let out = ok(
        Command::new("perf")
            .args(["script", "--show-task-events", "-F", "tid,time", "-i"])
            .arg(file)
            .output()
            .expect("perf script"),
        "perf script",
    );
    let (mut samples, mut exits) = (Vec::new(), Vec::new());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(t) = line
            .split_whitespace()
            .find_map(|w| w.strip_suffix(':').and_then(|t| t.parse::<f64>().ok()))
        else {
            continue;
        };
        if line.contains("PERF_RECORD_EXIT") {
            exits.push(t);
        } else if !line.contains("PERF_RECORD") {
            samples.push(t);
        }
    }
    (samples, exits)
}

/// The perf.data files a flight recorder kept in `work` (`perf.data.<time>`), oldest first.
fn kept_files(work: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(work)
        .expect("working dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("perf.data."))
        })
        .collect();
    files.sort();
    files
}

/// Waits for `run` (a `ptscope run` with piped stderr), polling how much its perf.data
/// files in `work` take on disk at once: `(status, peak bytes, stderr)`.
fn wait_watching_disk(run: &mut std::process::Child, work: &Path) -> (ExitStatus, u64, String) {
    let disk = || -> u64 {
        std::fs::read_dir(work)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("perf.data"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    };
    let mut peak = 0;
    let status = loop {
        peak = peak.max(disk());
        if let Some(s) = run.try_wait().expect("wait") {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().expect("stderr"), &mut err).ok();
    (status, peak, err)
}

/// The first and last sample times over all kept `files`, read together, and the last
/// EXIT record's time, if any: perf's one-second rotation timer can fire between the
/// program's exit and perf's own end, and then the final file is a sliver whose records
/// all went into the file before it.
fn kept_times(files: &[PathBuf]) -> (f64, f64, Option<f64>) {
    let (mut samples, mut exits) = (Vec::new(), Vec::new());
    for f in files {
        let (s, e) = perf_times(f);
        samples.extend(s);
        exits.extend(e);
    }
    let first = samples.iter().copied().reduce(f64::min).expect("samples");
    let last = samples.iter().copied().reduce(f64::max).expect("samples");
    (first, last, exits.into_iter().reduce(f64::max))
}

/// `exit`, the time `program` exited, if a kept file held its EXIT record. perf's ring
/// buffer can overflow on a loaded machine (CI): the kernel drops records, the EXIT among
/// them (seen with perf's default 512 KiB ring; ptscope sizes it for a quarter second).
/// Then `None`, once decode of `work` into `out` has told the user that records were lost
/// (and panics if it did not).
fn exit_or_loss_said(exit: Option<f64>, work: &Path, out: &Path, program: &str) -> Option<f64> {
    if exit.is_none() {
        let said = decode_saying(work, out);
        assert!(
            said.contains("perf dropped") && said.contains("samples"),
            "{program}'s exit is in no kept file, and decode did not say that perf lost \
             records: {said}"
        );
        eprintln!("perf lost records under load, {program}'s exit with them; decode said so");
    }
    exit
}

/// `ptscope decode WORK -o OUT`, which must succeed and say it wrote the trace.
fn decode_whole(work: &Path, out: &Path) {
    decode_saying(work, out);
}

/// [`decode_whole`], returning what decode said.
fn decode_saying(work: &Path, out: &Path) -> String {
    let done = ok(
        Command::new(ptscope())
            .arg("decode")
            .arg(work)
            .arg("-o")
            .arg(out)
            .output()
            .expect("decode"),
        "ptscope decode",
    );
    let said = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(said.contains("wrote"), "{said}");
    said
}

#[test]
fn sampling_keeps_the_last_moments_within_the_bound() {
    if !perf_usable() || !have("gzip") {
        return;
    }
    const BOUND: u64 = 16 << 20;
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("rec");
    // gzip compressing random bytes from a pipe: one busy process for ~10 s here.
    let mut head = Command::new("head")
        .args(["-c", "200M", "/dev/urandom"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("head");
    let started = std::time::Instant::now();
    let mut run = Command::new(ptscope())
        .args(["run", "--snapshot-size", "16M", "--no-decode", "-w"])
        .arg(&work)
        .args(["--", "gzip", "-c"])
        .stdin(Stdio::from(head.stdout.take().expect("pipe")))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ptscope run");
    let (status, peak, err) = wait_watching_disk(&mut run, &work);
    let _ = head.wait();
    let wall = started.elapsed().as_secs_f64();
    assert!(status.success(), "ptscope run failed: {err}");
    assert!(err.contains("at most 16 MiB of disk"), "{err}");
    assert!(
        peak <= BOUND,
        "perf.data files took {peak} bytes at once, over the 16 MiB bound"
    );
    let files = kept_files(&work);
    assert!(files.len() >= 2, "no rotation: {files:?}");
    let (first, last_sample, exit) = kept_times(&files);
    let Some(exit) = exit_or_loss_said(exit, &work, &dir.path().join("t.fxt.gz"), "gzip") else {
        return;
    };
    // The end is there: samples up to gzip's exit ...
    assert!(
        exit - last_sample < 0.5,
        "last sample {last_sample}, exit {exit}"
    );
    // ... and the beginning was let go (the run was much longer than what is kept).
    assert!(
        exit - first < wall - 2.0,
        "kept {:.1} s of a {wall:.1} s run: nothing was dropped",
        exit - first
    );
    // And the kept files decode to one trace.
    decode_whole(&work, &dir.path().join("t.fxt.gz"));
    // The files are pieces of one recording: frames run on across their boundaries
    // (read as separate snapshots, every open frame would end and begin again there).
    let begins = |work: &Path| frames(work, &[]).len();
    let joined = begins(&work);
    std::fs::remove_file(work.join("rotated-perf-data")).expect("the rotation marker");
    let cut = begins(&work);
    assert!(
        joined < cut,
        "{joined} frames begun over the pieces, {cut} as snapshots"
    );
}

#[test]
fn sampling_keeps_the_last_seconds_when_given_a_duration() {
    if !perf_usable() || !have("python3") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("rec");
    // python3 busy for 6 s of wall time (it spins on the clock, so it ends on time
    // however slowly it is sampled).
    let out = ok(
        Command::new(ptscope())
            .args(["run", "--snapshot-size", "2s", "--no-decode", "-w"])
            .arg(&work)
            .args([
                "--",
                "python3",
                "-c",
                "import time\nt = time.time()\nwhile time.time() - t < 6: pass",
            ])
            .output()
            .expect("ptscope run"),
        "ptscope run",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least the last 2 s"), "{err}");
    let files = kept_files(&work);
    // Two files of one second each, and the one being written when python3 exited (perf
    // counts its final file among the files it keeps).
    assert_eq!(files.len(), 3, "files kept: {files:?}");
    let (first, last_sample, exit) = kept_times(&files);
    let Some(exit) = exit_or_loss_said(exit, &work, &dir.path().join("t.fxt.gz"), "python3") else {
        return;
    };
    let kept = exit - first;
    assert!(
        exit - last_sample < 0.5,
        "last sample {last_sample}, exit {exit}"
    );
    // At least the 2 s asked for, at most one file's second more (and some slack for a
    // loaded machine's timers), and not the 6 s run.
    assert!(
        (1.9..=3.5).contains(&kept),
        "kept {kept:.2} s of samples before the exit for --snapshot-size 2s"
    );
    decode_whole(&work, &dir.path().join("t.fxt.gz"));
}

/// The files of a working directory, sorted, cut into the snapshots the rotation marker
/// says end there (the last group ends with the recording).
fn snapshot_groups(work: &Path) -> Vec<Vec<PathBuf>> {
    let ends = std::fs::read_to_string(work.join("rotated-perf-data")).expect("marker");
    let ends: Vec<&str> = ends.lines().collect();
    let files = kept_files(work);
    let mut groups = vec![Vec::new()];
    for f in files {
        let end = ends.contains(&f.file_name().unwrap().to_string_lossy().as_ref());
        groups.last_mut().unwrap().push(f);
        if end {
            groups.push(Vec::new());
        }
    }
    groups.retain(|g| !g.is_empty());
    groups
}

#[test]
fn multi_snapshot_sampling_keeps_each_snapshot_within_the_bound() {
    if !perf_usable() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("marks.c");
    std::fs::write(
        &src,
        "#include <time.h>\n\
         static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec / 1e9; }\n\
         volatile unsigned long sink;\n\
         __attribute__((noinline)) void spin(double s) { double e = now() + s; while (now() < e) sink++; }\n\
         __attribute__((noinline)) void mark(int i) { sink += i; }\n\
         int main(void) { for (int i = 0; i < 3; i++) { spin(1.2); mark(i); } spin(0.4); return 0; }\n",
    )
    .expect("write source");
    let exe = dir.path().join("marks");
    ok(
        Command::new("gcc")
            .args(["-O1", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("gcc"),
        "gcc",
    );
    let work = dir.path().join("rec");
    const BOUND: u64 = 4 << 20;
    let mut run = Command::new(ptscope())
        .args(["run", "--multi-snapshot", "--trigger", "mark"])
        .args(["--snapshot-size", "4M", "--no-decode", "-w"])
        .arg(&work)
        .arg("--")
        .arg(&exe)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ptscope run");
    let (status, peak, err) = wait_watching_disk(&mut run, &work);
    assert!(status.success(), "ptscope run failed: {err}");
    assert!(err.contains("each snapshot keeps"), "{err}");
    assert_eq!(err.matches("trigger hit: snapshot").count(), 3, "{err}");
    // Three hits 1.2 s apart, each a snapshot of the moments before it, and the end.
    let groups = snapshot_groups(&work);
    assert_eq!(groups.len(), 4, "snapshots: {groups:?}");
    for g in &groups {
        let bytes: u64 = g.iter().map(|f| std::fs::metadata(f).unwrap().len()).sum();
        // perf empties its buffers into a file before a rotation takes effect: a piece
        // can overshoot by that much.
        assert!(
            bytes <= BOUND + (2 << 20),
            "a snapshot took {bytes} bytes for a 4 MiB bound: {g:?}"
        );
        // A piece may hold no sample (the file perf ends with at exit, or one a rotation
        // closed at once): the span is over every piece's samples.
        let times: Vec<f64> = g.iter().flat_map(|f| perf_times(f).0).collect();
        let (Some(first), Some(last)) = (
            times.iter().copied().reduce(f64::min),
            times.iter().copied().reduce(f64::max),
        ) else {
            panic!("a snapshot without samples: {g:?}");
        };
        // 1.2 s of spinning (CPU time: a loaded machine stretches the wall time, not the
        // samples) between hits, 10 000 samples a CPU second: a bounded snapshot holds
        // only its last part. Once checked as the wall-clock span, which a CI load made
        // 0.93 s for ~0.15 s of samples.
        let cpu = times.len() as f64 / 10_000.0;
        assert!(
            cpu < 0.9,
            "a snapshot holds {cpu:.2} s of samples ({:.2} s wall): {g:?}",
            last - first
        );
    }
    // The disk held at most the bound per snapshot (those taken and the one filling).
    assert!(
        peak <= 4 * (BOUND + (2 << 20)),
        "perf.data files took {peak} bytes at once"
    );
    decode_whole(&work, &dir.path().join("t.fxt.gz"));
    // Each snapshot ends at its hit and the next begins its frames anew: `main`, which
    // calls `mark` and runs throughout, begins once per snapshot. Read as one recording
    // (no hits, no snapshot ends) it would run on across them.
    let mains = |names: Vec<String>| names.iter().filter(|n| *n == "main").count();
    let separate = mains(frames(&work, &[]));
    std::fs::write(work.join("rotated-perf-data"), "").expect("marker");
    std::fs::remove_file(work.join("hits.tsv")).expect("hits");
    let joined = mains(frames(&work, &[]));
    assert!(
        separate >= 3 && joined < separate,
        "main begun {separate} times as snapshots, {joined} as one recording"
    );
}

/// A real recording in which perf's ring overflowed (gzip under `run`, with perf's default
/// 512 KiB ring on a loaded machine, `tests/fixtures/sampling/`): decode must say that
/// perf dropped records, with perf's own counts, since nothing in the trace shows it.
#[test]
fn decode_says_when_perf_dropped_records() {
    if !perf_usable() {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/sampling/lost_records.perf.data.gz");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("perf.data");
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(&fixture).expect("fixture"));
    std::io::copy(
        &mut gz,
        &mut std::fs::File::create(&data).expect("perf.data"),
    )
    .expect("unpack");
    let said = decode_saying(&data, &dir.path().join("t.fxt.gz"));
    // 14 PERF_RECORD_LOST records of 117 in all; LOST_SAMPLES of 4468 + 3382 (perf script -D).
    assert!(
        said.contains("perf dropped 7850 samples (117 records in 14 stretches)"),
        "{said}"
    );
}
