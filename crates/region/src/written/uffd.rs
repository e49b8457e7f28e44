//! Written pages by userfaultfd's asynchronous write protection (Linux 6.7 and later).
//!
//! The range is registered for write protection with `UFFD_FEATURE_WP_ASYNC`: the first write
//! to a protected page does not stop the writer, the kernel just lifts the protection and
//! marks the page written. One `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap` then lists the
//! written pages and protects them again, atomically per page. Nothing runs on a write but
//! the kernel's own fault path, once per page between scans.

use rustix::fd::{AsFd, OwnedFd};
use rustix::ioctl::{ioctl, opcode, Updater};
use std::fs::File;
use std::io;

const UFFD_API: u64 = 0xAA;
/// Handle faults from user space only: allowed to unprivileged processes.
const UFFD_USER_MODE_ONLY: u32 = 1;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;

const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// `struct uffdio_api`.
#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_writeprotect`.
#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct pm_scan_arg` (linux/fs.h).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` (linux/fs.h): pages `[start, end)` in the categories asked for.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const UFFDIO_API: rustix::ioctl::Opcode = opcode::read_write::<UffdioApi>(0xAA, 0x3F);
const UFFDIO_REGISTER: rustix::ioctl::Opcode = opcode::read_write::<UffdioRegister>(0xAA, 0x00);
const UFFDIO_WRITEPROTECT: rustix::ioctl::Opcode = opcode::read_write::<UffdioWriteprotect>(0xAA, 0x06);
const PAGEMAP_SCAN: rustix::ioctl::Opcode = opcode::read_write::<PmScanArg>(b'f', 16);

/// `PAGEMAP_SCAN` as an ioctl whose result is the number of regions it wrote.
struct Scan<'a>(&'a mut PmScanArg);

// SAFETY: PAGEMAP_SCAN takes a `struct pm_scan_arg` by pointer, updates its `walk_end`, writes
// `page_region`s where its `vec` points, and returns how many; it is the one ioctl of opcode
// `PAGEMAP_SCAN` on a pagemap file.
unsafe impl rustix::ioctl::Ioctl for Scan<'_> {
    type Output = usize;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> rustix::ioctl::Opcode {
        PAGEMAP_SCAN
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        (self.0 as *mut PmScanArg).cast()
    }

    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<usize> {
        Ok(out as usize)
    }
}

/// Regions the scan returns per ioctl; more are fetched by scanning on from where it stopped.
const SCAN_BATCH: usize = 512;

/// A range under asynchronous write protection.
pub(super) struct Uffd {
    start: u64,
    len: u64,
    /// Kept open: closing it ends the registration.
    _uffd: OwnedFd,
    pagemap: File,
    regions: Vec<PageRegion>,
}

impl Uffd {
    /// Registers `[start, start + len)` (page-aligned, mapped) and protects all of it: from
    /// now on, a page written is reported by the next [`Uffd::collect`].
    pub(super) fn new(start: usize, len: usize) -> io::Result<Uffd> {
        // SAFETY: the descriptor lets this process handle its own page faults; it is used only
        // for asynchronous write protection, which never stops a faulting thread.
        let uffd = unsafe {
            rustix::mm::userfaultfd(
                rustix::mm::UserfaultfdFlags::CLOEXEC
                    | rustix::mm::UserfaultfdFlags::NONBLOCK
                    | rustix::mm::UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY),
            )
        }?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes a `struct uffdio_api`, which `api` is.
        unsafe { ioctl(uffd.as_fd(), Updater::<UFFDIO_API, UffdioApi>::new(&mut api)) }?;
        let range = UffdioRange { start: start as u64, len: len as u64 };
        let mut reg = UffdioRegister { range, mode: UFFDIO_REGISTER_MODE_WP, ioctls: 0 };
        // SAFETY: UFFDIO_REGISTER reads and writes a `struct uffdio_register`; the range is the
        // caller's mapping, which asynchronous protection never makes a writer wait on.
        unsafe { ioctl(uffd.as_fd(), Updater::<UFFDIO_REGISTER, UffdioRegister>::new(&mut reg)) }?;
        let mut wp = UffdioWriteprotect { range, mode: UFFDIO_WRITEPROTECT_MODE_WP };
        // SAFETY: UFFDIO_WRITEPROTECT reads and writes a `struct uffdio_writeprotect`.
        unsafe { ioctl(uffd.as_fd(), Updater::<UFFDIO_WRITEPROTECT, UffdioWriteprotect>::new(&mut wp)) }?;
        let pagemap = File::open("/proc/self/pagemap")?;
        Ok(Uffd {
            start: start as u64,
            len: len as u64,
            _uffd: uffd,
            pagemap,
            regions: vec![PageRegion::default(); SCAN_BATCH],
        })
    }

    /// Hands `found(offset, len)` every run of pages in the first `upto` bytes written since
    /// the last call, in address order, and protects them again.
    pub(super) fn collect(&mut self, upto: u64, found: &mut dyn FnMut(u64, u64)) -> io::Result<()> {
        let end = self.start + self.len.min(upto);
        let mut from = self.start;
        while from < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: from,
                end,
                walk_end: 0,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_WRITTEN,
            };
            // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len` `struct
            // page_region`s at `vec`, which is `self.regions`' buffer of that many.
            let got = unsafe { ioctl(self.pagemap.as_fd(), Scan(&mut arg)) }?.min(self.regions.len());
            for r in &self.regions[..got] {
                found(r.start - self.start, r.end - r.start);
            }
            // The scan stops early only when the buffer is full; `walk_end` is where.
            if got < self.regions.len() || arg.walk_end <= from || arg.walk_end >= end {
                break;
            }
            from = arg.walk_end;
        }
        Ok(())
    }
}
