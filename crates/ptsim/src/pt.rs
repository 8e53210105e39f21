//! Intel PT packet encoder: turns a thread's branch trace into the packet stream a
//! processor tracing user space with `intel_pt/cyc,tsc[,noretcomp]/u` would write.
//!
//! Packet formats follow the Intel SDM vol. 3, ch. 33 ("Intel Processor Trace"). Timing
//! uses a TSC packet in every PSB+ and CYC packets before every TNT and IP packet; the
//! core clock equals the TSC clock (CBR = maximum non-turbo ratio), so one cycle is one
//! TSC tick and CYC counts convert exactly.

use crate::truth::{Step, StepKind};

/// Faults to inject while encoding, given as step indices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Each entry drops the packets of `count` steps starting at the first
    /// step at or after `at`, then emits OVF and a FUP where tracing resumes.
    pub overflows: Vec<(usize, usize)>,
    /// Each entry inserts an undefined packet after the first step at or after this
    /// index that ends with an IP packet; perf reports a bad packet and decodes on.
    pub corruptions: Vec<usize>,
}

/// Encoder settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtConfig {
    /// Compress returns into TNT bits as the hardware does (`noretcomp=0`).
    pub retcomp: bool,
    /// Approximate bytes between PSB packets.
    pub psb_period: usize,
    /// Added to the instruction clock to give TSC values.
    pub tsc_offset: u64,
    /// Core-to-bus ratio written in CBR packets (equal to the maximum non-turbo ratio).
    pub cbr: u8,
    /// MTC packets every 2^n crystal-clock (CTC) ticks, with TMA in PSB+; `None` for none.
    pub mtc_period: Option<u8>,
    /// TSC ticks per CTC tick (TSC:CTC ratio, denominator 1).
    pub tsc_ctc_ratio: u32,
}

impl Default for PtConfig {
    fn default() -> Self {
        Self {
            retcomp: true,
            psb_period: 16 * 1024,
            tsc_offset: 1 << 32,
            cbr: 20,
            // perf's default `mtc_period=3`; a 2 GHz TSC over a 24 MHz crystal is ~83.
            mtc_period: Some(3),
            tsc_ctc_ratio: 84,
        }
    }
}

/// A PSB emitted in the stream: where decoding can (re)synchronise.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PsbMark {
    /// Byte offset of the PSB.
    pub offset: usize,
    /// Number of steps fully encoded before it.
    pub steps_before: usize,
    /// Clock of the TSC packet it carries.
    pub clock: u64,
    /// IP in its FUP, if tracing was enabled.
    pub ip: Option<u64>,
}

/// A stretch of steps the decoder cannot see, and why.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// First lost step.
    pub first: usize,
    /// Steps lost.
    pub count: usize,
    /// What caused it.
    pub cause: GapCause,
    /// Where decoding resumes, with its clock (`None` if it never does).
    pub resume: Option<(u64, u64)>,
}

/// Causes of decoding gaps.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GapCause {
    /// An OVF packet: the hardware dropped packets.
    Overflow,
    /// A corrupt packet; perf reports it and decoding continues.
    Corrupt,
}

/// One thread's encoded stream.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// The packets.
    pub data: Vec<u8>,
    /// PSB positions.
    pub psbs: Vec<PsbMark>,
    /// Gaps caused by injected faults.
    pub gaps: Vec<Gap>,
    /// Steps at the end that perf never reports: when the stream ends with tracing still
    /// on (a thread killed by another's `exit_group` while in user code), the direct calls
    /// and jumps after its last packet. perf's decoder walks on from a packet's last
    /// branch only once it has the next packet, and there is none.
    pub unwalked_tail: usize,
}

const OP_TIP: u8 = 0x0d;
const OP_TIP_PGE: u8 = 0x11;
const OP_TIP_PGD: u8 = 0x01;
const OP_FUP: u8 = 0x1d;

/// Return targets a return may be compressed against: the youngest 64 calls' (SDM vol. 3
/// 33.4.2.2: the decoder keeps 64, a call beyond that drops the oldest; the processor's
/// call-depth counter saturates at the same depth, so a return deeper than that goes out
/// as a TIP). An unbounded stack compressed returns past 64 levels that no processor
/// compresses and that libipt and ptscope's decoder, keeping 64 as the SDM says, cannot
/// decode (perf's decoder keeps every call, so it could).
#[derive(Default)]
struct RetStack(std::collections::VecDeque<u64>);

impl RetStack {
    /// Entries the processor and the SDM's decoder keep.
    const DEPTH: usize = 64;

    fn push(&mut self, a: u64) {
        if self.0.len() == Self::DEPTH {
            self.0.pop_front();
        }
        self.0.push_back(a);
    }

    fn pop(&mut self) -> Option<u64> {
        self.0.pop_back()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

struct Enc<'a> {
    cfg: &'a PtConfig,
    out: Vec<u8>,
    last_ip: u64,
    /// The next IP packet goes out in full: after an overflow decoders disagree on
    /// the last IP (libipt resets it, perf 6.1 keeps the one before the OVF), and only
    /// an uncompressed IP means the same to both.
    full_ip: bool,
    tnt_count: u8,
    tnt_bits: u8,
    tnt_clock: u64,
    stack: RetStack,
    last_cyc: u64,
    last_psb: usize,
    enabled: bool,
    psbs: Vec<PsbMark>,
    /// TSC of the next MTC (a multiple of the MTC period in TSC ticks).
    next_mtc: u64,
}

impl Enc<'_> {
    /// TSC ticks between MTC packets, if MTC is on.
    fn mtc_step(&self) -> Option<u64> {
        self.cfg
            .mtc_period
            .map(|p| (self.cfg.tsc_ctc_ratio.max(1) as u64) << p)
    }

    /// Timing up to `clock`: the MTCs due by then (each preceded by a CYC bringing the
    /// cycle count to its boundary, so the decoder re-bases exactly there), then a CYC.
    fn cyc(&mut self, clock: u64) {
        self.advance(clock);
        self.cyc_only(clock);
    }

    /// Emits the MTCs due by `clock`. Pending TNT bits, all older than the next boundary
    /// (bits advance the clock as they are added), go out first, so a branch is never
    /// timed by a packet much later than itself.
    fn advance(&mut self, clock: u64) {
        if let (Some(step), Some(p)) = (self.mtc_step(), self.cfg.mtc_period) {
            let tsc = self.cfg.tsc_offset + clock;
            while self.next_mtc <= tsc {
                if self.tnt_count > 0 {
                    self.cyc_only(self.tnt_clock);
                    self.emit_tnt();
                }
                let at = self.next_mtc - self.cfg.tsc_offset;
                self.cyc_only(at);
                let ctc = self.next_mtc / self.cfg.tsc_ctc_ratio.max(1) as u64;
                self.out
                    .extend_from_slice(&[0x59, ((ctc >> p) & 0xff) as u8]);
                self.next_mtc += step;
            }
        }
    }

    /// MTC periods due by `clock`.
    fn mtcs_due(&self, clock: u64) -> u64 {
        match self.mtc_step() {
            Some(step) => {
                let tsc = self.cfg.tsc_offset + clock;
                if tsc < self.next_mtc {
                    0
                } else {
                    (tsc - self.next_mtc) / step + 1
                }
            }
            None => 0,
        }
    }

    fn cyc_only(&mut self, clock: u64) {
        let mut d = clock.saturating_sub(self.last_cyc);
        self.last_cyc = self.last_cyc.max(clock);
        if d == 0 {
            return;
        }
        let mut b = 0x03 | (((d & 0x1f) as u8) << 3);
        d >>= 5;
        if d != 0 {
            b |= 0x04;
        }
        self.out.push(b);
        while d != 0 {
            let mut b = ((d & 0x7f) as u8) << 1;
            d >>= 7;
            if d != 0 {
                b |= 1;
            }
            self.out.push(b);
        }
    }

    fn ip_packet(&mut self, op: u8, ip: Option<u64>) {
        let Some(ip) = ip else {
            self.out.push(op);
            return;
        };
        let last = self.last_ip;
        let sext48 = ((ip << 16) as i64 >> 16) as u64 == ip;
        let full = std::mem::take(&mut self.full_ip);
        let (kind, n) = if full {
            if sext48 {
                (3u8, 6usize)
            } else {
                (6, 8)
            }
        } else if last >> 16 == ip >> 16 {
            (1u8, 2usize)
        } else if last >> 32 == ip >> 32 {
            (2, 4)
        } else if sext48 {
            (3, 6)
        } else {
            (6, 8)
        };
        self.out.push(op | (kind << 5));
        self.out.extend_from_slice(&ip.to_le_bytes()[..n]);
        self.last_ip = ip;
    }

    fn flush_tnt(&mut self) {
        if self.tnt_count == 0 {
            return;
        }
        self.cyc(self.tnt_clock);
        self.emit_tnt();
    }

    fn emit_tnt(&mut self) {
        let n = self.tnt_count;
        if n == 0 {
            return;
        }
        self.out.push((1u8 << (n + 1)) | (self.tnt_bits << 1));
        self.tnt_count = 0;
        self.tnt_bits = 0;
    }

    fn tnt(&mut self, taken: bool, clock: u64) {
        if self.enabled {
            self.advance(clock);
        }
        self.tnt_bits = (self.tnt_bits << 1) | taken as u8;
        self.tnt_count += 1;
        self.tnt_clock = clock;
        if self.tnt_count == 6 {
            self.flush_tnt();
        }
    }

    fn psb_plus(&mut self, clock: u64, ip: Option<u64>, steps_before: usize) {
        // perf re-bases cycle counting at a TSC only when a CYC precedes it, so the
        // cycles up to the PSB must have been counted.
        if !self.psbs.is_empty() {
            self.cyc_only(clock);
        }
        self.psbs.push(PsbMark {
            offset: self.out.len(),
            steps_before,
            clock,
            ip,
        });
        for _ in 0..8 {
            self.out.extend_from_slice(&[0x02, 0x82]);
        }
        let tsc = self.cfg.tsc_offset + clock;
        self.out.push(0x19);
        self.out.extend_from_slice(&tsc.to_le_bytes()[..7]);
        if let Some(step) = self.mtc_step() {
            // TMA: CTC[15:0] and the fast counter (TSC ticks since that CTC tick).
            let ratio = self.cfg.tsc_ctc_ratio.max(1) as u64;
            let (ctc, fc) = (tsc / ratio, tsc % ratio);
            self.out.extend_from_slice(&[0x02, 0x73]);
            self.out.extend_from_slice(&(ctc as u16).to_le_bytes());
            self.out.push(0);
            self.out.push(fc as u8);
            self.out.push(((fc >> 8) & 1) as u8);
            self.next_mtc = (tsc / step + 1) * step;
        }
        self.out
            .extend_from_slice(&[0x02, 0x03, self.cfg.cbr, 0x00]);
        self.last_ip = 0;
        self.last_cyc = clock;
        // The decoder forgets its return stack at a PSB, so compression restarts.
        self.stack.clear();
        if let Some(ip) = ip {
            self.out.extend_from_slice(&[0x99, 0x01]);
            self.ip_packet(OP_FUP, Some(ip));
        }
        self.out.extend_from_slice(&[0x02, 0x23]);
        self.last_psb = self.out.len();
    }

    /// PSBs go where the decoder's position equals the true IP: right after an IP packet.
    fn maybe_psb(&mut self, clock: u64, ip: u64, steps_before: usize) {
        if self.out.len() - self.last_psb >= self.cfg.psb_period {
            self.psb_plus(clock, Some(ip), steps_before);
        }
    }

    fn tip(&mut self, clock: u64, to: u64) {
        self.flush_tnt();
        self.cyc(clock);
        self.ip_packet(OP_TIP, Some(to));
    }
}

/// True when the step makes the encoder emit an IP packet (given return compression state).
fn ends_with_ip(kind: StepKind) -> bool {
    matches!(
        kind,
        StepKind::IndirectJmp | StepKind::IndirectCall | StepKind::Return | StepKind::Start
    )
}

/// How many steps at the end of `steps` write no packet: direct calls and jumps (every
/// other kind of step writes a packet, or a TNT bit, of its own). Each is one branch perf
/// would report, had it a next packet to walk to.
pub(crate) fn packetless_tail(steps: &[Step]) -> usize {
    steps
        .iter()
        .rev()
        .take_while(|s| matches!(s.kind, StepKind::Call | StepKind::Jmp))
        .count()
}

/// Encodes one thread's steps.
pub fn encode(steps: &[Step], cfg: &PtConfig, faults: &Faults) -> Encoded {
    let mut e = Enc {
        cfg,
        out: Vec::with_capacity(steps.len() / 2 + 64),
        last_ip: 0,
        full_ip: false,
        tnt_count: 0,
        tnt_bits: 0,
        tnt_clock: 0,
        stack: RetStack::default(),
        last_cyc: steps.first().map_or(0, |s| s.clock),
        last_psb: 0,
        enabled: false,
        psbs: Vec::new(),
        next_mtc: u64::MAX,
    };
    let mut gaps = Vec::new();
    let mut overflows = faults.overflows.clone();
    overflows.sort_unstable();
    let mut overflows = overflows.into_iter().peekable();
    let mut corruptions = faults.corruptions.clone();
    corruptions.sort_unstable();
    let mut corruptions = corruptions.into_iter().peekable();
    // Steps still to drop in the current overflow, and the gap being built.
    let mut dropping = 0usize;
    let mut open_gap: Option<Gap> = None;
    let mut pending_corrupt = false;

    if let Some(first) = steps.first() {
        e.psb_plus(first.clock, None, 0);
    }
    for (i, s) in steps.iter().enumerate() {
        if dropping == 0 {
            if let Some(&(at, count)) = overflows.peek() {
                if i >= at && s.kind != StepKind::Start && e.enabled {
                    overflows.next();
                    // Packets before the overflow made it out.
                    e.flush_tnt();
                    dropping = count.max(1);
                    open_gap = Some(Gap {
                        first: i,
                        count: 0,
                        cause: GapCause::Overflow,
                        resume: None,
                    });
                }
            }
        }
        if dropping > 0 {
            let stops = matches!(s.kind, StepKind::Syscall | StepKind::Async { .. });
            if !stops {
                dropping -= 1;
                if let Some(g) = open_gap.as_mut() {
                    g.count += 1;
                }
                if dropping == 0 {
                    e.stack.clear();
                    e.cyc(s.clock);
                    e.out.extend_from_slice(&[0x02, 0xf3]);
                    e.full_ip = true;
                    e.ip_packet(OP_FUP, Some(s.to));
                    if let Some(mut g) = open_gap.take() {
                        g.resume = Some((s.to, s.clock));
                        gaps.push(g);
                    }
                }
                continue;
            }
            // Tracing stops inside the window: the stop is lost too and decoding
            // resumes at the next TIP.PGE.
            dropping = 0;
            e.stack.clear();
            e.cyc(s.clock);
            e.out.extend_from_slice(&[0x02, 0xf3]);
            e.full_ip = true;
            e.enabled = false;
            if let Some(mut g) = open_gap.take() {
                g.count += 1;
                gaps.push(g);
            }
            continue;
        }
        match s.kind {
            StepKind::Start => {
                // After a long untraced stretch the 8-bit MTC counter may have wrapped:
                // a PSB+ gives the decoder the time afresh.
                if !e.psbs.is_empty()
                    && (e.out.len() - e.last_psb >= cfg.psb_period || e.mtcs_due(s.clock) > 128)
                {
                    e.psb_plus(s.clock, None, i);
                }
                e.cyc(s.clock);
                e.out.extend_from_slice(&[0x99, 0x01]);
                e.ip_packet(OP_TIP_PGE, Some(s.to));
                e.stack.clear();
                e.enabled = true;
            }
            StepKind::Jcc { taken } => e.tnt(taken, s.clock),
            StepKind::Jmp => {}
            // A call to the next instruction (PIC code reading its own address) is not
            // pushed: the processor does not compress a return against it.
            StepKind::Call if s.to != s.from + s.len as u64 => e.stack.push(s.from + s.len as u64),
            StepKind::Call => {}
            StepKind::IndirectCall => {
                e.stack.push(s.from + s.len as u64);
                e.tip(s.clock, s.to);
                e.maybe_psb(s.clock, s.to, i + 1);
            }
            StepKind::IndirectJmp => {
                e.tip(s.clock, s.to);
                e.maybe_psb(s.clock, s.to, i + 1);
            }
            StepKind::Return => {
                // The decoder pops its stack on every return, compressed or not.
                let top = e.stack.pop();
                if cfg.retcomp && top == Some(s.to) {
                    e.tnt(true, s.clock);
                } else {
                    e.tip(s.clock, s.to);
                    e.maybe_psb(s.clock, s.to, i + 1);
                }
            }
            StepKind::Syscall => {
                e.flush_tnt();
                e.cyc(s.clock);
                e.ip_packet(OP_TIP_PGD, None);
                e.enabled = false;
                e.stack.clear();
            }
            StepKind::Async { .. } => {
                e.flush_tnt();
                e.cyc(s.clock);
                e.ip_packet(OP_FUP, Some(s.from));
                e.ip_packet(OP_TIP_PGD, None);
                e.enabled = false;
                e.stack.clear();
            }
        }
        if let Some(&at) = corruptions.peek() {
            if i >= at {
                pending_corrupt = true;
            }
        }
        let ip_packet_done = ends_with_ip(s.kind) && e.tnt_count == 0 && e.enabled;
        if pending_corrupt && ip_packet_done && e.last_psb != e.out.len() {
            corruptions.next();
            pending_corrupt = false;
            // 0x02 0x00 is no packet: perf reports a bad packet, skips one byte, reads the
            // 0x00 as PAD and carries on, so nothing is lost but the error is reported.
            e.out.extend_from_slice(&[0x02, 0x00]);
            gaps.push(Gap {
                first: i + 1,
                count: 0,
                cause: GapCause::Corrupt,
                resume: None,
            });
        }
    }
    e.flush_tnt();
    let mut unwalked_tail = 0;
    if let Some(mut g) = open_gap.take() {
        g.resume = None;
        gaps.push(g);
    } else if e.enabled {
        unwalked_tail = packetless_tail(steps);
    }
    Encoded {
        data: e.out,
        psbs: e.psbs,
        gaps,
        unwalked_tail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(kind: StepKind, clock: u64, from: u64, to: u64) -> Step {
        Step {
            clock,
            kind,
            from,
            to,
            len: 5,
        }
    }

    fn enc(cfg: &PtConfig) -> Enc<'_> {
        Enc {
            cfg,
            out: Vec::new(),
            last_ip: 0,
            full_ip: false,
            tnt_count: 0,
            tnt_bits: 0,
            tnt_clock: 0,
            stack: RetStack::default(),
            last_cyc: 0,
            last_psb: 0,
            enabled: true,
            psbs: Vec::new(),
            next_mtc: u64::MAX,
        }
    }

    #[test]
    fn direct_branches_after_the_last_packet_are_unwalked_when_the_stream_ends_traced() {
        let cfg = PtConfig::default();
        let mut steps = vec![
            step(StepKind::Start, 10, 0, 0x1000),
            step(StepKind::Jcc { taken: true }, 20, 0x1004, 0x1010),
            step(StepKind::Call, 30, 0x1014, 0x2000),
            step(StepKind::Jmp, 40, 0x2004, 0x2100),
        ];
        let killed = encode(&steps, &cfg, &Faults::default());
        assert_eq!(killed.unwalked_tail, 2);
        steps.push(step(StepKind::Syscall, 50, 0x2104, 0));
        let exited = encode(&steps, &cfg, &Faults::default());
        assert_eq!(exited.unwalked_tail, 0);
    }

    #[test]
    fn packet_encodings_match_the_sdm() {
        let cfg = PtConfig::default();
        let mut e = enc(&cfg);
        // CYC 0x32: low five bits in the header, the rest in one continuation byte.
        e.cyc(0x32);
        assert_eq!(e.out, [0x97, 0x02]);
        // Short TNT, oldest bit first below the stop bit: T N T.
        e.out.clear();
        e.tnt(true, 0x32);
        e.tnt(false, 0x32);
        e.tnt(true, 0x32);
        e.flush_tnt();
        assert_eq!(e.out, [0x1a]);
        // IP compression: same upper 48 bits -> two payload bytes.
        e.out.clear();
        e.last_ip = 0x40_0000_1000;
        e.ip_packet(OP_TIP, Some(0x40_0000_1234));
        assert_eq!(e.out, [0x2d, 0x34, 0x12]);
        // Upper bits differ but 48-bit sign extension works -> six bytes.
        e.out.clear();
        e.ip_packet(OP_TIP_PGE, Some(0x7fff_0000_0010));
        assert_eq!(e.out[0], 0x71);
        assert_eq!(e.out.len(), 7);
        // Suppressed IP.
        e.out.clear();
        e.ip_packet(OP_TIP_PGD, None);
        assert_eq!(e.out, [0x01]);
    }

    /// The FUP after an OVF carries its IP in full: compressed against libipt's reset
    /// last IP (0) perf 6.1 took the upper bytes of the IP before the overflow and
    /// resumed in another library (a non-PIE executable's low addresses fit in 4 bytes).
    #[test]
    fn the_ip_after_an_overflow_is_uncompressed() {
        let steps = [
            step(StepKind::Start, 0, 0, 0x40_0000_1000),
            step(StepKind::IndirectCall, 1, 0x40_0000_1000, 0x40_1000),
            step(StepKind::IndirectJmp, 2, 0x40_1000, 0x40_1100),
            step(StepKind::IndirectJmp, 3, 0x40_1100, 0x40_1200),
            step(StepKind::IndirectJmp, 4, 0x40_1200, 0x40_1300),
            step(StepKind::Syscall, 5, 0x40_1300, 0),
        ];
        let cfg = PtConfig::default();
        let faults = Faults {
            overflows: vec![(2, 1)],
            corruptions: Vec::new(),
        };
        let out = encode(&steps, &cfg, &faults).data;
        let ovf = out
            .windows(2)
            .position(|w| w == [0x02, 0xf3])
            .expect("an OVF");
        let fup = ovf
            + 2
            + out[ovf + 2..]
                .iter()
                .position(|&b| b & 0x1f == OP_FUP)
                .expect("a FUP");
        // IPBytes 011: six bytes, sign-extended, whatever the last IP.
        assert_eq!(out[fup], OP_FUP | 3 << 5, "{out:02x?}");
        assert_eq!(out[fup + 1..fup + 7], 0x40_1100u64.to_le_bytes()[..6]);
    }

    #[test]
    fn returns_compress_only_when_they_match_the_call() {
        let steps = [
            step(StepKind::Start, 0, 0, 0x1000),
            step(StepKind::Call, 1, 0x1000, 0x2000),
            step(StepKind::Return, 2, 0x2000, 0x1005),
            step(StepKind::Call, 3, 0x1005, 0x2000),
            // A return elsewhere (longjmp-like) cannot be compressed.
            step(StepKind::Return, 4, 0x2000, 0x3000),
            step(StepKind::Syscall, 5, 0x3000, 0),
        ];
        let cfg = PtConfig::default();
        let out = encode(&steps, &cfg, &Faults::default()).data;
        let tips = out.iter().filter(|&&b| b & 0x1f == OP_TIP).count();
        // A TNT bit (taken) for the first return, a TIP only for the second.
        assert_eq!(tips, 1, "{out:02x?}");
        let noret = PtConfig {
            retcomp: false,
            ..PtConfig::default()
        };
        let out = encode(&steps, &noret, &Faults::default()).data;
        assert_eq!(out.iter().filter(|&&b| b & 0x1f == OP_TIP).count(), 2);
    }

    /// Returns from a recursion 70 calls deep: the youngest 64 compress, the 6 oldest go
    /// out as TIPs, as a processor (and libipt's and ptscope's 64-entry stack) has them.
    /// With an unbounded stack all 70 compressed, and a python3 run whose parser recursed
    /// deeper than 64 between two PSBs decoded with 43 "Return with no matching call"
    /// errors in the builtin decoder (1 in libipt) where perf, keeping every call, did not.
    #[test]
    fn returns_deeper_than_64_calls_are_not_compressed() {
        let depth = 70u64;
        let at = |i: u64| 0x1000 + 0x10 * i;
        let mut steps = vec![step(StepKind::Start, 0, 0, at(0))];
        for i in 0..depth {
            steps.push(step(StepKind::Call, i + 1, at(i), at(i + 1)));
        }
        for i in (0..depth).rev() {
            steps.push(step(StepKind::Return, 2 * depth - i, at(i + 1), at(i) + 5));
        }
        steps.push(step(StepKind::Syscall, 2 * depth + 1, at(0) + 5, 0));
        let out = encode(&steps, &PtConfig::default(), &Faults::default()).data;
        let tips = out.iter().filter(|&&b| b & 0x1f == OP_TIP).count();
        assert_eq!(tips, 6, "{out:02x?}");
    }

    #[test]
    fn psbs_carry_the_current_ip_and_reset_compression() {
        let mut steps = vec![step(StepKind::Start, 0, 0, 0x40_0000_0000)];
        for i in 0..2000u64 {
            steps.push(step(
                StepKind::IndirectJmp,
                i + 1,
                0x40_0000_0000 + i,
                0x40_0000_1000 + i * 64,
            ));
        }
        let cfg = PtConfig {
            psb_period: 256,
            ..PtConfig::default()
        };
        let enc = encode(&steps, &cfg, &Faults::default());
        assert!(enc.psbs.len() > 5);
        for p in &enc.psbs[1..] {
            assert_eq!(&enc.data[p.offset..p.offset + 4], &[0x02, 0x82, 0x02, 0x82]);
            let ip = p.ip.expect("tracing is on");
            assert_eq!(ip, steps[p.steps_before - 1].to);
        }
    }
}
