//! Fuzzes the FXT reader and the checker built on it: neither may panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptscope_fxt::{check, reader::Reader};

fuzz_target!(|data: &[u8]| {
    let mut records = 0usize;
    for r in Reader::new(data) {
        records += 1;
        if r.is_err() {
            break;
        }
    }
    // Every record is at least one word, so the count is bounded by the input.
    assert!(records <= data.len() / 8 + 1);
    let _ = check::validate_bytes(data);
});
