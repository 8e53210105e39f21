//! Opening trace files for writing (raw or gzip) and reading them back.
//!
//! Every file is written atomically: under a private temporary name in the target's
//! own directory (created with `O_EXCL`, so nothing another user placed there is
//! followed or reused), then completed, flushed, synced and renamed over the target.
//! Until then the target keeps its previous content; an error or a drop removes the
//! temporary file, so a full disk, an error or a kill never leaves a truncated output
//! at the target's name. (Only a SIGKILL can leave the hidden temporary file behind.)
//!
//! Nothing at the target's name is ever opened: ptscope runs as root, and a symbolic
//! link, device or fifo there may be another user's trap. The target must be a regular
//! file or nothing ([`ptscope_rootsafe::check_output_target`] says why otherwise);
//! standard output is `-`.

use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Read, Stdout, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use tempfile::TempPath;

/// Buffer between the encoder and the file; the FXT writer already batches 64 KiB.
const FILE_BUFFER: usize = 256 * 1024;

/// gzip level 2: on the 188 MB FXT of BENCHMARKS.md's issue-28 recording (zlib-rs), level
/// 6 (magic-trace's, camlzip's default) took 1.8 s for 10.0 % of the size, level 2 0.49 s
/// for 11.8 % (level 4: 0.86 s, 10.3 %). Compression was a third of an end-to-end
/// decode's CPU, and a trace is read back by decompressing it, whatever the level.
const GZIP_LEVEL: u32 = 2;

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
    handle: Option<JoinHandle<io::Result<File>>>,
}

impl GzipThread {
    fn new(file: BufWriter<File>) -> io::Result<Self> {
        let (tx, rx) = sync_channel::<Vec<u8>>(4);
        let (back_tx, back_rx) = sync_channel::<Vec<u8>>(8);
        let handle = std::thread::Builder::new()
            .name("ptscope-gzip".into())
            .spawn(move || -> io::Result<File> {
                let mut gz = GzEncoder::new(file, Compression::new(GZIP_LEVEL));
                for mut chunk in rx {
                    gz.write_all(&chunk)?;
                    chunk.clear();
                    let _ = back_tx.try_send(chunk);
                }
                gz.finish()?.into_inner().map_err(|e| e.into_error())
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
            Some(Ok(Ok(_))) | None => {
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

    /// Writes the gzip trailer and returns the file, flushed to the OS.
    fn finish(mut self) -> io::Result<File> {
        self.send()?;
        self.tx = None;
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the gzip compressor thread panicked")),
            None => Err(io::Error::other("the gzip compressor already stopped")),
        }
    }
}

/// A file being written under a temporary name, renamed over its target when done.
struct Pending {
    /// Removes the temporary file when dropped, i.e. unless committed.
    temp: TempPath,
    target: PathBuf,
    /// Keep an existing target as `<target>.old` instead of replacing it.
    keep_old: bool,
}

impl Pending {
    /// Creates the temporary file in `target`'s directory, once `target` is known to be
    /// a regular file or nothing (never a link, device, fifo or socket).
    fn create(target: &Path, keep_old: bool) -> io::Result<(File, Pending)> {
        ptscope_rootsafe::check_output_target(target)?;
        let name = target.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a file name", target.display()),
            )
        })?;
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let mut prefix = OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        // 0666 less the umask, as File::create would give the target.
        let temp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)?;
        let (file, temp) = temp.into_parts();
        let pending = Pending {
            temp,
            target: target.to_path_buf(),
            keep_old,
        };
        Ok((file, pending))
    }

    /// Syncs `file` and renames it over the target (keeping the old one if asked).
    fn commit(self, file: File) -> io::Result<()> {
        file.sync_all()?;
        drop(file);
        if self.keep_old {
            keep_as_old(&self.target)?;
        }
        let dir = self.temp.parent().map(Path::to_path_buf);
        self.temp.persist(&self.target).map_err(|e| e.error)?;
        // The rename itself survives a crash only once the directory is synced.
        if let Some(dir) = dir {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// Keeps an existing `target` as `<target>.old`, so a previous trace is never silently
/// lost. A hard link keeps the target in place until the new file replaces it.
fn keep_as_old(target: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(target) {
        Ok(m) if !m.is_dir() => {}
        _ => return Ok(()),
    }
    let mut old = target.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    match std::fs::remove_file(&old) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot replace {}: {e}", old.display()),
            ))
        }
        _ => {}
    }
    // Filesystems without hard links get a rename: the target is briefly missing.
    std::fs::hard_link(target, &old).or_else(|_| std::fs::rename(target, &old))
}

/// A trace destination: a raw file, a gzip file, or standard output.
///
/// A file appears at its path only when [`finish`](TraceOutput::finish) succeeds; it
/// writes the gzip trailer and reports the errors that a drop would swallow. Dropping
/// the output unfinished (an error, a panic) leaves the path as it was.
pub struct TraceOutput {
    inner: Inner,
    /// `None` for standard output.
    pending: Option<Pending>,
    /// Bytes handed to it (before compression).
    written: u64,
}

impl TraceOutput {
    /// Bytes written so far, before compression (what a reader unpacks).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Whether the output is gzip-compressed.
    pub fn is_gzip(&self) -> bool {
        matches!(self.inner, Inner::Gzip(_))
    }

    /// Completes the stream (gzip trailer included), syncs it to disk, keeps an
    /// existing file at the path as `<path>.old` and renames the new one into place.
    pub fn finish(self) -> io::Result<()> {
        let file = match self.inner {
            Inner::Raw(w) => w.into_inner().map_err(|e| e.into_error())?,
            Inner::Gzip(gz) => gz.finish()?,
            Inner::Stdout(mut w) => return w.flush(),
        };
        match self.pending {
            Some(p) => p.commit(file),
            None => Ok(()),
        }
    }
}

impl Write for TraceOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match &mut self.inner {
            Inner::Raw(w) => w.write(buf),
            Inner::Gzip(w) => w.write_all(buf).map(|()| buf.len()),
            Inner::Stdout(w) => w.write(buf),
        }?;
        self.written += n as u64;
        Ok(n)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.inner {
            Inner::Raw(w) => w.write_all(buf),
            Inner::Gzip(w) => w.write_all(buf),
            Inner::Stdout(w) => w.write_all(buf),
        }?;
        self.written += buf.len() as u64;
        Ok(())
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
/// anything else is written raw. The file is written under a temporary name in the
/// same directory and replaces `path` (kept as `<path>.old`) only at
/// [`TraceOutput::finish`].
pub fn open_trace_output(path: &Path) -> io::Result<TraceOutput> {
    if path.as_os_str() == "-" {
        return Ok(TraceOutput {
            inner: Inner::Stdout(BufWriter::with_capacity(FILE_BUFFER, io::stdout())),
            pending: None,
            written: 0,
        });
    }
    let (file, pending) = Pending::create(path, true)?;
    let pending = Some(pending);
    let file = BufWriter::with_capacity(FILE_BUFFER, file);
    let gzip = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    let inner = if gzip {
        Inner::Gzip(GzipThread::new(file)?)
    } else {
        Inner::Raw(file)
    };
    Ok(TraceOutput {
        inner,
        pending,
        written: 0,
    })
}

/// Any output file written atomically: it replaces its path only at
/// [`commit`](AtomicFile::commit), and dropping it uncommitted leaves the path as it was
/// and no temporary file behind.
///
/// ```
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("out.txt");
/// let mut f = ptscope_output::AtomicFile::create(&path)?;
/// f.write_all(b"half")?;
/// drop(f); // an error happened: nothing appears
/// assert!(!path.exists());
/// let mut f = ptscope_output::AtomicFile::create(&path)?;
/// f.write_all(b"whole")?;
/// f.commit()?;
/// assert_eq!(std::fs::read(&path)?, b"whole");
/// assert_eq!(std::fs::read_dir(dir.path())?.count(), 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct AtomicFile {
    out: BufWriter<File>,
    pending: Pending,
}

impl AtomicFile {
    /// Starts writing `path` (replaced at commit; see [`keep_old`](Self::keep_old)).
    pub fn create(path: &Path) -> io::Result<AtomicFile> {
        let (file, pending) = Pending::create(path, false)?;
        Ok(AtomicFile {
            out: BufWriter::with_capacity(FILE_BUFFER, file),
            pending,
        })
    }

    /// Keeps an existing file at the path as `<path>.old` when committing.
    pub fn keep_old(mut self) -> Self {
        self.pending.keep_old = true;
        self
    }

    /// Flushes and syncs the data and renames the file into place.
    pub fn commit(self) -> io::Result<()> {
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        self.pending.commit(file)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
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
