//! `ptscope mem`: the memtrace tools (dump, identify, flamegraph, hotspots,
//! strip-names, subsample) and `convert` to a Perfetto-readable timeline.

mod convert;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use memtrace::{tools, IoSource, Reader};

/// Arguments of `ptscope mem`.
#[derive(clap::Args, Debug)]
pub struct MemArgs {
    /// The tool to run.
    #[command(subcommand)]
    pub tool: MemTool,
}

/// The memtrace tools.
#[derive(clap::Subcommand, Debug)]
pub enum MemTool {
    /// Print every event, one per line (as the reference `dump_trace`).
    Dump {
        /// Trace file.
        file: PathBuf,
    },
    /// Print the trace's header and allocation statistics.
    Identify {
        /// Trace file.
        file: PathBuf,
    },
    /// Print folded stacks (`a;b;c samples`) for flamegraph.pl, speedscope or inferno.
    Flamegraph {
        /// Trace file.
        file: PathBuf,
    },
    /// Print the functions that allocate most and their main callers.
    Hotspots {
        /// Trace file.
        file: PathBuf,
    },
    /// Write an anonymised copy: no names, pid, start time or backtraces.
    StripNames {
        /// Trace file.
        file: PathBuf,
        /// Output trace.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Write a copy keeping each sample with probability 1/FACTOR.
    Subsample {
        /// Trace file.
        file: PathBuf,
        /// Subsampling factor (1 copies the trace unchanged).
        #[arg(value_parser = clap::value_parser!(u64).range(1..))]
        factor: u64,
        /// Output trace.
        #[arg(short, long)]
        output: PathBuf,
        /// Keep only allocations at or after this second of the trace.
        #[arg(long, allow_hyphen_values = true)]
        start: Option<i64>,
        /// Keep only allocations before this second of the trace.
        #[arg(long, allow_hyphen_values = true)]
        end: Option<i64>,
        /// Seed for the sample selection (runs are reproducible).
        #[arg(long, default_value_t = 0x6d656d7472616365)]
        seed: u64,
    },
    /// Convert to a Fuchsia trace (.fxt, gzipped if the name ends in .gz) for Perfetto:
    /// live heap, allocation rate, promotions and collections as counters, and the
    /// biggest allocation sites as slices.
    Convert {
        /// Trace file.
        file: PathBuf,
        /// Output file (`.fxt` or `.fxt.gz`).
        #[arg(short, long)]
        output: PathBuf,
        /// Counter resolution in µs (samples are aggregated per bucket).
        #[arg(long, default_value_t = 1000)]
        bucket_us: u64,
        /// How many allocation sites to show.
        #[arg(long, default_value_t = 20)]
        top_sites: usize,
    },
}

type FileReader = Reader<IoSource<io::BufReader<File>>>;

fn open(file: &Path) -> anyhow::Result<FileReader> {
    Reader::open(file).with_context(|| format!("{}: cannot read trace", file.display()))
}

/// Prints what the reader skipped, as the reference tools do on stderr.
fn report_notes(file: &Path, r: &FileReader) {
    for n in r.notes() {
        crate::messages::note(format!("{}: {n}", file.display()));
    }
}

/// Runs `f` writing to stdout; a closed pipe (`| head`) ends quietly.
fn to_stdout(f: impl FnOnce(&mut dyn Write) -> memtrace::Result<()>) -> memtrace::Result<()> {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let r = f(&mut out).and_then(|()| out.flush().map_err(memtrace::Error::from));
    match r {
        Err(memtrace::Error::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The output file, written under a temporary name beside it: it replaces `path` only
/// when [`commit`] succeeds, so an error leaves `path` as it was (and the input intact
/// when it is also the output).
fn create(path: &Path) -> anyhow::Result<ptscope_output::AtomicFile> {
    ptscope_output::AtomicFile::create(path)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Renames a finished output into place.
fn commit(out: ptscope_output::AtomicFile, path: &Path) -> memtrace::Result<()> {
    out.commit().map_err(|e| {
        memtrace::Error::from(io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", path.display()),
        ))
    })
}

/// Runs a memtrace tool.
pub fn run(args: MemArgs) -> anyhow::Result<()> {
    match args.tool {
        MemTool::Dump { file } => {
            let mut r = open(&file)?;
            let res = to_stdout(|out| tools::dump(&mut r, out));
            report_notes(&file, &r);
            res.with_context(|| file.display().to_string())
        }
        MemTool::Identify { file } => {
            let r = open(&file)?;
            let name = file.display().to_string();
            to_stdout(|out| tools::identify(r, &name, out)).with_context(|| name.clone())
        }
        MemTool::Flamegraph { file } => {
            let mut r = open(&file)?;
            let res = to_stdout(|out| tools::flamegraph(&mut r, out));
            report_notes(&file, &r);
            res.with_context(|| file.display().to_string())
        }
        MemTool::Hotspots { file } => {
            let mut r = open(&file)?;
            let res = to_stdout(|out| tools::hotspots(&mut r, out));
            report_notes(&file, &r);
            res.with_context(|| file.display().to_string())
        }
        MemTool::StripNames { file, output } => {
            let mut r = open(&file)?;
            let out = create(&output)?;
            let res = tools::strip_names(&mut r, out).and_then(|w| commit(w, &output));
            report_notes(&file, &r);
            res.with_context(|| {
                format!(
                    "{} -> {} (left unchanged)",
                    file.display(),
                    output.display()
                )
            })
        }
        MemTool::Subsample {
            file,
            factor,
            output,
            start,
            end,
            seed,
        } => {
            let mut r = open(&file)?;
            let out = create(&output)?;
            let opts = tools::SubsampleOptions {
                factor,
                start_s: start.unwrap_or(i64::MIN),
                end_s: end.unwrap_or(i64::MAX),
                seed,
            };
            let res = tools::subsample(&mut r, out, &opts).and_then(|w| commit(w, &output));
            report_notes(&file, &r);
            res.with_context(|| {
                format!(
                    "{} -> {} (left unchanged)",
                    file.display(),
                    output.display()
                )
            })
        }
        MemTool::Convert {
            file,
            output,
            bucket_us,
            top_sites,
        } => {
            let opts = convert::Options {
                bucket_us: bucket_us.max(1),
                top_sites,
            };
            convert::convert(&file, &output, &opts)
                .with_context(|| format!("{} -> {}", file.display(), output.display()))
        }
    }
}
