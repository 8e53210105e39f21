//! No command leaves a partial file at its output path: an input error leaves the
//! previous output (or none), and a process killed while writing leaves the previous
//! output in place rather than a truncated one.

use memtrace::{AllocSource, OwnedLocation, TraceInfo, Writer};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/memtrace")
}

fn ptscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptscope"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run ptscope")
}

/// Names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

const PREVIOUS: &[u8] = b"the previous output, which must survive";

/// A memtrace trace whose 11th of 18 packets is corrupt: the tools fail half-way.
fn corrupt_ctf(dir: &Path) -> PathBuf {
    let mut data = std::fs::read(fixtures().join("multi.ctf")).expect("fixture");
    let magic = memtrace::MAGIC.to_le_bytes();
    let packets: Vec<usize> = (0..data.len() - 4)
        .filter(|&i| data[i..i + 4] == magic)
        .collect();
    assert!(packets.len() > 4, "multi.ctf has {} packets", packets.len());
    data[packets[packets.len() / 2]] ^= 0xff;
    let path = dir.join("corrupt.ctf");
    std::fs::write(&path, data).expect("write");
    path
}

#[test]
fn mem_tools_failing_half_way_leave_no_partial_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = corrupt_ctf(dir.path());
    let out = dir.path().join("out.ctf");
    // (tool, arguments after the input)
    let tools: [(&str, &[&str]); 2] = [("strip-names", &[]), ("subsample", &["2"])];
    for tool in tools {
        for previous in [false, true] {
            if previous {
                std::fs::write(&out, PREVIOUS).expect("previous");
            }
            let o = run(ptscope()
                .args(["mem", tool.0])
                .arg(&bad)
                .args(tool.1)
                .arg("-o")
                .arg(&out));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "{tool:?} accepted a corrupt trace");
            assert!(err.contains("not a CTF packet"), "{tool:?}: {err}");
            if previous {
                assert_eq!(std::fs::read(&out).expect("out"), PREVIOUS, "{tool:?}");
                assert_eq!(listing(dir.path()), ["corrupt.ctf", "out.ctf"], "{tool:?}");
                std::fs::remove_file(&out).expect("rm");
            } else {
                assert_eq!(listing(dir.path()), ["corrupt.ctf"], "{tool:?}: {err}");
            }
        }
    }
}

#[test]
fn mem_tools_can_rewrite_a_trace_in_place() {
    // Output = input: the input is read whole before the result replaces it.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.ctf");
    std::fs::copy(fixtures().join("ocamlopt_v3.ctf"), &path).expect("copy");
    let o = run(ptscope()
        .args(["mem", "subsample"])
        .arg(&path)
        .args(["1", "-o"])
        .arg(&path));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want = std::fs::read(fixtures().join("ocamlopt_v3.ctf")).expect("fixture");
    assert!(std::fs::read(&path).expect("read") == want);
    assert_eq!(listing(dir.path()), ["t.ctf"]);
}

/// A memtrace trace of `allocs` allocations under a few hundred backtraces.
fn big_ctf(path: &Path, allocs: usize) {
    let start = 1_700_000_000_000_000;
    let info = TraceInfo {
        sample_rate: 1e-4,
        word_size: 64,
        executable_name: b"/usr/bin/bigprog".to_vec(),
        host_name: b"host".to_vec(),
        ocaml_runtime_params: Vec::new(),
        pid: 4242,
        initial_domain: 0,
        start_time: start,
        context: None,
    };
    let out = BufWriter::new(File::create(path).expect("create"));
    let mut w = Writer::new(out, &info).expect("writer");
    let mut locations = |code: u64| {
        vec![OwnedLocation {
            filename: format!("src/file{}.ml", code % 17).into_bytes(),
            defname: format!("Module{}.function_{code}", code % 5).into_bytes(),
            line: code as i64,
            start_char: 2,
            end_char: 30,
        }]
    };
    for i in 0..allocs {
        let x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let bt = [
            1,
            2 + x % 7,
            10 + (x >> 8) % 13,
            30 + (x >> 16) % 97,
            200 + (x >> 24) % 211,
        ];
        w.put_alloc(
            start + i as i64,
            0,
            1 + (x >> 40) as i64 % 300,
            1,
            AllocSource::Minor,
            &bt,
            &mut locations,
        )
        .expect("alloc");
    }
    w.finish().expect("finish").flush().expect("flush");
}

/// Runs `cmd` and kills it (SIGKILL) once it is writing `target` in `dir`: its
/// temporary file has data, or (a non-atomic writer) `target` no longer holds
/// [`PREVIOUS`]; false if it finished first.
fn kill_while_writing(cmd: &mut Command, dir: &Path, target: &str) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let prefix = format!(".{target}.");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return false;
        }
        let writing = std::fs::read_dir(dir).expect("read_dir").any(|e| {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            let len = e.metadata().map_or(0, |m| m.len());
            (name.starts_with(&prefix) && len > 0)
                || (name == target && len != PREVIOUS.len() as u64)
        });
        if writing || Instant::now() > deadline {
            child.kill().expect("kill");
            child.wait().expect("wait");
            return writing;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn killed_mem_tools_leave_the_previous_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("big.ctf");
    big_ctf(&input, 1_500_000);
    let out = dir.path().join("out.ctf");
    let tools: [(&str, &[&str]); 2] = [("strip-names", &[]), ("subsample", &["1"])];
    for tool in tools {
        std::fs::write(&out, PREVIOUS).expect("previous");
        let caught = kill_while_writing(
            ptscope()
                .args(["mem", tool.0])
                .arg(&input)
                .args(tool.1)
                .arg("-o")
                .arg(&out),
            dir.path(),
            "out.ctf",
        );
        assert!(
            caught,
            "{tool:?} finished before it could be killed: make the input bigger"
        );
        assert_eq!(std::fs::read(&out).expect("out"), PREVIOUS, "{tool:?}");
    }
}

/// `perf script` text of `samples` cpu-clock samples on four threads whose stacks
/// change at every sample, so the trace has several slices per sample.
fn big_perf_script(path: &Path, samples: usize) {
    let mut w = BufWriter::new(File::create(path).expect("create"));
    for i in 0..samples {
        let tid = 100 + i % 4;
        let t = 1_000_000_000 + i as u64 * 10_000;
        writeln!(
            w,
            "{tid}/{tid} {}.{:09}: 250000 cpu-clock:",
            t / 1_000_000_000,
            t % 1_000_000_000
        )
        .expect("write");
        let x = (i as u64 / 4).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for depth in (0..10u64).rev() {
            let f = if depth < 4 {
                depth
            } else {
                depth * 10 + (x >> (depth * 3)) % 5
            };
            writeln!(
                w,
                "\t{:x} function_{f}+0x10 (/usr/bin/bigprog)",
                0x40_0000 + f * 0x100
            )
            .expect("write");
        }
        writeln!(w).expect("write");
    }
    w.flush().expect("flush");
}

#[test]
fn a_killed_decode_leaves_no_truncated_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("big.txt");
    big_perf_script(&input, 400_000);
    let out = dir.path().join("trace.fxt.gz");
    let old = dir.path().join("trace.fxt.gz.old");
    std::fs::write(&out, PREVIOUS).expect("previous");
    let caught = kill_while_writing(
        ptscope()
            .args(["decode", "--quiet", "--perf-script"])
            .arg(&input)
            .arg("-o")
            .arg(&out),
        dir.path(),
        "trace.fxt.gz",
    );
    assert!(
        caught,
        "decode finished before it could be killed: make the input bigger"
    );
    // The previous trace is still at the path (or kept aside as .old), never truncated.
    match std::fs::read(&out) {
        Ok(data) => assert_eq!(data, PREVIOUS, "a truncated trace at the output path"),
        Err(_) => assert_eq!(
            std::fs::read(&old).expect("the previous trace is gone"),
            PREVIOUS
        ),
    }
}
