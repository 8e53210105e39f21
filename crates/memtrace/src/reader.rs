//! Streaming trace reader over a byte slice (zero copy) or any `io::Read`.

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

use crate::backtrace::ReaderCache;
use crate::buf::Cursor;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    self, PacketHeader, TraceInfo, EV_ALLOC, EV_COLLECT, EV_LOCATION, EV_PROMOTE,
    EV_SHORT_ALLOC_BASE, EV_TRACE_INFO, HEADER_LEN_V3,
};
use crate::location::{Interner, LocReaderState, Location, LocationTable, Sym};

/// Where the bytes of a trace come from.
pub trait Source {
    /// Up to `n` bytes from the current position (fewer only at end of input).
    fn peek(&mut self, n: usize) -> io::Result<&[u8]>;
    /// Moves the current position forward by `n` bytes already peeked.
    fn consume(&mut self, n: usize);
    /// Total size of the input in bytes, when known.
    fn total_len(&self) -> Option<u64>;
}

/// A trace held in memory; packets are parsed in place.
#[derive(Clone, Copy, Debug)]
pub struct SliceSource<'a> {
    data: &'a [u8],
    total: u64,
}

impl<'a> SliceSource<'a> {
    /// Reads from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        SliceSource {
            data,
            total: data.len() as u64,
        }
    }
}

impl Source for SliceSource<'_> {
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        Ok(&self.data[..n.min(self.data.len())])
    }

    fn consume(&mut self, n: usize) {
        self.data = &self.data[n.min(self.data.len())..];
    }

    fn total_len(&self) -> Option<u64> {
        Some(self.total)
    }
}

/// A trace streamed from a reader, holding about one packet in memory.
#[derive(Debug)]
pub struct IoSource<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    eof: bool,
    total: Option<u64>,
}

impl<R: Read> IoSource<R> {
    /// Streams from `inner`; `total` is its size if known (reported by `identify`).
    pub fn new(inner: R, total: Option<u64>) -> Self {
        IoSource {
            inner,
            buf: Vec::with_capacity(1 << 16),
            start: 0,
            eof: false,
            total,
        }
    }
}

impl<R: Read> Source for IoSource<R> {
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        while self.buf.len() - self.start < n && !self.eof {
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            // Grow by what is missing (at least 64 kB) but never trust `n` for a
            // single huge allocation: a corrupt size only costs what the file holds.
            let want = (n - self.buf.len()).clamp(1 << 16, 1 << 20);
            let old = self.buf.len();
            self.buf.resize(old + want, 0);
            let got = loop {
                match self.inner.read(&mut self.buf[old..]) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        self.buf.truncate(old);
                        return Err(e);
                    }
                }
            };
            self.buf.truncate(old + got);
            if got == 0 {
                self.eof = true;
            }
        }
        let end = (self.start + n).min(self.buf.len());
        Ok(&self.buf[self.start..end])
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
    }

    fn total_len(&self) -> Option<u64> {
        self.total
    }
}

/// Something the reader skipped rather than failed on (the reference prints these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A packet written by another process was skipped.
    WrongPid {
        /// Byte offset of the packet.
        offset: u64,
        /// Its pid.
        pid: u64,
        /// The traced pid.
        expected: u64,
    },
    /// The input ended inside a packet; the rest was ignored.
    TruncatedPacket {
        /// Byte offset of the packet.
        offset: u64,
    },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::WrongPid { pid, expected, .. } => write!(
                f,
                "skipping bad packet (wrong pid: {}, but tracing {})",
                *pid as i64, *expected as i64
            ),
            Note::TruncatedPacket { .. } => write!(f, "skipping truncated packet"),
        }
    }
}

/// Where an allocation was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllocSource {
    /// Minor heap.
    Minor,
    /// Major heap.
    Major,
    /// Outside the GC heap (e.g. `malloc` traced by a tracer like ours).
    External,
}

impl AllocSource {
    /// The word `dump` prints for this source.
    pub fn dump_name(self) -> &'static str {
        match self {
            AllocSource::Minor => "alloc",
            AllocSource::Major => "alloc_major",
            AllocSource::External => "alloc_ext",
        }
    }
}

/// A sampled allocation.
#[derive(Clone, Copy, Debug)]
pub struct Alloc<'a> {
    /// Object id.
    pub obj_id: u64,
    /// Size in words.
    pub length: i64,
    /// Number of samples that fell in this block.
    pub nsamples: i64,
    /// Heap it came from.
    pub source: AllocSource,
    /// Domain that allocated it.
    pub domain: u16,
    /// Frames shared with this domain's previous backtrace, as encoded.
    pub common_prefix: i64,
    /// Location codes, outermost caller first (empty when backtraces are not parsed).
    pub backtrace: &'a [u64],
}

impl Alloc<'_> {
    /// How many leading frames are identical to the previous allocation of the same
    /// domain (lets consumers reuse work across consecutive backtraces).
    pub fn unchanged_prefix(&self) -> usize {
        (self.common_prefix.max(0) as usize).min(self.backtrace.len())
    }
}

/// What happened.
#[derive(Clone, Copy, Debug)]
pub enum EventKind<'a> {
    /// An allocation was sampled.
    Alloc(Alloc<'a>),
    /// A sampled object moved to the major heap.
    Promote {
        /// Object id.
        obj_id: u64,
        /// Domain of the packet.
        domain: u16,
    },
    /// A sampled object was freed.
    Collect {
        /// Object id.
        obj_id: u64,
        /// Domain of the packet.
        domain: u16,
    },
}

/// One event, with access to the location tables it refers to.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// µs since the trace started.
    pub time: i64,
    /// The event itself.
    pub kind: EventKind<'a>,
    /// Locations and strings defined so far.
    pub db: &'a LocationDb,
}

impl Event<'_> {
    /// Domain of the event.
    pub fn domain(&self) -> u16 {
        match self.kind {
            EventKind::Alloc(a) => a.domain,
            EventKind::Promote { domain, .. } | EventKind::Collect { domain, .. } => domain,
        }
    }
}

/// Location codes and interned strings seen so far.
#[derive(Debug, Default)]
pub struct LocationDb {
    /// Code → locations.
    pub table: LocationTable,
    /// Filenames and definition names.
    pub strings: Interner,
}

impl LocationDb {
    /// Locations of a code, or `None` if it was never defined.
    #[inline]
    pub fn locations(&self, code: u64) -> Option<&[Location]> {
        self.table.get(code)
    }

    /// The bytes of an interned string.
    #[inline]
    pub fn string(&self, sym: Sym) -> &[u8] {
        self.strings.get(sym)
    }

    /// A location with its strings, as the writer takes it.
    pub fn to_owned_location(&self, l: &Location) -> crate::location::OwnedLocation {
        crate::location::OwnedLocation {
            filename: self.string(l.filename).to_vec(),
            defname: self.string(l.defname).to_vec(),
            line: i64::from(l.line),
            start_char: i64::from(l.start_char),
            end_char: i64::from(l.end_char),
        }
    }

    /// Owned copies of a code's locations (empty if undefined).
    pub fn owned_locations(&self, code: u64) -> Vec<crate::location::OwnedLocation> {
        self.locations(code)
            .unwrap_or(&[])
            .iter()
            .map(|l| self.to_owned_location(l))
            .collect()
    }

    /// Appends `defname@file:line:start-end` (the reference's location text).
    pub fn write_location(&self, out: &mut Vec<u8>, l: &Location) {
        use std::io::Write as _;
        out.extend_from_slice(self.string(l.defname));
        out.push(b'@');
        out.extend_from_slice(self.string(l.filename));
        let _ = write!(out, ":{}:{}-{}", l.line, l.start_char, l.end_char);
    }
}

struct DomainState {
    id: u16,
    locs: LocReaderState,
    cache: ReaderCache,
    bt: Vec<u64>,
    last_time: i64,
}

struct Packet {
    header: PacketHeader,
    len: usize,
    pos: usize,
    next_id: u64,
    dom: usize,
}

enum Raw {
    Alloc {
        obj_id: u64,
        length: i64,
        nsamples: i64,
        source: AllocSource,
        common_prefix: i64,
    },
    Promote(u64),
    Collect(u64),
}

/// Reads events from a trace, one at a time.
pub struct Reader<S> {
    src: S,
    info: TraceInfo,
    parse_backtraces: bool,
    strict: bool,
    offset: u64,
    cur: Option<Packet>,
    domains: Vec<DomainState>,
    db: LocationDb,
    notes: Vec<Note>,
    finished: bool,
    scratch_locs: Vec<Location>,
    scratch_bt: Vec<u64>,
    location_events: u64,
}

impl<'a> Reader<SliceSource<'a>> {
    /// Reads a trace held in memory.
    pub fn from_bytes(data: &'a [u8]) -> Result<Self> {
        Reader::new(SliceSource::new(data))
    }
}

impl Reader<IoSource<io::BufReader<std::fs::File>>> {
    /// Opens a trace file and reads its trace-info packet.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let f = std::fs::File::open(path)?;
        let total = f.metadata().ok().map(|m| m.len());
        Reader::new(IoSource::new(
            io::BufReader::with_capacity(1 << 16, f),
            total,
        ))
    }
}

fn malformed(offset: u64, kind: ErrorKind) -> Error {
    Error::Malformed { offset, kind }
}

impl<S: Source> Reader<S> {
    /// Starts reading: the first packet must be a complete trace-info packet.
    pub fn new(mut src: S) -> Result<Self> {
        let head = src.peek(HEADER_LEN_V3)?;
        if head.len() < 30 {
            return Err(malformed(0, ErrorKind::MissingTraceInfo));
        }
        let version = u16::from_le_bytes([head[28], head[29]]);
        if head.len() < PacketHeader::len_for_version(version) {
            return Err(malformed(0, ErrorKind::MissingTraceInfo));
        }
        let h = PacketHeader::parse(head).map_err(|k| malformed(0, k))?;
        let len = h.packet_len();
        let bytes = src.peek(len)?;
        if bytes.len() < len {
            return Err(malformed(0, ErrorKind::MissingTraceInfo));
        }
        let (_, info) = format::read_trace_info(bytes).map_err(|k| malformed(0, k))?;
        src.consume(len);
        Ok(Reader {
            src,
            info,
            parse_backtraces: true,
            strict: false,
            offset: len as u64,
            cur: None,
            domains: Vec::new(),
            db: LocationDb::default(),
            notes: Vec::new(),
            finished: false,
            scratch_locs: Vec::new(),
            scratch_bt: Vec::new(),
            location_events: 0,
        })
    }

    /// Whether to decode backtraces (on by default). Off is faster, leaves
    /// [`Alloc::backtrace`] empty and skips cache verification.
    pub fn parse_backtraces(mut self, on: bool) -> Self {
        self.parse_backtraces = on;
        self
    }

    /// Strict mode: packets the reference reader would skip (truncated, or from
    /// another pid) are errors instead of [`Note`]s.
    pub fn strict(mut self, on: bool) -> Self {
        self.strict = on;
        self
    }

    /// The trace-info record.
    pub fn info(&self) -> &TraceInfo {
        &self.info
    }

    /// Locations and strings defined so far.
    pub fn db(&self) -> &LocationDb {
        &self.db
    }

    /// Packets skipped so far, and why.
    pub fn notes(&self) -> &[Note] {
        &self.notes
    }

    /// Size of the whole input, if known.
    pub fn total_len(&self) -> Option<u64> {
        self.src.total_len()
    }

    /// Bytes of input fully consumed so far.
    pub fn position(&self) -> u64 {
        self.offset
    }

    /// Location events decoded so far.
    pub fn location_events(&self) -> u64 {
        self.location_events
    }

    /// The next event, `Ok(None)` at the end. After an error it returns `Ok(None)`:
    /// everything returned before the error is valid.
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>> {
        let (time, dom, raw) = match self.next_raw() {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(None),
            Err(e) => {
                self.finished = true;
                return Err(e);
            }
        };
        let d = &self.domains[dom];
        let domain = d.id;
        let kind = match raw {
            Raw::Alloc {
                obj_id,
                length,
                nsamples,
                source,
                common_prefix,
            } => EventKind::Alloc(Alloc {
                obj_id,
                length,
                nsamples,
                source,
                domain,
                common_prefix,
                backtrace: if self.parse_backtraces { &d.bt } else { &[] },
            }),
            Raw::Promote(obj_id) => EventKind::Promote { obj_id, domain },
            Raw::Collect(obj_id) => EventKind::Collect { obj_id, domain },
        };
        Ok(Some(Event {
            time: time.wrapping_sub(self.info.start_time),
            kind,
            db: &self.db,
        }))
    }

    /// Reads the next packet header; `None` (with a note if need be) at the end.
    fn next_packet(&mut self) -> Result<Option<Packet>> {
        loop {
            let head = self.src.peek(HEADER_LEN_V3)?;
            if head.is_empty() {
                return Ok(None);
            }
            let truncated = head.len() < 30
                || head.len()
                    < PacketHeader::len_for_version(u16::from_le_bytes([head[28], head[29]]));
            if truncated {
                if self.strict {
                    return Err(malformed(self.offset, ErrorKind::TruncatedPacket));
                }
                self.notes.push(Note::TruncatedPacket {
                    offset: self.offset,
                });
                return Ok(None);
            }
            let header = PacketHeader::parse(head).map_err(|k| malformed(self.offset, k))?;
            let len = header.packet_len();
            if self.src.peek(len)?.len() < len {
                if self.strict {
                    return Err(malformed(self.offset, ErrorKind::TruncatedPacket));
                }
                self.notes.push(Note::TruncatedPacket {
                    offset: self.offset,
                });
                return Ok(None);
            }
            if header.pid != self.info.pid {
                if self.strict {
                    return Err(malformed(self.offset, ErrorKind::WrongPid(header.pid)));
                }
                self.notes.push(Note::WrongPid {
                    offset: self.offset,
                    pid: header.pid,
                    expected: self.info.pid,
                });
                self.src.consume(len);
                self.offset += len as u64;
                continue;
            }
            let dom = match self.domains.iter().position(|d| d.id == header.domain) {
                Some(i) => i,
                None => {
                    self.domains.push(DomainState {
                        id: header.domain,
                        locs: LocReaderState::new(),
                        cache: ReaderCache::new(),
                        bt: Vec::new(),
                        last_time: self.info.start_time,
                    });
                    self.domains.len() - 1
                }
            };
            if self.parse_backtraces && !self.domains[dom].cache.check(&header.verifier) {
                return Err(malformed(self.offset, ErrorKind::CacheVerification));
            }
            return Ok(Some(Packet {
                header,
                len,
                pos: header.header_len(),
                next_id: header.alloc_id_begin,
                dom,
            }));
        }
    }

    fn next_raw(&mut self) -> Result<Option<(i64, usize, Raw)>> {
        loop {
            if self.finished {
                return Ok(None);
            }
            if let Some(p) = self.cur.as_mut() {
                if p.pos < p.len {
                    let data = self.src.peek(p.len)?;
                    let mut c = Cursor::new(&data[..p.len.min(data.len())], p.pos);
                    let d = &mut self.domains[p.dom];
                    let res = decode_event(
                        &mut c,
                        p,
                        d,
                        &mut self.db,
                        &mut self.scratch_locs,
                        &mut self.scratch_bt,
                        self.parse_backtraces,
                    );
                    let at = self.offset + p.pos as u64;
                    p.pos = c.pos;
                    match res {
                        Err(kind) => return Err(malformed(at, kind)),
                        Ok((_, None)) => {
                            self.location_events += 1;
                            continue;
                        }
                        Ok((time, Some(raw))) => return Ok(Some((time, p.dom, raw))),
                    }
                }
                if p.next_id != p.header.alloc_id_end {
                    let kind = ErrorKind::AllocIdSync {
                        expected: p.header.alloc_id_end,
                        found: p.next_id,
                    };
                    return Err(malformed(self.offset, kind));
                }
                let len = p.len;
                self.cur = None;
                self.src.consume(len);
                self.offset += len as u64;
            }
            match self.next_packet()? {
                Some(p) => self.cur = Some(p),
                None => {
                    self.finished = true;
                    return Ok(None);
                }
            }
        }
    }
}

#[inline]
fn decode_event(
    c: &mut Cursor<'_>,
    p: &mut Packet,
    d: &mut DomainState,
    db: &mut LocationDb,
    scratch_locs: &mut Vec<Location>,
    scratch_bt: &mut Vec<u64>,
    parse_backtraces: bool,
) -> Result<(i64, Option<Raw>), ErrorKind> {
    let (code, time) = format::read_event_header(c, &p.header)?;
    if time < d.last_time {
        return Err(ErrorKind::NonMonotoneTimestamps);
    }
    d.last_time = time;
    let raw = match code {
        EV_TRACE_INFO => return Err(ErrorKind::MultipleTraceInfo),
        EV_LOCATION => {
            let loc_code = d.locs.read(c, &mut db.strings, scratch_locs)?;
            db.table.define(loc_code, scratch_locs)?;
            return Ok((time, None));
        }
        EV_PROMOTE => {
            let delta = c.vint()?;
            if delta < 0 {
                return Err(ErrorKind::PromoteIdSync);
            }
            Raw::Promote(p.next_id.wrapping_sub(1).wrapping_sub(delta as u64))
        }
        EV_COLLECT => {
            let delta = c.vint()?;
            Raw::Collect(p.next_id.wrapping_sub(1).wrapping_sub(delta as u64))
        }
        EV_ALLOC | 101..=116 => {
            let short = code != EV_ALLOC;
            let (length, nsamples, source) = if short {
                (i64::from(code - EV_SHORT_ALLOC_BASE), 1, AllocSource::Minor)
            } else {
                let length = c.vint()?;
                let nsamples = c.vint()?;
                let source = match c.u8()? {
                    0 => AllocSource::Minor,
                    1 => AllocSource::Major,
                    2 => AllocSource::External,
                    s => return Err(ErrorKind::BadAllocSource(s)),
                };
                (length, nsamples, source)
            };
            let common_prefix = c.vint()?;
            let nencoded = if short {
                usize::from(c.u8()?)
            } else {
                usize::from(c.u16()?)
            };
            if parse_backtraces {
                if common_prefix < 0 {
                    return Err(ErrorKind::NegativeCommonPrefix(common_prefix));
                }
                if common_prefix as u64 <= d.bt.len() as u64 {
                    d.bt.truncate(common_prefix as usize);
                    d.cache.decode(c, nencoded, &mut d.bt)?;
                } else {
                    // The previous backtrace was truncated by its writer: decode to
                    // keep the cache in step, but report the previous backtrace.
                    scratch_bt.clear();
                    d.cache.decode(c, nencoded, scratch_bt)?;
                }
            } else {
                ReaderCache::skip(c, nencoded)?;
            }
            let obj_id = p.next_id;
            p.next_id = p.next_id.wrapping_add(1);
            Raw::Alloc {
                obj_id,
                length,
                nsamples,
                source,
                common_prefix,
            }
        }
        other => return Err(ErrorKind::UnknownEventCode(other)),
    };
    Ok((time, Some(raw)))
}
