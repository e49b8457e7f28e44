//! The superblock's dynamic part: the allocator's state and the counters, kept in the process
//! while a batch runs and written back, as one undo-logged write, when it is sealed.

use super::layout::{CLASSES, DYN_LEN, HEADS_AT};

/// What commands change in the superblock (region bytes 128 .. 1152).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dynamic {
    /// First heap byte never given out.
    pub heap_top: u64,
    /// Keys in the table (expired ones not yet removed included).
    pub keys: u64,
    /// Bytes of the blocks that hold entries.
    pub used: u64,
    /// The bucket generation: a bucket word of another generation is empty.
    pub gen: u64,
    /// 1 while bucket words of an older generation may remain (after a flush, until swept).
    pub stale: u64,
    /// Head of each size class's free list (0: empty).
    pub heads: [u64; CLASSES],
}

impl Dynamic {
    /// The state of a store just made.
    pub fn fresh(heap_off: u64) -> Dynamic {
        Dynamic { heap_top: heap_off, keys: 0, used: 0, gen: 1, stale: 1, heads: [0; CLASSES] }
    }

    /// The bytes as they lie in the region.
    pub fn encode(&self) -> [u8; DYN_LEN as usize] {
        let mut b = [0u8; DYN_LEN as usize];
        for (i, v) in [self.heap_top, self.keys, self.used, self.gen, self.stale].iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        for (i, h) in self.heads.iter().enumerate() {
            b[HEADS_AT + 8 * i..HEADS_AT + 8 * i + 8].copy_from_slice(&h.to_le_bytes());
        }
        b
    }

    /// Reads the bytes back.
    pub fn decode(b: &[u8; DYN_LEN as usize]) -> Dynamic {
        let w = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let mut heads = [0u64; CLASSES];
        for (i, h) in heads.iter_mut().enumerate() {
            *h = w(HEADS_AT + 8 * i);
        }
        Dynamic { heap_top: w(0), keys: w(8), used: w(16), gen: w(24), stale: w(32), heads }
    }

    /// The smallest span of words that differ from `old`, as (offset in the part, length).
    pub fn diff(&self, old: &Dynamic) -> Option<(usize, usize)> {
        let (a, b) = (self.encode(), old.encode());
        let first = (0..a.len() / 8).find(|&i| a[8 * i..8 * i + 8] != b[8 * i..8 * i + 8])?;
        let last = (0..a.len() / 8).rev().find(|&i| a[8 * i..8 * i + 8] != b[8 * i..8 * i + 8])?;
        Some((8 * first, 8 * (last - first + 1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_diff() {
        let mut d = Dynamic::fresh(4096);
        d.heads[3] = 77;
        let e = Dynamic::decode(&d.encode());
        assert_eq!(e, d);
        let mut f = d.clone();
        assert_eq!(f.diff(&d), None);
        f.keys = 5;
        f.heads[0] = 1;
        assert_eq!(f.diff(&d), Some((8, HEADS_AT)));
    }
}
