//! The pipeline's own interface, on magic-trace's fixtures: what an observer hears, what
//! `for_each_event` hands out, and errors as data.

use ptscope_decode::Decoder;
use ptscope_pipeline::{
    decode, for_each_event, DecodeOptions, Error, Format, Input, Observer, Quiet,
};
use std::path::PathBuf;
use std::sync::Mutex;

fn fixture(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/magic-trace")
        .join(case)
        .join("input.perf")
}

/// Records what it hears.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Observer for Log {
    fn started(&self, input: &str, size: Option<u64>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("started {input} {size:?}"));
    }
    fn advanced(&self, _position: u64) {}
    fn finished(&self) {
        self.0.lock().unwrap().push("finished".into());
    }
}

/// Every event the text decoder reads reaches the caller, named by the pipeline's table,
/// and the observer hears the input start (with its size) and end.
#[test]
fn for_each_event_hands_out_what_the_decoder_reads() {
    let path = fixture("hello_world_userspace");
    let mut want = Vec::new();
    let mut d = Decoder::open(&path).expect("fixture");
    while let Some(e) = d.next_event().expect("decode") {
        if let ptscope_event::Event::Ok {
            data: ptscope_event::EventData::Trace { dst, .. },
            ..
        } = &e
        {
            let dst = d.strings().location(*dst);
            want.push(d.strings().display(dst.symbol).to_string());
        }
    }
    let mut options = DecodeOptions::new(Input::PerfScript(path.clone()));
    options.format = Format::Transcript;
    let log = Log::default();
    let mut got = Vec::new();
    let (_, report) = for_each_event(&options, &log, |e, strings| {
        if let ptscope_event::Event::Ok {
            data: ptscope_event::EventData::Trace { dst, .. },
            ..
        } = &e
        {
            got.push(strings.display(strings.location(*dst).symbol).to_string());
        }
    })
    .expect("decodes");
    assert_eq!(got, want);
    assert!(!got.is_empty());
    assert_eq!(report.events, d.stats().events);
    let size = std::fs::metadata(&path).expect("size").len();
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            format!("started {} Some({size})", path.display()),
            "finished".into()
        ]
    );
}

/// A missing input is a typed error naming the file, and nothing is written.
#[test]
fn a_missing_input_is_an_error_that_names_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nothing.perf");
    let mut options = DecodeOptions::new(Input::PerfScript(missing.clone()));
    options.output = dir.path().join("t.fxt");
    let err = decode(&options, &Quiet).expect_err("no such file");
    assert!(
        matches!(&err, Error::NoSuchScript(p) if *p == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing.perf"), "{err}");
    assert!(!options.output.exists());
}
