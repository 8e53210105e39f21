//! Opening trace files for writing (raw or gzip) and reading them back.

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::fs::File;
use std::io::{self, BufWriter, Read, Stdout, Write};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Buffer between the encoder and the file; the FXT writer already batches 64 KiB.
const FILE_BUFFER: usize = 256 * 1024;

/// gzip level magic-trace uses (camlzip's default) and Perfetto reads fast enough.
const GZIP_LEVEL: u32 = 6;

enum Inner {
    Raw(BufWriter<File>),
    Gzip(GzipThread),
    Stdout(BufWriter<Stdout>),
}

/// Bytes handed to the compressor thread at a time.
const CHUNK: usize = 256 * 1024;

/// gzip runs on its own thread: it is most of the output's cost, and the trace
/// writer can keep producing while the previous chunk compresses.
struct GzipThread {
    buf: Vec<u8>,
    tx: Option<SyncSender<Vec<u8>>>,
    recycled: Receiver<Vec<u8>>,
    handle: Option<JoinHandle<io::Result<()>>>,
}

impl GzipThread {
    fn new(file: BufWriter<File>) -> io::Result<Self> {
        let (tx, rx) = sync_channel::<Vec<u8>>(4);
        let (back_tx, back_rx) = sync_channel::<Vec<u8>>(8);
        let handle = std::thread::Builder::new()
            .name("ptscope-gzip".into())
            .spawn(move || -> io::Result<()> {
                let mut gz = GzEncoder::new(file, Compression::new(GZIP_LEVEL));
                for mut chunk in rx {
                    gz.write_all(&chunk)?;
                    chunk.clear();
                    let _ = back_tx.try_send(chunk);
                }
                gz.finish()?.flush()
            })?;
        Ok(GzipThread {
            buf: Vec::with_capacity(CHUNK),
            tx: Some(tx),
            recycled: back_rx,
            handle: Some(handle),
        })
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        let chunk = std::mem::replace(&mut self.buf, next);
        match &self.tx {
            Some(tx) if tx.send(chunk).is_ok() => Ok(()),
            // The compressor stopped: its error is reported by `finish`.
            _ => Err(self.stopped()),
        }
    }

    fn stopped(&mut self) -> io::Error {
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(Err(e))) => e,
            Some(Ok(Ok(()))) | None => {
                io::Error::new(io::ErrorKind::BrokenPipe, "the gzip compressor stopped")
            }
            Some(Err(_)) => io::Error::other("the gzip compressor thread panicked"),
        }
    }

    fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        self.send()?;
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the gzip compressor thread panicked")),
            None => Err(io::Error::other("the gzip compressor already stopped")),
        }
    }
}

/// A trace destination: a raw file, a gzip file, or standard output.
///
/// Call [`finish`](TraceOutput::finish): it writes the gzip trailer and reports the
/// errors that a drop would swallow.
pub struct TraceOutput {
    inner: Inner,
}

impl TraceOutput {
    /// Whether the output is gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        matches!(self.inner, Inner::Gzip(_))
    }

    /// Completes the stream (gzip trailer included) and flushes it to the OS.
    pub fn finish(self) -> io::Result<()> {
        match self.inner {
            Inner::Raw(mut w) => w.flush(),
            Inner::Gzip(gz) => gz.finish(),
            Inner::Stdout(mut w) => w.flush(),
        }
    }
}

impl Write for TraceOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Raw(w) => w.write(buf),
            Inner::Gzip(w) => w.write_all(buf).map(|()| buf.len()),
            Inner::Stdout(w) => w.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.inner {
            Inner::Raw(w) => w.write_all(buf),
            Inner::Gzip(w) => w.write_all(buf),
            Inner::Stdout(w) => w.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Raw(w) => w.flush(),
            // Flushing mid-stream would only cost compression ratio.
            Inner::Gzip(_) => Ok(()),
            Inner::Stdout(w) => w.flush(),
        }
    }
}

/// Creates the output for `path`: `-` is stdout, a `.gz` name is gzip (level 6),
/// anything else is written raw. An existing file is replaced.
pub fn open_trace_output(path: &Path) -> io::Result<TraceOutput> {
    if path.as_os_str() == "-" {
        return Ok(TraceOutput {
            inner: Inner::Stdout(BufWriter::with_capacity(FILE_BUFFER, io::stdout())),
        });
    }
    let file = BufWriter::with_capacity(FILE_BUFFER, File::create(path)?);
    let gzip = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let inner = if gzip {
        Inner::Gzip(GzipThread::new(file)?)
    } else {
        Inner::Raw(file)
    };
    Ok(TraceOutput { inner })
}

/// Returns `data` decompressed if it starts with the gzip magic, else unchanged.
pub fn gunzip_if_needed(data: Vec<u8>) -> io::Result<Vec<u8>> {
    if !ptscope_fxt::reader::is_gzip(&data) {
        return Ok(data);
    }
    let mut out = Vec::with_capacity(data.len().saturating_mul(4));
    MultiGzDecoder::new(&data[..]).read_to_end(&mut out)?;
    Ok(out)
}

/// Reads a trace file into memory, gunzipping it if it is compressed.
pub fn read_trace_file(path: &Path) -> io::Result<Vec<u8>> {
    gunzip_if_needed(std::fs::read(path)?)
}
