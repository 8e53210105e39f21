//! Choosing between the dlfilter and the text path, and falling back to text.
//!
//! Falling back mid-stream relies on the two paths giving the same events in the same
//! order (tests/equivalence.rs checks it on real recordings), except the jumps within
//! one symbol the filter drops unless asked to keep them ([`is_dropped_jump`]). So when
//! the dlfilter stream fails after N events (perf crashed, a record was corrupt), the
//! text path is started on the same file and its first N events, not counting the
//! jumps the filter would have dropped, are skipped: the caller sees every event once.
//! Events the dlfilter path delivered before noticing a corruption are kept as they
//! were (a corruption that still parses cannot be told from real data).

use crate::jit::JitNames;
use crate::{DlfilterOptions, DlfilterScript, Error};
use ptscope_decode::perf::{is_addr2line, stall_summary};
use ptscope_decode::{PerfError, PerfScript, PerfScriptOptions, Stats, Warning};
use ptscope_event::source::{EventSource, Finished, SourceError, TableMap};
use ptscope_event::{Event, EventData, Kind, StringTable, Symbol};
use std::path::Path;
use std::process::{Command, Stdio};

/// perf's `major.minor` from `perf --version` (`perf version 6.1.187`).
pub fn perf_version(perf: &Path) -> Option<(u32, u32)> {
    let out = ptscope_interrupt::children::die_with_ptscope(&mut Command::new(perf))
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
            let (src, dst) = (strings.location(*src), strings.location(*dst));
            matches!(src.symbol, Symbol::FromPerf(s) if !strings.get(s).starts_with("[unknown @ "))
                && src.symbol == dst.symbol
                && src.dso == dst.dso
        }
        _ => false,
    }
}

/// Either decoder, driven the same way; on the automatic choice, a dlfilter stream that
/// fails mid-way continues on the text path (see the module documentation).
///
/// Things to tell the user that are not errors (a fallback, a JIT map ignored) are
/// collected, not printed: [`AnyScript::take_notices`].
#[derive(Debug)]
pub struct AnyScript {
    inner: Inner,
    /// Options to restart on the text path if the dlfilter stream fails.
    fallback: Option<Box<PerfScriptOptions>>,
    /// The text path's options, to continue on after a stall.
    text: Box<PerfScriptOptions>,
    /// Events delivered so far.
    delivered: u64,
    /// Events of the text stream still to skip (already delivered by the dlfilter).
    skip: u64,
    /// Hides names from untrusted JIT maps on the text path (the dlfilter script has its own).
    jit: JitNames,
    notices: Vec<String>,
    /// The watchdog's stop was already returned as the stream's error: `finish` does not
    /// say it again.
    stall_said: bool,
}

#[derive(Debug)]
enum Inner {
    Dlfilter(Box<DlfilterScript>),
    Text(Box<PerfScript>),
    /// The text path continuing a dlfilter stream that failed: the names already
    /// delivered keep their handles, so the text script's names are moved into the
    /// dlfilter's table.
    Continued {
        script: Box<PerfScript>,
        strings: Box<StringTable>,
        map: TableMap,
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
/// will not load falls back to text, and the returned notice says why (one sentence,
/// without a program-name prefix); later notices come from [`AnyScript::take_notices`].
pub fn open(
    options: &DlfilterOptions,
    choice: Choice,
) -> Result<(AnyScript, Option<String>), Error> {
    let text = text_options(options);
    let any = |inner: Inner, fallback: Option<Box<PerfScriptOptions>>| AnyScript {
        inner,
        fallback,
        text: Box::new(text.clone()),
        delivered: 0,
        skip: 0,
        jit: JitNames::new(options.map_trust.clone()),
        notices: Vec::new(),
        stall_said: false,
    };
    let to_text = |why: Option<String>| -> Result<_, Error> {
        let script = PerfScript::spawn(&text)?;
        Ok((any(Inner::Text(Box::new(script)), None), why))
    };
    if choice == Choice::Text {
        return to_text(None);
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
            return to_text(Some(format!("{why}; decoding perf script text instead")));
        }
    }
    let mut script = match DlfilterScript::spawn(options) {
        Ok(s) => s,
        Err(e) if choice == Choice::Auto => {
            return to_text(Some(format!("{e}; decoding perf script text instead")))
        }
        Err(e) => return Err(e),
    };
    match script.started() {
        Ok(true) => {
            let fallback = (choice == Choice::Auto).then(|| Box::new(text.clone()));
            Ok((any(Inner::Dlfilter(Box::new(script)), fallback), None))
        }
        _ => {
            let exited = script.exited();
            let stderr = script.stderr_now();
            let first = stderr.lines().find(|l| !l.trim().is_empty()).map(str::trim);
            let why = match (first, exited) {
                (Some(said), _) => format!("perf did not load the dlfilter ({said})"),
                (None, Some(status)) => format!(
                    "perf did not load the dlfilter: it ended ({status}) before the filter's \
                     first record, saying nothing"
                ),
                (None, None) => "perf did not load the dlfilter, saying nothing".to_string(),
            };
            if choice == Choice::Dlfilter {
                return refuse(why);
            }
            to_text(Some(format!("{why}; decoding perf script text instead")))
        }
    }
}

impl AnyScript {
    /// The next event. If the dlfilter stream fails mid-way (perf stopped, a record was
    /// malformed, reading failed) and the choice was automatic, decoding continues on
    /// the text path after the events already delivered, with a notice; otherwise the
    /// error comes after every event decoded before it.
    pub fn next_event(&mut self) -> Result<Option<Event>, Error> {
        loop {
            // A perf the watchdog stopped, found at the end of its stream.
            let stall = match &mut self.inner {
                Inner::Dlfilter(script) => match script.next_event() {
                    Ok(Some(e)) => {
                        self.delivered += 1;
                        return Ok(Some(e));
                    }
                    // The end of the stream: perf ended by itself, or the watchdog
                    // ended it (a stall, which perf's clean end does not show).
                    Ok(None) => match script.stall() {
                        Some(stall) => stall,
                        None => return Ok(None),
                    },
                    // Asked to stop by an interrupt: what came is all there is.
                    Err(_) if script.interrupted() => return Ok(None),
                    Err(e) => match script.stall() {
                        // perf made no progress: on the text path it would wait as long
                        // again, unless what it waited for can be left out.
                        Some(stall) => stall,
                        None => {
                            self.fall_back_to_text(e)?;
                            continue;
                        }
                    },
                },
                Inner::Continued {
                    script,
                    strings,
                    map,
                } => {
                    let Some(mut e) = script.next_event()? else {
                        match script.stall() {
                            Some(stall) => {
                                self.continue_after_stall(stall)?;
                                continue;
                            }
                            None => return Ok(None),
                        }
                    };
                    if self.skip > 0 {
                        // Jumps the filter dropped were never counted as delivered
                        // (judged on perf's own names, as the filter did).
                        if !is_dropped_jump(&e, script.strings()) {
                            self.skip -= 1;
                        }
                        continue;
                    }
                    map.apply(&mut e, script.strings(), &mut *strings);
                    self.jit.apply(&mut e, &mut *strings);
                    self.delivered += 1;
                    return Ok(Some(e));
                }
                Inner::Text(script) => {
                    let Some(mut e) = script.next_event()? else {
                        match script.stall() {
                            Some(stall) => {
                                self.continue_after_stall(stall)?;
                                continue;
                            }
                            None => return Ok(None),
                        }
                    };
                    self.jit.apply(&mut e, script.decoder_mut().strings_mut());
                    self.delivered += 1;
                    return Ok(Some(e));
                }
            };
            self.continue_after_stall(stall)?;
        }
    }

    /// After the dlfilter stream failed mid-way (perf stopped, a record was malformed,
    /// reading failed): with the automatic choice, decoding continues on the text path
    /// after the events already delivered, with a notice; otherwise `e` is the error.
    fn fall_back_to_text(&mut self, e: Error) -> Result<(), Error> {
        let Inner::Dlfilter(script) = &mut self.inner else {
            return Err(e);
        };
        let Some(opts) = self.fallback.take() else {
            return Err(e);
        };
        let stderr = script.stderr_now();
        let perf_said = stderr
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .map_or(String::new(), |l| format!(" (perf said: {})", l.trim()));
        self.notices.push(format!(
            "the dlfilter stream failed after {} events: {e}{perf_said}; decoding the rest from perf script text",
            self.delivered
        ));
        // The names already delivered stay valid: the table is kept, and so is what is
        // known about the JIT maps among them (`continue_on_text` takes the script's).
        self.continue_on_text(&opts)
    }

    /// Starts `perf script` text with `opts`, to continue after the events already
    /// delivered: the names delivered keep their handles (the table is carried over).
    fn continue_on_text(&mut self, opts: &PerfScriptOptions) -> Result<(), Error> {
        let text = PerfScript::spawn(opts)?;
        self.skip = self.delivered;
        let old = std::mem::replace(
            &mut self.inner,
            Inner::Continued {
                script: Box::new(text),
                strings: Box::default(),
                map: TableMap::new(),
            },
        );
        let table = match old {
            Inner::Dlfilter(mut old) => {
                self.notices.extend(old.take_notices());
                self.jit = std::mem::take(&mut old.jit);
                old.into_strings()
            }
            Inner::Text(old) => old.into_strings(),
            Inner::Continued { strings, .. } => *strings,
        };
        if let Inner::Continued { strings, .. } = &mut self.inner {
            **strings = table;
        }
        Ok(())
    }

    /// perf made no progress and the watchdog stopped it. If it was waiting for its own
    /// lookup of inlined calls (`addr2line`, asked for with perf's default `--inline`),
    /// the rest is decoded without that lookup, with a notice; otherwise the stall is
    /// the stream's error, after every event decoded before it.
    fn continue_after_stall(&mut self, stall: PerfError) -> Result<(), Error> {
        let mut opts = self.text.clone();
        let summary = match &stall {
            PerfError::Stalled {
                command,
                waited,
                waiting_for: waiting_for @ Some((cmd, _)),
            } if is_addr2line(cmd) && !opts.extra_args.iter().any(|a| a == "--no-inline") => {
                stall_summary(command, waited, waiting_for)
            }
            _ => {
                self.stall_said = true;
                return Err(stall.into());
            }
        };
        opts.extra_args.push("--no-inline".into());
        self.notices.push(format!(
            "{summary}; the rest is decoded after the {} events before it, with `perf script \
             --no-inline` (no frames for inlined calls from there on)",
            self.delivered
        ));
        self.text = opts.clone();
        self.fallback = None;
        self.continue_on_text(&opts)
    }

    /// Things the user should know that are not errors, oldest first, each returned
    /// once: a fallback to the text path mid-stream, a JIT map whose names were hidden.
    /// The caller prints them (e.g. `ptscope: NOTICE` on stderr).
    pub fn take_notices(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.notices);
        if let Inner::Dlfilter(s) = &mut self.inner {
            out.extend(s.take_notices());
        }
        out.extend(self.jit.take_notices());
        out
    }

    /// True on the dlfilter path.
    pub fn is_dlfilter(&self) -> bool {
        matches!(self.inner, Inner::Dlfilter(_))
    }

    /// The table the events' names are interned in.
    pub fn strings(&self) -> &StringTable {
        match &self.inner {
            Inner::Dlfilter(script) => script.strings(),
            Inner::Text(script) => script.strings(),
            Inner::Continued { strings, .. } => strings,
        }
    }

    /// Gives the string table back.
    pub fn into_strings(self) -> StringTable {
        match self.inner {
            Inner::Dlfilter(script) => script.into_strings(),
            Inner::Text(script) => script.into_strings(),
            Inner::Continued { strings, .. } => *strings,
        }
    }

    /// Totals so far.
    pub fn stats(&self) -> Stats {
        match &self.inner {
            Inner::Dlfilter(script) => script.stats(),
            Inner::Text(script) | Inner::Continued { script, .. } => *script.decoder().stats(),
        }
    }

    /// The first warnings kept verbatim.
    pub fn warnings(&self) -> Vec<Warning> {
        match &self.inner {
            Inner::Dlfilter(script) => script.warnings().to_vec(),
            Inner::Text(script) | Inner::Continued { script, .. } => {
                script.decoder().warnings().to_vec()
            }
        }
    }

    /// Waits for perf and reports how it exited.
    pub fn finish(&mut self) -> Result<(), Error> {
        let r = match &mut self.inner {
            Inner::Dlfilter(script) => DlfilterScript::finish(script),
            Inner::Text(script) | Inner::Continued { script, .. } => {
                PerfScript::finish(script).map_err(Error::from)
            }
        };
        match r {
            Err(
                Error::Perf(PerfError::Stalled { .. })
                | Error::Text(ptscope_decode::Error::Perf(PerfError::Stalled { .. })),
            ) if self.stall_said => Ok(()),
            r => r,
        }
    }
}

impl EventSource for AnyScript {
    fn info(&self) -> ptscope_event::SourceInfo {
        match &self.inner {
            Inner::Dlfilter(script) => EventSource::info(&**script),
            Inner::Text(script) | Inner::Continued { script, .. } => EventSource::info(&**script),
        }
    }
    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        Ok(AnyScript::next_event(self)?)
    }
    fn strings(&self) -> &StringTable {
        AnyScript::strings(self)
    }
    fn stats(&self) -> Stats {
        AnyScript::stats(self)
    }
    fn warnings(&self) -> Vec<Warning> {
        AnyScript::warnings(self)
    }
    fn finish(mut self: Box<Self>) -> Finished {
        let failure = AnyScript::finish(&mut self).err().map(SourceError::from);
        let notices = self.take_notices();
        Finished {
            failure,
            notices,
            ..Finished::new(self.into_strings())
        }
    }
}
