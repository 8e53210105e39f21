//! Root-safe files for ptscope, which runs as root, often in directories other users can
//! write (`/tmp`, a shared build tree, a `TMPDIR` someone chose). Three rules, each held
//! by a test that runs the attack as another user (`docs/security.md` lists them):
//!
//! 1. An output is only ever a regular file, never reached through a link:
//!    [`check_output_target`] refuses a symbolic link, device, fifo or socket at the
//!    output's name (outputs are written to a new `O_EXCL` file beside it and renamed
//!    over it, so nothing at the name is ever opened).
//! 2. A directory ptscope records in can be changed by no other user ([`TrustedDir`]):
//!    it and every ancestor are owned by root or the user, and none is writable by
//!    others unless sticky, and so is every directory and link its resolution went
//!    through ([`resolve_trusted`]). It is resolved once; only that path is used after.
//! 3. Code a child loads (perf's dlfilter, qemu's plugin) is handed over as
//!    `/proc/PID/fd/N`, a descriptor ptscope holds ([`Loadable`]): a sealed in-memory
//!    copy, or a file checked through the very descriptor the child opens.
//!
//! ```
//! use ptscope_rootsafe::{check_output_target, Loadable, TrustedDir};
//! let dir = tempfile::tempdir()?;
//! // Another user's link where the trace goes is refused, with the reason.
//! let out = dir.path().join("trace.fxt.gz");
//! std::os::unix::fs::symlink("/dev/null", &out)?;
//! let e = check_output_target(&out).unwrap_err();
//! assert!(e.to_string().contains("symbolic link"));
//! // A private directory: created 0700, every ancestor checked.
//! let rec = TrustedDir::private(&dir.path().join("rec"))?;
//! assert!(rec.path().is_absolute());
//! // Code for a child to load: perf or qemu opens this path, which no one can swap.
//! let code = Loadable::sealed("demo", b"bytes")?;
//! assert_eq!(std::fs::read(code.path())?, b"bytes");
//! # Ok::<(), std::io::Error>(())
//! ```

#![warn(missing_docs)]

use std::ffi::CString;
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The effective user id: the user ptscope acts as.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn refused(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, msg)
}

/// `path` without a trailing `/` (with one, lstat would follow a link at its end) and
/// without `.` components.
fn plain(path: &Path) -> PathBuf {
    path.components().collect()
}

/// ` (to TARGET)` for the symbolic link `p`, for messages; empty if it cannot be read.
fn link_note(p: &Path) -> String {
    std::fs::read_link(p)
        .map(|t| format!(" (to {})", t.display()))
        .unwrap_or_default()
}

/// `path`, relative to the current directory if relative.
fn absolute(path: &Path) -> io::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(path))
    }
}

/// What kind of file a non-regular one is, for messages.
fn kind(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "directory"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else {
        "regular file"
    }
}

/// Checks that `path`, a trace or other output ptscope is about to write, may be
/// replaced: nothing is there, or a regular file. A symbolic link is refused (another
/// user's link would send root's output wherever they point it), and so is a device,
/// fifo or socket (a trace is only ever a regular file: writing it into a device or a
/// pipe someone else reads is how such a link is exploited). `-` (standard output) is
/// the caller's to handle.
pub fn check_output_target(path: &Path) -> io::Result<()> {
    let p = plain(path);
    let m = match std::fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let t = m.file_type();
    if t.is_file() {
        return Ok(());
    }
    if t.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            format!("{} is a directory; name a file", path.display()),
        ));
    }
    if t.is_symlink() {
        let to = link_note(&p);
        return Err(refused(format!(
            "{} is a symbolic link{to}: ptscope never writes through a link at the output's \
             name (another user's link could point it at a device or at a file of yours); \
             remove the link or name another file",
            path.display()
        )));
    }
    Err(refused(format!(
        "{} is a {}, not a regular file: ptscope writes outputs only as regular files; to \
         pipe or discard one, write it to standard output (`-o -`, e.g. `-o - > /dev/null`)",
        path.display(),
        kind(&m)
    )))
}

/// Resolves `path` (relative to the current directory if relative) to an absolute path
/// free of links, checking every directory the resolution goes through: each must be
/// owned by root or by us and not writable by group or others unless sticky (then
/// others may add entries beside ours, but not rename or remove ours), and each link
/// followed must be owned by root or by us. So no other user can change what the
/// resolved path names, nor have chosen it (a link of theirs, or one in a directory of
/// theirs, is refused even when it leads somewhere trusted). The last component itself
/// is not checked (the caller knows what it must be) unless it is a link.
pub fn resolve_trusted(path: &Path) -> io::Result<PathBuf> {
    use std::collections::VecDeque;
    use std::path::Component;
    let abs = absolute(path)?;
    let mut todo: VecDeque<std::ffi::OsString> = VecDeque::new();
    for c in abs.components() {
        match c {
            Component::Normal(n) => todo.push_back(n.to_owned()),
            Component::ParentDir => todo.push_back("..".into()),
            _ => {}
        }
    }
    let root = std::fs::symlink_metadata("/")?;
    check_as_ancestor(Path::new("/"), &root, &abs)?;
    let mut cur = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&name);
        let m = std::fs::symlink_metadata(&next)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", next.display())))?;
        if m.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return Err(io::Error::other(format!(
                    "{}: too many levels of symbolic links",
                    path.display()
                )));
            }
            if m.uid() != 0 && m.uid() != euid() {
                return Err(refused(format!(
                    "{} is a symbolic link of user {} (neither root nor you): they chose where \
                     {} leads",
                    next.display(),
                    m.uid(),
                    path.display()
                )));
            }
            let target = std::fs::read_link(&next)?;
            let mut parts: Vec<std::ffi::OsString> = Vec::new();
            for c in target.components() {
                match c {
                    Component::RootDir => cur = PathBuf::from("/"),
                    Component::Normal(n) => parts.push(n.to_owned()),
                    Component::ParentDir => parts.push("..".into()),
                    _ => {}
                }
            }
            for p in parts.into_iter().rev() {
                todo.push_front(p);
            }
            continue;
        }
        if !todo.is_empty() {
            // A directory on the way: nobody else may change what is below it.
            if !m.is_dir() {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", next.display()),
                ));
            }
            check_as_ancestor(&next, &m, &abs)?;
        }
        cur = next;
    }
    Ok(cur)
}

/// The ancestor rule for one directory `a` above `of`.
fn check_as_ancestor(a: &Path, m: &Metadata, of: &Path) -> io::Result<()> {
    if m.file_type().is_symlink() {
        return Err(refused(format!(
            "{} became a symbolic link while ptscope checked {}: someone is changing it",
            a.display(),
            of.display()
        )));
    }
    let me = euid();
    if m.uid() != 0 && m.uid() != me {
        return Err(refused(format!(
            "{} belongs to user {} (neither root nor you): they could change what {} \
             leads to",
            a.display(),
            m.uid(),
            of.display()
        )));
    }
    if m.mode() & 0o022 != 0 && m.mode() & libc::S_ISVTX == 0 {
        return Err(refused(format!(
            "{} is writable by other users (mode {:04o}, not sticky): they could change \
             what {} leads to",
            a.display(),
            m.mode() & 0o7777,
            of.display()
        )));
    }
    Ok(())
}

/// A directory no other user can change: it and every ancestor belong to root or to
/// us, none is writable by others (an ancestor may be if sticky, as `/tmp`). Its path is
/// resolved (absolute, no links); the directory is held open, and was checked to be the
/// one at that path after the checks.
#[derive(Debug)]
pub struct TrustedDir {
    path: PathBuf,
    _dir: File,
}

impl TrustedDir {
    /// `path` as a private working directory, created with mode 0700 (missing parents
    /// too, each 0700) if it does not exist. Refused: a symbolic link (given as the
    /// directory, another user's link could be redirected after the check), a
    /// directory another user owns or can write, and one below a directory another
    /// user could change.
    pub fn private(path: &Path) -> io::Result<TrustedDir> {
        let p = plain(path);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let to = link_note(&p);
                return Err(refused(format!(
                    "{} is a symbolic link{to}: ptscope works only in the directory itself, \
                     never through a link (another user's link could be pointed elsewhere \
                     once checked); give the directory's own path",
                    path.display()
                )));
            }
            Ok(m) if !m.is_dir() => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{} is not a directory", path.display()),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_private(&p)?,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
        Self::check(&p)
    }

    /// `path` (an existing directory) if it passes the checks of [`Self::private`].
    pub fn check(path: &Path) -> io::Result<TrustedDir> {
        let canon = resolve_trusted(path)?;
        let m = std::fs::symlink_metadata(&canon)?;
        if !m.is_dir() {
            return Err(refused(format!(
                "{} changed while ptscope checked it: someone is changing it",
                canon.display()
            )));
        }
        if m.uid() != euid() {
            return Err(refused(format!(
                "{} belongs to user {}, not to you: they could swap the files ptscope \
                 writes there; use a directory of your own (ptscope creates a missing one \
                 with mode 0700)",
                path.display(),
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(refused(format!(
                "{} is writable by other users (mode {:04o}): they could swap the files \
                 ptscope writes there; use a directory only you can write (ptscope creates \
                 a missing one with mode 0700)",
                path.display(),
                m.mode() & 0o7777
            )));
        }
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&canon)?;
        let d = dir.metadata()?;
        if (d.dev(), d.ino()) != (m.dev(), m.ino()) {
            return Err(refused(format!(
                "{} changed while ptscope checked it: someone is changing it",
                canon.display()
            )));
        }
        Ok(TrustedDir {
            path: canon,
            _dir: dir,
        })
    }

    /// Its resolved path: the only one to use from now on.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Creates `p` and its missing parents with mode 0700, after checking that the deepest
/// existing one is a directory no other user can change (so none can interfere while
/// the rest is created).
fn create_private(p: &Path) -> io::Result<()> {
    let abs = absolute(p)?;
    let existing = abs
        .ancestors()
        .skip(1)
        .find(|a| std::fs::symlink_metadata(a).is_ok())
        .unwrap_or(Path::new("/"));
    let canon = resolve_trusted(existing)?;
    let m = std::fs::symlink_metadata(&canon)?;
    check_as_ancestor(&canon, &m, &abs)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&abs)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create the directory {}: {e}", p.display()),
            )
        })
}

/// The directory temporary ones go in (`$TMPDIR`, else `/tmp`), resolved, if no other
/// user can change it: owned by root or us, and private or sticky (as `/tmp`), as every
/// directory above it. In a `TMPDIR` others can write without the sticky bit, another
/// user could rename ptscope's private directory away and put their own in its place.
pub fn temp_parent() -> io::Result<PathBuf> {
    let t = std::env::temp_dir();
    let check = || -> io::Result<PathBuf> {
        let canon = resolve_trusted(&t)?;
        let m = std::fs::symlink_metadata(&canon)?;
        check_as_ancestor(&canon, &m, &canon.join("ptscope-…"))?;
        Ok(canon)
    };
    check().map_err(|e| {
        refused(format!(
            "the temporary directory {} (TMPDIR) is not safe for ptscope's private files: \
             {e}; point TMPDIR at a directory only you can write (or at /tmp), or give -w DIR",
            t.display()
        ))
    })
}

/// Code for a child process to load (perf's `--dlfilter`, qemu's `-plugin`), held open
/// by ptscope and named to the child as `/proc/PID/fd/N`: no path another user could
/// swap is ever opened by the child.
#[derive(Debug)]
pub struct Loadable {
    file: File,
}

/// `MFD_EXEC` (Linux 6.3): the memfd may be mapped executable even where
/// `vm.memfd_noexec` would otherwise forbid it; older kernels refuse the flag.
const MFD_EXEC: libc::c_uint = 0x0010;

impl Loadable {
    /// An in-memory copy of `bytes` (a memfd), sealed: nobody, ptscope included, can
    /// change it once made.
    pub fn sealed(name: &str, bytes: &[u8]) -> io::Result<Loadable> {
        let cname = CString::new(name).map_err(|_| io::Error::other("a NUL in a name"))?;
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: memfd_create with a NUL-terminated name.
        let mut fd = unsafe { libc::memfd_create(cname.as_ptr(), flags | MFD_EXEC) };
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // SAFETY: as above.
            fd = unsafe { libc::memfd_create(cname.as_ptr(), flags) };
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just created and own.
        let mut file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        file.write_all(bytes)?;
        let seals =
            libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
        // SAFETY: fcntl on our own descriptor.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Loadable { file })
    }

    /// The library at `path`, opened once and checked through that descriptor: a
    /// regular file owned by root or by us that nobody else can write, below
    /// directories no other user can change (so the path cannot be redirected to
    /// another file either). The child opens the descriptor, not the path.
    pub fn trusted_file(path: &Path) -> io::Result<Loadable> {
        let canon = resolve_trusted(path)?;
        let (file, m) = open_regular(std::fs::OpenOptions::new().read(true), &canon, 0)?;
        if m.uid() != 0 && m.uid() != euid() {
            return Err(refused(format!(
                "{} belongs to user {} (neither root nor you): ptscope loads no code another \
                 user could change",
                path.display(),
                m.uid()
            )));
        }
        if m.mode() & 0o022 != 0 {
            return Err(refused(format!(
                "{} is writable by other users (mode {:04o}): ptscope loads no code another \
                 user could change",
                path.display(),
                m.mode() & 0o7777
            )));
        }
        Ok(Loadable { file })
    }

    /// The path the child opens: `/proc/PID/fd/N`, ptscope's descriptor (valid while
    /// this value lives; the child needs the same user as ptscope, or root).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ))
    }
}

/// Opens `path` as `opts` say, never through a link at its end (`O_NOFOLLOW`, plus
/// `flags`), and refuses anything but a regular file; gives the file and its metadata,
/// read through the descriptor (what is checked is what was opened).
fn open_regular(
    opts: &mut std::fs::OpenOptions,
    path: &Path,
    flags: i32,
) -> io::Result<(File, Metadata)> {
    let f = opts
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | flags)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(refused(format!(
            "{} is a {}, not a regular file",
            path.display(),
            kind(&m)
        )));
    }
    Ok((f, m))
}

/// Creates `path` afresh for writing, mode 0600: `O_EXCL|O_NOFOLLOW`, so nothing placed
/// there (a link, a fifo, someone's file) is opened; fails if anything is there.
pub fn create_new(path: &Path) -> io::Result<File> {
    create_with_mode(path, 0o600)
}

/// Creates `path` afresh for writing with `mode` (less the umask), `O_EXCL|O_NOFOLLOW`.
fn create_with_mode(path: &Path, mode: u32) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Opens `path` for an output written in place as the program runs (so that a crash
/// keeps what was written, as a memtrace trace): a new file (`O_EXCL|O_NOFOLLOW`, mode
/// 0666 less the umask), or an existing regular file of ours with no other hard link,
/// emptied. Never a link, device, fifo or socket, nor someone else's file, nor a second
/// name of another file (another user may hard-link a file of root's into `/tmp`).
pub fn replace_in_place(path: &Path) -> io::Result<File> {
    check_output_target(path)?;
    match create_with_mode(path, 0o666) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    // O_NONBLOCK: a fifo swapped in meanwhile must not block the open.
    let (f, m) = open_regular(
        std::fs::OpenOptions::new().write(true),
        path,
        libc::O_NONBLOCK,
    )?;
    if m.uid() != euid() {
        return Err(refused(format!(
            "{} belongs to user {}: an output is written only into a new file or one of \
             yours; remove it or name another file",
            path.display(),
            m.uid()
        )));
    }
    if m.nlink() != 1 {
        return Err(refused(format!(
            "{} has {} names (hard links): writing it would change the file under its other \
             names too; remove it or name another file",
            path.display(),
            m.nlink()
        )));
    }
    // SAFETY: fcntl on our own descriptor: back to blocking writes.
    unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, 0) };
    f.set_len(0)?;
    Ok(f)
}

/// The bytes of a path, NUL-terminated, for system calls.
pub fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn outputs_are_regular_files_or_nothing() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("t.fxt");
        check_output_target(&f).expect("nothing there");
        std::fs::write(&f, b"x").expect("write");
        check_output_target(&f).expect("a regular file");
        let l = d.path().join("l.fxt");
        std::os::unix::fs::symlink(&f, &l).expect("symlink");
        let e = check_output_target(&l).expect_err("a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // With a trailing slash lstat would follow the link: it is refused all the same.
        let mut slash = l.as_os_str().to_owned();
        slash.push("/");
        assert!(check_output_target(Path::new(&slash)).is_err());
        let e = check_output_target(Path::new("/dev/null")).expect_err("a device");
        assert!(e.to_string().contains("character device"), "{e}");
        assert!(e.to_string().contains("-o -"), "{e}");
        let e = check_output_target(d.path()).expect_err("a directory");
        assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
    }

    #[test]
    fn private_directories_refuse_links_and_open_modes() {
        let d = tempfile::tempdir().expect("tempdir");
        let rec = TrustedDir::private(&d.path().join("a/b/rec")).expect("created");
        let m = std::fs::metadata(rec.path()).expect("stat");
        assert_eq!(m.mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(d.path().join("a")).expect("a").mode() & 0o777,
            0o700
        );
        let link = d.path().join("link");
        std::os::unix::fs::symlink(rec.path(), &link).expect("symlink");
        let e = TrustedDir::private(&link).expect_err("a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let mut slash = link.as_os_str().to_owned();
        slash.push("/");
        assert!(TrustedDir::private(Path::new(&slash)).is_err());
        // Writable by others: the directory itself, or a non-sticky ancestor.
        let open = d.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        chmod(&open, 0o777);
        let e = TrustedDir::private(&open).expect_err("0777");
        assert!(e.to_string().contains("writable by other users"), "{e}");
        let e = TrustedDir::private(&open.join("rec")).expect_err("below 0777");
        assert!(e.to_string().contains("not sticky"), "{e}");
        assert!(
            !open.join("rec").exists(),
            "created below an unsafe directory"
        );
        chmod(&open, 0o1777);
        TrustedDir::private(&open.join("rec")).expect("below a sticky directory");
    }

    #[test]
    fn in_place_outputs_are_new_or_our_own_single_named_files() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("t.ctf");
        replace_in_place(&f)
            .and_then(|mut w| w.write_all(b"first"))
            .expect("new");
        replace_in_place(&f)
            .and_then(|mut w| w.write_all(b"2nd"))
            .expect("ours");
        assert_eq!(std::fs::read(&f).expect("read"), b"2nd");
        let twin = d.path().join("twin");
        std::fs::hard_link(&f, &twin).expect("link");
        let e = replace_in_place(&twin).expect_err("two names");
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(std::fs::read(&f).expect("read"), b"2nd");
        let l = d.path().join("l.ctf");
        std::os::unix::fs::symlink(&f, &l).expect("symlink");
        assert!(replace_in_place(&l).is_err());
        assert!(replace_in_place(Path::new("/dev/null")).is_err());
    }

    #[test]
    fn resolution_checks_every_directory_and_link_on_the_way() {
        let d = tempfile::tempdir().expect("tempdir");
        let real = d.path().join("real");
        std::fs::create_dir_all(real.join("lib")).expect("mkdir");
        std::fs::write(real.join("lib/x.so"), b"x").expect("write");
        let via = d.path().join("via");
        std::os::unix::fs::symlink("real/lib", &via).expect("symlink");
        let got = resolve_trusted(&via.join("x.so")).expect("our own link");
        assert_eq!(
            got,
            std::fs::canonicalize(real.join("lib/x.so")).expect("canon")
        );
        let up = resolve_trusted(&via.join("../lib/./x.so")).expect("dots");
        assert_eq!(up, got);
        // Below a directory others can write (not sticky), even through our own link.
        chmod(&real, 0o777);
        let e = resolve_trusted(&via.join("x.so")).expect_err("0777 on the way");
        assert!(e.to_string().contains("not sticky"), "{e}");
        chmod(&real, 0o755);
        if euid() == 0 {
            // Another user's link, though it leads somewhere trusted.
            std::os::unix::fs::lchown(&via, Some(65534), Some(65534)).expect("lchown");
            let e = resolve_trusted(&via.join("x.so")).expect_err("their link");
            assert!(e.to_string().contains("symbolic link of user 65534"), "{e}");
        }
        let e = resolve_trusted(&d.path().join("loop/x")).expect_err("missing");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn sealed_code_cannot_be_changed() {
        let l = Loadable::sealed("t", b"code").expect("memfd");
        assert_eq!(std::fs::read(l.path()).expect("read"), b"code");
        let w = std::fs::OpenOptions::new().write(true).open(l.path());
        let failed = match w {
            Err(_) => true,
            Ok(mut f) => f.write_all(b"evil").is_err(),
        };
        assert!(failed, "a sealed memfd was written");
        assert_eq!(std::fs::read(l.path()).expect("read"), b"code");
    }
}
