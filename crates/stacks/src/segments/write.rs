//! The write pass: one thread's segments, in time order, as well-nested slices.
//!
//! Each segment's first stack is stitched onto the frames open before it (see
//! [`stitch`](super::stitch)), or they are closed; then every stack change ends the
//! open frames it left and begins the ones it entered.

use super::bursts::is_short;
use super::frames::{
    frame_path, is_marker, Entry, Flow, Frame, Join, Locations, Segment, ThreadState,
    INFERRED_START, MARKER_IP, NO_HORIZON, RETURN_LABEL, SENTINEL,
};
use super::go::Parked;
use super::stitch::Stitch;
use crate::sink::{Arg, ArgValue, Name, TraceSink};
use crate::tracks::{FrameBegin, Mark};
use crate::WriterConfig;
use ptscope_event::{Location, StringTable, Symbol};
use std::iter::Peekable;
use std::slice;

/// Stack changes written between two releases of the thread's pages read so far.
const RELEASE_EVERY: usize = 1 << 16;

/// A frame open in the output, with what its end needs.
#[derive(Clone, Copy)]
pub(super) struct Open {
    pub(super) frame: u32,
    /// The frame whose name the slice was opened with: a frame continued across a gap
    /// under another name (a [`RETURN_LABEL`] root) ends under the name it began with.
    pub(super) shown: u32,
    /// Open at a segment's end: if closed at the boundary, its end is a guess.
    pub(super) at_gap: bool,
    /// Carried across a gap without the stacks lining up (the segment after the
    /// gap never returned into a known frame): plausible, not proven.
    pub(super) unverified: bool,
    /// Leaf samples of frames this slice stood for before it continued under
    /// another frame id (across a gap): the slice's count includes them.
    pub(super) samples: u32,
}

fn display<'a>(locs: &Locations, strings: &'a StringTable, frame: &Frame) -> &'a str {
    let loc = locs.get(strings, frame.loc);
    if is_marker(loc) {
        return crate::UNKNOWN_FRAMES_MARKER;
    }
    strings.display(loc.symbol)
}

/// Writes one thread: what the write pass knows at each point of its walk through the
/// thread's segments.
pub(super) struct ThreadWriter<'a, S: TraceSink> {
    sink: &'a mut S,
    track: S::Thread,
    pub(super) ts: &'a ThreadState<S::Thread>,
    pub(super) locs: &'a Locations,
    pub(super) strings: &'a StringTable,
    pub(super) config: &'a WriterConfig,
    /// Changes of the `--filter` region: (trace time, events now written?).
    regions: &'a [(i64, bool)],
    /// The next region change to apply.
    next_region: usize,
    /// False outside a `--filter` range: frames are tracked, nothing is written.
    enabled: bool,
    /// The frames open in the output, root first.
    pub(super) open: Vec<Open>,
    /// By frame id: is the frame in `open`? (A bit per frame: the write pass's
    /// memory is the trace's, it must add little per frame.)
    pub(super) is_open: FrameSet,
    /// Frames whose leaf samples ([`Frame::samples`]) a slice has taken: a frame
    /// shown twice (reopened) counts its samples once.
    samples_taken: FrameSet,
    /// The current segment's first stack, root first; then, per stack change, the
    /// frames it entered, leaf first.
    pub(super) path: Vec<u32>,
    /// The current segment's entry times, spread (see [`Smear`]).
    times: Smear,
    /// Decode errors not yet written.
    errors: Peekable<slice::Iter<'a, (i64, String)>>,
    /// CPU frequency changes not yet written.
    power: Peekable<slice::Iter<'a, (i64, u32)>>,
    /// ptwrite payloads not yet written.
    ptwrites: Peekable<slice::Iter<'a, (i64, Location, u64)>>,
    /// Time of the last event written: nothing is written before it.
    pub(super) last_written: i64,
    /// When the previous segment ended.
    prev_end: i64,
    /// Stacks of goroutines seen parking (root first, up to their `runtime.gopark`),
    /// most recent last: a resumed goroutine whose revealed callers single one out
    /// continues on its own stack rather than on the one that just parked.
    pub(super) parked: Vec<Parked>,
    /// The current segment's first frame was entered by the jump that began it: its
    /// start is known, not inferred.
    pub(super) entered_by_jump: bool,
    /// With [`WriterConfig::mark_unknown_frames`]: the frame shown for frames a decode
    /// error hid (see [`ThreadWriter::mark_unproven`]).
    pub(super) marker: Option<u32>,
}

impl<'a, S: TraceSink> ThreadWriter<'a, S> {
    /// A write pass of `ts` to its track in `sink`.
    pub(super) fn new(
        sink: &'a mut S,
        ts: &'a ThreadState<S::Thread>,
        locs: &'a Locations,
        strings: &'a StringTable,
        config: &'a WriterConfig,
        regions: &'a [(i64, bool)],
    ) -> Self {
        ThreadWriter {
            sink,
            track: ts.track,
            ts,
            locs,
            strings,
            config,
            regions,
            next_region: 0,
            enabled: true,
            open: Vec::new(),
            is_open: FrameSet::new(ts.frames.len()),
            samples_taken: FrameSet::new(ts.frames.len()),
            path: Vec::new(),
            times: Smear::default(),
            errors: ts.errors.iter().peekable(),
            power: ts.power.iter().peekable(),
            ptwrites: ts.ptwrites.iter().peekable(),
            last_written: i64::MIN,
            prev_end: 0,
            parked: Vec::new(),
            entered_by_jump: false,
            marker: None,
        }
    }

    /// Writes every segment, then closes what is still open.
    pub(super) fn write(mut self) {
        let ts = self.ts;
        for (si, seg) in ts.segments.iter().enumerate() {
            self.segment(si, seg);
        }
        self.finish();
    }

    fn segment(&mut self, si: usize, seg: &Segment) {
        let ts = self.ts;
        let entries = &ts.entries[seg.first..seg.end];
        if entries.is_empty() {
            return;
        }
        self.times = Smear {
            exact: self.config.exact_times,
            end_time: seg.end_time,
            ..Smear::default()
        };
        let start = self.times.at(entries, 0).max(self.last_written);
        // Segment boundary: stitch onto what is open, or close it.
        frame_path(ts, entries[0].leaf, &mut self.path);
        let (mut stitch, resumed) = self.stitch(si, seg);
        if let Some(st) = stitch.as_mut().filter(|st| st.unverified) {
            self.narrow_unverified(si, st);
        }
        let marked = match stitch.as_mut() {
            Some(st) if st.unverified && seg.join == Join::Any => {
                self.mark_unproven(si, st, is_short(seg))
            }
            Some(st) if seg.join == Join::Any && is_short(seg) => self.mark_recursion_level(si, st),
            _ => false,
        };
        let keep = match &stitch {
            Some(s) => s.base + s.matched,
            None => 0,
        };
        self.close_above(keep);
        if let (true, Some(m), Some(st)) = (marked, self.marker, stitch.as_mut()) {
            let t = self.prev_end.max(self.last_written);
            self.begin(&ts.frames[m as usize], t, true);
            self.open.push(Open {
                frame: m,
                shown: m,
                at_gap: false,
                unverified: false,
                samples: 0,
            });
            self.is_open.set(m, true);
            st.base += 1;
        }
        if let Some(p) = resumed {
            self.reopen_parked(p.frames, &mut stitch, start);
        }
        if let Some(s) = &stitch {
            self.continue_matched(s);
        }
        self.counters(start);
        self.errors_at(si, start);
        let base = match &stitch {
            Some(s) => s.base,
            None => 0,
        };
        for (k, e) in entries.iter().enumerate() {
            self.entry(si, seg, k, e, base);
            if k % RELEASE_EVERY == RELEASE_EVERY - 1 {
                // Pages read stay mapped until given back (see `store`).
                ts.entries.release();
                ts.frames.release();
            }
        }
        // Frames still open at a segment's end may have ended anywhere in the gap.
        for o in self.open.iter_mut() {
            o.at_gap = true;
        }
        self.prev_end = seg.end_time.max(self.last_written);
    }

    /// Closes the open frames above the first `keep` at the previous segment's end.
    fn close_above(&mut self, keep: usize) {
        let t = self.prev_end.max(self.last_written);
        if self.open.len() > keep {
            self.close_to(keep, t, true);
            self.last_written = t;
        }
    }

    /// Ends the open frames above the first `keep` at `t`. At a segment boundary, the
    /// end of a frame open at the previous segment's end is a guess.
    fn close_to(&mut self, keep: usize, t: i64, at_boundary: bool) {
        let ts = self.ts;
        while self.open.len() > keep {
            let Some(o) = self.open.pop() else { break };
            self.is_open.set(o.frame, false);
            let samples = self.take_samples(&o);
            let frame = &ts.frames[o.shown as usize];
            self.end(frame, t, at_boundary && o.at_gap, o.unverified, samples);
        }
    }

    /// The matched frames continue: same slices, now under this segment's ids.
    fn continue_matched(&mut self, s: &Stitch) {
        if s.unverified {
            for o in self.open.iter_mut() {
                o.unverified = true;
            }
        }
        for k in 0..s.matched {
            let frame = self.open[s.base + k].frame;
            self.is_open.set(frame, false);
            let samples = self.frame_samples(frame);
            let o = &mut self.open[s.base + k];
            o.samples += samples;
            o.frame = self.path[k];
            self.is_open.set(self.path[k], true);
        }
    }

    /// Writes the decode errors up to the segment's start.
    fn errors_at(&mut self, si: usize, start: i64) {
        while let Some(&e) = self.errors.peek() {
            let (t, name) = (e.0, &e.1);
            if t > start && si + 1 < self.ts.segments.len() {
                break;
            }
            self.errors.next();
            let t = t.max(self.last_written);
            if self.enabled {
                self.sink.duration_instant(self.track, name, t, &[]);
            }
            self.last_written = t;
            if t >= start {
                break;
            }
        }
    }

    /// Writes the `k`th stack change `e` of segment `si`: ends the open frames it left,
    /// begins those it entered. Frames below the first `base` open ones stay.
    fn entry(&mut self, si: usize, seg: &Segment, k: usize, e: &Entry, base: usize) {
        let ts = self.ts;
        let locs = self.locs;
        let at = self.times.at(&ts.entries[seg.first..seg.end], k);
        self.regions(at);
        let t_before = self.last_written;
        let t = at.max(self.last_written);
        self.counters(t);
        // Walk up from the new leaf to the first frame already open.
        self.path.clear();
        let mut f = e.leaf;
        while ts.frames[f as usize].flags & SENTINEL == 0 && !self.is_open.get(f) {
            self.path.push(f);
            f = ts.frames[f as usize].parent;
        }
        let keep = if ts.frames[f as usize].flags & SENTINEL != 0 {
            base
        } else {
            self.open
                .iter()
                .rposition(|o| o.frame == f)
                .map_or(base, |p| p + 1)
        };
        self.close_to(keep, t, false);
        // A label root continued across a gap under its caller's name: the return
        // onto the label is where the frame's code becomes the label's, so its slice
        // goes on under that name from here (as it would without the gap).
        let strings = self.strings;
        let symbol = |f: u32| locs.get(strings, ts.frames[f as usize].loc).symbol;
        let relabel = self.open.last().copied().filter(|o| {
            o.frame == e.leaf
                && symbol(o.shown) != symbol(o.frame)
                && e.flow == Flow::Return
                && ts.frames[o.frame as usize].flags & RETURN_LABEL != 0
        });
        if let Some(o) = relabel {
            // The label's own samples stay with the slice that goes on under it.
            self.end(
                &ts.frames[o.shown as usize],
                t,
                false,
                o.unverified,
                o.samples,
            );
            self.begin(&ts.frames[o.frame as usize], t, false);
            if let Some(o) = self.open.last_mut() {
                o.shown = o.frame;
                o.samples = 0;
            }
        }
        // After a decode error the frames the new segment knew from its start were,
        // as far as anyone can tell, running when the gap began: show them from the
        // error on (as magic-trace does), except the innermost, which is often the
        // one the segment returns from at once.
        let back_to = (k == 0 && si > 0 && seg.join == Join::Any)
            .then(|| seg.opened_at.max(t_before))
            .filter(|&b| b < t);
        let n = self.path.len();
        for depth in 0..n {
            let f = self.path[n - 1 - depth];
            let fr = ts.frames[f as usize];
            let entered = k == 0 && self.entered_by_jump && f == e.leaf;
            let inferred = !entered && (e.flow == Flow::Start || fr.flags & INFERRED_START != 0);
            let at = match back_to {
                Some(b) if depth + 1 < n => b,
                _ => t,
            };
            self.begin(&fr, at, inferred);
            self.open.push(Open {
                frame: f,
                shown: f,
                at_gap: false,
                unverified: false,
                samples: 0,
            });
            self.is_open.set(f, true);
        }
        self.last_written = t;
    }

    /// After the last segment: the errors left, the counters, and every open frame
    /// closed at the thread's end.
    fn finish(mut self) {
        for e in self.errors.by_ref() {
            let (t, name) = (e.0.max(self.last_written), &e.1);
            if self.enabled {
                self.sink.duration_instant(self.track, name, t, &[]);
            }
            self.last_written = t;
        }
        self.counters(i64::MAX);
        let t = self.prev_end.max(self.last_written);
        self.close_to(0, t, false);
    }

    /// The leaf samples an ending slice shows: its own and its frame's.
    fn take_samples(&mut self, o: &Open) -> u32 {
        o.samples + self.frame_samples(o.frame)
    }

    /// Frame `f`'s leaf samples, the first time they are asked for; 0 after.
    fn frame_samples(&mut self, f: u32) -> u32 {
        if self.samples_taken.get(f) {
            return 0;
        }
        self.samples_taken.set(f, true);
        let ts = self.ts;
        let own = ts.frames.get(f as usize).map_or(0, |fr| fr.samples as u32);
        own + ts.more_samples.get(&f).copied().unwrap_or(0)
    }

    /// Writes the CPU frequency changes and ptwrite payloads up to `upto`.
    fn counters(&mut self, upto: i64) {
        while let Some(&&(t, f)) = self.power.peek() {
            if t > upto {
                break;
            }
            self.power.next();
            if !self.enabled {
                continue;
            }
            self.sink.counter(
                self.track,
                "CPU",
                t,
                &[Arg::new("freq (MHz)", ArgValue::Int(f as i64))],
            );
        }
        // Only those inside a `--filter` range were kept.
        while let Some(&&(time, ref location, data)) = self.ptwrites.peek() {
            if time > upto {
                break;
            }
            self.ptwrites.next();
            let thread = self.ts.thread;
            let mark = Mark::at(thread, time, location);
            mark.write_ptwrite(self.sink, self.track, data, self.strings);
        }
    }

    /// Applies the filter-range changes up to `upto`: leaving a range closes every
    /// open frame, entering one reopens the current stack as inferred starts.
    fn regions(&mut self, upto: i64) {
        let ts = self.ts;
        let frames = &ts.frames;
        while self.next_region < self.regions.len() && self.regions[self.next_region].0 <= upto {
            let (t, on) = self.regions[self.next_region];
            self.next_region += 1;
            if on == self.enabled {
                continue;
            }
            let t = t.max(self.last_written);
            if on {
                self.enabled = true;
                for i in 0..self.open.len() {
                    let o = self.open[i];
                    self.begin(&frames[o.shown as usize], t, true);
                }
            } else {
                for i in (0..self.open.len()).rev() {
                    let o = self.open[i];
                    self.end(&frames[o.shown as usize], t, false, o.unverified, 0);
                }
                self.enabled = false;
            }
            self.last_written = t;
        }
    }

    pub(super) fn begin(&mut self, frame: &Frame, time: i64, inferred: bool) {
        if !self.enabled {
            return;
        }
        let loc = *self.locs.get(self.strings, frame.loc);
        let name = display(self.locs, self.strings, frame);
        let debug = self.config.debug_info.get(&loc.ip.wrapping_sub(loc.offset));
        let address = (loc.ip != 0 && loc.ip != MARKER_IP).then_some(loc.ip);
        let annotate = self.config.annotate_inferred_start_times;
        let begin = FrameBegin::new(name, address, debug, inferred, annotate);
        match loc.symbol {
            // By the symbol's number: the sink need not look its name up.
            Symbol::FromPerf(sym) if begin.plain() && !is_marker(&loc) => {
                let name = Name::new(sym.0, begin.name());
                self.sink
                    .duration_begin_name(self.track, name, time, begin.args());
            }
            _ => self
                .sink
                .duration_begin(self.track, begin.name(), time, begin.args()),
        }
    }

    /// Ends `frame`'s slice; `samples` (leaf samples it held) goes on the end event,
    /// which a viewer merges into the slice's args (its begin came before the count).
    fn end(&mut self, frame: &Frame, time: i64, inferred: bool, unverified: bool, samples: u32) {
        if !self.enabled {
            return;
        }
        let name = display(self.locs, self.strings, frame);
        let mut args = [Arg::new("", ArgValue::Int(0)); 3];
        let mut n = 0;
        if samples > 0 {
            args[n] = Arg::new("samples", ArgValue::Int(samples as i64));
            n += 1;
        }
        if inferred {
            args[n] = Arg::new("inferred_end_time", ArgValue::Interned("true"));
            n += 1;
        }
        if unverified {
            args[n] = Arg::new("crossed_gap", ArgValue::Interned("unverified"));
            n += 1;
        }
        self.sink.duration_end(self.track, name, time, &args[..n]);
    }
}

/// A segment's entry times for the write pass: equal timestamps spread (the time up to
/// the next distinct timestamp is shared evenly by the calls and jumps at that
/// timestamp, so nested frames stay visible), unless times are exact. Made one run of
/// equal times at a time as the pass reaches it: a whole segment's would be 8 bytes
/// per stack change, as much again as half the trace.
#[derive(Default)]
pub(super) struct Smear {
    exact: bool,
    end_time: i64,
    /// Index of the run's first entry.
    first: usize,
    /// The run's spread times.
    run: Vec<i64>,
}

impl Smear {
    /// The time of `entries[k]` (`k` from 0 up, as the pass goes).
    fn at(&mut self, entries: &[Entry], k: usize) -> i64 {
        if self.exact {
            return entries[k].time;
        }
        if k < self.first || k >= self.first + self.run.len() {
            let t = entries[k].time;
            let mut i = k;
            while i > 0 && entries[i - 1].time == t {
                i -= 1;
            }
            self.first = i;
            self.spread(entries, i);
        }
        self.run[k - self.first]
    }

    /// Spreads the run of equal times that starts at `entries[i]`.
    fn spread(&mut self, entries: &[Entry], i: usize) {
        self.run.clear();
        let t = entries[i].time;
        let mut j = i;
        while j < entries.len() && entries[j].time == t {
            j += 1;
        }
        let mut next = if j < entries.len() {
            entries[j].time
        } else {
            self.end_time.max(t)
        };
        let horizon = entries[j - 1].horizon;
        if horizon != NO_HORIZON {
            next = next.min(t + horizon as i64);
        }
        let count = entries[i..j]
            .iter()
            .filter(|e| matches!(e.flow, Flow::Call | Flow::Jump))
            .count() as i64;
        let total = next - t;
        let mut offset = 0i64;
        let mut used = 0i64;
        for e in &entries[i..j] {
            self.run.push(t + offset);
            if matches!(e.flow, Flow::Call | Flow::Jump) {
                used += 1;
                offset += (total - offset) / (count - used + 1);
            }
        }
    }
}

/// A set of frames: a bit per frame.
pub(super) struct FrameSet(Vec<u64>);

impl FrameSet {
    fn new(frames: usize) -> Self {
        FrameSet(vec![0; frames.div_ceil(64)])
    }

    /// Is frame `f` in the set?
    pub(super) fn get(&self, f: u32) -> bool {
        self.0
            .get(f as usize / 64)
            .is_some_and(|w| w >> (f % 64) & 1 != 0)
    }

    /// Puts frame `f` in the set or takes it out.
    pub(super) fn set(&mut self, f: u32, open: bool) {
        if let Some(w) = self.0.get_mut(f as usize / 64) {
            let bit = 1u64 << (f % 64);
            if open {
                *w |= bit;
            } else {
                *w &= !bit;
            }
        }
    }
}
