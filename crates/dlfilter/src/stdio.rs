//! Writing records into perf's own `stdout` stream, and reading back what perf printed
//! into it between them.

use crate::format;
use crate::State;
use std::ffi::{c_char, c_int, c_void};

/// The head of glibc's `struct _IO_FILE`: the buffer pointers that glibc's own
/// `putc_unlocked` macro reads and advances, so they are part of its ABI.
#[repr(C)]
struct IoFile {
    flags: c_int,
    read_ptr: *mut u8,
    read_end: *mut u8,
    read_base: *mut u8,
    write_base: *mut u8,
    write_ptr: *mut u8,
    write_end: *mut u8,
}

/// Whether perf's `stdout` buffer can be read and written directly (glibc's layout).
pub(crate) const DIRECT_STDIO: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

extern "C" {
    pub(crate) static mut stdout: *mut c_void;
    fn fwrite_unlocked(ptr: *const c_void, size: usize, n: usize, stream: *mut c_void) -> usize;
    pub(crate) fn fflush(stream: *mut c_void) -> c_int;
    pub(crate) fn setvbuf(stream: *mut c_void, buf: *mut c_char, mode: c_int, size: usize)
        -> c_int;
}

/// `_IOFBF`: full buffering.
pub(crate) const IOFBF: c_int = 0;
/// perf's stdout buffer while the filter runs: 4 KB blocks mean one pipe write per
/// ~100 samples; larger blocks cut perf's syscalls (perf shares the buffer, so the
/// order of records and text is unchanged). 64 KB stays in the L2 cache and lets the
/// reader start on a block sooner: on the PT benchmark it decodes 10-15% faster (wall)
/// than with 256 KB blocks.
pub(crate) const STDOUT_BUF: usize = 64 << 10;

/// Appends `buf` to perf's `stdout`, straight into its buffer when it fits (what
/// glibc's `putc_unlocked` does), else through `fwrite_unlocked`. False on a failure.
unsafe fn write_out(buf: &[u8]) -> bool {
    if DIRECT_STDIO {
        let f = &mut *(stdout as *mut IoFile);
        if !f.write_ptr.is_null()
            && (f.write_end as usize).wrapping_sub(f.write_ptr as usize) >= buf.len()
            && f.write_end >= f.write_ptr
        {
            std::ptr::copy_nonoverlapping(buf.as_ptr(), f.write_ptr, buf.len());
            f.write_ptr = f.write_ptr.add(buf.len());
            return true;
        }
    }
    fwrite_unlocked(buf.as_ptr().cast(), 1, buf.len(), stdout) == buf.len()
}

/// Whether a line perf printed is a side-band event after which an address may
/// resolve differently: anything but a thread's exit, a new thread of the same process
/// (`PERF_RECORD_FORK(pid:tid):(ppid:ptid)` with pid = ppid) or a non-exec comm change.
fn sideband_changes_maps(line: &[u8]) -> bool {
    const TAG: &[u8] = b"PERF_RECORD_";
    let Some(at) = line.windows(TAG.len()).position(|w| w == TAG) else {
        return false;
    };
    let rest = &line[at + TAG.len()..];
    if rest.starts_with(b"EXIT") || rest.starts_with(b"COMM:") {
        return false;
    }
    if let Some(fork) = rest.strip_prefix(b"FORK(") {
        let pid = |s: &[u8]| -> Option<Vec<u8>> {
            let end = s.iter().position(|&b| b == b':')?;
            Some(s[..end].to_vec())
        };
        let child = pid(fork);
        let parent = fork
            .windows(2)
            .position(|w| w == b":(")
            .and_then(|i| pid(&fork[i + 2..]));
        return child.is_none() || child != parent;
    }
    true
}

impl State {
    pub(crate) fn emit(&mut self, bytes_of: fn(&State) -> &Vec<u8>) {
        let buf = bytes_of(self);
        // SAFETY: the bytes are ours; `stdout` is libc's stream, valid for the process.
        let ok = unsafe { write_out(buf) };
        self.after_write(ok, buf.len());
    }

    /// Writes a record built on the stack.
    pub(crate) fn emit_bytes(&mut self, buf: &[u8]) {
        // SAFETY: as in `emit`.
        let ok = unsafe { write_out(buf) };
        self.after_write(ok, buf.len());
    }

    fn after_write(&mut self, ok: bool, len: usize) {
        if !ok {
            self.write_failed = true;
        }
        if DIRECT_STDIO {
            // SAFETY: glibc's `stdout` starts with `IoFile`'s fields.
            unsafe {
                let f = &*(stdout as *const IoFile);
                self.mark = f.write_ptr;
                self.canary = if (f.write_ptr as usize).wrapping_sub(f.write_base as usize) >= len
                    && len > 0
                {
                    f.write_ptr.sub(len)
                } else {
                    std::ptr::null()
                };
            }
        }
    }

    /// Called before each sample when `sideband`: if perf printed since our last
    /// record, reads what it printed and forgets every cached location if that may
    /// change how addresses resolve (a mapping, an exec, a new process, kernel symbols).
    /// Perf updates its maps when it prints the event, after delivering every sample
    /// before it, so no sample can be answered from a stale cache.
    pub(crate) unsafe fn check_printed(&mut self) {
        let f = &*(stdout as *const IoFile);
        let ptr = f.write_ptr;
        // perf's text (never NUL) over our last record's marker: the buffer was flushed
        // and refilled, even if the write pointer came back to the mark.
        let overwritten = !self.canary.is_null() && *self.canary != format::MARKER;
        if ptr == self.mark && !overwritten {
            return;
        }
        // After a flush (the pointer behind the mark, or the marker overwritten) what
        // perf printed is gone: assume the worst.
        let intact = !overwritten && !self.canary.is_null() && ptr > self.mark;
        let stale = !intact || {
            let printed =
                std::slice::from_raw_parts(self.mark, ptr.offset_from(self.mark) as usize);
            printed.split(|&b| b == b'\n').any(sideband_changes_maps)
        };
        if stale {
            self.forget_all();
        }
        if !intact {
            // Nothing of ours is known to be in the buffer until our next record.
            self.canary = std::ptr::null();
        }
        self.mark = ptr;
    }
}
