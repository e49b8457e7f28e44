//! Scraping a metrics listener as a monitoring system does: HTTP requests, samples of the text
//! format, Prometheus's own checker (`promtool check metrics`), a real Prometheus server and its
//! query API, and the hostile clients every listener must outlast.

use super::{skip, TempDir, WAIT};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sends `request` and reads the whole answer (the listener closes after each).
pub fn http(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(request.as_bytes()).expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    out
}

pub fn get(addr: &str, path: &str) -> String {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"))
}

/// The body of a 200 answer to `GET path`.
pub fn body_of(addr: &str, path: &str) -> String {
    let r = get(addr, path);
    assert!(r.starts_with("HTTP/1.1 200 "), "GET {path}: {r}");
    r.split_once("\r\n\r\n").expect("a head and a body").1.to_string()
}

/// The metrics page.
pub fn metrics(addr: &str) -> String {
    body_of(addr, "/metrics")
}

/// The value of the sample `name` (with its labels, as written, e.g. `x{lane="0"}`).
pub fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().expect("a number"))
}

/// `promtool check metrics` (Prometheus's own linter and parser) on `page`: passes without a
/// word, or fails the test; skips where promtool is missing.
pub fn promtool_accepts(page: &str) {
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Err(e) => skip(&format!("promtool (Debian's prometheus) cannot run: {e}")),
        Ok(mut child) => {
            child.stdin.take().expect("stdin").write_all(page.as_bytes()).expect("feed promtool");
            let out = child.wait_with_output().expect("promtool ran");
            assert!(
                out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
                "promtool check metrics: {}{}\n{page}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A real Prometheus server scraping targets every second, killed and its folder removed when
/// dropped.
pub struct Prometheus {
    child: Child,
    web: String,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts one that scrapes `targets` (host:port) under the job `job`; `None` (after
    /// [`skip`]) where prometheus is missing.
    pub fn scraping(test: &str, job: &str, targets: &[&str]) -> Option<Prometheus> {
        if Command::new("prometheus").arg("--version").output().is_err() {
            skip("prometheus (Debian's prometheus) cannot run");
            return None;
        }
        let dir = TempDir::new(test);
        let cfg = dir.path().join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .expect("write prometheus.yml");
        // A port for Prometheus's own API: free when asked, taken by Prometheus at once.
        let web =
            std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Some(Prometheus { child, web: web.to_string(), _dir: dir })
    }

    /// The answer of the query API to `query` (URL-encoded), once Prometheus listens.
    pub fn query(&self, query: &str) -> Option<String> {
        TcpStream::connect(&self.web).ok()?;
        Some(get(&self.web, &format!("/api/v1/query?query={query}")))
    }

    /// Waits until `query` (URL-encoded) has a first value that `done` accepts; returns it.
    pub fn wait_value(&self, query: &str, what: &str, done: impl Fn(f64) -> bool) -> f64 {
        let t0 = Instant::now();
        loop {
            let answer = self.query(query);
            if let Some(v) = answer.as_deref().and_then(|a| a.split("\"value\":[").nth(1)) {
                let v: f64 = v.split('"').nth(1).and_then(|x| x.parse().ok()).expect("a value");
                if done(v) {
                    return v;
                }
            }
            assert!(t0.elapsed() < 2 * WAIT, "Prometheus never showed {what}: {answer:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The hostile clients a metrics listener must outlast, one after the other, calling
/// `still_serves` beside each to check that the process goes on doing its work: a slow client
/// (half a request head, then nothing: closed at the listener's deadline, unanswered), a 100 KiB
/// header (431), 500 connections held open (the listener serves its 64 and closes the rest);
/// then, once they are gone, it serves a scrape again. Returns the page scraped after the last
/// `still_serves`.
pub fn outlasts_hostile_clients(addr: &str, mut still_serves: impl FnMut(&str)) -> String {
    let mut slow = TcpStream::connect(addr).expect("connect");
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").expect("send half a head");
    still_serves("beside a slow metrics client");
    assert!(get(addr, "/healthz").starts_with("HTTP/1.1 200 "), "a scrape beside a slow client");
    slow.set_read_timeout(Some(WAIT)).expect("timeout");
    let mut out = Vec::new();
    slow.read_to_end(&mut out).expect("the slow client is closed, not left hanging");
    assert!(out.is_empty(), "the slow client got {:?}", String::from_utf8_lossy(&out));

    let big = format!("GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(100 << 10));
    let r = http(addr, &big);
    assert!(r.starts_with("HTTP/1.1 431 "), "{}", &r[..r.len().min(200)]);
    still_serves("after a huge header");

    let crowd: Vec<TcpStream> = (0..500).filter_map(|_| TcpStream::connect(addr).ok()).collect();
    assert!(!crowd.is_empty());
    still_serves("while 500 metrics connections are held");
    drop(crowd);
    let t0 = Instant::now();
    loop {
        let mut s = TcpStream::connect(addr).expect("connect");
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        if out.starts_with("HTTP/1.1 200 ") {
            still_serves("after the crowd left");
            return metrics(addr);
        }
        assert!(t0.elapsed() < WAIT, "the metrics listener never served again: {out:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
