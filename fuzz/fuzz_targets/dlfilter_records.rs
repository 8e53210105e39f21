//! Fuzzes the reader of the dlfilter's byte stream (binary records mixed with perf's
//! own text): any bytes must give events, then at most one typed error — never a
//! panic, a hang or an allocation sized by a length field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ptscope_dlfilter_reader::RecordReader;
use std::io::BufReader;

fuzz_target!(|data: &[u8]| {
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
});
