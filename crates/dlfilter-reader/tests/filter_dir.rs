//! The filter perf loads runs with ptscope's privileges (root, usually), so no other
//! user may be able to swap it: perf loads a sealed memfd of ptscope's. A `perf.data`
//! in a world-writable directory where another user planted a `ptscope_dlfilter.so`,
//! symbolic links under the old temporary name, and a FIFO that swaps itself for their
//! library once read: decoding loads none of it, follows none of it, writes nothing
//! there, and writes nothing in `$TMPDIR` either, even when decoding fails. (The
//! renaming race in a `TMPDIR` others can write is `crates/cli/tests/root_attacks.rs`.)
//!
//! One test in its own binary: it points `$TMPDIR` at a private directory to see what
//! decoding leaves behind.

#[path = "../../../tests/attacker.rs"]
mod attacker;
mod common;

use attacker::{as_nobody, chmod};
use common::*;
use ptscope_decode::RecordingKind;
use ptscope_dlfilter_reader::{open, Choice, DlfilterOptions, FILTER_SO};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Names, owners, modes and sizes of a directory's entries (links not followed).
fn listing(dir: &Path) -> Vec<(String, u32, u32, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("dir entry");
            let m = std::fs::symlink_metadata(e.path()).expect("lstat");
            (
                e.file_name().to_string_lossy().into_owned(),
                m.uid(),
                m.mode(),
                m.len(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Decodes `data` as the CLI does (automatic choice); returns (events, on the dlfilter path).
fn decode(data: &Path, tmpdir: &Path) -> (usize, bool) {
    let mut o = DlfilterOptions::new(data);
    o.kind = Some(RecordingKind::Sampling);
    let (mut s, notice) = open(&o, Choice::Auto).expect("open");
    assert!(notice.is_none(), "{notice:?}");
    // While decoding, nothing is written anywhere: perf loads the filter from a sealed
    // memfd of ptscope's (`/proc/PID/fd/N`).
    assert_empty(tmpdir, "while decoding");
    let mut n = 0;
    while s.next_event().expect("decode").is_some() {
        n += 1;
    }
    s.finish().expect("perf exit");
    (n, s.is_dlfilter())
}

fn assert_empty(dir: &Path, when: &str) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .expect("read TMPDIR")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "{when}: left in TMPDIR: {left:?}");
}

#[test]
fn filters_planted_in_a_shared_directory_are_never_loaded_or_written_through() {
    if !perf_usable("filters_planted_in_a_shared_directory") {
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        let why = "filters_planted_in_a_shared_directory: setpriv (util-linux) not found";
        if std::env::var_os("CI").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED {why}");
        return;
    }
    // Under /tmp itself, not TMPDIR: scripts/test's TMPDIR is private (0700), and the
    // other user must reach the shared directory.
    let top_dir = tempfile::Builder::new()
        .prefix("ptscope-test-filter-dir-")
        .tempdir_in("/tmp")
        .expect("scratch dir");
    let top = top_dir.path();
    // Others may pass through `top` (to reach the shared directory), not write in it.
    chmod(top, 0o755);
    let tmpdir = top.join("tmp");
    std::fs::create_dir(&tmpdir).expect("mkdir tmp");
    chmod(&tmpdir, 0o700);
    std::env::set_var("TMPDIR", &tmpdir);
    let shared = top.join("shared");
    std::fs::create_dir(&shared).expect("mkdir shared");
    chmod(&shared, 0o1777);

    let exe = build_prog(top, "prog");
    let data = shared.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000", "-g"],
        &[&exe_s, "60"],
    );
    let marker = top.join("marker");
    attacker::evil_library(&top.join("evil.so"), &marker);
    std::fs::write(top.join("good.so"), FILTER_SO).expect("write good.so");
    chmod(&top.join("good.so"), 0o644);
    let victim = top.join("victim");
    std::fs::write(&victim, "root's precious file\n").expect("write victim");

    // 1. Their library under the filter's name, and links under the name the filter
    //    was once written to before a rename (`.ptscope_dlfilter.so.PID`, with this
    //    process's pid) pointing at a file of root's.
    let plant = format!(
        "cp {top}/evil.so {shared}/ptscope_dlfilter.so && ln -s {victim} {shared}/.ptscope_dlfilter.so.{pid} && ln -s {victim} {shared}/ptscope_dlfilter.so.tmp",
        top = top.display(),
        shared = shared.display(),
        victim = victim.display(),
        pid = std::process::id()
    );
    let o = as_nobody(&plant).output().expect("setpriv");
    assert!(o.status.success(), "planting failed: {o:?}");
    let before = listing(&shared);
    let (n, dlf) = decode(&data, &tmpdir);
    assert!(dlf, "the embedded filter should load from its memfd");
    assert!(n > 50, "only {n} events");
    assert!(!marker.exists(), "perf loaded the planted library");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("read victim"),
        "root's precious file\n",
        "decoding wrote through a planted link"
    );
    assert_eq!(
        listing(&shared),
        before,
        "decoding changed the shared directory"
    );
    assert_empty(&tmpdir, "after decoding");

    // 2. A FIFO under the filter's name that hands out the genuine filter's bytes to
    //    whoever reads it, then is replaced by their library, between a check of the
    //    file and perf's loading of it.
    let swap = format!(
        "rm -f {shared}/ptscope_dlfilter.so && mkfifo -m 644 {shared}/ptscope_dlfilter.so && cp {top}/evil.so {shared}/.evil",
        top = top.display(),
        shared = shared.display()
    );
    let o = as_nobody(&swap).output().expect("setpriv");
    assert!(o.status.success(), "planting the FIFO failed: {o:?}");
    let before = listing(&shared);
    let mut swapper = as_nobody(&format!(
        "cat {top}/good.so > {shared}/ptscope_dlfilter.so && mv -f {shared}/.evil {shared}/ptscope_dlfilter.so",
        top = top.display(),
        shared = shared.display()
    ))
    .spawn()
    .expect("setpriv");
    let (n, dlf) = decode(&data, &tmpdir);
    assert!(dlf && n > 50, "{n} events, dlfilter {dlf}");
    assert!(!marker.exists(), "perf loaded the swapped-in library");
    assert_eq!(
        listing(&shared),
        before,
        "decoding changed the shared directory"
    );
    assert_empty(&tmpdir, "after decoding");
    // Nobody read the FIFO: drain it so the swapper finishes, then reap it.
    let drained = std::fs::read(shared.join("ptscope_dlfilter.so")).expect("read FIFO");
    assert_eq!(drained.len(), FILTER_SO.len());
    assert!(swapper.wait().expect("swapper").success());

    // 3. A decode that fails leaves nothing behind either.
    let bad = top.join("bad.data");
    std::fs::write(&bad, b"PERFILE2 but not really").expect("write bad.data");
    let mut o = DlfilterOptions::new(&bad);
    o.kind = Some(RecordingKind::Sampling);
    if let Ok((mut s, _)) = open(&o, Choice::Dlfilter) {
        while let Ok(Some(_)) = s.next_event() {}
        assert!(s.finish().is_err(), "perf should reject bad.data");
    }
    assert_empty(&tmpdir, "after a failed decode");
}
