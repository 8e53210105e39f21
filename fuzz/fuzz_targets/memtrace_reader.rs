//! Fuzzes the memtrace reader (with and without backtraces) and the tools built on
//! it: any input must give events, a typed error or a note — never a panic. When the
//! input decodes completely, re-encoding its events must not fail either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtrace::{tools, Reader};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Reader::from_bytes(data) {
        let mut r = r.parse_backtraces(false);
        while let Ok(Some(_)) = r.next_event() {}
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::dump(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::flamegraph(&mut r, &mut std::io::sink());
    }
    if let Ok(r) = Reader::from_bytes(data) {
        let _ = tools::identify(r, "fuzz", &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::hotspots(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::subsample(&mut r, std::io::sink(), &Default::default());
    }
});
