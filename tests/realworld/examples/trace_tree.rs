//! Prints every track of a trace as an indented slice tree (debugging aid):
//! `cargo run -p ptscope-realworld --example trace_tree -- trace.fxt.gz [MAX_SLICES_PER_TRACK]`.
use ptscope_realworld::trace::Trace;
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: dump TRACE [MAX]");
    let max: usize = args.next().map_or(200, |m| m.parse().expect("a number"));
    let t = Trace::load(std::path::Path::new(&path));
    println!("{}", t.report);
    println!("span {:.6} s", t.span_seconds());
    for track in t.tracks.values() {
        println!(
            "== {:?} / {:?} ({} slices)",
            track.process_name,
            track.thread_name,
            track.slices.len()
        );
        for (i, s) in track.slices.iter().enumerate().take(max) {
            let depth = track.ancestors(i).len();
            println!(
                "{}{} [{}..{:?}]",
                "  ".repeat(depth),
                s.name,
                s.start,
                s.end
            );
        }
    }
}
