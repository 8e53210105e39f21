//! Trigger hits saved in the working directory (`hits.tsv`), so `ptscope decode DIR` shows
//! them as `hit SYMBOL` slices just like the run that recorded them.

use crate::{Error, Result};
use ptscope_event::Hit;
use std::path::Path;

/// The file name inside a working directory.
pub const FILE_NAME: &str = "hits.tsv";

const HEADER: &str = "# ptscope trigger hits: symbol\ttime_ns\ttid\tip\tpassed_time_ns\tpassed_value\tis_stop_indicator";

/// Writes `hits` to `DIR/hits.tsv` (nothing when there are none).
pub fn write(dir: &Path, hits: &[Hit]) -> Result<()> {
    if hits.is_empty() {
        return Ok(());
    }
    let mut s = String::from(HEADER);
    s.push('\n');
    for h in hits {
        // Tabs and newlines cannot occur in symbol names we resolved, but keep the file parseable.
        let sym: String = h
            .symbol
            .chars()
            .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
            .collect();
        s.push_str(&format!(
            "{sym}\t{}\t{}\t{:#x}\t{}\t{}\t{}\n",
            h.time,
            h.tid,
            h.ip,
            h.passed_time,
            h.passed_value,
            u8::from(h.is_stop_indicator)
        ));
    }
    let path = dir.join(FILE_NAME);
    // Like every file ptscope makes in a working directory: afresh, O_EXCL|O_NOFOLLOW.
    use std::io::Write;
    crate::process::create_private(&path)?
        .write_all(s.as_bytes())
        .map_err(|source| Error::Write { path, source })
}

/// Reads `DIR/hits.tsv`; a missing file is no hits, malformed lines are skipped.
pub fn read(dir: &Path) -> Vec<Hit> {
    let Ok(text) = std::fs::read_to_string(dir.join(FILE_NAME)) else {
        return Vec::new();
    };
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Hit> {
    if line.starts_with('#') {
        return None;
    }
    let f: Vec<&str> = line.split('\t').collect();
    let [symbol, time, tid, ip, passed_time, passed_value, stop] = f[..] else {
        return None;
    };
    Some(Hit {
        symbol: symbol.to_owned(),
        time: time.parse().ok()?,
        tid: tid.parse().ok()?,
        ip: u64::from_str_radix(ip.trim_start_matches("0x"), 16).ok()?,
        passed_time: passed_time.parse().ok()?,
        passed_value: passed_value.parse().ok()?,
        is_stop_indicator: stop == "1",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        assert!(read(&dir).is_empty());
        let hits = vec![
            Hit {
                symbol: "demo_function".into(),
                time: 123_456_789,
                tid: 42,
                ip: 0x5555_0000_1234,
                passed_time: 0,
                passed_value: 0,
                is_stop_indicator: false,
            },
            Hit {
                symbol: "ptscope_stop_indicator_with".into(),
                time: 2,
                tid: 43,
                ip: 1,
                passed_time: 1,
                passed_value: -7,
                is_stop_indicator: true,
            },
        ];
        write(&dir, &hits).unwrap();
        std::fs::write(dir.join("extra"), "").unwrap();
        assert_eq!(read(&dir), hits);
        let mut text = std::fs::read_to_string(dir.join(FILE_NAME)).unwrap();
        text.push_str("garbage line\nx\t1\t2\t3\t4\t5\n");
        std::fs::write(dir.join(FILE_NAME), text).unwrap();
        assert_eq!(read(&dir), hits);
    }
}
