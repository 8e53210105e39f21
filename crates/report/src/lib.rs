//! Summaries of ptscope traces without a viewer: per process and thread, the functions
//! by total and self time with their call counts, the slowest individual calls (with
//! the time to find them at in the Perfetto UI), latency percentiles and the callers
//! and callees of one function, and flame graphs. One streaming pass over the trace, in
//! memory that grows with the number of distinct stacks, not with the number of calls:
//! it works on traces far too big for the UI.
//!
//! Counts are exact for traces of every call (Intel PT, `--backend emulate`); a trace of
//! sampled call stacks says so (its "trace info" track) and its counts are estimates.
//!
//! ```
//! use ptscope_fxt::FxtWriter;
//! use ptscope_report::{analyze, summary, Options};
//!
//! // main calls work twice; work calls leaf once each time.
//! let mut w = FxtWriter::new(Vec::new());
//! w.process(1, "demo [pid=42]");
//! w.thread_object(2, 1, "demo [tid=42]");
//! let t = w.thread(1, 2);
//! w.begin(t, "", "main", 0, &[]);
//! for start in [10, 50] {
//!     w.begin(t, "", "work", start, &[]);
//!     w.begin(t, "", "leaf", start + 5, &[]);
//!     w.end(t, "", "leaf", start + 15, &[]);
//!     w.end(t, "", "work", start + 30, &[]);
//! }
//! w.end(t, "", "main", 100, &[]);
//! let bytes = w.finish().expect("writing to a Vec cannot fail");
//!
//! let opts = Options { function: Some("work".into()), slowest: 3 };
//! let a = analyze(&bytes[..], &opts);
//! let f = summary::functions(&a.threads, summary::SortBy::Total);
//! let row = |name: &str| f.iter().find(|s| a.name(s.func) == name).unwrap().clone();
//! assert_eq!((row("work").calls, row("work").total_ns, row("work").self_ns), (2, 60, 40));
//! assert_eq!((row("main").total_ns, row("main").self_ns), (100, 40));
//! // Self times add up to the time in the outermost calls.
//! assert_eq!(f.iter().map(|s| s.self_ns).sum::<u64>(), a.threads[0].busy_ns());
//! assert_eq!(a.focus_durations, vec![30, 30]);
//! let text = ptscope_report::text::render(&a, "demo", &[0], &Default::default());
//! assert!(text.contains("Function work"), "{text}");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analyze;
pub mod flame;
pub mod json;
pub mod summary;
pub mod text;

pub use analyze::{analyze, Analysis, FuncId, Options, Source};

use std::io::{self, BufRead, BufReader, Read};

/// `src` as uncompressed FXT: gunzipped if it starts with the gzip magic bytes.
pub fn uncompressed(src: impl Read + Send + 'static) -> io::Result<Box<dyn Read + Send>> {
    let mut r = BufReader::with_capacity(1 << 16, src);
    let gz = r.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(flate2::read::MultiGzDecoder::new(r))
    } else {
        Box::new(r)
    })
}
