//! Sampled stacks (perf's callchains) and the times a sampled thread spent off CPU.

use super::frames::{
    Flow, Loc, Locations, OffCpu, ThreadState, GAPS, MAX_OFF_CPU, NONE, RETURN_LABEL,
};
use super::ingest::Cx;
use crate::WriterConfig;
use ptscope_event::{Location, StringTable, Symbol, TraceScope};

/// A thread's last times off CPU, with no sample after them to tell which frames
/// they interrupted: every frame ends when it first left the CPU. Its last switch-out
/// (at exit, or when recording stopped) shows no interval: its end is not known.
pub(super) fn flush_off_cpu_at_end<T>(
    ts: &mut ThreadState<T>,
    locs: &mut Locations,
    strings: &StringTable,
    config: &WriterConfig,
) {
    let last_out = match ts.off_cpu.last() {
        Some(o) if o.back.is_none() => Some(o.out),
        _ => None,
    };
    if last_out.is_some() {
        ts.off_cpu.pop();
    }
    let time = ts.last_time;
    let mut cx = Cx {
        ts,
        locs,
        strings,
        config,
        time,
        switches: true,
    };
    cx.flush_off_cpu(0);
    if let Some(out) = last_out {
        if !cx.is_sentinel(cx.ts.leaf) {
            cx.time = cx.ts.entries.last().map_or(out, |e| out.max(e.time));
            cx.ts.leaf = cx.ts.sentinel;
            cx.record(Flow::Return);
        }
    }
}

impl<T> Cx<'_, T> {
    /// The thread left the CPU or came back.
    pub(super) fn switch(&mut self, out: bool, preempt: bool) {
        if !self.ts.sampled {
            return;
        }
        let time = self.time;
        // A `sched_switch` stack just before says where this switch-out left the thread.
        let stacked = std::mem::take(&mut self.ts.leaving) && out;
        let off = &mut self.ts.off_cpu;
        let full = off.len() >= MAX_OFF_CPU;
        let still_out = off.last().is_some_and(|o| o.back.is_none());
        if !out {
            // An in without an out (recording began while it was off CPU) ends nothing.
            if let Some(l) = off.last_mut().filter(|_| still_out) {
                l.back = Some(time);
            }
        } else if still_out {
            // Switched out twice (a lost switch-in): the first time counts.
        } else if let Some(l) = off.last_mut().filter(|_| full) {
            // So many short wake-ups without a sample: they become one interval.
            l.back = None;
        } else {
            off.push(OffCpu {
                out: time,
                back: None,
                preempt,
                stacked,
            });
        }
    }

    /// Shows the held times off CPU, ending every frame above the first `keep` of the
    /// current stack when the thread first left the CPU without a known stack; each
    /// interval becomes a synthetic `[off-cpu]` frame on top of those that stayed. An
    /// interval whose stack is known (a `sched_switch` stack: the current one) nests in
    /// all of it. True if frames were ended.
    pub(super) fn flush_off_cpu(&mut self, keep: usize) -> bool {
        if self.ts.off_cpu.is_empty() {
            return false;
        }
        let pending = std::mem::take(&mut self.ts.off_cpu);
        let leaf = self.ts.leaf;
        let mut base = self.ts.leaf;
        let mut depth = 0;
        let mut f = self.ts.leaf;
        while !self.is_sentinel(f) {
            depth += 1;
            f = self.ts.frames[f as usize].parent;
        }
        for _ in keep.min(depth)..depth {
            base = self.ts.frames[base as usize].parent;
        }
        let now = self.time;
        // Entries stay in time order whatever came between (perf's times can step back).
        let floor = self.ts.entries.last().map_or(i64::MIN, |e| e.time);
        let mut trimmed = false;
        for o in pending {
            // Known stacks come first (the switch-out right after one); once an interval
            // without one ended the frames above `keep`, later ones sit there too.
            trimmed |= !o.stacked;
            let base = if trimmed { base } else { leaf };
            self.time = o.out.max(floor);
            self.ts.leaf = base;
            self.record(Flow::Return);
            let symbol = if o.preempt {
                Symbol::Preempted
            } else {
                Symbol::OffCpu
            };
            let loc = self.locs.own(Location::locationless(symbol));
            self.push_as(&loc, 0, Flow::Sampled);
            self.time = o.back.unwrap_or(now).max(self.time);
            self.ts.leaf = base;
            self.record(Flow::Return);
        }
        self.time = now;
        trimmed
    }

    /// The sampling period, estimated from the gaps between this thread's samples (a
    /// low quantile: timers fire late under load, and a thread that blocks often has
    /// long gaps); `None` until enough were seen.
    pub(super) fn period_estimate(&self) -> Option<i64> {
        let n = self.ts.gap_count.min(GAPS);
        if n < GAPS / 2 {
            return None;
        }
        let mut g = self.ts.gaps;
        let g = &mut g[..n];
        g.sort_unstable();
        Some(g[n / 4]).filter(|&p| p > 0)
    }

    /// A sampled stack: time on the CPU in its leaf.
    pub(super) fn sample(&mut self, callstack: &[Loc]) {
        // Without context switches, a gap of over two periods since the last sample is
        // time off CPU (cpu-clock only fires while the thread runs): frames it left
        // ended about one period after their last sample, not at the next one.
        let mut ended_at = None;
        if let Some(last) = self.ts.last_sample {
            let gap = self.time - last;
            if !self.switches {
                ended_at = self
                    .period_estimate()
                    .filter(|&p| gap > 2 * p)
                    .map(|p| last + p);
            }
            self.ts.gaps[self.ts.gap_count % GAPS] = gap;
            self.ts.gap_count += 1;
        }
        self.ts.last_sample = Some(self.time);
        self.ts.sampled = true;
        self.ts.leaving = false;
        match self.graft(callstack) {
            Some(whole) => self.follow(&whole, ended_at),
            None => self.follow(callstack, ended_at),
        }
        // An empty stack (everything out of scope) has no leaf to count it against.
        if !callstack.is_empty() && !self.is_sentinel(self.ts.leaf) {
            let leaf = self.ts.leaf;
            let fr = &mut self.ts.frames[leaf as usize];
            if fr.samples < u16::MAX {
                fr.samples += 1;
            } else {
                *self.ts.more_samples.entry(leaf).or_insert(0) += 1;
            }
        }
    }

    /// The stack the thread is leaving the CPU in (a `sched_switch` stack): it becomes
    /// the current stack as a sample's would, without counting as a sample, and the
    /// switch-out that follows nests its time off CPU in all of it.
    pub(super) fn switch_stack(&mut self, callstack: &[Loc]) {
        self.ts.sampled = true;
        match self.graft(callstack) {
            Some(whole) => self.follow(&whole, None),
            None => self.follow(callstack, None),
        }
        self.ts.leaving = true;
    }

    /// A stack perf's unwinder cut short, made whole from the current one. perf unwinds
    /// a copy of the top of the user stack (`--call-graph dwarf`): now and then the
    /// walk stops early (a register the unwind rules needed was not in the copy, a
    /// frame beyond it), and the sample's outermost frame is not the thread's root but
    /// a function the current stack holds further up (`run_batch` under `main` under
    /// `_start`). Taken as it is, that one sample would end every frame down to the
    /// root and begin them again after it: `main` in pieces. Such a stack is put on the
    /// frames below where the current stack holds its outermost function (the
    /// outermost place, if it holds it more than once). A stack whose outermost function
    /// the current one does not hold, or holds at its root, is taken as it is; so is one
    /// rooted in the kernel (interrupt entries are roots there). `None`: take it as it is.
    fn graft(&self, callstack: &[Loc]) -> Option<Vec<Loc>> {
        let first = callstack.first()?;
        if first.ip == 0 || !TraceScope::Userspace.includes_address(first.ip) {
            return None;
        }
        // One walk to the root, allocating nothing (this runs at every sample): the root,
        // and the outermost frame of `first`'s function.
        let at = |id: u32| self.locs.get(self.strings, id);
        let (mut root, mut outermost) = (None, None);
        let mut f = self.ts.leaf;
        while !self.is_sentinel(f) {
            let fr = &self.ts.frames[f as usize];
            if at(fr.loc).symbol == first.symbol {
                outermost = Some(fr.parent);
            }
            root = Some(fr.loc);
            f = fr.parent;
        }
        if root.is_none_or(|r| at(r).symbol == first.symbol) {
            return None;
        }
        // The frames below the outermost one, root first.
        let mut whole = Vec::new();
        let mut f = outermost?;
        while !self.is_sentinel(f) {
            let id = self.ts.frames[f as usize].loc;
            whole.push(Loc { id, at: *at(id) });
            f = self.ts.frames[f as usize].parent;
        }
        whole.reverse();
        whole.extend_from_slice(callstack);
        Some(whole)
    }

    /// Moves the current stack to `callstack`: the frames both share stay open (held
    /// time off CPU is shown in them), the others end (at `ended_at` if known, else
    /// now), and the new ones begin.
    fn follow(&mut self, callstack: &[Loc], ended_at: Option<i64>) {
        // Current stack, root first (below the sentinel nothing is known).
        let mut cur = Vec::new();
        let mut f = self.ts.leaf;
        while !self.is_sentinel(f) {
            cur.push(f);
            f = self.ts.frames[f as usize].parent;
        }
        cur.reverse();
        let cur_len = cur.len();
        let mut keep = 0;
        // The frame before was kept but now calls from another call site: what it calls
        // now is another call, whatever its name.
        let mut caller_moved = false;
        for (i, (&fr, loc)) in cur.iter().zip(callstack).enumerate() {
            if caller_moved {
                break;
            }
            let known = *self.locs.get(self.strings, self.ts.frames[fr as usize].loc);
            // The user-space leaf under a sample's `[kernel: …]` frame (the naming step's
            // one synthetic last frame, at address 0) is a leaf too: its pc is where it
            // entered the kernel, and another pc there is not another call of it.
            let under_kernel_cur = i + 2 == cur_len
                && self
                    .locs
                    .get(self.strings, self.ts.frames[cur[i + 1] as usize].loc)
                    .ip
                    == 0;
            let under_kernel_new = i + 2 == callstack.len() && callstack[i + 1].ip == 0;
            let at_a_leaf = i + 1 == cur_len
                || i + 1 == callstack.len()
                || under_kernel_cur
                || under_kernel_new;
            // A frame is the same call when its function is, and its caller's call site
            // (the frame before's pc) is: a caller calling from elsewhere now is still
            // the same call, but what it calls is not; a leaf moves within its function.
            if known.symbol != loc.symbol {
                break;
            }
            if known.ip != loc.ip {
                // The same call, now seen from another pc (a leaf that has since called
                // something, a caller at another call site): later samples match what
                // it calls by this call site.
                let l = loc.id;
                self.ts.frames[fr as usize].loc = l;
                caller_moved = !at_a_leaf;
            }
            keep += 1;
        }
        // Frames both stacks share ran before and after time off CPU: it was spent
        // inside them. The others ended when the thread first left the CPU, unless
        // where it left is known.
        let trimmed = self.flush_off_cpu(keep);
        let mut merged = 0;
        if !trimmed && keep < cur_len {
            self.ts.leaf = if keep == 0 {
                self.ts.sentinel
            } else {
                cur[keep - 1]
            };
            let now = self.time;
            if let Some(t) = ended_at {
                let last_entry = self.ts.entries.last().map_or(t, |e| e.time);
                self.time = t.max(last_entry).min(now);
            }
            // Returning and entering new frames at the same time is one stack change:
            // the write pass ends what the new leaf's path leaves. Recorded as one
            // entry, a sample costs one entry, not one per frame it changes (entries
            // are most of a sampled trace's memory). A label root's return is kept:
            // it renames the slice (see the write pass).
            let label =
                keep > 0 && self.ts.frames[cur[keep - 1] as usize].flags & RETURN_LABEL != 0;
            if self.time != now || callstack.len() == keep || label {
                self.record(Flow::Return);
            } else if self.changes_stack() {
                merged += 1;
            }
            self.time = now;
        }
        if callstack.len() > keep {
            for loc in &callstack[keep..] {
                self.enter(loc, NONE, 0);
            }
            self.record(Flow::Sampled);
            merged += callstack.len() - keep - 1;
        }
        if let Some(seg) = self.ts.segments.last_mut() {
            seg.merged += merged;
        }
    }
}
