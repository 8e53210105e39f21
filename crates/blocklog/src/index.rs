//! An index of a log for streaming readers: where each block is described and where each
//! thread's exec chunks are, without copying any execution.

use crate::format::*;
use crate::read::*;

/// The most blocks one log may describe (ids are `u32` words below `FIRST_RESERVED`).
pub const MAX_BLOCKS: usize = MAX_BLOCK_ID as usize;

/// One thread's exec chunks, in log order.
#[derive(Clone, Debug, Default)]
pub struct ThreadChunks {
    /// The thread.
    pub tid: u32,
    /// `(payload offset, payload length)` of each of its `KIND_EXEC` chunks.
    pub chunks: Vec<(usize, usize)>,
}

/// A ring slot copied at a hit: its head, thread and exec stream's place.
#[derive(Copy, Clone, Debug)]
pub struct RingCopyAt {
    /// The copy's head.
    pub head: RingCopyHead,
    /// The thread whose ring it is.
    pub tid: u32,
    /// `(offset, length)` of its exec stream in the log.
    pub stream: (usize, usize),
}

/// Everything in a log but the executions, which stay in place.
#[derive(Debug)]
pub struct LogIndex<'a> {
    data: &'a [u8],
    /// The header.
    pub header: Header,
    /// Ids below this are described in the parent's log (a forked child's), 0 otherwise.
    pub base: u32,
    /// Offset of each own block's record, by `id - base`; `usize::MAX` if not described.
    tbs: Vec<usize>,
    /// Blocks that start at a signal handler.
    pub handler_entries: Vec<u32>,
    /// Threads in order of first appearance.
    pub threads: Vec<ThreadChunks>,
    /// Address-space snapshots: `(clock, entries)`, in log order.
    pub maps: Vec<(u64, Vec<MapEntry>)>,
    /// Trigger hits in log order.
    pub hits: Vec<Hit>,
    /// Ring slots copied at hits.
    pub ring_copies: Vec<RingCopyAt>,
    /// Set in a forked child's log.
    pub fork: Option<ForkInfo>,
    /// `execve`/`execveat` calls.
    pub exec_calls: Vec<ExecCall>,
    /// Threads' names.
    pub comms: Vec<Comm>,
    /// Threads whose flight recorder dropped their oldest executions.
    pub wrapped: Vec<u32>,
    /// Where the log stops being readable, if it does: the index holds what came before.
    pub damage: Option<LogError>,
}

impl<'a> LogIndex<'a> {
    /// Indexes `data`. Fails only when nothing is usable (no header); damage after the
    /// header ends the index there and is kept in [`LogIndex::damage`].
    pub fn new(data: &'a [u8]) -> Result<Self, LogError> {
        Self::new_with(data, |_| {})
    }

    /// [`LogIndex::new`], handing each exec stream's bytes (a `KIND_EXEC` payload, a ring
    /// copy's stream) to `indexed` once indexed: a reader of a mapped log can give their
    /// pages back until it reads them (indexing reads their headers only, but the kernel
    /// may map a whole large folio around each).
    pub fn new_with(data: &'a [u8], mut indexed: impl FnMut(&'a [u8])) -> Result<Self, LogError> {
        let mut chunks = Chunks::new(data);
        let header = match chunks.next() {
            Some(Ok(c)) if c.kind == KIND_HEADER => Header::parse(c.payload, c.offset)?,
            Some(Err(e)) => return Err(e),
            _ => {
                return Err(LogError::malformed(
                    0,
                    "no header chunk first (not a ptscope block log?)",
                ))
            }
        };
        let mut ix = LogIndex {
            data,
            header,
            base: 0,
            tbs: Vec::new(),
            handler_entries: Vec::new(),
            threads: Vec::new(),
            maps: Vec::new(),
            hits: Vec::new(),
            ring_copies: Vec::new(),
            fork: None,
            exec_calls: Vec::new(),
            comms: Vec::new(),
            wrapped: Vec::new(),
            damage: None,
        };
        // One record takes at least MIN_TB_RECORD - 1 bytes (version 2 had no flags).
        let own_limit = data.len() / (MIN_TB_RECORD - 1) + 1;
        let mut thread_of: rustc_hash_lite::Map = Default::default();
        for c in chunks {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    ix.damage = Some(e);
                    break;
                }
            };
            if let Err(e) = ix.take(&c, own_limit, &mut thread_of) {
                ix.damage = Some(e);
                break;
            }
            if c.kind == KIND_EXEC || c.kind == KIND_RING_COPY {
                indexed(c.payload);
            }
        }
        Ok(ix)
    }

    fn take(
        &mut self,
        c: &Chunk<'a>,
        own_limit: usize,
        thread_of: &mut rustc_hash_lite::Map,
    ) -> Result<(), LogError> {
        match c.kind {
            KIND_HEADER => return Err(LogError::malformed(c.offset, "a second header")),
            KIND_TBS => {
                let mut records =
                    TbRecords::new(c.payload, c.payload_offset(), self.header.version);
                loop {
                    let at = records.offset();
                    let Some(r) = records.next() else { break };
                    let r = r?;
                    let Some(i) =
                        r.id.checked_sub(self.base)
                            .map(|i| i as usize)
                            .filter(|&i| i < own_limit)
                    else {
                        return Err(LogError::malformed(
                            at,
                            format!(
                                "block id {} is outside what this log can describe ({}..{})",
                                r.id,
                                self.base,
                                self.base as usize + own_limit
                            ),
                        ));
                    };
                    if self.tbs.len() <= i {
                        self.tbs.resize(i + 1, usize::MAX);
                    }
                    self.tbs[i] = at;
                    if r.flags & TB_HANDLER_ENTRY != 0 {
                        self.handler_entries.push(r.id);
                    }
                }
            }
            KIND_EXEC => {
                let i = thread_of.index(c.tid, &mut self.threads);
                self.threads[i]
                    .chunks
                    .push((c.payload_offset(), c.payload.len()));
            }
            KIND_MAPS => {
                let (clock, text) = maps_chunk(c)?;
                self.maps.push((clock, parse_maps(&text)));
            }
            KIND_EXEC_CALL => self.exec_calls.push(ExecCall::parse(c)?),
            KIND_HIT => self.hits.push(Hit::parse(c)?),
            KIND_RING_COPY => {
                let head = RingCopyHead::parse(c)?;
                self.ring_copies.push(RingCopyAt {
                    head,
                    tid: c.tid,
                    stream: (
                        c.payload_offset() + RING_COPY_HEAD,
                        c.payload.len() - RING_COPY_HEAD,
                    ),
                });
            }
            KIND_FORK => {
                let f = ForkInfo::parse(c)?;
                if self.fork.is_some() || !self.tbs.is_empty() {
                    return Err(LogError::malformed(c.offset, "a fork chunk after blocks"));
                }
                self.base = f.inherited.min(MAX_BLOCK_ID);
                self.fork = Some(f);
            }
            KIND_COMM => self.comms.push(Comm::parse(c)?),
            KIND_RING_WRAPPED => self.wrapped.push(c.tid),
            other => {
                return Err(LogError::malformed(
                    c.offset,
                    format!("unknown chunk kind {other}"),
                ))
            }
        }
        Ok(())
    }

    /// The log's bytes.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// The description of own block `id` (`None` below [`LogIndex::base`]: ask the
    /// parent's log; or when it is not described).
    pub fn tb(&self, id: u32) -> Option<TbRecord<'a>> {
        let i = id.checked_sub(self.base)? as usize;
        let at = *self.tbs.get(i)?;
        if at == usize::MAX {
            return None;
        }
        // Indexed records parsed once already: this cannot fail, but is not trusted to.
        TbRecords::new(&self.data[at..], at, self.header.version)
            .next()
            .and_then(Result::ok)
    }

    /// One past the highest own block id described.
    pub fn blocks_end(&self) -> u32 {
        self.base + self.tbs.len() as u32
    }

    /// The exec stream bytes at `(offset, length)` (from [`ThreadChunks::chunks`] or
    /// [`RingCopyAt::stream`]).
    pub fn stream(&self, at: (usize, usize)) -> &'a [u8] {
        self.data.get(at.0..at.0 + at.1).unwrap_or_default()
    }

    /// Executions' share of the log, for progress: total exec payload bytes.
    pub fn exec_bytes(&self) -> u64 {
        self.threads
            .iter()
            .flat_map(|t| t.chunks.iter())
            .map(|c| c.1 as u64)
            .sum()
    }
}

/// A tiny tid → index map (few threads; no hashing crate needed here).
mod rustc_hash_lite {
    use super::ThreadChunks;

    #[derive(Default)]
    pub(super) struct Map {
        last: Option<(u32, usize)>,
        all: std::collections::HashMap<u32, usize>,
    }

    impl Map {
        pub(super) fn index(&mut self, tid: u32, threads: &mut Vec<ThreadChunks>) -> usize {
            if let Some((t, i)) = self.last {
                if t == tid {
                    return i;
                }
            }
            let i = *self.all.entry(tid).or_insert_with(|| {
                threads.push(ThreadChunks {
                    tid,
                    chunks: Vec::new(),
                });
                threads.len() - 1
            });
            self.last = Some((tid, i));
            i
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(d: &mut Vec<u8>, kind: u8, tid: u32, p: &[u8]) {
        d.extend_from_slice(&chunk_header(kind, tid, p.len() as u64));
        d.extend_from_slice(p);
    }

    #[test]
    fn an_index_keeps_what_came_before_damage() {
        let mut d = Vec::new();
        chunk(&mut d, KIND_HEADER, 0, &header_payload(5, MODE_STACK));
        let mut tbs = Vec::new();
        push_tb_record(&mut tbs, 0, 0x1000, 1, 1, &[0xc3], &[0xc3], 0);
        push_tb_record(
            &mut tbs,
            1,
            0x2000,
            2,
            3,
            &[0x0f, 0x05],
            &[0x90],
            TB_HANDLER_ENTRY,
        );
        chunk(&mut d, KIND_TBS, 0, &tbs);
        chunk(&mut d, KIND_EXEC, 5, &0u32.to_le_bytes());
        chunk(&mut d, 77, 0, &[]);
        chunk(&mut d, KIND_EXEC, 5, &1u32.to_le_bytes());
        let ix = LogIndex::new(&d).expect("a header");
        assert_eq!(ix.header.pid, 5);
        assert_eq!(ix.tb(1).map(|t| t.vaddr), Some(0x2000));
        assert_eq!(ix.handler_entries, [1]);
        assert_eq!(ix.threads.len(), 1);
        assert_eq!(
            ix.threads[0].chunks.len(),
            1,
            "the chunk after the damage is not used"
        );
        assert!(ix.damage.is_some());
        assert!(ix.tb(7).is_none());
    }
}
