//! ZCARD ZSCORE ZMSCORE ZRANK ZREVRANK ZCOUNT ZLEXCOUNT, the ranges (ZRANGE and its older
//! forms, ZRANGESTORE), ZRANDMEMBER and ZSCAN.

use super::range::{LexRange, ScoreRange, NOT_FLOAT_RANGE, NOT_LEX_RANGE};
use super::score::{d2string, fmt_g17, reply_double};
use super::value::Zset;
use super::{emit, long_arg, members_header, nested, read_zset, room};
use crate::cmd::args::{is, Args};
use crate::cmd::glob::matches;
use crate::cmd::{Cx, NOT_INT, SYNTAX};
use crate::resp::Reply;
use crate::store::{Mem, StoreError};

pub(super) fn zcard<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    r.int(z.map_or(0, |z| z.len() as i64));
    Ok(())
}

pub(super) fn zscore<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    match z.map(|z| z.score(cx, a.get(2))).transpose()?.flatten() {
        Some(s) => reply_double(r, s),
        None => r.null(),
    }
    Ok(())
}

pub(super) fn zmscore<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    r.array(a.len() - 2);
    for m in a.from(2) {
        match z.as_ref().map(|z| z.score(cx, m)).transpose()?.flatten() {
            Some(s) => reply_double(r, s),
            None => r.null(),
        }
    }
    Ok(())
}

pub(super) fn zrank<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, rev: bool) -> Result<(), StoreError> {
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    let Some(z) = z else {
        r.null();
        return Ok(());
    };
    match z.rank(cx, a.get(2))? {
        Some(k) if rev => r.int((z.len() - 1 - k) as i64),
        Some(k) => r.int(k as i64),
        None => r.null(),
    }
    Ok(())
}

/// ZCOUNT and ZLEXCOUNT.
pub(super) fn zcount<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, lex: bool) -> Result<(), StoreError> {
    enum Range {
        Score(ScoreRange),
        Lex(LexRange),
    }
    let range = if lex {
        match LexRange::parse(a.get(2), a.get(3)) {
            Some(l) => Range::Lex(l),
            None => {
                r.error(NOT_LEX_RANGE);
                return Ok(());
            }
        }
    } else {
        match ScoreRange::parse(a.get(2), a.get(3)) {
            Some(s) => Range::Score(s),
            None => {
                r.error(NOT_FLOAT_RANGE);
                return Ok(());
            }
        }
    };
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    let Some(z) = z else {
        r.int(0);
        return Ok(());
    };
    let (lo, hi) = match &range {
        Range::Score(s) => (z.count_below(cx, &s.lo())?, z.count_below(cx, &s.hi())?),
        Range::Lex(l) => (z.count_below(cx, &l.lo())?, z.count_below(cx, &l.hi())?),
    };
    r.int(hi.saturating_sub(lo) as i64);
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

/// The ranks a range command reads: `n` of them from `from`, upwards or (`rev`) downwards.
struct Ranks {
    from: u64,
    n: u64,
    rev: bool,
}

/// The ranks of a rank range `start .. end` (inclusive, negative from the end) of `len`
/// members, as ZRANGE reads them.
fn rank_range(start: i64, end: i64, len: u64, rev: bool) -> Ranks {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return Ranks { from: 0, n: 0, rev };
    }
    let end = end.min(len - 1);
    let n = (end - start + 1) as u64;
    let from = if rev { (len - 1 - start) as u64 } else { start as u64 };
    Ranks { from, n, rev }
}

/// The ranks of the members between ranks `lo` and `hi` (exclusive), after skipping
/// `offset` and at most `limit` (negative: no limit; a negative offset takes none), as
/// ZRANGEBYSCORE reads them.
fn bound_range(lo: u64, hi: u64, offset: i64, limit: i64, rev: bool) -> Ranks {
    let inside = hi.saturating_sub(lo);
    if offset < 0 || offset as u64 >= inside || limit == 0 {
        return Ranks { from: 0, n: 0, rev };
    }
    let left = inside - offset as u64;
    let n = if limit < 0 { left } else { left.min(limit as u64) };
    let from = if rev { hi - 1 - offset as u64 } else { lo + offset as u64 };
    Ranks { from, n, rev }
}

/// The ZRANGE family: ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX
/// ZREVRANGEBYLEX, and ZRANGESTORE (which stores what ZRANGE would answer).
pub(super) fn zrange<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, name: &str) -> Result<(), StoreError> {
    let store = name == "ZRANGESTORE";
    let src = if store { 2 } else { 1 };
    let (mut by, mut rev) = match name {
        "ZREVRANGE" => (By::Rank, Some(true)),
        "ZRANGEBYSCORE" => (By::Score, Some(false)),
        "ZREVRANGEBYSCORE" => (By::Score, Some(true)),
        "ZRANGEBYLEX" => (By::Lex, Some(false)),
        "ZREVRANGEBYLEX" => (By::Lex, Some(true)),
        _ => (By::Auto, None),
    };
    let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = src + 3;
    while j < a.len() {
        let o = a.get(j);
        let left = a.len() - j - 1;
        if !store && is(o, "WITHSCORES") {
            withscores = true;
        } else if is(o, "LIMIT") && left >= 2 {
            let Some(off) = long_arg(a.get(j + 1), r) else { return Ok(()) };
            let Some(lim) = long_arg(a.get(j + 2), r) else { return Ok(()) };
            (offset, limit) = (off, lim);
            j += 2;
        } else if rev.is_none() && is(o, "REV") {
            rev = Some(true);
        } else if by == By::Auto && is(o, "BYLEX") {
            by = By::Lex;
        } else if by == By::Auto && is(o, "BYSCORE") {
            by = By::Score;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if limit != -1 && by == By::Rank {
        r.error("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
        return Ok(());
    }
    if withscores && by == By::Lex {
        r.error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
        return Ok(());
    }
    // Reversed score and member ranges are given as max, min.
    let (min, max) = if rev && by != By::Rank {
        (a.get(src + 2), a.get(src + 1))
    } else {
        (a.get(src + 1), a.get(src + 2))
    };
    enum Parsed {
        Rank(i64, i64),
        Score(ScoreRange),
        Lex(LexRange),
    }
    let parsed = match by {
        By::Score => match ScoreRange::parse(min, max) {
            Some(s) => Parsed::Score(s),
            None => {
                r.error(NOT_FLOAT_RANGE);
                return Ok(());
            }
        },
        By::Lex => match LexRange::parse(min, max) {
            Some(l) => Parsed::Lex(l),
            None => {
                r.error(NOT_LEX_RANGE);
                return Ok(());
            }
        },
        _ => {
            let Some(start) = long_arg(min, r) else { return Ok(()) };
            let Some(end) = long_arg(max, r) else { return Ok(()) };
            Parsed::Rank(start, end)
        }
    };
    let Ok(z) = read_zset(cx, a.get(src), r)? else { return Ok(()) };
    let ranks = match &z {
        None => Ranks { from: 0, n: 0, rev },
        Some(z) => match &parsed {
            Parsed::Rank(start, end) => rank_range(*start, *end, z.len(), rev),
            Parsed::Score(s) => {
                bound_range(z.count_below(cx, &s.lo())?, z.count_below(cx, &s.hi())?, offset, limit, rev)
            }
            Parsed::Lex(l) => {
                bound_range(z.count_below(cx, &l.lo())?, z.count_below(cx, &l.hi())?, offset, limit, rev)
            }
        },
    };
    if store {
        let mut items = Vec::with_capacity(ranks.n.min(1 << 20) as usize);
        if let Some(z) = &z {
            read_ranks(cx, z, &ranks, |s, m| {
                items.push((s, m.to_vec()));
                Ok(())
            })?;
        }
        if ranks.rev {
            items.reverse();
        }
        super::store_result(cx, a.get(1), &items, "zrangestore")?;
        r.int(items.len() as i64);
        return Ok(());
    }
    members_header(r, ranks.n, withscores);
    let pairs = nested(r);
    if let Some(z) = &z {
        read_ranks(cx, z, &ranks, |s, m| emit(cx, r, m, withscores.then_some(s), pairs))?;
    }
    Ok(())
}

/// Calls `f(score, member)` for the members of `ranks`, in their order.
fn read_ranks<M: Mem>(
    cx: &Cx<M>,
    z: &Zset,
    ranks: &Ranks,
    mut f: impl FnMut(f64, &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    if ranks.n == 0 {
        return Ok(());
    }
    let mut left = ranks.n;
    z.walk(cx, ranks.from, ranks.rev, |s, m| {
        f(s, m)?;
        left -= 1;
        Ok(left > 0)
    })
}

/// A small random-number generator for ZRANDMEMBER, seeded from the system's randomness.
pub(super) struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let mut b = [0u8; 8];
        mojim_transport::random::fill(&mut b);
        Rng(u64::from_le_bytes(b))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0 .. n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Rejection of the top's remainder: no bias.
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let v = self.next();
            if v < zone {
                return v % n;
            }
        }
    }
}

/// ZRANDMEMBER key [count [WITHSCORES]].
pub(super) fn zrandmember<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    if a.len() == 2 {
        let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
        let Some(z) = z else {
            r.null();
            return Ok(());
        };
        let k = Rng::new().below(z.len());
        let (_, m) =
            z.at(cx, k)?.ok_or_else(|| StoreError::Corrupt("a sorted set shorter than its count".into()))?;
        room(cx, r, m.len())?;
        r.bulk(&m);
        return Ok(());
    }
    let l = match crate::cmd::args::int(a.get(2)) {
        None => {
            r.error(NOT_INT);
            return Ok(());
        }
        Some(i64::MIN) => {
            r.error(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            );
            return Ok(());
        }
        Some(l) => l,
    };
    if a.len() > 4 || (a.len() == 4 && !is(a.get(3), "WITHSCORES")) {
        r.error(SYNTAX);
        return Ok(());
    }
    let withscores = a.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        r.error("ERR value is out of range");
        return Ok(());
    }
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    let Some(z) = z else {
        r.array(0);
        return Ok(());
    };
    let size = z.len();
    let (count, uniq) = (l.unsigned_abs(), l >= 0);
    if count == 0 {
        r.array(0);
        return Ok(());
    }
    let pairs = nested(r);
    let mut rng = Rng::new();
    let score = |s: f64| withscores.then_some(s);
    if !uniq || count == 1 {
        // With repetitions: `count` independent uniform picks, in the order drawn. Each is
        // checked against the output limit as it is written, so a huge count stops there.
        members_header(r, count, withscores);
        for _ in 0..count {
            let (s, m) = z
                .at(cx, rng.below(size))?
                .ok_or_else(|| StoreError::Corrupt("a sorted set shorter than its count".into()))?;
            emit(cx, r, &m, score(s), pairs)?;
        }
        return Ok(());
    }
    if count >= size {
        members_header(r, size, withscores);
        return z.walk(cx, 0, false, |s, m| emit(cx, r, m, score(s), pairs).map(|()| true));
    }
    // `count` distinct ranks, each set of them as likely as any other (Floyd's sampling),
    // in the order drawn.
    let mut picked = std::collections::HashSet::with_capacity(count as usize);
    let mut order = Vec::with_capacity(count as usize);
    for j in size - count..size {
        let t = rng.below(j + 1);
        let k = if picked.insert(t) {
            t
        } else {
            picked.insert(j);
            j
        };
        order.push(k);
    }
    members_header(r, count, withscores);
    for k in order {
        let (s, m) =
            z.at(cx, k)?.ok_or_else(|| StoreError::Corrupt("a sorted set shorter than its count".into()))?;
        emit(cx, r, &m, score(s), pairs)?;
    }
    Ok(())
}

/// A SCAN cursor as Redis reads one (`strtoul`: a sign is taken, a minus wraps around).
fn cursor(a: &[u8]) -> Option<u64> {
    let (neg, digits) = match a.first() {
        Some(b'-') => (true, &a[1..]),
        Some(b'+') => (false, &a[1..]),
        _ => (false, a),
    };
    if digits.is_empty() {
        return a.is_empty().then_some(0);
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

/// ZSCAN key cursor [MATCH pattern] [COUNT count]. A small set answers whole with cursor 0,
/// as Redis does; a large one walks its member tree from the cursor, a hash: members added
/// or removed meanwhile may or may not be seen, the others are seen exactly once.
pub(super) fn zscan<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(cur) = cursor(a.get(2)) else {
        r.error("ERR invalid cursor");
        return Ok(());
    };
    let Ok(z) = read_zset(cx, a.get(1), r)? else { return Ok(()) };
    let Some(z) = z else {
        r.array(2);
        r.bulk(b"0");
        r.array(0);
        return Ok(());
    };
    let (mut pattern, mut count) = (None, 10i64);
    let mut i = 3;
    while i < a.len() {
        let left = a.len() - i;
        if is(a.get(i), "COUNT") && left >= 2 {
            let Some(c) = long_arg(a.get(i + 1), r) else { return Ok(()) };
            if c < 1 {
                r.error(SYNTAX);
                return Ok(());
            }
            count = c;
        } else if is(a.get(i), "MATCH") && left >= 2 {
            pattern = Some(a.get(i + 1)).filter(|p| *p != b"*");
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
        i += 2;
    }
    let mut found: Vec<u8> = Vec::new();
    let mut fr = Reply { buf: &mut found, proto: r.proto };
    let mut n = 0usize;
    let mut text = Vec::new();
    let limit = cx.output_limit;
    let mut push = |fr: &mut Reply, m: &[u8], s: f64, big: bool| -> Result<(), StoreError> {
        if pattern.is_some_and(|p| !matches(p, m)) {
            return Ok(());
        }
        if fr.buf.len().saturating_add(m.len() + 64) > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        text.clear();
        if big {
            fmt_g17(s, &mut text);
        } else {
            d2string(s, &mut text);
        }
        fr.bulk(m);
        fr.bulk(&text);
        n += 2;
        Ok(())
    };
    let next = match z.index() {
        None => {
            z.walk(cx, 0, false, |s, m| push(&mut fr, m, s, false).map(|()| true))?;
            0
        }
        Some(idx) => {
            let count = count.min(1 << 20) as u64;
            let (mut seen, mut last) = (0u64, None);
            let stop = cx.store.tree_each_from(&idx.members, cur, |h, m, v| {
                if seen >= count && last != Some(h) {
                    return Ok(false);
                }
                let s = f64::from_le_bytes(v.try_into().map_err(|_| {
                    StoreError::Corrupt("a sorted set's member holds a score that is not 8 bytes".into())
                })?);
                push(&mut fr, m, s, true)?;
                seen += 1;
                last = Some(h);
                Ok(true)
            })?;
            stop.unwrap_or(0)
        }
    };
    r.array(2);
    r.bulk(next.to_string().as_bytes());
    r.array(n);
    r.buf.extend_from_slice(&found);
    Ok(())
}
