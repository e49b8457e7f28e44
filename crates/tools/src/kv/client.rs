//! A small blocking RESP2 client: one TCP connection, commands queued and sent together
//! (pipelining), replies read in order. It is what the benchmark uses to start, load, check and
//! clean up a server; the measured load itself runs on [`super::load`]'s event loop.

use super::resp::{self, ProtocolError, Value};
use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why a command got no reply (an error *reply* is a [`Value::Error`], not this).
#[derive(Debug)]
pub enum ClientError {
    /// Connecting, sending or receiving failed.
    Io {
        /// The server's address.
        addr: String,
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// The server closed the connection while a reply was expected.
    Closed {
        /// The server's address.
        addr: String,
    },
    /// The server's bytes are not RESP2.
    Protocol {
        /// The server's address.
        addr: String,
        /// What was wrong.
        source: ProtocolError,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io { addr, op, source } => write!(f, "{op} {addr}: {source}"),
            ClientError::Closed { addr } => write!(f, "{addr} closed the connection before it replied"),
            ClientError::Protocol { addr, source } => write!(f, "{addr} broke RESP2: {source}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<ClientError> for mojim::Error {
    fn from(e: ClientError) -> mojim::Error {
        mojim::Error::Io { op: "talk to a RESP server".into(), source: std::io::Error::other(e.to_string()) }
    }
}

/// One connection to a Redis-protocol server.
pub struct RespClient {
    addr: String,
    stream: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
    /// Bytes of `buf` already parsed.
    start: usize,
    /// Replies owed for commands queued or sent.
    pending: usize,
}

/// The password every connection of this run gives first (`mojim bench --kv --password`), set
/// once before any server starts.
static PASSWORD: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Sets the run's password (once; later calls change nothing).
pub fn set_password(p: Option<String>) {
    let _ = PASSWORD.set(p);
}

/// The run's password, if any.
pub fn password() -> Option<&'static str> {
    PASSWORD.get().and_then(|p| p.as_deref())
}

/// `AUTH <password>` as a request, when the run has one.
pub fn auth_request() -> Option<Vec<u8>> {
    password().map(|p| {
        let mut out = Vec::new();
        resp::encode_command(&mut out, &[b"AUTH".as_slice(), p.as_bytes()]);
        out
    })
}

impl RespClient {
    /// Connects to `addr` with Nagle's algorithm off; every read waits at most `timeout`.
    /// With the run's password set, it authenticates first.
    pub fn connect(addr: &str, timeout: Duration) -> Result<RespClient, ClientError> {
        let mut c = RespClient::connect_plain(addr, timeout)?;
        if let Some(p) = password() {
            match c.command(&[b"AUTH", p.as_bytes()])? {
                Value::Simple(ok) if ok == "OK" => {}
                v => {
                    return Err(ClientError::Io {
                        addr: addr.to_string(),
                        op: "authenticate to",
                        source: std::io::Error::other(format!("AUTH answered {v}")),
                    })
                }
            }
        }
        Ok(c)
    }

    fn connect_plain(addr: &str, timeout: Duration) -> Result<RespClient, ClientError> {
        let io = |op| move |source| ClientError::Io { addr: addr.to_string(), op, source };
        let sa = addr
            .to_socket_addrs()
            .map_err(io("resolve"))?
            .next()
            .ok_or_else(|| io("resolve")(std::io::Error::other("no address")))?;
        let stream = TcpStream::connect_timeout(&sa, timeout).map_err(io("connect to"))?;
        stream.set_nodelay(true).map_err(io("set TCP_NODELAY on"))?;
        stream.set_read_timeout(Some(timeout)).map_err(io("set a read timeout on"))?;
        Ok(RespClient {
            addr: addr.to_string(),
            stream,
            out: Vec::new(),
            buf: Vec::new(),
            start: 0,
            pending: 0,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Queues a command without sending it (see [`RespClient::flush`]).
    pub fn queue(&mut self, args: &[&[u8]]) {
        resp::encode_command(&mut self.out, args);
        self.pending += 1;
    }

    /// Sends every queued command in one write.
    pub fn flush(&mut self) -> Result<(), ClientError> {
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        r.map_err(|source| ClientError::Io { addr: self.addr.clone(), op: "send to", source })
    }

    /// Reads the next reply owed.
    pub fn read_reply(&mut self) -> Result<Value, ClientError> {
        loop {
            match resp::parse(&self.buf[self.start..]) {
                Ok(Some((r, n))) => {
                    let v = r.to_value();
                    self.start += n;
                    if self.start == self.buf.len() {
                        self.buf.clear();
                        self.start = 0;
                    }
                    self.pending = self.pending.saturating_sub(1);
                    return Ok(v);
                }
                Ok(None) => {}
                Err(source) => return Err(ClientError::Protocol { addr: self.addr.clone(), source }),
            }
            let len = self.buf.len();
            self.buf.resize(len + (64 << 10), 0);
            let n = self.stream.read(&mut self.buf[len..]);
            self.buf.truncate(len + *n.as_ref().unwrap_or(&0));
            match n {
                Ok(0) => return Err(ClientError::Closed { addr: self.addr.clone() }),
                Ok(_) => {}
                Err(source) => {
                    return Err(ClientError::Io { addr: self.addr.clone(), op: "receive from", source })
                }
            }
        }
    }

    /// Sends one command and returns its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Value, ClientError> {
        self.queue(args);
        self.flush()?;
        self.read_reply()
    }

    /// Sends the queued commands and returns all their replies, in order.
    pub fn exec(&mut self) -> Result<Vec<Value>, ClientError> {
        self.flush()?;
        (0..self.pending).map(|_| self.read_reply()).collect()
    }
}
