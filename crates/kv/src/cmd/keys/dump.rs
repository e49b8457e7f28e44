//! DUMP key and RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]: a value in
//! Redis's serialization (`cmd::rdb`), so that it moves between Redis and mojim kv both ways.
//! A kind adds its arm to [`dump_value`] and [`restore_value`] (and its (de)serializer to
//! `rdb`); the others are refused by name.

use super::super::args::{int, is, Args};
use super::super::notify::GENERIC;
use super::super::rdb::{self, Limits, Object};
use super::super::set_value::{self, SetVal};
use super::super::strings::max_string;
use super::super::{Cx, Encodings, NOT_INT, SYNTAX};
use crate::resp::Reply;
use crate::store::intset::IntSet;
use crate::store::{
    hash_blob, kind_name, zset_blob, Found, Mem, StoreError, ENC_PLAIN, ENC_TREE, ENC_ZSET_INDEX, KIND_HASH,
    KIND_LIST, KIND_SET, KIND_STRING, KIND_ZSET,
};

/// The payload of the live entry `f` (its body then the trailer) into `out`; false for a kind
/// that has no serializer yet.
fn dump_value<M: Mem>(cx: &Cx<M>, f: &Found, out: &mut Vec<u8>) -> Result<bool, StoreError> {
    let limit = cx.output_limit;
    let room = |out: &Vec<u8>| {
        if out.len() > limit {
            return Err(StoreError::OutputLimit(limit));
        }
        Ok(())
    };
    match (f.head.kind, f.head.encoding) {
        (KIND_STRING, _) => {
            let mut v = Vec::new();
            cx.store.value_into(f, &mut v)?;
            rdb::string::encode(&v, out);
        }
        (KIND_HASH, ENC_PLAIN) => {
            let mut blob = Vec::new();
            cx.store.value_into(f, &mut blob)?;
            let pairs = hash_blob::pairs(&blob)?.collect::<Result<Vec<_>, _>>()?;
            rdb::hash::encode_listpack(pairs, out);
        }
        (KIND_HASH, ENC_TREE) => {
            let t = cx.store.tree_of(f)?.expect("a hash of the tree encoding holds a tree");
            rdb::hash::encode_table_head(t.len, out);
            cx.store.tree_each(&t, |k, v| {
                rdb::hash::encode_pair(k, v, out);
                room(out)
            })?;
        }
        (KIND_ZSET, ENC_PLAIN) => {
            let mut blob = Vec::new();
            cx.store.value_into(f, &mut blob)?;
            let items = zset_blob::decode(&blob)?;
            rdb::zset::encode_listpack(items.iter().map(|(s, m)| (*s, m.as_slice())), out);
        }
        (KIND_ZSET, ENC_ZSET_INDEX) => {
            let z = cx.store.zindex_of(f)?.expect("a sorted set of the index encoding holds an index");
            rdb::zset::encode_head(z.len(), out);
            // Greatest first, as Redis writes a skiplist.
            cx.store.zindex_each(&z, true, |s, m| {
                rdb::zset::encode_member(m, s, out);
                room(out).map(|()| true)
            })?;
        }
        (KIND_LIST, _) => {
            let elems = super::super::lists::elements(cx, f, limit)?;
            rdb::list::encode(&elems, out);
        }
        // An intset as Redis 7.0's intset (type 11); any other set as a table (type 2), Redis
        // 7.0 having no listpack sets.
        (KIND_SET, _) => match set_value::read(cx, f)? {
            SetVal::Ints(b) => {
                let s = IntSet::parse(&b)?;
                rdb::set::encode_intset(s.width(), s.iter(), out);
            }
            v => {
                rdb::set::encode_table_head(v.len(), out);
                v.each(cx, |m| {
                    rdb::set::encode_member(m, out);
                    room(out).map(|()| true)
                })?;
            }
        },
        _ => return Ok(false),
    }
    room(out)?;
    rdb::seal(out);
    Ok(true)
}

/// The `DUMP` payload of the live entry `f`; `None` for a kind that has no serializer yet.
pub(in crate::cmd) fn dump_payload<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<Option<Vec<u8>>, StoreError> {
    let mut payload = Vec::new();
    Ok(dump_value(cx, f, &mut payload)?.then_some(payload))
}

pub(in crate::cmd) fn dump<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(f) = cx.store.get(a.get(1), cx.now_ms)? else {
        r.null();
        return Ok(());
    };
    let Some(payload) = dump_payload(cx, &f)? else {
        r.error(&format!(
            "ERR mojim kv cannot DUMP a {} yet: strings, hashes, lists, sets and sorted sets only",
            kind_name(f.head.kind)
        ));
        return Ok(());
    };
    cx.reply_room(r, payload.len() + 16)?;
    r.bulk(&payload);
    Ok(())
}

/// Stores a decoded value at `key` (replacing `old`), in the encoding its size calls for.
fn restore_value<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    object: Object,
    expire_ms: u64,
    old: Option<&Found>,
) -> Result<(), StoreError> {
    match object {
        // As Redis, a restored string is encoded as SET would encode it.
        Object::String(v) => {
            cx.store.put(key, KIND_STRING, expire_ms, &[&v], 0, old)?;
        }
        Object::Hash(pairs) => {
            let enc: Encodings = cx.settings.encodings;
            let small = pairs.len() <= enc.hash_max_entries
                && pairs.iter().all(|(f, v)| f.len().max(v.len()) <= enc.hash_max_value);
            if small {
                let refs: Vec<(&[u8], &[u8])> =
                    pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())).collect();
                let (blob, _) = hash_blob::set(None, &refs)?;
                cx.store.put(key, KIND_HASH, expire_ms, &[&blob], 0, old)?;
            } else {
                let mut t = cx.store.tree_new()?;
                for (f, v) in &pairs {
                    cx.store.tree_set(&mut t, f, v)?;
                }
                cx.store.put_encoded(key, KIND_HASH, ENC_TREE, expire_ms, &[&t.encode()], 0, old)?;
            }
        }
        Object::Zset(items) => super::super::zsets::store_members(cx, key, &items, expire_ms)?,
        Object::List(elems) => super::super::lists::store_list(cx, key, old, expire_ms, &elems)?,
        // In the encoding a new set of those members gets (as Redis 7.0 loads a set).
        Object::Set(members) => {
            let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
            set_value::restore(cx, key, old, expire_ms, &refs)?;
        }
    }
    Ok(())
}

/// RESTORE's options after the payload: REPLACE and ABSTTL; IDLETIME and FREQ are checked and,
/// as in a Redis without an LRU or LFU eviction policy (mojim kv evicts nothing), have no
/// effect. `Err`: the error to answer.
fn restore_options(a: &Args) -> Result<(bool, bool), &'static str> {
    let (mut replace, mut absttl, mut idle, mut freq) = (false, false, false, false);
    let mut i = 4;
    while i < a.len() {
        let o = a.get(i);
        let more = i + 1 < a.len();
        if is(o, "REPLACE") {
            replace = true;
        } else if is(o, "ABSTTL") {
            absttl = true;
        } else if is(o, "IDLETIME") && more && !freq {
            match int(a.get(i + 1)) {
                None => return Err(NOT_INT),
                Some(n) if n < 0 => return Err("ERR Invalid IDLETIME value, must be >= 0"),
                Some(_) => idle = true,
            }
            i += 1;
        } else if is(o, "FREQ") && more && !idle {
            match int(a.get(i + 1)) {
                None => return Err(NOT_INT),
                Some(n) if !(0..=255).contains(&n) => {
                    return Err("ERR Invalid FREQ value, must be >= 0 and <= 255")
                }
                Some(_) => freq = true,
            }
            i += 1;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    Ok((replace, absttl))
}

pub(in crate::cmd) fn restore<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let key = a.get(1);
    let (replace, absttl) = match restore_options(a) {
        Ok(o) => o,
        Err(e) => {
            r.error(e);
            return Ok(());
        }
    };
    let (found, live) = super::super::strings::lookup(cx, key)?;
    let ttl = match int(a.get(2)) {
        _ if live.is_some() && !replace => Err("BUSYKEY Target key name already exists."),
        None => Err(NOT_INT),
        Some(t) if t < 0 => Err("ERR Invalid TTL value, must be >= 0"),
        Some(t) => Ok(t as u64),
    };
    let ttl = match ttl {
        Ok(t) => t,
        Err(e) => {
            r.error(e);
            return Ok(());
        }
    };
    let limits = Limits { max_string: max_string(cx), max_total: cx.max_group_bytes };
    // "DUMP payload version or checksum are wrong", "Bad data format", as Redis; or a kind
    // not read yet, or a value too large, by name.
    let object = match rdb::decode(a.get(3), limits) {
        Ok(o) => o,
        Err(e) => {
            r.error(&format!("ERR {e}"));
            return Ok(());
        }
    };
    // Redis adds a relative TTL to now in a signed 64-bit integer, unchecked: a sum past the
    // integers wraps to a time long past, and the key is not made.
    let expire_ms =
        if ttl != 0 && !absttl { (ttl as i64).wrapping_add(cx.now_ms as i64) } else { ttl as i64 };
    if expire_ms != 0 && expire_ms <= cx.now_ms as i64 {
        // Already past: the key is not made (and one it replaces goes).
        if let Some(f) = live {
            cx.store.remove(&f)?;
            cx.notify(GENERIC, "del", key);
        }
        r.ok();
        return Ok(());
    }
    restore_value(cx, key, object, expire_ms as u64, found.as_ref())?;
    cx.notify(GENERIC, "restore", key);
    r.ok();
    Ok(())
}
