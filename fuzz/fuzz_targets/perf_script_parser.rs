//! Fuzzes the `perf script` text decoder: any bytes, any read-buffer size.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::perf_script_parser(data));
