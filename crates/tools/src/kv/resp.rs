//! RESP2, the Redis serialisation protocol, without I/O: commands are encoded as arrays of bulk
//! strings into the caller's buffer, and replies are parsed from the caller's receive buffer.
//! A reply that is not complete yet parses as `None`; one that breaks the protocol or a limit is
//! an error, after which the connection cannot be trusted.

use std::fmt;
use std::io::Write;

/// Longest bulk string accepted: Redis's own default `proto-max-bulk-len`.
pub const MAX_BULK_BYTES: usize = 512 << 20;
/// Most elements accepted in one array reply.
pub const MAX_ARRAY_LEN: usize = 1 << 24;
/// Longest status, error or length line accepted (the line without its CRLF).
pub const MAX_LINE_BYTES: usize = 64 << 10;
/// Deepest nesting of arrays accepted.
pub const MAX_DEPTH: usize = 8;

/// A reply whose strings borrow from the receive buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `+OK`
    Simple(&'a [u8]),
    /// `-ERR message`
    Error(&'a [u8]),
    /// `:42`
    Int(i64),
    /// `$3 abc`, or `$-1` (nil) as `None`.
    Bulk(Option<&'a [u8]>),
    /// `*2 ...`, or `*-1` (nil) as `None`.
    Array(Option<Vec<Reply<'a>>>),
}

/// A reply that owns its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A status reply such as `OK` or `PONG`.
    Simple(String),
    /// An error reply, e.g. `ERR unknown command`.
    Error(String),
    /// An integer reply.
    Int(i64),
    /// A bulk string, `None` for nil.
    Bulk(Option<Vec<u8>>),
    /// An array, `None` for nil.
    Array(Option<Vec<Value>>),
}

impl Reply<'_> {
    /// The same reply with its bytes copied out of the buffer.
    pub fn to_value(&self) -> Value {
        match self {
            Reply::Simple(s) => Value::Simple(String::from_utf8_lossy(s).into_owned()),
            Reply::Error(s) => Value::Error(String::from_utf8_lossy(s).into_owned()),
            Reply::Int(i) => Value::Int(*i),
            Reply::Bulk(b) => Value::Bulk(b.map(<[u8]>::to_vec)),
            Reply::Array(a) => Value::Array(a.as_ref().map(|v| v.iter().map(Reply::to_value).collect())),
        }
    }
}

impl Value {
    /// The bulk string's bytes, if this is a non-nil bulk string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Simple(s) => write!(f, "+{s}"),
            Value::Error(s) => write!(f, "-{s}"),
            Value::Int(i) => write!(f, ":{i}"),
            Value::Bulk(None) | Value::Array(None) => write!(f, "(nil)"),
            Value::Bulk(Some(b)) if b.len() > 64 => {
                write!(f, "\"{}…\" ({} bytes)", b[..64].escape_ascii(), b.len())
            }
            Value::Bulk(Some(b)) => write!(f, "\"{}\"", b.escape_ascii()),
            Value::Array(Some(v)) => {
                write!(f, "[")?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{x}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// How a reply broke RESP2 or one of this parser's limits (the server's fault).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The first byte of a reply is none of `+ - : $ *`.
    BadType(u8),
    /// A length or integer line is not a decimal number in range.
    BadNumber(String),
    /// A bulk string is not followed by CRLF.
    MissingCrlf,
    /// A line, bulk string, array or nesting exceeds its limit.
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::BadType(b) => {
                write!(f, "a reply starts with byte 0x{b:02x}, which is no RESP2 type")
            }
            ProtocolError::BadNumber(s) => write!(f, "'{s}' is not a valid RESP length or integer"),
            ProtocolError::MissingCrlf => write!(f, "a bulk string is not followed by CRLF"),
            ProtocolError::TooLarge { what, len, max } => {
                write!(f, "{what} of {len} exceeds the limit of {max}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Appends one command, an array of bulk strings, to `out`.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    header(out, b'*', args.len());
    for a in args {
        bulk(out, a);
    }
}

/// Appends an array header `*n\r\n`: the start of a command of `n` arguments, each then added
/// with [`bulk`] (for commands whose arguments are not at hand as one slice).
pub fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    out.push(kind);
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}\r\n");
}

/// Appends one bulk string `$len\r\nbytes\r\n`.
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    header(out, b'$', bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Parses the first reply in `buf`: `Ok(None)` if it is not complete yet, else the reply and
/// the number of bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Reply<'_>, usize)>, ProtocolError> {
    let Some((line, next)) = line(buf, at)? else { return Ok(None) };
    let (kind, rest) = (line[0], &line[1..]);
    match kind {
        b'+' => Ok(Some((Reply::Simple(rest), next))),
        b'-' => Ok(Some((Reply::Error(rest), next))),
        b':' => Ok(Some((Reply::Int(number(rest)?), next))),
        b'$' => {
            let n = number(rest)?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let n = n as usize;
            if n > MAX_BULK_BYTES {
                return Err(ProtocolError::TooLarge { what: "a bulk string", len: n, max: MAX_BULK_BYTES });
            }
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            if &buf[next + n..next + n + 2] != b"\r\n" {
                return Err(ProtocolError::MissingCrlf);
            }
            Ok(Some((Reply::Bulk(Some(&buf[next..next + n])), next + n + 2)))
        }
        b'*' => {
            let n = number(rest)?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let n = n as usize;
            if n > MAX_ARRAY_LEN {
                return Err(ProtocolError::TooLarge { what: "an array", len: n, max: MAX_ARRAY_LEN });
            }
            if depth >= MAX_DEPTH {
                return Err(ProtocolError::TooLarge { what: "nesting", len: depth + 1, max: MAX_DEPTH });
            }
            // Never reserve more than the bytes present could hold (each element takes ≥ 3).
            let mut items = Vec::with_capacity(n.min((buf.len() - next) / 3 + 1));
            let mut pos = next;
            for _ in 0..n {
                let Some((r, p)) = parse_at(buf, pos, depth + 1)? else { return Ok(None) };
                items.push(r);
                pos = p;
            }
            Ok(Some((Reply::Array(Some(items)), pos)))
        }
        other => Err(ProtocolError::BadType(other)),
    }
}

/// Finds where a reply ends in a stream of bytes without keeping it: for a reply too large to
/// parse whole as it grows (an `LRANGE 0 -1` of a million elements), fed as its bytes arrive.
/// It checks the same limits as [`parse`].
#[derive(Debug, Default)]
pub struct Skipper {
    /// Elements still owed by each open array, the innermost last.
    open: Vec<u64>,
    /// Bytes of a bulk string, its CRLF included, still to come.
    bulk_left: usize,
    /// The line being read, while it spans feeds.
    line: Vec<u8>,
    /// The reply's first line, without its CRLF.
    first: Option<Vec<u8>>,
}

impl Skipper {
    /// A skipper at the start of a reply.
    pub fn new() -> Skipper {
        Skipper::default()
    }

    /// Consumes `buf`: `Some(n)` when the reply ended after its first `n` bytes (what follows
    /// is the next reply's), `None` when all of it was consumed and the reply goes on.
    pub fn feed(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let mut i = 0;
        while i < buf.len() {
            if self.bulk_left > 0 {
                let n = self.bulk_left.min(buf.len() - i);
                let before = self.bulk_left;
                // The last two bytes are the bulk string's CRLF.
                for (left, want) in [(2, b'\r'), (1, b'\n')] {
                    if before >= left && before - n < left && buf[i + before - left] != want {
                        return Err(ProtocolError::MissingCrlf);
                    }
                }
                self.bulk_left -= n;
                i += n;
                if self.bulk_left == 0 && self.value_done() {
                    return Ok(Some(i));
                }
                continue;
            }
            let rest = &buf[i..];
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                self.line.extend_from_slice(rest);
                if self.line.len() > MAX_LINE_BYTES + 1 {
                    return Err(ProtocolError::TooLarge {
                        what: "a line",
                        len: self.line.len(),
                        max: MAX_LINE_BYTES,
                    });
                }
                return Ok(None);
            };
            self.line.extend_from_slice(&rest[..=nl]);
            i += nl + 1;
            let line = std::mem::take(&mut self.line);
            let Some(body) = line.strip_suffix(b"\r\n").filter(|b| !b.is_empty()) else {
                return Err(ProtocolError::BadNumber(
                    String::from_utf8_lossy(&line[..line.len().min(32)]).into(),
                ));
            };
            if body.len() > MAX_LINE_BYTES {
                return Err(ProtocolError::TooLarge { what: "a line", len: body.len(), max: MAX_LINE_BYTES });
            }
            if self.first.is_none() {
                self.first = Some(body.to_vec());
            }
            let done = match body[0] {
                b'+' | b'-' => true,
                b':' => {
                    number(&body[1..])?;
                    true
                }
                b'$' => match number(&body[1..])? {
                    n if n < 0 => true,
                    n if n as usize > MAX_BULK_BYTES => {
                        return Err(ProtocolError::TooLarge {
                            what: "a bulk string",
                            len: n as usize,
                            max: MAX_BULK_BYTES,
                        })
                    }
                    n => {
                        self.bulk_left = n as usize + 2;
                        false
                    }
                },
                b'*' => match number(&body[1..])? {
                    n if n <= 0 => true,
                    n if n as usize > MAX_ARRAY_LEN => {
                        return Err(ProtocolError::TooLarge {
                            what: "an array",
                            len: n as usize,
                            max: MAX_ARRAY_LEN,
                        })
                    }
                    _ if self.open.len() >= MAX_DEPTH => {
                        return Err(ProtocolError::TooLarge {
                            what: "nesting",
                            len: self.open.len() + 1,
                            max: MAX_DEPTH,
                        })
                    }
                    n => {
                        self.open.push(n as u64);
                        false
                    }
                },
                other => return Err(ProtocolError::BadType(other)),
            };
            if done && self.value_done() {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    /// A value ended: closes the arrays it completes; true if that ends the reply.
    fn value_done(&mut self) -> bool {
        while let Some(left) = self.open.last_mut() {
            *left -= 1;
            if *left > 0 {
                return false;
            }
            self.open.pop();
        }
        true
    }

    /// The reply's first line without its CRLF, once read: `-ERR ...` for an error, `*1000`
    /// for an array of 1000 elements.
    pub fn first_line(&self) -> Option<&[u8]> {
        self.first.as_deref()
    }
}

/// The line starting at `at` (without CRLF, at least one byte) and the offset after its CRLF.
fn line(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = &buf[at.min(buf.len())..];
    let window = &rest[..rest.len().min(MAX_LINE_BYTES + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(0) => Err(ProtocolError::BadNumber(String::new())),
        Some(i) => Ok(Some((&rest[..i], at + i + 2))),
        None if rest.len() > MAX_LINE_BYTES + 1 => {
            Err(ProtocolError::TooLarge { what: "a line", len: rest.len(), max: MAX_LINE_BYTES })
        }
        None => Ok(None),
    }
}

fn number(s: &[u8]) -> Result<i64, ProtocolError> {
    let bad = || ProtocolError::BadNumber(String::from_utf8_lossy(&s[..s.len().min(32)]).into_owned());
    std::str::from_utf8(s).ok().and_then(|t| t.parse::<i64>().ok()).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&mut out, &[b"SET", b"k", b""]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn every_reply_type_parses_and_says_how_long_it_was() {
        let cases: [(&[u8], Reply); 7] = [
            (b"+OK\r\n", Reply::Simple(b"OK")),
            (b"-ERR no\r\n", Reply::Error(b"ERR no")),
            (b":-12\r\n", Reply::Int(-12)),
            (b"$3\r\na\r\n\r\n", Reply::Bulk(Some(b"a\r\n"))),
            (b"$-1\r\n", Reply::Bulk(None)),
            (b"*-1\r\n", Reply::Array(None)),
            (
                b"*2\r\n$1\r\nx\r\n*1\r\n:1\r\n",
                Reply::Array(Some(vec![Reply::Bulk(Some(b"x")), Reply::Array(Some(vec![Reply::Int(1)]))])),
            ),
        ];
        for (bytes, want) in cases {
            let mut with_more = bytes.to_vec();
            with_more.extend_from_slice(b"+NEXT\r\n");
            assert_eq!(parse(&with_more), Ok(Some((want, bytes.len()))), "{}", bytes.escape_ascii());
            // Every proper prefix is incomplete, never an error.
            for cut in 0..bytes.len() {
                assert_eq!(parse(&bytes[..cut]), Ok(None), "prefix {} of {}", cut, bytes.escape_ascii());
            }
        }
    }

    #[test]
    fn the_skipper_ends_a_reply_where_parse_does_whatever_the_feeds() {
        let big: Vec<u8> = {
            let mut b = b"*3\r\n$5\r\nhello\r\n*2\r\n:7\r\n$-1\r\n*0\r\n".to_vec();
            b.extend_from_slice(b"+NEXT\r\n");
            b
        };
        let cases: [&[u8]; 6] =
            [b"+OK\r\n", b"-ERR no such key\r\n", b":12\r\n", b"$3\r\na\r\n\r\n", b"*-1\r\n", &big];
        for bytes in cases {
            let (_, want) = parse(bytes).unwrap().expect("whole");
            for step in [1, 2, 3, 7, bytes.len()] {
                let mut s = Skipper::new();
                let mut at = 0;
                let end = loop {
                    let chunk = &bytes[at..(at + step).min(bytes.len())];
                    if let Some(n) = s.feed(chunk).unwrap() {
                        break at + n;
                    }
                    at += chunk.len();
                    assert!(at < bytes.len(), "{} never ended", bytes.escape_ascii());
                };
                assert_eq!(end, want, "{} fed {step} at a time", bytes.escape_ascii());
                assert_eq!(
                    s.first_line(),
                    Some(bytes[..bytes.iter().position(|&b| b == b'\r').unwrap()].as_ref())
                );
            }
        }
        let mut s = Skipper::new();
        assert_eq!(s.feed(b"$2\r\nabX\n"), Err(ProtocolError::MissingCrlf));
        let mut s = Skipper::new();
        assert_eq!(s.feed(b"?\r\n"), Err(ProtocolError::BadType(b'?')));
        let mut s = Skipper::new();
        assert!(matches!(
            s.feed(&b"*1\r\n".repeat(MAX_DEPTH + 1)),
            Err(ProtocolError::TooLarge { what: "nesting", .. })
        ));
    }

    #[test]
    fn broken_replies_are_errors_naming_what_broke() {
        assert_eq!(parse(b"?x\r\n"), Err(ProtocolError::BadType(b'?')));
        assert_eq!(parse(b":12a\r\n"), Err(ProtocolError::BadNumber("12a".into())));
        assert_eq!(parse(b"$1\r\nab\r\n"), Err(ProtocolError::MissingCrlf));
        assert_eq!(parse(b"\r\n"), Err(ProtocolError::BadNumber(String::new())));
        let huge = format!("${}\r\n", MAX_BULK_BYTES + 1);
        assert!(matches!(parse(huge.as_bytes()), Err(ProtocolError::TooLarge { what: "a bulk string", .. })));
        let long = vec![b'+'; MAX_LINE_BYTES + 10];
        assert!(matches!(parse(&long), Err(ProtocolError::TooLarge { what: "a line", .. })));
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(matches!(parse(&deep), Err(ProtocolError::TooLarge { what: "nesting", .. })));
        let e = parse(b":12a\r\n").unwrap_err().to_string();
        assert!(e.contains("'12a'"), "{e}");
    }
}
