//! The mirror's log folder is on a full file system: the mirror refuses the primary's lanes with
//! an error that names the storage problem, nothing is reported durable, and the mirror lives on.
//!
//! Needs root (to mount a small tmpfs); without it the test says so and passes, unless
//! `MOJIM_TEST_STRICT` is set (as `./scripts/test` sets it).

mod common;

use common::storage::Tmpfs;
use common::{wait_status, Cluster};
use mojim::config::OnMirrorLoss;
use mojim::{Error, Primary};
use mojim_format::handshake::RefuseCode;

#[test]
fn a_full_log_file_system_refuses_the_lane_and_nothing_is_reported_durable() {
    // Declared first, dropped last: the cluster (and its mirror) go before the unmount.
    let logs = match Tmpfs::mount("fullfs", "2m") {
        Ok(t) => t,
        Err(why) => {
            common::skip(&format!("cannot mount a tmpfs for the mirror's logs: {why}"));
            return;
        }
    };
    let log_dir = logs.path().to_str().expect("utf-8 path").to_string();
    let mut c = Cluster::new("fullfs", 1 << 20, |f| {
        f.primary.lanes = 2;
        f.mirror.log_dir = log_dir;
        // Each lane's log reserves its whole capacity when made: 4 MiB do not fit in 2 MiB.
        f.mirror.log_capacity = "4MiB".into();
    });
    c.start_mirror();
    let mut admin = c.admin();
    let names_the_problem = |m: &str| m.contains("No space left") && m.contains("log for lane 0");

    // Failing closed: the mirror refuses the lane at the handshake, and the primary does not open.
    for attempt in 1..=2 {
        let e = match Primary::open(&c.primary_options()) {
            Ok(_) => panic!("attempt {attempt}: the primary opened although the mirror cannot make its log"),
            Err(e) => e,
        };
        let m = e.to_string();
        println!("attempt {attempt}: {m}");
        assert!(matches!(e, Error::Refused { code: RefuseCode::Storage, .. }), "attempt {attempt}: {e:?}");
        assert!(names_the_problem(&m), "attempt {attempt}: the error does not name the storage problem: {m}");

        // The mirror lives on, has nothing, and left no half-made log behind.
        let st = wait_status(&mut admin, "the refused session to end", |st| st.session.is_none());
        assert_eq!(st.groups_received, 0, "attempt {attempt}: {st:?}");
        assert_eq!(admin.read(100, 13).expect("read"), vec![0u8; 13], "attempt {attempt}");
        let left: Vec<_> = std::fs::read_dir(logs.path()).expect("list the log folder").collect();
        assert!(left.is_empty(), "attempt {attempt}: files left in the full log folder: {left:?}");
    }

    // Degrading: the primary opens without its mirror, says why, and keeps the writes local.
    let mut o = c.primary_options();
    o.failure.on_mirror_loss = OnMirrorLoss::Degrade;
    let p = Primary::open(&o).expect("a degrading primary opens without its mirror");
    p.write(100, b"local only").expect("write");
    p.msync(100, 10).expect("a degraded msync is local");
    let ps = p.status();
    assert!(ps.degraded && ps.dirty_bytes > 0, "{ps:?}");
    let why = ps.failed.clone().unwrap_or_default();
    assert!(names_the_problem(&why), "the status does not say why the mirror is missing: {ps:?}");
    drop(p);
    assert_eq!(admin.read(100, 10).expect("read"), vec![0u8; 10], "nothing reached the mirror");
}
