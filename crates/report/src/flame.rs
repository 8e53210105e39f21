//! Flame graphs: folded stacks (`a;b;c 1234`, one line per distinct stack, its self time
//! in nanoseconds) for other tools, and SVGs drawn by inferno.

use crate::analyze::{Analysis, NO_NODE};
use rustc_hash::FxHashMap;
use std::io::{self, Write};

/// A frame name as folded stacks can carry it (`;` separates frames, a line ends the
/// stack).
fn frame(name: &str) -> String {
    name.replace([';', '\n', '\r'], ":")
}

/// The folded stacks of the given threads, sorted; with `per_thread`, each stack starts
/// with its process and thread, otherwise equal stacks of all threads are merged. Stacks
/// with no self time are left out.
pub fn folded(a: &Analysis, threads: &[usize], per_thread: bool) -> Vec<(String, u64)> {
    let mut acc: FxHashMap<String, u64> = FxHashMap::default();
    for &t in threads {
        let th = &a.threads[t];
        // Each node's stack text, built from its parent's (parents come first).
        let mut text: Vec<String> = Vec::with_capacity(th.nodes.len());
        let root = if per_thread {
            let (p, n) = a.names_of(t);
            Some(format!("{};{}", frame(&p), frame(&n)))
        } else {
            None
        };
        for n in &th.nodes {
            let name = frame(a.name(n.func));
            let s = if n.parent == NO_NODE {
                match &root {
                    Some(r) => format!("{r};{name}"),
                    None => name,
                }
            } else {
                format!("{};{name}", text[n.parent as usize])
            };
            if n.self_ns > 0 {
                *acc.entry(s.clone()).or_default() += n.self_ns;
            }
            text.push(s);
        }
    }
    let mut v: Vec<(String, u64)> = acc.into_iter().collect();
    v.sort();
    v
}

/// Writes folded stacks, one per line.
pub fn write_folded(lines: &[(String, u64)], out: &mut dyn Write) -> io::Result<()> {
    for (s, n) in lines {
        writeln!(out, "{s} {n}")?;
    }
    Ok(())
}

/// Draws the folded stacks as a flame graph SVG titled `title`.
pub fn write_svg(lines: &[(String, u64)], title: &str, out: &mut dyn Write) -> io::Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "ns".to_string();
    opts.name_type = "Function:".to_string();
    let text: Vec<String> = lines.iter().map(|(s, n)| format!("{s} {n}")).collect();
    if text.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the trace has no time in any function to draw",
        ));
    }
    inferno::flamegraph::from_lines(&mut opts, text.iter().map(String::as_str), out)
        .map_err(|e| io::Error::other(e.to_string()))
}
