//! Just enough HTTP/1.1 for one trace: one request per connection (`Connection: close`),
//! `GET`/`HEAD` of the trace (whole, or one byte range), the hand-over page, CORS
//! preflights, and 404 for everything else.

use crate::{Served, Server};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;

/// Longest request head read (request line and headers).
const MAX_HEAD: usize = 16 * 1024;

/// A parsed request head.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn read_request(conn: &TcpStream) -> Option<Request> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    let mut total = 0;
    let mut next = |line: &mut String| -> Option<()> {
        line.clear();
        let n = r.read_line(line).ok()?;
        total += n;
        (n > 0 && total <= MAX_HEAD).then_some(())
    };
    next(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        next(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    Some(Request {
        method,
        path,
        headers,
    })
}

/// The one range of `bytes=A-B`, `bytes=A-` or `bytes=-N` within `len`, if satisfiable.
fn range(spec: &str, len: u64) -> Option<(u64, u64)> {
    let r = spec.strip_prefix("bytes=")?;
    if r.contains(',') {
        return None;
    }
    let (a, b) = r.split_once('-')?;
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        (len.saturating_sub(n), len.checked_sub(1)?)
    } else {
        let start: u64 = a.parse().ok()?;
        let end = if b.is_empty() {
            len.checked_sub(1)?
        } else {
            b.parse::<u64>().ok()?.min(len.checked_sub(1)?)
        };
        (start, end)
    };
    (start <= end && end < len).then_some((start, end))
}

/// The page that fetches the trace from its own origin and hands it to the UI: the UI
/// opens traces posted from 127.0.0.1 origins without asking (`post_message_handler.ts`).
fn page(name: &str, ui: &str) -> String {
    format!(
        r#"<!doctype html>
<meta charset="utf-8">
<title>ptscope: {name}</title>
<body style="font-family: sans-serif; margin: 2em">
<p id="status">Loading {name} …</p>
<button id="open" hidden>Open {name} in the Perfetto UI</button>
<script>
"use strict";
const UI = {ui:?};
const FILE = {name:?};
const status = (t) => document.getElementById("status").textContent = t;
let trace = null;
function handOver() {{
  const ui = window.open(UI + "/#!/");
  if (!ui) {{
    status("Your browser blocked the new tab: press the button.");
    const b = document.getElementById("open");
    b.hidden = false;
    b.onclick = () => {{ b.hidden = true; handOver(); }};
    return;
  }}
  // The UI answers PING with PONG once it listens; the trace goes after that.
  const ping = setInterval(() => ui.postMessage("PING", UI), 100);
  window.addEventListener("message", function onPong(e) {{
    if (e.source !== ui || e.data !== "PONG") return;
    clearInterval(ping);
    window.removeEventListener("message", onPong);
    ui.postMessage({{perfetto: {{buffer: trace, title: FILE, fileName: FILE}}}}, UI);
    status("Handed " + FILE + " to the Perfetto UI (" + trace.byteLength + " bytes).");
  }});
}}
fetch(FILE).then((r) => {{
  if (r.status !== 200) throw new Error("HTTP " + r.status);
  return r.arrayBuffer();
}}).then((b) => {{ trace = b; status("Opening the Perfetto UI …"); handOver(); }},
         (e) => status("Cannot load " + FILE + ": " + e));
</script>
"#
    )
}

/// Answers one request on `conn`; `None` if nothing sensible was asked.
pub(crate) fn handle(
    server: &Server,
    mut conn: TcpStream,
    stop: &(dyn Fn() -> bool + Sync),
) -> Option<Served> {
    let req = read_request(&conn)?;
    let trace_path = format!("/{}/{}", server.token, server.file.name);
    let page_path = format!("/{}/", server.token);
    let mut served = Served {
        method: req.method.clone(),
        path: req.path.clone(),
        status: 404,
        bytes: 0,
        complete: false,
    };
    let cors = format!(
        "Access-Control-Allow-Origin: {}\r\nVary: Origin\r\n",
        server.origin
    );
    // Any path but the trace's and the page's: nothing (the UI probes /status on 9001
    // for a trace processor; it must find none).
    let known = req.path == trace_path || req.path == page_path;
    let head = |status: &str, extra: &str| {
        format!(
            "HTTP/1.1 {status}\r\nConnection: close\r\nCache-Control: no-store\r\n\
             X-Content-Type-Options: nosniff\r\n{extra}\r\n"
        )
    };
    if !known {
        let _ = conn.write_all(head("404 Not Found", "Content-Length: 0\r\n").as_bytes());
        return Some(served);
    }
    match req.method.as_str() {
        "OPTIONS" => {
            // A CORS preflight (a Private Network Access one too, from a public page).
            let mut extra = cors.clone();
            extra.push_str("Access-Control-Allow-Methods: GET, HEAD, OPTIONS\r\n");
            if let Some(h) = req.header("Access-Control-Request-Headers") {
                let safe: String = h
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || ", -".contains(*c))
                    .collect();
                extra.push_str(&format!("Access-Control-Allow-Headers: {safe}\r\n"));
            }
            if req
                .header("Access-Control-Request-Private-Network")
                .is_some()
            {
                extra.push_str("Access-Control-Allow-Private-Network: true\r\n");
            }
            extra.push_str("Access-Control-Max-Age: 600\r\nContent-Length: 0\r\n");
            served.status = 204;
            let _ = conn.write_all(head("204 No Content", &extra).as_bytes());
        }
        "GET" | "HEAD" if req.path == page_path => {
            let body = page(&server.file.name, &server.origin);
            served.status = 200;
            let extra = format!(
                "Content-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n",
                body.len()
            );
            let _ = conn.write_all(head("200 OK", &extra).as_bytes());
            if req.method == "GET" {
                let _ = conn.write_all(body.as_bytes());
            }
        }
        "GET" | "HEAD" => {
            let len = server.file.len;
            let (status, start, end) = match req.header("Range").map(|r| range(r, len)) {
                None => ("200 OK", 0, len),
                Some(Some((a, b))) => ("206 Partial Content", a, b + 1),
                Some(None) => {
                    let extra =
                        format!("{cors}Content-Range: bytes */{len}\r\nContent-Length: 0\r\n");
                    served.status = 416;
                    let _ = conn.write_all(head("416 Range Not Satisfiable", &extra).as_bytes());
                    return Some(served);
                }
            };
            // The file's bytes as they are: a .fxt.gz stays gzip (no Content-Encoding),
            // the UI's trace processor unpacks it.
            let mut extra = format!(
                "{cors}Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n\
                 Content-Length: {}\r\nContent-Disposition: attachment; filename=\"{}\"\r\n",
                end - start,
                server.file.name
            );
            if status.starts_with("206") {
                extra.push_str(&format!(
                    "Content-Range: bytes {start}-{}/{len}\r\n",
                    end - 1
                ));
            }
            served.status = if status.starts_with("206") { 206 } else { 200 };
            if conn.write_all(head(status, &extra).as_bytes()).is_err() || req.method == "HEAD" {
                return Some(served);
            }
            let mut buf = vec![0u8; 1 << 20];
            let mut pos = start;
            while pos < end {
                if stop() {
                    return Some(served);
                }
                let want = ((end - pos) as usize).min(buf.len());
                let n = match server.file.file.read_at(&mut buf[..want], pos) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if conn.write_all(&buf[..n]).is_err() {
                    break;
                }
                pos += n as u64;
                served.bytes += n as u64;
            }
            served.complete = start == 0 && pos == len;
        }
        _ => {
            served.status = 405;
            let _ = conn.write_all(
                head(
                    "405 Method Not Allowed",
                    "Allow: GET, HEAD, OPTIONS\r\nContent-Length: 0\r\n",
                )
                .as_bytes(),
            );
        }
    }
    let _ = conn.flush();
    Some(served)
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn byte_ranges() {
        assert_eq!(range("bytes=0-9", 100), Some((0, 9)));
        assert_eq!(range("bytes=90-", 100), Some((90, 99)));
        assert_eq!(range("bytes=-10", 100), Some((90, 99)));
        assert_eq!(range("bytes=50-500", 100), Some((50, 99)));
        assert_eq!(range("bytes=100-", 100), None);
        assert_eq!(range("bytes=5-1", 100), None);
        assert_eq!(range("bytes=0-1,5-6", 100), None);
        assert_eq!(range("items=0-1", 100), None);
        assert_eq!(range("bytes=0-0", 0), None);
    }
}
