//! Replays every magic-trace fixture through the legacy writer and compares the
//! transcript with magic-trace's own `expected.txt`, byte for byte.

use ptscope_decode::Decoder;
use ptscope_event::{OcamlExceptionInfo, TraceScope};
use ptscope_stacks::legacy::LegacyWriter;
use ptscope_stacks::transcript::TranscriptSink;
use ptscope_stacks::{StackWriter, WriterConfig};
use std::path::{Path, PathBuf};

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures;

fn fixtures_dir() -> PathBuf {
    fixtures::fixtures_dir().join("magic-trace")
}

fn addrs(v: Option<&toml::Value>) -> Vec<u64> {
    v.and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_integer())
                .map(|x| x as u64)
                .collect()
        })
        .unwrap_or_default()
}

fn replay(case: &Path) -> String {
    let toml_text = std::fs::read_to_string(case.join("case.toml")).expect("case.toml");
    let case_toml: toml::Table = toml_text.parse().expect("case.toml parses");
    let scope = case_toml
        .get("trace_scope")
        .and_then(|v| v.as_str())
        .and_then(TraceScope::parse)
        .expect("trace_scope");
    let ocaml_exception_info = case_toml
        .get("ocaml_exception_info")
        .and_then(|v| v.as_table())
        .map(|t| {
            OcamlExceptionInfo::new(
                &addrs(t.get("pushtraps")),
                &addrs(t.get("poptraps")),
                &addrs(t.get("entertraps")),
            )
        });
    let mut decoder = Decoder::open(case.join("input.perf")).expect("input.perf");
    let mut writer: Option<LegacyWriter<TranscriptSink>> = None;
    while let Some(event) = decoder.next_event().expect("decode") {
        let w = writer.get_or_insert_with(|| {
            LegacyWriter::new(
                TranscriptSink::default(),
                WriterConfig {
                    scope,
                    annotate_inferred_start_times: true,
                    ocaml_exception_info: ocaml_exception_info.clone(),
                    earliest_time: event.time().unwrap_or(0),
                    ..WriterConfig::default()
                },
            )
        });
        w.write_event(&event, decoder.strings());
    }
    assert_eq!(decoder.stats().warnings, 0, "{:?}", decoder.warnings());
    let mut w = writer.expect("at least one event");
    w.end_of_input();
    w.finish(decoder.strings()).render()
}

fn check(name: &str) {
    let case = fixtures_dir().join(name);
    let got = replay(&case);
    let expected = std::fs::read_to_string(case.join("expected.txt")).expect("expected.txt");
    if got != expected {
        // Kept for comparison (the test has failed): a new private file, never a fixed name.
        let out = tempfile::Builder::new()
            .prefix(&format!("ptscope-{name}-"))
            .suffix(".got.txt")
            .tempfile()
            .ok()
            .and_then(|f| f.keep().ok())
            .map(|(_, p)| p)
            .unwrap_or_default();
        let _ = std::fs::write(&out, &got);
        let first = got
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(expected.lines().count()));
        panic!(
            "{name}: transcript differs from expected.txt at line {} (got {} lines, expected {}); full output in {}",
            first + 1,
            got.lines().count(),
            expected.lines().count(),
            out.display()
        );
    }
}

macro_rules! fixture_tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*
        /// The fixtures with a test above.
        const TESTED: &[&str] = &[$(stringify!($name)),*];
    };
}

fixture_tests!(
    hello_world_userspace,
    memmove_decode_error,
    ocaml_exceptions_traps,
    ocaml_exceptions_poptrap_corner_case_traps,
    ocaml_exceptions_poptrap_corner_case_notraps,
    simple_gogo,
    c_demo_sampling,
    demo_sampling_with_branch_misses_and_cache_misses,
    demo_with_branch_misses_and_cache_misses,
);

#[test]
fn every_fixture_directory_is_tested() {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("expected.txt").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut tested = TESTED.to_vec();
    tested.sort_unstable();
    assert_eq!(names, tested);
}
