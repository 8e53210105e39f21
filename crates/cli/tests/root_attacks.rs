//! The four holes of issue 23, each as the attack another user (uid 65534) makes on a
//! root who runs ptscope where that user can write: the attack scripts are
//! `tests/attacks/*.sh`, run with `setpriv` while the test, as root, runs ptscope.
//! Each test failed on the tree before the fix (the rules they hold are in
//! `docs/security.md`). Needs root, setpriv, and perf or qemu; skips loudly otherwise
//! (fails under CI).

#[path = "../../../tests/attacker.rs"]
mod attacker;
#[path = "common/emulate.rs"]
mod emulate;
#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures_dir;
#[path = "common/perf_env.rs"]
mod perf_env;

use attacker::*;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn ptscope() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ptscope"));
    c.stdin(Stdio::null());
    c
}

fn out(c: &mut Command) -> (Output, String) {
    let o = c.output().expect("run ptscope");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o, err)
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Lets the attacker's reader of `fifo` finish (EOF), whether or not root opened it.
fn release(fifo: &Path) {
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}

/// Waits (a few seconds at most) for the attacker's reader to have written `stolen`.
fn stolen_bytes(stolen: &Path) -> u64 {
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::fs::metadata(stolen).map(|m| m.len()).unwrap_or(0)
}

/// Hole 1: a link to a fifo the attacker reads, where root's trace goes (the default
/// `-o trace.fxt.gz` of `decode --perf-script` in their directory): root's trace went to
/// them, exit 0. Also a fifo at the name, a link to a device, `mem strip-names -o`,
/// `run -o`; and a link at `NAME.old` is replaced, never written through.
#[test]
fn outputs_never_go_through_links_fifos_or_devices() {
    if !can_attack("outputs_never_go_through_links_fifos_or_devices") {
        return;
    }
    let top = scratch("ptscope-attack-output-");
    let theirs = their_dir(&top.path().join("theirs"), 0o777);
    let input = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    let stolen = theirs.join("stolen");

    // decode's default output, through their link to their fifo.
    plant(
        "output_trap.sh",
        &[&theirs, Path::new("trace.fxt.gz"), &stolen],
    );
    let (o, err) = out(ptscope()
        .current_dir(&theirs)
        .args(["decode", "--perf-script"])
        .arg(&input));
    release(&theirs.join(".pipe-trace.fxt.gz"));
    assert!(!o.status.success(), "root wrote through the link: {err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(stolen_bytes(&stolen), 0, "the attacker read root's trace");

    // A fifo at the name itself (nobody reading: opening it would hang).
    let fifo = theirs.join("fifo.fxt.gz");
    let st = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "mkfifo"])
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(st.success());
    let (o, err) = out(ptscope()
        .args(["decode", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&fifo));
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("fifo") && err.contains("-o -"), "{err}");

    // A link to a device (a stand-in for their pick, e.g. /dev/loop0), for decode and
    // for run (refused before anything runs).
    let dev = theirs.join("dev.fxt.gz");
    std::os::unix::fs::symlink("/dev/null", &dev).expect("symlink");
    chown(&dev, NOBODY);
    for (args, rest) in [
        (
            vec!["decode", "--perf-script", input.to_str().expect("utf8")],
            vec![],
        ),
        (vec!["run"], vec!["--", "/bin/true"]),
    ] {
        let (o, err) = out(ptscope().args(&args).arg("-o").arg(&dev).args(&rest));
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
    }

    // mem strip-names --output, through their link to their fifo.
    let stolen2 = theirs.join("stolen2");
    plant("output_trap.sh", &[&theirs, Path::new("s.ctf"), &stolen2]);
    let ctf = fixtures_dir::fixtures_dir().join("memtrace/wrap.ctf");
    let (o, err) = out(ptscope()
        .args(["mem", "strip-names"])
        .arg(&ctf)
        .arg("-o")
        .arg(theirs.join("s.ctf")));
    release(&theirs.join(".pipe-s.ctf"));
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(stolen_bytes(&stolen2), 0, "the attacker read root's output");

    // A link at NAME.old to a file of root's: replaced by the old trace, never written.
    let victim = top.path().join("victim");
    std::fs::write(&victim, "root's file\n").expect("victim");
    let t = theirs.join("t.fxt.gz");
    std::fs::write(&t, "their old trace").expect("old trace");
    chown(&t, NOBODY);
    let old = theirs.join("t.fxt.gz.old");
    std::os::unix::fs::symlink(&victim, &old).expect("symlink");
    chown(&old, NOBODY);
    let (o, err) = out(ptscope()
        .args(["decode", "--quiet", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&t));
    assert!(o.status.success(), "{err}");
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "root's file\n"
    );
    assert!(!std::fs::symlink_metadata(&old)
        .expect(".old")
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read_to_string(&old).expect(".old"),
        "their old trace"
    );

    // Nothing else was left in their directory (no temporary file), the traps intact.
    assert_eq!(
        listing(&theirs),
        [
            ".pipe-s.ctf",
            ".pipe-trace.fxt.gz",
            "dev.fxt.gz",
            "fifo.fxt.gz",
            "s.ctf",
            "stolen",
            "stolen2",
            "t.fxt.gz",
            "t.fxt.gz.old",
            "trace.fxt.gz"
        ]
    );
    assert!(std::fs::symlink_metadata(&fifo)
        .expect("fifo")
        .file_type()
        .is_fifo());
}

/// True if attacks can run here and root's perf can record (else a loud skip of `what`).
fn can_attack_with_perf(what: &str) -> bool {
    can_attack(what) && perf_env::perf_usable(what)
}

/// A directory of root's at `path` with `mode`.
fn root_dir(path: &Path, mode: u32) -> PathBuf {
    std::fs::create_dir(path).expect("mkdir");
    chmod(path, mode);
    path.to_path_buf()
}

/// A small sampling recording, made by root in a directory of root's.
fn recording(dir: &Path) -> PathBuf {
    let data = dir.join("perf.data");
    perf_env::record_shell_loop(&data, 100_000, &["-c", "100000"]);
    data
}

/// Hole 2: with `TMPDIR` a non-sticky 0777 directory, the attacker renamed the
/// dlfilter's private directory away and made their own in its place: perf loaded their
/// library as root in 3 of 5 decodes. Now perf loads a sealed memfd of ptscope's: there
/// is nothing in `TMPDIR` to rename.
#[test]
fn the_dlfilter_cannot_be_swapped_in_a_tmpdir_others_can_write() {
    if !can_attack_with_perf("the_dlfilter_cannot_be_swapped_in_a_tmpdir_others_can_write") {
        return;
    }
    let top = scratch("ptscope-attack-dlf-");
    let data = recording(top.path());
    let tmp = root_dir(&top.path().join("tmp"), 0o777);
    let theirs = their_dir(&top.path().join("theirs"), 0o755);
    let marker = top.path().join("marker");
    let evil = theirs.join("evil.so");
    evil_library(&evil, &marker);
    let seen = theirs.join("seen.log");
    let swapper = start(
        "swap_dlfilter_dir.sh",
        &[&tmp, &evil, &seen, Path::new("120")],
    );
    let mut failures = Vec::new();
    for i in 0..5 {
        let (o, err) = out(ptscope()
            .env("TMPDIR", &tmp)
            .args(["decode", "--quiet", "--decoder", "dlfilter"])
            .arg(&data)
            .arg("-o")
            .arg(top.path().join(format!("t{i}.fxt"))));
        if !o.status.success() {
            failures.push(err);
        }
    }
    drop(swapper);
    assert!(
        !marker.exists(),
        "perf loaded the attacker's library as root"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap_or_default(),
        "",
        "the filter sat in TMPDIR, where the attacker could rename it away"
    );
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(listing(&tmp), Vec::<String>::new(), "left in TMPDIR");
}

/// Hole 3: the attacker's link `rec` pointed at a private directory of root's when
/// root's `-w` check ran, then at their own 0777 directory: recording files landed there
/// in 10 of 22 runs. Now a link given as `-w` is refused, every directory above it must
/// be out of other users' reach too, and only the resolved path is used; the same for
/// the default working directory in `TMPDIR`.
#[test]
fn a_working_directory_cannot_be_swapped_after_the_check() {
    if !can_attack_with_perf("a_working_directory_cannot_be_swapped_after_the_check") {
        return;
    }
    let top = scratch("ptscope-attack-w-");
    let roots = root_dir(&top.path().join("root-rec"), 0o700);
    let theirs = their_dir(&top.path().join("theirs"), 0o755);
    let mine = their_dir(&theirs.join("mine"), 0o777);
    let rec = theirs.join("rec");
    let record = |w: &Path| {
        out(ptscope()
            .args(["run", "--no-decode", "--callgraph", "fp", "-w"])
            .arg(w)
            .args(["--", "/bin/true"]))
    };
    // The link, pointing at root's private directory: refused.
    plant("flip_link.sh", &[&rec, &roots, &mine, Path::new("0")]);
    let (o, err) = record(&rec);
    assert!(!o.status.success(), "a linked -w was used: {err}");
    assert!(err.contains("symbolic link"), "{err}");
    // And while it flips.
    let flipper = start("flip_link.sh", &[&rec, &roots, &mine, Path::new("60")]);
    for _ in 0..5 {
        let (o, err) = record(&rec);
        assert!(!o.status.success(), "a linked -w was used: {err}");
    }
    drop(flipper);
    assert_eq!(
        listing(&mine),
        Vec::<String>::new(),
        "files landed in theirs"
    );
    assert_eq!(listing(&roots), Vec::<String>::new());
    // A private directory of root's inside theirs: they could rename it away.
    let inside = root_dir(&theirs.join("real"), 0o700);
    let (o, err) = record(&inside);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("belongs to user 65534"), "{err}");
    // A new private directory below one of root's is created and used.
    let (o, err) = record(&roots.join("new/rec"));
    assert!(o.status.success(), "{err}");
    assert!(roots.join("new/rec/perf.log").is_file(), "{err}");
    // The default working directory: TMPDIR writable by others, not sticky.
    let open_tmp = root_dir(&top.path().join("tmp"), 0o777);
    let (o, err) = out(ptscope().env("TMPDIR", &open_tmp).args([
        "run",
        "--no-decode",
        "--callgraph",
        "fp",
        "--",
        "/bin/true",
    ]));
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("not sticky"), "{err}");
    assert_eq!(listing(&open_tmp), Vec::<String>::new());
}

/// Hole 4: `PTSCOPE_EMULATE_PLUGIN` through the attacker's link, pointing at a genuine
/// plugin of root's when checked, then at their library: it ran as root in 2 of 10
/// runs. Now every directory above the plugin must be out of other users' reach, and
/// qemu loads the very file checked (`/proc/PID/fd/N`).
#[test]
fn the_emulate_plugin_qemu_loads_is_the_one_checked() {
    if !can_attack("the_emulate_plugin_qemu_loads_is_the_one_checked") {
        return;
    }
    let Some(plugin) = emulate::plugin() else {
        return;
    };
    let top = scratch("ptscope-attack-plugin-");
    let good = top.path().join("good/lib");
    std::fs::create_dir_all(&good).expect("mkdir");
    std::fs::copy(&plugin, good.join("libptsim_plugin.so")).expect("copy plugin");
    chmod(&good.join("libptsim_plugin.so"), 0o644);
    let theirs = their_dir(&top.path().join("theirs"), 0o755);
    let evil_lib = their_dir(&their_dir(&theirs.join("evil"), 0o755).join("lib"), 0o755);
    let marker = top.path().join("marker");
    evil_library(&evil_lib.join("libptsim_plugin.so"), &marker);
    let link = theirs.join("x");
    let via = link.join("lib/libptsim_plugin.so");
    let run = |plugin: &Path| {
        out(ptscope()
            .env("PTSCOPE_EMULATE_PLUGIN", plugin)
            .args(["run", "--backend", "emulate", "-o"])
            .arg(top.path().join("t.fxt"))
            .args(["--", "/bin/true"]))
    };
    // Through their link, leading to root's genuine plugin: refused.
    plant(
        "flip_link.sh",
        &[
            &link,
            &top.path().join("good"),
            &theirs.join("evil"),
            Path::new("0"),
        ],
    );
    let (o, err) = run(&via);
    assert!(
        !o.status.success(),
        "a plugin below their link was loaded: {err}"
    );
    assert!(err.contains("belongs to user 65534"), "{err}");
    // And while it flips.
    let flipper = start(
        "flip_link.sh",
        &[
            &link,
            &top.path().join("good"),
            &theirs.join("evil"),
            Path::new("60"),
        ],
    );
    for _ in 0..5 {
        let (o, err) = run(&via);
        assert!(!o.status.success(), "{err}");
    }
    drop(flipper);
    // Their library named directly.
    let (o, err) = run(&evil_lib.join("libptsim_plugin.so"));
    assert!(!o.status.success(), "{err}");
    assert!(!marker.exists(), "the attacker's plugin ran as root");
    // Root's own copy, named directly, still runs.
    let (o, err) = run(&good.join("libptsim_plugin.so"));
    assert!(o.status.success(), "{err}");
}
