//! Sorted-set commands, as Redis 7.0 answers them: ZADD ZINCRBY ZREM ZCARD ZSCORE ZMSCORE
//! ZRANK ZREVRANK ZCOUNT ZLEXCOUNT, the ranges (ZRANGE with BYSCORE BYLEX REV LIMIT WITHSCORES,
//! ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE ZRANGESTORE), their
//! removals (ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX), the pops (ZPOPMIN ZPOPMAX ZMPOP,
//! and BZPOPMIN BZPOPMAX BZMPOP when there is something to pop), the set operations (ZUNION
//! ZINTER ZDIFF and their STORE forms, ZINTERCARD), ZRANDMEMBER and ZSCAN. The blocking pops
//! that find nothing to pop return [`Outcome::Block`] (`cmd/blocking.rs`): the server runs them
//! again when one of their keys is written.
//!
//! A sorted set is small (its members in the entry's value) or large (an index in the region:
//! `store::zindex`), as `value.rs` describes; scores are read and printed as Redis does
//! (`score.rs`), ranges parsed as it does (`range.rs`).

mod pop;
mod range;
mod read;
pub(super) mod score;
mod setops;
#[cfg(test)]
mod tests;
mod value;
mod write;

use super::args::{int, Args};
use super::spec::{spec, Group, Spec, ONE, R, RF, W, WD, WF};
use super::{Cx, Outcome, Session, NOT_INT, WRONGTYPE};
use crate::resp::{Proto, Reply};
use crate::store::{Found, Mem, StoreError};
use value::{Opened, Zset};

const BLOCKING: &[&str] = &["write", "noscript", "fast", "blocking"];
const BLOCKING_SLOW: &[&str] = &["write", "blocking", "movablekeys"];
const W_MOVABLE: &[&str] = &["write", "denyoom", "movablekeys"];
const WD_MOVABLE: &[&str] = &["write", "movablekeys"];
const R_MOVABLE: &[&str] = &["readonly", "movablekeys"];
const NONE: (i32, i32, i32) = (0, 0, 0);

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("BZMPOP", -5, BLOCKING_SLOW, NONE, Group::Zsets),
    spec("BZPOPMAX", -3, BLOCKING, (1, -2, 1), Group::Zsets),
    spec("BZPOPMIN", -3, BLOCKING, (1, -2, 1), Group::Zsets),
    spec("ZADD", -4, WF, ONE, Group::Zsets),
    spec("ZCARD", 2, RF, ONE, Group::Zsets),
    spec("ZCOUNT", 4, RF, ONE, Group::Zsets),
    spec("ZDIFF", -3, R_MOVABLE, NONE, Group::Zsets),
    spec("ZDIFFSTORE", -4, W_MOVABLE, ONE, Group::Zsets),
    spec("ZINCRBY", 4, WF, ONE, Group::Zsets),
    spec("ZINTER", -3, R_MOVABLE, NONE, Group::Zsets),
    spec("ZINTERCARD", -3, R_MOVABLE, NONE, Group::Zsets),
    spec("ZINTERSTORE", -4, W_MOVABLE, ONE, Group::Zsets),
    spec("ZLEXCOUNT", 4, RF, ONE, Group::Zsets),
    spec("ZMPOP", -4, WD_MOVABLE, NONE, Group::Zsets),
    spec("ZMSCORE", -3, RF, ONE, Group::Zsets),
    spec("ZPOPMAX", -2, &["write", "fast"], ONE, Group::Zsets),
    spec("ZPOPMIN", -2, &["write", "fast"], ONE, Group::Zsets),
    spec("ZRANDMEMBER", -2, R, ONE, Group::Zsets),
    spec("ZRANGE", -4, R, ONE, Group::Zsets),
    spec("ZRANGEBYLEX", -4, R, ONE, Group::Zsets),
    spec("ZRANGEBYSCORE", -4, R, ONE, Group::Zsets),
    spec("ZRANGESTORE", -5, W, (1, 2, 1), Group::Zsets),
    spec("ZRANK", 3, RF, ONE, Group::Zsets),
    spec("ZREM", -3, &["write", "fast"], ONE, Group::Zsets),
    spec("ZREMRANGEBYLEX", 4, WD, ONE, Group::Zsets),
    spec("ZREMRANGEBYRANK", 4, WD, ONE, Group::Zsets),
    spec("ZREMRANGEBYSCORE", 4, WD, ONE, Group::Zsets),
    spec("ZREVRANGE", -4, R, ONE, Group::Zsets),
    spec("ZREVRANGEBYLEX", -4, R, ONE, Group::Zsets),
    spec("ZREVRANGEBYSCORE", -4, R, ONE, Group::Zsets),
    spec("ZREVRANK", 3, RF, ONE, Group::Zsets),
    spec("ZSCAN", -3, R, ONE, Group::Zsets),
    spec("ZSCORE", 3, RF, ONE, Group::Zsets),
    spec("ZUNION", -3, R_MOVABLE, NONE, Group::Zsets),
    spec("ZUNIONSTORE", -4, W_MOVABLE, ONE, Group::Zsets),
];

/// The sorted set at `key` for a command that reads it: `Err(())` after answering
/// `WRONGTYPE`; `None` when there is none.
fn read_zset<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    r: &mut Reply,
) -> Result<Result<Option<Zset>, ()>, StoreError> {
    Ok(match value::open(cx, key)? {
        Opened::WrongType => {
            r.error(WRONGTYPE);
            Err(())
        }
        Opened::Absent(_) => Ok(None),
        Opened::Zset(z) => Ok(Some(z)),
    })
}

/// The sorted set at `key` for a command that may create it: `Err(())` after answering
/// `WRONGTYPE`; else the set (empty and new when there was none) and whether it existed.
fn write_zset<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    r: &mut Reply,
) -> Result<Result<(Zset, bool), ()>, StoreError> {
    Ok(match value::open(cx, key)? {
        Opened::WrongType => {
            r.error(WRONGTYPE);
            Err(())
        }
        Opened::Absent(found) => Ok((Zset::create(found), false)),
        Opened::Zset(z) => Ok((z, true)),
    })
}

/// A C `long` as Redis reads one (`getLongFromObjectOrReply`): `None` after answering.
fn long_arg(a: &[u8], r: &mut Reply) -> Option<i64> {
    let v = int(a);
    if v.is_none() {
        r.error(NOT_INT);
    }
    v
}

/// Checks that `n` more reply bytes stay within the output limit.
fn room<M: Mem>(cx: &Cx<M>, r: &Reply, n: usize) -> Result<(), StoreError> {
    cx.reply_room(r, n.saturating_add(64))
}

/// One member of a reply listing members, with its score if `score` is given: a pair of its
/// own in RESP3 when `pairs`.
fn emit<M: Mem>(
    cx: &Cx<M>,
    r: &mut Reply,
    member: &[u8],
    score: Option<f64>,
    pairs: bool,
) -> Result<(), StoreError> {
    room(cx, r, member.len())?;
    if pairs && score.is_some() {
        r.array(2);
    }
    r.bulk(member);
    if let Some(s) = score {
        score::reply_double(r, s);
    }
    Ok(())
}

/// Whether WITHSCORES replies nest each member with its score (RESP3) rather than flatten.
fn nested(r: &Reply) -> bool {
    r.proto == Proto::Resp3
}

/// The header of a reply of `n` members, with scores or not: RESP2 flattens pairs.
fn members_header(r: &mut Reply, n: u64, withscores: bool) {
    let n = n as usize;
    r.array(if withscores && !nested(r) { 2 * n } else { n });
}

/// Stores `items` (in order, each member once) as a new sorted set at `key`, replacing whatever
/// the key holds, expiring at `expire_ms` (0: never), in the encoding its size calls for
/// (`RESTORE`).
pub(super) fn store_members<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    items: &[(f64, Vec<u8>)],
    expire_ms: u64,
) -> Result<(), StoreError> {
    value::store_new(cx, key, items, expire_ms)
}

/// Stores a `*STORE` command's result at `dst` (as [`store_members`]) and raises its event:
/// `del` for an empty result that removed a key, as Redis.
fn store_result<M: Mem>(
    cx: &mut Cx<M>,
    dst: &[u8],
    items: &[(f64, Vec<u8>)],
    event: &str,
) -> Result<(), StoreError> {
    let now = cx.now_ms;
    let existed = items.is_empty() && cx.store.find(dst)?.is_some_and(|f| !f.head.expired(now));
    value::store_new(cx, dst, items, 0)?;
    if !items.is_empty() {
        cx.notify(crate::cmd::notify::ZSET, event, dst);
    } else if existed {
        cx.notify(crate::cmd::notify::GENERIC, "del", dst);
    }
    Ok(())
}

/// Raises `event` for members removed from `key`, and `del` when that `emptied` it (the key is
/// gone), as Redis.
fn removed_events<M: Mem>(cx: &Cx<M>, event: &str, key: &[u8], emptied: bool) {
    cx.notify(crate::cmd::notify::ZSET, event, key);
    if emptied {
        cx.notify(crate::cmd::notify::GENERIC, "del", key);
    }
}

/// The members of the live sorted set at `f`, in order (`SORT`).
pub(super) fn members<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<Vec<Vec<u8>>, StoreError> {
    match cx.store.zindex_of(f)? {
        Some(z) => {
            let mut out = Vec::with_capacity(z.len().min(1 << 20) as usize);
            cx.store.zindex_each(&z, false, |_, m| {
                out.push(m.to_vec());
                Ok(true)
            })?;
            Ok(out)
        }
        None => {
            let mut blob = Vec::new();
            cx.store.value_into(f, &mut blob)?;
            Ok(crate::store::zset_blob::decode(&blob)?.into_iter().map(|(_, m)| m).collect())
        }
    }
}

/// `OBJECT ENCODING`'s name for a sorted set's entry.
pub fn encoding_name<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<&'static str, StoreError> {
    Ok(if cx.store.zindex_of(f)?.is_some() { "skiplist" } else { "listpack" })
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<Outcome, StoreError> {
    match spec.name {
        "ZADD" => write::zadd(cx, a, r, false)?,
        "ZINCRBY" => write::zadd(cx, a, r, true)?,
        "ZREM" => write::zrem(cx, a, r)?,
        "ZREMRANGEBYRANK" | "ZREMRANGEBYSCORE" | "ZREMRANGEBYLEX" => write::zremrange(cx, a, r, spec.name)?,
        "ZCARD" => read::zcard(cx, a, r)?,
        "ZSCORE" => read::zscore(cx, a, r)?,
        "ZMSCORE" => read::zmscore(cx, a, r)?,
        "ZRANK" | "ZREVRANK" => read::zrank(cx, a, r, spec.name == "ZREVRANK")?,
        "ZCOUNT" | "ZLEXCOUNT" => read::zcount(cx, a, r, spec.name == "ZLEXCOUNT")?,
        "ZRANGE" | "ZRANGESTORE" | "ZREVRANGE" | "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" | "ZRANGEBYLEX"
        | "ZREVRANGEBYLEX" => read::zrange(cx, a, r, spec.name)?,
        "ZRANDMEMBER" => read::zrandmember(cx, a, r)?,
        "ZSCAN" => read::zscan(cx, a, r)?,
        "ZPOPMIN" | "ZPOPMAX" => pop::zpop(cx, s, a, r, spec.name == "ZPOPMAX")?,
        "ZMPOP" => pop::zmpop(cx, s, a, r)?,
        "BZPOPMIN" | "BZPOPMAX" | "BZMPOP" => return pop::bzpop(cx, s, spec.name, a, r),
        "ZUNION" | "ZINTER" | "ZDIFF" | "ZUNIONSTORE" | "ZINTERSTORE" | "ZDIFFSTORE" | "ZINTERCARD" => {
            setops::run(cx, a, r, spec.name)?
        }
        other => unreachable!("{other} is not a sorted-set command"),
    }
    Ok(Outcome::Done)
}
