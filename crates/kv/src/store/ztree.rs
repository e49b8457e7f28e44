//! An ordered, counted B+tree in the heap: the order of a large sorted set's members, by
//! (score, member) as Redis orders them (scores as numbers, -0 equal to 0; equal scores by the
//! members' bytes). Every inner entry carries its subtree's entry count, so that a member's
//! rank, the n-th entry and the number of entries below a bound are found in O(height), and a
//! range of m entries is read in O(height + m). FORMAT.md §11.9 describes every byte.
//!
//! A node is one heap block of at most [`NODE`](super::node::NODE) bytes, sized and changed as
//! in `tree.rs`: on a copy, written back as the spans that differ (undo-logged, unless the node
//! was made since the last savepoint: `young`); a node rewritten whole (grown, split, merged) is
//! made anew and the old one freed, so one change costs O(height) nodes. A key past the end of
//! the last leaf (or before the first's start) that does not fit starts a leaf of its own, so
//! that members added in order fill their leaves.
//!
//! Leaf: `count` (u16) at 8, `data_lo` (u16) at 10, `garbage` (u16) at 12; slots (u16 entry
//! offsets, in order) from byte 16; entries packed from the end down. An entry is `score`
//! (f64), `mlen` (u16), the member; a member longer than [`INLINE_MAX`] has a block of its own
//! and the entry is `score`, 0xFFFF, the block's class (u16), its offset (u64) and the
//! member's length (u32).
//!
//! Inner node: `count` (u16) at 8; from byte 16, entries of 64 bytes: a separator (`score`,
//! `slen` (u32), a class (u8), 3 reserved bytes, 32 bytes of body), `child` (u64), `n` (u64).
//! The separator of child `i` > 0 is a key no lower than any key of child `i - 1` and no
//! higher than any key of child `i`; when made (a split) it is the shortest key above the left
//! side's last and at most the right side's first: the first key's score, and of its member
//! only the bytes that tell it from the key before (none when the scores differ). A key equal
//! to a separator added later goes to its left. Its member is in the
//! body when it has at most 32 bytes; else the body holds its first 24 bytes and the offset of
//! a block of its own holding all of it, owned by the entry. The first entry's separator is
//! unused and empty: a node's lower bound is its parent's separator.

use super::error::StoreError;
use super::mem::Mem;
use super::node::{self, Page, HEAD, INNER, LEAF, N};
use super::tree::Tree;
use super::Store;
use std::cmp::Ordering;

/// Member bytes an entry holds in its leaf; a longer member gets a block of its own.
pub const INLINE_MAX: usize = 1000;
const TAG: u8 = b'Z';
/// Bytes of an inner entry.
const IENT: usize = 64;
/// Bytes of a separator (the first part of an inner entry).
const SEP: usize = 48;
/// Separator members held in the entry itself.
const SEP_INLINE: usize = 32;
/// Bytes of a long separator's member kept in the entry, before its block's offset.
const SEP_PREFIX: usize = 24;
/// Children an inner node holds at most.
const INNER_CAP: usize = (N - HEAD) / IENT;
const _: () = assert!(INNER_CAP >= 64, "inner nodes of a wide fan-out");
/// Levels a tree may have (far more than any tree the heap could hold needs).
const MAX_HEIGHT: usize = 24;
const EXT: u16 = 0xFFFF;
/// Bytes of an entry whose member has a block of its own.
const EXT_ENTRY: usize = 24;

fn u16_at(p: &[u8], at: usize) -> usize {
    u16::from_le_bytes([p[at], p[at + 1]]) as usize
}

fn set_u16(p: &mut [u8], at: usize, v: usize) {
    p[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
}

fn u32_at(p: &[u8], at: usize) -> usize {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes")) as usize
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}

fn set_u64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn f64_at(p: &[u8], at: usize) -> f64 {
    f64::from_bits(u64_at(p, at))
}

fn count(p: &Page) -> usize {
    u16_at(p, 8)
}

fn level(p: &Page) -> u8 {
    p[2]
}

/// Scores as Redis compares them: as numbers, -0 equal to 0 (no NaN is ever stored; one in a
/// damaged region compares equal to everything, which misorders but never panics).
pub fn score_cmp(a: f64, b: f64) -> Ordering {
    if a < b {
        Ordering::Less
    } else if a > b {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// The order of the tree's keys: by score, then by the members' bytes.
pub fn key_cmp(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> Ordering {
    score_cmp(s1, s2).then_with(|| m1.cmp(m2))
}

/// One end of a lexicographic range: the least string, the greatest, or a member.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lex<'a> {
    /// Below every member (`-`).
    Min,
    /// Above every member (`+`).
    Max,
    /// This member.
    At(&'a [u8]),
}

/// A bound, as the set of keys below it: keys ordered before it are "below". Every bound is
/// monotone in the tree's order (below keys come first), so the entries below it are a prefix
/// of the tree and their number is the rank where the rest begins. A lexicographic bound is
/// monotone where all scores are equal, as Redis asks of `BYLEX` ranges.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ZBound<'a> {
    /// Keys whose score is below `score` (with `or_equal`, at most `score`).
    Score {
        /// The score.
        score: f64,
        /// Keys of this score are below too.
        or_equal: bool,
    },
    /// Keys whose member is below `member` (with `or_equal`, at most it).
    Lex {
        /// The member.
        member: Lex<'a>,
        /// A key of this member is below too.
        or_equal: bool,
    },
    /// Keys ordered before (`score`, `member`).
    Key {
        /// The score.
        score: f64,
        /// The member.
        member: &'a [u8],
    },
}

impl ZBound<'_> {
    /// Whether deciding needs a key's member (else only its score).
    fn needs_member(&self) -> bool {
        !matches!(self, ZBound::Score { .. })
    }

    /// Whether the key (`score`, `member`) is below the bound.
    pub fn below(&self, score: f64, member: &[u8]) -> bool {
        match *self {
            ZBound::Score { score: s, or_equal } => {
                if or_equal {
                    score <= s
                } else {
                    score < s
                }
            }
            ZBound::Lex { member: m, or_equal } => match m {
                Lex::Min => false,
                Lex::Max => true,
                Lex::At(x) => {
                    if or_equal {
                        member <= x
                    } else {
                        member < x
                    }
                }
            },
            ZBound::Key { score: s, member: m } => key_cmp(score, member, s, m) == Ordering::Less,
        }
    }
}

/// Where an entry's member is.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// In the leaf, at `at`, `mlen` bytes.
    Inline { at: usize, mlen: usize },
    /// In a block of its own.
    Ext { off: u64, class: u8, mlen: usize },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    score: f64,
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
        let bad = || {
            StoreError::Corrupt(format!(
                "sorted-set tree leaf {node}: entry {i} at byte {at} runs past the leaf"
            ))
        };
        let end = node::size(p);
        if at < HEAD + 2 * count(p) || at + 10 > end {
            return Err(bad());
        }
        let score = f64_at(p, at);
        let mlen = u16_at(p, at + 8);
        if mlen == EXT as usize {
            if at + EXT_ENTRY > end {
                return Err(bad());
            }
            let loc = Loc::Ext { off: u64_at(p, at + 12), class: p[at + 10], mlen: u32_at(p, at + 20) };
            return Ok(Entry { score, size: EXT_ENTRY, loc });
        }
        if at + 10 + mlen > end {
            return Err(bad());
        }
        Ok(Entry { score, size: 10 + mlen, loc: Loc::Inline { at: at + 10, mlen } })
    }

    /// The bytes of entry `i`.
    pub fn raw(p: &Page, i: usize, node: u64) -> Result<Vec<u8>, StoreError> {
        let e = entry(p, i, node)?;
        let at = slot(p, i);
        Ok(p[at..at + e.size].to_vec())
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

/// A separator as an inner entry holds it (48 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sep([u8; SEP]);

impl Sep {
    const EMPTY: Sep = Sep([0; SEP]);

    fn score(&self) -> f64 {
        f64_at(&self.0, 0)
    }

    fn len(&self) -> usize {
        u32_at(&self.0, 8)
    }

    /// The block holding the member, for a long one: offset and class.
    fn ext(&self) -> Option<(u64, u8)> {
        (self.len() > SEP_INLINE).then(|| (u64_at(&self.0, 16 + SEP_PREFIX), self.0[12]))
    }
}

/// An inner entry: separator, child, entries under the child.
#[derive(Clone, Copy, Debug)]
struct Ient {
    sep: Sep,
    child: u64,
    n: u64,
}

/// Inner-node helpers (pure).
mod inner {
    use super::*;

    pub fn get(p: &Page, i: usize) -> Ient {
        let at = HEAD + IENT * i;
        Ient {
            sep: Sep(p[at..at + SEP].try_into().expect("48 bytes")),
            child: u64_at(p, at + SEP),
            n: u64_at(p, at + SEP + 8),
        }
    }

    pub fn set(p: &mut Page, i: usize, e: &Ient) {
        let at = HEAD + IENT * i;
        p[at..at + SEP].copy_from_slice(&e.sep.0);
        set_u64(p, at + SEP, e.child);
        set_u64(p, at + SEP + 8, e.n);
    }

    pub fn child(p: &Page, i: usize) -> u64 {
        u64_at(p, HEAD + IENT * i + SEP)
    }

    pub fn n(p: &Page, i: usize) -> u64 {
        u64_at(p, HEAD + IENT * i + SEP + 8)
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
    pub fn splice(p: &mut Page, at: usize, remove: usize, new: &[Ient]) {
        let c = count(p);
        let tail = HEAD + IENT * (at + remove)..HEAD + IENT * c;
        p.copy_within(tail, HEAD + IENT * (at + new.len()));
        let nc = c - remove + new.len();
        for (k, e) in new.iter().enumerate() {
            set(p, at + k, e);
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
    /// The parent's entries `at .. at + remove` (`at`: the path's child when `None`) become
    /// these; the first of them takes the separator of the first replaced.
    Splice { at: Option<usize>, remove: usize, new: Vec<Ient> },
}

/// A leaf position: the path to it, the leaf, its bytes, a slot, and the rank of its first
/// entry.
struct Spot {
    path: Path,
    leaf: u64,
    page: Box<Page>,
    slot: usize,
    base: u64,
}

/// A position in a tree, for reading a range entry by entry in either direction. Valid until
/// the tree changes.
pub struct ZCursor {
    spot: Spot,
}

impl ZCursor {
    /// The rank of the entry it is at.
    pub fn rank(&self) -> u64 {
        self.spot.base + self.spot.slot as u64
    }
}

impl<M: Mem> Store<M> {
    fn zread(&self, off: u64, p: &mut Page) -> Result<(), StoreError> {
        self.node_read(off, p, TAG, "sorted-set tree")?;
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
                "the sorted-set tree node at {off} says {c} entries, which do not fit"
            )));
        }
        Ok(())
    }

    /// Writes the spans of `new` that differ from `old` (the node's bytes now).
    fn zwrite(&mut self, off: u64, old: &Page, new: &Page) -> Result<(), StoreError> {
        self.node_write(off, old, new)
    }

    /// A new node holding `p` (its size set; its tag and class are set here).
    fn znew(&mut self, p: &mut Page) -> Result<u64, StoreError> {
        self.node_new(p, TAG)
    }

    fn zfree(&mut self, off: u64, p: &Page) -> Result<(), StoreError> {
        self.free(off, p[3])
    }

    /// A block of its own holding `bytes` (a long member or separator): offset and class.
    fn zblob(&mut self, bytes: &[u8]) -> Result<(u64, u8), StoreError> {
        if bytes.len() > u32::MAX as usize {
            return Err(StoreError::TooLarge("a sorted-set member larger than 4 GiB".into()));
        }
        assert!(bytes.len() >= 8, "a block of its own holds more than a word");
        let b = self.alloc(bytes.len() as u64)?;
        // A block from a free list has its link in its first word: stored in place.
        if b.untouched {
            self.fresh(b.off, bytes)?;
        } else {
            self.meta(b.off, &bytes[..8])?;
            self.fresh(b.off + 8, &bytes[8..])?;
        }
        Ok((b.off, b.class))
    }

    fn zblob_read(&self, off: u64, class: u8, len: usize, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let size = self.classes.get(class as usize).copied().unwrap_or(0);
        if !self.geo.in_heap(off, size) || len as u64 > size {
            return Err(StoreError::Corrupt(format!(
                "a sorted-set tree points at {off} for {len} bytes, not a block of that size"
            )));
        }
        let start = out.len();
        out.resize(start + len, 0);
        self.mem.read(off, &mut out[start..])
    }

    /// An entry's member, appended to `out`.
    fn zmember(&self, p: &Page, e: &Entry, out: &mut Vec<u8>) -> Result<(), StoreError> {
        match e.loc {
            Loc::Inline { at, mlen } => {
                out.extend_from_slice(&p[at..at + mlen]);
                Ok(())
            }
            Loc::Ext { off, class, mlen } => self.zblob_read(off, class, mlen, out),
        }
    }

    /// A separator's member, appended to `out`.
    fn sep_member(&self, s: &Sep, out: &mut Vec<u8>) -> Result<(), StoreError> {
        match s.ext() {
            None => {
                let n = s.len().min(SEP_INLINE);
                out.extend_from_slice(&s.0[16..16 + n]);
                Ok(())
            }
            Some((off, class)) => self.zblob_read(off, class, s.len(), out),
        }
    }

    /// Whether leaf entry `i` is below `b`.
    fn entry_below(
        &self,
        p: &Page,
        i: usize,
        node: u64,
        b: &ZBound,
        buf: &mut Vec<u8>,
    ) -> Result<bool, StoreError> {
        let e = leaf::entry(p, i, node)?;
        if !b.needs_member() {
            return Ok(b.below(e.score, &[]));
        }
        if let Loc::Inline { at, mlen } = e.loc {
            return Ok(b.below(e.score, &p[at..at + mlen]));
        }
        buf.clear();
        self.zmember(p, &e, buf)?;
        Ok(b.below(e.score, buf))
    }

    /// Whether a separator is below `b`.
    fn sep_below(&self, s: &Sep, b: &ZBound, buf: &mut Vec<u8>) -> Result<bool, StoreError> {
        if !b.needs_member() {
            return Ok(b.below(s.score(), &[]));
        }
        buf.clear();
        self.sep_member(s, buf)?;
        Ok(b.below(s.score(), buf))
    }

    /// The shortest separator between the keys (`s1`, `m1`) < (`s2`, `m2`), its long member
    /// given a block of its own.
    fn make_sep(&mut self, s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> Result<Sep, StoreError> {
        debug_assert_eq!(key_cmp(s1, m1, s2, m2), Ordering::Less);
        let member = if score_cmp(s1, s2) == Ordering::Less {
            &m2[..0]
        } else {
            let common = m1.iter().zip(m2).take_while(|(a, b)| a == b).count();
            &m2[..(common + 1).min(m2.len())]
        };
        let mut s = Sep::EMPTY;
        s.0[..8].copy_from_slice(&s2.to_bits().to_le_bytes());
        s.0[8..12].copy_from_slice(&(member.len() as u32).to_le_bytes());
        if member.len() <= SEP_INLINE {
            s.0[16..16 + member.len()].copy_from_slice(member);
        } else {
            let (off, class) = self.zblob(member)?;
            s.0[12] = class;
            s.0[16..16 + SEP_PREFIX].copy_from_slice(&member[..SEP_PREFIX]);
            set_u64(&mut s.0, 16 + SEP_PREFIX, off);
        }
        Ok(s)
    }

    fn free_sep(&mut self, s: &Sep) -> Result<(), StoreError> {
        if let Some((off, class)) = s.ext() {
            self.free(off, class)?;
        }
        Ok(())
    }

    /// An empty tree.
    pub fn zt_new(&mut self) -> Result<Tree, StoreError> {
        let mut p = [0u8; N];
        leaf::init(&mut p, self.node_size_for(0, false));
        Ok(Tree { root: self.znew(&mut p)?, len: 0 })
    }

    /// Descends to the leaf where the first key not below `b` is, or would be: the first slot
    /// there not below `b` (possibly the leaf's end, when the key is the next leaf's first).
    fn zlocate(&self, t: &Tree, b: &ZBound) -> Result<Spot, StoreError> {
        self.zlocate_ranked(t, b, true)
    }

    /// [`Store::zlocate`]; the spot's `base` (the rank of its leaf's first entry) only if
    /// `ranked`, else 0. Without it an inner node is searched where it lies: its header, then
    /// the separators the search meets (a few hundred bytes of up to [`NODE`](super::node::NODE)).
    fn zlocate_ranked(&self, t: &Tree, b: &ZBound, ranked: bool) -> Result<Spot, StoreError> {
        let mut page = self.page_take();
        let mut path = Path::new();
        let mut node = t.root;
        let mut base = 0u64;
        let mut buf = Vec::new();
        let mut head = [0u8; HEAD];
        loop {
            if !ranked {
                let n = self.node_head(node, &mut head, TAG, "sorted-set tree")?;
                if head[1] == INNER {
                    let c = u16_at(&head, 8);
                    if c > (n - HEAD) / IENT || path.depth == MAX_HEIGHT || c == 0 {
                        return Err(StoreError::Corrupt(format!(
                            "the sorted-set tree node at {node} says {c} entries, which do not fit, or the \
                             tree at {} is deeper than it can be",
                            t.root
                        )));
                    }
                    let (mut lo, mut hi) = (1, c);
                    let mut sep = Sep::EMPTY;
                    while lo < hi {
                        let mid = (lo + hi) / 2;
                        self.mem.read(node + (HEAD + IENT * mid) as u64, &mut sep.0)?;
                        if self.sep_below(&sep, b, &mut buf)? {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                    let i = lo - 1;
                    path.steps[path.depth] = (node, i);
                    path.depth += 1;
                    node = self.read_u64(node + (HEAD + IENT * i + SEP) as u64)?;
                    continue;
                }
                self.leaf_slots(node, &head, n, &mut page, "sorted-set tree")?;
                break;
            }
            self.zread(node, &mut page)?;
            if page[1] == LEAF {
                break;
            }
            let c = count(&page);
            if path.depth == MAX_HEIGHT || c == 0 {
                return Err(StoreError::Corrupt(format!(
                    "the sorted-set tree at {} is deeper than it can be, or has an empty node",
                    t.root
                )));
            }
            // The last child whose separator is below the bound (the first if none).
            let (mut lo, mut hi) = (1, c);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if self.sep_below(&inner::get(&page, mid).sep, b, &mut buf)? {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let i = lo - 1;
            base += (0..i).map(|k| inner::n(&page, k)).sum::<u64>();
            path.steps[path.depth] = (node, i);
            path.depth += 1;
            node = inner::child(&page, i);
        }
        let (mut lo, mut hi) = (0, count(&page));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if !ranked {
                self.zload_entry(node, &mut page, mid)?;
            }
            if self.entry_below(&page, mid, node, b, &mut buf)? {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(Spot { path, leaf: node, page, slot: lo, base })
    }

    /// Reads entry `i` of the leaf at `node` (whose header and slots `page` holds) into `page`.
    fn zload_entry(&self, node: u64, page: &mut Page, i: usize) -> Result<(), StoreError> {
        let at = leaf::slot(page, i);
        if at < HEAD + 2 * count(page) {
            return Ok(());
        }
        self.leaf_bytes(node, page, at, 10)?;
        if at + 10 > node::size(page) {
            return Ok(());
        }
        let mlen = u16_at(page, at + 8);
        let rest = if mlen == EXT as usize { EXT_ENTRY - 10 } else { mlen };
        self.leaf_bytes(node, page, at + 10, rest)
    }

    /// Moves `spot` to the first entry of the next leaf; false at the tree's end.
    fn znext_leaf(&self, spot: &mut Spot) -> Result<bool, StoreError> {
        let here = count(&spot.page) as u64;
        let path = &mut spot.path;
        let mut d = path.depth;
        let mut up = [0u8; N];
        while d > 0 {
            let (node, i) = path.steps[d - 1];
            self.zread(node, &mut up)?;
            if i + 1 < count(&up) {
                path.steps[d - 1].1 = i + 1;
                path.depth = d;
                let mut child = inner::child(&up, i + 1);
                loop {
                    self.zread(child, &mut spot.page)?;
                    if spot.page[1] == LEAF {
                        spot.base += here;
                        spot.leaf = child;
                        spot.slot = 0;
                        return Ok(true);
                    }
                    if path.depth == MAX_HEIGHT || count(&spot.page) == 0 {
                        return Err(StoreError::Corrupt(format!(
                            "the sorted-set tree node at {child} is empty or too deep"
                        )));
                    }
                    path.steps[path.depth] = (child, 0);
                    path.depth += 1;
                    child = inner::child(&spot.page, 0);
                }
            }
            d -= 1;
        }
        Ok(false)
    }

    /// Moves `spot` to the last entry of the leaf before; false at the tree's start.
    fn zprev_leaf(&self, spot: &mut Spot) -> Result<bool, StoreError> {
        let path = &mut spot.path;
        let mut d = path.depth;
        let mut up = [0u8; N];
        while d > 0 {
            let (node, i) = path.steps[d - 1];
            if i > 0 {
                self.zread(node, &mut up)?;
                path.steps[d - 1].1 = i - 1;
                path.depth = d;
                let mut child = inner::child(&up, i - 1);
                loop {
                    self.zread(child, &mut spot.page)?;
                    let c = count(&spot.page);
                    if spot.page[1] == LEAF {
                        if c == 0 {
                            return Err(StoreError::Corrupt(format!(
                                "the sorted-set tree leaf {child} is empty"
                            )));
                        }
                        spot.base = spot.base.checked_sub(c as u64).ok_or_else(|| {
                            StoreError::Corrupt("a sorted-set tree's counts do not add up".into())
                        })?;
                        spot.leaf = child;
                        spot.slot = c - 1;
                        return Ok(true);
                    }
                    if path.depth == MAX_HEIGHT || c == 0 {
                        return Err(StoreError::Corrupt(format!(
                            "the sorted-set tree node at {child} is empty or too deep"
                        )));
                    }
                    path.steps[path.depth] = (child, c - 1);
                    path.depth += 1;
                    child = inner::child(&spot.page, c - 1);
                }
            }
            d -= 1;
        }
        Ok(false)
    }

    /// The number of entries below `b` (the rank of the first entry not below it).
    pub fn zt_count_below(&self, t: &Tree, b: &ZBound) -> Result<u64, StoreError> {
        let spot = self.zlocate(t, b)?;
        Ok(spot.base + spot.slot as u64)
    }

    /// The spot of the key (`score`, `member`), if the tree holds it.
    fn zfind(&self, t: &Tree, score: f64, member: &[u8], ranked: bool) -> Result<Option<Spot>, StoreError> {
        let mut spot = self.zlocate_ranked(t, &ZBound::Key { score, member }, ranked)?;
        if spot.slot == count(&spot.page) && !self.znext_leaf(&mut spot)? {
            return Ok(None);
        }
        if spot.slot >= count(&spot.page) {
            return Ok(None);
        }
        if !ranked {
            self.zload_entry(spot.leaf, &mut spot.page, spot.slot)?;
        }
        let e = leaf::entry(&spot.page, spot.slot, spot.leaf)?;
        if score_cmp(e.score, score) != Ordering::Equal {
            return Ok(None);
        }
        let same = match e.loc {
            Loc::Inline { at, mlen } => &spot.page[at..at + mlen] == member,
            Loc::Ext { mlen, .. } if mlen != member.len() => false,
            Loc::Ext { .. } => {
                let mut m = Vec::with_capacity(member.len());
                self.zmember(&spot.page, &e, &mut m)?;
                m == member
            }
        };
        Ok(same.then_some(spot))
    }

    /// The rank (from 0) of (`score`, `member`), if the tree holds it.
    pub fn zt_rank(&self, t: &Tree, score: f64, member: &[u8]) -> Result<Option<u64>, StoreError> {
        Ok(self.zfind(t, score, member, true)?.map(|s| s.base + s.slot as u64))
    }

    /// A cursor at the entry of rank `rank` (`None` past the end).
    pub fn zt_at(&self, t: &Tree, rank: u64) -> Result<Option<ZCursor>, StoreError> {
        if rank >= t.len {
            return Ok(None);
        }
        let mut page = Box::new([0u8; N]);
        let mut path = Path::new();
        let mut node = t.root;
        let mut left = rank;
        loop {
            self.zread(node, &mut page)?;
            if page[1] == LEAF {
                break;
            }
            if path.depth == MAX_HEIGHT {
                return Err(StoreError::Corrupt(format!("the sorted-set tree at {} is too deep", t.root)));
            }
            let mut next = None;
            for i in 0..count(&page) {
                let n = inner::n(&page, i);
                if left < n {
                    next = Some(i);
                    break;
                }
                left -= n;
            }
            let Some(i) = next else {
                return Err(StoreError::Corrupt(format!(
                    "the sorted-set tree at {} has fewer entries than its handle says",
                    t.root
                )));
            };
            path.steps[path.depth] = (node, i);
            path.depth += 1;
            node = inner::child(&page, i);
        }
        if left as usize >= count(&page) {
            return Err(StoreError::Corrupt(format!(
                "the sorted-set tree at {} has fewer entries than its counts say",
                t.root
            )));
        }
        let slot = left as usize;
        Ok(Some(ZCursor { spot: Spot { path, leaf: node, page, slot, base: rank - left } }))
    }

    /// The cursor's entry: its score, its member in `member` (cleared first).
    pub fn zt_read(&self, c: &ZCursor, member: &mut Vec<u8>) -> Result<f64, StoreError> {
        let e = leaf::entry(&c.spot.page, c.spot.slot, c.spot.leaf)?;
        member.clear();
        self.zmember(&c.spot.page, &e, member)?;
        Ok(e.score)
    }

    /// Moves the cursor to the next entry; false (and the cursor is spent) at the end.
    pub fn zt_next(&self, c: &mut ZCursor) -> Result<bool, StoreError> {
        c.spot.slot += 1;
        if c.spot.slot < count(&c.spot.page) {
            return Ok(true);
        }
        self.znext_leaf(&mut c.spot)
    }

    /// Moves the cursor to the entry before; false (and the cursor is spent) at the start.
    pub fn zt_prev(&self, c: &mut ZCursor) -> Result<bool, StoreError> {
        if c.spot.slot > 0 {
            c.spot.slot -= 1;
            return Ok(true);
        }
        self.zprev_leaf(&mut c.spot)
    }

    /// The bytes of a leaf entry for (`score`, `member`) (a block of its own made for a long
    /// member).
    fn zencode(&mut self, score: f64, member: &[u8], out: &mut Vec<u8>) -> Result<(), StoreError> {
        out.clear();
        out.extend_from_slice(&score.to_bits().to_le_bytes());
        if member.len() <= INLINE_MAX {
            out.extend_from_slice(&(member.len() as u16).to_le_bytes());
            out.extend_from_slice(member);
            return Ok(());
        }
        let (off, class) = self.zblob(member)?;
        out.extend_from_slice(&EXT.to_le_bytes());
        out.extend_from_slice(&u16::from(class).to_le_bytes());
        out.extend_from_slice(&off.to_le_bytes());
        out.extend_from_slice(&(member.len() as u32).to_le_bytes());
        Ok(())
    }

    /// Adds (`score`, `member`), which the tree must not hold.
    pub fn zt_insert(&mut self, t: &mut Tree, score: f64, member: &[u8]) -> Result<(), StoreError> {
        let mut spot = self.zlocate_ranked(t, &ZBound::Key { score, member }, false)?;
        let mut bytes = Vec::with_capacity(10 + member.len().min(INLINE_MAX));
        self.zencode(score, member, &mut bytes)?;
        let up = if leaf::gap(&spot.page) >= bytes.len() + 2 {
            // In place: only the spans that change are stored.
            leaf::insert(&mut spot.page, spot.slot, &bytes);
            self.leaf_inserted(spot.leaf, &spot.page, spot.slot, bytes.len())?;
            Up::Delta(0)
        } else {
            self.zread(spot.leaf, &mut spot.page)?;
            let old = *spot.page;
            self.zleaf_put(spot.leaf, &old, spot.slot, &bytes, &spot.path)?
        };
        self.zapply_up(t, &spot.path, up, 1)?;
        t.len += 1;
        self.page_give(spot.page);
        Ok(())
    }

    /// Puts an entry at slot `i` of leaf `node` (whose bytes are `old`, reached by `path`): in
    /// place if it fits, else the leaf is rewritten into one or two new leaves. An entry past
    /// the end of the tree's last leaf (or before the start of its first) that does not fit
    /// starts a leaf of its own, and the old one is made again as full as it is: a set whose
    /// members come in order (ascending scores: times, counters) fills its leaves.
    fn zleaf_put(
        &mut self,
        node: u64,
        old: &Page,
        i: usize,
        bytes: &[u8],
        path: &Path,
    ) -> Result<Up, StoreError> {
        let mut new = *old;
        if leaf::gap(&new) >= bytes.len() + 2 {
            leaf::insert(&mut new, i, bytes);
            self.zwrite(node, old, &new)?;
            return Ok(Up::Delta(0));
        }
        let mut entries: Vec<Vec<u8>> = Vec::with_capacity(count(old) + 1);
        for j in 0..count(old) {
            if j == i {
                entries.push(bytes.to_vec());
            }
            entries.push(leaf::raw(old, j, node)?);
        }
        if i == count(old) {
            entries.push(bytes.to_vec());
        }
        let total: usize = entries.iter().map(|e| e.len() + 2).sum();
        let cut = if total <= N - HEAD {
            None
        } else if i == count(old) && self.zpath_edge(path, true)? {
            Some(i)
        } else if i == 0 && self.zpath_edge(path, false)? {
            Some(1)
        } else {
            None
        };
        self.zfree(node, old)?;
        let made = self.zbuild_leaves(&entries, cut, path.depth > 0)?;
        Ok(Up::Splice { at: None, remove: 1, new: made })
    }

    /// Whether `path` leads to the tree's last leaf (`last`), or to its first: every step takes
    /// the last child (the first).
    fn zpath_edge(&self, path: &Path, last: bool) -> Result<bool, StoreError> {
        let mut p = [0u8; N];
        for &(node, i) in &path.steps[..path.depth] {
            if !last {
                if i != 0 {
                    return Ok(false);
                }
                continue;
            }
            self.zread(node, &mut p)?;
            if i + 1 != count(&p) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The key of an encoded leaf entry: its score, its member in `out` (cleared first).
    fn raw_key(&self, raw: &[u8], out: &mut Vec<u8>) -> Result<f64, StoreError> {
        let mut p = [0u8; N];
        // A one-entry leaf around it, to read it as any other.
        leaf::init(&mut p, N);
        leaf::insert(&mut p, 0, raw);
        let e = leaf::entry(&p, 0, 0)?;
        out.clear();
        self.zmember(&p, &e, out)?;
        Ok(e.score)
    }

    /// New leaves holding `entries` (encoded, in order): one if they fit, else two of about
    /// equal bytes, or the two sides of `cut`; the second with its separator. A leaf is made in
    /// the smallest class that holds its entries, with room for half as much again if `grow` (a
    /// leaf of a tree that has more than one) or when two are made, but for the side of a
    /// `cut` that keeps the old entries, made as full as they are.
    fn zbuild_leaves(
        &mut self,
        entries: &[Vec<u8>],
        cut: Option<usize>,
        grow: bool,
    ) -> Result<Vec<Ient>, StoreError> {
        let total: usize = entries.iter().map(|e| e.len() + 2).sum();
        let forced = cut.is_some();
        let mut cut = cut.unwrap_or(entries.len());
        if total > N - HEAD && !forced {
            let mut acc = 0;
            for (k, e) in entries.iter().enumerate() {
                if acc + e.len() + 2 > total / 2 && k > 0 {
                    cut = k;
                    break;
                }
                acc += e.len() + 2;
            }
        }
        let mut out = Vec::with_capacity(2);
        let split = cut < entries.len();
        for (part, at) in [(&entries[..cut], 0), (&entries[cut..], cut)] {
            let room = if forced { part.len() == 1 } else { grow || split };
            if part.is_empty() {
                continue;
            }
            let sep = if at == 0 {
                Sep::EMPTY
            } else {
                let (mut m1, mut m2) = (Vec::new(), Vec::new());
                let s1 = self.raw_key(&entries[at - 1], &mut m1)?;
                let s2 = self.raw_key(&entries[at], &mut m2)?;
                self.make_sep(s1, &m1, s2, &m2)?
            };
            let mut p = [0u8; N];
            let bytes: usize = part.iter().map(|e| e.len() + 2).sum();
            leaf::init(&mut p, self.node_size_for(bytes, room));
            for (k, e) in part.iter().enumerate() {
                assert!(leaf::gap(&p) >= e.len() + 2, "a leaf's half holds its entries");
                leaf::insert(&mut p, k, e);
            }
            out.push(Ient { sep, child: self.znew(&mut p)?, n: part.len() as u64 });
        }
        Ok(out)
    }

    /// Carries a leaf's change up the path: counts change by `delta` (and by what a splice
    /// says), splices go into the parent (splitting it when full), and a root that splits or
    /// is left with one child changes the tree's root.
    fn zapply_up(&mut self, t: &mut Tree, path: &Path, mut up: Up, delta: i64) -> Result<(), StoreError> {
        if let Up::Delta(d) = &mut up {
            *d += delta;
        }
        let mut d = path.depth;
        while d > 0 {
            d -= 1;
            let (node, idx) = path.steps[d];
            let (at, remove, mut entries) = match up {
                Up::Delta(0) => break,
                // Only the count changes: stored without reading the node again (the descent
                // checked it, and `idx` is one of its entries).
                Up::Delta(dl) => {
                    self.node_add(node, HEAD + IENT * idx + SEP + 8, dl, "sorted-set tree")?;
                    continue;
                }
                Up::Splice { at, remove, new } => (at, remove, new),
            };
            let mut old = [0u8; N];
            self.zread(node, &mut old)?;
            let mut new = old;
            let at = at.unwrap_or(idx);
            let c = count(&new);
            if at + remove > c {
                return Err(StoreError::Corrupt(format!(
                    "sorted-set tree node {node}: a change at entry {at} of {c}"
                )));
            }
            let before: u64 = (at..at + remove).map(|k| inner::n(&new, k)).sum();
            let after: u64 = entries.iter().map(|e| e.n).sum();
            // The separators of the entries replaced go, but the first's, which the
            // first new entry takes.
            let keep_first = !entries.is_empty();
            for k in at + usize::from(keep_first)..at + remove {
                self.free_sep(&inner::get(&new, k).sep)?;
            }
            if let Some(first) = entries.first_mut() {
                first.sep = inner::get(&new, at).sep;
            }
            let nc = c - remove + entries.len();
            if nc == 0 {
                self.zfree(node, &old)?;
                up = Up::Splice { at: None, remove: 1, new: Vec::new() };
                continue;
            }
            if nc <= INNER_CAP {
                inner::splice(&mut new, at, remove, &entries);
                // A new first entry: its separator is the node's, in the parent.
                let first = inner::get(&new, 0);
                if first.sep != Sep::EMPTY {
                    self.free_sep(&first.sep)?;
                    inner::set(&mut new, 0, &Ient { sep: Sep::EMPTY, ..first });
                }
                if nc <= inner::cap(&old) {
                    self.zwrite(node, &old, &new)?;
                    up = Up::Delta(after as i64 - before as i64);
                    continue;
                }
                // Past its size: made again, larger (the parent's entry keeps its
                // separator).
                let all: Vec<Ient> = (0..nc).map(|k| inner::get(&new, k)).collect();
                let mut p = [0u8; N];
                inner::init(&mut p, self.node_size_for(IENT * nc, true), level(&old));
                inner::splice(&mut p, 0, 0, &all);
                let n = all.iter().map(|e| e.n).sum();
                let made = Ient { sep: Sep::EMPTY, child: self.znew(&mut p)?, n };
                self.zfree(node, &old)?;
                up = Up::Splice { at: None, remove: 1, new: vec![made] };
                continue;
            }
            // Split: every entry, then two new nodes of half each; the right one's
            // first separator moves up.
            let mut all: Vec<Ient> = (0..c).map(|k| inner::get(&new, k)).collect();
            all.splice(at..at + remove, entries);
            let half = all.len() / 2;
            let up_sep = all[half].sep;
            all[half].sep = Sep::EMPTY;
            let mut made = Vec::with_capacity(2);
            for (part, sep) in [(&all[..half], Sep::EMPTY), (&all[half..], up_sep)] {
                let mut p = [0u8; N];
                inner::init(&mut p, self.node_size_for(IENT * part.len(), true), level(&old));
                inner::splice(&mut p, 0, 0, part);
                let n = part.iter().map(|e| e.n).sum();
                made.push(Ient { sep, child: self.znew(&mut p)?, n });
            }
            self.zfree(node, &old)?;
            up = Up::Splice { at: None, remove: 1, new: made };
        }
        if let Up::Splice { new: entries, .. } = up {
            // At the root.
            match entries.len() {
                0 => {
                    let mut p = [0u8; N];
                    leaf::init(&mut p, self.node_size_for(0, false));
                    t.root = self.znew(&mut p)?;
                }
                1 => t.root = entries[0].child,
                _ => {
                    let mut first = [0u8; N];
                    self.zread(entries[0].child, &mut first)?;
                    let mut p = [0u8; N];
                    inner::init(&mut p, self.node_size_for(IENT * entries.len(), true), level(&first) + 1);
                    inner::splice(&mut p, 0, 0, &entries);
                    t.root = self.znew(&mut p)?;
                }
            }
        }
        // A root with one child gives way to it (its header read first: the rare case).
        let mut head = [0u8; HEAD];
        loop {
            self.node_head(t.root, &mut head, TAG, "sorted-set tree")?;
            if head[1] != INNER || u16_at(&head, 8) != 1 {
                return Ok(());
            }
            let mut p = [0u8; N];
            self.zread(t.root, &mut p)?;
            if p[1] != INNER || count(&p) != 1 {
                return Ok(());
            }
            let child = inner::child(&p, 0);
            self.zfree(t.root, &p)?;
            t.root = child;
        }
    }

    /// Removes (`score`, `member`); true if the tree held it.
    pub fn zt_remove(&mut self, t: &mut Tree, score: f64, member: &[u8]) -> Result<bool, StoreError> {
        let Some(mut spot) = self.zfind(t, score, member, false)? else { return Ok(false) };
        let e = leaf::entry(&spot.page, spot.slot, spot.leaf)?;
        if let Loc::Ext { off, class, .. } = e.loc {
            self.free(off, class)?;
        }
        leaf::remove(&mut spot.page, spot.slot, e.size);
        let up = self.zleaf_shrunk(&spot)?;
        self.zapply_up(t, &spot.path, up, -1)?;
        t.len -= 1;
        self.page_give(spot.page);
        Ok(true)
    }

    /// After an entry's removal from a leaf (`spot.page`, its bytes after the removal): an
    /// empty leaf leaves its parent; a leaf less than a quarter full is merged with a neighbour
    /// when the two fit in three quarters of one.
    fn zleaf_shrunk(&mut self, spot: &Spot) -> Result<Up, StoreError> {
        let new: &Page = &spot.page;
        // The removal left the first word, which freeing reads, as it was.
        let old = new;
        let Some(&(parent, idx)) = spot.path.steps[..spot.path.depth].last() else {
            // The root leaf stays, however empty.
            self.leaf_removed(spot.leaf, new, spot.slot)?;
            return Ok(Up::Delta(0));
        };
        if count(new) == 0 {
            self.zfree(spot.leaf, old)?;
            return Ok(Up::Splice { at: Some(idx), remove: 1, new: Vec::new() });
        }
        if leaf::live(new) + 2 * count(new) < N / 4 {
            // A merge needs the leaf's entries (the search read only some): read whole, as it
            // still is in the region, and the removal made again.
            let mut whole = [0u8; N];
            self.zread(spot.leaf, &mut whole)?;
            let e = leaf::entry(&whole, spot.slot, spot.leaf)?;
            leaf::remove(&mut whole, spot.slot, e.size);
            let new = &whole;
            let mut pp = [0u8; N];
            self.zread(parent, &mut pp)?;
            let sib = if idx + 1 < count(&pp) { Some(idx + 1) } else { idx.checked_sub(1) };
            if let Some(sib) = sib {
                let sib_off = inner::child(&pp, sib);
                let mut sp = [0u8; N];
                self.zread(sib_off, &mut sp)?;
                if sp[1] == LEAF
                    && leaf::live(&sp) + 2 * count(&sp) + leaf::live(new) + 2 * count(new) <= N * 3 / 4
                {
                    let (left, right, lo) = if sib > idx {
                        ((spot.leaf, new), (sib_off, &sp), idx)
                    } else {
                        ((sib_off, &sp), (spot.leaf, new), sib)
                    };
                    let mut entries = Vec::new();
                    for (node, p) in [left, right] {
                        for j in 0..count(p) {
                            entries.push(leaf::raw(p, j, node)?);
                        }
                    }
                    self.zfree(spot.leaf, old)?;
                    self.zfree(sib_off, &sp)?;
                    let made = self.zbuild_leaves(&entries, None, true)?;
                    return Ok(Up::Splice { at: Some(lo), remove: 2, new: made });
                }
            }
        }
        self.leaf_removed(spot.leaf, new, spot.slot)?;
        Ok(Up::Delta(0))
    }

    /// A tree of `entries` (in the tree's order, no key twice), built bottom up: each node
    /// written once, leaves seven eighths full. O(n).
    pub fn zt_build<'a>(
        &mut self,
        entries: impl Iterator<Item = (f64, &'a [u8])>,
    ) -> Result<Tree, StoreError> {
        let fill = (N - HEAD) * 7 / 8;
        let mut level: Vec<Ient> = Vec::new();
        let mut p = [0u8; N];
        leaf::init(&mut p, N);
        let mut used = 0;
        let mut bytes = Vec::new();
        // The last key of the leaf being filled, and of the one before.
        let mut last: Option<(f64, Vec<u8>)> = None;
        let mut first_of_leaf: Option<(f64, Vec<u8>)> = None;
        let mut prev_last: Option<(f64, Vec<u8>)> = None;
        let mut total = 0u64;
        for (score, member) in entries {
            if let Some((ls, lm)) = last.as_ref().or(prev_last.as_ref()) {
                if key_cmp(*ls, lm, score, member) != Ordering::Less {
                    return Err(StoreError::Corrupt("a sorted-set tree built from keys out of order".into()));
                }
            }
            self.zencode(score, member, &mut bytes)?;
            if used + bytes.len() + 2 > fill && count(&p) > 0 {
                self.zbuild_flush(&mut p, &mut level, &prev_last, &first_of_leaf)?;
                prev_last = last.take();
                first_of_leaf = None;
                used = 0;
            }
            let c = count(&p);
            leaf::insert(&mut p, c, &bytes);
            used += bytes.len() + 2;
            if first_of_leaf.is_none() {
                first_of_leaf = Some((score, member.to_vec()));
            }
            last = Some((score, member.to_vec()));
            total += 1;
        }
        self.zbuild_flush(&mut p, &mut level, &prev_last, &first_of_leaf)?;
        // Inner levels, seven eighths full, until one node remains.
        let per = INNER_CAP * 7 / 8;
        let mut lvl = 1u8;
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len() / per + 1);
            for group in level.chunks(per) {
                let mut p = [0u8; N];
                inner::init(&mut p, self.node_size_for(IENT * group.len(), false), lvl);
                let mut g = group.to_vec();
                let sep = std::mem::replace(&mut g[0].sep, Sep::EMPTY);
                inner::splice(&mut p, 0, 0, &g);
                let n = g.iter().map(|e| e.n).sum();
                next.push(Ient { sep, child: self.znew(&mut p)?, n });
            }
            level = next;
            lvl += 1;
        }
        Ok(Tree { root: level[0].child, len: total })
    }

    /// Writes the leaf being built (`p`, then emptied) as the next of `level`.
    fn zbuild_flush(
        &mut self,
        p: &mut Page,
        level: &mut Vec<Ient>,
        prev_last: &Option<(f64, Vec<u8>)>,
        first: &Option<(f64, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        if count(p) == 0 && !level.is_empty() {
            return Ok(());
        }
        let sep = match (prev_last, first) {
            (Some((s1, m1)), Some((s2, m2))) => self.make_sep(*s1, m1, *s2, m2)?,
            _ => Sep::EMPTY,
        };
        let n = count(p) as u64;
        // Made in the class that holds its entries.
        let c = count(p);
        let mut sized = [0u8; N];
        leaf::init(&mut sized, self.node_size_for(N - leaf::data_lo(p) + 2 * c, false));
        for i in 0..c {
            leaf::insert(&mut sized, i, &leaf::raw(p, i, 0)?);
        }
        level.push(Ient { sep, child: self.znew(&mut sized)?, n });
        leaf::init(p, N);
        Ok(())
    }

    /// Frees every node and block of the tree.
    pub fn zt_free(&mut self, t: &Tree) -> Result<(), StoreError> {
        let mut stack = vec![(t.root, 0usize)];
        let mut page = [0u8; N];
        while let Some((node, depth)) = stack.pop() {
            if depth > MAX_HEIGHT {
                return Err(StoreError::Corrupt(format!(
                    "the sorted-set tree at {} is deeper than it can be",
                    t.root
                )));
            }
            self.zread(node, &mut page)?;
            if page[1] == LEAF {
                for j in 0..count(&page) {
                    if let Loc::Ext { off, class, .. } = leaf::entry(&page, j, node)?.loc {
                        self.free(off, class)?;
                    }
                }
            } else {
                for j in 0..count(&page) {
                    let e = inner::get(&page, j);
                    self.free_sep(&e.sep)?;
                    stack.push((e.child, depth + 1));
                }
            }
            self.zfree(node, &page)?;
        }
        Ok(())
    }

    /// Calls `f(offset, bytes)` for every block of the tree (nodes, long members, long
    /// separators), and checks its invariants: keys in order across leaves, every separator
    /// at least the keys before it and at most those after, empty first separators, counts that
    /// add up, leaves at one depth.
    pub fn zt_blocks(&self, t: &Tree, mut f: impl FnMut(u64, u64)) -> Result<(), String> {
        let mut w = Walk { leaf_depth: None, last: None, f: &mut f };
        let total = self.zwalk(t.root, 0, None, None, &mut w).map_err(|e| e.to_string())??;
        if total != t.len {
            return Err(format!("the tree holds {total} entries, its handle says {}", t.len));
        }
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    fn zwalk(
        &self,
        node: u64,
        depth: usize,
        lower: Option<&(f64, Vec<u8>)>,
        upper: Option<&(f64, Vec<u8>)>,
        w: &mut Walk,
    ) -> Result<Result<u64, String>, StoreError> {
        let mut p = [0u8; N];
        self.zread(node, &mut p)?;
        (w.f)(node, self.classes[p[3] as usize]);
        if depth > MAX_HEIGHT {
            return Ok(Err(format!("node {node} is deeper than a tree can be")));
        }
        if p[1] == LEAF {
            if w.leaf_depth.replace(depth).is_some_and(|d| d != depth) {
                return Ok(Err(format!("leaf {node} at depth {depth}, another at {:?}", w.leaf_depth)));
            }
            let mut m = Vec::new();
            for j in 0..count(&p) {
                let e = leaf::entry(&p, j, node)?;
                m.clear();
                self.zmember(&p, &e, &mut m)?;
                if let Loc::Ext { off, class, mlen } = e.loc {
                    if mlen <= INLINE_MAX {
                        return Ok(Err(format!(
                            "leaf {node}: a member of {mlen} bytes in a block of its own"
                        )));
                    }
                    (w.f)(off, self.classes[class as usize]);
                }
                if let Some((ls, lm)) = &w.last {
                    if key_cmp(*ls, lm, e.score, &m) != Ordering::Less {
                        return Ok(Err(format!("leaf {node}: entry {j} is out of order")));
                    }
                }
                if lower.is_some_and(|(s, lm)| key_cmp(e.score, &m, *s, lm) == Ordering::Less) {
                    return Ok(Err(format!("leaf {node}: entry {j} is below its separator")));
                }
                if upper.is_some_and(|(s, um)| key_cmp(e.score, &m, *s, um) == Ordering::Greater) {
                    return Ok(Err(format!("leaf {node}: entry {j} is above the next separator")));
                }
                w.last = Some((e.score, m.clone()));
            }
            return Ok(Ok(count(&p) as u64));
        }
        let c = count(&p);
        if c == 0 {
            return Ok(Err(format!("inner node {node} is empty")));
        }
        if inner::get(&p, 0).sep != Sep::EMPTY {
            return Ok(Err(format!("inner node {node}: its first separator is not empty")));
        }
        let mut seps = Vec::with_capacity(c);
        for i in 0..c {
            let e = inner::get(&p, i);
            if i == 0 {
                seps.push(lower.cloned());
                continue;
            }
            let mut m = Vec::new();
            self.sep_member(&e.sep, &mut m)?;
            if let Some((off, class)) = e.sep.ext() {
                (w.f)(off, self.classes[class as usize]);
            }
            seps.push(Some((e.sep.score(), m)));
        }
        let mut total = 0;
        for i in 0..c {
            let hi = if i + 1 < c { seps[i + 1].as_ref() } else { upper };
            let n = match self.zwalk(inner::child(&p, i), depth + 1, seps[i].as_ref(), hi, w)? {
                Ok(n) => n,
                Err(e) => return Ok(Err(e)),
            };
            if n != inner::n(&p, i) {
                return Ok(Err(format!(
                    "inner node {node}: child {i} holds {n} entries, its count says {}",
                    inner::n(&p, i)
                )));
            }
            total += n;
        }
        Ok(Ok(total))
    }
}

/// The order tree's shape, for freeing it a piece at a time (`lazyfree.rs`).
pub(super) struct OrderTree;

impl super::lazyfree::TreeShape for OrderTree {
    fn read<M: Mem>(s: &Store<M>, off: u64, p: &mut Page) -> Result<(), StoreError> {
        s.zread(off, p)
    }

    fn child(p: &Page, i: usize) -> u64 {
        inner::child(p, i)
    }

    fn entry_block(p: &Page, i: usize) -> Option<(u64, u8)> {
        inner::get(p, i).sep.ext()
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

/// The state of an invariant walk.
struct Walk<'a> {
    leaf_depth: Option<usize>,
    last: Option<(f64, Vec<u8>)>,
    f: &'a mut dyn FnMut(u64, u64),
}

#[cfg(test)]
mod tests;
