//! **Test only.** Intel's libipt (2.0.5, Debian's `libipt-dev`, BSD-3-Clause) decoding a
//! trace, as an oracle for ptscope's own decoder (`ptscope-intel-pt`) and as a reference
//! in the benchmarks: its instruction-flow decoder (every instruction) or its block
//! decoder, reading code through the same [`Memory`] ptscope's decoder uses. ptscope
//! does not ship or link libipt; only this crate's tests and the benchmarks do.
//!
//! The binding is a small C shim of this crate's own (`csrc/oracle.c`) over libipt's
//! public API, so no structure layout is repeated in Rust. Without libipt's header the
//! crate builds empty ([`AVAILABLE`] is false) and its tests skip.
//!
//! ```no_run
//! use ptscope_intel_pt::decoder::Memory;
//! use ptscope_libipt_oracle::{decode, Flow};
//!
//! struct Code(Vec<u8>);
//! impl Memory for Code {
//!     fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
//!         self.0.get(usize::try_from(ip.checked_sub(0x1000)?).ok()?..)
//!     }
//! }
//! let trace: Vec<u8> = std::fs::read("trace.pt")?;
//! let counts = decode(&trace, &Code(vec![0x90; 16]), false, |f| {
//!     if let Flow::Insn(ip) = f {
//!         println!("{ip:x}");
//!     }
//! })?;
//! println!("{} instructions, {} errors", counts.insns, counts.errors);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

use ptscope_intel_pt::decoder::Memory;

mod recording;
pub use recording::{read_recording, Image, Queues};

/// True when the crate was built with libipt.
pub const AVAILABLE: bool = cfg!(libipt);

/// What libipt reports, in order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Flow {
    /// An instruction ran (instruction-flow decoder).
    Insn(u64),
    /// A block ran (block decoder): its first and last instruction, and how many.
    Block {
        /// First instruction.
        ip: u64,
        /// Last instruction.
        end_ip: u64,
        /// Instructions.
        ninsn: u16,
    },
    /// A decode error (libipt's `pte_*` code, positive) at a trace offset; decoding
    /// resumes at the next PSB.
    Error {
        /// `-status`.
        code: u32,
        /// The decoder's offset.
        offset: u64,
    },
    /// Tracing enabled at an IP.
    Enabled(u64),
    /// Tracing disabled (at an IP, 0 when suppressed).
    Disabled(u64),
    /// An overflow; tracing resumed at the IP (0 when unknown).
    Overflow(u64),
    /// A PTWRITE payload (and its IP, 0 when unknown).
    Ptwrite {
        /// The value.
        payload: u64,
        /// The instruction.
        ip: u64,
    },
    /// A TSX state change at an IP.
    Tsx {
        /// The instruction.
        ip: u64,
        /// Inside a transaction now.
        speculative: bool,
        /// The transaction aborted.
        aborted: bool,
    },
    /// An asynchronous branch (interrupt, signal): from, to.
    Async(u64, u64),
    /// Another libipt event (its `pt_event_type`).
    Other(u32),
}

/// What a decode counted.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Instructions.
    pub insns: u64,
    /// Blocks (block decoder).
    pub blocks: u64,
    /// Errors.
    pub errors: u64,
}

/// libipt could not be set up (its negative error code), or is not built in.
#[derive(Debug)]
pub struct Error(pub i32);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            write!(f, "this build has no libipt (install libipt-dev)")
        } else {
            write!(f, "libipt error {}", self.0)
        }
    }
}

impl std::error::Error for Error {}

/// Decodes `trace` with libipt — every instruction, or (`blocks`) blocks — reading code
/// from `mem`'s space 0, calling `each` for what it reports. Decoding starts at the
/// first PSB and, after an error, resumes at the next.
pub fn decode<M: Memory>(
    trace: &[u8],
    mem: &M,
    blocks: bool,
    mut each: impl FnMut(Flow),
) -> Result<Counts, Error> {
    imp::run(trace, mem, blocks, Some(&mut each))
}

/// [`decode`] counting only (what the benchmarks time).
pub fn count<M: Memory>(trace: &[u8], mem: &M, blocks: bool) -> Result<Counts, Error> {
    imp::run::<M>(trace, mem, blocks, None)
}

#[cfg(libipt)]
mod imp {
    use super::*;
    use std::ffi::c_void;

    type Read = unsafe extern "C" fn(*mut u8, usize, u64, *mut c_void) -> usize;
    type Emit = unsafe extern "C" fn(*mut c_void, i32, u64, u64, u64);

    extern "C" {
        fn ptscope_oracle_run(
            trace: *const u8,
            len: usize,
            blocks: i32,
            read: Read,
            read_ctx: *mut c_void,
            emit: Option<Emit>,
            emit_ctx: *mut c_void,
            counts: *mut u64,
        ) -> i32;
    }

    unsafe extern "C" fn read<M: Memory>(
        buf: *mut u8,
        size: usize,
        ip: u64,
        ctx: *mut c_void,
    ) -> usize {
        // SAFETY: `ctx` is the `&M` `run` passed, alive for the call.
        let mem = unsafe { &*(ctx as *const M) };
        let Some(code) = mem.code(0, ip) else {
            return 0;
        };
        let n = code.len().min(size);
        // SAFETY: libipt gives a buffer of `size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), buf, n) };
        n
    }

    type Sink<'a> = &'a mut dyn FnMut(Flow);

    unsafe extern "C" fn emit(ctx: *mut c_void, kind: i32, a: u64, b: u64, c: u64) {
        // SAFETY: `ctx` is the `&mut Sink` `run` passed, alive for the call.
        let sink = unsafe { &mut *(ctx as *mut Sink<'_>) };
        let f = match kind {
            0 => Flow::Insn(a),
            1 => Flow::Block {
                ip: a,
                end_ip: b,
                ninsn: c as u16,
            },
            2 => Flow::Error {
                code: a as u32,
                offset: b,
            },
            3 => Flow::Enabled(a),
            4 => Flow::Disabled(a),
            5 => Flow::Overflow(a),
            6 => Flow::Ptwrite { payload: a, ip: b },
            7 => Flow::Tsx {
                ip: a,
                speculative: b != 0,
                aborted: c != 0,
            },
            8 => Flow::Async(a, b),
            _ => Flow::Other(a as u32),
        };
        sink(f);
    }

    pub(super) fn run<M: Memory>(
        trace: &[u8],
        mem: &M,
        blocks: bool,
        each: Option<&mut dyn FnMut(Flow)>,
    ) -> Result<Counts, Error> {
        let mut counts = [0u64; 3];
        let mut sink: Option<Sink<'_>> = each;
        let (emit_fn, emit_ctx): (Option<Emit>, *mut c_void) = match &mut sink {
            Some(s) => (Some(emit), s as *mut Sink<'_> as *mut c_void),
            None => (None, std::ptr::null_mut()),
        };
        // SAFETY: the trace, memory and sink outlive the call; libipt only reads the
        // trace; the shim calls back only during the call.
        let status = unsafe {
            ptscope_oracle_run(
                trace.as_ptr(),
                trace.len(),
                i32::from(blocks),
                read::<M>,
                mem as *const M as *mut c_void,
                emit_fn,
                emit_ctx,
                counts.as_mut_ptr(),
            )
        };
        if status < 0 {
            return Err(Error(status));
        }
        Ok(Counts {
            insns: counts[0],
            blocks: counts[1],
            errors: counts[2],
        })
    }
}

#[cfg(not(libipt))]
mod imp {
    use super::*;

    pub(super) fn run<M: Memory>(
        _trace: &[u8],
        _mem: &M,
        _blocks: bool,
        _each: Option<&mut dyn FnMut(Flow)>,
    ) -> Result<Counts, Error> {
        Err(Error(0))
    }
}
