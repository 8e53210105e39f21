//! Triggers: what `--trigger` names, resolved to a runtime address in the target, and a
//! hardware execute breakpoint on it (`perf_event_open`, `PERF_TYPE_BREAKPOINT`,
//! `HW_BREAKPOINT_X`) whose samples carry time, tid, ip and the DI/SI registers (the
//! stop indicator's arguments).

use crate::{Error, Result};
use ptscope_symbols::{MappedFile, Process};
use std::os::unix::io::RawFd;
use std::sync::atomic::{fence, Ordering};

/// The stop indicator's symbol (`--trigger .`).
pub const STOP_INDICATOR: &str = "ptscope_stop_indicator";
/// The stop indicator that passes a start time and a value.
pub const STOP_INDICATOR_WITH: &str = "ptscope_stop_indicator_with";

/// What the user asked to trigger on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerSpec {
    /// A function by raw or demangled name.
    Symbol(String),
    /// A runtime address.
    Address(u64),
    /// A source line (and column).
    Line {
        /// File name or trailing path components.
        file: String,
        /// 1-based line.
        line: u64,
        /// Column.
        col: Option<u64>,
    },
    /// ptscope's stop indicator (both variants).
    StopIndicator,
}

impl TriggerSpec {
    /// Parses `SYMBOL`, `0xADDR`, `FILE:LINE[:COL]`, `.`, with optional `symbol:`, `addr:`,
    /// `line:` prefixes. `?` (the picker) is the caller's business.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        if s.is_empty() {
            return Err(Error::EmptyTrigger);
        }
        if s == "." {
            return Ok(TriggerSpec::StopIndicator);
        }
        if let Some(rest) = s.strip_prefix("symbol:") {
            return Ok(TriggerSpec::Symbol(rest.to_owned()));
        }
        if let Some(rest) = s.strip_prefix("addr:") {
            return parse_addr(rest)
                .map(TriggerSpec::Address)
                .ok_or_else(|| Error::TriggerNotAnAddress(rest.to_owned()));
        }
        let forced_line = s.strip_prefix("line:");
        let body = forced_line.unwrap_or(s);
        if let Some(a) = s
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
        {
            return Ok(TriggerSpec::Address(a));
        }
        // FILE:LINE[:COL]; `::` belongs to C++/Rust paths, so only digits after a colon count.
        let parts: Vec<&str> = body.rsplitn(3, ':').collect();
        let num = |x: &str| x.parse::<u64>().ok();
        let line = match parts[..] {
            [c, l, f]
                if num(c).is_some() && num(l).is_some() && !f.is_empty() && !f.ends_with(':') =>
            {
                Some((f.to_owned(), num(l), num(c)))
            }
            [l, f] if num(l).is_some() && !f.is_empty() && !f.ends_with(':') => {
                Some((f.to_owned(), num(l), None))
            }
            [l, f, g] if num(l).is_some() && !f.is_empty() && !f.ends_with(':') => {
                Some((format!("{g}:{f}"), num(l), None))
            }
            _ => None,
        };
        match line {
            Some((file, Some(line), col)) => Ok(TriggerSpec::Line { file, line, col }),
            _ if forced_line.is_some() => Err(Error::TriggerNotALine(body.to_owned())),
            _ => Ok(TriggerSpec::Symbol(s.to_owned())),
        }
    }
}

fn parse_addr(s: &str) -> Option<u64> {
    let h = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(h, 16).ok()
}

/// One place to put a breakpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Runtime address.
    pub address: u64,
    /// Name shown in `hit NAME` slices.
    pub name: String,
    /// True for the stop indicator (its registers carry arguments).
    pub is_stop_indicator: bool,
}

/// Resolves `spec` in process `pid`. A missing symbol's error carries "did you mean".
pub fn resolve(spec: &TriggerSpec, pid: u32) -> Result<Vec<Target>> {
    let proc = Process::open(pid).map_err(|source| Error::TriggerProcess { pid, source })?;
    match spec {
        TriggerSpec::Address(a) => Ok(vec![Target {
            address: *a,
            name: format!("{a:#x}"),
            is_stop_indicator: false,
        }]),
        TriggerSpec::Symbol(name) => {
            let r = proc.resolve(name).map_err(|e| Error::TriggerSymbol {
                name: name.clone(),
                reason: e.to_string(),
            })?;
            Ok(vec![Target {
                address: r.runtime_address,
                name: r.demangled,
                is_stop_indicator: false,
            }])
        }
        TriggerSpec::StopIndicator => {
            let mut out = Vec::new();
            for name in [STOP_INDICATOR, STOP_INDICATOR_WITH] {
                if let Ok(r) = proc.resolve(name) {
                    out.push(Target {
                        address: r.runtime_address,
                        name: name.to_owned(),
                        is_stop_indicator: name == STOP_INDICATOR_WITH,
                    });
                }
            }
            if out.is_empty() {
                return Err(Error::NoStopIndicator {
                    exe: proc.exe().to_path_buf(),
                    function: STOP_INDICATOR,
                });
            }
            Ok(out)
        }
        TriggerSpec::Line { file, line, col } => {
            let exe = MappedFile::open(proc.exe()).map_err(|source| Error::TriggerProgram {
                path: proc.exe().to_owned(),
                source,
            })?;
            let elf = exe.elf()?;
            let table = elf.line_table()?;
            let addrs = table.addresses_for_line(file, *line, *col)?;
            addrs
                .into_iter()
                .map(|a| {
                    Ok(Target {
                        address: proc.runtime_address(&elf, a.address)?,
                        name: format!("{}:{}", a.file, a.line),
                        is_stop_indicator: false,
                    })
                })
                .collect()
        }
    }
}

/// One breakpoint sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawHit {
    /// perf clock time (ns), the clock `perf record` uses.
    pub time: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Instruction pointer.
    pub ip: u64,
    /// DI (the first argument).
    pub di: u64,
    /// SI (the second argument).
    pub si: u64,
}

#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    bp_addr: u64,
    bp_len: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

const PERF_TYPE_BREAKPOINT: u32 = 5;
const HW_BREAKPOINT_X: u32 = 4;
const SAMPLE_IP: u64 = 1;
const SAMPLE_TID: u64 = 1 << 1;
const SAMPLE_TIME: u64 = 1 << 2;
const SAMPLE_REGS_USER: u64 = 1 << 12;
const FLAG_DISABLED: u64 = 1;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
// x86-64 perf register numbers.
const REG_SI: u64 = 4;
const REG_DI: u64 = 5;
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_REFRESH: libc::c_ulong = 0x2402;
const RECORD_SAMPLE: u32 = 9;
const DATA_PAGES: usize = 2;

/// An armed execute breakpoint and its sample ring.
pub struct Breakpoint {
    fd: RawFd,
    ring: *mut u8,
    ring_len: usize,
    page: usize,
    /// What it is on.
    pub target: Target,
}

// SAFETY: the ring is only touched through &mut self.
unsafe impl Send for Breakpoint {}

impl Breakpoint {
    /// Opens a breakpoint on `target` in thread/process `pid`. `once` disarms it after the
    /// first hit (IOC_REFRESH 1), so a hot function cannot flood us.
    pub fn open(pid: u32, target: Target, once: bool) -> Result<Self> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_BREAKPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            sample_period: 1,
            sample_type: SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_REGS_USER,
            flags: FLAG_DISABLED | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            wakeup_events: 1,
            bp_type: HW_BREAKPOINT_X,
            bp_addr: target.address,
            bp_len: std::mem::size_of::<libc::c_long>() as u64,
            sample_regs_user: (1 << REG_SI) | (1 << REG_DI),
            ..Default::default()
        };
        // SAFETY: a valid attr; pid/cpu/group/flags as documented in perf_event_open(2).
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                pid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                8 as libc::c_ulong, // PERF_FLAG_FD_CLOEXEC
            )
        } as RawFd;
        if fd < 0 {
            return Err(Error::Breakpoint {
                name: target.name,
                address: target.address,
                pid,
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: sysconf is always safe.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let ring_len = page * (1 + DATA_PAGES);
        // SAFETY: mapping the perf fd's ring as perf_event_open(2) describes.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return Err(Error::BreakpointRing(e));
        }
        let bp = Breakpoint {
            fd,
            ring: ring.cast(),
            ring_len,
            page,
            target,
        };
        // SAFETY: ioctls on our perf fd.
        let rc = unsafe {
            if once {
                libc::ioctl(fd, IOC_REFRESH, 1)
            } else {
                libc::ioctl(fd, IOC_ENABLE, 0)
            }
        };
        if rc != 0 {
            return Err(Error::ArmBreakpoint(std::io::Error::last_os_error()));
        }
        Ok(bp)
    }

    /// The descriptor, for poll.
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Re-arms a one-shot breakpoint.
    pub fn rearm(&self) -> Result<()> {
        // SAFETY: ioctl on our perf fd.
        if unsafe { libc::ioctl(self.fd, IOC_REFRESH, 1) } != 0 {
            return Err(Error::RearmBreakpoint(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Takes every sample the kernel has written since the last call.
    pub fn read_hits(&mut self) -> Vec<RawHit> {
        let mut out = Vec::new();
        let data_len = self.ring_len - self.page;
        // SAFETY: the first page is the perf_event_mmap_page; data_head is at 1024 and
        // data_tail at 1032, both u64, and the mapping lives as long as self.
        unsafe {
            let head_ptr = self.ring.add(1024) as *const u64;
            let tail_ptr = self.ring.add(1032) as *mut u64;
            let head = std::ptr::read_volatile(head_ptr);
            fence(Ordering::Acquire);
            let mut tail = std::ptr::read_volatile(tail_ptr);
            let data = self.ring.add(self.page);
            let byte = |off: u64| *data.add((off % data_len as u64) as usize);
            let read =
                |off: u64, n: usize| -> Vec<u8> { (0..n as u64).map(|i| byte(off + i)).collect() };
            while tail + 8 <= head {
                let h = read(tail, 8);
                let ty = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
                let size = u16::from_ne_bytes([h[6], h[7]]) as u64;
                if size < 8 {
                    break;
                }
                if ty == RECORD_SAMPLE {
                    let body = read(tail + 8, (size - 8) as usize);
                    if let Some(hit) = parse_sample(&body) {
                        out.push(hit);
                    }
                }
                tail += size;
            }
            fence(Ordering::Release);
            std::ptr::write_volatile(tail_ptr, tail);
        }
        out
    }
}

/// Parses a sample body laid out as IP, PID/TID, TIME, REGS_USER (abi, SI, DI).
fn parse_sample(b: &[u8]) -> Option<RawHit> {
    let u64_at =
        |i: usize| -> Option<u64> { Some(u64::from_ne_bytes(b.get(i..i + 8)?.try_into().ok()?)) };
    let u32_at =
        |i: usize| -> Option<u32> { Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?)) };
    let ip = u64_at(0)?;
    let pid = u32_at(8)?;
    let tid = u32_at(12)?;
    let time = u64_at(16)?;
    let abi = u64_at(24).unwrap_or(0);
    // Registers come in bit order: SI (4) then DI (5).
    let (si, di) = if abi != 0 {
        (u64_at(32).unwrap_or(0), u64_at(40).unwrap_or(0))
    } else {
        (0, 0)
    };
    Some(RawHit {
        time,
        pid,
        tid,
        ip,
        di,
        si,
    })
}

impl Drop for Breakpoint {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `open` created.
        unsafe {
            libc::munmap(self.ring.cast(), self.ring_len);
            libc::close(self.fd);
        }
    }
}

/// The offset to add to a `CLOCK_MONOTONIC` time to get perf clock time, measured with a
/// breakpoint on ourselves (the two clocks differ on x86: perf uses sched_clock).
pub fn monotonic_to_perf_offset() -> Option<i64> {
    #[inline(never)]
    #[no_mangle]
    extern "C" fn ptscope_clock_probe(x: u64) -> u64 {
        std::hint::black_box(x)
    }
    let addr = ptscope_clock_probe as *const () as usize as u64;
    let target = Target {
        address: addr,
        name: "probe".into(),
        is_stop_indicator: false,
    };
    let mut bp = Breakpoint::open(0, target, false).ok()?;
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..5 {
        let t0 = monotonic_ns();
        std::hint::black_box(ptscope_clock_probe(t0));
        let t1 = monotonic_ns();
        let hits = bp.read_hits();
        let h = hits.last()?;
        let mid = t0 / 2 + t1 / 2;
        let width = t1 - t0;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, h.time as i64 - mid as i64));
        }
    }
    best.map(|(_, off)| off)
}

/// `CLOCK_MONOTONIC` in ns (what the stop indicator's `ptscope_now()` returns).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        use TriggerSpec::*;
        let p = |s| TriggerSpec::parse(s).unwrap();
        assert_eq!(p("."), StopIndicator);
        assert_eq!(p("demo_function"), Symbol("demo_function".into()));
        assert_eq!(p("demo::inner::<T>"), Symbol("demo::inner::<T>".into()));
        assert_eq!(p("0x401000"), Address(0x401000));
        assert_eq!(p("addr:401000"), Address(0x401000));
        assert_eq!(p("symbol:main.c:3"), Symbol("main.c:3".into()));
        assert_eq!(
            p("demo.c:12"),
            Line {
                file: "demo.c".into(),
                line: 12,
                col: None
            }
        );
        assert_eq!(
            p("src/main.rs:12:5"),
            Line {
                file: "src/main.rs".into(),
                line: 12,
                col: Some(5)
            }
        );
        assert_eq!(
            p("line:a.c:7"),
            Line {
                file: "a.c".into(),
                line: 7,
                col: None
            }
        );
        assert!(TriggerSpec::parse("line:nope").is_err());
        assert!(TriggerSpec::parse("addr:zz").is_err());
        assert!(TriggerSpec::parse("").is_err());
    }

    #[test]
    fn parses_samples() {
        let mut b = Vec::new();
        b.extend_from_slice(&0x1234u64.to_ne_bytes());
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&8u32.to_ne_bytes());
        for v in [99u64, 2, 0xaa, 0xbb] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        let h = parse_sample(&b).unwrap();
        assert_eq!(
            (h.ip, h.pid, h.tid, h.time, h.si, h.di),
            (0x1234, 7, 8, 99, 0xaa, 0xbb)
        );
        assert!(parse_sample(&b[..10]).is_none());
    }
}

#[cfg(test)]
mod clock_tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    extern "C" fn ptscope_clock_test_probe(x: u64, y: u64) -> u64 {
        std::hint::black_box(x ^ y)
    }

    /// The measured offset maps CLOCK_MONOTONIC onto the breakpoints' perf clock: a hit
    /// taken between two CLOCK_MONOTONIC readings lands between them once shifted, and
    /// carries the probe's address and arguments (what stop-indicator hits pass on).
    #[test]
    fn perf_clock_offset_maps_monotonic_time_onto_breakpoint_hits() {
        let Some(offset) = monotonic_to_perf_offset() else {
            // Needs perf_event_open on ourselves (root or a permissive perf_event_paranoid).
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot open a breakpoint on ourselves under CI"
            );
            eprintln!("!!!!!!!! SKIPPED: cannot open a breakpoint on ourselves");
            return;
        };
        eprintln!("perf clock - CLOCK_MONOTONIC = {offset} ns");
        let address = ptscope_clock_test_probe as *const () as usize as u64;
        let target = Target {
            address,
            name: "test probe".into(),
            is_stop_indicator: false,
        };
        let mut bp = Breakpoint::open(0, target, false).expect("breakpoint on ourselves");
        // The offset is only as exact as its narrowest bracket (microseconds); a generous
        // margin keeps a loaded machine from failing this.
        const SLACK_NS: i64 = 2_000_000;
        for i in 0..5u64 {
            let t0 = monotonic_ns();
            std::hint::black_box(ptscope_clock_test_probe(t0, i));
            let t1 = monotonic_ns();
            let hits = bp.read_hits();
            assert_eq!(hits.len(), 1, "call {i}: {hits:?}");
            let h = hits[0];
            assert_eq!(h.ip, address, "call {i}: {h:?}");
            assert_eq!((h.di, h.si), (t0, i), "call {i}: {h:?}");
            assert_eq!(h.pid, std::process::id(), "call {i}: {h:?}");
            let at = h.time as i64 - offset;
            assert!(
                t0 as i64 - SLACK_NS <= at && at <= t1 as i64 + SLACK_NS,
                "call {i}: hit at {at} (monotonic), called between {t0} and {t1}"
            );
        }
    }
}
