//! The RESP request parser and the reply decoder of `mojim kv`: no panic, no request past the
//! limits, the same requests however the bytes are cut, and decoded values round-trip.
//!
//! Input: one byte `k`, then the bytes a client sends. The bytes are parsed twice, whole and fed
//! in pieces of `k % 16 + 1` bytes (a resumed parse must find the same requests and stop at
//! the same error), under small limits (bulk 64, 8 arguments, lines of 64 bytes) so that the
//! fuzzer reaches every limit. The same bytes go to the reply decoder; a value that decodes
//! must decode again, identically, from its own encoding.
//!
//! Replay a failure: `cargo +nightly fuzz run resp_parse artifacts/resp_parse/<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mojim_kv::resp::{decode, Limits, Parsed, Parser, ProtocolError};

const LIMITS: Limits = Limits { max_bulk: 64, max_args: 8, max_inline: 64 };

type Requests = Vec<Vec<Vec<u8>>>;

/// Requests found in `buf` fed `step` bytes at a time, and the error that ended it, if any.
fn parse(buf: &[u8], step: usize) -> (Requests, Option<ProtocolError>) {
    let mut p = Parser::new(LIMITS);
    let mut out = Vec::new();
    let (mut start, mut end) = (0, 0);
    while end < buf.len() {
        end = (end + step).min(buf.len());
        while start < end {
            match p.parse(&buf[start..end]) {
                Err(e) => return (out, Some(e)),
                Ok(Parsed::Incomplete) => break,
                Ok(Parsed::Empty { len }) => start += len,
                Ok(Parsed::Request { len }) => {
                    assert!(p.argc() >= 1 && p.argc() <= LIMITS.max_args, "{} arguments", p.argc());
                    let args: Vec<Vec<u8>> =
                        (0..p.argc()).map(|i| p.arg(&buf[start..end], i).to_vec()).collect();
                    assert!(args.iter().all(|a| a.len() <= LIMITS.max_bulk.max(LIMITS.max_inline)));
                    out.push(args);
                    start += len;
                }
            }
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&k, buf)) = data.split_first() else { return };
    let whole = parse(buf, buf.len().max(1));
    let pieces = parse(buf, usize::from(k % 16) + 1);
    // An inline line or a header line that is too long is found as soon as the bytes exceed
    // the limit: in pieces that may be before a later line end would have shown a different
    // error in the whole. Requests before it agree either way.
    let n = whole.0.len().min(pieces.0.len());
    assert_eq!(whole.0[..n], pieces.0[..n], "requests differ when fed in pieces");
    if whole.1.is_none() && pieces.1.is_none() {
        assert_eq!(whole.0, pieces.0);
    }
    if let Ok(Some((v, used))) = decode(buf, &LIMITS) {
        assert!(used <= buf.len());
        let mut again = Vec::new();
        v.encode(true, &mut again);
        let (w, n) =
            decode(&again, &Limits { max_bulk: usize::MAX, max_args: usize::MAX, max_inline: usize::MAX })
                .expect("an encoding decodes")
                .expect("an encoding is complete");
        assert_eq!((w, n), (v, again.len()));
    }
});
