//! Demangling of Rust, C++ and OCaml symbol names, with bounded input and output.

use std::borrow::Cow;
use std::fmt::{self, Write};

/// Longest mangled name that is demangled; longer names are only truncated.
///
/// magic-trace issue #286 has an 805 614-byte Rust symbol: demangling it is slow and its
/// output useless, and FXT strings cannot hold it anyway.
pub const MAX_INPUT_LEN: usize = 64 * 1024;

/// Longest name returned by [`demangle`], in bytes, including the trailing `…`.
///
/// FXT inline strings are limited to 32 KiB; 4 KiB keeps traces readable and small.
pub const MAX_OUTPUT_LEN: usize = 4096;

const ELLIPSIS: &str = "…";

/// The mangling scheme a name was recognised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Rust legacy (`_ZN…17h<hash>E`) or v0 (`_R…`).
    Rust,
    /// Itanium C++ ABI (`_Z…`).
    Cpp,
    /// OCaml native code (`camlModule__name_123`).
    Ocaml,
}

/// Demangles `name` with whichever scheme recognises it, or returns it unchanged.
///
/// Rust names lose their hash (`{:#}` form). Results are capped at [`MAX_OUTPUT_LEN`] bytes.
///
/// ```
/// use ptscope_symbols::demangle;
/// assert_eq!(demangle("camlStdlib__List__iter_1234"), "Stdlib.List.iter");
/// assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
/// assert_eq!(demangle("main"), "main");
/// ```
pub fn demangle(name: &str) -> Cow<'_, str> {
    match demangle_with_scheme(name) {
        Some((s, _)) => Cow::Owned(s),
        None => truncate(name),
    }
}

/// Like [`demangle`], but says which scheme matched; `None` if the name is not mangled.
pub fn demangle_with_scheme(name: &str) -> Option<(String, Scheme)> {
    if name.len() > MAX_INPUT_LEN {
        return None;
    }
    if let Some(s) = demangle_rust(name) {
        return Some((s, Scheme::Rust));
    }
    if let Some(s) = demangle_cpp(name) {
        return Some((s, Scheme::Cpp));
    }
    demangle_ocaml(name).map(|s| (s, Scheme::Ocaml))
}

/// Demangles a Rust symbol (legacy or v0), without the hash; `None` if it is not one.
pub fn demangle_rust(name: &str) -> Option<String> {
    if name.len() > MAX_INPUT_LEN {
        return None;
    }
    let d = rustc_demangle::try_demangle(name).ok()?;
    // A plain C++ `_ZN…E` name also parses as legacy Rust; only trust it when it is v0 or
    // carries the `17h<hash>E` tail rustc always emits, so C++ gets the C++ demangler.
    let is_rust = name.starts_with("_R")
        || name.starts_with("R")
        || name.starts_with("__R")
        || has_legacy_hash(name);
    if !is_rust {
        return None;
    }
    bounded(|w| write!(w, "{d:#}"))
}

fn has_legacy_hash(name: &str) -> bool {
    // `17h` + 16 hex digits + `E`, optionally followed by a `.llvm.NNN`-style suffix
    // (cut at the last `E.`: the name itself may hold dots, `_$LT$core..str..iter…`).
    let core = match name.rfind("E.") {
        Some(i) if !name.ends_with('E') => &name[..=i],
        _ => name,
    };
    let b = core.as_bytes();
    if b.len() < 20 || b[b.len() - 1] != b'E' {
        return false;
    }
    let tail = &b[b.len() - 20..b.len() - 1];
    tail.starts_with(b"17h") && tail[3..].iter().all(u8::is_ascii_hexdigit)
}

/// Demangles an Itanium C++ symbol; `None` if it is not one.
pub fn demangle_cpp(name: &str) -> Option<String> {
    if name.len() > MAX_INPUT_LEN || !name.starts_with("_Z") {
        return None;
    }
    let sym = cpp_demangle::Symbol::new(name).ok()?;
    let opts = cpp_demangle::DemangleOptions::new();
    // `Symbol::demangle` builds an unbounded String; write through a capped writer instead.
    bounded(|w| {
        let s = sym.demangle_with_options(&opts).map_err(|_| fmt::Error)?;
        w.write_str(&s)
    })
}

/// Demangles an OCaml native-code symbol; `None` if it is not one.
///
/// Rules (magic-trace's, with one deliberate difference): the name starts with `caml`; `__`
/// becomes `.`; `$XX` (two hex digits) becomes that byte and a malformed `$` escape stays as
/// is; a trailing `_NNN` (digits, possibly none) is dropped. Unlike magic-trace, the character
/// after `caml` must be an upper-case letter (a module name) or `$`, so C runtime functions
/// such as `caml_call_gc` or `caml_apply3` keep their names instead of becoming `_call_gc`.
///
/// ```
/// use ptscope_symbols::demangle_ocaml;
/// assert_eq!(demangle_ocaml("camlRaise_test__raise_after_265").as_deref(), Some("Raise_test.raise_after"));
/// assert_eq!(demangle_ocaml("caml_call_gc"), None);
/// ```
pub fn demangle_ocaml(name: &str) -> Option<String> {
    let rest = name.strip_prefix("caml")?;
    let first = *rest.as_bytes().first()?;
    if !(first.is_ascii_uppercase() || first == b'$') || name.len() > MAX_INPUT_LEN {
        return None;
    }
    let b = rest.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // Left to right, like magic-trace's parser: `_` + digits to the end is the id
            // suffix, so `Foo__123` is `Foo.123` and not `Foo_`.
            b'_' if b[i + 1..].iter().all(u8::is_ascii_digit) => break,
            b'_' if b.get(i + 1) == Some(&b'_') => {
                out.push(b'.');
                i += 2;
            }
            b'$' => match (b.get(i + 1).and_then(hex), b.get(i + 2).and_then(hex)) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 3;
                }
                _ => {
                    out.push(b'$');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    let s = match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    Some(truncate(&s).into_owned())
}

fn hex(c: &u8) -> Option<u8> {
    (*c as char).to_digit(16).map(|d| d as u8)
}

/// Cuts `s` to [`MAX_OUTPUT_LEN`] bytes at a character boundary, marking the cut with `…`.
pub fn truncate(s: &str) -> Cow<'_, str> {
    if s.len() <= MAX_OUTPUT_LEN {
        return Cow::Borrowed(s);
    }
    let mut cut = MAX_OUTPUT_LEN - ELLIPSIS.len();
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!("{}{ELLIPSIS}", &s[..cut]))
}

/// Writes at most [`MAX_OUTPUT_LEN`] bytes, then fails so the formatter stops early.
struct Bounded {
    buf: String,
    full: bool,
}

impl Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_OUTPUT_LEN - ELLIPSIS.len() - self.buf.len();
        if s.len() <= room {
            self.buf.push_str(s);
            return Ok(());
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.buf.push_str(&s[..cut]);
        self.full = true;
        Err(fmt::Error)
    }
}

fn bounded(f: impl FnOnce(&mut Bounded) -> fmt::Result) -> Option<String> {
    let mut w = Bounded {
        buf: String::new(),
        full: false,
    };
    match f(&mut w) {
        Ok(()) => Some(w.buf),
        Err(_) if w.full => {
            w.buf.push_str(ELLIPSIS);
            Some(w.buf)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy Rust name whose path holds dots (`_$LT$core..str..iter…`, a trait impl)
    /// is Rust, with or without an LLVM suffix; a C++ name without the hash is not.
    #[test]
    fn legacy_rust_names_with_dots() {
        let n = "_ZN90_$LT$core..str..iter..Split$LT$P$GT$$u20$as$u20$core..iter..traits..iterator..Iterator$GT$4next17h5f615ffa1a68a05dE";
        let want = "<core::str::iter::Split<P> as core::iter::traits::iterator::Iterator>::next";
        assert_eq!(demangle_rust(n).as_deref(), Some(want));
        assert_eq!(
            demangle_rust(&format!("{n}.llvm.1234")).as_deref(),
            Some(want)
        );
        assert_eq!(demangle_rust("_ZN3foo3barE"), None);
    }

    #[test]
    fn ocaml_matches_magic_trace_cases() {
        let d = |s| demangle_ocaml(s);
        assert_eq!(
            d("camlAsync_unix__Unix_syscalls__to_string_57255").as_deref(),
            Some("Async_unix.Unix_syscalls.to_string")
        );
        assert_eq!(d("caml$3f").as_deref(), Some("?"));
        assert_eq!(d("caml$7l").as_deref(), Some("$7l"));
        assert_eq!(d("dr__$3e$21_358"), None);
        assert_eq!(
            d("camlRaise_test__raise_after_265").as_deref(),
            Some("Raise_test.raise_after")
        );
        assert_eq!(
            d("camlStdlib__List__iter_1234").as_deref(),
            Some("Stdlib.List.iter")
        );
    }

    #[test]
    fn ocaml_edge_cases() {
        let d = |s| demangle_ocaml(s);
        // Decisions: see `demangle_ocaml`'s doc.
        assert_eq!(d("caml"), None);
        assert_eq!(d("caml_call_gc"), None);
        assert_eq!(d("caml_apply3"), None);
        assert_eq!(d("camlFoo_").as_deref(), Some("Foo"));
        assert_eq!(d("camlFoo__123").as_deref(), Some("Foo.123"));
        assert_eq!(d("camlFoo__bar_baz").as_deref(), Some("Foo.bar_baz"));
        assert_eq!(d("camlFoo__bar_12x").as_deref(), Some("Foo.bar_12x"));
        assert_eq!(d("camlFoo__$3e$3e$3d_99").as_deref(), Some("Foo.>>="));
        assert_eq!(d("camlFoo$").as_deref(), Some("Foo$"));
        assert_eq!(d("camlFoo$4").as_deref(), Some("Foo$4"));
        assert_eq!(d("camlFoo.bar_7").as_deref(), Some("Foo.bar"));
        assert_eq!(d("camlA___b").as_deref(), Some("A._b"));
        // An escape yielding invalid UTF-8 degrades to U+FFFD rather than failing.
        assert_eq!(d("camlX$ff").as_deref(), Some("X\u{fffd}"));
    }

    #[test]
    fn rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(
            demangle_with_scheme("_ZN3foo3barEv").map(|x| x.1),
            Some(Scheme::Cpp)
        );
        assert_eq!(demangle("_Znotvalid"), "_Znotvalid");
        assert_eq!(demangle(""), "");
    }

    #[test]
    fn huge_names_are_capped() {
        // Shaped like magic-trace #286: a legacy Rust name of ~800 KB.
        let mut name = String::from("_ZN");
        while name.len() < 805_614 {
            name.push_str("10abcdefghij");
        }
        name.push_str("17h0123456789abcdefE");
        let t = std::time::Instant::now();
        let d = demangle(&name);
        assert!(d.len() <= MAX_OUTPUT_LEN, "{}", d.len());
        assert!(d.ends_with(ELLIPSIS));
        assert!(t.elapsed().as_secs() < 2);
        // Just under the input cap: demangled, output capped.
        let mut name = String::from("_ZN");
        while name.len() < MAX_INPUT_LEN - 40 {
            name.push_str("3abc");
        }
        name.push_str("17h0123456789abcdefE");
        let d = demangle(&name);
        assert!(d.starts_with("abc::abc::"));
        assert!(d.len() <= MAX_OUTPUT_LEN && d.ends_with(ELLIPSIS));
        let long = "camlX".repeat(5000);
        let d = demangle(&long);
        assert!(d.len() <= MAX_OUTPUT_LEN);
    }
}
