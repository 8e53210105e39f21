//! The records of a perf.data file's data section, walked in place: each record borrows
//! the file's bytes (an AUXTRACE record's trace data too, however large), the kernel's
//! own record kinds are parsed by `linux-perf-event-reader`, perf's user records
//! (AUXTRACE, AUXTRACE_INFO, TIME_CONV) here.
//!
//! Records come in file order. perf writes them in rounds: within a round, records of
//! different CPUs are not in time order (sort side band by [`SampleId::time`] if it
//! matters).

use crate::cursor::{c_str, Cursor};
use linux_perf_data::linux_perf_event_reader::{
    get_record_id, get_record_identifier, CommonData, ContextSwitchRecord, EventRecord,
    Mmap2FileId, PerfEventAttr, RawData, RawEventRecord, RecordParseInfo, RecordType, SampleFormat,
};
use std::fmt;

/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an `MMAP2` record holds a build id, not a device
/// and inode.
const MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `PERF_RECORD_MISC_SWITCH_OUT`.
const MISC_SWITCH_OUT: u16 = 1 << 13;
/// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`.
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
/// `PERF_RECORD_MISC_CPUMODE_MASK`.
const MISC_CPUMODE_MASK: u16 = 7;
/// `PERF_RECORD_MISC_KERNEL`.
const MISC_KERNEL: u16 = 1;

/// perf's record type numbers read here.
pub mod kind {
    /// `PERF_RECORD_MMAP`.
    pub const MMAP: u32 = 1;
    /// `PERF_RECORD_LOST`.
    pub const LOST: u32 = 2;
    /// `PERF_RECORD_COMM`.
    pub const COMM: u32 = 3;
    /// `PERF_RECORD_EXIT`.
    pub const EXIT: u32 = 4;
    /// `PERF_RECORD_FORK`.
    pub const FORK: u32 = 7;
    /// `PERF_RECORD_SAMPLE`.
    pub const SAMPLE: u32 = 9;
    /// `PERF_RECORD_MMAP2`.
    pub const MMAP2: u32 = 10;
    /// `PERF_RECORD_AUX`.
    pub const AUX: u32 = 11;
    /// `PERF_RECORD_ITRACE_START`.
    pub const ITRACE_START: u32 = 12;
    /// `PERF_RECORD_LOST_SAMPLES`.
    pub const LOST_SAMPLES: u32 = 13;
    /// `PERF_RECORD_SWITCH`.
    pub const SWITCH: u32 = 14;
    /// `PERF_RECORD_SWITCH_CPU_WIDE`.
    pub const SWITCH_CPU_WIDE: u32 = 15;
    /// `PERF_RECORD_HEADER_ATTR` (pipe mode).
    pub const HEADER_ATTR: u32 = 64;
    /// `PERF_RECORD_FINISHED_ROUND`.
    pub const FINISHED_ROUND: u32 = 68;
    /// `PERF_RECORD_AUXTRACE_INFO`.
    pub const AUXTRACE_INFO: u32 = 70;
    /// `PERF_RECORD_AUXTRACE`: its trace data follows the record, outside its size.
    pub const AUXTRACE: u32 = 71;
    /// `PERF_RECORD_TIME_CONV`.
    pub const TIME_CONV: u32 = 79;
    /// `PERF_RECORD_COMPRESSED` (`perf record -z`).
    pub const COMPRESSED: u32 = 81;
}

/// `PERF_AUX_FLAG_*`: what happened to an AUX area's data.
pub mod aux_flags {
    /// The data was truncated: the buffer was full, the rest was lost.
    pub const TRUNCATED: u64 = 1;
    /// The buffer is a snapshot (overwrite mode).
    pub const OVERWRITE: u64 = 2;
    /// The data holds gaps (sampled AUX).
    pub const PARTIAL: u64 = 4;
    /// The hardware overwrote data the tool had not read (a collision).
    pub const COLLISION: u64 = 8;
}

/// Which thread, CPU and time a record was written for: its `sample_id` trailer, when
/// the event's attribute asked for one (`sample_id_all`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// perf time (ns).
    pub time: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
    /// The event's id.
    pub id: Option<u64>,
}

/// A GNU build id (at most 20 bytes), kept inline.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BuildId {
    len: u8,
    bytes: [u8; 20],
}

impl BuildId {
    /// A build id of the first 20 bytes of `b` at most.
    pub fn new(b: &[u8]) -> Self {
        let len = b.len().min(20);
        let mut bytes = [0u8; 20];
        bytes[..len].copy_from_slice(&b[..len]);
        BuildId {
            len: len as u8,
            bytes,
        }
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Debug for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for BuildId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// A file (or anonymous memory, or `[vdso]`) mapped into a process: `PERF_RECORD_MMAP`
/// or `MMAP2`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id (`u32::MAX`, perf's -1, for the kernel).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// First address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The path perf recorded (`[vdso]`, `//anon` and the like for memory without one).
    pub path: &'a [u8],
    /// Code may run there (`MMAP`, or an `MMAP2` with `PROT_EXEC`), and it is not a
    /// data mapping (`PERF_RECORD_MISC_MMAP_DATA`).
    pub exec: bool,
    /// Recorded for the kernel (its image or a module).
    pub kernel: bool,
    /// The build id the record carries (`perf record --buildid-mmap`).
    pub build_id: Option<BuildId>,
}

/// `PERF_RECORD_FORK` or `PERF_RECORD_EXIT`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// perf time (ns).
    pub time: u64,
}

/// A context switch: `PERF_RECORD_SWITCH` (about the record's own thread) or
/// `SWITCH_CPU_WIDE` (which also names the other thread).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    /// The record's thread ([`SampleId::tid`]) left the CPU; else it came in.
    pub out: bool,
    /// Switched out while still runnable.
    pub preempt: bool,
    /// `SWITCH_CPU_WIDE`: the thread coming in (when `out`) or going out: `(pid, tid)`.
    pub other: Option<(u32, u32)>,
}

/// `PERF_RECORD_AUX`: new data in an AUX area.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Aux {
    /// Offset in the AUX area.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// [`aux_flags`].
    pub flags: u64,
}

/// `PERF_RECORD_AUXTRACE_INFO`: the AUX area's kind and its private words.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AuxtraceInfo<'a> {
    /// `PERF_AUXTRACE_*` (1 = Intel PT).
    pub kind: u32,
    /// The private words, raw.
    pub private: &'a [u8],
}

/// `PERF_RECORD_AUXTRACE`: a piece of one AUX area's trace data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Auxtrace<'a> {
    /// Offset of this piece in the AUX area's stream.
    pub offset: u64,
    /// A timestamp reference (Intel PT: the TSC when the buffer was read).
    pub reference: u64,
    /// The AUX area (queue) it came from.
    pub idx: u32,
    /// Thread traced (per-thread recording), else `u32::MAX`.
    pub tid: u32,
    /// CPU traced (per-CPU recording), else `u32::MAX`.
    pub cpu: u32,
    /// The trace data, borrowed from the file.
    pub data: &'a [u8],
    /// The file ends before all the data the record announced.
    pub truncated: bool,
}

/// `PERF_RECORD_TIME_CONV`: how TSC values convert to perf time.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TimeConv {
    /// `time_shift`.
    pub shift: u16,
    /// `time_mult`.
    pub mult: u32,
    /// `time_zero`.
    pub zero: u64,
    /// `time_cycles` (with `cap_user_time_short`).
    pub cycles: u64,
    /// `time_mask` (with `cap_user_time_short`).
    pub mask: u64,
    /// `cap_user_time_zero`.
    pub cap_zero: bool,
    /// `cap_user_time_short`: the counter is narrower than 64 bits.
    pub cap_short: bool,
}

/// One record of the data section.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record<'a> {
    /// `MMAP` or `MMAP2`.
    Mmap(Mmap<'a>),
    /// `COMM`: a thread's name, at exec or set later.
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name (at most 15 bytes).
        name: &'a [u8],
        /// Set by `exec`.
        exec: bool,
    },
    /// `FORK`.
    Fork(Task),
    /// `EXIT`.
    Exit(Task),
    /// `SWITCH` or `SWITCH_CPU_WIDE`.
    Switch(Switch),
    /// `LOST`: the kernel dropped records.
    Lost {
        /// The event.
        id: u64,
        /// Records dropped.
        count: u64,
    },
    /// `LOST_SAMPLES`.
    LostSamples {
        /// Samples dropped.
        count: u64,
    },
    /// `AUX`.
    Aux(Aux),
    /// `ITRACE_START`: tracing started for a thread.
    ItraceStart {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
    },
    /// `AUXTRACE_INFO`.
    AuxtraceInfo(AuxtraceInfo<'a>),
    /// `AUXTRACE` with its data.
    Auxtrace(Auxtrace<'a>),
    /// `TIME_CONV`.
    TimeConv(TimeConv),
    /// `FINISHED_ROUND`: every record before it is older than every record after it.
    FinishedRound,
    /// `SAMPLE`, unparsed: the index of its attribute and its body.
    Sample {
        /// Which attribute ([`crate::PerfData::attributes`]).
        attr: usize,
        /// The body.
        body: &'a [u8],
    },
    /// Anything else, unparsed.
    Other {
        /// The record type.
        kind: u32,
        /// Its `misc` bits.
        misc: u16,
        /// The body.
        body: &'a [u8],
    },
}

/// A record, where it is and whom it is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RecordAt<'a> {
    /// Offset of the record in the file.
    pub offset: u64,
    /// Its `sample_id` trailer (or a sample's own fields).
    pub sample: SampleId,
    /// The record.
    pub record: Record<'a>,
}

/// What is wrong with a record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The header's size is below 8 bytes.
    SizeTooSmall(u16),
    /// The record runs past the data section.
    PastEnd,
    /// A field is missing or out of range.
    Field(&'static str),
    /// A compressed record (`perf record -z`), which this reader does not inflate.
    Compressed,
}

impl fmt::Display for CorruptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptKind::SizeTooSmall(s) => write!(f, "its size ({s}) is below a header's"),
            CorruptKind::PastEnd => f.write_str("it runs past the end of the data"),
            CorruptKind::Field(what) => write!(f, "its {what} is missing or out of range"),
            CorruptKind::Compressed => f.write_str(
                "it is compressed (perf record -z), which this reader does not read: \
                 record without -z",
            ),
        }
    }
}

/// A record that cannot be read; the walk stops there (its size cannot be trusted).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt perf.data record (type {kind}) at byte {offset}: {what}")]
pub struct Corrupt {
    /// Offset of the record in the file.
    pub offset: u64,
    /// The record type.
    pub kind: u32,
    /// What is wrong.
    pub what: CorruptKind,
}

/// An event attribute as the walk needs it: how its records' trailers are laid out,
/// and which ids are its.
#[derive(Clone, Debug)]
pub(crate) struct AttrInfo {
    pub(crate) parse: RecordParseInfo,
    pub(crate) ids: Vec<u64>,
}

/// How records name their attribute.
#[derive(Clone, Debug)]
pub(crate) struct AttrTable {
    pub(crate) attrs: Vec<AttrInfo>,
}

impl AttrTable {
    pub(crate) fn new(attrs: Vec<AttrInfo>) -> Self {
        AttrTable { attrs }
    }

    /// Adds a pipe-mode file's attribute.
    pub(crate) fn push(&mut self, attr: &PerfEventAttr, ids: Vec<u64>, endian: Endian) {
        self.attrs.push(AttrInfo {
            parse: RecordParseInfo::new(attr, endian.crate_endian()),
            ids,
        });
    }

    /// The attribute a record of `ty` with `body` belongs to (the first when it cannot
    /// be told).
    fn attr_of(&self, ty: RecordType, body: &[u8], endian: Endian) -> Option<usize> {
        if self.attrs.len() <= 1 {
            return (!self.attrs.is_empty()).then_some(0);
        }
        let first = &self.attrs[0].parse;
        let all_identifier = self
            .attrs
            .iter()
            .all(|a| a.parse.sample_format.contains(SampleFormat::IDENTIFIER));
        let data = RawData::Single(body);
        let id = if all_identifier {
            let sample_id_all = first.common_data_offset_from_end.is_some();
            match endian {
                Endian::Little => {
                    get_record_identifier::<byteorder::LittleEndian>(ty, data, sample_id_all)
                }
                Endian::Big => {
                    get_record_identifier::<byteorder::BigEndian>(ty, data, sample_id_all)
                }
            }
        } else if self
            .attrs
            .iter()
            .all(|a| a.parse.id_parse_info == first.id_parse_info)
        {
            match endian {
                Endian::Little => {
                    get_record_id::<byteorder::LittleEndian>(ty, data, &first.id_parse_info)
                }
                Endian::Big => {
                    get_record_id::<byteorder::BigEndian>(ty, data, &first.id_parse_info)
                }
            }
        } else {
            None
        };
        Some(
            id.and_then(|id| self.attrs.iter().position(|a| a.ids.contains(&id)))
                .unwrap_or(0),
        )
    }
}

/// The file's byte order.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (x86, arm64).
    Little,
    /// Big-endian (s390, some PowerPC).
    Big,
}

impl Endian {
    pub(crate) fn is_big(self) -> bool {
        self == Endian::Big
    }

    pub(crate) fn crate_endian(self) -> linux_perf_data::Endianness {
        match self {
            Endian::Little => linux_perf_data::Endianness::LittleEndian,
            Endian::Big => linux_perf_data::Endianness::BigEndian,
        }
    }
}

/// The walk over a data section (see the module documentation). After a
/// [`Corrupt`] record it ends.
pub struct Records<'a> {
    file: &'a [u8],
    pos: usize,
    end: usize,
    endian: Endian,
    attrs: AttrTable,
    pipe: bool,
    done: bool,
}

impl<'a> Records<'a> {
    pub(crate) fn new(
        file: &'a [u8],
        data: std::ops::Range<usize>,
        endian: Endian,
        attrs: AttrTable,
        pipe: bool,
    ) -> Self {
        Records {
            file,
            pos: data.start,
            end: data.end.min(file.len()),
            endian,
            attrs,
            pipe,
            done: false,
        }
    }

    /// Offset of the next record.
    pub fn position(&self) -> u64 {
        self.pos as u64
    }

    fn corrupt(&mut self, offset: usize, kind: u32, what: CorruptKind) -> Corrupt {
        self.done = true;
        Corrupt {
            offset: offset as u64,
            kind,
            what,
        }
    }

    fn next_record(&mut self) -> Option<Result<RecordAt<'a>, Corrupt>> {
        if self.done || self.pos + 8 > self.end {
            return None;
        }
        let at = self.pos;
        let big = self.endian.is_big();
        let mut head = Cursor::new(&self.file[at..at + 8], big);
        let (Some(ty), Some(misc), Some(size)) = (head.u32(), head.u16(), head.u16()) else {
            return None;
        };
        if size < 8 {
            return Some(Err(self.corrupt(at, ty, CorruptKind::SizeTooSmall(size))));
        }
        let rec_end = at + usize::from(size);
        if rec_end > self.end {
            // A file cut short: what came before stands.
            self.done = true;
            return None;
        }
        let body = &self.file[at + 8..rec_end];
        self.pos = rec_end;
        let field = |what| CorruptKind::Field(what);
        let record = match ty {
            kind::AUXTRACE => {
                let mut c = Cursor::new(body, big);
                let (Some(len), Some(offset), Some(reference), Some(idx), Some(tid), Some(cpu)) =
                    (c.u64(), c.u64(), c.u64(), c.u32(), c.u32(), c.u32())
                else {
                    return Some(Err(self.corrupt(at, ty, field("auxtrace header"))));
                };
                let start = rec_end;
                let want = usize::try_from(len).unwrap_or(usize::MAX);
                let avail = self.end - start;
                let truncated = want > avail;
                let data_end = start + want.min(avail);
                self.pos = data_end;
                Record::Auxtrace(Auxtrace {
                    offset,
                    reference,
                    idx,
                    tid,
                    cpu,
                    data: &self.file[start..data_end],
                    truncated,
                })
            }
            kind::AUXTRACE_INFO => {
                let mut c = Cursor::new(body, big);
                let (Some(k), Some(_)) = (c.u32(), c.u32()) else {
                    return Some(Err(self.corrupt(at, ty, field("auxtrace info"))));
                };
                Record::AuxtraceInfo(AuxtraceInfo {
                    kind: k,
                    private: c.rest(),
                })
            }
            kind::TIME_CONV => {
                let mut c = Cursor::new(body, big);
                let (Some(shift), Some(mult), Some(zero)) = (c.u64(), c.u64(), c.u64()) else {
                    return Some(Err(self.corrupt(at, ty, field("time conversion"))));
                };
                let (cycles, mask, cap_zero, cap_short) = match (c.u64(), c.u64(), c.u8(), c.u8()) {
                    (Some(cy), Some(m), Some(z), Some(s)) => (cy, m, z != 0, s != 0),
                    // perf before 5.11 wrote only the first three.
                    _ => (0, u64::MAX, true, false),
                };
                Record::TimeConv(TimeConv {
                    shift: shift.min(63) as u16,
                    mult: mult as u32,
                    zero,
                    cycles,
                    mask,
                    cap_zero,
                    cap_short,
                })
            }
            kind::FINISHED_ROUND => Record::FinishedRound,
            kind::COMPRESSED => {
                return Some(Err(self.corrupt(at, ty, CorruptKind::Compressed)));
            }
            kind::HEADER_ATTR if self.pipe => {
                let mut r = body;
                let parsed = match self.endian {
                    Endian::Little => PerfEventAttr::parse::<_, byteorder::LittleEndian>(&mut r),
                    Endian::Big => PerfEventAttr::parse::<_, byteorder::BigEndian>(&mut r),
                };
                let Ok((attr, attr_len)) = parsed else {
                    return Some(Err(self.corrupt(at, ty, field("attribute"))));
                };
                let ids_at = usize::try_from(attr_len).unwrap_or(usize::MAX);
                let ids = body
                    .get(ids_at..)
                    .unwrap_or_default()
                    .chunks_exact(8)
                    .filter_map(|w| crate::cursor::word_at(w, 0, 8, big))
                    .collect();
                self.attrs.push(&attr, ids, self.endian);
                Record::Other {
                    kind: ty,
                    misc,
                    body,
                }
            }
            t if t < 64 => match self.kernel_record(t, misc, body) {
                Ok(r) => return Some(Ok(r.with_offset(at))),
                Err(what) => return Some(Err(self.corrupt(at, ty, what))),
            },
            _ => Record::Other {
                kind: ty,
                misc,
                body,
            },
        };
        Some(Ok(RecordAt {
            offset: at as u64,
            sample: SampleId::default(),
            record,
        }))
    }

    /// A record the kernel wrote (types below 64), parsed by `linux-perf-event-reader`.
    fn kernel_record(
        &self,
        ty: u32,
        misc: u16,
        body: &'a [u8],
    ) -> Result<RecordAt<'a>, CorruptKind> {
        let big = self.endian.is_big();
        let rtype = RecordType(ty);
        // Without an attribute (a pipe-mode file's records before its first
        // HEADER_ATTR) records are read without their trailers.
        let attr = self.attrs.attr_of(rtype, body, self.endian);
        let parse = match attr {
            Some(a) => self.attrs.attrs[a].parse,
            None => no_trailer(self.endian),
        };
        let attr = attr.unwrap_or(0);
        let sample = if ty == kind::SAMPLE {
            CommonData::parse_sample(RawData::Single(body), &parse)
        } else {
            CommonData::parse_nonsample(RawData::Single(body), &parse)
        }
        .map(|c| SampleId {
            pid: c.pid.and_then(|p| u32::try_from(p).ok()),
            tid: c.tid.and_then(|t| u32::try_from(t).ok()),
            time: c.timestamp,
            cpu: c.cpu,
            id: c.id,
        })
        .unwrap_or_default();
        let at = |record| RecordAt {
            offset: 0,
            sample,
            record,
        };
        // Kinds the crate does not parse, or parses with more allocation than needed.
        match ty {
            kind::SAMPLE => return Ok(at(Record::Sample { attr, body })),
            kind::AUX => {
                let mut c = Cursor::new(body, big);
                let (Some(offset), Some(size), Some(flags)) = (c.u64(), c.u64(), c.u64()) else {
                    return Err(CorruptKind::Field("aux record"));
                };
                return Ok(at(Record::Aux(Aux {
                    offset,
                    size,
                    flags,
                })));
            }
            kind::ITRACE_START => {
                let mut c = Cursor::new(body, big);
                let (Some(pid), Some(tid)) = (c.u32(), c.u32()) else {
                    return Err(CorruptKind::Field("itrace start"));
                };
                return Ok(at(Record::ItraceStart { pid, tid }));
            }
            kind::LOST_SAMPLES => {
                let Some(count) = Cursor::new(body, big).u64() else {
                    return Err(CorruptKind::Field("lost samples"));
                };
                return Ok(at(Record::LostSamples { count }));
            }
            // The crate asserts on a build id longer than 20 bytes.
            kind::MMAP2
                if misc & MISC_MMAP_BUILD_ID != 0 && body.get(32).is_none_or(|&n| n > 20) =>
            {
                return Err(CorruptKind::Field("mmap2 build id size"));
            }
            _ => {}
        }
        let raw = RawEventRecord::new(rtype, misc, RawData::Single(body), parse);
        let parsed = match raw.parse() {
            Ok(p) => p,
            Err(_) => return Err(CorruptKind::Field(record_name(ty))),
        };
        let slice = |d: RawData<'a>| -> &'a [u8] {
            match d {
                RawData::Single(s) => c_str(s),
                // The body is one slice, so every part of it is too.
                RawData::Split(a, _) => c_str(a),
            }
        };
        let kernel = misc & MISC_CPUMODE_MASK == MISC_KERNEL;
        let record = match parsed {
            EventRecord::Mmap(m) => Record::Mmap(Mmap {
                pid: m.pid as u32,
                tid: m.tid as u32,
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                path: slice(m.path),
                exec: m.is_executable,
                kernel,
                build_id: None,
            }),
            EventRecord::Mmap2(m) => Record::Mmap(Mmap {
                pid: m.pid as u32,
                tid: m.tid as u32,
                start: m.address,
                len: m.length,
                pgoff: m.page_offset,
                path: slice(m.path),
                // `PROT_EXEC`, and not a data mapping.
                exec: m.protection & 4 != 0 && misc & (1 << 13) == 0,
                kernel,
                build_id: match &m.file_id {
                    Mmap2FileId::BuildId(b) if !b.is_empty() => Some(BuildId::new(b)),
                    _ => None,
                },
            }),
            EventRecord::Comm(c) => Record::Comm {
                pid: c.pid as u32,
                tid: c.tid as u32,
                name: slice(c.name),
                exec: c.is_execve,
            },
            EventRecord::Fork(t) | EventRecord::Exit(t) => {
                let task = Task {
                    pid: t.pid as u32,
                    ppid: t.ppid as u32,
                    tid: t.tid as u32,
                    ptid: t.ptid as u32,
                    time: t.timestamp,
                };
                if ty == kind::FORK {
                    Record::Fork(task)
                } else {
                    Record::Exit(task)
                }
            }
            EventRecord::Lost(l) => Record::Lost {
                id: l.id,
                count: l.count,
            },
            EventRecord::ContextSwitch(s) => {
                let other = match s {
                    ContextSwitchRecord::In {
                        prev_pid, prev_tid, ..
                    } => prev_pid.zip(prev_tid),
                    ContextSwitchRecord::Out {
                        next_pid, next_tid, ..
                    } => next_pid.zip(next_tid),
                }
                .map(|(p, t)| (p as u32, t as u32));
                Record::Switch(Switch {
                    out: misc & MISC_SWITCH_OUT != 0,
                    preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
                    other,
                })
            }
            _ => Record::Other {
                kind: ty,
                misc,
                body,
            },
        };
        Ok(at(record))
    }
}

impl<'a> RecordAt<'a> {
    fn with_offset(mut self, at: usize) -> Self {
        self.offset = at as u64;
        self
    }
}

/// How records of an event without `sample_id_all` are laid out: no trailer.
fn no_trailer(endian: Endian) -> RecordParseInfo {
    // A version-0 attribute of a software event with nothing asked for.
    let mut bytes = [0u8; 64];
    bytes[0] = 1;
    bytes[4] = 64;
    let mut r = &bytes[..];
    let attr = match PerfEventAttr::parse::<_, byteorder::LittleEndian>(&mut r) {
        Ok((attr, _)) => attr,
        // A valid version-0 attribute always parses.
        Err(_) => unreachable!("a zeroed version-0 attribute parses"),
    };
    RecordParseInfo::new(&attr, endian.crate_endian())
}

/// A kernel record type's name, for messages.
fn record_name(ty: u32) -> &'static str {
    match ty {
        kind::MMAP => "mmap record",
        kind::MMAP2 => "mmap2 record",
        kind::COMM => "comm record",
        kind::FORK => "fork record",
        kind::EXIT => "exit record",
        kind::LOST => "lost record",
        kind::SWITCH | kind::SWITCH_CPU_WIDE => "switch record",
        _ => "record",
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordAt<'a>, Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}
