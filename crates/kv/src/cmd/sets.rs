//! Set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SINTER
//! SINTERCARD SINTERSTORE SUNION SUNIONSTORE SDIFF SDIFFSTORE SSCAN, with Redis 7.0's replies
//! and errors. How a set is held: `set_value.rs`.

use super::args::{int, is, Args};
use super::coll_scan;
use super::notify::{GENERIC, SET};
use super::rand;
use super::set_value::{self, Fetched, SetVal};
use super::spec::{spec, Group, Spec, ALL, NO, ONE, R, RF, W, WF};
use super::{Cx, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Reply;
use crate::store::{Mem, StoreError};
use std::collections::HashSet;

const WRITE_FAST: &[&str] = &["write", "fast"];

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("SADD", -3, WF, ONE, Group::Sets),
    spec("SCARD", 2, RF, ONE, Group::Sets),
    spec("SDIFF", -2, R, ALL, Group::Sets),
    spec("SDIFFSTORE", -3, W, ALL, Group::Sets),
    spec("SINTER", -2, R, ALL, Group::Sets),
    spec("SINTERCARD", -3, &["readonly", "movablekeys"], NO, Group::Sets),
    spec("SINTERSTORE", -3, W, ALL, Group::Sets),
    spec("SISMEMBER", 3, RF, ONE, Group::Sets),
    spec("SMEMBERS", 2, R, ONE, Group::Sets),
    spec("SMISMEMBER", -3, RF, ONE, Group::Sets),
    spec("SMOVE", 4, WRITE_FAST, (1, 2, 1), Group::Sets),
    spec("SPOP", -2, WRITE_FAST, ONE, Group::Sets),
    spec("SRANDMEMBER", -2, R, ONE, Group::Sets),
    spec("SREM", -3, WRITE_FAST, ONE, Group::Sets),
    spec("SSCAN", -3, R, ONE, Group::Sets),
    spec("SUNION", -2, R, ALL, Group::Sets),
    spec("SUNIONSTORE", -3, W, ALL, Group::Sets),
];

/// The empty scan's reply: cursor 0, no elements.
const EMPTY_SCAN: &[u8] = b"*2\r\n$1\r\n0\r\n*0\r\n";

/// The set at `key`, or `None` (after replying WRONGTYPE) if it holds another type.
fn load<M: Mem>(cx: &mut Cx<M>, key: &[u8], r: &mut Reply) -> Result<Option<Fetched>, StoreError> {
    match set_value::fetch(cx, key)? {
        Fetched::WrongType => {
            r.error(WRONGTYPE);
            Ok(None)
        }
        f => Ok(Some(f)),
    }
}

/// The sets at `keys` (`None` for a missing one), or `None` (after replying WRONGTYPE) if one
/// holds another type.
#[allow(clippy::type_complexity)]
fn load_all<M: Mem>(
    cx: &mut Cx<M>,
    keys: &[&[u8]],
    r: &mut Reply,
) -> Result<Option<Vec<Option<SetVal>>>, StoreError> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        match set_value::fetch(cx, k)? {
            Fetched::WrongType => {
                r.error(WRONGTYPE);
                return Ok(None);
            }
            Fetched::Missing(_) => sets.push(None),
            Fetched::Set(_, v) => sets.push(Some(v)),
        }
    }
    Ok(Some(sets))
}

/// A reply of members (a set in RESP3, else an array): the count, then the members.
fn reply_members<M: Mem>(cx: &Cx<M>, r: &mut Reply, members: &[impl AsRef<[u8]>]) -> Result<(), StoreError> {
    let bytes: usize = members.iter().map(|m| m.as_ref().len() + 16).sum();
    cx.reply_room(r, bytes + 16)?;
    r.set(members.len());
    for m in members {
        r.bulk(m.as_ref());
    }
    Ok(())
}

fn sadd<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let key = a.get(1);
    let Some(got) = load(cx, key, r)? else { return Ok(()) };
    let new: Vec<&[u8]> = a.from(2).collect();
    let added = match got {
        Fetched::Set(f, v) => set_value::add(cx, key, None, Some((f, v)), &new)?,
        Fetched::Missing(old) => set_value::add(cx, key, old.as_ref(), None, &new)?,
        Fetched::WrongType => unreachable!("load replied"),
    };
    if added > 0 {
        cx.notify(SET, "sadd", key);
    }
    r.int(added as i64);
    Ok(())
}

fn srem<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let key = a.get(1);
    let removed = match load(cx, key, r)? {
        None => return Ok(()),
        Some(Fetched::Set(f, v)) => {
            let gone: Vec<&[u8]> = a.from(2).collect();
            let size = v.len();
            let removed = set_value::remove(cx, key, f, v, &gone)?;
            if removed > 0 {
                cx.notify(SET, "srem", key);
                if removed == size {
                    cx.notify(GENERIC, "del", key);
                }
            }
            removed
        }
        Some(_) => 0,
    };
    r.int(removed as i64);
    Ok(())
}

fn smove<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (src, dst, m) = (a.get(1), a.get(2), a.get(3));
    let (f, v) = match set_value::fetch(cx, src)? {
        Fetched::Missing(_) => {
            r.int(0);
            return Ok(());
        }
        Fetched::WrongType => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Fetched::Set(f, v) => (f, v),
    };
    if let Fetched::WrongType = set_value::fetch(cx, dst)? {
        r.error(WRONGTYPE);
        return Ok(());
    }
    if src == dst {
        r.int(i64::from(v.contains(cx, m)?));
        return Ok(());
    }
    if !v.contains(cx, m)? {
        r.int(0);
        return Ok(());
    }
    let emptied = v.len() == 1;
    set_value::remove(cx, src, f, v, &[m])?;
    touch(cx, src);
    cx.notify(SET, "srem", src);
    if emptied {
        cx.notify(GENERIC, "del", src);
    }
    // The table changed: the destination is found afresh.
    let added = match set_value::fetch(cx, dst)? {
        Fetched::Set(f, v) => set_value::add(cx, dst, None, Some((f, v)), &[m])?,
        Fetched::Missing(old) => set_value::add(cx, dst, old.as_ref(), None, &[m])?,
        Fetched::WrongType => unreachable!("checked above"),
    };
    // A destination that had the member already is not changed, nor touched.
    if added > 0 {
        touch(cx, dst);
        cx.notify(SET, "sadd", dst);
    }
    r.int(1);
    Ok(())
}

fn sismember<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match load(cx, a.get(1), r)? {
        None => {}
        Some(Fetched::Set(_, v)) => r.int(i64::from(v.contains(cx, a.get(2))?)),
        Some(_) => r.int(0),
    }
    Ok(())
}

fn smismember<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(got) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.array(a.len() - 2);
    for m in a.from(2) {
        let there = match &got {
            Fetched::Set(_, v) => v.contains(cx, m)?,
            _ => false,
        };
        r.int(i64::from(there));
    }
    Ok(())
}

fn scard<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match load(cx, a.get(1), r)? {
        None => {}
        Some(Fetched::Set(_, v)) => r.int(v.len() as i64),
        Some(_) => r.int(0),
    }
    Ok(())
}

/// Streams every member of `v` as a reply (a set in RESP3).
fn reply_set<M: Mem>(cx: &Cx<M>, v: &SetVal, r: &mut Reply) -> Result<(), StoreError> {
    r.set(v.len() as usize);
    let limit = cx.output_limit;
    v.each(cx, |m| {
        if r.buf.len().saturating_add(m.len() + 16) > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        r.bulk(m);
        Ok(true)
    })
}

fn smembers<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match load(cx, a.get(1), r)? {
        None => {}
        Some(Fetched::Set(_, v)) => reply_set(cx, &v, r)?,
        Some(_) => r.set(0),
    }
    Ok(())
}

/// A count argument as Redis's `getRangeLongFromObjectOrReply` reads one: `msg` for anything
/// not in `min ..= max` (or not a number, when `msg` is given), else Redis's own messages.
pub(super) fn ranged(v: &[u8], min: i64, max: i64, msg: Option<&str>, r: &mut Reply) -> Option<i64> {
    match int(v) {
        Some(n) if n >= min && n <= max => Some(n),
        Some(_) => {
            match msg {
                Some(m) => r.error(&format!("ERR {m}")),
                None => r.error(&format!("ERR value is out of range, value must between {min} and {max}")),
            }
            None
        }
        None => {
            match msg {
                Some(m) => r.error(&format!("ERR {m}")),
                None => r.error(NOT_INT),
            }
            None
        }
    }
}

/// `k` distinct members of `v`, chosen uniformly (`k` < `v.len()`).
fn sample<M: Mem>(cx: &Cx<M>, v: &SetVal, k: u64) -> Result<Vec<Vec<u8>>, StoreError> {
    let picks = rand::distinct(k, v.len());
    let mut out = Vec::with_capacity(picks.len());
    match v {
        SetVal::Tree(_) => {
            for i in picks {
                let mut m = Vec::new();
                v.nth(cx, i, &mut m)?;
                out.push(m);
            }
        }
        _ => {
            let all = v.members(cx)?;
            for i in picks {
                out.push(all[i as usize].clone());
            }
        }
    }
    Ok(out)
}

fn spop<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    if a.len() > 3 {
        r.error(SYNTAX);
        return Ok(());
    }
    let key = a.get(1);
    let count = if a.len() == 3 {
        let Some(n) = ranged(a.get(2), 0, i64::MAX, Some("value is out of range, must be positive"), r)
        else {
            return Ok(());
        };
        Some(n as u64)
    } else {
        None
    };
    let (f, v) = match load(cx, key, r)? {
        None => return Ok(()),
        Some(Fetched::Set(f, v)) => (f, v),
        Some(_) => {
            match count {
                Some(_) => r.set(0),
                None => r.null(),
            }
            return Ok(());
        }
    };
    let size = v.len();
    let Some(count) = count else {
        let mut m = Vec::new();
        v.nth(cx, rand::below(size), &mut m)?;
        set_value::remove(cx, key, f, v, &[&m])?;
        cx.notify(SET, "spop", key);
        if size == 1 {
            cx.notify(GENERIC, "del", key);
        }
        cx.reply_room(r, m.len() + 16)?;
        r.bulk(&m);
        return Ok(());
    };
    if count == 0 {
        r.set(0);
        return Ok(());
    }
    cx.notify(SET, "spop", key);
    if count >= size {
        reply_set(cx, &v, r)?;
        cx.store.remove(&f)?;
        cx.notify(GENERIC, "del", key);
        return Ok(());
    }
    let remaining = size - count;
    if matches!(v, SetVal::Tree(_)) && remaining.saturating_mul(5) <= count {
        // Most of a tree goes: the members that stay go to a new set (an intset if they allow),
        // the old tree is freed whole (far less to undo than removing its members one by
        // one), as Redis does.
        let kept = sample(cx, &v, remaining)?;
        let keep: HashSet<&[u8]> = kept.iter().map(Vec::as_slice).collect();
        let mut gone = Vec::with_capacity(count as usize);
        v.each(cx, |m| {
            if !keep.contains(m) {
                gone.push(m.to_vec());
            }
            Ok(true)
        })?;
        reply_members(cx, r, &gone)?;
        let refs: Vec<&[u8]> = kept.iter().map(Vec::as_slice).collect();
        return set_value::replace(cx, key, &f, &refs);
    }
    let picked = sample(cx, &v, count)?;
    reply_members(cx, r, &picked)?;
    let gone: Vec<&[u8]> = picked.iter().map(Vec::as_slice).collect();
    set_value::remove(cx, key, f, v, &gone)?;
    Ok(())
}

fn srandmember<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    if a.len() > 3 {
        r.error(SYNTAX);
        return Ok(());
    }
    if a.len() == 2 {
        match load(cx, a.get(1), r)? {
            None => {}
            Some(Fetched::Set(_, v)) => {
                let mut m = Vec::new();
                v.nth(cx, rand::below(v.len()), &mut m)?;
                cx.reply_room(r, m.len() + 16)?;
                r.bulk(&m);
            }
            Some(_) => r.null(),
        }
        return Ok(());
    }
    let Some(l) = ranged(a.get(2), -i64::MAX, i64::MAX, None, r) else { return Ok(()) };
    let v = match load(cx, a.get(1), r)? {
        None => return Ok(()),
        Some(Fetched::Set(_, v)) => v,
        Some(_) => {
            r.array(0);
            return Ok(());
        }
    };
    let (count, unique) = (l.unsigned_abs(), l >= 0);
    if count == 0 {
        r.array(0);
        return Ok(());
    }
    let size = v.len();
    if !unique || count == 1 {
        // With repetitions: each an independent uniform draw. Every element takes at least 6
        // bytes of reply, so a count the output limit cannot hold is refused before any work.
        cx.reply_room(r, usize::try_from(count.saturating_mul(6)).unwrap_or(usize::MAX))?;
        r.array(count as usize);
        let mut m = Vec::new();
        let members = match &v {
            SetVal::Tree(_) => None,
            _ => Some(v.members(cx)?),
        };
        for _ in 0..count {
            let i = rand::below(size);
            let m = match &members {
                Some(all) => &all[i as usize],
                None => {
                    v.nth(cx, i, &mut m)?;
                    &m
                }
            };
            cx.reply_room(r, m.len() + 16)?;
            r.bulk(m);
        }
        return Ok(());
    }
    if count >= size {
        let all = v.members(cx)?;
        let bytes: usize = all.iter().map(|m| m.len() + 16).sum();
        cx.reply_room(r, bytes + 16)?;
        r.array(all.len());
        for m in &all {
            r.bulk(m);
        }
        return Ok(());
    }
    let picked = sample(cx, &v, count)?;
    let bytes: usize = picked.iter().map(|m| m.len() + 16).sum();
    cx.reply_room(r, bytes + 16)?;
    r.array(picked.len());
    for m in &picked {
        r.bulk(m);
    }
    Ok(())
}

/// The intersection of `sets`, in the order of the smallest set's members, at most `limit`
/// of them (0: all).
fn intersect<M: Mem>(cx: &Cx<M>, sets: &[Option<SetVal>], limit: u64) -> Result<Vec<Vec<u8>>, StoreError> {
    if sets.iter().any(Option::is_none) {
        return Ok(Vec::new());
    }
    let mut sets: Vec<&SetVal> = sets.iter().flatten().collect();
    sets.sort_by_key(|s| s.len());
    let mut out = Vec::new();
    let (first, rest) = sets.split_first().expect("at least one key");
    first.each(cx, |m| {
        for s in rest {
            if !s.contains(cx, m)? {
                return Ok(true);
            }
        }
        out.push(m.to_vec());
        Ok(limit == 0 || (out.len() as u64) < limit)
    })?;
    Ok(out)
}

/// SINTER, SINTERSTORE (`dst`) and SINTERCARD (`card`: its limit).
fn sinter<M: Mem>(
    cx: &mut Cx<M>,
    keys: &[&[u8]],
    dst: Option<&[u8]>,
    card: Option<u64>,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let Some(sets) = load_all(cx, keys, r)? else { return Ok(()) };
    let result = intersect(cx, &sets, card.unwrap_or(0))?;
    if card.is_some() {
        r.int(result.len() as i64);
    } else if let Some(dst) = dst {
        let refs: Vec<&[u8]> = result.iter().map(Vec::as_slice).collect();
        store(cx, dst, &refs, "sinterstore")?;
        r.int(result.len() as i64);
    } else {
        reply_members(cx, r, &result)?;
    }
    Ok(())
}

fn sintercard<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(numkeys) = ranged(a.get(1), 1, i64::MAX, Some("numkeys should be greater than 0"), r) else {
        return Ok(());
    };
    if numkeys as u64 > (a.len() - 2) as u64 {
        r.error("ERR Number of keys can't be greater than number of args");
        return Ok(());
    }
    let numkeys = numkeys as usize;
    let mut limit = 0;
    let mut j = 2 + numkeys;
    while j < a.len() {
        if is(a.get(j), "LIMIT") && j + 1 < a.len() {
            j += 1;
            let Some(l) = ranged(a.get(j), 0, i64::MAX, Some("LIMIT can't be negative"), r) else {
                return Ok(());
            };
            limit = l as u64;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
        j += 1;
    }
    let keys: Vec<&[u8]> = (2..2 + numkeys).map(|i| a.get(i)).collect();
    sinter(cx, &keys, None, Some(limit), r)
}

/// SUNION, SDIFF and their STORE forms (`dst`).
fn sunion_diff<M: Mem>(
    cx: &mut Cx<M>,
    keys: &[&[u8]],
    dst: Option<&[u8]>,
    diff: bool,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let Some(sets) = load_all(cx, keys, r)? else { return Ok(()) };
    let mut out: Vec<Vec<u8>> = Vec::new();
    if diff {
        // Nothing is left of a set less itself.
        let same = sets[0].is_some() && keys[1..].contains(&keys[0]);
        if let (Some(first), false) = (&sets[0], same) {
            first.each(cx, |m| {
                for s in sets[1..].iter().flatten() {
                    if s.contains(cx, m)? {
                        return Ok(true);
                    }
                }
                out.push(m.to_vec());
                Ok(true)
            })?;
        }
    } else {
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        for s in sets.iter().flatten() {
            s.each(cx, |m| {
                if !seen.contains(m) {
                    seen.insert(m.to_vec());
                    out.push(m.to_vec());
                }
                Ok(true)
            })?;
        }
    }
    match dst {
        Some(dst) => {
            let refs: Vec<&[u8]> = out.iter().map(Vec::as_slice).collect();
            store(cx, dst, &refs, if diff { "sdiffstore" } else { "sunionstore" })?;
            r.int(out.len() as i64);
        }
        None => reply_members(cx, r, &out)?,
    }
    Ok(())
}

fn sscan<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(cursor) = coll_scan::cursor(a.get(2)) else {
        r.error("ERR invalid cursor");
        return Ok(());
    };
    let v = match load(cx, a.get(1), r)? {
        None => return Ok(()),
        Some(Fetched::Set(_, v)) => v,
        Some(_) => {
            r.buf.extend_from_slice(EMPTY_SCAN);
            return Ok(());
        }
    };
    let Some(o) = coll_scan::options(a, 3, r) else { return Ok(()) };
    let mut items = Vec::new();
    let mut ir = Reply { buf: &mut items, proto: r.proto };
    let (next, n) = match &v {
        SetVal::Tree(t) => coll_scan::tree_scan(cx, t, cursor, &o, false, &mut ir)?,
        _ => {
            let mut n = 0;
            let limit = cx.output_limit;
            v.each(cx, |m| {
                if o.wants(m) {
                    if ir.buf.len().saturating_add(m.len() + 16) > limit {
                        return Err(StoreError::OutputLimit(limit));
                    }
                    ir.bulk(m);
                    n += 1;
                }
                Ok(true)
            })?;
            (0, n)
        }
    };
    coll_scan::reply(cx, r, next, n, &items)
}

/// Records, for the clients that WATCH it, that the running command changed `key` of the
/// selected database.
/// Makes `dst` the set of `members` for a `*STORE` command, raising its event (`del` for an
/// empty result that removed a key, as Redis).
fn store<M: Mem>(cx: &mut Cx<M>, dst: &[u8], members: &[&[u8]], event: &str) -> Result<(), StoreError> {
    let now = cx.now_ms;
    let existed = members.is_empty() && cx.store.find(dst)?.is_some_and(|f| !f.head.expired(now));
    set_value::store(cx, dst, members)?;
    if !members.is_empty() {
        cx.notify(SET, event, dst);
    } else if existed {
        cx.notify(GENERIC, "del", dst);
    }
    Ok(())
}

fn touch<M: Mem>(cx: &mut Cx<M>, key: &[u8]) {
    if cx.watches.any() {
        let db = cx.store.selected();
        cx.watches.touch(db, key);
    }
}

/// Runs one of this module's commands. It touches (for WATCH) only the keys it changes, as
/// Redis: SMOVE's destination only when the member was added to it, a *STORE's destination and
/// never its sources.
pub(super) fn run<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let keys_from = |i: usize| -> Vec<&[u8]> { a.from(i).collect() };
    let stores = cx.store.stores();
    match spec.name {
        "SADD" => sadd(cx, a, r)?,
        "SREM" => srem(cx, a, r)?,
        "SMOVE" => smove(cx, a, r)?,
        "SISMEMBER" => sismember(cx, a, r)?,
        "SMISMEMBER" => smismember(cx, a, r)?,
        "SCARD" => scard(cx, a, r)?,
        "SMEMBERS" => smembers(cx, a, r)?,
        "SPOP" => spop(cx, a, r)?,
        "SRANDMEMBER" => srandmember(cx, a, r)?,
        "SINTER" => sinter(cx, &keys_from(1), None, None, r)?,
        "SINTERSTORE" => sinter(cx, &keys_from(2), Some(a.get(1)), None, r)?,
        "SINTERCARD" => sintercard(cx, a, r)?,
        "SUNION" => sunion_diff(cx, &keys_from(1), None, false, r)?,
        "SUNIONSTORE" => sunion_diff(cx, &keys_from(2), Some(a.get(1)), false, r)?,
        "SDIFF" => sunion_diff(cx, &keys_from(1), None, true, r)?,
        "SDIFFSTORE" => sunion_diff(cx, &keys_from(2), Some(a.get(1)), true, r)?,
        "SSCAN" => sscan(cx, a, r)?,
        other => unreachable!("{other} is not a sets command"),
    }
    // SMOVE touched its keys itself; the others change only their first key.
    let changes_first = matches!(spec.name, "SADD" | "SREM" | "SPOP")
        || spec.name.ends_with("STORE") && spec.name.starts_with('S');
    if changes_first && cx.store.stores() != stores {
        touch(cx, a.get(1));
    }
    Ok(())
}

#[cfg(test)]
#[path = "sets_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sets_keys_tests.rs"]
mod keys_tests;
