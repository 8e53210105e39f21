//! What a `perf.data` file's header says about the recording (its events, their names
//! and modifiers, the PMU table), read in-process by `ptscope-perf-data` (the
//! `linux-perf-data` crate behind checks of the header against the file's size) instead
//! of running `perf evlist` and `perf report --header-only` and scraping text. A file
//! cut short (its feature sections, written last, missing) is read like perf reads it:
//! events without their names.

use crate::perf::RecordingKind;
use ptscope_event::TraceScope;
use ptscope_perf_data::PerfData;
use std::path::Path;

/// Why a `perf.data` header could not be read.
pub use ptscope_perf_data::{CutShort, Error as HeaderError};

/// `PERF_TYPE_*` numbers of the kernel's fixed event types.
const FIXED_TYPES: [(u32, &str); 5] = [
    (0, "hardware"),
    (1, "software"),
    (2, "tracepoint"),
    (3, "hw_cache"),
    (5, "breakpoint"),
];

/// One event of a recording, as its header describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventDesc {
    /// The name `perf evlist` prints (`cpu-clock/freq=10000/u`, `intel_pt//u`); `None`
    /// when the file has no event descriptions (cut short, or an old perf).
    pub name: Option<String>,
    /// `perf_event_attr.type`: a `PERF_TYPE_*` or a dynamic PMU's number.
    pub pmu_type: u32,
    /// `exclude_user` was set.
    pub exclude_user: bool,
    /// `exclude_kernel` was set.
    pub exclude_kernel: bool,
}

/// What a `perf.data` header says about the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordingInfo {
    /// The events, in the order `perf evlist` lists them.
    pub events: Vec<EventDesc>,
    /// The `pmu mappings` feature: PMU number → name (`8 → intel_pt`); empty when absent.
    pub pmu_mappings: Vec<(u32, String)>,
    /// The `perf record` command line (the `cmdline` feature), when the file has it.
    pub cmdline: Vec<String>,
    /// The file ends before what its header says it holds.
    pub cut_short: Option<CutShort>,
}

impl RecordingInfo {
    /// The name of PMU number `ty`, from the file's table (or the kernel's fixed types).
    pub fn pmu_name(&self, ty: u32) -> Option<&str> {
        self.pmu_mappings
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, n)| n.as_str())
            .or_else(|| FIXED_TYPES.iter().find(|(t, _)| *t == ty).map(|(_, n)| *n))
    }

    /// True if an event is Intel PT: by its name, or by its PMU number in the file's
    /// table (a recording made elsewhere, where perf could not name the event).
    pub fn is_intel_pt(&self) -> bool {
        self.events.iter().any(|e| {
            e.name.as_deref().is_some_and(|n| n.contains("intel_pt"))
                || self.pmu_name(e.pmu_type) == Some("intel_pt")
        })
    }

    /// The recording followed only the given threads (`perf record -t`, which implies
    /// `--no-inherit`; `ptscope run/attach --single-thread`): threads and processes they
    /// started were not recorded. False when the command line is unknown.
    pub fn per_thread(&self) -> bool {
        let record = self.cmdline.iter().skip_while(|a| a.as_str() != "record");
        let mut args = record.skip(1).take_while(|a| a.as_str() != "--");
        args.any(|a| a == "-t" || a == "--per-thread" || a.starts_with("--tid"))
    }

    /// Intel PT or sampling, as decoding needs to know.
    pub fn kind(&self) -> RecordingKind {
        if self.is_intel_pt() {
            RecordingKind::IntelPt
        } else {
            RecordingKind::Sampling
        }
    }

    /// The scope a sampling recording asks for, from its first event's modifier (see
    /// [`scope_of_event_name`]); `None` for Intel PT recordings (their scope is a
    /// decoding choice) or when the event cannot be named.
    pub fn scope(&self) -> Option<TraceScope> {
        if self.is_intel_pt() {
            return None;
        }
        let first = self.events.first()?;
        match &first.name {
            Some(name) => scope_of_event_name(name),
            // perf names an event without a description from its attributes, with a
            // `:u` or `:k` modifier only when one level is excluded.
            None if self.pmu_name(first.pmu_type).is_none() => None,
            None if first.exclude_user && !first.exclude_kernel => Some(TraceScope::Kernel),
            None => Some(TraceScope::Userspace),
        }
    }
}

/// The scope an event name's modifier gives: `cpu-clock:k` → k, `cycles/freq=1000/uk`
/// → uk, `…:u` → u. None (perf's default, both levels counted) means u: a trace of user
/// space in which a sample's time in the kernel is one `[kernel: …]` frame; `ptscope
/// run` records its default so, and its `--trace-include-kernel` with an explicit `uk`.
pub fn scope_of_event_name(name: &str) -> Option<TraceScope> {
    if name.contains("intel_pt") || name.starts_with("unknown attr") {
        return None;
    }
    // `name/config/mods` or `name:mods`; a config may itself hold `:` or `/`.
    let mods = match (name.rfind('/'), name.rfind(':')) {
        (Some(slash), _) if name[..slash].contains('/') => &name[slash + 1..],
        (_, Some(colon)) => &name[colon + 1..],
        _ => "",
    };
    if !mods.chars().all(|c| c.is_ascii_alphabetic()) {
        return Some(TraceScope::UserspaceAndKernel);
    }
    Some(match (mods.contains('u'), mods.contains('k')) {
        (false, true) => TraceScope::Kernel,
        (true, true) => TraceScope::UserspaceAndKernel,
        _ => TraceScope::Userspace,
    })
}

/// Reads the header of the `perf.data` file at `path`.
pub fn read_header(path: &Path) -> Result<RecordingInfo, HeaderError> {
    let data = PerfData::open(path)?;
    let events = data
        .attributes()
        .iter()
        .map(|a| EventDesc {
            name: a.name.clone(),
            pmu_type: a.pmu_type,
            exclude_user: a.exclude_user,
            exclude_kernel: a.exclude_kernel,
        })
        .collect();
    Ok(RecordingInfo {
        events,
        pmu_mappings: data.pmu_mappings(),
        cmdline: data.cmdline(),
        cut_short: data.cut_short(),
    })
}

#[cfg(test)]
mod tests {
    use super::{scope_of_event_name, RecordingInfo};
    use ptscope_event::TraceScope;

    #[test]
    fn a_recording_asks_for_the_kernel_only_with_a_k_modifier() {
        let u = Some(TraceScope::Userspace);
        let uk = Some(TraceScope::UserspaceAndKernel);
        let k = Some(TraceScope::Kernel);
        for (name, want) in [
            // What `ptscope run` records: default, --trace-include-kernel, --kernel-only.
            ("cpu-clock/freq=10000/", u),
            ("cpu-clock/freq=10000/uk", uk),
            ("cpu-clock/freq=10000/k", k),
            ("cpu-clock/freq=10000/u", u),
            // perf's own names.
            ("cpu-clock", u),
            ("cycles:pp", u),
            ("cycles:ukpp", uk),
            ("cpu-clock:k", k),
            ("intel_pt//u", None),
        ] {
            assert_eq!(scope_of_event_name(name), want, "{name}");
        }
    }

    #[test]
    fn a_recording_of_given_threads_says_so_in_its_command_line() {
        let info = |cmd: &str| RecordingInfo {
            cmdline: cmd.split(' ').map(str::to_owned).collect(),
            ..RecordingInfo::default()
        };
        // `ptscope run/attach --single-thread`, and perf's own `-t`.
        assert!(
            info("/usr/bin/perf record -o w/perf.data --per-thread -t 42 --switch-events")
                .per_thread()
        );
        assert!(info("perf record --tid=42 -g").per_thread());
        // The whole process tree (`-p`), or a workload after `--` that has a `-t` of its own.
        assert!(!info("/usr/bin/perf record -o w/perf.data -p 42 --call-graph dwarf").per_thread());
        assert!(!info("perf record -g -- sort -t , data.csv").per_thread());
        assert!(!RecordingInfo::default().per_thread());
    }
}
