//! The connection handshake as two small state machines.
//!
//! ```text
//! connecting side                     accepting side
//!   Hello{role, region, epoch, nonce_c} ─▶  version checked by the header
//!                                     ◀─ Challenge{nonce_s, proof_s}
//!   verifies proof_s                   
//!   Proof{proof_c}                     ─▶ verifies proof_c, then region and epoch
//!                                     ◀─ Welcome{next_seq, ...} | Refuse{code, message}
//! ```
//! Nothing about the region is revealed to a peer that has not proven the secret.

use crate::auth;
use mojim_format::frame::FrameError;
use mojim_format::handshake::{
    decode_proof, decode_refuse, BodyFormatError, Challenge, Hello, PeerRole, RefuseCode, Welcome,
    HELLO_SIZE, NONCE_SIZE, PROOF_SIZE,
};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;

/// A handshake frame to send: its header and body.
pub struct Outgoing<const N: usize> {
    pub header: [u8; FRAME_HEADER_SIZE],
    pub body: [u8; N],
}

fn frame<const N: usize>(kind: FrameKind, body: [u8; N]) -> Outgoing<N> {
    let mut h = FrameHeader::new(kind);
    h.body_len = N as u32;
    h.body_checksum = mojim_format::checksum::crc32c(&body);
    Outgoing { header: h.to_bytes(), body }
}

/// Why the connecting side gave up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The accepting side refused, and said why.
    Refused {
        code: RefuseCode,
        message: String,
    },
    /// The accepting side could not prove the cluster secret.
    PeerSecret,
    /// The peer sent something that is not part of the handshake.
    Frame(FrameError),
    Body(BodyFormatError),
    Unexpected {
        expected: FrameKind,
        found: FrameKind,
    },
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Refused { code, message } => write!(f, "refused ({code:?}): {message}"),
            HandshakeError::PeerSecret => write!(
                f,
                "the peer failed to prove the cluster secret; check that both sides use the same secret"
            ),
            HandshakeError::Frame(e) => write!(f, "bad handshake frame: {e}"),
            HandshakeError::Body(e) => write!(f, "bad handshake body: {e}"),
            HandshakeError::Unexpected { expected, found } => {
                write!(f, "expected a {expected:?} frame, got {found:?}")
            }
        }
    }
}

impl std::error::Error for HandshakeError {}

fn expect(h: &FrameHeader, body: &[u8], kind: FrameKind) -> Result<(), HandshakeError> {
    if h.kind == FrameKind::Refuse {
        let (code, message) = decode_refuse(body).map_err(HandshakeError::Body)?;
        return Err(HandshakeError::Refused { code, message });
    }
    if h.kind != kind {
        return Err(HandshakeError::Unexpected { expected: kind, found: h.kind });
    }
    Ok(())
}

/// The connecting side.
pub struct ClientHandshake {
    hello: [u8; HELLO_SIZE],
    secret: Vec<u8>,
}

impl ClientHandshake {
    pub fn new(hello: &Hello, secret: &[u8]) -> ClientHandshake {
        ClientHandshake { hello: hello.encode(), secret: secret.to_vec() }
    }

    /// The Hello frame.
    pub fn hello(&self) -> Outgoing<HELLO_SIZE> {
        frame(FrameKind::Hello, self.hello)
    }

    /// Checks the Challenge and answers with the Proof frame.
    pub fn on_challenge(&self, h: &FrameHeader, body: &[u8]) -> Result<Outgoing<PROOF_SIZE>, HandshakeError> {
        expect(h, body, FrameKind::Challenge)?;
        let c = Challenge::decode(body).map_err(HandshakeError::Body)?;
        if !auth::verify_server(&self.secret, &self.hello, &c.nonce, &c.proof) {
            return Err(HandshakeError::PeerSecret);
        }
        Ok(frame(FrameKind::Proof, auth::client_proof(&self.secret, &self.hello, &c.nonce)))
    }

    /// Reads the verdict.
    pub fn on_verdict(&self, h: &FrameHeader, body: &[u8]) -> Result<Welcome, HandshakeError> {
        expect(h, body, FrameKind::Welcome)?;
        Welcome::decode(body).map_err(HandshakeError::Body)
    }
}

/// A refusal to send before closing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: RefuseCode,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// What the accepting side requires of a primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub region_uuid: [u8; 16],
    pub region_size: u64,
    pub epoch: u64,
    pub max_lanes: u16,
}

fn uuid_hex(u: &[u8; 16]) -> String {
    u.iter().map(|b| format!("{b:02x}")).collect()
}

/// The accepting side.
pub struct ServerHandshake {
    secret: Vec<u8>,
    nonce: [u8; NONCE_SIZE],
    hello: Option<(Hello, [u8; HELLO_SIZE])>,
}

impl ServerHandshake {
    /// `nonce` must be fresh randomness for this connection.
    pub fn new(secret: &[u8], nonce: [u8; NONCE_SIZE]) -> ServerHandshake {
        ServerHandshake { secret: secret.to_vec(), nonce, hello: None }
    }

    /// Takes the Hello (its header already decoded, so the version matched) and answers with
    /// the Challenge.
    pub fn on_hello(
        &mut self,
        h: &FrameHeader,
        body: &[u8],
    ) -> Result<Outgoing<{ NONCE_SIZE + PROOF_SIZE }>, Refusal> {
        if h.kind != FrameKind::Hello {
            return Err(Refusal {
                code: RefuseCode::Malformed,
                message: format!("expected Hello, got {:?}", h.kind),
            });
        }
        let hello = Hello::decode(body)
            .map_err(|e| Refusal { code: RefuseCode::Malformed, message: e.to_string() })?;
        let mut raw = [0u8; HELLO_SIZE];
        raw.copy_from_slice(body);
        let proof = auth::server_proof(&self.secret, &raw, &self.nonce);
        self.hello = Some((hello, raw));
        Ok(frame(FrameKind::Challenge, Challenge { nonce: self.nonce, proof }.encode()))
    }

    /// Takes the Proof. On success the peer is authenticated and its Hello is returned; a
    /// primary's Hello is also checked against `me`.
    pub fn on_proof(&mut self, h: &FrameHeader, body: &[u8], me: &Identity) -> Result<Hello, Refusal> {
        let Some((hello, raw)) = self.hello.take() else {
            return Err(Refusal { code: RefuseCode::Malformed, message: "Proof before Hello".into() });
        };
        if h.kind != FrameKind::Proof {
            return Err(Refusal {
                code: RefuseCode::Malformed,
                message: format!("expected Proof, got {:?}", h.kind),
            });
        }
        let proof = decode_proof(body)
            .map_err(|e| Refusal { code: RefuseCode::Malformed, message: e.to_string() })?;
        if !auth::verify_client(&self.secret, &raw, &self.nonce, &proof) {
            return Err(Refusal {
                code: RefuseCode::Secret,
                message: "wrong cluster secret: the proof does not match this node's secret; \
                          set the same secret (config `secret` or MOJIM_SECRET) on both sides"
                    .into(),
            });
        }
        if hello.role == PeerRole::Admin {
            return Ok(hello);
        }
        if hello.region_uuid != me.region_uuid {
            return Err(Refusal {
                code: RefuseCode::Region,
                message: format!(
                    "region uuid mismatch: primary has {}, this node has {}",
                    uuid_hex(&hello.region_uuid),
                    uuid_hex(&me.region_uuid)
                ),
            });
        }
        if hello.region_size != me.region_size {
            return Err(Refusal {
                code: RefuseCode::Region,
                message: format!(
                    "region size mismatch: primary has {} bytes, this node has {} bytes",
                    hello.region_size, me.region_size
                ),
            });
        }
        if hello.epoch < me.epoch {
            return Err(Refusal {
                code: RefuseCode::Epoch,
                message: format!(
                    "stale epoch: primary is at epoch {}, this node is at epoch {}",
                    hello.epoch, me.epoch
                ),
            });
        }
        if hello.lanes == 0 || hello.lanes > me.max_lanes || hello.lane >= hello.lanes {
            return Err(Refusal {
                code: RefuseCode::Malformed,
                message: format!(
                    "lane {} of {} is not acceptable: this node serves 1 to {} lanes",
                    hello.lane, hello.lanes, me.max_lanes
                ),
            });
        }
        Ok(hello)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_format::FrameHeader;

    fn hello() -> Hello {
        Hello {
            role: PeerRole::Primary,
            lane: 0,
            lanes: 2,
            region_uuid: [3; 16],
            region_size: 1 << 20,
            epoch: 1,
            session: 77,
            nonce: [5; 32],
            max_frame: 65536,
            generation: 0,
        }
    }

    const ME: Identity = Identity { region_uuid: [3; 16], region_size: 1 << 20, epoch: 1, max_lanes: 8 };

    fn run(client_secret: &[u8], server_secret: &[u8], h: Hello) -> Result<Hello, String> {
        let c = ClientHandshake::new(&h, client_secret);
        let mut s = ServerHandshake::new(server_secret, [9; 32]);
        let o = c.hello();
        let hh = FrameHeader::decode(&o.header).unwrap();
        let ch = s.on_hello(&hh, &o.body).map_err(|r| r.to_string())?;
        let chh = FrameHeader::decode(&ch.header).unwrap();
        let p = c.on_challenge(&chh, &ch.body).map_err(|e| e.to_string())?;
        let ph = FrameHeader::decode(&p.header).unwrap();
        s.on_proof(&ph, &p.body, &ME).map_err(|r| r.to_string())
    }

    #[test]
    fn same_secret_is_accepted() {
        assert_eq!(run(b"k", b"k", hello()), Ok(hello()));
    }

    #[test]
    fn wrong_secret_is_caught_by_both_sides() {
        let e = run(b"k", b"other", hello()).unwrap_err();
        assert!(e.contains("failed to prove"), "{e}");
    }

    #[test]
    fn region_mismatch_names_both_values() {
        let e = run(b"k", b"k", Hello { region_size: 4096, ..hello() }).unwrap_err();
        assert!(e.contains("4096") && e.contains("1048576"), "{e}");
        let e = run(b"k", b"k", Hello { epoch: 0, ..hello() }).unwrap_err();
        assert!(e.contains("epoch 0") && e.contains("epoch 1"), "{e}");
    }
}
