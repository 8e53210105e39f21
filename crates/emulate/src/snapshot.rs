//! Snapshots of an emulate recording: what each thread's flight recorder held at a
//! trigger hit, cut at the hit's instruction clock.
//!
//! The clock is one counter over all threads (each block takes its start from it), so
//! "before the hit" is exact across threads: a snapshot keeps every execution that
//! started no later than the trigger block (only the trigger block itself starts at the
//! hit's clock). Without `--multi-snapshot` the plugin stops recording at the hit, and the
//! rings appended at exit hold the snapshot (the few blocks other threads ran before they
//! saw the stop are cut). With it, each hit copies the ring slots that changed since the
//! previous hit; snapshot `k` is, per thread, the newest copy (at a hit no later than `k`)
//! of each of the ring's last `slots` slots, less what the previous snapshot showed (as
//! perf's Intel PT decoder drops the overlap of successive snapshots): a block starting
//! after the previous hit's clock.

use crate::recording::{Proc, ThreadInput};
use ptscope_blocklog::Hit;
use rustc_hash::FxHashMap;

/// Every thread of process `proc` (at `p` in the view) as it stood at `hit`.
pub(crate) fn at_hit(proc: &Proc<'_>, p: usize, hit: &Hit) -> Vec<ThreadInput> {
    let ix = &proc.index;
    // The previous hit of the same process: its snapshot showed what came before.
    let since = ix
        .hits
        .iter()
        .filter(|h| h.hit < hit.hit)
        .map(|h| h.clock)
        .max();
    // tid → seq → (copy's hit, slots, index into ring_copies)
    let mut slots: FxHashMap<u32, FxHashMap<u64, (u32, u32, usize)>> = FxHashMap::default();
    for (i, c) in ix.ring_copies.iter().enumerate() {
        if c.head.hit > hit.hit {
            continue;
        }
        let e = slots
            .entry(c.tid)
            .or_default()
            .entry(c.head.seq)
            .or_insert((c.head.hit, c.head.slots, i));
        if c.head.hit >= e.0 {
            *e = (c.head.hit, c.head.slots, i);
        }
    }
    let input = |tid, pieces| ThreadInput {
        proc: p,
        tid,
        pieces,
        since,
        until: Some(hit.clock),
    };
    let mut threads: Vec<ThreadInput> = Vec::new();
    for (&tid, versions) in &slots {
        let newest = versions.keys().copied().max().unwrap_or(0);
        let cap = versions.values().map(|v| v.1).max().unwrap_or(0) as u64;
        let mut kept: Vec<(u64, usize)> = versions
            .iter()
            .filter(|(&seq, _)| seq + cap > newest)
            .map(|(&seq, v)| (seq, v.2))
            .collect();
        kept.sort_unstable();
        let pieces = kept
            .iter()
            .map(|&(_, i)| ix.ring_copies[i].stream)
            .collect();
        threads.push(input(tid, pieces));
    }
    for t in &ix.threads {
        if !slots.contains_key(&t.tid) {
            threads.push(input(t.tid, t.chunks.clone()));
        }
    }
    // Log order of first appearance keeps thread order stable across snapshots.
    let order = |tid: u32| {
        ix.threads
            .iter()
            .position(|t| t.tid == tid)
            .unwrap_or(usize::MAX)
    };
    threads.sort_by_key(|t| (order(t.tid), t.tid));
    threads
}
