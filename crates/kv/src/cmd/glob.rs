//! Redis's glob patterns (`KEYS`, `SCAN MATCH`, `CONFIG GET`): `*`, `?`, `[abc]`, `[^a-z]`,
//! `\x`. Matched in O(pattern × text) at worst: one backtracking point, at the last `*`.

enum Tok<'p> {
    Star,
    Any,
    Byte(u8),
    /// The bytes between the brackets (escapes kept), and whether it is negated.
    Class(&'p [u8], bool),
}

fn class_matches(set: &[u8], c: u8) -> bool {
    let mut i = 0;
    while i < set.len() {
        if set[i] == b'\\' && i + 1 < set.len() {
            if set[i + 1] == c {
                return true;
            }
            i += 2;
        } else if i + 2 < set.len() && set[i + 1] == b'-' {
            let (lo, hi) = if set[i] <= set[i + 2] { (set[i], set[i + 2]) } else { (set[i + 2], set[i]) };
            if (lo..=hi).contains(&c) {
                return true;
            }
            i += 3;
        } else {
            if set[i] == c {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// The next token of `p` at `i`, and where the one after starts.
fn token(p: &[u8], i: usize) -> (Tok<'_>, usize) {
    match p[i] {
        b'*' => (Tok::Star, i + 1),
        b'?' => (Tok::Any, i + 1),
        b'\\' if i + 1 < p.len() => (Tok::Byte(p[i + 1]), i + 2),
        b'[' => {
            let mut j = i + 1;
            let neg = p.get(j) == Some(&b'^');
            if neg {
                j += 1;
            }
            let start = j;
            while j < p.len() && p[j] != b']' {
                j += if p[j] == b'\\' && j + 1 < p.len() { 2 } else { 1 };
            }
            // An unclosed class runs to the end of the pattern, as in Redis.
            (Tok::Class(&p[start..j.min(p.len())], neg), (j + 1).min(p.len()))
        }
        c => (Tok::Byte(c), i + 1),
    }
}

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() {
            let (tok, next) = token(pattern, p);
            match tok {
                Tok::Star => {
                    back = Some((next, t));
                    p = next;
                    continue;
                }
                _ if t < text.len() => {
                    let ok = match tok {
                        Tok::Any => true,
                        Tok::Byte(b) => b == text[t],
                        Tok::Class(set, neg) => class_matches(set, text[t]) != neg,
                        Tok::Star => unreachable!("handled above"),
                    };
                    if ok {
                        p = next;
                        t += 1;
                        continue;
                    }
                }
                _ => {}
            }
        } else if t == text.len() {
            return true;
        }
        match back {
            Some((bp, bt)) if bt < text.len() => {
                back = Some((bp, bt + 1));
                p = bp;
                t = bt + 1;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_globs() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "abc"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("key:*:x", "key:1:2:x"),
            ("a\\*b", "a*b"),
            ("[\\]]", "]"),
            ("*a*b*c*", "xxaxxbxxc"),
        ];
        for (p, t) in yes {
            assert!(matches(p.as_bytes(), t.as_bytes()), "{p} should match {t}");
        }
        let no: &[(&str, &str)] = &[
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("a\\*b", "axb"),
            ("abc", "ab"),
            ("ab", "abc"),
            ("*a", "b"),
            ("[abc", "d"),
        ];
        for (p, t) in no {
            assert!(!matches(p.as_bytes(), t.as_bytes()), "{p} should not match {t}");
        }
    }

    #[test]
    fn no_exponential_backtracking() {
        let p = "a*".repeat(30) + "b";
        let t = "a".repeat(5000);
        assert!(!matches(p.as_bytes(), t.as_bytes()));
    }
}
