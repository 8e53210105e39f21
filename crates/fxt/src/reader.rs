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
    /// The input could not be read (a [`StreamReader`](crate::stream::StreamReader)'s
    /// source failed: a damaged gzip stream, an I/O error).
    Io(String),
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
            ErrorKind::Io(e) => write!(f, "cannot read on: {e}"),
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

/// Per-provider decoding state; `S` is how the string table keeps its strings
/// (borrowed from the input by [`Reader`], owned by [`StreamReader`](crate::stream::StreamReader)).
pub(crate) struct Provider<S> {
    id: u32,
    declared: bool,
    /// Lazily sized to 32 768 entries on the first string record.
    strings: Vec<Option<S>>,
    threads: [Option<(u64, u64)>; 256],
    ticks_per_second: u64,
}

impl<S: Clone> Provider<S> {
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

/// Where a record's string and thread references are resolved: one provider's tables
/// as they stand at that record.
pub(crate) trait Lookup<'s> {
    /// The string at table index `index`.
    fn string(&self, index: u16) -> Option<&'s str>;
    /// The (pid, tid) at thread table index `index`.
    fn thread(&self, index: u8) -> Option<(u64, u64)>;
}

impl<'a> Lookup<'a> for Provider<&'a str> {
    fn string(&self, index: u16) -> Option<&'a str> {
        self.strings.get(usize::from(index)).copied().flatten()
    }
    fn thread(&self, index: u8) -> Option<(u64, u64)> {
        self.threads[usize::from(index)]
    }
}

impl<'s> Lookup<'s> for &'s Provider<Box<str>> {
    fn string(&self, index: u16) -> Option<&'s str> {
        self.strings.get(usize::from(index))?.as_deref()
    }
    fn thread(&self, index: u8) -> Option<(u64, u64)> {
        self.threads[usize::from(index)]
    }
}

/// What a record changes in the decoding state, with its string kept as `S`.
pub(crate) enum Update<S> {
    String { index: u16, value: S },
    Thread { index: u8, pid: u64, tid: u64 },
    ProviderInfo { id: u32 },
    ProviderSection { id: u32 },
    Initialization { ticks_per_second: u64 },
}

impl<S> Update<S> {
    /// The change `rec` makes, if any; `keep` turns a borrowed string into an `S`.
    pub(crate) fn of<'r>(rec: &Record<'r>, keep: impl FnOnce(&'r str) -> S) -> Option<Self> {
        Some(match *rec {
            Record::String { index, value } => Update::String {
                index,
                value: keep(value),
            },
            Record::Thread { index, pid, tid } => Update::Thread { index, pid, tid },
            Record::ProviderInfo { id, .. } => Update::ProviderInfo { id },
            Record::ProviderSection { id } => Update::ProviderSection { id },
            Record::Initialization { ticks_per_second } => {
                Update::Initialization { ticks_per_second }
            }
            _ => return None,
        })
    }
}

/// Every provider seen so far and which one is current.
pub(crate) struct Providers<S> {
    list: Vec<Provider<S>>,
    current: usize,
}

impl<S: Clone> Providers<S> {
    pub(crate) fn new() -> Self {
        Providers {
            // Perfetto pre-registers provider 0, so files without provider records work.
            list: vec![Provider::new(0, false)],
            current: 0,
        }
    }

    /// The current provider's tables.
    pub(crate) fn current(&self) -> &Provider<S> {
        // `current` always indexes `list`, which is never empty.
        &self.list[self.current]
    }

    fn current_mut(&mut self) -> &mut Provider<S> {
        &mut self.list[self.current]
    }

    /// Ticks per second of the current provider (1e9 until an initialization record).
    pub(crate) fn ticks_per_second(&self) -> u64 {
        self.current().ticks_per_second
    }

    /// Applies what a record changes (string and thread tables, providers, tick rate).
    pub(crate) fn apply(&mut self, update: Update<S>) -> Result<(), ErrorKind> {
        match update {
            Update::String { index, value } => {
                if index != 0 {
                    let p = self.current_mut();
                    if p.strings.is_empty() {
                        p.strings = vec![None; usize::from(format::MAX_STRING_INDEX) + 1];
                    }
                    p.strings[usize::from(index)] = Some(value);
                }
            }
            Update::Thread { index, pid, tid } => {
                if index != 0 {
                    self.current_mut().threads[usize::from(index)] = Some((pid, tid));
                }
            }
            Update::ProviderInfo { id } => match self.list.iter().position(|p| p.id == id) {
                Some(i) if self.list[i].declared => return Err(ErrorKind::DuplicateProvider(id)),
                Some(i) => {
                    self.list[i].declared = true;
                    self.current = i;
                }
                None => {
                    self.list.push(Provider::new(id, true));
                    self.current = self.list.len() - 1;
                }
            },
            Update::ProviderSection { id } => {
                self.current = self
                    .list
                    .iter()
                    .position(|p| p.id == id)
                    .ok_or(ErrorKind::UnknownProvider(id))?;
            }
            Update::Initialization { ticks_per_second } => {
                self.current_mut().ticks_per_second = ticks_per_second;
            }
        }
        Ok(())
    }
}

/// Bit field `[lo..=hi]` of `w`.
#[inline]
fn bits(w: u64, lo: u32, hi: u32) -> u64 {
    (w >> lo) & (u64::MAX >> (63 - (hi - lo)))
}

/// The record's type and its size in words (both from its header word).
#[inline]
pub(crate) fn type_and_words(header: u64) -> (u8, u64) {
    let record_type = bits(header, 0, 3) as u8;
    let words = if record_type == record::LARGE {
        bits(header, 4, 35)
    } else {
        bits(header, 4, 15)
    };
    (record_type, words)
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
    providers: Providers<&'a str>,
    done: bool,
}

impl<'a> Reader<'a> {
    /// Starts reading `data` (uncompressed FXT) from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Reader {
            data,
            pos: 0,
            providers: Providers::new(),
            done: false,
        }
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Ticks per second of the current provider (1e9 until an initialization record).
    pub fn ticks_per_second(&self) -> u64 {
        self.providers.ticks_per_second()
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
        let (_, words) = type_and_words(header);
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
        let parsed = decode(header, rec, self.providers.current())?;
        if let Some(u) = Update::of(&parsed, |s| s) {
            self.providers.apply(u)?;
        }
        self.pos += rec.len();
        Ok(Some(parsed))
    }
}

/// Decodes one whole record (`rec`, header word included) against `tables`, which it
/// does not change: [`Update::of`] says what the record changes.
pub(crate) fn decode<'s>(
    header: u64,
    rec: &'s [u8],
    tables: &impl Lookup<'s>,
) -> Result<Record<'s>, ErrorKind> {
    let (record_type, words) = type_and_words(header);
    let mut cur = Cursor { rec, off: 8 };
    let cur = &mut cur;
    let other = Record::Other {
        record_type,
        header,
        words,
    };
    match record_type {
        record::METADATA => parse_metadata(header, cur).map(|r| r.unwrap_or(other)),
        record::INITIALIZATION => Ok(Record::Initialization {
            ticks_per_second: cur.word()?,
        }),
        record::STRING => {
            let index = bits(header, 16, 30) as u16;
            let len = bits(header, 32, 46) as usize;
            let value = cur.str(len)?;
            Ok(Record::String { index, value })
        }
        record::THREAD => {
            let index = bits(header, 16, 23) as u8;
            let pid = cur.word()?;
            let tid = cur.word()?;
            Ok(Record::Thread { index, pid, tid })
        }
        record::EVENT => parse_event(header, cur, tables).map(Record::Event),
        record::KERNEL_OBJECT => {
            let obj_type = bits(header, 16, 23) as u8;
            let name_ref = bits(header, 24, 39) as u16;
            let nargs = bits(header, 40, 43) as usize;
            let koid = cur.word()?;
            let name = string(name_ref, cur, tables)?;
            let args = parse_args(nargs, cur, tables)?;
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
fn parse_metadata<'s>(header: u64, cur: &mut Cursor<'s>) -> Result<Option<Record<'s>>, ErrorKind> {
    let id = bits(header, 20, 51) as u32;
    match bits(header, 16, 19) as u8 {
        metadata::PROVIDER_INFO => {
            let len = bits(header, 52, 59) as usize;
            let name = cur.str(len)?;
            Ok(Some(Record::ProviderInfo { id, name }))
        }
        metadata::PROVIDER_SECTION => Ok(Some(Record::ProviderSection { id })),
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

/// An event record's fields before its arguments.
struct EventFields<'s> {
    event_type: u8,
    nargs: usize,
    timestamp: u64,
    pid: u64,
    tid: u64,
    category: &'s str,
    name: &'s str,
}

fn event_fields<'s>(
    header: u64,
    cur: &mut Cursor<'s>,
    tables: &impl Lookup<'s>,
) -> Result<EventFields<'s>, ErrorKind> {
    let thread_ref = bits(header, 24, 31) as u8;
    let timestamp = cur.word()?;
    let (pid, tid) = if thread_ref == 0 {
        (cur.word()?, cur.word()?)
    } else {
        tables
            .thread(thread_ref)
            .ok_or(ErrorKind::UnknownThread(thread_ref))?
    };
    Ok(EventFields {
        event_type: bits(header, 16, 19) as u8,
        nargs: bits(header, 20, 23) as usize,
        timestamp,
        pid,
        tid,
        category: string(bits(header, 32, 47) as u16, cur, tables)?,
        name: string(bits(header, 48, 63) as u16, cur, tables)?,
    })
}

/// The event's type with its trailer word (read after the arguments).
fn event_kind(event_type: u8, cur: &mut Cursor<'_>) -> Result<EventKind, ErrorKind> {
    Ok(match event_type {
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
    })
}

fn parse_event<'s>(
    header: u64,
    cur: &mut Cursor<'s>,
    tables: &impl Lookup<'s>,
) -> Result<Event<'s>, ErrorKind> {
    let f = event_fields(header, cur, tables)?;
    let args = parse_args(f.nargs, cur, tables)?;
    Ok(Event {
        kind: event_kind(f.event_type, cur)?,
        timestamp: f.timestamp,
        pid: f.pid,
        tid: f.tid,
        category: f.category,
        name: f.name,
        args,
    })
}

/// Steps over `n` arguments by their size fields, checking each stays in the record.
fn skip_args(n: usize, cur: &mut Cursor<'_>) -> Result<(), ErrorKind> {
    for _ in 0..n {
        let start = cur.off;
        let h = cur.word()?;
        let claimed = bits(h, 4, 15);
        if claimed == 0 {
            return Err(ErrorKind::ArgSize {
                arg_type: bits(h, 0, 3) as u8,
                claimed,
                used: 1,
            });
        }
        let end = start as u64 + claimed * 8;
        if end > cur.rec.len() as u64 {
            return Err(ErrorKind::Overrun);
        }
        cur.off = end as usize;
    }
    Ok(())
}

/// An event without its arguments: what a summary of the slices needs, at a tenth of
/// [`Event`]'s size (moving `Event`'s 15 inline arguments around is most of the cost of
/// reading a large trace).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct EventHead<'a> {
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
}

/// A record read without arguments (`StreamReader::next_head`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Head<'a> {
    /// An event.
    Event(EventHead<'a>),
    /// A kernel object (process or thread name).
    KernelObject {
        /// `ZX_OBJ_TYPE` (1 process, 2 thread).
        obj_type: u8,
        /// The object's koid.
        koid: u64,
        /// Resolved name.
        name: &'a str,
    },
    /// Initialization record: ticks per second from here on.
    Initialization {
        /// Ticks per second.
        ticks_per_second: u64,
    },
    /// Any other record (table entries are applied all the same).
    Other,
}

/// Decodes an event or kernel object record without its arguments; `None` for others.
pub(crate) fn decode_head<'s>(
    header: u64,
    rec: &'s [u8],
    tables: &impl Lookup<'s>,
) -> Result<Option<Head<'s>>, ErrorKind> {
    let (record_type, _) = type_and_words(header);
    let mut cur = Cursor { rec, off: 8 };
    match record_type {
        record::EVENT => {
            let f = event_fields(header, &mut cur, tables)?;
            skip_args(f.nargs, &mut cur)?;
            Ok(Some(Head::Event(EventHead {
                kind: event_kind(f.event_type, &mut cur)?,
                timestamp: f.timestamp,
                pid: f.pid,
                tid: f.tid,
                category: f.category,
                name: f.name,
            })))
        }
        record::KERNEL_OBJECT => {
            let obj_type = bits(header, 16, 23) as u8;
            let koid = cur.word()?;
            let name = string(bits(header, 24, 39) as u16, &mut cur, tables)?;
            skip_args(bits(header, 40, 43) as usize, &mut cur)?;
            Ok(Some(Head::KernelObject {
                obj_type,
                koid,
                name,
            }))
        }
        _ => Ok(None),
    }
}

fn parse_args<'s>(
    n: usize,
    cur: &mut Cursor<'s>,
    tables: &impl Lookup<'s>,
) -> Result<Args<'s>, ErrorKind> {
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
        let name = string(bits(h, 16, 31) as u16, cur, tables)?;
        let value = match arg_type {
            arg::NULL => ArgValue::Null,
            arg::INT32 => ArgValue::Int32(bits(h, 32, 63) as u32 as i32),
            arg::UINT32 => ArgValue::UInt32(bits(h, 32, 63) as u32),
            arg::INT64 => ArgValue::Int64(cur.word()? as i64),
            arg::UINT64 => ArgValue::UInt64(cur.word()?),
            arg::DOUBLE => ArgValue::Double(f64::from_bits(cur.word()?)),
            arg::STRING => ArgValue::Str(string(bits(h, 32, 47) as u16, cur, tables)?),
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

fn string<'s>(
    r: u16,
    cur: &mut Cursor<'s>,
    tables: &impl Lookup<'s>,
) -> Result<&'s str, ErrorKind> {
    if r == 0 {
        Ok("")
    } else if r & 0x8000 != 0 {
        cur.str(usize::from(r & 0x7FFF))
    } else {
        tables.string(r).ok_or(ErrorKind::UnknownString(r))
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
