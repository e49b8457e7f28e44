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
    let (status, framing) = read_head(r)?;
    let body = read_body(r, framing)?;
    Ok(Response { status, body })
}

/// Reads a response's status line and headers, 1xx responses skipped, and says how its body
/// is framed.
fn read_head(r: &mut impl BufRead) -> Result<(u16, Framing), ReadError> {
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
        return Ok((status, framing));
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

/// A streamed answer (`/v3/watch`): its body is read line by line as the server sends it.
pub(crate) struct Stream {
    lines: BufReader<Dechunk<BufReader<Conn>>>,
}

/// What [`open_stream`] got when it could not start a stream.
#[derive(Debug)]
pub(crate) enum StreamFailure {
    /// The exchange itself failed.
    Exchange(Failure),
    /// The server answered with a complete (not streamed) response, an error status or a body
    /// that is not chunked.
    Answered(Response),
}

/// Sends `POST path` with `body` to `addr` and, if the server answers 2xx with a chunked body,
/// returns the body as a stream together with a handle on the socket (shutting it down ends a
/// read blocked on the stream). Connecting, sending and the answer's head must finish within
/// `timeout`; after that each read of the stream waits at most `idle`.
pub(crate) fn open_stream(
    addr: &str,
    tls: Option<&EtcdTls>,
    path: &str,
    body: &[u8],
    timeout: Duration,
    idle: Duration,
) -> Result<(Stream, TcpStream), StreamFailure> {
    let fail = StreamFailure::Exchange;
    let deadline = Instant::now() + timeout;
    let tcp = connect(addr, deadline).map_err(fail)?;
    let handle = tcp.try_clone().map_err(|e| fail(Failure::NotSent(format!("duplicate the socket: {e}"))))?;
    let socket = TimedSocket { stream: tcp, deadline: Some(deadline), idle };
    let has_cert = tls.is_some_and(EtcdTls::has_cert);
    let mut conn = match tls {
        None => Conn::Plain(socket),
        Some(tls) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| fail(Failure::NotSent(format!("{host:?} is no host name for TLS: {e}"))))?;
            let tls_conn = ClientConnection::new(tls.config.clone(), name)
                .map_err(|e| fail(Failure::NotSent(crate::tls::explain(&e, has_cert))))?;
            let mut stream = StreamOwned::new(tls_conn, socket);
            while stream.conn.is_handshaking() {
                let r = stream.conn.complete_io(&mut stream.sock);
                r.map_err(|e| fail(Failure::NotSent(io_reason(&e, has_cert))))?;
            }
            Conn::Tls(Box::new(stream))
        }
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let sent = |e: io::Error| fail(Failure::Sent(io_reason(&e, has_cert)));
    conn.write_all(request.as_bytes()).map_err(sent)?;
    conn.write_all(body).map_err(sent)?;
    conn.flush().map_err(sent)?;
    let mut reader = BufReader::new(conn);
    let read_failed = |e: ReadError| match e {
        ReadError::Io(e) => fail(Failure::Sent(io_reason(&e, has_cert))),
        ReadError::Malformed(m) => fail(Failure::Malformed(m)),
    };
    let (status, framing) = read_head(&mut reader).map_err(read_failed)?;
    match framing {
        Framing::Chunked if (200..300).contains(&status) => {
            reader.get_mut().socket().deadline = None;
            let dechunk = Dechunk { inner: reader, left: 0, first: true, done: false };
            Ok((Stream { lines: BufReader::new(dechunk) }, handle))
        }
        framing => {
            let body = read_body(&mut reader, framing).map_err(read_failed)?;
            Err(StreamFailure::Answered(Response { status, body }))
        }
    }
}

impl Stream {
    /// The next line of the body without its `\n`, or `None` once the body has ended. A line
    /// longer than `max` bytes is an error, as is a read that waited longer than the idle time.
    pub(crate) fn next_line(&mut self, max: usize) -> io::Result<Option<Vec<u8>>> {
        let mut line = Vec::new();
        let n = (&mut self.lines).take(max as u64 + 1).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(None);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a line over {max} bytes")));
        } else {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the stream ended mid-line"));
        }
        Ok(Some(line))
    }
}

/// A socket whose reads give up at a deadline while one is set, and otherwise after `idle`.
struct TimedSocket {
    stream: TcpStream,
    deadline: Option<Instant>,
    idle: Duration,
}

impl TimedSocket {
    fn wait(&self) -> io::Result<Duration> {
        match self.deadline {
            Some(d) => left(d),
            None => Ok(self.idle),
        }
    }
}

impl Read for TimedSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.wait()?))?;
        timed_out(self.stream.read(buf))
    }
}

impl Write for TimedSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.wait()?))?;
        timed_out(self.stream.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// A streaming connection, plain or TLS.
enum Conn {
    Plain(TimedSocket),
    Tls(Box<StreamOwned<ClientConnection, TimedSocket>>),
}

impl Conn {
    fn socket(&mut self) -> &mut TimedSocket {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &mut s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// The data of a chunked body, read as it arrives.
struct Dechunk<R> {
    inner: R,
    /// Bytes left in the current chunk.
    left: usize,
    /// No chunk has been read yet (none is followed by its CRLF).
    first: bool,
    /// The last chunk was read.
    done: bool,
}

impl<R: BufRead> Read for Dechunk<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let framing = |e: ReadError| match e {
            ReadError::Io(e) => e,
            ReadError::Malformed(m) => io::Error::new(io::ErrorKind::InvalidData, m),
        };
        while self.left == 0 {
            if self.done || buf.is_empty() {
                return Ok(0);
            }
            let mut budget = MAX_HEAD_BYTES;
            if !self.first && !read_line(&mut self.inner, &mut budget).map_err(framing)?.is_empty() {
                return Err(framing(ReadError::Malformed("chunk not followed by CRLF".into())));
            }
            self.first = false;
            let line = read_line(&mut self.inner, &mut budget).map_err(framing)?;
            let size = line.split(';').next().unwrap_or("").trim();
            let Ok(size) = usize::from_str_radix(size, 16) else {
                return Err(framing(ReadError::Malformed(format!("bad chunk size line {line:?}"))));
            };
            if size == 0 {
                while !read_line(&mut self.inner, &mut budget).map_err(framing)?.is_empty() {}
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed mid-chunk"));
        }
        self.left -= n;
        Ok(n)
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
    fn a_chunked_stream_is_read_line_by_line() {
        let raw = b"5\r\nab\ncd\r\n3;x=y\r\ne\nf\r\n0\r\nTrailer: 1\r\n\r\n";
        let dechunk = Dechunk { inner: &raw[..], left: 0, first: true, done: false };
        let mut lines = BufReader::new(dechunk);
        let mut all = String::new();
        lines.read_to_string(&mut all).unwrap();
        assert_eq!(all, "ab\ncde\nf");
        let bad = b"4\r\nabcdXX3\r\n";
        let mut dechunk = Dechunk { inner: &bad[..], left: 0, first: true, done: false };
        let mut buf = Vec::new();
        assert_eq!(dechunk.read_to_end(&mut buf).unwrap_err().kind(), io::ErrorKind::InvalidData);
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

    /// Serves one connection with `reply`, then holds it open as etcd does, until the client
    /// closes it (at most 30 s).
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
            conn.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            // The rest of the request's body, then the client's close (or an error).
            while conn.read(&mut buf).is_ok_and(|n| n > 0) {}
            request
        });
        (addr, server)
    }

    #[test]
    fn post_does_not_wait_for_the_server_to_close() {
        let (addr, server) =
            serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{}\r\n\r\n0\r\n\r\n");
        let started = Instant::now();
        let r = post(&addr, None, "/v3/kv/range", b"{}", Duration::from_secs(10));
        // The server holds the connection until this side closes it: a client that waited for
        // the close would run into its 10 s timeout. 5 s leaves a loaded machine room (a bound
        // of 400 ms against a server that closed after 500 ms left it 100 ms).
        let took = started.elapsed();
        assert!(took < Duration::from_secs(5), "waited for close: {took:?}, {r:?}");
        assert_eq!(r.unwrap(), Response { status: 200, body: b"{}\r\n".to_vec() });
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
