//! `mojim backup add|remove` on a running mirror: a backup added while the primary syncs under
//! load gets its copy and follows, with no sync point failing; one removed no longer holds the
//! mirror's log (nor stalls the primary at `secondary_tier_thresh`); wrong requests are refused
//! with the reason and change nothing.

mod common;

use common::{assert_same_image, mirror_image, Cluster, Rng, WAIT};
use mojim::Primary;
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Runs `mojim backup OP --config CFG --addr MIRROR BACKUP`.
fn backup_cmd(c: &Cluster, op: &str, backup: &str) -> Output {
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mirror = c.mirror_addr();
    std::process::Command::new(common::exe())
        .args(["backup", op, "--config", cfg, "--addr", &mirror, backup])
        .output()
        .expect("run mojim backup")
}

fn ok(o: &Output, what: &str) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{what} failed: {out}{err}");
    format!("{out}{err}")
}

fn refused(o: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "{what} was not refused: {}", String::from_utf8_lossy(&o.stdout));
    err
}

/// Groups of random writes in the first `span` bytes until `stop`; counts acknowledged groups.
fn load(p: &Primary, span: u64, seed: u64, stop: &AtomicBool, groups: &AtomicU64) {
    let mut rng = Rng::new(seed);
    while !stop.load(Ordering::SeqCst) {
        let len = rng.range(1, 4000);
        let off = rng.range(0, span - len);
        p.write(off, &rng.bytes(len as usize)).expect("write");
        p.msync(off, len).expect("a sync point failed");
        groups.fetch_add(1, Ordering::SeqCst);
    }
}

fn wait_status(m: &mut AdminClient, what: &str, done: impl Fn(&MirrorStatus) -> bool) -> MirrorStatus {
    common::wait_status(m, what, done)
}

/// Waits until `n` more groups than `from` are acknowledged (the primary keeps going).
fn wait_groups(groups: &AtomicU64, from: u64, n: u64, what: &str) {
    let t0 = Instant::now();
    while groups.load(Ordering::SeqCst) < from + n {
        assert!(t0.elapsed() < WAIT, "the primary made no progress {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_backup_added_under_load_catches_up_and_wrong_requests_are_refused() {
    let mut c = Cluster::new("backup-ops", 4 << 20, |f| {
        f.primary.lanes = 2;
        f.mirror.log_capacity = "8MiB".into();
        f.limits.max_frame = "4KiB".into();
    });
    let backup = c.start_backup("backup");
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let mut m = c.admin();
    let size = c.size();
    let seed = common::seed("backup-ops");
    let (stop, groups) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|s| {
        let h = s.spawn(|| load(&p, size, seed, &stop, &groups));
        wait_groups(&groups, 0, 50, "before the backup was added");
        let out = ok(&backup_cmd(&c, "add", backup.addr()), "backup add");
        assert!(out.contains(&format!(r#""added":"{}""#, backup.addr())), "{out}");
        assert!(out.contains("[mirror] backups"), "the command says the change is not kept: {out}");
        // The copy runs while the primary keeps syncing, and the backup then follows.
        let st = m.status().expect("status");
        assert_eq!(st.backups.iter().map(|b| b.addr.as_str()).collect::<Vec<_>>(), [backup.addr()]);
        let at = groups.load(Ordering::SeqCst);
        wait_status(&mut m, "the added backup to get its copy", |st| {
            st.backups.first().is_some_and(|b| b.connected && !b.copying && b.acked_seq > 0)
        });
        wait_groups(&groups, at, 50, "while the backup was added");

        // Refused, each saying why, and nothing changes.
        let e = refused(&backup_cmd(&c, "add", backup.addr()), "adding a backup twice");
        assert!(e.contains("already a backup"), "{e}");
        let e = refused(&backup_cmd(&c, "add", &c.mirror_addr()), "adding the mirror itself");
        assert!(e.contains("own backup"), "{e}");
        let e = refused(&backup_cmd(&c, "add", "not-an-address"), "adding what is no address");
        assert!(e.contains("\"not-an-address\" is not a node's address"), "{e}");
        let e = refused(&backup_cmd(&c, "remove", "127.0.0.1:9"), "removing a backup not fed");
        assert!(e.contains("not a backup of this node") && e.contains(backup.addr()), "{e}");
        assert_eq!(m.status().expect("status").backups.len(), 1);

        stop.store(true, Ordering::SeqCst);
        h.join().expect("load");
    });
    // The backup holds exactly what the mirror holds.
    let st = wait_status(&mut m, "the backup to catch up", |st| {
        st.lag_groups == 0
            && st.backups.iter().all(|b| b.connected && b.lag_groups == 0 && b.acked_seq >= st.applied_seq)
    });
    assert_eq!(st.stalls, 0, "a sync point stalled behind the added backup: {st:?}");
    let mut b = AdminClient::connect(backup.addr(), &c.secret(), Duration::from_secs(5)).expect("admin");
    wait_status(&mut b, "the backup to apply everything", |bs| bs.applied_seq >= st.applied_seq);
    assert_same_image("backup against mirror", &mirror_image(&mut m, size), &mirror_image(&mut b, size));

    // The limit: as many backups as a node feeds, then one more is refused.
    let max = mojim_node::MAX_BACKUPS;
    let fakes: Vec<String> = (1..max).map(|k| format!("127.0.0.1:{}", 9 + k)).collect();
    for f in &fakes {
        ok(&backup_cmd(&c, "add", f), "adding a backup up to the limit");
    }
    let e = refused(&backup_cmd(&c, "add", "127.0.0.1:8"), "a backup past the limit");
    assert!(e.contains(&format!("({max})")), "{e}");
    for f in &fakes {
        ok(&backup_cmd(&c, "remove", f), "removing a backup");
    }
}

#[test]
fn a_removed_backup_no_longer_holds_the_log_nor_stalls_the_primary() {
    let mut c = Cluster::new("backup-remove", 1 << 20, |f| {
        f.primary.lanes = 1;
        f.mirror.log_capacity = "2MiB".into();
        f.mirror.secondary_tier_thresh = "64KiB".into();
    });
    let backup = c.start_backup("backup");
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let mut m = c.admin();
    let size = c.size();
    let seed = common::seed("backup-remove");
    ok(&backup_cmd(&c, "add", backup.addr()), "backup add");
    let held = wait_status(&mut m, "the added backup to get its copy", |st| {
        st.backups.first().is_some_and(|b| b.connected && !b.copying)
    });
    // A backup that is down holds the mirror's log for itself, and stalls the primary at the
    // threshold; removing it releases both.
    drop(backup);
    let (stop, groups) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|s| {
        let h = s.spawn(|| load(&p, size, seed ^ 1, &stop, &groups));
        let st = wait_status(&mut m, "the primary to stall behind the stopped backup", |st| {
            st.stalls > held.stalls
        });
        assert!(st.lanes.iter().any(|l| l.log_used > 0), "nothing held in the log: {st:?}");
        let at = groups.load(Ordering::SeqCst);
        let out = ok(&backup_cmd(&c, "remove", &st.backups[0].addr), "backup remove");
        assert!(out.contains(r#""backups":[]"#), "{out}");
        wait_groups(&groups, at, 200, "after the stopped backup was removed");
        stop.store(true, Ordering::SeqCst);
        h.join().expect("load");
    });
    let st = wait_status(&mut m, "the log to be reclaimed", |st| {
        st.lag_groups == 0 && st.lanes.iter().all(|l| l.log_used == 0)
    });
    assert!(st.backups.is_empty(), "{st:?}");
}

/// `mojim rejoin` will not take a region an application still has open: it says so, naming
/// the holder, and leaves the region where it is.
#[test]
fn rejoin_refuses_a_region_an_application_holds() {
    let mut c = Cluster::new("rejoin-held", 1 << 20, |_| {});
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let region = c.cfg.resolve(&c.cfg.file.region.path);
    let dir = c.dir.path().join("old");
    let out = std::process::Command::new(common::exe())
        .args(["rejoin", "--config", c.cfg_path.to_str().expect("utf-8"), "--listen", "127.0.0.1:0"])
        .args(["--dir", dir.to_str().expect("utf-8"), "--mirror", &c.mirror_addr()])
        .output()
        .expect("run mojim rejoin");
    let e = refused(&out, "rejoin with the application running");
    assert!(e.contains(&format!("is open as primary in process {}", std::process::id())), "{e}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("rejoin 1/4: placing") && !said.contains("2/4"), "{said}");
    assert!(region.exists() && !dir.join("data.mojim").exists(), "the region was moved");
    drop(p);
}
