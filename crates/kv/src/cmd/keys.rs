//! Key commands: DEL UNLINK EXISTS TYPE RENAME RENAMENX EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL
//! PTTL EXPIRETIME PEXPIRETIME PERSIST TOUCH RANDOMKEY SCAN KEYS FLUSHDB FLUSHALL MOVE OBJECT,
//! COPY (`copy.rs`), DUMP and RESTORE (`dump.rs`).

mod copy;
mod dump;

pub(super) use dump::dump_payload;
#[cfg(test)]
mod tests;

use super::args::{int, is, Args};
use super::glob::matches;
use super::notify::{GENERIC, NEW};
use super::spec::{spec, Group, Spec, ALL, NO, ONE, R, RF, W, WD, WF};
use super::strings::lookup;
use super::{Cx, Session, NOT_INT, SYNTAX};
use crate::resp::Reply;
use crate::store::{kind_name, Mem, StoreError, KIND_ZSET};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("COPY", -3, W, (1, 2, 1), Group::Keys),
    spec("DBSIZE", 1, RF, NO, Group::Keys),
    spec("DEL", -2, WD, ALL, Group::Keys),
    spec("DUMP", 2, R, ONE, Group::Keys),
    spec("EXISTS", -2, RF, ALL, Group::Keys),
    spec("EXPIRE", -3, WF, ONE, Group::Keys),
    spec("EXPIREAT", -3, WF, ONE, Group::Keys),
    spec("EXPIRETIME", 2, RF, ONE, Group::Keys),
    spec("FLUSHALL", -1, WD, NO, Group::Keys),
    spec("FLUSHDB", -1, WD, NO, Group::Keys),
    spec("KEYS", 2, R, NO, Group::Keys),
    spec("MOVE", 3, WF, ONE, Group::Keys),
    spec("OBJECT", -2, &["readonly"], (2, 2, 1), Group::Keys),
    spec("PERSIST", 2, WF, ONE, Group::Keys),
    spec("PEXPIRE", -3, WF, ONE, Group::Keys),
    spec("PEXPIREAT", -3, WF, ONE, Group::Keys),
    spec("PEXPIRETIME", 2, RF, ONE, Group::Keys),
    spec("PTTL", 2, RF, ONE, Group::Keys),
    spec("RANDOMKEY", 1, R, NO, Group::Keys),
    spec("RENAME", 3, WD, (1, 2, 1), Group::Keys),
    spec("RENAMENX", 3, WF, (1, 2, 1), Group::Keys),
    spec("RESTORE", -4, W, ONE, Group::Keys),
    spec("SCAN", -2, R, NO, Group::Keys),
    spec("TOUCH", -2, RF, ALL, Group::Keys),
    spec("TTL", 2, RF, ONE, Group::Keys),
    spec("TYPE", 2, RF, ONE, Group::Keys),
    spec("UNLINK", -2, WF, ALL, Group::Keys),
];

pub(super) fn del<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut n = 0;
    for k in a.from(1) {
        if let Some(f) = cx.store.find(k)? {
            let live = !f.head.expired(cx.now_ms);
            cx.store.remove(&f)?;
            if live {
                n += 1;
                cx.notify(GENERIC, "del", k);
                // The keys it deletes only, as Redis.
                cx.watches.touch(cx.store.selected(), k);
            }
        }
    }
    r.int(n);
    Ok(())
}

pub(super) fn exists<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let mut n = 0;
    for k in a.from(1) {
        n += i64::from(cx.store.get(k, cx.now_ms)?.is_some());
    }
    r.int(n);
    Ok(())
}

pub(super) fn type_of<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let t = cx.store.get(a.get(1), cx.now_ms)?.map_or("none", |f| kind_name(f.head.kind));
    r.simple(t.as_bytes());
    Ok(())
}

pub(super) fn rename<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, nx: bool) -> Result<(), StoreError> {
    let (src, dst) = (a.get(1), a.get(2));
    let Some(f) = cx.store.get(src, cx.now_ms)? else {
        r.error("ERR no such key");
        return Ok(());
    };
    if src == dst {
        if nx {
            r.int(0);
        } else {
            r.ok();
        }
        return Ok(());
    }
    if nx && cx.store.get(dst, cx.now_ms)?.is_some() {
        r.int(0);
        return Ok(());
    }
    let mut value = Vec::new();
    cx.store.value_into(&f, &mut value)?;
    // The value moves whole: a tree it holds goes with its handle.
    cx.store.unlink(&f)?;
    // The table changed: find the destination afresh.
    let old = cx.store.find(dst)?;
    let h = &f.head;
    cx.store.put_encoded(dst, h.kind, h.encoding, h.expire_ms, &[&value], 0, old.as_ref())?;
    cx.notify(GENERIC, "rename_from", src);
    cx.notify(GENERIC, "rename_to", dst);
    if nx {
        r.int(1);
    } else {
        r.ok();
    }
    Ok(())
}

/// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT key time [NX|XX|GT|LT], as Redis's
/// `expireGenericCommand`: the options first, then the time (negative ones too: a time at or
/// before now deletes the key), refused only when it overflows.
pub(super) fn expire<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, name: &str) -> Result<(), StoreError> {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for o in a.from(3) {
        match () {
            _ if is(o, "NX") => nx = true,
            _ if is(o, "XX") => xx = true,
            _ if is(o, "GT") => gt = true,
            _ if is(o, "LT") => lt = true,
            _ => {
                r.error(&format!("ERR Unsupported option {}", super::show(o, 64)));
                return Ok(());
            }
        }
    }
    if nx && (xx || gt || lt) {
        r.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return Ok(());
    }
    if gt && lt {
        r.error("ERR GT and LT options at the same time are not compatible");
        return Ok(());
    }
    let Some(n) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let (seconds, base) = match name {
        "EXPIRE" => (true, cx.now_ms as i64),
        "PEXPIRE" => (false, cx.now_ms as i64),
        "EXPIREAT" => (true, 0),
        _ => (false, 0),
    };
    let when = if seconds { n.checked_mul(1000) } else { Some(n) }.and_then(|w| w.checked_add(base));
    let Some(when) = when else {
        r.error(&format!("ERR invalid expire time in '{}' command", name.to_ascii_lowercase()));
        return Ok(());
    };
    let (_, live) = lookup(cx, a.get(1))?;
    let Some(mut f) = live else {
        r.int(0);
        return Ok(());
    };
    // No expiry is an infinite one: GT never passes it, LT always does.
    let cur = (f.head.expire_ms != 0).then_some(f.head.expire_ms as i64);
    let refused = (nx && cur.is_some())
        || (xx && cur.is_none())
        || (gt && cur.is_none_or(|c| when <= c))
        || (lt && cur.is_some_and(|c| when >= c));
    if refused {
        r.int(0);
        return Ok(());
    }
    if when <= cx.now_ms as i64 {
        cx.store.remove(&f)?;
        cx.notify(GENERIC, "del", a.get(1));
    } else {
        cx.store.set_expire(&mut f, when as u64)?;
        cx.notify(GENERIC, "expire", a.get(1));
    }
    r.int(1);
    Ok(())
}

/// TTL and PTTL (the time left, seconds rounded to the nearest), EXPIRETIME and PEXPIRETIME
/// (the Unix time): -2 for no key, -1 for no expiry.
pub(super) fn ttl<M: Mem>(
    cx: &mut Cx<M>,
    a: &Args,
    r: &mut Reply,
    millis: bool,
    absolute: bool,
) -> Result<(), StoreError> {
    match cx.store.get(a.get(1), cx.now_ms)? {
        None => r.int(-2),
        Some(f) if f.head.expire_ms == 0 => r.int(-1),
        Some(f) => {
            let t = if absolute { f.head.expire_ms } else { f.head.expire_ms.saturating_sub(cx.now_ms) };
            let t = t.min(i64::MAX as u64) as i64;
            r.int(if millis { t } else { t.saturating_add(500) / 1000 });
        }
    }
    Ok(())
}

pub(super) fn persist<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match cx.store.get(a.get(1), cx.now_ms)? {
        Some(mut f) if f.head.expire_ms != 0 => {
            cx.store.set_expire(&mut f, 0)?;
            cx.notify(GENERIC, "persist", a.get(1));
            r.int(1);
        }
        _ => r.int(0),
    }
    Ok(())
}

/// Appends (as bulk strings) the live keys of buckets `from ..` matching `pattern` and
/// `kind`, until `want` keys or `max_buckets` buckets; returns the next bucket (0: the end)
/// and the keys added.
#[allow(clippy::too_many_arguments)]
fn collect<M: Mem>(
    cx: &mut Cx<M>,
    from: u64,
    max_buckets: u64,
    max_empty: u64,
    want: usize,
    pattern: Option<&[u8]>,
    kind: Option<u8>,
    r: &mut Reply,
) -> Result<(u64, usize), StoreError> {
    let buckets = cx.store.geometry().buckets;
    let (now, mut n, mut b, limit) = (cx.now_ms, 0, from, cx.output_limit);
    let (mut used, mut empty) = (0, 0);
    let mut key = Vec::new();
    while b < buckets && used < max_buckets && n < want {
        // Empty buckets are skipped a slice of words at a time, up to `max_empty` of them.
        let next = cx.store.next_used_bucket(b, b.saturating_add(max_empty - empty))?;
        empty += next - b;
        b = next;
        if b >= buckets || empty >= max_empty {
            break;
        }
        used += 1;
        cx.store.bucket_entries(b, |s, e, h| {
            if h.expired(now) || kind.is_some_and(|k| k != h.kind) || !s.in_selected(e, h)? {
                return Ok(());
            }
            s.key_into(e, h, &mut key)?;
            if pattern.is_none_or(|p| matches(p, &key)) {
                if r.buf.len().saturating_add(key.len() + 16) > limit {
                    return Err(StoreError::OutputLimit(limit));
                }
                r.bulk(&key);
                n += 1;
            }
            Ok(())
        })?;
        b += 1;
    }
    Ok((if b >= buckets { 0 } else { b }, n))
}

/// Empty buckets one SCAN passes over at most (2 MiB of bucket words, about a millisecond).
const SCAN_EMPTY: u64 = 1 << 18;

pub(super) fn scan<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(cursor) = std::str::from_utf8(a.get(1)).ok().and_then(|s| s.parse::<u64>().ok()) else {
        r.error("ERR invalid cursor");
        return Ok(());
    };
    let (mut pattern, mut count, mut kind) = (None, 10i64, None);
    let mut i = 2;
    while i < a.len() {
        let (o, v) = (a.get(i), (i + 1 < a.len()).then(|| a.get(i + 1)));
        match (o, v) {
            (o, Some(v)) if is(o, "MATCH") => pattern = Some(v).filter(|p| *p != b"*"),
            (o, Some(v)) if is(o, "COUNT") => match int(v) {
                Some(c) if c >= 1 => count = c,
                Some(_) => {
                    r.error(SYNTAX);
                    return Ok(());
                }
                None => {
                    r.error(NOT_INT);
                    return Ok(());
                }
            },
            (o, Some(v)) if is(o, "TYPE") => {
                // An unknown type matches nothing, as in Redis.
                kind = Some(
                    (1..=KIND_ZSET).find(|&k| v.eq_ignore_ascii_case(kind_name(k).as_bytes())).unwrap_or(0),
                )
            }
            _ => {
                r.error(SYNTAX);
                return Ok(());
            }
        }
        i += 2;
    }
    let count = count.min(1 << 20) as usize;
    // The keys go to a buffer of their own: the cursor before them is known only after.
    let mut found = Vec::new();
    let mut fr = Reply { buf: &mut found, proto: r.proto };
    // As Redis's SCAN, which looks at up to ten times COUNT buckets of a table sized to its
    // keys, it looks at up to ten times COUNT buckets that hold keys; the table here is sized to
    // the region, mostly empty when the keys are few, and up to `SCAN_EMPTY` empty buckets are
    // passed over besides (a read of 8 bytes each).
    let (next, n) = collect(cx, cursor, (count as u64) * 10, SCAN_EMPTY, count, pattern, kind, &mut fr)?;
    r.array(2);
    let mut tmp = [0u8; 20];
    r.bulk(crate::resp::itoa(next as i64, &mut tmp));
    r.array(n);
    r.buf.extend_from_slice(&found);
    Ok(())
}

pub(super) fn keys<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let pattern = Some(a.get(1)).filter(|p| *p != b"*");
    let mark = r.deferred();
    let (_, n) = collect(cx, 0, u64::MAX, u64::MAX, usize::MAX, pattern, None, r)?;
    r.end_deferred(mark, n);
    Ok(())
}

/// FLUSHDB (the selected database) and FLUSHALL (every one).
pub(super) fn flush<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, all: bool) -> Result<(), StoreError> {
    if a.len() > 2 || a.from(1).any(|o| !is(o, "ASYNC") && !is(o, "SYNC")) {
        r.error(SYNTAX);
        return Ok(());
    }
    let db = cx.store.selected();
    // Watched keys that exist are touched (not those that do not, nor stale ones).
    let dbs: Vec<usize> = if all { (0..cx.databases()).collect() } else { vec![db] };
    touch_existing(cx, &dbs)?;
    if all && cx.cluster.is_some() {
        // Cluster mode: database 0 and the keys in flight of a slot move; the move's fence is
        // no client's data (`cluster_stage.rs`).
        cx.store.flush_db(0)?;
        if cx.store.databases() > crate::cluster::STAGE_DB {
            cx.store.flush_db(crate::cluster::STAGE_DB)?;
        }
    } else if all {
        cx.store.flush()?;
    } else {
        cx.store.flush_db(db)?;
    }
    r.ok();
    Ok(())
}

/// Touches, for `WATCH`, the watched keys of databases `dbs` that exist (live) now in any of
/// `dbs` (a flush empties them; a swap makes each one's keys the other's).
pub(super) fn touch_existing<M: Mem>(cx: &mut Cx<M>, dbs: &[usize]) -> Result<(), StoreError> {
    if !cx.watches.any() {
        return Ok(());
    }
    let selected = cx.store.selected();
    let mut r = Ok(());
    'dbs: for &db in dbs {
        for k in cx.watches.watched_in(db) {
            for &other in dbs {
                cx.store.select(other);
                match cx.store.get(&k, cx.now_ms) {
                    Ok(Some(_)) => {
                        cx.watches.touch(db, &k);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        r = Err(e);
                        break 'dbs;
                    }
                }
            }
        }
    }
    cx.store.select(selected);
    r
}

/// MOVE key db: the key with its value (a tree with its handle), its expiry and its type,
/// into database `db`, unless a live key of that name is there.
pub(super) fn move_key<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let key = a.get(1);
    let to = match super::args::db_index(a.get(2), cx.databases()) {
        Ok(db) => db,
        Err(e) => {
            r.error(&e);
            return Ok(());
        }
    };
    if to == s.db {
        r.error("ERR source and destination objects are the same");
        return Ok(());
    }
    let src = cx.store.get(key, cx.now_ms)?;
    cx.store.select(to);
    let taken = cx.store.get(key, cx.now_ms)?.is_some();
    cx.store.select(s.db);
    let Some(src) = src.filter(|_| !taken) else {
        r.int(0);
        return Ok(());
    };
    move_entry(cx, &src, key, s.db, to)?;
    cx.watches.touch(to, key);
    // The key is new in the other database (`notify::after` sees only this one).
    cx.notify_in(to, NEW, "new", key);
    cx.notify(GENERIC, "move_from", key);
    cx.notify_in(to, GENERIC, "move_to", key);
    r.int(1);
    Ok(())
}

/// Moves the entry `src` of `key` from database `from` (selected) to database `to`, where the
/// key is not live (an expired one of that name there is replaced); `from` is selected after.
/// The value moves as it is stored: its blocks stay where they are.
pub(super) fn move_entry<M: Mem>(
    cx: &mut Cx<M>,
    src: &crate::store::Found,
    key: &[u8],
    from: usize,
    to: usize,
) -> Result<(), StoreError> {
    let mut value = Vec::new();
    cx.store.value_into(src, &mut value)?;
    cx.store.unlink(src)?;
    cx.store.select(to);
    let old = cx.store.find(key);
    let h = &src.head;
    let put = old.and_then(|old| {
        cx.store.put_encoded(key, h.kind, h.encoding, h.expire_ms, &[&value], 0, old.as_ref()).map(|_| ())
    });
    cx.store.select(from);
    put
}

/// RANDOMKEY: a live key of the database, drawn at random; a null when there is none.
pub(super) fn random_key<M: Mem>(cx: &mut Cx<M>, r: &mut Reply) -> Result<(), StoreError> {
    let mut seed = [0u8; 16];
    mojim_transport::random::fill(&mut seed);
    let r0 = u64::from_le_bytes(seed[..8].try_into().expect("8 bytes"));
    let r1 = u64::from_le_bytes(seed[8..].try_into().expect("8 bytes"));
    let mut key = Vec::new();
    if cx.store.random_key(r0, r1, cx.now_ms, &mut key)? {
        cx.reply_room(r, key.len() + 16)?;
        r.bulk(&key);
    } else {
        r.null();
    }
    Ok(())
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    match spec.name {
        "DEL" | "UNLINK" => del(cx, a, r)?,
        "EXISTS" => exists(cx, a, r)?,
        "TYPE" => type_of(cx, a, r)?,
        "RENAME" | "RENAMENX" => rename(cx, a, r, spec.name == "RENAMENX")?,
        "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => expire(cx, a, r, spec.name)?,
        "TTL" | "PTTL" => ttl(cx, a, r, spec.name == "PTTL", false)?,
        "EXPIRETIME" | "PEXPIRETIME" => ttl(cx, a, r, spec.name == "PEXPIRETIME", true)?,
        "TOUCH" => exists(cx, a, r)?,
        "RANDOMKEY" => random_key(cx, r)?,
        "COPY" => copy::copy(cx, s, a, r)?,
        "DUMP" => dump::dump(cx, a, r)?,
        "RESTORE" => dump::restore(cx, a, r)?,
        "PERSIST" => persist(cx, a, r)?,
        "SCAN" => scan(cx, a, r)?,
        "KEYS" => keys(cx, a, r)?,
        "MOVE" if cx.cluster.is_some() => r.error("ERR MOVE is not allowed in cluster mode"),
        "MOVE" => move_key(cx, s, a, r)?,
        "FLUSHDB" | "FLUSHALL" => flush(cx, a, r, spec.name == "FLUSHALL")?,
        "DBSIZE" => r.int(cx.store.db_keys(s.db) as i64),
        "OBJECT" => object(cx, a, r)?,
        other => unreachable!("{other} is not a keys command"),
    }
    Ok(())
}

/// The name `OBJECT ENCODING` gives an entry's representation, as Redis names it for its kind.
pub(super) fn encoding_name<M: Mem>(cx: &Cx<M>, f: &crate::store::Found) -> Result<&'static str, StoreError> {
    use crate::store::{
        ENC_EMBSTR, ENC_INTSET, ENC_LISTPACK, ENC_RAW, ENC_TREE, KIND_HASH, KIND_SET, KIND_STRING,
    };
    Ok(match (f.head.kind, f.head.encoding) {
        (KIND_STRING, ENC_RAW) => "raw",
        (KIND_STRING, e) => {
            // As Redis names a string it made whole: an integer in canonical form (of at most
            // 20 bytes) is `int` unless made without a try at it, then `embstr` up to 44 bytes.
            let n = f.head.vlen as usize;
            let mut b = [0u8; 20];
            if n <= 20 && e != ENC_EMBSTR {
                cx.store.read_value(f, 0, &mut b[..n])?;
            }
            if n <= 20 && e != ENC_EMBSTR && int(&b[..n]).is_some() {
                "int"
            } else if n <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        (KIND_HASH, ENC_TREE) => "hashtable",
        (KIND_HASH, _) => "listpack",
        // Redis 7.0 names every list so, whether it is one node or many.
        (crate::store::KIND_LIST, _) => "quicklist",
        (KIND_SET, ENC_INTSET) => "intset",
        (KIND_SET, ENC_LISTPACK) => "listpack",
        (KIND_SET, ENC_TREE) => "hashtable",
        (crate::store::KIND_ZSET, _) => super::zsets::encoding_name(cx, f)?,
        _ => "unknown",
    })
}

/// OBJECT ENCODING | REFCOUNT | FREQ | IDLETIME | HELP.
fn object<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let sub = a.get(1);
    if is(sub, "HELP") && a.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key> (needs an LFU policy, which mojim kv has not).",
            "IDLETIME <key>",
            "    mojim kv does not track the time keys were last read: refused.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified <key>.",
        ];
        r.help(&lines);
        return Ok(());
    }
    if a.len() != 3 {
        r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
            super::show(sub, 64)
        ));
        return Ok(());
    }
    let Some(f) = cx.store.get(a.get(2), cx.now_ms)? else {
        r.null();
        return Ok(());
    };
    match () {
        _ if is(sub, "ENCODING") => r.bulk(encoding_name(cx, &f)?.as_bytes()),
        _ if is(sub, "REFCOUNT") => r.int(1),
        _ if is(sub, "FREQ") => r.error(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
        _ if is(sub, "IDLETIME") => {
            r.error("ERR mojim kv does not track when keys were last read (OBJECT IDLETIME)")
        }
        _ => r.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try OBJECT HELP.",
            super::show(sub, 64)
        )),
    }
    Ok(())
}
