//! The calls that make or close descriptors without being about a listed file: each keeps the
//! fd table true for the numbers it touches. A number the kernel hands out again was closed,
//! seen or not, so whatever the table held for it is stale and goes (`fds::fresh`); a call
//! that closes descriptors inside the C library (a stream's, a folder's) drops them first.
//!
//! Safety, for every function here: as for `hooks`; each passes its caller's arguments to the
//! C library's function of the same name and C signature.
#![allow(clippy::missing_safety_doc)]

use crate::fds;
use crate::hooks::{fail, fresh_stream, path_slot};
use crate::ready;
use crate::real::real;
use libc::{c_char, c_int, c_uint, msghdr, sigset_t, sockaddr, socklen_t, ssize_t, DIR, FILE};

/// `fresh_fd!(name(arg: type, ...))`: `name` passed on, its result made fresh.
macro_rules! fresh_fd {
    ($($name:ident($($a:ident: $t:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: the caller's arguments, passed on.
            fds::fresh(unsafe { real!($name: unsafe extern "C" fn($($t),*) -> c_int)($($a),*) })
        }
    )*};
}

fresh_fd! {
    socket(domain: c_int, ty: c_int, protocol: c_int);
    accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t);
    accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int);
    eventfd(initval: c_uint, flags: c_int);
    epoll_create(size: c_int);
    epoll_create1(flags: c_int);
    timerfd_create(clock: c_int, flags: c_int);
    signalfd(fd: c_int, mask: *const sigset_t, flags: c_int);
    inotify_init();
    inotify_init1(flags: c_int);
    memfd_create(name: *const c_char, flags: c_uint);
    posix_openpt(flags: c_int);
    mkstemp(template: *mut c_char);
    mkstemp64(template: *mut c_char);
    mkostemp(template: *mut c_char, flags: c_int);
    mkostemp64(template: *mut c_char, flags: c_int);
    mkstemps(template: *mut c_char, suffix: c_int);
    mkstemps64(template: *mut c_char, suffix: c_int);
    mkostemps(template: *mut c_char, suffix: c_int, flags: c_int);
    mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int);
}

/// After a call that filled `pair` with two new descriptors (when it returned 0).
///
/// # Safety
///
/// `pair` points to two ints when `r` is 0.
unsafe fn fresh_pair(r: c_int, pair: *const c_int) -> c_int {
    if r == 0 {
        // SAFETY: as the caller promises.
        unsafe {
            fds::fresh(*pair);
            fds::fresh(*pair.add(1));
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pipe(pair: *mut c_int) -> c_int {
    // SAFETY: passed on; the caller's array of two.
    unsafe { fresh_pair(real!(pipe: unsafe extern "C" fn(*mut c_int) -> c_int)(pair), pair) }
}

#[no_mangle]
pub unsafe extern "C" fn pipe2(pair: *mut c_int, flags: c_int) -> c_int {
    // SAFETY: passed on; the caller's array of two.
    unsafe { fresh_pair(real!(pipe2: unsafe extern "C" fn(*mut c_int, c_int) -> c_int)(pair, flags), pair) }
}

#[no_mangle]
pub unsafe extern "C" fn socketpair(domain: c_int, ty: c_int, protocol: c_int, pair: *mut c_int) -> c_int {
    // SAFETY: passed on; the caller's array of two.
    unsafe {
        let r = real!(socketpair: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_int) -> c_int)(
            domain, ty, protocol, pair,
        );
        fresh_pair(r, pair)
    }
}

/// Descriptors received over a Unix socket (`SCM_RIGHTS`) are new numbers too.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: passed on.
    let r =
        unsafe { real!(recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t)(fd, msg, flags) };
    if r >= 0 && !msg.is_null() {
        // SAFETY: the kernel filled the caller's message header and its control buffer; the
        // CMSG macros walk that buffer within `msg_controllen`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<c_int>();
                    let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<c_int>();
                    for i in 0..n {
                        fds::fresh(data.add(i).read_unaligned());
                    }
                }
                c = libc::CMSG_NXTHDR(msg, c);
            }
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// streams and folders: the C library opens and closes their descriptors itself

#[no_mangle]
pub unsafe extern "C" fn tmpfile() -> *mut FILE {
    // SAFETY: passed on.
    fresh_stream(unsafe { real!(tmpfile: unsafe extern "C" fn() -> *mut FILE)() })
}

#[no_mangle]
pub unsafe extern "C" fn tmpfile64() -> *mut FILE {
    // SAFETY: passed on.
    fresh_stream(unsafe { real!(tmpfile64: unsafe extern "C" fn() -> *mut FILE)() })
}

#[no_mangle]
pub unsafe extern "C" fn popen(command: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: passed on.
    fresh_stream(unsafe {
        real!(popen: unsafe extern "C" fn(*const c_char, *const c_char) -> *mut FILE)(command, mode)
    })
}

/// The descriptor under `f`, which a close of the stream closes.
///
/// # Safety
///
/// `f` is null or a stream of the C library.
unsafe fn drop_stream_fd(f: *mut FILE) {
    if !f.is_null() {
        // SAFETY: as the caller promises.
        let fd = unsafe { libc::fileno(f) };
        if fds::get(fd).is_some() {
            fds::clear(fd);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    // SAFETY: the caller's stream, closed with its descriptor.
    unsafe {
        drop_stream_fd(f);
        real!(fclose: unsafe extern "C" fn(*mut FILE) -> c_int)(f)
    }
}

#[no_mangle]
pub unsafe extern "C" fn pclose(f: *mut FILE) -> c_int {
    // SAFETY: the caller's stream, closed with its descriptor.
    unsafe {
        drop_stream_fd(f);
        real!(pclose: unsafe extern "C" fn(*mut FILE) -> c_int)(f)
    }
}

type Freopen = unsafe extern "C" fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;

/// `freopen` closes the stream's descriptor and opens `path` in its place: refused for a listed
/// path (as `fopen` is) and for a stream on a listed file's descriptor (a standard stream whose
/// number was closed and reused for one).
unsafe fn freopen_common(
    path: *const c_char,
    mode: *const c_char,
    f: *mut FILE,
    op: &str,
    real: Freopen,
) -> *mut FILE {
    // SAFETY: the caller's stream.
    let fd = if f.is_null() { -1 } else { unsafe { libc::fileno(f) } };
    // SAFETY: the caller's path.
    let listed = unsafe { path_slot(libc::AT_FDCWD, path) }
        .map(|(st, slot, _b)| st.slots[slot].name.clone())
        .or_else(|| Some(format!("fd {fd}, {}", ready()?.slots[fds::get(fd)?.slot()].name)));
    if let Some(what) = listed {
        let _: c_int = fail(
            libc::EOPNOTSUPP,
            &format!("{op}({what}): stdio streams on a replicated file are not supported (EOPNOTSUPP): use open/read/write"),
        );
        return std::ptr::null_mut();
    }
    fds::fresh(fd);
    // SAFETY: the caller's arguments, passed on.
    fresh_stream(unsafe { real(path, mode, f) })
}

#[no_mangle]
pub unsafe extern "C" fn freopen(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    let real = real!(freopen: Freopen);
    // SAFETY: the caller's arguments.
    unsafe { freopen_common(path, mode, f, "freopen", real) }
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(path: *const c_char, mode: *const c_char, f: *mut FILE) -> *mut FILE {
    let real = real!(freopen64: Freopen);
    // SAFETY: the caller's arguments.
    unsafe { freopen_common(path, mode, f, "freopen64", real) }
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: passed on.
    let d = unsafe { real!(opendir: unsafe extern "C" fn(*const c_char) -> *mut DIR)(path) };
    if !d.is_null() {
        // SAFETY: a folder stream the C library just returned.
        fds::fresh(unsafe { libc::dirfd(d) });
    }
    d
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if !d.is_null() {
        // SAFETY: the caller's folder stream, closed with its descriptor.
        let fd = unsafe { libc::dirfd(d) };
        if fds::get(fd).is_some() {
            fds::clear(fd);
        }
    }
    // SAFETY: passed on.
    unsafe { real!(closedir: unsafe extern "C" fn(*mut DIR) -> c_int)(d) }
}

/// `closefrom` (glibc 2.34) closes through the C library's own `close_range`.
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    for fd in low.max(0)..fds::MAX_FD as c_int {
        if fds::get(fd).is_some() {
            fds::clear(fd);
        }
    }
    // SAFETY: passed on.
    unsafe { real!(closefrom: unsafe extern "C" fn(c_int))(low) }
}
