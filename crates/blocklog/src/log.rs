//! A whole every-block log in memory, as ptsim's ground truth reads it: every block
//! description and every thread's executions.
//!
//! Counts and ids read from the file are checked against the file's length before
//! anything is allocated: a damaged id cannot make a table of gigabytes.

use crate::format::*;
use crate::read::*;
use std::path::Path;

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

impl From<TbRecord<'_>> for TbDef {
    fn from(r: TbRecord<'_>) -> Self {
        TbDef {
            vaddr: r.vaddr,
            n_insns: r.n_insns,
            size: r.size,
            last: r.last.to_vec(),
            first: r.first.to_vec(),
        }
    }
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
    /// Threads' names, in log order.
    pub comms: Vec<Comm>,
    /// Blocks that start at a signal handler (`TB_HANDLER_ENTRY`), by id.
    pub handler_entries: Vec<u32>,
}

/// One item of an exec stream as the whole-log parser keeps it.
enum Item {
    /// A block execution, with the clock when a marker gave one.
    Exec(Option<u64>, u32),
    /// Host ns at which the next block starts.
    Host(u64),
    /// Syscall entry: number, host ns.
    SyscallEntry(u32, u64),
    /// Syscall return: value, host ns.
    SyscallReturn(i64, u64),
}

/// Hands the items of one exec stream (`p`, at `base` in the file) to `item`.
fn parse_execs(
    p: &[u8],
    base: usize,
    mut item: impl FnMut(Item) -> Option<()>,
) -> Result<(), LogError> {
    let mut pending_clock = None;
    let mut words = Words::new(p, base);
    while let Some(w) = words.next() {
        let at = words.offset();
        let it = match w? {
            Word::Clock(c) => {
                pending_clock = Some(c);
                continue;
            }
            Word::Skip(_) | Word::SkipBlock(..) => {
                return Err(LogError::malformed(
                    at,
                    "a stack-mode exec stream (SKIP): this reader takes every-block logs \
                     (ptsim's); ptscope decodes stack-mode logs",
                ))
            }
            Word::Host(ns) => Item::Host(ns),
            Word::SyscallEntry { num, ns } => Item::SyscallEntry(num, ns),
            Word::SyscallReturn { ret, ns } => Item::SyscallReturn(ret, ns),
            Word::Block(tb) => Item::Exec(pending_clock.take(), tb),
        };
        item(it).ok_or_else(|| LogError::malformed(at, "too many blocks in one thread"))?;
    }
    Ok(())
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
    /// [`ThreadLog::compact`] (a quarter of the memory; `execs` stay empty).
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
        let mut header: Option<Header> = None;
        let mut parent = Some(parent);
        // The parent's blocks, taken as soon as the fork chunk names them: they bound
        // the ids this log may use.
        let mut inherited: Vec<Option<TbDef>> = Vec::new();
        // Every id a valid log uses is below what its parent described plus one per
        // record this file can hold (a record takes at least MIN_TB_RECORD - 1 bytes).
        let own_limit = d.len() / (MIN_TB_RECORD - 1) + 1;
        for chunk in Chunks::new(d) {
            let chunk = chunk?;
            let (at, start, p) = (chunk.offset, chunk.payload_offset(), chunk.payload);
            if chunk.kind != KIND_HEADER && header.is_none() {
                return Err(LogError::malformed(
                    at,
                    "no header chunk first (not a ptscope block log?)",
                ));
            }
            match chunk.kind {
                KIND_HEADER => {
                    let h = Header::parse(p, at)?;
                    log.pid = h.pid;
                    header = Some(h);
                }
                KIND_TBS => {
                    let version = header.map_or(3, |h| h.version);
                    let limit = inherited.len().saturating_add(own_limit);
                    for r in TbRecords::new(p, start, version) {
                        let r = r?;
                        let id = r.id as usize;
                        if id >= limit {
                            return Err(LogError::malformed(
                                start,
                                format!(
                                    "block id {id} is beyond what the log can describe ({limit})"
                                ),
                            ));
                        }
                        if log.tbs.len() <= id {
                            log.tbs.resize(id + 1, None);
                        }
                        if r.flags & TB_HANDLER_ENTRY != 0 {
                            log.handler_entries.push(r.id);
                        }
                        log.tbs[id] = Some(r.into());
                    }
                }
                KIND_EXEC => {
                    let idx = *thread_index.entry(chunk.tid).or_insert_with(|| {
                        log.threads.push(ThreadLog {
                            tid: chunk.tid,
                            ..ThreadLog::default()
                        });
                        log.threads.len() - 1
                    });
                    let thread = &mut log.threads[idx];
                    parse_execs(p, start, |w| {
                        let here = u32::try_from(thread.len()).ok()?;
                        match w {
                            Item::Exec(clock, tb) => thread.push(clock, tb, compact),
                            Item::Host(ns) => thread.host.push(HostStamp {
                                at: here,
                                ns,
                                kind: StampKind::Block,
                            }),
                            Item::SyscallEntry(num, ns) => {
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
                            Item::SyscallReturn(ret, ns) => {
                                thread.host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::SyscallReturn,
                                });
                                if let Some(s) = thread.syscalls.last_mut().filter(|s| s.at == here)
                                {
                                    s.ret = Some((ret, ns));
                                }
                            }
                        }
                        Some(())
                    })?;
                }
                KIND_HIT => log.hits.push(Hit::parse(&chunk)?),
                KIND_RING_COPY => {
                    let head = RingCopyHead::parse(&chunk)?;
                    let mut execs = Vec::new();
                    // Host times in copies are not used: a snapshot's threads keep the
                    // stamps of their own exec chunks.
                    parse_execs(&p[RING_COPY_HEAD..], start + RING_COPY_HEAD, |w| {
                        if let Item::Exec(clock, tb) = w {
                            execs.push(Exec {
                                clock: clock.unwrap_or(u64::MAX),
                                tb,
                            });
                        }
                        Some(())
                    })?;
                    log.ring_copies.push(RingCopy {
                        hit: head.hit,
                        tid: chunk.tid,
                        slots: head.slots,
                        seq: head.seq,
                        execs,
                    });
                }
                KIND_FORK => {
                    let fork = ForkInfo::parse(&chunk)?;
                    if log.fork.is_some() || !log.tbs.is_empty() {
                        return Err(LogError::malformed(at, "a fork chunk after blocks"));
                    }
                    if let Some(ptbs) = parent.take().and_then(|f| f(&fork)) {
                        if fork.inherited as usize > ptbs.len() {
                            return Err(LogError::malformed(
                                at,
                                format!(
                                    "the fork chunk claims {} inherited blocks; the parent \
                                     described {}",
                                    fork.inherited,
                                    ptbs.len()
                                ),
                            ));
                        }
                        inherited = ptbs;
                        inherited.truncate(fork.inherited as usize);
                    }
                    log.fork = Some(fork);
                }
                KIND_MAPS => {
                    let (clock, text) = maps_chunk(&chunk)?;
                    log.maps.push(MapsSnapshot {
                        clock,
                        entries: parse_maps(&text),
                    });
                }
                KIND_EXEC_CALL => log.exec_calls.push(ExecCall::parse(&chunk)?),
                KIND_COMM => log.comms.push(Comm::parse(&chunk)?),
                KIND_RING_WRAPPED => {}
                other => {
                    return Err(LogError::malformed(
                        at,
                        format!("unknown chunk kind {other}"),
                    ))
                }
            }
        }
        if header.is_none() {
            return Err(LogError::malformed(
                0,
                "no header chunk (not a ptscope block log?)",
            ));
        }
        if !inherited.is_empty() {
            if log.tbs.len() < inherited.len() {
                log.tbs.resize(inherited.len(), None);
            }
            for (mine, theirs) in log.tbs.iter_mut().zip(inherited) {
                if mine.is_none() {
                    *mine = theirs;
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
                return Err(LogError::malformed(
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
                return Err(LogError::malformed(
                    0,
                    format!("execution of undescribed block {}", e.tb),
                ));
            };
            if e.clock == u64::MAX {
                e.clock = next;
            }
            // A damaged clock near the top must not wrap: it only ends the order.
            next = e.clock.saturating_add(tb.n_insns as u64);
        }
        Ok(())
    }

    /// The block an execution ran. Valid after parsing, which checks every id.
    pub fn tb(&self, e: Exec) -> &TbDef {
        self.tb_by_id(e.tb)
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

    fn chunk(d: &mut Vec<u8>, kind: u8, tid: u32, p: &[u8]) {
        d.extend_from_slice(&chunk_header(kind, tid, p.len() as u64));
        d.extend_from_slice(p);
    }

    fn ret_block(id: u32) -> Vec<u8> {
        let mut tb = Vec::new();
        push_tb_record(&mut tb, id, 0x1000, 1, 1, &[0xc3], &[0xc3], 0);
        tb
    }

    #[test]
    fn a_childs_log_takes_the_blocks_it_inherited_from_its_parent() {
        let mut parent = Vec::new();
        chunk(
            &mut parent,
            KIND_HEADER,
            0,
            &header_payload(10, MODE_EVERY_BLOCK),
        );
        chunk(&mut parent, KIND_TBS, 0, &ret_block(0));
        let parent = BlockLog::parse(&parent).expect("parent log");
        let mut child = Vec::new();
        chunk(
            &mut child,
            KIND_HEADER,
            0,
            &header_payload(11, MODE_EVERY_BLOCK),
        );
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

    /// Found by mutating real working directories: an id near 2^32 made the table
    /// reserve hundreds of gigabytes before anything checked it.
    #[test]
    fn a_huge_block_id_is_an_error_not_an_allocation() {
        let mut d = Vec::new();
        chunk(&mut d, KIND_HEADER, 0, &header_payload(1, MODE_EVERY_BLOCK));
        chunk(&mut d, KIND_TBS, 0, &ret_block(0x7ff0_0000));
        let e = BlockLog::parse(&d).expect_err("a damaged id");
        assert!(
            e.to_string().contains("beyond what the log can describe"),
            "{e}"
        );
    }

    #[test]
    fn clocks_near_the_top_do_not_wrap() {
        let mut d = Vec::new();
        chunk(&mut d, KIND_HEADER, 0, &header_payload(1, MODE_EVERY_BLOCK));
        chunk(&mut d, KIND_TBS, 0, &ret_block(0));
        let mut exec = MARKER.to_le_bytes().to_vec();
        exec.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
        exec.extend_from_slice(&[0; 8]);
        chunk(&mut d, KIND_EXEC, 1, &exec);
        let log = BlockLog::parse(&d).expect("parses");
        assert_eq!(log.threads[0].execs[1].clock, u64::MAX);
    }
}
