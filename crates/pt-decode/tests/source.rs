//! The builtin decoder on a simulated recording (`tests/fixtures/pt/ptsim_gzip.perf.data.gz`,
//! a ptsim run of gzip with three corrupted bytes): decoding in small chunks on several
//! threads gives exactly the events of one sequential pass, and mutated trace data is
//! decoded without a panic.

use ptscope_event::{Event, EventSource};
use std::io::Read;
use std::path::{Path, PathBuf};

fn fixture(dir: &Path) -> PathBuf {
    let gz = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pt/ptsim_gzip.perf.data.gz");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(gz).expect("fixture"))
        .read_to_end(&mut bytes)
        .expect("gunzip");
    let path = dir.join("perf.data");
    std::fs::write(&path, bytes).expect("write");
    path
}

/// Every event of `path`.
fn decode(path: &Path, chunk_size: usize, threads: usize) -> Result<Vec<String>, String> {
    let opts = ptscope_pt_decode::Options {
        chunk_size,
        threads: Some(threads),
        ..Default::default()
    };
    let mut src = ptscope_pt_decode::open(path, &opts).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(e) = src.next_event().map_err(|e| e.to_string())? {
        out.push(describe(&e, &src));
    }
    Ok(out)
}

/// An event as text (names are interned in event order, so equal events print equal).
fn describe(e: &Event, _src: &ptscope_pt_decode::PtSource) -> String {
    format!("{e:?}")
}

/// PSB-delimited chunks decoded on two threads join into the sequential decode.
#[test]
fn chunks_join_into_the_sequential_decode() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let whole = decode(&path, usize::MAX / 2, 1).expect("decode");
    assert!(whole.len() > 100_000, "{} events", whole.len());
    for (chunk, threads) in [(4 << 10, 2), (16 << 10, 3), (64 << 10, 2)] {
        let parts = decode(&path, chunk, threads).expect("decode");
        let first = whole.iter().zip(&parts).position(|(a, b)| a != b);
        assert!(
            first.is_none() && whole.len() == parts.len(),
            "chunks of {chunk} bytes on {threads} threads: {} events vs {}, first difference at {first:?}: {:?} vs {:?}",
            parts.len(),
            whole.len(),
            first.map(|i| &parts[i]),
            first.map(|i| &whole[i]),
        );
    }
}

/// The AUX trace data of the recording: `(offset, size)` in the file.
fn aux_ranges(path: &Path) -> Vec<(usize, usize)> {
    let data = ptscope_perf_data::PerfData::open(path).expect("perf.data");
    let base = data.bytes().as_ptr() as usize;
    let mut out = Vec::new();
    for r in data.records() {
        if let Ok(ptscope_perf_data::RecordAt {
            record: ptscope_perf_data::Record::Auxtrace(a),
            ..
        }) = r
        {
            out.push((a.data.as_ptr() as usize - base, a.data.len()));
        }
    }
    out
}

/// Flipped bits, zeroed and repeated runs, PSBs and random bytes written over the trace
/// data: the decoder reports errors, never panics.
#[test]
fn mutated_trace_data_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture(dir.path());
    let original = std::fs::read(&path).unwrap();
    let ranges = aux_ranges(&path);
    assert!(!ranges.is_empty(), "no AUXTRACE data");
    let total: usize = ranges.iter().map(|r| r.1).sum();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let psb = [
        0x02u8, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02,
        0x82,
    ];
    let mutated = dir.path().join("mutated.data");
    for round in 0..18 {
        let mut bytes = original.clone();
        let edits = 1 + (rand() % 64) as usize;
        for _ in 0..edits {
            // A position in the trace data.
            let mut k = (rand() as usize) % total;
            let (off, size) = ranges
                .iter()
                .find(|r| {
                    if k < r.1 {
                        true
                    } else {
                        k -= r.1;
                        false
                    }
                })
                .copied()
                .unwrap();
            let at = off + k;
            let room = size - k;
            match round % 6 {
                0 => bytes[at] ^= 1 << (rand() % 8),
                1 => bytes[at] = rand() as u8,
                2 => {
                    let n = room.min(1 + (rand() % 512) as usize);
                    bytes[at..at + n].fill(0);
                }
                3 => {
                    let n = room.min(psb.len());
                    bytes[at..at + n].copy_from_slice(&psb[..n]);
                }
                4 => {
                    // A run of the trace repeated further on.
                    let n = room.min(1 + (rand() % 256) as usize) / 2;
                    let (a, b) = bytes[at..at + 2 * n].split_at_mut(n);
                    b.copy_from_slice(a);
                }
                _ => {
                    let n = room.min(1 + (rand() % 64) as usize);
                    for b in &mut bytes[at..at + n] {
                        *b = rand() as u8;
                    }
                }
            }
        }
        std::fs::write(&mutated, &bytes).unwrap();
        let threads = 1 + round % 2;
        let r = std::panic::catch_unwind(|| decode(&mutated, 8 << 10, threads));
        assert!(r.is_ok(), "round {round}: the decoder panicked");
    }
}
