//! The ranges sorted-set commands take: of scores (`1.5`, `(1.5` exclusive, `-inf`, `+inf`)
//! and of members (`[a`, `(a`, `-`, `+`), each turned into two bounds: the entries below the
//! range, and those below its end. The range is the ranks between: `lo .. hi`.

use super::score::parse_range_double;
use crate::store::{Lex, ZBound};

/// `min or max is not a float`.
pub const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
/// `min or max not valid string range item`.
pub const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

/// A range of scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreRange {
    /// The lower end.
    pub min: f64,
    /// The upper end.
    pub max: f64,
    /// The lower end is excluded.
    pub minex: bool,
    /// The upper end is excluded.
    pub maxex: bool,
}

fn end(a: &[u8]) -> Option<(f64, bool)> {
    match a.first() {
        Some(b'(') => parse_range_double(&a[1..]).map(|v| (v, true)),
        _ => parse_range_double(a).map(|v| (v, false)),
    }
}

impl ScoreRange {
    /// `min` and `max` as `ZRANGEBYSCORE` reads them.
    pub fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let (min, minex) = end(min)?;
        let (max, maxex) = end(max)?;
        Some(ScoreRange { min, max, minex, maxex })
    }

    /// The entries before the range.
    pub fn lo(&self) -> ZBound<'static> {
        ZBound::Score { score: self.min, or_equal: self.minex }
    }

    /// The entries before the range's end (the range's and those before it).
    pub fn hi(&self) -> ZBound<'static> {
        ZBound::Score { score: self.max, or_equal: !self.maxex }
    }
}

/// A range of members.
#[derive(Clone, Debug, PartialEq)]
pub struct LexRange {
    min: Option<Vec<u8>>,
    max: Option<Vec<u8>>,
    min_kind: u8,
    max_kind: u8,
    minex: bool,
    maxex: bool,
}

/// One end: `-` (the least), `+` (the greatest), `[x` (x included) or `(x` (excluded): its
/// kind (`-`, `+` or `=`), member and exclusion.
fn lex_end(a: &[u8]) -> Option<(u8, Option<Vec<u8>>, bool)> {
    match a.first()? {
        b'+' if a.len() == 1 => Some((b'+', None, true)),
        b'-' if a.len() == 1 => Some((b'-', None, true)),
        b'(' => Some((b'=', Some(a[1..].to_vec()), true)),
        b'[' => Some((b'=', Some(a[1..].to_vec()), false)),
        _ => None,
    }
}

impl LexRange {
    /// `min` and `max` as `ZRANGEBYLEX` reads them.
    pub fn parse(min: &[u8], max: &[u8]) -> Option<LexRange> {
        let (min_kind, min, minex) = lex_end(min)?;
        let (max_kind, max, maxex) = lex_end(max)?;
        Some(LexRange { min, max, min_kind, max_kind, minex, maxex })
    }

    fn lex<'a>(kind: u8, v: &'a Option<Vec<u8>>) -> Lex<'a> {
        match (kind, v) {
            (b'-', _) => Lex::Min,
            (b'+', _) => Lex::Max,
            (_, v) => Lex::At(v.as_deref().unwrap_or_default()),
        }
    }

    /// The entries before the range.
    pub fn lo(&self) -> ZBound<'_> {
        ZBound::Lex { member: LexRange::lex(self.min_kind, &self.min), or_equal: self.minex }
    }

    /// The entries before the range's end.
    pub fn hi(&self) -> ZBound<'_> {
        ZBound::Lex { member: LexRange::lex(self.max_kind, &self.max), or_equal: !self.maxex }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_ranges() {
        let r = ScoreRange::parse(b"(1.5", b"+inf").unwrap();
        assert_eq!((r.min, r.minex, r.max, r.maxex), (1.5, true, f64::INFINITY, false));
        assert!(!r.lo().below(1.6, b"") && r.lo().below(1.5, b""));
        assert!(r.hi().below(f64::INFINITY, b""));
        assert!(ScoreRange::parse(b"(", b"1").is_some(), "strtod reads nothing: 0, as Redis");
        assert!(ScoreRange::parse(b"a", b"1").is_none());
        assert!(ScoreRange::parse(b"1", b"nan").is_none());
        assert!(ScoreRange::parse(b"((1", b"2").is_none());
    }

    #[test]
    fn lex_ranges() {
        let r = LexRange::parse(b"[b", b"(d").unwrap();
        assert!(r.lo().below(0.0, b"a") && !r.lo().below(0.0, b"b"));
        assert!(r.hi().below(0.0, b"c") && !r.hi().below(0.0, b"d"));
        let all = LexRange::parse(b"-", b"+").unwrap();
        assert!(!all.lo().below(0.0, b"") && all.hi().below(0.0, b"\xff\xff"));
        for bad in [&b"a"[..], b"", b"+x", b"-x"] {
            assert!(LexRange::parse(bad, b"+").is_none(), "{bad:?}");
        }
    }
}
