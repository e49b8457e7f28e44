//! Plain numbers in an [`Arena`], read and written by value: how safe Rust code keeps its
//! state in recoverable memory with ordinary loads and stores, and no `unsafe` of its own.
//!
//! A program using recoverable memory stores into it through the pointers its allocator hands
//! out; C does so directly. [`Cells`] is the same for Rust: a bounds-checked array of plain
//! numbers at an address inside an arena, reached by raw loads and stores (never a Rust
//! reference into the memory, which the tracker, other threads or a commit's copy may touch at
//! any time).

use crate::arena::Arena;
use std::marker::PhantomData;

/// A plain number: every bit pattern of its size is a valid value, and it has no drop.
pub trait Plain: Copy + sealed::Sealed {}

impl Plain for u8 {}
impl Plain for u32 {}
impl Plain for u64 {}
impl Plain for f64 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for f64 {}
}

/// `len` values of `T` in an [`Arena`], valid while it is borrowed.
///
/// Loads and stores are by value, from the thread that holds the `Cells` (it is neither `Send`
/// nor `Sync`).
pub struct Cells<'a, T: Plain> {
    /// Aligned for `T`; `len` values of `T` lie inside the arena (checked by `Arena::cells`).
    ptr: *mut T,
    len: usize,
    _arena: PhantomData<&'a Arena>,
}

impl Arena {
    /// The `count` values of `T` at address `addr`, if they lie inside the arena and `addr` is
    /// aligned for `T`.
    pub fn cells<T: Plain>(&self, addr: usize, count: usize) -> Option<Cells<'_, T>> {
        let bytes = count.checked_mul(std::mem::size_of::<T>())?;
        if !self.contains(addr, bytes) || !addr.is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        Some(Cells { ptr: addr as *mut T, len: count, _arena: PhantomData })
    }
}

impl<T: Plain> Cells<'_, T> {
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
        // SAFETY: `i < len`, and `Arena::cells` checked that `len` aligned values lie inside
        // the arena's mapping, which stays mapped while the arena is borrowed. Every bit
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
        // same length, which is not arena memory (the arena hands out no references).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), self.len) }
    }

    /// Stores every value of `data` (as long as this).
    pub fn copy_from(&self, data: &[T]) {
        assert_eq!(data.len(), self.len, "copy_from a buffer of another length");
        // SAFETY: as for `copy_to`, the other way.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_inside_and_aligned_only_and_stores_are_the_arenas_bytes() {
        let a = Arena::map_at(0x5a40_0000_0000, 2 << 12).unwrap();
        let base = a.as_ptr() as usize;
        assert!(a.cells::<u64>(base + 4, 1).is_none(), "misaligned");
        assert!(a.cells::<u64>(base + 8192 - 8, 2).is_none(), "past the end");
        assert!(a.cells::<u64>(base - 8, 1).is_none(), "before the start");
        assert!(a.cells::<u64>(base, usize::MAX).is_none(), "a count whose bytes overflow");
        let c = a.cells::<u64>(base + 8, 3).unwrap();
        c.set(2, 0x0102_0304_0506_0708);
        assert_eq!(a.load_u64(24), 0x0102_0304_0506_0708);
        let mut out = [0u64; 3];
        c.copy_to(&mut out);
        assert_eq!(out, [0, 0, 0x0102_0304_0506_0708]);
        let f = a.cells::<f64>(base, 2).unwrap();
        f.copy_from(&[1.5, -2.0]);
        assert_eq!((f.get(0), f.get(1)), (1.5, -2.0));
    }
}
