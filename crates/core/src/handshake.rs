//! The connection handshake as two small state machines.
//!
//! ```text
//! connecting side                     accepting side
//!   Hello{role, region, epoch, nonce_c} ─▶  version checked by the header
//!                                     ◀─ Challenge{nonce_s}
//!   Proof{proof_c}                     ─▶ verifies proof_c (a wrong one: Refuse{Secret}, close)
//!                                     ◀─ Proof{proof_s}
//!   verifies proof_s                      checks region and epoch
//!                                     ◀─ Welcome{next_seq, ...} | Refuse{code, message}
//! ```
//! The connecting side proves the secret first, so a peer that has not proven it receives
//! nothing that depends on the secret (no value to test guessed secrets against) and nothing
//! about the region. The connecting side believes a Welcome only after the accepting side's
//! proof.

use crate::auth;
use mojim_format::frame::FrameError;
use mojim_format::handshake::{
    decode_proof, decode_refuse, BodyFormatError, Challenge, Hello, PeerRole, RefuseCode, Welcome,
    CHALLENGE_SIZE, HELLO_SIZE, NONCE_SIZE, PROOF_SIZE,
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
    /// The accepting side's nonce, once its Challenge came.
    nonce: Option<[u8; NONCE_SIZE]>,
    /// Whether the accepting side has proven the secret.
    verified: bool,
}

impl ClientHandshake {
    pub fn new(hello: &Hello, secret: &[u8]) -> ClientHandshake {
        ClientHandshake { hello: hello.encode(), secret: secret.to_vec(), nonce: None, verified: false }
    }

    /// The Hello frame.
    pub fn hello(&self) -> Outgoing<HELLO_SIZE> {
        frame(FrameKind::Hello, self.hello)
    }

    /// Takes the Challenge and answers with this side's Proof frame.
    pub fn on_challenge(
        &mut self,
        h: &FrameHeader,
        body: &[u8],
    ) -> Result<Outgoing<PROOF_SIZE>, HandshakeError> {
        expect(h, body, FrameKind::Challenge)?;
        let c = Challenge::decode(body).map_err(HandshakeError::Body)?;
        self.nonce = Some(c.nonce);
        Ok(frame(FrameKind::Proof, auth::client_proof(&self.secret, &self.hello, &c.nonce)))
    }

    /// Checks the accepting side's Proof, which it sends once this side's Proof checked.
    pub fn on_proof(&mut self, h: &FrameHeader, body: &[u8]) -> Result<(), HandshakeError> {
        let nonce = self.nonce.expect("on_proof is called after on_challenge");
        expect(h, body, FrameKind::Proof)?;
        let proof = decode_proof(body).map_err(HandshakeError::Body)?;
        if !auth::verify_server(&self.secret, &self.hello, &nonce, &proof) {
            return Err(HandshakeError::PeerSecret);
        }
        self.verified = true;
        Ok(())
    }

    /// Reads the verdict. A refusal is read at any step; a Welcome only from a peer that has
    /// proven the secret.
    pub fn on_verdict(&self, h: &FrameHeader, body: &[u8]) -> Result<Welcome, HandshakeError> {
        let expected = if self.verified { FrameKind::Welcome } else { FrameKind::Proof };
        expect(h, body, expected)?;
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

/// Most lanes a mirror serves: a session's lanes are a bit set in one 64-bit word. The node
/// refuses a `max_lanes` above it, and the simulator's mirror offers all of them.
pub const MAX_LANES: u16 = 64;

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

/// A peer that proved the secret.
pub struct Accepted {
    /// Its Hello (a primary's already checked against this node's [`Identity`]).
    pub hello: Hello,
    /// This side's Proof frame, to send before the verdict.
    pub proof: Outgoing<PROOF_SIZE>,
}

impl ServerHandshake {
    /// `nonce` must be fresh randomness for this connection.
    pub fn new(secret: &[u8], nonce: [u8; NONCE_SIZE]) -> ServerHandshake {
        ServerHandshake { secret: secret.to_vec(), nonce, hello: None }
    }

    /// Takes the Hello (its header already decoded, so the version matched) and answers with
    /// the Challenge: this side's nonce, nothing that depends on the secret.
    pub fn on_hello(&mut self, h: &FrameHeader, body: &[u8]) -> Result<Outgoing<CHALLENGE_SIZE>, Refusal> {
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
        self.hello = Some((hello, raw));
        Ok(frame(FrameKind::Challenge, Challenge { nonce: self.nonce }.encode()))
    }

    /// Takes the connecting side's Proof. A wrong one is refused with a fixed message, before
    /// this side proves anything. A right one authenticates the peer: its Hello is returned with
    /// this side's Proof; a primary's Hello is also checked against `me` (a mismatch is refused,
    /// and this side's Proof is then not sent).
    pub fn on_proof(&mut self, h: &FrameHeader, body: &[u8], me: &Identity) -> Result<Accepted, Refusal> {
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
        let accepted = |hello| Accepted {
            hello,
            proof: frame(FrameKind::Proof, auth::server_proof(&self.secret, &raw, &self.nonce)),
        };
        if hello.role == PeerRole::Admin {
            return Ok(accepted(hello));
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
        Ok(accepted(hello))
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
            place: false,
            encrypt_placed: false,
        }
    }

    const ME: Identity = Identity { region_uuid: [3; 16], region_size: 1 << 20, epoch: 1, max_lanes: 8 };

    fn wire<const N: usize>(o: &Outgoing<N>) -> FrameHeader {
        let h = FrameHeader::decode(&o.header).unwrap();
        h.check_body(&o.body).unwrap();
        h
    }

    /// Runs the whole exchange; returns the Hello the accepting side authenticated and the
    /// Welcome the connecting side read.
    fn run(client_secret: &[u8], server_secret: &[u8], h: Hello) -> Result<Hello, String> {
        let mut c = ClientHandshake::new(&h, client_secret);
        let mut s = ServerHandshake::new(server_secret, [9; 32]);
        let o = c.hello();
        let ch = s.on_hello(&wire(&o), &o.body).map_err(|r| r.to_string())?;
        let p = c.on_challenge(&wire(&ch), &ch.body).map_err(|e| e.to_string())?;
        let accepted = s.on_proof(&wire(&p), &p.body, &ME).map_err(|r| r.to_string())?;
        c.on_proof(&wire(&accepted.proof), &accepted.proof.body).map_err(|e| e.to_string())?;
        let w = Welcome { next_seq: 4, ..Welcome::default() };
        let wf = frame(FrameKind::Welcome, w.encode());
        assert_eq!(c.on_verdict(&wire(&wf), &wf.body), Ok(w));
        Ok(accepted.hello)
    }

    #[test]
    fn same_secret_is_accepted() {
        assert_eq!(run(b"k", b"k", hello()), Ok(hello()));
    }

    #[test]
    fn a_wrong_secret_is_refused_before_the_accepting_side_proves_anything() {
        let e = run(b"k", b"other", hello()).unwrap_err();
        assert!(e.starts_with("Secret: wrong cluster secret"), "{e}");
    }

    #[test]
    fn what_an_unproven_peer_receives_does_not_depend_on_the_secret() {
        // Two nodes with different secrets and the same nonce send the same bytes to a peer
        // that has not proven the secret: the Challenge, and the refusal of a wrong Proof.
        let answers = |secret: &[u8]| {
            let mut s = ServerHandshake::new(secret, [9; 32]);
            let o = ClientHandshake::new(&hello(), b"guess").hello();
            let ch = s.on_hello(&wire(&o), &o.body).unwrap();
            let p = frame(FrameKind::Proof, [0xab; PROOF_SIZE]);
            let refusal = s.on_proof(&wire(&p), &p.body, &ME).err().expect("refused");
            assert_eq!(refusal.code, RefuseCode::Secret);
            (ch.header, ch.body, refusal)
        };
        let (h1, b1, r1) = answers(b"the first secret");
        let (h2, b2, r2) = answers(b"another secret!!");
        assert_eq!((h1, b1, &r1), (h2, b2, &r2));
        assert_eq!(b1, [9; 32], "the Challenge is the nonce alone");
    }

    #[test]
    fn the_connecting_side_believes_a_welcome_only_after_the_peers_proof() {
        let mut c = ClientHandshake::new(&hello(), b"k");
        let ch = frame(FrameKind::Challenge, Challenge { nonce: [1; 32] }.encode());
        c.on_challenge(&wire(&ch), &ch.body).unwrap();
        let w = frame(FrameKind::Welcome, Welcome::default().encode());
        let e = c.on_verdict(&wire(&w), &w.body).unwrap_err();
        assert_eq!(e, HandshakeError::Unexpected { expected: FrameKind::Proof, found: FrameKind::Welcome });
        // A proof made with another secret is caught.
        let forged = frame(FrameKind::Proof, auth::server_proof(b"not k", &hello().encode(), &[1; 32]));
        assert_eq!(c.on_proof(&wire(&forged), &forged.body), Err(HandshakeError::PeerSecret));
        // A client proof reflected back is not a server proof.
        let mirrored = frame(FrameKind::Proof, auth::client_proof(b"k", &hello().encode(), &[1; 32]));
        assert_eq!(c.on_proof(&wire(&mirrored), &mirrored.body), Err(HandshakeError::PeerSecret));
        assert!(c.on_verdict(&wire(&w), &w.body).is_err());
        // A refusal is read at any step.
        let mut body = Vec::new();
        mojim_format::handshake::encode_refuse(RefuseCode::Busy, "busy", &mut body);
        let mut rh = FrameHeader::new(FrameKind::Refuse);
        rh.body_len = body.len() as u32;
        rh.body_checksum = mojim_format::checksum::crc32c(&body);
        assert!(matches!(
            c.on_verdict(&rh, &body),
            Err(HandshakeError::Refused { code: RefuseCode::Busy, .. })
        ));
    }

    #[test]
    fn region_mismatch_names_both_values() {
        let e = run(b"k", b"k", Hello { region_size: 4096, ..hello() }).unwrap_err();
        assert!(e.contains("4096") && e.contains("1048576"), "{e}");
        let e = run(b"k", b"k", Hello { epoch: 0, ..hello() }).unwrap_err();
        assert!(e.contains("epoch 0") && e.contains("epoch 1"), "{e}");
    }
}
