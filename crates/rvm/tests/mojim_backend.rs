//! Recoverable memory on the Mojim backend, against a mirror in this process: allocation,
//! commit, same-address recovery of pointer-rich structures, and every bad input the API
//! refuses.

use mojim::config::random_uuid;
use mojim::config::OnMirrorLoss;
use mojim::{create_region, FailurePolicy, Limits, Mode, PrimaryOptions, RegionId, Secret};
use mojim_node::{Mirror, MirrorHandle, MirrorOptions};
use mojim_rvm::{Backend, Rvm, RvmError, RvmOptions, WriteTracking};
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
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

const SECRET: &[u8] = b"rvm-test-secret!";

fn mirror_options(dir: &Path, id: RegionId, log_capacity: u64) -> MirrorOptions {
    MirrorOptions {
        dir: dir.join("mirror"),
        log_dir: dir.join("mirror"),
        listen: "127.0.0.1:0".into(),
        region: id,
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        log_capacity,
        checkpoint_thresh: 1,
        checkpoint_idle: Duration::from_millis(1),
        max_lanes: 8,
        data: mojim_node::DataPlacement::Memory,
        backups: Vec::new(),
        secondary_tier_thresh: 40 << 20,
        secondary_rate_limit: None,
        chain: false,
        busy_poll: Duration::ZERO,
        heartbeat: Default::default(),
        dirty_chunk: 64 << 10,
        metadata_log_records: 4096,
        coordinator: None,
        node: String::new(),
    }
}

fn mirror(dir: &Path, id: RegionId, log_capacity: u64) -> MirrorHandle {
    Mirror::open(mirror_options(dir, id, log_capacity)).unwrap().serve().unwrap()
}

/// A region of `size` bytes and a mirror for it.
fn cluster(dir: &Path, size: u64) -> (RegionId, MirrorHandle) {
    let id = RegionId { uuid: random_uuid(), size };
    create_region(&dir.join("region.mojim"), id).unwrap();
    (id, mirror(dir, id, 4 << 20))
}

fn options(dir: &Path, mirror: &str, base: usize, tracking: WriteTracking) -> RvmOptions {
    let p = PrimaryOptions {
        region_path: dir.join("region.mojim"),
        mode: Mode::Sync,
        mirror: mirror.into(),
        lanes: 1,
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        async_window: 16,
        connect_timeout: Duration::from_secs(5),
        busy_poll: Duration::ZERO,
        broadcast: Vec::new(),
        failure: FailurePolicy { reconnect: Duration::from_millis(20), ..Default::default() },
        coordinator: None,
        node: String::new(),
    };
    RvmOptions { backend: Backend::Mojim(p), base, tracking: Some(tracking) }
}

/// One address range per test, so tests in parallel threads never collide.
fn base(test: usize) -> usize {
    0x6100_0000_0000 + (test << 36)
}

#[repr(C)]
struct Node {
    value: u64,
    next: *mut Node,
}

#[repr(C)]
struct Tree {
    key: u64,
    left: *mut Tree,
    right: *mut Tree,
}

#[repr(C)]
struct Root {
    list: *mut Node,
    tree: *mut Tree,
    big: *mut u64,
}

unsafe fn insert(rvm: &Rvm, t: *mut *mut Tree, key: u64) {
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

unsafe fn in_order(t: *mut Tree, out: &mut Vec<u64>) {
    unsafe {
        if t.is_null() {
            return;
        }
        in_order((*t).left, out);
        out.push((*t).key);
        in_order((*t).right, out);
    }
}

fn build(rvm: &Rvm) {
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

fn check(rvm: &Rvm) -> (Vec<u64>, Vec<u64>) {
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

#[test]
fn pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker() {
    for (i, tracking) in [WriteTracking::UffdAsync, WriteTracking::Mprotect].into_iter().enumerate() {
        let dir = Dir::new(&format!("pointers-{i}"));
        let (_, m) = cluster(&dir.0, 4 << 20);
        let opts = options(&dir.0, m.addr(), base(i), tracking);
        let rvm = Rvm::open(&opts).unwrap();
        assert_eq!(rvm.status().tracking, tracking.name());
        assert!(rvm.status().recovery.is_none());
        build(&rvm);
        rvm.txn_commit().unwrap();
        let root = rvm.usr_data();
        let before = check(&rvm);
        // Written after the last commit: gone after recovery.
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
        unsafe { insert(&rvm, &mut (*(root as *mut Root)).tree, 60) };
        rvm.txn_commit().unwrap();
        rvm.close().unwrap();
        let rvm = Rvm::open(&opts).unwrap();
        assert_eq!(check(&rvm).1, vec![5, 10, 20, 25, 30, 50, 60, 70, 75, 80, 90]);
        rvm.close().unwrap();
        m.shutdown();
    }
}

#[test]
fn a_commit_sends_exactly_the_written_pages_with_the_header() {
    let dir = Dir::new("exact");
    let (_, m) = cluster(&dir.0, 4 << 20);
    let rvm = Rvm::open(&options(&dir.0, m.addr(), base(2), WriteTracking::UffdAsync)).unwrap();
    let a = rvm.alloc(64 * 4096).unwrap();
    rvm.txn_commit().unwrap();
    assert_eq!(rvm.status().last_commit_pages, 65, "the fresh block whole, and the header page");
    rvm.txn_commit().unwrap();
    assert_eq!(rvm.status().last_commit_pages, 1, "the header only");
    unsafe {
        *a.add(5 * 4096 + 7) = 1;
        *a.add(6 * 4096) = 1;
        *a.add(40 * 4096 + 4095) = 1;
    }
    rvm.txn_commit().unwrap();
    let st = rvm.status();
    assert_eq!((st.last_commit_pages, st.last_commit_runs), (4, 3), "{st:?}");
    rvm.close().unwrap();
    m.shutdown();
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dir = Dir::new("bad");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let opts = options(&dir.0, m.addr(), base(3), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(100).unwrap();
    unsafe { p.write_bytes(7, 100) };
    rvm.set_usr_data(p).unwrap();
    rvm.txn_commit().unwrap();
    // Full: the region holds 1 MiB, the meta block and a slab take 320 KiB of it.
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
    assert!(matches!(
        rvm.set_usr_data(&mut local as *mut u64 as *mut u8),
        Err(RvmError::ForeignPointer { .. })
    ));
    // A large block freed is reused.
    rvm.free(big).unwrap();
    assert!(matches!(rvm.free(big), Err(RvmError::ForeignPointer { .. })), "a double free of a block");
    assert_eq!(rvm.alloc(512 << 10).unwrap(), big);
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(rvm.usr_data(), p);
    assert_eq!(unsafe { std::slice::from_raw_parts(p, 100) }, &[7u8; 100][..]);
    // The same address taken by another mapping in this process: named, nothing remapped.
    let other = Rvm::open(&opts);
    match other {
        Err(RvmError::AddressTaken(m)) => assert!(m.contains(&format!("{:#x}", base(3))), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("two mappings of the same memory"),
    }
    rvm.close().unwrap();
    m.shutdown();
}

#[test]
fn recovery_refuses_a_region_of_another_size() {
    let dir = Dir::new("size");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let opts = options(&dir.0, m.addr(), base(4), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    rvm.alloc(10).unwrap();
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    m.shutdown();
    // The same bytes in a region twice the size (a copy made with the wrong [region] size).
    let small = mojim_region::RegionFile::open(&dir.0.join("region.mojim")).unwrap();
    let mut meta = vec![0; 64 << 10];
    small.read(0, &mut meta);
    drop(small);
    let dir2 = Dir::new("size-2");
    let (_, m2) = cluster(&dir2.0, 2 << 20);
    mojim_region::RegionFile::open(&dir2.0.join("region.mojim")).unwrap().write(0, &meta);
    match Rvm::open(&options(&dir2.0, m2.addr(), base(4), WriteTracking::UffdAsync)) {
        Err(RvmError::Layout(msg)) => assert!(msg.contains("1048576") && msg.contains("2097152"), "{msg}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("recovered into a region of another size"),
    }
    let mut after = vec![0; 64 << 10];
    mojim_region::RegionFile::open(&dir2.0.join("region.mojim")).unwrap().read(0, &mut after);
    assert!(after == meta, "the refused recovery changed the region");
    m2.shutdown();
}

#[test]
fn a_commit_without_the_mirror_fails_under_block_and_is_sent_by_the_next() {
    let dir = Dir::new("block");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.0.join("region.mojim"), id).unwrap();
    let m = mirror(&dir.0, id, 4 << 20);
    let addr = m.addr().to_string();
    let opts = options(&dir.0, &addr, base(5), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    m.shutdown();
    unsafe { *p = 41 };
    let mut failed = false;
    for _ in 0..100 {
        match rvm.txn_commit() {
            Err(RvmError::Mojim(e)) => {
                assert!(matches!(e, mojim::Error::MirrorLost { .. }), "{e}");
                failed = true;
                break;
            }
            Err(e) => panic!("{e}"),
            Ok(()) => std::thread::sleep(Duration::from_millis(20)), // not noticed yet
        }
    }
    assert!(failed, "commits kept succeeding without a mirror under `block`");
    // The mirror returns on the same address; the next commit carries the failed one's page.
    let mut o = mirror_options(&dir.0, id, 4 << 20);
    o.listen = addr.clone();
    let m = Mirror::open(o).unwrap().serve().unwrap();
    let mut sent = false;
    for _ in 0..250 {
        if rvm.txn_commit().is_ok() {
            sent = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sent, "no commit succeeded once the mirror was back: {}", rvm.status().store);
    rvm.close().unwrap();
    m.checkpoint();
    let mut v = [0u8; 8];
    m.read(p as u64 - base(5) as u64, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 41, "the page of the failed commit reached the mirror");
    m.shutdown();
}

#[test]
fn a_commit_without_the_mirror_under_degrade_keeps_the_data_locally() {
    let dir = Dir::new("degrade");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let mut opts = options(&dir.0, m.addr(), base(6), WriteTracking::UffdAsync);
    let Backend::Mojim(p) = &mut opts.backend;
    p.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    m.shutdown();
    for i in 0..20u64 {
        unsafe { *p = i };
        rvm.txn_commit().expect("a degraded commit succeeds");
    }
    rvm.close().unwrap();
    // Recovery (degraded again: no mirror) finds the last commit in the local copy.
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 19);
    rvm.close().unwrap();
}

#[test]
fn a_commit_larger_than_a_lanes_log_is_refused_by_size_and_kept_for_the_next() {
    let dir = Dir::new("large");
    let id = RegionId { uuid: random_uuid(), size: 8 << 20 };
    create_region(&dir.0.join("region.mojim"), id).unwrap();
    let m = mirror(&dir.0, id, 1 << 20);
    let rvm = Rvm::open(&options(&dir.0, m.addr(), base(7), WriteTracking::UffdAsync)).unwrap();
    let a = rvm.alloc(2 << 20).unwrap();
    match rvm.txn_commit() {
        Err(RvmError::TooLarge(msg)) => {
            assert!(msg.contains("log_capacity") && msg.contains("pages"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    // Nothing is dropped to make it fit: the pages stay in the next commit, refused the same.
    rvm.free(a).unwrap();
    assert!(matches!(rvm.txn_commit(), Err(RvmError::TooLarge(_))), "pending pages are kept");
    rvm.close().unwrap();
    m.shutdown();
}
