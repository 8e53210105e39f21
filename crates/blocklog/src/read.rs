//! Zero-copy reading: chunks, block records, exec-stream words and the small chunks, each
//! checked against the bytes it sits in before anything is trusted or allocated.

use crate::format::*;

/// Why a block log cannot be read.
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
    /// The log ends inside a chunk: qemu was stopped while writing it. Everything before
    /// `offset` is whole.
    #[error("the block log ends mid-chunk at byte {offset} (qemu stopped while writing it)")]
    Truncated {
        /// Where the cut chunk starts: the length of the whole part.
        offset: usize,
    },
    /// The file is not a block log, or is damaged.
    #[error("malformed block log at byte {offset}: {what}")]
    Malformed {
        /// Byte offset of the problem.
        offset: usize,
        /// What was wrong.
        what: String,
    },
}

impl LogError {
    /// A `Malformed` error at `offset`.
    pub fn malformed(offset: usize, what: impl Into<String>) -> Self {
        LogError::Malformed {
            offset,
            what: what.into(),
        }
    }

    /// Where the problem is (0 for I/O errors).
    pub fn offset(&self) -> usize {
        match self {
            LogError::Io { .. } => 0,
            LogError::Truncated { offset } | LogError::Malformed { offset, .. } => *offset,
        }
    }
}

/// A little-endian `u32` at `at`, if the bytes are there.
#[inline]
pub fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    let b = d.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// A little-endian `u64` at `at`, if the bytes are there.
#[inline]
pub fn u64_at(d: &[u8], at: usize) -> Option<u64> {
    let b = d.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Some(u64::from_le_bytes(a))
}

/// One chunk, borrowed from the log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Its kind (`KIND_*`).
    pub kind: u8,
    /// The thread it belongs to (0 for process-wide chunks).
    pub tid: u32,
    /// Byte offset of its header in the log.
    pub offset: usize,
    /// Its payload.
    pub payload: &'a [u8],
}

impl Chunk<'_> {
    /// Byte offset of the payload in the log.
    pub fn payload_offset(&self) -> usize {
        self.offset + CHUNK_HEADER
    }
}

/// The chunks of a log, in order; stops at the first damaged one with its error.
#[derive(Clone, Debug)]
pub struct Chunks<'a> {
    data: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Chunks<'a> {
    /// The chunks of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Chunks {
            data,
            at: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<'a>, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.data.len() {
            return None;
        }
        let at = self.at;
        let d = self.data;
        let (Some(&kind), Some(tid), Some(len)) = (d.get(at), u32_at(d, at + 4), u64_at(d, at + 8))
        else {
            self.failed = true;
            return Some(Err(LogError::Truncated { offset: at }));
        };
        let start = at + CHUNK_HEADER;
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e <= d.len())
        else {
            self.failed = true;
            return Some(Err(LogError::Truncated { offset: at }));
        };
        self.at = end;
        Some(Ok(Chunk {
            kind,
            tid,
            offset: at,
            payload: &d[start..end],
        }))
    }
}

/// The length of the longest prefix of a log made of whole chunks: what a log cut
/// mid-write (qemu killed) can be truncated to before more chunks are appended.
pub fn whole_chunks_len(d: &[u8]) -> usize {
    let mut len = 0;
    for c in Chunks::new(d) {
        match c {
            Ok(c) => len = c.payload_offset() + c.payload.len(),
            Err(_) => break,
        }
    }
    len
}

/// The log's header: its process, version and mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Process id of the emulated program.
    pub pid: u32,
    /// Format version (2 or 3).
    pub version: u32,
    /// `MODE_EVERY_BLOCK` or `MODE_STACK` (version 2 logs are every-block).
    pub mode: u32,
}

impl Header {
    /// Parses a `KIND_HEADER` payload found at `offset`.
    pub fn parse(p: &[u8], offset: usize) -> Result<Self, LogError> {
        let (Some(pid), Some(magic)) = (u32_at(p, 0), u32_at(p, 4)) else {
            return Err(LogError::malformed(offset, "short header"));
        };
        match magic {
            MAGIC_V2 => Ok(Header {
                pid,
                version: 2,
                mode: MODE_EVERY_BLOCK,
            }),
            MAGIC => {
                let mode = u32_at(p, 8).unwrap_or(MODE_EVERY_BLOCK);
                if mode > MODE_STACK {
                    return Err(LogError::malformed(offset, format!("unknown mode {mode}")));
                }
                Ok(Header {
                    pid,
                    version: 3,
                    mode,
                })
            }
            _ => Err(LogError::malformed(
                offset,
                format!("bad magic {magic:#x} (not a ptscope block log, or a newer one)"),
            )),
        }
    }
}

/// One block description, borrowed from the log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TbRecord<'a> {
    /// The block's id.
    pub id: u32,
    /// Guest address of its first instruction.
    pub vaddr: u64,
    /// Number of guest instructions.
    pub n_insns: u32,
    /// Bytes from the first instruction to the end of the last.
    pub size: u32,
    /// The last instruction's bytes.
    pub last: &'a [u8],
    /// The first instruction's bytes.
    pub first: &'a [u8],
    /// `TB_*` flags (version 3).
    pub flags: u8,
}

impl TbRecord<'_> {
    /// Address of the last instruction.
    pub fn last_addr(&self) -> u64 {
        self.vaddr + u64::from(self.size) - self.last.len() as u64
    }

    /// Address just past the block.
    pub fn end(&self) -> u64 {
        self.vaddr + u64::from(self.size)
    }
}

/// The block records of a `KIND_TBS` payload.
#[derive(Clone, Debug)]
pub struct TbRecords<'a> {
    p: &'a [u8],
    at: usize,
    base: usize,
    version: u32,
    failed: bool,
}

impl<'a> TbRecords<'a> {
    /// The records of payload `p` (at `base` in the log) of a log of `version`.
    pub fn new(p: &'a [u8], base: usize, version: u32) -> Self {
        TbRecords {
            p,
            at: 0,
            base,
            version,
            failed: false,
        }
    }

    /// Byte offset in the log of the next record.
    pub fn offset(&self) -> usize {
        self.base + self.at
    }

    fn record(&mut self) -> Result<TbRecord<'a>, LogError> {
        let (p, q) = (self.p, self.at);
        let bad = |at: usize, what: &str| LogError::malformed(self.base + at, what.to_string());
        let (Some(id), Some(vaddr), Some(n_insns), Some(size), Some(&ll)) = (
            u32_at(p, q),
            u64_at(p, q + 4),
            u32_at(p, q + 12),
            u32_at(p, q + 16),
            p.get(q + 20),
        ) else {
            return Err(bad(q, "truncated block record"));
        };
        let ll = usize::from(ll);
        let Some(last) = p.get(q + 21..q + 21 + ll) else {
            return Err(bad(q, "truncated instruction bytes"));
        };
        if ll == 0 || ll > MAX_INSN || ll as u32 > size || size > MAX_TB_SIZE {
            return Err(bad(q, "bad block size"));
        }
        if n_insns == 0 || n_insns > size || id >= MAX_BLOCK_ID {
            return Err(bad(q, "bad block instruction count or id"));
        }
        if vaddr.checked_add(u64::from(size)).is_none() {
            return Err(bad(q, "block past the end of the address space"));
        }
        let fq = q + 21 + ll;
        let Some(&fl) = p.get(fq) else {
            return Err(bad(fq, "truncated block record"));
        };
        let fl = usize::from(fl);
        let Some(first) = p.get(fq + 1..fq + 1 + fl) else {
            return Err(bad(fq, "truncated instruction bytes"));
        };
        if fl > MAX_INSN {
            return Err(bad(fq, "bad first instruction length"));
        }
        let mut next = fq + 1 + fl;
        let mut flags = 0;
        if self.version >= 3 {
            let Some(&f) = p.get(next) else {
                return Err(bad(next, "truncated block record"));
            };
            flags = f;
            next += 1;
        }
        self.at = next;
        Ok(TbRecord {
            id,
            vaddr,
            n_insns,
            size,
            last,
            first,
            flags,
        })
    }
}

impl<'a> Iterator for TbRecords<'a> {
    type Item = Result<TbRecord<'a>, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at >= self.p.len() {
            return None;
        }
        let r = self.record();
        self.failed = r.is_err();
        Some(r)
    }
}

/// One item of an exec stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// The thread ran block `id`.
    Block(u32),
    /// The thread ran `skip` instructions in unlogged blocks, then block `id` (stack
    /// mode's packed word).
    SkipBlock(u32, u32),
    /// The next block starts at this global clock.
    Clock(u64),
    /// The thread ran this many instructions in unlogged blocks before the next one.
    Skip(u32),
    /// Host ns at which the next block starts.
    Host(u64),
    /// The thread entered syscall `num` at host time `ns`.
    SyscallEntry {
        /// Syscall number (x86-64).
        num: u32,
        /// Host ns.
        ns: u64,
    },
    /// The syscall returned `ret` at host time `ns`.
    SyscallReturn {
        /// Return value.
        ret: i64,
        /// Host ns.
        ns: u64,
    },
}

/// The words of an exec stream (a `KIND_EXEC` payload, or a ring copy's).
#[derive(Clone, Debug)]
pub struct Words<'a> {
    p: &'a [u8],
    at: usize,
    base: usize,
    failed: bool,
}

impl<'a> Words<'a> {
    /// The words of `p`, which sits at `base` in the log.
    pub fn new(p: &'a [u8], base: usize) -> Self {
        Words {
            p,
            at: 0,
            base,
            failed: false,
        }
    }

    /// Byte offset in the log of the next word.
    pub fn offset(&self) -> usize {
        self.base + self.at
    }

    #[cold]
    fn special(&mut self, w: u32) -> Result<Word, LogError> {
        let (p, q) = (self.p, self.at);
        // Errors name the word's own offset.
        let at = self.base + q - 4;
        let (word, len) = match w {
            MARKER => match u64_at(p, q) {
                Some(c) => (Word::Clock(c), 8),
                None => return Err(LogError::malformed(at, "truncated clock marker")),
            },
            HOST => match u64_at(p, q) {
                Some(ns) => (Word::Host(ns), 8),
                None => return Err(LogError::malformed(at, "truncated host time")),
            },
            SYSCALL => match (u32_at(p, q), u64_at(p, q + 4)) {
                (Some(num), Some(ns)) => (Word::SyscallEntry { num, ns }, 12),
                _ => return Err(LogError::malformed(at, "truncated syscall entry")),
            },
            SYSRET => match (u64_at(p, q), u64_at(p, q + 8)) {
                (Some(ret), Some(ns)) => (
                    Word::SyscallReturn {
                        ret: ret as i64,
                        ns,
                    },
                    16,
                ),
                _ => return Err(LogError::malformed(at, "truncated syscall return")),
            },
            SKIP => match u32_at(p, q) {
                Some(k) => (Word::Skip(k), 4),
                None => return Err(LogError::malformed(at, "truncated skip count")),
            },
            other => {
                return Err(LogError::malformed(
                    at,
                    format!("unknown exec-stream word {other:#x}"),
                ))
            }
        };
        self.at += len;
        Ok(word)
    }
}

impl Iterator for Words<'_> {
    type Item = Result<Word, LogError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let w = u32_at(self.p, self.at)?;
        self.at += 4;
        if w < MAX_BLOCK_ID {
            return Some(Ok(Word::Block(w)));
        }
        if w < FIRST_RESERVED {
            return Some(Ok(Word::SkipBlock(
                (w >> 24) & 0x7f,
                w & (PACKED_ID_LIMIT - 1),
            )));
        }
        let r = self.special(w);
        self.failed = r.is_err();
        Some(r)
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
        if end <= start {
            continue;
        }
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

/// A trigger hit: where each thread's snapshot ends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Hit number in its process, from 0.
    pub hit: u32,
    /// Index of the trigger (in the order the plugin was given them).
    pub trigger: u32,
    /// The trigger's block id.
    pub tb: u32,
    /// Global clock at the trigger block's start: later executions are not in the snapshot.
    pub clock: u64,
    /// The trigger's address (inside the block, or its start); 0 if not known.
    pub address: u64,
    /// The thread that hit.
    pub tid: u32,
}

impl Hit {
    /// Parses a `KIND_HIT` chunk.
    pub fn parse(c: &Chunk<'_>) -> Result<Self, LogError> {
        let p = c.payload;
        let (Some(hit), Some(trigger), Some(tb), Some(clock)) =
            (u32_at(p, 0), u32_at(p, 4), u32_at(p, 8), u64_at(p, 16))
        else {
            return Err(LogError::malformed(c.offset, "short trigger hit chunk"));
        };
        Ok(Hit {
            hit,
            trigger,
            tb,
            clock,
            address: u64_at(p, 24).unwrap_or(0),
            tid: c.tid,
        })
    }
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

impl ForkInfo {
    /// Parses a `KIND_FORK` chunk.
    pub fn parse(c: &Chunk<'_>) -> Result<Self, LogError> {
        let p = c.payload;
        let (Some(parent), Some(inherited), Some(clock)) =
            (u32_at(p, 0), u32_at(p, 4), u64_at(p, 8))
        else {
            return Err(LogError::malformed(c.offset, "short fork chunk"));
        };
        Ok(ForkInfo {
            parent,
            inherited,
            clock,
        })
    }
}

/// A thread called `execve`/`execveat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecCall {
    /// The calling thread.
    pub tid: u32,
    /// Host ns at the call.
    pub ns: u64,
    /// The program it asked for (empty if the plugin could not read it).
    pub path: String,
}

impl ExecCall {
    /// Parses a `KIND_EXEC_CALL` chunk.
    pub fn parse(c: &Chunk<'_>) -> Result<Self, LogError> {
        let Some(ns) = u64_at(c.payload, 0) else {
            return Err(LogError::malformed(c.offset, "short exec chunk"));
        };
        Ok(ExecCall {
            tid: c.tid,
            ns,
            path: String::from_utf8_lossy(&c.payload[8..]).into_owned(),
        })
    }
}

/// A thread's new name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm {
    /// The thread named.
    pub tid: u32,
    /// Host ns when it was named.
    pub ns: u64,
    /// Global clock when it was named.
    pub clock: u64,
    /// The name (the kernel keeps 15 bytes).
    pub name: String,
}

impl Comm {
    /// Parses a `KIND_COMM` chunk.
    pub fn parse(c: &Chunk<'_>) -> Result<Self, LogError> {
        let (Some(ns), Some(clock)) = (u64_at(c.payload, 0), u64_at(c.payload, 8)) else {
            return Err(LogError::malformed(c.offset, "short thread-name chunk"));
        };
        let name = &c.payload[16..];
        let name = &name[..name.len().min(64)];
        Ok(Comm {
            tid: c.tid,
            ns,
            clock,
            name: String::from_utf8_lossy(name).into_owned(),
        })
    }
}

/// The head of a `KIND_RING_COPY` chunk; its exec stream is the rest of the payload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RingCopyHead {
    /// The hit it was copied at.
    pub hit: u32,
    /// Slots in the thread's ring.
    pub slots: u32,
    /// The slot's sequence number (higher is newer).
    pub seq: u64,
}

/// Bytes before a ring copy's exec stream.
pub const RING_COPY_HEAD: usize = 16;

impl RingCopyHead {
    /// Parses a `KIND_RING_COPY` chunk's head.
    pub fn parse(c: &Chunk<'_>) -> Result<Self, LogError> {
        let p = c.payload;
        let (Some(hit), Some(slots), Some(seq)) = (u32_at(p, 0), u32_at(p, 4), u64_at(p, 8)) else {
            return Err(LogError::malformed(c.offset, "short ring copy chunk"));
        };
        Ok(RingCopyHead { hit, slots, seq })
    }
}

/// A maps snapshot chunk: its clock and text.
pub fn maps_chunk<'a>(c: &Chunk<'a>) -> Result<(u64, std::borrow::Cow<'a, str>), LogError> {
    let Some(clock) = u64_at(c.payload, 0) else {
        return Err(LogError::malformed(c.offset, "short maps chunk"));
    };
    Ok((clock, String::from_utf8_lossy(&c.payload[8..])))
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
        let errs: Vec<_> = Chunks::new(&d).filter_map(Result::err).collect();
        assert!(matches!(errs[..], [LogError::Truncated { offset }] if offset == whole));
    }

    #[test]
    fn words_name_their_kind_and_a_cut_record_is_an_error() {
        let mut p = Vec::new();
        for w in [5u32, SKIP, 9, MARKER] {
            p.extend_from_slice(&w.to_le_bytes());
        }
        p.extend_from_slice(&77u64.to_le_bytes());
        p.extend_from_slice(&SYSCALL.to_le_bytes());
        p.extend_from_slice(&[1, 2]);
        let words: Vec<_> = Words::new(&p, 100).collect();
        assert_eq!(words[0].as_ref().ok(), Some(&Word::Block(5)));
        assert_eq!(words[1].as_ref().ok(), Some(&Word::Skip(9)));
        assert_eq!(words[2].as_ref().ok(), Some(&Word::Clock(77)));
        assert!(matches!(
            words[3],
            Err(LogError::Malformed { offset: 124, .. })
        ));
        assert_eq!(words.len(), 4);
    }

    #[test]
    fn block_records_are_checked_before_they_are_trusted() {
        let mut p = Vec::new();
        push_tb_record(&mut p, 3, 0x1000, 1, 1, &[0xc3], &[0xc3], TB_HANDLER_ENTRY);
        let r: Vec<_> = TbRecords::new(&p, 0, 3).collect();
        let r = r[0].as_ref().expect("a good record");
        assert_eq!((r.id, r.vaddr, r.end(), r.flags), (3, 0x1000, 0x1001, 1));
        // An instruction longer than the block, a size past any block, a zero count.
        for (at, v) in [(20usize, 9u8), (16, 0xff), (12, 0)] {
            let mut bad = p.clone();
            bad[at] = v;
            if at == 16 {
                bad[17] = 0xff;
            }
            assert!(TbRecords::new(&bad, 0, 3).all(|r| r.is_err()), "byte {at}");
        }
    }
}
