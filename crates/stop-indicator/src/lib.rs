//! The stop indicator: call [`stop_indicator`] (or [`stop_indicator_with`]) where something
//! interesting just happened, and `ptscope run --trigger . -- PROGRAM` snapshots the trace
//! there. ptscope puts a hardware breakpoint on these functions; without ptscope they cost a
//! call.
//!
//! ```
//! let start = ptscope_stop_indicator::now();
//! // … the slow request …
//! ptscope_stop_indicator::stop_indicator_with(start, 42);
//! ```

#![no_std]

/// The function `--trigger .` puts its breakpoint on. Never inlined, never elided.
#[inline(never)]
#[no_mangle]
pub extern "C" fn ptscope_stop_indicator() {
    // An empty asm statement the optimiser must keep, so the call is not removed.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
}

/// Like [`ptscope_stop_indicator`], passing a start time (from [`now`], `CLOCK_MONOTONIC`
/// ns) and a value; the `hit` slice then spans from `start_ts` and shows `value`.
#[inline(never)]
#[no_mangle]
pub extern "C" fn ptscope_stop_indicator_with(start_ts: u64, value: u64) {
    // The arguments must be in DI and SI at the breakpoint: keep them "used".
    unsafe {
        core::arch::asm!("", in("rdi") start_ts, in("rsi") value, options(nostack, preserves_flags))
    };
}

/// Ends the trace here.
#[inline(always)]
pub fn stop_indicator() {
    ptscope_stop_indicator()
}

/// Ends the trace here, marking the region since `start_ts` and passing `value`.
#[inline(always)]
pub fn stop_indicator_with(start_ts: u64, value: u64) {
    ptscope_stop_indicator_with(start_ts, value)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the start time to pass to [`stop_indicator_with`].
pub fn now() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clk: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: CLOCK_MONOTONIC (1) and a valid out-pointer.
    unsafe { clock_gettime(1, &mut ts) };
    (ts.sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.nsec as u64)
}
