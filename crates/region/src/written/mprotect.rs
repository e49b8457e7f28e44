//! Written pages by page protection and a SIGSEGV handler: the fallback where userfaultfd's
//! asynchronous write protection is missing (kernels before 6.7, or a mapping it does not
//! support).
//!
//! The range is made read-only. The first write to a page faults; the handler marks the page in
//! the tracker's bitmap and makes it writable again, and the write proceeds. A collect takes
//! the marks and makes the pages read-only again. A fault outside every tracked range goes to
//! the handler that was there before.
//!
//! Limits: a system call that writes into a protected page (a `read(2)` into it, say) fails
//! with `EFAULT` instead of faulting, so such buffers must not be tracked memory; and every
//! first write after a collect costs a signal.

use std::io;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Most ranges tracked this way at once in a process.
const SLOTS: usize = 16;

/// One tracked range, as the signal handler reads it: `len` 0 means free.
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    /// One bit per page, set by the handler.
    bits: AtomicPtr<AtomicU64>,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot =
    Slot { start: AtomicUsize::new(0), len: AtomicUsize::new(0), bits: AtomicPtr::new(std::ptr::null_mut()) };
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// Serialises taking and freeing slots (never taken by the handler).
static CLAIM: Mutex<()> = Mutex::new(());
/// The SIGSEGV handler there was before this one, for faults not ours.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// A range under page protection.
pub(super) struct Protect {
    slot: usize,
    start: usize,
    pages: usize,
    page: usize,
    /// Owned here; the handler reads it through `TABLE` while the slot is taken. Never freed:
    /// a handler on another thread could still be reading it after the slot is let go.
    bits: &'static [AtomicU64],
}

impl Protect {
    /// Tracks `[start, start + len)`: makes it read-only, with the handler installed.
    ///
    /// # Safety
    ///
    /// The range is a page-aligned mapping of this process that stays mapped while the result
    /// lives, and nobody else changes its protection meanwhile.
    pub(super) unsafe fn new(start: usize, len: usize) -> io::Result<Protect> {
        let page = rustix::param::page_size();
        PAGE.store(page, Ordering::Relaxed);
        install()?;
        let pages = len.div_ceil(page);
        let bits: &'static [AtomicU64] = Box::leak(
            (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice(),
        );
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        let slot = TABLE.iter().position(|s| s.len.load(Ordering::Acquire) == 0).ok_or_else(|| {
            io::Error::other(format!("more than {SLOTS} ranges tracked by page protection"))
        })?;
        let s = &TABLE[slot];
        s.bits.store(bits.as_ptr().cast_mut(), Ordering::Release);
        s.start.store(start, Ordering::Release);
        s.len.store(len, Ordering::Release);
        let me = Protect { slot, start, pages, page, bits };
        // SAFETY: the caller vouches that the range is this process's mapping; a write to it
        // now faults into the handler, which finds it in `TABLE` (filled above) and lifts the
        // protection again.
        unsafe { protect(start, pages * page, libc::PROT_READ) }?;
        Ok(me)
    }

    /// Hands `found(offset, len)` every run of pages in the first `upto` bytes written since
    /// the last call, in address order, and makes them read-only again.
    pub(super) fn collect(&mut self, upto: u64, found: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        let pages = (upto / self.page as u64).min(self.pages as u64) as usize;
        let mut run: Option<(usize, usize)> = None;
        for (w, word) in self.bits[..pages.div_ceil(64)].iter().enumerate() {
            // Only the word's pages below `pages`; the rest keep their marks.
            let mask = if (w + 1) * 64 <= pages { u64::MAX } else { (1u64 << (pages - w * 64)) - 1 };
            // Taken before the pages are protected again: a write in between lands in a page
            // whose bytes the caller copies after this returns.
            let mut taken = word.fetch_and(!mask, Ordering::AcqRel) & mask;
            while taken != 0 {
                let p = w * 64 + taken.trailing_zeros() as usize;
                taken &= taken - 1;
                run = match run {
                    Some((first, n)) if first + n == p => Some((first, n + 1)),
                    Some(r) => {
                        self.reprotect(r, found)?;
                        Some((p, 1))
                    }
                    None => Some((p, 1)),
                };
            }
        }
        if let Some(r) = run {
            self.reprotect(r, found)?;
        }
        Ok(())
    }

    fn reprotect(&self, (first, n): (usize, usize), found: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        // SAFETY: pages of the tracked range (`first + n <= pages`), which the handler makes
        // writable again on the next write.
        unsafe { protect(self.start + first * self.page, n * self.page, libc::PROT_READ) }?;
        found((first * self.page) as u64, (n * self.page) as u64);
        Ok(())
    }
}

impl Drop for Protect {
    fn drop(&mut self) {
        let _claim = CLAIM.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the tracked range, still mapped (the caller's promise); writable again as it
        // was before tracking began.
        let _ = unsafe { protect(self.start, self.pages * self.page, libc::PROT_READ | libc::PROT_WRITE) };
        let s = &TABLE[self.slot];
        s.len.store(0, Ordering::Release);
        s.start.store(0, Ordering::Release);
    }
}

/// # Safety
///
/// `[addr, addr + len)` is page-aligned memory mapped by this process that nothing relies on
/// having other protection.
unsafe fn protect(addr: usize, len: usize, prot: libc::c_int) -> io::Result<()> {
    // SAFETY: as the caller promises.
    if unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Installs the SIGSEGV handler once per process, keeping the one before it.
fn install() -> io::Result<()> {
    static DONE: OnceLock<Result<(), i32>> = OnceLock::new();
    let r = DONE.get_or_init(|| {
        // SAFETY: a zeroed `sigaction` is a valid value of the C struct; it is filled below
        // before use.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = on_fault as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // SAFETY: a zeroed `sigaction` is valid; the kernel fills it with the old handler.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `act.sa_mask` is a valid signal set to empty.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: both point to valid `sigaction`s; the handler is async-signal-safe (atomics
        // and mprotect only).
        if unsafe { libc::sigaction(libc::SIGSEGV, &act, &mut old) } != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        let _ = PREVIOUS.set(old);
        Ok(())
    });
    r.map_err(io::Error::from_raw_os_error)
}

/// The SIGSEGV handler: a write to a tracked page marks it and lifts its protection; anything
/// else goes to the handler before this one (or the default action: the process dies).
extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in &TABLE {
        let len = s.len.load(Ordering::Acquire);
        let start = s.start.load(Ordering::Acquire);
        if len == 0 || addr < start || addr >= start + len {
            continue;
        }
        let p = (addr - start) / page;
        let bits = s.bits.load(Ordering::Acquire);
        // SAFETY: the slot's bitmap has a bit for every page of its range, and is never freed.
        unsafe { (*bits.add(p / 64)).fetch_or(1 << (p % 64), Ordering::AcqRel) };
        // SAFETY: a page of a tracked range (the caller of `Protect::new` vouched for it).
        let _ = unsafe { protect(start + p * page, page, libc::PROT_READ | libc::PROT_WRITE) };
        return;
    }
    chain(sig, info, ctx);
}

/// Hands a fault that is not ours to the handler before ours, or restores the default action
/// so that returning re-runs the faulting instruction into it.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    match PREVIOUS.get() {
        Some(old) if old.sa_flags & libc::SA_SIGINFO != 0 && old.sa_sigaction > 1 => {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig, info, ctx);
        }
        Some(old) if old.sa_sigaction > 1 => {
            // SAFETY: the previous handler was installed without SA_SIGINFO: it takes the signal.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
            f(sig);
        }
        _ => {
            // SAFETY: resetting SIGSEGV to its default action; the faulting write runs again on
            // return and the process ends as it would have without tracking.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
        }
    }
}
