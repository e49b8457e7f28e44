//! Recoverable memory on the Mojim backend, against a mirror in this process: the suite every
//! backend passes (tests/suite), then what is the Mojim backend's own: a commit without the
//! mirror under either policy, and a commit larger than a lane's log.

mod suite;

use mojim::config::random_uuid;
use mojim::config::OnMirrorLoss;
use mojim::{create_region, FailurePolicy, Limits, PrimaryOptions, RegionId, Secret};
use mojim_node::{Mirror, MirrorHandle, MirrorOptions};
use mojim_rvm::{Backend, Rvm, RvmError, RvmOptions, WriteTracking};
use std::path::Path;
use std::time::Duration;
use suite::{base, Dir, Store};

/// A region and its mirror, in a folder of the test's.
struct Cluster {
    mirror: Option<MirrorHandle>,
    dir: Dir,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(m) = self.mirror.take() {
            m.shutdown();
        }
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
        tls: None,
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        log_capacity,
        checkpoint_thresh: 1,
        checkpoint_idle: Duration::from_millis(1),
        max_lanes: 8,
        logs_at_start: 0,
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
        nvmm: Default::default(),
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
        mirror: mirror.into(),
        lanes: 1,
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: 64 << 10, max_ranges: 64 },
        async_window: 16,
        failure: FailurePolicy { reconnect: Duration::from_millis(20), ..Default::default() },
        ..PrimaryOptions::default()
    };
    RvmOptions { backend: Backend::Mojim(p), base, tracking: Some(tracking) }
}

impl Store for Cluster {
    fn create(name: &str, size: u64) -> Cluster {
        let dir = Dir::new(name);
        let (_, m) = cluster(&dir.0, size);
        Cluster { mirror: Some(m), dir }
    }

    fn options(&self, base: usize, tracking: WriteTracking) -> RvmOptions {
        options(&self.dir.0, self.mirror.as_ref().expect("running").addr(), base, tracking)
    }

    fn stored(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        mojim_region::RegionFile::open(&self.dir.0.join("region.mojim")).unwrap().read(0, &mut b);
        b
    }

    fn resized(&self, name: &str, size: u64, len: usize) -> Cluster {
        let other = Cluster::create(name, size);
        let bytes = self.stored(len);
        mojim_region::RegionFile::open(&other.dir.0.join("region.mojim")).unwrap().write(0, &bytes);
        other
    }
}

#[test]
fn pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker() {
    suite::pointer_rich_structures_come_back_at_the_same_addresses_with_either_tracker::<Cluster>()
}

#[test]
fn a_commit_sends_exactly_the_written_pages_with_the_header() {
    suite::a_commit_sends_exactly_the_written_pages_with_the_header::<Cluster>()
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    suite::bad_input_is_refused_and_changes_nothing::<Cluster>()
}

#[test]
fn recovery_refuses_a_region_of_another_size() {
    suite::recovery_refuses_a_store_of_another_size::<Cluster>()
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
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 41 };
    // Deadlines, not a count of tries: on a loaded machine the primary may take longer than
    // the 2 s (and the 5 s below) that 100 (and 250) tries 20 ms apart gave it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut failed = false;
    while std::time::Instant::now() < deadline {
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
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut sent = false;
    while std::time::Instant::now() < deadline {
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
    let Backend::Mojim(p) = &mut opts.backend else { unreachable!("the Mojim backend's options") };
    p.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    rvm.txn_commit().unwrap();
    m.shutdown();
    for i in 0..20u64 {
        // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
        unsafe { *p = i };
        rvm.txn_commit().expect("a degraded commit succeeds");
    }
    rvm.close().unwrap();
    // Recovery (degraded again: no mirror) finds the last commit in the local copy.
    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
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

/// A redo file as docs/FORMAT.md §10.3 lays it out, holding one complete commit.
fn redo_file(runs: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let bytes: u64 = runs.iter().map(|r| r.1.len() as u64).sum();
    let mut h = vec![0u8; 64];
    h[0..8].copy_from_slice(b"MOJIMRDO");
    h[8..16].copy_from_slice(&1u64.to_le_bytes());
    h[16..24].copy_from_slice(&bytes.to_le_bytes());
    h[24..28].copy_from_slice(&(runs.len() as u32).to_le_bytes());
    let mut table = Vec::new();
    for (o, b) in runs {
        table.extend_from_slice(&o.to_le_bytes());
        table.extend_from_slice(&(b.len() as u64).to_le_bytes());
    }
    let crc = mojim_format::checksum::crc32c_append(mojim_format::checksum::crc32c(&h[16..28]), &table);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&table);
    h.resize(h.len().next_multiple_of(4096), 0);
    for (_, b) in runs {
        h.extend_from_slice(b);
    }
    h
}

#[test]
fn a_commit_the_process_died_copying_is_put_back_and_sent_on_open() {
    let dir = Dir::new("replay");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let opts = options(&dir.0, m.addr(), base(8), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 5 };
    rvm.txn_commit().unwrap();
    rvm.close().unwrap();
    // The process died after the redo file held the next commit whole (the value 9) and
    // before the region did.
    let off = p as u64 - base(8) as u64;
    let page = off & !4095;
    let region = dir.0.join("region.mojim");
    let mut bytes = vec![0u8; 4096];
    mojim_region::RegionFile::open(&region).unwrap().read(page, &mut bytes);
    bytes[(off - page) as usize..][..8].copy_from_slice(&9u64.to_le_bytes());
    let mut redo = region.as_os_str().to_owned();
    redo.push(".rvm-redo");
    std::fs::write(&redo, redo_file(&[(page, bytes)])).unwrap();

    let rvm = Rvm::open(&opts).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 9, "the commit in the redo file is the memory's");
    rvm.close().unwrap();
    m.checkpoint();
    let mut v = [0u8; 8];
    m.read(off, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 9, "and the mirror's");
    let state = std::fs::read(&redo).unwrap();
    assert_eq!(state[8..16], [0; 8], "the redo file is empty once the commit is in both");
    m.shutdown();
}

/// Whether `hay` holds `needle` anywhere.
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn the_redo_file_is_private_and_holds_no_committed_bytes_once_applied() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("redo-private");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let region = dir.0.join("region.mojim");
    let redo = mojim_rvm::redo_path(&region);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let opts = options(&dir.0, m.addr(), base(12), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(mode(&redo), 0o600, "created readable by its owner only, as the region is");
    let secret = b"a committed secret, not for the redo file to keep";
    let p = rvm.alloc(4096).unwrap();
    rvm.set_usr_data(p).unwrap();
    // SAFETY: `p` is the 4096 bytes `rvm.alloc` returned, longer than `secret`; the two do not
    // overlap.
    unsafe { std::ptr::copy_nonoverlapping(secret.as_ptr(), p, secret.len()) };
    rvm.txn_commit().unwrap();
    assert!(holds(&mojim_region::RegionFile::open(&region).unwrap().view(0, 1 << 20).to_vec(), secret));
    let file = std::fs::read(&redo).unwrap();
    assert!(!holds(&file, secret), "the redo file still holds the commit it applied");
    assert!(file[16..].iter().all(|&b| b == 0), "nothing but the magic and the empty state remain");
    rvm.close().unwrap();

    // A file an earlier version left: readable by others, its last commit applied (state 0)
    // but still there. Opening makes it private and zeroes it.
    let mut old = redo_file(&[(0, vec![0x5e; 4096])]);
    old[8..16].copy_from_slice(&0u64.to_le_bytes());
    std::fs::write(&redo, &old).unwrap();
    std::fs::set_permissions(&redo, std::fs::Permissions::from_mode(0o644)).unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    assert_eq!(mode(&redo), 0o600, "an existing redo file is made private");
    let file = std::fs::read(&redo).unwrap();
    assert!(!holds(&file, &[0x5e; 64]), "the applied commit left in it is zeroed");
    // SAFETY: the recovered root block, the 4096 bytes allocated above, mapped while `rvm` lives.
    assert_eq!(unsafe { std::slice::from_raw_parts(rvm.usr_data(), secret.len()) }, secret);
    rvm.close().unwrap();
    m.shutdown();
}

/// A small tmpfs on a folder of the test's (the tests run as root; `scripts/test` does), so
/// that a file system can be made full; unmounted when dropped.
struct SmallFs(Dir);

impl SmallFs {
    fn mount(name: &str, size: &str) -> SmallFs {
        let dir = Dir::new(name);
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.0)
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount a tmpfs (as root): {}", String::from_utf8_lossy(&out.stderr));
        SmallFs(dir)
    }

    /// Takes every free block of the file system into one file, which it returns.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let p = self.0 .0.join("filler");
        let mut f = std::fs::File::create(&p).unwrap();
        while let Ok(n) = f.write(&[0xff; 64 << 10]) {
            if n == 0 {
                break;
            }
        }
        p
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0 .0).status();
    }
}

#[test]
fn a_full_file_system_fails_the_commit_before_anything_is_written_and_the_next_one_sends_it() {
    let fs = SmallFs::mount("full", "16m");
    let id = RegionId { uuid: random_uuid(), size: 2 << 20 };
    create_region(&fs.0 .0.join("region.mojim"), id).unwrap();
    let elsewhere = Dir::new("full-mirror");
    let m = mirror(&elsewhere.0, id, 8 << 20);
    let opts = options(&fs.0 .0, m.addr(), base(9), WriteTracking::UffdAsync);
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 1 };
    rvm.txn_commit().unwrap();
    // A block larger than the redo file's first MiB: the file must grow, and cannot.
    let filler = fs.fill();
    let big = rvm.alloc(1536 << 10).unwrap();
    // SAFETY: `p` (8 bytes) and `big` (1.5 MiB) are blocks `rvm.alloc` returned, mapped read-write
    // while `rvm` lives.
    unsafe {
        *p = 2;
        *big.add(1000) = 7;
    }
    match rvm.txn_commit() {
        Err(e @ RvmError::Io { .. }) => {
            let s = e.to_string();
            assert!(s.contains("rvm-redo") && s.contains("No space left"), "{s}");
        }
        other => panic!("a commit on a full file system: {other:?}"),
    }
    let mut v = [0u8; 8];
    m.checkpoint();
    m.read(p as u64 - base(9) as u64, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), 1, "the mirror holds the last commit, not part of the failed one");
    // Room again: the next commit sends what the failed one held.
    std::fs::remove_file(filler).unwrap();
    rvm.txn_commit().expect("a commit once there is room");
    rvm.close().unwrap();
    let rvm = Rvm::open(&opts).unwrap();
    let p = rvm.usr_data() as *mut u64;
    // SAFETY: `p` is the recovered root block (8 bytes), mapped while `rvm` lives.
    assert_eq!(unsafe { *p }, 2);
    // SAFETY: `big`'s allocation was committed, and the memory maps at the same base again.
    assert_eq!(unsafe { *big.add(1000) }, 7);
    rvm.close().unwrap();
    m.shutdown();
}

#[test]
fn a_second_user_of_the_same_region_is_refused_and_the_first_goes_on() {
    let dir = Dir::new("second");
    let (_, m) = cluster(&dir.0, 1 << 20);
    let rvm = Rvm::open(&options(&dir.0, m.addr(), base(10), WriteTracking::UffdAsync)).unwrap();
    let p = rvm.alloc(8).unwrap() as *mut u64;
    rvm.set_usr_data(p as *mut u8).unwrap();
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 3 };
    rvm.txn_commit().unwrap();
    // Another base address, so that only the region is shared.
    match Rvm::open(&options(&dir.0, m.addr(), base(11), WriteTracking::UffdAsync)) {
        Err(e @ RvmError::Mojim(mojim::Error::RegionLocked { .. })) => {
            assert!(e.to_string().contains("is open as primary in this process already"), "{e}")
        }
        Err(e) => panic!("a second user refused for the wrong reason: {e}"),
        Ok(_) => panic!("a second user of the same region was let in"),
    }
    // SAFETY: within the block `rvm.alloc` returned above, mapped read-write while `rvm` lives.
    unsafe { *p = 4 };
    rvm.txn_commit().expect("the first user commits on");
    rvm.close().unwrap();
    let rvm = Rvm::open(&options(&dir.0, m.addr(), base(10), WriteTracking::UffdAsync)).unwrap();
    // SAFETY: the root block recovered from the last commit, allocated as large as this read,
    // mapped while `rvm` lives.
    assert_eq!(unsafe { *(rvm.usr_data() as *mut u64) }, 4);
    rvm.close().unwrap();
    m.shutdown();
}
