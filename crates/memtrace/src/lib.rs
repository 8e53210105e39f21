//! Reader, writer and tools for the memtrace allocation-trace format: the sampled
//! allocation traces OCaml's Memprof-based `memtrace` library writes (versions 1–3).
//!
//! Reading parses packets in place (no copy when the trace is in memory), decodes
//! backtraces incrementally and reports every malformation as a typed [`Error`].
//! Writing produces version-3 traces byte-identical to the reference writer.
//!
//! ```
//! use memtrace::{AllocSource, EventKind, OwnedLocation, Reader, TraceInfo, Writer};
//!
//! # fn main() -> memtrace::Result<()> {
//! let info = TraceInfo {
//!     sample_rate: 1e-3,
//!     word_size: 64,
//!     executable_name: b"demo".to_vec(),
//!     host_name: b"host".to_vec(),
//!     ocaml_runtime_params: Vec::new(),
//!     pid: 42,
//!     initial_domain: 0,
//!     start_time: 1_000_000,
//!     context: None,
//! };
//! let mut w = Writer::new(Vec::new(), &info)?;
//! // Two allocations sharing a caller; codes are opaque (e.g. return addresses).
//! let mut locs = |code: u64| vec![OwnedLocation {
//!     filename: b"main.ml".to_vec(),
//!     defname: format!("f{code}").into_bytes(),
//!     line: code as i64,
//!     start_char: 0,
//!     end_char: 5,
//! }];
//! let a = w.put_alloc(1_000_010, 0, 4, 1, AllocSource::Minor, &[1, 2], &mut locs)?;
//! w.put_alloc(1_000_020, 0, 100, 2, AllocSource::Major, &[1, 3], &mut locs)?;
//! w.put_collect(1_000_030, 0, a)?;
//! let bytes = w.finish()?;
//!
//! let mut r = Reader::from_bytes(&bytes)?;
//! let mut lines = Vec::new();
//! while let Some(ev) = r.next_event()? {
//!     if let EventKind::Alloc(al) = ev.kind {
//!         let leaf = ev.db.locations(*al.backtrace.last().unwrap()).unwrap()[0];
//!         let name = String::from_utf8_lossy(ev.db.string(leaf.defname)).into_owned();
//!         lines.push(format!("{} {} words in {name}", ev.time, al.length));
//!     }
//! }
//! assert_eq!(lines, ["10 4 words in f2", "20 100 words in f3"]);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod backtrace;
mod buf;
mod error;
mod format;
mod location;
mod reader;
pub mod sampler;
pub mod tools;
mod writer;

pub use error::{Error, ErrorKind, Result};
pub use format::{
    CacheVerifier, PacketHeader, TraceInfo, HEADER_LEN_V2, HEADER_LEN_V3, IDS_PER_CHUNK, MAGIC,
    MAX_PACKET_SIZE, PACKET_MAX_TIME, VERSION,
};
pub use location::{Interner, Location, LocationTable, OwnedLocation, Sym};
pub use reader::{
    Alloc, AllocSource, Event, EventKind, IoSource, LocationDb, Note, Reader, SliceSource, Source,
};
pub use writer::Writer;
