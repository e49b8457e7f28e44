//! Hash commands: HSET HMSET HSETNX HGET HMGET HDEL HGETALL HKEYS HVALS HLEN HEXISTS HINCRBY.
//!
//! A hash is one entry. A small one (at most `hash-max-listpack-entries` fields, none of
//! them or their values longer than `hash-max-listpack-value` bytes, as Redis's listpack
//! encoding) keeps its fields in the entry's value (`store::hash_blob`), written again on every
//! change; a larger one keeps them in a tree (`store::tree`), whose handle is the value, so that
//! a change costs O(fields changed · log n) whatever the hash's size. A hash moves to a tree when
//! a change takes it past either limit, and stays one.

use super::args::{int, Args};
use super::spec::{spec, Group, Spec, ONE, R, RF, WF};
use super::strings::lookup;
use super::Encodings;
use super::{Cx, NOT_INT, WRONGTYPE};
use crate::resp::{itoa, Reply};
use crate::store::{hash_blob, Found, Mem, StoreError, Tree, ENC_TREE, KIND_HASH};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("HDEL", -3, WF, ONE, Group::Hashes),
    spec("HEXISTS", 3, RF, ONE, Group::Hashes),
    spec("HGET", 3, RF, ONE, Group::Hashes),
    spec("HGETALL", 2, R, ONE, Group::Hashes),
    spec("HINCRBY", 4, WF, ONE, Group::Hashes),
    spec("HKEYS", 2, R, ONE, Group::Hashes),
    spec("HLEN", 2, RF, ONE, Group::Hashes),
    spec("HMGET", -3, RF, ONE, Group::Hashes),
    spec("HMSET", -4, WF, ONE, Group::Hashes),
    spec("HSET", -4, WF, ONE, Group::Hashes),
    spec("HSETNX", 4, WF, ONE, Group::Hashes),
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
            let small = fits_blob(
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
    let removed = match live {
        None => 0,
        Some((f, Fields::Blob(blob))) => {
            let (new, removed) = hash_blob::delete(&blob, &fields)?;
            if removed > 0 {
                if hash_blob::count(&new) == 0 {
                    cx.store.remove(&f)?;
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
            } else if removed > 0 {
                cx.store.set_tree(&mut f, &t)?;
            }
            removed
        }
    };
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
    r.int(new);
    Ok(())
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
        other => unreachable!("{other} is not a hashes command"),
    }
    Ok(())
}
