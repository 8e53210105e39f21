//! JIT symbol maps (`/tmp/perf-PID.map`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// One `START SIZE name` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First address.
    pub start: u64,
    /// Size in bytes.
    pub size: u64,
    /// Symbol name (may contain spaces).
    pub name: String,
}

impl PerfMapEntry {
    /// One past the last address (saturating).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.size)
    }

    /// True if `start <= addr < start + size`.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }
}

/// A perf map sorted by start address.
#[derive(Clone, Debug, Default)]
pub struct PerfMap {
    /// Sorted by start; ties keep file order.
    entries: Vec<PerfMapEntry>,
    /// File line order of each entry: JITs reuse freed code memory, so a later line wins.
    order: Vec<u32>,
    /// Running maximum of entry ends, so lookups can stop walking back early.
    max_end: Vec<u64>,
    malformed: usize,
}

impl PerfMap {
    /// Reads `/tmp/perf-PID.map`.
    pub fn for_pid(pid: u32) -> Result<Self> {
        Self::load(PathBuf::from(format!("/tmp/perf-{pid}.map")))
    }

    /// Reads a perf map file; malformed lines are skipped and counted.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Ok(Self::parse(&String::from_utf8_lossy(&bytes)))
    }

    /// Parses perf map text (`START SIZE name`, hex, optional `0x`); malformed lines are
    /// skipped and counted.
    pub fn parse(text: &str) -> Self {
        let mut raw: Vec<(PerfMapEntry, u32)> = Vec::new();
        let mut malformed = 0;
        for line in text.lines() {
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(line) {
                Some(e) => {
                    let n = raw.len() as u32;
                    raw.push((e, n));
                }
                None => malformed += 1,
            }
        }
        raw.sort_by_key(|(e, n)| (e.start, *n));
        let mut max_end = Vec::with_capacity(raw.len());
        let mut m = 0;
        for (e, _) in &raw {
            m = m.max(e.end());
            max_end.push(m);
        }
        let (entries, order) = raw.into_iter().unzip();
        PerfMap {
            entries,
            order,
            max_end,
            malformed,
        }
    }

    /// The entry containing `addr` (`start <= addr < start + size`); among overlapping
    /// entries, the one written last.
    pub fn lookup(&self, addr: u64) -> Option<&PerfMapEntry> {
        let mut i = self.entries.partition_point(|e| e.start <= addr);
        let mut best: Option<usize> = None;
        while i > 0 {
            i -= 1;
            if self.max_end[i] <= addr {
                break;
            }
            if self.entries[i].contains(addr) && best.is_none_or(|b| self.order[i] > self.order[b])
            {
                best = Some(i);
            }
        }
        best.map(|b| &self.entries[b])
    }

    /// All entries, by start address.
    pub fn entries(&self) -> &[PerfMapEntry] {
        &self.entries
    }

    /// How many lines were skipped as malformed.
    pub fn malformed_lines(&self) -> usize {
        self.malformed
    }
}

fn parse_line(line: &str) -> Option<PerfMapEntry> {
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok();
    let line = line.trim_start();
    let (start, rest) = line.split_once(char::is_whitespace)?;
    let (size, name) = rest.trim_start().split_once(char::is_whitespace)?;
    let name = name.trim();
    let start = hex(start)?;
    let size = hex(size)?;
    if name.is_empty() || start.checked_add(size).is_none() {
        return None;
    }
    Some(PerfMapEntry {
        start,
        size,
        name: name.to_owned(),
    })
}
