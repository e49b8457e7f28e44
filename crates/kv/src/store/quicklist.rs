//! Large lists: a doubly linked chain of nodes in the heap, each a packed run of elements
//! (`list_pack`) within `list-max-listpack-size`, as Redis's quicklist (FORMAT.md §11.7). The
//! owner's value is the handle: head, tail, elements and nodes.
//!
//! A node keeps its run anywhere in its block, between `lo` and `hi`: a push at the head writes
//! the element just before `lo`, one at the tail just after `hi`, and a pop moves `lo` or `hi`
//! back; so pushes and pops at either end change the element's bytes and a word or two of the
//! header, not the node. A node made at the head of the list gets its run at the end of its
//! block (room for pushes in front), one at the tail at the start; a node made by a push or a
//! change gets room for about twice its run, the nodes of a list made whole (`ql_new`) only
//! their blocks' slack, as Redis's listpacks are sized to their elements. A change inside a
//! node (LSET of another size, LINSERT, LREM) or a push into a node whose room on that side is
//! spent rewrites the node into a new block (or, past the limit, into two or more),
//! copy-on-write: O(node) bytes, whatever the list's length. Finding the n-th element walks node headers from
//! the nearer end: O(n / elements per node).
//!
//! Stores into a node the last sealed state (or an earlier command of the batch) may use are
//! undo-logged; a node made by the command itself is written without undo (`young`), as tree
//! nodes are.

use super::error::StoreError;
use super::list_pack::{self, Fill};
use super::mem::Mem;
use super::table::Found;
use super::Store;

/// Bytes of a node's header; its run lies in `HEAD .. block size`.
pub const HEAD: u64 = 40;
const TAG: u8 = b'L';
/// The least room for its run a node is made with.
const MIN_ROOM: usize = 128;

/// A list's handle, as its entry keeps it: 32 bytes (FORMAT.md §11.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuickList {
    /// The first node (0: none).
    pub head: u64,
    /// The last node (0: none).
    pub tail: u64,
    /// Elements in the list.
    pub len: u64,
    /// Nodes in the chain.
    pub nodes: u64,
}

impl QuickList {
    /// Bytes of a handle.
    pub const LEN: usize = 32;

    /// The 32 bytes.
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, v) in [self.head, self.tail, self.len, self.nodes].iter().enumerate() {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Reads 32 bytes (`None` if there are not 32).
    pub fn decode(b: &[u8]) -> Option<QuickList> {
        let b: &[u8; 32] = b.try_into().ok()?;
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Some(QuickList { head: w(0), tail: w(1), len: w(2), nodes: w(3) })
    }
}

/// A node's header, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Node {
    off: u64,
    class: u8,
    /// Bytes of its block.
    size: u64,
    prev: u64,
    next: u64,
    count: u32,
    lo: u32,
    hi: u32,
}

impl Node {
    /// Header bytes 8 .. 40.
    fn encode_rest(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.prev.to_le_bytes());
        b[8..16].copy_from_slice(&self.next.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        b[20..24].copy_from_slice(&self.lo.to_le_bytes());
        b[24..28].copy_from_slice(&self.hi.to_le_bytes());
        b
    }

    fn run_len(&self) -> usize {
        (self.hi - self.lo) as usize
    }
}

/// Where a new node keeps its run in its block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// At the end: room for pushes at the list's head.
    Front,
    /// At the start: room for pushes at the tail.
    Back,
    /// In the middle: room on both sides (a list of one node).
    Middle,
}

fn place_for(prev: u64, next: u64) -> Place {
    match (prev, next) {
        (0, 0) => Place::Middle,
        (0, _) => Place::Front,
        _ => Place::Back,
    }
}

/// A run being built: its bytes and elements.
#[derive(Default)]
struct Run {
    bytes: Vec<u8>,
    count: usize,
}

/// Packs `elems` into runs within `fill`, of about equal bytes.
fn split_runs<'a>(elems: impl IntoIterator<Item = &'a [u8]> + Clone, fill: Fill) -> Vec<Run> {
    let (mut total, mut n) = (0usize, 0usize);
    for e in elems.clone() {
        total += list_pack::size(e.len());
        n += 1;
    }
    let mut parts = total.div_ceil(fill.max_bytes()).max(1);
    if fill.0 > 0 {
        parts = parts.max(n.div_ceil(fill.0 as usize));
    }
    let target = total.div_ceil(parts);
    let mut out = Vec::with_capacity(parts + 1);
    let mut cur = Run::default();
    for e in elems {
        let add = list_pack::size(e.len());
        if cur.count > 0
            && (!fill.allows(cur.count + 1, cur.bytes.len() + add) || cur.bytes.len() + add > target)
        {
            out.push(std::mem::take(&mut cur));
        }
        list_pack::push(&mut cur.bytes, e);
        cur.count += 1;
    }
    if cur.count > 0 {
        out.push(cur);
    }
    out
}

/// Room a node made for a run of `len` bytes gets: twice the run, at least [`MIN_ROOM`], at
/// most what `fill` lets a node hold (but always the run).
fn room_for(len: usize, fill: Fill) -> usize {
    len.max((2 * len).max(MIN_ROOM).min(fill.max_bytes()))
}

fn corrupt(off: u64, what: &str) -> StoreError {
    StoreError::Corrupt(format!("the list node at {off}: {what}"))
}

impl<M: Mem> Store<M> {
    fn read_node(&self, off: u64) -> Result<Node, StoreError> {
        if off == 0 || !self.geo.in_heap(off, HEAD) {
            return Err(StoreError::Corrupt(format!("a list link points at {off}, outside the heap")));
        }
        let mut b = [0u8; HEAD as usize];
        self.mem.read(off, &mut b)?;
        let size = self.classes.get(b[3] as usize).copied().unwrap_or(0);
        if b[0] != TAG || size < HEAD + 1 || !self.geo.in_heap(off, size) {
            return Err(corrupt(off, "not a list node"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let n = Node {
            off,
            class: b[3],
            size,
            prev: u64_at(8),
            next: u64_at(16),
            count: u32_at(24),
            lo: u32_at(28),
            hi: u32_at(32),
        };
        if u64::from(n.lo) < HEAD
            || n.lo > n.hi
            || u64::from(n.hi) > size
            || n.count == 0
            || n.count > n.hi - n.lo
        {
            return Err(corrupt(
                off,
                &format!("{} elements in bytes {} .. {} of {size}", n.count, n.lo, n.hi),
            ));
        }
        Ok(n)
    }

    fn read_run(&self, n: &Node, out: &mut Vec<u8>) -> Result<(), StoreError> {
        out.clear();
        out.resize(n.run_len(), 0);
        self.mem.read(n.off + u64::from(n.lo), out)
    }

    fn node_young(&self, n: &Node) -> bool {
        self.batch.young.contains(&n.off)
    }

    /// Stores `data` at byte `at` of node `n`: without undo if the command made the node.
    fn write_node(&mut self, n: &Node, at: u64, data: &[u8]) -> Result<(), StoreError> {
        if self.node_young(n) {
            self.fresh(n.off + at, data)
        } else {
            self.meta(n.off + at, data)
        }
    }

    /// Writes the header fields of `new` that differ from `old` (the node as it is now).
    fn write_head(&mut self, old: &Node, new: &Node) -> Result<(), StoreError> {
        debug_assert_eq!((old.off, old.class), (new.off, new.class));
        let (a, b) = (old.encode_rest(), new.encode_rest());
        let Some(first) = (0..32).find(|&i| a[i] != b[i]) else { return Ok(()) };
        let last = (0..32).rfind(|&i| a[i] != b[i]).expect("a difference");
        self.write_node(old, 8 + first as u64, &b[first..=last])
    }

    /// Sets node `off`'s `prev` (or, when `off` is 0, the list's tail) to `to`.
    fn set_prev(&mut self, ql: &mut QuickList, off: u64, to: u64) -> Result<(), StoreError> {
        if off == 0 {
            ql.tail = to;
            return Ok(());
        }
        let n = self.read_node(off)?;
        self.write_head(&n, &Node { prev: to, ..n })
    }

    /// Sets node `off`'s `next` (or, when `off` is 0, the list's head) to `to`.
    fn set_next(&mut self, ql: &mut QuickList, off: u64, to: u64) -> Result<(), StoreError> {
        if off == 0 {
            ql.head = to;
            return Ok(());
        }
        let n = self.read_node(off)?;
        self.write_head(&n, &Node { next: to, ..n })
    }

    /// Makes nodes for `runs` between `prev` and `next` (0: an end of the list) and links them
    /// in; returns the first and the last (0, 0 for no runs). With `room`, a node gets room for
    /// pushes ([`room_for`]); without, only its block's slack (a list made whole).
    fn make_nodes(
        &mut self,
        ql: &mut QuickList,
        runs: &[Run],
        prev: u64,
        next: u64,
        fill: Fill,
        room: bool,
    ) -> Result<(u64, u64), StoreError> {
        if runs.is_empty() {
            self.set_next(ql, prev, next)?;
            self.set_prev(ql, next, prev)?;
            return Ok((0, 0));
        }
        let mut blocks = Vec::with_capacity(runs.len());
        for run in runs {
            let bytes = if room { room_for(run.bytes.len(), fill) } else { run.bytes.len() };
            let need = HEAD + bytes as u64;
            if run.count > u32::MAX as usize || need > u64::from(u32::MAX) {
                return Err(StoreError::TooLarge(format!(
                    "a list node of {} bytes is larger than a node may be (4 GiB)",
                    run.bytes.len()
                )));
            }
            blocks.push(self.alloc(need)?);
        }
        let k = runs.len();
        let mut buf = Vec::new();
        for (i, (run, b)) in runs.iter().zip(&blocks).enumerate() {
            let size = self.class_size(b.class);
            let (p, nx) = (
                if i == 0 { prev } else { blocks[i - 1].off },
                if i + 1 == k { next } else { blocks[i + 1].off },
            );
            let spare = size - HEAD - run.bytes.len() as u64;
            let lo = HEAD
                + match place_for(p, nx) {
                    Place::Front => spare,
                    Place::Back => 0,
                    Place::Middle => spare / 2,
                };
            let n = Node {
                off: b.off,
                class: b.class,
                size,
                prev: p,
                next: nx,
                count: run.count as u32,
                lo: lo as u32,
                hi: (lo + run.bytes.len() as u64) as u32,
            };
            buf.clear();
            buf.extend_from_slice(&[TAG, 0, 0, b.class, 0, 0, 0, 0]);
            buf.extend_from_slice(&n.encode_rest());
            buf.resize(HEAD as usize, 0);
            // A block from a free list has its list's link in its first word: stored in place.
            if b.untouched {
                self.fresh(b.off, &buf)?;
            } else {
                self.meta(b.off, &buf[..8])?;
                self.fresh(b.off + 8, &buf[8..])?;
            }
            self.fresh(b.off + lo, &run.bytes)?;
            self.batch.young.insert(b.off);
        }
        let (first, last) = (blocks[0].off, blocks[k - 1].off);
        self.set_next(ql, prev, first)?;
        self.set_prev(ql, next, last)?;
        ql.nodes += k as u64;
        Ok((first, last))
    }

    /// Takes node `n` out of the chain and frees it.
    fn drop_node(&mut self, ql: &mut QuickList, n: &Node) -> Result<(), StoreError> {
        self.set_next(ql, n.prev, n.next)?;
        self.set_prev(ql, n.next, n.prev)?;
        ql.nodes -= 1;
        self.free(n.off, n.class)
    }

    /// Replaces node `n` with nodes holding `elems` (none: it goes).
    fn replace_node<'a>(
        &mut self,
        ql: &mut QuickList,
        n: &Node,
        elems: impl IntoIterator<Item = &'a [u8]> + Clone,
        fill: Fill,
    ) -> Result<(), StoreError> {
        let runs = split_runs(elems, fill);
        self.free(n.off, n.class)?;
        ql.nodes -= 1;
        self.make_nodes(ql, &runs, n.prev, n.next, fill, true)?;
        Ok(())
    }

    /// A new list of `elems` (at least one), its nodes of the size their runs need: a list
    /// made whole may never be pushed to (a push into an end node without room makes that
    /// node again, with room).
    pub fn ql_new(&mut self, elems: &[Vec<u8>], fill: Fill) -> Result<QuickList, StoreError> {
        assert!(!elems.is_empty(), "a list has elements");
        let mut ql = QuickList::default();
        let runs = split_runs(elems.iter().map(|e| &e[..]), fill);
        self.make_nodes(&mut ql, &runs, 0, 0, fill, false)?;
        ql.len = elems.len() as u64;
        Ok(ql)
    }

    /// Pushes `e` at the head (`front`) or the tail.
    pub fn ql_push(
        &mut self,
        ql: &mut QuickList,
        front: bool,
        e: &[u8],
        fill: Fill,
    ) -> Result<(), StoreError> {
        let add = list_pack::size(e.len());
        if e.len() > u32::MAX as usize - 5 {
            return Err(StoreError::TooLarge("a list element larger than 4 GiB".into()));
        }
        let end = if front { ql.head } else { ql.tail };
        if end != 0 {
            let n = self.read_node(end)?;
            if fill.allows(n.count as usize + 1, n.run_len() + add) {
                let mut bytes = Vec::with_capacity(add);
                list_pack::push(&mut bytes, e);
                let room = if front { u64::from(n.lo) - HEAD } else { n.size - u64::from(n.hi) };
                if room >= add as u64 {
                    let (at, moved) = if front {
                        (
                            u64::from(n.lo) - add as u64,
                            Node { lo: n.lo - add as u32, count: n.count + 1, ..n },
                        )
                    } else {
                        (u64::from(n.hi), Node { hi: n.hi + add as u32, count: n.count + 1, ..n })
                    };
                    self.write_node(&n, at, &bytes)?;
                    self.write_head(&n, &moved)?;
                } else {
                    // No room on that side: the node is made again, larger.
                    let mut run = Vec::new();
                    self.read_run(&n, &mut run)?;
                    let mut all = Vec::with_capacity(run.len() + add);
                    if front {
                        all.extend_from_slice(&bytes);
                        all.extend_from_slice(&run);
                    } else {
                        all.extend_from_slice(&run);
                        all.extend_from_slice(&bytes);
                    }
                    let runs = [Run { bytes: all, count: n.count as usize + 1 }];
                    self.free(n.off, n.class)?;
                    ql.nodes -= 1;
                    self.make_nodes(ql, &runs, n.prev, n.next, fill, true)?;
                }
                ql.len += 1;
                return Ok(());
            }
        }
        let mut bytes = Vec::with_capacity(add);
        list_pack::push(&mut bytes, e);
        let runs = [Run { bytes, count: 1 }];
        let (prev, next) = if front { (0, ql.head) } else { (ql.tail, 0) };
        self.make_nodes(ql, &runs, prev, next, fill, true)?;
        ql.len += 1;
        Ok(())
    }

    /// Pops the head's (`front`) or the tail's element into `out` (cleared first); false if the
    /// list is empty.
    pub fn ql_pop(&mut self, ql: &mut QuickList, front: bool, out: &mut Vec<u8>) -> Result<bool, StoreError> {
        out.clear();
        if ql.len == 0 {
            return Ok(false);
        }
        let n = self.read_node(if front { ql.head } else { ql.tail })?;
        let mut run = Vec::new();
        self.read_run(&n, &mut run)?;
        let starts = list_pack::starts(&run, n.count as usize)?;
        let i = if front { 0 } else { n.count as usize - 1 };
        let e = list_pack::iter(&run[starts[i]..]).next().expect("an element")?;
        out.extend_from_slice(e);
        if n.count == 1 {
            self.drop_node(ql, &n)?;
        } else {
            let moved = if front {
                Node { lo: n.lo + starts[1] as u32, count: n.count - 1, ..n }
            } else {
                Node { hi: n.lo + starts[i] as u32, count: n.count - 1, ..n }
            };
            self.write_head(&n, &moved)?;
        }
        ql.len -= 1;
        Ok(true)
    }

    /// The node holding element `index` (< len) and the element's place in it.
    fn locate(&self, ql: &QuickList, index: u64) -> Result<(Node, usize), StoreError> {
        if index >= ql.len {
            return Err(StoreError::Corrupt(format!("list index {index} of {} elements", ql.len)));
        }
        let mut steps = 0;
        let bad = || {
            StoreError::Corrupt(format!(
                "a list's chain does not hold the {} elements its handle says",
                ql.len
            ))
        };
        if index < ql.len / 2 {
            let (mut off, mut before) = (ql.head, 0u64);
            loop {
                let n = self.read_node(off)?;
                if index < before + u64::from(n.count) {
                    return Ok((n, (index - before) as usize));
                }
                before += u64::from(n.count);
                (off, steps) = (n.next, steps + 1);
                if off == 0 || steps > ql.nodes {
                    return Err(bad());
                }
            }
        }
        let (mut off, mut after) = (ql.tail, 0u64);
        let from_end = ql.len - 1 - index;
        loop {
            let n = self.read_node(off)?;
            if from_end < after + u64::from(n.count) {
                return Ok((n, (u64::from(n.count) - 1 - (from_end - after)) as usize));
            }
            after += u64::from(n.count);
            (off, steps) = (n.prev, steps + 1);
            if off == 0 || steps > ql.nodes {
                return Err(bad());
            }
        }
    }

    /// Appends element `index` (< len) to `out`.
    pub fn ql_get(&self, ql: &QuickList, index: u64, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let (n, i) = self.locate(ql, index)?;
        let mut run = Vec::new();
        self.read_run(&n, &mut run)?;
        let e =
            list_pack::iter(&run).nth(i).ok_or_else(|| corrupt(n.off, "fewer elements than its count"))??;
        out.extend_from_slice(e);
        Ok(())
    }

    /// Sets element `index` (< len) to `e`.
    pub fn ql_set(&mut self, ql: &mut QuickList, index: u64, e: &[u8], fill: Fill) -> Result<(), StoreError> {
        let (n, i) = self.locate(ql, index)?;
        let mut run = Vec::new();
        self.read_run(&n, &mut run)?;
        let starts = list_pack::starts(&run, n.count as usize)?;
        if starts[i + 1] - starts[i] == list_pack::size(e.len()) {
            // The same size: the element's bytes in place.
            let mut bytes = Vec::with_capacity(starts[i + 1] - starts[i]);
            list_pack::push(&mut bytes, e);
            return self.write_node(&n, u64::from(n.lo) + starts[i] as u64, &bytes);
        }
        let elems: Vec<&[u8]> = (0..n.count as usize)
            .map(|j| if j == i { Ok(e) } else { element(&run, &starts, j) })
            .collect::<Result<_, _>>()?;
        self.replace_node(ql, &n, elems.iter().copied(), fill)
    }

    /// Inserts `e` before element `index` (`index` = len: at the tail).
    pub fn ql_insert(
        &mut self,
        ql: &mut QuickList,
        index: u64,
        e: &[u8],
        fill: Fill,
    ) -> Result<(), StoreError> {
        if index == 0 || index >= ql.len {
            return self.ql_push(ql, index == 0, e, fill);
        }
        let (n, i) = self.locate(ql, index)?;
        let mut run = Vec::new();
        self.read_run(&n, &mut run)?;
        let starts = list_pack::starts(&run, n.count as usize)?;
        let mut elems: Vec<&[u8]> =
            (0..n.count as usize).map(|j| element(&run, &starts, j)).collect::<Result<_, _>>()?;
        elems.insert(i, e);
        self.replace_node(ql, &n, elems.iter().copied(), fill)?;
        ql.len += 1;
        Ok(())
    }

    /// Removes `count` elements from element `start` on (both within the list).
    pub fn ql_del_range(
        &mut self,
        ql: &mut QuickList,
        start: u64,
        count: u64,
        fill: Fill,
    ) -> Result<(), StoreError> {
        if count == 0 {
            return Ok(());
        }
        assert!(start + count <= ql.len, "a range within the list");
        let (mut n, mut i) = self.locate(ql, start)?;
        let mut left = count;
        let mut run = Vec::new();
        // Whole nodes removed one after another are linked past once: the node before them.
        let mut gap: Option<u64> = None;
        loop {
            let take = left.min(u64::from(n.count) - i as u64) as usize;
            let next = n.next;
            if i == 0 && take == n.count as usize {
                gap.get_or_insert(n.prev);
                self.free(n.off, n.class)?;
                ql.nodes -= 1;
            } else {
                self.read_run(&n, &mut run)?;
                let starts = list_pack::starts(&run, n.count as usize)?;
                let c = n.count - take as u32;
                if i == 0 {
                    self.write_head(&n, &Node { lo: n.lo + starts[take] as u32, count: c, ..n })?;
                } else if i + take == n.count as usize {
                    self.write_head(&n, &Node { hi: n.lo + starts[i] as u32, count: c, ..n })?;
                } else {
                    // Inside one node (the first touched: no gap before it), fewer bytes than
                    // it had: one run.
                    let mut kept = Vec::with_capacity(run.len());
                    kept.extend_from_slice(&run[..starts[i]]);
                    kept.extend_from_slice(&run[starts[i + take]..]);
                    let runs = [Run { bytes: kept, count: c as usize }];
                    self.free(n.off, n.class)?;
                    ql.nodes -= 1;
                    self.make_nodes(ql, &runs, n.prev, n.next, fill, true)?;
                }
                if let Some(p) = gap.take() {
                    self.set_next(ql, p, n.off)?;
                    self.set_prev(ql, n.off, p)?;
                }
            }
            ql.len -= take as u64;
            left -= take as u64;
            if left == 0 {
                if let Some(p) = gap {
                    self.set_next(ql, p, next)?;
                    self.set_prev(ql, next, p)?;
                }
                return Ok(());
            }
            n = self.read_node(next)?;
            i = 0;
        }
    }

    /// Calls `f` with the elements from `from` (< len) on, towards the tail, or towards the
    /// head when `reverse`, until it returns false.
    pub fn ql_each(
        &self,
        ql: &QuickList,
        from: u64,
        reverse: bool,
        mut f: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        let (mut n, mut i) = self.locate(ql, from)?;
        let mut run = Vec::new();
        let mut steps = 0;
        loop {
            self.read_run(&n, &mut run)?;
            let starts = list_pack::starts(&run, n.count as usize)?;
            if reverse {
                for j in (0..=i).rev() {
                    if !f(element(&run, &starts, j)?)? {
                        return Ok(());
                    }
                }
            } else {
                for j in i..n.count as usize {
                    if !f(element(&run, &starts, j)?)? {
                        return Ok(());
                    }
                }
            }
            let off = if reverse { n.prev } else { n.next };
            steps += 1;
            if off == 0 {
                return Ok(());
            }
            if steps > ql.nodes {
                return Err(StoreError::Corrupt("a list's chain is longer than its node count".into()));
            }
            n = self.read_node(off)?;
            i = if reverse { n.count as usize - 1 } else { 0 };
        }
    }

    /// Removes the elements equal to `e`, at most `max` of them (0: all), from the head on or
    /// (`from_tail`) from the tail on; returns how many went. Only nodes holding one are
    /// rewritten.
    pub fn ql_remove(
        &mut self,
        ql: &mut QuickList,
        e: &[u8],
        max: u64,
        from_tail: bool,
        fill: Fill,
    ) -> Result<u64, StoreError> {
        let mut removed = 0u64;
        let mut off = if from_tail { ql.tail } else { ql.head };
        let mut run = Vec::new();
        let (mut steps, nodes) = (0, ql.nodes);
        while off != 0 && (max == 0 || removed < max) {
            steps += 1;
            if steps > nodes {
                return Err(StoreError::Corrupt("a list's chain is longer than its node count".into()));
            }
            let n = self.read_node(off)?;
            off = if from_tail { n.prev } else { n.next };
            self.read_run(&n, &mut run)?;
            let starts = list_pack::starts(&run, n.count as usize)?;
            let count = n.count as usize;
            let mut gone = vec![false; count];
            let mut here = 0u64;
            for k in 0..count {
                let j = if from_tail { count - 1 - k } else { k };
                if max != 0 && removed + here == max {
                    break;
                }
                if element(&run, &starts, j)? == e {
                    gone[j] = true;
                    here += 1;
                }
            }
            if here == 0 {
                continue;
            }
            let kept: Vec<&[u8]> = (0..count)
                .filter(|&j| !gone[j])
                .map(|j| element(&run, &starts, j))
                .collect::<Result<_, _>>()?;
            self.replace_node(ql, &n, kept.iter().copied(), fill)?;
            removed += here;
            ql.len -= here;
        }
        Ok(removed)
    }

    /// Frees every node of a list.
    pub fn ql_free(&mut self, ql: &QuickList) -> Result<(), StoreError> {
        let mut off = ql.head;
        let mut steps = 0;
        while off != 0 {
            steps += 1;
            if steps > ql.nodes {
                return Err(StoreError::Corrupt("a list's chain is longer than its node count".into()));
            }
            let n = self.read_node(off)?;
            self.free(n.off, n.class)?;
            off = n.next;
        }
        Ok(())
    }

    /// A node's `next` and its block's class, for freeing a chain a node at a time
    /// (`lazyfree.rs`).
    pub(super) fn ql_node_link(&self, off: u64) -> Result<(u64, u8), StoreError> {
        let n = self.read_node(off)?;
        Ok((n.next, n.class))
    }

    /// The list handle an entry's value is, if it is one.
    pub fn list_of(&self, f: &Found) -> Result<QuickList, StoreError> {
        let mut b = [0u8; QuickList::LEN];
        if f.head.vlen as usize != QuickList::LEN {
            return Err(StoreError::Corrupt(format!(
                "the entry at {} holds a list handle of {} bytes",
                f.entry, f.head.vlen
            )));
        }
        self.read_value(f, 0, &mut b)?;
        Ok(QuickList::decode(&b).expect("32 bytes"))
    }

    /// Stores a changed list's handle in its entry, in place.
    pub fn set_list(&mut self, f: &Found, ql: &QuickList) -> Result<(), StoreError> {
        self.meta(f.value_off(), &ql.encode())
    }

    /// Bytes of the blocks of the list's first `k` nodes (all of them, if it has no more), and
    /// how many nodes that is.
    pub fn ql_head_bytes(&self, ql: &QuickList, k: u64) -> Result<(u64, u64), StoreError> {
        let (mut off, mut bytes, mut nodes) = (ql.head, 0, 0);
        while off != 0 && nodes < k.min(ql.nodes) {
            let n = self.read_node(off)?;
            bytes += n.size;
            nodes += 1;
            off = n.next;
        }
        Ok((bytes, nodes))
    }

    /// Calls `f(offset, bytes)` for every node of a list, checking the chain as it goes: links
    /// both ways, the counts against the handle. For tests, checks and `MEMORY USAGE`.
    pub fn ql_blocks(&self, ql: &QuickList, mut f: impl FnMut(u64, u64)) -> Result<(), String> {
        let (mut off, mut prev, mut nodes, mut len) = (ql.head, 0u64, 0u64, 0u64);
        while off != 0 {
            let n = self.read_node(off).map_err(|e| e.to_string())?;
            if n.prev != prev {
                return Err(format!("node {off} says prev {} but follows {prev}", n.prev));
            }
            f(off, n.size);
            nodes += 1;
            len += u64::from(n.count);
            if nodes > ql.nodes {
                return Err(format!("more nodes than the handle's {}", ql.nodes));
            }
            (prev, off) = (off, n.next);
        }
        if prev != ql.tail || nodes != ql.nodes || len != ql.len {
            return Err(format!(
                "the chain ends at {prev} with {nodes} nodes and {len} elements; the handle says {ql:?}"
            ));
        }
        Ok(())
    }
}

/// Element `j` of a run whose element offsets are `starts`.
fn element<'a>(run: &'a [u8], starts: &[usize], j: usize) -> Result<&'a [u8], StoreError> {
    list_pack::iter(&run[starts[j]..starts[j + 1]]).next().expect("an element")
}

#[cfg(test)]
mod tests;
