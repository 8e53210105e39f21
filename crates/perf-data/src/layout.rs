//! The file header, checked against the file's size before `linux-perf-data` reads it:
//! the crate sizes allocations by counts and lengths taken from the file, so a damaged
//! header could otherwise ask for terabytes. A file cut short (its feature sections,
//! written last, missing) is read like perf reads it: events without their names.

use crate::cursor::word_at;
use crate::CutShort;
use std::io::{self, Read, Seek, SeekFrom};

/// perf's file header: magic, size, attr size, three sections, feature bitmap.
pub(crate) const HEADER_LEN: usize = 104;
/// A pipe-mode file's header: magic and size; attributes come as records.
pub(crate) const PIPE_HEADER_LEN: u64 = 16;
/// Where the `event_types` section (obsolete since perf 3.x) sits in the header.
const EVENT_TYPES_AT: usize = 56;
/// Where the 256-bit feature bitmap sits in the header.
pub(crate) const FEATURES_AT: usize = 72;
/// `PERF_ATTR_SIZE_VER0`: no perf ever wrote smaller attributes.
const MIN_ATTR_SIZE: u64 = 64;

/// A header word (`n` bytes at `at`), which the header holds.
fn word(head: &[u8], at: usize, n: usize, big: bool) -> u64 {
    word_at(head, at, n, big).unwrap_or(0)
}

/// A `(offset, size)` section of the header.
pub(crate) fn section(head: &[u8], at: usize, big: bool) -> (u64, u64) {
    (word(head, at, 8, big), word(head, at + 8, 8, big))
}

/// Checks that the header's sections lie inside `file` (`Err` says which does not), and
/// whether the records and the feature sections do too and their event descriptions are
/// sized within their section (`Ok(Some(_))`: how the file is cut short; read it without
/// its features).
pub(crate) fn check(file: &[u8], big: bool) -> Result<Option<CutShort>, String> {
    let head = &file[..HEADER_LEN];
    let len = file.len() as u64;
    let attr_size = word(head, 16, 8, big);
    if !(MIN_ATTR_SIZE..=4096).contains(&attr_size) {
        return Err(format!("attribute size {attr_size}"));
    }
    let inside = |(off, size): (u64, u64)| off.checked_add(size).is_some_and(|end| end <= len);
    if !inside(section(head, 24, big)) {
        return Err("its attribute section lies past the end of the file".into());
    }
    let (attr_off, attr_len) = section(head, 24, big);
    if attr_len < attr_size || attr_off < HEADER_LEN as u64 {
        return Err("no event attributes".into());
    }
    let (data_off, data_len) = section(head, 40, big);
    if !inside((data_off, data_len)) {
        // Cut short: perf itself then reads the attributes alone.
        return Ok(Some(CutShort::Records {
            promised: data_len,
            held: len.saturating_sub(data_off).min(data_len),
        }));
    }
    let features: u32 = (0..4)
        .map(|i| word(head, FEATURES_AT + 8 * i, 8, big).count_ones())
        .sum();
    let table_len = u64::from(features) * 16;
    let table_at = data_off + data_len;
    if !inside((table_at, table_len)) {
        // Cut short: perf itself then reads the attributes alone.
        return Ok(Some(CutShort::Features));
    }
    let table = &file[table_at as usize..(table_at + table_len) as usize];
    let sections: Vec<(u64, u64)> = table.chunks_exact(16).map(|s| section(s, 0, big)).collect();
    if !sections.iter().all(|&s| inside(s)) {
        return Ok(Some(CutShort::Features));
    }
    // The event descriptions are `HEADER_EVENT_DESC`, feature bit 12: its count and
    // attribute size must fit its section, else the crate reserves memory by them.
    const EVENT_DESC: usize = 12;
    let bit_set = |bit: usize| word(head, FEATURES_AT + 8 * (bit / 64), 8, big) >> (bit % 64) & 1;
    if bit_set(EVENT_DESC) == 1 {
        let index: u64 = (0..EVENT_DESC).map(bit_set).sum();
        let (off, size) = sections[index as usize];
        if !event_desc_fits(&file[off as usize..(off + size) as usize], big) {
            return Ok(Some(CutShort::Features));
        }
    }
    Ok(None)
}

/// Whether every count and length in a `HEADER_EVENT_DESC` section (`u32 nr`, `u32
/// attr_size`, then per event: the attribute, `u32 nr_ids`, a perf string, the ids)
/// stays inside the section.
fn event_desc_fits(d: &[u8], big: bool) -> bool {
    if d.len() < 8 {
        return false;
    }
    let nr = word(d, 0, 4, big);
    let attr_size = word(d, 4, 4, big) as usize;
    if attr_size < MIN_ATTR_SIZE as usize {
        return false;
    }
    let mut at = 8usize;
    for _ in 0..nr {
        // The attribute, then `nr_ids` and the string's length.
        let Some(fixed_end) = at.checked_add(attr_size + 8).filter(|&e| e <= d.len()) else {
            return false;
        };
        let nr_ids = word(d, at + attr_size, 4, big) as usize;
        let str_len = word(d, at + attr_size + 4, 4, big) as usize;
        let end = nr_ids
            .checked_mul(8)
            .and_then(|ids| ids.checked_add(str_len))
            .and_then(|n| n.checked_add(fixed_end));
        match end {
            Some(e) if e <= d.len() => at = e,
            _ => return false,
        }
    }
    true
}

/// The header as `linux-perf-data` is given it: the obsolete `event_types` section is
/// never read (its id lists are sized by the file), and features are dropped when they
/// cannot be trusted (or, with `keep_features`, only perf's own, bits 0-63, are kept:
/// simpleperf's, 128 on, would send the crate down paths these checks do not cover).
pub(crate) fn patched_head(file: &[u8], keep_features: bool, big: bool) -> [u8; HEADER_LEN] {
    let mut head = [0u8; HEADER_LEN];
    head.copy_from_slice(&file[..HEADER_LEN]);
    head[EVENT_TYPES_AT..EVENT_TYPES_AT + 16].fill(0);
    // The crate seeks to the data section's end (where the feature table is) before
    // anything else, adding its offset and size: a data section past the file's end
    // (a cut file, or a damaged header) is clipped to the file, so that sum neither
    // overflows nor lands anywhere.
    let len = file.len() as u64;
    let (off, size) = section(&head, 40, big);
    if off.checked_add(size).is_none_or(|end| end > len) {
        let off = off.min(len);
        let put = |v: u64| {
            if big {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        head[40..48].copy_from_slice(&put(off));
        head[48..56].copy_from_slice(&put(len - off));
    }
    if keep_features {
        head[FEATURES_AT + 8..HEADER_LEN].fill(0);
    } else {
        head[FEATURES_AT..HEADER_LEN].fill(0);
    }
    head
}

/// The `pmu mappings` feature: `u32 nr`, then `nr` × (`u32 type`, perf string). What
/// cannot be read is left out: the table only helps name events.
pub(crate) fn pmu_table(s: &[u8], big: bool) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Some(nr) = word_at(s, 0, 4, big) else {
        return out;
    };
    let mut at = 4;
    for _ in 0..nr {
        let (Some(ty), Some(n)) = (word_at(s, at, 4, big), word_at(s, at + 4, 4, big)) else {
            break;
        };
        at += 8;
        let Some(bytes) = at.checked_add(n as usize).and_then(|end| s.get(at..end)) else {
            break;
        };
        at += n as usize;
        let name = bytes.split(|&b| b == 0).next().unwrap_or_default();
        if let Ok(name) = std::str::from_utf8(name) {
            out.push((ty as u32, name.to_owned()));
        }
    }
    out
}

/// The file's bytes with its header replaced by a patched copy, for the crate's
/// `Read + Seek` interface (nothing is copied but the header).
pub(crate) struct Patched<'a> {
    pub(crate) head: [u8; HEADER_LEN],
    pub(crate) file: &'a [u8],
    pub(crate) pos: u64,
}

impl Read for Patched<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let pos = usize::try_from(self.pos).unwrap_or(usize::MAX);
        let from: &[u8] = if pos < HEADER_LEN {
            &self.head[pos..]
        } else {
            self.file.get(pos..).unwrap_or_default()
        };
        let n = from.len().min(buf.len());
        buf[..n].copy_from_slice(&from[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Patched<'_> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => (self.file.len() as u64).checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::pmu_table;

    #[test]
    fn the_pmu_table_reads_what_it_can() {
        let mut s = 2u32.to_le_bytes().to_vec();
        for (ty, name) in [(4u32, &b"cpu\0\0\0\0\0"[..]), (8, b"intel_pt")] {
            s.extend_from_slice(&ty.to_le_bytes());
            s.extend_from_slice(&(name.len() as u32).to_le_bytes());
            s.extend_from_slice(name);
        }
        let want = vec![(4, "cpu".to_string()), (8, "intel_pt".to_string())];
        assert_eq!(pmu_table(&s, false), want);
        // Cut anywhere: a prefix of the table, never a panic.
        for cut in 0..s.len() {
            let got = pmu_table(&s[..cut], false);
            assert_eq!(got[..], want[..got.len()]);
        }
    }
}
