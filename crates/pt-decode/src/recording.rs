//! What an Intel PT perf.data holds, as the decode needs it: the trace settings, each
//! AUX area's trace (a queue: one per thread or one per CPU), and the side band —
//! threads, processes and their execs, mappings, context switches — turned into the
//! timeline of which thread runs in which address space.

use crate::image::{Image, Lookup, Map, Space, NO_FILE};
use crate::Error;
use ptscope_intel_pt::decoder::Config;
use ptscope_intel_pt::time::TimeConfig;
use ptscope_perf_data::intel_pt::{IntelPtInfo, TraceConfig};
use ptscope_perf_data::records::aux_flags;
use ptscope_perf_data::{BuildId, PerfData, Record, TimeConv};
use rustc_hash::FxHashMap;
use std::ops::Range;

/// One piece of an AUX area's trace: a range of the perf.data file.
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub(crate) range: Range<usize>,
    pub(crate) offset: u64,
    pub(crate) reference: u64,
}

/// A stretch of trace decoded as one: a snapshot, or consecutive pieces of a full trace.
#[derive(Clone, Debug)]
pub(crate) struct Stream {
    pub(crate) pieces: Vec<Piece>,
    /// Data was lost before it (a full trace whose buffer overflowed).
    pub(crate) lost_before: bool,
}

/// One AUX area.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    pub(crate) streams: Vec<Stream>,
    /// `(TSC, context)`, sorted.
    pub(crate) timeline: Vec<(u64, u32)>,
}

/// A thread-naming record, for the events' side band.
#[derive(Clone, Debug)]
pub(crate) enum Task {
    Comm { name: Box<[u8]>, exec: bool },
    Fork { ppid: u32, ptid: u32 },
}

/// A side-band event at perf time `time` on `(pid, tid)`.
#[derive(Clone, Debug)]
pub(crate) struct TaskAt {
    pub(crate) time: u64,
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) task: Task,
}

/// Everything read from the file.
pub(crate) struct Recording {
    pub(crate) info: IntelPtInfo,
    pub(crate) trace: TraceConfig,
    pub(crate) time: TimeConv,
    pub(crate) queues: Vec<Queue>,
    pub(crate) space: Space,
    pub(crate) tasks: Vec<TaskAt>,
    /// AUX records with the TRUNCATED or COLLISION flag.
    pub(crate) aux_lost: u64,
    /// A record could not be read: the side band ends there.
    pub(crate) corrupt: Option<String>,
}

impl Recording {
    /// The decoder's settings.
    pub(crate) fn config(&self) -> Config {
        Config {
            return_compression: self.trace.return_compression,
            cyc: self.trace.cyc,
            time: TimeConfig {
                mtc_period: self.trace.mtc_period,
                tsc_ctc: self.info.tsc_ctc,
                nonturbo_ratio: self.info.max_nonturbo_ratio,
            },
            ..Config::default()
        }
    }
}

/// A queue's CPU, thread and pieces (each with: data was lost before it).
type QueuePieces = (Option<u32>, Option<u32>, Vec<(Piece, bool)>);

/// A side-band record, kept for the second pass (in time order).
enum Side<'a> {
    Mmap {
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &'a [u8],
        build_id: Option<BuildId>,
    },
    Comm {
        pid: u32,
        tid: u32,
        name: &'a [u8],
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
    },
    /// `(cpu, pid, tid)` runs from now on.
    Runs { cpu: u32, pid: u32, tid: u32 },
}

/// Reads `data` (an Intel PT recording).
pub(crate) fn read(data: &PerfData, lookup: &Lookup<'_>) -> Result<Recording, Error> {
    let big = data.endian() == ptscope_perf_data::Endian::Big;
    let mut info = None;
    let mut time_conv: Option<TimeConv> = None;
    let mut side: Vec<(u64, usize, Side<'_>)> = Vec::new();
    let mut pieces: FxHashMap<u32, QueuePieces> = FxHashMap::default();
    let mut aux_lost = 0;
    let mut corrupt = None;
    let mut truncated_aux: FxHashMap<u32, bool> = FxHashMap::default();
    for (n, r) in data.records().enumerate() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                corrupt = Some(e.to_string());
                break;
            }
        };
        let t = r.sample.time.unwrap_or(0);
        match r.record {
            Record::AuxtraceInfo(i) if info.is_none() => info = IntelPtInfo::parse(&i, big),
            Record::TimeConv(tc) => time_conv = Some(tc),
            Record::Auxtrace(a) => {
                let start = a.data.as_ptr() as usize - data.bytes().as_ptr() as usize;
                let cpu = (a.cpu != u32::MAX).then_some(a.cpu);
                let tid = (a.tid != u32::MAX).then_some(a.tid);
                let lost = truncated_aux.remove(&a.idx).unwrap_or(false);
                let e = pieces.entry(a.idx).or_insert((cpu, tid, Vec::new()));
                e.2.push((
                    Piece {
                        range: start..start + a.data.len(),
                        offset: a.offset,
                        reference: a.reference,
                    },
                    lost,
                ));
            }
            Record::Aux(a) if a.flags & (aux_flags::TRUNCATED | aux_flags::COLLISION) != 0 => {
                aux_lost += 1;
                if let Some(cpu) = r.sample.cpu {
                    truncated_aux.insert(cpu, true);
                }
            }
            Record::Mmap(m) if m.exec && !m.kernel => side.push((
                t,
                n,
                Side::Mmap {
                    pid: m.pid,
                    start: m.start,
                    len: m.len,
                    pgoff: m.pgoff,
                    path: m.path,
                    build_id: m.build_id,
                },
            )),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
            } => side.push((
                t,
                n,
                Side::Comm {
                    pid,
                    tid,
                    name,
                    exec,
                },
            )),
            Record::Fork(f) => side.push((
                t.max(f.time),
                n,
                Side::Fork {
                    pid: f.pid,
                    ppid: f.ppid,
                    tid: f.tid,
                    ptid: f.ptid,
                },
            )),
            Record::Switch(s) => {
                let (Some(cpu), Some(pid), Some(tid)) = (r.sample.cpu, r.sample.pid, r.sample.tid)
                else {
                    continue;
                };
                let runs = match (s.out, s.other) {
                    (true, Some((p, t))) => Some((p, t)),
                    (true, None) => None,
                    (false, _) => Some((pid, tid)),
                };
                if let Some((pid, tid)) = runs {
                    side.push((t, n, Side::Runs { cpu, pid, tid }));
                }
            }
            Record::ItraceStart { pid, tid } => {
                if let Some(cpu) = r.sample.cpu {
                    side.push((t, n, Side::Runs { cpu, pid, tid }));
                }
            }
            _ => {}
        }
    }
    let mut info = info.ok_or(Error::NotIntelPt)?;
    if let Some(tc) = time_conv {
        // TIME_CONV is newer and says more (a short TSC).
        if tc.mult != 0 {
            info.time = tc;
        }
    }
    let attr = data
        .attributes()
        .iter()
        .find(|a| a.pmu_type == info.pmu_type)
        .ok_or(Error::NotIntelPt)?;
    if !attr.exclude_kernel {
        return Err(Error::KernelTrace);
    }
    let trace = info.trace_config(attr.config);
    let tsc_of = |ns: u64| info.time.ns_to_tsc(ns);

    // Side band in time order (file order between equals).
    side.sort_by_key(|&(t, n, _)| (t, n));
    let recorded_ids: FxHashMap<Vec<u8>, BuildId> = data.build_ids().into_iter().collect();
    let mut space = Space::default();
    // pid → (TSC from which, image) history; tid → pid.
    let mut image_of: FxHashMap<u32, Vec<(u64, u32)>> = FxHashMap::default();
    let mut pid_of: FxHashMap<u32, u32> = FxHashMap::default();
    let mut runs: FxHashMap<u32, Vec<(u64, u32, u32)>> = FxHashMap::default();
    let mut tasks = Vec::new();
    let mut execs: Vec<(u64, u32)> = Vec::new();
    let new_image = |space: &mut Space, _pid: u32, maps: Vec<Map>| {
        space.images.push(Image { maps });
        (space.images.len() - 1) as u32
    };
    for (t, _, s) in side {
        let tsc = tsc_of(t);
        match s {
            Side::Mmap {
                pid,
                start,
                len,
                pgoff,
                path,
                build_id,
            } => {
                let recorded = build_id.or_else(|| recorded_ids.get(path).copied());
                let file = if path.first() == Some(&b'/') || path == b"[vdso]" {
                    space.file(path, recorded, lookup)
                } else {
                    NO_FILE
                };
                let hist = image_of.entry(pid).or_default();
                let img = match hist.last() {
                    Some(&(_, i)) => i,
                    None => {
                        let i = new_image(&mut space, pid, Vec::new());
                        hist.push((0, i));
                        i
                    }
                };
                space.images[img as usize].maps.push(Map {
                    start,
                    end: start.saturating_add(len),
                    pgoff,
                    file,
                });
            }
            Side::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                pid_of.insert(tid, pid);
                if exec {
                    let i = new_image(&mut space, pid, Vec::new());
                    image_of.entry(pid).or_default().push((tsc, i));
                    execs.push((tsc, pid));
                }
                tasks.push(TaskAt {
                    time: t,
                    pid,
                    tid,
                    task: Task::Comm {
                        name: name.into(),
                        exec,
                    },
                });
            }
            Side::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => {
                pid_of.insert(tid, pid);
                if pid != ppid && !image_of.contains_key(&pid) {
                    // A new process starts with a copy of its parent's mappings.
                    let maps = image_of
                        .get(&ppid)
                        .and_then(|h| h.last())
                        .map(|&(_, i)| space.images[i as usize].maps.clone())
                        .unwrap_or_default();
                    let i = new_image(&mut space, pid, maps);
                    image_of.entry(pid).or_default().push((tsc, i));
                }
                tasks.push(TaskAt {
                    time: t,
                    pid,
                    tid,
                    task: Task::Fork { ppid, ptid },
                });
            }
            Side::Runs { cpu, pid, tid } => {
                pid_of.insert(tid, pid);
                runs.entry(cpu).or_default().push((tsc, pid, tid));
            }
        }
    }
    // The image a pid runs at TSC `t`.
    let image_at =
        |space: &mut Space, image_of: &mut FxHashMap<u32, Vec<(u64, u32)>>, pid: u32, t: u64| {
            let hist = image_of.entry(pid).or_default();
            if hist.is_empty() {
                space.images.push(Image { maps: Vec::new() });
                hist.push((0, (space.images.len() - 1) as u32));
            }
            let i = hist.partition_point(|&(at, _)| at <= t);
            hist[i.saturating_sub(1)].1
        };
    let mut queues = Vec::new();
    let mut idxs: Vec<u32> = pieces.keys().copied().collect();
    idxs.sort_unstable();
    for idx in idxs {
        let Some((cpu, tid, ps)) = pieces.remove(&idx) else {
            continue;
        };
        let streams = streams_of(ps, info.snapshot);
        let mut timeline = Vec::new();
        match (tid, cpu) {
            (Some(tid), _) => {
                let pid = pid_of.get(&tid).copied().unwrap_or(tid);
                let mut points: Vec<u64> = vec![0];
                points.extend(image_of.get(&pid).into_iter().flatten().map(|&(t, _)| t));
                points.sort_unstable();
                points.dedup();
                for t in points {
                    let img = image_at(&mut space, &mut image_of, pid, t);
                    let c = space.context(pid, tid, img);
                    if timeline.last().map(|&(_, l)| l) != Some(c) {
                        timeline.push((t, c));
                    }
                }
            }
            (None, Some(cpu)) => {
                let mut entries: Vec<(u64, u32, u32)> = runs.get(&cpu).cloned().unwrap_or_default();
                // An exec changes the image of whoever runs it, without a switch.
                let mut with_execs: Vec<(u64, Option<(u32, u32)>)> = entries
                    .drain(..)
                    .map(|(t, p, tid)| (t, Some((p, tid))))
                    .collect();
                with_execs.extend(execs.iter().map(|&(t, _)| (t, None)));
                with_execs.sort_by_key(|e| e.0);
                let mut current: Option<(u32, u32)> = None;
                for (t, who) in with_execs {
                    if let Some(w) = who {
                        current = Some(w);
                    }
                    let Some((pid, tid)) = current else { continue };
                    let img = image_at(&mut space, &mut image_of, pid, t);
                    let c = space.context(pid, tid, img);
                    if timeline.last().map(|&(_, l)| l) != Some(c) {
                        timeline.push((t, c));
                    }
                }
            }
            (None, None) => {}
        }
        if timeline.is_empty() {
            // Nothing says who ran: one context without code.
            let img = image_at(&mut space, &mut image_of, 0, 0);
            let c = space.context(0, 0, img);
            timeline.push((0, c));
        }
        queues.push(Queue { streams, timeline });
    }
    Ok(Recording {
        time: info.time,
        info,
        trace,
        queues,
        space,
        tasks,
        aux_lost,
        corrupt,
    })
}

/// Groups a queue's pieces into streams: in a snapshot recording each piece is a
/// snapshot of its own; in a full trace consecutive pieces continue each other unless
/// data was lost between them.
fn streams_of(ps: Vec<(Piece, bool)>, snapshot: bool) -> Vec<Stream> {
    let mut out: Vec<Stream> = Vec::new();
    let mut end = None;
    for (p, lost) in ps {
        let continues = !snapshot && !lost && end == Some(p.offset);
        end = Some(p.offset + (p.range.end - p.range.start) as u64);
        match out.last_mut() {
            Some(s) if continues => s.pieces.push(p),
            _ => out.push(Stream {
                pieces: vec![p],
                lost_before: lost,
            }),
        }
    }
    out
}
