//! The default path (sampling, no Intel PT) on real programs, as a new user meets it:
//! node and a multi-file `make -j2` decode in seconds with the frames of inlined calls
//! read in-process (perf's own `addr2line` lookup made node's decode wait for hours and
//! `make -j2`'s take 100 times the build); a perf that makes no progress is stopped and
//! said so, and the decode goes on; Ctrl-C during a slow decode writes what was decoded;
//! time off CPU sits in the frame that waited.

#[path = "../../executable.rs"]
mod executable;

use executable::write_executable;
use ptscope_realworld::harness::{
    args, assert_decoders_agree, can_record, interrupt, load_checked, need_tool, programs, record,
    record_with, system_tool, Finished, Ptscope,
};
use ptscope_realworld::trace::{Trace, Track};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a run may take here before the test calls it hung (node's decode used to
/// wait on perf's `addr2line` for over ten minutes). Generous: the machine is shared.
const HUNG: Duration = Duration::from_secs(240);

/// Runs `p` to completion (success or failure, checked for panics and a clean TMPDIR),
/// or fails the test if it is still running after [`HUNG`] (ptscope is then sent the
/// three interrupts that make it quit).
fn run_within(mut p: Ptscope) -> Finished {
    let (mut child, start) = p.spawn();
    while child.try_wait().expect("poll ptscope").is_none() {
        if start.elapsed() > HUNG {
            for _ in 0..3 {
                interrupt(child.id());
                std::thread::sleep(Duration::from_millis(300));
            }
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait for ptscope");
            panic!(
                "{} was still running after {} s (hung):\n{}",
                p.what(),
                HUNG.as_secs(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    p.wait_either(child, start)
}

/// A process whose command line contains `marker`, if one is running (what a killed
/// perf must not leave behind).
fn running_with(marker: &str) -> Option<String> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        cmd.contains(marker).then_some(cmd)
    })
}

/// The threads of processes named `command`.
fn tracks_of<'a>(t: &'a Trace, command: &str) -> Vec<&'a Track> {
    t.tracks
        .values()
        .filter(|k| k.process_name.split(" [").next() == Some(command))
        .collect()
}

/// node runs a loop: the run completes (perf 6.1's inline lookup of node's binary never
/// did) and the trace shows V8 at work on node's main thread: the interpreter and
/// builtins (`Builtins_*`), the compiler (`v8::internal::…`), node's own setup
/// (`node::…`), or, where the engine's symbols are stripped (Debian's libnode), its code
/// named per function (`libnode.so.108+0x…`).
#[test]
fn node_run_completes_with_javascript_engine_frames() {
    let test = "node_run_completes_with_javascript_engine_frames";
    if !can_record(test) {
        return;
    }
    let Some(node) = need_tool(test, "node", "nodejs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node.fxt.gz");
    let p = Ptscope::new(args(&[
        &"run",
        &"--quiet",
        &"-o",
        &out,
        &"--",
        &node,
        &"-e",
        &"let s=0;for(let i=0;i<3e6;i++)s+=Math.sqrt(i);console.log(s)",
    ]));
    let run = run_within(p);
    assert!(
        run.output.status.success(),
        "ptscope run -- node failed ({}):\n{}",
        run.output.status,
        run.stderr()
    );
    let t = load_checked(&out, &run);
    let engine = |n: &str| {
        n.starts_with("Builtins_")
            || n.starts_with("v8::")
            || n.starts_with("node::")
            || n.starts_with("libnode.so")
            || n.starts_with("node+0x")
    };
    let main = tracks_of(&t, "node");
    let frames: usize = main.iter().map(|k| k.find(engine).count()).sum();
    assert!(
        frames >= 10,
        "only {frames} slices of the JavaScript engine in node's threads\n{}",
        t.summary()
    );
    // V8's frames under node's start-up code, as node runs the script.
    let start =
        |n: &str| n == "main" || n.starts_with("node::Start") || n == "__libc_start_call_main";
    t.assert_under_on(
        "V8 under node's main",
        |k| k.process_name.starts_with("node"),
        engine,
        &[&start],
    );
    // node wrote no JIT map (it does only when asked): the user is told how to get the
    // JavaScript functions' names, not that a file could not be opened.
    let err = run.stderr();
    assert!(
        err.contains("node --perf-basic-prof") && !err.contains("cannot be opened"),
        "{err}"
    );
}

/// node asked for its JIT map (`--perf-basic-prof`, as the notice above advises): the
/// JavaScript function that ran names its slices on node's main thread.
#[test]
fn node_with_its_jit_map_names_javascript_functions() {
    let test = "node_with_its_jit_map_names_javascript_functions";
    if !can_record(test) {
        return;
    }
    let Some(node) = need_tool(test, "node", "nodejs") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("node.fxt.gz");
    let mut p = Ptscope::new(args(&[
        &"run",
        &"--quiet",
        &"-o",
        &out,
        &"--",
        &node,
        &"--perf-basic-prof",
        &"-e",
        &"function hotLoop(n){let s=0;for(let i=0;i<n;i++)s+=Math.sqrt(i);return s}\
          console.log(hotLoop(1e7))",
    ]));
    // With --perf-basic-prof node also writes `isolate-*-v8.log` into its working
    // directory: that is the test's own temporary directory.
    p.cmd().current_dir(dir.path());
    let run = run_within(p);
    let t = run
        .output
        .status
        .success()
        .then(|| load_checked(&out, &run));
    // node leaves its map in /tmp (a fixed place, not TMPDIR): remove what this run wrote.
    for k in t.iter().flat_map(|t| t.tracks.values()) {
        let pid = k.process_name.split("[pid=").nth(1);
        if let Some(pid) = pid.and_then(|p| p.strip_suffix(']')) {
            let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        }
    }
    let Some(t) = t else {
        panic!(
            "ptscope run -- node --perf-basic-prof failed ({}):\n{}",
            run.output.status,
            run.stderr()
        );
    };
    let err = run.stderr();
    assert!(!err.contains("ignoring JIT symbols"), "{err}");
    // DWARF unwinding stops in JIT code (it has no CFI), so the frame is the root of a
    // cut stack rather than under `main`: on the main thread is what can be asked.
    let js = |n: &str| n.starts_with("JS:") && n.contains("hotLoop");
    let on_main: usize = tracks_of(&t, "node")
        .iter()
        .filter(|k| k.thread_is("node"))
        .map(|k| k.find(js).count())
        .sum();
    assert!(
        on_main >= 1,
        "no JS:*hotLoop slice on node's main thread\n{}",
        t.summary()
    );
}

/// Copies the multi-file project (`programs/makeproj`) into `dir`.
fn make_project(dir: &Path) -> PathBuf {
    let src = programs().join("makeproj");
    let dst = dir.join("makeproj");
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// `make -j2` of a 7-file C project (gcc -O2 -g) under `ptscope run`: every compiler
/// process is in the trace, and both decoders give it. Then the program it built, run
/// under ptscope by itself: its functions show the calls the compiler inlined into them
/// (`hash_mix` in `hash_run`, from DWARF) as frames of their own, with each `*_run` one
/// slice for its one call (perf's own inline frames made a new `hash_run` at every
/// sample). The program is not run by `make`'s shell: perf 6.1 unwinds the DWARF stacks
/// of a process that exec'd after it was forked wrongly in about half the runs (most of
/// their samples then stop at the pc), which would cut `hash_run` at random.
#[test]
fn make_j2_multi_file_project_with_inlined_frames() {
    let test = "make_j2_multi_file_project_with_inlined_frames";
    if !can_record(test) {
        return;
    }
    let (Some(_gcc), Some(make)) = (
        need_tool(test, "gcc", "gcc"),
        need_tool(test, "make", "make"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let proj = make_project(dir.path());
    let work = dir.path().join("rec");
    let (run, t) = record_with(
        dir.path(),
        "make",
        &["-w", work.to_str().unwrap()],
        &[&make, &"-s", &"-j2"],
        |c| {
            c.current_dir(&proj);
        },
    );
    let program = proj.join("proj");
    assert!(program.is_file(), "make did not build the project");
    let compilers = t
        .tracks
        .values()
        .filter(|k| k.process_name.starts_with("cc1") && !k.slices.is_empty())
        .count();
    assert!(
        compilers >= 2,
        "{compilers} compiler (cc1) processes with slices in the trace; 7 files were compiled\n{}",
        t.summary()
    );
    t.assert_process_named("make");
    assert_decoders_agree(&work, dir.path(), &run, "make -j2");

    let (_, t) = record(dir.path(), "proj", &[], &[&program, &"40000"]);
    let modules = ["hash", "sort", "fmt", "parse", "vec", "tree"];
    let prog = tracks_of(&t, "proj");
    assert!(
        !prog.is_empty(),
        "no proj process in the trace\n{}",
        t.summary()
    );
    let mut runs = 0;
    for m in modules {
        let run_name = format!("{m}_run");
        let n: usize = prog.iter().map(|k| k.find(|s| s == run_name).count()).sum();
        assert!(n >= 1, "no slice of {run_name} in proj\n{}", t.summary());
        runs += n;
    }
    // One call each; a sample whose unwinding stopped short may cut one (rare).
    assert!(
        runs <= modules.len() + 3,
        "{runs} slices of the six *_run functions, each called once: a function \
         holding inlined code is cut into pieces\n{}",
        t.summary()
    );
    let mixes = modules
        .iter()
        .filter(|m| {
            let (mix, run_name) = (format!("{m}_mix"), format!("{m}_run"));
            prog.iter().any(|k| {
                k.find(|s| s == mix).any(|i| {
                    let anc = k.ancestors(i);
                    anc.first() == Some(&run_name.as_str()) && anc.contains(&"main")
                })
            })
        })
        .count();
    assert!(
        mixes >= 3,
        "only {mixes} of the six inlined *_mix functions show as frames under their \
         *_run\n{}",
        t.summary()
    );
}

/// A directory holding one executable `name` with `script` as its text, to put in
/// front of PATH: perf runs its helpers (`addr2line`) from PATH.
fn stand_in(dir: &Path, name: &str, script: &str) -> OsString {
    let bin = dir.join("stand-in");
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(&bin.join(name), script);
    let mut path = bin.into_os_string();
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    path
}

/// When `test` can record here (else `None`, the test skipped): a temporary directory
/// DIR, and `gzip -c` of a few MB recorded in it with `run -w DIR/rec`, the recording the
/// stall, interrupt and cut tests decode.
fn gzip_recording(test: &str) -> Option<(tempfile::TempDir, PathBuf, Finished)> {
    if !can_record(test) {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let gzip = need_tool(test, "gzip", "gzip")?;
    let input = dir.join("input.txt");
    ptscope_realworld::programs::text_file(&input, 3);
    let work = dir.join("rec");
    let (run, _) = record(
        dir,
        "gzip",
        &["-w", work.to_str().unwrap()],
        &[&gzip, &"-c", &input],
    );
    Some((tmp, work, run))
}

/// perf's copies of the vDSO in `/tmp` (`perf-vdso.so-XXXXXX`: perf fixes the path, so
/// TMPDIR does not move them), which perf removes when it ends by itself.
fn perf_vdso_copies() -> BTreeSet<PathBuf> {
    std::fs::read_dir("/tmp")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("perf-vdso.so-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Checks that no copy of the vDSO made since `before` stays behind: a perf the watchdog
/// stopped left one per run when it was killed outright. Copies other perfs (tests
/// running beside this one) still hold are waited for, as they go when those end.
fn assert_no_vdso_copy_left(before: &BTreeSet<PathBuf>) {
    let mut left = Vec::new();
    for _ in 0..120 {
        left = perf_vdso_copies()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("perf's copies of the vDSO were left behind after 60 s: {left:?}");
}

/// Checks that the message `err` says each of `said`.
fn assert_says(err: &str, said: &[&str]) {
    for said in said {
        assert!(
            err.contains(said),
            "the message does not say {said:?}:\n{err}"
        );
    }
}

/// perf's own inline lookup (asked for with `--perf-inline`) waits on an `addr2line`
/// that never answers (a stand-in on PATH; perf 6.1 waited so on node's binary): the
/// watchdog stops perf after `PTSCOPE_PERF_STALL` seconds without progress, says what
/// it waited for, and the rest is decoded without the lookup. Nothing is left running.
#[test]
fn a_stuck_inline_lookup_is_stopped_and_the_rest_decoded_without_it() {
    let Some((dir, work, run)) =
        gzip_recording("a_stuck_inline_lookup_is_stopped_and_the_rest_decoded_without_it")
    else {
        return;
    };
    let marker = format!("sleep 86{}", std::process::id() % 1000);
    let path = stand_in(
        dir.path(),
        "addr2line",
        &format!("#!/bin/sh\n# perf's addr2line, stuck: it never answers.\n{marker}\n"),
    );
    let out = dir.path().join("stall.fxt.gz");
    let mut p = Ptscope::new(args(&[&"decode", &work, &"--perf-inline", &"-o", &out]));
    p.cmd().env("PATH", &path).env("PTSCOPE_PERF_STALL", "2");
    let copies = perf_vdso_copies();
    let done = run_within(p);
    let err = done.stderr();
    assert!(
        done.output.status.success(),
        "decode failed ({}):\n{err}",
        done.output.status
    );
    assert_says(
        &err,
        &[
            "made no progress",
            "addr2line",
            "lookup of inlined functions",
            "--no-inline",
        ],
    );
    let t = load_checked(&out, &run);
    t.assert_process_named("gzip");
    assert!(
        running_with(&marker).is_none(),
        "perf's stuck addr2line outlived the decode: {:?}",
        running_with(&marker)
    );
    assert_no_vdso_copy_left(&copies);
}

/// A perf that stops making progress mid-stream for another reason (here: stopped by a
/// signal, through a stand-in `perf` that passes real perf's output on, then stops its
/// process group): the watchdog ends it, the error says what happened and what to do,
/// and the trace holds what was decoded before (exit status 1: incomplete). perf ends
/// cleanly, so its copy of the vDSO goes with it.
#[test]
fn a_perf_that_stops_mid_stream_is_reported_and_what_was_decoded_kept() {
    let Some((dir, work, run)) =
        gzip_recording("a_perf_that_stops_mid_stream_is_reported_and_what_was_decoded_kept")
    else {
        return;
    };
    let Some(perf) = system_tool("perf") else {
        return;
    };
    let wrapper = dir.path().join("perf-that-stops");
    write_executable(
        &wrapper,
        format!(
            "#!/bin/sh\n# Real perf; `perf script` output stops after 300 KB, its process group stopped.\n\
             case \" $* \" in\n  *' -h '*) exec {perf} \"$@\" ;;\n  \
             *' script '*) {perf} \"$@\" | {{ head -c 300000; kill -STOP 0; cat; }} ;;\n  \
             *) exec {perf} \"$@\" ;;\nesac\n",
            perf = perf.display()
        ),
    );
    let out = dir.path().join("stopped.fxt.gz");
    let mut p = Ptscope::new(args(&[
        &"decode",
        &work,
        &"--decoder",
        &"text",
        &"--perf",
        &wrapper,
        &"-o",
        &out,
    ]));
    p.cmd().env("PTSCOPE_PERF_STALL", "2");
    let copies = perf_vdso_copies();
    let done = run_within(p);
    let err = done.stderr();
    assert_eq!(
        done.output.status.code(),
        Some(1),
        "exit status; stderr:\n{err}"
    );
    assert_says(
        &err,
        &["made no progress", "PTSCOPE_PERF_STALL", "decoded before"],
    );
    let t = load_checked(&out, &run);
    t.assert_process_named("gzip");
    assert_no_vdso_copy_left(&copies);
}

/// An `addr2line` that quits mid-conversation (as one that crashes on odd debug info
/// does) leaves perf a pipe with no reader: perf's next query used to kill it with
/// SIGPIPE, before it wrote out its block-buffered output, so the decode ended with
/// next to nothing. perf now gets an error from the write instead, drops that helper
/// and goes on: the trace is the one an `addr2line` giving the same answers without
/// quitting gives.
#[test]
fn an_addr2line_that_quits_does_not_cut_the_decode_short() {
    let Some((dir, work, run)) =
        gzip_recording("an_addr2line_that_quits_does_not_cut_the_decode_short")
    else {
        return;
    };
    let decode = |name: &str, script: &str| {
        let bin = dir.path().join(format!("{name}-bin"));
        std::fs::create_dir(&bin).unwrap();
        let path = stand_in(&bin, "addr2line", script);
        let out = dir.path().join(format!("{name}.fxt.gz"));
        let mut p = Ptscope::new(args(&[&"decode", &work, &"--perf-inline", &"-o", &out]));
        p.cmd().env("PATH", &path);
        let done = run_within(p);
        let err = done.stderr();
        assert!(
            done.output.status.success() && !err.contains("warning"),
            "decode with the {name} addr2line ({}):\n{err}",
            done.output.status
        );
        load_checked(&out, &run)
    };
    // Both answer every line perf writes (the address, then its end marker) with
    // "unknown"; the quitter closes its input after one query, before answering it, so
    // perf's next write always finds no reader.
    let steady = decode(
        "steady",
        "#!/bin/sh\nwhile read -r line; do printf '??\\n??:0\\n'; done\n",
    );
    let quitter = decode(
        "quitter",
        "#!/bin/sh\nread -r a; read -r b; exec 0<&-; printf '??\\n??:0\\n??\\n??:0\\n'\n",
    );
    quitter.assert_process_named("gzip");
    assert!(steady.slice_count() > 100, "{}", steady.summary());
    assert_eq!(
        quitter.slice_count(),
        steady.slice_count(),
        "with the quitting addr2line:\n{}\nwith the steady one:\n{}",
        quitter.summary(),
        steady.summary()
    );
}

/// Ctrl-C during a slow decode (perf's inline lookup through an `addr2line` that takes
/// 50 ms an answer): perf is asked to stop and hand over what it decoded, the trace
/// holds it, the message says the decode was interrupted (and gives no advice about
/// `--single-thread`, which this recording did not use), exit status 130.
#[test]
fn ctrl_c_during_a_slow_decode_writes_what_was_decoded() {
    let Some((dir, work, run)) =
        gzip_recording("ctrl_c_during_a_slow_decode_writes_what_was_decoded")
    else {
        return;
    };
    // perf's addr2line, slow (each answer, none known, after 50 ms), leaving a mark
    // once perf has asked it something: the interrupt then always lands mid-decode,
    // however fast or loaded the machine (a fixed 3 s wait raced the decode's end).
    let asked = dir.path().join("asked");
    let path = stand_in(
        dir.path(),
        "addr2line",
        &format!(
            "#!/bin/sh\nwhile read -r line; do : > '{}'; sleep 0.05; printf '??\\n??:0\\n'; done\n",
            asked.display()
        ),
    );
    let out = dir.path().join("interrupted.fxt.gz");
    let mut p = Ptscope::new(args(&[&"decode", &work, &"--perf-inline", &"-o", &out]));
    p.cmd().env("PATH", &path);
    let (child, start) = p.spawn();
    while !asked.exists() && start.elapsed() < HUNG {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    interrupt(child.id());
    let done = p.wait_either(child, start);
    let err = done.stderr();
    assert_eq!(
        done.output.status.code(),
        Some(130),
        "exit status; stderr:\n{err}"
    );
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        !err.contains("single-thread"),
        "advice for another recording:\n{err}"
    );
    let t = load_checked(&out, &run);
    assert!(t.slice_count() > 0);
}

/// The duration of slice `i` of `k` in seconds (`None` if the trace never ended it).
fn seconds(t: &Trace, k: &Track, i: usize) -> Option<f64> {
    let s = &k.slices[i];
    Some((s.end? - s.start) as f64 / t.ticks_per_second() as f64)
}

/// `main` computes, calls `sleeper`, which sleeps 0.3 s in `nanosleep`, and computes
/// again. The stack the thread left the CPU in is recorded (`sched:sched_switch` with
/// call stacks), so `sleeper` lasts the whole sleep with `[off-cpu]` inside it (under
/// libc's nanosleep and the kernel's `[kernel: clock_nanosleep]`), and `main` is one
/// slice for the whole run: before, the sleep showed under `__libc_start_call_main`,
/// `sleeper` lasted a fraction of a millisecond and `main` was cut in two. Both decoders
/// give the same trace.
#[test]
fn sleeper_time_off_cpu_sits_inside_the_function_that_slept() {
    let test = "sleeper_time_off_cpu_sits_inside_the_function_that_slept";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = ptscope_realworld::programs::sleeper_c(test, dir.path()) else {
        return;
    };
    let work = dir.path().join("rec");
    let (run, t) = record(
        dir.path(),
        "sleeper",
        &["-w", work.to_str().unwrap()],
        &[&exe],
    );
    let k = t.track_named("sleeper");
    let sleepers: Vec<usize> = k.find(|n| n == "sleeper").collect();
    assert_eq!(
        sleepers.len(),
        1,
        "sleeper is called once: {:?}\n{}",
        sleepers
            .iter()
            .map(|&i| k.stack_text(i))
            .collect::<Vec<_>>(),
        t.summary()
    );
    let s = sleepers[0];
    let lasted = seconds(&t, k, s).unwrap_or(0.0);
    assert!(
        lasted >= 0.29,
        "sleeper lasts {lasted:.4} s, but it slept 0.3 s: {}",
        k.stack_text(s)
    );
    let off: Vec<usize> = k
        .find(|n| n == "[off-cpu]")
        .filter(|&i| seconds(&t, k, i).unwrap_or(0.0) >= 0.25)
        .collect();
    assert_eq!(off.len(), 1, "one long [off-cpu] slice:\n{}", t.summary());
    let anc = k.ancestors(off[0]);
    assert!(
        anc.contains(&"sleeper") && anc.contains(&"main"),
        "the sleep is not inside sleeper: {}",
        k.stack_text(off[0])
    );
    let mains: Vec<usize> = k.find(|n| n == "main").collect();
    assert_eq!(
        mains.len(),
        1,
        "main is one call: {:?}",
        mains
            .iter()
            .map(|&i| (k.slices[i].start, k.slices[i].end))
            .collect::<Vec<_>>()
    );
    let main_lasted = seconds(&t, k, mains[0]).unwrap_or(0.0);
    assert!(
        main_lasted >= 0.45,
        "main lasts {main_lasted:.3} s of a run of 0.1 s + 0.3 s + 0.1 s"
    );
    assert_decoders_agree(&work, dir.path(), &run, "sleeper");
}

/// `run --multi-snapshot --trigger mid` on a program that calls `mid` three times 20 ms
/// apart (closer than perf starts a new file): three hits, three snapshots, each ending
/// at its hit (the moments before it, from the previous hit on: no slice runs across a
/// hit), and nothing after the last hit. Before, hits that came together were one
/// snapshot, and one that came while a rotation was waited for was lost.
#[test]
fn multi_snapshot_sampling_takes_one_snapshot_per_hit() {
    let test = "multi_snapshot_sampling_takes_one_snapshot_per_hit";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = ptscope_realworld::programs::hits_c(test, dir.path()) else {
        return;
    };
    let out = dir.path().join("hits.fxt.gz");
    let run = Ptscope::new(args(&[
        &"run",
        &"--multi-snapshot",
        &"--trigger",
        &"mid",
        &"-o",
        &out,
        &"--",
        &exe,
        &"0.02",
    ]))
    .run();
    let err = run.stderr();
    assert_eq!(err.matches("trigger hit: snapshot").count(), 3, "{err}");
    let t = load_checked(&out, &run);
    let hits: Vec<u64> = t
        .tracks
        .values()
        .filter(|k| k.thread_name == "hits")
        .flat_map(|k| k.slices.iter().map(|s| s.start))
        .collect();
    assert_eq!(hits.len(), 3, "hits marked in the trace\n{}", t.summary());
    let prog = tracks_of(&t, "hits");
    let k = prog.first().expect("the program's thread");
    // One snapshot per hit: no slice runs across a hit (each ends by the first hit
    // after its start), and nothing begins after the last one.
    let window = |time: u64| hits.iter().position(|&h| time <= h);
    let mut windows = BTreeSet::new();
    for s in &k.slices {
        let w = window(s.start);
        assert!(w.is_some(), "{} begins after the last hit", s.name);
        let end = s.end.unwrap_or(u64::MAX);
        assert!(
            window(end) == w,
            "{} ({}..{end}) runs across a hit; hits at {hits:?}",
            s.name,
            s.start
        );
        windows.insert(w);
    }
    // The first hit comes after 0.2 s of work; under load perf may drop a later
    // window's few samples, not all of them.
    assert!(
        windows.len() >= 2,
        "slices in {windows:?} of the three snapshots; hits at {hits:?}\n{}",
        t.summary()
    );
    let mains = k.find(|n| n == "main").count();
    assert!((1..=3).contains(&mains), "main in {mains} snapshots");
}

/// `perf script` with perf's default fields (what someone pastes from their own
/// machine) names each thread's command but not its process: each thread is a group
/// named after its command (`gzip [pid=?]`, renamed at its exec from `sh`), not all in
/// one nameless `[pid=?]`.
#[test]
fn perf_default_output_names_each_group_after_its_command() {
    let test = "perf_default_output_names_each_group_after_its_command";
    if !can_record(test) {
        return;
    }
    let (Some(perf), Some(gzip)) = (system_tool("perf"), need_tool(test, "gzip", "gzip")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    ptscope_realworld::programs::text_file(&input, 2);
    let data = dir.path().join("perf.data");
    let script = format!("{} -c {} | wc -c", gzip.display(), input.display());
    let start = std::time::Instant::now();
    let recorded = std::process::Command::new(&perf)
        .args(["record", "-q", "-g", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    assert!(recorded.status.success(), "perf record");
    let recorded = Finished {
        what: "perf record".into(),
        output: recorded,
        elapsed: start.elapsed(),
    };
    let text = std::process::Command::new(&perf)
        .args(["script", "--no-inline", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(text.status.success(), "perf script");
    let txt = dir.path().join("default.txt");
    std::fs::write(&txt, &text.stdout).unwrap();
    let out = dir.path().join("default.fxt.gz");
    Ptscope::new(args(&[&"decode", &"--perf-script", &txt, &"-o", &out])).run();
    let t = load_checked(&out, &recorded);
    let groups: BTreeSet<&str> = t.tracks.values().map(|k| k.process_name.as_str()).collect();
    assert!(
        groups.contains("gzip [pid=?]"),
        "process groups: {groups:?}"
    );
    assert!(!groups.contains("[pid=?]"), "a nameless group: {groups:?}");
}

/// A perf.data cut short (a copy that stopped early): in its records, or after them
/// (the sections perf writes last). Either way a clear error naming the file and what is
/// missing, not "perf did not load the dlfilter ()" and a perf dying of a signal.
#[test]
fn a_perf_data_cut_short_is_a_clear_error() {
    let Some((dir, work, _)) = gzip_recording("a_perf_data_cut_short_is_a_clear_error") else {
        return;
    };
    let file = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("perf.data.")
        })
        .expect("a perf.data file");
    let bytes = std::fs::read(&file).unwrap();
    // perf's header: the data section's offset and size at bytes 40 and 48.
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (data_at, data_len) = (word(40), word(48));
    for (what, len, said) in [
        ("in its records", data_at + data_len / 2, "bytes of records"),
        (
            "after its records",
            data_at + data_len + 16,
            "sections perf writes after them",
        ),
    ] {
        let cut = dir.path().join("cut.data");
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let out = dir.path().join("cut.fxt.gz");
        let done = Ptscope::new(args(&[&"decode", &cut, &"-o", &out])).run_either();
        let err = done.stderr();
        assert_eq!(done.output.status.code(), Some(1), "cut {what}: {err}");
        assert!(
            err.contains("is cut short") && err.contains(said),
            "cut {what}: {err}"
        );
        assert!(!err.contains("dlfilter ()"), "cut {what}: {err}");
        assert!(!out.exists(), "cut {what}: a trace was written");
    }
}

/// The sampling flight recorder keeps the last pieces of the recording and deletes the
/// older ones, and perf announces a process (name, code) only in the piece being written
/// when it starts. `sh` runs gzip three times, each gzip spanning pieces of a 1 MiB
/// bound: every process in the trace is named, and the gzip running when recording ended
/// is unwound into its own code (`main` and libc's start under it), not kernel frames under
/// a nameless `[pid=N]`, as before ptscope kept the side band of the pieces it deleted.
#[test]
fn processes_begun_in_deleted_pieces_keep_their_names_and_code() {
    let test = "processes_begun_in_deleted_pieces_keep_their_names_and_code";
    if !can_record(test) {
        return;
    }
    let Some(gzip) = need_tool(test, "gzip", "gzip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    ptscope_realworld::programs::text_file(&input, 4);
    let script = format!(
        "for i in 1 2 3; do {} -c {} > /dev/null; done",
        gzip.display(),
        input.display()
    );
    let work = dir.path().join("rec");
    let (_, t) = record(
        dir.path(),
        "loop",
        // 1 kHz: fewer samples for perf to lose under load (with them it may lose the
        // very records this is about); still many pieces per gzip.
        &[
            "--snapshot-size",
            "1M",
            "--timer-resolution",
            "low",
            "-w",
            work.to_str().unwrap(),
        ],
        &[&"/bin/sh", &"-c", &script],
    );
    let pieces = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("perf.data."))
        .count();
    assert!(pieces <= 4, "the flight recorder kept {pieces} pieces");
    let tracks: Vec<_> = t.tracks.values().filter(|k| !k.slices.is_empty()).collect();
    let nameless: Vec<&str> = tracks
        .iter()
        .map(|k| k.process_name.as_str())
        .filter(|n| n.starts_with("[pid="))
        .collect();
    assert!(
        nameless.is_empty(),
        "nameless processes: {nameless:?}\n{}",
        t.summary()
    );
    let gzips: Vec<_> = tracks.iter().filter(|k| k.thread_is("gzip")).collect();
    assert!(!gzips.is_empty(), "gzip in the trace:\n{}", t.summary());
    for k in gzips {
        let user = k
            .slices
            .iter()
            .filter(|s| s.name == "__libc_start_call_main")
            .count();
        assert!(
            user > 0,
            "gzip ({}) unwound into its code:\n{}",
            k.process_name,
            t.summary()
        );
    }
}
