//! The superblock's dynamic part: the allocator's state and the counters, kept in the process
//! while a batch runs and written back, as one undo-logged write, when it is sealed.

use super::layout::{ACL_AT, CLASSES, DBS, DB_AT, DYN_LEN, HEADS_AT, LAZYFREE_AT};

/// What commands change in the superblock (region bytes 128 .. 1792, FORMAT.md §11.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dynamic {
    /// First heap byte never given out.
    pub heap_top: u64,
    /// Entries in the table (expired ones, and those of flushed databases, not yet removed
    /// included).
    pub keys: u64,
    /// Bytes of the blocks that hold entries.
    pub used: u64,
    /// The bucket generation: a bucket word of another generation is empty.
    pub gen: u64,
    /// 1 while bucket words of an older generation may remain (after a flush, until swept).
    pub stale: u64,
    /// Head of each size class's free list (0: empty).
    pub heads: [u64; CLASSES],
    /// The databases (version 2).
    pub dbs: Databases,
    /// The heap block holding the ACL users' record (`acl.rs`); 0: none, the users of a
    /// server without ACL changes.
    pub acl: u64,
    /// The first entry of the pending-free list (0: none): removed keys whose values are
    /// freed in the background (`lazyfree.rs`), chained by their entries' `next`.
    pub lazyfree_head: u64,
    /// Entries on that list.
    pub lazyfree_pending: u64,
}

/// The databases' part of the dynamic state: which physical database each `SELECT` number
/// names, and per physical database its generation and counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Databases {
    /// Keys of each physical database (live ones: its current generation's).
    pub keys: [u64; DBS],
    /// Of those, keys with an expiry set.
    pub expires: [u64; DBS],
    /// Each physical database's generation: its keys carry it, and `FLUSHDB` moves it on, so
    /// that the old keys are gone at once (removed later, a batch's room at a time).
    pub gen: [u32; DBS],
    /// The physical database of each logical one (`SWAPDB` swaps two).
    pub map: [u8; DBS],
    /// Entries of older generations not yet removed.
    pub stale_keys: u64,
}

impl Databases {
    /// Every logical database its own physical one, all empty.
    pub fn fresh() -> Databases {
        let mut map = [0u8; DBS];
        for (i, m) in map.iter_mut().enumerate() {
            *m = i as u8;
        }
        Databases { keys: [0; DBS], expires: [0; DBS], gen: [0; DBS], map, stale_keys: 0 }
    }
}

impl Dynamic {
    /// The state of a store just made.
    pub fn fresh(heap_off: u64) -> Dynamic {
        Dynamic {
            heap_top: heap_off,
            keys: 0,
            used: 0,
            gen: 1,
            stale: 1,
            heads: [0; CLASSES],
            dbs: Databases::fresh(),
            acl: 0,
            lazyfree_head: 0,
            lazyfree_pending: 0,
        }
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
        let d = &self.dbs;
        for i in 0..DBS {
            let at = DB_AT + 8 * i;
            b[at..at + 8].copy_from_slice(&d.keys[i].to_le_bytes());
            let at = DB_AT + 128 + 8 * i;
            b[at..at + 8].copy_from_slice(&d.expires[i].to_le_bytes());
            let at = DB_AT + 256 + 4 * i;
            b[at..at + 4].copy_from_slice(&d.gen[i].to_le_bytes());
        }
        b[DB_AT + 320..DB_AT + 336].copy_from_slice(&d.map);
        b[DB_AT + 336..DB_AT + 344].copy_from_slice(&d.stale_keys.to_le_bytes());
        b[ACL_AT..ACL_AT + 8].copy_from_slice(&self.acl.to_le_bytes());
        b[LAZYFREE_AT..LAZYFREE_AT + 8].copy_from_slice(&self.lazyfree_head.to_le_bytes());
        b[LAZYFREE_AT + 8..LAZYFREE_AT + 16].copy_from_slice(&self.lazyfree_pending.to_le_bytes());
        b
    }

    /// Reads the bytes back.
    pub fn decode(b: &[u8; DYN_LEN as usize]) -> Dynamic {
        let w = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let mut heads = [0u64; CLASSES];
        for (i, h) in heads.iter_mut().enumerate() {
            *h = w(HEADS_AT + 8 * i);
        }
        let mut dbs = Databases::fresh();
        for i in 0..DBS {
            dbs.keys[i] = w(DB_AT + 8 * i);
            dbs.expires[i] = w(DB_AT + 128 + 8 * i);
            dbs.gen[i] =
                u32::from_le_bytes(b[DB_AT + 256 + 4 * i..DB_AT + 260 + 4 * i].try_into().expect("4 bytes"));
        }
        dbs.map.copy_from_slice(&b[DB_AT + 320..DB_AT + 336]);
        dbs.stale_keys = w(DB_AT + 336);
        Dynamic {
            heap_top: w(0),
            keys: w(8),
            used: w(16),
            gen: w(24),
            stale: w(32),
            heads,
            dbs,
            acl: w(ACL_AT),
            lazyfree_head: w(LAZYFREE_AT),
            lazyfree_pending: w(LAZYFREE_AT + 8),
        }
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
        d.dbs.keys[5] = 9;
        d.dbs.gen[15] = u32::MAX;
        d.dbs.map.swap(0, 9);
        d.dbs.stale_keys = 3;
        d.acl = 4096;
        d.lazyfree_head = 4096 + 48;
        d.lazyfree_pending = 2;
        let e = Dynamic::decode(&d.encode());
        assert_eq!(e, d);
        let mut f = d.clone();
        assert_eq!(f.diff(&d), None);
        f.keys = 5;
        f.heads[0] = 1;
        assert_eq!(f.diff(&d), Some((8, HEADS_AT)));
    }
}
