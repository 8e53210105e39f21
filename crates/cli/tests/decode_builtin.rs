//! `ptscope decode --decoder builtin|auto` on a simulated Intel PT recording
//! (`tests/fixtures/pt/ptsim_gzip.perf.data.gz`: gzip under ptsim, three corrupted bytes):
//! `auto` picks ptscope's own decoder, whose trace is perf's (dlfilter path) but for the
//! times (the builtin decoder times each branch where it ran); a recording it cannot
//! decode (the kernel traced) makes `auto` fall back to perf with a notice and
//! `builtin` fail naming why.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(dir: &Path) -> PathBuf {
    let gz = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pt/ptsim_gzip.perf.data.gz");
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(gz).expect("fixture"))
        .read_to_end(&mut bytes)
        .expect("gunzip");
    let path = dir.join("perf.data");
    std::fs::write(&path, bytes).expect("write");
    path
}

fn decode(data: &Path, decoder: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args([
            "decode",
            "--format",
            "transcript",
            "-o",
            "-",
            "--decoder",
            decoder,
        ])
        .arg(data)
        .output()
        .expect("ptscope")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).expect("utf-8 transcript")
}

/// The transcript without its times (`->     12ns BEGIN f` → `-> BEGIN f`).
fn untimed(t: &str) -> String {
    t.lines()
        .map(|l| match l.strip_prefix("->") {
            Some(rest) => {
                let rest = rest.trim_start();
                let rest = rest.split_once(' ').map_or("", |(_, r)| r);
                format!("-> {rest}\n")
            }
            None => format!("{l}\n"),
        })
        .collect()
}

fn perf_available() -> bool {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "perf is required under CI"
        );
        eprintln!("!!!!!!!! SKIPPING the perf comparison: perf not found");
    }
    ok
}

#[test]
fn auto_decodes_intel_pt_itself_and_agrees_with_perf() {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let data = fixture(tmp.path());
    let builtin = ok(&decode(&data, "builtin"), "builtin");
    let auto = decode(&data, "auto");
    assert_eq!(
        ok(&auto, "auto"),
        builtin,
        "auto did not pick the builtin decoder"
    );
    // The three corrupted bytes are three decode errors; the dynamic loader's and libc's
    // functions are named (gzip is stripped: its own are `[unknown @ …]`).
    assert_eq!(
        builtin
            .matches("Warning: perf reported an error decoding")
            .count(),
        3,
        "{}",
        &builtin[..builtin.len().min(2000)]
    );
    for f in [
        "BEGIN _dl_lookup_symbol_x",
        "BEGIN memset@plt",
        "BEGIN [unknown @ ",
    ] {
        assert!(builtin.contains(f), "no `{f}` in the builtin trace");
    }
    if !perf_available() {
        return;
    }
    let perf = ok(&decode(&data, "dlfilter"), "dlfilter");
    let (b, p) = (untimed(&builtin), untimed(&perf));
    if let Some(i) = b.lines().zip(p.lines()).position(|(x, y)| x != y) {
        panic!(
            "line {i}: builtin {:?} vs perf {:?}",
            b.lines().nth(i),
            p.lines().nth(i)
        );
    }
    assert_eq!(b.lines().count(), p.lines().count());
    assert_ne!(
        builtin, perf,
        "the builtin decoder's own times are not perf's"
    );
}

/// The fixture with `exclude_kernel` cleared in every copy of its attribute (the header's
/// and EVENT_DESC's): a recording that traced the kernel too.
fn kernel_traced(data: &Path, out: &Path) {
    let mut b = std::fs::read(data).expect("read");
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (attr_at, flags_at) = (usize::try_from(word(&b, 24)).unwrap(), 40);
    let prefix = b[attr_at..attr_at + flags_at].to_vec();
    let mut n = 0;
    let mut i = 0;
    while let Some(p) = b[i..].windows(prefix.len()).position(|w| w == prefix) {
        let at = i + p + flags_at;
        let flags = word(&b, at) & !(1 << 5);
        b[at..at + 8].copy_from_slice(&flags.to_le_bytes());
        n += 1;
        i += p + 1;
    }
    assert!(n >= 1, "no attribute found");
    std::fs::write(out, b).expect("write");
}

#[test]
fn auto_falls_back_to_perf_where_the_builtin_decoder_cannot_go() {
    if !perf_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("temporary directory");
    let data = fixture(tmp.path());
    let kernel = tmp.path().join("kernel.data");
    kernel_traced(&data, &kernel);
    let o = decode(&kernel, "builtin");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("the kernel was traced") && err.contains("--decoder dlfilter"),
        "{err}"
    );
    let o = decode(&kernel, "auto");
    let auto = ok(&o, "auto");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ptscope's Intel PT decoder cannot decode it") && err.contains("with perf"),
        "{err}"
    );
    assert_eq!(auto, ok(&decode(&kernel, "dlfilter"), "dlfilter"));
}
