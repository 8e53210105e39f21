//! Names in the trace are demangled (Rust v0 and legacy, C++, OCaml); `--no-demangle`
//! and transcripts keep perf's names.

use std::path::Path;
use std::process::Command;

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn names(trace: &Path) -> Vec<String> {
    let bytes = std::fs::read(trace).expect("trace");
    ptscope_fxt::reader::read_events(&bytes)
        .expect("valid FXT")
        .iter()
        .map(|e| e.name.to_string())
        .collect()
}

fn decode(input: &Path, out: &Path, extra: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args(["decode", "--quiet", "--perf-script"])
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .expect("ptscope");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn ocaml_and_rust_names_are_demangled() {
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-demangle-")
        .tempdir()
        .expect("temporary directory");
    let dir = tmp.path();
    // OCaml: a real recording from magic-trace's fixtures.
    let ocaml = fixtures::fixtures_dir().join("magic-trace/ocaml_exceptions_traps/input.perf");
    let out = dir.join("ocaml.fxt");
    decode(&ocaml, &out, &[]);
    let n = names(&out);
    assert!(n.iter().any(|x| x == "Raise_test.raise_after"), "{n:?}");
    assert!(
        !n.iter().any(|x| x.starts_with("camlRaise_test__")),
        "{n:?}"
    );
    decode(&ocaml, &out, &["--no-demangle"]);
    assert!(names(&out)
        .iter()
        .any(|x| x == "camlRaise_test__raise_after_265"));

    // Rust v0 symbols as perf prints them when it cannot demangle them.
    let text = "\
1/1 1.000000000: 1 branches:uH:   call  401000 main+0x10 (/x) =>  402000 _RNvCs1234_4demo7compute+0x0 (/x)
1/1 1.000000100: 1 branches:uH:   return  402010 _RNvCs1234_4demo7compute+0x10 (/x) =>  401015 main+0x15 (/x)
";
    let rust = dir.join("rust.perf");
    std::fs::write(&rust, text).expect("write");
    let out = dir.join("rust.fxt");
    decode(&rust, &out, &[]);
    let n = names(&out);
    assert!(n.iter().any(|x| x == "demo::compute"), "{n:?}");
}
