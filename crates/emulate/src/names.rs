//! Naming code addresses of an emulate recording: the process's maps (from the log's
//! snapshots) and each mapped ELF file's functions (`ptscope_symbols::FileFunctions`,
//! the table the plugin cut its regions from), loaded once per file and shared by the
//! threads decoded in parallel.

use ptscope_blocklog::MapEntry;
use ptscope_event::exact::{FuncId, Functions};
use ptscope_symbols::FileFunctions;
use rustc_hash::FxHashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Files' functions, loaded once for all threads (and processes) of a recording.
#[derive(Default)]
pub struct FileCache {
    files: Mutex<FxHashMap<String, Arc<Option<FileFunctions>>>>,
}

impl FileCache {
    /// `path`'s functions (`None` if it cannot be read as ELF).
    fn get(&self, path: &str) -> Arc<Option<FileFunctions>> {
        if let Ok(files) = self.files.lock() {
            if let Some(f) = files.get(path) {
                return f.clone();
            }
        }
        // Loaded outside the lock: another thread may load it too, the first one stays.
        let f = Arc::new(FileFunctions::load(Path::new(path)).ok());
        match self.files.lock() {
            Ok(mut files) => files.entry(path.to_string()).or_insert(f).clone(),
            Err(_) => f,
        }
    }
}

/// A code mapping of the traced process.
#[derive(Clone, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
}

/// The process's code mappings, newest snapshot first.
#[derive(Clone, Debug, Default)]
pub struct Maps {
    maps: Vec<Mapping>,
}

impl Maps {
    /// The mappings of every snapshot, the newest first (a range reused after a
    /// `dlclose` names the newest file).
    pub fn new(snapshots: &[(u64, Vec<MapEntry>)]) -> Self {
        let mut order: Vec<&(u64, Vec<MapEntry>)> = snapshots.iter().collect();
        order.sort_by_key(|s| std::cmp::Reverse(s.0));
        let mut maps: Vec<Mapping> = Vec::new();
        for snap in order {
            for m in &snap.1 {
                if !m.path.starts_with('/') {
                    continue;
                }
                if maps
                    .iter()
                    .any(|o| o.start == m.start && o.end == m.end && o.path == m.path)
                {
                    continue;
                }
                maps.push(Mapping {
                    start: m.start,
                    end: m.end,
                    pgoff: m.pgoff,
                    path: m.path.clone(),
                });
            }
        }
        Maps { maps }
    }
}

/// One thread's naming: addresses to the functions of its [`Functions`] table, each
/// answer cached by address.
pub struct Namer {
    maps: Arc<Maps>,
    cache: Arc<FileCache>,
    /// Files by path, as this thread loaded them.
    files: FxHashMap<String, Arc<Option<FileFunctions>>>,
    /// Address → function.
    by_addr: FxHashMap<u64, FuncId>,
    /// `(entry, name)` → function: one number per function however reached.
    by_entry: FxHashMap<(u64, Box<str>), FuncId>,
    /// The functions named so far.
    pub funcs: Functions,
    /// Anonymous code (JIT, or memory no file backs): one function for all of it.
    anonymous: Option<FuncId>,
}

impl Namer {
    /// A namer over `maps`, loading files through `cache`.
    pub fn new(maps: Arc<Maps>, cache: Arc<FileCache>) -> Self {
        Namer {
            maps,
            cache,
            files: FxHashMap::default(),
            by_addr: FxHashMap::default(),
            by_entry: FxHashMap::default(),
            funcs: Functions::default(),
            anonymous: None,
        }
    }

    fn intern(&mut self, entry: u64, known: bool, name: &str) -> FuncId {
        if let Some(&id) = self.by_entry.get(&(entry, name.into())) {
            return id;
        }
        let id = self.funcs.add(entry, known, name);
        self.by_entry.insert((entry, name.into()), id);
        id
    }

    /// The function holding `ip`.
    pub fn function(&mut self, ip: u64) -> FuncId {
        if let Some(&f) = self.by_addr.get(&ip) {
            return f;
        }
        let f = self.resolve(ip);
        self.by_addr.insert(ip, f);
        f
    }

    /// The function holding `ip`, and whether `ip` is its entry.
    pub fn entry_of(&self, f: FuncId) -> u64 {
        self.funcs.get(f).map_or(0, |f| f.entry)
    }

    fn resolve(&mut self, ip: u64) -> FuncId {
        let Some(m) = self
            .maps
            .maps
            .iter()
            .find(|m| ip >= m.start && ip < m.end)
            .cloned()
        else {
            // JIT code or code in an anonymous mapping: nothing names it.
            return match self.anonymous {
                Some(f) => f,
                None => {
                    let f = self.funcs.add(0, false, "[unknown]");
                    self.anonymous = Some(f);
                    f
                }
            };
        };
        let file = match self.files.get(&m.path) {
            Some(f) => f.clone(),
            None => {
                let f = self.cache.get(&m.path);
                self.files.insert(m.path.clone(), f.clone());
                f
            }
        };
        let unknown = |ip: u64| format!("[unknown @ {ip:#x} ({})]", m.path);
        let Some(f) = file.as_ref() else {
            return self.intern(ip, false, &unknown(ip));
        };
        let off = (ip - m.start).wrapping_add(m.pgoff);
        let found = f.link_address(off).and_then(|v| {
            let found = f.function_at(v)?;
            Some((ip.wrapping_sub(v - found.start), found.name.into_owned()))
        });
        match found {
            Some((entry, name)) => self.intern(entry, true, &name),
            // Named after its own address, as perf names code it has no symbol for.
            None => self.intern(ip, false, &unknown(ip)),
        }
    }
}
