//! Intel PT packets (Intel SDM vol. 3, ch. 33 "Intel Processor Trace", 33.4.2), decoded
//! in place: a [`Packet`] is `Copy`, holds no reference into the trace and costs no
//! allocation; [`decode`] reads one from a byte slice and says how long it was.
//!
//! Every packet of the SDM is known: PAD, TNT (short and long), TIP, TIP.PGE, TIP.PGD,
//! FUP (with their IP compression), PSB, PSBEND, OVF, MODE.Exec, MODE.TSX, PIP, VMCS,
//! TraceStop, CBR, TSC, MTC, TMA, CYC, MNT, PTW, EXSTOP, MWAIT, PWRE, PWRX, BBP, BIP,
//! BEP, CFE, EVD and TRIG. A byte that starts none of them, or a packet with reserved
//! bits set, is a [`PacketError`]; a decoder then goes on at the next PSB
//! ([`find_psb`]), or, as perf does, at the next byte.
//!
//! ```
//! use ptscope_intel_pt::packet::{decode, IpCompression, Packet};
//!
//! // A TIP whose last two bytes of IP are given (the rest from the last IP).
//! let (p, len) = decode(&[0x2d, 0x34, 0x12], None).unwrap();
//! assert_eq!(len, 3);
//! let Packet::Tip(ip) = p else { panic!() };
//! assert_eq!(ip.compression, IpCompression::Update16);
//! assert_eq!(ip.apply(0x7f00_0000_1000), Some(0x7f00_0000_1234));
//! // A short TNT: taken, not taken, taken (oldest first).
//! let (p, _) = decode(&[0x1a], None).unwrap();
//! assert_eq!(p, Packet::Tnt { bits: 0b101, count: 3 });
//! ```

use std::fmt;

/// The PSB pattern: `02 82` eight times.
pub const PSB: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];

/// How much of an IP packet's address is given (the IPBytes field).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IpCompression {
    /// No address: it is out of context (e.g. TIP.PGD into the kernel when only user
    /// space is traced).
    Suppressed,
    /// The low 16 bits; the rest from the last IP.
    Update16,
    /// The low 32 bits; the rest from the last IP.
    Update32,
    /// The low 48 bits, sign-extended.
    Sext48,
    /// The low 48 bits; the rest from the last IP.
    Update48,
    /// All 64 bits.
    Full,
}

impl IpCompression {
    /// The IPBytes field's value.
    pub fn bits(self) -> u8 {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 1,
            IpCompression::Update32 => 2,
            IpCompression::Sext48 => 3,
            IpCompression::Update48 => 4,
            IpCompression::Full => 6,
        }
    }

    /// Payload bytes.
    pub fn len(self) -> usize {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 2,
            IpCompression::Update32 => 4,
            IpCompression::Sext48 | IpCompression::Update48 => 6,
            IpCompression::Full => 8,
        }
    }

    /// True when no address is given.
    pub fn is_empty(self) -> bool {
        self == IpCompression::Suppressed
    }

    fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            0 => IpCompression::Suppressed,
            1 => IpCompression::Update16,
            2 => IpCompression::Update32,
            3 => IpCompression::Sext48,
            4 => IpCompression::Update48,
            6 => IpCompression::Full,
            _ => return None,
        })
    }
}

/// An IP packet's payload: its compression and the bytes given.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct IpPayload {
    /// How much is given.
    pub compression: IpCompression,
    /// The given bytes, little-endian, zero above them.
    pub raw: u64,
}

impl IpPayload {
    /// The address, given the last IP (`None` when suppressed).
    #[inline]
    pub fn apply(&self, last: u64) -> Option<u64> {
        let raw = self.raw;
        Some(match self.compression {
            IpCompression::Suppressed => return None,
            IpCompression::Update16 => (last & !0xffff) | raw,
            IpCompression::Update32 => (last & !0xffff_ffff) | raw,
            IpCompression::Sext48 => ((raw << 16) as i64 >> 16) as u64,
            IpCompression::Update48 => (last & !0xffff_ffff_ffff) | raw,
            IpCompression::Full => raw,
        })
    }
}

/// MODE.Exec: the execution mode after the next far transfer (or now, in PSB+).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExecMode {
    /// `CS.L`: 64-bit code.
    pub csl: bool,
    /// `CS.D`: 32-bit default operand size.
    pub csd: bool,
    /// `RFLAGS.IF` (with event tracing).
    pub iflag: bool,
}

impl ExecMode {
    /// Address width of code in this mode: 64, 32 or 16.
    pub fn bitness(self) -> u32 {
        match (self.csl, self.csd) {
            (true, _) => 64,
            (false, true) => 32,
            (false, false) => 16,
        }
    }
}

/// One packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Packet {
    /// PAD.
    Pad,
    /// TNT (short or long): `count` outcomes of conditional branches (or compressed
    /// returns), the oldest in bit `count - 1`, 1 = taken.
    Tnt {
        /// The outcomes.
        bits: u64,
        /// How many (1..=47).
        count: u8,
    },
    /// TIP: the target of an indirect branch, far transfer or uncompressed return.
    Tip(IpPayload),
    /// TIP.PGE: tracing (packet generation) enabled at this IP.
    TipPge(IpPayload),
    /// TIP.PGD: tracing disabled; the IP (if given) is where it would have gone on.
    TipPgd(IpPayload),
    /// FUP: the source IP of an asynchronous event (or of a PTWRITE, TSX change,
    /// EXSTOP), or in PSB+ the current IP.
    Fup(IpPayload),
    /// PSB: a synchronisation point; status packets up to PSBEND follow.
    Psb,
    /// PSBEND.
    PsbEnd,
    /// OVF: the processor dropped packets (internal buffer overflow).
    Ovf,
    /// MODE.Exec.
    ModeExec(ExecMode),
    /// MODE.TSX.
    ModeTsx {
        /// In a transaction.
        intx: bool,
        /// The transaction aborted.
        abort: bool,
    },
    /// PIP: CR3 changed (or is, in PSB+).
    Pip {
        /// CR3 (bits 51:5).
        cr3: u64,
        /// Non-root (VMX guest).
        nr: bool,
    },
    /// VMCS: the VMCS pointer (bits 51:12).
    Vmcs {
        /// The pointer.
        base: u64,
    },
    /// TraceStop: tracing stopped (a ToPA stop entry or address range).
    TraceStop,
    /// CBR: the core:bus ratio (core frequency in units of the bus clock, 100 MHz).
    Cbr {
        /// The ratio.
        ratio: u8,
    },
    /// TSC: the low 56 bits of the time-stamp counter.
    Tsc {
        /// The value.
        tsc: u64,
    },
    /// MTC: bits of the crystal clock (CTC) at a period boundary.
    Mtc {
        /// CTC bits `mtc_period + 7 .. mtc_period`.
        ctc: u8,
    },
    /// TMA: the CTC and fast counter at the preceding TSC packet.
    Tma {
        /// CTC bits 15:0.
        ctc: u16,
        /// Fast counter (9 bits): TSC ticks since that CTC tick, in core-crystal units.
        fc: u16,
    },
    /// CYC: core cycles since the last CYC.
    Cyc {
        /// The count.
        cycles: u64,
    },
    /// MNT: maintenance (payload model specific).
    Mnt {
        /// The payload.
        payload: u64,
    },
    /// PTW: a PTWRITE's operand.
    Ptw {
        /// The value.
        payload: u64,
        /// Operand size in bytes (4 or 8).
        size: u8,
        /// A FUP with the instruction's IP follows.
        ip: bool,
    },
    /// EXSTOP: execution stopped (power state entry, …).
    Exstop {
        /// A FUP with the IP follows.
        ip: bool,
    },
    /// MWAIT: an MWAIT's hints.
    Mwait {
        /// EAX hints.
        hints: u32,
        /// ECX extensions.
        ext: u32,
    },
    /// PWRE: power state entry.
    Pwre {
        /// Resolved thread C-state.
        state: u8,
        /// Resolved thread sub C-state.
        sub_state: u8,
        /// Entered by hardware (not MWAIT).
        hw: bool,
    },
    /// PWRX: power state exit.
    Pwrx {
        /// Last core C-state.
        last: u8,
        /// Deepest core C-state.
        deepest: u8,
        /// Wake reasons (bit 0: interrupt, 2: store to the monitored address, 3:
        /// autonomous).
        wake: u8,
    },
    /// BBP: a block of PEBS-via-PT items begins.
    Bbp {
        /// BIP payloads are 4 bytes (else 8).
        sz: bool,
        /// The block's type.
        kind: u8,
    },
    /// BIP: one item of a block.
    Bip {
        /// Item id.
        id: u8,
        /// Its value.
        value: u64,
    },
    /// BEP: a block ends.
    Bep {
        /// A FUP follows.
        ip: bool,
    },
    /// CFE: a control flow event (event tracing).
    Cfe {
        /// Event type.
        kind: u8,
        /// Vector.
        vector: u8,
        /// A FUP follows.
        ip: bool,
    },
    /// EVD: event data for the next CFE.
    Evd {
        /// Data type.
        kind: u8,
        /// The data.
        payload: u64,
    },
    /// TRIG: a trigger fired.
    Trig {
        /// Which triggers (bit vector).
        trbv: u8,
        /// Instructions since the last IP packet, if given.
        icnt: Option<u16>,
        /// Several triggers fired.
        mult: bool,
        /// An IP packet gives the IP.
        ip: bool,
    },
}

/// Why bytes are no packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PacketError {
    /// The trace ends inside the packet.
    Truncated,
    /// No packet starts with these bytes.
    BadOpcode,
    /// The packet's reserved bits or fields hold what the SDM does not allow.
    BadPayload,
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PacketError::Truncated => "the trace ends inside a packet",
            PacketError::BadOpcode => "unknown packet",
            PacketError::BadPayload => "reserved bits set in a packet",
        })
    }
}

/// Reads `n` (≤ 8) bytes little-endian; the caller checked the length.
#[inline]
fn le(b: &[u8], n: usize) -> u64 {
    // One 8-byte load, masked, where the buffer has 8 bytes: the copy of a variable
    // length was a call to `memmove` for every IP packet.
    if let Some(w) = b.first_chunk::<8>() {
        let v = u64::from_le_bytes(*w);
        return if n >= 8 {
            v
        } else {
            v & ((1u64 << (8 * n)) - 1)
        };
    }
    let mut w = [0u8; 8];
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w)
}

/// The `n` bytes at `at`, or [`PacketError::Truncated`].
#[inline]
fn need(buf: &[u8], n: usize) -> Result<&[u8], PacketError> {
    buf.get(..n).ok_or(PacketError::Truncated)
}

/// Decodes the packet at the start of `buf`: the packet and its length. `bip` is the
/// BIP payload size while a PEBS block is open (after BBP, before BEP): then bytes
/// ending in `100b` are BIP, not TNT.
#[inline]
pub fn decode(buf: &[u8], bip: Option<u8>) -> Result<(Packet, usize), PacketError> {
    let Some(&b0) = buf.first() else {
        return Err(PacketError::Truncated);
    };
    if b0 & 1 == 0 {
        // PAD, the extended opcode, short TNT, or (in a block) BIP.
        return match b0 {
            0x00 => Ok((Packet::Pad, 1)),
            0x02 => decode_ext(buf),
            _ if bip.is_some() && b0 & 7 == 4 => {
                let n = usize::from(bip.unwrap_or(8));
                let p = need(buf, 1 + n)?;
                Ok((
                    Packet::Bip {
                        id: b0 >> 3,
                        value: le(&p[1..], n),
                    },
                    1 + n,
                ))
            }
            _ => {
                // Bits 7:1 hold a stop bit then the outcomes: the stop bit is the
                // highest set bit, so `count` = its position - 1.
                let payload = b0 >> 1;
                let count = 7 - payload.leading_zeros() as u8;
                let bits = u64::from(payload) & ((1u64 << count) - 1);
                Ok((Packet::Tnt { bits, count }, 1))
            }
        };
    }
    if b0 & 3 == 3 {
        return decode_cyc(buf);
    }
    match b0 & 0x1f {
        0x0d | 0x11 | 0x01 | 0x1d => {
            let comp = IpCompression::from_bits(b0 >> 5).ok_or(PacketError::BadPayload)?;
            let n = comp.len();
            let p = need(buf, 1 + n)?;
            let ip = IpPayload {
                compression: comp,
                raw: le(&p[1..], n),
            };
            let packet = match b0 & 0x1f {
                0x0d => Packet::Tip(ip),
                0x11 => Packet::TipPge(ip),
                0x01 => Packet::TipPgd(ip),
                _ => Packet::Fup(ip),
            };
            return Ok((packet, 1 + n));
        }
        _ => {}
    }
    match b0 {
        0x19 => {
            let p = need(buf, 8)?;
            Ok((
                Packet::Tsc {
                    tsc: le(&p[1..], 7),
                },
                8,
            ))
        }
        0x59 => {
            let p = need(buf, 2)?;
            Ok((Packet::Mtc { ctc: p[1] }, 2))
        }
        0x99 => {
            let p = need(buf, 2)?;
            let payload = p[1];
            match payload >> 5 {
                0 => Ok((
                    Packet::ModeExec(ExecMode {
                        csl: payload & 1 != 0,
                        csd: payload & 2 != 0,
                        iflag: payload & 4 != 0,
                    }),
                    2,
                )),
                1 => Ok((
                    Packet::ModeTsx {
                        intx: payload & 1 != 0,
                        abort: payload & 2 != 0,
                    },
                    2,
                )),
                _ => Err(PacketError::BadPayload),
            }
        }
        0xd9 => {
            let p = need(buf, 3)?;
            let flags = p[1];
            let icntv = flags & 0x40 != 0;
            let (icnt, len) = if icntv {
                let p = need(buf, 5)?;
                (Some(le(&p[3..], 2) as u16), 5)
            } else {
                (None, 3)
            };
            Ok((
                Packet::Trig {
                    trbv: p[2],
                    icnt,
                    mult: flags & 0x20 != 0,
                    ip: flags & 0x80 != 0,
                },
                len,
            ))
        }
        _ => Err(PacketError::BadOpcode),
    }
}

/// CYC: bits 7:3 of the header, then 7 bits per byte while bit 0 says more follow.
#[inline]
fn decode_cyc(buf: &[u8]) -> Result<(Packet, usize), PacketError> {
    let b0 = buf[0];
    let mut value = u64::from(b0 >> 3);
    if b0 & 4 == 0 {
        return Ok((Packet::Cyc { cycles: value }, 1));
    }
    let mut shift = 5u32;
    let mut len = 1;
    loop {
        let &b = buf.get(len).ok_or(PacketError::Truncated)?;
        len += 1;
        if shift >= 64 || len > 15 {
            return Err(PacketError::BadPayload);
        }
        value |= u64::from(b >> 1) << shift;
        shift += 7;
        if b & 1 == 0 {
            return Ok((Packet::Cyc { cycles: value }, len));
        }
    }
}

/// Packets with the extended opcode `02`.
fn decode_ext(buf: &[u8]) -> Result<(Packet, usize), PacketError> {
    let &b1 = buf.get(1).ok_or(PacketError::Truncated)?;
    if b1 & 0x1f == 0x12 {
        // PTW: bits 6:5 the payload size, bit 7 the IP flag.
        let size = match (b1 >> 5) & 3 {
            0 => 4,
            1 => 8,
            _ => return Err(PacketError::BadPayload),
        };
        let p = need(buf, 2 + size)?;
        return Ok((
            Packet::Ptw {
                payload: le(&p[2..], size),
                size: size as u8,
                ip: b1 & 0x80 != 0,
            },
            2 + size,
        ));
    }
    Ok(match b1 {
        0x82 => {
            let p = need(buf, 16)?;
            if p != PSB {
                return Err(PacketError::BadPayload);
            }
            (Packet::Psb, 16)
        }
        0x23 => (Packet::PsbEnd, 2),
        0xf3 => (Packet::Ovf, 2),
        0x83 => (Packet::TraceStop, 2),
        0xa3 => {
            let p = need(buf, 8)?;
            let payload = le(&p[2..], 6);
            if payload == 0 {
                return Err(PacketError::BadPayload);
            }
            let count = (63 - payload.leading_zeros()) as u8;
            let bits = payload & ((1u64 << count) - 1);
            (Packet::Tnt { bits, count }, 8)
        }
        0x43 => {
            let p = need(buf, 8)?;
            let payload = le(&p[2..], 6);
            (
                Packet::Pip {
                    cr3: (payload >> 1) << 5,
                    nr: payload & 1 != 0,
                },
                8,
            )
        }
        0x03 => {
            let p = need(buf, 4)?;
            (Packet::Cbr { ratio: p[2] }, 4)
        }
        0x73 => {
            let p = need(buf, 7)?;
            let ctc = le(&p[2..], 2) as u16;
            let fc = le(&p[5..], 2) as u16;
            if fc > 0x1ff || p[4] != 0 {
                return Err(PacketError::BadPayload);
            }
            (Packet::Tma { ctc, fc }, 7)
        }
        0xc8 => {
            let p = need(buf, 7)?;
            (
                Packet::Vmcs {
                    base: le(&p[2..], 5) << 12,
                },
                7,
            )
        }
        0xc3 => {
            let p = need(buf, 11)?;
            if p[2] != 0x88 {
                return Err(PacketError::BadOpcode);
            }
            (
                Packet::Mnt {
                    payload: le(&p[3..], 8),
                },
                11,
            )
        }
        0x62 | 0xe2 => (Packet::Exstop { ip: b1 == 0xe2 }, 2),
        0xc2 => {
            let p = need(buf, 10)?;
            (
                Packet::Mwait {
                    hints: le(&p[2..], 4) as u32,
                    ext: le(&p[6..], 4) as u32,
                },
                10,
            )
        }
        0x22 => {
            let p = need(buf, 4)?;
            let payload = le(&p[2..], 2);
            (
                Packet::Pwre {
                    state: ((payload >> 12) & 0xf) as u8,
                    sub_state: ((payload >> 8) & 0xf) as u8,
                    hw: payload & 0x8 != 0,
                },
                4,
            )
        }
        0xa2 => {
            let p = need(buf, 7)?;
            let payload = le(&p[2..], 5);
            (
                Packet::Pwrx {
                    last: ((payload >> 4) & 0xf) as u8,
                    deepest: (payload & 0xf) as u8,
                    wake: ((payload >> 8) & 0xf) as u8,
                },
                7,
            )
        }
        0x63 => {
            let p = need(buf, 3)?;
            (
                Packet::Bbp {
                    sz: p[2] & 0x80 != 0,
                    kind: p[2] & 0x1f,
                },
                3,
            )
        }
        0x33 | 0xb3 => (Packet::Bep { ip: b1 == 0xb3 }, 2),
        0x13 => {
            let p = need(buf, 4)?;
            (
                Packet::Cfe {
                    kind: p[2] & 0x1f,
                    vector: p[3],
                    ip: p[2] & 0x80 != 0,
                },
                4,
            )
        }
        0x53 => {
            let p = need(buf, 11)?;
            (
                Packet::Evd {
                    kind: p[2] & 0x1f,
                    payload: le(&p[3..], 8),
                },
                11,
            )
        }
        _ => return Err(PacketError::BadOpcode),
    })
}

/// Offset of the first PSB at or after `from`, if any.
pub fn find_psb(buf: &[u8], from: usize) -> Option<usize> {
    let hay = buf.get(from..)?;
    let mut i = 0;
    while i + PSB.len() <= hay.len() {
        // The pattern repeats `02 82`; find a candidate `02`, then compare.
        match hay[i..].iter().position(|&b| b == 0x02) {
            None => return None,
            Some(p) => i += p,
        }
        if hay[i..].starts_with(&PSB) {
            return Some(from + i);
        }
        i += 1;
    }
    None
}

/// Offsets of every PSB in `buf`, in order.
pub fn psb_offsets(buf: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = find_psb(buf, at) {
        out.push(p);
        at = p + PSB.len();
    }
    out
}

/// Packets one after another from a byte slice. After an error it stops; a decoder
/// that wants to go on moves [`Packets::set_position`] past the bad byte or to the
/// next PSB.
#[derive(Clone, Debug)]
pub struct Packets<'a> {
    buf: &'a [u8],
    pos: usize,
    bip: Option<u8>,
}

impl<'a> Packets<'a> {
    /// Packets from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Packets {
            buf,
            pos: 0,
            bip: None,
        }
    }

    /// The trace.
    pub fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    /// Offset of the next packet.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (a PEBS block, if open, is closed).
    pub fn set_position(&mut self, pos: usize) {
        self.pos = pos.min(self.buf.len());
        self.bip = None;
    }

    /// The next packet if it is one of the two a trace is mostly made of, each one byte
    /// long: a short TNT or a CYC without extension bytes (read past); `None` for any
    /// other (left for [`Packets::next_packet`]). Decodes as [`decode`] does.
    #[inline]
    pub fn next_short(&mut self) -> Option<Packet> {
        let &b0 = self.buf.get(self.pos)?;
        let p = if b0 & 7 == 3 {
            Packet::Cyc {
                cycles: u64::from(b0 >> 3),
            }
        } else if b0 & 1 == 0 && b0 > 2 && !(self.bip.is_some() && b0 & 7 == 4) {
            let payload = b0 >> 1;
            let count = 7 - payload.leading_zeros() as u8;
            Packet::Tnt {
                bits: u64::from(payload) & ((1u64 << count) - 1),
                count,
            }
        } else {
            return None;
        };
        self.pos += 1;
        Some(p)
    }

    /// True at the end of the trace.
    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The next packet and its offset; `None` at the end.
    #[inline]
    pub fn next_packet(&mut self) -> Option<Result<(usize, Packet), PacketError>> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let at = self.pos;
        Some(match decode(&self.buf[at..], self.bip) {
            Ok((p, len)) => {
                self.pos += len;
                match p {
                    Packet::Bbp { sz, .. } => self.bip = Some(if sz { 4 } else { 8 }),
                    Packet::Bep { .. } | Packet::Psb | Packet::Ovf => self.bip = None,
                    _ => {}
                }
                Ok((at, p))
            }
            Err(e) => Err(e),
        })
    }
}

impl Iterator for Packets<'_> {
    type Item = Result<(usize, Packet), PacketError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_packet()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> Packet {
        let (p, len) = decode(b, None).unwrap_or_else(|e| panic!("{b:02x?}: {e}"));
        assert_eq!(len, b.len(), "{b:02x?}");
        p
    }

    #[test]
    fn the_short_path_decodes_as_decode_does() {
        // Every first byte, followed by bytes that make any packet complete, outside
        // and inside a PEBS block (where `xxxxx100` is a BIP, not a TNT).
        for bbp in [None, Some([0x02, 0x63, 0x00])] {
            let mut short = 0;
            for b0 in 0..=255u8 {
                let mut buf = bbp.map(|b| b.to_vec()).unwrap_or_default();
                let at = buf.len();
                buf.push(b0);
                buf.extend_from_slice(&[0u8; 32]);
                let mut ps = Packets::new(&buf);
                if bbp.is_some() {
                    assert!(matches!(
                        ps.next_packet(),
                        Some(Ok((_, Packet::Bbp { .. })))
                    ));
                }
                let mut general = ps.clone();
                let Some(p) = ps.next_short() else {
                    continue;
                };
                short += 1;
                assert_eq!(general.next_packet(), Some(Ok((at, p))), "{b0:#04x}");
                assert_eq!(ps.position(), general.position(), "{b0:#04x}");
            }
            // 32 one-byte CYCs, 126 short TNTs (even bytes above 2) less, in a block,
            // the 32 BIPs.
            assert_eq!(
                short,
                if bbp.is_some() {
                    32 + 126 - 32
                } else {
                    32 + 126
                }
            );
        }
    }

    #[test]
    fn every_packet_of_the_sdm() {
        assert_eq!(one(&[0x00]), Packet::Pad);
        assert_eq!(one(&[0x04]), Packet::Tnt { bits: 0, count: 1 });
        assert_eq!(
            one(&[0x86]),
            Packet::Tnt {
                bits: 0b000011,
                count: 6
            }
        );
        assert_eq!(
            one(&[0x02, 0xa3, 0x05, 0, 0, 0, 0, 0]),
            Packet::Tnt { bits: 1, count: 2 }
        );
        assert_eq!(one(&PSB), Packet::Psb);
        assert_eq!(one(&[0x02, 0x23]), Packet::PsbEnd);
        assert_eq!(one(&[0x02, 0xf3]), Packet::Ovf);
        assert_eq!(one(&[0x02, 0x83]), Packet::TraceStop);
        assert_eq!(one(&[0x02, 0x03, 0x24, 0]), Packet::Cbr { ratio: 0x24 });
        assert_eq!(
            one(&[0x19, 0x45, 0x23, 0x01, 0, 0, 0, 0]),
            Packet::Tsc { tsc: 0x12345 }
        );
        assert_eq!(one(&[0x59, 0x94]), Packet::Mtc { ctc: 0x94 });
        assert_eq!(
            one(&[0x02, 0x73, 0x12, 0, 0, 0x34, 0]),
            Packet::Tma {
                ctc: 0x12,
                fc: 0x34
            }
        );
        assert_eq!(one(&[0xbb]), Packet::Cyc { cycles: 0x17 });
        assert_eq!(one(&[0x9f, 0x02]), Packet::Cyc { cycles: 0x33 });
        assert_eq!(
            one(&[0x02, 0x43, 0xfb, 0xfa, 0x0a, 0, 0, 0]),
            Packet::Pip {
                cr3: 0xafafa0,
                nr: true
            }
        );
        assert_eq!(
            one(&[0x02, 0xc8, 0xcd, 0xab, 0, 0, 0]),
            Packet::Vmcs { base: 0xabcd000 }
        );
        assert_eq!(
            one(&[0x99, 0x01]),
            Packet::ModeExec(ExecMode {
                csl: true,
                ..Default::default()
            })
        );
        assert_eq!(
            one(&[0x99, 0x21]),
            Packet::ModeTsx {
                intx: true,
                abort: false
            }
        );
        assert_eq!(
            one(&[0x02, 0xc3, 0x88, 1, 2, 3, 4, 5, 6, 7, 8]),
            Packet::Mnt {
                payload: 0x0807060504030201
            }
        );
        assert_eq!(
            one(&[0x02, 0x92, 0xef, 0xcd, 0xab, 0x90]),
            Packet::Ptw {
                payload: 0x90abcdef,
                size: 4,
                ip: true
            }
        );
        assert_eq!(one(&[0x02, 0xe2]), Packet::Exstop { ip: true });
        assert_eq!(
            one(&[0x02, 0xc2, 0xb, 0, 0, 0, 1, 0, 0, 0]),
            Packet::Mwait { hints: 0xb, ext: 1 }
        );
        assert_eq!(
            one(&[0x02, 0x22, 0x08, 0x00]),
            Packet::Pwre {
                state: 0,
                sub_state: 0,
                hw: true
            }
        );
        assert_eq!(
            one(&[0x02, 0xa2, 0x16, 0x01, 0, 0, 0]),
            Packet::Pwrx {
                last: 1,
                deepest: 6,
                wake: 1
            }
        );
        assert_eq!(one(&[0x02, 0x63, 0x81]), Packet::Bbp { sz: true, kind: 1 });
        assert_eq!(one(&[0x02, 0xb3]), Packet::Bep { ip: true });
        assert_eq!(
            one(&[0x02, 0x13, 0x83, 0xf0]),
            Packet::Cfe {
                kind: 3,
                vector: 0xf0,
                ip: true
            }
        );
        assert_eq!(
            one(&[0x02, 0x53, 0x02, 0xaa, 0x0b, 0xf0, 0, 0, 0, 0, 0]),
            Packet::Evd {
                kind: 2,
                payload: 0xf00baa
            }
        );
        assert_eq!(
            one(&[0xd9, 0xe0, 0xa1, 23, 0]),
            Packet::Trig {
                trbv: 0xa1,
                icnt: Some(23),
                mult: true,
                ip: true
            }
        );
        // Inside a PEBS block, `..100b` is BIP.
        assert_eq!(
            decode(&[0x0c, 1, 2, 3, 4], Some(4)),
            Ok((
                Packet::Bip {
                    id: 1,
                    value: 0x04030201
                },
                5
            ))
        );
    }

    #[test]
    fn ip_compression() {
        let ip = |b: &[u8]| match one(b) {
            Packet::Tip(ip) | Packet::Fup(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) => ip,
            p => panic!("{p:?}"),
        };
        let last = 0x7fff_1234_5678_9abc;
        assert_eq!(ip(&[0x0d]).apply(last), None);
        assert_eq!(
            ip(&[0x2d, 0x22, 0x11]).apply(last),
            Some(0x7fff_1234_5678_1122)
        );
        assert_eq!(
            ip(&[0x5d, 1, 0, 0, 0]).apply(last),
            Some(0x7fff_1234_0000_0001)
        );
        assert_eq!(
            ip(&[0x71, 0, 0x10, 0xff, 0xff, 0xff, 0xff]).apply(last),
            Some(0xffff_ffff_ffff_1000)
        );
        assert_eq!(
            ip(&[0x81, 0, 0x40, 0xff, 0xff, 0xff, 0xff]).apply(last),
            Some(0x7fff_ffff_ffff_4000)
        );
        assert_eq!(
            ip(&[0xcd, 0, 0x40, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0]).apply(last),
            Some(0x00cc_cccc_cccc_4000)
        );
        // 101 and 111 are reserved.
        assert_eq!(
            decode(&[0xad, 0, 0, 0, 0, 0, 0, 0, 0], None),
            Err(PacketError::BadPayload)
        );
    }

    #[test]
    fn bad_and_cut_packets() {
        assert_eq!(decode(&[0x02, 0x00], None), Err(PacketError::BadOpcode));
        assert_eq!(decode(&[0xc9], None), Err(PacketError::BadOpcode));
        assert_eq!(
            decode(&[0x02, 0x73, 0, 0, 1, 0, 0], None),
            Err(PacketError::BadPayload)
        );
        assert_eq!(decode(&[0x99, 0x41], None), Err(PacketError::BadPayload));
        for full in [
            &PSB[..],
            &[0x19, 1, 2, 3, 4, 5, 6, 7],
            &[0x9f, 0x03, 0x02],
            &[0xcd, 1, 2, 3, 4, 5, 6, 7, 8],
        ] {
            for cut in 0..full.len() {
                assert_eq!(
                    decode(&full[..cut], None),
                    Err(PacketError::Truncated),
                    "{full:02x?} cut at {cut}"
                );
            }
        }
        // A CYC longer than 15 bytes.
        assert_eq!(decode(&[0xff; 20], None), Err(PacketError::BadPayload));
    }

    #[test]
    fn psbs_are_found_anywhere() {
        let mut b = vec![0x02, 0x82, 0x02, 0x00, 0x19];
        b.extend_from_slice(&PSB);
        b.extend_from_slice(&[0x02, 0x23]);
        b.extend_from_slice(&PSB);
        assert_eq!(psb_offsets(&b), vec![5, 23]);
        assert_eq!(find_psb(&b, 6), Some(23));
        assert_eq!(find_psb(&b, 100), None);
    }
}
