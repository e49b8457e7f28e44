//! SSCAN and HSCAN: a collection's cursor, options and iteration.
//!
//! A collection held whole in its entry's value (an intset, a small hash or set) is returned in
//! one call with cursor 0, as Redis does for its compact encodings. A tree's cursor is the hash
//! of the next entry to return (0: the start, and the end): entries are in hash order, so the
//! entries a scan has returned are exactly those below its cursor whatever changes in between,
//! and every entry present for the whole scan is returned (entries of one hash are never split
//! between two calls). The cursor is any unsigned 64-bit number, as Redis's.

use super::args::{int, is, Args};
use super::glob::matches;
use super::{Cx, NOT_INT, SYNTAX};
use crate::resp::Reply;
use crate::store::{Mem, StoreError, Tree};

/// A scan's options.
pub(super) struct ScanOpts<'a> {
    /// MATCH, unless it is `*`.
    pub pattern: Option<&'a [u8]>,
    /// COUNT: entries to look at in one call (10 unless given).
    pub count: u64,
}

impl ScanOpts<'_> {
    /// Whether a member (or field) passes MATCH.
    pub(super) fn wants(&self, m: &[u8]) -> bool {
        self.pattern.is_none_or(|p| matches(p, m))
    }
}

/// A cursor as Redis reads one (`strtoul`, base 10: an optional sign, digits, nothing else; a
/// minus wraps; the empty string is 0); `None` for anything else.
pub(super) fn cursor(a: &[u8]) -> Option<u64> {
    let (neg, digits) = match a.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, a),
    };
    if a.is_empty() {
        return Some(0);
    }
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// Reads the options from argument `from` on (COUNT, MATCH; TYPE is for SCAN only); replies
/// the error and gives `None` if one is wrong.
pub(super) fn options<'a>(a: &Args<'a>, from: usize, r: &mut Reply) -> Option<ScanOpts<'a>> {
    let mut o = ScanOpts { pattern: None, count: 10 };
    let mut i = from;
    while i < a.len() {
        let more = i + 1 < a.len();
        if is(a.get(i), "COUNT") && more {
            match int(a.get(i + 1)) {
                Some(c) if c >= 1 => o.count = c as u64,
                Some(_) => {
                    r.error(SYNTAX);
                    return None;
                }
                None => {
                    r.error(NOT_INT);
                    return None;
                }
            }
        } else if is(a.get(i), "MATCH") && more {
            o.pattern = Some(a.get(i + 1)).filter(|p| *p != b"*");
        } else {
            r.error(SYNTAX);
            return None;
        }
        i += 2;
    }
    Some(o)
}

/// The reply to a scan: the next cursor, then `n` elements already written to `items`.
pub(super) fn reply<M: Mem>(
    cx: &Cx<M>,
    r: &mut Reply,
    next: u64,
    n: usize,
    items: &[u8],
) -> Result<(), StoreError> {
    cx.reply_room(r, items.len() + 64)?;
    r.array(2);
    r.bulk(next.to_string().as_bytes());
    r.array(n);
    r.buf.extend_from_slice(items);
    Ok(())
}

/// One call's worth of a tree's scan from `from`: about `count` entries looked at (more when
/// entries share the last one's hash), those whose key passes MATCH written to `items` (with
/// their values when `values`). Returns the next cursor and the elements written.
pub(super) fn tree_scan<M: Mem>(
    cx: &Cx<M>,
    t: &Tree,
    from: u64,
    o: &ScanOpts,
    values: bool,
    items: &mut Reply,
) -> Result<(u64, usize), StoreError> {
    let (mut seen, mut n, mut last) = (0u64, 0usize, None);
    let limit = cx.output_limit;
    let next = cx.store.tree_each_from(t, from, |h, k, v| {
        if seen >= o.count && last != Some(h) {
            return Ok(false);
        }
        seen += 1;
        last = Some(h);
        if o.wants(k) {
            if items.buf.len().saturating_add(k.len() + v.len() + 32) > limit {
                return Err(StoreError::OutputLimit(limit));
            }
            items.bulk(k);
            n += 1;
            if values {
                items.bulk(v);
                n += 1;
            }
        }
        Ok(true)
    })?;
    Ok((next.unwrap_or(0), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_as_strtoul_does() {
        assert_eq!(cursor(b"0"), Some(0));
        assert_eq!(cursor(b""), Some(0));
        assert_eq!(cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(cursor(b"18446744073709551616"), None);
        assert_eq!(cursor(b"-1"), Some(u64::MAX));
        assert_eq!(cursor(b"+7"), Some(7));
        assert_eq!(cursor(b"+"), None);
        assert_eq!(cursor(b" 1"), None);
        assert_eq!(cursor(b"1 "), None);
        assert_eq!(cursor(b"0x10"), None);
    }
}
