//! Every message ptscope prints to a person goes through here (ripgrep's `messages.rs`
//! is the model): one place decides the `ptscope:` prefix, `-q`, and that a closed
//! terminal (after SIGHUP) never turns a message into a panic.

use std::fmt::Display;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `-q`: progress and informational messages are dropped; warnings and errors stay.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::SeqCst);
}

/// True under `-q`.
pub fn quiet() -> bool {
    QUIET.load(Ordering::SeqCst)
}

fn emit(line: std::fmt::Arguments<'_>) {
    // Writing to a terminal that went away (SIGHUP) must not abort the work in hand.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// A command's own output (a report) on standard output; a closed pipe (`| head`) ends
/// it quietly.
pub fn print(text: impl Display) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Progress and outcomes: "recording …", "wrote …".
pub fn info(msg: impl Display) {
    if !quiet() {
        emit(format_args!("ptscope: {msg}"));
    }
}

/// What an input's reader had to skip, as the reference tools report it (`ptscope: FILE:
/// what`): shown even under `-q`, without a `warning:` label, so it reads as theirs does.
pub fn note(msg: impl Display) {
    emit(format_args!("ptscope: {msg}"));
}

/// A stack writer's warning, worded as magic-trace words it (`Warning: perf reported an
/// error decoding the trace: …`): shown as it is, even under `-q`.
pub fn writer_warning(msg: impl Display) {
    emit(format_args!("{msg}"));
}

/// Something the user should know even under `-q`: the trace is usable but not whole.
pub fn warn(msg: impl Display) {
    emit(format_args!("ptscope: warning: {msg}"));
}

/// The reason a command failed, with each cause once: a cause whose text the message
/// already contains (io errors repeated by a wrapper's Display) is not printed again.
pub fn error(e: &anyhow::Error) {
    match crate::advice::for_error(e) {
        Some(advice) => emit(format_args!("ptscope: error: {}; {advice}", error_text(e))),
        None => emit(format_args!("ptscope: error: {}", error_text(e))),
    }
}

/// The text [`error`] prints (without the prefix).
pub fn error_text(e: &anyhow::Error) -> String {
    ptscope_pipeline::error_text(e.as_ref())
}

/// What a decode has to say once the trace is written (`output`): notices, lines
/// perf printed that were skipped, why the trace is incomplete, where it is.
pub fn report(report: &ptscope_pipeline::Report, output: &std::path::Path) {
    for n in &report.notices {
        warn(n);
    }
    if report.skipped_lines > 0 {
        let mut m = format!(
            "{} line(s) of perf output were not understood and were skipped; the first:",
            report.skipped_lines
        );
        for w in &report.first_skipped {
            m.push_str(&format!("\n  {w}"));
        }
        warn(m);
    }
    for e in &report.incomplete {
        warn(format!("the trace is incomplete: {e}"));
    }
    if report.interrupted {
        // The press's own message first (its watcher thread may not have run yet).
        ptscope_interrupt::catch_up();
        warn(format!(
            "decoding was interrupted; the trace holds the {} events decoded before",
            report.events
        ));
    }
    if output != std::path::Path::new("-") {
        info(format!(
            "wrote {} ({} events); `ptscope view {}` opens it in the Perfetto UI, `ptscope \
             report {}` summarises it here",
            output.display(),
            report.events,
            output.display(),
            output.display()
        ));
        // The bound can be lowered for tests (a trace past the real one is not cheap).
        let max = std::env::var("PTSCOPE_UI_MAX_TRACE_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ptscope_output::UI_MAX_TRACE_BYTES);
        if report.trace_bytes > max {
            warn(format!(
                "the trace is {} MiB of FXT: more than the Perfetto UI is likely to load in a \
                 browser (about {} MiB: its in-browser trace processor has ~2 GiB of memory \
                 and needs 2-4x the trace's size). `ptscope report {}` summarises it in the \
                 terminal, however large; for a trace the UI opens, record a shorter \
                 window (--snapshot-size) or a range (--filter START,STOP), or write less of \
                 this one: a time range (--window START..END), calls of at least a duration \
                 (--min-duration 1us) or a depth (--max-depth N)",
                report.trace_bytes >> 20,
                max >> 20,
                output.display()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::error_text;
    use anyhow::Context;

    #[test]
    fn a_cause_repeated_by_its_wrapper_is_printed_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let text = io.to_string();
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "could not run `perf`: {}", self.0)
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Wrapper(io)).context("cannot decode perf.data");
        let shown = error_text(&e);
        assert_eq!(shown.matches(&text).count(), 1, "{shown}");
        assert!(shown.starts_with("cannot decode perf.data: could not run `perf`"));
        let plain: anyhow::Result<()> = Err(anyhow::anyhow!("inner")).context("outer");
        assert_eq!(error_text(&plain.unwrap_err()), "outer: inner");
    }
}
