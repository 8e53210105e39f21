//! Nothing in the input stops the decoder: bad lines become counted warnings and the
//! events around them survive.

mod common;

use common::{decode_all, read_fixture, FIXTURES};
use ptscope_decode::{Decoder, WarningKind, DEFAULT_KEPT_WARNINGS, MAX_LINE};
use ptscope_event::{Event, EventData, Kind};
use std::io::{self, BufRead, BufReader, Read};

#[path = "../../../tests/xorshift.rs"]
mod xorshift;
use xorshift::Rng;

/// Invariants that hold for any input.
fn check_invariants(input: &[u8]) -> (Vec<Event>, common::Decoded) {
    let (events, d) = decode_all(input);
    let s = d.stats();
    let newlines = input.iter().filter(|&&b| b == b'\n').count();
    let partial = usize::from(input.last().is_some_and(|&b| b != b'\n'));
    assert_eq!(s.lines as usize, newlines + partial);
    assert_eq!(s.bytes as usize, input.len());
    assert_eq!(s.events as usize, events.len());
    assert!(s.warnings <= s.lines);
    assert!(events.len() as u64 <= s.lines);
    (events, d)
}

#[test]
fn empty_and_blank_input() {
    for input in [&b""[..], b"\n", b"\n\n\n", b"   \n\t\n", b"\r\n"] {
        let (events, d) = check_invariants(input);
        assert!(events.is_empty());
        // A lone tab line is an orphan callchain line; everything else is blank.
        let want = u64::from(input == b"   \n\t\n");
        assert_eq!(d.stats().warnings, want, "{input:?}");
    }
}

#[test]
fn binary_garbage_is_warnings_not_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..20 {
        let len = 1 + rng.below(20_000);
        let input: Vec<u8> = (0..len)
            .map(|_| match rng.below(10) {
                0 => b'\n',
                1 => b'\t',
                2 => b' ',
                _ => rng.next() as u8,
            })
            .collect();
        let (_, d) = check_invariants(&input);
        assert!(d.stats().warnings > 0, "round {round}");
    }
}

/// Byte offsets at which a group (an event-producing header line) starts, with the
/// number of events that come before it.
fn group_starts(input: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut events = 0;
    for line in input.split_inclusive(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(line);
        if !text.trim().is_empty() && !text.starts_with('\t') {
            out.push((pos, events));
            if !text.contains(" psb: ") {
                events += 1;
            }
        }
        pos += line.len();
    }
    out
}

#[test]
fn every_truncation_keeps_the_complete_groups() {
    let mut chunks = Vec::new();
    for name in [
        "memmove_decode_error",
        "c_demo_sampling",
        "demo_with_branch_misses_and_cache_misses",
    ] {
        let input = read_fixture(name);
        // A few groups are enough to hit every kind of cut.
        let cut = input
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(25)
            .map_or(input.len(), |(i, _)| i + 1);
        chunks.push(input[..cut].to_vec());
    }
    // The cbr/psb lines live deep in this fixture; take them and their neighbours.
    let demo = read_fixture("demo_with_branch_misses_and_cache_misses");
    let text = String::from_utf8(demo).expect("UTF-8");
    let at = text.find(" cbr: ").expect("a cbr line");
    let start = text[..at].rfind('\n').map_or(0, |p| p + 1);
    let start = text[..start.saturating_sub(1)]
        .rfind('\n')
        .map_or(0, |p| p + 1);
    let end = text[at..]
        .match_indices('\n')
        .nth(3)
        .map_or(text.len(), |(p, _)| at + p + 1);
    chunks.push(text.as_bytes()[start..end].to_vec());

    for chunk in chunks {
        let (full, d) = decode_all(&chunk);
        assert_eq!(d.stats().warnings, 0);
        let starts = group_starts(&chunk);
        for k in 0..=chunk.len() {
            let (events, d) = check_invariants(&chunk[..k]);
            // Groups that start before the line holding the cut are intact... except the
            // last one before the cut, whose callchain may be cut short.
            let complete = starts
                .iter()
                .take_while(|(p, _)| *p < k)
                .last()
                .map_or(0, |&(_, n)| n);
            assert!(events.len() >= complete, "cut at {k}: {events:?}");
            assert_eq!(events[..complete], full[..complete], "cut at {k}");
            // Only the cut line itself can be malformed.
            assert!(d.stats().warnings <= 1, "cut at {k}: {:?}", d.warnings());
        }
    }
}

#[test]
fn lines_from_a_newer_perf_are_warnings_and_neighbours_survive() {
    let good_call =
        "1/1 10.000000001:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)";
    let good_ret =
        "1/1 10.000000009:  1  branches:uH:   return   7f18 b+0x8 (x.so) =>  7f05 a+0x5 (x.so)";
    let input = [
        good_call,
        // Unknown flag word and aux flags: kept, no kind.
        "1/1 10.000000002:  1  branches:uH:   call tele (xZ)  7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)",
        // A new event with no callchain and a payload we cannot read.
        "1/1 10.000000003:  1  quantum:  spin: up  charm: 3",
        // A new key in the error line: kept.
        " instruction trace error type 1 time 10.000000004 cpu 1 pid 1 tid 1 flux 9 ip 0x7f00 code 7: Overflow packet",
        // A header with a new leading field.
        "cpu=3 1/1 10.000000005:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)",
        "\tdeadbeef orphan+0x0 (x.so)",
        // A sample whose callchain has a line in a new format.
        "1/1 10.000000006: 250000 cpu-clock:u: ",
        "\t    7f10 b+0x0 (x.so)",
        "\t    <inlined> b_inner",
        "\t    7f05 a+0x5 (x.so)",
        "# a comment line",
        "1/1 10.000000007:  1  cbr:  cbr: 40 freq: ? MHz",
        "1/1 10.000000008:  1  ptwrite:   IP: 0 payload: 0xzz",
        good_ret,
    ]
    .join("\n");
    let (events, d) = check_invariants(input.as_bytes());
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            Event::Ok { data, .. } => match data {
                EventData::Trace { kind, .. } => format!("trace {kind:?}"),
                EventData::StackSample { callstack } => {
                    format!("sample {}", d.strings().stack(*callstack).len())
                }
                other => format!("{other:?}"),
            },
            Event::DecodeError { .. } => "error".to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "trace Some(Call)",
            "trace None",
            "error",
            "sample 2",
            "trace Some(Return)"
        ]
    );
    let w: Vec<(u64, WarningKind)> = d.warnings().iter().map(|w| (w.line, w.kind)).collect();
    // The unusable sample on line 3 is only known to be unusable when its group ends.
    let want = [
        (2, WarningKind::UnknownBranchFlags),
        (3, WarningKind::UnsupportedEvent),
        (4, WarningKind::UnknownTraceErrorField),
        (5, WarningKind::MalformedHeader),
        (9, WarningKind::MalformedFrame),
        (11, WarningKind::MalformedHeader),
        (12, WarningKind::MalformedCbr),
        (13, WarningKind::MalformedPtwrite),
    ];
    assert_eq!(w, want);
    // Line 5's header is malformed, so the orphan tab line after it is absorbed.
    assert_eq!(d.stats().warnings, 8);
}

#[test]
fn invalid_utf8_in_names_is_replaced() {
    let mut input = b"1/1 1.5:  1  branches:uH:   call   7f00 caf\xe9+0x1 (/lib/\xff.so) =>  7f10 ok+0x0 (x.so)\n".to_vec();
    input.extend_from_slice(b"1/1 1.6: 1 cycles:u: \n\t 7f10 \xc3\x28+0x0 (x)\n");
    let (events, d) = check_invariants(&input);
    assert_eq!(d.stats().warnings, 0);
    let Event::Ok {
        data: EventData::Trace { src, kind, .. },
        ..
    } = &events[0]
    else {
        panic!()
    };
    assert_eq!(*kind, Some(Kind::Call));
    let src = d.strings().location(*src);
    assert_eq!(d.strings().display(src.symbol), "caf\u{fffd}");
    assert_eq!(d.strings().get(src.dso.expect("dso")), "/lib/\u{fffd}.so");
    assert_eq!(events.len(), 2);
}

#[test]
fn overlong_lines_are_dropped_with_bounded_memory() {
    let good = "1/1 1.5:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)\n";
    let mut input = good.as_bytes().to_vec();
    input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
    input.push(b'\n');
    input.extend_from_slice(b"\t");
    input.extend(std::iter::repeat_n(b'y', MAX_LINE * 2));
    input.push(b'\n');
    input.extend_from_slice(good.as_bytes());
    // And an overlong final line without a newline.
    input.extend(std::iter::repeat_n(b'z', MAX_LINE + 1));
    let mut d = Decoder::new(BufReader::with_capacity(4096, &input[..]));
    let mut n = 0;
    while let Some(e) = d.next_event().expect("slice") {
        assert!(matches!(e, Event::Ok { .. }));
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(d.stats().lines, 5);
    let kinds: Vec<_> = d.warnings().iter().map(|w| (w.line, w.kind)).collect();
    assert_eq!(
        kinds,
        [
            (2, WarningKind::LineTooLong),
            (3, WarningKind::LineTooLong),
            (5, WarningKind::LineTooLong)
        ]
    );
    assert!(d.warnings()[0].text.starts_with("xxx"));
    assert!(d.warnings()[0].text.len() <= ptscope_decode::Warning::MAX_TEXT);
}

#[test]
fn warnings_are_all_counted_but_few_kept() {
    let mut input = String::new();
    for i in 0..100 {
        input += &format!("garbage {i}\n");
    }
    input += "1/1 1.5:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)\n";
    let mut d = Decoder::new(input.as_bytes());
    let mut events = 0;
    while d.next_event().expect("slice").is_some() {
        events += 1;
    }
    assert_eq!(events, 1);
    assert_eq!(d.stats().warnings, 100);
    assert_eq!(d.warnings().len(), DEFAULT_KEPT_WARNINGS);
    assert_eq!(d.warnings()[3].line, 4);
    assert_eq!(d.warnings()[3].text, "garbage 3");
    assert!(d.warnings()[3].to_string().contains("line 4"));
}

/// Yields its data, then fails.
struct Failing<'a>(&'a [u8], bool);

impl Read for Failing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() {
            if self.1 {
                return Ok(0);
            }
            self.1 = true;
            return Err(io::Error::other("disk on fire"));
        }
        let n = self.0.len().min(buf.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn io_errors_keep_the_events_read_before() {
    let text = "1/1 1.5:  1  branches:uH:   call   7f00 a+0x1 (x.so) =>  7f10 b+0x0 (x.so)\n1/1 1.6: 1 cycles:u: \n\t7f10 b+0x0 (x.so)\n";
    let reader: Box<dyn BufRead> = Box::new(BufReader::with_capacity(
        16,
        Failing(text.as_bytes(), false),
    ));
    let mut d = Decoder::new(reader);
    let mut got = Vec::new();
    let mut errors = 0;
    loop {
        match d.next_event() {
            Ok(Some(e)) => got.push(e),
            Ok(None) => break,
            Err(e) => {
                errors += 1;
                assert!(e.to_string().contains("disk on fire"));
            }
        }
    }
    assert_eq!(errors, 1);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(d.is_finished());
}

/// Mutation fuzzing in the normal test suite: fixture lines with random damage.
#[test]
fn random_mutations_of_fixtures_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for name in FIXTURES {
        let input = read_fixture(name);
        lines.extend(input.split(|&b| b == b'\n').take(200).map(<[u8]>::to_vec));
    }
    let tokens: [&[u8]; 12] = [
        b" => ",
        b"+0x",
        b"(",
        b")",
        b"[unknown]",
        b"\t",
        b"tr strt ",
        b"tr end  ",
        b"cbr: ",
        b" instruction trace error type 1 ",
        b"ffffffffffffffffff",
        b"\xff\xfe",
    ];
    let mut warned = 0;
    for _ in 0..1500 {
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let mut line = lines[rng.below(lines.len())].clone();
            for _ in 0..rng.below(4) {
                let at = rng.below(line.len() + 1);
                match rng.below(4) {
                    0 => line.insert(at, rng.next() as u8),
                    1 if at < line.len() => {
                        line.remove(at);
                    }
                    2 => line.truncate(at),
                    _ => {
                        let t = tokens[rng.below(tokens.len())];
                        line.splice(at..at, t.iter().copied());
                    }
                }
            }
            input.extend_from_slice(&line);
            input.push(b'\n');
        }
        let (_, d) = check_invariants(&input);
        warned += usize::from(d.stats().warnings > 0);
    }
    // The mutations must actually hit the error paths.
    assert!(warned > 300, "only {warned} inputs warned");
}

fn branch_line(i: usize) -> String {
    format!(
        "1/1 1.{i:09}:  1  branches:uH:   call   {:x} fn_{i}+0x{:x} (lib{}.so) =>  {:x} [unknown] (d{i})\n",
        0x1000 + i,
        i % 7,
        i % 3,
        0x9000 + i
    )
}

/// The decoder caches parsed locations; every name must still be the one on its line,
/// with many more distinct symbols than cache slots and each seen several times.
#[test]
fn cached_locations_always_match_their_line() {
    let mut input = String::new();
    for round in 0..3 {
        for i in 0..10_000 {
            // Revisit in a different order each round to mix hits, misses and evictions.
            input += &branch_line((i * (round * 2 + 1)) % 10_000);
        }
    }
    let mut d = Decoder::new(input.as_bytes());
    let mut n = 0;
    while let Some(e) = d.next_event().expect("slice") {
        let Event::Ok {
            data: EventData::Trace { src, dst, .. },
            time,
            ..
        } = e
        else {
            panic!("{e:?}")
        };
        let i = (time - 1_000_000_000) as usize;
        let s = d.strings();
        let (src, dst) = (s.location(src), s.location(dst));
        assert_eq!(s.display(src.symbol), format!("fn_{i}"));
        assert_eq!((src.ip, src.offset), (0x1000 + i as u64, (i % 7) as u64));
        assert_eq!(s.get(src.dso.expect("dso")), format!("lib{}.so", i % 3));
        assert_eq!(
            s.display(dst.symbol),
            format!("[unknown @ 0x{:x} (d{i})]", 0x9000 + i)
        );
        n += 1;
    }
    assert_eq!(n, 30_000);
}

#[test]
fn replacing_the_string_table_midway_keeps_names_right() {
    let input = branch_line(5).repeat(2) + &branch_line(6) + &branch_line(5);
    let mut d = Decoder::new(input.as_bytes());
    let name = |d: &Decoder<&[u8]>, e: &Event| match e {
        Event::Ok {
            data: EventData::Trace { src, .. },
            ..
        } => d
            .strings()
            .display(d.strings().location(*src).symbol)
            .to_string(),
        e => panic!("{e:?}"),
    };
    let e = d.next_event().expect("slice").expect("event");
    assert_eq!(name(&d, &e), "fn_5");
    let old = std::mem::take(d.strings_mut());
    assert!(old.lookup("fn_5").is_some());
    let e = d.next_event().expect("slice").expect("event");
    assert_eq!(name(&d, &e), "fn_5");
    *d.strings_mut() = ptscope_event::StringTable::new();
    let own = d.intern("mine");
    let e = d.next_event().expect("slice").expect("event");
    assert_eq!(name(&d, &e), "fn_6");
    let e = d.next_event().expect("slice").expect("event");
    assert_eq!(name(&d, &e), "fn_5");
    assert_eq!(d.strings().get(own), "mine");
}
