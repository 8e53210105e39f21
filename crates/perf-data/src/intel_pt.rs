//! What an Intel PT recording says about its trace: the `AUXTRACE_INFO` record's private
//! words (perf's `intel-pt.h` layout: time conversion, which config bits mean what,
//! snapshot and per-CPU modes, the TSC:CTC ratio, the maximum non-turbo ratio, address
//! filters) and the event's `config` (the `IA32_RTIT_CTL` bits perf asked for).

use crate::cursor::{c_str, Cursor};
use crate::records::{AuxtraceInfo, TimeConv};

/// `PERF_AUXTRACE_INTEL_PT`.
pub const AUXTRACE_INTEL_PT: u32 = 1;

/// `IA32_RTIT_CTL` bits, which are also the `intel_pt` PMU's config bits.
pub mod ctl {
    /// `CYCEn`: CYC packets.
    pub const CYC: u64 = 1 << 1;
    /// `PwrEvtEn`: power event packets.
    pub const PWR_EVT: u64 = 1 << 4;
    /// `FUPonPTW`: a FUP after every PTWRITE.
    pub const FUP_ON_PTW: u64 = 1 << 5;
    /// `MTCEn`: MTC packets.
    pub const MTC: u64 = 1 << 9;
    /// `TSCEn`: TSC packets.
    pub const TSC: u64 = 1 << 10;
    /// `DisRETC`: returns are never compressed.
    pub const NORETCOMP: u64 = 1 << 11;
    /// `PTWEn`: PTWRITE packets.
    pub const PTW: u64 = 1 << 12;
    /// `BranchEn`: control flow packets (TNT, TIP, FUP).
    pub const BRANCH: u64 = 1 << 13;
    /// `MTCFreq` field (bits 14..=17).
    pub const MTC_FREQ: u64 = 0xf << 14;
    /// `CycThresh` field (bits 19..=22).
    pub const CYC_THRESH: u64 = 0xf << 19;
    /// `PSBFreq` field (bits 24..=27).
    pub const PSB_FREQ: u64 = 0xf << 24;
}

/// How the recording's trace must be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntelPtInfo {
    /// The `intel_pt` PMU's number.
    pub pmu_type: u32,
    /// TSC → perf time.
    pub time: TimeConv,
    /// Each AUX area is a snapshot (a ring buffer's last contents), not a full stream.
    pub snapshot: bool,
    /// One AUX area per CPU (else one per thread).
    pub per_cpu: bool,
    /// perf recorded context switches: 1 = `sched:sched_switch` samples, 2 = switch
    /// records (`--switch-events`), 0 = none.
    pub have_sched_switch: u64,
    /// The TSC:CTC ratio, numerator and denominator (CPUID leaf 0x15: EBX/EAX).
    pub tsc_ctc: (u32, u32),
    /// The maximum non-turbo ratio: the TSC runs at it (`CBR` packets give the core's).
    pub max_nonturbo_ratio: u32,
    /// Config bits (see [`ctl`]) perf says mean TSC, no return compression, MTC, its
    /// frequency, and CYC, as masks.
    pub bits: ConfigBits,
    /// The address filter string (`--filter`), if any.
    pub filter: Option<String>,
}

/// Which config bits mean what (from the private words; on every perf so far they are
/// the `IA32_RTIT_CTL` bits of [`ctl`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ConfigBits {
    /// `tsc`.
    pub tsc: u64,
    /// `noretcomp`.
    pub noretcomp: u64,
    /// `mtc`.
    pub mtc: u64,
    /// `mtc_period` field mask.
    pub mtc_freq: u64,
    /// `cyc`.
    pub cyc: u64,
}

/// The trace settings one `intel_pt` event was recorded with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// TSC packets.
    pub tsc: bool,
    /// MTC packets.
    pub mtc: bool,
    /// log2 of the CTC ticks between MTC packets.
    pub mtc_period: u8,
    /// CYC packets.
    pub cyc: bool,
    /// Returns are compressed into TNT bits.
    pub return_compression: bool,
    /// Control flow is traced (`BranchEn`); without it FUPs outside PSB+ bind to
    /// nothing.
    pub branches: bool,
    /// PTWRITE packets.
    pub ptwrite: bool,
    /// A FUP follows each PTWRITE.
    pub fup_on_ptw: bool,
    /// Power event packets.
    pub power_events: bool,
}

impl IntelPtInfo {
    /// Reads an `AUXTRACE_INFO` record of Intel PT (`None` for another kind, or too
    /// short to hold perf's first 15 words).
    pub fn parse(info: &AuxtraceInfo<'_>, big: bool) -> Option<Self> {
        if info.kind != AUXTRACE_INTEL_PT {
            return None;
        }
        let mut c = Cursor::new(info.private, big);
        let mut w = [0u64; 17];
        let mut n = 0;
        while n < w.len() {
            match c.u64() {
                Some(v) => w[n] = v,
                None => break,
            }
            n += 1;
        }
        // perf 4.3 wrote the first 10 words; TSC:CTC, MTC and CYC came with 4.5, the
        // non-turbo ratio with 4.7, the filter with 4.10.
        if n < 10 {
            return None;
        }
        let filter = if n == 17 && w[16] > 0 {
            let len = usize::try_from(w[16]).unwrap_or(usize::MAX);
            // The length is the file's: it may claim more than there is, or anything.
            len.div_ceil(8)
                .checked_mul(8)
                .and_then(|n| c.take(n))
                .or_else(|| Some(c.rest()))
                .map(|b| String::from_utf8_lossy(c_str(b)).into_owned())
                .filter(|s| !s.is_empty())
        } else {
            None
        };
        Some(IntelPtInfo {
            pmu_type: w[0] as u32,
            time: TimeConv {
                shift: w[1].min(63) as u16,
                mult: w[2] as u32,
                zero: w[3],
                cycles: 0,
                mask: u64::MAX,
                cap_zero: w[4] != 0,
                cap_short: false,
            },
            snapshot: w[8] != 0,
            per_cpu: w[9] != 0,
            have_sched_switch: w[7],
            tsc_ctc: (w[12] as u32, w[13] as u32),
            max_nonturbo_ratio: w[15] as u32,
            bits: ConfigBits {
                tsc: w[5],
                noretcomp: w[6],
                mtc: w[10],
                mtc_freq: w[11],
                cyc: w[14],
            },
            filter,
        })
    }

    /// The settings of an `intel_pt` event with `config`.
    pub fn trace_config(&self, config: u64) -> TraceConfig {
        let b = &self.bits;
        let on = |mask: u64, default: u64| config & if mask != 0 { mask } else { default } != 0;
        let freq_mask = if b.mtc_freq != 0 {
            b.mtc_freq
        } else {
            ctl::MTC_FREQ
        };
        TraceConfig {
            tsc: on(b.tsc, ctl::TSC),
            mtc: on(b.mtc, ctl::MTC),
            mtc_period: ((config & freq_mask) >> freq_mask.trailing_zeros()) as u8,
            cyc: on(b.cyc, ctl::CYC),
            return_compression: !on(b.noretcomp, ctl::NORETCOMP),
            // perf's default config is `pt,branch`; a config naming neither traces
            // branches too (the kernel sets BranchEn unless told `branch=0`).
            branches: config & ctl::BRANCH != 0 || config & 1 == 0,
            ptwrite: config & ctl::PTW != 0,
            fup_on_ptw: config & ctl::FUP_ON_PTW != 0,
            power_events: config & ctl::PWR_EVT != 0,
        }
    }
}

impl TimeConv {
    /// perf time (ns) of a TSC value, as perf computes it.
    #[inline]
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        let tsc = if self.cap_short {
            self.cycles
                .wrapping_add(tsc.wrapping_sub(self.cycles) & self.mask)
        } else {
            tsc
        };
        let shift = u32::from(self.shift.min(63));
        let quot = tsc >> shift;
        let rem = tsc & ((1u64 << shift) - 1);
        let mult = u64::from(self.mult);
        self.zero
            .wrapping_add(quot.wrapping_mul(mult))
            .wrapping_add(rem.wrapping_mul(mult) >> shift)
    }

    /// The TSC value of a perf time (the inverse of [`TimeConv::tsc_to_ns`], to within
    /// a tick).
    pub fn ns_to_tsc(&self, ns: u64) -> u64 {
        let mult = u64::from(self.mult.max(1));
        let shift = u32::from(self.shift.min(63));
        let t = ns.wrapping_sub(self.zero);
        let quot = t / mult;
        let rem = t % mult;
        (quot << shift).wrapping_add((u128::from(rem) << shift) as u64 / mult)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_config() {
        let mut b = Vec::new();
        let w: [u64; 17] = [
            8,
            30,
            1 << 31,
            1000,
            1,
            ctl::TSC,
            ctl::NORETCOMP,
            2,
            1,
            1,
            ctl::MTC,
            ctl::MTC_FREQ,
            84,
            1,
            ctl::CYC,
            20,
            6,
        ];
        for v in w {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(b"filter\0\0");
        let info = IntelPtInfo::parse(
            &AuxtraceInfo {
                kind: 1,
                private: &b,
            },
            false,
        )
        .expect("parsed");
        assert!(info.snapshot && info.per_cpu);
        assert_eq!(info.tsc_ctc, (84, 1));
        assert_eq!(info.max_nonturbo_ratio, 20);
        assert_eq!(info.filter.as_deref(), Some("filter"));
        let c = info.trace_config(1 | ctl::BRANCH | ctl::TSC | ctl::CYC | (3 << 14));
        assert!(c.tsc && c.cyc && !c.mtc && c.return_compression && c.branches);
        assert_eq!(c.mtc_period, 3);
        // 2 ns per tick: 2^31 / 2^30.
        assert_eq!(info.time.tsc_to_ns(10), 1020);
        assert_eq!(info.time.ns_to_tsc(1020), 10);
        // A filter length of anything (found by the fuzz target: it overflowed).
        let mut huge = b[..16 * 8].to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        huge.extend_from_slice(b"f\0");
        let info = IntelPtInfo::parse(
            &AuxtraceInfo {
                kind: 1,
                private: &huge,
            },
            false,
        )
        .expect("parsed");
        assert_eq!(info.filter.as_deref(), Some("f"));
        // Too short.
        assert!(IntelPtInfo::parse(
            &AuxtraceInfo {
                kind: 1,
                private: &b[..40]
            },
            false
        )
        .is_none());
    }
}
