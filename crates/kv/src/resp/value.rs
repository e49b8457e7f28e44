//! Whole RESP2/RESP3 values: an owned tree, its encoding, and a bounded decoder (for replies,
//! in tests and tools; the server's hot path never builds one).

use super::error::ProtocolError;
use super::parse::{parse_i64, Limits};

/// Deepest nesting [`decode`] accepts.
pub const MAX_DEPTH: usize = 32;

/// A RESP value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `+text`.
    Simple(Vec<u8>),
    /// `-text`.
    Error(Vec<u8>),
    /// `:n`.
    Int(i64),
    /// `$len bytes`.
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or `_`.
    Null,
    /// `*n` elements.
    Array(Vec<Value>),
    /// `%n` pairs (RESP3).
    Map(Vec<(Value, Value)>),
    /// `~n` elements (RESP3).
    Set(Vec<Value>),
    /// `#t`/`#f` (RESP3).
    Bool(bool),
    /// `,` a double (RESP3), kept as its text.
    Double(Vec<u8>),
    /// `>n` elements: a push (RESP3), such as a pub/sub message.
    Push(Vec<Value>),
}

impl Value {
    /// A bulk string of `s`.
    pub fn bulk(s: impl AsRef<[u8]>) -> Value {
        Value::Bulk(s.as_ref().to_vec())
    }

    /// Appends the encoding (a [`Value::Null`] as `_` when `resp3`, else `$-1`).
    pub fn encode(&self, resp3: bool, out: &mut Vec<u8>) {
        let head = |out: &mut Vec<u8>, t: u8, n: usize| {
            out.push(t);
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        };
        match self {
            Value::Simple(s) | Value::Error(s) | Value::Double(s) => {
                out.push(match self {
                    Value::Simple(_) => b'+',
                    Value::Error(_) => b'-',
                    _ => b',',
                });
                out.extend_from_slice(s);
                out.extend_from_slice(b"\r\n");
            }
            Value::Int(n) => {
                out.push(b':');
                out.extend_from_slice(n.to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Value::Bulk(b) => {
                head(out, b'$', b.len());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Value::Null => out.extend_from_slice(if resp3 { b"_\r\n" } else { b"$-1\r\n" }),
            Value::Array(v) | Value::Set(v) | Value::Push(v) => {
                let t = match self {
                    Value::Array(_) => b'*',
                    Value::Set(_) => b'~',
                    _ => b'>',
                };
                head(out, t, v.len());
                for e in v {
                    e.encode(resp3, out);
                }
            }
            Value::Map(m) => {
                head(out, b'%', m.len());
                for (k, v) in m {
                    k.encode(resp3, out);
                    v.encode(resp3, out);
                }
            }
            Value::Bool(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }
}

fn line(buf: &[u8], from: usize, limits: &Limits) -> Result<Option<(usize, usize)>, ProtocolError> {
    match buf[from..].windows(2).position(|w| w == b"\r\n") {
        Some(p) => Ok(Some((from + p, from + p + 2))),
        None if buf.len() - from > limits.max_inline => {
            Err(ProtocolError::LineTooLong { limit: limits.max_inline })
        }
        None => Ok(None),
    }
}

/// Decodes one value at the start of `buf`: `Ok(None)` if more bytes are needed, else the value
/// and the bytes it took. Lengths and counts are checked against `limits` (`max_bulk`,
/// `max_args` for aggregates, `max_inline` for lines) and nesting against [`MAX_DEPTH`] before
/// anything is reserved.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Option<(Value, usize)>, ProtocolError> {
    decode_at(buf, 0, limits, 0)
}

fn decode_at(
    buf: &[u8],
    at: usize,
    limits: &Limits,
    depth: usize,
) -> Result<Option<(Value, usize)>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError::TooDeep);
    }
    let Some(&t) = buf.get(at) else { return Ok(None) };
    let Some((end, next)) = line(buf, at + 1, limits)? else { return Ok(None) };
    let text = &buf[at + 1..end];
    let count = |max: usize| -> Result<Option<usize>, ProtocolError> {
        let n = parse_i64(text).ok_or(ProtocolError::InvalidNumber)?;
        if n < -1 {
            return Err(ProtocolError::InvalidNumber);
        }
        if n == -1 {
            return Ok(None);
        }
        if n as u64 > max as u64 {
            return Err(ProtocolError::TooManyArgs { count: n as u64, limit: max });
        }
        Ok(Some(n as usize))
    };
    match t {
        b'+' => Ok(Some((Value::Simple(text.to_vec()), next))),
        b'-' => Ok(Some((Value::Error(text.to_vec()), next))),
        b',' => Ok(Some((Value::Double(text.to_vec()), next))),
        b':' => Ok(Some((Value::Int(parse_i64(text).ok_or(ProtocolError::InvalidNumber)?), next))),
        b'_' if text.is_empty() => Ok(Some((Value::Null, next))),
        b'#' if text == b"t" || text == b"f" => Ok(Some((Value::Bool(text == b"t"), next))),
        b'$' => {
            let n = match parse_i64(text) {
                Some(-1) => return Ok(Some((Value::Null, next))),
                Some(n) if n >= 0 => n as u64,
                _ => return Err(ProtocolError::InvalidBulkLength),
            };
            if n > limits.max_bulk as u64 {
                return Err(ProtocolError::BulkTooLarge { len: n, limit: limits.max_bulk });
            }
            let n = n as usize;
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(ProtocolError::BulkNotTerminated);
            }
            Ok(Some((Value::Bulk(buf[next..next + n].to_vec()), next + n + 2)))
        }
        b'*' | b'~' | b'%' | b'>' => {
            let Some(n) = count(limits.max_args)? else { return Ok(Some((Value::Null, next))) };
            let items = if t == b'%' { n * 2 } else { n };
            // Each element takes at least 3 bytes: never reserve more than the bytes at hand.
            let mut v = Vec::with_capacity(items.min((buf.len() - next) / 3 + 1));
            let mut pos = next;
            for _ in 0..items {
                let Some((e, p)) = decode_at(buf, pos, limits, depth + 1)? else { return Ok(None) };
                v.push(e);
                pos = p;
            }
            let value = match t {
                b'*' => Value::Array(v),
                b'~' => Value::Set(v),
                b'>' => Value::Push(v),
                _ => {
                    let mut m = Vec::with_capacity(n);
                    let mut it = v.into_iter();
                    while let (Some(k), Some(x)) = (it.next(), it.next()) {
                        m.push((k, x));
                    }
                    Value::Map(m)
                }
            };
            Ok(Some((value, pos)))
        }
        other => Err(ProtocolError::UnknownType(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_it_encodes() {
        let v = Value::Array(vec![
            Value::Int(-3),
            Value::bulk("a\r\nb"),
            Value::Null,
            Value::Map(vec![(Value::Simple(b"k".to_vec()), Value::Bool(false))]),
            Value::Set(vec![Value::Double(b"1.5".to_vec())]),
            Value::Push(vec![Value::bulk("message"), Value::bulk("ch"), Value::bulk("hi")]),
            Value::Error(b"ERR x".to_vec()),
        ]);
        let mut b = Vec::new();
        v.encode(true, &mut b);
        let (d, n) = decode(&b, &Limits::default()).unwrap().unwrap();
        assert_eq!((d, n), (v, b.len()));
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut], &Limits::default()).unwrap(), None, "at {cut}");
        }
    }

    #[test]
    fn bounded() {
        let l = Limits { max_bulk: 4, max_args: 2, max_inline: 8 };
        assert!(decode(b"$5\r\n", &l).is_err());
        assert!(decode(b"*3\r\n", &l).is_err());
        assert!(decode(b"+123456789", &l).is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2);
        assert_eq!(decode(deep.as_bytes(), &Limits::default()), Err(ProtocolError::TooDeep));
    }
}
