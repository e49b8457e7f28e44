//! Typed access to recoverable memory: the one place in this crate with `unsafe` code.
//!
//! A program using recoverable memory stores into it with ordinary stores through the
//! pointers [`Rvm::alloc`] returns; that is the point of it (no sync calls to place). Rust can
//! only do that through raw pointers, so the example programs reach their state through
//! [`Cells`]: a bounds-checked array of plain numbers at an address inside an [`Rvm`]'s memory,
//! read and written by value (raw loads and stores, never a Rust reference into the memory).
//! The rest of the crate forbids `unsafe`; this module is the exception, and why: the `Rvm`
//! API hands out raw pointers only (a checked accessor on `Rvm` would let it go).

#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use mojim_rvm::Rvm;
use std::marker::PhantomData;

/// A plain number: every bit pattern of its size is a valid value, and it has no drop.
pub trait Plain: Copy + sealed::Sealed {}

impl Plain for u64 {}
impl Plain for f64 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u64 {}
    impl Sealed for f64 {}
}

/// `len` values of `T` in recoverable memory, valid while the [`Rvm`] they were found in is
/// open (the borrow makes `Rvm::close` wait for them to go).
///
/// Loads and stores are raw, by value, from the thread that holds the `Cells` (it is neither
/// `Send` nor `Sync`): the commits that copy the memory run on that thread between them.
pub struct Cells<'a, T: Plain> {
    /// Aligned for `T`; `len` values of `T` lie inside the Rvm's mapping (checked by `new`).
    ptr: *mut T,
    len: usize,
    _rvm: PhantomData<&'a Rvm>,
}

impl<'a, T: Plain> Cells<'a, T> {
    /// The `len` values of `T` at `ptr`, which must lie inside `rvm`'s memory and be aligned
    /// for `T`; anything else is refused with the address and the memory's bounds.
    pub fn new(rvm: &'a Rvm, ptr: *mut u8, len: usize) -> Result<Cells<'a, T>, String> {
        let (start, size) = (rvm.base(), rvm.capacity() as usize);
        let addr = ptr as usize;
        let bytes = len.checked_mul(std::mem::size_of::<T>());
        let inside =
            bytes.and_then(|b| addr.checked_add(b)).is_some_and(|end| addr >= start && end <= start + size);
        if !inside || !addr.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(format!(
                "{len} values of {} bytes at {addr:#x} are not (aligned) inside recoverable memory at \
                 {start:#x}..{:#x}",
                std::mem::size_of::<T>(),
                start + size
            ));
        }
        Ok(Cells { ptr: ptr.cast(), len, _rvm: PhantomData })
    }

    /// How many values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value at `i` (a bug if `i` is out of bounds: it panics).
    #[inline]
    pub fn get(&self, i: usize) -> T {
        assert!(i < self.len, "index {i} past {} values", self.len);
        // SAFETY: `i < len`, and `new` checked that `len` aligned values lie inside the Rvm's
        // mapping, which stays mapped while the borrow `'a` of the Rvm lives. Every bit
        // pattern is a valid `T` (`Plain`). A by-value load: no reference into the memory.
        unsafe { self.ptr.add(i).read() }
    }

    /// Stores `v` at `i` (a bug if `i` is out of bounds: it panics).
    #[inline]
    pub fn set(&self, i: usize, v: T) {
        assert!(i < self.len, "index {i} past {} values", self.len);
        // SAFETY: as for `get`; the mapping is writable (under page protection, the first
        // store to a page faults into the tracker's handler, which makes it writable).
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Copies every value out into `out` (as long as this).
    pub fn copy_to(&self, out: &mut [T]) {
        assert_eq!(out.len(), self.len, "copy_to a buffer of another length");
        // SAFETY: `len` values inside the mapping (as for `get`), into a Rust buffer of the
        // same length that cannot overlap the Rvm's mapping (it is Rust-owned memory).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), self.len) }
    }

    /// Stores every value of `data` (as long as this).
    pub fn copy_from(&self, data: &[T]) {
        assert_eq!(data.len(), self.len, "copy_from a buffer of another length");
        // SAFETY: as for `copy_to`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, self.len) }
    }
}

/// An array of numbers a program keeps its state in: recoverable memory ([`Cells`]) or a
/// plain buffer (the same program without recoverable memory, as a baseline and a reference).
pub trait Slots<T> {
    /// How many values.
    fn count(&self) -> usize;
    /// The value at `i`.
    fn load(&self, i: usize) -> T;
    /// Stores `v` at `i`.
    fn store(&mut self, i: usize, v: T);
}

impl<T: Plain> Slots<T> for Cells<'_, T> {
    fn count(&self) -> usize {
        self.len
    }
    #[inline]
    fn load(&self, i: usize) -> T {
        self.get(i)
    }
    #[inline]
    fn store(&mut self, i: usize, v: T) {
        self.set(i, v)
    }
}

impl<T: Copy> Slots<T> for Vec<T> {
    fn count(&self) -> usize {
        self.len()
    }
    #[inline]
    fn load(&self, i: usize) -> T {
        self[i]
    }
    #[inline]
    fn store(&mut self, i: usize, v: T) {
        self[i] = v
    }
}
