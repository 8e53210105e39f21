//! The streaming reader reads exactly what the slice reader reads: the same records, the
//! same errors at the same offsets, whatever size of pieces its source hands out.

use ptscope_fxt::reader::{Head, Reader, Record};
use ptscope_fxt::stream::StreamReader;
use ptscope_fxt::{Arg, ArgValue as W, FxtWriter};
use std::io::Read;

#[path = "../../../tests/xorshift.rs"]
mod xorshift;
use xorshift::Rng;

/// A source that hands out at most a few bytes per read (as a pipe or gzip may).
struct Dribble<'a> {
    data: &'a [u8],
    rng: Rng,
}

impl Read for Dribble<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (1 + self.rng.below(13)).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Every record (or the error that ended the input), as text, as the slice reader sees it.
fn by_slice(data: &[u8]) -> Vec<String> {
    Reader::new(data).map(|r| format!("{r:?}")).collect()
}

/// The same from a stream over `src`.
fn by_stream(src: impl Read) -> Vec<String> {
    let mut r = StreamReader::new(src);
    let mut out = Vec::new();
    while let Some(rec) = r.next_record() {
        out.push(format!("{rec:?}"));
    }
    out
}

fn agree(data: &[u8], seed: u64) {
    let want = by_slice(data);
    assert_eq!(by_stream(data), want, "whole slice");
    let dribble = Dribble {
        data,
        rng: Rng(seed),
    };
    assert_eq!(by_stream(dribble), want, "dribbled, seed {seed}");
}

/// Names past the string table and threads past the thread table (both re-registered),
/// inline strings, every argument type, a blob-sized large record is not needed here.
fn busy_trace() -> &'static [u8] {
    static TRACE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TRACE.get_or_init(make_busy_trace)
}

fn make_busy_trace() -> Vec<u8> {
    let mut w = FxtWriter::new(Vec::new());
    let mut threads = Vec::new();
    for i in 0..300u32 {
        w.thread_object(1000 + i, 1 + i / 10, &format!("thread {i}"));
        threads.push(w.thread(1 + i / 10, 1000 + i));
    }
    for i in 0..34_000usize {
        let t = threads[(i * 17) % threads.len()];
        let name = format!("symbol_{i}_{}", "z".repeat(i % 13));
        let ts = i as u64;
        w.begin(
            t,
            "",
            &name,
            ts,
            &[Arg::new("s", W::InlineStr("inline value"))],
        );
        w.complete(
            t,
            "cat",
            "inner",
            ts,
            ts + 1,
            &[
                Arg::new("d", W::Double(1.5)),
                Arg::new("b", W::Bool(true)),
                Arg::new("p", W::Pointer(0x1000)),
                Arg::new("u", W::UInt(u64::MAX)),
                Arg::new("k", W::Koid(9)),
            ],
        );
        w.end(t, "", &name, ts + 2, &[]);
    }
    w.finish().unwrap()
}

#[test]
fn a_trace_past_every_table_limit_reads_the_same() {
    let data = busy_trace();
    assert!(data.len() > 2 << 20, "bigger than the stream's buffer");
    agree(data, 1);
}

/// What `next_head` gives, as text, for comparing with the full records.
fn heads(src: impl Read) -> Vec<String> {
    let mut r = StreamReader::new(src);
    let mut out = Vec::new();
    while let Some(h) = r.next_head() {
        match h {
            Ok(Head::Event(e)) => out.push(format!(
                "{:?} {} {} {} {} {}",
                e.kind, e.timestamp, e.pid, e.tid, e.category, e.name
            )),
            Ok(Head::KernelObject {
                obj_type,
                koid,
                name,
            }) => out.push(format!("object {obj_type} {koid} {name}")),
            Ok(Head::Initialization { ticks_per_second }) => {
                out.push(format!("init {ticks_per_second}"))
            }
            Ok(Head::Other) => {}
            Err(e) => out.push(format!("error {e}")),
        }
    }
    out
}

#[test]
fn heads_are_the_records_without_their_arguments() {
    let data = busy_trace();
    let mut want = Vec::new();
    for r in Reader::new(data) {
        match r.unwrap() {
            Record::Event(e) => want.push(format!(
                "{:?} {} {} {} {} {}",
                e.kind, e.timestamp, e.pid, e.tid, e.category, e.name
            )),
            Record::KernelObject(k) => {
                want.push(format!("object {} {} {}", k.obj_type, k.koid, k.name))
            }
            Record::Initialization { ticks_per_second } => {
                want.push(format!("init {ticks_per_second}"))
            }
            _ => {}
        }
    }
    assert_eq!(heads(data), want);
    let dribble = Dribble { data, rng: Rng(5) };
    assert_eq!(heads(dribble), want);
    // Damage never panics, and a truncated trace ends with an error.
    let mut rng = Rng(11);
    for _ in 0..50 {
        let mut d = data[..32 * 1024].to_vec();
        let i = rng.below(d.len());
        d[i] ^= 1 << rng.below(8);
        let _ = heads(&d[..]);
    }
    let cut = heads(&data[..data.len() - 3]);
    assert!(cut.last().unwrap().starts_with("error"), "{:?}", cut.last());
}

#[test]
fn damaged_and_truncated_traces_fail_the_same_way() {
    let base = busy_trace();
    let base = &base[..64 * 1024];
    let mut rng = Rng(7);
    for round in 0..100 {
        let mut data = base.to_vec();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        if round % 3 == 0 {
            data.truncate(rng.below(data.len()));
        }
        agree(&data, round);
    }
}

#[test]
fn a_large_record_is_skipped_without_being_buffered() {
    let mut data = FxtWriter::new(Vec::new()).finish().unwrap();
    // A large record (type 15) of 3 words, then one of 2^20 words the input cuts short.
    data.extend_from_slice(&(15u64 | (3u64 << 4)).to_le_bytes());
    data.extend_from_slice(&[0; 16]);
    data.extend_from_slice(&(15u64 | (1u64 << 24)).to_le_bytes());
    data.extend_from_slice(&[0; 100]);
    agree(&data, 3);
    let last = by_stream(&data[..]).pop().unwrap();
    assert!(last.contains("Truncated"), "{last}");
}

#[test]
fn a_failing_source_is_an_error_not_a_panic() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let got = by_stream(Broken);
    assert_eq!(got.len(), 1);
    assert!(got[0].contains("disk on fire"), "{got:?}");
}
