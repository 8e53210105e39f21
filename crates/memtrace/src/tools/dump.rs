//! `dump`: one line per event, exactly as the reference `dump_trace` prints it.

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, ErrorKind, Result};
use crate::reader::{EventKind, Reader, Source};

/// Prints every event of `reader` to `out`. Lines already printed stay printed when
/// the trace turns out to be malformed; the error is returned after them.
pub fn dump<S: Source>(reader: &mut Reader<S>, out: &mut dyn Write) -> Result<()> {
    // Each code's rendered text is cached: frames repeat across allocations.
    let mut rendered: FxHashMap<u64, Box<[u8]>> = FxHashMap::default();
    let mut line = Vec::with_capacity(4096);
    while let Some(ev) = reader.next_event()? {
        line.clear();
        let _ = write!(line, "{:010} ", ev.time);
        match ev.kind {
            EventKind::Alloc(a) => {
                let _ = write!(
                    line,
                    "{:010} {} {} len={} dom={} {}:",
                    a.obj_id as i64,
                    a.source.dump_name(),
                    a.nsamples,
                    a.length,
                    a.domain,
                    ocaml_space_4d(a.common_prefix),
                );
                for &code in a.backtrace {
                    if let Some(text) = rendered.get(&code) {
                        line.extend_from_slice(text);
                        continue;
                    }
                    let locs = ev
                        .db
                        .locations(code)
                        .ok_or(Error::Invalid(ErrorKind::UnknownLocationCode(code)))?;
                    let mut text = Vec::new();
                    if locs.is_empty() {
                        let _ = write!(text, " ${}", code as i64);
                    }
                    for l in locs {
                        text.push(b' ');
                        ev.db.write_location(&mut text, l);
                    }
                    line.extend_from_slice(&text);
                    rendered.insert(code, text.into_boxed_slice());
                }
            }
            EventKind::Promote { obj_id, .. } => {
                let _ = write!(line, "{:010} promote", obj_id as i64);
            }
            EventKind::Collect { obj_id, .. } => {
                let _ = write!(line, "{:010} collect", obj_id as i64);
            }
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    Ok(())
}

/// C's `% 4d`: a space where the sign of a non-negative number would go, width 4.
pub(crate) fn ocaml_space_4d(n: i64) -> String {
    if n < 0 {
        format!("{n:4}")
    } else {
        format!("{:>4}", format!(" {n}"))
    }
}
