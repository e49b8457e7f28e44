//! The chain against a model (a deque), under every fill, with savepoints rolled back, batches
//! sealed and the store reopened, crashes at writes (the list of a sealed batch survives
//! whole), and the heap's accounting checked.

use super::*;
use crate::store::layout::KIND_STRING;
use crate::store::VecMem;
use std::collections::VecDeque;

type Model = VecDeque<Vec<u8>>;

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
        self.next() % n.max(1)
    }
}

const MAX_RANGES: usize = 1024;

/// The handle is kept in the value of key "l".
fn handle<M: Mem>(s: &mut Store<M>) -> Option<QuickList> {
    let f = s.find(b"l").unwrap()?;
    let mut v = Vec::new();
    s.value_into(&f, &mut v).unwrap();
    QuickList::decode(&v)
}

fn keep<M: Mem>(s: &mut Store<M>, ql: &QuickList) -> Result<(), StoreError> {
    let old = s.find(b"l")?;
    s.put(b"l", KIND_STRING, 0, &[&ql.encode()], 0, old.as_ref())?;
    Ok(())
}

fn contents<M: Mem>(s: &Store<M>, ql: &QuickList) -> Model {
    let mut m = Model::new();
    if ql.len > 0 {
        s.ql_each(ql, 0, false, |e| {
            m.push_back(e.to_vec());
            Ok(true)
        })
        .unwrap();
    }
    m
}

/// The list holds the model, read forwards, backwards and by index; its nodes and the entry
/// of "l" are all the heap's used bytes, and none overlap.
fn check<M: Mem>(s: &mut Store<M>, ql: &QuickList, model: &Model, r: &mut Rng) {
    let mut blocks = Vec::new();
    s.ql_blocks(ql, |off, size| blocks.push((off, size))).unwrap_or_else(|e| panic!("{e}"));
    let f = s.find(b"l").unwrap().expect("the handle");
    blocks.push((f.entry, s.class_size(f.head.class)));
    assert_eq!(s.used_bytes(), blocks.iter().map(|b| b.1).sum::<u64>(), "used bytes");
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    assert_eq!(contents(s, ql), *model);
    if ql.len > 0 {
        let mut back = Vec::new();
        s.ql_each(ql, ql.len - 1, true, |e| {
            back.push(e.to_vec());
            Ok(true)
        })
        .unwrap();
        back.reverse();
        assert_eq!(back, model.iter().cloned().collect::<Vec<_>>());
        for _ in 0..20 {
            let i = r.below(ql.len);
            let mut v = Vec::new();
            s.ql_get(ql, i, &mut v).unwrap();
            assert_eq!(v, model[i as usize], "element {i}");
        }
    }
}

fn element(r: &mut Rng) -> Vec<u8> {
    let len = match r.below(12) {
        0 => 300 + r.below(3000),
        1 => 0,
        2 => 9000 + r.below(4000),
        _ => r.below(40),
    } as usize;
    let b = r.below(6) as u8 + b'a';
    vec![b; len]
}

/// One command: a few changes to the list, its handle kept.
fn command<M: Mem>(
    s: &mut Store<M>,
    ql: &mut QuickList,
    model: &mut Model,
    r: &mut Rng,
    fill: Fill,
) -> Result<(), StoreError> {
    for _ in 0..1 + r.below(6) {
        let len = model.len() as u64;
        let op = r.below(10);
        match op {
            0..=2 => {
                let e = element(r);
                let front = r.below(2) == 0;
                s.ql_push(ql, front, &e, fill)?;
                if front {
                    model.push_front(e)
                } else {
                    model.push_back(e)
                }
            }
            3 => {
                let front = r.below(2) == 0;
                let mut out = vec![1, 2, 3];
                let had = s.ql_pop(ql, front, &mut out)?;
                let want = if front { model.pop_front() } else { model.pop_back() };
                assert_eq!(had, want.is_some());
                assert_eq!(out, want.unwrap_or_default());
            }
            4 if len > 0 => {
                let (i, e) = (r.below(len), element(r));
                s.ql_set(ql, i, &e, fill)?;
                model[i as usize] = e;
            }
            5 => {
                let (i, e) = (r.below(len + 1), element(r));
                s.ql_insert(ql, i, &e, fill)?;
                model.insert(i as usize, e);
            }
            6 if len > 0 => {
                let start = r.below(len);
                let n = 1 + r.below((len - start).min(30));
                s.ql_del_range(ql, start, n, fill)?;
                model.drain(start as usize..(start + n) as usize);
            }
            7 if len > 0 => {
                let e = model[r.below(len) as usize].clone();
                let (max, tail) = (r.below(3), r.below(2) == 0);
                let n = s.ql_remove(ql, &e, max, tail, fill)?;
                let mut gone = 0;
                let idx: Vec<usize> =
                    if tail { (0..model.len()).rev().collect() } else { (0..model.len()).collect() };
                let mut drop = vec![false; model.len()];
                for j in idx {
                    if (max == 0 || gone < max) && model[j] == e {
                        drop[j] = true;
                        gone += 1;
                    }
                }
                assert_eq!(n, gone);
                let mut k = 0;
                model.retain(|_| {
                    k += 1;
                    !drop[k - 1]
                });
            }
            _ => {
                // Many pushes at one end, as a queue's producer makes them.
                let front = r.below(2) == 0;
                for _ in 0..r.below(40) {
                    let e = vec![b'q'; r.below(20) as usize];
                    s.ql_push(ql, front, &e, fill)?;
                    if front {
                        model.push_front(e)
                    } else {
                        model.push_back(e)
                    }
                }
            }
        }
    }
    assert_eq!(ql.len, model.len() as u64);
    keep(s, ql)
}

/// Runs `commands` commands from `seed`; `sealed` gets the list as each batch is about to be
/// sealed.
fn run(
    seed: u64,
    commands: usize,
    fill: Fill,
    mem: &VecMem,
    sealed: &mut Vec<Model>,
) -> Result<(QuickList, Model), StoreError> {
    let mut r = Rng(seed);
    let mut s = Store::open(mem, MAX_RANGES)?;
    s.set_hash_key(1, 2);
    let mut ql = QuickList::default();
    keep(&mut s, &ql)?;
    let mut model = Model::new();
    sealed.push(model.clone());
    s.seal(MAX_RANGES)?;
    for n in 0..commands {
        let sp = s.savepoint();
        let (q0, m0) = (ql, model.clone());
        command(&mut s, &mut ql, &mut model, &mut r, fill)?;
        if r.below(8) == 0 {
            s.rollback_to(&sp)?;
            (ql, model) = (q0, m0);
        }
        if !s.batch_has_room(32 << 20, MAX_RANGES) || r.below(4) == 0 {
            sealed.push(model.clone());
            s.seal(MAX_RANGES)?;
        }
        if n % 40 == 0 {
            check(&mut s, &ql, &model, &mut r);
        }
    }
    sealed.push(model.clone());
    s.seal(MAX_RANGES)?;
    check(&mut s, &ql, &model, &mut r);
    Ok((ql, model))
}

#[test]
fn changes_and_rollbacks_keep_the_chain_true_under_every_fill() {
    for (seed, fill) in [(1, -2), (2, -1), (3, 4), (4, 1), (5, 0), (6, -5), (7, 128)] {
        let mem = VecMem::new(32 << 20);
        let (ql, model) =
            run(seed, 600, Fill(fill), &mem, &mut Vec::new()).unwrap_or_else(|e| panic!("fill {fill}: {e}"));
        let mut s = Store::open(&mem, MAX_RANGES).unwrap();
        assert_eq!(handle(&mut s), Some(ql), "fill {fill}: reopened");
        check(&mut s, &ql, &model, &mut Rng(seed));
        // Freed whole: only the handle's entry is used.
        s.ql_free(&ql).unwrap();
        keep(&mut s, &QuickList::default()).unwrap();
        s.seal(MAX_RANGES).unwrap();
        let f = s.find(b"l").unwrap().unwrap();
        assert_eq!(s.used_bytes(), s.class_size(f.head.class), "fill {fill}");
    }
}

#[test]
fn pushes_and_pops_at_the_ends_cost_the_element_not_the_node() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let fill = Fill(-2);
    let mut ql = s.ql_new(&[b"first".to_vec()], fill).unwrap();
    for i in 0..50_000u32 {
        let e = format!("element {i}");
        s.ql_push(&mut ql, i % 2 == 0, e.as_bytes(), fill).unwrap();
        if !s.batch_has_room(32 << 20, MAX_RANGES) {
            keep(&mut s, &ql).unwrap();
            s.seal(MAX_RANGES).unwrap();
        }
    }
    keep(&mut s, &ql).unwrap();
    s.seal(MAX_RANGES).unwrap();
    assert!(ql.nodes > 50, "{} nodes", ql.nodes);
    let _ = s.savepoint();
    let before = s.batch_bytes();
    for front in [true, false] {
        s.ql_push(&mut ql, front, b"a new element", fill).unwrap();
        let mut out = Vec::new();
        s.ql_pop(&mut ql, !front, &mut out).unwrap();
    }
    let (undo, _) = s.undo_use();
    // Four changes: each an element and a word or two of a header (a new node now and then).
    assert!(s.batch_bytes() - before < 600, "{} bytes", s.batch_bytes() - before);
    assert!(undo < 2048, "{undo} bytes of undo");
    // The middle element is found, and set in place.
    let mid = ql.len / 2;
    let mut v = Vec::new();
    s.ql_get(&ql, mid, &mut v).unwrap();
    let before = s.batch_bytes();
    let same: Vec<u8> = v.iter().map(|b| b ^ 1).collect();
    s.ql_set(&mut ql, mid, &same, fill).unwrap();
    assert!(s.batch_bytes() - before <= 64, "LSET of the same size writes the element");
}

#[test]
fn a_list_made_whole_has_nodes_of_its_runs_and_a_push_makes_room() {
    let mem = VecMem::new(16 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let elems: Vec<Vec<u8>> = (0..100).map(|i| format!("{i:010}{}", "e".repeat(90)).into_bytes()).collect();
    let mut ql = s.ql_new(&elems, Fill(-2)).unwrap();
    // 100 elements of 101 bytes: two runs of about 5 KB (8 KB at most), each in the smallest
    // class that holds it and the node's head.
    let mut sizes = Vec::new();
    s.ql_blocks(&ql, |_, size| sizes.push(size)).unwrap();
    let run = 50 * 101 + u64::from(HEAD as u32);
    let fit = crate::store::layout::class_sizes().into_iter().find(|&c| c >= run).unwrap();
    assert_eq!(sizes, [fit, fit]);
    // A push at the tail fits the block's slack while there is some; then the node is made
    // again with room for twice its run, within the limit (8 KB of run).
    let mut pushed = 0;
    loop {
        s.ql_push(&mut ql, false, &elems[0], Fill(-2)).unwrap();
        pushed += 1;
        let mut now = Vec::new();
        s.ql_blocks(&ql, |_, size| now.push(size)).unwrap();
        if now != sizes {
            assert_eq!(now[0], fit, "the head is untouched");
            assert!(now[1] >= 8192 + HEAD, "{now:?}: the tail made again with room");
            break;
        }
        assert!(pushed <= 5, "{pushed} pushes into the slack of a {fit}-byte block");
    }
    keep(&mut s, &ql).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let mut want: Vec<Vec<u8>> = elems.clone();
    want.extend(std::iter::repeat_n(elems[0].clone(), pushed));
    check(&mut s, &ql, &want.into_iter().collect(), &mut Rng(1));
}

#[test]
fn a_list_made_in_one_command_needs_no_undo() {
    let mem = VecMem::new(64 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let _ = s.savepoint();
    let elems: Vec<Vec<u8>> = (0..20_000).map(|i| format!("element:{i}").into_bytes()).collect();
    let mut ql = s.ql_new(&elems[..1], Fill(-2)).unwrap();
    for e in &elems[1..] {
        s.ql_push(&mut ql, false, e, Fill(-2)).unwrap();
    }
    let (undo, _) = s.undo_use();
    assert!(undo < 16 << 10, "{undo} bytes of undo for nodes no sealed state uses");
    keep(&mut s, &ql).unwrap();
    s.seal(MAX_RANGES).unwrap();
    check(&mut s, &ql, &elems.into_iter().collect(), &mut Rng(1));
}

#[test]
fn a_crash_at_any_write_leaves_the_last_sealed_list() {
    let mem = VecMem::new(8 << 20);
    run(11, 80, Fill(3), &mem, &mut Vec::new()).unwrap();
    let total = mem.writes();
    let step = (total / 150).max(1);
    let mut at = 1;
    while at < total {
        let mem = VecMem::new(8 << 20);
        mem.crash_after(at);
        let mut sealed = Vec::new();
        assert!(run(11, 80, Fill(3), &mem, &mut sealed).is_err(), "the crash at write {at} happened");
        let img = VecMem::from_bytes(mem.image());
        let mut s = Store::open(&img, MAX_RANGES).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
        if let Some(ql) = handle(&mut s) {
            s.ql_blocks(&ql, |_, _| {}).unwrap_or_else(|e| panic!("crash at {at}: {e}"));
            // The list of the last batch sealed, or of the one the crash cut (past its
            // commit point).
            let got = contents(&s, &ql);
            let n = sealed.len();
            assert!(
                sealed[n.saturating_sub(2)..].contains(&got),
                "crash at {at}: the list is neither of the last two sealed ones"
            );
        }
        at += step;
    }
}

#[test]
fn a_damaged_node_is_an_error_not_a_panic() {
    let mem = VecMem::new(4 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let elems: Vec<Vec<u8>> = (0..100).map(|i| vec![b'x'; i]).collect();
    let ql = s.ql_new(&elems, Fill(-1)).unwrap();
    s.seal(MAX_RANGES).unwrap();
    // count larger than the run can hold
    mem.write(ql.head + 24, &u32::MAX.to_le_bytes()).unwrap();
    assert!(s.ql_get(&ql, 0, &mut Vec::new()).is_err());
    // a link out of the heap
    let bad = QuickList { head: 8, ..ql };
    assert!(s.ql_get(&bad, 0, &mut Vec::new()).is_err());
    assert!(s.ql_free(&bad).is_err());
}

#[test]
fn format_md_says_what_the_code_does() {
    let doc = include_str!("../../../../../docs/FORMAT.md");
    let sec = &doc[doc.find("### 11.7 Lists").expect("FORMAT.md has section 11.7")..];
    let sec = &sec[..sec.find("\n### ").expect("a section after 11.7")];
    let off = |field: &str| -> usize {
        let row = sec
            .lines()
            .find(|l| l.contains(&format!("| `{field}` |")))
            .unwrap_or_else(|| panic!("no row {field}"));
        row.split('|').nth(1).unwrap().trim().parse().unwrap()
    };
    // The handle.
    let ql = QuickList { head: 1, tail: 2, len: 3, nodes: 4 }.encode();
    for (field, v) in [("head", 1u8), ("tail", 2), ("len", 3), ("nodes", 4)] {
        assert_eq!(ql[off(field)], v, "{field}");
    }
    // A node, as made.
    let mem = VecMem::new(4 << 20);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let long = vec![b'y'; 300];
    let ql = s.ql_new(&[b"ab".to_vec(), long.clone()], Fill(-2)).unwrap();
    let mut n = vec![0u8; HEAD as usize];
    mem.read(ql.head, &mut n).unwrap();
    let u32_at = |i: usize| u32::from_le_bytes(n[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(n[i..i + 8].try_into().unwrap());
    assert_eq!(n[off("tag")], b'L');
    assert!(s.class_size(n[off("class")]) > HEAD);
    assert_eq!((u64_at(off("prev")), u64_at(off("next"))), (0, 0));
    assert_eq!(u32_at(off("count")), 2);
    let (lo, hi) = (u32_at(off("lo")), u32_at(off("hi")));
    assert!(sec.contains(&format!("(at least {HEAD})")));
    let mut run = vec![0u8; (hi - lo) as usize];
    mem.read(ql.head + u64::from(lo), &mut run).unwrap();
    let mut want = vec![2, b'a', b'b', 0xFF];
    want.extend_from_slice(&300u32.to_le_bytes());
    want.extend_from_slice(&long);
    assert_eq!(run, want, "elements as FORMAT.md encodes them");
    assert!(sec.contains("the byte\n`0xFF` and a u32") || sec.contains("the byte `0xFF` and a u32"));
    // The entry's kind and encoding.
    let entry = &doc[doc.find("### 11.2").unwrap()..];
    assert!(entry.contains(&format!("{}: list", crate::store::KIND_LIST)));
    assert!(entry.contains(&format!(
        "{} (a list): the value is a chain's 32-byte handle",
        crate::store::ENC_QUICKLIST
    )));
    assert_eq!(QuickList::LEN, 32);
    assert_eq!(Fill(-1).max_bytes(), 4096);
    assert!(sec.contains("4, 8, 16, 32 or 64 KiB"));
}
