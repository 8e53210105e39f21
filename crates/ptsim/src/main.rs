//! `ptsim`: record a program's execution as a genuine Intel PT perf.data file.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ptsim::{FaultSpec, SimConfig};
use std::ffi::OsString;
use std::path::PathBuf;

/// Intel PT simulator: run a program under qemu-user and write perf.data plus ground truth.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a program and write perf.data, ground-truth.tsv and expected.tsv.
    Run {
        /// Output perf.data path; the truth files go beside it.
        #[arg(short, long, default_value = "perf.data")]
        output: PathBuf,
        /// Keep only the last N bytes of each thread's trace (snapshot mode).
        #[arg(long)]
        snapshot_size: Option<usize>,
        /// Faults to inject: overflow=N,corrupt=N[,overflow-len=N].
        #[arg(long, default_value = "")]
        faults: String,
        /// Encode every return as a TIP (`noretcomp`).
        #[arg(long)]
        noretcomp: bool,
        /// Nominal clock in Hz (one instruction per cycle).
        #[arg(long, default_value_t = 2_000_000_000)]
        freq: u64,
        /// Approximate bytes between PSB packets.
        #[arg(long, default_value_t = 16384)]
        psb_period: usize,
        /// Program and arguments.
        #[arg(last = true, required = true)]
        argv: Vec<OsString>,
    },
    /// Decode a recording with perf and compare the branches with the expectation.
    Check {
        /// The perf.data written by `ptsim run`.
        #[arg(default_value = "perf.data")]
        perf_data: PathBuf,
        /// The expectation; defaults to expected.tsv beside the recording.
        #[arg(long)]
        expected: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run {
            output,
            snapshot_size,
            faults,
            noretcomp,
            freq,
            psb_period,
            argv,
        } => {
            let mut cfg = SimConfig {
                freq_hz: freq,
                snapshot_size,
                faults: FaultSpec::parse(&faults)?,
                ..Default::default()
            };
            cfg.pt.retcomp = !noretcomp;
            cfg.pt.psb_period = psb_period;
            cfg.pt.cbr = u8::try_from(freq.div_ceil(100_000_000)).context("--freq too high")?;
            let out = ptsim::run(&argv, &output, &cfg)?;
            let s = &out.sim.stats;
            eprintln!(
                "ptsim: {} blocks, {} instructions, {} branches, {} bytes of PT in {}; qemu {:.2?}, encode {:.2?}{}",
                s.blocks,
                s.instructions,
                s.branches,
                s.pt_bytes,
                output.display(),
                s.qemu_time,
                s.encode_time,
                if s.unmapped_blocks > 0 {
                    format!("; warning: {} block executions outside file mappings cannot be decoded", s.unmapped_blocks)
                } else {
                    String::new()
                }
            );
            if !out.status.success() {
                eprintln!("ptsim: the program exited with {}", out.status);
            }
            Ok(())
        }
        Cmd::Check {
            perf_data,
            expected,
        } => {
            let expected = expected.unwrap_or_else(|| {
                perf_data
                    .parent()
                    .unwrap_or(std::path::Path::new("."))
                    .join("expected.tsv")
            });
            let exp = ptsim::expected::read_tsv(&expected)?;
            let got = ptsim::perfscript::decode(&perf_data)?;
            let c = ptsim::perfscript::compare(&exp, &got);
            println!(
                "{} of {} expected branches matched; perf reported {} ({} in {} unpredictable stretches); \
                 perf time vs truth: up to {} ns late, {} branches up to {} ns early",
                c.matched,
                c.expected,
                c.reported,
                c.skipped,
                c.uncertain,
                c.max_lag_ns,
                c.early,
                c.max_early_ns
            );
            for d in &c.differences {
                println!("  {d}");
            }
            if !c.exact() {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
