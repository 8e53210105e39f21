//! The executable mappings recorded in a `perf.data` file (`PERF_RECORD_MMAP`/`MMAP2`),
//! to turn the absolute addresses of Intel PT branches into file offsets, with the build
//! ids perf recorded and what the kernel dropped.
//!
//! perf prints the frames of a sampled call stack as file offsets already, but a branch's
//! `ip` and `addr` as the process's own addresses: naming those per function needs the
//! mapping they fell in.

use crate::records::Record;
use crate::PerfData;
use rustc_hash::FxHashMap;
use std::path::Path;

/// One executable mapping of a file into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mapping {
    start: u64,
    len: u64,
    pgoff: u64,
    path: Box<str>,
}

/// The executable file mappings of every process in a recording.
#[derive(Clone, Debug, Default)]
pub struct Mappings {
    by_pid: FxHashMap<u32, Vec<Mapping>>,
    /// What perf recorded as each file's build id when it was traced.
    build_ids: FxHashMap<Box<str>, Vec<u8>>,
    /// Some event copied user stacks (`--call-graph dwarf`) or branch records (`lbr`):
    /// its call stacks do not come from walking frame pointers.
    other_stacks: bool,
    /// What the recording says perf could not keep.
    lost: Lost,
}

/// Records the kernel dropped while perf was recording (its ring buffer was full: perf
/// could not write out as fast as the events came, on a busy machine or with heavy
/// samples). The trace has holes where they were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// `PERF_RECORD_LOST` records: one per stretch of dropped records.
    pub stretches: u64,
    /// Records dropped, summed over those stretches.
    pub records: u64,
    /// Samples perf says were dropped (`PERF_RECORD_LOST_SAMPLES`).
    pub samples: u64,
}

impl Lost {
    /// Adds another file's counts.
    pub fn add(&mut self, other: Lost) {
        self.stretches += other.stretches;
        self.records += other.records;
        self.samples += other.samples;
    }

    /// Whether anything was dropped.
    pub fn any(&self) -> bool {
        self.records > 0 || self.samples > 0
    }
}

impl Mappings {
    /// Reads the mappings of the `perf.data` file at `path`. A file cut short (a
    /// recording that was killed) gives the mappings before the cut.
    pub fn read(path: &Path) -> Result<Self, crate::Error> {
        PerfData::open(path).map(|d| d.mappings())
    }

    /// Parses `perf.data` bytes; `None` when they are not a perf.data file.
    pub fn parse(b: &[u8]) -> Option<Self> {
        PerfData::from_bytes(b.to_vec(), "perf.data")
            .ok()
            .map(|d| d.mappings())
    }

    /// Collects what `data`'s records say (up to a damaged record, if any).
    pub(crate) fn from_perf_data(data: &PerfData) -> Self {
        let mut maps = Mappings::default();
        for r in data.records() {
            let Ok(r) = r else { break };
            match r.record {
                Record::Mmap(m) => {
                    let Ok(path) = std::str::from_utf8(m.path) else {
                        // perf names files as the kernel does; a path that is not
                        // UTF-8 is kept lossily, as before.
                        if m.exec && m.path.first() == Some(&b'/') {
                            maps.by_pid.entry(m.pid).or_default().push(Mapping {
                                start: m.start,
                                len: m.len,
                                pgoff: m.pgoff,
                                path: String::from_utf8_lossy(m.path).into(),
                            });
                        }
                        continue;
                    };
                    // `--buildid-mmap`: the build id is in the record itself.
                    if let (Some(id), true) = (m.build_id, m.exec) {
                        maps.build_ids
                            .entry(path.into())
                            .or_insert_with(|| id.as_bytes().to_vec());
                    }
                    if m.exec && path.starts_with('/') {
                        maps.by_pid.entry(m.pid).or_default().push(Mapping {
                            start: m.start,
                            len: m.len,
                            pgoff: m.pgoff,
                            path: path.into(),
                        });
                    }
                }
                Record::Lost { count, .. } => {
                    maps.lost.stretches += 1;
                    maps.lost.records += count;
                }
                Record::LostSamples { count } => maps.lost.samples += count,
                _ => {}
            }
        }
        for (path, id) in data.build_ids() {
            maps.build_ids.insert(
                String::from_utf8_lossy(&path).into(),
                id.as_bytes().to_vec(),
            );
        }
        maps.other_stacks = !data.is_pipe() && data.stacks_not_from_frame_pointers();
        maps
    }

    /// What the kernel dropped while perf recorded this file.
    pub fn lost(&self) -> Lost {
        self.lost
    }

    /// True when the recording's call stacks come from walking frame pointers: neither
    /// user stack copies (`--call-graph dwarf`) nor branch records (`--call-graph lbr`).
    pub fn frame_pointer_stacks(&self) -> bool {
        !self.other_stacks
    }

    /// The build id perf recorded for the file `path`, if it did.
    pub fn build_id(&self, path: &str) -> Option<&[u8]> {
        self.build_ids.get(path).map(Vec::as_slice)
    }

    /// Number of mappings read.
    pub fn len(&self) -> usize {
        self.by_pid.values().map(Vec::len).sum()
    }

    /// True when the recording held no executable file mappings.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The files process `pid` mapped executable, each once, in the order it mapped them
    /// (the kernel maps a program before its interpreter and libraries; perf lists the
    /// mappings of a process already running in address order, the program's first too).
    pub fn files_of(&self, pid: u32) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for m in self.by_pid.get(&pid).into_iter().flatten() {
            if !out.contains(&&*m.path) {
                out.push(&m.path);
            }
        }
        out
    }

    /// The address where process `pid` mapped file offset `offset` of the file `path`
    /// (the inverse of [`Mappings::file_offset`]), if an executable mapping holds it.
    pub fn address_of_offset(&self, pid: u32, path: &str, offset: u64) -> Option<u64> {
        let m = self
            .by_pid
            .get(&pid)?
            .iter()
            .rev()
            .find(|m| &*m.path == path && offset >= m.pgoff && offset - m.pgoff < m.len)?;
        Some(m.start + (offset - m.pgoff))
    }

    /// The file offset of `ip` in the file `path` as process `pid` mapped it. A process
    /// that forked without exec has no mappings of its own in the recording: the
    /// mappings of other processes of the same file are used when they agree.
    pub fn file_offset(&self, pid: Option<u32>, path: &str, ip: u64) -> Option<u64> {
        let hit = |m: &&Mapping| &*m.path == path && ip >= m.start && ip - m.start < m.len;
        let offset = |m: &Mapping| ip - m.start + m.pgoff;
        if let Some(m) = pid
            .and_then(|p| self.by_pid.get(&p))
            .and_then(|v| v.iter().rev().find(hit))
        {
            return Some(offset(m));
        }
        let mut found = None;
        for m in self.by_pid.values().flat_map(|v| v.iter().filter(hit)) {
            match found {
                None => found = Some(offset(m)),
                Some(o) if o == offset(m) => {}
                Some(_) => return None,
            }
        }
        found
    }
}
