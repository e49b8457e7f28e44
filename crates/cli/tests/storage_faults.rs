//! A mirror whose storage fails under it stops, says why, and loses nothing:
//!
//! - `data = "disk"` on a full file system: a `pwrite` of a checkpoint to the data area fails;
//! - a log on a thinly provisioned device that ran out of room: the write-back of a lane's log
//!   tail fails (the page holding it cannot be written to the device).
//!
//! Either way the groups stay in the log, the applied number does not move past them, the
//! mirror acknowledges nothing more, `mojim status` says why, and once there is room again a
//! restart recovers the data area from the logs to every acknowledged group.
//!
//! Needs root (to mount a tmpfs, and a loop device with ext4 for the second); without it, or
//! without `mkfs.ext4`, `losetup` or `filefrag`, a test says so and passes, unless
//! `MOJIM_TEST_STRICT` is set (as `./scripts/test` sets it).

mod common;

use common::storage::{run, Tmpfs};
use common::{assert_same_image, mirror_image, wait_applied, wait_status, Cluster, Rng};
use mojim::config::ConfigFile;
use mojim::Primary;
use mojim_node::admin_client::AdminClient;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

/// Frees the blocks of `[offset, offset + len)` of `path` (its size stays): on a tmpfs, writing
/// there again needs free pages.
fn punch_hole(path: &Path, offset: u64, len: u64) {
    let f = OpenOptions::new().write(true).open(path).expect("open to punch a hole");
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    rustix::fs::fallocate(&f, flags, offset, len).expect("punch a hole");
}

/// What the mirror should hold: every acknowledged write, and perhaps the first group whose
/// sync failed (it may have been whole in the log when the storage failed: recovery may apply
/// it, as a file's write whose `fsync` failed may still reach the disk).
struct Expected {
    image: Vec<u8>,
    in_doubt: Option<(usize, Vec<u8>)>,
}

impl Expected {
    fn new(size: u64) -> Expected {
        Expected { image: vec![0; size as usize], in_doubt: None }
    }

    /// Panics unless `actual` is the acknowledged image, with or without the group in doubt.
    fn check(&self, what: &str, actual: &[u8]) {
        if common::first_difference(&self.image, actual).is_none() {
            return;
        }
        let mut with = self.image.clone();
        if let Some((off, data)) = &self.in_doubt {
            with[*off..][..data.len()].copy_from_slice(data);
        }
        assert_same_image(&format!("{what} (with the group whose sync failed)"), &with, actual);
    }
}

/// Syncs one group at a time, each a fresh pattern, until the mirror stops acknowledging;
/// `expected` gets exactly the acknowledged writes, and the first refused one as in doubt.
/// Returns the number of groups acknowledged and the error that ended it (None if all were).
fn sync_until_refused(
    p: &Primary,
    rng: &mut Rng,
    expected: &mut Expected,
    groups: u64,
) -> (u64, Option<String>) {
    let size = expected.image.len() as u64;
    for i in 0..groups {
        let off = (i * 4096 * 7) % (size - 4096);
        let data = rng.bytes(4096);
        p.write(off, &data).expect("write the primary's region");
        if let Err(e) = p.msync(off, 4096) {
            expected.in_doubt.get_or_insert((off as usize, data));
            return (i, Some(e.to_string()));
        }
        expected.image[off as usize..][..4096].copy_from_slice(&data);
    }
    (groups, None)
}

/// After the storage failed (`refused`: the error that ended the last syncs, if one did), the
/// mirror acknowledges nothing more, and says why; the session then ends. Returns the last
/// group the mirror received.
fn acknowledges_nothing_more(
    p: Primary,
    rng: &mut Rng,
    expected: &mut Expected,
    refused: Option<String>,
    admin: &mut AdminClient,
) -> u64 {
    let (more, refused) = match refused {
        Some(e) => (0, Some(e)),
        None => sync_until_refused(&p, rng, expected, 4),
    };
    let refused = refused.expect("the mirror acknowledged groups after its storage failed");
    assert_eq!(more, 0, "groups acknowledged after the failure: {refused}");
    assert!(refused.contains("No space left"), "the primary is not told why: {refused}");
    drop(p);
    wait_status(admin, "the session to end", |st| st.session.is_none()).last_received_seq
}

/// Kills and restarts the mirror, with room again: recovery from its logs brings the data area
/// to every acknowledged group (`last_acked` the last the mirror received), and it serves again.
fn restart_and_check(c: &mut Cluster, expected: &Expected, last_acked: u64) {
    c.kill_mirror();
    c.start_mirror();
    let mut admin = c.admin();
    let st = wait_applied(&mut admin);
    assert!(st.storage_failed.is_none(), "{st:?}");
    assert!(st.applied_seq >= last_acked, "{st:?}");
    expected.check("the data area after recovery", &mirror_image(&mut admin, c.size()));
}

/// A mirror whose data area is a disk file on a small tmpfs of its own (`data = "disk"`, mode
/// `sync-disk`, one lane), its logs elsewhere; `edit` shapes the rest. None when no tmpfs can be
/// mounted here (the test then skips, or fails under `MOJIM_TEST_STRICT`). Bind the pair in this
/// order, so that the cluster and its mirror are dropped before the unmount.
fn disk_data_area(test: &str, size: u64, edit: impl FnOnce(&mut ConfigFile)) -> Option<(Tmpfs, Cluster)> {
    let fs = match Tmpfs::mount(test, "4m") {
        Ok(t) => t,
        Err(why) => {
            common::skip(&format!("cannot mount a tmpfs for the data area: {why}"));
            return None;
        }
    };
    let data_dir = fs.path().to_str().expect("utf-8").to_string();
    let mut c = Cluster::new(test, size, |f| {
        f.mirror.data = "disk".into();
        f.mirror.dir = data_dir;
        f.mirror.log_dir = "logs".into();
        f.primary.mode = "sync-disk".into();
        f.primary.lanes = 1;
        edit(f);
    });
    c.start_mirror();
    Some((fs, c))
}

#[test]
fn a_failed_write_to_a_disk_data_area_stops_the_mirror_and_recovery_loses_nothing() {
    let size: u64 = 1 << 20;
    let Some((fs, mut c)) = disk_data_area("pwritefail", size, |f| f.mirror.log_capacity = "1MiB".into())
    else {
        return;
    };
    // The data area is made whole (its blocks reserved) when the mirror starts. Take its data
    // blocks away and fill the file system: every checkpoint's pwrite now needs a page there is
    // no room for, as on a full disk with a sparse data area.
    let data = fs.path().join("data.mojim");
    punch_hole(&data, 4096, size);
    let filler = fs.fill();

    let mut rng = Rng::new(common::seed("pwritefail"));
    let mut expected = Expected::new(size);
    let p = Primary::open(&c.primary_options()).expect("the primary opens (the mirror's header is in place)");
    let (acked, refused) = sync_until_refused(&p, &mut rng, &mut expected, 16);
    assert!(acked > 0, "the mirror refused the first group: {refused:?}");
    let mut admin = c.admin();
    let st =
        wait_status(&mut admin, "the mirror to say its data area failed", |st| st.storage_failed.is_some());
    let why = st.storage_failed.clone().unwrap_or_default();
    println!("status: {why}");
    assert!(why.contains("No space left") && why.contains("cannot write group"), "{why}");
    assert!(why.contains(&data.display().to_string()), "the status does not name the data area: {why}");
    // A failed write may have left part of a group in the data area: it is not read from.
    let read = admin.read(0, 4096).map(|_| ()).expect_err("a read of the failed data area succeeded");
    assert!(read.to_string().contains("No space left"), "{read}");

    // It acknowledges nothing more: the next sync, and a new session, are refused saying why.
    let last_acked = acknowledges_nothing_more(p, &mut rng, &mut expected, refused, &mut admin);
    let again = match Primary::open(&c.primary_options()) {
        Ok(p) => p.msync(0, 1).err().map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    let again = again.expect("a new session synced against the failed data area");
    assert!(again.contains("No space left"), "{again}");
    // The applied number stayed where the data area is good.
    let st = admin.status().expect("status");
    assert!(st.applied_seq < last_acked, "applied {} of {last_acked} acknowledged: {st:?}", st.applied_seq);
    drop(admin);

    // Room again, and a restart: recovery applies every acknowledged group from the log.
    std::fs::remove_file(&filler).expect("remove the filler");
    restart_and_check(&mut c, &expected, last_acked);
}

/// A lane waiting for log space when the data area fails is told so and ends, instead of
/// waiting for space that a failed storage never frees (the primary then hung in its sync,
/// the lane's heartbeats keeping the session alive). Checkpoints are put off, so that the log
/// fills before the first one runs and fails.
#[test]
fn a_lane_waiting_for_log_space_ends_when_the_data_area_fails() {
    let size: u64 = 1 << 20;
    let Some((fs, c)) = disk_data_area("fullwait", size, |f| {
        f.mirror.log_capacity = "256KiB".into();
        f.mirror.checkpoint_thresh = 100_000;
        f.mirror.checkpoint_idle_ms = 600_000;
    }) else {
        return;
    };
    punch_hole(&fs.path().join("data.mojim"), 4096, size);
    let _filler = fs.fill();
    let opts = c.primary_options();
    let (tx, rx) = std::sync::mpsc::channel();
    // On its own thread: without the fix it never returns.
    std::thread::spawn(move || {
        let p = Primary::open(&opts).expect("open the primary");
        let mut rng = Rng::new(common::seed("fullwait"));
        let mut expected = Expected::new(size);
        let _ = tx.send(sync_until_refused(&p, &mut rng, &mut expected, 256));
    });
    let (acked, refused) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the primary's sync hung: the lane waits for log space the failed data area never frees");
    let refused =
        refused.unwrap_or_else(|| panic!("all {acked} groups acknowledged though the data area failed"));
    assert!(refused.contains("No space left"), "the primary is not told why: {refused}");
    assert!(
        acked * 4096 >= 128 << 10,
        "the log did not fill before the failure ({acked} groups acknowledged)"
    );
}

/// An ext4 file system on a loop device whose backing file lies on a small tmpfs: a thinly
/// provisioned disk. Everything is unmounted and detached on drop.
struct ThinDisk {
    mnt: PathBuf,
    loopdev: String,
    image: PathBuf,
    backing: Tmpfs,
}

impl ThinDisk {
    fn new(test: &str) -> Result<ThinDisk, String> {
        for tool in ["mkfs.ext4", "losetup", "filefrag"] {
            run("sh", &["-c", &format!("command -v {tool}")])
                .map_err(|_| format!("{tool} is not installed"))?;
        }
        let backing = Tmpfs::mount(test, "40m")?;
        let image = backing.path().join("disk.img");
        let img = image.to_str().ok_or("a non-UTF-8 path")?.to_string();
        run("truncate", &["-s", "32M", &img])?;
        run("mkfs.ext4", &["-q", "-F", "-b", "4096", &img])?;
        let loopdev = run("losetup", &["-f", "--show", &img])?.trim().to_string();
        let mnt = backing.path().with_extension("mnt");
        let disk = ThinDisk { mnt, loopdev, image, backing };
        std::fs::create_dir_all(&disk.mnt).map_err(|e| format!("create {}: {e}", disk.mnt.display()))?;
        run("mount", &[&disk.loopdev, disk.mnt.to_str().ok_or("a non-UTF-8 path")?])?;
        Ok(disk)
    }

    /// The byte offset on the device of `path`'s first block.
    fn first_block_offset(&self, path: &Path) -> u64 {
        let out = run("filefrag", &["-v", "-b4096", path.to_str().expect("utf-8")]).expect("filefrag");
        // "   0:        0..       0:       1549..      1549:      1: ..."
        let line = out.lines().find(|l| l.trim_start().starts_with("0:")).expect("a first extent");
        let physical = line.split(':').nth(2).and_then(|f| f.split("..").next()).expect("a physical block");
        physical.trim().parse::<u64>().expect("a block number") * 4096
    }
}

impl Drop for ThinDisk {
    fn drop(&mut self) {
        let mnt = self.mnt.to_str().unwrap_or_default();
        if run("umount", &[mnt]).is_err() {
            let _ = run("umount", &["-l", mnt]);
        }
        let _ = run("losetup", &["-d", &self.loopdev]);
        let _ = std::fs::remove_dir(&self.mnt);
        // `backing` is unmounted after this, when the fields drop.
    }
}

#[test]
fn a_log_tail_that_cannot_be_persisted_stops_the_mirror_and_recovery_loses_nothing() {
    let disk = match ThinDisk::new("tailfail") {
        Ok(d) => d,
        Err(why) => {
            common::skip(&format!("cannot make a thin disk for the mirror's logs: {why}"));
            return;
        }
    };
    let log_dir = disk.mnt.to_str().expect("utf-8").to_string();
    let size: u64 = 1 << 20;
    let mut c = Cluster::new("tailfail", size, |f| {
        f.mirror.log_dir = log_dir;
        f.mirror.log_capacity = "256KiB".into();
        f.primary.lanes = 1;
    });
    c.start_mirror();
    let mut rng = Rng::new(common::seed("tailfail"));
    let mut expected = Expected::new(size);
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let (n, e) = sync_until_refused(&p, &mut rng, &mut expected, 4);
    assert_eq!((n, e), (4, None));
    let mut admin = c.admin();
    wait_status(&mut admin, "the first groups applied and released", |st| {
        st.applied_seq >= st.last_received_seq && st.lanes.iter().all(|l| l.log_used == 0)
    });

    // The device runs out of room: every block of the image is provided for except the log's
    // header page, which holds the lane's tail; the room it needs is gone.
    let log = disk.mnt.join("lane-0.log");
    run("sync", &["-f", log.to_str().expect("utf-8")]).expect("sync the log");
    let at = disk.first_block_offset(&log);
    let img = OpenOptions::new().read(true).write(true).open(&disk.image).expect("open the image");
    let mut old_header = vec![0u8; 4096];
    std::os::unix::fs::FileExt::read_exact_at(&img, &mut old_header, at).expect("read the header block");
    assert_eq!(&old_header[..8], b"MOJIMLOG", "block at {at} is not the log's header");
    rustix::fs::fallocate(&img, rustix::fs::FallocateFlags::empty(), 0, 32 << 20).expect("provide the image");
    punch_hole(&disk.image, at, 4096);
    let filler = disk.backing.fill();

    // Groups still land in the log (its blocks are provided for), but once they are applied the
    // tail that would free their room cannot be persisted.
    let (acked, refused) = sync_until_refused(&p, &mut rng, &mut expected, 8);
    assert!(acked > 0, "the mirror refused the first group: {refused:?}");
    let st =
        wait_status(&mut admin, "the mirror to say its log tail failed", |st| st.storage_failed.is_some());
    let why = st.storage_failed.clone().unwrap_or_default();
    println!("status: {why}");
    // The write-back of the tail's page fails, or, once the file has seen that error, the next
    // persist of its records does: either stops the log.
    assert!(why.contains("log of lane 0") && why.contains("No space left"), "{why}");
    let last_acked = acknowledges_nothing_more(p, &mut rng, &mut expected, refused, &mut admin);
    drop(admin);

    // Room again (the device kept the header block it had), and a restart: recovery reads the
    // log from its persistent tail and applies every acknowledged group.
    std::fs::remove_file(&filler).expect("remove the filler");
    std::os::unix::fs::FileExt::write_all_at(&img, &old_header, at).expect("restore the header block");
    restart_and_check(&mut c, &expected, last_acked);
    c.kill_mirror();
    drop(c);
    drop(disk);
}
