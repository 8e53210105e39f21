//! ptsim: genuine Intel PT recordings, with their ground truth, from real program runs.
//!
//! A program runs under `qemu-x86_64` with the `ptsim-plugin` TCG plugin, which logs every
//! executed translation block ([`blocklog`]). The block-ending instructions give the exact
//! branch trace ([`truth`]), which is encoded as Intel PT packets ([`pt`]) and wrapped in a
//! perf.data file ([`perfdata`]) that `perf script --itrace=bep` decodes with perf's own
//! decoder. What perf should print is known exactly ([`expected`]), so the decode path can
//! be checked branch by branch without Intel hardware.
//!
//! The truth of a block log, here one made by hand: `call 0x2000` at 0x1000, the `ret`
//! at 0x2000, then the caller's next block. [`truth::derive`] gives each thread's branches
//! in order (a `Start` where tracing begins, then the call and the return).
//!
//! ```
//! use ptsim::blocklog::{BlockLog, Exec, TbDef, ThreadLog};
//! use ptsim::truth::{derive, StepKind};
//!
//! let block = |vaddr, insn: &[u8]| {
//!     Some(TbDef { vaddr, n_insns: 1, size: insn.len() as u32, last: insn.to_vec(), first: insn.to_vec() })
//! };
//! let log = BlockLog {
//!     pid: 1,
//!     tbs: vec![block(0x1000, &[0xe8, 0xfb, 0x0f, 0x00, 0x00]), block(0x2000, &[0xc3]), block(0x1005, &[0x90])],
//!     threads: vec![ThreadLog {
//!         tid: 1,
//!         execs: (0..3).map(|i| Exec { clock: i as u64, tb: i }).collect(),
//!         ..ThreadLog::default()
//!     }],
//!     ..BlockLog::default()
//! };
//! let (threads, _) = derive(&log, 1000);
//! let branches: Vec<(StepKind, u64, u64)> = threads[0]
//!     .steps
//!     .iter()
//!     .filter(|s| s.kind != StepKind::Start)
//!     .map(|s| (s.kind, s.from, s.to))
//!     .collect();
//! assert_eq!(branches, [(StepKind::Call, 0x1000, 0x2000), (StepKind::Return, 0x2000, 0x1005)]);
//! ```

pub mod blocklog;
pub mod expected;
pub mod perfdata;
pub mod perfscript;
pub mod pt;
pub mod shadow;
pub mod stacks;
pub mod testing;
pub mod truth;

use anyhow::{bail, Context, Result};
use blocklog::BlockLog;
use expected::{Branch, ThreadExpectation};
use perfdata::{Mmap, Recording, ThreadData, TimeConv};
use pt::{Faults, PtConfig};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use truth::ThreadTrace;

/// Faults to inject, spread evenly over the main thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultSpec {
    /// Number of overflows (OVF packets with lost branches).
    pub overflows: usize,
    /// Branches lost per overflow.
    pub overflow_len: usize,
    /// Number of corrupt packets.
    pub corruptions: usize,
}

impl FaultSpec {
    /// Parses `overflow=N,corrupt=N[,overflow-len=N]`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut f = FaultSpec {
            overflow_len: 200,
            ..Default::default()
        };
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .with_context(|| format!("fault {part:?} is not KEY=N"))?;
            let n: usize = v
                .parse()
                .with_context(|| format!("fault count {v:?} is not a number"))?;
            match k {
                "overflow" => f.overflows = n,
                "corrupt" => f.corruptions = n,
                "overflow-len" => f.overflow_len = n,
                _ => bail!("unknown fault {k:?} (expected overflow, corrupt, overflow-len)"),
            }
        }
        Ok(f)
    }

    fn place(&self, steps: usize) -> Faults {
        let spread = |n: usize| -> Vec<usize> { (1..=n).map(|k| steps * k / (n + 1)).collect() };
        Faults {
            overflows: spread(self.overflows)
                .into_iter()
                .map(|at| (at, self.overflow_len))
                .collect(),
            // Corruptions sit between overflows so their gaps do not overlap.
            corruptions: spread(self.corruptions)
                .into_iter()
                .map(|at| at + steps / (4 * (self.corruptions + 1)))
                .collect(),
        }
    }
}

/// Simulation settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Nominal core and TSC frequency: one instruction is one cycle at this rate.
    pub freq_hz: u64,
    /// Packet encoder settings.
    pub pt: PtConfig,
    /// Keep only the last this many bytes of each thread's trace, as `perf record -S` does.
    pub snapshot_size: Option<usize>,
    /// With `snapshot_size`: take this many snapshots at even intervals (the last at the
    /// end), as `magic-trace -multi-snapshot` / `perf record --switch-output` would.
    pub snapshots: usize,
    /// Faults to inject.
    pub faults: FaultSpec,
    /// Faults at chosen step indices of the main thread, instead of `faults`.
    pub main_faults: Option<Faults>,
    /// Perf time of TSC 0, in ns.
    pub time_zero: u64,
    /// PMU type number for `intel_pt`.
    pub pmu_type: u32,
    /// Nominal cycles a syscall or signal delivery spends in the kernel (untraced).
    pub kernel_cycles: u64,
    /// Also log the run in the plugin's stack mode (as ptscope's emulate backend
    /// records), into `emulate-blocks.log` beside the every-block log: a second copy of
    /// the plugin in the same qemu, so both logs are of one run.
    pub stack_log: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            freq_hz: 2_000_000_000,
            pt: PtConfig::default(),
            snapshot_size: None,
            snapshots: 1,
            faults: FaultSpec::default(),
            main_faults: None,
            time_zero: 1_000_000_000_000,
            pmu_type: 8,
            kernel_cycles: 1000,
            stack_log: false,
        }
    }
}

/// Figures about one simulation.
#[derive(Clone, Debug, Default)]
pub struct SimStats {
    /// Block executions logged.
    pub blocks: u64,
    /// Guest instructions executed.
    pub instructions: u64,
    /// Branch-trace steps (including not-taken conditionals).
    pub steps: u64,
    /// Reported branches in the ground truth.
    pub branches: u64,
    /// Bytes of PT data written.
    pub pt_bytes: u64,
    /// Executions of code outside any file mapping (perf cannot decode those).
    pub unmapped_blocks: u64,
    /// Time spent running the program under QEMU.
    pub qemu_time: Duration,
    /// Time spent reading the block log.
    pub read_time: Duration,
    /// Time spent deriving the branch trace from the blocks.
    pub derive_time: Duration,
    /// Time spent encoding packets and computing the expectation.
    pub encode_time: Duration,
    /// Time spent writing perf.data and the truth files.
    pub write_time: Duration,
}

/// The result of a simulation: the recording and what it must decode to.
pub struct Simulation {
    /// The perf.data contents.
    pub recording: Recording,
    /// Each thread's branches as perf must decode them (snapshot cut, fault gaps).
    pub expected: Vec<ThreadExpectation>,
    /// Each thread's full branch trace, including not-taken conditional branches.
    pub traces: Vec<ThreadTrace>,
    /// TSC to perf time conversion.
    pub time: TimeConv,
    /// TSC at instruction clock 0.
    pub tsc_offset: u64,
    /// Earlier snapshots when several were asked for (`recording`/`expected` is the last).
    pub earlier: Vec<Snapshot>,
    /// Figures.
    pub stats: SimStats,
}

impl Simulation {
    /// The file mapped at address `a` when the recording was made, if any.
    pub fn dso_at(&self, a: u64) -> Option<&str> {
        self.recording
            .mmaps
            .iter()
            .find(|m| a >= m.start && a < m.start + m.len)
            .map(|m| m.path.as_str())
    }

    /// Perf time in ns of an instruction clock value.
    pub fn ns(&self, clock: u64) -> u64 {
        self.time.tsc_to_ns(self.tsc_offset + clock)
    }

    /// Each thread's true branches: everything that executed.
    pub fn truth(&self) -> Vec<ThreadExpectation> {
        let ns = |c| self.ns(c);
        self.traces
            .iter()
            .map(|t| expected::truth(t, &ns, self.recording.pid))
            .collect()
    }
}

/// One snapshot of a multi-snapshot recording.
pub struct Snapshot {
    /// Its perf.data contents.
    pub recording: Recording,
    /// What perf must decode from it.
    pub expected: Vec<ThreadExpectation>,
}

/// Locates the plugin: `$PTSIM_PLUGIN`, else next to the running executable or its parent.
pub fn find_plugin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTSIM_PLUGIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let mut dir = exe.parent()?;
    for _ in 0..3 {
        for sub in ["", "release", "debug", "ptsim-plugin/release"] {
            let cand = dir.join(sub).join("libptsim_plugin.so");
            if cand.is_file() {
                return Some(cand);
            }
        }
        dir = dir.parent()?;
    }
    None
}

/// Runs `argv` under `qemu-x86_64` with the plugin, writing the block log to `log` (an
/// old one is removed first; the plugin creates it anew, never through a link).
///
/// qemu loads the plugin from a descriptor checked like ptscope's emulate backend's
/// (`ptscope_rootsafe::Loadable::trusted_file`), since this too may run as root.
pub fn run_qemu(plugin: &Path, log: &Path, argv: &[OsString]) -> Result<std::process::ExitStatus> {
    run_qemu_with(plugin, log, None, argv)
}

/// [`run_qemu`], with `stack` (a copy of the plugin at another path, and the log it
/// writes) also loaded, in stack mode: QEMU loads the copy as a plugin of its own.
pub fn run_qemu_with(
    plugin: &Path,
    log: &Path,
    stack: Option<(&Path, &Path)>,
    argv: &[OsString],
) -> Result<std::process::ExitStatus> {
    let Some((prog, args)) = argv.split_first() else {
        bail!("no program to run");
    };
    let code = ptscope_rootsafe::Loadable::trusted_file(plugin)
        .with_context(|| format!("refusing to load the qemu plugin {}", plugin.display()))?;
    match std::fs::symlink_metadata(log) {
        Ok(m) if !m.is_dir() => std::fs::remove_file(log)
            .with_context(|| format!("cannot remove the old block log {}", log.display()))?,
        _ => {}
    }
    let mut spec = OsString::from(code.path().as_os_str());
    spec.push(",out=");
    spec.push(log.as_os_str());
    let mut cmd = std::process::Command::new("qemu-x86_64");
    cmd.arg("-plugin").arg(spec);
    if let Some((copy, stack_log)) = stack {
        let mut spec = OsString::from(copy.as_os_str());
        spec.push(",mode=stack,out=");
        spec.push(stack_log.as_os_str());
        cmd.arg("-plugin").arg(spec);
    }
    cmd.arg(prog)
        .args(args)
        .status()
        .context("cannot run qemu-x86_64 (Debian package qemu-user)")
}

/// Builds the recording and its truth from a block log.
pub fn simulate(log: &BlockLog, comm: &str, cfg: &SimConfig) -> Simulation {
    let started = Instant::now();
    let (mut traces, tstats) = truth::derive(log, cfg.kernel_cycles);
    let derive_time = started.elapsed();
    // The main thread first, the others in order of appearance.
    traces.sort_by_key(|t| {
        (
            t.tid != log.pid,
            t.steps.first().map_or(u64::MAX, |s| s.clock),
        )
    });
    let time = TimeConv::for_frequency(cfg.freq_hz, cfg.time_zero);
    let ns = |clock: u64| time.tsc_to_ns(cfg.pt.tsc_offset + clock);

    let mut threads = Vec::new();
    let mut expecteds = Vec::new();
    let mut steps_total = 0u64;
    let mut encodings = Vec::with_capacity(traces.len());
    for (i, t) in traces.iter().enumerate() {
        steps_total += t.steps.len() as u64;
        let faults = if i == 0 {
            cfg.main_faults
                .clone()
                .unwrap_or_else(|| cfg.faults.place(t.steps.len()))
        } else {
            Faults::default()
        };
        let enc = pt::encode(&t.steps, &cfg.pt, &faults);
        let (aux, cut) = match cfg.snapshot_size {
            Some(n) if enc.data.len() > n => {
                let from = enc.data.len() - n;
                (enc.data[from..].to_vec(), Some(from))
            }
            _ => (enc.data.clone(), None),
        };
        expecteds.push(expected::expected(t, &enc, cut, None, &ns, log.pid));
        let first = t.steps.first().map_or(0, |s| s.clock);
        let last = t.steps.last().map_or(0, |s| s.clock);
        threads.push(ThreadData {
            tid: t.tid,
            start: ns(first).saturating_sub(2),
            exit: (i > 0).then(|| ns(last) + 1),
            aux,
            reference_tsc: cfg.pt.tsc_offset + last,
        });
        if cfg.snapshots > 1 {
            encodings.push(enc);
        }
    }
    let (mmaps, unmapped) = code_mappings(log, &traces, &ns);
    let config = perfdata::cfg_bits::TSC
        | perfdata::cfg_bits::CYC
        | if cfg.pt.retcomp {
            0
        } else {
            perfdata::cfg_bits::NORETCOMP
        }
        | cfg
            .pt
            .mtc_period
            .map_or(0, |p| perfdata::cfg_bits::MTC | ((p as u64 & 0xf) << 14))
        | perfdata::cfg_bits::PT
        | perfdata::cfg_bits::BRANCH;
    let recording = Recording {
        pid: log.pid,
        comm: comm.to_string(),
        threads,
        mmaps,
        time,
        pmu_type: cfg.pmu_type,
        config,
        max_nonturbo_ratio: cfg.pt.cbr as u64,
        snapshot: cfg.snapshot_size.is_some(),
        tsc_ctc_ratio: cfg.pt.tsc_ctc_ratio,
    };
    let earlier = match cfg.snapshot_size {
        Some(size) if cfg.snapshots > 1 => {
            earlier_snapshots(&recording, &traces, &encodings, size, cfg, &ns)
        }
        _ => Vec::new(),
    };
    let stats = SimStats {
        blocks: tstats.blocks,
        instructions: tstats.instructions,
        steps: steps_total,
        branches: traces
            .iter()
            .map(|t| expected::truth_iter(t, &ns).count() as u64)
            .sum(),
        pt_bytes: recording.threads.iter().map(|t| t.aux.len() as u64).sum(),
        unmapped_blocks: unmapped,
        qemu_time: Duration::ZERO,
        read_time: Duration::ZERO,
        derive_time,
        encode_time: started.elapsed() - derive_time,
        write_time: Duration::ZERO,
    };
    Simulation {
        recording,
        time,
        tsc_offset: cfg.pt.tsc_offset,
        expected: expecteds,
        traces,
        earlier,
        stats,
    }
}

/// The snapshots before the last: at even intervals of the instruction clock, each
/// thread's buffer ends right before its last PSB by then (so everything before has been
/// decoded) and holds the `size` bytes before that.
fn earlier_snapshots(
    last: &Recording,
    traces: &[ThreadTrace],
    encodings: &[pt::Encoded],
    size: usize,
    cfg: &SimConfig,
    ns: &dyn Fn(u64) -> u64,
) -> Vec<Snapshot> {
    let first = traces
        .iter()
        .filter_map(|t| t.steps.first().map(|s| s.clock))
        .min()
        .unwrap_or(0);
    let end = traces
        .iter()
        .filter_map(|t| t.steps.last().map(|s| s.clock))
        .max()
        .unwrap_or(0);
    let k_max = cfg.snapshots as u64;
    let mut out = Vec::new();
    for k in 1..k_max {
        let at = first + (end - first) * k / k_max;
        let mut threads = Vec::new();
        let mut expected = Vec::new();
        for ((t, enc), td) in traces.iter().zip(encodings).zip(&last.threads) {
            let Some(p) = enc
                .psbs
                .iter()
                .rev()
                .find(|p| p.clock <= at && p.steps_before > 0)
            else {
                continue;
            };
            let stop = p.offset;
            let from = stop.saturating_sub(size);
            let cut = (from > 0).then_some(from);
            expected.push(expected::expected(
                t,
                enc,
                cut,
                Some(p.steps_before),
                ns,
                last.pid,
            ));
            threads.push(ThreadData {
                tid: td.tid,
                start: td.start,
                exit: td.exit.filter(|&e| e <= ns(at)),
                aux: enc.data[from..stop].to_vec(),
                reference_tsc: cfg.pt.tsc_offset + at,
            });
        }
        out.push(Snapshot {
            recording: Recording {
                pid: last.pid,
                comm: last.comm.clone(),
                threads,
                mmaps: last.mmaps.clone(),
                time: last.time,
                pmu_type: last.pmu_type,
                config: last.config,
                max_nonturbo_ratio: last.max_nonturbo_ratio,
                snapshot: true,
                tsc_ctc_ratio: last.tsc_ctc_ratio,
            },
            expected,
        });
    }
    out
}

/// The file mappings that hold executed code, each announced when first seen.
fn code_mappings(
    log: &BlockLog,
    traces: &[ThreadTrace],
    ns: &dyn Fn(u64) -> u64,
) -> (Vec<Mmap>, u64) {
    let mut executed: Vec<u64> = log.tbs.iter().flatten().map(|t| t.vaddr).collect();
    executed.sort_unstable();
    let mut out: Vec<Mmap> = Vec::new();
    for snap in &log.maps {
        for m in &snap.entries {
            if m.path.is_empty() || !m.path.starts_with('/') {
                continue;
            }
            let i = executed.partition_point(|&a| a < m.start);
            if executed.get(i).is_none_or(|&a| a >= m.end) {
                continue;
            }
            if out
                .iter()
                .any(|o| o.start == m.start && o.len == m.end - m.start && o.path == m.path)
            {
                continue;
            }
            out.push(Mmap {
                time: ns(snap.clock).saturating_sub(1),
                tid: log.pid,
                start: m.start,
                len: m.end - m.start,
                pgoff: m.pgoff,
                maj: m.maj,
                min: m.min,
                ino: m.ino,
                path: m.path.clone(),
            });
        }
    }
    // A thread's own clock can trail the global one the snapshots carry: announce each
    // mapping before its first use by any thread, too.
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by_key(|&i| out[i].start);
    let mut first_use = vec![u64::MAX; out.len()];
    for t in traces {
        for s in &t.steps {
            if s.to == 0 {
                continue;
            }
            let k = order.partition_point(|&i| out[i].start <= s.to);
            if let Some(&i) = k.checked_sub(1).and_then(|k| order.get(k)) {
                if s.to < out[i].start + out[i].len && s.clock < first_use[i] {
                    first_use[i] = s.clock;
                }
            }
        }
    }
    for (m, &c) in out.iter_mut().zip(&first_use) {
        if c != u64::MAX {
            m.time = m.time.min(ns(c).saturating_sub(1));
        }
    }
    let mapped = |a: u64| out.iter().any(|m| a >= m.start && a < m.start + m.len);
    let mut unmapped = 0u64;
    let unmapped_tbs: Vec<bool> = log
        .tbs
        .iter()
        .map(|t| t.as_ref().is_some_and(|t| !mapped(t.vaddr)))
        .collect();
    for t in &log.threads {
        unmapped += t
            .execs
            .iter()
            .filter(|e| unmapped_tbs.get(e.tb as usize).copied().unwrap_or(false))
            .count() as u64;
    }
    (out, unmapped)
}

/// What a full simulation run produced on disk.
pub struct RunOutput {
    /// The simulation.
    pub sim: Simulation,
    /// The program's exit status under QEMU.
    pub status: std::process::ExitStatus,
}

/// Runs a program under QEMU, then writes `perf.data` to `out` and the truth files beside it
/// (see [`write_outputs`]).
pub fn run(argv: &[OsString], out: &Path, cfg: &SimConfig, tsv: bool) -> Result<RunOutput> {
    let plugin = find_plugin().context(
        "cannot find libptsim_plugin.so: build it with `cargo build -p ptsim-plugin` or set PTSIM_PLUGIN",
    )?;
    run_with_plugin(&plugin, argv, out, cfg, tsv)
}

/// [`run`] with an explicit plugin path.
pub fn run_with_plugin(
    plugin: &Path,
    argv: &[OsString],
    out: &Path,
    cfg: &SimConfig,
    tsv: bool,
) -> Result<RunOutput> {
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let log_path = dir.join("ptsim-blocks.log");
    let stack = if cfg.stack_log {
        let copy = dir.join("ptsim-plugin-stack.so");
        std::fs::copy(plugin, &copy)
            .with_context(|| format!("cannot copy the plugin to {}", copy.display()))?;
        Some((copy, dir.join("emulate-blocks.log")))
    } else {
        None
    };
    let t0 = Instant::now();
    let status = run_qemu_with(
        plugin,
        &log_path,
        stack.as_ref().map(|(c, l)| (c.as_path(), l.as_path())),
        argv,
    )?;
    let qemu_time = t0.elapsed();
    let t_read = Instant::now();
    let log = BlockLog::read(&log_path)?;
    let read_time = t_read.elapsed();
    let comm = argv
        .first()
        .and_then(|p| Path::new(p).file_name())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut sim = simulate(&log, &comm, cfg);
    sim.stats.qemu_time = qemu_time;
    sim.stats.read_time = read_time;
    let t1 = Instant::now();
    write_outputs(&sim, out, tsv)?;
    sim.stats.write_time = t1.elapsed();
    Ok(RunOutput { sim, status })
}

/// Writes `perf.data` to `out` and, beside it, `ground-truth.ptb` (every branch that ran)
/// and `expected.ptb` (what perf must decode), plus `.tsv` versions of both if `tsv`.
///
/// With several snapshots, snapshot `k` (from 1, chronological) goes to `<out>.000k` with
/// `expected.000k.ptb`, names that sort in order as perf's `--switch-output` ones do.
pub fn write_outputs(sim: &Simulation, out: &Path, tsv: bool) -> Result<()> {
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let write_rec = |rec: &Recording, path: &Path| -> Result<()> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        rec.write(&mut w)
            .and_then(|_| std::io::Write::flush(&mut w))
            .with_context(|| format!("cannot write {}", path.display()))
    };
    let write_exp = |threads: &[ThreadExpectation], path: &Path| -> Result<()> {
        let res = (|| -> std::io::Result<()> {
            let f = std::io::BufWriter::new(std::fs::File::create(path)?);
            let mut bw = expected::BinWriter::new(f, threads.len() as u32)?;
            for t in threads {
                bw.thread(
                    t.pid,
                    t.tid,
                    t.branches.len() as u64,
                    t.branches.iter().copied(),
                )?;
            }
            bw.finish()?;
            Ok(())
        })();
        res.with_context(|| format!("cannot write {}", path.display()))
    };
    if sim.earlier.is_empty() {
        write_rec(&sim.recording, out)?;
    } else {
        let all = sim
            .earlier
            .iter()
            .map(|s| (&s.recording, &s.expected))
            .chain([(&sim.recording, &sim.expected)]);
        for (k, (rec, exp)) in all.enumerate() {
            let mut name = out.as_os_str().to_owned();
            name.push(format!(".{:04}", k + 1));
            write_rec(rec, Path::new(&name))?;
            write_exp(exp, &dir.join(format!("expected.{:04}.ptb", k + 1)))?;
        }
    }

    let ns = |c| sim.ns(c);
    let pid = sim.recording.pid;
    let truth_path = dir.join("ground-truth.ptb");
    let res = (|| -> std::io::Result<()> {
        let f = std::io::BufWriter::new(std::fs::File::create(&truth_path)?);
        let mut bw = expected::BinWriter::new(f, sim.traces.len() as u32)?;
        for t in &sim.traces {
            let n = expected::truth_iter(t, &ns).count() as u64;
            bw.thread(pid, t.tid, n, expected::truth_iter(t, &ns))?;
        }
        bw.finish()?;
        Ok(())
    })();
    res.with_context(|| format!("cannot write {}", truth_path.display()))?;
    if sim.earlier.is_empty() {
        write_exp(&sim.expected, &dir.join("expected.ptb"))?;
    }
    if tsv {
        expected::write_tsv(&dir.join("ground-truth.tsv"), &sim.truth())?;
        expected::write_tsv(&dir.join("expected.tsv"), &sim.expected)?;
    }
    Ok(())
}

/// The symbols naming the true stacks of `sim`, recorded at `out`: from perf's decode of
/// `out`, or of a full recording of the same execution (a temporary `symbols.perf.data`
/// beside `out`) when `sim` is a snapshot or has faults, so frames entered before a
/// snapshot or inside a gap are named too.
pub fn truth_symbols(sim: &Simulation, log: &BlockLog, out: &Path) -> Result<perfscript::Symbols> {
    let full = sim.recording.snapshot || sim.stats.pt_bytes == 0 || {
        let g: usize = sim
            .expected
            .iter()
            .map(|t| {
                t.branches
                    .iter()
                    .filter(|b| b.kind == expected::BranchKind::Error)
                    .count()
            })
            .sum();
        g > 0
    };
    if full {
        let dir = out
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let path = dir.join("symbols.perf.data");
        let plain = simulate(log, &sim.recording.comm, &SimConfig::default());
        let f = std::fs::File::create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = std::io::BufWriter::new(f);
        plain
            .recording
            .write(&mut w)
            .and_then(|_| std::io::Write::flush(&mut w))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let syms = perfscript::Symbols::from_perf(&path);
        let _ = std::fs::remove_file(&path);
        syms
    } else {
        perfscript::Symbols::from_perf(out)
    }
}

/// The true stacks of every thread of `sim`, named by perf.
///
/// Names come from perf's decode of a full recording of the same execution (written to a
/// temporary `symbols.perf.data` beside `out` when `sim` is a snapshot or has faults), so
/// frames entered before a snapshot are named too. With `perf_clock`, times are those perf
/// prints for the recording at `out` ([`stacks::perf_clock_times`]) instead of true times.
pub fn true_stacks(
    sim: &Simulation,
    log: &BlockLog,
    out: &Path,
    perf_clock: bool,
) -> Result<Vec<stacks::StackTimeline>> {
    let syms = truth_symbols(sim, log, out)?;
    let ns = |c| sim.ns(c);
    let dso = |a: u64| sim.dso_at(a);
    if !perf_clock {
        return Ok(sim
            .traces
            .iter()
            .map(|t| stacks::timeline(t, &ns, &syms, &dso))
            .collect());
    }
    let reported = perfscript::decode(out)?;
    let mut res = Vec::with_capacity(sim.traces.len());
    for t in &sim.traces {
        let mine: Vec<expected::Branch> = reported
            .iter()
            .filter(|b| b.tid == t.tid)
            .copied()
            .collect();
        let Some(times) = stacks::perf_clock_times(t, &mine, &ns) else {
            bail!(
                "thread {}: perf's branches are not the tail of the truth (faults or \
                 unpredictable stretches); use true times",
                t.tid
            );
        };
        res.push(stacks::timeline_at(t, &times, &syms, &dso));
    }
    Ok(res)
}

/// Convenience for tests: all branches of all threads, flattened in thread order.
pub fn flatten(threads: &[ThreadExpectation]) -> Vec<Branch> {
    threads
        .iter()
        .flat_map(|t| t.branches.iter().copied())
        .collect()
}

/// Asks the kernel to back a large, not yet touched vector with transparent huge pages.
///
/// The simulation fills multi-gigabyte vectors once; with 4 KiB pages most of its time
/// goes to page faults (on these KVM guests THP is in `madvise` mode). Only advice:
/// failures are ignored.
pub(crate) fn advise_huge<T>(v: &Vec<T>) {
    const HUGE: usize = 2 << 20;
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < 4 * HUGE {
        return;
    }
    let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (v.as_ptr() as usize + bytes) & !(HUGE - 1);
    if end <= start {
        return;
    }
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    /// `MADV_HUGEPAGE` on Linux.
    const MADV_HUGEPAGE: i32 = 14;
    // SAFETY: the range lies inside the vector's own allocation; advice does not change
    // its contents or validity.
    unsafe {
        madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
    }
}
