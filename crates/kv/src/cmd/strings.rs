//! String commands: GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX INCR INCRBY
//! DECR DECRBY INCRBYFLOAT APPEND STRLEN GETRANGE SUBSTR SETRANGE, the bit commands (`bits.rs`)
//! and LCS (`lcs.rs`).
//!
//! A string is one entry, its value the bytes. The entry's `encoding` says only how Redis would
//! name the string for `OBJECT ENCODING`: as `SET` makes it (`int`, `embstr` or `raw` by what it
//! holds), `raw` once changed in place ([`ENC_RAW`]), or never `int` ([`ENC_EMBSTR`]).

mod bits;
mod lcs;
pub(crate) mod long_double;
#[cfg(test)]
pub(super) mod tests;

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, ALL, ONE, PAIRS, R, RF, W, WF};
use super::{Cx, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::{itoa, Reply};
use crate::store::{Found, Mem, StoreError, ENC_EMBSTR, ENC_PLAIN, ENC_RAW, KIND_STRING};
use long_double::LongDouble;

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("APPEND", 3, W, ONE, Group::Strings),
    spec("BITCOUNT", -2, R, ONE, Group::Strings),
    spec("BITOP", -4, W, (2, -1, 1), Group::Strings),
    spec("BITPOS", -3, R, ONE, Group::Strings),
    spec("DECR", 2, WF, ONE, Group::Strings),
    spec("DECRBY", 3, WF, ONE, Group::Strings),
    spec("GET", 2, RF, ONE, Group::Strings),
    spec("GETBIT", 3, RF, ONE, Group::Strings),
    spec("GETDEL", 2, WF, ONE, Group::Strings),
    spec("GETEX", -2, &["write", "fast"], ONE, Group::Strings),
    spec("GETRANGE", 4, R, ONE, Group::Strings),
    spec("GETSET", 3, WF, ONE, Group::Strings),
    spec("INCR", 2, WF, ONE, Group::Strings),
    spec("INCRBY", 3, WF, ONE, Group::Strings),
    spec("INCRBYFLOAT", 3, WF, ONE, Group::Strings),
    spec("LCS", -3, R, (1, 2, 1), Group::Strings),
    spec("MGET", -2, RF, ALL, Group::Strings),
    spec("MSET", -3, W, PAIRS, Group::Strings),
    spec("MSETNX", -3, W, PAIRS, Group::Strings),
    spec("PSETEX", 4, W, ONE, Group::Strings),
    spec("SET", -3, W, ONE, Group::Strings),
    spec("SETBIT", 4, W, ONE, Group::Strings),
    spec("SETEX", 4, W, ONE, Group::Strings),
    spec("SETNX", 3, WF, ONE, Group::Strings),
    spec("SETRANGE", 4, W, ONE, Group::Strings),
    spec("STRLEN", 2, RF, ONE, Group::Strings),
    spec("SUBSTR", 4, R, ONE, Group::Strings),
];

/// `-ERR` for a string that would pass `proto-max-bulk-len`, as Redis words it.
const TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// The longest string a command may make: `proto-max-bulk-len` (`[kv] max_bulk`), as in Redis;
/// 512 MiB, Redis's default, where the server does not say.
pub(super) fn max_string<M: Mem>(cx: &Cx<M>) -> u64 {
    cx.host.fixed_setting("proto-max-bulk-len").parse().unwrap_or(512 << 20)
}

/// Whether a string of `len + more` bytes may be made; else replies Redis's error.
fn length_ok<M: Mem>(cx: &Cx<M>, len: u64, more: u64, r: &mut Reply) -> bool {
    if len.checked_add(more).is_none_or(|t| t > max_string(cx)) {
        r.error(TOO_LONG);
        return false;
    }
    true
}

/// Room to leave after a string that grows in place (`APPEND`, `SETRANGE`, `SETBIT`): as much
/// again, up to 1 MiB, so that a string built a piece at a time costs its length, not its
/// length squared.
fn growth_room(len: u64) -> u64 {
    len.min(1 << 20)
}

/// The live entry of `key`, and the entry itself even if expired (to replace it in place).
pub(super) fn lookup<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
) -> Result<(Option<Found>, Option<Found>), StoreError> {
    let f = cx.store.find(key)?;
    let live = f.filter(|f| !f.head.expired(cx.now_ms));
    Ok((f, live))
}

/// Appends `f`'s value to the reply as a bulk string.
pub(super) fn reply_value<M: Mem>(cx: &Cx<M>, f: &Found, r: &mut Reply) -> Result<(), StoreError> {
    let n = f.head.vlen as usize;
    cx.reply_room(r, n + 16)?;
    let at = r.bulk_space(n);
    cx.store.read_value(f, 0, &mut r.buf[at..at + n])
}

pub(super) fn get<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match cx.store.get(a.get(1), cx.now_ms)? {
        None => r.null(),
        Some(f) if f.head.kind != KIND_STRING => r.error(WRONGTYPE),
        Some(f) => reply_value(cx, &f, r)?,
    }
    Ok(())
}

/// The options of `SET` and `GETEX` (Redis's `parseExtendedStringArgumentsOrReply`): each
/// allowed only with those it goes with, an expiry's argument taken raw and read after.
#[derive(Default)]
struct Extended<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    persist: bool,
    /// The time argument, its unit in milliseconds, and whether it is a Unix time.
    expire: Option<(&'a [u8], u64, bool)>,
}

/// Reads the options from argument `from` on (`set`: SET's, else GETEX's); `None` for a syntax
/// error.
fn extended<'a>(a: &Args<'a>, from: usize, set: bool) -> Option<Extended<'a>> {
    let mut x = Extended::default();
    let mut i = from;
    while i < a.len() {
        let o = a.get(i);
        let next = (i + 1 < a.len()).then(|| a.get(i + 1));
        // Which expiry option, if any; a second of the same kind replaces the first.
        let unit = match () {
            _ if is(o, "EX") => Some((1000, false)),
            _ if is(o, "PX") => Some((1, false)),
            _ if is(o, "EXAT") => Some((1000, true)),
            _ if is(o, "PXAT") => Some((1, true)),
            _ => None,
        };
        if let Some((unit, at)) = unit {
            let other = x.expire.is_some_and(|(_, u, t)| (u, t) != (unit, at));
            let next = next.filter(|_| !x.keep_ttl && !x.persist && !other)?;
            x.expire = Some((next, unit, at));
            i += 2;
            continue;
        }
        match () {
            _ if set && is(o, "NX") && !x.xx => x.nx = true,
            _ if set && is(o, "XX") && !x.nx => x.xx = true,
            _ if set && is(o, "GET") => x.get = true,
            _ if set && is(o, "KEEPTTL") && x.expire.is_none() => x.keep_ttl = true,
            _ if !set && is(o, "PERSIST") && x.expire.is_none() => x.persist = true,
            _ => return None,
        }
        i += 1;
    }
    Some(x)
}

/// The Unix time in milliseconds an expiry option names (Redis's
/// `getExpireMillisecondsOrReply`); `None` after replying the error (`name`: the command's).
fn expire_at<M: Mem>(
    cx: &Cx<M>,
    (arg, unit, at): (&[u8], u64, bool),
    name: &str,
    r: &mut Reply,
) -> Option<u64> {
    let Some(n) = int(arg) else {
        r.error(NOT_INT);
        return None;
    };
    let when = expiry(cx.now_ms, n, unit, at);
    if when.is_none() {
        r.error(&format!("ERR invalid expire time in '{name}' command"));
    }
    when
}

/// When a key set now with `n` in `unit` expires (`at`: `n` is a time, not a span); `None` if
/// that is not a positive time.
pub(super) fn expiry(now_ms: u64, n: i64, unit: u64, at: bool) -> Option<u64> {
    if n <= 0 {
        return None;
    }
    let span = u64::try_from(n).ok()?.checked_mul(unit)?;
    let when = if at { span } else { now_ms.checked_add(span)? };
    (when > 0 && when <= i64::MAX as u64).then_some(when)
}

pub(super) fn set<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(x) = extended(a, 3, true) else {
        r.error(SYNTAX);
        return Ok(());
    };
    let expire = match x.expire {
        Some(e) => match expire_at(cx, e, "set", r) {
            Some(when) => Some(when),
            None => return Ok(()),
        },
        None => None,
    };
    let key = a.get(1);
    let (found, live) = lookup(cx, key)?;
    if x.get && live.is_some_and(|f| f.head.kind != KIND_STRING) {
        r.error(WRONGTYPE);
        return Ok(());
    }
    let go = if x.nx {
        live.is_none()
    } else if x.xx {
        live.is_some()
    } else {
        true
    };
    if x.get {
        match &live {
            Some(f) => reply_value(cx, f, r)?,
            None => r.null(),
        }
    }
    if !go {
        if !x.get {
            r.null();
        }
        return Ok(());
    }
    let ttl = if x.keep_ttl { live.map_or(0, |f| f.head.expire_ms) } else { expire.unwrap_or(0) };
    cx.store.put(key, KIND_STRING, ttl, &[a.get(2)], 0, found.as_ref())?;
    if !x.get {
        r.ok();
    }
    Ok(())
}

/// GETEX key [EX seconds | PX ms | EXAT time | PXAT time | PERSIST]: the value, and its expiry
/// changed.
pub(super) fn getex<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let Some(x) = extended(a, 2, false) else {
        r.error(SYNTAX);
        return Ok(());
    };
    let Some(mut f) = cx.store.get(a.get(1), cx.now_ms)? else {
        r.null();
        return Ok(());
    };
    if f.head.kind != KIND_STRING {
        r.error(WRONGTYPE);
        return Ok(());
    }
    let when = match x.expire {
        Some(e) => match expire_at(cx, e, "getex", r) {
            Some(when) => Some(when),
            None => return Ok(()),
        },
        None => None,
    };
    reply_value(cx, &f, r)?;
    match when {
        // A Unix time already past deletes the key.
        Some(when) if when <= cx.now_ms => cx.store.remove(&f)?,
        Some(when) => cx.store.set_expire(&mut f, when)?,
        None if x.persist && f.head.expire_ms != 0 => cx.store.set_expire(&mut f, 0)?,
        None => {}
    }
    Ok(())
}

pub(super) fn setnx<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (found, live) = lookup(cx, a.get(1))?;
    if live.is_some() {
        r.int(0);
        return Ok(());
    }
    cx.store.put(a.get(1), KIND_STRING, 0, &[a.get(2)], 0, found.as_ref())?;
    r.int(1);
    Ok(())
}

pub(super) fn setex<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, millis: bool) -> Result<(), StoreError> {
    let Some(n) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Some(when) = expiry(cx.now_ms, n, if millis { 1 } else { 1000 }, false) else {
        let name = if millis { "psetex" } else { "setex" };
        r.error(&format!("ERR invalid expire time in '{name}' command"));
        return Ok(());
    };
    let (found, _) = lookup(cx, a.get(1))?;
    cx.store.put(a.get(1), KIND_STRING, when, &[a.get(3)], 0, found.as_ref())?;
    r.ok();
    Ok(())
}

pub(super) fn getset<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (found, live) = lookup(cx, a.get(1))?;
    match &live {
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) => reply_value(cx, f, r)?,
        None => r.null(),
    }
    cx.store.put(a.get(1), KIND_STRING, 0, &[a.get(2)], 0, found.as_ref())?;
    Ok(())
}

pub(super) fn getdel<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (_, live) = lookup(cx, a.get(1))?;
    match live {
        None => r.null(),
        Some(f) if f.head.kind != KIND_STRING => r.error(WRONGTYPE),
        Some(f) => {
            reply_value(cx, &f, r)?;
            cx.store.remove(&f)?;
        }
    }
    Ok(())
}

pub(super) fn mget<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    r.array(a.len() - 1);
    for k in a.from(1) {
        match cx.store.get(k, cx.now_ms)? {
            Some(f) if f.head.kind == KIND_STRING => reply_value(cx, &f, r)?,
            _ => r.null(),
        }
    }
    Ok(())
}

pub(super) fn mset<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply, nx: bool) -> Result<(), StoreError> {
    if a.len() % 2 != 1 {
        let name = if nx { "msetnx" } else { "mset" };
        r.error(&format!("ERR wrong number of arguments for '{name}' command"));
        return Ok(());
    }
    if nx {
        for i in (1..a.len()).step_by(2) {
            if cx.store.get(a.get(i), cx.now_ms)?.is_some() {
                r.int(0);
                return Ok(());
            }
        }
    }
    for i in (1..a.len()).step_by(2) {
        let found = cx.store.find(a.get(i))?;
        cx.store.put(a.get(i), KIND_STRING, 0, &[a.get(i + 1)], 0, found.as_ref())?;
    }
    if nx {
        r.int(1);
    } else {
        r.ok();
    }
    Ok(())
}

/// INCR, INCRBY, DECR, DECRBY: `by` is `Err` when the increment was not a number.
pub(super) fn incr_by<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    by: Result<i64, ()>,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let Ok(by) = by else {
        r.error(NOT_INT);
        return Ok(());
    };
    let (found, live) = lookup(cx, key)?;
    let cur = match &live {
        None => 0,
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) if f.head.vlen > 20 => {
            r.error(NOT_INT);
            return Ok(());
        }
        Some(f) => {
            let mut b = [0u8; 20];
            let n = f.head.vlen as usize;
            cx.store.read_value(f, 0, &mut b[..n])?;
            match int(&b[..n]) {
                Some(v) => v,
                None => {
                    r.error(NOT_INT);
                    return Ok(());
                }
            }
        }
    };
    let Some(new) = cur.checked_add(by) else {
        r.error("ERR increment or decrement would overflow");
        return Ok(());
    };
    let mut tmp = [0u8; 20];
    let digits = itoa(new, &mut tmp);
    match live {
        // In place only when the value does not get shorter: bytes past a value's length must
        // stay ones the sealed state does not use (`store::strings`).
        Some(mut f)
            if digits.len() as u64 >= u64::from(f.head.vlen)
                && digits.len() as u64 <= u64::from(f.head.vlen) + cx.store.slack(&f) =>
        {
            cx.store.overwrite_in_place(&mut f, digits)?;
            cx.store.set_string_encoding(&mut f, ENC_PLAIN)?;
        }
        Some(f) => {
            cx.store.put(key, KIND_STRING, f.head.expire_ms, &[digits], 0, found.as_ref())?;
        }
        None => {
            cx.store.put(key, KIND_STRING, 0, &[digits], 0, found.as_ref())?;
        }
    }
    r.int(new);
    Ok(())
}

/// INCRBYFLOAT key increment: in Redis's `long double` (`long_double.rs`), written as Redis
/// writes it; the expiry stays.
pub(super) fn incr_by_float<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    const NOT_FLOAT: &str = "ERR value is not a valid float";
    let key = a.get(1);
    let (found, live) = lookup(cx, key)?;
    let cur = match &live {
        None => LongDouble::ZERO,
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) if f.head.vlen as usize > long_double::MAX_CHARS => {
            r.error(NOT_FLOAT);
            return Ok(());
        }
        Some(f) => {
            let mut v = Vec::new();
            cx.store.value_into(f, &mut v)?;
            match LongDouble::parse(&v) {
                Some(n) => n,
                None => {
                    r.error(NOT_FLOAT);
                    return Ok(());
                }
            }
        }
    };
    let Some(by) = LongDouble::parse(a.get(2)) else {
        r.error(NOT_FLOAT);
        return Ok(());
    };
    let new = cur.add(by);
    if !new.is_finite() {
        r.error("ERR increment would produce NaN or Infinity");
        return Ok(());
    }
    let mut text = Vec::new();
    new.write_human(&mut text);
    let ttl = live.map_or(0, |f| f.head.expire_ms);
    cx.store.put_encoded(key, KIND_STRING, ENC_EMBSTR, ttl, &[&text], 0, found.as_ref())?;
    r.bulk(&text);
    Ok(())
}

pub(super) fn append<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (key, more) = (a.get(1), a.get(2));
    let (found, live) = lookup(cx, key)?;
    let len = match live {
        None => {
            cx.store.put(key, KIND_STRING, 0, &[more], 0, found.as_ref())?;
            more.len() as u64
        }
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) if !length_ok(cx, u64::from(f.head.vlen), more.len() as u64, r) => return Ok(()),
        Some(mut f) if more.len() as u64 <= cx.store.slack(&f) => {
            let at = u64::from(f.head.vlen);
            cx.store.string_write(&mut f, at, more)?;
            u64::from(f.head.vlen)
        }
        Some(f) => {
            let mut old = Vec::new();
            cx.store.value_into(&f, &mut old)?;
            let total = (old.len() + more.len()) as u64;
            let (ttl, spare) = (f.head.expire_ms, growth_room(total));
            cx.store.put_encoded(key, KIND_STRING, ENC_RAW, ttl, &[&old, more], spare, found.as_ref())?;
            total
        }
    };
    r.int(len as i64);
    Ok(())
}

/// GETRANGE key start end (and SUBSTR): the bytes from `start` to `end`, both included,
/// negative ones from the end.
pub(super) fn getrange<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (Some(start), Some(end)) = (int(a.get(2)), int(a.get(3))) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let f = match cx.store.get(a.get(1), cx.now_ms)? {
        None => {
            r.bulk(b"");
            return Ok(());
        }
        Some(f) if f.head.kind != KIND_STRING => {
            r.error(WRONGTYPE);
            return Ok(());
        }
        Some(f) => f,
    };
    let len = i64::from(f.head.vlen);
    match byte_range(start, end, len) {
        None => r.bulk(b""),
        Some((from, to)) => {
            let n = (to - from + 1) as usize;
            cx.reply_room(r, n + 16)?;
            let at = r.bulk_space(n);
            cx.store.read_value(&f, from as u64, &mut r.buf[at..at + n])?;
        }
    }
    Ok(())
}

/// The bytes `start ..= end` of a string of `len` bytes as Redis reads a range (negative
/// indexes from the end, clamped to the string); `None` when it is empty.
pub(super) fn byte_range(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    clamp_range(start, end, len)
}

/// As [`byte_range`], without its first rule (BITPOS has not it: two negative indexes the
/// wrong way round may both clamp to 0).
pub(super) fn clamp_range(start: i64, end: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { (len + end).max(0) } else { end.min(len - 1) };
    (start <= end && len > 0).then_some((start, end))
}

/// SETRANGE key offset value: `value` written at `offset`, zeros before it past the end.
pub(super) fn setrange<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (key, value) = (a.get(1), a.get(3));
    let Some(offset) = int(a.get(2)) else {
        r.error(NOT_INT);
        return Ok(());
    };
    let Ok(offset) = u64::try_from(offset) else {
        r.error("ERR offset is out of range");
        return Ok(());
    };
    let (found, live) = lookup(cx, key)?;
    match live {
        None => {
            if value.is_empty() {
                r.int(0);
                return Ok(());
            }
            if !length_ok(cx, offset, value.len() as u64, r) {
                return Ok(());
            }
            let zeros = vec![0u8; offset as usize];
            cx.store.put_encoded(key, KIND_STRING, ENC_RAW, 0, &[&zeros, value], 0, found.as_ref())?;
            r.int((offset + value.len() as u64) as i64);
        }
        Some(f) if f.head.kind != KIND_STRING => r.error(WRONGTYPE),
        Some(f) if value.is_empty() => r.int(i64::from(f.head.vlen)),
        Some(_) if !length_ok(cx, offset, value.len() as u64, r) => {}
        Some(f) => {
            let f = write_string(cx, key, f, found.as_ref(), offset, value)?;
            r.int(i64::from(f.head.vlen));
        }
    }
    Ok(())
}

/// Writes `data` at byte `at` of the live string `f` (zeros before it past the end): in its
/// block when it fits there, else into a new entry with room to grow; the string is `raw`
/// from then on. Returns the entry.
pub(super) fn write_string<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    mut f: Found,
    found: Option<&Found>,
    at: u64,
    data: &[u8],
) -> Result<Found, StoreError> {
    let len = u64::from(f.head.vlen);
    let end = (at + data.len() as u64).max(len);
    if end - len <= cx.store.slack(&f) {
        cx.store.string_write(&mut f, at, data)?;
        return Ok(f);
    }
    let mut v = Vec::with_capacity(end as usize);
    cx.store.value_into(&f, &mut v)?;
    v.resize(end as usize, 0);
    v[at as usize..at as usize + data.len()].copy_from_slice(data);
    let (ttl, spare) = (f.head.expire_ms, growth_room(end));
    cx.store.put_encoded(key, KIND_STRING, ENC_RAW, ttl, &[&v], spare, found)
}

pub(super) fn strlen<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match cx.store.get(a.get(1), cx.now_ms)? {
        None => r.int(0),
        Some(f) if f.head.kind != KIND_STRING => r.error(WRONGTYPE),
        Some(f) => r.int(i64::from(f.head.vlen)),
    }
    Ok(())
}

/// Runs one of this module's commands.
pub(super) fn run<M: Mem>(cx: &mut Cx<M>, spec: &Spec, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    match spec.name {
        "GET" => get(cx, a, r)?,
        "SET" => set(cx, a, r)?,
        "SETNX" => setnx(cx, a, r)?,
        "SETEX" | "PSETEX" => setex(cx, a, r, spec.name == "PSETEX")?,
        "GETSET" => getset(cx, a, r)?,
        "GETDEL" => getdel(cx, a, r)?,
        "MGET" => mget(cx, a, r)?,
        "MSET" => mset(cx, a, r, false)?,
        "MSETNX" => mset(cx, a, r, true)?,
        "INCR" => incr_by(cx, a.get(1), Ok(1), r)?,
        "DECR" => incr_by(cx, a.get(1), Ok(-1), r)?,
        "INCRBY" => incr_by(cx, a.get(1), int(a.get(2)).ok_or(()), r)?,
        "DECRBY" => match int(a.get(2)) {
            // Its negation does not exist: refused before the key is looked at, as Redis does.
            Some(i64::MIN) => r.error("ERR decrement would overflow"),
            by => incr_by(cx, a.get(1), by.map(|v| -v).ok_or(()), r)?,
        },
        "INCRBYFLOAT" => incr_by_float(cx, a, r)?,
        "APPEND" => append(cx, a, r)?,
        "STRLEN" => strlen(cx, a, r)?,
        "GETEX" => getex(cx, a, r)?,
        "GETRANGE" | "SUBSTR" => getrange(cx, a, r)?,
        "SETRANGE" => setrange(cx, a, r)?,
        "SETBIT" => bits::setbit(cx, a, r)?,
        "GETBIT" => bits::getbit(cx, a, r)?,
        "BITCOUNT" => bits::bitcount(cx, a, r)?,
        "BITPOS" => bits::bitpos(cx, a, r)?,
        "BITOP" => bits::bitop(cx, a, r)?,
        "LCS" => lcs::lcs(cx, a, r)?,
        other => unreachable!("{other} is not a strings command"),
    }
    Ok(())
}
