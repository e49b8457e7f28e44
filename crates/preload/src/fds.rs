//! Which descriptors are open on a listed file: a fixed array of atomics indexed by fd, so the
//! check every call makes is one load, without a lock.
//!
//! Each tracked descriptor also keeps the identity (device and inode) of the file it was opened
//! on, for [`Entry`]'s users to check, with one `fstat`, that the number still refers to that
//! file where it may have been closed and reused behind the interposer's back.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Descriptors below this can be tracked; opening a listed file at a higher one fails.
pub const MAX_FD: usize = 1 << 16;

static FDS: [AtomicU32; MAX_FD] = [const { AtomicU32::new(0) }; MAX_FD];
/// Per descriptor: the device and inode of the file it was opened on (meaningful while
/// tracked). Zero pages until used.
static DEV: [AtomicU64; MAX_FD] = [const { AtomicU64::new(0) }; MAX_FD];
static INO: [AtomicU64; MAX_FD] = [const { AtomicU64::new(0) }; MAX_FD];

/// A file's identity: its device and inode numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id {
    pub dev: u64,
    pub ino: u64,
}

const SLOT_MASK: u32 = 0xff;
const SYNC: u32 = 1 << 8;
const APPEND: u32 = 1 << 9;
const READ: u32 = 1 << 10;
const WRITE: u32 = 1 << 11;

/// A tracked descriptor: its slot and how it was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry(u32);

impl Entry {
    /// From `open`'s flags.
    pub fn new(slot: usize, flags: i32) -> Entry {
        assert!(slot < SLOT_MASK as usize);
        let mut v = slot as u32 + 1;
        if flags & (libc::O_SYNC | libc::O_DSYNC) != 0 {
            v |= SYNC;
        }
        if flags & libc::O_APPEND != 0 {
            v |= APPEND;
        }
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY => v |= READ,
            libc::O_WRONLY => v |= WRITE,
            _ => v |= READ | WRITE,
        }
        Entry(v)
    }

    pub fn slot(self) -> usize {
        (self.0 & SLOT_MASK) as usize - 1
    }

    /// Every write through it is its own sync point (`O_SYNC`, `O_DSYNC`).
    pub fn sync(self) -> bool {
        self.0 & SYNC != 0
    }

    pub fn append(self) -> bool {
        self.0 & APPEND != 0
    }

    pub fn readable(self) -> bool {
        self.0 & READ != 0
    }

    pub fn writable(self) -> bool {
        self.0 & WRITE != 0
    }

    /// With `O_APPEND` set or cleared (`fcntl(F_SETFL)`).
    pub fn with_append(self, on: bool) -> Entry {
        Entry(if on { self.0 | APPEND } else { self.0 & !APPEND })
    }
}

/// The entry of `fd`, if it is tracked.
#[inline]
pub fn get(fd: i32) -> Option<Entry> {
    let v = FDS.get(usize::try_from(fd).ok()?)?.load(Ordering::Acquire);
    (v != 0).then_some(Entry(v))
}

/// The identity `fd` was tracked with (meaningful while [`get`] finds it).
pub fn id(fd: i32) -> Option<Id> {
    let i = usize::try_from(fd).ok().filter(|&i| i < MAX_FD)?;
    Some(Id { dev: DEV[i].load(Ordering::Acquire), ino: INO[i].load(Ordering::Acquire) })
}

/// Tracks `fd`, open on the file `id` (false: it is too high to track).
pub fn set(fd: i32, e: Entry, id: Id) -> bool {
    match usize::try_from(fd).ok().filter(|&i| i < MAX_FD) {
        Some(i) => {
            DEV[i].store(id.dev, Ordering::Release);
            INO[i].store(id.ino, Ordering::Release);
            FDS[i].store(e.0, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Changes the entry of a tracked `fd`, keeping its identity (`fcntl(F_SETFL)`).
pub fn update(fd: i32, e: Entry) {
    if let Some(a) = usize::try_from(fd).ok().and_then(|i| FDS.get(i)) {
        a.store(e.0, Ordering::Release);
    }
}

/// Stops tracking `fd`.
pub fn clear(fd: i32) {
    if let Some(a) = usize::try_from(fd).ok().and_then(|i| FDS.get(i)) {
        a.store(0, Ordering::Release);
    }
}

/// `fd` (if not negative) was just made by a call that is not about a listed file: whatever
/// the table held for its number is stale (a descriptor closed behind the interposer's back)
/// and goes. Returns `fd`.
pub fn fresh(fd: i32) -> i32 {
    if fd >= 0 {
        clear(fd);
    }
    fd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_flags() {
        let e = Entry::new(3, libc::O_WRONLY | libc::O_DSYNC);
        assert_eq!(
            (e.slot(), e.sync(), e.append(), e.readable(), e.writable()),
            (3, true, false, false, true)
        );
        let e = Entry::new(0, libc::O_RDWR | libc::O_APPEND);
        assert_eq!(
            (e.slot(), e.sync(), e.append(), e.readable(), e.writable()),
            (0, false, true, true, true)
        );
        assert!(!e.with_append(false).append());
        let id = Id { dev: 7, ino: 42 };
        assert!(!set(MAX_FD as i32, e, id));
        assert!(set(5, e, id));
        assert_eq!((get(5), self::id(5)), (Some(e), Some(id)));
        update(5, e.with_append(false));
        assert_eq!((get(5), self::id(5)), (Some(e.with_append(false)), Some(id)));
        clear(5);
        assert_eq!((get(5), get(-1), self::id(-1)), (None, None, None));
        assert!(set(6, e, id));
        assert_eq!((fresh(6), get(6), fresh(-1)), (6, None, -1));
    }
}
