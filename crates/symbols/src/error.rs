//! The crate's error type.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong reading symbols; each variant names the file (or pid) involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The bytes are not a well-formed ELF file.
    #[error("{}: not a valid ELF file: {source}", path.display())]
    Elf {
        /// The file.
        path: PathBuf,
        /// The cause, as reported by `object`.
        source: object::Error,
    },
    /// The DWARF sections are malformed.
    #[error("{}: malformed DWARF: {source}", path.display())]
    Dwarf {
        /// The file.
        path: PathBuf,
        /// The cause, as reported by `gimli`.
        source: gimli::Error,
    },
    /// Some other structure (a note, a maps line, …) is malformed.
    #[error("{}: malformed {what}: {detail}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What was being read.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The file has no function symbols at all (stripped).
    #[error("{}: no function symbols (stripped binary){}", path.display(), debuglink_hint(debuglink))]
    NoSymbols {
        /// The file.
        path: PathBuf,
        /// The separate debug file named by `.gnu_debuglink`, if any.
        debuglink: Option<String>,
    },
    /// The file has no DWARF line table.
    #[error("{}: no DWARF line information (compile with -g){}", path.display(), debuglink_hint(debuglink))]
    NoDebugInfo {
        /// The file.
        path: PathBuf,
        /// The separate debug file named by `.gnu_debuglink`, if any.
        debuglink: Option<String>,
    },
    /// No function has this name.
    #[error("{}: no function named `{name}`{}", path.display(), suggestion_hint(suggestions))]
    SymbolNotFound {
        /// The file (or, for a process-wide lookup, the executable).
        path: PathBuf,
        /// The name asked for.
        name: String,
        /// Close names, best first (at most 3).
        suggestions: Vec<String>,
    },
    /// No line-table row matches a `FILE:LINE[:COL]`.
    #[error("{}: no code for {file}:{line}{}{}", path.display(), col.map(|c| format!(":{c}")).unwrap_or_default(), nearest_hint(nearest))]
    LineNotFound {
        /// The ELF file.
        path: PathBuf,
        /// The source file asked for.
        file: String,
        /// The line asked for.
        line: u64,
        /// The column asked for, if any.
        col: Option<u64>,
        /// Lines of the same file that do have code, closest first (at most 3).
        nearest: Vec<u64>,
    },
    /// No compilation unit has a source file with this name.
    #[error("{}: no source file matching `{file}` in the line tables", path.display())]
    SourceFileNotFound {
        /// The ELF file.
        path: PathBuf,
        /// The source file asked for.
        file: String,
    },
    /// An address lies in no `PT_LOAD` segment.
    #[error("{}: address {address:#x} is in no loadable segment", path.display())]
    NoSegment {
        /// The file.
        path: PathBuf,
        /// The address.
        address: u64,
    },
    /// The file is not mapped into the process (or not the part that is needed).
    #[error("pid {pid}: {} is not mapped", path.display())]
    NotMapped {
        /// The process.
        pid: u32,
        /// The file.
        path: PathBuf,
    },
    /// The file has no `.note.ocaml_eh` note.
    #[error("{}: no .note.ocaml_eh note", path.display())]
    NoOcamlNote {
        /// The file.
        path: PathBuf,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn debuglink_hint(link: &Option<String>) -> String {
    match link {
        Some(l) => format!("; debug info is in a separate file `{l}` (.gnu_debuglink)"),
        None => String::new(),
    }
}

fn suggestion_hint(s: &[String]) -> String {
    if s.is_empty() {
        String::new()
    } else {
        format!(
            "; did you mean {}?",
            quoted_list(s.iter().map(String::as_str))
        )
    }
}

fn nearest_hint(lines: &[u64]) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        let l: Vec<String> = lines.iter().map(u64::to_string).collect();
        format!("; lines with code nearby: {}", l.join(", "))
    }
}

fn quoted_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        what: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Error::Malformed {
            path: path.into(),
            what,
            detail: detail.into(),
        }
    }
}
