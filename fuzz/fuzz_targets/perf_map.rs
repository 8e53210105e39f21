//! Fuzzes the JIT perf map parser (`/tmp/perf-PID.map`) against a plain model of its
//! lookup rule, and the `/proc/PID/maps` parser: no panic, and every lookup answers
//! what a linear scan of the file would (the entry written last among those holding
//! the address, since JITs reuse freed code memory).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptscope_symbols::{PerfMap, ProcMaps};
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let map = PerfMap::parse(&text);
    // The model: each line parsed alone, in file order.
    let mut in_file_order = Vec::new();
    let mut malformed = 0;
    for line in text.lines() {
        let one = PerfMap::parse(line);
        malformed += one.malformed_lines();
        in_file_order.extend(one.entries().iter().cloned());
    }
    assert_eq!(map.malformed_lines(), malformed);
    assert_eq!(map.entries().len(), in_file_order.len());
    assert!(map.entries().windows(2).all(|w| w[0].start <= w[1].start));
    // Probe every start and end and the addresses around them.
    let mut probes = vec![0, u64::MAX];
    for e in in_file_order.iter().take(64) {
        for a in [e.start, e.end()] {
            probes.extend([a.wrapping_sub(1), a, a.wrapping_add(1)]);
        }
    }
    for addr in probes {
        let want = in_file_order.iter().rev().find(|e| e.contains(addr));
        assert_eq!(map.lookup(addr), want, "lookup({addr:#x})");
    }
    let _ = ProcMaps::parse(&text, Path::new("fuzzed-maps")).map(|m| m.files().len());
});
