//! Real C++ and Rust programs: demangled names, lookup by demangled name, runtime addresses
//! and DWARF positions.

mod common;

use std::process::Command;

use common::{line_of, run, tool, Running, TempDir};
use ptscope_symbols::{MappedFile, Process};

const CPP_SRC: &str = r#"#include <cstdio>
namespace geo {
struct Shape {
    __attribute__((noinline)) int area(int k) const { return k * side; } // AREA_DEF
    int side = 3;
};
__attribute__((noinline)) int scale(int v, double f) { return (int)(v * f); } // SCALE_DEF
template <typename T> __attribute__((noinline)) T twice(T v) { return v + v; }
}
int main() {
    geo::Shape s;
    volatile int r = s.area(2) + geo::scale(3, 1.5) + geo::twice<long>(4);
    (void)r;
    std::printf("scale %p\n", (void *)&geo::scale);
    std::printf("twice %p\n", (void *)&geo::twice<long>);
    std::printf("ready\n");
    std::fflush(stdout);
    while (std::getchar() != EOF) {}
}
"#;

#[test]
fn cpp_demangled_names_and_addresses() {
    let Some(gxx) = tool("g++") else { return };
    let dir = TempDir::new("cpp");
    let src = dir.write("shapes.cpp", CPP_SRC);
    let exe = dir.path().join("shapes");
    run(Command::new(gxx)
        .args(["-g", "-O0", "-o"])
        .arg(&exe)
        .arg(&src));

    let file = MappedFile::open(&exe).unwrap();
    let elf = file.elf().unwrap();
    let syms = elf.symbols().unwrap();
    let scale = syms.lookup("_Z5scaleid").err().map(|_| ());
    assert!(
        scale.is_some(),
        "mangled name is namespaced, so this one must not exist"
    );
    let by_full = syms.lookup("geo::scale(int, double)").unwrap();
    assert_eq!(by_full.name(), "_ZN3geo5scaleEid");
    assert_eq!(by_full.demangled(), "geo::scale(int, double)");
    assert_eq!(by_full.short_name(), "geo::scale");
    let by_short = syms.lookup("geo::scale").unwrap();
    assert_eq!(by_short.address(), by_full.address());
    let by_raw = syms.lookup("_ZN3geo5scaleEid").unwrap();
    assert_eq!(by_raw.address(), by_full.address());
    let area = syms.lookup("geo::Shape::area").unwrap();
    assert_eq!(area.demangled(), "geo::Shape::area(int) const");
    let twice = syms.lookup("long geo::twice<long>(long)").unwrap();
    assert_eq!(twice.short_name(), "long geo::twice<long>");
    let e = syms.lookup("geo::scal").unwrap_err().to_string();
    assert!(e.contains("did you mean `geo::scale`"), "{e}");

    let lines = elf.line_table().unwrap();
    let pos = lines.positions([by_full.address(), area.address()]);
    assert_eq!(
        pos[&by_full.address()].line as u64,
        line_of(CPP_SRC, "SCALE_DEF")
    );
    assert_eq!(
        pos[&area.address()].line as u64,
        line_of(CPP_SRC, "AREA_DEF")
    );

    let running = Running::start(&exe);
    let p = Process::open(running.pid()).unwrap();
    assert_eq!(
        p.runtime_address(&elf, by_full.address()).unwrap(),
        running.addr("scale")
    );
    assert_eq!(
        p.resolve("geo::scale").unwrap().runtime_address,
        running.addr("scale")
    );
    assert_eq!(
        p.runtime_address(&elf, twice.address()).unwrap(),
        running.addr("twice")
    );
}

const RUST_SRC: &str = r#"
mod engine {
    #[inline(never)]
    pub fn ignite(x: u64) -> u64 { // IGNITE_DEF
        std::hint::black_box(x) * 2
    }
    pub struct Gear(pub u64);
    impl Gear {
        #[inline(never)]
        pub fn turn(&self) -> u64 { self.0 + 1 } // TURN_DEF
    }
}
fn main() {
    let v = engine::ignite(3) + engine::Gear(4).turn();
    std::hint::black_box(v);
    println!("ignite {:#x}", engine::ignite as usize);
    println!("turn {:#x}", engine::Gear::turn as usize);
    println!("ready");
    let mut s = String::new();
    while std::io::stdin().read_line(&mut s).map(|n| n > 0).unwrap_or(false) {}
}
"#;

#[test]
fn rust_legacy_and_v0_demangling() {
    let Some(rustc) = tool("rustc") else { return };
    let dir = TempDir::new("rust");
    let src = dir.write("motor.rs", RUST_SRC);
    // Stable rustc only lets us pick v0; the default is legacy (checked loosely, in case
    // the default changes).
    for mangling in ["default", "v0"] {
        let exe = dir.path().join(format!("motor_{mangling}"));
        run(Command::new(&rustc)
            .args(["-g", "-C", "opt-level=0", "--crate-name", "motor"])
            .args((mangling == "v0").then_some("-Csymbol-mangling-version=v0"))
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .env_remove("RUSTC_WRAPPER"));
        let file = MappedFile::open(&exe).unwrap();
        let elf = file.elf().unwrap();
        let syms = elf.symbols().unwrap();
        let ignite = syms.lookup("motor::engine::ignite").unwrap();
        let n = ignite.name();
        assert!(
            n.starts_with("_R") || (mangling == "default" && n.starts_with("_ZN")),
            "{n}"
        );
        assert_eq!(ignite.demangled(), "motor::engine::ignite");
        let turn = syms
            .lookup("<motor::engine::Gear>::turn")
            .or_else(|_| syms.lookup("motor::engine::Gear::turn"));
        let turn = turn.unwrap_or_else(|e| panic!("{mangling}: {e}"));

        let lines = elf.line_table().unwrap();
        let pos = lines.position(ignite.address()).unwrap();
        assert!(
            pos.file.as_deref().is_some_and(|f| f.ends_with("motor.rs")),
            "{pos:?}"
        );
        assert_eq!(pos.line as u64, line_of(RUST_SRC, "IGNITE_DEF"));
        assert_eq!(
            lines.position(turn.address()).unwrap().line as u64,
            line_of(RUST_SRC, "TURN_DEF")
        );

        let running = Running::start(&exe);
        let p = Process::open(running.pid()).unwrap();
        assert_eq!(
            p.runtime_address(&elf, ignite.address()).unwrap(),
            running.addr("ignite")
        );
        assert_eq!(
            p.runtime_address(&elf, turn.address()).unwrap(),
            running.addr("turn")
        );
    }
}
