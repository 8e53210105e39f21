//! Fuzzes the JIT perf map parser (`/tmp/perf-PID.map`) against a plain model of its
//! lookup rule, and the `/proc/PID/maps` parser: no panic, and every lookup answers
//! what a linear scan of the file would (the entry written last among those holding
//! the address, since JITs reuse freed code memory).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::perf_map(data));
