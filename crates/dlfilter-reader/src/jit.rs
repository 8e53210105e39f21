//! Names perf took from JIT maps (`/tmp/perf-PID.map`) are kept only when the map's
//! owner is trusted.
//!
//! perf 6.1 reads `/tmp/perf-PID.map` for anonymous executable memory without checking
//! who wrote it, and `/tmp` is writable by everyone: another user could name the traced
//! process's JIT code in a trace root writes. Both decoding paths see perf's names, so
//! both pass their events through here and agree: a location whose DSO is a JIT map
//! that [`MapTrust`] does not believe (opened without following links, owner taken from
//! the opened file) gets the name perf gives code it has no symbol for,
//! `[unknown @ IP (DSO)]`, and the decode gets one notice per map.

use ptscope_event::{Event, EventData, Location, LocationHandle, StringTable, Symbol};
use ptscope_symbols::{is_jit_map_name, MapTrust};
use std::io::ErrorKind::NotFound;
use std::path::Path;

/// Not yet looked at.
const UNCHECKED: u8 = 0;
/// Not a JIT map, or a trusted one.
const KEEP: u8 = 1;
/// A JIT map whose names are not believed.
const HIDE: u8 = 2;

/// Per string table: which DSO names are untrusted JIT maps.
#[derive(Debug, Default)]
pub(crate) struct JitNames {
    trust: MapTrust,
    /// Indexed by the DSO's `Sym`.
    state: Vec<u8>,
    notices: Vec<String>,
    scratch: String,
    /// A sampled stack's frames while they are fixed.
    frames: Vec<Location>,
}

impl JitNames {
    /// Believes the maps `trust` believes.
    pub(crate) fn new(trust: MapTrust) -> Self {
        JitNames {
            trust,
            ..JitNames::default()
        }
    }

    /// Notices so far (maps ignored), oldest first.
    pub(crate) fn take_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notices)
    }

    /// Hides the names of `event`'s locations that came from untrusted JIT maps.
    #[inline]
    pub(crate) fn apply(&mut self, event: &mut Event, strings: &mut StringTable) {
        let Event::Ok { data, .. } = event else {
            return;
        };
        match data {
            EventData::Trace { src, dst, .. } => {
                self.fix_handle(src, strings);
                self.fix_handle(dst, strings);
            }
            EventData::StackSample { callstack } | EventData::SwitchOutStack { callstack } => {
                let mut frames = std::mem::take(&mut self.frames);
                frames.clear();
                frames.extend(strings.stack(*callstack).copied());
                let mut changed = false;
                for l in &mut frames {
                    changed |= self.fix(l, strings);
                }
                if changed {
                    *callstack = strings.intern_stack(frames.iter().copied());
                }
                self.frames = frames;
            }
            EventData::EventSample { location, .. } | EventData::Ptwrite { location, .. } => {
                self.fix(location, strings);
            }
            EventData::Power { .. }
            | EventData::Comm { .. }
            | EventData::Fork { .. }
            | EventData::Switch { .. } => {}
        }
    }

    /// [`JitNames::fix`] for an interned location: a changed one is interned anew.
    #[inline]
    fn fix_handle(&mut self, h: &mut LocationHandle, strings: &mut StringTable) {
        let mut loc = *strings.location(*h);
        if self.fix(&mut loc, strings) {
            *h = strings.intern_location(loc);
        }
    }

    #[inline]
    fn fix(&mut self, loc: &mut Location, strings: &mut StringTable) -> bool {
        let Some(dso) = loc.dso else { return false };
        let i = dso.0 as usize;
        let state = match self.state.get(i) {
            Some(&s) if s != UNCHECKED => s,
            _ => self.check(i, strings.get(dso)),
        };
        if state != HIDE {
            return false;
        }
        // What the decoders make of perf's `[unknown] (DSO)`.
        self.scratch.clear();
        self.scratch.push_str("[unknown @ ");
        ptscope_event::write_ocaml_int64_hex(&mut self.scratch, loc.ip);
        self.scratch.push_str(" (");
        self.scratch.push_str(strings.get(dso));
        self.scratch.push_str(")]");
        loc.symbol = Symbol::FromPerf(strings.intern(&self.scratch));
        loc.offset = 0;
        true
    }

    #[cold]
    fn check(&mut self, i: usize, dso: &str) -> u8 {
        let state = if !is_jit_map_name(dso) {
            KEEP
        } else {
            let path = Path::new(dso);
            match self.trust.check_path(path) {
                Ok(()) => KEEP,
                // No map is the usual case (a runtime writes one only when asked), not
                // a trust question: say how to get names, not that a file failed.
                Err(_) if path.symlink_metadata().is_err_and(|e| e.kind() == NotFound) => {
                    self.notices.push(format!(
                        "JIT-compiled code ran, but {dso} was not written, so its functions \
                         are shown as [unknown]; a runtime writes that map when asked to: \
                         `node --perf-basic-prof`, `python3 -X perf` (3.12+), Java with \
                         perf-map-agent"
                    ));
                    HIDE
                }
                Err(why) => {
                    self.notices
                        .push(format!("{why}; its functions are shown as [unknown]"));
                    HIDE
                }
            }
        };
        if self.state.len() <= i {
            self.state.resize(i + 1, UNCHECKED);
        }
        self.state[i] = state;
        state
    }
}
