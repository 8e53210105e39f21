//! Block translation: each new block is described in the log, and instrumented by the
//! mode: every block gets a callback (every-block mode), or only those a call stack
//! needs, the others an inline instruction count (stack mode).

use crate::api::*;
use crate::exec::{
    on_exec, on_exec_stack, on_trigger, on_trigger_insn, on_trigger_stack, userdata,
};
use crate::regions::Regions;
use crate::state::{write_chunk, write_maps};
use crate::{
    current_clock, icount_ptr, is_handler, proc, Shared, Trigger, MODE, NEXT_TB, SHARED,
    TRIGGER_BLOCKS,
};
use ptscope_blocklog::classify::{classify, Flow};
use ptscope_blocklog::format::{
    push_tb_record, KIND_TBS, MAX_BLOCK_ID, MODE_STACK, TB_HANDLER_ENTRY,
};
use ptscope_blocklog::{parse_maps, MapEntry};
use std::ffi::c_void;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the process's first block was translated: that block (the program's entry)
/// is always logged, so the main thread's trace starts where it did.
static FIRST_DONE: AtomicBool = AtomicBool::new(false);

/// The first trigger inside the block `[vaddr, vaddr + size)`, by the file and offset
/// mapped there: its index and address.
fn trigger_at(shared: &Shared, maps: &[MapEntry], vaddr: u64, size: u64) -> Option<(usize, u64)> {
    let m = maps.iter().find(|m| vaddr >= m.start && vaddr < m.end)?;
    let off = vaddr - m.start + m.pgoff;
    shared.triggers.iter().enumerate().find_map(|(i, t)| {
        let same_file =
            (t.ino != 0 && t.dev == (m.maj, m.min) && t.ino == m.ino) || t.path == m.path;
        (same_file && t.offset >= off && t.offset - off < size.max(1))
            .then(|| (i, vaddr + (t.offset - off)))
    })
}

/// Parses a `trigger=DEV:INO:OFFSET:PATH` value (hex numbers, hex-encoded path).
pub(crate) fn parse_trigger(v: &str) -> Option<Trigger> {
    let mut f = v.split(':');
    let dev = u64::from_str_radix(f.next()?, 16).ok()?;
    let ino = u64::from_str_radix(f.next()?, 16).ok()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let hex = f.next().unwrap_or("");
    let bytes: Option<Vec<u8>> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    Some(Trigger {
        dev: ((dev >> 32) as u32, dev as u32),
        ino,
        offset,
        path: String::from_utf8(bytes?).ok()?,
    })
}

/// Whether stack mode logs a block whose first instruction is at `vaddr`, whose last
/// (`flow`) is at `last` and which ends at `fall`: everything that can change the call
/// stack, and every block of code whose functions the decoder cannot name by region.
fn stack_needs(regions: &mut Regions, vaddr: u64, last: u64, fall: u64, flow: Flow) -> bool {
    let here = regions.key(last);
    if here.uncovered() || regions.key(vaddr) != here {
        return true;
    }
    // Anonymous memory (JIT code) is one function to the decoder: only its calls,
    // returns and the like matter, as elsewhere.
    let leaves = |regions: &mut Regions, to: u64| {
        let k = regions.key(to);
        k != here || k.uncovered()
    };
    match flow {
        Flow::Call { .. }
        | Flow::IndirectCall
        | Flow::Return
        | Flow::IndirectJmp
        | Flow::Syscall => true,
        Flow::Jmp { target } => leaves(regions, target),
        Flow::Cond { target } => leaves(regions, target) || leaves(regions, fall),
        // Falling into the next function without a branch (QEMU also cuts blocks at
        // page boundaries and instruction limits: those stay in their function).
        Flow::Other => leaves(regions, fall),
        // QEMU abandons an instruction crossing into the next page and restarts at it.
        Flow::Abandoned => false,
    }
}

pub(crate) extern "C" fn on_translate(_id: PluginId, tb: *mut c_void) {
    let Some(shared) = SHARED.get() else { return };
    // SAFETY: `tb` is the live translation-block handle QEMU passes to this callback,
    // and instruction handles and data stay valid for the callback's duration.
    let (vaddr, n, last_vaddr, last, first) = unsafe {
        let n = qemu_plugin_tb_n_insns(tb);
        if n == 0 {
            return;
        }
        let bytes = |insn: *const c_void| {
            let len = qemu_plugin_insn_size(insn).min(15);
            let data = qemu_plugin_insn_data(insn) as *const u8;
            std::slice::from_raw_parts(data, len).to_vec()
        };
        let last = qemu_plugin_tb_get_insn(tb, n - 1);
        let first = qemu_plugin_tb_get_insn(tb, 0);
        (
            qemu_plugin_tb_vaddr(tb),
            n,
            qemu_plugin_insn_vaddr(last),
            bytes(last),
            bytes(first),
        )
    };
    let Some(p) = proc() else { return };
    let id = NEXT_TB.fetch_add(1, Ordering::Relaxed);
    if id >= MAX_BLOCK_ID {
        // Two billion translations: nothing more can be told apart.
        crate::STOPPED.store(true, Ordering::Relaxed);
        return;
    }
    let end = last_vaddr + last.len() as u64;
    let size = end.saturating_sub(vaddr);
    let handler = is_handler(vaddr);
    crate::note_translated(vaddr);
    let mut rec = Vec::with_capacity(48);
    push_tb_record(
        &mut rec,
        id,
        vaddr,
        n as u32,
        size as u32,
        &last,
        &first,
        if handler { TB_HANDLER_ENTRY } else { 0 },
    );
    let stack = MODE.load(Ordering::Relaxed) == MODE_STACK;
    let (trigger, logged) = {
        let Ok(mut regions) = p.regions.lock() else {
            return;
        };
        if !regions.covers(vaddr) {
            if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
                regions.set_maps(parse_maps(&maps));
                if let Ok(mut out) = p.out.lock() {
                    write_maps(&mut *out, current_clock(), &maps);
                    // With a ring, at once: however qemu ends, the log names the code.
                    if shared.ring.is_some() {
                        let _ = out.flush();
                    }
                }
            }
        }
        let trigger = if shared.triggers.is_empty() {
            None
        } else {
            trigger_at(shared, regions.maps(), vaddr, size)
        };
        let first_block = !FIRST_DONE.swap(true, Ordering::Relaxed);
        let logged = !stack
            || handler
            || trigger.is_some()
            || first_block
            || stack_needs(
                &mut regions,
                vaddr,
                last_vaddr,
                end,
                classify(&last, last_vaddr),
            );
        (trigger, logged)
    };
    // With a ring, the recording must be complete however qemu ends (no exit callback
    // runs when a signal kills the program): every block description goes out at once,
    // into the mapped blocks file, else to the log, flushed.
    let mapped = p
        .blocks
        .lock()
        .is_ok_and(|mut b| b.as_mut().is_some_and(|b| b.push(KIND_TBS, 0, &rec)));
    if !mapped {
        if let Ok(mut out) = p.out.lock() {
            write_chunk(&mut *out, KIND_TBS, 0, &rec);
            if shared.ring.is_some() {
                let _ = out.flush();
            }
        }
    }
    // The block id and instruction count travel in the callback's user-data word (and a
    // trigger's index above them, for its block only).
    let ud = userdata(id, n, None);
    if let (Some((_, at)), Ok(mut b)) = (trigger, TRIGGER_BLOCKS.try_lock()) {
        b.push((id, at));
    }
    if logged {
        let (exec, at_start): (ExecCb, ExecCb) = if stack {
            (on_exec_stack, on_trigger_stack)
        } else {
            (on_exec, on_trigger)
        };
        let (cb, ud): (ExecCb, u64) = match trigger {
            Some((t, at)) if at == vaddr => (at_start, userdata(id, n, Some(t))),
            Some((t, at)) => {
                // Inside the block: a callback on that instruction only.
                // SAFETY: `tb` is still the block being translated; its instruction
                // handles are valid during this callback, and registering on one is the
                // API's use.
                unsafe {
                    if let Some(insn) = (0..n)
                        .map(|i| qemu_plugin_tb_get_insn(tb, i))
                        .find(|&i| qemu_plugin_insn_vaddr(i) == at)
                    {
                        let tud = userdata(id, n, Some(t));
                        qemu_plugin_register_vcpu_insn_exec_cb(
                            insn,
                            on_trigger_insn,
                            CB_NO_REGS,
                            tud as usize as *mut c_void,
                        );
                    }
                }
                (exec, ud)
            }
            None => (exec, ud),
        };
        // SAFETY: registering an exec callback on the block being translated is the
        // documented use of this API.
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_cb(tb, cb, CB_NO_REGS, ud as usize as *mut c_void)
        };
    }
    if stack && !logged {
        // A logged block's callback counts its instructions itself.
        // SAFETY: the counter is a static that lives as long as the process.
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, icount_ptr(), n as u64)
        };
    }
}
