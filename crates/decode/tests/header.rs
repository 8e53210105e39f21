//! `read_header` against `perf evlist` and `perf report --header-only` on real files:
//! a fresh cpu-clock recording, the lost-records fixture and a simulated Intel PT one;
//! and damaged copies, which give an answer or a clear error, never a panic.

use ptscope_decode::header::{read_header, HeaderError, RecordingInfo};
use ptscope_decode::RecordingKind;
use ptscope_event::TraceScope;
use std::path::{Path, PathBuf};
use std::process::Command;

fn perf_works() -> bool {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but perf is missing"
        );
        eprintln!("skipping: perf not installed");
    }
    ok
}

/// perf's own output for `args` on `data`.
fn perf(args: &[&str], data: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(data)
        .output()
        .expect("run perf");
    assert!(out.status.success(), "perf {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fixture, decompressed into `dir`.
fn fixture(dir: &Path, gz: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(gz);
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(&src)
        .output()
        .expect("run gzip");
    assert!(out.status.success(), "gzip -dc {}", src.display());
    let path = dir.join(Path::new(gz).file_stem().expect("name"));
    std::fs::write(&path, out.stdout).expect("write fixture");
    path
}

/// Checks what `read_header` says against what perf says, and returns it.
fn same_as_perf(data: &Path) -> RecordingInfo {
    let info = read_header(data).expect("read header");
    let evlist = perf(&["evlist"], data);
    let names: Vec<&str> = evlist.lines().filter(|l| !l.starts_with('#')).collect();
    let ours: Vec<&str> = info
        .events
        .iter()
        .filter_map(|e| e.name.as_deref())
        .collect();
    assert_eq!(ours, names, "{}", data.display());
    let header = perf(&["report", "--header-only"], data);
    let pmus = header
        .lines()
        .find_map(|l| l.strip_prefix("# pmu mappings: "))
        .unwrap_or("");
    let ours: Vec<String> = info
        .pmu_mappings
        .iter()
        .map(|(t, n)| format!("{n} = {t}"))
        .collect();
    assert_eq!(ours.join(", "), pmus.trim_end(), "{}", data.display());
    assert_eq!(
        info.is_intel_pt(),
        names.iter().any(|n| n.contains("intel_pt")),
        "{}",
        data.display()
    );
    info
}

#[test]
fn headers_read_in_process_agree_with_perf() {
    if !perf_works() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (event, scope) in [
        ("cpu-clock", TraceScope::Userspace),
        ("cpu-clock/freq=1000/uk", TraceScope::UserspaceAndKernel),
        ("cpu-clock:k", TraceScope::Kernel),
    ] {
        let data = dir.path().join("perf.data");
        let st = Command::new("perf")
            .args(["record", "-q", "-e", event, "-o"])
            .arg(&data)
            .args(["--", "/usr/bin/gzip", "-c", "/usr/bin/perf"])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run perf record");
        assert!(st.success(), "perf record -e {event}");
        let info = same_as_perf(&data);
        assert_eq!(info.kind(), RecordingKind::Sampling);
        assert_eq!(info.scope(), Some(scope), "{event}");
    }

    let lost = fixture(dir.path(), "sampling/lost_records.perf.data.gz");
    let info = same_as_perf(&lost);
    assert_eq!(info.kind(), RecordingKind::Sampling);
    assert_eq!(info.scope(), Some(TraceScope::Userspace));

    let pt = fixture(dir.path(), "pt/ptsim_gzip.perf.data.gz");
    let info = same_as_perf(&pt);
    assert_eq!(info.kind(), RecordingKind::IntelPt);
    assert_eq!(info.scope(), None);
    assert_eq!(info.pmu_name(info.events[0].pmu_type), Some("intel_pt"));
}

/// Cut short anywhere, bytes flipped in the header, counts and sizes set huge: an
/// answer or a clear error naming the file, never a panic or a huge allocation. A file
/// cut inside its data keeps its events (perf reads it so too), without their names.
#[test]
fn damaged_headers_give_an_answer_or_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pt = fixture(dir.path(), "pt/ptsim_gzip.perf.data.gz");
    let good = std::fs::read(&pt).expect("read");
    let bad = dir.path().join("bad.perf.data");
    let check = |bytes: &[u8], what: &str| -> Result<RecordingInfo, HeaderError> {
        std::fs::write(&bad, bytes).expect("write");
        let r = read_header(&bad);
        if let Err(e) = &r {
            let msg = e.to_string();
            assert!(msg.contains("bad.perf.data"), "{what}: {msg}");
        }
        r
    };
    let mut cuts: Vec<usize> = (0..200).collect();
    cuts.extend((200..good.len()).step_by(997));
    for cut in cuts {
        let r = check(&good[..cut], &format!("cut at {cut}"));
        if cut < 104 {
            assert!(r.is_err(), "cut at {cut}");
        } else if let Ok(info) = r {
            assert!(!info.events.is_empty(), "cut at {cut}");
        }
    }
    // Half the data: perf evlist still lists the event; so do we, unnamed.
    let info = check(&good[..good.len() / 2], "half").expect("half a file");
    assert_eq!(info.events.len(), 1);
    assert!(info.events.iter().all(|e| e.name.is_none()));
    assert_eq!(info.scope(), None, "PMU 8 is nameless without the table");
    assert_eq!(
        info.kind(),
        RecordingKind::Sampling,
        "as perf evlist: unknown attr type"
    );
    let e = check(b"this is not a perf.data file\n", "text").expect_err("text");
    assert!(matches!(e, HeaderError::NotPerfData { .. }), "{e}");
    for at in (8..104).step_by(8) {
        for v in [0u64, 1, u64::MAX, u64::MAX / 2, 1 << 40] {
            let mut b = good.clone();
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            let _ = check(&b, &format!("header word {at} = {v:#x}"));
        }
    }
    // The event descriptions' count and attribute size, wherever they are: flip every
    // byte of the file's last 4 KiB (the feature sections) in turn.
    for at in good.len().saturating_sub(4096)..good.len() {
        let mut b = good.clone();
        b[at] ^= 0xff;
        let _ = check(&b, &format!("byte {at} flipped"));
    }
}
