//! Compiles the filter crate's source straight into a cdylib in OUT_DIR, so the reader
//! can embed it with `include_bytes!` without a nested cargo invocation.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let src = manifest.join("../dlfilter/src/lib.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // The whole folder: the filter's modules are files beside `lib.rs`.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../dlfilter/src").display()
    );
    let status = Command::new(rustc)
        .arg(&src)
        .args(["--crate-type", "cdylib", "--crate-name", "ptscope_dlfilter"])
        .args(["--edition", "2021"])
        .args([
            "-C",
            "opt-level=3",
            "-C",
            "panic=abort",
            "-C",
            "debuginfo=0",
        ])
        .args(["-C", "strip=debuginfo", "-C", "codegen-units=1"])
        .arg("--out-dir")
        .arg(&out)
        .status()
        .expect("could not run rustc to build the dlfilter");
    assert!(status.success(), "building the dlfilter with rustc failed");
}
