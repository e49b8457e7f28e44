//! `sync-disk`: the mirror's data area is an ordinary disk file (pwrite + fdatasync) while its
//! logs stay on memory; a killed mirror recovers its data area from the logs on restart.

mod common;

use common::{assert_same_image, mirror_image, wait_applied, Cluster, Rng};
use mojim::{Mode, Primary, Range};

/// A folder on the disk (not tmpfs), removed on drop.
struct DiskDir(std::path::PathBuf);

impl Drop for DiskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_disk_data_area_survives_kill_9_and_matches_the_primary() {
    let disk =
        DiskDir(std::path::PathBuf::from(format!("/var/tmp/mojim-test-{}-syncdisk", std::process::id())));
    let disk_path = disk.0.to_str().expect("utf-8").to_string();
    let mut c = Cluster::new("syncdisk", 4 << 20, |f| {
        f.mirror.data = "disk".into();
        f.mirror.dir = disk_path.clone();
        f.mirror.log_dir = "logs".into();
        f.mirror.log_capacity = "1MiB".into();
        f.primary.mode = "sync-disk".into();
        f.primary.lanes = 2;
    });
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    assert_eq!(p.mode(), Mode::SyncDisk);
    let mut rng = Rng::new(common::seed("syncdisk"));
    let size = c.size();
    for _ in 0..400 {
        let a = rng.range(0, size - 9000);
        let b = rng.range(0, size - 300);
        p.write(a, &rng.bytes(9000)).expect("write");
        p.write(b, &rng.bytes(300)).expect("write");
        p.gmsync(&[Range::new(a, 9000), Range::new(b, 300)]).expect("gmsync");
    }
    let mut expected = vec![0u8; size as usize];
    p.read(0, &mut expected).expect("read");
    {
        let mut admin = c.admin();
        let st = wait_applied(&mut admin);
        assert_eq!(st.data_persistence, "disk", "{st:?}");
        assert_eq!(st.groups_received, 400);
    }
    // Kill the mirror before (or while) its last checkpoints reach the disk.
    c.kill_mirror();
    drop(p);
    c.start_mirror();
    let mut admin = c.admin();
    let st = wait_applied(&mut admin);
    assert!(st.storage_failed.is_none(), "{st:?}");
    assert_same_image(
        "sync-disk mirror after kill -9 and recovery",
        &expected,
        &mirror_image(&mut admin, size),
    );
    assert!(
        std::fs::metadata(disk.0.join("data.mojim")).is_ok(),
        "the data area is the file on the disk folder"
    );
}
