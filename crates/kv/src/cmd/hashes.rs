//! Hash commands: HSET HMSET HSETNX HGET HMGET HDEL HGETALL HKEYS HVALS HLEN HEXISTS HINCRBY
//! HINCRBYFLOAT HSTRLEN HRANDFIELD HSCAN.
//!
//! A hash is one entry. A small one (at most `hash-max-listpack-entries` fields, none of
//! them or their values longer than `hash-max-listpack-value` bytes, as Redis's listpack
//! encoding) keeps its fields in the entry's value (`store::hash_blob`), written again on every
//! change; a larger one keeps them in a tree (`store::tree`), whose handle is the value, so that
//! a change costs O(fields changed · log n) whatever the hash's size. A hash moves to a tree when
//! a change takes it past either limit, and stays one.

use super::args::{int, is, Args};
use super::coll_scan;
use super::notify::{GENERIC, HASH};
use super::rand;
use super::sets;
use super::spec::{spec, Group, Spec, ONE, R, RF, WF};
use super::strings::long_double::LongDouble;
use super::strings::lookup;
use super::Encodings;
use super::{Cx, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::{itoa, Proto, Reply};
use crate::store::{hash_blob, Found, Mem, StoreError, Tree, ENC_TREE, KIND_HASH};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("HDEL", -3, WF, ONE, Group::Hashes),
    spec("HEXISTS", 3, RF, ONE, Group::Hashes),
    spec("HGET", 3, RF, ONE, Group::Hashes),
    spec("HGETALL", 2, R, ONE, Group::Hashes),
    spec("HINCRBY", 4, WF, ONE, Group::Hashes),
    spec("HINCRBYFLOAT", 4, WF, ONE, Group::Hashes),
    spec("HKEYS", 2, R, ONE, Group::Hashes),
    spec("HLEN", 2, RF, ONE, Group::Hashes),
    spec("HMGET", -3, RF, ONE, Group::Hashes),
    spec("HMSET", -4, WF, ONE, Group::Hashes),
    spec("HRANDFIELD", -2, R, ONE, Group::Hashes),
    spec("HSCAN", -3, R, ONE, Group::Hashes),
    spec("HSET", -4, WF, ONE, Group::Hashes),
    spec("HSETNX", 4, WF, ONE, Group::Hashes),
    spec("HSTRLEN", 3, RF, ONE, Group::Hashes),
    spec("HVALS", 2, R, ONE, Group::Hashes),
];

/// A live hash's fields, as its entry holds them.
enum Fields {
    Blob(Vec<u8>),
    Tree(Tree),
}

/// The live hash at `key`: `Err(())` (after replying WRONGTYPE) if it holds another type; the
/// entry found (live or not) and, if live, the hash.
#[allow(clippy::type_complexity)]
fn load<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    r: &mut Reply,
) -> Result<Result<(Option<Found>, Option<(Found, Fields)>), ()>, StoreError> {
    let (found, live) = lookup(cx, key)?;
    match live {
        None => Ok(Ok((found, None))),
        Some(f) if f.head.kind != KIND_HASH => {
            r.error(WRONGTYPE);
            Ok(Err(()))
        }
        Some(f) => {
            let fields = match cx.store.tree_of(&f)? {
                Some(t) => Fields::Tree(t),
                None => {
                    let mut blob = Vec::new();
                    cx.store.value_into(&f, &mut blob)?;
                    Fields::Blob(blob)
                }
            };
            Ok(Ok((found, Some((f, fields)))))
        }
    }
}

/// The value of `field` appended to `out`; false if there is none.
fn get_into<M: Mem>(cx: &Cx<M>, h: &Fields, field: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
    match h {
        Fields::Blob(b) => Ok(hash_blob::get(b, field)?.map(|v| out.extend_from_slice(v)).is_some()),
        Fields::Tree(t) => cx.store.tree_get(t, field, out),
    }
}

/// The value of `field` of the live hash entry `f` appended to `out`; false if there is none
/// (SORT's `key->field` patterns).
pub(super) fn field_of<M: Mem>(
    cx: &Cx<M>,
    f: &Found,
    field: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool, StoreError> {
    match cx.store.tree_of(f)? {
        Some(t) => cx.store.tree_get(&t, field, out),
        None => {
            let mut blob = Vec::new();
            cx.store.value_into(f, &mut blob)?;
            Ok(hash_blob::get(&blob, field)?.map(|v| out.extend_from_slice(v)).is_some())
        }
    }
}

/// Whether a blob of `count` fields, with these pairs, stays within the small encoding.
fn fits_blob(enc: &Encodings, count: usize, pairs: impl Iterator<Item = usize>) -> bool {
    count <= enc.hash_max_entries && pairs.into_iter().all(|n| n <= enc.hash_max_value)
}

/// Sets `pairs` (a later one of the same field wins) in the hash at `key` (`live` it, if it
/// exists); returns how many fields were added.
fn set_fields<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    found: Option<&Found>,
    live: Option<(Found, Fields)>,
    pairs: &[(&[u8], &[u8])],
) -> Result<usize, StoreError> {
    let enc = cx.settings.encodings;
    match live {
        Some((mut f, Fields::Tree(mut t))) => {
            let before = t;
            let mut added = 0;
            for (field, value) in pairs {
                added += usize::from(cx.store.tree_set(&mut t, field, value)?);
            }
            if t != before {
                cx.store.set_tree(&mut f, &t)?;
            }
            Ok(added)
        }
        live => {
            let (entry, blob) = match live {
                Some((f, Fields::Blob(b))) => (Some(f), Some(b)),
                _ => (None, None),
            };
            let ttl = entry.map_or(0, |f| f.head.expire_ms);
            let (new, added) = hash_blob::set(blob.as_deref(), pairs)?;
            // As Redis 7.0 (hashTypeTryConversion), a field or value given past
            // hash-max-listpack-value makes a tree even if a later pair of the same command
            // replaces it.
            let small = pairs.iter().all(|(f, v)| f.len().max(v.len()) <= enc.hash_max_value)
                && fits_blob(
                    &enc,
                    hash_blob::count(&new) as usize,
                    hash_blob::pairs(&new)?.map(|p| p.map_or(usize::MAX, |(f, v)| f.len().max(v.len()))),
                );
            if small {
                cx.store.put(key, KIND_HASH, ttl, &[&new], 0, found)?;
            } else {
                // Past the small encoding's limits: into a tree, for good.
                let mut t = cx.store.tree_new()?;
                for p in hash_blob::pairs(&new)? {
                    let (field, value) = p?;
                    cx.store.tree_set(&mut t, field, value)?;
                }
                cx.store.put_encoded(key, KIND_HASH, ENC_TREE, ttl, &[&t.encode()], 0, found)?;
            }
            Ok(added)
        }
    }
}

pub(super) fn hset<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, legacy: bool) -> Result<(), StoreError> {
    if !a.len().is_multiple_of(2) {
        let name = if legacy { "hmset" } else { "hset" };
        r.error(&format!("ERR wrong number of arguments for '{name}' command"));
        return Ok(());
    }
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let pairs: Vec<(&[u8], &[u8])> = (2..a.len()).step_by(2).map(|i| (a.get(i), a.get(i + 1))).collect();
    let added = set_fields(cx, a.get(1), found.as_ref(), live, &pairs)?;
    cx.notify(HASH, "hset", a.get(1));
    if legacy {
        r.ok();
    } else {
        r.int(added as i64);
    }
    Ok(())
}

pub(super) fn hsetnx<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    if let Some((_, h)) = &live {
        if get_into(cx, h, a.get(2), &mut Vec::new())? {
            r.int(0);
            return Ok(());
        }
    }
    set_fields(cx, a.get(1), found.as_ref(), live, &[(a.get(2), a.get(3))])?;
    cx.notify(HASH, "hset", a.get(1));
    r.int(1);
    Ok(())
}

/// Appends the value of `field` as a bulk string, or a null.
fn reply_field<M: Mem>(
    cx: &Cx<M>,
    h: Option<&Fields>,
    field: &[u8],
    r: &mut Reply,
) -> Result<(), StoreError> {
    let mut v = Vec::new();
    match h {
        Some(h) if get_into(cx, h, field, &mut v)? => {
            cx.reply_room(r, v.len() + 16)?;
            r.bulk(&v);
        }
        _ => r.null(),
    }
    Ok(())
}

pub(super) fn hget<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    reply_field(cx, live.as_ref().map(|l| &l.1), a.get(2), r)
}

pub(super) fn hmget<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.array(a.len() - 2);
    for f in a.from(2) {
        reply_field(cx, live.as_ref().map(|l| &l.1), f, r)?;
    }
    Ok(())
}

pub(super) fn hdel<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let fields: Vec<&[u8]> = a.from(2).collect();
    let mut emptied = false;
    let removed = match live {
        None => 0,
        Some((f, Fields::Blob(blob))) => {
            let (new, removed) = hash_blob::delete(&blob, &fields)?;
            if removed > 0 {
                if hash_blob::count(&new) == 0 {
                    cx.store.remove(&f)?;
                    emptied = true;
                } else {
                    cx.store.put(a.get(1), KIND_HASH, f.head.expire_ms, &[&new], 0, found.as_ref())?;
                }
            }
            removed
        }
        Some((mut f, Fields::Tree(mut t))) => {
            let mut removed = 0;
            for field in fields {
                removed += usize::from(cx.store.tree_remove(&mut t, field)?);
            }
            if t.len == 0 {
                // The last field's removal removes the hash (and frees its tree).
                cx.store.set_tree(&mut f, &t)?;
                cx.store.remove(&f)?;
                emptied = true;
            } else if removed > 0 {
                cx.store.set_tree(&mut f, &t)?;
            }
            removed
        }
    };
    if removed > 0 {
        cx.notify(HASH, "hdel", a.get(1));
        if emptied {
            cx.notify(GENERIC, "del", a.get(1));
        }
    }
    r.int(removed as i64);
    Ok(())
}

pub(super) fn hgetall<M: Mem>(
    cx: &mut Cx<M>,
    a: &Args,
    r: &mut Reply,
    which: &str,
) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let n = live.as_ref().map_or(0, |(_, h)| match h {
        Fields::Blob(b) => hash_blob::count(b) as usize,
        Fields::Tree(t) => t.len as usize,
    });
    match which {
        "HGETALL" => r.map(n),
        _ => r.array(n),
    }
    let Some((_, h)) = live else { return Ok(()) };
    let limit = cx.output_limit;
    let emit = |r: &mut Reply, f: &[u8], v: &[u8]| -> Result<(), StoreError> {
        if r.buf.len().saturating_add(f.len() + v.len() + 32) > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        if which != "HVALS" {
            r.bulk(f);
        }
        if which != "HKEYS" {
            r.bulk(v);
        }
        Ok(())
    };
    match h {
        Fields::Blob(blob) => {
            for p in hash_blob::pairs(&blob)? {
                let (f, v) = p?;
                emit(r, f, v)?;
            }
        }
        Fields::Tree(t) => cx.store.tree_each(&t, |f, v| emit(r, f, v))?,
    }
    Ok(())
}

pub(super) fn hlen<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.int(live.map_or(0, |(_, h)| match h {
        Fields::Blob(b) => i64::from(hash_blob::count(&b)),
        Fields::Tree(t) => t.len as i64,
    }));
    Ok(())
}

pub(super) fn hexists<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let there = match &live {
        Some((_, h)) => get_into(cx, h, a.get(2), &mut Vec::new())?,
        None => false,
    };
    r.int(i64::from(there));
    Ok(())
}

pub(super) fn hincrby<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(by) = int(a.get(3)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let mut cur = Vec::new();
    let had = match &live {
        Some((_, h)) => get_into(cx, h, a.get(2), &mut cur)?,
        None => false,
    };
    let cur = if had {
        match int(&cur) {
            Some(n) => n,
            None => {
                r.error("ERR hash value is not an integer");
                return Ok(());
            }
        }
    } else {
        0
    };
    let Some(new) = cur.checked_add(by) else {
        r.error("ERR increment or decrement would overflow");
        return Ok(());
    };
    let mut tmp = [0u8; 20];
    let digits = itoa(new, &mut tmp);
    set_fields(cx, a.get(1), found.as_ref(), live, &[(a.get(2), digits)])?;
    cx.notify(HASH, "hincrby", a.get(1));
    r.int(new);
    Ok(())
}

pub(super) fn hstrlen<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let mut v = Vec::new();
    if let Some((_, h)) = &live {
        get_into(cx, h, a.get(2), &mut v)?;
    }
    r.int(v.len() as i64);
    Ok(())
}

/// HINCRBYFLOAT: Redis's long double arithmetic and formatting (`strings/long_double.rs`).
pub(super) fn hincrbyfloat<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(by) = LongDouble::parse(a.get(3)) else {
        r.error("ERR value is not a valid float");
        return Ok(());
    };
    if !by.is_finite() {
        r.error("ERR value is NaN or Infinity");
        return Ok(());
    }
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let mut cur = Vec::new();
    let had = match &live {
        Some((_, h)) => get_into(cx, h, a.get(2), &mut cur)?,
        None => false,
    };
    let cur = if had {
        match LongDouble::parse(&cur) {
            Some(v) => v,
            None => {
                r.error("ERR hash value is not a float");
                return Ok(());
            }
        }
    } else {
        LongDouble::ZERO
    };
    let new = cur.add(by);
    if !new.is_finite() {
        r.error("ERR increment would produce NaN or Infinity");
        return Ok(());
    }
    let mut text = Vec::new();
    new.write_human(&mut text);
    set_fields(cx, a.get(1), found.as_ref(), live, &[(a.get(2), &text)])?;
    r.bulk(&text);
    Ok(())
}

/// Field `i` of a hash (and its value) into `k` and `v` (cleared first).
fn nth_field<M: Mem>(
    cx: &Cx<M>,
    h: &Fields,
    i: u64,
    k: &mut Vec<u8>,
    v: &mut Vec<u8>,
) -> Result<(), StoreError> {
    k.clear();
    v.clear();
    match h {
        Fields::Blob(b) => {
            let (f, val) = hash_blob::pairs(b)?
                .nth(i as usize)
                .ok_or_else(|| StoreError::Corrupt(format!("a hash value has no field {i}")))??;
            k.extend_from_slice(f);
            v.extend_from_slice(val);
            Ok(())
        }
        Fields::Tree(t) => cx.store.tree_nth(t, i, k, v),
    }
}

fn fields_len(h: &Fields) -> u64 {
    match h {
        Fields::Blob(b) => u64::from(hash_blob::count(b)),
        Fields::Tree(t) => t.len,
    }
}

/// HRANDFIELD key [count [WITHVALUES]]: fields drawn uniformly; a negative count may repeat
/// them, a positive one gives distinct fields (all of them when it is the hash's size or more).
pub(super) fn hrandfield<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut count = None;
    let mut with_values = false;
    if a.len() >= 3 {
        let Some(l) = sets::ranged(a.get(2), -i64::MAX, i64::MAX, None, r) else { return Ok(()) };
        if a.len() > 4 || (a.len() == 4 && !is(a.get(3), "WITHVALUES")) {
            r.error(SYNTAX);
            return Ok(());
        }
        if a.len() == 4 {
            with_values = true;
            if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
                r.error("ERR value is out of range");
                return Ok(());
            }
        }
        count = Some(l);
    }
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let (mut k, mut v) = (Vec::new(), Vec::new());
    let Some(l) = count else {
        match live {
            None => r.null(),
            Some((_, h)) => {
                nth_field(cx, &h, rand::below(fields_len(&h)), &mut k, &mut v)?;
                cx.reply_room(r, k.len() + 16)?;
                r.bulk(&k);
            }
        }
        return Ok(());
    };
    let Some((_, h)) = live else {
        r.array(0);
        return Ok(());
    };
    let (count, unique) = (l.unsigned_abs(), l >= 0);
    if count == 0 {
        r.array(0);
        return Ok(());
    }
    let size = fields_len(&h);
    let resp3 = r.proto == Proto::Resp3;
    let header = |r: &mut Reply, n: u64| {
        r.array(if with_values && !resp3 { 2 * n as usize } else { n as usize });
    };
    let emit = |r: &mut Reply, k: &[u8], v: &[u8]| -> Result<(), StoreError> {
        cx.reply_room(r, k.len() + v.len() + 32)?;
        if with_values && resp3 {
            r.array(2);
        }
        r.bulk(k);
        if with_values {
            r.bulk(v);
        }
        Ok(())
    };
    let picks: Vec<u64> = if !unique || count == 1 {
        // Each field takes at least 6 bytes of reply: a count the output limit cannot hold is
        // refused before any work.
        let per = if with_values { 12 } else { 6 };
        cx.reply_room(r, usize::try_from(count.saturating_mul(per)).unwrap_or(usize::MAX))?;
        header(r, count);
        for _ in 0..count {
            nth_field(cx, &h, rand::below(size), &mut k, &mut v)?;
            emit(r, &k, &v)?;
        }
        return Ok(());
    } else if count >= size {
        (0..size).collect()
    } else {
        rand::distinct(count, size)
    };
    header(r, picks.len() as u64);
    match &h {
        Fields::Blob(b) if picks.len() as u64 == size => {
            for p in hash_blob::pairs(b)? {
                let (k, v) = p?;
                emit(r, k, v)?;
            }
        }
        Fields::Tree(t) if picks.len() as u64 == size => cx.store.tree_each(t, |k, v| emit(r, k, v))?,
        _ => {
            for i in picks {
                nth_field(cx, &h, i, &mut k, &mut v)?;
                emit(r, &k, &v)?;
            }
        }
    }
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]: a hash held in its entry whole, with cursor
/// 0; a tree by the hash of its next field (`coll_scan.rs`).
pub(super) fn hscan<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(cursor) = coll_scan::cursor(a.get(2)) else {
        r.error("ERR invalid cursor");
        return Ok(());
    };
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let Some((_, h)) = live else {
        r.buf.extend_from_slice(b"*2\r\n$1\r\n0\r\n*0\r\n");
        return Ok(());
    };
    let Some(o) = coll_scan::options(a, 3, r) else { return Ok(()) };
    let mut items = Vec::new();
    let mut ir = Reply { buf: &mut items, proto: r.proto };
    let (next, n) = match &h {
        Fields::Tree(t) => coll_scan::tree_scan(cx, t, cursor, &o, true, &mut ir)?,
        Fields::Blob(b) => {
            let mut n = 0;
            for p in hash_blob::pairs(b)? {
                let (f, v) = p?;
                if o.wants(f) {
                    cx.reply_room(&ir, f.len() + v.len() + 32)?;
                    ir.bulk(f);
                    ir.bulk(v);
                    n += 2;
                }
            }
            (0, n)
        }
    };
    coll_scan::reply(cx, r, next, n, &items)
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match spec.name {
        "HSET" | "HMSET" => hset(cx, a, r, spec.name == "HMSET")?,
        "HSETNX" => hsetnx(cx, a, r)?,
        "HGET" => hget(cx, a, r)?,
        "HMGET" => hmget(cx, a, r)?,
        "HDEL" => hdel(cx, a, r)?,
        "HGETALL" | "HKEYS" | "HVALS" => hgetall(cx, a, r, spec.name)?,
        "HLEN" => hlen(cx, a, r)?,
        "HEXISTS" => hexists(cx, a, r)?,
        "HINCRBY" => hincrby(cx, a, r)?,
        "HINCRBYFLOAT" => hincrbyfloat(cx, a, r)?,
        "HSTRLEN" => hstrlen(cx, a, r)?,
        "HRANDFIELD" => hrandfield(cx, a, r)?,
        "HSCAN" => hscan(cx, a, r)?,
        other => unreachable!("{other} is not a hashes command"),
    }
    Ok(())
}

#[cfg(test)]
#[path = "hashes_tests.rs"]
mod tests;
