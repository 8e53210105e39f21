//! No child outlives ptscope: not perf, not qemu, not the traced program, nor anything
//! they started, even when ptscope is killed with SIGKILL.
//!
//! Two layers:
//! - every child ptscope starts dies with it ([`die_with_ptscope`]: `PR_SET_PDEATHSIG`,
//!   SIGKILL when ptscope ends);
//! - their own children (the program's forks, each a qemu of its own under the emulate
//!   backend; a shell's commands) are not ptscope's, so the kernel would leave them
//!   running. A *sentinel* process ([`guard_descendants`]) notes ptscope's whole tree every
//!   [`POLL`] (ptscope is their subreaper meanwhile, so an orphan stays in the tree), and
//!   when ptscope ends without saying [`stand_down`] (SIGKILL, a crash, a quitting third
//!   Ctrl-C) it stops every process it noted and their children, then kills them.
//!
//! What this does not cover: a process started and orphaned (its parent gone) within the
//! last [`POLL`] before ptscope was killed, and one that was never seen because it left
//! the tree by `setsid` *and* double fork before a poll. `docs/security.md` says so.
//!
//! ```no_run
//! // In main(), before any thread is started:
//! if let Some(code) = ptscope_interrupt::children::sentinel_main() {
//!     std::process::exit(code); // this process was the sentinel
//! }
//! ptscope_interrupt::children::guard_descendants().expect("sentinel");
//! let mut cmd = std::process::Command::new("sleep");
//! ptscope_interrupt::children::die_with_ptscope(cmd.arg("60"));
//! let _child = cmd.spawn().expect("sleep");
//! // ... a normal end leaves what the program started on purpose (a daemon) alone:
//! ptscope_interrupt::children::stand_down();
//! ```

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// How often the sentinel notes ptscope's tree.
pub const POLL: Duration = Duration::from_millis(25);

/// The first argument that makes ptscope's binary the sentinel (see [`sentinel_main`]).
const SENTINEL_ARG: &str = "--ptscope-sentinel";

/// The name the sentinel shows in `ps`.
const SENTINEL_NAME: &str = "ptscope-sentinel";

/// Write end of the pipe to the sentinel (-1 when there is none): it sees EOF when
/// ptscope ends, however it ends.
static SENTINEL_FD: AtomicI32 = AtomicI32::new(-1);

/// Makes the process `cmd` starts die (SIGKILL) when ptscope does: `PR_SET_PDEATHSIG`.
///
/// The kernel sends it when the *thread* that spawned the child ends, so spawn from a
/// thread that outlives the child (ptscope's own threads wait for what they start).
pub fn die_with_ptscope(cmd: &mut Command) -> &mut Command {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: prctl, getppid and _exit are async-signal-safe, as pre_exec requires.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // ptscope died between fork and prctl: the signal will never come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        })
    }
}

/// Starts the sentinel that kills what is left of ptscope's process tree when ptscope
/// ends without [`stand_down`], and makes ptscope the subreaper of its descendants.
///
/// Call it before any thread is started (it forks): a process with more threads gets an
/// error and no sentinel. The sentinel is ptscope's own binary run again
/// ([`sentinel_main`] must be the first thing `main` does), detached (its own session,
/// no standard streams), so it neither holds ptscope's output open nor gets the
/// terminal's Ctrl-C.
pub fn guard_descendants() -> io::Result<()> {
    if SENTINEL_FD.load(Ordering::SeqCst) >= 0 {
        return Ok(());
    }
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(io::Error::other(format!(
            "the sentinel must be started before any thread ({threads} running)"
        )));
    }
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let start =
        start_time(me as u32).ok_or_else(|| io::Error::other("cannot read /proc/self/stat"))?;
    let exe = cstr("/proc/self/exe")?;
    let args = [
        cstr(SENTINEL_NAME)?,
        cstr(SENTINEL_ARG)?,
        cstr(&me.to_string())?,
        cstr(&start.to_string())?,
    ];
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let devnull = cstr("/dev/null")?;
    let watch = pipe()?;
    // Says whether exec failed: closed by a successful exec (close-on-exec).
    let report = pipe()?;
    // SAFETY: this process has one thread (checked above), so the child may run any
    // code; the grandchild only makes async-signal-safe calls before exec anyway.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: only system calls on our own descriptors, then exec or _exit.
        unsafe {
            // A second fork, so the sentinel is no child of ptscope's (ptscope waits
            // for its children; the sentinel lives as long as ptscope).
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            libc::setsid();
            let null = libc::open(devnull.as_ptr(), libc::O_RDWR);
            if null >= 0 {
                for fd in 0..3 {
                    libc::dup2(null, fd);
                }
            }
            // The watched end becomes fd 3 (dup2 clears close-on-exec), the exec report
            // fd 4 (kept close-on-exec); nothing else ptscope had open stays open. Both
            // are first moved out of the way, as either may be 3 or 4 now.
            let w = libc::fcntl(watch.0, libc::F_DUPFD_CLOEXEC, 100);
            let r = libc::fcntl(report.1, libc::F_DUPFD_CLOEXEC, 100);
            if w < 0 || r < 0 || libc::dup2(w, 3) != 3 || libc::dup2(r, 4) != 4 {
                let b = [1u8];
                libc::write(report.1, b.as_ptr().cast(), 1);
                libc::_exit(126);
            }
            libc::fcntl(4, libc::F_SETFD, libc::FD_CLOEXEC);
            if libc::syscall(libc::SYS_close_range, 5u32, u32::MAX, 0u32) != 0 {
                for fd in 5..1024 {
                    libc::close(fd);
                }
            }
            libc::execv(exe.as_ptr(), argv.as_ptr());
            let b = [1u8];
            libc::write(4, b.as_ptr().cast(), 1);
            libc::_exit(127);
        }
    }
    // SAFETY: reaping the intermediate child, closing our copies of the ends the
    // sentinel keeps.
    unsafe {
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
        libc::close(watch.0);
        libc::close(report.1);
    }
    let mut b = [0u8; 1];
    // SAFETY: reading into a local buffer; EOF (0) means exec succeeded.
    let n = unsafe { libc::read(report.0, b.as_mut_ptr().cast(), 1) };
    // SAFETY: our own descriptor.
    unsafe { libc::close(report.0) };
    if n > 0 {
        // SAFETY: our own descriptor.
        unsafe { libc::close(watch.1) };
        return Err(io::Error::other("cannot start the sentinel (exec failed)"));
    }
    SENTINEL_FD.store(watch.1, Ordering::SeqCst);
    // Orphaned descendants become ptscope's children, not init's: still in the tree the
    // sentinel notes, and waited for by the emulate backend.
    // SAFETY: prctl with these arguments only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    Ok(())
}

/// ptscope is ending normally, having stopped what it had to: the sentinel leaves the
/// remaining descendants alone (what the program started on purpose, e.g. a daemon).
pub fn stand_down() {
    let fd = SENTINEL_FD.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        let b = [b'S'];
        // SAFETY: writing one byte to our own pipe, then closing it.
        unsafe {
            libc::write(fd, b.as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

/// If this process was started as the sentinel, runs it and returns its exit status.
pub fn sentinel_main() -> Option<i32> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(SENTINEL_ARG) {
        return None;
    }
    let pid: u32 = args.get(2)?.parse().ok()?;
    let start: u64 = args.get(3)?.parse().ok()?;
    if let Ok(name) = cstr(SENTINEL_NAME) {
        // SAFETY: PR_SET_NAME reads a NUL-terminated string of ours.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
    Some(watch(pid, start, 3))
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::other("a NUL byte in an argument"))
}

fn pipe() -> io::Result<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 with a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

/// A process's start time (clock ticks after boot): with the pid, it names one process
/// even after the pid is reused.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`: comm may hold spaces and parentheses; starttime is
    // field 22, the 20th after the comm.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    out
}

/// Adds every descendant of `pid` now, with its start time, to `into` (which may hold
/// some already: they are walked again, as they may have new children).
fn descendants(pid: u32, into: &mut HashMap<u32, u64>) {
    let mut seen = std::collections::HashSet::new();
    let mut todo = children(pid);
    while let Some(c) = todo.pop() {
        if !seen.insert(c) {
            continue;
        }
        if let Some(s) = start_time(c) {
            into.insert(c, s);
            todo.extend(children(c));
        }
    }
}

/// The sentinel's loop: note ptscope's tree until it ends; then, unless told to stand
/// down, stop and kill whatever of it is left. `fd` is the pipe ptscope holds open.
fn watch(ptscope: u32, start: u64, fd: i32) -> i32 {
    let mut known: HashMap<u32, u64> = HashMap::new();
    loop {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, POLL.as_millis() as i32) };
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if r != 0 {
            let mut b = [0u8; 1];
            // SAFETY: reading into a local buffer from our pipe.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
            if n == 1 && b[0] == b'S' {
                return 0;
            }
            // EOF, or the pipe failed: ptscope is gone.
            break;
        }
        if start_time(ptscope) != Some(start) {
            break;
        }
        // Keep what is still running, add what is new.
        known.retain(|&pid, s| start_time(pid) == Some(*s));
        descendants(ptscope, &mut known);
    }
    sweep(ptscope, start, known);
    0
}

/// A process held by a pidfd, so signals reach it and no later owner of its pid.
struct Held {
    pid: u32,
    fd: i32,
}

impl Held {
    /// Opens `pid` if it is still the process that started at `start`.
    fn open(pid: u32, start: u64) -> Option<Held> {
        // SAFETY: pidfd_open with a pid and no flags.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) } as i32;
        if fd < 0 {
            // No pidfds (Linux < 5.3): plain pids, checked just before signalling.
            return (start_time(pid) == Some(start)).then_some(Held { pid, fd: -1 });
        }
        let h = Held { pid, fd };
        // Checked after opening: the pidfd is the process that had the pid then.
        (start_time(pid) == Some(start)).then_some(h)
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling through our own pidfd, or kill(2).
        unsafe {
            if self.fd >= 0 {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    self.fd,
                    sig,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                );
            } else {
                libc::kill(self.pid as libc::pid_t, sig);
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.fd >= 0 {
            // SAFETY: closing our own pidfd.
            unsafe { libc::close(self.fd) };
        }
    }
}

/// Stops every process noted and everything under them (so none forks meanwhile), until
/// no new one appears, then kills them all.
fn sweep(ptscope: u32, start: u64, mut known: HashMap<u32, u64>) {
    // ptscope's own entry lasts until its parent reaps it: its tree may still be there.
    if start_time(ptscope) == Some(start) {
        descendants(ptscope, &mut known);
    }
    let mut held: HashMap<u32, Held> = HashMap::new();
    let mut todo: Vec<(u32, u64)> = known.into_iter().collect();
    for _round in 0..64 {
        if todo.is_empty() {
            break;
        }
        let mut next = HashMap::new();
        for (pid, s) in todo.drain(..) {
            if held.contains_key(&pid) {
                continue;
            }
            if let Some(h) = Held::open(pid, s) {
                h.signal(libc::SIGSTOP);
                held.insert(pid, h);
            }
        }
        for &pid in held.keys() {
            descendants(pid, &mut next);
        }
        todo = next
            .into_iter()
            .filter(|(p, _)| !held.contains_key(p))
            .collect();
    }
    for h in held.values() {
        h.signal(libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_name_processes_and_children_are_found() {
        let me = std::process::id();
        assert!(start_time(me).is_some());
        assert_eq!(start_time(u32::MAX), None);
        let mut c = Command::new("sleep");
        c.arg("5");
        let mut child = die_with_ptscope(&mut c).spawn().expect("sleep");
        let mut found = HashMap::new();
        descendants(me, &mut found);
        assert!(found.contains_key(&child.id()), "{found:?}");
        let _ = child.kill();
        let _ = child.wait();
    }
}
