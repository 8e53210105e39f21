//! The `ptscope` command line: a thin layer over the stage crates.

mod advice;
mod decode;
mod mem;
mod messages;
mod report;
mod run;
mod view;

use clap::{Parser, Subcommand};

/// See what a process actually did: every function call, as a timeline you can zoom
/// to the nanosecond, for the moments before the one you care about.
#[derive(Parser, Debug)]
#[command(
    name = "ptscope",
    version,
    after_help = "\
Examples:
  ptscope decode perf.data -o trace.fxt.gz        # a perf recording to a Perfetto trace
  ptscope decode --perf-script script.txt         # perf script text to trace.fxt.gz
  ptscope report trace.fxt.gz                     # where the time went, in the terminal
  ptscope view trace.fxt.gz                       # open it in the Perfetto UI
  ptscope mem dump trace.ctf                      # inspect a memtrace allocation trace

Open .fxt.gz traces at https://ui.perfetto.dev (`ptscope view TRACE` serves one to it).

Interrupts (Ctrl-C, SIGTERM, SIGHUP) during `run`/`attach`: the first stops recording and
decodes, the second stops decoding and writes what was decoded, the third quits, keeping
the recording and printing the `ptscope decode DIR` command that decodes it."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Turn a recording (perf.data, a working directory, or perf script text) into a trace.
    Decode(decode::DecodeArgs),
    /// Work with memtrace allocation traces.
    Mem(mem::MemArgs),
    /// Start a program under perf and write a trace of its last moments.
    Run(run::RunArgs),
    /// Attach to running processes and write a trace of their last moments.
    Attach(run::AttachArgs),
    /// Summarise a trace in the terminal: functions by time and calls, slowest calls,
    /// latency percentiles, callers and callees; JSON, folded stacks, flame graphs.
    Report(report::ReportArgs),
    /// Serve a trace to the Perfetto UI from 127.0.0.1 and open it there.
    View(view::ViewArgs),
}

fn main() {
    // ptscope's binary also serves as the sentinel that kills what is left of ptscope's
    // process tree if ptscope is killed (crates/interrupt/src/children.rs).
    if let Some(code) = ptscope_interrupt::children::sentinel_main() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Decode(_) | Command::Run(_) | Command::Attach(_)
    ) {
        // Before any thread starts (it forks). Without it, ptscope's own children still
        // die with it; only theirs might not.
        if let Err(e) = ptscope_interrupt::children::guard_descendants() {
            messages::warn(format!(
                "cannot start the sentinel that stops the traced program's child processes \
                 if ptscope is killed: {e}"
            ));
        }
    }
    let result = match cli.command {
        Command::Decode(args) => decode::command(args),
        Command::Mem(args) => mem::run(args).map(|()| 0),
        Command::Run(args) => run::run(args),
        Command::Attach(args) => run::attach(args),
        Command::Report(args) => {
            messages::set_quiet(args.quiet);
            report::report(&args.trace, &args.flags)
        }
        Command::View(args) => {
            messages::set_quiet(args.quiet);
            view::serve(&args.trace, &args.flags)
        }
    };
    // A normal end (an error included): what ptscope started was stopped or waited
    // for; whatever the program left running on purpose stays.
    ptscope_interrupt::children::stand_down();
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            messages::error(&e);
            // Interrupted before anything was decoded: the interrupt's status, as for a
            // decode it cut short.
            let interrupted = matches!(
                e.downcast_ref::<ptscope_pipeline::Error>(),
                Some(ptscope_pipeline::Error::NoEvents(n)) if n.interrupted
            );
            std::process::exit(if interrupted { decode::INTERRUPTED } else { 1 });
        }
    }
}
