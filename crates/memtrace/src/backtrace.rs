//! The backtrace codec: a 16 384-bucket cache of location codes with next-bucket
//! prediction, shared in lockstep by writer and reader.

use crate::buf::{self, Cursor};
use crate::error::ErrorKind;
use crate::format::CacheVerifier;

pub(crate) const CACHE_SIZE: usize = 1 << 14;
const MASK: u64 = (CACHE_SIZE - 1) as u64;
/// Encoded backtraces stop growing past this many bytes.
pub(crate) const BT_MAX_LENGTH: usize = 4096;

#[inline]
fn hashes(slot: u64) -> (usize, usize) {
    // The reference computes these on 63-bit ints; bits 11..35 of the product are
    // the same in 64-bit wrapping arithmetic.
    let h1 = (slot.wrapping_mul(0x4983723) >> 11) & MASK;
    let h2 = (slot.wrapping_mul(0xfdea731) >> 21) & MASK;
    (h1 as usize, h2 as usize)
}

/// Reader side of the cache (one per domain).
#[derive(Debug)]
pub(crate) struct ReaderCache {
    loc: Box<[u64]>,
    pred: Box<[u16]>,
}

impl ReaderCache {
    pub(crate) fn new() -> Self {
        ReaderCache {
            loc: vec![0; CACHE_SIZE].into_boxed_slice(),
            pred: vec![0; CACHE_SIZE].into_boxed_slice(),
        }
    }

    pub(crate) fn check(&self, v: &CacheVerifier) -> bool {
        if v.ix == 0xffff {
            return true;
        }
        let ix = usize::from(v.ix);
        ix < CACHE_SIZE && self.pred[ix] == v.pred && self.loc[ix] == v.value
    }

    /// Decodes `nencoded` codewords, appending the slots (outermost first) to `out`.
    #[inline]
    pub(crate) fn decode(
        &mut self,
        c: &mut Cursor<'_>,
        nencoded: usize,
        out: &mut Vec<u64>,
    ) -> Result<(), ErrorKind> {
        let mut pred = 0usize;
        for _ in 0..nencoded {
            let cw = c.u16()?;
            let bucket = usize::from(cw >> 2);
            self.pred[pred] = bucket as u16;
            let ncorrect = match cw & 3 {
                0 => 0,
                1 => 1,
                2 => c.u8()?,
                _ => {
                    let lit = c.u64()?;
                    self.loc[bucket] = lit;
                    out.push(lit);
                    pred = bucket;
                    continue;
                }
            };
            out.push(self.loc[bucket]);
            pred = bucket;
            for _ in 0..ncorrect {
                pred = usize::from(self.pred[pred]);
                out.push(self.loc[pred]);
            }
        }
        Ok(())
    }

    /// Steps over `nencoded` codewords without touching the cache.
    #[inline]
    pub(crate) fn skip(c: &mut Cursor<'_>, nencoded: usize) -> Result<(), ErrorKind> {
        for _ in 0..nencoded {
            match c.u16()? & 3 {
                2 => {
                    c.u8()?;
                }
                3 => {
                    c.u64()?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Writer side of the cache (one per domain).
#[derive(Debug)]
pub(crate) struct WriterCache {
    cache: Box<[u64]>,
    date: Box<[u64]>,
    next: Box<[u16]>,
    next_verify_ix: usize,
}

impl WriterCache {
    pub(crate) fn new() -> Self {
        WriterCache {
            cache: vec![0; CACHE_SIZE].into_boxed_slice(),
            date: vec![0; CACHE_SIZE].into_boxed_slice(),
            next: vec![0; CACHE_SIZE].into_boxed_slice(),
            next_verify_ix: 4242,
        }
    }

    /// The verifier for the next packet; advances the probe index.
    pub(crate) fn verifier(&mut self) -> CacheVerifier {
        let ix = self.next_verify_ix;
        self.next_verify_ix = (ix + 5413) & (CACHE_SIZE - 1);
        CacheVerifier {
            ix: ix as u16,
            pred: self.next[ix],
            value: self.cache[ix],
        }
    }

    /// Encodes `bt[start..]` (outermost first), calling `on_miss` with the index of
    /// each slot not in the cache. Returns the number of codewords written.
    pub(crate) fn encode(
        &mut self,
        b: &mut Vec<u8>,
        alloc_id: u64,
        bt: &[u64],
        start: usize,
        on_miss: &mut dyn FnMut(usize),
    ) -> usize {
        let limit = b.len() + BT_MAX_LENGTH - (2 + 8);
        let put_hit = |b: &mut Vec<u8>, bucket: usize, n: u32| match n {
            0 => buf::put_u16(b, (bucket << 2) as u16),
            1 => buf::put_u16(b, ((bucket << 2) | 1) as u16),
            n => {
                buf::put_u16(b, ((bucket << 2) | 2) as u16);
                buf::put_u8(b, n as u8);
            }
        };
        let mut i = start;
        let mut predictor = 0usize;
        let mut ncodes = 0usize;
        'no_prediction: loop {
            if i >= bt.len() || b.len() > limit {
                return ncodes;
            }
            let slot = bt[i];
            let (h1, h2) = hashes(slot);
            let mut hit = if self.cache[h1] == slot {
                h1
            } else if self.cache[h2] == slot {
                h2
            } else {
                on_miss(i);
                let bucket = if self.date[h1] < self.date[h2] {
                    h1
                } else {
                    h2
                };
                self.cache[bucket] = slot;
                self.date[bucket] = alloc_id;
                self.next[predictor] = bucket as u16;
                buf::put_u16(b, ((bucket << 2) | 3) as u16);
                buf::put_u64(b, slot);
                predictor = bucket;
                i += 1;
                ncodes += 1;
                continue 'no_prediction;
            };
            'hit: loop {
                self.date[hit] = alloc_id;
                self.next[predictor] = hit as u16;
                i += 1;
                ncodes += 1;
                let orig = hit;
                let mut pred = hit;
                let mut ncorrect = 0u32;
                loop {
                    if i >= bt.len() || b.len() + 2 > limit {
                        put_hit(b, orig, ncorrect);
                        return ncodes;
                    }
                    let pb = usize::from(self.next[pred]);
                    if self.cache[pb] == bt[i] {
                        if ncorrect == 255 {
                            put_hit(b, orig, ncorrect);
                            predictor = pred;
                            hit = pb;
                            continue 'hit;
                        }
                        pred = pb;
                        ncorrect += 1;
                        i += 1;
                    } else {
                        put_hit(b, orig, ncorrect);
                        predictor = pred;
                        continue 'no_prediction;
                    }
                }
            }
        }
    }
}
