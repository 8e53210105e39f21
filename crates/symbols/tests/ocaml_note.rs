//! `.note.ocaml_eh` from an ELF whose note we write ourselves in assembly, linked as PIE and
//! non-PIE, with and without a recorded base that differs from `.stapsdt.base`.

mod common;

use std::process::Command;

use common::{run, tool, Running, TempDir};
use ptscope_symbols::{Error, MappedFile, Process};

/// `SHIFT` simulates a file moved after linking: every recorded address is `SHIFT` too low,
/// which only the `.stapsdt.base` fix-up can undo.
fn asm(shift: u64) -> String {
    format!(
        r#"
    .text
    .globl trap_code, ml_enter, ml_push1, ml_push2, ml_pop1
    .type trap_code,@function
    .type ml_enter,@function
    .type ml_push1,@function
    .type ml_push2,@function
    .type ml_pop1,@function
trap_code:
ml_push1: nop
ml_push2: nop
ml_pop1:  nop
    ret
ml_enter: nop
    ret

    .section .stapsdt.base,"aG",@progbits,.stapsdt.base,comdat
    .weak _.stapsdt.base
    .hidden _.stapsdt.base
_.stapsdt.base: .space 1

    .section .note.ocaml_eh,"",@note
    .balign 4
    .4byte 2f-1f
    .4byte 4f-3f
    .4byte 1
1:  .asciz "OCaml"
2:  .balign 4
3:  .8byte _.stapsdt.base - {shift}
    .8byte ml_enter - {shift}, 0
    .8byte ml_push1 - {shift}, ml_push2 - {shift}, 0
    .8byte ml_pop1 - {shift}, 0
4:  .balign 4
    .section .note.GNU-stack,"",@progbits
"#
    )
}

const MAIN_C: &str = r#"#include <stdio.h>
extern void ml_enter(void);
int main(void) {
    printf("ml_enter %p\n", (void *)ml_enter);
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
"#;

#[test]
fn ocaml_note_rebased_pie_and_nonpie() {
    let Some(cc) = tool("cc") else { return };
    let dir = TempDir::new("ocaml");
    let main_c = dir.write("main.c", MAIN_C);
    for shift in [0u64, 0x1000] {
        let s = dir.write(&format!("traps{shift}.s"), &asm(shift));
        for (kind, flags) in [
            ("pie", ["-fPIE", "-pie"]),
            ("nopie", ["-fno-pie", "-no-pie"]),
        ] {
            let exe = dir.path().join(format!("ml_{kind}_{shift}"));
            run(Command::new(&cc)
                .args(flags)
                .arg("-o")
                .arg(&exe)
                .arg(&main_c)
                .arg(&s));
            let file = MappedFile::open(&exe).unwrap();
            let elf = file.elf().unwrap();
            let syms = elf.symbols().unwrap();
            let at = |n: &str| syms.lookup(n).unwrap().address();
            let traps = elf
                .ocaml_traps()
                .unwrap_or_else(|e| panic!("{kind}/{shift}: {e}"));
            assert_eq!(traps.entertraps, vec![at("ml_enter")], "{kind}/{shift}");
            assert_eq!(traps.pushtraps, vec![at("ml_push1"), at("ml_push2")]);
            assert_eq!(traps.poptraps, vec![at("ml_pop1")]);
            assert_eq!(at("ml_push2"), at("ml_push1") + 1);
            if kind == "nopie" {
                assert!(at("ml_enter") >= 0x400000, "{:#x}", at("ml_enter"));
            }

            let info = traps.to_exception_info();
            assert!(info.is_entertrap(at("ml_enter")));
            assert_eq!(
                info.traps_in_range(at("ml_push1"), at("ml_pop1")),
                &[
                    (at("ml_push1"), true),
                    (at("ml_push2"), true),
                    (at("ml_pop1"), false)
                ]
            );

            // At run time: shift by the load bias.
            let running = Running::start(&exe);
            let p = Process::open(running.pid()).unwrap();
            let bias = p.maps().load_bias(&elf).unwrap();
            assert_eq!(bias == 0, kind == "nopie");
            assert_eq!(
                traps.rebased(bias).entertraps,
                vec![running.addr("ml_enter")]
            );
        }
    }
}

#[test]
fn missing_and_malformed_notes() {
    let Some(cc) = tool("cc") else { return };
    let dir = TempDir::new("ocaml-bad");
    let plain_c = dir.write(
        "plain.c",
        &MAIN_C.replace("extern void ml_enter(void);", "void ml_enter(void) {}"),
    );
    let exe = dir.path().join("plain");
    run(Command::new(&cc).arg("-o").arg(&exe).arg(&plain_c));
    let file = MappedFile::open(&exe).unwrap();
    assert!(matches!(
        file.elf().unwrap().ocaml_traps(),
        Err(Error::NoOcamlNote { .. })
    ));

    // The last list lacks its terminator.
    let broken = asm(0).replace("    .8byte ml_pop1 - 0, 0\n", "    .8byte ml_pop1 - 0\n");
    let s = dir.write("broken.s", &broken);
    let main_c = dir.write("main.c", MAIN_C);
    let exe = dir.path().join("broken");
    run(Command::new(&cc).arg("-o").arg(&exe).arg(&main_c).arg(&s));
    let file = MappedFile::open(&exe).unwrap();
    let err = file.elf().unwrap().ocaml_traps().unwrap_err().to_string();
    assert!(
        err.contains("malformed .note.ocaml_eh") && err.contains("not 0-terminated"),
        "{err}"
    );
}
