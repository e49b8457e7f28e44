//! The memory a store lives in: a region opened as primary, the region file itself (repair
//! before the primary opens it), or an image in the heap (tests).

use super::error::StoreError;
use std::cell::{Cell, RefCell};

/// Bytes a store reads and writes. Writes are plain stores: what makes them durable is the
/// caller's `gmsync` of the ranges the store reports.
pub trait Mem {
    /// Bytes in the memory.
    fn size(&self) -> u64;
    /// Copies bytes at `off` into `out`.
    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError>;
    /// Stores `data` at `off`.
    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError>;
}

fn out_of_bounds(off: u64, len: usize, size: u64) -> StoreError {
    StoreError::Corrupt(format!("bytes {off}+{len} lie outside the region's {size} bytes"))
}

impl Mem for mojim::Primary {
    fn size(&self) -> u64 {
        mojim::Primary::size(self)
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError> {
        mojim::Primary::read(self, off, out).map_err(|_| out_of_bounds(off, out.len(), self.size()))
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        mojim::Primary::write(self, off, data).map_err(|_| out_of_bounds(off, data.len(), self.size()))
    }
}

impl Mem for mojim_region::RegionFile {
    fn size(&self) -> u64 {
        mojim_region::RegionFile::size(self)
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError> {
        if off.checked_add(out.len() as u64).is_none_or(|e| e > self.size()) {
            return Err(out_of_bounds(off, out.len(), self.size()));
        }
        mojim_region::RegionFile::read(self, off, out);
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        if off.checked_add(data.len() as u64).is_none_or(|e| e > self.size()) {
            return Err(out_of_bounds(off, data.len(), self.size()));
        }
        mojim_region::RegionFile::write(self, off, data);
        Ok(())
    }
}

/// A memory image in the heap, for tests and tools: it can be told to fail every write after
/// a number of them (a simulated crash: the image then holds the writes made before, and the
/// first half of the write that failed when it is longer than one word).
pub struct VecMem {
    bytes: RefCell<Vec<u8>>,
    /// Writes still allowed before the simulated crash (`u64::MAX`: never).
    budget: Cell<u64>,
    /// Writes made.
    writes: Cell<u64>,
}

impl VecMem {
    /// A zeroed image of `size` bytes.
    pub fn new(size: u64) -> VecMem {
        VecMem::from_bytes(vec![0; size as usize])
    }

    /// An image holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> VecMem {
        VecMem { bytes: RefCell::new(bytes), budget: Cell::new(u64::MAX), writes: Cell::new(0) }
    }

    /// Fails every write after the next `n`.
    pub fn crash_after(&self, n: u64) {
        self.budget.set(n);
    }

    /// Writes still allowed before the simulated crash (`u64::MAX`: no crash is set).
    pub fn budget(&self) -> u64 {
        self.budget.get()
    }

    /// Writes made so far.
    pub fn writes(&self) -> u64 {
        self.writes.get()
    }

    /// A copy of the image.
    pub fn image(&self) -> Vec<u8> {
        self.bytes.borrow().clone()
    }
}

impl Mem for VecMem {
    fn size(&self) -> u64 {
        self.bytes.borrow().len() as u64
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError> {
        let b = self.bytes.borrow();
        let end = off.checked_add(out.len() as u64).filter(|&e| e <= b.len() as u64);
        let Some(end) = end else { return Err(out_of_bounds(off, out.len(), b.len() as u64)) };
        out.copy_from_slice(&b[off as usize..end as usize]);
        Ok(())
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        let mut b = self.bytes.borrow_mut();
        let end = off.checked_add(data.len() as u64).filter(|&e| e <= b.len() as u64);
        let Some(end) = end else { return Err(out_of_bounds(off, data.len(), b.len() as u64)) };
        if self.budget.get() == 0 {
            // The crash tears a write longer than one aligned word: its first half landed.
            if data.len() > 8 {
                let half = data.len() / 2;
                b[off as usize..off as usize + half].copy_from_slice(&data[..half]);
            }
            return Err(StoreError::Mem("simulated crash".into()));
        }
        b[off as usize..end as usize].copy_from_slice(data);
        if self.budget.get() != u64::MAX {
            self.budget.set(self.budget.get() - 1);
        }
        self.writes.set(self.writes.get() + 1);
        Ok(())
    }
}

impl<T: Mem + ?Sized> Mem for &T {
    fn size(&self) -> u64 {
        (**self).size()
    }

    fn read(&self, off: u64, out: &mut [u8]) -> Result<(), StoreError> {
        (**self).read(off, out)
    }

    fn write(&self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        (**self).write(off, data)
    }
}
