//! Accepting connections: the handshake, then a data lane or an operator's requests.

use super::{lane, session, status, Shared};
use crate::net::{read_frame, send, write_frame};
use mojim_core::handshake::{Identity, Refusal, ServerHandshake};
use mojim_format::handshake::{
    encode_refuse, PeerRole, RefuseCode, Request, COMMAND_MAX, NONCE_SIZE, REFUSE_MAX, REQUEST_SIZE,
};
use mojim_format::FrameKind;
use mojim_transport::{Conn, Transport};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Connections still in their handshake, at most.
const MAX_PENDING: usize = 64;
/// How long a peer may take over each handshake step.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest Reply frame of a read: a longer read is answered in frames of this size.
pub const MAX_READ: u64 = 16 << 20;
/// How long a reply frame of a long read may take to send: the read holds the data area
/// against the checkpointer, so a peer that stops reading loses its connection instead.
const LONG_READ_SEND_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn accept_loop<T: Transport>(s: Arc<Shared>, transport: T, listener: T::Listener) {
    let pending = Arc::new(AtomicUsize::new(0));
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
        if s.shutdown.load(Ordering::SeqCst) {
            return;
        }
        if pending.load(Ordering::SeqCst) >= MAX_PENDING {
            tracing::warn!(peer = %conn.peer(), "too many connections in handshake; closing");
            conn.shutdown();
            continue;
        }
        pending.fetch_add(1, Ordering::SeqCst);
        let s = s.clone();
        let p = pending.clone();
        let spawned =
            std::thread::Builder::new().name("mojim-conn".into()).spawn(move || serve_conn(&s, conn, &p));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot spawn a connection thread");
        }
    }
}

fn refuse<C: Conn>(conn: &mut C, r: &Refusal) {
    let mut body = Vec::new();
    encode_refuse(r.code, &r.message, &mut body);
    let _ = send(conn, FrameKind::Refuse, 0, &body);
}

fn serve_conn<C: Conn>(s: &Shared, mut conn: C, pending: &AtomicUsize) {
    let peer = conn.peer();
    let hello = handshake(s, &mut conn, &peer);
    pending.fetch_sub(1, Ordering::SeqCst);
    let hello = match hello {
        Ok(h) => h,
        Err(reason) => {
            s.stats.violations.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%peer, %reason, "connection refused");
            conn.shutdown();
            return;
        }
    };
    match hello.role {
        PeerRole::Admin => admin(s, &mut conn, &peer),
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
                    tracing::warn!(%peer, refusal = %r, "lane refused");
                    refuse(&mut conn, &r);
                    conn.shutdown();
                    return;
                }
            };
            // The lane's log is made before the lane is welcomed: a node that cannot make it
            // refuses the lane now, and neither the first group nor a copy waits for it later.
            if let Err(message) = lane::log_of(s, tag.lane) {
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
            let end = lane::run(s, &mut conn, tag);
            if let lane::LaneEnd::Violation(v) = &end {
                s.stats.violations.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, lane = tag.lane, violation = %v, "closing lane: protocol violation");
            }
            conn.shutdown();
            session::leave(s, tag, &format!("lane {}: {}", tag.lane, end.describe()));
        }
    }
}

fn handshake<C: Conn>(
    s: &Shared,
    conn: &mut C,
    peer: &str,
) -> Result<mojim_format::handshake::Hello, String> {
    conn.set_recv_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(|e| e.to_string())?;
    let mut nonce = [0u8; NONCE_SIZE];
    crate::random::fill(&mut nonce);
    let mut hs = ServerHandshake::new(&s.opts.secret.0, nonce);
    let mut body = Vec::with_capacity(256);
    let h = read_frame(conn, 256, &mut body).map_err(|e| {
        if let crate::net::ReadError::Frame(mojim_format::FrameError::Version { .. }) = e {
            refuse(conn, &Refusal { code: RefuseCode::Version, message: e.to_string() });
        }
        format!("bad Hello: {e}")
    })?;
    let challenge = hs.on_hello(&h, &body).map_err(|r| {
        refuse(conn, &r);
        r.to_string()
    })?;
    write_frame(conn, &challenge.header, &challenge.body).map_err(|e| e.to_string())?;
    let h = read_frame(conn, 256, &mut body).map_err(|e| format!("bad Proof: {e}"))?;
    let me = Identity {
        region_uuid: s.opts.region.uuid,
        region_size: s.opts.region.size,
        epoch: s.epoch.load(Ordering::SeqCst),
        max_lanes: s.opts.max_lanes,
    };
    let hello = hs.on_proof(&h, &body, &me).map_err(|r| {
        refuse(conn, &r);
        format!("{r} (from {peer})")
    })?;
    Ok(hello)
}

fn admin<C: Conn>(s: &Shared, conn: &mut C, peer: &str) {
    let welcome = mojim_format::handshake::Welcome {
        next_seq: 0,
        log_capacity: s.opts.log_capacity,
        max_frame: s.opts.limits.max_frame,
        epoch: s.epoch.load(Ordering::SeqCst),
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
            Err(_) => return,
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
            Request::Command(json) => super::command::run(s, &json),
            Request::Read { offset, len } => {
                if len > MAX_READ {
                    match read_long(s, conn, offset, len) {
                        Ok(()) => continue,
                        Err(LongRead::Refused(m)) => Err(m),
                        Err(LongRead::Failed) => return,
                    }
                } else {
                    let mut out = vec![0u8; len as usize];
                    super::read_consistent(s, offset, &mut out).map(|_| out).map_err(|e| e.to_string())
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
/// most `MAX_READ` bytes. The checkpointer waits meanwhile; the lanes go on acknowledging into
/// their logs.
fn read_long<C: Conn>(s: &Shared, conn: &mut C, offset: u64, len: u64) -> Result<(), LongRead> {
    let size = s.region.size();
    if offset.checked_add(len).is_none_or(|e| e > size) {
        return Err(LongRead::Refused(format!(
            "read of {len} bytes at offset {offset} is outside the region of {size} bytes"
        )));
    }
    let mut piece = vec![0u8; MAX_READ as usize];
    let _ = conn.set_send_timeout(Some(LONG_READ_SEND_TIMEOUT));
    let _r = s.data_lock.read().unwrap_or_else(|p| p.into_inner());
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(MAX_READ) as usize;
        if let Err(e) = s.region.read(at, &mut piece[..n]) {
            // Part of the reply is sent: the peer learns of the failure by the closed connection.
            tracing::error!(error = %e, offset = at, "cannot read the data area for an operator");
            return Err(LongRead::Failed);
        }
        if send(conn, FrameKind::Reply, 0, &piece[..n]).is_err() {
            return Err(LongRead::Failed);
        }
        at += n as u64;
    }
    let _ = conn.set_send_timeout(None);
    Ok(())
}
