//! The decoding thread: every input opened in turn, its events named and sent in
//! batches to the writer's thread, so parsing overlaps stack reconstruction and output.

use crate::inputs::InputSpec;
use crate::DecoderKind;
use crate::Observer;
use ptscope_decode::{Stats, Warning};
use ptscope_event::source::{TableDelta, TableMap, TableSent};
use ptscope_event::{Event, SourceInfo, StringTable, TraceScope};
use std::path::PathBuf;

/// What the decoding thread sends: names and stacks new since the last message (so
/// the writer's table mirrors the decoder's, same ids), and events or an end of input.
pub(crate) enum Msg {
    /// An input was opened: what its source says about it (before its events).
    Opened(SourceInfo),
    Batch {
        new: TableDelta,
        events: Vec<Event>,
    },
    /// One input is done (a snapshot boundary).
    Done {
        stats: Stats,
        warnings: Vec<Warning>,
        errors: Vec<String>,
        /// What the decoder wants said (a fallback to text, hidden JIT names).
        notices: Vec<String>,
        /// Instants for the trace's own info track (`(time from the trace's start,
        /// text)`): an emulate trace's clock, its execs.
        markers: Vec<(u64, String)>,
        /// How each process started its program (`Namer::process_starts`), interned
        /// in the table the batches sent so far carry.
        entries: Vec<(u32, ptscope_event::ProcessStart)>,
    },
}

impl Msg {
    /// An input that failed before giving any event.
    fn failed(error: String) -> Msg {
        Msg::Done {
            stats: Stats::default(),
            warnings: Vec::new(),
            errors: vec![error],
            notices: Vec::new(),
            markers: Vec::new(),
            entries: Vec::new(),
        }
    }
}

/// Events per message: large enough to amortise the channel, small enough to overlap.
const BATCH: usize = 4096;

/// How the decoding thread reads and names.
pub(crate) struct Reading {
    pub perf: PathBuf,
    pub decoder: DecoderKind,
    /// Sampled frames get no frames for the calls inlined in them.
    pub no_inline: bool,
    /// perf expands inlined calls (its `addr2line` lookup), not the naming step.
    pub perf_inline: bool,
    /// Names from this machine's files (not for transcripts, which stay magic-trace's).
    pub naming: bool,
    /// The scope asked for (else each recording's own).
    pub scope: Option<TraceScope>,
}

/// Decodes every input in turn, sending what it decoded to `tx`.
pub(crate) fn decode_inputs(
    specs: Vec<InputSpec>,
    reading: Reading,
    observer: &dyn Observer,
    tx: std::sync::mpsc::SyncSender<Msg>,
) {
    let Reading {
        perf,
        decoder,
        no_inline,
        perf_inline,
        naming,
        scope,
    } = reading;
    // One table for the whole run, each source's names moved into it: the writer's
    // mirrors it, and the naming step's caches are keyed by its handles.
    let mut strings = StringTable::new();
    // One for the whole run: its caches and counts span the snapshots.
    let mut namer = ptscope_symbols::Namer::new(naming, naming);
    namer.set_inline(naming && !no_inline && !perf_inline);
    let last = specs.len().saturating_sub(1);
    let mut sent = TableSent::default();
    let flush = |strings: &StringTable, sent: &mut TableSent, events: Vec<Event>| Msg::Batch {
        new: TableDelta::since(strings, sent),
        events,
    };
    // Summed over the inputs: a rotated recording is several files.
    let mut lost = ptscope_symbols::Lost::default();
    for (index, spec) in specs.into_iter().enumerate() {
        // Said once, with the whole run's counts.
        let cut_notice = |namer: &ptscope_symbols::Namer, lost: &ptscope_symbols::Lost| {
            if index == last {
                namer
                    .cut_notice()
                    .into_iter()
                    .chain(lost_notice(lost))
                    .collect()
            } else {
                Vec::new()
            }
        };
        if observer.stopped() {
            break;
        }
        // A perf.data cut short: perf refuses records cut short, and may crash on a file
        // whose last sections are missing; the error says what is wrong with the file.
        let cut = match &spec {
            InputSpec::PerfData(p) => ptscope_decode::header::read_header(p)
                .ok()
                .and_then(|h| h.cut_short),
            _ => None,
        };
        let cut_short = |c| {
            format!(
                "{} is cut short: {c} (a copy that stopped early, a full disk, or perf killed \
                 while writing it)",
                spec.name()
            )
        };
        let cut_said = |e: String| match cut {
            Some(c) => format!(
                "{}, and perf failed on it: {e}. Record again, or decode the whole file",
                cut_short(c)
            ),
            None => e,
        };
        if let Some(c @ ptscope_decode::header::CutShort::Records { .. }) = cut {
            let e = format!(
                "{}. perf cannot read such a file: record again, or decode the whole file",
                cut_short(c)
            );
            if tx.send(Msg::failed(e)).is_err() {
                return;
            }
            continue;
        }
        // perf script text says why perf failed on such a file; the dlfilter may not get
        // to say anything.
        let decoder = if cut.is_some() {
            DecoderKind::Text
        } else {
            decoder
        };
        let mut source = match spec.open(&perf, (decoder, perf_inline), observer) {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Msg::failed(cut_said(crate::error_text(&e))));
                continue;
            }
        };
        // The source says what it is: the recording its addresses belong to (names come
        // from this machine's files only for its own recordings: perf script text may
        // come from elsewhere; branches need the mappings to be named), the scope it was
        // recorded with, how its times read.
        let info = source.info();
        let maps = info
            .recording
            .as_deref()
            .and_then(|p| ptscope_symbols::Mappings::read(p).ok());
        if let Some(m) = &maps {
            lost.add(m.lost());
        }
        namer.set_mappings(maps.filter(|_| naming));
        // A user-space trace shows a sample's time in the kernel as one `[kernel: …]` frame.
        let scope = scope.or(info.scope).unwrap_or_default();
        namer.set_fold_kernel(naming && scope == TraceScope::Userspace);
        // A perf asked to stop writes out what it decoded: its output is read to its
        // end. Other sources (ptscope's own Intel PT decoder included) stop at once.
        let drain = info.drain_after_stop;
        if tx.send(Msg::Opened(info)).is_err() {
            return;
        }
        let size = source.size();
        observer.started(&spec.name(), size);
        let mut map = TableMap::default();
        let mut errors = Vec::new();
        let mut batch = Vec::with_capacity(BATCH);
        let mut n = 0u64;
        loop {
            if observer.stopped() && !drain {
                break;
            }
            // A batch at a time (a source may fill it in one call); a stop is seen
            // between batches, a few thousand cheap events apart.
            let from = batch.len();
            let more = source.next_events(&mut batch, BATCH - from);
            // The source's table only grows: one sync covers the batch's names.
            map.sync(source.strings(), &mut strings);
            for e in &mut batch[from..] {
                map.rewrite(e);
                namer.apply(e, &mut strings);
            }
            let more = match more {
                Ok(more) => more,
                Err(e) => {
                    errors.push(format!(
                        "{}: {e} (keeping the events decoded before it)",
                        spec.name()
                    ));
                    false
                }
            };
            if !more {
                break;
            }
            if batch.len() == BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if tx.send(flush(&strings, &mut sent, full)).is_err() {
                    return;
                }
                n += BATCH as u64;
                match size {
                    Some(_) => observer.advanced(source.stats().bytes),
                    None => observer.advanced(n),
                }
            }
        }
        // The processes' entries are interned last: the final batch carries them.
        let entries = namer.process_starts(&mut strings);
        if (!batch.is_empty() || !entries.is_empty())
            && tx.send(flush(&strings, &mut sent, batch)).is_err()
        {
            return;
        }
        observer.finished();
        let stats = source.stats();
        let warnings = source.warnings();
        let end = source.finish();
        if let Some(e) = end.failure {
            errors.push(format!("{e} (keeping the events decoded before it)"));
        }
        if cut.is_some() {
            errors = errors.into_iter().map(cut_said).collect();
        }
        errors.extend(end.incomplete);
        let mut notices = end.notices;
        notices.extend(cut_notice(&namer, &lost));
        if tx
            .send(Msg::Done {
                stats,
                warnings,
                errors,
                notices,
                markers: end.markers,
                entries,
            })
            .is_err()
        {
            return;
        }
    }
}

/// What to tell the user when perf dropped records while recording: the trace has holes
/// that nothing in it shows, and the cause is on the recording side.
fn lost_notice(lost: &ptscope_symbols::Lost) -> Option<String> {
    if !lost.any() {
        return None;
    }
    let what = match (lost.samples, lost.records) {
        (0, r) => format!("{r} records in {} stretches", lost.stretches),
        (s, 0) => format!("{s} samples"),
        (s, r) => format!("{s} samples ({r} records in {} stretches)", lost.stretches),
    };
    Some(format!(
        "perf dropped {what} while recording, because it could not write them out as fast \
         as they came (a busy machine, or heavy samples): the trace has gaps there, and \
         what happened last (a thread's exit, say) may be among them. A lower \
         --timer-resolution, --callgraph fp, or a less loaded machine avoids it"
    ))
}
