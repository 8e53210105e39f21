//! The times of an emulate trace.
//!
//! The plugin logs, in each thread's stream, the host's `CLOCK_MONOTONIC` time every few
//! thousand blocks, at the start of every ring slot and at every syscall's entry and
//! return. A step of [`ptsim::truth`] carries the thread's own instruction clock; here it
//! becomes nanoseconds, on one of two clocks:
//!
//! * [`ClockKind::Host`]: the host time, interpolated by instruction counts between the
//!   stamps around the step. Monotonic per thread and comparable across threads, but
//!   emulated code runs (much) slower than native.
//! * [`ClockKind::Virtual`]: instructions at a nominal rate ([`crate::NS_PER_INSN`]) plus the
//!   real host time each syscall took (entry to return): the emulation slowdown
//!   disappears, a `sleep(1)` still lasts 1 s.
//!
//! Logs written before host stamps existed fall back to the global instruction clock.

use crate::NS_PER_INSN;
use ptsim::blocklog::{BlockLog, StampKind, ThreadLog};
use ptsim::truth::{Step, StepKind};

/// Which clock the times of an emulate trace follow.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum ClockKind {
    /// The host's monotonic clock (the default): real time, emulation slowdown included.
    #[default]
    Host,
    /// Guest instructions at a nominal 1 GHz, plus the real time spent in syscalls.
    Virtual,
}

impl ClockKind {
    /// The name the command line uses (`--clock host|virtual`).
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Host => "host",
            ClockKind::Virtual => "virtual",
        }
    }

    /// What the trace's times mean, for the user and the trace itself.
    pub fn describe(self) -> &'static str {
        match self {
            ClockKind::Host => {
                "host clock (CLOCK_MONOTONIC): real time, including the emulation slowdown \
                 (emulated code runs many times slower than native)"
            }
            ClockKind::Virtual => {
                "virtual clock: 1 guest instruction = 1 ns, plus the real time spent in each \
                 syscall (sleeps and waits keep their length; the emulation slowdown is gone)"
            }
        }
    }
}

/// A thread that exec'd: the program after the exec is not traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecNotice {
    /// The thread that called `execve`/`execveat` and did not come back.
    pub tid: u32,
    /// When, in trace ns.
    pub time: u64,
    /// The program it ran, if the plugin could read it.
    pub path: String,
}

/// One thread's conversion from its own instruction count to trace ns.
#[derive(Default)]
struct ThreadClock {
    /// `(instructions the thread ran before the point, trace ns)`, non-decreasing in
    /// both; several points may share an instruction count (a syscall's entry and return).
    anchors: Vec<(u64, u64)>,
    /// ns per instruction before the first and after the last anchor.
    edge_rate: f64,
}

impl ThreadClock {
    /// Trace ns at instruction count `p`; `start`: the point where tracing restarts (after
    /// a syscall: the latest of the points at `p`), else the earliest.
    fn at(&self, p: u64, start: bool) -> u64 {
        let a = &self.anchors;
        if a.is_empty() {
            return p.saturating_mul(NS_PER_INSN);
        }
        let i = if start {
            let i = a.partition_point(|x| x.0 <= p);
            if i > 0 && a[i - 1].0 == p {
                return a[i - 1].1;
            }
            i
        } else {
            let i = a.partition_point(|x| x.0 < p);
            if i < a.len() && a[i].0 == p {
                return a[i].1;
            }
            i
        };
        match (i.checked_sub(1).map(|j| a[j]), a.get(i)) {
            (Some(lo), Some(hi)) => {
                let span = (hi.1.saturating_sub(lo.1)) as u128;
                lo.1 + (span * (p - lo.0) as u128 / (hi.0 - lo.0).max(1) as u128) as u64
            }
            (Some(lo), None) => lo.1 + ((p - lo.0) as f64 * self.edge_rate) as u64,
            (None, Some(hi)) => {
                hi.1.saturating_sub(((hi.0 - p) as f64 * self.edge_rate) as u64)
            }
            (None, None) => 0,
        }
    }
}

/// Every thread's clock, indexed like [`BlockLog::threads`].
pub(crate) struct Timeline {
    threads: Vec<ThreadClock>,
    /// Threads that exec'd.
    pub(crate) execs: Vec<ExecNotice>,
}

/// Instructions `t` ran before each of its host stamps.
fn instruction_counts(log: &BlockLog, t: &ThreadLog) -> Vec<u64> {
    let mut out = Vec::with_capacity(t.host.len());
    let mut si = 0;
    let mut p = 0u64;
    for i in 0..t.len() {
        while si < t.host.len() && t.host[si].at as usize <= i {
            out.push(p);
            si += 1;
        }
        p += log.tb_by_id(t.tb_id(i)).n_insns as u64;
    }
    out.resize(t.host.len(), p);
    out
}

/// Interpolates `pairs` (`(host ns, trace ns)`, non-decreasing) at host time `ns`; past
/// either end, trace time moves at the host's pace.
fn by_host_time(pairs: &[(u64, u64)], ns: u64) -> u64 {
    let i = pairs.partition_point(|x| x.0 <= ns);
    match (i.checked_sub(1).map(|j| pairs[j]), pairs.get(i)) {
        (Some(lo), Some(hi)) => {
            let span = hi.1.saturating_sub(lo.1) as u128;
            lo.1 + (span * (ns - lo.0) as u128 / (hi.0 - lo.0).max(1) as u128) as u64
        }
        (Some(lo), None) => lo.1 + (ns - lo.0),
        (None, Some(hi)) => hi.1.saturating_sub(hi.0 - ns),
        (None, None) => 0,
    }
}

/// True for `execve` and `execveat` (x86-64 numbers).
fn is_exec(num: u32) -> bool {
    num == 59 || num == 322
}

impl Timeline {
    /// The timeline of `log` on `kind`; `None` when the log has no host stamps (written
    /// by a plugin before them).
    pub(crate) fn new(log: &BlockLog, kind: ClockKind) -> Option<Timeline> {
        if log.threads.iter().all(|t| t.host.is_empty()) {
            return None;
        }
        let origin = log
            .threads
            .iter()
            .filter_map(|t| t.host.iter().map(|h| h.ns).min())
            .min()
            .unwrap_or(0);
        let counts: Vec<Vec<u64>> = log
            .threads
            .iter()
            .map(|t| instruction_counts(log, t))
            .collect();
        let mut threads: Vec<ThreadClock> = Vec::with_capacity(log.threads.len());
        match kind {
            ClockKind::Host => {
                for (t, stamps) in log.threads.iter().zip(&counts) {
                    let anchors: Vec<(u64, u64)> = stamps
                        .iter()
                        .zip(&t.host)
                        .map(|(&p, h)| (p, h.ns.saturating_sub(origin)))
                        .collect();
                    let edge_rate = match (anchors.first(), anchors.last()) {
                        (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / (b.0 - a.0) as f64,
                        _ => NS_PER_INSN as f64,
                    };
                    threads.push(ThreadClock { anchors, edge_rate });
                }
            }
            ClockKind::Virtual => {
                // The main thread starts at 0; another thread starts at the main thread's
                // virtual time at the host time of its first stamp.
                let main = log
                    .threads
                    .iter()
                    .position(|t| t.tid == log.pid)
                    .unwrap_or(0);
                let mut order: Vec<usize> = (0..log.threads.len()).collect();
                order.swap(0, main);
                threads.resize_with(log.threads.len(), ThreadClock::default);
                let mut main_pairs: Vec<(u64, u64)> = Vec::new();
                for (k, &ti) in order.iter().enumerate() {
                    let t = &log.threads[ti];
                    let base = match t.host.first() {
                        Some(h) if k > 0 => by_host_time(&main_pairs, h.ns),
                        _ => 0,
                    };
                    // Virtual time at each stamp: instructions before it, plus the time of
                    // the syscalls that returned by then.
                    let mut anchors = Vec::with_capacity(t.host.len());
                    let mut pairs = Vec::with_capacity(t.host.len());
                    let mut in_kernel = 0u64;
                    let mut entered: Option<u64> = None;
                    for (&p, h) in counts[ti].iter().zip(&t.host) {
                        match h.kind {
                            StampKind::SyscallEntry => entered = Some(h.ns),
                            StampKind::SyscallReturn => {
                                if let Some(from) = entered.take() {
                                    in_kernel += h.ns.saturating_sub(from);
                                }
                            }
                            StampKind::Block => {}
                        }
                        let v = base + p.saturating_mul(NS_PER_INSN) + in_kernel;
                        anchors.push((p, v));
                        pairs.push((h.ns, v));
                    }
                    if k == 0 {
                        main_pairs = pairs;
                    }
                    threads[ti] = ThreadClock {
                        anchors,
                        edge_rate: NS_PER_INSN as f64,
                    };
                }
            }
        }
        let mut execs = Vec::new();
        for (ti, t) in log.threads.iter().enumerate() {
            // An exec that did not return is the thread's last syscall.
            let Some(s) = t.syscalls.last() else {
                continue;
            };
            if !is_exec(s.num) || s.ret.is_some() {
                continue;
            }
            let Some(k) = t
                .host
                .iter()
                .rposition(|h| h.kind == StampKind::SyscallEntry && h.ns == s.enter_ns)
            else {
                continue;
            };
            let path = log
                .exec_calls
                .iter()
                .rev()
                .find(|c| c.tid == t.tid && c.ns == s.enter_ns)
                .map(|c| c.path.clone())
                .unwrap_or_default();
            execs.push(ExecNotice {
                tid: t.tid,
                time: threads[ti].anchors[k].1,
                path,
            });
        }
        Some(Timeline { threads, execs })
    }

    /// Rewrites the clocks of thread `ti`'s steps (its own instruction clock, as
    /// [`ptsim::truth`] gives them, in order) as trace ns.
    ///
    /// Within a traced stretch a step's clock minus the thread's instruction count is
    /// constant; it grows at each restart, where the count is the one at the stop before.
    pub(crate) fn convert(&self, ti: usize, steps: &mut [Step]) {
        let Some(tc) = self.threads.get(ti) else {
            return;
        };
        let mut offset: Option<u64> = None;
        let mut last = 0u64;
        for s in steps {
            let start = s.kind == StepKind::Start;
            let p = if start {
                let p = if offset.is_some() { last } else { 0 };
                offset = Some(s.clock.saturating_sub(p));
                p
            } else {
                s.clock.saturating_sub(offset.unwrap_or(0))
            };
            last = p;
            s.clock = tc.at(p, start);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_takes_the_latest_point_and_a_stop_the_earliest() {
        // A syscall at instruction 100, entered at 1000 ns, returned at 5000 ns.
        let tc = ThreadClock {
            anchors: vec![(0, 0), (100, 1000), (100, 5000), (300, 5400)],
            edge_rate: 2.0,
        };
        assert_eq!(tc.at(50, false), 500);
        assert_eq!(tc.at(100, false), 1000);
        assert_eq!(tc.at(100, true), 5000);
        assert_eq!(tc.at(200, false), 5200);
        assert_eq!(tc.at(400, false), 5600);
    }
}
