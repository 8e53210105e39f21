//! The thread's frames and stack changes, held in a temporary file once they grow.
//!
//! The segments writer keeps a thread's whole trace until its write pass (a return above
//! the known root can still give every earlier stack a new caller): 16 bytes a frame and
//! 16 a stack change, ~13 bytes a branch, so a long Intel PT snapshot's decode held
//! hundreds of MB. A [`Store`] is a `Vec` until it holds [`SPILL_AFTER`] bytes; then its
//! contents move to an unnamed temporary file mapped shared, and every [`TRIM_EVERY`]
//! bytes pushed (and as the write pass reads on, [`Store::release`]) the pages behind
//! the last ones are given back: the kernel keeps them in its page cache or writes them
//! to the file, and the next access reads them back. The writer's memory is then bounded
//! by these windows, whatever the trace's length; its accesses stay plain slice indexing
//! (the mapping is the slice), so the code that builds and reads stacks is unchanged.
//!
//! If the file cannot be made or grown (no space in `TMPDIR`), the store stays in, or
//! goes back to, memory: nothing is lost, it only costs the memory it always did, and
//! the writer says so once (a warning naming the directory and `TMPDIR`).

use memmap2::{MmapMut, UncheckedAdvice};
use std::fs::File;
use std::ops::{Deref, DerefMut};

/// Bytes a store holds in memory before it moves to a temporary file.
/// (2 MiB: the benchmark recording's peak RSS 81 MB, against 106 MB with 8 MiB, same CPU.)
pub(super) const SPILL_AFTER: usize = 2 << 20;

/// The page size the kernel gives back pages in (the mapping's start is aligned to it).
const PAGE: usize = 4096;

/// A growable array of plain values (the writer's [`Frame`](super::frames::Frame)s and
/// [`Entry`](super::frames::Entry)s), in memory while small, in a mapped temporary file
/// after (see the module's notes).
pub(super) struct Store<T: Copy> {
    /// The values while the store is in memory.
    mem: Vec<T>,
    /// The file once it is not.
    file: Option<Mapped>,
    /// How many values the file holds.
    len: usize,
    /// Bytes held in memory before moving to a file; then, bytes pushed between two
    /// [`Store::release`]s.
    limit: usize,
    /// Bytes pushed since the last release.
    since_release: usize,
    /// Where the file is made (`None`: the system's temporary directory, `TMPDIR`).
    dir: Option<std::path::PathBuf>,
    /// Why the store is in memory past its limit (the file could not be made or grown).
    problem: Option<std::io::Error>,
    /// Where the values are now (the vector's buffer or the mapping) and how many:
    /// kept up to date by every change of either, so that indexing, the writer's most
    /// frequent use of a store, needs no look at which of the two holds them (that
    /// `match` was 2 % of an end-to-end decode's instructions).
    view: (std::ptr::NonNull<T>, usize),
}

// SAFETY: `view` points into the store's own vector or mapping, which move with it;
// the store is otherwise a `Vec<T>` and a file mapping, both `Send`.
unsafe impl<T: Copy + Send> Send for Store<T> {}

/// The temporary file and its shared mapping, `cap` values long.
struct Mapped {
    file: File,
    map: MmapMut,
    cap: usize,
}

impl<T: Copy> Default for Store<T> {
    fn default() -> Self {
        Store::with_limit(SPILL_AFTER)
    }
}

impl<T: Copy> Store<T> {
    /// An empty store that moves to a file past `limit` bytes (`usize::MAX`: never).
    pub(super) fn with_limit(limit: usize) -> Self {
        Store {
            mem: Vec::new(),
            file: None,
            len: 0,
            limit: limit.max(PAGE),
            since_release: 0,
            dir: None,
            problem: None,
            view: (std::ptr::NonNull::dangling(), 0),
        }
    }

    /// Points `view` at where the values are now.
    #[inline]
    fn sync_view(&mut self) {
        self.view = match &mut self.file {
            Some(m) => (
                std::ptr::NonNull::new(m.map.as_mut_ptr().cast::<T>())
                    .unwrap_or(std::ptr::NonNull::dangling()),
                self.len,
            ),
            None => (
                std::ptr::NonNull::new(self.mem.as_mut_ptr())
                    .unwrap_or(std::ptr::NonNull::dangling()),
                self.mem.len(),
            ),
        };
    }

    /// Makes its file in `dir` (`None`: the system's temporary directory).
    pub(super) fn in_dir(mut self, dir: Option<&std::path::Path>) -> Self {
        self.dir = dir.map(Into::into);
        self
    }

    /// Why the store stayed in memory past its limit, once (then `None`).
    pub(super) fn take_problem(&mut self) -> Option<std::io::Error> {
        self.problem.take()
    }

    /// Appends `value`.
    #[inline]
    pub(super) fn push(&mut self, value: T) {
        match &mut self.file {
            Some(m) if self.len < m.cap => {
                let len = self.len;
                self.len += 1;
                self.view.1 = self.len;
                self.as_mut_slice()[len] = value;
                self.since_release += size_of::<T>();
                if self.since_release >= self.limit {
                    self.since_release = 0;
                    self.release();
                }
            }
            Some(_) => {
                if let Err(e) = self.grow() {
                    self.problem = Some(e);
                    self.back_to_memory();
                }
                self.push(value)
            }
            None => {
                self.mem.push(value);
                if self.mem.len() * size_of::<T>() >= self.limit {
                    if let Err(e) = self.move_to_file() {
                        // Stay in memory from now on: trying again would copy it all again.
                        self.problem = Some(e);
                        self.limit = usize::MAX;
                    }
                }
                self.sync_view();
            }
        }
    }

    /// Bytes of values the store holds in its own memory (0 once in a file: the file's
    /// pages are the kernel's, given back as the store goes on).
    pub(super) fn memory_bytes(&self) -> usize {
        self.mem.capacity() * size_of::<T>()
    }

    /// Is the store in a file?
    #[cfg(test)]
    pub(super) fn in_file(&self) -> bool {
        self.file.is_some()
    }

    /// Gives back the pages of the file's mapping but the last: their values stay, read
    /// back from the file (or the page cache) when next used. Nothing if in memory.
    pub(super) fn release(&self) {
        let Some(m) = &self.file else { return };
        let bytes = (self.len * size_of::<T>()).saturating_sub(PAGE) / PAGE * PAGE;
        if bytes > 0 {
            // SAFETY: the mapping is shared and backed by a file: MADV_DONTNEED drops
            // only this process's view of the pages (dirty ones stay in the page cache
            // and go to the file), so every value reads back the same; the range is
            // page-aligned and inside the mapping.
            let _ = unsafe {
                m.map
                    .unchecked_advise_range(UncheckedAdvice::DontNeed, 0, bytes)
            };
        }
    }

    /// Moves the values to a new temporary file.
    fn move_to_file(&mut self) -> std::io::Result<()> {
        let cap = (self.mem.len() * 2).max(PAGE / size_of::<T>().max(1));
        let file = match &self.dir {
            Some(dir) => tempfile::tempfile_in(dir)?,
            None => tempfile::tempfile()?,
        };
        let mut m = Mapped::new(file, cap * size_of::<T>())?;
        m.cap = cap;
        self.len = self.mem.len();
        self.file = Some(m);
        self.sync_view();
        let mem = std::mem::take(&mut self.mem);
        self.as_mut_slice()[..mem.len()].copy_from_slice(&mem);
        self.since_release = 0;
        Ok(())
    }

    /// Doubles the file (the old mapping stays until the new one is made).
    fn grow(&mut self) -> std::io::Result<()> {
        let Some(m) = &mut self.file else {
            return Ok(());
        };
        let cap = m.cap * 2;
        allocate(&m.file, cap * size_of::<T>())?;
        // SAFETY: as in `Mapped::new`.
        m.map = unsafe { MmapMut::map_mut(&m.file)? };
        m.cap = cap;
        self.sync_view();
        Ok(())
    }

    /// The file could not grow: its values go back to memory, where the store stays.
    fn back_to_memory(&mut self) {
        self.mem = self.as_slice().to_vec();
        self.file = None;
        self.len = 0;
        self.limit = usize::MAX;
        self.sync_view();
    }

    #[inline]
    fn as_slice(&self) -> &[T] {
        // SAFETY: `view` is where the values are (`sync_view` runs after every change of
        // the vector's buffer, the mapping or the count): in memory, the vector's first
        // `len` values; in the file, the mapping, `cap * size_of::<T>()` bytes,
        // page-aligned (so aligned for `T`), whose first `len` values were written as
        // `T`s through `as_mut_slice` (or copied from a `Vec<T>`): valid `T`s. The file
        // is unnamed (O_TMPFILE) and only this store maps it, so nothing else changes
        // it while the slice lives (it borrows `self`).
        unsafe { std::slice::from_raw_parts(self.view.0.as_ptr(), self.view.1) }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; the slice borrows `self` mutably, so it is the only
        // view of the values while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.view.0.as_ptr(), self.view.1) }
    }
}

impl Mapped {
    /// `file` made `bytes` long and mapped shared (`cap` is set by the caller).
    fn new(file: File, bytes: usize) -> std::io::Result<Mapped> {
        allocate(&file, bytes)?;
        // SAFETY: the file is an unnamed temporary file only this process holds; its
        // blocks were just allocated, so every mapped byte is inside it and backed.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(Mapped { file, map, cap: 0 })
    }
}

/// Makes `file` `bytes` long with its blocks allocated: a full disk is an error here,
/// not a SIGBUS when a page of a sparse file is first written through the mapping.
fn allocate(file: &File, bytes: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(bytes)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain system call on a file descriptor this function borrows.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        e => Err(std::io::Error::from_raw_os_error(e)),
    }
}

impl<T: Copy> Deref for Store<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Copy> DerefMut for Store<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        self.as_mut_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No file can be made (its directory does not exist): the values stay in memory,
    /// all of them, and the store says why.
    #[test]
    fn without_a_file_the_store_stays_in_memory_and_says_why() {
        let mut s: Store<u64> = Store::with_limit(PAGE);
        s.dir = Some("/nonexistent/ptscope-store-test".into());
        for i in 0..10_000u64 {
            s.push(i);
        }
        assert!(!s.in_file());
        assert!(s.iter().copied().eq(0..10_000u64));
        assert!(s.take_problem().is_some());
        assert!(s.take_problem().is_none());
    }

    #[test]
    fn values_survive_the_move_to_a_file_growth_and_release() {
        let mut s: Store<(u64, u32)> = Store::with_limit(PAGE);
        for i in 0..100_000u64 {
            s.push((i * 3, i as u32));
            if i % 7_777 == 0 {
                s.release();
            }
        }
        assert!(s.in_file());
        assert_eq!(s.memory_bytes(), 0);
        assert_eq!(s.len(), 100_000);
        s[5].1 = 99;
        s.release();
        for (i, v) in s.iter().enumerate() {
            let want = if i == 5 { 99 } else { i as u32 };
            assert_eq!(*v, (i as u64 * 3, want));
        }
    }
}
