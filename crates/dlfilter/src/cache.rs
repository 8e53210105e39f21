//! What was already sent, per process: locations of callchain addresses and branch
//! ends, and whole callchains, so a repeated one costs a lookup.

use crate::ffi::Al;
use crate::State;
use std::collections::HashMap;

/// FxHash: callchain addresses are hashed millions of times, SipHash is too slow.
#[derive(Default, Clone, Copy)]
pub(crate) struct Fx(u64);

impl std::hash::Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Slices of integers (callchains) arrive here as bytes: take them 8 at a time.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(a));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fx>>;

/// A location sent in a `LOC` record, and what perf resolved it from.
#[derive(Copy, Clone)]
pub(crate) struct Cached {
    pub(crate) id: u32,
    pub(crate) sym: u32,
    pub(crate) dso: u32,
    pub(crate) sym_ptr: usize,
    pub(crate) dso_ptr: usize,
}

/// What was sent for one process, so repeated addresses and callchains cost a lookup.
#[derive(Default)]
pub(crate) struct ProcCache {
    /// The comm perf reports for the process; a new one (exec) invalidates the cache.
    pub(crate) comm: usize,
    /// Callchain address → its location (printed DSO-relative, as perf prints frames).
    pub(crate) frames: FxMap<u64, Cached>,
    /// Branch end (absolute address) → its location (printed absolute, as perf does).
    pub(crate) ends: FxMap<u64, Cached>,
    /// Raw callchain → (chain id, symbol and DSO pointers the sample's ip resolved to).
    pub(crate) chains: FxMap<Box<[u64]>, (u32, usize, usize)>,
}

impl ProcCache {
    pub(crate) fn clear(&mut self) {
        self.frames.clear();
        self.ends.clear();
        self.chains.clear();
    }
}

/// One slot of the direct-mapped cache in front of the branch-end maps: most branches
/// of a trace go between a few thousand addresses, and one compare is cheaper than a
/// process lookup and a hash-table probe.
#[derive(Copy, Clone)]
pub(crate) struct Hot {
    pub(crate) addr: u64,
    pub(crate) pid: i32,
    pub(crate) c: Cached,
}

impl Hot {
    /// A slot that matches nothing (no process has pid `i32::MIN`).
    pub(crate) const EMPTY: Hot = Hot {
        addr: 0,
        pid: i32::MIN,
        c: Cached {
            id: 0,
            sym: 0,
            dso: 0,
            sym_ptr: 0,
            dso_ptr: 0,
        },
    };
}

/// log2 of the number of [`Hot`] slots (96 KB of them).
pub(crate) const HOT_BITS: u32 = 11;

pub(crate) fn hot_index(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - HOT_BITS)) as usize
}

/// A process's cache of one kind is dropped past this many entries, bounding memory.
pub(crate) const MAX_CACHED: usize = 1 << 20;

impl State {
    /// Empties every process's caches (locations, chains); ids already sent stay valid.
    pub(crate) fn forget_all(&mut self) {
        for p in self.procs.values_mut() {
            p.clear();
        }
        self.hot.fill(Hot::EMPTY);
    }

    /// A branch end's cached location (`sideband` only: no check against perf), from
    /// the direct-mapped front cache or the process's map.
    pub(crate) fn known_end(&mut self, pid: i32, addr: u64) -> Option<Cached> {
        let i = hot_index(addr);
        let h = &self.hot[i];
        if h.addr == addr && h.pid == pid {
            return Some(h.c);
        }
        let c = *self.procs.get(&pid)?.ends.get(&addr)?;
        self.hot[i] = Hot { addr, pid, c };
        Some(c)
    }

    /// The process's cache, emptied first when its mappings may have changed: a new
    /// comm (exec), or no location for the sample's own address.
    pub(crate) fn proc_cache(&mut self, pid: i32, ip_al: Option<&Al>) -> &mut ProcCache {
        let comm = ip_al.map_or(0, |a| a.comm as usize);
        let p = self.procs.entry(pid).or_default();
        if ip_al.is_none() || p.comm != comm {
            p.clear();
            p.comm = comm;
        }
        p
    }
}
