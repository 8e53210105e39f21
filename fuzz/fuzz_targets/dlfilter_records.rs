//! Fuzzes the reader of the dlfilter's byte stream (binary records mixed with perf's
//! own text): any bytes must give events, then at most one typed error — never a
//! panic, a hang or an allocation sized by a length field.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::dlfilter_records(data));
