//! A perf.data read for the oracle and its benchmark: the code of its one process and
//! its Intel PT trace, queue by queue.

use ptscope_intel_pt::decoder::Memory;
use ptscope_perf_data::{PerfData, Record, RecordAt};
use std::collections::BTreeMap;
use std::path::Path;

/// The code of one process: its files' mappings (the recording has one process), read
/// from the files the recording mapped.
pub struct Image {
    maps: Vec<(u64, u64, u64, usize)>,
    files: Vec<Vec<u8>>,
}

impl Memory for Image {
    fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
        let &(start, end, pgoff, f) = self.maps.iter().rev().find(|m| ip >= m.0 && ip < m.1)?;
        let bytes = &self.files[f];
        let off = usize::try_from(ip - start + pgoff).ok()?;
        let stop = usize::try_from(end - start + pgoff).ok()?.min(bytes.len());
        bytes.get(off..stop)
    }
}

/// Each AUX queue's trace data, by queue index.
pub type Queues = BTreeMap<u32, Vec<u8>>;

/// The image of the recording at `path` and each queue's trace data (AUXTRACE pieces in
/// order). A mapped file that cannot be read is left out of the image.
pub fn read_recording(path: &Path) -> Result<(Image, Queues), Box<dyn std::error::Error>> {
    let data = PerfData::open(path)?;
    let mut image = Image {
        maps: Vec::new(),
        files: Vec::new(),
    };
    let mut queues = Queues::new();
    let mut paths: Vec<Vec<u8>> = Vec::new();
    for r in data.records() {
        let Ok(RecordAt { record, .. }) = r else {
            continue;
        };
        match record {
            Record::Mmap(m) if m.exec && m.path.starts_with(b"/") => {
                let f = match paths.iter().position(|p| p == m.path) {
                    Some(f) => f,
                    None => {
                        let Ok(bytes) = std::fs::read(std::str::from_utf8(m.path)?) else {
                            continue;
                        };
                        paths.push(m.path.to_vec());
                        image.files.push(bytes);
                        paths.len() - 1
                    }
                };
                image.maps.push((m.start, m.start + m.len, m.pgoff, f));
            }
            Record::Auxtrace(a) => queues.entry(a.idx).or_default().extend_from_slice(a.data),
            _ => {}
        }
    }
    Ok((image, queues))
}
