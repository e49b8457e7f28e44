//! The mirror's log folder is on a full file system: the primary's sync fails with an error that
//! names the storage problem, nothing is reported durable, and the mirror lives on.
//!
//! Needs root (to mount a small tmpfs); without it the test says so and passes.

mod common;

use common::{wait_status, Cluster};
use mojim::{Error, Primary};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a fixed size, unmounted (and its folder removed) on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it) on a fresh folder, or says why not.
    fn mount(test: &str, size: &str) -> Result<Tmpfs, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("not running as root".into());
        }
        let dir = common::test_root().join(format!("mojim-mp-{}-{test}-tmpfs", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("run mount: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_dir(&dir);
            return Err(format!(
                "mount failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
        if !ok {
            // Busy (a process still holds a file there): detach it now, it goes when released.
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_full_log_file_system_fails_the_sync_and_nothing_is_reported_durable() {
    // Declared first, dropped last: the cluster (and its mirror) go before the unmount.
    let logs = match Tmpfs::mount("fullfs", "2m") {
        Ok(t) => t,
        Err(why) => {
            println!("skipped: cannot mount a tmpfs for the mirror's logs: {why}");
            return;
        }
    };
    let log_dir = logs.path().to_str().expect("utf-8 path").to_string();
    let mut c = Cluster::new("fullfs", 1 << 20, |f| {
        f.primary.lanes = 2;
        f.mirror.log_dir = log_dir;
        // Each lane's log reserves its whole capacity when created: 4 MiB do not fit in 2 MiB.
        f.mirror.log_capacity = "4MiB".into();
    });
    c.start_mirror();
    let mut admin = c.admin();

    for attempt in 1..=2 {
        let p = Primary::open(&c.primary_options()).expect("open the primary (the handshake needs no log)");
        p.write(100, b"never durable").expect("write");
        let e = match p.msync(100, 13) {
            Ok(()) => {
                panic!("attempt {attempt}: msync returned Ok although the mirror cannot create its log")
            }
            Err(e) => e,
        };
        let m = e.to_string();
        println!("attempt {attempt}: {m}");
        assert!(matches!(e, Error::MirrorLost { .. }), "attempt {attempt}: {e:?}");
        assert!(
            m.contains("No space left") && m.contains("log"),
            "attempt {attempt}: the error does not name the storage problem: {m}"
        );
        let ps = p.status();
        assert!(ps.acked_seq.iter().all(|&a| a < ps.next_seq - 1), "attempt {attempt}: {ps:?}");
        // The session is failed for good: later syncs fail too, at once.
        assert!(matches!(p.msync(100, 1), Err(Error::MirrorLost { .. })), "attempt {attempt}");
        drop(p);

        // The mirror lives on, has nothing, and left no half-made log behind.
        let st = wait_status(&mut admin, "the failed session to end", |st| st.session.is_none());
        assert_eq!(st.groups_received, 0, "attempt {attempt}: {st:?}");
        assert_eq!(admin.read(100, 13).expect("read"), vec![0u8; 13], "attempt {attempt}");
        let left: Vec<_> = std::fs::read_dir(logs.path()).expect("list the log folder").collect();
        assert!(left.is_empty(), "attempt {attempt}: files left in the full log folder: {left:?}");
    }
}
