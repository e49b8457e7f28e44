//! One connection: its socket, the bytes read and not yet run, the replies not yet sent, and
//! its session.

use super::link::Link;
use crate::cmd::Session;
use crate::resp::{Limits, Parser};
use std::io::ErrorKind;

/// Bytes read from one client per turn at most, so that one busy client cannot starve the
/// others (level-triggered polling brings the rest next turn).
pub const READ_PER_TURN: usize = 1 << 20;
/// Replies pending for a client past which its requests wait until it reads them.
pub const MAX_PENDING_OUT: usize = 64 << 20;

/// The most a client's buffer holds: the largest request the limits allow (`max_request`), at
/// least 16 KiB, and 16 KiB more.
pub fn buffer_cap(max_request: usize) -> usize {
    max_request.max(16 << 10) + (16 << 10)
}

/// A connected client.
pub struct Client {
    pub stream: Link,
    pub session: Session,
    pub parser: Parser,
    /// Bytes read: `buf[start..end]` not yet run (`buf` is always initialised to its length).
    pub buf: Vec<u8>,
    pub start: usize,
    pub end: usize,
    /// Replies: `out[sent..]` not yet written. Replies of a batch are added before it is
    /// acknowledged, but written only after.
    pub out: Vec<u8>,
    pub sent: usize,
    /// Bytes written to the connection since it was accepted (INFO's `total_net_output_bytes`).
    pub written: u64,
    /// Bytes of `out` that belong to acknowledged batches (may be written).
    pub releasable: usize,
    /// Bytes of `out` after `releasable` that belong to batches whose groups are in flight.
    pub held: usize,
    /// The peer closed its side: run what is here, then close.
    pub eof: bool,
    /// Close once the replies are written (QUIT, a protocol error).
    pub closing: bool,
    /// In the server's list of clients to run next turn.
    pub queued: bool,
    /// What it is registered for with epoll.
    pub interest: rustix::event::epoll::EventFlags,
    /// When it connected, in Unix milliseconds.
    pub since_ms: u64,
    /// The server's end of the connection (`host:port`), shared with every [`Conn`] made of it
    /// (one is made each time the client runs: no allocation).
    ///
    /// [`Conn`]: crate::cmd::client::Conn
    pub laddr: std::rc::Rc<str>,
    /// It got a message this turn (and is listed for its replies to be counted).
    pub fed: bool,
}

/// What a read found.
pub enum ReadOutcome {
    /// Bytes were read (or none were there).
    Data,
    /// The peer closed, or the connection failed.
    Closed,
}

impl Client {
    pub fn new(stream: Link, session: Session, limits: Limits) -> Client {
        Client {
            stream,
            session,
            parser: Parser::new(limits),
            buf: vec![0; 16 << 10],
            start: 0,
            end: 0,
            out: Vec::new(),
            sent: 0,
            written: 0,
            releasable: 0,
            held: 0,
            eof: false,
            closing: false,
            queued: false,
            interest: rustix::event::epoll::EventFlags::IN,
            since_ms: crate::cmd::now_ms(),
            laddr: std::rc::Rc::default(),
            fed: false,
        }
    }

    /// What CLIENT LIST says of its connection.
    pub fn conn(&self, now_ms: u64) -> crate::cmd::client::Conn {
        use std::os::fd::AsRawFd;
        let age_s = now_ms.saturating_sub(self.since_ms) / 1000;
        crate::cmd::client::Conn {
            fd: self.stream.tcp().as_raw_fd(),
            laddr: self.laddr.clone(),
            age_s,
            idle_s: if self.session.last_ms == 0 {
                age_s
            } else {
                now_ms.saturating_sub(self.session.last_ms) / 1000
            },
            qbuf: self.end - self.start,
            qbuf_free: self.buf.len() - (self.end - self.start),
            omem: self.unsent(),
            blocked: false,
        }
    }

    /// Unrun bytes.
    pub fn pending_input(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Reads what the socket has, up to [`READ_PER_TURN`]; the buffer grows (by doubling) only
    /// as far as the largest request the limits allow needs.
    pub fn read(&mut self, max_request: usize) -> ReadOutcome {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.start > 0 && (self.start > self.buf.len() / 2 || self.end == self.buf.len()) {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        let mut got = 0;
        while got < READ_PER_TURN {
            if self.end == self.buf.len() {
                if self.buf.len() >= buffer_cap(max_request) {
                    // A request larger than any the limits allow is refused by the parser
                    // before this is reached; a client pipelining that much waits.
                    return ReadOutcome::Data;
                }
                let grown = (self.buf.len() * 2).min(buffer_cap(max_request));
                self.buf.resize(grown.max(self.buf.len() + 1), 0);
            }
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return ReadOutcome::Data;
                }
                Ok(n) => {
                    self.end += n;
                    got += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return ReadOutcome::Data,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    if e.kind() == ErrorKind::InvalidData {
                        // A TLS client's handshake or records failed (its doing).
                        tracing::info!(client = %self.session.addr, error = %e, "closing a TLS client");
                    }
                    return ReadOutcome::Closed;
                }
            }
        }
        ReadOutcome::Data
    }

    /// Writes the releasable replies; returns false if the connection failed.
    pub fn write(&mut self) -> bool {
        while self.sent < self.releasable {
            match self.stream.write(&self.out[self.sent..self.releasable]) {
                Ok(0) => return false,
                Ok(n) => {
                    self.sent += n;
                    self.written += n as u64;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        // Over TLS: the records sealed and not sent yet (the handshake's too).
        match self.stream.flush() {
            Ok(()) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(_) => return false,
        }
        if self.sent == self.out.len() {
            self.out.clear();
            (self.sent, self.releasable) = (0, 0);
        } else if self.sent > (1 << 20) && self.sent > self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.releasable -= self.sent;
            self.sent = 0;
        }
        true
    }

    /// Whether a read could take more bytes (the buffer has room, or may still grow).
    pub fn can_read(&self, max_request: usize) -> bool {
        self.start > 0 || self.end < self.buf.len() || self.buf.len() < buffer_cap(max_request)
    }

    /// Replies waiting to be written (over TLS, rustls holds at most 64 KiB more, sealed).
    pub fn unsent(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whether everything was sent: the replies, and over TLS the records sealed of them.
    pub fn all_sent(&self) -> bool {
        self.unsent() == 0 && self.stream.flushed()
    }

    /// Whether the socket must say when it is writable: replies may go, or TLS records wait.
    pub fn wants_write(&self) -> bool {
        self.sent < self.releasable || !self.stream.flushed()
    }
}
