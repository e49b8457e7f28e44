//! String commands: GET SET SETNX SETEX PSETEX GETSET GETDEL MGET MSET MSETNX INCR INCRBY DECR
//! DECRBY APPEND STRLEN.

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, ALL, ONE, PAIRS, RF, W, WF};
use super::{Cx, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::{itoa, Reply};
use crate::store::{Found, Mem, StoreError, KIND_STRING};

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("APPEND", 3, W, ONE, Group::Strings),
    spec("DECR", 2, WF, ONE, Group::Strings),
    spec("DECRBY", 3, WF, ONE, Group::Strings),
    spec("GET", 2, RF, ONE, Group::Strings),
    spec("GETDEL", 2, WF, ONE, Group::Strings),
    spec("GETSET", 3, WF, ONE, Group::Strings),
    spec("INCR", 2, WF, ONE, Group::Strings),
    spec("INCRBY", 3, WF, ONE, Group::Strings),
    spec("MGET", -2, RF, ALL, Group::Strings),
    spec("MSET", -3, W, PAIRS, Group::Strings),
    spec("MSETNX", -3, W, PAIRS, Group::Strings),
    spec("PSETEX", 4, W, ONE, Group::Strings),
    spec("SET", -3, W, ONE, Group::Strings),
    spec("SETEX", 4, W, ONE, Group::Strings),
    spec("SETNX", 3, WF, ONE, Group::Strings),
    spec("STRLEN", 2, RF, ONE, Group::Strings),
];

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    Nx,
    Xx,
}

/// When a key set now with `n` in `unit` expires (`at`: `n` is a time, not a span); `None` if
/// that is not a positive time.
pub(super) fn expiry(now_ms: u64, n: i64, unit: u64, at: bool) -> Option<u64> {
    if n <= 0 && !at {
        return None;
    }
    let span = u64::try_from(n).ok()?.checked_mul(unit)?;
    let when = if at { span } else { now_ms.checked_add(span)? };
    (when > 0 && when < i64::MAX as u64).then_some(when)
}

pub(super) fn set<M: Mem>(cx: &mut Cx<M>, a: &Args, r: &mut Reply) -> Result<(), StoreError> {
    let (mut cond, mut want_old, mut keep_ttl, mut expire) = (Cond::Always, false, false, None);
    let mut i = 3;
    while i < a.len() {
        let o = a.get(i);
        let unit = if is(o, "EX") || is(o, "EXAT") {
            Some((1000, is(o, "EXAT")))
        } else if is(o, "PX") || is(o, "PXAT") {
            Some((1, is(o, "PXAT")))
        } else {
            None
        };
        if let Some((unit, at)) = unit {
            if expire.is_some() || keep_ttl || i + 1 >= a.len() {
                r.error(SYNTAX);
                return Ok(());
            }
            let Some(n) = int(a.get(i + 1)) else {
                r.error(NOT_INT);
                return Ok(());
            };
            let Some(when) = expiry(cx.now_ms, n, unit, at) else {
                r.error("ERR invalid expire time in 'set' command");
                return Ok(());
            };
            expire = Some(when);
            i += 2;
            continue;
        }
        match () {
            _ if is(o, "NX") && cond != Cond::Xx => cond = Cond::Nx,
            _ if is(o, "XX") && cond != Cond::Nx => cond = Cond::Xx,
            _ if is(o, "GET") => want_old = true,
            _ if is(o, "KEEPTTL") && expire.is_none() => keep_ttl = true,
            _ => {
                r.error(SYNTAX);
                return Ok(());
            }
        }
        i += 1;
    }
    let key = a.get(1);
    let (found, live) = lookup(cx, key)?;
    if want_old && live.is_some_and(|f| f.head.kind != KIND_STRING) {
        r.error(WRONGTYPE);
        return Ok(());
    }
    let go = match cond {
        Cond::Always => true,
        Cond::Nx => live.is_none(),
        Cond::Xx => live.is_some(),
    };
    if want_old {
        match &live {
            Some(f) => reply_value(cx, f, r)?,
            None => r.null(),
        }
    }
    if !go {
        if !want_old {
            r.null();
        }
        return Ok(());
    }
    let ttl = if keep_ttl { live.map_or(0, |f| f.head.expire_ms) } else { expire.unwrap_or(0) };
    cx.store.put(key, KIND_STRING, ttl, &[a.get(2)], 0, found.as_ref())?;
    if !want_old {
        r.ok();
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
        Some(mut f) if digits.len() as u64 <= u64::from(f.head.vlen) + cx.store.slack(&f) => {
            cx.store.overwrite_in_place(&mut f, digits)?;
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
        Some(mut f) if more.len() as u64 <= cx.store.slack(&f) => {
            cx.store.append_in_place(&mut f, more)?;
            u64::from(f.head.vlen)
        }
        Some(f) => {
            let mut old = Vec::new();
            cx.store.value_into(&f, &mut old)?;
            let total = (old.len() + more.len()) as u64;
            // Room to grow: appends that follow fit without a copy, so a string built by
            // appending costs its length, not its length squared.
            let spare = total.min(1 << 20);
            cx.store.put(key, KIND_STRING, f.head.expire_ms, &[&old, more], spare, found.as_ref())?;
            total
        }
    };
    r.int(len as i64);
    Ok(())
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
        "DECRBY" => {
            let by = int(a.get(2)).and_then(|v| v.checked_neg()).ok_or(());
            incr_by(cx, a.get(1), by, r)?
        }
        "APPEND" => append(cx, a, r)?,
        "STRLEN" => strlen(cx, a, r)?,
        other => unreachable!("{other} is not a strings command"),
    }
    Ok(())
}
