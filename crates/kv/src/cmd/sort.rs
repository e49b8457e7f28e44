//! SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] [STORE
//! destination], and SORT_RO (without STORE), as Redis 7.0 runs them: the elements of a list,
//! set or sorted set, ordered by their own value or by keys a pattern names (`*` is the element;
//! `key*->field` a hash's field), as numbers (each must read as a double, as `strtod` reads it)
//! or as strings (ALPHA); ties of numbers ordered by the elements' bytes. GET patterns give, for
//! each element, keys' values instead (`#`: the element). STORE writes the result as a list
//! (a missing GET value as an empty string) in one group with the rest of the batch, and an
//! empty result deletes the destination.
//!
//! The work is Redis's own: O(n log n) for n elements, and every element is read into the heap.

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, ONE, R};
use super::strings::lookup;
use super::{Cx, Session, NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Reply;
use crate::store::{Found, Mem, StoreError, KIND_HASH, KIND_LIST, KIND_SET, KIND_STRING, KIND_ZSET};
use std::cmp::Ordering;

/// SORT's flags, Redis's: its STORE destination is a key its table entry cannot place, which
/// blocked clients may wait on (`server/blocking.rs`).
const SORT_FLAGS: &[&str] = &["write", "denyoom", "movablekeys"];

pub(super) const SPECS: &[Spec] =
    &[spec("SORT", -2, SORT_FLAGS, ONE, Group::Sort), spec("SORT_RO", -2, R, ONE, Group::Sort)];

/// What the options ask.
struct Options<'a> {
    desc: bool,
    alpha: bool,
    limit: (i64, i64),
    by: Option<&'a [u8]>,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
    /// BY names a key without `*`: the elements keep their order.
    dontsort: bool,
}

/// An element and what it is ordered by.
struct Item {
    elem: Vec<u8>,
    score: f64,
    cmp: Option<Vec<u8>>,
}

/// The options from argument 2 on; `Err(())` once an error is answered.
fn options<'a>(a: &'a Args, readonly: bool, cluster: bool, r: &mut Reply) -> Result<Options<'a>, ()> {
    let mut o = Options {
        desc: false,
        alpha: false,
        limit: (0, -1),
        by: None,
        gets: Vec::new(),
        store: None,
        dontsort: false,
    };
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let w = a.get(j);
        if is(w, "ASC") {
            o.desc = false;
        } else if is(w, "DESC") {
            o.desc = true;
        } else if is(w, "ALPHA") {
            o.alpha = true;
        } else if is(w, "LIMIT") && left >= 2 {
            match (int(a.get(j + 1)), int(a.get(j + 2))) {
                (Some(s), Some(c)) => o.limit = (s, c),
                _ => {
                    r.error(NOT_INT);
                    return Err(());
                }
            }
            j += 2;
        } else if !readonly && is(w, "STORE") && left >= 1 {
            o.store = Some(a.get(j + 1));
            j += 1;
        } else if is(w, "BY") && left >= 1 {
            let p = a.get(j + 1);
            // Cluster mode, as Redis 7.0: the keys a pattern names may be another shard's (or
            // in flight between two), so a pattern that names keys is refused.
            if cluster && p.contains(&b'*') {
                r.error("ERR BY option of SORT denied in Cluster mode.");
                return Err(());
            }
            o.by = Some(p);
            o.dontsort = !p.contains(&b'*');
            j += 1;
        } else if is(w, "GET") && left >= 1 {
            if cluster {
                r.error("ERR GET option of SORT denied in Cluster mode.");
                return Err(());
            }
            o.gets.push(a.get(j + 1));
            j += 1;
        } else {
            r.error(SYNTAX);
            return Err(());
        }
        j += 1;
    }
    Ok(o)
}

/// The value a pattern names for `elem`, as Redis's `lookupKeyByPattern`: `#` is the element;
/// a pattern without `*` names nothing; `prefix*suffix` a string key, `prefix*suffix->field` a
/// hash's field. Another type, or nothing there, is `None`.
fn by_pattern<M: Mem>(cx: &mut Cx<M>, pattern: &[u8], elem: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&c| c == b'*') else { return Ok(None) };
    let rest = &pattern[star + 1..];
    let arrow = rest.windows(2).position(|w| w == b"->").filter(|&i| i + 2 < rest.len());
    let (suffix, field) = match arrow {
        Some(i) => (&rest[..i], Some(&rest[i + 2..])),
        None => (rest, None),
    };
    let key = [&pattern[..star], elem, suffix].concat();
    let Some(f) = cx.store.get(&key, cx.now_ms)? else { return Ok(None) };
    let mut v = Vec::new();
    match field {
        None if f.head.kind == KIND_STRING => {
            cx.store.value_into(&f, &mut v)?;
            Ok(Some(v))
        }
        Some(field) if f.head.kind == KIND_HASH => {
            Ok(super::hashes::field_of(cx, &f, field, &mut v)?.then_some(v))
        }
        _ => Ok(None),
    }
}

/// A double as C's `strtod` reads a whole string (Redis's test for a sort weight): leading white
/// space, a sign, a decimal number with an exponent, or `inf`/`infinity`; nothing else may
/// follow. The empty string is 0 (strtod converts nothing and stops at its end). NaN, and a
/// value out of a double's range (`ERANGE`, overflow or underflow), are refused.
fn strtod(b: &[u8]) -> Option<f64> {
    if b.is_empty() {
        return Some(0.0);
    }
    let start = b.iter().position(|c| !matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let s = std::str::from_utf8(&b[start..]).ok()?;
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if s.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    // Digits, one point, an exponent: what Rust reads beyond that (nan, "infinity" spelt
    // otherwise) strtod reads otherwise or not at all.
    let mut seen_digit = false;
    let mut mantissa_nonzero = false;
    let mut chars = body.bytes().peekable();
    let mut point = false;
    while let Some(&c) = chars.peek() {
        match c {
            b'0'..=b'9' => {
                seen_digit = true;
                mantissa_nonzero |= c != b'0';
            }
            b'.' if !point => point = true,
            _ => break,
        }
        chars.next();
    }
    if !seen_digit {
        return None;
    }
    if let Some(&c) = chars.peek() {
        if c != b'e' && c != b'E' {
            return None;
        }
        chars.next();
        if matches!(chars.peek(), Some(b'+' | b'-')) {
            chars.next();
        }
        if !chars.next().is_some_and(|c| c.is_ascii_digit()) || !chars.all(|c| c.is_ascii_digit()) {
            return None;
        }
    }
    let v: f64 = s.parse().ok()?;
    // Overflow to infinity, or underflow to zero or a subnormal: strtod's ERANGE.
    if v.is_infinite() || (mantissa_nonzero && (v == 0.0 || v.is_subnormal())) {
        return None;
    }
    Some(v)
}

/// C's `strcoll` in the C locale: bytes compared up to the first NUL.
fn c_string(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |i| &b[..i])
}

/// The elements of the live entry `f`, or `None` for a type SORT does not take.
fn elements<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
    Ok(match f.head.kind {
        KIND_LIST => Some(super::lists::elements(cx, f, usize::MAX)?),
        KIND_ZSET => Some(super::zsets::members(cx, f)?),
        KIND_SET => {
            let v = super::set_value::read(cx, f)?;
            let mut out = Vec::with_capacity(v.len().min(1 << 20) as usize);
            v.each(cx, |m| {
                out.push(m.to_vec());
                Ok(true)
            })?;
            Some(out)
        }
        _ => None,
    })
}

pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let Ok(mut o) = options(a, spec.name == "SORT_RO", cx.cluster.is_some(), r) else { return Ok(()) };
    let (_, live) = lookup(cx, a.get(1))?;
    let (kind, elems) = match &live {
        None => (KIND_LIST, Vec::new()),
        Some(f) => match elements(cx, f)? {
            Some(e) => (f.head.kind, e),
            None => {
                r.error(WRONGTYPE);
                return Ok(());
            }
        },
    };
    // A set has no order of its own: stored, or given to a script, it is sorted as strings (as
    // Redis does, so that the result is the same everywhere).
    if o.dontsort && kind == KIND_SET && (o.store.is_some() || s.in_script) {
        (o.dontsort, o.alpha, o.by) = (false, true, None);
    }
    let len = elems.len() as i64;
    // LIMIT as Redis bounds it.
    let mut start = o.limit.0.max(0).min(len);
    let count = o.limit.1.max(-1).min(len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);
    let mut items: Vec<Item> = elems.into_iter().map(|elem| Item { elem, score: 0.0, cmp: None }).collect();
    let mut bad_number = false;
    if o.dontsort {
        // The elements' own order (a list's, a sorted set's), reversed by DESC.
        if o.desc && (kind == KIND_LIST || kind == KIND_ZSET) {
            items.reverse();
        }
    } else {
        for it in items.iter_mut() {
            let by = match o.by {
                Some(p) => match by_pattern(cx, p, &it.elem)? {
                    Some(v) => v,
                    None => continue,
                },
                None => it.elem.clone(),
            };
            if o.alpha {
                if o.by.is_some() {
                    it.cmp = Some(by);
                }
            } else {
                match strtod(&by) {
                    Some(v) => it.score = v,
                    None => bad_number = true,
                }
            }
        }
        let (alpha, by, store) = (o.alpha, o.by.is_some(), o.store.is_some());
        let text = |x: &[u8], y: &[u8]| if store { x.cmp(y) } else { c_string(x).cmp(c_string(y)) };
        items.sort_by(|x, y| {
            let c = if !alpha {
                x.score.partial_cmp(&y.score).unwrap_or(Ordering::Equal).then_with(|| x.elem.cmp(&y.elem))
            } else if by {
                match (&x.cmp, &y.cmp) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(p), Some(q)) => text(p, q),
                }
            } else {
                text(&x.elem, &y.elem)
            };
            if o.desc {
                c.reverse()
            } else {
                c
            }
        });
    }
    if bad_number {
        r.error("ERR One or more scores can't be converted into double");
        return Ok(());
    }
    let picked: &[Item] = if end >= start { &items[start as usize..=end as usize] } else { &[] };
    let Some(dst) = o.store else {
        let n = if o.gets.is_empty() { picked.len() } else { picked.len() * o.gets.len() };
        r.array(n);
        for it in picked {
            if o.gets.is_empty() {
                cx.reply_room(r, it.elem.len() + 16)?;
                r.bulk(&it.elem);
            }
            for g in &o.gets {
                match by_pattern(cx, g, &it.elem)? {
                    Some(v) => {
                        cx.reply_room(r, v.len() + 16)?;
                        r.bulk(&v);
                    }
                    None => r.null(),
                }
            }
        }
        return Ok(());
    };
    let mut out: Vec<Vec<u8>> = Vec::new();
    for it in picked {
        if o.gets.is_empty() {
            out.push(it.elem.clone());
        }
        for g in &o.gets {
            out.push(by_pattern(cx, g, &it.elem)?.unwrap_or_default());
        }
    }
    let (old, _) = lookup(cx, dst)?;
    let n = out.len() as i64;
    if !out.is_empty() {
        super::lists::store_list(cx, dst, old.as_ref(), 0, &out)?;
    } else if let Some(f) = &old {
        cx.store.remove(f)?;
    }
    // The destination is written: the clients that WATCH it see it.
    cx.watches.touch(s.db, dst);
    r.int(n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::strtod;
    use crate::cmd::strings::tests::{arr, b, err, i, Harness};
    use crate::resp::Value;

    fn bulks(v: &[&str]) -> Value {
        arr(v.iter().map(|s| b(s)).collect())
    }

    /// Each answer as a redis-server 7.0.15 gave it to the same commands.
    #[test]
    fn sort_answers_as_redis_does() {
        let mut h = Harness::new();
        h.cmd(&["RPUSH", "l", "3", "1", "2", "10", "1.5", "-inf"]);
        assert_eq!(h.cmd(&["SORT", "l"]), bulks(&["-inf", "1", "1.5", "2", "3", "10"]));
        assert_eq!(h.cmd(&["SORT", "l", "LIMIT", "-5", "2", "DESC"]), bulks(&["10", "3"]));
        assert_eq!(h.cmd(&["SORT", "l", "LIMIT", "10", "2"]), arr(vec![]));
        assert_eq!(h.cmd(&["SORT", "l", "ALPHA", "DESC", "LIMIT", "0", "3"]), bulks(&["3", "2", "10"]));
        h.cmd(&["MSET", "w_3", "30", "w_1", "10", "w_2", "20", "w_10", "5"]);
        assert_eq!(h.cmd(&["SORT", "l", "BY", "w_*"]), bulks(&["-inf", "1.5", "10", "1", "2", "3"]));
        assert_eq!(h.cmd(&["SORT", "l", "BY", "w_*", "ALPHA"]), bulks(&["1.5", "-inf", "1", "2", "3", "10"]));
        assert_eq!(h.cmd(&["SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "2"]), bulks(&["1.5", "10"]));
        let got = h.cmd(&["SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*", "LIMIT", "2", "2"]);
        assert_eq!(got, bulks(&["10", "5", "1", "10"]));
        h.cmd(&["HSET", "h_3", "f", "9"]);
        h.cmd(&["HSET", "h_1", "f", "1"]);
        let got = h.cmd(&["SORT", "l", "BY", "h_*->f", "GET", "h_*->f", "GET", "#", "LIMIT", "3", "3"]);
        assert_eq!(got, arr(vec![Value::Null, b("2"), b("1"), b("1"), b("9"), b("3")]));
        assert_eq!(h.cmd(&["SORT", "l", "BY", "w_*", "GET", "#", "GET", "nokey_*", "STORE", "d"]), i(12));
        assert_eq!(h.cmd(&["LRANGE", "d", "0", "3"]), bulks(&["-inf", "", "1.5", ""]));
        assert_eq!(h.cmd(&["SORT", "nokey", "STORE", "d"]), i(0));
        assert_eq!(h.cmd(&["EXISTS", "d"]), i(0), "an empty result deletes the destination");
        h.cmd(&["RPUSH", "bad", "a", "b"]);
        assert_eq!(err(&h.cmd(&["SORT", "bad"])), "ERR One or more scores can't be converted into double");
        assert_eq!(h.cmd(&["SORT", "bad", "ALPHA"]), bulks(&["a", "b"]));
        h.cmd(&["SET", "s", "x"]);
        assert!(err(&h.cmd(&["SORT", "s"])).starts_with("WRONGTYPE"));
        assert_eq!(
            err(&h.cmd(&["SORT", "l", "LIMIT", "a", "b"])),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(err(&h.cmd(&["SORT_RO", "l", "STORE", "x"])), "ERR syntax error");
        h.cmd(&["RPUSH", "e", "", "2"]);
        assert_eq!(h.cmd(&["SORT", "e"]), bulks(&["", "2"]), "an empty weight is 0");
        h.cmd(&["SADD", "set", "3", "1", "2"]);
        assert_eq!(h.cmd(&["SORT", "set"]), bulks(&["1", "2", "3"]));
        h.cmd(&["SADD", "strs", "b", "c", "a"]);
        assert_eq!(h.cmd(&["SORT", "strs", "BY", "nosort", "STORE", "d"]), i(3));
        assert_eq!(
            h.cmd(&["LRANGE", "d", "0", "-1"]),
            bulks(&["a", "b", "c"]),
            "a set's STORE BY nosort is sorted"
        );
    }

    #[test]
    fn weights_read_as_strtod_reads_them() {
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b"  1.5"), Some(1.5));
        assert_eq!(strtod(b"-3e2"), Some(-300.0));
        assert_eq!(strtod(b"+.5"), Some(0.5));
        assert_eq!(strtod(b"5."), Some(5.0));
        assert_eq!(strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod(b"Infinity"), Some(f64::INFINITY));
        for bad in [&b" "[..], b"1 ", b"abc", b"nan", b"1e", b"1e+", b".", b"--1", b"1e999", b"1e-400"] {
            assert_eq!(strtod(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(strtod(b"0e-400"), Some(0.0));
    }
}
