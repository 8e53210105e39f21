//! The basic-block cache: a block is decoded once per address space and address, then
//! walked from the cache (as libxdc does: the walk costs a lookup per block instead of
//! decoding every instruction). A small direct-mapped table in front of the map holds
//! the blocks met last, where a trace spends its time.

use crate::insn::{decode_block, Block, Fact, FactOptions};
use rustc_hash::FxHashMap;

/// log2 of the direct-mapped table's slots.
const FRONT_BITS: u32 = 12;

/// Blocks decoded so far, by (address space, address), and their facts.
pub struct BlockCache {
    map: FxHashMap<(u32, u64), Block>,
    /// (space, block) by address hash; `start == u64::MAX` is empty.
    front: Box<[(u32, Block)]>,
    facts: Vec<Fact>,
    opts: FactOptions,
    /// Blocks decoded (cache misses).
    decoded: u64,
}

/// An empty front slot.
const EMPTY: Block = Block {
    start: u64::MAX,
    last: 0,
    next: 0,
    target: 0,
    insns: 0,
    end: crate::insn::End::Cut,
    rep: false,
    facts_first: 0,
    facts_count: 0,
};

impl BlockCache {
    /// An empty cache whose blocks record the facts `opts` asks for.
    pub fn new(opts: FactOptions) -> Self {
        BlockCache {
            map: FxHashMap::default(),
            front: vec![(0, EMPTY); 1 << FRONT_BITS].into_boxed_slice(),
            facts: Vec::new(),
            opts,
            decoded: 0,
        }
    }

    /// What blocks record besides branches.
    pub fn fact_options(&self) -> FactOptions {
        self.opts
    }

    /// The block at `ip` in `space`, decoding it from `code` (the bytes from `ip` on,
    /// asked for only on a miss) in a `bitness`-bit segment; `None` when there is no
    /// code there.
    #[inline(always)]
    pub fn get<'c>(
        &mut self,
        space: u32,
        ip: u64,
        bitness: u32,
        code: impl FnOnce() -> Option<&'c [u8]>,
    ) -> Option<Block> {
        // Inlined into the walk so that the block stays in registers: returned from a
        // call, it was stored field by field and read back wider, a stalled load that
        // took a third of the walk's samples.
        let slot = (ip.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FRONT_BITS)) as usize;
        let (s, b) = &self.front[slot];
        if b.start == ip && *s == space {
            return Some(*b);
        }
        self.get_slow(slot, space, ip, bitness, code)
    }

    /// [`BlockCache::get`] past the direct-mapped table: the map, or a decode.
    #[inline(never)]
    fn get_slow<'c>(
        &mut self,
        slot: usize,
        space: u32,
        ip: u64,
        bitness: u32,
        code: impl FnOnce() -> Option<&'c [u8]>,
    ) -> Option<Block> {
        let b = match self.map.get(&(space, ip)) {
            Some(b) => *b,
            None => {
                let bytes = code()?;
                let b = decode_block(bytes, ip, bitness, self.opts, &mut self.facts);
                if b.insns == 0 {
                    return None;
                }
                self.decoded += 1;
                self.map.insert((space, ip), b);
                b
            }
        };
        self.front[slot] = (space, b);
        Some(b)
    }

    /// A block's facts.
    #[inline]
    pub fn facts(&self, b: &Block) -> &[Fact] {
        let first = b.facts_first as usize;
        self.facts
            .get(first..first + usize::from(b.facts_count))
            .unwrap_or_default()
    }

    /// Blocks decoded (misses) so far.
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when nothing was decoded yet.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets the blocks of `space` (its code changed: an exec, a new mapping over
    /// old code).
    pub fn invalidate(&mut self, space: u32) {
        self.map.retain(|&(s, _), _| s != space);
        for slot in self.front.iter_mut() {
            if slot.0 == space {
                *slot = (0, EMPTY);
            }
        }
    }
}
