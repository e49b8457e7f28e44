//! The slow log (`SLOWLOG GET/LEN/RESET`): the commands that took at least
//! `slowlog-log-slower-than` microseconds (0: every one; negative: none), the newest
//! `slowlog-max-len`, each as Redis keeps it: an id, when it ran, how long it took, its first
//! [`MAX_ARGS`] arguments (each cut to [`MAX_ARG_BYTES`]), and the client's address and name.
//!
//! The ring is allocated for `slowlog-max-len` entries when the server starts (and again when
//! `CONFIG SET` makes it longer); an entry's arguments are copied only when it is logged.

use std::collections::VecDeque;

/// Arguments kept of a command (the last one kept says how many more there were).
pub const MAX_ARGS: usize = 32;
/// Bytes kept of an argument (the rest is said in words).
pub const MAX_ARG_BYTES: usize = 128;
/// `slowlog-log-slower-than`'s default, in microseconds (Redis's).
pub const DEFAULT_SLOWER_THAN_US: i64 = 10_000;
/// `slowlog-max-len`'s default (Redis's).
pub const DEFAULT_MAX_LEN: usize = 128;

/// One logged command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its id: entries logged before it since the start (a reset does not restart it).
    pub id: u64,
    /// When it ran, in Unix seconds.
    pub time_s: u64,
    /// How long it took, in microseconds.
    pub duration_us: u64,
    /// Its arguments, the name first, as Redis shortens them.
    pub args: Vec<Vec<u8>>,
    /// The client's address.
    pub addr: String,
    /// The client's name ("" when it has none).
    pub name: Vec<u8>,
}

/// The newest slow commands.
#[derive(Clone, Debug)]
pub struct SlowLog {
    entries: VecDeque<Entry>,
    next_id: u64,
}

impl Default for SlowLog {
    fn default() -> Self {
        SlowLog { entries: VecDeque::with_capacity(DEFAULT_MAX_LEN), next_id: 0 }
    }
}

/// The arguments as Redis keeps them: at most [`MAX_ARGS`], the last then saying how many more
/// there were; each at most [`MAX_ARG_BYTES`], followed by how many more bytes it had.
pub fn shorten<'a>(args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let n = args.len();
    let kept = n.min(MAX_ARGS);
    let mut out = Vec::with_capacity(kept);
    for (i, a) in args.enumerate().take(kept) {
        if i == MAX_ARGS - 1 && n > MAX_ARGS {
            out.push(format!("... ({} more arguments)", n - MAX_ARGS + 1).into_bytes());
            break;
        }
        if a.len() > MAX_ARG_BYTES {
            let mut v = a[..MAX_ARG_BYTES].to_vec();
            v.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes());
            out.push(v);
        } else {
            out.push(a.to_vec());
        }
    }
    out
}

impl SlowLog {
    /// Logs a command that took `duration_us` if that is at least `slower_than_us` (and that
    /// is not negative), keeping the newest `max_len`; `args` is called only then.
    pub fn offer(
        &mut self,
        duration_us: u64,
        slower_than_us: i64,
        max_len: usize,
        entry: impl FnOnce() -> (u64, Vec<Vec<u8>>, String, Vec<u8>),
    ) {
        if slower_than_us < 0 || duration_us < slower_than_us as u64 {
            return;
        }
        if max_len == 0 {
            self.entries.clear();
            self.next_id += 1;
            return;
        }
        let (time_s, args, addr, name) = entry();
        while self.entries.len() >= max_len {
            self.entries.pop_back();
        }
        self.entries.push_front(Entry { id: self.next_id, time_s, duration_us, args, addr, name });
        self.next_id += 1;
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The newest `n` entries, newest first.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().take(n)
    }

    /// Forgets every entry (`SLOWLOG RESET`).
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// Drops the oldest entries past `max_len` (`CONFIG SET slowlog-max-len`).
    pub fn truncate(&mut self, max_len: usize) {
        self.entries.truncate(max_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_shortened_as_redis_shortens_them() {
        let long = vec![b'x'; 200];
        let args: Vec<&[u8]> = vec![b"SET", b"k", &long];
        let s = shorten(args.into_iter());
        assert_eq!(s[2].len(), MAX_ARG_BYTES + "... (72 more bytes)".len());
        assert!(s[2].ends_with(b"... (72 more bytes)"));
        let many: Vec<Vec<u8>> = (0..40).map(|i| i.to_string().into_bytes()).collect();
        let s = shorten(many.iter().map(|a| a.as_slice()));
        assert_eq!(s.len(), MAX_ARGS);
        assert_eq!(s[30], b"30");
        assert_eq!(s[31], b"... (9 more arguments)");
    }

    #[test]
    fn the_ring_keeps_the_newest_and_ids_go_on_across_a_reset() {
        let mut l = SlowLog::default();
        let e = |n: u64| move || (n, vec![n.to_string().into_bytes()], "a:1".to_string(), Vec::new());
        l.offer(5, 10, 3, e(0));
        assert!(l.is_empty(), "faster than the threshold");
        l.offer(5, -1, 3, e(0));
        assert!(l.is_empty(), "a negative threshold logs nothing");
        for n in 0..5 {
            l.offer(10, 10, 3, e(n));
        }
        let ids: Vec<u64> = l.newest(10).map(|x| x.id).collect();
        assert_eq!(ids, vec![4, 3, 2]);
        assert_eq!(l.newest(1).next().unwrap().args, vec![b"4".to_vec()]);
        l.reset();
        assert_eq!(l.len(), 0);
        l.offer(0, 0, 3, e(9));
        assert_eq!(l.newest(1).next().unwrap().id, 5);
    }
}
