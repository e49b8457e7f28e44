//! In-process round trips: a mirror on loopback and a primary in the same test.

use mojim::config::random_uuid;
use mojim::{create_region, Limits, Mode, Primary, PrimaryOptions, Range, RegionId, Secret};
use mojim_node::{Mirror, MirrorOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mojim-it-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn mirror_opts(dir: &Path, id: RegionId) -> MirrorOptions {
    MirrorOptions {
        dir: dir.join("mirror"),
        log_dir: dir.join("mirror"),
        listen: "127.0.0.1:0".into(),
        region: id,
        secret: Secret(b"test-secret".to_vec()),
        tls: None,
        limits: Limits { max_frame: 4096, max_ranges: 64 },
        log_capacity: 1 << 20,
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

fn primary_opts(dir: &Path, addr: &str, mode: Mode, lanes: u16) -> PrimaryOptions {
    PrimaryOptions {
        region_path: dir.join("region.mojim"),
        mode,
        mirror: addr.into(),
        lanes,
        secret: Secret(b"test-secret".to_vec()),
        limits: Limits { max_frame: 4096, max_ranges: 64 },
        async_window: 16,
        ..PrimaryOptions::default()
    }
}

#[test]
fn msync_reaches_the_mirror_in_every_mode() {
    let dir = tmpdir("modes");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let m = Mirror::open(mirror_opts(&dir, id)).unwrap().serve().unwrap();
    for (i, mode) in [Mode::Sync, Mode::SyncFlush, Mode::Async].into_iter().enumerate() {
        let p = Primary::open(&primary_opts(&dir, m.addr(), mode, 2)).unwrap();
        let off = i as u64 * 10_000;
        let data: Vec<u8> = (0..9000u32).map(|x| (x % 251) as u8 ^ i as u8).collect();
        p.write(off, &data).unwrap();
        p.gmsync(&[Range::new(off, 5000), Range::new(off + 5000, 4000)]).unwrap();
        p.close().unwrap();
        m.checkpoint();
        let mut got = vec![0u8; data.len()];
        m.read(off, &mut got).unwrap();
        assert!(got == data, "mode {mode}: mirror differs from primary; status {:?}", m.status());
    }
    let st = m.status();
    assert_eq!(st.sessions, 3);
    m.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn out_of_range_msync_is_refused_and_changes_nothing() {
    let dir = tmpdir("range");
    let id = RegionId { uuid: random_uuid(), size: 1 << 16 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let m = Mirror::open(mirror_opts(&dir, id)).unwrap().serve().unwrap();
    let p = Primary::open(&primary_opts(&dir, m.addr(), Mode::Sync, 1)).unwrap();
    let e = p.msync(1 << 16, 1).unwrap_err().to_string();
    assert!(e.contains("outside the region"), "{e}");
    assert!(p.msync(u64::MAX, 2).is_err());
    assert!(p.msync_ptr(std::ptr::null(), 1).unwrap_err().to_string().contains("not inside the region"));
    // The session still works.
    p.write(0, b"ok").unwrap();
    p.msync(0, 2).unwrap();
    assert_eq!(m.status().groups_received, 1);
    drop(p);
    m.shutdown();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A node and a primary in one process over the in-memory transport: the handshake, lanes,
/// acknowledgements, the operator's client and the node's shutdown all go through `Transport`,
/// none of them through TCP.
#[test]
fn a_node_and_a_primary_run_over_the_in_memory_transport() {
    use mojim_transport::MemTransport;
    let dir = tmpdir("mem");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let net = MemTransport::new();
    let mut opts = mirror_opts(&dir, id);
    opts.listen = "mirror:0".into();
    let m = Mirror::open(opts).unwrap().serve_with(net.clone()).unwrap();
    let p = Primary::open_with(net.clone(), &primary_opts(&dir, m.addr(), Mode::Sync, 2)).unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|x| (x % 253) as u8).collect();
    p.write(4096, &data).unwrap();
    p.gmsync(&[Range::new(4096, 12_000), Range::new(16_096, 8_000)]).unwrap();
    p.msync(4096, 100).unwrap();
    let secret = Secret(b"test-secret".to_vec());
    let mut admin =
        mojim_node::admin_client::AdminClient::connect_with(&net, m.addr(), &secret, Duration::from_secs(5))
            .unwrap();
    let st = admin.status().unwrap();
    assert_eq!((st.sessions, st.session_lanes), (1, 2), "{st:?}");
    m.checkpoint();
    assert_eq!(admin.read(4096, data.len() as u64).unwrap(), data);
    p.close().unwrap();
    drop(admin);
    // Shutting down wakes the acceptor through the transport it accepts on.
    m.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A mirror feeds its backup over the in-memory transport too: the forwarder's link and its
/// operator's connection (for a reset) go through `Transport`.
#[test]
fn a_mirror_feeds_its_backup_over_the_in_memory_transport() {
    use mojim_transport::MemTransport;
    let dir = tmpdir("mem-backup");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let net = MemTransport::new();
    let mut b_opts = mirror_opts(&dir.join("b"), id);
    b_opts.listen = "backup:0".into();
    let backup = Mirror::open(b_opts).unwrap().serve_with(net.clone()).unwrap();
    let mut m_opts = mirror_opts(&dir, id);
    m_opts.listen = "mirror:0".into();
    m_opts.backups = vec![backup.addr().to_string()];
    let m = Mirror::open(m_opts).unwrap().serve_with(net.clone()).unwrap();
    let p = Primary::open_with(net.clone(), &primary_opts(&dir, m.addr(), Mode::Sync, 2)).unwrap();
    let data: Vec<u8> = (0..30_000u32).map(|x| (x % 241) as u8).collect();
    for (i, chunk) in data.chunks(3000).enumerate() {
        let off = 8192 + i as u64 * 3000;
        p.write(off, chunk).unwrap();
        p.msync(off, chunk.len() as u64).unwrap();
    }
    let last = m.status().last_received_seq;
    let t0 = std::time::Instant::now();
    while backup.status().applied_seq < last {
        assert!(t0.elapsed() < Duration::from_secs(30), "the backup did not catch up: {:?}", backup.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut got = vec![0u8; data.len()];
    backup.read(8192, &mut got).unwrap();
    assert!(got == data, "the backup differs from the primary: {:?}", backup.status());
    p.close().unwrap();
    m.shutdown();
    backup.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A copy into the mirror reads the region only while the application holds no batch
/// (`Primary::hold_copies`): bytes stored under the hold and changed again before it ends
/// never reach the mirror in their first form.
#[test]
fn a_copy_waits_while_the_application_holds_copies() {
    let dir = tmpdir("hold-copies");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    // A history first, so that a new mirror later needs a full copy.
    let first = Mirror::open(mirror_opts(&dir, id)).unwrap().serve().unwrap();
    let p = Primary::open(&primary_opts(&dir, first.addr(), Mode::Sync, 1)).unwrap();
    p.write(0, &[1u8; 4096]).unwrap();
    p.msync(0, 4096).unwrap();
    p.close().unwrap();
    first.shutdown();

    // The primary opens while its new mirror is not there yet (degrade), then holds copies.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let mut opts = primary_opts(&dir, &addr, Mode::Sync, 1);
    opts.failure.on_mirror_loss = mojim::config::OnMirrorLoss::Degrade;
    opts.failure.reconnect = Duration::from_millis(20);
    let p = Primary::open(&opts).unwrap();
    let hold = p.hold_copies();
    let half = 300_000;
    p.write(half, &[0xAA; 4096]).unwrap();

    let mut mo = mirror_opts(&dir, id);
    mo.dir = dir.join("second");
    mo.log_dir = dir.join("second");
    mo.listen = addr.clone();
    let second = Mirror::open(mo).unwrap().serve().unwrap();
    // The copy begins (the session is up) and waits: without the hold it would be over well
    // within this time, carrying the first form.
    let began = std::time::Instant::now();
    while p.status().resync.is_none() {
        assert!(began.elapsed() < Duration::from_secs(20), "no copy began: {:?}", p.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(!p.status().resync.unwrap().done, "the copy ended while copies were held");
    p.write(half, &[0xBB; 4096]).unwrap();
    drop(hold);
    let r = p.wait_resync(Duration::from_secs(60)).expect("a copy ran");
    assert!(r.done && r.error.is_none(), "copy: {r:?}");
    p.close().unwrap();
    second.checkpoint();
    let mut got = vec![0u8; 4096];
    second.read(half, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0xBB), "the mirror holds bytes stored under the hold: {:?}", &got[..8]);
    second.read(0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 1), "the copy missed the history");
    second.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same round trips through shared memory: a mirror listening on a path, a primary whose
/// mirror address is that path.
#[test]
fn msync_reaches_a_mirror_through_shared_memory() {
    let dir = tmpdir("shm");
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let sock = format!("/dev/shm/mojim-it-{}-shm.sock", std::process::id());
    let mut mo = mirror_opts(&dir, id);
    mo.listen = sock.clone();
    let m = Mirror::open(mo).unwrap().serve().unwrap();
    assert_eq!(m.addr(), sock);
    for (i, mode) in [Mode::Sync, Mode::SyncFlush, Mode::Async].into_iter().enumerate() {
        let mut po = primary_opts(&dir, &sock, mode, 2);
        po.busy_poll = Duration::from_micros(20 * i as u64);
        let p = Primary::open(&po).unwrap();
        for round in 0..50u64 {
            let off = i as u64 * 100_000 + round * 997;
            let data: Vec<u8> = (0..9000u32).map(|x| (x % 251) as u8 ^ round as u8).collect();
            p.write(off, &data).unwrap();
            p.gmsync(&[Range::new(off, 5000), Range::new(off + 5000, 4000)]).unwrap();
        }
        p.close().unwrap();
    }
    m.checkpoint();
    let mut want = vec![0u8; 1 << 20];
    let region = mojim_region::RegionFile::open(&dir.join("region.mojim")).unwrap();
    region.view(0, want.len()).read(0, &mut want);
    let mut got = vec![0u8; 1 << 20];
    m.read(0, &mut got).unwrap();
    assert!(got == want, "the mirror differs from the primary; status {:?}", m.status());
    m.shutdown();
    assert!(!std::path::Path::new(&sock).exists(), "the mirror removes its socket");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emulated NVMM is charged where each mode persists: on the mirror (its logs and data area)
/// in `sync`, on the primary's region in `unreplicated`; without a model nothing is charged and
/// neither status shows one. (On memory, /dev/shm: a file on a disk pays msync, not the model.)
#[test]
fn the_emulated_nvmm_is_charged_where_each_mode_persists() {
    let dir = Path::new("/dev/shm").join(format!("mojim-it-{}-nvmm", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let id = RegionId { uuid: random_uuid(), size: 1 << 20 };
    create_region(&dir.join("region.mojim"), id).unwrap();
    let model = mojim::config::NvmmModel { barrier: Duration::from_nanos(200), write_bytes_per_s: 0 };
    let syncs = |p: &Primary| {
        for i in 0..10u64 {
            p.write(i * 4096, &[i as u8 + 1; 4096]).unwrap();
            p.msync(i * 4096, 4096).unwrap();
        }
    };

    let m = Mirror::open(mirror_opts(&dir, id)).unwrap().serve().unwrap();
    let p = Primary::open(&primary_opts(&dir, m.addr(), Mode::Sync, 1)).unwrap();
    syncs(&p);
    assert!(p.status().nvmm.is_none(), "no model, no report: {:?}", p.status());
    p.close().unwrap();
    m.checkpoint();
    assert!(m.status().nvmm.is_none(), "{:?}", m.status());
    m.shutdown();

    let mut mo = mirror_opts(&dir, id);
    mo.nvmm = model;
    let m = Mirror::open(mo).unwrap().serve().unwrap();
    let mut po = primary_opts(&dir, m.addr(), Mode::Sync, 1);
    po.nvmm = model;
    let p = Primary::open(&po).unwrap();
    syncs(&p);
    let local = p.status().nvmm.expect("the primary reports its model");
    assert_eq!(local.barrier_ns, 200);
    assert!(local.bytes < 4096, "sync does not persist the data on the primary: {local:?}");
    p.close().unwrap();
    m.checkpoint();
    let st = m.status().nvmm.expect("the mirror reports its model");
    assert!(st.barriers >= 10 && st.bytes >= 10 * 4096, "every group's log records at least: {st:?}");
    assert!(st.delay_ns >= st.barriers * 200, "{st:?}");
    m.shutdown();

    po.mode = Mode::Unreplicated;
    let p = Primary::open(&po).unwrap();
    let before = p.status().nvmm.expect("the primary reports its model");
    syncs(&p);
    let after = p.status().nvmm.expect("the primary reports its model");
    assert!(after.barriers >= before.barriers + 10, "{before:?} then {after:?}");
    assert!(after.bytes >= before.bytes + 10 * 4096, "{before:?} then {after:?}");
    p.close().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
