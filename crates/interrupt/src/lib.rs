//! Interrupts as documented behaviour: Ctrl-C, SIGTERM and SIGHUP are *presses*, counted.
//!
//! The program decides what each press means (stop recording, stop decoding, quit) by
//! looking at [`presses`]; only the last one, quitting, happens here, on a watcher
//! thread rather than in the signal handler, so that it can remove registered
//! temporary files and print a message before exiting.
//!
//! ```
//! // The first press stops the work gracefully, the second quits (exit 130) after
//! // removing the half-written output.
//! ptscope_interrupt::install().expect("signal handlers");
//! let base = ptscope_interrupt::presses();
//! ptscope_interrupt::say_at(base + 1, "ptscope: stopping (Ctrl-C again to quit)");
//! ptscope_interrupt::set_quit(base + 2, "ptscope: interrupted again; quitting");
//! let dir = tempfile::tempdir().expect("scratch directory");
//! let _guard = ptscope_interrupt::remove_on_quit(dir.path().join("out.partial"));
//! let mut steps = 0;
//! while ptscope_interrupt::presses() == base && steps < 3 {
//!     steps += 1; // ... work in small steps, checking for a press between them ...
//! }
//! assert_eq!(steps, 3);
//! ```
//!
//! The crate also keeps ptscope's children from outliving it, SIGKILL included
//! ([`children`]).
//!
//! This crate is ptscope's only owner of these signals (as samply's `ctrl_c` module is
//! samply's): callers look at [`presses`] and set the stage's messages, never install
//! handlers of their own. Why not the `ctrlc` crate: it handles SIGINT and SIGTERM but
//! not SIGHUP, cannot tell a terminal's Ctrl-C (sent to the whole foreground process
//! group) from a `kill` aimed at ptscope alone (which must be passed on to the traced
//! program), and exits nowhere near the files it should clean up.

#![warn(missing_docs)]

pub mod children;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static PRESSES: AtomicUsize = AtomicUsize::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);
static LAST_FROM_USER: AtomicBool = AtomicBool::new(false);
/// Write end of the self-pipe the handler wakes the watcher through (-1 before install).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// What the watcher does at each press; set by the program for its current stage.
struct Policy {
    /// Presses handled (their message printed), by the watcher or by [`catch_up`].
    seen: usize,
    quit_at: usize,
    quit_message: String,
    on_press: Vec<(usize, String)>,
    cleanup: Vec<(u64, PathBuf)>,
    next_id: u64,
}

fn policy() -> &'static Mutex<Policy> {
    static P: OnceLock<Mutex<Policy>> = OnceLock::new();
    P.get_or_init(|| {
        Mutex::new(Policy {
            seen: 0,
            quit_at: 0,
            quit_message: String::new(),
            on_press: Vec::new(),
            cleanup: Vec::new(),
            next_id: 0,
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Policy> {
    // A panic elsewhere while holding the lock must not stop Ctrl-C from working.
    policy().lock().unwrap_or_else(|e| e.into_inner())
}

/// The signals treated as a press.
pub const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO (or null, handled).
    let code = unsafe { info.as_ref().map(|i| i.si_code).unwrap_or(0) };
    // kill(2)/sigqueue(3) are aimed at ptscope alone; a terminal's Ctrl-C (SI_KERNEL)
    // already reached the whole foreground group, the program included.
    LAST_FROM_USER.store(
        code == libc::SI_USER || code == libc::SI_QUEUE,
        Ordering::SeqCst,
    );
    LAST_SIGNAL.store(sig, Ordering::SeqCst);
    PRESSES.fetch_add(1, Ordering::SeqCst);
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = [1u8];
        // SAFETY: write(2) is async-signal-safe; a full pipe only loses a wake-up, and
        // the watcher re-reads the counter anyway.
        unsafe { libc::write(fd, b.as_ptr().cast(), 1) };
    }
}

/// Installs the handlers and the watcher thread (once; later calls do nothing).
pub fn install() -> std::io::Result<()> {
    static DONE: OnceLock<()> = OnceLock::new();
    if DONE.get().is_some() {
        return Ok(());
    }
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 with a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_fd, write_fd] = fds;
    // SAFETY: setting O_NONBLOCK on our own fd, so the handler never blocks.
    unsafe {
        let fl = libc::fcntl(write_fd, libc::F_GETFL);
        libc::fcntl(write_fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    WAKE_FD.store(write_fd, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("ptscope-interrupt".into())
        .spawn(move || watch(read_fd))?;
    for sig in SIGNALS {
        // SAFETY: installing an async-signal-safe handler (atomics and write(2) only).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    let _ = DONE.set(());
    Ok(())
}

/// The watcher: prints the message the program set for each press, and quits at the
/// quitting press after removing what was registered with [`remove_on_quit`].
fn watch(read_fd: i32) {
    loop {
        let mut buf = [0u8; 64];
        // SAFETY: reading into a local buffer from our own pipe.
        let n = unsafe { libc::read(read_fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return;
        }
        catch_up();
    }
}

/// Handles the presses not handled yet, on the calling thread: prints each one's message
/// and quits at the quitting one. The watcher thread does this at every press; a stage
/// that ends because of a press calls it before saying so, or the program could print
/// its last words and exit before the watcher printed the press's message.
pub fn catch_up() {
    let now = PRESSES.load(Ordering::SeqCst);
    let mut p = lock();
    while p.seen < now {
        p.seen += 1;
        let seen = p.seen;
        if p.quit_at != 0 && seen >= p.quit_at {
            for (_, path) in &p.cleanup {
                remove(path);
            }
            say(&p.quit_message);
            // 130 = 128 + SIGINT, what shells report for a Ctrl-C'd program.
            std::process::exit(130);
        }
        if let Some((_, m)) = p.on_press.iter().find(|(at, _)| *at == seen) {
            say(m);
        }
    }
}

fn remove(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

/// Prints without panicking: after SIGHUP the terminal may be gone.
fn say(msg: &str) {
    if !msg.is_empty() {
        let _ = writeln!(std::io::stderr(), "\n{msg}");
    }
}

/// Presses so far (Ctrl-C, SIGTERM, SIGHUP).
pub fn presses() -> usize {
    PRESSES.load(Ordering::SeqCst)
}

/// The last press: its signal, and whether it was sent to ptscope alone (`kill`) rather
/// than by a terminal to the whole foreground process group.
pub fn last_press() -> Option<(i32, bool)> {
    let s = LAST_SIGNAL.load(Ordering::SeqCst);
    (s != 0).then(|| (s, LAST_FROM_USER.load(Ordering::SeqCst)))
}

/// From the `at`-th press on (counted from the start of the program), quit at once,
/// printing `message`; 0 never quits.
pub fn set_quit(at: usize, message: impl Into<String>) {
    let mut p = lock();
    p.quit_at = at;
    p.quit_message = message.into();
}

/// Prints `message` when the `at`-th press arrives (unless it quits), or now if that
/// press was already handled: a press can come while the program is still getting to the
/// stage the message is for.
pub fn say_at(at: usize, message: impl Into<String>) {
    let message = message.into();
    let mut p = lock();
    if p.seen >= at {
        say(&message);
    }
    p.on_press.retain(|(a, _)| *a != at);
    p.on_press.push((at, message));
}

/// Removes `path` (a file or a directory tree) if ptscope quits at a press; dropping the
/// returned guard forgets it (the owner cleans up itself on the normal path).
pub fn remove_on_quit(path: impl Into<PathBuf>) -> CleanupGuard {
    let mut p = lock();
    let id = p.next_id;
    p.next_id += 1;
    p.cleanup.push((id, path.into()));
    CleanupGuard { id }
}

/// Keeps a path registered with [`remove_on_quit`] until dropped.
#[derive(Debug)]
pub struct CleanupGuard {
    id: u64,
}

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        lock().cleanup.retain(|(id, _)| *id != self.id);
    }
}

/// Waits until a press arrives after `seen` presses or `timeout` passes; true on a press.
pub fn wait_for_press(seen: usize, timeout: Duration) -> bool {
    let start = Instant::now();
    while presses() <= seen {
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5).min(timeout));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_counts_as_a_press_and_the_guard_unregisters() {
        install().expect("install");
        let before = presses();
        // SAFETY: signalling ourselves; the handler only counts.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        assert!(wait_for_press(before, Duration::from_secs(5)));
        assert_eq!(last_press(), Some((libc::SIGTERM, true)));
        let g = remove_on_quit("/nonexistent/ptscope-test");
        assert_eq!(lock().cleanup.len(), 1);
        drop(g);
        assert!(lock().cleanup.is_empty());
    }
}
