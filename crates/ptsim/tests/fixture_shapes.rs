//! The shapes of magic-trace's real Intel PT fixtures reappear in simulated recordings of
//! similar programs: a hello world's start in `ld.so`, an overflow inside `memmove`, and
//! an OCaml raise.

use ptsim::pt::Faults;
use ptsim::testing::{compile, record, scratch_dir, symbols, tools_available};
use ptsim::truth::StepKind;
use ptsim::{simulate, write_outputs, SimConfig};
use std::path::Path;

/// perf script's text with symbols, the way magic-trace reads it.
fn perf_text(perf_data: &Path) -> Vec<String> {
    let out = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(perf_data)
        .args([
            "--ns",
            "--itrace=bep",
            "-F",
            "pid,tid,time,flags,ip,addr,sym,symoff,synth,dso,event,period",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("branches:") || l.contains("instruction trace error"))
        .map(str::to_string)
        .collect()
}

#[test]
fn hello_world_starts_in_the_dynamic_loader() {
    if !tools_available(&["qemu-x86_64", "perf", "cc"]) {
        return;
    }
    let tmp = scratch_dir("hello").unwrap();
    let dir = tmp.path().to_owned();
    let exe = compile(
        &dir,
        "hello",
        "hello.c",
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
        &["cc", "-O1"],
    )
    .unwrap();
    record(&dir, &[&exe], &SimConfig::default()).unwrap();
    let lines = perf_text(&dir.join("perf.data"));
    // As in the hello_world_userspace fixture: tracing starts at ld.so's _start, which
    // calls _dl_start.
    assert!(
        lines[0].contains("tr strt")
            && lines[0].contains("=>")
            && lines[0].contains("_start+0x0")
            && lines[0].contains("ld-linux"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("call")
            && lines[1].contains("_start+0x3")
            && lines[1].contains("_dl_start+0x0"),
        "{}",
        lines[1]
    );
    // ... and ends with the exit_group syscall.
    let last = lines.last().unwrap();
    assert!(
        last.contains("tr end") && last.contains("syscall"),
        "{last}"
    );
}

#[test]
fn overflow_inside_memmove() {
    if !tools_available(&["qemu-x86_64", "perf", "cc"]) {
        return;
    }
    let tmp = scratch_dir("memmove").unwrap();
    let dir = tmp.path().to_owned();
    let src = r#"
#include <string.h>
#include <stdio.h>
static char buf[1 << 16];
int main(void) {
  for (int i = 0; i < 20; i++) memmove(buf + (i & 7), buf + 64, sizeof buf - 128);
  printf("%d\n", buf[3]);
  return 0;
}
"#;
    let exe = compile(
        &dir,
        "mm",
        "mm.c",
        src,
        &["cc", "-O1", "-fno-builtin", "-no-pie"],
    )
    .unwrap();
    let out = record(&dir, &[&exe], &SimConfig::default()).unwrap();
    // memmove is main's call out to libc through the PLT stub's indirect jump; overflow a
    // few branches into it.
    let main = symbols(&exe).unwrap()["main"];
    let steps = &out.sim.traces[0].steps;
    let log = ptsim::blocklog::BlockLog::read(&dir.join("ptsim-blocks.log")).unwrap();
    let entry = steps
        .windows(2)
        .position(|w| {
            w[0].kind == StepKind::Call
                && (main..main + 0x80).contains(&w[0].from)
                && w[1].kind == StepKind::IndirectJmp
                // Once bound: the PLT jumps straight into libc, not to the lazy resolver.
                && !(0x40_0000..0x50_0000).contains(&w[1].to)
        })
        .unwrap();
    let at = entry + 4;
    let cfg = SimConfig {
        main_faults: Some(Faults {
            overflows: vec![(at, 2)],
            corruptions: vec![],
        }),
        ..SimConfig::default()
    };
    let sim = simulate(&log, "mm", &cfg);
    let sub = dir.join("overflow");
    std::fs::create_dir_all(&sub).unwrap();
    write_outputs(&sim, &sub.join("perf.data"), false).unwrap();
    let lines = perf_text(&sub.join("perf.data"));
    // As in the memmove_decode_error fixture: a call into memmove, an overflow error,
    // then tracing restarts inside memmove.
    let err = lines
        .iter()
        .position(|l| l.contains("Overflow packet"))
        .expect("overflow reported");
    assert!(
        lines[err + 1].contains("tr strt") && lines[err + 1].contains("memmove"),
        "{}",
        lines[err + 1]
    );
    assert!(
        lines[..err]
            .iter()
            .rev()
            .take(5)
            .any(|l| l.contains("call") && l.contains("memmove")),
        "{:#?}",
        &lines[err.saturating_sub(5)..err]
    );
}

#[test]
fn ocaml_raise_jumps_to_the_handler() {
    if !tools_available(&["qemu-x86_64", "perf", "ocamlopt"]) {
        return;
    }
    let tmp = scratch_dir("raise").unwrap();
    let dir = tmp.path().to_owned();
    let src = "exception E\nlet rec raise_after n = if n = 0 then raise E else 1 + raise_after (n - 1)\nlet () = for _ = 1 to 3 do (try ignore (raise_after 10) with E -> ()) done\n";
    let exe = compile(&dir, "raise_test", "raise_test.ml", src, &["ocamlopt"]).unwrap();
    record(&dir, &[&exe], &SimConfig::default()).unwrap();
    let lines = perf_text(&dir.join("perf.data"));
    // As in the ocaml_exceptions fixtures: ten nested calls, then one jump from the
    // innermost frame straight to the handler in the entry function, with no returns.
    // (perf demangles camlRaise_test__raise_after_NN to Raise_test.raise_after_NN.)
    let raises: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.contains(" jmp ")
                && l.contains("Raise_test.raise_after")
                && l.split("=>")
                    .nth(1)
                    .is_some_and(|t| t.contains("Raise_test.entry"))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(raises.len(), 3, "one raise per iteration");
    for &i in &raises {
        let calls = lines[..i]
            .iter()
            .rev()
            .take_while(|l| !l.contains("return"))
            .filter(|l| {
                l.contains("call")
                    && l.split("=>")
                        .nth(1)
                        .is_some_and(|t| t.contains("Raise_test.raise_after"))
            })
            .count();
        assert!(calls >= 10, "{calls} calls before the raise");
    }
}
