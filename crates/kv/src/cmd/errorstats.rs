//! Error replies counted by their code, for `INFO errorstats` (`errorstat_<CODE>:count=N`) and
//! `total_error_replies`.
//!
//! A reply's code is its first word, as Redis takes it: the bytes after `-` up to a space within
//! the first 32 bytes; a reply with no space there counts as `ERR`. Codes come from clients too
//! (a script's `redis.error_reply`), so at most [`MAX_CODES`] distinct codes are kept, as Redis
//! 7.2 keeps: an error with a new code past that is counted in the total only, and INFO says
//! that the table is full.

use std::fmt::Write;

/// Distinct codes kept (Redis 7.2's `ERROR_STATS_NUMBER`).
pub const MAX_CODES: usize = 128;

/// Error replies sent, in all and per code.
#[derive(Clone, Debug, Default)]
pub struct ErrorStats {
    total: u64,
    /// Sorted by code, so INFO lists them in order (as Redis's radix tree does).
    codes: Vec<(Box<[u8]>, u64)>,
    /// Errors whose code found the table full.
    untracked: u64,
}

impl ErrorStats {
    /// Counts the error reply `reply` (its bytes from the `-`).
    pub fn count(&mut self, reply: &[u8]) {
        self.total += 1;
        let head = &reply[..reply.len().min(32)];
        let code = match head.iter().position(|&b| b == b' ') {
            Some(space) if space > 0 => &reply[1..space],
            _ => &b"ERR"[..],
        };
        match self.codes.binary_search_by(|(c, _)| (**c).cmp(code)) {
            Ok(i) => self.codes[i].1 += 1,
            Err(_) if self.codes.len() >= MAX_CODES => self.untracked += 1,
            Err(i) => self.codes.insert(i, (code.into(), 1)),
        }
    }

    /// Error replies sent since the start or the last reset.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every count (`CONFIG RESETSTAT`).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Writes the `# Errorstats` section; `#`, `:`, CR and LF in a code become `_`, as Redis
    /// writes them.
    pub fn write_info(&self, t: &mut String) {
        t.push_str("# Errorstats\r\n");
        for (code, n) in &self.codes {
            let safe: String = String::from_utf8_lossy(code)
                .chars()
                .map(|c| if matches!(c, '#' | ':' | '\r' | '\n') { '_' } else { c })
                .collect();
            let _ = write!(t, "errorstat_{safe}:count={n}\r\n");
        }
        if self.untracked > 0 {
            let _ = write!(t, "mojim_errorstats_untracked:{}\r\n", self.untracked);
        }
        t.push_str("\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(e: &ErrorStats) -> String {
        let mut t = String::new();
        e.write_info(&mut t);
        t
    }

    #[test]
    fn a_code_is_the_first_word_and_a_reply_without_one_is_err() {
        let mut e = ErrorStats::default();
        e.count(b"-WRONGTYPE Operation against a key holding the wrong kind of value");
        e.count(b"-ERR syntax error");
        e.count(b"-ERR");
        e.count(b"-");
        e.count(b"-MY:CODE#1 custom");
        // No space within the first 32 bytes: ERR.
        e.count(b"-ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGH later");
        assert_eq!(e.total(), 6);
        assert_eq!(
            info(&e),
            "# Errorstats\r\nerrorstat_ERR:count=4\r\nerrorstat_MY_CODE_1:count=1\r\n\
             errorstat_WRONGTYPE:count=1\r\n\r\n"
        );
        e.reset();
        assert_eq!((e.total(), info(&e).as_str()), (0, "# Errorstats\r\n\r\n"));
    }

    #[test]
    fn codes_past_the_limit_are_counted_in_the_total_only() {
        let mut e = ErrorStats::default();
        for i in 0..MAX_CODES + 10 {
            e.count(format!("-C{i} x").as_bytes());
        }
        e.count(b"-C0 again");
        assert_eq!(e.total(), MAX_CODES as u64 + 11);
        let t = info(&e);
        assert_eq!(t.matches("errorstat_").count(), MAX_CODES);
        assert!(t.contains("errorstat_C0:count=2\r\n"), "{t}");
        assert!(t.contains("mojim_errorstats_untracked:10\r\n"), "{t}");
    }
}
