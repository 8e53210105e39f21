//! Tools that rewrite a trace: `strip_names` and `subsample`.

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, ErrorKind, Result};
use crate::format::TraceInfo;
use crate::reader::{EventKind, Reader, Source};
use crate::sampler::Rng;
use crate::writer::Writer;

/// Writes an anonymised copy: no names, pid 0, start time 0, empty backtraces.
pub fn strip_names<S: Source, W: Write>(reader: &mut Reader<S>, out: W) -> Result<W> {
    let src = reader.info();
    let info = TraceInfo {
        sample_rate: src.sample_rate,
        word_size: src.word_size,
        executable_name: b"<anonymous>".to_vec(),
        host_name: b"<anonymous>".to_vec(),
        ocaml_runtime_params: src.ocaml_runtime_params.clone(),
        pid: 0,
        initial_domain: 0,
        start_time: 0,
        context: None,
    };
    let mut w = Writer::new(out, &info)?;
    while let Some(ev) = reader.next_event()? {
        match ev.kind {
            EventKind::Alloc(a) => {
                let id = w.put_alloc(
                    ev.time,
                    a.domain,
                    a.length,
                    a.nsamples,
                    a.source,
                    &[],
                    &mut |_| Vec::new(),
                )?;
                if id != a.obj_id {
                    return Err(Error::Writer(ErrorKind::IncorrectAllocId {
                        given: a.obj_id,
                        assigned: id,
                    }));
                }
            }
            EventKind::Promote { obj_id, domain } => w.put_promote(ev.time, domain, obj_id)?,
            EventKind::Collect { obj_id, domain } => w.put_collect(ev.time, domain, obj_id)?,
        }
    }
    w.finish()
}

/// Parameters of [`subsample`].
#[derive(Clone, Debug)]
pub struct SubsampleOptions {
    /// Keep each sample with probability 1/factor (factor ≥ 1).
    pub factor: u64,
    /// Only allocations at or after this many seconds into the trace.
    pub start_s: i64,
    /// Only allocations before this many seconds into the trace.
    pub end_s: i64,
    /// Seed of the sample selection.
    pub seed: u64,
}

impl Default for SubsampleOptions {
    fn default() -> Self {
        SubsampleOptions {
            factor: 1,
            start_s: i64::MIN,
            end_s: i64::MAX,
            seed: 0x6d656d7472616365,
        }
    }
}

/// Writes a copy keeping each sample with probability 1/factor (ids renumbered,
/// sample rate divided). A factor of 1 over the whole trace copies it unchanged.
pub fn subsample<S: Source, W: Write>(
    reader: &mut Reader<S>,
    out: W,
    opts: &SubsampleOptions,
) -> Result<W> {
    let factor = opts.factor.max(1);
    let mut info = reader.info().clone();
    info.sample_rate /= factor as f64;
    let start = info.start_time;
    let mut w = Writer::new(out, &info)?;
    let mut rng = Rng::new(opts.seed);
    let mut remap: FxHashMap<u64, u64> = FxHashMap::default();
    while let Some(ev) = reader.next_event()? {
        let now = start.wrapping_add(ev.time);
        match ev.kind {
            EventKind::Alloc(a) => {
                let secs = ev.time / 1_000_000;
                if !(opts.start_s <= secs && secs < opts.end_s) {
                    continue;
                }
                let kept = if factor == 1 {
                    a.nsamples.max(0)
                } else if a.nsamples > 1_000_000 {
                    // Far beyond real traces; the expectation avoids a huge loop.
                    a.nsamples / factor as i64
                } else {
                    (0..a.nsamples).filter(|_| rng.below(factor) == 0).count() as i64
                };
                if kept == 0 {
                    continue;
                }
                let db = ev.db;
                let id = w.put_alloc(
                    now,
                    a.domain,
                    a.length,
                    kept,
                    a.source,
                    a.backtrace,
                    &mut |code| db.owned_locations(code),
                )?;
                remap.insert(a.obj_id, id);
            }
            EventKind::Promote { obj_id, domain } => {
                if let Some(&id) = remap.get(&obj_id) {
                    w.put_promote(now, domain, id)?;
                }
            }
            EventKind::Collect { obj_id, domain } => {
                if let Some(id) = remap.remove(&obj_id) {
                    w.put_collect(now, domain, id)?;
                }
            }
        }
    }
    w.finish()
}
