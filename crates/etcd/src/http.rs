//! A minimal HTTP/1.1 client: one `POST` per connection, with a deadline on the whole exchange.
//!
//! It reads exactly one response as framed by `Content-Length` or `Transfer-Encoding: chunked`
//! (trailers included, which etcd's gateway sends after errors) and never waits for the server to
//! close the connection: etcd keeps it open even when asked to close it after streaming calls.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};

use crate::tls::EtcdTls;

/// Longest status line plus headers (or trailers) accepted.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest response body accepted; etcd's own request limit is 1.5 MiB, a prefix read may be more.
pub(crate) const MAX_BODY_BYTES: usize = 64 << 20;

/// One HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// Why an exchange failed, split by whether the server may have seen the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Resolving or connecting failed: no byte of the request left this process.
    NotSent(String),
    /// The connection failed after the request started to go out; the server may have acted.
    Sent(String),
    /// The server answered with something that is not HTTP/1.1 as framed here.
    Malformed(String),
}

/// Sends `POST path` with a JSON `body` to `addr` ("host:port"), over TLS if `tls` is given,
/// and reads the response, all within `timeout` (the TLS handshake included).
pub(crate) fn post(
    addr: &str,
    tls: Option<&EtcdTls>,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<Response, Failure> {
    let deadline = Instant::now() + timeout;
    let socket = DeadlineSocket { stream: connect(addr, deadline)?, deadline };
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    match tls {
        None => exchange(socket, &request, false),
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| Failure::NotSent(format!("{host:?} is no host name for TLS: {e}")))?;
            let conn = ClientConnection::new(tls.config.clone(), name)
                .map_err(|e| Failure::NotSent(crate::tls::explain(&e, tls.has_cert())))?;
            let mut stream = StreamOwned::new(conn, socket);
            // Nothing of the request leaves before the handshake is done: a failure is NotSent.
            while stream.conn.is_handshaking() {
                let r = stream.conn.complete_io(&mut stream.sock);
                r.map_err(|e| Failure::NotSent(io_reason(&e, tls.has_cert())))?;
            }
            exchange(stream, &request, tls.has_cert())
        }
    }
}

/// Writes `request` and reads one response; `has_cert`: whether a TLS client presented a
/// certificate.
fn exchange(mut stream: impl Read + Write, request: &[u8], has_cert: bool) -> Result<Response, Failure> {
    let sent = |e: io::Error| Failure::Sent(io_reason(&e, has_cert));
    stream.write_all(request).map_err(sent)?;
    stream.flush().map_err(sent)?;
    let mut reader = BufReader::new(Counted { inner: stream, read: 0 });
    let r = read_response(&mut reader);
    let answered = reader.get_ref().read > 0;
    r.map_err(|e| match e {
        // TLS 1.3 servers check the client's certificate after the client's side of the
        // handshake is done, so their refusal comes as an alert where the answer should be:
        // the session was refused before the request reached etcd.
        ReadError::Io(e) if !answered && refused_session(&e) => Failure::NotSent(io_reason(&e, has_cert)),
        ReadError::Io(e) => Failure::Sent(io_reason(&e, has_cert)),
        ReadError::Malformed(m) => Failure::Malformed(m),
    })
}

/// Whether `e` is a fatal TLS alert from the server about the handshake.
fn refused_session(e: &io::Error) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnknownCA
                | A::CertificateUnknown
                | A::CertificateExpired
                | A::CertificateRevoked
                | A::UnsupportedCertificate
                | A::HandshakeFailure
                | A::AccessDenied
        ))
    )
}

/// An I/O error in words, with a hint for the TLS failures.
fn io_reason(e: &io::Error, has_cert: bool) -> String {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(tls) => crate::tls::explain(tls, has_cert),
        None => format!("{e}"),
    }
}

/// Connects to the first address of `addr` that accepts before `deadline`.
fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, Failure> {
    let addrs =
        addr.to_socket_addrs().map_err(|e| Failure::NotSent(format!("cannot resolve {addr}: {e}")))?;
    let mut last = format!("{addr} resolved to no address");
    for a in addrs {
        let wait = left(deadline).map_err(|e| Failure::NotSent(format!("{e}")))?;
        match TcpStream::connect_timeout(&a, wait) {
            Ok(s) => {
                // Requests are written in one call, so Nagle's delay would only add latency.
                s.set_nodelay(true).map_err(|e| Failure::NotSent(format!("{e}")))?;
                return Ok(s);
            }
            Err(e) => last = format!("connect to {a}: {e}"),
        }
    }
    Err(Failure::NotSent(last))
}

/// The time left until `deadline`, or a `TimedOut` error once it has passed.
fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer within the timeout"));
    }
    Ok(d)
}

/// A socket whose every read and write gives up at one deadline, however the bytes trickle.
struct DeadlineSocket {
    stream: TcpStream,
    deadline: Instant,
}

fn timed_out(r: io::Result<usize>) -> io::Result<usize> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            Err(io::Error::new(io::ErrorKind::TimedOut, "no answer within the timeout"))
        }
        r => r,
    }
}

impl Read for DeadlineSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(left(self.deadline)?))?;
        timed_out(self.stream.read(buf))
    }
}

impl Write for DeadlineSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(left(self.deadline)?))?;
        timed_out(self.stream.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// A reader that counts the bytes it delivered.
struct Counted<R> {
    inner: R,
    read: usize,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n;
        Ok(n)
    }
}

#[derive(Debug)]
enum ReadError {
    Io(io::Error),
    Malformed(String),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn malformed<T>(what: impl Into<String>) -> Result<T, ReadError> {
    Err(ReadError::Malformed(what.into()))
}

/// How the body of a response is delimited.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// Reads one response: status line, headers, body. 1xx responses are skipped.
fn read_response(r: &mut impl BufRead) -> Result<Response, ReadError> {
    loop {
        let mut head_budget = MAX_HEAD_BYTES;
        let status_line = read_line(r, &mut head_budget)?;
        let status = parse_status(&status_line)?;
        let mut length = None;
        let mut chunked = false;
        loop {
            let line = read_line(r, &mut head_budget)?;
            if line.is_empty() {
                break;
            }
            let Some((name, value)) = line.split_once(':') else {
                return malformed(format!("header line without a colon: {line:?}"));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                let n: usize = match value.parse() {
                    Ok(n) => n,
                    Err(_) => return malformed(format!("bad Content-Length {value:?}")),
                };
                if length.is_some_and(|m| m != n) {
                    return malformed("two different Content-Length headers");
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                let last = value.rsplit(',').next().unwrap_or("").trim();
                if !last.eq_ignore_ascii_case("chunked") {
                    return malformed(format!("unsupported Transfer-Encoding {value:?}"));
                }
                chunked = true;
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        let framing = match (status, chunked, length) {
            (204 | 304, _, _) => Framing::Length(0),
            (_, true, _) => Framing::Chunked,
            (_, false, Some(n)) => Framing::Length(n),
            (_, false, None) => Framing::UntilClose,
        };
        let body = read_body(r, framing)?;
        return Ok(Response { status, body });
    }
}

fn parse_status(line: &str) -> Result<u16, ReadError> {
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return malformed(format!("not an HTTP/1.x status line: {line:?}"));
    }
    match code.parse::<u16>() {
        Ok(c) if (100..600).contains(&c) => Ok(c),
        _ => malformed(format!("bad status code in {line:?}")),
    }
}

fn read_body(r: &mut impl BufRead, framing: Framing) -> Result<Vec<u8>, ReadError> {
    match framing {
        Framing::Length(n) => {
            if n > MAX_BODY_BYTES {
                return malformed(format!("body of {n} bytes is over the {MAX_BODY_BYTES}-byte limit"));
            }
            let mut body = vec![0; n];
            r.read_exact(&mut body)?;
            Ok(body)
        }
        Framing::UntilClose => {
            let mut body = Vec::new();
            r.take(MAX_BODY_BYTES as u64 + 1).read_to_end(&mut body)?;
            if body.len() > MAX_BODY_BYTES {
                return malformed(format!("body is over the {MAX_BODY_BYTES}-byte limit"));
            }
            Ok(body)
        }
        Framing::Chunked => {
            let mut body = Vec::new();
            let mut budget = MAX_HEAD_BYTES;
            loop {
                let line = read_line(r, &mut budget)?;
                let size = line.split(';').next().unwrap_or("").trim();
                let Ok(size) = usize::from_str_radix(size, 16) else {
                    return malformed(format!("bad chunk size line {line:?}"));
                };
                if size == 0 {
                    // Trailers (etcd sends `Grpc-Trailer-Content-Type` after errors), then a blank line.
                    while !read_line(r, &mut budget)?.is_empty() {}
                    return Ok(body);
                }
                if size > MAX_BODY_BYTES - body.len() {
                    return malformed(format!("chunked body is over the {MAX_BODY_BYTES}-byte limit"));
                }
                let start = body.len();
                body.resize(start + size, 0);
                r.read_exact(&mut body[start..])?;
                if !read_line(r, &mut budget)?.is_empty() {
                    return malformed("chunk not followed by CRLF");
                }
            }
        }
    }
}

/// Reads one line ending in LF (CR before it dropped), charging its length to `budget`.
fn read_line(r: &mut impl BufRead, budget: &mut usize) -> Result<String, ReadError> {
    let mut buf = Vec::new();
    let n = r.take(*budget as u64).read_until(b'\n', &mut buf)?;
    if buf.last() != Some(&b'\n') {
        if n == *budget {
            return malformed(format!("header or chunk lines over the {MAX_HEAD_BYTES}-byte limit"));
        }
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-response").into());
    }
    *budget -= n;
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    match String::from_utf8(buf) {
        Ok(s) => Ok(s),
        Err(_) => malformed("non-UTF-8 bytes in a header or chunk line"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    fn parse(raw: &[u8]) -> Result<Response, ReadError> {
        read_response(&mut &raw[..])
    }

    #[test]
    fn content_length_body() {
        let r = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhelloEXTRA").unwrap();
        assert_eq!(r, Response { status: 200, body: b"hello".to_vec() });
    }

    #[test]
    fn chunked_body_with_extension_and_trailers() {
        let raw = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n\
                    3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n";
        let r = parse(raw).unwrap();
        assert_eq!(r, Response { status: 404, body: b"abcde".to_vec() });
    }

    #[test]
    fn informational_responses_are_skipped() {
        let r = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(r.status, 200);
    }

    #[test]
    fn body_until_close_without_framing() {
        let r = parse(b"HTTP/1.0 200 OK\r\n\r\nall of it").unwrap();
        assert_eq!(r.body, b"all of it");
    }

    #[test]
    fn truncated_response_is_an_io_error() {
        assert!(matches!(parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"), Err(ReadError::Io(_))));
        assert!(matches!(parse(b"HTTP/1.1 200 OK\r\nContent-Le"), Err(ReadError::Io(_))));
    }

    #[test]
    fn malformed_responses_are_named() {
        for raw in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 2x0 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        ] {
            assert!(matches!(parse(raw), Err(ReadError::Malformed(_))), "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn endless_headers_hit_the_limit() {
        let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
        while raw.len() <= MAX_HEAD_BYTES {
            raw.extend_from_slice(b"X-Filler: 0123456789012345678901234567890123456789\r\n");
        }
        assert!(matches!(parse(&raw), Err(ReadError::Malformed(_))));
    }

    /// Serves one connection with `reply`, then holds it open as etcd does.
    fn serve_once(reply: &'static [u8]) -> (String, thread::JoinHandle<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                request.extend_from_slice(&buf[..n]);
            }
            for piece in reply.chunks(7) {
                conn.write_all(piece).unwrap();
                conn.flush().unwrap();
            }
            thread::sleep(Duration::from_millis(500));
            request
        });
        (addr, server)
    }

    #[test]
    fn post_does_not_wait_for_the_server_to_close() {
        let (addr, server) =
            serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{}\r\n\r\n0\r\n\r\n");
        let started = Instant::now();
        let r = post(&addr, None, "/v3/kv/range", b"{}", Duration::from_secs(5)).unwrap();
        assert!(started.elapsed() < Duration::from_millis(400), "waited for close");
        assert_eq!(r, Response { status: 200, body: b"{}\r\n".to_vec() });
        let request = String::from_utf8(server.join().unwrap()).unwrap();
        assert!(request.starts_with("POST /v3/kv/range HTTP/1.1\r\n"), "{request}");
        assert!(request.contains("Content-Length: 2\r\n"), "{request}");
    }

    #[test]
    fn silent_server_times_out_as_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let started = Instant::now();
        let r = post(&addr, None, "/v3/kv/range", b"{}", Duration::from_millis(200));
        assert!(matches!(r, Err(Failure::Sent(_))), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
    }

    #[test]
    fn a_silent_tls_handshake_times_out_as_not_sent() {
        let ca = mojim_transport::tls::pki::Ca::new("CA").unwrap();
        let p = std::path::Path::new("ca.pem");
        let tls = EtcdTls::from_pem((p, ca.cert_pem().as_bytes()), None).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let started = Instant::now();
        let r = post(&addr, Some(&tls), "/v3/kv/range", b"{}", Duration::from_millis(200));
        assert!(matches!(&r, Err(Failure::NotSent(e)) if e.contains("timeout")), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
    }

    #[test]
    fn refused_connection_is_not_sent() {
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let r = post(&addr, None, "/", b"", Duration::from_secs(1));
        assert!(matches!(r, Err(Failure::NotSent(_))), "{r:?}");
    }
}
