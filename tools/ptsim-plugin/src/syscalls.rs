//! Syscalls: each is dated in its thread's stream; some also tell the plugin something:
//! `execve` what is run next, `rt_sigaction` where signal handlers start, and the ways a
//! thread is named (`prctl(PR_SET_NAME)`, a write to `/proc/…/task/TID/comm`).

use crate::api::*;
use crate::state::{state, write_chunk, Naming, Rec};
use crate::{add_handler, current_clock, proc, retry_reset, STOPPED};
use ptscope_blocklog::format::{KIND_COMM, KIND_EXEC_CALL, SYSCALL, SYSRET};
use std::ffi::c_uint;
use std::io::Write;
use std::sync::atomic::Ordering;

const SYS_WRITE: i64 = 1;
const SYS_OPEN: i64 = 2;
const SYS_CLOSE: i64 = 3;
const SYS_RT_SIGACTION: i64 = 13;
const SYS_EXECVE: i64 = 59;
const SYS_PRCTL: i64 = 157;
const SYS_OPENAT: i64 = 257;
const SYS_EXECVEAT: i64 = 322;
const PR_SET_NAME: u64 = 15;
/// Bytes of a name the kernel keeps (TASK_COMM_LEN less the NUL), and a little more
/// for a write that ends in a newline.
const NAME_MAX: usize = 16;

/// The thread whose `comm` file `path` is: `/proc/self/task/T/comm`, `/proc/P/task/T/comm`,
/// `/proc/thread-self/comm` (the caller), `/proc/self/comm` or `/proc/P/comm` (the
/// process's main thread).
fn comm_file(path: &[u8], caller: u32, pid: u32) -> Option<u32> {
    let path = std::str::from_utf8(path).ok()?;
    let rest = path.strip_prefix("/proc/")?.strip_suffix("/comm")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let process = |p: &str| p == "self" || p.parse::<u32>().ok() == Some(pid);
    match parts[..] {
        ["thread-self"] => Some(caller),
        [p] if process(p) => Some(pid),
        [p, "task", t] if process(p) => t.parse().ok(),
        _ => None,
    }
}

/// A thread's new name, as the kernel keeps it: at most 15 bytes, up to a NUL or newline.
fn name_of(bytes: &[u8]) -> Vec<u8> {
    let end = bytes
        .iter()
        .position(|&b| b == 0 || b == b'\n')
        .unwrap_or(bytes.len())
        .min(NAME_MAX - 1);
    bytes[..end].to_vec()
}

/// Syscall entry: dated in the thread's stream; an `exec` also says what it runs, and
/// everything buffered goes to the file first (a successful exec ends qemu at once).
#[allow(clippy::too_many_arguments)]
pub(crate) extern "C" fn on_syscall(
    _id: PluginId,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    retry_reset();
    let Some(st) = state(vcpu) else { return };
    let ns = now_ns();
    let mut rec = Rec::default();
    rec.word(SYSCALL).word(num as u32).u64(ns);
    st.settle();
    st.append(rec.bytes(), st.expected);
    st.arm();
    let Some(p) = proc() else { return };
    match num {
        SYS_EXECVE | SYS_EXECVEAT => {
            let path = guest_string(if num == SYS_EXECVE { a1 } else { a2 }, 4096);
            st.flush();
            if let Ok(mut out) = p.out.lock() {
                let mut payload = ns.to_le_bytes().to_vec();
                payload.extend_from_slice(&path);
                write_chunk(&mut *out, KIND_EXEC_CALL, st.tid, &payload);
                let _ = out.flush();
            }
        }
        SYS_RT_SIGACTION if a2 != 0 => {
            // `struct sigaction` as the kernel takes it: the handler is the first word.
            let h = guest_bytes(a2, 8);
            if let Ok(h) = <[u8; 8]>::try_from(h.as_slice()) {
                let handler = u64::from_le_bytes(h);
                // SIG_DFL and SIG_IGN are no code.
                if handler > 1 {
                    add_handler(handler);
                }
            }
        }
        SYS_PRCTL if a1 == PR_SET_NAME => {
            st.naming = Some(Naming::Name(st.tid, name_of(&guest_bytes(a2, NAME_MAX))));
        }
        SYS_OPEN | SYS_OPENAT => {
            let path = guest_string(if num == SYS_OPEN { a1 } else { a2 }, 64);
            st.naming = comm_file(&path, st.tid, p.pid).map(Naming::Open);
        }
        SYS_WRITE => {
            let named = p
                .comm_fds
                .lock()
                .ok()
                .and_then(|f| f.iter().find(|x| x.0 == a1 as i64).map(|x| x.1));
            st.naming = named.map(|tid| {
                Naming::Name(tid, name_of(&guest_bytes(a2, (a3 as usize).min(NAME_MAX))))
            });
        }
        SYS_CLOSE => {
            if let Ok(mut f) = p.comm_fds.lock() {
                f.retain(|x| x.0 != a1 as i64);
            }
        }
        _ => {}
    }
}

/// Syscall return: dated in the thread's stream; a naming syscall that succeeded is
/// logged.
pub(crate) extern "C" fn on_syscall_ret(_id: PluginId, vcpu: c_uint, num: i64, ret: i64) {
    if STOPPED.load(Ordering::Relaxed) {
        return;
    }
    let Some(st) = state(vcpu) else { return };
    let mut rec = Rec::default();
    rec.word(SYSRET).u64(ret as u64).u64(now_ns());
    st.settle();
    st.append(rec.bytes(), st.expected);
    st.arm();
    let Some(naming) = st.naming.take() else {
        return;
    };
    let Some(p) = proc() else { return };
    match naming {
        Naming::Name(tid, name)
            if (num == SYS_PRCTL && ret == 0) || (num == SYS_WRITE && ret > 0) =>
        {
            let mut payload = now_ns().to_le_bytes().to_vec();
            payload.extend_from_slice(&current_clock().to_le_bytes());
            payload.extend_from_slice(&name);
            if let Ok(mut out) = p.out.lock() {
                write_chunk(&mut *out, KIND_COMM, tid, &payload);
                let _ = out.flush();
            }
        }
        Naming::Open(tid) if (num == SYS_OPEN || num == SYS_OPENAT) && ret >= 0 => {
            if let Ok(mut f) = p.comm_fds.lock() {
                f.retain(|x| x.0 != ret);
                f.push((ret, tid));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_files_name_their_thread() {
        assert_eq!(comm_file(b"/proc/self/task/12/comm", 5, 3), Some(12));
        assert_eq!(comm_file(b"/proc/3/task/12/comm", 5, 3), Some(12));
        assert_eq!(comm_file(b"/proc/4/task/12/comm", 5, 3), None);
        assert_eq!(comm_file(b"/proc/thread-self/comm", 5, 3), Some(5));
        assert_eq!(comm_file(b"/proc/self/comm", 5, 3), Some(3));
        assert_eq!(comm_file(b"/proc/self/task/12/stat", 5, 3), None);
        assert_eq!(name_of(b"worker-1\n"), b"worker-1");
        assert_eq!(name_of(b"a-very-long-thread-name"), b"a-very-long-thr");
    }
}
