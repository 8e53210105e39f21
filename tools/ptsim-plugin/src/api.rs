//! The few QEMU plugin API (v1, QEMU 7.2) functions the plugin uses, declared from
//! `qemu-plugin.h` (Debian ships no plugin header).

use std::ffi::{c_char, c_int, c_uint, c_void};

pub(crate) type PluginId = u64;
pub(crate) type TbTransCb = extern "C" fn(PluginId, *mut c_void);
pub(crate) type ExecCb = extern "C" fn(c_uint, *mut c_void);
pub(crate) type AtExitCb = extern "C" fn(PluginId, *mut c_void);
pub(crate) type VcpuCb = extern "C" fn(PluginId, c_uint);
pub(crate) type SimpleCb = extern "C" fn(PluginId);
pub(crate) type SyscallCb =
    extern "C" fn(PluginId, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
pub(crate) type SyscallRetCb = extern "C" fn(PluginId, c_uint, i64, i64);

/// `QEMU_PLUGIN_CB_NO_REGS`: the exec callback reads no guest registers.
pub(crate) const CB_NO_REGS: c_int = 0;
/// `QEMU_PLUGIN_INLINE_ADD_U64`: the only inline operation of API v1.
pub(crate) const INLINE_ADD_U64: c_int = 0;

extern "C" {
    pub(crate) fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, cb: TbTransCb);
    pub(crate) fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut c_void,
        cb: ExecCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    pub(crate) fn qemu_plugin_register_vcpu_tb_exec_inline(
        tb: *mut c_void,
        op: c_int,
        ptr: *mut c_void,
        imm: u64,
    );
    pub(crate) fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut c_void,
        cb: ExecCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    pub(crate) fn qemu_plugin_register_vcpu_syscall_cb(id: PluginId, cb: SyscallCb);
    pub(crate) fn qemu_plugin_register_vcpu_syscall_ret_cb(id: PluginId, cb: SyscallRetCb);
    pub(crate) fn qemu_plugin_register_atexit_cb(id: PluginId, cb: AtExitCb, userdata: *mut c_void);
    pub(crate) fn qemu_plugin_register_vcpu_init_cb(id: PluginId, cb: VcpuCb);
    pub(crate) fn qemu_plugin_reset(id: PluginId, cb: SimpleCb);
    pub(crate) fn qemu_plugin_tb_n_insns(tb: *const c_void) -> usize;
    pub(crate) fn qemu_plugin_tb_vaddr(tb: *const c_void) -> u64;
    pub(crate) fn qemu_plugin_tb_get_insn(tb: *const c_void, idx: usize) -> *mut c_void;
    pub(crate) fn qemu_plugin_insn_data(insn: *const c_void) -> *const c_void;
    pub(crate) fn qemu_plugin_insn_size(insn: *const c_void) -> usize;
    pub(crate) fn qemu_plugin_insn_vaddr(insn: *const c_void) -> u64;
    pub(crate) fn qemu_plugin_outs(s: *const c_char);
}

/// Prints `msg` on qemu's log (stderr).
pub(crate) fn say(msg: &str) {
    if let Ok(s) = std::ffi::CString::new(msg) {
        // SAFETY: `s` is a valid NUL-terminated string for the duration of the call.
        unsafe { qemu_plugin_outs(s.as_ptr()) };
    }
}

/// The calling thread's id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The process id.
pub(crate) fn getpid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// The host's monotonic clock in ns.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Reads up to `len` bytes of the guest at `addr` (an x86-64 guest on an x86-64 host runs
/// at guest base 0: guest addresses are host addresses), without faulting on a bad
/// pointer: a partial read stops at the first unmapped page.
pub(crate) fn guest_bytes(addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut c_void,
        iov_len: buf.len(),
    };
    // SAFETY: reads into our own buffer; a bad remote range fails with EFAULT.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    buf.truncate(n.max(0) as usize);
    buf
}

/// A NUL-terminated string of the guest (empty if unreadable or unterminated).
pub(crate) fn guest_string(addr: u64, max: usize) -> Vec<u8> {
    let mut buf = guest_bytes(addr, max);
    match buf.iter().position(|&b| b == 0) {
        Some(end) => buf.truncate(end),
        None => buf.clear(),
    }
    buf
}
