//! The emulate block log: what ptscope's qemu plugin (`tools/ptsim-plugin`) writes, how
//! to read it without trusting it, and how a block's last instruction transfers control.
//!
//! One crate for the three that share the format: the plugin (writes it), ptscope's
//! emulate decoder (`crates/emulate`, streams it) and ptsim (`crates/ptsim`, reads it
//! whole as its ground truth).
//!
//! ```
//! use ptscope_blocklog::format::*;
//! use ptscope_blocklog::{Chunks, TbRecords, Word, Words};
//!
//! // A log: its header, one block (`ret` at 0x1000), one thread that ran it twice.
//! let mut log = Vec::new();
//! let head = header_payload(42, MODE_STACK);
//! log.extend_from_slice(&chunk_header(KIND_HEADER, 0, head.len() as u64));
//! log.extend_from_slice(&head);
//! let mut tbs = Vec::new();
//! push_tb_record(&mut tbs, 0, 0x1000, 1, 1, &[0xc3], &[0xc3], 0);
//! log.extend_from_slice(&chunk_header(KIND_TBS, 0, tbs.len() as u64));
//! log.extend_from_slice(&tbs);
//! let exec: Vec<u8> = [0u32, SKIP, 3, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
//! log.extend_from_slice(&chunk_header(KIND_EXEC, 42, exec.len() as u64));
//! log.extend_from_slice(&exec);
//!
//! let mut words = Vec::new();
//! for chunk in Chunks::new(&log) {
//!     let chunk = chunk?;
//!     match chunk.kind {
//!         KIND_TBS => {
//!             for tb in TbRecords::new(chunk.payload, chunk.payload_offset(), 3) {
//!                 assert_eq!(tb?.end(), 0x1001);
//!             }
//!         }
//!         KIND_EXEC => {
//!             for w in Words::new(chunk.payload, chunk.payload_offset()) {
//!                 words.push(w?);
//!             }
//!         }
//!         _ => {}
//!     }
//! }
//! assert_eq!(words, [Word::Block(0), Word::Skip(3), Word::Block(0)]);
//! # Ok::<(), ptscope_blocklog::LogError>(())
//! ```
//!
//! # The format
//!
//! A sequence of chunks, each `[kind u8][0u8; 3][tid u32][len u64]` followed by `len`
//! payload bytes (little-endian throughout; [`format`] has the constants):
//!
//! * `KIND_HEADER` (first): `pid u32`, `magic u32` (`PTS3`; `PTS2` logs, without the
//!   mode and block flags, are still read), `mode u32`: `MODE_EVERY_BLOCK` (every
//!   executed block is logged: ptsim's ground truth) or `MODE_STACK` (only what a call
//!   stack needs, below).
//! * `KIND_TBS`: translated blocks, each `id u32, vaddr u64, n_insns u32, size u32,
//!   last_len u8, last instruction bytes, first_len u8, first instruction bytes,
//!   flags u8` (`TB_HANDLER_ENTRY`: the block starts at an installed signal handler).
//!   Blocks are described once per translation; executions cost 4 bytes each.
//! * `KIND_EXEC`: a thread's exec stream of `u32` words: a block id (below
//!   `MAX_BLOCK_ID`) is an execution; `PACKED | k << 24 | id` (stack mode) an execution
//!   after `k` (1..=126) unlogged instructions; `MARKER` + `u64`: the global instruction clock
//!   the next block starts at (written when it is not where the thread's last block
//!   ended: another thread ran, or a new chunk begins); `SKIP` + `u32`: the thread ran
//!   that many instructions in blocks that were not logged (stack mode); `HOST` + `u64`:
//!   the host time (`CLOCK_MONOTONIC` ns) the next block starts at (a thread's first
//!   block, each chunk's start, every 4096 logged blocks); `SYSCALL` + `u32` number +
//!   `u64` ns, `SYSRET` + `u64` value + `u64` ns: a syscall's entry and return (an
//!   `execve` without a return replaced the program, which qemu-user then runs natively).
//! * `KIND_MAPS`: `clock u64` then `/proc/self/maps`, whenever a block is translated
//!   outside every mapping of the last snapshot.
//! * `KIND_EXEC_CALL`: `ns u64`, then the path a thread asked `execve`/`execveat` for.
//! * `KIND_HIT`: a trigger hit: `hit u32, trigger u32, block u32, 0u32, clock u64,
//!   address u64`; the chunk's tid is the thread that hit.
//! * `KIND_RING_COPY`: a ring slot copied at a hit (`--multi-snapshot`): `hit u32,
//!   slots u32, seq u64`, then the slot's exec stream.
//! * `KIND_FORK`: the log is a forked child's: `parent pid u32`, `blocks u32` (ids below
//!   it are described in the parent's log), `clock u64`.
//! * `KIND_COMM`: a thread was named (`prctl(PR_SET_NAME)`, or a write to
//!   `/proc/…/task/TID/comm` as `pthread_setname_np` does for another thread): `ns u64,
//!   clock u64`, then the name; the chunk's tid is the thread named.
//! * `KIND_RING_WRAPPED` (empty; written by the recorder as it appends a flight
//!   recorder's ring): the thread's oldest executions were dropped, its stream starts
//!   mid-run.
//!
//! In stack mode the logged blocks are those ending in a call, return, indirect jump,
//! syscall, or a direct jump (or conditional one, either way) that leaves its function
//! (tail calls, `.cold` parts; decided at translation from the functions the ELF files
//! declare, the same ones ptscope names), plus the entries of signal handlers. Code
//! between two logged blocks of a thread therefore never leaves one function, and the
//! instructions it ran are counted by an inline counter (`SKIP`). A process switches to
//! every-block logging when it starts a second thread.
//!
//! A reader trusts nothing: every length, count and id is checked against the bytes it
//! sits in before it is used or anything is allocated for it ([`LogError`] names the
//! byte offset).

#![warn(missing_docs)]

pub mod classify;
pub mod format;
mod index;
mod log;
mod read;

pub use index::{LogIndex, RingCopyAt, ThreadChunks, MAX_BLOCKS};
pub use log::{
    BlockLog, CompactExecs, Exec, HostStamp, MapsSnapshot, RingCopy, StampKind, Syscall, TbDef,
    ThreadLog,
};
pub use read::{
    maps_chunk, parse_maps, u32_at, u64_at, whole_chunks_len, Chunk, Chunks, Comm, ExecCall,
    ForkInfo, Header, Hit, LogError, MapEntry, RingCopyHead, TbRecord, TbRecords, Word, Words,
    RING_COPY_HEAD,
};
