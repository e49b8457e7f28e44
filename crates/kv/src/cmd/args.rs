//! A command's arguments, whether they are spans of a connection's buffer or owned (queued in
//! a transaction), and the small parsers commands share.

use crate::resp::{parse_i64, Parser};

/// The arguments of one command, the name first.
pub enum Args<'a> {
    /// A request just parsed: spans of `buf`.
    Parsed {
        /// The parser that found it.
        parser: &'a Parser,
        /// The bytes it was found in.
        buf: &'a [u8],
    },
    /// A command queued by `MULTI`.
    Owned(&'a [Vec<u8>]),
}

impl<'a> Args<'a> {
    /// How many, the name included.
    pub fn len(&self) -> usize {
        match self {
            Args::Parsed { parser, .. } => parser.argc(),
            Args::Owned(v) => v.len(),
        }
    }

    /// Whether there are none (never, for a command).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Argument `i` (0: the name).
    pub fn get(&self, i: usize) -> &'a [u8] {
        match self {
            Args::Parsed { parser, buf } => parser.arg(buf, i),
            Args::Owned(v) => &v[i],
        }
    }

    /// Every argument from `from` on.
    pub fn from(&self, from: usize) -> impl Iterator<Item = &'a [u8]> + '_ {
        (from..self.len()).map(|i| self.get(i))
    }

    /// An owned copy (to queue in a transaction).
    pub fn to_owned_vec(&self) -> Vec<Vec<u8>> {
        (0..self.len()).map(|i| self.get(i).to_vec()).collect()
    }
}

/// Whether `a` is `word`, ignoring ASCII case (`word` in upper case).
pub fn is(a: &[u8], word: &str) -> bool {
    a.eq_ignore_ascii_case(word.as_bytes())
}

/// A decimal integer as Redis reads one (no `+`, no spaces, within i64).
pub fn int(a: &[u8]) -> Option<i64> {
    parse_i64(a)
}

/// A C `int` as Redis's `getIntFromObjectOrReply` reads one; else the error to answer: `msg`
/// (as SWAPDB's "invalid first DB index"), or Redis's own for what is not an integer and for one
/// past an `int`.
pub fn c_int(a: &[u8], msg: Option<&'static str>) -> Result<i32, String> {
    let Some(n) = int(a) else { return Err(msg.unwrap_or(super::NOT_INT).to_string()) };
    i32::try_from(n).map_err(|_| {
        msg.map_or_else(
            || format!("ERR value is out of range, value must between {} and {}", i32::MIN, i32::MAX),
            str::to_string,
        )
    })
}

/// A database number as Redis reads one for SELECT, MOVE and COPY ... DB: a C `int`
/// ([`c_int`]) in `0 .. databases`, else "DB index is out of range".
pub fn db_index(a: &[u8], databases: usize) -> Result<usize, String> {
    match usize::try_from(c_int(a, None)?) {
        Ok(db) if db < databases => Ok(db),
        _ => Err("ERR DB index is out of range".to_string()),
    }
}

/// The command name in upper case, into `buf` (names longer than 32 bytes are no command).
pub fn upper<'b>(name: &[u8], buf: &'b mut [u8; 32]) -> Option<&'b [u8]> {
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    Some(&buf[..name.len()])
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
