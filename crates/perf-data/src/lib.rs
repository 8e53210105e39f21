//! perf.data read in-process: the header, event attributes and feature sections through
//! `linux-perf-data`, and the data section's records walked in place, zero-copy — an
//! Intel PT recording's trace data is a slice of the mapped file, however large.
//!
//! A damaged file gives a typed error or the records before the damage, never a panic
//! or an allocation sized by a field of the file: the header is checked against the
//! file's size before the crate reads it, and every record is bounds-checked.
//!
//! ```
//! use ptscope_perf_data::{PerfData, Record};
//!
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
//!     .join("../../tests/fixtures/sampling/lost_records.perf.data.gz");
//! let mut bytes = Vec::new();
//! std::io::Read::read_to_end(
//!     &mut flate2::read::GzDecoder::new(std::fs::File::open(path)?),
//!     &mut bytes,
//! )?;
//! let data = PerfData::from_bytes(bytes, "lost_records.perf.data")?;
//! assert!(!data.attributes().is_empty());
//! let mut names = 0;
//! for record in data.records() {
//!     if let Record::Comm { name, .. } = record?.record {
//!         assert!(!name.is_empty());
//!         names += 1;
//!     }
//! }
//! assert!(names > 0);
//! // What the kernel dropped while perf recorded, and the mappings code ran in.
//! let maps = data.mappings();
//! assert!(maps.lost().any());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod cursor;
pub mod intel_pt;
mod layout;
mod mappings;
pub mod records;
mod sideband;

pub use mappings::{Lost, Mappings};
pub use records::{
    Aux, Auxtrace, AuxtraceInfo, BuildId, Corrupt, CorruptKind, Endian, Mmap, Record, RecordAt,
    Records, SampleId, Switch, Task, TimeConv,
};
pub use sideband::Sideband;

use linux_perf_data::linux_perf_event_reader::{
    AttrFlags, PerfEventType, RecordParseInfo, SampleFormat,
};
use linux_perf_data::{Feature, PerfFile, PerfFileReader};
use records::{AttrInfo, AttrTable};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Why a perf.data file cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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

/// One event of the recording, as its attribute describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribute {
    /// The name `perf evlist` prints (`intel_pt//u`), when the file has event descriptions.
    pub name: Option<String>,
    /// `perf_event_attr.type`: a `PERF_TYPE_*` or a dynamic PMU's number.
    pub pmu_type: u32,
    /// `config` (for Intel PT: the `RTIT_CTL` bits asked for).
    pub config: u64,
    /// `sample_type` bits.
    pub sample_type: u64,
    /// `exclude_user`.
    pub exclude_user: bool,
    /// `exclude_kernel`.
    pub exclude_kernel: bool,
    /// `context_switch`: the kernel wrote `SWITCH` records for it.
    pub context_switch: bool,
    /// The event's ids (a sample or record names its event by one).
    pub ids: Vec<u64>,
}

/// The file's bytes: mapped, or handed over (tests, fuzzing).
enum Bytes {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A perf.data file, read in place (see the crate documentation).
pub struct PerfData {
    path: PathBuf,
    bytes: Bytes,
    endian: Endian,
    pipe: bool,
    attributes: Vec<Attribute>,
    table: AttrTable,
    data: Range<usize>,
    file: Option<PerfFile>,
    cut_short: Option<CutShort>,
}

/// How a `perf.data` file ends before what its header promises (a copy that stopped
/// early, a full disk, perf killed while writing it). perf cannot read such a file: it
/// refuses it ("incompatible file format") or, when only the sections it writes last
/// are missing, crashes on it (SIGSEGV, SIGBUS); this crate reads what it holds.
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

impl std::fmt::Debug for PerfData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfData")
            .field("path", &self.path)
            .field("len", &self.bytes.len())
            .field("attributes", &self.attributes)
            .finish_non_exhaustive()
    }
}

impl PerfData {
    /// Maps the perf.data file at `path`. It must be a regular file (it is opened
    /// non-blocking and checked through the descriptor, so a FIFO named as input can
    /// neither block nor be read).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref().to_path_buf();
        let io_err = |source| Error::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(io_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let bytes = if meta.len() == 0 {
            Bytes::Owned(Vec::new())
        } else {
            // SAFETY: read-only and private; perf never rewrites a finished perf.data in
            // place (a new recording is a new file), the assumption perf itself makes.
            #[allow(unsafe_code)]
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
            Bytes::Map(map)
        };
        Self::parse(path, bytes)
    }

    /// Reads a perf.data file's `bytes`; `name` stands for the file in messages.
    pub fn from_bytes(bytes: Vec<u8>, name: impl Into<PathBuf>) -> Result<Self, Error> {
        Self::parse(name.into(), Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<Self, Error> {
        let damaged = |reason: String| Error::Damaged {
            path: path.clone(),
            reason,
        };
        let endian = match bytes.get(..8) {
            Some(b"PERFILE2") => Endian::Little,
            Some(b"2ELIFREP") => Endian::Big,
            _ => return Err(Error::NotPerfData { path }),
        };
        let big = endian.is_big();
        let header_size = cursor::word_at(&bytes, 8, 8, big).unwrap_or(0);
        if header_size == layout::PIPE_HEADER_LEN {
            let len = bytes.len();
            return Ok(PerfData {
                path,
                bytes,
                endian,
                pipe: true,
                attributes: Vec::new(),
                table: AttrTable::new(Vec::new()),
                data: 16..len,
                file: None,
                cut_short: None,
            });
        }
        if bytes.len() < layout::HEADER_LEN {
            return Err(damaged(format!("the file has only {} bytes", bytes.len())));
        }
        let cut_short = layout::check(&bytes, big).map_err(&damaged)?;
        let keep_features = cut_short.is_none();
        let reader = layout::Patched {
            head: layout::patched_head(&bytes, keep_features, big),
            file: &bytes,
            pos: 0,
        };
        // The crate is not expected to panic on what passed the checks; if it does, the
        // file is damaged in a way they missed, which is an error, not a crash.
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            PerfFileReader::parse_file(reader).map(|r| r.perf_file)
        }))
        .map_err(|_| damaged("the perf.data parser gave up".into()))?
        .map_err(|e| damaged(e.to_string()))?;
        let mut attributes = Vec::new();
        let mut infos = Vec::new();
        for a in parsed.event_attributes() {
            let attr = a.attributes();
            let (pmu_type, config) = type_and_config(&attr.type_);
            attributes.push(Attribute {
                name: a.name().map(str::to_owned),
                pmu_type,
                config,
                sample_type: attr.sample_format.bits(),
                exclude_user: attr.flags.contains(AttrFlags::EXCLUDE_USER),
                exclude_kernel: attr.flags.contains(AttrFlags::EXCLUDE_KERNEL),
                context_switch: attr.flags.contains(AttrFlags::CONTEXT_SWITCH),
                ids: a.event_ids.clone(),
            });
            infos.push(AttrInfo {
                parse: RecordParseInfo::new(attr, endian.crate_endian()),
                ids: a.event_ids.clone(),
            });
        }
        let (off, size) = layout::section(&bytes, 40, big);
        let start = usize::try_from(off).unwrap_or(usize::MAX).min(bytes.len());
        let end = usize::try_from(off.saturating_add(size))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        Ok(PerfData {
            path,
            bytes,
            endian,
            pipe: false,
            attributes,
            table: AttrTable::new(infos),
            data: start..end.max(start),
            file: Some(parsed),
            cut_short,
        })
    }

    /// How the file is cut short, if it is (its records, or only the sections after
    /// them): what it holds is read all the same.
    pub fn cut_short(&self) -> Option<CutShort> {
        self.cut_short
    }

    /// The `perf record` command line (the `cmdline` feature), empty when absent.
    pub fn cmdline(&self) -> Vec<String> {
        let Some(f) = &self.file else {
            return Vec::new();
        };
        f.cmdline()
            .ok()
            .flatten()
            .map(|args| args.into_iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The file's name, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its byte order.
    pub fn endian(&self) -> Endian {
        self.endian
    }

    /// A pipe-mode file (`perf record -o -`): attributes come as records, and there are
    /// no feature sections.
    pub fn is_pipe(&self) -> bool {
        self.pipe
    }

    /// The events recorded (empty for a pipe-mode file: see [`PerfData::is_pipe`]).
    pub fn attributes(&self) -> &[Attribute] {
        &self.attributes
    }

    /// The records of the data section, in file order.
    pub fn records(&self) -> Records<'_> {
        Records::new(
            &self.bytes,
            self.data.clone(),
            self.endian,
            self.table.clone(),
            self.pipe,
        )
    }

    /// A feature section's bytes, when the file has it and its sections could be trusted.
    pub fn feature(&self, feature: Feature) -> Option<&[u8]> {
        self.file.as_ref()?.feature_section_data(feature)
    }

    /// The `pmu mappings` feature: PMU number → name (`8 → intel_pt`); empty when absent.
    pub fn pmu_mappings(&self) -> Vec<(u32, String)> {
        self.feature(Feature::PMU_MAPPINGS)
            .map(|s| layout::pmu_table(s, self.endian.is_big()))
            .unwrap_or_default()
    }

    /// The `HEADER_BUILD_ID` feature: the build id perf recorded for each file (path,
    /// `[vdso]`, `[kernel.kallsyms]`) that had samples or, for AUX area tracing, every
    /// file mapped.
    pub fn build_ids(&self) -> Vec<(Vec<u8>, BuildId)> {
        let Some(file) = &self.file else {
            return Vec::new();
        };
        let Ok(ids) = file.build_ids() else {
            return Vec::new();
        };
        let mut out: Vec<(Vec<u8>, BuildId)> = ids
            .into_values()
            .map(|d| (d.path, BuildId::new(&d.build_id)))
            .collect();
        out.sort();
        out
    }

    /// The executable mappings, build ids and losses the records hold (see
    /// [`Mappings`]).
    pub fn mappings(&self) -> Mappings {
        Mappings::from_perf_data(self)
    }

    /// True when some event's samples carry user stack copies (`--call-graph dwarf`) or
    /// branch records (`--call-graph lbr`).
    pub fn stacks_not_from_frame_pointers(&self) -> bool {
        let other = SampleFormat::STACK_USER | SampleFormat::BRANCH_STACK;
        self.attributes
            .iter()
            .any(|a| SampleFormat::from_bits_truncate(a.sample_type).intersects(other))
    }
}

/// `perf_event_attr.type` and `config` back from the crate's parsed form.
fn type_and_config(t: &PerfEventType) -> (u32, u64) {
    match t {
        PerfEventType::Hardware(..) => (0, 0),
        PerfEventType::Software(..) => (1, 0),
        PerfEventType::Tracepoint(id) => (2, *id),
        PerfEventType::HwCache(..) => (3, 0),
        PerfEventType::Breakpoint(..) => (5, 0),
        PerfEventType::DynamicPmu(ty, config, ..) => (*ty, *config),
    }
}

impl Attribute {
    /// Whether the attribute's records carry a `sample_id` trailer.
    pub fn has_time(&self) -> bool {
        SampleFormat::from_bits_truncate(self.sample_type).contains(SampleFormat::TIME)
    }
}
