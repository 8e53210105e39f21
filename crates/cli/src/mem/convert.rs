//! `ptscope mem convert`: memtrace → Fuchsia trace for Perfetto.

use std::path::Path;

use memtrace::{IoSource, Reader};

/// Conversion parameters.
pub struct Options {
    /// Counter resolution in µs.
    pub bucket_us: u64,
    /// Number of allocation sites shown.
    pub top_sites: usize,
}

/// Converts a trace (not implemented yet).
pub fn convert<R: std::io::Read>(_r: &mut Reader<IoSource<R>>, _out: &Path, _opts: &Options) -> anyhow::Result<()> {
    anyhow::bail!("convert is not implemented yet")
}
