//! Hash commands: HSET HMSET HSETNX HGET HMGET HDEL HGETALL HKEYS HVALS HLEN HEXISTS HINCRBY.
//! A hash is one entry whose value is its field list (`store::hash_blob`); a change writes the
//! list again.

use super::args::{int, Args};
use super::strings::lookup;
use super::{Cx, NOT_INT, WRONGTYPE};
use crate::resp::{itoa, Reply};
use crate::store::{hash_blob, Found, Mem, StoreError, KIND_HASH};

/// The live hash at `key`: `Err(())` (after replying WRONGTYPE) if it holds a string; the
/// entry found (live or not) and the field list.
#[allow(clippy::type_complexity)]
fn load<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    r: &mut Reply,
) -> Result<Result<(Option<Found>, Option<(Found, Vec<u8>)>), ()>, StoreError> {
    let (found, live) = lookup(cx, key)?;
    match live {
        None => Ok(Ok((found, None))),
        Some(f) if f.head.kind != KIND_HASH => {
            r.error(WRONGTYPE);
            Ok(Err(()))
        }
        Some(f) => {
            let mut blob = Vec::new();
            cx.store.value_into(&f, &mut blob)?;
            Ok(Ok((found, Some((f, blob)))))
        }
    }
}

fn store_blob<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    blob: &[u8],
    found: Option<&Found>,
    live: Option<&Found>,
) -> Result<(), StoreError> {
    let ttl = live.map_or(0, |f| f.head.expire_ms);
    cx.store.put(key, KIND_HASH, ttl, &[blob], 0, found)?;
    Ok(())
}

pub(super) fn hset<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, legacy: bool) -> Result<(), StoreError> {
    if !a.len().is_multiple_of(2) {
        let name = if legacy { "hmset" } else { "hset" };
        r.error(&format!("ERR wrong number of arguments for '{name}' command"));
        return Ok(());
    }
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let pairs: Vec<(&[u8], &[u8])> = (2..a.len()).step_by(2).map(|i| (a.get(i), a.get(i + 1))).collect();
    let (blob, added) = hash_blob::set(live.as_ref().map(|l| &l.1[..]), &pairs)?;
    store_blob(cx, a.get(1), &blob, found.as_ref(), live.as_ref().map(|l| &l.0))?;
    if legacy {
        r.ok();
    } else {
        r.int(added as i64);
    }
    Ok(())
}

pub(super) fn hsetnx<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    if let Some((_, blob)) = &live {
        if hash_blob::get(blob, a.get(2))?.is_some() {
            r.int(0);
            return Ok(());
        }
    }
    let (blob, _) = hash_blob::set(live.as_ref().map(|l| &l.1[..]), &[(a.get(2), a.get(3))])?;
    store_blob(cx, a.get(1), &blob, found.as_ref(), live.as_ref().map(|l| &l.0))?;
    r.int(1);
    Ok(())
}

pub(super) fn hget<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    match live.as_ref().map(|(_, b)| hash_blob::get(b, a.get(2))).transpose()?.flatten() {
        Some(v) => {
            cx.reply_room(r, v.len() + 16)?;
            r.bulk(v)
        }
        None => r.null(),
    }
    Ok(())
}

pub(super) fn hmget<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.array(a.len() - 2);
    for f in a.from(2) {
        match live.as_ref().map(|(_, b)| hash_blob::get(b, f)).transpose()?.flatten() {
            Some(v) => {
                cx.reply_room(r, v.len() + 16)?;
                r.bulk(v)
            }
            None => r.null(),
        }
    }
    Ok(())
}

pub(super) fn hdel<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((found, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let Some((f, blob)) = live else {
        r.int(0);
        return Ok(());
    };
    let fields: Vec<&[u8]> = a.from(2).collect();
    let (new, removed) = hash_blob::delete(&blob, &fields)?;
    if removed > 0 {
        if hash_blob::count(&new) == 0 {
            cx.store.remove(&f)?;
        } else {
            store_blob(cx, a.get(1), &new, found.as_ref(), Some(&f))?;
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
    let blob = live.map(|l| l.1).unwrap_or_default();
    let n = hash_blob::count(&blob) as usize;
    match which {
        "HGETALL" => r.map(n),
        _ => r.array(n),
    }
    if n == 0 {
        return Ok(());
    }
    cx.reply_room(r, blob.len() + 32 * n)?;
    for p in hash_blob::pairs(&blob)? {
        let (f, v) = p?;
        if which != "HVALS" {
            r.bulk(f);
        }
        if which != "HKEYS" {
            r.bulk(v);
        }
    }
    Ok(())
}

pub(super) fn hlen<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    r.int(live.map_or(0, |l| i64::from(hash_blob::count(&l.1))));
    Ok(())
}

pub(super) fn hexists<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Ok((_, live)) = load(cx, a.get(1), r)? else { return Ok(()) };
    let there = match &live {
        Some((_, b)) => hash_blob::get(b, a.get(2))?.is_some(),
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
    let cur = match live.as_ref().map(|(_, b)| hash_blob::get(b, a.get(2))).transpose()?.flatten() {
        None => 0,
        Some(v) => match int(v) {
            Some(n) => n,
            None => {
                r.error("ERR hash value is not an integer");
                return Ok(());
            }
        },
    };
    let Some(new) = cur.checked_add(by) else {
        r.error("ERR increment or decrement would overflow");
        return Ok(());
    };
    let mut tmp = [0u8; 20];
    let digits = itoa(new, &mut tmp);
    let (blob, _) = hash_blob::set(live.as_ref().map(|l| &l.1[..]), &[(a.get(2), digits)])?;
    store_blob(cx, a.get(1), &blob, found.as_ref(), live.as_ref().map(|l| &l.0))?;
    r.int(new);
    Ok(())
}
