//! The connecting side of the handshake, for primaries and operators' tools.

use crate::config::{RegionId, Secret};
use crate::error::{Error, Result};
use crate::net::{read_frame, timed_out, write_frame, ReadError};
use mojim_core::handshake::{ClientHandshake, HandshakeError};
use mojim_format::handshake::{Hello, PeerRole, Welcome, NONCE_SIZE, REFUSE_MAX};
use mojim_format::FrameHeader;
use mojim_transport::{Conn, Transport};
use std::io::ErrorKind;
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
    let h = read_reply(&mut conn, addr, timeout, &mut body, "Challenge", "is a Mojim node listening there?")?;
    let proof = hs.on_challenge(&h, &body).map_err(fail)?;
    write_frame(&mut conn, &proof.header, &proof.body).map_err(Error::io(format!("send Proof to {addr}")))?;
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
    let h = read_reply(&mut conn, addr, timeout, &mut body, "answer to the Proof", hint)?;
    let welcome = hs.on_verdict(&h, &body).map_err(fail)?;
    conn.set_recv_timeout(None).map_err(Error::io("clear timeout"))?;
    Ok((conn, welcome))
}

/// Reads the handshake's next frame, `what`; if none comes within `timeout`, says so, and `hint`.
fn read_reply(
    conn: &mut impl std::io::Read,
    addr: &str,
    timeout: Duration,
    body: &mut Vec<u8>,
    what: &str,
    hint: &str,
) -> Result<FrameHeader> {
    read_frame(conn, REFUSE_MAX, body).map_err(|e| Error::Io {
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
    use mojim_core::handshake::ServerHandshake;
    use mojim_transport::TcpTransport;
    use std::io::Write;
    use std::net::TcpListener;

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
        }
    }

    /// Connects as `role` to a peer that runs `serve` on the accepted stream, with a short
    /// timeout, and returns the error.
    fn connect_to(role: PeerRole, serve: impl FnOnce(std::net::TcpStream) + Send) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        std::thread::scope(|s| {
            s.spawn(|| serve(listener.accept().expect("accept").0));
            let secret = Secret(b"a secret".to_vec());
            match connect(&TcpTransport, &addr, Duration::from_millis(300), &secret, &intro(role)) {
                Ok(_) => panic!("the handshake with a stalled peer succeeded"),
                Err(e) => e.to_string(),
            }
        })
    }

    /// Holds the stream open, unanswered, until the client has given up.
    fn hold(mut stream: std::net::TcpStream) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = std::io::copy(&mut stream, &mut std::io::sink());
    }

    #[test]
    fn a_peer_that_never_challenges_is_named_with_the_timeout() {
        let e = connect_to(PeerRole::Primary, hold);
        assert!(e.contains("no Challenge within 300ms"), "{e}");
        assert!(e.contains("is a Mojim node listening there?"), "{e}");
    }

    #[test]
    fn a_peer_that_never_welcomes_a_lane_points_at_the_log_and_the_timeout() {
        let serve = |mut stream: std::net::TcpStream| {
            let mut hs = ServerHandshake::new(b"a secret", [3; NONCE_SIZE]);
            let mut body = Vec::new();
            let h = read_frame(&mut stream, REFUSE_MAX, &mut body).expect("Hello");
            let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
            stream.write_all(&challenge.header).expect("send");
            stream.write_all(&challenge.body).expect("send");
            // The Proof comes; the answer, as from a node still making a large log, does not.
            hold(stream);
        };
        let e = connect_to(PeerRole::Primary, serve);
        assert!(e.contains("no answer to the Proof within 300ms"), "{e}");
        assert!(e.contains("[mirror] log_capacity") && e.contains("[primary] connect_timeout_ms"), "{e}");
        assert!(e.contains("previous session's lanes have left"), "{e}");
        let e = connect_to(PeerRole::Mirror, serve);
        assert!(e.contains("its [mirror] log_capacity") && e.contains("the mirror tries again"), "{e}");
        let e = connect_to(PeerRole::Admin, serve);
        assert!(e.contains("no answer to the Proof within 300ms: is the node stalled?"), "{e}");
    }
}
