//! A minimal RESP2 client: commands out as arrays of bulk strings, pipelined through one
//! buffer; replies in, parsed with a bound on every size.
//!
//! Only what the Redis backend needs, over a std [`TcpStream`], or a rustls session on one
//! ([`Conn::connect_tls`]). The parser reads
//! from any [`BufRead`], so it is tested on bytes alone. Every size it reads is bounded (a
//! line, a bulk string, an array, nesting): a server that sends more breaks the protocol and
//! gets a [`RespError::Protocol`], never an allocation of its choosing.
//!
//! Writing buffers commands ([`Conn::begin`], [`Conn::arg`], [`Conn::arg_view`]) and sends them
//! in large writes ([`Conn::flush_if_full`], [`Conn::flush`]); replies are read in order
//! afterwards. Redis buffers the replies of a pipeline for a normal client however long it
//! is, so writing a whole batch before reading cannot deadlock.

use mojim_region::MapSlice;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::tls::RedisTls;
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};

/// The longest line (a status, an error, an integer, a length) a reply may have, CRLF excluded.
pub const MAX_LINE: usize = 64 << 10;
/// The longest bulk string [`read_reply`] takes. Pages (4096 bytes) and keys are far shorter.
pub const MAX_BULK: usize = 1 << 20;
/// The most elements of one array [`read_reply`] takes.
pub const MAX_ELEMENTS: usize = 1 << 20;
/// How deep arrays may nest in a reply (EXEC and SCAN need 2).
pub const MAX_DEPTH: usize = 4;
/// Buffered command bytes past which [`Conn::flush_if_full`] writes them out.
pub const FLUSH_AT: usize = 256 << 10;

/// A connection to the server: a socket, or a TLS session on one.
enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The TLS handshake on `stream`, the server named by the host of `addr`.
fn handshake(
    addr: &str,
    mut stream: TcpStream,
    tls: &RedisTls,
) -> Result<StreamOwned<ClientConnection, TcpStream>, RespError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let bad =
        |e: String| RespError::Io { op: "start TLS", source: io::Error::new(io::ErrorKind::InvalidInput, e) };
    let name =
        ServerName::try_from(host.to_owned()).map_err(|e| bad(format!("{host:?} is no host name: {e}")))?;
    let mut conn = ClientConnection::new(tls.config.clone(), name).map_err(|e| bad(e.to_string()))?;
    while conn.is_handshaking() {
        let checked = "the TLS handshake (the server's certificate must be signed by [rvm] redis_ca_file and name the host)";
        conn.complete_io(&mut stream).map_err(io_err(checked))?;
    }
    Ok(StreamOwned::new(conn, stream))
}

/// A reply, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+…`: a status, e.g. `OK`, `QUEUED`.
    Status(String),
    /// `-…`: an error reply, e.g. `ERR unknown command`, `WRONGTYPE …`, `OOM …`.
    Error(String),
    /// `:…`
    Int(i64),
    /// `$n` and n bytes.
    Bulk(Vec<u8>),
    /// `*n` and n replies.
    Array(Vec<Reply>),
    /// `$-1` or `*-1`: no value (a missing key, an aborted transaction).
    Nil,
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "-{s}"),
            Reply::Int(i) => write!(f, ":{i}"),
            Reply::Bulk(b) if b.len() <= 64 => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Bulk(b) => write!(f, "a bulk string of {} bytes", b.len()),
            Reply::Array(a) => write!(f, "an array of {}", a.len()),
            Reply::Nil => f.write_str("nil"),
        }
    }
}

/// The start of a reply: the whole of it for the one-line kinds, the length for the others
/// (read on with [`Conn::read_bulk`] or element by element).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Head {
    /// `+…`
    Status(String),
    /// `-…`
    Error(String),
    /// `:…`
    Int(i64),
    /// `$n`: n bytes and CRLF follow.
    Bulk(usize),
    /// `*n`: n replies follow.
    Array(usize),
    /// `$-1` or `*-1`.
    Nil,
}

/// What went wrong talking to the server.
#[derive(Debug)]
pub enum RespError {
    /// A system call failed: the server cannot be reached, hung up, or did not answer in time.
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
    /// The server's fault: what it sent is not a RESP2 reply, or is larger than this client
    /// takes.
    Protocol(String),
}

impl fmt::Display for RespError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RespError::Io { op, source } if source.kind() == io::ErrorKind::WouldBlock => {
                write!(f, "{op}: no answer within the timeout ({source})")
            }
            RespError::Io { op, source } => {
                write!(f, "{op}: {source}")?;
                use rustls::AlertDescription as A;
                match source.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                    Some(rustls::Error::AlertReceived(A::CertificateRequired)) => f.write_str(
                        " (the server requires a client certificate: set [rvm] redis_cert_file and \
                         redis_key_file)",
                    ),
                    Some(rustls::Error::AlertReceived(
                        A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::CertificateExpired,
                    )) => f.write_str(
                        " (the server refused [rvm] redis_cert_file: it must be signed by a CA in the \
                         server's tls-ca-cert-file, and be valid now)",
                    ),
                    _ => Ok(()),
                }
            }
            RespError::Protocol(m) => write!(f, "protocol violation: {m}"),
        }
    }
}

impl std::error::Error for RespError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RespError::Io { source, .. } => Some(source),
            RespError::Protocol(_) => None,
        }
    }
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> RespError {
    move |source| RespError::Io { op, source }
}

fn protocol(m: impl Into<String>) -> RespError {
    RespError::Protocol(m.into())
}

/// Reads one line, CRLF stripped, into `line` (at most [`MAX_LINE`] bytes).
fn read_line<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> Result<(), RespError> {
    line.clear();
    let n = (&mut *r).take(MAX_LINE as u64 + 2).read_until(b'\n', line).map_err(io_err("read a reply"))?;
    if n == 0 {
        return Err(RespError::Io {
            op: "read a reply",
            source: io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"),
        });
    }
    if !line.ends_with(b"\r\n") {
        return Err(if n >= MAX_LINE + 2 {
            protocol(format!("a reply line longer than {MAX_LINE} bytes"))
        } else if line.ends_with(b"\n") {
            protocol(format!("a line ended by LF alone: {:?}", String::from_utf8_lossy(line)))
        } else {
            RespError::Io {
                op: "read a reply",
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection mid-reply",
                ),
            }
        });
    }
    line.truncate(line.len() - 2);
    Ok(())
}

fn text(b: &[u8]) -> Result<String, RespError> {
    String::from_utf8(b.to_vec()).map_err(|_| {
        protocol(format!("a status or error line that is not UTF-8: {:?}", String::from_utf8_lossy(b)))
    })
}

fn number(b: &[u8], what: &str) -> Result<i64, RespError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(format!("{what} {:?} is not a number", String::from_utf8_lossy(b))))
}

/// Reads the start of one reply. `line` is scratch space, reused.
pub fn read_head<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> Result<Head, RespError> {
    read_line(r, line)?;
    let (&kind, rest) = line.split_first().ok_or_else(|| protocol("an empty line where a reply starts"))?;
    let length = |what: &str| -> Result<Option<usize>, RespError> {
        match number(rest, what)? {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(n as usize)),
            n => Err(protocol(format!("{what} {n}"))),
        }
    };
    Ok(match kind {
        b'+' => Head::Status(text(rest)?),
        b'-' => Head::Error(text(rest)?),
        b':' => Head::Int(number(rest, "the integer")?),
        b'$' => length("the bulk length")?.map_or(Head::Nil, Head::Bulk),
        b'*' => length("the array length")?.map_or(Head::Nil, Head::Array),
        other => {
            return Err(protocol(format!(
                "a reply starting with {:?} ({other:#04x}), not one of + - : $ *: the line was {:?}; \
                 is it a Redis server?",
                other as char,
                String::from_utf8_lossy(&line[..line.len().min(80)])
            )))
        }
    })
}

/// Reads the `len` bytes and CRLF of a bulk string whose head was read, into `out` (exactly
/// `len` bytes long).
pub fn read_bulk<R: BufRead>(r: &mut R, out: &mut [u8]) -> Result<(), RespError> {
    r.read_exact(out).map_err(io_err("read a bulk string"))?;
    let mut crlf = [0u8; 2];
    r.read_exact(&mut crlf).map_err(io_err("read a bulk string"))?;
    if crlf != *b"\r\n" {
        return Err(protocol(format!("a bulk string of {} bytes not followed by CRLF", out.len())));
    }
    Ok(())
}

/// Reads one whole reply, every size bounded ([`MAX_BULK`], [`MAX_ELEMENTS`], [`MAX_DEPTH`]).
pub fn read_reply<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> Result<Reply, RespError> {
    read_nested(r, line, 0)
}

fn read_nested<R: BufRead>(r: &mut R, line: &mut Vec<u8>, depth: usize) -> Result<Reply, RespError> {
    Ok(match read_head(r, line)? {
        Head::Status(s) => Reply::Status(s),
        Head::Error(s) => Reply::Error(s),
        Head::Int(i) => Reply::Int(i),
        Head::Nil => Reply::Nil,
        Head::Bulk(n) => {
            if n > MAX_BULK {
                return Err(protocol(format!("a bulk string of {n} bytes (this client takes {MAX_BULK})")));
            }
            let mut b = vec![0; n];
            read_bulk(r, &mut b)?;
            Reply::Bulk(b)
        }
        Head::Array(n) => {
            if n > MAX_ELEMENTS {
                return Err(protocol(format!("an array of {n} elements (this client takes {MAX_ELEMENTS})")));
            }
            if depth + 1 >= MAX_DEPTH {
                return Err(protocol(format!("arrays nested more than {MAX_DEPTH} deep")));
            }
            // Reserve no more than what has arrived can justify.
            let mut v = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                v.push(read_nested(r, line, depth + 1)?);
            }
            Reply::Array(v)
        }
    })
}

/// One connection to a Redis server, speaking RESP2.
pub struct Conn {
    addr: String,
    /// The connection, read through a buffer and written through [`BufReader::get_mut`].
    io: BufReader<Stream>,
    /// Commands not yet written.
    out: Vec<u8>,
    /// Scratch for reply lines.
    line: Vec<u8>,
}

impl Conn {
    /// Connects to `addr` (`host:port`), trying each address it resolves to for at most
    /// `timeout`; reads and writes then time out after `timeout` too (nonzero).
    pub fn connect(addr: &str, timeout: Duration) -> Result<Conn, RespError> {
        Conn::connect_tls(addr, timeout, None)
    }

    /// As [`Conn::connect`], then a TLS handshake if `tls` is given (within `timeout` for each
    /// read and write of it), the server's certificate checked against the host of `addr`.
    pub fn connect_tls(addr: &str, timeout: Duration, tls: Option<&RedisTls>) -> Result<Conn, RespError> {
        assert!(!timeout.is_zero(), "a zero timeout means none to the socket API; the caller checks it");
        let mut last = None;
        for a in addr.to_socket_addrs().map_err(io_err("resolve the address"))? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout)).map_err(io_err("set the read timeout"))?;
                    stream.set_write_timeout(Some(timeout)).map_err(io_err("set the write timeout"))?;
                    stream.set_nodelay(true).map_err(io_err("set TCP_NODELAY"))?;
                    let stream = match tls {
                        None => Stream::Plain(stream),
                        Some(tls) => Stream::Tls(Box::new(handshake(addr, stream, tls)?)),
                    };
                    return Ok(Conn {
                        addr: addr.to_string(),
                        io: BufReader::with_capacity(64 << 10, stream),
                        out: Vec::with_capacity(FLUSH_AT + (8 << 10)),
                        line: Vec::new(),
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(RespError::Io {
            op: "connect",
            source: last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address")),
        })
    }

    /// The address it was connected to, as given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Starts a command of `argc` arguments (its name included), buffered.
    pub fn begin(&mut self, argc: usize) {
        let _ = write!(self.out, "*{argc}\r\n"); // writing to a Vec cannot fail
    }

    /// Adds an argument to the command begun.
    pub fn arg(&mut self, a: &[u8]) {
        let _ = write!(self.out, "${}\r\n", a.len());
        self.out.extend_from_slice(a);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Adds an argument whose bytes are mapped memory, copied straight into the buffer.
    pub fn arg_view(&mut self, v: MapSlice<'_>) {
        let _ = write!(self.out, "${}\r\n", v.len());
        let at = self.out.len();
        self.out.resize(at + v.len(), 0);
        v.read(0, &mut self.out[at..]);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Adds an argument of the bytes of mapped memory followed by a 4-byte check computed from
    /// them by `check` (little-endian): the check is of exactly the bytes sent, copied once.
    pub fn arg_view_checked(&mut self, v: MapSlice<'_>, check: impl FnOnce(&[u8]) -> u32) {
        let _ = write!(self.out, "${}\r\n", v.len() + 4);
        let at = self.out.len();
        self.out.resize(at + v.len(), 0);
        v.read(0, &mut self.out[at..]);
        let c = check(&self.out[at..]);
        self.out.extend_from_slice(&c.to_le_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// Buffers a whole command.
    pub fn command(&mut self, args: &[&[u8]]) {
        self.begin(args.len());
        for a in args {
            self.arg(a);
        }
    }

    /// Writes the buffered commands out if they are [`FLUSH_AT`] bytes or more.
    pub fn flush_if_full(&mut self) -> Result<(), RespError> {
        if self.out.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every buffered command out.
    pub fn flush(&mut self) -> Result<(), RespError> {
        let stream = self.io.get_mut();
        let r = stream.write_all(&self.out).and_then(|()| stream.flush()).map_err(io_err("send commands"));
        self.out.clear();
        r
    }

    /// Reads the next reply, whole.
    pub fn read(&mut self) -> Result<Reply, RespError> {
        read_reply(&mut self.io, &mut self.line)
    }

    /// Reads the start of the next reply.
    pub fn read_head(&mut self) -> Result<Head, RespError> {
        read_head(&mut self.io, &mut self.line)
    }

    /// Reads the body of a bulk string whose [`Head::Bulk`] was just read, `out.len()` bytes.
    pub fn read_bulk(&mut self, out: &mut [u8]) -> Result<(), RespError> {
        read_bulk(&mut self.io, out)
    }

    /// Sends one command and reads its reply (after any buffered before it, whose replies the
    /// caller must have read).
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, RespError> {
        self.command(args);
        self.flush()?;
        self.read()
    }

    /// Waits, at most `timeout`, while the server answers `-LOADING` (a server just restarted
    /// reads its data back before it serves it); any other answer to `PING` ends the wait.
    pub fn wait_loaded(&mut self, timeout: Duration) -> Result<(), RespError> {
        let start = std::time::Instant::now();
        loop {
            match self.call(&[b"PING"])? {
                Reply::Error(e) if e.starts_with("LOADING") => {
                    if start.elapsed() >= timeout {
                        return Err(RespError::Protocol(format!(
                            "still loading its data after {timeout:?}: -{e}"
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Result<Reply, RespError> {
        read_reply(&mut &b[..], &mut Vec::new())
    }

    fn violation(b: &[u8]) -> String {
        match parse(b) {
            Err(RespError::Protocol(m)) => m,
            other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(b)),
        }
    }

    /// A server that answers every `PING` with the replies given, in turn (the last one from
    /// then on), and counts them.
    fn pinged(replies: &'static [&'static str]) -> (String, std::thread::JoinHandle<usize>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            let mut n = 0;
            let mut line = Vec::new();
            while matches!(read_reply(&mut r, &mut line), Ok(Reply::Array(_))) {
                let reply = replies[n.min(replies.len() - 1)];
                n += 1;
                if std::io::Write::write_all(&mut w, reply.as_bytes()).is_err() {
                    break;
                }
            }
            n
        });
        (addr, h)
    }

    #[test]
    fn a_server_loading_its_data_is_waited_for_and_named_if_it_never_ends() {
        let (addr, h) = pinged(&["-LOADING Redis is loading the dataset in memory\r\n", "+PONG\r\n"]);
        let mut c = Conn::connect(&addr, Duration::from_secs(5)).unwrap();
        c.wait_loaded(Duration::from_secs(5)).unwrap();
        drop(c);
        assert_eq!(h.join().unwrap(), 2, "one PING answered LOADING, then one PONG");
        let (addr, h) = pinged(&["-LOADING Redis is loading the dataset in memory\r\n"]);
        let mut c = Conn::connect(&addr, Duration::from_secs(5)).unwrap();
        let e = c.wait_loaded(Duration::from_millis(50)).unwrap_err().to_string();
        assert!(e.contains("still loading") && e.contains("LOADING"), "{e}");
        drop(c);
        h.join().unwrap();
    }

    #[test]
    fn every_reply_kind_parses() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status("OK".into()));
        assert_eq!(parse(b"-ERR no\r\n").unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(parse(b":-42\r\n").unwrap(), Reply::Int(-42));
        assert_eq!(parse(b"$3\r\na\r\n\r\n").unwrap(), Reply::Bulk(b"a\r\n".to_vec()));
        assert_eq!(parse(b"$0\r\n\r\n").unwrap(), Reply::Bulk(Vec::new()));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Nil);
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Nil);
        assert_eq!(parse(b"*0\r\n").unwrap(), Reply::Array(Vec::new()));
        assert_eq!(
            parse(b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$-1\r\n").unwrap(),
            Reply::Array(vec![
                Reply::Bulk(b"0".to_vec()),
                Reply::Array(vec![Reply::Bulk(b"a".to_vec()), Reply::Nil])
            ])
        );
    }

    #[test]
    fn pipelined_replies_read_one_after_another() {
        let b = b"+OK\r\n:1\r\n$2\r\nhi\r\n";
        let mut r = &b[..];
        let mut line = Vec::new();
        assert_eq!(read_reply(&mut r, &mut line).unwrap(), Reply::Status("OK".into()));
        assert_eq!(read_reply(&mut r, &mut line).unwrap(), Reply::Int(1));
        assert_eq!(read_head(&mut r, &mut line).unwrap(), Head::Bulk(2));
        let mut out = [0u8; 2];
        read_bulk(&mut r, &mut out).unwrap();
        assert_eq!(&out, b"hi");
        assert!(matches!(read_reply(&mut r, &mut line), Err(RespError::Io { .. })), "end of stream");
    }

    #[test]
    fn garbage_and_oversize_are_protocol_violations_that_say_what_came() {
        assert!(violation(b"HTTP/1.1 400 Bad Request\r\n").contains("is it a Redis server"));
        assert!(violation(b"%1\r\n").contains("'%'"), "RESP3 maps are not RESP2");
        assert!(violation(b":x1\r\n").contains("not a number"));
        assert!(violation(b"$-2\r\n").contains("-2"));
        assert!(violation(b"+OK\n").contains("LF alone"));
        assert!(violation(b"\r\n").contains("empty line"));
        assert!(violation(b"$2\r\nabcd").contains("CRLF"));
        assert!(violation(format!("${}\r\n", MAX_BULK + 1).as_bytes()).contains("bulk string"));
        assert!(violation(format!("*{}\r\n", MAX_ELEMENTS + 1).as_bytes()).contains("elements"));
        assert!(violation(b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n").contains("nested"));
        let long = [vec![b'+'; MAX_LINE + 10], b"\r\n".to_vec()].concat();
        assert!(violation(&long).contains("longer than"));
    }

    #[test]
    fn a_reply_cut_short_is_an_io_error_not_a_reply() {
        for b in [&b""[..], b"+OK", b"$5\r\nab", b"*2\r\n:1\r\n"] {
            match parse(b) {
                Err(RespError::Io { source, .. }) => {
                    assert_eq!(source.kind(), io::ErrorKind::UnexpectedEof, "{b:?}")
                }
                other => panic!("{b:?}: {other:?}"),
            }
        }
    }
}
