//! Truncated and corrupted ELF bytes, and garbage maps text, give errors and never panic.
//! Deterministic: fixed cut points and a fixed-seed xorshift for bit flips.

use std::path::Path;

use ptscope_symbols::{Elf, MappedFile, ProcMaps};

/// Runs every reader over `bytes`; the results do not matter, only that nothing panics.
fn exercise(bytes: &[u8], dwarf: bool) {
    let path = Path::new("fuzzed.elf");
    let Ok(elf) = Elf::parse(bytes, path) else {
        return;
    };
    let _ = elf.load_segments();
    let _ = elf.debuglink();
    let _ = elf.build_id();
    let _ = elf.ocaml_traps();
    if let Ok(syms) = elf.symbols() {
        let _ = syms.lookup("main");
        let _ = syms.containing(0x1000);
        let _ = syms.suggest("mian", 3);
    }
    if dwarf {
        if let Ok(lines) = elf.line_table() {
            let _ = lines.position(0x1000);
            let _ = lines.addresses_for_line("robustness.rs", 10, None);
        }
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn truncated_and_corrupted_elf() {
    let file = MappedFile::open("/proc/self/exe").unwrap();
    let good = file.bytes();
    let n = good.len();

    // Errors name the file and cause.
    let err = Elf::parse(&good[..10], Path::new("short.elf"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("short.elf: "), "{err}");
    let err = Elf::parse(b"#!/bin/sh\necho hi\n", Path::new("script"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("script: "), "{err}");
    assert!(Elf::parse(&[], Path::new("empty")).is_err());

    for cut in [
        0,
        1,
        4,
        16,
        52,
        63,
        64,
        65,
        200,
        4096,
        n / 3,
        n / 2,
        n - 4096,
        n - 1,
    ] {
        exercise(&good[..cut.min(n)], cut >= n / 2);
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut buf = good.to_vec();
    for round in 0..24 {
        buf.copy_from_slice(good);
        // Headers live at both ends of the file (ELF/program headers first, section headers
        // last), so aim most flips there.
        for _ in 0..16 {
            let r = rng.next() as usize;
            let pos = match r % 3 {
                0 => r / 3 % 4096.min(n),
                1 => n - 1 - (r / 3 % 8192.min(n)),
                _ => r / 3 % n,
            };
            buf[pos] ^= 1 << (rng.next() % 8);
        }
        exercise(&buf, round % 6 == 0);
    }
    // Pure garbage with a valid magic.
    let mut junk = vec![0u8; 4096];
    for b in junk.iter_mut() {
        *b = rng.next() as u8;
    }
    junk[..4].copy_from_slice(b"\x7fELF");
    for class in [1u8, 2] {
        junk[4] = class;
        junk[5] = 1;
        exercise(&junk, true);
    }
}

#[test]
fn garbage_maps_are_errors() {
    for text in [
        "x",
        "1-2",
        "2-1 r-xp 0 00:00 0",
        "1-2 r-xp 0 0 0 /x",
        "1-2 rx 0 00:00 0 /x",
    ] {
        let r = ProcMaps::parse(text, Path::new("/proc/9/maps"));
        assert!(r.is_err(), "{text:?} parsed");
    }
    let ok = ProcMaps::parse("1-2 r-xp 0 00:00 0\n\n", Path::new("m")).unwrap();
    assert_eq!(ok.entries().len(), 1);
}

/// Found by the `elf_symbols` fuzz target (docs/fuzzing.md): an object file whose
/// `.debug_aranges` is flagged `SHF_COMPRESSED` with a compression header claiming
/// 0xd0000000_0000 uncompressed bytes. That size was reserved before inflating (an abort
/// under the fuzzer's allocator, an unnamed allocation failure here); it is now a clear
/// error naming the section, raised before any allocation.
#[test]
fn compressed_section_with_a_huge_claimed_size_is_an_error() {
    let bytes = include_bytes!("data/fuzz-compressed-section-size.o");
    let elf = Elf::parse(bytes, Path::new("fuzz-compressed-section-size.o")).expect("ELF header");
    let err = elf.line_table().err().expect("a corrupt debug section");
    let msg = err.to_string();
    assert!(
        msg.contains(".debug_aranges claims 228698418577408 bytes"),
        "{msg}"
    );
}

/// The bound above turns away no real file: `gcc -g -gz=zlib` output (a tiny static
/// program built from `int mid(int)` and a `leaf` it calls) still has its line table.
#[test]
fn zlib_compressed_debug_sections_still_read() {
    let bytes = include_bytes!("data/zlib-debug-sections");
    let elf = Elf::parse(bytes, Path::new("zlib-debug-sections")).expect("ELF");
    let lines = elf.line_table().expect("compressed DWARF reads");
    let files: Vec<&str> = lines.source_lines().iter().map(|(f, _)| *f).collect();
    assert!(files.iter().any(|f| f.ends_with("tiny.c")), "{files:?}");
}
