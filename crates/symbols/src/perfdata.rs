//! The executable mappings recorded in a `perf.data` file (`PERF_RECORD_MMAP`/`MMAP2`),
//! to turn the absolute addresses of Intel PT branches into file offsets.
//!
//! perf prints the frames of a sampled call stack as file offsets already, but a branch's
//! `ip` and `addr` as the process's own addresses: naming those per function needs the
//! mapping they fell in. Only the record headers are walked (AUX data is skipped whole),
//! so this reads a few bytes per record.

use std::path::Path;

use rustc_hash::FxHashMap;

use crate::elf::MappedFile;
use crate::error::{Error, Result};

/// `PERF_RECORD_MMAP`.
const REC_MMAP: u32 = 1;
/// `PERF_RECORD_MMAP2`.
const REC_MMAP2: u32 = 10;
/// `PERF_RECORD_LOST`: the kernel dropped records because perf's ring buffer was full.
const REC_LOST: u32 = 2;
/// `PERF_RECORD_LOST_SAMPLES`: samples dropped (perf writes the count it read back).
const REC_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_AUXTRACE`: its AUX data follows the record, outside `size`.
const REC_AUXTRACE: u32 = 71;
/// `PERF_RECORD_MISC_MMAP_DATA`: a data (not code) mapping.
const MISC_MMAP_DATA: u16 = 1 << 13;
/// `PROT_EXEC`.
const PROT_EXEC: u32 = 4;
/// `PERF_SAMPLE_STACK_USER`: samples carry a copy of the user stack (DWARF unwinding).
const SAMPLE_STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_BRANCH_STACK`: samples carry branch records (`--call-graph lbr`).
const SAMPLE_BRANCH_STACK: u64 = 1 << 11;
/// `HEADER_BUILD_ID`: the feature section listing the build ids of the DSOs with samples.
const FEAT_BUILD_ID: usize = 2;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an `MMAP2` record holds a build id, not a device
/// and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: the build id's length is given (else it is 20).
const MISC_BUILD_ID_SIZE: u16 = 1 << 15;

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

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl Mappings {
    /// Reads the mappings of the `perf.data` file at `path`. A file cut short (a
    /// recording that was killed) gives the mappings before the cut.
    pub fn read(path: &Path) -> Result<Self> {
        let file = MappedFile::open_regular(path)?;
        Self::parse(file.bytes()).ok_or_else(|| {
            Error::malformed(
                path,
                "perf.data header",
                "not a perf.data file (no PERFILE2 magic)",
            )
        })
    }

    /// Parses `perf.data` bytes; `None` when they do not start with perf's magic.
    pub fn parse(b: &[u8]) -> Option<Self> {
        if b.get(..8)? != b"PERFILE2" {
            return None;
        }
        let header_size = u64_at(b, 8)?;
        // A pipe-mode file is a 16-byte header followed by records; a regular one names
        // its data section.
        let (mut pos, end) = if header_size == 16 {
            (16usize, b.len())
        } else {
            let off = u64_at(b, 40)?;
            let size = u64_at(b, 48)?;
            let end = off.saturating_add(size).min(b.len() as u64);
            (usize::try_from(off).ok()?, usize::try_from(end).ok()?)
        };
        let mut maps = Mappings::default();
        while pos + 8 <= end {
            let kind = u32_at(b, pos)?;
            let misc = u16_at(b, pos + 4)?;
            let size = u16_at(b, pos + 6)? as usize;
            if size < 8 || pos + size > end {
                break;
            }
            let rec = &b[pos..pos + size];
            let mut next = pos + size;
            match kind {
                REC_MMAP | REC_MMAP2 if misc & MISC_MMAP_DATA == 0 => {
                    let name_at = if kind == REC_MMAP { 40 } else { 72 };
                    let exec =
                        kind == REC_MMAP || u32_at(rec, 64).is_some_and(|p| p & PROT_EXEC != 0);
                    if let (Some(pid), Some(start), Some(len), Some(pgoff), Some(name)) = (
                        u32_at(rec, 8),
                        u64_at(rec, 16),
                        u64_at(rec, 24),
                        u64_at(rec, 32),
                        rec.get(name_at..),
                    ) {
                        let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
                        // `--buildid-mmap`: the build id is in the record itself.
                        if kind == REC_MMAP2 && misc & MISC_MMAP_BUILD_ID != 0 && exec {
                            let n = usize::from(rec.get(40).copied().unwrap_or(0)).min(20);
                            if let (Some(id), Ok(path)) =
                                (rec.get(44..44 + n), std::str::from_utf8(name))
                            {
                                if n > 0 && !maps.build_ids.contains_key(path) {
                                    maps.build_ids.insert(path.into(), id.to_vec());
                                }
                            }
                        }
                        if exec && name.first() == Some(&b'/') {
                            maps.by_pid.entry(pid).or_default().push(Mapping {
                                start,
                                len,
                                pgoff,
                                path: String::from_utf8_lossy(name).into(),
                            });
                        }
                    }
                }
                REC_LOST => {
                    maps.lost.stretches += 1;
                    maps.lost.records += u64_at(rec, 16).unwrap_or(0);
                }
                REC_LOST_SAMPLES => maps.lost.samples += u64_at(rec, 8).unwrap_or(0),
                REC_AUXTRACE => {
                    let aux = u64_at(rec, 8).and_then(|a| usize::try_from(a).ok());
                    next = match aux.and_then(|a| next.checked_add(a)) {
                        Some(n) => n,
                        None => break,
                    };
                }
                _ => {}
            }
            pos = next;
        }
        if header_size != 16 {
            maps.read_build_ids(b);
            maps.other_stacks =
                sample_types(b).any(|t| t & (SAMPLE_STACK_USER | SAMPLE_BRANCH_STACK) != 0);
        }
        Some(maps)
    }

    /// Reads the `HEADER_BUILD_ID` feature section (after the data section, found through
    /// the header's feature bitmap); a damaged one is ignored.
    fn read_build_ids(&mut self, b: &[u8]) -> Option<()> {
        let has =
            |bit: usize| u64_at(b, 72 + 8 * (bit / 64)).is_some_and(|w| w >> (bit % 64) & 1 == 1);
        if !has(FEAT_BUILD_ID) {
            return None;
        }
        let index = (0..FEAT_BUILD_ID).filter(|&i| has(i)).count();
        let table = u64_at(b, 40)?.checked_add(u64_at(b, 48)?)?;
        let entry = usize::try_from(table).ok()?.checked_add(16 * index)?;
        let start = usize::try_from(u64_at(b, entry)?).ok()?;
        let end = start.checked_add(usize::try_from(u64_at(b, entry + 8)?).ok()?)?;
        let section = b.get(start..end)?;
        let mut pos = 0;
        while pos + 36 <= section.len() {
            let misc = u16_at(section, pos + 4)?;
            let size = u16_at(section, pos + 6)? as usize;
            if size < 36 || pos + size > section.len() {
                break;
            }
            let rec = &section[pos..pos + size];
            let len = if misc & MISC_BUILD_ID_SIZE != 0 {
                (rec[32] as usize).min(20)
            } else {
                20
            };
            let name = &rec[36..];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            self.build_ids.insert(
                String::from_utf8_lossy(name).into(),
                rec[12..12 + len].to_vec(),
            );
            pos += size;
        }
        Some(())
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

/// The `sample_type` of every event attribute in the header's attribute section.
fn sample_types(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let attr_size = u64_at(b, 16)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let start = u64_at(b, 24)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let size = u64_at(b, 32)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let count = if attr_size >= 32 { size / attr_size } else { 0 };
    (0..count.min(4096))
        .filter_map(move |i| u64_at(b, start.checked_add(i * attr_size)?.checked_add(24)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap2(pid: u32, start: u64, len: u64, pgoff: u64, prot: u32, name: &str) -> Vec<u8> {
        let mut r = Vec::new();
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        while !n.len().is_multiple_of(8) {
            n.push(0);
        }
        let size = 72 + n.len();
        r.extend_from_slice(&REC_MMAP2.to_le_bytes());
        r.extend_from_slice(&2u16.to_le_bytes());
        r.extend_from_slice(&(size as u16).to_le_bytes());
        r.extend_from_slice(&pid.to_le_bytes());
        r.extend_from_slice(&pid.to_le_bytes());
        for v in [start, len, pgoff] {
            r.extend_from_slice(&v.to_le_bytes());
        }
        r.extend_from_slice(&[0; 24]);
        r.extend_from_slice(&prot.to_le_bytes());
        r.extend_from_slice(&0u32.to_le_bytes());
        r.extend_from_slice(&n);
        r
    }

    #[test]
    fn mappings_from_records_and_a_cut_file() {
        let mut data = Vec::new();
        data.extend(mmap2(7, 0x5000_0000, 0x2000, 0x1000, 5, "/usr/bin/prog"));
        data.extend(mmap2(7, 0x6000_0000, 0x2000, 0, 3, "/usr/bin/data"));
        // AUX data after an AUXTRACE record is skipped by its own size.
        let mut aux = vec![0u8; 48];
        aux[..4].copy_from_slice(&REC_AUXTRACE.to_le_bytes());
        aux[6..8].copy_from_slice(&48u16.to_le_bytes());
        aux[8..16].copy_from_slice(&16u64.to_le_bytes());
        data.extend(aux);
        data.extend([0xffu8; 16]);
        data.extend(mmap2(9, 0x7000_0000, 0x1000, 0, 5, "/usr/lib/x.so"));
        let mut file = b"PERFILE2".to_vec();
        file.extend(104u64.to_le_bytes());
        file.resize(40, 0);
        file.extend(104u64.to_le_bytes());
        file.extend((data.len() as u64).to_le_bytes());
        file.resize(104, 0);
        file.extend(&data);
        let m = Mappings::parse(&file).unwrap();
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(
            m.file_offset(Some(7), "/usr/bin/prog", 0x5000_0010),
            Some(0x1010)
        );
        assert_eq!(m.file_offset(Some(7), "/usr/bin/data", 0x6000_0010), None);
        // A forked child without records of its own.
        assert_eq!(
            m.file_offset(Some(8), "/usr/lib/x.so", 0x7000_0004),
            Some(4)
        );
        assert_eq!(m.file_offset(Some(7), "/usr/bin/prog", 0x5000_2000), None);
        // Cut in the middle of the last record: what came before is kept.
        let cut = &file[..file.len() - 10];
        assert_eq!(Mappings::parse(cut).unwrap().len(), 1);
        assert!(Mappings::parse(b"not perf").is_none());
    }
}
