//! Instructions, a basic block at a time: from an address, decode (iced-x86) up to the
//! first instruction that can change the flow, and remember what the walk needs — how
//! the block ends, its direct target, its length in instructions — and the instructions
//! inside it worth knowing ([`Fact`]s: PTWRITE, OCaml's exception-trap pushes, pops
//! and raises).

use iced_x86::{
    Code, Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind,
    Register,
};

/// How a block ends: what the walk needs to go on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// A conditional branch (Jcc, LOOP, JRCXZ): a TNT bit says which way.
    Jcc,
    /// A direct near jump: no packet.
    Jmp,
    /// A direct near call: no packet; the return address is pushed for compression.
    Call,
    /// An indirect near jump: a TIP gives the target.
    IndJmp,
    /// An indirect near call: a TIP gives the target.
    IndCall,
    /// A near return: a TNT bit (compressed) or a TIP.
    Ret,
    /// A far call, jump or return, or IRET: a TIP (or TIP.PGD).
    Far,
    /// SYSCALL or SYSENTER: a TIP, or TIP.PGD when only user space is traced.
    Syscall,
    /// SYSRET or SYSEXIT.
    Sysret,
    /// INT n, INT3, INTO, INT1: a TIP or TIP.PGD.
    Int,
    /// An instruction that faults (UD2, an invalid encoding): a FUP + TIP(.PGD) follows.
    Fault,
    /// Not a branch: the block was cut (too long, or the code ends); go on at `next`.
    Cut,
}

/// What an instruction inside a block is, when it matters beyond the walk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FactKind {
    /// PTWRITE: a PTW packet carries its operand.
    Ptwrite,
    /// OCaml pushes an exception handler (`mov [r14+d], rsp` after pushing the handler
    /// and the previous trap pointer).
    PushTrap,
    /// OCaml pops the innermost handler (`pop [r14+d]`): a poptrap, or part of a raise.
    PopTrap,
    /// OCaml raises: the stack is cut back to the innermost handler (`mov rsp, [r14+d]`);
    /// the pop and the return that follow land in the handler.
    Raise,
}

/// An instruction worth knowing, by address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fact {
    /// Its address.
    pub ip: u64,
    /// What it is.
    pub kind: FactKind,
}

/// A basic block.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// First instruction.
    pub start: u64,
    /// The last instruction (the branch, for a block ending in one).
    pub last: u64,
    /// The address after the last instruction (fall-through, return address).
    pub next: u64,
    /// The direct target of a Jcc, JMP or CALL.
    pub target: u64,
    /// Instructions in the block, the last included.
    pub insns: u32,
    /// How it ends.
    pub end: End,
    /// It holds a repeated string instruction (`rep movs`, `rep stos`, …), which runs
    /// for as long as its count says: the block's time is not its length.
    pub rep: bool,
    /// Its facts: `facts[first..first + count]` of the cache's fact list.
    pub facts_first: u32,
    /// How many facts.
    pub facts_count: u16,
}

/// What block decoding looks for besides branches.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct FactOptions {
    /// OCaml exception-trap instructions (see [`FactKind`]).
    pub ocaml_traps: bool,
}

/// Longest block decoded at once (a longer straight line is cut and continued).
pub const MAX_BLOCK_INSNS: u32 = 2048;

/// Decodes the block at `ip` from `code` (the bytes from `ip` on), in a `bitness`-bit
/// code segment, appending its facts to `facts`.
pub fn decode_block(
    code: &[u8],
    ip: u64,
    bitness: u32,
    opts: FactOptions,
    facts: &mut Vec<Fact>,
) -> Block {
    let mut d = Decoder::with_ip(bitness, code, ip, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let facts_first = facts.len() as u32;
    let mut n = 0u32;
    let mut last = ip;
    let mut end = End::Cut;
    let mut target = 0;
    let mut next = ip;
    let mut rep = false;
    while d.can_decode() && n < MAX_BLOCK_INSNS {
        d.decode_out(&mut insn);
        if insn.is_invalid() {
            if d.last_error() == DecoderError::NoMoreBytes {
                // The code ends inside this instruction: the block stops before it.
                break;
            }
            next = insn.next_ip();
            // An invalid encoding faults where it is.
            last = insn.ip();
            n += 1;
            end = End::Fault;
            break;
        }
        n += 1;
        last = insn.ip();
        next = insn.next_ip();
        rep |= (insn.has_rep_prefix() || insn.has_repne_prefix()) && insn.is_string_instruction();
        if opts.ocaml_traps || insn.mnemonic() == Mnemonic::Ptwrite {
            if let Some(kind) = fact_of(&insn) {
                facts.push(Fact {
                    ip: insn.ip(),
                    kind,
                });
            }
        }
        match branch_kind(&insn) {
            None => continue,
            Some((e, t)) => {
                end = e;
                target = t;
                break;
            }
        }
    }
    let facts_count = (facts.len() as u32 - facts_first).min(u32::from(u16::MAX)) as u16;
    Block {
        start: ip,
        last,
        next,
        target,
        insns: n,
        end,
        rep,
        facts_first,
        facts_count,
    }
}

/// How an instruction ends a block, and its direct target; `None` for straight-line
/// code.
fn branch_kind(insn: &Instruction) -> Option<(End, u64)> {
    let direct = |i: &Instruction| match i.op0_kind() {
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64 => {
            i.near_branch_target()
        }
        _ => 0,
    };
    Some(match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend => return None,
        FlowControl::ConditionalBranch => (End::Jcc, direct(insn)),
        FlowControl::UnconditionalBranch => {
            if insn.is_jmp_far() {
                (End::Far, 0)
            } else {
                (End::Jmp, direct(insn))
            }
        }
        FlowControl::IndirectBranch => {
            if insn.is_jmp_far_indirect() {
                (End::Far, 0)
            } else {
                (End::IndJmp, 0)
            }
        }
        FlowControl::Call => match insn.mnemonic() {
            Mnemonic::Syscall | Mnemonic::Sysenter => (End::Syscall, 0),
            _ if insn.is_call_far() => (End::Far, 0),
            Mnemonic::Call => (End::Call, direct(insn)),
            // VMCALL and the like leave the traced context.
            _ => (End::Far, 0),
        },
        FlowControl::IndirectCall => {
            if insn.is_call_far_indirect() {
                (End::Far, 0)
            } else {
                (End::IndCall, 0)
            }
        }
        FlowControl::Return => match insn.mnemonic() {
            Mnemonic::Ret => (End::Ret, 0),
            Mnemonic::Sysret | Mnemonic::Sysretq | Mnemonic::Sysexit | Mnemonic::Sysexitq => {
                (End::Sysret, 0)
            }
            _ => (End::Far, 0),
        },
        FlowControl::Interrupt => (End::Int, 0),
        FlowControl::Exception => (End::Fault, 0),
    })
}

/// The fact an instruction is, if any.
fn fact_of(insn: &Instruction) -> Option<FactKind> {
    let r14_mem = |i: &Instruction, op: u32| {
        i.op_kind(op) == OpKind::Memory
            && i.memory_base() == Register::R14
            && i.memory_index() == Register::None
    };
    match insn.code() {
        Code::Ptwrite_rm32 | Code::Ptwrite_rm64 => Some(FactKind::Ptwrite),
        // `mov [r14+d], rsp`: the new trap pointer is the stack pointer.
        Code::Mov_rm64_r64 if r14_mem(insn, 0) && insn.op1_register() == Register::RSP => {
            Some(FactKind::PushTrap)
        }
        // `mov rsp, [r14+d]`: back to the innermost trap.
        Code::Mov_r64_rm64 if insn.op0_register() == Register::RSP && r14_mem(insn, 1) => {
            Some(FactKind::Raise)
        }
        // `pop qword [r14+d]`: the trap pointer becomes the previous one.
        Code::Pop_rm64 if r14_mem(insn, 0) => Some(FactKind::PopTrap),
        _ => None,
    }
}

/// OCaml's exception-handler instructions in a piece of code (64-bit), by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcamlTraps {
    /// Where a handler is pushed (`mov [r14+d], rsp`).
    pub pushtraps: Vec<u64>,
    /// Where the innermost handler is popped without a raise (`pop [r14+d]`).
    pub poptraps: Vec<u64>,
    /// The handlers' entries (the `lea r11, [rip+d]` before a pushtrap), where a raise
    /// lands.
    pub handlers: Vec<u64>,
}

/// Finds OCaml's trap instructions in `code` (at `start`), decoding it from its start
/// (OCaml's code sections hold code only; a byte that decodes to nothing is skipped).
/// The walk recognises the same instructions as [`FactKind`]s; a `pop [r14+d]` right
/// after a raise's `mov rsp, [r14+d]` is the raise's own, not a poptrap.
pub fn ocaml_traps(code: &[u8], start: u64) -> OcamlTraps {
    let mut out = OcamlTraps::default();
    let mut d = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    // The handler address last loaded into r11, and how many instructions ago.
    let mut lea: Option<(u64, u32)> = None;
    let mut since_raise = u32::MAX;
    while d.can_decode() {
        let at = d.position();
        d.decode_out(&mut insn);
        if insn.is_invalid() {
            d.set_position(at + 1).ok();
            d.set_ip(start + at as u64 + 1);
            lea = None;
            continue;
        }
        lea = lea.and_then(|(a, n)| (n < 4).then_some((a, n + 1)));
        since_raise = since_raise.saturating_add(1);
        if insn.code() == Code::Lea_r64_m
            && insn.op0_register() == Register::R11
            && insn.memory_base() == Register::RIP
        {
            lea = Some((insn.memory_displacement64(), 0));
            continue;
        }
        match fact_of(&insn) {
            Some(FactKind::PushTrap) => {
                out.pushtraps.push(insn.ip());
                if let Some((h, _)) = lea.take() {
                    out.handlers.push(h);
                }
            }
            Some(FactKind::Raise) => since_raise = 0,
            Some(FactKind::PopTrap) if since_raise > 1 => out.poptraps.push(insn.ip()),
            _ => {}
        }
    }
    out
}

/// Walks the straight-line code of the block at `start` (decoding again) to the
/// instruction at `to`: the instructions before it, or `None` when `to` is not an
/// instruction boundary within it.
pub fn insns_before(code: &[u8], start: u64, bitness: u32, to: u64) -> Option<u32> {
    if to == start {
        return Some(0);
    }
    let mut d = Decoder::with_ip(bitness, code, start, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut n = 0;
    while d.can_decode() && n < MAX_BLOCK_INSNS {
        d.decode_out(&mut insn);
        if insn.is_invalid() {
            return None;
        }
        n += 1;
        if insn.next_ip() == to {
            return Some(n);
        }
        if insn.next_ip() > to || branch_kind(&insn).is_some() {
            return None;
        }
    }
    None
}

/// The addresses of the instructions of the block at `start` (for instruction-level
/// tests and tools; the walk itself never needs them).
pub fn instruction_addresses(code: &[u8], start: u64, bitness: u32, count: u32) -> Vec<u64> {
    let mut d = Decoder::with_ip(bitness, code, start, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut out = Vec::with_capacity(count as usize);
    while d.can_decode() && (out.len() as u32) < count {
        d.decode_out(&mut insn);
        out.push(insn.ip());
        if insn.is_invalid() {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(code: &[u8], ocaml: bool) -> (Block, Vec<Fact>) {
        let mut facts = Vec::new();
        let b = decode_block(
            code,
            0x1000,
            64,
            FactOptions { ocaml_traps: ocaml },
            &mut facts,
        );
        (b, facts)
    }

    #[test]
    fn blocks_end_at_branches() {
        // nop; jle +2
        let (b, _) = block(&[0x90, 0x7e, 0x02], false);
        assert_eq!(
            (b.end, b.insns, b.last, b.next, b.target),
            (End::Jcc, 2, 0x1001, 0x1003, 0x1005)
        );
        // call rel32 0
        let (b, _) = block(&[0xe8, 0, 0, 0, 0], false);
        assert_eq!((b.end, b.target, b.next), (End::Call, 0x1005, 0x1005));
        // call rax; jmp rax; ret; syscall; int3; ud2
        assert_eq!(block(&[0xff, 0xd0], false).0.end, End::IndCall);
        assert_eq!(block(&[0xff, 0xe0], false).0.end, End::IndJmp);
        assert_eq!(block(&[0xc3], false).0.end, End::Ret);
        assert_eq!(block(&[0x0f, 0x05], false).0.end, End::Syscall);
        assert_eq!(block(&[0xcc], false).0.end, End::Int);
        assert_eq!(block(&[0x0f, 0x0b], false).0.end, End::Fault);
        assert_eq!(block(&[0x48, 0x0f, 0x07], false).0.end, End::Sysret);
        assert_eq!(block(&[0xcb], false).0.end, End::Far);
        // The code ends inside an instruction: cut before it.
        let (b, _) = block(&[0x90, 0xe8, 0], false);
        assert_eq!((b.end, b.insns, b.next), (End::Cut, 1, 0x1001));
    }

    #[test]
    fn ocaml_traps_are_facts() {
        // OCaml 4.13's pushtrap: lea r11,[rip+0x19]; push r11; push [r14+0x10];
        // mov [r14+0x10], rsp; then poptrap: pop [r14+0x10]; add rsp, 8; ret.
        let code = [
            0x4c, 0x8d, 0x1d, 0x19, 0, 0, 0, 0x41, 0x53, 0x41, 0xff, 0x76, 0x10, 0x49, 0x89, 0x66,
            0x10, 0x41, 0x8f, 0x46, 0x10, 0x48, 0x83, 0xc4, 0x08, 0xc3,
        ];
        let (b, facts) = block(&code, true);
        assert_eq!(b.end, End::Ret);
        assert_eq!(b.insns, 7);
        let kinds: Vec<_> = facts.iter().map(|f| (f.ip - 0x1000, f.kind)).collect();
        assert_eq!(kinds, [(13, FactKind::PushTrap), (17, FactKind::PopTrap)]);
        assert_eq!(b.facts_count, 2);
        // caml_raise_exn: mov rsp, [r14+0x10]; pop [r14+0x10]; ret.
        let (_, facts) = block(
            &[0x49, 0x8b, 0x66, 0x10, 0x41, 0x8f, 0x46, 0x10, 0xc3],
            true,
        );
        let kinds: Vec<_> = facts.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [FactKind::Raise, FactKind::PopTrap]);
        // Not looked for unless asked.
        assert!(block(&code, false).1.is_empty());
    }

    #[test]
    fn ocaml_traps_of_a_function() {
        // pushtrap (lea r11 to the handler at 0x1019), a poptrap, a ret; then a raise
        // (mov rsp, [r14+0x10]; pop [r14+0x10]; ret), whose pop is no poptrap.
        let code = [
            0x4c, 0x8d, 0x1d, 0x0b, 0, 0, 0, 0x41, 0x53, 0x41, 0xff, 0x76, 0x10, 0x49, 0x89, 0x66,
            0x10, 0x41, 0x8f, 0x46, 0x10, 0x48, 0x83, 0xc4, 0x08, 0xc3, 0x49, 0x8b, 0x66, 0x10,
            0x41, 0x8f, 0x46, 0x10, 0xc3,
        ];
        let t = ocaml_traps(&code, 0x1000);
        assert_eq!(t.pushtraps, [0x100d]);
        assert_eq!(t.poptraps, [0x1011]);
        assert_eq!(t.handlers, [0x1012]);
    }

    #[test]
    fn instruction_boundaries() {
        let code = [0x90, 0x48, 0x89, 0xc0, 0x90, 0xc3];
        assert_eq!(insns_before(&code, 0x1000, 64, 0x1004), Some(2));
        assert_eq!(insns_before(&code, 0x1000, 64, 0x1002), None);
        assert_eq!(insns_before(&code, 0x1000, 64, 0x1000), Some(0));
        assert_eq!(
            instruction_addresses(&code, 0x1000, 64, 4),
            [0x1000, 0x1001, 0x1004, 0x1005]
        );
    }
}
