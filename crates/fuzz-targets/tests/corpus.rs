//! Replays the committed seed corpus of every fuzz target (`fuzz/corpus/TARGET`) through
//! the target's body on the stable toolchain, so CI covers what fuzzing found without
//! needing nightly.

use std::path::Path;

/// Runs `exercise` on every file of `fuzz/corpus/TARGET`, naming the file that panics.
fn replay(target: &str) {
    let exercise = ptscope_fuzz_targets::TARGETS
        .iter()
        .find(|(n, _)| *n == target)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target {target}"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        eprintln!(
            "SKIPPED: no {} (crate built outside the repository)",
            dir.display()
        );
        return;
    };
    let mut n = 0;
    for e in entries {
        let path = e.expect("readable corpus directory").path();
        let data = std::fs::read(&path).expect("readable corpus file");
        let r = std::panic::catch_unwind(|| exercise(&data));
        assert!(r.is_ok(), "{} panicked", path.display());
        n += 1;
    }
    assert!(n > 0, "{} is empty", dir.display());
}

#[test]
fn perf_script_parser_corpus_replays_without_panics() {
    replay("perf_script_parser");
}

#[test]
fn fxt_reader_corpus_replays_without_panics() {
    replay("fxt_reader");
}

#[test]
fn memtrace_reader_corpus_replays_without_panics() {
    replay("memtrace_reader");
}

#[test]
fn dlfilter_records_corpus_replays_without_panics() {
    replay("dlfilter_records");
}

#[test]
fn elf_symbols_corpus_replays_without_panics() {
    replay("elf_symbols");
}

#[test]
fn perf_map_corpus_replays_without_panics() {
    replay("perf_map");
}

#[test]
fn block_log_corpus_replays_without_panics() {
    replay("block_log");
}
