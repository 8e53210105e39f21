//! Ground truth as perf reports branches: what ran, and what perf must decode.
//!
//! Files are tab-separated: `tid time_ns kind from to`, addresses in hex, kinds spelled as
//! perf's `flags` field (`call`, `return`, `jmp`, `jcc`, `tr strt`, `tr end syscall`,
//! `tr end async`) plus `error` where a fault makes perf report a decode error.

use crate::pt::{Encoded, GapCause};
use crate::truth::{Step, StepKind, ThreadTrace};
use anyhow::{Context, Result};
use std::fmt;
use std::io::Write;
use std::path::Path;

/// The branch kinds perf reports with `--itrace=be`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// `call`.
    Call,
    /// `return`.
    Return,
    /// `jmp`.
    Jmp,
    /// `jcc` (taken conditional branch).
    Jcc,
    /// `tr strt`: tracing starts (or decoding resynchronises) at `to`.
    TraceStart,
    /// `tr end syscall`: tracing stops at the syscall instruction at `from`.
    SyscallEnd,
    /// `tr end async`: tracing stops asynchronously at `from`.
    AsyncEnd,
    /// `tr end return`: perf's report of a FUP it ignores before a return (never expected).
    ReturnEnd,
    /// `tr end jmp`: the same before an indirect jump (never expected).
    JmpEnd,
    /// `tr end call`: the same before an indirect call (never expected).
    CallEnd,
    /// A decode error reported by perf.
    Error,
    /// Perf's output here is not predictable from the execution; comparison skips ahead to
    /// the next expected branch.
    Uncertain,
}

impl BranchKind {
    /// The spelling used in the truth files.
    pub fn as_str(self) -> &'static str {
        match self {
            BranchKind::Call => "call",
            BranchKind::Return => "return",
            BranchKind::Jmp => "jmp",
            BranchKind::Jcc => "jcc",
            BranchKind::TraceStart => "tr strt",
            BranchKind::SyscallEnd => "tr end syscall",
            BranchKind::AsyncEnd => "tr end async",
            BranchKind::ReturnEnd => "tr end return",
            BranchKind::JmpEnd => "tr end jmp",
            BranchKind::CallEnd => "tr end call",
            BranchKind::Error => "error",
            BranchKind::Uncertain => "uncertain",
        }
    }

    /// Parses [`BranchKind::as_str`] output.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "call" => BranchKind::Call,
            "return" => BranchKind::Return,
            "jmp" => BranchKind::Jmp,
            "jcc" => BranchKind::Jcc,
            "tr strt" => BranchKind::TraceStart,
            "tr end syscall" => BranchKind::SyscallEnd,
            "tr end async" => BranchKind::AsyncEnd,
            "tr end return" => BranchKind::ReturnEnd,
            "tr end jmp" => BranchKind::JmpEnd,
            "tr end call" => BranchKind::CallEnd,
            "error" => BranchKind::Error,
            "uncertain" => BranchKind::Uncertain,
            _ => return None,
        })
    }
}

impl fmt::Display for BranchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reported branch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Branch {
    /// Thread id.
    pub tid: u32,
    /// Perf time in ns.
    pub time: u64,
    /// Kind.
    pub kind: BranchKind,
    /// Source address (0 when tracing starts).
    pub from: u64,
    /// Destination address (0 when tracing stops).
    pub to: u64,
}

/// A thread's branches.
#[derive(Clone, Debug, Default)]
pub struct ThreadExpectation {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Branches in order.
    pub branches: Vec<Branch>,
}

pub(crate) fn to_branch(s: &Step, tid: u32, ns: &dyn Fn(u64) -> u64) -> Option<Branch> {
    let kind = match s.kind {
        StepKind::Start => BranchKind::TraceStart,
        StepKind::Jcc { taken: true } => BranchKind::Jcc,
        StepKind::Jcc { taken: false } => return None,
        StepKind::Jmp | StepKind::IndirectJmp => BranchKind::Jmp,
        StepKind::Call | StepKind::IndirectCall => BranchKind::Call,
        StepKind::Return => BranchKind::Return,
        StepKind::Syscall => BranchKind::SyscallEnd,
        // With BranchEn set (as perf records it), the decoder walks to the FUP's IP and
        // reports the stop there, whatever instruction it interrupted.
        StepKind::Async { .. } => BranchKind::AsyncEnd,
    };
    Some(Branch {
        tid,
        time: ns(s.clock),
        kind,
        from: s.from,
        to: s.to,
    })
}

/// Branches perf reports for `steps`.
fn reported(out: &mut Vec<Branch>, steps: &[Step], tid: u32, ns: &dyn Fn(u64) -> u64) {
    out.extend(steps.iter().filter_map(|s| to_branch(s, tid, ns)));
}

/// Every branch the thread executed.
pub fn truth(t: &ThreadTrace, ns: &dyn Fn(u64) -> u64, pid: u32) -> ThreadExpectation {
    ThreadExpectation {
        pid,
        tid: t.tid,
        branches: truth_iter(t, ns).collect(),
    }
}

/// [`truth`] without collecting.
pub fn truth_iter<'a>(
    t: &'a ThreadTrace,
    ns: &'a dyn Fn(u64) -> u64,
) -> impl Iterator<Item = Branch> + 'a {
    t.steps.iter().filter_map(move |s| to_branch(s, t.tid, ns))
}

/// The branches perf must decode from `enc` (cut to its last bytes from `cut` on, if set),
/// counting only the first `until` steps (a snapshot taken before the end; it must end
/// right before a PSB, where everything before has been decoded).
pub fn expected(
    t: &ThreadTrace,
    enc: &Encoded,
    cut: Option<usize>,
    until: Option<usize>,
    ns: &dyn Fn(u64) -> u64,
    pid: u32,
) -> ThreadExpectation {
    let len = t.steps.len();
    let mut n = until.map_or(len, |u| u.min(len));
    if n == len {
        // The stream ends here: perf never reports its unwalked tail.
        n = len.saturating_sub(enc.unwalked_tail);
    }
    let steps = &t.steps[..n];
    let mut out = ThreadExpectation {
        pid,
        tid: t.tid,
        // Sized once: these vectors are large, and growing them costs page faults.
        branches: Vec::with_capacity(truth_iter(t, ns).count() + 2 * enc.gaps.len() + 1),
    };
    crate::advise_huge(&out.branches);
    let mut i = 0;
    if let Some(cut) = cut {
        // The decoder skips to the first PSB in the snapshot.
        let Some(p) = enc.psbs.iter().find(|p| p.offset >= cut) else {
            return out;
        };
        // perf reports nothing for synchronising at a PSB's FUP: decoding simply starts.
        i = p.steps_before;
    }
    let mut gaps = enc.gaps.clone();
    gaps.sort_by_key(|g| g.first);
    let start = i;
    for g in gaps.iter().filter(|g| g.first >= start && g.first < n) {
        let mut end = g.first.min(n);
        if g.cause == GapCause::Overflow {
            // perf walks direct calls and jumps only on its way to the next packet that
            // needs an instruction; the next packet is the OVF, which it reports at once.
            end -= crate::pt::packetless_tail(&steps[i.min(end)..end]);
        }
        reported(&mut out.branches, &steps[i..end], t.tid, ns);
        let when = steps.get(g.first).or(steps.last()).map_or(0, |s| s.clock);
        out.branches.push(Branch {
            tid: t.tid,
            time: ns(when),
            kind: BranchKind::Error,
            from: match g.cause {
                GapCause::Overflow => 0,
                GapCause::Corrupt => 1,
            },
            to: 0,
        });
        // After an overflow perf reports the FUP as a trace start; a PSB's FUP it does not.
        if let (Some((ip, clock)), GapCause::Overflow) = (g.resume, g.cause) {
            out.branches.push(Branch {
                tid: t.tid,
                time: ns(clock),
                kind: BranchKind::TraceStart,
                from: 0,
                to: ip,
            });
        }
        i = (g.first + g.count).min(n);
    }
    let i = i.min(n);
    reported(&mut out.branches, &steps[i..], t.tid, ns);
    out
}

/// Writes threads' branches as a TSV file.
pub fn write_tsv(path: &Path, threads: &[ThreadExpectation]) -> Result<()> {
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let res = (|| -> std::io::Result<()> {
        writeln!(w, "# ptsim branches v1: pid tid time_ns kind from to")?;
        for t in threads {
            for b in &t.branches {
                writeln!(
                    w,
                    "{}\t{}\t{}\t{}\t{:#x}\t{:#x}",
                    t.pid, b.tid, b.time, b.kind, b.from, b.to
                )?;
            }
        }
        w.flush()
    })();
    res.with_context(|| format!("cannot write {}", path.display()))
}

/// Reads a file written by [`write_tsv`], grouping branches by thread.
pub fn read_tsv(path: &Path) -> Result<Vec<ThreadExpectation>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out: Vec<ThreadExpectation> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let bad = || format!("{}:{}: malformed line {line:?}", path.display(), n + 1);
        let f: Vec<&str> = line.split('\t').collect();
        let [pid, tid, time, kind, from, to] = f[..] else {
            anyhow::bail!(bad());
        };
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16);
        let b = Branch {
            tid: tid.parse().with_context(bad)?,
            time: time.parse().with_context(bad)?,
            kind: BranchKind::parse(kind).with_context(bad)?,
            from: hex(from).with_context(bad)?,
            to: hex(to).with_context(bad)?,
        };
        let pid: u32 = pid.parse().with_context(bad)?;
        match out.iter_mut().find(|t| t.tid == b.tid) {
            Some(t) => t.branches.push(b),
            None => out.push(ThreadExpectation {
                pid,
                tid: b.tid,
                branches: vec![b],
            }),
        }
    }
    Ok(out)
}

/// Magic number of the binary branch files.
const BIN_MAGIC: &[u8; 8] = b"PTSIMBR1";

fn put_varint(w: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        w.push((v as u8) | 0x80);
        v >>= 7;
    }
    w.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

const KINDS: [BranchKind; 12] = [
    BranchKind::Call,
    BranchKind::Return,
    BranchKind::Jmp,
    BranchKind::Jcc,
    BranchKind::TraceStart,
    BranchKind::SyscallEnd,
    BranchKind::AsyncEnd,
    BranchKind::ReturnEnd,
    BranchKind::JmpEnd,
    BranchKind::CallEnd,
    BranchKind::Error,
    BranchKind::Uncertain,
];

/// Streams threads' branches into the compact binary format (`PTSIMBR1`): per thread
/// `pid u32, tid u32, count u64`, then per branch `kind u8` and LEB128 varints of the
/// time delta, `from - previous to` (zigzag) and `to - from` (zigzag). About 6 bytes per
/// branch instead of 50 in TSV.
pub struct BinWriter<W: Write> {
    w: W,
    buf: Vec<u8>,
}

impl<W: Write> BinWriter<W> {
    /// Starts a file holding `threads` threads.
    pub fn new(mut w: W, threads: u32) -> std::io::Result<Self> {
        w.write_all(BIN_MAGIC)?;
        w.write_all(&threads.to_le_bytes())?;
        Ok(Self {
            w,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    /// Writes one thread's `count` branches.
    pub fn thread(
        &mut self,
        pid: u32,
        tid: u32,
        count: u64,
        branches: impl Iterator<Item = Branch>,
    ) -> std::io::Result<()> {
        self.w.write_all(&pid.to_le_bytes())?;
        self.w.write_all(&tid.to_le_bytes())?;
        self.w.write_all(&count.to_le_bytes())?;
        let (mut time, mut last_to) = (0u64, 0u64);
        let mut written = 0u64;
        for b in branches {
            written += 1;
            let k = KINDS.iter().position(|&k| k == b.kind).unwrap_or(0) as u8;
            self.buf.push(k);
            put_varint(&mut self.buf, zigzag(b.time.wrapping_sub(time) as i64));
            put_varint(&mut self.buf, zigzag(b.from.wrapping_sub(last_to) as i64));
            put_varint(&mut self.buf, zigzag(b.to.wrapping_sub(b.from) as i64));
            time = b.time;
            last_to = b.to;
            if self.buf.len() >= 1 << 16 {
                self.w.write_all(&self.buf)?;
                self.buf.clear();
            }
        }
        self.w.write_all(&self.buf)?;
        self.buf.clear();
        if written != count {
            return Err(std::io::Error::other(format!(
                "branch count mismatch: announced {count}, wrote {written}"
            )));
        }
        Ok(())
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

/// Reads a file written by [`BinWriter`].
pub fn read_bin(path: &Path) -> Result<Vec<ThreadExpectation>> {
    let d = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bad = |what: &str| anyhow::anyhow!("{}: malformed branch file: {what}", path.display());
    if d.get(..8) != Some(&BIN_MAGIC[..]) {
        return Err(bad("bad magic"));
    }
    let mut at = 8usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = d.get(at..at + n).ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(s)
    };
    let u32_of = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let threads = u32_of(take(4)?);
    let mut out = Vec::new();
    for _ in 0..threads {
        let pid = u32_of(take(4)?);
        let tid = u32_of(take(4)?);
        let mut n8 = [0u8; 8];
        n8.copy_from_slice(take(8)?);
        let n = u64::from_le_bytes(n8);
        let mut branches = Vec::with_capacity(n.min(1 << 24) as usize);
        let (mut time, mut last_to) = (0u64, 0u64);
        for _ in 0..n {
            let k = take(1)?[0];
            let kind = *KINDS.get(k as usize).ok_or_else(|| bad("unknown kind"))?;
            let mut vals = [0u64; 3];
            for v in &mut vals {
                let mut shift = 0;
                loop {
                    let b = take(1)?[0];
                    if shift > 63 {
                        return Err(bad("varint too long"));
                    }
                    *v |= ((b & 0x7f) as u64) << shift;
                    shift += 7;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
            }
            time = time.wrapping_add(unzigzag(vals[0]) as u64);
            let from = last_to.wrapping_add(unzigzag(vals[1]) as u64);
            let to = from.wrapping_add(unzigzag(vals[2]) as u64);
            last_to = to;
            branches.push(Branch {
                tid,
                time,
                kind,
                from,
                to,
            });
        }
        out.push(ThreadExpectation { pid, tid, branches });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_branch_files_round_trip() {
        let t = ThreadExpectation {
            pid: 7,
            tid: 8,
            branches: vec![
                Branch {
                    tid: 8,
                    time: 1_000_000_000_123,
                    kind: BranchKind::TraceStart,
                    from: 0,
                    to: 0x40_0000_1000,
                },
                Branch {
                    tid: 8,
                    time: 1_000_000_000_125,
                    kind: BranchKind::Call,
                    from: 0x40_0000_1004,
                    to: 0x7fff_0000_0000,
                },
                Branch {
                    tid: 8,
                    time: 1_000_000_000_125,
                    kind: BranchKind::Return,
                    from: 0x7fff_0000_0010,
                    to: 0x40_0000_1009,
                },
                Branch {
                    tid: 8,
                    time: 1_000_000_000_130,
                    kind: BranchKind::Error,
                    from: 6,
                    to: 0,
                },
            ],
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("b.ptb");
        let mut w = BinWriter::new(std::fs::File::create(&path).unwrap(), 1).unwrap();
        w.thread(
            t.pid,
            t.tid,
            t.branches.len() as u64,
            t.branches.iter().copied(),
        )
        .unwrap();
        w.finish().unwrap();
        let back = read_bin(&path).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].pid, back[0].tid), (7, 8));
        assert_eq!(back[0].branches, t.branches);
        std::fs::write(&path, b"PTSIMBR1\x01\x00").unwrap();
        assert!(read_bin(&path).is_err());
    }
}
