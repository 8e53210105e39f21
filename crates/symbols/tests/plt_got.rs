//! `.plt.got` stubs are `NAME@plt` in perf-style names: a PIE's `__cxa_finalize` stub
//! had only the file's name and offset, where perf (6.3 on) names the function.

mod common;

use common::{tool, TempDir};
use object::{Object, ObjectSection};
use ptscope_symbols::{MappedFile, PerfSymbols};
use std::process::Command;

#[test]
fn a_pie_s_plt_got_stub_is_named_after_its_function() {
    let Some(gcc) = tool("gcc") else {
        return;
    };
    let dir = TempDir::new("plt-got");
    let src = dir.path().join("p.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
    )
    .expect("source");
    let exe = dir.path().join("p");
    // Both entry layouts: 8-byte stubs, and 16-byte ones behind endbr64 (IBT).
    for flags in [&["-fcf-protection=none"][..], &["-fcf-protection=full"][..]] {
        let st = Command::new(&gcc)
            .args(["-O2", "-pie", "-fPIE"])
            .args(flags)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .expect("gcc runs");
        assert!(st.success(), "gcc {flags:?}");
        let file = MappedFile::open(&exe).expect("open");
        let elf = file.elf().expect("elf");
        let sec = elf
            .object()
            .section_by_name(".plt.got")
            .expect("a PIE calling no weak function has __cxa_finalize in .plt.got");
        let at = elf
            .load_segments()
            .iter()
            .find(|s| sec.address() >= s.vaddr && sec.address() - s.vaddr < s.filesz)
            .map(|s| sec.address() - s.vaddr + s.offset)
            .expect("in a segment");
        let names = PerfSymbols::from_elf(&elf, None);
        assert_eq!(
            names.lookup(at).map(|(n, _)| n.to_string()),
            Some("__cxa_finalize@plt".to_string()),
            "{flags:?}"
        );
    }
}
