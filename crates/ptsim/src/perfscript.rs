//! Runs `perf script` on a recording and compares what perf's decoder reports with the
//! expected branches.

use crate::expected::{Branch, BranchKind, ThreadExpectation};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Parses `SECONDS.NANOS` as printed by `perf script --ns`.
fn parse_time(s: &str) -> Option<u64> {
    let (sec, ns) = s.trim_end_matches(':').split_once('.')?;
    if ns.len() != 9 {
        return None;
    }
    Some(sec.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?)
}

/// Flags perf prints that ptsim never expects, kept so that comparisons can skip them.
fn kind_of(flags: &str) -> Option<BranchKind> {
    Some(match flags {
        "call" => BranchKind::Call,
        "return" => BranchKind::Return,
        "jmp" => BranchKind::Jmp,
        "jcc" => BranchKind::Jcc,
        "tr strt" => BranchKind::TraceStart,
        "tr end syscall" => BranchKind::SyscallEnd,
        "tr end async" => BranchKind::AsyncEnd,
        "tr end return" => BranchKind::ReturnEnd,
        "tr end jmp" => BranchKind::JmpEnd,
        "tr end call" => BranchKind::CallEnd,
        // Seen only where perf's output is unpredictable (see `BranchKind::Uncertain`).
        "tr end" => BranchKind::Uncertain,
        _ => return None,
    })
}

/// Parses the output of `perf script --ns --itrace=be -F tid,time,flags,ip,addr`.
///
/// Decode errors become [`BranchKind::Error`] entries whose `from` is perf's error code.
pub fn parse(text: &str) -> Result<Vec<Branch>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = || format!("perf script line {}: cannot parse {line:?}", n + 1);
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("instruction trace error") {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let field = |name: &str| {
                words
                    .iter()
                    .position(|w| *w == name)
                    .and_then(|i| words.get(i + 1))
                    .copied()
            };
            let tid = field("tid")
                .and_then(|v| v.parse().ok())
                .with_context(bad)?;
            let time = field("time").and_then(parse_time).unwrap_or(0);
            let code = field("code")
                .and_then(|v| v.trim_end_matches(':').parse().ok())
                .with_context(bad)?;
            out.push(Branch {
                tid,
                time,
                kind: BranchKind::Error,
                from: code,
                to: 0,
            });
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        let Some(arrow) = words.iter().position(|w| *w == "=>") else {
            bail!(bad());
        };
        if arrow < 3 || arrow + 1 >= words.len() {
            bail!(bad());
        }
        let tid: u32 = words[0].parse().with_context(bad)?;
        let time = parse_time(words[1]).with_context(bad)?;
        let flags = words[2..arrow - 1].join(" ");
        let hex = |s: &str| u64::from_str_radix(s, 16);
        let from = hex(words[arrow - 1]).with_context(bad)?;
        let to = hex(words[arrow + 1]).with_context(bad)?;
        let kind =
            kind_of(&flags).with_context(|| format!("{}: unknown flags {flags:?}", bad()))?;
        out.push(Branch {
            tid,
            time,
            kind,
            from,
            to,
        });
    }
    Ok(out)
}

/// Runs perf's decoder on `perf_data` and returns the branches it reports.
pub fn decode(perf_data: &Path) -> Result<Vec<Branch>> {
    let out = std::process::Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(perf_data)
        .args(["--ns", "--itrace=be", "-F", "tid,time,flags,ip,addr"])
        .output()
        .context("cannot run perf (Debian package linux-perf)")?;
    if !out.status.success() {
        bail!(
            "perf script failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse(&String::from_utf8_lossy(&out.stdout))
}

/// How perf's output compares with the expectation.
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Branches (and errors) that matched in order.
    pub matched: usize,
    /// Expected entries.
    pub expected: usize,
    /// Entries perf reported.
    pub reported: usize,
    /// Human-readable description of the first differences.
    pub differences: Vec<String>,
    /// Largest amount by which perf's time trails the true time, in ns.
    pub max_lag_ns: u64,
    /// Branches perf timed before they happened.
    pub early: usize,
    /// Largest amount by which perf's time precedes the true time, in ns.
    pub max_early_ns: u64,
    /// Stretches where perf's output is unpredictable and was skipped.
    pub uncertain: usize,
    /// Entries perf reported inside those stretches.
    pub skipped: usize,
}

impl Comparison {
    /// True when every expected branch was reported, and nothing else.
    pub fn exact(&self) -> bool {
        self.differences.is_empty()
            && self.matched == self.expected
            && self.matched + self.skipped == self.reported
    }
}

fn same(e: &Branch, r: &Branch) -> bool {
    e.kind == r.kind && (e.kind == BranchKind::Error || (e.from == r.from && e.to == r.to))
}

/// Compares perf's branches with the expectation, thread by thread.
pub fn compare(expected: &[ThreadExpectation], reported: &[Branch]) -> Comparison {
    let mut c = Comparison {
        reported: reported.len(),
        ..Default::default()
    };
    for t in expected {
        c.expected += t.branches.len();
        let got: Vec<&Branch> = reported.iter().filter(|b| b.tid == t.tid).collect();
        let mut diverged = false;
        let mut g = 0usize;
        let mut i = 0usize;
        while i < t.branches.len() && g < got.len() {
            let e = &t.branches[i];
            if e.kind == BranchKind::Uncertain {
                // Skip perf's output up to the next expected branch.
                c.uncertain += 1;
                c.expected -= 1;
                i += 1;
                let Some(next) = t.branches.get(i) else {
                    c.skipped += got.len() - g;
                    g = got.len();
                    break;
                };
                match got[g..].iter().take(10_000).position(|r| same(next, r)) {
                    Some(k) => {
                        c.skipped += k;
                        g += k;
                    }
                    None => {
                        if c.differences.len() < 10 {
                            c.differences.push(format!(
                                "tid {} branch {i}: perf never resynchronised on {} {:#x} -> {:#x}",
                                t.tid, next.kind, next.from, next.to
                            ));
                        }
                        diverged = true;
                        break;
                    }
                }
                continue;
            }
            let r = got[g];
            g += 1;
            i += 1;
            if !same(e, r) {
                if c.differences.len() < 10 {
                    let ctx: Vec<String> = t.branches
                        [i.saturating_sub(3)..(i + 3).min(t.branches.len())]
                        .iter()
                        .map(|b| format!("{} {:#x}->{:#x}", b.kind, b.from, b.to))
                        .collect();
                    c.differences.push(format!(
                        "tid {} branch {i}: expected {} {:#x} -> {:#x}, perf reported {} {:#x} -> {:#x} (expected around: {})",
                        t.tid,
                        e.kind,
                        e.from,
                        e.to,
                        r.kind,
                        r.from,
                        r.to,
                        ctx.join(", ")
                    ));
                }
                diverged = true;
                break;
            }
            c.matched += 1;
            if e.kind != BranchKind::Error {
                if r.time < e.time {
                    c.early += 1;
                    c.max_early_ns = c.max_early_ns.max(e.time - r.time);
                } else {
                    c.max_lag_ns = c.max_lag_ns.max(r.time - e.time);
                }
            }
        }
        if !diverged && (i != t.branches.len() || g != got.len()) && c.differences.len() < 10 {
            c.differences.push(format!(
                "tid {}: expected {} branches, perf reported {}",
                t.tid,
                t.branches.len(),
                got.len()
            ));
        }
    }
    let known: Vec<u32> = expected.iter().map(|t| t.tid).collect();
    let stray = reported.iter().filter(|b| !known.contains(&b.tid)).count();
    if stray > 0 {
        c.differences.push(format!(
            "{stray} branches reported for threads without expectations"
        ));
    }
    c
}

/// Function names as perf prints them, for every code address perf reported.
///
/// Built from perf's own output so that names (demangling included) are exactly those a
/// perf-based decoder sees.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    by_addr: rustc_hash::FxHashMap<u64, (u32, u64)>,
    names: Vec<String>,
    index: rustc_hash::FxHashMap<String, u32>,
}

impl Symbols {
    /// Runs `perf script` on a recording and collects the symbols of all branch ends.
    pub fn from_perf(perf_data: &Path) -> Result<Self> {
        let out = std::process::Command::new("perf")
            .arg("script")
            .arg("-i")
            .arg(perf_data)
            .args(["--itrace=be", "-F", "ip,sym,symoff,addr"])
            .output()
            .context("cannot run perf (Debian package linux-perf)")?;
        if !out.status.success() {
            bail!(
                "perf script failed with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(Self::parse(&String::from_utf8_lossy(&out.stdout)))
    }

    /// Parses `perf script -F ip,sym,symoff,addr` output; lines it cannot read are skipped.
    pub fn parse(text: &str) -> Self {
        let mut s = Symbols::default();
        for line in text.lines() {
            let Some((left, right)) = line.split_once(" => ") else {
                continue;
            };
            for side in [left, right] {
                let side = side.trim();
                let Some((addr, sym)) = side.split_once(' ') else {
                    continue;
                };
                let (Ok(addr), Some((name, off))) =
                    (u64::from_str_radix(addr, 16), sym.trim().rsplit_once("+0x"))
                else {
                    continue;
                };
                let Ok(off) = u64::from_str_radix(off, 16) else {
                    continue;
                };
                if s.by_addr.contains_key(&addr) {
                    continue;
                }
                let id = match s.index.get(name) {
                    Some(&id) => id,
                    None => {
                        let id = s.names.len() as u32;
                        s.names.push(name.to_string());
                        s.index.insert(name.to_string(), id);
                        id
                    }
                };
                s.by_addr.insert(addr, (id, off));
            }
        }
        s
    }

    /// The function holding `addr`: its name and entry address, if perf reported `addr`.
    pub fn function(&self, addr: u64) -> Option<(&str, u64)> {
        let &(id, off) = self.by_addr.get(&addr)?;
        Some((
            self.names.get(id as usize)?.as_str(),
            addr.wrapping_sub(off),
        ))
    }

    /// Number of addresses known.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// True when no address is known.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }
}
