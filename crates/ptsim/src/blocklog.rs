//! Reader for the block log written by the `ptsim-plugin` QEMU plugin.
//!
//! The format is described in `tools/ptsim-plugin/src/lib.rs` and `docs/simulation.md`.

use std::path::Path;

/// Chunk kind: process header.
pub const KIND_HEADER: u8 = 0;
/// Chunk kind: translated-block descriptions.
const KIND_TBS: u8 = 1;
/// Chunk kind: one thread's block executions.
pub const KIND_EXEC: u8 = 2;
/// Chunk kind: a `/proc/self/maps` snapshot.
const KIND_MAPS: u8 = 3;
/// Chunk kind: a trigger hit (`hit u32, trigger u32, block u32, 0u32, clock u64, address
/// u64`).
pub const KIND_HIT: u8 = 8;
/// Chunk kind: a ring slot copied at a hit (`hit u32, slots u32, seq u64`, exec stream).
const KIND_RING_COPY: u8 = 9;
/// Chunk kind: a forked child's log (`parent pid u32, inherited blocks u32, clock u64`).
const KIND_FORK: u8 = 10;
/// Chunk kind: a thread called `execve`/`execveat` (`ns u64`, then the path).
const KIND_EXEC_CALL: u8 = 4;
/// Exec-stream word announcing a clock value.
const MARKER: u32 = u32::MAX;
/// Exec-stream word: the host time (`u64` ns, `CLOCK_MONOTONIC`) the next block starts at.
const HOST: u32 = u32::MAX - 1;
/// Exec-stream word: syscall entry, `u32` number and `u64` host ns.
const SYSCALL: u32 = u32::MAX - 2;
/// Exec-stream word: syscall return, `u64` value (an `i64`) and `u64` host ns.
const SYSRET: u32 = u32::MAX - 3;
/// Log format version the plugin writes.
const MAGIC: u32 = 0x5054_5332;

/// Errors reading a block log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be read.
    #[error("cannot read block log {path}: {source}")]
    Io {
        /// The log's path.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a block log or is damaged.
    #[error("malformed block log at byte {offset}: {what}")]
    Malformed {
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong.
        what: String,
    },
}

/// One translated block: where it is and what its last instruction is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TbDef {
    /// Guest address of the first instruction.
    pub vaddr: u64,
    /// Number of guest instructions.
    pub n_insns: u32,
    /// Size in bytes, first instruction to end of last.
    pub size: u32,
    /// Bytes of the last instruction.
    pub last: Vec<u8>,
    /// Bytes of the first instruction.
    pub first: Vec<u8>,
}

impl TbDef {
    /// Address of the last instruction.
    pub fn last_addr(&self) -> u64 {
        self.vaddr + self.size as u64 - self.last.len() as u64
    }

    /// Address just past the block.
    pub fn end(&self) -> u64 {
        self.vaddr + self.size as u64
    }
}

/// One line of a `/proc/self/maps` snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major number.
    pub maj: u32,
    /// Device minor number.
    pub min: u32,
    /// Inode number.
    pub ino: u64,
    /// Path, or an empty string for anonymous memory.
    pub path: String,
}

/// The address space as seen at some instant.
#[derive(Clone, Debug)]
pub struct MapsSnapshot {
    /// Global instruction clock when the snapshot was taken.
    pub clock: u64,
    /// Mappings in address order.
    pub entries: Vec<MapEntry>,
}

/// One block execution on a thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Exec {
    /// Global instruction clock at the block's first instruction.
    pub clock: u64,
    /// Index into [`BlockLog::tbs`].
    pub tb: u32,
}

/// A host time read by the plugin in a thread's stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HostStamp {
    /// Index into [`ThreadLog::execs`] of the next block: the stamp is when it started
    /// (or, for a syscall's stamps, when the thread was in the kernel before it).
    pub at: u32,
    /// Host `CLOCK_MONOTONIC` time in ns.
    pub ns: u64,
    /// What the plugin was doing when it read the clock.
    pub kind: StampKind,
}

/// Why a host time was logged.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StampKind {
    /// Before a block (periodically, and at the start of each chunk).
    Block,
    /// At a syscall's entry.
    SyscallEntry,
    /// At a syscall's return.
    SyscallReturn,
}

/// One syscall a thread made, as the plugin saw it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Syscall {
    /// Index into [`ThreadLog::execs`] of the block after it.
    pub at: u32,
    /// The syscall number (x86-64).
    pub num: u32,
    /// Host ns at entry.
    pub enter_ns: u64,
    /// Return value and host ns at return; `None` if it never returned (exit, a
    /// successful exec) or the log ends first.
    pub ret: Option<(i64, u64)>,
}

/// A thread's block executions in order.
#[derive(Clone, Debug, Default)]
pub struct ThreadLog {
    /// Thread id.
    pub tid: u32,
    /// Executions in program order (empty when parsed by [`BlockLog::parse_compact`]).
    pub execs: Vec<Exec>,
    /// Executions as [`BlockLog::parse_compact`] keeps them.
    pub compact: CompactExecs,
    /// Host times in stream order (empty in logs of plugins before host time): periodic
    /// stamps and every syscall's entry and return.
    pub host: Vec<HostStamp>,
    /// Syscalls in order (a return whose entry the flight recorder overwrote is left out).
    pub syscalls: Vec<Syscall>,
}

/// A thread's executions at 4 bytes each instead of an [`Exec`]'s 16: the block ids, and
/// the clock only where the log gives one (elsewhere an execution starts when the one
/// before it ends, which a reader going through them in order knows).
#[derive(Clone, Debug, Default)]
pub struct CompactExecs {
    /// Block ids in program order.
    pub tbs: Vec<u32>,
    /// `(index into tbs, global clock)` of the executions the log gives a clock, in order.
    pub clocks: Vec<(usize, u64)>,
}

impl ThreadLog {
    /// Number of executions, however they are kept.
    pub fn len(&self) -> usize {
        self.execs.len().max(self.compact.tbs.len())
    }

    /// True when the thread has no execution.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The block id of execution `i` (`i < len()`), however they are kept.
    #[inline]
    pub fn tb_id(&self, i: usize) -> u32 {
        match self.execs.get(i) {
            Some(e) => e.tb,
            None => self.compact.tbs[i],
        }
    }

    /// Records one execution; `clock` when the log gave one.
    fn push(&mut self, clock: Option<u64>, tb: u32, compact: bool) {
        if compact {
            if let Some(c) = clock {
                self.compact.clocks.push((self.compact.tbs.len(), c));
            }
            self.compact.tbs.push(tb);
        } else {
            self.execs.push(Exec {
                clock: clock.unwrap_or(u64::MAX),
                tb,
            });
        }
    }
}

/// A trigger hit: where each thread's snapshot ends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Hit number in its process, from 0.
    pub hit: u32,
    /// Index of the trigger (in the order the plugin was given them).
    pub trigger: u32,
    /// The trigger's block (an index into [`BlockLog::tbs`]).
    pub tb: u32,
    /// Global clock at the trigger block's start: later executions are not in the snapshot.
    pub clock: u64,
    /// The trigger's address (inside the block, or its start); 0 if not known.
    pub address: u64,
    /// The thread that hit.
    pub tid: u32,
}

/// A thread's ring slot as copied at a hit (`--multi-snapshot`).
#[derive(Clone, Debug)]
pub struct RingCopy {
    /// The hit it was copied at.
    pub hit: u32,
    /// The thread.
    pub tid: u32,
    /// Slots in the thread's ring.
    pub slots: u32,
    /// The slot's sequence number (higher is newer).
    pub seq: u64,
    /// Its executions, clocks not yet filled in (see [`BlockLog::fill_clocks`]).
    pub execs: Vec<Exec>,
}

/// What a forked child's log says about its parent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ForkInfo {
    /// The parent's pid.
    pub parent: u32,
    /// Blocks with smaller ids are described in the parent's log.
    pub inherited: u32,
    /// The global clock at the fork.
    pub clock: u64,
}

/// A thread called `execve`/`execveat` (whether it returned is in its
/// [`ThreadLog::syscalls`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCall {
    /// The calling thread.
    pub tid: u32,
    /// Host ns at the call.
    pub ns: u64,
    /// The program it asked for (empty if the plugin could not read it).
    pub path: String,
}

/// A whole block log.
#[derive(Clone, Debug, Default)]
pub struct BlockLog {
    /// Process id of the emulated program.
    pub pid: u32,
    /// Translated blocks, indexed by id; `None` for ids never described.
    pub tbs: Vec<Option<TbDef>>,
    /// Threads in order of first appearance.
    pub threads: Vec<ThreadLog>,
    /// Address-space snapshots in clock order.
    pub maps: Vec<MapsSnapshot>,
    /// Trigger hits in log order.
    pub hits: Vec<Hit>,
    /// Ring slots copied at hits.
    pub ring_copies: Vec<RingCopy>,
    /// Set in a forked child's log.
    pub fork: Option<ForkInfo>,
    /// `execve`/`execveat` calls in log order.
    pub exec_calls: Vec<ExecCall>,
}

fn malformed(offset: usize, what: impl Into<String>) -> LogError {
    LogError::Malformed {
        offset,
        what: what.into(),
    }
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    d.get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    let b = d.get(at..at + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// Parses `/proc/self/maps` text; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<MapEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.collect::<Vec<_>>().join(" ");
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Some((maj, min)), Ok(start), Ok(end), Ok(pgoff), Ok(ino)) = (
            dev.split_once(':'),
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
            ino.parse::<u64>(),
        ) else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (u32::from_str_radix(maj, 16), u32::from_str_radix(min, 16))
        else {
            continue;
        };
        out.push(MapEntry {
            start,
            end,
            pgoff,
            maj,
            min,
            ino,
            path,
        });
    }
    out
}

/// Appends the executions of one exec stream (`at`: its offset in the file, for errors).
/// Clocks not given by a marker are `u64::MAX` until [`BlockLog::fill_clocks`]: instruction
/// counts live in the block table, which may come later in the file.
fn parse_execs(
    p: &[u8],
    at: usize,
    mut word: impl FnMut(Word) -> Option<()>,
) -> Result<(), LogError> {
    let mut pending_clock = None;
    let mut q = 0;
    while let Some(w) = u32_at(p, q) {
        q += 4;
        let item = match w {
            MARKER => {
                let Some(c) = u64_at(p, q) else {
                    return Err(malformed(at + q, "truncated clock marker"));
                };
                q += 8;
                pending_clock = Some(c);
                continue;
            }
            HOST => {
                let Some(ns) = u64_at(p, q) else {
                    return Err(malformed(at + q, "truncated host time"));
                };
                q += 8;
                Word::Host(ns)
            }
            SYSCALL => {
                let (Some(num), Some(ns)) = (u32_at(p, q), u64_at(p, q + 4)) else {
                    return Err(malformed(at + q, "truncated syscall entry"));
                };
                q += 12;
                Word::SyscallEntry(num, ns)
            }
            SYSRET => {
                let (Some(ret), Some(ns)) = (u64_at(p, q), u64_at(p, q + 8)) else {
                    return Err(malformed(at + q, "truncated syscall return"));
                };
                q += 16;
                Word::SyscallReturn(ret, ns)
            }
            tb => Word::Exec(pending_clock.take(), tb),
        };
        word(item).ok_or_else(|| malformed(at + q, "too many blocks in one thread"))?;
    }
    Ok(())
}

/// One item of an exec stream.
enum Word {
    /// A block execution, with the clock when a marker gave one.
    Exec(Option<u64>, u32),
    /// Host ns at which the next block starts.
    Host(u64),
    /// Syscall entry: number, host ns.
    SyscallEntry(u32, u64),
    /// Syscall return: value, host ns.
    SyscallReturn(u64, u64),
}

/// The length of the longest prefix of a log made of whole chunks: what a log cut
/// mid-write (qemu killed) can be truncated to before more chunks are appended.
pub fn whole_chunks_len(d: &[u8]) -> usize {
    let mut at = 0usize;
    while let Some(len) = u64_at(d, at + 8) {
        match usize::try_from(len)
            .ok()
            .and_then(|l| at.checked_add(16)?.checked_add(l))
        {
            Some(end) if end <= d.len() => at = end,
            _ => break,
        }
    }
    at
}

/// A chunk's 16-byte header: `[kind u8][0u8; 3][tid u32][len u64]`.
pub fn chunk_header(kind: u8, tid: u32, len: u64) -> [u8; 16] {
    let mut head = [0u8; 16];
    head[0] = kind;
    head[4..8].copy_from_slice(&tid.to_le_bytes());
    head[8..16].copy_from_slice(&len.to_le_bytes());
    head
}

impl BlockLog {
    /// Reads and parses a log file.
    pub fn read(path: &Path) -> Result<Self, LogError> {
        let data = std::fs::read(path).map_err(|source| LogError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parses a log held in memory.
    pub fn parse(d: &[u8]) -> Result<Self, LogError> {
        Self::parse_child_as(d, |_| None, false)
    }

    /// [`BlockLog::parse`], keeping each thread's executions in
    /// [`ThreadLog::compact`] (a quarter of the memory; `execs` stay empty). What
    /// [`crate::truth`] derives from it is the same.
    pub fn parse_compact(d: &[u8]) -> Result<Self, LogError> {
        Self::parse_child_as(d, |_| None, true)
    }

    /// Parses a log that may be a forked child's: `parent(fork)` gives the blocks the
    /// parent had described (its whole table; those below [`ForkInfo::inherited`] are
    /// taken), or `None` when the parent's log is not at hand (then blocks are missing).
    pub fn parse_child(
        d: &[u8],
        parent: impl FnOnce(&ForkInfo) -> Option<Vec<Option<TbDef>>>,
    ) -> Result<Self, LogError> {
        Self::parse_child_as(d, parent, false)
    }

    /// [`BlockLog::parse_child`], keeping threads' executions compact when `compact`
    /// (as [`BlockLog::parse_compact`]; ring copies are always kept whole).
    pub fn parse_child_as(
        d: &[u8],
        parent: impl FnOnce(&ForkInfo) -> Option<Vec<Option<TbDef>>>,
        compact: bool,
    ) -> Result<Self, LogError> {
        let mut log = BlockLog::default();
        let mut thread_index: std::collections::HashMap<u32, usize> = Default::default();
        let mut at = 0usize;
        let mut saw_header = false;
        while at < d.len() {
            let (Some(&kind), Some(tid), Some(len)) =
                (d.get(at), u32_at(d, at + 4), u64_at(d, at + 8))
            else {
                return Err(malformed(at, "truncated chunk header"));
            };
            let start = at + 16;
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| start.checked_add(l))
                .filter(|&e| e <= d.len())
                .ok_or_else(|| malformed(at, "chunk runs past the end of the file"))?;
            let p = &d[start..end];
            match kind {
                KIND_HEADER => {
                    let (Some(pid), Some(magic)) = (u32_at(p, 0), u32_at(p, 4)) else {
                        return Err(malformed(at, "short header"));
                    };
                    if magic != MAGIC {
                        return Err(malformed(at, format!("bad magic {magic:#x}")));
                    }
                    log.pid = pid;
                    saw_header = true;
                }
                KIND_TBS => {
                    let mut q = 0;
                    while q < p.len() {
                        let (Some(id), Some(vaddr), Some(n), Some(size), Some(&ll)) = (
                            u32_at(p, q),
                            u64_at(p, q + 4),
                            u32_at(p, q + 12),
                            u32_at(p, q + 16),
                            p.get(q + 20),
                        ) else {
                            return Err(malformed(start + q, "truncated block record"));
                        };
                        let Some(last) = p.get(q + 21..q + 21 + ll as usize) else {
                            return Err(malformed(start + q, "truncated instruction bytes"));
                        };
                        if (ll as u32) > size || ll == 0 {
                            return Err(malformed(start + q, "bad block size"));
                        }
                        let fq = q + 21 + ll as usize;
                        let Some(&fl) = p.get(fq) else {
                            return Err(malformed(start + fq, "truncated block record"));
                        };
                        let Some(first) = p.get(fq + 1..fq + 1 + fl as usize) else {
                            return Err(malformed(start + fq, "truncated instruction bytes"));
                        };
                        let id = id as usize;
                        if log.tbs.len() <= id {
                            log.tbs.resize(id + 1, None);
                        }
                        log.tbs[id] = Some(TbDef {
                            vaddr,
                            n_insns: n,
                            size,
                            last: last.to_vec(),
                            first: first.to_vec(),
                        });
                        q = fq + 1 + fl as usize;
                    }
                }
                KIND_EXEC => {
                    let idx = *thread_index.entry(tid).or_insert_with(|| {
                        log.threads.push(ThreadLog {
                            tid,
                            ..ThreadLog::default()
                        });
                        log.threads.len() - 1
                    });
                    let thread = &mut log.threads[idx];
                    parse_execs(p, start, |w| {
                        let here = u32::try_from(thread.len()).ok()?;
                        match w {
                            Word::Exec(clock, tb) => thread.push(clock, tb, compact),
                            Word::Host(ns) => thread.host.push(HostStamp {
                                at: here,
                                ns,
                                kind: StampKind::Block,
                            }),
                            Word::SyscallEntry(num, ns) => {
                                thread.host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::SyscallEntry,
                                });
                                thread.syscalls.push(Syscall {
                                    at: here,
                                    num,
                                    enter_ns: ns,
                                    ret: None,
                                });
                            }
                            Word::SyscallReturn(ret, ns) => {
                                thread.host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::SyscallReturn,
                                });
                                if let Some(s) = thread.syscalls.last_mut().filter(|s| s.at == here)
                                {
                                    s.ret = Some((ret as i64, ns));
                                }
                            }
                        }
                        Some(())
                    })?;
                }
                KIND_HIT => {
                    let (Some(hit), Some(trigger), Some(tb), Some(clock)) =
                        (u32_at(p, 0), u32_at(p, 4), u32_at(p, 8), u64_at(p, 16))
                    else {
                        return Err(malformed(at, "short trigger hit chunk"));
                    };
                    log.hits.push(Hit {
                        hit,
                        trigger,
                        tb,
                        clock,
                        address: u64_at(p, 24).unwrap_or(0),
                        tid,
                    });
                }
                KIND_RING_COPY => {
                    let (Some(hit), Some(slots), Some(seq)) =
                        (u32_at(p, 0), u32_at(p, 4), u64_at(p, 8))
                    else {
                        return Err(malformed(at, "short ring copy chunk"));
                    };
                    let mut execs = Vec::new();
                    // Host times in copies are not used: a snapshot's threads keep the
                    // stamps of their own exec chunks.
                    parse_execs(&p[16..], start + 16, |w| {
                        if let Word::Exec(clock, tb) = w {
                            execs.push(Exec {
                                clock: clock.unwrap_or(u64::MAX),
                                tb,
                            });
                        }
                        Some(())
                    })?;
                    log.ring_copies.push(RingCopy {
                        hit,
                        tid,
                        slots,
                        seq,
                        execs,
                    });
                }
                KIND_FORK => {
                    let (Some(parent), Some(inherited), Some(clock)) =
                        (u32_at(p, 0), u32_at(p, 4), u64_at(p, 8))
                    else {
                        return Err(malformed(at, "short fork chunk"));
                    };
                    log.fork = Some(ForkInfo {
                        parent,
                        inherited,
                        clock,
                    });
                }
                KIND_MAPS => {
                    let Some(clock) = u64_at(p, 0) else {
                        return Err(malformed(at, "short maps chunk"));
                    };
                    let text = String::from_utf8_lossy(&p[8..]);
                    log.maps.push(MapsSnapshot {
                        clock,
                        entries: parse_maps(&text),
                    });
                }
                KIND_EXEC_CALL => {
                    let Some(ns) = u64_at(p, 0) else {
                        return Err(malformed(at, "short exec chunk"));
                    };
                    log.exec_calls.push(ExecCall {
                        tid,
                        ns,
                        path: String::from_utf8_lossy(&p[8..]).into_owned(),
                    });
                }
                other => return Err(malformed(at, format!("unknown chunk kind {other}"))),
            }
            at = end;
        }
        if !saw_header {
            return Err(malformed(0, "no header chunk (not a ptsim block log?)"));
        }
        if let Some(fork) = log.fork {
            if let Some(ptbs) = parent(&fork) {
                let n = (fork.inherited as usize).min(ptbs.len());
                if log.tbs.len() < n {
                    log.tbs.resize(n, None);
                }
                for (mine, theirs) in log.tbs.iter_mut().zip(ptbs).take(n) {
                    if mine.is_none() {
                        *mine = theirs;
                    }
                }
            }
        }
        log.fix_clocks()?;
        log.maps.sort_by_key(|m| m.clock);
        Ok(log)
    }

    /// Fills in the clocks of executions that follow their predecessor directly.
    fn fix_clocks(&mut self) -> Result<(), LogError> {
        for t in &self.threads {
            if let Some(&bad) = t
                .compact
                .tbs
                .iter()
                .find(|&&id| !matches!(self.tbs.get(id as usize), Some(Some(_))))
            {
                return Err(malformed(
                    0,
                    format!("execution of undescribed block {bad}"),
                ));
            }
        }
        let mut threads = std::mem::take(&mut self.threads);
        let mut copies = std::mem::take(&mut self.ring_copies);
        let r = threads
            .iter_mut()
            .map(|t| &mut t.execs)
            .chain(copies.iter_mut().map(|c| &mut c.execs))
            .try_for_each(|e| self.fill_clocks(e));
        self.threads = threads;
        self.ring_copies = copies;
        r
    }

    /// Fills in the clocks of executions (parsed from one exec stream) that follow their
    /// predecessor directly; fails on a block the log does not describe.
    pub fn fill_clocks(&self, execs: &mut [Exec]) -> Result<(), LogError> {
        let mut next = 0u64;
        for e in execs {
            let Some(Some(tb)) = self.tbs.get(e.tb as usize) else {
                return Err(malformed(
                    0,
                    format!("execution of undescribed block {}", e.tb),
                ));
            };
            if e.clock == u64::MAX {
                e.clock = next;
            }
            next = e.clock + tb.n_insns as u64;
        }
        Ok(())
    }

    /// The block an execution ran. Valid after parsing, which checks every id.
    pub fn tb(&self, e: Exec) -> &TbDef {
        match self.tbs.get(e.tb as usize) {
            Some(Some(tb)) => tb,
            _ => unreachable!("block ids are checked when the log is parsed"),
        }
    }

    /// The block with id `id`. Valid for the ids of executions after parsing, which
    /// checks every one.
    #[inline]
    pub fn tb_by_id(&self, id: u32) -> &TbDef {
        match self.tbs.get(id as usize) {
            Some(Some(tb)) => tb,
            _ => unreachable!("block ids are checked when the log is parsed"),
        }
    }

    /// Total number of block executions over all threads.
    pub fn total_execs(&self) -> usize {
        self.threads.iter().map(|t| t.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_chunks_stop_before_a_cut_one() {
        let mut d = chunk_header(KIND_EXEC, 7, 4).to_vec();
        d.extend_from_slice(&[1, 0, 0, 0]);
        let whole = d.len();
        d.extend_from_slice(&chunk_header(KIND_EXEC, 7, 8));
        d.extend_from_slice(&[1, 2, 3]);
        assert_eq!(whole_chunks_len(&d), whole);
        assert_eq!(whole_chunks_len(&d[..whole]), whole);
        assert_eq!(whole_chunks_len(&d[..5]), 0);
    }

    fn chunk(d: &mut Vec<u8>, kind: u8, tid: u32, p: &[u8]) {
        d.extend_from_slice(&chunk_header(kind, tid, p.len() as u64));
        d.extend_from_slice(p);
    }

    #[test]
    fn a_childs_log_takes_the_blocks_it_inherited_from_its_parent() {
        let header = |pid: u32| [pid.to_le_bytes(), MAGIC.to_le_bytes()].concat();
        // One block: id 0 at 0x1000, one `ret`.
        let mut tb = 0u32.to_le_bytes().to_vec();
        tb.extend_from_slice(&0x1000u64.to_le_bytes());
        tb.extend_from_slice(&1u32.to_le_bytes());
        tb.extend_from_slice(&1u32.to_le_bytes());
        tb.extend_from_slice(&[1, 0xc3, 1, 0xc3]);
        let mut parent = Vec::new();
        chunk(&mut parent, KIND_HEADER, 0, &header(10));
        chunk(&mut parent, KIND_TBS, 0, &tb);
        let parent = BlockLog::parse(&parent).expect("parent log");
        let mut child = Vec::new();
        chunk(&mut child, KIND_HEADER, 0, &header(11));
        let fork = [10u32.to_le_bytes(), 1u32.to_le_bytes()].concat();
        chunk(
            &mut child,
            KIND_FORK,
            0,
            &[fork, 5u64.to_le_bytes().to_vec()].concat(),
        );
        let mut exec = MARKER.to_le_bytes().to_vec();
        exec.extend_from_slice(&7u64.to_le_bytes());
        exec.extend_from_slice(&0u32.to_le_bytes());
        chunk(&mut child, KIND_EXEC, 11, &exec);
        assert!(BlockLog::parse(&child).is_err(), "block 0 is the parent's");
        let log = BlockLog::parse_child(&child, |f| {
            assert_eq!((f.parent, f.inherited, f.clock), (10, 1, 5));
            Some(parent.tbs.clone())
        })
        .expect("child log");
        assert_eq!(log.pid, 11);
        assert_eq!(log.tb(log.threads[0].execs[0]).vaddr, 0x1000);
    }
}
