//! Real C programs (PIE and non-PIE, with a shared library): runtime addresses against what
//! the program prints, DWARF lines, suggestions, stripped binaries.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{line_of, run, tool, Running, TempDir};
use ptscope_symbols::{Error, MappedFile, Process};

const LIB_SRC: &str = r#"
static int counter;
__attribute__((noinline)) static void lib_local(void) { counter++; }
void lib_fn(void) { lib_local(); }
void *lib_local_addr(void) { return (void *)lib_local; }
"#;

const PROG_SRC: &str = r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

extern void lib_fn(void);
extern void *lib_local_addr(void);
volatile int sink;

__attribute__((noinline)) int target_fn(int x) { /* TARGET_DEF */
    sink += x; /* TARGET_BODY */
    return sink;
}

__attribute__((noinline)) static int local_fn(int x) { /* LOCAL_DEF */
    return x * 3;
}

int main(void) {
    sink = target_fn(1) + local_fn(2);
    lib_fn();
    printf("target_fn %p\n", (void *)target_fn);
    printf("local_fn %p\n", (void *)local_fn);
    printf("lib_local %p\n", lib_local_addr());
    printf("lib_fn %p\n", dlsym(RTLD_DEFAULT, "lib_fn"));
    printf("malloc %p\n", dlsym(RTLD_DEFAULT, "malloc"));
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF) {}
    return 0;
}
"#;

struct Built {
    _dir: TempDir,
    lib: PathBuf,
    pie: PathBuf,
    nopie: PathBuf,
}

fn build() -> Option<Built> {
    let cc = tool("cc")?;
    let dir = TempDir::new("c");
    let lib_c = dir.write("shlib.c", LIB_SRC);
    let prog_c = dir.write("prog.c", PROG_SRC);
    let lib = dir.path().join("libshlib.so");
    run(Command::new(&cc)
        .args(["-g", "-O1", "-fPIC", "-shared", "-o"])
        .arg(&lib)
        .arg(&lib_c));
    let link = |out: &Path, pie: &[&str]| {
        run(Command::new(&cc)
            .args(["-g", "-O0"])
            .args(pie)
            .arg("-o")
            .arg(out)
            .arg(&prog_c)
            .arg(format!("-L{}", dir.path().display()))
            .arg(format!("-Wl,-rpath,{}", dir.path().display()))
            .args(["-lshlib", "-ldl"]))
    };
    let pie = dir.path().join("prog_pie");
    let nopie = dir.path().join("prog_nopie");
    link(&pie, &["-fPIE", "-pie"]);
    link(&nopie, &["-fno-pie", "-no-pie"]);
    Some(Built {
        _dir: dir,
        lib,
        pie,
        nopie,
    })
}

fn check_runtime(exe: &Path, lib: &Path, expect_pie: bool) {
    let running = Running::start(exe);
    let proc_ = Process::open(running.pid()).expect("open process");
    let file = MappedFile::open(exe).expect("map exe");
    let elf = file.elf().expect("parse exe");
    assert_eq!(elf.is_position_independent(), expect_pie);
    let syms = elf.symbols().expect("symbols");

    for name in ["target_fn", "local_fn"] {
        let s = syms.lookup(name).expect(name);
        let rt = proc_
            .runtime_address(&elf, s.address())
            .expect("runtime address");
        assert_eq!(rt, running.addr(name), "{name} in {}", exe.display());
        // And back: the printed address lands in the right function.
        let bias = proc_.maps().load_bias(&elf).expect("bias");
        let back = syms.containing(running.addr(name) - bias).map(|s| s.name());
        assert_eq!(back, Some(name));
    }
    let bias = proc_.maps().load_bias(&elf).expect("bias");
    assert_eq!(bias == 0, !expect_pie, "bias {bias:#x}");

    // A static function inside the shared library.
    let lib_file = MappedFile::open(lib).expect("map lib");
    let lib_elf = lib_file.elf().expect("parse lib");
    let lib_syms = lib_elf.symbols().expect("lib symbols");
    let local = lib_syms.lookup("lib_local").expect("lib_local");
    assert_eq!(
        proc_
            .runtime_address(&lib_elf, local.address())
            .expect("lib runtime"),
        running.addr("lib_local")
    );

    // Across the executable and its libraries.
    let r = proc_.resolve("lib_fn").expect("resolve lib_fn");
    assert_eq!(r.runtime_address, running.addr("lib_fn"));
    assert!(r.object.ends_with("libshlib.so"), "{:?}", r.object);
    let m = proc_.resolve("malloc").expect("resolve malloc");
    assert_eq!(
        m.runtime_address,
        running.addr("malloc"),
        "malloc from {:?}",
        m.object
    );
    let t = proc_.resolve("target_fn").expect("resolve target_fn");
    assert_eq!(t.runtime_address, running.addr("target_fn"));
    match proc_.resolve("target_fnn") {
        Err(Error::SymbolNotFound { suggestions, .. }) => {
            assert_eq!(suggestions.first().map(String::as_str), Some("target_fn"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn runtime_addresses_pie_nopie_and_shared_library() {
    let Some(b) = build() else { return };
    check_runtime(&b.pie, &b.lib, true);
    check_runtime(&b.nopie, &b.lib, false);
}

#[test]
fn dwarf_lines_round_trip() {
    let Some(b) = build() else { return };
    for exe in [&b.pie, &b.nopie] {
        let file = MappedFile::open(exe).unwrap();
        let elf = file.elf().unwrap();
        let syms = elf.symbols().unwrap();
        let lines = elf.line_table().expect("line table");
        let target = syms.lookup("target_fn").unwrap().address();
        let local = syms.lookup("local_fn").unwrap().address();

        // Function start → source position.
        let pos = lines.positions([target, local, 0x10]);
        assert!(!pos.contains_key(&0x10));
        let t = &pos[&target];
        assert!(
            t.file.as_deref().is_some_and(|f| f.ends_with("/prog.c")),
            "{t:?}"
        );
        assert_eq!(t.line as u64, line_of(PROG_SRC, "TARGET_DEF"));
        assert!(t.col > 0, "gcc emits columns: {t:?}");
        assert_eq!(pos[&local].line as u64, line_of(PROG_SRC, "LOCAL_DEF"));

        // Line → address: the definition line starts at the function's first byte.
        let def = lines
            .addresses_for_line("prog.c", line_of(PROG_SRC, "TARGET_DEF"), None)
            .unwrap();
        assert_eq!(
            def.iter().map(|a| a.address).collect::<Vec<_>>(),
            vec![target]
        );
        // With the column the table reports.
        let with_col = lines
            .addresses_for_line("prog.c", t.line as u64, Some(t.col as u64))
            .unwrap();
        assert_eq!(with_col[0].address, target);

        // A body line maps inside the function, and back to itself.
        let body_line = line_of(PROG_SRC, "TARGET_BODY");
        let body = lines.addresses_for_line("prog.c", body_line, None).unwrap();
        assert_eq!(body.len(), 1);
        let a = body[0].address;
        assert_eq!(syms.containing(a).map(|s| s.name()), Some("target_fn"));
        assert_eq!(lines.position(a).unwrap().line as u64, body_line);
        assert!(lines
            .source_lines()
            .iter()
            .any(|&(f, l)| f.ends_with("prog.c") && l == body_line));

        // Misses give typed errors with help.
        match lines.addresses_for_line("prog.c", 1, None) {
            Err(Error::LineNotFound { nearest, .. }) => assert!(!nearest.is_empty()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            lines.addresses_for_line("nope.c", 3, None),
            Err(Error::SourceFileNotFound { .. })
        ));
    }
}

#[test]
fn suggestions_and_stripped_binaries() {
    let Some(b) = build() else { return };
    let file = MappedFile::open(&b.pie).unwrap();
    let elf = file.elf().unwrap();
    let syms = elf.symbols().unwrap();
    let err = syms.lookup("traget_fn").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no function named `traget_fn`"), "{msg}");
    assert!(msg.contains("did you mean `target_fn`"), "{msg}");
    assert!(msg.contains("prog_pie"), "{msg}");
    // Substring matches rank first.
    assert_eq!(
        syms.suggest("_fn", 3),
        vec!["local_fn".to_owned(), "target_fn".to_owned()]
    );
    assert_eq!(syms.suggest("local", 1), vec!["local_fn".to_owned()]);
    assert!(syms.suggest("zzzzzzzzzz", 3).is_empty());

    // Stripped, with a debuglink to the original.
    let (Some(strip), Some(objcopy)) = (tool("strip"), tool("objcopy")) else {
        return;
    };
    let stripped = b.pie.with_file_name("prog_stripped");
    run(Command::new(strip).arg("-o").arg(&stripped).arg(&b.pie));
    let debug = b.pie.with_file_name("prog.debug");
    std::fs::copy(&b.pie, &debug).unwrap();
    let dir = debug.parent().unwrap();
    run(Command::new(objcopy)
        .current_dir(dir)
        .arg("--add-gnu-debuglink=prog.debug")
        .arg(&stripped));
    let file = MappedFile::open(&stripped).unwrap();
    let elf = file.elf().unwrap();
    assert_eq!(elf.debuglink().as_deref(), Some("prog.debug"));
    match elf.symbols() {
        Err(e @ Error::NoSymbols { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains("prog_stripped") && m.contains("prog.debug"),
                "{m}"
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("stripped binary has symbols"),
    }
    assert!(matches!(elf.line_table(), Err(Error::NoDebugInfo { .. })));
}
