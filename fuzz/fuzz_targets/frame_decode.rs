//! Frame header and handshake/admin bodies: whatever decodes re-encodes to the same bytes.
//!
//! Input: a 64-byte frame header, then a body.
//! - The header is decoded twice: as given, and with its checksum recomputed, so that the fuzzer
//!   also reaches the field checks behind the CRC. A header that decodes must re-encode to the
//!   exact bytes it came from.
//! - The body is fed to every body decoder (Hello, Challenge, Proof, Welcome, Refuse, Request),
//!   whatever kind the header names. A body that decodes must re-encode to the exact bytes it came
//!   from; for Refuse, whose decoding is lossy by design (unknown codes read as `Other`, invalid
//!   UTF-8 as U+FFFD), only a canonical body must, and every re-encoding must be a valid body.
//!
//! Replay a failure: `cargo +nightly fuzz run frame_decode artifacts/frame_decode/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{
    decode_proof, decode_refuse, encode_refuse, Challenge, Hello, Request, Welcome, REFUSE_MAX,
};
use mojim_format::{FrameHeader, FRAME_HEADER_SIZE};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<FRAME_HEADER_SIZE>() else {
        return;
    };
    header_round_trip(head);
    let mut resealed = *head;
    let crc = crc32c(&resealed[4..]);
    resealed[..4].copy_from_slice(&crc.to_le_bytes());
    header_round_trip(&resealed);
    bodies_round_trip(body);
});

fn header_round_trip(bytes: &[u8; FRAME_HEADER_SIZE]) {
    let Ok(h) = FrameHeader::decode(bytes) else {
        return;
    };
    let again = h.to_bytes();
    assert_eq!(&again, bytes, "header {h:?} re-encodes to other bytes");
    assert_eq!(FrameHeader::decode(&again), Ok(h));
}

fn bodies_round_trip(body: &[u8]) {
    if let Ok(v) = Hello::decode(body) {
        assert_eq!(&v.encode()[..], body, "Hello {v:?} re-encodes to other bytes");
    }
    if let Ok(v) = Challenge::decode(body) {
        assert_eq!(&v.encode()[..], body, "Challenge {v:?} re-encodes to other bytes");
    }
    if let Ok(v) = decode_proof(body) {
        assert_eq!(&v[..], body, "Proof is not the body itself");
    }
    if let Ok(v) = Welcome::decode(body) {
        assert_eq!(&v.encode()[..], body, "Welcome {v:?} re-encodes to other bytes");
    }
    if let Ok(v) = Request::decode(body) {
        assert_eq!(&v.encode()[..], body, "Request {v:?} re-encodes to other bytes");
    }
    if let Ok((code, message)) = decode_refuse(body) {
        let mut again = Vec::new();
        encode_refuse(code, &message, &mut again);
        // decode_refuse accepted `body`, so it holds at least the 4-byte code.
        let raw_code = u32::from_le_bytes(body[..4].try_into().expect("4 bytes"));
        let canonical = raw_code == code as u32 && std::str::from_utf8(&body[4..]).is_ok();
        if canonical {
            assert_eq!(again, body, "Refuse ({code:?}, {message:?}) re-encodes to other bytes");
        }
        assert!(again.len() <= REFUSE_MAX, "Refuse encodes to {} bytes", again.len());
        assert!(
            std::str::from_utf8(&again[4..]).is_ok(),
            "encode_refuse wrote a message that is not UTF-8 (from a {}-byte message)",
            message.len()
        );
        assert_eq!(
            decode_refuse(&again).map(|(c, _)| c),
            Ok(code),
            "re-encoded Refuse does not decode to its code"
        );
    }
}
