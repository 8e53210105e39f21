//! The processes of an emulate recording while it runs (ptscope reaps the children the
//! program leaves behind) and the trigger hits it took.

use crate::recording::process_logs;
use anyhow::{Context, Result};
use ptscope_blocklog::format::{KIND_HEADER, KIND_HIT};
use ptscope_blocklog::{Chunks, Header, Hit};
use std::path::Path;

/// Makes ptscope the reaper of the program's orphaned descendants while it records
/// (`PR_SET_CHILD_SUBREAPER`), so children that outlive the program are waited for.
pub(crate) struct Reaper {
    presses: usize,
}

impl Reaper {
    /// Becomes the reaper (a failure only means orphans are not waited for).
    pub(crate) fn start() -> Self {
        // SAFETY: prctl with these arguments only sets a flag of this process.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        Reaper {
            presses: ptscope_interrupt::presses(),
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
        // SAFETY: as in `start`.
        unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) };
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
