//! The writer stays valid past every table and size limit of the format.

use ptscope_fxt::check::validate_bytes;
use ptscope_fxt::reader::{self, ArgValue as R, Record};
use ptscope_fxt::{format, Arg, ArgValue as W, FxtWriter};

/// Every non-large record header's size, to prove nothing reached 4096 words.
fn max_record_words(bytes: &[u8]) -> u64 {
    let mut max = 0;
    let mut pos = 0;
    while pos + 8 <= bytes.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[pos..pos + 8]);
        let words = (u64::from_le_bytes(w) >> 4) & 0xfff;
        assert!(words > 0);
        max = max.max(words);
        pos += words as usize * 8;
    }
    assert_eq!(pos, bytes.len());
    max
}

#[test]
fn forty_thousand_names_and_three_hundred_threads_round_trip() {
    const NAMES: usize = 40_500;
    const THREADS: u32 = 320;
    let mut w = FxtWriter::new(Vec::new());
    let mut threads = Vec::new();
    for i in 0..THREADS {
        let pid = 1 + i / 10;
        let tid = 1000 + i;
        w.thread_object(tid, pid, &format!("thread {i}"));
        threads.push((w.thread(pid, tid), pid, tid));
    }
    // Expected (pid, tid, name, arg value) per event, in file order.
    let mut expected = Vec::new();
    let mut name = String::new();
    let mut value = String::new();
    for i in 0..NAMES {
        // Reuse old names now and then so evicted strings are re-registered.
        let n = if i % 7 == 3 { (i * 31) % (i + 1) } else { i };
        name.clear();
        name.push_str(&format!("symbol_{n}_{}", "z".repeat(n % 13)));
        value.clear();
        value.push_str(&format!("file_{}.rs", n % 50_000));
        let (t, pid, tid) = threads[(i * 17) % threads.len()];
        let ts = i as u64;
        w.complete(t, "", &name, ts, ts, &[Arg::new("file", W::Str(&value))]);
        expected.push((u64::from(pid), u64::from(tid), name.clone(), value.clone()));
    }
    let stats = w.stats().clone();
    let bytes = w.finish().unwrap();
    assert!(stats.string_evictions > 0, "{stats:?}");
    assert!(stats.thread_evictions > 0, "{stats:?}");

    let events = reader::read_events(&bytes).unwrap();
    assert_eq!(events.len(), expected.len());
    for (i, (e, (pid, tid, name, value))) in events.iter().zip(&expected).enumerate() {
        assert_eq!((e.pid, e.tid), (*pid, *tid), "event {i}");
        assert_eq!(e.name, name, "event {i}");
        assert_eq!(e.args.get("file"), Some(R::Str(value)), "event {i}");
    }
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.threads.len(), THREADS as usize);
    assert_eq!(report.thread_names.len(), THREADS as usize);
    assert!(report.names.len() > 32_767, "{}", report.names.len());
    // Table indexes really were reused: some index was registered twice.
    let mut seen = vec![0u32; 32_768];
    for r in reader::Reader::new(&bytes) {
        if let Ok(Record::String { index, .. }) = r {
            seen[usize::from(index)] += 1;
        }
    }
    assert!(seen.iter().any(|&c| c > 1));
    assert_eq!(seen[0], 0, "index 0 is never registered");
}

#[test]
fn hundred_thousand_byte_names_are_truncated_at_a_char_boundary() {
    // One ASCII byte, then 2-byte chars: byte 32 000 falls inside a char.
    let long = format!("a{}", "é".repeat(50_000));
    assert_eq!(long.len(), 100_001);
    let mut w = FxtWriter::new(Vec::new());
    w.process(1, &long);
    let t = w.thread(1, 2);
    w.begin(t, &long, &long, 0, &[Arg::new(&long, W::InlineStr(&long))]);
    w.end(t, &long, &long, 1, &[Arg::new("s", W::Str(&long))]);
    let stats = w.stats().clone();
    let bytes = w.finish().unwrap();
    // Kernel object name, the interned copy (shared by category, name and arg
    // names) and the inline value.
    assert_eq!(stats.truncated_strings, 3, "{stats:?}");
    assert!(max_record_words(&bytes) < 4096);

    let cut = &long[..31_999];
    let records = reader::read_all(&bytes).unwrap();
    let mut checked = 0;
    for r in &records {
        match r {
            Record::KernelObject(k) => {
                assert_eq!(k.name, cut);
                checked += 1;
            }
            Record::Event(e) => {
                assert_eq!(e.name, cut);
                assert_eq!(e.category, cut);
                let arg_name = if checked == 1 { cut } else { "s" };
                assert_eq!(e.args[0].name, arg_name);
                assert!(matches!(e.args[0].value, R::Str(s) if s == cut));
                checked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(checked, 3);
    assert!(validate_bytes(&bytes).is_ok());
}

#[test]
fn many_long_inline_strings_still_fit_one_record() {
    let values: Vec<String> = (0..15)
        .map(|i| format!("{i}{}", "v".repeat(30_000)))
        .collect();
    let args: Vec<Arg<'_>> = values
        .iter()
        .map(|v| Arg::new("k", W::InlineStr(v)))
        .collect();
    let mut w = FxtWriter::new(Vec::new());
    let t = w.thread(1, 1);
    w.instant(t, "", "big", 0, &args);
    let bytes = w.finish().unwrap();
    assert!(max_record_words(&bytes) < 4096);
    let ev = reader::read_events(&bytes).unwrap();
    let got: Vec<_> = ev[0].args.iter().map(|a| a.value).collect();
    let want: Vec<_> = values.iter().map(|v| R::Str(v)).collect();
    assert_eq!(got, want);
}

#[test]
fn twenty_args_keep_the_first_fifteen() {
    let names: Vec<String> = (0..20).map(|i| format!("arg{i}")).collect();
    let args: Vec<Arg<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Arg::new(n, W::Int(i as i64)))
        .collect();
    let mut w = FxtWriter::new(Vec::new());
    let t = w.thread(1, 1);
    w.begin(t, "", "f", 0, &args);
    w.end(t, "", "f", 1, &args);
    w.process(1, "p");
    w.kernel_object(format::object::PROCESS, 2, "q", &args);
    assert_eq!(w.stats().dropped_args, 15);
    let bytes = w.finish().unwrap();
    let records = reader::read_all(&bytes).unwrap();
    let mut seen = 0;
    for r in records {
        let args = match r {
            Record::Event(e) => e.args,
            Record::KernelObject(k) if k.koid == 2 => k.args,
            _ => continue,
        };
        seen += 1;
        let got: Vec<_> = args.iter().map(|a| (a.name, a.value)).collect();
        let want: Vec<_> = (0..15)
            .map(|i| (names[i].as_str(), R::Int32(i as i32)))
            .collect();
        assert_eq!(got, want);
    }
    assert_eq!(seen, 3);
}

#[test]
fn truncate_utf8_never_splits_a_char() {
    let s = "a€b"; // € is 3 bytes
    assert_eq!(ptscope_fxt::truncate_utf8(s, 10), s);
    assert_eq!(ptscope_fxt::truncate_utf8(s, 4), "a€");
    assert_eq!(ptscope_fxt::truncate_utf8(s, 3), "a");
    assert_eq!(ptscope_fxt::truncate_utf8(s, 1), "a");
    assert_eq!(ptscope_fxt::truncate_utf8(s, 0), "");
}

/// A writer over a sink that fails after some bytes must report, not panic.
#[test]
fn io_errors_are_reported_by_finish() {
    struct Failing(usize);
    impl std::io::Write for Failing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("disk full"));
            }
            let n = buf.len().min(self.0);
            self.0 -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = FxtWriter::new(Failing(100_000));
    let t = w.thread(1, 1);
    for i in 0..100_000u64 {
        w.instant(t, "", "x", i, &[]);
    }
    assert!(
        w.io_error().is_some(),
        "the buffer was flushed past the limit"
    );
    let err = w.finish().err().expect("finish reports the error");
    assert_eq!(err.to_string(), "disk full");
}

/// An end closes its begin by the token the begin returned; once the name's slot has been
/// given to another string (eviction) or forgotten (a fragment cut), the token is stale
/// and the end must register the name again rather than reuse the slot's new text.
#[test]
fn an_end_by_a_stale_token_still_names_its_begin() {
    let mut w = FxtWriter::new(Vec::new());
    w.thread_object(2, 1, "main");
    let t = w.thread(1, 2);
    let outer = w.begin_token(t, "", "outer_function", 0, &[]);
    let inner = w.begin_token(t, "", "inner_function", 1, &[]);
    // Fill the table twice over so both slots go to other names.
    let mut name = String::new();
    for i in 0..70_000u64 {
        name.clear();
        name.push_str(&format!("filler_{i}"));
        w.instant(t, "", &name, 2 + i, &[]);
    }
    w.end_token(t, "", inner, "inner_function", 80_000, &[]);
    // A fresh token survives a cut only as text: the next fragment registers it again.
    let again = w.begin_token(t, "", "again", 80_001, &[]);
    w.cut();
    w.end_token(t, "", again, "again", 80_002, &[]);
    w.end_token(t, "", outer, "outer_function", 80_003, &[]);
    let stats = w.stats().clone();
    let bytes = w.finish().unwrap();
    assert!(stats.string_evictions > 32_767, "{stats:?}");
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    let ends: Vec<(String, u64)> = reader::read_events(&bytes)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == reader::EventKind::End)
        .map(|e| (e.name.to_string(), e.timestamp))
        .collect();
    assert_eq!(
        ends,
        [
            ("inner_function".to_string(), 80_000),
            ("again".to_string(), 80_002),
            ("outer_function".to_string(), 80_003)
        ]
    );
}

/// An interned argument that is the event's name itself (the same text at the same
/// address: a frame's `symbol`) takes the name's index without a lookup; the bytes are
/// those of the same argument given as a copy of the text (looked up), whether the
/// name came by text or by a token, fresh, stale or cut, and another text of the same
/// length at another address is still its own string.
#[test]
fn an_argument_that_is_the_name_writes_what_a_copy_of_it_writes() {
    let write = |same_place: bool| {
        let mut w = FxtWriter::new(Vec::new());
        let t = w.thread(1, 2);
        let names: Vec<String> = (0..40_000).map(|i| format!("function_{i}")).collect();
        let mut tokens = vec![ptscope_fxt::NameToken::default(); names.len()];
        for round in 0..3u64 {
            for (i, name) in names.iter().enumerate() {
                let copy = name.clone();
                let value = if same_place { name.as_str() } else { &copy };
                // Same length, other text, other place: never the name's index.
                let other = format!("{:>width$}", "x", width = name.len());
                let args = [
                    Arg::new("symbol", W::Str(value)),
                    Arg::new("other", W::Str(&other)),
                ];
                let time = round * 100_000 + i as u64;
                tokens[i] = if i % 3 == 0 {
                    w.begin_token(t, "", name, time, &args)
                } else {
                    w.begin_by_token(t, "", tokens[i], name, time, &args)
                };
                w.end(t, "", name, time, &[]);
                if i % 10_000 == 0 {
                    w.cut();
                }
            }
        }
        w.finish().unwrap()
    };
    let (same, copied) = (write(true), write(false));
    assert!(same == copied, "the bytes differ");
    let events = reader::read_events(&same).unwrap();
    assert_eq!(events.len(), 6 * 40_000);
    for e in events.iter().filter(|e| e.kind == reader::EventKind::Begin) {
        let args: Vec<_> = e.args.iter().map(|a| (a.name, a.value)).collect();
        assert_eq!(args[0], ("symbol", R::Str(e.name)), "{e:?}");
        assert!(
            matches!(args[1], ("other", R::Str(s)) if s.trim() == "x"),
            "{e:?}"
        );
    }
}

static ADDRESS: &str = "address";
static SYMBOL: &str = "symbol";

/// Arguments named by [`FxtWriter::frequent_arg_names`] are written by their slot's
/// token; the bytes are those of a writer that looks every name up by text, through
/// the names' slots being evicted (long stretches without them), fragments cut, and
/// the same text given as a copy at another address.
#[test]
fn frequent_argument_names_write_what_names_by_text_write() {
    let write = |frequent: bool| {
        let mut w = FxtWriter::new(Vec::new());
        if frequent {
            w.frequent_arg_names(&[ADDRESS, SYMBOL]);
        }
        let t = w.thread(1, 2);
        let copy = String::from("symbol");
        let mut filler = String::new();
        let mut time = 0;
        for round in 0..4u64 {
            for i in 0..2_000u64 {
                let name = format!("function_{}", (i * 7 + round) % 1_500);
                // Every tenth begin names its symbol by a copy (another address).
                let symbol = if i % 10 == 0 { copy.as_str() } else { SYMBOL };
                let args = [
                    Arg::new(ADDRESS, W::Pointer(0x1000 + i)),
                    Arg::new(symbol, W::Str(&name)),
                ];
                w.begin(t, "", &name, time, &args);
                w.end(t, "", &name, time + 1, &[]);
                time += 2;
            }
            // A stretch of other names long enough to take every slot, the
            // arguments' names' included (the clock sweeps twice to evict a used slot).
            for i in 0..70_000u64 {
                filler.clear();
                filler.push_str(&format!("filler_{round}_{i}"));
                w.instant(t, "", &filler, time, &[]);
                time += 1;
            }
            if round == 1 {
                w.cut();
            }
        }
        let stats = w.stats().clone();
        (w.finish().unwrap(), stats)
    };
    let ((by_token, stats), (by_text, _)) = (write(true), write(false));
    assert!(stats.string_evictions > 6 * 32_767, "{stats:?}");
    assert!(by_token == by_text, "the bytes differ");
    // The names' slots really went stale: each was registered again in every round.
    let registered = |text: &str| {
        reader::Reader::new(&by_token)
            .filter(|r| matches!(r, Ok(Record::String { value, .. }) if *value == text))
            .count()
    };
    assert!(registered("address") >= 4, "{}", registered("address"));
    assert!(registered("symbol") >= 4, "{}", registered("symbol"));
    let report = validate_bytes(&by_token);
    assert!(report.is_ok(), "{report}");
    let begins = reader::read_events(&by_token)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == reader::EventKind::Begin)
        .count();
    assert_eq!(begins, 8_000);
}
