//! Opening trace files for writing (raw or gzip) and reading them back.

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::fs::File;
use std::io::{self, BufWriter, Read, Stdout, Write};
use std::path::Path;

/// Buffer between the encoder and the file; the FXT writer already batches 64 KiB.
const FILE_BUFFER: usize = 256 * 1024;

/// gzip level magic-trace uses (camlzip's default) and Perfetto reads fast enough.
const GZIP_LEVEL: u32 = 6;

enum Inner {
    Raw(BufWriter<File>),
    // Boxed: the encoder state is large and the enum is moved around by value.
    Gzip(Box<GzEncoder<BufWriter<File>>>),
    Stdout(BufWriter<Stdout>),
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
            Inner::Gzip(gz) => (*gz).finish()?.flush(),
            Inner::Stdout(mut w) => w.flush(),
        }
    }
}

impl Write for TraceOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::Raw(w) => w.write(buf),
            Inner::Gzip(w) => w.write(buf),
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
            Inner::Gzip(w) => w.flush(),
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
        Inner::Gzip(Box::new(GzEncoder::new(file, Compression::new(GZIP_LEVEL))))
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
