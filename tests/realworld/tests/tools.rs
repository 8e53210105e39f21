//! Debian's own command-line tools, as installed: gzip, sort, sqlite3, git, and a shell
//! pipeline that forks. Their binaries are stripped, so only exported symbols (theirs,
//! libc's, libsqlite3's, libz's) have names; their own functions are named after their `.eh_frame` FDE (`gzip+0x…`).

use ptscope_realworld::harness::{
    args, assert_decoders_agree, can_record, decode, need_tool, record, record_with, Ptscope,
};
use ptscope_realworld::programs;
use ptscope_realworld::trace::{same_function, Trace};
use std::path::Path;

/// A name for a function of the stripped executable `exe`: `gzip+0x…` after the start of
/// its `.eh_frame` FDE, or `[unknown @ 0x… (exe)]` where no FDE covers the address.
fn in_exe(exe: &Path) -> impl Fn(&str) -> bool {
    let tag = format!("({})]", exe.display());
    let base = exe
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let fde = format!("{base}+0x");
    move |n: &str| n.ends_with(&tag) || n.starts_with(&fde)
}

/// Panics unless, on a track satisfying `on_track`, a function of the stripped `exe` runs
/// under two more of its functions under `__libc_start_call_main`: the executable's
/// unwind tables walked through its nameless code.
fn assert_exe_nested(
    t: &Trace,
    exe: &Path,
    on_track: impl Fn(&ptscope_realworld::trace::Track) -> bool,
) {
    let code = in_exe(exe);
    let start = |n: &str| n == "__libc_start_call_main";
    t.assert_under_on(
        &format!("{} code 3 deep under __libc_start_call_main", exe.display()),
        on_track,
        &code,
        &[&code, &code, &start],
    );
}

/// Panics unless a libc function named `leaf*` runs under a function of `exe` under
/// `__libc_start_call_main` (on any thread of a process named after `exe`).
fn assert_libc_under_exe(t: &Trace, exe: &Path, leaf: &str) {
    let code = in_exe(exe);
    let start = |n: &str| n == "__libc_start_call_main";
    let prefix = format!("{leaf}*");
    t.assert_under_on(
        &format!(
            "{leaf}* under {} under __libc_start_call_main",
            exe.display()
        ),
        |_| true,
        |n| same_function(n, &prefix),
        &[&code, &start],
    );
}

#[test]
fn gzip_dwarf_text_vs_dlfilter() {
    let test = "gzip_dwarf_text_vs_dlfilter";
    if !can_record(test) {
        return;
    }
    let Some(gzip) = need_tool(test, "gzip", "gzip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    programs::text_file(&input, 4);
    let work = dir.path().join("rec");
    let (run, t) = record(
        dir.path(),
        "gzip",
        &["--callgraph", "dwarf", "-w", work.to_str().unwrap()],
        &[&gzip, &"-c", &input],
    );
    // gzip's own (nameless) code, unwound through its .eh_frame: deflate's loop under
    // the functions that call it, under main's caller in libc.
    assert_exe_nested(&t, &gzip, |_| true);

    assert_decoders_agree(&work, dir.path(), &run, "gzip");
    t.assert_process_named("gzip");
}

#[test]
fn sort_dwarf_both_writers() {
    let test = "sort_dwarf_both_writers";
    if !can_record(test) {
        return;
    }
    let Some(sort) = need_tool(test, "sort", "coreutils") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    programs::text_file(&input, 4);
    let sorted = dir.path().join("sorted.txt");
    let work = dir.path().join("rec");
    // One thread, C locale: the comparisons are libc's memcmp, called from sort's code.
    let (run, t) = record_with(
        dir.path(),
        "sort",
        &["--callgraph", "dwarf", "-w", work.to_str().unwrap()],
        &[&sort, &"--parallel=1", &"-o", &sorted, &input],
        |c| {
            c.env("LC_ALL", "C");
        },
    );
    assert_libc_under_exe(&t, &sort, "__memcmp");
    let legacy = decode(
        &work,
        &dir.path().join("legacy.fxt.gz"),
        &["--writer", "legacy"],
        &run,
    );
    assert_libc_under_exe(&legacy, &sort, "__memcmp");
    let segments = decode(
        &work,
        &dir.path().join("seg.fxt.gz"),
        &["--writer", "segments"],
        &run,
    );
    segments.assert_same_slices(&t, "sort: run's own decode vs decode --writer segments");
    t.assert_process_named("sort");
}

#[test]
fn sqlite3_queries_dwarf_text_vs_dlfilter() {
    let test = "sqlite3_queries_dwarf_text_vs_dlfilter";
    if !can_record(test) {
        return;
    }
    let Some(sqlite3) = need_tool(test, "sqlite3", "sqlite3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    programs::sqlite_db(&sqlite3, &db, 200_000);
    let work = dir.path().join("rec");
    let queries = "SELECT count(*), sum(length(b)) FROM t WHERE b LIKE '%AB%'; \
                   SELECT b FROM t ORDER BY b LIMIT 3; \
                   SELECT a % 97 AS k, count(*) FROM t GROUP BY k ORDER BY 2 DESC LIMIT 3;";
    let (run, t) = record(
        dir.path(),
        "sqlite3",
        &["--callgraph", "dwarf", "-w", work.to_str().unwrap()],
        &[&sqlite3, &db, &queries],
    );
    // perf ends DWARF walks that stop (often at sqlite3's main) with a -1 return
    // address: not a frame (it made a root `[unknown @ -0x1 ([unknown])]`), nor a cut.
    let invented: Vec<String> = t
        .find(|n| n.ends_with("([unknown])]"))
        .take(5)
        .map(|(tr, i)| tr.stack_text(i))
        .collect();
    assert!(
        invented.is_empty(),
        "invented frames in DWARF stacks: {invented:?}"
    );
    // A cut is not made up, only rare: a sample whose user stack perf could not unwind
    // past the pc (an empty stack copy, or a pc without unwind information) is marked
    // `[stack cut: unwinding stopped]` rather than shown as a root (2 such samples in 1
    // run of 6 here, with the other tests of this file running beside it). Cuts in more
    // than 1 % of the slices would mean the -1 ends were cut.
    let slices = t.slice_count();
    let cuts: Vec<String> = t
        .find(|n| n.starts_with("[stack cut"))
        .map(|(tr, i)| {
            // The cut is a root: what it sits above says where unwinding stopped.
            let under: Vec<&str> = tr
                .slices
                .iter()
                .filter(|c| c.parent == Some(i))
                .map(|c| c.name.as_str())
                .collect();
            format!("{} > {under:?}", tr.stack_text(i))
        })
        .collect();
    if !cuts.is_empty() {
        eprintln!("cut DWARF stacks: {cuts:?}");
    }
    assert!(
        cuts.len() * 100 <= slices.max(200),
        "{} cuts in {slices} slices of DWARF stacks: {cuts:?}",
        cuts.len()
    );
    // The virtual machine runs each statement; the parser compiles it; both called by the
    // shell's own (stripped) code. Not required up to `__libc_start_call_main`: perf's
    // DWARF walks often stop at sqlite3's main, and the parser runs for a few samples only
    // (a run once had none that went further).
    let shell = in_exe(&sqlite3);
    for (leaf, api) in [
        ("sqlite3VdbeExec", "sqlite3_step"),
        ("sqlite3RunParser", "sqlite3_prepare_v2"),
    ] {
        let api_pred = |n: &str| same_function(n, api);
        t.assert_under_on(
            &format!("{leaf} under {api} under sqlite3's code"),
            |_| true,
            |n| same_function(n, leaf),
            &[&api_pred, &shell],
        );
    }

    assert_decoders_agree(&work, dir.path(), &run, "sqlite3");
    t.assert_process_named("sqlite3");
}

#[test]
fn sqlite3_trigger_in_a_library_works_or_is_refused_clearly() {
    // sqlite3_finalize is libsqlite3's, not the (stripped) executable's. ptscope either
    // sets the trigger there (and the snapshot marks the hit) or refuses with an error
    // naming the function and the reason, without a panic, a trace file or leftovers.
    let test = "sqlite3_trigger_in_a_library_works_or_is_refused_clearly";
    if !can_record(test) {
        return;
    }
    let Some(sqlite3) = need_tool(test, "sqlite3", "sqlite3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    programs::sqlite_db(&sqlite3, &db, 20_000);
    let out = dir.path().join("trigger.fxt.gz");
    let p = Ptscope::new(args(&[
        &"run",
        &"--trigger",
        &"sqlite3_finalize",
        &"-o",
        &out,
        &"--",
        &sqlite3,
        &db,
        &"SELECT count(*) FROM t WHERE b LIKE '%AB%';",
    ]));
    let done = p.run_either();
    let stderr = done.stderr();
    if done.output.status.success() {
        let t = ptscope_realworld::harness::load_checked(&out, &done);
        assert!(
            t.find(|n| n.starts_with("hit sqlite3_finalize"))
                .next()
                .is_some(),
            "the trigger was set but its hit is not in the trace: {}",
            t.summary()
        );
    } else {
        assert!(
            stderr.contains("sqlite3_finalize") && stderr.contains("stripped"),
            "the error does not name the function and the reason:\n{stderr}"
        );
        assert!(
            !out.exists(),
            "a trace was written although recording was refused"
        );
    }
}

#[test]
fn git_hash_object_and_log_dwarf() {
    let test = "git_hash_object_and_log_dwarf";
    if !can_record(test) {
        return;
    }
    let Some(git) = need_tool(test, "git", "git") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    programs::git_repo(&git, &repo);
    let setup = |c: &mut std::process::Command| {
        c.current_dir(&repo);
        programs::git_env(c);
    };
    // hash-object: git's own (nameless) SHA-1 code over the 3 MB file, four times.
    let (_, t) = record_with(
        dir.path(),
        "hash-object",
        &["--callgraph", "dwarf"],
        &[
            &git,
            &"hash-object",
            &"big.txt",
            &"big.txt",
            &"big.txt",
            &"big.txt",
        ],
        setup,
    );
    let code = in_exe(&git);
    let start = |n: &str| n == "__libc_start_call_main";
    t.assert_under_on(
        "git's code under __libc_start_call_main",
        |_| true,
        &code,
        &[&start],
    );
    let hash_object = t;

    // log -p: the loose objects are inflated by libz's (named) inflate.
    let (_, t) = record_with(
        dir.path(),
        "log",
        &["--callgraph", "dwarf"],
        &[&git, &"log", &"-p"],
        setup,
    );
    let inflate = |n: &str| n == "inflate";
    t.assert_under_on(
        "libz inflate under git's code under __libc_start_call_main",
        |_| true,
        inflate,
        &[&code, &start],
    );
    hash_object.assert_process_named("git");
    t.assert_process_named("git");
}

#[test]
fn shell_pipeline_records_the_forked_processes() {
    let test = "shell_pipeline_records_the_forked_processes";
    if !can_record(test) {
        return;
    }
    let (Some(sh), Some(gzip), Some(_)) = (
        need_tool(test, "sh", "dash"),
        need_tool(test, "gzip", "gzip"),
        need_tool(test, "wc", "coreutils"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    programs::text_file(&input, 4);
    let script = format!("{} -c '{}' | wc -c", gzip.display(), input.display());
    let (_, t) = record(
        dir.path(),
        "pipeline",
        &["--callgraph", "dwarf"],
        &[&sh, &"-c", &script],
    );
    // The shell forks gzip and wc: both are recorded, named, and gzip's work is there.
    assert_exe_nested(&t, &gzip, |_| true);
    t.assert_process_named("gzip");
    t.assert_process_named("wc");
    assert_exe_nested(&t, &gzip, |k| k.process_name.contains("gzip"));
    // gzip writing into a pipe: the kernel often copies no user stack for a sample taken
    // in its read or write (a 0-byte copy), so only the libc wrapper is known. That is a
    // cut stack, not a call of `write` from nowhere at the root of the thread.
    let wrapper = |n: &str| {
        ["read", "write", "__GI___libc_read", "__GI___libc_write"]
            .iter()
            .any(|w| same_function(n, w))
    };
    for k in t
        .tracks
        .values()
        .filter(|k| k.process_name.contains("gzip"))
    {
        for (i, s) in k.slices.iter().enumerate() {
            assert!(
                !(s.parent.is_none() && wrapper(&s.name)),
                "a system call wrapper at the root: {}",
                k.stack_text(i)
            );
        }
    }
}

/// Time a program spends in system calls is sampled too (samply shows it; a user-mode
/// timer would not): with the default scope, under the user stack that made the call,
/// as one `[kernel: read]` frame, and the kernel's own frames only when asked for.
#[test]
fn dd_time_in_system_calls_shows_under_its_callers() {
    let test = "dd_time_in_system_calls_shows_under_its_callers";
    if !can_record(test) {
        return;
    }
    let Some(dd) = need_tool(test, "dd", "coreutils") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("rec");
    // Reading /dev/zero is all kernel work (clearing the buffer), writing /dev/null none.
    let command: [&dyn AsRef<std::ffi::OsStr>; 5] = [
        &dd,
        &"if=/dev/zero",
        &"of=/dev/null",
        &"bs=256k",
        &"count=8000",
    ];
    let (run, t) = record(dir.path(), "dd", &["-w", work.to_str().unwrap()], &command);
    let code = in_exe(&dd);
    let read = |n: &str| same_function(n, "read") || same_function(n, "__GI___libc_read");
    let start = |n: &str| n == "__libc_start_call_main";
    let n = t.assert_under_on(
        "[kernel: read] over libc's read, under dd's code",
        |_| true,
        |n| n == "[kernel: read]",
        &[&read, &code, &start],
    );
    assert!(
        n >= 3,
        "only {n} stretches of time in read(2):\n{}",
        t.summary()
    );
    // No kernel function of its own in a user-space trace.
    for track in t.tracks.values() {
        for s in &track.slices {
            assert!(
                !s.name.contains("clear_user") && !s.name.contains("do_syscall_64"),
                "kernel frame {} in a user-space trace",
                s.name
            );
        }
    }
    // Both decoders agree, kernel samples included (the dlfilter leaves DWARF-unwound
    // kernel samples to perf's text, which has their user part).
    assert_decoders_agree(&work, dir.path(), &run, "dd");
    // Asked for, the kernel's frames are there, under the same user stack.
    let uk = decode(
        &work,
        &dir.path().join("uk.fxt.gz"),
        &["--scope", "uk"],
        &run,
    );
    let sys_read = |n: &str| n.starts_with("__x64_sys_read") || n.starts_with("ksys_read");
    uk.assert_under_on(
        "the kernel's read path under libc's read with --scope uk",
        |_| true,
        sys_read,
        &[&read, &code],
    );
    assert!(!uk.has("[kernel: read]"));
}
