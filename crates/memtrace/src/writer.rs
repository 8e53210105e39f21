//! Version-3 trace writer, byte-compatible with the reference writer, with any
//! number of domains multiplexed onto one output.

use std::io::Write;

use crate::backtrace::{WriterCache, BT_MAX_LENGTH};
use crate::buf;
use crate::error::{Error, ErrorKind, Result};
use crate::format::{
    self, CacheVerifier, TraceInfo, EV_ALLOC, EV_COLLECT, EV_LOCATION, EV_PROMOTE,
    EV_SHORT_ALLOC_BASE, IDS_PER_CHUNK, MAX_PACKET_SIZE, PACKET_MAX_TIME,
};
use crate::location::{LocWriterState, OwnedLocation, LOC_MAX_LENGTH};
use crate::reader::{AllocSource, Event, EventKind};

/// Flush before an event when less than this much room is left in the packet.
const MAX_EV_SIZE: usize = 100
    + if LOC_MAX_LENGTH > BT_MAX_LENGTH {
        LOC_MAX_LENGTH
    } else {
        BT_MAX_LENGTH
    };

struct DomainWriter {
    domain: u16,
    locs: LocWriterState,
    cache: WriterCache,
    new_locs: Vec<(u64, Vec<OwnedLocation>)>,
    last_bt: Vec<u64>,
    start_id: u64,
    next_id: u64,
    last_id: u64,
    time_start: i64,
    time_end: i64,
    packet: Vec<u8>,
    loc_packet: Vec<u8>,
}

impl DomainWriter {
    fn new(domain: u16, pid: u64, start_time: i64, next_chunk: &mut u64) -> Self {
        let mut w = DomainWriter {
            domain,
            locs: LocWriterState::default(),
            cache: WriterCache::new(),
            new_locs: Vec::new(),
            last_bt: Vec::new(),
            start_id: 0,
            next_id: 0,
            last_id: 0,
            time_start: start_time,
            time_end: start_time,
            packet: Vec::with_capacity(MAX_PACKET_SIZE),
            loc_packet: Vec::new(),
        };
        w.new_id_packet(next_chunk);
        format::put_header(&mut w.packet, pid, domain, CacheVerifier::DUMMY);
        w
    }

    fn new_id_packet(&mut self, next_chunk: &mut u64) {
        if self.next_id >= self.last_id {
            self.next_id = *next_chunk;
            *next_chunk += IDS_PER_CHUNK;
            self.last_id = self.next_id + IDS_PER_CHUNK;
        }
        self.start_id = self.next_id;
    }
}

/// Writes a trace. Events of several domains may be interleaved: switching domain
/// flushes the previous domain's packet, as the reference multiplexing writer does.
pub struct Writer<W: Write> {
    out: W,
    pid: u64,
    getpid: Option<Box<dyn FnMut() -> u64 + Send>>,
    start_time: i64,
    next_chunk: u64,
    domains: Vec<DomainWriter>,
    last: usize,
    stopped: bool,
    scratch_bt: Vec<u64>,
}

impl<W: Write> Writer<W> {
    /// Writes the trace-info packet and prepares the initial domain.
    pub fn new(mut out: W, info: &TraceInfo) -> Result<Self> {
        let mut p = Vec::with_capacity(256);
        format::put_header(&mut p, info.pid, info.initial_domain, CacheVerifier::DUMMY);
        format::put_trace_info(&mut p, info);
        format::finish_header(&mut p, info.start_time, info.start_time, 0, 0);
        out.write_all(&p)?;
        let mut next_chunk = 0;
        let first = DomainWriter::new(
            info.initial_domain,
            info.pid,
            info.start_time,
            &mut next_chunk,
        );
        Ok(Writer {
            out,
            pid: info.pid,
            getpid: None,
            start_time: info.start_time,
            next_chunk,
            domains: vec![first],
            last: 0,
            stopped: false,
            scratch_bt: Vec::new(),
        })
    }

    /// Checks the process id before every flush: a forked child then stops writing
    /// (with [`ErrorKind::PidChanged`]) instead of interleaving with its parent.
    pub fn with_pid_check(mut self, getpid: impl FnMut() -> u64 + Send + 'static) -> Self {
        self.getpid = Some(Box::new(getpid));
        self
    }

    /// The trace start time (µs since the epoch).
    pub fn start_time(&self) -> i64 {
        self.start_time
    }

    /// The id the next allocation of `domain` will get if nothing is flushed first.
    fn writer_for(&mut self, domain: u16) -> Result<usize> {
        if self.stopped {
            return Err(Error::Writer(ErrorKind::PidChanged));
        }
        if self.domains[self.last].domain == domain {
            return Ok(self.last);
        }
        let last = self.last;
        let now = self.domains[last].time_end;
        self.flush_domain(last, now)?;
        let i = match self.domains.iter().position(|d| d.domain == domain) {
            Some(i) => i,
            None => {
                let d = DomainWriter::new(domain, self.pid, self.start_time, &mut self.next_chunk);
                self.domains.push(d);
                self.domains.len() - 1
            }
        };
        self.last = i;
        Ok(i)
    }

    fn flush_domain(&mut self, i: usize, now: i64) -> Result<()> {
        if let Some(getpid) = self.getpid.as_mut() {
            if getpid() != self.pid {
                self.stopped = true;
                return Err(Error::Writer(ErrorKind::PidChanged));
            }
        }
        let pid = self.pid;
        let d = &mut self.domains[i];
        let mut k = 0;
        while k < d.new_locs.len() {
            let b = &mut d.loc_packet;
            b.clear();
            format::put_header(b, pid, d.domain, CacheVerifier::DUMMY);
            while k < d.new_locs.len() && MAX_PACKET_SIZE.saturating_sub(b.len()) > LOC_MAX_LENGTH {
                format::put_event_header(b, EV_LOCATION, d.time_start);
                let (code, locs) = &d.new_locs[k];
                d.locs.put(b, *code, locs);
                k += 1;
            }
            format::finish_header(b, d.time_start, d.time_start, d.start_id, d.start_id);
            self.out.write_all(b)?;
        }
        format::finish_header(
            &mut d.packet,
            d.time_start,
            d.time_end,
            d.start_id,
            d.next_id,
        );
        self.out.write_all(&d.packet)?;
        d.time_start = now;
        d.time_end = now;
        d.new_locs.clear();
        d.packet.clear();
        d.new_id_packet(&mut self.next_chunk);
        let v = d.cache.verifier();
        format::put_header(&mut d.packet, pid, d.domain, v);
        Ok(())
    }

    fn begin_event(&mut self, i: usize, code: u32, now: i64) -> Result<()> {
        let d = &self.domains[i];
        if MAX_PACKET_SIZE.saturating_sub(d.packet.len()) < MAX_EV_SIZE
            || d.new_locs.len() > 128
            || now.wrapping_sub(d.time_start) > PACKET_MAX_TIME
            || d.next_id >= d.last_id
        {
            self.flush_domain(i, now)?;
        }
        let d = &mut self.domains[i];
        d.time_end = now;
        format::put_event_header(&mut d.packet, code, now);
        Ok(())
    }

    fn check_time(&self, i: usize, now: i64) -> Result<()> {
        if now < self.domains[i].time_end {
            return Err(Error::Writer(ErrorKind::OutOfOrderTimestamp));
        }
        Ok(())
    }

    /// Writes an allocation at `now` (µs since the epoch). `backtrace` lists location
    /// codes outermost caller first; `locations` is asked for the locations of codes
    /// not in the writer's cache. Returns the allocation's object id.
    #[allow(clippy::too_many_arguments)]
    pub fn put_alloc(
        &mut self,
        now: i64,
        domain: u16,
        length: i64,
        nsamples: i64,
        source: AllocSource,
        backtrace: &[u64],
        locations: &mut dyn FnMut(u64) -> Vec<OwnedLocation>,
    ) -> Result<u64> {
        let i = self.writer_for(domain)?;
        self.check_time(i, now)?;
        let d = &mut self.domains[i];
        let common = d
            .last_bt
            .iter()
            .zip(backtrace)
            .take_while(|(a, b)| a == b)
            .count();
        let new_len = backtrace.len() - common;
        d.last_bt.clear();
        d.last_bt.extend_from_slice(backtrace);
        let short = (1..=16).contains(&length)
            && source == AllocSource::Minor
            && nsamples == 1
            && new_len < 256;
        let code = if short {
            EV_SHORT_ALLOC_BASE + length as u32
        } else {
            EV_ALLOC
        };
        self.begin_event(i, code, now)?;
        let d = &mut self.domains[i];
        let id = d.next_id;
        d.next_id += 1;
        let b = &mut d.packet;
        let count_at = if short {
            buf::put_vint(b, common as i64);
            buf::put_u8(b, 0);
            b.len() - 1
        } else {
            buf::put_vint(b, length);
            buf::put_vint(b, nsamples);
            buf::put_u8(
                b,
                match source {
                    AllocSource::Minor => 0,
                    AllocSource::Major => 1,
                    AllocSource::External => 2,
                },
            );
            buf::put_vint(b, common as i64);
            buf::put_u16(b, 0);
            b.len() - 2
        };
        let new_locs = &mut d.new_locs;
        let nencoded = d.cache.encode(b, id, backtrace, common, &mut |k| {
            let code = backtrace[k];
            new_locs.push((code, locations(code)));
        });
        if short {
            b[count_at] = nencoded as u8;
        } else {
            buf::patch_u16(b, count_at, nencoded as u16);
        }
        Ok(id)
    }

    fn put_id_event(&mut self, now: i64, domain: u16, code: u32, obj_id: u64) -> Result<()> {
        let i = self.writer_for(domain)?;
        self.check_time(i, now)?;
        self.begin_event(i, code, now)?;
        let d = &mut self.domains[i];
        let delta = d.next_id.wrapping_sub(1).wrapping_sub(obj_id) as i64;
        buf::put_vint(&mut d.packet, delta);
        Ok(())
    }

    /// Writes that `obj_id` was promoted to the major heap.
    pub fn put_promote(&mut self, now: i64, domain: u16, obj_id: u64) -> Result<()> {
        self.put_id_event(now, domain, EV_PROMOTE, obj_id)
    }

    /// Writes that `obj_id` was freed.
    pub fn put_collect(&mut self, now: i64, domain: u16, obj_id: u64) -> Result<()> {
        self.put_id_event(now, domain, EV_COLLECT, obj_id)
    }

    /// Re-encodes a decoded event at its original time, checking that allocation
    /// ids come out the same. Locations come from the event's own tables.
    pub fn put_event(&mut self, event: &Event<'_>) -> Result<()> {
        let now = self.start_time.wrapping_add(event.time);
        match event.kind {
            EventKind::Alloc(a) => {
                let db = event.db;
                let id = self.put_alloc(
                    now,
                    a.domain,
                    a.length,
                    a.nsamples,
                    a.source,
                    a.backtrace,
                    &mut |code| db.owned_locations(code),
                )?;
                if id != a.obj_id {
                    return Err(Error::Writer(ErrorKind::IncorrectAllocId {
                        given: a.obj_id,
                        assigned: id,
                    }));
                }
                Ok(())
            }
            EventKind::Promote { obj_id, domain } => self.put_promote(now, domain, obj_id),
            EventKind::Collect { obj_id, domain } => self.put_collect(now, domain, obj_id),
        }
    }

    /// Same as [`Writer::put_alloc`] with the backtrace innermost frame first (the
    /// order stack walkers produce).
    #[allow(clippy::too_many_arguments)]
    pub fn put_alloc_innermost_first(
        &mut self,
        now: i64,
        domain: u16,
        length: i64,
        nsamples: i64,
        source: AllocSource,
        callstack: &[u64],
        locations: &mut dyn FnMut(u64) -> Vec<OwnedLocation>,
    ) -> Result<u64> {
        let mut bt = std::mem::take(&mut self.scratch_bt);
        bt.clear();
        bt.extend(callstack.iter().rev());
        let r = self.put_alloc(now, domain, length, nsamples, source, &bt, locations);
        self.scratch_bt = bt;
        r
    }

    /// Writes out the current domain's pending packet (other domains are already
    /// flushed) and flushes the output.
    pub fn flush(&mut self) -> Result<()> {
        if self.stopped {
            return Err(Error::Writer(ErrorKind::PidChanged));
        }
        let last = self.last;
        let now = self.domains[last].time_end;
        self.flush_domain(last, now)?;
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> Result<W> {
        self.flush()?;
        Ok(self.out)
    }

    /// The output, without flushing.
    pub fn get_ref(&self) -> &W {
        &self.out
    }
}
