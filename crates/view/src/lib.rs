//! Serves one trace file to the Perfetto UI, as Perfetto's "Deep linking to the Perfetto
//! UI" page and its `open_trace_in_ui` tool do: on 127.0.0.1 only, with CORS headers for
//! the UI's origin, the file's bytes as they are on disk (the UI's trace processor
//! gunzips `.fxt.gz` itself), and a link that opens it.
//!
//! What the UI needs, from its source (`ui/src/core/trace_stream.ts`, `frontend/index.ts`):
//! - a plain `GET` answered `200` (any other status fails the load; it never sends
//!   `Range`), with `Content-Length` for its progress bar, and
//!   `Access-Control-Allow-Origin` for `https://ui.perfetto.dev`;
//! - port **9001**: the UI's Content-Security-Policy (`connect-src`) lets it fetch from
//!   `http://127.0.0.1:9001` and no other local port, so a `?url=` link to any other
//!   port is refused by the browser. On another port (9001 taken, or `--port`), the
//!   server also serves a small page that fetches the trace from its own origin and
//!   hands it to the UI with `postMessage`, which the UI accepts from 127.0.0.1 origins.
//!
//! Only the one file is served, under a path with a random part (other local users can
//! connect to 127.0.0.1 too, but cannot guess it); the file is opened once, must be a
//! regular file that is not a symbolic link, and must hold an FXT trace.
//!
//! ```
//! use std::io::{Read, Write};
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("t.fxt");
//! // The smallest FXT trace: its magic record.
//! std::fs::write(&path, 0x0016_5478_4604_0010u64.to_le_bytes())?;
//! let file = ptscope_view::TraceFile::open(&path)?;
//! let server = ptscope_view::Server::bind(file, Some(0), ptscope_view::PERFETTO_UI)?;
//! let url = server.trace_url();
//! let stop = std::sync::atomic::AtomicBool::new(false);
//! std::thread::scope(|s| {
//!     s.spawn(|| server.serve(true, &|| stop.load(std::sync::atomic::Ordering::SeqCst), &|_| {}));
//!     let path = url.trim_start_matches(&format!("http://127.0.0.1:{}", server.port()));
//!     let mut c = std::net::TcpStream::connect(("127.0.0.1", server.port()))?;
//!     write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")?;
//!     let mut reply = Vec::new();
//!     c.read_to_end(&mut reply)?;
//!     let text = String::from_utf8_lossy(&reply);
//!     assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
//!     assert!(text.contains("Access-Control-Allow-Origin: https://ui.perfetto.dev"));
//!     assert!(reply.ends_with(&0x0016_5478_4604_0010u64.to_le_bytes()));
//!     Ok::<(), std::io::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod http;

use std::fs::File;
use std::io::{self, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

/// The Perfetto UI's origin.
pub const PERFETTO_UI: &str = "https://ui.perfetto.dev";

/// The only local port the Perfetto UI may fetch a `?url=` trace from (its CSP).
pub const PERFETTO_PORT: u16 = 9001;

/// The first bytes of every FXT trace (its magic record).
const FXT_MAGIC: [u8; 8] = 0x0016_5478_4604_0010u64.to_le_bytes();

/// Why a trace cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be opened (missing, a symbolic link, no permission).
    #[error("cannot open {path}: {source}")]
    Open {
        /// The trace's path.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// Not a regular file.
    #[error("{0} is not a regular file; give the path of a trace file")]
    NotAFile(String),
    /// Not an FXT trace (nor a gzipped one).
    #[error(
        "{0} is not an FXT trace (.fxt or .fxt.gz as ptscope writes them); only traces are served"
    )]
    NotATrace(String),
    /// The port cannot be bound.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// Why.
        source: io::Error,
    },
}

/// A trace opened once for serving: every request reads this open file, never the path
/// again, so swapping the path afterwards changes nothing.
pub struct TraceFile {
    file: File,
    len: u64,
    name: String,
}

impl TraceFile {
    /// Opens `path` without following a symbolic link, and checks it is a regular file
    /// holding an FXT trace (raw or gzipped).
    pub fn open(path: &Path) -> Result<TraceFile, Error> {
        let shown = path.display().to_string();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| Error::Open {
                path: shown.clone(),
                source: if source.raw_os_error() == Some(libc::ELOOP) {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "it is a symbolic link; give the trace file's own path",
                    )
                } else {
                    source
                },
            })?;
        let meta = file.metadata().map_err(|source| Error::Open {
            path: shown.clone(),
            source,
        })?;
        if !meta.is_file() {
            return Err(Error::NotAFile(shown));
        }
        let mut head = [0u8; 8];
        let n = file.read_at(&mut head, 0).unwrap_or(0);
        let is_trace = if head[..n].starts_with(&[0x1f, 0x8b]) {
            // A gzip file: its first 8 decompressed bytes must be the magic.
            let mut gz = flate2::read::GzDecoder::new(ReadAt {
                file: &file,
                pos: 0,
            });
            let mut inner = [0u8; 8];
            gz.read_exact(&mut inner).is_ok() && inner == FXT_MAGIC
        } else {
            n == 8 && head == FXT_MAGIC
        };
        if !is_trace {
            return Err(Error::NotATrace(shown));
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace.fxt.gz".into());
        Ok(TraceFile {
            file,
            len: meta.len(),
            name: url_safe(&name),
        })
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty (never, for a trace).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The name it is served under.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Reads a file from an offset without moving a shared position.
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// `name` with anything but `[A-Za-z0-9._-]` replaced, so it needs no escaping in a URL.
fn url_safe(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "trace.fxt.gz".into()
    } else {
        s
    }
}

/// 16 random bytes as hex, from the kernel.
fn token() -> io::Result<String> {
    let mut b = [0u8; 16];
    let mut f = File::open("/dev/urandom")?;
    f.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// One request the server answered, for the caller to show.
#[derive(Clone, Debug)]
pub struct Served {
    /// `GET`, `OPTIONS`, …
    pub method: String,
    /// The path asked for.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// Bytes of the trace sent.
    pub bytes: u64,
    /// The whole trace was sent.
    pub complete: bool,
}

/// A listening server for one trace.
pub struct Server {
    listener: TcpListener,
    port: u16,
    token: String,
    file: TraceFile,
    origin: String,
}

impl Server {
    /// Listens on 127.0.0.1: on `port` (`Some(0)`: any free port), or by default on 9001,
    /// the port the Perfetto UI accepts, else on any free port. `origin` is the UI
    /// allowed to fetch the trace (CORS).
    pub fn bind(file: TraceFile, port: Option<u16>, origin: &str) -> Result<Server, Error> {
        let listener = match port {
            Some(p) => TcpListener::bind((Ipv4Addr::LOCALHOST, p))
                .map_err(|source| Error::Bind { port: p, source })?,
            None => TcpListener::bind((Ipv4Addr::LOCALHOST, PERFETTO_PORT))
                .or_else(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
                .map_err(|source| Error::Bind { port: 0, source })?,
        };
        let port = listener
            .local_addr()
            .map_err(|source| Error::Bind {
                port: port.unwrap_or(0),
                source,
            })?
            .port();
        listener
            .set_nonblocking(true)
            .map_err(|source| Error::Bind { port, source })?;
        let token = token().map_err(|source| Error::Bind { port, source })?;
        Ok(Server {
            listener,
            port,
            token,
            file,
            origin: origin.trim_end_matches('/').to_string(),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The trace's URL.
    pub fn trace_url(&self) -> String {
        format!(
            "http://127.0.0.1:{}/{}/{}",
            self.port, self.token, self.file.name
        )
    }

    /// The page that hands the trace to the UI by `postMessage` (any port).
    pub fn page_url(&self) -> String {
        format!("http://127.0.0.1:{}/{}/", self.port, self.token)
    }

    /// Whether the UI at the allowed origin can open [`Server::trace_url`] directly: the
    /// Perfetto UI only from port 9001; a self-hosted UI (another origin) may allow more.
    pub fn deep_link_works(&self) -> bool {
        self.port == PERFETTO_PORT || self.origin != PERFETTO_UI
    }

    /// The link that opens the trace: the UI's `#!/?url=` deep link where the UI accepts
    /// it, else the hand-over page.
    pub fn open_url(&self) -> String {
        if self.deep_link_works() {
            format!("{}/#!/?url={}", self.origin, self.trace_url())
        } else {
            self.page_url()
        }
    }

    /// Serves until `stop()` says so or, with `once`, until the trace was sent whole
    /// once; each request answered is handed to `served`. Connections are handled on
    /// threads of their own, all joined before this returns.
    pub fn serve(
        &self,
        once: bool,
        stop: &(dyn Fn() -> bool + Sync),
        served: &(dyn Fn(&Served) + Sync),
    ) {
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            while !stop() && !done.load(std::sync::atomic::Ordering::SeqCst) {
                match self.listener.accept() {
                    Ok((conn, _)) => {
                        let done = &done;
                        s.spawn(move || {
                            let _ = conn.set_nonblocking(false);
                            let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                            let _ = conn.set_write_timeout(Some(Duration::from_secs(60)));
                            if let Some(r) = http::handle(self, conn, stop) {
                                if r.complete && once {
                                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                                }
                                served(&r);
                            }
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
    }
}
