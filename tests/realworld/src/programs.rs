//! Building this crate's small programs (`programs/`) and the inputs the real tools work
//! on. Every build happens in the test's own temporary directory.

use crate::harness::{build, need_tool, programs};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `threads.c` with gcc (`-O2 -g -pthread`, frame pointers kept so `--callgraph fp` works).
pub fn threads_c(test: &str, dir: &Path) -> Option<PathBuf> {
    let gcc = need_tool(test, "gcc", "gcc")?;
    let exe = dir.join("threads");
    build(
        Command::new(gcc)
            .args(["-O2", "-g", "-pthread", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(programs().join("threads.c")),
    );
    Some(exe)
}

/// `sleeper.c` with gcc (`-O2 -g`): computes, sleeps 0.3 s in `sleeper`, computes.
pub fn sleeper_c(test: &str, dir: &Path) -> Option<PathBuf> {
    let gcc = need_tool(test, "gcc", "gcc")?;
    let exe = dir.join("sleeper");
    build(
        Command::new(gcc)
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(programs().join("sleeper.c")),
    );
    Some(exe)
}

/// `hits.c` with gcc (`-O1 -g`): calls `mid` three times, GAP seconds apart.
pub fn hits_c(test: &str, dir: &Path) -> Option<PathBuf> {
    let gcc = need_tool(test, "gcc", "gcc")?;
    let exe = dir.join("hits");
    build(
        Command::new(gcc)
            .args(["-O1", "-g", "-o"])
            .arg(&exe)
            .arg(programs().join("hits.c")),
    );
    Some(exe)
}

/// `throw.cpp` with g++ (`-O2 -g`, frame pointers kept; libstdc++ itself has none).
pub fn throw_cpp(test: &str, dir: &Path) -> Option<PathBuf> {
    let gxx = need_tool(test, "g++", "g++")?;
    let exe = dir.join("throw");
    build(
        Command::new(gxx)
            .args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(programs().join("throw.cpp")),
    );
    Some(exe)
}

/// `nofp.rs` with rustc at opt-level 3 and no frame pointers.
pub fn nofp_rs(test: &str, dir: &Path) -> Option<PathBuf> {
    // The rustc that builds this crate is on PATH (cargo runs the tests), not in /usr/bin.
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    if Command::new(&rustc).arg("--version").output().is_err() {
        crate::harness::skip(test, "rustc is not runnable");
        return None;
    }
    let exe = dir.join("nofp");
    build(
        Command::new(rustc)
            .args([
                "-C",
                "opt-level=3",
                "-C",
                "force-frame-pointers=no",
                "-g",
                "-o",
            ])
            .arg(&exe)
            .arg(programs().join("nofp.rs")),
    );
    Some(exe)
}

/// `gowork/` with `go build` (Go keeps frame pointers; its DWARF is in `.debug_frame`).
pub fn collatz_go(test: &str, dir: &Path) -> Option<PathBuf> {
    let go = need_tool(test, "go", "golang-go")?;
    let src = dir.join("gowork");
    std::fs::create_dir_all(&src).expect("create the Go module directory");
    for f in ["go.mod", "main.go"] {
        std::fs::copy(programs().join("gowork").join(f), src.join(f)).expect("copy the Go sources");
    }
    let exe = dir.join("collatz");
    build(
        Command::new(go)
            .current_dir(&src)
            .args(["build", "-o"])
            .arg(&exe)
            .arg(".")
            // No network, no toolchain download, and the build cache in the test's directory.
            .env("GOTOOLCHAIN", "local")
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .env("GOCACHE", dir.join("gocache"))
            .env("GOPATH", dir.join("gopath")),
    );
    Some(exe)
}

/// A deterministic text file of about `mb` MB: words and numbers, some lines repeated,
/// so sort, gzip and git all have real work to do.
pub fn text_file(path: &Path, mb: usize) {
    const WORDS: [&str; 12] = [
        "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
        "lambda", "mu",
    ];
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create the input"));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut written = 0;
    while written < mb << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let line = format!(
            "{} {} {} {}\n",
            WORDS[(x % 12) as usize],
            WORDS[((x >> 8) % 12) as usize],
            WORDS[((x >> 16) % 12) as usize],
            x % 1_000_000_007
        );
        written += line.len();
        f.write_all(line.as_bytes()).expect("write the input");
    }
    f.flush().expect("write the input");
}

/// A SQLite database with a table `t(a INTEGER, b TEXT)` of `rows` rows.
pub fn sqlite_db(sqlite3: &Path, path: &Path, rows: u32) {
    build(Command::new(sqlite3).arg(path).arg(format!(
        "CREATE TABLE t(a INTEGER, b TEXT); \
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows}) \
         INSERT INTO t SELECT x, hex(randomblob(16)) FROM c;"
    )));
}

/// A git repository in `dir` with one commit holding `big.txt`, configured by
/// environment only (no user or system configuration is read).
pub fn git_repo(git: &Path, dir: &Path) {
    std::fs::create_dir_all(dir).expect("create the repository directory");
    text_file(&dir.join("big.txt"), 3);
    for args in [
        &["init", "-q"][..],
        &["add", "big.txt"],
        &["commit", "-q", "-m", "one"],
    ] {
        build(git_cmd(git, dir).args(args));
    }
}

/// `git` in `dir`, isolated from the user's and the system's configuration.
pub fn git_cmd(git: &Path, dir: &Path) -> Command {
    let mut c = Command::new(git);
    c.current_dir(dir);
    git_env(&mut c);
    c
}

/// The environment that isolates git from the user's and the system's configuration.
pub fn git_env(c: &mut Command) {
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .env("GIT_PAGER", "cat");
}
