//! The primary's lease in etcd, with a real etcd: a primary that learns it no longer holds the
//! leader key (deleted, as by `etcdctl del` or an etcd restored from an older snapshot) stops
//! acknowledging at once, not when its lease could have expired; in `degrade` mode too.
//!
//! The mirrors here do not watch etcd (their configuration is `coordinator = "static"`), so no
//! take-over fences the old primary: only its own lease check can stop it.

mod common;

use common::{Cluster, Rng, WAIT};
use mojim::config::ConfigFile;
use mojim::{Primary, PrimaryOptions, Range};
use mojim_etcd::testing::EtcdServer;
use mojim_tools::child::ChildNode;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A lease long enough that its validity outlasts each test by seconds: whatever stops the
/// primary, it is not the validity lapsing.
fn etcd_cluster(test: &str, etcd: &EtcdServer, on_mirror_loss: &str) -> Cluster {
    let endpoint = etcd.endpoint();
    Cluster::new(test, 1 << 20, |f| {
        f.cluster.coordinator = "etcd".into();
        f.cluster.etcd_endpoints = vec![endpoint.clone()];
        f.cluster.lease_ttl_ms = 8000;
        f.cluster.lease_renew_ms = 300;
        f.cluster.lease_margin_ms = 1000;
        f.cluster.on_mirror_loss = on_mirror_loss.into();
    })
}

/// Starts a mirror that leaves etcd alone: the same configuration, coordinator static.
fn start_static_mirror(c: &Cluster) -> ChildNode {
    let mut file: ConfigFile = c.cfg.file.clone();
    file.cluster.coordinator = "static".into();
    let path: PathBuf = c.dir.path().join("mirror.toml");
    std::fs::write(&path, toml::to_string(&file).expect("serialise")).expect("write mirror.toml");
    let dir = c.dir.path().join("mirror");
    let args = [
        "serve",
        "--config",
        path.to_str().expect("utf-8"),
        "--listen",
        "127.0.0.1:0",
        "--dir",
        dir.to_str().expect("utf-8"),
    ];
    ChildNode::spawn(common::exe(), &args).expect("start the mirror")
}

fn open_primary(c: &Cluster, mirror: &ChildNode) -> Primary {
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = mirror.addr().to_string();
    o.node = "a".into();
    Primary::open(&o).expect("the primary writes the roles and takes the lease")
}

/// Deletes the leader key, then waits until a renewal attempt that began after the delete has
/// finished (or an earlier one found the lease lost), and returns when it saw that.
fn delete_leader_and_await_the_next_renewal(c: &Cluster, etcd: &EtcdServer, p: &Primary) -> Instant {
    let settings = c.cfg.etcd().expect("settings").expect("etcd settings");
    let client = etcd.client(Duration::from_secs(1));
    let key = format!("{}/leader", settings.prefix);
    assert!(client.get(&key).expect("read the leader key").is_some(), "the primary holds {key}");
    client.delete(&key).expect("delete the leader key");
    // The attempt counted next may have read the key before the delete; the one after it began
    // after it.
    let lease = |p: &Primary| p.status().lease.expect("a primary under etcd reports its lease");
    let target = lease(p).renewals + 2;
    let t0 = Instant::now();
    loop {
        let l = lease(p);
        if l.renewals >= target || l.lost.is_some() {
            assert!(l.valid_ms > 0 || l.lost.is_some(), "{l:?}");
            return Instant::now();
        }
        assert!(t0.elapsed() < WAIT, "no renewal attempt finished: {l:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_primary_whose_leader_key_is_deleted_acknowledges_nothing_after_its_next_renewal() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let c = etcd_cluster("etcd-lease-deleted", &etcd, "block");
    let mirror = start_static_mirror(&c);
    let p = open_primary(&c, &mirror);
    let size = p.size();

    // Load from two threads; each sync point is logged with when it began and whether it was
    // acknowledged.
    let stop = AtomicBool::new(false);
    let log: Mutex<Vec<(Instant, bool)>> = Mutex::new(Vec::new());
    let after = std::thread::scope(|s| {
        for t in 0..2u64 {
            let (p, stop, log) = (&p, &stop, &log);
            s.spawn(move || {
                let mut rng = Rng::new(common::seed("etcd-lease-deleted") ^ t);
                while !stop.load(Ordering::SeqCst) {
                    let len = rng.range(1, 4096);
                    let off = rng.range(0, size - len);
                    p.write(off, &rng.bytes(len as usize)).expect("write");
                    let began = Instant::now();
                    let acked = p.msync(off, len).is_ok();
                    log.lock().unwrap().push((began, acked));
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
        // The load stops however this thread leaves the scope (a failed assertion included).
        let _stop = StopOnDrop(&stop);
        let t0 = Instant::now();
        while log.lock().unwrap().iter().filter(|(_, ok)| *ok).count() < 50 {
            assert!(t0.elapsed() < WAIT, "the primary acknowledged too little");
            std::thread::sleep(Duration::from_millis(5));
        }
        let after = delete_leader_and_await_the_next_renewal(&c, &etcd, &p);
        // A sync point begun now is not acknowledged, however long the validity would last.
        let e = p.msync(0, 8).expect_err("the primary acknowledged after it learnt its key was deleted");
        assert!(e.to_string().contains("lease"), "{e}");
        let l = p.status().lease.expect("lease");
        assert!(l.valid_ms > 0, "the validity lapsed: the test proves nothing ({l:?})");
        assert!(l.lost.as_deref().is_some_and(|w| w.contains("deleted")), "{l:?}");
        // Let the load run a little past it too.
        let n = log.lock().unwrap().len();
        while log.lock().unwrap().len() < n + 20 {
            assert!(after.elapsed() < WAIT, "the load stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
        after
    });
    let log = log.into_inner().unwrap();
    let late: Vec<_> = log.iter().filter(|(began, ok)| *ok && *began >= after).collect();
    assert!(late.is_empty(), "{} sync points begun after the renewal were acknowledged", late.len());
    assert!(log.iter().any(|(began, _)| *began >= after), "no sync point began after the renewal");
}

#[test]
fn a_degraded_primary_acknowledges_no_group_once_its_leader_key_is_deleted() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let c = etcd_cluster("etcd-lease-degrade", &etcd, "degrade");
    let mut mirror = start_static_mirror(&c);
    let p = open_primary(&c, &mirror);
    p.write(0, b"before").expect("write");
    p.msync(0, 6).expect("the mirror acknowledges");

    // A group sent to a mirror that will never answer it.
    mirror.freeze().expect("SIGSTOP the mirror");
    p.write(64, b"in flight").expect("write");
    let ticket = p.persist(&[Range::new(64, 9)]).expect("the group is sent");
    assert!(ticket.seq() > 0, "the group went to the mirror");

    delete_leader_and_await_the_next_renewal(&c, &etcd, &p);
    // The mirror is lost: a degrading primary would return the group as persistent in its own
    // copy, but it is no longer the primary.
    mirror.kill();
    let e = p.wait(ticket).expect_err("a degraded primary acknowledged after its key was deleted");
    assert!(e.to_string().contains("lease"), "{e}");
    // Nor does it degrade its way into acknowledging new groups.
    p.write(128, b"later").expect("write");
    let e = p.msync(128, 5).expect_err("a degraded primary acknowledged a new group");
    assert!(e.to_string().contains("lease"), "{e}");
}
