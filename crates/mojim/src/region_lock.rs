//! One primary per region: an exclusive lock on the region file.
//!
//! [`Primary::open`](crate::Primary::open) takes it, so every face (the library, `mojim kv`,
//! the C API, Python, recoverable memory, the interposer) gets it the same way. A caller that
//! must change the file before the primary maps it (`mojim kv` repairs a batch a crash cut
//! short, recoverable memory puts back a commit from its redo file) takes it first with
//! [`RegionLock::acquire`] and hands it to [`Primary::open_locked`](crate::Primary::open_locked).
//! A second opener is refused with [`Error::RegionLocked`], which names the region and, where
//! the system says, the holder's pid.
//!
//! Why `flock(2)`: the lock belongs to the open file description this holds. It goes when that
//! description is closed, which the kernel does for every descriptor of a process that ends,
//! SIGKILL included, so a killed primary never leaves its region locked. It does not go when the
//! process closes some other descriptor of the same file (the primary maps the region through
//! one of its own; `mojim kv` opens and closes the file to repair it), which is the trap of
//! classic POSIX record locks (`fcntl(F_SETLK)`): those belong to the process, are dropped by the
//! first `close` of any descriptor of the file, and never conflict within one process, so they
//! would let a second primary in the same process through. A second `flock` of the file through
//! another open conflicts, in this process as in any other. The descriptor is close-on-exec: a
//! program this one starts does not inherit the lock, but a child another thread forks shares it
//! until it execs, so a lock this process let go may be held a moment longer: a lock held by
//! this process (or by no pid `/proc/locks` names) is tried again for up to [`SETTLE`] before
//! the open is refused.
//! Linux's `/proc/locks` names the pid that took a `flock`, where open file description locks
//! (`F_OFD_SETLK`, otherwise alike) show none. Over NFS, Linux turns `flock` into a POSIX lock:
//! keep regions on local storage (they are mapped files anyway).

use crate::error::{Error, Result};
use rustix::fs::{flock, FlockOperation};
use rustix::io::Errno;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a lock held by this process is waited for (a fork's copy of it, until the child
/// execs; a primary being closed by another thread).
pub const SETTLE: Duration = Duration::from_secs(1);

/// The exclusive lock on a region file, held until dropped (and by a
/// [`Primary`](crate::Primary) opened with it, until that is closed or dropped).
#[derive(Debug)]
pub struct RegionLock {
    file: File,
    path: PathBuf,
}

impl RegionLock {
    /// Takes the lock on the region file at `path`, or fails at once with
    /// [`Error::RegionLocked`] if a primary (in this process or another) holds it.
    pub fn acquire(path: &Path) -> Result<RegionLock> {
        let file =
            File::open(path).map_err(Error::io(format!("open the region {} to lock it", path.display())))?;
        let settle = Instant::now() + SETTLE;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(RegionLock { file, path: path.to_path_buf() }),
                Err(Errno::WOULDBLOCK) => {
                    let holder = holder_of(&file);
                    if holder.is_none_or(|p| p == std::process::id()) && Instant::now() < settle {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    return Err(Error::RegionLocked { path: path.to_path_buf(), holder });
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(Error::io(format!("lock the region {}", path.display()))(e.into())),
            }
        }
    }

    /// The region file's path, as given to [`RegionLock::acquire`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that this is the lock of the file at `path` (however the path is spelled), for a
    /// primary about to open `path` with it.
    pub(crate) fn check_covers(&self, path: &Path) -> Result<()> {
        let locked = rustix::fs::fstat(&self.file)
            .map_err(|e| Error::io(format!("stat the locked region {}", self.path.display()))(e.into()))?;
        let named = rustix::fs::stat(path)
            .map_err(|e| Error::io(format!("stat the region {}", path.display()))(e.into()))?;
        if (locked.st_dev, locked.st_ino) != (named.st_dev, named.st_ino) {
            return Err(Error::Config(format!(
                "the lock handed to Primary::open_locked is of {}, but the options name the region {}: \
                 take the lock of the region being opened",
                self.path.display(),
                path.display()
            )));
        }
        Ok(())
    }
}

/// The pid holding a `flock` of `file`, as `/proc/locks` names it (`None` where it does not:
/// no `/proc`, or a lock shown without a pid).
fn holder_of(file: &File) -> Option<u32> {
    let st = rustix::fs::fstat(file).ok()?;
    let dev = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| flock_holder(l, dev, st.st_ino))
}

/// The pid of a line of `/proc/locks` that is a granted `flock` of the file with device
/// `(major, minor)` and inode `ino`, e.g. `4: FLOCK  ADVISORY  WRITE 1234 fe:00:9977867 0 EOF`
/// (the device in hexadecimal, the inode in decimal; a waiter's line has `->` after the number).
fn flock_holder(line: &str, dev: (u32, u32), ino: u64) -> Option<u32> {
    let mut w = line.split_whitespace();
    let _number = w.next()?;
    if w.next()? != "FLOCK" {
        return None;
    }
    let (_advisory, _mode) = (w.next()?, w.next()?);
    let pid: i64 = w.next()?.parse().ok()?;
    let mut id = w.next()?.split(':');
    let major = u32::from_str_radix(id.next()?, 16).ok()?;
    let minor = u32::from_str_radix(id.next()?, 16).ok()?;
    let inode: u64 = id.next()?.parse().ok()?;
    ((major, minor) == dev && inode == ino && pid > 0).then_some(pid as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let p = PathBuf::from("/dev/shm").join(format!("mojim-lock-{name}-{}", std::process::id()));
        std::fs::write(&p, b"a region").expect("make the file");
        p
    }

    #[test]
    fn reads_the_holder_of_a_flock_from_proc_locks() {
        let line = "4: FLOCK  ADVISORY  WRITE 11849 fe:00:9977867 0 EOF";
        assert_eq!(flock_holder(line, (0xfe, 0), 9977867), Some(11849));
        assert_eq!(flock_holder(line, (0xfe, 1), 9977867), None, "another device");
        assert_eq!(flock_holder(line, (0xfe, 0), 9977868), None, "another file");
        let waiter = "4: -> FLOCK  ADVISORY  WRITE 11850 fe:00:9977867 0 EOF";
        assert_eq!(flock_holder(waiter, (0xfe, 0), 9977867), None, "a waiter holds nothing");
        let posix = "1: POSIX  ADVISORY  WRITE 11849 fe:00:9977867 0 EOF";
        assert_eq!(flock_holder(posix, (0xfe, 0), 9977867), None);
        let ofd = "2: OFDLCK ADVISORY  WRITE -1 fe:00:9977867 0 EOF";
        assert_eq!(flock_holder(ofd, (0xfe, 0), 9977867), None);
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_region_and_the_holder_until_the_first_goes() {
        let path = scratch("twice");
        let first = RegionLock::acquire(&path).expect("the first lock");
        let e = RegionLock::acquire(&path).expect_err("a second open of the file is refused");
        match &e {
            Error::RegionLocked { path: p, holder } => {
                assert_eq!(p, &path);
                assert_eq!(*holder, Some(std::process::id()), "this process holds it");
            }
            other => panic!("{other:?}"),
        }
        let m = e.to_string();
        assert!(
            m.contains(&path.display().to_string()) && m.contains(&std::process::id().to_string()),
            "{m}"
        );
        // Another descriptor of the file, opened and closed, leaves the lock in place.
        drop(File::open(&path).expect("open the file again"));
        assert!(matches!(RegionLock::acquire(&path), Err(Error::RegionLocked { .. })));
        drop(first);
        let again = RegionLock::acquire(&path).expect("free once the first is dropped");
        again.check_covers(&path).expect("the lock of this very file");
        let other = scratch("other");
        assert!(matches!(again.check_covers(&other), Err(Error::Config(_))));
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&other);
    }

    /// A lock this process lets go a moment after another open asks (a forked child's copy of
    /// it, a primary closing in another thread) is waited for, not refused.
    #[test]
    fn a_lock_this_process_lets_go_within_the_settle_time_is_taken() {
        let path = scratch("settle");
        let first = RegionLock::acquire(&path).expect("the first lock");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
        });
        RegionLock::acquire(&path).expect("taken once the first is let go");
        t.join().expect("the holder ends");
        let _ = std::fs::remove_file(&path);
    }
}
