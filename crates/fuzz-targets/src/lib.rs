//! The bodies of ptscope's fuzz targets, one function per target, shared by the
//! cargo-fuzz binaries in `fuzz/` (nightly) and by this crate's corpus replay test,
//! which runs every committed seed input (`fuzz/corpus/TARGET`) on stable, so CI covers
//! what fuzzing found. See docs/fuzzing.md.
//!
//! ```
//! ptscope_fuzz_targets::fxt_reader(b"not an fxt file");
//! ```

use memtrace::{tools, Reader};
use ptscope_decode::Decoder;
use ptscope_dlfilter_reader::RecordReader;
use ptscope_fxt::{check, reader::Reader as FxtReader};
use ptscope_symbols::{Elf, PerfMap, ProcMaps};
use std::io::BufReader;
use std::path::Path;

/// A fuzz target's body: any bytes; panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name of its `fuzz/fuzz_targets/NAME.rs` and corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("perf_script_parser", perf_script_parser),
    ("fxt_reader", fxt_reader),
    ("memtrace_reader", memtrace_reader),
    ("dlfilter_records", dlfilter_records),
    ("elf_symbols", elf_symbols),
    ("perf_map", perf_map),
    ("perf_data_reader", perf_data_reader),
    ("pt_decoder", pt_decoder),
    ("block_log", block_log),
];

/// Fuzzes the `perf script` text decoder: any bytes, any read-buffer size.
pub fn perf_script_parser(data: &[u8]) {
    // The first byte picks the read-buffer size so lines straddling buffers are hit.
    let (cap, input) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c) + 1, rest),
        None => (1, data),
    };
    let mut decoder = Decoder::new(BufReader::with_capacity(cap, input));
    let mut events = 0u64;
    while let Ok(Some(_)) = decoder.next_event() {
        events += 1;
    }
    let stats = decoder.stats();
    assert_eq!(stats.bytes, input.len() as u64);
    assert_eq!(stats.events, events);
    assert!(stats.warnings <= stats.lines);
}

/// Fuzzes the FXT reader and the checker built on it: neither may panic or hang.
pub fn fxt_reader(data: &[u8]) {
    let mut records = 0usize;
    for r in FxtReader::new(data) {
        records += 1;
        if r.is_err() {
            break;
        }
    }
    // Every record is at least one word, so the count is bounded by the input.
    assert!(records <= data.len() / 8 + 1);
    let _ = check::validate_bytes(data);
    // The streaming reader reads the same records, and `ptscope report` summarises
    // whatever it reads without panicking.
    let mut stream = ptscope_fxt::stream::StreamReader::new(data);
    let mut streamed = 0usize;
    while let Some(r) = stream.next_record() {
        streamed += 1;
        if r.is_err() {
            break;
        }
    }
    assert_eq!(streamed, records);
    let opts = ptscope_report::Options {
        function: Some("main".into()),
        slowest: 3,
    };
    let a = ptscope_report::analyze(data, &opts);
    let all: Vec<usize> = (0..a.threads.len()).collect();
    let _ = ptscope_report::text::render(&a, "fuzz", &all, &Default::default());
    let _ = ptscope_report::flame::folded(&a, &all, true);
}

/// Fuzzes the memtrace reader (with and without backtraces) and the tools built on
/// it: any input must give events, a typed error or a note — never a panic. When the
/// input decodes completely, re-encoding its events must not fail either.
pub fn memtrace_reader(data: &[u8]) {
    if let Ok(r) = Reader::from_bytes(data) {
        let mut r = r.parse_backtraces(false);
        while let Ok(Some(_)) = r.next_event() {}
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::dump(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::flamegraph(&mut r, &mut std::io::sink());
    }
    if let Ok(r) = Reader::from_bytes(data) {
        let _ = tools::identify(r, "fuzz", &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::hotspots(&mut r, &mut std::io::sink());
    }
    if let Ok(mut r) = Reader::from_bytes(data) {
        let _ = tools::subsample(&mut r, std::io::sink(), &Default::default());
    }
}

/// Fuzzes the reader of the dlfilter's byte stream (binary records mixed with perf's
/// own text): any bytes must give events, then at most one typed error — never a
/// panic, a hang or an allocation sized by a length field.
pub fn dlfilter_records(data: &[u8]) {
    // The first byte picks the read-buffer size, so records both lie wholly in the
    // buffer (converted in place) and straddle it (copied out), and its top bit
    // whether the reader first waits for the hello record (as `DlfilterScript` does).
    // The buffer size also sets how much perf text is flushed at once (1 B to 4 KiB
    // instead of 1 MiB), so short inputs reach the flush between lines: the place the
    // reader once panicked on every stream with more than 1 MiB of text.
    let (cap, wait, input) = match data.split_first() {
        Some((&c, rest)) => (usize::from(c & 0x7f) + 1, c & 0x80 != 0, rest),
        None => (1, false, data),
    };
    let chunk = (cap * cap) % 4096 + 1;
    let mut r = RecordReader::new(BufReader::with_capacity(cap, input)).with_text_chunk(chunk);
    let mut errors = u32::from(wait && r.wait_for_hello().is_err());
    let mut events = 0u64;
    loop {
        match r.next_event() {
            Ok(Some(_)) => events += 1,
            Ok(None) => break,
            Err(_) => errors += 1,
        }
        // An error is returned once (by `wait_for_hello` or here), and the events
        // decoded before it still come out.
        assert!(errors <= 1);
    }
    assert!(r.is_finished());
    assert_eq!(r.stats().events, events);
    // Every event needs at least a few bytes of input (a record header or a line).
    assert!(events <= input.len() as u64);
    let _ = r.take_strings();
}

/// Fuzzes what `ptscope decode --executable` reads from an ELF file: load segments,
/// the symbol table, `.note.ocaml_eh` and the DWARF line table. Any bytes must give
/// a typed error or results — never a panic.
pub fn elf_symbols(data: &[u8]) {
    let Ok(elf) = Elf::parse(data, Path::new("fuzzed.elf")) else {
        return;
    };
    let segments = elf.load_segments();
    for s in &segments {
        let _ = elf.segment_of(s.vaddr);
    }
    let _ = elf.is_position_independent();
    let _ = elf.debuglink();
    let _ = elf.build_id();
    if let Ok(traps) = elf.ocaml_traps() {
        let _ = traps.rebased(0x5555_0000_0000).to_exception_info();
    }
    if let Ok(syms) = elf.symbols() {
        for f in syms.functions().iter().take(64) {
            let _ = (f.demangled(), f.short_name());
            let _ = syms.containing(f.address());
            let _ = syms.lookup(f.name());
        }
        let _ = syms.suggest("mian", 3);
    }
    if let Ok(lines) = elf.line_table() {
        for (file, line) in lines.source_lines().into_iter().take(16) {
            if let Ok(addrs) = lines.addresses_for_line(file, line, None) {
                for a in addrs.iter().take(4) {
                    let _ = lines.position(a.address);
                }
            }
        }
        let _ = lines.position(0x1000);
    }
}

/// Fuzzes the JIT perf map parser (`/tmp/perf-PID.map`) against a plain model of its
/// lookup rule, and the `/proc/PID/maps` parser: no panic, and every lookup answers
/// what a linear scan of the file would (the entry written last among those holding
/// the address, since JITs reuse freed code memory).
pub fn perf_map(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let map = PerfMap::parse(&text);
    // The model: each line parsed alone, in file order.
    let mut in_file_order = Vec::new();
    let mut malformed = 0;
    for line in text.lines() {
        let one = PerfMap::parse(line);
        malformed += one.malformed_lines();
        in_file_order.extend(one.entries().iter().cloned());
    }
    assert_eq!(map.malformed_lines(), malformed);
    assert_eq!(map.entries().len(), in_file_order.len());
    assert!(map.entries().windows(2).all(|w| w[0].start <= w[1].start));
    // Probe every start and end and the addresses around them.
    let mut probes = vec![0, u64::MAX];
    for e in in_file_order.iter().take(64) {
        for a in [e.start, e.end()] {
            probes.extend([a.wrapping_sub(1), a, a.wrapping_add(1)]);
        }
    }
    for addr in probes {
        let want = in_file_order.iter().rev().find(|e| e.contains(addr));
        assert_eq!(map.lookup(addr), want, "lookup({addr:#x})");
    }
    let _ = ProcMaps::parse(&text, Path::new("fuzzed-maps")).map(|m| m.files().len());
}

/// Fuzzes the perf.data reader (`ptscope-perf-data`): any bytes give a typed error or
/// records then at most one error — never a panic, a hang or an allocation sized by a
/// field — and every record lies inside the file, after the one before it.
pub fn perf_data_reader(data: &[u8]) {
    use ptscope_perf_data::{intel_pt::IntelPtInfo, PerfData, Record};
    let len = data.len() as u64;
    let Ok(file) = PerfData::from_bytes(data.to_vec(), "fuzzed.perf.data") else {
        return;
    };
    let big = file.endian() == ptscope_perf_data::Endian::Big;
    let mut last = None;
    let mut errors = 0;
    for r in file.records() {
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                assert!(e.offset < len);
                errors += 1;
                continue;
            }
        };
        assert_eq!(errors, 0, "a record after an error");
        assert!(r.offset + 8 <= len);
        assert!(last.is_none_or(|l| l < r.offset), "records go forward");
        last = Some(r.offset);
        match r.record {
            Record::Auxtrace(a) => {
                let start = a.data.as_ptr() as usize - file.bytes().as_ptr() as usize;
                assert!(start as u64 + a.data.len() as u64 <= len);
            }
            Record::AuxtraceInfo(info) => {
                if let Some(pt) = IntelPtInfo::parse(&info, big) {
                    for a in file.attributes() {
                        let _ = pt.trace_config(a.config);
                    }
                    let _ = pt.time.tsc_to_ns(u64::MAX);
                }
            }
            _ => {}
        }
    }
    assert!(errors <= 1);
    let maps = file.mappings();
    let _ = (maps.len(), maps.lost(), maps.frame_pointer_stacks());
    let _ = (file.build_ids(), file.pmu_mappings());
    // The flight recorder's side band: taken from the file and written into it again,
    // the result is a perf.data whose records are the side band's, then the file's own.
    let mut sideband = ptscope_perf_data::Sideband::default();
    sideband.take(&file);
    let mut out = Vec::new();
    if file.write_with_sideband(&sideband, &mut out).is_ok() {
        let whole = PerfData::from_bytes(out, "whole.perf.data").expect("a rewritten file reads");
        let own = file.records().count();
        assert!(whole.records().count() >= own);
    }
}

/// A program for [`pt_decoder`] to walk: every kind of branch the walker knows, at
/// `0x40_1000`; the fuzzed bytes themselves are code at `0x50_0000`.
struct FuzzCode<'a> {
    program: &'static [u8],
    fuzzed: &'a [u8],
}

/// `call +5; jle +2; jmp +0; call rax; jmp rbx; ret; syscall; int3; ud2; rep movsb;
/// mov [r14+0x10], rsp; pop [r14+0x10]; mov rsp, [r14+0x10]; ptwrite eax; jmp -0x23`.
const FUZZ_PROGRAM: &[u8] = &[
    0xe8, 0x05, 0, 0, 0, 0x7e, 0x02, 0xeb, 0x00, 0xff, 0xd0, 0xff, 0xe3, 0xc3, 0x0f, 0x05, 0xcc,
    0x0f, 0x0b, 0xf3, 0xa4, 0x49, 0x89, 0x66, 0x10, 0x41, 0x8f, 0x46, 0x10, 0x49, 0x8b, 0x66, 0x10,
    0xf3, 0x0f, 0xae, 0xe0, 0xeb, 0xdb,
];

impl ptscope_intel_pt::decoder::Memory for FuzzCode<'_> {
    fn code(&self, _space: u32, ip: u64) -> Option<&[u8]> {
        if let Some(off) = ip.checked_sub(0x40_1000) {
            if let Some(b) = self.program.get(usize::try_from(off).ok()?..) {
                return Some(b);
            }
        }
        let off = usize::try_from(ip.checked_sub(0x50_0000)?).ok()?;
        self.fuzzed.get(off..)
    }
}

/// Fuzzes the Intel PT decoder: the bytes are a trace (packets one after another, and
/// the whole walk over a program of every branch kind, and over the bytes as code),
/// whole and cut at its PSBs. Never a panic, a hang or an endless walk; events only
/// from what the trace holds.
pub fn pt_decoder(data: &[u8]) {
    use ptscope_intel_pt::cache::BlockCache;
    use ptscope_intel_pt::decoder::Config;
    use ptscope_intel_pt::insn::FactOptions;
    use ptscope_intel_pt::packet::Packets;
    // The first byte picks the settings.
    let (flags, trace) = match data.split_first() {
        Some((&f, rest)) => (f, rest),
        None => (0, data),
    };
    let mut last = None;
    for p in Packets::new(trace) {
        let Ok((at, _)) = p else { break };
        assert!(last.is_none_or(|l| l < at));
        last = Some(at);
    }
    let cfg = Config {
        return_compression: flags & 1 == 0,
        cyc: flags & 2 != 0,
        skip_bad_bytes: flags & 4 == 0,
        blocks: flags & 8 != 0,
        max_direct_blocks: 256,
        ..Config::default()
    };
    let mem = FuzzCode {
        program: FUZZ_PROGRAM,
        fuzzed: trace,
    };
    let mut cache = BlockCache::new(FactOptions {
        ocaml_traps: flags & 16 != 0,
    });
    let mut whole = Vec::new();
    ptscope_intel_pt::decode_chunk(trace, 0..trace.len(), cfg, &mem, &mut cache, 0, &mut whole);
    let mut chunked = Vec::new();
    for r in ptscope_intel_pt::chunks(trace, 64) {
        assert!(r.start < r.end && r.end <= trace.len());
        ptscope_intel_pt::decode_chunk(trace, r, cfg, &mem, &mut cache, 0, &mut chunked);
    }
    // Walking is bounded by the trace: each packet lets the walk take at most so many
    // blocks, so events stay proportional to the input.
    let bound = (trace.len() as u64 + 1) * (u64::from(cfg.max_direct_blocks) + 64) * 4;
    assert!((whole.len() as u64) < bound && (chunked.len() as u64) < bound);
}
/// A sink that only counts what it is given.
#[derive(Default)]
struct Counting(u64);

impl ptscope_stacks::TraceSink for Counting {
    type Thread = u32;
    fn allocate_pid(&mut self, _: &str) -> u32 {
        0
    }
    fn allocate_thread(&mut self, _: u32, _: &str) -> u32 {
        0
    }
    fn duration_begin(&mut self, _: u32, _: &str, _: i64, _: &[ptscope_stacks::Arg<'_>]) {
        self.0 += 1;
    }
    fn duration_end(&mut self, _: u32, _: &str, _: i64, _: &[ptscope_stacks::Arg<'_>]) {
        self.0 += 1;
    }
    fn duration_complete(
        &mut self,
        _: u32,
        _: &str,
        _: i64,
        _: i64,
        _: &[ptscope_stacks::Arg<'_>],
    ) {
    }
    fn duration_instant(&mut self, _: u32, _: &str, _: i64, _: &[ptscope_stacks::Arg<'_>]) {}
    fn counter(&mut self, _: u32, _: &str, _: i64, _: &[ptscope_stacks::Arg<'_>]) {}
    fn warning(&mut self, _: &str) {}
}

/// Fuzzes the emulate block log: ptsim's whole-log parser, the index, and ptscope's
/// decode of every snapshot's threads into stacks on each clock. Nothing may panic,
/// allocate what the input does not hold, or run without end (a thread's steps are
/// bounded by its words).
pub fn block_log(data: &[u8]) {
    use ptscope_emulate::{ClockKind, Decoding, TimeBase, View};
    let _ = ptscope_blocklog::BlockLog::parse(data);
    let _ = ptscope_blocklog::BlockLog::parse_compact(data);
    let Ok(view) = View::from_logs(&[(None, Path::new("fuzz.log"), data)]) else {
        return;
    };
    let snapshots = view.snapshots().len();
    assert!(snapshots >= 1);
    for s in 0..snapshots.min(4) {
        for d in [
            Decoding::new(&view, s, ClockKind::Host, "fuzz"),
            Decoding::new(&view, s, ClockKind::Virtual, "fuzz"),
            Decoding::with_time_base(&view, s, TimeBase::Instructions, "fuzz"),
        ] {
            for i in 0..d.threads().len() {
                let mut walker = d.walker(i);
                let mut stack = if d.threads()[i].mid_run {
                    ptscope_stacks::exact::ExactStack::mid_run(false)
                } else {
                    ptscope_stacks::exact::ExactStack::new()
                };
                let mut sink = Counting::default();
                let mut buf = Vec::new();
                let mut last = 0;
                while walker.fill(&mut buf) {
                    for st in &buf {
                        // A thread's steps never go back in time.
                        assert!(st.time >= last || d.time_base() == TimeBase::Host);
                        last = last.max(st.time);
                        stack.step(&mut sink, 0, st, walker.functions());
                    }
                    buf.clear();
                }
                let end = stack.last_time();
                stack.close(&mut sink, 0, end, walker.functions());
            }
        }
    }
}
