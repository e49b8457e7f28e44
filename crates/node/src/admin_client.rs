//! An operator's connection to a node: status and consistent reads.

use crate::MirrorStatus;
use mojim::config::{RegionId, Secret};
use mojim::error::{Error, Result};
use mojim_format::handshake::{decode_refuse, read_reply_len, PeerRole, Request};
use mojim_format::FrameKind;
use mojim_transport::connect::{connect, Intro};
use mojim_transport::frames::{read_frame, send};
use mojim_transport::{AnyConn, AnyTransport, Conn, Transport};
use std::time::Duration;

/// An authenticated operator's connection, over TCP unless made with
/// [`AdminClient::connect_with`].
pub struct AdminClient<C: Conn = AnyConn> {
    conn: C,
    addr: String,
    body: Vec<u8>,
}

impl AdminClient {
    /// Connects to the node at `addr` (TCP, or shared memory for a path) and proves `secret`,
    /// waiting at most `timeout` for each step.
    pub fn connect(addr: &str, secret: &Secret, timeout: Duration) -> Result<AdminClient> {
        AdminClient::connect_with(&AnyTransport::plain(), addr, secret, timeout)
    }

    /// As [`AdminClient::connect`], over mutual TLS with `tls` (`[security] tls`) when given.
    pub fn connect_tls(
        addr: &str,
        secret: &Secret,
        tls: Option<std::sync::Arc<mojim_transport::TlsContext>>,
        timeout: Duration,
    ) -> Result<AdminClient> {
        AdminClient::connect_with(&AnyTransport::new(tls), addr, secret, timeout)
    }
}

impl<C: Conn> AdminClient<C> {
    /// As [`AdminClient::connect`], over `transport`.
    pub fn connect_with<T: Transport<Conn = C>>(
        transport: &T,
        addr: &str,
        secret: &Secret,
        timeout: Duration,
    ) -> Result<AdminClient<C>> {
        let intro = Intro {
            role: PeerRole::Admin,
            region: RegionId { uuid: [0; 16], size: 0 },
            epoch: 0,
            session: 0,
            lane: 0,
            lanes: 0,
            max_frame: 0,
            generation: 0,
            place: false,
            encrypt_placed: false,
        };
        let (conn, _) = connect(transport, addr, timeout, &secret.0, &intro)?;
        Ok(AdminClient { conn, addr: addr.to_string(), body: Vec::new() })
    }

    /// A reply from the node that could not be read, or was not what was asked for.
    fn bad_reply(&self, why: impl std::fmt::Display) -> Error {
        Error::io(format!("reply from {}", self.addr))(std::io::Error::other(why.to_string()))
    }

    fn call(&mut self, req: Request, max_reply: usize) -> Result<Vec<u8>> {
        send(&mut self.conn, FrameKind::Request, 0, &req.encode())
            .map_err(Error::io(format!("send to {}", self.addr)))?;
        let h = read_frame(&mut self.conn, max_reply + 64, &mut self.body).map_err(|e| self.bad_reply(e))?;
        match h.kind {
            FrameKind::Reply => Ok(std::mem::take(&mut self.body)),
            FrameKind::Refuse => {
                let (code, message) = decode_refuse(&self.body)
                    .unwrap_or((mojim_format::handshake::RefuseCode::Other, String::new()));
                Err(Error::Refused { peer: self.addr.clone(), code, message })
            }
            k => Err(self.bad_reply(format!("unexpected {k:?} frame"))),
        }
    }

    /// Sends an operator's command (see `operator_commands.rs`) and returns the node's JSON reply.
    pub fn command(&mut self, json: &str) -> Result<serde_json::Value> {
        let b = self.call(Request::Command(json.to_string()), 1 << 16)?;
        serde_json::from_slice(&b)
            .map_err(|e| Error::io("decode the command's reply")(std::io::Error::other(e)))
    }

    pub fn status(&mut self) -> Result<MirrorStatus> {
        let b = self.call(Request::Status, 1 << 20)?;
        serde_json::from_slice(&b).map_err(|e| Error::io("decode status")(std::io::Error::other(e)))
    }

    /// Reads `len` bytes at `offset` of the node's data area as one consistent image: the
    /// result of applying whole groups, never part of one. The node holds its data area against
    /// the checkpointer while it sends a read longer than [`MAX_READ`](crate::MAX_READ) (in
    /// Reply frames of at most that size), so a long read delays checkpoints for as long as it
    /// takes.
    ///
    /// While a copy into the node is unfinished (its status says not `consistent`), no read is
    /// an image of the primary's: check [`MirrorStatus::consistent`] first.
    pub fn read(&mut self, offset: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_with(offset, len, |chunk| {
            if out.is_empty() {
                // Once the node has answered the read, room for all of it at once.
                out.reserve_exact(len as usize);
            }
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(out)
    }

    /// As [`AdminClient::read`], handing the image to `sink` in pieces of at most [`MAX_READ`](crate::MAX_READ)
    /// bytes, in order, so that an image of any size streams through a bounded buffer. An
    /// error from `sink` ends the read (and the connection's usefulness: the rest of the reply
    /// is not drained).
    pub fn read_with(
        &mut self,
        offset: u64,
        len: u64,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        if offset.checked_add(len).is_none() {
            return Err(Error::Range(mojim_core::encode::RangeError::OutOfBounds {
                offset,
                len,
                region_size: 0,
            }));
        }
        let first = read_reply_len(len, 0);
        let body = self.call(Request::Read { offset, len }, first)?;
        if body.len() != first {
            return Err(
                self.bad_reply(format!("{} bytes where the read's first {first} were due", body.len()))
            );
        }
        sink(&body)?;
        self.body = body;
        let mut done = first as u64;
        while done < len {
            let n = read_reply_len(len, done);
            let h = read_frame(&mut self.conn, n, &mut self.body).map_err(|e| self.bad_reply(e))?;
            if h.kind != FrameKind::Reply || self.body.len() != n {
                return Err(self.bad_reply(format!(
                    "a {:?} frame of {} bytes where {n} bytes of the read's reply were due",
                    h.kind,
                    self.body.len()
                )));
            }
            sink(&self.body)?;
            done += n as u64;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_core::handshake::{Identity, ServerHandshake};
    use mojim_format::handshake::{Welcome, NONCE_SIZE, REFUSE_MAX};
    use mojim_transport::MemTransport;

    const SECRET: &[u8] = b"the admin client tests' secret";

    /// A node that welcomes one operator and answers its first request with `reply`.
    fn node_answering(net: &MemTransport, reply: Vec<u8>) -> (String, std::thread::JoinHandle<()>) {
        let listener = net.listen("node:0").expect("listen");
        let addr = net.local_addr(&listener).expect("an address");
        let net = net.clone();
        let node = std::thread::spawn(move || {
            let mut conn = net.accept(&listener).expect("accept");
            let mut hs = ServerHandshake::new(SECRET, [0x22; NONCE_SIZE]);
            let mut body = Vec::new();
            let h = read_frame(&mut conn, REFUSE_MAX, &mut body).expect("a Hello");
            let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
            mojim_transport::frames::write_frame(&mut conn, &challenge.header, &challenge.body)
                .expect("send the Challenge");
            let h = read_frame(&mut conn, REFUSE_MAX, &mut body).expect("a Proof");
            let me = Identity { region_uuid: [0; 16], region_size: 0, epoch: 1, max_lanes: 8 };
            let accepted = hs.on_proof(&h, &body, &me).expect("the operator proves the secret");
            mojim_transport::frames::write_frame(&mut conn, &accepted.proof.header, &accepted.proof.body)
                .expect("send the Proof");
            send(&mut conn, FrameKind::Welcome, 0, &Welcome::default().encode()).expect("send the Welcome");
            read_frame(&mut conn, REFUSE_MAX, &mut body).expect("a Request");
            send(&mut conn, FrameKind::Reply, 0, &reply).expect("send the Reply");
            // Held open until the client is done with it.
            let _ = read_frame(&mut conn, REFUSE_MAX, &mut body);
        });
        (addr, node)
    }

    /// A node that answers a read with more bytes than were asked for is refused, naming the
    /// lengths; the client does not take the bytes (nor panic on the difference, as it did).
    #[test]
    fn a_read_answered_with_more_bytes_than_asked_is_refused() {
        let net = MemTransport::new();
        let (addr, node) = node_answering(&net, vec![7u8; 100]);
        let secret = Secret(SECRET.to_vec());
        let mut client =
            AdminClient::connect_with(&net, &addr, &secret, Duration::from_secs(5)).expect("connect");
        let e = client.read(0, 64).expect_err("an over-long reply was taken");
        assert!(e.to_string().contains("100 bytes where the read's first 64 were due"), "{e}");
        drop(client);
        node.join().expect("the node thread");
    }
}
