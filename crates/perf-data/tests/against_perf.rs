//! Every record the reader walks, against perf's own dump (`perf report -D`) of the same
//! file: the same records at the same offsets, with the same fields and times — on a
//! simulated Intel PT recording, a recording with lost records, and a fresh cpu-clock
//! recording with context switches, forks and exits of real programs. Then damaged
//! copies: cut anywhere or with bytes flipped, the reader gives records and at most one
//! error, never a panic.

use ptscope_perf_data::{PerfData, Record, RecordAt};
use std::collections::BTreeMap;
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

/// A fixture, decompressed into `dir`.
fn fixture(dir: &Path, gz: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(gz);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&src).expect("fixture")),
        &mut bytes,
    )
    .expect("gunzip fixture");
    let path = dir.join(Path::new(gz).file_stem().expect("name"));
    std::fs::write(&path, bytes).expect("write fixture");
    path
}

/// What perf's dump says of one record: its time (0 without one), type name and text.
#[derive(Debug)]
struct Dumped {
    time: u64,
    name: String,
    text: String,
}

/// `perf report -D`'s one-line summaries, by file offset.
fn perf_dump(data: &Path) -> BTreeMap<u64, Dumped> {
    let out = Command::new("perf")
        .args(["report", "-D", "-i"])
        .arg(data)
        .output()
        .expect("run perf report -D");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut map = BTreeMap::new();
    for line in text.lines() {
        // `TIME 0xOFFSET [0xSIZE]: PERF_RECORD_NAME rest`, TIME possibly after a CPU.
        let Some(p) = line.find(": PERF_RECORD_") else {
            continue;
        };
        let head: Vec<&str> = line[..p].split_whitespace().collect();
        let [.., time, off, _size] = head[..] else {
            continue;
        };
        let Some(off) = off
            .strip_prefix("0x")
            .and_then(|o| u64::from_str_radix(o, 16).ok())
        else {
            continue;
        };
        let rest = &line[p + ": PERF_RECORD_".len()..];
        let name_end = rest
            .find(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
            .unwrap_or(rest.len());
        map.insert(
            off,
            Dumped {
                time: time.parse().unwrap_or(0),
                name: rest[..name_end].to_string(),
                text: rest[name_end..].trim().to_string(),
            },
        );
    }
    map
}

/// Checks every record of `path` against perf's dump; returns how many of each kind.
fn same_as_perf(path: &Path) -> BTreeMap<&'static str, usize> {
    let data = PerfData::open(path).expect("open");
    let dump = perf_dump(path);
    let mut seen = BTreeMap::new();
    let mut offsets = Vec::new();
    for r in data.records() {
        let r: RecordAt = r.expect("no corrupt record");
        offsets.push(r.offset);
        let Some(d) = dump.get(&r.offset) else {
            // perf leaves out of its dump the records it only uses for setting up.
            assert!(
                matches!(r.record, Record::Other { .. }),
                "record at {:#x} not in perf's dump: {:?}",
                r.offset,
                r.record
            );
            continue;
        };
        let mut ours = |kind: &'static str| {
            *seen.entry(kind).or_insert(0) += 1;
            kind
        };
        let time = r.sample.time.unwrap_or(0);
        let name = match r.record {
            Record::Mmap(m) => {
                let want = format!("[{:#x}({:#x}) @ ", m.start, m.len);
                assert!(d.text.contains(&want), "{d:?} vs {m:?}");
                assert!(
                    d.text.ends_with(&*String::from_utf8_lossy(m.path)),
                    "{d:?} vs {m:?}"
                );
                let pid = format!("{}/{}:", m.pid as i32, m.tid as i32);
                assert!(d.text.starts_with(&pid), "{d:?} vs {m:?}");
                ours(if d.name == "MMAP" { "MMAP" } else { "MMAP2" })
            }
            Record::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                let want = format!(
                    "{}{}:{pid}/{tid}",
                    if exec { "exec: " } else { ": " },
                    String::from_utf8_lossy(name)
                );
                assert_eq!(
                    d.text.trim_start_matches(':').trim(),
                    want.trim_start_matches(": ")
                );
                ours("COMM")
            }
            Record::Fork(t) | Record::Exit(t) => {
                let want = format!("({}:{}):({}:{})", t.pid, t.tid, t.ppid, t.ptid);
                assert_eq!(d.text, want);
                ours(if d.name == "FORK" { "FORK" } else { "EXIT" })
            }
            Record::Switch(s) => {
                assert_eq!(d.text.starts_with("OUT"), s.out, "{d:?} vs {s:?}");
                assert_eq!(d.text.contains("preempt"), s.preempt, "{d:?} vs {s:?}");
                ours(if d.name == "SWITCH" {
                    "SWITCH"
                } else {
                    "SWITCH_CPU_WIDE"
                })
            }
            Record::Lost { count, .. } => {
                assert!(d.text.ends_with(&format!("lost:{count}")), "{d:?}");
                ours("LOST")
            }
            Record::LostSamples { count } => {
                assert!(d.text.contains(&count.to_string()), "{d:?}");
                ours("LOST_SAMPLES")
            }
            Record::Auxtrace(a) => {
                let want = format!(
                    "size: {:#x}  offset: {:#x}  ref: {:#x}  idx: {}  tid: {}  cpu: {}",
                    a.data.len(),
                    a.offset,
                    a.reference,
                    a.idx,
                    a.tid as i32,
                    a.cpu as i32
                );
                assert_eq!(d.text.replace("offset: 0 ", "offset: 0x0 "), want);
                assert!(!a.truncated);
                ours("AUXTRACE")
            }
            Record::AuxtraceInfo(_) => ours("AUXTRACE_INFO"),
            Record::TimeConv(_) => ours("TIME_CONV"),
            Record::FinishedRound => ours("FINISHED_ROUND"),
            Record::Sample { .. } => {
                let tid = r.sample.tid.expect("sample tid");
                assert!(d.text.contains(&format!("/{tid}:")), "{d:?} vs tid {tid}");
                ours("SAMPLE")
            }
            Record::Other { .. } => continue,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(d.name, name, "type at {:#x}", r.offset);
        if !matches!(
            name,
            "AUXTRACE" | "AUXTRACE_INFO" | "TIME_CONV" | "FINISHED_ROUND"
        ) {
            assert_eq!(time, d.time, "time of {name} at {:#x}", r.offset);
        }
    }
    // Every record perf dumped is one the walk met.
    for (off, d) in &dump {
        assert!(
            offsets.binary_search(off).is_ok(),
            "perf dumped {} at {off:#x}, the walk did not meet it",
            d.name
        );
    }
    seen
}

#[test]
fn records_are_perfs_records() {
    if !perf_works() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pt = fixture(dir.path(), "pt/ptsim_gzip.perf.data.gz");
    let n = same_as_perf(&pt);
    assert_eq!(n.get("AUXTRACE"), Some(&1), "{n:?}");
    assert!(n.get("MMAP2").is_some_and(|&m| m >= 3), "{n:?}");
    let lost = fixture(dir.path(), "sampling/lost_records.perf.data.gz");
    let n = same_as_perf(&lost);
    assert!(
        n.contains_key("LOST") || n.contains_key("LOST_SAMPLES"),
        "{n:?}"
    );
    // A fresh recording: switches, forks, exits, exec'd names, samples with stacks.
    let fresh = dir.path().join("switch.data");
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "cpu-clock",
            "--switch-events",
            "-g",
            "-o",
        ])
        .arg(&fresh)
        .args([
            "--",
            "sh",
            "-c",
            "gzip -c /usr/bin/perf > /dev/null; ls / > /dev/null",
        ])
        .status()
        .expect("perf record");
    assert!(st.success());
    let n = same_as_perf(&fresh);
    for kind in ["SWITCH", "FORK", "EXIT", "COMM", "MMAP2", "SAMPLE"] {
        assert!(
            n.contains_key(kind),
            "no {kind} in a fresh recording: {n:?}"
        );
    }
    // The mappings the naming step uses: gzip's code, mapped by its process.
    let maps = PerfData::open(&fresh).expect("open").mappings();
    assert!(!maps.is_empty());
    assert!(
        maps.build_id("/usr/bin/gzip").is_some(),
        "perf records build ids of DSOs with samples"
    );
}

/// Cut anywhere, bytes flipped or zeroed anywhere: records then at most one error,
/// never a panic; a cut file gives the records before the cut.
#[test]
fn damaged_files_give_records_or_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pt = fixture(dir.path(), "pt/ptsim_gzip.perf.data.gz");
    let good = std::fs::read(&pt).expect("read");
    let walk = |bytes: Vec<u8>| -> Option<(Vec<u64>, usize)> {
        let data = PerfData::from_bytes(bytes, "damaged.perf.data").ok()?;
        let mut offsets = Vec::new();
        let mut errors = 0;
        for r in data.records() {
            match r {
                Ok(r) => {
                    assert_eq!(errors, 0, "a record after an error");
                    offsets.push(r.offset)
                }
                Err(e) => {
                    assert!(e.to_string().contains("perf.data record"), "{e}");
                    errors += 1
                }
            }
        }
        let _ = data.mappings();
        Some((offsets, errors))
    };
    let (all, errors) = walk(good.clone()).expect("the file itself");
    assert_eq!(errors, 0);
    let data_end = all.last().copied().expect("records") as usize;
    for cut in (0..good.len()).step_by(61).chain([data_end, data_end + 4]) {
        if let Some((offsets, _)) = walk(good[..cut].to_vec()) {
            assert!(all.starts_with(&offsets), "cut at {cut}");
            let complete = all.iter().filter(|&&o| (o as usize) + 8 <= cut).count();
            assert!(
                offsets.len() + 1 >= complete,
                "cut at {cut}: {} of {complete}",
                offsets.len()
            );
        }
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..600 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut b = good.clone();
        let at = (x as usize) % b.len();
        match i % 3 {
            0 => b[at] ^= 1 << (x >> 60 & 7),
            1 => b[at] = 0xff,
            _ => {
                let end = (at + 8).min(b.len());
                b[at..end].fill(0)
            }
        }
        let _ = walk(b);
    }
}
