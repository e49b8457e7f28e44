//! WHISPER's crit-bit tree: a persistent binary trie of u64 keys (and u64 values) that keeps
//! them in order, for ordered range reads.
//!
//! Layout, from offset 0 of the memory: a header (64 bytes: magic, root, heap head, heap end),
//! then nodes of 32 bytes, allocated from the heap and never changed once published except for
//! an internal node's child pointers:
//! - leaf: tag 1, key, value;
//! - internal: tag 2, the critical bit (0 is the most significant), child 0, child 1.
//!
//! Order of stores and syncs (each line one epoch; the last ended by the commit):
//! - **insert** of a new key: (1) the new leaf, the new internal node above it (whose other
//!   child is the subtree it goes in front of) and the heap head; (2) the one 8-byte pointer
//!   (the root, or a parent's child) that switches from that subtree to the new internal node.
//! - **update** of a present key: (1) a new leaf and the heap head; (2) the one pointer to the
//!   old leaf, switched to the new one.
//!
//! A crash before the last fence leaves the tree as it was, with at most unreachable nodes below
//! the heap head. A range read only reads.

use super::mem::Mem;
use mojim::error::{Error, Result};

const MAGIC: u64 = 0x5748_4953_5043_5431; // "WHISPCT1"
const HEADER: u64 = 64;
const ROOT: u64 = 8;
/// Bytes per node.
pub const NODE: u64 = 32;
const LEAF: u64 = 1;
const INNER: u64 = 2;

/// A crit-bit tree in a [`Mem`].
#[derive(Clone, Debug)]
pub struct CritBit {
    heap_head: u64,
    heap_end: u64,
}

fn corrupt(what: &str) -> Error {
    Error::Config(format!("whisper crit-bit tree: {what}; format the area again"))
}

/// The direction `key` takes at critical bit `bit`.
fn dir(key: u64, bit: u64) -> u64 {
    (key >> (63 - bit)) & 1
}

/// What a range read is after.
#[derive(Clone, Copy)]
struct Walk {
    from: u64,
    limit: usize,
    /// Every key of the subtree is at least `from`.
    all: bool,
}

/// A node, read.
enum Node {
    Leaf { key: u64, value: u64 },
    Inner { bit: u64, child: [u64; 2] },
}

impl CritBit {
    /// Bytes needed for `keys` keys and `updates` updates.
    pub fn bytes(keys: u64, updates: u64) -> u64 {
        HEADER + (2 * keys + updates) * NODE
    }

    /// Formats the first `size` bytes of `m` as an empty tree, durably.
    pub fn format(m: &mut impl Mem, size: u64) -> Result<CritBit> {
        if size < HEADER + 2 * NODE || size > m.size() {
            return Err(Error::Config(format!(
                "whisper crit-bit tree: {size} bytes hold no node; use a larger --region-size"
            )));
        }
        let mut h = [0u8; 32];
        for (i, v) in [MAGIC, 0, HEADER, size].into_iter().enumerate() {
            h[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        m.write(0, &h)?;
        m.commit()?;
        Ok(CritBit { heap_head: HEADER, heap_end: size })
    }

    /// Opens a formatted tree.
    pub fn open(m: &impl Mem) -> Result<CritBit> {
        if m.read_u64(0)? != MAGIC {
            return Err(corrupt("no magic number at offset 0"));
        }
        let (head, end) = (m.read_u64(16)?, m.read_u64(24)?);
        if head < HEADER || head > end || end > m.size() {
            return Err(corrupt("the header's heap does not fit"));
        }
        Ok(CritBit { heap_head: head, heap_end: end })
    }

    fn node(&self, m: &impl Mem, at: u64) -> Result<Node> {
        if at < HEADER || at + NODE > self.heap_head {
            return Err(corrupt("a pointer leads outside the allocated nodes"));
        }
        let mut b = [0u8; 32];
        m.read(at, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        match w(0) {
            LEAF => Ok(Node::Leaf { key: w(1), value: w(2) }),
            INNER if w(1) < 64 => Ok(Node::Inner { bit: w(1), child: [w(2), w(3)] }),
            _ => Err(corrupt("a node has an unknown tag")),
        }
    }

    fn alloc(&mut self, m: &mut impl Mem, words: [u64; 4]) -> Result<u64> {
        if self.heap_head + NODE > self.heap_end {
            return Err(Error::Config("whisper crit-bit tree: the heap is full; use a larger area".into()));
        }
        let at = self.heap_head;
        let mut b = [0u8; 32];
        for (i, v) in words.into_iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        m.write(at, &b)?;
        self.heap_head += NODE;
        Ok(at)
    }

    /// Inserts or updates `key`; durable on return.
    pub fn put(&mut self, m: &mut impl Mem, key: u64, value: u64) -> Result<()> {
        let root = m.read_u64(ROOT)?;
        if root == 0 {
            let leaf = self.alloc(m, [LEAF, key, value, 0])?;
            m.write_u64(16, self.heap_head)?;
            m.fence()?;
            m.write_u64(ROOT, leaf)?;
            return m.commit();
        }
        // The leaf that shares the longest prefix with key.
        let mut at = root;
        let best = loop {
            match self.node(m, at)? {
                Node::Leaf { key: k, .. } => break k,
                Node::Inner { bit, child } => at = child[dir(key, bit) as usize],
            }
        };
        // Where the new node goes: the first pointer to a leaf or to a node of a later bit.
        let diff = key ^ best;
        let newbit = if diff == 0 { 64 } else { diff.leading_zeros() as u64 };
        let mut ptr = ROOT;
        let mut at = root;
        while let Node::Inner { bit, child } = self.node(m, at)? {
            if bit > newbit {
                break;
            }
            let d = dir(key, bit);
            ptr = at + 16 + 8 * d;
            at = child[d as usize];
        }
        let leaf = self.alloc(m, [LEAF, key, value, 0])?;
        let target = if newbit == 64 {
            leaf
        } else {
            let mut child = [at, at];
            child[dir(key, newbit) as usize] = leaf;
            self.alloc(m, [INNER, newbit, child[0], child[1]])?
        };
        m.write_u64(16, self.heap_head)?;
        m.fence()?;
        m.write_u64(ptr, target)?;
        m.commit()
    }

    /// The value of `key`.
    pub fn get(&self, m: &impl Mem, key: u64) -> Result<Option<u64>> {
        let mut at = m.read_u64(ROOT)?;
        if at == 0 {
            return Ok(None);
        }
        loop {
            match self.node(m, at)? {
                Node::Leaf { key: k, value } => return Ok((k == key).then_some(value)),
                Node::Inner { bit, child } => at = child[dir(key, bit) as usize],
            }
        }
    }

    /// Up to `limit` keys and values from `from` on, in key order.
    pub fn range(&self, m: &impl Mem, from: u64, limit: usize) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        let root = m.read_u64(ROOT)?;
        if root != 0 && limit > 0 {
            self.walk(m, root, Walk { from, limit, all: false }, &mut out, 0)?;
        }
        Ok(out)
    }

    /// Appends the keys of the subtree at `at` that are at least `from` (all of them if `all`).
    fn walk(&self, m: &impl Mem, at: u64, w: Walk, out: &mut Vec<(u64, u64)>, depth: u32) -> Result<()> {
        if depth > 64 {
            return Err(corrupt("the tree is deeper than 64 levels"));
        }
        if out.len() >= w.limit {
            return Ok(());
        }
        match self.node(m, at)? {
            Node::Leaf { key, value } => {
                if w.all || key >= w.from {
                    out.push((key, value));
                }
            }
            Node::Inner { bit, child } => {
                // Every key below shares the bits above `bit`: compare that prefix with from's.
                let (mut all0, mut all1, mut skip0) = (true, true, false);
                if !w.all {
                    let mask = if bit == 0 { 0 } else { !0u64 << (64 - bit) };
                    let prefix = self.any_key(m, at)? & mask;
                    let f = w.from & mask;
                    if prefix < f {
                        return Ok(());
                    }
                    if prefix == f {
                        // from's own bit decides: 1 skips the 0 side; 0 filters it.
                        skip0 = dir(w.from, bit) == 1;
                        all0 = false;
                        all1 = !skip0;
                    }
                }
                if !skip0 {
                    self.walk(m, child[0], Walk { all: all0, ..w }, out, depth + 1)?;
                }
                self.walk(m, child[1], Walk { all: all1, ..w }, out, depth + 1)?;
            }
        }
        Ok(())
    }

    /// A key of the subtree at `at` (its leftmost).
    fn any_key(&self, m: &impl Mem, mut at: u64) -> Result<u64> {
        for _ in 0..=64 {
            match self.node(m, at)? {
                Node::Leaf { key, .. } => return Ok(key),
                Node::Inner { child, .. } => at = child[0],
            }
        }
        Err(corrupt("the tree is deeper than 64 levels"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::XorShift;
    use crate::whisper::mem::VecMem;
    use std::collections::BTreeMap;

    #[test]
    fn a_seeded_workload_matches_a_btree_map_in_order() {
        let mut m = VecMem::new(1 << 20);
        let mut t = CritBit::format(&mut m, 1 << 20).unwrap();
        let mut reference = BTreeMap::new();
        let mut rng = XorShift(0xC817_B175_0000_0001);
        for i in 0..4000u64 {
            // Keys from a small space (many updates) mixed with full-width ones.
            let key = if i % 3 == 0 { rng.next() } else { rng.next() % 500 };
            match rng.next() % 5 {
                0 => {
                    let from = if rng.next().is_multiple_of(2) { rng.next() % 600 } else { rng.next() };
                    let want: Vec<_> = reference.range(from..).take(16).map(|(k, v)| (*k, *v)).collect();
                    assert_eq!(t.range(&m, from, 16).unwrap(), want, "range from {from} at op {i}");
                }
                1 => assert_eq!(t.get(&m, key).unwrap(), reference.get(&key).copied()),
                _ => {
                    t.put(&mut m, key, i).unwrap();
                    reference.insert(key, i);
                }
            }
        }
        let t = CritBit::open(&m).unwrap();
        let all: Vec<_> = reference.into_iter().collect();
        assert_eq!(t.range(&m, 0, usize::MAX).unwrap(), all);
    }

    #[test]
    fn extreme_keys_and_an_empty_tree() {
        let mut m = VecMem::new(1 << 12);
        let mut t = CritBit::format(&mut m, 1 << 12).unwrap();
        assert_eq!(t.range(&m, 0, 10).unwrap(), vec![]);
        assert_eq!(t.get(&m, 0).unwrap(), None);
        for k in [u64::MAX, 0, 1 << 63, 5] {
            t.put(&mut m, k, k ^ 1).unwrap();
        }
        let ks: Vec<u64> = t.range(&m, 0, 10).unwrap().into_iter().map(|x| x.0).collect();
        assert_eq!(ks, vec![0, 5, 1 << 63, u64::MAX]);
        assert_eq!(t.range(&m, 6, 1).unwrap(), vec![(1 << 63, (1 << 63) ^ 1)]);
        assert!(CritBit::format(&mut m, 64).is_err());
        assert!(CritBit::open(&VecMem::new(4096)).is_err());
    }
}
