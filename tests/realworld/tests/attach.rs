//! `ptscope attach -p PID` on a running HTTP server (Debian's python3 `http.server`, on
//! 127.0.0.1 only), under a bounded load from this test, stopped with Ctrl-C (SIGINT).

use ptscope_realworld::harness::{args, can_record, interrupt, load_checked, skip, Ptscope};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const REQUESTS: usize = 300;

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.0 GET; returns the response's length.
fn get(port: u16, path: &str) -> std::io::Result<usize> {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(body.len())
}

#[test]
fn python_http_server_attach_sigint() {
    let test = "python_http_server_attach_sigint";
    if !can_record(test) {
        return;
    }
    if !Path::new(PYTHON).is_file() {
        skip(
            test,
            "/usr/bin/python3 is missing (apt-get install python3)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    std::fs::create_dir(&site).unwrap();
    std::fs::write(site.join("page.html"), "<p>ptscope</p>\n".repeat(4000)).unwrap();

    // A free port on the loopback interface (the server binds it a moment later).
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server(
        Command::new(PYTHON)
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(&site)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start python3 -m http.server"),
    );
    let ready = Instant::now();
    while get(port, "/page.html").is_err() {
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "the HTTP server on 127.0.0.1:{port} never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = dir.path().join("attach.fxt.gz");
    let mut ptscope = Ptscope::new(args(&[
        &"attach",
        &"-p",
        &server.0.id().to_string(),
        &"-o",
        &out,
    ]));
    let (mut child, started) = ptscope.spawn();
    // Load only once perf records: ptscope says "attached to …" then.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = child.wait();
            panic!("ptscope attach ended before attaching:\n{said}");
        }
        said.push_str(&line);
        if line.contains("attached to") {
            break;
        }
    }
    let mut bytes = 0;
    for i in 0..REQUESTS {
        let path = if i % 3 == 0 { "/" } else { "/page.html" };
        bytes += get(port, path).expect("a response from the traced server");
    }
    assert!(
        bytes > REQUESTS * 1000,
        "the server answered only {bytes} bytes"
    );
    interrupt(child.id());
    // Give the rest of stderr back to the harness's checks.
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let run = ptscope.wait(child, started);
    let stderr_rest = rest.join().unwrap();
    assert!(
        !stderr_rest.contains("panicked"),
        "ptscope attach panicked:\n{said}{stderr_rest}"
    );
    let t = load_checked(&out, &run);

    // The server's Python code ran under the interpreter's main loop.
    t.assert_under("_PyEval_EvalFrameDefault", &["Py_RunMain", "Py_BytesMain"]);
    // ThreadingHTTPServer starts a thread per request from its accept loop...
    t.assert_under(
        "PyThread_start_new_thread",
        &["_PyEval_EvalFrameDefault", "Py_RunMain"],
    );
    // ...and those threads run the handler's Python code: they are in the trace too.
    t.assert_under_on(
        "Python code on a request thread (under start_thread)",
        |_| true,
        |n| n == "_PyEval_EvalFrameDefault",
        &[&|n: &str| n == "start_thread"],
    );
    t.assert_process_named("python3");
}
