//! The block log's constants and the few encoders the plugin shares with the tests.
//!
//! Everything is little-endian. The layout is described in the crate documentation.

/// Magic of the second format version (no modes, no block flags): still read.
pub const MAGIC_V2: u32 = 0x5054_5332; // "PTS2"
/// Magic of the format this crate writes and reads.
pub const MAGIC: u32 = 0x5054_5333; // "PTS3"

/// Chunk kind: process header (`pid u32, magic u32`, version 3: `mode u32`).
pub const KIND_HEADER: u8 = 0;
/// Chunk kind: translated-block descriptions.
pub const KIND_TBS: u8 = 1;
/// Chunk kind: one thread's exec stream.
pub const KIND_EXEC: u8 = 2;
/// Chunk kind: a `/proc/self/maps` snapshot (`clock u64`, then the text).
pub const KIND_MAPS: u8 = 3;
/// Chunk kind: a thread called `execve`/`execveat` (`ns u64`, then the path).
pub const KIND_EXEC_CALL: u8 = 4;
/// Chunk kind: a trigger hit (`hit u32, trigger u32, block u32, 0u32, clock u64,
/// address u64`).
pub const KIND_HIT: u8 = 8;
/// Chunk kind: a ring slot copied at a hit (`hit u32, slots u32, seq u64`, exec stream).
pub const KIND_RING_COPY: u8 = 9;
/// Chunk kind: a forked child's log (`parent pid u32, inherited blocks u32, clock u64`).
pub const KIND_FORK: u8 = 10;
/// Chunk kind: a thread was given a name (`ns u64, clock u64`, then the name); the
/// chunk's tid is the thread named (which need not be the thread that named it).
pub const KIND_COMM: u8 = 11;

/// Chunk kind (empty): thread `tid`'s flight recorder dropped its oldest executions, so
/// its stream starts mid-run (written by the recorder when it appends the rings).
pub const KIND_RING_WRAPPED: u8 = 12;

/// Bytes of a chunk header: `[kind u8][0u8; 3][tid u32][len u64]`.
pub const CHUNK_HEADER: usize = 16;

/// Exec-stream word: a `u64` global clock follows; the next block starts then.
pub const MARKER: u32 = u32::MAX;
/// Exec-stream word: a `u64` host time (ns, `CLOCK_MONOTONIC`) follows; the next block
/// starts then.
pub const HOST: u32 = u32::MAX - 1;
/// Exec-stream word: syscall entry, `u32` number and `u64` host ns follow.
pub const SYSCALL: u32 = u32::MAX - 2;
/// Exec-stream word: syscall return, `u64` value (an `i64`) and `u64` host ns follow.
pub const SYSRET: u32 = u32::MAX - 3;
/// Exec-stream word (stack mode): a `u32` count follows: the thread ran that many
/// instructions in blocks that were not logged before the next block.
pub const SKIP: u32 = u32::MAX - 4;
/// Words from this one up are reserved for the stream's own records.
pub const FIRST_RESERVED: u32 = u32::MAX - 15;
/// Block ids are below this.
pub const MAX_BLOCK_ID: u32 = 1 << 31;
/// Stack mode's short form of `SKIP k` followed by block `id`, for `1 <= k <= 126` and
/// `id < 2^24`: one word, `PACKED | k << 24 | id` (the most frequent case: a block
/// logged a few unlogged instructions after the last one).
pub const PACKED: u32 = 1 << 31;
/// The largest skip a packed word holds.
pub const PACKED_SKIP_MAX: u32 = 126;
/// Block ids a packed word holds are below this.
pub const PACKED_ID_LIMIT: u32 = 1 << 24;

/// Block flag: the block starts at a signal handler the program installed (the plugin
/// watches `rt_sigaction`), so a thread entering it without a call or jump to it was
/// delivered a signal.
pub const TB_HANDLER_ENTRY: u8 = 1;

/// Logging mode: every executed block is in the exec stream (ptsim's ground truth).
pub const MODE_EVERY_BLOCK: u32 = 0;
/// Logging mode: only the blocks a call stack needs are in the exec stream (calls,
/// returns, indirect jumps, syscalls, jumps between functions, signal handlers' entries),
/// with `SKIP` words counting the instructions of the others. A process switches to
/// every-block logging when it starts its second thread (an inline counter cannot tell
/// threads apart): from then on its streams hold every block.
pub const MODE_STACK: u32 = 1;

/// Fewest bytes a version-3 block record takes (a one-byte instruction, no first one).
pub const MIN_TB_RECORD: usize = 4 + 8 + 4 + 4 + 1 + 1 + 1 + 1;

/// The longest x86 instruction.
pub const MAX_INSN: usize = 15;

/// The largest block size accepted: QEMU cuts blocks at 512 instructions and at page
/// boundaries (a block may end on the next page), so anything larger is damage.
pub const MAX_TB_SIZE: u32 = 2 * 4096 + MAX_INSN as u32;

/// A chunk's 16-byte header.
pub fn chunk_header(kind: u8, tid: u32, len: u64) -> [u8; CHUNK_HEADER] {
    let mut head = [0u8; CHUNK_HEADER];
    head[0] = kind;
    head[4..8].copy_from_slice(&tid.to_le_bytes());
    head[8..16].copy_from_slice(&len.to_le_bytes());
    head
}

/// The `KIND_HEADER` payload of a version-3 log.
pub fn header_payload(pid: u32, mode: u32) -> [u8; 12] {
    let mut p = [0u8; 12];
    p[0..4].copy_from_slice(&pid.to_le_bytes());
    p[4..8].copy_from_slice(&MAGIC.to_le_bytes());
    p[8..12].copy_from_slice(&mode.to_le_bytes());
    p
}

/// Appends one version-3 block record to `out` (instruction bytes beyond 15 are cut).
#[allow(clippy::too_many_arguments)]
pub fn push_tb_record(
    out: &mut Vec<u8>,
    id: u32,
    vaddr: u64,
    n_insns: u32,
    size: u32,
    last: &[u8],
    first: &[u8],
    flags: u8,
) {
    let last = &last[..last.len().min(MAX_INSN)];
    let first = &first[..first.len().min(MAX_INSN)];
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&vaddr.to_le_bytes());
    out.extend_from_slice(&n_insns.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.push(last.len() as u8);
    out.extend_from_slice(last);
    out.push(first.len() as u8);
    out.extend_from_slice(first);
    out.push(flags);
}
