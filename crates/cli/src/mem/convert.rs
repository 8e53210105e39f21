//! `ptscope mem convert`: memtrace → Fuchsia trace for Perfetto.
//!
//! Two passes over the trace: the first finds the duration and the biggest
//! allocation sites (by sampled bytes), the second aggregates per time bucket.
//! Output: counters for the estimated live heap (minor/major/external), allocation,
//! promotion and collection rates, one live-bytes counter per top site, and one
//! track per top site with a slice spanning its activity whose arguments give its
//! totals, location and heaviest backtrace.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use memtrace::{AllocSource, EventKind, Reader};
use ptscope_fxt::{Arg, ArgValue, FxtWriter};
use std::collections::HashMap;

/// Conversion parameters.
pub struct Options {
    /// Counter resolution in µs (raised automatically to keep ≤ 20 000 buckets).
    pub bucket_us: u64,
    /// Number of allocation sites shown.
    pub top_sites: usize,
}

#[derive(Default, Clone)]
struct Site {
    samples: i64,
    allocs: u64,
    first: i64,
    last: i64,
    /// Heaviest backtrace seen (samples, codes).
    heaviest: (i64, Vec<u64>),
}

#[derive(Default, Clone)]
struct Bucket {
    alloc: [i64; 3],
    promoted: i64,
    collected: i64,
    live: [i64; 3],
    site_live: Vec<i64>,
}

fn kind(s: AllocSource) -> usize {
    match s {
        AllocSource::Minor => 0,
        AllocSource::Major => 1,
        AllocSource::External => 2,
    }
}

fn name_of(db: &memtrace::LocationDb, code: u64) -> (String, String) {
    match db.locations(code).and_then(|l| l.last()) {
        Some(l) => (
            String::from_utf8_lossy(db.string(l.defname)).into_owned(),
            format!(
                "{}:{}",
                String::from_utf8_lossy(db.string(l.filename)),
                l.line
            ),
        ),
        None => (format!("${code:x}"), String::new()),
    }
}

/// Converts the trace at `input` into `output` (`.gz` names are compressed).
pub fn convert(input: &Path, output: &Path, opts: &Options) -> anyhow::Result<()> {
    // Pass 1: sites and duration.
    let mut r = Reader::open(input)?;
    let mut sites: HashMap<u64, Site> = HashMap::new();
    let mut tmax = 0i64;
    let pass1 = (|| -> memtrace::Result<()> {
        while let Some(ev) = r.next_event()? {
            tmax = tmax.max(ev.time);
            if let EventKind::Alloc(a) = ev.kind {
                let Some(&leaf) = a.backtrace.last() else {
                    continue;
                };
                let s = sites.entry(leaf).or_insert_with(|| Site {
                    first: ev.time,
                    ..Default::default()
                });
                s.samples += a.nsamples;
                s.allocs += 1;
                s.first = s.first.min(ev.time);
                s.last = s.last.max(ev.time);
                if a.nsamples > s.heaviest.0 {
                    s.heaviest = (a.nsamples, a.backtrace.to_vec());
                }
            }
        }
        Ok(())
    })();
    // A damaged trace still converts up to the damage.
    if let Err(e) = pass1 {
        crate::messages::note(format!(
            "{}: {e}; converting the events before it",
            input.display()
        ));
    }
    let info = r.info().clone();
    let mut top: Vec<(u64, Site)> = sites.into_iter().collect();
    top.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(&b.0)));
    top.truncate(opts.top_sites);
    let site_index: HashMap<u64, usize> =
        top.iter().enumerate().map(|(i, (c, _))| (*c, i)).collect();
    let labels: Vec<(String, String)> = top.iter().map(|(c, _)| name_of(r.db(), *c)).collect();
    let backtraces: Vec<String> = top
        .iter()
        .map(|(_, s)| {
            s.heaviest
                .1
                .iter()
                .map(|&c| name_of(r.db(), c).0)
                .collect::<Vec<_>>()
                .join(" → ")
        })
        .collect();
    let bucket_us = opts.bucket_us.max((tmax.max(0) as u64) / 20_000 + 1) as i64;

    // Pass 2: per-bucket deltas.
    let mut r = Reader::open(input)?;
    let mut buckets: BTreeMap<i64, Bucket> = BTreeMap::new();
    let mut live: HashMap<u64, (i64, usize, Option<usize>)> = HashMap::new();
    let nsites = top.len();
    let pass2 = (|| -> memtrace::Result<()> {
        while let Some(ev) = r.next_event()? {
            let b = buckets
                .entry(ev.time.max(0) / bucket_us)
                .or_insert_with(|| Bucket {
                    site_live: vec![0; nsites],
                    ..Default::default()
                });
            match ev.kind {
                EventKind::Alloc(a) => {
                    let k = kind(a.source);
                    let site = a.backtrace.last().and_then(|c| site_index.get(c).copied());
                    b.alloc[k] += a.nsamples;
                    b.live[k] += a.nsamples;
                    if let Some(s) = site {
                        b.site_live[s] += a.nsamples;
                    }
                    live.insert(a.obj_id, (a.nsamples, k, site));
                }
                EventKind::Promote { obj_id, .. } => {
                    if let Some(o) = live.get_mut(&obj_id) {
                        if o.1 == 0 {
                            b.promoted += o.0;
                            b.live[0] -= o.0;
                            b.live[1] += o.0;
                            o.1 = 1;
                        }
                    }
                }
                EventKind::Collect { obj_id, .. } => {
                    if let Some((n, k, site)) = live.remove(&obj_id) {
                        b.collected += n;
                        b.live[k] -= n;
                        if let Some(s) = site {
                            b.site_live[s] -= n;
                        }
                    }
                }
            }
        }
        Ok(())
    })();
    if let Err(e) = pass2 {
        crate::messages::note(format!("{}: {e}", input.display()));
    }

    let out = ptscope_output::open_trace_output(output)
        .with_context(|| format!("{}: cannot create", output.display()))?;
    let mut w = FxtWriter::new(out);
    let exe = String::from_utf8_lossy(&info.executable_name).into_owned();
    let pid = (info.pid as u32).max(1);
    w.process(pid, &format!("memtrace {exe} [pid={}]", info.pid as i64));
    w.thread_object(1, pid, "heap (sampled estimate)");
    let heap = w.thread(pid, 1);
    let bytes_per_sample = f64::from(info.word_size / 8) / info.sample_rate;
    let to_bytes = |n: i64| n as f64 * bytes_per_sample;
    let per_s = 1e6 / bucket_us as f64;
    let ns = |us: i64| (us.max(0) as u64) * 1000;
    let mut cur_live = [0i64; 3];
    let mut cur_site = vec![0i64; nsites];
    let mut prev_bucket: Option<i64> = None;
    for (&bi, b) in &buckets {
        // Rates fall back to zero in empty buckets.
        if let Some(p) = prev_bucket {
            if bi > p + 1 {
                let t = ns((p + 1) * bucket_us);
                w.counter(
                    heap,
                    "memtrace",
                    "allocation rate (bytes/s)",
                    t,
                    1,
                    &rate_args([0.0; 3]),
                );
                w.counter(
                    heap,
                    "memtrace",
                    "promotion/collection rate (bytes/s)",
                    t,
                    2,
                    &pc_args(0.0, 0.0),
                );
            }
        }
        prev_bucket = Some(bi);
        let t = ns(bi * bucket_us);
        for (cur, d) in cur_live.iter_mut().zip(b.live) {
            *cur += d;
        }
        let live_args = [
            Arg::new("minor", ArgValue::Double(to_bytes(cur_live[0]))),
            Arg::new("major", ArgValue::Double(to_bytes(cur_live[1]))),
            Arg::new("external", ArgValue::Double(to_bytes(cur_live[2]))),
        ];
        w.counter(heap, "memtrace", "live heap (bytes)", t, 0, &live_args);
        let alloc = [b.alloc[0], b.alloc[1], b.alloc[2]].map(|n| to_bytes(n) * per_s);
        w.counter(
            heap,
            "memtrace",
            "allocation rate (bytes/s)",
            t,
            1,
            &rate_args(alloc),
        );
        w.counter(
            heap,
            "memtrace",
            "promotion/collection rate (bytes/s)",
            t,
            2,
            &pc_args(to_bytes(b.promoted) * per_s, to_bytes(b.collected) * per_s),
        );
        for (s, d) in b.site_live.iter().enumerate() {
            if *d != 0 {
                cur_site[s] += d;
                let name = format!("live: #{} {}", s + 1, labels[s].0);
                let args = [Arg::new("bytes", ArgValue::Double(to_bytes(cur_site[s])))];
                w.counter(heap, "memtrace", &name, t, 100 + s as u64, &args);
            }
        }
    }
    for (i, (_, s)) in top.iter().enumerate() {
        let tid = 10 + i as u32;
        let (name, loc) = &labels[i];
        w.thread_object(tid, pid, &format!("site #{} {}", i + 1, name));
        let th = w.thread(pid, tid);
        let args = [
            Arg::new("rank", ArgValue::Int(i as i64 + 1)),
            Arg::new(
                "allocated bytes (est.)",
                ArgValue::Double(to_bytes(s.samples)),
            ),
            Arg::new("samples", ArgValue::Int(s.samples)),
            Arg::new("sampled allocations", ArgValue::UInt(s.allocs)),
            Arg::new("location", ArgValue::Str(loc)),
            Arg::new("heaviest backtrace", ArgValue::InlineStr(&backtraces[i])),
        ];
        let end = ns(s.last).max(ns(s.first) + 1000);
        w.complete(th, "memtrace", name, ns(s.first), end, &args);
    }
    let out = w
        .finish()
        .with_context(|| format!("{}: write failed", output.display()))?;
    out.finish()
        .with_context(|| format!("{}: write failed", output.display()))?;
    Ok(())
}

fn rate_args(v: [f64; 3]) -> [Arg<'static>; 3] {
    [
        Arg::new("minor", ArgValue::Double(v[0])),
        Arg::new("major", ArgValue::Double(v[1])),
        Arg::new("external", ArgValue::Double(v[2])),
    ]
}

fn pc_args(promoted: f64, collected: f64) -> [Arg<'static>; 2] {
    [
        Arg::new("promoted", ArgValue::Double(promoted)),
        Arg::new("collected", ArgValue::Double(collected)),
    ]
}
