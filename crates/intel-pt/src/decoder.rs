//! Packets → instructions: the walk.
//!
//! The decoder keeps the position of execution (an IP) and walks the program's code a
//! basic block at a time ([`BlockCache`]). At the end of each block it needs what the
//! trace says: a conditional branch takes the next TNT bit, a return a TNT bit
//! (compressed) or a TIP, an indirect branch a TIP; direct jumps and calls need
//! nothing. Packets that bind to a position — a FUP (an interrupt, a TSX change, a
//! PTWRITE's IP), a TIP.PGD (tracing stops at the next branch leaving the traced
//! context) — make the walk stop there. Timing packets move the clock as they are met.
//!
//! Errors never stop decoding: each is reported as an [`EventKind::Error`] and the
//! decoder goes on — at the next IP packet when the code was missing (the packets still
//! make sense), at the next PSB when the trace and the code disagree, one byte further
//! (as perf does) after a bad packet, at the FUP after an overflow.
//!
//! Times are TSC ticks. Each packet that a branch consumes times that branch exactly
//! (with CYC, to the cycle); the branches walked between two such branches get times
//! interpolated by the instructions between them, so no branch is later than the packet
//! that follows it nor earlier than the one before. A repeated string instruction takes
//! a time the trace does not tell: branches on either side of it are timed from the
//! packet on their side, and those between two of them share one time.

use crate::cache::BlockCache;
use crate::insn::{insns_before, Block, End, FactKind};
use crate::packet::{find_psb, ExecMode, IpPayload, Packet, PacketError, Packets};
use crate::time::{TimeConfig, Timer};
use std::fmt;

/// Where the code comes from, and which address space runs when.
pub trait Memory {
    /// The code at `ip` in address space `space`: the bytes from `ip` to the end of
    /// what is known there (a mapping's end), or `None`.
    fn code(&self, space: u32, ip: u64) -> Option<&[u8]>;

    /// The address space (a process, in one of its execs) running from TSC `time` on,
    /// asked when tracing starts or the decoder synchronises. One space by default.
    fn space_at(&self, _time: u64) -> u32 {
        0
    }

    /// The key blocks of `space` are cached under: spaces that run the same code (the
    /// threads of one process) share their blocks.
    fn cache_key(&self, space: u32) -> u32 {
        space
    }
}

/// How the trace was recorded, as the walk needs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Returns may be compressed into TNT bits (perf's default; `noretcomp` turns it
    /// off).
    pub return_compression: bool,
    /// The trace has CYC packets: every packet is timed to the cycle.
    pub cyc: bool,
    /// Timing packets' settings.
    pub time: TimeConfig,
    /// After a packet that decodes as none, go on at the next byte (as perf does)
    /// instead of at the next PSB.
    pub skip_bad_bytes: bool,
    /// Report every block walked ([`EventKind::Block`]): the instruction flow, for
    /// tests and tools.
    pub blocks: bool,
    /// Blocks walked through direct branches alone before the walk counts as an endless
    /// loop.
    pub max_direct_blocks: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            return_compression: true,
            cyc: false,
            time: TimeConfig::default(),
            skip_bad_bytes: true,
            blocks: false,
            max_direct_blocks: 1 << 20,
        }
    }
}

/// The kind of a taken branch.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// A taken conditional branch.
    Jcc,
    /// A direct jump.
    Jmp,
    /// An indirect jump.
    IndJmp,
    /// A direct call.
    Call,
    /// An indirect call.
    IndCall,
    /// A return.
    Ret,
    /// A far call, jump or return, or IRET.
    Far,
    /// SYSCALL/SYSENTER.
    Syscall,
    /// SYSRET/SYSEXIT.
    Sysret,
    /// A software interrupt.
    Int,
    /// An asynchronous transfer (an interrupt or exception seen inside the traced
    /// context: FUP + TIP).
    Async,
    /// A TSX abort.
    TxAbort,
}

/// Why tracing stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// A branch left the traced context (a syscall into the kernel when only user
    /// space is traced, a jump out of a filtered range): the branch's kind.
    Branch(BranchKind),
    /// An asynchronous event (interrupt, exception, signal) at `from` (FUP +
    /// TIP.PGD): `from` is the first instruction that did not run.
    Async,
    /// A TraceStop packet.
    TraceStop,
}

/// What went wrong in the trace.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DecodeError {
    /// Bytes that are no packet ([`PacketError`]).
    BadPacket(PacketError),
    /// No code is known at the IP (unmapped, JIT, a file that does not match).
    NoCode,
    /// The trace does not fit the code (a TNT bit where no conditional branch is, …).
    Mismatch,
    /// A compressed return with no call to return to.
    EmptyReturnStack,
    /// The processor dropped packets (OVF).
    Overflow,
    /// The code loops through direct branches without end.
    EndlessLoop,
    /// The trace ended inside a packet.
    Truncated,
}

impl DecodeError {
    /// perf's words for the error, so a trace reads the same through either decoder.
    pub fn message(self) -> &'static str {
        match self {
            DecodeError::BadPacket(_) => "Bad packet",
            DecodeError::NoCode => "Failed to get instruction",
            DecodeError::Mismatch => "Trace doesn't match instruction",
            DecodeError::EmptyReturnStack => "Return with no matching call",
            DecodeError::Overflow => "Overflow packet",
            DecodeError::EndlessLoop => "Never-ending loop",
            DecodeError::Truncated => "Unexpected end of trace data",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// What the decoder reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A taken branch from the instruction at `from` to `to`.
    Branch {
        /// Which kind.
        kind: BranchKind,
        /// The branch instruction.
        from: u64,
        /// Its target.
        to: u64,
    },
    /// Tracing starts at `at` (TIP.PGE), or resumes there after an overflow.
    Start {
        /// The first instruction traced.
        at: u64,
        /// After an overflow (OVF + FUP).
        after_overflow: bool,
    },
    /// Tracing stops at `from`.
    Stop {
        /// The branch instruction that left, or the first instruction that did not run.
        from: u64,
        /// Why.
        why: StopReason,
    },
    /// The trace could not be decoded here; decoding goes on (see the module docs).
    Error {
        /// What went wrong.
        error: DecodeError,
        /// Offset in the trace.
        offset: u64,
        /// Where execution was (0: unknown; an `Option` would make every event 8
        /// bytes wider).
        ip: u64,
    },
    /// A PTWRITE's operand.
    Ptwrite {
        /// The PTWRITE instruction (0 when unknown).
        ip: u64,
        /// Its value.
        payload: u64,
    },
    /// The core:bus ratio (the core's frequency in 100 MHz units).
    Cbr {
        /// The ratio.
        ratio: u8,
    },
    /// A TSX transaction began, committed or aborted at `ip`.
    Tsx {
        /// Where.
        ip: u64,
        /// Inside a transaction now.
        intx: bool,
        /// It aborted.
        abort: bool,
    },
    /// An instruction worth knowing ran (see [`FactKind`]).
    Fact {
        /// Its address.
        ip: u64,
        /// What it is.
        kind: FactKind,
    },
    /// The address space running changed (per-CPU traces follow the scheduler).
    Space(u32),
    /// A block was walked: the instructions from `start` to `last` (with
    /// [`Config::blocks`] only).
    Block {
        /// First instruction.
        start: u64,
        /// Last instruction that ran.
        last: u64,
        /// Instructions.
        insns: u32,
        /// The code's address size (64, 32 or 16): how to decode it again.
        bitness: u8,
    },
}

/// One decoded event: when, and what. 32 bytes: the decoder writes millions of them
/// and the source reads them on another core, so their size is memory traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// TSC ticks (0 when the trace has no time yet).
    pub time: u64,
    /// What happened.
    pub kind: EventKind,
}

const _: () = assert!(std::mem::size_of::<Event>() == 32);

/// Entries of the return stack (the processor's is 64 deep).
const RET_STACK: usize = 64;

/// The processor's stack of call return addresses, mirrored for compressed returns.
#[derive(Clone, Debug)]
struct RetStack {
    entries: [u64; RET_STACK],
    top: usize,
    len: usize,
}

impl RetStack {
    fn new() -> Self {
        RetStack {
            entries: [0; RET_STACK],
            top: 0,
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, a: u64) {
        self.top = (self.top + 1) % RET_STACK;
        self.entries[self.top] = a;
        self.len = (self.len + 1).min(RET_STACK);
    }

    #[inline]
    fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let a = self.entries[self.top];
        self.top = (self.top + RET_STACK - 1) % RET_STACK;
        self.len -= 1;
        Some(a)
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

/// A control packet waiting to be consumed, with where and when it was read.
#[derive(Copy, Clone, Debug)]
struct Pending {
    packet: Control,
    offset: usize,
    time: Option<u64>,
}

/// The packets the walk consumes (the others are taken as they are read).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Control {
    /// TNT bits left (the next is bit `count - 1`).
    /// (`count` is 64 bits wide: copied with the packet, a byte-wide count was
    /// written narrow and read back wide, a stalled load.)
    Tnt { bits: u64, count: u64 },
    /// TIP with its IP (`None`: suppressed).
    Tip(Option<u64>),
    /// TIP.PGE.
    Pge(Option<u64>),
    /// TIP.PGD.
    Pgd(Option<u64>),
    /// FUP, and what it is bound to.
    Fup(Option<u64>, Bind),
    /// OVF.
    Ovf,
    /// PSB (its status packets are read when it is handled).
    Psb,
    /// TraceStop.
    Stop,
}

/// What a FUP belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Bind {
    /// Nothing before it: an asynchronous event, a TIP or TIP.PGD follows.
    Async,
    /// A MODE.TSX change.
    Tsx { intx: bool, abort: bool },
    /// A PTW with its IP.
    Ptw(u64),
    /// EXSTOP, CFE or BEP with an IP: a status.
    Status,
    /// An OVF: where tracing resumes.
    Overflow,
}

/// How a walk step ended.
enum Step {
    /// Go on.
    Go,
    /// The trace (or the chunk) ended.
    End,
}

/// The decoder of one trace buffer (see the module documentation).
pub struct Decoder<'t, 'm, M: Memory> {
    packets: Packets<'t>,
    mem: &'m M,
    cache: &'m mut BlockCache,
    cfg: Config,
    timer: Timer,
    /// Synchronised (at a PSB, or at the start when told so).
    synced: bool,
    /// Tracing is on: `ip` is where execution is.
    enabled: bool,
    /// The position is known (false after missing code, until the next IP packet).
    have_ip: bool,
    ip: u64,
    last_ip: u64,
    mode: ExecMode,
    /// MODE.Exec read, applied at the next TIP.PGE (or far transfer).
    pending_mode: Option<ExecMode>,
    /// The next FUP's binding.
    next_bind: Bind,
    space: u32,
    /// The cache key of `space`.
    key: u32,
    pending: Option<Pending>,
    /// Bits of a pending TNT already taken. Counted here, not by rewriting `pending`
    /// at every bit: the pending packet is read whole at each step of the walk, and a
    /// wide read of what was just written narrow is a stalled load (store forwarding
    /// fails), which took a fifth of the walk's samples.
    tnt_taken: u64,
    rets: RetStack,
    in_tx: bool,
    /// PTW payloads without an IP, waiting for the PTWRITE instructions the walk
    /// meets next (the packet comes before the walk reaches its instruction).
    ptwrites: std::collections::VecDeque<u64>,
    after_overflow: bool,
    insn: u64,
    /// Events of `out` up to here are confirmed by a later packet.
    committed: usize,
    /// The first event without a time: the events from here on hold in `time` the
    /// instructions walked (`insn`) when they happened, what times them at the next
    /// anchor (kept in the event, not beside it: no second vector to push to).
    untimed_from: usize,
    /// The last timed event's instruction count and time.
    anchor: Option<(u64, u64)>,
    /// Instruction counts of the first and last repeated string instruction walked since
    /// the last anchor: their time is unknown, so events around them are timed from the
    /// anchor on their side.
    reps: Option<(u64, u64)>,
    /// TSC ticks per instruction, `<< 16`, measured on the last spans without them.
    rate: u64,
    /// Stop at this offset (a PSB that starts the next chunk), after walking to its IP.
    end_at: Option<usize>,
    finished: bool,
}

impl<'t, 'm, M: Memory> Decoder<'t, 'm, M> {
    /// A decoder of `trace`, reading code from `mem` through `cache`. `reference` gives
    /// the TSC's upper bits (perf's AUXTRACE `reference`; 0 when unknown).
    pub fn new(
        trace: &'t [u8],
        cfg: Config,
        mem: &'m M,
        cache: &'m mut BlockCache,
        reference: u64,
    ) -> Self {
        Decoder {
            packets: Packets::new(trace),
            mem,
            cache,
            cfg,
            timer: Timer::new(cfg.time, reference),
            synced: false,
            enabled: false,
            have_ip: false,
            ip: 0,
            last_ip: 0,
            mode: ExecMode {
                csl: true,
                csd: false,
                iflag: false,
            },
            pending_mode: None,
            next_bind: Bind::Async,
            space: u32::MAX,
            key: u32::MAX,
            pending: None,
            tnt_taken: 0,
            rets: RetStack::new(),
            in_tx: false,
            ptwrites: std::collections::VecDeque::new(),
            after_overflow: false,
            insn: 0,
            committed: 0,
            untimed_from: 0,
            anchor: None,
            reps: None,
            rate: 0,
            end_at: None,
            finished: false,
        }
    }

    /// Decodes only up to the PSB at `offset` (the next chunk's start): the walk goes
    /// on to that PSB's IP, so the chunks' events join without a seam.
    pub fn end_at(&mut self, offset: usize) {
        self.end_at = Some(offset);
    }

    /// Starts at the first PSB at or after `offset`; false when there is none.
    pub fn sync_forward(&mut self, offset: usize) -> bool {
        match find_psb(self.packets.buffer(), offset) {
            Some(p) => {
                self.packets.set_position(p);
                true
            }
            None => {
                self.packets.set_position(self.packets.buffer().len());
                false
            }
        }
    }

    /// The offset of the next packet to read.
    pub fn position(&self) -> usize {
        self.packets.position()
    }

    /// Decodes to the end (of the trace, or of the chunk), appending to `out`. Events
    /// walked after the last packet (direct branches the trace never confirms) are
    /// left out, as perf does.
    pub fn run(&mut self, out: &mut Vec<Event>) {
        self.untimed_from = out.len();
        self.committed = out.len();
        while !self.finished {
            let step = if !self.synced {
                self.sync(out)
            } else if !self.enabled || !self.have_ip {
                self.idle(out)
            } else {
                self.walk(out)
            };
            if let Step::End = step {
                self.finished = true;
            }
        }
        out.truncate(self.committed);
        let last = self.anchor.map(|a| a.1).or(self.timer.now()).unwrap_or(0);
        let from = self.untimed_from.min(out.len());
        for e in &mut out[from..] {
            e.time = last;
        }
    }

    // ----- events and time -----

    #[inline]
    fn push(&mut self, out: &mut Vec<Event>, kind: EventKind) {
        // Untimed: `time` holds the instruction count until `anchor` times it.
        out.push(Event {
            time: self.insn,
            kind,
        });
    }

    /// The events so far happened: a packet confirmed them.
    #[inline]
    fn commit(&mut self, out: &[Event]) {
        self.committed = out.len();
    }

    /// The last event pushed happened at `time` (a packet's): the untimed events before
    /// it get times between the previous anchor and this one, by instruction count.
    fn anchor(&mut self, out: &mut [Event], time: Option<u64>) {
        let Some(t) = time else {
            return;
        };
        let insn = self.insn;
        let (ai, at) = match self.anchor {
            Some((ai, at)) => (ai, at.min(t)),
            None => (insn, t),
        };
        let span = insn.saturating_sub(ai);
        let reps = self.reps.take();
        // A repeated string instruction runs for as long as its count says, which the
        // trace does not tell: the span's time beyond its instructions at the measured
        // rate (the slack) went to its repeated instructions. Events before the first
        // run at that rate from the earlier anchor, events after the last back from
        // this one: both exact. Between two of them how the slack divides is unknown:
        // those events share one time, so that a frame entered and left there is not
        // drawn where it never ran (spread by instruction count, a leaf called right
        // after a `rep stos` showed before the `rep` had ended). Without a rate yet,
        // nothing in the span can be placed: all of it takes this anchor's time, as
        // perf times a packet's branches.
        let rate = self.rate;
        let slack = reps.is_some()
            && rate > 0
            && u128::from(t - at) << 16 > u128::from(span) * u128::from(rate);
        let unplaced = reps.is_some() && rate == 0;
        for e in &mut out[self.untimed_from..] {
            let n = e.time;
            e.time = if span == 0 || unplaced || n >= insn {
                t
            } else if let (true, Some((first, last))) = (slack, reps) {
                let per = |n: u64| ((u128::from(n) * u128::from(rate)) >> 16) as u64;
                if n < first {
                    (at + per(n - ai)).min(t)
                } else if n >= last {
                    t.saturating_sub(per(insn - n)).max(at)
                } else {
                    let a = (at + per(first - ai)).min(t);
                    let b = t.saturating_sub(per(insn - last)).max(a);
                    a + (b - a) / 2
                }
            } else {
                let k = n.saturating_sub(ai);
                at + crate::time::mul_div(t - at, k, span)
            };
        }
        if reps.is_none() && span >= 16 && t > at {
            // In 64 bits where it fits (always, but for gaps of 2^48 ticks): a 128-bit
            // division is a call, at every timed packet.
            let r = if t - at < 1 << 48 {
                ((t - at) << 16) / span
            } else {
                ((u128::from(t - at) << 16) / u128::from(span)) as u64
            };
            self.rate = if self.rate == 0 {
                r
            } else {
                (self.rate * 3 + r) / 4
            };
        }
        self.untimed_from = out.len();
        self.anchor = Some((insn, t));
    }

    /// A block with a repeated string instruction ran up to instruction `at`.
    #[inline]
    fn rep_walked(&mut self, at: u64) {
        self.reps = Some(match self.reps {
            Some((first, _)) => (first, at),
            None => (at, at),
        });
    }

    fn error(&mut self, out: &mut Vec<Event>, error: DecodeError, offset: usize) {
        let ip = if self.enabled && self.have_ip {
            self.ip
        } else {
            0
        };
        self.push(
            out,
            EventKind::Error {
                error,
                offset: offset as u64,
                ip,
            },
        );
        let t = self.timer.now();
        self.anchor(out, t);
        self.commit(out);
    }

    // ----- packets -----

    /// The next control packet, reading (and acting on) the others before it; `None`
    /// at the end of the trace or chunk.
    #[inline(always)]
    fn peek(&mut self, out: &mut Vec<Event>) -> Option<Pending> {
        // Inlined: a TNT packet's bits are taken one by one through `pending`, and
        // copying it out whole through a call read back wide what `take_bit` had just
        // written narrow, a stalled load with half of this function's samples.
        if let Some(p) = self.pending {
            return Some(self.untaken(p));
        }
        self.read_control(out)
    }

    /// The pending packet `p` without the TNT bits taken.
    #[inline(always)]
    fn untaken(&self, mut p: Pending) -> Pending {
        if let Control::Tnt { count, .. } = &mut p.packet {
            *count -= self.tnt_taken;
        }
        p
    }

    /// No packet is pending.
    #[inline]
    fn clear_pending(&mut self) {
        self.pending = None;
        self.tnt_taken = 0;
    }

    /// [`Decoder::peek`] without a pending packet: reads packets up to the next control
    /// packet.
    #[inline(never)]
    fn read_control(&mut self, out: &mut Vec<Event>) -> Option<Pending> {
        loop {
            let offset = self.packets.position();
            if self.end_at == Some(offset) {
                // The next chunk's PSB: read its status to walk to its IP, then stop.
                self.pending = Some(Pending {
                    packet: Control::Psb,
                    offset,
                    time: self.timer.now(),
                });
                return self.pending;
            }
            let packet = match self.packets.next_short() {
                Some(Packet::Cyc { cycles }) => {
                    self.timer.cyc(cycles);
                    continue;
                }
                Some(p) => p,
                None => match self.packets.next_packet()? {
                    Ok((_, p)) => p,
                    Err(e) => {
                        self.bad_packet(out, e, offset);
                        continue;
                    }
                },
            };
            let control = match packet {
                Packet::Pad | Packet::Mnt { .. } | Packet::Vmcs { .. } => continue,
                Packet::Tsc { tsc } => {
                    self.timer.tsc(tsc);
                    self.floor(out);
                    continue;
                }
                Packet::Mtc { ctc } => {
                    self.timer.mtc(ctc);
                    self.floor(out);
                    continue;
                }
                Packet::Tma { ctc, fc } => {
                    self.timer.tma(ctc, fc);
                    continue;
                }
                Packet::Cyc { cycles } => {
                    self.timer.cyc(cycles);
                    continue;
                }
                Packet::Cbr { ratio } => {
                    self.timer.cbr_ratio(ratio);
                    if self.enabled && self.have_ip {
                        self.push(out, EventKind::Cbr { ratio });
                    }
                    continue;
                }
                Packet::ModeExec(m) => {
                    self.pending_mode = Some(m);
                    continue;
                }
                Packet::ModeTsx { intx, abort } => {
                    self.next_bind = Bind::Tsx { intx, abort };
                    continue;
                }
                Packet::Pip { .. } => continue,
                Packet::Ptw { payload, ip, .. } => {
                    if ip {
                        self.next_bind = Bind::Ptw(payload);
                    } else if self.enabled && self.have_ip {
                        self.ptwrites.push_back(payload);
                    } else {
                        // Tracing is off or the position lost: nothing will confirm
                        // it later.
                        self.push(out, EventKind::Ptwrite { ip: 0, payload });
                        self.commit(out);
                    }
                    continue;
                }
                Packet::Exstop { ip } | Packet::Bep { ip } | Packet::Cfe { ip, .. } => {
                    if ip {
                        self.next_bind = Bind::Status;
                    }
                    continue;
                }
                Packet::Trig { ip: true, .. } => {
                    // A FUP follows with the trigger's IP.
                    self.next_bind = Bind::Status;
                    continue;
                }
                Packet::Trig { .. }
                | Packet::Mwait { .. }
                | Packet::Pwre { .. }
                | Packet::Pwrx { .. }
                | Packet::Bbp { .. }
                | Packet::Bip { .. }
                | Packet::Evd { .. }
                | Packet::PsbEnd => continue,
                Packet::Tnt { bits, count } => Control::Tnt {
                    bits,
                    count: u64::from(count),
                },
                Packet::Tip(ip) => Control::Tip(self.ip_of(ip)),
                Packet::TipPge(ip) => Control::Pge(self.ip_of(ip)),
                Packet::TipPgd(ip) => Control::Pgd(self.ip_of(ip)),
                Packet::Fup(ip) => {
                    let bind = std::mem::replace(&mut self.next_bind, Bind::Async);
                    Control::Fup(self.ip_of(ip), bind)
                }
                Packet::Ovf => Control::Ovf,
                Packet::Psb => Control::Psb,
                Packet::TraceStop => Control::Stop,
            };
            self.pending = Some(Pending {
                packet: control,
                offset,
                time: self.timer.now(),
            });
            return self.pending;
        }
    }

    /// An IP packet's address, updating the last IP.
    #[inline]
    fn ip_of(&mut self, p: IpPayload) -> Option<u64> {
        let ip = p.apply(self.last_ip)?;
        self.last_ip = ip;
        Some(ip)
    }

    /// Without CYC, a TSC or MTC is the best time there is for what follows.
    fn floor(&mut self, out: &mut [Event]) {
        if !self.cfg.cyc && self.synced {
            let t = self.timer.now();
            if let (Some(t), Some((ai, at))) = (t, self.anchor) {
                if t > at && self.untimed_from == out.len() {
                    self.anchor = Some((ai.max(self.insn), t));
                }
            }
        }
    }

    fn bad_packet(&mut self, out: &mut Vec<Event>, e: PacketError, offset: usize) {
        if e == PacketError::Truncated {
            // The trace ends inside a packet.
            self.packets.set_position(self.packets.buffer().len());
            if self.synced {
                self.error(out, DecodeError::Truncated, offset);
            }
            return;
        }
        if self.synced {
            self.error(out, DecodeError::BadPacket(e), offset);
        }
        if self.cfg.skip_bad_bytes && self.synced {
            self.packets.set_position(offset + 1);
        } else {
            self.lose_sync(offset + 1);
        }
    }

    /// Forgets the position and looks for the next PSB from `offset`.
    fn lose_sync(&mut self, offset: usize) {
        self.synced = false;
        self.clear_pending();
        let end = self.end_at.unwrap_or(usize::MAX);
        match find_psb(self.packets.buffer(), offset) {
            Some(p) if p <= end => self.packets.set_position(p),
            _ => self
                .packets
                .set_position(end.min(self.packets.buffer().len())),
        }
        if self.end_at.is_some_and(|e| self.packets.position() >= e) {
            self.finished = true;
        }
    }

    /// Consumes the pending packet.
    #[inline]
    fn consume(&mut self) -> Option<Pending> {
        let p = self.pending.map(|p| self.untaken(p));
        self.clear_pending();
        p
    }

    // ----- synchronisation -----

    /// Looks for a PSB and reads its status; `Step::End` when the trace has none left.
    fn sync(&mut self, out: &mut Vec<Event>) -> Step {
        let at = self.packets.position();
        let Some(p) = find_psb(self.packets.buffer(), at) else {
            return Step::End;
        };
        if self.end_at.is_some_and(|e| p >= e) {
            return Step::End;
        }
        self.packets.set_position(p);
        // Skip the PSB itself.
        let _ = self.packets.next_packet();
        self.synced = true;
        self.enabled = false;
        self.have_ip = false;
        self.rets.clear();
        self.last_ip = 0;
        self.clear_pending();
        self.next_bind = Bind::Async;
        self.after_overflow = false;
        let fup = self.psb_status(out);
        if let Some(ip) = fup {
            self.enabled = true;
            self.have_ip = true;
            self.ip = ip;
            self.apply_mode();
            self.enter_space(out);
            let t = self.timer.now();
            self.anchor(out, t);
            self.commit(out);
        }
        Step::Go
    }

    /// Reads a PSB+'s status packets up to PSBEND; its FUP's IP, if any.
    fn psb_status(&mut self, out: &mut Vec<Event>) -> Option<u64> {
        let mut fup = None;
        self.last_ip = 0;
        self.rets.clear();
        loop {
            let offset = self.packets.position();
            let (_, packet) = match self.packets.next_packet()? {
                Ok(p) => p,
                Err(e) => {
                    self.bad_packet(out, e, offset);
                    return None;
                }
            };
            match packet {
                Packet::PsbEnd => break,
                Packet::Tsc { tsc } => self.timer.tsc(tsc),
                Packet::Tma { ctc, fc } => self.timer.tma(ctc, fc),
                Packet::Mtc { ctc } => self.timer.mtc(ctc),
                Packet::Cyc { cycles } => self.timer.cyc(cycles),
                Packet::Cbr { ratio } => self.timer.cbr_ratio(ratio),
                Packet::ModeExec(m) => self.pending_mode = Some(m),
                Packet::ModeTsx { intx, .. } => self.in_tx = intx,
                Packet::Fup(ip) => fup = self.ip_of(ip),
                Packet::Ovf => {
                    // An overflow inside PSB+: what follows decides.
                    self.packets.set_position(offset);
                    break;
                }
                Packet::Psb => {
                    // A PSB+ without its end: start again with this one.
                    self.last_ip = 0;
                }
                _ => {}
            }
        }
        fup
    }

    /// Enters the address space running now, if it changed.
    fn enter_space(&mut self, out: &mut Vec<Event>) {
        let s = self.mem.space_at(self.timer.now().unwrap_or(0));
        if s != self.space {
            self.space = s;
            self.key = self.mem.cache_key(s);
            self.push(out, EventKind::Space(s));
        }
    }

    fn apply_mode(&mut self) {
        if let Some(m) = self.pending_mode.take() {
            self.mode = m;
        }
    }

    // ----- tracing off, or position lost -----

    /// Tracing is off (or the position was lost): wait for a packet that gives one.
    fn idle(&mut self, out: &mut Vec<Event>) -> Step {
        let Some(p) = self.peek(out) else {
            return Step::End;
        };
        self.consume();
        match p.packet {
            Control::Pge(ip) => {
                if self.enabled {
                    // Tracing was on with the position lost: it stopped somewhere in
                    // the code the walk could not follow.
                    self.push(
                        out,
                        EventKind::Stop {
                            from: 0,
                            why: StopReason::Async,
                        },
                    );
                    self.enabled = false;
                }
                self.pgd_cleanup();
                let bind = std::mem::replace(&mut self.next_bind, Bind::Async);
                match ip {
                    Some(ip) => {
                        if let Bind::Tsx { intx, abort } = bind {
                            // A MODE.TSX before TIP.PGE: the transaction state tracing
                            // starts in.
                            self.in_tx = intx;
                            self.push(out, EventKind::Tsx { ip, intx, abort });
                        }
                        self.enabled = true;
                        self.have_ip = true;
                        self.after_overflow = false;
                        self.ip = ip;
                        self.apply_mode();
                        self.enter_space(out);
                        self.push(
                            out,
                            EventKind::Start {
                                at: ip,
                                after_overflow: false,
                            },
                        );
                        self.anchor(out, p.time);
                        self.commit(out);
                    }
                    None => self.error(out, DecodeError::Mismatch, p.offset),
                }
            }
            Control::Fup(Some(ip), Bind::Overflow) => self.resume(out, ip, p),
            // The FUP after an overflow may be dropped (erratum SKD010) or bound to a
            // MODE.TSX: the next IP is where tracing resumed.
            Control::Tip(Some(ip)) if self.after_overflow && !self.enabled => {
                self.next_bind = Bind::Async;
                self.resume(out, ip, p);
            }
            Control::Fup(Some(ip), Bind::Tsx { intx, abort })
                if self.after_overflow && !self.enabled =>
            {
                self.in_tx = intx;
                self.push(out, EventKind::Tsx { ip, intx, abort });
                self.resume(out, ip, p);
            }
            Control::Tip(Some(ip)) | Control::Fup(Some(ip), _) if self.enabled => {
                // Missing code made the decoder lose its place: an IP packet gives it
                // back.
                self.have_ip = true;
                self.ip = ip;
                if let Control::Tip(_) = p.packet {
                    self.apply_mode();
                }
                match p.packet {
                    // FUP + TIP/TIP.PGD: the event happens at this IP.
                    Control::Fup(_, Bind::Async) => return self.async_event(out, ip, p),
                    Control::Fup(_, Bind::Ptw(payload)) => {
                        self.push(out, EventKind::Ptwrite { ip, payload });
                        self.anchor(out, p.time);
                        self.commit(out);
                    }
                    _ => {}
                }
            }
            Control::Fup(Some(ip), Bind::Ptw(payload)) => {
                // A PTWRITE while the position is unknown: its FUP gives its address.
                self.push(out, EventKind::Ptwrite { ip, payload });
                self.anchor(out, p.time);
                self.commit(out);
            }
            Control::Pgd(_) if self.enabled => {
                // Tracing stopped while the position was lost: from where is unknown.
                self.push(
                    out,
                    EventKind::Stop {
                        from: 0,
                        why: StopReason::Async,
                    },
                );
                self.anchor(out, p.time);
                self.commit(out);
                self.enabled = false;
                self.pgd_cleanup();
            }
            Control::Ovf => self.overflow(out, p),
            Control::Psb => return self.psb(out, p),
            // TNT bits while tracing is off or the position lost mean nothing.
            _ => {}
        }
        Step::Go
    }

    /// Tracing resumes at `ip` after an overflow.
    fn resume(&mut self, out: &mut Vec<Event>, ip: u64, p: Pending) {
        self.enabled = true;
        self.have_ip = true;
        self.after_overflow = false;
        self.ip = ip;
        self.apply_mode();
        self.push(
            out,
            EventKind::Start {
                at: ip,
                after_overflow: true,
            },
        );
        self.anchor(out, p.time);
        self.commit(out);
    }

    fn pgd_cleanup(&mut self) {
        self.rets.clear();
    }

    fn overflow(&mut self, out: &mut Vec<Event>, p: Pending) {
        self.error(out, DecodeError::Overflow, p.offset);
        self.timer.overflow();
        self.rets.clear();
        self.enabled = false;
        self.have_ip = false;
        self.after_overflow = true;
        self.next_bind = Bind::Overflow;
        // IP packets were lost: the next IP is not compressed against them.
        self.last_ip = 0;
    }

    /// A PSB met while in sync: read its status, walk to its IP.
    fn psb(&mut self, out: &mut Vec<Event>, p: Pending) -> Step {
        let at_end = self.end_at == Some(p.offset);
        self.packets.set_position(p.offset);
        let _ = self.packets.next_packet();
        self.clear_pending();
        let bind = self.next_bind;
        let fup = self.psb_status(out);
        self.next_bind = if bind == Bind::Overflow {
            Bind::Overflow
        } else {
            Bind::Async
        };
        match fup {
            Some(ip) if self.enabled && self.have_ip => {
                if let Err(e) = self.walk_to(out, ip) {
                    self.error(out, e, p.offset);
                    self.ip = ip;
                }
                self.anchor(out, self.timer.now());
                self.commit(out);
            }
            // After an overflow, a PSB+'s FUP says where tracing resumed.
            Some(ip) if !self.enabled && self.after_overflow => {
                self.enabled = true;
                self.have_ip = true;
                self.after_overflow = false;
                self.ip = ip;
                self.next_bind = Bind::Async;
                self.push(
                    out,
                    EventKind::Start {
                        at: ip,
                        after_overflow: true,
                    },
                );
                self.anchor(out, self.timer.now());
                self.commit(out);
            }
            // BDM70: a PSB+ while tracing is off may hold a FUP; tracing stays off.
            Some(_) if !self.enabled => {}
            Some(ip) => {
                self.have_ip = true;
                self.ip = ip;
            }
            None => {
                if self.enabled && self.have_ip && !at_end {
                    // Tracing was off at the PSB after all: nothing to walk.
                    self.enabled = false;
                }
            }
        }
        self.apply_mode();
        if at_end {
            Step::End
        } else {
            Step::Go
        }
    }

    // ----- the walk -----

    /// The block at the current IP.
    #[inline]
    fn block(&mut self) -> Option<Block> {
        let (mem, space, ip) = (self.mem, self.space, self.ip);
        self.cache
            .get(self.key, ip, self.mode.bitness(), || mem.code(space, ip))
    }

    /// Walks all of `b` (its instructions run), with its facts.
    #[inline]
    fn run_block(&mut self, out: &mut Vec<Event>, b: &Block) {
        if b.facts_count > 0 {
            self.facts(out, b, u64::MAX);
        }
        if b.rep {
            self.rep_walked(self.insn + u64::from(b.insns));
        }
        if self.cfg.blocks {
            self.insn += u64::from(b.insns);
            self.push(
                out,
                EventKind::Block {
                    start: b.start,
                    last: b.last,
                    insns: b.insns,
                    bitness: self.mode.bitness() as u8,
                },
            );
        } else {
            self.insn += u64::from(b.insns);
        }
    }

    /// Emits the facts of `b` at addresses below `before`.
    fn facts(&mut self, out: &mut Vec<Event>, b: &Block, before: u64) {
        let first = b.facts_first as usize;
        for i in first..first + usize::from(b.facts_count) {
            let f = self.cache.facts(b)[i - first];
            if f.ip >= before {
                break;
            }
            if f.kind == FactKind::Ptwrite {
                if let Some(payload) = self.ptwrites.pop_front() {
                    self.push(out, EventKind::Ptwrite { ip: f.ip, payload });
                }
            } else {
                self.push(
                    out,
                    EventKind::Fact {
                        ip: f.ip,
                        kind: f.kind,
                    },
                );
            }
        }
    }

    /// One step of the walk while tracing is on and the position known.
    fn walk(&mut self, out: &mut Vec<Event>) -> Step {
        let Some(p) = self.peek(out) else {
            return Step::End;
        };
        match p.packet {
            Control::Fup(ip, bind) => return self.fup(out, ip, bind, p),
            Control::Psb => return self.psb(out, p),
            Control::Ovf => {
                self.consume();
                self.overflow(out, p);
                return Step::Go;
            }
            Control::Pge(_) => {
                // Tracing is on already: take the PGE's IP as the position (BDM70's
                // PSB+ FUP before it was bogus).
                self.consume();
                if let Control::Pge(Some(ip)) = p.packet {
                    self.ip = ip;
                    self.apply_mode();
                    self.push(
                        out,
                        EventKind::Start {
                            at: ip,
                            after_overflow: false,
                        },
                    );
                    self.anchor(out, p.time);
                    self.commit(out);
                }
                return Step::Go;
            }
            Control::Stop => {
                self.consume();
                self.push(
                    out,
                    EventKind::Stop {
                        from: self.ip,
                        why: StopReason::TraceStop,
                    },
                );
                self.anchor(out, p.time);
                self.commit(out);
                self.enabled = false;
                return Step::Go;
            }
            Control::Tnt { .. } | Control::Tip(_) | Control::Pgd(_) => {}
        }
        // Walk blocks until one needs this packet.
        let mut p = p;
        let mut direct = 0u32;
        loop {
            let Some(b) = self.block() else {
                let offset = p.offset;
                self.no_code(out, offset);
                return Step::Go;
            };
            match b.end {
                End::Cut => {
                    self.run_block(out, &b);
                    self.ip = b.next;
                }
                End::Jmp | End::Call => {
                    // A TIP.PGD with this IP stops tracing at this branch.
                    if let Control::Pgd(Some(to)) = p.packet {
                        if to == b.target {
                            self.run_block(out, &b);
                            let kind = self.branch_kind(&b);
                            return self.stop_at_branch(out, &b, kind);
                        }
                    }
                    self.take_direct(out, &b);
                }
                End::Jcc | End::Ret => {
                    let Control::Tnt { bits, count } = p.packet else {
                        return self.branch(out, b, p);
                    };
                    // A TNT bit for a conditional branch or a compressed return,
                    // taken here: while the packet has bits left the walk goes on
                    // with the next, not back through `run` and `peek` for each
                    // (what `branch` does with it, and the next step would do).
                    let taken = (bits >> (count - 1)) & 1 == 1;
                    if b.end == End::Jcc {
                        self.tnt_branch(out, &b, count, taken.then_some(b.target));
                    } else {
                        if !(taken && self.cfg.return_compression && self.rets.len > 0) {
                            return self.branch(out, b, p);
                        }
                        let Some(to) = self.rets.pop() else {
                            return self.branch(out, b, p);
                        };
                        self.tnt_branch(out, &b, count, Some(to));
                    }
                    if count <= 1 {
                        self.tnt_timing(out, count, p);
                        return Step::Go;
                    }
                    p.packet = Control::Tnt {
                        bits,
                        count: count - 1,
                    };
                    direct = 0;
                    continue;
                }
                _ => return self.branch(out, b, p),
            }
            direct += 1;
            if direct >= self.cfg.max_direct_blocks {
                self.error(out, DecodeError::EndlessLoop, p.offset);
                self.lose_sync(p.offset);
                return Step::Go;
            }
            // A FUP cannot be waiting: it was peeked before the walk.
        }
    }

    /// The code at the IP is unknown: report it and wait for the next IP packet.
    fn no_code(&mut self, out: &mut Vec<Event>, offset: usize) {
        self.error(out, DecodeError::NoCode, offset);
        self.lost_position();
    }

    /// A block ending in a branch that needs the packet `p`.
    fn branch(&mut self, out: &mut Vec<Event>, b: Block, p: Pending) -> Step {
        match (b.end, p.packet) {
            (End::Jcc, Control::Tnt { bits, count }) => {
                let taken = (bits >> (count - 1)) & 1 == 1;
                self.tnt_branch(out, &b, count, taken.then_some(b.target));
                self.tnt_timing(out, count, p);
                Step::Go
            }
            (End::Ret, Control::Tnt { bits, count }) if self.cfg.return_compression => {
                let taken = (bits >> (count - 1)) & 1 == 1;
                let to = match (taken, self.rets.pop()) {
                    (true, Some(to)) => to,
                    (true, None) => {
                        self.take_bit(count);
                        self.run_block(out, &b);
                        self.error(out, DecodeError::EmptyReturnStack, p.offset);
                        self.lost_position();
                        return Step::Go;
                    }
                    (false, _) => return self.mismatch(out, p, Some(&b)),
                };
                self.tnt_branch(out, &b, count, Some(to));
                self.tnt_timing(out, count, p);
                Step::Go
            }
            (End::Jcc, Control::Pgd(Some(to))) if to == b.target || to == b.next => {
                self.run_block(out, &b);
                self.stop_at_branch(out, &b, BranchKind::Jcc)
            }
            (End::Jcc, _) => self.mismatch(out, p, Some(&b)),
            (_, Control::Tip(to)) if b.end != End::Jcc => {
                self.consume();
                self.run_block(out, &b);
                let Some(to) = to else {
                    // A suppressed TIP: the target is out of context.
                    return self.mismatch(out, p, None);
                };
                let kind = self.branch_kind(&b);
                if kind == BranchKind::Ret {
                    self.rets.pop();
                } else if kind == BranchKind::IndCall && self.cfg.return_compression {
                    self.rets.push(b.next);
                }
                if matches!(
                    kind,
                    BranchKind::Far | BranchKind::Syscall | BranchKind::Sysret | BranchKind::Int
                ) {
                    self.apply_mode();
                }
                self.branch_to(out, kind, b.last, to);
                self.anchor(out, p.time);
                self.commit(out);
                Step::Go
            }
            (_, Control::Pgd(to)) => {
                // Leaving the traced context: with a suppressed IP only a far transfer
                // (or an indirect branch) can.
                let far = matches!(
                    b.end,
                    End::Far | End::Syscall | End::Sysret | End::Int | End::Fault
                );
                let indirect = matches!(b.end, End::IndJmp | End::IndCall | End::Ret);
                if to.is_none() && !far && !indirect {
                    return self.mismatch(out, p, Some(&b));
                }
                self.run_block(out, &b);
                let kind = self.branch_kind(&b);
                if kind == BranchKind::Ret {
                    self.rets.pop();
                }
                self.stop_at_branch(out, &b, kind)
            }
            _ => self.mismatch(out, p, Some(&b)),
        }
    }

    /// A direct jump or call taken (no packet says so): its block ran, a call's return
    /// address is kept for return compression, and the walk goes on at the target.
    #[inline]
    fn take_direct(&mut self, out: &mut Vec<Event>, b: &Block) {
        self.run_block(out, b);
        let kind = if b.end == End::Call {
            // A call to the next instruction (PIC code reading its own address) is not a
            // call returns are compressed against.
            if self.cfg.return_compression && b.target != b.next {
                self.rets.push(b.next);
            }
            BranchKind::Call
        } else {
            BranchKind::Jmp
        };
        self.push(
            out,
            EventKind::Branch {
                kind,
                from: b.last,
                to: b.target,
            },
        );
        self.ip = b.target;
    }

    fn branch_kind(&self, b: &Block) -> BranchKind {
        match b.end {
            End::Jcc => BranchKind::Jcc,
            End::Jmp => BranchKind::Jmp,
            End::Call => BranchKind::Call,
            End::IndJmp => BranchKind::IndJmp,
            End::IndCall => BranchKind::IndCall,
            End::Ret => BranchKind::Ret,
            End::Syscall => BranchKind::Syscall,
            End::Sysret => BranchKind::Sysret,
            End::Int | End::Fault => BranchKind::Int,
            End::Far | End::Cut => BranchKind::Far,
        }
    }

    /// The block `b`, ending in a conditional branch or a compressed return, ran on a
    /// TNT bit of a packet with `count` bits left: the branch went `to` (`None`: a
    /// conditional branch not taken).
    #[inline(always)]
    fn tnt_branch(&mut self, out: &mut Vec<Event>, b: &Block, count: u64, to: Option<u64>) {
        self.take_bit(count);
        self.run_block(out, b);
        match to {
            Some(to) => {
                let kind = if b.end == End::Jcc {
                    BranchKind::Jcc
                } else {
                    BranchKind::Ret
                };
                self.branch_to(out, kind, b.last, to);
            }
            None => self.ip = b.next,
        }
    }

    /// A branch of `kind` at `from` went to `to`: reported, and the walk goes on there.
    #[inline(always)]
    fn branch_to(&mut self, out: &mut Vec<Event>, kind: BranchKind, from: u64, to: u64) {
        self.push(out, EventKind::Branch { kind, from, to });
        self.ip = to;
    }

    /// Takes one TNT bit of `p` (consuming the packet with its last bit).
    #[inline]
    fn take_bit(&mut self, count: u64) {
        if count <= 1 {
            self.clear_pending();
        } else {
            self.tnt_taken += 1;
        }
    }

    /// After a TNT bit's branch: the packet's last bit times its branch.
    #[inline]
    fn tnt_timing(&mut self, out: &mut [Event], count: u64, p: Pending) {
        if count <= 1 {
            self.anchor(out, p.time);
            self.commit(out);
        }
    }

    /// Tracing stops at the branch ending `b` (TIP.PGD, consumed).
    fn stop_at_branch(&mut self, out: &mut Vec<Event>, b: &Block, kind: BranchKind) -> Step {
        let Some(p) = self.consume() else {
            return Step::Go;
        };
        self.push(
            out,
            EventKind::Stop {
                from: b.last,
                why: StopReason::Branch(kind),
            },
        );
        self.anchor(out, p.time);
        self.commit(out);
        self.enabled = false;
        self.rets.clear();
        Step::Go
    }

    /// The trace does not fit the code: report, and go on at the next PSB.
    /// The packet `p` does not fit the branch ending `b` (walked, if given, up to and
    /// with its branch): the position is lost until the next packet with an IP, as
    /// libipt and perf resynchronise (the IP packet `p` itself gives it back).
    fn mismatch(&mut self, out: &mut Vec<Event>, p: Pending, b: Option<&Block>) -> Step {
        if let Some(b) = b {
            self.run_block(out, b);
        }
        self.error(out, DecodeError::Mismatch, p.offset);
        self.lost_position();
        Step::Go
    }

    /// Forgets the position (not the synchronisation): the next IP packet gives it.
    fn lost_position(&mut self) {
        self.have_ip = false;
        self.rets.clear();
        // TNT bits pending belong to code the walk no longer follows.
        if let Some(Pending {
            packet: Control::Tnt { .. },
            ..
        }) = self.pending
        {
            self.clear_pending();
        }
    }

    /// A FUP: walk to its IP, then act on what it is bound to.
    fn fup(&mut self, out: &mut Vec<Event>, ip: Option<u64>, bind: Bind, p: Pending) -> Step {
        self.consume();
        let Some(ip) = ip else {
            return Step::Go;
        };
        if let Err(e) = self.walk_to(out, ip) {
            // The FUP says where the walk is: it goes on from there.
            self.error(out, e, p.offset);
            self.rets.clear();
            self.ip = ip;
        }
        match bind {
            Bind::Async => return self.async_event(out, ip, p),
            Bind::Tsx { intx, abort } => {
                self.in_tx = intx;
                self.push(out, EventKind::Tsx { ip, intx, abort });
                if abort {
                    // The abort's TIP (or TIP.PGD) follows.
                    return self.async_event_kind(out, ip, p, BranchKind::TxAbort);
                }
            }
            Bind::Ptw(payload) => {
                self.push(out, EventKind::Ptwrite { ip, payload });
            }
            Bind::Status | Bind::Overflow => {}
        }
        self.anchor(out, p.time);
        self.commit(out);
        Step::Go
    }

    fn async_event(&mut self, out: &mut Vec<Event>, from: u64, p: Pending) -> Step {
        self.async_event_kind(out, from, p, BranchKind::Async)
    }

    /// FUP + TIP (an asynchronous branch) or FUP + TIP.PGD (tracing stops at `from`).
    fn async_event_kind(
        &mut self,
        out: &mut Vec<Event>,
        from: u64,
        fup: Pending,
        kind: BranchKind,
    ) -> Step {
        let Some(next) = self.peek(out) else {
            // The trace ends between the FUP and its TIP.
            self.anchor(out, fup.time);
            self.commit(out);
            return Step::End;
        };
        match next.packet {
            Control::Tip(to) => {
                self.consume();
                self.apply_mode();
                match to {
                    Some(to) => {
                        self.push(out, EventKind::Branch { kind, from, to });
                        self.ip = to;
                        self.have_ip = true;
                    }
                    None => {
                        self.push(
                            out,
                            EventKind::Stop {
                                from,
                                why: StopReason::Async,
                            },
                        );
                        self.enabled = false;
                    }
                }
                self.anchor(out, next.time);
                self.commit(out);
            }
            Control::Pgd(_) => {
                self.consume();
                self.push(
                    out,
                    EventKind::Stop {
                        from,
                        why: StopReason::Async,
                    },
                );
                self.anchor(out, next.time);
                self.commit(out);
                self.enabled = false;
                self.rets.clear();
            }
            _ => {
                // A FUP on its own (perf's "tr end" without a PGD is not made up): the
                // position is confirmed.
                self.anchor(out, fup.time);
                self.commit(out);
            }
        }
        Step::Go
    }

    /// Walks from the current IP to `to` through straight-line code and direct jumps
    /// and calls only (nothing else can run without a packet).
    fn walk_to(&mut self, out: &mut Vec<Event>, to: u64) -> Result<(), DecodeError> {
        let mut n = 0u32;
        loop {
            if self.ip == to {
                return Ok(());
            }
            let Some(b) = self.block() else {
                return Err(DecodeError::NoCode);
            };
            if to >= b.start && to <= b.last {
                // Inside this block: run the instructions before it.
                let (mem, space) = (self.mem, self.space);
                let code = mem.code(space, b.start).ok_or(DecodeError::NoCode)?;
                let k = insns_before(code, b.start, self.mode.bitness(), to)
                    .ok_or(DecodeError::Mismatch)?;
                if b.facts_count > 0 {
                    self.facts(out, &b, to);
                }
                self.insn += u64::from(k);
                if b.rep {
                    // A `rep` interrupted mid-way (the FUP is at it) ran some of its
                    // count before `to`.
                    self.rep_walked(self.insn);
                }
                if self.cfg.blocks && k > 0 {
                    let last =
                        crate::insn::instruction_addresses(code, b.start, self.mode.bitness(), k)
                            .last()
                            .copied()
                            .unwrap_or(b.start);
                    self.push(
                        out,
                        EventKind::Block {
                            start: b.start,
                            last,
                            insns: k,
                            bitness: self.mode.bitness() as u8,
                        },
                    );
                }
                self.ip = to;
                return Ok(());
            }
            match b.end {
                End::Cut => {
                    self.run_block(out, &b);
                    self.ip = b.next;
                }
                End::Jmp | End::Call => {
                    self.take_direct(out, &b);
                }
                _ => {
                    // A branch the trace has no packet for: its block ran.
                    self.run_block(out, &b);
                    return Err(DecodeError::Mismatch);
                }
            }
            n += 1;
            if n >= self.cfg.max_direct_blocks {
                return Err(DecodeError::EndlessLoop);
            }
        }
    }
}
