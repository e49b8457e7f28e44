//! One lane's handshake, run through the core's two state machines ([`ClientHandshake`] on the
//! primary, [`ServerHandshake`] on the mirror) with every frame encoded and decoded as on the
//! wire: Hello, Challenge, the primary's Proof, the mirror's Proof, then Welcome or Refuse.
//!
//! The exchange is split where the daemon's mirror acts between the two halves: once the Proof
//! is verified, the mirror joins the lane to its session (perhaps ending another session and
//! adopting a higher epoch) before it answers.

use super::Check;
use crate::handshake::{ClientHandshake, HandshakeError, Identity, Refusal, ServerHandshake};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{encode_refuse, Hello, RefuseCode, Welcome, NONCE_SIZE};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};

/// The cluster secret every simulated node holds.
const SECRET: &[u8] = b"mojim simulated cluster secret";

/// A lane's handshake after the Proof, waiting for the mirror's verdict.
pub(super) struct LaneHandshake {
    client: ClientHandshake,
}

/// What the mirror made of a primary's Proof.
pub(super) type Verdict = Result<Hello, Refusal>;

impl LaneHandshake {
    /// Hello, Challenge and both Proofs. Returns the handshake and the mirror's verdict: the
    /// authenticated Hello, or why it refuses (`me` is checked by the core).
    pub fn authenticate(
        hello: &Hello,
        nonce: [u8; NONCE_SIZE],
        me: &Identity,
    ) -> Check<(LaneHandshake, Verdict)> {
        let mut client = ClientHandshake::new(hello, SECRET);
        let mut server = ServerHandshake::new(SECRET, nonce);
        let hello = client.hello();
        let h = wire(&hello.header, &hello.body)?;
        let challenge =
            server.on_hello(&h, &hello.body).map_err(|r| format!("the mirror refused a valid Hello: {r}"))?;
        let h = wire(&challenge.header, &challenge.body)?;
        let proof = client
            .on_challenge(&h, &challenge.body)
            .map_err(|e| format!("the primary refused the mirror's Challenge: {e}"))?;
        let h = wire(&proof.header, &proof.body)?;
        let verdict = match server.on_proof(&h, &proof.body, me) {
            Ok(accepted) => {
                let h = wire(&accepted.proof.header, &accepted.proof.body)?;
                client
                    .on_proof(&h, &accepted.proof.body)
                    .map_err(|e| format!("the primary refused the mirror's Proof: {e}"))?;
                Ok(accepted.hello)
            }
            Err(refusal) => Err(refusal),
        };
        Ok((LaneHandshake { client }, verdict))
    }

    /// The mirror sends its refusal; returns the code the primary reads from it.
    pub fn refuse(&self, refusal: &Refusal) -> Check<RefuseCode> {
        let mut body = Vec::new();
        encode_refuse(refusal.code, &refusal.message, &mut body);
        let h = wire(&frame(FrameKind::Refuse, &body), &body)?;
        match self.client.on_verdict(&h, &body) {
            Err(HandshakeError::Refused { code, message }) if message == refusal.message => Ok(code),
            other => Err(format!("the primary read the refusal {refusal} as {other:?}")),
        }
    }

    /// The mirror sends its Welcome; returns what the primary reads from it.
    pub fn welcome(&self, welcome: &Welcome) -> Check<Welcome> {
        let body = welcome.encode();
        let h = wire(&frame(FrameKind::Welcome, &body), &body)?;
        self.client
            .on_verdict(&h, &body)
            .map_err(|e| format!("the primary refused the Welcome {welcome:?}: {e}"))
    }
}

/// A handshake frame of `kind` carrying `body`.
fn frame(kind: FrameKind, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(kind);
    h.body_len = body.len() as u32;
    h.body_checksum = crc32c(body);
    h.to_bytes()
}

/// Receives a frame as the daemon does: the header decoded and the body checked against it.
fn wire(header: &[u8; FRAME_HEADER_SIZE], body: &[u8]) -> Check<FrameHeader> {
    let h = FrameHeader::decode(header).map_err(|e| format!("a handshake frame does not decode: {e}"))?;
    h.check_body(body).map_err(|e| format!("a {:?} frame's body does not match its header: {e}", h.kind))?;
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_format::handshake::PeerRole;

    fn hello(epoch: u64) -> Hello {
        Hello {
            role: PeerRole::Primary,
            lane: 0,
            lanes: 1,
            region_uuid: [1; 16],
            region_size: 4096,
            epoch,
            session: 9,
            nonce: [2; NONCE_SIZE],
            max_frame: 256,
            generation: 0,
            place: false,
            encrypt_placed: false,
        }
    }

    #[test]
    fn a_lower_epoch_is_refused_and_the_primary_reads_why() {
        let me = Identity { region_uuid: [1; 16], region_size: 4096, epoch: 3, max_lanes: 4 };
        let (hs, verdict) = LaneHandshake::authenticate(&hello(2), [7; NONCE_SIZE], &me).unwrap();
        let refusal = verdict.unwrap_err();
        assert_eq!(hs.refuse(&refusal).unwrap(), RefuseCode::Epoch);
        let (hs, verdict) = LaneHandshake::authenticate(&hello(4), [7; NONCE_SIZE], &me).unwrap();
        assert_eq!(verdict.unwrap(), hello(4));
        let w = Welcome { next_seq: 5, log_capacity: 4096, max_frame: 256, epoch: 4, ..Welcome::default() };
        assert_eq!(hs.welcome(&w).unwrap(), w);
    }
}
