//! What this machine can record: perf's version and features, the Intel PT PMU, the
//! kernel's perf_event_paranoid, our privileges.

use crate::error::Result;
use crate::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

/// perf's `major.minor` version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PerfVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl PerfVersion {
    /// Parses `perf --version` output (`perf version 6.1.187`, `perf version 5.10.g1234`, …).
    pub fn parse(text: &str) -> Option<Self> {
        let rest = text.trim().strip_prefix("perf version ")?;
        let mut it = rest.split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(PerfVersion { major, minor })
    }

    const fn at_least(self, major: u32, minor: u32) -> bool {
        self.major > major || (self.major == major && self.minor >= minor)
    }

    /// `--snapshot=e`: a final snapshot when perf exits (perf ≥ 5.4).
    pub fn snapshot_at_exit(self) -> bool {
        self.at_least(5, 4)
    }

    /// `--kcore` (perf ≥ 5.5).
    pub fn kcore(self) -> bool {
        self.at_least(5, 5)
    }

    /// `--control=fd:…`/`fifo:…` with acks (perf ≥ 5.10).
    pub fn control(self) -> bool {
        self.at_least(5, 10)
    }

    /// `perf record --buildid-mmap`: build ids in the mmap records (perf ≥ 5.12).
    pub fn buildid_mmap(self) -> bool {
        self.at_least(5, 12)
    }

    /// `perf script --dlfilter` (perf ≥ 5.14).
    pub fn dlfilter(self) -> bool {
        self.at_least(5, 14)
    }
}

impl std::fmt::Display for PerfVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The Intel PT PMU and the capabilities that change the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtCaps {
    /// `caps/psb_cyc`: cycle-accurate timing (Normal/High resolution); without it, Low.
    pub psb_cyc: bool,
    /// `caps/mtc`.
    pub mtc: bool,
}

/// Everything recording needs to know about the machine.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// The perf binary.
    pub perf: PathBuf,
    /// perf's version.
    pub perf_version: PerfVersion,
    /// The Intel PT PMU, if present.
    pub intel_pt: Option<PtCaps>,
    /// A hardware PMU with a `cycles` event (`/sys/bus/event_source/devices/cpu`).
    pub hardware_pmu: bool,
    /// `/proc/sys/kernel/perf_event_paranoid`.
    pub paranoid: Option<i32>,
    /// `/proc/sys/kernel/perf_event_max_sample_rate`.
    pub max_sample_rate: Option<u32>,
    /// Effective user id.
    pub euid: u32,
    /// The CPU's model name, for messages.
    pub cpu_model: String,
    /// The `sched:sched_switch` tracepoint exists where perf looks for it (tracefs, or
    /// debugfs's `tracing`): see [`Capabilities::switch_stacks`].
    pub sched_switch: bool,
}

impl Capabilities {
    /// Probes the machine, with `perf` as the perf binary.
    pub fn detect(perf: &Path) -> Result<Self> {
        Self::detect_in(perf, Path::new("/"))
    }

    /// Probes with `/sys` and `/proc` read under `root` (tests point it at a fake tree).
    pub fn detect_in(perf: &Path, root: &Path) -> Result<Self> {
        let out = ptscope_interrupt::children::die_with_ptscope(&mut Command::new(perf))
            .arg("--version")
            .env("PAGER", "cat")
            .output()
            .map_err(|source| Error::CannotRunPerf {
                perf: perf.to_owned(),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let Some(perf_version) = PerfVersion::parse(&text) else {
            return Err(Error::NotPerf {
                perf: perf.to_owned(),
                printed: text.trim().to_owned(),
            });
        };
        let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
        let pt_dir = root.join("sys/bus/event_source/devices/intel_pt");
        let intel_pt = pt_dir.is_dir().then(|| PtCaps {
            psb_cyc: read("sys/bus/event_source/devices/intel_pt/caps/psb_cyc").as_deref()
                == Some("1\n"),
            mtc: read("sys/bus/event_source/devices/intel_pt/caps/mtc").as_deref() == Some("1\n"),
        });
        let cpu_model = read("proc/cpuinfo")
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        Ok(Capabilities {
            perf: perf.to_path_buf(),
            perf_version,
            intel_pt,
            hardware_pmu: root.join("sys/bus/event_source/devices/cpu").is_dir(),
            paranoid: read("proc/sys/kernel/perf_event_paranoid")
                .and_then(|s| s.trim().parse().ok()),
            max_sample_rate: read("proc/sys/kernel/perf_event_max_sample_rate")
                .and_then(|s| s.trim().parse().ok()),
            // SAFETY: geteuid has no preconditions.
            euid: unsafe { libc::geteuid() },
            cpu_model,
            sched_switch: [
                "sys/kernel/tracing/events/sched/sched_switch/id",
                "sys/kernel/debug/tracing/events/sched/sched_switch/id",
            ]
            .iter()
            .any(|p| read(p).is_some_and(|id| id.trim().parse::<u32>().is_ok())),
        })
    }

    /// True if kernel tracing is allowed (root, or perf declared privileged by the user).
    pub fn kernel_tracing(&self) -> bool {
        self.euid == 0 || std::env::var_os("PTSCOPE_PERF_IS_PRIVILEGED").is_some()
    }

    /// Whether sampling can record the user stack at each switch out of the CPU (the
    /// `sched:sched_switch` tracepoint with call stacks): the tracepoint is there, and
    /// perf may sample it with raw data (root, or `perf_event_paranoid` -1).
    pub fn switch_stacks(&self) -> bool {
        self.sched_switch && (self.euid == 0 || self.paranoid == Some(-1))
    }

    /// Why Intel PT cannot be used here, for messages.
    pub fn why_no_pt(&self) -> String {
        if self.cpu_model.contains("Intel") {
            format!(
                "Intel PT is not available on this machine ({}): /sys/bus/event_source/devices/intel_pt \
                 is missing (a VM without PT passthrough, or a kernel without CONFIG_INTEL_PT)",
                self.cpu_model
            )
        } else {
            format!("Intel PT is not available on this CPU ({})", self.cpu_model)
        }
    }

    /// A one-paragraph summary, for `--verbose`-style output and bug reports.
    pub fn summary(&self) -> String {
        format!(
            "perf {} ({}): snapshot-at-exit {}, kcore {}, control fifos {}, dlfilter {}; \
             Intel PT: {}; hardware PMU: {}; perf_event_paranoid: {}; euid: {}",
            self.perf_version,
            self.perf.display(),
            yes(self.perf_version.snapshot_at_exit()),
            yes(self.perf_version.kcore()),
            yes(self.perf_version.control()),
            yes(self.perf_version.dlfilter()),
            match &self.intel_pt {
                Some(c) => format!("yes (psb_cyc {}, mtc {})", yes(c.psb_cyc), yes(c.mtc)),
                None => "no".into(),
            },
            yes(self.hardware_pmu),
            self.paranoid
                .map(|p| p.to_string())
                .unwrap_or_else(|| "unknown".into()),
            self.euid
        )
    }

    /// Checks that a non-root user may record a process at all; the message says what to do.
    pub fn check_may_record(&self, kernel: bool) -> Result<()> {
        if self.euid == 0 {
            return Ok(());
        }
        if kernel && !self.kernel_tracing() {
            return Err(Error::KernelNeedsRoot { euid: self.euid });
        }
        if self.paranoid.is_some_and(|p| p > 2) {
            return Err(Error::ParanoidForbids {
                paranoid: self.paranoid.unwrap_or(3),
            });
        }
        Ok(())
    }
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// Reads the owner uid of `/proc/PID`, or `None` if there is no such process.
pub fn process_owner(pid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        let v = |s| PerfVersion::parse(s);
        assert_eq!(
            v("perf version 6.1.187\n"),
            Some(PerfVersion { major: 6, minor: 1 })
        );
        assert_eq!(
            v("perf version 5.10.g3c0bd2cc7c4d"),
            Some(PerfVersion {
                major: 5,
                minor: 10
            })
        );
        assert_eq!(
            v("perf version 6.16-rc1"),
            Some(PerfVersion {
                major: 6,
                minor: 16
            })
        );
        assert_eq!(v("ls (GNU coreutils) 9.1"), None);
        assert_eq!(v("perf version x"), None);
        let p = |major, minor| PerfVersion { major, minor };
        assert!(!p(5, 3).snapshot_at_exit() && p(5, 4).snapshot_at_exit());
        assert!(!p(5, 4).kcore() && p(5, 5).kcore());
        assert!(!p(5, 9).control() && p(5, 10).control() && p(6, 0).control());
        assert!(!p(5, 13).dlfilter() && p(5, 14).dlfilter());
    }

    #[test]
    fn reads_a_fake_sysfs() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let caps = dir.join("sys/bus/event_source/devices/intel_pt/caps");
        std::fs::create_dir_all(&caps).unwrap();
        std::fs::write(caps.join("psb_cyc"), "1\n").unwrap();
        std::fs::write(caps.join("mtc"), "0\n").unwrap();
        std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
        std::fs::write(dir.join("proc/sys/kernel/perf_event_paranoid"), "-1\n").unwrap();
        std::fs::write(dir.join("proc/cpuinfo"), "model name\t: Intel(R) Xeon(R)\n").unwrap();
        // `true --version` is not perf: the error must say so.
        let err = Capabilities::detect_in(Path::new("/bin/true"), &dir).unwrap_err();
        assert!(err.to_string().contains("is it really perf"), "{err}");
        let script = dir.join("perf");
        std::fs::write(&script, "#!/bin/sh\necho perf version 5.9.0\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = Capabilities::detect_in(&script, &dir).unwrap();
        assert_eq!(
            c.intel_pt,
            Some(PtCaps {
                psb_cyc: true,
                mtc: false
            })
        );
        assert_eq!(c.paranoid, Some(-1));
        assert!(!c.perf_version.control());
        assert!(!c.hardware_pmu);
        assert_eq!(c.cpu_model, "Intel(R) Xeon(R)");
    }
}
