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
//!
//! Which jumps may leave frames behind at all: only code made for it (`longjmp`, the
//! unwinders, OCaml's raise functions, Go's `gogo`) jumps into the middle of an
//! ancestor's function. Ordinary code jumps into the middle of another *symbol* when GCC
//! split a function into hot and `.cold` parts: stripped, each part is named after its
//! own FDE (`python3.11+0x4517d5`), and an outer call of the same function may be running
//! in the part the inner call jumps to (Python's nested imports). Taken as an unwind, the
//! frames between were dropped and the returns after it learnt wrong callers of the
//! root for the rest of the run. A jump from unnamed code (`__longjmp` in a stripped
//! libc, called by the exported `longjmp`) still counts when its caller is an unwinder,
//! or when it crosses objects, which a function's parts never do.

use super::frames::{unversioned, Flow, Join, Loc};
use super::ingest::Cx;
use ptscope_event::Symbol;

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
    let name = unversioned(name);
    match name {
        "_Unwind_Resume" => Some(Landing::Above),
        "_Unwind_RaiseException" | "_Unwind_Resume_or_Rethrow" | "_Unwind_ForcedUnwind" => {
            Some(Landing::AtOrAbove)
        }
        _ => None,
    }
}

/// Code whose jumps leave frames behind: glibc's and musl's `longjmp` family
/// (`__longjmp`, `____longjmp_chk`, `__libc_siglongjmp`, …), libgcc's and LLVM's
/// unwinders, OCaml's raise functions and Go's `gogo`.
pub(crate) fn exits_non_locally(name: &str) -> bool {
    let name = unversioned(name);
    name.contains("longjmp")
        || name.starts_with("_Unwind_")
        || name.starts_with("caml_raise")
        || name.contains("libunwind")
        || matches!(name, "gogo" | "runtime.gogo")
}

/// The file an unnamed function is in, from the naming step's `FILE+0xSTART` (a function
/// only `.eh_frame` knows); `None` for a name that says what the function is.
pub(crate) fn fde_file(name: &str) -> Option<&str> {
    let (file, start) = name.rsplit_once("+0x")?;
    let hex = !start.is_empty() && start.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !file.is_empty()).then_some(file)
}

impl<T> Cx<'_, T> {
    /// Whether a jump from `src` into the middle of another function may be a non-local
    /// exit, to be taken as an unwind when that function is an ancestor's (see the
    /// module's documentation); otherwise it goes on in the same frame.
    pub(super) fn may_exit_non_locally(&self, src: &Loc, dst: &Loc) -> bool {
        let strings = self.strings;
        let name = |s: Symbol| match s {
            Symbol::FromPerf(n) => Some(strings.get(n)),
            _ => None,
        };
        let leaf = self.ts.leaf;
        if !self.is_sentinel(leaf) {
            let caller = self.ts.frames[leaf as usize].parent;
            if self
                .symbol(caller)
                .and_then(name)
                .is_some_and(exits_non_locally)
            {
                return true;
            }
        }
        let src_name = name(src.symbol);
        match src_name {
            Some(n) if exits_non_locally(n) => return true,
            Some(n) if !n.starts_with("[unknown") && fde_file(n).is_none() => return false,
            _ => {}
        }
        // Unnamed code: the parts of one function are in one object.
        if src.dso.is_some() && dst.dso.is_some() {
            return src.dso != dst.dso;
        }
        match (
            src_name.and_then(fde_file),
            name(dst.symbol).and_then(fde_file),
        ) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        }
    }

    /// A jump from an unwinder entry point into the middle of another function: lands in
    /// the right ancestor, or starts a segment of its own when the pad's frame is beyond
    /// what the segment knows. False when `src` is not an unwinder entry point (or the
    /// unwinder's frame is not on the stack), for the general rules to decide.
    pub(super) fn landing_pad(&mut self, src: &Loc, dst: &Loc) -> bool {
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
}
