//! `cjson`: JSON encoding and decoding with Lua CJSON 2.1's rules and settings (what Redis
//! embeds): arrays are tables of keys 1..n (not too sparse), `cjson.null` is null, numbers are
//! written with 14 significant digits, nesting is bounded.

use super::super::convert::fmt_g;
use mlua::{LightUserData, Lua, MultiValue, Table, Value};
use std::cell::RefCell;
use std::rc::Rc;

/// The deepest nesting either way, whatever the settings say (the coders recurse).
const MAX_DEPTH: usize = 1000;

#[derive(Clone, Copy)]
struct Config {
    encode_max_depth: usize,
    decode_max_depth: usize,
    /// 0: refused, 1: written as is, 2: written as null.
    encode_invalid_numbers: u8,
    decode_invalid_numbers: bool,
    precision: usize,
    sparse_convert: bool,
    sparse_ratio: usize,
    sparse_safe: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            precision: 14,
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
        }
    }
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn err(msg: String) -> mlua::Error {
    mlua::Error::runtime(msg)
}

fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            8 => out.extend_from_slice(b"\\b"),
            12 => out.extend_from_slice(b"\\f"),
            c if c < 32 || c == 127 => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode_number(cfg: &Config, out: &mut Vec<u8>, n: f64) -> mlua::Result<()> {
    if !n.is_finite() {
        match cfg.encode_invalid_numbers {
            0 => return Err(err("Cannot serialise number: must not be NaN or Inf".into())),
            2 => {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
    }
    out.extend_from_slice(fmt_g(n, cfg.precision).as_bytes());
    Ok(())
}

/// The length of `t` as an array, `None` for an object, as CJSON's `lua_array_length`.
fn array_length(cfg: &Config, t: &Table) -> mlua::Result<Option<usize>> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as f64,
            Value::Number(n) if n >= 1.0 && n.floor() == n => n,
            _ => return Ok(None),
        };
        max = max.max(n as usize);
        items += 1;
    }
    if cfg.sparse_ratio > 0 && max > items * cfg.sparse_ratio && max > cfg.sparse_safe {
        if !cfg.sparse_convert {
            return Err(err("Cannot serialise table: excessively sparse array".into()));
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn encode(cfg: &Config, out: &mut Vec<u8>, v: &Value, depth: usize) -> mlua::Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(u) if u.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => encode_number(cfg, out, *i as f64)?,
        Value::Number(n) => encode_number(cfg, out, *n)?,
        Value::String(s) => encode_string(out, &s.as_bytes()),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > cfg.encode_max_depth.min(MAX_DEPTH) {
                return Err(err(format!("Cannot serialise, excessive nesting ({depth})")));
            }
            match array_length(cfg, t)? {
                Some(n) => {
                    out.push(b'[');
                    for i in 1..=n {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(cfg, out, &t.raw_get::<Value>(i)?, depth)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.pairs::<Value, Value>() {
                        let (k, v) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(s) => encode_string(out, &s.as_bytes()),
                            Value::Integer(i) => {
                                out.push(b'"');
                                encode_number(cfg, out, *i as f64)?;
                                out.push(b'"');
                            }
                            Value::Number(n) => {
                                out.push(b'"');
                                encode_number(cfg, out, *n)?;
                                out.push(b'"');
                            }
                            other => {
                                return Err(err(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    other.type_name()
                                )))
                            }
                        }
                        out.push(b':');
                        encode(cfg, out, &v, depth)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => return Err(err(format!("Cannot serialise {}: type not supported", other.type_name()))),
    }
    Ok(())
}

struct Decoder<'a> {
    lua: &'a Lua,
    s: &'a [u8],
    at: usize,
    cfg: Config,
}

impl Decoder<'_> {
    fn ws(&mut self) {
        while self.at < self.s.len() && matches!(self.s[self.at], b' ' | b'\t' | b'\n' | b'\r') {
            self.at += 1;
        }
    }

    fn fail(&self, what: &str) -> mlua::Error {
        let found = match self.s.get(self.at) {
            None => "the end".to_string(),
            Some(_) => "invalid token".to_string(),
        };
        err(format!("Expected {what} but found {found} at character {}", self.at + 1))
    }

    fn value(&mut self, depth: usize) -> mlua::Result<Value> {
        self.ws();
        let Some(&c) = self.s.get(self.at) else { return Err(self.fail("value")) };
        match c {
            b'{' | b'[' => {
                let depth = depth + 1;
                if depth > self.cfg.decode_max_depth.min(MAX_DEPTH) {
                    return Err(err(format!(
                        "Found too many nested data structures ({depth}) at character {}",
                        self.at + 1
                    )));
                }
                self.at += 1;
                let t = self.lua.create_table()?;
                let close = if c == b'{' { b'}' } else { b']' };
                self.ws();
                if self.s.get(self.at) == Some(&close) {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                let mut i = 1;
                loop {
                    if c == b'{' {
                        self.ws();
                        if self.s.get(self.at) != Some(&b'"') {
                            return Err(self.fail("object key string"));
                        }
                        let k = self.string()?;
                        self.ws();
                        if self.s.get(self.at) != Some(&b':') {
                            return Err(self.fail("colon"));
                        }
                        self.at += 1;
                        let v = self.value(depth)?;
                        t.raw_set(k, v)?;
                    } else {
                        let v = self.value(depth)?;
                        t.raw_set(i, v)?;
                        i += 1;
                    }
                    self.ws();
                    match self.s.get(self.at) {
                        Some(b',') => self.at += 1,
                        Some(&x) if x == close => {
                            self.at += 1;
                            return Ok(Value::Table(t));
                        }
                        _ => {
                            return Err(self.fail(if c == b'{' {
                                "comma or object end"
                            } else {
                                "comma or array end"
                            }))
                        }
                    }
                }
            }
            b'"' => Ok(Value::String(self.string()?)),
            b't' if self.s[self.at..].starts_with(b"true") => {
                self.at += 4;
                Ok(Value::Boolean(true))
            }
            b'f' if self.s[self.at..].starts_with(b"false") => {
                self.at += 5;
                Ok(Value::Boolean(false))
            }
            b'n' if self.s[self.at..].starts_with(b"null") => {
                self.at += 4;
                Ok(null())
            }
            _ => self.number(),
        }
    }

    fn number(&mut self) -> mlua::Result<Value> {
        let start = self.at;
        while self.at < self.s.len()
            && matches!(self.s[self.at], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' | b'a'..=b'z' | b'A'..=b'Z')
        {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
        let lower = text.to_ascii_lowercase();
        let invalid = matches!(lower.trim_start_matches(['-', '+']), "inf" | "infinity" | "nan");
        let n = if invalid && self.cfg.decode_invalid_numbers {
            text.parse::<f64>().ok().or_else(|| lower.contains("nan").then_some(f64::NAN))
        } else if invalid || text.starts_with('+') || text.contains("0x") {
            None
        } else {
            text.parse::<f64>().ok()
        };
        match n {
            Some(n) => Ok(Value::Number(n)),
            None => {
                self.at = start;
                Err(self.fail("value"))
            }
        }
    }

    fn hex4(&mut self) -> mlua::Result<u32> {
        let h = self.s.get(self.at..self.at + 4).and_then(|h| std::str::from_utf8(h).ok());
        let v = h
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.fail("unicode escape code"))?;
        self.at += 4;
        Ok(v)
    }

    fn string(&mut self) -> mlua::Result<mlua::LuaString> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.s.get(self.at) else { return Err(self.fail("string end")) };
            self.at += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(self.at) else { return Err(self.fail("escape")) };
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4()?;
                            if (0xD800..0xDC00).contains(&cp) && self.s[self.at..].starts_with(b"\\u") {
                                self.at += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                }
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{FFFD}');
                            let mut b = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                        }
                        _ => return Err(self.fail("valid escape")),
                    }
                }
                c => out.push(c),
            }
        }
        self.lua.create_string(&out)
    }
}

fn flag(v: Option<&Value>) -> Option<bool> {
    match v {
        Some(Value::Boolean(b)) => Some(*b),
        Some(Value::String(s)) => match s.to_str().ok()?.as_ref() {
            "on" => Some(true),
            "off" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn int(v: Option<&Value>) -> Option<usize> {
    match v {
        Some(Value::Integer(i)) if *i >= 0 => Some(*i as usize),
        Some(Value::Number(n)) if *n >= 0.0 => Some(*n as usize),
        _ => None,
    }
}

/// The `cjson` table.
pub fn open(lua: &Lua) -> mlua::Result<Table> {
    let cfg = Rc::new(RefCell::new(Config::default()));
    let t = lua.create_table()?;
    let c = cfg.clone();
    t.set(
        "encode",
        lua.create_function(move |lua, a: MultiValue| {
            if a.len() != 1 {
                return Err(err("bad argument #1 to 'encode' (expected 1 argument)".into()));
            }
            let mut out = Vec::new();
            encode(&c.borrow(), &mut out, &a[0], 0)?;
            lua.create_string(&out)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode",
        lua.create_function(move |lua, s: mlua::LuaString| {
            let bytes = s.as_bytes();
            let mut d = Decoder { lua, s: &bytes, at: 0, cfg: *c.borrow() };
            let v = d.value(0)?;
            d.ws();
            if d.at != bytes.len() {
                return Err(d.fail("the end"));
            }
            Ok(v)
        })?,
    )?;
    t.set("null", null())?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    let c = cfg.clone();
    t.set(
        "encode_keep_buffer",
        lua.create_function(move |_, a: MultiValue| Ok(flag(a.front()).unwrap_or(true)))?,
    )?;
    let _ = c;
    let c = cfg.clone();
    t.set(
        "encode_max_depth",
        lua.create_function(move |_, a: MultiValue| {
            if let Some(n) = int(a.front()).filter(|&n| n >= 1) {
                c.borrow_mut().encode_max_depth = n;
            }
            Ok(c.borrow().encode_max_depth)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode_max_depth",
        lua.create_function(move |_, a: MultiValue| {
            if let Some(n) = int(a.front()).filter(|&n| n >= 1) {
                c.borrow_mut().decode_max_depth = n;
            }
            Ok(c.borrow().decode_max_depth)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_number_precision",
        lua.create_function(move |_, a: MultiValue| {
            if let Some(n) = int(a.front()).filter(|&n| (1..=14).contains(&n)) {
                c.borrow_mut().precision = n;
            }
            Ok(c.borrow().precision)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "encode_invalid_numbers",
        lua.create_function(move |_, a: MultiValue| {
            match a.front() {
                Some(Value::String(s)) if s.as_bytes().as_ref() == b"null" => {
                    c.borrow_mut().encode_invalid_numbers = 2
                }
                v => {
                    if let Some(b) = flag(v) {
                        c.borrow_mut().encode_invalid_numbers = u8::from(b);
                    }
                }
            }
            Ok(c.borrow().encode_invalid_numbers == 1)
        })?,
    )?;
    let c = cfg.clone();
    t.set(
        "decode_invalid_numbers",
        lua.create_function(move |_, a: MultiValue| {
            if let Some(b) = flag(a.front()) {
                c.borrow_mut().decode_invalid_numbers = b;
            }
            Ok(c.borrow().decode_invalid_numbers)
        })?,
    )?;
    let c = cfg;
    t.set(
        "encode_sparse_array",
        lua.create_function(move |_, a: MultiValue| {
            let mut g = c.borrow_mut();
            if let Some(b) = flag(a.front()) {
                g.sparse_convert = b;
            }
            if let Some(n) = int(a.get(1)) {
                g.sparse_ratio = n;
            }
            if let Some(n) = int(a.get(2)) {
                g.sparse_safe = n;
            }
            Ok((g.sparse_convert, g.sparse_ratio, g.sparse_safe))
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refusals() {
        let lua = mlua::Lua::new();
        lua.globals().set("cjson", super::open(&lua).unwrap()).unwrap();
        let s: String = lua
            .load("return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')")
            .eval()
            .unwrap();
        assert_eq!(s, "0 -5000 -1 0.0003 1023.2 0");
        let s: String =
            lua.load(r#"return cjson.encode({1, 'a/"b"', true, {x = cjson.null}})"#).eval().unwrap();
        assert_eq!(s, r#"[1,"a\/\"b\"",true,{"x":null}]"#);
        let ok: bool = lua
            .load(
                "local t = {} t[false] = 1 local ok = pcall(cjson.encode, t) \
                 local ok2 = pcall(cjson.encode, {n = 0/0}) \
                 cjson.decode_max_depth(1) local ok3 = pcall(cjson.decode, '[[1]]') cjson.decode_max_depth(1000) \
                 local d = cjson.decode('{\"a\\\\u00e9\": [1, 2]}') \
                 return not ok and not ok2 and not ok3 and d['a\\195\\169'][2] == 2",
            )
            .eval()
            .unwrap();
        assert!(ok);
        assert!(lua.load("return cjson.decode('[1,')").exec().is_err());
        assert!(lua.load("return cjson.decode('{\"a\" 1}')").exec().is_err());
    }
}
