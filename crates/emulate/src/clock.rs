//! The times of an emulate trace.
//!
//! The plugin logs, in each thread's stream, the host's `CLOCK_MONOTONIC` time at the
//! thread's first logged block, at the start of every chunk (ring slot), every 4096
//! logged blocks, and at every syscall's entry and return. A step's time is counted in
//! the thread's own instructions; here it becomes nanoseconds, on one of two clocks:
//!
//! * [`ClockKind::Host`]: the host time, interpolated by instruction counts between the
//!   stamps around the step. Monotonic per thread and comparable across threads, but
//!   emulated code runs (much) slower than native.
//! * [`ClockKind::Virtual`]: instructions at a nominal rate ([`crate::NS_PER_INSN`]) plus the
//!   real host time each syscall took (entry to return): the emulation slowdown
//!   disappears, a `sleep(1)` still lasts 1 s.
//!
//! Logs written before host stamps existed, and snapshots cut at a trigger hit, use
//! the global instruction clock ([`TimeBase::Instructions`]).

use crate::recording::{ThreadInput, View};
use crate::NS_PER_INSN;
use ptscope_blocklog::{Word, Words};
use std::collections::VecDeque;

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

/// What a walk's times are counted in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TimeBase {
    /// Host ns, interpolated between the stamps.
    Host,
    /// The virtual clock.
    Virtual,
    /// The global instruction clock (1 instruction = [`NS_PER_INSN`] ns, one more per
    /// stop): logs without host stamps, trigger snapshots.
    Instructions,
}

impl From<ClockKind> for TimeBase {
    fn from(c: ClockKind) -> Self {
        match c {
            ClockKind::Host => TimeBase::Host,
            ClockKind::Virtual => TimeBase::Virtual,
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

/// A host stamp: the thread had run `own` instructions at host time `ns`; `restart`
/// for a syscall's return (a step restarting there takes it, one stopping there the
/// entry's).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub(crate) own: u64,
    pub(crate) ns: u64,
    pub(crate) restart: bool,
}

/// The host stamps of one thread still needed to date its steps.
#[derive(Debug, Default)]
pub(crate) struct HostClock {
    anchors: VecDeque<Anchor>,
    /// The two consecutive stamps the last step fell strictly between, ready to
    /// interpolate (most steps fall between the same two as the one before).
    span: Option<Span>,
}

/// Two consecutive stamps and the pace between them, with the reciprocal of its
/// instruction count so that a step's time needs no division.
#[derive(Copy, Clone, Debug)]
struct Span {
    lo_own: u64,
    hi_own: u64,
    lo_ns: u64,
    num: u64,
    den: u64,
    /// `u64::MAX / den`.
    recip: u64,
}

impl Span {
    fn new(lo: Anchor, hi: Anchor) -> Self {
        let den = (hi.own - lo.own).max(1);
        Span {
            lo_own: lo.own,
            hi_own: hi.own,
            lo_ns: lo.ns,
            num: hi.ns - lo.ns,
            den,
            recip: u64::MAX / den,
        }
    }

    /// The time `own` instructions in: `lo_ns + (own - lo_own)·num/den`, exactly.
    fn at(&self, own: u64) -> u64 {
        let d = own - self.lo_own;
        let q = match d.checked_mul(self.num) {
            Some(p) => div_by(p, self.den, self.recip),
            None => (u128::from(d) * u128::from(self.num) / u128::from(self.den))
                .min(u128::from(u64::MAX)) as u64,
        };
        self.lo_ns.saturating_add(q)
    }
}

/// `p / den` by a multiplication with `recip = u64::MAX / den` (`den` ≥ 1): the
/// estimate `p·recip / 2^64` is the quotient or one less, which one remainder test
/// settles.
#[inline]
fn div_by(p: u64, den: u64, recip: u64) -> u64 {
    let q = ((u128::from(p) * u128::from(recip)) >> 64) as u64;
    if p - q * den >= den {
        q + 1
    } else {
        q
    }
}

impl HostClock {
    /// Takes a stamp; stamps never go back (a host clock that did is held level).
    pub(crate) fn push(&mut self, mut a: Anchor) {
        if let Some(l) = self.anchors.back() {
            if a.own < l.own {
                return;
            }
            a.ns = a.ns.max(l.ns);
        }
        self.anchors.push_back(a);
    }

    /// ns per instruction between the first and last stamps kept (1 without two).
    fn rate(&self) -> (u64, u64) {
        match (self.anchors.front(), self.anchors.back()) {
            (Some(a), Some(b)) if b.own > a.own => (b.ns - a.ns, b.own - a.own),
            _ => (NS_PER_INSN, 1),
        }
    }

    /// The host time of a step after `own` instructions (`restart`: it restarts tracing
    /// there); `None` while the stamps after it are still to come (`done`: none will).
    pub(crate) fn at(&mut self, own: u64, restart: bool, done: bool) -> Option<u64> {
        // Strictly between two stamps, `restart` changes nothing.
        if let Some(s) = &self.span {
            if s.lo_own < own && own < s.hi_own {
                return Some(s.at(own));
            }
        }
        let a = &self.anchors;
        if a.is_empty() {
            return done.then_some(own.saturating_mul(NS_PER_INSN));
        }
        let i = if restart {
            let i = a.partition_point(|x| x.own <= own);
            if i > 0 && a[i - 1].own == own && (i < a.len() || done) {
                return Some(a[i - 1].ns);
            }
            i
        } else {
            let i = a.partition_point(|x| x.own < own);
            if i < a.len() && a[i].own == own {
                return Some(a[i].ns);
            }
            i
        };
        // d·num/den, exactly; in 64 bits when the product fits (nearly always: a gap of
        // a few thousand instructions times a few µs), sparing a 128-bit division a step.
        let scale = |d: u64, (num, den): (u64, u64)| match d.checked_mul(num) {
            Some(p) => p / den.max(1),
            None => (u128::from(d) * u128::from(num) / u128::from(den.max(1)))
                .min(u128::from(u64::MAX)) as u64,
        };
        match (i.checked_sub(1).map(|j| a[j]), a.get(i)) {
            (Some(lo), Some(hi)) => {
                // Here lo.own < own < hi.own: the steps that follow likely fall there too.
                let s = Span::new(lo, *hi);
                self.span = Some(s);
                Some(s.at(own))
            }
            (Some(lo), None) => {
                done.then(|| lo.ns.saturating_add(scale(own - lo.own, self.rate())))
            }
            (None, Some(hi)) => {
                // Before the first stamp (a forked child's first instructions): at the
                // pace of the stamps that follow, once there are two.
                if a.len() < 2 && !done {
                    return None;
                }
                Some(hi.ns.saturating_sub(scale(hi.own - own, self.rate())))
            }
            (None, None) => None,
        }
    }

    /// Forgets stamps no step at or after `own` needs.
    pub(crate) fn forget_before(&mut self, own: u64) {
        while self.anchors.len() > 2 && self.anchors[1].own < own {
            self.anchors.pop_front();
            // Steps between the stamps left are dated by them alone, as before.
            self.span = None;
        }
    }
}

/// The first host stamp of a thread's stream (its first chunk starts with one).
pub(crate) fn first_host(view: &View<'_>, t: &ThreadInput) -> Option<u64> {
    for &piece in &t.pieces {
        let data = view.procs[t.proc].index.stream(piece);
        for w in Words::new(data, piece.0).take(8) {
            match w {
                Ok(Word::Host(ns)) => return Some(ns),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
    None
}

/// The first global clock of a thread's stream, less the instructions before its first
/// logged block.
pub(crate) fn first_clock(view: &View<'_>, t: &ThreadInput) -> Option<u64> {
    let piece = *t.pieces.first()?;
    let data = view.procs[t.proc].index.stream(piece);
    let (mut clock, mut skip) = (None, 0u64);
    for w in Words::new(data, piece.0).take(8) {
        match w {
            Ok(Word::Clock(c)) => clock = Some(c),
            Ok(Word::Skip(k)) => skip += u64::from(k),
            Ok(Word::SkipBlock(k, _)) => {
                return clock.map(|c| c.saturating_sub(skip + u64::from(k)))
            }
            Ok(Word::Block(_)) => return clock.map(|c| c.saturating_sub(skip)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    clock.map(|c| c.saturating_sub(skip))
}

/// The virtual clock's start of each of `threads` but its process's main thread (which
/// starts at 0): the main thread's virtual time at the host time of its first stamp.
/// Reads the main thread's stream once (blocks' sizes, skips, stamps).
pub(crate) fn virtual_bases(view: &View<'_>, threads: &[ThreadInput]) -> Vec<u64> {
    let mut out = vec![0; threads.len()];
    for (p, proc) in view.procs.iter().enumerate() {
        let Some(main) = threads
            .iter()
            .find(|t| t.proc == p && t.tid == proc.pid())
            .or_else(|| threads.iter().find(|t| t.proc == p))
        else {
            continue;
        };
        // A process whose main thread runs alone needs no pairs: skip the pass over its
        // stream (the whole log, for a single-threaded program).
        if !threads
            .iter()
            .any(|t| t.proc == p && !std::ptr::eq(t, main))
        {
            continue;
        }
        let virt = |own: u64, kernel: u64| own.saturating_mul(NS_PER_INSN).saturating_add(kernel);
        // (host ns, virtual ns) at each of the main thread's stamps.
        let mut pairs: Vec<(u64, u64)> = Vec::new();
        let (mut own, mut kernel, mut entered) = (0u64, 0u64, None);
        'walk: for &piece in &main.pieces {
            let data = proc.index.stream(piece);
            for w in Words::new(data, piece.0) {
                match w {
                    Ok(Word::Block(id)) => {
                        own =
                            own.saturating_add(view.tb(p, id).map_or(0, |t| u64::from(t.n_insns)));
                    }
                    Ok(Word::SkipBlock(k, id)) => {
                        own = own
                            .saturating_add(u64::from(k))
                            .saturating_add(view.tb(p, id).map_or(0, |t| u64::from(t.n_insns)));
                    }
                    Ok(Word::Skip(k)) => own = own.saturating_add(u64::from(k)),
                    Ok(Word::Host(ns)) => pairs.push((ns, virt(own, kernel))),
                    Ok(Word::SyscallEntry { ns, .. }) => {
                        entered = Some(ns);
                        pairs.push((ns, virt(own, kernel)));
                    }
                    Ok(Word::SyscallReturn { ns, .. }) => {
                        if let Some(e) = entered.take() {
                            kernel = kernel.saturating_add(ns.saturating_sub(e));
                        }
                        pairs.push((ns, virt(own, kernel)));
                    }
                    Ok(Word::Clock(_)) => {}
                    Err(_) => break 'walk,
                }
            }
            view.release(data);
        }
        pairs.sort_unstable();
        for (i, t) in threads.iter().enumerate() {
            if t.proc != p || std::ptr::eq(t, main) {
                continue;
            }
            if let Some(h) = first_host(view, t) {
                out[i] = by_host_time(&pairs, h);
            }
        }
    }
    out
}

/// Interpolates `pairs` (`(host ns, virtual ns)`, sorted) at host time `ns`; past either
/// end, virtual time moves at the host's pace.
fn by_host_time(pairs: &[(u64, u64)], ns: u64) -> u64 {
    let i = pairs.partition_point(|x| x.0 <= ns);
    match (i.checked_sub(1).map(|j| pairs[j]), pairs.get(i)) {
        (Some(lo), Some(hi)) => {
            let span = u128::from(hi.1.saturating_sub(lo.1));
            lo.1.saturating_add(
                (span * u128::from(ns - lo.0) / u128::from((hi.0 - lo.0).max(1))) as u64,
            )
        }
        (Some(lo), None) => lo.1.saturating_add(ns - lo.0),
        (None, Some(hi)) => hi.1.saturating_sub(hi.0 - ns),
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The division by a reciprocal is exact: edges (powers of two, 1, near 2^64) and
    /// a million pseudo-random pairs.
    #[test]
    fn division_by_the_reciprocal_is_exact() {
        let check = |p: u64, den: u64| {
            assert_eq!(div_by(p, den, u64::MAX / den), p / den, "{p} / {den}");
        };
        for den in [1, 2, 3, 7, 1 << 32, (1 << 32) + 1, u64::MAX - 1, u64::MAX] {
            for p in [
                0,
                1,
                den - 1,
                den,
                den.wrapping_add(1),
                u64::MAX - 1,
                u64::MAX,
            ] {
                check(p, den);
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..1_000_000 {
            let (p, den) = (next() >> (next() % 64), next() >> (next() % 64));
            check(p, den.max(1));
        }
    }

    #[test]
    fn a_restart_takes_the_latest_stamp_and_a_stop_the_earliest() {
        // A syscall at instruction 100, entered at 1000 ns, returned at 5000 ns.
        let mut c = HostClock::default();
        for (own, ns, restart) in [
            (0, 0, false),
            (100, 1000, false),
            (100, 5000, true),
            (300, 5400, false),
        ] {
            c.push(Anchor { own, ns, restart });
        }
        assert_eq!(c.at(50, false, false), Some(500));
        assert_eq!(c.at(100, false, false), Some(1000));
        assert_eq!(c.at(100, true, false), Some(5000));
        assert_eq!(c.at(200, false, false), Some(5200));
        assert_eq!(c.at(400, false, false), None, "waits for the next stamp");
        assert!(c.at(400, false, true).is_some());
    }

    /// Found by mutating working directories: a host time that goes backwards made the
    /// interpolation subtract past zero.
    #[test]
    fn host_times_going_backwards_are_held_level() {
        let mut c = HostClock::default();
        c.push(Anchor {
            own: 0,
            ns: 1000,
            restart: false,
        });
        c.push(Anchor {
            own: 10,
            ns: 10,
            restart: false,
        });
        c.push(Anchor {
            own: 20,
            ns: 2000,
            restart: false,
        });
        assert_eq!(c.at(5, false, false), Some(1000));
        assert_eq!(c.at(15, false, false), Some(1500));
    }
}
