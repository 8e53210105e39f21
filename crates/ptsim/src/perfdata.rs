//! perf.data writer for Intel PT recordings in per-thread mode.
//!
//! Layout (see the kernel's `tools/perf/Documentation/perf.data-file-format.txt`): the
//! file header, one attribute (the `intel_pt` event, with its id), the data section
//! (AUXTRACE_INFO, TIME_CONV, COMM, FORK, MMAP2, AUXTRACE and FINISHED_ROUND records)
//! and the feature sections: event description (the event's name, `intel_pt//u`), PMU
//! mappings (type 8 is `intel_pt`) and the AUXTRACE index.

use std::io::Write;

/// `PERF_RECORD_COMM`.
const REC_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
const REC_EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
const REC_FORK: u32 = 7;
/// `PERF_RECORD_MMAP2`.
const REC_MMAP2: u32 = 10;
/// `PERF_RECORD_FINISHED_ROUND`.
const REC_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_AUXTRACE_INFO`.
const REC_AUXTRACE_INFO: u32 = 70;
/// `PERF_RECORD_AUXTRACE`.
const REC_AUXTRACE: u32 = 71;
/// `PERF_RECORD_TIME_CONV`.
const REC_TIME_CONV: u32 = 79;
/// `PERF_AUXTRACE_INTEL_PT`.
const AUXTRACE_INTEL_PT: u32 = 1;
/// `PERF_RECORD_MISC_USER`.
const MISC_USER: u16 = 2;
/// `HEADER_EVENT_DESC` feature bit: event names, which `perf evlist` (and tools that detect
/// an Intel PT recording by its event name) read instead of the PMU's sysfs entry.
const FEAT_EVENT_DESC: usize = 12;
/// `HEADER_PMU_MAPPINGS` feature bit.
const FEAT_PMU_MAPPINGS: usize = 16;
/// `HEADER_AUXTRACE` feature bit: the index of AUXTRACE records. perf script also takes
/// its presence as leave to print fields (`addr`, …) the traced event itself lacks.
const FEAT_AUXTRACE: usize = 18;

/// `PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_IDENTIFIER`.
const SAMPLE_TYPE: u64 = 0x1 | 0x2 | 0x4 | 0x10000;
/// Attribute size written (`PERF_ATTR_SIZE_VER7`).
const ATTR_SIZE: usize = 128;
/// The id given to the `intel_pt` event.
const EVENT_ID: u64 = 1;

/// `intel_pt` PMU config bits (from its sysfs `format/` directory on real machines).
pub mod cfg_bits {
    /// `pt`: tracing on (perf's default config; with it, perf reads `branch` too).
    pub const PT: u64 = 1 << 0;
    /// `cyc`.
    pub const CYC: u64 = 1 << 1;
    /// `mtc`.
    pub const MTC: u64 = 1 << 9;
    /// `tsc`.
    pub const TSC: u64 = 1 << 10;
    /// `noretcomp`.
    pub const NORETCOMP: u64 = 1 << 11;
    /// `branch`: BranchEn, in perf's default config. Without it (and with `pt`), perf's
    /// decoder takes tracing as branch-less and ignores every FUP outside PSB+: an
    /// asynchronous stop's FUP + TIP.PGD then walks on past the FUP's IP.
    pub const BRANCH: u64 = 1 << 13;
    /// `mtc_period` field.
    pub const MTC_PERIOD: u64 = 0xf << 14;
}

/// Conversion from TSC ticks to perf time, as in `perf_event_mmap_page`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TimeConv {
    /// `time_shift`.
    pub shift: u16,
    /// `time_mult`.
    pub mult: u32,
    /// `time_zero`.
    pub zero: u64,
}

impl TimeConv {
    /// A conversion for a TSC running at `hz` ticks per second.
    pub fn for_frequency(hz: u64, zero: u64) -> Self {
        let shift = 31u16;
        let mult = ((1u128 << shift) * 1_000_000_000u128 / hz.max(1) as u128).min(u32::MAX as u128);
        Self {
            shift,
            mult: mult as u32,
            zero,
        }
    }

    /// Perf time in nanoseconds for a TSC value, computed exactly as perf does.
    pub fn tsc_to_ns(&self, tsc: u64) -> u64 {
        let quot = tsc >> self.shift;
        let rem = tsc & ((1u64 << self.shift) - 1);
        self.zero
            .wrapping_add(quot.wrapping_mul(self.mult as u64))
            .wrapping_add((rem.wrapping_mul(self.mult as u64)) >> self.shift)
    }
}

/// A file mapping of code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap {
    /// Perf time at which the mapping is announced.
    pub time: u64,
    /// Thread that mapped it.
    pub tid: u32,
    /// Start address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major.
    pub maj: u32,
    /// Device minor.
    pub min: u32,
    /// Inode.
    pub ino: u64,
    /// File path.
    pub path: String,
}

/// One traced thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadData {
    /// Thread id.
    pub tid: u32,
    /// Perf time at which the thread appears (FORK for all but the first thread).
    pub start: u64,
    /// Perf time at which it exits, if it does.
    pub exit: Option<u64>,
    /// Its Intel PT packets.
    pub aux: Vec<u8>,
    /// TSC when the buffer was read (the AUXTRACE record's `reference`).
    pub reference_tsc: u64,
}

/// Everything a recording holds.
#[derive(Clone, Debug)]
pub struct Recording {
    /// Process id.
    pub pid: u32,
    /// Command name (COMM).
    pub comm: String,
    /// Threads; the first is the main thread.
    pub threads: Vec<ThreadData>,
    /// Code mappings.
    pub mmaps: Vec<Mmap>,
    /// TSC conversion.
    pub time: TimeConv,
    /// PMU type number given to `intel_pt`.
    pub pmu_type: u32,
    /// Config of the `intel_pt` event (see [`cfg_bits`]).
    pub config: u64,
    /// Maximum non-turbo ratio (TSC frequency / 100 MHz).
    pub max_nonturbo_ratio: u64,
    /// Whether the AUX data is a snapshot (ring buffer contents).
    pub snapshot: bool,
    /// TSC ticks per crystal-clock tick.
    pub tsc_ctc_ratio: u32,
}

fn pad8(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(8) {
        v.push(0);
    }
}

fn header(buf: &mut Vec<u8>, ty: u32, misc: u16) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&ty.to_le_bytes());
    buf.extend_from_slice(&misc.to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
    at
}

fn finish(buf: &mut [u8], at: usize) -> std::io::Result<()> {
    let size = u16::try_from(buf.len() - at)
        .map_err(|_| std::io::Error::other("perf record larger than 64 KiB"))?;
    buf[at + 6..at + 8].copy_from_slice(&size.to_le_bytes());
    Ok(())
}

fn sample_id(buf: &mut Vec<u8>, pid: u32, tid: u32, time: u64) {
    buf.extend_from_slice(&pid.to_le_bytes());
    buf.extend_from_slice(&tid.to_le_bytes());
    buf.extend_from_slice(&time.to_le_bytes());
    buf.extend_from_slice(&EVENT_ID.to_le_bytes());
}

fn cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
    pad8(buf);
}

/// A sideband record with its time, for sorting.
struct Side {
    time: u64,
    order: usize,
    bytes: Vec<u8>,
}

impl Recording {
    fn attr(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(ATTR_SIZE);
        a.extend_from_slice(&self.pmu_type.to_le_bytes());
        a.extend_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
        a.extend_from_slice(&self.config.to_le_bytes());
        a.extend_from_slice(&1u64.to_le_bytes()); // sample_period
        a.extend_from_slice(&SAMPLE_TYPE.to_le_bytes());
        a.extend_from_slice(&0u64.to_le_bytes()); // read_format
                                                  // exclude_kernel(5), exclude_hv(6), mmap(8), comm(9), enable_on_exec(12),
                                                  // sample_id_all(18), mmap2(23), comm_exec(24): what `perf record -e intel_pt//u` sets.
        let flags: u64 = (1 << 5)
            | (1 << 6)
            | (1 << 8)
            | (1 << 9)
            | (1 << 12)
            | (1 << 18)
            | (1 << 23)
            | (1 << 24);
        a.extend_from_slice(&flags.to_le_bytes());
        a.resize(ATTR_SIZE, 0);
        a
    }

    fn auxtrace_info(&self) -> std::io::Result<Vec<u8>> {
        let mut b = Vec::new();
        let at = header(&mut b, REC_AUXTRACE_INFO, 0);
        b.extend_from_slice(&AUXTRACE_INTEL_PT.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        let priv_: [u64; 17] = [
            self.pmu_type as u64,
            self.time.shift as u64,
            self.time.mult as u64,
            self.time.zero,
            1, // cap_user_time_zero
            cfg_bits::TSC,
            cfg_bits::NORETCOMP,
            0, // have_sched_switch
            self.snapshot as u64,
            0, // per_cpu_mmaps: per-thread recording
            cfg_bits::MTC,
            cfg_bits::MTC_PERIOD,
            self.tsc_ctc_ratio as u64, // TSC:CTC numerator
            1,                         // TSC:CTC denominator
            cfg_bits::CYC,
            self.max_nonturbo_ratio,
            0, // filter string length
        ];
        for v in priv_ {
            b.extend_from_slice(&v.to_le_bytes());
        }
        finish(&mut b, at)?;
        Ok(b)
    }

    fn time_conv(&self) -> std::io::Result<Vec<u8>> {
        let mut b = Vec::new();
        let at = header(&mut b, REC_TIME_CONV, 0);
        b.extend_from_slice(&(self.time.shift as u64).to_le_bytes());
        b.extend_from_slice(&(self.time.mult as u64).to_le_bytes());
        b.extend_from_slice(&self.time.zero.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes()); // time_cycles
        b.extend_from_slice(&u64::MAX.to_le_bytes()); // time_mask
        b.push(1); // cap_user_time_zero
        b.push(0); // cap_user_time_short
        b.extend_from_slice(&[0u8; 6]);
        finish(&mut b, at)?;
        Ok(b)
    }

    fn sideband(&self) -> std::io::Result<Vec<Side>> {
        let mut out = Vec::new();
        let main = self.threads.first().map_or(self.pid, |t| t.tid);
        for (i, t) in self.threads.iter().enumerate() {
            if i > 0 {
                let mut b = Vec::new();
                let at = header(&mut b, REC_FORK, 0);
                for v in [self.pid, self.pid, t.tid, main] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&t.start.to_le_bytes());
                sample_id(&mut b, self.pid, t.tid, t.start);
                finish(&mut b, at)?;
                out.push(Side {
                    time: t.start,
                    order: out.len(),
                    bytes: b,
                });
            }
            let mut b = Vec::new();
            // PERF_RECORD_MISC_COMM_EXEC for the main thread, as after execve.
            let at = header(&mut b, REC_COMM, if i == 0 { 1 << 13 } else { 0 });
            b.extend_from_slice(&self.pid.to_le_bytes());
            b.extend_from_slice(&t.tid.to_le_bytes());
            let comm: String = self.comm.chars().take(15).collect();
            cstr(&mut b, &comm);
            sample_id(&mut b, self.pid, t.tid, t.start);
            finish(&mut b, at)?;
            out.push(Side {
                time: t.start,
                order: out.len(),
                bytes: b,
            });
            if let Some(exit) = t.exit {
                let mut b = Vec::new();
                let at = header(&mut b, REC_EXIT, 0);
                for v in [self.pid, self.pid, t.tid, t.tid] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&exit.to_le_bytes());
                sample_id(&mut b, self.pid, t.tid, exit);
                finish(&mut b, at)?;
                out.push(Side {
                    time: exit,
                    order: out.len(),
                    bytes: b,
                });
            }
        }
        for m in &self.mmaps {
            let mut b = Vec::new();
            let at = header(&mut b, REC_MMAP2, MISC_USER);
            b.extend_from_slice(&self.pid.to_le_bytes());
            b.extend_from_slice(&m.tid.to_le_bytes());
            for v in [m.start, m.len, m.pgoff] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&m.maj.to_le_bytes());
            b.extend_from_slice(&m.min.to_le_bytes());
            b.extend_from_slice(&m.ino.to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes()); // ino_generation
            b.extend_from_slice(&5u32.to_le_bytes()); // PROT_READ | PROT_EXEC
            b.extend_from_slice(&2u32.to_le_bytes()); // MAP_PRIVATE
            cstr(&mut b, &m.path);
            sample_id(&mut b, self.pid, m.tid, m.time);
            finish(&mut b, at)?;
            out.push(Side {
                time: m.time,
                order: out.len(),
                bytes: b,
            });
        }
        out.sort_by_key(|s| (s.time, s.order));
        Ok(out)
    }

    /// Writes the recording as a perf.data file.
    pub fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        const HEADER_SIZE: u64 = 104;
        let attr = self.attr();
        let attr_section_off = HEADER_SIZE;
        let attr_entry_size = (ATTR_SIZE + 16) as u64;
        let ids_off = attr_section_off + attr_entry_size;
        let data_off = ids_off + 8;

        let mut data = Vec::new();
        data.extend_from_slice(&self.auxtrace_info()?);
        data.extend_from_slice(&self.time_conv()?);
        for s in self.sideband()? {
            data.extend_from_slice(&s.bytes);
        }
        // Trace data comes after the records it must be decoded against; perf queues all
        // AUXTRACE buffers up front and interleaves by timestamp.
        let mut aux_parts: Vec<(Vec<u8>, &[u8])> = Vec::new();
        for (idx, t) in self.threads.iter().enumerate() {
            // A thread with no trace in this buffer gets no AUXTRACE record.
            if t.aux.is_empty() {
                continue;
            }
            let padded = t.aux.len().div_ceil(8) * 8;
            let mut b = Vec::new();
            let at = header(&mut b, REC_AUXTRACE, 0);
            b.extend_from_slice(&(padded as u64).to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes()); // offset in the AUX area
                                                      // The decoder takes the TSC's upper byte from the reference, and ignores
                                                      // TSC packets altogether while it has neither a reference nor a timestamp.
            b.extend_from_slice(&t.reference_tsc.to_le_bytes());
            b.extend_from_slice(&(idx as u32).to_le_bytes());
            b.extend_from_slice(&t.tid.to_le_bytes());
            b.extend_from_slice(&u32::MAX.to_le_bytes()); // cpu -1: per-thread
            b.extend_from_slice(&0u32.to_le_bytes());
            finish(&mut b, at)?;
            aux_parts.push((b, &t.aux));
        }
        let mut round = Vec::new();
        let at = header(&mut round, REC_FINISHED_ROUND, 0);
        finish(&mut round, at)?;

        let aux_len: u64 = aux_parts
            .iter()
            .map(|(h, d)| (h.len() + d.len().div_ceil(8) * 8) as u64)
            .sum();
        let data_size = data.len() as u64 + aux_len + round.len() as u64;

        // perf's header strings: u32 length (NUL included, padded to 64), then the bytes.
        let perf_string = |buf: &mut Vec<u8>, name: &str| {
            let len = (name.len() + 1).div_ceil(64) * 64;
            buf.extend_from_slice(&(len as u32).to_le_bytes());
            let mut s = name.as_bytes().to_vec();
            s.resize(len, 0);
            buf.extend_from_slice(&s);
        };
        // Feature: event description (one event, its attribute, name and id).
        let mut desc = Vec::new();
        desc.extend_from_slice(&1u32.to_le_bytes());
        desc.extend_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
        desc.extend_from_slice(&attr);
        desc.extend_from_slice(&1u32.to_le_bytes());
        perf_string(&mut desc, "intel_pt//u");
        desc.extend_from_slice(&EVENT_ID.to_le_bytes());
        // Feature: PMU mappings.
        let mut pmu = Vec::new();
        let pmus = [(4u32, "cpu"), (self.pmu_type, "intel_pt")];
        pmu.extend_from_slice(&(pmus.len() as u32).to_le_bytes());
        for (ty, name) in pmus {
            pmu.extend_from_slice(&ty.to_le_bytes());
            perf_string(&mut pmu, name);
        }
        // Feature: AUXTRACE index, (file offset, header size) of each AUXTRACE record.
        let mut index = Vec::new();
        index.extend_from_slice(&(aux_parts.len() as u64).to_le_bytes());
        let mut off = data_off + data.len() as u64;
        for (head, aux) in &aux_parts {
            index.extend_from_slice(&off.to_le_bytes());
            index.extend_from_slice(&(head.len() as u64).to_le_bytes());
            off += (head.len() + aux.len().div_ceil(8) * 8) as u64;
        }
        // Features in bit order, each with a (offset, size) entry in the index.
        let feats: [(usize, &[u8]); 3] = [
            (FEAT_EVENT_DESC, &desc),
            (FEAT_PMU_MAPPINGS, &pmu),
            (FEAT_AUXTRACE, &index),
        ];
        let feat_index_off = data_off + data_size;
        let feat_data_off = feat_index_off + 16 * feats.len() as u64;

        let mut h = Vec::with_capacity(HEADER_SIZE as usize);
        h.extend_from_slice(b"PERFILE2");
        h.extend_from_slice(&HEADER_SIZE.to_le_bytes());
        h.extend_from_slice(&attr_entry_size.to_le_bytes());
        h.extend_from_slice(&attr_section_off.to_le_bytes());
        h.extend_from_slice(&attr_entry_size.to_le_bytes());
        h.extend_from_slice(&data_off.to_le_bytes());
        h.extend_from_slice(&data_size.to_le_bytes());
        h.extend_from_slice(&[0u8; 16]); // event_types (unused)
        let mut features = [0u64; 4];
        for (bit, _) in &feats {
            features[bit / 64] |= 1 << (bit % 64);
        }
        for f in features {
            h.extend_from_slice(&f.to_le_bytes());
        }
        w.write_all(&h)?;
        w.write_all(&attr)?;
        w.write_all(&ids_off.to_le_bytes())?;
        w.write_all(&8u64.to_le_bytes())?;
        w.write_all(&EVENT_ID.to_le_bytes())?;
        w.write_all(&data)?;
        for (head, aux) in &aux_parts {
            w.write_all(head)?;
            w.write_all(aux)?;
            let pad = aux.len().div_ceil(8) * 8 - aux.len();
            w.write_all(&[0u8; 8][..pad])?;
        }
        w.write_all(&round)?;
        let mut off = feat_data_off;
        for (_, body) in &feats {
            w.write_all(&off.to_le_bytes())?;
            w.write_all(&(body.len() as u64).to_le_bytes())?;
            off += body.len() as u64;
        }
        for (_, body) in &feats {
            w.write_all(body)?;
        }
        Ok(())
    }
}
