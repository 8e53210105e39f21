//! Replays the committed seed corpus of the `fxt_reader` fuzz target
//! (`fuzz/corpus/fxt_reader`, see docs/fuzzing.md) on the stable toolchain, with the target's
//! own checks, so CI covers what fuzzing found without needing nightly.

use ptscope_fxt::{check, reader::Reader};
use std::path::Path;

/// The fuzz target's body (`fuzz/fuzz_targets/fxt_reader.rs`): keep the two alike.
fn exercise_fxt_reader(data: &[u8]) {
    let mut records = 0usize;
    for r in Reader::new(data) {
        records += 1;
        if r.is_err() {
            break;
        }
    }
    // Every record is at least one word, so the count is bounded by the input.
    assert!(records <= data.len() / 8 + 1);
    let _ = check::validate_bytes(data);
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
fn fxt_reader_corpus_replays_without_panics() {
    replay("fxt_reader", exercise_fxt_reader);
}
