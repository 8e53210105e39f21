//! Outputs appear atomically: a full disk, an error or an unfinished writer (a kill)
//! leaves the target as it was (absent, or the previous trace) and no temporary file.

use ptscope_output::{open_trace_output, read_trace_file, AtomicFile};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

/// Held while a test spawns a child, and by the full-filesystem test throughout: a child
/// holds a copy of every descriptor its parent has open until it execs (CLOEXEC acts only
/// then), so a fork from a concurrent test, slowed by load, kept an unlinked temporary
/// file's blocks on the small tmpfs and the next write found it full (CI, 2026-11-29).
static CHILDREN: Mutex<()> = Mutex::new(());

fn children() -> MutexGuard<'static, ()> {
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bytes gzip cannot shrink, so a compressed output is as big as a raw one.
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
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

/// A 256 KiB tmpfs mounted on a fresh temporary directory, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// `None` (a loud skip, a failure under CI) when mounting is not permitted here.
    fn mount() -> Option<SmallFs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(dir.path())
            .output();
        match o {
            Ok(o) if o.status.success() => Some(SmallFs { dir }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var_os("CI").is_none(),
                    "cannot mount a small tmpfs under CI: {why}"
                );
                eprintln!(
                    "!!!!!!!! SKIPPED the full-filesystem test: cannot mount a tmpfs ({why})"
                );
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Writes 1 MiB to `path` through a trace output, ignoring write errors as the FXT
/// sink does (it reports the first one at the end), and returns `finish`'s result.
fn write_trace(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut out = open_trace_output(path)?;
    for chunk in data.chunks(4096) {
        if out.write_all(chunk).is_err() {
            break;
        }
    }
    out.finish()
}

fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut out = AtomicFile::create(path)?;
    out.write_all(data)?;
    out.commit()
}

#[test]
fn a_full_filesystem_leaves_no_output_and_the_previous_one_intact() {
    let _children = children();
    let Some(fs) = SmallFs::mount() else {
        return;
    };
    let data = noise(1 << 20);
    for name in ["trace.fxt", "trace.fxt.gz", "trace.ctf"] {
        let path = fs.path().join(name);
        let write = |p: &Path| {
            if name.ends_with(".ctf") {
                write_atomic(p, &data)
            } else {
                write_trace(p, &data)
            }
        };
        // No previous file: nothing appears, nothing is left behind.
        let e = write(&path).expect_err("1 MiB cannot fit in 256 KiB");
        assert_eq!(listing(fs.path()), Vec::<String>::new(), "{name}: {e}");
        // A previous file: still there, unchanged, and not moved to .old.
        std::fs::write(&path, b"the previous trace")
            .unwrap_or_else(|e| panic!("{name}: writing the previous trace: {e}"));
        write(&path).expect_err("1 MiB cannot fit in 256 KiB");
        assert_eq!(listing(fs.path()), [name.to_string()], "{name}");
        assert_eq!(std::fs::read(&path).expect("read"), b"the previous trace");
        std::fs::remove_file(&path).expect("rm");
    }
}

#[test]
fn an_unfinished_output_leaves_the_previous_one_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = noise(3 << 20);
    for name in ["trace.fxt", "trace.fxt.gz"] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"the previous trace").expect("previous");
        let mut out = open_trace_output(&path).expect("open");
        out.write_all(&data).expect("write");
        // The temporary file is in the target's directory, hidden, and really written.
        let temp: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        assert_eq!(temp.len(), 1, "{temp:?}");
        let temp_name = temp[0].file_name().expect("name").to_string_lossy();
        assert!(temp_name.starts_with(&format!(".{name}.")), "{temp_name}");
        // What a kill or an error does to the writer: it never finishes.
        drop(out);
        assert!(!temp[0].exists(), "{temp:?} left behind");
        assert_eq!(std::fs::read(&path).expect("read"), b"the previous trace");
    }
    assert_eq!(listing(dir.path()), ["trace.fxt", "trace.fxt.gz"]);
    let path = dir.path().join("x.ctf");
    let mut out = AtomicFile::create(&path).expect("create");
    out.write_all(&data).expect("write");
    drop(out);
    assert!(!path.exists());
}

#[test]
fn a_finished_output_replaces_the_previous_one_kept_as_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["trace.fxt", "trace.fxt.gz"] {
        let path = dir.path().join(name);
        let old = dir.path().join(format!("{name}.old"));
        std::fs::write(&path, b"the previous trace").expect("previous");
        write_trace(&path, b"the new trace").expect("write");
        assert_eq!(read_trace_file(&path).expect("read"), b"the new trace");
        assert_eq!(std::fs::read(&old).expect("old"), b"the previous trace");
        // Again: the .old is replaced by the trace just superseded.
        write_trace(&path, b"the newest trace").expect("write");
        assert_eq!(read_trace_file(&path).expect("read"), b"the newest trace");
        assert_eq!(read_trace_file(&old).expect("old"), b"the new trace");
    }
    assert_eq!(
        listing(dir.path()),
        [
            "trace.fxt",
            "trace.fxt.gz",
            "trace.fxt.gz.old",
            "trace.fxt.old"
        ]
    );
    // Plain atomic files replace without keeping anything.
    let path = dir.path().join("x.ctf");
    std::fs::write(&path, b"before").expect("before");
    write_atomic(&path, b"after").expect("write");
    assert_eq!(std::fs::read(&path).expect("read"), b"after");
    assert!(!dir.path().join("x.ctf.old").exists());
    // A relative name in the current directory and a name that is a directory.
    let e = write_trace(dir.path(), b"x").expect_err("a directory is not a file name");
    assert!(!e.to_string().is_empty());
    assert_eq!(listing(dir.path()).len(), 5);
}

#[test]
fn links_fifos_and_devices_at_the_output_name_are_refused_never_opened() {
    // ptscope runs as root: a fifo (someone reading it), a link (to a device, a file of
    // root's) or a device at the output's name is refused with the reason, and nothing
    // is written anywhere (issue 23, hole 1; the attack as another user is in
    // crates/cli/tests/root_outputs.rs).
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe.fxt.gz");
    let ok = {
        let _children = children();
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(ok, "mkfifo failed");
    // Opening a fifo for writing would block here without a reader: the test hangs if
    // it is opened at all.
    let e = write_trace(&fifo, b"through the pipe").expect_err("a fifo");
    assert!(e.to_string().contains("fifo"), "{e}");
    assert!(e.to_string().contains("-o -"), "{e}");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"root's file").expect("victim");
    let link = dir.path().join("link.fxt");
    std::os::unix::fs::symlink(&victim, &link).expect("symlink");
    let e = write_trace(&link, b"trace").expect_err("a link");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let e = write_atomic(&link, b"trace").expect_err("a link");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let dev = dir.path().join("null.fxt");
    std::os::unix::fs::symlink("/dev/null", &dev).expect("symlink");
    assert!(write_trace(&dev, b"trace").is_err());
    assert!(write_trace(Path::new("/dev/null"), b"trace").is_err());
    assert_eq!(std::fs::read(&victim).expect("victim"), b"root's file");
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(&fifo).expect("fifo").file_type();
    assert!(t.is_fifo(), "the fifo was replaced");
    assert!(std::fs::symlink_metadata(&link)
        .expect("link")
        .file_type()
        .is_symlink());
    assert_eq!(
        listing(dir.path()),
        ["link.fxt", "null.fxt", "pipe.fxt.gz", "victim"]
    );
}
