//! Splits perf's stdout into the filter's binary records and perf's own text, and
//! turns both into events in the order they arrived.

use crate::format::{self, Class, NO_NAME};
use crate::Error;
use ptscope_decode::{Decoder, Stats, Warning, DEFAULT_KEPT_WARNINGS};
use ptscope_event::{
    Event, EventData, ExtraEvent, Kind, Location, LocationHandle, StackHandle, StringTable, Sym,
    Symbol, Thread, TraceStateChange,
};
use std::collections::VecDeque;
use std::io::{self, BufRead, ErrorKind, Read};

/// Text is handed to the text decoder in chunks of at most about this size, cut
/// between groups, so memory stays bounded if perf prints a lot of it.
const TEXT_CHUNK: usize = 1 << 20;
/// A record longer than this is treated as corruption rather than allocated.
const MAX_RECORD: usize = 64 << 20;
/// A callchain longer than this is corruption: perf caps callchains at
/// `kernel.perf_event_max_stack` (at most 65535) plus its context markers.
const MAX_CHAIN_FRAMES: usize = 1 << 17;

/// Decodes a byte stream of filter records and perf text into [`Event`]s.
#[derive(Debug)]
pub struct RecordReader<R> {
    reader: R,
    /// What records refer to; apart from `reader`, so a record can be converted while
    /// it still sits in the reader's buffer.
    t: Tables,
    payload: Vec<u8>,
    text: Vec<u8>,
    /// Events decoded from text, and records that arrived behind them.
    ready: VecDeque<Event>,
    stats: Stats,
    warnings: Vec<Warning>,
    offset: u64,
    eof: bool,
    failed: bool,
    pending_error: Option<Error>,
    /// Text is flushed to the text decoder once this much is pending ([`TEXT_CHUNK`]).
    text_chunk: usize,
}

/// What a branch's flags say: a trace start or end, and the branch kind.
type BranchMeaning = (Option<TraceStateChange>, Option<Kind>);

/// The names, locations and chains sent so far, and the stream's state.
#[derive(Debug)]
struct Tables {
    strings: StringTable,
    /// Filter name id → interned name.
    names: Vec<Option<Sym>>,
    /// Filter location id → the location interned in `strings` (callchain frames,
    /// branch ends): the filter sends each distinct location once, so it is interned
    /// once, and branches carry the handle straight through.
    locs: Vec<LocationHandle>,
    /// Filter chain id → the callchain interned in `strings` (the filter sends each
    /// distinct chain once, so it is interned once).
    chains: Vec<StackHandle>,
    unknown_dso: Option<Sym>,
    scratch: String,
    /// Branch flags → their meaning, for the flag sets seen so far.
    flag_table: Vec<(u32, BranchMeaning)>,
    /// The last sample record's class, thread and time, which `NEXT_*` records repeat.
    last: Option<Common>,
    hello: bool,
    end: bool,
}

/// What was wrong with a record of the filter's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The stream does not start with the filter's hello record.
    NoHello,
    /// The filter writes another version of the format than this reader reads.
    Version(u32),
    /// The header's length field is beyond any real record (not allocated).
    TooLong(u64),
    /// A field runs past the end of the record.
    Short {
        /// Offset of the field in the record's payload.
        at: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes the payload has.
        len: usize,
    },
    /// A fixed-size record has another size.
    Length {
        /// Bytes the payload has.
        len: usize,
        /// Bytes this kind of record has.
        expected: usize,
    },
    /// A chain's frame count is 0, beyond perf's limit, or disagrees with its size.
    ChainFrames {
        /// Frames the record claims.
        frames: usize,
        /// Bytes the payload has.
        len: usize,
    },
    /// A name or location id out of sequence: ids are dense, so a gap is a lost record.
    OutOfOrder {
        /// What the id names.
        table: IdKind,
        /// The id sent.
        id: usize,
        /// The id due next.
        expected: usize,
    },
    /// A chain id beyond the next new one, or beyond the filter's limit.
    ChainId {
        /// The id sent.
        id: usize,
        /// The largest id allowed here.
        max: usize,
    },
    /// An id used before the record defining it.
    Unsent {
        /// What the id names.
        table: IdKind,
        /// The id.
        id: u32,
    },
    /// A stack sample whose chain has no frame.
    EmptyChain,
    /// A sample class this reader does not know.
    UnknownClass(u8),
    /// A record type this reader does not know.
    UnknownRecord(u8),
    /// A `NEXT_*` record with no sample record before it to repeat.
    NoPreviousSample,
    /// A `NEXT_*` record's time delta overflows the time.
    TimeOverflow,
    /// Branch flags perf would not print as words.
    UnprintableFlags(u32),
}

/// The kinds of ids the filter defines once and then refers to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IdKind {
    /// A symbol or DSO name (`NAME` records).
    Name,
    /// An address's location (`LOC` records).
    Location,
    /// A callchain (`CHAIN` records).
    Chain,
}

impl std::fmt::Display for IdKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IdKind::Name => "name",
            IdKind::Location => "location",
            IdKind::Chain => "chain",
        })
    }
}

impl std::fmt::Display for CorruptKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorruptKind::NoHello => {
                write!(f, "stream does not start with the filter's hello record")
            }
            CorruptKind::Version(v) => write!(
                f,
                "filter speaks version {v}, this ptscope reads {}",
                format::VERSION
            ),
            CorruptKind::TooLong(len) => write!(f, "record of {len} bytes"),
            CorruptKind::Short { at, needed, len } => write!(
                f,
                "record too short: a {needed}-byte field at byte {at} of a {len}-byte payload"
            ),
            CorruptKind::Length { len, expected } => {
                write!(f, "bad length {len} (this record has {expected} bytes)")
            }
            CorruptKind::ChainFrames { frames, len } => {
                write!(f, "chain of {frames} frames has {len} bytes")
            }
            CorruptKind::OutOfOrder {
                table,
                id,
                expected,
            } => write!(f, "{table} id {id}, expected {expected}"),
            CorruptKind::ChainId { id, max } => {
                write!(f, "chain id {id}, expected at most {max}")
            }
            CorruptKind::Unsent { table, id } => {
                write!(f, "{table} id {id} used before it was sent")
            }
            CorruptKind::EmptyChain => write!(f, "empty chain"),
            CorruptKind::UnknownClass(c) => write!(f, "unknown class {c}"),
            CorruptKind::UnknownRecord(t) => write!(f, "unknown record type {t}"),
            CorruptKind::NoPreviousSample => {
                write!(f, "a next-sample record without a sample record before it")
            }
            CorruptKind::TimeOverflow => write!(f, "time overflows"),
            CorruptKind::UnprintableFlags(x) => write!(f, "unprintable branch flags {x:#x}"),
        }
    }
}

/// What a record of type `ty` is called in messages.
pub(crate) fn record_name(ty: u8) -> &'static str {
    match ty {
        format::REC_HELLO => "hello",
        format::REC_NAME => "name",
        format::REC_STACK => "stack sample",
        format::REC_NEXT_STACK => "next stack sample",
        format::REC_CHAIN => "chain",
        format::REC_INLINE => "inline sample",
        format::REC_BRANCH => "branch",
        format::REC_NEXT_BRANCH => "next branch",
        format::REC_LOC => "location",
        format::REC_END => "end",
        _ => "unknown",
    }
}

/// Reads a record's little-endian fields in order, each checked against the record's
/// end, without copying (gimli's `Reader` in miniature).
#[derive(Copy, Clone, Debug)]
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The next `n` bytes.
    #[inline(always)]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], CorruptKind> {
        let b = self
            .pos
            .checked_add(n)
            .and_then(|end| self.buf.get(self.pos..end))
            .ok_or(CorruptKind::Short {
                at: self.pos,
                needed: n,
                len: self.buf.len(),
            })?;
        self.pos += n;
        Ok(b)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], CorruptKind> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, CorruptKind> {
        Ok(self.array::<1>()?[0])
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32, CorruptKind> {
        self.array().map(u32::from_le_bytes)
    }

    #[inline(always)]
    fn u64(&mut self) -> Result<u64, CorruptKind> {
        self.array().map(u64::from_le_bytes)
    }

    /// Passes over `n` bytes the reader has no use for.
    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<(), CorruptKind> {
        self.bytes(n).map(|_| ())
    }

    /// Everything after the fields read so far.
    #[inline(always)]
    fn rest(&mut self) -> &'a [u8] {
        let b = &self.buf[self.pos..];
        self.pos = self.buf.len();
        b
    }
}

/// `Err` unless the payload `p` is exactly `expected` bytes.
#[inline(always)]
fn expect_len(p: &[u8], expected: usize) -> Result<(), CorruptKind> {
    if p.len() == expected {
        Ok(())
    } else {
        Err(CorruptKind::Length {
            len: p.len(),
            expected,
        })
    }
}

/// The payload length in a record header.
#[inline(always)]
fn header_len(head: &[u8]) -> Result<usize, CorruptKind> {
    let mut c = Cursor::new(head);
    c.skip(2)?;
    Ok(c.u32()? as usize)
}

fn id(v: i32) -> Option<u32> {
    // As in the text decoder: perf's 0 and negative ids mean "not known".
    (v > 0).then_some(v as u32)
}

/// The fields every sample record starts with.
#[derive(Copy, Clone, Debug)]
struct Common {
    class: Class,
    thread: Thread,
    time: u64,
    flags: u32,
    period: u64,
}

impl<R: BufRead> RecordReader<R> {
    /// A reader with a fresh string table.
    pub fn new(reader: R) -> Self {
        RecordReader::with_strings(reader, StringTable::new())
    }

    /// A reader interning into an existing table.
    pub fn with_strings(reader: R, strings: StringTable) -> Self {
        RecordReader {
            reader,
            t: Tables {
                strings,
                names: Vec::new(),
                locs: Vec::new(),
                chains: Vec::new(),
                unknown_dso: None,
                scratch: String::new(),
                flag_table: Vec::new(),
                last: None,
                hello: false,
                end: false,
            },
            payload: Vec::new(),
            text: Vec::new(),
            ready: VecDeque::new(),
            stats: Stats::default(),
            warnings: Vec::new(),
            offset: 0,
            eof: false,
            failed: false,
            pending_error: None,
            text_chunk: TEXT_CHUNK,
        }
    }

    /// Hands text to the text decoder once `bytes` are pending instead of 1 MiB, so
    /// tests and fuzzing reach the flush with small inputs.
    pub fn with_text_chunk(mut self, bytes: usize) -> Self {
        self.text_chunk = bytes;
        self
    }

    /// The table events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        &self.t.strings
    }

    /// The table, to intern names into while events are adjusted.
    pub(crate) fn strings_mut(&mut self) -> &mut StringTable {
        &mut self.t.strings
    }

    /// Takes the table, leaving an empty one (names sent earlier are forgotten too).
    pub fn take_strings(&mut self) -> StringTable {
        self.t.names.clear();
        self.t.locs.clear();
        self.t.chains.clear();
        self.t.unknown_dso = None;
        std::mem::take(&mut self.t.strings)
    }

    /// Totals so far: `lines` counts text lines, `bytes` everything read.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Warnings from text the text decoder did not understand.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// True once the input ended (or failed) and every event was returned.
    pub fn is_finished(&self) -> bool {
        (self.eof || self.failed) && self.ready.is_empty()
    }

    /// True if the filter's end record was seen.
    pub fn saw_end(&self) -> bool {
        self.t.end
    }

    /// Reads until the filter's first record (or the end); false if it never came.
    pub fn wait_for_hello(&mut self) -> Result<bool, Error> {
        while !self.t.hello && !self.eof && !self.failed {
            match self.step() {
                Ok(Some(e)) => self.ready.push_back(e),
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            }
        }
        Ok(self.t.hello)
    }

    /// The next event, `Ok(None)` at the end. An error is returned once, after every
    /// event decoded before it.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                self.stats.events += 1;
                return Ok(Some(e));
            }
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            if self.eof || self.failed {
                return Ok(None);
            }
            match self.step() {
                // `step` returns an event only when nothing is queued before it.
                Ok(Some(e)) => {
                    self.stats.events += 1;
                    return Ok(Some(e));
                }
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    self.flush_text();
                    self.pending_error = Some(e);
                }
            }
        }
    }

    /// Reads one record or one text line; returns a record's event when no event is
    /// queued before it (else queues it).
    fn step(&mut self) -> Result<Option<Event>, Error> {
        let first = loop {
            match self.reader.fill_buf() {
                Ok([]) => break None,
                Ok(buf) => break Some(buf[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::Io(e)),
            }
        };
        match first {
            None => {
                self.eof = true;
                if !self.t.end && self.text.last().is_some_and(|&b| b != b'\n') {
                    // perf died mid-line: a partial line would decode as a wrong event.
                    let keep = self
                        .text
                        .iter()
                        .rposition(|&b| b == b'\n')
                        .map_or(0, |p| p + 1);
                    self.text.truncate(keep);
                }
                self.flush_text();
                if !self.t.end {
                    return Err(Error::Truncated {
                        events: self.stats.events + self.ready.len() as u64,
                    });
                }
                Ok(None)
            }
            Some(format::MARKER) => {
                self.flush_text();
                match self.record()? {
                    Some(e) if !self.ready.is_empty() => {
                        self.ready.push_back(e);
                        Ok(None)
                    }
                    e => Ok(e),
                }
            }
            Some(_) => {
                if self.text.len() >= self.text_chunk {
                    // Cut only before a group header, never inside a callchain.
                    let tab = self.reader.fill_buf().ok().and_then(|b| b.first().copied());
                    if tab != Some(b'\t') {
                        self.flush_text();
                    }
                }
                // Taken after a flush may have emptied the buffer: the new line starts here.
                let start = self.text.len();
                let n = self.reader.read_until(b'\n', &mut self.text)?;
                self.offset += n as u64;
                self.stats.bytes += n as u64;
                if is_sideband(&self.text[start..]) {
                    // Printed for the filter's sake; the text path never sees it.
                    self.text.truncate(start);
                }
                Ok(None)
            }
        }
    }

    /// Decodes the pending text with the text decoder, so what perf printed itself
    /// is understood exactly as on the text path.
    fn flush_text(&mut self) {
        if self.text.is_empty() {
            return;
        }
        let strings = std::mem::take(&mut self.t.strings);
        let mut d = Decoder::with_strings(&self.text[..], strings)
            .with_kept_warnings(DEFAULT_KEPT_WARNINGS.saturating_sub(self.warnings.len()));
        // Reading a slice cannot fail.
        while let Ok(Some(e)) = d.next_event() {
            self.ready.push_back(e);
        }
        let st = *d.stats();
        self.stats.lines += st.lines;
        self.stats.warnings += st.warnings;
        self.stats.ignored += st.ignored;
        self.warnings.extend_from_slice(d.warnings());
        self.t.strings = d.into_strings();
        self.text.clear();
    }

    /// Reads and converts one binary record.
    fn record(&mut self) -> Result<Option<Event>, Error> {
        // Nearly every record lies wholly in the reader's buffer: convert it in place.
        if let Ok(buf) = self.reader.fill_buf() {
            if let Ok(len) = header_len(buf) {
                let total = format::HEADER_LEN + len;
                if len <= MAX_RECORD && buf.len() >= total {
                    let (at, ty) = (self.offset, buf[1]);
                    let r = self.t.convert(ty, &buf[format::HEADER_LEN..total]);
                    self.reader.consume(total);
                    self.offset += total as u64;
                    self.stats.bytes += total as u64;
                    return r.map_err(|kind| corrupt(at, ty, kind));
                }
            }
        }
        let mut head = [0u8; format::HEADER_LEN];
        read_full(&mut self.reader, &mut head).map_err(|e| self.short(e))?;
        let ty = head[1];
        let len = header_len(&head).map_err(|kind| corrupt(self.offset, ty, kind))?;
        if len > MAX_RECORD {
            return Err(corrupt(self.offset, ty, CorruptKind::TooLong(len as u64)));
        }
        self.payload.clear();
        // Grown as bytes arrive, so a length from a damaged header costs no more memory
        // than the stream really holds.
        let got = (&mut self.reader)
            .take(len as u64)
            .read_to_end(&mut self.payload)
            .map_err(|e| self.short(e))?;
        if got < len {
            return Err(self.short(ErrorKind::UnexpectedEof.into()));
        }
        let at = self.offset;
        self.offset += (format::HEADER_LEN + len) as u64;
        self.stats.bytes += (format::HEADER_LEN + len) as u64;
        self.t
            .convert(ty, &self.payload)
            .map_err(|kind| corrupt(at, ty, kind))
    }

    fn short(&self, e: io::Error) -> Error {
        if e.kind() == ErrorKind::UnexpectedEof {
            Error::Truncated {
                events: self.stats.events + self.ready.len() as u64,
            }
        } else {
            Error::Io(e)
        }
    }
}

/// The error for a corrupt record of type `ty` at byte `offset` of the stream.
fn corrupt(offset: u64, ty: u8, kind: CorruptKind) -> Error {
    Error::Corrupt {
        offset,
        record: record_name(ty),
        kind,
    }
}

impl Tables {
    /// Converts one record: its event, if it is a sample.
    #[inline(always)]
    fn convert(&mut self, ty: u8, p: &[u8]) -> Result<Option<Event>, CorruptKind> {
        if !self.hello && ty != format::REC_HELLO {
            return Err(CorruptKind::NoHello);
        }
        let mut cur = Cursor::new(p);
        match ty {
            format::REC_HELLO => {
                let v = cur.u32()?;
                if v != format::VERSION {
                    return Err(CorruptKind::Version(v));
                }
                self.hello = true;
            }
            format::REC_NAME => {
                let id = cur.u32()? as usize;
                if id != self.names.len() {
                    // Ids are dense and sent in order; anything else is a lost record.
                    return Err(CorruptKind::OutOfOrder {
                        table: IdKind::Name,
                        id,
                        expected: self.names.len(),
                    });
                }
                let sym = self.strings.intern_bytes(cur.rest());
                self.names.push(Some(sym));
            }
            format::REC_STACK => {
                expect_len(p, format::STACK_LEN)?;
                let c = self.short_common(&mut cur)?;
                self.last = Some(c);
                let period = cur.u64()?;
                return self.stack(c, period, cur.u32()?);
            }
            format::REC_NEXT_STACK => {
                expect_len(p, format::NEXT_LEN)?;
                let c = self.next_common(cur.u32()?)?;
                let id = cur.u32()?;
                return self.stack(c, cur.u64()?, id);
            }
            format::REC_CHAIN => {
                let id = cur.u32()? as usize;
                let n = cur.u32()? as usize;
                if n == 0
                    || n > MAX_CHAIN_FRAMES
                    || Some(p.len()) != n.checked_mul(4).map(|b| b + 8)
                {
                    return Err(CorruptKind::ChainFrames {
                        frames: n,
                        len: p.len(),
                    });
                }
                if id > self.chains.len() || id >= format::MAX_CHAINS as usize {
                    return Err(CorruptKind::ChainId {
                        id,
                        max: self.chains.len(),
                    });
                }
                // The length was checked: `n` location ids, leaf first.
                let ids = cur.rest().chunks_exact(4);
                let id_at = |c: &[u8]| u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if let Some(l) = ids
                    .clone()
                    .map(id_at)
                    .find(|&l| l as usize >= self.locs.len())
                {
                    return Err(CorruptKind::Unsent {
                        table: IdKind::Location,
                        id: l,
                    });
                }
                // perf lists frames leaf first; stacks are root first.
                let locs = &self.locs;
                let chain = self
                    .strings
                    .intern_stack_handles(ids.rev().map(|c| locs[id_at(c) as usize]));
                if id < self.chains.len() {
                    // The filter started its ids again: the slot names another chain.
                    self.chains[id] = chain;
                } else {
                    self.chains.push(chain);
                }
            }
            format::REC_INLINE => {
                let c = self.common(&mut cur)?;
                expect_len(p, format::COMMON_LEN + format::LOC_LEN)?;
                let loc = self.loc(&mut cur)?;
                self.last = Some(c);
                let data = match extra(c.class) {
                    Some(name) => EventData::EventSample {
                        location: loc,
                        count: c.period,
                        name,
                    },
                    None => EventData::StackSample {
                        callstack: self.strings.intern_stack([loc]),
                    },
                };
                return Ok(Some(event(c, false, data)));
            }
            format::REC_BRANCH => {
                expect_len(p, format::BRANCH_LEN)?;
                let c = self.short_common(&mut cur)?;
                self.last = Some(c);
                return self.branch(c, &mut cur);
            }
            format::REC_NEXT_BRANCH => {
                expect_len(p, format::NEXT_LEN)?;
                let c = self.next_common(cur.u32()?)?;
                return self.branch(c, &mut cur);
            }
            format::REC_LOC => {
                expect_len(p, 4 + format::LOC_LEN)?;
                let id = cur.u32()? as usize;
                if id != self.locs.len() {
                    return Err(CorruptKind::OutOfOrder {
                        table: IdKind::Location,
                        id,
                        expected: self.locs.len(),
                    });
                }
                let loc = self.loc(&mut cur)?;
                let h = self.strings.intern_location(loc);
                self.locs.push(h);
            }
            format::REC_END => self.end = true,
            other => return Err(CorruptKind::UnknownRecord(other)),
        }
        Ok(None)
    }

    /// A stack sample's event: `id` names the chain.
    #[inline(always)]
    fn stack(&self, c: Common, period: u64, id: u32) -> Result<Option<Event>, CorruptKind> {
        let chain = *self.chains.get(id as usize).ok_or(CorruptKind::Unsent {
            table: IdKind::Chain,
            id,
        })?;
        let data = match extra(c.class) {
            Some(name) => EventData::EventSample {
                // perf's leaf frame: the last of a root-first chain.
                location: *self
                    .strings
                    .stack(chain)
                    .next_back()
                    .ok_or(CorruptKind::EmptyChain)?,
                count: period,
                name,
            },
            None => EventData::StackSample { callstack: chain },
        };
        Ok(Some(event(c, false, data)))
    }

    /// A branch's event from the rest of the record: flags u32, source and destination
    /// `LOC` ids.
    #[inline(always)]
    fn branch(&mut self, mut c: Common, cur: &mut Cursor) -> Result<Option<Event>, CorruptKind> {
        c.flags = cur.u32()?;
        let (s, d) = (cur.u32()?, cur.u32()?);
        let loc = |id: u32| {
            self.locs
                .get(id as usize)
                .copied()
                .ok_or(CorruptKind::Unsent {
                    table: IdKind::Location,
                    id,
                })
        };
        let (src, dst) = (loc(s)?, loc(d)?);
        let (change, kind) = self.branch_meaning(c.flags)?;
        let in_tx = c.flags & format::flags::IN_TX != 0;
        Ok(Some(event(
            c,
            in_tx,
            EventData::Trace {
                change,
                kind,
                src,
                dst,
            },
        )))
    }

    /// The common part of a `NEXT_*` record: the previous sample record's, `dt`
    /// nanoseconds later.
    #[inline(always)]
    fn next_common(&mut self, dt: u32) -> Result<Common, CorruptKind> {
        let mut c = self.last.ok_or(CorruptKind::NoPreviousSample)?;
        c.time = c
            .time
            .checked_add(dt.into())
            .ok_or(CorruptKind::TimeOverflow)?;
        self.last = Some(c);
        c.flags = 0;
        c.period = 0;
        Ok(c)
    }

    /// What branch `flags` mean, from a small table of the flag sets seen so far
    /// (a trace has a handful; the word rules are string comparisons).
    fn branch_meaning(&mut self, flags: u32) -> Result<BranchMeaning, CorruptKind> {
        if let Some(&(_, m)) = self.flag_table.iter().find(|e| e.0 == flags) {
            return Ok(m);
        }
        let (start, end, kind) = branch_kind(flags).ok_or(CorruptKind::UnprintableFlags(flags))?;
        let change = match (start, end) {
            (true, false) => Some(TraceStateChange::Start),
            (false, true) => Some(TraceStateChange::End),
            _ => None,
        };
        if self.flag_table.len() < 32 {
            self.flag_table.push((flags, (change, kind)));
        }
        Ok((change, kind))
    }

    /// The full common part: the short one, then cpu, flags, period and the fields
    /// the reader does not use (ip, addr, instruction and cycle counts).
    fn common(&self, cur: &mut Cursor) -> Result<Common, CorruptKind> {
        let mut c = self.short_common(cur)?;
        cur.skip(4)?;
        c.flags = cur.u32()?;
        c.period = cur.u64()?;
        cur.skip(8 * 4)?;
        Ok(c)
    }

    /// The short common part of `STACK` and `BRANCH` (flags and period left 0).
    #[inline(always)]
    fn short_common(&self, cur: &mut Cursor) -> Result<Common, CorruptKind> {
        let c = cur.u8()?;
        let class = Class::from_u8(c).ok_or(CorruptKind::UnknownClass(c))?;
        // cpumode and padding.
        cur.skip(3)?;
        let pid = id(cur.u32()? as i32);
        let tid = id(cur.u32()? as i32);
        Ok(Common {
            class,
            thread: Thread { pid, tid },
            time: cur.u64()?,
            flags: 0,
            period: 0,
        })
    }

    fn name(&self, id: u32) -> Result<Option<Sym>, CorruptKind> {
        if id == NO_NAME {
            return Ok(None);
        }
        match self.names.get(id as usize) {
            Some(Some(s)) => Ok(Some(*s)),
            _ => Err(CorruptKind::Unsent {
                table: IdKind::Name,
                id,
            }),
        }
    }

    /// A location as the text decoder builds it from `SYM+0xOFF (DSO)` or `[unknown] (DSO)`.
    fn loc(&mut self, cur: &mut Cursor) -> Result<Location, CorruptKind> {
        let ip = cur.u64()?;
        let sym = self.name(cur.u32()?)?;
        let dso = match self.name(cur.u32()?)? {
            Some(d) => d,
            None => *self
                .unknown_dso
                .get_or_insert_with(|| self.strings.intern("[unknown]")),
        };
        let offset = cur.u64()?;
        Ok(match sym {
            Some(s) => Location {
                ip,
                symbol: Symbol::FromPerf(s),
                offset: offset & (u64::MAX >> 1),
                dso: Some(dso),
            },
            None => {
                self.scratch.clear();
                self.scratch.push_str("[unknown @ ");
                ptscope_event::write_ocaml_int64_hex(&mut self.scratch, ip);
                self.scratch.push_str(" (");
                self.scratch.push_str(self.strings.get(dso));
                self.scratch.push_str(")]");
                let name = self.strings.intern(&self.scratch);
                Location {
                    ip,
                    symbol: Symbol::FromPerf(name),
                    offset: 0,
                    dso: Some(dso),
                }
            }
        })
    }
}

/// A side-band event line perf printed for the filter only (`HEADER: PERF_RECORD_MMAP2
/// …`): the first `": "` of the line is followed by `PERF_RECORD_`, which no sample line
/// has. Task lines (`COMM`, `FORK`, `EXIT`) and context switches (`SWITCH`,
/// `SWITCH_CPU_WIDE`) are not: the text path asks perf for them too (they name the
/// threads, and say when they were off CPU), so they go to the text decoder like there.
fn is_sideband(line: &[u8]) -> bool {
    line.windows(2).position(|w| w == b": ").is_some_and(|i| {
        let rest = &line[i + 2..];
        rest.starts_with(b"PERF_RECORD_")
            && ![
                &b"PERF_RECORD_COMM"[..],
                b"PERF_RECORD_FORK",
                b"PERF_RECORD_EXIT",
                b"PERF_RECORD_SWITCH",
            ]
            .iter()
            .any(|t| rest.starts_with(t))
    })
}

#[inline(always)]
fn event(c: Common, in_transaction: bool, data: EventData) -> Event {
    Event::Ok {
        thread: c.thread,
        time: c.time,
        in_transaction,
        data,
    }
}

fn extra(class: Class) -> Option<ExtraEvent> {
    match class {
        Class::BranchMisses => Some(ExtraEvent::BranchMisses),
        Class::CacheMisses => Some(ExtraEvent::CacheMisses),
        _ => None,
    }
}

/// (trace start, trace end, kind) as the text decoder reads perf's flag words.
fn branch_kind(flags: u32) -> Option<(bool, bool, Option<Kind>)> {
    let (prefix, name) = format::flag_words(flags)?;
    let start = prefix == "tr strt" || name == "tr strt";
    let end = prefix == "tr end" || name == "tr end";
    let kind = match name {
        "call" => Some(Kind::Call),
        "return" => Some(Kind::Return),
        "jcc" => Some(Kind::Jump),
        // magic-trace leaves the kind of `tr strt jmp` empty.
        "jmp" if !start => Some(Kind::Jump),
        "syscall" => Some(Kind::Syscall),
        "sysret" => Some(Kind::Sysret),
        "hw int" => Some(Kind::HardwareInterrupt),
        "iret" => Some(Kind::Iret),
        "int" => Some(Kind::Interrupt),
        "async" => Some(Kind::Async),
        "tx abrt" => Some(Kind::TxAbort),
        _ => None,
    };
    Some((start, end, kind))
}

/// `read_exact`, which retries on EINTR and reports a short read as `UnexpectedEof`.
fn read_full(r: &mut impl BufRead, buf: &mut [u8]) -> io::Result<()> {
    r.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds streams the way the filter writes them.
    #[derive(Default)]
    struct W(Vec<u8>, u32, u32);

    impl W {
        fn rec(&mut self, ty: u8, payload: &[u8]) -> &mut Self {
            self.0.extend_from_slice(&[format::MARKER, ty]);
            self.0
                .extend_from_slice(&(payload.len() as u32).to_le_bytes());
            self.0.extend_from_slice(payload);
            self
        }
        fn hello(&mut self) -> &mut Self {
            self.rec(format::REC_HELLO, &format::VERSION.to_le_bytes())
        }
        fn name(&mut self, id: u32, s: &str) -> &mut Self {
            let mut p = id.to_le_bytes().to_vec();
            p.extend_from_slice(s.as_bytes());
            self.rec(format::REC_NAME, &p)
        }
        fn common(class: Class, pid: i32, time: u64, flags: u32) -> Vec<u8> {
            let mut p = vec![class as u8, 0, 0, 0];
            p.extend_from_slice(&pid.to_le_bytes());
            p.extend_from_slice(&pid.to_le_bytes());
            p.extend_from_slice(&time.to_le_bytes());
            p.extend_from_slice(&0i32.to_le_bytes());
            p.extend_from_slice(&flags.to_le_bytes());
            p.extend_from_slice(&[0u8; 8 * 5]);
            p
        }
        fn loc(p: &mut Vec<u8>, ip: u64, sym: u32, dso: u32, off: u64) {
            p.extend_from_slice(&ip.to_le_bytes());
            p.extend_from_slice(&sym.to_le_bytes());
            p.extend_from_slice(&dso.to_le_bytes());
            p.extend_from_slice(&off.to_le_bytes());
        }
        fn stack(&mut self, time: u64, frames: &[(u64, u32, u32, u64)]) -> &mut Self {
            let mut chain = Vec::new();
            for &(ip, s, d, o) in frames {
                let id = self.1;
                self.1 += 1;
                let mut l = id.to_le_bytes().to_vec();
                Self::loc(&mut l, ip, s, d, o);
                self.rec(format::REC_LOC, &l);
                chain.extend_from_slice(&id.to_le_bytes());
            }
            let cid = self.2;
            self.2 += 1;
            let mut c = cid.to_le_bytes().to_vec();
            c.extend_from_slice(&(frames.len() as u32).to_le_bytes());
            c.extend_from_slice(&chain);
            self.rec(format::REC_CHAIN, &c);
            let mut p = Self::common(Class::Sample, 7, time, 0);
            p.truncate(format::SHORT_LEN);
            p.extend_from_slice(&0u64.to_le_bytes());
            p.extend_from_slice(&cid.to_le_bytes());
            self.rec(format::REC_STACK, &p)
        }
        fn end(&mut self) -> &mut Self {
            self.rec(format::REC_END, &[0u8; 32])
        }
        fn text(&mut self, t: &str) -> &mut Self {
            self.0.extend_from_slice(t.as_bytes());
            self
        }
    }

    fn drain(bytes: &[u8]) -> (Vec<String>, Option<Error>, StringTable) {
        let mut r = RecordReader::new(bytes);
        let mut out = Vec::new();
        let mut err = None;
        loop {
            match r.next_event() {
                Ok(Some(Event::Ok {
                    time,
                    data: EventData::StackSample { callstack },
                    ..
                })) => {
                    let names: Vec<&str> = (r.strings().stack(callstack))
                        .map(|l| r.strings().display(l.symbol))
                        .collect();
                    out.push(format!("{time} {}", names.join(">")));
                }
                Ok(Some(Event::DecodeError { time, message, .. })) => {
                    out.push(format!("{time:?} ERR {}", r.strings().get(message)));
                }
                Ok(Some(other)) => out.push(format!("{other:?}")),
                Ok(None) => break,
                Err(e) => {
                    assert!(err.is_none(), "two errors");
                    err = Some(e);
                }
            }
        }
        (out, err, r.take_strings())
    }

    fn sample_stream() -> W {
        let mut w = W::default();
        w.hello()
            .name(0, "leaf")
            .name(1, "/bin/prog")
            .name(2, "main")
            .stack(10, &[(0x10, 0, 1, 3), (0x20, 2, 1, 4)])
            .text(" instruction trace error type 1 time 1.000000011 cpu 0 pid 7 tid 7 ip 0x10 code 6: Overflow packet\n")
            .stack(12, &[(0x30, NO_NAME, NO_NAME, 0)])
            .end();
        w
    }

    #[test]
    fn records_and_perf_text_keep_their_order() {
        let (events, err, _) = drain(&sample_stream().0);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(
            events,
            [
                "10 main>leaf",
                "Some(1000000011) ERR Overflow packet",
                "12 [unknown @ 0x30 ([unknown])]",
            ]
        );
    }

    #[test]
    fn every_truncation_keeps_earlier_events_and_says_so() {
        let full = sample_stream().0;
        let (all, _, _) = drain(&full);
        for cut in 0..full.len() {
            let (events, err, _) = drain(&full[..cut]);
            // What was decoded is a prefix of the full stream, then a clear error.
            assert_eq!(events[..], all[..events.len()], "cut {cut}");
            match err {
                Some(Error::Truncated { events: n }) => assert_eq!(n as usize, events.len()),
                other => panic!("cut {cut}: {other:?}"),
            }
        }
    }

    /// More than the 1 MiB text chunk between two records (perf prints every sample
    /// of a DWARF-unwound python3 as text: its inlined frames): the flush in the middle
    /// of the text must neither panic nor lose or reorder a line.
    #[test]
    fn more_than_a_text_chunk_between_records_decodes_like_small_chunks() {
        let mut w = W::default();
        w.hello().name(0, "leaf").name(1, "/bin/prog");
        let mut lines = 0;
        let mut t = String::new();
        while t.len() <= 3 * TEXT_CHUNK / 2 {
            // Decode errors, and side-band lines the reader drops, as perf prints them.
            t.push_str(&format!(
                " instruction trace error type 1 time 1.{lines:09} cpu 0 pid 7 tid 7 ip 0x10 code 6: Overflow packet\n"
            ));
            t.push_str("python3 7 1.000000001: PERF_RECORD_MMAP2 7/7: [0x7f(0x1000) @ 0 08:01 5 0]: r-xp /usr/lib/x.so\n");
            lines += 1;
        }
        w.text(&t).stack(10, &[(0x10, 0, 1, 3)]).end();
        let (big, err, _) = drain(&w.0);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(big.len(), lines + 1);
        assert_eq!(big[lines], "10 leaf");
        for chunk in [1, 100, 4096, 65536] {
            let mut r = RecordReader::new(&w.0[..]).with_text_chunk(chunk);
            let mut n = 0;
            while let Some(e) = r.next_event().expect("valid stream") {
                if let Event::DecodeError { time, .. } = e {
                    assert_eq!(time, Some(1_000_000_000 + n), "chunk {chunk}");
                }
                n += 1;
            }
            assert_eq!(n as usize, lines + 1, "chunk {chunk}");
        }
    }

    fn next_stack(w: &mut W, dt: u32, chain: u32) {
        let mut p = dt.to_le_bytes().to_vec();
        p.extend_from_slice(&chain.to_le_bytes());
        p.extend_from_slice(&0u64.to_le_bytes());
        w.rec(format::REC_NEXT_STACK, &p);
    }

    #[test]
    fn next_records_repeat_the_previous_sample_record_s_thread_and_time() {
        let mut w = W::default();
        w.hello()
            .name(0, "leaf")
            .name(1, "/bin/prog")
            .stack(10, &[(0x10, 0, 1, 3)]);
        next_stack(&mut w, 5, 0);
        // perf's own text in between changes nothing: deltas count from records.
        w.text(" instruction trace error type 1 time 1.000000011 cpu 0 pid 9 tid 9 ip 0x10 code 6: Overflow packet\n");
        next_stack(&mut w, 0, 0);
        next_stack(&mut w, 7, 0);
        w.end();
        let mut r = RecordReader::new(&w.0[..]);
        let mut seen = Vec::new();
        while let Some(e) = r.next_event().expect("valid stream") {
            seen.push((e.thread().tid, e.time()));
        }
        assert_eq!(
            seen,
            [
                (Some(7), Some(10)),
                (Some(7), Some(15)),
                (Some(9), Some(1_000_000_011)),
                (Some(7), Some(15)),
                (Some(7), Some(22)),
            ]
        );
        // Without a sample record before it, a next record is corruption.
        let mut w = W::default();
        w.hello();
        next_stack(&mut w, 5, 0);
        let (events, err, _) = drain(&w.0);
        assert!(events.is_empty());
        assert!(
            matches!(
                &err,
                Some(Error::Corrupt {
                    kind: CorruptKind::NoPreviousSample,
                    ..
                })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn corrupt_streams_are_rejected_with_their_offset() {
        let mut w = W::default();
        w.hello().stack(1, &[(0x10, 5, NO_NAME, 0)]);
        let (events, err, _) = drain(&w.0);
        assert!(events.is_empty());
        assert!(
            matches!(
                &err,
                Some(Error::Corrupt {
                    offset: 10,
                    record: "location",
                    kind: CorruptKind::Unsent {
                        table: IdKind::Name,
                        id: 5
                    }
                })
            ),
            "{err:?}"
        );
        // The message says which record, where, and what was wrong with it.
        assert_eq!(
            err.expect("corrupt").to_string(),
            "malformed dlfilter location record at byte 10: name id 5 used before it was sent"
        );
        // A field past the record's end is caught by the cursor, with its place.
        let mut w = W::default();
        w.hello().rec(format::REC_NAME, &[0, 0]);
        let (_, err, _) = drain(&w.0);
        assert_eq!(
            err.expect("corrupt").to_string(),
            "malformed dlfilter name record at byte 10: record too short: \
             a 4-byte field at byte 0 of a 2-byte payload"
        );
        let mut w = W::default();
        w.hello().name(0, "a").rec(99, b"").end();
        let (_, err, _) = drain(&w.0);
        assert!(matches!(err, Some(Error::Corrupt { .. })), "{err:?}");
        let mut w = W::default();
        w.rec(format::REC_HELLO, &7u32.to_le_bytes());
        let (_, err, _) = drain(&w.0);
        assert!(
            matches!(
                &err,
                Some(Error::Corrupt {
                    kind: CorruptKind::Version(7),
                    ..
                })
            ),
            "{err:?}"
        );
        // A length field from garbage is not allocated.
        let (_, err, _) = drain(&[0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(err, Some(Error::Corrupt { .. })), "{err:?}");
        // Nor is one within bounds whose bytes never come: the stream is cut short.
        let mut w = W::default();
        w.hello();
        w.0.extend_from_slice(&[format::MARKER, format::REC_NAME]);
        w.0.extend_from_slice(&(60u32 << 20).to_le_bytes());
        w.0.extend_from_slice(b"\0\0\0\0abc");
        let (_, err, _) = drain(&w.0);
        assert!(
            matches!(err, Some(Error::Truncated { events: 0 })),
            "{err:?}"
        );
    }

    #[test]
    fn branch_flags_read_like_the_text_decoder() {
        use format::flags::*;
        assert_eq!(
            branch_kind(BRANCH | CALL | IN_TX),
            Some((false, false, Some(Kind::Call)))
        );
        assert_eq!(branch_kind(BRANCH | TRACE_BEGIN), Some((true, false, None)));
        assert_eq!(branch_kind(BRANCH | TRACE_END), Some((false, true, None)));
        assert_eq!(
            branch_kind(BRANCH | CONDITIONAL | TRACE_BEGIN),
            Some((true, false, Some(Kind::Jump)))
        );
        assert_eq!(
            branch_kind(BRANCH | TRACE_END | SYSCALLRET | CALL),
            Some((false, true, Some(Kind::Syscall)))
        );
        assert_eq!(
            branch_kind(BRANCH | VMENTRY | CALL),
            Some((false, false, None))
        );
    }
}
