//! Writer, reader and checker for the Fuchsia Trace Format (FXT), the binary trace
//! format that the Perfetto UI opens directly.
//!
//! The writer works around the format's small tables so that arbitrarily large traces
//! stay valid: strings beyond the 32 767-entry table are evicted and re-registered,
//! threads beyond the 255-entry table reuse slots, over-long strings are truncated and
//! extra arguments dropped. The reader resolves every reference against the tables as
//! they stood at that record, and the checker reports anything Perfetto or the Python
//! `fxt` package would reject.
//!
//! ```
//! use ptscope_fxt::{check, reader::{EventKind, Reader, Record}, Arg, ArgValue, FxtWriter};
//!
//! let mut w = FxtWriter::new(Vec::new());
//! w.process(1, "demo [pid=42]");
//! w.thread_object(2, 1, "main");
//! let main = w.thread(1, 2);
//! w.begin(main, "", "main", 0, &[]);
//! w.complete(main, "", "parse", 10, 20, &[Arg::new("bytes", ArgValue::Int(512))]);
//! w.end(main, "", "main", 30, &[]);
//! let bytes = w.finish().expect("writing to a Vec cannot fail");
//!
//! let report = check::validate_bytes(&bytes);
//! assert!(report.is_ok(), "{report}");
//! assert_eq!(report.processes[&1], "demo [pid=42]");
//!
//! let parse = Reader::new(&bytes)
//!     .filter_map(|r| match r {
//!         Ok(Record::Event(e)) if e.name == "parse" => Some(e),
//!         _ => None,
//!     })
//!     .next()
//!     .expect("the complete event reads back");
//! assert_eq!(parse.kind, EventKind::Complete { end: 20 });
//! assert_eq!(parse.args.get("bytes").and_then(|v| v.as_i64()), Some(512));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod format;
mod hash;
pub mod reader;
pub mod stream;
pub mod writer;

pub use writer::{
    same_text, truncate_utf8, Arg, ArgValue, FxtWriter, NameToken, ThreadId, WriterStats,
};
