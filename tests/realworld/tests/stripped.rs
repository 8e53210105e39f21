//! Stripped Debian binaries sampled with frame pointers: their code is named per function
//! (from `.eh_frame`, `gzip+0x…`), not per address, and stacks whose frame-pointer chain
//! ran into data are cut with one marker frame instead of showing invented callers.

use ptscope_realworld::harness::{
    assert_decoders_agree, can_record, decode, need_tool, record, record_with, system_tool,
    Finished,
};
use ptscope_realworld::programs;
use ptscope_realworld::trace::Trace;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const CUT: &str = "[stack cut: frame pointers lost]";
const LOST: &str = "[caller lost: no frame pointer here]";

/// Every distinct slice name in the trace.
fn names(t: &Trace) -> BTreeSet<String> {
    t.tracks
        .values()
        .flat_map(|tr| tr.slices.iter().map(|s| s.name.clone()))
        .collect()
}

/// FDE address ranges of `exe`, as binutils' readelf prints them (`pc=START..END`).
fn fde_ranges(exe: &Path) -> Option<Vec<(u64, u64)>> {
    let readelf = system_tool("readelf")?;
    let out = Command::new(readelf)
        .args(["--debug-dump=frames"])
        .arg(exe)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.lines()
            .filter(|l| l.contains(" FDE "))
            .filter_map(|l| {
                let (a, b) = l.split("pc=").nth(1)?.split_once("..")?;
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b.trim(), 16).ok()?,
                ))
            })
            .collect(),
    )
}

/// FDE start addresses of `exe`.
fn fde_starts(exe: &Path) -> Option<BTreeSet<u64>> {
    Some(fde_ranges(exe)?.into_iter().map(|(a, _)| a).collect())
}

/// Functions of the unstripped `exe` that no FDE covers (crt's `__do_global_dtors_aux`
/// & co. are built without unwind tables): a DWARF walk from them rightly stops at once.
fn functions_without_unwind_tables(exe: &Path) -> BTreeSet<String> {
    let (Some(ranges), Some(nm)) = (fde_ranges(exe), system_tool("nm")) else {
        panic!(
            "readelf and nm (binutils) are needed to read {}",
            exe.display()
        );
    };
    assert!(
        !ranges.is_empty(),
        "readelf found no FDE in {}",
        exe.display()
    );
    let symbols = Command::new(nm).arg(exe).output().unwrap();
    String::from_utf8_lossy(&symbols.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            let code = kind.eq_ignore_ascii_case("t");
            let covered = ranges.iter().any(|&(a, b)| (a..b).contains(&addr));
            (code && !covered).then(|| name.to_string())
        })
        .collect()
}

/// The checks on a frame-pointer recording of the stripped `exe`, decoded by `ptscope
/// run` (`t`) and again from `work` with both decoders and the legacy writer.
fn assert_named_per_function(exe: &Path, t: &Trace, work: &Path, dir: &Path, run: &Finished) {
    let base = exe.file_name().unwrap().to_string_lossy().into_owned();
    let all = names(t);
    let tag = format!("({})]", exe.display());
    let per_address: Vec<&String> = all.iter().filter(|n| n.ends_with(&tag)).collect();
    let fdes = fde_starts(exe);
    // Only code no FDE covers may keep its address (crt's register_tm_clones & co.).
    assert!(
        per_address.len() <= 3,
        "{base}'s code still has per-address names: {:?}",
        &per_address[..per_address.len().min(10)]
    );
    // Frames perf found in no mapping (ASCII text, negative numbers read as return
    // addresses) are never shown.
    let unmapped: Vec<&String> = all.iter().filter(|n| n.ends_with("([unknown])]")).collect();
    assert!(unmapped.is_empty(), "invented frames shown: {unmapped:?}");
    let prefix = format!("{base}+0x");
    let exe_names: BTreeSet<u64> = all
        .iter()
        .filter_map(|n| n.strip_prefix(&prefix))
        .map(|a| u64::from_str_radix(a, 16).expect("NAME+0xHEX"))
        .collect();
    assert!(
        !exe_names.is_empty(),
        "no {prefix}… function names: {}",
        t.summary()
    );
    if let Some(fdes) = fdes {
        // One name per function: each is an FDE's start, so there are at most as many.
        let stray: Vec<_> = exe_names.difference(&fdes).collect();
        assert!(stray.is_empty(), "names not at an FDE start: {stray:x?}");
    }
    // The marker stands for lost callers: it is always a root.
    for tr in t.tracks.values() {
        for (i, s) in tr.slices.iter().enumerate() {
            if s.name == CUT {
                assert!(
                    s.parent.is_none(),
                    "a cut marker under {}",
                    tr.stack_text(i)
                );
            }
        }
    }
    // Both decoders go through the same naming step, and both writers show its names.
    let text = decode(work, &dir.join("text.fxt.gz"), &["--decoder", "text"], run);
    let dl = decode(
        work,
        &dir.join("dl.fxt.gz"),
        &["--decoder", "dlfilter"],
        run,
    );
    text.assert_same_slices(
        &dl,
        &format!("{base} fp: --decoder text vs --decoder dlfilter"),
    );
    let legacy = decode(
        work,
        &dir.join("legacy.fxt.gz"),
        &["--writer", "legacy"],
        run,
    );
    // Off-CPU intervals are the segments writer's own (the legacy writer reproduces
    // magic-trace, which has none), and so are the stacks threads left the CPU in
    // (`sched:sched_switch`, e.g. `__GI___libc_write` when git blocked writing): every
    // other name is shared.
    let mut waited_in = std::collections::BTreeSet::new();
    for tr in t.tracks.values() {
        for i in tr.find(|n| n.starts_with("[off-cpu")) {
            waited_in.extend(tr.ancestors(i).into_iter().map(str::to_owned));
        }
    }
    let on_cpu: std::collections::BTreeSet<String> = all
        .iter()
        .filter(|n| !n.starts_with("[off-cpu"))
        .cloned()
        .collect();
    let legacy_names = names(&legacy);
    assert!(
        legacy_names.is_subset(&on_cpu),
        "the legacy writer shows names the segments writer does not: {:?}",
        legacy_names.difference(&on_cpu).collect::<Vec<_>>()
    );
    // `main`'s caller, which the segments writer puts below a `main` whose callers a
    // stack lost (read from the program's `_start` and libc's symbols, issue 25): the
    // legacy writer shows it only when some sample's frame-pointer chain reached it.
    let only_segments: Vec<&String> = on_cpu
        .difference(&legacy_names)
        .filter(|n| !waited_in.contains(*n) && n.as_str() != "__libc_start_call_main")
        .collect();
    assert!(
        only_segments.is_empty(),
        "the segments writer shows names the legacy writer does not, outside the stacks \
         time off CPU was spent in: {only_segments:?}"
    );
}

#[test]
fn gzip_fp_named_per_function_and_broken_stacks_cut() {
    let test = "gzip_fp_named_per_function_and_broken_stacks_cut";
    if !can_record(test) {
        return;
    }
    let Some(gzip) = need_tool(test, "gzip", "gzip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    programs::text_file(&input, 8);
    let work = dir.path().join("rec");
    let (run, t) = record(
        dir.path(),
        "gzip",
        &["--callgraph", "fp", "-w", work.to_str().unwrap()],
        &[&gzip, &"-9", &"-c", &input],
    );
    assert_named_per_function(&gzip, &t, &work, dir.path(), &run);
}

#[test]
fn sqlite3_shell_fp_named_per_function() {
    let test = "sqlite3_shell_fp_named_per_function";
    if !can_record(test) {
        return;
    }
    let Some(sqlite3) = need_tool(test, "sqlite3", "sqlite3") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    programs::sqlite_db(&sqlite3, &db, 100_000);
    let work = dir.path().join("rec");
    // `.dump` and `-box` output run the shell's own (stripped) code, not only libsqlite3.
    let (run, t) = record(
        dir.path(),
        "sqlite3",
        &["--callgraph", "fp", "-w", work.to_str().unwrap()],
        &[
            &sqlite3,
            &"-box",
            &db,
            &".dump",
            &"SELECT a, b FROM t LIMIT 20000;",
        ],
    );
    assert_named_per_function(&sqlite3, &t, &work, dir.path(), &run);
}

#[test]
fn git_fp_named_per_function() {
    let test = "git_fp_named_per_function";
    if !can_record(test) {
        return;
    }
    let Some(git) = need_tool(test, "git", "git") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    programs::git_repo(&git, &repo);
    let mut files = Vec::new();
    for i in 0..4 {
        let f = repo.join(format!("f{i}.txt"));
        programs::text_file(&f, 3);
        files.push(f);
    }
    let work = dir.path().join("rec");
    let (run, t) = record_with(
        dir.path(),
        "git",
        &["--callgraph", "fp", "-w", work.to_str().unwrap()],
        &[
            &git,
            &"-C",
            &repo,
            &"hash-object",
            &files[0],
            &files[1],
            &files[2],
            &files[3],
        ],
        programs::git_env,
    );
    assert_named_per_function(&git, &t, &work, dir.path(), &run);
}

/// `ptsim` (qemu-user) records Debian's gzip as a genuine Intel PT perf.data: perf names
/// every branch in gzip's code `[unknown]` at its absolute address, and the trace had a
/// slice per branch target. With the recording's mappings they are named per function.
#[test]
fn gzip_intel_pt_branches_named_per_function() {
    let test = "gzip_intel_pt_branches_named_per_function";
    if !ptsim::testing::tools_available(&["qemu-x86_64", "perf"]) {
        assert!(
            !ptscope_realworld::harness::in_ci(),
            "{test}: qemu-x86_64 and perf are needed"
        );
        return;
    }
    let Some(gzip) = need_tool(test, "gzip", "gzip") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.txt");
    programs::text_file(&input, 1);
    let small = dir.path().join("small.txt");
    let bytes = std::fs::read(&input).unwrap();
    std::fs::write(&small, &bytes[..bytes.len().min(60_000)]).unwrap();
    let work = dir.path().join("rec");
    std::fs::create_dir(&work).unwrap();
    let started = std::time::Instant::now();
    let out = ptsim::testing::record(
        &work,
        // -k writes small.txt.gz beside it: nothing binary on the test's stdout.
        &[&gzip, Path::new("-k"), Path::new("-f"), &small],
        &ptsim::SimConfig::default(),
    )
    .expect("ptsim records gzip");
    assert!(out.status.success(), "gzip failed under qemu");
    let recorded = ptscope_realworld::harness::Finished {
        what: format!("ptsim {} -k -f {}", gzip.display(), small.display()),
        output: std::process::Output {
            status: out.status,
            stdout: Vec::new(),
            stderr: Vec::new(),
        },
        elapsed: started.elapsed(),
    };
    let text = assert_decoders_agree(&work, dir.path(), &recorded, "gzip PT");
    let all = names(&text);
    let tag = format!("({})]", gzip.display());
    // Only code no FDE covers keeps its address: crt's register_tm_clones & co.
    let per_address: Vec<&String> = all.iter().filter(|n| n.ends_with(&tag)).collect();
    assert!(
        per_address.len() < 20,
        "{} per-address names in gzip's code: {:?}",
        per_address.len(),
        &per_address[..per_address.len().min(10)]
    );
    let gzip_names: BTreeSet<u64> = all
        .iter()
        .filter_map(|n| n.strip_prefix("gzip+0x"))
        .map(|a| u64::from_str_radix(a, 16).expect("gzip+0xHEX"))
        .collect();
    assert!(gzip_names.len() > 5, "gzip functions: {gzip_names:x?}");
    if let Some(fdes) = fde_starts(&gzip) {
        let stray: Vec<_> = gzip_names.difference(&fdes).collect();
        assert!(stray.is_empty(), "names not at an FDE start: {stray:x?}");
    }
}

/// A stripped program rebuilt at the same path after recording: its new `.eh_frame` would
/// give the old addresses wrong names. perf recorded the old build id, so the decode
/// leaves them as perf named them.
#[test]
fn a_binary_rebuilt_since_recording_is_not_named() {
    let test = "a_binary_rebuilt_since_recording_is_not_named";
    if !can_record(test) {
        return;
    }
    let (Some(gcc), Some(strip)) = (
        need_tool(test, "gcc", "gcc"),
        need_tool(test, "strip", "binutils"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("prog");
    let build = |variant: &str| {
        let src = dir.path().join("prog.c");
        std::fs::write(
            &src,
            format!(
                "/* {variant} */\n\
                 __attribute__((noinline)) static long f(long x) {{ return x * 7 + (x >> 3); }}\n\
                 __attribute__((noinline)) static long g(long x) {{ return f(x) ^ {variant}; }}\n\
                 int main(void) {{ long s = 0; for (long i = 0; i < 300000000; i++) s += g(i); return (int)(s & 1); }}\n"
            ),
        )
        .unwrap();
        let ok = Command::new(&gcc)
            .args(["-O2", "-fno-omit-frame-pointer", "-Wl,--build-id", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok, "gcc failed");
        assert!(Command::new(&strip).arg(&exe).status().unwrap().success());
    };
    build("1");
    let work = dir.path().join("rec");
    let (run, t) = record(
        dir.path(),
        "prog",
        &["--callgraph", "fp", "-w", work.to_str().unwrap()],
        &[&exe],
    );
    assert!(
        names(&t).iter().any(|n| n.starts_with("prog+0x")),
        "the program's own build is named: {}",
        t.summary()
    );
    // Replaced (a new inode, as compilers and package managers do), with other code.
    std::fs::remove_file(&exe).unwrap();
    build("12345 + (x & 3) * 11");
    let again = decode(&work, &dir.path().join("again.fxt.gz"), &[], &run);
    let named: Vec<String> = names(&again)
        .into_iter()
        .filter(|n| n.starts_with("prog+0x"))
        .collect();
    assert!(
        named.is_empty(),
        "names from the rebuilt binary given to the recorded one's code: {named:?}"
    );
}

/// GCC's `-momit-leaf-frame-pointer` (and any function's first instructions) leave `rbp`
/// pointing at the caller's frame: a frame-pointer walk from the leaf finds its caller's
/// caller next. The trace puts `[caller lost: no frame pointer here]` there instead of
/// showing the leaf as called by a function that never called it.
#[test]
fn a_leaf_without_a_frame_does_not_get_its_callers_caller_as_parent() {
    let test = "a_leaf_without_a_frame_does_not_get_its_callers_caller_as_parent";
    if !can_record(test) {
        return;
    }
    let Some(gcc) = need_tool(test, "gcc", "gcc") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("leaf.c");
    std::fs::write(
        &src,
        "volatile long sink;\n\
         __attribute__((noipa)) long leaf_work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i ^ (s >> 3); return s; }\n\
         __attribute__((noipa)) long middle(long n) { long s = leaf_work(n); sink = s; return s + 1; }\n\
         int main(void) { long t = 0; for (int k = 0; k < 40; k++) t += middle(10000000 + k); sink = t; return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("leaf");
    let ok = Command::new(&gcc)
        .args([
            "-O1",
            "-fno-omit-frame-pointer",
            "-momit-leaf-frame-pointer",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "gcc failed");
    let (_, t) = record(dir.path(), "leaf", &["--callgraph", "fp"], &[&exe]);
    let mut under_lost = 0;
    for tr in t.tracks.values() {
        for (i, s) in tr.slices.iter().enumerate() {
            if s.name != "leaf_work" {
                continue;
            }
            let parent = s.parent.map(|p| tr.slices[p].name.as_str());
            assert_ne!(
                parent,
                Some("main"),
                "leaf_work shown as called by main: {}",
                tr.stack_text(i)
            );
            if parent == Some(LOST) {
                let grand = s.parent.and_then(|p| tr.slices[p].parent);
                assert_eq!(grand.map(|g| tr.slices[g].name.as_str()), Some("main"));
                under_lost += 1;
            }
        }
    }
    assert!(under_lost > 0, "no leaf_work under {LOST}: {}", t.summary());
    // perf's DWARF unwinding finds the caller itself: no marker there.
    let (_, d) = record(dir.path(), "leaf-dwarf", &["--callgraph", "dwarf"], &[&exe]);
    let dn = names(&d);
    assert!(!dn.contains(LOST), "{LOST} in a DWARF-unwound trace");
    // perf ends a DWARF walk that reached `_start` with a -1 return address: the end of
    // the stack, neither a frame nor a cut. Only a sample in code without unwind tables
    // (crt's destructor walker, seen at exit under load) is rightly cut.
    let no_tables = functions_without_unwind_tables(&exe);
    assert!(
        no_tables.contains("__do_global_dtors_aux") && !no_tables.contains("leaf_work"),
        "unexpected FDE coverage: {no_tables:?}"
    );
    let mut odd = Vec::new();
    for tr in d.tracks.values() {
        for (i, s) in tr.slices.iter().enumerate() {
            let cut_in_code_without_tables = s.name == "[stack cut: unwinding stopped]"
                && tr
                    .slices
                    .iter()
                    .filter(|c| c.parent == Some(i))
                    .all(|c| no_tables.contains(c.name.as_str()));
            if (s.name.ends_with("([unknown])]") || s.name.starts_with("[stack cut"))
                && !cut_in_code_without_tables
            {
                odd.push(tr.stack_text(i));
            }
        }
    }
    assert!(
        odd.is_empty(),
        "DWARF stacks with invented roots or cuts: {odd:?}"
    );
    d.assert_under("leaf_work", &["middle", "main"]);
}
