//! What to do about a recording error, in this command line's flags: the record crate's
//! errors say what is wrong and name no flag, and this is where flags are known.

use ptscope_record::Error as RecordError;

/// The advice for the first recording error in `e`'s chain that has one.
pub fn for_error(e: &anyhow::Error) -> Option<&'static str> {
    // A recording error that wraps another holds it boxed: the chain shows the box.
    e.chain().find_map(|c| {
        c.downcast_ref::<RecordError>()
            .or_else(|| c.downcast_ref::<Box<RecordError>>().map(|b| &**b))
            .and_then(advice)
    })
}

/// The advice for one recording error.
fn advice(r: &RecordError) -> Option<&'static str> {
    Some(match r {
        RecordError::CustomTimingWhenSampling => "use --timer-resolution sample:FREQ",
        RecordError::SampleRateWithPt => {
            "with Intel PT use --timer-resolution low, normal, high or custom:…"
        }
        RecordError::SnapshotDurationWithPt { .. } => "give e.g. --snapshot-size 4M",
        RecordError::SnapshotDurationWithFullExecution => {
            "--full-execution keeps everything: drop the --snapshot-size duration"
        }
        RecordError::SnapshotDurationWithMultiSnapshot => {
            "with --multi-snapshot give a size, e.g. --snapshot-size 64M"
        }
        RecordError::LbrWithoutPmu => {
            "use --callgraph dwarf (or fp for programs built with frame pointers)"
        }
        RecordError::NoIntelPt { .. } => {
            "use --backend sample (timer sampling with call stacks), --backend emulate \
             (every call exactly, under qemu-user, much slower), or record on an Intel \
             machine with PT (bare metal, or a VM with PT passthrough)"
        }
        RecordError::EmptyTrigger => "give --trigger a function name, an address, FILE:LINE or `.`",
        RecordError::NoStopIndicator { .. } => "or give --trigger a function name instead of `.`",
        RecordError::NoCommand => "write it after `--`, e.g. ptscope run -- ./myprogram arg",
        RecordError::NothingToAttach => "give -p PID",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_error_gets_its_flags_here() {
        let e = anyhow::Error::from(RecordError::NoIntelPt {
            why: "no PT".into(),
        })
        .context("cannot record");
        assert!(for_error(&e).is_some_and(|a| a.contains("--backend sample")));
        assert!(for_error(&anyhow::anyhow!("other")).is_none());
        // Errors from deep in a recording reach the CLI boxed inside others: still found.
        let e = anyhow::Error::from(RecordError::TriggerInLibraries(Box::new(
            RecordError::NoCommand,
        )));
        assert!(for_error(&e).is_some_and(|a| a.contains("after `--`")));
    }
}
