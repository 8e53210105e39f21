//! Counts a trace's slices and distinct slice names, and how many of those names are
//! per-address `[unknown @ …]` ones (for the naming step's before/after figures):
//! `cargo run -p ptscope-realworld --example names -- trace.fxt.gz [PROCESS]`.
use ptscope_realworld::trace::Trace;
use std::collections::BTreeMap;
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: names TRACE [PROCESS]");
    let process = args.next();
    let t = Trace::load(std::path::Path::new(&path));
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut slices = 0;
    for track in t.tracks.values() {
        if process.is_some() && Some(track.process_name.as_str()) != process.as_deref() {
            continue;
        }
        for s in &track.slices {
            slices += 1;
            *names.entry(s.name.clone()).or_default() += 1;
        }
    }
    let unknown = names
        .keys()
        .filter(|n| n.starts_with("[unknown @ "))
        .count();
    let unknown_slices: usize = names
        .iter()
        .filter(|(n, _)| n.starts_with("[unknown @ "))
        .map(|(_, c)| c)
        .sum();
    let cut = names.get(ptscope_symbols_marker()).copied().unwrap_or(0);
    println!(
        "{slices} slices, {} distinct names, {unknown} per-address names ({unknown_slices} slices), {cut} cut-marker slices",
        names.len()
    );
    let mut top: Vec<_> = names.into_iter().collect();
    top.sort_by_key(|e| std::cmp::Reverse(e.1));
    for (n, c) in top.iter().take(15) {
        println!("  {c:8} {n}");
    }
}
fn ptscope_symbols_marker() -> &'static str {
    "[stack cut: frame pointers lost]"
}
