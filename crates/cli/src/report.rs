//! `ptscope report`: a trace summarised in the terminal (or as JSON, folded stacks, a
//! flame graph SVG), read once as a stream: the work is `ptscope-report`'s.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use ptscope_report::summary::SortBy;
use ptscope_report::{text, Analysis, Options};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Table orders.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortArg {
    /// Time from entry to return.
    Total,
    /// Time in the function itself.
    #[value(name = "self")]
    SelfTime,
    /// Number of calls.
    Calls,
}

/// Arguments of `ptscope report`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  ptscope report trace.fxt.gz                      # functions by total and self time, slowest calls
  ptscope report trace.fxt.gz --function parse    # its latency percentiles, callers and callees
  ptscope report trace.fxt.gz --thread worker-1 --sort self --top 40
  ptscope report trace.fxt.gz --json | jq '.all_threads[0]'
  ptscope report trace.fxt.gz --flamegraph flame.svg      # all threads merged
  ptscope report trace.fxt.gz --flamegraph flame.svg --per-thread
  ptscope report trace.fxt.gz --folded - | flamegraph.pl > flame.svg

Total time counts a recursive function once per outermost call; self time is the time
not spent in callees, so self times add up to the threads' busy time. In a trace of
sampled call stacks (the default without Intel PT) a call is a run of samples in one
frame: counts are marked ~ and times are estimates. \"at\" is the time since the
trace's start, as the Perfetto UI's timeline shows it. The trace is read once, as a
stream: traces too big for the UI work.")]
pub struct ReportArgs {
    /// The trace (`.fxt.gz` or `.fxt`) written by ptscope.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    #[command(flatten)]
    pub flags: ReportFlags,
    /// No progress bar and no informational messages (warnings and errors still show).
    #[arg(short, long)]
    pub quiet: bool,
}

/// What the report shows (also for `run`/`decode --report`).
#[derive(Args, Debug, Clone)]
pub struct ReportFlags {
    /// Latency percentiles, callers and callees of this function (its name as the trace
    /// shows it; a unique part of one is enough).
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,
    /// Only the threads whose "process / thread" name contains this, or with this thread
    /// or process id.
    #[arg(long, value_name = "NAME|TID")]
    pub thread: Option<String>,
    /// Functions per table.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,
    /// How many of the slowest calls to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub slowest: usize,
    /// Table order.
    #[arg(long, value_enum, default_value_t = SortArg::Total)]
    pub sort: SortArg,
    /// Print JSON for scripts instead of tables (every thread and function, times in ns).
    #[arg(long)]
    pub json: bool,
    /// Write a flame graph SVG of the time in each stack (inferno).
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Write folded stacks (`a;b;c NS` lines) for other flame graph tools (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Flame graphs and folded stacks start each stack with its process and thread,
    /// instead of merging the threads' stacks.
    #[arg(long)]
    pub per_thread: bool,
}

impl Default for ReportFlags {
    fn default() -> Self {
        ReportFlags {
            function: None,
            thread: None,
            top: 20,
            slowest: 10,
            sort: SortArg::Total,
            json: false,
            flamegraph: None,
            folded: None,
            per_thread: false,
        }
    }
}

/// A reader that moves a progress bar.
struct Counted<R> {
    inner: R,
    bar: indicatif::ProgressBar,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// Reads `path` once with `opts`.
fn read_trace(path: &Path, opts: &Options) -> Result<Analysis> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open the trace {}", path.display()))?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = if crate::messages::quiet() {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(len).with_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} reading {msg} [{bar:30}] {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        )
    };
    bar.set_message(path.display().to_string());
    let src = ptscope_report::uncompressed(Counted {
        inner: file,
        bar: bar.clone(),
    })
    .with_context(|| format!("cannot read the trace {}", path.display()))?;
    let a = ptscope_report::analyze(src, opts);
    bar.finish_and_clear();
    if a.threads.is_empty() {
        if let Some(e) = &a.error {
            bail!(
                "{} is not a trace ptscope can read: {e} (ptscope report reads the .fxt.gz \
                 and .fxt files ptscope writes)",
                path.display()
            );
        }
    }
    Ok(a)
}

/// Writes `f`'s output atomically to `path`, or to stdout for `-`.
fn write_to(path: &Path, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
    if path == Path::new("-") {
        let out = std::io::stdout();
        let mut lock = out.lock();
        return f(&mut lock)
            .and_then(|()| lock.flush())
            .with_context(|| "cannot write to standard output".to_string());
    }
    let mut file = ptscope_output::AtomicFile::create(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    f(&mut file)
        .and_then(|()| file.commit())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Summarises the trace at `path` as `flags` say; the exit status is 1 if the trace was
/// damaged or cut short (what came before is still reported).
pub fn report(path: &Path, flags: &ReportFlags) -> Result<i32> {
    let mut opts = Options {
        function: flags.function.clone(),
        slowest: flags.slowest,
    };
    let mut a = read_trace(path, &opts)?;
    if let Some(want) = &flags.function {
        if a.focus.is_none() {
            let similar = a.similar_names(want);
            match similar.as_slice() {
                [one] => {
                    crate::messages::info(format!("--function {want}: showing {one}"));
                    opts.function = Some(one.to_string());
                    a = read_trace(path, &opts)?;
                }
                [] => bail!("no function in {} is called {want}", path.display()),
                many => bail!(
                    "no function in {} is called {want}; functions with that in their \
                     name:\n  {}{}",
                    path.display(),
                    many.iter()
                        .take(10)
                        .copied()
                        .collect::<Vec<_>>()
                        .join("\n  "),
                    if many.len() > 10 {
                        format!("\n  … {} more", many.len() - 10)
                    } else {
                        String::new()
                    }
                ),
            }
        }
    }
    let threads = ptscope_report::summary::select_threads(&a, flags.thread.as_deref());
    if threads.is_empty() {
        let names: Vec<String> = (0..a.threads.len()).map(|t| a.thread_label(t)).collect();
        bail!(
            "no thread of {} matches --thread {}; its threads:\n  {}",
            path.display(),
            flags.thread.as_deref().unwrap_or(""),
            names.join("\n  ")
        );
    }
    let sort = match flags.sort {
        SortArg::Total => SortBy::Total,
        SortArg::SelfTime => SortBy::SelfTime,
        SortArg::Calls => SortBy::Calls,
    };
    let name = path.display().to_string();
    if flags.flamegraph.is_some() || flags.folded.is_some() {
        let lines = ptscope_report::flame::folded(&a, &threads, flags.per_thread);
        if let Some(p) = &flags.folded {
            write_to(p, |w| ptscope_report::flame::write_folded(&lines, w))?;
        }
        if let Some(p) = &flags.flamegraph {
            let title = format!(
                "{}{}",
                path.file_name()
                    .map_or(name.clone(), |n| n.to_string_lossy().into_owned()),
                if a.source.exact() {
                    ""
                } else {
                    " (sampled: times are estimates)"
                }
            );
            write_to(p, |w| ptscope_report::flame::write_svg(&lines, &title, w))?;
            crate::messages::info(format!("wrote the flame graph {}", p.display()));
        }
    }
    let to_stdout = flags.folded.as_deref() == Some(Path::new("-"));
    if flags.json {
        let v = ptscope_report::json::render(&a, &name, &threads, sort);
        let s = serde_json::to_string_pretty(&v).context("cannot format the JSON report")?;
        crate::messages::print(&s);
    } else if !to_stdout {
        let o = text::TextOptions {
            top: flags.top,
            sort,
            ..Default::default()
        };
        crate::messages::print(text::render(&a, &name, &threads, &o).trim_end());
    }
    if let Some(e) = &a.error {
        crate::messages::warn(format!(
            "{} is damaged or cut short ({e}); the report covers what came before",
            path.display()
        ));
        return Ok(1);
    }
    Ok(0)
}
