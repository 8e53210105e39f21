//! The FXT writer.
//!
//! Design notes:
//! - Records are assembled straight into one reusable byte buffer that is handed to the
//!   inner writer in large chunks, so the steady state allocates nothing per event.
//! - Names are interned into the 32 767-entry string table on first use. When the table
//!   is full a clock (second-chance) sweep picks a victim slot and the new string is
//!   registered under that index; the spec says re-registering an index replaces its
//!   value, so readers resolve each record against the table as it stood at that point.
//!   Strings referenced by the record being built are pinned so one record can never
//!   evict its own strings.
//! - Threads get one of the 255 thread-table slots the same way; an evicted thread is
//!   simply re-registered (a 3-word record) before its next event.
//! - I/O errors are sticky: the first one is kept, later writes are skipped, and
//!   [`FxtWriter::finish`] returns it. Nothing here panics on I/O failure.

use crate::format::{self, arg, event, metadata, object, record};
use crate::hash::FastBuild;
use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

/// Size at which the internal buffer is handed to the inner writer.
const FLUSH_AT: usize = 1 << 16;
/// Number of usable string-table slots (index 0 is the empty string).
const STRING_SLOTS: usize = format::MAX_STRING_INDEX as usize;
/// Number of usable thread-table slots (index 0 means "inline").
const THREAD_SLOTS: usize = format::MAX_THREAD_INDEX as usize;

/// Ticks per second written in the initialization record: timestamps are nanoseconds.
pub const TICKS_PER_SECOND: u64 = 1_000_000_000;
/// Name written in the provider info record.
pub const PROVIDER_NAME: &str = "ptscope";
/// Id of the single provider this writer emits.
pub const PROVIDER_ID: u32 = 0;

/// Handle for a (process koid, thread koid) pair registered with [`FxtWriter::thread`].
///
/// Handles are only meaningful to the writer that created them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadId(u32);

/// A value of an event or kernel-object argument.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArgValue<'a> {
    /// No value (FXT null argument).
    Null,
    /// Signed integer; written as int32 when it fits, int64 otherwise.
    Int(i64),
    /// Unsigned integer; written as uint32 when it fits, uint64 otherwise.
    UInt(u64),
    /// Floating-point number.
    Double(f64),
    /// String that recurs: interned in the string table.
    Str(&'a str),
    /// One-off string: written inline in the record (interned instead if it would
    /// push the record past the 4 095-word limit).
    InlineStr(&'a str),
    /// Address, shown in hex by viewers.
    Pointer(u64),
    /// Kernel object id (kept below 2^32 because Perfetto truncates koids to 32 bits).
    Koid(u32),
    /// Boolean.
    Bool(bool),
}

/// A named argument.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Arg<'a> {
    /// The argument's name (interned).
    pub name: &'a str,
    /// The argument's value.
    pub value: ArgValue<'a>,
}

impl<'a> Arg<'a> {
    /// Shorthand constructor.
    pub fn new(name: &'a str, value: ArgValue<'a>) -> Self {
        Arg { name, value }
    }
}

/// Counters describing what the writer had to do to stay within FXT limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Events written.
    pub events: u64,
    /// String records written (first registrations plus re-registrations).
    pub string_records: u64,
    /// Strings evicted from the table to make room for new ones.
    pub string_evictions: u64,
    /// Thread records written.
    pub thread_records: u64,
    /// Threads evicted from the thread table.
    pub thread_evictions: u64,
    /// Strings cut to [`format::MAX_STRING_LEN`] bytes.
    pub truncated_strings: u64,
    /// Arguments dropped because a record had more than [`format::MAX_ARGS`].
    pub dropped_args: u64,
    /// Events dropped because their thread handle was not from this writer.
    pub invalid_threads: u64,
}

/// Returns the longest prefix of `s` that is at most `max` bytes and ends on a char boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Words needed for a stream of `len` bytes padded to 8.
#[inline]
fn stream_words(len: usize) -> usize {
    len.div_ceil(8)
}

/// One string-table slot.
#[derive(Default)]
struct StringSlot {
    /// The caller's text (untruncated, so later lookups by the same text hit).
    key: Option<Arc<str>>,
    /// Clock bit: set on use, cleared by the sweep.
    referenced: bool,
    /// Record epoch that last used the slot; slots of the current record are not evicted.
    pinned: u32,
    /// Which assignment of the slot this is (0: none since the last clear), so a
    /// [`NameToken`] taken at a begin is known stale once the slot holds other text.
    generation: u64,
}

/// A name's string-table slot as a begin left it: the end closing that slice passes it
/// back ([`FxtWriter::end_token`]) and, while the slot still holds the name, is written
/// without looking the text up again (half the lookups of a call trace).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NameToken {
    index: u16,
    generation: u64,
}

/// Entries of [`StringTable::recent`] (a power of two).
const RECENT: usize = 1 << 10;

/// String table with clock eviction.
struct StringTable {
    map: HashMap<Arc<str>, u16, FastBuild>,
    slots: Vec<StringSlot>,
    /// `(address, slot)` of recent lookups, direct-mapped by the caller's string address:
    /// callers pass the same few names (`"address"`, `"symbol"`, names from their own
    /// table) millions of times, and a hit skips hashing them. A hit is checked against
    /// the slot's text, so an address reused for other text never gives a wrong index.
    recent: Vec<(usize, u16)>,
    next_fresh: usize,
    hand: usize,
    epoch: u32,
    /// The next slot assignment's generation; never reset, so tokens from before a
    /// [`StringTable::clear`] never match.
    next_generation: u64,
}

/// Whether two names are the same text: most are short, and a libc `memcmp` call
/// cost more than the comparison on the writer's hottest path.
#[inline]
pub fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let word = |c: &[u8]| <[u8; 8]>::try_from(c).map_or(0, u64::from_ne_bytes);
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        if word(x) != word(y) {
            return false;
        }
    }
    ca.remainder()
        .iter()
        .zip(cb.remainder())
        .all(|(x, y)| x == y)
}

impl StringTable {
    fn new() -> Self {
        let mut slots = Vec::with_capacity(STRING_SLOTS + 1);
        slots.resize_with(STRING_SLOTS + 1, StringSlot::default);
        StringTable {
            map: HashMap::default(),
            slots,
            recent: vec![(0, 0); RECENT],
            next_fresh: 1,
            hand: 1,
            epoch: 1,
            next_generation: 1,
        }
    }

    /// Forgets every string (keeping the memory): all are registered again.
    fn clear(&mut self) {
        self.map.clear();
        // Slots from `next_fresh` on were never handed out since the last clear.
        let used = self.next_fresh.min(self.slots.len());
        for s in &mut self.slots[..used] {
            *s = StringSlot::default();
        }
        self.recent.fill((0, 0));
        self.next_fresh = 1;
        self.hand = 1;
    }

    /// Starts a new record: strings used from now on are pinned until the next call.
    fn new_record(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Slots that were never used have epoch 0; never let it match them.
            self.epoch = 1;
        }
    }

    /// The index a begin's token names, if its slot still holds that name (marked used).
    #[inline]
    fn by_token(&mut self, token: NameToken) -> Option<u16> {
        let slot = self.slots.get_mut(usize::from(token.index))?;
        if token.generation == 0 || slot.generation != token.generation {
            return None;
        }
        slot.referenced = true;
        slot.pinned = self.epoch;
        Some(token.index)
    }

    /// The token of slot `index` as it stands.
    #[inline]
    fn token(&self, index: u16) -> NameToken {
        let generation = self
            .slots
            .get(usize::from(index))
            .map_or(0, |s| s.generation);
        NameToken { index, generation }
    }

    /// Returns the index for `s` and whether it must be (re-)registered; the second
    /// value of the pair reports an eviction.
    #[inline]
    fn intern(&mut self, s: &str) -> (u16, bool, bool) {
        let addr = s.as_ptr() as usize;
        let r = ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize & (RECENT - 1);
        let (a, i) = self.recent[r];
        // Slot i holds s exactly when the map maps s to i (they change together).
        if a == addr {
            if let Some(slot) = self.slots.get_mut(usize::from(i)) {
                if slot.key.as_deref().is_some_and(|k| same_text(k, s)) {
                    slot.referenced = true;
                    slot.pinned = self.epoch;
                    return (i, false, false);
                }
            }
        }
        if let Some(&i) = self.map.get(s) {
            if let Some(slot) = self.slots.get_mut(usize::from(i)) {
                slot.referenced = true;
                slot.pinned = self.epoch;
            }
            self.recent[r] = (addr, i);
            return (i, false, false);
        }
        self.register(s, r, addr)
    }

    /// Puts `s` in a slot (evicting if the table is full); `r` and `addr` are its
    /// entry in [`StringTable::recent`].
    #[cold]
    fn register(&mut self, s: &str, r: usize, addr: usize) -> (u16, bool, bool) {
        let i = self.victim();
        let mut evicted = false;
        if let Some(old) = self.slots[i].key.take() {
            self.map.remove(&*old);
            evicted = true;
        }
        let key: Arc<str> = Arc::from(s);
        // `i` is at most STRING_SLOTS (0x7FFF), so it fits in u16.
        let index = i as u16;
        self.recent[r] = (addr, index);
        self.map.insert(Arc::clone(&key), index);
        self.slots[i] = StringSlot {
            key: Some(key),
            referenced: false,
            pinned: self.epoch,
            generation: self.next_generation,
        };
        self.next_generation += 1;
        (index, true, evicted)
    }

    /// Picks a free slot, or the first unpinned slot whose clock bit is clear.
    fn victim(&mut self) -> usize {
        if self.next_fresh <= STRING_SLOTS {
            let i = self.next_fresh;
            self.next_fresh += 1;
            return i;
        }
        // Terminates within two sweeps: a record pins at most ~32 of 32 767 slots.
        loop {
            let i = self.hand;
            self.hand = if i >= STRING_SLOTS { 1 } else { i + 1 };
            let slot = &mut self.slots[i];
            if slot.pinned == self.epoch {
                continue;
            }
            if slot.referenced {
                slot.referenced = false;
                continue;
            }
            return i;
        }
    }
}

/// A registered thread and the table slot it currently holds (0 = none).
struct ThreadEntry {
    pid: u32,
    tid: u32,
    slot: u8,
}

/// Thread table with clock eviction.
struct ThreadTable {
    entries: Vec<ThreadEntry>,
    /// `owner[slot]` is the entry index occupying the slot, or `u32::MAX`.
    owner: [u32; THREAD_SLOTS + 1],
    referenced: [bool; THREAD_SLOTS + 1],
    next_fresh: usize,
    hand: usize,
}

impl ThreadTable {
    fn new() -> Self {
        ThreadTable {
            entries: Vec::new(),
            owner: [u32::MAX; THREAD_SLOTS + 1],
            referenced: [false; THREAD_SLOTS + 1],
            next_fresh: 1,
            hand: 1,
        }
    }

    /// Frees every slot (the threads stay registered): each is written again at its
    /// next use.
    fn clear_slots(&mut self) {
        for e in &mut self.entries {
            e.slot = 0;
        }
        self.owner = [u32::MAX; THREAD_SLOTS + 1];
        self.referenced = [false; THREAD_SLOTS + 1];
        self.next_fresh = 1;
        self.hand = 1;
    }

    /// Returns (slot, pid, tid, needs a thread record, evicted), or `None` for a foreign handle.
    #[inline]
    fn slot_for(&mut self, id: ThreadId) -> Option<(u8, u32, u32, bool, bool)> {
        let entry = self.entries.get(id.0 as usize)?;
        let (pid, tid, slot) = (entry.pid, entry.tid, usize::from(entry.slot));
        if slot != 0 && self.owner[slot] == id.0 {
            self.referenced[slot] = true;
            return Some((slot as u8, pid, tid, false, false));
        }
        self.assign(id, pid, tid)
    }

    /// Gives thread `id` a slot (evicting if the table is full).
    #[cold]
    fn assign(&mut self, id: ThreadId, pid: u32, tid: u32) -> Option<(u8, u32, u32, bool, bool)> {
        let slot = self.victim();
        let evicted = self.owner[slot] != u32::MAX;
        if let Some(old) = self.entries.get_mut(self.owner[slot] as usize) {
            old.slot = 0;
        }
        self.owner[slot] = id.0;
        self.referenced[slot] = false;
        // `slot` is at most THREAD_SLOTS (255).
        let slot = slot as u8;
        if let Some(entry) = self.entries.get_mut(id.0 as usize) {
            entry.slot = slot;
        }
        Some((slot, pid, tid, true, evicted))
    }

    fn victim(&mut self) -> usize {
        if self.next_fresh <= THREAD_SLOTS {
            let i = self.next_fresh;
            self.next_fresh += 1;
            return i;
        }
        loop {
            let i = self.hand;
            self.hand = if i >= THREAD_SLOTS { 1 } else { i + 1 };
            if self.referenced[i] {
                self.referenced[i] = false;
                continue;
            }
            return i;
        }
    }
}

/// How one argument will be encoded, decided before the record is written.
#[derive(Copy, Clone)]
struct PlannedArg<'a> {
    name_ref: u16,
    kind: u8,
    /// Bits 32..63 of the argument header.
    header_value: u32,
    /// Extra value word, if the type has one.
    word: Option<u64>,
    /// Inline string value written after the (indexed) name.
    inline: &'a str,
}

impl Default for PlannedArg<'_> {
    fn default() -> Self {
        PlannedArg {
            name_ref: 0,
            kind: arg::NULL,
            header_value: 0,
            word: None,
            inline: "",
        }
    }
}

impl PlannedArg<'_> {
    fn words(&self) -> usize {
        1 + usize::from(self.word.is_some()) + stream_words(self.inline.len())
    }
}

/// The fixed part of an event: what differs between the event methods.
struct EventHead {
    kind: u8,
    thread: ThreadId,
    timestamp: u64,
    trailer: Option<u64>,
}

impl EventHead {
    fn new(kind: u8, thread: ThreadId, timestamp: u64, trailer: Option<u64>) -> Self {
        EventHead {
            kind,
            thread,
            timestamp,
            trailer,
        }
    }
}

/// Streaming writer of an FXT trace.
///
/// Timestamps are ticks at [`TICKS_PER_SECOND`] (nanoseconds). Call
/// [`finish`](FxtWriter::finish) at the end: dropping the writer loses buffered data.
pub struct FxtWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
    error: Option<io::Error>,
    strings: StringTable,
    threads: ThreadTable,
    stats: WriterStats,
    /// Argument names the caller gave as `'static` text ([`FxtWriter::frequent_arg_names`])
    /// and the token of each one's slot: an argument named by the same address is
    /// written by token, not looked up by text (two lookups per frame begin before).
    frequent: [(&'static str, NameToken); FREQUENT_ARG_NAMES],
}

/// Arguments an event's plan holds without the format's full fifteen.
const FEW_ARGS: usize = 6;

/// How many argument names [`FxtWriter::frequent_arg_names`] keeps.
const FREQUENT_ARG_NAMES: usize = 4;

impl<W: Write> FxtWriter<W> {
    /// Starts a trace: writes the magic, provider and initialization records.
    pub fn new(inner: W) -> Self {
        let mut w = FxtWriter::fragment(inner);
        w.word(format::MAGIC);
        let name = PROVIDER_NAME.as_bytes();
        w.word(
            u64::from(record::METADATA)
                | ((1 + stream_words(name.len()) as u64) << 4)
                | (u64::from(metadata::PROVIDER_INFO) << 16)
                | (u64::from(PROVIDER_ID) << 20)
                | ((name.len() as u64) << 52),
        );
        w.stream(name);
        w.word(
            u64::from(record::METADATA)
                | (1 << 4)
                | (u64::from(metadata::PROVIDER_SECTION) << 16)
                | (u64::from(PROVIDER_ID) << 20),
        );
        w.word(u64::from(record::INITIALIZATION) | (2 << 4));
        w.word(TICKS_PER_SECOND);
        w
    }

    /// Starts a fragment of a trace: no header (another fragment has it). Fragments
    /// written by separate writers can be concatenated in any order after the one with
    /// the header, as long as each is cut with [`FxtWriter::cut`]: every fragment then
    /// registers the strings and threads it uses.
    pub fn fragment(inner: W) -> Self {
        FxtWriter {
            inner,
            buf: Vec::with_capacity(FLUSH_AT + 8 * format::MAX_RECORD_WORDS),
            error: None,
            strings: StringTable::new(),
            threads: ThreadTable::new(),
            stats: WriterStats::default(),
            frequent: [("", NameToken::default()); FREQUENT_ARG_NAMES],
        }
    }

    /// Names (at most four; more are ignored) that arguments will be named by, given as
    /// `'static` text: an argument whose name is one of these at the same address is
    /// then written by its string-table slot, without hashing or comparing its text.
    /// The records written are the same bytes as without it: a slot taken over by
    /// another string since (eviction, [`FxtWriter::cut`]) is noticed by its
    /// generation, and the name is looked up by text then.
    pub fn frequent_arg_names(&mut self, names: &[&'static str]) {
        for (f, name) in self.frequent.iter_mut().zip(names) {
            *f = (name, NameToken::default());
        }
    }

    /// Ends a fragment: what is buffered goes to the inner writer, and the string and
    /// thread tables are forgotten, so the records after this register again what they
    /// use (a reader may see the fragments in any order).
    pub fn cut(&mut self) {
        self.flush_buf();
        self.strings.clear();
        self.threads.clear_slots();
    }

    /// Bytes of records buffered, not yet handed to the inner writer.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The inner writer (what [`FxtWriter::cut`] handed it is complete).
    pub fn inner_mut(&mut self) -> &mut W {
        &mut self.inner
    }

    /// Registers a thread of process `pid` (both koids) and returns its handle.
    ///
    /// Nothing is written until the thread is first used; calling this twice for the
    /// same pair gives two handles that both work.
    pub fn thread(&mut self, pid: u32, tid: u32) -> ThreadId {
        let id = ThreadId(self.threads.entries.len() as u32);
        self.threads.entries.push(ThreadEntry { pid, tid, slot: 0 });
        id
    }

    /// Writes a process kernel object, which is how viewers learn the process's name.
    pub fn process(&mut self, koid: u32, name: &str) {
        self.kernel_object(object::PROCESS, koid, name, &[]);
    }

    /// Writes a thread kernel object naming thread `koid` of process `process`.
    pub fn thread_object(&mut self, koid: u32, process: u32, name: &str) {
        self.kernel_object(
            object::THREAD,
            koid,
            name,
            &[Arg::new("process", ArgValue::Koid(process))],
        );
    }

    /// Writes a kernel object record of any type; the name is written inline.
    pub fn kernel_object(&mut self, obj_type: u8, koid: u32, name: &str, args: &[Arg<'_>]) {
        if self.error.is_some() {
            return;
        }
        self.strings.new_record();
        let name = self.truncated(name);
        let name_words = stream_words(name.len());
        let budget = format::MAX_RECORD_WORDS - 2 - name_words;
        let mut planned = [PlannedArg::default(); format::MAX_ARGS];
        let (nargs, arg_words) = self.plan_args(args, budget, &mut planned, None);
        let size = 2 + name_words + arg_words;
        let name_ref = if name.is_empty() {
            0
        } else {
            0x8000 | name.len() as u64
        };
        self.word(
            u64::from(record::KERNEL_OBJECT)
                | ((size as u64) << 4)
                | (u64::from(obj_type) << 16)
                | (name_ref << 24)
                | ((nargs as u64) << 40),
        );
        self.word(u64::from(koid));
        self.stream(name.as_bytes());
        self.write_args(&planned[..nargs]);
        self.maybe_flush();
    }

    /// Writes an instant event.
    pub fn instant(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) {
        let head = EventHead::new(event::INSTANT, thread, timestamp, None);
        self.event(head, category, name, None, args);
    }

    /// Writes a duration-begin event.
    pub fn begin(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) {
        self.begin_token(thread, category, name, timestamp, args);
    }

    /// Writes a duration-end event (viewers close the innermost open slice).
    pub fn end(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) {
        let head = EventHead::new(event::END, thread, timestamp, None);
        self.event(head, category, name, None, args);
    }

    /// Writes a duration-begin event and returns its name's token, for the
    /// [`FxtWriter::end_token`] that closes the slice.
    pub fn begin_token(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) -> NameToken {
        let head = EventHead::new(event::BEGIN, thread, timestamp, None);
        self.event(head, category, name, None, args)
    }

    /// Writes a duration-end event named as the begin that gave `token`; `name` is
    /// that begin's name, looked up only if its slot has since been reused. Returns the
    /// name's token as it now stands.
    pub fn end_token(
        &mut self,
        thread: ThreadId,
        category: &str,
        token: NameToken,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) -> NameToken {
        let head = EventHead::new(event::END, thread, timestamp, None);
        self.event(head, category, name, Some(token), args)
    }

    /// The token of `name`'s string-table slot, registering it now (a string record)
    /// if it is not resident: a caller that names an event later, from a copy of the
    /// name, passes the token instead of having the copy looked up.
    pub fn name_token(&mut self, name: &str) -> NameToken {
        if self.error.is_some() {
            return NameToken::default();
        }
        self.strings.new_record();
        let index = self.string_ref(name);
        self.strings.token(index)
    }

    /// [`FxtWriter::name_token`] of a name whose token the caller kept from an earlier
    /// use: `name` (the token's text) is looked up only if the token's slot has since
    /// been reused, so a caller that numbers its names looks each up once per table.
    pub fn name_token_again(&mut self, token: NameToken, name: &str) -> NameToken {
        if self.error.is_some() {
            return NameToken::default();
        }
        self.strings.new_record();
        let index = match self.strings.by_token(token) {
            Some(index) => index,
            None => self.string_ref(name),
        };
        self.strings.token(index)
    }

    /// [`FxtWriter::begin_token`] naming the slice by a [`FxtWriter::name_token`];
    /// `name` is looked up only if the token's slot has since been reused.
    pub fn begin_by_token(
        &mut self,
        thread: ThreadId,
        category: &str,
        token: NameToken,
        name: &str,
        timestamp: u64,
        args: &[Arg<'_>],
    ) -> NameToken {
        let head = EventHead::new(event::BEGIN, thread, timestamp, None);
        self.event(head, category, name, Some(token), args)
    }

    /// [`FxtWriter::complete`] naming the slice by a [`FxtWriter::name_token`];
    /// `name` is looked up only if the token's slot has since been reused. Returns the
    /// name's token as it now stands.
    #[allow(clippy::too_many_arguments)]
    pub fn complete_by_token(
        &mut self,
        thread: ThreadId,
        category: &str,
        token: NameToken,
        name: &str,
        start: u64,
        end: u64,
        args: &[Arg<'_>],
    ) -> NameToken {
        let head = EventHead::new(event::COMPLETE, thread, start, Some(end));
        self.event(head, category, name, Some(token), args)
    }

    /// Writes a duration-complete event; `end` is an absolute timestamp.
    pub fn complete(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        start: u64,
        end: u64,
        args: &[Arg<'_>],
    ) {
        let head = EventHead::new(event::COMPLETE, thread, start, Some(end));
        self.event(head, category, name, None, args);
    }

    /// Writes a counter event; each numeric argument is one series of counter `id`.
    pub fn counter(
        &mut self,
        thread: ThreadId,
        category: &str,
        name: &str,
        timestamp: u64,
        id: u64,
        args: &[Arg<'_>],
    ) {
        let head = EventHead::new(event::COUNTER, thread, timestamp, Some(id));
        self.event(head, category, name, None, args);
    }

    /// What the writer has done so far to stay within the format's limits.
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }

    /// The first I/O error met so far, if any (later writes are skipped).
    pub fn io_error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Flushes everything and returns the inner writer, or the first I/O error.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_buf();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.inner.flush()?;
        Ok(self.inner)
    }

    /// Writes an event named `name` (or by `token`, while its slot still holds that
    /// name) and returns the name's token.
    fn event(
        &mut self,
        head: EventHead,
        category: &str,
        name: &str,
        token: Option<NameToken>,
        args: &[Arg<'_>],
    ) -> NameToken {
        if self.error.is_some() {
            return NameToken::default();
        }
        self.strings.new_record();
        let Some((slot, pid, tid, fresh, evicted)) = self.threads.slot_for(head.thread) else {
            self.stats.invalid_threads += 1;
            return NameToken::default();
        };
        if fresh {
            self.stats.thread_records += 1;
            self.stats.thread_evictions += u64::from(evicted);
            self.word(u64::from(record::THREAD) | (3 << 4) | (u64::from(slot) << 16));
            self.word(u64::from(pid));
            self.word(u64::from(tid));
        }
        let category_ref = self.string_ref(category);
        let name_ref = match token.and_then(|t| self.strings.by_token(t)) {
            Some(index) => index,
            None => self.string_ref(name),
        };
        let refs = (slot, category_ref, name_ref);
        let fixed = 2 + usize::from(head.trailer.is_some());
        if args.is_empty() {
            // Most events carry none: no plan to fill (it is 15 arguments wide).
            self.event_words(&head, refs, fixed, &[]);
        } else {
            let name_at = (name_ref != 0).then_some((name, name_ref));
            // A frame's begin has two to six: a plan that wide, not fifteen (the
            // clearing of the wide one was a fifth of a begin's instructions).
            if args.len() <= FEW_ARGS {
                let mut planned = [PlannedArg::default(); FEW_ARGS];
                self.planned_event(&head, refs, fixed, args, &mut planned, name_at);
            } else {
                let mut planned = [PlannedArg::default(); format::MAX_ARGS];
                self.planned_event(&head, refs, fixed, args, &mut planned, name_at);
            }
        }
        self.strings.token(name_ref)
    }

    /// Plans `args` in `planned` (as wide as the arguments kept) and writes the event.
    #[inline]
    fn planned_event<'a>(
        &mut self,
        head: &EventHead,
        refs: (u8, u16, u16),
        fixed: usize,
        args: &[Arg<'a>],
        planned: &mut [PlannedArg<'a>],
        name_at: Option<(&str, u16)>,
    ) {
        let (nargs, arg_words) =
            self.plan_args(args, format::MAX_RECORD_WORDS - fixed, planned, name_at);
        self.event_words(head, refs, fixed + arg_words, &planned[..nargs]);
    }

    /// Writes an event record of `size` words: its header (`refs`: thread slot,
    /// category and name), timestamp, `planned` arguments and trailer.
    #[inline]
    fn event_words(
        &mut self,
        head: &EventHead,
        (slot, category_ref, name_ref): (u8, u16, u16),
        size: usize,
        planned: &[PlannedArg<'_>],
    ) {
        self.word(
            u64::from(record::EVENT)
                | ((size as u64) << 4)
                | (u64::from(head.kind) << 16)
                | ((planned.len() as u64) << 20)
                | (u64::from(slot) << 24)
                | (u64::from(category_ref) << 32)
                | (u64::from(name_ref) << 48),
        );
        self.word(head.timestamp);
        if !planned.is_empty() {
            self.write_args(planned);
        }
        if let Some(t) = head.trailer {
            self.word(t);
        }
        self.stats.events += 1;
        self.maybe_flush();
    }

    /// Resolves argument strings (emitting string records) and sizes each argument;
    /// inline strings that would overflow `budget` words are interned instead. An
    /// interned value that is the event's name itself (`name`: the name and its index;
    /// the same text at the same address) takes the name's index without a lookup (a
    /// frame's `symbol` argument).
    fn plan_args<'a>(
        &mut self,
        args: &[Arg<'a>],
        budget: usize,
        out: &mut [PlannedArg<'a>],
        name: Option<(&str, u16)>,
    ) -> (usize, usize) {
        // `out` is at most MAX_ARGS wide, and as wide as `args` when narrower.
        let n = args.len().min(out.len()).min(format::MAX_ARGS);
        self.stats.dropped_args += (args.len() - n) as u64;
        // Every argument takes at most two words besides inline strings, so reserve
        // that much first and hand the rest out to inline strings in order.
        let mut remaining = budget.saturating_sub(2 * n);
        let mut total = 0;
        for (a, p) in args.iter().take(n).zip(out.iter_mut()) {
            let name_ref = self.arg_name_ref(a.name);
            let mut plan = PlannedArg {
                name_ref,
                ..PlannedArg::default()
            };
            match a.value {
                ArgValue::Null => plan.kind = arg::NULL,
                ArgValue::Int(v) => match i32::try_from(v) {
                    Ok(small) => {
                        plan.kind = arg::INT32;
                        plan.header_value = small as u32;
                    }
                    Err(_) => {
                        plan.kind = arg::INT64;
                        plan.word = Some(v as u64);
                    }
                },
                ArgValue::UInt(v) => match u32::try_from(v) {
                    Ok(small) => {
                        plan.kind = arg::UINT32;
                        plan.header_value = small;
                    }
                    Err(_) => {
                        plan.kind = arg::UINT64;
                        plan.word = Some(v);
                    }
                },
                ArgValue::Double(v) => {
                    plan.kind = arg::DOUBLE;
                    plan.word = Some(v.to_bits());
                }
                ArgValue::Str(s) => {
                    plan.kind = arg::STRING;
                    let index = match name {
                        Some((n, index)) if std::ptr::eq(s.as_bytes(), n.as_bytes()) => index,
                        _ => self.string_ref(s),
                    };
                    plan.header_value = u32::from(index);
                }
                ArgValue::InlineStr(s) => {
                    plan.kind = arg::STRING;
                    let s = self.truncated(s);
                    let words = stream_words(s.len());
                    if s.is_empty() {
                        plan.header_value = 0;
                    } else if words <= remaining {
                        remaining -= words;
                        plan.header_value = 0x8000 | s.len() as u32;
                        plan.inline = s;
                    } else {
                        plan.header_value = u32::from(self.string_ref(s));
                    }
                }
                ArgValue::Pointer(v) => {
                    plan.kind = arg::POINTER;
                    plan.word = Some(v);
                }
                ArgValue::Koid(v) => {
                    plan.kind = arg::KOID;
                    plan.word = Some(u64::from(v));
                }
                ArgValue::Bool(b) => {
                    plan.kind = arg::BOOL;
                    plan.header_value = u32::from(b);
                }
            }
            total += plan.words();
            *p = plan;
        }
        (n, total)
    }

    fn write_args(&mut self, planned: &[PlannedArg<'_>]) {
        for p in planned {
            self.word(
                u64::from(p.kind)
                    | ((p.words() as u64) << 4)
                    | (u64::from(p.name_ref) << 16)
                    | (u64::from(p.header_value) << 32),
            );
            self.stream(p.inline.as_bytes());
            if let Some(w) = p.word {
                self.word(w);
            }
        }
    }

    /// [`FxtWriter::string_ref`] of an argument's name, by token when it is one of the
    /// [`FxtWriter::frequent_arg_names`] (the same `'static` text: compared by address
    /// and length, which no other text can share).
    #[inline]
    fn arg_name_ref(&mut self, name: &str) -> u16 {
        let Some(i) = self
            .frequent
            .iter()
            .position(|(f, _)| f.as_ptr() == name.as_ptr() && f.len() == name.len())
        else {
            return self.string_ref(name);
        };
        if name.is_empty() {
            return 0;
        }
        if let Some(index) = self.strings.by_token(self.frequent[i].1) {
            return index;
        }
        let index = self.string_ref(name);
        self.frequent[i].1 = self.strings.token(index);
        index
    }

    /// Returns the table index for `s`, writing a string record if it is not resident.
    fn string_ref(&mut self, s: &str) -> u16 {
        if s.is_empty() {
            return 0;
        }
        let (index, fresh, evicted) = self.strings.intern(s);
        if fresh {
            self.stats.string_records += 1;
            self.stats.string_evictions += u64::from(evicted);
            let value = self.truncated(s);
            self.word(
                u64::from(record::STRING)
                    | ((1 + stream_words(value.len()) as u64) << 4)
                    | (u64::from(index) << 16)
                    | ((value.len() as u64) << 32),
            );
            self.stream(value.as_bytes());
        }
        index
    }

    fn truncated<'s>(&mut self, s: &'s str) -> &'s str {
        let t = truncate_utf8(s, format::MAX_STRING_LEN);
        if t.len() != s.len() {
            self.stats.truncated_strings += 1;
        }
        t
    }

    #[inline]
    fn word(&mut self, w: u64) {
        self.buf.extend_from_slice(&w.to_le_bytes());
    }

    fn stream(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        let pad = (8 - bytes.len() % 8) % 8;
        self.buf.extend_from_slice(&[0u8; 8][..pad]);
    }

    #[inline]
    fn maybe_flush(&mut self) {
        if self.buf.len() >= FLUSH_AT {
            self.flush_buf();
        }
    }

    fn flush_buf(&mut self) {
        if self.error.is_none() && !self.buf.is_empty() {
            if let Err(e) = self.inner.write_all(&self.buf) {
                self.error = Some(e);
            }
        }
        self.buf.clear();
    }
}
