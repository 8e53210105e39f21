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

/// `src` as uncompressed FXT: gunzipped if it starts with the gzip magic bytes. A gzip
/// stream is unpacked on a thread of its own, so unpacking and reading share two cores;
/// the thread ends when the returned reader is dropped or the stream ends.
pub fn uncompressed(src: impl Read + Send + 'static) -> io::Result<Box<dyn Read + Send>> {
    let mut r = BufReader::with_capacity(1 << 16, src);
    let gz = r.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    if !gz {
        return Ok(Box::new(r));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(4);
    std::thread::Builder::new()
        .name("ptscope-gunzip".into())
        .spawn(move || {
            let mut gz = flate2::read::MultiGzDecoder::new(r);
            loop {
                let mut chunk = vec![0u8; CHUNK];
                let mut filled = 0;
                // Whole chunks: the reader on the other side wants few, large pieces.
                let result = loop {
                    match gz.read(&mut chunk[filled..]) {
                        Ok(0) => break Ok(()),
                        Ok(n) => {
                            filled += n;
                            if filled == CHUNK {
                                break Ok(());
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Err(e),
                    }
                };
                chunk.truncate(filled);
                let end = filled < CHUNK || result.is_err();
                if filled > 0 && tx.send(Ok(chunk)).is_err() {
                    return;
                }
                if let Err(e) = result {
                    let _ = tx.send(Err(e));
                    return;
                }
                if end {
                    return;
                }
            }
        })?;
    Ok(Box::new(ChannelReader {
        rx,
        chunk: Vec::new(),
        pos: 0,
    }))
}

/// Bytes unpacked per piece handed over.
const CHUNK: usize = 1 << 20;

/// Reads the pieces the unpacking thread sends.
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(Ok(c)) => {
                    self.chunk = c;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                // The stream ended.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
