//! Writing packets: the inverse of [`crate::packet::decode`], with the last-IP state IP
//! compression needs. Tests build traces with it (libipt's conformance cases, fuzz
//! seeds, synthetic recordings).
//!
//! ```
//! use ptscope_intel_pt::encode::Encoder;
//! use ptscope_intel_pt::packet::{decode, IpCompression, Packet, Packets};
//!
//! let mut e = Encoder::new();
//! e.psb().fup(IpCompression::Sext48, 0x40_1000).psbend().tnt(&[true, false]);
//! let packets: Vec<Packet> = Packets::new(e.bytes()).map(|p| p.unwrap().1).collect();
//! assert_eq!(packets.len(), 4);
//! assert_eq!(packets[3], Packet::Tnt { bits: 0b10, count: 2 });
//! ```

use crate::packet::{IpCompression, PSB};

/// Packets appended to a buffer.
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    out: Vec<u8>,
    last_ip: u64,
}

impl Encoder {
    /// An empty trace.
    pub fn new() -> Self {
        Encoder::default()
    }

    /// The trace so far.
    pub fn bytes(&self) -> &[u8] {
        &self.out
    }

    /// The trace.
    pub fn into_bytes(self) -> Vec<u8> {
        self.out
    }

    /// Appends raw bytes (a corrupt packet, say).
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b);
        self
    }

    /// PAD.
    pub fn pad(&mut self) -> &mut Self {
        self.raw(&[0])
    }

    /// PSB (resets the last IP, as the decoder does).
    pub fn psb(&mut self) -> &mut Self {
        self.last_ip = 0;
        self.raw(&PSB)
    }

    /// PSBEND.
    pub fn psbend(&mut self) -> &mut Self {
        self.raw(&[0x02, 0x23])
    }

    /// OVF.
    pub fn ovf(&mut self) -> &mut Self {
        self.raw(&[0x02, 0xf3])
    }

    /// TraceStop.
    pub fn stop(&mut self) -> &mut Self {
        self.raw(&[0x02, 0x83])
    }

    /// A TNT of `outcomes`, oldest first: short when it fits (≤ 6), else long (≤ 47).
    pub fn tnt(&mut self, outcomes: &[bool]) -> &mut Self {
        let n = outcomes.len();
        let mut bits = 1u64;
        for &t in outcomes {
            bits = (bits << 1) | u64::from(t);
        }
        if n <= 6 {
            self.raw(&[(bits << 1) as u8])
        } else {
            self.raw(&[0x02, 0xa3]);
            let b = bits.to_le_bytes();
            self.raw(&b[..6])
        }
    }

    fn ip_packet(&mut self, op: u8, comp: IpCompression, ip: u64) -> &mut Self {
        self.out.push(op | (comp.bits() << 5));
        let n = comp.len();
        self.out.extend_from_slice(&ip.to_le_bytes()[..n]);
        if n > 0 {
            let last = self.last_ip;
            self.last_ip = match comp {
                IpCompression::Update16 => (last & !0xffff) | (ip & 0xffff),
                IpCompression::Update32 => (last & !0xffff_ffff) | (ip & 0xffff_ffff),
                IpCompression::Update48 => (last & !0xffff_ffff_ffff) | (ip & 0xffff_ffff_ffff),
                IpCompression::Sext48 => ((ip << 16) as i64 >> 16) as u64,
                _ => ip,
            };
        }
        self
    }

    /// The smallest compression that gives `ip` from the last IP.
    pub fn best(&self, ip: u64) -> IpCompression {
        let last = self.last_ip;
        if last >> 16 == ip >> 16 {
            IpCompression::Update16
        } else if last >> 32 == ip >> 32 {
            IpCompression::Update32
        } else if ((ip << 16) as i64 >> 16) as u64 == ip {
            IpCompression::Sext48
        } else {
            IpCompression::Full
        }
    }

    /// TIP.
    pub fn tip(&mut self, comp: IpCompression, ip: u64) -> &mut Self {
        self.ip_packet(0x0d, comp, ip)
    }

    /// TIP.PGE.
    pub fn tip_pge(&mut self, comp: IpCompression, ip: u64) -> &mut Self {
        self.ip_packet(0x11, comp, ip)
    }

    /// TIP.PGD.
    pub fn tip_pgd(&mut self, comp: IpCompression, ip: u64) -> &mut Self {
        self.ip_packet(0x01, comp, ip)
    }

    /// FUP.
    pub fn fup(&mut self, comp: IpCompression, ip: u64) -> &mut Self {
        self.ip_packet(0x1d, comp, ip)
    }

    /// MODE.Exec.
    pub fn mode_exec(&mut self, csl: bool, csd: bool, iflag: bool) -> &mut Self {
        self.raw(&[
            0x99,
            u8::from(csl) | u8::from(csd) << 1 | u8::from(iflag) << 2,
        ])
    }

    /// MODE.TSX.
    pub fn mode_tsx(&mut self, intx: bool, abort: bool) -> &mut Self {
        self.raw(&[0x99, 0x20 | u8::from(intx) | u8::from(abort) << 1])
    }

    /// PIP (CR3 bits 51:5).
    pub fn pip(&mut self, cr3: u64, nr: bool) -> &mut Self {
        let payload = ((cr3 >> 5) << 1) | u64::from(nr);
        self.raw(&[0x02, 0x43]);
        self.raw(&payload.to_le_bytes()[..6])
    }

    /// VMCS (bits 51:12).
    pub fn vmcs(&mut self, base: u64) -> &mut Self {
        self.raw(&[0x02, 0xc8]);
        self.raw(&(base >> 12).to_le_bytes()[..5])
    }

    /// TSC (its low 56 bits).
    pub fn tsc(&mut self, tsc: u64) -> &mut Self {
        self.raw(&[0x19]);
        self.raw(&tsc.to_le_bytes()[..7])
    }

    /// CBR.
    pub fn cbr(&mut self, ratio: u8) -> &mut Self {
        self.raw(&[0x02, 0x03, ratio, 0])
    }

    /// TMA.
    pub fn tma(&mut self, ctc: u16, fc: u16) -> &mut Self {
        let c = ctc.to_le_bytes();
        let f = fc.to_le_bytes();
        self.raw(&[0x02, 0x73, c[0], c[1], 0, f[0], f[1] & 1])
    }

    /// MTC.
    pub fn mtc(&mut self, ctc: u8) -> &mut Self {
        self.raw(&[0x59, ctc])
    }

    /// CYC.
    pub fn cyc(&mut self, cycles: u64) -> &mut Self {
        let mut d = cycles;
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
        self
    }

    /// MNT.
    pub fn mnt(&mut self, payload: u64) -> &mut Self {
        self.raw(&[0x02, 0xc3, 0x88]);
        self.raw(&payload.to_le_bytes())
    }

    /// PTW with a 4- or 8-byte payload.
    pub fn ptw(&mut self, size: u8, payload: u64, ip: bool) -> &mut Self {
        let pb = if size == 8 { 1 } else { 0 };
        self.raw(&[0x02, 0x12 | pb << 5 | u8::from(ip) << 7]);
        let n = if size == 8 { 8 } else { 4 };
        self.raw(&payload.to_le_bytes()[..n])
    }

    /// EXSTOP.
    pub fn exstop(&mut self, ip: bool) -> &mut Self {
        self.raw(&[0x02, if ip { 0xe2 } else { 0x62 }])
    }

    /// MWAIT.
    pub fn mwait(&mut self, hints: u32, ext: u32) -> &mut Self {
        self.raw(&[0x02, 0xc2]);
        self.raw(&hints.to_le_bytes());
        self.raw(&ext.to_le_bytes())
    }

    /// PWRE.
    pub fn pwre(&mut self, state: u8, sub_state: u8, hw: bool) -> &mut Self {
        let payload: u16 = (u16::from(state & 0xf) << 12)
            | (u16::from(sub_state & 0xf) << 8)
            | if hw { 8 } else { 0 };
        self.raw(&[0x02, 0x22]);
        self.raw(&payload.to_le_bytes())
    }

    /// PWRX (`wake`: bit 0 interrupt, bit 2 store, bit 3 autonomous).
    pub fn pwrx(&mut self, last: u8, deepest: u8, wake: u8) -> &mut Self {
        let payload: u64 =
            u64::from(deepest & 0xf) | u64::from(last & 0xf) << 4 | u64::from(wake & 0xf) << 8;
        self.raw(&[0x02, 0xa2]);
        self.raw(&payload.to_le_bytes()[..5])
    }

    /// CFE.
    pub fn cfe(&mut self, kind: u8, vector: u8, ip: bool) -> &mut Self {
        self.raw(&[0x02, 0x13, (kind & 0x1f) | u8::from(ip) << 7, vector])
    }

    /// EVD.
    pub fn evd(&mut self, kind: u8, payload: u64) -> &mut Self {
        self.raw(&[0x02, 0x53, kind & 0x1f]);
        self.raw(&payload.to_le_bytes())
    }

    /// TRIG.
    pub fn trig(&mut self, trbv: u8, icnt: Option<u16>, mult: bool, ip: bool) -> &mut Self {
        let flags = u8::from(ip) << 7 | u8::from(icnt.is_some()) << 6 | u8::from(mult) << 5;
        self.raw(&[0xd9, flags, trbv]);
        if let Some(n) = icnt {
            self.raw(&n.to_le_bytes());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{decode, Packet, Packets};

    #[test]
    fn what_is_written_decodes_back() {
        let mut e = Encoder::new();
        e.psb()
            .tsc(0x1234_5678)
            .tma(0x123, 0x45)
            .cbr(20)
            .mode_exec(true, false, false)
            .fup(IpCompression::Sext48, 0x7fff_0000_1000)
            .psbend()
            .cyc(1000)
            .mtc(7)
            .tnt(&[true, false, true])
            .tnt(&[true; 20])
            .tip(IpCompression::Update16, 0x7fff_0000_2000)
            .ptw(8, 42, true)
            .pwre(1, 2, true)
            .pwrx(1, 6, 1)
            .trig(0xa1, Some(23), true, true)
            .ovf();
        let ps: Vec<Packet> = Packets::new(e.bytes())
            .map(|p| p.expect("valid").1)
            .collect();
        assert_eq!(ps.len(), 17, "{ps:?}");
        assert_eq!(ps[7], Packet::Cyc { cycles: 1000 });
        assert_eq!(
            ps[9],
            Packet::Tnt {
                bits: 0b101,
                count: 3
            }
        );
        assert_eq!(
            ps[10],
            Packet::Tnt {
                bits: (1 << 20) - 1,
                count: 20
            }
        );
        let Packet::Tip(ip) = ps[11] else { panic!() };
        assert_eq!(ip.apply(0x7fff_0000_1000), Some(0x7fff_0000_2000));
        assert_eq!(
            decode(&[0x02, 0x22, 0x08, 0x12], None).map(|p| p.0),
            Ok(Packet::Pwre {
                state: 1,
                sub_state: 2,
                hw: true
            })
        );
    }
}
