//! `identify`: the trace's header and summary statistics.

use std::io::Write;

use rustc_hash::FxHashMap;

use super::cfmt;
use crate::error::Result;
use crate::reader::{AllocSource, EventKind, Reader, Source};

fn print_bytes(n: f64) -> String {
    let (v, unit) = if n < 1000.0 {
        return format!("{} B", cfmt::f(n, 3, 0));
    } else if n < 1000.0 * 1024.0 {
        (n / 1024.0, "kB")
    } else if n < 1000.0 * 1024.0 * 1024.0 {
        (n / 1024.0 / 1024.0, "MB")
    } else if n < 1000.0 * 1024.0 * 1024.0 * 1024.0 {
        (n / 1024.0 / 1024.0 / 1024.0, "GB")
    } else {
        (n / 1024.0 / 1024.0 / 1024.0 / 1024.0, "TB")
    };
    format!("{} {unit}", cfmt::f(v, 3, if v < 10.0 { 1 } else { 0 }))
}

/// Civil date of a day count since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `Www Mmm D HH:MM:SS YYYY UTC` of a time in µs since the epoch.
pub(crate) fn utc_date(us: i64) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // Unix.gmtime truncates the float seconds toward zero.
    let secs = (us as f64 * 1e-6) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{} {} {} {:02}:{:02}:{:02} {} UTC",
        DAYS[(days + 4).rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        d,
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        y
    )
}

/// Prints what the reference `identify` prints for the trace `name`.
pub fn identify<S: Source>(reader: Reader<S>, name: &str, out: &mut dyn Write) -> Result<()> {
    let mut reader = reader.parse_backtraces(false);
    let info = reader.info().clone();
    let size = reader.total_len().unwrap_or(0);
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    writeln!(out, "Trace file {name} ({})", print_bytes(size as f64))?;
    writeln!(out, "   of {}", lossy(&info.executable_name))?;
    writeln!(out, "   at {}", utc_date(info.start_time))?;
    writeln!(
        out,
        "   on host {} ({}-bit), pid {}, sample rate {}",
        lossy(&info.host_name),
        info.word_size,
        info.pid as i64,
        cfmt::e(info.sample_rate, 1)
    )?;
    writeln!(
        out,
        "   with OCaml GC params {}",
        lossy(&info.ocaml_runtime_params)
    )?;
    if let Some(c) = &info.context {
        writeln!(out, "   with context: {}", lossy(c))?;
    }
    writeln!(out, "Trace statistics:")?;
    let mut tmax = 0i64;
    let mut minor_live: FxHashMap<u64, i64> = FxHashMap::default();
    // Only multi-sample major objects need remembering: others count 1 when freed.
    let mut major_multi: FxHashMap<u64, i64> = FxHashMap::default();
    let (mut minor_alloc, mut minor_collect, mut promote) = (0i64, 0i64, 0i64);
    let (mut major_alloc, mut major_collect) = (0i64, 0i64);
    let (mut dist4, mut dist16, mut dist256, mut szmax) = (0i64, 0i64, 0i64, 0i64);
    while let Some(ev) = reader.next_event()? {
        tmax = ev.time;
        match ev.kind {
            EventKind::Alloc(a) => {
                let n = a.nsamples;
                if a.source != AllocSource::Minor {
                    major_alloc = major_alloc.wrapping_add(n);
                    if n > 1 {
                        major_multi.insert(a.obj_id, n);
                    }
                } else {
                    minor_alloc = minor_alloc.wrapping_add(n);
                    minor_live.insert(a.obj_id, n);
                }
                if a.length <= 4 {
                    dist4 = dist4.wrapping_add(n);
                }
                if a.length <= 16 {
                    dist16 = dist16.wrapping_add(n);
                }
                if a.length <= 256 {
                    dist256 = dist256.wrapping_add(n);
                }
                szmax = szmax.max(a.length);
            }
            EventKind::Promote { obj_id, .. } => {
                // The reference asserts the object is live in the minor heap; an
                // inconsistent trace is tolerated here instead.
                if let Some(n) = minor_live.remove(&obj_id) {
                    promote = promote.wrapping_add(n);
                    if n > 1 {
                        major_multi.insert(obj_id, n);
                    }
                }
            }
            EventKind::Collect { obj_id, .. } => {
                if let Some(n) = minor_live.remove(&obj_id) {
                    minor_collect = minor_collect.wrapping_add(n);
                } else {
                    let n = major_multi.remove(&obj_id).unwrap_or(1);
                    major_collect = major_collect.wrapping_add(n);
                }
            }
        }
    }
    let _ = minor_collect;
    let duration = tmax as f64 * 1e-6;
    let word_bytes = f64::from(info.word_size / 8);
    let bytes = |n: i64| n as f64 / info.sample_rate * word_bytes;
    let (minor_alloc, promote) = (bytes(minor_alloc), bytes(promote));
    let (major_alloc, major_collect) = (bytes(major_alloc), bytes(major_collect));
    let total = minor_alloc + major_alloc;
    writeln!(
        out,
        "   Minor: {}/s allocations, {}% promoted",
        print_bytes(minor_alloc / duration),
        cfmt::f(100.0 * promote / minor_alloc, 0, 1)
    )?;
    writeln!(
        out,
        "   Major: {}/s allocations ({}/s direct), {}/s collections",
        print_bytes((major_alloc + promote) / duration),
        print_bytes(major_alloc / duration),
        print_bytes(major_collect / duration)
    )?;
    writeln!(
        out,
        "   Sizes (by word): {}% <= 4w, {}% <= 16w, {}% <= 256w. Max: {}",
        cfmt::f(100.0 * bytes(dist4) / total, 0, 0),
        cfmt::f(100.0 * bytes(dist16) / total, 0, 0),
        cfmt::f(100.0 * bytes(dist256) / total, 0, 0),
        print_bytes((szmax.wrapping_mul(i64::from(info.word_size)) / 8) as f64)
    )?;
    writeln!(out, "   Runtime: {} s", cfmt::f(duration, 0, 3))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_gmtime() {
        assert_eq!(utc_date(0), "Thu Jan 1 00:00:00 1970 UTC");
        assert_eq!(
            utc_date(1_586_965_711_000_000),
            "Wed Apr 15 15:48:31 2020 UTC"
        );
        assert_eq!(
            utc_date(951_782_400_000_000),
            "Tue Feb 29 00:00:00 2000 UTC"
        );
        assert_eq!(
            utc_date(1_735_689_599_000_000),
            "Tue Dec 31 23:59:59 2024 UTC"
        );
    }
}
