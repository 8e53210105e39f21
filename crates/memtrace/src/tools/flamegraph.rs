//! `flamegraph`: folded stacks of definition names weighted by samples.
//!
//! Consecutive backtraces of a domain share a prefix; the trie position reached
//! after each frame is remembered so only the changed frames are walked again.

use std::io::Write;

use rustc_hash::FxHashMap;

use crate::error::{Error, ErrorKind, Result};
use crate::location::Sym;
use crate::reader::{Alloc, EventKind, LocationDb, Reader, Source};

const ROOT: u32 = 0;

struct Node {
    samples: i64,
    name: Sym,
}

#[derive(Default)]
struct DomainPath {
    domain: u16,
    /// Trie node reached after each frame of the previous backtrace.
    node_after: Vec<u32>,
    /// Names emitted so far on the path, with the frame that emitted them.
    emitted: Vec<(Sym, u32)>,
    /// Indexed by symbol: is the name already on the path?
    seen: Vec<bool>,
}

/// A trie of call paths (first occurrence of each name kept) with sample counts.
pub struct FlameGraph {
    nodes: Vec<Node>,
    children: FxHashMap<(u32, Sym), u32>,
    domains: Vec<DomainPath>,
}

impl Default for FlameGraph {
    fn default() -> Self {
        FlameGraph {
            nodes: vec![Node {
                samples: 0,
                name: Sym(u32::MAX),
            }],
            children: FxHashMap::default(),
            domains: Vec::new(),
        }
    }
}

impl FlameGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one allocation. Allocations of a domain must be added in trace order.
    pub fn add(&mut self, a: &Alloc<'_>, db: &LocationDb) -> Result<()> {
        let di = match self.domains.iter().position(|d| d.domain == a.domain) {
            Some(i) => i,
            None => {
                self.domains.push(DomainPath {
                    domain: a.domain,
                    ..Default::default()
                });
                self.domains.len() - 1
            }
        };
        let st = &mut self.domains[di];
        let keep = a.unchanged_prefix().min(st.node_after.len());
        st.node_after.truncate(keep);
        while let Some(&(sym, frame)) = st.emitted.last() {
            if (frame as usize) < keep {
                break;
            }
            st.seen[sym.0 as usize] = false;
            st.emitted.pop();
        }
        let mut node = if keep == 0 {
            ROOT
        } else {
            st.node_after[keep - 1]
        };
        for (i, &code) in a.backtrace.iter().enumerate().skip(keep) {
            let locs = db
                .locations(code)
                .ok_or(Error::Invalid(ErrorKind::UnknownLocationCode(code)))?;
            for l in locs {
                let s = l.defname.0 as usize;
                if s >= st.seen.len() {
                    st.seen.resize(s + 1, false);
                }
                if st.seen[s] {
                    continue;
                }
                st.seen[s] = true;
                st.emitted.push((l.defname, i as u32));
                let next = self.nodes.len() as u32;
                node = *self.children.entry((node, l.defname)).or_insert(next);
                if node == next {
                    self.nodes.push(Node {
                        samples: 0,
                        name: l.defname,
                    });
                }
            }
            st.node_after.push(node);
        }
        let n = &mut self.nodes[node as usize];
        n.samples = n.samples.wrapping_add(a.nsamples);
        Ok(())
    }

    /// Writes `a;b;c N` lines depth first, children in byte order of their names,
    /// for every path of two or more names with samples.
    pub fn write(&self, db: &LocationDb, out: &mut dyn Write) -> Result<()> {
        let mut kids: Vec<Vec<u32>> = vec![Vec::new(); self.nodes.len()];
        for (&(parent, _), &child) in &self.children {
            kids[parent as usize].push(child);
        }
        for k in &mut kids {
            k.sort_unstable_by(|a, b| {
                db.string(self.nodes[*a as usize].name)
                    .cmp(db.string(self.nodes[*b as usize].name))
            });
        }
        let mut line = Vec::new();
        let mut path: Vec<u32> = Vec::new();
        // Explicit stack of (node, depth) so deep traces cannot overflow the stack.
        let mut stack: Vec<(u32, usize)> =
            kids[ROOT as usize].iter().rev().map(|&c| (c, 0)).collect();
        while let Some((node, depth)) = stack.pop() {
            path.truncate(depth);
            path.push(node);
            let n = &self.nodes[node as usize];
            if n.samples > 0 && path.len() >= 2 {
                line.clear();
                for (i, p) in path.iter().enumerate() {
                    if i > 0 {
                        line.push(b';');
                    }
                    line.extend_from_slice(db.string(self.nodes[*p as usize].name));
                }
                let _ = writeln!(line, " {}", n.samples);
                out.write_all(&line)?;
            }
            stack.extend(kids[node as usize].iter().rev().map(|&c| (c, depth + 1)));
        }
        Ok(())
    }
}

/// Prints the folded-stack flamegraph of a whole trace.
pub fn flamegraph<S: Source>(reader: &mut Reader<S>, out: &mut dyn Write) -> Result<()> {
    let mut g = FlameGraph::new();
    while let Some(ev) = reader.next_event()? {
        if let EventKind::Alloc(a) = ev.kind {
            g.add(&a, ev.db)?;
        }
    }
    g.write(reader.db(), out)
}
