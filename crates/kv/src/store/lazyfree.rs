//! Freeing large values in the background (Redis's lazyfree; FORMAT.md §11.11).
//!
//! Freeing a value links every block it holds into a free list when the batch is sealed: one
//! in-place store per block. A sorted set of a million members holds tens of thousands of
//! nodes, and freeing them all in the command that removed the key made a group larger than
//! the mirror's log takes, so `DEL` of such a key was refused. Instead, a key whose value holds
//! more than [`LAZYFREE_THRESHOLD`] elements (or list nodes) is unlinked in the command's own
//! batch (O(1) stores), and its entry, value and all, goes onto the **pending-free list** in
//! the region: the superblock's `lazyfree_head`, chained by the entries' `next` words,
//! counted by `lazyfree_pending`. Nothing can reach a pending value (it has no key).
//!
//! The server then frees pending values a batch's room at a time ([`Store::lazyfree_step`]),
//! each step a sealed, replicated group like any batch. A step frees whole *pieces*, each
//! leaving what remains well formed, so that a crash, or a promotion of the mirror, between
//! steps finds a pending list whose every value can be freed from where the last sealed step
//! left it, and no block is freed twice (a step cut short is undone whole by the journal):
//! - a tree (§11.5, §11.9) is freed from its end: the last leaf (with its blocks of long
//!   entries), its slot in its parent removed by lowering the parent's `count` (and, in an
//!   order tree, the slot's separator block freed); an inner node whose `count` reaches 0 is
//!   freed in turn and leaves its parent the same way; the root last. A step writes each
//!   count it lowered once, when it stops.
//! - a list's chain (§11.7) is freed from its head: the handle's `head` and `nodes` move on.
//! - a sorted set's index: its order tree, then (its `order_root` set to 0) its member tree.
//!
//! When the value is all freed, the entry's block is freed too and the list's head moves on.
//! `used` (`used_memory`) goes down as blocks are freed, not when the key is removed.

use super::error::StoreError;
use super::layout::{ENC_QUICKLIST, ENC_TREE, ENC_ZSET_INDEX, KIND_LIST, KIND_ZSET};
use super::mem::Mem;
use super::node::{Page, INNER, N};
use super::table::Found;
use super::Store;

/// A value holding more elements than this (a list: more nodes) is freed in the background;
/// one holding at most this many is freed by the command that drops it, as Redis's
/// `LAZYFREE_THRESHOLD` (64) decides. At most this many elements means at most about twice as
/// many blocks (a node or fewer per element, a block of its own per long element), a bounded
/// share of any group.
pub const LAZYFREE_THRESHOLD: u64 = 64;

/// Levels a tree may have, for the walk (more than either tree allows).
const MAX_HEIGHT: usize = 32;

/// How a tree of one kind is freed a piece at a time: both trees keep `count` (u16) at node
/// byte 8 and `kind` at byte 1; the rest differs (`tree.rs`, `ztree.rs`).
pub(super) trait TreeShape {
    /// Reads and checks the node at `off`.
    fn read<M: Mem>(s: &Store<M>, off: u64, p: &mut Page) -> Result<(), StoreError>;
    /// Inner node `p`'s child `i`.
    fn child(p: &Page, i: usize) -> u64;
    /// The block inner entry `i` of `p` owns besides its child (a long separator), if any.
    fn entry_block(p: &Page, i: usize) -> Option<(u64, u8)>;
    /// The blocks leaf `p` (at `node`) owns besides itself: those of its long entries.
    fn leaf_blocks(p: &Page, node: u64, out: &mut Vec<(u64, u8)>) -> Result<(), StoreError>;
}

fn count(p: &Page) -> usize {
    u16::from_le_bytes([p[8], p[9]]) as usize
}

fn set_count(p: &mut Page, c: usize) {
    p[8..10].copy_from_slice(&(c as u16).to_le_bytes());
}

/// A node on the walk's path: its page as the step has changed it, and its count as read.
struct Level {
    node: u64,
    page: Box<Page>,
    read_count: usize,
}

impl<M: Mem> Store<M> {
    /// Objects (removed keys' values) waiting to be freed in the background.
    pub fn lazyfree_pending(&self) -> u64 {
        self.dy.lazyfree_pending
    }

    /// Whether the batch has room for a piece of `blocks` more freed blocks, for groups of at
    /// most `max_group_bytes` and `max_ranges` ranges: the batch's ranges and freed blocks
    /// (each a range when it is sealed) stay within three quarters of `max_ranges`, so that
    /// sealing never joins ranges across the heap's gaps, and [`Store::batch_has_room`]. A
    /// batch that stored nothing always has room for one piece, so that the freeing goes on.
    pub fn lazyfree_room(&self, blocks: usize, max_group_bytes: u64, max_ranges: usize) -> bool {
        let used = self.batch.ranges.len() + self.batch_frees();
        (used == 0 || used + blocks <= max_ranges / 4 * 3) && self.batch_has_room(max_group_bytes, max_ranges)
    }

    /// Tests: frees every pending value, a sealed step at a time, as the server does (each
    /// step's group checked to be at most `max_group_bytes`); returns the values freed.
    #[cfg(test)]
    pub(crate) fn lazyfree_all(&mut self, max_group_bytes: u64, max_ranges: usize) -> u64 {
        let (mut freed, mut steps) = (0, 0);
        while self.lazyfree_pending() > 0 {
            freed += self
                .lazyfree_step(|s, blocks| s.lazyfree_room(blocks, max_group_bytes, max_ranges))
                .expect("a step frees");
            let group = self.seal(max_ranges).expect("a step seals").expect("a step stores");
            let bytes: u64 = group.iter().map(|r| r.len).sum();
            assert!(bytes <= max_group_bytes, "a step left a group of {bytes} bytes");
            steps += 1;
            assert!(steps < 1_000_000, "the freeing does not end");
        }
        freed
    }

    /// Blocks freed in the batch so far (each adds a range to its group when it is sealed).
    pub fn batch_frees(&self) -> usize {
        self.batch.frees.len() - self.batch.frees_from
    }

    /// The work of freeing what an entry's value holds outside its block: elements of a tree
    /// or an index, nodes of a list, 0 for a value held whole.
    fn free_effort(&self, f: &Found) -> Result<u64, StoreError> {
        if let Some(t) = self.tree_of(f)? {
            return Ok(t.len);
        }
        if (f.head.kind, f.head.encoding) == (KIND_LIST, ENC_QUICKLIST) {
            return Ok(self.list_of(f)?.nodes);
        }
        Ok(self.zindex_of(f)?.map_or(0, |z| z.len()))
    }

    /// Gives back a removed entry (already unlinked from its chain and uncounted) and its
    /// value: at once when freeing the value is small work, else onto the pending-free list.
    pub(super) fn release(&mut self, f: &Found) -> Result<(), StoreError> {
        if self.free_effort(f)? <= LAZYFREE_THRESHOLD {
            self.drop_value(f)?;
            return self.free(f.entry, f.head.class);
        }
        self.meta(f.entry, &self.dy.lazyfree_head.to_le_bytes())?;
        self.dy.lazyfree_head = f.entry;
        self.dy.lazyfree_pending += 1;
        Ok(())
    }

    /// Frees pending values, a piece at a time, while `room(store, blocks)` says the batch
    /// has room for a piece of that many more freed blocks (a piece is a leaf and its long
    /// entries' blocks, an inner node, a list node: at most a few hundred blocks). Returns how
    /// many values were freed whole. Runs in the batch like a command (roll it back to a
    /// savepoint if it fails).
    pub fn lazyfree_step(&mut self, mut room: impl FnMut(&Self, usize) -> bool) -> Result<u64, StoreError> {
        let mut done = 0;
        while self.dy.lazyfree_head != 0 {
            let e = self.dy.lazyfree_head;
            if self.dy.lazyfree_pending == 0 {
                return Err(StoreError::Corrupt(format!(
                    "the pending-free list starts at {e} but its count is 0"
                )));
            }
            let head = self.read_head(e)?;
            let f = Found { entry: e, head, link: 0, link_is_bucket: false };
            if !self.free_value_part(&f, &mut room)? {
                break;
            }
            self.dy.lazyfree_head = head.next;
            self.dy.lazyfree_pending -= 1;
            self.free(e, head.class)?;
            done += 1;
        }
        if self.dy.lazyfree_head == 0 && self.dy.lazyfree_pending != 0 {
            return Err(StoreError::Corrupt(format!(
                "the pending-free list ends with {} values still counted",
                self.dy.lazyfree_pending
            )));
        }
        Ok(done)
    }

    /// Frees pieces of a pending entry's value while `room` allows; whether it is all freed.
    fn free_value_part(
        &mut self,
        f: &Found,
        room: &mut impl FnMut(&Self, usize) -> bool,
    ) -> Result<bool, StoreError> {
        match (f.head.kind, f.head.encoding) {
            (_, ENC_TREE) => {
                let t = self.tree_of(f)?.expect("a tree's encoding");
                self.free_tree_part::<super::tree::HashTree>(t.root, room)
            }
            (KIND_LIST, ENC_QUICKLIST) => self.free_list_part(f, room),
            (KIND_ZSET, ENC_ZSET_INDEX) => {
                let z = self.zindex_of(f)?.expect("an index's encoding");
                if z.order.root != 0 {
                    if !self.free_tree_part::<super::ztree::OrderTree>(z.order.root, room)? {
                        return Ok(false);
                    }
                    // The order tree is gone: the handle says so, for a later step.
                    self.meta(f.value_off(), &0u64.to_le_bytes())?;
                }
                self.free_tree_part::<super::tree::HashTree>(z.members.root, room)
            }
            // A value held whole has nothing outside its block.
            _ => Ok(true),
        }
    }

    /// Frees a list's nodes from its head while `room` allows; whether all are freed. The
    /// handle's `head` and `nodes` follow (its `tail` and `len` are left as they were).
    fn free_list_part(
        &mut self,
        f: &Found,
        room: &mut impl FnMut(&Self, usize) -> bool,
    ) -> Result<bool, StoreError> {
        let mut ql = self.list_of(f)?;
        let start = ql;
        while ql.head != 0 {
            if !room(self, 1) {
                break;
            }
            if ql.nodes == 0 {
                return Err(StoreError::Corrupt(format!(
                    "the pending list at {} has more nodes than its handle counts",
                    f.entry
                )));
            }
            let (next, class) = self.ql_node_link(ql.head)?;
            self.free(ql.head, class)?;
            ql.head = next;
            ql.nodes -= 1;
        }
        if ql.head == 0 {
            return Ok(true);
        }
        if ql != start {
            self.set_list(f, &ql)?;
        }
        Ok(false)
    }

    /// Frees a tree from its end, a piece at a time, while `room` allows; whether it is all
    /// freed (its root last). What is left is the same tree less its last leaves: each count
    /// lowered is written once, when the walk stops.
    pub(super) fn free_tree_part<T: TreeShape>(
        &mut self,
        root: u64,
        room: &mut impl FnMut(&Self, usize) -> bool,
    ) -> Result<bool, StoreError> {
        let mut path: Vec<Level> = Vec::with_capacity(8);
        let mut page = Box::new([0u8; N]);
        T::read(self, root, &mut page)?;
        path.push(Level { node: root, read_count: count(&page), page });
        let mut blocks = Vec::new();
        loop {
            let top = path.last().expect("the walk has a node");
            let c = count(&top.page);
            if top.page[1] == INNER && c > 0 {
                if path.len() >= MAX_HEIGHT {
                    return Err(StoreError::Corrupt(format!("the tree at {root} is deeper than it can be")));
                }
                let child = T::child(&top.page, c - 1);
                let mut page = Box::new([0u8; N]);
                T::read(self, child, &mut page)?;
                path.push(Level { node: child, read_count: count(&page), page });
                continue;
            }
            // The last node on the path is a piece: a leaf, or an inner node with no children
            // left. It goes with its long entries' blocks and its slot's block in its parent.
            blocks.clear();
            if top.page[1] != INNER {
                T::leaf_blocks(&top.page, top.node, &mut blocks)?;
            }
            blocks.push((top.node, top.page[3]));
            let parent = path.len().checked_sub(2).map(|i| &path[i]);
            if let Some(p) = parent {
                blocks.extend(T::entry_block(&p.page, count(&p.page) - 1));
            }
            if !room(self, blocks.len()) {
                break;
            }
            for &(off, class) in &blocks {
                self.free(off, class)?;
            }
            path.pop();
            let Some(p) = path.last_mut() else {
                // The root is freed: nothing is left to write.
                return Ok(true);
            };
            let c = count(&p.page);
            set_count(&mut p.page, c - 1);
        }
        for l in &path {
            let c = count(&l.page);
            if c != l.read_count {
                self.meta(l.node + 8, &(c as u16).to_le_bytes())?;
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests;
