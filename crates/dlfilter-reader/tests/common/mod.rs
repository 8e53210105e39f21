//! Helpers for tests that record with the real perf.

#![allow(dead_code)]

#[path = "../../../../tests/executable.rs"]
pub mod executable;

use ptscope_event::{Event, EventData, Location, StringTable};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The test program: a three-deep call tree that burns CPU in `leaf`.
pub const PROG_C: &str = r#"
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) long leaf(long n){ long s=0; for(long i=0;i<n;i++) s+=i*i; return s; }
__attribute__((noinline)) long mid(long n){ return leaf(n)+leaf(n/2); }
__attribute__((noinline)) long top(long n){ long s=0; for(int i=0;i<4;i++) s+=mid(n); return s; }
int main(int argc,char**argv){ long it = argc>1?atol(argv[1]):200; for(long k=0;k<it;k++) sink+=top(20000); return 0; }
"#;

/// True if perf and root are here; otherwise skips loudly, or panics under `CI`.
pub fn perf_usable(test: &str) -> bool {
    let perf_ok = Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let gcc_ok = Command::new("gcc")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { geteuid() } == 0;
    if perf_ok && gcc_ok && root {
        return true;
    }
    let why =
        format!("{test}: needs perf, gcc and root (perf {perf_ok}, gcc {gcc_ok}, root {root})");
    if std::env::var_os("CI").is_some() {
        panic!("{why}");
    }
    eprintln!("SKIPPED {why}");
    false
}

extern "C" {
    fn geteuid() -> u32;
}

/// A fresh private scratch directory under the system temp dir, removed on drop.
pub fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ptscope-test-{name}-"))
        .tempdir()
        .expect("scratch dir")
}

/// Builds the test program (non-PIE, so breakpoint addresses are fixed).
pub fn build_prog(dir: &Path, name: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, PROG_C).expect("write source");
    let exe = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O0", "-fno-omit-frame-pointer", "-no-pie", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    exe
}

/// Address of a function in a non-PIE executable.
pub fn symbol_addr(exe: &Path, sym: &str) -> u64 {
    let out = Command::new("nm").arg(exe).output().expect("nm");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == sym).then(|| u64::from_str_radix(f[0], 16).ok())?
        })
        .expect("symbol in nm output")
}

/// Runs `perf record -o OUT ARGS -- CMD…` and checks it worked.
pub fn record(out: &Path, args: &[&str], cmd: &[&str]) {
    let o = Command::new("perf")
        .arg("record")
        .arg("--no-buildid-cache")
        .arg("-q")
        .arg("-o")
        .arg(out)
        .args(args)
        .arg("--")
        .args(cmd)
        .output()
        .expect("perf record");
    assert!(
        o.status.success() && out.exists(),
        "perf record {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Removes a uprobe group even if the test fails.
pub struct ProbeGuard(pub String);

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        let _ = Command::new("perf")
            .args(["probe", "-q", "-d", &format!("{}:*", self.0)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn loc(l: &Location, s: &StringTable) -> String {
    let dso = l.dso.map_or("-", |d| s.get(d));
    let sym = s.display(l.symbol).to_string();
    format!("{:x} {sym}+{:x} ({dso})", l.ip, l.offset)
}

/// An event with its names spelled out, so streams with different tables compare.
pub fn norm(e: &Event, s: &StringTable) -> String {
    match e {
        Event::DecodeError {
            thread,
            time,
            ip,
            message,
        } => format!("ERR {thread:?} {time:?} {ip:?} {}", s.get(*message)),
        Event::Ok {
            thread,
            time,
            data,
            in_transaction,
        } => {
            let d = match data {
                EventData::Trace {
                    change,
                    kind,
                    src,
                    dst,
                } => format!(
                    "TRACE {change:?} {kind:?} {} => {}",
                    loc(s.location(*src), s),
                    loc(s.location(*dst), s)
                ),
                EventData::Power { freq_mhz } => format!("POWER {freq_mhz}"),
                EventData::StackSample { callstack } => {
                    let f: Vec<String> = s.stack(*callstack).map(|l| loc(l, s)).collect();
                    format!("STACK [{}]", f.join(" / "))
                }
                EventData::SwitchOutStack { callstack } => {
                    let f: Vec<String> = s.stack(*callstack).map(|l| loc(l, s)).collect();
                    format!("SWITCH-OUT STACK [{}]", f.join(" / "))
                }
                EventData::EventSample {
                    location,
                    count,
                    name,
                } => format!("EXTRA {} {count} {name:?}", loc(location, s)),
                EventData::Ptwrite { location, data } => {
                    format!("PTWRITE {} {data:x}", loc(location, s))
                }
                EventData::Comm { name, exec } => format!("COMM {:?} exec={exec}", s.get(*name)),
                EventData::Fork { parent } => format!("FORK from {parent:?}"),
                EventData::Switch { out, preempt } => format!("SWITCH out={out} preempt={preempt}"),
            };
            format!("{thread:?} {time} {in_transaction} {d}")
        }
    }
}

/// A `perf` wrapper whose dlfilter stream gets a record of unknown type inserted at the
/// byte offset written in `DIR/cut`; without that file it saves the stream to
/// `DIR/full` untouched (so the test can choose a record boundary).
pub fn corrupting_perf(dir: &Path) -> PathBuf {
    let p = dir.join("corrupting-perf");
    let d = dir.display();
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = --version ]; then echo "perf version 6.1.0"; exit 0; fi
for a in "$@"; do
  if [ "$a" = --dlfilter ]; then
    perf "$@" > "{d}/stream" || exit $?
    if [ ! -f "{d}/cut" ]; then cp "{d}/stream" "{d}/full"; cat "{d}/stream"; exit 0; fi
    n=$(cat "{d}/cut")
    head -c "$n" "{d}/stream"
    printf '\000\143\000\000\000\000'
    tail -c +$((n + 1)) "{d}/stream"
    exit 0
  fi
done
exec perf "$@"
"#
    );
    executable::write_executable(&p, script);
    p
}

/// The offset of the first record or line boundary at or after `at` in a dlfilter stream.
pub fn boundary_after(stream: &[u8], at: usize) -> usize {
    let mut i = 0;
    while i < stream.len() && i < at {
        if stream[i] == 0 {
            let len = u32::from_le_bytes(stream[i + 2..i + 6].try_into().expect("4 bytes"));
            i += 6 + len as usize;
        } else {
            i += stream[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(stream.len() - i, |p| p + 1);
        }
    }
    i
}
