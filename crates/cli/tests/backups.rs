//! The secondary tier: a mirror feeds backups in the background. A backup's data area is always
//! the primary's image as of some sequence number (a snapshot), under concurrent load, across a
//! backup restart, and while `secondary_tier_thresh` stalls the primary behind a slow link.

mod common;

use common::{first_difference, mirror_image, Cluster, Rng, WAIT};
use mojim::{Primary, Range};
use mojim_node::admin_client::AdminClient;
use mojim_tools::child::ChildNode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One acknowledged group: its sequence number and what it wrote.
struct Group {
    seq: u64,
    writes: Vec<(u64, Vec<u8>)>,
}

fn admin(node: &ChildNode, c: &Cluster) -> AdminClient {
    AdminClient::connect(node.addr(), &c.secret(), Duration::from_secs(5)).expect("admin connection")
}

/// Starts the backup again from its folder `dir` on `addr` (the running mirror keeps feeding that
/// address); the cluster's configuration must feed nobody by then (`c.feed(&[], ..)`). The
/// address of the backup just killed may not be free yet (UCX's listener says "Device is busy"
/// until the old one's socket is gone): the start is tried again for up to [`common::WAIT`].
fn restart_backup(c: &Cluster, addr: &str, dir: &std::path::Path) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let args = ["serve", "--config", cfg, "--listen", addr, "--dir", dir.to_str().expect("utf-8")];
    let t0 = std::time::Instant::now();
    loop {
        match ChildNode::spawn(common::exe(), &args) {
            Ok(n) => return n,
            Err(e) if t0.elapsed() < common::WAIT => {
                eprintln!("restarting the backup on {addr}: {e}; trying again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("restart the backup on {addr}: {e}"),
        }
    }
}

/// Random groups from `threads` threads, each in its own part of the region; returns every
/// acknowledged group.
fn load(p: &Primary, threads: u64, groups: usize, seed: u64, size: u64) -> Vec<Group> {
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let done = &done;
            s.spawn(move || {
                let mut rng = Rng::new(seed ^ ((t + 1) * 0x9E37_79B9));
                let part = size / threads;
                for _ in 0..groups {
                    let mut writes = Vec::new();
                    for _ in 0..rng.range(1, 4) {
                        let len = rng.range(1, 3000);
                        let off = t * part + rng.range(0, part - len);
                        let bytes = rng.bytes(len as usize);
                        p.write(off, &bytes).expect("write");
                        writes.push((off, bytes));
                    }
                    let ranges: Vec<Range> =
                        writes.iter().map(|(o, b)| Range::new(*o, b.len() as u64)).collect();
                    let t = p.persist(&ranges).expect("persist");
                    p.wait(t).expect("wait");
                    done.lock().expect("lock").push(Group { seq: t.seq(), writes });
                }
            });
        }
    });
    let mut all = done.into_inner().expect("lock");
    all.sort_by_key(|g| g.seq);
    all
}

/// The sequence number `k` in `from ..= to` such that `image` is exactly the groups up to `k`
/// applied in order to a zero region, if there is one.
fn snapshot_of(groups: &[Group], image: &[u8], from: u64, to: u64) -> Option<u64> {
    let mut model = vec![0u8; image.len()];
    let mut i = 0;
    for k in 0..=to {
        while i < groups.len() && groups[i].seq <= k {
            for (off, b) in &groups[i].writes {
                model[*off as usize..*off as usize + b.len()].copy_from_slice(b);
            }
            i += 1;
        }
        if k >= from && model == image {
            return Some(k);
        }
    }
    None
}

fn wait_caught_up(m: &mut AdminClient) -> mojim_node::MirrorStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let st = m.status().expect("status");
        let caught_up = st.lag_groups == 0
            && st.backups.iter().all(|b| b.connected && b.lag_groups == 0 && b.acked_seq >= st.applied_seq);
        if caught_up {
            return st;
        }
        assert!(Instant::now() < deadline, "backups did not catch up: {st:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_backup_is_always_a_snapshot_of_the_primary() {
    let mut c = Cluster::new("backup-snapshot", 1 << 20, |f| {
        f.primary.lanes = 2;
        f.mirror.log_capacity = "1MiB".into();
        f.limits.max_frame = "4KiB".into();
    });
    let backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let size = c.size();
    let mut b = admin(&backup, &c);
    let seed = common::seed("backup-snapshot");
    // Snapshots are taken while the load runs, then checked against the groups.
    let mut shots: Vec<(u64, Vec<u8>, u64)> = Vec::new();
    let groups = std::thread::scope(|s| {
        let h = s.spawn(|| load(&p, 3, 300, seed, size));
        while !h.is_finished() {
            // The image holds the groups applied when it was read: at least those applied
            // before, at most those received by the time it was read.
            let before = b.status().expect("status").applied_seq;
            let image = b.read(0, size).expect("read the backup");
            let after = b.status().expect("status").last_received_seq;
            shots.push((before, image, after));
            std::thread::sleep(Duration::from_millis(15));
        }
        h.join().expect("load")
    });
    let mut m = c.admin();
    let st = wait_caught_up(&mut m);
    assert_eq!(st.backups.len(), 1);
    let last = groups.last().expect("groups").seq;
    shots.push((last, b.read(0, size).expect("read the backup"), last));
    assert!(b.status().expect("status").role == "backup");
    for (before, image, after) in &shots {
        assert!(
            snapshot_of(&groups, image, *before, *after).is_some(),
            "a backup image read between applied_seq {before} and received seq {after} is not the primary's \
             groups up to any of those sequence numbers; seed {seed}"
        );
    }
    assert!(shots.len() > 2, "the load ran long enough to take snapshots while it ran");
    let mut primary = vec![0u8; size as usize];
    p.read(0, &mut primary).expect("read");
    assert_eq!(first_difference(&primary, &mirror_image(&mut b, size)), None);
}

#[test]
fn a_restarted_backup_catches_up() {
    let mut c = Cluster::new("backup-restart", 1 << 20, |f| {
        f.primary.lanes = 2;
        f.mirror.log_capacity = "4MiB".into();
    });
    let mut backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let size = c.size();
    let seed = common::seed("backup-restart");
    load(&p, 2, 100, seed, size);
    let addr = backup.addr().to_string();
    backup.kill();
    // The mirror keeps acknowledging (the lag stays under the threshold) and keeps the groups.
    load(&p, 2, 100, seed ^ 1, size);
    let lagging = c.admin().status().expect("status");
    assert!(!lagging.backups[0].connected || lagging.backups[0].lag_groups > 0, "{lagging:?}");
    // Back on the same address, from the same folder: it recovers, then catches up. (The
    // running mirror keeps its backups; the backup itself must feed nobody.)
    c.feed(&[], |_| {});
    let backup = restart_backup(&c, &addr, &c.dir.path().join("backup"));
    let mut m = c.admin();
    wait_caught_up(&mut m);
    let mut primary = vec![0u8; size as usize];
    p.read(0, &mut primary).expect("read");
    let mut b = admin(&backup, &c);
    assert_eq!(first_difference(&primary, &mirror_image(&mut b, size)), None, "seed {seed}");
}

#[test]
fn a_slow_backup_link_stalls_the_primary_past_the_threshold_and_releases_it() {
    let mut c = Cluster::new("backup-stall", 1 << 20, |f| {
        f.primary.lanes = 1;
        f.mirror.log_capacity = "4MiB".into();
    });
    let backup = c.start_backup("backup");
    c.feed(&[&backup], |f| {
        f.mirror.secondary_tier_thresh = "64KiB".into();
        f.mirror.secondary_rate_limit = "1MiB/s".into();
    });
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    // 64 groups of 16 KiB = 1 MiB through a 1 MiB/s link with 64 KiB of slack: about a second,
    // most of it spent stalled.
    let t0 = Instant::now();
    let data = vec![0xA5u8; 16 << 10];
    for i in 0..64u64 {
        p.write(i * (16 << 10), &data).expect("write");
        p.msync(i * (16 << 10), 16 << 10).expect("msync");
    }
    let took = t0.elapsed();
    let mut m = c.admin();
    let st = wait_caught_up(&mut m);
    assert!(st.stalls > 0, "the threshold never stalled a lane: {st:?}");
    assert!(took >= Duration::from_millis(500), "1 MiB through a 1 MiB/s link took only {took:?}");
    // Released: once the backup caught up, a sync point goes through without a new stall.
    p.write(0, b"released").expect("write");
    p.msync(0, 8).expect("msync");
    assert_eq!(m.status().expect("status").stalls, st.stalls, "stalled below the threshold");
    let mut b = admin(&backup, &c);
    let mut primary = vec![0u8; c.size() as usize];
    p.read(0, &mut primary).expect("read");
    wait_caught_up(&mut m);
    assert_eq!(first_difference(&primary, &mirror_image(&mut b, c.size())), None);
}

/// The final image after [`load`] with `seed` (each thread owns its part of the region, so the
/// image does not depend on how the threads interleave).
fn image_after_load(p: &Primary, size: u64, seed: u64) -> Vec<u8> {
    load(p, 2, 150, seed, size);
    let mut image = vec![0u8; size as usize];
    p.read(0, &mut image).expect("read");
    image
}

#[test]
fn chain_and_broadcast_deliver_identical_final_images() {
    let seed = common::seed("chain-broadcast");
    // Chain: primary -> mirror -> backup, acknowledged once the backup has each group.
    let mut chain = Cluster::new("chain", 1 << 20, |f| f.primary.lanes = 2);
    let tail = chain.start_backup("tail");
    chain.feed(&[&tail], |f| f.mirror.chain = true);
    chain.start_mirror();
    let p = Primary::open(&chain.primary_options()).expect("open the chain's primary");
    let size = chain.size();
    let expected = image_after_load(&p, size, seed);
    let mut t = admin(&tail, &chain);
    common::wait_applied(&mut t);
    assert_eq!(first_difference(&expected, &mirror_image(&mut t, size)), None, "chain tail");
    let mut head = chain.admin();
    common::wait_applied(&mut head);
    assert_eq!(first_difference(&expected, &mirror_image(&mut head, size)), None, "chain head");

    // Broadcast: the primary sends every group to two mirrors and waits for both.
    let mut bc = Cluster::new("broadcast", 1 << 20, |f| f.primary.lanes = 2);
    let second = bc.start_backup("second");
    bc.start_mirror();
    let mut opts = bc.primary_options();
    opts.broadcast = vec![second.addr().to_string()];
    let p = Primary::open(&opts).expect("open the broadcasting primary");
    let image = image_after_load(&p, size, seed);
    assert_eq!(first_difference(&expected, &image), None, "the same workload gives the same image");
    for node in [&second, bc.mirror.as_ref().expect("mirror runs")] {
        let mut a = admin(node, &bc);
        common::wait_applied(&mut a);
        assert_eq!(
            first_difference(&image, &mirror_image(&mut a, size)),
            None,
            "broadcast to {}",
            node.addr()
        );
    }
}

#[test]
fn a_wiped_backup_gets_a_full_copy_and_converges() {
    let mut c = Cluster::new("backup-wiped", 1 << 20, |f| f.primary.lanes = 1);
    let mut backup = c.start_backup("backup");
    c.feed(&[&backup], |f| f.mirror.secondary_tier_thresh = "64KiB".into());
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let size = c.size();
    load(&p, 1, 50, common::seed("backup-wiped"), size);
    let mut m = c.admin();
    wait_caught_up(&mut m);
    // The backup loses everything and comes back empty on the same address.
    let addr = backup.addr().to_string();
    backup.kill();
    let dir = c.dir.path().join("backup");
    std::fs::remove_dir_all(&dir).expect("wipe the backup");
    // The running mirror keeps its backups; the backup itself must feed nobody.
    c.feed(&[], |_| {});
    let restarted = restart_backup(&c, &addr, &dir);
    let cfg = c.cfg_path.to_str().expect("utf-8");
    // Far more than the threshold goes through while it is copied and after.
    let data = vec![0x3Cu8; 16 << 10];
    for i in 0..32u64 {
        p.write(i * (16 << 10), &data).expect("write");
        p.msync(i * (16 << 10), 16 << 10).expect("msync");
    }
    let st = wait_caught_up(&mut m);
    assert_eq!(st.backups[0].copy_sent, size, "the backup got a full copy: {st:?}");
    let out = std::process::Command::new(common::exe())
        .args(["status", "--config", cfg, "--addr", &st.listen, "--progress"])
        .output()
        .expect("run mojim status --progress");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no copy in progress"));
    let mut b = admin(&restarted, &c);
    let bst = common::wait_status(&mut b, "the copied backup to be consistent", |st| st.consistent);
    assert_eq!(bst.generation, st.generation, "the backup takes the mirror's history");
    assert_eq!(first_difference(&mirror_image(&mut m, size), &mirror_image(&mut b, size)), None);
}

/// A mirror counts a full copy to a backup as acknowledged only once the backup has landed all
/// of it: the frames it has sent can still wait in the sockets' buffers (several MiB), and a
/// reader that trusted the mirror's word then would find the backup's copy unfinished (a chaos
/// trial once compared a backup's image in that window and found its last frame missing).
/// Whenever the mirror says the link caught up after a copy, the backup itself must be consistent.
#[test]
fn a_full_copy_counts_only_once_the_backup_has_landed_it() {
    // Large enough that the copy's tail outlasts a status round trip.
    let mut c = Cluster::new("backup-landed", 64 << 20, |f| f.primary.lanes = 1);
    let mut backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    load(&p, 1, 20, common::seed("backup-landed"), c.size());
    let mut m = c.admin();
    wait_caught_up(&mut m);
    let addr = backup.addr().to_string();
    c.feed(&[], |_| {});
    let dir = c.dir.path().join("backup");
    for round in 0..4 {
        // Wiped: the backup comes back empty on the same address and gets a full copy. The
        // mirror must notice the kill first: until then its link still speaks of the old backup
        // (connected, caught up), and a new, empty backup is trivially consistent.
        backup.kill();
        common::wait_status(&mut m, "the mirror to notice the killed backup", |st| !st.backups[0].connected);
        std::fs::remove_dir_all(&dir).expect("wipe the backup");
        backup = restart_backup(&c, &addr, &dir);
        let mut b = admin(&backup, &c);
        let deadline = Instant::now() + WAIT;
        let st = loop {
            let st = m.status().expect("status");
            let l = &st.backups[0];
            if l.copy_total > 0 && l.connected && !l.copying && l.acked_seq >= st.applied_seq {
                break st;
            }
            assert!(Instant::now() < deadline, "round {round}: the backup did not get its copy: {st:?}");
        };
        let bst = b.status().expect("the backup's status");
        assert!(
            bst.consistent && bst.copy.is_none(),
            "round {round}: the mirror counts the copy as acknowledged ({:?}) but the backup has not landed \
             it: {bst:?}",
            st.backups[0]
        );
    }
    let mut b = admin(&backup, &c);
    assert_eq!(first_difference(&mirror_image(&mut m, c.size()), &mirror_image(&mut b, c.size())), None);
}
