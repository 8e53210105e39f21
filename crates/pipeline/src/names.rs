//! The names a mistyped function name was meant to be.

use ptscope_event::{StringTable, Sym, Symbol};

/// Up to `n` distinct function names from `strings` nearest to `want`, best first (a
/// case-insensitive substring either way, else a small edit distance).
pub fn nearest_names(strings: &StringTable, want: &str, n: usize) -> Vec<String> {
    let w = want.to_lowercase();
    let wc: Vec<char> = w.chars().collect();
    let limit = (wc.len() / 3).max(2);
    let mut found: Vec<(usize, usize, String)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..strings.len() {
        let name = strings.display(Symbol::FromPerf(Sym(i as u32)));
        // Paths, thread names with spaces and perf's `[unknown …]` are not functions.
        if name.is_empty() || name.contains('/') || name.contains(' ') || name.starts_with('[') {
            continue;
        }
        if !seen.insert(name) {
            continue;
        }
        let l = name.to_lowercase();
        let lc = l.chars().count();
        let rank = if l == w {
            // The same name in another case, or demangled differently.
            Some((0, 0))
        } else if (wc.len() >= 3 && l.contains(&w))
            || (lc >= 4 && lc * 3 >= wc.len() * 2 && w.contains(&l))
        {
            Some((1, lc.abs_diff(wc.len())))
        } else if lc.abs_diff(wc.len()) <= limit {
            let d = edit_distance(&wc, &l.chars().collect::<Vec<_>>());
            (d <= limit).then_some((2, d))
        } else {
            None
        };
        if let Some((class, d)) = rank {
            found.push((class, d, name.to_owned()));
        }
    }
    found.sort();
    found.into_iter().take(n).map(|(_, _, s)| s).collect()
}

/// `; names in the trace like it: …` for the names [`nearest_names`] found, or a
/// sentence saying there are none.
pub(crate) fn similar_suffix(names: &[String]) -> String {
    if names.is_empty() {
        return String::from("; no name in the trace is like it");
    }
    format!(
        "; names in the trace like it: {}",
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Levenshtein distance.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}
