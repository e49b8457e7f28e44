//! The persistent memory the WHISPER structures are built in, and its ordering points.
//!
//! A structure writes with [`Mem::write`], ends an epoch with [`Mem::fence`] (everything written
//! before it is persistent before anything written after it), and ends an operation with
//! [`Mem::commit`] (everything is durable: the operation may be acknowledged). What a fence and a
//! commit cost is the strategy's (see `crate::transact`):
//!
//! | strategy | fence | commit |
//! |---|---|---|
//! | `no-sm` | `persist` on an unreplicated primary | nothing |
//! | `sm-rc` | `gmsync`: a durable round trip to the mirror | nothing |
//! | `sm-ob` | `persist`: queued in order on the lane | `wait` for the last fence |
//!
//! [`VecMem`] is the same interface on a plain buffer: the structures' own tests, and the
//! decoding of a mirror's copy, use it.

use crate::bench::harness::transact::Strategy;
use mojim::error::{Error, Result};
use mojim::primary::{Primary, Ticket};
use mojim::Range;

/// Byte-addressed memory with ordering points.
pub trait Mem {
    /// Copies `out.len()` bytes at `off`.
    fn read(&self, off: u64, out: &mut [u8]) -> Result<()>;
    /// Stores `data` at `off`; persistent only after the next fence.
    fn write(&mut self, off: u64, data: &[u8]) -> Result<()>;
    /// Ends an epoch: what was written before is ordered before what is written after.
    fn fence(&mut self) -> Result<()>;
    /// Ends an operation: everything fenced is durable on return.
    fn commit(&mut self) -> Result<()>;
    /// Bytes of memory.
    fn size(&self) -> u64;
    /// Fences so far (a commit's included).
    fn fences(&self) -> u64;

    /// Reads a little-endian u64.
    fn read_u64(&self, off: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian u64.
    fn write_u64(&mut self, off: u64, v: u64) -> Result<()> {
        self.write(off, &v.to_le_bytes())
    }
}

/// Refuses an access outside `0..size`.
fn check(off: u64, len: usize, size: u64) -> Result<()> {
    match off.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::Config(format!(
            "whisper: access of {len} bytes at {off} is outside the {size}-byte area; use a larger --region-size"
        ))),
    }
}

/// A plain buffer: fences and commits order nothing and cost nothing; `fences` counts them (a
/// commit ends an epoch too).
#[derive(Clone, Debug)]
pub struct VecMem {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Fences so far.
    pub fences: u64,
}

impl VecMem {
    /// `size` zero bytes.
    pub fn new(size: usize) -> VecMem {
        VecMem { bytes: vec![0; size], fences: 0 }
    }
}

impl Mem for VecMem {
    fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        check(off, out.len(), self.size())?;
        out.copy_from_slice(&self.bytes[off as usize..off as usize + out.len()]);
        Ok(())
    }
    fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        check(off, data.len(), self.size())?;
        self.bytes[off as usize..off as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn fence(&mut self) -> Result<()> {
        self.fences += 1;
        Ok(())
    }
    fn commit(&mut self) -> Result<()> {
        self.fence()
    }
    fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn fences(&self) -> u64 {
        self.fences
    }
}

/// A primary's region (from offset 0 up to `size`) under a strategy.
pub struct PmMem<'a> {
    p: &'a Primary,
    strategy: Strategy,
    size: u64,
    ranges: Vec<Range>,
    last: Option<Ticket>,
    /// Fences so far that had something to order (a commit's included).
    pub fences: u64,
}

impl<'a> PmMem<'a> {
    /// The first `size` bytes of `p`'s region, fenced as `strategy` says. `p` must be in the
    /// strategy's mode (unreplicated for `no-sm`, sync otherwise).
    pub fn new(p: &'a Primary, strategy: Strategy, size: u64) -> Result<PmMem<'a>> {
        if size > p.size() {
            return Err(Error::Config(format!(
                "whisper: {size} bytes do not fit the {}-byte region; use a larger --region-size",
                p.size()
            )));
        }
        Ok(PmMem { p, strategy, size, ranges: Vec::new(), last: None, fences: 0 })
    }
}

impl Mem for PmMem<'_> {
    fn read(&self, off: u64, out: &mut [u8]) -> Result<()> {
        check(off, out.len(), self.size)?;
        self.p.read(off, out)
    }
    fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        check(off, data.len(), self.size)?;
        self.p.write(off, data)?;
        self.ranges.push(Range::new(off, data.len() as u64));
        Ok(())
    }
    fn fence(&mut self) -> Result<()> {
        if self.ranges.is_empty() {
            return Ok(());
        }
        match self.strategy {
            Strategy::SmRc => self.p.gmsync(&self.ranges)?,
            Strategy::NoSm | Strategy::SmOb => self.last = Some(self.p.persist(&self.ranges)?),
        }
        self.ranges.clear();
        self.fences += 1;
        Ok(())
    }
    fn commit(&mut self) -> Result<()> {
        self.fence()?;
        if let Some(t) = self.last.take() {
            self.p.wait(t)?;
        }
        Ok(())
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn fences(&self) -> u64 {
        self.fences
    }
}
