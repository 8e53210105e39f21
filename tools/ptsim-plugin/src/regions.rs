//! Where functions begin and end in the guest's address space, for stack mode's choice
//! of which jumps to log: the last maps snapshot, and each mapped ELF file's functions
//! loaded once through `ptscope_symbols::FileFunctions` — the very functions ptscope's
//! decoder names, so code the plugin sees stay in one region stays in one named function.

use ptscope_blocklog::MapEntry;
use ptscope_symbols::FileFunctions;
use std::collections::HashMap;
use std::sync::Arc;

/// Which region an address is in: two addresses in the same region are named the same
/// function by the decoder.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// A region of a mapped ELF file (by its index in [`Regions::files`]), and whether a
    /// function covers it.
    File(usize, u64, bool),
    /// Memory that is no ELF file the decoder can read (JIT code, an anonymous
    /// mapping): the decoder names it all alike.
    Anonymous,
    /// Outside every mapping of the snapshot.
    Unmapped,
}

impl Key {
    /// Code no function covers: the decoder names each of its addresses on its own, so
    /// every block there is logged.
    pub(crate) fn uncovered(self) -> bool {
        matches!(self, Key::File(_, _, false) | Key::Unmapped)
    }
}

/// The maps snapshot and the functions of the files in it.
#[derive(Default)]
pub(crate) struct Regions {
    /// Every mapping, whatever its permissions: qemu-user maps guest code without host
    /// execute permission.
    maps: Vec<MapEntry>,
    /// Per mapping of `maps`, the index of its file in `files` once looked up (the
    /// lookups of a translation stay in one or two mappings: no path hashed each time).
    file_of: Vec<Option<usize>>,
    /// The mapping the last lookup found: the next one is most often in it.
    last: usize,
    /// Loaded files by path, and their functions (`None`: not readable as ELF).
    files: Vec<(String, Option<Arc<FileFunctions>>)>,
    by_path: HashMap<String, usize>,
}

impl Regions {
    /// A forked child's: the parent's files, already loaded (loading them again costs
    /// the child as much as it cost the parent); its own maps are read at the fork.
    pub(crate) fn inherit(&self) -> Regions {
        Regions {
            maps: Vec::new(),
            file_of: Vec::new(),
            last: 0,
            files: self.files.clone(),
            by_path: self.by_path.clone(),
        }
    }

    /// The maps snapshot.
    pub(crate) fn maps(&self) -> &[MapEntry] {
        &self.maps
    }

    /// Replaces the maps snapshot.
    pub(crate) fn set_maps(&mut self, maps: Vec<MapEntry>) {
        self.file_of = vec![None; maps.len()];
        self.maps = maps;
        self.last = 0;
    }

    /// True when `addr` is inside a mapping of the snapshot.
    pub(crate) fn covers(&mut self, addr: u64) -> bool {
        self.mapping(addr).is_some()
    }

    /// The index in `maps` of the mapping holding `addr`.
    fn mapping(&mut self, addr: u64) -> Option<usize> {
        let hit = |m: &MapEntry| addr >= m.start && addr < m.end;
        if self.maps.get(self.last).is_some_and(hit) {
            return Some(self.last);
        }
        let i = self.maps.iter().position(hit)?;
        self.last = i;
        Some(i)
    }

    /// The region of `addr`.
    pub(crate) fn key(&mut self, addr: u64) -> Key {
        let Some(mi) = self.mapping(addr) else {
            return Key::Unmapped;
        };
        let m = &self.maps[mi];
        if !m.path.starts_with('/') {
            return Key::Anonymous;
        }
        let off = addr - m.start + m.pgoff;
        let i = match self.file_of[mi] {
            Some(i) => i,
            None => {
                let i = self.file_index(mi);
                self.file_of[mi] = Some(i);
                i
            }
        };
        let Some(f) = self.files[i].1.as_ref() else {
            // An unreadable file: the decoder names its addresses one by one.
            return Key::File(i, addr, false);
        };
        match f.link_address(off) {
            Some(v) => {
                let r = f.region_of(v);
                Key::File(i, r.start, r.covered)
            }
            None => Key::File(i, addr, false),
        }
    }

    /// The index in `files` of mapping `mi`'s file, loaded at its first use.
    #[cold]
    fn file_index(&mut self, mi: usize) -> usize {
        let path = &self.maps[mi].path;
        if let Some(&i) = self.by_path.get(path) {
            return i;
        }
        let path = path.clone();
        let f = FileFunctions::load(std::path::Path::new(&path))
            .ok()
            .map(Arc::new);
        self.files.push((path.clone(), f));
        self.by_path.insert(path, self.files.len() - 1);
        self.files.len() - 1
    }
}
