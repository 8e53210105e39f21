//! JIT symbol maps (`/tmp/perf-PID.map`).
//!
//! `/tmp` is writable by everyone, so anyone can create `/tmp/perf-PID.map` for a
//! process that is not theirs and put names of their choosing into a trace ptscope
//! (often root) writes. A map is therefore read only if its owner is trusted
//! ([`MapTrust`]: root, the user ptscope runs as, and users the caller vouches for,
//! such as the traced process's own user), it is opened without following a symbolic
//! link, and the owner is taken from the opened file (`fstat`), so it cannot be
//! swapped between the check and the read. perf 6.1 itself reads these maps with no
//! owner check, so the decoders apply the same rule to the names perf resolved from
//! them ([`MapTrust::check_path`]).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
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

/// The users whose JIT maps are believed: root, the effective user ptscope runs as, and
/// any the caller adds (the traced process's user, when it is known for certain).
#[derive(Clone, Debug)]
pub struct MapTrust {
    uids: Vec<u32>,
}

impl Default for MapTrust {
    fn default() -> Self {
        MapTrust::new()
    }
}

impl MapTrust {
    /// Root and the current effective user: perf's own rule for files it reads on
    /// someone's behalf (`perf.data`, `~/.perfconfig`).
    pub fn new() -> Self {
        let mut uids = vec![0];
        // `/proc/self` is owned by the effective user (this crate forbids `unsafe`, so
        // no `geteuid`); without /proc only root is believed.
        if let Some(euid) = std::fs::metadata("/proc/self").ok().map(|m| m.uid()) {
            if euid != 0 {
                uids.push(euid);
            }
        }
        MapTrust { uids }
    }

    /// Also believes maps owned by `uid` (e.g. the traced process's user, read from
    /// [`process_owner`] while the process is known to be the traced one).
    pub fn with_uid(mut self, uid: u32) -> Self {
        if !self.uids.contains(&uid) {
            self.uids.push(uid);
        }
        self
    }

    /// The trusted user ids.
    pub fn uids(&self) -> &[u32] {
        &self.uids
    }

    /// Opens `path` for reading if it is a regular file (not a symbolic link, FIFO or
    /// device) owned by a trusted user; otherwise says why it is not believed.
    pub fn open(&self, path: &Path) -> std::result::Result<File, Untrusted> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            // No symlink is followed, and a FIFO planted under the name cannot block us.
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| Untrusted {
                path: path.to_path_buf(),
                why: if e.raw_os_error() == Some(libc::ELOOP) {
                    "it is a symbolic link".into()
                } else {
                    format!("it cannot be opened ({e})")
                },
            })?;
        // The owner of the file that was opened, not of whatever the path names now.
        let meta = file.metadata().map_err(|e| Untrusted {
            path: path.to_path_buf(),
            why: format!("it cannot be examined ({e})"),
        })?;
        if !meta.is_file() {
            return Err(Untrusted {
                path: path.to_path_buf(),
                why: "it is not a regular file".into(),
            });
        }
        if !self.uids.contains(&meta.uid()) {
            return Err(Untrusted {
                path: path.to_path_buf(),
                why: format!(
                    "it is owned by uid {}, and only maps owned by uid {} are believed (root, the user decoding, and users the caller vouches for)",
                    meta.uid(),
                    self.uids
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(file)
    }

    /// Whether names perf read from `path` can be believed (see [`MapTrust::open`]).
    pub fn check_path(&self, path: &Path) -> std::result::Result<(), Untrusted> {
        self.open(path).map(drop)
    }
}

/// A JIT map that was not read, and why: a warning for the user, not an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ignoring JIT symbols in {}: {why}", path.display())]
pub struct Untrusted {
    /// The map.
    pub path: PathBuf,
    /// Why it is not believed.
    pub why: String,
}

/// The user owning process `pid` (the owner of `/proc/PID`), or `None` if it is gone.
/// Only meaningful while the caller knows `pid` is still the traced process (e.g.
/// during `attach`): a pid is reused once its process exits.
pub fn process_owner(pid: u32) -> Option<u32> {
    let dir = File::open(format!("/proc/{pid}")).ok()?;
    dir.metadata().ok().map(|m| m.uid())
}

/// The JIT map path of a process: perf's `/tmp/perf-PID.map`.
pub fn jit_map_path(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/perf-{pid}.map"))
}

/// True for a DSO name perf gives JIT code described by a perf map (`/tmp/perf-PID.map`).
pub fn is_jit_map_name(dso: &str) -> bool {
    dso.strip_prefix("/tmp/perf-")
        .and_then(|r| r.strip_suffix(".map"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

impl PerfMap {
    /// Reads `/tmp/perf-PID.map` if `trust` believes it: `Ok(Err(why))` when the map
    /// exists but is not believed (a warning to show; the map is ignored).
    pub fn for_pid(pid: u32, trust: &MapTrust) -> Result<std::result::Result<Self, Untrusted>> {
        Self::load(jit_map_path(pid), trust)
    }

    /// Reads a perf map file if `trust` believes it (see [`MapTrust::open`]); malformed
    /// lines are skipped and counted. A missing or unreadable file is an error; one
    /// that is not believed is `Ok(Err(why))`.
    pub fn load(
        path: impl AsRef<Path>,
        trust: &MapTrust,
    ) -> Result<std::result::Result<Self, Untrusted>> {
        let path = path.as_ref();
        // A missing file is an ordinary error, not a trust question.
        std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
        let mut file = match trust.open(path) {
            Ok(f) => f,
            Err(u) => return Ok(Err(u)),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        Ok(Ok(Self::parse(&String::from_utf8_lossy(&bytes))))
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
