//! `ptscope decode --executable`: what the traced ELF adds — OCaml exception traps
//! from `.note.ocaml_eh`, and file:line of function starts from DWARF.

use std::path::PathBuf;
use std::process::Command;

fn tool(name: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{name} is required under CI"
        );
        eprintln!("!!!!!!!! SKIPPING: {name} not found");
    }
    ok
}

/// A private temporary directory, removed when dropped (also when the test fails).
fn tmpdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("ptscope-exe-{name}-"))
        .tempdir()
        .expect("temporary directory")
}

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn fixture(case: &str) -> PathBuf {
    fixtures::fixtures_dir().join("magic-trace").join(case)
}

/// An ELF named like the fixture's DSO (`foo.so`), non-PIE, whose `.note.ocaml_eh`
/// lists exactly the trap addresses of magic-trace's `ocaml_exceptions_traps` case.
const NOTE_ASM: &str = r#"
    .text
    .globl main
    .type main,@function
main: xor %eax, %eax
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
3:  .8byte _.stapsdt.base
    .8byte 0x411030, 0
    .8byte 0x41100b, 0
    .8byte 0x411026, 0
4:  .balign 4
    .section .note.GNU-stack,"",@progbits
"#;

#[test]
fn ocaml_traps_come_from_the_executables_note() {
    if !tool("cc") {
        return;
    }
    let tmp = tmpdir("note");
    let dir = tmp.path();
    let asm = dir.join("traps.s");
    std::fs::write(&asm, NOTE_ASM).expect("write");
    let exe = dir.join("foo.so");
    let o = Command::new("cc")
        .args(["-fno-pie", "-no-pie", "-o"])
        .arg(&exe)
        .arg(&asm)
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let case = fixture("ocaml_exceptions_traps");
    let transcript = |extra: &[&std::ffi::OsStr]| {
        let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
            .args([
                "decode",
                "--quiet",
                "--writer",
                "legacy",
                "--format",
                "transcript",
                "-o",
                "-",
            ])
            .arg("--perf-script")
            .arg(case.join("input.perf"))
            .args(extra)
            .output()
            .expect("ptscope");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let expected = std::fs::read(case.join("expected.txt")).expect("expected");
    // Without the traps the reference transcript is not reproduced; with the note it is.
    assert_ne!(transcript(&[]), expected);
    assert_eq!(
        transcript(&["--executable".as_ref(), exe.as_os_str()]),
        expected
    );
}

const PROG_C: &str = r#"#include <stdlib.h>
volatile unsigned long sink;
__attribute__((noinline)) void spin_leaf(unsigned long n) {
    for (unsigned long i = 0; i < n; i++) sink += i * i;
}
__attribute__((noinline)) void spin_middle(void) {
    for (int i = 0; i < 200; i++) spin_leaf(200000);
}
int main(void) {
    spin_middle();
    return 0;
}
"#;

/// A real sampling recording of a PIE built with -g: slices of the program's
/// functions carry the file and line where each function starts.
#[test]
fn function_starts_get_file_and_line() {
    if !tool("cc") || !tool("perf") {
        return;
    }
    let tmp = tmpdir("dwarf");
    let dir = tmp.path();
    let src = dir.join("prog.c");
    std::fs::write(&src, PROG_C).expect("write");
    let exe = dir.join("prog");
    let o = Command::new("cc")
        .args([
            "-g",
            "-O0",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
            "-fPIE",
            "-pie",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let data = dir.join("perf.data");
    let o = Command::new("perf")
        .args([
            "record",
            "--no-buildid-cache",
            "-q",
            "-e",
            "cpu-clock",
            "-F",
            "2000",
            "--call-graph",
            "fp",
            "-o",
        ])
        .arg(&data)
        .arg(&exe)
        .output()
        .expect("perf record");
    assert!(
        o.status.success(),
        "perf record: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let trace = dir.join("t.fxt");
    let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args(["decode", "--quiet"])
        .arg(&data)
        .arg("--executable")
        .arg(&exe)
        .arg("-o")
        .arg(&trace)
        .output()
        .expect("ptscope");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bytes = std::fs::read(&trace).expect("trace");
    let events = ptscope_fxt::reader::read_events(&bytes).expect("valid FXT");
    let mut seen = Vec::new();
    for e in &events {
        if let ("spin_leaf" | "spin_middle" | "main", Some(line)) = (e.name, e.args.get("line")) {
            let file = match e.args.get("file") {
                Some(ptscope_fxt::reader::ArgValue::Str(f)) => f.to_string(),
                other => panic!("{}: file arg {other:?}", e.name),
            };
            assert!(file.ends_with("prog.c"), "{file}");
            seen.push((e.name.to_string(), line.as_i64()));
        }
    }
    for (name, line) in [("spin_leaf", 3), ("spin_middle", 6), ("main", 9)] {
        assert!(
            seen.iter().any(|(n, l)| n == name && *l == Some(line)),
            "{name} at line {line} not found in {seen:?}"
        );
    }
}
