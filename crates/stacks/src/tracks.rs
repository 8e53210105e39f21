//! What both stack writers write the same way: track names and trigger hits.

use crate::legacy::Hit;
use crate::sink::{Arg, ArgValue, TraceSink};
use ptscope_event::Thread;
use rustc_hash::FxHashMap;

/// The track-group name of a thread: `[pid=P]` (or `[pid=P] [tid=T]`), after the
/// process's command line when it is known.
pub(crate) fn group_name(thread: Thread, process_names: &FxHashMap<u32, String>) -> String {
    let pid = thread
        .pid
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let tid = thread
        .tid
        .map_or_else(|| "?".to_string(), |p| p.to_string());
    let default = if pid == tid {
        format!("[pid={pid}]")
    } else {
        format!("[pid={pid}] [tid={tid}]")
    };
    match thread.pid.and_then(|p| process_names.get(&p)) {
        Some(cmd) => format!("{cmd} {default}"),
        None => default,
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
