//! Parsing a large `perf script` text file on two threads.
//!
//! Parsing is the slowest stage of a text decode, and a file (unlike a pipe) can be
//! read anywhere: it is cut into parts at group boundaries (a line that does not
//! start with a tab), the parts are parsed by two workers with tables of their own,
//! and their events are put back in file order, with every name re-interned in the
//! one table the stack writer uses. Memory stays bounded: each worker is at most a few
//! batches ahead.

use ptscope_decode::{Decoder, Stats, Warning};
use ptscope_event::source::{TableDelta, TableMap, TableSent};
use ptscope_event::{Event, StringTable};
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
fn worker(
    file: &File,
    ranges: &[(u64, u64)],
    first: usize,
    stopped: &(dyn Fn() -> bool + Sync),
    tx: SyncSender<Part>,
) {
    for &(start, end) in ranges.iter().skip(first).step_by(WORKERS) {
        if stopped() {
            return;
        }
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

/// What a parallel parse hands back besides the events it delivered.
pub(crate) struct Outcome {
    /// Totals over all parts.
    pub stats: Stats,
    /// The first warnings, with line numbers in the whole file.
    pub warnings: Vec<Warning>,
    /// Why parsing stopped early, if it did.
    pub error: Option<String>,
}

/// Parses `path` on two threads; `deliver` gets each batch of events in file order,
/// with names interned in `strings` (false from `deliver` stops everything).
pub(crate) fn parse_file(
    path: &Path,
    strings: &mut StringTable,
    stopped: &(dyn Fn() -> bool + Sync),
    mut progress: impl FnMut(u64),
    mut deliver: impl FnMut(&mut StringTable, Vec<Event>) -> bool,
) -> io::Result<Outcome> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let starts = part_starts(&file, len)?;
    let ranges: Vec<(u64, u64)> = starts
        .iter()
        .zip(starts.iter().skip(1).chain(std::iter::once(&len)))
        .map(|(&a, &b)| (a, b))
        .collect();
    let mut out = Outcome {
        stats: Stats::default(),
        warnings: Vec::new(),
        error: None,
    };
    std::thread::scope(|scope| {
        let mut rxs: Vec<Receiver<Part>> = Vec::new();
        for w in 0..WORKERS {
            let (tx, rx) = sync_channel(4);
            rxs.push(rx);
            let (file, ranges) = (&file, &ranges);
            scope.spawn(move || worker(file, ranges, w, stopped, tx));
        }
        let mut done_bytes = 0u64;
        'parts: for (k, &(start, end)) in ranges.iter().enumerate() {
            let mut map = TableMap::new();
            loop {
                let msg = match rxs[k % WORKERS].recv() {
                    Ok(m) => m,
                    // The worker stopped (Ctrl-C): what was delivered stands.
                    Err(_) => break 'parts,
                };
                match msg {
                    Part::Batch(delta, mut events) => {
                        map.add_delta(&delta, strings);
                        for e in events.iter_mut() {
                            map.rewrite(e);
                        }
                        if !deliver(strings, events) {
                            break 'parts;
                        }
                    }
                    Part::Done(stats, warnings) => {
                        for mut w in warnings {
                            w.line += out.stats.lines;
                            if out.warnings.len() < ptscope_decode::DEFAULT_KEPT_WARNINGS {
                                out.warnings.push(w);
                            }
                        }
                        out.stats.lines += stats.lines;
                        out.stats.bytes += stats.bytes;
                        out.stats.events += stats.events;
                        out.stats.warnings += stats.warnings;
                        out.stats.ignored += stats.ignored;
                        done_bytes += end - start;
                        progress(done_bytes);
                        break;
                    }
                    Part::Failed(e) => {
                        out.error = Some(e);
                        break 'parts;
                    }
                }
            }
        }
        // Unblock workers still sending, so the scope can end.
        drop(rxs);
    });
    Ok(out)
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
        let mut strings = StringTable::new();
        let mut got: Vec<Event> = Vec::new();
        let outcome = parse_file(
            &path,
            &mut strings,
            &|| false,
            |_| {},
            |_, evs| {
                got.extend(evs);
                true
            },
        )
        .expect("parse");
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.len(), expected.len());
        assert_eq!(outcome.stats.lines, one.stats().lines);
        assert_eq!(outcome.stats.warnings, 1);
        assert_eq!(outcome.warnings[0].line, bad_line);
        assert_eq!(one.warnings()[0].line, bad_line);
        assert_eq!(outcome.stats.events, one.stats().events);
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
