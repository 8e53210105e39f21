//! Bursts of decode errors: many short gaps close together (a trace buffer overflowing
//! again and again under load). Each segment between two of them runs for a few branches
//! and reveals little of the stack it runs on, so lining it up alone with the frames open
//! before its gap is a guess on one name; the segments after it, up to the first long one,
//! say which of those frames were still running.

use super::frames::Segment;
use super::stitch::{find_stitch, is_root_frame, Stitch};
use super::write::ThreadWriter;
use crate::sink::TraceSink;

/// Stack changes a segment between two decode errors holds at most to count as part of a
/// burst (it reveals little of the stack it runs on).
pub(super) const SHORT_SEGMENT: usize = 16;

/// A segment of a burst of decode errors: few stack changes before the next one.
pub(super) fn is_short(seg: &Segment) -> bool {
    seg.end - seg.first + seg.merged <= SHORT_SEGMENT
}

impl<S: TraceSink> ThreadWriter<'_, S> {
    /// In a burst of decode errors a short segment may reveal only its innermost frames,
    /// which can line up with an outer open frame running the same function, as if its
    /// gap had returned from everything above it. A later segment of the burst that lines
    /// up with more open frames shows them still open: they survived this segment's gap
    /// too, and its frames ran on top of them (lined up above them where they can be,
    /// else called in the gap).
    pub(super) fn respect_survivors(&self, si: usize, st: Stitch) -> Stitch {
        // Only a line-up by a single frame is that weak; a thread's first function has
        // nothing below it.
        let (ts, locs, strings) = (self.ts, self.locs, self.strings);
        let root = (self.path.first()).is_some_and(|&f| is_root_frame(ts, locs, strings, f));
        if st.matched > 1 || root {
            return st;
        }
        let keep = st.base + st.matched;
        let Some(k) = self.survivors(si).filter(|&k| k > keep) else {
            return st;
        };
        match find_stitch(ts, locs, strings, &self.open[k..], &self.path) {
            Some(above) if !above.unverified => Stitch {
                base: k + above.base,
                matched: above.matched,
                unverified: false,
            },
            _ => Stitch {
                base: k,
                matched: 0,
                unverified: false,
            },
        }
    }

    /// With [`WriterConfig::mark_unknown_frames`](crate::WriterConfig::mark_unknown_frames):
    /// a short segment of a burst lined up by one name with an open frame whose caller
    /// runs the same function (a direct recursion). Which of the two levels it continues
    /// the trace does not say: the inner one (the fewest returns in the gap, what the
    /// line-up chose), or the outer one, the inner having returned in the gap. Both give
    /// way to the marker frame, which stands for the outer level or for nothing, and the
    /// segment's frames go above it. Returns whether the marker is to be opened at
    /// `st.base`.
    pub(super) fn mark_recursion_level(&self, si: usize, st: &mut Stitch) -> bool {
        if self.marker.is_none() || st.unverified || st.matched != 1 || st.base == 0 {
            return false;
        }
        let (ts, locs, strings) = (self.ts, self.locs, self.strings);
        let sym = |i: usize| {
            let f = self.open[i].frame;
            locs.get(strings, ts.frames[f as usize].loc).symbol
        };
        if sym(st.base - 1) != sym(st.base) {
            return false;
        }
        // A later segment lined up with both levels shows them both still running.
        let both = |f: &Stitch| !f.unverified && f.base < st.base && f.base + f.matched > st.base;
        if self
            .later_line_ups(si)
            .any(|(_, found)| found.as_ref().is_some_and(both))
        {
            return false;
        }
        st.base -= 1;
        st.matched = 0;
        true
    }

    /// How many of the open frames (outermost first) the rest of the burst after
    /// segment `si` shows still open: the most that a later segment, each one after a
    /// decode error, lines up with by at least two frames (one name alone is often a
    /// coincidence), up to the first segment that is not short (which ends the burst).
    fn survivors(&self, si: usize) -> Option<usize> {
        let mut most = None;
        for (later, found) in self.later_line_ups(si) {
            if let Some(f) = found {
                if !f.unverified && f.matched >= 2 {
                    most = most.max(Some(f.base + f.matched));
                }
            }
            if !is_short(later) {
                break;
            }
        }
        most
    }
}
