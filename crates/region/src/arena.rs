//! Anonymous memory at a fixed address, with its written pages tracked: recoverable memory.
//!
//! Recoverable memory holds pointers into itself, so after a crash it must come back at the
//! same virtual addresses. An [`Arena`] is a private anonymous mapping made at exactly the
//! address asked for (`MAP_FIXED_NOREPLACE`: never elsewhere, never over another mapping) and,
//! once tracking starts, the pages the program writes are found by [`Arena::collect`] (see
//! [`WrittenPages`]). The program stores into it through raw pointers at any time; this crate
//! copies bytes in and out through raw copies and [`MapSlice`] views only, as for a mapped
//! file (see the memory model in `map.rs`).

use crate::map::{holder, MapSlice};
use crate::written::{Method, WrittenPages};
use rustix::mm::{MapFlags, ProtFlags};
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Mutex;

/// A private anonymous mapping at a fixed address.
pub struct Arena {
    /// Page-aligned, `len` bytes mapped read-write (or read-only pages that a write makes
    /// writable, under the `mprotect` tracker) until drop.
    ptr: NonNull<u8>,
    len: usize,
    /// Set once by [`Arena::track`]; locked by [`Arena::collect`], so that every other use of
    /// the arena takes `&self` and an owner can share it. Emptied in `Drop` before the mapping
    /// goes.
    tracker: Mutex<Option<WrittenPages>>,
    method: Option<Method>,
    fallback: Option<String>,
}

// SAFETY: the mapping is plain memory this value owns until drop; the tracker's state (a
// userfaultfd and a pagemap file, or a slot in the protection table) is not tied to a thread.
unsafe impl Send for Arena {}
// SAFETY: `&self` methods reach the mapping through bounds-checked raw copies and `MapSlice`
// views (raw pointers) only; none hands out a reference to its bytes.
unsafe impl Sync for Arena {}

impl Arena {
    /// Maps `len` bytes (a whole number of pages) of zeroed memory at exactly `addr`. A range
    /// already in use is an [`io::ErrorKind::AddrInUse`] error that names what holds it.
    /// Untouched pages take no memory (`MAP_NORESERVE`).
    pub fn map_at(addr: usize, len: usize) -> io::Result<Arena> {
        let page = rustix::param::page_size();
        if addr == 0
            || !addr.is_multiple_of(page)
            || len == 0
            || !len.is_multiple_of(page)
            || addr.checked_add(len).is_none()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr:#x} + {len} is not a range of whole {page}-byte pages"),
            ));
        }
        // SAFETY: MAP_FIXED_NOREPLACE maps at `addr` only where nothing is mapped: it replaces
        // and aliases nothing in this process (the kernel answers EEXIST instead).
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                addr as *mut std::ffi::c_void,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED_NOREPLACE | MapFlags::NORESERVE,
            )
        };
        match p {
            Ok(p) if p as usize == addr => Ok(Arena {
                ptr: NonNull::new(p.cast()).expect("addr is not 0"),
                len,
                tracker: Mutex::new(None),
                method: None,
                fallback: None,
            }),
            Ok(p) => {
                // A kernel without MAP_FIXED_NOREPLACE treats the address as a hint.
                // SAFETY: the mapping just made, unused.
                let _ = unsafe { rustix::mm::munmap(p, len) };
                Err(io::Error::other(format!(
                    "the kernel mapped {addr:#x} at {:#x} instead (no MAP_FIXED_NOREPLACE: Linux 4.17 or later)",
                    p as usize
                )))
            }
            Err(e) if e == rustix::io::Errno::EXIST => Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{addr:#x}..{:#x} is taken in this process{}",
                    addr + len,
                    holder(addr, len).map_or(String::new(), |h| format!(" (by {h})"))
                ),
            )),
            Err(e) => Err(io::Error::other(format!("map {len} bytes at {addr:#x}: {e}"))),
        }
    }

    /// The address of the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether `[addr, addr + len)` lies inside the arena.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        let base = self.ptr.as_ptr() as usize;
        addr >= base && addr.checked_add(len).is_some_and(|e| e <= base + self.len)
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "access at {offset} len {len} outside an arena of {} bytes",
            self.len
        );
    }

    /// Copies bytes out of the arena.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.view(offset, out.len()).read(0, out)
    }

    /// Copies bytes into the arena. Under the `mprotect` tracker, a write to a protected page
    /// faults into its handler like any other store, so it is tracked the same way.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: `[offset, offset + len)` lies in the mapping (checked above), which lives as
        // long as `self`; `data` is a Rust buffer, not arena bytes, so they do not overlap.
        // Raw copies, not references: a concurrent store by the program leaves unspecified
        // bytes, as it would for its own racing stores.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len()) }
    }

    /// Sets `len` bytes at `offset` to zero (stores, tracked like any other).
    pub fn zero(&self, offset: usize, len: usize) {
        self.check(offset, len);
        // SAFETY: `[offset, offset + len)` lies in the mapping (checked above), which lives as
        // long as `self`. Raw stores, no reference made.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), 0, len) }
    }

    /// Reads the little-endian `u64` at `offset`.
    pub fn load_u64(&self, offset: usize) -> u64 {
        let mut b = [0; 8];
        self.read(offset, &mut b);
        u64::from_le_bytes(b)
    }

    /// Writes `v` little-endian at `offset`.
    pub fn store_u64(&self, offset: usize, v: u64) {
        self.write(offset, &v.to_le_bytes())
    }

    /// A view of bytes of the arena, to copy them into a mapped file without a buffer.
    pub fn view(&self, offset: usize, len: usize) -> MapSlice<'_> {
        self.check(offset, len);
        let ptr = NonNull::new(self.ptr.as_ptr().wrapping_add(offset)).expect("in bounds, not null");
        MapSlice::from_parts(ptr, len, PhantomData)
    }

    /// Starts finding the pages written from now on: `method` `None` picks userfaultfd if
    /// the kernel offers it, else page protection ([`Arena::fallback`] says why). Tracking
    /// twice is a bug (it panics).
    pub fn track(&mut self, method: Option<Method>) -> io::Result<()> {
        let tracker = self.tracker.get_mut().unwrap_or_else(|p| p.into_inner());
        assert!(tracker.is_none(), "the arena is tracked already");
        // SAFETY: the whole arena: page-aligned, mapped by this value until drop, which ends
        // the tracking first; nothing else changes its protection or registers it (it is this
        // value's private mapping). Under `Mprotect`, the crate's own system calls never write
        // into it: bytes come in by `write` (a store) only.
        let t = unsafe { WrittenPages::new(self.ptr.as_ptr(), self.len, method) }?;
        self.method = Some(t.method());
        self.fallback = t.fallback().map(str::to_owned);
        *tracker = Some(t);
        Ok(())
    }

    /// The tracking method, once tracking started.
    pub fn method(&self) -> Option<Method> {
        self.method
    }

    /// Why userfaultfd is not in use, if it was wanted and could not be.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Hands `found(offset, len)` every run of pages in the first `upto` bytes written since
    /// the last collect (or since tracking began), in address order, and watches them again.
    /// Pages past `upto` keep their marks for a later, longer collect.
    pub fn collect(&self, upto: usize, found: impl FnMut(u64, u64)) -> io::Result<()> {
        let upto = upto.min(self.len);
        match &mut *self.tracker.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(t) => t.collect_upto(upto as u64, found),
            None => Err(io::Error::other("the arena is not tracked")),
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // The tracking ends before the mapping goes.
        *self.tracker.get_mut().unwrap_or_else(|p| p.into_inner()) = None;
        // SAFETY: the mapping this value made; nothing of it is lent out past `&self` calls.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address far from where the kernel places mappings, one per test (tests run in
    /// parallel threads: an address found free and let go could be taken meanwhile).
    fn test_address(test: usize) -> usize {
        0x5a00_0000_0000 + (test << 32)
    }

    fn written(a: &mut Arena, upto: usize) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        a.collect(upto, |o, l| v.push((o, l))).unwrap();
        v
    }

    #[test]
    fn maps_at_the_address_asked_and_finds_written_pages_exactly() {
        for (i, method) in [Method::UffdAsync, Method::Mprotect].into_iter().enumerate() {
            let len = 64 << 12;
            let addr = test_address(i);
            let mut a = Arena::map_at(addr, len).unwrap();
            assert_eq!(a.as_ptr() as usize, addr);
            a.write(5 << 12, b"before tracking");
            a.track(Some(method)).unwrap();
            assert_eq!(written(&mut a, len), vec![], "{method:?}: nothing written since tracking began");
            a.write(3 << 12, b"x");
            a.store_u64((4 << 12) + 8, 7);
            a.write((40 << 12) - 1, b"ab"); // across pages 39 and 40
                                            // Pages past `upto` keep their marks.
            assert_eq!(written(&mut a, 32 << 12), vec![(3 << 12, 2 << 12)], "{method:?}");
            assert_eq!(written(&mut a, len), vec![(39 << 12, 2 << 12)], "{method:?}");
            assert_eq!(written(&mut a, len), vec![], "{method:?}");
            assert_eq!(a.load_u64((4 << 12) + 8), 7);
            let mut b = [0; 15];
            a.read(5 << 12, &mut b);
            assert_eq!(&b, b"before tracking");
        }
    }

    #[test]
    fn a_taken_range_is_refused_and_named_and_left_alone() {
        let len = 16 << 12;
        let addr = test_address(2);
        let first = Arena::map_at(addr, len).unwrap();
        first.write(0, b"mine");
        let e = Arena::map_at(addr + 4096, 4096).err().expect("the range is taken");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        assert!(e.to_string().contains(&format!("{:#x}", addr + 4096)), "{e}");
        let mut b = [0; 4];
        first.read(0, &mut b);
        assert_eq!(&b, b"mine");
        let e = Arena::map_at(addr + 1, 4096).err().expect("unaligned");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }
}
