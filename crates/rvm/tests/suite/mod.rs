//! The suite every backend of recoverable memory passes: allocation, commit, same-address
//! recovery of pointer-rich structures with either tracker, exactly the written pages per
//! commit, and every bad input the API refuses. A backend's test file implements [`Store`]
//! (an empty store, the options to open it, its stored bytes read without the RVM layer) and
//! runs each test here on it.

use mojim_rvm::{Rvm, RvmError, RvmOptions, WriteTracking};
use std::path::PathBuf;

/// A folder of the test's, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("mojim-rvm-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A backend under test: one store per test, torn down when dropped.
pub trait Store: Sized {
    /// An empty store of `size` bytes for the test `name`.
    fn create(name: &str, size: u64) -> Self;
    /// Options to open recoverable memory on it.
    fn options(&self, base: usize, tracking: WriteTracking) -> RvmOptions;
    /// The bytes it holds at `0..len`, read without the RVM layer.
    fn stored(&self, len: usize) -> Vec<u8>;
    /// A store of `size` bytes holding this one's first `len` bytes, for the test `name`.
    fn resized(&self, name: &str, size: u64, len: usize) -> Self;
}

/// One address range per test, so tests in parallel threads never collide: the suite uses
/// 0 to 4, a backend's own tests 5 and up.
pub fn base(test: usize) -> usize {
    0x6100_0000_0000 + (test << 36)
}

/// The meta block's bytes (the layout's `META_LEN`).
pub const META: usize = 64 << 10;

#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

#[repr(C)]
pub struct Tree {
    key: u64,
    left: *mut Tree,
    right: *mut Tree,
}

#[repr(C)]
pub struct Root {
    list: *mut Node,
    pub tree: *mut Tree,
    big: *mut u64,
}

/// # Safety
/// `t` points at a tree of [`Tree`]s in `rvm`'s memory.
pub unsafe fn insert(rvm: &Rvm, t: *mut *mut Tree, key: u64) {
    // SAFETY: every `*at` is `t` or a child link of a node of that tree (the caller's promise);
    // the new node is a block of `Tree`'s size that `rvm.alloc` just returned.
    unsafe {
        let mut at = t;
        while !(*at).is_null() {
            at = if key < (**at).key { &mut (**at).left } else { &mut (**at).right };
        }
        let n = rvm.alloc(std::mem::size_of::<Tree>()).unwrap() as *mut Tree;
        n.write(Tree { key, left: std::ptr::null_mut(), right: std::ptr::null_mut() });
        *at = n;
    }
}

/// # Safety
/// `t` is null or points at a tree of [`Tree`]s in a live `Rvm`'s memory.
unsafe fn in_order(t: *mut Tree, out: &mut Vec<u64>) {
    // SAFETY: `t` is not null here, so a node of that tree (the caller's promise), and so are
    // its children or null.
    unsafe {
        if t.is_null() {
            return;
        }
        in_order((*t).left, out);
        out.push((*t).key);
        in_order((*t).right, out);
    }
}

/// A list of 100 nodes, a tree of 10 keys and a large block, under the root pointer.
pub fn build(rvm: &Rvm) {
    // SAFETY: every pointer written through is a block `rvm.alloc` just returned, of the size
    // of what is written (the large block: `3 * 4096 + 100` bytes, written word by word below
    // that); `rvm` maps them read-write while it lives.
    unsafe {
        let root = rvm.alloc(std::mem::size_of::<Root>()).unwrap() as *mut Root;
        root.write(Root {
            list: std::ptr::null_mut(),
            tree: std::ptr::null_mut(),
            big: std::ptr::null_mut(),
        });
        for v in 0..100u64 {
            let n = rvm.alloc(std::mem::size_of::<Node>()).unwrap() as *mut Node;
            n.write(Node { value: v * v, next: (*root).list });
            (*root).list = n;
        }
        for k in [50u64, 20, 80, 10, 30, 70, 90, 25, 75, 5] {
            insert(rvm, &mut (*root).tree, k);
        }
        let big = rvm.alloc(3 * 4096 + 100).unwrap() as *mut u64;
        for i in 0..(3 * 4096 + 100) / 8 {
            *big.add(i) = i as u64 ^ 0xdead;
        }
        (*root).big = big;
        rvm.set_usr_data(root as *mut u8).unwrap();
    }
}

/// The list's values and the tree's keys in order, after checking the large block.
pub fn check(rvm: &Rvm) -> (Vec<u64>, Vec<u64>) {
    // SAFETY: the root is not null (asserted), so it is the `Root` that `build` allocated, and
    // every pointer under it is one of `build`'s blocks or null: recovery brings them back at
    // the same addresses, mapped while `rvm` lives.
    unsafe {
        let root = rvm.usr_data() as *mut Root;
        assert!(!root.is_null(), "the root pointer is back");
        let mut list = Vec::new();
        let mut n = (*root).list;
        while !n.is_null() {
            list.push((*n).value);
            n = (*n).next;
        }
        let mut keys = Vec::new();
        in_order((*root).tree, &mut keys);
        for i in 0..(3 * 4096 + 100) / 8 {
            assert_eq!(*(*root).big.add(i), i as u64 ^ 0xdead, "word {i} of the large block");
        }
        (list, keys)
    }
}

pub fn pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker<S: Store>() {
    for (i, tracking) in [WriteTracking::UffdAsync, WriteTracking::Mprotect].into_iter().enumerate() {
        let store = S::create(&format!("pointers-{i}"), 4 << 20);
        let opts = store.options(base(i), tracking);
        let rvm = Rvm::open(&opts).unwrap();
        assert_eq!(rvm.status().tracking, tracking.name());
        assert!(rvm.status().recovery.is_none());
        build(&rvm);
        rvm.txn_commit().unwrap();
        let root = rvm.usr_data();
        let before = check(&rvm);
        // Written after the last commit: gone after recovery.
        // SAFETY: `root` is the `Root` that `build` allocated, mapped while `rvm` lives.
        unsafe { (*(root as *mut Root)).list = std::ptr::null_mut() };
        rvm.close().unwrap();

        let rvm = Rvm::open(&opts).unwrap();
        assert_eq!(rvm.usr_data(), root, "{tracking:?}: the same address");
        let after = check(&rvm);
        assert_eq!(after, before, "{tracking:?}");
        assert_eq!(before.0.len(), 100);
        assert_eq!(before.1, vec![5, 10, 20, 25, 30, 50, 70, 75, 80, 90]);
        let st = rvm.status();
        let rec = st.recovery.expect("recovered");
        assert!(rec.blocks >= 2, "{rec:?}");
        // Changes after recovery commit and recover too; the allocator's state came back.
        // SAFETY: `root` is the recovered `Root` (the same address, asserted above), and its
        // `tree` the tree `build` made.
        unsafe { insert(&rvm, &mut (*(root as *mut Root)).tree, 60) };
        rvm.txn_commit().unwrap();
        rvm.close().unwrap();
        let rvm = Rvm::open(&opts).unwrap();
        assert_eq!(check(&rvm).1, vec![5, 10, 20, 25, 30, 50, 60, 70, 75, 80, 90]);
        rvm.close().unwrap();
    }
}

pub fn a_commit_sends_exactly_the_written_pages_with_the_header<S: Store>() {
    let store = S::create("exact", 4 << 20);
    let rvm = Rvm::open(&store.options(base(2), WriteTracking::UffdAsync)).unwrap();
    let a = rvm.alloc(64 * 4096).unwrap();
    rvm.txn_commit().unwrap();
    assert_eq!(rvm.status().last_commit_pages, 65, "the fresh block whole, and the header page");
    rvm.txn_commit().unwrap();
    assert_eq!(rvm.status().last_commit_pages, 1, "the header only");
    // SAFETY: all three bytes lie within the 64 pages `rvm.alloc` returned above.
    unsafe {
        *a.add(5 * 4096 + 7) = 1;
        *a.add(6 * 4096) = 1;
        *a.add(40 * 4096 + 4095) = 1;
    }
    rvm.txn_commit().unwrap();
    let st = rvm.status();
    assert_eq!((st.last_commit_pages, st.last_commit_runs), (4, 3), "{st:?}");
    rvm.close().unwrap();
}

pub fn bad_input_is_refused_and_changes_nothing<S: Store>() {
    let store = S::create("bad", 1 << 20);
    let opts = store.options(base(3), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(100).unwrap();
    // SAFETY: the 100 bytes `rvm.alloc` just returned, mapped read-write while `rvm` lives.
    unsafe { p.write_bytes(7, 100) };
    rvm.set_usr_data(p).unwrap();
    rvm.txn_commit().unwrap();
    // Full: the store holds 1 MiB, the meta block and a slab take 320 KiB of it.
    match rvm.alloc(1 << 20) {
        Err(RvmError::Full { wanted, why }) => assert!(wanted >= 1 << 20 && why.contains("region"), "{why}"),
        other => panic!("{other:?}"),
    }
    let big = rvm.alloc(512 << 10).unwrap();
    assert!(matches!(rvm.alloc(512 << 10), Err(RvmError::Full { .. })));
    // Foreign pointers: outside, inside a block but not a chunk's start, a large block's middle.
    let mut local = 0u64;
    for bad in [&mut local as *mut u64 as *mut u8, p.wrapping_add(3), big.wrapping_add(4096)] {
        match rvm.free(bad) {
            Err(e @ RvmError::ForeignPointer { .. }) => assert!(e.to_string().contains("nothing was freed")),
            other => panic!("free({bad:p}): {other:?}"),
        }
    }
    match rvm.set_usr_data(&mut local as *mut u64 as *mut u8) {
        Err(e @ RvmError::ForeignPointer { .. }) => {
            assert!(
                e.to_string().contains("rvm_set_usr_data") && e.to_string().contains("root is unchanged"),
                "{e}"
            )
        }
        other => panic!("set_usr_data of a stack pointer: {other:?}"),
    }
    // A small chunk freed twice: refused, and the free list stays whole (two allocations
    // then get two chunks). A chunk in use that holds the free tag by chance is freed.
    let q = rvm.alloc(100).unwrap();
    rvm.free(q).unwrap();
    match rvm.free(q) {
        Err(e @ RvmError::ForeignPointer { .. }) => assert!(e.to_string().contains("freed already"), "{e}"),
        other => panic!("a second free of a small chunk: {other:?}"),
    }
    let (a, b) = (rvm.alloc(100).unwrap(), rvm.alloc(100).unwrap());
    assert_ne!(a, b, "a double free put one chunk on the free list twice");
    // SAFETY: the second word of the 100 bytes `rvm.alloc` returned at `a`.
    unsafe { (a as *mut u64).add(1).write(a as u64 ^ u64::from_le_bytes(*b"MOJIMFRE")) };
    rvm.free(a).unwrap();
    rvm.free(b).unwrap();
    // A large block freed is reused.
    rvm.free(big).unwrap();
    assert!(matches!(rvm.free(big), Err(RvmError::ForeignPointer { .. })), "a double free of a block");
    assert_eq!(rvm.alloc(512 << 10).unwrap(), big);
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(rvm.usr_data(), p);
    // SAFETY: `p` is the recovered root, the 100 bytes allocated before, mapped while `rvm` lives.
    assert_eq!(unsafe { std::slice::from_raw_parts(p, 100) }, &[7u8; 100][..]);
    rvm.close().unwrap();
    // The address taken by another mapping in this process: named, nothing remapped, and the
    // memory opens once it is free again.
    let squatter = mojim_region::Arena::map_at(base(3) + (64 << 10), 4096).unwrap();
    match Rvm::open(&opts) {
        Err(RvmError::AddressTaken(m)) => assert!(m.contains(&format!("{:#x}", base(3))), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("recoverable memory mapped over another mapping"),
    }
    drop(squatter);
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(rvm.usr_data(), p);
    rvm.close().unwrap();
}

pub fn recovery_refuses_a_store_of_another_size<S: Store>() {
    let store = S::create("size", 1 << 20);
    let opts = store.options(base(4), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    rvm.alloc(10).unwrap();
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let meta = store.stored(META);
    // The same bytes in a store twice the size (a copy made with the wrong size setting).
    let other = store.resized("size-2", 2 << 20, META);
    match Rvm::open(&other.options(base(4), WriteTracking::UffdAsync)) {
        Err(RvmError::Layout(msg)) => assert!(msg.contains("1048576") && msg.contains("2097152"), "{msg}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("recovered into a store of another size"),
    }
    assert!(other.stored(META) == meta, "the refused recovery changed the store");
    // The memory is still there at its own size.
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(rvm.status().recovery.expect("recovered").blocks, 1);
    rvm.close().unwrap();
}
