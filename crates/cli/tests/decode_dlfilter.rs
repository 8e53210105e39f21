//! `ptscope decode --decoder dlfilter|text|auto` on a real recording made here: the
//! binary path and the text path give the same trace.

use std::process::Command;

fn have(name: &str) -> bool {
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

const PROG: &str = r#"volatile unsigned long sink;
__attribute__((noinline)) void leaf(unsigned long n) { for (unsigned long i = 0; i < n; i++) sink += i; }
__attribute__((noinline)) void middle(void) { for (int i = 0; i < 300; i++) leaf(100000); }
int main(void) { middle(); return 0; }
"#;

#[test]
fn dlfilter_and_text_paths_give_the_same_trace() {
    if !have("cc") || !have("perf") {
        return;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ptscope-dlf-cli-")
        .tempdir()
        .expect("temporary directory");
    let dir = tmp.path();
    std::fs::write(dir.join("prog.c"), PROG).expect("write");
    let exe = dir.join("prog");
    let o = Command::new("cc")
        .args(["-O0", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(dir.join("prog.c"))
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
            "4000",
            "-g",
            "-o",
        ])
        .arg(&data)
        .arg(&exe)
        .output()
        .expect("perf record");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let decode = |decoder: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_ptscope"))
            .args([
                "decode",
                "--quiet",
                "--format",
                "transcript",
                "-o",
                "-",
                "--decoder",
                decoder,
            ])
            .arg(&data)
            .output()
            .expect("ptscope");
        assert!(
            o.status.success(),
            "{decoder}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (text, _) = decode("text");
    let (binary, notice) = decode("dlfilter");
    let (auto, auto_notice) = decode("auto");
    assert!(
        text.contains("BEGIN leaf") && text.contains("BEGIN middle"),
        "{text}"
    );
    assert_eq!(binary, text);
    assert_eq!(auto, text);
    assert!(
        notice.is_empty() && auto_notice.is_empty(),
        "{notice}{auto_notice}"
    );
    // Nothing is written beside the input: perf loads the filter from a sealed memfd
    // (crates/dlfilter-reader/tests/filter_dir.rs).
    assert!(!std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().ends_with(".so")));
}
