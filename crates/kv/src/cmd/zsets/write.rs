//! ZADD (NX XX GT LT CH INCR), ZINCRBY, ZREM and the range removals.

use super::range::{LexRange, ScoreRange, NOT_FLOAT_RANGE, NOT_LEX_RANGE};
use super::score::{parse_double, reply_double};
use super::{long_arg, read_zset, removed_events, write_zset};
use crate::cmd::args::{is, Args};
use crate::cmd::notify::ZSET;
use crate::cmd::{Cx, SYNTAX};
use crate::resp::Reply;
use crate::store::{Mem, StoreError};

/// ZADD and ZINCRBY (`incr`: the INCR option, given by the command).
pub(super) fn zadd<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, zincrby: bool) -> Result<(), StoreError> {
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) = (false, false, false, false, false, zincrby);
    let mut i = 2;
    while i < a.len() {
        let o = a.get(i);
        match () {
            _ if is(o, "NX") => nx = true,
            _ if is(o, "XX") => xx = true,
            _ if is(o, "CH") => ch = true,
            _ if is(o, "INCR") => incr = true,
            _ if is(o, "GT") => gt = true,
            _ if is(o, "LT") => lt = true,
            _ => break,
        }
        i += 1;
    }
    let rest = a.len() - i;
    if rest == 0 || rest % 2 == 1 {
        r.error(SYNTAX);
        return Ok(());
    }
    if nx && xx {
        r.error("ERR XX and NX options at the same time are not compatible");
        return Ok(());
    }
    if (gt || lt) && nx || (gt && lt) {
        r.error("ERR GT, LT, and/or NX options at the same time are not compatible");
        return Ok(());
    }
    if incr && rest > 2 {
        r.error("ERR INCR option supports a single increment-element pair");
        return Ok(());
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    for k in (i..a.len()).step_by(2) {
        let Some(score) = parse_double(a.get(k)) else {
            r.error("ERR value is not a valid float");
            return Ok(());
        };
        pairs.push((score, a.get(k + 1)));
    }
    let key = a.get(1);
    let Ok((mut z, existed)) = write_zset(cx, key, r)? else { return Ok(()) };
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0);
    let mut last = 0.0;
    if existed || !xx {
        for (score, member) in pairs {
            let mut score = score;
            match z.score(cx, member)? {
                Some(cur) => {
                    if nx {
                        continue;
                    }
                    if incr {
                        score += cur;
                        if score.is_nan() {
                            r.error("ERR resulting score is not a number (NaN)");
                            return z.save(cx, key);
                        }
                    }
                    if (lt && score >= cur) || (gt && score <= cur) {
                        continue;
                    }
                    last = score;
                    processed += 1;
                    if score != cur {
                        z.rescore(cx, member, cur, score)?;
                        updated += 1;
                    }
                }
                None if xx => continue,
                None => {
                    z.add(cx, member, score)?;
                    last = score;
                    processed += 1;
                    added += 1;
                }
            }
        }
    }
    z.save(cx, key)?;
    if added + updated > 0 {
        cx.notify(ZSET, if incr { "zincr" } else { "zadd" }, key);
    }
    if incr {
        if processed > 0 {
            reply_double(r, last);
        } else {
            r.null();
        }
    } else {
        r.int(if ch { added + updated } else { added });
    }
    Ok(())
}

pub(super) fn zrem<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let key = a.get(1);
    let Ok(z) = read_zset(cx, key, r)? else { return Ok(()) };
    let Some(mut z) = z else {
        r.int(0);
        return Ok(());
    };
    let mut removed = 0;
    for m in a.from(2) {
        removed += i64::from(z.remove(cx, m)?.is_some());
        if z.len() == 0 {
            break;
        }
    }
    let emptied = z.len() == 0;
    z.save(cx, key)?;
    if removed > 0 {
        removed_events(cx, "zrem", key, emptied);
    }
    r.int(removed);
    Ok(())
}

/// ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX.
pub(super) fn zremrange<M: Mem>(
    cx: &mut Cx<M>,
    a: &Args,
    r: &mut Reply,
    name: &str,
) -> Result<(), StoreError> {
    enum Kind {
        Rank(i64, i64),
        Score(ScoreRange),
        Lex(LexRange),
    }
    let kind = match name {
        "ZREMRANGEBYRANK" => {
            let Some(start) = long_arg(a.get(2), r) else { return Ok(()) };
            let Some(end) = long_arg(a.get(3), r) else { return Ok(()) };
            Kind::Rank(start, end)
        }
        "ZREMRANGEBYSCORE" => match ScoreRange::parse(a.get(2), a.get(3)) {
            Some(s) => Kind::Score(s),
            None => {
                r.error(NOT_FLOAT_RANGE);
                return Ok(());
            }
        },
        _ => match LexRange::parse(a.get(2), a.get(3)) {
            Some(l) => Kind::Lex(l),
            None => {
                r.error(NOT_LEX_RANGE);
                return Ok(());
            }
        },
    };
    let key = a.get(1);
    let Ok(z) = read_zset(cx, key, r)? else { return Ok(()) };
    let Some(mut z) = z else {
        r.int(0);
        return Ok(());
    };
    let len = z.len() as i64;
    let (lo, hi) = match kind {
        Kind::Rank(start, end) => {
            let start = if start < 0 { (len + start).max(0) } else { start };
            let end = if end < 0 { len + end } else { end };
            if start > end || start >= len {
                r.int(0);
                return Ok(());
            }
            (start as u64, (end.min(len - 1) + 1) as u64)
        }
        Kind::Score(s) => (z.count_below(cx, &s.lo())?, z.count_below(cx, &s.hi())?),
        Kind::Lex(l) => (z.count_below(cx, &l.lo())?, z.count_below(cx, &l.hi())?),
    };
    let removed = z.remove_ranks(cx, lo, hi)?;
    let emptied = z.len() == 0;
    z.save(cx, key)?;
    if removed > 0 {
        let event = match name {
            "ZREMRANGEBYRANK" => "zremrangebyrank",
            "ZREMRANGEBYSCORE" => "zremrangebyscore",
            _ => "zremrangebylex",
        };
        removed_events(cx, event, key, emptied);
    }
    r.int(removed as i64);
    Ok(())
}
