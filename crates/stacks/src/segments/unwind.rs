//! C++ exceptions: where the unwinder's jump to a landing pad lands.
//!
//! libgcc's unwinder ends each phase-2 step by jumping (`uw_install_context`, inlined
//! into its entry points) into a landing pad: a cleanup (destructors of the frame's
//! locals, ending in a call to `_Unwind_Resume`) or a catch. The pad belongs to a frame
//! *above* the one that entered the unwinder: the thrower's caller or further for
//! `__cxa_throw` (the thrower itself only when its own pad covers the throw), and always
//! a frame above the caller of `_Unwind_Resume`, which resumes unwinding from the next
//! outer frame. Landing on the nearest frame of the pad's function, as for any jump into
//! an ancestor, goes wrong in a recursion: the caller of `_Unwind_Resume` runs the same
//! function as the frame whose pad comes next, and the stack kept one level too many
//! until the catch.
//!
//! A pad in a function the segment never saw is in a frame beyond its known root (a
//! snapshot or a decode gap began inside the unwinding): the landing starts a segment of
//! its own, which the write pass lines up with the frames open before it when they show
//! the pad's function, and never takes as a tail jump.

use super::{Cx, Flow, Join, SENTINEL};
use ptscope_event::{Location, Symbol};

/// Where the jump from an unwinder entry point may land, relative to the frame that
/// called that entry point.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Landing {
    /// In the caller or above (a throw: the caller's own pad may cover it).
    AtOrAbove,
    /// Strictly above the caller (`_Unwind_Resume`: unwinding resumes past the caller).
    Above,
}

/// libgcc's entry points whose phase 2 jumps into landing pads.
fn landing(name: &str) -> Option<Landing> {
    // `_Unwind_Resume@plt` is the caller's stub, not the unwinder; a version suffix
    // (`@@GCC_3.0`) names the unwinder itself.
    if name.ends_with("@plt") {
        return None;
    }
    let name = name.split('@').next().unwrap_or(name);
    match name {
        "_Unwind_Resume" => Some(Landing::Above),
        "_Unwind_RaiseException" | "_Unwind_Resume_or_Rethrow" | "_Unwind_ForcedUnwind" => {
            Some(Landing::AtOrAbove)
        }
        _ => None,
    }
}

impl<T> Cx<'_, T> {
    /// A jump from an unwinder entry point into the middle of another function: lands in
    /// the right ancestor, or starts a segment of its own when the pad's frame is beyond
    /// what the segment knows. False when `src` is not an unwinder entry point (or the
    /// unwinder's frame is not on the stack), for the general rules to decide.
    pub(super) fn landing_pad(&mut self, src: &Location, dst: &Location) -> bool {
        let Symbol::FromPerf(n) = src.symbol else {
            return false;
        };
        let Some(how) = landing(self.strings.get(n)) else {
            return false;
        };
        if dst.offset == 0 || dst.symbol == src.symbol {
            return false;
        }
        let Some(entry) = self.find(src.symbol) else {
            return false;
        };
        let caller = self.ts.frames[entry as usize].parent;
        let from = match how {
            Landing::AtOrAbove => caller,
            Landing::Above if self.is_sentinel(caller) => caller,
            Landing::Above => self.ts.frames[caller as usize].parent,
        };
        if let Some(f) = self.find_from(from, dst.symbol) {
            self.ts.leaf = f;
            self.record(Flow::Return);
            return true;
        }
        // The pad's frame is below the segment's known root: only the frames a later
        // return reveals, or those open before a gap, can say where it sits; the frames
        // from the leaf up to where the search began cannot be it.
        let mut skip = 0;
        let mut f = self.ts.leaf;
        while f != from && !self.is_sentinel(f) {
            skip += 1;
            f = self.ts.frames[f as usize].parent;
        }
        self.split(Join::Landed { skip });
        self.ensure_current(dst);
        true
    }

    /// Nearest frame at or above `from` running `symbol` (bounded, without crossing a
    /// kernel entry), as [`Cx::find`] from the leaf.
    fn find_from(&self, from: u32, symbol: Symbol) -> Option<u32> {
        let mut f = from;
        for _ in 0..super::MAX_FIND_DEPTH {
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return None;
            }
            if self.locs.list[fr.loc as usize].symbol == symbol {
                return Some(f);
            }
            if fr.flags & super::KERNEL_ENTRY != 0 {
                return None;
            }
            f = fr.parent;
        }
        None
    }
}
