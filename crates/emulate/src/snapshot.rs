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

use ptsim::blocklog::{BlockLog, Exec, Hit, TbDef, ThreadLog};
use rustc_hash::FxHashMap;

/// The log as it stood at `hit`: every thread's executions up to it, after `since` (the
/// previous hit's clock). Threads that were never copied (they ended before any copy)
/// keep what their ring held at exit, cut.
pub(crate) fn at_hit(log: &BlockLog, hit: &Hit, since: Option<u64>) -> BlockLog {
    let wanted = |e: &Exec| e.clock <= hit.clock && since.is_none_or(|s| e.clock > s);
    // tid → seq → (copy's hit, slots, index into ring_copies)
    let mut slots: FxHashMap<u32, FxHashMap<u64, (u32, u32, usize)>> = FxHashMap::default();
    for (i, c) in log.ring_copies.iter().enumerate() {
        if c.hit > hit.hit {
            continue;
        }
        let e = slots
            .entry(c.tid)
            .or_default()
            .entry(c.seq)
            .or_insert((c.hit, c.slots, i));
        if c.hit >= e.0 {
            *e = (c.hit, c.slots, i);
        }
    }
    let mut threads: Vec<ThreadLog> = Vec::new();
    let mut seen = Vec::new();
    for (&tid, versions) in &slots {
        let newest = versions.keys().copied().max().unwrap_or(0);
        let cap = versions.values().map(|v| v.1).max().unwrap_or(0) as u64;
        let mut kept: Vec<(u64, usize)> = versions
            .iter()
            .filter(|(&seq, _)| seq + cap > newest)
            .map(|(&seq, v)| (seq, v.2))
            .collect();
        kept.sort_unstable();
        let execs: Vec<Exec> = kept
            .iter()
            .flat_map(|&(_, i)| log.ring_copies[i].execs.iter().copied())
            .filter(wanted)
            .collect();
        seen.push(tid);
        if !execs.is_empty() {
            threads.push(ThreadLog {
                tid,
                execs,
                ..Default::default()
            });
        }
    }
    for t in &log.threads {
        if seen.contains(&t.tid) {
            continue;
        }
        let execs: Vec<Exec> = t.execs.iter().copied().filter(wanted).collect();
        if !execs.is_empty() {
            threads.push(ThreadLog {
                tid: t.tid,
                execs,
                ..Default::default()
            });
        }
    }
    // Log order of first appearance keeps thread order stable across snapshots.
    let order = |tid: u32| {
        log.threads
            .iter()
            .position(|t| t.tid == tid)
            .unwrap_or(usize::MAX)
    };
    threads.sort_by_key(|t| (order(t.tid), t.tid));
    // Only the blocks the snapshot ran: deriving the steps classifies every block given,
    // and a recording with many snapshots must not pay for all blocks in each.
    let mut tbs: Vec<Option<TbDef>> = vec![None; log.tbs.len()];
    for e in threads.iter().flat_map(|t| t.execs.iter()) {
        let i = e.tb as usize;
        if tbs[i].is_none() {
            tbs[i] = log.tbs.get(i).cloned().flatten();
        }
    }
    BlockLog {
        pid: log.pid,
        tbs,
        threads,
        maps: log.maps.clone(),
        hits: vec![*hit],
        ring_copies: Vec::new(),
        fork: log.fork,
        exec_calls: Vec::new(),
        comms: Vec::new(),
        handler_entries: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptsim::blocklog::RingCopy;

    fn execs(clocks: std::ops::RangeInclusive<u64>) -> Vec<Exec> {
        clocks.map(|clock| Exec { clock, tb: 0 }).collect()
    }

    fn copy(hit: u32, tid: u32, seq: u64, clocks: std::ops::RangeInclusive<u64>) -> RingCopy {
        RingCopy {
            hit,
            tid,
            slots: 2,
            seq,
            execs: execs(clocks),
        }
    }

    fn clocks(log: &BlockLog, tid: u32) -> Vec<u64> {
        log.threads
            .iter()
            .find(|t| t.tid == tid)
            .map(|t| t.execs.iter().map(|e| e.clock).collect())
            .unwrap_or_default()
    }

    #[test]
    fn each_snapshot_holds_the_ring_at_its_hit_cut_at_the_hit_after_the_previous_one() {
        let hit = |hit, clock| Hit {
            hit,
            trigger: 0,
            tb: 0,
            clock,
            address: 0x1000,
            tid: 1,
        };
        let log = BlockLog {
            pid: 7,
            tbs: vec![Some(TbDef {
                vaddr: 0x1000,
                n_insns: 1,
                size: 1,
                last: vec![0x90],
                first: vec![0x90],
            })],
            hits: vec![hit(0, 12), hit(1, 24)],
            ring_copies: vec![
                // Thread 1 at hit 0: a full slot and the one being filled.
                copy(0, 1, 1, 0..=9),
                copy(0, 1, 2, 10..=14),
                // Thread 2 ran on while the rings were copied: cut.
                copy(0, 2, 1, 13..=15),
                // At hit 1: slot 2 grew, slot 3 began; two slots: slot 1 is gone.
                copy(1, 1, 2, 10..=19),
                copy(1, 1, 3, 20..=26),
            ],
            ..BlockLog::default()
        };
        let first = at_hit(&log, &log.hits[0], None);
        assert_eq!(clocks(&first, 1), (0..=12).collect::<Vec<_>>());
        assert!(clocks(&first, 2).is_empty());
        let second = at_hit(&log, &log.hits[1], Some(12));
        assert_eq!(clocks(&second, 1), (13..=24).collect::<Vec<_>>());
        assert_eq!(clocks(&second, 2), vec![13, 14, 15]);
    }
}
