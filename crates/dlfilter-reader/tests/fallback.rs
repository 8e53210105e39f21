//! perf dying mid-stream, a filter perf will not load, an old perf: clear errors, and
//! the text path as the fallback with nothing lost or duplicated.

mod common;

use common::*;
use ptscope_decode::{PerfScript, PerfScriptOptions, RecordingKind};
use ptscope_dlfilter_reader::{
    install_filter, open, Choice, CorruptKind, DlfilterOptions, DlfilterScript, Error,
};
use std::path::{Path, PathBuf};

/// A `perf` wrapper: reports `version`, and cuts `perf script --dlfilter` off after
/// `cut` bytes (then fails), as a perf crashing mid-stream would.
fn fake_perf(dir: &Path, version: &str, cut: usize) -> PathBuf {
    let p = dir.join(format!("fake-perf-{}-{cut}", version.replace('.', "_")));
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = --version ]; then echo "perf version {version}"; exit 0; fi
for a in "$@"; do
  if [ "$a" = --dlfilter ]; then perf "$@" | head -c {cut}; echo "perf: Segmentation fault" >&2; exit 139; fi
done
exec perf "$@"
"#
    );
    executable::write_executable(&p, script);
    p
}

fn text_events(data: &Path) -> Vec<String> {
    let mut o = PerfScriptOptions::new(data);
    o.kind = Some(RecordingKind::Sampling);
    let mut s = PerfScript::spawn(&o).expect("perf script");
    let mut out = Vec::new();
    while let Some(e) = s.next_event().expect("decode") {
        out.push(norm(&e, s.strings()));
    }
    s.finish().expect("perf exit");
    out
}

/// Bytes perf writes on the dlfilter path for `data`.
fn stream_len(data: &Path) -> usize {
    let filter = install_filter().expect("install");
    let filter = filter.path();
    let out = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(data)
        .args(RecordingKind::Sampling.script_args())
        .arg("--dlfilter")
        .arg(filter)
        .output()
        .expect("perf script --dlfilter");
    assert!(out.status.success());
    out.stdout.len()
}

fn options(data: &Path, perf: &Path) -> DlfilterOptions {
    let mut o = DlfilterOptions::new(data);
    o.perf = perf.to_path_buf();
    o.kind = Some(RecordingKind::Sampling);
    o
}

#[test]
fn crash_load_failure_and_old_perf_fall_back_to_text() {
    if !perf_usable("crash_load_failure_and_old_perf_fall_back_to_text") {
        return;
    }
    let tmp = scratch("fallback");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "50000", "-g"],
        &[&exe_s, "100"],
    );
    let want = text_events(&data);
    assert!(want.len() > 100);

    // perf dies mid-stream (halfway through its output): the events before are kept,
    // then a clear error.
    let crashing = fake_perf(dir, "6.1.0", stream_len(&data) / 2);
    let mut s = DlfilterScript::spawn(&options(&data, &crashing)).expect("spawn");
    let mut got = Vec::new();
    let err = loop {
        match s.next_event() {
            Ok(Some(e)) => got.push(norm(&e, s.strings())),
            Ok(None) => panic!("a cut stream must not end cleanly"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Truncated { events } if events as usize == got.len()));
    assert!(!got.is_empty() && got.len() < want.len());
    assert_eq!(got[..], want[..got.len()]);
    let exit = s.finish().expect_err("perf failed");
    assert!(exit.to_string().contains("Segmentation fault"), "{exit}");

    // With the automatic choice the rest comes from the text path: the whole stream.
    let (mut any, notice) = open(&options(&data, &crashing), Choice::Auto).expect("open");
    assert!(any.is_dlfilter() && notice.is_none());
    let mut got = Vec::new();
    while let Some(e) = any.next_event().expect("fallback continues") {
        got.push(norm(&e, any.strings()));
    }
    any.finish().expect("text perf exits cleanly");
    assert_eq!(got, want);

    // A filter perf cannot load.
    let bad = dir.join("bad.so");
    std::fs::write(&bad, b"not an ELF file").expect("write");
    let mut o = options(&data, Path::new("perf"));
    o.filter = Some(bad);
    let (mut any, notice) = open(&o, Choice::Auto).expect("open");
    assert!(!any.is_dlfilter());
    let notice = notice.expect("a notice");
    assert!(notice.contains("did not load the dlfilter"), "{notice}");
    let mut got = Vec::new();
    while let Some(e) = any.next_event().expect("text") {
        got.push(norm(&e, any.strings()));
    }
    assert_eq!(got, want);
    let err = open(&o, Choice::Dlfilter).expect_err("explicit choice");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");

    // A perf older than 5.14.
    let old = fake_perf(dir, "5.10.0", usize::MAX);
    let (mut any, notice) = open(&options(&data, &old), Choice::Auto).expect("open");
    assert!(!any.is_dlfilter());
    assert!(notice.is_some_and(|n| n.contains("5.10 is older than 5.14")));
    let mut n = 0;
    while any.next_event().expect("text").is_some() {
        n += 1;
    }
    assert_eq!(n, want.len());
}

/// The dlfilter stream turns corrupt mid-way (a record of an unknown type): the
/// explicit choice keeps the events before it and then reports it; the automatic
/// choice continues from perf script text and gives exactly the text path's events,
/// none lost or repeated, with a notice saying so (returned, not printed).
#[test]
fn a_stream_corrupt_mid_way_continues_on_the_text_path() {
    if !perf_usable("a_stream_corrupt_mid_way_continues_on_the_text_path") {
        return;
    }
    let tmp = scratch("corrupt");
    let dir = tmp.path();
    let exe = build_prog(dir, "prog");
    let data = dir.join("perf.data");
    let exe_s = exe.to_string_lossy().into_owned();
    record(
        &data,
        &["-e", "cpu-clock", "-c", "50000", "-g"],
        &[&exe_s, "100"],
    );
    let want = text_events(&data);
    assert!(want.len() > 100);
    let perf = corrupting_perf(dir);

    // Untouched, the wrapper changes nothing (and saves the stream).
    let (mut any, _) = open(&options(&data, &perf), Choice::Auto).expect("open");
    let mut got = Vec::new();
    while let Some(e) = any.next_event().expect("clean stream") {
        got.push(norm(&e, any.strings()));
    }
    assert!(any.is_dlfilter());
    assert!(any.take_notices().is_empty());
    assert_eq!(got, want);
    let full = std::fs::read(dir.join("full")).expect("saved stream");

    for fraction in [3, 2] {
        let cut = boundary_after(&full, full.len() / fraction);
        assert!(cut < full.len());
        std::fs::write(dir.join("cut"), cut.to_string()).expect("write cut");

        let mut s = DlfilterScript::spawn(&options(&data, &perf)).expect("spawn");
        let mut got = Vec::new();
        let err = loop {
            match s.next_event() {
                Ok(Some(e)) => got.push(norm(&e, s.strings())),
                Ok(None) => panic!("a corrupt stream must not end cleanly"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(&err, Error::Corrupt { offset, kind: CorruptKind::UnknownRecord(99), .. } if *offset == cut as u64),
            "{err}"
        );
        assert!(!got.is_empty() && got.len() < want.len());
        assert_eq!(got[..], want[..got.len()]);
        let before = got.len();

        let (mut any, notice) = open(&options(&data, &perf), Choice::Auto).expect("open");
        assert!(any.is_dlfilter() && notice.is_none());
        let mut got = Vec::new();
        let mut notices = Vec::new();
        while let Some(e) = any.next_event().expect("the fallback continues") {
            got.push(norm(&e, any.strings()));
            notices.extend(any.take_notices());
        }
        any.finish().expect("text perf exits cleanly");
        assert!(!any.is_dlfilter());
        assert_eq!(got, want, "cut at byte {cut}");
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].contains(&format!("failed after {before} events"))
                && notices[0].contains("unknown record type 99")
                && notices[0].contains("perf script text"),
            "{}",
            notices[0]
        );
    }
}
