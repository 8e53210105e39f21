//! The block log the plugin writes: the format and its readers live in
//! `ptscope-blocklog` (shared with the plugin and ptscope's emulate decoder); ptsim reads
//! whole every-block logs with [`BlockLog`].

pub use ptscope_blocklog::format::{chunk_header, KIND_EXEC, KIND_HEADER, KIND_HIT};
pub use ptscope_blocklog::*;
