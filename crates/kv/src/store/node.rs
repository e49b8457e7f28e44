//! A tree node's block, for both trees (`tree.rs`, FORMAT.md §11.5, and `ztree.rs`, §11.9):
//! its size, and how it is read, changed and made.
//!
//! A node has at most [`NODE`] bytes. It is made in the smallest size class that holds what it
//! is made with (`Store::node_fit`), so that a collection of a few members does not cost a
//! whole [`NODE`]; a node that outgrows its bytes is made again, larger. Its size is in header
//! bytes 4 .. 6 (u16), written when the node is made and never changed: 0 means [`NODE`], so a
//! node of [`NODE`] bytes reads exactly as every node made before nodes had sizes. Only the
//! first `size` bytes of the block are the node's; in memory a node is a [`Page`] of [`NODE`]
//! bytes whose bytes past its size are zero.

use super::alloc::Block;
use super::error::StoreError;
use super::mem::Mem;
use super::Store;

/// Bytes of the largest node: a size class's blocks (checked by a test).
pub const NODE: u64 = 4416;
/// [`NODE`] as a length.
pub const N: usize = NODE as usize;
/// A node in memory.
pub type Page = [u8; N];
/// Bytes of a node's header (both trees).
pub const HEAD: usize = 16;
/// Where the node's size is.
const SIZE_AT: usize = 4;
/// A node's `kind`: a leaf.
pub const LEAF: u8 = 1;
/// A node's `kind`: an inner node.
pub const INNER: u8 = 2;
/// Bytes compared at a time where a changed node's bytes are equal (`Store::node_write`).
const SKIP: usize = 32;

/// The node's bytes.
pub fn size(p: &Page) -> usize {
    head_size(p[..HEAD].try_into().expect("a header"))
}

/// The bytes of the node whose header is `head`.
pub fn head_size(head: &[u8; HEAD]) -> usize {
    match u16::from_le_bytes([head[SIZE_AT], head[SIZE_AT + 1]]) {
        0 => N,
        s => s as usize,
    }
}

/// Makes `p` a node of `bytes` bytes (at most [`NODE`]); the bytes past them are zeroed.
pub fn set_size(p: &mut Page, bytes: usize) {
    assert!((HEAD..=N).contains(&bytes), "a node of {bytes} bytes");
    let v = if bytes == N { 0 } else { bytes as u16 };
    p[SIZE_AT..SIZE_AT + 2].copy_from_slice(&v.to_le_bytes());
    p[bytes..].fill(0);
}

impl<M: Mem> Store<M> {
    /// The bytes a node made to hold `need` bytes gets: the smallest size class that holds
    /// them, at most [`NODE`].
    pub(super) fn node_fit(&self, need: usize) -> usize {
        let need = need.clamp(HEAD, N) as u64;
        self.class_for(need).map_or(N, |c| self.classes[c].min(NODE) as usize)
    }

    /// The bytes a node made to hold `bytes` bytes past its header gets: the smallest size
    /// class that holds them ([`Store::node_fit`]); a half of a split (`grow`: in a tree that is
    /// growing) gets room for half as much again.
    pub(super) fn node_size_for(&self, bytes: usize, grow: bool) -> usize {
        self.node_fit(HEAD + bytes + if grow { bytes / 2 } else { 0 })
    }

    /// A page to read a node into: the store's spare one, else a new one. Its bytes are what
    /// its last user left; [`Store::node_read`] sets every one.
    pub(super) fn page_take(&self) -> Box<Page> {
        self.spare_page.take().unwrap_or_else(|| Box::new([0u8; N]))
    }

    /// Gives a page back for the next [`Store::page_take`].
    pub(super) fn page_give(&self, p: Box<Page>) {
        self.spare_page.set(Some(p));
    }

    /// Reads the node at `off` into `p` and checks its first word: `tag`, a kind, a size that
    /// its block's class holds, in the heap. The caller checks the rest. `what` names the tree
    /// in errors.
    pub(super) fn node_read(&self, off: u64, p: &mut Page, tag: u8, what: &str) -> Result<(), StoreError> {
        let mut head = [0u8; HEAD];
        let n = self.node_head(off, &mut head, tag, what)?;
        p[..HEAD].copy_from_slice(&head);
        self.mem.read(off + HEAD as u64, &mut p[HEAD..n])?;
        p[n..].fill(0);
        Ok(())
    }

    /// Reads the leaf at `off`, whose header `head` [`Store::node_head`] read and checked (its
    /// size `n`), into `p` as far as a search needs it: the header and the slots, checked as a
    /// whole leaf's are (both trees' leaves: `count` at 8, `data_lo` at 10, `garbage` at 12,
    /// slots of u16 from [`HEAD`]). The entries are read as the search meets them
    /// ([`Store::leaf_bytes`]); the rest of `p` is stale, so a change that needs the whole leaf
    /// reads it whole first.
    pub(super) fn leaf_slots(
        &self,
        off: u64,
        head: &[u8; HEAD],
        n: usize,
        p: &mut Page,
        what: &str,
    ) -> Result<(), StoreError> {
        p[..HEAD].copy_from_slice(head);
        let c = u16::from_le_bytes([p[8], p[9]]) as usize;
        let lo = u16::from_le_bytes([p[10], p[11]]) as usize;
        let garbage = u16::from_le_bytes([p[12], p[13]]) as usize;
        if HEAD + 2 * c > lo || lo > n || garbage > n - lo {
            return Err(StoreError::Corrupt(format!(
                "the {what} node at {off} says {c} entries, which do not fit"
            )));
        }
        self.mem.read(off + HEAD as u64, &mut p[HEAD..HEAD + 2 * c])
    }

    /// Reads bytes `at .. at + len` of the node at `off` (of size `n`, as `p`'s header says)
    /// into the same bytes of `p`, cut at the node's end (the caller's checks of what it
    /// decodes there find an entry that runs past it).
    pub(super) fn leaf_bytes(&self, off: u64, p: &mut Page, at: usize, len: usize) -> Result<(), StoreError> {
        let end = (at + len).min(size(p));
        if at < end {
            self.mem.read(off + at as u64, &mut p[at..end])?;
        }
        Ok(())
    }

    /// Reads the header of the node at `off` into `head` and checks it as [`Store::node_read`]
    /// does; returns the node's size (its bytes lie in the heap).
    pub(super) fn node_head(
        &self,
        off: u64,
        head: &mut [u8; HEAD],
        tag: u8,
        what: &str,
    ) -> Result<usize, StoreError> {
        if !self.geo.in_heap(off, HEAD as u64) {
            return Err(StoreError::Corrupt(format!("a {what} link points at {off}, outside the heap")));
        }
        self.mem.read(off, head)?;
        let n = head_size(head);
        if head[0] != tag
            || (head[1] != LEAF && head[1] != INNER)
            || n < HEAD
            || self.classes.get(head[3] as usize).is_none_or(|&s| s < n as u64)
            || !self.geo.in_heap(off, n as u64)
        {
            return Err(StoreError::Corrupt(format!("the block at {off} is not a {what} node")));
        }
        Ok(n)
    }

    /// Writes the spans of `new` that differ from `old` (the node's bytes now): undo-logged,
    /// unless the node was made since the last savepoint (`young`: nothing else has seen it).
    pub(super) fn node_write(&mut self, off: u64, old: &Page, new: &Page) -> Result<(), StoreError> {
        debug_assert_eq!(old[..8], new[..8], "a node's first word never changes");
        let n = size(new);
        debug_assert!(new[n..].iter().all(|&b| b == 0), "a node's bytes past its size are zero");
        let young = self.batch.young.contains(&off);
        let mut i = 8;
        while i < n {
            if old[i] == new[i] {
                // Equal bytes are most of a changed node: skipped a word at a time.
                while i + SKIP <= n && old[i..i + SKIP] == new[i..i + SKIP] {
                    i += SKIP;
                }
                if i < n && old[i] == new[i] {
                    i += 1;
                }
                continue;
            }
            let start = i;
            let mut end = i + 1;
            let mut j = end;
            // Join differences less than 16 bytes apart.
            while j < n && j < end + 16 {
                if old[j] != new[j] {
                    end = j + 1;
                }
                j += 1;
            }
            if young {
                self.fresh(off + start as u64, &new[start..end])?;
            } else {
                self.meta(off + start as u64, &new[start..end])?;
            }
            i = end;
        }
        Ok(())
    }

    /// Stores `data` at byte `at` of the node at `off`: undo-logged, unless the node was made
    /// since the last savepoint (`young`).
    pub(super) fn node_store(&mut self, off: u64, at: usize, data: &[u8]) -> Result<(), StoreError> {
        debug_assert!(at >= 8 && at + data.len() <= N, "bytes {at}+{} of a node", data.len());
        if self.batch.young.contains(&off) {
            self.fresh(off + at as u64, data)
        } else {
            self.meta(off + at as u64, data)
        }
    }

    /// Stores what putting an entry of `len` bytes at slot `i` changed in the leaf at `off`,
    /// whose bytes `p` are after the change (both trees' leaves: `count` at 8, `data_lo` at
    /// 10, slots of u16 from [`HEAD`], entries packed from the end down, the new one at
    /// `data_lo`): the count and `data_lo`, the slots from `i` on, the entry. The spans are
    /// those [`Store::node_write`] would find against the leaf before, without a copy of it to
    /// compare.
    pub(super) fn leaf_inserted(
        &mut self,
        off: u64,
        p: &Page,
        i: usize,
        len: usize,
    ) -> Result<(), StoreError> {
        let count = u16::from_le_bytes([p[8], p[9]]) as usize;
        let (slots, end) = (HEAD + 2 * i, HEAD + 2 * count);
        // The header's count and `data_lo` (bytes 8 .. 12), with the slots when they are near.
        if slots < 12 + 16 {
            self.node_store(off, 8, &p[8..end])?;
        } else {
            self.node_store(off, 8, &p[8..12])?;
            self.node_store(off, slots, &p[slots..end])?;
        }
        let at = u16::from_le_bytes([p[10], p[11]]) as usize;
        self.node_store(off, at, &p[at..at + len])
    }

    /// Stores what removing slot `i` changed in the leaf at `off`, whose bytes `p` are after
    /// the change (the layout of [`Store::leaf_inserted`]; `garbage` at 12): the count and
    /// `garbage`, and the slots from `i` to the old count's (the last now zero).
    pub(super) fn leaf_removed(&mut self, off: u64, p: &Page, i: usize) -> Result<(), StoreError> {
        let count = u16::from_le_bytes([p[8], p[9]]) as usize;
        let (slots, end) = (HEAD + 2 * i, HEAD + 2 * (count + 1));
        if slots < 14 + 16 {
            self.node_store(off, 8, &p[8..end])
        } else {
            self.node_store(off, 8, &p[8..14])?;
            self.node_store(off, slots, &p[slots..end])
        }
    }

    /// Adds `d` to the count (u64) at byte `at` of the node at `off`, a node this command read
    /// and checked on its way down (a step of its path, whose entry holds the count): stores
    /// the count's bytes that change, as [`Store::node_write`] would, without reading the node
    /// again. `what` names the tree in errors.
    pub(super) fn node_add(&mut self, off: u64, at: usize, d: i64, what: &str) -> Result<(), StoreError> {
        debug_assert!(at >= HEAD && at + 8 <= N, "a count at byte {at}");
        let mut old = [0u8; 8];
        self.mem.read(off + at as u64, &mut old)?;
        let v = u64::from_le_bytes(old)
            .checked_add_signed(d)
            .ok_or_else(|| StoreError::Corrupt(format!("{what} node {off}: a count goes below 0")))?;
        let new = v.to_le_bytes();
        let Some(lo) = (0..8).find(|&k| old[k] != new[k]) else { return Ok(()) };
        let hi = (0..8).rfind(|&k| old[k] != new[k]).map_or(lo, |k| k) + 1;
        self.node_store(off, at + lo, &new[lo..hi])
    }

    /// A new node holding `p` (its size set; its tag and class are set here).
    pub(super) fn node_new(&mut self, p: &mut Page, tag: u8) -> Result<u64, StoreError> {
        let n = size(p);
        let block: Block = self.alloc(n as u64)?;
        p[0] = tag;
        p[3] = block.class;
        let off = block.off;
        if block.untouched {
            self.fresh(off, &p[..n])?;
        } else {
            // The first word holds a free list's link in the sealed state.
            self.fresh(off + 8, &p[8..n])?;
            self.meta(off, &p[..8])?;
        }
        self.batch.young.insert(off);
        Ok(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::layout::class_sizes;
    use crate::store::VecMem;

    #[test]
    fn the_largest_node_is_a_size_class() {
        assert!(class_sizes().contains(&NODE));
    }

    #[test]
    fn a_node_is_made_in_the_smallest_class_that_holds_it() {
        let mem = VecMem::new(4 << 20);
        let s = Store::open(&mem, 64).unwrap();
        assert_eq!(s.node_fit(0), 48);
        assert_eq!(s.node_fit(132), 144);
        assert_eq!(s.node_fit(289), 384);
        assert_eq!(s.node_fit(N - 1), N);
        assert_eq!(s.node_fit(N + 1), N);
    }

    #[test]
    fn a_full_node_keeps_size_zero_and_a_small_one_its_bytes() {
        let mut p = [0xAAu8; N];
        set_size(&mut p, N);
        assert_eq!(p[4..6], [0, 0]);
        assert_eq!(size(&p), N);
        set_size(&mut p, 144);
        assert_eq!(p[4..6], 144u16.to_le_bytes());
        assert_eq!(size(&p), 144);
        assert!(p[144..].iter().all(|&b| b == 0));
    }

    #[test]
    fn format_md_says_what_the_code_does() {
        let doc = include_str!("../../../../docs/FORMAT.md");
        let sec = &doc[doc.find("### 11.5 Trees").expect("FORMAT.md has section 11.5")..];
        let sec = &sec[..sec.find("\n### ").unwrap_or(sec.len())];
        let row = sec.lines().find(|l| l.contains("| `size` |")).expect("a row for size");
        assert!(row.starts_with(&format!("| {SIZE_AT} | 2 |")), "{row}");
        assert!(row.contains(&format!("0 for {NODE}")), "{row}");
        let sizes = class_sizes();
        let below = sizes.iter().copied().filter(|&c| c < NODE).max().unwrap();
        assert!(row.contains(&format!("{} .. {below}", sizes[0])), "{row}");
    }

    #[test]
    fn a_node_larger_than_its_block_is_refused() {
        let mem = VecMem::new(4 << 20);
        let mut s = Store::open(&mem, 64).unwrap();
        let mut p = [0u8; N];
        p[1] = LEAF;
        set_size(&mut p, 144);
        let off = s.node_new(&mut p, b'T').unwrap();
        let mut q = [0u8; N];
        s.node_read(off, &mut q, b'T', "test").unwrap();
        assert_eq!(size(&q), 144);
        // Its size raised past its class's blocks: not a node.
        mem.write(off + 4, &400u16.to_le_bytes()).unwrap();
        let e = s.node_read(off, &mut q, b'T', "test").unwrap_err();
        assert!(e.to_string().contains("not a test node"), "{e}");
        mem.write(off + 4, &8u16.to_le_bytes()).unwrap();
        assert!(s.node_read(off, &mut q, b'T', "test").is_err());
    }
}
