//! An emulate recording on disk: every process's block log (the first one's
//! [`crate::LOG_NAME`] and one `emulate-blocks-PID.log` per forked child), mapped and
//! indexed without copying an execution, and what each snapshot holds of each thread.

use crate::names::{FileCache, Maps};
use crate::LOG_NAME;
use anyhow::{Context, Result};
use ptscope_blocklog::{Hit, LogError, LogIndex, TbRecord};
use ptscope_symbols::MappedFile;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A child's log name in the recording directory.
pub(crate) fn child_log_name(pid: u32) -> String {
    format!("{}-{pid}.log", LOG_NAME.trim_end_matches(".log"))
}

/// The pid a child's log file name carries.
fn child_pid(name: &str) -> Option<u32> {
    name.strip_prefix(LOG_NAME.trim_end_matches(".log"))?
        .strip_prefix('-')?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The recording's logs: the first process's, then the children's by pid.
pub fn process_logs(dir: &Path) -> Result<Vec<(Option<u32>, PathBuf)>> {
    let mut children: Vec<(Option<u32>, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let pid = child_pid(e.file_name().to_str()?)?;
            Some((Some(pid), e.path()))
        })
        .collect();
    children.sort();
    let mut out = vec![(None, dir.join(LOG_NAME))];
    out.extend(children);
    Ok(out)
}

/// The logs of a recording, mapped.
pub struct Recording {
    dir: PathBuf,
    files: Vec<(Option<u32>, PathBuf, MappedFile)>,
    /// Children whose logs could not be read.
    left_out: Vec<String>,
}

impl Recording {
    /// Maps every log of the recording in `dir`; a child's log that cannot be read is
    /// left out (said by [`View::notices`]).
    pub fn open(dir: &Path) -> Result<Self> {
        let mut files = Vec::new();
        let mut left_out = Vec::new();
        for (child, path) in process_logs(dir)? {
            match MappedFile::open_regular(&path) {
                Ok(m) => files.push((child, path, m)),
                Err(e) if child.is_none() => {
                    return Err(e).with_context(|| {
                        format!("cannot read the emulate block log {}", path.display())
                    })
                }
                Err(e) => left_out.push(format!(
                    "the forked child {} is not in the trace: {e}",
                    child.unwrap_or(0)
                )),
            }
        }
        Ok(Recording {
            dir: dir.to_path_buf(),
            files,
            left_out,
        })
    }

    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Indexes the logs.
    pub fn view(&self) -> Result<View<'_>> {
        let logs: Vec<(Option<u32>, &Path, &[u8])> = self
            .files
            .iter()
            .map(|(c, p, m)| (*c, p.as_path(), m.bytes()))
            .collect();
        let mut v = View::index(&logs, true)?;
        // Reading the other chunks after an exec stream's may have mapped its pages again
        // (the kernel maps a whole large folio of the page cache at a fault): the streams
        // are read later, a piece at a time.
        for p in &v.procs {
            for t in &p.index.threads {
                for &piece in &t.chunks {
                    v.release(p.index.stream(piece));
                }
            }
        }
        let mut notices = self.left_out.clone();
        notices.append(&mut v.notices);
        v.notices = notices;
        Ok(v)
    }
}

impl<'a> View<'a> {
    /// Indexes logs held in memory: the first process's, then forked children's (with
    /// the pid their file name gives), each with its path for messages. Fails only when
    /// the first one is not a block log.
    pub fn from_logs(logs: &[(Option<u32>, &Path, &'a [u8])]) -> Result<Self> {
        Self::index(logs, false)
    }

    /// Indexes logs; `mapped`: they are files mapped read-only, whose exec streams' pages
    /// are given back as they are indexed and read ([`View::release`]).
    fn index(logs: &[(Option<u32>, &Path, &'a [u8])], mapped: bool) -> Result<Self> {
        let mut procs: Vec<Proc<'a>> = Vec::new();
        let mut notices = Vec::new();
        for &(child, path, bytes) in logs {
            let indexed = |d: &[u8]| {
                if mapped {
                    // SAFETY: `d` lies in a read-only file mapping (`mapped`).
                    unsafe { release_pages(d) }
                }
            };
            let index = match LogIndex::new_with(bytes, indexed) {
                Ok(ix) => ix,
                Err(e) if child.is_none() => {
                    return Err(e).with_context(|| {
                        format!("cannot read the emulate block log {}", path.display())
                    })
                }
                Err(e) => {
                    notices.push(format!(
                        "the forked child {} is not in the trace: {}: {e}",
                        child.unwrap_or(0),
                        path.display()
                    ));
                    continue;
                }
            };
            match &index.damage {
                Some(LogError::Truncated { offset }) => notices.push(format!(
                    "the block log {} ends mid-write (qemu was stopped while writing it): \
                     the trace keeps the {offset} bytes written whole; the last moments of \
                     some threads are missing",
                    path.display()
                )),
                Some(e) => notices.push(format!(
                    "the block log {} is damaged ({e}): the trace keeps what comes before",
                    path.display()
                )),
                None => {}
            }
            let parent = index
                .fork
                .and_then(|f| procs.iter().position(|p| p.index.header.pid == f.parent));
            if index.fork.is_some() && parent.is_none() {
                notices.push(format!(
                    "the forked child {} is not in the trace: its parent's log is missing",
                    index.header.pid
                ));
                continue;
            }
            let maps = Arc::new(Maps::new(&index.maps));
            procs.push(Proc {
                index,
                parent,
                path: path.to_path_buf(),
                maps,
            });
        }
        Ok(View {
            procs,
            notices,
            files: Arc::new(FileCache::default()),
            mapped,
        })
    }
}

/// One process's log, indexed.
pub struct Proc<'a> {
    /// Its index.
    pub index: LogIndex<'a>,
    /// Its parent's place in [`View::procs`] (a forked child's).
    pub parent: Option<usize>,
    /// The log's path.
    pub path: PathBuf,
    /// Its code mappings.
    pub(crate) maps: Arc<Maps>,
}

impl Proc<'_> {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.index.header.pid
    }
}

/// Every process of a recording, indexed.
pub struct View<'a> {
    /// The processes: the first one, then its forked children.
    pub procs: Vec<Proc<'a>>,
    /// What makes the trace incomplete (a log cut short or damaged, a child left out).
    pub notices: Vec<String>,
    /// ELF files' functions, shared by every thread.
    pub(crate) files: Arc<FileCache>,
    /// The logs are files mapped read-only ([`Recording::view`]), so pages read can be
    /// given back ([`View::release`]); logs in memory (`from_logs`) never are.
    mapped: bool,
}

/// One thread's part of a snapshot: where its exec stream is, and the window of global
/// clocks kept.
#[derive(Clone, Debug)]
pub struct ThreadInput {
    /// Its process's place in [`View::procs`].
    pub proc: usize,
    /// The thread.
    pub tid: u32,
    /// `(offset, length)` of each piece of its exec stream, in order.
    pub pieces: Vec<(usize, usize)>,
    /// Blocks starting at or before this global clock are left out (the previous
    /// hit's, with `--multi-snapshot`).
    pub since: Option<u64>,
    /// Blocks starting after this global clock are left out (the hit's).
    pub until: Option<u64>,
}

/// One snapshot of a recording.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The hit it is taken at (`None`: the whole recording, no trigger hit).
    pub hit: Option<(usize, Hit)>,
    /// Its threads, processes in order, threads in log order.
    pub threads: Vec<ThreadInput>,
}

/// Gives back the whole pages inside `data`: a mapped page counts in the decoder's
/// resident memory until it is unmapped, so a log read front to back would otherwise be
/// held whole (282 MB of RSS for a 256 MB log). Read again, a page comes back from the file.
///
/// # Safety
/// `data` must lie in a read-only file mapping: anywhere else (the heap) MADV_DONTNEED
/// would make the bytes read as zeros.
pub(crate) unsafe fn release_pages(data: &[u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as usize,
        _ => return,
    };
    let start = (data.as_ptr() as usize).next_multiple_of(page);
    let end = (data.as_ptr() as usize + data.len()) / page * page;
    if end > start {
        // SAFETY: the caller's: the range is part of a read-only file mapping, whose
        // pages MADV_DONTNEED only unmaps from this process.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

impl<'a> View<'a> {
    /// Gives back the pages of `data` (a part of a log read) when the logs are mapped
    /// files ([`release_pages`]).
    pub(crate) fn release(&self, data: &[u8]) {
        if self.mapped {
            // SAFETY: `mapped`: the logs are read-only file mappings, and `data` is in one.
            unsafe { release_pages(data) }
        }
    }

    /// The name the traces give the function holding `ip` in process `p` (to compare
    /// with names from elsewhere).
    pub fn function_name(&self, p: usize, ip: u64) -> String {
        let Some(proc) = self.procs.get(p) else {
            return "[unknown]".into();
        };
        let mut namer = crate::names::Namer::new(proc.maps.clone(), self.files.clone());
        let f = namer.function(ip);
        namer.funcs.name(f).to_string()
    }

    /// The block `id` of process `p` (a child's ids below its base are its ancestors').
    pub fn tb(&self, mut p: usize, id: u32) -> Option<TbRecord<'a>> {
        loop {
            let proc = self.procs.get(p)?;
            if id >= proc.index.base {
                return proc.index.tb(id);
            }
            p = proc.parent?;
        }
    }

    /// The snapshots: one per trigger hit (processes in order), or the whole recording.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        let hits: Vec<(usize, Hit)> = self
            .procs
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.index.hits.iter().map(move |h| (i, *h)))
            .collect();
        if hits.is_empty() {
            let threads = self
                .procs
                .iter()
                .enumerate()
                .flat_map(|(i, p)| {
                    p.index.threads.iter().map(move |t| ThreadInput {
                        proc: i,
                        tid: t.tid,
                        pieces: t.chunks.clone(),
                        since: None,
                        until: None,
                    })
                })
                .collect();
            return vec![Snapshot { hit: None, threads }];
        }
        hits.iter()
            .map(|&(i, hit)| Snapshot {
                hit: Some((i, hit)),
                threads: crate::snapshot::at_hit(&self.procs[i], i, &hit),
            })
            .collect()
    }
}
