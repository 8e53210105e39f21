//! Golden tests: our tools against the reference tools' outputs in the fixtures.

mod common;

use common::*;
use memtrace::{tools, Reader};

#[test]
fn dump_matches_reference_for_every_fixture() {
    for name in TRACES {
        let data = read(&format!("{name}.ctf"));
        let mut r = Reader::from_bytes(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut out = Vec::new();
        tools::dump(&mut r, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.notes().is_empty(), "{name}: {:?}", r.notes());
        assert_same_text(&out, &read_gz(&format!("{name}.dump.txt.gz")), name);
    }
}

#[test]
fn streaming_from_a_file_gives_the_same_dump() {
    let path = fixtures().join("multi.ctf");
    let mut r = Reader::open(&path).expect("open");
    assert_eq!(r.total_len(), Some(std::fs::metadata(&path).unwrap().len()));
    let mut out = Vec::new();
    tools::dump(&mut r, &mut out).expect("dump");
    assert_same_text(&out, &read_gz("multi.dump.txt.gz"), "multi via file");
}

/// Decodes every event of `data` and writes it back with the same trace info.
fn reencode(data: &[u8]) -> Vec<u8> {
    let mut r = Reader::from_bytes(data).expect("reader");
    let mut w = memtrace::Writer::new(Vec::new(), r.info()).expect("writer");
    while let Some(ev) = r.next_event().expect("event") {
        w.put_event(&ev).expect("put_event");
    }
    w.finish().expect("finish")
}

#[test]
fn reencoding_reproduces_each_fixture_byte_for_byte() {
    for name in TRACES {
        let data = read(&format!("{name}.ctf"));
        let out = reencode(&data);
        if out != data {
            let at = out
                .iter()
                .zip(&data)
                .position(|(a, b)| a != b)
                .unwrap_or(out.len().min(data.len()));
            panic!(
                "{name}: first difference at byte {at} (len {} vs {})",
                out.len(),
                data.len()
            );
        }
    }
}

#[test]
fn identify_matches_reference() {
    for name in ["ocamlopt_v3", "wrap", "locs", "multi"] {
        let file = format!("{name}.ctf");
        let r = Reader::open(fixtures().join(&file)).expect("open");
        let mut out = Vec::new();
        tools::identify(r, &file, &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_same_text(&out, &read(&format!("{name}.identify.txt")), name);
    }
}

#[test]
fn flamegraph_matches_reference() {
    let data = read("ocamlopt_v3.ctf");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let mut out = Vec::new();
    tools::flamegraph(&mut r, &mut out).expect("flamegraph");
    assert_same_text(
        &out,
        &read_gz("ocamlopt_v3.flamegraph.txt.gz"),
        "flamegraph",
    );
}

#[test]
fn strip_names_matches_reference_file() {
    let data = read("ocamlopt_v3.ctf");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let out = tools::strip_names(&mut r, Vec::new()).expect("strip");
    assert!(
        out == read("ocamlopt_v3.strip_names.ctf"),
        "stripped trace differs"
    );
}

#[test]
fn strip_names_of_a_multi_domain_trace_keeps_every_event() {
    let data = read("multi.ctf");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let out = tools::strip_names(&mut r, Vec::new()).expect("strip");
    let mut stripped = Vec::new();
    tools::dump(
        &mut Reader::from_bytes(&out).expect("reader"),
        &mut stripped,
    )
    .expect("dump");
    // Same events, without backtraces: compare each line up to its colon.
    let cut = |t: &[u8]| -> Vec<Vec<u8>> {
        t.split(|&b| b == b'\n')
            .map(|l| l.split(|&b| b == b':').next().unwrap_or(l).to_vec())
            .collect()
    };
    assert_eq!(cut(&stripped), cut(&read_gz("multi.dump.txt.gz")));
}

#[test]
fn subsample_by_one_is_the_identity() {
    for name in ["ocamlopt_v3", "wrap", "locs", "ocamlopt_v3.strip_names"] {
        let data = read(&format!("{name}.ctf"));
        let mut r = Reader::from_bytes(&data).expect("reader");
        let out = tools::subsample(&mut r, Vec::new(), &tools::SubsampleOptions::default())
            .expect("subsample");
        assert!(out == data, "{name}: subsample 1 changed the trace");
    }
}

#[test]
fn subsample_keeps_about_one_sample_in_factor() {
    let data = read("multi.ctf");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let opts = tools::SubsampleOptions {
        factor: 4,
        ..Default::default()
    };
    let out = tools::subsample(&mut r, Vec::new(), &opts).expect("subsample");
    let mut r2 = Reader::from_bytes(&out).expect("reader");
    assert!((r2.info().sample_rate - 0.01 / 4.0).abs() < 1e-12);
    let (mut samples, mut ids) = (0i64, Vec::new());
    while let Some(ev) = r2.next_event().expect("event") {
        if let memtrace::EventKind::Alloc(a) = ev.kind {
            samples += a.nsamples;
            ids.push(a.obj_id);
        }
    }
    // 33 333 samples in: expect 8 333, sd ≈ 79; allow 6 sd.
    assert!((samples - 8333).abs() < 480, "kept {samples}");
    let mut sorted = ids.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "ids unique");
}

#[test]
fn hotspots_reports_the_top_allocators() {
    let data = read("ocamlopt_v3.ctf");
    let mut r = Reader::from_bytes(&data).expect("reader");
    let mut out = Vec::new();
    tools::hotspots(&mut r, &mut out).expect("hotspots");
    let text = String::from_utf8(out).expect("utf8");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("Trace for /home/stephen/jswork/memtrace/_build/default/trace_ocamlopt/main.exe [17157]:")
    );
    assert_eq!(lines.next(), Some("   1676 samples of  0.6 GB allocations"));
    // Every reported site has a share, and shares are in decreasing order.
    let shares: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("%) at "))
        .map(|l| {
            l.split('(')
                .nth(1)
                .and_then(|s| s.split('%').next())
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!shares.is_empty());
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{shares:?}");
}
