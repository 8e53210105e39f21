//! Each thread's recording state: its chunk (a buffer for the log, or a slot of its ring
//! file), how it is found from the hot path, and what happens when the thread ends.

use crate::api::{gettid, now_ns, say};
use crate::{proc, Proc, EXITED, SHARED};
use ptscope_blocklog::format::{chunk_header, HOST, KIND_EXEC, KIND_MAPS, KIND_RING_COPY, MARKER};
use std::cell::{Cell, RefCell};
use std::io::{IoSlice, Write};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Header of a ring slot: `seq u64`, `used u32`, `size u32` (data bytes per slot).
pub(crate) const SLOT_HEADER: usize = 16;

/// Blocks of one thread between two host stamps: reading the clock (a vDSO call) costs
/// about as much as logging a block, so every 4096th keeps it under 0.1 %.
pub(crate) const STAMP_EVERY: u32 = 4096;

/// A syscall that names a thread, seen at its entry, completed at its return.
#[derive(Clone, Debug)]
pub(crate) enum Naming {
    /// `prctl(PR_SET_NAME)` or a write to a `comm` file: thread, name.
    Name(u32, Vec<u8>),
    /// An `open` of the `comm` file of this thread.
    Open(u32),
}

/// One thread's recording state, reached from the hot path through [`STATES`] (by vCPU
/// index) or a thread-local pointer. Only its own thread writes it; without a ring, the
/// exit handler of another thread reads `tid`, `data` (fixed then) and `published`.
pub(crate) struct ThreadState {
    pub(crate) tid: u32,
    /// The vCPU index it is registered under in [`STATES`].
    pub(crate) vcpu: usize,
    /// Clock value the next block starts at if nothing else runs first.
    pub(crate) expected: u64,
    /// Blocks left before the next host stamp, as of the last slow-path write: the
    /// fast path counts its blocks in `room` only ([`Self::settle`] brings it up to date).
    pub(crate) countdown: u32,
    /// Blocks the hot path may still log as one word each without a check more: none
    /// while the chunk is empty, else no more than the chunk's room for words and
    /// `countdown` ([`Self::arm`]). One test instead of three per logged block.
    pub(crate) room: u32,
    /// `room` as last armed: `room_set - room` blocks were logged since.
    room_set: u32,
    /// The current chunk's bytes: a ring slot's data, or `buf`.
    data: *mut u8,
    /// Bytes of the current chunk used and its capacity.
    pub(crate) used: usize,
    pub(crate) cap: usize,
    /// Where `used` is published after every write: the ring slot's header (so the file
    /// describes itself however qemu ends), or `own_used`.
    published: *const AtomicU32,
    pub(crate) own_used: AtomicU32,
    /// Without a ring: the chunk being filled.
    buf: Box<[u8]>,
    /// Flight recorder: the thread's mapped ring file, if it could be made.
    pub(crate) ring: Option<Ring>,
    /// A naming syscall in progress.
    pub(crate) naming: Option<Naming>,
}

/// A thread's ring file, mapped shared: writes land in the page cache at once.
pub(crate) struct Ring {
    base: *mut u8,
    slots: usize,
    chunk: usize,
    /// Slot being filled and its sequence number.
    slot: usize,
    seq: u64,
    /// Slots with a lower sequence number were copied at an earlier hit, unchanged
    /// since. Only the copier (under [`Proc::threads`]) touches it.
    pub(crate) copied: u64,
}

/// Creates `path` (new, private, not following links), sizes it to `size` bytes and maps
/// it shared, writable, with `flags` besides `MAP_SHARED`. The mapping is never unmapped:
/// it must outlive every write, and the process ends anyway. `None` when any step fails
/// (the caller then writes to the log as without the file).
fn map_new_file(path: &std::path::Path, size: usize, flags: libc::c_int) -> Option<*mut u8> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    f.set_len(size as u64).ok()?;
    // SAFETY: a fresh shared mapping of a file we just sized, at an address the kernel
    // picks; the file may be closed after, the mapping keeps it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | flags,
            f.as_raw_fd(),
            0,
        )
    };
    (base != libc::MAP_FAILED).then_some(base as *mut u8)
}

impl Ring {
    /// Creates `dir/ring-PID-TID.bin` (new, private, not following links) and maps it.
    fn create(
        dir: &std::path::Path,
        pid: u32,
        tid: u32,
        slots: usize,
        chunk: usize,
    ) -> Option<Ring> {
        let size = slots * (SLOT_HEADER + chunk);
        let base = map_new_file(&dir.join(format!("ring-{pid}-{tid}.bin")), size, 0)?;
        let mut r = Ring {
            base,
            slots,
            chunk,
            slot: 0,
            seq: 0,
            copied: 0,
        };
        r.begin_slot();
        Some(r)
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        // SAFETY: `slot < slots`, inside the mapping.
        unsafe { self.base.add(slot * (SLOT_HEADER + self.chunk)) }
    }

    /// Starts the current slot: a new sequence number, nothing used yet. Returns the
    /// slot's data and its `used` word (4-aligned: slot sizes are multiples of 8).
    fn begin_slot(&mut self) -> (*mut u8, *const AtomicU32) {
        self.seq += 1;
        let p = self.slot_ptr(self.slot);
        // SAFETY: the header lies inside the mapping, 8-aligned.
        unsafe {
            std::ptr::write(p as *mut u64, self.seq);
            std::ptr::write(p.add(8) as *mut u32, 0);
            std::ptr::write(p.add(12) as *mut u32, self.chunk as u32);
            (p.add(SLOT_HEADER), p.add(8) as *const AtomicU32)
        }
    }

    /// Writes the slots changed since the last copy to `out` as `KIND_RING_COPY` chunks.
    pub(crate) fn copy_to<W: Write + ?Sized>(
        &self,
        copied: &mut u64,
        out: &mut W,
        hit: u32,
        tid: u32,
    ) {
        for slot in 0..self.slots {
            let p = self.slot_ptr(slot);
            // SAFETY: the header and `used <= chunk` data bytes lie inside the mapping;
            // its owner may be writing the slot now: the reader cuts each copy at the
            // hit's clock.
            let (seq, data) = unsafe {
                let seq = std::ptr::read_unaligned(p as *const u64);
                let used =
                    (std::ptr::read_unaligned(p.add(8) as *const u32) as usize).min(self.chunk);
                (seq, std::slice::from_raw_parts(p.add(SLOT_HEADER), used))
            };
            if seq < *copied || seq == 0 || data.is_empty() {
                continue;
            }
            let mut payload = Vec::with_capacity(16 + data.len());
            payload.extend_from_slice(&hit.to_le_bytes());
            payload.extend_from_slice(&(self.slots as u32).to_le_bytes());
            payload.extend_from_slice(&seq.to_le_bytes());
            payload.extend_from_slice(data);
            write_chunk(out, KIND_RING_COPY, tid, &payload);
        }
        // The slot being filled grows: copied again at the next hit.
        *copied = self.seq;
    }

    /// Moves to the next slot, overwriting the oldest.
    fn next_slot(&mut self) -> (*mut u8, *const AtomicU32) {
        self.slot = (self.slot + 1) % self.slots;
        self.begin_slot()
    }
}

/// Flight recorder: the process's block descriptions in a file mapped shared,
/// `blocks-PID.bin` beside the rings: `used u64`, then whole `KIND_TBS` chunks. They are
/// in the page cache as soon as they are copied (they survive however qemu ends, as the
/// rings do) without a `write` per translation, which was ~10 % of recording python3 with
/// a ring; the recorder appends them to the log with the rings.
pub(crate) struct BlocksFile {
    base: *mut u8,
    cap: usize,
    used: usize,
}

// SAFETY: the mapping is the process's own and is only written under `Proc::blocks`.
unsafe impl Send for BlocksFile {}

/// Bytes before a blocks file's chunks: their length, `u64`.
const BLOCKS_HEADER: usize = 8;

/// A blocks file's size (sparse: pages are only made as descriptions fill them); past it,
/// descriptions go to the log as without a ring.
const BLOCKS_BYTES: usize = 256 << 20;

impl BlocksFile {
    /// Creates `dir/blocks-PID.bin` (new, private, not following links) and maps it.
    pub(crate) fn create(dir: &std::path::Path, pid: u32) -> Option<BlocksFile> {
        let base = map_new_file(
            &dir.join(format!("blocks-{pid}.bin")),
            BLOCKS_BYTES,
            libc::MAP_NORESERVE,
        )?;
        Some(BlocksFile {
            base,
            cap: BLOCKS_BYTES - BLOCKS_HEADER,
            used: 0,
        })
    }

    /// Appends one chunk and publishes it; false when it does not fit.
    pub(crate) fn push(&mut self, kind: u8, tid: u32, payload: &[u8]) -> bool {
        let head = chunk_header(kind, tid, payload.len() as u64);
        let n = head.len() + payload.len();
        if n > self.cap - self.used {
            return false;
        }
        // SAFETY: `used + n <= cap`: inside the mapping; the length word is 8-aligned
        // (the mapping starts on a page) and only this writer stores it.
        unsafe {
            let at = self.base.add(BLOCKS_HEADER + self.used);
            std::ptr::copy_nonoverlapping(head.as_ptr(), at, head.len());
            std::ptr::copy_nonoverlapping(payload.as_ptr(), at.add(head.len()), payload.len());
            self.used += n;
            (*(self.base as *const std::sync::atomic::AtomicU64))
                .store(self.used as u64, Ordering::Release);
        }
        true
    }
}

impl ThreadState {
    /// Appends bytes that fit (`used + b.len() <= cap`).
    #[inline(always)]
    pub(crate) fn put(&mut self, b: &[u8]) {
        // SAFETY: the caller checked the room; `data` holds `cap` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), self.data.add(self.used), b.len());
            self.used += b.len();
            (*self.published).store(self.used as u32, Ordering::Release);
        }
    }

    /// Appends one block id: the hot path's only write (`used + 4 <= cap` checked).
    #[inline(always)]
    pub(crate) fn put_id(&mut self, id: u32) {
        // SAFETY: the caller checked the room; `data` holds `cap` bytes.
        // `used` is read once: the store through `data` could alias it for the compiler,
        // which then read it again after the store.
        let used = self.used;
        unsafe {
            std::ptr::write_unaligned(self.data.add(used) as *mut u32, id.to_le());
            self.used = used + 4;
            (*self.published).store((used + 4) as u32, Ordering::Release);
        }
    }

    /// Folds the blocks the hot path logged since the last [`Self::arm`] into
    /// `countdown`; until armed again, every block takes the slow path.
    #[inline]
    pub(crate) fn settle(&mut self) {
        self.countdown -= self.room_set - self.room;
        self.room = 0;
        self.room_set = 0;
    }

    /// Lets the hot path log the next blocks as single words: as many as fit the chunk
    /// and come before the next host stamp, none in an empty chunk (it opens with the
    /// clock and the host time). Call after [`Self::settle`] and the writes it allowed.
    #[inline]
    pub(crate) fn arm(&mut self) {
        self.room = if self.used == 0 {
            0
        } else {
            (((self.cap - self.used) / 4).min(u32::MAX as usize) as u32).min(self.countdown)
        };
        self.room_set = self.room;
    }

    /// Appends one whole record. When the chunk is full the next one is started, opening
    /// with the clock `clock` and the host time, so every chunk (ring slot) is dated.
    pub(crate) fn append(&mut self, rec: &[u8], clock: u64) {
        if self.used + rec.len() > self.cap {
            self.next_chunk();
            let mut head = Rec::default();
            head.word(MARKER).u64(clock).word(HOST).u64(now_ns());
            self.put(head.bytes());
            self.countdown = STAMP_EVERY;
        }
        self.put(rec);
    }

    /// Ends the current chunk: the ring moves to its next slot, the buffer goes to the log.
    fn next_chunk(&mut self) {
        if let Some(r) = self.ring.as_mut() {
            let (data, published) = r.next_slot();
            self.data = data;
            self.published = published;
        } else {
            self.flush();
        }
        self.used = 0;
    }

    /// Writes the buffer to the log (not with a ring: its file holds the data already).
    pub(crate) fn flush(&mut self) {
        if self.ring.is_some() || self.used == 0 {
            return;
        }
        self.settle();
        if let Some(p) = proc() {
            if let Ok(mut out) = p.out.lock() {
                if !EXITED.load(Ordering::Relaxed) {
                    write_chunk(&mut *out, KIND_EXEC, self.tid, &self.buf[..self.used]);
                }
            }
        }
        self.used = 0;
        self.own_used.store(0, Ordering::Release);
    }

    /// The bytes without a ring that are complete (for the exit handler).
    ///
    /// # Safety
    /// `t` must be a registered, live state (see [`Proc::threads`]).
    pub(crate) unsafe fn published_bytes<'a>(t: *const ThreadState) -> Option<(u32, &'a [u8])> {
        // SAFETY: per the contract; `tid` and `data` are fixed without a ring, and the
        // bytes below `own_used` are complete (released after writing).
        unsafe {
            if (*std::ptr::addr_of!((*t).ring)).is_some() {
                return None;
            }
            let used = (*std::ptr::addr_of!((*t).own_used)).load(Ordering::Acquire) as usize;
            let data = std::ptr::read(std::ptr::addr_of!((*t).data));
            let tid = std::ptr::read(std::ptr::addr_of!((*t).tid));
            Some((tid, std::slice::from_raw_parts(data, used)))
        }
    }
}

/// A small record built on the stack.
pub(crate) struct Rec {
    b: [u8; 64],
    n: usize,
}

impl Default for Rec {
    fn default() -> Self {
        Rec { b: [0; 64], n: 0 }
    }
}

impl Rec {
    pub(crate) fn word(&mut self, w: u32) -> &mut Self {
        self.b[self.n..self.n + 4].copy_from_slice(&w.to_le_bytes());
        self.n += 4;
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.b[self.n..self.n + 8].copy_from_slice(&v.to_le_bytes());
        self.n += 8;
        self
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }
}

/// Writes one chunk; a failed write cannot be reported to the guest (the reader detects
/// a cut log). Header and payload go in one vectored write: a `BufWriter` hands a chunk
/// at least as big as its buffer to the file without copying it.
pub(crate) fn write_chunk<W: Write + ?Sized>(out: &mut W, kind: u8, tid: u32, payload: &[u8]) {
    let head = chunk_header(kind, tid, payload.len() as u64);
    let n = out
        .write_vectored(&[IoSlice::new(&head), IoSlice::new(payload)])
        .unwrap_or(0);
    if n < head.len() {
        let _ = out.write_all(&head[n..]);
        let _ = out.write_all(payload);
    } else {
        let _ = out.write_all(&payload[(n - head.len()).min(payload.len())..]);
    }
}

/// Writes a maps snapshot chunk: the clock it was taken at, then `/proc/self/maps`.
pub(crate) fn write_maps<W: Write + ?Sized>(out: &mut W, clock: u64, maps: &str) {
    let mut payload = clock.to_le_bytes().to_vec();
    payload.extend_from_slice(maps.as_bytes());
    write_chunk(out, KIND_MAPS, 0, &payload);
}

/// vCPU indices the hot path finds a state by directly; a thread with a higher index
/// goes through its thread-local pointer.
pub(crate) const FAST_VCPUS: usize = 256;

/// Each live thread's state by vCPU index (null: none yet, or the thread changed).
pub(crate) static STATES: [AtomicPtr<ThreadState>; FAST_VCPUS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; FAST_VCPUS];

/// The state of the thread running vCPU `vcpu`, if it has one already.
#[inline(always)]
pub(crate) fn fast_state(vcpu: u32) -> Option<&'static mut ThreadState> {
    let p = STATES.get(vcpu as usize)?.load(Ordering::Relaxed);
    // SAFETY: a non-null entry is the state of the thread now running this vCPU: it is
    // cleared when a vCPU is created for a new thread and when its owner ends.
    unsafe { p.as_mut() }
}

/// Forgets every fast entry (a forked child's threads are not the parent's).
pub(crate) fn forget_all() {
    for s in &STATES {
        s.store(std::ptr::null_mut(), Ordering::Relaxed);
    }
}

/// Owner of a thread's state: writes what it holds when the guest thread exits, and
/// frees it.
struct Owner(*mut ThreadState);

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = STATE.try_with(|s| s.set(std::ptr::null_mut()));
        // SAFETY: the state is this thread's own, created by `new_state` (a forked
        // child forgets the parent's owner instead of dropping it: `forget_own`).
        let mut st = unsafe { Box::from_raw(self.0) };
        if let Some(slot) = STATES.get(st.vcpu) {
            let _ = slot.compare_exchange(
                self.0,
                std::ptr::null_mut(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        st.flush();
        if let Some(p) = proc() {
            if let Ok(mut threads) = p.threads.lock() {
                threads.retain(|&t| t != self.0 as usize);
            }
        }
    }
}

thread_local! {
    /// This thread's state, or null before its first block (and in a forked child).
    static STATE: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    /// Frees the state when the thread ends (a destructor the hot path does not touch).
    static OWNER: RefCell<Option<Owner>> = const { RefCell::new(None) };
}

/// In a forked child: the forking thread's state is the parent's, left untouched (never
/// written, never freed), so the child makes its own.
pub(crate) fn forget_own() {
    let _ = STATE.try_with(|s| s.set(std::ptr::null_mut()));
    let _ = OWNER.try_with(|o| {
        if let Ok(mut o) = o.try_borrow_mut() {
            std::mem::forget(o.take());
        }
    });
    forget_all();
}

/// The clock the first block of a new state starts at when known (a forked child: the
/// clock at the fork), else `u64::MAX`.
pub(crate) static FIRST_EXPECTED: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(u64::MAX);

/// This thread's state, made at its first use; `None` in a forked child whose log could
/// not be made, or after the thread's destructors ran.
pub(crate) fn state(vcpu: u32) -> Option<&'static mut ThreadState> {
    let p = STATE.try_with(|s| s.get()).ok()?;
    let p = if p.is_null() { new_state(vcpu)? } else { p };
    // SAFETY: a non-null STATE is this thread's own live state.
    let s = unsafe { &mut *p };
    if let Some(slot) = STATES.get(vcpu as usize) {
        s.vcpu = vcpu as usize;
        slot.store(p, Ordering::Relaxed);
    }
    Some(s)
}

#[cold]
fn new_state(vcpu: u32) -> Option<*mut ThreadState> {
    let shared = SHARED.get()?;
    let p: &Proc = proc()?;
    let tid = gettid();
    let ring = shared
        .ring
        .as_ref()
        .and_then(|(dir, slots)| Ring::create(dir, p.pid, tid, *slots, shared.chunk));
    if shared.ring.is_some() && ring.is_none() {
        say(&format!(
            "ptsim-plugin: cannot create the ring file of thread {tid}; its executions are \
             written to the log\n"
        ));
    }
    let buf = if ring.is_some() {
        Box::default()
    } else {
        vec![0u8; shared.chunk].into_boxed_slice()
    };
    let st = Box::into_raw(Box::new(ThreadState {
        tid,
        vcpu: vcpu as usize,
        expected: FIRST_EXPECTED.swap(u64::MAX, Ordering::Relaxed),
        countdown: 0,
        room: 0,
        room_set: 0,
        data: std::ptr::null_mut(),
        used: 0,
        cap: shared.chunk,
        published: std::ptr::null(),
        own_used: AtomicU32::new(0),
        buf,
        ring,
        naming: None,
    }));
    // SAFETY: just made; fields point into the state's own buffer or its ring.
    let s = unsafe { &mut *st };
    match s.ring.as_ref() {
        Some(r) => {
            s.data = r.slot_ptr(r.slot).wrapping_add(SLOT_HEADER);
            s.published = r.slot_ptr(r.slot).wrapping_add(8) as *const AtomicU32;
        }
        None => {
            s.data = s.buf.as_mut_ptr();
            s.published = &s.own_used;
        }
    }
    if let Ok(mut threads) = p.threads.lock() {
        threads.push(st as usize);
    }
    if OWNER
        .try_with(|o| *o.borrow_mut() = Some(Owner(st)))
        .is_err()
    {
        // The thread is ending: its destructors ran already.
        return None;
    }
    let _ = STATE.try_with(|c| c.set(st));
    Some(st)
}
