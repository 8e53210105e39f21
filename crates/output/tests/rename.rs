//! Renaming a process or thread writes its kernel object record again with the same
//! koid (and the thread's process), so a reader keeps the newest name.

use ptscope_fxt::check::validate_bytes;
use ptscope_output::FxtSink;
use ptscope_stacks::TraceSink;

#[test]
fn renames_rewrite_the_name_records() {
    let mut sink = FxtSink::new(Vec::new());
    let pid = sink.allocate_pid("sh [pid=7]");
    let main = sink.allocate_thread(pid, "sh [tid=7]");
    let worker = sink.allocate_thread(pid, "sh [tid=8]");
    sink.duration_begin(worker, "f", 0, &[]);
    sink.rename_pid(pid, "python3 [pid=7]");
    sink.rename_thread(main, "python3 [tid=7]");
    sink.rename_thread(worker, "worker-1 [tid=8]");
    sink.duration_end(worker, "f", 10, &[]);
    assert_eq!(sink.stats(), &Default::default());
    let bytes = sink.finish().unwrap();
    let report = validate_bytes(&bytes);
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.processes[&1], "python3 [pid=7]");
    assert_eq!(report.thread_names[&2].name, "python3 [tid=7]");
    assert_eq!(report.thread_names[&3].name, "worker-1 [tid=8]");
    assert_eq!(report.thread_names[&3].process, Some(1));
    assert_eq!(report.threads[&(1, 3)].begins, 1);
}
