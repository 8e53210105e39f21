//! The side band of a recording cut into pieces: what one perf.data file must be told
//! of the files before it.
//!
//! A sampling flight recorder has perf start a new file every so often and deletes the
//! oldest. perf announces a process (its name, `COMM`; its code, `MMAP2`; its parent,
//! `FORK`) once, in the file being written when it starts; `perf script` reads each
//! file alone. A process that began in an earlier file is, in every later one, a pid
//! without a name whose samples perf cannot unwind (it has no mappings to unwind
//! through): `[pid=N]` with kernel frames only. [`Sideband`] keeps those records from
//! the files as they go (a process's records are dropped once it exits, so it holds
//! what the live processes need), and [`PerfData::write_with_sideband`] writes a file
//! again with them at the start of its records, so each piece decodes on its own.
//!
//! ```
//! use ptscope_perf_data::{PerfData, Record, Sideband};
//!
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
//!     .join("../../tests/fixtures/sampling/lost_records.perf.data.gz");
//! let mut bytes = Vec::new();
//! std::io::Read::read_to_end(
//!     &mut flate2::read::GzDecoder::new(std::fs::File::open(path)?),
//!     &mut bytes,
//! )?;
//! let first = PerfData::from_bytes(bytes.clone(), "first")?;
//! let mut sideband = Sideband::default();
//! sideband.take(&first);
//! // The next piece (here: the same file again) with what the first one announced.
//! let mut out = Vec::new();
//! first.write_with_sideband(&sideband, &mut out)?;
//! let next = PerfData::from_bytes(out, "next")?;
//! let comms = |d: &PerfData| {
//!     d.records()
//!         .filter(|r| matches!(r, Ok(r) if matches!(r.record, Record::Comm { .. })))
//!         .count()
//! };
//! assert!(comms(&next) > comms(&first));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::cursor::word_at;
use crate::layout::{self, FEATURES_AT, HEADER_LEN};
use crate::records::kind;
use crate::PerfData;
use crate::Record;
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};
use std::io::{self, Write};

/// `PERF_RECORD_NAMESPACES`, `KSYMBOL`, `BPF_EVENT`, `CGROUP`: side band too (kernel
/// symbols of BPF programs, cgroup names).
const NAMESPACES: u32 = 16;
const KSYMBOL: u32 = 17;
const BPF_EVENT: u32 = 18;
const CGROUP: u32 = 19;
/// The process of the kernel's own records (pid -1 in the file).
const KERNEL: u32 = u32::MAX;
/// A record of a process that exited, dropped at the next compaction.
const GONE: u32 = u32::MAX - 1;

/// The records later files need of earlier ones (see the module documentation).
#[derive(Debug, Default, Clone)]
pub struct Sideband {
    /// The records, whole, one after another in the file's byte order.
    bytes: Vec<u8>,
    /// Each record: the process it is about (`u32::MAX` for the kernel's) and where it
    /// is in `bytes`.
    index: Vec<(u32, usize, usize)>,
    /// Whether `bytes` holds the byte order of big-endian files (all must agree).
    big: Option<bool>,
    /// The records held, by a hash of their bytes: perf announces the process it was
    /// given again at the start of every file, and once is enough.
    seen: FxHashMap<u64, Vec<usize>>,
}

impl Sideband {
    /// Takes in the side band of `data`, a file that came after those taken so far: its
    /// processes' names, mappings and forks; processes that exited in it are forgotten.
    /// A file of the other byte order than those before it is ignored.
    pub fn take(&mut self, data: &PerfData) {
        let big = data.endian().is_big();
        if data.is_pipe() || *self.big.get_or_insert(big) != big {
            return;
        }
        let file = data.bytes();
        // A process (not one of its threads) that ends in this file: nothing before its
        // end is about a live process. Found first, by time, because the file is not in
        // time order: each CPU's buffer goes out in chunks, so a short-lived process's
        // FORK (one CPU) can follow its EXIT (another) in the file.
        let mut ended: FxHashMap<u32, Option<u64>> = FxHashMap::default();
        for r in data.records().flatten() {
            if let Record::Exit(t) = r.record {
                if t.pid == t.tid && t.pid != KERNEL {
                    let at = ended.entry(t.pid).or_insert(r.sample.time);
                    *at = (*at).zip(r.sample.time).map(|(a, b)| a.max(b));
                }
            }
        }
        let mut exits = false;
        for pid in ended.keys() {
            for e in self.index.iter_mut().filter(|e| e.0 == *pid) {
                e.0 = GONE;
                exits = true;
            }
        }
        for r in data.records().flatten() {
            let Ok(at) = usize::try_from(r.offset) else {
                continue;
            };
            let (Some(ty), Some(size)) = (word_at(file, at, 4, big), word_at(file, at + 6, 2, big))
            else {
                continue;
            };
            let Some(record) = file.get(at..at + size as usize) else {
                continue;
            };
            let pid = word_at(file, at + 8, 4, big).unwrap_or(0) as u32;
            let pid = match ty as u32 {
                kind::MMAP | kind::COMM | kind::FORK | kind::MMAP2 | NAMESPACES => pid,
                KSYMBOL | BPF_EVENT | CGROUP => KERNEL,
                _ => continue,
            };
            // About a process that ended in this file, unless it is a later process
            // given the same pid (known only by time).
            if let Some(&end) = ended.get(&pid) {
                if end.zip(r.sample.time).is_none_or(|(end, t)| t <= end) {
                    continue;
                }
            }
            self.push(pid, record);
        }
        if exits {
            self.compact();
        }
    }

    /// Holds `record`, about `pid`, unless the same bytes are held already.
    fn push(&mut self, pid: u32, record: &[u8]) {
        let mut h = FxHasher::default();
        record.hash(&mut h);
        let same = self.seen.entry(h.finish()).or_default();
        if same.iter().any(|&i| {
            let (_, at, len) = self.index[i];
            &self.bytes[at..at + len] == record
        }) {
            return;
        }
        same.push(self.index.len());
        self.index.push((pid, self.bytes.len(), record.len()));
        self.bytes.extend_from_slice(record);
    }

    /// Drops the records of processes that exited.
    fn compact(&mut self) {
        let old = std::mem::take(self);
        self.big = old.big;
        for &(pid, at, len) in &old.index {
            if pid != GONE {
                self.push(pid, &old.bytes[at..at + len]);
            }
        }
    }

    /// The records held, in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl PerfData {
    /// Writes this file to `out` with `sideband`'s records before its own: the same file
    /// (attributes, features, records), its data section longer by them and the feature
    /// sections moved after it. A pipe-mode file, a file cut short, or one of the other
    /// byte order is an `InvalidInput` error (nothing was written).
    pub fn write_with_sideband(&self, sideband: &Sideband, out: &mut impl Write) -> io::Result<()> {
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why.to_owned());
        let big = self.endian.is_big();
        if self.pipe || self.cut_short.is_some() {
            return Err(invalid(
                "a pipe-mode or cut-short perf.data is not rewritten",
            ));
        }
        if sideband.big.is_some_and(|b| b != big) {
            return Err(invalid(
                "the side band's byte order differs from the file's",
            ));
        }
        let file = self.bytes();
        let put = |v: u64| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let extra = sideband.bytes.len() as u64;
        let (data_off, data_len) = layout::section(file, 40, big);
        let features: u32 = (0..4)
            .map(|i| {
                word_at(file, FEATURES_AT + 8 * i, 8, big)
                    .unwrap_or(0)
                    .count_ones()
            })
            .sum();
        // `check` (at open) found the data and the feature table inside the file.
        let data_start = data_off as usize;
        let table_at = (data_off + data_len) as usize;
        let table_end = table_at + features as usize * 16;
        let mut head = file[..HEADER_LEN].to_vec();
        head[48..56].copy_from_slice(&put(data_len + extra));
        // The obsolete `event_types` section, if any, moves like everything after the data.
        let (types_off, types_len) = layout::section(file, 56, big);
        if types_len > 0 && types_off >= data_off {
            head[56..64].copy_from_slice(&put(types_off + extra));
        }
        out.write_all(&head)?;
        out.write_all(&file[HEADER_LEN..data_start])?;
        out.write_all(&sideband.bytes)?;
        out.write_all(&file[data_start..table_at])?;
        for s in file[table_at..table_end].chunks_exact(16) {
            let (off, len) = layout::section(s, 0, big);
            let off = if off >= data_off { off + extra } else { off };
            out.write_all(&put(off))?;
            out.write_all(&put(len))?;
        }
        out.write_all(&file[table_end..])?;
        Ok(())
    }
}
