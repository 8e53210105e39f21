//! Builds the shim over libipt (`csrc/oracle.c`) when libipt's header is installed
//! (Debian `libipt-dev`); without it the crate builds empty and its tests skip.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=csrc/oracle.c");
    println!("cargo:rustc-check-cfg=cfg(libipt)");
    let header = std::env::var_os("PTSCOPE_LIBIPT_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    if !header.join("intel-pt.h").exists() {
        println!("cargo:warning=libipt's header (intel-pt.h) is not installed: the libipt oracle is left out");
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let obj = out.join("oracle.o");
    let lib = out.join("libptscope_libipt_oracle.a");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let ok = Command::new(&cc)
        .args(["-c", "-O2", "-fPIC", "-Wall", "-Werror", "-I"])
        .arg(&header)
        .arg("csrc/oracle.c")
        .arg("-o")
        .arg(&obj)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot compile csrc/oracle.c");
    let _ = std::fs::remove_file(&lib);
    let ok = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .arg(&obj)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot archive the shim");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=ptscope_libipt_oracle");
    println!("cargo:rustc-link-lib=ipt");
    println!("cargo:rustc-cfg=libipt");
}
