//! A tree built whole from its entries (a set or a sorted set's member tree stored by a
//! `*STORE` command, a small set moved into a tree): the entries sorted by hash, leaves filled
//! seven eighths full in one pass, then each inner level over the one below, every node made
//! once in the smallest size that holds it and written fresh. O(n log n) for the sort, O(n)
//! for the rest, where inserting one entry at a time reads, changes and often remakes O(height)
//! nodes per entry.

use super::{count, inner, leaf, Tree, HEAD, IENT, INNER_CAP, N};
use crate::store::error::StoreError;
use crate::store::mem::Mem;
use crate::store::Store;

/// Bytes of entries and slots a built leaf holds at most: seven eighths of a node.
pub(super) const FILL: usize = (N - HEAD) * 7 / 8;
/// Children a built inner node holds at most: seven eighths of a node's.
pub(super) const PER_INNER: usize = INNER_CAP * 7 / 8;

/// The leaf being filled: its encoded entries back to back, where each ends, the first hash.
struct Filling {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    first: u64,
}

impl<M: Mem> Store<M> {
    /// A tree of `entries` (key, value), no key twice, built bottom up. A key given twice is
    /// the caller's error, refused before anything is stored.
    pub fn tree_build<'a>(&mut self, entries: &[(&'a [u8], &'a [u8])]) -> Result<Tree, StoreError> {
        if entries.is_empty() {
            return self.tree_new();
        }
        let mut order: Vec<(u64, usize)> =
            entries.iter().enumerate().map(|(i, (k, _))| (self.hasher.hash64(k), i)).collect();
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| entries[a.1].0.cmp(entries[b.1].0)));
        if let Some(w) = order.windows(2).find(|w| w[0].0 == w[1].0 && entries[w[0].1].0 == entries[w[1].1].0)
        {
            return Err(StoreError::Corrupt(format!(
                "a tree built with the key {:?} twice",
                String::from_utf8_lossy(entries[w[0].1].0)
            )));
        }
        let mut level: Vec<(u64, u64, u64)> = Vec::with_capacity(entries.len() / 64 + 1);
        let mut fill = Filling { bytes: Vec::with_capacity(N), ends: Vec::new(), first: 0 };
        let mut enc = Vec::new();
        for &(h, i) in &order {
            let (k, v) = entries[i];
            self.encode_entry(h, k, v, &mut enc)?;
            if !fill.ends.is_empty() && fill.bytes.len() + 2 * fill.ends.len() + enc.len() + 2 > FILL {
                self.build_leaf(&mut fill, &mut level)?;
            }
            if fill.ends.is_empty() {
                fill.first = h;
            }
            fill.bytes.extend_from_slice(&enc);
            fill.ends.push(fill.bytes.len());
        }
        self.build_leaf(&mut fill, &mut level)?;
        let mut lvl = 1u8;
        while level.len() > 1 {
            // As many nodes as seven eighths full takes, their children shared out evenly.
            let nodes = level.len().div_ceil(PER_INNER);
            let mut next = Vec::with_capacity(nodes);
            let mut from = 0;
            for k in 0..nodes {
                let to = level.len() * (k + 1) / nodes;
                let group = &level[from..to];
                let mut p = [0u8; N];
                inner::init(&mut p, self.node_size_for(IENT * group.len(), false), lvl);
                inner::splice(&mut p, 0, 0, group);
                let n = group.iter().map(|e| e.2).sum();
                next.push((group[0].0, self.new_page(&mut p)?, n));
                from = to;
            }
            level = next;
            lvl += 1;
        }
        Ok(Tree { root: level[0].1, len: entries.len() as u64 })
    }

    /// Makes the leaf being filled (then emptied) the next of `level`.
    fn build_leaf(&mut self, fill: &mut Filling, level: &mut Vec<(u64, u64, u64)>) -> Result<(), StoreError> {
        let mut p = [0u8; N];
        leaf::init(&mut p, self.node_size_for(fill.bytes.len() + 2 * fill.ends.len(), false));
        let mut start = 0;
        for (k, &end) in fill.ends.iter().enumerate() {
            debug_assert!(leaf::gap(&p) >= end - start + 2, "a built leaf holds its entries");
            leaf::insert(&mut p, k, &fill.bytes[start..end]);
            start = end;
        }
        debug_assert_eq!(count(&p), fill.ends.len());
        level.push((fill.first, self.new_page(&mut p)?, fill.ends.len() as u64));
        fill.bytes.clear();
        fill.ends.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{
        check, contents, handle, keep, key, node_sizes, value, Model, Rng, MAX_RANGES,
    };
    use super::*;
    use crate::store::layout::class_sizes;
    use crate::store::node::{self, LEAF};
    use crate::store::VecMem;

    /// Builds `model`'s tree in one command, keeps and seals it, and checks it: invariants,
    /// contents, every key found, the heap's accounting; then the same after a reopen.
    fn built(mem: &VecMem, model: &Model) -> Tree {
        let mut s = Store::open(mem, MAX_RANGES).unwrap();
        let _ = s.savepoint();
        let entries: Vec<(&[u8], &[u8])> = model.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let t = s.tree_build(&entries).unwrap();
        assert_eq!(t.len, model.len() as u64);
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, model);
        let mut v = Vec::new();
        for (k, want) in model {
            v.clear();
            assert!(s.tree_get(&t, k, &mut v).unwrap(), "{k:?}");
            assert_eq!(&v, want);
        }
        let mut s = Store::open(mem, MAX_RANGES).unwrap();
        assert_eq!(handle(&mut s), Some(t));
        check(&mut s, &t, model);
        t
    }

    fn root_level<M: Mem>(s: &Store<M>, t: &Tree) -> u8 {
        let mut p = [0u8; N];
        s.read_page(t.root, &mut p).unwrap();
        p[2]
    }

    fn leaves<M: Mem>(s: &Store<M>, t: &Tree) -> Vec<(usize, usize)> {
        // (count, bytes of entries and slots) of every leaf.
        let mut out = Vec::new();
        s.tree_blocks(t, |off, _| {
            let mut p = [0u8; N];
            if s.read_page(off, &mut p).is_ok() && p[1] == LEAF {
                out.push((count(&p), node::size(&p) - leaf::data_lo(&p) + 2 * count(&p)));
            }
        })
        .unwrap();
        out
    }

    #[test]
    fn an_empty_build_is_an_empty_tree_and_one_entry_a_leaf_of_its_size() {
        let mem = VecMem::new(4 << 20);
        let t = built(&mem, &Model::new());
        let s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(node_sizes(&s, &t), [(48, 48)]);
        let mem = VecMem::new(4 << 20);
        let one: Model = [(b"k".to_vec(), b"v".to_vec())].into_iter().collect();
        let t = built(&mem, &one);
        let s = Store::open(&mem, MAX_RANGES).unwrap();
        // 16 of head, a slot, an entry of 12 + 2 bytes: the smallest class.
        assert_eq!(node_sizes(&s, &t), [(48, 48)]);
    }

    #[test]
    fn entries_that_fill_one_leaf_exactly_make_one_leaf_and_one_more_two() {
        // Entries of 12 + 8 + 13 bytes and a slot: 35 bytes each, and FILL a multiple of 35.
        assert_eq!(FILL % 35, 0);
        let per = FILL / 35;
        let model = |n: usize| -> Model {
            (0..n).map(|i| (format!("key:{i:04}").into_bytes(), format!("v:{i:011}").into_bytes())).collect()
        };
        let mem = VecMem::new(4 << 20);
        let t = built(&mem, &model(per));
        let s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(leaves(&s, &t), [(per, FILL)]);
        assert_eq!(root_level(&s, &t), 0);
        let fit = class_sizes().into_iter().find(|&c| c >= (HEAD + FILL) as u64).unwrap();
        assert_eq!(node_sizes(&s, &t), [(fit as usize, fit)], "a leaf in the class that holds it");
        let mem = VecMem::new(4 << 20);
        let t = built(&mem, &model(per + 1));
        let s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(leaves(&s, &t), [(per, FILL), (1, 35)]);
        assert_eq!(root_level(&s, &t), 1);
    }

    #[test]
    fn a_large_build_has_full_leaves_and_levels_of_even_inner_nodes() {
        let mem = VecMem::new(64 << 20);
        let model: Model = (0..60_000).map(|i| (format!("member:{i}").into_bytes(), Vec::new())).collect();
        let t = built(&mem, &model);
        let s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(root_level(&s, &t), 2, "{} leaves under inner nodes under the root", leaves(&s, &t).len());
        let l = leaves(&s, &t);
        // Every leaf but the last is full: the next entry (at most 26 bytes) would pass FILL.
        for &(_, bytes) in &l[..l.len() - 1] {
            assert!(bytes <= FILL && bytes + 26 > FILL, "a leaf of {bytes} bytes");
        }
        // The inner nodes under the root hold children in equal shares.
        let mut root = [0u8; N];
        s.read_page(t.root, &mut root).unwrap();
        let mut sizes = Vec::new();
        for i in 0..count(&root) {
            let mut p = [0u8; N];
            s.read_page(inner::child(&root, i), &mut p).unwrap();
            sizes.push(count(&p));
        }
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        assert!(*sizes.iter().max().unwrap() <= PER_INNER, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), l.len());
    }

    #[test]
    fn a_built_tree_changes_as_any_other() {
        // Keys of every size (some in blocks of their own), then sets and removes on it.
        for seed in 0..4 {
            let mem = VecMem::new(32 << 20);
            let mut r = Rng(seed);
            let mut model = Model::new();
            for _ in 0..3000 {
                let k = key(&mut r, 100_000);
                model.insert(k, value(&mut r));
            }
            let mut t = built(&mem, &model);
            let mut s = Store::open(&mem, MAX_RANGES).unwrap();
            for _ in 0..3000 {
                let k = key(&mut r, 100_000);
                if r.below(2) == 0 {
                    assert_eq!(s.tree_remove(&mut t, &k).unwrap(), model.remove(&k).is_some());
                } else {
                    let v = value(&mut r);
                    assert_eq!(s.tree_set(&mut t, &k, &v).unwrap(), model.insert(k, v).is_none());
                }
                if !s.batch_has_room(32 << 20, MAX_RANGES) {
                    keep(&mut s, &t).unwrap();
                    s.seal(MAX_RANGES).unwrap();
                }
            }
            keep(&mut s, &t).unwrap();
            s.seal(MAX_RANGES).unwrap();
            check(&mut s, &t, &model);
        }
    }

    #[test]
    fn equal_hashes_are_built_side_by_side_across_leaves() {
        // Sixteen hashes for thousands of keys: runs of one hash span many leaves.
        let mem = VecMem::new(16 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        s.hasher = crate::store::KeyHasher::Masked(0xF);
        let model: Model = (0..5000).map(|i| (format!("f{i}").into_bytes(), vec![b'v'; 20])).collect();
        let entries: Vec<(&[u8], &[u8])> = model.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let mut t = s.tree_build(&entries).unwrap();
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &model);
        let mut v = Vec::new();
        for k in model.keys() {
            assert!(s.tree_get(&t, k, &mut v).unwrap(), "{k:?}");
        }
        for k in model.keys() {
            assert!(s.tree_remove(&mut t, k).unwrap(), "{k:?}");
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                keep(&mut s, &t).unwrap();
                s.seal(MAX_RANGES).unwrap();
            }
        }
        keep(&mut s, &t).unwrap();
        check(&mut s, &t, &Model::new());
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let mem = VecMem::new(4 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        let used = s.used_bytes();
        let e = s.tree_build(&[(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]).unwrap_err();
        assert!(e.to_string().contains("\"a\" twice"), "{e}");
        assert_eq!(s.used_bytes(), used, "nothing was made");
    }

    #[test]
    fn a_build_is_written_once_with_no_undo_and_rolls_back_whole() {
        let mem = VecMem::new(32 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        let used = s.used_bytes();
        let sp = s.savepoint();
        let model: Model = (0..20_000)
            .map(|i| (format!("field:{i}").into_bytes(), b"twenty bytes value!!".to_vec()))
            .collect();
        let entries: Vec<(&[u8], &[u8])> = model.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        let t = s.tree_build(&entries).unwrap();
        let mut nodes = 0;
        s.tree_blocks(&t, |_, size| nodes += size).unwrap();
        assert!(s.batch_bytes() <= nodes, "{} bytes stored for {nodes} bytes of nodes", s.batch_bytes());
        assert_eq!(s.undo_use().0, 0, "a heap never sealed: nothing to undo");
        s.rollback_to(&sp).unwrap();
        assert_eq!(s.used_bytes(), used);
    }

    #[test]
    fn a_crash_at_any_write_of_a_build_leaves_the_tree_before_it() {
        // A tree sealed, then a command that frees it and builds another in its place: a crash
        // at any write leaves one of the two, whole.
        let first: Model = (0..400).map(|i| (format!("old:{i}").into_bytes(), vec![b'o'; 30])).collect();
        let second: Model = (0..900).map(|i| (format!("new:{i}").into_bytes(), vec![b'n'; 50])).collect();
        // The first tree, sealed (no crash).
        let base = VecMem::new(4 << 20);
        {
            let mut s = Store::open(&base, MAX_RANGES).unwrap();
            s.set_hash_key(1, 2);
            let entries: Vec<(&[u8], &[u8])> = first.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            let t = s.tree_build(&entries).unwrap();
            keep(&mut s, &t).unwrap();
            s.seal(MAX_RANGES).unwrap();
        }
        let image = base.image();
        let second_run = |mem: &VecMem| -> Result<(), StoreError> {
            let mut s = Store::open(mem, MAX_RANGES)?;
            let _ = s.savepoint();
            let t = handle(&mut s).expect("the first tree");
            s.tree_free(&t)?;
            let entries: Vec<(&[u8], &[u8])> = second.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            let t = s.tree_build(&entries)?;
            keep(&mut s, &t)?;
            s.seal(MAX_RANGES)?;
            Ok(())
        };
        let mem = VecMem::from_bytes(image.clone());
        second_run(&mem).unwrap();
        let total = mem.writes();
        let step = (total / 200).max(1);
        let mut at = 1;
        let mut before = false;
        while at < total {
            let mem = VecMem::from_bytes(image.clone());
            mem.crash_after(at);
            assert!(second_run(&mem).is_err(), "the crash at write {at} happened");
            let img = VecMem::from_bytes(mem.image());
            let mut s = Store::open(&img, MAX_RANGES).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
            let t = handle(&mut s).unwrap_or_else(|| panic!("crash at {at}: no tree"));
            let c = contents(&s, &t);
            assert!(c == first || c == second, "crash at {at}: a tree of {} entries", c.len());
            before |= c == first;
            check(&mut s, &t, &c);
            at += step;
        }
        assert!(before, "crashes before the seal leave the first tree");
    }
}
