//! Which pages of a mapping were written: found by the kernel, without the writer saying where.
//!
//! Recoverable memory commits "every page written since the last commit". Two ways to find
//! them, chosen when tracking starts:
//! - [`Method::UffdAsync`]: userfaultfd's asynchronous write protection and one `PAGEMAP_SCAN`
//!   per collect (Linux 6.7 and later). Writes cost nothing past the first fault per page.
//! - [`Method::Mprotect`]: read-only pages and a SIGSEGV handler; the fallback.
//!
//! Either way a collect returns the pages written since the previous collect (or since
//! tracking began), at page granularity, none missed: a page is protected again as it is
//! reported, so bytes written while a collect runs are either in a page the caller copies
//! after the collect or reported by the next one.

mod mprotect;
mod uffd;

use std::io;

/// How written pages are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// userfaultfd asynchronous write protection with `PAGEMAP_SCAN`.
    UffdAsync,
    /// `mprotect` and a SIGSEGV handler.
    Mprotect,
}

impl Method {
    /// Its name in status output: `uffd-async` or `mprotect`.
    pub fn name(self) -> &'static str {
        match self {
            Method::UffdAsync => "uffd-async",
            Method::Mprotect => "mprotect",
        }
    }
}

enum Inner {
    Uffd(uffd::Uffd),
    Mprotect(mprotect::Protect),
}

/// The written pages of one mapped range.
pub struct WrittenPages {
    inner: Inner,
    /// Why the preferred method was not used, when it was not.
    fallback: Option<String>,
}

impl WrittenPages {
    /// Starts tracking `[start, start + len)`. With `method` `None`, userfaultfd if the kernel
    /// offers it for this mapping, else page protection (and [`WrittenPages::fallback`] says
    /// why).
    ///
    /// # Safety
    ///
    /// The range is a page-aligned mapping of this process that stays mapped while the result
    /// lives, and nobody else changes its protection or registers it with userfaultfd
    /// meanwhile. With [`Method::Mprotect`], no system call may write into it (it would fail
    /// with `EFAULT`).
    pub unsafe fn new(start: *mut u8, len: usize, method: Option<Method>) -> io::Result<WrittenPages> {
        let page = rustix::param::page_size();
        let addr = start as usize;
        if !addr.is_multiple_of(page) || !len.is_multiple_of(page) || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tracked range {addr:#x} + {len} is not whole pages of {page} bytes"),
            ));
        }
        let mut fallback = None;
        if method != Some(Method::Mprotect) {
            match uffd::Uffd::new(addr, len) {
                Ok(u) => return Ok(WrittenPages { inner: Inner::Uffd(u), fallback }),
                Err(e) if method == Some(Method::UffdAsync) => return Err(e),
                Err(e) => fallback = Some(format!("userfaultfd write protection unavailable: {e}")),
            }
        }
        // SAFETY: as promised by the caller.
        let p = unsafe { mprotect::Protect::new(addr, len) }?;
        Ok(WrittenPages { inner: Inner::Mprotect(p), fallback })
    }

    /// The method in use.
    pub fn method(&self) -> Method {
        match self.inner {
            Inner::Uffd(_) => Method::UffdAsync,
            Inner::Mprotect(_) => Method::Mprotect,
        }
    }

    /// Why userfaultfd is not in use, if it was wanted and failed.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Hands `found(offset, len)` (bytes from the range's start, whole pages) every run of
    /// pages written since the last collect, in address order, and starts watching them again.
    pub fn collect(&mut self, found: impl FnMut(u64, u64)) -> io::Result<()> {
        self.collect_upto(u64::MAX, found)
    }

    /// As [`WrittenPages::collect`], for the first `upto` bytes of the range only: pages past
    /// them keep their marks for a later collect. A scan costs what it covers, so a range
    /// reserved large and used from its start is collected up to what is in use.
    pub fn collect_upto(&mut self, upto: u64, mut found: impl FnMut(u64, u64)) -> io::Result<()> {
        match &mut self.inner {
            Inner::Uffd(u) => u.collect(upto, &mut found),
            Inner::Mprotect(p) => p.collect(upto, &mut found),
        }
    }
}

#[cfg(test)]
mod tests;
