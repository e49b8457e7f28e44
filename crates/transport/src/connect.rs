//! The connecting side of the handshake: a primary's lanes, a mirror feeding its backups, and
//! operators' tools. An application never calls it, since `mojim::Primary` connects by itself.

use crate::frames::{read_frame, timed_out, write_frame, ReadBy, ReadError};
use crate::{Conn, Transport};
use mojim_core::handshake::{ClientHandshake, HandshakeError};
use mojim_format::handshake::{Hello, PeerRole, RefuseCode, RegionId, Welcome, NONCE_SIZE, REFUSE_MAX};
use mojim_format::FrameHeader;
use std::fmt;
use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

/// Why a connection was not made: the network or a silent peer, the peer's refusal, or a
/// handshake the peer got wrong (or this side's secret did not match).
#[derive(Debug)]
pub enum ConnectError {
    /// Connecting, sending or receiving failed, or an answer did not come in time (`op` says
    /// which step, and the error says what to check).
    Io {
        /// The step that failed, naming the peer.
        op: String,
        /// What failed.
        source: io::Error,
    },
    /// The peer refused this side and said why.
    Refused {
        /// The peer's address.
        peer: String,
        /// Why, as a code.
        code: RefuseCode,
        /// What the peer said.
        message: String,
    },
    /// The handshake failed: a malformed answer, or proofs that did not match (the secret).
    Handshake {
        /// The peer's address.
        peer: String,
        /// What went wrong.
        source: HandshakeError,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Io { op, source } => write!(f, "{op}: {source}"),
            ConnectError::Refused { peer, code, message } => {
                write!(f, "{peer} refused the connection ({code:?}): {message}")
            }
            ConnectError::Handshake { peer, source } => write!(f, "handshake with {peer} failed: {source}"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Io { source, .. } => Some(source),
            ConnectError::Handshake { source, .. } => Some(source),
            ConnectError::Refused { .. } => None,
        }
    }
}

fn io_error(op: impl Into<String>) -> impl FnOnce(io::Error) -> ConnectError {
    let op = op.into();
    move |source| ConnectError::Io { op, source }
}

/// What a connection is for.
#[derive(Clone, Copy, Debug)]
pub struct Intro {
    /// What this side is: a primary's lane, a mirror feeding its backup, or an operator's tool.
    pub role: PeerRole,
    /// The replicated region (its uuid and size), which the peer checks against its own.
    pub region: RegionId,
    /// This side's epoch.
    pub epoch: u64,
    /// The random id shared by the session's lanes.
    pub session: u64,
    /// The lane this connection carries.
    pub lane: u16,
    /// The lanes in the session.
    pub lanes: u16,
    /// The largest body this side will put in a `Data` frame, in bytes.
    pub max_frame: u32,
    /// The history the sender's copy follows (0: unknown or not applicable).
    pub generation: u64,
    /// A primary's lane asks to place its records in the lane's log itself: the node answers
    /// its Welcome with a `Log` frame (read by the caller).
    pub place: bool,
    /// With `place`: this side encrypts the bodies it places (`[security] encrypt_placed`); a
    /// node set otherwise refuses the lane.
    pub encrypt_placed: bool,
}

/// Connects to `addr` and completes the handshake. Each of the peer's answers must arrive
/// whole within `timeout` (a peer that trickles bytes does not stretch it).
pub fn connect<T: Transport>(
    transport: &T,
    addr: &str,
    timeout: Duration,
    secret: &[u8],
    intro: &Intro,
) -> Result<(T::Conn, Welcome), ConnectError> {
    let mut conn = transport.connect(addr, timeout).map_err(io_error(format!("connect to {addr}")))?;
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
        place: intro.place,
        encrypt_placed: intro.place && intro.encrypt_placed,
    };
    let mut hs = ClientHandshake::new(&hello, secret);
    let peer = addr.to_string();
    let fail = |source: HandshakeError| {
        match source {
        // A node of an older build does not know the Hello's ENCRYPT flag: it refuses the Hello
        // as malformed, and cannot name the setting.
        HandshakeError::Refused { code: RefuseCode::Malformed, message } if hello.encrypt_placed => {
            ConnectError::Refused {
                peer: peer.clone(),
                code: RefuseCode::Malformed,
                message: format!(
                    "{message} (this lane asked to encrypt the records it places, [security] encrypt_placed = \
                     true, which a node of an older build does not know: upgrade it, or set encrypt_placed = \
                     false on both sides)"
                ),
            }
        }
        HandshakeError::Refused { code, message } => {
            ConnectError::Refused { peer: peer.clone(), code, message }
        }
        source => ConnectError::Handshake { peer: peer.clone(), source },
    }
    };
    let out = hs.hello();
    write_frame(&mut conn, &out.header, &out.body).map_err(io_error(format!("send Hello to {addr}")))?;
    let mut body = Vec::with_capacity(REFUSE_MAX);
    let h = read_reply(&mut conn, addr, timeout, &mut body, "Challenge", "is a Mojim node listening there?")?;
    let proof = hs.on_challenge(&h, &body).map_err(fail)?;
    write_frame(&mut conn, &proof.header, &proof.body).map_err(io_error(format!("send Proof to {addr}")))?;
    // The node proves the secret as soon as it has checked this side's proof.
    let h = read_reply(&mut conn, addr, timeout, &mut body, "Proof", "is the node stalled?")?;
    hs.on_proof(&h, &body).map_err(fail)?;
    // A node answers a lane once the lanes of its previous session have left, and a lane's first
    // handshake once it has made the lane's log.
    let hint = match intro.role {
        PeerRole::Admin => "is the node stalled?",
        PeerRole::Primary => {
            "the node answers once its previous session's lanes have left (its log says when it \
             waits for them), and a lane's first handshake once it has made the lane's log, which \
             for several GiB ([mirror] log_capacity) can take longer: then raise the connect timeout \
             ([primary] connect_timeout_ms)"
        }
        PeerRole::Mirror => {
            "a backup makes each lane's log before it answers a lane's first handshake, and a log \
             of several GiB (its [mirror] log_capacity) can take longer; the mirror tries again"
        }
    };
    let h = read_reply(&mut conn, addr, timeout, &mut body, "answer after the Proofs", hint)?;
    let welcome = hs.on_verdict(&h, &body).map_err(fail)?;
    conn.set_recv_timeout(None).map_err(io_error("clear timeout"))?;
    Ok((conn, welcome))
}

/// Reads the handshake's next frame, `what`; if it has not come whole within `timeout`, says
/// so, and `hint`.
fn read_reply<C: Conn>(
    conn: &mut C,
    addr: &str,
    timeout: Duration,
    body: &mut Vec<u8>,
    what: &str,
    hint: &str,
) -> Result<FrameHeader, ConnectError> {
    let mut by = ReadBy { conn, deadline: Instant::now() + timeout };
    read_frame(&mut by, REFUSE_MAX, body).map_err(|e| ConnectError::Io {
        op: format!("handshake with {addr}"),
        source: match e {
            ReadError::Io(e) if timed_out(&e) => {
                std::io::Error::new(ErrorKind::TimedOut, format!("no {what} within {timeout:?}: {hint}"))
            }
            e => std::io::Error::other(e.to_string()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemConn, MemTransport};
    use mojim_core::handshake::{Identity, ServerHandshake};
    use mojim_format::FrameKind;
    use std::io::Write;

    fn intro(role: PeerRole) -> Intro {
        Intro {
            role,
            region: RegionId { uuid: [7; 16], size: 1 << 20 },
            epoch: 1,
            session: 1,
            lane: 0,
            lanes: 1,
            max_frame: 1 << 20,
            generation: 0,
            place: false,
            encrypt_placed: false,
        }
    }

    /// The handshake's timeout where a test waits for it to run out at its first step.
    const SHORT: Duration = Duration::from_millis(300);
    /// The timeout where the peer answers the first steps and a later one is the test's point:
    /// the peer's thread must get to answer within it, and on a loaded machine a thread can
    /// wait longer than 300 ms for a core.
    const ROOMY: Duration = Duration::from_secs(2);

    /// Connects as `role`, with the handshake's `timeout`, to a peer that runs `serve` on the
    /// accepted stream, and returns the error.
    fn connect_to(role: PeerRole, timeout: Duration, serve: impl FnOnce(MemConn) + Send) -> String {
        let t = MemTransport::new();
        let listener = t.listen("node:0").expect("listen");
        let addr = t.local_addr(&listener).expect("addr");
        std::thread::scope(|s| {
            s.spawn(|| serve(t.accept(&listener).expect("accept")));
            match connect(&t, &addr, timeout, b"a secret", &intro(role)) {
                Ok(_) => panic!("the handshake with a stalled peer succeeded"),
                Err(e) => e.to_string(),
            }
        })
    }

    /// Holds the stream open, unanswered, until the client has given up.
    fn hold(mut stream: MemConn) {
        let _ = stream.set_recv_timeout(Some(Duration::from_secs(5)));
        let _ = std::io::copy(&mut stream, &mut std::io::sink());
    }

    /// A node of an older build knows the Hello's PLACE flag but not ENCRYPT: its decoder
    /// refuses the Hello as malformed, naming the flags. The lane's error names the setting.
    #[test]
    fn a_node_that_does_not_know_encrypt_placed_is_named_with_the_setting() {
        let t = MemTransport::new();
        let listener = t.listen("node:0").expect("listen");
        let addr = t.local_addr(&listener).expect("addr");
        let serve = |mut stream: MemConn| {
            let mut body = Vec::new();
            let h = read_frame(&mut stream, REFUSE_MAX, &mut body).expect("Hello");
            assert_eq!(h.kind, FrameKind::Hello);
            let flags = u16::from_le_bytes([body[6], body[7]]);
            assert_eq!(flags, 3, "PLACE and ENCRYPT");
            // What the decoder of a build that knows only PLACE answers.
            let why =
                mojim_format::handshake::BodyFormatError::Field { kind: "Hello", field: "flags", value: 3 };
            let mut refusal = Vec::new();
            mojim_format::handshake::encode_refuse(RefuseCode::Malformed, &why.to_string(), &mut refusal);
            crate::frames::send(&mut stream, FrameKind::Refuse, 0, &refusal).expect("send");
        };
        let e = std::thread::scope(|s| {
            s.spawn(|| serve(t.accept(&listener).expect("accept")));
            let intro = Intro { place: true, encrypt_placed: true, ..intro(PeerRole::Primary) };
            match connect(&t, &addr, Duration::from_secs(5), b"a secret", &intro) {
                Ok(_) => panic!("a node that refused the Hello welcomed the lane"),
                Err(e) => e.to_string(),
            }
        });
        assert!(e.contains("flags"), "{e}");
        assert!(
            e.contains("[security] encrypt_placed = true, which a node of an older build does not know"),
            "{e}"
        );
    }

    #[test]
    fn a_peer_that_never_challenges_is_named_with_the_timeout() {
        let e = connect_to(PeerRole::Primary, SHORT, hold);
        assert!(e.contains("no Challenge within 300ms"), "{e}");
        assert!(e.contains("is a Mojim node listening there?"), "{e}");
    }

    /// Answers the Hello with a Challenge, checks the Proof, and proves the secret back.
    fn challenge_and_prove(stream: &mut MemConn) {
        let mut hs = ServerHandshake::new(b"a secret", [3; NONCE_SIZE]);
        let mut body = Vec::new();
        let h = read_frame(stream, REFUSE_MAX, &mut body).expect("Hello");
        let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
        stream.write_all(&challenge.header).expect("send");
        stream.write_all(&challenge.body).expect("send");
        let h = read_frame(stream, REFUSE_MAX, &mut body).expect("Proof");
        let me = Identity { region_uuid: [7; 16], region_size: 1 << 20, epoch: 1, max_lanes: 8 };
        let accepted = hs.on_proof(&h, &body, &me).expect("the right secret");
        stream.write_all(&accepted.proof.header).expect("send");
        stream.write_all(&accepted.proof.body).expect("send");
    }

    #[test]
    fn a_peer_that_never_welcomes_a_lane_points_at_the_log_and_the_timeout() {
        let serve = |mut stream: MemConn| {
            challenge_and_prove(&mut stream);
            // The answer, as from a node still making a large log, does not come.
            hold(stream);
        };
        let e = connect_to(PeerRole::Primary, ROOMY, serve);
        assert!(e.contains("no answer after the Proofs within 2s"), "{e}");
        assert!(e.contains("[mirror] log_capacity") && e.contains("[primary] connect_timeout_ms"), "{e}");
        assert!(e.contains("previous session's lanes have left"), "{e}");
        let e = connect_to(PeerRole::Mirror, ROOMY, serve);
        assert!(e.contains("its [mirror] log_capacity") && e.contains("the mirror tries again"), "{e}");
        let e = connect_to(PeerRole::Admin, ROOMY, serve);
        assert!(e.contains("no answer after the Proofs within 2s: is the node stalled?"), "{e}");
    }

    #[test]
    fn a_peer_that_trickles_its_challenge_is_cut_at_the_timeout() {
        // One byte every 50 ms: each read gets a byte well within 300 ms, the whole frame
        // (96 bytes) does not.
        let serve = |mut stream: MemConn| {
            let mut body = Vec::new();
            let h = read_frame(&mut stream, REFUSE_MAX, &mut body).expect("Hello");
            let mut hs = ServerHandshake::new(b"a secret", [3; NONCE_SIZE]);
            let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
            for b in challenge.header.iter().chain(challenge.body.iter()) {
                if stream.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            hold(stream);
        };
        let e = connect_to(PeerRole::Admin, SHORT, serve);
        assert!(e.contains("no Challenge within 300ms"), "{e}");
    }

    #[test]
    fn a_peer_that_cannot_prove_the_secret_is_not_believed() {
        let serve = |mut stream: MemConn| {
            let mut hs = ServerHandshake::new(b"a secret", [3; NONCE_SIZE]);
            let mut body = Vec::new();
            let h = read_frame(&mut stream, REFUSE_MAX, &mut body).expect("Hello");
            let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
            stream.write_all(&challenge.header).expect("send");
            stream.write_all(&challenge.body).expect("send");
            let _ = read_frame(&mut stream, REFUSE_MAX, &mut body).expect("Proof");
            // A node that does not know the secret sends a made-up proof and a Welcome. The
            // client may hang up as soon as it has checked the proof, so what follows it may
            // find the connection closed.
            for (kind, b) in [
                (FrameKind::Proof, vec![0x5a; 32]),
                (FrameKind::Welcome, Welcome::default().encode().to_vec()),
            ] {
                let mut h = FrameHeader::new(kind);
                h.body_len = b.len() as u32;
                h.body_checksum = mojim_format::checksum::crc32c(&b);
                if stream.write_all(&h.to_bytes()).and_then(|()| stream.write_all(&b)).is_err() {
                    break;
                }
            }
            hold(stream);
        };
        let e = connect_to(PeerRole::Admin, ROOMY, serve);
        assert!(e.contains("failed to prove the cluster secret"), "{e}");
    }
}
