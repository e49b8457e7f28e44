//! A sorted set in a payload: as a listpack of members and scores (RDB type 17, the listpack as
//! one RDB string; a score as the listpack keeps it, an integer's encoding when it is a whole
//! number), the way Redis writes one of its `listpack` encoding; or as a count, then each member
//! (an RDB string) and its score (type 5: an IEEE 754 double, 8 bytes little-endian; type 3, of
//! older RDB versions: a length byte, 253 NaN, 254 +inf, 255 -inf, else that many bytes of
//! decimal text), the way Redis writes one of its `skiplist` encoding (greatest first). Each is
//! read; an empty set, a member given twice, a NaN or a score that is not a number is malformed.
//! What is read comes back in the set's order, whatever order the payload had.

use super::super::zsets::score::{d2string, strtod};
use super::{listpack, write_len, write_string, DecodeError, Reader};
use crate::store::key_cmp;
use std::collections::HashSet;

/// RDB type of a sorted set whose scores are decimal text (RDB versions before 8).
pub const TYPE_ZSET: u8 = 3;
/// RDB type of a sorted set whose scores are binary doubles.
pub const TYPE_ZSET_2: u8 = 5;
/// RDB type of a small sorted set as a listpack of members and scores.
pub const TYPE_ZSET_LISTPACK: u8 = 17;

/// A sorted set's members and scores, in order (by score, then member), each member once.
pub type Members = Vec<(f64, Vec<u8>)>;

/// Appends a small sorted set's payload body: a listpack of its members and scores, in order.
pub fn encode_listpack<'a>(items: impl IntoIterator<Item = (f64, &'a [u8])>, out: &mut Vec<u8>) {
    out.push(TYPE_ZSET_LISTPACK);
    let items: Vec<(&[u8], Vec<u8>)> = items
        .into_iter()
        .map(|(s, m)| {
            let mut text = Vec::with_capacity(24);
            d2string(s, &mut text);
            (m, text)
        })
        .collect();
    let lp = listpack::encode(items.iter().flat_map(|(m, s)| [*m, s.as_slice()]));
    write_string(&lp, out);
}

/// Starts a large sorted set's payload body of `len` members: each then goes with
/// [`encode_member`].
pub fn encode_head(len: u64, out: &mut Vec<u8>) {
    out.push(TYPE_ZSET_2);
    write_len(len, out);
}

/// Appends one member and its score of a set begun with [`encode_head`].
pub fn encode_member(member: &[u8], score: f64, out: &mut Vec<u8>) {
    write_string(member, out);
    out.extend_from_slice(&score.to_le_bytes());
}

fn bad(what: &str) -> DecodeError {
    DecodeError::Malformed(what.into())
}

/// Checks the members (not empty, each once, no NaN) and puts them in the set's order.
fn ordered(mut items: Members) -> Result<Members, DecodeError> {
    if items.is_empty() {
        return Err(bad("an empty sorted set"));
    }
    if items.iter().any(|(s, _)| s.is_nan()) {
        return Err(bad("a sorted set with a NaN score"));
    }
    let mut seen = HashSet::with_capacity(items.len());
    for (_, m) in &items {
        if !seen.insert(m.as_slice()) {
            return Err(bad("a sorted set with a member twice"));
        }
    }
    items.sort_by(|a, b| key_cmp(a.0, &a.1, b.0, &b.1));
    Ok(items)
}

/// A score as decimal text, the whole of it a number (`inf` and `-inf` included).
fn text_score(t: &[u8]) -> Result<f64, DecodeError> {
    let (v, n, _) = strtod(t);
    if t.is_empty() || n != t.len() {
        return Err(bad("a sorted set's score that is not a number"));
    }
    Ok(v)
}

/// Reads a sorted set of type 5 or, with `text_scores`, type 3 (after its type byte).
pub fn decode_pairs(r: &mut Reader, text_scores: bool) -> Result<Members, DecodeError> {
    let n = r.len()?;
    // No room is made for more members than there are bytes left (each takes two at least).
    let mut items = Vec::with_capacity((n as usize).min(r.left() / 2));
    for _ in 0..n {
        let member = r.string()?;
        let score = if text_scores {
            match r.byte()? {
                253 => f64::NAN,
                254 => f64::INFINITY,
                255 => f64::NEG_INFINITY,
                len => {
                    let mut t = Vec::with_capacity(usize::from(len));
                    for _ in 0..len {
                        t.push(r.byte()?);
                    }
                    text_score(&t)?
                }
            }
        } else {
            let mut b = [0u8; 8];
            for x in &mut b {
                *x = r.byte()?;
            }
            f64::from_le_bytes(b)
        };
        items.push((score, member));
    }
    ordered(items)
}

/// Reads a sorted set of type 17 (after its type byte).
pub fn decode_listpack(r: &mut Reader) -> Result<Members, DecodeError> {
    let lp = r.string()?;
    let entries = listpack::decode(&lp).ok_or_else(|| bad("a listpack that is not one"))?;
    if entries.len() % 2 != 0 {
        return Err(bad("a sorted set's listpack of an odd number of entries"));
    }
    let mut it = entries.into_iter();
    let mut items = Vec::with_capacity(it.len() / 2);
    while let (Some(m), Some(s)) = (it.next(), it.next()) {
        items.push((text_score(&s)?, m));
    }
    ordered(items)
}

#[cfg(test)]
mod tests {
    use super::super::{decode, seal, DecodeError, Limits, Object};
    use super::*;

    const LIMITS: Limits = Limits { max_string: 1 << 20, max_total: 4 << 20 };

    fn sealed(body: &[u8]) -> Vec<u8> {
        let mut p = body.to_vec();
        seal(&mut p);
        p
    }

    fn members(v: &[(f64, &str)]) -> Members {
        v.iter().map(|(s, m)| (*s, m.as_bytes().to_vec())).collect()
    }

    // ZADD zl 1 a 2.5 b -inf c; DUMP zl (listpack)
    const LISTPACK: &[u8] = b"\x11\x1d\x1d\x00\x00\x00\x06\x00\x81c\x02\x84-inf\x05\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x009\x923\x9b\xe1\x1f2=";
    // CONFIG SET zset-max-listpack-entries 1; ZADD zb 1.5 x 3 yy; DUMP zb (skiplist)
    const SKIPLIST: &[u8] =
        b"\x05\x02\x02yy\x00\x00\x00\x00\x00\x00\x08@\x01x\x00\x00\x00\x00\x00\x00\xf8?\n\x00#%H\x9d\x88&\xce\xf7";

    #[test]
    fn reads_and_writes_what_redis_dumps() {
        let small = members(&[(f64::NEG_INFINITY, "c"), (1.0, "a"), (2.5, "b")]);
        assert_eq!(decode(LISTPACK, LIMITS), Ok(Object::Zset(small.clone())));
        let mut p = Vec::new();
        encode_listpack(small.iter().map(|(s, m)| (*s, m.as_slice())), &mut p);
        assert_eq!(sealed(&p), LISTPACK);
        let large = members(&[(1.5, "x"), (3.0, "yy")]);
        assert_eq!(decode(SKIPLIST, LIMITS), Ok(Object::Zset(large.clone())));
        let mut p = Vec::new();
        encode_head(2, &mut p);
        for (s, m) in large.iter().rev() {
            encode_member(m, *s, &mut p);
        }
        assert_eq!(sealed(&p), SKIPLIST);
    }

    #[test]
    fn reads_text_scores_and_any_order() {
        // Type 3: "2" as text, then +inf, then -inf.
        let mut p = vec![TYPE_ZSET, 3, 1, b'b', 1, b'2', 1, b'c', 254, 1, b'a', 255];
        assert_eq!(
            decode(&sealed(&p), LIMITS),
            Ok(Object::Zset(members(&[(f64::NEG_INFINITY, "a"), (2.0, "b"), (f64::INFINITY, "c")])))
        );
        // A NaN (253) is refused.
        p[8] = 253;
        assert!(matches!(decode(&sealed(&p), LIMITS), Err(DecodeError::Malformed(_))));
        // Whole scores are integers in a listpack; members come back in order.
        let lp = listpack::encode([&b"z"[..], b"-3", b"y", b"1e3", b"x", b"-3"]);
        let mut p = vec![TYPE_ZSET_LISTPACK];
        write_string(&lp, &mut p);
        assert_eq!(
            decode(&sealed(&p), LIMITS),
            Ok(Object::Zset(members(&[(-3.0, "x"), (-3.0, "z"), (1000.0, "y")])))
        );
    }

    #[test]
    fn refuses_what_is_not_a_sorted_set() {
        let lp_body = |entries: &[&[u8]]| {
            let mut p = vec![TYPE_ZSET_LISTPACK];
            write_string(&listpack::encode(entries.iter().copied()), &mut p);
            sealed(&p)
        };
        for bad in [
            lp_body(&[]),
            lp_body(&[b"a"]),
            lp_body(&[b"a", b"1", b"a", b"2"]),
            lp_body(&[b"a", b"nan"]),
            lp_body(&[b"a", b"x1"]),
            lp_body(&[b"a", b""]),
            sealed(&[TYPE_ZSET_2, 0]),
            sealed(&[TYPE_ZSET_2, 1, 1, b'a', 0, 0, 0, 0, 0, 0, 0xf8, 0x7f]),
            sealed(&[TYPE_ZSET, 1, 1, b'a', 2, b'1', b'x']),
        ] {
            assert!(matches!(decode(&bad, LIMITS), Err(DecodeError::Malformed(_))), "{bad:?}");
        }
        // Every cut of a good payload's body is refused, never a panic.
        for good in [LISTPACK, SKIPLIST] {
            let body = &good[..good.len() - 10];
            for cut in 1..body.len() {
                assert!(decode(&sealed(&body[..cut]), LIMITS).is_err(), "cut at {cut}");
            }
        }
        // A count far above what the bytes hold allocates nothing first.
        let mut p = vec![TYPE_ZSET_2];
        write_len(u64::MAX >> 1, &mut p);
        assert!(decode(&sealed(&p), LIMITS).is_err());
    }
}
