//! Inlined calls read from DWARF ([`InlineInfo`]) on a C program gcc inlined into itself,
//! checked against binutils' `addr2line -i -f` (what perf runs for the same answer), from
//! the binary's own DWARF and from a separate debug file found by `.gnu_debuglink`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::{run, tool, TempDir};
use ptscope_symbols::{InlineInfo, MappedFile};

const SRC: &str = r#"
#include <stdlib.h>
static inline __attribute__((always_inline)) unsigned mix(unsigned x) {
    for (int i = 0; i < 50; i++) x = x * 2654435761u + (x >> 13);
    return x;
}
static inline __attribute__((always_inline)) unsigned step(unsigned x) {
    return mix(x) ^ mix(x + 1);
}
__attribute__((noinline)) unsigned work(unsigned n) {
    unsigned s = 0;
    for (unsigned i = 0; i < n; i++) s += step(i);
    return s;
}
int main(int argc, char **argv) { return (int)work(argc > 1 ? atoi(argv[1]) : 10); }
"#;

/// `work`'s link-time range.
fn work_range(exe: &Path) -> (u64, u64) {
    let f = MappedFile::open(exe).unwrap();
    let elf = f.elf().unwrap();
    let syms = elf.symbols().unwrap();
    let w = syms.lookup("work").unwrap();
    (w.address(), w.address() + w.size())
}

/// What `addr2line -i -f` says is inlined at each address, outermost first, without
/// the function itself (binutils prints innermost first, the function last).
fn addr2line(addr2line: &Path, exe: &Path, addrs: &[u64]) -> Vec<Vec<String>> {
    addrs
        .iter()
        .map(|a| {
            let out = Command::new(addr2line)
                .args(["-i", "-f", "-e"])
                .arg(exe)
                .arg(format!("{a:#x}"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            // Function and file:line lines alternate.
            let mut names: Vec<String> = text.lines().step_by(2).map(str::to_owned).collect();
            names.pop();
            names.reverse();
            names
        })
        .collect()
}

fn names_at(info: &InlineInfo, addrs: &[u64]) -> Vec<Vec<String>> {
    addrs
        .iter()
        .map(|&a| info.inlined_at(a).into_iter().map(|i| i.name).collect())
        .collect()
}

#[test]
fn inlined_calls_agree_with_addr2line_from_the_binary_and_a_debug_file() {
    let (Some(cc), Some(a2l), Some(objcopy)) = (tool("cc"), tool("addr2line"), tool("objcopy"))
    else {
        return;
    };
    let dir = TempDir::new("inlined");
    let src = dir.write("inl.c", SRC);
    let exe = dir.path().join("inl");
    run(Command::new(&cc)
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(&src));
    let (start, end) = work_range(&exe);
    let addrs: Vec<u64> = (start..end).collect();
    let info = InlineInfo::load(&exe)
        .unwrap()
        .expect("the binary has DWARF");
    let ours = names_at(&info, &addrs);
    assert_eq!(
        ours,
        addr2line(&a2l, &exe, &addrs),
        "against addr2line -i -f"
    );
    // `work` holds step, and step two copies of mix: each copy its own entry.
    let seen: BTreeSet<Vec<String>> = ours.iter().cloned().collect();
    assert!(
        seen.contains(&vec!["step".to_string(), "mix".to_string()]),
        "{seen:?}"
    );
    let mix_entries: BTreeSet<u64> = addrs
        .iter()
        .filter_map(|&a| info.inlined_at(a).get(1).map(|m| m.entry))
        .collect();
    assert!(mix_entries.len() >= 2, "copies of mix: {mix_entries:x?}");
    for &a in &addrs {
        for i in info.inlined_at(a) {
            assert!(
                (start..end).contains(&i.entry) && i.entry <= a,
                "{i:?} at {a:#x}"
            );
        }
    }
    // File offsets (as perf prints sampled frames) and back.
    let off = info.offset_of_address(start).unwrap();
    assert_eq!(info.address_of_offset(off), Some(start));

    // Stripped, with its DWARF in a debug file next to it (`.gnu_debuglink`): the same.
    let debug = dir.path().join("inl.debug");
    run(Command::new(&objcopy)
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug));
    let stripped = dir.path().join("inl-stripped");
    run(Command::new(&objcopy)
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&exe)
        .arg(&stripped));
    let info = InlineInfo::load(&stripped)
        .unwrap()
        .expect("the debug file has DWARF");
    assert_eq!(names_at(&info, &addrs), ours, "through the debug file");

    // Without DWARF anywhere: nothing known, no error.
    let bare = dir.path().join("inl-bare");
    run(Command::new(&objcopy)
        .arg("--strip-debug")
        .arg(&exe)
        .arg(&bare));
    assert!(InlineInfo::load(&bare).unwrap().is_none());
}
