//! [`StreamReader`]: the records of an FXT stream read from any [`Read`] (a gzip
//! decoder, a file, a pipe), in constant memory however large the trace.
//!
//! The input is read in 1 MiB pieces into one buffer that each record is decoded from
//! in place, as [`Reader`](crate::reader::Reader) decodes a slice; only the string
//! table keeps copies (at most 32 767 strings). Records are lent one at a time: each
//! borrows the reader until the next call.
//!
//! ```
//! use ptscope_fxt::{reader::Record, stream::StreamReader, FxtWriter};
//!
//! let mut w = FxtWriter::new(Vec::new());
//! w.process(1, "demo");
//! w.thread_object(2, 1, "main");
//! let main = w.thread(1, 2);
//! for t in 0..1000 {
//!     w.begin(main, "", "tick", 2 * t, &[]);
//!     w.end(main, "", "tick", 2 * t + 1, &[]);
//! }
//! let bytes = w.finish().expect("writing to a Vec cannot fail");
//!
//! let mut r = StreamReader::new(&bytes[..]);
//! let mut ticks = 0;
//! while let Some(rec) = r.next_record() {
//!     if let Record::Event(e) = rec.expect("a valid trace") {
//!         ticks += usize::from(e.name == "tick");
//!     }
//! }
//! assert_eq!(ticks, 2000);
//! ```

use crate::format::record;
use crate::reader::{
    decode, decode_head, type_and_words, ErrorKind, Head, Providers, ReadError, Record, Update,
};
use std::io::{self, Read};

/// Bytes asked of the source at a time.
const READ_SIZE: usize = 1 << 20;

/// Reads FXT records one at a time from a [`Read`]; see the [module docs](self).
pub struct StreamReader<R> {
    src: R,
    buf: Vec<u8>,
    /// The unread bytes are `buf[pos..len]`.
    pos: usize,
    len: usize,
    /// Input offset of `buf[pos]`.
    offset: u64,
    providers: Providers<Box<str>>,
    /// The source has no more bytes.
    eof: bool,
    /// An error was returned: nothing more is read.
    done: bool,
}

impl<R: Read> StreamReader<R> {
    /// Starts reading uncompressed FXT from `src` (wrap a gzip file in a decoder first).
    pub fn new(src: R) -> Self {
        StreamReader {
            src,
            buf: vec![0; 2 * READ_SIZE],
            pos: 0,
            len: 0,
            offset: 0,
            providers: Providers::new(),
            eof: false,
            done: false,
        }
    }

    /// Input offset of the next record.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Ticks per second of the current provider (1e9 until an initialization record).
    pub fn ticks_per_second(&self) -> u64 {
        self.providers.ticks_per_second()
    }

    /// Reads until `need` unread bytes are buffered or the source ends; returns how
    /// many are buffered.
    fn fill(&mut self, need: usize) -> io::Result<usize> {
        while self.len - self.pos < need && !self.eof {
            if self.buf.len() - self.pos < need.max(READ_SIZE) {
                // Move what is left to the front (and grow for a record larger than the
                // buffer: at most 4 095 words).
                self.buf.copy_within(self.pos..self.len, 0);
                self.len -= self.pos;
                self.pos = 0;
                if self.buf.len() < need + READ_SIZE {
                    self.buf.resize(need + READ_SIZE, 0);
                }
            }
            let end = (self.len + READ_SIZE).min(self.buf.len());
            match self.src.read(&mut self.buf[self.len..end]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.len - self.pos)
    }

    /// Skips `n` bytes of the input (a large record nobody decodes) without keeping them.
    fn skip(&mut self, mut n: u64) -> io::Result<u64> {
        let mut skipped = 0;
        while n > 0 {
            let have = self.fill(1)?;
            if have == 0 {
                break;
            }
            let take = (have as u64).min(n) as usize;
            self.pos += take;
            n -= take as u64;
            skipped += take as u64;
        }
        Ok(skipped)
    }

    /// Ends reading with an error at the current record.
    fn fail(&mut self, kind: ErrorKind) -> ReadError {
        self.done = true;
        ReadError {
            // Offsets past usize (a 32-bit host reading > 4 GiB) saturate.
            offset: usize::try_from(self.offset).unwrap_or(usize::MAX),
            kind,
        }
    }

    /// Buffers the next record whole and applies what it changes in the tables; `None`
    /// at the end of the input. A large record (never buffered) comes back as `Large`.
    fn next_raw(&mut self) -> Option<Result<Raw, ReadError>> {
        if self.done {
            return None;
        }
        let have = match self.fill(8) {
            Ok(n) => n,
            Err(e) => return Some(Err(self.fail(ErrorKind::Io(e.to_string())))),
        };
        if have == 0 {
            self.done = true;
            return None;
        }
        if have < 8 {
            return Some(Err(self.fail(ErrorKind::Truncated {
                needed: 8,
                available: have as u64,
            })));
        }
        let mut hw = [0u8; 8];
        hw.copy_from_slice(&self.buf[self.pos..self.pos + 8]);
        let header = u64::from_le_bytes(hw);
        let (record_type, words) = type_and_words(header);
        if words == 0 {
            return Some(Err(self.fail(ErrorKind::ZeroSize)));
        }
        let needed = words * 8;
        if record_type == record::LARGE {
            // Blobs and large records can be gigabytes: skipped, never buffered.
            match self.skip(needed) {
                Ok(n) if n == needed => {}
                Ok(n) => {
                    return Some(Err(self.fail(ErrorKind::Truncated {
                        needed,
                        available: n,
                    })))
                }
                Err(e) => return Some(Err(self.fail(ErrorKind::Io(e.to_string())))),
            }
            self.offset += needed;
            return Some(Ok(Raw::Large { header, words }));
        }
        // A non-large record has at most 4 095 words.
        let needed = needed as usize;
        match self.fill(needed) {
            Ok(n) if n >= needed => {}
            Ok(n) => {
                return Some(Err(self.fail(ErrorKind::Truncated {
                    needed: needed as u64,
                    available: n as u64,
                })))
            }
            Err(e) => return Some(Err(self.fail(ErrorKind::Io(e.to_string())))),
        }
        let start = self.pos;
        // A record that changes the tables is applied before it is lent out (it is
        // decoded again then): such records are few.
        let changes_tables = matches!(
            record_type,
            record::METADATA | record::INITIALIZATION | record::STRING | record::THREAD
        );
        if changes_tables {
            let rec = &self.buf[start..start + needed];
            let update = match decode(header, rec, &self.providers.current()) {
                Ok(r) => Update::of(&r, Box::<str>::from),
                Err(kind) => return Some(Err(self.fail(kind))),
            };
            if let Some(u) = update {
                if let Err(kind) = self.providers.apply(u) {
                    return Some(Err(self.fail(kind)));
                }
            }
        }
        // The offset of an error in this record is its start.
        let raw = Raw::Buffered {
            header,
            start,
            len: needed,
            offset: self.offset,
        };
        self.pos += needed;
        self.offset += needed as u64;
        Some(Ok(raw))
    }

    /// The next record, `None` at the end of the input; after an error, `None`.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, ReadError>> {
        let (header, start, len, offset) = match self.next_raw()? {
            Err(e) => return Some(Err(e)),
            Ok(Raw::Large { header, words }) => {
                return Some(Ok(Record::Other {
                    record_type: record::LARGE,
                    header,
                    words,
                }))
            }
            Ok(Raw::Buffered {
                header,
                start,
                len,
                offset,
            }) => (header, start, len, offset),
        };
        let parsed = decode(
            header,
            &self.buf[start..start + len],
            &self.providers.current(),
        );
        Some(parsed.map_err(|kind| {
            self.done = true;
            ReadError {
                offset: usize::try_from(offset).unwrap_or(usize::MAX),
                kind,
            }
        }))
    }

    /// The next record without its arguments (events and kernel objects; every other
    /// record is applied to the tables and comes back as [`Head::Other`], or
    /// [`Head::Initialization`]): several times faster than [`next_record`](Self::next_record)
    /// for a reader that needs no arguments. An event's damaged arguments are only
    /// checked to stay inside their record.
    pub fn next_head(&mut self) -> Option<Result<Head<'_>, ReadError>> {
        let (header, start, len, offset) = match self.next_raw()? {
            Err(e) => return Some(Err(e)),
            Ok(Raw::Large { .. }) => return Some(Ok(Head::Other)),
            Ok(Raw::Buffered {
                header,
                start,
                len,
                offset,
            }) => (header, start, len, offset),
        };
        if type_and_words(header).0 == record::INITIALIZATION {
            return Some(Ok(Head::Initialization {
                ticks_per_second: self.providers.ticks_per_second(),
            }));
        }
        let parsed = decode_head(
            header,
            &self.buf[start..start + len],
            &self.providers.current(),
        );
        Some(match parsed {
            Ok(h) => Ok(h.unwrap_or(Head::Other)),
            Err(kind) => {
                self.done = true;
                Err(ReadError {
                    offset: usize::try_from(offset).unwrap_or(usize::MAX),
                    kind,
                })
            }
        })
    }
}

/// Where [`StreamReader::next_raw`] left a record.
enum Raw {
    /// In the buffer at `start..start + len`; `offset` in the input.
    Buffered {
        header: u64,
        start: usize,
        len: usize,
        offset: u64,
    },
    /// A large record, skipped.
    Large { header: u64, words: u64 },
}
