//! A counted B+tree in the heap, for collections too large to rewrite whole on every change
//! (a hash's fields; FORMAT.md §11.5). Entries are ordered by a 64-bit keyed hash of their key
//! (the store's [`KeyHasher`](super::KeyHasher)), so that inner nodes hold fixed-size
//! separators, a scan's cursor is a hash that stays valid while the tree changes, and nobody who
//! cannot read the region can choose keys that pile up in one leaf. Equal hashes are allowed
//! (they sit next to one another, possibly across leaves, and are told apart by their keys).
//! Every inner entry carries its subtree's entry count, so that the n-th entry (a uniformly
//! random one) is found in O(height).
//!
//! A node is one heap block of at most [`NODE`] bytes, of the size that holds what it is made
//! with (`node.rs`): a tree of one leaf has a leaf of its size; a leaf of a larger tree, a half
//! of a split and an inner node get room to grow. Its first word (tag, kind, level, class, size)
//! is written when it is made and never changes. Changes to a node are made on a copy of it and
//! written back as the spans that differ: undo-logged, unless the node was made since the last
//! savepoint, when nothing else can have seen it (`young`). A node that must be rewritten whole
//! (compacted, grown, split, merged) is made anew and the old one freed, copy-on-write: the work
//! of one change is O(height) nodes, whatever the tree's size.
//!
//! Leaf: `count` (u16) at 8, `data_lo` (u16, where the packed entries start) at 10, `garbage`
//! (u16, bytes of dead entries below the end) at 12; slots (u16 entry offsets, in order) from
//! byte 16 up; entries packed from the node's end down. An entry is `hash` (u64), `flen` (u16), `vlen`
//! (u16), the key, the value; when key and value together pass [`INLINE_MAX`] bytes, `flen` is
//! 0xFFFF and `vlen` the class of a block of their own, whose offset (u64), key length (u32) and
//! value length (u32) follow (the block holds the key, then the value).
//!
//! Inner node: `count` (u16) at 8; from byte 16, entries of `sep` (u64), `child` (u64), `count`
//! (u64): every hash in child `i`'s subtree is at least `sep_i` (for `i` > 0) and at most
//! `sep_{i+1}`.

use super::error::StoreError;
use super::mem::Mem;
pub use super::node::NODE;
use super::node::{self, Page, HEAD, INNER, LEAF, N};
use super::Store;

/// Key and value bytes an entry holds in its leaf; larger ones get a block of their own.
pub const INLINE_MAX: usize = 1000;
const TAG: u8 = b'T';
const IENT: usize = 24;
/// Children an inner node holds at most.
const INNER_CAP: usize = (N - HEAD) / IENT;
const _: () = assert!(INNER_CAP >= 100, "inner nodes of a wide fan-out");
/// Levels a tree may have (far more than any tree the heap could hold needs).
const MAX_HEIGHT: usize = 16;
const EXT: u16 = 0xFFFF;

/// A tree, as its owner keeps it: 16 bytes (FORMAT.md §11.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The root node.
    pub root: u64,
    /// Entries in the tree.
    pub len: u64,
}

impl Tree {
    /// Bytes of a handle.
    pub const LEN: usize = 16;

    /// The 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.root.to_le_bytes());
        b[8..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Reads 16 bytes (`None` if there are not 16).
    pub fn decode(b: &[u8]) -> Option<Tree> {
        let b: &[u8; 16] = b.try_into().ok()?;
        Some(Tree {
            root: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            len: u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
        })
    }
}

fn u16_at(p: &[u8], at: usize) -> usize {
    u16::from_le_bytes([p[at], p[at + 1]]) as usize
}

fn set_u16(p: &mut [u8], at: usize, v: usize) {
    p[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

fn set_u64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn count(p: &Page) -> usize {
    u16_at(p, 8)
}

fn level(p: &Page) -> u8 {
    p[2]
}

/// Where an entry's key and value are.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// In the leaf: the key at `at`, `flen` bytes, then the value, `vlen` bytes.
    Inline { at: usize, flen: usize, vlen: usize },
    /// In a block of its own.
    Ext { off: u64, class: u8, flen: u64, vlen: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    hash: u64,
    /// Bytes of the entry in the leaf.
    size: usize,
    loc: Loc,
}

/// Leaf helpers (pure: on a page in memory).
mod leaf {
    use super::*;

    pub fn data_lo(p: &Page) -> usize {
        u16_at(p, 10)
    }

    pub fn garbage(p: &Page) -> usize {
        u16_at(p, 12)
    }

    pub fn slot(p: &Page, i: usize) -> usize {
        u16_at(p, HEAD + 2 * i)
    }

    /// Bytes of live entries.
    pub fn live(p: &Page) -> usize {
        node::size(p) - data_lo(p) - garbage(p)
    }

    /// Bytes free between the slots and the entries.
    pub fn gap(p: &Page) -> usize {
        data_lo(p) - (HEAD + 2 * count(p))
    }

    /// An empty leaf of `bytes` bytes.
    pub fn init(p: &mut Page, bytes: usize) {
        p.fill(0);
        p[0] = TAG;
        p[1] = LEAF;
        node::set_size(p, bytes);
        set_u16(p, 10, bytes);
    }

    pub fn entry(p: &Page, i: usize, node: u64) -> Result<Entry, StoreError> {
        let at = slot(p, i);
        let bad =
            || StoreError::Corrupt(format!("tree leaf {node}: entry {i} at byte {at} runs past the leaf"));
        let end = node::size(p);
        if at < HEAD + 2 * count(p) || at + 12 > end {
            return Err(bad());
        }
        let hash = u64_at(p, at);
        let (flen, vlen) = (u16_at(p, at + 8), u16_at(p, at + 10));
        if flen == EXT as usize {
            if at + 28 > end {
                return Err(bad());
            }
            let loc = Loc::Ext {
                off: u64_at(p, at + 12),
                class: vlen as u8,
                flen: u64::from(u32::from_le_bytes(p[at + 20..at + 24].try_into().expect("4 bytes"))),
                vlen: u64::from(u32::from_le_bytes(p[at + 24..at + 28].try_into().expect("4 bytes"))),
            };
            return Ok(Entry { hash, size: 28, loc });
        }
        if at + 12 + flen + vlen > end {
            return Err(bad());
        }
        Ok(Entry { hash, size: 12 + flen + vlen, loc: Loc::Inline { at: at + 12, flen, vlen } })
    }

    /// The first slot whose hash is at least `h`.
    pub fn lower_bound(p: &Page, h: u64) -> usize {
        let (mut lo, mut hi) = (0, count(p));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if u64_at(p, slot(p, mid)) < h {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Puts `bytes` (an encoded entry) at slot `i`; the caller checked the gap holds it.
    pub fn insert(p: &mut Page, i: usize, bytes: &[u8]) {
        let c = count(p);
        let at = data_lo(p) - bytes.len();
        p[at..at + bytes.len()].copy_from_slice(bytes);
        p.copy_within(HEAD + 2 * i..HEAD + 2 * c, HEAD + 2 * i + 2);
        set_u16(p, HEAD + 2 * i, at);
        set_u16(p, 8, c + 1);
        set_u16(p, 10, at);
    }

    /// Removes slot `i` (its entry, `size` bytes, becomes garbage).
    pub fn remove(p: &mut Page, i: usize, size: usize) {
        let c = count(p);
        p.copy_within(HEAD + 2 * i + 2..HEAD + 2 * c, HEAD + 2 * i);
        set_u16(p, HEAD + 2 * (c - 1), 0);
        set_u16(p, 8, c - 1);
        let g = garbage(p) + size;
        set_u16(p, 12, g);
    }
}

/// Inner-node helpers (pure).
mod inner {
    use super::*;

    pub fn sep(p: &Page, i: usize) -> u64 {
        u64_at(p, HEAD + IENT * i)
    }

    pub fn child(p: &Page, i: usize) -> u64 {
        u64_at(p, HEAD + IENT * i + 8)
    }

    pub fn cnt(p: &Page, i: usize) -> u64 {
        u64_at(p, HEAD + IENT * i + 16)
    }

    pub fn set(p: &mut Page, i: usize, e: (u64, u64, u64)) {
        set_u64(p, HEAD + IENT * i, e.0);
        set_u64(p, HEAD + IENT * i + 8, e.1);
        set_u64(p, HEAD + IENT * i + 16, e.2);
    }

    pub fn get(p: &Page, i: usize) -> (u64, u64, u64) {
        (sep(p, i), child(p, i), cnt(p, i))
    }

    /// An empty inner node of `bytes` bytes at `level`.
    pub fn init(p: &mut Page, bytes: usize, level: u8) {
        p.fill(0);
        p[0] = TAG;
        p[1] = INNER;
        p[2] = level;
        node::set_size(p, bytes);
    }

    /// Children a node of its size holds.
    pub fn cap(p: &Page) -> usize {
        (node::size(p) - HEAD) / IENT
    }

    /// Replaces entries `at .. at + remove` with `new`; the caller checked the result fits.
    pub fn splice(p: &mut Page, at: usize, remove: usize, new: &[(u64, u64, u64)]) {
        let c = count(p);
        let tail = HEAD + IENT * (at + remove)..HEAD + IENT * c;
        let to = HEAD + IENT * (at + new.len());
        p.copy_within(tail, to);
        let nc = c - remove + new.len();
        for (k, e) in new.iter().enumerate() {
            set(p, at + k, *e);
        }
        p[HEAD + IENT * nc..HEAD + IENT * c.max(nc)].fill(0);
        set_u16(p, 8, nc);
    }
}

/// The inner nodes from the root down to a leaf, and the child taken in each.
#[derive(Clone, Copy)]
struct Path {
    steps: [(u64, usize); MAX_HEIGHT],
    depth: usize,
}

impl Path {
    fn new() -> Path {
        Path { steps: [(0, 0); MAX_HEIGHT], depth: 0 }
    }
}

/// How a node's change reaches its parent.
enum Up {
    /// The subtree's count changed by this much.
    Delta(i64),
    /// The parent's entries `at .. at + remove` become these.
    Splice { at: usize, remove: usize, new: Vec<(u64, u64, u64)> },
}

/// Where a key is, or would go.
struct Spot {
    path: Path,
    leaf: u64,
    slot: usize,
    found: Option<Entry>,
}

impl<M: Mem> Store<M> {
    fn read_page(&self, off: u64, p: &mut Page) -> Result<(), StoreError> {
        self.node_read(off, p, TAG, "tree")?;
        let c = count(p);
        let n = node::size(p);
        let ok = if p[1] == LEAF {
            HEAD + 2 * c <= leaf::data_lo(p)
                && leaf::data_lo(p) <= n
                && leaf::garbage(p) <= n - leaf::data_lo(p)
        } else {
            c <= inner::cap(p)
        };
        if !ok {
            return Err(StoreError::Corrupt(format!(
                "the tree node at {off} says {c} entries, which do not fit"
            )));
        }
        Ok(())
    }

    /// Writes the spans of `new` that differ from `old` (the node's bytes now).
    fn write_page(&mut self, off: u64, old: &Page, new: &Page) -> Result<(), StoreError> {
        self.node_write(off, old, new)
    }

    /// A new node holding `p` (its size set; its tag and class are set here).
    fn new_page(&mut self, p: &mut Page) -> Result<u64, StoreError> {
        self.node_new(p, TAG)
    }

    fn free_page(&mut self, off: u64, p: &Page) -> Result<(), StoreError> {
        self.free(off, p[3])
    }

    /// An empty tree.
    pub fn tree_new(&mut self) -> Result<Tree, StoreError> {
        let mut p = [0u8; N];
        leaf::init(&mut p, self.node_size_for(0, false));
        Ok(Tree { root: self.new_page(&mut p)?, len: 0 })
    }

    fn entry_key_eq(&self, p: &Page, e: &Entry, key: &[u8]) -> Result<bool, StoreError> {
        match e.loc {
            Loc::Inline { at, flen, .. } => Ok(&p[at..at + flen] == key),
            Loc::Ext { off, flen, .. } => {
                if flen != key.len() as u64 {
                    return Ok(false);
                }
                let mut k = vec![0u8; key.len()];
                self.mem.read(off, &mut k)?;
                Ok(k == key)
            }
        }
    }

    /// Appends an entry's key (`key`) or value to `out`.
    fn entry_part(&self, p: &Page, e: &Entry, key: bool, out: &mut Vec<u8>) -> Result<(), StoreError> {
        match e.loc {
            Loc::Inline { at, flen, vlen } => {
                out.extend_from_slice(if key { &p[at..at + flen] } else { &p[at + flen..at + flen + vlen] })
            }
            Loc::Ext { off, class, flen, vlen } => {
                let size = self.classes.get(class as usize).copied().unwrap_or(0);
                if !self.geo.in_heap(off, size) || flen + vlen > size {
                    return Err(StoreError::Corrupt(format!(
                        "a tree entry points at {off}, not a block of its size"
                    )));
                }
                let (at, n) = if key { (off, flen) } else { (off + flen, vlen) };
                let start = out.len();
                out.resize(start + n as usize, 0);
                self.mem.read(at, &mut out[start..])?;
            }
        }
        Ok(())
    }

    /// The leaf to look for hash `h` in (read into `page`), and the path to it. An inner node
    /// is searched where it lies: its header, then the separators the search meets (a few
    /// dozen bytes of up to [`NODE`]).
    /// Unless `whole`, only the leaf's header and slots are read ([`Store::leaf_slots`]).
    fn descend(&self, root: u64, h: u64, page: &mut Page, whole: bool) -> Result<(Path, u64), StoreError> {
        let mut path = Path::new();
        let mut node = root;
        let mut head = [0u8; HEAD];
        loop {
            let n = self.node_head(node, &mut head, TAG, "tree")?;
            if head[1] == LEAF {
                if whole {
                    self.read_page(node, page)?;
                } else {
                    self.leaf_slots(node, &head, n, page, "tree")?;
                }
                return Ok((path, node));
            }
            let c = u16_at(&head, 8);
            if c > (n - HEAD) / IENT {
                return Err(StoreError::Corrupt(format!(
                    "the tree node at {node} says {c} entries, which do not fit"
                )));
            }
            if path.depth == MAX_HEIGHT || c == 0 {
                return Err(StoreError::Corrupt(format!(
                    "the tree at {root} is deeper than it can be, or has an empty node"
                )));
            }
            // The child to look for `h` in first: the last whose separator is below `h` (the
            // first child has none).
            let (mut lo, mut hi) = (1, c);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if self.read_u64(node + (HEAD + IENT * mid) as u64)? < h {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let i = lo - 1;
            path.steps[path.depth] = (node, i);
            path.depth += 1;
            node = self.read_u64(node + (HEAD + IENT * i + 8) as u64)?;
        }
    }

    /// The leaf after the one `path` leads to (the path moves to it), if any.
    fn next_leaf(&self, path: &mut Path, page: &mut Page) -> Result<Option<u64>, StoreError> {
        while path.depth > 0 {
            let (node, i) = path.steps[path.depth - 1];
            self.read_page(node, page)?;
            if i + 1 < count(page) {
                path.steps[path.depth - 1].1 = i + 1;
                let mut child = inner::child(page, i + 1);
                loop {
                    self.read_page(child, page)?;
                    if page[1] == LEAF {
                        return Ok(Some(child));
                    }
                    if path.depth == MAX_HEIGHT || count(page) == 0 {
                        return Err(StoreError::Corrupt(format!(
                            "the tree node at {child} is empty or too deep"
                        )));
                    }
                    path.steps[path.depth] = (child, 0);
                    path.depth += 1;
                    child = inner::child(page, 0);
                }
            }
            path.depth -= 1;
        }
        Ok(None)
    }

    /// [`leaf::lower_bound`] in a leaf of which `page` holds the header and slots: the hashes
    /// the search probes are read from the leaf.
    fn lower_bound_in(&self, node: u64, page: &mut Page, h: u64) -> Result<usize, StoreError> {
        let (mut lo, mut hi) = (0, count(page));
        while lo < hi {
            let mid = (lo + hi) / 2;
            let at = leaf::slot(page, mid);
            self.leaf_bytes(node, page, at, 8)?;
            if at + 8 > node::size(page) || at < HEAD + 2 * count(page) {
                // Decoded as an entry for its error.
                return leaf::entry(page, mid, node).map(|_| mid);
            }
            if u64_at(page, at) < h {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// Reads entry `i` of the leaf at `node` (whose header and slots `page` holds) into `page`.
    fn load_entry(&self, node: u64, page: &mut Page, i: usize) -> Result<(), StoreError> {
        let at = leaf::slot(page, i);
        if at < HEAD + 2 * count(page) {
            return Ok(());
        }
        self.leaf_bytes(node, page, at, 12)?;
        if at + 12 > node::size(page) {
            return Ok(());
        }
        let flen = u16_at(page, at + 8);
        let rest = if flen == EXT as usize { 16 } else { flen + u16_at(page, at + 10) };
        self.leaf_bytes(node, page, at + 12, rest)
    }

    /// Finds `key` (of hash `h`): where it is, or where it would be inserted (in the leaf the
    /// search starts from, after the keys of equal hash there).
    /// Unless `whole`, `page` holds only the leaf's header, its slots and the entries the
    /// search read (the found one among them).
    fn find_spot(
        &self,
        t: &Tree,
        h: u64,
        key: &[u8],
        page: &mut Page,
        whole: bool,
    ) -> Result<Spot, StoreError> {
        let (path, leaf) = self.descend(t.root, h, page, whole)?;
        let mut i = if whole { leaf::lower_bound(page, h) } else { self.lower_bound_in(leaf, page, h)? };
        while i < count(page) {
            if !whole {
                self.load_entry(leaf, page, i)?;
            }
            let e = leaf::entry(page, i, leaf)?;
            if e.hash != h {
                return Ok(Spot { path, leaf, slot: i, found: None });
            }
            if self.entry_key_eq(page, &e, key)? {
                return Ok(Spot { path, leaf, slot: i, found: Some(e) });
            }
            i += 1;
        }
        // The keys of hash `h` may go on in the next leaves.
        let insert_at = Spot { path, leaf, slot: i, found: None };
        let mut p2 = path;
        let mut next = [0u8; N];
        while let Some(nl) = self.next_leaf(&mut p2, &mut next)? {
            let mut j = 0;
            while j < count(&next) {
                let e = leaf::entry(&next, j, nl)?;
                if e.hash != h {
                    self.read_page(leaf, page)?;
                    return Ok(insert_at);
                }
                if self.entry_key_eq(&next, &e, key)? {
                    page.copy_from_slice(&next);
                    return Ok(Spot { path: p2, leaf: nl, slot: j, found: Some(e) });
                }
                j += 1;
            }
        }
        self.read_page(leaf, page)?;
        Ok(insert_at)
    }

    /// Appends `key`'s value to `out`; false (nothing appended) if the tree has no `key`.
    pub fn tree_get(&self, t: &Tree, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        let h = self.hasher.hash64(key);
        let mut page = self.page_take();
        let r = self.find_spot(t, h, key, &mut page, false).and_then(|spot| match spot.found {
            Some(e) => self.entry_part(&page, &e, false, out).map(|()| true),
            None => Ok(false),
        });
        self.page_give(page);
        r
    }

    /// The bytes of an entry for `key` and `value` in a leaf (a block of their own made for
    /// them when they are too large to be inline).
    fn encode_entry(
        &mut self,
        h: u64,
        key: &[u8],
        value: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        out.clear();
        out.extend_from_slice(&h.to_le_bytes());
        if key.len() + value.len() <= INLINE_MAX {
            out.extend_from_slice(&(key.len() as u16).to_le_bytes());
            out.extend_from_slice(&(value.len() as u16).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
            return Ok(());
        }
        if key.len() > u32::MAX as usize || value.len() > u32::MAX as usize {
            return Err(StoreError::TooLarge("a field or value larger than 4 GiB".into()));
        }
        let b = self.alloc((key.len() + value.len()) as u64)?;
        // A block from a free list has its link in its first word: that word is stored in
        // place, undo-logged; the rest is written fresh.
        let mut first = [0u8; 8];
        let from_key = key.len().min(8);
        first[..from_key].copy_from_slice(&key[..from_key]);
        first[from_key..].copy_from_slice(&value[..8 - from_key]);
        if b.untouched {
            self.fresh(b.off, &first)?;
        } else {
            self.meta(b.off, &first)?;
        }
        if key.len() > 8 {
            self.fresh(b.off + 8, &key[8..])?;
        }
        self.fresh(b.off + (key.len() + 8 - from_key) as u64, &value[8 - from_key..])?;
        out.extend_from_slice(&EXT.to_le_bytes());
        out.extend_from_slice(&u16::from(b.class).to_le_bytes());
        out.extend_from_slice(&b.off.to_le_bytes());
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        Ok(())
    }

    fn free_entry_block(&mut self, e: &Entry) -> Result<(), StoreError> {
        if let Loc::Ext { off, class, .. } = e.loc {
            self.free(off, class)?;
        }
        Ok(())
    }

    /// Sets `key` to `value`; true if the key is new.
    pub fn tree_set(&mut self, t: &mut Tree, key: &[u8], value: &[u8]) -> Result<bool, StoreError> {
        let mut page = self.page_take();
        let r = self.tree_set_in(t, key, value, &mut page);
        self.page_give(page);
        r
    }

    /// [`Store::tree_set`], reading the leaf into `page`.
    fn tree_set_in(
        &mut self,
        t: &mut Tree,
        key: &[u8],
        value: &[u8],
        page: &mut Page,
    ) -> Result<bool, StoreError> {
        let h = self.hasher.hash64(key);
        let spot = self.find_spot(t, h, key, page, false)?;
        let mut bytes = Vec::with_capacity(12 + key.len().min(INLINE_MAX) + value.len().min(INLINE_MAX));
        if let Some(e) = spot.found {
            // Same size, inline: overwrite the value in place.
            if let Loc::Inline { at, flen, vlen } = e.loc {
                if vlen == value.len() {
                    let v = at + flen;
                    if page[v..v + vlen] != *value {
                        self.node_store(spot.leaf, v, value)?;
                    }
                    return Ok(false);
                }
            }
            self.encode_entry(h, key, value, &mut bytes)?;
            self.free_entry_block(&e)?;
            self.read_page(spot.leaf, page)?;
            let mut new = *page;
            leaf::remove(&mut new, spot.slot, e.size);
            let up = self.leaf_put(spot.leaf, page, new, spot.slot, &bytes, spot.path.depth == 0)?;
            self.apply_up(t, &spot.path, up, 0)?;
            return Ok(false);
        }
        self.encode_entry(h, key, value, &mut bytes)?;
        let up = if leaf::gap(page) >= bytes.len() + 2 {
            self.leaf_insert(spot.leaf, page, spot.slot, &bytes)?;
            Up::Delta(0)
        } else {
            self.read_page(spot.leaf, page)?;
            self.leaf_put(spot.leaf, page, *page, spot.slot, &bytes, spot.path.depth == 0)?
        };
        self.apply_up(t, &spot.path, up, 1)?;
        t.len += 1;
        Ok(true)
    }

    /// Inserts `bytes` (an encoded entry that the gap holds) at slot `i` of leaf `node`, whose
    /// bytes `p` change to match. Stores only what changes, as [`Store::write_page`] would find
    /// it without a copy to compare: the count and `data_lo`, the slots from `i` on, the entry.
    fn leaf_insert(&mut self, node: u64, p: &mut Page, i: usize, bytes: &[u8]) -> Result<(), StoreError> {
        debug_assert!(leaf::gap(p) >= bytes.len() + 2, "the gap holds the entry");
        leaf::insert(p, i, bytes);
        self.leaf_inserted(node, p, i, bytes.len())
    }

    /// Puts an entry at slot `i` of leaf `node` (whose bytes are `old`, and `new` after the
    /// changes so far; the tree's only leaf if `root`): in place if it fits, else the leaf is
    /// rewritten into one or two new leaves. Returns what the parent must do (`Delta(0)` for a
    /// change in place: the caller adds the count).
    fn leaf_put(
        &mut self,
        node: u64,
        old: &Page,
        mut new: Page,
        i: usize,
        bytes: &[u8],
        root: bool,
    ) -> Result<Up, StoreError> {
        if leaf::gap(&new) >= bytes.len() + 2 {
            leaf::insert(&mut new, i, bytes);
            self.write_page(node, old, &new)?;
            return Ok(Up::Delta(0));
        }
        // Gather the live entries, the new one in its place, and rewrite.
        let mut entries: Vec<&[u8]> = Vec::with_capacity(count(&new) + 1);
        for j in 0..count(&new) {
            if j == i {
                entries.push(bytes);
            }
            let e = leaf::entry(&new, j, node)?;
            let at = leaf::slot(&new, j);
            entries.push(&new[at..at + e.size]);
        }
        if i == count(&new) {
            entries.push(bytes);
        }
        self.free_page(node, old)?;
        let made = self.build_leaves(&entries, !root)?;
        Ok(Up::Splice { at: usize::MAX, remove: 1, new: made })
    }

    /// New leaves holding `entries` (encoded, in order): one if they fit, else two of about
    /// equal bytes. A leaf is made in the smallest class that holds its entries, with room for
    /// half as much again if `grow` (a leaf of a tree that has more than one) or when two are
    /// made. Returns their (separator, node, count).
    fn build_leaves<E: AsRef<[u8]>>(
        &mut self,
        entries: &[E],
        grow: bool,
    ) -> Result<Vec<(u64, u64, u64)>, StoreError> {
        let total: usize = entries.iter().map(|e| e.as_ref().len() + 2).sum();
        let cap = N - HEAD;
        let parts: Vec<&[E]> = if total <= cap {
            vec![entries]
        } else {
            let mut acc = 0;
            let mut cut = entries.len();
            for (k, e) in entries.iter().enumerate() {
                if acc + e.as_ref().len() + 2 > total / 2 && k > 0 {
                    cut = k;
                    break;
                }
                acc += e.as_ref().len() + 2;
            }
            vec![&entries[..cut], &entries[cut..]]
        };
        let mut out = Vec::with_capacity(parts.len());
        let grow = grow || parts.len() > 1;
        for part in parts {
            let mut p = [0u8; N];
            let bytes: usize = part.iter().map(|e| e.as_ref().len() + 2).sum();
            leaf::init(&mut p, self.node_size_for(bytes, grow));
            for (k, e) in part.iter().enumerate() {
                let e = e.as_ref();
                assert!(leaf::gap(&p) >= e.len() + 2, "a leaf's half holds its entries");
                leaf::insert(&mut p, k, e);
            }
            let sep =
                part.first().map_or(0, |e| u64::from_le_bytes(e.as_ref()[..8].try_into().expect("8 bytes")));
            out.push((sep, self.new_page(&mut p)?, part.len() as u64));
        }
        Ok(out)
    }

    /// Carries a leaf's change up the path: counts change by `delta` (and by what a splice
    /// says), splices go into the parent (splitting it when full), and a root that splits or
    /// is left with one child changes the tree's root.
    fn apply_up(&mut self, t: &mut Tree, path: &Path, mut up: Up, delta: i64) -> Result<(), StoreError> {
        if let Up::Delta(d) = &mut up {
            *d += delta;
        }
        let mut at_depth = path.depth;
        while at_depth > 0 {
            at_depth -= 1;
            let (node, idx) = path.steps[at_depth];
            let (at, remove, mut entries) = match up {
                // Nothing changes above.
                Up::Delta(0) => break,
                // Only the count changes: stored without reading the node again (the descent
                // checked it, and `idx` is one of its entries).
                Up::Delta(d) => {
                    self.node_add(node, HEAD + IENT * idx + 16, d, "tree")?;
                    continue;
                }
                Up::Splice { at, remove, new } => (at, remove, new),
            };
            let mut old = [0u8; N];
            self.read_page(node, &mut old)?;
            let mut new = old;
            let at = if at == usize::MAX { idx } else { at };
            let before: u64 = (at..at + remove).map(|k| inner::cnt(&new, k)).sum();
            let after: u64 = entries.iter().map(|e| e.2).sum();
            // The first new child keeps the separator of the first it replaces.
            if let Some(first) = entries.first_mut() {
                first.0 = inner::sep(&new, at);
            }
            // The new entries' counts are whole: they hold the leaf's change already.
            let d = after as i64 - before as i64;
            let c = count(&new) - remove + entries.len();
            if c == 0 {
                self.free_page(node, &old)?;
                up = Up::Splice { at: usize::MAX, remove: 1, new: Vec::new() };
            } else if c <= inner::cap(&old) {
                inner::splice(&mut new, at, remove, &entries);
                self.write_page(node, &old, &new)?;
                up = Up::Delta(d);
            } else if c <= INNER_CAP {
                // Past its size: made again, larger (the parent's entry keeps its
                // separator).
                inner::splice(&mut new, at, remove, &entries);
                let all: Vec<(u64, u64, u64)> = (0..c).map(|k| inner::get(&new, k)).collect();
                let mut p = [0u8; N];
                inner::init(&mut p, self.node_size_for(IENT * c, true), level(&old));
                inner::splice(&mut p, 0, 0, &all);
                let total = all.iter().map(|e| e.2).sum();
                let made = self.new_page(&mut p)?;
                self.free_page(node, &old)?;
                up = Up::Splice { at: usize::MAX, remove: 1, new: vec![(0, made, total)] };
            } else {
                // Split: all entries, then two new nodes of half each.
                let mut all: Vec<(u64, u64, u64)> = (0..count(&new)).map(|k| inner::get(&new, k)).collect();
                all.splice(at..at + remove, entries);
                let half = all.len() / 2;
                let mut made = Vec::with_capacity(2);
                for part in [&all[..half], &all[half..]] {
                    let mut p = [0u8; N];
                    inner::init(&mut p, self.node_size_for(IENT * part.len(), true), level(&old));
                    inner::splice(&mut p, 0, 0, part);
                    let sep = part[0].0;
                    let total = part.iter().map(|e| e.2).sum();
                    made.push((sep, self.new_page(&mut p)?, total));
                }
                self.free_page(node, &old)?;
                up = Up::Splice { at: usize::MAX, remove: 1, new: made };
            }
        }
        // At the root.
        if let Up::Splice { new: entries, .. } = up {
            match entries.len() {
                0 => {
                    let mut p = [0u8; N];
                    leaf::init(&mut p, self.node_size_for(0, false));
                    t.root = self.new_page(&mut p)?;
                }
                1 => t.root = entries[0].1,
                _ => {
                    let mut first = [0u8; N];
                    self.read_page(entries[0].1, &mut first)?;
                    let mut p = [0u8; N];
                    inner::init(&mut p, self.node_size_for(IENT * entries.len(), true), level(&first) + 1);
                    inner::splice(&mut p, 0, 0, &entries);
                    t.root = self.new_page(&mut p)?;
                }
            }
        }
        self.collapse_root(t)
    }

    /// A root with one child gives way to it. Only the root's header is read unless it has
    /// one child (the rare case: a change that emptied or merged the root's others).
    fn collapse_root(&mut self, t: &mut Tree) -> Result<(), StoreError> {
        let mut head = [0u8; HEAD];
        loop {
            self.node_head(t.root, &mut head, TAG, "tree")?;
            if head[1] != INNER || u16_at(&head, 8) != 1 {
                return Ok(());
            }
            let mut p = [0u8; N];
            self.read_page(t.root, &mut p)?;
            if p[1] != INNER || count(&p) != 1 {
                return Ok(());
            }
            let child = inner::child(&p, 0);
            self.free_page(t.root, &p)?;
            t.root = child;
        }
    }

    /// Removes `key`; true if it was there.
    pub fn tree_remove(&mut self, t: &mut Tree, key: &[u8]) -> Result<bool, StoreError> {
        let h = self.hasher.hash64(key);
        let mut page = [0u8; N];
        let spot = self.find_spot(t, h, key, &mut page, true)?;
        let Some(e) = spot.found else { return Ok(false) };
        self.free_entry_block(&e)?;
        let mut new = page;
        leaf::remove(&mut new, spot.slot, e.size);
        t.len -= 1;
        let up = self.leaf_shrunk(&spot, &page, new)?;
        self.apply_up(t, &spot.path, up, -1)?;
        Ok(true)
    }

    /// After an entry's removal from a leaf: an empty leaf leaves its parent; a leaf less than
    /// a quarter full is merged with a neighbour when the two fit in three quarters of one.
    fn leaf_shrunk(&mut self, spot: &Spot, old: &Page, new: Page) -> Result<Up, StoreError> {
        let Some(&(parent, idx)) = spot.path.steps[..spot.path.depth].last() else {
            // The root leaf: stays, however empty.
            self.leaf_removed(spot.leaf, &new, spot.slot)?;
            return Ok(Up::Delta(0));
        };
        if count(&new) == 0 {
            self.free_page(spot.leaf, old)?;
            return Ok(Up::Splice { at: idx, remove: 1, new: Vec::new() });
        }
        if leaf::live(&new) + 2 * count(&new) < N / 4 {
            let mut pp = [0u8; N];
            self.read_page(parent, &mut pp)?;
            let sib = if idx + 1 < count(&pp) { Some(idx + 1) } else { idx.checked_sub(1) };
            if let Some(sib) = sib {
                let sib_off = inner::child(&pp, sib);
                let mut sp = [0u8; N];
                self.read_page(sib_off, &mut sp)?;
                if sp[1] == LEAF
                    && leaf::live(&sp) + 2 * count(&sp) + leaf::live(&new) + 2 * count(&new) <= N * 3 / 4
                {
                    let (left, right, lo) = if sib > idx {
                        ((spot.leaf, &new), (sib_off, &sp), idx)
                    } else {
                        ((sib_off, &sp), (spot.leaf, &new), sib)
                    };
                    let mut entries = Vec::new();
                    for (node, p) in [left, right] {
                        for j in 0..count(p) {
                            let e = leaf::entry(p, j, node)?;
                            let at = leaf::slot(p, j);
                            entries.push(p[at..at + e.size].to_vec());
                        }
                    }
                    self.free_page(spot.leaf, old)?;
                    self.free_page(sib_off, &sp)?;
                    let made = self.build_leaves(&entries, true)?;
                    return Ok(Up::Splice { at: lo, remove: 2, new: made });
                }
            }
        }
        self.leaf_removed(spot.leaf, &new, spot.slot)?;
        Ok(Up::Delta(0))
    }

    /// Calls `f(key, value)` for every entry with a hash at least `from`, in order, until it
    /// returns false; returns the hash of the entry it stopped before (`None`: the end).
    /// Entries of one hash are never split between two calls' ranges when `f` stops only at a
    /// change of hash (what a scan's cursor needs: see `tree_scan`).
    pub fn tree_each_from(
        &self,
        t: &Tree,
        from: u64,
        mut f: impl FnMut(u64, &[u8], &[u8]) -> Result<bool, StoreError>,
    ) -> Result<Option<u64>, StoreError> {
        let mut page = [0u8; N];
        let (mut path, mut leaf) = self.descend(t.root, from, &mut page, true)?;
        let mut i = leaf::lower_bound(&page, from);
        let (mut k, mut v) = (Vec::new(), Vec::new());
        loop {
            while i < count(&page) {
                let e = leaf::entry(&page, i, leaf)?;
                k.clear();
                v.clear();
                self.entry_part(&page, &e, true, &mut k)?;
                self.entry_part(&page, &e, false, &mut v)?;
                if !f(e.hash, &k, &v)? {
                    return Ok(Some(e.hash));
                }
                i += 1;
            }
            match self.next_leaf(&mut path, &mut page)? {
                Some(nl) => {
                    leaf = nl;
                    i = 0;
                }
                None => return Ok(None),
            }
        }
    }

    /// Every entry, in order.
    pub fn tree_each(
        &self,
        t: &Tree,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.tree_each_from(t, 0, |_, k, v| f(k, v).map(|()| true)).map(|_| ())
    }

    /// The `n`-th entry (from 0), its key and value appended to `key` and `value`.
    pub fn tree_nth(
        &self,
        t: &Tree,
        mut n: u64,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        let mut page = [0u8; N];
        let mut node = t.root;
        for _ in 0..=MAX_HEIGHT {
            self.read_page(node, &mut page)?;
            if page[1] == LEAF {
                if n as usize >= count(&page) {
                    break;
                }
                let e = leaf::entry(&page, n as usize, node)?;
                self.entry_part(&page, &e, true, key)?;
                return self.entry_part(&page, &e, false, value);
            }
            let mut next = None;
            for i in 0..count(&page) {
                let c = inner::cnt(&page, i);
                if n < c {
                    next = Some(inner::child(&page, i));
                    break;
                }
                n -= c;
            }
            match next {
                Some(c) => node = c,
                None => break,
            }
        }
        Err(StoreError::Corrupt(format!("the tree at {} has fewer entries than its counts say", t.root)))
    }

    /// Frees every node and entry block of the tree.
    pub fn tree_free(&mut self, t: &Tree) -> Result<(), StoreError> {
        let mut stack = vec![(t.root, 0usize)];
        let mut page = [0u8; N];
        while let Some((node, depth)) = stack.pop() {
            if depth > MAX_HEIGHT {
                return Err(StoreError::Corrupt(format!("the tree at {} is deeper than it can be", t.root)));
            }
            self.read_page(node, &mut page)?;
            if page[1] == LEAF {
                for j in 0..count(&page) {
                    let e = leaf::entry(&page, j, node)?;
                    self.free_entry_block(&e)?;
                }
            } else {
                for j in 0..count(&page) {
                    stack.push((inner::child(&page, j), depth + 1));
                }
            }
            self.free_page(node, &page)?;
        }
        Ok(())
    }

    /// Calls `f(offset, bytes)` for every block of the tree (its nodes and entry blocks), and
    /// checks its invariants: entries in hash order across leaves, separators below the
    /// hashes of their subtrees, counts that add up, leaves at one depth.
    pub fn tree_blocks(&self, t: &Tree, mut f: impl FnMut(u64, u64)) -> Result<(), String> {
        let mut leaf_depth = None;
        let mut last_hash = None::<u64>;
        let total = self.walk(t.root, 0, None, &mut leaf_depth, &mut last_hash, &mut f)?;
        if total != t.len {
            return Err(format!("the tree holds {total} entries, its handle says {}", t.len));
        }
        Ok(())
    }

    fn walk(
        &self,
        node: u64,
        depth: usize,
        lower: Option<u64>,
        leaf_depth: &mut Option<usize>,
        last: &mut Option<u64>,
        f: &mut impl FnMut(u64, u64),
    ) -> Result<u64, String> {
        let mut p = [0u8; N];
        self.read_page(node, &mut p).map_err(|e| e.to_string())?;
        f(node, self.classes[p[3] as usize]);
        if p[1] == LEAF {
            if leaf_depth.replace(depth).is_some_and(|d| d != depth) {
                return Err(format!("leaf {node} at depth {depth}, another at {leaf_depth:?}"));
            }
            for j in 0..count(&p) {
                let e = leaf::entry(&p, j, node).map_err(|e| e.to_string())?;
                if last.is_some_and(|l| l > e.hash) || lower.is_some_and(|l| e.hash < l) {
                    return Err(format!("leaf {node}: entry {j}'s hash {:#x} is out of order", e.hash));
                }
                *last = Some(e.hash);
                if let Loc::Ext { off, class, .. } = e.loc {
                    f(off, self.classes[class as usize]);
                }
            }
            return Ok(count(&p) as u64);
        }
        if count(&p) == 0 {
            return Err(format!("inner node {node} is empty"));
        }
        let mut total = 0;
        for i in 0..count(&p) {
            let lower = if i == 0 { lower } else { Some(inner::sep(&p, i)) };
            let n = self.walk(inner::child(&p, i), depth + 1, lower, leaf_depth, last, f)?;
            if n != inner::cnt(&p, i) {
                return Err(format!(
                    "inner node {node}: child {i} holds {n} entries, its count says {}",
                    inner::cnt(&p, i)
                ));
            }
            total += n;
        }
        Ok(total)
    }
}

/// The hash tree's shape, for freeing it a piece at a time (`lazyfree.rs`).
pub(super) struct HashTree;

impl super::lazyfree::TreeShape for HashTree {
    fn read<M: Mem>(s: &Store<M>, off: u64, p: &mut Page) -> Result<(), StoreError> {
        s.read_page(off, p)
    }

    fn child(p: &Page, i: usize) -> u64 {
        inner::child(p, i)
    }

    fn entry_block(_: &Page, _: usize) -> Option<(u64, u8)> {
        None
    }

    fn leaf_blocks(p: &Page, node: u64, out: &mut Vec<(u64, u8)>) -> Result<(), StoreError> {
        for j in 0..count(p) {
            if let Loc::Ext { off, class, .. } = leaf::entry(p, j, node)?.loc {
                out.push((off, class));
            }
        }
        Ok(())
    }
}

mod build;
mod copy;
#[cfg(test)]
mod tests;
