//! The processes of an emulate recording while it runs (ptscope reaps the children the
//! program leaves behind) and the trigger hits it took.

use crate::recording::process_logs;
use anyhow::{Context, Result};
use ptscope_blocklog::format::{KIND_EXEC, KIND_HEADER, KIND_HIT, KIND_RING_COPY};
use ptscope_blocklog::{Chunks, Header, Hit};
use std::path::Path;

/// Waits for qemu, stopping the program at the first press (Ctrl-C, SIGTERM, SIGHUP)
/// after `base`, as the other backends do: a signal sent to ptscope alone (`kill`,
/// `timeout`, a supervisor) is passed on to the program, as a terminal's Ctrl-C reaches
/// it directly (qemu is in ptscope's process group). A program still running 0.5 s
/// later gets SIGTERM, 2.5 s later (or at the next press) SIGKILL: its rings survive
/// it (they are mapped files), so the trace still holds its last moments.
pub(crate) fn wait_stopping_at_press(
    child: &mut std::process::Child,
    base: usize,
) -> std::io::Result<std::process::ExitStatus> {
    use std::time::{Duration, Instant};
    let pid = child.id() as libc::pid_t;
    // When the first press came, and the presses counted then.
    let mut pressed: Option<(Instant, usize)> = None;
    let mut termed = false;
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s);
        }
        let now = ptscope_interrupt::presses();
        match pressed {
            None if now > base => {
                if let Some((sig, true)) = ptscope_interrupt::last_press() {
                    // SAFETY: signalling our own unreaped child.
                    unsafe { libc::kill(pid, sig) };
                }
                pressed = Some((Instant::now(), now));
            }
            Some((at, n)) => {
                if now > n || at.elapsed() >= Duration::from_millis(2500) {
                    let _ = child.kill();
                } else if !termed && at.elapsed() >= Duration::from_millis(500) {
                    termed = true;
                    // SAFETY: as above.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
            }
            None => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Makes ptscope the reaper of the program's orphaned descendants while it records
/// (`PR_SET_CHILD_SUBREAPER`), so children that outlive the program are waited for.
pub(crate) struct Reaper {
    presses: usize,
    /// Whether ptscope already was a subreaper (the sentinel makes it one for its life).
    was: bool,
}

impl Reaper {
    /// Becomes the reaper (a failure only means orphans are not waited for).
    pub(crate) fn start() -> Self {
        let mut was: libc::c_int = 0;
        // SAFETY: prctl with these arguments reads or sets a flag of this process.
        unsafe {
            libc::prctl(
                libc::PR_GET_CHILD_SUBREAPER,
                &mut was as *mut libc::c_int,
                0,
                0,
                0,
            );
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        Reaper {
            presses: ptscope_interrupt::presses(),
            was: was != 0,
        }
    }

    /// Once the program has ended: waits for the descendants it left running (they were
    /// reparented to us). A Ctrl-C reaches them too (same process group); one pressed
    /// while waiting also kills those that ignore it.
    pub(crate) fn wait_for_orphans(self, say: &dyn Fn(&str)) {
        let mut said = false;
        let mut killed = false;
        loop {
            let mut st = 0;
            // SAFETY: waitpid on any child with a valid status pointer.
            let pid = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG) };
            if pid > 0 {
                continue;
            }
            if pid < 0 {
                break; // ECHILD: none left.
            }
            if !said {
                said = true;
                say(
                    "the program has ended; waiting for the child processes it left running \
                     (Ctrl-C stops them)",
                );
            }
            if !killed && ptscope_interrupt::presses() > self.presses {
                killed = true;
                for child in own_children() {
                    // SAFETY: signalling a process that is our child.
                    unsafe { libc::kill(child as i32, libc::SIGKILL) };
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if !self.was {
            // SAFETY: as in `start`.
            unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) };
        }
    }
}

/// Pids of the processes whose parent is ptscope.
fn own_children() -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == me).then_some(pid)
        })
        .collect()
}

/// A trigger hit as the recording reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HitReport {
    /// The process that hit.
    pub pid: u32,
    /// The thread that hit.
    pub tid: u32,
    /// The trigger block's address.
    pub address: u64,
    /// Index of the trigger point (in the order given to [`crate::record_with`]).
    pub trigger: u32,
}

/// The trigger hits recorded in `dir`, in snapshot order. Only the chunk headers and the
/// hit chunks are read (a full-execution log can be gigabytes).
pub fn hits(dir: &Path) -> Result<Vec<HitReport>> {
    let mut out = Vec::new();
    for (_, path) in process_logs(dir)? {
        let file = ptscope_symbols::MappedFile::open_regular(&path)
            .with_context(|| format!("cannot read the emulate block log {}", path.display()))?;
        let mut pid = 0;
        for c in Chunks::new(file.bytes()) {
            let Ok(c) = c else { break };
            match c.kind {
                KIND_HEADER => {
                    if let Ok(h) = Header::parse(c.payload, c.offset) {
                        pid = h.pid;
                    }
                }
                KIND_HIT => {
                    if let Ok(h) = Hit::parse(&c) {
                        out.push(HitReport {
                            pid,
                            tid: h.tid,
                            address: h.address,
                            trigger: h.trigger,
                        });
                    }
                }
                // Its header was read: give back what the kernel mapped around it.
                // SAFETY: the payload lies in `file`, a read-only file mapping.
                KIND_EXEC | KIND_RING_COPY => unsafe { crate::recording::release_pages(c.payload) },
                _ => {}
            }
        }
    }
    Ok(out)
}

/// How many snapshots the recording in `dir` holds: one per trigger hit, or one.
pub fn snapshot_count(dir: &Path) -> Result<usize> {
    Ok(hits(dir)?.len().max(1))
}
