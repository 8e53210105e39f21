//! Helpers for tests that record programs: tool checks, the plugin, temporary directories.

use crate::blocklog::BlockLog;
use crate::shadow::ShadowStats;
use crate::{run_with_plugin, RunOutput, SimConfig, Simulation};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// True when every tool is on `PATH`. When one is missing, tests should skip — except under
/// CI (`CI` set), where a missing tool is a broken setup and this panics.
pub fn tools_available(tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("required tools missing under CI: {missing:?} (see scripts/test)");
    }
    eprintln!("skipping: tools not installed: {missing:?}");
    false
}

/// The plugin built by this test process, once: cargo is asked on the first call.
static BUILD: Mutex<Option<PathBuf>> = Mutex::new(None);

/// The plugin library: `$PTSIM_PLUGIN`, else built (or found up to date) with cargo,
/// once per test process.
///
/// Always asking cargo, never taking a library found beside the test binary: a library
/// built earlier from older plugin sources was used as it was, so a local test run
/// silently tested an old plugin. The build goes to its own target directory: the
/// `cargo test` running this holds the lock on the main one.
pub fn plugin() -> Result<PathBuf> {
    let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = std::env::var_os("PTSIM_PLUGIN") {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = built.as_ref() {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe().context("cannot locate the test binary")?;
    // target/<profile>/deps/test-binary -> target/ptsim-plugin
    let target = exe
        .ancestors()
        .nth(3)
        .context("test binary is not inside a cargo target directory")?
        .join("ptsim-plugin");
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/ptsim-plugin/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--offline", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .context("cannot run cargo to build the plugin")?;
    if !status.success() {
        bail!("building ptsim-plugin failed");
    }
    let lib = target.join("release/libptsim_plugin.so");
    if lib.is_file() {
        *built = Some(lib.clone());
        Ok(lib)
    } else {
        bail!("ptsim-plugin built but {} is missing", lib.display())
    }
}

/// A fresh, private directory for one test's files, removed when the guard drops (also when
/// the test fails); `TempDir::keep` keeps it for a look afterwards.
pub fn scratch_dir(name: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("ptsim-{name}-"))
        .tempdir()
        .with_context(|| format!("cannot create a temporary directory for {name}"))
}

/// Compiles `source` (C, C++ or Rust, by the compiler given) into `dir/name`.
pub fn compile(dir: &Path, name: &str, file: &str, source: &str, cmd: &[&str]) -> Result<PathBuf> {
    let src = dir.join(file);
    std::fs::write(&src, source).with_context(|| format!("cannot write {}", src.display()))?;
    let out = dir.join(name);
    let Some((prog, args)) = cmd.split_first() else {
        bail!("empty compiler command");
    };
    let res = Command::new(prog)
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .current_dir(dir)
        .output()
        .with_context(|| format!("cannot run {prog}"))?;
    if !res.status.success() {
        bail!("{prog} failed: {}", String::from_utf8_lossy(&res.stderr));
    }
    Ok(out)
}

/// Records `argv` into `dir/perf.data` with the truth files beside it.
pub fn record(dir: &Path, argv: &[&Path], cfg: &SimConfig) -> Result<RunOutput> {
    let plugin = plugin()?;
    let argv: Vec<OsString> = argv.iter().map(|p| p.as_os_str().to_owned()).collect();
    let out = run_with_plugin(&plugin, &argv, &dir.join("perf.data"), cfg, false)?;
    check_true_stacks(dir, &out.sim)?;
    Ok(out)
}

/// Checks the true stacks of every thread of a recording in `dir` against a name-free
/// shadow stack ([`crate::shadow::check`]); every recording [`record`] makes is checked.
pub fn check_true_stacks(dir: &Path, sim: &Simulation) -> Result<Vec<ShadowStats>> {
    let log = BlockLog::read(&dir.join("ptsim-blocks.log"))?;
    let syms = crate::truth_symbols(sim, &log, &dir.join("perf.data"))?;
    let dso = |a: u64| sim.dso_at(a);
    let mut all = Vec::with_capacity(sim.traces.len());
    for t in &sim.traces {
        all.push(crate::shadow::check(t, &syms, &dso).context("the true stacks are wrong")?);
    }
    Ok(all)
}

/// Function addresses from `nm` for a non-PIE executable, by name.
pub fn symbols(exe: &Path) -> Result<std::collections::HashMap<String, u64>> {
    let out = Command::new("nm")
        .arg(exe)
        .output()
        .context("cannot run nm (binutils)")?;
    let mut map = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [addr, kind, name] = f[..] {
            if kind.eq_ignore_ascii_case("t") {
                if let Ok(a) = u64::from_str_radix(addr, 16) {
                    map.insert(name.to_string(), a);
                }
            }
        }
    }
    Ok(map)
}
