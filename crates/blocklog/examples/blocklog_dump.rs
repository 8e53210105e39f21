//! Prints a block log: its header and chunks, then each thread's exec stream word by
//! word with each block's address and last instruction's flow (the first `N` words of
//! each thread; all with `N` = 0).
//!
//! `cargo run -p ptscope-blocklog --example blocklog_dump -- LOG [N]`

use ptscope_blocklog::classify::classify;
use ptscope_blocklog::{LogIndex, Word, Words};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: dump LOG [N]")?;
    let limit: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(200);
    let data = std::fs::read(&path)?;
    let ix = LogIndex::new(&data)?;
    println!(
        "pid {} version {} mode {} blocks {}..{} threads {} maps {} hits {} comms {:?}",
        ix.header.pid,
        ix.header.version,
        ix.header.mode,
        ix.base,
        ix.blocks_end(),
        ix.threads.len(),
        ix.maps.len(),
        ix.hits.len(),
        ix.comms
    );
    if let Some(d) = &ix.damage {
        println!("damage: {d}");
    }
    println!("handler entries: {:?}", ix.handler_entries);
    for t in &ix.threads {
        let total: usize = t.chunks.iter().map(|c| c.1).sum();
        println!(
            "thread {} ({} chunks, {} bytes)",
            t.tid,
            t.chunks.len(),
            total
        );
        let mut n = 0;
        'out: for &c in &t.chunks {
            for w in Words::new(ix.stream(c), c.0) {
                if limit > 0 && n >= limit {
                    break 'out;
                }
                n += 1;
                match w? {
                    Word::Block(id) => match ix.tb(id) {
                        Some(tb) => println!(
                            "  {id:6} {:#x}..{:#x} n={} {:?}",
                            tb.vaddr,
                            tb.end(),
                            tb.n_insns,
                            classify(tb.last, tb.last_addr())
                        ),
                        None => println!("  {id:6} (undescribed)"),
                    },
                    other => println!("  {other:?}"),
                }
            }
        }
    }
    Ok(())
}
