//! Choosing between the dlfilter and the text path, and falling back to text.

use crate::{DlfilterOptions, DlfilterScript, Error};
use ptscope_decode::{PerfScript, PerfScriptOptions, Stats, Warning};
use ptscope_event::{Event, EventData, Kind, StringTable, Symbol};
use std::path::Path;
use std::process::{Command, Stdio};

/// perf's `major.minor` from `perf --version` (`perf version 6.1.187`).
pub fn perf_version(perf: &Path) -> Option<(u32, u32)> {
    let out = Command::new(perf)
        .arg("--version")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v = text.trim().strip_prefix("perf version ")?;
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// dlfilters arrived in perf 5.14.
pub fn version_supports_dlfilter(v: (u32, u32)) -> bool {
    v >= (5, 14)
}

/// True for the branches the filter drops by default: plain jumps (`jmp`/`jcc`, not
/// in a transaction, no trace start/end) whose source and target are the same symbol.
pub fn is_dropped_jump(event: &Event, strings: &StringTable) -> bool {
    match event {
        Event::Ok {
            in_transaction: false,
            data:
                EventData::Trace {
                    change: None,
                    kind: Some(Kind::Jump),
                    src,
                    dst,
                },
            ..
        } => {
            matches!(src.symbol, Symbol::FromPerf(s) if !strings.get(s).starts_with("[unknown @ "))
                && src.symbol == dst.symbol
                && src.dso == dst.dso
        }
        _ => false,
    }
}

/// Either decoder, driven the same way.
#[derive(Debug)]
pub enum AnyScript {
    /// `perf script --dlfilter` with binary records.
    Dlfilter {
        /// The running script.
        script: Box<DlfilterScript>,
        /// Options to restart on the text path if perf stops mid-stream.
        fallback: Option<Box<PerfScriptOptions>>,
        /// Events delivered so far (to skip them on the text path after a fallback).
        delivered: u64,
    },
    /// `perf script` text.
    Text {
        /// The running script.
        script: Box<PerfScript>,
        /// Events of the text stream still to skip (already delivered by the dlfilter).
        skip: u64,
    },
}

/// Which decoder to use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Choice {
    /// The dlfilter when perf supports it, else text (with a notice).
    #[default]
    Auto,
    /// The dlfilter, or an error.
    Dlfilter,
    /// Text.
    Text,
}

fn text_options(o: &DlfilterOptions) -> PerfScriptOptions {
    let mut t = PerfScriptOptions::new(&o.input);
    t.perf = o.perf.clone();
    t.kind = o.kind;
    t.extra_args = o.extra_args.clone();
    t
}

/// Starts the chosen decoder. With [`Choice::Auto`], an old perf or a filter perf
/// will not load falls back to text, and the returned notice says why (one line).
pub fn open(
    options: &DlfilterOptions,
    strings: StringTable,
    choice: Choice,
) -> Result<(AnyScript, Option<String>), Error> {
    let text = text_options(options);
    let to_text = |strings: StringTable, why: Option<String>| -> Result<_, Error> {
        let script = PerfScript::spawn_with_strings(&text, strings)?;
        Ok((
            AnyScript::Text {
                script: Box::new(script),
                skip: 0,
            },
            why,
        ))
    };
    if choice == Choice::Text {
        return to_text(strings, None);
    }
    let refuse = |why: String| -> Result<(AnyScript, Option<String>), Error> {
        Err(Error::Unsupported(why))
    };
    match perf_version(&options.perf) {
        Some(v) if version_supports_dlfilter(v) => {}
        other => {
            let why = match other {
                Some((a, b)) => format!("perf {a}.{b} is older than 5.14"),
                None => format!("cannot tell the version of {}", options.perf.display()),
            };
            if choice == Choice::Dlfilter {
                return refuse(why);
            }
            return to_text(
                strings,
                Some(format!("ptscope: {why}; decoding perf script text instead")),
            );
        }
    }
    let backup = strings.clone();
    let mut script = match DlfilterScript::spawn_with_strings(options, strings) {
        Ok(s) => s,
        Err(e) if choice == Choice::Auto => {
            return to_text(
                backup,
                Some(format!("ptscope: {e}; decoding perf script text instead")),
            )
        }
        Err(e) => return Err(e),
    };
    match script.started() {
        Ok(true) => Ok((
            AnyScript::Dlfilter {
                script: Box::new(script),
                fallback: (choice == Choice::Auto).then(|| Box::new(text)),
                delivered: 0,
            },
            None,
        )),
        _ => {
            let stderr = script.stderr_now();
            let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let why = format!("perf did not load the dlfilter ({})", first.trim());
            if choice == Choice::Dlfilter {
                return refuse(why);
            }
            to_text(
                backup,
                Some(format!("ptscope: {why}; decoding perf script text instead")),
            )
        }
    }
}

impl AnyScript {
    /// The next event. If perf stops mid-stream on the dlfilter path and a fallback is
    /// allowed, decoding restarts on the text path after the events already delivered,
    /// and the returned error-free stream continues; the notice goes to stderr.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        loop {
            match self {
                AnyScript::Dlfilter {
                    script,
                    fallback,
                    delivered,
                } => match script.next_event() {
                    Ok(Some(e)) => {
                        *delivered += 1;
                        return Ok(Some(e));
                    }
                    Ok(None) => return Ok(None),
                    Err(e @ Error::Truncated { .. }) => {
                        let Some(opts) = fallback.take() else {
                            return Err(e);
                        };
                        let stderr = script.stderr_now();
                        eprintln!(
                            "ptscope: {e}: {}; continuing with perf script text",
                            stderr.lines().last().unwrap_or("no message from perf")
                        );
                        let strings = script.take_strings();
                        let text = PerfScript::spawn_with_strings(&opts, strings)?;
                        *self = AnyScript::Text {
                            script: Box::new(text),
                            skip: *delivered,
                        };
                    }
                    Err(e) => return Err(e),
                },
                AnyScript::Text { script, skip } => {
                    let Some(e) = script.next_event()? else {
                        return Ok(None);
                    };
                    if *skip == 0 {
                        return Ok(Some(e));
                    }
                    // Jumps the filter dropped were never counted as delivered.
                    if !is_dropped_jump(&e, script.strings()) {
                        *skip -= 1;
                    }
                }
            }
        }
    }

    /// True on the dlfilter path.
    pub fn is_dlfilter(&self) -> bool {
        matches!(self, AnyScript::Dlfilter { .. })
    }

    /// The table the events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        match self {
            AnyScript::Dlfilter { script, .. } => script.strings(),
            AnyScript::Text { script, .. } => script.strings(),
        }
    }

    /// Takes the string table, leaving an empty one.
    pub fn take_strings(&mut self) -> StringTable {
        match self {
            AnyScript::Dlfilter { script, .. } => script.take_strings(),
            AnyScript::Text { script, .. } => script.take_strings(),
        }
    }

    /// Totals so far.
    pub fn stats(&self) -> Stats {
        match self {
            AnyScript::Dlfilter { script, .. } => script.stats(),
            AnyScript::Text { script, .. } => *script.decoder().stats(),
        }
    }

    /// The first warnings kept verbatim.
    pub fn warnings(&self) -> Vec<Warning> {
        match self {
            AnyScript::Dlfilter { script, .. } => script.warnings().to_vec(),
            AnyScript::Text { script, .. } => script.decoder().warnings().to_vec(),
        }
    }

    /// Waits for perf and reports how it exited.
    pub fn finish(&mut self) -> Result<(), Error> {
        match self {
            AnyScript::Dlfilter { script, .. } => script.finish(),
            AnyScript::Text { script, .. } => Ok(script.finish()?),
        }
    }
}
