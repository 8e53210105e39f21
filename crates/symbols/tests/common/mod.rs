//! Helpers shared by the integration tests: tool discovery, temp dirs, building and running
//! small programs that print their own function addresses.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

/// The tool's path, or `None` after a loud skip message; with `CI` set a missing tool fails.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!("`{name}` is required when CI is set, but is not on PATH");
        }
        // Straight to fd 2: the harness captures `eprintln!`, which would hide the skip.
        let _ = writeln!(
            std::io::stderr(),
            "!!! SKIPPING: `{name}` not found on PATH (set CI=1 to make this a failure)"
        );
    }
    found
}

/// A private temporary directory (random name), removed on drop, also when the test fails.
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let d = tempfile::Builder::new()
            .prefix(&format!("ptscope-symbols-{tag}-"))
            .tempdir()
            .expect("create temp dir");
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.path().join(name);
        std::fs::write(&p, text).expect("write source");
        p
    }
}

/// Runs a command and panics with its output if it fails.
pub fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running test program that printed `name 0xADDR` lines, then `ready`, and now waits
/// for its stdin to close.
pub struct Running {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub addrs: HashMap<String, u64>,
}

impl Running {
    pub fn start(exe: &Path) -> Self {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", exe.display()));
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut addrs = HashMap::new();
        for line in out.lines() {
            let line = line.expect("read program output");
            if line == "ready" {
                break;
            }
            let (k, v) = line.split_once(' ').expect("`name addr` line");
            let v = v.trim_start_matches("0x");
            addrs.insert(
                k.to_owned(),
                u64::from_str_radix(v, 16).expect("hex address"),
            );
        }
        Running {
            child,
            stdin,
            addrs,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn addr(&self, name: &str) -> u64 {
        *self
            .addrs
            .get(name)
            .unwrap_or_else(|| panic!("program did not print `{name}`"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// The 1-based line of the first line of `src` containing `marker`.
pub fn line_of(src: &str, marker: &str) -> u64 {
    src.lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("marker {marker} not in source")) as u64
        + 1
}
