//! The interposed C functions. Each one looks its descriptor up in the fd table (or, for a
//! path, compares its last component with the listed files') and passes every call that is not
//! about a listed file straight to the C library's function.
//!
//! The table is kept at every call that makes or closes a descriptor (here and in `fresh.rs`).
//! A descriptor closed and its number reused without such a call (a raw system call) leaves a
//! stale entry: the calls that are not plain data transfers (sync points, `mmap`, sizes,
//! `fstat`, `fdopen`, ...) check the descriptor's identity (device and inode, one `fstat`)
//! before trusting it and drop a stale one. Reads and writes do not: an `fstat` would cost
//! several times the copy that is their whole work.
//!
//! Safety, for every function here: each is called by C code with the arguments the C function
//! of that name takes, and upholds the same contract as that function (pointers valid for the
//! lengths given, as the caller promises the C library).
#![allow(clippy::missing_safety_doc)]

use crate::fds::{self, Entry, Id};
use crate::real::real;
use crate::state::{add_dirty, slots_touched, State};
use crate::{enter, forked, ready, say, Busy};
use libc::{c_char, c_int, c_uint, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, FILE};
use std::ffi::CStr;
use std::sync::atomic::Ordering;

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno location, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// Fails the call with `errno` and says why on standard error.
pub(crate) fn fail<T: From<i8>>(errno: c_int, msg: &str) -> T {
    say(msg);
    set_errno(errno);
    T::from(-1)
}

fn errname(e: c_int) -> &'static str {
    match e {
        libc::EIO => "EIO",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EMFILE => "EMFILE",
        libc::EBADF => "EBADF",
        _ => "errno",
    }
}

/// A call on a tracked descriptor: the state, its entry and the guard; `Err(())` when it was
/// refused (in a forked child); `Ok(None)` to pass it on.
fn tracked(fd: c_int, op: &str) -> Result<Option<(&'static State, Entry, Busy)>, ()> {
    let Some(e) = fds::get(fd) else { return Ok(None) };
    if forked() {
        let _: c_int = fail(
            libc::EIO,
            &format!(
                "{op}(fd {fd}): a replicated file in a child forked from the process that opened it (EIO)"
            ),
        );
        return Err(());
    }
    let (Some(st), Some(b)) = (ready(), enter()) else { return Ok(None) };
    Ok(Some((st, e, b)))
}

/// The identity of the file `fd` refers to now (one `fstat`, straight to the kernel); `None`
/// if it is not open.
pub(crate) fn identity(fd: c_int) -> Option<Id> {
    let mut sb = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a `struct stat` into the buffer, which is one.
    if unsafe { libc::syscall(libc::SYS_fstat, fd, sb.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: filled by the successful call.
    let sb = unsafe { sb.assume_init() };
    Some(Id { dev: sb.st_dev, ino: sb.st_ino })
}

/// Whether the tracked `fd` still refers to the file it was opened on, `now` being what it
/// refers to now. If not, it was closed and its number reused without the interposer seeing
/// it (a raw system call, a library's own `close`): the entry goes, which is said, and the
/// caller passes the call on to the file it is now.
fn still_same(fd: c_int, now: Option<Id>, op: &str) -> bool {
    let Some(e) = fds::get(fd) else { return false };
    if now.is_some() && now == fds::id(fd) {
        return true;
    }
    fds::clear(fd);
    let name = ready().map(|st| st.slots[e.slot()].name.as_str()).unwrap_or("a replicated file");
    say(&format!(
        "{op}(fd {fd}): the descriptor was {name} but now refers to another file (it was closed and its \
         number reused without close(), e.g. by a raw system call): the call goes to that file"
    ));
    false
}

/// As [`tracked`], after checking that the descriptor still refers to its listed file (one
/// `fstat`): for the calls that are not plain data transfers.
fn tracked_checked(fd: c_int, op: &str) -> Result<Option<(&'static State, Entry, Busy)>, ()> {
    if fds::get(fd).is_some() && !forked() && ready().is_some() && !still_same(fd, identity(fd), op) {
        return Ok(None);
    }
    tracked(fd, op)
}

/// Whether `fd` is tracked, its identity checked (unless in a forked child or before start,
/// where nothing is checked).
fn listed_now(fd: c_int, op: &str) -> bool {
    fds::get(fd).is_some() && (forked() || ready().is_none() || still_same(fd, identity(fd), op))
}

/// A path-based call about a listed file: the state, the slot and the guard.
pub(crate) unsafe fn path_slot(dirfd: c_int, path: *const c_char) -> Option<(&'static State, usize, Busy)> {
    // SAFETY: the caller's path.
    let (st, bytes, dir, b) = unsafe { path_at(dirfd, path) }?;
    let slot = st.slot_of_path(bytes, dir.as_deref())?;
    Some((st, slot, b))
}

/// A path-based call, once started and outside the interposer's own code: the state, the
/// path's bytes, the folder it is relative to (`None`: the working folder, or it is absolute)
/// and the guard.
///
/// # Safety
///
/// `path` is null or NUL-terminated, as the C functions require.
pub(crate) unsafe fn path_at<'a>(
    dirfd: c_int,
    path: *const c_char,
) -> Option<(&'static State, &'a [u8], Option<std::path::PathBuf>, Busy)> {
    if path.is_null() {
        return None;
    }
    let st = ready()?;
    let b = enter()?;
    // SAFETY: as the caller promises.
    let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
    let dir = if dirfd == libc::AT_FDCWD || bytes.starts_with(b"/") {
        None
    } else {
        Some(std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()?)
    };
    Some((st, bytes, dir, b))
}

fn sync_failed(st: &State, op: &str, what: &str, e: mojim::Error) -> c_int {
    let _ = st;
    fail(libc::EIO, &format!("{op}({what}): the sync point failed, the data is NOT replicated (EIO): {e}"))
}

/// One sync point of `slots`.
fn sync_slots(st: &State, slots: &[usize], op: &str, what: &str) -> c_int {
    let mut sh = st.lock();
    match st.sync(&mut sh, slots) {
        Ok(()) => 0,
        Err(e) => sync_failed(st, op, what, e),
    }
}

// ---------------------------------------------------------------------------------------------
// open

unsafe fn open_common(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    let open_real = real!(openat: unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int);
    if flags & (libc::O_PATH | libc::O_DIRECTORY) != 0 {
        // SAFETY: the caller's arguments, passed on.
        return fds::fresh(unsafe { open_real(dirfd, path, flags, mode) });
    }
    // SAFETY: the caller's path.
    let Some((st, slot, _b)) = (unsafe { path_slot(dirfd, path) }) else {
        // SAFETY: the caller's arguments, passed on.
        return fds::fresh(unsafe { open_real(dirfd, path, flags, mode) });
    };
    // SAFETY: the caller's arguments: the placeholder is opened as asked, so that permission
    // and folder errors are the file system's own.
    let fd = unsafe { open_real(dirfd, path, flags, mode) };
    if fd < 0 {
        return fd;
    }
    let close_real = real!(close: unsafe extern "C" fn(c_int) -> c_int);
    let Some(id) = identity(fd) else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        // SAFETY: closes the descriptor just opened.
        unsafe { close_real(fd) };
        set_errno(errno);
        return -1;
    };
    let e = Entry::new(slot, flags);
    if !fds::set(fd, e, id) {
        // SAFETY: closes the descriptor just opened.
        unsafe { close_real(fd) };
        return fail(
            libc::EMFILE,
            &format!(
                "open({}): descriptor {fd} is past the {} this library can track (EMFILE)",
                st.slots[slot].name,
                fds::MAX_FD
            ),
        );
    }
    // A file just made (O_EXCL: its placeholder was removed, by another program) starts empty.
    let created = flags & (libc::O_CREAT | libc::O_EXCL) == libc::O_CREAT | libc::O_EXCL;
    if created || (flags & libc::O_TRUNC != 0 && e.writable()) {
        let mut sh = st.lock();
        st.set_size(&mut sh, slot, 0);
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(libc::AT_FDCWD, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(dirfd, path, flags, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments (the fortified open takes no mode).
    unsafe { open_common(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(libc::AT_FDCWD, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { open_common(dirfd, path, flags, 0) }
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments; creat is this open.
    unsafe { open_common(libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode) }
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { creat(path, mode) }
}

unsafe fn fopen_common(path: *const c_char, mode: *const c_char, name: &str) -> *mut FILE {
    // SAFETY: the caller's path.
    if let Some((st, slot, _b)) = unsafe { path_slot(libc::AT_FDCWD, path) } {
        say(&format!(
            "{name}({}): stdio streams on a replicated file are not supported (EOPNOTSUPP): use open/read/write",
            st.slots[slot].name
        ));
        set_errno(libc::EOPNOTSUPP);
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's arguments, passed on.
    fresh_stream(unsafe {
        real!(fopen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE)(path, mode)
    })
}

/// A stream just opened on a descriptor of its own (an unlisted file, a pipe): that number is
/// a new descriptor.
pub(crate) fn fresh_stream(f: *mut FILE) -> *mut FILE {
    if !f.is_null() {
        // SAFETY: a stream the C library just returned.
        fds::fresh(unsafe { libc::fileno(f) });
    }
    f
}

/// A stream on a descriptor of a listed file would read and write the placeholder on disk (the
/// C library's stdio calls its own `read` and `write`, not these): refused, as `fopen` is.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    match tracked_checked(fd, "fdopen") {
        Err(()) => std::ptr::null_mut(),
        Ok(Some((st, e, _b))) => {
            let _: c_int = fail(
                libc::EOPNOTSUPP,
                &format!(
                    "fdopen(fd {fd}, {}): stdio streams on a replicated file are not supported (EOPNOTSUPP): \
                     use read/write on the descriptor",
                    st.slots[e.slot()].name
                ),
            );
            std::ptr::null_mut()
        }
        // SAFETY: the caller's arguments, passed on.
        Ok(None) => unsafe {
            real!(fdopen: unsafe extern "C" fn(c_int, *const c_char) -> *mut FILE)(fd, mode)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's arguments.
    unsafe { fopen_common(path, mode, "fopen") }
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: the caller's arguments.
    unsafe { fopen_common(path, mode, "fopen64") }
}

// ---------------------------------------------------------------------------------------------
// descriptors

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    fds::clear(fd);
    // SAFETY: the caller's descriptor, passed on.
    unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe {
        real!(close_range: unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int)(first, last, flags)
    };
    if r == 0 && (flags as c_uint & libc::CLOSE_RANGE_CLOEXEC) == 0 {
        let hi = last.min(fds::MAX_FD as c_uint - 1);
        for fd in first..=hi {
            fds::clear(fd as c_int);
        }
    }
    r
}

/// After a duplication to `new` succeeded: tracks it as `old` is (or not at all).
fn dup_to(old: c_int, new: c_int) -> c_int {
    if new < 0 || new == old {
        return new;
    }
    match (fds::get(old), fds::id(old)) {
        (Some(e), Some(id)) => {
            if !fds::set(new, e, id) {
                // SAFETY: closes the descriptor just made.
                unsafe { real!(close: unsafe extern "C" fn(c_int) -> c_int)(new) };
                return fail(
                    libc::EMFILE,
                    &format!("dup(fd {old}): descriptor {new} is past what can be tracked (EMFILE)"),
                );
            }
        }
        _ => fds::clear(new),
    }
    new
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: passed on.
    dup_to(fd, unsafe { real!(dup: unsafe extern "C" fn(c_int) -> c_int)(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: passed on.
    dup_to(old, unsafe { real!(dup2: unsafe extern "C" fn(c_int, c_int) -> c_int)(old, new) })
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: passed on.
    dup_to(old, unsafe { real!(dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int)(old, new, flags) })
}

fn after_fcntl(fd: c_int, cmd: c_int, arg: usize, r: c_int) -> c_int {
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC if r >= 0 => dup_to(fd, r),
        libc::F_SETFL if r == 0 => {
            if let Some(e) = fds::get(fd) {
                fds::update(fd, e.with_append(arg as c_int & libc::O_APPEND != 0));
            }
            r
        }
        _ => r,
    }
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: passed on (the optional argument is in the same register either way).
    let r = unsafe { real!(fcntl: unsafe extern "C" fn(c_int, c_int, usize) -> c_int)(fd, cmd, arg) };
    after_fcntl(fd, cmd, arg, r)
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: passed on.
    let r = unsafe { real!(fcntl64: unsafe extern "C" fn(c_int, c_int, usize) -> c_int)(fd, cmd, arg) };
    after_fcntl(fd, cmd, arg, r)
}

// ---------------------------------------------------------------------------------------------
// write and read

fn cur_pos(fd: c_int) -> i64 {
    // SAFETY: lseek on the caller's descriptor.
    unsafe { real!(lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t)(fd, 0, libc::SEEK_CUR) }
}

fn set_pos(fd: c_int, at: u64) {
    // SAFETY: lseek on the caller's descriptor; a regular file takes any position.
    unsafe {
        real!(lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t)(fd, at as off_t, libc::SEEK_SET)
    };
}

/// A write of `bufs` to a tracked descriptor: at `at`, or at its position (and then moving
/// it), or at the end for `O_APPEND`. A sync point too when the descriptor is `O_SYNC`/`O_DSYNC`
/// or `sync` says so (`RWF_DSYNC`).
unsafe fn do_write(
    st: &State,
    e: Entry,
    fd: c_int,
    bufs: &[(*const u8, usize)],
    at: Option<i64>,
    sync: bool,
    op: &str,
) -> ssize_t {
    let s = &st.slots[e.slot()];
    if !e.writable() {
        set_errno(libc::EBADF);
        return -1;
    }
    let total: usize = bufs.iter().map(|b| b.1).sum();
    if total > isize::MAX as usize {
        set_errno(libc::EINVAL);
        return -1;
    }
    let mut sh = st.lock();
    let start = match at {
        Some(o) if o < 0 => {
            set_errno(libc::EINVAL);
            return -1;
        }
        Some(o) if !e.append() => o as u64,
        _ if e.append() => s.size.load(Ordering::Relaxed),
        _ => {
            let p = cur_pos(fd);
            if p < 0 {
                return -1;
            }
            p as u64
        }
    };
    let end = start.saturating_add(total as u64);
    if end > s.capacity {
        return fail(
            libc::EFBIG,
            &format!(
                "{op}(fd {fd}, {}): {total} bytes at offset {start} would end at {end}, past the file's slot of {} \
                 bytes in the region (EFBIG): make [region] size larger or list fewer files",
                s.name, s.capacity
            ),
        );
    }
    if total > 0 {
        st.grow(&mut sh, e.slot(), start);
        let mut p = start;
        for &(b, n) in bufs {
            // SAFETY: `b` holds `n` bytes (the caller's buffer); `p..p + n` lies inside the
            // slot (end <= capacity); writers hold the lock.
            unsafe { std::ptr::copy_nonoverlapping(b, st.ptr(e.slot(), p), n) };
            p += n as u64;
        }
        add_dirty(&mut sh.dirty[e.slot()], start, end);
        if end > s.size.load(Ordering::Relaxed) {
            s.size.store(end, Ordering::Release);
        }
    }
    if at.is_none() {
        set_pos(fd, end);
    }
    if sync || e.sync() {
        if let Err(err) = st.sync(&mut sh, &[e.slot()]) {
            return sync_failed(st, op, &format!("fd {fd}, {}", s.name), err) as ssize_t;
        }
    }
    total as ssize_t
}

/// A read into `bufs` from a tracked descriptor, bounded by the file's size.
unsafe fn do_read(st: &State, e: Entry, fd: c_int, bufs: &[(*mut u8, usize)], at: Option<i64>) -> ssize_t {
    let s = &st.slots[e.slot()];
    if !e.readable() {
        set_errno(libc::EBADF);
        return -1;
    }
    let start = match at {
        Some(o) if o < 0 => {
            set_errno(libc::EINVAL);
            return -1;
        }
        Some(o) => o as u64,
        None => {
            let p = cur_pos(fd);
            if p < 0 {
                return -1;
            }
            p as u64
        }
    };
    let size = s.size.load(Ordering::Acquire);
    let mut p = start;
    for &(b, n) in bufs {
        let k = (n as u64).min(size.saturating_sub(p)) as usize;
        if k == 0 {
            break;
        }
        // SAFETY: `b` has room for `n` >= `k` bytes; `p..p + k` lies inside the slot (below
        // its size, at most its capacity).
        unsafe { std::ptr::copy_nonoverlapping(st.ptr(e.slot(), p), b, k) };
        p += k as u64;
    }
    if at.is_none() {
        set_pos(fd, p);
    }
    (p - start) as ssize_t
}

/// An iovec array as buffers.
unsafe fn iovs<T>(iov: *const iovec, cnt: c_int) -> Option<Vec<(*mut T, usize)>> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) || (cnt > 0 && iov.is_null()) {
        set_errno(libc::EINVAL);
        return None;
    }
    if cnt == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the caller passes `cnt` iovecs at `iov`.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    Some(v.iter().map(|i| (i.iov_base.cast::<T>(), i.iov_len)).collect())
}

fn consts(v: Vec<(*mut u8, usize)>) -> Vec<(*const u8, usize)> {
    v.into_iter().map(|(p, n)| (p.cast_const(), n)).collect()
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match tracked(fd, "write") {
        Err(()) => -1,
        // SAFETY: the caller's buffer of `n` bytes.
        Ok(Some((st, e, _b))) => unsafe { do_write(st, e, fd, &[(buf.cast(), n)], None, false, "write") },
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t)(fd, buf, n)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    match tracked(fd, "pwrite") {
        Err(()) => -1,
        // SAFETY: the caller's buffer.
        Ok(Some((st, e, _b))) => unsafe {
            do_write(st, e, fd, &[(buf.cast(), n)], Some(off), false, "pwrite")
        },
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(pwrite: unsafe extern "C" fn(c_int, *const c_void, size_t, off_t) -> ssize_t)(
                fd, buf, n, off,
            )
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { pwrite(fd, buf, n, off) }
}

unsafe fn writev_common(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: Option<i64>,
    flags: c_int,
    op: &str,
) -> Option<ssize_t> {
    match tracked(fd, op) {
        Err(()) => Some(-1),
        Ok(Some((st, e, _b))) => {
            // SAFETY: the caller's iovecs.
            let Some(b) = (unsafe { iovs::<u8>(iov, cnt) }) else { return Some(-1) };
            let sync = flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0;
            // SAFETY: the caller's buffers.
            Some(unsafe { do_write(st, e, fd, &consts(b), off, sync, op) })
        }
        Ok(None) => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { writev_common(fd, iov, cnt, None, 0, "writev") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe { real!(writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, cnt) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { writev_common(fd, iov, cnt, Some(off), 0, "pwritev") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(pwritev: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off)
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { pwritev(fd, iov, cnt, off) }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let at = if off == -1 { None } else { Some(off) };
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { writev_common(fd, iov, cnt, at, flags, "pwritev2") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(pwritev2: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { pwritev2(fd, iov, cnt, off, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match tracked(fd, "read") {
        Err(()) => -1,
        // SAFETY: the caller's buffer.
        Ok(Some((st, e, _b))) => unsafe { do_read(st, e, fd, &[(buf.cast(), n)], None) },
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t)(fd, buf, n)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
    if n > buflen {
        // SAFETY: what the fortified function does on overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: the caller's arguments.
    unsafe { read(fd, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    match tracked(fd, "pread") {
        Err(()) => -1,
        // SAFETY: the caller's buffer.
        Ok(Some((st, e, _b))) => unsafe { do_read(st, e, fd, &[(buf.cast(), n)], Some(off)) },
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(pread: unsafe extern "C" fn(c_int, *mut c_void, size_t, off_t) -> ssize_t)(fd, buf, n, off)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { pread(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    buflen: size_t,
) -> ssize_t {
    if n > buflen {
        // SAFETY: what the fortified function does on overflow.
        unsafe { libc::abort() };
    }
    // SAFETY: the caller's arguments.
    unsafe { pread(fd, buf, n, off) }
}

#[no_mangle]
pub unsafe extern "C" fn __pread64_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off64_t,
    buflen: size_t,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { __pread_chk(fd, buf, n, off, buflen) }
}

unsafe fn readv_common(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: Option<i64>,
    op: &str,
) -> Option<ssize_t> {
    match tracked(fd, op) {
        Err(()) => Some(-1),
        Ok(Some((st, e, _b))) => {
            // SAFETY: the caller's iovecs.
            let Some(b) = (unsafe { iovs::<u8>(iov, cnt) }) else { return Some(-1) };
            // SAFETY: the caller's buffers.
            Some(unsafe { do_read(st, e, fd, &b, off) })
        }
        Ok(None) => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { readv_common(fd, iov, cnt, None, "readv") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe { real!(readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t)(fd, iov, cnt) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { readv_common(fd, iov, cnt, Some(off), "preadv") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(preadv: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t) -> ssize_t)(fd, iov, cnt, off)
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { preadv(fd, iov, cnt, off) }
}

#[no_mangle]
pub unsafe extern "C" fn preadv2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
) -> ssize_t {
    let at = if off == -1 { None } else { Some(off) };
    // SAFETY: the caller's arguments.
    if let Some(r) = unsafe { readv_common(fd, iov, cnt, at, "preadv2") } {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(preadv2: unsafe extern "C" fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t)(
            fd, iov, cnt, off, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { preadv2(fd, iov, cnt, off, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    let lseek_real = real!(lseek: unsafe extern "C" fn(c_int, off_t, c_int) -> off_t);
    if !matches!(whence, libc::SEEK_END | libc::SEEK_DATA | libc::SEEK_HOLE) {
        // SAFETY: SEEK_SET and SEEK_CUR move the real descriptor's position, which is the file's.
        return unsafe { lseek_real(fd, off, whence) };
    }
    let Ok(Some((st, e, _b))) = tracked_checked(fd, "lseek") else {
        // SAFETY: passed on.
        return unsafe { lseek_real(fd, off, whence) };
    };
    let size = st.slots[e.slot()].size.load(Ordering::Acquire) as i64;
    let target = match whence {
        libc::SEEK_END => size.checked_add(off),
        libc::SEEK_DATA if off >= 0 && off < size => Some(off),
        libc::SEEK_HOLE if off >= 0 && off < size => Some(size),
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            set_errno(libc::ENXIO);
            return -1;
        }
        _ => unreachable!("only SEEK_END, SEEK_DATA and SEEK_HOLE get here"),
    };
    match target {
        Some(t) if t >= 0 => {
            // SAFETY: as above.
            unsafe { lseek_real(fd, t, libc::SEEK_SET) }
        }
        _ => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    // SAFETY: the same function on this ABI.
    unsafe { lseek(fd, off, whence) }
}

// ---------------------------------------------------------------------------------------------
// durability

fn fd_sync(fd: c_int, op: &str) -> Option<c_int> {
    match tracked_checked(fd, op) {
        Err(()) => Some(-1),
        Ok(Some((st, e, _b))) => {
            Some(sync_slots(st, &[e.slot()], op, &format!("fd {fd}, {}", st.slots[e.slot()].name)))
        }
        Ok(None) => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    // SAFETY: passed on when not tracked.
    fd_sync(fd, "fsync").unwrap_or_else(|| unsafe { real!(fsync: unsafe extern "C" fn(c_int) -> c_int)(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    // SAFETY: passed on when not tracked.
    fd_sync(fd, "fdatasync")
        .unwrap_or_else(|| unsafe { real!(fdatasync: unsafe extern "C" fn(c_int) -> c_int)(fd) })
}

#[no_mangle]
pub unsafe extern "C" fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, flags: c_uint) -> c_int {
    if flags & libc::SYNC_FILE_RANGE_WAIT_AFTER == 0 && listed_now(fd, "sync_file_range") {
        // Starting write-back promises nothing; the next sync point sends the bytes.
        return 0;
    }
    fd_sync(fd, "sync_file_range").unwrap_or_else(|| {
        // SAFETY: passed on.
        unsafe {
            real!(sync_file_range: unsafe extern "C" fn(c_int, off64_t, off64_t, c_uint) -> c_int)(
                fd, off, n, flags,
            )
        }
    })
}

fn sync_all(op: &str) -> c_int {
    let (Some(st), Some(_b)) = (ready(), enter()) else { return 0 };
    let all: Vec<usize> = (0..st.slots.len()).collect();
    sync_slots(st, &all, op, "every replicated file")
}

#[no_mangle]
pub unsafe extern "C" fn syncfs(fd: c_int) -> c_int {
    if listed_now(fd, "syncfs") && sync_all("syncfs") != 0 {
        return -1;
    }
    // SAFETY: passed on.
    unsafe { real!(syncfs: unsafe extern "C" fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn sync() {
    sync_all("sync");
    // SAFETY: passed on.
    unsafe { real!(sync: unsafe extern "C" fn())() }
}

// ---------------------------------------------------------------------------------------------
// mappings

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    let Ok(Some((st, e, _b))) = tracked_checked(fd, "mmap") else {
        if forked() && fds::get(fd).is_some() {
            return libc::MAP_FAILED;
        }
        // SAFETY: passed on.
        return unsafe {
            real!(mmap: unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void)(
                addr, len, prot, flags, fd, off,
            )
        };
    };
    let s = &st.slots[e.slot()];
    let refuse = |errno: c_int, why: String| -> *mut c_void {
        let _: c_int = fail(
            errno,
            &format!("mmap(fd {fd}, {}, {len} bytes at offset {off}): {why} ({})", s.name, errname(errno)),
        );
        libc::MAP_FAILED
    };
    if flags & libc::MAP_TYPE != libc::MAP_SHARED && flags & libc::MAP_TYPE != libc::MAP_SHARED_VALIDATE {
        return refuse(
            libc::ENODEV,
            "a private mapping of a replicated file is not supported: map it MAP_SHARED".into(),
        );
    }
    if flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0 {
        return refuse(
            libc::EINVAL,
            "a replicated file is mapped where its region is: MAP_FIXED cannot be honoured".into(),
        );
    }
    if off < 0 || off % 4096 != 0 || len == 0 {
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    if prot & libc::PROT_WRITE != 0 && !e.writable() {
        set_errno(libc::EACCES);
        return libc::MAP_FAILED;
    }
    if (off as u64).saturating_add(len as u64) > s.capacity {
        return refuse(
            libc::ENOMEM,
            format!(
                "the mapping would end at {}, past the file's slot of {} bytes in the region: make [region] size \
                 larger (each of the {} listed files gets an equal share) or map less (e.g. a smaller LMDB map size)",
                off as u64 + len as u64,
                s.capacity,
                st.slots.len()
            ),
        );
    }
    if prot & libc::PROT_WRITE != 0 {
        // Before the program can store through it: its sync points find those stores.
        let mut sh = st.lock();
        st.mapped_writable(&mut sh, e.slot(), off as u64 + len as u64);
    }
    st.ptr(e.slot(), off as u64).cast()
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    // SAFETY: the same function on this ABI.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// Whether `[addr, addr + len)` touches the region; `Some(true)` when it lies wholly inside.
fn region_range(addr: *mut c_void, len: size_t) -> Option<(&'static State, bool)> {
    let st = ready()?;
    let a = addr as usize;
    let end = a.saturating_add(len.max(1));
    let region_end = st.base + st.region_size as usize;
    if end <= st.base || a >= region_end {
        return None;
    }
    Some((st, st.in_region(a, len)))
}

#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    match region_range(addr, len) {
        // The region stays mapped for the process's life: unmapping a file's view is a no-op.
        Some((_, true)) => 0,
        Some((_, false)) => fail(
            libc::EINVAL,
            &format!("munmap({addr:p}, {len}): the range straddles the region's mapping (EINVAL)"),
        ),
        // SAFETY: passed on.
        None => unsafe { real!(munmap: unsafe extern "C" fn(*mut c_void, size_t) -> c_int)(addr, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    let Some((st, inside)) = region_range(addr, len) else {
        // SAFETY: passed on.
        return unsafe {
            real!(msync: unsafe extern "C" fn(*mut c_void, size_t, c_int) -> c_int)(addr, len, flags)
        };
    };
    if !inside {
        return fail(
            libc::EINVAL,
            &format!("msync({addr:p}, {len}): the range straddles the region's mapping (EINVAL)"),
        );
    }
    if forked() {
        return fail(libc::EIO, "msync: a replicated file's mapping in a forked child (EIO)");
    }
    if flags & libc::MS_SYNC == 0 {
        // MS_ASYNC (or only MS_INVALIDATE) promises no durability; a later sync point of the
        // range sends it.
        return 0;
    }
    let Some(_b) = enter() else { return 0 };
    let touched = slots_touched(st, addr as usize, len);
    let mut sh = st.lock();
    for &(i, a, b) in &touched {
        add_dirty(&mut sh.dirty[i], a, b);
    }
    let slots: Vec<usize> = touched.iter().map(|t| t.0).collect();
    match st.sync(&mut sh, &slots) {
        Ok(()) => 0,
        Err(e) => sync_failed(st, "msync", &format!("{addr:p}, {len} bytes"), e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if region_range(old, old_len).is_some() {
        let _: c_int = fail(
            libc::ENOMEM,
            &format!("mremap({old:p}, {old_len} -> {new_len}): a replicated file's mapping cannot move or grow (ENOMEM): map it at its full size once"),
        );
        return libc::MAP_FAILED;
    }
    // SAFETY: passed on (the optional fifth argument is in its register either way).
    unsafe {
        real!(mremap: unsafe extern "C" fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void)(
            old, old_len, new_len, flags, new_addr,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// sizes

fn resize(st: &State, slot: usize, len: i64, op: &str, what: &str, errno_big: c_int) -> c_int {
    let s = &st.slots[slot];
    if len < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    if len as u64 > s.capacity {
        return fail(
            errno_big,
            &format!(
                "{op}({what}, {len}): past the file's slot of {} bytes in the region ({}): make [region] size larger \
                 or list fewer files",
                s.capacity,
                errname(errno_big)
            ),
        );
    }
    let mut sh = st.lock();
    st.set_size(&mut sh, slot, len as u64);
    0
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    match tracked_checked(fd, "ftruncate") {
        Err(()) => -1,
        Ok(Some((st, e, _b))) => {
            if !e.writable() {
                set_errno(libc::EINVAL);
                return -1;
            }
            resize(
                st,
                e.slot(),
                len,
                "ftruncate",
                &format!("fd {fd}, {}", st.slots[e.slot()].name),
                libc::EFBIG,
            )
        }
        // SAFETY: passed on.
        Ok(None) => unsafe { real!(ftruncate: unsafe extern "C" fn(c_int, off_t) -> c_int)(fd, len) },
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    // SAFETY: the same function on this ABI.
    unsafe { ftruncate(fd, len) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    // SAFETY: the caller's path.
    if let Some((st, slot, _b)) = unsafe { path_slot(libc::AT_FDCWD, path) } {
        return resize(st, slot, len, "truncate", &st.slots[slot].name.clone(), libc::EFBIG);
    }
    // SAFETY: passed on.
    unsafe { real!(truncate: unsafe extern "C" fn(*const c_char, off_t) -> c_int)(path, len) }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    // SAFETY: the same function on this ABI.
    unsafe { truncate(path, len) }
}

/// fallocate on a tracked descriptor: `Err(errno)` on failure (said already).
fn allocate(st: &State, e: Entry, fd: c_int, mode: c_int, off: i64, len: i64, op: &str) -> Result<(), c_int> {
    let s = &st.slots[e.slot()];
    if off < 0 || len <= 0 {
        return Err(libc::EINVAL);
    }
    if !e.writable() {
        return Err(libc::EBADF);
    }
    let end = (off as u64).saturating_add(len as u64);
    if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
        say(&format!("{op}(fd {fd}, {}, mode {mode:#x}): only plain allocation is supported on a replicated file (EOPNOTSUPP)", s.name));
        return Err(libc::EOPNOTSUPP);
    }
    if end > s.capacity {
        say(&format!(
            "{op}(fd {fd}, {}, {len} bytes at {off}): would end at {end}, past the file's slot of {} bytes in the region \
             (ENOSPC): make [region] size larger or list fewer files",
            s.name, s.capacity
        ));
        return Err(libc::ENOSPC);
    }
    if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
        let mut sh = st.lock();
        st.grow(&mut sh, e.slot(), end);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    match tracked_checked(fd, "fallocate") {
        Err(()) => -1,
        Ok(Some((st, e, _b))) => match allocate(st, e, fd, mode, off, len, "fallocate") {
            Ok(()) => 0,
            Err(errno) => {
                set_errno(errno);
                -1
            }
        },
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(fallocate: unsafe extern "C" fn(c_int, c_int, off_t, off_t) -> c_int)(fd, mode, off, len)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    // SAFETY: the same function on this ABI.
    unsafe { fallocate(fd, mode, off, len) }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    match tracked_checked(fd, "posix_fallocate") {
        Err(()) => libc::EIO,
        // posix_fallocate returns the error number instead of setting errno.
        Ok(Some((st, e, _b))) => allocate(st, e, fd, 0, off, len, "posix_fallocate").err().unwrap_or(0),
        // SAFETY: passed on.
        Ok(None) => unsafe {
            real!(posix_fallocate: unsafe extern "C" fn(c_int, off_t, off_t) -> c_int)(fd, off, len)
        },
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    // SAFETY: the same function on this ABI.
    unsafe { posix_fallocate(fd, off, len) }
}

// ---------------------------------------------------------------------------------------------
// stat: the real call, then the replicated size for a listed regular file

/// The replicated size of the file `fd` is open on, if it is a listed one and `now` (what the
/// real call found) is still the file it was opened on.
fn size_of_fd(fd: c_int, now: Id, op: &str) -> Option<u64> {
    fds::get(fd)?;
    let st = ready()?;
    if !still_same(fd, Some(now), op) {
        return None;
    }
    Some(st.slots[fds::get(fd)?.slot()].size.load(Ordering::Acquire))
}

/// The identity in a `struct stat` the real call filled.
///
/// # Safety
///
/// `b` points to a filled `struct stat` (or `stat64`, the same on x86_64).
unsafe fn stat_id(b: *const libc::stat) -> Id {
    // SAFETY: as the caller promises.
    let b = unsafe { &*b };
    Id { dev: b.st_dev, ino: b.st_ino }
}

unsafe fn size_of_path(dirfd: c_int, path: *const c_char, flags: c_int, now: Id, op: &str) -> Option<u64> {
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() {
        // SAFETY: the caller's NUL-terminated path.
        if unsafe { *path } == 0 {
            return size_of_fd(dirfd, now, op);
        }
    }
    // SAFETY: the caller's path.
    let (st, slot, _b) = unsafe { path_slot(dirfd, path) }?;
    Some(st.slots[slot].size.load(Ordering::Acquire))
}

fn patch(buf: *mut libc::stat, size: Option<u64>) {
    if let Some(size) = size {
        // SAFETY: the real call filled `buf`, a valid struct stat.
        let b = unsafe { &mut *buf };
        if b.st_mode & libc::S_IFMT == libc::S_IFREG {
            b.st_size = size as i64;
            b.st_blocks = size.div_ceil(512) as i64;
        }
    }
}

macro_rules! stat_fd {
    ($name:ident, $ty:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut $ty) -> c_int {
            // SAFETY: passed on.
            let r = unsafe { real!($name: unsafe extern "C" fn(c_int, *mut $ty) -> c_int)(fd, buf) };
            if r == 0 {
                // SAFETY: filled by the real call.
                let now = unsafe { stat_id(buf.cast()) };
                patch(buf.cast(), size_of_fd(fd, now, stringify!($name)));
            }
            r
        }
    };
}
stat_fd!(fstat, libc::stat);
stat_fd!(fstat64, libc::stat64);

macro_rules! stat_path {
    ($name:ident, $ty:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut $ty) -> c_int {
            // SAFETY: passed on.
            let r = unsafe { real!($name: unsafe extern "C" fn(*const c_char, *mut $ty) -> c_int)(path, buf) };
            if r == 0 {
                // SAFETY: the caller's path; `buf` filled by the real call.
                patch(buf.cast(), unsafe {
                    size_of_path(libc::AT_FDCWD, path, 0, stat_id(buf.cast()), stringify!($name))
                });
            }
            r
        }
    };
}
stat_path!(stat, libc::stat);
stat_path!(stat64, libc::stat64);
stat_path!(lstat, libc::stat);
stat_path!(lstat64, libc::stat64);

macro_rules! stat_at {
    ($name:ident, $ty:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, buf: *mut $ty, flags: c_int) -> c_int {
            // SAFETY: passed on.
            let r = unsafe {
                real!($name: unsafe extern "C" fn(c_int, *const c_char, *mut $ty, c_int) -> c_int)(dirfd, path, buf, flags)
            };
            if r == 0 {
                // SAFETY: the caller's path; `buf` filled by the real call.
                patch(buf.cast(), unsafe { size_of_path(dirfd, path, flags, stat_id(buf.cast()), stringify!($name)) });
            }
            r
        }
    };
}
stat_at!(fstatat, libc::stat);
stat_at!(fstatat64, libc::stat64);

// The versioned stat functions of glibc before 2.33, which programs built then still call
// (liblmdb 0.9.24 calls __fxstat).
macro_rules! xstat_fd {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
            // SAFETY: passed on.
            let r = unsafe { real!($name: unsafe extern "C" fn(c_int, c_int, *mut libc::stat) -> c_int)(ver, fd, buf) };
            if r == 0 {
                // SAFETY: filled by the real call.
                patch(buf, size_of_fd(fd, unsafe { stat_id(buf) }, stringify!($name)));
            }
            r
        }
    };
}
xstat_fd!(__fxstat);
xstat_fd!(__fxstat64);

macro_rules! xstat_path {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
            let r =
                // SAFETY: the caller's arguments, passed on unchanged to the C library's own.
                unsafe { real!($name: unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat) -> c_int)(ver, path, buf) };
            if r == 0 {
                // SAFETY: the caller's path; `buf` filled by the real call.
                patch(buf, unsafe { size_of_path(libc::AT_FDCWD, path, 0, stat_id(buf), stringify!($name)) });
            }
            r
        }
    };
}
xstat_path!(__xstat);
xstat_path!(__xstat64);
xstat_path!(__lxstat);
xstat_path!(__lxstat64);

macro_rules! xstat_at {
    ($name:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int) -> c_int {
            // SAFETY: passed on.
            let r = unsafe {
                real!($name: unsafe extern "C" fn(c_int, c_int, *const c_char, *mut libc::stat, c_int) -> c_int)(
                    ver, dirfd, path, buf, flags,
                )
            };
            if r == 0 {
                // SAFETY: the caller's path; `buf` filled by the real call.
                patch(buf, unsafe { size_of_path(dirfd, path, flags, stat_id(buf), stringify!($name)) });
            }
            r
        }
    };
}
xstat_at!(__fxstatat);
xstat_at!(__fxstatat64);

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    // SAFETY: passed on.
    let r = unsafe {
        real!(statx: unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int)(
            dirfd, path, flags, mask, buf,
        )
    };
    if r == 0 {
        // SAFETY: the real call filled `buf`.
        let now = unsafe {
            Id { dev: libc::makedev((*buf).stx_dev_major, (*buf).stx_dev_minor), ino: (*buf).stx_ino }
        };
        // SAFETY: the caller's path.
        if let Some(size) = unsafe { size_of_path(dirfd, path, flags, now, "statx") } {
            // SAFETY: the real call filled `buf`.
            let b = unsafe { &mut *buf };
            if b.stx_mask & libc::STATX_SIZE != 0 && u32::from(b.stx_mode) & libc::S_IFMT == libc::S_IFREG {
                b.stx_size = size;
                b.stx_blocks = size.div_ceil(512);
            }
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// copies between descriptors in the kernel: they would bypass the region

fn refuse_copy(op: &str, fds_: &[c_int]) -> Option<ssize_t> {
    let fd = *fds_.iter().find(|&&fd| listed_now(fd, op))?;
    let name =
        ready().map(|st| st.slots[fds::get(fd).expect("tracked").slot()].name.clone()).unwrap_or_default();
    Some(fail(
        libc::EINVAL,
        &format!("{op}(fd {fd}, {name}): a copy inside the kernel would bypass the region (EINVAL): use read and write"),
    ))
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if let Some(r) = refuse_copy("sendfile", &[out, inp]) {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(sendfile: unsafe extern "C" fn(c_int, c_int, *mut off_t, size_t) -> ssize_t)(out, inp, off, n)
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
    // SAFETY: the same function on this ABI.
    unsafe { sendfile(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    inp: c_int,
    off_in: *mut off64_t,
    out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if let Some(r) = refuse_copy("copy_file_range", &[inp, out]) {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(copy_file_range: unsafe extern "C" fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t)(
            inp, off_in, out, off_out, n, flags,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    inp: c_int,
    off_in: *mut off64_t,
    out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if let Some(r) = refuse_copy("splice", &[inp, out]) {
        return r;
    }
    // SAFETY: passed on.
    unsafe {
        real!(splice: unsafe extern "C" fn(c_int, *mut off64_t, c_int, *mut off64_t, size_t, c_uint) -> ssize_t)(
            inp, off_in, out, off_out, n, flags,
        )
    }
}
