//! ptscope's builtin Intel PT decode (`--decoder builtin`): a perf.data read in-process
//! (`ptscope-perf-data`), its AUX trace decoded by `ptscope-intel-pt` against the code
//! of the files the recording mapped (checked by build id), on every core, as the same
//! [`ptscope_event::Event`]s perf's decoder gives through the text and dlfilter paths —
//! branch kinds, trace starts and ends, decode errors, names — with the branches timed
//! at least as precisely.
//!
//! ```no_run
//! use ptscope_event::EventSource;
//!
//! let mut source = ptscope_pt_decode::open("perf.data".as_ref(), &Default::default())?;
//! while let Some(event) = source.next_event()? {
//!     let _ = (event, source.strings());
//! }
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```

#![warn(missing_docs)]

mod image;
mod names;
mod recording;
mod source;

pub use image::{own_vdso, save_vdso, VDSO_FILE};
pub use source::PtSource;

use std::path::{Path, PathBuf};

/// Why the builtin decoder cannot decode a recording (`--decoder auto` then uses
/// perf's).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The perf.data file cannot be read.
    #[error(transparent)]
    PerfData(#[from] ptscope_perf_data::Error),
    /// It is no Intel PT recording (no AUXTRACE_INFO of Intel PT, or no intel_pt event).
    #[error("not an Intel PT recording")]
    NotIntelPt,
    /// The kernel was traced: decoding it needs the kernel's code (`--kcore`), which
    /// this decoder does not read yet.
    #[error("the kernel was traced too, and ptscope's decoder does not decode kernel code yet (use --decoder dlfilter: perf's decoder)")]
    KernelTrace,
    /// A worker thread could not be started.
    #[error("cannot start a decoding thread")]
    Thread(#[source] std::io::Error),
}

/// How to decode.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes of trace per chunk (chunks start at PSBs and decode in parallel).
    pub chunk_size: usize,
    /// Worker threads (`None`: one per core).
    pub threads: Option<usize>,
    /// Look for OCaml's exception-trap instructions.
    pub ocaml_traps: bool,
    /// perf's build-id cache (`~/.debug`); `None`: the one of the user running ptscope.
    pub buildid_cache: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            chunk_size: 256 << 10,
            threads: None,
            ocaml_traps: false,
            buildid_cache: None,
        }
    }
}

/// The build-id cache of the user running ptscope (`$HOME/.debug`).
fn default_buildid_cache() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".debug"))
}

/// Opens the Intel PT recording at `path` for decoding.
pub fn open(path: &Path, opts: &Options) -> Result<PtSource, Error> {
    use std::os::unix::fs::MetadataExt;
    let data = ptscope_perf_data::PerfData::open(path)?;
    let owner = std::fs::metadata(path).map_or(0, |m| m.uid());
    let cache = opts.buildid_cache.clone().or_else(default_buildid_cache);
    let lookup = image::Lookup {
        dir: path.parent(),
        owner,
        buildid_cache: cache,
    };
    let rec = recording::read(&data, &lookup)?;
    PtSource::new(data, rec, opts)
}
