//! `ptscope view`: the trace's exact bytes, with the headers the Perfetto UI needs, to a
//! cross-origin `fetch` in headless Chromium (from a page whose Content-Security-Policy
//! is shaped like the UI's), refused to an origin that is not the UI's; the hand-over
//! page (for ports other than 9001) giving the trace to a stand-in UI by the UI's
//! postMessage protocol; what a plain HTTP client sees; files that are not served.

#[path = "../../../tests/fixtures_dir.rs"]
mod fixtures_dir;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A real trace: magic-trace's Intel PT fixture decoded.
fn trace(dir: &Path) -> PathBuf {
    let input = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    let out = dir.join("hello.fxt.gz");
    let st = Command::new(env!("CARGO_BIN_EXE_ptscope"))
        .args(["decode", "-q", "--perf-script"])
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// `ptscope view` running, its link read; killed (and reaped) on drop.
struct View {
    child: Child,
    link: String,
}

impl View {
    fn start(trace: &Path, args: &[&str]) -> View {
        View::spawn(
            Command::new(env!("CARGO_BIN_EXE_ptscope"))
                .arg("view")
                .arg(trace)
                .args(["--port", "0", "--no-open"])
                .args(args),
        )
    }

    /// Starts `cmd` and reads the link it prints first.
    fn spawn(cmd: &mut Command) -> View {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        View {
            child,
            link: line.trim().to_string(),
        }
    }

    /// The trace's own URL: the deep link's `url=`, or beside the hand-over page.
    fn trace_url(&self) -> String {
        match self.link.split_once("url=") {
            Some((_, url)) => url.to_string(),
            None => format!("{}hello.fxt.gz", self.link),
        }
    }

    fn port(&self) -> u16 {
        let rest = self.trace_url();
        let rest = rest.trim_start_matches("http://127.0.0.1:");
        rest[..rest.find('/').unwrap()].parse().unwrap()
    }

    /// Stops it as Ctrl-C does; returns its stderr.
    fn stop(mut self) -> String {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert!(status.success(), "{status}: {err}");
        err
    }
}

impl Drop for View {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One raw HTTP request; the response's head (lowercased names) and body.
fn http(port: u16, request: &str) -> (String, Vec<u8>) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&all[..split]).to_lowercase();
    (head, all[split + 4..].to_vec())
}

fn path_of(url: &str) -> String {
    let rest = url.trim_start_matches("http://127.0.0.1:");
    rest[rest.find('/').unwrap()..].to_string()
}

#[test]
fn an_http_client_gets_the_file_as_it_is_and_nothing_else() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let bytes = std::fs::read(&t).unwrap();
    let v = View::start(&t, &[]);
    let (port, path) = (v.port(), path_of(&v.trace_url()));
    // Port 0 is not 9001: the link is the hand-over page, and says why.
    assert!(
        v.link.starts_with("http://127.0.0.1:") && v.link.ends_with('/'),
        "{}",
        v.link
    );
    let (head, body) = http(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nOrigin: https://ui.perfetto.dev\r\n\r\n"),
    );
    assert!(head.starts_with("http/1.1 200 ok"), "{head}");
    assert!(
        body == bytes,
        "not the gzip file's bytes as they are ({} bytes)",
        body.len()
    );
    for h in [
        "access-control-allow-origin: https://ui.perfetto.dev",
        "content-type: application/octet-stream",
        &format!("content-length: {}", bytes.len()),
    ] {
        assert!(head.contains(h), "{h} missing: {head}");
    }
    assert!(!head.contains("content-encoding"), "{head}");
    // A range, a preflight (a Private Network Access one too), other paths and methods.
    let (head, body) = http(
        port,
        &format!("GET {path} HTTP/1.1\r\nRange: bytes=2-9\r\n\r\n"),
    );
    assert!(head.starts_with("http/1.1 206"), "{head}");
    assert_eq!(body, &bytes[2..10]);
    assert!(
        head.contains(&format!("content-range: bytes 2-9/{}", bytes.len())),
        "{head}"
    );
    let (head, _) = http(
        port,
        &format!(
            "OPTIONS {path} HTTP/1.1\r\nOrigin: https://ui.perfetto.dev\r\nAccess-Control-Request-Method: GET\r\nAccess-Control-Request-Private-Network: true\r\n\r\n"
        ),
    );
    assert!(head.starts_with("http/1.1 204"), "{head}");
    assert!(
        head.contains("access-control-allow-private-network: true"),
        "{head}"
    );
    let (head, body) = http(port, &format!("HEAD {path} HTTP/1.1\r\n\r\n"));
    assert!(head.contains(&format!("content-length: {}", bytes.len())) && body.is_empty());
    let wrong = format!("{}x", &path[..path.len() - 1]);
    for req in [
        format!("GET {wrong} HTTP/1.1\r\n\r\n"),
        "GET / HTTP/1.1\r\n\r\n".to_string(),
        "GET /etc/passwd HTTP/1.1\r\n\r\n".to_string(),
        "POST /status HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_string(),
    ] {
        let (head, body) = http(port, &req);
        assert!(head.starts_with("http/1.1 404"), "{req}: {head}");
        assert!(
            body.is_empty() && !head.contains("access-control"),
            "{req}: {head}"
        );
    }
    let (head, _) = http(port, &format!("PUT {path} HTTP/1.1\r\n\r\n"));
    assert!(head.starts_with("http/1.1 405"), "{head}");
    let err = v.stop();
    assert!(
        err.contains("to this machine only (loopback), only this file"),
        "{err}"
    );
    assert!(err.contains("fetches traces only from port 9001"), "{err}");
    assert!(err.contains("sent hello.fxt.gz"), "{err}");
    // Nothing listens once ptscope is gone.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn files_that_are_no_plain_trace_are_not_served() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let view = |p: &Path| {
        Command::new(env!("CARGO_BIN_EXE_ptscope"))
            .arg("view")
            .arg(p)
            .args(["--port", "0", "--no-open", "--once"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // Another user's symbolic link to the trace (or anything else) is not followed.
    let link = d.path().join("link.fxt.gz");
    std::os::unix::fs::symlink(&t, &link).unwrap();
    let _ = Command::new("chown")
        .args(["-h", "65534"])
        .arg(&link)
        .status();
    let o = view(&link);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("symbolic link"),
        "{o:?}"
    );
    // A file that is no trace (a secret a link or a mistake points at).
    let secret = d.path().join("secret.fxt.gz");
    std::fs::write(&secret, "root:$6$hash:19000:0:99999:7:::\n").unwrap();
    let o = view(&secret);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not an FXT trace"),
        "{o:?}"
    );
    // A fifo: refused without blocking on it.
    let fifo = d.path().join("fifo.fxt.gz");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let o = view(&fifo);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a regular file"),
        "{o:?}"
    );
    assert!(!d.path().join("missing").exists());
    assert!(!view(&d.path().join("missing")).status.success());
}

/// What the test's own web server (the "other origin") received.
#[derive(Default)]
struct Results(Vec<(String, Vec<u8>)>);

/// Serves the test pages on `listener` (its own origin) and records what they POST.
fn pages(listener: TcpListener, pages: Vec<(String, String)>, results: Arc<Mutex<Results>>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let pages = pages.clone();
            let results = results.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let (method, path) = (
                    parts.next().unwrap_or("").to_string(),
                    parts.next().unwrap_or("").to_string(),
                );
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = h.to_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                if method == "POST" {
                    let mut body = vec![0; len];
                    let _ = r.read_exact(&mut body);
                    results.lock().unwrap().0.push((path, body));
                    let _ = conn.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
                    return;
                }
                let page = pages
                    .iter()
                    .find(|(p, _)| *p == path.split('#').next().unwrap_or(""));
                let (status, body) = match page {
                    Some((_, b)) => ("200 OK", b.clone()),
                    None => ("404 Not Found", String::new()),
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
}

#[test]
fn headless_chromium_fetches_the_exact_bytes_cross_origin() {
    if !ptsim::testing::tools_available(&["chromium"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let bytes = std::fs::read(&t).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let web = listener.local_addr().unwrap().port();
    let origin = format!("http://127.0.0.1:{web}");
    // The test pages' origin stands for the UI's.
    let v = View::start(&t, &["--origin", &origin]);
    let (url, port) = (v.trace_url(), v.port());
    assert!(
        v.link
            .starts_with(&format!("{origin}/#!/?url=http://127.0.0.1:{port}/")),
        "{}",
        v.link
    );
    let page_url = format!("http://127.0.0.1:{port}{}", {
        let p = path_of(&url);
        p[..p.rfind('/').unwrap() + 1].to_string()
    });
    // As the UI's TraceHttpStream reads it: fetch, status 200, Content-Length, the body
    // through a reader. The CSP allows that one port only, as the UI's allows 9001.
    let fetch = |tag: &str| {
        format!(
            r#"<script>
(async () => {{
  try {{
    const r = await fetch({url:?});
    const reader = r.body.getReader();
    const parts = []; let n = 0;
    for (;;) {{ const {{done, value}} = await reader.read(); if (done) break; parts.push(value); n += value.length; }}
    const all = new Uint8Array(n); let o = 0; for (const p of parts) {{ all.set(p, o); o += p.length; }}
    const q = "?status=" + r.status + "&length=" + r.headers.get("Content-Length") + "&type=" + encodeURIComponent(r.headers.get("Content-Type"));
    await fetch("/result/{tag}" + q, {{method: "POST", body: all}});
  }} catch (e) {{
    await fetch("/result/{tag}-failed", {{method: "POST", body: String(e)}});
  }}
}})();
</script>"#
        )
    };
    let csp = format!(
        r#"<meta http-equiv="Content-Security-Policy" content="connect-src 'self' http://127.0.0.1:{port}">"#
    );
    // A stand-in for the UI's side of the postMessage protocol.
    let ui = r#"<script>
window.addEventListener("message", (e) => {
  if (e.source !== window.opener) return;
  if (e.data === "PING") { e.source.postMessage("PONG", e.origin); return; }
  if (e.data && e.data.perfetto) {
    const p = e.data.perfetto;
    fetch("/result/handed?title=" + encodeURIComponent(p.title), {method: "POST", body: p.buffer});
  }
});
</script>"#;
    let main = format!(
        "<!doctype html>{csp}<body>{}<iframe src=\"http://localhost:{web}/denied.html\"></iframe>\
         <script>window.open({page_url:?});</script>",
        fetch("allowed")
    );
    let denied = format!("<!doctype html><body>{}", fetch("denied"));
    let results = Arc::new(Mutex::new(Results::default()));
    pages(
        listener,
        vec![
            ("/main.html".into(), main),
            ("/denied.html".into(), denied),
            ("/".into(), ui.to_string()),
        ],
        results.clone(),
    );
    let profile = d.path().join("profile");
    let mut chromium = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-popup-blocking",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("{origin}/main.html"))
        // Chromium's scratch files go to the test's directory, removed with it.
        .env("TMPDIR", d.path())
        .env("HOME", d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let want = ["allowed", "denied-failed", "handed"];
    while start.elapsed() < Duration::from_secs(90) {
        let got = results.lock().unwrap().0.len();
        if got >= want.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    unsafe { libc::kill(-(chromium.id() as i32), libc::SIGKILL) };
    let _ = chromium.wait();
    let got = std::mem::take(&mut results.lock().unwrap().0);
    let find = |tag: &str| {
        got.iter()
            .find(|(p, _)| {
                p.starts_with(&format!("/result/{tag}?")) || *p == format!("/result/{tag}")
            })
            .unwrap_or_else(|| {
                let seen: Vec<String> = got
                    .iter()
                    .map(|(p, b)| {
                        format!("{p}: {}", String::from_utf8_lossy(&b[..b.len().min(200)]))
                    })
                    .collect();
                panic!("chromium posted no {tag} result; it posted {seen:#?}")
            })
    };
    let (q, body) = find("allowed");
    assert!(
        *body == bytes,
        "the cross-origin fetch read {} other bytes",
        body.len()
    );
    assert!(q.contains("status=200"), "{q}");
    assert!(q.contains(&format!("length={}", bytes.len())), "{q}");
    assert!(q.contains("type=application%2Foctet-stream"), "{q}");
    // From an origin the server does not name, the browser refuses the response.
    let (_, err) = find("denied-failed");
    assert!(
        String::from_utf8_lossy(err).contains("TypeError"),
        "{}",
        String::from_utf8_lossy(err)
    );
    // The hand-over page gave the whole trace to the (stand-in) UI.
    let (q, body) = find("handed");
    assert!(
        *body == bytes,
        "the UI was handed {} other bytes",
        body.len()
    );
    assert!(q.contains("title=hello.fxt.gz"), "{q}");
    v.stop();
}

#[test]
fn decode_view_serves_the_trace_it_wrote_until_ctrl_c() {
    let d = tempfile::tempdir().unwrap();
    let input = fixtures_dir::fixtures_dir().join("magic-trace/hello_world_userspace/input.perf");
    let v = View::spawn(
        Command::new(env!("CARGO_BIN_EXE_ptscope"))
            .current_dir(d.path())
            .args(["decode", "--perf-script"])
            .arg(&input)
            .args(["-o", "hello.fxt.gz", "--view"]),
    );
    // Port 9001 when free (the deep link), else the hand-over page.
    let url = v.trace_url();
    assert!(url.ends_with("/hello.fxt.gz"), "{}", v.link);
    if v.port() == 9001 {
        assert!(
            v.link
                .starts_with("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/"),
            "{}",
            v.link
        );
    }
    let (head, body) = http(v.port(), &format!("GET {} HTTP/1.1\r\n\r\n", path_of(&url)));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let written = std::fs::read(d.path().join("hello.fxt.gz")).unwrap();
    assert!(
        body == written,
        "served {} bytes, not the trace written",
        body.len()
    );
    let err = v.stop();
    assert!(
        err.contains("wrote hello.fxt.gz") && err.contains("serving"),
        "{err}"
    );
}
