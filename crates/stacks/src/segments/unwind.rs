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

use super::frames::{unversioned, Flow, Join, Loc, NONE, SENTINEL};
use super::ingest::{Cx, MAX_FIND_DEPTH};
use super::stitch::is_thread_root;
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

/// How long a call instruction can be: 5 bytes for a direct call, 2-7 for an indirect one
/// (`call *%rax` to `call *disp32(%rsp)`), up to 9 with a `notrack` or `bnd` prefix.
const CALL_LEN: std::ops::RangeInclusive<u64> = 2..=9;

/// What a jump into the middle of another function does to the frame that jumped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Exit {
    /// It may go on in the same frame: the two functions may be parts of one (a `.cold`
    /// part), or the jump is a PLT stub's.
    No,
    /// It leaves the frame (ordinary code jumping into another function's middle: a
    /// hand-written unwinder, a coroutine switch), unless its target is code shared by
    /// several functions (glibc's `wmemset` jumps into `memset`'s body): it lands in an
    /// ancestor running the target, or past the known root, or is a tail jump after all.
    Likely,
    /// It comes from code made for non-local exits (`longjmp`, the unwinders, OCaml's raise
    /// functions, Go's `gogo`), or from a function such code called: never a tail jump.
    Certain,
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

pub(crate) use ptscope_event::exact::exits_non_locally;

/// The file an unnamed function is in, from the naming step's `FILE+0xSTART` (a function
/// only `.eh_frame` knows); `None` for a name that says what the function is.
pub(crate) fn fde_file(name: &str) -> Option<&str> {
    let (file, start) = name.rsplit_once("+0x")?;
    let hex = !start.is_empty() && start.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && !file.is_empty()).then_some(file)
}

/// `name` without a hot/cold split's suffix: GCC's `X.cold` (`X.cold.1`), as perf prints it
/// for C (`main.cold`) or demangled (`parse [clone .cold]`; perf's short demangling drops
/// the clone suffix altogether, giving both parts one name).
fn hot_part(name: &str) -> &str {
    let name = unversioned(name);
    if let Some(base) = name.strip_suffix(" [clone .cold]") {
        return base;
    }
    match name.rfind(".cold") {
        Some(i)
            if name[i + 5..].is_empty()
                || name[i + 5..]
                    .strip_prefix('.')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            &name[..i]
        }
        _ => name,
    }
}

/// Does `name` say what the function is (not `[unknown …]`, not a naming step's
/// `FILE+0xSTART`)?
fn is_named(name: &str) -> bool {
    !name.starts_with("[unknown") && fde_file(name).is_none()
}

impl<T> Cx<'_, T> {
    fn name_of(&self, symbol: Symbol) -> Option<&str> {
        match symbol {
            Symbol::FromPerf(n) => Some(self.strings.get(n)),
            _ => None,
        }
    }

    /// Are `a` and `b` in one object file (by the branch's DSOs, else by the naming step's
    /// file names)?
    fn same_object(&self, a: &Loc, b: &Loc) -> bool {
        if a.dso.is_some() && b.dso.is_some() {
            return a.dso == b.dso;
        }
        match (
            self.name_of(a.symbol).and_then(fde_file),
            self.name_of(b.symbol).and_then(fde_file),
        ) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        }
    }

    /// Could `a` and `b` be two parts of one function (GCC's hot and `.cold` parts)? Named,
    /// only if their names say so; unnamed (a stripped object names each part after its
    /// own FDE), whenever they are in one object.
    fn parts_of_one_function(&self, a: &Loc, b: &Loc) -> bool {
        match (self.name_of(a.symbol), self.name_of(b.symbol)) {
            (Some(x), Some(y)) if is_named(x) && is_named(y) => hot_part(x) == hot_part(y),
            _ => self.same_object(a, b),
        }
    }

    /// Whether a jump from `src` into the middle of another function leaves the frame that
    /// jumped (see the module's documentation), landing in a frame already on the stack or
    /// beyond what the segment knows.
    pub(super) fn exit_by_jump(&self, src: &Loc, dst: &Loc) -> Exit {
        let leaf = self.ts.leaf;
        if !self.is_sentinel(leaf) {
            let caller = self.ts.frames[leaf as usize].parent;
            if self
                .symbol(caller)
                .and_then(|s| self.name_of(s))
                .is_some_and(exits_non_locally)
            {
                return Exit::Certain;
            }
        }
        match self.name_of(src.symbol) {
            Some(n) if exits_non_locally(n) => return Exit::Certain,
            // A PLT stub jumps to its target's entry, or into the stub that binds it
            // (perf may name that one after `_init`, whose size it stretches over `.plt`).
            Some(n) if n.ends_with("@plt") => return Exit::No,
            _ => {}
        }
        if self.parts_of_one_function(src, dst) {
            Exit::No
        } else {
            Exit::Likely
        }
    }

    /// The segment is not known down to a thread's first function (`_start`,
    /// `start_thread`, …): frames beyond its outermost known one may run anything.
    pub(super) fn root_unknown(&self) -> bool {
        let mut f = self.ts.leaf;
        for _ in 0..MAX_FIND_DEPTH {
            let fr = self.ts.frames[f as usize];
            if fr.flags & SENTINEL != 0 {
                return true;
            }
            if self.is_sentinel(fr.parent) {
                let name = self.symbol(f).and_then(|s| self.name_of(s));
                return !name.is_some_and(is_thread_root);
            }
            f = fr.parent;
        }
        true
    }

    /// Control lands in frame `f`, already on the stack: the frames above it are left
    /// (unwound, never returned through).
    pub(super) fn land_in(&mut self, f: u32) {
        self.ts.leaf = f;
        self.record(Flow::Return);
    }

    /// Control lands in the middle of `dst`'s function, which no frame of the segment
    /// runs, by a transfer that certainly left its frame: that function's frame is beyond
    /// what the segment knows (a snapshot or a gap began after it was entered). The landing
    /// starts a segment of its own, lined up by the write pass with the frames open before
    /// it outside the segment's known ones, which cannot be it. False, and nothing done,
    /// when the segment is known down to a thread's first function.
    pub(super) fn land_beyond_root(&mut self, dst: &Loc) -> bool {
        if !self.root_unknown() {
            return false;
        }
        let skip = self.frames_below(NONE);
        self.split(Join::Landed { skip });
        self.ensure_current(dst);
        true
    }

    /// How many frames there are from the leaf down to `stop` (not counted), or to the
    /// segment's sentinel.
    fn frames_below(&self, stop: u32) -> u32 {
        let mut n = 0;
        let mut f = self.ts.leaf;
        while f != stop && !self.is_sentinel(f) {
            n += 1;
            f = self.ts.frames[f as usize].parent;
        }
        n
    }

    /// Does a return to `dst` go back just after the call at `site` (a location id)? `None`
    /// when the call is unknown.
    pub(super) fn returns_after(&self, site: u32, dst: &Loc) -> Option<bool> {
        if site == NONE || dst.ip == 0 {
            return None;
        }
        let call = self.locs.get(self.strings, site).ip;
        (call != 0).then(|| CALL_LEN.contains(&dst.ip.wrapping_sub(call)))
    }

    /// A return to `dst` that does not go back where the call that made the returning
    /// frame was (the leaf is now that frame's caller): the return leaves more frames than
    /// its own (a hand-written unwinder, a coroutine switch, OCaml's raise). Control lands
    /// in the nearest frame running `dst`'s function, else beyond the known root. False,
    /// and nothing done, when nothing says where (the segment is known down to a thread's
    /// first function).
    pub(super) fn long_return(&mut self, dst: &Loc) -> bool {
        match self.find(dst.symbol) {
            Some(f) => {
                self.land_in(f);
                true
            }
            None => self.land_beyond_root(dst),
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
            self.land_in(f);
            return true;
        }
        // The pad's frame is below the segment's known root: only the frames a later
        // return reveals, or those open before a gap, can say where it sits; the frames
        // from the leaf up to where the search began cannot be it.
        let mut skip = self.frames_below(from);
        // `_Unwind_Resume` whose caller is beyond the known root (a gap or a snapshot began
        // inside it): that caller, the first open frame below the unwinder, is ruled out
        // too. Without it the pad landed in the caller itself, in a recursion one level
        // too deep at every resume until the catch.
        if how == Landing::Above && self.is_sentinel(caller) {
            skip += 1;
        }
        self.split(Join::Landed { skip });
        self.ensure_current(dst);
        true
    }
}
