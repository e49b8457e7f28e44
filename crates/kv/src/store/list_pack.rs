//! A packed run of list elements (FORMAT.md §11.7): a small list's value, and the data of each
//! node of a large one. An element is its length, one byte when below 255, else the byte 0xFF
//! and a u32, then its bytes. A run is read from its start; runs are small (a node's size).
//!
//! How full a run may be is `list-max-listpack-size` ([`Fill`]), as Redis decides it for a
//! quicklist node: a negative setting is a size in bytes (4, 8, 16, 32 or 64 KiB), a positive
//! one a number of elements (within 8 KiB). A run always takes its first element, whatever its
//! size.

use super::error::StoreError;

/// The length byte that says a u32 length follows.
const LONG: u8 = 0xFF;
/// Bytes of a run past which a count-limited node takes no more (Redis's safety limit).
pub const SAFETY_BYTES: usize = 8192;
/// The sizes of the negative settings -1 .. -5.
const LEVELS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// `list-max-listpack-size`: how full a run (a node, or a small list) may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill(pub i64);

impl Fill {
    /// Whether a run of `count` elements in `bytes` bytes is within the limit.
    pub fn allows(&self, count: usize, bytes: usize) -> bool {
        if self.0 < 0 {
            bytes <= self.max_bytes()
        } else {
            bytes <= SAFETY_BYTES && count as i64 <= self.0
        }
    }

    /// The most bytes a run holds (a single larger element gets a run of its own).
    pub fn max_bytes(&self) -> usize {
        if self.0 < 0 {
            LEVELS[((-self.0 - 1) as usize).min(LEVELS.len() - 1)]
        } else {
            SAFETY_BYTES
        }
    }
}

/// Bytes an element of `len` bytes takes in a run.
pub fn size(len: usize) -> usize {
    if len < LONG as usize {
        1 + len
    } else {
        5 + len
    }
}

/// Appends an element.
pub fn push(out: &mut Vec<u8>, e: &[u8]) {
    if e.len() < LONG as usize {
        out.push(e.len() as u8);
    } else {
        out.push(LONG);
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(e);
}

/// The elements of a run, checked as they are read; `at` (from [`Iter::at`]) is where the next
/// one starts.
pub struct Iter<'a> {
    run: &'a [u8],
    at: usize,
}

/// Reads a run's elements.
pub fn iter(run: &[u8]) -> Iter<'_> {
    Iter { run, at: 0 }
}

impl<'a> Iter<'a> {
    /// Offset of the next element in the run.
    pub fn at(&self) -> usize {
        self.at
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = Result<&'a [u8], StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = self.run;
        if self.at >= r.len() {
            return None;
        }
        let at = self.at;
        let bad =
            || StoreError::Corrupt(format!("a list element at byte {at} of its run runs past the run's end"));
        let (len, head) = match r[at] {
            LONG => match r.get(at + 1..at + 5) {
                Some(b) => (u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize, 5),
                None => {
                    self.at = r.len();
                    return Some(Err(bad()));
                }
            },
            n => (n as usize, 1),
        };
        match r.get(at + head..at + head + len) {
            Some(e) => {
                self.at = at + head + len;
                Some(Ok(e))
            }
            None => {
                self.at = r.len();
                Some(Err(bad()))
            }
        }
    }
}

/// The offsets of a run's elements, and of its end: `starts[i] .. starts[i + 1]` is element
/// `i`. Errors if the run does not hold exactly `count` whole elements.
pub fn starts(run: &[u8], count: usize) -> Result<Vec<usize>, StoreError> {
    let mut v = Vec::with_capacity(count + 1);
    let mut it = iter(run);
    loop {
        v.push(it.at());
        match it.next() {
            None => break,
            Some(e) => {
                e?;
            }
        }
    }
    if v.len() != count + 1 {
        return Err(StoreError::Corrupt(format!(
            "a list run says {count} elements and holds {}",
            v.len() - 1
        )));
    }
    Ok(v)
}

/// A small list's value: `count` (u32), then the run.
pub fn encode_small<'a>(elems: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    let mut n = 0u32;
    for e in elems {
        push(&mut out, e);
        n += 1;
    }
    out[..4].copy_from_slice(&n.to_le_bytes());
    out
}

/// The elements of a small list's value.
pub fn decode_small(v: &[u8]) -> Result<Vec<Vec<u8>>, StoreError> {
    let count = v.get(..4).ok_or_else(|| StoreError::Corrupt("a list value shorter than 4 bytes".into()))?;
    let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
    let mut out = Vec::with_capacity(count.min(v.len()));
    for e in iter(&v[4..]) {
        out.push(e?.to_vec());
    }
    if out.len() != count {
        return Err(StoreError::Corrupt(format!(
            "a list value says {count} elements and holds {}",
            out.len()
        )));
    }
    Ok(out)
}

/// Elements and bytes of the small list of `elems`, if it is within `fill` (and not empty).
pub fn fits_small(fill: Fill, elems: &[Vec<u8>]) -> bool {
    let bytes: usize = elems.iter().map(|e| size(e.len())).sum();
    !elems.is_empty() && (elems.len() == 1 || fill.allows(elems.len(), bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_short_and_long_round_trip() {
        let long = vec![7u8; 300];
        let elems: Vec<&[u8]> = vec![b"", b"a", &long, &[1u8; 254], &[2u8; 255]];
        let mut run = Vec::new();
        for e in &elems {
            push(&mut run, e);
        }
        assert_eq!(run.len(), elems.iter().map(|e| size(e.len())).sum::<usize>());
        let back: Vec<&[u8]> = iter(&run).map(|e| e.unwrap()).collect();
        assert_eq!(back, elems);
        let s = starts(&run, elems.len()).unwrap();
        assert_eq!(s.len(), 6);
        assert_eq!(*s.last().unwrap(), run.len());
        assert!(starts(&run, 4).is_err());
        let v = encode_small(elems.iter().copied());
        assert_eq!(decode_small(&v).unwrap(), elems.iter().map(|e| e.to_vec()).collect::<Vec<_>>());
    }

    #[test]
    fn a_damaged_run_is_an_error() {
        let mut run = Vec::new();
        push(&mut run, &[1u8; 300]);
        run.truncate(200);
        assert!(iter(&run).any(|e| e.is_err()));
        let mut v = encode_small([&b"ab"[..], b"cd"]);
        v[0] = 3;
        assert!(decode_small(&v).is_err());
        assert!(decode_small(b"ab").is_err());
    }

    #[test]
    fn fill_as_redis_reads_it() {
        assert!(Fill(-2).allows(10_000, 8192) && !Fill(-2).allows(1, 8193));
        assert_eq!(Fill(-1).max_bytes(), 4096);
        assert_eq!(Fill(-9).max_bytes(), 65536);
        assert!(Fill(5).allows(5, 100) && !Fill(5).allows(6, 100) && !Fill(5).allows(2, 8193));
        assert!(!Fill(0).allows(1, 1), "0: a node per element");
    }
}
