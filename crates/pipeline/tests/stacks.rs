//! Sampled stacks reach the caller through the pipeline's own table: each source owns
//! its table, the decoding thread moves the source's stacks into the run's table
//! (`TableMap`), and the writer's side mirrors them (`TableDelta`).

use ptscope_decode::Decoder;
use ptscope_event::{Event, EventData, StackHandle, StringTable};
use ptscope_pipeline::{for_each_event, DecodeOptions, Format, Input, Quiet};
use std::path::PathBuf;

/// A stack's frames as `perf script` shows them, root first.
fn frames(strings: &StringTable, stack: StackHandle) -> Vec<String> {
    strings
        .stack(stack)
        .map(|l| format!("{:x} {}", l.ip, strings.display(l.symbol)))
        .collect()
}

/// Every sample of magic-trace's sampling fixture has the frames the text decoder read
/// (in its own table) when read through the table `for_each_event` hands out.
#[test]
fn samples_keep_their_frames_through_the_pipeline() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/magic-trace/c_demo_sampling/input.perf");
    let mut want = Vec::new();
    let mut d = Decoder::open(&path).expect("fixture");
    while let Some(e) = d.next_event().expect("decode") {
        if let Event::Ok {
            data: EventData::StackSample { callstack },
            ..
        } = e
        {
            want.push(frames(d.strings(), callstack));
        }
    }
    assert!(want.len() > 10 && want.iter().any(|f| f.len() > 5));
    let mut options = DecodeOptions::new(Input::PerfScript(path));
    // perf's own names: no naming step, no demangling.
    options.format = Format::Transcript;
    let mut got = Vec::new();
    let (strings, _) = for_each_event(&options, &Quiet, |e, strings| {
        if let Event::Ok {
            data: EventData::StackSample { callstack },
            ..
        } = e
        {
            got.push(frames(strings, callstack));
        }
    })
    .expect("decode");
    assert_eq!(got, want);
    assert_eq!(strings.stack_count(), d.strings().stack_count());
}
