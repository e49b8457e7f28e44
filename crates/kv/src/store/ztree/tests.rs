//! The order tree against a model (a sorted set of keys), with savepoints rolled back, batches
//! sealed and the store reopened, crashes at every write of a run, and the invariants (and
//! every block's accounting) checked throughout.

use super::*;
use crate::store::layout::KIND_STRING;
use crate::store::tree::NODE;
use crate::store::VecMem;
use std::collections::BTreeSet;

/// A key as the model orders it (no NaN, no -0 in these tests).
#[derive(Clone, Debug, PartialEq)]
struct K(f64, Vec<u8>);

impl Eq for K {}

impl PartialOrd for K {
    fn partial_cmp(&self, o: &K) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for K {
    fn cmp(&self, o: &K) -> Ordering {
        key_cmp(self.0, &self.1, o.0, &o.1)
    }
}

type Model = BTreeSet<K>;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const MAX_RANGES: usize = 1024;

fn handle<M: Mem>(s: &mut Store<M>) -> Option<Tree> {
    let f = s.find(b"t").unwrap()?;
    let mut v = Vec::new();
    s.value_into(&f, &mut v).unwrap();
    Tree::decode(&v)
}

fn keep<M: Mem>(s: &mut Store<M>, t: &Tree) -> Result<(), StoreError> {
    let old = s.find(b"t")?;
    s.put(b"t", KIND_STRING, 0, &[&t.encode()], 0, old.as_ref())?;
    Ok(())
}

fn contents<M: Mem>(s: &Store<M>, t: &Tree) -> Vec<K> {
    let mut out = Vec::new();
    let Some(mut c) = s.zt_at(t, 0).unwrap() else { return out };
    let mut m = Vec::new();
    loop {
        assert_eq!(c.rank(), out.len() as u64);
        let score = s.zt_read(&c, &mut m).unwrap();
        out.push(K(score, m.clone()));
        if !s.zt_next(&mut c).unwrap() {
            break;
        }
    }
    out
}

/// The tree's blocks and "t"'s entry are all the used bytes, none overlap, the tree holds the
/// model, ranks and bounds agree with it, and cursors walk both ways.
fn check<M: Mem>(s: &mut Store<M>, t: &Tree, model: &Model, r: &mut Rng) {
    let mut blocks = Vec::new();
    s.zt_blocks(t, |off, size| blocks.push((off, size))).unwrap_or_else(|e| panic!("{e}"));
    let f = s.find(b"t").unwrap().expect("the handle");
    blocks.push((f.entry, s.class_size(f.head.class)));
    assert_eq!(s.used_bytes(), blocks.iter().map(|b| b.1).sum::<u64>(), "used bytes");
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    let got = contents(s, t);
    let want: Vec<K> = model.iter().cloned().collect();
    assert_eq!(got.len(), want.len(), "entries");
    assert!(got == want, "the tree's entries differ from the model's");
    for _ in 0..20.min(want.len()) {
        let i = r.below(want.len() as u64) as usize;
        assert_eq!(s.zt_rank(t, want[i].0, &want[i].1).unwrap(), Some(i as u64));
        // Backwards from there, a few steps.
        let mut c = s.zt_at(t, i as u64).unwrap().unwrap();
        let mut m = Vec::new();
        for j in (i.saturating_sub(5)..=i).rev() {
            assert_eq!(c.rank(), j as u64);
            let sc = s.zt_read(&c, &mut m).unwrap();
            assert_eq!(K(sc, m.clone()), want[j]);
            let more = s.zt_prev(&mut c).unwrap();
            assert_eq!(more, j > 0);
            if !more {
                break;
            }
        }
    }
    assert_eq!(s.zt_rank(t, 0.5, b"absent").unwrap(), None);
    for _ in 0..10 {
        let b = bound(r);
        let n = want.iter().take_while(|k| b.below(k.0, &k.1)).count();
        assert_eq!(s.zt_count_below(t, &b).unwrap(), n as u64, "{b:?}");
    }
}

fn score(r: &mut Rng) -> f64 {
    match r.below(12) {
        0 => f64::INFINITY,
        1 => f64::NEG_INFINITY,
        2..=6 => 1.0,
        _ => (r.below(40) as f64 - 20.0) / 4.0,
    }
}

fn member(r: &mut Rng, spread: u64) -> Vec<u8> {
    let n = r.below(spread);
    match r.below(20) {
        // Now and then a member too long to be inline, or long members sharing a long prefix
        // (separators of their own blocks).
        0 => format!("long-{n}-{}", "m".repeat(1100)).into_bytes(),
        1..=3 => format!("{}{n}", "p".repeat(40)).into_bytes(),
        _ => format!("m{n}").into_bytes(),
    }
}

/// A bound by score or by key (lexicographic bounds are monotone only over equal scores: see
/// `equal_scores_order_by_member_...`).
fn bound(r: &mut Rng) -> ZBound<'static> {
    let or_equal = r.below(2) == 0;
    match r.below(3) {
        0 => ZBound::Score { score: score(r), or_equal },
        _ => {
            let sc = score(r);
            ZBound::Key { score: sc, member: Box::leak(member(r, 300).into_boxed_slice()) }
        }
    }
}

/// One command: several inserts and removes, the handle kept.
fn command<M: Mem>(
    s: &mut Store<M>,
    t: &mut Tree,
    model: &mut Model,
    r: &mut Rng,
    spread: u64,
) -> Result<(), StoreError> {
    for _ in 0..1 + r.below(20) {
        if r.below(3) == 0 && !model.is_empty() {
            // Remove a present key, or try an absent one.
            let k = if r.below(4) == 0 {
                K(score(r), member(r, spread))
            } else {
                model.iter().nth(r.below(model.len() as u64) as usize).unwrap().clone()
            };
            let had = s.zt_remove(t, k.0, &k.1)?;
            assert_eq!(had, model.remove(&k));
        } else {
            let k = K(score(r), member(r, spread));
            if !model.contains(&k) {
                s.zt_insert(t, k.0, &k.1)?;
                model.insert(k);
            }
        }
    }
    keep(s, t)
}

fn run(seed: u64, commands: usize, spread: u64, mem: &VecMem) -> Result<(Tree, Model), StoreError> {
    let mut r = Rng(seed);
    let mut s = Store::open(mem, MAX_RANGES)?;
    let mut t = s.zt_new()?;
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
            check(&mut s, &t, &model, &mut r);
        }
    }
    s.seal(MAX_RANGES)?;
    check(&mut s, &t, &model, &mut r);
    Ok((t, model))
}

#[test]
fn inserts_removes_and_rollbacks_keep_the_tree_true() {
    for seed in 0..4 {
        let mem = VecMem::new(32 << 20);
        let (t, model) = run(seed, 1000, if seed % 2 == 0 { 3000 } else { 300 }, &mem).unwrap();
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(handle(&mut s), Some(t));
        check(&mut s, &t, &model, &mut Rng(seed));
        // Emptied key by key: one empty leaf left.
        let mut t = t;
        for k in &model {
            assert!(s.zt_remove(&mut t, k.0, &k.1).unwrap());
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                keep(&mut s, &t).unwrap();
                s.seal(MAX_RANGES).unwrap();
            }
        }
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &Model::new(), &mut Rng(seed));
        let mut nodes = 0;
        s.zt_blocks(&t, |_, _| nodes += 1).unwrap();
        assert_eq!(nodes, 1, "seed {seed}: an empty tree is one leaf");
        s.zt_free(&t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        let f = s.find(b"t").unwrap().unwrap();
        assert_eq!(s.used_bytes(), s.class_size(f.head.class));
    }
}

#[test]
fn equal_scores_order_by_member_and_long_prefixes_get_separator_blocks() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = s.zt_new().unwrap();
    let mut model = Model::new();
    let prefix = "x".repeat(300);
    for i in 0..3000u32 {
        let m = format!("{prefix}{:08}", i.wrapping_mul(2_654_435_761) % 100_000).into_bytes();
        let k = K(7.0, m);
        if model.insert(k.clone()) {
            s.zt_insert(&mut t, k.0, &k.1).unwrap();
        }
        if !s.batch_has_room(32 << 20, MAX_RANGES) {
            keep(&mut s, &t).unwrap();
            s.seal(MAX_RANGES).unwrap();
        }
    }
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let mut r = Rng(3);
    check(&mut s, &t, &model, &mut r);
    let mut root = [0u8; N];
    s.zread(t.root, &mut root).unwrap();
    assert!(level(&root) >= 1, "inner nodes");
    assert!(inner::get(&root, 1).sep.ext().is_some(), "a separator of 301 bytes has a block of its own");
    // Lexicographic bounds over equal scores.
    let at = format!("{prefix}00050000").into_bytes();
    let n = model.iter().filter(|k| k.1 < at).count() as u64;
    let b = ZBound::Lex { member: Lex::At(&at), or_equal: false };
    assert_eq!(s.zt_count_below(&t, &b).unwrap(), n);
    assert_eq!(s.zt_count_below(&t, &ZBound::Lex { member: Lex::Max, or_equal: false }).unwrap(), t.len);
    assert_eq!(s.zt_count_below(&t, &ZBound::Lex { member: Lex::Min, or_equal: true }).unwrap(), 0);
}

#[test]
fn minus_zero_equals_zero() {
    let mem = VecMem::new(4 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let mut t = s.zt_new().unwrap();
    s.zt_insert(&mut t, -0.0, b"b").unwrap();
    s.zt_insert(&mut t, 0.0, b"a").unwrap();
    s.zt_insert(&mut t, -0.0, b"c").unwrap();
    let got: Vec<Vec<u8>> = contents(&s, &t).into_iter().map(|k| k.1).collect();
    assert_eq!(got, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(s.zt_rank(&t, 0.0, b"b").unwrap(), Some(1));
    assert!(s.zt_remove(&mut t, 0.0, b"c").unwrap());
    assert_eq!(s.zt_count_below(&t, &ZBound::Score { score: 0.0, or_equal: false }).unwrap(), 0);
    assert_eq!(s.zt_count_below(&t, &ZBound::Score { score: -0.0, or_equal: true }).unwrap(), 2);
}

#[test]
fn a_built_tree_is_the_tree_of_its_entries() {
    for n in [0usize, 1, 5, 400, 30_000] {
        let mem = VecMem::new(64 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        let mut r = Rng(n as u64);
        let mut model = Model::new();
        while model.len() < n {
            model.insert(K(score(&mut r), member(&mut r, 1 << 40)));
        }
        let _ = s.savepoint();
        let t = s.zt_build(model.iter().map(|k| (k.0, k.1.as_slice()))).unwrap();
        assert_eq!(t.len, n as u64);
        let (undo, _) = s.undo_use();
        assert!(undo < 64 << 10, "{undo} bytes of undo for a tree no sealed state uses");
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &model, &mut r);
        // And it changes as any other.
        let mut t = t;
        for _ in 0..200 {
            command(&mut s, &mut t, &mut model, &mut r, 1 << 40).unwrap();
            if !s.batch_has_room(32 << 20, MAX_RANGES) {
                s.seal(MAX_RANGES).unwrap();
            }
        }
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &model, &mut r);
    }
    let mem = VecMem::new(4 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let out_of_order = [(2.0, &b"a"[..]), (1.0, &b"b"[..])];
    assert!(s.zt_build(out_of_order.into_iter()).is_err());
}

#[test]
fn members_added_in_order_fill_their_leaves() {
    // Ascending keys go past the last leaf's end, descending ones before the first's start:
    // either way every leaf but the one being filled is made as full as it is.
    for descending in [false, true] {
        let mem = VecMem::new(16 << 20);
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        let mut r = Rng(3);
        let mut t = s.zt_new().unwrap();
        let mut model = Model::new();
        let n = 3000u32;
        for i in 0..n {
            let k = if descending { n - i } else { i };
            let m = format!("member {k:04} {}", "m".repeat(80)).into_bytes();
            s.zt_insert(&mut t, f64::from(k), &m).unwrap();
            model.insert(K(f64::from(k), m));
        }
        keep(&mut s, &t).unwrap();
        s.seal(MAX_RANGES).unwrap();
        check(&mut s, &t, &model, &mut r);
        let mut leaves = Vec::new();
        s.zt_blocks(&t, |off, size| leaves.push((off, size))).unwrap();
        let mut fill = Vec::new();
        for (off, size) in leaves {
            let mut p = [0u8; N];
            s.zread(off, &mut p).unwrap();
            if p[1] == LEAF {
                fill.push((leaf::live(&p) + 2 * count(&p) + HEAD) as f64 / size as f64);
            }
        }
        let edge = if descending { fill.remove(0) } else { fill.pop().unwrap() };
        let least = fill.iter().copied().fold(1.0, f64::min);
        assert!(least > 0.9, "descending {descending}: a leaf {least:.2} full (the edge one {edge:.2})");
        // And the entries cost little more than their bytes: 10 of score and length, a slot.
        let entry = s.find(b"t").unwrap().unwrap().head.class;
        let per = (s.used_bytes() - s.class_size(entry)) as f64 / f64::from(n);
        assert!(per < (10 + 2 + 93) as f64 * 1.1, "descending {descending}: {per:.1} bytes an entry");
    }
}

#[test]
fn a_change_to_a_large_tree_touches_a_few_nodes() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let items: Vec<(f64, Vec<u8>)> =
        (0..100_000).map(|i| (f64::from(i / 3), format!("member:{i:06}").into_bytes())).collect();
    let t = s.zt_build(items.iter().map(|(s, m)| (*s, m.as_slice()))).unwrap();
    keep(&mut s, &t).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let mut t = t;
    let before = s.batch_bytes();
    s.zt_insert(&mut t, 5.5, b"new").unwrap();
    assert!(s.zt_remove(&mut t, 7.0, b"member:000021").unwrap());
    assert!(s.batch_bytes() - before < 2 * NODE, "{} bytes", s.batch_bytes() - before);
    let (undo, _) = s.undo_use();
    assert!(undo < 4096, "{undo} bytes of undo");
    assert_eq!(s.zt_rank(&t, 5.5, b"new").unwrap(), Some(18));
}

#[test]
fn a_crash_at_any_write_leaves_the_last_sealed_tree() {
    let mem = VecMem::new(8 << 20);
    run(7, 100, 400, &mem).unwrap();
    let total = mem.writes();
    let step = (total / 150).max(1);
    let mut at = 1;
    while at < total {
        let mem = VecMem::new(8 << 20);
        mem.crash_after(at);
        assert!(run(7, 100, 400, &mem).is_err(), "the crash at write {at} happened");
        let img = VecMem::from_bytes(mem.image());
        let mut s = Store::open(&img, MAX_RANGES).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
        if let Some(t) = handle(&mut s) {
            s.zt_blocks(&t, |_, _| ()).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
            assert_eq!(contents(&s, &t).len() as u64, t.len, "crash at {at}");
        }
        at += step;
    }
}

#[test]
fn format_md_says_what_the_code_does() {
    let doc = include_str!("../../../../../docs/FORMAT.md");
    let sec = &doc[doc.find("### 11.9 Sorted sets").expect("FORMAT.md has section 11.9")..];
    let sec = &sec[..sec.find("\n### ").unwrap_or(sec.len())];
    // The prose, its lines joined.
    let text = sec.replace('\n', " ");
    let row = |field: &str| {
        sec.lines()
            .find(|l| l.contains(&format!("| `{field}` |")))
            .unwrap_or_else(|| panic!("no row {field}"))
    };
    let cell =
        |field: &str, i: usize| -> usize { row(field).split('|').nth(i).unwrap().trim().parse().unwrap() };
    let off = |field: &str| cell(field, 1);
    // The node's head.
    assert!(row("ztag").contains(&format!("ASCII `{}`", TAG as char)));
    assert!(row("zkind").contains(&format!("{LEAF}: leaf; {INNER}: inner")));
    assert_eq!((off("zkind"), off("zlevel"), off("zclass"), off("zcount")), (1, 2, 3, 8));
    let mut p = [0u8; N];
    leaf::init(&mut p, N);
    leaf::insert(&mut p, 0, &[1; 12]);
    assert_eq!((count(&p), leaf::data_lo(&p), leaf::slot(&p, 0)), (1, N - 12, N - 12));
    assert_eq!(u16_at(&p, 8), 1, "zcount at 8");
    assert_eq!(u16_at(&p, 10), N - 12, "data_lo at 10");
    assert_eq!(u16_at(&p, HEAD), N - 12, "the slots from 16");
    assert!(text.contains(&format!("longer than {INLINE_MAX} bytes gets a block of its own")));
    assert!(text.contains(&format!("length (u32): {EXT_ENTRY} bytes")));
    assert!(text.contains(&format!("heap blocks of at most {NODE} bytes")));
    assert!(row("zsize").contains(&format!("(0: {NODE})")));
    assert_eq!(off("zsize"), 4);
    leaf::init(&mut p, 144);
    assert_eq!((u16_at(&p, 4), u16_at(&p, 10)), (144, 144), "zsize at 4, data_lo at the end");
    assert!(text.contains("(at most (`zsize` − 16) / 64)"));
    // An inner entry.
    assert!(text.contains(&format!("`zcount` entries of {IENT} bytes")));
    assert_eq!((off("sep_score"), off("sep_len"), off("sep_class"), off("sep_body")), (0, 8, 12, 16));
    assert_eq!((off("zchild"), off("zn")), (SEP, SEP + 8));
    assert_eq!(cell("sep_body", 2), 32);
    assert!(row("sep_body").contains(&format!(
        "≤ {SEP_INLINE}; else its first {SEP_PREFIX} bytes, then at {}",
        16 + SEP_PREFIX
    )));
    let e = Ient { sep: Sep([7; SEP]), child: 0x0102, n: 0x0304 };
    let mut q = [0u8; N];
    inner::init(&mut q, N, 1);
    inner::splice(&mut q, 0, 0, &[e]);
    assert_eq!(u64_at(&q, HEAD + off("zchild")), 0x0102);
    assert_eq!(u64_at(&q, HEAD + off("zn")), 0x0304);
    // The handle.
    let z =
        crate::store::ZIndex { order: Tree { root: 1, len: 2 }, members: Tree { root: 3, len: 4 } }.encode();
    for (field, v) in [("order_root", 1u64), ("order_len", 2), ("members_root", 3), ("members_len", 4)] {
        assert_eq!(u64_at(&z, off(field)), v, "{field}");
    }
    // A small set's value.
    let blob = crate::store::zset_blob::encode([(2.5, &b"ab"[..])].into_iter());
    assert!(
        text.contains("`count` (u32), then per member, in order, `score` (f64; never -0, which is written 0")
    );
    assert!(text.contains("`mlen` (u32), the member"));
    assert_eq!(blob, [&1u32.to_le_bytes()[..], &2.5f64.to_le_bytes(), &2u32.to_le_bytes(), b"ab"].concat());
    let zero = crate::store::zset_blob::encode([(-0.0, &b""[..])].into_iter());
    assert_eq!(&zero[4..12], &0.0f64.to_le_bytes(), "-0 is written 0");
    assert!(text.contains(&format!("`encoding` {}", crate::store::ENC_ZSET_INDEX)));
}
