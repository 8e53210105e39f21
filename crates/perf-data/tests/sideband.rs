//! A recording cut into pieces by perf (`--switch-output`), as the sampling flight
//! recorder makes it: gzip, begun by the shell perf runs, starts in the first piece, so
//! the second has its samples but not its name or mappings (perf announces again at each
//! new file only the process it started itself), and `perf script` shows it as `:PID` in
//! `[unknown]` code. Written again with the first piece's side band, the second decodes
//! on its own.

use ptscope_perf_data::{PerfData, Record, Sideband};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn perf_can_record() -> bool {
    Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "-o",
            "/dev/null",
            "--",
            "true",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `perf script`'s comm and object columns for every sample of `file`.
fn samples(file: &Path) -> Vec<String> {
    let out = Command::new("perf")
        .args(["script", "-F", "comm,ip,dso", "-i"])
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .expect("perf script runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect()
}

fn pieces(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("perf.data."))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_later_piece_decodes_on_its_own_with_the_side_band_of_those_before() {
    if !perf_can_record() {
        eprintln!("skipped: perf cannot record here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "1000"])
        .args(["--switch-output=signal", "--timestamp", "-o"])
        .arg(dir.path().join("perf.data"))
        .args([
            "--",
            "sh",
            "-c",
            "/bin/true; timeout 5 gzip -1 -c /dev/zero > /dev/null; :",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = perf.id() as libc::pid_t;
    // Until `cond` holds (a loaded machine starts perf slowly), at most 20 s.
    let wait = |cond: &dyn Fn() -> bool| {
        for _ in 0..400 {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let data = dir.path().join("perf.data");
    wait(&|| data.exists());
    std::thread::sleep(Duration::from_millis(300));
    // perf takes the signal only once set up (not yet when it has created its file):
    // asked again until the first piece appears.
    for _ in 0..100 {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid, libc::SIGUSR2) };
        std::thread::sleep(Duration::from_millis(200));
        if !pieces(dir.path()).is_empty() {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    perf.wait().unwrap();
    let files = pieces(dir.path());
    assert!(files.len() >= 2, "perf wrote two pieces: {files:?}");
    let second = &files[1];
    let before = samples(second);
    let gzip = |lines: &[String]| lines.iter().filter(|l| l.starts_with("gzip ")).count();
    assert!(!before.is_empty(), "the second piece has samples");
    assert_eq!(
        gzip(&before),
        0,
        "alone, the second piece does not know gzip's name: {:?}",
        &before[..before.len().min(5)]
    );

    let mut sideband = Sideband::default();
    sideband.take(&PerfData::open(&files[0]).unwrap());
    assert!(!sideband.is_empty());
    let whole = dir.path().join("whole.data");
    let mut out = std::fs::File::create(&whole).unwrap();
    PerfData::open(second)
        .unwrap()
        .write_with_sideband(&sideband, &mut out)
        .unwrap();
    drop(out);
    let after = samples(&whole);
    assert_eq!(after.len(), before.len(), "the same samples");
    assert!(
        gzip(&after) * 10 >= after.len() * 9,
        "with the side band, gzip's samples are named: {:?}",
        &after[..after.len().min(5)]
    );
    // Its code is known too: samples fall in /usr/bin/gzip, not in `[unknown]`.
    let mapped = after.iter().filter(|l| l.contains("gzip)")).count();
    assert!(
        mapped * 10 >= after.len() * 9,
        "gzip's code: {:?}",
        &after[..after.len().min(5)]
    );
    // The rewritten file is a valid perf.data; its side band holds nothing of a process
    // that exited in the first piece (`/bin/true`): its pid may be another's next.
    let again = PerfData::open(&whole).unwrap();
    assert!(again.cut_short().is_none());
    let first = PerfData::open(&files[0]).unwrap();
    let exited: Vec<u32> = first
        .records()
        .flatten()
        .filter_map(|r| match r.record {
            Record::Exit(t) if t.pid == t.tid => Some(t.pid),
            _ => None,
        })
        .collect();
    assert!(!exited.is_empty(), "/bin/true exited in the first piece");
    let sb = added(&again, &PerfData::open(second).unwrap());
    assert!(sb.iter().any(|r| matches!(r.record, Record::Comm { .. })));
    for r in &sb {
        let pid = match r.record {
            Record::Comm { pid, .. } => pid,
            Record::Mmap(m) => m.pid,
            Record::Fork(t) | Record::Exit(t) => t.pid,
            _ => continue,
        };
        assert!(!exited.contains(&pid), "pid {pid} exited: {:?}", r.record);
    }
}

fn fixture(name: &str) -> PerfData {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/sampling")
        .join(name);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap()),
        &mut bytes,
    )
    .unwrap();
    PerfData::from_bytes(bytes, name).unwrap()
}

/// perf announces the process it was given again at the start of every piece: the side
/// band holds each record once, however many pieces announced it.
#[test]
fn the_side_band_holds_each_record_once() {
    let data = fixture("lost_records.perf.data.gz");
    let mut sideband = Sideband::default();
    sideband.take(&data);
    let once = sideband.len();
    assert!(once > 0);
    sideband.take(&data);
    assert_eq!(sideband.len(), once, "the same records again add nothing");
}

/// The records at the start of `whole` that `own` (the file it was made from) does not
/// have: the side band written into it.
fn added<'a>(whole: &'a PerfData, own: &PerfData) -> Vec<ptscope_perf_data::RecordAt<'a>> {
    let all: Vec<_> = whole.records().flatten().collect();
    let n = all.len() - own.records().count();
    all.into_iter().take(n).collect()
}
