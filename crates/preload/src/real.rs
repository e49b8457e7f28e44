//! The functions this library stands in front of, as the C library defines them: found with
//! `dlsym(RTLD_NEXT, name)` once and cached. Every pass-through goes here, never through the
//! `libc` crate's bindings, which would resolve to this library's own definitions.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of `name` (NUL-terminated) after this library, or the C library's
/// compatibility version (`__fxstat` and friends exist only as `GLIBC_2.2.5`). Aborts, saying
/// which, if there is none: a program calling it would crash anyway.
pub fn resolve(name: &'static str, cache: &AtomicUsize) -> usize {
    let p = cache.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    debug_assert!(name.ends_with('\0'));
    // SAFETY: `name` is a NUL-terminated static string; dlsym and dlvsym only read it.
    let mut f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        // SAFETY: as above, and the version string is NUL-terminated.
        f = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr().cast(), c"GLIBC_2.2.5".as_ptr()) } as usize;
    }
    if f == 0 {
        let msg = format!(
            "mojim-preload: the C library has no {}; cannot pass the call on\n",
            name.trim_end_matches('\0')
        );
        // SAFETY: a raw write of a valid buffer to fd 2, then abort: nothing is left to do.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
    }
    cache.store(f, Ordering::Relaxed);
    f
}

/// `real!(name: unsafe extern "C" fn(args) -> ret)`: the real `name`, typed.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static CACHE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let p = $crate::real::resolve(concat!(stringify!($name), "\0"), &CACHE);
        #[allow(unused_unsafe)] // also used inside the callers' unsafe blocks
        // SAFETY: `p` is the address of the C library's `$name`, whose C signature `$ty`
        // spells (checked against glibc's headers for x86_64).
        let f = unsafe { std::mem::transmute::<usize, $ty>(p) };
        f
    }};
}
pub(crate) use real;
