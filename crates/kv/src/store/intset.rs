//! A set of integers in one blob (a set's value with `ENC_INTSET`, FORMAT.md §11.8): `width`
//! (u8: 2, 4 or 8), then the members in ascending order, each `width` bytes of a little-endian
//! two's complement integer. The width is the least that holds every member (as Redis's intset
//! encodings), so a member costs 2, 4 or 8 bytes; a lookup is a bisection. A change writes the
//! whole blob again (copy-on-write, like every value): a set stays an intset only while it has
//! at most `set-max-intset-entries` members (see `cmd::sets`).

use super::error::StoreError;

/// The widths a blob may have.
const WIDTHS: [u8; 3] = [2, 4, 8];

/// The least width that holds `v`.
pub fn width_of(v: i64) -> u8 {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

/// A blob, checked: its width is one of 2, 4, 8 and its length a whole number of members.
#[derive(Clone, Copy, Debug)]
pub struct IntSet<'a> {
    width: usize,
    body: &'a [u8],
}

impl<'a> IntSet<'a> {
    /// Reads a blob (checks its shape, not its order).
    pub fn parse(blob: &'a [u8]) -> Result<IntSet<'a>, StoreError> {
        let bad =
            || StoreError::Corrupt(format!("an intset of {} bytes has a bad width or length", blob.len()));
        let (&w, body) = blob.split_first().ok_or_else(bad)?;
        if !WIDTHS.contains(&w) || !body.len().is_multiple_of(w as usize) {
            return Err(bad());
        }
        Ok(IntSet { width: w as usize, body })
    }

    /// Bytes a member: 2, 4 or 8.
    pub fn width(&self) -> u8 {
        self.width as u8
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.body.len() / self.width
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Member `i` (in ascending order); `i` < `len`.
    pub fn get(&self, i: usize) -> i64 {
        let b = &self.body[i * self.width..(i + 1) * self.width];
        match self.width {
            2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
            4 => i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))),
            _ => i64::from_le_bytes(b.try_into().expect("8 bytes")),
        }
    }

    /// Where `v` is (`Ok`), or where it would go (`Err`).
    pub fn find(&self, v: i64) -> Result<usize, usize> {
        if width_of(v) as usize > self.width {
            return Err(if v < 0 { 0 } else { self.len() });
        }
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).cmp(&v) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// Whether `v` is a member.
    pub fn contains(&self, v: i64) -> bool {
        self.find(v).is_ok()
    }

    /// The members, in ascending order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i64> + 'a {
        let s = *self;
        (0..s.len()).map(move |i| s.get(i))
    }
}

/// The blob of `members`, which must be in strictly ascending order.
pub fn encode(members: &[i64]) -> Vec<u8> {
    debug_assert!(members.windows(2).all(|w| w[0] < w[1]), "intset members in order");
    let w = members.iter().map(|&v| width_of(v)).max().unwrap_or(2);
    let mut out = Vec::with_capacity(1 + members.len() * w as usize);
    out.push(w);
    for &v in members {
        out.extend_from_slice(&v.to_le_bytes()[..w as usize]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn widths_grow_with_the_members() {
        assert_eq!(encode(&[]), vec![2]);
        let b = encode(&[-3, 7, 300]);
        assert_eq!(b.len(), 1 + 3 * 2);
        let s = IntSet::parse(&b).unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![-3, 7, 300]);
        assert_eq!(s.find(7), Ok(1));
        assert_eq!(s.find(8), Err(2));
        assert_eq!(s.find(1 << 40), Err(3));
        assert_eq!(s.find(-(1 << 40)), Err(0));
        let b = encode(&[i64::MIN, -40000, 0, 70000, i64::MAX]);
        assert_eq!(b[0], 8);
        let s = IntSet::parse(&b).unwrap();
        assert_eq!(s.get(0), i64::MIN);
        assert_eq!(s.get(4), i64::MAX);
        assert!(s.contains(-40000) && !s.contains(1));
        assert_eq!(encode(&[i32::MIN.into(), 5])[0], 4);
    }

    #[test]
    fn against_a_model() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut model = BTreeSet::new();
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = match x % 3 {
                0 => (x >> 8) as i64 % 100,
                1 => (x >> 8) as i64 % 100_000,
                _ => x as i64,
            };
            if x.is_multiple_of(4) {
                model.remove(&v);
            } else {
                model.insert(v);
            }
            let members: Vec<i64> = model.iter().copied().collect();
            let b = encode(&members);
            let s = IntSet::parse(&b).unwrap();
            assert_eq!(s.len(), model.len());
            assert!(s.contains(v) == model.contains(&v));
        }
    }

    #[test]
    fn format_md_describes_the_set_encodings() {
        use crate::store::{member_list, ENC_INTSET, ENC_LISTPACK, ENC_TREE, KIND_SET};
        let doc = include_str!("../../../../docs/FORMAT.md");
        let sec = &doc[doc.find("### 11.8 Sets").expect("FORMAT.md has section 11.8")..];
        let sec = &sec[..sec.find("\n### ").unwrap_or(sec.len())];
        assert!(sec.contains(&format!("`kind` {KIND_SET}")));
        let row = |name: &str| {
            sec.lines()
                .find(|l| l.contains(&format!("| `{name}` |")))
                .unwrap_or_else(|| panic!("no row {name}"))
        };
        let enc = |name: &str| -> u8 { row(name).split('|').nth(1).unwrap().trim().parse().unwrap() };
        assert_eq!(enc("intset"), ENC_INTSET);
        assert_eq!(enc("listpack"), ENC_LISTPACK);
        assert_eq!(enc("hashtable"), ENC_TREE);
        // The bytes the rows describe.
        assert!(row("intset").contains("`width` (u8: 2, 4 or 8)"));
        assert_eq!(encode(&[-2, 300]), [2, 0xFE, 0xFF, 0x2C, 0x01]);
        assert_eq!(encode(&[1 << 20])[0], 4);
        assert!(row("listpack").contains("`count` (u32)") && row("listpack").contains("LEB128"));
        let long = [b'y'; 130];
        let b = member_list::encode([&b"ab"[..], &long]);
        assert_eq!(&b[..7], &[2, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(&b[7..9], &[0x82, 0x01], "130 as LEB128");
        assert!(
            sec.contains("`set-max-intset-entries` (512)") && sec.contains("`set-max-listpack-value` (64)")
        );
        // No two encodings share a byte.
        use crate::store::{ENC_EMBSTR, ENC_PLAIN, ENC_QUICKLIST, ENC_RAW};
        let all = [ENC_PLAIN, ENC_TREE, ENC_QUICKLIST, ENC_INTSET, ENC_LISTPACK, ENC_RAW, ENC_EMBSTR];
        assert_eq!(all.iter().collect::<std::collections::BTreeSet<_>>().len(), all.len());
        // The entry's encoding byte (§11.2) names the set encodings.
        let entry = &doc[doc.find("### 11.2").expect("section 11.2")..];
        assert!(entry
            .contains(&format!("{ENC_INTSET}, {ENC_LISTPACK} (a set): an intset or a member list (§11.8)")));
        let d = crate::cmd::Encodings::default();
        assert_eq!((d.set_max_intset_entries, d.set_max_entries, d.set_max_value), (512, 0, 64));
    }

    #[test]
    fn damaged_blobs_are_refused() {
        assert!(IntSet::parse(&[]).is_err());
        assert!(IntSet::parse(&[3, 0, 0, 0]).is_err());
        assert!(IntSet::parse(&[4, 0, 0]).is_err());
        assert!(IntSet::parse(&[8]).unwrap().is_empty());
    }
}
