//! The nine recorded magic-trace fixtures decode cleanly, group for group.

mod common;

use common::{decode_all, read_fixture, FIXTURES};
use ptscope_decode::Decoder;
use ptscope_event::{Event, EventData};
use std::io::BufReader;

/// Counts groups the simple way (a header line starts a group) and says how many of
/// them are `psb`, which yield no event.
fn count_groups(text: &str) -> (usize, usize) {
    let headers: Vec<&str> = text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('\t'))
        .collect();
    let psb = headers.iter().filter(|l| l.contains(" psb: ")).count();
    (headers.len(), psb)
}

#[test]
fn all_fixtures_decode_without_warnings() {
    for name in FIXTURES {
        let input = read_fixture(name);
        let (events, d) = decode_all(&input);
        let text = String::from_utf8(input.clone()).expect("fixtures are UTF-8");
        let (groups, psb) = count_groups(&text);
        assert_eq!(d.stats().warnings, 0, "{name}: {:?}", d.warnings());
        assert_eq!(events.len(), groups - psb, "{name}");
        assert_eq!(d.stats().events as usize, events.len(), "{name}");
        assert_eq!(d.stats().ignored as usize, psb, "{name}");
        assert_eq!(d.stats().lines as usize, text.lines().count(), "{name}");
        assert_eq!(d.stats().bytes as usize, input.len(), "{name}");
        assert!(groups > 0, "{name}");
        // Times never go backwards within one thread in these recordings.
        let mut last = 0;
        for e in &events {
            if let Some(t) = e.time() {
                assert!(t >= last, "{name}: time went back at {e:?}");
                last = t;
            }
        }
    }
}

#[test]
fn fixture_event_kinds_match_their_headers() {
    for name in FIXTURES {
        let input = read_fixture(name);
        let text = String::from_utf8(input.clone()).expect("fixtures are UTF-8");
        let headers: Vec<&str> = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('\t') && !l.contains(" psb: "))
            .collect();
        let (events, d) = decode_all(&input);
        for (h, e) in headers.iter().zip(&events) {
            let ok = match e {
                Event::DecodeError { .. } => h.contains("instruction trace error"),
                Event::Ok { data, .. } => match data {
                    EventData::Trace { .. } => h.contains(" branches:"),
                    EventData::Power { .. } => h.contains(" cbr: "),
                    EventData::StackSample { callstack } => {
                        h.contains(" cycles:") && d.strings().stack(*callstack).len() > 0
                    }
                    EventData::SwitchOutStack { .. } => h.contains(" sched:sched_switch:"),
                    EventData::EventSample { .. } => h.contains("-misses/"),
                    EventData::Ptwrite { .. } => h.contains("ptwrite:"),
                    EventData::Comm { .. } | EventData::Fork { .. } | EventData::Switch { .. } => {
                        h.contains("PERF_RECORD_")
                    }
                },
            };
            assert!(ok, "{name}: {h}\n  decoded as {e:?}");
        }
    }
}

#[test]
fn tiny_read_buffers_give_identical_events() {
    for name in ["c_demo_sampling", "memmove_decode_error", "simple_gogo"] {
        let input = read_fixture(name);
        let (whole, _) = decode_all(&input);
        for cap in [1, 7, 64] {
            let mut d = Decoder::new(BufReader::with_capacity(cap, &input[..]));
            let mut events = Vec::new();
            while let Some(e) = d.next_event().expect("slice") {
                events.push(e);
            }
            assert_eq!(events, whole, "{name} with a {cap}-byte buffer");
            assert_eq!(d.stats().warnings, 0);
        }
    }
}

#[test]
fn decode_error_fixture_has_its_error_in_place() {
    let (events, d) = decode_all(&read_fixture("memmove_decode_error"));
    let pos = events
        .iter()
        .position(|e| matches!(e, Event::DecodeError { .. }))
        .expect("a decode error");
    assert_eq!(pos, 8);
    let Event::DecodeError {
        thread,
        time,
        ip,
        message,
    } = &events[pos]
    else {
        unreachable!()
    };
    assert_eq!(thread.tid, Some(293415));
    assert_eq!(*time, Some(47170_086912826));
    assert_eq!(*ip, Some(0x7ffff7327730));
    assert_eq!(d.strings().get(*message), "Overflow packet");
}

#[test]
fn sampling_fixture_names_match_the_oracle() {
    let (events, d) = decode_all(&read_fixture("c_demo_sampling"));
    // expected.txt names kernel frames this way.
    assert!(d
        .strings()
        .lookup("[unknown @ -0x50ffef00 ([unknown])]")
        .is_some());
    let Event::Ok {
        data: EventData::StackSample { callstack },
        ..
    } = &events[0]
    else {
        panic!("{:?}", events[0])
    };
    // Root first: the header's last tab line is the root.
    let names: Vec<&str> = (d.strings().stack(*callstack))
        .map(|l| d.strings().display(l.symbol))
        .collect();
    assert_eq!(names.last(), Some(&"_dl_open"));
    let at = |f: &str| {
        names
            .iter()
            .position(|n| *n == f)
            .unwrap_or_else(|| panic!("{f} not in {names:?}"))
    };
    assert!(at("main") < at("dlopen_doit"), "{names:?}");
}
