//! Processes: the program started stopped at exec (so perf and the trigger are in place
//! before its first instruction), perf in its own process group, and signals.

use crate::{Error, Result};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A program started by `ptscope run`, stopped right after exec until [`Self::release`].
pub struct Program {
    child: Child,
    released: bool,
    status: Option<ExitStatus>,
}

impl Program {
    /// Starts `argv` traced (`PTRACE_TRACEME`), so the kernel stops it at exec, and dying
    /// with us (`PR_SET_PDEATHSIG`).
    pub fn spawn_stopped(argv: &[OsString]) -> Result<Self> {
        let Some((prog, args)) = argv.split_first() else {
            return Err(Error::NoCommand);
        };
        let mut cmd = Command::new(prog);
        cmd.args(args);
        ptscope_interrupt::children::die_with_ptscope(&mut cmd);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| {
            let program = Path::new(prog).to_owned();
            // The kind says it all for these two: the io error's text would repeat it.
            match source.kind() {
                std::io::ErrorKind::NotFound => Error::NoSuchProgram { program },
                std::io::ErrorKind::PermissionDenied => Error::ProgramNotExecutable { program },
                _ => Error::CannotRun { program, source },
            }
        })?;
        let pid = child.id() as libc::pid_t;
        let mut p = Program {
            child,
            released: false,
            status: None,
        };
        // The exec stop (SIGTRAP) comes once the new image is mapped.
        let mut st = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r != pid || !libc::WIFSTOPPED(st) {
            p.released = true;
            if r == pid {
                p.status = Some(ExitStatus::from_raw(st));
            }
            return Err(Error::ExitedBeforeStart {
                program: Path::new(prog).to_owned(),
            });
        }
        Ok(p)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets it run (detaches ptrace, no signal delivered).
    pub fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        // SAFETY: detaching our stopped tracee.
        let r = unsafe { libc::ptrace(libc::PTRACE_DETACH, self.pid() as libc::pid_t, 0, 0) };
        if r != 0 {
            return Err(Error::Release {
                pid: self.pid(),
                source: std::io::Error::last_os_error(),
            });
        }
        self.released = true;
        Ok(())
    }

    /// Runs the program through its dynamic loader up to the executable's entry point
    /// and stops it there: its shared libraries are then mapped, so a trigger can name
    /// their functions. What ran before (the loader, library constructors) is not
    /// recorded, since perf starts afterwards. Signals it gets meanwhile are delivered.
    #[cfg(target_arch = "x86_64")]
    pub fn run_to_entry(&mut self) -> Result<()> {
        let pid = self.pid() as libc::pid_t;
        let entry = auxv_entry(pid)?;
        let addr = entry as usize as *mut libc::c_void;
        let ptrace_err = |step: &'static str| Error::RunToEntry {
            step,
            pid: pid as u32,
            source: std::io::Error::last_os_error(),
        };
        // SAFETY: PEEKTEXT/POKETEXT on our own stopped tracee; errno tells a failed peek
        // from a word that happens to be -1.
        let word = unsafe {
            *libc::__errno_location() = 0;
            let w = libc::ptrace(
                libc::PTRACE_PEEKTEXT,
                pid,
                addr,
                std::ptr::null_mut::<libc::c_void>(),
            );
            if w == -1 && *libc::__errno_location() != 0 {
                return Err(ptrace_err("read"));
            }
            w
        };
        // An int3 on the entry's first byte.
        let trapped = (word & !0xff) | 0xcc;
        // SAFETY: as above.
        if unsafe {
            libc::ptrace(
                libc::PTRACE_POKETEXT,
                pid,
                addr,
                trapped as *mut libc::c_void,
            )
        } != 0
        {
            return Err(ptrace_err("write to"));
        }
        let mut deliver = 0;
        loop {
            // SAFETY: resuming our stopped tracee.
            if unsafe { libc::ptrace(libc::PTRACE_CONT, pid, 0, deliver) } != 0 {
                return Err(ptrace_err("resume"));
            }
            let mut st = 0;
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(pid, &mut st, 0) };
            if r != pid || !libc::WIFSTOPPED(st) {
                self.released = true;
                if r == pid {
                    self.status = Some(ExitStatus::from_raw(st));
                }
                return Err(Error::EndedBeforeEntry {
                    status: self.status.map(describe_exit),
                });
            }
            let sig = libc::WSTOPSIG(st);
            // SAFETY: reading the registers of our stopped tracee.
            let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
            if unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) } != 0 {
                return Err(ptrace_err("read the registers of"));
            }
            if sig == libc::SIGTRAP && regs.rip == entry + 1 {
                // Back to the original instruction, about to run it.
                regs.rip = entry;
                // SAFETY: as above.
                unsafe {
                    if libc::ptrace(libc::PTRACE_POKETEXT, pid, addr, word as *mut libc::c_void)
                        != 0
                    {
                        return Err(ptrace_err("restore the entry point of"));
                    }
                    if libc::ptrace(libc::PTRACE_SETREGS, pid, 0, &regs) != 0 {
                        return Err(ptrace_err("set the registers of"));
                    }
                }
                return Ok(());
            }
            deliver = sig;
        }
    }

    /// Running to the entry point needs x86-64 registers.
    #[cfg(not(target_arch = "x86_64"))]
    pub fn run_to_entry(&mut self) -> Result<()> {
        Err(Error::RunToEntryUnsupported)
    }

    /// Its exit status if it has exited (reaps it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Sends it a signal.
    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            // SAFETY: signalling our own unreaped child.
            unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        }
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills it (SIGKILL) and reaps it, unless it already exited.
    pub fn kill(&mut self) {
        if self.try_wait().is_none() {
            if !self.released {
                // A stopped tracee dies on SIGKILL too; nothing to detach first.
                self.released = true;
            }
            self.signal(libc::SIGKILL);
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Finds a command the way exec does: a path with a `/` as it is, else the first file of
/// that name in a directory of `$PATH`.
pub fn which(cmd: &Path) -> Result<std::path::PathBuf> {
    if cmd.components().count() > 1 {
        return Ok(cmd.to_path_buf());
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::NotOnPath(cmd.to_path_buf()))
}

/// Describes an exit status for a person.
pub fn describe_exit(s: ExitStatus) -> String {
    if let Some(code) = s.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = s.signal() {
        let core = if s.core_dumped() { ", core dumped" } else { "" };
        format!("was killed by signal {sig} ({}{core})", signal_name(sig))
    } else {
        format!("{s}")
    }
}

/// SIGSEGV-style name of a signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}

/// perf, running in its own process group so a terminal's Ctrl-C reaches ptscope (which then
/// asks perf for the snapshot) and not perf directly.
pub struct Perf {
    child: Child,
    status: Option<ExitStatus>,
}

impl Perf {
    /// Starts `argv` with its output in `log`.
    pub fn spawn(argv: &[OsString], log: &Path) -> Result<Self> {
        let Some((prog, args)) = argv.split_first() else {
            return Err(Error::EmptyPerfCommand);
        };
        let out = create_private(log)?;
        let err = out.try_clone().map_err(Error::DuplicatePerfLog)?;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            // perf runs a pager on usage errors, which would hang us.
            .env("PAGER", "cat")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        ptscope_interrupt::children::die_with_ptscope(&mut cmd);
        let child = cmd.spawn().map_err(|source| Error::CannotRunPerf {
            perf: Path::new(prog).to_owned(),
            source,
        })?;
        Ok(Perf {
            child,
            status: None,
        })
    }

    /// perf's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status once it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// True while perf runs.
    pub fn alive(&mut self) -> bool {
        self.try_wait().is_none()
    }

    /// Sends perf a signal.
    pub fn signal(&mut self, sig: i32) {
        if self.alive() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.pid() as libc::pid_t, sig) };
        }
    }

    /// Waits up to `timeout`, then kills it; returns the status.
    pub fn finish(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(s) = self.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.signal(libc::SIGKILL);
        self.status = self.child.wait().ok();
        self.status
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        if self.alive() {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Creates `path` for writing, afresh: an old file (or a symlink planted in its place) is
/// removed, never followed, and the new one is created with `O_EXCL|O_NOFOLLOW`, mode 0600.
pub fn create_private(path: &Path) -> Result<std::fs::File> {
    // unlink(2) removes a symlink itself, not its target.
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(Error::Replace {
                path: path.to_owned(),
                source,
            })
        }
    }
    ptscope_rootsafe::create_new(path).map_err(|source| Error::Create {
        path: path.to_owned(),
        source,
    })
}

/// True if `pid` exists (and is not a zombie).
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The command line of `pid`, for messages and track names.
pub fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let s: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!s.is_empty()).then(|| s.join(" "))
}

/// Every process we may see: `(pid, command line)`, oldest first.
pub fn list_processes() -> Vec<(u32, String)> {
    let mut v: Vec<(u32, String)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, cmdline(pid)?)))
        .collect();
    v.sort();
    v
}

/// The executable's runtime entry point, `AT_ENTRY` in `/proc/PID/auxv`.
fn auxv_entry(pid: libc::pid_t) -> Result<u64> {
    const AT_ENTRY: u64 = 9;
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).map_err(|source| Error::Auxv {
        pid: pid as u32,
        source,
    })?;
    auxv.chunks_exact(16)
        .map(|c| {
            let mut k = [0u8; 8];
            let mut v = [0u8; 8];
            k.copy_from_slice(&c[..8]);
            v.copy_from_slice(&c[8..]);
            (u64::from_ne_bytes(k), u64::from_ne_bytes(v))
        })
        .find(|&(k, _)| k == AT_ENTRY)
        .map(|(_, v)| v)
        .ok_or(Error::NoEntryPoint { pid: pid as u32 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn programs_that_cannot_start_are_typed_errors() {
        let e = Program::spawn_stopped(&[]).err().expect("no command");
        assert!(matches!(e, Error::NoCommand));
        // Which flag gives the command is the CLI's to say.
        assert!(!e.to_string().contains("--"), "{e}");

        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no-such-program");
        let e = Program::spawn_stopped(&[missing.clone().into()])
            .err()
            .expect("missing program");
        assert!(matches!(&e, Error::NoSuchProgram { program } if *program == missing));
        // A path was not looked up on PATH: no advice to prefix it with ./ again.
        assert_eq!(
            e.to_string(),
            format!("cannot run `{}`: no such program", missing.display())
        );
        let e = Program::spawn_stopped(&["ptscope-no-such-program".into()])
            .err()
            .expect("missing program");
        assert_eq!(
            e.to_string(),
            "cannot run `ptscope-no-such-program`: no such program (give a path like \
             ./ptscope-no-such-program, or a program on PATH)"
        );

        // A file that is not executable (as root only the x bits are checked).
        let plain = tmp.path().join("plain");
        std::fs::write(&plain, "data").unwrap();
        let e = Program::spawn_stopped(&[plain.clone().into()])
            .err()
            .expect("not executable");
        assert!(matches!(e, Error::ProgramNotExecutable { .. }), "{e:?}");
        assert!(e.to_string().contains("chmod +x"), "{e}");
    }

    #[test]
    fn file_errors_carry_the_path_and_the_io_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("missing-dir/perf.log");
        let e = create_private(&path).unwrap_err();
        assert_eq!(e.to_string(), format!("cannot create {}", path.display()));
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }
}
