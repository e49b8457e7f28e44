//! The metrics listener: HTTP/1.1 on TCP, one request a connection, serving
//! - `GET /metrics`: the page [`Pages::metrics`] renders, at the time of the request;
//! - `GET /healthz`: 200 `ok` while [`Pages::health`] says so, else 503 with its reason;
//! - `GET /readyz`: 200 `ready` while [`Pages::ready`] says so, else 503 with its reason;
//!
//! `HEAD` of each, 404 for any other path, 405 for any other method, 400 for a request that is
//! not HTTP.
//!
//! It runs on threads of its own (an acceptor, and one per connection), never the role's, and
//! a client cannot stall it or the role: a request head must arrive whole within
//! [`Limits::request_timeout`] (a slow client is dropped), must fit in [`Limits::max_head`]
//! (a longer one is answered 431 and closed), and at most [`Limits::max_connections`] are
//! served at once (one more is closed at once, unread).

use crate::text::CONTENT_TYPE;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the listener serves: closures called on its connection threads at each request.
pub struct Pages {
    /// The `/metrics` page, in the text exposition format.
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    /// `/healthz`: `Ok` while the role serves, else why not.
    pub health: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// `/readyz`: `Ok` when the role is ready for what a load balancer sends it, else why not.
    pub ready: Box<dyn Fn() -> Result<(), String> + Send + Sync>,
}

/// Bounds on what one client may take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of a request's line and headers; more is answered 431 and the connection closed.
    pub max_head: usize,
    /// Connections served at once; one more is closed at once.
    pub max_connections: usize,
    /// How long a client has to send its request head, and the answer to be taken.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_head: 8 << 10, max_connections: 64, request_timeout: Duration::from_secs(5) }
    }
}

/// A bound metrics listener, not yet serving.
pub struct MetricsListener {
    listener: TcpListener,
    addr: SocketAddr,
}

impl MetricsListener {
    /// Binds `addr` (`host:port`; port 0 takes any free port).
    pub fn bind(addr: &str) -> io::Result<MetricsListener> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(MetricsListener { listener, addr })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `pages` from now on, on a thread of its own, until the returned [`Serving`] is
    /// dropped (or for as long as the process runs, [`Serving::forever`]).
    pub fn serve(self, pages: Pages, limits: Limits) -> io::Result<Serving> {
        let pages = Arc::new(pages);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("mojim-metrics".into())
            .spawn(move || accept_loop(self.listener, pages, limits, &stopped))?;
        Ok(Serving { addr: self.addr, stop, thread: Some(thread) })
    }
}

/// A listener serving its pages. Dropping it stops accepting and frees the port (connections
/// being answered finish on their own threads, within the request timeout), so that a role
/// that opens again, such as a primary reopened after a loss, can bind the same address.
pub struct Serving {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Serves for as long as the process runs.
    pub fn forever(mut self) {
        self.thread = None;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.stop.store(true, Ordering::Release);
        // Wakes the acceptor with a connection of its own (to loopback for a wildcard).
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok() {
            let _ = thread.join();
        }
    }
}

fn accept_loop(listener: TcpListener, pages: Arc<Pages>, limits: Limits, stop: &AtomicBool) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                // Out of descriptors or memory: wait for connections to end rather than spin.
                tracing::warn!(error = %e, "metrics listener: accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if stop.load(Ordering::Acquire) {
            return;
        }
        if active.load(Ordering::Acquire) >= limits.max_connections {
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(active.clone());
        let pages = pages.clone();
        let spawned = std::thread::Builder::new().name("mojim-metrics-conn".into()).spawn(move || {
            let _slot = slot;
            let _ = serve_connection(stream, &pages, limits);
        });
        if let Err(e) = spawned {
            // The closure, with the stream and the slot, was dropped: the connection is closed.
            tracing::warn!(error = %e, "metrics listener: cannot start a connection thread");
        }
    }
}

/// A connection's place among the ones served at once, given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads one request head, answers it, and closes.
fn serve_connection(mut s: TcpStream, pages: &Pages, limits: Limits) -> io::Result<()> {
    let deadline = Instant::now() + limits.request_timeout;
    s.set_write_timeout(Some(limits.request_timeout))?;
    let mut head = vec![0u8; limits.max_head];
    let mut len = 0;
    let end = loop {
        if len == head.len() {
            respond(
                &mut s,
                431,
                "Request Header Fields Too Large",
                "text/plain",
                b"request head too large\n",
                false,
            )?;
            return linger(s, deadline);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut head[len..])?;
        if n == 0 {
            return Ok(());
        }
        // The blank line may straddle two reads: look again from a few bytes back.
        let from = len.saturating_sub(3);
        len += n;
        if let Some(i) = head[from..len].windows(4).position(|w| w == b"\r\n\r\n") {
            break from + i;
        }
    };
    let line = head[..end].split(|&b| b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line).unwrap_or("").trim_end_matches('\r');
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version)) = (method, target, version) else {
        return respond(&mut s, 400, "Bad Request", "text/plain", b"not an HTTP request\n", false);
    };
    if !version.starts_with("HTTP/1.") || parts.next().is_some() {
        return respond(&mut s, 400, "Bad Request", "text/plain", b"not an HTTP/1 request\n", false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(&mut s, 405, "Method Not Allowed", "text/plain", b"only GET and HEAD\n", false);
    }
    let path = target.split('?').next().unwrap_or(target);
    let check = |r: Result<(), String>, ok: &str| match r {
        Ok(()) => (200, "OK", format!("{ok}\n")),
        Err(why) => (503, "Service Unavailable", format!("{why}\n")),
    };
    let (code, reason, body, kind) = match path {
        "/metrics" => (200, "OK", (pages.metrics)(), CONTENT_TYPE),
        "/healthz" => {
            let (c, r, b) = check((pages.health)(), "ok");
            (c, r, b, "text/plain")
        }
        "/readyz" => {
            let (c, r, b) = check((pages.ready)(), "ready");
            (c, r, b, "text/plain")
        }
        _ => (404, "Not Found", "not found: try /metrics, /healthz or /readyz\n".into(), "text/plain"),
    };
    respond(&mut s, code, reason, kind, body.as_bytes(), head_only)
}

fn respond(
    s: &mut TcpStream,
    code: u16,
    reason: &str,
    kind: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if code == 405 {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(body);
    }
    s.write_all(&bytes)?;
    s.flush()
}

/// After an answer sent before the request was read whole: stop sending, and read what the
/// client still sends (at most 1 MiB, until `deadline`) before closing, so that the close does
/// not reset the connection and lose the answer.
fn linger(mut s: TcpStream, deadline: Instant) -> io::Result<()> {
    s.shutdown(Shutdown::Write)?;
    let mut sink = [0u8; 16 << 10];
    let mut left = 1usize << 20;
    while left > 0 {
        let t = deadline.saturating_duration_since(Instant::now());
        if t.is_zero() {
            break;
        }
        s.set_read_timeout(Some(t))?;
        match s.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(limits: Limits) -> SocketAddr {
        let l = MetricsListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr();
        let pages = Pages {
            metrics: Box::new(|| "# HELP m M.\n# TYPE m gauge\nm 1\n".into()),
            health: Box::new(|| Ok(())),
            ready: Box::new(|| Err("the data area is inconsistent".into())),
        };
        l.serve(pages, limits).unwrap().forever();
        addr
    }

    #[test]
    fn a_dropped_listener_frees_its_port_for_the_next() {
        let pages = || Pages {
            metrics: Box::new(|| "# HELP m M.\n# TYPE m gauge\nm 1\n".into()),
            health: Box::new(|| Ok(())),
            ready: Box::new(|| Ok(())),
        };
        let first = MetricsListener::bind("127.0.0.1:0").unwrap();
        let addr = first.local_addr();
        let serving = first.serve(pages(), Limits::default()).unwrap();
        assert!(ask(addr, b"GET /healthz HTTP/1.1\r\n\r\n").ends_with("ok\n"));
        drop(serving);
        assert!(TcpStream::connect(addr).is_err(), "nothing listens on {addr} once dropped");
        let again = MetricsListener::bind(&addr.to_string()).expect("the same address, free again");
        let _serving = again.serve(pages(), Limits::default()).unwrap();
        assert!(ask(addr, b"GET /healthz HTTP/1.1\r\n\r\n").ends_with("ok\n"));
    }

    fn ask(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn paths_methods_and_answers() {
        let a = start(Limits::default());
        let r = ask(a, b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n# HELP m M.\n# TYPE m gauge\nm 1\n"),
            "{r}"
        );
        assert!(r.contains("Content-Type: text/plain; version=0.0.4"), "{r}");
        let r = ask(a, b"HEAD /metrics HTTP/1.0\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n")
                && r.ends_with("\r\n\r\n")
                && r.contains("Content-Length: 31"),
            "{r}"
        );
        assert!(ask(a, b"GET /healthz HTTP/1.1\r\n\r\n").ends_with("\r\n\r\nok\n"));
        let r = ask(a, b"GET /readyz HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503 ") && r.ends_with("the data area is inconsistent\n"), "{r}");
        assert!(ask(a, b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        let r = ask(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405 ") && r.contains("Allow: GET, HEAD\r\n"), "{r}");
        assert!(ask(a, b"\x16\x03\x01 hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
    }

    #[test]
    fn a_head_past_the_limit_is_431_and_a_slow_client_is_dropped() {
        // The whole exchange runs within the timeout from the accept: the server must read
        // the head's first `max_head` bytes to answer 431, and a loaded machine need not do so
        // within 300 ms (the connection is then closed unanswered). The slow client waits the
        // timeout out.
        let a = start(Limits { request_timeout: Duration::from_secs(2), ..Limits::default() });
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(100 << 10, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        assert!(ask(a, &big).starts_with("HTTP/1.1 431 "));
        // A client that never finishes its head is closed (read gives end of stream).
        let mut slow = TcpStream::connect(a).unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        let mut out = Vec::new();
        slow.read_to_end(&mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn connections_past_the_cap_are_closed_and_the_rest_served() {
        let a = start(Limits {
            max_connections: 4,
            request_timeout: Duration::from_secs(60),
            ..Limits::default()
        });
        let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(a).unwrap()).collect();
        // Each held connection is counted once the acceptor takes it: the fifth, accepted after
        // them, is closed unanswered.
        let mut extra = TcpStream::connect(a).unwrap();
        let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
        let mut out = Vec::new();
        let _ = extra.read_to_end(&mut out);
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        drop(held);
        // Once they are gone, requests are answered again.
        let t0 = Instant::now();
        loop {
            let mut s = TcpStream::connect(a).unwrap();
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.ends_with("ok\n") {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "never answered again");
            std::thread::yield_now();
        }
    }
}
