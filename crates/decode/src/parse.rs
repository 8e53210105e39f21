//! Byte-level parsers for the pieces of a `perf script` line.
//!
//! Every function here works on `&[u8]` so that invalid UTF-8 can never make parsing
//! fail; only names that end up interned are converted (lossily). Where magic-trace
//! uses a regular expression, the function says which one and reproduces its greedy
//! matching on well-formed input, and accepts a documented superset of it otherwise.

use crate::warning::WarningKind;
use ptscope_event::{
    write_ocaml_int64_hex, ExtraEvent, Kind, Location, StringTable, Symbol, Thread,
};

/// What the event name in a header says the group is.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(crate) enum EventClass {
    Branches,
    Cbr,
    Ptwrite,
    /// PT synthesized events magic-trace does not show (`psb`, power events, …).
    Ignored,
    Extra(ExtraEvent),
    /// Anything else: a sampling event (`cycles`, `cpu-clock`, …) whose tab lines are a callchain.
    Sample,
    /// `sched:sched_switch`: the callchain is the stack a thread left the CPU in.
    SwitchOut,
    /// A side-band record (`PERF_RECORD_COMM`, …) that perf printed like an event.
    Task,
}

/// The fields every event header carries.
#[derive(Debug)]
pub(crate) struct Header<'a> {
    pub thread: Thread,
    pub time: u64,
    pub period: Option<u64>,
    pub class: EventClass,
    /// The `comm` column (perf's default output has one), for the thread's name.
    pub comm: Option<&'a [u8]>,
    /// perf printed no event name (`perf script -F` without `event`).
    pub no_event: bool,
    /// Everything after the `event:` / `event:selector:` prefix.
    pub rest: &'a [u8],
}

/// Index of the first non-space at or after `i`. perf pads its columns with long
/// runs of spaces, so this looks at 8 bytes at a time.
#[inline]
fn skip_spaces(s: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = s.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let diff = u64::from_le_bytes(word) ^ 0x2020_2020_2020_2020;
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < s.len() && s[i] == b' ' {
        i += 1;
    }
    i
}

#[inline]
pub(crate) fn is_ws(b: u8) -> bool {
    // Matches the `\s` class of the regex library magic-trace uses.
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

#[inline]
fn hex_val(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some((b - b'0') as u64),
        b'a'..=b'f' => Some((b - b'a' + 10) as u64),
        _ => None,
    }
}

/// Length of the run of lowercase hex digits starting at `i`.
#[inline]
fn hex_run(s: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < s.len() && hex_val(s[j]).is_some() {
        j += 1;
    }
    j - i
}

#[inline]
fn dec_run(s: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < s.len() && s[j].is_ascii_digit() {
        j += 1;
    }
    j - i
}

/// Parses lowercase hex that must fit in 64 bits.
#[inline]
pub(crate) fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        v = (v << 4) | hex_val(b)?;
    }
    Some(v)
}

/// Parses hex of any length keeping the low 63 bits, as magic-trace's symbol offsets do,
/// so perf's garbage offsets (`+0xffffffffff22f000`) never fail.
#[inline]
fn parse_hex_trunc63(s: &[u8]) -> u64 {
    let mut v = 0u64;
    for &b in s {
        v = (v << 4) | hex_val(b).unwrap_or(0);
    }
    v & (u64::MAX >> 1)
}

#[inline]
fn parse_dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut v = 0u64;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    Some(v)
}

/// A pid or tid: perf's `0` (and negative "unknown" values) mean `None`.
fn parse_id(s: &[u8]) -> Option<Option<u32>> {
    if let Some(neg) = s.strip_prefix(b"-") {
        parse_dec(neg)?;
        return Some(None);
    }
    let v = parse_dec(s)?;
    if v == 0 {
        Some(None)
    } else {
        Some(Some(u32::try_from(v).ok()?))
    }
}

/// `SEC.FRAC` to nanoseconds; the fraction is padded or truncated to 9 digits.
pub(crate) fn parse_time(sec: &[u8], frac: &[u8]) -> Option<u64> {
    let sec = parse_dec(sec)?;
    let mut ns = 0u64;
    for i in 0..9 {
        let d = match frac.get(i) {
            Some(b) if b.is_ascii_digit() => (b - b'0') as u64,
            Some(_) => return None,
            None => 0,
        };
        ns = ns * 10 + d;
    }
    if frac.iter().skip(9).any(|b| !b.is_ascii_digit()) {
        return None;
    }
    sec.checked_mul(1_000_000_000)?.checked_add(ns)
}

fn classify(name: &[u8]) -> EventClass {
    match name {
        b"branches" => EventClass::Branches,
        b"cbr" => EventClass::Cbr,
        b"ptwrite" => EventClass::Ptwrite,
        b"psb" | b"mwait" | b"pwre" | b"pwrx" | b"exstop" | b"evt" | b"iflag" | b"cfe" => {
            EventClass::Ignored
        }
        b"branch-misses" => EventClass::Extra(ExtraEvent::BranchMisses),
        b"cache-misses" => EventClass::Extra(ExtraEvent::CacheMisses),
        n if n.starts_with(b"PERF_RECORD_") => EventClass::Task,
        _ => EventClass::Sample,
    }
}

#[inline]
fn is_event_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// The prefix of a header before its time: which of perf's `comm`, `pid`/`tid` and
/// `cpu` columns it holds and what they say.
struct Prefix<'a> {
    comm: Option<&'a [u8]>,
    thread: Thread,
    /// Index of the first byte of the time.
    time_at: usize,
}

/// True if `tok` is an id perf prints for a pid or tid (`-1` for unknown).
fn is_id(tok: &[u8]) -> bool {
    let t = tok.strip_prefix(b"-").unwrap_or(tok);
    !t.is_empty() && dec_run(t, 0) == t.len()
}

/// True if `tok` is `SEC.FRAC:`, the time column.
fn is_time(tok: &[u8]) -> bool {
    let Some(t) = tok.strip_suffix(b":") else {
        return false;
    };
    let n = dec_run(t, 0);
    n > 0 && t.get(n) == Some(&b'.') && n + 1 < t.len() && dec_run(t, n + 1) == t.len() - n - 1
}

/// Reads the columns before the time. perf prints, in this order and each only if
/// asked for, `comm` (which may hold spaces), `pid/tid` or one of them, and `[cpu]`;
/// its default output is `comm tid time:`, ptscope's own `pid/tid time:`.
fn parse_prefix(s: &[u8]) -> Result<Prefix<'_>, WarningKind> {
    let bad = WarningKind::MalformedHeader;
    // Fast path: ptscope's own `pid/tid time:`.
    let mut i = skip_spaces(s, 0);
    let start = i;
    if s.get(i) == Some(&b'-') {
        i += 1;
    }
    i += dec_run(s, i);
    if i > start && s.get(i) == Some(&b'/') {
        let pid = &s[start..i];
        let t = i + 1;
        let mut j = t;
        if s.get(j) == Some(&b'-') {
            j += 1;
        }
        j += dec_run(s, j);
        let k = skip_spaces(s, j);
        if j > t && k > j {
            return Ok(Prefix {
                comm: None,
                thread: Thread {
                    pid: parse_id(pid).ok_or(bad)?,
                    tid: parse_id(&s[t..j]).ok_or(bad)?,
                },
                time_at: k,
            });
        }
    }
    // General case: find the time, then read the columns before it right to left.
    let mut toks: [(usize, usize); 3] = [(0, 0); 3];
    let mut n = 0usize;
    let mut i = skip_spaces(s, 0);
    let time_at = loop {
        if i >= s.len() {
            // No time column at all: a header of `comm`/`tid` only is one perf printed
            // without `time`, anything else is not a header.
            let last = toks[..n.min(3)].last().map(|&(a, b)| &s[a..b]);
            return Err(match last {
                Some(t) if is_id(t) || is_pid_tid(t) => WarningKind::NoTimeField,
                _ => bad,
            });
        }
        let e = memchr::memchr(b' ', &s[i..]).map_or(s.len(), |p| p + i);
        if is_time(&s[i..e]) {
            break i;
        }
        if n < 3 {
            toks[n] = (i, e);
        } else {
            toks.rotate_left(1);
            toks[2] = (i, e);
        }
        n += 1;
        i = skip_spaces(s, e);
    };
    let mut cols = &toks[..n.min(3)];
    let tok = |c: &(usize, usize)| &s[c.0..c.1];
    if let Some(last) = cols.last() {
        let t = tok(last);
        if t.len() > 2 && t[0] == b'[' && t[t.len() - 1] == b']' && is_id(&t[1..t.len() - 1]) {
            cols = &cols[..cols.len() - 1];
        }
    }
    let Some(ids) = cols.last() else {
        return Err(WarningKind::NoThreadField);
    };
    let t = tok(ids);
    let thread = if let Some((p, tid)) = split_once(t, b'/') {
        if !is_id(p) || !is_id(tid) {
            return Err(WarningKind::NoThreadField);
        }
        Thread {
            pid: parse_id(p).ok_or(bad)?,
            tid: parse_id(tid).ok_or(bad)?,
        }
    } else if is_id(t) {
        // perf's default prints the tid alone; the pid comes from the task events.
        Thread {
            pid: None,
            tid: parse_id(t).ok_or(bad)?,
        }
    } else {
        return Err(WarningKind::NoThreadField);
    };
    // Whatever precedes the ids is the comm (it may hold spaces).
    let comm_start = skip_spaces(s, 0);
    let comm = if n > cols.len() || ids.0 > comm_start {
        let end = s[..ids.0]
            .iter()
            .rposition(|&b| b != b' ')
            .map_or(0, |p| p + 1);
        Some(&s[comm_start..end.max(comm_start)])
    } else {
        None
    };
    Ok(Prefix {
        comm,
        thread,
        time_at,
    })
}

fn is_pid_tid(tok: &[u8]) -> bool {
    split_once(tok, b'/').is_some_and(|(p, t)| is_id(p) && is_id(t))
}

/// Parses `[comm] [pid/]tid [[cpu]] time: [period] [event[/config][/sel]:[sel:]] rest`.
///
/// Superset of magic-trace's header regex (`pid/tid time: [period] event: rest`): the
/// columns of perf's default output (`comm`, a lone `tid`, `[cpu]`) may come first,
/// the period and even the event name may be absent, event names may hold digits, `_`
/// and `.`, the config may hold any non-space bytes, and negative pid/tid are accepted
/// (as unknown).
pub(crate) fn parse_header(line: &[u8]) -> Result<Header<'_>, WarningKind> {
    let bad = WarningKind::MalformedHeader;
    let s = line;
    let prefix = parse_prefix(s)?;
    let thread = prefix.thread;
    let mut i = prefix.time_at;
    let n = dec_run(s, i);
    let sec = &s[i..i + n];
    i += n;
    if n == 0 || s.get(i) != Some(&b'.') {
        return Err(bad);
    }
    i += 1;
    let n = dec_run(s, i);
    let frac = &s[i..i + n];
    i += n;
    if n == 0 || s.get(i) != Some(&b':') {
        return Err(bad);
    }
    i += 1;
    let time = parse_time(sec, frac).ok_or(WarningKind::BadNumber)?;
    let j = skip_spaces(s, i);
    // perf ends the time with `: ` unless nothing follows (no event field, no ip).
    if j == i && j < s.len() {
        return Err(bad);
    }
    i = j;
    let mut period = None;
    let period_start = i;
    let n = dec_run(s, i);
    if n > 0 && s.get(i + n) == Some(&b' ') {
        period = Some(parse_dec(&s[i..i + n]).ok_or(WarningKind::BadNumber)?);
        i = skip_spaces(s, i + n);
    }
    let name_start = i;
    while i < s.len() && is_event_name_byte(s[i]) {
        i += 1;
    }
    // No `event:` (perf script without the `event` field): what follows is the
    // sample's own location, or a branch's `from => to`.
    let no_event = |at: usize, period: Option<u64>| {
        let rest = &s[at..];
        let branch = memchr::memmem::find(rest, b" => ").is_some();
        Header {
            thread,
            time,
            period,
            class: if branch {
                EventClass::Branches
            } else {
                EventClass::Sample
            },
            comm: prefix.comm,
            no_event: true,
            rest,
        }
    };
    // Only an ip or a branch can take the event's place; anything else stays an error.
    let headless = |at: usize| {
        let h = hex_run(s, at);
        s[at..].iter().all(|&b| is_ws(b))
            || (h > 0 && matches!(s.get(at + h), None | Some(b' ')))
            || memchr::memmem::find(&s[at..], b" => ").is_some()
    };
    if i == name_start {
        if headless(name_start) {
            return Ok(no_event(name_start, period));
        }
        // A decimal-looking ip was taken for a period.
        if period.is_some() && headless(period_start) {
            return Ok(no_event(period_start, None));
        }
        return Err(bad);
    }
    let name = &s[name_start..i];
    // `/config/` then `/selector`, e.g. `branch-misses/period=50/u:`.
    if s.get(i) == Some(&b'/') {
        i += 1;
        while i < s.len() && !matches!(s[i], b'/' | b' ' | b':') {
            i += 1;
        }
        if s.get(i) == Some(&b'/') {
            i += 1;
            while i < s.len() && s[i].is_ascii_alphabetic() {
                i += 1;
            }
        }
    }
    if s.get(i) != Some(&b':') {
        if headless(name_start) {
            return Ok(no_event(name_start, period));
        }
        // A decimal-looking ip was taken for a period.
        if period.is_some() && headless(period_start) {
            return Ok(no_event(period_start, None));
        }
        return Err(bad);
    }
    i += 1;
    // Further `token:` parts glued to the colon: a selector (`branches:uH:`), a
    // tracepoint or probe name (`probe_prog:leaf_2:`), a breakpoint (`mem:0x4005d6:x:`).
    // perf puts a space before the event's own fields, so a token stops at one.
    loop {
        let mut j = i;
        while j < s.len() && s[j] != b' ' && s[j] != b'\t' {
            j += 1;
        }
        if j > i && s[j - 1] == b':' {
            i = j;
        } else {
            break;
        }
    }
    let class = match classify(name) {
        EventClass::Sample if s[name_start..i].starts_with(b"sched:sched_switch:") => {
            EventClass::SwitchOut
        }
        c => c,
    };
    Ok(Header {
        thread,
        time,
        period,
        class,
        comm: prefix.comm,
        no_event: false,
        rest: &s[i..],
    })
}

/// Scratch space reused across lines so symbol parsing does not allocate.
#[derive(Default, Debug)]
pub(crate) struct Scratch {
    text: String,
    cache: LocationCache,
    /// Whether symbol texts without `+0xOFF (dso)` are names (`perf script -F` without
    /// `symoff` or `dso`) rather than unknown, as magic-trace has them.
    pub partial: bool,
}

/// Entries in the [`LocationCache`]; a power of two.
const CACHE_SLOTS: usize = 4096;
/// Longer symbol texts bypass the cache, which bounds its memory.
const CACHE_MAX_KEY: usize = 256;

/// A fixed-size, direct-mapped cache from (ip, symbol text) to the parsed location.
///
/// The same few thousand call sites dominate a trace, and a hit skips splitting the
/// text, UTF-8 validation and two string-table lookups. Memory stays constant: at most
/// [`CACHE_SLOTS`] keys of at most [`CACHE_MAX_KEY`] bytes.
#[derive(Debug, Default)]
struct LocationCache {
    slots: Vec<CacheSlot>,
    /// Slots filled under another generation are stale; bumping it empties the cache
    /// in O(1) when the string table may have been replaced.
    generation: u32,
}

#[derive(Debug, Default)]
struct CacheSlot {
    key: Vec<u8>,
    generation: u32,
    location: Option<Location>,
}

impl Scratch {
    /// Forgets every cached location (their symbols may not be in the table any more).
    pub(crate) fn invalidate(&mut self) {
        let c = &mut self.cache;
        c.generation = c.generation.wrapping_add(1);
        if c.generation == 0 {
            c.slots.iter_mut().for_each(|s| s.location = None);
        }
    }
}

/// A fast, non-cryptographic hash of the key (FxHash-style, 8 bytes at a time).
#[inline]
fn hash_key(ip: u64, text: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = ip.wrapping_mul(K);
    let mut chunks = text.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    for &b in chunks.remainder() {
        h = (h.rotate_left(5) ^ b as u64).wrapping_mul(K);
    }
    h ^ (h >> 29)
}

impl LocationCache {
    #[inline]
    fn slot(&mut self, ip: u64, text: &[u8]) -> Option<&mut CacheSlot> {
        if text.len() > CACHE_MAX_KEY {
            return None;
        }
        if self.slots.is_empty() {
            self.slots.resize_with(CACHE_SLOTS, CacheSlot::default);
        }
        let i = hash_key(ip, text) as usize & (CACHE_SLOTS - 1);
        self.slots.get_mut(i)
    }
}

/// Splits `sym+0xOFF (dso)` as magic-trace's `^(.*)\+(0x[0-9a-f]+)\s+\((.*)\)$` does:
/// the name is the longest prefix that leaves a valid `+0x… (…)` suffix.
fn split_symbol(s: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let n = s.len();
    if n < 6 || s[n - 1] != b')' {
        return None;
    }
    let mut end = n;
    while let Some(p) = memchr::memrchr(b'+', &s[..end]) {
        end = p;
        if s.get(p + 1) != Some(&b'0') || s.get(p + 2) != Some(&b'x') {
            continue;
        }
        let h = hex_run(s, p + 3);
        if h == 0 {
            continue;
        }
        let mut k = p + 3 + h;
        let ws = k;
        while k < n && is_ws(s[k]) {
            k += 1;
        }
        if k == ws || k + 2 > n || s[k] != b'(' {
            continue;
        }
        return Some((&s[..p], &s[p + 3..p + 3 + h], &s[k + 1..n - 1]));
    }
    None
}

/// Resolves the symbol text perf printed for address `ip` into a [`Location`].
#[inline]
pub(crate) fn parse_location(
    ip: u64,
    s: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Location {
    let loc = parse_location_cached(ip, s, strings, scratch);
    if scratch.partial && loc.symbol == Symbol::Unknown {
        return parse_partial_symbol(ip, s, strings, &mut scratch.text);
    }
    loc
}

#[inline]
fn parse_location_cached(
    ip: u64,
    s: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Location {
    let generation = scratch.cache.generation;
    let Some(slot) = scratch.cache.slot(ip, s) else {
        return parse_location_uncached(ip, s, strings, &mut scratch.text);
    };
    if let Some(loc) = slot.location {
        if loc.ip == ip && slot.generation == generation && slot.key == s {
            return loc;
        }
    }
    let loc = parse_location_uncached(ip, s, strings, &mut scratch.text);
    slot.key.clear();
    slot.key.extend_from_slice(s);
    slot.generation = generation;
    slot.location = Some(loc);
    loc
}

fn parse_location_uncached(
    ip: u64,
    s: &[u8],
    strings: &mut StringTable,
    text: &mut String,
) -> Location {
    if let Some((name, off, dso)) = split_symbol(s) {
        let name = strings.intern_bytes(name);
        let dso = strings.intern_bytes(dso);
        return Location {
            ip,
            symbol: Symbol::FromPerf(name),
            offset: parse_hex_trunc63(off),
            dso: Some(dso),
        };
    }
    // `^\[unknown\]\s+\((.*)\)`: not anchored at the end, so the DSO runs to the last `)`.
    if let Some(after) = s.strip_prefix(b"[unknown]") {
        let k = after.iter().take_while(|&&b| is_ws(b)).count();
        if k > 0 && after.get(k) == Some(&b'(') {
            let inner = &after[k + 1..];
            if let Some(close) = memchr::memrchr(b')', inner) {
                let dso_bytes = &inner[..close];
                let dso = strings.intern_bytes(dso_bytes);
                text.clear();
                text.push_str("[unknown @ ");
                write_ocaml_int64_hex(text, ip);
                text.push_str(" (");
                text.push_str(&String::from_utf8_lossy(dso_bytes));
                text.push_str(")]");
                let name = strings.intern(text);
                return Location {
                    ip,
                    symbol: Symbol::FromPerf(name),
                    offset: 0,
                    dso: Some(dso),
                };
            }
        }
    }
    Location::new(ip, Symbol::Unknown, 0)
}

/// The symbol text of `perf script -F` without `symoff` or `dso`: `sym (dso)`,
/// `sym+0xOFF` or `sym` alone (the offset is then unknown and taken as 0).
fn parse_partial_symbol(
    ip: u64,
    s: &[u8],
    strings: &mut StringTable,
    text: &mut String,
) -> Location {
    let s = trim_end(s);
    let mut body = s;
    let mut dso = None;
    if s.last() == Some(&b')') {
        if let Some(p) = memchr::memmem::rfind(s, b" (") {
            body = trim_end(&s[..p]);
            dso = Some(&s[p + 2..s.len() - 1]);
        }
    }
    let mut offset = 0;
    if let Some(p) = memchr::memmem::rfind(body, b"+0x") {
        let h = hex_run(body, p + 3);
        if h > 0 && p + 3 + h == body.len() {
            offset = parse_hex_trunc63(&body[p + 3..]);
            body = &body[..p];
        }
    }
    if body.is_empty() || body.iter().all(|&b| is_ws(b)) {
        return Location::new(ip, Symbol::Unknown, 0);
    }
    let dso_sym = dso.map(|d| strings.intern_bytes(d));
    let name = if body == b"[unknown]" {
        text.clear();
        text.push_str("[unknown @ ");
        write_ocaml_int64_hex(text, ip);
        if let Some(d) = dso {
            text.push_str(" (");
            text.push_str(&String::from_utf8_lossy(d));
            text.push(')');
        }
        text.push(']');
        strings.intern(text)
    } else {
        strings.intern_bytes(body)
    };
    Location {
        ip,
        symbol: Symbol::FromPerf(name),
        offset,
        dso: dso_sym,
    }
}

/// A parsed `branches` remainder.
#[derive(Debug)]
pub(crate) struct Branch {
    pub start: bool,
    pub end: bool,
    pub kind: Option<Kind>,
    pub in_transaction: bool,
    /// The flags held a word this parser does not know; the event is kept with no kind.
    pub unknown_flags: bool,
    pub src: Location,
    pub dst: Location,
}

/// Branch kinds perf prints (`sample_flags` in perf's builtin-script.c). `None` marks
/// documented kinds the event model has no variant for.
const KIND_WORDS: &[(&[u8], Option<Kind>)] = &[
    (b"call", Some(Kind::Call)),
    (b"return", Some(Kind::Return)),
    (b"jcc", Some(Kind::Jump)),
    (b"jmp", Some(Kind::Jump)),
    (b"syscall", Some(Kind::Syscall)),
    (b"sysret", Some(Kind::Sysret)),
    (b"hw int", Some(Kind::HardwareInterrupt)),
    (b"iret", Some(Kind::Iret)),
    (b"int", Some(Kind::Interrupt)),
    (b"async", Some(Kind::Async)),
    (b"tx abrt", Some(Kind::TxAbort)),
    (b"vmentry", None),
    (b"vmexit", None),
    (b"br miss", None),
];

/// True when `s[i..]` starts with `word` followed by a space or the end.
#[inline]
fn word_at(s: &[u8], i: usize, word: &[u8]) -> bool {
    s[i..].starts_with(word) && matches!(s.get(i + word.len()), None | Some(b' '))
}

/// Finds the `" => +HEX "` that magic-trace's greedy `(.*) => +([0-9a-f]+) (.*)$` picks:
/// the rightmost one at or after `from`. Returns (position of the space before `=>`,
/// start of the hex, end of the hex).
fn find_arrow(s: &[u8], from: usize) -> Option<(usize, usize, usize)> {
    let mut end = s.len();
    while end > from {
        let gt = memchr::memrchr(b'>', &s[from..end])? + from;
        end = gt;
        if gt < from + 2 || s[gt - 1] != b'=' || s[gt - 2] != b' ' {
            continue;
        }
        let hex_start = skip_spaces(s, gt + 1);
        if hex_start == gt + 1 {
            continue;
        }
        let h = hex_run(s, hex_start);
        if h == 0 || s.get(hex_start + h) != Some(&b' ') {
            continue;
        }
        return Some((gt - 2, hex_start, hex_start + h));
    }
    None
}

/// Parses the remainder of a `branches` header:
/// `FLAGS [(x)] SRCIP SRCSYM => DSTIP DSTSYM`.
pub(crate) fn parse_branch(
    s: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Result<Branch, WarningKind> {
    let bad = WarningKind::MalformedBranch;
    let mut i = skip_spaces(s, 0);
    let mut start = false;
    let mut end = false;
    let mut kind = None;
    let mut in_transaction = false;
    let mut unknown_flags = false;
    if word_at(s, i, b"tr strt") {
        start = true;
        i = skip_spaces(s, i + 7);
    }
    if word_at(s, i, b"tr end") {
        end = true;
        i = skip_spaces(s, i + 6);
    }
    for &(word, k) in KIND_WORDS {
        if word_at(s, i, word) {
            // magic-trace drops the `jmp` of `tr strt jmp` and leaves the kind empty.
            kind = if start && word == b"jmp" { None } else { k };
            i = skip_spaces(s, i + word.len());
            break;
        }
    }
    // Aux flags like `(x)` (perf 6 may print `(x)`, `(D)`, `(t)` or combinations), and
    // any flag words we do not know, until the source address.
    loop {
        if i >= s.len() {
            return Err(bad);
        }
        let tok_end = memchr::memchr(b' ', &s[i..]).map_or(s.len(), |p| p + i);
        let tok = &s[i..tok_end];
        if tok_end < s.len() && hex_run(s, i) == tok.len() {
            break;
        }
        if tok.len() >= 2 && tok[0] == b'(' && tok[tok.len() - 1] == b')' {
            in_transaction |= tok.contains(&b'x');
        } else {
            unknown_flags = true;
        }
        i = skip_spaces(s, tok_end);
    }
    if unknown_flags {
        kind = None;
    }
    let src_hex_end = i + hex_run(s, i);
    let src_ip = parse_hex(&s[i..src_hex_end]).ok_or(bad)?;
    // The regex needs `HEX (.*) => `: the arrow's space comes after the source's own.
    let (arrow, dst_start, dst_end) = find_arrow(s, src_hex_end + 1).ok_or(bad)?;
    let src_sym = &s[src_hex_end + 1..arrow];
    let dst_ip = parse_hex(&s[dst_start..dst_end]).ok_or(bad)?;
    let dst_sym = &s[dst_end + 1..];
    let src = parse_location(src_ip, src_sym, strings, scratch);
    let dst = parse_location(dst_ip, dst_sym, strings, scratch);
    Ok(Branch {
        start,
        end,
        kind,
        in_transaction,
        unknown_flags,
        src,
        dst,
    })
}

/// Parses a callchain line `\t *IP SYM` (magic-trace: `^\t *([0-9a-f]+) (.*)$`).
pub(crate) fn parse_frame(
    line: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Result<Location, WarningKind> {
    let bad = WarningKind::MalformedFrame;
    let s = line.strip_prefix(b"\t").ok_or(bad)?;
    let i = skip_spaces(s, 0);
    let h = hex_run(s, i);
    if h == 0 || s.get(i + h) != Some(&b' ') {
        return Err(bad);
    }
    let ip = parse_hex(&s[i..i + h]).ok_or(bad)?;
    Ok(parse_location(ip, &s[i + h + 1..], strings, scratch))
}

/// A callchain line of an address alone (`perf script` without `sym`): `\t *IP`.
pub(crate) fn parse_bare_frame(line: &[u8]) -> Option<Location> {
    let s = line.strip_prefix(b"\t")?;
    let i = skip_spaces(s, 0);
    let h = hex_run(s, i);
    if h == 0 || !s[i + h..].iter().all(|&b| is_ws(b)) {
        return None;
    }
    Some(Location::new(parse_hex(&s[i..i + h])?, Symbol::Unknown, 0))
}

/// The location on a sample header's own line: `ADDR IP SYM` (magic-trace's
/// `^ *([0-9]+) +([0-9a-f]+) (.*)$`), or `IP SYM` when perf printed no `addr` field.
pub(crate) fn parse_inline_location(
    s: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Option<Location> {
    let i = skip_spaces(s, 0);
    let d = dec_run(s, i);
    if d > 0 && s.get(i + d) == Some(&b' ') {
        let j = skip_spaces(s, i + d);
        let h = hex_run(s, j);
        if h > 0 && s.get(j + h) == Some(&b' ') {
            let ip = parse_hex(&s[j..j + h])?;
            return Some(parse_location(ip, &s[j + h + 1..], strings, scratch));
        }
    }
    let h = hex_run(s, i);
    if h > 0 && s.get(i + h) == Some(&b' ') {
        let ip = parse_hex(&s[i..i + h])?;
        return Some(parse_location(ip, &s[i + h + 1..], strings, scratch));
    }
    // An address alone: perf script ran without `sym`.
    if h > 0 && s[i + h..].iter().all(|&b| is_ws(b)) {
        return Some(Location::new(parse_hex(&s[i..i + h])?, Symbol::Unknown, 0));
    }
    None
}

/// The frequency in a `cbr` remainder: `[flags] cbr: N freq: MHZ MHz …`.
pub(crate) fn parse_cbr(s: &[u8]) -> Result<u32, WarningKind> {
    let bad = WarningKind::MalformedCbr;
    let mut from = 0;
    let p = loop {
        let p = memchr::memmem::find(&s[from..], b"cbr:").ok_or(bad)? + from;
        if p > 0 && s[p - 1] == b' ' {
            break p;
        }
        from = p + 4;
    };
    let mut i = skip_spaces(s, p + 4);
    let n = dec_run(s, i);
    if n == 0 || i == p + 4 {
        return Err(bad);
    }
    i = skip_spaces(s, i + n);
    if !s[i..].starts_with(b"freq:") {
        return Err(bad);
    }
    let j = skip_spaces(s, i + 5);
    let n = dec_run(s, j);
    if n == 0 || j == i + 5 || !s[j + n..].starts_with(b" MHz") {
        return Err(bad);
    }
    let freq = parse_dec(&s[j..j + n]).ok_or(WarningKind::BadNumber)?;
    u32::try_from(freq).map_err(|_| WarningKind::BadNumber)
}

/// A `ptwrite` remainder: `[flags] IP: N payload: 0xHEX ASCII ADDR IP SYM`.
pub(crate) fn parse_ptwrite(
    s: &[u8],
    strings: &mut StringTable,
    scratch: &mut Scratch,
) -> Result<(u64, Location), WarningKind> {
    let bad = WarningKind::MalformedPtwrite;
    let p = memchr::memmem::find(s, b"payload:").ok_or(bad)?;
    if !s[..p].windows(3).any(|w| w == b"IP:") {
        return Err(bad);
    }
    let i = skip_spaces(s, p + 8);
    if i == p + 8 || !s[i..].starts_with(b"0x") {
        return Err(bad);
    }
    let h = hex_run(s, i + 2);
    let payload_end = i + 2 + h;
    let data = parse_hex(&s[i + 2..payload_end]).ok_or(bad)?;
    if s.get(payload_end) != Some(&b' ') {
        return Err(bad);
    }
    // Greedy `(.*) ([0-9]+) +([0-9a-f]+) (.*)$`: the rightmost ` DEC +HEX ` wins.
    let mut end = s.len();
    while let Some(r) = memchr::memrchr(b' ', &s[payload_end + 1..end]) {
        let r = r + payload_end + 1;
        end = r;
        let d = dec_run(s, r + 1);
        if d == 0 || s.get(r + 1 + d) != Some(&b' ') {
            continue;
        }
        let j = skip_spaces(s, r + 1 + d);
        let h = hex_run(s, j);
        if h == 0 || s.get(j + h) != Some(&b' ') {
            continue;
        }
        let ip = parse_hex(&s[j..j + h]).ok_or(bad)?;
        return Ok((data, parse_location(ip, &s[j + h + 1..], strings, scratch)));
    }
    Err(bad)
}

/// A parsed ` instruction trace error …` line.
#[derive(Debug)]
pub(crate) struct TraceError<'a> {
    pub thread: Thread,
    pub time: Option<u64>,
    pub ip: Option<u64>,
    pub message: &'a [u8],
    /// A `key value` pair this parser does not know was skipped.
    pub unknown_key: bool,
}

/// True for the lines perf prints for decoder errors (`--itrace=e`).
#[inline]
pub(crate) fn is_trace_error(line: &[u8]) -> bool {
    line[skip_spaces(line, 0)..].starts_with(b"instruction trace error")
}

fn next_token(s: &[u8], i: usize) -> (&[u8], usize) {
    let i = skip_spaces(s, i);
    let e = memchr::memchr(b' ', &s[i..]).map_or(s.len(), |p| p + i);
    (&s[i..e], e)
}

/// Parses ` instruction trace error type N [time S.NNN] [machine_pid P vcpu V] cpu C pid P
/// tid T ip 0xIP|0 code N: MESSAGE`. Keys may come in any order; unknown keys are
/// skipped with their value so a newer perf's additions do not lose the error.
pub(crate) fn parse_trace_error(line: &[u8]) -> Result<TraceError<'_>, WarningKind> {
    let bad = WarningKind::MalformedTraceError;
    let s = line;
    let mut i = skip_spaces(s, 0) + b"instruction trace error".len();
    let mut err = TraceError {
        thread: Thread::default(),
        time: None,
        ip: None,
        message: b"",
        unknown_key: false,
    };
    loop {
        let (key, e) = next_token(s, i);
        if key.is_empty() {
            return Err(bad);
        }
        i = e;
        if key == b"code" {
            let (val, e) = next_token(s, i);
            let num = val.strip_suffix(b":").ok_or(bad)?;
            if dec_run(num, 0) != num.len() || num.is_empty() {
                return Err(bad);
            }
            // `code N: (.*)$` needs the space after the colon.
            if e >= s.len() {
                return Err(bad);
            }
            err.message = &s[e + 1..];
            return Ok(err);
        }
        let (val, e) = next_token(s, i);
        if val.is_empty() {
            return Err(bad);
        }
        i = e;
        match key {
            b"type" | b"cpu" | b"vcpu" | b"machine_pid" => {
                let v = val.strip_prefix(b"-").unwrap_or(val);
                if v.is_empty() || dec_run(v, 0) != v.len() {
                    return Err(bad);
                }
            }
            b"pid" => err.thread.pid = parse_id(val).ok_or(bad)?,
            b"tid" => err.thread.tid = parse_id(val).ok_or(bad)?,
            b"time" => {
                err.time = match memchr::memchr(b'.', val) {
                    Some(d) if d > 0 && d + 1 < val.len() => {
                        Some(parse_time(&val[..d], &val[d + 1..]).ok_or(bad)?)
                    }
                    // perf prints a bare `time 0` when it has no timestamp.
                    None if val == b"0" => None,
                    _ => return Err(bad),
                };
            }
            b"ip" => {
                err.ip = if val == b"0" {
                    None
                } else {
                    let hex = val
                        .strip_prefix(b"0x")
                        .or_else(|| val.strip_prefix(b"0X"))
                        .ok_or(bad)?;
                    let mut v = 0u64;
                    if hex.is_empty() || hex.len() > 16 {
                        return Err(bad);
                    }
                    for &b in hex {
                        let d = (b as char).to_digit(16).ok_or(bad)?;
                        v = (v << 4) | d as u64;
                    }
                    Some(v)
                };
            }
            _ => err.unknown_key = true,
        }
    }
}

/// A thread's name or parentage, from a side-band line `perf script --show-task-events`
/// prints among the samples.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TaskRecord<'a> {
    /// `PERF_RECORD_COMM[ exec]: NAME:PID/TID`.
    Comm {
        thread: Thread,
        name: &'a [u8],
        exec: bool,
    },
    /// `PERF_RECORD_FORK(PID:TID):(PPID:PTID)`: the first pair is the new thread.
    Fork { thread: Thread, parent: Thread },
    /// `PERF_RECORD_SWITCH OUT[ preempt]` / `PERF_RECORD_SWITCH IN` (or `SWITCH_CPU_WIDE`,
    /// followed by the other task): the header's thread left or entered the CPU.
    Switch {
        thread: Thread,
        out: bool,
        preempt: bool,
    },
    /// Any other `PERF_RECORD_*` line (`EXIT`, `MMAP2`, …): nothing to show.
    Other,
}

/// The time and record of a side-band line `PID/TID TIME: PERF_RECORD_…`, or `None` if
/// the line is not one. The header's pid/tid are used only for switches, which name no
/// thread themselves: perf prints `0/0` for the COMMs it synthesizes when recording
/// starts, and those records' own fields are exact.
pub(crate) fn parse_task_line(line: &[u8]) -> Option<Result<(u64, TaskRecord<'_>), WarningKind>> {
    const TAG: &[u8] = b": PERF_RECORD_";
    let at = line.windows(TAG.len()).position(|w| w == TAG)?;
    let before = &line[..at];
    let time_start = before.iter().rposition(|&b| is_ws(b)).map_or(0, |p| p + 1);
    let Some((sec, frac)) = split_once(&before[time_start..], b'.') else {
        return Some(Err(WarningKind::MalformedTaskEvent));
    };
    let Some(time) = parse_time(sec, frac) else {
        return Some(Err(WarningKind::BadNumber));
    };
    let body = &line[at + TAG.len()..];
    let record = if let Some(rest) = body.strip_prefix(b"COMM") {
        let (exec, rest) = match rest.strip_prefix(b" exec: ") {
            Some(r) => (true, r),
            None => match rest.strip_prefix(b": ") {
                Some(r) => (false, r),
                None => return Some(Err(WarningKind::MalformedTaskEvent)),
            },
        };
        let rest = trim_end(rest);
        // The name may itself hold `:` and spaces; the ids follow the last colon.
        let Some(colon) = rest.iter().rposition(|&b| b == b':') else {
            return Some(Err(WarningKind::MalformedTaskEvent));
        };
        let Some(thread) = parse_pair(&rest[colon + 1..], b'/') else {
            return Some(Err(WarningKind::MalformedTaskEvent));
        };
        TaskRecord::Comm {
            thread,
            name: &rest[..colon],
            exec,
        }
    } else if let Some(rest) = body.strip_prefix(b"FORK(") {
        let rest = trim_end(rest);
        let parsed = split_once(rest, b')').and_then(|(child, rest)| {
            let parent = rest.strip_prefix(b":(")?.strip_suffix(b")")?;
            Some((parse_pair(child, b':')?, parse_pair(parent, b':')?))
        });
        match parsed {
            Some((thread, parent)) => TaskRecord::Fork { thread, parent },
            None => return Some(Err(WarningKind::MalformedTaskEvent)),
        }
    } else if let Some(rest) = body.strip_prefix(b"SWITCH") {
        let rest = rest.strip_prefix(b"_CPU_WIDE").unwrap_or(rest);
        let mut words = rest.split(|&b| is_ws(b)).filter(|w| !w.is_empty());
        let out = match words.next() {
            Some(b"OUT") => true,
            Some(b"IN") => false,
            _ => return Some(Err(WarningKind::MalformedTaskEvent)),
        };
        let preempt = out && words.next() == Some(&b"preempt"[..]);
        let Some(thread) = header_thread(&before[..time_start]) else {
            return Some(Err(WarningKind::MalformedTaskEvent));
        };
        TaskRecord::Switch {
            thread,
            out,
            preempt,
        }
    } else {
        TaskRecord::Other
    };
    Some(Ok((time, record)))
}

/// The thread of a side-band line's header (what precedes its time): its last
/// `PID/TID` or bare `TID` word, past a `[CPU]` one.
fn header_thread(header: &[u8]) -> Option<Thread> {
    let word = header
        .split(|&b| is_ws(b))
        .rfind(|w| !w.is_empty() && !w.starts_with(b"["))?;
    match parse_pair(word, b'/') {
        Some(t) => Some(t),
        None => Some(Thread {
            pid: None,
            tid: parse_id(word)?,
        }),
    }
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == sep)?;
    Some((&s[..i], &s[i + 1..]))
}

fn trim_end(s: &[u8]) -> &[u8] {
    let end = s.iter().rposition(|&b| !is_ws(b)).map_or(0, |p| p + 1);
    &s[..end]
}

/// `PID<sep>TID` as a [`Thread`] (`0` or negative = unknown).
fn parse_pair(s: &[u8], sep: u8) -> Option<Thread> {
    let (pid, tid) = split_once(s, sep)?;
    Some(Thread {
        pid: parse_id(pid)?,
        tid: parse_id(tid)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_and_breakpoint_event_names_are_headers() {
        for (line, rest) in [
            (
                &b"  1234/1234 10.000000001:          1 probe_prog:leaf_2:       55d5c0a01139 leaf_2+0x0 (/tmp/prog)"[..],
                &b"       55d5c0a01139 leaf_2+0x0 (/tmp/prog)"[..],
            ),
            (
                b"  1234/1234 10.000000001:          1 mem:0x55d5c0a01139:x:       55d5c0a01139 leaf+0x0 (/tmp/prog)",
                b"       55d5c0a01139 leaf+0x0 (/tmp/prog)",
            ),
            (
                b"  1234/1234 10.000000001:          1 branches:uH:   call  1 a+0x0 (x) => 2 b+0x0 (x)",
                b"   call  1 a+0x0 (x) => 2 b+0x0 (x)",
            ),
            (b"1/1 1.0: 250000 cpu-clock:u: ", b" "),
            (b"1/1 1.0: 250000 cpu-clock: ", b" "),
        ] {
            let h = parse_header(line).expect("header");
            assert_eq!(h.rest, rest, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn time_fraction_is_padded_and_truncated() {
        assert_eq!(parse_time(b"1", b"5"), Some(1_500_000_000));
        assert_eq!(parse_time(b"1", b"000000001999"), Some(1_000_000_001));
        assert_eq!(parse_time(b"99999999999999", b"0"), None);
        assert_eq!(parse_time(b"1", b"12x"), None);
    }

    #[test]
    fn symbol_split_is_greedy_like_the_regex() {
        let s = |x: &[u8]| split_symbol(x).map(|(a, b, c)| (a.to_vec(), b.to_vec(), c.to_vec()));
        assert_eq!(
            s(b"x => +0xb (foo.so)"),
            Some((b"x => ".to_vec(), b"b".to_vec(), b"foo.so".to_vec()))
        );
        assert_eq!(
            s(b"foo+0x10 (a+0x5 (b))"),
            Some((b"foo+0x10 (a".to_vec(), b"5".to_vec(), b"b)".to_vec()))
        );
        assert_eq!(
            s(b"foo+0x10 ()"),
            Some((b"foo".to_vec(), b"10".to_vec(), vec![]))
        );
        assert_eq!(s(b"foo+0x (x)"), None);
        assert_eq!(s(b"foo+0x1(x)"), None);
        assert_eq!(s(b"foo+0x1 (x"), None);
        assert_eq!(s(b"+0x1 )"), None);
    }

    #[test]
    fn garbage_offset_keeps_low_63_bits() {
        assert_eq!(
            parse_hex_trunc63(b"ffffffffff22f000"),
            0x7fff_ffff_ff22_f000
        );
        assert_eq!(
            parse_hex_trunc63(b"1ffffffffffffffff0"),
            0x7fff_ffff_ffff_fff0
        );
    }

    #[test]
    fn header_without_period_and_with_config() {
        let h = parse_header(b"1/2 3.4:   branches:uH:   call").unwrap();
        assert_eq!(h.period, None);
        assert_eq!(h.class, EventClass::Branches);
        assert_eq!(h.rest, b"   call");
        let h = parse_header(b" 1/2 3.4: 50 branch-misses/period=50/u: x").unwrap();
        assert_eq!(h.period, Some(50));
        assert_eq!(h.class, EventClass::Extra(ExtraEvent::BranchMisses));
        assert_eq!(h.rest, b" x");
        let h = parse_header(b"-1/-1 3.4: 1 cpu-clock: ").unwrap();
        assert_eq!(h.thread, Thread::default());
        assert_eq!(h.class, EventClass::Sample);
        assert!(parse_header(b"1/2 3.4:1 cycles:").is_err());
        assert!(parse_header(b"1/2 3: 1 cycles:").is_err());
        assert!(parse_header(b"x/2 3.1: 1 cycles:").is_err());
    }

    #[test]
    fn headers_of_perf_default_and_partial_field_sets() {
        // perf's default: comm (may hold spaces), tid alone, optional [cpu].
        let h = parse_header(b"Web Content 4242 [003]  10.000001:     250000 cpu-clock: ").unwrap();
        assert_eq!(h.comm, Some(&b"Web Content"[..]));
        assert_eq!(
            h.thread,
            Thread {
                pid: None,
                tid: Some(4242)
            }
        );
        assert_eq!((h.time, h.period), (10_000_001_000, Some(250000)));
        // No event field: a bare header, an inline ip, a branch.
        let h = parse_header(b"  12/13 1.5: ").unwrap();
        assert!(h.no_event && h.class == EventClass::Sample);
        let h = parse_header(b"gzip 13 1.5:  400620 main+0x20 (/bin/x)").unwrap();
        assert!(h.no_event && h.rest.starts_with(b"400620"));
        let h = parse_header(b"13 1.5:   call  7f00 a (x.so) =>  7f10 b (x.so)").unwrap();
        assert_eq!(h.class, EventClass::Branches);
        assert_eq!(
            parse_header(b"gzip 13 ").err(),
            Some(WarningKind::NoTimeField)
        );
        assert_eq!(
            parse_header(b"gzip  1.5: ").err(),
            Some(WarningKind::NoThreadField)
        );
    }

    #[test]
    fn cbr_forms() {
        assert_eq!(
            parse_cbr(b"   cbr: 47 freq: 4706 MHz (162%)   0 "),
            Ok(4706)
        );
        assert_eq!(
            parse_cbr(b"  syscall     cbr:  8 freq:  801 MHz ( 28%)"),
            Ok(801)
        );
        assert_eq!(parse_cbr(b" cbr: 47"), Err(WarningKind::MalformedCbr));
        assert_eq!(
            parse_cbr(b"xcbr: 1 freq: 2 MHz"),
            Err(WarningKind::MalformedCbr)
        );
    }

    #[test]
    fn trace_error_forms() {
        let e = parse_trace_error(
            b" instruction trace error type 1 time 0 machine_pid 3 vcpu 1 cpu 2 pid 5 tid 6 ip 0x10 code 7: Oops: x",
        )
        .unwrap();
        assert_eq!(e.time, None);
        assert_eq!(e.ip, Some(0x10));
        assert_eq!(e.thread.pid, Some(5));
        assert_eq!(e.message, b"Oops: x");
        assert!(!e.unknown_key);
        let e = parse_trace_error(
            b" instruction trace error type 1 cpu 2 pid -1 tid 0 new 9 ip 0 code 7: M",
        )
        .unwrap();
        assert!(e.unknown_key);
        assert_eq!(e.thread, Thread::default());
        assert_eq!(e.ip, None);
        assert!(
            parse_trace_error(b" instruction trace error type 1 cpu 2 pid 1 tid 1 ip 0").is_err()
        );
        assert!(parse_trace_error(
            b" instruction trace error type 1 cpu 2 pid 1 tid 1 ip 0x code 1: m"
        )
        .is_err());
    }

    #[test]
    fn task_lines() {
        let t = |pid, tid| Thread {
            pid: Some(pid),
            tid: Some(tid),
        };
        fn p(s: &str) -> Option<Result<(u64, TaskRecord<'_>), WarningKind>> {
            parse_task_line(s.as_bytes())
        }
        assert_eq!(
            p("    0/0         0.000000: PERF_RECORD_COMM: sh:32703/32703"),
            Some(Ok((
                0,
                TaskRecord::Comm {
                    thread: t(32703, 32703),
                    name: b"sh",
                    exec: false
                }
            )))
        );
        assert_eq!(
            p("32707/32707   711.103970: PERF_RECORD_COMM exec: prog:32707/32707\n"),
            Some(Ok((
                711_103_970_000,
                TaskRecord::Comm {
                    thread: t(32707, 32707),
                    name: b"prog",
                    exec: true
                }
            )))
        );
        // Names may hold colons and spaces.
        assert_eq!(
            p("1/2 1.5: PERF_RECORD_COMM: a: b:c:7/9"),
            Some(Ok((
                1_500_000_000,
                TaskRecord::Comm {
                    thread: t(7, 9),
                    name: b"a: b:c",
                    exec: false
                }
            )))
        );
        assert_eq!(
            p("  329/329     713.404788: PERF_RECORD_FORK(329:349):(329:329)"),
            Some(Ok((
                713_404_788_000,
                TaskRecord::Fork {
                    thread: t(329, 349),
                    parent: t(329, 329)
                }
            )))
        );
        assert_eq!(
            p("329/349 713.557647: PERF_RECORD_EXIT(329:349):(326:326)"),
            Some(Ok((713_557_647_000, TaskRecord::Other)))
        );
        assert_eq!(p("329/349 713.5: cpu-clock: 1234 f+0x1 (/x)"), None);
        // Switches (perf 6.1 pads `IN` with spaces) name their thread in the header.
        let switch = |thread, out, preempt| TaskRecord::Switch {
            thread,
            out,
            preempt,
        };
        assert_eq!(
            p("21692/21692  2832.673252844: PERF_RECORD_SWITCH OUT preempt"),
            Some(Ok((2_832_673_252_844, switch(t(21692, 21692), true, true))))
        );
        assert_eq!(
            p("21692/21693  2832.673268267: PERF_RECORD_SWITCH IN         \n"),
            Some(Ok((
                2_832_673_268_267,
                switch(t(21692, 21693), false, false)
            )))
        );
        assert_eq!(
            p("1/2 3.0: PERF_RECORD_SWITCH OUT        "),
            Some(Ok((3_000_000_000, switch(t(1, 2), true, false))))
        );
        assert_eq!(
            p("sl  7 [001] 3.0: PERF_RECORD_SWITCH_CPU_WIDE OUT preempt  next pid/tid:    15/15"),
            Some(Ok((
                3_000_000_000,
                switch(
                    Thread {
                        pid: None,
                        tid: Some(7)
                    },
                    true,
                    true
                )
            )))
        );
        for bad in [
            "1/1 2.0: PERF_RECORD_COMM: nocolon",
            "1/1 2.0: PERF_RECORD_COMM: x:1-1",
            "1/1 2.0: PERF_RECORD_COMMx",
            "1/1 2.0: PERF_RECORD_FORK(1:2)",
            "1/1 2.0: PERF_RECORD_FORK(1:2):(3)",
            "1/1 nope: PERF_RECORD_FORK(1:2):(3:4)",
            "1/1 2.0: PERF_RECORD_SWITCH SIDEWAYS",
            "x/y 2.0: PERF_RECORD_SWITCH IN",
        ] {
            assert!(matches!(p(bad), Some(Err(_))), "{bad}");
        }
    }
}
