//! Fuzzes ptscope's Intel PT decoder: packets, the walk over code (a program of every
//! branch kind, and the fuzzed bytes as code), chunks cut at PSBs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::pt_decoder(data));
