//! What both stack writers write the same way: process and thread tracks and their
//! names, and trigger hits.

use crate::sink::{Arg, ArgValue, TraceSink};
use ptscope_event::{EventData, Hit, StringTable, Thread};
use rustc_hash::FxHashMap;

/// The tracks of processes and threads, and the names perf gave them.
///
/// Threads sit in one track group per process; a group is named `COMM [pid=P]` after
/// its main thread (tid = pid), a track `COMM [tid=T]` after its thread, with the name
/// left out while perf has given none (`[pid=P]`, `[tid=T]`). Names come from
/// [`EventData::Comm`] and are inherited through [`EventData::Fork`], as the kernel
/// does; a later name (an exec, `pthread_setname_np`) renames the group or track.
/// A name from the writer's configuration (a command line) wins over perf's.
pub(crate) struct Tracks<T> {
    /// Latest name of each thread, by tid.
    comms: FxHashMap<u32, String>,
    /// Sink group of each process.
    groups: FxHashMap<Option<u32>, u32>,
    /// Sink track of each thread.
    tracks: FxHashMap<Thread, T>,
}

impl<T: Copy> Default for Tracks<T> {
    fn default() -> Self {
        Tracks {
            comms: FxHashMap::default(),
            groups: FxHashMap::default(),
            tracks: FxHashMap::default(),
        }
    }
}

fn id(v: Option<u32>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

impl<T: Copy> Tracks<T> {
    fn process_name(&self, pid: Option<u32>, configured: &FxHashMap<u32, String>) -> String {
        let shown = pid.and_then(|p| configured.get(&p).or_else(|| self.comms.get(&p)));
        match shown {
            Some(name) => format!("{name} [pid={}]", id(pid)),
            None => format!("[pid={}]", id(pid)),
        }
    }

    fn thread_name(&self, thread: Thread) -> String {
        match thread.tid.and_then(|t| self.comms.get(&t)) {
            Some(name) => format!("{name} [tid={}]", id(thread.tid)),
            None => format!("[tid={}]", id(thread.tid)),
        }
    }

    /// The track of a thread seen for the first time, and its group (created with the
    /// process's first thread).
    pub(crate) fn allocate<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        thread: Thread,
        configured: &FxHashMap<u32, String>,
    ) -> (T, u32) {
        let group = match self.groups.get(&thread.pid) {
            Some(&g) => g,
            None => {
                let g = sink.allocate_pid(&self.process_name(thread.pid, configured));
                self.groups.insert(thread.pid, g);
                g
            }
        };
        let track = sink.allocate_thread(group, &self.thread_name(thread));
        self.tracks.insert(thread, track);
        (track, group)
    }

    /// Takes in a [`EventData::Comm`] or [`EventData::Fork`] of `thread` (anything else
    /// is ignored), renaming what was already allocated under the old name.
    pub(crate) fn observe<S: TraceSink<Thread = T>>(
        &mut self,
        sink: &mut S,
        thread: Thread,
        data: &EventData,
        strings: &StringTable,
        configured: &FxHashMap<u32, String>,
    ) {
        let Some(tid) = thread.tid else {
            return;
        };
        let name = match data {
            EventData::Comm { name, .. } => strings.get(*name).to_string(),
            EventData::Fork { parent } => {
                match parent.tid.and_then(|p| self.comms.get(&p)) {
                    Some(n) => n.clone(),
                    // A parent perf never named: the child stays unnamed until it is.
                    None => return,
                }
            }
            _ => return,
        };
        if self.comms.get(&tid) == Some(&name) {
            return;
        }
        self.comms.insert(tid, name);
        if let Some(&track) = self.tracks.get(&thread) {
            sink.rename_thread(track, &self.thread_name(thread));
        }
        if thread.pid == Some(tid) {
            if let Some(&group) = self.groups.get(&thread.pid) {
                if !configured.contains_key(&tid) {
                    sink.rename_pid(group, &self.process_name(thread.pid, configured));
                }
            }
        }
    }
}

/// Writes trigger hits as `hit SYMBOL` slices on a track of their own. A stop
/// indicator's passed start time begins the slice, if it is plausible (an old stop
/// indicator passes garbage).
pub(crate) fn write_hits<S: TraceSink>(sink: &mut S, hits: &[Hit], base_time: u64) {
    if hits.is_empty() {
        return;
    }
    let pid = sink.allocate_pid("Snapshot symbol hits");
    let thread = sink.allocate_thread(pid, "hits");
    for hit in hits {
        let time = hit.time.wrapping_sub(base_time) as i64;
        let valid = hit.passed_time > base_time && hit.passed_time < hit.time;
        let start = if hit.is_stop_indicator && valid {
            hit.passed_time.wrapping_sub(base_time) as i64
        } else {
            time
        };
        let mut args = Vec::with_capacity(5);
        if hit.is_stop_indicator {
            args.push(Arg::new(
                "timestamp_passed",
                ArgValue::Int(hit.passed_time as i64),
            ));
            args.push(Arg::new("arg", ArgValue::Int(hit.passed_value)));
        }
        args.push(Arg::new("timestamp", ArgValue::Int(hit.time as i64)));
        args.push(Arg::new("tid", ArgValue::Int(hit.tid as i64)));
        args.push(Arg::new("ip", ArgValue::Pointer(hit.ip)));
        sink.duration_complete(thread, &format!("hit {}", hit.symbol), start, time, &args);
    }
}
