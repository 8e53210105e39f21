//! A [`TraceSink`] that records what a stack writer emits and rebuilds, per thread, the
//! stack a trace viewer would show at every instant.
//!
//! Replay follows Perfetto's reading of a file: slices are sorted per track *stably*
//! by time (writers such as the legacy one emit inferred frames late, with earlier
//! times), a `duration_end` closes the innermost open slice whatever its name, and a
//! complete slice closes itself. Names lose a ` [inferred start time]` suffix;
//! instants (decode errors) and counters do not affect stacks.

use ptscope_event::Thread;
use ptscope_stacks::{Arg, ArgValue, TraceSink};

const INFERRED_SUFFIX: &str = " [inferred start time]";

#[derive(Clone, Debug)]
enum Rec {
    Begin {
        name: String,
        time: i64,
        inferred: bool,
    },
    End {
        time: i64,
    },
    Complete {
        name: String,
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

/// Records begin/end/complete slices per thread track.
#[derive(Default, Debug)]
pub struct TimelineSink {
    groups: Vec<String>,
    /// `(group, track name, records)`.
    tracks: Vec<(u32, String, Vec<Rec>)>,
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
    /// of a `[pid=…]` group.
    pub fn threads(&self) -> Vec<ReconThread> {
        self.tracks
            .iter()
            .filter(|(_, name, _)| name == "main" || name.contains("[tid="))
            .filter_map(|(g, name, recs)| {
                let group = self.groups.get(*g as usize)?;
                let thread = parse_thread(&format!("{group} {name}"))?;
                let mut r = replay(recs);
                r.thread = thread;
                Some(r)
            })
            .collect()
    }
}

enum Op<'a> {
    Open {
        name: &'a str,
        inferred: bool,
        id: usize,
    },
    CloseTop,
    CloseId(usize),
}

fn replay(recs: &[Rec]) -> ReconThread {
    let mut ops: Vec<(i64, Op<'_>)> = Vec::with_capacity(recs.len() + 16);
    for (id, r) in recs.iter().enumerate() {
        match r {
            Rec::Begin {
                name,
                time,
                inferred,
            } => ops.push((
                *time,
                Op::Open {
                    name,
                    inferred: *inferred,
                    id,
                },
            )),
            Rec::End { time } => ops.push((*time, Op::CloseTop)),
            Rec::Complete { name, start, end } => {
                ops.push((
                    *start,
                    Op::Open {
                        name,
                        inferred: false,
                        id,
                    },
                ));
                ops.push((*end.max(start), Op::CloseId(id)));
            }
        }
    }
    // Stable: ties keep arrival order, as a viewer's stable sort does.
    ops.sort_by_key(|(t, _)| *t);

    let mut out = ReconThread::default();
    // (name, start, inferred, id)
    let mut stack: Vec<(&str, i64, bool, usize)> = Vec::new();
    let close = |out: &mut ReconThread, e: (&str, i64, bool, usize), depth: usize, t: i64| {
        out.slices.push(Slice {
            name: e.0.to_string(),
            start: e.1,
            end: t,
            inferred: e.2,
            depth,
        });
    };
    let mut i = 0;
    while i < ops.len() {
        let t = ops[i].0;
        while i < ops.len() && ops[i].0 == t {
            match &ops[i].1 {
                Op::Open { name, inferred, id } => stack.push((name, t, *inferred, *id)),
                Op::CloseTop => match stack.pop() {
                    Some(e) => close(&mut out, e, stack.len(), t),
                    None => out.unmatched_ends += 1,
                },
                Op::CloseId(id) => {
                    if let Some(pos) = stack.iter().rposition(|e| e.3 == *id) {
                        let e = stack.remove(pos);
                        close(&mut out, e, pos, t);
                    }
                }
            }
            i += 1;
        }
        if let Some(&(next, _)) = ops.get(i) {
            if next > t && !stack.is_empty() {
                let names: Vec<String> = stack.iter().map(|e| e.0.to_string()).collect();
                match out.timeline.last_mut() {
                    Some(last) if last.1 == t && last.2 == names => last.1 = next,
                    _ => out.timeline.push((t, next, names)),
                }
            }
        }
    }
    let end = ops.last().map_or(0, |o| o.0);
    while let Some(e) = stack.pop() {
        close(&mut out, e, stack.len(), end);
    }
    out
}

impl TraceSink for TimelineSink {
    type Thread = usize;

    fn allocate_pid(&mut self, name: &str) -> u32 {
        self.groups.push(name.to_string());
        (self.groups.len() - 1) as u32
    }

    fn allocate_thread(&mut self, pid: u32, name: &str) -> usize {
        self.tracks.push((pid, name.to_string(), Vec::new()));
        self.tracks.len() - 1
    }

    fn duration_begin(&mut self, thread: usize, name: &str, time: i64, args: &[Arg<'_>]) {
        let suffixed = name.strip_suffix(INFERRED_SUFFIX);
        let flagged = args.iter().any(|a| {
            a.name == "inferred_start_time"
                && matches!(a.value, ArgValue::Interned("true") | ArgValue::Str("true"))
        });
        self.tracks[thread].2.push(Rec::Begin {
            name: suffixed.unwrap_or(name).to_string(),
            time,
            inferred: suffixed.is_some() || flagged,
        });
    }

    fn duration_end(&mut self, thread: usize, _name: &str, time: i64, _args: &[Arg<'_>]) {
        self.tracks[thread].2.push(Rec::End { time });
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
        self.tracks[thread].2.push(Rec::Complete {
            name: name.to_string(),
            start,
            end,
        });
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
