//! JIT perf maps: parsing, malformed lines, containment at the boundaries.

use ptscope_symbols::{MapTrust, PerfMap};

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
    let path = dir.path().join("perf-1.map");
    std::fs::write(&path, b"10 4 f\n\xff\xfe junk\n").unwrap();
    let m = PerfMap::load(&path, &MapTrust::new()).unwrap().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(m.lookup(0x13).map(|e| e.name.as_str()), Some("f"));
    assert_eq!(m.malformed_lines(), 1);
    let err = PerfMap::load(&path, &MapTrust::new())
        .unwrap_err()
        .to_string();
    assert!(err.contains("perf-1.map"), "{err}");
    assert!(PerfMap::for_pid(u32::MAX, &MapTrust::new()).is_err());
}

extern "C" {
    fn geteuid() -> u32;
}

/// Another user's map (here: owned by `nobody`) is ignored with a reason, unless the
/// caller vouches for that user; a symbolic link to a trusted map and a FIFO are
/// ignored too, without blocking or following them.
#[test]
fn maps_of_untrusted_owners_symlinks_and_fifos_are_ignored() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { geteuid() } != 0 {
        let why = "maps_of_untrusted_owners_symlinks_and_fifos_are_ignored: needs root to chown";
        if std::env::var_os("CI").is_some() {
            panic!("{why}");
        }
        eprintln!("SKIPPED {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("perf-2.map");
    std::fs::write(&theirs, b"1000 10 attacker_chosen_name\n").unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let got = PerfMap::load(&theirs, &MapTrust::new()).unwrap();
    let why = got.expect_err("another user's map is not read");
    assert!(why.to_string().contains("owned by uid 65534"), "{why}");
    assert!(MapTrust::new().check_path(&theirs).is_err());
    // The traced process's own user may write its map.
    let m = PerfMap::load(&theirs, &MapTrust::new().with_uid(65534))
        .unwrap()
        .expect("vouched-for owner");
    assert_eq!(
        m.lookup(0x1001).map(|e| e.name.as_str()),
        Some("attacker_chosen_name")
    );

    let mine = dir.path().join("perf-3.map");
    std::fs::write(&mine, b"1000 10 f\n").unwrap();
    let link = dir.path().join("perf-4.map");
    std::os::unix::fs::symlink(&mine, &link).unwrap();
    let why = PerfMap::load(&link, &MapTrust::new()).unwrap().unwrap_err();
    assert!(why.to_string().contains("symbolic link"), "{why}");

    let fifo = dir.path().join("perf-5.map");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let why = PerfMap::load(&fifo, &MapTrust::new()).unwrap().unwrap_err();
    assert!(why.to_string().contains("not a regular file"), "{why}");

    assert!(ptscope_symbols::is_jit_map_name("/tmp/perf-42.map"));
    assert!(!ptscope_symbols::is_jit_map_name("/tmp/perf-.map"));
    assert!(!ptscope_symbols::is_jit_map_name("/tmp/perf-4x.map"));
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() } as u32;
    assert_eq!(ptscope_symbols::process_owner(me), Some(0));
}
