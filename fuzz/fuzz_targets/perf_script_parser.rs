//! Fuzzes the `perf script` text decoder: any bytes, any read-buffer size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptscope_decode::Decoder;
use std::io::BufReader;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read-buffer size so lines straddling buffers are hit.
    let (cap, input) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c) + 1, rest),
        None => (1, data),
    };
    let mut decoder = Decoder::new(BufReader::with_capacity(cap, input));
    let mut events = 0u64;
    while let Ok(Some(_)) = decoder.next_event() {
        events += 1;
    }
    let stats = decoder.stats();
    assert_eq!(stats.bytes, input.len() as u64);
    assert_eq!(stats.events, events);
    assert!(stats.warnings <= stats.lines);
});
