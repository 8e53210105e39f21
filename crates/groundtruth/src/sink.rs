//! A [`TraceSink`] that records what a stack writer emits and rebuilds, per thread, the
//! stack a trace viewer would show at every instant.
//!
//! Replay follows Perfetto's reading of a file: slices are sorted per track *stably*
//! by time (writers such as the legacy one emit inferred frames late, with earlier
//! times), a `duration_end` closes the innermost open slice whatever its name, and a
//! complete slice closes itself. Names lose a ` [inferred start time]` suffix;
//! instants (decode errors) and counters do not affect stacks.

use crate::names::{FrameId, Names, StackId, EMPTY};
use ptscope_event::Thread;
use ptscope_stacks::{Arg, ArgValue, TraceSink};

const INFERRED_SUFFIX: &str = " [inferred start time]";

/// What a writer emitted, with the name as a handle in the sink's own frame table (kept
/// in tests only, for the old replay; the sink keeps [`Op`]s).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
enum Rec {
    Begin {
        frame: FrameId,
        time: i64,
        inferred: bool,
    },
    End {
        time: i64,
    },
    Complete {
        frame: FrameId,
        start: i64,
        end: i64,
    },
}

/// One reconstructed slice (a frame instance) with its interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// Frame name (suffix stripped).
    pub name: String,
    /// Start time (ns, as the writer wrote it).
    pub start: i64,
    /// End time.
    pub end: i64,
    /// The writer marked the start as inferred.
    pub inferred: bool,
    /// Depth in the replayed stack when it was opened (0 = root).
    pub depth: usize,
}

/// A [`Slice`] with its name as a handle in a [`Names`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameSlice {
    /// Frame name's handle.
    pub frame: FrameId,
    /// Start time (ns, as the writer wrote it).
    pub start: i64,
    /// End time.
    pub end: i64,
    /// The writer marked the start as inferred.
    pub inferred: bool,
    /// Depth in the replayed stack when it was opened (0 = root).
    pub depth: u32,
}

impl FrameSlice {
    /// The slice with its name spelled out.
    pub fn resolve(&self, names: &Names) -> Slice {
        Slice {
            name: names.frame_name(self.frame).to_string(),
            start: self.start,
            end: self.end,
            inferred: self.inferred,
            depth: self.depth as usize,
        }
    }
}

/// What a writer showed for one thread: stack pieces and the slices behind them.
#[derive(Clone, Debug, Default)]
pub struct ReconThread {
    /// The thread, parsed from the group's `[pid=P]` and the track's `[tid=T]` names.
    pub thread: Thread,
    /// `(start, end, stack root first)` pieces of positive length; holes mean "no frame".
    pub timeline: Vec<(i64, i64, Vec<String>)>,
    /// Every frame instance, in closing order.
    pub slices: Vec<Slice>,
    /// `duration_end`s that found no open slice (a writer bug, or a mismatched late begin).
    pub unmatched_ends: u64,
}

/// [`ReconThread`] with interned stacks and names: what the scorer keeps per thread.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Recon {
    /// The thread, parsed from the group's `[pid=P]` and the track's `[tid=T]` names.
    pub thread: Thread,
    /// `(start, end, stack)` pieces of positive length; holes mean "no frame".
    pub timeline: Vec<(i64, i64, StackId)>,
    /// Every frame instance, in closing order.
    pub slices: Vec<FrameSlice>,
    /// `duration_end`s that found no open slice (a writer bug, or a mismatched late begin).
    pub unmatched_ends: u64,
}

impl Recon {
    /// `r` with its stacks and names interned in `names`.
    pub fn intern(r: &ReconThread, names: &mut Names) -> Self {
        Recon {
            thread: r.thread,
            timeline: r
                .timeline
                .iter()
                .map(|(a, b, s)| (*a, *b, names.stack(s)))
                .collect(),
            slices: r
                .slices
                .iter()
                .map(|s| FrameSlice {
                    frame: names.frame(&s.name),
                    start: s.start,
                    end: s.end,
                    inferred: s.inferred,
                    depth: s.depth as u32,
                })
                .collect(),
            unmatched_ends: r.unmatched_ends,
        }
    }

    /// The thread with its stacks and names spelled out.
    pub fn resolve(&self, names: &Names) -> ReconThread {
        ReconThread {
            thread: self.thread,
            timeline: self
                .timeline
                .iter()
                .map(|(a, b, s)| (*a, *b, names.names(*s)))
                .collect(),
            slices: self.slices.iter().map(|s| s.resolve(names)).collect(),
            unmatched_ends: self.unmatched_ends,
        }
    }

    /// Moves every time `t` to `(t + base) * scale` (writers' relative times back to the
    /// events' clock, and onto the scorer's grid).
    pub fn shift(&mut self, base: i64, scale: i64) {
        let f = |t: &mut i64| *t = (*t + base) * scale;
        for p in &mut self.timeline {
            f(&mut p.0);
            f(&mut p.1);
        }
        for s in &mut self.slices {
            f(&mut s.start);
            f(&mut s.end);
        }
    }
}

/// One track: its group, its name, and what the writer did on it as replay operations.
#[derive(Clone, Debug, Default)]
struct Track {
    group: u32,
    name: String,
    /// `(time, operation)` in arrival order: the replay sorts them stably by time.
    ops: Vec<(i64, Op)>,
    /// Records so far (a record's index identifies its slice).
    records: u32,
    #[cfg(test)]
    recs: Vec<Rec>,
}

impl Track {
    fn is_thread(&self) -> bool {
        self.name == "main" || self.name.contains("[tid=")
    }

    /// The next record's id.
    fn next_id(&mut self) -> u32 {
        self.records += 1;
        self.records - 1
    }
}

/// Records begin/end/complete slices per thread track.
///
/// A writer's calls are kept as the replay's operations (24 bytes each; a complete slice
/// makes two), so a 20 M-event recording's stacks fit in a few hundred megabytes.
#[derive(Default, Debug, Clone)]
pub struct TimelineSink {
    groups: Vec<String>,
    tracks: Vec<Track>,
    /// The records' frame names (only frames: stacks are built at replay).
    frames: Names,
    /// Warnings the writer printed (kept quiet; counted for the report).
    pub warnings: Vec<String>,
}

/// Parses `… [pid=P]` or `… [pid=P] [tid=T]`; a missing tid means tid == pid.
fn parse_thread(name: &str) -> Option<Thread> {
    let field = |key: &str| -> Option<Option<u32>> {
        let at = name.find(key)? + key.len();
        let rest = &name[at..];
        let end = rest.find(']')?;
        Some(rest[..end].parse().ok())
    };
    let pid = field("[pid=")?;
    let tid = field("[tid=").unwrap_or(pid);
    Some(Thread { pid, tid })
}

impl TimelineSink {
    /// A sink with nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The replayed stacks of every thread track (`… [tid=T]`, or magic-trace's `main`)
    /// of a `[pid=…]` group, spelled out.
    pub fn threads(self) -> Vec<ReconThread> {
        let mut names = Names::new();
        let recon = self.into_recon(&mut names);
        recon.iter().map(|r| r.resolve(&names)).collect()
    }

    /// [`TimelineSink::threads`] with stacks and names interned in `names` (which can
    /// already hold the truth's, or another writer's). Each track's operations are freed
    /// once replayed.
    pub fn into_recon(self, names: &mut Names) -> Vec<Recon> {
        let map: Vec<FrameId> = (0..self.frames.frame_count())
            .map(|f| names.frame(self.frames.frame_name(f as FrameId)))
            .collect();
        let groups = self.groups;
        self.tracks
            .into_iter()
            .filter(Track::is_thread)
            .filter_map(|t| {
                let group = groups.get(t.group as usize)?;
                let thread = parse_thread(&format!("{group} {}", t.name))?;
                let mut r = replay(t.ops, &map, names);
                r.thread = thread;
                Some(r)
            })
            .collect()
    }
}

/// What a record does to the replayed stack, at its time.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// A slice begins (a complete slice's id is its record's, to close it by).
    Open {
        frame: FrameId,
        inferred: bool,
        id: u32,
    },
    /// `duration_end`: the innermost open slice ends, whatever its name.
    CloseTop,
    /// A complete slice ends.
    CloseId(u32),
}

/// A slice open during replay, with the stack it tops.
struct Open {
    frame: FrameId,
    start: i64,
    inferred: bool,
    id: u32,
    node: StackId,
}

/// Replays one track's operations; `map` takes the sink's frame handles to `names`'.
fn replay(mut ops: Vec<(i64, Op)>, map: &[FrameId], names: &mut Names) -> Recon {
    let global = |f: FrameId| map.get(f as usize).copied().unwrap_or(f);
    // Stable: ties keep arrival order, as a viewer's stable sort does.
    ops.sort_by_key(|(t, _)| *t);

    let mut out = Recon::default();
    let mut stack: Vec<Open> = Vec::new();
    let close = |out: &mut Recon, e: Open, depth: usize, t: i64| {
        out.slices.push(FrameSlice {
            frame: e.frame,
            start: e.start,
            end: t,
            inferred: e.inferred,
            depth: depth as u32,
        });
    };
    let mut i = 0;
    while i < ops.len() {
        let t = ops[i].0;
        while i < ops.len() && ops[i].0 == t {
            match ops[i].1 {
                Op::Open {
                    frame,
                    inferred,
                    id,
                } => {
                    let frame = global(frame);
                    let under = stack.last().map_or(EMPTY, |e| e.node);
                    stack.push(Open {
                        frame,
                        start: t,
                        inferred,
                        id,
                        node: names.push(under, frame),
                    })
                }
                Op::CloseTop => match stack.pop() {
                    Some(e) => close(&mut out, e, stack.len(), t),
                    None => out.unmatched_ends += 1,
                },
                Op::CloseId(id) => {
                    if let Some(pos) = stack.iter().rposition(|e| e.id == id) {
                        let e = stack.remove(pos);
                        close(&mut out, e, pos, t);
                        // The slices above it now sit one level lower.
                        let mut under = pos.checked_sub(1).map_or(EMPTY, |p| stack[p].node);
                        for e in &mut stack[pos..] {
                            e.node = names.push(under, e.frame);
                            under = e.node;
                        }
                    }
                }
            }
            i += 1;
        }
        if let Some(&(next, _)) = ops.get(i) {
            if let (true, Some(top)) = (next > t, stack.last()) {
                match out.timeline.last_mut() {
                    Some(last) if last.1 == t && last.2 == top.node => last.1 = next,
                    _ => out.timeline.push((t, next, top.node)),
                }
            }
        }
    }
    let end = ops.last().map_or(0, |o| o.0);
    while let Some(e) = stack.pop() {
        let depth = stack.len();
        close(&mut out, e, depth, end);
    }
    out
}

#[cfg(test)]
impl TimelineSink {
    /// Every thread track's records with names spelled out, for the old replay
    /// ([`crate::oracle::replay`]) to check the interned one against.
    pub(crate) fn spelled_records(&self) -> Vec<(Thread, Vec<crate::oracle::Rec>)> {
        use crate::oracle::Rec as Old;
        let name = |f: FrameId| self.frames.frame_name(f).to_string();
        self.tracks
            .iter()
            .filter(|t| t.is_thread())
            .filter_map(|t| {
                let group = self.groups.get(t.group as usize)?;
                let thread = parse_thread(&format!("{group} {}", t.name))?;
                let recs = t
                    .recs
                    .iter()
                    .map(|r| match *r {
                        Rec::Begin {
                            frame,
                            time,
                            inferred,
                        } => Old::Begin {
                            name: name(frame),
                            time,
                            inferred,
                        },
                        Rec::End { time } => Old::End { time },
                        Rec::Complete { frame, start, end } => Old::Complete {
                            name: name(frame),
                            start,
                            end,
                        },
                    })
                    .collect();
                Some((thread, recs))
            })
            .collect()
    }
}

impl TraceSink for TimelineSink {
    type Thread = usize;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.groups.push(name.to_string());
        (self.groups.len() - 1) as u32
    }

    fn allocate_thread(&mut self, pid: u32, name: &str) -> usize {
        self.tracks.push(Track {
            group: pid,
            name: name.to_string(),
            ..Track::default()
        });
        self.tracks.len() - 1
    }

    fn duration_begin(&mut self, thread: usize, name: &str, time: i64, args: &[Arg<'_>]) {
        let suffixed = name.strip_suffix(INFERRED_SUFFIX);
        let flagged = args.iter().any(|a| {
            a.name == "inferred_start_time"
                && matches!(a.value, ArgValue::Interned("true") | ArgValue::Str("true"))
        });
        let frame = self.frames.frame(suffixed.unwrap_or(name));
        let inferred = suffixed.is_some() || flagged;
        let t = &mut self.tracks[thread];
        let id = t.next_id();
        t.ops.push((
            time,
            Op::Open {
                frame,
                inferred,
                id,
            },
        ));
        #[cfg(test)]
        t.recs.push(Rec::Begin {
            frame,
            time,
            inferred,
        });
    }

    fn duration_end(&mut self, thread: usize, _name: &str, time: i64, _args: &[Arg<'_>]) {
        let t = &mut self.tracks[thread];
        t.next_id();
        t.ops.push((time, Op::CloseTop));
        #[cfg(test)]
        t.recs.push(Rec::End { time });
    }

    fn duration_complete(
        &mut self,
        thread: usize,
        name: &str,
        start: i64,
        end: i64,
        _args: &[Arg<'_>],
    ) {
        let name = name.strip_suffix(INFERRED_SUFFIX).unwrap_or(name);
        let frame = self.frames.frame(name);
        let t = &mut self.tracks[thread];
        let id = t.next_id();
        t.ops.push((
            start,
            Op::Open {
                frame,
                inferred: false,
                id,
            },
        ));
        t.ops.push((end.max(start), Op::CloseId(id)));
        #[cfg(test)]
        t.recs.push(Rec::Complete { frame, start, end });
    }

    fn duration_instant(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}

    fn counter(&mut self, _: usize, _: &str, _: i64, _: &[Arg<'_>]) {}

    fn warning(&mut self, message: &str) {
        self.warnings.push(message.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn late_inferred_begin_nests_per_stable_sort_and_names_are_stripped() {
        let mut s = TimelineSink::new();
        let g = s.allocate_pid("prog [pid=5]");
        let t = s.allocate_thread(g, "worker [tid=6]");
        s.duration_begin(t, "inner", 0, &[]);
        s.duration_end(t, "inner", 10, &[]);
        s.duration_begin(t, "outer [inferred start time]", 0, &[]);
        s.duration_end(t, "outer", 20, &[]);
        s.duration_complete(t, "[unknown]", 12, 15, &[]);
        let th = &s.threads()[0];
        assert_eq!(
            th.thread,
            Thread {
                pid: Some(5),
                tid: Some(6)
            }
        );
        // The late begin at the same time sorts after `inner`: a viewer nests it inside.
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            th.timeline,
            vec![
                (0, 10, v(&["inner", "outer"])),
                (10, 12, v(&["inner"])),
                (12, 15, v(&["inner", "[unknown]"])),
                (15, 20, v(&["inner"]))
            ]
        );
        assert_eq!(th.slices.iter().filter(|s| s.inferred).count(), 1);
        assert_eq!(
            parse_thread("cmd [pid=7]"),
            Some(Thread {
                pid: Some(7),
                tid: Some(7)
            })
        );
    }
}
