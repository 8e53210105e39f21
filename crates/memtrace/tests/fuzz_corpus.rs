//! Replays the committed seed corpus of the `memtrace_reader` fuzz target
//! (`fuzz/corpus/memtrace_reader`, see docs/fuzzing.md) on the stable toolchain, with the target's
//! own checks, so CI covers what fuzzing found without needing nightly.

use memtrace::{tools, Reader};
use std::path::Path;

/// The fuzz target's body (`fuzz/fuzz_targets/memtrace_reader.rs`): keep the two alike.
fn exercise_memtrace_reader(data: &[u8]) {
    if let Ok(r) = Reader::from_bytes(data) {
        let mut r = r.parse_backtraces(false);
        while let Ok(Some(_)) = r.next_event() {}
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::dump(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::flamegraph(&mut r, &mut std::io::sink());
    }
    if let Ok(r) = Reader::from_bytes(data) {
        let _ = tools::identify(r, "fuzz", &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::hotspots(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::subsample(&mut r, std::io::sink(), &Default::default());
    }
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
fn memtrace_reader_corpus_replays_without_panics() {
    replay("memtrace_reader", exercise_memtrace_reader);
}
