//! Large values removed and freed a piece at a time: every step's group within its room, the
//! heap whole after every step (each block free, pending or live, exactly once), the
//! allocator back where it was once all is freed, and crashes at any write of the freeing
//! (and a promotion of the mirror) finishing it with no block freed twice or lost.

use super::*;
use crate::store::layout::{KIND_HASH, KIND_STRING};
use crate::store::list_pack::Fill;
use crate::store::tree::HashTree;
use crate::store::ztree::OrderTree;
use crate::store::VecMem;
use mojim::Range;
use std::collections::BTreeSet;

const MAX_RANGES: usize = 1024;
const SIZE: u64 = 32 << 20;
/// Blocks a step may free beyond its first piece (in the tests: small, so that a value takes
/// many steps).
const ROOM: usize = 40;

#[derive(Clone, Copy, Debug)]
enum Big {
    Hash,
    List,
    Zset,
}

/// Makes key `key` a value of `kind` with `n` elements, some of them long enough for blocks of
/// their own (and, in a sorted set, separators long enough for blocks of their own).
fn make_big<M: Mem>(s: &mut Store<M>, key: &[u8], kind: Big, n: usize) {
    let old = s.find(key).unwrap();
    match kind {
        Big::Hash => {
            let fields: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                .map(|i| (format!("field:{i}").into_bytes(), vec![b'v'; if i % 7 == 0 { 1200 } else { 20 }]))
                .collect();
            let entries: Vec<(&[u8], &[u8])> = fields.iter().map(|(f, v)| (&f[..], &v[..])).collect();
            let t = s.tree_build(&entries).unwrap();
            s.put_encoded(key, KIND_HASH, ENC_TREE, 0, &[&t.encode()], 0, old.as_ref()).unwrap();
        }
        Big::List => {
            let elems: Vec<Vec<u8>> =
                (0..n).map(|i| format!("element:{i}:").repeat(1 + i % 5).into_bytes()).collect();
            let ql = s.ql_new(&elems, Fill(16)).unwrap();
            s.put_encoded(key, KIND_LIST, ENC_QUICKLIST, 0, &[&ql.encode()], 0, old.as_ref()).unwrap();
        }
        Big::Zset => {
            // Equal scores in runs and a long common prefix: separators past 32 bytes.
            let members: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let mut m = format!("{}{i:08}", "p".repeat(40)).into_bytes();
                    if i % 9 == 0 {
                        m.extend(vec![b'x'; 1100]);
                    }
                    m
                })
                .collect();
            let items: Vec<(f64, &[u8])> =
                members.iter().enumerate().map(|(i, m)| ((i / 1000) as f64, &m[..])).collect();
            let z = s.zindex_build(&items).unwrap();
            s.put_encoded(key, KIND_ZSET, ENC_ZSET_INDEX, 0, &[&z.encode()], 0, old.as_ref()).unwrap();
        }
    }
}

/// The blocks of an entry and its whole value (checked as it is checked when live).
fn value_blocks<M: Mem>(s: &Store<M>, f: &Found) -> Vec<(u64, u64)> {
    let mut out = vec![(f.entry, s.class_size(f.head.class))];
    let mut add = |off, size| out.push((off, size));
    if let Some(t) = s.tree_of(f).unwrap() {
        s.tree_blocks(&t, &mut add).unwrap();
    } else if (f.head.kind, f.head.encoding) == (KIND_LIST, ENC_QUICKLIST) {
        s.ql_blocks(&s.list_of(f).unwrap(), &mut add).unwrap();
    } else if let Some(z) = s.zindex_of(f).unwrap() {
        s.zindex_blocks(&z, &mut add).unwrap();
    }
    out
}

/// The blocks of what is left of a tree being freed: every node its counts still reach.
fn tree_rest<M: Mem, T: TreeShape>(s: &Store<M>, node: u64, depth: usize, out: &mut Vec<(u64, u64)>) {
    assert!(depth < MAX_HEIGHT, "a loop in the tree at {node}");
    let mut p = Box::new([0u8; N]);
    T::read(s, node, &mut p).unwrap();
    out.push((node, s.class_size(p[3])));
    if p[1] != INNER {
        let mut b = Vec::new();
        T::leaf_blocks(&p, node, &mut b).unwrap();
        out.extend(b.iter().map(|&(o, c)| (o, s.class_size(c))));
        return;
    }
    for i in 0..count(&p) {
        tree_rest::<M, T>(s, T::child(&p, i), depth + 1, out);
        if let Some((o, c)) = T::entry_block(&p, i) {
            out.push((o, s.class_size(c)));
        }
    }
}

/// The blocks the pending-free list still holds: each entry and what is left of its value.
fn pending_blocks<M: Mem>(s: &Store<M>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut e = s.dy.lazyfree_head;
    let mut n = 0;
    while e != 0 {
        n += 1;
        assert!(n <= s.dy.lazyfree_pending, "the pending list is longer than its count");
        let head = s.read_head(e).unwrap();
        let f = Found { entry: e, head, link: 0, link_is_bucket: false };
        out.push((e, s.class_size(head.class)));
        match (head.kind, head.encoding) {
            (_, ENC_TREE) => tree_rest::<_, HashTree>(s, s.tree_of(&f).unwrap().unwrap().root, 0, &mut out),
            (KIND_LIST, ENC_QUICKLIST) => {
                let ql = s.list_of(&f).unwrap();
                let mut node = ql.head;
                for _ in 0..ql.nodes {
                    let (next, class) = s.ql_node_link(node).unwrap();
                    out.push((node, s.class_size(class)));
                    node = next;
                }
                assert_eq!(node, 0, "the chain is longer than its handle's nodes");
            }
            (KIND_ZSET, ENC_ZSET_INDEX) => {
                let z = s.zindex_of(&f).unwrap().unwrap();
                if z.order.root != 0 {
                    tree_rest::<_, OrderTree>(s, z.order.root, 0, &mut out);
                }
                tree_rest::<_, HashTree>(s, z.members.root, 0, &mut out);
            }
            _ => {}
        }
        e = head.next;
    }
    assert_eq!(n, s.dy.lazyfree_pending, "the pending list's count");
    out
}

/// The blocks on the free lists, sorted; none twice.
fn free_blocks<M: Mem>(s: &Store<M>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for (c, &h) in s.dy.heads.iter().enumerate() {
        let mut b = h;
        while b != 0 {
            out.push((b, s.classes[c]));
            assert!(out.len() < 10_000_000, "a free list loops");
            b = s.read_u64(b).unwrap();
        }
    }
    out.sort_unstable();
    for w in out.windows(2) {
        assert!(w[0].0 != w[1].0, "block {} is on the free lists twice", w[0].0);
    }
    out
}

/// Checks the whole heap: every block below the top is free, pending or live (a key's entry
/// and its value), exactly once, and `used` counts the pending and live ones. Returns the
/// free blocks.
fn audit<M: Mem>(s: &mut Store<M>) -> Vec<(u64, u64)> {
    let free = free_blocks(s);
    let pending = pending_blocks(s);
    let mut live = Vec::new();
    let mut words = vec![0u8; 8 * s.geo.buckets as usize];
    s.mem.read(s.geo.bucket_off, &mut words).unwrap();
    for b in 0..s.geo.buckets {
        if words[8 * b as usize..8 * b as usize + 8] == [0; 8] {
            continue;
        }
        let mut found = Vec::new();
        s.bucket_entries(b, |_, e, h| {
            found.push((e, *h));
            Ok(())
        })
        .unwrap();
        for (e, head) in found {
            let f = Found { entry: e, head, link: 0, link_is_bucket: false };
            live.extend(value_blocks(s, &f));
        }
    }
    let size = |v: &[(u64, u64)]| v.iter().map(|b| b.1).sum::<u64>();
    assert_eq!(s.used_bytes(), size(&pending) + size(&live), "used counts the pending and live blocks");
    let mut all: Vec<(u64, u64)> = free.iter().chain(&pending).chain(&live).copied().collect();
    all.sort_unstable();
    for w in all.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap (one block in two places): {w:?}");
    }
    assert_eq!(size(&all), s.dy.heap_top - s.geo.heap_off, "every block below the top is accounted for");
    free
}

fn group_bytes(g: &[Range]) -> u64 {
    g.iter().map(|r| r.len).sum()
}

/// A step as the tests run it: pieces while the batch has freed at most [`ROOM`] blocks.
fn step<M: Mem>(s: &mut Store<M>) -> Result<u64, StoreError> {
    s.lazyfree_step(|s, n| s.batch_frees() == 0 || s.batch_frees() + n <= ROOM)
}

/// A store with one small key, sealed.
fn store(mem: &VecMem) -> Store<&VecMem> {
    let mut s = Store::open(mem, MAX_RANGES).unwrap();
    s.put(b"other", KIND_STRING, 0, &[b"a small value"], 0, None).unwrap();
    s.seal(MAX_RANGES).unwrap();
    s
}

#[test]
fn a_large_value_removed_is_freed_a_piece_at_a_time_and_every_block_once() {
    for (kind, n) in [(Big::Hash, 6000), (Big::List, 6000), (Big::Zset, 4000)] {
        for replace in [false, true] {
            let mem = VecMem::new(SIZE);
            let mut s = store(&mem);
            let free_before = audit(&mut s);
            let used_before = s.used_bytes();
            make_big(&mut s, b"big", kind, n);
            s.seal(MAX_RANGES).unwrap();
            let f = s.find(b"big").unwrap().unwrap();
            let blocks = value_blocks(&s, &f);
            assert!(blocks.len() > 300, "{kind:?}: {} blocks", blocks.len());
            // Removed (or written over): the key is gone at once, its blocks not yet.
            if replace {
                s.put(b"big", KIND_STRING, 0, &[b"small now"], 0, Some(&f)).unwrap();
            } else {
                s.remove(&f).unwrap();
                assert!(s.find(b"big").unwrap().is_none());
            }
            assert_eq!(s.lazyfree_pending(), 1, "{kind:?}: the value waits to be freed");
            assert_eq!(s.keys(), 1 + u64::from(replace));
            let group = group_bytes(s.seal(MAX_RANGES).unwrap().expect("a group"));
            assert!(group < 64 << 10, "{kind:?}: the removal's group is {group} bytes");
            audit(&mut s);
            let mut steps = 0;
            while s.lazyfree_pending() > 0 {
                step(&mut s).unwrap();
                assert!(s.batch_frees() > 0, "{kind:?}: a step freed nothing");
                let g = s.seal(MAX_RANGES).unwrap().expect("a group");
                assert!(g.len() < 256 && group_bytes(g) < 64 << 10, "{kind:?}: a step's group: {g:?}");
                steps += 1;
                audit(&mut s);
                assert!(steps < 10_000, "{kind:?}: the freeing does not end");
            }
            assert!(steps > 5, "{kind:?}: freed in {steps} steps");
            // Every block of the value is free again, once, and nothing else changed.
            let free_after: BTreeSet<(u64, u64)> = audit(&mut s).into_iter().collect();
            if replace {
                assert!(
                    blocks.iter().all(|b| free_after.contains(b)),
                    "{kind:?}: a block of the value is not free"
                );
            } else {
                assert_eq!(s.used_bytes(), used_before, "{kind:?}: used is back where it was");
                let expect: BTreeSet<(u64, u64)> = free_before.iter().chain(&blocks).copied().collect();
                assert!(
                    free_after == expect,
                    "{kind:?}: the free lists hold other blocks than the value's and those before"
                );
            }
        }
    }
}

#[test]
fn a_small_value_is_freed_by_the_command_that_removes_it() {
    let mem = VecMem::new(SIZE);
    let mut s = store(&mem);
    let free_before = audit(&mut s);
    make_big(&mut s, b"small", Big::Zset, LAZYFREE_THRESHOLD as usize);
    s.seal(MAX_RANGES).unwrap();
    let f = s.find(b"small").unwrap().unwrap();
    let blocks = value_blocks(&s, &f);
    s.remove(&f).unwrap();
    assert_eq!(s.lazyfree_pending(), 0);
    s.seal(MAX_RANGES).unwrap();
    let free: BTreeSet<_> = audit(&mut s).into_iter().collect();
    let expect: BTreeSet<_> = free_before.iter().chain(&blocks).copied().collect();
    assert_eq!(free, expect);
}

#[test]
fn several_pending_values_are_freed_in_turn_and_a_flush_drops_them_with_the_heap() {
    let mem = VecMem::new(SIZE);
    let mut s = store(&mem);
    for (k, kind) in [(&b"a"[..], Big::Hash), (b"b", Big::List), (b"c", Big::Zset)] {
        make_big(&mut s, k, kind, 2000);
        s.seal(MAX_RANGES).unwrap();
        let f = s.find(k).unwrap().unwrap();
        s.remove(&f).unwrap();
        s.seal(MAX_RANGES).unwrap();
    }
    assert_eq!(s.lazyfree_pending(), 3);
    let mut done = 0;
    while done < 2 {
        done += step(&mut s).unwrap();
        s.seal(MAX_RANGES).unwrap();
        audit(&mut s);
    }
    assert_eq!(s.lazyfree_pending(), 1);
    s.flush().unwrap();
    assert_eq!(s.lazyfree_pending(), 0);
    s.seal(MAX_RANGES).unwrap();
    assert_eq!(step(&mut s).unwrap(), 0);
    assert!(!s.dirty());
    audit(&mut s);
    // Reopened: the superblock says so too.
    drop(s);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    assert_eq!(s.lazyfree_pending(), 0);
    audit(&mut s);
}

fn send(local: &VecMem, mirror: &VecMem, group: &[Range]) {
    let img = local.image();
    for r in group {
        mirror.write(r.offset, &img[r.offset as usize..(r.offset + r.len) as usize]).unwrap();
    }
}

/// Frees every pending value, a step (a sealed group, sent to `mirror` if given) at a time;
/// stops at the first error (a simulated crash), or when the crash came right after a seal.
fn free_all(mem: &VecMem, mirror: Option<&VecMem>) -> Result<(), StoreError> {
    let mut s = Store::open(mem, MAX_RANGES)?;
    while s.lazyfree_pending() > 0 {
        step(&mut s)?;
        let g = s.seal(MAX_RANGES)?.expect("a step stores").to_vec();
        if mem.budget() == 0 {
            return Err(StoreError::Mem("a crash between the local commit and the send".into()));
        }
        if let Some(m) = mirror {
            send(mem, m, &g);
        }
    }
    Ok(())
}

#[test]
fn a_crash_at_any_write_of_the_freeing_or_a_promotion_finishes_it_with_each_block_freed_once() {
    // A sorted set (both trees, long members, long separators) and a list, removed and sealed.
    let base = VecMem::new(8 << 20);
    let (expect, used) = {
        let mut s = store(&base);
        let free_before = audit(&mut s);
        let used = s.used_bytes();
        let mut expect: BTreeSet<(u64, u64)> = free_before.into_iter().collect();
        for (k, kind) in [(&b"z"[..], Big::Zset), (b"l", Big::List)] {
            make_big(&mut s, k, kind, 1500);
            s.seal(MAX_RANGES).unwrap();
            let f = s.find(k).unwrap().unwrap();
            expect.extend(value_blocks(&s, &f));
            s.remove(&f).unwrap();
            s.seal(MAX_RANGES).unwrap();
        }
        (expect, used)
    };
    let image = base.image();
    let finished = |mem: &VecMem, what: &str| {
        free_all(mem, None).unwrap_or_else(|e| panic!("{what}: finishing fails: {e}"));
        let mut s = Store::open(mem, MAX_RANGES).unwrap();
        assert_eq!(s.lazyfree_pending(), 0, "{what}");
        assert_eq!(s.used_bytes(), used, "{what}: used");
        let free: BTreeSet<_> = audit(&mut s).into_iter().collect();
        assert!(free == expect, "{what}: the free lists differ from every block freed once");
    };
    let clean = VecMem::from_bytes(image.clone());
    free_all(&clean, None).unwrap();
    let total = clean.writes();
    assert!(total > 100, "{total} writes");
    let every = (total / 150).max(1);
    let mut crash = 1;
    while crash < total {
        let local = VecMem::from_bytes(image.clone());
        let mirror = VecMem::from_bytes(image.clone());
        local.crash_after(crash);
        let r = free_all(&local, Some(&mirror));
        assert!(r.is_err(), "crash at write {crash} of {total}");
        // Killed and restarted: the repair undoes the step cut short, the rest goes on.
        let repaired = VecMem::from_bytes(local.image());
        {
            let mut s = Store::open(&repaired, MAX_RANGES).unwrap();
            audit(&mut s);
        }
        finished(&repaired, &format!("crash at write {crash}, restarted"));
        // Or the mirror promoted: it holds the last step sent, and goes on from there.
        finished(&mirror, &format!("crash at write {crash}, mirror promoted"));
        crash += every;
    }
}

#[test]
fn format_md_says_what_the_code_does() {
    let doc = include_str!("../../../../../docs/FORMAT.md");
    let sec = &doc[doc.find("### 11.11 Freeing in the background").expect("FORMAT.md has section 11.11")..];
    let flat = sec.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("more than {LAZYFREE_THRESHOLD} elements")), "the threshold");
    // The room a step takes (`Store::lazyfree_room`).
    assert!(flat.contains("within three quarters of `[limits] max_ranges`"));
    let mem = VecMem::new(SIZE);
    let s = store(&mem);
    assert!(s.lazyfree_room(100, 1 << 30, 1024));
    assert!(!s.dirty());
}
