//! Fuzzes the memtrace reader (with and without backtraces) and the tools built on
//! it: any input must give events, a typed error or a note — never a panic. When the
//! input decodes completely, re-encoding its events must not fail either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::memtrace_reader(data));
