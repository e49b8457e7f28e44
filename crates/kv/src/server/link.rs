//! One client's byte stream: a TCP socket, or a TLS session over one (`[kv] tls_listen`).
//!
//! The TLS session is rustls, driven without blocking by the event loop: its handshake runs
//! with the connection's reads (what the client sent is fed to rustls, what rustls answers is
//! written if the socket takes it, the rest when it becomes writable), so a client that stalls
//! mid-handshake holds its own connection and nothing else. rustls keeps at most a record of
//! ciphertext, 16 KiB of plaintext read and 64 KiB of records to send per connection; the
//! limits on a client's query buffer and replies apply to the plaintext as they do on TCP.
//!
//! The first byte a client sends to the TLS listener must begin a TLS handshake record (0x16);
//! a client speaking plaintext there is closed at once.

use rustls::ServerConnection;
use std::io::{self, BufRead, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;
/// Plaintext sealed into records at a time.
const SEAL_CHUNK: usize = 64 << 10;

/// A client's connection.
pub enum Link {
    /// In the clear (`[kv] listen`).
    Plain(TcpStream),
    /// Over TLS (`[kv] tls_listen`).
    Tls(Box<TlsLink>),
}

/// A TLS session over a non-blocking socket.
pub struct TlsLink {
    tcp: TcpStream,
    tls: ServerConnection,
    /// The client's first byte was checked.
    checked: bool,
}

/// Why a TLS connection failed: the client's doing (`ErrorKind::InvalidData`), logged when it
/// is closed.
fn refused(why: String) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, why)
}

impl Link {
    /// A TLS session over `tcp`, accepted with `config`.
    pub fn tls(tcp: TcpStream, config: &std::sync::Arc<rustls::ServerConfig>) -> io::Result<Link> {
        let tls = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
        Ok(Link::Tls(Box::new(TlsLink { tcp, tls, checked: false })))
    }

    /// The socket.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Link::Plain(s) => s,
            Link::Tls(t) => &t.tcp,
        }
    }

    /// Whether it is a TLS session.
    pub fn is_tls(&self) -> bool {
        matches!(self, Link::Tls(_))
    }

    /// Reads what the client sent: `Ok(0)` at its end, `Err(WouldBlock)` when nothing is there
    /// now. Over TLS, runs the handshake as far as what came allows.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(buf),
            Link::Tls(t) => t.read(buf),
        }
    }

    /// Writes some of `buf` (over TLS: seals it, and sends what the socket takes).
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(buf),
            Link::Tls(t) => t.write(buf),
        }
    }

    /// Sends what TLS sealed and did not send yet: `Ok` once it is all sent, `Err(WouldBlock)`
    /// while the socket takes no more.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Link::Plain(_) => Ok(()),
            Link::Tls(t) => t.flush(),
        }
    }

    /// Whether every record sealed was sent (always on TCP, whose unsent bytes are the
    /// client's `out`).
    pub fn flushed(&self) -> bool {
        match self {
            Link::Plain(_) => true,
            Link::Tls(t) => !t.tls.wants_write(),
        }
    }

    /// Whether plaintext was received and not read yet: the socket, already drained of it,
    /// will not say so again.
    pub fn has_buffered_input(&mut self) -> bool {
        match self {
            Link::Plain(_) => false,
            Link::Tls(t) => matches!(t.tls.reader().fill_buf(), Ok(b) if !b.is_empty()),
        }
    }

    /// Tells a TLS client whose handshake ended that the server closes (`close_notify`), if
    /// the socket takes it. (One whose handshake failed, or never began, is sent nothing
    /// more.)
    pub fn close(&mut self) {
        if let Link::Tls(t) = self {
            if t.tls.is_handshaking() {
                return;
            }
            t.tls.send_close_notify();
            let _ = t.flush();
        }
    }
}

impl AsFd for Link {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.tcp().as_fd()
    }
}

impl TlsLink {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // The client closed the socket without a close_notify: its end, as on TCP
                // (every record read was whole and authenticated).
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if !self.checked {
                let mut first = [0u8; 1];
                match self.tcp.peek(&mut first) {
                    Ok(0) => return Ok(0),
                    Ok(_) if first[0] != TLS_HANDSHAKE => {
                        return Err(refused(format!(
                            "it spoke plaintext (first byte {:#04x}, not a TLS handshake) to the TLS \
                             listener ([kv] tls_listen): a client there connects with TLS (redis-cli --tls, \
                             redis-py ssl=True)",
                            first[0]
                        )))
                    }
                    Ok(_) => self.checked = true,
                    Err(e) => return Err(e),
                }
            }
            match self.tls.read_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(e),
                Err(e) if e.kind() == ErrorKind::Other => return Err(refused(format!("TLS: {e}"))),
                Err(e) => return Err(e),
            }
            if let Err(e) = self.tls.process_new_packets() {
                // The alert that says why goes if the socket takes it.
                let _ = self.flush();
                return Err(refused(format!("TLS: {e}")));
            }
            // The handshake's answers (and key updates) go now, or when the socket is writable.
            match self.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.flush()?;
        let n = self.tls.writer().write(&buf[..buf.len().min(SEAL_CHUNK)])?;
        match self.flush() {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if n == 0 && !buf.is_empty() {
            // rustls holds as much as it may (before the handshake ends): later.
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
