//! Losing a machine: the primary survives its mirror's loss (block or degrade) and brings the
//! mirror back up to date by the cheapest complete means; an operator's promotion fences the
//! old primary and the new one resynchronises with the old backup.

mod common;

use common::{first_difference, mirror_image, wait_applied, Cluster, Rng, WAIT};
use mojim::config::OnMirrorLoss;
use mojim::{CopyKind, Primary, PrimaryOptions};
use mojim_node::admin_client::AdminClient;
use mojim_tools::child::ChildNode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn fast(o: &mut PrimaryOptions) {
    o.failure.heartbeat.interval = Duration::from_millis(50);
    o.failure.heartbeat.timeout = Duration::from_millis(1500);
    o.failure.reconnect = Duration::from_millis(50);
}

/// Options of a primary that degrades when it loses its mirror, with fast failure detection.
fn degrading(c: &Cluster) -> PrimaryOptions {
    let mut o = c.primary_options();
    fast(&mut o);
    o.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    o
}

fn cluster(name: &str, size: u64) -> Cluster {
    Cluster::new(name, size, |f| {
        f.primary.lanes = 2;
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        f.cluster.dirty_chunk = "4KiB".into();
    })
}

/// Writes `n` random ranges and syncs each; returns how many synced.
fn scribble(p: &Primary, rng: &mut Rng, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let len = rng.range(1, 9000);
        let off = rng.range(0, p.size() - len);
        p.write(off, &rng.bytes(len as usize)).expect("write");
        if p.msync(off, len).is_ok() {
            ok += 1;
        }
    }
    ok
}

fn image_of(p: &Primary) -> Vec<u8> {
    let mut v = vec![0u8; p.size() as usize];
    p.read(0, &mut v).expect("read");
    v
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Threads of this process that send or frame a copy.
fn copy_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("list this process's threads");
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("mojim-copy") || name.starts_with("mojim-frame"))
        .count()
}

fn resynced(p: &Primary) -> CopyKind {
    let st = p.wait_resync(WAIT).expect("a resynchronisation ran");
    assert!(st.done, "resync did not finish: {st:?}; {:?}", p.status());
    st.kind
}

/// Restarts the mirror on `addr` and returns the kind of copy the primary brought it back with.
fn rejoin(c: &mut Cluster, p: &Primary, addr: &str) -> CopyKind {
    restart_mirror(c, addr);
    wait_for("the primary to reconnect", || p.status().failed.is_none());
    resynced(p)
}

/// Waits until the mirror has applied every group and its copy is consistent, then checks that
/// it holds the primary's bytes.
fn assert_mirror_holds_primary(p: &Primary, a: &mut AdminClient, what: &str) {
    wait_applied(a);
    common::wait_status(a, "the copy to be consistent", |st| st.consistent);
    assert_eq!(first_difference(&image_of(p), &mirror_image(a, p.size())), None, "{what}");
}

#[test]
fn degraded_primary_keeps_going_and_resyncs_by_bitmap() {
    let mut rng = Rng::new(common::seed("degrade"));
    let mut c = cluster("degrade", 4 << 20);
    c.start_mirror();
    let o = degrading(&c);
    let p = Primary::open(&o).expect("open");
    assert_eq!(scribble(&p, &mut rng, 50), 50);
    let addr = c.mirror_addr();
    c.kill_mirror();
    wait_for("the primary to notice", || p.status().failed.is_some());
    let st = p.status();
    assert!(st.degraded && st.vulnerable_us.is_some(), "{st:?}");
    // Degraded sync points return: the primary's own copy is persistent.
    assert_eq!(scribble(&p, &mut rng, 40), 40);
    assert!(p.status().dirty_bytes > 0);
    assert_eq!(rejoin(&mut c, &p, &addr), CopyKind::Bitmap);
    assert_eq!(p.status().dirty_bytes, 0, "a finished bitmap resync clears the bitmap");
    assert_eq!(scribble(&p, &mut rng, 10), 10);
    assert_mirror_holds_primary(&p, &mut c.admin(), "after a bitmap copy");
}

#[test]
fn blocking_primary_fails_closed_then_catches_up_from_its_metadata_log() {
    let mut rng = Rng::new(common::seed("block"));
    let mut c = cluster("block", 4 << 20);
    c.start_mirror();
    let mut o = c.primary_options();
    fast(&mut o);
    let p = Primary::open(&o).expect("open");
    assert_eq!(scribble(&p, &mut rng, 30), 30);
    let addr = c.mirror_addr();
    c.kill_mirror();
    wait_for("the primary to notice", || p.status().failed.is_some());
    let e = p.msync(0, 10).expect_err("block fails closed");
    assert!(matches!(e, mojim::Error::MirrorLost { .. }), "{e}");
    restart_mirror(&mut c, &addr);
    wait_for("the primary to reconnect", || p.status().failed.is_none());
    assert_eq!(scribble(&p, &mut rng, 30), 30);
    let mut a = c.admin();
    wait_applied(&mut a);
    assert_eq!(first_difference(&image_of(&p), &mirror_image(&mut a, p.size())), None);
}

#[test]
fn a_wiped_or_discarded_mirror_gets_a_full_copy() {
    let mut rng = Rng::new(common::seed("full"));
    let mut c = cluster("full", 8 << 20);
    c.start_mirror();
    let o = degrading(&c);
    let p = Primary::open(&o).expect("open");
    scribble(&p, &mut rng, 50);
    let addr = c.mirror_addr();
    c.kill_mirror();
    // Until the primary notices, its old session still looks healthy (no failure recorded).
    wait_for("the primary to notice", || p.status().failed.is_some());
    std::fs::remove_dir_all(c.dir.path().join("mirror")).expect("wipe the mirror");
    assert_eq!(rejoin(&mut c, &p, &addr), CopyKind::Full);
    let mut a = c.admin();
    wait_applied(&mut a);
    assert_eq!(first_difference(&image_of(&p), &mirror_image(&mut a, p.size())), None, "after a full copy");

    // The operator discards the mirror's copy (split-brain resolution): the next session copies
    // everything again.
    drop(p);
    let out = std::process::Command::new(common::exe())
        .args(["resolve", "--config", c.cfg_path.to_str().unwrap(), "--discard", &addr])
        .output()
        .expect("run mojim resolve");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!c.admin().status().expect("status").consistent);
    let p = Primary::open(&o).expect("reopen");
    assert_eq!(resynced(&p), CopyKind::Full);
    scribble(&p, &mut rng, 5);
    assert_mirror_holds_primary(&p, &mut a, "after discard");
}

#[test]
fn a_mirror_lost_in_the_middle_of_a_full_copy_fails_the_copy_and_the_next_one_completes() {
    // The copy's sender fails on a dead connection while its framing thread may be waiting for
    // the sender: the copy must still end, in failure, and the primary degrade.
    let mut c = cluster("lost-copy", 128 << 20);
    c.start_mirror();
    let o = degrading(&c);
    let p = Primary::open(&o).expect("open");
    p.write(0, &[7u8; 4096]).expect("write");
    p.msync(0, 4096).expect("msync");
    let addr = c.mirror_addr();
    c.kill_mirror();
    wait_for("the primary to notice", || p.status().failed.is_some());
    std::fs::remove_dir_all(c.dir.path().join("mirror")).expect("wipe the mirror");
    restart_mirror(&mut c, &addr);
    // Freeze the mirror mid-copy: the sender soon blocks on full socket buffers.
    wait_for("the full copy to be under way", || {
        p.status().resync.is_some_and(|r| r.kind == CopyKind::Full && r.sent_bytes > 0)
    });
    c.mirror.as_ref().expect("restarted").freeze().expect("SIGSTOP the mirror");
    let caught = p.status().resync.expect("a copy runs");
    assert!(!caught.done && caught.error.is_none(), "the copy ended before the mirror froze: {caught:?}");
    c.kill_mirror();
    wait_for("the copy to fail", || p.status().resync.is_some_and(|r| r.error.is_some()));
    let st = p.status();
    assert!(st.degraded && st.failed.is_some(), "{st:?}");
    assert!(st.resync.as_ref().is_some_and(|r| !r.done && r.sent_bytes < r.total_bytes), "{st:?}");
    // And the copy's threads are gone, not stuck on each other (other tests' copies end too).
    wait_for("the copy threads to end", || copy_threads() == 0);

    // The next session copies everything again, and the mirror ends identical.
    std::fs::remove_dir_all(c.dir.path().join("mirror")).expect("wipe the mirror");
    assert_eq!(rejoin(&mut c, &p, &addr), CopyKind::Full);
    assert_mirror_holds_primary(&p, &mut c.admin(), "after the next full copy");
}

#[test]
fn a_full_copy_of_a_region_being_written_resends_what_changed_on_the_way() {
    // Copy frames go straight from the region: stores into a frame between its checksum and its
    // send make the mirror find it changed, ask for it again, and the copy resend it.
    const FRAME: u64 = 256 << 10;
    let mut c = cluster("hot-copy", 16 << 20);
    c.start_mirror();
    let o = degrading(&c);
    let p = Primary::open(&o).expect("open");
    let addr = c.mirror_addr();
    c.kill_mirror();
    wait_for("the primary to notice", || p.status().failed.is_some());
    std::fs::remove_dir_all(c.dir.path().join("mirror")).expect("wipe the mirror");
    let stop = AtomicBool::new(false);
    let st = std::thread::scope(|s| {
        // A store into every frame of the region, again and again, until the copy is over.
        s.spawn(|| {
            let mut v = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for f in 0..p.size() / FRAME {
                    p.write(f * FRAME + 8 * (v % 512), &v.to_le_bytes()).expect("store");
                }
                v += 1;
            }
        });
        restart_mirror(&mut c, &addr);
        wait_for("the primary to reconnect", || p.status().failed.is_none());
        let st = p.wait_resync(WAIT).expect("a resynchronisation ran");
        stop.store(true, Ordering::Relaxed);
        st
    });
    assert!(st.done && st.kind == CopyKind::Full, "{st:?}");
    assert!(st.resent_bytes > 0, "stores during the copy changed no frame on the way: {st:?}");
    let mut a = c.admin();
    assert!(a.status().expect("status").copy_retries > 0);
    // What the stores left is synced (and so replicated) after the copy, piece by piece.
    for off in (0..p.size()).step_by(1 << 20) {
        p.msync(off, 1 << 20).expect("msync");
    }
    assert_mirror_holds_primary(&p, &mut a, "after a copy of a region being written");
}

/// Restarts the mirror on its old address (a few tries: the port may be briefly taken).
fn restart_mirror(c: &mut Cluster, addr: &str) {
    for _ in 0..50 {
        let cfg = c.cfg_path.to_str().unwrap().to_string();
        let args = ["serve", "--config", &cfg, "--listen", addr];
        if let Ok(m) = ChildNode::spawn(common::exe(), &args) {
            c.mirror = Some(m);
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("cannot restart the mirror on {addr}");
}

fn spawn_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> mojim::Result<ChildNode> {
    let dir = c.dir.path().join(name);
    let mut args = vec!["serve", "--config", c.cfg_path.to_str().unwrap(), "--listen", listen];
    args.extend(["--dir", dir.to_str().unwrap()]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(common::exe(), &args)
}

fn start_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> ChildNode {
    spawn_node(c, name, listen, backups).expect("start a node")
}

#[test]
fn promotion_fences_the_old_primary_and_the_backup_becomes_the_mirror() {
    let mut rng = Rng::new(common::seed("promote"));
    let c = cluster("promote", 4 << 20);
    let backup = start_node(&c, "b", "127.0.0.1:0", &[]);
    let mirror = start_node(&c, "m", "127.0.0.1:0", &[backup.addr()]);
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = mirror.addr().to_string();
    fast(&mut o);
    let old = Primary::open(&o).expect("open");
    assert_eq!(scribble(&old, &mut rng, 60), 60);
    let acked = image_of(&old);

    // The operator promotes the mirror while the old primary still runs (a partition).
    let out = std::process::Command::new(common::exe())
        .args(["promote", "--config", c.cfg_path.to_str().unwrap(), "--addr", mirror.addr()])
        .args(["--peer", backup.addr()])
        .output()
        .expect("run mojim promote");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(reply["backups_drained"], true, "{reply}");
    let epoch = reply["epoch"].as_u64().unwrap();

    // The old primary can no longer get anything acknowledged.
    wait_for("the old primary to be fenced", || old.msync(0, 1).is_err());
    assert!(old.msync(0, 1).is_err());

    // The application restarts on the promoted node, with the backup as its mirror.
    let mut o2 = o.clone();
    o2.region_path = c.dir.path().join("m").join("data.mojim");
    o2.mirror = backup.addr().to_string();
    let p = Primary::open(&o2).expect("open the promoted copy");
    assert_eq!(p.status().epoch, epoch);
    assert_eq!(first_difference(&acked, &image_of(&p)), None, "every acknowledged group survived");
    assert_eq!(resynced(&p), CopyKind::Bitmap, "the drained backup needs only what changed since");
    assert_eq!(scribble(&p, &mut rng, 30), 30);
    let mut a = AdminClient::connect(backup.addr(), &c.secret(), Duration::from_secs(5)).unwrap();
    let st = wait_applied(&mut a);
    assert_eq!(st.epoch, epoch);
    assert_eq!(first_difference(&image_of(&p), &mirror_image(&mut a, p.size())), None);

    // The promoted node refuses to serve as a replica while its copy is the primary's.
    let mut o3 = o.clone();
    o3.mirror = mirror.addr().to_string();
    o3.region_path = c.dir.path().join("x.mojim");
    mojim::create_region(&o3.region_path, c.cfg.region_id().unwrap()).unwrap();
    let e = Primary::open(&o3).err().expect("the primary's node refuses sessions");
    assert!(e.to_string().contains("primary"), "{e}");
}

/// Starts a node again on its old address (a few tries: the port may be briefly taken).
fn restart_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> ChildNode {
    for _ in 0..50 {
        if let Ok(n) = spawn_node(c, name, listen, backups) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("cannot restart {name} on {listen}");
}

/// The mirror and its backup hold the primary's image, are consistent, and share a history.
fn converged(p: &Primary, m: &mut AdminClient, b: &mut AdminClient, what: &str) {
    let image = image_of(p);
    let mst = common::wait_status(m, "the mirror to be consistent and applied", |st| {
        st.consistent && st.applied_seq >= st.last_received_seq
    });
    let bst =
        common::wait_status(b, "the backup to take the mirror's history, consistent, and catch up", |st| {
            st.consistent && st.generation == mst.generation && st.applied_seq >= mst.applied_seq
        });
    assert_ne!(bst.generation, "0x0", "{what}");
    assert_eq!(first_difference(&image, &mirror_image(m, p.size())), None, "{what}: mirror");
    assert_eq!(first_difference(&image, &mirror_image(b, p.size())), None, "{what}: backup");
}

#[test]
fn a_mirror_passes_the_copies_it_gets_on_to_its_backup() {
    let mut rng = Rng::new(common::seed("pass-on"));
    let c = cluster("pass-on", 4 << 20);
    let backup = start_node(&c, "b", "127.0.0.1:0", &[]);
    let mut mirror = start_node(&c, "m", "127.0.0.1:0", &[backup.addr()]);
    let m_addr = mirror.addr().to_string();
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = m_addr.clone();
    fast(&mut o);
    o.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let p = Primary::open(&o).expect("open");
    scribble(&p, &mut rng, 40);
    let admin = |addr: &str| AdminClient::connect(addr, &c.secret(), Duration::from_secs(5)).expect("admin");
    let mut b = admin(backup.addr());
    converged(&p, &mut admin(&m_addr), &mut b, "before");

    // The mirror is away while the application goes on: it comes back to a bitmap copy, which
    // reaches the backup through it while the application keeps writing.
    mirror.kill();
    scribble(&p, &mut rng, 40);
    wait_for("the primary to notice", || p.status().failed.is_some());
    mirror = restart_node(&c, "m", &m_addr, &[backup.addr()]);
    wait_for("the primary to reconnect", || p.status().failed.is_none());
    scribble(&p, &mut rng, 20);
    assert_eq!(resynced(&p), CopyKind::Bitmap);
    scribble(&p, &mut rng, 5);
    converged(&p, &mut admin(&m_addr), &mut b, "after a bitmap copy");

    // The mirror loses everything: a full copy into it, and its backup (whose history the new,
    // empty copy does not share) is copied from it.
    mirror.kill();
    std::fs::remove_dir_all(c.dir.path().join("m")).expect("wipe the mirror");
    scribble(&p, &mut rng, 10);
    wait_for("the primary to notice", || p.status().failed.is_some());
    let _mirror = restart_node(&c, "m", &m_addr, &[backup.addr()]);
    wait_for("the primary to reconnect", || p.status().failed.is_none());
    scribble(&p, &mut rng, 20);
    assert_eq!(resynced(&p), CopyKind::Full);
    scribble(&p, &mut rng, 5);
    converged(&p, &mut admin(&m_addr), &mut b, "after a full copy");
}

#[test]
fn unreplicated_writes_reach_a_mirror_later() {
    let mut rng = Rng::new(common::seed("unreplicated"));
    let mut c = cluster("unreplicated", 4 << 20);
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    fast(&mut o);
    o.mode = mojim::Mode::Unreplicated;
    let p = Primary::open(&o).expect("open unreplicated");
    assert_eq!(scribble(&p, &mut rng, 20), 20);
    drop(p);
    c.start_mirror();
    o.mode = mojim::Mode::Sync;
    o.mirror = c.mirror_addr();
    let p = Primary::open(&o).expect("open replicated");
    assert_eq!(resynced(&p), CopyKind::Full, "a new mirror gets everything written before");
    let mut a = c.admin();
    wait_applied(&mut a);
    assert_eq!(first_difference(&image_of(&p), &mirror_image(&mut a, p.size())), None);
    drop(p);
    // Unreplicated again, then back: only what changed meanwhile is copied.
    o.mode = mojim::Mode::Unreplicated;
    let p = Primary::open(&o).expect("open unreplicated again");
    assert_eq!(scribble(&p, &mut rng, 5), 5);
    drop(p);
    o.mode = mojim::Mode::Sync;
    let p = Primary::open(&o).expect("open replicated again");
    assert_eq!(resynced(&p), CopyKind::Bitmap);
    wait_applied(&mut a);
    assert_eq!(first_difference(&image_of(&p), &mirror_image(&mut a, p.size())), None);
}

#[test]
fn when_primary_and_mirror_are_both_lost_a_backup_takes_over_with_its_snapshot() {
    let mut rng = Rng::new(common::seed("double"));
    let c = cluster("double", 2 << 20);
    let backup = start_node(&c, "b", "127.0.0.1:0", &[]);
    let mut mirror = start_node(&c, "m", "127.0.0.1:0", &[backup.addr()]);
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = mirror.addr().to_string();
    fast(&mut o);
    let p = Primary::open(&o).expect("open");
    assert_eq!(scribble(&p, &mut rng, 40), 40);
    let acked = image_of(&p);
    // Both the primary and the mirror are lost.
    mirror.kill();
    drop(p);
    let out = std::process::Command::new(common::exe())
        .args(["promote", "--config", c.cfg_path.to_str().unwrap(), "--addr", backup.addr()])
        .output()
        .expect("run mojim promote");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The promotion applied everything the backup had: its snapshot.
    let mut b = AdminClient::connect(backup.addr(), &c.secret(), Duration::from_secs(5)).unwrap();
    let before = b.status().expect("status");
    let snapshot = mirror_image(&mut b, acked.len() as u64);
    let mut o2 = o.clone();
    o2.region_path = c.dir.path().join("b").join("data.mojim");
    o2.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let p2 = Primary::open(&o2).expect("the application on the backup's copy, without a mirror");
    assert_eq!(
        first_difference(&snapshot, &image_of(&p2)),
        None,
        "the backup's snapshot as of group {}",
        before.applied_seq
    );
    assert!(p2.status().degraded);
    assert_eq!(scribble(&p2, &mut rng, 5), 5, "it keeps going, degraded");
    // What it lost is bounded by secondary_tier_thresh; here the backup had kept up.
    let lost = acked.iter().zip(&snapshot).filter(|(a, b)| a != b).count();
    println!("the backup's snapshot (group {}) lacks {lost} bytes of the primary's", before.applied_seq);
}
