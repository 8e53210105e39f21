//! Test harness for ptscope on real programs: run the built `ptscope` binary the ways a
//! user does, read the traces back with `ptscope_fxt`'s reader, and check what they show.
//! The tests themselves are in `tests/`; see README.md for the matrix.

#![warn(missing_docs)]

pub mod harness;
pub mod programs;
pub mod trace;
