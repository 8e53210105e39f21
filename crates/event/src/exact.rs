//! Exact steps: what a decoder that sees every call, return, jump between functions,
//! syscall and signal of a thread (the emulate backend) hands the exact stack writer,
//! one thread at a time, without an [`crate::Event`] per branch.
//!
//! Functions are numbered by the decoder in a [`Functions`] table; a step names where
//! control went by that number, and by address when the decoder saw it.
//!
//! ```
//! use ptscope_event::exact::{ExactKind, ExactStep, Functions, Restart};
//!
//! let mut f = Functions::default();
//! let main = f.add(0x1000, true, "main");
//! let leaf = f.add(0x2000, true, "leaf");
//! let steps = [
//!     ExactStep::new(0, ExactKind::Start(Restart::First), main),
//!     ExactStep::new(5, ExactKind::Call { ret: 0x1005 }, leaf).at(0x2000),
//!     ExactStep::new(7, ExactKind::Return, main).at(0x1005),
//! ];
//! assert_eq!(f.name(steps[1].to), "leaf");
//! assert!(steps[1].at_entry(&f));
//! ```

/// A function's number in a [`Functions`] table.
pub type FuncId = u32;

/// A destination the decoder never saw (the thread ended, or a snapshot was cut, right
/// after an indirect branch).
pub const UNKNOWN_FUNC: FuncId = u32::MAX;

/// Code whose jumps leave frames behind: glibc's and musl's `longjmp` family
/// (`__longjmp`, `____longjmp_chk`, `__libc_siglongjmp`, …), libgcc's and LLVM's
/// unwinders, OCaml's raise functions and Go's `gogo`. Shared by the stack writers and
/// the decoders that must tell an unwind from a tail call before the writers see it.
pub fn exits_non_locally(name: &str) -> bool {
    // `_Unwind_Resume@plt` is its caller's stub, which only jumps to the unwinder.
    if name.ends_with("@plt") {
        return false;
    }
    // Without a symbol version (`longjmp@@GLIBC_2.2.5`).
    let name = name.split('@').next().unwrap_or(name);
    name.contains("longjmp")
        || name.starts_with("_Unwind_")
        || name.starts_with("caml_raise")
        || name.contains("libunwind")
        || matches!(name, "gogo" | "runtime.gogo")
}

/// What the stack writer needs to know of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its entry address.
    pub entry: u64,
    /// A symbol (or unwinding table) names it; otherwise it is named after an address
    /// and its name never decides the stack's shape.
    pub known: bool,
    /// Its name as traces show it.
    pub name: Box<str>,
}

/// The functions a decoder's steps refer to, by [`FuncId`].
#[derive(Clone, Debug, Default)]
pub struct Functions {
    list: Vec<Function>,
}

impl Functions {
    /// Adds a function, returning its number.
    pub fn add(&mut self, entry: u64, known: bool, name: &str) -> FuncId {
        self.list.push(Function {
            entry,
            known,
            name: name.into(),
        });
        (self.list.len() - 1) as FuncId
    }

    /// The function numbered `id`, if there is one.
    pub fn get(&self, id: FuncId) -> Option<&Function> {
        self.list.get(id as usize)
    }

    /// The function's name (`[unknown]` for [`UNKNOWN_FUNC`]).
    pub fn name(&self, id: FuncId) -> &str {
        self.get(id).map_or("[unknown]", |f| &f.name)
    }

    /// How many functions there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Why tracing (re)starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Restart {
    /// The thread's first code (or a snapshot's).
    First,
    /// Where it stopped: after a syscall, or where an asynchronous stop left it.
    Resume,
    /// A signal handler, delivered to the stopped code.
    Handler,
    /// The code `rt_sigreturn` resumes (a handler is done).
    Sigreturn,
}

/// What a step is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ExactKind {
    /// Tracing (re)starts, in `to`.
    Start(Restart),
    /// A call to `to`, returning to `ret`.
    Call {
        /// The return address the call pushed.
        ret: u64,
    },
    /// A return, into `to`.
    Return,
    /// A jump (or taken conditional branch) into another function `to`: a tail call, a
    /// `.cold` part, a non-local exit.
    Jump {
        /// An indirect jump (its target came from a register or memory).
        indirect: bool,
    },
    /// Tracing stops at a syscall (`to`: the function making it).
    Syscall {
        /// The instruction after the syscall.
        resume: u64,
        /// It is `rt_sigreturn`: a handler is done.
        sigreturn: bool,
    },
    /// Tracing stops asynchronously: a signal is delivered to `to`'s code.
    Async,
}

/// One step of a thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExactStep {
    /// When it happened (ns on the trace's clock).
    pub time: u64,
    /// What it is.
    pub kind: ExactKind,
    /// The function control is in after it ([`UNKNOWN_FUNC`] if never seen).
    pub to: FuncId,
    /// The exact address control went to, or 0 when the decoder knows only the function.
    pub to_addr: u64,
}

impl ExactStep {
    /// A step into `to` at an address not known.
    pub fn new(time: u64, kind: ExactKind, to: FuncId) -> Self {
        ExactStep {
            time,
            kind,
            to,
            to_addr: 0,
        }
    }

    /// The step with its exact destination.
    pub fn at(mut self, addr: u64) -> Self {
        self.to_addr = addr;
        self
    }

    /// True when the step lands on its function's entry (known only with an address).
    pub fn at_entry(&self, f: &Functions) -> bool {
        self.to_addr != 0 && f.get(self.to).is_some_and(|f| f.entry == self.to_addr)
    }
}
