//! `ptsim`: record a program's execution as a genuine Intel PT perf.data file.

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use ptsim::blocklog::BlockLog;
use ptsim::{FaultSpec, SimConfig, SimStats};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Intel PT simulator: run a program under qemu-user and write perf.data plus ground truth.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Settings shared by `run` and `encode`.
#[derive(Args)]
struct SimArgs {
    /// Output perf.data path; the truth files go beside it.
    #[arg(short, long, default_value = "perf.data")]
    output: PathBuf,
    /// Keep only the last N bytes of each thread's trace (snapshot mode).
    #[arg(long)]
    snapshot_size: Option<usize>,
    /// With --snapshot-size: take K snapshots at even intervals, written to
    /// `<output>.0001` … `<output>.000K` with `expected.000k.ptb`.
    #[arg(long, default_value_t = 1)]
    snapshots: usize,
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
    /// Nominal cycles spent in the kernel per syscall or signal.
    #[arg(long, default_value_t = 1000)]
    kernel_cycles: u64,
    /// Also write ground-truth.tsv and expected.tsv (about 55 bytes per branch).
    #[arg(long)]
    tsv: bool,
    /// Also write true-stacks.tsv: each thread's true stack over time, named by perf.
    #[arg(long)]
    stacks: bool,
}

impl SimArgs {
    fn config(&self) -> Result<SimConfig> {
        let mut cfg = SimConfig {
            freq_hz: self.freq,
            snapshot_size: self.snapshot_size,
            snapshots: self.snapshots,
            faults: FaultSpec::parse(&self.faults)?,
            kernel_cycles: self.kernel_cycles,
            ..Default::default()
        };
        cfg.pt.retcomp = !self.noretcomp;
        cfg.pt.psb_period = self.psb_period;
        cfg.pt.cbr = u8::try_from(self.freq.div_ceil(100_000_000)).context("--freq too high")?;
        Ok(cfg)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a program under qemu-x86_64 and write perf.data, ground-truth.ptb and expected.ptb.
    Run {
        #[command(flatten)]
        sim: SimArgs,
        /// Program and arguments.
        #[arg(last = true, required = true)]
        argv: Vec<OsString>,
    },
    /// Re-encode an existing block log (ptsim-blocks.log) with other settings.
    Encode {
        #[command(flatten)]
        sim: SimArgs,
        /// The block log written by a previous `run`.
        #[arg(long)]
        log: PathBuf,
        /// Command name recorded in the COMM event.
        #[arg(long, default_value = "prog")]
        comm: String,
    },
    /// Decode a recording with perf and compare the branches with the expectation.
    Check {
        /// The perf.data written by `ptsim run`.
        #[arg(default_value = "perf.data")]
        perf_data: PathBuf,
        /// The expectation (`.ptb` or `.tsv`); defaults to expected.ptb beside the recording.
        #[arg(long)]
        expected: Option<PathBuf>,
    },
}

fn report(s: &SimStats, output: &Path) {
    let secs = (s.read_time + s.derive_time + s.encode_time + s.write_time).as_secs_f64();
    eprintln!(
        "ptsim: {} blocks, {} instructions, {} branches, {} bytes of PT in {}; \
         qemu {:.2?}, read {:.2?}, derive {:.2?}, encode {:.2?}, write {:.2?} ({:.1} M blocks/s after qemu){}",
        s.blocks,
        s.instructions,
        s.branches,
        s.pt_bytes,
        output.display(),
        s.qemu_time,
        s.read_time,
        s.derive_time,
        s.encode_time,
        s.write_time,
        s.blocks as f64 / secs.max(1e-9) / 1e6,
        if s.unmapped_blocks > 0 {
            format!(
                "; warning: {} block executions outside file mappings cannot be decoded",
                s.unmapped_blocks
            )
        } else {
            String::new()
        }
    );
}

fn write_stacks(sim: &ptsim::Simulation, log: &BlockLog, output: &Path) -> Result<()> {
    let dir = output.parent().unwrap_or(Path::new("."));
    let timelines = ptsim::true_stacks(sim, log, output, false)?;
    ptsim::stacks::write_tsv(&dir.join("true-stacks.tsv"), &timelines)?;
    match ptsim::true_stacks(sim, log, output, true) {
        Ok(t) => ptsim::stacks::write_tsv(&dir.join("true-stacks.perf-clock.tsv"), &t),
        Err(e) => {
            eprintln!("ptsim: no true-stacks.perf-clock.tsv: {e:#}");
            Ok(())
        }
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Run { sim, argv } => {
            let cfg = sim.config()?;
            let out = ptsim::run(&argv, &sim.output, &cfg, sim.tsv)?;
            report(&out.sim.stats, &sim.output);
            if sim.stacks {
                let log = sim
                    .output
                    .parent()
                    .unwrap_or(Path::new("."))
                    .join("ptsim-blocks.log");
                write_stacks(&out.sim, &BlockLog::read(&log)?, &sim.output)?;
            }
            if !out.status.success() {
                eprintln!("ptsim: the program exited with {}", out.status);
            }
            Ok(())
        }
        Cmd::Encode { sim, log, comm } => {
            let cfg = sim.config()?;
            let t0 = Instant::now();
            let blocks = BlockLog::read(&log)?;
            let read_time = t0.elapsed();
            let mut s = ptsim::simulate(&blocks, &comm, &cfg);
            s.stats.read_time = read_time;
            let t1 = Instant::now();
            ptsim::write_outputs(&s, &sim.output, sim.tsv)?;
            s.stats.write_time = t1.elapsed();
            report(&s.stats, &sim.output);
            if sim.stacks {
                write_stacks(&s, &blocks, &sim.output)?;
            }
            Ok(())
        }
        Cmd::Check {
            perf_data,
            expected,
        } => {
            let expected = expected.unwrap_or_else(|| {
                // perf.data.0003 pairs with expected.0003.ptb.
                let name = perf_data
                    .extension()
                    .and_then(|e| e.to_str())
                    .filter(|e| e.len() == 4 && e.bytes().all(|b| b.is_ascii_digit()))
                    .map_or("expected.ptb".to_string(), |k| format!("expected.{k}.ptb"));
                perf_data.parent().unwrap_or(Path::new(".")).join(name)
            });
            let exp = if expected.extension().is_some_and(|e| e == "tsv") {
                ptsim::expected::read_tsv(&expected)?
            } else {
                ptsim::expected::read_bin(&expected)?
            };
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
