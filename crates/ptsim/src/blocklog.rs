//! Reader for the block log written by the `ptsim-plugin` QEMU plugin.
//!
//! The format is described in `tools/ptsim-plugin/src/lib.rs` and `docs/simulation.md`.

use std::path::Path;

/// Chunk kind: process header.
const KIND_HEADER: u8 = 0;
/// Chunk kind: translated-block descriptions.
const KIND_TBS: u8 = 1;
/// Chunk kind: one thread's block executions.
pub const KIND_EXEC: u8 = 2;
/// Chunk kind: a `/proc/self/maps` snapshot.
const KIND_MAPS: u8 = 3;
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
    /// Executions in program order.
    pub execs: Vec<Exec>,
    /// Host times in stream order (empty in logs of plugins before host time): periodic
    /// stamps and every syscall's entry and return.
    pub host: Vec<HostStamp>,
    /// Syscalls in order (a return whose entry the flight recorder overwrote is left out).
    pub syscalls: Vec<Syscall>,
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
                    let ThreadLog {
                        execs,
                        host,
                        syscalls,
                        ..
                    } = &mut log.threads[idx];
                    // Instruction counts live in the block table, which may come later
                    // in the file, so clocks without a marker are filled in afterwards.
                    let mut pending_clock = None;
                    let mut q = 0;
                    while let Some(w) = u32_at(p, q) {
                        q += 4;
                        if w == MARKER {
                            let Some(c) = u64_at(p, q) else {
                                return Err(malformed(start + q, "truncated clock marker"));
                            };
                            q += 8;
                            pending_clock = Some(c);
                            continue;
                        }
                        let here = u32::try_from(execs.len())
                            .map_err(|_| malformed(start + q, "too many blocks in one thread"))?;
                        match w {
                            HOST => {
                                let Some(ns) = u64_at(p, q) else {
                                    return Err(malformed(start + q, "truncated host time"));
                                };
                                q += 8;
                                host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::Block,
                                });
                                continue;
                            }
                            SYSCALL => {
                                let (Some(num), Some(ns)) = (u32_at(p, q), u64_at(p, q + 4)) else {
                                    return Err(malformed(start + q, "truncated syscall entry"));
                                };
                                q += 12;
                                host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::SyscallEntry,
                                });
                                syscalls.push(Syscall {
                                    at: here,
                                    num,
                                    enter_ns: ns,
                                    ret: None,
                                });
                                continue;
                            }
                            SYSRET => {
                                let (Some(ret), Some(ns)) = (u64_at(p, q), u64_at(p, q + 8)) else {
                                    return Err(malformed(start + q, "truncated syscall return"));
                                };
                                q += 16;
                                host.push(HostStamp {
                                    at: here,
                                    ns,
                                    kind: StampKind::SyscallReturn,
                                });
                                if let Some(s) = syscalls.last_mut().filter(|s| s.at == here) {
                                    s.ret = Some((ret as i64, ns));
                                }
                                continue;
                            }
                            _ => {}
                        }
                        execs.push(Exec {
                            clock: pending_clock.take().unwrap_or(u64::MAX),
                            tb: w,
                        });
                    }
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
        log.fix_clocks()?;
        log.maps.sort_by_key(|m| m.clock);
        Ok(log)
    }

    /// Fills in the clocks of executions that follow their predecessor directly.
    fn fix_clocks(&mut self) -> Result<(), LogError> {
        for t in &mut self.threads {
            let mut next = 0u64;
            for e in &mut t.execs {
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

    /// Total number of block executions over all threads.
    pub fn total_execs(&self) -> usize {
        self.threads.iter().map(|t| t.execs.len()).sum()
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
}
