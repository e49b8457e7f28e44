//! A hash's value: its fields and values in one blob, `count` (u32) then per field `flen`
//! (u32), `vlen` (u32), the field's bytes, the value's bytes. Fields are unique, in the order
//! they were first set. A change writes the whole blob again (copy-on-write, like every value),
//! so a hash costs its size per change: the small encoding, up to 128 fields of at most 64
//! bytes (a larger hash lives in a tree, `tree.rs`; see `cmd::hashes`).

use super::error::StoreError;

/// The pairs of a blob, checked as they are read.
pub struct Pairs<'a> {
    blob: &'a [u8],
    at: usize,
    left: u32,
}

/// Reads a blob's pairs.
pub fn pairs(blob: &[u8]) -> Result<Pairs<'_>, StoreError> {
    let count =
        blob.get(..4).ok_or_else(|| StoreError::Corrupt("a hash value shorter than 4 bytes".into()))?;
    Ok(Pairs { blob, at: 4, left: u32::from_le_bytes(count.try_into().expect("4 bytes")) })
}

impl<'a> Iterator for Pairs<'a> {
    type Item = Result<(&'a [u8], &'a [u8]), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let b = self.blob;
        let at = self.at;
        let bad = || StoreError::Corrupt(format!("a hash value's field at byte {at} runs past its end"));
        let lens = b.get(at..at + 8).ok_or_else(bad);
        let r = lens.and_then(|l| {
            let fl = u32::from_le_bytes(l[..4].try_into().expect("4 bytes")) as usize;
            let vl = u32::from_le_bytes(l[4..].try_into().expect("4 bytes")) as usize;
            let f = b.get(at + 8..at + 8 + fl).ok_or_else(bad)?;
            let v = b.get(at + 8 + fl..at + 8 + fl + vl).ok_or_else(bad)?;
            self.at = at + 8 + fl + vl;
            Ok((f, v))
        });
        if r.is_err() {
            self.left = 0;
        }
        Some(r)
    }
}

/// Fields in a blob.
pub fn count(blob: &[u8]) -> u32 {
    blob.get(..4).map_or(0, |c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
}

/// The value of `field`.
pub fn get<'a>(blob: &'a [u8], field: &[u8]) -> Result<Option<&'a [u8]>, StoreError> {
    for p in pairs(blob)? {
        let (f, v) = p?;
        if f == field {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn push(out: &mut Vec<u8>, f: &[u8], v: &[u8]) {
    out.extend_from_slice(&(f.len() as u32).to_le_bytes());
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    out.extend_from_slice(f);
    out.extend_from_slice(v);
}

/// `old` (or an empty hash) with `sets` applied, in order (a later set of the same field
/// wins); returns the new blob and how many fields were added. O(fields + sets).
pub fn set(old: Option<&[u8]>, sets: &[(&[u8], &[u8])]) -> Result<(Vec<u8>, usize), StoreError> {
    use std::collections::HashMap;
    // The last set of each field is the one that counts; `None` once it is written.
    let mut last: HashMap<&[u8], Option<&[u8]>> = HashMap::with_capacity(sets.len());
    for (f, v) in sets {
        last.insert(f, Some(v));
    }
    let mut out = vec![0u8; 4];
    let mut n = 0u32;
    if let Some(old) = old {
        for p in pairs(old)? {
            let (f, v) = p?;
            match last.get_mut(f) {
                Some(slot) => push(&mut out, f, slot.take().unwrap_or(v)),
                None => push(&mut out, f, v),
            }
            n += 1;
        }
    }
    let mut added = 0;
    for (f, _) in sets {
        // New fields, in the order they were first set.
        if let Some(v) = last.get_mut(f).and_then(Option::take) {
            push(&mut out, f, v);
            n += 1;
            added += 1;
        }
    }
    out[..4].copy_from_slice(&n.to_le_bytes());
    Ok((out, added))
}

/// `old` without `fields`; returns the new blob and how many were removed.
pub fn delete(old: &[u8], fields: &[&[u8]]) -> Result<(Vec<u8>, usize), StoreError> {
    let gone: std::collections::HashSet<&[u8]> = fields.iter().copied().collect();
    let mut out = vec![0u8; 4];
    let (mut n, mut removed) = (0u32, 0);
    for p in pairs(old)? {
        let (f, v) = p?;
        if gone.contains(f) {
            removed += 1;
        } else {
            push(&mut out, f, v);
            n += 1;
        }
    }
    out[..4].copy_from_slice(&n.to_le_bytes());
    Ok((out, removed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(b: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs(b).unwrap().map(|p| p.map(|(f, v)| (f.to_vec(), v.to_vec())).unwrap()).collect()
    }

    #[test]
    fn set_get_delete() {
        let (b, added) = set(None, &[(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]).unwrap();
        assert_eq!(added, 2);
        assert_eq!(all(&b), vec![(b"a".to_vec(), b"3".to_vec()), (b"b".to_vec(), b"2".to_vec())]);
        let (b, added) = set(Some(&b), &[(b"a", b"x"), (b"c", b"")]).unwrap();
        assert_eq!(added, 1);
        assert_eq!(count(&b), 3);
        assert_eq!(get(&b, b"a").unwrap(), Some(&b"x"[..]));
        assert_eq!(get(&b, b"z").unwrap(), None);
        let (b, removed) = delete(&b, &[b"a", b"nope"]).unwrap();
        assert_eq!(removed, 1);
        assert_eq!(all(&b), vec![(b"b".to_vec(), b"2".to_vec()), (b"c".to_vec(), Vec::new())]);
    }

    #[test]
    fn a_damaged_blob_is_an_error() {
        let (mut b, _) = set(None, &[(b"field", b"value")]).unwrap();
        b.truncate(b.len() - 1);
        assert!(get(&b, b"x").is_err());
        assert!(pairs(b"ab").is_err());
    }
}
