//! Fuzzes the perf.data reader: header, attributes, features and the record walk
//! (AUX trace data included) give records or a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::perf_data_reader(data));
