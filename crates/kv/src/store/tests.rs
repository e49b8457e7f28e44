//! The store against a model, with crashes at every write and a mirror that only ever gets
//! whole sealed groups.
//!
//! A seeded workload runs batches of puts, removes, appends, in-place overwrites, expiries and
//! flushes on an image in the heap, keeping a model (a map) of the committed state. After each
//! seal the group's ranges are copied into a second image, the mirror's. Then, for every write
//! of a run, the same workload is run again with a crash at that write; the image it leaves is
//! opened (the repair) and must hold exactly the state before or after the batch the crash cut
//! (after only if the crash came after the local commit point), with a sound heap; and the
//! mirror's image, opened, must hold the last acknowledged state, and after the resend group
//! the opened local state.

use super::layout::{ENTRY_HEAD, KIND_HASH, KIND_STRING};
use super::*;
use std::collections::{BTreeMap, BTreeSet};

type Model = BTreeMap<Vec<u8>, (u8, Vec<u8>, u64)>;

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

const SIZE: u64 = 1 << 20;
const NOW: u64 = 1_000_000;

/// Every live entry, by walking the buckets; and checks the heap: blocks inside it, no two
/// overlapping, free lists disjoint from entries, the counters right.
fn content<M: Mem>(s: &mut Store<M>) -> Model {
    let mut out = Model::new();
    let mut blocks: Vec<(u64, u64)> = Vec::new();
    let mut words = vec![0u8; 8 * s.geo.buckets as usize];
    s.mem.read(s.geo.bucket_off, &mut words).unwrap();
    for b in 0..s.geo.buckets {
        if words[8 * b as usize..8 * b as usize + 8] == [0; 8] {
            continue;
        }
        let mut found = Vec::new();
        s.bucket_entries(b, |s, e, h| {
            let mut k = Vec::new();
            s.key_into(e, h, &mut k)?;
            found.push((e, *h, k));
            Ok(())
        })
        .unwrap();
        for (e, h, k) in found {
            let f = s.find(&k).unwrap().expect("an entry walked is found by its key");
            assert_eq!(f.entry, e);
            let mut v = Vec::new();
            s.value_into(&f, &mut v).unwrap();
            blocks.push((e, s.class_size(h.class)));
            assert!(out.insert(k, (h.kind, v, h.expire_ms)).is_none(), "a key twice");
        }
    }
    assert_eq!(s.keys(), out.len() as u64, "the key count");
    assert_eq!(s.used_bytes(), blocks.iter().map(|b| b.1).sum::<u64>(), "the used bytes");
    for (c, &h) in s.dy.heads.iter().enumerate() {
        let mut f = h;
        let mut n = 0;
        while f != 0 {
            blocks.push((f, s.classes[c]));
            f = s.read_u64(f).unwrap();
            n += 1;
            assert!(n < 100_000, "a free list loops");
        }
    }
    blocks.sort_unstable();
    for w in blocks.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    for b in &blocks {
        assert!(b.0 >= s.geo.heap_off && b.0 + b.1 <= s.dy.heap_top, "block {b:?} outside the heap");
    }
    out
}

/// The first difference between two states, in a line (the states themselves are megabytes).
fn differ(a: &Model, b: &Model) -> Option<String> {
    let keys: BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    for k in keys {
        let show = |v: Option<&(u8, Vec<u8>, u64)>| {
            v.map(|(kind, v, t)| {
                format!("kind {kind}, {} bytes {:02x?}.., expiry {t}", v.len(), &v[..v.len().min(8)])
            })
        };
        if a.get(k) != b.get(k) {
            return Some(format!(
                "{} keys vs {}; key {:?}: {:?} vs {:?}",
                a.len(),
                b.len(),
                String::from_utf8_lossy(k),
                show(a.get(k)),
                show(b.get(k))
            ));
        }
    }
    None
}

fn key(r: &mut Rng) -> Vec<u8> {
    format!("k{}", r.below(40)).into_bytes()
}

fn value(r: &mut Rng) -> Vec<u8> {
    let len = [0, 3, 20, 100, 700, 3000][r.below(6) as usize];
    (0..len).map(|i| (i as u8).wrapping_add(r.below(256) as u8)).collect()
}

/// One batch of the workload: changes `s` and `model` alike (a command that fails is rolled
/// back in both).
fn batch<M: Mem>(s: &mut Store<M>, model: &mut Model, r: &mut Rng) -> Result<(), StoreError> {
    for _ in 0..1 + r.below(6) {
        let sp = s.savepoint();
        let before = model.clone();
        let res = op(s, model, r);
        if let Err(e) = res {
            if e.is_fatal() {
                return Err(e);
            }
            s.rollback_to(&sp)?;
            *model = before;
        }
    }
    Ok(())
}

fn op<M: Mem>(s: &mut Store<M>, model: &mut Model, r: &mut Rng) -> Result<(), StoreError> {
    let k = key(r);
    match r.below(20) {
        0..=7 => {
            let v = value(r);
            let old = s.find(&k)?;
            let spare = r.below(3) * 16;
            s.put(&k, KIND_STRING, 0, &[&v[..1.min(v.len())], &v[1.min(v.len())..]], spare, old.as_ref())?;
            model.insert(k, (KIND_STRING, v, 0));
        }
        8..=10 => {
            if let Some(f) = s.find(&k)? {
                s.remove(&f)?;
                model.remove(&k);
            }
        }
        11..=12 => {
            if let Some(mut f) = s.find(&k)? {
                let more = value(r);
                if (more.len() as u64) <= s.slack(&f) {
                    s.append_in_place(&mut f, &more)?;
                    model.get_mut(&k).expect("in the model").1.extend_from_slice(&more);
                }
            }
        }
        13..=14 => {
            if let Some(mut f) = s.find(&k)? {
                let v = format!("{}", r.below(1000)).into_bytes();
                if ENTRY_HEAD + k.len() as u64 + v.len() as u64 <= s.class_size(f.head.class) {
                    s.overwrite_in_place(&mut f, &v)?;
                    model.get_mut(&k).expect("in the model").1 = v;
                }
            }
        }
        15..=16 => {
            if let Some(mut f) = s.find(&k)? {
                let t = if r.below(2) == 0 { 0 } else { NOW + r.below(1000) };
                s.set_expire(&mut f, t)?;
                model.get_mut(&k).expect("in the model").2 = t;
            }
        }
        17 => {
            // A transaction's worth: several keys, then maybe a failure that rolls it all back.
            for _ in 0..3 {
                let k = key(r);
                let old = s.find(&k)?;
                let (blob, _) = hash_blob::set(None, &[(b"f", b"v")])?;
                s.put(&k, KIND_HASH, 0, &[&blob], 0, old.as_ref())?;
                model.insert(k, (KIND_HASH, blob, 0));
            }
            if r.below(2) == 0 {
                return Err(StoreError::TooLarge("a failure the test makes".into()));
            }
        }
        18 if r.below(8) == 0 => {
            s.flush()?;
            model.clear();
        }
        _ => {
            // Fill towards full: a large value that may not fit.
            let big = vec![7u8; (r.below(200) * 1024) as usize];
            let old = s.find(&k)?;
            s.put(&k, KIND_STRING, 0, &[&big], 0, old.as_ref())?;
            model.insert(k, (KIND_STRING, big, 0));
        }
    }
    Ok(())
}

struct Run {
    /// Model after each acknowledged batch (index 0: the empty store).
    states: Vec<Model>,
    /// The mirror's image.
    mirror: VecMem,
    /// The batch the crash cut (its index into `states` once it would have been done), and
    /// whether the crash came after its local commit point.
    cut: Option<(usize, bool)>,
}

const MAX_RANGES: usize = 64;

fn send(local: &VecMem, mirror: &VecMem, group: &[Range]) {
    let img = local.image();
    for r in group {
        mirror.write(r.offset, &img[r.offset as usize..(r.offset + r.len) as usize]).unwrap();
    }
}

/// Runs `batches` batches from `seed`, crashing at write `crash` (if given).
fn run(seed: u64, batches: usize, crash: Option<u64>, local: &VecMem) -> Run {
    let mirror = VecMem::new(SIZE);
    let mut r = Rng(seed);
    let mut s = Store::open(local, MAX_RANGES).unwrap();
    send(local, &mirror, &s.take_resend());
    // The sweep of a new store's buckets.
    let mut at = 0;
    loop {
        let (next, g) = s.sweep(at, 1000, 1000).unwrap();
        send(local, &mirror, &g);
        if next == 0 {
            break;
        }
        at = next;
    }
    if let Some(g) = s.seal(MAX_RANGES).unwrap() {
        let g = g.to_vec();
        send(local, &mirror, &g);
    }
    if let Some(c) = crash {
        local.crash_after(c.saturating_sub(local.writes()));
    }
    let mut model = content(&mut s);
    let mut states = vec![model.clone()];
    for i in 0..batches {
        let res = batch(&mut s, &mut model, &mut r);
        if res.is_err() {
            return Run { states, mirror, cut: Some((i + 1, false)) };
        }
        match s.seal(MAX_RANGES) {
            Ok(Some(g)) => {
                let g = g.to_vec();
                if local.budget() == 0 {
                    // The process dies between its local commit point and the send.
                    return Run { states, mirror, cut: Some((i + 1, true)) };
                }
                send(local, &mirror, &g);
            }
            Ok(None) => {}
            Err(_) => return Run { states, mirror, cut: Some((i + 1, false)) },
        }
        states.push(model.clone());
        if s.stale() {
            let mut at = 0;
            loop {
                let Ok((next, g)) = s.sweep(at, 1000, 1000) else {
                    return Run { states, mirror, cut: Some((i + 1, true)) };
                };
                send(local, &mirror, &g);
                if next == 0 {
                    break;
                }
                at = next;
            }
        }
    }
    Run { states, mirror, cut: None }
}

#[test]
fn batches_persist_across_reopen() {
    let local = VecMem::new(SIZE);
    let done = run(7, 60, None, &local);
    let mut s = Store::open(VecMem::from_bytes(local.image()), MAX_RANGES).unwrap();
    assert_eq!(s.opened().undone, 0);
    assert!(!s.opened().formatted);
    assert_eq!(differ(&content(&mut s), done.states.last().unwrap()), None);
    let mut m = Store::open(VecMem::from_bytes(done.mirror.image()), MAX_RANGES).unwrap();
    assert_eq!(differ(&content(&mut m), done.states.last().unwrap()), None, "the mirror's image");
}

#[test]
fn a_crash_at_any_write_leaves_the_state_before_or_after_its_batch() {
    for seed in [1u64, 2, 3] {
        let batches = 25;
        let clean = VecMem::new(SIZE);
        let states = run(seed, batches, None, &clean).states;
        let total = clean.writes();
        let mut cut_after = 0;
        for crash in 1..total {
            let local = VecMem::new(SIZE);
            let r = run(seed, batches, Some(crash), &local);
            let Some((i, _)) = r.cut else { continue };
            // The mirror holds the last acknowledged batch's state.
            let mut m = Store::open(VecMem::from_bytes(r.mirror.image()), MAX_RANGES).unwrap();
            let on_mirror = content(&mut m);
            let last_acked = &r.states[i - 1];
            // The local image, repaired.
            let repaired = VecMem::from_bytes(local.image());
            let mut s = Store::open(&repaired, MAX_RANGES)
                .unwrap_or_else(|e| panic!("seed {seed} crash at write {crash}: open fails: {e}"));
            let got = content(&mut s);
            // What the batch would have made: run the same seed without a crash that far.
            let after = states[i].clone();
            assert!(
                got == *last_acked || got == after,
                "seed {seed} crash at write {crash} (batch {i}): the repaired state is neither before nor after"
            );
            if got == after && got != *last_acked {
                cut_after += 1;
            }
            // The mirror's image is the last acknowledged state, or the cut batch's if its
            // group was sent before the crash (a sweep cut).
            assert!(
                on_mirror == *last_acked || on_mirror == after,
                "seed {seed} crash at write {crash}: the mirror holds neither state"
            );
            // After the resend group, the mirror holds what the repaired copy holds.
            let resend = s.take_resend();
            send(&repaired, &r.mirror, &resend);
            let mut m = Store::open(VecMem::from_bytes(r.mirror.image()), MAX_RANGES).unwrap();
            assert_eq!(
                differ(&content(&mut m), &got),
                None,
                "seed {seed} crash at write {crash}: the mirror after the resend"
            );
        }
        println!("seed {seed}: {total} writes, {cut_after} crashes after a local commit");
        assert!(cut_after > 0, "no crash fell between a local commit and its send");
    }
}

#[test]
fn a_full_heap_refuses_and_changes_nothing() {
    let mem = VecMem::new(SIZE);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let big = vec![1u8; 100 << 10];
    let mut n = 0;
    loop {
        let sp = s.savepoint();
        let k = format!("big{n}").into_bytes();
        match s.put(&k, KIND_STRING, 0, &[&big], 0, None) {
            Ok(_) => n += 1,
            Err(StoreError::Full { wanted, .. }) => {
                assert!(wanted >= 100 << 10);
                s.rollback_to(&sp).unwrap();
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(n > 3);
    s.seal(MAX_RANGES).unwrap();
    assert_eq!(content(&mut s).len(), n);
    // Deleting one makes room for one again.
    let f = s.find(b"big0").unwrap().unwrap();
    s.remove(&f).unwrap();
    s.seal(MAX_RANGES).unwrap();
    s.put(b"again", KIND_STRING, 0, &[&big], 0, None).unwrap();
    s.seal(MAX_RANGES).unwrap();
    assert_eq!(content(&mut s).len(), n);
}

#[test]
fn a_region_with_other_data_is_refused_untouched() {
    let mut img = vec![0u8; SIZE as usize];
    img[100] = 1;
    let mem = VecMem::from_bytes(img.clone());
    let e = Store::open(&mem, MAX_RANGES).err().expect("refused");
    assert!(matches!(e, StoreError::NotKv(_)), "{e}");
    assert_eq!(mem.image(), img);
    assert!(Store::open(VecMem::new(1000), MAX_RANGES).err().unwrap().to_string().contains("1000"));
}

#[test]
fn a_damaged_superblock_is_refused() {
    let mem = VecMem::new(SIZE);
    drop(Store::open(&mem, MAX_RANGES).unwrap());
    let mut img = mem.image();
    img[40] ^= 1;
    let e = Store::open(VecMem::from_bytes(img), MAX_RANGES).err().unwrap();
    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
    let img = mem.image();
    let e = Store::open(VecMem::from_bytes(img[..SIZE as usize / 2].to_vec()), MAX_RANGES).err().unwrap();
    assert!(e.to_string().contains(&(SIZE / 2).to_string()), "{e}");
}

#[test]
fn groups_keep_to_the_range_limit() {
    let mem = VecMem::new(SIZE);
    let mut s = Store::open(&mem, 8).unwrap();
    let keys: BTreeSet<String> = (0..300).map(|i| format!("key{i}")).collect();
    for k in &keys {
        s.put(k.as_bytes(), KIND_STRING, 0, &[b"v"], 0, None).unwrap();
    }
    let g = s.seal(8).unwrap().unwrap();
    assert!(g.len() <= 8, "{} ranges", g.len());
}

#[test]
fn a_damaged_hash_key_is_refused() {
    let mem = VecMem::new(SIZE);
    drop(Store::open(&mem, MAX_RANGES).unwrap());
    let mut img = mem.image();
    img[layout::HASH_KEY_OFF + 3] ^= 1;
    let e = Store::open(VecMem::from_bytes(img), MAX_RANGES).err().unwrap();
    assert!(matches!(e, StoreError::Corrupt(_)) && e.to_string().contains("hash key"), "{e}");
}

#[test]
fn stores_get_keys_of_their_own_and_version_1_stores_keep_their_hash() {
    let (a, b) = (VecMem::new(SIZE), VecMem::new(SIZE));
    let ha = Store::open(&a, MAX_RANGES).unwrap().hasher();
    assert!(matches!(ha, KeyHasher::Keyed { .. }));
    assert_ne!(ha, Store::open(&b, MAX_RANGES).unwrap().hasher(), "two stores, two keys");
    // A store as version 1 made it: no key, CRC32C. Its keys are found where it put them.
    let fresh = VecMem::new(SIZE);
    drop(Store::open(&fresh, MAX_RANGES).unwrap());
    let mut img = fresh.image();
    img[8..12].copy_from_slice(&1u32.to_le_bytes());
    img[layout::HASH_KEY_OFF..layout::HEAD_LEN].fill(0);
    let crc = crc32c::crc32c(&img[..layout::STATIC_LEN]);
    img[layout::STATIC_LEN..layout::STATIC_LEN + 4].copy_from_slice(&crc.to_le_bytes());
    let v1 = VecMem::from_bytes(img);
    let mut s = Store::open(&v1, MAX_RANGES).unwrap();
    assert_eq!(s.hasher(), KeyHasher::Crc32c);
    s.put(b"old", KIND_STRING, 0, &[b"v1"], 0, None).unwrap();
    s.seal(MAX_RANGES).unwrap();
    let bucket = layout::bucket_of(crc32c::crc32c(b"old"), s.geo.buckets);
    assert_ne!(s.read_u64(s.geo.bucket(bucket)).unwrap(), 0, "in CRC32C's bucket");
    drop(s);
    let mut s = Store::open(&v1, MAX_RANGES).unwrap();
    assert!(s.find(b"old").unwrap().is_some());
    assert_eq!(u32::from_le_bytes(v1.image()[8..12].try_into().unwrap()), 1, "still version 1");
}

#[test]
fn an_expiry_pass_takes_no_more_than_the_batch_has_room_for() {
    let mem = VecMem::new(SIZE);
    let mut s = Store::open(&mem, MAX_RANGES).unwrap();
    let n = 8000;
    for i in 0..n {
        let old = s.find(format!("k{i}").as_bytes()).unwrap();
        s.put(format!("k{i}").as_bytes(), KIND_STRING, NOW + 10, &[b"v"], 0, old.as_ref()).unwrap();
        if !s.batch_has_room(u64::MAX, MAX_RANGES) {
            s.seal(MAX_RANGES).unwrap();
        }
    }
    s.seal(MAX_RANGES).unwrap();
    let all = s.geo.buckets;
    // Removing them all in one batch needs more undo space than the journal has.
    let sp = s.savepoint();
    let e = s.expire_buckets(0, all, NOW + 20, |_| true, |_, _| {}).expect_err("one batch cannot hold it");
    assert!(matches!(e, StoreError::TooLarge(_)), "{e}");
    s.rollback_to(&sp).unwrap();
    s.seal(MAX_RANGES).unwrap();
    // Bounded by the room left, passes go on where the last stopped.
    let (mut at, mut passes, mut removed) = (0, 0, 0);
    loop {
        let (next, r) = s
            .expire_buckets(at, all, NOW + 20, |s| s.batch_has_room(u64::MAX, MAX_RANGES), |_, _| {})
            .unwrap();
        let (undo, cap) = s.undo_use();
        assert!(undo <= cap / 2 + 64, "a pass used {undo} of {cap} bytes of undo");
        s.seal(MAX_RANGES).unwrap();
        removed += r;
        passes += 1;
        let Some(next) = next else { break };
        at = next;
    }
    assert_eq!(removed, n);
    assert!(passes > 1, "{passes} passes");
    assert_eq!(s.keys(), 0);
    drop(s);
    assert!(content(&mut Store::open(&mem, MAX_RANGES).unwrap()).is_empty());
}

#[test]
fn a_sweep_keeps_to_the_range_limit() {
    // Found by the kv_commands fuzz target: a sweep merged its group to 1000 ranges whatever
    // [limits] max_ranges said, and gmsync refused it.
    let mem = VecMem::new(SIZE);
    let mut s = Store::open(&mem, 2).unwrap();
    for k in 0..50 {
        s.put(format!("k{k}").as_bytes(), KIND_STRING, 0, &[b"1"], 0, None).unwrap();
    }
    s.seal(2).unwrap();
    s.flush().unwrap();
    s.seal(2).unwrap();
    let mut at = 0;
    loop {
        let (next, g) = s.sweep(at, 1 << 20, 2).unwrap();
        assert!(g.len() <= 2, "{} ranges", g.len());
        if next == 0 {
            break;
        }
        at = next;
    }
}
