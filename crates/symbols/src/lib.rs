//! Symbols for ptscope: ELF function symbols, runtime (PIE- and shared-library-aware)
//! addresses, DWARF `FILE:LINE` ↔ address, demangling (Rust, C++, OCaml), JIT perf maps and
//! OCaml exception-trap notes.
//!
//! Everything reads the file in place: [`MappedFile`] maps it, and [`Elf`] and
//! [`SymbolTable`] borrow names from the mapping. Errors are [`Error`]s naming the file and
//! the cause; malformed input never panics.
//!
//! ```
//! use ptscope_symbols::{MappedFile, Process};
//!
//! #[no_mangle]
//! pub extern "C" fn ptscope_doc_marker() -> u32 { 7 }
//!
//! # fn main() -> Result<(), ptscope_symbols::Error> {
//! let exe = MappedFile::open("/proc/self/exe")?;
//! let elf = exe.elf()?;
//! let syms = elf.symbols()?;
//! let marker = syms.lookup("ptscope_doc_marker")?;
//! assert_eq!(syms.containing(marker.address()).map(|s| s.name()), Some("ptscope_doc_marker"));
//!
//! // Link-time address → address in this very process (PIE: plus the load bias).
//! let me = Process::open(std::process::id())?;
//! let runtime = me.maps().runtime_address(&elf, marker.address())?;
//! assert_eq!(runtime, ptscope_doc_marker as usize as u64);
//!
//! // A typo gets suggestions.
//! let err = syms.lookup("ptscope_doc_markr").unwrap_err();
//! assert!(err.to_string().contains("did you mean `ptscope_doc_marker`"));
//! # Ok(()) }
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod demangle;
mod dwarf;
mod elf;
mod error;
mod file_functions;
mod functions;
mod inline;
mod naming;
mod ocaml;
mod perfdata;
mod perfmap;
mod process;

pub use demangle::{
    demangle, demangle_cpp, demangle_ocaml, demangle_rust, demangle_with_scheme, truncate, Scheme,
    MAX_INPUT_LEN, MAX_OUTPUT_LEN,
};
pub use dwarf::{LineAddress, LineTable};
pub use elf::{Elf, FunctionSymbol, LoadSegment, MappedFile, SymbolTable};
pub use error::{Error, Result};
pub use file_functions::{perf_name, FileFunctions, FoundName, Region};
pub use functions::{
    eh_frame_ranges, find_debug_file, FoundFunction, FunctionRanges, NameSource, DEBUG_ROOT,
};
pub use inline::{InlineInfo, Inlined};
pub use naming::{
    kernel_frame_name, NameTable, Namer, NamingStats, CALLER_LOST, IN_INTERRUPT, IN_KERNEL,
    IN_SYSCALL, STACK_CUT, STACK_CUT_NO_COPY, STACK_CUT_STOPPED, STACK_CUT_UNWOUND,
};
pub use ocaml::OcamlTraps;
pub use perfdata::{Lost, Mappings};
pub use perfmap::{
    is_jit_map_name, jit_map_path, process_owner, MapTrust, PerfMap, PerfMapEntry, Untrusted,
};
pub use process::{MapEntry, ProcMaps, Process, ResolvedSymbol};
pub use ptscope_event::OcamlExceptionInfo;
pub use ptscope_event::SourcePosition;

impl Elf<'_> {
    /// The DWARF line table (see [`LineTable::new`]).
    pub fn line_table(&self) -> Result<LineTable> {
        LineTable::new(self)
    }
}
