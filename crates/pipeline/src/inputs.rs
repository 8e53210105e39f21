//! What the inputs are and how each is opened as an [`EventSource`].

use crate::{DecodeOptions, DecoderKind, Error, Input, Observer};
use ptscope_decode::{Decoder, RecordingKind};
use ptscope_dlfilter_reader::{Choice, DlfilterOptions};
use ptscope_event::{EventSource, OcamlExceptionInfo};
use std::fs::File;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

/// What each input is: its name for messages, and how to open it.
pub(crate) enum InputSpec {
    Text(PathBuf),
    PerfData(PathBuf),
    /// An emulate working directory, the program's name for its threads, which
    /// snapshot (one per trigger hit, else one), and the clock its times follow.
    Emulate(PathBuf, String, usize, ptscope_emulate::ClockKind),
}

impl InputSpec {
    /// The input's name in messages.
    pub(crate) fn name(&self) -> String {
        match self {
            InputSpec::Text(p) if p == Path::new("-") => "standard input".into(),
            InputSpec::Text(p) | InputSpec::PerfData(p) | InputSpec::Emulate(p, _, _, _) => {
                p.display().to_string()
            }
        }
    }

    /// Opens the input; what it says on the way (a fallback to text, the clock of an
    /// emulate trace) goes to `observer`.
    pub(crate) fn open(
        &self,
        perf: &Path,
        (choice, perf_inline): (Choice, bool),
        observer: &dyn Observer,
    ) -> Result<Box<dyn EventSource>, Error> {
        match self {
            InputSpec::Text(p) if p == Path::new("-") => Ok(Box::new(Decoder::new(
                BufReader::with_capacity(1 << 20, io::stdin()),
            ))),
            InputSpec::Text(p) => {
                let f = File::open(p).map_err(|source| Error::OpenText {
                    path: p.clone(),
                    source,
                })?;
                Ok(Box::new(Decoder::from_file(f)))
            }
            InputSpec::PerfData(p) => {
                let mut opts = DlfilterOptions::new(p);
                opts.perf = perf.to_path_buf();
                let kind = ptscope_decode::header::read_header(p)
                    .map_err(|source| Error::RecordingKind {
                        path: p.clone(),
                        source: source.into(),
                    })?
                    .kind();
                opts.kind = Some(kind);
                // Jumps within a function change no stack, but their timestamps bound how
                // far calls are spread in time: keep them so both paths give one trace.
                opts.keep_jumps = kind == RecordingKind::IntelPt;
                // Inlined calls are expanded in the naming step (or not at all, with
                // `--no-inline`), never by perf's addr2line children: see
                // `script_has_inline_option`.
                if !perf_inline && ptscope_decode::perf::script_has_inline_option(perf) {
                    opts.extra_args.push("--no-inline".into());
                }
                let (script, notice) =
                    ptscope_dlfilter_reader::open(&opts, choice).map_err(|source| {
                        Error::OpenPerf {
                            path: p.clone(),
                            source,
                        }
                    })?;
                if let Some(n) = notice {
                    observer.info(n.trim_start_matches("ptscope: "));
                }
                Ok(Box::new(script))
            }
            InputSpec::Emulate(dir, comm, snapshot, clock) => {
                let events = ptscope_emulate::events::Events::open(dir, comm, *snapshot, *clock)
                    .map_err(Error::Emulate)?;
                Ok(Box::new(events))
            }
        }
    }
}

impl From<DecoderKind> for Choice {
    fn from(d: DecoderKind) -> Choice {
        match d {
            DecoderKind::Auto => Choice::Auto,
            DecoderKind::Dlfilter => Choice::Dlfilter,
            DecoderKind::Text => Choice::Text,
        }
    }
}

/// The inputs `opts` names, one per snapshot.
pub(crate) fn input_specs(opts: &DecodeOptions) -> Result<Vec<InputSpec>, Error> {
    let input = match &opts.input {
        Input::PerfScript(p) => {
            if p != Path::new("-") && !p.exists() {
                return Err(Error::NoSuchScript(p.clone()));
            }
            return Ok(vec![InputSpec::Text(p.clone())]);
        }
        Input::Recording(p) => p.clone(),
    };
    if input.is_dir() && input.join(ptscope_emulate::LOG_NAME).is_file() {
        let comm = opts
            .executable
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "emulated".into());
        // One input per snapshot: each trigger hit's, or the whole recording's.
        let n = ptscope_emulate::process::snapshot_count(&input).map_err(Error::Emulate)?;
        let clock = opts.clock.unwrap_or_default();
        return Ok((0..n)
            .map(|i| InputSpec::Emulate(input.clone(), comm.clone(), i, clock))
            .collect());
    }
    if let Some(clock) = opts.clock {
        return Err(Error::ClockNotEmulate {
            clock: clock.name(),
            input,
        });
    }
    if input.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&input)
            .map_err(|source| Error::ReadDir {
                path: input.clone(),
                source,
            })?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("perf.data") && !n.ends_with(".old"))
                    && p.is_file()
            })
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(Error::NoPerfData(input));
        }
        return Ok(files.into_iter().map(InputSpec::PerfData).collect());
    }
    if !input.exists() {
        return Err(Error::NoSuchInput(input));
    }
    Ok(vec![InputSpec::PerfData(input)])
}

/// Reads OCaml exception trap addresses from a TOML file (`entertraps`, `pushtraps`,
/// `poptraps`, at the top level or under `[ocaml_exception_info]`).
pub(crate) fn read_ocaml_info(path: &Path) -> Result<OcamlExceptionInfo, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadOcamlInfo {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|source| Error::OcamlInfoToml {
        path: path.to_path_buf(),
        source,
    })?;
    let t = table
        .get("ocaml_exception_info")
        .and_then(|v| v.as_table())
        .unwrap_or(&table);
    let list = |key: &str| -> Result<Vec<u64>, Error> {
        let bad = |integers| Error::OcamlInfoField {
            path: path.to_path_buf(),
            key: key.to_string(),
            integers,
        };
        match t.get(key) {
            None => Ok(Vec::new()),
            Some(v) => v
                .as_array()
                .ok_or_else(|| bad(false))?
                .iter()
                .map(|x| x.as_integer().map(|i| i as u64).ok_or_else(|| bad(true)))
                .collect(),
        }
    };
    Ok(OcamlExceptionInfo::new(
        &list("pushtraps")?,
        &list("poptraps")?,
        &list("entertraps")?,
    ))
}
