//! `frame_lookup ELF [N]`: times [`FunctionRanges::frame_set_up_at`] at the start of N
//! (default 200) FDEs spread over the file, as the namer asks it once per distinct
//! sampled leaf (BENCHMARKS.md, "Frame lookups in a big library").

use std::time::Instant;

use ptscope_symbols::{eh_frame_ranges, FunctionRanges, MappedFile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: frame_lookup ELF [N]")?;
    let n: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(200);
    let t = Instant::now();
    let ranges = FunctionRanges::load(path.as_ref())?;
    eprintln!("loaded in {:?}", t.elapsed());
    let file = MappedFile::open(&path)?;
    let fdes = eh_frame_ranges(&file.elf()?)?;
    let step = (fdes.len() / n.max(1)).max(1);
    let t = Instant::now();
    let (mut asked, mut answered) = (0, 0);
    for &(start, _) in fdes.iter().step_by(step).take(n) {
        asked += 1;
        answered += usize::from(ranges.frame_set_up_at(start).is_some());
    }
    let e = t.elapsed();
    println!(
        "{} FDEs; {asked} lookups ({answered} answered) in {e:?}: {:?} each",
        fdes.len(),
        e / asked.max(1) as u32
    );
    Ok(())
}
