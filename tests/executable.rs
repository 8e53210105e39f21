//! Writing a script a test then runs (a stand-in perf, a shim), included (`#[path]`) by
//! the tests that need one.
//!
//! Why not `fs::write` then `chmod`: a test binary runs its tests on many threads. If a
//! sibling test forks (to run perf, a compiler, ptscope) while this thread still has the
//! script open for writing, the child inherits that descriptor, and exec'ing the script
//! then fails with ETXTBSY ("Text file busy") until the child execs or exits. Here the
//! bytes go to a side file, and a child process (`install`) creates the executable
//! itself, so this process never holds the executable open for writing.

use std::path::Path;
use std::process::Command;

/// Creates `path` as an executable (mode 755) holding `contents`.
pub fn write_executable(path: &Path, contents: impl AsRef<[u8]>) {
    let mut side = path.as_os_str().to_owned();
    side.push(".src");
    let side = std::path::PathBuf::from(side);
    std::fs::write(&side, contents)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", side.display()));
    let out = Command::new("install")
        .arg("-m")
        .arg("755")
        .arg(&side)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run install: {e}"));
    assert!(
        out.status.success(),
        "install -m 755 {} {} failed: {}",
        side.display(),
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&side);
}
