//! `cmsgpack`: MessagePack with lua-cmsgpack's rules (what Redis embeds): integral numbers as
//! the smallest integer, others as a float32 when exact else a float64, tables of keys 1..n as
//! arrays, nesting past 16 written as nil; `unpack`, `unpack_one` and `unpack_limit` with its
//! offsets (-1 once the input is consumed).

use mlua::{Lua, MultiValue, Table, Value};

/// Tables nested deeper than this are written as nil.
const MAX_NESTING: usize = 16;
/// Deepest nesting `unpack` follows (the input is refused past it).
const MAX_DECODE_DEPTH: usize = 512;

fn is_array(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut count, mut max) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as usize,
            Value::Number(n) if n >= 1.0 && n.floor() == n => n as usize,
            _ => return Ok(None),
        };
        count += 1;
        max = max.max(n);
    }
    Ok((count == max).then_some(count))
}

fn int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        let u = n as u64;
        if u < 128 {
            out.push(u as u8);
        } else if u < 256 {
            out.extend_from_slice(&[0xcc, u as u8]);
        } else if u < 65536 {
            out.push(0xcd);
            out.extend_from_slice(&(u as u16).to_be_bytes());
        } else if u <= u64::from(u32::MAX) {
            out.push(0xce);
            out.extend_from_slice(&(u as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&u.to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn number(out: &mut Vec<u8>, n: f64) {
    if n.is_finite() && n.floor() == n && (-9.223372036854776e18..9.223372036854776e18).contains(&n) {
        int(out, n as i64);
    } else if (n as f32) as f64 == n || n.is_nan() {
        out.push(0xca);
        out.extend_from_slice(&(n as f32).to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn len_head(out: &mut Vec<u8>, n: usize, fix: u8, fix_max: usize, b16: u8, b32: u8) {
    if n < fix_max {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode(out: &mut Vec<u8>, v: &Value, level: usize) -> mlua::Result<()> {
    match v {
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => int(out, *i),
        Value::Number(n) => number(out, *n),
        Value::String(s) => {
            let b = s.as_bytes();
            if b.len() < 32 {
                out.push(0xa0 | b.len() as u8);
            } else if b.len() <= 0xff {
                out.extend_from_slice(&[0xd9, b.len() as u8]);
            } else if b.len() <= 0xffff {
                out.push(0xda);
                out.extend_from_slice(&(b.len() as u16).to_be_bytes());
            } else {
                out.push(0xdb);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            }
            out.extend_from_slice(&b);
        }
        Value::Table(t) if level < MAX_NESTING => match is_array(t)? {
            Some(n) => {
                len_head(out, n, 0x90, 16, 0xdc, 0xdd);
                for i in 1..=n {
                    encode(out, &t.raw_get::<Value>(i)?, level + 1)?;
                }
            }
            None => {
                // Two passes over the pairs: holding them all would take a Lua stack slot each.
                let mut n = 0usize;
                t.for_each::<Value, Value>(|_, _| {
                    n += 1;
                    Ok(())
                })?;
                len_head(out, n, 0x80, 16, 0xde, 0xdf);
                t.for_each::<Value, Value>(|k, v| {
                    encode(out, &k, level + 1)?;
                    encode(out, &v, level + 1)
                })?;
            }
        },
        _ => out.push(0xc0),
    }
    Ok(())
}

#[derive(Debug)]
enum Bad {
    Eof,
    Format,
}

struct Cur<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cur<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Bad> {
        let end = self.at.checked_add(n).ok_or(Bad::Eof)?;
        let b = self.s.get(self.at..end).ok_or(Bad::Eof)?;
        self.at = end;
        Ok(b)
    }
    fn uint(&mut self, n: usize) -> Result<u64, Bad> {
        Ok(self.take(n)?.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
    }
}

fn decode(lua: &Lua, c: &mut Cur, depth: usize) -> Result<mlua::Result<Value>, Bad> {
    if depth > MAX_DECODE_DEPTH {
        return Err(Bad::Format);
    }
    let t = c.take(1)?[0];
    let v = match t {
        0x00..=0x7f => Value::Number(f64::from(t)),
        0xe0..=0xff => Value::Number(f64::from(t as i8)),
        0xc0 => Value::Nil,
        0xc2 => Value::Boolean(false),
        0xc3 => Value::Boolean(true),
        0xcc => Value::Number(c.uint(1)? as f64),
        0xcd => Value::Number(c.uint(2)? as f64),
        0xce => Value::Number(c.uint(4)? as f64),
        0xcf => Value::Number(c.uint(8)? as f64),
        0xd0 => Value::Number(f64::from(c.uint(1)? as u8 as i8)),
        0xd1 => Value::Number(f64::from(c.uint(2)? as u16 as i16)),
        0xd2 => Value::Number(f64::from(c.uint(4)? as u32 as i32)),
        0xd3 => Value::Number(c.uint(8)? as i64 as f64),
        0xca => Value::Number(f64::from(f32::from_bits(c.uint(4)? as u32))),
        0xcb => Value::Number(f64::from_bits(c.uint(8)?)),
        0xa0..=0xbf | 0xd9 | 0xda | 0xdb | 0xc4 | 0xc5 | 0xc6 => {
            let n = match t {
                0xa0..=0xbf => usize::from(t & 0x1f),
                0xd9 | 0xc4 => c.uint(1)? as usize,
                0xda | 0xc5 => c.uint(2)? as usize,
                _ => c.uint(4)? as usize,
            };
            let b = c.take(n)?;
            match lua.create_string(b) {
                Ok(s) => Value::String(s),
                Err(e) => return Ok(Err(e)),
            }
        }
        0x90..=0x9f | 0xdc | 0xdd | 0x80..=0x8f | 0xde | 0xdf => {
            let (n, map) = match t {
                0x90..=0x9f => (u64::from(t & 0x0f), false),
                0x80..=0x8f => (u64::from(t & 0x0f), true),
                0xdc => (c.uint(2)?, false),
                0xdd => (c.uint(4)?, false),
                0xde => (c.uint(2)?, true),
                _ => (c.uint(4)?, true),
            };
            let table = match lua.create_table() {
                Ok(t) => t,
                Err(e) => return Ok(Err(e)),
            };
            for i in 0..n {
                let r = if map {
                    let k = decode(lua, c, depth + 1)?;
                    let v = decode(lua, c, depth + 1)?;
                    match (k, v) {
                        (Ok(Value::Nil), Ok(_)) => Ok(()),
                        (Ok(k), Ok(v)) => table.raw_set(k, v),
                        (Err(e), _) | (_, Err(e)) => Err(e),
                    }
                } else {
                    match decode(lua, c, depth + 1)? {
                        Ok(v) => table.raw_set(i + 1, v),
                        Err(e) => Err(e),
                    }
                };
                if let Err(e) = r {
                    return Ok(Err(e));
                }
            }
            Value::Table(table)
        }
        _ => return Err(Bad::Format),
    };
    Ok(Ok(v))
}

fn unpack_full(lua: &Lua, s: &[u8], limit: Option<i64>, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit.is_some_and(|l| l < 0) {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            s.len()
        )));
    }
    if offset as usize > s.len() {
        return Err(mlua::Error::runtime(format!(
            "Start offset {offset} greater than input length {}.",
            s.len()
        )));
    }
    let mut c = Cur { s, at: offset as usize };
    let mut out = Vec::new();
    let max = match limit {
        None | Some(0) => usize::MAX,
        Some(l) => l as usize,
    };
    while c.at < s.len() && out.len() < max {
        match decode(lua, &mut c, 0) {
            Ok(v) => out.push(v?),
            Err(Bad::Eof) => return Err(mlua::Error::runtime("Missing bytes in input.")),
            Err(Bad::Format) => return Err(mlua::Error::runtime("Bad data format in input.")),
        }
    }
    if limit.is_some() {
        let next = if c.at == s.len() { -1.0 } else { c.at as f64 };
        out.insert(0, Value::Number(next));
    }
    Ok(MultiValue::from_iter(out))
}

fn num(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Integer(i)) => *i,
        Some(Value::Number(n)) => *n as i64,
        Some(Value::String(s)) => s.to_str().ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        _ => 0,
    }
}

/// The `cmsgpack` table.
pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, a: MultiValue| {
            if a.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for v in &a {
                encode(&mut out, v, 0)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, s: mlua::LuaString| unpack_full(lua, &s.as_bytes(), None, 0))?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, (s, rest): (mlua::LuaString, MultiValue)| {
            unpack_full(lua, &s.as_bytes(), Some(1), num(rest.front()))
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(|lua, (s, rest): (mlua::LuaString, MultiValue)| {
            unpack_full(lua, &s.as_bytes(), Some(num(rest.front())), num(rest.get(1)))
        })?,
    )?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    fn hex(lua: &mlua::Lua, code: &str) -> String {
        let s: mlua::LuaString = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn encodings_as_lua_cmsgpack() {
        let lua = mlua::Lua::new();
        lua.globals().set("cmsgpack", super::open(&lua).unwrap()).unwrap();
        assert_eq!(hex(&lua, "return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(hex(&lua, "return cmsgpack.pack(-1099511627776)"), "d3ffffff0000000000");
        assert_eq!(hex(&lua, "return cmsgpack.pack({1, 2, 'a'}, true, nil)"), "930102a161c3c0");
        let ok: bool = lua
            .load(
                "local e = cmsgpack.pack('a', {x = 1, y = {1, 2}}, 300) \
                 local o, v = cmsgpack.unpack_limit(e, 1, 0) \
                 local o2, w = cmsgpack.unpack_limit(e, 1, o) \
                 local o3, z = cmsgpack.unpack_one(e, o2) \
                 return v == 'a' and w.y[2] == 2 and z == 300 and o3 == -1 \
                   and select('#', cmsgpack.unpack(e)) == 3",
            )
            .eval()
            .unwrap();
        assert!(ok);
        let deep = "return cmsgpack.unpack(string.rep('\\145', 100000))";
        assert!(lua.load(deep).exec().unwrap_err().to_string().contains("Bad data format"));
        let cut = "return cmsgpack.unpack('\\221\\255\\255\\255\\255')";
        assert!(lua.load(cut).exec().unwrap_err().to_string().contains("Missing bytes"));
    }
}
