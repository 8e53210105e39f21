//! A decoded trace as the tests see it: the checker's report plus, per thread, the tree of
//! slices Perfetto would draw (built from begin, end and complete records with the same
//! rules as Perfetto's slice tracker, so "X under Y" means what a user sees in the UI).

use ptscope_fxt::check::{self, Report};
use ptscope_fxt::reader::{EventKind, Reader, Record};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// One slice on a thread track.
#[derive(Clone, Debug)]
pub struct Slice {
    /// Function name as written in the trace.
    pub name: String,
    /// Start, in trace ticks.
    pub start: u64,
    /// End, in trace ticks (`None` when the trace never closed it).
    pub end: Option<u64>,
    /// Index of the enclosing slice on the same track.
    pub parent: Option<usize>,
}

/// One thread track: its names and its slices (in start order, parents before children).
#[derive(Clone, Debug, Default)]
pub struct Track {
    /// Process koid (ptscope allocates these; they are not Linux pids).
    pub pid: u64,
    /// Thread koid.
    pub tid: u64,
    /// Name of the process kernel object (`""` when the trace has none).
    pub process_name: String,
    /// Name of the thread kernel object (`""` when the trace has none).
    pub thread_name: String,
    /// The slices, parents before children.
    pub slices: Vec<Slice>,
}

impl Track {
    /// Whether the thread is named `name`, ignoring a ` [tid=…]`-style suffix.
    pub fn thread_is(&self, name: &str) -> bool {
        self.thread_name.split(" [").next() == Some(name)
    }

    /// Names of the ancestors of slice `i`, innermost first.
    pub fn ancestors(&self, i: usize) -> Vec<&str> {
        let mut out = Vec::new();
        let mut cur = self.slices[i].parent;
        while let Some(p) = cur {
            out.push(self.slices[p].name.as_str());
            cur = self.slices[p].parent;
        }
        out
    }

    /// The root-first stack of slice `i` joined with ` > `, for failure messages.
    pub fn stack_text(&self, i: usize) -> String {
        let mut names: Vec<&str> = self.ancestors(i);
        names.reverse();
        names.push(&self.slices[i].name);
        names.join(" > ")
    }

    /// Indices of slices whose name satisfies `pred`.
    pub fn find<'a>(
        &'a self,
        pred: impl Fn(&str) -> bool + 'a,
    ) -> impl Iterator<Item = usize> + 'a {
        (0..self.slices.len()).filter(move |&i| pred(&self.slices[i].name))
    }
}

/// A trace file read back and checked.
pub struct Trace {
    /// The uncompressed FXT bytes.
    pub bytes: Vec<u8>,
    /// `ptscope_fxt::check`'s verdict and summary.
    pub report: Report,
    /// Thread tracks, keyed by (process koid, thread koid).
    pub tracks: BTreeMap<(u64, u64), Track>,
    /// Earliest and latest event time, in ticks (complete ends included).
    pub span: Option<(u64, u64)>,
}

/// An open slice while the tree is built.
struct Open {
    index: usize,
    /// `Some(end)` for a complete, `None` for a begin.
    complete_end: Option<u64>,
}

impl Trace {
    /// Reads a trace file (gzip detected by magic bytes), validates it and builds the trees.
    pub fn load(path: &Path) -> Trace {
        let raw = std::fs::read(path)
            .unwrap_or_else(|e| panic!("cannot read the trace {}: {e}", path.display()));
        let bytes = if ptscope_fxt::reader::is_gzip(&raw) {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut out)
                .unwrap_or_else(|e| panic!("{} is not valid gzip: {e}", path.display()));
            out
        } else {
            raw
        };
        Trace::from_bytes(bytes)
    }

    /// Validates uncompressed FXT bytes and builds the per-thread slice trees.
    pub fn from_bytes(bytes: Vec<u8>) -> Trace {
        let report = check::validate_bytes(&bytes);
        let mut tracks: BTreeMap<(u64, u64), Track> = BTreeMap::new();
        let mut stacks: BTreeMap<(u64, u64), Vec<Open>> = BTreeMap::new();
        let mut span: Option<(u64, u64)> = None;
        let mut widen = |a: u64, b: u64| {
            span = Some(match span {
                None => (a, b),
                Some((lo, hi)) => (lo.min(a), hi.max(b)),
            });
        };
        for record in Reader::new(&bytes) {
            // A read error is in the report already; the tree holds what came before it.
            let Ok(Record::Event(e)) = record else {
                if record.is_err() {
                    break;
                }
                continue;
            };
            let key = (e.pid, e.tid);
            let track = tracks.entry(key).or_insert_with(|| Track {
                pid: e.pid,
                tid: e.tid,
                ..Track::default()
            });
            let stack = stacks.entry(key).or_default();
            let t = e.timestamp;
            // Perfetto closes completes whose end has passed before placing the next event.
            while stack
                .last()
                .is_some_and(|o| o.complete_end.is_some_and(|end| end <= t))
            {
                stack.pop();
            }
            let parent = stack.last().map(|o| o.index);
            match e.kind {
                EventKind::Begin => {
                    widen(t, t);
                    track.slices.push(Slice {
                        name: e.name.to_string(),
                        start: t,
                        end: None,
                        parent,
                    });
                    stack.push(Open {
                        index: track.slices.len() - 1,
                        complete_end: None,
                    });
                }
                EventKind::Complete { end } => {
                    widen(t, end.max(t));
                    track.slices.push(Slice {
                        name: e.name.to_string(),
                        start: t,
                        end: Some(end),
                        parent,
                    });
                    stack.push(Open {
                        index: track.slices.len() - 1,
                        complete_end: Some(end),
                    });
                }
                EventKind::End => {
                    widen(t, t);
                    if stack.last().is_some_and(|o| o.complete_end.is_none()) {
                        if let Some(o) = stack.pop() {
                            track.slices[o.index].end = Some(t);
                        }
                    }
                }
                _ => widen(t, t),
            }
        }
        for track in tracks.values_mut() {
            track.process_name = report
                .processes
                .get(&track.pid)
                .cloned()
                .unwrap_or_default();
            track.thread_name = report
                .thread_names
                .get(&track.tid)
                .map(|n| n.name.clone())
                .unwrap_or_default();
        }
        Trace {
            bytes,
            report,
            tracks,
            span,
        }
    }

    /// Ticks per second (1e9 unless the trace says otherwise).
    pub fn ticks_per_second(&self) -> u64 {
        self.report.ticks_per_second.unwrap_or(1_000_000_000)
    }

    /// Time from the first to the last event, in seconds.
    pub fn span_seconds(&self) -> f64 {
        self.span.map_or(0.0, |(a, b)| {
            (b - a) as f64 / self.ticks_per_second() as f64
        })
    }

    /// Total number of slices on all tracks.
    pub fn slice_count(&self) -> usize {
        self.tracks.values().map(|t| t.slices.len()).sum()
    }

    /// Every (track, slice index) whose name satisfies `pred`.
    pub fn find<'a>(
        &'a self,
        pred: impl Fn(&str) -> bool + Copy + 'a,
    ) -> impl Iterator<Item = (&'a Track, usize)> + 'a {
        self.tracks
            .values()
            .flat_map(move |t| t.find(pred).map(move |i| (t, i)))
    }

    /// Whether some slice named `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.find(|n| n == name).next().is_some()
    }

    /// A few track names and the most frequent slice names, for failure messages.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.tracks.values() {
            for s in &t.slices {
                *counts.entry(s.name.as_str()).or_default() += 1;
            }
        }
        let mut top: Vec<(&str, usize)> = counts.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top.truncate(40);
        let tracks: Vec<String> = self
            .tracks
            .values()
            .map(|t| {
                format!(
                    "{:?}/{:?} ({} slices)",
                    t.process_name,
                    t.thread_name,
                    t.slices.len()
                )
            })
            .collect();
        format!(
            "{} slices on tracks [{}]; most frequent names: {:?}",
            self.slice_count(),
            tracks.join(", "),
            top
        )
    }
}

/// Whether `name` is `want`, allowing the suffixes the toolchains and ptscope add
/// (`.constprop.0`, `.isra.0`, `@plt`): the test names the function, not its clone.
/// A `want` ending in `*` matches every name with that prefix (libc's `__memcmp_evex_movbe`
/// and friends are chosen by CPU at run time).
pub fn same_function(name: &str, want: &str) -> bool {
    if let Some(prefix) = want.strip_suffix('*') {
        return name.starts_with(prefix);
    }
    name == want
        || name
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('@'))
}

/// A test on a function name.
pub type NamePred = Box<dyn Fn(&str) -> bool>;

/// One [`same_function`] test per name.
pub fn function_preds<S: AsRef<str>>(names: &[S]) -> Vec<NamePred> {
    names
        .iter()
        .map(|o| {
            let o = o.as_ref().to_string();
            Box::new(move |n: &str| same_function(n, &o)) as NamePred
        })
        .collect()
}

impl Trace {
    /// Panics unless some slice matching `leaf` has, going outwards, ancestors matching
    /// each of `outer` in order (others may sit between them), on a track satisfying
    /// `on_track`. Returns the number of such slices.
    pub fn assert_under_on(
        &self,
        what: &str,
        on_track: impl Fn(&Track) -> bool,
        leaf: impl Fn(&str) -> bool + Copy,
        outer: &[&dyn Fn(&str) -> bool],
    ) -> usize {
        let mut found = 0;
        let mut leaves = Vec::new();
        for track in self.tracks.values().filter(|t| on_track(t)) {
            for i in track.find(leaf) {
                let anc = track.ancestors(i);
                let mut need = outer.iter();
                let mut next = need.next();
                for a in &anc {
                    if let Some(f) = next {
                        if f(a) {
                            next = need.next();
                        }
                    }
                }
                if next.is_none() {
                    found += 1;
                } else if leaves.len() < 5 {
                    leaves.push(format!(
                        "{:?}/{:?}: {}",
                        track.process_name,
                        track.thread_name,
                        track.stack_text(i)
                    ));
                }
            }
        }
        assert!(
            found > 0,
            "{what}: no such stack in the trace. Stacks of matching leaves seen: {leaves:#?}\n{}",
            self.summary()
        );
        found
    }

    /// [`Trace::assert_under_on`] over all tracks, with plain function names
    /// (compared with [`same_function`]).
    pub fn assert_under(&self, leaf: &str, outer: &[&str]) -> usize {
        let preds = function_preds(outer);
        let refs: Vec<&dyn Fn(&str) -> bool> = preds.iter().map(|b| b.as_ref()).collect();
        self.assert_under_on(
            &format!("{leaf} under {}", outer.join(" < ")),
            |_| true,
            |n| same_function(n, leaf),
            &refs,
        )
    }

    /// Panics unless some track's process name contains `command` (the program's name
    /// as `ps` shows it), so a user can tell the processes apart in Perfetto.
    pub fn assert_process_named(&self, command: &str) {
        let names: Vec<&str> = self
            .tracks
            .values()
            .map(|t| t.process_name.as_str())
            .collect();
        assert!(
            names.iter().any(|n| n.contains(command)),
            "no process named after `{command}` in the trace; process names: {names:?}"
        );
    }

    /// Panics unless a track whose thread name is `name` exists and has slices, and
    /// returns it.
    pub fn track_named(&self, name: &str) -> &Track {
        self.tracks
            .values()
            .find(|t| t.thread_is(name) && !t.slices.is_empty())
            .unwrap_or_else(|| {
                let names: Vec<(&str, &str)> = self
                    .tracks
                    .values()
                    .map(|t| (t.process_name.as_str(), t.thread_name.as_str()))
                    .collect();
                panic!("no thread named {name:?} with slices in the trace; (process, thread) names: {names:?}")
            })
    }

    /// Panics unless both traces hold the same tracks (by process and thread name) with
    /// the same slices: names, times and nesting.
    pub fn assert_same_slices(&self, other: &Trace, what: &str) {
        type SliceKey = (String, u64, Option<u64>, Option<usize>);
        let tracks = |t: &Trace| -> Vec<(String, String, Vec<SliceKey>)> {
            let mut v: Vec<_> = t
                .tracks
                .values()
                .map(|k| {
                    (
                        k.process_name.clone(),
                        k.thread_name.clone(),
                        k.slices
                            .iter()
                            .map(|s| (s.name.clone(), s.start, s.end, s.parent))
                            .collect::<Vec<_>>(),
                    )
                })
                .collect();
            v.sort();
            v
        };
        let a = tracks(self);
        let b = tracks(other);
        assert_eq!(
            a.iter()
                .map(|t| (&t.0, &t.1, t.2.len()))
                .collect::<Vec<_>>(),
            b.iter()
                .map(|t| (&t.0, &t.1, t.2.len()))
                .collect::<Vec<_>>(),
            "{what}: different tracks or slice counts"
        );
        for (ta, tb) in a.iter().zip(&b) {
            if let Some(i) = (0..ta.2.len()).find(|&i| ta.2[i] != tb.2[i]) {
                panic!(
                    "{what}: track {:?}/{:?} differs at slice {i}: {:?} vs {:?}",
                    ta.0, ta.1, ta.2[i], tb.2[i]
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptscope_fxt::FxtWriter;

    /// main > (parse > [lex, lex]) then main > emit, with a complete nested in a begin.
    fn sample() -> Trace {
        let mut w = FxtWriter::new(Vec::new());
        w.process(1, "demo [pid=42]");
        w.thread_object(2, 1, "worker");
        let th = w.thread(1, 2);
        w.begin(th, "", "main", 0, &[]);
        w.begin(th, "", "parse", 10, &[]);
        w.complete(th, "", "lex", 10, 20, &[]);
        w.complete(th, "", "lex.constprop.0", 20, 30, &[]);
        w.end(th, "", "parse", 40, &[]);
        w.complete(th, "", "emit", 40, 50, &[]);
        w.end(th, "", "main", 60, &[]);
        Trace::from_bytes(w.finish().unwrap())
    }

    #[test]
    fn tree_follows_perfetto_nesting() {
        let t = sample();
        assert!(t.report.is_ok(), "{}", t.report);
        let track = t.tracks.values().next().unwrap();
        assert_eq!(track.process_name, "demo [pid=42]");
        assert_eq!(track.thread_name, "worker");
        let stacks: Vec<String> = (0..track.slices.len())
            .map(|i| track.stack_text(i))
            .collect();
        assert_eq!(
            stacks,
            [
                "main",
                "main > parse",
                "main > parse > lex",
                "main > parse > lex.constprop.0",
                "main > emit"
            ]
        );
        assert_eq!(t.span, Some((0, 60)));
        assert_eq!(t.assert_under("lex", &["parse", "main"]), 2);
        t.track_named("worker");
    }

    #[test]
    #[should_panic(expected = "no such stack")]
    fn under_fails_for_a_wrong_caller() {
        sample().assert_under("emit", &["parse"]);
    }

    #[test]
    #[should_panic(expected = "no such stack")]
    fn under_fails_for_callers_in_the_wrong_order() {
        sample().assert_under("lex", &["main", "parse"]);
    }

    #[test]
    #[should_panic(expected = "no process named after `python3`")]
    fn process_name_must_match() {
        sample().assert_process_named("python3");
    }

    #[test]
    #[should_panic(expected = "differs at slice")]
    fn same_slices_notices_a_moved_slice() {
        let mut w = FxtWriter::new(Vec::new());
        w.process(1, "demo [pid=42]");
        w.thread_object(2, 1, "worker");
        let th = w.thread(1, 2);
        w.begin(th, "", "main", 0, &[]);
        w.begin(th, "", "parse", 10, &[]);
        w.complete(th, "", "lex", 10, 20, &[]);
        w.complete(th, "", "lex.constprop.0", 21, 30, &[]);
        w.end(th, "", "parse", 40, &[]);
        w.complete(th, "", "emit", 40, 50, &[]);
        w.end(th, "", "main", 60, &[]);
        let other = Trace::from_bytes(w.finish().unwrap());
        sample().assert_same_slices(&other, "test");
    }

    #[test]
    fn function_names_allow_clone_suffixes_and_prefixes() {
        assert!(same_function("lex.constprop.0", "lex"));
        assert!(same_function("memcpy@plt", "memcpy"));
        assert!(!same_function("lexer", "lex"));
        assert!(same_function("__memcmp_evex_movbe", "__memcmp*"));
    }
}
