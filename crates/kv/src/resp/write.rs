//! Replies: appends RESP2 or RESP3 to a caller's buffer, without allocating beyond its growth.

/// The protocol a connection speaks: 2 until `HELLO 3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Proto {
    /// RESP2.
    #[default]
    Resp2,
    /// RESP3 (after `HELLO 3`): nulls, maps, sets, doubles of their own.
    Resp3,
}

/// A reply being written into a buffer.
pub struct Reply<'a> {
    /// Where the bytes go.
    pub buf: &'a mut Vec<u8>,
    /// The connection's protocol.
    pub proto: Proto,
}

/// Decimal digits of `v` into `tmp`, returning the used tail.
pub fn itoa(v: i64, tmp: &mut [u8; 20]) -> &[u8] {
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        tmp[i] = b'-';
    }
    &tmp[i..]
}

impl Reply<'_> {
    fn head(&mut self, t: u8, n: i64) {
        let mut tmp = [0u8; 20];
        self.buf.push(t);
        self.buf.extend_from_slice(itoa(n, &mut tmp));
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+s` (`s` must hold no CR or LF).
    pub fn simple(&mut self, s: &[u8]) {
        debug_assert!(!s.contains(&b'\r') && !s.contains(&b'\n'));
        self.buf.push(b'+');
        self.buf.extend_from_slice(s);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An array of simple strings, one a line: what every `... HELP` answers.
    pub fn help(&mut self, lines: &[&str]) {
        self.array(lines.len());
        for l in lines {
            self.simple(l.as_bytes());
        }
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// `-msg`: `msg` starts with its code (`ERR`, `WRONGTYPE`, ...); CR and LF in it become
    /// spaces, as Redis does.
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        self.buf.extend(msg.bytes().map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `-msg` from bytes (CR and LF become spaces).
    pub fn error_bytes(&mut self, msg: &[u8]) {
        self.buf.push(b'-');
        self.buf.extend(msg.iter().map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }));
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `:n`.
    pub fn int(&mut self, n: i64) {
        self.head(b':', n);
    }

    /// `$len` and the bytes.
    pub fn bulk(&mut self, b: &[u8]) {
        self.head(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string whose `len` bytes the caller fills in: returns where they start.
    pub fn bulk_space(&mut self, len: usize) -> usize {
        self.head(b'$', len as i64);
        let at = self.buf.len();
        self.buf.resize(at + len, 0);
        self.buf.extend_from_slice(b"\r\n");
        at
    }

    /// An integer as a bulk string (`INCRBYFLOAT`-style replies, `CONFIG GET` numbers).
    pub fn bulk_int(&mut self, n: i64) {
        let mut tmp = [0u8; 20];
        let d = itoa(n, &mut tmp);
        self.head(b'$', d.len() as i64);
        self.buf.extend_from_slice(d);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// The null bulk string (`$-1`, or `_` in RESP3).
    pub fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The null array (`*-1`, or `_` in RESP3): EXEC of a discarded transaction.
    pub fn null_array(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// An array of `n` elements; the caller writes them next.
    pub fn array(&mut self, n: usize) {
        self.head(b'*', n as i64);
    }

    /// A map of `n` pairs (`%n`; RESP2: an array of `2n`); the caller writes key, value, ...
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.head(b'*', 2 * n as i64),
            Proto::Resp3 => self.head(b'%', n as i64),
        }
    }

    /// A set of `n` elements (`~n`; RESP2: an array).
    pub fn set(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.head(b'*', n as i64),
            Proto::Resp3 => self.head(b'~', n as i64),
        }
    }

    /// A push of `n` elements (`>n`; RESP2: an array): what the server sends unasked (pub/sub
    /// messages) and the confirmations of `SUBSCRIBE` and its kin. The caller writes them next.
    pub fn push(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.head(b'*', n as i64),
            Proto::Resp3 => self.head(b'>', n as i64),
        }
    }

    /// A boolean (`#t`/`#f`; RESP2: `:1`/`:0`).
    pub fn boolean(&mut self, b: bool) {
        match self.proto {
            Proto::Resp2 => self.int(i64::from(b)),
            Proto::Resp3 => self.buf.extend_from_slice(if b { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// A count that goes back to patch: an array header whose count is not known yet.
    /// Returns a mark for [`Reply::end_deferred`]; the header is written with room for any
    /// count (RESP accepts no leading zeros, so the elements are moved once at the end).
    pub fn deferred(&mut self) -> usize {
        self.buf.len()
    }

    /// Inserts the header of an array (`*n`) of `n` elements written since `mark`.
    pub fn end_deferred(&mut self, mark: usize, n: usize) {
        let mut tmp = [0u8; 20];
        let d = itoa(n as i64, &mut tmp);
        let mut head = [0u8; 23];
        head[0] = b'*';
        head[1..1 + d.len()].copy_from_slice(d);
        head[1 + d.len()..3 + d.len()].copy_from_slice(b"\r\n");
        let h = &head[..3 + d.len()];
        self.buf.splice(mark..mark, h.iter().copied());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        let mut b = Vec::new();
        let mut r = Reply { buf: &mut b, proto: Proto::Resp2 };
        r.int(-42);
        r.bulk(b"hi");
        r.null();
        r.map(1);
        r.error("ERR a\r\nb");
        assert_eq!(b, b":-42\r\n$2\r\nhi\r\n$-1\r\n*2\r\n-ERR a  b\r\n");
        let mut b = Vec::new();
        let mut r = Reply { buf: &mut b, proto: Proto::Resp3 };
        r.null();
        r.map(2);
        r.boolean(true);
        let m = r.deferred();
        r.int(1);
        r.int(2);
        r.end_deferred(m, 2);
        r.push(1);
        assert_eq!(b, b"_\r\n%2\r\n#t\r\n*2\r\n:1\r\n:2\r\n>1\r\n");
        let mut b = Vec::new();
        Reply { buf: &mut b, proto: Proto::Resp2 }.push(3);
        assert_eq!(b, b"*3\r\n");
    }

    #[test]
    fn itoa_extremes() {
        let mut t = [0u8; 20];
        assert_eq!(itoa(i64::MIN, &mut t), b"-9223372036854775808");
        assert_eq!(itoa(0, &mut t), b"0");
        assert_eq!(itoa(i64::MAX, &mut t), b"9223372036854775807");
    }
}
