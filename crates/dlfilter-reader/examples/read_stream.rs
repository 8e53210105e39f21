//! Decodes a saved filter stream (`perf script --dlfilter … > FILE`) and times it.

use ptscope_dlfilter_reader::RecordReader;
use std::io::BufReader;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: read_stream FILE")?;
    let t = Instant::now();
    let mut r = RecordReader::new(BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path)?,
    ));
    let mut n = 0u64;
    while r.next_event()?.is_some() {
        n += 1;
    }
    println!("{n} events in {:.2} s", t.elapsed().as_secs_f64());
    Ok(())
}
