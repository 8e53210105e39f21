//! Fuzzes the FXT reader and the checker built on it: neither may panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::fxt_reader(data));
