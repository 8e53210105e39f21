//! The code the trace ran: every file the recording mapped, found by build id (perf's
//! build-id cache, the path named, the vDSO from perf's or ptscope's saved copy or this
//! very machine's), the processes' address spaces over time, and the decoder's view of
//! them ([`QueueMemory`]).
//!
//! A file whose build id differs from the one perf recorded is refused: its code would
//! decode into branches that never ran. Its addresses then decode as missing code (a
//! decode error, and decoding resumes at the next IP packet).

use ptscope_intel_pt::decoder::Memory;
use ptscope_perf_data::BuildId;
use ptscope_symbols::MappedFile;
use rustc_hash::FxHashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// No file behind a mapping (anonymous memory, JIT code, the heap).
pub(crate) const NO_FILE: u32 = u32::MAX;

/// The name of the vDSO copy `ptscope run` saves in its working directory.
pub const VDSO_FILE: &str = "vdso.so";

/// A file's bytes: mapped, or read (the vDSO).
enum Bytes {
    Mapped(MappedFile),
    Owned(Vec<u8>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m.bytes(),
            Bytes::Owned(v) => v,
        }
    }
}

/// Why a file's code is not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not found (or not a regular file, or not readable).
    Missing(String),
    /// Found, but with another build id than the recording's.
    BuildIdMismatch {
        /// What perf recorded.
        recorded: String,
        /// What the file has (empty: none).
        found: String,
    },
}

/// One file the recording mapped code from.
pub(crate) struct File {
    /// The path perf recorded (`[vdso]` for the vDSO).
    pub(crate) path: Box<str>,
    bytes: Option<Bytes>,
    /// Why there are no bytes.
    pub(crate) refused: Option<Refused>,
    /// Where the bytes came from (the path, a cache entry, memory).
    pub(crate) from: Option<PathBuf>,
}

impl File {
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        self.bytes.as_ref().map(Bytes::get)
    }
}

/// One mapping of an image: `[start, end)` from `file` at `pgoff`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Map {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) pgoff: u64,
    pub(crate) file: u32,
}

/// One address space: a process between two execs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Image {
    /// In the order mapped: a later mapping over an earlier one wins.
    pub(crate) maps: Vec<Map>,
}

/// A thread in an address space: what the decoder calls a space.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Context {
    pub(crate) pid: u32,
    pub(crate) tid: u32,
    pub(crate) image: u32,
}

/// Every file, image and context of a recording.
#[derive(Default)]
pub(crate) struct Space {
    pub(crate) files: Vec<File>,
    by_path: FxHashMap<Box<[u8]>, u32>,
    pub(crate) images: Vec<Image>,
    pub(crate) contexts: Vec<Context>,
    context_ids: FxHashMap<Context, u32>,
}

/// Where to look for files besides their paths.
pub(crate) struct Lookup<'a> {
    /// The recording's directory (a `ptscope run` working directory may hold `vdso.so`).
    pub(crate) dir: Option<&'a Path>,
    /// The owner of the recording: files it owns (or root) may be trusted.
    pub(crate) owner: u32,
    /// perf's build-id cache (`~/.debug` of the user running ptscope).
    pub(crate) buildid_cache: Option<PathBuf>,
}

impl Space {
    /// The file `path` (loading it the first time), checked against `recorded`.
    pub(crate) fn file(
        &mut self,
        path: &[u8],
        recorded: Option<BuildId>,
        lookup: &Lookup<'_>,
    ) -> u32 {
        if let Some(&i) = self.by_path.get(path) {
            return i;
        }
        let name = String::from_utf8_lossy(path).into_owned();
        let (bytes, from, refused) = load(&name, recorded, lookup);
        let i = self.files.len() as u32;
        self.files.push(File {
            path: name.into(),
            bytes,
            refused,
            from,
        });
        self.by_path.insert(path.into(), i);
        i
    }

    /// The context of thread `tid` of `pid` in `image`.
    pub(crate) fn context(&mut self, pid: u32, tid: u32, image: u32) -> u32 {
        let c = Context { pid, tid, image };
        if let Some(&i) = self.context_ids.get(&c) {
            return i;
        }
        let i = self.contexts.len() as u32;
        self.contexts.push(c);
        self.context_ids.insert(c, i);
        i
    }

    /// The mapping holding `ip` in context `ctx`.
    #[inline]
    pub(crate) fn map_at(&self, ctx: u32, ip: u64) -> Option<&Map> {
        let c = self.contexts.get(ctx as usize)?;
        let img = self.images.get(c.image as usize)?;
        img.maps.iter().rev().find(|m| ip >= m.start && ip < m.end)
    }

    /// The code at `ip` in context `ctx`, to the end of its mapping.
    pub(crate) fn code(&self, ctx: u32, ip: u64) -> Option<&[u8]> {
        let m = self.map_at(ctx, ip)?;
        let f = self.files.get(m.file as usize)?;
        let bytes = f.bytes()?;
        let off = usize::try_from(ip - m.start + m.pgoff).ok()?;
        let end = usize::try_from(m.end - m.start + m.pgoff)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        bytes.get(off..end)
    }
}

impl Space {
    /// OCaml's exception handlers in the OCaml programs the recording ran: the trap
    /// instructions of their code (found as the walk finds them), at the addresses each
    /// was mapped at; `None` when no OCaml program's code is at hand.
    pub(crate) fn ocaml_exception_info(&self) -> Option<ptscope_event::OcamlExceptionInfo> {
        use object::{Object, ObjectSection, ObjectSymbol, SectionKind};
        let (mut push, mut pop, mut handlers) = (Vec::new(), Vec::new(), Vec::new());
        for (fi, f) in self.files.iter().enumerate() {
            let Some(bytes) = f.bytes() else { continue };
            let Ok(elf) = ptscope_symbols::Elf::parse(bytes, Path::new(&*f.path)) else {
                continue;
            };
            let obj = elf.object();
            if !obj.symbols().any(|s| s.name() == Ok("caml_start_program")) {
                continue;
            }
            // Where this file's offsets ran: each mapping of it.
            let maps: Vec<&Map> = self
                .images
                .iter()
                .flat_map(|i| &i.maps)
                .filter(|m| m.file == fi as u32)
                .collect();
            for sec in obj.sections().filter(|s| s.kind() == SectionKind::Text) {
                let Some((off, size)) = sec.file_range() else {
                    continue;
                };
                let Some(code) = usize::try_from(off)
                    .ok()
                    .and_then(|o| bytes.get(o..o.checked_add(usize::try_from(size).ok()?)?))
                else {
                    continue;
                };
                // Scanned at file offsets, then moved to each mapping's addresses.
                let t = ptscope_intel_pt::insn::ocaml_traps(code, off);
                for m in &maps {
                    let len = m.end - m.start;
                    let at = |o: u64| {
                        (o >= m.pgoff && o - m.pgoff < len).then(|| m.start + (o - m.pgoff))
                    };
                    push.extend(t.pushtraps.iter().filter_map(|&o| at(o)));
                    pop.extend(t.poptraps.iter().filter_map(|&o| at(o)));
                    handlers.extend(t.handlers.iter().filter_map(|&o| at(o)));
                }
            }
        }
        for v in [&mut push, &mut pop] {
            v.sort_unstable();
            v.dedup();
        }
        (!push.is_empty()).then(|| ptscope_event::OcamlExceptionInfo::new(&push, &pop, &handlers))
    }
}

/// Finds `name`'s bytes: `(bytes, where from, why refused)`.
fn load(
    name: &str,
    recorded: Option<BuildId>,
    lookup: &Lookup<'_>,
) -> (Option<Bytes>, Option<PathBuf>, Option<Refused>) {
    let hex = recorded.map(|b| b.to_string()).filter(|h| !h.is_empty());
    let matches = |id: Option<&[u8]>| match recorded {
        Some(r) => id == Some(r.as_bytes()),
        None => true,
    };
    let missing = |why: String| (None, None, Some(Refused::Missing(why)));
    if name == "[vdso]" {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(d) = lookup.dir {
            candidates.push(d.join(VDSO_FILE));
        }
        if let (Some(c), Some(h)) = (&lookup.buildid_cache, &hex) {
            candidates.push(c.join("[vdso]").join(h).join("vdso"));
        }
        for c in candidates {
            if !trusted(&c, lookup.owner) {
                continue;
            }
            if let Ok(f) = MappedFile::open_regular(&c) {
                let id = f.elf().ok().and_then(|e| e.build_id().map(<[u8]>::to_vec));
                if matches(id.as_deref()) {
                    return (Some(Bytes::Mapped(f)), Some(c), None);
                }
            }
        }
        // The same kernel gives every process the same vDSO: this process's, when its
        // build id is the one recorded.
        if let (Some(bytes), Some(_)) = (own_vdso(), recorded) {
            let id = ptscope_symbols::Elf::parse(&bytes, Path::new("[vdso]"))
                .ok()
                .and_then(|e| e.build_id().map(<[u8]>::to_vec));
            if matches(id.as_deref()) {
                return (
                    Some(Bytes::Owned(bytes)),
                    Some(PathBuf::from("[vdso]")),
                    None,
                );
            }
        }
        return missing(
            "no copy of the vDSO: perf's build-id cache has none, and the recording's \
             directory has no vdso.so"
                .into(),
        );
    }
    if !name.starts_with('/') {
        return missing("not a file".into());
    }
    // perf's build-id cache keeps the file as it was when recorded.
    if let (Some(cache), Some(h)) = (&lookup.buildid_cache, &hex) {
        if h.len() > 2 {
            let c = cache
                .join(".build-id")
                .join(&h[..2])
                .join(&h[2..])
                .join("elf");
            if trusted(&c, 0) {
                if let Ok(f) = MappedFile::open_regular(&c) {
                    let id = f.elf().ok().and_then(|e| e.build_id().map(<[u8]>::to_vec));
                    if matches(id.as_deref()) {
                        return (Some(Bytes::Mapped(f)), Some(c), None);
                    }
                }
            }
        }
    }
    match MappedFile::open_regular(name) {
        Ok(f) => {
            if recorded.is_some() {
                let id = f.elf().ok().and_then(|e| e.build_id().map(<[u8]>::to_vec));
                if !matches(id.as_deref()) {
                    let found = id.map(|i| BuildId::new(&i).to_string()).unwrap_or_default();
                    return (
                        None,
                        None,
                        Some(Refused::BuildIdMismatch {
                            recorded: hex.unwrap_or_default(),
                            found,
                        }),
                    );
                }
            }
            (Some(Bytes::Mapped(f)), Some(PathBuf::from(name)), None)
        }
        Err(e) => missing(e.to_string()),
    }
}

/// A file ptscope may load code from: a regular file owned by root or `owner`, which
/// neither group nor others can write, in a directory they cannot write either.
fn trusted(path: &Path, owner: u32) -> bool {
    let ok = |m: &std::fs::Metadata| (m.uid() == 0 || m.uid() == owner) && m.mode() & 0o022 == 0;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    meta.is_file()
        && ok(&meta)
        && path
            .parent()
            .and_then(|d| std::fs::metadata(d).ok())
            .is_some_and(|m| ok(&m))
}

/// Saves this process's vDSO as `dir/vdso.so` ([`VDSO_FILE`]), where decoding a
/// recording made in `dir` finds it (the vDSO every process of this kernel runs; perf
/// keeps a copy only when its build-id cache is writable). A file already there is
/// replaced; a symbolic link is not followed.
pub fn save_vdso(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let bytes = own_vdso().ok_or_else(|| std::io::Error::other("this process has no vDSO"))?;
    let path = dir.join(VDSO_FILE);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    ptscope_rootsafe::create_new(&path)?.write_all(&bytes)
}

/// This process's vDSO, read from its own memory.
pub fn own_vdso() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (a, b) = range.split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    let len = usize::try_from(b.checked_sub(a)?).ok()?;
    let mut buf = vec![0u8; len];
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut buf, a).ok()?;
    Some(buf)
}

/// The decoder's view of one queue: the code of the space running at each time.
pub(crate) struct QueueMemory<'a> {
    pub(crate) space: &'a Space,
    /// `(TSC, context)`: from each time on, that context runs; sorted.
    pub(crate) timeline: &'a [(u64, u32)],
}

impl Memory for QueueMemory<'_> {
    #[inline]
    fn code(&self, space: u32, ip: u64) -> Option<&[u8]> {
        self.space.code(space, ip)
    }

    fn space_at(&self, time: u64) -> u32 {
        let i = self.timeline.partition_point(|&(t, _)| t <= time);
        match i {
            0 => self.timeline.first().map_or(0, |e| e.1),
            _ => self.timeline[i - 1].1,
        }
    }

    fn cache_key(&self, space: u32) -> u32 {
        self.space
            .contexts
            .get(space as usize)
            .map_or(u32::MAX, |c| c.image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(dir: Option<&Path>) -> Lookup<'_> {
        Lookup {
            dir,
            owner: 0,
            buildid_cache: None,
        }
    }

    fn build_id_of(bytes: &[u8]) -> Option<Vec<u8>> {
        ptscope_symbols::Elf::parse(bytes, Path::new("x"))
            .ok()
            .and_then(|e| e.build_id().map(<[u8]>::to_vec))
    }

    /// A file whose build id is not the recorded one is refused, with both ids named;
    /// the right id loads it.
    #[test]
    fn mismatching_build_id_is_refused() {
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let Some(id) = build_id_of(&bytes) else {
            eprintln!("skipping: the test binary has no build id");
            return;
        };
        let name = exe.to_str().unwrap();
        let (b, from, refused) = load(name, Some(BuildId::new(&id)), &lookup(None));
        assert!(b.is_some() && refused.is_none(), "{refused:?}");
        assert_eq!(from.as_deref(), Some(exe.as_path()));
        let mut wrong = id.clone();
        wrong[0] ^= 0xff;
        let (b, _, refused) = load(name, Some(BuildId::new(&wrong)), &lookup(None));
        assert!(b.is_none());
        match refused {
            Some(Refused::BuildIdMismatch { recorded, found }) => {
                assert_eq!(recorded, BuildId::new(&wrong).to_string());
                assert_eq!(found, BuildId::new(&id).to_string());
            }
            other => panic!("{other:?}"),
        }
        let (b, _, refused) = load("/nonexistent/file", None, &lookup(None));
        assert!(b.is_none() && matches!(refused, Some(Refused::Missing(_))));
    }

    /// The vDSO `ptscope run` saves is found in the recording's directory, and only
    /// with the recorded build id.
    #[test]
    fn saved_vdso_is_found_by_build_id() {
        let Some(own) = own_vdso() else {
            eprintln!("skipping: no vDSO");
            return;
        };
        let id = build_id_of(&own).expect("the vDSO has a build id");
        let dir = tempfile::tempdir().unwrap();
        save_vdso(dir.path()).unwrap();
        // Saving again replaces the copy.
        save_vdso(dir.path()).unwrap();
        let saved = std::fs::read(dir.path().join(VDSO_FILE)).unwrap();
        assert_eq!(saved, own);
        let (b, from, refused) = load("[vdso]", Some(BuildId::new(&id)), &lookup(Some(dir.path())));
        assert!(refused.is_none(), "{refused:?}");
        assert_eq!(b.unwrap().get(), &own[..]);
        assert_eq!(from, Some(dir.path().join(VDSO_FILE)));
        // Another build id: neither the copy nor this process's vDSO will do.
        let mut wrong = id.clone();
        wrong[1] ^= 0xff;
        let (b, _, refused) = load(
            "[vdso]",
            Some(BuildId::new(&wrong)),
            &lookup(Some(dir.path())),
        );
        assert!(b.is_none() && matches!(refused, Some(Refused::Missing(_))));
    }
}
