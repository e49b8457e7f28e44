//! Accepting connections: the handshake, then a data lane or an operator's requests.

use super::pending::{source, Pending};
use super::refused::Refused;
use super::{lane, session, status, Shared};
use mojim_core::encode::SessionTag;
use mojim_core::handshake::{Identity, Refusal, ServerHandshake};
use mojim_format::handshake::{
    encode_refuse, read_reply_len, Hello, LogWindow, PeerRole, RefuseCode, Request, COMMAND_MAX, MAX_READ,
    NONCE_SIZE, REFUSE_MAX, REQUEST_SIZE,
};
use mojim_format::log::LOG_HEADER_SIZE;
use mojim_format::{FrameHeader, FrameKind};
use mojim_transport::frames::{
    frame_header, read_frame, send, timed_out, write_frame, ReadBy, ReadError, WriteBy,
};
use mojim_transport::{Conn, PeerIdentity, RecordMac, Role, Transport};
use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Connections in their handshake, at most; past it, a newcomer displaces the oldest of the
/// address that holds the most (see `pending.rs`).
const MAX_PENDING: usize = 64;
/// Connections from one address in their handshake, at most; past it, a newcomer from that
/// address displaces that address's oldest.
const MAX_PENDING_PER_ADDRESS: usize = 16;
/// How long a peer may take over its whole handshake, from being accepted to its Proof.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);
/// A long read holds the data area against the checkpointer, so it has a deadline, however
/// slowly the peer reads: this much time, plus the time to send its bytes at
/// [`LONG_READ_MIN_RATE`]. A peer that is slower loses its connection.
const LONG_READ_GRACE: Duration = Duration::from_secs(5);
/// Bytes per second a long read's peer must take at least.
const LONG_READ_MIN_RATE: u64 = 32 << 20;

type PendingConns<C> = Mutex<Pending<C>>;

pub(crate) fn accept_loop<T: Transport>(s: Arc<Shared>, transport: Arc<T>, listener: T::Listener) {
    let pending: Arc<PendingConns<T::Conn>> =
        Arc::new(Mutex::new(Pending::new(MAX_PENDING_PER_ADDRESS, MAX_PENDING)));
    loop {
        let conn = match transport.accept(&listener) {
            Ok(c) => c,
            Err(e) => {
                if s.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                tracing::warn!(error = %e, "accept failed");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let accepted = Instant::now();
        if s.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let closer = match conn.try_clone() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(peer = %conn.peer(), error = %e, "cannot clone connection; closing");
                conn.shutdown();
                continue;
            }
        };
        let (id, displaced) =
            pending.lock().unwrap_or_else(PoisonError::into_inner).admit(&source(&conn.peer()), closer);
        // Its thread sees the connection end, and says why.
        if let Some(d) = displaced {
            d.shutdown();
        }
        let s = s.clone();
        let p = pending.clone();
        let spawned = std::thread::Builder::new()
            .name("mojim-conn".into())
            .spawn(move || serve_conn(&s, conn, accepted, &p, id));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot spawn a connection thread");
            pending.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        }
    }
}

fn refuse<C: Conn>(conn: &mut C, r: &Refusal) {
    let mut body = Vec::new();
    encode_refuse(r.code, &r.message, &mut body);
    let _ = send(conn, FrameKind::Refuse, 0, &body);
}

fn serve_conn<C: Conn>(s: &Shared, mut conn: C, accepted: Instant, pending: &PendingConns<C>, id: u64) {
    let peer = conn.peer();
    let remove = || pending.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    // A peer that proves the secret leaves the pending connections before this node's Proof
    // goes out, so nothing displaces it afterwards; one displaced before that gets no Proof and
    // no session.
    let left = std::cell::Cell::new(None);
    let hello = handshake(s, &mut conn, &peer, accepted + HANDSHAKE_DEADLINE, || {
        let kept = remove();
        left.set(Some(kept));
        kept
    });
    // Whether this connection still had its place when its handshake ended (a handshake that
    // succeeded did).
    let kept = left.get().unwrap_or_else(remove);
    let hello = match hello {
        Ok(h) => h,
        Err((why, reason)) => {
            let (why, reason) = if kept {
                (why, reason)
            } else {
                let reason = format!(
                    "displaced by a newer connection: more than {MAX_PENDING_PER_ADDRESS} from {} or \
                     {MAX_PENDING} in all were in their handshake",
                    source(&peer)
                );
                (Refused::Displaced, reason)
            };
            s.stats.violation();
            s.stats.refused(why);
            tracing::warn!(%peer, %reason, "connection refused");
            conn.shutdown();
            return;
        }
    };
    let who = conn.peer_identity();
    if let Err(e) = role_may(who.as_ref(), hello.role) {
        let message = e.to_string();
        s.stats.violation();
        s.stats.refused(Refused::Role);
        tracing::warn!(%peer, %message, "connection refused");
        refuse(&mut conn, &Refusal { code: RefuseCode::Other, message });
        conn.shutdown();
        return;
    }
    match hello.role {
        PeerRole::Admin => admin(s, &mut conn, &peer, who.as_ref()),
        PeerRole::Primary | PeerRole::Mirror => {
            let closer = match conn.try_clone() {
                Ok(c) => Box::new(move || c.shutdown()) as Box<dyn Fn() + Send>,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "cannot clone connection");
                    return;
                }
            };
            let (welcome, tag, _) = match session::join(s, &hello, &peer, closer) {
                Ok(w) => w,
                Err(r) => {
                    s.stats.refused(Refused::of_code(r.code));
                    tracing::warn!(%peer, refusal = %r, "lane refused");
                    refuse(&mut conn, &r);
                    conn.shutdown();
                    return;
                }
            };
            // The lane's log is made before the lane is welcomed: a node that cannot make it
            // refuses the lane now, and neither the first group nor a copy waits for it later.
            if let Err(e) = s.lanes.log_of(tag.lane) {
                let message = e.to_string();
                s.stats.refused(Refused::Storage);
                tracing::warn!(%peer, lane = tag.lane, %message, "lane refused: no log");
                refuse(&mut conn, &Refusal { code: RefuseCode::Storage, message: message.clone() });
                conn.shutdown();
                session::leave(s, tag, &message);
                return;
            }
            conn.set_busy_poll(s.opts.busy_poll);
            if let Err(e) = send(&mut conn, FrameKind::Welcome, 0, &welcome.encode())
                .and_then(|_| conn.set_recv_timeout(Some(s.opts.heartbeat.timeout)))
            {
                session::leave(s, tag, &format!("send Welcome: {e}"));
                return;
            }
            let placed = match hello.place.then(|| offer_log(s, &mut conn, tag, hello.encrypt_placed)) {
                None => None,
                Some(Ok(Ok(offered))) => offered,
                Some(Ok(Err(why))) => {
                    let message = why.to_string();
                    s.stats.refused(Refused::Other);
                    tracing::warn!(%peer, lane = tag.lane, %message, "lane refused");
                    refuse(&mut conn, &Refusal { code: RefuseCode::Other, message: message.clone() });
                    conn.shutdown();
                    session::leave(s, tag, &message);
                    return;
                }
                Some(Err(e)) => {
                    session::leave(s, tag, &format!("offer lane {}'s log: {e}", tag.lane));
                    return;
                }
            };
            let end = lane::run(s, &mut conn, tag, placed);
            if let lane::LaneEnd::Violation(v) = &end {
                s.stats.violation();
                tracing::warn!(%peer, lane = tag.lane, violation = %v, "closing lane: protocol violation");
            }
            conn.shutdown();
            session::leave(s, tag, &format!("lane {}: {}", tag.lane, end.describe()));
        }
    }
}

/// Answers a primary's lane that asked to place its records: offers the lane's log through the
/// transport if it can share memory, and sends the `Log` frame that says where the next record
/// goes (capacity 0: declined, the bodies come on the connection). Returns, if it offered, the
/// placed records' key on a TLS connection (`Some(None)` without TLS), sealing by encryption
/// where `encrypt` (the Hello's `ENCRYPT`) asked for it; `Ok(Err(why))` where the lane would
/// place records and `encrypt` is not what this node is set to (`[security] encrypt_placed`):
/// the caller refuses it, sending the Refuse in place of the `Log` frame.
fn offer_log<C: Conn>(
    s: &Shared,
    conn: &mut C,
    tag: SessionTag,
    encrypt: bool,
) -> std::io::Result<Result<Option<Option<RecordMac>>, EncryptDisagrees>> {
    let log = s.lanes.log_of(tag.lane).map_err(std::io::Error::other)?;
    // Derived before anything is offered: a TLS connection whose key cannot be had offers none.
    let mac = conn.record_mac(tag.session, tag.lane)?;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(log.path())?;
    // Marked before the offer: from then on the peer may write the log at any time, so the
    // checkpointer copies this log's records out before it checks and applies them.
    // The groups of the log still queued for the backups are sealed first (`forward::expose`).
    if conn.shares_with_remote_writers() {
        super::forward::expose(s, tag.lane);
    }
    // The record area only: the header page (the tail recovery starts from) stays out of the
    // peer's reach where the transport can keep it out (UCX registers only what is offered).
    let token = conn.offer_memory(&file, LOG_HEADER_SIZE as u64)?;
    let own = s.opts.tls.as_ref().is_some_and(|t| t.encrypt_placed());
    if token.is_some() {
        if let Some(why) = encrypt_disagrees(encrypt, own, mac.is_some(), tag.lane) {
            return Ok(Err(why));
        }
    }
    let mac = mac.map(|m| m.encrypting(own));
    if let (Some(_), Some(mac)) = (&token, &mac) {
        s.lanes.keep_mac(tag.lane, tag.session, mac.clone());
    }
    let window = if token.is_some() {
        // The lane's session has begun and nothing is received on it yet: its head stays where
        // it is until the first record; the tail only moves on, so an older one is safe to give.
        let space = s.lanes.with(tag.lane, |l| *l.space());
        LogWindow { capacity: space.capacity(), head: space.head(), tail: space.tail() }
    } else {
        LogWindow::default()
    };
    send(conn, FrameKind::Log, 0, &window.encode_offer(token.as_deref().unwrap_or_default()))?;
    Ok(Ok(token.is_some().then_some(mac)))
}

/// Why a lane that would place its records is refused: the primary and this node disagree on
/// encrypting them. The operator's configuration is at fault, on one side or the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EncryptDisagrees {
    /// The lane asked for encryption on a connection without TLS, which has no key for it.
    NoTls { lane: u16 },
    /// `[security] encrypt_placed` differs: `primary`'s against this node's `own`.
    Differs { lane: u16, primary: bool, own: bool },
}

impl std::fmt::Display for EncryptDisagrees {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            EncryptDisagrees::NoTls { lane } => write!(
                f,
                "lane {lane} asked to encrypt the records it places ([security] encrypt_placed = true) on a \
                 connection without TLS: encryption needs [security] tls = true on both sides"
            ),
            EncryptDisagrees::Differs { lane, primary, own } => write!(
                f,
                "lane {lane}: the primary has [security] encrypt_placed = {primary} and this node {own}: set \
                 encrypt_placed the same on the primary and its mirror"
            ),
        }
    }
}

/// Why a lane that places its records may not, when the primary's Hello asked for encrypted
/// bodies (`asked`) and this node is set to `own` (`[security] encrypt_placed`), on a
/// connection with TLS or not (`tls`); `None` when they agree. Bodies encrypted by one side
/// and read in the clear by the other (or the other way) would be refused record by record, or
/// worse, taken for what they are not: the lane is refused at once, naming the setting.
fn encrypt_disagrees(asked: bool, own: bool, tls: bool, lane: u16) -> Option<EncryptDisagrees> {
    if asked && !tls {
        return Some(EncryptDisagrees::NoTls { lane });
    }
    (asked != own).then_some(EncryptDisagrees::Differs { lane, primary: asked, own })
}

/// Reads the handshake's next frame, `what`, which must have come whole by `deadline`.
fn read_step<C: Conn>(
    conn: &mut C,
    deadline: Instant,
    body: &mut Vec<u8>,
    what: &str,
) -> Result<FrameHeader, (ReadError, String)> {
    read_frame(&mut ReadBy { conn, deadline }, 256, body).map_err(|e| {
        let m = match &e {
            ReadError::Io(io) if timed_out(io) => {
                format!("no whole {what} within {HANDSHAKE_DEADLINE:?} of connecting")
            }
            ReadError::Frame(mojim_format::FrameError::HeaderChecksum { stored, .. })
                if stored.to_le_bytes()[..2] == [0x16, 0x03] =>
            {
                "the peer speaks TLS (its first bytes are a TLS ClientHello), and this node has [security] tls \
                 = false: set [security] tls the same on every node and tool"
                    .to_string()
            }
            e => format!("bad {what}: {e}"),
        };
        (e, m)
    })
}

/// Runs the accepting side's handshake; the peer must have sent its Proof by `deadline`.
/// Returns the Hello of a peer that proved the secret, after this side's Proof is sent.
/// `keep` is called once the peer has proved the secret, before this side's Proof is sent: it
/// takes the connection out of the pending ones, and says whether it was still there (false:
/// it was displaced, and the handshake fails without a Proof).
fn handshake<C: Conn>(
    s: &Shared,
    conn: &mut C,
    peer: &str,
    deadline: Instant,
    keep: impl FnOnce() -> bool,
) -> Result<Hello, (Refused, String)> {
    let me = || Identity {
        region_uuid: s.opts.region.uuid,
        region_size: s.opts.region.size,
        epoch: s.session.epoch(),
        max_lanes: s.opts.max_lanes,
    };
    accept_handshake(&s.opts.secret.0, me, conn, peer, deadline, keep, s.opts.tls.is_some())
}

/// [`handshake`], given the secret and this node's identity (asked for when the Proof is
/// checked).
fn accept_handshake<C: Conn>(
    secret: &[u8],
    me: impl FnOnce() -> Identity,
    conn: &mut C,
    peer: &str,
    deadline: Instant,
    keep: impl FnOnce() -> bool,
    tls: bool,
) -> Result<Hello, (Refused, String)> {
    let mut nonce = [0u8; NONCE_SIZE];
    mojim_transport::random::fill(&mut nonce);
    let mut hs = ServerHandshake::new(secret, nonce);
    let mut body = Vec::with_capacity(256);
    let h = read_step(conn, deadline, &mut body, "Hello").map_err(|(e, m)| {
        if let ReadError::Frame(mojim_format::FrameError::Version { .. }) = e {
            refuse(conn, &Refusal { code: RefuseCode::Version, message: e.to_string() });
        }
        (Refused::of_read(&e, tls), m)
    })?;
    let challenge = hs.on_hello(&h, &body).map_err(|r| {
        refuse(conn, &r);
        (Refused::of_code(r.code), r.to_string())
    })?;
    write_frame(conn, &challenge.header, &challenge.body).map_err(|e| (Refused::Closed, e.to_string()))?;
    let h = read_step(conn, deadline, &mut body, "Proof").map_err(|(e, m)| (Refused::of_read(&e, tls), m))?;
    let accepted = hs.on_proof(&h, &body, &me()).map_err(|r| {
        refuse(conn, &r);
        (Refused::of_code(r.code), format!("{r} (from {peer})"))
    })?;
    if !keep() {
        // Closed by whoever displaced it, or about to be: it must not go on into a session,
        // where it could end the current one before its closed socket is noticed.
        return Err((
            Refused::Displaced,
            "displaced by a newer connection before its handshake ended".into(),
        ));
    }
    write_frame(conn, &accepted.proof.header, &accepted.proof.body)
        .map_err(|e| (Refused::Closed, e.to_string()))?;
    Ok(accepted.hello)
}

/// Whether the holder of a TLS certificate (`None`: no TLS) may connect as `asked`: a primary's
/// lanes need an application's certificate, a mirror's feed a node's; anyone of the cluster may
/// open an admin connection (what it may run is checked per request, [`may_command`]).
fn role_may(who: Option<&PeerIdentity>, asked: PeerRole) -> Result<(), NotPermitted> {
    let Some(who) = who else { return Ok(()) };
    let needed = match asked {
        PeerRole::Primary => Role::Application,
        PeerRole::Mirror => Role::Node,
        PeerRole::Admin => return Ok(()),
    };
    if who.role == Some(needed) {
        return Ok(());
    }
    Err(NotPermitted::Connect { who: who.to_string(), asked, needed })
}

/// Whether the holder of a TLS certificate may run admin commands that change the node
/// (promote, demote, fence, discard, reset, backup_add, backup_remove): an operator's or a
/// node's (a mirror resets its backups). An application's may read status and the data area
/// only.
fn may_command(who: Option<&PeerIdentity>) -> Result<(), NotPermitted> {
    match who {
        Some(w) if !matches!(w.role, Some(Role::Operator | Role::Node)) => {
            Err(NotPermitted::Command { who: w.to_string() })
        }
        _ => Ok(()),
    }
}

/// What a peer's TLS certificate does not allow it (the peer's fault, or its operator's who
/// gave it that certificate): the certificate, named.
#[derive(Debug)]
enum NotPermitted {
    /// To connect in the role it asked for.
    Connect { who: String, asked: PeerRole, needed: Role },
    /// To run a command that changes the node.
    Command { who: String },
}

impl std::fmt::Display for NotPermitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotPermitted::Connect { who, asked, needed } => write!(
                f,
                "the certificate of {who} may not connect as {asked:?}: that needs a certificate with role \
                 {needed}"
            ),
            NotPermitted::Command { who } => write!(
                f,
                "the certificate of {who} may not run operator commands: they need a certificate with role \
                 operator (status and reads are allowed)"
            ),
        }
    }
}

fn admin<C: Conn>(s: &Shared, conn: &mut C, peer: &str, who: Option<&PeerIdentity>) {
    let welcome = mojim_format::handshake::Welcome {
        next_seq: 0,
        log_capacity: s.opts.log_capacity,
        max_frame: s.opts.limits.max_frame,
        epoch: s.session.epoch(),
        ..Default::default()
    };
    if send(conn, FrameKind::Welcome, 0, &welcome.encode()).is_err() {
        return;
    }
    let _ = conn.set_recv_timeout(Some(Duration::from_secs(60)));
    let mut body = Vec::with_capacity(64);
    loop {
        let h = match read_frame(conn, REQUEST_SIZE + COMMAND_MAX, &mut body) {
            Ok(h) => h,
            // The operator is done.
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return,
            // A record that fails its TLS check, a frame that does not decode: the operator's
            // side (or someone on the path) is told nothing more, and the log says why.
            Err(e) => {
                tracing::warn!(%peer, error = %e, "closing an operator's connection");
                return;
            }
        };
        let req = match (h.kind, Request::decode(&body)) {
            (FrameKind::Request, Ok(r)) => r,
            _ => {
                tracing::warn!(%peer, "bad admin request; closing");
                return;
            }
        };
        let result = match req {
            Request::Status => {
                let st = status::status(s);
                Ok(serde_json::to_vec(&st).unwrap_or_default())
            }
            Request::Command(json) => match may_command(who) {
                // The operator reads why as the refusal's text: a string from here on.
                Ok(()) => super::operator_commands::run(s, &json).map_err(|e| e.to_string()),
                Err(e) => {
                    let m = e.to_string();
                    s.stats.violation();
                    tracing::warn!(%peer, command = %json, %m, "admin command refused");
                    Err(m)
                }
            },
            Request::Read { offset, len } => {
                if len > MAX_READ {
                    match read_long(s, conn, offset, len) {
                        Ok(()) => continue,
                        Err(LongRead::Refused(m)) => Err(m),
                        Err(LongRead::Failed) => return,
                    }
                } else {
                    let mut out = vec![0u8; len as usize];
                    s.data.read_consistent(offset, &mut out).map(|_| out).map_err(|e| e.to_string())
                }
            }
        };
        let sent = match result {
            Ok(bytes) => send(conn, FrameKind::Reply, 0, &bytes),
            Err(m) => {
                let mut b = Vec::new();
                encode_refuse(RefuseCode::Other, &m, &mut b);
                b.truncate(REFUSE_MAX);
                send(conn, FrameKind::Refuse, 0, &b)
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// Why a long read did not complete.
enum LongRead {
    /// Nothing was sent: the reply is a Refuse with this message.
    Refused(String),
    /// The connection failed part way: it is closed.
    Failed,
}

/// A read longer than [`MAX_READ`]: the data area is held for reading from the first byte to the
/// last, so the reply is one consistent image (whole groups only), sent in Reply frames of at
/// most `MAX_READ` bytes. Meanwhile the checkpointer waits, and the lanes go on acknowledging
/// into their logs (they never wait for the data area) until a log is full; the read's deadline
/// bounds that.
fn read_long<C: Conn>(s: &Shared, conn: &mut C, offset: u64, len: u64) -> Result<(), LongRead> {
    let size = s.data.area().size();
    if offset.checked_add(len).is_none_or(|e| e > size) {
        return Err(LongRead::Refused(format!(
            "read of {len} bytes at offset {offset} is outside the region of {size} bytes"
        )));
    }
    let peer = conn.peer();
    let deadline =
        Instant::now() + LONG_READ_GRACE + Duration::from_secs_f64(len as f64 / LONG_READ_MIN_RATE as f64);
    let mut piece = vec![0u8; MAX_READ as usize];
    let held =
        s.data.read().map_err(|msg| LongRead::Refused(format!("the data area is not readable: {msg}")))?;
    let mut out = WriteBy { conn, deadline };
    let mut at = offset;
    while at < offset + len {
        let n = read_reply_len(len, at - offset);
        if let Err(e) = held.read(at, &mut piece[..n]) {
            // Part of the reply is sent: the peer learns of the failure by the closed connection.
            tracing::error!(error = %e, offset = at, "cannot read the data area for an operator");
            return Err(LongRead::Failed);
        }
        let header = frame_header(FrameKind::Reply, 0, &piece[..n]);
        if let Err(e) = out.write_all(&header).and_then(|_| out.write_all(&piece[..n])) {
            tracing::warn!(%peer, error = %e, len, "an operator's long read did not finish in time; closing");
            return Err(LongRead::Failed);
        }
        at += n as u64;
    }
    let _ = out.conn.set_send_timeout(None);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_core::handshake::ClientHandshake;
    use mojim_transport::TcpConn;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    const SECRET: &[u8] = b"a test secret of 32 bytes, or so";
    const ME: Identity = Identity { region_uuid: [5; 16], region_size: 1 << 20, epoch: 1, max_lanes: 4 };

    /// A primary's handshake against this node's accepting side over loopback TCP, where the
    /// pending connections say `kept` when the peer has proved the secret. Returns the accepting
    /// side's result, and whether the peer got this node's Proof.
    fn handshake_when_kept(kept: bool) -> (Result<Hello, (Refused, String)>, bool) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let peer = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            let hello = Hello {
                role: PeerRole::Primary,
                lane: 0,
                lanes: 1,
                region_uuid: ME.region_uuid,
                region_size: ME.region_size,
                epoch: 1,
                session: 7,
                nonce: [1; 32],
                max_frame: 4096,
                generation: 0,
                place: false,
                encrypt_placed: false,
            };
            let mut hs = ClientHandshake::new(&hello, SECRET);
            let out = hs.hello();
            s.write_all(&out.header).and_then(|_| s.write_all(&out.body)).expect("send Hello");
            let mut body = Vec::new();
            let h = read_frame(&mut s, 256, &mut body).expect("a Challenge");
            let proof = hs.on_challenge(&h, &body).expect("a valid Challenge");
            s.write_all(&proof.header).and_then(|_| s.write_all(&proof.body)).expect("send Proof");
            // The node's Proof, or the connection closed without one.
            let got_proof = match read_frame(&mut s, 256, &mut body) {
                Ok(h) => hs.on_proof(&h, &body).is_ok(),
                Err(_) => false,
            };
            // Nothing else follows once the accepting side is done.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            got_proof
        });
        let (stream, _) = listener.accept().expect("accept");
        let mut conn = TcpConn::new(stream).expect("a connection");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut asked = 0;
        let r = accept_handshake(
            SECRET,
            || ME,
            &mut conn,
            "test",
            deadline,
            || {
                asked += 1;
                kept
            },
            false,
        );
        conn.shutdown();
        drop(conn);
        assert_eq!(asked, 1, "the pending connections are asked once the peer has proved the secret");
        (r, peer.join().expect("the peer's thread"))
    }

    #[test]
    fn a_peer_displaced_before_the_nodes_proof_gets_no_proof_and_no_session() {
        let (r, got_proof) = handshake_when_kept(false);
        let (why, e) = r.expect_err("a displaced peer's handshake fails");
        assert!(e.contains("displaced"), "{e}");
        assert_eq!(why, Refused::Displaced);
        assert!(!got_proof, "a displaced peer was sent this node's Proof");
    }

    #[test]
    fn a_peer_still_pending_when_it_proves_the_secret_is_accepted() {
        let (r, got_proof) = handshake_when_kept(true);
        assert_eq!(r.expect("accepted").session, 7);
        assert!(got_proof);
    }
}
