//! A zero-copy FXT parser.
//!
//! [`Reader`] walks a byte slice record by record. Names are resolved through the
//! string and thread tables *as they stand at that record*, so a trace that
//! re-registers table indexes (as [`FxtWriter`](crate::FxtWriter) does once the table is
//! full) reads back exactly as written. Every string borrowed from the input is
//! UTF-8-checked. Malformed input yields a [`ReadError`], never a panic; after an error
//! the iterator ends.
//!
//! Compressed files are not handled here (the crate has no dependencies); `ptscope-output`
//! has a helper that gunzips.

use crate::format::{self, arg, event, metadata, record};
use std::fmt;
use std::ops::Deref;

/// What went wrong while reading a record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The record (or the data's last word) runs past the end of the input.
    Truncated {
        /// Bytes the record needs.
        needed: u64,
        /// Bytes left in the input.
        available: u64,
    },
    /// The header's size field is 0 (Perfetto aborts the import on this).
    ZeroSize,
    /// The record's contents run past the size in its header.
    Overrun,
    /// An argument's size field disagrees with what its type needs.
    ArgSize {
        /// Argument type.
        arg_type: u8,
        /// Words the header claims.
        claimed: u64,
        /// Words actually used.
        used: u64,
    },
    /// A string index that is not in the table.
    UnknownString(u16),
    /// A thread index that is not in the table.
    UnknownThread(u8),
    /// A string that is not valid UTF-8.
    InvalidUtf8,
    /// A trace-info magic record whose word is not the FXT magic.
    BadMagic(u64),
    /// A provider section for a provider that was never declared.
    UnknownProvider(u32),
    /// A second provider info record for the same id.
    DuplicateProvider(u32),
}

/// A parse error with the byte offset of the record it happened in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError {
    /// Offset of the record's header in the input.
    pub offset: usize,
    /// What went wrong.
    pub kind: ErrorKind,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FXT record at offset {:#x}: ", self.offset)?;
        match &self.kind {
            ErrorKind::Truncated { needed, available } => {
                write!(f, "truncated (needs {needed} bytes, {available} left)")
            }
            ErrorKind::ZeroSize => write!(f, "size field is 0"),
            ErrorKind::Overrun => write!(f, "contents run past the record size"),
            ErrorKind::ArgSize {
                arg_type,
                claimed,
                used,
            } => write!(
                f,
                "argument of type {arg_type} claims {claimed} words but uses {used}"
            ),
            ErrorKind::UnknownString(i) => write!(f, "unknown string index {i}"),
            ErrorKind::UnknownThread(i) => write!(f, "unknown thread index {i}"),
            ErrorKind::InvalidUtf8 => write!(f, "string is not valid UTF-8"),
            ErrorKind::BadMagic(w) => write!(f, "bad magic word {w:#018x}"),
            ErrorKind::UnknownProvider(id) => write!(f, "section for undeclared provider {id}"),
            ErrorKind::DuplicateProvider(id) => write!(f, "provider {id} declared twice"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A decoded argument value.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArgValue<'a> {
    /// Null.
    Null,
    /// int32.
    Int32(i32),
    /// uint32.
    UInt32(u32),
    /// int64.
    Int64(i64),
    /// uint64.
    UInt64(u64),
    /// double.
    Double(f64),
    /// String (inline or indexed, resolved).
    Str(&'a str),
    /// Pointer.
    Pointer(u64),
    /// Kernel object id.
    Koid(u64),
    /// Boolean.
    Bool(bool),
    /// A type this reader does not decode (skipped using its size field).
    Unknown {
        /// The argument type number.
        arg_type: u8,
    },
}

impl ArgValue<'_> {
    /// The value as a signed integer, for any of the integer types that fit.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            ArgValue::Int32(v) => Some(i64::from(v)),
            ArgValue::UInt32(v) => Some(i64::from(v)),
            ArgValue::Int64(v) => Some(v),
            ArgValue::UInt64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Whether Perfetto treats the value as a number (counter series need one).
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            ArgValue::Int32(_)
                | ArgValue::UInt32(_)
                | ArgValue::Int64(_)
                | ArgValue::UInt64(_)
                | ArgValue::Double(_)
        )
    }
}

/// A decoded, named argument.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Arg<'a> {
    /// Resolved name.
    pub name: &'a str,
    /// Value.
    pub value: ArgValue<'a>,
}

const NO_ARG: Arg<'static> = Arg {
    name: "",
    value: ArgValue::Null,
};

/// The arguments of one record, stored inline (at most 15) so reading allocates nothing.
#[derive(Copy, Clone)]
pub struct Args<'a> {
    items: [Arg<'a>; format::MAX_ARGS],
    len: u8,
}

impl<'a> Args<'a> {
    fn new() -> Self {
        Args {
            items: [NO_ARG; format::MAX_ARGS],
            len: 0,
        }
    }

    /// The value of the first argument called `name`.
    pub fn get(&self, name: &str) -> Option<ArgValue<'a>> {
        self.iter().find(|a| a.name == name).map(|a| a.value)
    }
}

impl<'a> Deref for Args<'a> {
    type Target = [Arg<'a>];
    fn deref(&self) -> &[Arg<'a>] {
        &self.items[..usize::from(self.len)]
    }
}

impl fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Args<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

/// The type of an event and its trailer word.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Instant.
    Instant,
    /// Counter, with its id.
    Counter {
        /// Counter id.
        id: u64,
    },
    /// Duration begin.
    Begin,
    /// Duration end.
    End,
    /// Duration complete, with its absolute end timestamp.
    Complete {
        /// End, in ticks.
        end: u64,
    },
    /// Async begin.
    AsyncBegin {
        /// Correlation id.
        id: u64,
    },
    /// Async instant.
    AsyncInstant {
        /// Correlation id.
        id: u64,
    },
    /// Async end.
    AsyncEnd {
        /// Correlation id.
        id: u64,
    },
    /// Flow begin.
    FlowBegin {
        /// Flow id.
        id: u64,
    },
    /// Flow step.
    FlowStep {
        /// Flow id.
        id: u64,
    },
    /// Flow end.
    FlowEnd {
        /// Flow id.
        id: u64,
    },
    /// An event type the spec does not define (11..=15); no trailer is read.
    Unknown(u8),
}

/// A decoded event record.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Event<'a> {
    /// Type and trailer.
    pub kind: EventKind,
    /// Timestamp in ticks.
    pub timestamp: u64,
    /// Process koid.
    pub pid: u64,
    /// Thread koid.
    pub tid: u64,
    /// Resolved category.
    pub category: &'a str,
    /// Resolved name.
    pub name: &'a str,
    /// Arguments.
    pub args: Args<'a>,
}

/// A decoded kernel object record.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct KernelObject<'a> {
    /// `ZX_OBJ_TYPE` (1 process, 2 thread).
    pub obj_type: u8,
    /// The object's koid.
    pub koid: u64,
    /// Resolved name.
    pub name: &'a str,
    /// Arguments (threads carry `"process"`).
    pub args: Args<'a>,
}

/// One FXT record.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Record<'a> {
    /// The magic (trace-info type 0) record.
    Magic,
    /// Provider info: declares a provider and makes it current.
    ProviderInfo {
        /// Provider id.
        id: u32,
        /// Provider name.
        name: &'a str,
    },
    /// Provider section: makes a declared provider current.
    ProviderSection {
        /// Provider id.
        id: u32,
    },
    /// Provider event (0 = buffer full, records dropped).
    ProviderEvent {
        /// Provider id.
        id: u32,
        /// Event number.
        event: u8,
    },
    /// Initialization record.
    Initialization {
        /// Ticks per second for the current provider.
        ticks_per_second: u64,
    },
    /// String table entry (index 0 is ignored, as the spec says).
    String {
        /// Table index.
        index: u16,
        /// Value.
        value: &'a str,
    },
    /// Thread table entry (index 0 is ignored).
    Thread {
        /// Table index.
        index: u8,
        /// Process koid.
        pid: u64,
        /// Thread koid.
        tid: u64,
    },
    /// An event.
    Event(Event<'a>),
    /// A kernel object (process or thread name).
    KernelObject(KernelObject<'a>),
    /// Any other record (blob, userspace object, scheduling, log, large, unknown
    /// metadata or reserved types), skipped using its size.
    Other {
        /// Record type (`[0..3]`).
        record_type: u8,
        /// The full header word.
        header: u64,
        /// Size in words, header included.
        words: u64,
    },
}

/// Per-provider decoding state.
struct Provider<'a> {
    id: u32,
    declared: bool,
    /// Lazily sized to 32 768 entries on the first string record.
    strings: Vec<Option<&'a str>>,
    threads: [Option<(u64, u64)>; 256],
    ticks_per_second: u64,
}

impl Provider<'_> {
    fn new(id: u32, declared: bool) -> Self {
        Provider {
            id,
            declared,
            strings: Vec::new(),
            threads: [None; 256],
            ticks_per_second: 1_000_000_000,
        }
    }
}

/// Bit field `[lo..=hi]` of `w`.
#[inline]
fn bits(w: u64, lo: u32, hi: u32) -> u64 {
    (w >> lo) & (u64::MAX >> (63 - (hi - lo)))
}

/// A bounds-checked cursor inside one record.
struct Cursor<'a> {
    rec: &'a [u8],
    off: usize,
}

impl<'a> Cursor<'a> {
    fn word(&mut self) -> Result<u64, ErrorKind> {
        let bytes = self
            .rec
            .get(self.off..self.off + 8)
            .ok_or(ErrorKind::Overrun)?;
        self.off += 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(w))
    }

    fn stream(&mut self, len: usize) -> Result<&'a [u8], ErrorKind> {
        let padded = len.div_ceil(8) * 8;
        let end = self.off.checked_add(padded).ok_or(ErrorKind::Overrun)?;
        let bytes = self.rec.get(self.off..end).ok_or(ErrorKind::Overrun)?;
        self.off = end;
        Ok(&bytes[..len])
    }

    fn str(&mut self, len: usize) -> Result<&'a str, ErrorKind> {
        std::str::from_utf8(self.stream(len)?).map_err(|_| ErrorKind::InvalidUtf8)
    }
}

/// Iterator over the records of an FXT byte slice.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    providers: Vec<Provider<'a>>,
    current: usize,
    done: bool,
}

impl<'a> Reader<'a> {
    /// Starts reading `data` (uncompressed FXT) from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Reader {
            data,
            pos: 0,
            // Perfetto pre-registers provider 0, so files without provider records work.
            providers: vec![Provider::new(0, false)],
            current: 0,
            done: false,
        }
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Ticks per second of the current provider (1e9 until an initialization record).
    pub fn ticks_per_second(&self) -> u64 {
        self.providers
            .get(self.current)
            .map_or(1_000_000_000, |p| p.ticks_per_second)
    }

    fn next_record(&mut self) -> Result<Option<Record<'a>>, ErrorKind> {
        let rest = &self.data[self.pos..];
        if rest.is_empty() {
            return Ok(None);
        }
        let Some(head) = rest.get(..8) else {
            return Err(ErrorKind::Truncated {
                needed: 8,
                available: rest.len() as u64,
            });
        };
        let mut hw = [0u8; 8];
        hw.copy_from_slice(head);
        let header = u64::from_le_bytes(hw);
        let record_type = bits(header, 0, 3) as u8;
        let words = if record_type == record::LARGE {
            bits(header, 4, 35)
        } else {
            bits(header, 4, 15)
        };
        if words == 0 {
            return Err(ErrorKind::ZeroSize);
        }
        let needed = words * 8;
        if needed > rest.len() as u64 {
            return Err(ErrorKind::Truncated {
                needed,
                available: rest.len() as u64,
            });
        }
        // `needed` <= rest.len(), so it fits in usize.
        let rec = &rest[..needed as usize];
        let mut cur = Cursor { rec, off: 8 };
        let parsed = self.parse(header, record_type, words, &mut cur)?;
        self.pos += rec.len();
        Ok(Some(parsed))
    }

    fn parse(
        &mut self,
        header: u64,
        record_type: u8,
        words: u64,
        cur: &mut Cursor<'a>,
    ) -> Result<Record<'a>, ErrorKind> {
        let other = Record::Other {
            record_type,
            header,
            words,
        };
        match record_type {
            record::METADATA => self.parse_metadata(header, cur).map(|r| r.unwrap_or(other)),
            record::INITIALIZATION => {
                let ticks_per_second = cur.word()?;
                self.provider().ticks_per_second = ticks_per_second;
                Ok(Record::Initialization { ticks_per_second })
            }
            record::STRING => {
                let index = bits(header, 16, 30) as u16;
                let len = bits(header, 32, 46) as usize;
                let value = cur.str(len)?;
                if index != 0 {
                    let p = self.provider();
                    if p.strings.is_empty() {
                        p.strings = vec![None; usize::from(format::MAX_STRING_INDEX) + 1];
                    }
                    p.strings[usize::from(index)] = Some(value);
                }
                Ok(Record::String { index, value })
            }
            record::THREAD => {
                let index = bits(header, 16, 23) as u8;
                let pid = cur.word()?;
                let tid = cur.word()?;
                if index != 0 {
                    self.provider().threads[usize::from(index)] = Some((pid, tid));
                }
                Ok(Record::Thread { index, pid, tid })
            }
            record::EVENT => self.parse_event(header, cur).map(Record::Event),
            record::KERNEL_OBJECT => {
                let obj_type = bits(header, 16, 23) as u8;
                let name_ref = bits(header, 24, 39) as u16;
                let nargs = bits(header, 40, 43) as usize;
                let koid = cur.word()?;
                let name = self.string(name_ref, cur)?;
                let args = self.parse_args(nargs, cur)?;
                Ok(Record::KernelObject(KernelObject {
                    obj_type,
                    koid,
                    name,
                    args,
                }))
            }
            _ => Ok(other),
        }
    }

    /// Parses a metadata record; `None` for sub-types that are only skipped.
    fn parse_metadata(
        &mut self,
        header: u64,
        cur: &mut Cursor<'a>,
    ) -> Result<Option<Record<'a>>, ErrorKind> {
        let id = bits(header, 20, 51) as u32;
        match bits(header, 16, 19) as u8 {
            metadata::PROVIDER_INFO => {
                let len = bits(header, 52, 59) as usize;
                let name = cur.str(len)?;
                match self.providers.iter().position(|p| p.id == id) {
                    Some(i) if self.providers[i].declared => {
                        return Err(ErrorKind::DuplicateProvider(id))
                    }
                    Some(i) => {
                        self.providers[i].declared = true;
                        self.current = i;
                    }
                    None => {
                        self.providers.push(Provider::new(id, true));
                        self.current = self.providers.len() - 1;
                    }
                }
                Ok(Some(Record::ProviderInfo { id, name }))
            }
            metadata::PROVIDER_SECTION => {
                let i = self
                    .providers
                    .iter()
                    .position(|p| p.id == id)
                    .ok_or(ErrorKind::UnknownProvider(id))?;
                self.current = i;
                Ok(Some(Record::ProviderSection { id }))
            }
            metadata::PROVIDER_EVENT => Ok(Some(Record::ProviderEvent {
                id,
                event: bits(header, 52, 55) as u8,
            })),
            metadata::TRACE_INFO if bits(header, 20, 23) == 0 => {
                if header != format::MAGIC {
                    return Err(ErrorKind::BadMagic(header));
                }
                Ok(Some(Record::Magic))
            }
            _ => Ok(None),
        }
    }

    fn parse_event(&mut self, header: u64, cur: &mut Cursor<'a>) -> Result<Event<'a>, ErrorKind> {
        let event_type = bits(header, 16, 19) as u8;
        let nargs = bits(header, 20, 23) as usize;
        let thread_ref = bits(header, 24, 31) as u8;
        let category_ref = bits(header, 32, 47) as u16;
        let name_ref = bits(header, 48, 63) as u16;
        let timestamp = cur.word()?;
        let (pid, tid) = if thread_ref == 0 {
            (cur.word()?, cur.word()?)
        } else {
            self.provider().threads[usize::from(thread_ref)]
                .ok_or(ErrorKind::UnknownThread(thread_ref))?
        };
        let category = self.string(category_ref, cur)?;
        let name = self.string(name_ref, cur)?;
        let args = self.parse_args(nargs, cur)?;
        let kind = match event_type {
            event::INSTANT => EventKind::Instant,
            event::BEGIN => EventKind::Begin,
            event::END => EventKind::End,
            event::COUNTER => EventKind::Counter { id: cur.word()? },
            event::COMPLETE => EventKind::Complete { end: cur.word()? },
            event::ASYNC_BEGIN => EventKind::AsyncBegin { id: cur.word()? },
            event::ASYNC_INSTANT => EventKind::AsyncInstant { id: cur.word()? },
            event::ASYNC_END => EventKind::AsyncEnd { id: cur.word()? },
            event::FLOW_BEGIN => EventKind::FlowBegin { id: cur.word()? },
            event::FLOW_STEP => EventKind::FlowStep { id: cur.word()? },
            event::FLOW_END => EventKind::FlowEnd { id: cur.word()? },
            other => EventKind::Unknown(other),
        };
        Ok(Event {
            kind,
            timestamp,
            pid,
            tid,
            category,
            name,
            args,
        })
    }

    fn parse_args(&mut self, n: usize, cur: &mut Cursor<'a>) -> Result<Args<'a>, ErrorKind> {
        let mut args = Args::new();
        for slot in args.items.iter_mut().take(n) {
            let start = cur.off;
            let h = cur.word()?;
            let arg_type = bits(h, 0, 3) as u8;
            let claimed = bits(h, 4, 15);
            let end = start as u64 + claimed * 8;
            if end > cur.rec.len() as u64 {
                return Err(ErrorKind::Overrun);
            }
            let name = self.string(bits(h, 16, 31) as u16, cur)?;
            let value = match arg_type {
                arg::NULL => ArgValue::Null,
                arg::INT32 => ArgValue::Int32(bits(h, 32, 63) as u32 as i32),
                arg::UINT32 => ArgValue::UInt32(bits(h, 32, 63) as u32),
                arg::INT64 => ArgValue::Int64(cur.word()? as i64),
                arg::UINT64 => ArgValue::UInt64(cur.word()?),
                arg::DOUBLE => ArgValue::Double(f64::from_bits(cur.word()?)),
                arg::STRING => ArgValue::Str(self.string(bits(h, 32, 47) as u16, cur)?),
                arg::POINTER => ArgValue::Pointer(cur.word()?),
                arg::KOID => ArgValue::Koid(cur.word()?),
                arg::BOOL => ArgValue::Bool(bits(h, 32, 32) == 1),
                other => ArgValue::Unknown { arg_type: other },
            };
            let used = (cur.off - start) as u64 / 8;
            let known = arg_type <= arg::BOOL;
            if (known && used != claimed) || used > claimed {
                return Err(ErrorKind::ArgSize {
                    arg_type,
                    claimed,
                    used,
                });
            }
            // `end` <= rec.len(), checked above.
            cur.off = end as usize;
            *slot = Arg { name, value };
            args.len += 1;
        }
        Ok(args)
    }

    fn string(&mut self, r: u16, cur: &mut Cursor<'a>) -> Result<&'a str, ErrorKind> {
        if r == 0 {
            Ok("")
        } else if r & 0x8000 != 0 {
            cur.str(usize::from(r & 0x7FFF))
        } else {
            self.provider()
                .strings
                .get(usize::from(r))
                .copied()
                .flatten()
                .ok_or(ErrorKind::UnknownString(r))
        }
    }

    fn provider(&mut self) -> &mut Provider<'a> {
        // `current` always indexes `providers`, which is never empty.
        &mut self.providers[self.current]
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let offset = self.pos;
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(kind) => {
                self.done = true;
                Some(Err(ReadError { offset, kind }))
            }
        }
    }
}

/// Reads every record of `data`, stopping at the first error.
pub fn read_all(data: &[u8]) -> Result<Vec<Record<'_>>, ReadError> {
    Reader::new(data).collect()
}

/// Reads the event records of `data` (other records are applied to the tables and dropped).
pub fn read_events(data: &[u8]) -> Result<Vec<Event<'_>>, ReadError> {
    let mut out = Vec::new();
    for r in Reader::new(data) {
        if let Record::Event(e) = r? {
            out.push(e);
        }
    }
    Ok(out)
}

/// Whether `data` starts with the gzip magic bytes (callers gunzip before reading).
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}
