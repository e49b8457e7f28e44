//! The tree against a model (a map), with savepoints rolled back, batches sealed and the store
//! reopened, crashes at every write of a run, and the invariants checked throughout.

use super::*;
use crate::store::layout::{class_sizes, KIND_STRING};
use crate::store::VecMem;
use std::collections::BTreeMap;

pub(super) type Model = BTreeMap<Vec<u8>, Vec<u8>>;

pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub(super) const MAX_RANGES: usize = 1024;

/// The tree's handle is kept in the value of key "t".
pub(super) fn handle<M: Mem>(s: &mut Store<M>) -> Option<Tree> {
    let f = s.find(b"t").unwrap()?;
    let mut v = Vec::new();
    s.value_into(&f, &mut v).unwrap();
    Tree::decode(&v)
}

pub(super) fn keep<M: Mem>(s: &mut Store<M>, t: &Tree) -> Result<(), StoreError> {
    let old = s.find(b"t")?;
    s.put(b"t", KIND_STRING, 0, &[&t.encode()], 0, old.as_ref())?;
    Ok(())
}

pub(super) fn contents<M: Mem>(s: &Store<M>, t: &Tree) -> Model {
    let mut m = Model::new();
    s.tree_each(t, |k, v| {
        assert!(m.insert(k.to_vec(), v.to_vec()).is_none(), "a key twice");
        Ok(())
    })
    .unwrap();
    m
}

/// Every block the tree holds, and the rest of the heap's accounting: the tree's blocks and
/// the entry of "t" are all the used bytes.
pub(super) fn check<M: Mem>(s: &mut Store<M>, t: &Tree, model: &Model) {
    let mut blocks = Vec::new();
    s.tree_blocks(t, |off, size| blocks.push((off, size))).unwrap_or_else(|e| panic!("{e}"));
    let f = s.find(b"t").unwrap().expect("the handle");
    blocks.push((f.entry, s.class_size(f.head.class)));
    assert_eq!(s.used_bytes(), blocks.iter().map(|b| b.1).sum::<u64>(), "used bytes");
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    let got = contents(s, t);
    if got != *model {
        let missing: Vec<_> = model.keys().filter(|k| !got.contains_key(*k)).take(3).collect();
        let extra: Vec<_> = got.keys().filter(|k| !model.contains_key(*k)).take(3).collect();
        panic!("{} entries, the model {}; missing {missing:?}, extra {extra:?}", got.len(), model.len());
    }
    let mut v = Vec::new();
    for (k, want) in model.iter().take(50) {
        v.clear();
        assert!(s.tree_get(t, k, &mut v).unwrap());
        assert_eq!(&v, want);
    }
}

pub(super) fn key(r: &mut Rng, spread: u64) -> Vec<u8> {
    let n = r.below(spread);
    match r.below(20) {
        // Now and then a key too large to be inline.
        0 => format!("long-{n}-{}", "k".repeat(1200)).into_bytes(),
        _ => format!("field:{n}").into_bytes(),
    }
}

pub(super) fn value(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(10) {
        0 => 1001 + r.below(3000),
        1 => 0,
        2..=4 => r.below(8) + 1,
        _ => r.below(200),
    } as usize;
    let b = r.below(256) as u8;
    vec![b; len]
}

/// One command: several sets and removes on the tree, its handle kept.
fn command<M: Mem>(
    s: &mut Store<M>,
    t: &mut Tree,
    model: &mut Model,
    r: &mut Rng,
    spread: u64,
) -> Result<(), StoreError> {
    for _ in 0..1 + r.below(20) {
        let k = key(r, spread);
        if r.below(3) == 0 {
            let had = s.tree_remove(t, &k)?;
            assert_eq!(had, model.remove(&k).is_some());
        } else {
            let v = value(r);
            let new = s.tree_set(t, &k, &v)?;
            assert_eq!(new, model.insert(k, v).is_none());
        }
    }
    keep(s, t)
}

fn run(seed: u64, commands: usize, spread: u64, mem: &VecMem) -> Result<(Tree, Model), StoreError> {
    let mut r = Rng(seed);
    let mut s = Store::open(mem, MAX_RANGES)?;
    // One hash key for every run of a seed: the same tree, the same writes.
    s.set_hash_key(1, 2);
    let mut t = s.tree_new()?;
    keep(&mut s, &t)?;
    s.seal(MAX_RANGES)?;
    let mut model = Model::new();
    for n in 0..commands {
        let sp = s.savepoint();
        let (t0, m0) = (t, model.clone());
        command(&mut s, &mut t, &mut model, &mut r, spread)?;
        if r.below(8) == 0 {
            s.rollback_to(&sp)?;
            (t, model) = (t0, m0);
        }
        if !s.batch_has_room(32 << 20, MAX_RANGES) || r.below(4) == 0 {
            s.seal(MAX_RANGES)?;
        }
        if n % 50 == 0 {
            check(&mut s, &t, &model);
        }
    }
    s.seal(MAX_RANGES)?;
    check(&mut s, &t, &model);
    Ok((t, model))
}

#[test]
fn sets_removes_and_rollbacks_keep_the_tree_true() {
    for seed in 0..6 {
        let mem = VecMem::new(16 << 20);
        let (t, model) = run(seed, 1500, if seed % 2 == 0 { 3000 } else { 300 }, &mem).unwrap();
        // Reopened: the same tree.
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(handle(&mut s), Some(t));
        check(&mut s, &t, &model);
        // Emptied key by key: one empty leaf left, and nothing else.
        let mut t = t;
        for k in model.keys() {
            assert!(s.tree_remove(&mut t, k).unwrap());
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                keep(&mut s, &t).unwrap();
                s.seal(MAX_RANGES).unwrap();
            }
        }
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &Model::new());
        let mut nodes = 0;
        s.tree_blocks(&t, |_, _| nodes += 1).unwrap();
        assert_eq!(nodes, 1, "seed {seed}: an empty tree is one leaf");
        // Freed whole: only the handle's entry is used.
        s.tree_free(&t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        let f = s.find(b"t").unwrap().unwrap();
        assert_eq!(s.used_bytes(), s.class_size(f.head.class));
    }
}

#[test]
fn large_trees_grow_levels_and_find_the_nth_entry() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = s.tree_new().unwrap();
    let n = 60_000u64;
    for i in 0..n {
        s.tree_set(&mut t, format!("f{i}").as_bytes(), format!("v{i}").as_bytes()).unwrap();
        if !s.batch_has_room(32 << 20, MAX_RANGES) {
            keep(&mut s, &t).unwrap();
            s.seal(MAX_RANGES).unwrap();
        }
    }
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    assert_eq!(t.len, n);
    let mut root = [0u8; N];
    s.read_page(t.root, &mut root).unwrap();
    assert!(level(&root) >= 1, "a tree of {n} entries has inner nodes");
    let mut all = Vec::new();
    s.tree_each(&t, |k, _| {
        all.push(k.to_vec());
        Ok(())
    })
    .unwrap();
    for i in [0, 1, n / 2, n - 1] {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        s.tree_nth(&t, i, &mut k, &mut v).unwrap();
        assert_eq!(k, all[i as usize]);
    }
    assert!(s.tree_nth(&t, n, &mut Vec::new(), &mut Vec::new()).is_err());
    // One change to a large tree touches a few spans of a few nodes; an insert into a full leaf
    // (which leaf depends on the store's random hash key) splits it into two new leaves, which
    // are written whole, and changes spans of its parents.
    let before = s.batch_bytes();
    s.tree_set(&mut t, b"f17", b"changed!").unwrap();
    s.tree_set(&mut t, b"new field", b"x").unwrap();
    assert!(s.batch_bytes() - before < 3 * NODE, "{} bytes", s.batch_bytes() - before);
    let (undo, _) = s.undo_use();
    assert!(undo < 4096, "{undo} bytes of undo");
}

#[test]
fn a_tree_made_in_one_command_needs_no_undo() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let _ = s.savepoint();
    let mut t = s.tree_new().unwrap();
    for i in 0..40_000 {
        s.tree_set(&mut t, format!("field:{i}").as_bytes(), b"value of twenty bytes").unwrap();
    }
    let (undo, _) = s.undo_use();
    assert!(undo < 64 << 10, "{undo} bytes of undo for a tree no sealed state uses");
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    check(
        &mut s,
        &t,
        &(0..40_000)
            .map(|i| (format!("field:{i}").into_bytes(), b"value of twenty bytes".to_vec()))
            .collect(),
    );
}

#[test]
fn equal_hashes_across_leaves_are_all_found() {
    // Sixteen hashes for thousands of keys: runs of one hash span many leaves.
    for seed in 0..3 {
        let mem = VecMem::new(16 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        s.hasher = crate::store::KeyHasher::Masked(0xF);
        let mut r = Rng(seed);
        let mut t = s.tree_new().unwrap();
        let mut model = Model::new();
        for _ in 0..600 {
            command(&mut s, &mut t, &mut model, &mut r, 3000).unwrap();
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                s.seal(MAX_RANGES).unwrap();
            }
        }
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &model);
        for k in model.keys() {
            let mut v = Vec::new();
            assert!(s.tree_get(&t, k, &mut v).unwrap(), "seed {seed}: {k:?}");
        }
        let mut t2 = t;
        for k in model.keys().cloned().collect::<Vec<_>>() {
            assert!(s.tree_remove(&mut t2, &k).unwrap());
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                keep(&mut s, &t2).unwrap();
                s.seal(MAX_RANGES).unwrap();
            }
        }
        keep(&mut s, &t2).unwrap();
        check(&mut s, &t2, &Model::new());
    }
}

#[test]
fn a_crash_at_any_write_leaves_the_last_sealed_tree() {
    // A short run, then the same run with a crash at every k-th write: the reopened store
    // holds the tree of the last seal before the crash, whole.
    let mem = VecMem::new(4 << 20);
    run(7, 120, 400, &mem).unwrap();
    let total = mem.writes();
    let step = (total / 150).max(1);
    let mut at = 1;
    while at < total {
        let mem = VecMem::new(4 << 20);
        mem.crash_after(at);
        assert!(run(7, 120, 400, &mem).is_err(), "the crash at write {at} happened");
        let img = VecMem::from_bytes(mem.image());
        let mut s = Store::open(&img, MAX_RANGES).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
        if let Some(t) = handle(&mut s) {
            let mut blocks = Vec::new();
            s.tree_blocks(&t, |o, n| blocks.push((o, n))).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
            let c = contents(&s, &t);
            assert_eq!(c.len() as u64, t.len, "crash at {at}");
        }
        at += step;
    }
}

/// The size of every node of the tree (its header's), and of its block.
pub(super) fn node_sizes<M: Mem>(s: &Store<M>, t: &Tree) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    let mut blocks = Vec::new();
    s.tree_blocks(t, |off, size| blocks.push((off, size))).unwrap();
    for (off, size) in blocks {
        let mut p = [0u8; N];
        if s.read_page(off, &mut p).is_ok() {
            out.push((node::size(&p), size));
        }
    }
    out
}

#[test]
fn a_tree_of_one_leaf_is_a_block_of_the_class_that_holds_it() {
    let mem = VecMem::new(16 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = s.tree_new().unwrap();
    assert_eq!(node_sizes(&s, &t), [(48, 48)], "an empty tree: a leaf of the smallest class");
    let mut held = HEAD;
    let mut n = 0;
    loop {
        let (k, v) = (format!("field {n}"), vec![b'v'; 100]);
        let entry = 12 + k.len() + v.len() + 2;
        if held + entry > N {
            break;
        }
        s.tree_set(&mut t, k.as_bytes(), &v).unwrap();
        held += entry;
        n += 1;
        // One leaf, of the smallest class that holds it: its bytes are its block's.
        let fit = class_sizes().into_iter().find(|&c| c >= held as u64).unwrap();
        assert_eq!(node_sizes(&s, &t), [(fit as usize, fit)], "{n} entries, {held} bytes");
    }
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let one_leaf = node_sizes(&s, &t);
    assert_eq!(one_leaf.len(), 1);
    // Reopened, the same.
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    assert_eq!(node_sizes(&s, &t), one_leaf);
    // One more splits it into two leaves with room to grow, under a root of two children.
    s.tree_set(&mut t, b"one more", &[b'v'; 100]).unwrap();
    let sizes = node_sizes(&s, &t);
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    let leaves_bytes = (held + 12 + 8 + 100 + 2 - HEAD) as u64;
    let leaves: u64 = sizes[1..].iter().map(|&(_, b)| b).sum();
    assert!(leaves >= leaves_bytes * 5 / 4, "{sizes:?}: leaves of {leaves} bytes for {leaves_bytes}");
    assert!(sizes[0].1 <= 128, "{sizes:?}: the root of two children");
}

#[test]
fn a_node_made_before_nodes_had_sizes_reads_as_a_whole_node() {
    // A leaf as every node was made before, bytes 4 .. 8 zero: read as NODE bytes, its
    // entries packed at the end of the block, and changed in place.
    let mem = VecMem::new(16 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = s.tree_new().unwrap();
    s.tree_set(&mut t, b"a field", b"its value").unwrap();
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let mut p = [0u8; N];
    s.read_page(t.root, &mut p).unwrap();
    let mut old = [0u8; N];
    old[..8].copy_from_slice(&[TAG, LEAF, 0, 0, 0, 0, 0, 0]);
    let e = leaf::entry(&p, 0, t.root).unwrap();
    let at = leaf::slot(&p, 0);
    let bytes = &p[at..at + e.size];
    s.tree_free(&t).unwrap();
    set_u16(&mut old, 8, 1);
    set_u16(&mut old, 10, N - bytes.len());
    set_u16(&mut old, HEAD, N - bytes.len());
    old[N - bytes.len()..].copy_from_slice(bytes);
    let b = s.alloc(NODE).unwrap();
    old[3] = b.class;
    s.fresh(b.off, &old).unwrap();
    let t = Tree { root: b.off, len: 1 };
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = handle(&mut s).unwrap();
    assert_eq!(node_sizes(&s, &t), [(N, NODE)]);
    let mut model: Model = [(b"a field".to_vec(), b"its value".to_vec())].into_iter().collect();
    check(&mut s, &t, &model);
    // Entries added in place, in the same block, until it splits.
    for n in 0..20 {
        let (k, v) = (format!("f{n}").into_bytes(), vec![b'x'; 50]);
        s.tree_set(&mut t, &k, &v).unwrap();
        model.insert(k, v);
    }
    assert_eq!(t.root, b.off);
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    check(&mut s, &t, &model);
}
