//! Parsing a large `perf script` text file on two threads.
//!
//! Parsing is the slowest stage of a text decode, and a file (unlike a pipe) can be
//! read anywhere: it is cut into parts at group boundaries (a line that does not
//! start with a tab), the parts are parsed by two workers with tables of their own,
//! and their events are put back in file order by one [`EventSource`]
//! ([`ParallelText`]), with every name re-interned in its table. Memory stays bounded:
//! each worker is at most a few batches ahead.

use ptscope_decode::{Decoder, Stats, Warning};
use ptscope_event::source::{Finished, SourceError, TableDelta, TableMap, TableSent};
use ptscope_event::{Event, EventSource, SourceInfo, StringTable};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Size of the parts a file is cut into.
const PART: u64 = 16 << 20;
/// How far past a cut point a group boundary is looked for.
const SEARCH: usize = 1 << 20;
/// Parsing threads.
const WORKERS: usize = 2;
/// Events per message.
const BATCH: usize = 4096;
/// Files smaller than this are parsed on one thread (not worth the set-up).
pub(crate) const MIN_SIZE: u64 = 64 << 20;

/// What a worker reports about one part.
enum Part {
    /// Events, with the names and stacks the part's table gained since its previous batch.
    Batch(TableDelta, Vec<Event>),
    /// The part is done.
    Done(Stats, Vec<Warning>),
    /// Reading the part failed.
    Failed(String),
}

/// Whether the file's parts can be parsed apart: each header must carry its pid. perf's
/// default output prints the tid alone and the pid is learned from task events, which a
/// later part would not see, so such files are parsed in one piece.
pub(crate) fn splittable(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut buf = vec![0u8; 64 << 10];
    let Ok(n) = file.read_at(&mut buf, 0) else {
        return false;
    };
    let header = buf[..n]
        .split(|&b| b == b'\n')
        .find(|l| !l.is_empty() && l[0] != b'\t' && !l.iter().all(|b| b.is_ascii_whitespace()));
    let Some(line) = header else {
        return true;
    };
    let first = line
        .split(|b| b.is_ascii_whitespace())
        .find(|t| !t.is_empty())
        .unwrap_or_default();
    let id = |t: &[u8]| {
        let t = t.strip_prefix(b"-").unwrap_or(t);
        !t.is_empty() && t.iter().all(u8::is_ascii_digit)
    };
    match first.iter().position(|&b| b == b'/') {
        Some(i) => id(&first[..i]) && id(&first[i + 1..]),
        None => false,
    }
}

/// Where the parts start: 0, then after each ~`PART` bytes the first line that opens a
/// group (a header line: one that does not start with a tab).
fn part_starts(file: &File, len: u64) -> io::Result<Vec<u64>> {
    let mut starts = vec![0u64];
    let mut buf = vec![0u8; SEARCH];
    let mut at = PART;
    while at < len {
        let n = file.read_at(&mut buf, at)?;
        let window = &buf[..n];
        let cut = window
            .windows(2)
            .position(|w| w[0] == b'\n' && w[1] != b'\t')
            .map(|i| at + i as u64 + 1);
        if let Some(c) = cut {
            if c > *starts.last().unwrap_or(&0) && c < len {
                starts.push(c);
            }
        }
        at = at.saturating_add(PART).max(cut.unwrap_or(at) + 1);
    }
    Ok(starts)
}

/// Parses parts `first, first + WORKERS, …` in order, sending everything to `tx`.
fn worker(file: &File, ranges: &[(u64, u64)], first: usize, tx: SyncSender<Part>) {
    for &(start, end) in ranges.iter().skip(first).step_by(WORKERS) {
        let mut buf = vec![0u8; (end - start) as usize];
        if let Err(e) = file.read_exact_at(&mut buf, start) {
            let _ = tx.send(Part::Failed(format!("reading bytes {start}..{end}: {e}")));
            return;
        }
        let mut d = Decoder::new(io::Cursor::new(buf));
        let mut sent = TableSent::default();
        let mut events = Vec::with_capacity(BATCH);
        loop {
            let next = d.next_event();
            let done = !matches!(next, Ok(Some(_)));
            if let Ok(Some(e)) = next {
                events.push(e);
            }
            if events.len() == BATCH || (done && !events.is_empty()) {
                let delta = TableDelta::since(d.strings(), &mut sent);
                let full = std::mem::replace(&mut events, Vec::with_capacity(BATCH));
                if tx.send(Part::Batch(delta, full)).is_err() {
                    return;
                }
            }
            if done {
                break;
            }
        }
        let _ = tx.send(Part::Done(*d.stats(), d.warnings().to_vec()));
    }
}

/// A large `perf script` text file parsed on two threads, as one [`EventSource`]: the
/// workers parse parts with tables of their own; the source hands their events out in
/// file order with the names moved into its own table.
pub(crate) struct ParallelText {
    strings: StringTable,
    /// One receiver per worker: part `k` comes from worker `k % WORKERS`.
    rxs: Vec<Receiver<Part>>,
    workers: Vec<std::thread::JoinHandle<()>>,
    /// `(start, end)` of each part.
    ranges: Vec<(u64, u64)>,
    /// The part being read, and its table's handles in `strings`.
    part: usize,
    map: TableMap,
    /// Events of the current batch not handed out yet.
    pending: std::collections::VecDeque<Event>,
    stats: Stats,
    warnings: Vec<Warning>,
    error: Option<String>,
    /// Bytes of the parts done (progress).
    done_bytes: u64,
    size: u64,
}

impl ParallelText {
    /// Starts parsing `path` on two threads.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = std::sync::Arc::new(File::open(path)?);
        let len = file.metadata()?.len();
        let starts = part_starts(&file, len)?;
        let ranges: Vec<(u64, u64)> = starts
            .iter()
            .zip(starts.iter().skip(1).chain(std::iter::once(&len)))
            .map(|(&a, &b)| (a, b))
            .collect();
        let shared = std::sync::Arc::new(ranges.clone());
        let mut rxs = Vec::new();
        let mut workers = Vec::new();
        for w in 0..WORKERS {
            let (tx, rx) = sync_channel(4);
            rxs.push(rx);
            let (file, ranges) = (std::sync::Arc::clone(&file), std::sync::Arc::clone(&shared));
            workers.push(
                std::thread::Builder::new()
                    .name(format!("ptscope-text-{w}"))
                    .spawn(move || worker(&file, &ranges, w, tx))?,
            );
        }
        Ok(ParallelText {
            strings: StringTable::new(),
            rxs,
            workers,
            ranges,
            part: 0,
            map: TableMap::new(),
            pending: std::collections::VecDeque::new(),
            stats: Stats::default(),
            warnings: Vec::new(),
            error: None,
            done_bytes: 0,
            size: len,
        })
    }

    /// Stops the workers: each ends at its next send.
    fn stop(&mut self) {
        self.rxs.clear();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl EventSource for ParallelText {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Ok(Some(e));
            }
            if self.error.is_some() || self.part >= self.ranges.len() || self.rxs.is_empty() {
                return Ok(None);
            }
            let msg = match self.rxs[self.part % WORKERS].recv() {
                Ok(m) => m,
                Err(_) => return Ok(None),
            };
            match msg {
                Part::Batch(delta, mut events) => {
                    self.map.add_delta(&delta, &mut self.strings);
                    for e in events.iter_mut() {
                        self.map.rewrite(e);
                    }
                    self.pending.extend(events);
                }
                Part::Done(stats, warnings) => {
                    for mut w in warnings {
                        w.line += self.stats.lines;
                        if self.warnings.len() < ptscope_decode::DEFAULT_KEPT_WARNINGS {
                            self.warnings.push(w);
                        }
                    }
                    self.stats.lines += stats.lines;
                    self.stats.bytes += stats.bytes;
                    self.stats.events += stats.events;
                    self.stats.warnings += stats.warnings;
                    self.stats.ignored += stats.ignored;
                    let (start, end) = self.ranges[self.part];
                    self.done_bytes += end - start;
                    self.part += 1;
                    self.map = TableMap::new();
                }
                Part::Failed(e) => {
                    self.error = Some(e.clone());
                    return Err(e.into());
                }
            }
        }
    }

    fn strings(&self) -> &StringTable {
        &self.strings
    }

    fn stats(&self) -> Stats {
        // Progress counts whole parts (bytes read so far, by the workers ahead).
        Stats {
            bytes: self.done_bytes,
            ..self.stats
        }
    }

    fn warnings(&self) -> Vec<Warning> {
        self.warnings.clone()
    }

    fn size(&self) -> Option<u64> {
        Some(self.size)
    }

    fn info(&self) -> SourceInfo {
        let mut i = SourceInfo::default();
        i.text = true;
        i
    }

    fn finish(mut self: Box<Self>) -> Finished {
        self.stop();
        Finished::new(std::mem::take(&mut self.strings))
    }
}

impl Drop for ParallelText {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_event::EventData;

    /// Only files whose headers carry the pid are cut in parts.
    #[test]
    fn default_perf_script_output_is_parsed_in_one_piece() {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let check = |text: &str| {
            let path = tmp.path().join("t.perf");
            std::fs::write(&path, text).expect("write");
            splittable(&path)
        };
        assert!(check(
            "\n  123/456 1.000001: 1 cpu-clock: \n\t 400 main+0x0 (/x)\n"
        ));
        assert!(!check(
            "gzip 456  1.000001:     250000 cpu-clock: \n\t 400 main+0x0 (/x)\n"
        ));
        assert!(!check(
            "perf-exec     0     0.000000: PERF_RECORD_COMM: perf-exec:4/4\n"
        ));
        assert!(!check("456 1.000001: \n"));
    }

    /// The parallel parse gives exactly the events of a single-threaded one.
    #[test]
    fn same_events_as_one_thread() {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/magic-trace/hello_world_userspace/input.perf");
        let text = std::fs::read(&fixture).expect("fixture");
        // Big enough for several parts: repeat the fixture (times need not increase here).
        let mut big = Vec::new();
        while (big.len() as u64) < 3 * PART + 12345 {
            big.extend_from_slice(&text);
        }
        // One line no perf prints, deep in the third part: its warning must carry its
        // line number in the whole file.
        let at = (2 * PART + 777) as usize;
        let at = at + big[at..].iter().position(|&b| b == b'\n').expect("newline") + 1;
        let bad_line = 1 + big[..at].iter().filter(|&&b| b == b'\n').count() as u64;
        big.splice(at..at, b"this is not perf output\n".iter().copied());
        let tmp = tempfile::tempdir().expect("temporary directory");
        let path = tmp.path().join("big.perf");
        std::fs::write(&path, &big).expect("write");

        let mut one = Decoder::new(io::Cursor::new(big.clone()));
        let mut expected = Vec::new();
        while let Some(e) = one.next_event().expect("decode") {
            expected.push(e);
        }
        let mut source = Box::new(ParallelText::open(&path).expect("parse"));
        let mut got: Vec<Event> = Vec::new();
        while let Some(e) = source.next_event().expect("decode") {
            got.push(e);
        }
        let stats = source.stats();
        let warnings = source.warnings();
        let strings = source.finish().strings;
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.len(), expected.len());
        assert_eq!(stats.lines, one.stats().lines);
        assert_eq!(stats.warnings, 1);
        assert_eq!(warnings[0].line, bad_line);
        assert_eq!(one.warnings()[0].line, bad_line);
        assert_eq!(stats.events, one.stats().events);
        // Same events once names are compared through each table.
        for (a, b) in got.iter().zip(expected.iter()) {
            assert_eq!(a.time(), b.time());
            if let (
                Event::Ok {
                    data: EventData::Trace { dst: da, .. },
                    ..
                },
                Event::Ok {
                    data: EventData::Trace { dst: db, .. },
                    ..
                },
            ) = (a, b)
            {
                let (da, db) = (strings.location(*da), one.strings().location(*db));
                assert_eq!(strings.display(da.symbol), one.strings().display(db.symbol));
                assert_eq!(da.ip, db.ip);
            }
        }
    }
}
