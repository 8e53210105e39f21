//! Running an attack as another user (uid and gid 65534, `nobody`, no groups) while the
//! test, as root, runs ptscope: the scripts are `tests/attacks/*.sh` (see its README).
//! Included (`#[path]`) by the tests that run attacks.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The attacker's uid and gid.
pub const NOBODY: u32 = 65534;

/// True if attacks can run here (root, `setpriv`); otherwise a loud skip naming `what`,
/// or a failure under CI.
pub fn can_attack(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let why = if unsafe { libc::geteuid() } != 0 {
        Some("not root")
    } else if Command::new("setpriv").arg("--version").output().is_err() {
        Some("setpriv (util-linux) not found")
    } else {
        None
    };
    match why {
        None => true,
        Some(w) => {
            assert!(std::env::var_os("CI").is_none(), "{what}: {w}");
            eprintln!("!!!!!!!! SKIPPED {what}: {w}");
            false
        }
    }
}

/// The attack script `tests/attacks/NAME`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("repository root")
        .join("tests/attacks")
        .join(name)
}

/// `sh ARGS…` as the attacker.
fn sh_as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={NOBODY}"),
        &format!("--regid={NOBODY}"),
        "--clear-groups",
        "sh",
    ]);
    c
}

/// `sh tests/attacks/NAME ARGS…` as the attacker.
pub fn attack(name: &str, args: &[&Path]) -> Command {
    let mut c = sh_as_nobody();
    c.arg(script(name)).args(args);
    c
}

/// `sh -c SCRIPT` as the attacker (for a step too small for a script of its own).
pub fn as_nobody(script: &str) -> Command {
    let mut c = sh_as_nobody();
    c.args(["-c", script]);
    c
}

/// An attack running in the background, stopped when dropped (also when the test fails).
pub struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts [`attack`] in the background.
pub fn start(name: &str, args: &[&Path]) -> Running {
    Running(
        attack(name, args)
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("setpriv"),
    )
}

/// Runs [`attack`] to its end; it must succeed (the planting, not the attack's effect).
pub fn plant(name: &str, args: &[&Path]) {
    let o = attack(name, args).output().expect("setpriv");
    assert!(
        o.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

pub fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(uid)).expect("chown");
}

/// A scratch tree under `/tmp` itself (scripts/test's `TMPDIR` is private: the attacker
/// could not reach into it), which others may traverse; removed on drop.
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("scratch directory");
    chmod(d.path(), 0o755);
    d
}

/// A directory of the attacker's at `path` (mode 0755 unless `mode` says otherwise).
pub fn their_dir(path: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir(path).expect("mkdir");
    chown(path, NOBODY);
    chmod(path, mode);
    path.to_path_buf()
}

/// A shared library whose constructor writes `marker` (proof that its code ran, as
/// root wherever it was loaded), built at `so` and given to the attacker.
pub fn evil_library(so: &Path, marker: &Path) {
    let c = so.with_extension("c");
    std::fs::write(
        &c,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {{\n\
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"the attacker's code ran\\n\", f); fclose(f); }}\n}}\n\
             int qemu_plugin_version = 2;\nint qemu_plugin_install(void) {{ return 0; }}\n",
            marker.display()
        ),
    )
    .expect("write evil.c");
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(so)
        .arg(&c)
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc -shared failed");
    chown(so, NOBODY);
    chmod(so, 0o755);
}
