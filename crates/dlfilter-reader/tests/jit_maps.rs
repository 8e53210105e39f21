//! JIT code named by `/tmp/perf-PID.map`: perf 6.1 reads that file whoever owns it,
//! so another user could name the traced process's code in root's trace. Both decoding
//! paths hide names from a map not owned by root or the decoding user (with a notice,
//! returned as data) and keep them from a trusted one, and agree with each other.

#![cfg(target_arch = "x86_64")]

mod common;

use common::*;
use ptscope_decode::RecordingKind;
use ptscope_dlfilter_reader::{open, Choice, DlfilterOptions};
use ptscope_symbols::MapTrust;
use std::path::{Path, PathBuf};

/// Copies a loop (`dec rdi; jnz; ret`) into anonymous executable memory and runs it,
/// as a JIT would; writes "PID ADDRESS" to argv[1].
const JIT_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static unsigned char code[] = {0x48, 0xff, 0xcf, 0x75, 0xfb, 0xc3};
int main(int argc, char **argv) {
    unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || argc < 2) return 1;
    memcpy(p, code, sizeof code);
    FILE *f = fopen(argv[1], "w");
    fprintf(f, "%d %lx\n", getpid(), (unsigned long)p);
    fclose(f);
    void (*fn)(long) = (void (*)(long))p;
    for (int i = 0; i < 150; i++) fn(1000000);
    return 0;
}
"#;

/// Removes the map this test created in /tmp, even if the test fails.
struct MapGuard(PathBuf);

impl Drop for MapGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Events (names spelled out) and notices from one decoder.
fn decode(data: &Path, choice: Choice) -> (Vec<String>, Vec<String>) {
    let mut o = DlfilterOptions::new(data);
    o.kind = Some(RecordingKind::Sampling);
    let (events, notices, on_dlfilter) = decode_with(&o, choice);
    assert_eq!(on_dlfilter, choice == Choice::Dlfilter);
    (events, notices)
}

/// Events, notices, and whether the stream ended on the dlfilter path, from `open(o, choice)`.
fn decode_with(o: &DlfilterOptions, choice: Choice) -> (Vec<String>, Vec<String>, bool) {
    let (mut s, notice) = open(o, choice).expect("open");
    assert!(notice.is_none(), "{notice:?}");
    let mut events = Vec::new();
    let mut notices = Vec::new();
    while let Some(e) = s.next_event().expect("decode") {
        events.push(norm(&e, s.strings()));
        notices.extend(s.take_notices());
    }
    s.finish().expect("perf exit");
    notices.extend(s.take_notices());
    (events, notices, s.is_dlfilter())
}

/// Records the JIT program in `dir` and writes its perf map in /tmp (one entry naming the
/// JIT loop `someone_elses_name`, owned by root until the caller changes that): the
/// recording, the map, the loop's address as perf-map hex, and the guard removing the map.
fn jit_recording(dir: &Path) -> (PathBuf, PathBuf, String, MapGuard) {
    std::fs::write(dir.join("jit.c"), JIT_C).expect("write jit.c");
    let exe = dir.join("jit");
    let st = std::process::Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&exe)
        .arg(dir.join("jit.c"))
        .status()
        .expect("gcc");
    assert!(st.success(), "gcc failed");
    let data = dir.join("perf.data");
    let info = dir.join("pid");
    record(
        &data,
        &["-e", "cpu-clock", "-c", "100000"],
        &[&exe.to_string_lossy(), &info.to_string_lossy()],
    );
    let info = std::fs::read_to_string(&info).expect("pid file");
    let (pid, addr) = info.trim().split_once(' ').expect("PID ADDR");
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    // O_EXCL: never reuse a file someone else may have put there.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&map)
        .expect("create the perf map");
    let guard = MapGuard(map.clone());
    use std::io::Write;
    writeln!(f, "{addr} 6 someone_elses_name").expect("write map");
    drop(f);
    (data, map, addr.to_string(), guard)
}

#[test]
fn names_from_another_user_s_jit_map_are_hidden_on_both_paths() {
    if !perf_usable("names_from_another_user_s_jit_map_are_hidden_on_both_paths") {
        return;
    }
    let tmp = scratch("jit");
    let (data, map, addr, _guard) = jit_recording(tmp.path());
    let addr = addr.as_str();
    let map_s = map.to_string_lossy().into_owned();

    // Another user's map: perf reads it, ptscope hides what it named.
    std::os::unix::fs::chown(&map, Some(65534), Some(65534)).expect("chown");
    let raw = std::process::Command::new("perf")
        .args(["script", "-F", "ip,sym,dso", "-i"])
        .arg(&data)
        .output()
        .expect("perf script");
    eprintln!(
        "perf itself names the JIT code from uid 65534's map: {}",
        String::from_utf8_lossy(&raw.stdout).contains("someone_elses_name")
    );
    let (text, text_notices) = decode(&data, Choice::Text);
    let (dlf, dlf_notices) = decode(&data, Choice::Dlfilter);
    assert_eq!(text, dlf, "the two paths disagree");
    assert!(!text.iter().any(|e| e.contains("someone_elses_name")));
    // The loop's instructions lie in the map's 6 bytes from `addr`.
    let hidden = format!("[unknown @ 0x{}", &addr[..addr.len() - 1]);
    let jit_samples = text
        .iter()
        .filter(|e| e.contains(&hidden) && e.contains(&map_s))
        .count();
    assert!(
        jit_samples > 20,
        "only {jit_samples} samples in the JIT code: {:?}",
        &text[..text.len().min(5)]
    );
    for notices in [&text_notices, &dlf_notices] {
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].contains(&map_s) && notices[0].contains("owned by uid 65534"),
            "{}",
            notices[0]
        );
    }

    // Root's own map is believed, on both paths.
    std::os::unix::fs::chown(&map, Some(0), Some(0)).expect("chown");
    let (text, text_notices) = decode(&data, Choice::Text);
    let (dlf, dlf_notices) = decode(&data, Choice::Dlfilter);
    assert_eq!(text, dlf, "the two paths disagree");
    let named = text
        .iter()
        .filter(|e| e.contains("someone_elses_name"))
        .count();
    assert_eq!(named, jit_samples);
    assert!(text_notices.is_empty() && dlf_notices.is_empty());
}

/// A dlfilter stream that fails mid-way continues on the text path (the automatic
/// choice) with what was already known of the JIT maps: a map the caller chose to trust
/// stays believed after the fallback (a fresh default trust would hide its names from
/// there on), and an untrusted one is noticed once, not again on the text path.
#[test]
fn the_fallback_to_text_keeps_the_jit_maps_trust() {
    if !perf_usable("the_fallback_to_text_keeps_the_jit_maps_trust") {
        return;
    }
    let tmp = scratch("jit-fallback");
    let dir = tmp.path();
    let (data, map, _, _guard) = jit_recording(dir);
    std::os::unix::fs::chown(&map, Some(65534), Some(65534)).expect("chown");
    let perf = corrupting_perf(dir);
    let options = |trust: MapTrust| {
        let mut o = DlfilterOptions::new(&data);
        o.kind = Some(RecordingKind::Sampling);
        o.perf = perf.clone();
        o.map_trust = trust;
        o
    };
    let decode_auto = |o: &DlfilterOptions| decode_with(o, Choice::Auto);

    for (trust, believed) in [
        (MapTrust::new().with_uid(65534), true),
        (MapTrust::new(), false),
    ] {
        // No cut yet: the wrapper saves the whole stream and changes nothing.
        let _ = std::fs::remove_file(dir.join("cut"));
        let (want, want_notices, on_dlfilter) = decode_auto(&options(trust.clone()));
        assert!(on_dlfilter);
        let named = want
            .iter()
            .filter(|e| e.contains("someone_elses_name"))
            .count();
        assert_eq!(named > 20, believed, "{named} samples named from the map");
        assert_eq!(
            want_notices.len(),
            usize::from(!believed),
            "{want_notices:?}"
        );

        let full = std::fs::read(dir.join("full")).expect("saved stream");
        let cut = boundary_after(&full, full.len() / 2);
        assert!(cut < full.len());
        std::fs::write(dir.join("cut"), cut.to_string()).expect("write cut");
        let (got, notices, on_dlfilter) = decode_auto(&options(trust));
        assert!(!on_dlfilter, "the cut stream must fall back to text");
        let named_got = got
            .iter()
            .filter(|e| e.contains("someone_elses_name"))
            .count();
        assert!(
            got == want,
            "believed: {believed}: {} events, {named_got} named from the map; want {}, {named}",
            got.len(),
            want.len()
        );
        let (fallback, jit): (Vec<_>, Vec<_>) = notices
            .iter()
            .partition(|n| n.contains("dlfilter stream failed"));
        assert_eq!(fallback.len(), 1, "{notices:?}");
        assert_eq!(jit, want_notices.iter().collect::<Vec<_>>(), "{notices:?}");
    }
}
