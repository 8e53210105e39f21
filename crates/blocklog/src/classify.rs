//! How a block's last instruction transfers control, decided from its bytes: what the
//! plugin needs to choose which blocks to log, and what readers need to follow them.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic};

/// How an instruction transfers control.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// Conditional branch (`jcc`, `loop`, `jrcxz`) to a fixed target.
    Cond {
        /// Taken target.
        target: u64,
    },
    /// Direct unconditional jump.
    Jmp {
        /// Target.
        target: u64,
    },
    /// Indirect jump.
    IndirectJmp,
    /// Direct call.
    Call {
        /// Target.
        target: u64,
    },
    /// Indirect call.
    IndirectCall,
    /// Near return.
    Return,
    /// A transfer into the kernel (`syscall`, `int`, `sysenter`): user-mode tracing stops.
    Syscall,
    /// Not a branch: the block was cut for another reason.
    Other,
    /// The bytes are not one whole instruction: QEMU records an instruction that crosses
    /// into the next page, then abandons it and starts a new block with it.
    Abandoned,
}

/// Classifies the instruction `bytes` at `ip`.
pub fn classify(bytes: &[u8], ip: u64) -> Flow {
    let mut dec = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = dec.decode();
    if insn.is_invalid() || insn.len() != bytes.len() {
        return Flow::Abandoned;
    }
    // iced-x86 counts `syscall` as a call; for a trace it is a transfer to the kernel.
    if matches!(
        insn.mnemonic(),
        Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Int | Mnemonic::Int1
    ) {
        return Flow::Syscall;
    }
    match insn.flow_control() {
        FlowControl::ConditionalBranch => Flow::Cond {
            target: insn.near_branch_target(),
        },
        FlowControl::UnconditionalBranch => Flow::Jmp {
            target: insn.near_branch_target(),
        },
        FlowControl::IndirectBranch => Flow::IndirectJmp,
        FlowControl::Call => Flow::Call {
            target: insn.near_branch_target(),
        },
        FlowControl::IndirectCall => Flow::IndirectCall,
        FlowControl::Return => Flow::Return,
        // int3/into/ud2 raise signals, seen as asynchronous transfers.
        _ => Flow::Other,
    }
}

/// True when the instruction is `rep`-prefixed, which QEMU runs one iteration per block
/// execution.
pub fn is_rep(bytes: &[u8], ip: u64) -> bool {
    let mut dec = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let insn = dec.decode();
    !insn.is_invalid() && (insn.has_rep_prefix() || insn.has_repne_prefix())
}

/// What a signal interrupted when it arrived before the instruction at a block's start.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Interrupted {
    /// Anything but an indirect branch.
    Other,
    /// A return: perf takes the FUP as that return leaving the traced region.
    Return,
    /// An indirect jump (reported like a return).
    IndirectJmp,
    /// An indirect call (reported like a return).
    IndirectCall,
}

/// What kind of instruction `first` (at `ip`, a block's first) is, for a signal
/// delivered right before it.
pub fn interrupted(first: &[u8], ip: u64) -> Interrupted {
    match classify(first, ip) {
        Flow::Return => Interrupted::Return,
        Flow::IndirectJmp => Interrupted::IndirectJmp,
        Flow::IndirectCall => Interrupted::IndirectCall,
        _ => Interrupted::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_are_told_apart() {
        assert_eq!(
            classify(&[0xe8, 0xfb, 0x0f, 0x00, 0x00], 0x1000),
            Flow::Call { target: 0x2000 }
        );
        assert_eq!(classify(&[0xc3], 0x1000), Flow::Return);
        assert_eq!(classify(&[0xff, 0xe0], 0x1000), Flow::IndirectJmp);
        assert_eq!(classify(&[0xff, 0xd0], 0x1000), Flow::IndirectCall);
        assert_eq!(classify(&[0x0f, 0x05], 0x1000), Flow::Syscall);
        assert_eq!(
            classify(&[0x75, 0x02], 0x1000),
            Flow::Cond { target: 0x1004 }
        );
        assert_eq!(
            classify(&[0xeb, 0xfe], 0x1000),
            Flow::Jmp { target: 0x1000 }
        );
        assert_eq!(classify(&[0x90], 0x1000), Flow::Other);
        assert_eq!(classify(&[0xe8, 0xfb], 0x1000), Flow::Abandoned);
        assert!(is_rep(&[0xf3, 0xa4], 0x1000));
    }
}
