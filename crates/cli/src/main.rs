//! The `ptscope` command line: a thin layer over the stage crates.

mod advice;
mod decode;
mod mem;
mod messages;
mod run;

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
  ptscope mem dump trace.ctf                      # inspect a memtrace allocation trace

Open .fxt.gz traces at https://ui.perfetto.dev.

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
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::command(args),
        Command::Mem(args) => mem::run(args).map(|()| 0),
        Command::Run(args) => run::run(args),
        Command::Attach(args) => run::attach(args),
    };
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
            std::process::exit(if interrupted { 130 } else { 1 });
        }
    }
}
