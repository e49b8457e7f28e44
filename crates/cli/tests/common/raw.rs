//! A peer driven by hand over a raw TCP connection: the real handshake of the core, then frames
//! built from the documented format, to reach states a well-behaved peer reaches only by chance,
//! or never.

use mojim_core::handshake::ClientHandshake;
use mojim_format::handshake::{Hello, PeerRole, Welcome};
use mojim_format::{FrameHeader, FRAME_HEADER_SIZE};
use mojim_transport::{AnyConn, AnyTransport, Conn, Transport};
use std::io::{Read, Write};
use std::time::Duration;

/// Reads one frame: its header, decoded, and its body.
pub fn read_frame(s: &mut impl Read) -> std::io::Result<(FrameHeader, Vec<u8>)> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    s.read_exact(&mut hb)?;
    let h = FrameHeader::decode(&hb).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body)?;
    Ok((h, body))
}

/// A Hello of `role` for lane `lane` of `lanes` of session `session`, at epoch 1, with frames of
/// up to 64 KiB; `region` is the region's uuid and size (zero for an operator).
pub fn hello(role: PeerRole, region: ([u8; 16], u64), session: u64, lane: u16, lanes: u16) -> Hello {
    Hello {
        role,
        lane,
        lanes,
        region_uuid: region.0,
        region_size: region.1,
        epoch: 1,
        session,
        nonce: [lane as u8 + 1; 32],
        max_frame: 64 << 10,
        generation: 0,
        place: false,
        encrypt_placed: false,
    }
}

/// Connects to `addr` and runs the whole handshake for `hello` with `secret`: Hello, the
/// node's Challenge, this side's Proof, the node's Proof, then the Welcome.
pub fn handshake(addr: &str, hello: &Hello, secret: &[u8]) -> (AnyConn, Welcome) {
    handshake_over(&AnyTransport::plain(), addr, hello, secret)
}

/// As [`handshake`], over `transport` (with TLS, if it has it).
pub fn handshake_over(
    transport: &AnyTransport,
    addr: &str,
    hello: &Hello,
    secret: &[u8],
) -> (AnyConn, Welcome) {
    let mut s = transport.connect(addr, Duration::from_secs(10)).expect("connect to the node");
    s.set_recv_timeout(Some(Duration::from_secs(10))).expect("set timeout");
    let mut hs = ClientHandshake::new(hello, secret);
    let out = hs.hello();
    s.write_all(&out.header).and_then(|_| s.write_all(&out.body)).expect("send Hello");
    let (h, body) = read_frame(&mut s).expect("a Challenge");
    let proof = hs.on_challenge(&h, &body).expect("a valid Challenge");
    s.write_all(&proof.header).and_then(|_| s.write_all(&proof.body)).expect("send Proof");
    let (h, body) = read_frame(&mut s).expect("the node's Proof");
    hs.on_proof(&h, &body).expect("the node's proof");
    let (h, body) = read_frame(&mut s).expect("a Welcome");
    let welcome = hs.on_verdict(&h, &body).expect("welcomed");
    (s, welcome)
}
