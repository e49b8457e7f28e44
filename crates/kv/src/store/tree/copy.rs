//! A tree copied node by node (`COPY` of a large hash): every node and every entry block of its
//! own is written anew, the copy's links pointing at the copies, so that the two trees share
//! nothing. O(nodes + bytes); every store is fresh (the blocks are new) but a reused block's
//! first word, as everywhere.

use super::{count, inner, leaf, set_u16, set_u64, Loc, Page, Tree, HEAD, IENT, LEAF, MAX_HEIGHT, N};
use crate::store::error::StoreError;
use crate::store::mem::Mem;
use crate::store::Store;

/// Bytes of an entry block copied at a time.
const PIECE: usize = 64 << 10;

impl<M: Mem> Store<M> {
    /// A copy of `t` that shares no block with it.
    pub fn tree_copy(&mut self, t: &Tree) -> Result<Tree, StoreError> {
        let root = self.copy_node(t.root, 0)?;
        Ok(Tree { root, len: t.len })
    }

    fn copy_node(&mut self, node: u64, depth: usize) -> Result<u64, StoreError> {
        if depth > MAX_HEIGHT {
            return Err(StoreError::Corrupt(format!("the tree node at {node} is deeper than a tree can be")));
        }
        let mut page: Box<Page> = Box::new([0u8; N]);
        self.read_page(node, &mut page)?;
        if page[1] == LEAF {
            for i in 0..count(&page) {
                let e = leaf::entry(&page, i, node)?;
                if let Loc::Ext { off, class, flen, vlen } = e.loc {
                    let (new_off, new_class) = self.copy_entry_block(off, class, flen + vlen)?;
                    let at = leaf::slot(&page, i);
                    set_u16(&mut page[..], at + 10, usize::from(new_class));
                    set_u64(&mut page[..], at + 12, new_off);
                }
            }
        } else {
            for i in 0..count(&page) {
                let child = self.copy_node(inner::child(&page, i), depth + 1)?;
                set_u64(&mut page[..], HEAD + IENT * i + 8, child);
            }
        }
        self.new_page(&mut page)
    }

    /// A new block holding the first `len` bytes of the block at `off` (of class `class`).
    fn copy_entry_block(&mut self, off: u64, class: u8, len: u64) -> Result<(u64, u8), StoreError> {
        let size = self.classes.get(class as usize).copied().unwrap_or(0);
        if !self.geo.in_heap(off, size) || len > size {
            return Err(StoreError::Corrupt(format!(
                "a tree entry points at {off}, not a block of its size"
            )));
        }
        let b = self.alloc(len)?;
        let mut buf = vec![0u8; (len as usize).min(PIECE)];
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(PIECE as u64) as usize;
            self.mem.read(off + at, &mut buf[..n])?;
            // A block from a free list holds the list's link in its first word: stored in
            // place, undo-logged; the rest is fresh.
            let (first, rest) =
                if at == 0 && !b.untouched { buf[..n].split_at(n.min(8)) } else { (&[][..], &buf[..n]) };
            if !first.is_empty() {
                self.meta(b.off, first)?;
            }
            self.fresh(b.off + at + first.len() as u64, rest)?;
            at += n as u64;
        }
        Ok((b.off, b.class))
    }
}

#[cfg(test)]
mod tests {
    use crate::store::layout::KIND_STRING;
    use crate::store::{Mem, Store, StoreError, Tree, VecMem};
    use std::collections::BTreeMap;

    fn contents<M: Mem>(s: &Store<M>, t: &Tree) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        s.tree_each(t, |k, v| {
            m.insert(k.to_vec(), v.to_vec());
            Ok(())
        })
        .unwrap();
        m
    }

    fn blocks<M: Mem>(s: &Store<M>, t: &Tree) -> Vec<(u64, u64)> {
        let mut b = Vec::new();
        s.tree_blocks(t, |off, size| b.push((off, size))).unwrap_or_else(|e| panic!("{e}"));
        b
    }

    /// A tree of `n` entries, some with blocks of their own, its handle kept in key "t".
    fn build(s: &mut Store<&VecMem>, n: usize) -> Tree {
        let mut t = s.tree_new().unwrap();
        for i in 0..n {
            let v = if i % 7 == 0 { vec![b'v'; 1500 + i] } else { format!("value {i}").into_bytes() };
            s.tree_set(&mut t, format!("field {i}").as_bytes(), &v).unwrap();
        }
        s.put(b"t", KIND_STRING, 0, &[&t.encode()], 0, None).unwrap();
        s.seal(1024).unwrap();
        t
    }

    #[test]
    fn a_copy_holds_the_same_and_shares_no_block() {
        let mem = VecMem::new(16 << 20);
        let mut s = Store::open(&mem, 1024).unwrap();
        let mut t = build(&mut s, 2000);
        let before = contents(&s, &t);
        let c = s.tree_copy(&t).unwrap();
        s.put(b"c", KIND_STRING, 0, &[&c.encode()], 0, None).unwrap();
        s.seal(1024).unwrap();
        assert_eq!(contents(&s, &c), before);
        assert_eq!(c.len, t.len);
        let mut all: Vec<(u64, u64)> = blocks(&s, &t).into_iter().chain(blocks(&s, &c)).collect();
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "blocks shared or overlapping: {w:?}");
        }
        // Changing and then freeing the original leaves the copy as it was.
        for i in 0..500 {
            s.tree_set(&mut t, format!("field {i}").as_bytes(), b"changed").unwrap();
            s.tree_remove(&mut t, format!("field {}", 1000 + i).as_bytes()).unwrap();
        }
        s.tree_free(&t).unwrap();
        s.seal(1024).unwrap();
        assert_eq!(contents(&s, &c), before);
        blocks(&s, &c);
        let mut s = Store::open(VecMem::from_bytes(mem.image()), 1024).unwrap();
        assert_eq!(contents(&s, &c), before);
        // A copy of a copy, after the original's blocks went back to the free lists (so that
        // reused blocks are written too).
        let c2 = s.tree_copy(&c).unwrap();
        assert_eq!(contents(&s, &c2), before);
        s.tree_free(&c).unwrap();
        assert_eq!(contents(&s, &c2), before);
    }

    /// A crash at any write of a batch that copies a tree leaves the state before it.
    #[test]
    fn a_crash_while_copying_leaves_the_state_before() {
        let run = |crash: Option<u64>| -> (VecMem, Tree, Result<Tree, StoreError>) {
            let mem = VecMem::new(4 << 20);
            let mut s = Store::open(&mem, 1024).unwrap();
            let mut t = build(&mut s, 300);
            // Free some blocks, so that the copy reuses them.
            for i in 0..100 {
                s.tree_remove(&mut t, format!("field {}", i * 3).as_bytes()).unwrap();
            }
            let f = s.find(b"t").unwrap();
            s.put(b"t", KIND_STRING, 0, &[&t.encode()], 0, f.as_ref()).unwrap();
            s.seal(1024).unwrap();
            if let Some(c) = crash {
                mem.crash_after(c);
            }
            let r = s.tree_copy(&t).and_then(|c| {
                s.put(b"c", KIND_STRING, 0, &[&c.encode()], 0, None)?;
                s.seal(1024)?;
                Ok(c)
            });
            (mem, t, r)
        };
        let (mem, t, r) = run(None);
        let c = r.unwrap();
        let writes = mem.writes();
        let s = Store::open(VecMem::from_bytes(mem.image()), 1024).unwrap();
        let want = contents(&s, &t);
        assert_eq!(contents(&s, &c), want);
        // Crash points spread over the run (every write would take minutes).
        let step = (writes / 120).max(1);
        for crash in (0..writes).step_by(step as usize) {
            let (mem, t, r) = run(Some(crash));
            let mut s = Store::open(VecMem::from_bytes(mem.image()), 1024).unwrap();
            assert_eq!(contents(&s, &t), want, "crash at write {crash}: the original");
            let kept = s.find(b"c").unwrap();
            match (r, kept) {
                (_, None) => {}
                (_, Some(f)) => {
                    let mut v = Vec::new();
                    s.value_into(&f, &mut v).unwrap();
                    let c = Tree::decode(&v).unwrap();
                    assert_eq!(contents(&s, &c), want, "crash at write {crash}: the copy");
                }
            }
            blocks(&s, &t);
        }
    }
}
