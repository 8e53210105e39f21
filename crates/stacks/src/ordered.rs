//! Restoring per-thread time order for writers that emit some slices late.
//!
//! The legacy writer learns about a frame's start only after it has written later
//! events (a return into a caller it never saw, a frame opened before the snapshot),
//! and writes such frames at the end with their earlier timestamps, as magic-trace
//! does. Perfetto sorts on import, but a file whose per-thread times go backwards is
//! harder for every other reader. [`OrderedSink`] sits between a writer and its real
//! sink and re-emits everything in per-thread time order.
//!
//! Memory stays bounded: events arriving in order (nearly all of them) are spooled —
//! in memory up to a limit (16 MiB), then to a temporary file — and only the few *late*
//! events are held in memory. At [`OrderedSink::finish`] the spool is replayed and
//! each late event is slotted in before the first spooled event of its thread with a
//! later time. Ties keep arrival order (late events after in-order events with the
//! same time), which is exactly how Perfetto's stable sort reads magic-trace's files.
//!
//! ```
//! use ptscope_stacks::ordered::OrderedSink;
//! use ptscope_stacks::transcript::TranscriptSink;
//! use ptscope_stacks::TraceSink;
//!
//! let mut s = OrderedSink::new(TranscriptSink::default());
//! let t = s.allocate_thread(1, "main");
//! s.duration_begin(t, "inner", 10, &[]);
//! s.duration_end(t, "inner", 20, &[]);
//! s.duration_begin(t, "outer", 0, &[]); // learnt late
//! s.duration_end(t, "outer", 30, &[]);
//! let inner = s.finish().expect("no I/O error");
//! assert_eq!(
//!     inner.lines,
//!     ["->      0ns BEGIN outer", "->     10ns BEGIN inner", "->     20ns END   inner", "->     30ns END   outer"]
//! );
//! ```

use crate::sink::{Arg, ArgValue, TraceSink};
use rustc_hash::FxHashMap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// Spooled bytes kept in memory before spilling to a temporary file.
const DEFAULT_MEMORY_LIMIT: usize = 16 << 20;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Op {
    Begin = 1,
    End = 2,
    Complete = 3,
    Instant = 4,
    Counter = 5,
}

impl Op {
    fn from_u8(b: u8) -> Option<Op> {
        Some(match b {
            1 => Op::Begin,
            2 => Op::End,
            3 => Op::Complete,
            4 => Op::Instant,
            5 => Op::Counter,
            _ => return None,
        })
    }
}

/// One buffered call, with names as ids into the sink's string table.
#[derive(Clone, Debug)]
struct Rec {
    op: Op,
    thread: u32,
    time: i64,
    end: i64,
    name: u32,
    args: Vec<(u32, RecArg)>,
}

#[derive(Copy, Clone, Debug)]
enum RecArg {
    Int(i64),
    Str(u32),
    Interned(u32),
    Pointer(u64),
    Float(f64),
}

enum Spool {
    Memory(Vec<u8>),
    File {
        path: TempPath,
        out: BufWriter<File>,
    },
}

/// A temporary file that is removed when dropped, whatever path ptscope leaves by.
struct TempPath(PathBuf);

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A [`TraceSink`] adapter that delivers events to `S` in per-thread time order.
pub struct OrderedSink<S: TraceSink> {
    inner: S,
    threads: Vec<S::Thread>,
    last_time: Vec<i64>,
    strings: FxHashMap<Box<str>, u32>,
    string_list: Vec<Box<str>>,
    spool: Spool,
    spooled: u64,
    late: Vec<(u32, i64, u64, Rec)>,
    seq: u64,
    memory_limit: usize,
    error: Option<io::Error>,
    buf: Vec<u8>,
}

impl<S: TraceSink> OrderedSink<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        OrderedSink {
            inner,
            threads: Vec::new(),
            last_time: Vec::new(),
            strings: FxHashMap::default(),
            string_list: Vec::new(),
            spool: Spool::Memory(Vec::new()),
            spooled: 0,
            late: Vec::new(),
            seq: 0,
            memory_limit: DEFAULT_MEMORY_LIMIT,
            error: None,
            buf: Vec::with_capacity(256),
        }
    }

    /// Spills the spool to a temporary file beyond `bytes` (default 16 MiB).
    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// How many events arrived out of order (and were held in memory).
    pub fn late_events(&self) -> usize {
        self.late.len()
    }

    /// The wrapped sink, e.g. for its statistics.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.string_list.len() as u32;
        self.string_list.push(s.into());
        self.strings.insert(s.into(), id);
        id
    }

    fn push(&mut self, op: Op, thread: u32, time: i64, end: i64, name: &str, args: &[Arg<'_>]) {
        let name = self.intern(name);
        let args = args
            .iter()
            .map(|a| {
                let v = match a.value {
                    ArgValue::Int(i) => RecArg::Int(i),
                    ArgValue::Str(s) => RecArg::Str(self.intern(s)),
                    ArgValue::Interned(s) => RecArg::Interned(self.intern(s)),
                    ArgValue::Pointer(p) => RecArg::Pointer(p),
                    ArgValue::Float(f) => RecArg::Float(f),
                };
                (self.intern(a.name), v)
            })
            .collect();
        let rec = Rec {
            op,
            thread,
            time,
            end,
            name,
            args,
        };
        let t = thread as usize;
        if t < self.last_time.len() && time < self.last_time[t] {
            self.seq += 1;
            self.late.push((thread, time, self.seq, rec));
            return;
        }
        if t < self.last_time.len() {
            self.last_time[t] = time;
        }
        self.spool_rec(&rec);
    }

    fn spool_rec(&mut self, rec: &Rec) {
        if self.error.is_some() {
            return;
        }
        self.buf.clear();
        encode(rec, &mut self.buf);
        self.spooled += 1;
        let result = match &mut self.spool {
            Spool::Memory(v) => {
                v.extend_from_slice(&self.buf);
                if v.len() > self.memory_limit {
                    self.spill()
                } else {
                    Ok(())
                }
            }
            Spool::File { out, .. } => out.write_all(&self.buf),
        };
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    fn spill(&mut self) -> io::Result<()> {
        let path = std::env::temp_dir().join(format!(
            "ptscope-spool-{}-{:x}.bin",
            std::process::id(),
            self as *const _ as usize
        ));
        let file = File::options()
            .write(true)
            .create_new(true)
            .read(true)
            .open(&path)?;
        let path = TempPath(path);
        let mut out = BufWriter::with_capacity(1 << 20, file);
        if let Spool::Memory(v) = &self.spool {
            out.write_all(v)?;
        }
        self.spool = Spool::File { path, out };
        Ok(())
    }

    /// Replays everything into the inner sink in order and returns it.
    pub fn finish(mut self) -> io::Result<S> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        // Late events per thread, by time, ties in arrival order.
        let mut late = std::mem::take(&mut self.late);
        late.sort_by_key(|&(th, time, seq, _)| (th, time, seq));
        let mut starts: Vec<usize> = vec![late.len(); self.threads.len() + 1];
        for (i, (th, ..)) in late.iter().enumerate().rev() {
            starts[*th as usize] = i;
        }
        let mut next: Vec<usize> = (0..self.threads.len()).map(|t| starts[t]).collect();
        let spool = std::mem::replace(&mut self.spool, Spool::Memory(Vec::new()));
        let result = match spool {
            Spool::Memory(v) => self.replay(&mut &v[..], &late, &mut next),
            Spool::File { path, out } => {
                let r = out.into_inner().map_err(|e| e.into_error()).and_then(|f| {
                    drop(f);
                    let mut r = BufReader::with_capacity(1 << 20, File::open(&path.0)?);
                    self.replay(&mut r, &late, &mut next)
                });
                drop(path);
                r
            }
        };
        result?;
        // Late events later than every spooled event of their thread.
        for t in 0..self.threads.len() {
            while next[t] < late.len() && late[next[t]].0 as usize == t {
                let rec = late[next[t]].3.clone();
                self.emit(&rec);
                next[t] += 1;
            }
        }
        Ok(self.inner)
    }

    fn replay(
        &mut self,
        r: &mut impl Read,
        late: &[(u32, i64, u64, Rec)],
        next: &mut [usize],
    ) -> io::Result<()> {
        let mut rec = Rec {
            op: Op::Begin,
            thread: 0,
            time: 0,
            end: 0,
            name: 0,
            args: Vec::new(),
        };
        for _ in 0..self.spooled {
            decode(r, &mut rec)?;
            let t = rec.thread as usize;
            while next[t] < late.len()
                && late[next[t]].0 as usize == t
                && late[next[t]].1 < rec.time
            {
                let l = late[next[t]].3.clone();
                self.emit(&l);
                next[t] += 1;
            }
            self.emit(&rec);
        }
        Ok(())
    }

    fn emit(&mut self, rec: &Rec) {
        let thread = self.threads[rec.thread as usize];
        let strs = &self.string_list;
        let args: Vec<Arg<'_>> = rec
            .args
            .iter()
            .map(|(n, v)| Arg {
                name: &strs[*n as usize],
                value: match *v {
                    RecArg::Int(i) => ArgValue::Int(i),
                    RecArg::Str(s) => ArgValue::Str(&strs[s as usize]),
                    RecArg::Interned(s) => ArgValue::Interned(&strs[s as usize]),
                    RecArg::Pointer(p) => ArgValue::Pointer(p),
                    RecArg::Float(f) => ArgValue::Float(f),
                },
            })
            .collect();
        let name = &strs[rec.name as usize];
        match rec.op {
            Op::Begin => self.inner.duration_begin(thread, name, rec.time, &args),
            Op::End => self.inner.duration_end(thread, name, rec.time, &args),
            Op::Complete => self
                .inner
                .duration_complete(thread, name, rec.time, rec.end, &args),
            Op::Instant => self.inner.duration_instant(thread, name, rec.time, &args),
            Op::Counter => self.inner.counter(thread, name, rec.time, &args),
        }
    }
}

fn encode(rec: &Rec, out: &mut Vec<u8>) {
    out.push(rec.op as u8);
    out.extend_from_slice(&rec.thread.to_le_bytes());
    out.extend_from_slice(&rec.time.to_le_bytes());
    if rec.op == Op::Complete {
        out.extend_from_slice(&rec.end.to_le_bytes());
    }
    out.extend_from_slice(&rec.name.to_le_bytes());
    out.push(rec.args.len().min(255) as u8);
    for (name, v) in rec.args.iter().take(255) {
        out.extend_from_slice(&name.to_le_bytes());
        let (tag, bits) = match *v {
            RecArg::Int(i) => (0u8, i as u64),
            RecArg::Str(s) => (1, s as u64),
            RecArg::Interned(s) => (2, s as u64),
            RecArg::Pointer(p) => (3, p),
            RecArg::Float(f) => (4, f.to_bits()),
        };
        out.push(tag);
        out.extend_from_slice(&bits.to_le_bytes());
    }
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn decode(r: &mut impl Read, rec: &mut Rec) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "corrupt ptscope spool file");
    let [op] = read_array::<1>(r)?;
    rec.op = Op::from_u8(op).ok_or_else(bad)?;
    rec.thread = u32::from_le_bytes(read_array(r)?);
    rec.time = i64::from_le_bytes(read_array(r)?);
    rec.end = if rec.op == Op::Complete {
        i64::from_le_bytes(read_array(r)?)
    } else {
        rec.time
    };
    rec.name = u32::from_le_bytes(read_array(r)?);
    let [n] = read_array::<1>(r)?;
    rec.args.clear();
    for _ in 0..n {
        let name = u32::from_le_bytes(read_array(r)?);
        let [tag] = read_array::<1>(r)?;
        let bits = u64::from_le_bytes(read_array(r)?);
        let v = match tag {
            0 => RecArg::Int(bits as i64),
            1 => RecArg::Str(bits as u32),
            2 => RecArg::Interned(bits as u32),
            3 => RecArg::Pointer(bits),
            4 => RecArg::Float(f64::from_bits(bits)),
            _ => return Err(bad()),
        };
        rec.args.push((name, v));
    }
    Ok(())
}

impl<S: TraceSink> TraceSink for OrderedSink<S> {
    type Thread = u32;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.inner.allocate_pid(name)
    }

    fn allocate_thread(&mut self, pid: u32, name: &str) -> u32 {
        let t = self.inner.allocate_thread(pid, name);
        self.threads.push(t);
        self.last_time.push(i64::MIN);
        (self.threads.len() - 1) as u32
    }

    fn rename_pid(&mut self, pid: u32, name: &str) {
        self.inner.rename_pid(pid, name);
    }

    fn rename_thread(&mut self, thread: u32, name: &str) {
        // Names are not timed: they go straight through, ahead of the held slices.
        if let Some(&t) = self.threads.get(thread as usize) {
            self.inner.rename_thread(t, name);
        }
    }

    fn duration_begin(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Begin, thread, time, time, name, args);
    }

    fn duration_end(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::End, thread, time, time, name, args);
    }

    fn duration_complete(
        &mut self,
        thread: u32,
        name: &str,
        start: i64,
        end: i64,
        args: &[Arg<'_>],
    ) {
        self.push(Op::Complete, thread, start, end, name, args);
    }

    fn duration_instant(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Instant, thread, time, time, name, args);
    }

    fn counter(&mut self, thread: u32, name: &str, time: i64, args: &[Arg<'_>]) {
        self.push(Op::Counter, thread, time, time, name, args);
    }

    fn warning(&mut self, message: &str) {
        self.inner.warning(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::TranscriptSink;

    fn script(s: &mut OrderedSink<TranscriptSink>) {
        let a = s.allocate_thread(1, "a");
        let b = s.allocate_thread(1, "b");
        for i in 0..1000 {
            s.duration_begin(a, "f", 100 + i * 10, &[Arg::new("i", ArgValue::Int(i))]);
            s.duration_end(a, "f", 105 + i * 10, &[]);
            s.counter(b, "c", 100 + i, &[Arg::new("v", ArgValue::Float(i as f64))]);
        }
        s.duration_begin(a, "late-root", 50, &[Arg::new("s", ArgValue::Str("x"))]);
        s.duration_complete(b, "late-complete", 10, 99999, &[]);
        s.duration_begin(a, "late-mid", 155, &[]);
        s.duration_end(a, "late-root", 20_000, &[]);
    }

    #[test]
    fn spilled_and_in_memory_replays_are_identical_and_ordered() {
        let mut mem = OrderedSink::new(TranscriptSink::default());
        script(&mut mem);
        let mut disk = OrderedSink::new(TranscriptSink::default()).with_memory_limit(100);
        script(&mut disk);
        assert!(matches!(disk.spool, Spool::File { .. }));
        let path = match &disk.spool {
            Spool::File { path, .. } => path.0.clone(),
            Spool::Memory(_) => unreachable!(),
        };
        assert_eq!(mem.late_events(), 3);
        let mem = mem.finish().expect("mem");
        let disk = disk.finish().expect("disk");
        assert!(!path.exists(), "spool file removed");
        assert_eq!(mem.lines, disk.lines);
        assert_eq!(mem.lines[0], "->     50ns BEGIN late-root");
        assert_eq!(mem.lines[1], "->    100ns BEGIN f");
        assert_eq!(mem.lines[3], "->     10ns BEGIN late-complete");
        // late-mid (155) goes after f@150's begin/end... and before f@160.
        let i = mem
            .lines
            .iter()
            .position(|l| l.ends_with("late-mid"))
            .expect("late-mid");
        assert_eq!(mem.lines[i - 1], "->    155ns END   f");
        assert_eq!(mem.lines[i + 1], "->    160ns BEGIN f");
    }
}
