//! What the traced executable itself tells the decoder: OCaml exception traps
//! (`.note.ocaml_eh`) and the source position of every function start.

use crate::Error;
use ptscope_event::{
    Event, EventData, Location, OcamlExceptionInfo, SourcePosition, StringTable, Symbol,
};
use ptscope_symbols::{MappedFile, OcamlTraps};
use rustc_hash::FxHashMap;
use std::path::Path;

/// Facts read once from the executable, in link-time addresses.
pub(crate) struct ExeInfo {
    file_name: String,
    /// A PIE is loaded at an address only the recording knows.
    pub(crate) pie: bool,
    functions: FxHashMap<String, u64>,
    traps: Option<OcamlTraps>,
    positions: FxHashMap<u64, SourcePosition>,
}

impl ExeInfo {
    /// Reads symbols, line tables and the OCaml note; a missing part is just absent.
    pub(crate) fn load(path: &Path) -> Result<ExeInfo, Error> {
        let file = MappedFile::open(path).map_err(|source| Error::Executable {
            path: path.to_path_buf(),
            source,
        })?;
        let elf = file.elf().map_err(|source| Error::NotElf {
            path: path.to_path_buf(),
            source,
        })?;
        let mut functions = FxHashMap::default();
        let mut starts = Vec::new();
        for (name, address) in elf.function_starts() {
            functions.entry(name.to_string()).or_insert(address);
            starts.push(address);
        }
        starts.sort_unstable();
        starts.dedup();
        let positions = match elf.line_table() {
            Ok(lines) => lines.positions(starts),
            Err(_) => FxHashMap::default(),
        };
        Ok(ExeInfo {
            file_name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            pie: elf.is_position_independent(),
            functions,
            traps: elf.ocaml_traps().ok(),
            positions,
        })
    }

    /// The load bias, from any event location perf resolved inside the executable.
    pub(crate) fn bias_from(&self, event: &Event, strings: &StringTable) -> Option<u64> {
        let check = |loc: &Location| -> Option<u64> {
            let dso = strings.get(loc.dso?);
            if Path::new(dso).file_name()?.to_string_lossy() != self.file_name {
                return None;
            }
            let Symbol::FromPerf(s) = loc.symbol else {
                return None;
            };
            let link = *self.functions.get(strings.get(s))?;
            Some(loc.ip.wrapping_sub(loc.offset).wrapping_sub(link))
        };
        match event {
            Event::Ok {
                data: EventData::Trace { src, dst, .. },
                ..
            } => check(strings.location(*src)).or_else(|| check(strings.location(*dst))),
            Event::Ok {
                data: EventData::StackSample { callstack } | EventData::SwitchOutStack { callstack },
                ..
            } => strings.stack(*callstack).find_map(check),
            _ => None,
        }
    }

    /// Traps and function positions at run-time addresses.
    pub(crate) fn rebased(
        &self,
        bias: u64,
    ) -> (Option<OcamlExceptionInfo>, FxHashMap<u64, SourcePosition>) {
        let traps = self
            .traps
            .as_ref()
            .map(|t| t.rebased(bias).to_exception_info());
        let positions = self
            .positions
            .iter()
            .map(|(a, p)| (a.wrapping_add(bias), p.clone()))
            .collect();
        (traps, positions)
    }
}
