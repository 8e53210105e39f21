//! Branch times between timing packets, against a known clock: one TSC tick per
//! instruction and per iteration of a repeated string instruction (as ptsim's truth
//! counts them), CYC-exact packets (core clock = TSC clock).

use ptscope_intel_pt::cache::BlockCache;
use ptscope_intel_pt::decoder::{BranchKind, Config, Event, EventKind, Memory};
use ptscope_intel_pt::encode::Encoder;
use ptscope_intel_pt::insn::FactOptions;
use ptscope_intel_pt::packet::IpCompression;
use ptscope_intel_pt::time::TimeConfig;

const BASE: u64 = 0x1000;
const LEAF: u64 = 0x1080;
const T0: u64 = 1_000_000;
/// Iterations of each `rep stos` (the trace cannot tell).
const COUNT: u64 = 12;

struct Program(Vec<u8>);

impl Memory for Program {
    fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
        self.0.get(usize::try_from(ip.checked_sub(BASE)?).ok()?..)
    }
}

/// 20 `nop`s, `test; jz +0` (the first TNT bit: a span without `rep` gives the rate),
/// `mov ecx, 12; rep stos; call LEAF`, then `mov ecx, 12; rep stos` (or, with
/// `second_rep` false, a 2-byte `nop` in its place) `; test; jz +0`. LEAF: `nop; ret`
/// (its return compressed into a TNT bit): python3's `PyObject_CheckBuffer`, called
/// between two `rep stos` in one span between timed packets.
fn program(second_rep: bool) -> Program {
    let mut c = vec![0x90; 20];
    c.extend_from_slice(&[0x85, 0xc0, 0x74, 0x00]); // 0x1014: test eax, eax; jz +0
    c.extend_from_slice(&[0xb9, 0x0c, 0, 0, 0, 0xf3, 0xab]); // 0x1018: mov ecx, 12; rep stos
    let rel = (LEAF as i64 - 0x1024) as i32;
    c.push(0xe8); // 0x101f: call LEAF
    c.extend_from_slice(&rel.to_le_bytes());
    c.extend_from_slice(&[0xb9, 0x0c, 0, 0, 0]); // 0x1024: mov ecx, 12
    c.extend_from_slice(if second_rep {
        &[0xf3, 0xab] // rep stos
    } else {
        &[0x66, 0x90] // nop
    });
    c.extend_from_slice(&[0x85, 0xc0, 0x74, 0x00]); // 0x102b: test eax, eax; jz +0
    c.resize((LEAF - BASE) as usize, 0xcc);
    c.extend_from_slice(&[0x90, 0xc3]); // LEAF: nop; ret
    Program(c)
}

/// Decodes the run of [`program`]: PSB at 0x1000, the first `jz` not taken (22
/// instructions in), then the leaf's return and the second `jz` (not taken) in one TNT
/// packet, each packet after a CYC giving its true time.
fn decode(second_rep: bool) -> (Vec<Event>, u64) {
    // True clock of the second `jz`: mov, the `rep`'s iterations, call, nop, ret, mov,
    // the second `rep`'s iterations (or a nop), test, jz.
    let second = 22 + 1 + COUNT + 1 + 2 + 1 + if second_rep { COUNT } else { 1 } + 2;
    let mut e = Encoder::new();
    e.psb()
        .tsc(T0)
        .cbr(20)
        .fup(IpCompression::Sext48, BASE)
        .psbend();
    e.cyc(22).tnt(&[false]);
    e.cyc(second - 22).tnt(&[true, false]);
    e.tip_pgd(IpCompression::Suppressed, 0);
    let trace = e.into_bytes();
    let cfg = Config {
        cyc: true,
        time: TimeConfig {
            nonturbo_ratio: 20,
            ..TimeConfig::default()
        },
        ..Config::default()
    };
    let mut cache = BlockCache::new(FactOptions::default());
    let mut out = Vec::new();
    ptscope_intel_pt::decode_chunk(
        &trace,
        0..trace.len(),
        cfg,
        &program(second_rep),
        &mut cache,
        0,
        &mut out,
    );
    (out, second)
}

/// The times of the call to the leaf and of its return.
fn leaf(events: &[Event]) -> (u64, u64) {
    let time = |want: BranchKind| {
        events
            .iter()
            .find_map(|e| match e.kind {
                EventKind::Branch { kind, .. } if kind == want => Some(e.time - T0),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no {want:?} in {events:#?}"))
    };
    (time(BranchKind::Call), time(BranchKind::Ret))
}

#[test]
fn a_leaf_between_two_reps_is_not_drawn_where_it_never_ran() {
    let (events, _) = decode(true);
    let (call, ret) = leaf(&events);
    // The truth: called once the first `rep` has run (22 + mov + 12 + call), returning 2
    // ticks later. How the 22 ticks of both `rep`s divide is unknown to the trace, so
    // the leaf may be timed anywhere in between, but not as a frame of its own outside
    // its true interval: it either overlaps it or takes no time at all.
    let truth = (22 + 1 + COUNT + 1, 22 + 1 + COUNT + 1 + 2);
    assert!(
        call == ret || (call < truth.1 && ret > truth.0),
        "leaf timed {call}..{ret}, truly {}..{}",
        truth.0,
        truth.1
    );
    // Times never go back, and stay between the packets that time them.
    let times: Vec<u64> = events.iter().map(|e| e.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
}

#[test]
fn after_a_single_rep_branches_are_timed_back_from_the_next_packet_exactly() {
    let (events, second) = decode(false);
    let (call, ret) = leaf(&events);
    // One `rep` in the span: the instructions after it ran at the measured rate (one
    // tick each) up to the packet, so the call and return are exact.
    assert_eq!((call, ret), (second - 6, second - 4));
    assert_eq!(second, 22 + 1 + COUNT + 1 + 2 + 1 + 1 + 2);
}
