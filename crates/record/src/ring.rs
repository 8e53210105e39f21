//! The sampling flight recorder: perf writes samples continuously, so its file would grow
//! without bound. A new file is started at a size (by perf, `--switch-output=SIZE`) or an
//! age (by ptscope's `SIGUSR2`, [`Piece::Every`]) and ptscope deletes the oldest pieces
//! beyond the count kept (not perf's `--switch-max-files`, which deletes without a look:
//! see below). With
//! `--multi-snapshot` ptscope rotates instead (`--switch-output=signal`): it sends
//! `SIGUSR2` whenever the file being written passes a piece's size, and at a hit rotates
//! once more and *seals* the pieces it holds: they are that hit's snapshot and are never
//! deleted.
//!
//! perf announces a process (name, mappings, parent) once, in the file being written when
//! it starts, and decodes each file alone: a process begun in an earlier file would be a
//! nameless pid without user frames in every later one. So the side band of every piece
//! that goes (deleted, or sealed into a snapshot) is kept
//! ([`ptscope_perf_data::Sideband`]), and the pieces a snapshot is made of are written
//! again, each with the side band of everything before it, when the snapshot is sealed
//! or the recording ends.
//!
//! Which finished file ends a snapshot is written, one name per line, into the working
//! directory's [`ROTATED_FILES_MARKER`](crate::session::ROTATED_FILES_MARKER): the files
//! are pieces of one recording, except across those ends (`ptscope decode` reads it).

use ptscope_perf_data::{PerfData, Sideband};
use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a rotation may take perf before the ring stops waiting for its file.
const ROTATION_TIMEOUT: Duration = Duration::from_secs(3);

/// Who starts a new piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// ptscope, once the file being written holds this many bytes (`--switch-output=signal`:
    /// with `--multi-snapshot`, where a hit must also end a piece).
    Bytes(u64),
    /// perf itself, at a size (`--switch-output=SIZE`): it checks the size after every
    /// write, closer to the bound than a poll can; ptscope only deletes.
    Perf,
    /// ptscope, every so long (`--switch-output=signal`). Not perf's own `=Ns`: perf 6.1
    /// arms that timer before it sets up its events and re-arms it only after a switch,
    /// so when setup outlasts the first period (a loaded machine) the alarm is dropped
    /// and every sample goes into one file, which the ring cannot cut.
    Every(Duration),
}

/// The pieces of the current ring and the snapshots sealed so far.
#[derive(Debug)]
pub struct SnapshotRing {
    dir: PathBuf,
    piece: Piece,
    /// What the pieces gone so far announced, for those that remain.
    sideband: Sideband,
    keep: usize,
    /// Finished files not yet part of a snapshot, oldest first.
    ring: Vec<PathBuf>,
    /// Every finished file seen (perf names them `perf.data.<timestamp>`).
    seen: HashSet<OsString>,
    /// The last file of each sealed snapshot.
    ends: Vec<OsString>,
    /// A rotation was asked for at this time and its file has not appeared yet.
    pending: Option<Instant>,
    /// When the piece being written began (or was asked to), for [`Piece::Every`].
    begun: Option<Instant>,
    /// Pieces deleted to stay within the bound.
    deleted: u64,
}

impl SnapshotRing {
    /// A ring in `dir` (where perf writes `perf.data`) of `keep` pieces.
    pub fn new(dir: &Path, piece: Piece, keep: u32) -> Self {
        SnapshotRing {
            dir: dir.to_owned(),
            piece,
            sideband: Sideband::default(),
            keep: keep.max(1) as usize,
            ring: Vec::new(),
            seen: HashSet::new(),
            ends: Vec::new(),
            pending: None,
            begun: None,
            deleted: 0,
        }
    }

    /// Looks at the working directory: takes in the files perf finished, deletes the
    /// oldest pieces beyond the count, and returns true when perf should be asked to
    /// start a new piece (send it `SIGUSR2`).
    pub fn poll(&mut self) -> bool {
        if self.collect() > 0 {
            self.pending = None;
        }
        self.trim();
        if let Some(since) = self.pending {
            if since.elapsed() < ROTATION_TIMEOUT {
                return false;
            }
            // perf did not rotate (busy, or the signal was merged with another): ask again.
            self.pending = None;
        }
        let full = match self.piece {
            Piece::Bytes(b) => {
                std::fs::metadata(self.dir.join("perf.data")).map_or(0, |m| m.len()) >= b
            }
            Piece::Perf => false,
            // Counted from the first look, which is once perf records.
            Piece::Every(period) => self.begun.get_or_insert_with(Instant::now).elapsed() >= period,
        };
        if full {
            self.pending = Some(Instant::now());
            self.begun = Some(Instant::now());
        }
        full
    }

    /// Before a hit's rotation: waits (a little) for a rotation already asked for, so the
    /// hit's own file is the next one to appear.
    pub fn settle(&mut self) {
        while let Some(since) = self.pending {
            if self.collect() > 0 || since.elapsed() >= ROTATION_TIMEOUT {
                self.pending = None;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// After the hit's rotation was asked for: waits for its file, then makes the pieces
    /// held (the moments before the hit) a snapshot. False if perf never finished the
    /// file (the pieces then stay in the ring).
    pub fn seal(&mut self) -> bool {
        let start = Instant::now();
        while self.collect() == 0 {
            if start.elapsed() >= ROTATION_TIMEOUT {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.trim();
        if let Some(last) = self.ring.last().and_then(|p| p.file_name()) {
            self.ends.push(last.to_owned());
        }
        self.complete();
        true
    }

    /// At the end of recording (perf has exited and renamed its last file): the pieces
    /// left are the last snapshot, within the bound too.
    pub fn finish(&mut self) {
        self.collect();
        self.trim();
        self.complete();
    }

    /// The pieces held become whole recordings: each is written again with the side
    /// band of every piece before it, then leaves the ring (its own side band kept for
    /// those after). A piece that cannot be read or rewritten stays as it is (it decodes
    /// as before: processes begun earlier without names).
    fn complete(&mut self) {
        for p in std::mem::take(&mut self.ring) {
            let Ok(data) = PerfData::open(&p) else {
                continue;
            };
            if !self.sideband.is_empty() {
                // Written beside it and renamed over it: a kill leaves the old piece, and
                // so does a failure (the temporary file goes when dropped).
                let _ = tempfile::Builder::new()
                    .prefix(".perf.data.whole")
                    .tempfile_in(&self.dir)
                    .and_then(|mut t| {
                        let mut out = std::io::BufWriter::new(t.as_file_mut());
                        data.write_with_sideband(&self.sideband, &mut out)?;
                        std::io::Write::flush(&mut out)?;
                        drop(out);
                        t.persist(&p).map(drop).map_err(|e| e.error)
                    });
            }
            self.sideband.take(&data);
        }
    }

    /// The last file of every sealed snapshot, for the marker file.
    pub fn snapshot_ends(&self) -> &[OsString] {
        &self.ends
    }

    /// Pieces deleted to keep within the bound.
    pub fn deleted(&self) -> u64 {
        self.deleted
    }

    /// Adds the finished files not seen before to the ring, oldest first; returns how many.
    fn collect(&mut self) -> usize {
        let mut new: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                n.to_str()
                    .is_some_and(|s| s.starts_with("perf.data.") && !s.ends_with(".old"))
                    && !self.seen.contains(&n)
            })
            .map(|e| e.path())
            .collect();
        new.sort();
        for p in &new {
            if let Some(n) = p.file_name() {
                self.seen.insert(n.to_owned());
            }
        }
        let n = new.len();
        self.ring.extend(new);
        n
    }

    fn trim(&mut self) {
        while self.ring.len() > self.keep {
            let old = self.ring.remove(0);
            if let Ok(data) = PerfData::open(&old) {
                self.sideband.take(&data);
            }
            if std::fs::remove_file(&old).is_ok() {
                self.deleted += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, name: &str, len: usize) {
        std::fs::write(dir.join(name), vec![0u8; len]).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn keeps_the_last_pieces_and_seals_them_at_a_hit() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let mut r = SnapshotRing::new(dir, Piece::Bytes(100), 2);
        touch(dir, "perf.data", 50);
        assert!(!r.poll(), "under a piece: no rotation");
        touch(dir, "perf.data", 150);
        assert!(r.poll(), "over a piece: rotate");
        assert!(!r.poll(), "one rotation at a time");
        // perf rotates three times: the oldest piece goes.
        for t in ["01", "02", "03"] {
            touch(dir, &format!("perf.data.20260101000000{t}"), 150);
            touch(dir, "perf.data", 0);
            r.poll();
        }
        assert_eq!(
            names(dir),
            [
                "perf.data",
                "perf.data.2026010100000002",
                "perf.data.2026010100000003"
            ]
        );
        assert_eq!(r.deleted(), 1);
        // A hit: its file appears, and the pieces held become a snapshot.
        r.settle();
        touch(dir, "perf.data.2026010100000004", 10);
        assert!(r.seal());
        assert_eq!(r.snapshot_ends(), ["perf.data.2026010100000004"]);
        // Sealed pieces are never deleted, however many pieces follow.
        for t in ["05", "06", "07"] {
            touch(dir, &format!("perf.data.20260101000000{t}"), 150);
            r.poll();
        }
        r.finish();
        assert_eq!(
            names(dir),
            [
                "perf.data",
                "perf.data.2026010100000003",
                "perf.data.2026010100000004",
                "perf.data.2026010100000006",
                "perf.data.2026010100000007"
            ]
        );
    }

    #[test]
    fn a_ring_on_time_asks_for_a_piece_each_period_counted_from_its_first_look() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let period = Duration::from_millis(200);
        let mut r = SnapshotRing::new(dir, Piece::Every(period), 2);
        // However long perf took to start, the first piece begins at the first look.
        std::thread::sleep(period);
        let first = Instant::now();
        assert!(!r.poll(), "the first look begins the first piece");
        std::thread::sleep(period.saturating_sub(first.elapsed()));
        assert!(r.poll(), "a period later: rotate");
        assert!(!r.poll(), "one rotation at a time");
        // perf's file appears; a period after the rotation was asked for, the next.
        let asked = Instant::now();
        touch(dir, "perf.data.2026010100000001", 10);
        std::thread::sleep(period.saturating_sub(asked.elapsed()));
        assert!(r.poll(), "the next period rotates again");
        assert_eq!(r.ring.len(), 1);
    }

    #[test]
    fn a_hit_whose_file_never_appears_seals_nothing() {
        let d = tempfile::tempdir().unwrap();
        let mut r = SnapshotRing::new(d.path(), Piece::Bytes(100), 2);
        r.pending = None;
        let start = Instant::now();
        assert!(!r.seal());
        assert!(start.elapsed() >= ROTATION_TIMEOUT);
        assert!(r.snapshot_ends().is_empty());
    }
}
