//! The README's first command, `scripts/demo`, records `scripts/demo.c` with
//! `ptscope run` and its defaults. Recorded the same way here, its trace must show what
//! a newcomer is told to look for: `main` one slice over the run, `run_batch` under it,
//! and `parse_line` → `checksum` and libc's `snprintf` under `run_batch`. (With
//! `--callgraph fp`, as the script once ran it, the walk stopped in Debian's libc, which
//! keeps no frame pointers: `main` came out in hundreds of pieces and `vfprintf` at the root.)

use ptscope_realworld::harness::{build, can_record, record, repo};
use std::process::Command;

#[test]
fn the_demo_trace_shows_main_and_its_callees() {
    let test = "the_demo_trace_shows_main_and_its_callees";
    if !can_record(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("demo");
    // The flags scripts/demo compiles it with.
    build(
        Command::new("cc")
            .args([
                "-O1",
                "-g",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
            ])
            .arg("-o")
            .arg(&exe)
            .arg(repo().join("scripts/demo.c")),
    );
    let (_, t) = record(dir.path(), "demo", &[], &[&exe]);
    let k = t.track_named("demo");
    let mains: Vec<usize> = k.find(|n| n == "main").collect();
    assert_eq!(mains.len(), 1, "main is one call:\n{}", t.summary());
    let main = &k.slices[mains[0]];
    let lasted = main.end.map_or(0, |e| e - main.start);
    assert!(
        lasted * 2
            > k.slices
                .iter()
                .filter_map(|s| s.end)
                .max()
                .unwrap_or(0)
                .saturating_sub(main.start),
        "main covers the run:\n{}",
        t.summary()
    );
    t.assert_under("checksum", &["parse_line", "run_batch", "main"]);
    t.assert_under("run_batch", &["main", "__libc_start_call_main"]);
    t.assert_under("__vsnprintf_internal", &["run_batch", "main"]);
}
