//! The `perf record` command line, built from a [`RecordPlan`] in magic-trace's argument order:
//!
//! ```text
//! perf record -o DIR/perf.data --timestamp --event=PRIMARY [--overwrite] [--switch-output=signal]
//!   (-p | --per-thread -t) PID,PID [--snapshot|--snapshot=e] [--control=…] [--kcore] [-m,PAGES]
//!   [--call-graph X --switch-events]
//! ```

use crate::error::Result;
use crate::Error;
use ptscope_event::TraceScope;
use std::ffi::OsString;
use std::path::PathBuf;

/// How to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Intel Processor Trace: every branch, in a snapshot ring.
    Pt,
    /// Timer sampling with call stacks (`cycles`, or `cpu-clock` without a hardware PMU).
    Sample,
}

/// Intel PT timing packets, each `None` when left to perf's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PtTiming {
    /// Cycle-accurate packets.
    pub cyc: Option<bool>,
    /// CYC threshold.
    pub cyc_thresh: Option<u32>,
    /// Mini time counter packets.
    pub mtc: Option<bool>,
    /// MTC period.
    pub mtc_period: Option<u32>,
    /// Disable return compression (every return gets a packet).
    pub noretcomp: Option<bool>,
    /// PSB period.
    pub psb_period: Option<u32>,
}

/// `--timer-resolution`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimerResolution {
    /// PT: no timing packets; sampling: 1 kHz.
    Low,
    /// PT: cycle-accurate; sampling: 10 kHz.
    #[default]
    Normal,
    /// PT: cycle-accurate without return compression; sampling: the kernel's maximum rate.
    High,
    /// Sampling at this frequency (Hz).
    Sample(u32),
    /// PT with explicit timing packets.
    Custom(PtTiming),
}

impl TimerResolution {
    /// Parses `low`, `normal`, `high`, `sample:FREQ` or `custom:cyc=1,mtc_period=0,…`.
    pub fn parse(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "low" => TimerResolution::Low,
            "normal" => TimerResolution::Normal,
            "high" => TimerResolution::High,
            _ => {
                if let Some(f) = lower.strip_prefix("sample:") {
                    match f.parse::<u32>() {
                        Ok(n) if n > 0 => TimerResolution::Sample(n),
                        _ => return Err(Error::BadSampleFrequency(s.to_owned())),
                    }
                } else if let Some(kv) = lower.strip_prefix("custom:") {
                    let mut t = PtTiming::default();
                    for pair in kv.split(',').filter(|p| !p.is_empty()) {
                        let Some((k, v)) = pair.split_once('=') else {
                            return Err(Error::TimingNotKeyValue {
                                pair: pair.to_owned(),
                                given: s.to_owned(),
                            });
                        };
                        let Ok(n) = v.parse::<u32>() else {
                            return Err(Error::TimingValueNotANumber {
                                pair: pair.to_owned(),
                                given: s.to_owned(),
                            });
                        };
                        match k {
                            "cyc" => t.cyc = Some(n != 0),
                            "cyc_thresh" => t.cyc_thresh = Some(n),
                            "mtc" => t.mtc = Some(n != 0),
                            "mtc_period" => t.mtc_period = Some(n),
                            "noretcomp" => t.noretcomp = Some(n != 0),
                            "psb_period" => t.psb_period = Some(n),
                            _ => {
                                return Err(Error::UnknownTimingSetting {
                                    key: k.to_owned(),
                                    given: s.to_owned(),
                                })
                            }
                        }
                    }
                    TimerResolution::Custom(t)
                } else {
                    return Err(Error::NotATimerResolution(s.to_owned()));
                }
            }
        })
    }
}

/// `--callgraph` for sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    /// Frame pointers: cheap, needs `-fno-omit-frame-pointer`.
    Fp,
    /// DWARF unwinding of a copied stack: works everywhere, heavier.
    Dwarf,
    /// Hardware last-branch records (Intel).
    Lbr,
}

impl CallGraph {
    /// perf's name.
    pub fn name(self) -> &'static str {
        match self {
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
            CallGraph::Lbr => "lbr",
        }
    }
}

/// How ptscope tells perf to snapshot and stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlChannel {
    /// Signals only (perf < 5.10).
    Signals,
    /// `--control=fifo:CTL,ACK`.
    Fifo {
        /// Command fifo.
        ctl: PathBuf,
        /// Acknowledgement fifo.
        ack: PathBuf,
    },
    /// `--control=fd:CTL,ACK` (inherited descriptors, as magic-trace passes them).
    Fd {
        /// Command descriptor in perf.
        ctl: i32,
        /// Acknowledgement descriptor in perf.
        ack: i32,
    },
}

/// When the PT snapshot is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotWhen {
    /// When recording ends (Ctrl-C or the program exits).
    AtExit,
    /// When the trigger fires.
    OnTrigger,
}

/// Everything that decides the `perf record` command line.
#[derive(Clone, Debug)]
pub struct RecordPlan {
    /// The perf binary.
    pub perf: PathBuf,
    /// `DIR/perf.data`.
    pub output: PathBuf,
    /// PT or sampling.
    pub backend: Backend,
    /// User, kernel or both.
    pub scope: TraceScope,
    /// Timing detail or sampling rate.
    pub timer: TimerResolution,
    /// Processes (or threads) to record; the first is the head.
    pub pids: Vec<u32>,
    /// Record only the given threads (`--per-thread -t`, no inheritance) instead of the
    /// whole process tree (`-p`: every thread, and every thread and child process
    /// created later, exec'd or not).
    pub single_thread: bool,
    /// A snapshot on every trigger hit, each in its own file.
    pub multi_snapshot: bool,
    /// Record everything, no snapshot ring.
    pub full_execution: bool,
    /// When the snapshot is taken.
    pub snapshot_when: SnapshotWhen,
    /// Ring size in 4 KiB pages (a power of two).
    pub snapshot_pages: Option<u32>,
    /// Sampling: keep (at least) the last this many seconds instead of a size.
    pub snapshot_seconds: Option<u32>,
    /// Sampling call stacks.
    pub callgraph: CallGraph,
    /// How perf is controlled.
    pub control: ControlChannel,
    /// perf supports `--snapshot=e`.
    pub snapshot_at_exit: bool,
    /// perf supports `--kcore`.
    pub kcore: bool,
    /// perf supports `--buildid-mmap`.
    pub buildid_mmap: bool,
    /// The PT PMU has `psb_cyc` (else Normal/High fall back to Low).
    pub psb_cyc: bool,
    /// A hardware PMU exists (`cycles`); else sampling uses `cpu-clock`.
    pub hardware_pmu: bool,
    /// The kernel's maximum sampling rate (High resolution).
    pub max_sample_rate: u32,
    /// Online CPUs: perf keeps a ring buffer per CPU.
    pub cpus: u32,
    /// Sampling: also sample `sched:sched_switch` with call stacks, so each time off CPU
    /// has the stack the thread waited in (see `docs/sampling.md`).
    pub switch_stacks: bool,
}

impl RecordPlan {
    /// A plan with ptscope's defaults, to be adjusted field by field.
    pub fn new(perf: impl Into<PathBuf>, output: impl Into<PathBuf>, pids: Vec<u32>) -> Self {
        RecordPlan {
            perf: perf.into(),
            output: output.into(),
            backend: Backend::Pt,
            scope: TraceScope::Userspace,
            timer: TimerResolution::Normal,
            pids,
            single_thread: false,
            multi_snapshot: false,
            full_execution: false,
            snapshot_when: SnapshotWhen::AtExit,
            snapshot_pages: None,
            snapshot_seconds: None,
            callgraph: CallGraph::Dwarf,
            control: ControlChannel::Signals,
            snapshot_at_exit: true,
            kcore: true,
            buildid_mmap: true,
            psb_cyc: true,
            hardware_pmu: true,
            max_sample_rate: 100_000,
            // SAFETY: sysconf has no preconditions.
            cpus: u32::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1),
            switch_stacks: false,
        }
    }

    /// Whether a PT snapshot ring is used (not with sampling or full execution).
    pub fn uses_snapshot_ring(&self) -> bool {
        self.backend == Backend::Pt && !self.full_execution
    }

    /// The timer resolution actually used: Normal/High need `psb_cyc`.
    pub fn effective_timer(&self) -> TimerResolution {
        match (self.backend, self.timer, self.psb_cyc) {
            (Backend::Pt, TimerResolution::Normal | TimerResolution::High, false) => {
                TimerResolution::Low
            }
            (_, t, _) => t,
        }
    }

    /// Notes for the user about settings that were adjusted (printed before recording).
    pub fn notices(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.effective_timer() != self.timer {
            v.push("this CPU's PT has no cycle-accurate timing (caps/psb_cyc); timing will be ~1 µs instead of ~10 ns".into());
        }
        if let Some((file, files)) = self.sampling_ring() {
            let mib = |b: u64| b as f64 / f64::from(1 << 20);
            v.push(format!(
                "sampling keeps the last moments in at most {:.0} MiB of disk ({files} perf.data files of {:.1} MiB{}); \
                 --snapshot-size sets that bound, --full-execution keeps everything",
                mib(self.sampling_bound().unwrap_or(0)),
                mib(file),
                match (self.callgraph, self.dwarf_stack_size()) {
                    (CallGraph::Dwarf, Some(d)) if d < 8192 =>
                        format!(", {d} bytes of stack copied per sample for unwinding"),
                    _ => String::new(),
                }
            ));
        }
        if let Some((piece, files)) = self.snapshot_ring() {
            v.push(format!(
                "each snapshot keeps the last moments before its trigger hit in at most {:.0} MiB \
                 of disk ({files} pieces of {:.1} MiB); --snapshot-size sets that bound",
                self.sampling_bound().unwrap_or(0) as f64 / f64::from(1 << 20),
                piece as f64 / f64::from(1 << 20)
            ));
        }
        if let Some((secs, files)) = self.sampling_time_ring() {
            // Each sample: the stack copy (dwarf), registers, callchain and header.
            let per_sample: u64 = match self.callgraph {
                CallGraph::Dwarf => 8192 + 300,
                _ => 300,
            };
            let rate = u64::from(self.sample_rate()) * per_sample;
            v.push(format!(
                "sampling keeps at least the last {} s (up to {files} perf.data files of {secs} s \
                 each, the newest partly filled); the disk that takes grows with the threads \
                 running: about {:.0} MB per second of CPU time at this sample rate",
                self.snapshot_seconds.unwrap_or(0),
                rate as f64 / 1e6
            ));
        }
        if self.backend == Backend::Sample && self.timer == TimerResolution::High {
            // Measured (BENCHMARKS.md): gzip of 20 MB on a 2-core KVM guest took 0.77 s
            // alone, 0.9-1.0 s sampled at 10 kHz, 15-21 s at 100 kHz.
            v.push(format!(
                "the high timer resolution samples {} times a second per thread: expect the program \
                 to run 20-30 times slower (normal, 10000 a second, costs about 1.2x) and, with \
                 dwarf stacks, perf to write about 250 MB per second of CPU time",
                self.max_sample_rate
            ));
        }
        if self.backend == Backend::Pt && self.scope.includes_kernel() && !self.kcore {
            v.push("this perf is older than 5.5 and has no --kcore; kernel traces may decode less reliably".into());
        }
        v
    }

    /// Checks combinations that cannot work; the message says what to use instead.
    pub fn validate(&self) -> Result<(), Error> {
        if self.pids.is_empty() {
            return Err(Error::NoProcess);
        }
        match (self.backend, self.timer) {
            (Backend::Sample, TimerResolution::Custom(_)) => {
                return Err(Error::CustomTimingWhenSampling)
            }
            (Backend::Pt, TimerResolution::Sample(_)) => return Err(Error::SampleRateWithPt),
            _ => {}
        }
        if let Some(secs) = self.snapshot_seconds {
            if self.backend == Backend::Pt {
                return Err(Error::SnapshotDurationWithPt { secs });
            }
            if self.full_execution {
                return Err(Error::SnapshotDurationWithFullExecution);
            }
            if self.multi_snapshot {
                return Err(Error::SnapshotDurationWithMultiSnapshot);
            }
            if secs == 0 {
                return Err(Error::ZeroSnapshotDuration);
            }
        }
        if let Some(pages) = self.snapshot_pages {
            if !pages.is_power_of_two() {
                return Err(Error::SnapshotSizeNotPowerOfTwo { pages });
            }
        }
        if self.backend == Backend::Sample && self.callgraph == CallGraph::Lbr && !self.hardware_pmu
        {
            return Err(Error::LbrWithoutPmu);
        }
        Ok(())
    }

    fn primary_event(&self) -> String {
        let sel = self.scope.modifier();
        match self.backend {
            Backend::Pt => {
                let cfg = match self.effective_timer() {
                    TimerResolution::Low | TimerResolution::Sample(_) => String::new(),
                    TimerResolution::Normal => "cyc=1,cyc_thresh=1,mtc_period=0".into(),
                    TimerResolution::High => "cyc=1,cyc_thresh=1,mtc_period=0,noretcomp=1".into(),
                    TimerResolution::Custom(t) => {
                        let b = |x: bool| u32::from(x);
                        [
                            t.cyc.map(|v| format!("cyc={}", b(v))),
                            t.cyc_thresh.map(|v| format!("cyc_thresh={v}")),
                            t.mtc.map(|v| format!("mtc={}", b(v))),
                            t.mtc_period.map(|v| format!("mtc_period={v}")),
                            t.noretcomp.map(|v| format!("noretcomp={}", b(v))),
                            t.psb_period.map(|v| format!("psb_period={v}")),
                        ]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(",")
                    }
                };
                format!("intel_pt/{cfg}/{sel}")
            }
            Backend::Sample => {
                let freq = self.sample_rate();
                // Without a hardware PMU (VMs, these AMD guests) `cycles` does not open.
                let name = if self.hardware_pmu {
                    "cycles"
                } else {
                    "cpu-clock"
                };
                // A user-space trace still samples in the kernel (no modifier: both
                // levels), so time in system calls has a user stack and a `[kernel: …]`
                // frame, as samply shows it; the kernel's own frames are shown only when
                // asked for, with an explicit `uk` (or `k`) that `ptscope decode` reads back.
                let sel = match self.scope {
                    TraceScope::Userspace => "",
                    _ => sel,
                };
                format!("{name}/freq={freq}/{sel}")
            }
        }
    }
}

/// The tracepoint sampled for the stack at each switch out of the CPU.
pub const SWITCH_TRACEPOINT: &str = "sched:sched_switch";

/// Disk the sampling flight recorder keeps by default (`--snapshot-size` sets it).
pub const DEFAULT_SAMPLING_BOUND: u64 = 256 << 20;
/// perf's ring buffer per CPU when not told (`perf_event_mlock_kb`'s 516 KiB, less the
/// header page).
const PERF_DEFAULT_RING: u64 = 512 << 10;
/// perf.data files the sampling flight recorder rotates through.
pub const SAMPLING_FILES: u32 = 4;
/// Seconds of samples on one CPU the bound should hold, which sizes dwarf stack copies.
/// Two, not more: at the default bound that keeps perf's full 8 KiB copies, and smaller
/// copies cut deep stacks (sqlite3's and git's lost their roots at 4976 bytes).
const SAMPLING_SECONDS: u64 = 2;

impl RecordPlan {
    /// Samples per second per thread.
    pub fn sample_rate(&self) -> u32 {
        match self.timer {
            TimerResolution::Low => 1000,
            TimerResolution::High => self.max_sample_rate,
            TimerResolution::Sample(f) => f,
            TimerResolution::Normal | TimerResolution::Custom(_) => 10_000,
        }
    }

    /// The sampling flight recorder, `(bytes per perf.data file, files kept)`: perf
    /// starts a new file at each size (`--switch-output`) and ptscope deletes the oldest
    /// beyond the count (`crate::ring`), so the disk holds the last moments within the
    /// bound. `None` when everything is kept (`--full-execution`, PT), when the bound is
    /// a duration, and with `--multi-snapshot` (see [`RecordPlan::snapshot_ring`]).
    pub fn sampling_ring(&self) -> Option<(u64, u32)> {
        if self.multi_snapshot {
            return None;
        }
        self.pieces()
    }

    /// The sampling flight recorder of `--multi-snapshot`, `(bytes per piece, pieces
    /// kept)`: ptscope rotates perf's file itself (see `crate::ring`), so a hit can end
    /// a snapshot; each snapshot then takes at most the bound.
    pub fn snapshot_ring(&self) -> Option<(u64, u32)> {
        if !self.multi_snapshot {
            return None;
        }
        self.pieces()
    }

    /// Pieces of a sampling recording bounded by size.
    fn pieces(&self) -> Option<(u64, u32)> {
        let bound = self.sampling_bound()?;
        // A file's size moves only when perf empties every CPU's ring into it, so the
        // file being written can overshoot by that much, plus a few percent spare.
        let ring = self.sample_ring_bytes().unwrap_or(PERF_DEFAULT_RING) + (16 << 10);
        let overshoot = (u64::from(self.cpus.max(1)) * ring).min(bound / 2);
        // The oldest file goes only once the next one has begun: up to one file more
        // than are kept is on disk at once.
        let file = (bound - overshoot) / 32 * 31 / u64::from(SAMPLING_FILES + 1);
        Some((file.max(256 << 10), SAMPLING_FILES))
    }

    /// The sampling flight recorder bounded by time, `(seconds per perf.data file, files
    /// kept)`: ptscope has perf start a new file every so many seconds
    /// (`crate::ring::Piece::Every`) and keeps that many (`crate::ring`). The last one is partly
    /// filled when the recording ends (and counts among those kept), so one file more
    /// than the seconds need is kept: the disk holds between the seconds asked for and
    /// one file's time more.
    pub fn sampling_time_ring(&self) -> Option<(u32, u32)> {
        let secs = self.snapshot_seconds?.max(1);
        if self.backend != Backend::Sample || self.full_execution || self.multi_snapshot {
            return None;
        }
        let per_file = secs.div_ceil(SAMPLING_FILES).max(1);
        Some((per_file, secs.div_ceil(per_file) + 1))
    }

    /// The flight recorder ptscope rotates (`crate::ring`): when to start a new piece
    /// and how many finished pieces to keep; `None` when nothing rotates.
    pub fn ring(&self) -> Option<(crate::ring::Piece, u32)> {
        use crate::ring::Piece;
        if let Some((piece, keep)) = self.snapshot_ring() {
            return Some((Piece::Bytes(piece), keep));
        }
        if let Some((_, n)) = self.sampling_ring() {
            return Some((Piece::Perf, n));
        }
        self.sampling_time_ring().map(|(secs, n)| {
            (
                Piece::Every(std::time::Duration::from_secs(u64::from(secs))),
                n,
            )
        })
    }

    /// Whether the perf.data files perf writes are pieces of one recording (a flight
    /// recorder's ring), not one snapshot each.
    pub fn rotates(&self) -> bool {
        self.sampling_ring().is_some() || self.sampling_time_ring().is_some()
    }

    /// The disk the sampling flight recorder may take (`None` when it is not used).
    pub fn sampling_bound(&self) -> Option<u64> {
        if self.backend != Backend::Sample || self.full_execution || self.snapshot_seconds.is_some()
        {
            return None;
        }
        Some(
            self.snapshot_pages
                .map_or(DEFAULT_SAMPLING_BOUND, |p| u64::from(p) * 4096),
        )
    }

    /// perf's ring buffer per CPU for sampling (`--mmap-pages`), in bytes: a quarter
    /// second of the heaviest samples on one CPU, so a busy machine that keeps perf from
    /// writing for a moment does not make the kernel drop samples (perf's default 512 KiB
    /// holds 20 ms of 10 kHz dwarf samples, and under load whole stretches were lost,
    /// the program's exit with them). Bounded so all CPUs' rings take at most 64 MiB of
    /// locked memory and, under a disk bound, so that every file's overshoot together
    /// (what the rings hold) takes at most a quarter of it. `None`: perf's default is as
    /// large.
    pub fn sample_ring_bytes(&self) -> Option<u64> {
        if self.backend != Backend::Sample {
            return None;
        }
        // Registers, callchain and header besides the stack copy (perf's 8 KiB at most).
        let per_sample: u64 = match self.callgraph {
            CallGraph::Dwarf => 8192 + 400,
            _ => 1024,
        };
        let want = u64::from(self.sample_rate()) * per_sample / 4;
        let cpus = u64::from(self.cpus.max(1));
        let mut cap = (64 << 20) / cpus;
        if let Some(bound) = self.sampling_bound() {
            // Every file kept (and the one begun) can overshoot by what the rings hold.
            cap = cap.min(bound / 4 / u64::from(SAMPLING_FILES + 1) / cpus);
        }
        let bytes = want.min(cap);
        // perf wants a power of two pages.
        let pages = (bytes / 4096).checked_next_power_of_two()?;
        let pages = if pages * 4096 > bytes {
            pages / 2
        } else {
            pages
        };
        (pages * 4096 > PERF_DEFAULT_RING).then_some(pages * 4096)
    }

    /// Bytes of stack perf copies per sample for dwarf unwinding (`dwarf,SIZE`): perf's
    /// 8 KiB unless the flight recorder's bound would then hold less than a few seconds
    /// of samples on one CPU; deep stacks unwind less far with less.
    pub fn dwarf_stack_size(&self) -> Option<u32> {
        let (file, n) = self.pieces()?;
        // What is kept at the end (the files perf keeps, the last one partly written).
        let bound = file * u64::from(n);
        let per_sample = bound / (u64::from(self.sample_rate().max(1)) * SAMPLING_SECONDS);
        // Registers, callchain and header take ~200 bytes of each sample besides the copy.
        Some((per_sample.saturating_sub(200).clamp(2048, 8192) & !7) as u32)
    }
}

/// The full `perf record` argv (`argv[0]` is the perf binary).
pub fn perf_record_argv(plan: &RecordPlan) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![plan.perf.clone().into(), "record".into(), "-o".into()];
    a.push(plan.output.clone().into());
    a.push("--timestamp".into());
    a.push(format!("--event={}", plan.primary_event()).into());
    if plan.backend == Backend::Sample && plan.switch_stacks {
        // The stack at every switch out of the CPU (the tracepoint fires in the thread
        // leaving, period 1), unwound like the samples' (`--call-graph` below): the
        // frames time off CPU is spent in. Side-band switch records still give the
        // times, as the tracepoint does not fire when a thread comes back.
        a.push(format!("--event={SWITCH_TRACEPOINT}").into());
    }
    // magic-trace adds --overwrite for sampling. We do not: with perf 6.1 an overwrite ring
    // loses the comm/mmap records when the program exits while recording, and every sample
    // then shows as `[unknown]`. Sampling data is small enough to keep whole.
    // perf starts the pieces of a flight recorder (ptscope with --multi-snapshot, so a
    // hit can end one), and ptscope deletes them (`crate::ring`), never perf's own
    // `--switch-max-files`: it would delete a file without a look, and with it the names
    // and mappings of the processes begun in it, which every later file needs (see
    // `ptscope_perf_data::Sideband`).
    let mut switching = true;
    if plan.multi_snapshot && !plan.full_execution {
        a.push("--switch-output=signal".into());
    } else if let Some((file, _)) = plan.sampling_ring() {
        a.push(format!("--switch-output={}K", file >> 10).into());
    } else if plan.sampling_time_ring().is_some() {
        // ptscope signals each switch on time (`crate::ring::Piece::Every`).
        a.push("--switch-output=signal".into());
    } else {
        switching = false;
    }
    if switching {
        // perf drops the build-id table with --switch-output unless asked: without it a
        // binary rebuilt since the recording could lend its names to the recorded code.
        // Sampling puts the build ids in the mmap records instead: perf's table is built
        // by reading back each finished file, and while it reads at a switch its buffers
        // overflow (gzip sampled with dwarf stacks lost 13-19 % of its samples so).
        if plan.backend == Backend::Sample && plan.buildid_mmap {
            a.push("--buildid-mmap".into());
        } else {
            a.push("--no-no-buildid".into());
        }
    }
    if plan.backend == Backend::Sample {
        // Sampling decodes from the files in place; copying every binary it touched into
        // ~/.debug (gigabytes over time, as root) buys nothing. PT keeps the cache: its
        // decoder needs the exact code that ran.
        a.push("--no-buildid-cache".into());
    }
    let pids = plan
        .pids
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // `-p` makes perf open the event on every current thread of the process with
    // inheritance, into per-CPU ring buffers (and per-CPU AUX buffers for PT, which
    // `--snapshot` snapshots together): threads and child processes created later, and
    // whatever they exec, are recorded too. `-t` implies `--no-inherit` in perf, so it
    // records the named threads and nothing they start; `--per-thread` gives each of
    // them its own ring instead of one per CPU.
    if plan.single_thread {
        a.push("--per-thread".into());
        a.push("-t".into());
    } else {
        a.push("-p".into());
    }
    a.push(pids.into());
    if plan.uses_snapshot_ring() {
        let at_exit = plan.snapshot_when == SnapshotWhen::AtExit && plan.snapshot_at_exit;
        a.push(
            if at_exit {
                "--snapshot=e"
            } else {
                "--snapshot"
            }
            .into(),
        );
    }
    match &plan.control {
        ControlChannel::Signals => {}
        ControlChannel::Fifo { ctl, ack } => {
            let mut s = OsString::from("--control=fifo:");
            s.push(ctl);
            s.push(",");
            s.push(ack);
            a.push(s);
        }
        ControlChannel::Fd { ctl, ack } => a.push(format!("--control=fd:{ctl},{ack}").into()),
    }
    if plan.backend == Backend::Pt && plan.scope.includes_kernel() && plan.kcore {
        a.push("--kcore".into());
    }
    if let Some(p) = plan.snapshot_pages {
        match plan.backend {
            // `-m ,N` sizes only the AUX (trace) buffer.
            Backend::Pt => a.push(format!("-m,{p}").into()),
            // Sampling has no AUX buffer: size the sample ring instead, unless the
            // size bounds the flight recorder's files.
            Backend::Sample if plan.sampling_bound().is_none() => {
                a.push(format!("--mmap-pages={p}").into())
            }
            Backend::Sample => {}
        }
    }
    let asked = plan.snapshot_pages.is_some() && plan.sampling_bound().is_none();
    if let Some(ring) = plan.sample_ring_bytes().filter(|_| !asked) {
        a.push(format!("--mmap-pages={}", ring / 4096).into());
    }
    if plan.backend == Backend::Sample {
        a.push("--call-graph".into());
        match plan.dwarf_stack_size() {
            Some(size) if plan.callgraph == CallGraph::Dwarf => {
                a.push(format!("dwarf,{size}").into())
            }
            _ => a.push(plan.callgraph.name().into()),
        }
        // Context switches (side-band records, no PMU needed) say when each thread was
        // off CPU: without them a sampled frame seems to run through every sleep.
        a.push("--switch-events".into());
    }
    a
}

/// What `--snapshot-size` bounds the last moments by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotBound {
    /// A size, in 4 KiB pages (a power of two).
    Pages(u32),
    /// A duration in whole seconds (sampling only).
    Seconds(u32),
}

/// Parses a `--snapshot-size`: a size (see [`parse_snapshot_size`]) or, for sampling, a
/// duration in seconds (`10s`).
pub fn parse_snapshot_bound(s: &str) -> Result<SnapshotBound> {
    let t = s.trim();
    if let Some(n) = t.strip_suffix('s').or_else(|| t.strip_suffix("sec")) {
        return match n.trim().parse::<u32>() {
            Ok(v) if v > 0 => Ok(SnapshotBound::Seconds(v)),
            _ => Err(Error::NotADuration(s.to_owned())),
        };
    }
    parse_snapshot_size(t).map(SnapshotBound::Pages)
}

/// Parses a `--snapshot-size` (`4M`, `256K`, `1G`, or a page count with `p`) into 4 KiB pages.
pub fn parse_snapshot_size(s: &str) -> Result<u32> {
    let t = s.trim();
    let (num, mult): (&str, u64) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1 << 10),
        Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
        Some((i, 'p' | 'P')) => (&t[..i], 4096),
        _ => (t, 1),
    };
    let Ok(n) = num.parse::<u64>() else {
        return Err(Error::NotASize(s.to_owned()));
    };
    let bytes = n.saturating_mul(mult);
    let pages = bytes / 4096;
    if bytes % 4096 != 0 || !pages.is_power_of_two() || pages > u64::from(u32::MAX) {
        return Err(Error::SizeNotPowerOfTwo(s.to_owned()));
    }
    Ok(pages as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Piece;

    fn s(v: Vec<OsString>) -> String {
        v.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn pt() -> RecordPlan {
        RecordPlan::new("perf", "/w/perf.data", vec![42])
    }

    #[test]
    fn pt_command_lines() {
        let base = "perf record -o /w/perf.data --timestamp";
        type Case = (&'static str, Box<dyn Fn(&mut RecordPlan)>, String);
        let cases: Vec<Case> = vec![
            ("default", Box::new(|_| {}), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot=e")),
            ("low", Box::new(|p| p.timer = TimerResolution::Low), format!("{base} --event=intel_pt//u -p 42 --snapshot=e")),
            ("high", Box::new(|p| p.timer = TimerResolution::High), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0,noretcomp=1/u -p 42 --snapshot=e")),
            ("no psb_cyc", Box::new(|p| { p.timer = TimerResolution::High; p.psb_cyc = false }), format!("{base} --event=intel_pt//u -p 42 --snapshot=e")),
            ("custom", Box::new(|p| p.timer = TimerResolution::parse("custom:cyc=0,mtc=1,mtc_period=3,psb_period=2").unwrap()), format!("{base} --event=intel_pt/cyc=0,mtc=1,mtc_period=3,psb_period=2/u -p 42 --snapshot=e")),
            ("kernel", Box::new(|p| p.scope = TraceScope::UserspaceAndKernel), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/uk -p 42 --snapshot=e --kcore")),
            ("kernel only, old perf", Box::new(|p| { p.scope = TraceScope::Kernel; p.kcore = false }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/k -p 42 --snapshot=e")),
            ("trigger", Box::new(|p| p.snapshot_when = SnapshotWhen::OnTrigger), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot")),
            ("perf < 5.4", Box::new(|p| p.snapshot_at_exit = false), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot")),
            ("multi-snapshot", Box::new(|p| { p.multi_snapshot = true; p.snapshot_when = SnapshotWhen::OnTrigger }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u --switch-output=signal --no-no-buildid -p 42 --snapshot")),
            ("single thread", Box::new(|p| { p.single_thread = true; p.pids = vec![42, 43] }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u --per-thread -t 42,43 --snapshot=e")),
            ("several pids", Box::new(|p| p.pids = vec![7, 8]), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 7,8 --snapshot=e")),
            ("full execution", Box::new(|p| { p.full_execution = true; p.multi_snapshot = true }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42")),
            ("snapshot size", Box::new(|p| p.snapshot_pages = Some(1024)), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot=e -m,1024")),
            ("fifo control", Box::new(|p| p.control = ControlChannel::Fifo { ctl: "/w/ctl".into(), ack: "/w/ack".into() }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot=e --control=fifo:/w/ctl,/w/ack")),
            ("fd control", Box::new(|p| p.control = ControlChannel::Fd { ctl: 5, ack: 6 }), format!("{base} --event=intel_pt/cyc=1,cyc_thresh=1,mtc_period=0/u -p 42 --snapshot=e --control=fd:5,6")),
            ("everything", Box::new(|p| {
                p.scope = TraceScope::UserspaceAndKernel; p.multi_snapshot = true; p.snapshot_when = SnapshotWhen::OnTrigger;
                p.snapshot_pages = Some(64); p.control = ControlChannel::Fifo { ctl: "c".into(), ack: "a".into() };
                p.timer = TimerResolution::Low; p.callgraph = CallGraph::Fp;
            }), format!("{base} --event=intel_pt//uk --switch-output=signal --no-no-buildid -p 42 --snapshot --control=fifo:c,a --kcore -m,64")),
        ];
        for (name, f, want) in cases {
            let mut p = pt();
            f(&mut p);
            p.validate().unwrap();
            assert_eq!(s(perf_record_argv(&p)), want, "case {name}");
        }
    }

    #[test]
    fn sampling_command_lines() {
        let mut p = pt();
        p.cpus = 2;
        p.backend = Backend::Sample;
        p.hardware_pmu = false;
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cpu-clock/freq=10000/ --switch-output=49197K --buildid-mmap --no-buildid-cache -p 42 --mmap-pages=1024 --call-graph dwarf,8192 --switch-events"
        );
        // perf starts the pieces, ptscope keeps four (see `crate::ring`).
        assert_eq!(p.ring(), Some((Piece::Perf, 4)));
        // A smaller bound: smaller files, and smaller stack copies to hold ~4 s.
        p.snapshot_pages = Some(16384);
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cpu-clock/freq=10000/ --switch-output=12294K --buildid-mmap --no-buildid-cache -p 42 --mmap-pages=256 --call-graph dwarf,2312 --switch-events"
        );
        // The stack at each switch out of the CPU, when the machine allows it.
        p.switch_stacks = true;
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cpu-clock/freq=10000/ --event=sched:sched_switch --switch-output=12294K --buildid-mmap --no-buildid-cache -p 42 --mmap-pages=256 --call-graph dwarf,2312 --switch-events"
        );
        p.switch_stacks = false;
        p.snapshot_pages = None;
        // A duration: files of whole seconds, enough of them to span it; full stack copies.
        p.snapshot_seconds = Some(10);
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cpu-clock/freq=10000/ --switch-output=signal --buildid-mmap --no-buildid-cache -p 42 --mmap-pages=4096 --call-graph dwarf --switch-events"
        );
        assert_eq!(
            p.ring(),
            Some((Piece::Every(std::time::Duration::from_secs(3)), 5))
        );
        assert!(p.rotates() && p.validate().is_ok());
        // A perf older than 5.12 keeps its build-id table instead.
        p.buildid_mmap = false;
        assert!(s(perf_record_argv(&p)).contains(" --no-no-buildid "));
        p.buildid_mmap = true;
        p.snapshot_seconds = Some(1);
        assert_eq!(p.sampling_time_ring(), Some((1, 2)));
        p.backend = Backend::Pt;
        assert!(p.validate().is_err(), "a duration with Intel PT");
        p.backend = Backend::Sample;
        p.snapshot_seconds = None;
        p.full_execution = true;
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cpu-clock/freq=10000/ --no-buildid-cache -p 42 --mmap-pages=4096 --call-graph dwarf --switch-events"
        );
        p.full_execution = false;
        p.hardware_pmu = true;
        p.timer = TimerResolution::Low;
        p.callgraph = CallGraph::Lbr;
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cycles/freq=1000/ --switch-output=50585K --buildid-mmap --no-buildid-cache -p 42 --call-graph lbr --switch-events"
        );
        p.timer = TimerResolution::High;
        p.max_sample_rate = 25_000;
        p.full_execution = true;
        p.callgraph = CallGraph::Fp;
        p.single_thread = true;
        p.scope = TraceScope::UserspaceAndKernel;
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cycles/freq=25000/uk --no-buildid-cache --per-thread -t 42 --mmap-pages=1024 --call-graph fp --switch-events"
        );
        p.full_execution = false;
        p.timer = TimerResolution::Sample(333);
        p.multi_snapshot = true;
        p.snapshot_pages = Some(256);
        p.control = ControlChannel::Fifo {
            ctl: "c".into(),
            ack: "a".into(),
        };
        assert_eq!(
            s(perf_record_argv(&p)),
            "perf record -o /w/perf.data --timestamp --event=cycles/freq=333/uk --switch-output=signal --buildid-mmap --no-buildid-cache --per-thread -t 42 --control=fifo:c,a --call-graph fp --switch-events"
        );
        // With --multi-snapshot the size bounds each snapshot: ptscope rotates pieces of
        // it itself (perf's own rotation cannot also cut at a hit).
        assert_eq!(p.sampling_ring(), None);
        assert_eq!(p.snapshot_ring(), Some((256 << 10, SAMPLING_FILES)));
    }

    #[test]
    fn invalid_plans_say_what_to_do() {
        let mut p = pt();
        p.backend = Backend::Sample;
        p.timer = TimerResolution::parse("custom:cyc=1").unwrap();
        assert!(matches!(p.validate(), Err(Error::CustomTimingWhenSampling)));
        let mut p = pt();
        p.timer = TimerResolution::Sample(10);
        assert!(matches!(p.validate(), Err(Error::SampleRateWithPt)));
        let mut p = pt();
        p.backend = Backend::Sample;
        p.hardware_pmu = false;
        p.callgraph = CallGraph::Lbr;
        let e = p.validate().unwrap_err();
        assert!(matches!(e, Error::LbrWithoutPmu), "{e}");
        // The CLI adds its flags; the library's message names none.
        assert!(!e.to_string().contains("--"), "{e}");
        assert!(TimerResolution::parse("medium").is_err());
        assert!(TimerResolution::parse("custom:foo=1").is_err());
        assert!(TimerResolution::parse("sample:0").is_err());
        assert_eq!(
            TimerResolution::parse("High").unwrap(),
            TimerResolution::High
        );
    }

    #[test]
    fn snapshot_sizes() {
        assert_eq!(parse_snapshot_size("4M").unwrap(), 1024);
        assert_eq!(parse_snapshot_size("256K").unwrap(), 64);
        assert_eq!(parse_snapshot_size("8p").unwrap(), 8);
        assert_eq!(parse_snapshot_size("4096").unwrap(), 1);
        assert!(parse_snapshot_size("3M").is_err());
        assert!(parse_snapshot_size("1000").is_err());
        assert!(parse_snapshot_size("big").is_err());
        assert_eq!(
            parse_snapshot_bound("10s").unwrap(),
            SnapshotBound::Seconds(10)
        );
        assert_eq!(
            parse_snapshot_bound("4M").unwrap(),
            SnapshotBound::Pages(1024)
        );
        assert!(parse_snapshot_bound("0s").is_err());
        assert!(parse_snapshot_bound("1.5s").is_err());
    }

    #[test]
    fn bad_settings_are_typed_errors_that_name_the_value() {
        let e = parse_snapshot_size("3M").unwrap_err();
        assert!(
            matches!(&e, Error::SizeNotPowerOfTwo(s) if s == "3M"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "`3M` is not a power of two of 4 KiB pages; use e.g. 64K, 4M or 64M"
        );
        let e = TimerResolution::parse("custom:cyc=1,foo=2").unwrap_err();
        assert!(
            matches!(&e, Error::UnknownTimingSetting { key, .. } if key == "foo"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "`foo` in `custom:cyc=1,foo=2` is not a PT timing setting; use cyc, cyc_thresh, \
             mtc, mtc_period, noretcomp or psb_period"
        );
        let e = TimerResolution::parse("sample:0").unwrap_err();
        assert!(matches!(e, Error::BadSampleFrequency(_)), "{e:?}");
    }
}
