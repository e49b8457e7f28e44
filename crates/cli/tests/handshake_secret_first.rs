//! The handshake at the byte level, written from docs/FORMAT.md §3 and not from the code: a peer
//! that has not proven the cluster secret receives nothing that depends on it (no value to test
//! guessed secrets against offline), and the proofs are the documented HMACs.

mod common;

use common::Cluster;
use hmac::{Hmac, Mac};
use mojim_format::checksum::crc32c;
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::TcpStream;

/// A frame header as FORMAT.md §2 lays it out: every field not given is 0.
fn header(kind: u8, body: &[u8]) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[4..8].copy_from_slice(&crc32c(body).to_le_bytes());
    h[8..10].copy_from_slice(&0x4A4Du16.to_le_bytes());
    h[10] = 3; // PROTOCOL_VERSION
    h[11] = kind;
    h[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c(&h[4..]);
    h[0..4].copy_from_slice(&crc.to_le_bytes());
    h
}

const HELLO: u8 = 3;
const CHALLENGE: u8 = 4;
const PROOF: u8 = 5;
const WELCOME: u8 = 6;
const REFUSE: u8 = 7;

/// An Admin Hello (FORMAT.md §3.1): role 2, the rest zero but the nonce.
fn admin_hello(nonce: u8) -> [u8; 96] {
    let mut b = [0u8; 96];
    b[0] = 2;
    b[48..80].fill(nonce);
    b
}

/// One whole frame from the mirror, checked as §2 says: (header bytes, body).
fn read_frame(s: &mut impl Read) -> ([u8; 64], Vec<u8>) {
    let mut h = [0u8; 64];
    s.read_exact(&mut h).expect("a frame header");
    assert_eq!(u32::from_le_bytes(h[0..4].try_into().unwrap()), crc32c(&h[4..]), "header checksum");
    assert_eq!(&h[8..11], &[0x4D, 0x4A, 3], "magic and version 3");
    let len = u32::from_le_bytes(h[16..20].try_into().unwrap()) as usize;
    assert!(len <= 2048, "a handshake body of {len} bytes");
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("the frame's body");
    assert_eq!(u32::from_le_bytes(h[4..8].try_into().unwrap()), crc32c(&body), "body checksum");
    (h, body)
}

/// Everything else the mirror sends before it closes.
fn rest(s: &mut TcpStream) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    v
}

fn hmac(secret: &[u8], label: &[u8], hello: &[u8], nonce: &[u8]) -> [u8; 32] {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    m.update(label);
    m.update(hello);
    m.update(nonce);
    m.finalize().into_bytes().into()
}

fn connect(c: &Cluster) -> TcpStream {
    let s = TcpStream::connect(c.mirror_addr()).expect("connect to the mirror");
    s.set_read_timeout(Some(common::WAIT)).expect("timeout");
    s
}

/// Sends a Hello and reads the Challenge: a header with every field 0 but kind, length and
/// checksums, and a 32-byte nonce. Returns the nonce.
fn hello_and_challenge(s: &mut TcpStream, hello: &[u8; 96]) -> Vec<u8> {
    s.write_all(&header(HELLO, hello)).and_then(|_| s.write_all(hello)).expect("send Hello");
    let (h, nonce) = read_frame(s);
    assert_eq!(h[11], CHALLENGE, "the answer to a Hello is a Challenge: {h:02x?}");
    assert_eq!(nonce.len(), 32, "the Challenge is the nonce alone, 32 bytes; got {} bytes", nonce.len());
    assert_eq!(h, header(CHALLENGE, &nonce), "every other header field is 0");
    nonce
}

/// Sends a wrong Proof after the Challenge; returns every byte the mirror sends before it
/// closes.
fn refused_bytes(c: &Cluster) -> Vec<u8> {
    let mut s = connect(c);
    let hello = admin_hello(1);
    hello_and_challenge(&mut s, &hello);
    let wrong = [0x77u8; 32];
    s.write_all(&header(PROOF, &wrong)).and_then(|_| s.write_all(&wrong)).expect("send Proof");
    rest(&mut s)
}

#[test]
fn an_unproven_peer_receives_nothing_that_depends_on_the_secret() {
    let mut a =
        Cluster::new("secret-first-a", 1 << 20, |f| f.security.secret = "the first cluster secret".into());
    let mut b =
        Cluster::new("secret-first-b", 1 << 20, |f| f.security.secret = "a second, other secret".into());
    a.start_mirror();
    b.start_mirror();

    // A wrong Proof gets one Refuse (code 2, Secret) and the end of the connection; its bytes are
    // the same from two nodes with different secrets.
    let from_a = refused_bytes(&a);
    let from_b = refused_bytes(&b);
    assert_eq!(from_a, from_b, "the refusal depends on the node's secret");
    let (h, body) = read_frame(&mut &from_a[..]);
    assert_eq!(h[11], REFUSE, "a wrong Proof is answered with a Refuse: {h:02x?}");
    assert_eq!(&body[..4], &2u32.to_le_bytes(), "code Secret: {:?}", String::from_utf8_lossy(&body[4..]));
    assert_eq!(from_a.len(), 64 + body.len(), "nothing follows the Refuse");

    // The right Proof, as documented, gets the node's Proof, as documented, then a Welcome.
    let secret = b"the first cluster secret";
    let mut s = connect(&a);
    let hello = admin_hello(2);
    let nonce = hello_and_challenge(&mut s, &hello);
    let proof = hmac(secret, b"mojim v3 client proof", &hello, &nonce);
    s.write_all(&header(PROOF, &proof)).and_then(|_| s.write_all(&proof)).expect("send Proof");
    let (h, body) = read_frame(&mut s);
    assert_eq!(h[11], PROOF, "a right Proof is answered with the node's Proof: {h:02x?}");
    assert_eq!(body, hmac(secret, b"mojim v3 server proof", &hello, &nonce), "the node's proof");
    let (h, body) = read_frame(&mut s);
    assert_eq!((h[11], body.len()), (WELCOME, 64), "then a 64-byte Welcome");
}
