//! Decoding `perf.data` through ptscope's perf dlfilter instead of parsing text.
//!
//! The filter (crate `ptscope-dlfilter`) is built into this crate ([`FILTER_SO`]),
//! copied at run time into a sealed memfd ([`install_filter`]; never a file beside the
//! recording or in `$TMPDIR`, where other users may be able to swap it) and loaded by
//! `perf script --dlfilter /proc/PID/fd/N`. It writes compact binary records into perf's stdout and
//! leaves to perf whatever it cannot reproduce exactly (decode errors, rare events),
//! which arrives as text in the same byte stream and in the same order. This crate
//! reads both and yields the same [`Event`]s as `ptscope_decode::PerfScript`.
//!
//! ```no_run
//! use ptscope_dlfilter_reader::{DlfilterOptions, DlfilterScript};
//!
//! let mut script = DlfilterScript::spawn(&DlfilterOptions::new("perf.data"))?;
//! while let Some(event) = script.next_event()? {
//!     let _ = (event, script.strings());
//! }
//! script.finish()?;
//! # Ok::<(), ptscope_dlfilter_reader::Error>(())
//! ```

#![warn(missing_docs)]

#[path = "../../dlfilter/src/format.rs"]
#[allow(dead_code)]
mod format;

mod auto;
mod jit;
mod records;

pub use auto::{is_dropped_jump, open, perf_version, version_supports_dlfilter, AnyScript, Choice};
pub use ptscope_symbols::MapTrust;
pub use records::{CorruptKind, IdKind, RecordReader};

use ptscope_decode::header::read_header;
use ptscope_decode::perf::RecordingKind;
use ptscope_decode::{PerfError, Stats, Warning};
use ptscope_event::source::{EventSource, Finished, SourceError};
use ptscope_event::{Event, StringTable};
use std::ffi::OsString;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The filter shared object, compiled from `crates/dlfilter` by this crate's build script.
pub static FILTER_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libptscope_dlfilter.so"));

/// What `perf script` is asked to print besides samples, for the filter's caches.
const SIDEBAND_ARGS: [&str; 3] = [
    "--show-mmap-events",
    "--show-task-events",
    "--show-bpf-events",
];

/// The filter's name (its memfd's, as `/proc/PID/fd/N` shows it).
pub const FILTER_FILE_NAME: &str = "ptscope_dlfilter.so";

/// What can stop decoding through the dlfilter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading perf's output failed.
    #[error("reading perf's output: {0}")]
    Io(#[from] io::Error),
    /// perf could not be started, or failed.
    #[error(transparent)]
    Perf(#[from] PerfError),
    /// The filter could not be prepared for perf.
    #[error("cannot prepare the dlfilter ({path}): {source}")]
    Install {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The stream ended without the filter's end record: perf stopped early.
    #[error("perf's output ended before the dlfilter finished ({events} events decoded before it are kept)")]
    Truncated {
        /// Events delivered before the end.
        events: u64,
    },
    /// A record did not make sense.
    #[error("malformed dlfilter {record} record at byte {offset}: {kind}")]
    Corrupt {
        /// Offset of the record in the stream.
        offset: u64,
        /// The kind of record (`"stack sample"`, `"chain"`, …).
        record: &'static str,
        /// What was wrong.
        kind: CorruptKind,
    },
    /// The text path (used as the fallback) failed.
    #[error(transparent)]
    Text(#[from] ptscope_decode::Error),
    /// perf did not load the filter (too old, or the library was rejected).
    #[error("perf did not run the dlfilter: {0}")]
    Unsupported(String),
}

/// The filter as perf loads it: a sealed in-memory copy of [`FILTER_SO`] (a memfd)
/// that perf opens as `/proc/PID/fd/N`, ptscope's own descriptor. No file is written
/// anywhere, so there is no directory another user could rename away or fill, and
/// nothing left behind when ptscope is killed.
#[derive(Debug)]
pub struct InstalledFilter {
    path: PathBuf,
    /// Holds the memfd the path names: perf must have opened it before this is dropped.
    _code: ptscope_rootsafe::Loadable,
}

impl InstalledFilter {
    /// The filter's path, for `perf script --dlfilter` (`/proc/PID/fd/N`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Makes [`FILTER_SO`] loadable by perf ([`InstalledFilter`]).
///
/// perf runs the library's constructors with ptscope's privileges (often root), so what
/// it loads must be out of every other user's reach by construction: not a file beside
/// the input (which may be world-writable), nor one in a directory of `$TMPDIR` (which
/// another user may be able to rename away and replace, as in a non-sticky 0777
/// `TMPDIR`), but a sealed memfd nobody can write or swap.
pub fn install_filter() -> Result<InstalledFilter, Error> {
    let code =
        ptscope_rootsafe::Loadable::sealed(FILTER_FILE_NAME, FILTER_SO).map_err(|source| {
            Error::Install {
                path: PathBuf::from(format!("memfd:{FILTER_FILE_NAME}")),
                source,
            }
        })?;
    Ok(InstalledFilter {
        path: code.path(),
        _code: code,
    })
}

/// Where perf is, what to decode, and how.
#[derive(Clone, Debug)]
pub struct DlfilterOptions {
    /// The perf binary; defaults to `$PTSCOPE_PERF` or `perf`.
    pub perf: PathBuf,
    /// The `perf.data` file.
    pub input: PathBuf,
    /// `None` reads it from the recording's header.
    pub kind: Option<RecordingKind>,
    /// An existing filter to load instead of the embedded one. perf runs its code with
    /// ptscope's privileges: the caller vouches for the file and its directory.
    pub filter: Option<PathBuf>,
    /// Whose JIT maps (`/tmp/perf-PID.map`) are believed; names perf took from others
    /// are hidden (see [`MapTrust`]). Root and the invoking user by default.
    pub map_trust: MapTrust,
    /// Keep jumps within one symbol (dropped by default; stack writers ignore them).
    pub keep_jumps: bool,
    /// Appended to the `perf script` command line.
    pub extra_args: Vec<OsString>,
}

impl DlfilterOptions {
    /// Options for `input` with the default perf, kind detection and the embedded filter.
    pub fn new(input: impl Into<PathBuf>) -> Self {
        DlfilterOptions {
            perf: ptscope_decode::perf::default_perf(),
            input: input.into(),
            kind: None,
            filter: None,
            map_trust: MapTrust::new(),
            keep_jumps: false,
            extra_args: Vec::new(),
        }
    }
}

/// Asks for a 1 MiB pipe so perf, writing 4 KiB stdio blocks, rarely waits for us.
/// Failure (an old kernel, a lower `pipe-max-size`) only costs speed.
fn grow_pipe(stdout: &PerfOutput) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        extern "C" {
            fn fcntl(fd: i32, cmd: i32, ...) -> i32;
        }
        const F_SETPIPE_SZ: i32 = 1031;
        // SAFETY: F_SETPIPE_SZ on a pipe fd we own takes an int and touches no memory.
        unsafe {
            fcntl(stdout.as_raw_fd(), F_SETPIPE_SZ, 1i32 << 20);
        }
    }
}

use ptscope_decode::perf::{PerfOutput, PerfProcess};

/// A running `perf script --dlfilter` whose output is decoded as it arrives.
///
/// Same shape as `ptscope_decode::PerfScript`: drain [`DlfilterScript::next_event`],
/// then [`DlfilterScript::finish`] to learn how perf exited.
#[derive(Debug)]
pub struct DlfilterScript {
    reader: RecordReader<BufReader<PerfOutput>>,
    perf: PerfProcess,
    kind: RecordingKind,
    /// Hides names from untrusted JIT maps.
    pub(crate) jit: jit::JitNames,
    /// The filter perf loaded (its memfd). Declared after `perf` so perf is stopped
    /// before the descriptor is closed.
    _filter: Option<InstalledFilter>,
}

impl DlfilterScript {
    /// Starts perf; the script owns the table its events' names are interned in.
    pub fn spawn(options: &DlfilterOptions) -> Result<Self, Error> {
        let kind = match options.kind {
            Some(k) => k,
            None => read_header(&options.input).map(|h| h.kind()).map_err(|e| {
                Error::Unsupported(format!("cannot tell what kind of recording this is: {e}"))
            })?,
        };
        let (installed, filter) = match &options.filter {
            Some(f) => (None, f.clone()),
            None => {
                let i = install_filter()?;
                let path = i.path().to_path_buf();
                (Some(i), path)
            }
        };
        let mut cmd = Command::new(&options.perf);
        cmd.arg("script")
            .arg("-i")
            .arg(&options.input)
            .args(kind.script_args())
            .arg("--dlfilter")
            .arg(&filter);
        if options.keep_jumps {
            cmd.args(["--dlarg", "keep-jumps"]);
        }
        // perf prints the events that change its address maps, in order among the
        // samples: the filter then trusts its caches until one appears (the reader drops
        // those lines), instead of making perf resolve every sample's address.
        cmd.args(SIDEBAND_ARGS).args(["--dlarg", "sideband"]);
        if options.extra_args.is_empty() {
            // Nothing on the command line filters samples, so the filter may see them
            // before perf's own checks and symbol lookup.
            cmd.args(["--dlarg", "early"]);
        }
        cmd.args(&options.extra_args)
            .env("PAGER", "cat")
            .stdin(Stdio::null());
        // PerfProcess puts perf in its own process group, so the terminal's Ctrl-C
        // reaches ptscope only: perf cut short by it would look like a failed stream, and
        // `--decoder auto` would start the whole decode again on the text path instead
        // of stopping. ptscope stops perf itself (`finish`, or dropping the script).
        let (perf, stdout) = PerfProcess::spawn(&mut cmd)?;
        grow_pipe(&stdout);
        Ok(DlfilterScript {
            reader: RecordReader::new(BufReader::with_capacity(1 << 20, stdout)),
            perf,
            kind,
            jit: jit::JitNames::new(options.map_trust.clone()),
            _filter: installed,
        })
    }

    /// Which kind of recording perf is decoding.
    pub fn kind(&self) -> RecordingKind {
        self.kind
    }

    /// The command line that was started.
    pub fn command(&self) -> &str {
        self.perf.command()
    }

    /// The next event; `Ok(None)` at the end. A stream cut short is an [`Error::Truncated`]
    /// after every event decoded before the cut.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        let mut e = self.reader.next_event()?;
        if let Some(e) = &mut e {
            self.jit.apply(e, self.reader.strings_mut());
        }
        Ok(e)
    }

    /// Things the user should know that are not errors (JIT maps ignored), oldest
    /// first; each is returned once.
    pub fn take_notices(&mut self) -> Vec<String> {
        self.jit.take_notices()
    }

    /// True once the filter's first record arrived (perf loaded it).
    pub fn started(&mut self) -> Result<bool, Error> {
        self.reader.wait_for_hello()
    }

    /// The record reader (stats, warnings, strings).
    pub fn reader(&self) -> &RecordReader<BufReader<PerfOutput>> {
        &self.reader
    }

    /// The table the events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        self.reader.strings()
    }

    /// Gives the string table back.
    pub fn into_strings(mut self) -> StringTable {
        self.reader.take_strings()
    }

    /// Totals so far.
    pub fn stats(&self) -> Stats {
        self.reader.stats()
    }

    /// The first warnings from text perf printed.
    pub fn warnings(&self) -> &[Warning] {
        self.reader.warnings()
    }

    /// Waits for perf and reports how it exited, with its stderr tail on failure. If
    /// the events were not drained, perf is stopped first (that is not an error).
    pub fn finish(&mut self) -> Result<(), Error> {
        let stopped_early = !self.reader.is_finished();
        Ok(self.perf.finish(stopped_early)?)
    }

    /// Why the watchdog stopped perf, if it did: perf made no progress, and running it
    /// again (the text path) would only wait as long again.
    pub fn stall(&self) -> Option<ptscope_decode::PerfError> {
        self.perf.stall()
    }

    /// True once an interrupt asked perf to stop (`ptscope_decode::perf::stop_all`):
    /// a stream cut short then is the end of the input, not a failure.
    pub fn interrupted(&self) -> bool {
        self.perf.interrupted()
    }

    /// How perf exited, if it has.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.perf.exited()
    }

    /// Stops perf and returns the end of its stderr (for diagnostics).
    fn stderr_now(&mut self) -> String {
        self.perf.kill_and_stderr()
    }
}

impl EventSource for DlfilterScript {
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(DlfilterScript::next_event(self)?)
    }
    fn strings(&self) -> &StringTable {
        self.reader.strings()
    }
    fn stats(&self) -> Stats {
        self.reader.stats()
    }
    fn warnings(&self) -> Vec<Warning> {
        self.reader.warnings().to_vec()
    }
    fn finish(mut self: Box<Self>) -> Finished {
        let failure = DlfilterScript::finish(&mut self)
            .err()
            .map(SourceError::from);
        let notices = self.take_notices();
        Finished {
            failure,
            notices,
            ..Finished::new(self.into_strings())
        }
    }
}
