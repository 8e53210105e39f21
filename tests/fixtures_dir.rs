//! Where the test fixtures are: `tests/fixtures` at the repository's root (magic-trace's
//! recordings and transcripts, memtrace traces; see its PROVENANCE.md). One file, included
//! (`#[path]`) by the tests, examples and benches of every crate that reads fixtures.

use std::path::{Path, PathBuf};

/// The repository's `tests/fixtures` directory, found from this crate's manifest directory
/// (`crates/<name>`) so that it does not depend on the working directory.
pub fn fixtures_dir() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = manifest
        .ancestors()
        .nth(2)
        .unwrap_or(manifest)
        .join("tests/fixtures");
    assert!(
        dir.is_dir(),
        "test fixtures not found at {}: they are part of the repository (tests/fixtures); \
         restore them from git (`git checkout -- tests/fixtures`)",
        dir.display()
    );
    dir
}
