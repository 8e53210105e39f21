//! Fuzzes what `ptscope decode --executable` reads from an ELF file: load segments,
//! the symbol table, `.note.ocaml_eh` and the DWARF line table. Any bytes must give
//! a typed error or results — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptscope_symbols::Elf;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
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
});
