//! JIT perf maps: parsing, malformed lines, containment at the boundaries.

use ptscope_symbols::PerfMap;

const MAP: &str = "\
1000 10 jit_a
0x1010 0x20 jit b with spaces
2000 0 empty
not-hex 10 bad
3000 zz bad size
4000 10
ffffffffffffffff 10 overflow

  5000   8   padded\t
1004 4 inner_later
";

#[test]
fn parses_and_counts_malformed() {
    let m = PerfMap::parse(MAP);
    assert_eq!(m.malformed_lines(), 4);
    let names: Vec<&str> = m.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "jit_a",
            "inner_later",
            "jit b with spaces",
            "empty",
            "padded"
        ]
    );
}

#[test]
fn containment_at_boundaries() {
    let m = PerfMap::parse(MAP);
    let at = |a| m.lookup(a).map(|e| e.name.as_str());
    assert_eq!(at(0xfff), None);
    assert_eq!(at(0x1000), Some("jit_a"));
    assert_eq!(at(0x1003), Some("jit_a"));
    // Overlap: the later line wins (JITs reuse code memory).
    assert_eq!(at(0x1004), Some("inner_later"));
    assert_eq!(at(0x1007), Some("inner_later"));
    assert_eq!(at(0x1008), Some("jit_a"));
    assert_eq!(at(0x100f), Some("jit_a"));
    // `start + size` is outside; magic-trace's inverted check got this wrong.
    assert_eq!(at(0x1010), Some("jit b with spaces"));
    assert_eq!(at(0x102f), Some("jit b with spaces"));
    assert_eq!(at(0x1030), None);
    assert_eq!(at(0x2000), None, "size 0 contains nothing");
    assert_eq!(at(0x5007), Some("padded"));
    assert_eq!(at(0x5008), None);
    assert_eq!(at(u64::MAX), None);
}

#[test]
fn load_from_file_and_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ptscope-symbols-perfmap.map");
    std::fs::write(&path, b"10 4 f\n\xff\xfe junk\n").unwrap();
    let m = PerfMap::load(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(m.lookup(0x13).map(|e| e.name.as_str()), Some("f"));
    assert_eq!(m.malformed_lines(), 1);
    let err = PerfMap::load(&path).unwrap_err().to_string();
    assert!(err.contains("ptscope-symbols-perfmap"), "{err}");
    assert!(PerfMap::for_pid(u32::MAX).is_err());
}
