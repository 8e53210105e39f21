//! Replays the committed seed corpus of the `dlfilter_records` fuzz target
//! (`fuzz/corpus/dlfilter_records`, see docs/fuzzing.md) on the stable toolchain, with the target's
//! own checks, so CI covers what fuzzing found without needing nightly.

use ptscope_dlfilter_reader::RecordReader;
use std::io::BufReader;
use std::path::Path;

/// The fuzz target's body (`fuzz/fuzz_targets/dlfilter_records.rs`): keep the two alike.
fn exercise_dlfilter_records(data: &[u8]) {
    // The first byte picks the read-buffer size, so records both lie wholly in the
    // buffer (converted in place) and straddle it (copied out), and its top bit
    // whether the reader first waits for the hello record (as `DlfilterScript` does).
    let (cap, wait, input) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c & 0x7f) + 1, c & 0x80 != 0, rest),
        None => (1, false, data),
    };
    let mut r = RecordReader::new(BufReader::with_capacity(cap, input));
    let mut errors = u32::from(wait && r.wait_for_hello().is_err());
    let mut events = 0u64;
    loop {
        match r.next_event() {
            Ok(Some(_)) => events += 1,
            Ok(None) => break,
            Err(_) => errors += 1,
        }
        // An error is returned once (by `wait_for_hello` or here), and the events
        // decoded before it still come out.
        assert!(errors <= 1);
    }
    assert!(r.is_finished());
    assert_eq!(r.stats().events, events);
    // Every event needs at least a few bytes of input (a record header or a line).
    assert!(events <= input.len() as u64);
    let _ = r.take_strings();
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
fn dlfilter_records_corpus_replays_without_panics() {
    replay("dlfilter_records", exercise_dlfilter_records);
}
