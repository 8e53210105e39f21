//! `ptscope view`: serve a trace to the Perfetto UI from this machine and open it (the
//! server is `ptscope-view`'s); and what `run`/`decode --view`/`--report` do after the
//! trace is written.

use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `ptscope view`.
#[derive(Args, Debug)]
#[command(after_help = "\
Examples:
  ptscope view trace.fxt.gz              # serve until Ctrl-C; opens the UI where there is a display
  ptscope view trace.fxt.gz --once       # stop once the UI has loaded it
  ssh -L 9001:127.0.0.1:9001 host ptscope view /tmp/trace.fxt.gz --no-open
                                         # a trace on a server: open the printed link here

The trace is served on 127.0.0.1 only (other machines cannot connect; forward the port
over ssh to look from elsewhere), and only that file, under a path with a random part.
The Perfetto UI fetches `?url=` traces from port 9001 only (its Content-Security-Policy),
so that is the default port; when 9001 is taken (a trace_processor_shell --httpd, another
ptscope view) or --port names another, the link opens a small page that fetches the
trace and hands it to the UI. Chrome may ask to allow ui.perfetto.dev to reach this
device (local network access): allow it. The file is served as it is (a .fxt.gz stays
compressed; the UI unpacks it).")]
pub struct ViewArgs {
    /// The trace (`.fxt.gz` or `.fxt`) to serve.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    #[command(flatten)]
    pub flags: ViewFlags,
    /// No informational messages (the link is still printed, on standard output).
    #[arg(short, long)]
    pub quiet: bool,
}

/// How the trace is served.
#[derive(Args, Debug, Clone, Default)]
pub struct ViewFlags {
    /// The port on 127.0.0.1 (0: any free one). Default: 9001, the one the Perfetto UI
    /// accepts, else any free port.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// Stop once the trace has been sent whole (default: serve until Ctrl-C).
    #[arg(long)]
    pub once: bool,
    /// Only print the link; do not start a browser.
    #[arg(long)]
    pub no_open: bool,
    /// The Perfetto UI allowed to fetch the trace (a self-hosted UI's origin).
    #[arg(long, value_name = "URL", default_value = ptscope_view::PERFETTO_UI)]
    pub origin: String,
}

/// Size in bytes, readably.
fn size(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30))
    } else if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20))
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} bytes")
    }
}

/// Starts a browser on `url` where one can show (a display, not root), via `xdg-open`;
/// says why not otherwise. The browser is the user's and is left running; `xdg-open`
/// itself is waited for on a thread of its own.
fn open_browser(url: &str) {
    let display = std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
        || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty());
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !display {
        crate::messages::info("no display here: open the link in a browser on this machine (or forward the port: see --help)");
        return;
    }
    if root {
        crate::messages::info("not starting a browser as root: open the link yourself");
        return;
    }
    match std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => crate::messages::info(format!(
            "cannot start a browser (xdg-open: {e}): open the link yourself"
        )),
    }
}

/// Serves `path` as `flags` say until Ctrl-C (or, with `--once`, until sent whole).
pub fn serve(path: &Path, flags: &ViewFlags) -> Result<i32> {
    let file = ptscope_view::TraceFile::open(path)?;
    let (name, len) = (file.name().to_string(), file.len());
    let server = ptscope_view::Server::bind(file, flags.port, &flags.origin)?;
    ptscope_interrupt::install().context("cannot install the Ctrl-C handler")?;
    let base = ptscope_interrupt::presses();
    ptscope_interrupt::say_at(base + 1, "ptscope: stopped serving the trace");
    ptscope_interrupt::set_quit(base + 2, "ptscope: interrupted again; quitting");
    crate::messages::info(format!(
        "serving {} ({}) on http://127.0.0.1:{}: to this machine only (loopback), only \
         this file; {}",
        path.display(),
        size(len),
        server.port(),
        if flags.once {
            "until it has been sent once (Ctrl-C stops)"
        } else {
            "Ctrl-C stops"
        }
    ));
    if !server.deep_link_works() {
        crate::messages::info(format!(
            "the Perfetto UI fetches traces only from port {} ({}): this link opens a page \
             that hands the trace to the UI",
            ptscope_view::PERFETTO_PORT,
            if flags.port.is_some() {
                "--port chose another"
            } else {
                "it is taken here"
            }
        ));
    }
    let url = server.open_url();
    crate::messages::print(&url);
    if !flags.no_open {
        open_browser(&url);
    }
    let stop = || ptscope_interrupt::presses() > base;
    server.serve(flags.once, &stop, &|s| {
        if s.complete {
            crate::messages::info(format!("sent {name} ({})", size(s.bytes)));
        } else if s.status == 200 && s.bytes < len && s.method == "GET" {
            crate::messages::info(format!(
                "{name}: the client went away after {} of {}",
                size(s.bytes),
                size(len)
            ));
        }
    });
    Ok(0)
}

/// What `run`/`decode` do once the trace is written: `--report`, then `--view`.
#[derive(Args, Debug, Clone, Default)]
pub struct AfterFlags {
    /// Print `ptscope report`'s summary of the trace once it is written.
    #[arg(long)]
    pub report: bool,
    /// Serve the trace to the Perfetto UI once it is written, as `ptscope view` does.
    #[arg(long)]
    pub view: bool,
}

impl AfterFlags {
    /// Runs what was asked on the trace at `output`; the decode's exit status `code` is
    /// kept unless this fails.
    pub fn run(&self, output: &Path, interrupted: bool, code: i32) -> Result<i32> {
        if !(self.report || self.view) {
            return Ok(code);
        }
        if output == Path::new("-") {
            crate::messages::warn("--report and --view need a trace file: -o - writes none");
            return Ok(code);
        }
        if interrupted {
            crate::messages::info("interrupted: no --report or --view");
            return Ok(code);
        }
        if self.report {
            crate::report::report(output, &crate::report::ReportFlags::default())?;
        }
        if self.view {
            serve(
                output,
                &ViewFlags {
                    origin: ptscope_view::PERFETTO_UI.into(),
                    ..Default::default()
                },
            )?;
        }
        Ok(code)
    }
}
