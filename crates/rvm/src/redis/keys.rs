//! The Redis backend's key names: `P:p:<page>:<version>` written and parsed, and the page
//! arithmetic of a commit's runs.

use crate::layout::PAGE;
use std::io::Write;

/// `P:p:<page>:<version>` into `buf`.
pub(super) fn page_key(buf: &mut Vec<u8>, prefix: &str, page: u64, version: u64) {
    buf.clear();
    let _ = write!(buf, "{prefix}:p:{page}:{version}"); // writing to a Vec cannot fail
}

/// A decimal number as this backend writes them (no sign, no leading zero).
pub(super) fn canonical(b: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(b).ok()?;
    let n: u64 = s.parse().ok()?;
    (n.to_string() == s).then_some(n)
}

/// `(page, version)` of a key `P:p:<page>:<version>`, or `None` for any other key.
pub(super) fn parse_page_key(prefix: &str, key: &[u8]) -> Option<(u64, u64)> {
    let rest = key.strip_prefix(prefix.as_bytes())?.strip_prefix(b":p:")?;
    let colon = rest.iter().position(|&c| c == b':')?;
    Some((canonical(&rest[..colon])?, canonical(&rest[colon + 1..])?))
}

/// The prefix as a `SCAN` pattern matching itself only.
pub(super) fn glob_escape(prefix: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 8);
    for &c in prefix.as_bytes() {
        if matches!(c, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(c);
    }
    out
}

/// Whether page `p` lies in `runs` (sorted, disjoint).
pub(super) fn written(runs: &[(u64, u64)], p: u64) -> bool {
    let at = p * PAGE;
    let i = runs.partition_point(|r| r.0 + r.1 <= at);
    i < runs.len() && runs[i].0 <= at
}

pub(super) fn pages_of(runs: &[(u64, u64)]) -> impl Iterator<Item = u64> + Clone + '_ {
    runs.iter().flat_map(|&(o, l)| o / PAGE..(o + l) / PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_keys_round_trip_and_other_keys_are_not_ours() {
        let mut k = Vec::new();
        page_key(&mut k, "a:b", 17, 3);
        assert_eq!(k, b"a:b:p:17:3");
        assert_eq!(parse_page_key("a:b", &k), Some((17, 3)));
        for other in
            [&b"a:b:p:017:3"[..], b"a:b:p:17", b"a:b:p:17:3:4", b"a:b:q:17:3", b"a:b:master", b"a:p:1:2"]
        {
            assert_eq!(parse_page_key("a:b", other), None, "{}", String::from_utf8_lossy(other));
        }
        // Another prefix's keys never parse as this one's.
        page_key(&mut k, "a:b:p:1", 2, 3);
        assert_eq!(parse_page_key("a:b", &k), None);
        assert_eq!(glob_escape("x*[y]?\\"), b"x\\*\\[y\\]\\?\\\\");
    }

    #[test]
    fn written_finds_pages_in_sorted_runs() {
        let runs = [(0, 2 * PAGE), (5 * PAGE, PAGE)];
        let w: Vec<u64> = (0..8).filter(|&p| written(&runs, p)).collect();
        assert_eq!(w, vec![0, 1, 5]);
        assert_eq!(pages_of(&runs).collect::<Vec<_>>(), vec![0, 1, 5]);
    }
}
