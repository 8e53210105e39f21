//! ptscope's own Intel Processor Trace decoder: packets ([`packet`]), instructions a
//! basic block at a time ([`insn`], [`cache`]) and time ([`time`]) into branches and
//! instruction-level facts ([`decoder`]).
//!
//! A trace is cut at its PSBs into chunks ([`chunks`]) that decode independently and
//! join without a seam ([`decode_chunk`]), so a trace decodes on every core.
//!
//! ```
//! use ptscope_intel_pt::decoder::{BranchKind, Config, EventKind, Memory, StopReason};
//! use ptscope_intel_pt::encode::Encoder;
//! use ptscope_intel_pt::packet::IpCompression;
//! use ptscope_intel_pt::{cache::BlockCache, decode_chunk, insn::FactOptions};
//!
//! // The program: at 0x1000 `call 0x1010; syscall`, at 0x1010 `dec eax; jnz 0x1010; ret`.
//! struct Program(Vec<u8>);
//! impl Memory for Program {
//!     fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
//!         self.0.get(ip.checked_sub(0x1000)? as usize..)
//!     }
//! }
//! let mut code = vec![0xe8, 0x0b, 0, 0, 0, 0x0f, 0x05];
//! code.resize(0x10, 0x90);
//! code.extend_from_slice(&[0xff, 0xc8, 0x75, 0xfc, 0xc3]);
//! let program = Program(code);
//!
//! // The trace: synchronise at 0x1000; the loop runs twice (taken, not taken); the
//! // return is compressed into a TNT bit; the syscall leaves user space (TIP.PGD).
//! let mut e = Encoder::new();
//! e.psb().tsc(1000).fup(IpCompression::Sext48, 0x1000).psbend();
//! e.tnt(&[true, false, true]).tip_pgd(IpCompression::Suppressed, 0);
//! let trace = e.into_bytes();
//!
//! let mut cache = BlockCache::new(FactOptions::default());
//! let mut events = Vec::new();
//! decode_chunk(&trace, 0..trace.len(), Config::default(), &program, &mut cache, 0, &mut events);
//! let what: Vec<String> = events
//!     .iter()
//!     .filter_map(|e| match e.kind {
//!         EventKind::Branch { kind, from, to } => Some(format!("{kind:?} {from:#x} -> {to:#x}")),
//!         EventKind::Stop { from, why } => Some(format!("stop at {from:#x}: {why:?}")),
//!         _ => None,
//!     })
//!     .collect();
//! assert_eq!(
//!     what,
//!     [
//!         "Call 0x1000 -> 0x1010",
//!         "Jcc 0x1012 -> 0x1010",
//!         "Ret 0x1014 -> 0x1005",
//!         "stop at 0x1005: Branch(Syscall)",
//!     ]
//! );
//! ```

#![warn(missing_docs)]

pub mod cache;
pub mod decoder;
pub mod encode;
pub mod insn;
pub mod packet;
pub mod time;

use decoder::{Config, Decoder, Event, Memory};
use std::ops::Range;

/// Cuts `trace` into chunks that start at a PSB and hold about `size` bytes each (a
/// chunk ends where the next starts, at a PSB). Bytes before the first PSB belong to no
/// chunk: decoding cannot start there.
pub fn chunks(trace: &[u8], size: usize) -> Vec<Range<usize>> {
    let psbs = packet::psb_offsets(trace);
    let mut out = Vec::new();
    let mut start = match psbs.first() {
        Some(&p) => p,
        None => return out,
    };
    for &p in &psbs[1..] {
        if p - start >= size {
            out.push(start..p);
            start = p;
        }
    }
    out.push(start..trace.len());
    out
}

/// Decodes the chunk `range` of `trace` (it starts at a PSB; when it ends before the
/// trace does, at the PSB that starts the next chunk, the walk goes on to that PSB's
/// IP so that the chunks' events join exactly), appending to `out`.
pub fn decode_chunk<M: Memory>(
    trace: &[u8],
    range: Range<usize>,
    cfg: Config,
    mem: &M,
    cache: &mut cache::BlockCache,
    reference: u64,
    out: &mut Vec<Event>,
) {
    let mut d = Decoder::new(trace, cfg, mem, cache, reference);
    if !d.sync_forward(range.start) {
        return;
    }
    if range.end < trace.len() {
        d.end_at(range.end);
    }
    d.run(out);
}
