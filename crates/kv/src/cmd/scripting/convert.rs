//! Redis's conversions between replies and Lua values, both ways: a command's reply (in the
//! protocol the script chose with `redis.setresp`) into what `redis.call` returns, and the
//! script's return value into the caller's reply (RESP2 or RESP3).

use crate::resp::{Proto, Reply};
use mlua::{Lua, Table, Value};

/// Deepest a script's return value is followed: deeper, the reply holds Redis's
/// `reached lua stack limit` error there instead.
pub const MAX_REPLY_DEPTH: usize = 1000;

/// A number as C's `%.17g` writes it (how Redis turns a Lua number into a command argument).
pub fn fmt_g17(x: f64) -> String {
    fmt_g(x, 17)
}

/// A number as C's `%.<prec>g` writes it.
pub fn fmt_g(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf".into() } else { "inf".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let prec = prec.max(1);
    let sci = format!("{:.*e}", prec - 1, x);
    let (mant, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is a number");
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if exp < -4 || exp >= prec as i32 {
        let d = digits.trim_end_matches('0');
        out.push_str(&d[..1]);
        if d.len() > 1 {
            out.push('.');
            out.push_str(&d[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(digits.trim_end_matches('0'));
    } else {
        let int_len = exp as usize + 1;
        out.push_str(&digits[..int_len]);
        let frac = digits[int_len..].trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
    }
    out
}

/// An error table as `redis.call` raises one: `{err = "CODE message"}` from a reply's error
/// text (its `-` gone, a missing code made `ERR`, the line end trimmed), as Redis's
/// `luaPushErrorBuff`.
pub fn error_table(lua: &Lua, msg: &[u8]) -> mlua::Result<Table> {
    let msg = msg.strip_suffix(b"\r\n").unwrap_or(msg);
    let text: Vec<u8> = match msg.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(sp) => {
                let (code, m) = (&rest[..sp], &rest[sp + 1..]);
                let m = trim_crlf(m);
                [code, b" ", m].concat()
            }
            None => [&b"ERR "[..], trim_crlf(rest)].concat(),
        },
        None => [&b"ERR "[..], trim_crlf(msg)].concat(),
    };
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(&text)?)?;
    Ok(t)
}

fn trim_crlf(mut s: &[u8]) -> &[u8] {
    while let [b'\r' | b'\n', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b'\r' | b'\n'] = s {
        s = rest;
    }
    s
}

/// A table with one string field (`{ok = "OK"}`).
fn single(lua: &Lua, field: &str, v: Value) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set(field, v)?;
    Ok(Value::Table(t))
}

/// Reads a whole reply the server wrote into what `redis.call` returns, and whether it is an
/// error.
pub fn reply_to_lua(lua: &Lua, buf: &[u8]) -> mlua::Result<(Value, bool)> {
    let mut at = 0;
    let v = parse(lua, buf, &mut at, 0)?;
    Ok((v, buf.first() == Some(&b'-')))
}

fn malformed() -> mlua::Error {
    mlua::Error::runtime("a command's reply could not be read (a server bug)")
}

fn line<'a>(buf: &'a [u8], at: &mut usize) -> mlua::Result<&'a [u8]> {
    let rest = buf.get(*at..).ok_or_else(malformed)?;
    let end = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(malformed)?;
    *at += end + 2;
    Ok(&rest[..end])
}

fn number(s: &[u8]) -> mlua::Result<i64> {
    std::str::from_utf8(s).ok().and_then(|s| s.parse().ok()).ok_or_else(malformed)
}

fn parse(lua: &Lua, buf: &[u8], at: &mut usize, depth: usize) -> mlua::Result<Value> {
    if depth > 64 {
        return Err(malformed());
    }
    let t = *buf.get(*at).ok_or_else(malformed)?;
    *at += 1;
    let l = line(buf, at)?;
    Ok(match t {
        b'+' => single(lua, "ok", Value::String(lua.create_string(l)?))?,
        b'-' => Value::Table(error_table(lua, &[b"-", l].concat())?),
        b':' => Value::Number(number(l)? as f64),
        b'$' | b'=' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            let n = n as usize;
            let data = buf.get(*at..*at + n).ok_or_else(malformed)?;
            *at += n + 2;
            if t == b'$' {
                Value::String(lua.create_string(data)?)
            } else {
                let (format, s) =
                    if data.len() >= 4 { (&data[..3], &data[4..]) } else { (&b"txt"[..], data) };
                let inner = lua.create_table()?;
                inner.raw_set("string", lua.create_string(s)?)?;
                inner.raw_set("format", lua.create_string(format)?)?;
                single(lua, "verbatim_string", Value::Table(inner))?
            }
        }
        b'*' | b'~' | b'%' | b'|' => {
            let n = number(l)?;
            if n < 0 {
                return Ok(Value::Boolean(false));
            }
            match t {
                b'*' => {
                    let arr = lua.create_table()?;
                    for i in 0..n {
                        let v = parse(lua, buf, at, depth + 1)?;
                        arr.raw_set(i + 1, v)?;
                    }
                    Value::Table(arr)
                }
                b'~' => {
                    let set = lua.create_table()?;
                    for _ in 0..n {
                        let v = parse(lua, buf, at, depth + 1)?;
                        if !v.is_nil() {
                            set.raw_set(v, true)?;
                        }
                    }
                    single(lua, "set", Value::Table(set))?
                }
                b'%' => {
                    let map = lua.create_table()?;
                    for _ in 0..n {
                        let k = parse(lua, buf, at, depth + 1)?;
                        let v = parse(lua, buf, at, depth + 1)?;
                        if !k.is_nil() {
                            map.raw_set(k, v)?;
                        }
                    }
                    single(lua, "map", Value::Table(map))?
                }
                _ => {
                    // An attribute: read and dropped; the reply follows it.
                    for _ in 0..2 * n {
                        parse(lua, buf, at, depth + 1)?;
                    }
                    parse(lua, buf, at, depth)?
                }
            }
        }
        b'_' => Value::Nil,
        b'#' => Value::Boolean(l == b"t"),
        b',' => {
            let s = std::str::from_utf8(l).map_err(|_| malformed())?;
            let d = match s {
                "inf" => f64::INFINITY,
                "-inf" => f64::NEG_INFINITY,
                "nan" | "-nan" => f64::NAN,
                s => s.parse().map_err(|_| malformed())?,
            };
            single(lua, "double", Value::Number(d))?
        }
        b'(' => single(lua, "big_number", Value::String(lua.create_string(l)?))?,
        _ => return Err(malformed()),
    })
}

/// Why a script's value could not be sent.
#[derive(Debug)]
pub enum ReplyTooLarge {
    /// It would pass the client's output limit.
    OutputLimit,
}

/// Writes a script's return value as the caller's reply, as Redis's `luaReplyToRedisReply`:
/// `resp` is the protocol the script chose (it decides how booleans go to a RESP2 script's
/// caller); `next` is Lua's raw `next` (a map is walked with it). Stops once the reply passes
/// `limit` bytes.
pub fn lua_to_reply(
    v: &Value,
    resp: Proto,
    r: &mut Reply,
    limit: usize,
    next: &mlua::Function,
) -> Result<(), ReplyTooLarge> {
    write_value(v, resp, r, limit, next)
}

fn room(r: &Reply, limit: usize) -> Result<(), ReplyTooLarge> {
    if r.buf.len() > limit {
        return Err(ReplyTooLarge::OutputLimit);
    }
    Ok(())
}

fn text_of(t: &Table, key: &str) -> Option<mlua::LuaString> {
    match t.raw_get::<Value>(key) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn mapped_crlf(b: &[u8]) -> Vec<u8> {
    b.iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect()
}

/// A double as `addReplyDouble` writes it.
pub fn write_double(r: &mut Reply, d: f64) {
    let s = fmt_g17(d);
    match r.proto {
        Proto::Resp2 => r.bulk(s.as_bytes()),
        Proto::Resp3 => {
            r.buf.push(b',');
            r.buf.extend_from_slice(s.as_bytes());
            r.buf.extend_from_slice(b"\r\n");
        }
    }
}

/// Where the writer is in a collection it has written the head of.
enum Cursor {
    /// The next index of an array of `n`.
    Array(Table, usize, usize),
    /// The last key of a map written (`Nil`: none yet), and the value still to write.
    Map(Table, Value, Option<Value>),
    /// The last member of a set written.
    Set(Table, Value),
}

fn write_value(
    v: &Value,
    resp: Proto,
    r: &mut Reply,
    limit: usize,
    next: &mlua::Function,
) -> Result<(), ReplyTooLarge> {
    // An explicit stack of cursors: a hostile script's nesting costs heap, never the thread's
    // stack, and a wide table is walked without holding its elements.
    let mut stack: Vec<Cursor> = Vec::new();
    let mut pending = Some(v.clone());
    loop {
        if let Some(v) = pending.take() {
            room(r, limit)?;
            if stack.len() >= MAX_REPLY_DEPTH {
                r.error("ERR reached lua stack limit");
            } else if let Some(c) = write_one(&v, resp, r, next)? {
                stack.push(c);
            }
        }
        let Some(top) = stack.last_mut() else { return Ok(()) };
        match top {
            Cursor::Array(t, i, n) => {
                if *i > *n {
                    stack.pop();
                    continue;
                }
                pending = Some(t.raw_get::<Value>(*i).unwrap_or(Value::Nil));
                *i += 1;
            }
            Cursor::Map(t, key, value) => {
                if let Some(v) = value.take() {
                    pending = Some(v);
                    continue;
                }
                match next.call::<(Value, Value)>((t.clone(), key.clone())) {
                    Ok((Value::Nil, _)) | Err(_) => {
                        stack.pop();
                    }
                    Ok((k, v)) => {
                        *key = k.clone();
                        *value = Some(v);
                        pending = Some(k);
                    }
                }
            }
            Cursor::Set(t, key) => match next.call::<(Value, Value)>((t.clone(), key.clone())) {
                Ok((Value::Nil, _)) | Err(_) => {
                    stack.pop();
                }
                Ok((k, _)) => {
                    *key = k.clone();
                    pending = Some(k);
                }
            },
        }
    }
}

/// Keys of a table, counted with `next`.
fn count(t: &Table, next: &mlua::Function) -> usize {
    let (mut n, mut key) = (0, Value::Nil);
    while let Ok((k, _)) = next.call::<(Value, Value)>((t.clone(), key)) {
        if k.is_nil() {
            break;
        }
        n += 1;
        key = k;
    }
    n
}

/// A Lua number as Redis makes it an integer reply, a C cast to `long long`: on x86-64
/// (`cvttsd2si`) a number past the integers, or NaN, gives the smallest integer.
fn c_integer(n: f64) -> i64 {
    if n.is_nan() || !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// Writes one value, or the head of a collection: returns the cursor of its elements.
fn write_one(
    v: &Value,
    resp: Proto,
    r: &mut Reply,
    next: &mlua::Function,
) -> Result<Option<Cursor>, ReplyTooLarge> {
    match v {
        Value::String(s) => r.bulk(&s.as_bytes()),
        Value::Boolean(b) => match resp {
            Proto::Resp2 if *b => r.int(1),
            Proto::Resp2 => r.null(),
            Proto::Resp3 => r.boolean(*b),
        },
        Value::Integer(i) => r.int(*i),
        Value::Number(n) => r.int(c_integer(*n)),
        Value::Table(t) => {
            if let Some(e) = text_of(t, "err") {
                r.error_bytes(&e.as_bytes());
                return Ok(None);
            }
            if let Some(ok) = text_of(t, "ok") {
                r.simple(&mapped_crlf(&ok.as_bytes()));
                return Ok(None);
            }
            match t.raw_get::<Value>("double") {
                Ok(Value::Number(d)) => {
                    write_double(r, d);
                    return Ok(None);
                }
                Ok(Value::Integer(d)) => {
                    write_double(r, d as f64);
                    return Ok(None);
                }
                _ => {}
            }
            if let Some(n) = text_of(t, "big_number") {
                let n = mapped_crlf(&n.as_bytes());
                match r.proto {
                    Proto::Resp2 => r.bulk(&n),
                    Proto::Resp3 => {
                        r.buf.push(b'(');
                        r.buf.extend_from_slice(&n);
                        r.buf.extend_from_slice(b"\r\n");
                    }
                }
                return Ok(None);
            }
            if let Ok(Value::Table(vs)) = t.raw_get::<Value>("verbatim_string") {
                if let (Some(f), Some(s)) = (text_of(&vs, "format"), text_of(&vs, "string")) {
                    let (f, s) = (f.as_bytes(), s.as_bytes());
                    match r.proto {
                        Proto::Resp2 => r.bulk(&s),
                        Proto::Resp3 => {
                            let mut fmt = f.to_vec();
                            fmt.resize(3, b' ');
                            r.buf.extend_from_slice(format!("={}\r\n", s.len() + 4).as_bytes());
                            r.buf.extend_from_slice(&fmt);
                            r.buf.push(b':');
                            r.buf.extend_from_slice(&s);
                            r.buf.extend_from_slice(b"\r\n");
                        }
                    }
                    return Ok(None);
                }
            }
            if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
                r.map(count(&m, next));
                return Ok(Some(Cursor::Map(m, Value::Nil, None)));
            }
            if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
                r.set(count(&s, next));
                return Ok(Some(Cursor::Set(s, Value::Nil)));
            }
            let mut n = 0;
            while !matches!(t.raw_get::<Value>(n + 1), Ok(Value::Nil) | Err(_)) {
                n += 1;
            }
            r.array(n);
            return Ok(Some(Cursor::Array(t.clone(), 1, n)));
        }
        _ => r.null(),
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g17_as_c_writes_it() {
        for (x, s) in [
            (0.1, "0.10000000000000001"),
            (100.5, "100.5"),
            (9007199254740991.0, "9007199254740991"),
            (1e20, "1e+20"),
            (1.5e-5, "1.5e-05"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-3.0, "-3"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
        ] {
            assert_eq!(fmt_g17(x), s, "{x}");
        }
        assert_eq!(fmt_g(0.3e-3, 14), "0.0003");
        assert_eq!(fmt_g(1023.2, 14), "1023.2");
    }

    #[test]
    fn replies_become_lua_values_as_in_redis() {
        let lua = Lua::new();
        let (v, err) = reply_to_lua(&lua, b"-ERR bad thing\r\n").unwrap();
        assert!(err);
        let Value::Table(t) = v else { panic!("an error is a table") };
        assert_eq!(t.raw_get::<String>("err").unwrap(), "ERR bad thing");
        let (v, _) = reply_to_lua(&lua, b"*3\r\n:1\r\n$-1\r\n$2\r\nhi\r\n").unwrap();
        let Value::Table(t) = v else { panic!("an array is a table") };
        assert_eq!(t.raw_get::<f64>(1).unwrap(), 1.0);
        assert!(!t.raw_get::<bool>(2).unwrap());
        assert_eq!(t.raw_get::<String>(3).unwrap(), "hi");
        let (v, _) = reply_to_lua(&lua, b"%1\r\n+a\r\n#t\r\n").unwrap();
        let Value::Table(t) = v else { panic!("a map is a table") };
        assert!(t.raw_get::<Table>("map").is_ok());
        assert!(reply_to_lua(&lua, b"*2\r\n:1\r\n").is_err(), "a cut reply is refused, not a panic");
    }

    #[test]
    fn values_become_replies() {
        let lua = Lua::new();
        let next: mlua::Function = lua.globals().get("next").unwrap();
        let v: Value = lua.load("return {1, 'a', {ok='fine'}, true, false, 2.9}").eval().unwrap();
        let mut b = Vec::new();
        lua_to_reply(&v, Proto::Resp2, &mut Reply { buf: &mut b, proto: Proto::Resp2 }, 1 << 20, &next)
            .unwrap();
        assert_eq!(b, b"*6\r\n:1\r\n$1\r\na\r\n+fine\r\n:1\r\n$-1\r\n:2\r\n");
        let v: Value = lua.load("local a = {} ; a[1] = a ; return a").eval().unwrap();
        let mut b = Vec::new();
        lua_to_reply(&v, Proto::Resp2, &mut Reply { buf: &mut b, proto: Proto::Resp2 }, 1 << 20, &next)
            .unwrap();
        assert!(b.ends_with(b"-ERR reached lua stack limit\r\n"));
        let mut b = Vec::new();
        let big: Value =
            lua.load("local t = {} for i=1,10000 do t[i] = 'xxxxxxxx' end return t").eval().unwrap();
        assert!(lua_to_reply(
            &big,
            Proto::Resp2,
            &mut Reply { buf: &mut b, proto: Proto::Resp2 },
            1000,
            &next
        )
        .is_err());
        let wide: Value =
            lua.load("local t = {} for i=1,100000 do t['k' .. i] = i end return {map = t}").eval().unwrap();
        let mut b = Vec::new();
        lua_to_reply(&wide, Proto::Resp3, &mut Reply { buf: &mut b, proto: Proto::Resp3 }, 1 << 30, &next)
            .unwrap();
        assert!(b.starts_with(b"%100000\r\n"));
    }
}
