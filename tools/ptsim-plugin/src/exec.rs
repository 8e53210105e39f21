//! The callbacks run as blocks execute: the hot paths of both modes, and trigger hits.
//!
//! A callback's user-data word is `trigger << 48 | id << 16 | n_insns` ([`userdata`]).

use crate::state::{fast_state, state, write_chunk, Rec, ThreadState, STAMP_EVERY};
use crate::{icount, proc, set_icount, write_published, CLOCK, SHARED, STOPPED, TRIGGER_BLOCKS};
use ptscope_blocklog::format::{
    HOST, KIND_HIT, MARKER, PACKED, PACKED_ID_LIMIT, PACKED_SKIP_MAX, SKIP,
};
use std::ffi::{c_uint, c_void};
use std::io::Write;
use std::sync::atomic::Ordering;

/// The user-data word of the callbacks of block `id` of `n` instructions (below 2^16),
/// with a trigger's index above them for that trigger's callbacks.
pub(crate) fn userdata(id: u32, n: usize, trigger: Option<usize>) -> u64 {
    let ud = ((id as u64) << 16) | (n as u64 & 0xffff);
    trigger.map_or(ud, |t| ud | ((t as u64) << 48))
}

/// A callback's user-data word, its block id and the block's instruction count.
#[inline(always)]
fn unpack(userdata: *mut c_void) -> (u64, u32, u64) {
    let ud = userdata as usize as u64;
    (ud, (ud >> 16) as u32, ud & 0xffff)
}

/// Every-block mode: runs at every block. Appends the block id to the thread's chunk
/// when nothing else is due (same thread as before, no host stamp due, room left).
pub(crate) extern "C" fn on_exec(vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let (_, id, n) = unpack(userdata);
    let start = CLOCK.fetch_add(n, Ordering::Relaxed);
    if let Some(st) = fast_state(vcpu) {
        if start == st.expected && st.room != 0 {
            st.put_id(id);
            st.expected = start + n;
            st.room -= 1;
            return;
        }
    }
    exec_slow(vcpu, id, start, n, false);
}

/// Stack mode: runs at the blocks a call stack needs only. The counter stands at this
/// block's start (the unlogged blocks before it added theirs inline); this block has no
/// inline add, so its callback counts its own instructions, stopped or not.
pub(crate) extern "C" fn on_exec_stack(vcpu: c_uint, userdata: *mut c_void) {
    let (_, id, n) = unpack(userdata);
    let start = icount();
    set_icount(start.wrapping_add(n));
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    if let Some(st) = fast_state(vcpu) {
        // A few unlogged instructions since the last logged block go in the id's word.
        let gap = start.wrapping_sub(st.expected);
        if gap <= u64::from(PACKED_SKIP_MAX) && st.room != 0 && id < PACKED_ID_LIMIT {
            let word = if gap == 0 {
                id
            } else {
                PACKED | (gap as u32) << 24 | id
            };
            st.put_id(word);
            st.expected = start + n;
            st.room -= 1;
            return;
        }
    }
    exec_slow(vcpu, id, start, n, true);
}

/// A block whose record needs a clock marker or skip, a host stamp or a new chunk.
#[cold]
#[inline(never)]
fn exec_slow(vcpu: c_uint, id: u32, start: u64, n: u64, stack: bool) {
    let Some(st) = state(vcpu) else { return };
    st.settle();
    let mut rec = Rec::default();
    // In stack mode the counter only moves with this thread (a second thread switches
    // the process to every-block logging): a gap is its own unlogged instructions.
    let gap = start.wrapping_sub(st.expected);
    let skipped = stack && st.expected != u64::MAX && gap > 0 && gap <= u64::from(u32::MAX);
    if skipped {
        rec.word(SKIP).word(gap as u32);
    }
    // Every chunk starts with the clock and the host time, so the ring slots left after
    // older ones were overwritten still say when their first block ran.
    let fresh = st.used == 0;
    if (start != st.expected && !skipped) || fresh {
        rec.word(MARKER).u64(start);
    }
    if st.countdown == 0 || fresh {
        rec.word(HOST).u64(crate::api::now_ns());
        st.countdown = STAMP_EVERY;
    }
    rec.word(id);
    st.append(rec.bytes(), start);
    st.expected = start + n;
    st.countdown -= 1;
    st.arm();
}

/// The exec callback of a trigger's block (every-block mode): logs it, then the hit.
pub(crate) extern "C" fn on_trigger(vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    on_exec(vcpu, userdata);
    on_trigger_insn(vcpu, userdata);
}

/// The exec callback of a trigger's block (stack mode): logs it, then the hit.
pub(crate) extern "C" fn on_trigger_stack(vcpu: c_uint, userdata: *mut c_void) {
    // First: the block's instructions are counted even once stopped.
    on_exec_stack(vcpu, userdata);
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    on_trigger_insn(vcpu, userdata);
}

/// The exec callback of a trigger inside a block (a source line's first instruction, say):
/// the block was logged when it began; this is the hit.
pub(crate) extern "C" fn on_trigger_insn(vcpu: c_uint, userdata: *mut c_void) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let (Some(shared), Some(p)) = (SHARED.get(), proc()) else {
        return;
    };
    let (ud, id, n) = unpack(userdata);
    // The block's start on the clock: what the thread expects next, less this block.
    let Some((tid, clock)) = state(vcpu).map(|st| (st.tid, st.expected.wrapping_sub(n))) else {
        return;
    };
    // Only the first hit counts without `multi`: it ends the recording.
    if !shared.multi && STOPPED.swap(true, Ordering::Relaxed) {
        return;
    }
    let hit = p.hits.fetch_add(1, Ordering::Relaxed);
    // try_lock: a forked child may have inherited it locked by a thread it does not have.
    let at = TRIGGER_BLOCKS
        .try_lock()
        .ok()
        .and_then(|b| b.iter().find(|x| x.0 == id).map(|x| x.1))
        .unwrap_or(0);
    let mut payload = Vec::with_capacity(32);
    payload.extend_from_slice(&hit.to_le_bytes());
    payload.extend_from_slice(&((ud >> 48) as u32).to_le_bytes());
    payload.extend_from_slice(&id.to_le_bytes());
    payload.extend_from_slice(&0u32.to_le_bytes());
    payload.extend_from_slice(&clock.to_le_bytes());
    payload.extend_from_slice(&at.to_le_bytes());
    if let Ok(mut out) = p.out.lock() {
        write_chunk(&mut *out, KIND_HIT, tid, &payload);
        let _ = out.flush();
    }
    if !shared.multi {
        // Nothing more is recorded: what the threads hold goes out now, so the log is
        // whole however the program ends (their rings hold theirs already).
        write_published(p);
        return;
    }
    // Each ring as it stands now (later blocks are cut off by the reader at `clock`).
    if let Ok(threads) = p.threads.lock() {
        if let Ok(mut out) = p.out.lock() {
            for &t in threads.iter() {
                let t = t as *mut ThreadState;
                // SAFETY: registered states stay alive until their owner removes them
                // under `threads`, which we hold; a ring's geometry is fixed once made,
                // and `copied` is only touched here, under that lock.
                unsafe {
                    let tid = std::ptr::read(std::ptr::addr_of!((*t).tid));
                    if let Some(r) = (*std::ptr::addr_of_mut!((*t).ring)).as_mut() {
                        let mut copied = r.copied;
                        r.copy_to(&mut copied, &mut *out, hit, tid);
                        r.copied = copied;
                    }
                }
            }
            let _ = out.flush();
        }
    }
}
