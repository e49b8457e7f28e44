//! What a blocking command (BLPOP, BLMOVE, BZPOPMIN, ...) tells the server when none of its keys
//! has what it waits for: [`Outcome::Block`] with a [`Wait`]. The command has then changed
//! nothing and answered nothing; the server parks the client (its request stays unread at the
//! head of its input, and its later requests wait behind it) and runs the same request again,
//! in the batch of the write that made it so, when one of `keys` holds `kind` in the client's
//! database: the FIFO order among the clients waiting on a key is the order they blocked in. A
//! command run again that still finds nothing returns `Block` once more and keeps its place and
//! its deadline. At the deadline the server answers a null array, as Redis does.
//!
//! Where a client may not block (the commands of `EXEC`, later a script's), the command answers
//! at once as its non-blocking form would ([`block_or_null`]).

use super::zsets::score::strtod;
use super::{Outcome, Session};
use crate::resp::Reply;

/// A parked command's wait.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The keys it waits on, each once, in the order the command names them.
    pub keys: Vec<Vec<u8>>,
    /// The kind a key must hold for the command to be run again (`store::KIND_LIST`, ...): a
    /// key written with another type does not wake it.
    pub kind: u8,
    /// When it gives up, in Unix milliseconds; 0: never.
    pub deadline_ms: u64,
}

/// The null a blocking command answers when it may not block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Null {
    /// `*-1` (BLPOP, BLMPOP, BZPOPMIN ...).
    Array,
    /// `$-1` (BLMOVE, BRPOPLPUSH).
    Bulk,
}

/// Blocks on `keys` (duplicates dropped), or, where the session may not block, answers `null`.
pub fn block_or_null<'k>(
    s: &Session,
    keys: impl IntoIterator<Item = &'k [u8]>,
    kind: u8,
    deadline_ms: u64,
    null: Null,
    r: &mut Reply,
) -> Outcome {
    if s.deny_blocking {
        match null {
            Null::Array => r.null_array(),
            Null::Bulk => r.null(),
        }
        return Outcome::Done;
    }
    let mut ks: Vec<Vec<u8>> = Vec::new();
    for k in keys {
        if !ks.iter().any(|x| x == k) {
            ks.push(k.to_vec());
        }
    }
    Outcome::Block(Wait { keys: ks, kind, deadline_ms })
}

/// The deadline of a timeout in seconds (a float, as Redis reads it; 0: none), from `now_ms`;
/// the error to answer if it is not one.
///
/// Redis 7.0 reads the seconds with `strtold` (the whole argument, no leading space: hexadecimal
/// and `inf` are numbers, NaN is not) and takes `(long long) ceill(seconds * 1000)`, which is
/// `LLONG_MIN` where the milliseconds are past a long long (infinity, 1e300): "negative".
pub fn deadline(arg: &[u8], now_ms: u64) -> Result<u64, &'static str> {
    const NOT_FLOAT: &str = "ERR timeout is not a float or out of range";
    const NEGATIVE: &str = "ERR timeout is negative";
    let (secs, read, range) = strtod(arg);
    let space = arg.first().is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'));
    if arg.is_empty() || space || read != arg.len() || secs.is_nan() {
        return Err(NOT_FLOAT);
    }
    // A magnitude below the doubles' (a long double still holds it): above 0 by a hair, so one
    // millisecond; below, none (for ever).
    let ms = if range && secs == 0.0 {
        if secs.is_sign_negative() {
            0.0
        } else {
            1.0
        }
    } else {
        (secs * 1000.0).ceil()
    };
    if !(0.0..9.223_372_036_854_776e18).contains(&ms) {
        return Err(NEGATIVE);
    }
    if ms == 0.0 {
        return Ok(0);
    }
    if ms >= (i64::MAX as u64 - now_ms) as f64 {
        return Err("ERR timeout is out of range");
    }
    Ok(now_ms + ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Proto;

    #[test]
    fn timeouts_as_redis_reads_them() {
        assert_eq!(deadline(b"0", 1000), Ok(0));
        assert_eq!(deadline(b"1", 1000), Ok(2000));
        assert_eq!(deadline(b"0.001", 1000), Ok(1001));
        assert_eq!(deadline(b"0.0001", 1000), Ok(1001), "rounded up to a millisecond");
        assert_eq!(deadline(b"-0.0001", 1000), Ok(0), "rounds to 0: forever, as in Redis");
        assert_eq!(deadline(b"-1", 1000), Err("ERR timeout is negative"));
        for bad in [&b"x"[..], b"", b" 1", b"1 ", b"nan", b"1e", b"\x0b1"] {
            assert_eq!(deadline(bad, 1000), Err("ERR timeout is not a float or out of range"), "{bad:?}");
        }
        // What a redis-server 7.0.15 answers: past a long long's milliseconds is negative.
        for past in [&b"inf"[..], b"-inf", b"1e400", b"1e300", b"9.3e15"] {
            assert_eq!(deadline(past, 1000), Err("ERR timeout is negative"), "{past:?}");
        }
        assert_eq!(deadline(b"0x10", 1000), Ok(17000));
        assert_eq!(deadline(b"0x1p3", 1000), Ok(9000));
        assert_eq!(deadline(b"+5", 1000), Ok(6000));
        assert_eq!(deadline(b"1e-400", 1000), Ok(1001));
        assert_eq!(deadline(b"-1e-400", 1000), Ok(0));
        assert_eq!(deadline(b"9e15", 1000), Ok(9_000_000_000_000_001_000));
        assert_eq!(deadline(b"9e15", 1 << 62), Err("ERR timeout is out of range"));
    }

    #[test]
    fn a_session_that_may_not_block_gets_the_null() {
        let mut s = Session::new(1, "t".into(), true);
        let mut out = Vec::new();
        let mut r = Reply { buf: &mut out, proto: Proto::Resp2 };
        let o = block_or_null(&s, [&b"a"[..], b"b", b"a"], 3, 0, Null::Array, &mut r);
        assert_eq!(
            o,
            Outcome::Block(Wait { keys: vec![b"a".to_vec(), b"b".to_vec()], kind: 3, deadline_ms: 0 })
        );
        assert!(out.is_empty());
        s.deny_blocking = true;
        let mut r = Reply { buf: &mut out, proto: Proto::Resp2 };
        assert_eq!(block_or_null(&s, [&b"a"[..]], 3, 0, Null::Bulk, &mut r), Outcome::Done);
        assert_eq!(out, b"$-1\r\n");
    }
}
