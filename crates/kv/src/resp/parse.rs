//! Requests: the sans-IO, incremental, bounded RESP request parser.
//!
//! A request is a multibulk (`*<n>\r\n` then `n` times `$<len>\r\n<bytes>\r\n`) or an inline
//! command (one line of words, with Redis's quoting rules). The caller owns the bytes: it hands
//! [`Parser::parse`] the unconsumed part of its buffer, starting at the request, as often as it
//! likes; the parser remembers how far it got, so bytes arriving a few at a time are looked at
//! once. A complete request's arguments are spans into that same slice (inline arguments, which
//! quoting may change, are decoded into the parser's own buffer): no copy, and no allocation
//! once the span list has grown to the largest request seen. Every length is checked against
//! [`Limits`] before anything is reserved for it.

use super::error::ProtocolError;

/// Sizes fixed at start-up (`[kv] max_bulk`, `max_args`, `max_inline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (a key, a value) in a request.
    pub max_bulk: usize,
    /// Most arguments in one request.
    pub max_args: usize,
    /// Longest line: an inline command, or a `*`/`$` header line.
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bulk: 8 << 20, max_args: 1 << 20, max_inline: 64 << 10 }
    }
}

/// What [`Parser::parse`] found at the start of the slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole request yet: call again with more bytes (the same start).
    Incomplete,
    /// A request of `len` bytes: its arguments are [`Parser::arg`]; consume `len` bytes before
    /// the next call.
    Request {
        /// Bytes the request took.
        len: usize,
    },
    /// `len` bytes that hold no command (an empty line, `*0`, `*-1`): consume and go on.
    Empty {
        /// Bytes to skip.
        len: usize,
    },
}

/// The incremental parser. One per connection.
#[derive(Debug)]
pub struct Parser {
    limits: Limits,
    /// Bytes of the current request looked at so far.
    pos: usize,
    /// Arguments the `*` header announced (`None`: header not read yet).
    expected: Option<usize>,
    /// Length of the bulk whose header was read but whose bytes are not all here.
    pending_bulk: Option<usize>,
    /// Arguments found: (start, len) in the slice given, or in `inline` for an inline command.
    spans: Vec<(usize, usize)>,
    /// Whether the spans point into `inline`.
    is_inline: bool,
    inline: Vec<u8>,
    /// The last call returned a request: the next one starts afresh.
    done: bool,
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < buf.len() {
        match buf[i..buf.len() - 1].iter().position(|&b| b == b'\r') {
            None => return None,
            Some(p) => {
                if buf[i + p + 1] == b'\n' {
                    return Some(i + p);
                }
                i += p + 1;
            }
        }
    }
    None
}

/// A strict signed decimal (Redis's string2ll): optional `-`, digits, no `+`, no spaces, no
/// leading zeros except `0` itself, within i64.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?;
        v = if neg { v.checked_sub(i64::from(d - b'0'))? } else { v.checked_add(i64::from(d - b'0'))? };
    }
    Some(v)
}

impl Parser {
    /// A parser that enforces `limits`.
    pub fn new(limits: Limits) -> Parser {
        Parser {
            limits,
            pos: 0,
            expected: None,
            pending_bulk: None,
            spans: Vec::new(),
            is_inline: false,
            inline: Vec::new(),
            done: false,
        }
    }

    /// The limits it enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn reset(&mut self) {
        self.pos = 0;
        self.expected = None;
        self.pending_bulk = None;
        self.spans.clear();
        self.is_inline = false;
        self.inline.clear();
        self.done = false;
    }

    /// Looks for a request at the start of `buf`. After [`Parsed::Incomplete`] call again with
    /// the same start and more bytes; after a request, with the bytes after it. An error means
    /// the connection must be closed: the parser is not usable after it.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Parsed, ProtocolError> {
        if self.done {
            self.reset();
        }
        if self.expected.is_none() {
            match buf.first() {
                None => return Ok(Parsed::Incomplete),
                Some(b'*') => {}
                Some(_) => return self.parse_inline(buf),
            }
            let Some(end) = find_crlf(buf, self.pos.max(1)) else {
                self.pos = buf.len().saturating_sub(1).max(1);
                if buf.len() > self.limits.max_inline {
                    return Err(ProtocolError::LineTooLong { limit: self.limits.max_inline });
                }
                return Ok(Parsed::Incomplete);
            };
            let n = parse_i64(&buf[1..end]).ok_or(ProtocolError::InvalidMultibulkLength)?;
            if n <= 0 {
                self.done = true;
                return Ok(Parsed::Empty { len: end + 2 });
            }
            if n as u64 > self.limits.max_args as u64 {
                return Err(ProtocolError::TooManyArgs { count: n as u64, limit: self.limits.max_args });
            }
            self.expected = Some(n as usize);
            self.pos = end + 2;
        }
        let expected = self.expected.unwrap_or(0);
        while self.spans.len() < expected {
            let len = match self.pending_bulk {
                Some(len) => len,
                None => {
                    let Some(&first) = buf.get(self.pos) else { return Ok(Parsed::Incomplete) };
                    if first != b'$' {
                        return Err(ProtocolError::ExpectedDollar(first));
                    }
                    let Some(end) = find_crlf(buf, self.pos + 1) else {
                        if buf.len() - self.pos > self.limits.max_inline {
                            return Err(ProtocolError::LineTooLong { limit: self.limits.max_inline });
                        }
                        return Ok(Parsed::Incomplete);
                    };
                    let n = parse_i64(&buf[self.pos + 1..end]).ok_or(ProtocolError::InvalidBulkLength)?;
                    if n < 0 {
                        return Err(ProtocolError::InvalidBulkLength);
                    }
                    if n as u64 > self.limits.max_bulk as u64 {
                        return Err(ProtocolError::BulkTooLarge {
                            len: n as u64,
                            limit: self.limits.max_bulk,
                        });
                    }
                    self.pos = end + 2;
                    self.pending_bulk = Some(n as usize);
                    n as usize
                }
            };
            if buf.len() < self.pos + len + 2 {
                return Ok(Parsed::Incomplete);
            }
            if &buf[self.pos + len..self.pos + len + 2] != b"\r\n" {
                return Err(ProtocolError::BulkNotTerminated);
            }
            self.spans.push((self.pos, len));
            self.pos += len + 2;
            self.pending_bulk = None;
        }
        self.done = true;
        Ok(Parsed::Request { len: self.pos })
    }

    fn parse_inline(&mut self, buf: &[u8]) -> Result<Parsed, ProtocolError> {
        let Some(nl) = buf[self.pos..].iter().position(|&b| b == b'\n').map(|p| p + self.pos) else {
            self.pos = buf.len();
            if buf.len() > self.limits.max_inline {
                return Err(ProtocolError::LineTooLong { limit: self.limits.max_inline });
            }
            return Ok(Parsed::Incomplete);
        };
        if nl > self.limits.max_inline {
            return Err(ProtocolError::LineTooLong { limit: self.limits.max_inline });
        }
        let line = if nl > 0 && buf[nl - 1] == b'\r' { &buf[..nl - 1] } else { &buf[..nl] };
        split_args(line, &mut self.inline, &mut self.spans)?;
        if self.spans.len() > self.limits.max_args {
            return Err(ProtocolError::TooManyArgs {
                count: self.spans.len() as u64,
                limit: self.limits.max_args,
            });
        }
        self.is_inline = true;
        self.done = true;
        if self.spans.is_empty() {
            return Ok(Parsed::Empty { len: nl + 1 });
        }
        Ok(Parsed::Request { len: nl + 1 })
    }

    /// Arguments of the request the last call returned.
    pub fn argc(&self) -> usize {
        self.spans.len()
    }

    /// Argument `i` of the request the last call returned; `buf` is the slice given to it.
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> &'a [u8] {
        let (s, l) = self.spans[i];
        if self.is_inline {
            &self.inline[s..s + l]
        } else {
            &buf[s..s + l]
        }
    }

    /// Every argument of the request the last call returned, as a list of slices (into
    /// `out`, cleared first: reuse it to avoid allocating).
    pub fn args_into<'a>(&'a self, buf: &'a [u8], out: &mut Vec<&'a [u8]>) {
        out.clear();
        out.extend((0..self.spans.len()).map(|i| self.arg(buf, i)));
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline command into words as Redis's `sdssplitargs` does: words separated by
/// white space; `"..."` with the escapes `\n \r \t \b \a \\ \" \xHH`; `'...'` with `\'`; a
/// closing quote must be followed by white space or the end.
fn split_args(line: &[u8], out: &mut Vec<u8>, spans: &mut Vec<(usize, usize)>) -> Result<(), ProtocolError> {
    out.clear();
    spans.clear();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p == line.len() {
            return Ok(());
        }
        let start = out.len();
        let (mut dq, mut sq) = (false, false);
        loop {
            if dq {
                let Some(&c) = line.get(p) else { return Err(ProtocolError::UnbalancedQuotes) };
                if c == b'\\' && line.get(p + 1) == Some(&b'x') {
                    if let (Some(h), Some(l)) =
                        (line.get(p + 2).and_then(|&b| hex(b)), line.get(p + 3).and_then(|&b| hex(b)))
                    {
                        out.push(h * 16 + l);
                        p += 4;
                        continue;
                    }
                }
                if c == b'\\' && p + 1 < line.len() {
                    out.push(match line[p + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    p += 2;
                } else if c == b'"' {
                    if line.get(p + 1).is_some_and(|&b| !is_space(b)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else {
                    out.push(c);
                    p += 1;
                }
            } else if sq {
                let Some(&c) = line.get(p) else { return Err(ProtocolError::UnbalancedQuotes) };
                if c == b'\\' && line.get(p + 1) == Some(&b'\'') {
                    out.push(b'\'');
                    p += 2;
                } else if c == b'\'' {
                    if line.get(p + 1).is_some_and(|&b| !is_space(b)) {
                        return Err(ProtocolError::UnbalancedQuotes);
                    }
                    p += 1;
                    break;
                } else {
                    out.push(c);
                    p += 1;
                }
            } else {
                match line.get(p) {
                    None => break,
                    Some(&c) if is_space(c) => break,
                    Some(b'"') => dq = true,
                    Some(b'\'') => sq = true,
                    Some(&c) => out.push(c),
                }
                p += 1;
            }
        }
        spans.push((start, out.len() - start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(p: &Parser, buf: &[u8]) -> Vec<Vec<u8>> {
        (0..p.argc()).map(|i| p.arg(buf, i).to_vec()).collect()
    }

    fn one(buf: &[u8]) -> Result<(Parsed, Vec<Vec<u8>>), ProtocolError> {
        let mut p = Parser::new(Limits::default());
        let r = p.parse(buf)?;
        Ok((r, all(&p, buf)))
    }

    #[test]
    fn multibulk() {
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nrest";
        let (r, a) = one(buf).unwrap();
        assert_eq!(r, Parsed::Request { len: buf.len() - 4 });
        assert_eq!(a, vec![b"GET".to_vec(), b"k".to_vec()]);
    }

    #[test]
    fn byte_by_byte_is_the_same() {
        let buf = b"*3\r\n$3\r\nSET\r\n$5\r\nk\r\n\x00y\r\n$0\r\n\r\n";
        let mut p = Parser::new(Limits::default());
        for n in 0..buf.len() {
            assert_eq!(p.parse(&buf[..n]).unwrap(), Parsed::Incomplete, "at {n}");
        }
        assert_eq!(p.parse(buf).unwrap(), Parsed::Request { len: buf.len() });
        assert_eq!(all(&p, buf), vec![b"SET".to_vec(), b"k\r\n\x00y".to_vec(), Vec::new()]);
    }

    #[test]
    fn inline_with_quotes() {
        let (r, a) = one(b"set \"a b\\x41\\n\" 'it\\'s'  x\r\n").unwrap();
        assert_eq!(r, Parsed::Request { len: 28 });
        assert_eq!(a, vec![b"set".to_vec(), b"a bA\n".to_vec(), b"it's".to_vec(), b"x".to_vec()]);
        assert_eq!(one(b"PING\n").unwrap().1, vec![b"PING".to_vec()]);
        // A NUL byte is an ordinary byte (Redis's C strings end there; a request does not).
        assert_eq!(one(b"a\0b \0\n").unwrap().1, vec![b"a\0b".to_vec(), b"\0".to_vec()]);
        assert_eq!(one(b"\r\n").unwrap().0, Parsed::Empty { len: 2 });
        assert_eq!(one(b"get \"a\n").unwrap_err(), ProtocolError::UnbalancedQuotes);
        assert_eq!(one(b"get \"a\"b\n").unwrap_err(), ProtocolError::UnbalancedQuotes);
        assert_eq!(one(b"get 'a\n").unwrap_err(), ProtocolError::UnbalancedQuotes);
    }

    #[test]
    fn empty_multibulks_are_skipped() {
        assert_eq!(one(b"*0\r\n").unwrap().0, Parsed::Empty { len: 4 });
        assert_eq!(one(b"*-1\r\n").unwrap().0, Parsed::Empty { len: 5 });
    }

    #[test]
    fn malformed_requests_are_typed() {
        assert_eq!(one(b"*x\r\n").unwrap_err(), ProtocolError::InvalidMultibulkLength);
        assert_eq!(one(b"*1\r\n:1\r\n").unwrap_err(), ProtocolError::ExpectedDollar(b':'));
        assert_eq!(one(b"*1\r\n$-2\r\n").unwrap_err(), ProtocolError::InvalidBulkLength);
        assert_eq!(one(b"*1\r\n$+2\r\n").unwrap_err(), ProtocolError::InvalidBulkLength);
        assert_eq!(one(b"*1\r\n$2\r\nabcd").unwrap_err(), ProtocolError::BulkNotTerminated);
        assert_eq!(one(b"*01\r\n").unwrap_err(), ProtocolError::InvalidMultibulkLength);
        assert_eq!(one(b"*99999999999999999999\r\n").unwrap_err(), ProtocolError::InvalidMultibulkLength);
    }

    #[test]
    fn limits_are_checked_before_anything_is_reserved() {
        let limits = Limits { max_bulk: 10, max_args: 3, max_inline: 16 };
        let mut p = Parser::new(limits);
        assert_eq!(p.parse(b"*4\r\n").unwrap_err(), ProtocolError::TooManyArgs { count: 4, limit: 3 });
        let mut p = Parser::new(limits);
        assert_eq!(
            p.parse(b"*1\r\n$11\r\n").unwrap_err(),
            ProtocolError::BulkTooLarge { len: 11, limit: 10 }
        );
        let mut p = Parser::new(limits);
        assert_eq!(p.parse(b"*1\r\n$1\r\nx\r\n").unwrap(), Parsed::Request { len: 11 });
        let mut p = Parser::new(limits);
        assert_eq!(p.parse(&[b'a'; 17]).unwrap_err(), ProtocolError::LineTooLong { limit: 16 });
        let mut p = Parser::new(limits);
        assert_eq!(p.parse(&[b'*'; 17]).unwrap_err(), ProtocolError::LineTooLong { limit: 16 });
        let mut p = Parser::new(limits);
        assert_eq!(p.parse(b"a b c d\n").unwrap_err(), ProtocolError::TooManyArgs { count: 4, limit: 3 });
    }

    #[test]
    fn numbers_are_strict() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [&b""[..], b"-", b"+1", b" 1", b"1 ", b"01", b"-0", b"9223372036854775808", b"1e3"] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn consecutive_requests_in_one_buffer() {
        let buf = b"PING\r\n*1\r\n$4\r\nPING\r\n";
        let mut p = Parser::new(Limits::default());
        let Parsed::Request { len } = p.parse(buf).unwrap() else { panic!() };
        assert_eq!(len, 6);
        assert_eq!(p.parse(&buf[len..]).unwrap(), Parsed::Request { len: 14 });
        assert_eq!(p.arg(&buf[len..], 0), b"PING");
    }
}
