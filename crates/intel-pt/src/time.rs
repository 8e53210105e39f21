//! Time from timing packets (SDM 33.3.7 "Time stamp", 33.4.2.x): TSC packets give the
//! time-stamp counter; TMA ties it to the crystal clock (CTC) that MTC packets count;
//! CYC packets count core cycles, which CBR (core:bus ratio) and the maximum non-turbo
//! ratio (the TSC's own ratio) convert to TSC ticks. The result is kept in TSC ticks;
//! converting to wall time is the recording's business (perf's `time_mult`/`shift`).

/// What the timer needs to know of the recording.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TimeConfig {
    /// log2 of the CTC ticks between MTC packets (`mtc_period`).
    pub mtc_period: u8,
    /// TSC ticks per CTC tick: numerator and denominator (CPUID 0x15 EBX/EAX).
    pub tsc_ctc: (u32, u32),
    /// The maximum non-turbo ratio: TSC ticks per bus tick (0 when unknown).
    pub nonturbo_ratio: u32,
}

impl Default for TimeConfig {
    fn default() -> Self {
        TimeConfig {
            mtc_period: 3,
            tsc_ctc: (0, 0),
            nonturbo_ratio: 0,
        }
    }
}

/// The decoder's clock (see the module documentation).
#[derive(Clone, Debug)]
pub struct Timer {
    cfg: TimeConfig,
    /// The last full TSC seen (or the reference before any): upper bits for the next.
    last_tsc: u64,
    /// TSC at the crystal-clock tick `ctc_base` (from TMA).
    ctc_tsc: Option<u64>,
    /// CTC ticks counted since `ctc_tsc`.
    ctc_ticks: u64,
    /// The MTC payload last seen (or implied by TMA).
    last_mtc: u8,
    /// TSC at the last TSC/MTC packet (or CBR change): cycles count from here.
    base: Option<u64>,
    /// Core cycles since `base`.
    cycles: u64,
    /// Core:bus ratio (0 while unknown).
    cbr: u32,
    /// The current time: never goes back.
    now: u64,
    /// The timer has an absolute time (a TSC packet, or the reference).
    valid: bool,
    /// Cycles → TSC when the ratios are unknown: TSC ticks and cycles between the last
    /// two MTC/TSC packets.
    calibration: Option<(u64, u64)>,
    /// Cycles counted since the last MTC/TSC, for calibration.
    cycles_since_sync: u64,
}

impl Timer {
    /// A timer for a trace whose upper TSC bits are those of `reference` (perf's
    /// AUXTRACE `reference`: the TSC when the buffer was read; 0 if unknown).
    pub fn new(cfg: TimeConfig, reference: u64) -> Self {
        Timer {
            cfg,
            last_tsc: reference,
            ctc_tsc: None,
            ctc_ticks: 0,
            last_mtc: 0,
            base: None,
            cycles: 0,
            cbr: 0,
            now: 0,
            valid: false,
            calibration: None,
            cycles_since_sync: 0,
        }
    }

    /// The current time (TSC ticks), when known.
    #[inline]
    pub fn now(&self) -> Option<u64> {
        self.valid.then_some(self.now)
    }

    /// The current core:bus ratio (0 while unknown).
    pub fn cbr(&self) -> u32 {
        self.cbr
    }

    fn set(&mut self, t: u64) {
        if !self.valid || t > self.now {
            self.now = t;
        }
        self.valid = true;
    }

    /// Time after a TSC packet (its low 56 bits).
    pub fn tsc(&mut self, low56: u64) {
        const MASK: u64 = (1 << 56) - 1;
        let mut t = (self.last_tsc & !MASK) | (low56 & MASK);
        // The counter wrapped its 56 bits since the last one.
        if self.last_tsc != 0 && t < self.last_tsc && self.last_tsc - t > MASK / 2 {
            t = t.wrapping_add(1 << 56);
        }
        self.last_tsc = t;
        self.resync(t);
        // A TSC restates the time: it may go back from an estimate.
        self.now = t;
        self.valid = true;
        // TMA, if any, follows and re-bases the crystal clock.
        self.ctc_tsc = None;
    }

    /// A new reference point at `t` (a TSC or MTC): cycles count from here, and the
    /// cycle ratio is calibrated when it is not known.
    fn resync(&mut self, t: u64) {
        if let Some(b) = self.base {
            if self.cycles_since_sync > 0 && t > b {
                self.calibration = Some((t - b, self.cycles_since_sync));
            }
        }
        self.base = Some(t);
        self.cycles = 0;
        self.cycles_since_sync = 0;
    }

    /// TMA after a TSC: the crystal clock's value and the fast counter at that TSC.
    pub fn tma(&mut self, ctc: u16, fc: u16) {
        let (n, d) = self.cfg.tsc_ctc;
        if n == 0 || d == 0 {
            return;
        }
        let period = u32::from(self.cfg.mtc_period.min(15));
        let rem = u64::from(ctc) & ((1u64 << period) - 1);
        // The TSC at the last MTC boundary: back by the fast counter and the CTC ticks
        // since that boundary.
        let back = u64::from(fc) + rem * u64::from(n) / u64::from(d);
        self.ctc_tsc = Some(self.last_tsc.saturating_sub(back));
        self.ctc_ticks = 0;
        self.last_mtc = ((u32::from(ctc) >> period) & 0xff) as u8;
    }

    /// Time after an MTC packet.
    pub fn mtc(&mut self, ctc: u8) {
        let (n, d) = self.cfg.tsc_ctc;
        let Some(base) = self.ctc_tsc else {
            self.last_mtc = ctc;
            return;
        };
        if n == 0 || d == 0 {
            return;
        }
        let delta = u64::from(ctc.wrapping_sub(self.last_mtc));
        self.last_mtc = ctc;
        self.ctc_ticks += delta << self.cfg.mtc_period.min(15);
        let t = base + self.ctc_ticks * u64::from(n) / u64::from(d);
        self.resync(t);
        self.set(t);
    }

    /// A CBR packet: the core's frequency changed (or is stated).
    pub fn cbr_ratio(&mut self, ratio: u8) {
        if self.valid {
            // Cycles so far convert at the old ratio.
            let now = self.now;
            self.base = Some(now);
            self.cycles = 0;
        }
        self.cbr = u32::from(ratio);
    }

    /// Time after a CYC packet.
    #[inline]
    pub fn cyc(&mut self, cycles: u64) {
        self.cycles = self.cycles.saturating_add(cycles);
        self.cycles_since_sync = self.cycles_since_sync.saturating_add(cycles);
        let Some(base) = self.base else {
            return;
        };
        let ticks = if self.cbr != 0 && self.cbr == self.cfg.nonturbo_ratio {
            // At the TSC's own frequency a cycle is a tick: no division per packet.
            self.cycles
        } else if self.cbr != 0 && self.cfg.nonturbo_ratio != 0 {
            mul_div(
                self.cycles,
                u64::from(self.cfg.nonturbo_ratio),
                u64::from(self.cbr),
            )
        } else if let Some((t, c)) = self.calibration {
            mul_div(self.cycles, t, c.max(1))
        } else {
            return;
        };
        self.set(base.saturating_add(ticks));
    }

    /// After an overflow: cycles counted before it are lost; the time stands until the
    /// next timing packet.
    pub fn overflow(&mut self) {
        if self.valid {
            self.base = Some(self.now);
        }
        self.cycles = 0;
        self.cycles_since_sync = 0;
    }
}

/// `a * b / c` (`c` not 0), exactly: in 64 bits when the product fits, as it nearly
/// always does (a 128-bit division at every CYC packet and timed event was a visible
/// share of the decode), else in 128.
#[inline]
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    match a.checked_mul(b) {
        Some(p) => p / c,
        None => (u128::from(a) * u128::from(b) / u128::from(c)) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TimeConfig {
        TimeConfig {
            mtc_period: 3,
            tsc_ctc: (84, 1),
            nonturbo_ratio: 20,
        }
    }

    #[test]
    fn mul_div_is_the_128_bit_quotient_either_way() {
        let wide = |a: u64, b: u64, c: u64| (u128::from(a) * u128::from(b) / u128::from(c)) as u64;
        for (a, b, c) in [
            (7, 9, 4),
            (u64::MAX / 3, 2, 5),
            // The product overflows 64 bits: the 128-bit path.
            (u64::MAX / 3, 7, 11),
            (1 << 40, 1 << 40, 1 << 30),
        ] {
            assert_eq!(mul_div(a, b, c), wide(a, b, c), "{a} * {b} / {c}");
        }
    }

    #[test]
    fn tsc_mtc_and_cycles() {
        let mut t = Timer::new(cfg(), 1 << 56);
        assert_eq!(t.now(), None);
        t.tsc(1000);
        assert_eq!(t.now(), Some((1 << 56) + 1000));
        // CBR = the non-turbo ratio: one cycle is one tick.
        t.cbr_ratio(20);
        t.cyc(10);
        assert_eq!(t.now(), Some((1 << 56) + 1010));
        // At half the frequency, a cycle is two ticks.
        t.cbr_ratio(10);
        t.cyc(5);
        assert_eq!(t.now(), Some((1 << 56) + 1020));
    }

    #[test]
    fn mtc_counts_from_tma() {
        let mut t = Timer::new(cfg(), 0);
        // TSC 10 000 at CTC 0x123 (3 ticks past an MTC boundary: 0x120) and 5 more
        // TSC ticks.
        t.tsc(10_000);
        t.tma(0x123, 5);
        let boundary = 10_000 - 5 - 3 * 84;
        // The next MTC: CTC 0x128, payload (0x128 >> 3) & 0xff = 0x25.
        t.mtc(0x25);
        assert_eq!(t.now(), Some(boundary + 8 * 84));
        // Two periods later, and the 8-bit payload wraps.
        t.mtc(0x27);
        assert_eq!(t.now(), Some(boundary + 3 * 8 * 84));
    }

    #[test]
    fn cycles_calibrate_without_ratios() {
        let mut t = Timer::new(
            TimeConfig {
                nonturbo_ratio: 0,
                ..cfg()
            },
            0,
        );
        t.tsc(1000);
        t.tma(0, 0);
        t.cyc(336);
        assert_eq!(t.now(), Some(1000), "no ratio yet");
        t.mtc(1);
        assert_eq!(t.now(), Some(1000 + 672));
        // 336 cycles took 672 ticks: 2 ticks a cycle.
        t.cyc(10);
        assert_eq!(t.now(), Some(1000 + 672 + 20));
    }

    #[test]
    fn the_tsc_wraps_its_56_bits() {
        let mut t = Timer::new(cfg(), (1 << 56) - 10);
        t.tsc(5);
        assert_eq!(t.now(), Some((1 << 56) + 5));
    }
}
