//! List commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LINDEX LSET LRANGE LINSERT LREM LTRIM
//! LPOS LMOVE RPOPLPUSH LMPOP, and the blocking BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP.
//!
//! A list is one entry. A small one (within `list-max-listpack-size`, what one quicklist node
//! holds in Redis) keeps its elements in the entry's value (`store::list_pack`), written again on
//! every change; a larger one is a chain of nodes (`store::quicklist`) whose handle is the
//! value, so that a push or a pop at either end costs the element, and any change O(node), what
//! the list's length. A list moves to a chain when a change takes it past the limit, and stays
//! one. A list emptied by a command is deleted, as in Redis. OBJECT ENCODING names both
//! `quicklist`, as Redis 7.0 names every list.
//!
//! A blocking command that finds its keys empty returns [`Outcome::Block`] (`blocking.rs`): the
//! server runs it again when one of them is written.

use super::args::{int, is, Args};
use super::blocking::{block_or_null, deadline, Null};
use super::notify::{GENERIC, LIST};
use super::spec::{spec, Group, Spec, NO, ONE, R, RF, W, WD, WF};
use super::strings::lookup;
use super::{Cx, Outcome, Session, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Reply;
use crate::store::list_pack::{self, Fill};
use crate::store::{Found, Mem, QuickList, StoreError, ENC_QUICKLIST, KIND_LIST};

const MOVE: (i32, i32, i32) = (1, 2, 1);
const BLOCKING_POP: &[&str] = &["write", "noscript", "blocking"];
const BLOCKING_MOVE: &[&str] = &["write", "denyoom", "noscript", "blocking"];

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("BLMOVE", 6, BLOCKING_MOVE, MOVE, Group::Lists),
    spec("BLMPOP", -5, &["write", "blocking", "movablekeys"], NO, Group::Lists),
    spec("BLPOP", -3, BLOCKING_POP, (1, -2, 1), Group::Lists),
    spec("BRPOP", -3, BLOCKING_POP, (1, -2, 1), Group::Lists),
    spec("BRPOPLPUSH", 4, BLOCKING_MOVE, MOVE, Group::Lists),
    spec("LINDEX", 3, R, ONE, Group::Lists),
    spec("LINSERT", 5, W, ONE, Group::Lists),
    spec("LLEN", 2, RF, ONE, Group::Lists),
    spec("LMOVE", 5, W, MOVE, Group::Lists),
    spec("LMPOP", -4, &["write", "movablekeys"], NO, Group::Lists),
    spec("LPOP", -2, &["write", "fast"], ONE, Group::Lists),
    spec("LPOS", -3, R, ONE, Group::Lists),
    spec("LPUSH", -3, WF, ONE, Group::Lists),
    spec("LPUSHX", -3, WF, ONE, Group::Lists),
    spec("LRANGE", 4, R, ONE, Group::Lists),
    spec("LREM", 4, WD, ONE, Group::Lists),
    spec("LSET", 4, W, ONE, Group::Lists),
    spec("LTRIM", 4, WD, ONE, Group::Lists),
    spec("RPOP", -2, &["write", "fast"], ONE, Group::Lists),
    spec("RPOPLPUSH", 3, W, MOVE, Group::Lists),
    spec("RPUSH", -3, WF, ONE, Group::Lists),
    spec("RPUSHX", -3, WF, ONE, Group::Lists),
];

/// A live list's elements, as its entry holds them.
enum Elems {
    Small(Vec<Vec<u8>>),
    Quick(QuickList),
}

/// A live list: its entry and its elements.
struct List {
    f: Found,
    e: Elems,
}

impl List {
    fn len(&self) -> u64 {
        match &self.e {
            Elems::Small(v) => v.len() as u64,
            Elems::Quick(q) => q.len,
        }
    }
}

/// The entry found at a key (live or expired: what a new value replaces) and the live list.
type Loaded = (Option<Found>, Option<List>);

/// The live list at `key`: `Err(())` (after answering WRONGTYPE) if it holds another type.
fn load<M: Mem>(cx: &mut Cx<M>, key: &[u8], r: &mut Reply) -> Result<Result<Loaded, ()>, StoreError> {
    let (found, live) = lookup(cx, key)?;
    match live {
        None => Ok(Ok((found, None))),
        Some(f) if f.head.kind != KIND_LIST => {
            r.error(WRONGTYPE);
            Ok(Err(()))
        }
        Some(f) => {
            let e = if f.head.encoding == ENC_QUICKLIST {
                Elems::Quick(cx.store.list_of(&f)?)
            } else {
                let mut v = Vec::new();
                cx.store.value_into(&f, &mut v)?;
                Elems::Small(list_pack::decode_small(&v)?)
            };
            Ok(Ok((found, Some(List { f, e }))))
        }
    }
}

/// The elements of the live list entry `f`, in order (DUMP, COPY), at most `limit` bytes of
/// them ([`StoreError::OutputLimit`] past it).
pub(in crate::cmd) fn elements<M: Mem>(
    cx: &Cx<M>,
    f: &Found,
    limit: usize,
) -> Result<Vec<Vec<u8>>, StoreError> {
    if f.head.encoding != ENC_QUICKLIST {
        let mut v = Vec::new();
        cx.store.value_into(f, &mut v)?;
        return list_pack::decode_small(&v);
    }
    let ql = cx.store.list_of(f)?;
    let (mut out, mut bytes) = (Vec::with_capacity(ql.len.min(1 << 16) as usize), 0usize);
    cx.store.ql_each(&ql, 0, false, |e| {
        bytes += e.len() + 16;
        if bytes > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        out.push(e.to_vec());
        Ok(true)
    })?;
    Ok(out)
}

/// Stores `elems` (at least one) as a new list at `key` in place of `old`, in the encoding
/// their size calls for (RESTORE, COPY).
pub(in crate::cmd) fn store_list<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    old: Option<&Found>,
    expire_ms: u64,
    elems: &[Vec<u8>],
) -> Result<(), StoreError> {
    put_elems(cx, key, old, expire_ms, elems)
}

fn fill<M: Mem>(cx: &Cx<M>) -> Fill {
    Fill(cx.settings.encodings.list_max_size)
}

/// Stores `elems` as the list at `key` in place of `old` (an entry, live or not): in the value
/// if they are within the fill, else as a chain; none removes the key.
fn put_elems<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    old: Option<&Found>,
    ttl: u64,
    elems: &[Vec<u8>],
) -> Result<(), StoreError> {
    if elems.is_empty() {
        if let Some(f) = old {
            cx.store.remove(f)?;
        }
        return Ok(());
    }
    let fill = fill(cx);
    if list_pack::fits_small(fill, elems) {
        let v = list_pack::encode_small(elems.iter().map(|e| &e[..]));
        cx.store.put(key, KIND_LIST, ttl, &[&v], 0, old)?;
    } else {
        let ql = cx.store.ql_new(elems, fill)?;
        cx.store.put_encoded(key, KIND_LIST, ENC_QUICKLIST, ttl, &[&ql.encode()], 0, old)?;
    }
    Ok(())
}

/// Keeps a chain changed from `before`: its new handle, or, emptied (its nodes freed), no key.
fn finish_quick<M: Mem>(
    cx: &mut Cx<M>,
    f: &Found,
    before: &QuickList,
    ql: &QuickList,
) -> Result<(), StoreError> {
    if ql.len == 0 {
        if ql.nodes != 0 {
            return Err(StoreError::Corrupt(format!(
                "an empty list at {} still has {} nodes",
                f.entry, ql.nodes
            )));
        }
        return cx.store.unlink(f);
    }
    if ql != before {
        cx.store.set_list(f, ql)?;
    }
    Ok(())
}

/// Pushes `values` one by one at the head (`front`) or tail of the list at `key` (`live`, or a
/// new one in place of `found`); returns the new length.
fn push_values<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    found: Option<&Found>,
    live: Option<List>,
    front: bool,
    values: &[&[u8]],
) -> Result<u64, StoreError> {
    let fill = fill(cx);
    match live {
        None => {
            let v: Vec<Vec<u8>> = if front {
                values.iter().rev().map(|x| x.to_vec()).collect()
            } else {
                values.iter().map(|x| x.to_vec()).collect()
            };
            put_elems(cx, key, found, 0, &v)?;
            Ok(v.len() as u64)
        }
        Some(List { f, e: Elems::Small(old) }) => {
            let v: Vec<Vec<u8>> = if front {
                values.iter().rev().map(|x| x.to_vec()).chain(old).collect()
            } else {
                old.into_iter().chain(values.iter().map(|x| x.to_vec())).collect()
            };
            put_elems(cx, key, Some(&f), f.head.expire_ms, &v)?;
            Ok(v.len() as u64)
        }
        Some(List { f, e: Elems::Quick(mut ql) }) => {
            let before = ql;
            for x in values {
                cx.store.ql_push(&mut ql, front, x, fill)?;
            }
            finish_quick(cx, &f, &before, &ql)?;
            Ok(ql.len)
        }
    }
}

/// Pops up to `n` elements (n ≥ 1) from the head (`front`) or tail of the live list `l` at
/// `key`, appending each to the reply as a bulk string, in the order popped; an emptied list is
/// deleted. Returns how many.
fn pop_into<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    l: List,
    front: bool,
    n: u64,
    r: &mut Reply,
) -> Result<u64, StoreError> {
    let k = n.min(l.len());
    match l.e {
        Elems::Small(mut v) => {
            let popped: Vec<Vec<u8>> = if front {
                v.drain(..k as usize).collect()
            } else {
                v.drain(v.len() - k as usize..).rev().collect()
            };
            for e in &popped {
                cx.reply_room(r, e.len() + 16)?;
                r.bulk(e);
            }
            put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &v)?;
        }
        Elems::Quick(mut ql) => {
            // The elements answered in order, then removed as one range.
            let before = ql;
            let (limit, mut left) = (cx.output_limit, k);
            let from = if front { 0 } else { ql.len - 1 };
            cx.store.ql_each(&ql, from, !front, |e| {
                if r.buf.len().saturating_add(e.len() + 16) > limit {
                    return Err(StoreError::OutputLimit(limit));
                }
                r.bulk(e);
                left -= 1;
                Ok(left > 0)
            })?;
            let fill = fill(cx);
            let start = if front { 0 } else { ql.len - k };
            cx.store.ql_del_range(&mut ql, start, k, fill)?;
            finish_quick(cx, &l.f, &before, &ql)?;
        }
    }
    Ok(k)
}

/// The keyspace events of a pop from `key`'s head (`front`) or tail that left it `emptied`
/// (and so deleted).
fn popped<M: Mem>(cx: &Cx<M>, key: &[u8], front: bool, emptied: bool) {
    cx.notify(LIST, if front { "lpop" } else { "rpop" }, key);
    if emptied {
        cx.notify(GENERIC, "del", key);
    }
}

/// The keyspace event of a push onto `key`'s head (`front`) or tail.
fn pushed<M: Mem>(cx: &Cx<M>, key: &[u8], front: bool) {
    cx.notify(LIST, if front { "lpush" } else { "rpush" }, key);
}

/// Pops one element, returned.
fn pop_one<M: Mem>(cx: &mut Cx<M>, key: &[u8], l: List, front: bool) -> Result<Vec<u8>, StoreError> {
    match l.e {
        Elems::Small(mut v) => {
            let e = if front { v.remove(0) } else { v.pop().expect("a live list has elements") };
            put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &v)?;
            Ok(e)
        }
        Elems::Quick(mut ql) => {
            let before = ql;
            let mut e = Vec::new();
            cx.store.ql_pop(&mut ql, front, &mut e)?;
            finish_quick(cx, &l.f, &before, &ql)?;
            Ok(e)
        }
    }
}

/// The range `start ..= end` (negative: from the end) of a list of `len` elements, clipped as
/// Redis clips it; `None` when empty.
fn clip(start: i64, end: i64, len: u64) -> Option<(u64, u64)> {
    let len = len.min(i64::MAX as u64) as i64;
    let s = if start < 0 { len.saturating_add(start) } else { start }.max(0);
    let e = if end < 0 { len.saturating_add(end) } else { end };
    if s > e || s >= len {
        return None;
    }
    Some((s as u64, e.min(len - 1) as u64))
}

/// Calls `f` with elements `from ..` of the list, towards the tail (or the head when
/// `reverse`), until it returns false.
fn each<M: Mem>(
    cx: &Cx<M>,
    l: &List,
    from: u64,
    reverse: bool,
    mut f: impl FnMut(&[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    match &l.e {
        Elems::Small(v) => {
            let from = from as usize;
            let mut go = |e: &Vec<u8>| f(e);
            if reverse {
                for e in v[..=from].iter().rev() {
                    if !go(e)? {
                        break;
                    }
                }
            } else {
                for e in &v[from..] {
                    if !go(e)? {
                        break;
                    }
                }
            }
            Ok(())
        }
        Elems::Quick(ql) => cx.store.ql_each(ql, from, reverse, f),
    }
}

/// A `count`-style argument: a non-negative integer, else `msg`.
fn positive(a: &[u8], msg: &str, r: &mut Reply) -> Option<u64> {
    match int(a) {
        Some(n) if n >= 0 => Some(n as u64),
        _ => {
            r.error(msg);
            None
        }
    }
}

/// LEFT or RIGHT: true for LEFT (the head).
fn side(a: &[u8], r: &mut Reply) -> Option<bool> {
    if is(a, "LEFT") {
        Some(true)
    } else if is(a, "RIGHT") {
        Some(false)
    } else {
        r.error(SYNTAX);
        None
    }
}

fn push<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, front: bool, xx: bool) -> Result<(), StoreError> {
    let key = a.get(1);
    let Ok((found, live)) = load(cx, key, r)? else { return Ok(()) };
    if live.is_none() && xx {
        r.int(0);
        return Ok(());
    }
    let values: Vec<&[u8]> = a.from(2).collect();
    let n = push_values(cx, key, found.as_ref(), live, front, &values)?;
    pushed(cx, key, front);
    r.int(n as i64);
    Ok(())
}

fn pop<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, front: bool) -> Result<(), StoreError> {
    if a.len() > 3 {
        let name = if front { "lpop" } else { "rpop" };
        r.error(&format!("ERR wrong number of arguments for '{name}' command"));
        return Ok(());
    }
    let count = match a.len() {
        3 => match positive(a.get(2), "ERR value is out of range, must be positive", r) {
            Some(n) => Some(n),
            None => return Ok(()),
        },
        _ => None,
    };
    let key = a.get(1);
    let Ok((_, live)) = load(cx, key, r)? else { return Ok(()) };
    let Some(l) = live else {
        if count.is_some() {
            r.null_array();
        } else {
            r.null();
        }
        return Ok(());
    };
    match count {
        Some(0) => r.array(0),
        Some(n) => {
            let len = l.len();
            r.array(n.min(len) as usize);
            pop_into(cx, key, l, front, n, r)?;
            popped(cx, key, front, n >= len);
        }
        None => {
            let emptied = l.len() == 1;
            let e = pop_one(cx, key, l, front)?;
            popped(cx, key, front, emptied);
            cx.reply_room(r, e.len() + 16)?;
            r.bulk(&e);
        }
    }
    Ok(())
}

fn llen<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.int(live.map_or(0, |l| l.len() as i64));
    Ok(())
}

/// An index (negative: from the end) into a list of `len`, if it is in it.
fn index_of(i: i64, len: u64) -> Option<u64> {
    let i = if i < 0 { (len as i64).checked_add(i)? } else { i };
    (i >= 0 && (i as u64) < len).then_some(i as u64)
}

fn lindex<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let Some(l) = live else {
        r.null();
        return Ok(());
    };
    let Some(i) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Some(i) = index_of(i, l.len()) else {
        r.null();
        return Ok(());
    };
    let mut e = Vec::new();
    match &l.e {
        Elems::Small(v) => e.extend_from_slice(&v[i as usize]),
        Elems::Quick(ql) => cx.store.ql_get(ql, i, &mut e)?,
    }
    cx.reply_room(r, e.len() + 16)?;
    r.bulk(&e);
    Ok(())
}

fn lset<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let key = a.get(1);
    let Ok((_, live)) = load(cx, key, r)? else { return Ok(()) };
    let Some(l) = live else {
        r.error("ERR no such key");
        return Ok(());
    };
    let Some(i) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Some(i) = index_of(i, l.len()) else {
        r.error("ERR index out of range");
        return Ok(());
    };
    let value = a.get(3);
    match l.e {
        Elems::Small(mut v) => {
            v[i as usize] = value.to_vec();
            put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &v)?;
        }
        Elems::Quick(mut ql) => {
            let before = ql;
            let fill = fill(cx);
            cx.store.ql_set(&mut ql, i, value, fill)?;
            finish_quick(cx, &l.f, &before, &ql)?;
        }
    }
    cx.notify(LIST, "lset", key);
    r.ok();
    Ok(())
}

fn lrange<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (Some(start), Some(end)) = (int(a.get(2)), int(a.get(3))) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let Some((s, e)) = live.as_ref().and_then(|l| clip(start, end, l.len())) else {
        r.array(0);
        return Ok(());
    };
    let l = live.expect("a range of a list");
    let mut left = e - s + 1;
    r.array(left as usize);
    let limit = cx.output_limit;
    each(cx, &l, s, false, |x| {
        if r.buf.len().saturating_add(x.len() + 16) > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        r.bulk(x);
        left -= 1;
        Ok(left > 0)
    })
}

fn ltrim<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (Some(start), Some(end)) = (int(a.get(2)), int(a.get(3))) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let key = a.get(1);
    let Ok((_, live)) = load(cx, key, r)? else { return Ok(()) };
    let Some(l) = live else {
        r.ok();
        return Ok(());
    };
    let len = l.len();
    let (ltrim, rtrim) = match clip(start, end, len) {
        None => (len, 0),
        Some((s, e)) => (s, len - e - 1),
    };
    match l.e {
        Elems::Small(v) => {
            let kept = v[ltrim as usize..(len - rtrim) as usize].to_vec();
            if kept.len() as u64 != len {
                put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &kept)?;
            }
        }
        Elems::Quick(mut ql) => {
            let before = ql;
            let fill = fill(cx);
            cx.store.ql_del_range(&mut ql, 0, ltrim, fill)?;
            let n = ql.len;
            cx.store.ql_del_range(&mut ql, n - rtrim, rtrim, fill)?;
            finish_quick(cx, &l.f, &before, &ql)?;
        }
    }
    cx.notify(LIST, "ltrim", key);
    if ltrim + rtrim >= len {
        cx.notify(GENERIC, "del", key);
    }
    r.ok();
    Ok(())
}

fn lrem<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(count) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let key = a.get(1);
    let Ok((_, live)) = load(cx, key, r)? else { return Ok(()) };
    let Some(l) = live else {
        r.int(0);
        return Ok(());
    };
    let (e, max, from_tail) = (a.get(3), count.unsigned_abs(), count < 0);
    let len = l.len();
    let removed = match l.e {
        Elems::Small(v) => {
            let mut gone = vec![false; v.len()];
            let mut n = 0;
            let order: Box<dyn Iterator<Item = usize>> =
                if from_tail { Box::new((0..v.len()).rev()) } else { Box::new(0..v.len()) };
            for j in order {
                if max != 0 && n == max {
                    break;
                }
                if v[j] == e {
                    gone[j] = true;
                    n += 1;
                }
            }
            if n > 0 {
                let kept: Vec<Vec<u8>> =
                    v.into_iter().zip(gone).filter(|(_, g)| !g).map(|(x, _)| x).collect();
                put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &kept)?;
            }
            n
        }
        Elems::Quick(mut ql) => {
            let before = ql;
            let fill = fill(cx);
            let n = cx.store.ql_remove(&mut ql, e, max, from_tail, fill)?;
            finish_quick(cx, &l.f, &before, &ql)?;
            n
        }
    };
    if removed > 0 {
        cx.notify(LIST, "lrem", key);
        if removed as u64 == len {
            cx.notify(GENERIC, "del", key);
        }
    }
    r.int(removed as i64);
    Ok(())
}

fn linsert<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let after = match a.get(2) {
        w if is(w, "AFTER") => true,
        w if is(w, "BEFORE") => false,
        _ => {
            r.error(SYNTAX);
            return Ok(());
        }
    };
    let key = a.get(1);
    let Ok((_, live)) = load(cx, key, r)? else { return Ok(()) };
    let Some(l) = live else {
        r.int(0);
        return Ok(());
    };
    let (pivot, value) = (a.get(3), a.get(4));
    let mut at = None;
    let mut i = 0u64;
    each(cx, &l, 0, false, |x| {
        if x == pivot {
            at = Some(i);
            return Ok(false);
        }
        i += 1;
        Ok(true)
    })?;
    let Some(at) = at else {
        r.int(-1);
        return Ok(());
    };
    let pos = at + u64::from(after);
    let n = match l.e {
        Elems::Small(mut v) => {
            v.insert(pos as usize, value.to_vec());
            put_elems(cx, key, Some(&l.f), l.f.head.expire_ms, &v)?;
            v.len() as u64
        }
        Elems::Quick(mut ql) => {
            let before = ql;
            let fill = fill(cx);
            cx.store.ql_insert(&mut ql, pos, value, fill)?;
            finish_quick(cx, &l.f, &before, &ql)?;
            ql.len
        }
    };
    cx.notify(LIST, "linsert", key);
    r.int(n as i64);
    Ok(())
}

fn lpos<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0u64);
    let mut j = 3;
    while j < a.len() {
        let (o, more) = (a.get(j), j + 1 < a.len());
        if is(o, "RANK") && more {
            let Some(v) = int(a.get(j + 1)) else {
                r.error(NOT_INT);
                return Ok(());
            };
            if v == 0 {
                r.error(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use \
                     negative to start from the end of the list",
                );
                return Ok(());
            }
            rank = v;
        } else if is(o, "COUNT") && more {
            let Some(v) = positive(a.get(j + 1), "ERR COUNT can't be negative", r) else { return Ok(()) };
            count = Some(v);
        } else if is(o, "MAXLEN") && more {
            let Some(v) = positive(a.get(j + 1), "ERR MAXLEN can't be negative", r) else { return Ok(()) };
            maxlen = v;
        } else {
            r.error(SYNTAX);
            return Ok(());
        }
        j += 2;
    }
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let Some(l) = live else {
        match count {
            Some(_) => r.array(0),
            None => r.null(),
        }
        return Ok(());
    };
    let (reverse, rank) = (rank < 0, rank.unsigned_abs());
    let (e, len) = (a.get(2), l.len());
    let mut found = Vec::new();
    let (mut scanned, mut matches) = (0u64, 0u64);
    let want = match count {
        None => 1,
        Some(0) => u64::MAX,
        Some(n) => n,
    };
    let from = if reverse { len - 1 } else { 0 };
    each(cx, &l, from, reverse, |x| {
        if maxlen != 0 && scanned == maxlen {
            return Ok(false);
        }
        if x == e {
            matches += 1;
            if matches >= rank {
                found.push(if reverse { len - 1 - scanned } else { scanned });
                if found.len() as u64 == want {
                    return Ok(false);
                }
            }
        }
        scanned += 1;
        Ok(true)
    })?;
    match count {
        Some(_) => {
            r.array(found.len());
            for p in found {
                r.int(p as i64);
            }
        }
        None => match found.first() {
            Some(&p) => r.int(p as i64),
            None => r.null(),
        },
    }
    Ok(())
}

/// What LMOVE found at its source.
enum Moved {
    /// Answered: the element, or WRONGTYPE.
    Done,
    /// No list there (BLMOVE blocks).
    Missing,
}

/// LMOVE's work: pops from `src`'s head (`from_front`) or tail and pushes onto `dst`'s head
/// (`to_front`) or tail, answering the element.
fn lmove<M: Mem>(
    cx: &mut Cx<M>,
    src: &[u8],
    dst: &[u8],
    from_front: bool,
    to_front: bool,
    r: &mut Reply,
) -> Result<Moved, StoreError> {
    let Ok((_, live)) = load(cx, src, r)? else { return Ok(Moved::Done) };
    let Some(l) = live else { return Ok(Moved::Missing) };
    let value = if src == dst {
        // A rotation: the same list, its expiry kept.
        let e = match l.e {
            Elems::Small(mut v) => {
                let e = if from_front { v.remove(0) } else { v.pop().expect("a live list has elements") };
                if to_front {
                    v.insert(0, e.clone());
                } else {
                    v.push(e.clone());
                }
                put_elems(cx, src, Some(&l.f), l.f.head.expire_ms, &v)?;
                e
            }
            Elems::Quick(mut ql) => {
                let before = ql;
                let fill = fill(cx);
                let mut e = Vec::new();
                cx.store.ql_pop(&mut ql, from_front, &mut e)?;
                cx.store.ql_push(&mut ql, to_front, &e, fill)?;
                finish_quick(cx, &l.f, &before, &ql)?;
                e
            }
        };
        pushed(cx, src, to_front);
        popped(cx, src, from_front, false);
        e
    } else {
        let (_, d) = lookup(cx, dst)?;
        if d.is_some_and(|d| d.head.kind != KIND_LIST) {
            r.error(WRONGTYPE);
            return Ok(Moved::Done);
        }
        let emptied = l.len() == 1;
        let e = pop_one(cx, src, l, from_front)?;
        // The table may have changed: the destination is found again.
        let mut none = Vec::new();
        let mut quiet = Reply { buf: &mut none, proto: r.proto };
        let Ok((found, live)) = load(cx, dst, &mut quiet)? else {
            unreachable!("the destination's type was checked")
        };
        push_values(cx, dst, found.as_ref(), live, to_front, &[&e])?;
        // As Redis: the push's event, then the pop's.
        pushed(cx, dst, to_front);
        popped(cx, src, from_front, emptied);
        e
    };
    cx.reply_room(r, value.len() + 16)?;
    r.bulk(&value);
    Ok(Moved::Done)
}

fn lmove_cmd<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
    name: &str,
) -> Result<Outcome, StoreError> {
    let (from, to, timeout_at) = match name {
        "RPOPLPUSH" => (false, true, None),
        "BRPOPLPUSH" => (false, true, Some(3)),
        _ => {
            let Some(from) = side(a.get(3), r) else { return Ok(Outcome::Done) };
            let Some(to) = side(a.get(4), r) else { return Ok(Outcome::Done) };
            (from, to, (name == "BLMOVE").then_some(5))
        }
    };
    let deadline_ms = match timeout_at.map(|i| deadline(a.get(i), cx.now_ms)) {
        Some(Err(msg)) => {
            r.error(msg);
            return Ok(Outcome::Done);
        }
        Some(Ok(d)) => Some(d),
        None => None,
    };
    match lmove(cx, a.get(1), a.get(2), from, to, r)? {
        Moved::Done => Ok(Outcome::Done),
        Moved::Missing => match deadline_ms {
            Some(d) => Ok(block_or_null(s, [a.get(1)], KIND_LIST, d, Null::Bulk, r)),
            None => {
                r.null();
                Ok(Outcome::Done)
            }
        },
    }
}

/// LMPOP numkeys key... LEFT|RIGHT [COUNT n], and BLMPOP timeout numkeys ....
fn mpop<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
    block: bool,
) -> Result<Outcome, StoreError> {
    let at = if block { 2 } else { 1 };
    let numkeys = match int(a.get(at)) {
        Some(n) if n >= 1 => n as u64,
        _ => {
            r.error("ERR numkeys should be greater than 0");
            return Ok(Outcome::Done);
        }
    };
    let where_at = (at as u64).saturating_add(numkeys).saturating_add(1);
    if where_at >= a.len() as u64 {
        r.error(SYNTAX);
        return Ok(Outcome::Done);
    }
    let where_at = where_at as usize;
    let Some(front) = side(a.get(where_at), r) else { return Ok(Outcome::Done) };
    let mut count = None;
    let mut j = where_at + 1;
    while j < a.len() {
        if count.is_none() && is(a.get(j), "COUNT") && j + 1 < a.len() {
            match int(a.get(j + 1)) {
                Some(n) if n >= 1 => count = Some(n as u64),
                _ => {
                    r.error("ERR count should be greater than 0");
                    return Ok(Outcome::Done);
                }
            }
            j += 2;
        } else {
            r.error(SYNTAX);
            return Ok(Outcome::Done);
        }
    }
    let count = count.unwrap_or(1);
    let deadline_ms = if block {
        match deadline(a.get(1), cx.now_ms) {
            Ok(d) => d,
            Err(msg) => {
                r.error(msg);
                return Ok(Outcome::Done);
            }
        }
    } else {
        0
    };
    let keys = at + 1..where_at;
    for i in keys.clone() {
        let key = a.get(i);
        let Ok((_, live)) = load(cx, key, r)? else { return Ok(Outcome::Done) };
        if let Some(l) = live {
            let len = l.len();
            r.array(2);
            r.bulk(key);
            r.array(count.min(len) as usize);
            pop_into(cx, key, l, front, count, r)?;
            popped(cx, key, front, count >= len);
            // Its keys are not in its table entry (numkeys before them): touched here.
            cx.watches.touch(s.db, key);
            return Ok(Outcome::Done);
        }
    }
    if block {
        return Ok(block_or_null(s, keys.map(|i| a.get(i)), KIND_LIST, deadline_ms, Null::Array, r));
    }
    r.null_array();
    Ok(Outcome::Done)
}

/// BLPOP / BRPOP key... timeout.
fn bpop<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
    front: bool,
) -> Result<Outcome, StoreError> {
    let deadline_ms = match deadline(a.get(a.len() - 1), cx.now_ms) {
        Ok(d) => d,
        Err(msg) => {
            r.error(msg);
            return Ok(Outcome::Done);
        }
    };
    let keys = 1..a.len() - 1;
    for i in keys.clone() {
        let key = a.get(i);
        let Ok((_, live)) = load(cx, key, r)? else { return Ok(Outcome::Done) };
        if let Some(l) = live {
            let emptied = l.len() == 1;
            let e = pop_one(cx, key, l, front)?;
            popped(cx, key, front, emptied);
            // The key it pops only, as Redis.
            cx.watches.touch(s.db, key);
            cx.reply_room(r, key.len() + e.len() + 32)?;
            r.array(2);
            r.bulk(key);
            r.bulk(&e);
            return Ok(Outcome::Done);
        }
    }
    Ok(block_or_null(s, keys.map(|i| a.get(i)), KIND_LIST, deadline_ms, Null::Array, r))
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
        "LPUSH" | "RPUSH" | "LPUSHX" | "RPUSHX" => {
            push(cx, a, r, spec.name.starts_with('L'), spec.name.ends_with('X'))?
        }
        "LPOP" | "RPOP" => pop(cx, a, r, spec.name == "LPOP")?,
        "LLEN" => llen(cx, a, r)?,
        "LINDEX" => lindex(cx, a, r)?,
        "LSET" => lset(cx, a, r)?,
        "LRANGE" => lrange(cx, a, r)?,
        "LTRIM" => ltrim(cx, a, r)?,
        "LREM" => lrem(cx, a, r)?,
        "LINSERT" => linsert(cx, a, r)?,
        "LPOS" => lpos(cx, a, r)?,
        "LMOVE" | "RPOPLPUSH" | "BLMOVE" | "BRPOPLPUSH" => return lmove_cmd(cx, s, a, r, spec.name),
        "LMPOP" => return mpop(cx, s, a, r, false),
        "BLMPOP" => return mpop(cx, s, a, r, true),
        "BLPOP" | "BRPOP" => return bpop(cx, s, a, r, spec.name == "BLPOP"),
        other => unreachable!("{other} is not a lists command"),
    }
    Ok(Outcome::Done)
}
