//! The connecting side of the handshake, for primaries and operators' tools.

use crate::config::{RegionId, Secret};
use crate::error::{Error, Result};
use crate::net::{read_frame, write_frame};
use mojim_core::handshake::{ClientHandshake, HandshakeError};
use mojim_format::handshake::{Hello, PeerRole, Welcome, NONCE_SIZE, REFUSE_MAX};
use mojim_transport::{Conn, Transport};
use std::time::Duration;

/// What a connection is for.
#[derive(Clone, Copy, Debug)]
pub struct Intro {
    pub role: PeerRole,
    pub region: RegionId,
    pub epoch: u64,
    pub session: u64,
    pub lane: u16,
    pub lanes: u16,
    pub max_frame: u32,
    /// The history the sender's copy follows (0: unknown or not applicable).
    pub generation: u64,
}

/// Connects to `addr` and completes the handshake.
pub fn connect<T: Transport>(
    transport: &T,
    addr: &str,
    timeout: Duration,
    secret: &Secret,
    intro: &Intro,
) -> Result<(T::Conn, Welcome)> {
    let mut conn = transport.connect(addr, timeout).map_err(Error::io(format!("connect to {addr}")))?;
    conn.set_recv_timeout(Some(timeout)).map_err(Error::io("set timeout"))?;
    let mut nonce = [0u8; NONCE_SIZE];
    crate::random::fill(&mut nonce);
    let hello = Hello {
        role: intro.role,
        lane: intro.lane,
        lanes: intro.lanes,
        region_uuid: intro.region.uuid,
        region_size: intro.region.size,
        epoch: intro.epoch,
        session: intro.session,
        nonce,
        max_frame: intro.max_frame,
        generation: intro.generation,
    };
    let hs = ClientHandshake::new(&hello, &secret.0);
    let peer = addr.to_string();
    let fail = |source: HandshakeError| match source {
        HandshakeError::Refused { code, message } => Error::Refused { peer: peer.clone(), code, message },
        source => Error::Handshake { peer: peer.clone(), source },
    };
    let out = hs.hello();
    write_frame(&mut conn, &out.header, &out.body).map_err(Error::io(format!("send Hello to {addr}")))?;
    let mut body = Vec::with_capacity(REFUSE_MAX);
    let h = read_frame(&mut conn, REFUSE_MAX, &mut body).map_err(|e| Error::Io {
        op: format!("handshake with {addr}"),
        source: std::io::Error::other(e.to_string()),
    })?;
    let proof = hs.on_challenge(&h, &body).map_err(fail)?;
    write_frame(&mut conn, &proof.header, &proof.body).map_err(Error::io(format!("send Proof to {addr}")))?;
    let h = read_frame(&mut conn, REFUSE_MAX, &mut body).map_err(|e| Error::Io {
        op: format!("handshake with {addr}"),
        source: std::io::Error::other(e.to_string()),
    })?;
    let welcome = hs.on_verdict(&h, &body).map_err(fail)?;
    conn.set_recv_timeout(None).map_err(Error::io("clear timeout"))?;
    Ok((conn, welcome))
}
