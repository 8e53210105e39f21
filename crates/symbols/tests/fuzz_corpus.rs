//! Replays the committed seed corpus of the `elf_symbols` and `perf_map` fuzz targets
//! (`fuzz/corpus/`, see docs/fuzzing.md) on the stable toolchain, with the target's
//! own checks, so CI covers what fuzzing found without needing nightly.

use ptscope_symbols::Elf;
use ptscope_symbols::{PerfMap, ProcMaps};
use std::path::Path;

/// The fuzz target's body (`fuzz/fuzz_targets/elf_symbols.rs`): keep the two alike.
fn exercise_elf_symbols(data: &[u8]) {
    let Ok(elf) = Elf::parse(data, Path::new("fuzzed.elf")) else {
        return;
    };
    let segments = elf.load_segments();
    for s in &segments {
        let _ = elf.segment_of(s.vaddr);
    }
    let _ = elf.is_position_independent();
    let _ = elf.debuglink();
    let _ = elf.build_id();
    if let Ok(traps) = elf.ocaml_traps() {
        let _ = traps.rebased(0x5555_0000_0000).to_exception_info();
    }
    if let Ok(syms) = elf.symbols() {
        for f in syms.functions().iter().take(64) {
            let _ = (f.demangled(), f.short_name());
            let _ = syms.containing(f.address());
            let _ = syms.lookup(f.name());
        }
        let _ = syms.suggest("mian", 3);
    }
    if let Ok(lines) = elf.line_table() {
        for (file, line) in lines.source_lines().into_iter().take(16) {
            if let Ok(addrs) = lines.addresses_for_line(file, line, None) {
                for a in addrs.iter().take(4) {
                    let _ = lines.position(a.address);
                }
            }
        }
        let _ = lines.position(0x1000);
    }
}

/// The fuzz target's body (`fuzz/fuzz_targets/perf_map.rs`): keep the two alike.
fn exercise_perf_map(data: &[u8]) {
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
}

/// Runs `exercise` on every file of `fuzz/corpus/TARGET`, naming the file that panics.
fn replay(target: &str, exercise: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "SKIPPED: no {} (crate built outside the repository)",
            dir.display()
        );
        return;
    };
    let mut n = 0;
    for e in entries {
        let path = e.expect("readable corpus directory").path();
        let data = std::fs::read(&path).expect("readable corpus file");
        let r = std::panic::catch_unwind(|| exercise(&data));
        assert!(r.is_ok(), "{} panicked", path.display());
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}

#[test]
fn elf_symbols_corpus_replays_without_panics() {
    replay("elf_symbols", exercise_elf_symbols);
}

#[test]
fn perf_map_corpus_replays_without_panics() {
    replay("perf_map", exercise_perf_map);
}
