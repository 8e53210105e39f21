//! The `ptscope` command line.

mod mem;

use clap::{Parser, Subcommand};

/// See what a process actually did.
#[derive(Parser, Debug)]
#[command(name = "ptscope", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Work with memtrace allocation traces.
    Mem(mem::MemArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mem(args) => mem::run(args),
    };
    if let Err(e) = result {
        eprintln!("ptscope: {e:#}");
        std::process::exit(1);
    }
}
