//! Packet headers, event headers and the trace-info record.

use crate::buf::{self, Cursor};
use crate::error::ErrorKind;

/// Magic number opening every packet.
pub const MAGIC: u32 = 0xc1fc1fc1;
/// The version this crate writes (it reads 1 to 3).
pub const VERSION: u16 = 3;
/// Largest packet the reference writer produces, header included.
pub const MAX_PACKET_SIZE: usize = 1 << 15;
/// Header length of version-3 packets (v1/v2 lack the 2-byte domain field).
pub const HEADER_LEN_V3: usize = 68;
/// Header length of version-1 and version-2 packets.
pub const HEADER_LEN_V2: usize = 66;
/// Writers start a new packet before this many µs have passed in one.
pub const PACKET_MAX_TIME: i64 = 30_000_000;
/// Allocation ids are handed to each domain in chunks of this size.
pub const IDS_PER_CHUNK: u64 = 10_000;

pub(crate) const TIME_MASK: u32 = 0x1ff_ffff;
pub(crate) const TIME_BITS: u32 = 25;

/// Event codes of the event header.
pub(crate) const EV_TRACE_INFO: u32 = 0;
pub(crate) const EV_LOCATION: u32 = 1;
pub(crate) const EV_ALLOC: u32 = 2;
pub(crate) const EV_PROMOTE: u32 = 3;
pub(crate) const EV_COLLECT: u32 = 4;
pub(crate) const EV_SHORT_ALLOC_BASE: u32 = 100;

/// The backtrace-cache check a packet carries (`ix == 0xffff` means none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheVerifier {
    /// Cache bucket checked, or 0xffff for a dummy verifier.
    pub ix: u16,
    /// Expected predicted-next bucket of `ix`.
    pub pred: u16,
    /// Expected location code cached in `ix`.
    pub value: u64,
}

impl CacheVerifier {
    /// The verifier of packets that check nothing.
    pub const DUMMY: CacheVerifier = CacheVerifier {
        ix: 0xffff,
        pred: 0,
        value: 0,
    };
}

/// A decoded packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketHeader {
    /// Packet size in bits, header included.
    pub size_bits: u32,
    /// First timestamp covered (µs since the epoch).
    pub time_begin: i64,
    /// Last timestamp covered.
    pub time_end: i64,
    /// Format version (1 to 3).
    pub version: u16,
    /// Process id of the writer.
    pub pid: u64,
    /// Domain the packet's events belong to (0 before v3).
    pub domain: u16,
    /// Backtrace-cache verifier.
    pub verifier: CacheVerifier,
    /// First allocation id of the packet.
    pub alloc_id_begin: u64,
    /// One past the last allocation id of the packet.
    pub alloc_id_end: u64,
}

impl PacketHeader {
    /// Header length for a given version.
    pub fn len_for_version(version: u16) -> usize {
        if version >= 3 {
            HEADER_LEN_V3
        } else {
            HEADER_LEN_V2
        }
    }

    /// This header's length in bytes.
    pub fn header_len(&self) -> usize {
        Self::len_for_version(self.version)
    }

    /// Whole packet length in bytes (header included).
    pub fn packet_len(&self) -> usize {
        (self.size_bits / 8) as usize
    }

    /// Parses and validates a header at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<PacketHeader, ErrorKind> {
        let mut c = Cursor::new(bytes, 0);
        let magic = c.u32()?;
        let size_bits = c.u32()?;
        let time_begin = c.u64()? as i64;
        let time_end = c.u64()? as i64;
        let _flush_duration = c.u32()?;
        let version = c.u16()?;
        let pid = c.u64()?;
        let domain = if version >= 3 { c.u16()? } else { 0 };
        let verifier = CacheVerifier {
            ix: c.u16()?,
            pred: c.u16()?,
            value: c.u64()?,
        };
        let alloc_id_begin = c.u64()?;
        let alloc_id_end = c.u64()?;
        if magic != MAGIC {
            return Err(ErrorKind::BadMagic(magic));
        }
        if version > VERSION {
            return Err(ErrorKind::UnsupportedVersion(version));
        }
        if (size_bits as i32) < 0 || ((size_bits / 8) as usize) < c.pos {
            return Err(ErrorKind::BadPacketSize(size_bits));
        }
        if time_begin > time_end {
            return Err(ErrorKind::NonMonotonePacketTimes);
        }
        if (alloc_id_begin as i64) > (alloc_id_end as i64) {
            return Err(ErrorKind::NonMonotoneAllocIds);
        }
        Ok(PacketHeader {
            size_bits,
            time_begin,
            time_end,
            version,
            pid,
            domain,
            verifier,
            alloc_id_begin,
            alloc_id_end,
        })
    }
}

/// Appends a v3 header whose size, times and ids are patched by [`finish_header`].
pub(crate) fn put_header(b: &mut Vec<u8>, pid: u64, domain: u16, verifier: CacheVerifier) {
    buf::put_u32(b, MAGIC);
    buf::put_u32(b, 0);
    buf::put_u64(b, 0);
    buf::put_u64(b, 0);
    buf::put_u32(b, 0);
    buf::put_u16(b, VERSION);
    buf::put_u64(b, pid);
    buf::put_u16(b, domain);
    buf::put_u16(b, verifier.ix);
    buf::put_u16(b, verifier.pred);
    buf::put_u64(b, verifier.value);
    buf::put_u64(b, 0);
    buf::put_u64(b, 0);
}

/// Fills in the fields only known once a packet is complete.
pub(crate) fn finish_header(
    b: &mut [u8],
    time_begin: i64,
    time_end: i64,
    id_begin: u64,
    id_end: u64,
) {
    let size = (b.len() as u32).wrapping_mul(8);
    buf::patch_u32(b, 4, size);
    buf::patch_u64(b, 8, time_begin as u64);
    buf::patch_u64(b, 16, time_end as u64);
    buf::patch_u32(b, 24, 0);
    buf::patch_u64(b, 52, id_begin);
    buf::patch_u64(b, 60, id_end);
}

pub(crate) fn put_event_header(b: &mut Vec<u8>, code: u32, time: i64) {
    buf::put_u32(b, (code << TIME_BITS) | (time as u32 & TIME_MASK));
}

/// Decodes an event header against its packet, returning (code, absolute time).
#[inline]
pub(crate) fn read_event_header(
    c: &mut Cursor<'_>,
    h: &PacketHeader,
) -> Result<(u32, i64), ErrorKind> {
    let word = c.u32()?;
    let start_low = h.time_begin as u32 & TIME_MASK;
    let mut low = i64::from(word & TIME_MASK);
    if (low as u32) < start_low {
        low += 1 << TIME_BITS;
    }
    let time = (h.time_begin & !i64::from(TIME_MASK)).wrapping_add(low);
    if !(h.time_begin <= time && time <= h.time_end) {
        return Err(ErrorKind::TimeOutOfPacket);
    }
    Ok((word >> TIME_BITS, time))
}

/// The trace-info record that opens every trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceInfo {
    /// Sampling rate (probability per word).
    pub sample_rate: f64,
    /// Word size in bits (64 on every current platform).
    pub word_size: u8,
    /// Executable that was traced.
    pub executable_name: Vec<u8>,
    /// Host it ran on.
    pub host_name: Vec<u8>,
    /// `OCAMLRUNPARAM`-style GC parameters.
    pub ocaml_runtime_params: Vec<u8>,
    /// Process id recorded in the trace; packets with another pid are skipped.
    pub pid: u64,
    /// Domain of the trace-info packet.
    pub initial_domain: u16,
    /// Trace start (µs since the epoch); event times are relative to it.
    pub start_time: i64,
    /// Free-form context (v2 and later; `None` when empty).
    pub context: Option<Vec<u8>>,
}

pub(crate) fn put_trace_info(b: &mut Vec<u8>, info: &TraceInfo) {
    put_event_header(b, EV_TRACE_INFO, info.start_time);
    buf::put_u64(b, info.sample_rate.to_bits());
    buf::put_u8(b, info.word_size);
    buf::put_string(b, &info.executable_name);
    buf::put_string(b, &info.host_name);
    buf::put_string(b, &info.ocaml_runtime_params);
    buf::put_u64(b, info.pid);
    buf::put_string(b, info.context.as_deref().unwrap_or(b""));
}

/// Parses the whole trace-info packet (`bytes` is exactly the packet).
pub(crate) fn read_trace_info(bytes: &[u8]) -> Result<(PacketHeader, TraceInfo), ErrorKind> {
    let h = PacketHeader::parse(bytes)?;
    if bytes.len() < h.packet_len() {
        return Err(ErrorKind::MissingTraceInfo);
    }
    let mut c = Cursor::new(&bytes[..h.packet_len()], h.header_len());
    let (code, time) = read_event_header(&mut c, &h)?;
    if code != EV_TRACE_INFO {
        return Err(ErrorKind::BadTraceInfo("first event is not trace info"));
    }
    if time != h.time_begin {
        return Err(ErrorKind::BadTraceInfo(
            "trace-info time differs from packet start",
        ));
    }
    let sample_rate = f64::from_bits(c.u64()?);
    let word_size = c.u8()?;
    let executable_name = c.string()?.to_vec();
    let host_name = c.string()?.to_vec();
    let ocaml_runtime_params = c.string()?.to_vec();
    let pid = c.u64()?;
    let context = if h.version >= 2 {
        Some(c.string()?.to_vec()).filter(|s| !s.is_empty())
    } else {
        None
    };
    if c.remaining() != 0 {
        return Err(ErrorKind::BadTraceInfo("trailing bytes after trace info"));
    }
    let info = TraceInfo {
        sample_rate,
        word_size,
        executable_name,
        host_name,
        ocaml_runtime_params,
        pid,
        initial_domain: h.domain,
        start_time: h.time_begin,
        context,
    };
    Ok((h, info))
}
