//! The heap's allocator: size classes, a free list per class, and a bump pointer.
//!
//! A block is taken from its class's free list, else from above the heap top, else from the
//! list of a larger class (the block keeps its class, and returns to that list). A freed block
//! waits for the batch's seal before it joins its list (see `journal.rs`). The free lists'
//! heads and the top are part of the superblock's dynamic part, held in the process during a
//! batch; a free block's first word is the link to the next one.

use super::error::StoreError;
use super::layout::CLASSES;
use super::mem::Mem;
use super::Store;

/// A block handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Offset of its first byte.
    pub off: u64,
    /// Its size class.
    pub class: u8,
    /// Whether it came from above the committed heap top, so that even its first word is
    /// unused by the committed state (a block from a free list has its link there).
    pub untouched: bool,
}

impl<M: Mem> Store<M> {
    /// The smallest class whose blocks hold `need` bytes.
    pub(crate) fn class_for(&self, need: u64) -> Option<usize> {
        let i = self.classes.partition_point(|&s| s < need);
        (i < CLASSES).then_some(i)
    }

    /// Bytes of class `c`'s blocks.
    pub(crate) fn class_size(&self, c: u8) -> u64 {
        self.classes[c as usize]
    }

    /// A block of at least `need` bytes.
    pub(crate) fn alloc(&mut self, need: u64) -> Result<Block, StoreError> {
        let heap = self.geo.heap_end - self.geo.heap_off;
        let c = self.class_for(need).ok_or(StoreError::Full { wanted: need, heap })?;
        if let Some(b) = self.pop(c)? {
            return Ok(b);
        }
        let size = self.classes[c];
        // After a flush in this batch the sealed state, and every state of the batch before
        // the flush, still use the old heap: give out only what lies above both until the
        // batch is sealed.
        let floor = if self.batch.flushed {
            self.committed.heap_top.max(self.batch.top_mark)
        } else {
            self.geo.heap_off
        };
        let top = self.dy.heap_top.max(floor);
        if top + size <= self.geo.heap_end {
            self.dy.heap_top = top + size;
            self.batch.top_mark = self.batch.top_mark.max(self.dy.heap_top);
            self.dy.used += size;
            return Ok(Block { off: top, class: c as u8, untouched: top >= self.committed.heap_top });
        }
        for larger in c + 1..CLASSES {
            if let Some(b) = self.pop(larger)? {
                return Ok(b);
            }
        }
        Err(StoreError::Full { wanted: need, heap })
    }

    fn pop(&mut self, c: usize) -> Result<Option<Block>, StoreError> {
        let b = self.dy.heads[c];
        if b == 0 {
            return Ok(None);
        }
        let size = self.classes[c];
        if !self.geo.in_heap(b, size) || !(b - self.geo.heap_off).is_multiple_of(16) {
            return Err(StoreError::Corrupt(format!("class {c}'s free list holds {b}, not a heap block")));
        }
        self.dy.heads[c] = self.read_u64(b)?;
        self.dy.used += size;
        Ok(Some(Block { off: b, class: c as u8, untouched: false }))
    }

    /// Gives a block back (it joins its free list when the batch is sealed).
    pub(crate) fn free(&mut self, off: u64, class: u8) -> Result<(), StoreError> {
        let size = self.classes.get(class as usize).copied().filter(|&s| self.geo.in_heap(off, s));
        let Some(size) = size else {
            return Err(StoreError::Corrupt(format!("block {off} of class {class} is not a heap block")));
        };
        let (used, cap) = (self.batch.undo_len + self.seal_reserve() + 24, self.geo.undo_capacity());
        if used > cap {
            return Err(StoreError::TooLarge(format!(
                "the command frees more blocks than the journal's {cap} bytes of undo space can record: \
                 split it into smaller commands, or use a larger region (the journal is 1/64 of it)"
            )));
        }
        self.dy.used -= size.min(self.dy.used);
        self.batch.frees.push((off, class));
        Ok(())
    }
}
