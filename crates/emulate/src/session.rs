//! `ptscope run --backend emulate`: a recorder like `ptscope_record::session`.
//!
//! A session has two steps so that nothing runs before every flag is known good: a
//! [`Plan`] checks the flags and finds what the recording needs (qemu, the plugin, the
//! program, its trigger's addresses), and [`Plan::record`] runs the program under qemu
//! into a working directory and says what happened (trigger hits, the program's
//! failure). Between the two the caller makes its working directory and checks its
//! output, so a flag error leaves nothing behind. Messages go through [`Tell`]; only
//! the command line prints.
//!
//! ```no_run
//! use ptscope_emulate::session::{Options, Plan, Tell};
//! use ptscope_record::session::Target;
//!
//! let opts = Options::new(Target::Run(vec!["gzip".into(), "-k".into(), "f".into()]));
//! let tell = Tell { info: &|m| eprintln!("{m}"), warn: &|m| eprintln!("warning: {m}") };
//! let plan = Plan::new(&opts, &tell)?;
//! let dir = tempfile::tempdir()?;
//! let status = plan.record(dir.path(), &tell)?;
//! println!("{} exited {status}", plan.exe().display());
//! # Ok::<(), anyhow::Error>(())
//! ```

use crate::TriggerPoint;
use anyhow::{bail, Result};
use ptscope_record::argv::{parse_snapshot_bound, SnapshotBound};
use ptscope_record::process::describe_exit;
use ptscope_record::session::Target;
use ptscope_record::trigger::TriggerSpec;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// What the user asked of an emulate recording (the command line's flags, parsed).
#[derive(Debug)]
pub struct Options {
    /// The program to run (qemu has to start it: attaching is refused).
    pub target: Target,
    /// `--trace-include-kernel` or `--kernel-only` (refused: qemu-user runs no kernel).
    pub kernel: bool,
    /// `--trigger` as given.
    pub trigger: Option<String>,
    /// `--multi-snapshot`.
    pub multi_snapshot: bool,
    /// `--full-execution`.
    pub full_execution: bool,
    /// `--snapshot-size` as given.
    pub snapshot_size: Option<String>,
    /// Flags given that this backend does not honour yet (each gets a warning).
    pub ignored: Vec<&'static str>,
}

impl Options {
    /// Runs `target` with every other flag at its default.
    pub fn new(target: Target) -> Self {
        Options {
            target,
            kernel: false,
            trigger: None,
            multi_snapshot: false,
            full_execution: false,
            snapshot_size: None,
            ignored: Vec::new(),
        }
    }
}

/// Where a session's messages go: information and warnings.
pub struct Tell<'a> {
    /// Progress and what the session does.
    pub info: &'a dyn Fn(&str),
    /// Something the user should know went wrong or is ignored.
    pub warn: &'a dyn Fn(&str),
}

/// A checked emulate recording, ready to run.
#[derive(Debug)]
pub struct Plan {
    argv: Vec<OsString>,
    exe: PathBuf,
    ring: Option<u64>,
    triggers: Vec<TriggerPoint>,
    multi: bool,
}

impl Plan {
    /// Checks `opts` and finds qemu, the plugin, the program and the trigger's
    /// addresses: fails before anything runs.
    pub fn new(opts: &Options, tell: &Tell) -> Result<Plan> {
        let Target::Run(argv) = &opts.target else {
            bail!(
                "the emulate backend cannot attach to a running process (qemu has to start \
                 the program): use `ptscope run --backend emulate -- PROGRAM ARGS`, or \
                 --backend sample"
            );
        };
        if opts.kernel {
            bail!("the emulate backend traces user space only (qemu-user runs no kernel code)");
        }
        let trigger = match opts.trigger.as_deref() {
            None => None,
            Some(s) if s == "?" || s == "symbol:?" => bail!(
                "the emulate backend has no symbol picker: name the trigger function \
                 (--trigger NAME)"
            ),
            Some(s) => Some(TriggerSpec::parse(s)?),
        };
        if opts.multi_snapshot && trigger.is_none() {
            bail!("--multi-snapshot takes a snapshot at each trigger hit: give --trigger too");
        }
        if opts.multi_snapshot && opts.full_execution {
            bail!(
                "--multi-snapshot copies each thread's flight recorder at every hit; with \
                 --full-execution there is none: drop one of them"
            );
        }
        // The plugin keeps each thread's last moments (a flight recorder) unless
        // everything is asked for.
        let ring = if opts.full_execution {
            None
        } else {
            match opts
                .snapshot_size
                .as_deref()
                .map(parse_snapshot_bound)
                .transpose()?
            {
                Some(SnapshotBound::Pages(p)) => Some(u64::from(p) * 4096),
                Some(SnapshotBound::Seconds(s)) => bail!(
                    "the emulate backend keeps each thread's last moments by size, not by \
                     time (`{s}s`): give e.g. --snapshot-size 64M, or --full-execution"
                ),
                None => Some(crate::DEFAULT_RING),
            }
        };
        for flag in &opts.ignored {
            (tell.warn)(&format!(
                "{flag} has no effect with the emulate backend yet: it traces every thread \
                 until the program ends"
            ));
        }
        crate::find_qemu()?;
        crate::find_plugin()?;
        let exe = match argv.first() {
            Some(p) => ptscope_record::process::which(Path::new(p))?,
            None => bail!("no program to run"),
        };
        crate::check_program(&exe)?;
        let triggers = match &trigger {
            Some(spec) => crate::trigger::resolve(spec, &exe)?,
            None => Vec::new(),
        };
        Ok(Plan {
            argv: argv.clone(),
            exe,
            ring,
            triggers,
            multi: opts.multi_snapshot,
        })
    }

    /// The program's path (`argv[0]` found on `PATH`): its code names the trace.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Runs the program under qemu into `dir` (private to the user: a working directory
    /// ptscope created or was given), says the trigger's hits and how the program ended,
    /// and returns its status.
    pub fn record(&self, dir: &Path, tell: &Tell) -> Result<ExitStatus> {
        if let Some(t) = self.triggers.first() {
            (tell.info)(&format!(
                "emulate backend: trigger {} at {:#x} in {}: {}",
                t.name,
                t.address,
                t.file.display(),
                if self.multi {
                    "each hit takes a snapshot of every thread's last moments in its process"
                } else {
                    "the recording stops at the first hit (the program runs on to its end, \
                     untraced) and the trace ends there"
                }
            ));
        }
        (tell.info)(&format!(
            "emulate backend: running the program under qemu-user (user space only, much \
             slower than native); its threads and forked children are traced, programs it \
             execs are not; {}",
            match self.ring {
                Some(b) => format!(
                    "each thread's last {} MiB of executed blocks are kept (--snapshot-size \
                     sets that, --full-execution keeps everything)",
                    b >> 20
                ),
                None => "everything is kept (--full-execution)".to_string(),
            }
        ));
        let status = crate::record_with(
            &self.argv,
            &self.exe,
            dir,
            self.ring,
            &self.triggers,
            self.multi,
            tell.info,
        )?;
        if !self.triggers.is_empty() {
            self.say_hits(dir, tell);
        }
        if !status.success() {
            (tell.warn)(&format!("the program {}", describe_exit(status)));
        }
        Ok(status)
    }

    /// Says the trigger's hits: the last few, each a snapshot with `--multi-snapshot`.
    fn say_hits(&self, dir: &Path, tell: &Tell) {
        let hits = crate::process::hits(dir).unwrap_or_default();
        // Many hits (--multi-snapshot on a hot function) would bury everything else.
        const SHOWN: usize = 10;
        if hits.len() > SHOWN {
            (tell.info)(&format!(
                "{} trigger hits, {} snapshots; the last {SHOWN}:",
                hits.len(),
                if self.multi { hits.len() } else { 1 }
            ));
        }
        let first_shown = hits.len().saturating_sub(SHOWN);
        for (i, h) in hits.iter().enumerate().skip(first_shown) {
            let name = self
                .triggers
                .get(h.trigger as usize)
                .map_or("?", |t| t.name.as_str());
            (tell.info)(&format!(
                "trigger hit ({name} at {:#x}, tid {}){}",
                h.address,
                h.tid,
                if self.multi {
                    format!(": snapshot {}", i + 1)
                } else {
                    String::new()
                }
            ));
        }
        if hits.is_empty() {
            (tell.warn)("the trigger never fired; the snapshot is from the end of the recording");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// `Plan::new`'s error for `opts`, and the warnings it gave.
    fn refusal(opts: Options) -> (String, Vec<String>) {
        let warned = RefCell::new(Vec::new());
        let tell = Tell {
            info: &|_| {},
            warn: &|m| warned.borrow_mut().push(m.to_string()),
        };
        let err = match Plan::new(&opts, &tell) {
            Ok(p) => panic!("accepted: {p:?}"),
            Err(e) => format!("{e:#}"),
        };
        (err, warned.into_inner())
    }

    fn run(argv: &[&str]) -> Options {
        Options::new(Target::Run(argv.iter().map(OsString::from).collect()))
    }

    #[test]
    fn flags_the_backend_cannot_honour_are_refused_before_anything_runs() {
        let (e, _) = refusal(Options::new(Target::Attach(vec![1])));
        assert!(e.contains("cannot attach"), "{e}");
        let (e, _) = refusal(Options {
            kernel: true,
            ..run(&["/bin/true"])
        });
        assert!(e.contains("user space only"), "{e}");
        let (e, _) = refusal(Options {
            trigger: Some("?".into()),
            ..run(&["/bin/true"])
        });
        assert!(e.contains("no symbol picker"), "{e}");
        let (e, _) = refusal(Options {
            multi_snapshot: true,
            ..run(&["/bin/true"])
        });
        assert!(e.contains("give --trigger too"), "{e}");
        let (e, _) = refusal(Options {
            multi_snapshot: true,
            full_execution: true,
            trigger: Some("main".into()),
            ..run(&["/bin/true"])
        });
        assert!(e.contains("drop one of them"), "{e}");
        let (e, _) = refusal(Options {
            snapshot_size: Some("10s".into()),
            ..run(&["/bin/true"])
        });
        assert!(e.contains("by size, not by time"), "{e}");
    }

    #[test]
    fn ignored_flags_are_warned_and_a_missing_program_named() {
        let (e, warned) = refusal(Options {
            ignored: vec!["--callgraph", "--single-thread"],
            ..run(&["ptscope-no-such-program-here"])
        });
        // Without qemu or the plugin on this machine the error names them instead.
        assert!(
            e.contains("is not on PATH") || e.contains("qemu") || e.contains("plugin"),
            "{e}"
        );
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(
            warned[1].contains("--single-thread has no effect"),
            "{warned:?}"
        );
    }
}
