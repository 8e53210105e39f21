//! Every process of an emulate recording: the first one's log ([`crate::LOG_NAME`]) and
//! one `emulate-blocks-PID.log` per forked child (the plugin starts it in the child; it
//! reuses the parent's block descriptions below the count its fork chunk gives). The
//! processes' events are merged into one time-ordered stream, each under its own pid.

use crate::clock::ClockKind;
use crate::{snapshot, Events, Stats, LOG_NAME, NS_PER_INSN};
use anyhow::{Context, Result};
use ptscope_event::source::{EventSource, Finished, SourceError};
use ptscope_event::{Event, StringTable};
use ptsim::blocklog::{BlockLog, Hit, LogError, TbDef};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A child's log name in the recording directory.
pub(crate) fn child_log_name(pid: u32) -> String {
    format!("{}-{pid}.log", LOG_NAME.trim_end_matches(".log"))
}

/// The pid a child's log file name carries.
fn child_pid(name: &str) -> Option<u32> {
    name.strip_prefix(LOG_NAME.trim_end_matches(".log"))?
        .strip_prefix('-')?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The recording's logs: the first process's, then the children's by pid.
pub fn process_logs(dir: &Path) -> Result<Vec<(Option<u32>, PathBuf)>> {
    let mut children: Vec<(Option<u32>, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let pid = child_pid(e.file_name().to_str()?)?;
            Some((Some(pid), e.path()))
        })
        .collect();
    children.sort();
    let mut out = vec![(None, dir.join(LOG_NAME))];
    out.extend(children);
    Ok(out)
}

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

/// The logs last read by [`Trace::open`], by directory: its snapshots are opened one
/// after the other, and reading the logs for each would cost snapshots × log size.
static LAST_READ: std::sync::Mutex<Option<(PathBuf, Arc<Logs>)>> = std::sync::Mutex::new(None);

/// Every process's log, and the notices reading them gave.
type Logs = (Vec<ProcLog>, Vec<String>);

/// [`read_all`], reusing the last answer for the same directory while it is the same
/// recording (its first log's length and modification time unchanged).
fn read_all_cached(dir: &Path) -> Result<Arc<Logs>> {
    let key = |dir: &Path| {
        let m = std::fs::metadata(dir.join(LOG_NAME)).ok()?;
        Some(dir.join(format!("{}:{:?}", m.len(), m.modified().ok()?)))
    };
    let k = key(dir).unwrap_or_else(|| dir.to_path_buf());
    let mut last = LAST_READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((d, logs)) = last.as_ref() {
        if *d == k {
            return Ok(logs.clone());
        }
    }
    // Drop the old recording's logs before reading the next one's.
    *last = None;
    let logs = Arc::new(read_all(dir)?);
    *last = Some((k, logs.clone()));
    Ok(logs)
}

/// One process's log, read.
pub(crate) struct ProcLog {
    pub(crate) log: BlockLog,
}

/// Reads every process's log; a log cut mid-write is read up to its last whole chunk,
/// with a notice; a child whose log cannot be read is left out, with a notice.
pub(crate) fn read_all(dir: &Path) -> Result<Logs> {
    let mut notices = Vec::new();
    let mut logs: Vec<ProcLog> = Vec::new();
    for (child, path) in process_logs(dir)? {
        let parent_tbs = |pid: u32| -> Option<Vec<Option<TbDef>>> {
            logs.iter()
                .find(|p| p.log.pid == pid)
                .map(|p| p.log.tbs.clone())
        };
        match read_one(&path, &parent_tbs, &mut notices) {
            Ok(log) => logs.push(ProcLog { log }),
            Err(e) if child.is_some() => notices.push(format!(
                "the forked child {} is not in the trace: {e:#}",
                child.unwrap_or(0)
            )),
            Err(e) => return Err(e),
        }
    }
    Ok((logs, notices))
}

/// Reads one log (a child's with its parent's blocks), cut back to whole chunks if needed.
fn read_one(
    path: &Path,
    parent: &dyn Fn(u32) -> Option<Vec<Option<TbDef>>>,
    notices: &mut Vec<String>,
) -> Result<BlockLog> {
    // Mapped, not read: the parse copies what it keeps (a gzip run's log is 220 MB).
    let file = ptscope_symbols::MappedFile::open_regular(path)
        .with_context(|| format!("cannot read the emulate block log {}", path.display()))?;
    let data = file.bytes();
    // Executions are kept at 4 bytes each, except in a log with trigger hits: its
    // snapshots are cut from whole executions (`snapshot.rs`), so it is parsed again whole.
    let parse = |d: &[u8]| {
        let log = BlockLog::parse_child_as(d, |f| parent(f.parent), true)?;
        if log.hits.is_empty() && log.ring_copies.is_empty() {
            Ok(log)
        } else {
            BlockLog::parse_child_as(d, |f| parent(f.parent), false)
        }
    };
    match parse(data) {
        Ok(b) => Ok(b),
        Err(LogError::Malformed { offset, what })
            if offset > 0
                && (what.contains("past the end") || what.contains("truncated chunk")) =>
        {
            notices.push(format!(
                "the block log {} ends mid-write (qemu was stopped while writing it): the \
                 trace keeps the {offset} bytes written whole; the last moments of some \
                 threads are missing",
                path.display()
            ));
            parse(&data[..offset])
                .with_context(|| format!("cannot read the emulate block log {}", path.display()))
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot read the emulate block log {}", path.display()))
        }
    }
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

/// The snapshots of a recording: `None` for the whole recording (no trigger hit), else
/// `(process index, hit)` for each hit, processes in [`process_logs`] order.
fn snapshot_list(logs: &[ProcLog]) -> Vec<Option<(usize, Hit)>> {
    let hits: Vec<Option<(usize, Hit)>> = logs
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.log.hits.iter().map(move |h| Some((i, *h))))
        .collect();
    if hits.is_empty() {
        vec![None]
    } else {
        hits
    }
}

/// The trigger hits recorded in `dir`, in snapshot order. Only the chunk headers and the
/// hit chunks are read (a full-execution log can be gigabytes).
pub fn hits(dir: &Path) -> Result<Vec<HitReport>> {
    use std::io::{Read, Seek, SeekFrom};
    let u32_at = |p: &[u8], at: usize| {
        p.get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |p: &[u8], at: usize| {
        p.get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let mut out = Vec::new();
    for (_, path) in process_logs(dir)? {
        let mut f = std::fs::File::open(&path)
            .with_context(|| format!("cannot read the emulate block log {}", path.display()))?;
        let mut pid = 0;
        let mut head = [0u8; 16];
        while f.read_exact(&mut head).is_ok() {
            let kind = head[0];
            let tid = u32_at(&head, 4);
            let len = u64_at(&head, 8);
            if kind == ptsim::blocklog::KIND_HEADER || kind == ptsim::blocklog::KIND_HIT {
                let mut p = vec![0u8; len.min(64) as usize];
                if f.read_exact(&mut p).is_err() {
                    break;
                }
                if kind == ptsim::blocklog::KIND_HEADER {
                    pid = u32_at(&p, 0);
                } else {
                    out.push(HitReport {
                        pid,
                        tid,
                        address: u64_at(&p, 24),
                        trigger: u32_at(&p, 4),
                    });
                }
                let rest = len.saturating_sub(p.len() as u64);
                let Ok(rest) = i64::try_from(rest) else { break };
                if f.seek(SeekFrom::Current(rest)).is_err() {
                    break;
                }
                continue;
            }
            let Ok(len) = i64::try_from(len) else { break };
            if f.seek(SeekFrom::Current(len)).is_err() {
                break;
            }
        }
    }
    Ok(out)
}

/// How many snapshots the recording in `dir` holds: one per trigger hit, or one.
pub fn snapshot_count(dir: &Path) -> Result<usize> {
    Ok(hits(dir)?.len().max(1))
}

/// The events of one snapshot of an emulate recording (every process of it, merged in
/// time order, each under its own pid).
pub struct Trace {
    parts: Vec<Events>,
    pending: Vec<Option<Event>>,
    /// The names all parts intern into: lent to a part while it makes an event.
    strings: StringTable,
    notices: Vec<String>,
    /// What the user should know that does not make the trace incomplete.
    infos: Vec<String>,
    /// A trigger hit's snapshot (timed by the instruction clock).
    at_hit: bool,
    stats: Stats,
    produced: u64,
}

impl Trace {
    /// Reads the recording in `dir` and makes the events of snapshot `snapshot` (an index
    /// below [`snapshot_count`]); `comm` names the threads; times follow `clock`.
    pub fn open(dir: &Path, comm: &str, snapshot: usize, clock: ClockKind) -> Result<Self> {
        let read = read_all_cached(dir)?;
        // Said once, not once per snapshot.
        let notices = if snapshot == 0 {
            read.1.clone()
        } else {
            Vec::new()
        };
        let logs = &read.0;
        let list = snapshot_list(logs);
        let Some(&which) = list.get(snapshot) else {
            anyhow::bail!(
                "the emulate recording in {} has {} snapshots, not {}: a log is damaged",
                dir.display(),
                list.len(),
                snapshot + 1
            );
        };
        let at_hit = which.is_some();
        let chosen: Vec<BlockLog> = match which {
            // The whole recording is its only snapshot: the logs are moved, not copied
            // (a full-execution log can be large).
            None => {
                drop(list);
                if let Ok(mut last) = LAST_READ.lock() {
                    *last = None;
                }
                match Arc::try_unwrap(read) {
                    Ok((logs, _)) => logs.into_iter().map(|p| p.log).collect(),
                    Err(read) => read.0.iter().map(|p| p.log.clone()).collect(),
                }
            }
            Some((i, hit)) => {
                let log = &logs[i].log;
                // The previous hit of the same process: its snapshot showed what came before.
                let since = log
                    .hits
                    .iter()
                    .filter(|h| h.hit < hit.hit)
                    .map(|h| h.clock)
                    .max();
                vec![snapshot::at_hit(log, &hit, since)]
            }
        };
        let time = |c: u64| c.saturating_mul(NS_PER_INSN);
        let mut strings = StringTable::new();
        let mut parts = Vec::new();
        let mut stats = Stats::default();
        for log in &chosen {
            // A hit's snapshot is cut from whole executions without their host stamps.
            let mut ev = if at_hit {
                Events::from_log(log, comm, strings, &time)
            } else {
                Events::from_log_clocked(log, comm, strings, clock)
            };
            strings = std::mem::take(ev.strings_mut());
            let s = ev.stats();
            stats.instructions += s.instructions;
            stats.blocks += s.blocks;
            stats.threads += s.threads;
            stats.events += s.events;
            parts.push(ev);
        }
        let mut infos: Vec<String> = Vec::new();
        if at_hit && snapshot == 0 {
            infos.push(
                "emulate backend: a trigger's snapshots are timed by the virtual instruction \
                 clock (1 guest instruction = 1 ns, no syscall time), whatever --clock says"
                    .into(),
            );
        }
        for ev in &parts {
            for i in ev.infos() {
                // Said once for the trace, not once per process or snapshot.
                if (snapshot == 0 || !i.starts_with("emulate backend: times are"))
                    && !at_hit
                    && !infos.contains(i)
                {
                    infos.push(i.clone());
                }
            }
        }
        let pending = parts.iter().map(|_| None).collect();
        let mut t = Trace {
            parts,
            pending,
            strings,
            notices,
            infos,
            at_hit,
            stats,
            produced: 0,
        };
        for i in 0..t.parts.len() {
            t.fill(i);
        }
        Ok(t)
    }

    /// Makes part `i`'s next event, with the shared names lent to it.
    fn fill(&mut self, i: usize) {
        let part = &mut self.parts[i];
        std::mem::swap(&mut self.strings, part.strings_mut());
        self.pending[i] = part.next_event();
        std::mem::swap(&mut self.strings, part.strings_mut());
    }

    /// The next event, in time order (the first process first at equal times).
    pub fn next_event(&mut self) -> Option<Event> {
        let i = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, e)| Some((e.as_ref()?.time().unwrap_or(0), i)))
            .min()?
            .1;
        let e = self.pending[i].take();
        self.fill(i);
        self.produced += 1;
        e
    }

    /// The names the events refer to.
    pub fn strings(&self) -> &StringTable {
        &self.strings
    }

    /// Figures about the recording (all its processes).
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Events not yet handed out.
    pub fn remaining(&self) -> usize {
        self.stats.events.saturating_sub(self.produced) as usize
    }

    /// What the user should know about this recording (a log cut short, a child lost).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// What the user should know that does not make the trace incomplete: the clock,
    /// threads that exec'd.
    pub fn infos(&self) -> &[String] {
        &self.infos
    }

    /// Instants for the trace itself, `(ns from the first event, text)`: the clock, then
    /// each exec of every process.
    pub fn markers(&self) -> Vec<(u64, String)> {
        let origin = self.parts.iter().map(|p| p.origin()).min().unwrap_or(0);
        let mut out: Vec<(u64, String)> = Vec::new();
        if self.at_hit {
            out.push((
                0,
                format!(
                    "clock: {}",
                    crate::FALLBACK_CLOCK.split(':').next().unwrap_or("")
                ),
            ));
        }
        for p in &self.parts {
            for (t, text) in p.markers() {
                if text.starts_with("clock: ") && (self.at_hit || out.iter().any(|m| m.1 == text)) {
                    continue;
                }
                out.push(((t + p.origin()).saturating_sub(origin), text));
            }
        }
        out.sort_by_key(|m| m.0);
        out
    }
}

impl EventSource for Trace {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(Trace::next_event(self))
    }
    fn strings(&self) -> &StringTable {
        &self.strings
    }
    fn stats(&self) -> ptscope_event::source::Stats {
        ptscope_event::source::Stats {
            events: self.stats.events - self.remaining() as u64,
            ..Default::default()
        }
    }
    fn warnings(&self) -> Vec<ptscope_event::source::Warning> {
        Vec::new()
    }
    fn finish(self: Box<Self>) -> Finished {
        let markers = self.markers();
        Finished {
            // A log cut short makes the trace incomplete: said, and the exit status shows it.
            incomplete: self.notices,
            markers,
            ..Finished::new(self.strings)
        }
    }
}
