//! Fuzzes what `ptscope decode --executable` reads from an ELF file: load segments,
//! the symbol table, `.note.ocaml_eh` and the DWARF line table. Any bytes must give
//! a typed error or results — never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ptscope_fuzz_targets::elf_symbols(data));
