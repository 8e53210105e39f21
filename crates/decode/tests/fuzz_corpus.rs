//! Replays the committed seed corpus of the `perf_script_parser` fuzz target
//! (`fuzz/corpus/perf_script_parser`, see docs/fuzzing.md) on the stable toolchain, with
//! the target's own checks, so CI covers what fuzzing found without needing nightly.

use ptscope_decode::Decoder;
use std::io::BufReader;
use std::path::Path;

/// The fuzz target's body (`fuzz/fuzz_targets/perf_script_parser.rs`): keep the two alike.
fn exercise_perf_script_parser(data: &[u8]) {
    let (cap, input) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c) + 1, rest),
        None => (1, data),
    };
    let mut decoder = Decoder::new(BufReader::with_capacity(cap, input));
    let mut events = 0u64;
    while let Ok(Some(_)) = decoder.next_event() {
        events += 1;
    }
    let stats = decoder.stats();
    assert_eq!(stats.bytes, input.len() as u64);
    assert_eq!(stats.events, events);
    assert!(stats.warnings <= stats.lines);
}

/// Runs `exercise` on every file of `fuzz/corpus/TARGET`, naming the file that panics.
fn replay(target: &str, exercise: fn(&[u8])) {
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
    replay("perf_script_parser", exercise_perf_script_parser);
}
