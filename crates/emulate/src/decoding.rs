//! One snapshot of a recording, ready to be decoded thread by thread (in parallel if the
//! caller wants): each thread's name, where its times start, and its walker.

use crate::clock::{first_clock, first_host, virtual_bases, ClockKind, ExecNotice, TimeBase};
use crate::names::Namer;
use crate::recording::{Snapshot, View};
use crate::walk::Walker;

/// What the trace's clock is when the log has no host times (an older plugin wrote it),
/// or for a trigger's snapshot.
pub const FALLBACK_CLOCK: &str = "virtual instruction clock (1 guest instruction = 1 ns, \
    no syscall time): this recording has no host timestamps (written by an older plugin)";

/// A thread of the snapshot: its process, id and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// Its last name (`prctl(PR_SET_NAME)`, `pthread_setname_np`), else the program's.
    pub name: String,
    /// Its stream starts mid-run (a snapshot, a flight recorder that dropped its oldest
    /// executions, a forked child's first thread): its first frames' callers are learnt
    /// from the returns into them.
    pub mid_run: bool,
}

/// One snapshot of a recording, to decode.
pub struct Decoding<'v, 'a> {
    view: &'v View<'a>,
    snapshot: Snapshot,
    base: TimeBase,
    clock: ClockKind,
    /// Where trace time 0 is, on the time base.
    origin: u64,
    virtual_bases: Vec<u64>,
    threads: Vec<ThreadInfo>,
}

impl<'v, 'a> Decoding<'v, 'a> {
    /// Snapshot `index` of `view` (see [`View::snapshots`]), times on `clock` where the
    /// log allows, threads named `comm` unless they named themselves.
    pub fn new(view: &'v View<'a>, index: usize, clock: ClockKind, comm: &str) -> Self {
        Self::with_base(view, index, clock, None, comm)
    }

    /// [`Decoding::new`], with times counted in `base` whatever the log allows (the
    /// instruction clock, to compare with ptsim's truth).
    pub fn with_time_base(view: &'v View<'a>, index: usize, base: TimeBase, comm: &str) -> Self {
        Self::with_base(view, index, ClockKind::Host, Some(base), comm)
    }

    fn with_base(
        view: &'v View<'a>,
        index: usize,
        clock: ClockKind,
        forced: Option<TimeBase>,
        comm: &str,
    ) -> Self {
        let snapshot = view.snapshots().into_iter().nth(index).unwrap_or(Snapshot {
            hit: None,
            threads: Vec::new(),
        });
        let firsts: Vec<Option<u64>> = snapshot
            .threads
            .iter()
            .map(|t| first_host(view, t))
            .collect();
        // A trigger's snapshot is timed by the instruction clock, as are logs without
        // host times.
        let base = match forced {
            Some(b) => b,
            None if snapshot.hit.is_some() || firsts.iter().all(Option::is_none) => {
                TimeBase::Instructions
            }
            None => clock.into(),
        };
        let origin = match base {
            TimeBase::Host => firsts.iter().flatten().copied().min().unwrap_or(0),
            TimeBase::Instructions => snapshot
                .threads
                .iter()
                .filter_map(|t| first_clock(view, t))
                .min()
                .unwrap_or(0),
            TimeBase::Virtual => 0,
        };
        let virtual_bases = if base == TimeBase::Virtual {
            virtual_bases(view, &snapshot.threads)
        } else {
            vec![0; snapshot.threads.len()]
        };
        let comm: String = comm.chars().take(15).collect();
        let threads = snapshot
            .threads
            .iter()
            .map(|t| {
                let proc = &view.procs[t.proc];
                let name = proc
                    .index
                    .comms
                    .iter()
                    .rev()
                    .find(|c| c.tid == t.tid)
                    .map_or_else(|| comm.clone(), |c| c.name.clone());
                let mid_run = snapshot.hit.is_some()
                    || proc.index.wrapped.contains(&t.tid)
                    || (proc.index.fork.is_some() && t.tid == proc.pid());
                ThreadInfo {
                    pid: proc.pid(),
                    tid: t.tid,
                    name,
                    mid_run,
                }
            })
            .collect();
        Decoding {
            view,
            snapshot,
            base,
            clock,
            origin,
            virtual_bases,
            threads,
        }
    }

    /// The snapshot's threads.
    pub fn threads(&self) -> &[ThreadInfo] {
        &self.threads
    }

    /// Bytes of thread `i`'s exec stream.
    pub fn thread_bytes(&self, i: usize) -> u64 {
        self.snapshot
            .threads
            .get(i)
            .map_or(0, |t| t.pieces.iter().map(|p| p.1 as u64).sum())
    }

    /// What the times are counted in.
    pub fn time_base(&self) -> TimeBase {
        self.base
    }

    /// Where the snapshot's time 0 is, on its time base (steps' times are after it).
    pub fn origin(&self) -> u64 {
        self.origin
    }

    /// Puts time 0 at `origin` (one for every snapshot of a recording, so they follow
    /// each other in time).
    pub fn set_origin(&mut self, origin: u64) {
        self.origin = origin;
    }

    /// The snapshot is a trigger hit's.
    pub fn at_hit(&self) -> bool {
        self.snapshot.hit.is_some()
    }

    /// A walk of thread `i`'s stream; its steps' times are ns from the snapshot's start.
    pub fn walker(&self, i: usize) -> Walker<'v, 'a> {
        let t = self.snapshot.threads[i].clone();
        let proc = &self.view.procs[t.proc];
        let namer = Namer::new(proc.maps.clone(), self.view.files.clone());
        Walker::new(
            self.view,
            t,
            namer,
            self.base,
            self.virtual_bases[i],
            self.origin,
        )
    }

    /// How to say what the times are, once for the trace.
    pub fn clock_info(&self) -> String {
        match self.base {
            TimeBase::Instructions if self.at_hit() => {
                "emulate backend: a trigger's snapshots are timed by the virtual instruction \
                 clock (1 guest instruction = 1 ns, no syscall time), whatever --clock says"
                    .to_string()
            }
            TimeBase::Instructions => format!(
                "emulate backend: times are the {FALLBACK_CLOCK}; --clock {} cannot apply",
                self.clock.name()
            ),
            _ => format!("emulate backend: times are the {}", self.clock.describe()),
        }
    }

    /// The trace's own marker of its clock.
    pub fn clock_marker(&self) -> String {
        match self.base {
            TimeBase::Instructions if self.at_hit() => {
                format!("clock: {}", FALLBACK_CLOCK.split(':').next().unwrap_or(""))
            }
            TimeBase::Instructions => format!("clock: {FALLBACK_CLOCK}"),
            _ => format!("clock: {}", self.clock.describe()),
        }
    }

    /// The exec a walk ended with, as a notice: the program it ran comes from the log.
    pub fn exec_notice(&self, i: usize, walker: &Walker<'_, '_>) -> Option<ExecNotice> {
        let (time, ns) = walker.exec_at?;
        let t = &self.snapshot.threads[i];
        let path = self.view.procs[t.proc]
            .index
            .exec_calls
            .iter()
            .rev()
            .find(|c| c.tid == t.tid && (ns == 0 || c.ns == ns))
            .map(|c| c.path.clone())
            .unwrap_or_default();
        Some(ExecNotice {
            tid: t.tid,
            time,
            path,
        })
    }
}
