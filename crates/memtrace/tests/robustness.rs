//! Damaged input: truncated prefixes and bit flips must give an error or a valid
//! partial result, never a panic.

mod common;

use common::*;
use memtrace::sampler::Rng;
use memtrace::{tools, Reader};

/// Runs every tool over `data`; any panic fails the test. Returns the dump text.
fn exercise(data: &[u8]) -> Vec<u8> {
    let mut text = Vec::new();
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::dump(&mut r, &mut text);
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::flamegraph(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::hotspots(&mut r, &mut std::io::sink());
    }
    if let Ok(r) = Reader::from_bytes(data) {
        let _ = tools::identify(r, "x", &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::strip_names(&mut r, std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::subsample(&mut r, std::io::sink(), &Default::default());
    }
    if let Ok(r) = Reader::from_bytes(data) {
        let mut r = r.parse_backtraces(false);
        while let Ok(Some(_)) = r.next_event() {}
    }
    text
}

/// Offsets where packets start, for cutting near the interesting places.
fn packet_starts(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= data.len() {
        out.push(at);
        let bits = u32::from_le_bytes(data[at + 4..at + 8].try_into().unwrap());
        at += (bits / 8) as usize;
    }
    out
}

fn dump_of(data: &[u8]) -> Vec<u8> {
    let mut text = Vec::new();
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::dump(&mut r, &mut text);
    }
    text
}

fn check_prefix(name: &str, data: &[u8], full_dump: &[u8], cut: usize, all_tools: bool) {
    let text = if all_tools {
        exercise(&data[..cut])
    } else {
        dump_of(&data[..cut])
    };
    assert!(
        full_dump.starts_with(&text),
        "{name}: dump of the first {cut} bytes is not a prefix of the full dump"
    );
}

fn prefixes(name: &str, exhaustive: bool) {
    let data = read(&format!("{name}.ctf"));
    let full = read_gz(&format!("{name}.dump.txt.gz"));
    let mut cuts: Vec<usize> = if exhaustive || data.len() < 10_000 {
        (0..data.len()).collect()
    } else {
        // Cut inside and around every packet header and first event, plus a stride.
        let mut c: Vec<usize> = (0..data.len()).step_by(2039).collect();
        for p in packet_starts(&data) {
            for d in [0, 1, 4, 8, 29, 30, 31, 66, 67, 68, 69, 72, 75, 80] {
                c.push(p + d);
            }
            c.push(p.saturating_sub(1));
        }
        c.retain(|&x| x < data.len());
        c
    };
    cuts.sort_unstable();
    cuts.dedup();
    let every = if exhaustive {
        97
    } else {
        (cuts.len() / 25).max(1)
    };
    for (i, cut) in cuts.into_iter().enumerate() {
        check_prefix(name, &data, &full, cut, i % every == 0);
    }
    // The whole file reads completely.
    assert_eq!(exercise(&data), full, "{name}");
}

#[test]
fn truncated_prefixes_give_partial_results() {
    for name in [
        "wrap",
        "locs",
        "ocamlopt_v3",
        "multi",
        "ocamlopt_v3.strip_names",
    ] {
        prefixes(name, false);
    }
}

/// Every single prefix of every fixture (slow in debug builds:
/// `cargo test --release -p memtrace --test robustness -- --ignored`).
#[test]
#[ignore]
fn every_truncated_prefix() {
    for name in TRACES {
        prefixes(name, true);
    }
}

#[test]
fn bit_flips_never_panic() {
    let mut rng = Rng::new(0xb17f_1195);
    for name in TRACES {
        let data = read(&format!("{name}.ctf"));
        let copies = if data.len() < 10_000 { 300 } else { 20 };
        for _ in 0..copies {
            let mut d = data.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(d.len() as u64) as usize;
                d[at] ^= 1 << rng.below(8);
            }
            exercise(&d);
        }
    }
}

#[test]
fn malformed_inputs_give_typed_errors() {
    use memtrace::ErrorKind;
    assert!(matches!(
        Reader::from_bytes(b"").map(|_| ()).unwrap_err().kind(),
        Some(ErrorKind::MissingTraceInfo)
    ));
    let mut data = read("wrap.ctf");
    data[0] ^= 0xff;
    assert!(matches!(
        Reader::from_bytes(&data).map(|_| ()).unwrap_err().kind(),
        Some(ErrorKind::BadMagic(_))
    ));
    // A version from the future.
    let mut data = read("wrap.ctf");
    data[28] = 9;
    assert!(matches!(
        Reader::from_bytes(&data).map(|_| ()).unwrap_err().kind(),
        Some(ErrorKind::UnsupportedVersion(9))
    ));
    // Break the second packet's alloc_id_end: the reader reports the sync error at
    // the end of that packet, after the events before it.
    let mut data = read("ocamlopt_v3.ctf");
    let starts = packet_starts(&data);
    let mut seen_err = None;
    for &p in &starts[1..] {
        let end = u64::from_le_bytes(data[p + 60..p + 68].try_into().unwrap());
        let begin = u64::from_le_bytes(data[p + 52..p + 60].try_into().unwrap());
        if end > begin {
            data[p + 60..p + 68].copy_from_slice(&(end + 1).to_le_bytes());
            seen_err = Some(p);
            break;
        }
    }
    assert!(seen_err.is_some());
    let mut r = Reader::from_bytes(&data).expect("info ok");
    let mut n = 0;
    let err = loop {
        match r.next_event() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("no error"),
            Err(e) => break e,
        }
    };
    assert!(n > 0, "events before the bad packet are delivered");
    assert!(
        matches!(err.kind(), Some(ErrorKind::AllocIdSync { .. })),
        "{err}"
    );
    assert!(r.next_event().expect("stays stopped").is_none());
}

#[test]
fn truncated_final_packet_is_noted_not_fatal() {
    let data = read("ocamlopt_v3.ctf");
    let mut r = Reader::from_bytes(&data[..data.len() - 10]).expect("reader");
    let mut out = Vec::new();
    tools::dump(&mut r, &mut out).expect("partial dump is not an error");
    assert!(matches!(
        r.notes(),
        [memtrace::Note::TruncatedPacket { .. }]
    ));
    assert_eq!(r.notes()[0].to_string(), "skipping truncated packet");
    assert!(!out.is_empty());
}

#[test]
fn strict_mode_turns_skipped_packets_into_errors() {
    let data = read("ocamlopt_v3.ctf");
    let cut = &data[..data.len() - 10];
    let mut r = Reader::from_bytes(cut).expect("reader").strict(true);
    let err = tools::dump(&mut r, &mut std::io::sink()).expect_err("strict");
    assert_eq!(err.kind(), Some(&memtrace::ErrorKind::TruncatedPacket));
    // A packet from another process.
    let mut data = read("wrap.ctf");
    let p = packet_starts(&data)[1];
    data[p + 30] ^= 1;
    // (Without backtraces: the skipped packet held locations the dump would need.)
    let mut lax = Reader::from_bytes(&data)
        .expect("reader")
        .parse_backtraces(false);
    while lax.next_event().expect("lax mode skips it").is_some() {}
    assert!(matches!(lax.notes(), [memtrace::Note::WrongPid { .. }]));
    let mut r = Reader::from_bytes(&data)
        .expect("reader")
        .strict(true)
        .parse_backtraces(false);
    let err = loop {
        match r.next_event() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("strict mode accepted a foreign packet"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err.kind(), Some(memtrace::ErrorKind::WrongPid(_))),
        "{err}"
    );
}
