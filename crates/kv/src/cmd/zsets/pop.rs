//! ZPOPMIN ZPOPMAX ZMPOP, and the blocking BZPOPMIN BZPOPMAX BZMPOP.
//!
//! A blocking pop pops from the first of its keys that holds a sorted set, as its non-blocking
//! form does; when none does it changes nothing, answers nothing and returns
//! [`Outcome::Block`] on its keys for `KIND_ZSET` (`cmd/blocking.rs`): the server runs the same
//! request again when one of them is written, and answers a null array at the deadline, as it
//! does at once where a client may not block (in a transaction).

use super::score::reply_double;
use super::value::{self, Opened, Zset};
use super::{nested, removed_events, room};
use crate::cmd::args::{int, is, Args};
use crate::cmd::blocking::{block_or_null, deadline, Null};
use crate::cmd::{Cx, Outcome, Session, SYNTAX, WRONGTYPE};
use crate::resp::Reply;
use crate::store::{Mem, StoreError, KIND_ZSET};

/// How a pop's reply is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// member, score, member, score ... (ZPOPMIN, and with a count in RESP2).
    Flat,
    /// [member, score], ... (ZPOPMIN with a count in RESP3).
    Nested,
    /// key, member, score (BZPOPMIN, BZPOPMAX).
    KeyFlat,
    /// key, [[member, score], ...] (ZMPOP, BZMPOP).
    KeyNested,
}

/// Pops up to `count` members of `z` (the least, or the greatest with `max`) and answers them
/// in `shape`; removes the key when emptied. The key is touched for `WATCH` (ZMPOP's and
/// BZMPOP's keys are not in their table entries).
#[allow(clippy::too_many_arguments)]
fn pop_into<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    key: &[u8],
    mut z: Zset,
    max: bool,
    count: u64,
    shape: Shape,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let n = count.min(z.len());
    match shape {
        Shape::Flat => r.array(2 * n as usize),
        Shape::Nested => r.array(n as usize),
        Shape::KeyFlat => {
            r.array(2 * n as usize + 1);
            room(cx, r, key.len())?;
            r.bulk(key);
        }
        Shape::KeyNested => {
            r.array(2);
            room(cx, r, key.len())?;
            r.bulk(key);
            r.array(n as usize);
        }
    }
    for _ in 0..n {
        let Some((score, m)) = z.pop(cx, max)? else {
            return Err(StoreError::Corrupt("a sorted set shorter than its count".into()));
        };
        room(cx, r, m.len())?;
        if matches!(shape, Shape::Nested | Shape::KeyNested) {
            r.array(2);
        }
        r.bulk(&m);
        reply_double(r, score);
    }
    cx.watches.touch(s.db, key);
    let emptied = z.len() == 0;
    z.save(cx, key)?;
    if n > 0 {
        removed_events(cx, if max { "zpopmax" } else { "zpopmin" }, key, emptied);
    }
    Ok(())
}

/// ZPOPMIN, ZPOPMAX key [count].
pub(super) fn zpop<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
    max: bool,
) -> Result<(), StoreError> {
    if a.len() > 3 {
        r.error(SYNTAX);
        return Ok(());
    }
    // Redis reads it with one message for both: not a number, or negative.
    let count = if a.len() == 3 {
        match int(a.get(2)) {
            Some(c) if c >= 0 => Some(c as u64),
            _ => {
                r.error("ERR value is out of range, must be positive");
                return Ok(());
            }
        }
    } else {
        None
    };
    let key = a.get(1);
    let z = match value::open(cx, key)? {
        Opened::WrongType => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Opened::Absent(_) => {
            r.array(0);
            return Ok(());
        }
        Opened::Zset(z) => z,
    };
    if count == Some(0) {
        r.array(0);
        return Ok(());
    }
    let shape = if count.is_some() && nested(r) { Shape::Nested } else { Shape::Flat };
    pop_into(cx, s, key, z, max, count.unwrap_or(1), shape, r)
}

/// `numkeys key ... MIN|MAX [COUNT count]` from argument `at` (ZMPOP at 1, BZMPOP at 2): the
/// keys' positions, whether to pop the greatest, and the count. `None` after answering an
/// error.
fn parse_mpop(a: &Args, at: usize, r: &mut Reply) -> Option<(std::ops::Range<usize>, bool, u64)> {
    let numkeys = match int(a.get(at)) {
        Some(n) if n >= 1 => n as u64,
        _ => {
            r.error("ERR numkeys should be greater than 0");
            return None;
        }
    };
    let where_at = (at as u64).saturating_add(numkeys).saturating_add(1);
    if where_at >= a.len() as u64 {
        r.error(SYNTAX);
        return None;
    }
    let where_at = where_at as usize;
    let max = match a.get(where_at) {
        w if is(w, "MIN") => false,
        w if is(w, "MAX") => true,
        _ => {
            r.error(SYNTAX);
            return None;
        }
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < a.len() {
        if count.is_none() && is(a.get(j), "COUNT") && j + 1 < a.len() {
            match int(a.get(j + 1)) {
                Some(c) if c >= 1 => count = Some(c as u64),
                _ => {
                    r.error("ERR count should be greater than 0");
                    return None;
                }
            }
            j += 2;
        } else {
            r.error(SYNTAX);
            return None;
        }
    }
    Some((at + 1..where_at, max, count.unwrap_or(1)))
}

/// ZMPOP numkeys key ... MIN|MAX [COUNT count].
pub(super) fn zmpop<M: Mem>(cx: &mut Cx<M>, s: &Session, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some((keys, max, count)) = parse_mpop(a, 1, r) else { return Ok(()) };
    for i in keys {
        let key = a.get(i);
        match value::open(cx, key)? {
            Opened::WrongType => {
                r.error(WRONGTYPE);
                return Ok(());
            }
            Opened::Absent(_) => continue,
            Opened::Zset(z) => return pop_into(cx, s, key, z, max, count, Shape::KeyNested, r),
        }
    }
    r.null_array();
    Ok(())
}

/// BZPOPMIN, BZPOPMAX (`key ... timeout`), BZMPOP (`timeout numkeys key ... MIN|MAX [COUNT
/// count]`): pops from the first key holding a sorted set, or blocks on them all.
pub(super) fn bzpop<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    name: &str,
    a: &Args,
    r: &mut Reply,
) -> Result<Outcome, StoreError> {
    // BZMPOP's other arguments are read before its timeout, as Redis reads them.
    let mpop = name == "BZMPOP";
    let (keys, max, shape, count) = if mpop {
        let Some((keys, max, count)) = parse_mpop(a, 2, r) else { return Ok(Outcome::Done) };
        (keys, max, Shape::KeyNested, count)
    } else {
        (1..a.len() - 1, name == "BZPOPMAX", Shape::KeyFlat, 1)
    };
    let t = if mpop { a.get(1) } else { a.get(a.len() - 1) };
    let deadline_ms = match deadline(t, cx.now_ms) {
        Ok(d) => d,
        Err(e) => {
            r.error(e);
            return Ok(Outcome::Done);
        }
    };
    for i in keys.clone() {
        let key = a.get(i);
        match value::open(cx, key)? {
            Opened::WrongType => {
                r.error(WRONGTYPE);
                return Ok(Outcome::Done);
            }
            Opened::Absent(_) => continue,
            Opened::Zset(z) => {
                pop_into(cx, s, key, z, max, count, shape, r)?;
                return Ok(Outcome::Done);
            }
        }
    }
    Ok(block_or_null(s, keys.map(|i| a.get(i)), KIND_ZSET, deadline_ms, Null::Array, r))
}
