//! Typed access to recoverable memory: the programs keep their state in [`Cells`]
//! (`mojim_rvm::Cells`, plain numbers read and written by value at an address inside an
//! `Rvm`'s memory) or, run without recoverable memory, in a plain `Vec`; [`Slots`] is both.

use mojim_rvm::{Plain, Rvm};

pub use mojim_rvm::Cells;

/// The `len` values of `T` at `ptr` in `rvm`'s memory; anything not inside it, or not aligned
/// for `T`, is refused with the address and the memory's bounds.
pub fn cells<T: Plain>(rvm: &Rvm, ptr: *mut u8, len: usize) -> Result<Cells<'_, T>, String> {
    rvm.cells(ptr, len).ok_or_else(|| {
        format!(
            "{len} values of {} bytes at {:#x} are not (aligned) inside recoverable memory at \
             {:#x}..{:#x}",
            std::mem::size_of::<T>(),
            ptr as usize,
            rvm.base(),
            rvm.base() as u64 + rvm.capacity()
        )
    })
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
        self.len()
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
