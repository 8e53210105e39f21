//! Fuzzes the emulate block log: ptsim's whole-log parser, the index, and ptscope's
//! decode of every thread into stacks on each clock (no panic, no allocation the input
//! does not hold, no step back in time).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::block_log(data));
