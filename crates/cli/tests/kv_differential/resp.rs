//! The differential test's own RESP client: requests out, replies in, RESP2 and RESP3 with every
//! type Redis 7 sends (verbatim strings, big numbers, pushes), so that it reads both servers
//! alike and judges neither with the other's code.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reply, as sent: `$-1` and `*-1` and RESP3's `_` are told apart.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reply {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`.
    NullBulk,
    /// `*-1`.
    NullArray,
    /// `_` (RESP3).
    Null,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    Bool(bool),
    Double(Vec<u8>),
    BigNumber(Vec<u8>),
    /// `=` (RESP3): the format and the text, as one.
    Verbatim(Vec<u8>),
    Push(Vec<Reply>),
}

impl Reply {
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Whether this is an error whose text starts with `prefix`.
    pub fn error_starts(&self, prefix: &str) -> bool {
        matches!(self, Reply::Error(e) if e.starts_with(prefix.as_bytes()))
    }

    /// A short rendering for failure messages: long strings cut, with their length.
    pub fn show(&self) -> String {
        fn bytes(b: &[u8]) -> String {
            const MAX: usize = 48;
            let s: String = b[..b.len().min(MAX)].escape_ascii().to_string();
            if b.len() > MAX {
                format!("\"{s}\"...({} bytes)", b.len())
            } else {
                format!("\"{s}\"")
            }
        }
        fn list<'a>(open: &str, items: impl Iterator<Item = &'a Reply>, close: &str) -> String {
            let items: Vec<String> = items.map(Reply::show).collect();
            let n = items.len();
            if n > 12 {
                format!("{open}{}, ... ({n} items){close}", items[..12].join(", "))
            } else {
                format!("{open}{}{close}", items.join(", "))
            }
        }
        match self {
            Reply::Simple(s) => format!("+{}", s.escape_ascii()),
            Reply::Error(s) => format!("-{}", s.escape_ascii()),
            Reply::Int(n) => format!(":{n}"),
            Reply::Bulk(b) => bytes(b),
            Reply::NullBulk => "$-1".into(),
            Reply::NullArray => "*-1".into(),
            Reply::Null => "_".into(),
            Reply::Array(v) => list("[", v.iter(), "]"),
            Reply::Set(v) => list("~{", v.iter(), "}"),
            Reply::Push(v) => list(">[", v.iter(), "]"),
            Reply::Map(m) => {
                let flat: Vec<Reply> = m.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect();
                list("%{", flat.iter(), "}")
            }
            Reply::Bool(b) => format!("#{b}"),
            Reply::Double(d) => format!(",{}", d.escape_ascii()),
            Reply::BigNumber(d) => format!("({}", d.escape_ascii()),
            Reply::Verbatim(v) => format!("={}", bytes(v)),
        }
    }
}

/// Renders a list of replies.
pub fn show_all(v: &[Reply]) -> String {
    v.iter().map(Reply::show).collect::<Vec<_>>().join(" | ")
}

/// The end of the line that starts at `at` (the index of its `\r`), if it is all here.
fn line_end(buf: &[u8], at: usize) -> Option<usize> {
    buf[at..].windows(2).position(|w| w == b"\r\n").map(|p| at + p)
}

fn number(text: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a reply has a bad number {:?}", text.escape_ascii().to_string()))
}

/// Decodes one reply at `at`: `None` when it is not all here yet, else the reply and where the
/// next one starts. A reply that breaks the protocol is an error (the server's fault).
pub fn decode(buf: &[u8], at: usize) -> Result<Option<(Reply, usize)>, String> {
    let Some(&t) = buf.get(at) else { return Ok(None) };
    let Some(end) = line_end(buf, at + 1) else { return Ok(None) };
    let text = &buf[at + 1..end];
    let next = end + 2;
    let blob = |n: i64| -> Option<(Vec<u8>, usize)> {
        let n = n as usize;
        (buf.len() >= next + n + 2).then(|| (buf[next..next + n].to_vec(), next + n + 2))
    };
    Ok(Some(match t {
        b'+' => (Reply::Simple(text.to_vec()), next),
        b'-' => (Reply::Error(text.to_vec()), next),
        b':' => (Reply::Int(number(text)?), next),
        b',' => (Reply::Double(text.to_vec()), next),
        b'(' => (Reply::BigNumber(text.to_vec()), next),
        b'_' => (Reply::Null, next),
        b'#' => (Reply::Bool(text == b"t"), next),
        b'$' | b'=' | b'!' => {
            let n = number(text)?;
            if n == -1 && t == b'$' {
                return Ok(Some((Reply::NullBulk, next)));
            }
            if n < 0 {
                return Err(format!("a reply has a bad length {n}"));
            }
            let Some((b, after)) = blob(n) else { return Ok(None) };
            if &buf[after - 2..after] != b"\r\n" {
                return Err("a bulk reply does not end with CRLF".into());
            }
            let r = match t {
                b'$' => Reply::Bulk(b),
                b'=' => Reply::Verbatim(b),
                _ => Reply::Error(b),
            };
            (r, after)
        }
        b'*' | b'~' | b'%' | b'>' => {
            let n = number(text)?;
            if n == -1 && t == b'*' {
                return Ok(Some((Reply::NullArray, next)));
            }
            if n < 0 {
                return Err(format!("a reply has a bad count {n}"));
            }
            let items = if t == b'%' { n as usize * 2 } else { n as usize };
            let mut v = Vec::with_capacity(items.min(1 << 16));
            let mut pos = next;
            for _ in 0..items {
                let Some((e, p)) = decode(buf, pos)? else { return Ok(None) };
                v.push(e);
                pos = p;
            }
            let r = match t {
                b'*' => Reply::Array(v),
                b'~' => Reply::Set(v),
                b'>' => Reply::Push(v),
                _ => {
                    let mut it = v.into_iter();
                    let mut m = Vec::new();
                    while let (Some(k), Some(x)) = (it.next(), it.next()) {
                        m.push((k, x));
                    }
                    Reply::Map(m)
                }
            };
            (r, pos)
        }
        other => return Err(format!("a reply starts with the unknown type byte {:?}", other as char)),
    }))
}

/// Encodes requests (each a command and its arguments) as RESP arrays of bulk strings.
pub fn encode(reqs: &[Vec<Vec<u8>>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(reqs.iter().flatten().map(|a| a.len() + 16).sum());
    for args in reqs {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// How long one reply may take. Writes wait for the mirror, which a fault step restarts; a
/// restart takes well under this.
pub const REPLY_WAIT: Duration = Duration::from_secs(60);

/// A client connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Where the next reply starts in `buf`.
    at: usize,
    pub addr: String,
}

impl Conn {
    pub fn connect(addr: &str) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect to {addr}: {e}"))?;
        stream.set_read_timeout(Some(REPLY_WAIT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(REPLY_WAIT)).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Conn { stream, buf: Vec::new(), at: 0, addr: addr.to_string() })
    }

    /// Sends `bytes` while `read` runs, so that neither side can block the other: a server
    /// may stop reading while its replies wait to be read. A write that fails (the server
    /// closed the connection) is returned after `read`.
    pub fn exchange<T>(
        &mut self,
        bytes: &[u8],
        read: impl FnOnce(&mut Conn) -> T,
    ) -> (T, std::io::Result<()>) {
        if bytes.len() <= 64 << 10 {
            let sent = self.stream.write_all(bytes);
            return (read(self), sent);
        }
        let mut w = self.stream.try_clone().expect("clone a socket");
        std::thread::scope(|s| {
            let writer = s.spawn(move || w.write_all(bytes));
            let t = read(self);
            let sent = writer.join().expect("the writer thread");
            (t, sent)
        })
    }

    /// Sends `reqs` and reads up to `n` replies; fewer when the server closes the connection
    /// (`closed` then). A broken reply or a silent server is an error.
    pub fn call_n(&mut self, reqs: &[Vec<Vec<u8>>], n: usize) -> Result<Replies, String> {
        let bytes = encode(reqs);
        let (got, sent) = self.exchange(&bytes, |c| c.read_n(n));
        let got = got?;
        if got.replies.len() < n && !got.closed {
            return Err(format!("sent {} requests, then: {:?}", reqs.len(), sent.err()));
        }
        Ok(got)
    }

    /// Sends `reqs`, one reply each.
    pub fn call(&mut self, reqs: &[Vec<Vec<u8>>]) -> Result<Replies, String> {
        self.call_n(reqs, reqs.len())
    }

    /// Reads `n` replies, or fewer if the connection is closed first.
    pub fn read_n(&mut self, n: usize) -> Result<Replies, String> {
        let mut replies = Vec::with_capacity(n);
        while replies.len() < n {
            match self.read()? {
                Some(r) => replies.push(r),
                None => return Ok(Replies { replies, closed: true }),
            }
        }
        Ok(Replies { replies, closed: false })
    }

    /// The next reply, or `None` if the server closed the connection first.
    pub fn read(&mut self) -> Result<Option<Reply>, String> {
        loop {
            if let Some((r, next)) = decode(&self.buf, self.at).map_err(|e| format!("{}: {e}", self.addr))? {
                self.at = next;
                if self.at == self.buf.len() {
                    self.buf.clear();
                    self.at = 0;
                }
                return Ok(Some(r));
            }
            if self.at > 0 {
                self.buf.drain(..self.at);
                self.at = 0;
            }
            let mut chunk = [0u8; 1 << 16];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(None),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("{}: no reply within {REPLY_WAIT:?}: {e}", self.addr)),
            }
        }
    }
}

/// What a server answered to a batch of requests.
#[derive(Debug, Default)]
pub struct Replies {
    pub replies: Vec<Reply>,
    /// The server closed the connection before answering them all.
    pub closed: bool,
}
