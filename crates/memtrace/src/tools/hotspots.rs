//! `hotspots`: the functions allocating most, and the callers responsible, found
//! with a Misra–Gries heavy-hitters summary over (caller, allocating function) pairs.
//!
//! Output follows the reference tool; where it depended on hash-table iteration
//! order (ties), ties are broken by first appearance in the trace instead.

use std::io::Write;

use rustc_hash::{FxHashMap, FxHashSet};

use super::cfmt;
use crate::error::{Error, ErrorKind, Result};
use crate::reader::{EventKind, Reader, Source};

const K: usize = 10_000;

struct Counter {
    hits: i64,
    misses: i64,
}

/// Misra–Gries summary of at most `K` keys.
#[derive(Default)]
struct HeavyHitters {
    tbl: FxHashMap<(u32, u32), Counter>,
}

impl HeavyHitters {
    fn add(&mut self, key: (u32, u32)) {
        if let Some(c) = self.tbl.get_mut(&key) {
            c.hits = c.hits.saturating_add(1);
        } else if self.tbl.len() < K {
            self.tbl.insert(key, Counter { hits: 1, misses: 0 });
        } else {
            self.tbl.retain(|_, c| {
                c.misses += 1;
                c.hits > c.misses
            });
        }
    }
}

struct LocEntry {
    line: u32,
    start: u32,
    end: u32,
    func: u32,
    alloc_count: i64,
}

struct Func {
    name: Vec<u8>,
    filename: Vec<u8>,
    /// Most recently created first, as the reference keeps them.
    locs: Vec<usize>,
    total_count: i64,
}

#[derive(Default)]
struct Tables {
    entries: FxHashMap<u64, usize>,
    locs: Vec<LocEntry>,
    funcs: Vec<Func>,
    func_ids: FxHashMap<(Vec<u8>, Vec<u8>), u32>,
}

impl Tables {
    fn add_loc(&mut self, db: &crate::reader::LocationDb, bt: &[u64], i: usize) -> Result<usize> {
        if let Some(&e) = self.entries.get(&bt[i]) {
            return Ok(e);
        }
        // An empty slot is described by up to two of its callers' locations.
        let mut j = i;
        let mut discard = 2;
        let (filename, name, line, start, end) = loop {
            let locs = db
                .locations(bt[j])
                .ok_or(Error::Invalid(ErrorKind::UnknownLocationCode(bt[j])))?;
            match locs.last() {
                Some(l) => {
                    break (
                        db.string(l.filename).to_vec(),
                        db.string(l.defname).to_vec(),
                        l.line,
                        l.start_char,
                        l.end_char,
                    )
                }
                None if j > 0 && discard > 0 => {
                    j -= 1;
                    discard -= 1;
                }
                None => {
                    break (
                        b"??".to_vec(),
                        format!("#{:x}", bt[j] as i64).into_bytes(),
                        0,
                        0,
                        0,
                    )
                }
            }
        };
        let next = self.funcs.len() as u32;
        let func = *self
            .func_ids
            .entry((filename.clone(), name.clone()))
            .or_insert(next);
        if func == next {
            self.funcs.push(Func {
                name,
                filename,
                locs: Vec::new(),
                total_count: 0,
            });
        }
        let e = self.locs.len();
        self.locs.push(LocEntry {
            line,
            start,
            end,
            func,
            alloc_count: 0,
        });
        self.funcs[func as usize].locs.insert(0, e);
        self.entries.insert(bt[i], e);
        Ok(e)
    }

    fn direct(&self, f: u32) -> i64 {
        self.funcs[f as usize]
            .locs
            .iter()
            .fold(0i64, |acc, &e| acc.wrapping_add(self.locs[e].alloc_count))
    }

    fn total(&self, f: u32) -> i64 {
        self.funcs[f as usize]
            .total_count
            .wrapping_add(self.direct(f))
    }
}

fn print_bytes(n: f64) -> String {
    if n < 100.0 {
        format!("{} B", cfmt::f(n, 4, 0))
    } else if n < 100.0 * 1024.0 {
        format!("{} kB", cfmt::f(n / 1024.0, 4, 1))
    } else if n < 100.0 * 1024.0 * 1024.0 {
        format!("{} MB", cfmt::f(n / 1024.0 / 1024.0, 4, 1))
    } else if n < 100.0 * 1024.0 * 1024.0 * 1024.0 {
        format!("{} GB", cfmt::f(n / 1024.0 / 1024.0 / 1024.0, 4, 1))
    } else {
        format!(
            "{} TB",
            cfmt::f(n / 1024.0 / 1024.0 / 1024.0 / 1024.0, 4, 1)
        )
    }
}

/// Prints the allocation hot spots of a trace.
pub fn hotspots<S: Source>(reader: &mut Reader<S>, out: &mut dyn Write) -> Result<()> {
    let mut t = Tables::default();
    let mut hh = HeavyHitters::default();
    let mut first_seen: FxHashMap<(u32, u32), usize> = FxHashMap::default();
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut total_samples = 0i64;
    while let Some(ev) = reader.next_event()? {
        let EventKind::Alloc(a) = ev.kind else {
            continue;
        };
        let bt = a.backtrace;
        // The reference cannot handle empty backtraces; they carry no site.
        let Some(last) = bt.len().checked_sub(1) else {
            continue;
        };
        let allocpt = t.add_loc(ev.db, bt, last)?;
        t.locs[allocpt].alloc_count = t.locs[allocpt].alloc_count.wrapping_add(a.nsamples);
        let alloc_func = t.locs[allocpt].func;
        seen.clear();
        for i in (0..last).rev() {
            let e = t.add_loc(ev.db, bt, i)?;
            let f = t.locs[e].func;
            if seen.insert(f) {
                let func = &mut t.funcs[f as usize];
                func.total_count = func.total_count.wrapping_add(a.nsamples);
                let n = first_seen.len();
                first_seen.entry((f, alloc_func)).or_insert(n);
                hh.add((f, alloc_func));
            }
        }
        total_samples = total_samples.wrapping_add(a.nsamples);
    }
    let info = reader.info();
    let rate = info.sample_rate;
    let wordsize = 8.0;
    writeln!(
        out,
        "Trace for {} [{}]:\n   {} samples of {} allocations\n",
        String::from_utf8_lossy(&info.executable_name),
        info.pid as i64,
        total_samples,
        print_bytes(total_samples as f64 / rate * wordsize)
    )?;
    let total = total_samples as f64;
    let mut pairs: Vec<((u32, u32), i64)> = hh.tbl.iter().map(|(k, c)| (*k, c.hits)).collect();
    pairs.sort_by_key(|(k, _)| first_seen.get(k).copied().unwrap_or(usize::MAX));
    let mut hot: Vec<(u32, Vec<(u32, i64)>)> = Vec::new();
    for ((f, al), d1) in pairs {
        let alloc_prop = t.direct(al) as f64 / total;
        if alloc_prop <= 0.005 {
            continue;
        }
        let idx = match hot.iter().position(|(a, _)| *a == al) {
            Some(i) => i,
            None => {
                hot.push((al, Vec::new()));
                hot.len() - 1
            }
        };
        let pair_freq = d1 as f64;
        let fn_freq = t.total(f) as f64;
        if pair_freq / fn_freq > f64::max(0.10, alloc_prop * 1.2) && pair_freq / total > 0.005 {
            hot[idx].1.push((f, d1));
        }
    }
    hot.sort_by_key(|(al, _)| std::cmp::Reverse(t.direct(*al)));
    for (al, mut callers) in hot {
        let direct = t.direct(al);
        let func = &t.funcs[al as usize];
        let mut line = Vec::new();
        let _ = write!(
            line,
            "{} ({}%) at {} ({}:",
            print_bytes(direct as f64 / rate * wordsize),
            cfmt::f(100.0 * direct as f64 / total, 4, 1),
            String::from_utf8_lossy(&func.name),
            String::from_utf8_lossy(&func.filename)
        );
        let mut locs: Vec<&LocEntry> = func.locs.iter().map(|&e| &t.locs[e]).collect();
        locs.sort_by_key(|l| std::cmp::Reverse(l.alloc_count));
        for (printed, l) in locs.iter().filter(|l| l.alloc_count > 0).enumerate() {
            match printed {
                0 => {
                    let _ = write!(line, "{}:{}-{}", l.line, l.start, l.end);
                }
                1 | 2 => {
                    let _ = write!(line, ", {}:{}-{}", l.line, l.start, l.end);
                }
                3 => line.extend_from_slice(b"..."),
                _ => {}
            }
        }
        line.extend_from_slice(b")\n");
        callers.sort_by_key(|(_, freq)| std::cmp::Reverse(*freq));
        let mut first = true;
        for (caller, freq) in callers {
            let tc = t.total(caller) as f64;
            if tc / total > 0.005 {
                if first {
                    line.extend_from_slice(b"      including:\n");
                    first = false;
                }
                let _ = writeln!(
                    line,
                    "    {} via {} ({}% of this)",
                    print_bytes(freq as f64 / rate * wordsize),
                    String::from_utf8_lossy(&t.funcs[caller as usize].name),
                    cfmt::f(100.0 * freq as f64 / tc, 0, 0)
                );
            }
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    Ok(())
}
