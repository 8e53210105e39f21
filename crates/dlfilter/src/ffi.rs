//! perf's dlfilter C ABI: the structs perf passes (perf 6.1 layout) and the functions
//! it looks up by name in the shared object.

use crate::cache::{FxMap, Hot, HOT_BITS};
use crate::format::{self, Class};
use crate::stdio::{fflush, setvbuf, stdout, DIRECT_STDIO, IOFBF, STDOUT_BUF};
use crate::{begin, put_u32, put_u64, seal, EventInfo, State};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};

/// `struct perf_dlfilter_sample` (perf 6.1; 208 bytes).
#[repr(C)]
pub struct Sample {
    /// Size perf filled in.
    pub size: u32,
    /// Instruction latency.
    pub ins_lat: u16,
    /// Pipeline stage cycles.
    pub p_stage_cyc: u16,
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: i32,
    /// Thread id.
    pub tid: i32,
    /// Time in ns.
    pub time: u64,
    /// Branch target or data address.
    pub addr: u64,
    /// Sample id.
    pub id: u64,
    /// Stream id.
    pub stream_id: u64,
    /// Sample period.
    pub period: u64,
    /// Weight.
    pub weight: u64,
    /// Transaction.
    pub transaction: u64,
    /// Instruction count (IPC).
    pub insn_cnt: u64,
    /// Cycle count (IPC).
    pub cyc_cnt: u64,
    /// CPU.
    pub cpu: i32,
    /// `PERF_DLFILTER_FLAG_*`.
    pub flags: u32,
    /// Data source.
    pub data_src: u64,
    /// Physical address.
    pub phys_addr: u64,
    /// Data page size.
    pub data_page_size: u64,
    /// Code page size.
    pub code_page_size: u64,
    /// Cgroup.
    pub cgroup: u64,
    /// CPU mode.
    pub cpumode: u8,
    /// `resolve_addr` is meaningful.
    pub addr_correlates_sym: u8,
    /// Header misc bits.
    pub misc: u16,
    /// Raw data size.
    pub raw_size: u32,
    /// Raw data.
    pub raw_data: *const c_void,
    /// Branch stack entries.
    pub brstack_nr: u64,
    /// Branch stack.
    pub brstack: *const c_void,
    /// Raw callchain entries.
    pub raw_callchain_nr: u64,
    /// Raw callchain, with `PERF_CONTEXT_*` markers.
    pub raw_callchain: *const u64,
    /// Event name.
    pub event: *const c_char,
    /// Guest machine pid.
    pub machine_pid: i32,
    /// Guest vcpu.
    pub vcpu: i32,
}

/// `struct perf_dlfilter_al`.
#[repr(C)]
pub struct Al {
    /// Size of this struct, set by the caller of `resolve_address`.
    pub size: u32,
    /// Offset in the symbol (32 bits only; see [`crate::offset`]).
    pub symoff: u32,
    /// Symbol name or NULL.
    pub sym: *const c_char,
    /// Address mapped into the DSO.
    pub addr: u64,
    /// Symbol start.
    pub sym_start: u64,
    /// Symbol end.
    pub sym_end: u64,
    /// DSO name or NULL.
    pub dso: *const c_char,
    /// ELF binding.
    pub sym_binding: u8,
    /// 64-bit DSO.
    pub is_64_bit: u8,
    /// Kernel address.
    pub is_kernel_ip: u8,
    /// Build-id size.
    pub buildid_size: u32,
    /// Build-id.
    pub buildid: *mut u8,
    /// Filtered out (resolve_ip only).
    pub filtered: u8,
    /// Command (resolve_ip only).
    pub comm: *const c_char,
}

pub(crate) type Ctx = *mut c_void;

/// `struct perf_dlfilter_fns`, which perf fills in before `start`.
#[repr(C)]
pub struct Fns {
    /// Location of the sample's ip.
    pub resolve_ip: Option<unsafe extern "C" fn(Ctx) -> *const Al>,
    /// Location of the sample's addr.
    pub resolve_addr: Option<unsafe extern "C" fn(Ctx) -> *const Al>,
    /// `--dlarg` values.
    pub args: Option<unsafe extern "C" fn(Ctx, *mut c_int) -> *mut *mut c_char>,
    /// Location of any address.
    pub resolve_address: Option<unsafe extern "C" fn(Ctx, u64, *mut Al) -> i32>,
    /// Instruction bytes.
    pub insn: Option<unsafe extern "C" fn(Ctx, *mut u32) -> *const u8>,
    /// Source line.
    pub srcline: Option<unsafe extern "C" fn(Ctx, *mut u32) -> *const c_char>,
    /// Event attributes.
    pub attr: Option<unsafe extern "C" fn(Ctx) -> *mut c_void>,
    /// Object code.
    pub object_code: Option<unsafe extern "C" fn(Ctx, u64, *mut c_void, u32) -> i32>,
    /// Reserved by perf.
    pub reserved: [*mut c_void; 120],
}

/// Filled in by perf when it loads the filter.
#[no_mangle]
pub static mut perf_dlfilter_fns: Fns = Fns {
    resolve_ip: None,
    resolve_addr: None,
    args: None,
    resolve_address: None,
    insn: None,
    srcline: None,
    attr: None,
    object_code: None,
    reserved: [std::ptr::null_mut(); 120],
};

/// Reads `--dlarg`s and announces the stream.
#[no_mangle]
pub unsafe extern "C" fn start(data: *mut *mut c_void, ctx: *mut c_void) -> c_int {
    let mut st = Box::new(State {
        null: false,
        keep_jumps: false,
        early: false,
        sideband: false,
        mark: std::ptr::null_mut(),
        canary: std::ptr::null(),
        by_ptr: HashMap::new(),
        by_name: HashMap::new(),
        names: Vec::new(),
        events: HashMap::new(),
        last_event: (
            0,
            EventInfo {
                class: Class::Sample,
                clean: false,
            },
        ),
        procs: FxMap::default(),
        last: None,
        flag_table: Vec::new(),
        hot: vec![Hot::EMPTY; 1 << HOT_BITS],
        next_loc: 0,
        next_chain: 0,
        ids: Vec::new(),
        rec: Vec::with_capacity(4096),
        def: Vec::with_capacity(256),
        seen: 0,
        sent: 0,
        dropped: 0,
        passed: 0,
        write_failed: false,
    });
    let fns = &*std::ptr::addr_of!(perf_dlfilter_fns);
    if let Some(args) = fns.args {
        let mut argc: c_int = 0;
        let argv = args(ctx, &mut argc);
        for i in 0..argc.max(0) as usize {
            if argv.is_null() {
                break;
            }
            let a = *argv.add(i);
            if a.is_null() {
                continue;
            }
            match CStr::from_ptr(a).to_bytes() {
                b"null" => st.null = true,
                b"keep-jumps" => st.keep_jumps = true,
                // Without glibc's stdio layout, what perf printed cannot be read back.
                b"sideband" => st.sideband = DIRECT_STDIO,
                b"early" => st.early = true,
                _ => return -22,
            }
        }
    }
    if !st.null {
        // Leaked on purpose: perf may still print through it after `stop`.
        let buf: &'static mut [u8] = Box::leak(vec![0u8; STDOUT_BUF].into_boxed_slice());
        // glibc flushes what is pending before switching buffers; failure costs only speed.
        setvbuf(stdout, buf.as_mut_ptr().cast(), IOFBF, buf.len());
        begin(&mut st.rec, format::REC_HELLO);
        put_u32(&mut st.rec, format::VERSION);
        seal(&mut st.rec);
        st.emit(|s| &s.rec);
    }
    *data = Box::into_raw(st).cast();
    0
}

/// Writes the `END` record, whose absence tells the reader perf stopped early.
#[no_mangle]
pub unsafe extern "C" fn stop(data: *mut c_void, _ctx: *mut c_void) -> c_int {
    if data.is_null() {
        return 0;
    }
    let mut st = Box::from_raw(data.cast::<State>());
    if st.null {
        return 0;
    }
    let (seen, sent, dropped, passed) = (st.seen, st.sent, st.dropped, st.passed);
    let r = &mut st.rec;
    begin(r, format::REC_END);
    for x in [seen, sent, dropped, passed] {
        put_u64(r, x);
    }
    seal(r);
    st.emit(|s| &s.rec);
    if fflush(stdout) != 0 || st.write_failed {
        return -5;
    }
    0
}

/// Handles a sample after perf resolved its address, unless the `early` callback did.
#[no_mangle]
pub unsafe extern "C" fn filter_event(
    data: *mut c_void,
    sample: *const Sample,
    ctx: *mut c_void,
) -> c_int {
    // With `early`, only samples `filter_event_early` left to perf get here: perf
    // prints them.
    handle_in(false, data, sample, ctx)
}

/// Handles a sample before perf resolves its address (with `--dlarg early`): a sample
/// answered from the caches then costs perf no symbol lookup at all.
#[no_mangle]
pub unsafe extern "C" fn filter_event_early(
    data: *mut c_void,
    sample: *const Sample,
    ctx: *mut c_void,
) -> c_int {
    handle_in(true, data, sample, ctx)
}

/// Handles the sample if this callback (`early` or not) is the one the filter works
/// in; the other callback leaves it to perf (0).
unsafe fn handle_in(early: bool, data: *mut c_void, sample: *const Sample, ctx: Ctx) -> c_int {
    if data.is_null() || sample.is_null() {
        return 0;
    }
    let st = &mut *data.cast::<State>();
    if st.early != early {
        return 0;
    }
    handle(st, &*sample, ctx)
}

/// Writes a handled sample as a record (and tells perf not to print it).
pub(crate) unsafe fn handle(st: &mut State, sample: &Sample, ctx: Ctx) -> c_int {
    if st.null {
        return 1;
    }
    if st.sideband {
        st.check_printed();
    }
    st.seen += 1;
    match st.sample(sample, ctx) {
        Some(true) => {
            st.sent += 1;
            1
        }
        Some(false) => {
            st.dropped += 1;
            1
        }
        None => {
            st.passed += 1;
            0
        }
    }
}

/// One-line description for `perf script --list-dlfilters`.
#[no_mangle]
pub unsafe extern "C" fn filter_description(long: *mut *const c_char) -> *const c_char {
    if !long.is_null() {
        *long = c"Streams samples to ptscope as binary records on stdout; dlargs: keep-jumps, null, sideband, early"
            .as_ptr();
    }
    c"ptscope binary sample stream".as_ptr()
}
