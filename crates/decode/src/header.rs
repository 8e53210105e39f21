//! What a `perf.data` file's header says about the recording (its events, their names
//! and modifiers, the PMU table), read in-process with the `linux-perf-data` crate
//! instead of running `perf evlist` and `perf report --header-only` and scraping text.
//!
//! Before the crate sees a file, its header is checked against the file's size: the
//! crate sizes allocations by counts and lengths taken from the file, so a damaged
//! header could otherwise ask for terabytes. A file cut short (its feature sections,
//! written last, missing) is read like perf reads it: events without their names.

use crate::perf::RecordingKind;
use linux_perf_data::linux_perf_event_reader::{AttrFlags, PerfEventType};
use linux_perf_data::{Feature, PerfFileReader};
use ptscope_event::TraceScope;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// perf's file header: magic, size, attr size, three sections, feature bitmap.
const HEADER_LEN: usize = 104;
/// Where the `event_types` section (obsolete since perf 3.x) sits in the header.
const EVENT_TYPES_AT: usize = 56;
/// Where the 256-bit feature bitmap sits in the header.
const FEATURES_AT: usize = 72;
/// `PERF_ATTR_SIZE_VER0`: no perf ever wrote smaller attributes.
const MIN_ATTR_SIZE: u64 = 64;
/// `PERF_TYPE_*` numbers of the kernel's fixed event types.
const FIXED_TYPES: [(u32, &str); 5] = [
    (0, "hardware"),
    (1, "software"),
    (2, "tracepoint"),
    (3, "hw_cache"),
    (5, "breakpoint"),
];

/// Why a `perf.data` header could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file does not start like a `perf.data` file.
    #[error(
        "{} is not a perf.data file (it does not start with perf's magic `PERFILE2`): \
         give the file `perf record` wrote",
        path.display()
    )]
    NotPerfData {
        /// The file.
        path: PathBuf,
    },
    /// The header is damaged or cut short.
    #[error(
        "the header of {} is damaged or truncated ({reason}): record again, or check \
         that the file was copied whole",
        path.display()
    )]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

/// One event of a recording, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDesc {
    /// The name `perf evlist` prints (`cpu-clock/freq=10000/u`, `intel_pt//u`); `None`
    /// when the file has no event descriptions (cut short, or an old perf).
    pub name: Option<String>,
    /// `perf_event_attr.type`: a `PERF_TYPE_*` or a dynamic PMU's number.
    pub pmu_type: u32,
    /// `exclude_user` was set.
    pub exclude_user: bool,
    /// `exclude_kernel` was set.
    pub exclude_kernel: bool,
}

/// What a `perf.data` header says about the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordingInfo {
    /// The events, in the order `perf evlist` lists them.
    pub events: Vec<EventDesc>,
    /// The `pmu mappings` feature: PMU number → name (`8 → intel_pt`); empty when absent.
    pub pmu_mappings: Vec<(u32, String)>,
    /// The `perf record` command line (the `cmdline` feature), when the file has it.
    pub cmdline: Vec<String>,
    /// The file ends before what its header says it holds.
    pub cut_short: Option<CutShort>,
}

/// How a `perf.data` file ends before what its header promises (a copy that stopped
/// early, a full disk, perf killed while writing it). perf cannot read such a file: it
/// refuses it ("incompatible file format") or, when only the sections it writes last
/// are missing, crashes on it (SIGSEGV, SIGBUS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutShort {
    /// The records end early: of `promised` bytes of them, the file holds `held`.
    Records {
        /// Bytes of records the header promises.
        promised: u64,
        /// Bytes of them the file holds.
        held: u64,
    },
    /// The records are whole; the sections after them (event names, build ids, the
    /// tracepoints' formats, …) are missing or cut.
    Features,
}

impl std::fmt::Display for CutShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CutShort::Records { promised, held } => write!(
                f,
                "its header promises {promised} bytes of records, but the file ends after \
                 {held} of them"
            ),
            CutShort::Features => f.write_str(
                "its records are whole, but the sections perf writes after them (event \
                 names, build ids, tracepoint formats) are missing",
            ),
        }
    }
}

impl RecordingInfo {
    /// The name of PMU number `ty`, from the file's table (or the kernel's fixed types).
    pub fn pmu_name(&self, ty: u32) -> Option<&str> {
        self.pmu_mappings
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, n)| n.as_str())
            .or_else(|| FIXED_TYPES.iter().find(|(t, _)| *t == ty).map(|(_, n)| *n))
    }

    /// True if an event is Intel PT: by its name, or by its PMU number in the file's
    /// table (a recording made elsewhere, where perf could not name the event).
    pub fn is_intel_pt(&self) -> bool {
        self.events.iter().any(|e| {
            e.name.as_deref().is_some_and(|n| n.contains("intel_pt"))
                || self.pmu_name(e.pmu_type) == Some("intel_pt")
        })
    }

    /// Intel PT or sampling, as decoding needs to know.
    pub fn kind(&self) -> RecordingKind {
        if self.is_intel_pt() {
            RecordingKind::IntelPt
        } else {
            RecordingKind::Sampling
        }
    }

    /// The recording followed only the given threads (`perf record -t`, which implies
    /// `--no-inherit`; `ptscope run/attach --single-thread`): threads and processes they
    /// started were not recorded. False when the command line is unknown.
    pub fn per_thread(&self) -> bool {
        let record = self.cmdline.iter().skip_while(|a| a.as_str() != "record");
        let mut args = record.skip(1).take_while(|a| a.as_str() != "--");
        args.any(|a| a == "-t" || a == "--per-thread" || a.starts_with("--tid"))
    }

    /// The scope a sampling recording asks for, from its first event's modifier (see
    /// [`scope_of_event_name`]); `None` for Intel PT recordings (their scope is a
    /// decoding choice) or when the event cannot be named.
    pub fn scope(&self) -> Option<TraceScope> {
        if self.is_intel_pt() {
            return None;
        }
        let first = self.events.first()?;
        match &first.name {
            Some(name) => scope_of_event_name(name),
            // perf names an event without a description from its attributes, with a
            // `:u` or `:k` modifier only when one level is excluded.
            None if self.pmu_name(first.pmu_type).is_none() => None,
            None if first.exclude_user && !first.exclude_kernel => Some(TraceScope::Kernel),
            None => Some(TraceScope::Userspace),
        }
    }
}

/// The scope an event name's modifier gives: `cpu-clock:k` → k, `cycles/freq=1000/uk`
/// → uk, `…:u` → u. None (perf's default, both levels counted) means u: a trace of user
/// space in which a sample's time in the kernel is one `[kernel: …]` frame; `ptscope
/// run` records its default so, and its `--trace-include-kernel` with an explicit `uk`.
pub fn scope_of_event_name(name: &str) -> Option<TraceScope> {
    if name.contains("intel_pt") || name.starts_with("unknown attr") {
        return None;
    }
    // `name/config/mods` or `name:mods`; a config may itself hold `:` or `/`.
    let mods = match (name.rfind('/'), name.rfind(':')) {
        (Some(slash), _) if name[..slash].contains('/') => &name[slash + 1..],
        (_, Some(colon)) => &name[colon + 1..],
        _ => "",
    };
    if !mods.chars().all(|c| c.is_ascii_alphabetic()) {
        return Some(TraceScope::UserspaceAndKernel);
    }
    Some(match (mods.contains('u'), mods.contains('k')) {
        (false, true) => TraceScope::Kernel,
        (true, true) => TraceScope::UserspaceAndKernel,
        _ => TraceScope::Userspace,
    })
}

/// Reads the header of the `perf.data` file at `path`.
pub fn read_header(path: &Path) -> Result<RecordingInfo, HeaderError> {
    let io_err = |source| HeaderError::Io {
        path: path.to_path_buf(),
        source,
    };
    let damaged = |reason: String| HeaderError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let len = file.metadata().map_err(io_err)?.len();
    let mut head = [0u8; HEADER_LEN];
    let got = read_up_to(&mut file, &mut head).map_err(io_err)?;
    let big = match &head[..8] {
        b"PERFILE2" => false,
        b"2ELIFREP" => true,
        _ => {
            return Err(HeaderError::NotPerfData {
                path: path.to_path_buf(),
            })
        }
    };
    if got < HEADER_LEN {
        return Err(damaged(format!("the file has only {got} bytes")));
    }
    let cut_short = check_layout(&mut file, &head, big, len).map_err(damaged)?;
    let keep_features = cut_short.is_none();
    // The obsolete `event_types` section is never read (its id lists are sized by the
    // file); without event descriptions the features are dropped as perf does when
    // they are cut off, and the events come from the attribute section.
    head[EVENT_TYPES_AT..EVENT_TYPES_AT + 16].fill(0);
    if keep_features {
        // Only perf's own features (bits 0-63) are read: simpleperf's (128 on) would
        // send the crate down paths these checks do not cover.
        head[FEATURES_AT + 8..HEADER_LEN].fill(0);
    } else {
        head[FEATURES_AT..HEADER_LEN].fill(0);
    }
    let reader = BufReader::new(PatchedHead { file, head, pos: 0 });
    // The crate is not expected to panic on what passed the checks; if it does, the
    // file is damaged in a way they missed, which is an error, not a crash.
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        PerfFileReader::parse_file(reader).map(|r| r.perf_file)
    }))
    .map_err(|_| damaged("the perf.data parser gave up".into()))?
    .map_err(|e| damaged(e.to_string()))?;
    let events = parsed
        .event_attributes()
        .iter()
        .map(|a| {
            let attr = a.attributes();
            EventDesc {
                name: a.name().map(str::to_owned),
                pmu_type: type_number(&attr.type_),
                exclude_user: attr.flags.contains(AttrFlags::EXCLUDE_USER),
                exclude_kernel: attr.flags.contains(AttrFlags::EXCLUDE_KERNEL),
            }
        })
        .collect();
    let pmu_mappings = parsed
        .feature_section_data(Feature::PMU_MAPPINGS)
        .map(|s| pmu_table(s, big))
        .unwrap_or_default();
    let cmdline = parsed
        .cmdline()
        .ok()
        .flatten()
        .map(|args| args.into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    Ok(RecordingInfo {
        events,
        pmu_mappings,
        cmdline,
        cut_short,
    })
}

/// `perf_event_attr.type` back from the crate's parsed form.
fn type_number(t: &PerfEventType) -> u32 {
    match t {
        PerfEventType::Hardware(..) => 0,
        PerfEventType::Software(..) => 1,
        PerfEventType::Tracepoint(..) => 2,
        PerfEventType::HwCache(..) => 3,
        PerfEventType::Breakpoint(..) => 5,
        PerfEventType::DynamicPmu(ty, ..) => *ty,
    }
}

/// Reads into `buf` until it is full or the file ends; the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// A little-endian or big-endian u64 or u32 at `at` of `b` (which holds it).
fn word(b: &[u8], at: usize, n: usize, big: bool) -> u64 {
    let mut w = [0u8; 8];
    if big {
        w[8 - n..].copy_from_slice(&b[at..at + n]);
        u64::from_be_bytes(w)
    } else {
        w[..n].copy_from_slice(&b[at..at + n]);
        u64::from_le_bytes(w)
    }
}

/// Checks that the header's sections lie inside the file (`Err` says which does not),
/// and whether the feature sections do too and their event descriptions are sized
/// within their section (`Ok(false)`: read the file without its features). The crate
/// reserves memory by the counts it reads, so they are checked first.
/// Checks the sections the header points at against the file's length: an error for a
/// header no perf wrote, how the file is cut short if it is (see [`CutShort`]).
fn check_layout(
    file: &mut File,
    head: &[u8],
    big: bool,
    len: u64,
) -> Result<Option<CutShort>, String> {
    let attr_size = word(head, 16, 8, big);
    if !(MIN_ATTR_SIZE..=4096).contains(&attr_size) {
        return Err(format!("attribute size {attr_size}"));
    }
    let section = |at: usize| (word(head, at, 8, big), word(head, at + 8, 8, big));
    let inside = |(off, size): (u64, u64)| off.checked_add(size).is_some_and(|end| end <= len);
    if !inside(section(24)) {
        return Err("its attribute section lies past the end of the file".into());
    }
    let (attr_off, attr_len) = section(24);
    if attr_len < attr_size || attr_off < HEADER_LEN as u64 {
        return Err("no event attributes".into());
    }
    let (data_off, data_len) = section(40);
    if !inside((data_off, data_len)) {
        // Cut short: perf itself then reads the attributes alone.
        return Ok(Some(CutShort::Records {
            promised: data_len,
            held: len.saturating_sub(data_off).min(data_len),
        }));
    }
    let features: u32 = (0..4)
        .map(|i| word(head, FEATURES_AT + 8 * i, 8, big).count_ones())
        .sum();
    let table_len = u64::from(features) * 16;
    let table_at = data_off + data_len;
    if !inside((table_at, table_len)) {
        // Cut short: perf itself then reads the attributes alone.
        return Ok(Some(CutShort::Features));
    }
    let mut table = vec![0u8; table_len as usize];
    let ok = file.seek(SeekFrom::Start(table_at)).is_ok() && file.read_exact(&mut table).is_ok();
    if !ok {
        return Ok(Some(CutShort::Features));
    }
    let sections: Vec<(u64, u64)> = table
        .chunks_exact(16)
        .map(|s| (word(s, 0, 8, big), word(s, 8, 8, big)))
        .collect();
    if !sections.iter().all(|&s| inside(s)) {
        return Ok(Some(CutShort::Features));
    }
    // The event descriptions are `HEADER_EVENT_DESC`, feature bit 12: its count and
    // attribute size must fit its section, else the crate reserves memory by them.
    const EVENT_DESC: usize = 12;
    let bit_set = |bit: usize| word(head, FEATURES_AT + 8 * (bit / 64), 8, big) >> (bit % 64) & 1;
    if bit_set(EVENT_DESC) == 1 {
        let index: u64 = (0..EVENT_DESC).map(bit_set).sum();
        let (off, size) = sections[index as usize];
        let mut desc = vec![0u8; size as usize];
        if file.seek(SeekFrom::Start(off)).is_err() || file.read_exact(&mut desc).is_err() {
            return Ok(Some(CutShort::Features));
        }
        if !event_desc_fits(&desc, big) {
            return Ok(Some(CutShort::Features));
        }
    }
    Ok(None)
}

/// Whether every count and length in a `HEADER_EVENT_DESC` section (`u32 nr`, `u32
/// attr_size`, then per event: the attribute, `u32 nr_ids`, a perf string, the ids)
/// stays inside the section.
fn event_desc_fits(d: &[u8], big: bool) -> bool {
    if d.len() < 8 {
        return false;
    }
    let nr = word(d, 0, 4, big);
    let attr_size = word(d, 4, 4, big) as usize;
    if attr_size < MIN_ATTR_SIZE as usize {
        return false;
    }
    let mut at = 8usize;
    for _ in 0..nr {
        // The attribute, then `nr_ids` and the string's length.
        let Some(fixed_end) = at.checked_add(attr_size + 8).filter(|&e| e <= d.len()) else {
            return false;
        };
        let nr_ids = word(d, at + attr_size, 4, big) as usize;
        let str_len = word(d, at + attr_size + 4, 4, big) as usize;
        let end = nr_ids
            .checked_mul(8)
            .and_then(|ids| ids.checked_add(str_len))
            .and_then(|n| n.checked_add(fixed_end));
        match end {
            Some(e) if e <= d.len() => at = e,
            _ => return false,
        }
    }
    true
}

/// The `pmu mappings` feature: `u32 nr`, then `nr` × (`u32 type`, perf string). What
/// cannot be read is left out: the table only helps name events.
fn pmu_table(s: &[u8], big: bool) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    if s.len() < 4 {
        return out;
    }
    let nr = word(s, 0, 4, big);
    let mut at = 4;
    for _ in 0..nr {
        if s.len() < at + 8 {
            break;
        }
        let ty = word(s, at, 4, big) as u32;
        let n = word(s, at + 4, 4, big) as usize;
        at += 8;
        let Some(bytes) = at.checked_add(n).and_then(|end| s.get(at..end)) else {
            break;
        };
        at += n;
        let name = bytes.split(|&b| b == 0).next().unwrap_or_default();
        if let Ok(name) = std::str::from_utf8(name) {
            out.push((ty, name.to_owned()));
        }
    }
    out
}

/// The file with its header bytes replaced by a patched copy.
struct PatchedHead {
    file: File,
    head: [u8; HEADER_LEN],
    pos: u64,
}

impl Read for PatchedHead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < HEADER_LEN as u64 {
            let from = &self.head[self.pos as usize..];
            let n = from.len().min(buf.len());
            buf[..n].copy_from_slice(&from[..n]);
            self.pos += n as u64;
            self.file.seek(SeekFrom::Start(self.pos))?;
            return Ok(n);
        }
        let n = self.file.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PatchedHead {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = self.file.seek(to)?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::{pmu_table, scope_of_event_name, RecordingInfo};
    use ptscope_event::TraceScope;

    #[test]
    fn a_recording_of_given_threads_says_so_in_its_command_line() {
        let info = |cmd: &str| RecordingInfo {
            cmdline: cmd.split(' ').map(str::to_owned).collect(),
            ..RecordingInfo::default()
        };
        // `ptscope run/attach --single-thread`, and perf's own `-t`.
        assert!(
            info("/usr/bin/perf record -o w/perf.data --per-thread -t 42 --switch-events")
                .per_thread()
        );
        assert!(info("perf record --tid=42 -g").per_thread());
        // The whole process tree (`-p`), or a workload after `--` that has a `-t` of its own.
        assert!(!info("/usr/bin/perf record -o w/perf.data -p 42 --call-graph dwarf").per_thread());
        assert!(!info("perf record -g -- sort -t , data.csv").per_thread());
        assert!(!RecordingInfo::default().per_thread());
    }

    #[test]
    fn a_recording_asks_for_the_kernel_only_with_a_k_modifier() {
        let u = Some(TraceScope::Userspace);
        let uk = Some(TraceScope::UserspaceAndKernel);
        let k = Some(TraceScope::Kernel);
        for (name, want) in [
            // What `ptscope run` records: default, --trace-include-kernel, --kernel-only.
            ("cpu-clock/freq=10000/", u),
            ("cpu-clock/freq=10000/uk", uk),
            ("cpu-clock/freq=10000/k", k),
            ("cpu-clock/freq=10000/u", u),
            // perf's own names.
            ("cpu-clock", u),
            ("cycles:pp", u),
            ("cycles:ukpp", uk),
            ("cpu-clock:k", k),
            ("intel_pt//u", None),
        ] {
            assert_eq!(scope_of_event_name(name), want, "{name}");
        }
    }

    #[test]
    fn the_pmu_table_reads_what_it_can() {
        let mut s = 2u32.to_le_bytes().to_vec();
        for (ty, name) in [(4u32, &b"cpu\0\0\0\0\0"[..]), (8, b"intel_pt")] {
            s.extend_from_slice(&ty.to_le_bytes());
            s.extend_from_slice(&(name.len() as u32).to_le_bytes());
            s.extend_from_slice(name);
        }
        let want = vec![(4, "cpu".to_string()), (8, "intel_pt".to_string())];
        assert_eq!(pmu_table(&s, false), want);
        // Cut anywhere: a prefix of the table, never a panic.
        for cut in 0..s.len() {
            let got = pmu_table(&s[..cut], false);
            assert_eq!(got[..], want[..got.len()]);
        }
    }
}
