//! A TLS connection with two handles, one receiving and one sending (a lane's two threads),
//! over any byte stream of the transport: a TCP socket, a shared-memory connection's rings or a
//! UCX stream. What a stream shares besides its bytes (an offered log, for placed records) goes
//! around TLS, on the stream's own side channel.
//!
//! A TLS connection is one state machine, so the handles share one rustls connection behind a
//! lock, `state`, that is never held across a blocking read or write:
//!
//! - a reader reads the socket with no lock but `reading` (which keeps two readers from feeding
//!   bytes out of order), then feeds what it read to rustls under `state`, and takes the
//!   plaintext out;
//! - a writer seals its bytes into records under `state` and takes the socket's write lock,
//!   `socket`, before it lets go of `state`, so that records reach the socket in the order they
//!   were sealed; it writes them holding `socket` only. `sending` keeps one writer's records
//!   together (a frame is never interleaved with another writer's).
//! - what processing the peer's records asks this side to send (handshake messages, alerts,
//!   key-update answers) the reader sends if the socket is free; if a writer holds it, the
//!   writer sends it after its own records (it looks for more under `state` each time it lets
//!   go of the socket).
//!
//! Neither direction allocates once its buffers have grown: a handle keeps the socket bytes it
//! read (rustls takes them from there, and only what it cannot take yet is kept in `state`) and
//! the records it sealed (copied out of rustls under `state`, written once it is let go).
//!
//! The first byte from the peer tells a plaintext Mojim peer from a TLS one (a TLS record
//! begins 0x16, a handshake, or 0x15, an alert); each side refuses the other kind naming
//! `[security] tls`.

use super::{PeerIdentity, TlsContext};
use crate::record_mac::{RECORD_KEY_SIZE, RECORD_MAC_LABEL};
use crate::tcp::TcpConn;
use crate::Conn;
use crate::{PeerMemory, RecordMac};
use mojim_format::handshake::{encode_refuse, RefuseCode};
use mojim_format::{FrameHeader, FrameKind};
use rustls::pki_types::ServerName;
use rustls::{ClientConnection, Connection, ServerConnection};
use std::io::{self, IoSlice, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// Plaintext sealed into records at a time (a few records; bounds what one seal buffers).
const SEAL_CHUNK: usize = 64 << 10;
/// Pieces sealed at a time (a lane sends up to 32 frames, a header and a body each, at once).
const SEAL_PIECES: usize = 64;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 64 << 10;
/// The first byte of a TLS handshake record and of an alert record.
const TLS_HANDSHAKE: u8 = 0x16;
const TLS_ALERT: u8 = 0x15;

struct State {
    tls: Connection,
    /// Bytes read from the socket that rustls has not taken yet (it takes at most its buffer
    /// limit of plaintext ahead of the reader).
    incoming: Vec<u8>,
    /// The socket ended: rustls is told once `incoming` is taken.
    eof: bool,
    /// The first byte from the peer has been checked.
    checked: bool,
    /// Why this connection failed, for every later call.
    failed: Option<(io::ErrorKind, String)>,
}

struct Shared<C> {
    state: Mutex<State>,
    socket: Mutex<C>,
    reading: Mutex<()>,
    sending: Mutex<()>,
    peer_identity: OnceLock<PeerIdentity>,
    server: bool,
}

/// One handle on a TLS connection over a byte stream `C` (TCP unless said otherwise).
pub struct TlsConn<C: Conn = TcpConn> {
    shared: Arc<Shared<C>>,
    /// This handle's stream, for reading (its busy poll and timeouts are the stream's).
    tcp: C,
    /// What this handle read from the socket.
    buf: Vec<u8>,
    /// Records sealed by this handle on their way to the socket.
    out: Vec<u8>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: Conn> TlsConn<C> {
    /// The connecting side, over a connected stream. Its side of the handshake is finished
    /// here, waiting at most `timeout` for each of the node's messages: what it sends next goes
    /// out at once, even if it reads nothing first (the node's verdict on this side's
    /// certificate comes with the first read).
    pub fn client(tcp: C, ctx: &TlsContext, timeout: Duration) -> io::Result<TlsConn<C>> {
        let name = ServerName::try_from("mojim-node").expect("a valid name");
        let tls = ClientConnection::new(ctx.client_config(), name).map_err(io::Error::other)?;
        let mut conn = TlsConn::new(tcp, Connection::Client(tls), false)?;
        let st = lock(&conn.shared.state);
        flush(&conn.shared, st, false, &mut conn.out)?;
        conn.tcp.set_recv_timeout(Some(timeout))?;
        conn.pump(&mut [], true)?;
        conn.tcp.set_recv_timeout(None)?;
        Ok(conn)
    }

    /// The accepting side, over an accepted socket. The handshake runs with the first reads, in
    /// the connection's own thread.
    pub fn server(tcp: C, ctx: &TlsContext) -> io::Result<TlsConn<C>> {
        let tls = ServerConnection::new(ctx.server_config()).map_err(io::Error::other)?;
        TlsConn::new(tcp, Connection::Server(tls), true)
    }

    fn new(tcp: C, mut tls: Connection, server: bool) -> io::Result<TlsConn<C>> {
        tls.set_buffer_limit(None);
        let shared = Arc::new(Shared {
            state: Mutex::new(State { tls, incoming: Vec::new(), eof: false, checked: false, failed: None }),
            socket: Mutex::new(tcp.try_clone()?),
            reading: Mutex::new(()),
            sending: Mutex::new(()),
            peer_identity: OnceLock::new(),
            server,
        });
        Ok(TlsConn { shared, tcp, buf: Vec::new(), out: Vec::new() })
    }

    /// The rustls connection (for keys derived from the session, with its exporter).
    pub fn with_session<R>(&self, f: impl FnOnce(&mut Connection) -> R) -> R {
        f(&mut lock(&self.shared.state).tls)
    }

    fn fail(&self, st: &mut State, kind: io::ErrorKind, message: String) -> io::Error {
        st.failed = Some((kind, message.clone()));
        io::Error::new(kind, message)
    }

    /// Gives rustls what was read, what it left before and then `fresh`, and processes it; what
    /// it does not take yet is kept in `incoming`.
    fn feed(&self, st: &mut State, fresh: &[u8]) -> io::Result<()> {
        let mut pending = std::mem::take(&mut st.incoming);
        if pending.is_empty() {
            let taken = self.give(st, fresh)?;
            pending.extend_from_slice(&fresh[taken..]);
        } else {
            pending.extend_from_slice(fresh);
            let taken = self.give(st, &pending)?;
            pending.drain(..taken);
        }
        st.incoming = pending;
        if st.eof && st.incoming.is_empty() {
            let _ = st.tls.read_tls(&mut &[][..]);
            if let Err(e) = st.tls.process_new_packets() {
                return Err(io::Error::new(io::ErrorKind::InvalidData, describe(&e, self.shared.server)));
            }
        }
        if !st.tls.is_handshaking() && self.shared.peer_identity.get().is_none() {
            if let Some(c) = st.tls.peer_certificates().and_then(|c| c.first()) {
                let _ = self.shared.peer_identity.set(PeerIdentity::of_certificate(c));
            }
        }
        Ok(())
    }

    /// Has rustls take and process `bytes` until it takes no more (its plaintext buffer is full:
    /// the reader takes that first); returns how many it took.
    fn give(&self, st: &mut State, bytes: &[u8]) -> io::Result<usize> {
        let mut taken = 0;
        while taken < bytes.len() {
            let mut rest = &bytes[taken..];
            let Ok(n) = st.tls.read_tls(&mut rest) else { break };
            taken += n;
            if let Err(e) = st.tls.process_new_packets() {
                let message = describe(&e, self.shared.server);
                // The alert for the peer, if any, goes out before the error comes back.
                let mut out = Vec::new();
                while st.tls.wants_write() && st.tls.write_tls(&mut out).is_ok() {}
                let _ = lock(&self.shared.socket).write_all(&out);
                return Err(self.fail(st, io::ErrorKind::InvalidData, message));
            }
            if n == 0 {
                break;
            }
        }
        Ok(taken)
    }

    /// Checks the peer's first byte: a plaintext Mojim peer is refused, naming the setting.
    fn check_first(&self, st: &mut State, first: u8) -> io::Result<()> {
        st.checked = true;
        if first == TLS_HANDSHAKE || (first == TLS_ALERT && !self.shared.server) {
            return Ok(());
        }
        if self.shared.server {
            // A Mojim peer without TLS reads a refusal it understands.
            let text = "this node speaks TLS ([security] tls = true): set [security] tls = true, with \
                        ca_file, cert_file and key_file, on the connecting side too";
            let mut body = Vec::new();
            encode_refuse(RefuseCode::Other, text, &mut body);
            let mut h = FrameHeader::new(FrameKind::Refuse);
            h.body_len = body.len() as u32;
            h.body_checksum = mojim_format::checksum::crc32c(&body);
            let mut sock = lock(&self.shared.socket);
            let _ = sock.write_all(&h.to_bytes()).and_then(|()| sock.write_all(&body));
            let m = format!(
                "the peer sent plaintext (first byte {first:#04x}), not a TLS ClientHello: this node has \
                 [security] tls = true, and the peer must too"
            );
            return Err(self.fail(st, io::ErrorKind::InvalidData, m));
        }
        let m = format!(
            "the peer answered in plaintext (first byte {first:#04x}), not TLS: it has [security] tls = \
             false, and this side true; set [security] tls the same on every node and tool"
        );
        Err(self.fail(st, io::ErrorKind::InvalidData, m))
    }
}

/// Takes what rustls has sealed to send (records, and handshake messages and alerts) into `out`
/// and writes it, in order, until rustls has nothing more. With `try_only` (a reader), leaves it
/// to the writer that holds the socket, if one does: that writer looks for more under `state`
/// once it lets go of the socket.
fn flush<'a, C: Conn>(
    shared: &'a Shared<C>,
    mut st: MutexGuard<'a, State>,
    try_only: bool,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    loop {
        if !st.tls.wants_write() {
            return Ok(());
        }
        let sock = if try_only {
            match shared.socket.try_lock() {
                Ok(s) => s,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
            }
        } else {
            lock(&shared.socket)
        };
        out.clear();
        while st.tls.wants_write() {
            st.tls.write_tls(out)?;
        }
        drop(st);
        write_or_fail(shared, sock, out)?;
        st = lock(&shared.state);
    }
}

/// Writes sealed records; a failed write ends the connection (the stream is cut mid-record).
fn write_or_fail<C: Conn>(
    shared: &Shared<C>,
    mut sock: impl std::ops::DerefMut<Target = C>,
    out: &[u8],
) -> io::Result<()> {
    let r = sock.write_all(out);
    if let Err(e) = &r {
        drop(sock);
        let mut st = lock(&shared.state);
        st.failed.get_or_insert((e.kind(), format!("TLS write failed: {e}")));
    }
    r
}

/// A rustls error in words, saying whose fault it is.
pub(super) fn describe(e: &rustls::Error, server: bool) -> String {
    use rustls::{AlertDescription as A, CertificateError, Error};
    let side = if server { "the connecting peer" } else { "the node" };
    match e {
        Error::InvalidCertificate(CertificateError::Other(o)) => o.0.to_string(),
        Error::AlertReceived(a) => {
            let why = match a {
                A::CertificateUnknown
                | A::BadCertificate
                | A::CertificateExpired
                | A::UnknownCA
                | A::AccessDenied => {
                    "this side's certificate: its log says why (another CA, expired, revoked, wrong role)"
                }
                A::HandshakeFailure | A::ProtocolVersion => "the handshake (does it speak TLS 1.3?)",
                _ => "the connection",
            };
            format!("{side} refused {why} (TLS alert {a:?})")
        }
        Error::NoCertificatesPresented => {
            format!("{side} presented no certificate: it needs [security] cert_file and key_file")
        }
        e => format!("TLS with {side} failed: {e}"),
    }
}

impl<C: Conn> Read for TlsConn<C> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.pump(buf, false)
    }
}

impl<C: Conn> TlsConn<C> {
    /// Reads the socket and feeds rustls until there is plaintext for `buf` or, with
    /// `handshake_only`, until this side's handshake is done (then 0).
    fn pump(&mut self, buf: &mut [u8], handshake_only: bool) -> io::Result<usize> {
        let _reading = lock(&self.shared.reading);
        // Bytes at the start of `self.buf` that were read and not yet given to rustls.
        let mut fresh = 0;
        loop {
            let mut st = lock(&self.shared.state);
            if let Some((kind, m)) = &st.failed {
                return Err(io::Error::new(*kind, m.clone()));
            }
            let fed = std::mem::take(&mut fresh);
            self.feed(&mut st, &self.buf[..fed])?;
            if handshake_only && !st.tls.is_handshaking() {
                flush(&self.shared, st, false, &mut self.out)?;
                return Ok(0);
            }
            let plaintext = if handshake_only {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                st.tls.reader().read(buf)
            };
            match plaintext {
                Ok(n) => {
                    flush(&self.shared, st, true, &mut self.out)?;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The socket ended without a close_notify: a frame cut short is found by the
                // framing above, as over TCP.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            if st.eof {
                return Ok(0);
            }
            flush(&self.shared, st, true, &mut self.out)?;
            if self.buf.len() != READ_CHUNK {
                self.buf.resize(READ_CHUNK, 0);
            }
            let n = self.tcp.read(&mut self.buf)?;
            fresh = n;
            let mut st = lock(&self.shared.state);
            if n == 0 {
                st.eof = true;
                if !st.checked && self.shared.server {
                    // Nothing came at all: a probe, or a peer that gave up.
                    st.checked = true;
                }
                if !st.checked {
                    let m = "the peer closed the connection during the TLS handshake: does it have \
                             [security] tls = true, and does it accept this side's certificate (its log \
                             says)?"
                        .to_string();
                    return Err(self.fail(&mut st, io::ErrorKind::UnexpectedEof, m));
                }
                if st.tls.is_handshaking() {
                    let m = if self.shared.server {
                        "the peer closed the connection during the TLS handshake (did it refuse this \
                         node's certificate? its log says)"
                    } else {
                        "the node closed the connection during the TLS handshake: does it have [security] \
                         tls = true, and does it accept this side's certificate (its log says)?"
                    };
                    return Err(self.fail(&mut st, io::ErrorKind::UnexpectedEof, m.to_string()));
                }
                continue;
            }
            if !st.checked {
                self.check_first(&mut st, self.buf[0])?;
            }
        }
    }

    /// Seals `bufs` and writes the records. Records span pieces (a frame's header and body go
    /// out in one record, not one each), up to SEAL_CHUNK bytes and SEAL_PIECES pieces at a time.
    fn send(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let _sending = lock(&self.shared.sending);
        // The next piece to seal, and how much of it is sealed.
        let (mut next, mut done) = (0, 0);
        let mut batch = [IoSlice::new(&[]); SEAL_PIECES];
        loop {
            let mut st = lock(&self.shared.state);
            if let Some((kind, m)) = &st.failed {
                return Err(io::Error::new(*kind, m.clone()));
            }
            let (mut k, mut n) = (0, 0);
            while next < bufs.len() && n < SEAL_CHUNK && k < SEAL_PIECES {
                let piece = &bufs[next][done..];
                let take = piece.len().min(SEAL_CHUNK - n);
                if take > 0 {
                    batch[k] = IoSlice::new(&piece[..take]);
                    k += 1;
                    n += take;
                }
                if take == piece.len() {
                    (next, done) = (next + 1, 0);
                } else {
                    done += take;
                }
            }
            if n > 0 {
                // The buffer limit is off: rustls takes it all.
                let taken = st.tls.writer().write_vectored(&batch[..k])?;
                if taken != n {
                    let m = format!("TLS took {taken} of {n} bytes to seal");
                    return Err(self.fail(&mut st, io::ErrorKind::Other, m));
                }
            }
            // Records go out in the order they were sealed: the socket is taken before `state`
            // is let go.
            flush(&self.shared, st, false, &mut self.out)?;
            if next == bufs.len() {
                return Ok(());
            }
        }
    }
}

impl<C: Conn> Write for TlsConn<C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(&[IoSlice::new(buf)])?;
        Ok(buf.len())
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.send(bufs)?;
        Ok(bufs.iter().map(|b| b.len()).sum())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<C: Conn> Conn for TlsConn<C> {
    fn send_all_vectored(&mut self, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
        self.send(bufs)
    }

    fn try_clone(&self) -> io::Result<TlsConn<C>> {
        Ok(TlsConn {
            shared: self.shared.clone(),
            tcp: self.tcp.try_clone()?,
            buf: Vec::new(),
            out: Vec::new(),
        })
    }

    fn peer(&self) -> String {
        self.tcp.peer()
    }

    fn shutdown(&self) {
        self.tcp.shutdown();
    }

    fn set_busy_poll(&mut self, spin: Duration) {
        self.tcp.set_busy_poll(spin);
    }

    /// A TLS connection reads ahead itself (the socket in READ_CHUNK reads, the plaintext held
    /// by rustls until it is read): every read is a copy out of rustls, and a buffer above it
    /// would add one.
    fn reads_ahead(&self) -> bool {
        false
    }

    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp.set_recv_timeout(timeout)
    }

    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.tcp.set_send_timeout(timeout)
    }

    fn peer_identity(&self) -> Option<PeerIdentity> {
        self.shared.peer_identity.get().cloned()
    }

    /// Memory goes around TLS, on the stream's own side channel (the file over a shared-memory
    /// connection's socket, a UCX registration): every record placed in it carries a tag under
    /// [`Conn::record_mac`]'s key (docs/FORMAT.md §2.4).
    fn offer_memory(&self, file: &std::fs::File, from: u64) -> io::Result<Option<Vec<u8>>> {
        self.tcp.offer_memory(file, from)
    }

    fn take_memory(&self, len: usize, token: &[u8]) -> io::Result<PeerMemory> {
        self.tcp.take_memory(len, token)
    }

    fn record_mac(&self, session: u64, lane: u16) -> io::Result<Option<RecordMac>> {
        let context = RecordMac::context(session, lane);
        let key = self.with_session(|s| {
            s.export_keying_material([0u8; RECORD_KEY_SIZE], RECORD_MAC_LABEL, Some(&context[..]))
        });
        match key {
            Ok(key) => Ok(Some(RecordMac::new(&key))),
            Err(e) => Err(io::Error::other(format!(
                "derive the placed records' key from the TLS session (is its handshake done?): {e}"
            ))),
        }
    }

    fn shares_with_remote_writers(&self) -> bool {
        self.tcp.shares_with_remote_writers()
    }
}
