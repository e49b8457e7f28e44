//! Simulated persistent media: what the mirror writes is volatile until it persists it. The
//! data area ([`SimData`]) and the lane logs ([`SimLog`]) implement the storage seam
//! (`mojim_region::{Media, DataMedia, LogMedia}`), so the checkpoint commands run here through
//! the node's own executor (`crate::mirror::execute`).
//!
//! As in storage engines' crash tests (redb's crash-image backend, TigerBeetle's storage faults),
//! each area keeps two images: the bytes written, which the process reads and which a process
//! crash (kill -9) keeps, and the bytes persisted. A power cut keeps the persisted bytes and, of
//! the rest, a seeded random subset of whole units: cache lines of 64 bytes for memory (the log
//! areas and the data area, like a DAX or `/dev/shm` mapping under `clwb`). A metadata field
//! ([`Word`]: a tail, the applied sequence number, the epoch) is one aligned 8-byte store, kept
//! or lost whole. The simulated mirror keeps its data area in memory: a disk data area
//! (`sync-disk`, whose writes a power cut keeps or loses in 512-byte sectors until `fdatasync`)
//! is not simulated.

use super::rng::Rng;
use mojim_region::{Bytes, DataMedia, LogMedia, Media};
use std::io;

/// Bytes a power cut keeps or loses together in memory.
pub(super) const CACHE_LINE: usize = 64;

/// A byte area with a written and a persisted image.
#[derive(Clone, Debug)]
pub(super) struct Area {
    written: Vec<u8>,
    persisted: Vec<u8>,
    /// Per unit: written since it was last persisted.
    dirty: Vec<bool>,
    unit: usize,
}

impl Area {
    /// `len` zero bytes, persisted, lost or kept in units of `unit` bytes.
    pub fn new(len: usize, unit: usize) -> Area {
        assert!(unit > 0);
        Area { written: vec![0; len], persisted: vec![0; len], dirty: vec![false; len.div_ceil(unit)], unit }
    }

    /// What the process reads: everything written.
    pub fn bytes(&self) -> &[u8] {
        &self.written
    }

    pub fn len(&self) -> usize {
        self.written.len()
    }

    /// Copies the bytes written at `offset` into `out` (what a read of the media returns).
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let at = offset as usize;
        out.copy_from_slice(&self.written[at..at + out.len()]);
    }

    fn units(&self, at: usize, len: usize) -> std::ops::Range<usize> {
        assert!(
            at + len <= self.written.len(),
            "access at {at} len {len} outside {} bytes",
            self.written.len()
        );
        if len == 0 {
            return 0..0;
        }
        at / self.unit..(at + len).div_ceil(self.unit)
    }

    /// Stores bytes, volatile until [`Area::persist`] covers them.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        let units = self.units(at, data.len());
        self.written[at..at + data.len()].copy_from_slice(data);
        self.dirty[units].fill(true);
    }

    /// Makes every unit overlapping `[at, at + len)` persistent (cache-line write-back rounds
    /// out to whole lines, as `clwb` does).
    pub fn persist(&mut self, at: usize, len: usize) {
        for u in self.units(at, len) {
            if std::mem::take(&mut self.dirty[u]) {
                let r = u * self.unit..((u + 1) * self.unit).min(self.written.len());
                self.persisted[r.clone()].copy_from_slice(&self.written[r]);
            }
        }
    }

    /// Units written and not yet persisted.
    #[cfg(test)]
    pub fn unpersisted(&self) -> usize {
        self.dirty.iter().filter(|&&d| d).count()
    }

    /// The power fails: each unit written since it was last persisted reached the media or
    /// not, at random. Afterwards what is read is what the media holds. Returns the units whose
    /// last writes were lost.
    pub fn power_cut(&mut self, rng: &mut Rng) -> u64 {
        let mut lost = 0;
        for u in 0..self.dirty.len() {
            if !std::mem::take(&mut self.dirty[u]) {
                continue;
            }
            let r = u * self.unit..((u + 1) * self.unit).min(self.written.len());
            if rng.chance_pct(50) {
                self.persisted[r.clone()].copy_from_slice(&self.written[r]);
            } else {
                lost += u64::from(self.written[r.clone()] != self.persisted[r.clone()]);
                self.written[r.clone()].copy_from_slice(&self.persisted[r]);
            }
        }
        lost
    }
}

/// An 8-byte metadata field, updated in place: volatile until flushed, kept or lost whole by a
/// power cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Word {
    written: u64,
    persisted: u64,
}

impl Word {
    pub fn new(v: u64) -> Word {
        Word { written: v, persisted: v }
    }

    pub fn value(&self) -> u64 {
        self.written
    }

    /// Stores a value, volatile until [`Word::flush`].
    pub fn set(&mut self, v: u64) {
        self.written = v;
    }

    pub fn flush(&mut self) {
        self.persisted = self.written;
    }

    /// Stores and flushes, as the daemon's metadata writes do (`set_tail`, `set_applied_seq`,
    /// `set_epoch`: a store, then a write-back of its line).
    pub fn store(&mut self, v: u64) {
        self.set(v);
        self.flush();
    }

    /// The power fails: an unflushed value reached the media or not. Returns whether it was lost.
    pub fn power_cut(&mut self, rng: &mut Rng) -> bool {
        if self.written == self.persisted {
            return false;
        }
        if rng.chance_pct(50) {
            self.persisted = self.written;
            false
        } else {
            self.written = self.persisted;
            true
        }
    }
}

/// A fault of the data area's media, injected into the node's executor (see
/// [`super::Sabotage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DataFault {
    None,
    /// Write-back is reordered after the metadata: the ranges a reclaim persists reach the media
    /// only when the next reclaim records its applied number, after this one's number and tails.
    LatePersist,
    /// Write-back of a range is skipped, and reported done.
    SkippedPersist,
}

/// The simulated data area: its bytes in memory, and the applied sequence number.
#[derive(Clone, Debug)]
pub(super) struct SimData {
    pub area: Area,
    pub applied_seq: Word,
    fault: DataFault,
    /// [`DataFault::LatePersist`]: ranges persisted since the last applied number, and those of
    /// the reclaim before it, still unwritten.
    queued: Vec<(u64, u64)>,
    late: Vec<(u64, u64)>,
    /// The next write, write-back or store of the applied number fails, changing nothing.
    fail_next: bool,
}

impl SimData {
    pub fn new(len: usize, fault: DataFault) -> SimData {
        SimData {
            area: Area::new(len, CACHE_LINE),
            applied_seq: Word::new(0),
            fault,
            queued: Vec::new(),
            late: Vec::new(),
            fail_next: false,
        }
    }

    /// No operation fails from now on.
    pub fn disarm(&mut self) {
        self.fail_next = false;
    }

    /// The next operation fails with an I/O error (see [`super::FaultRates::media_error_ppm`]).
    pub fn fail_next(&mut self) {
        self.fail_next = true;
    }

    fn failing(&mut self) -> io::Result<()> {
        if std::mem::take(&mut self.fail_next) {
            return Err(io::Error::other("simulated I/O error of the data area"));
        }
        Ok(())
    }

    /// The process died: write-backs it had not issued never will be.
    pub fn crashed(&mut self) {
        self.queued.clear();
        self.late.clear();
        self.fail_next = false;
    }
}

impl Media for SimData {
    fn len(&self) -> u64 {
        self.area.len() as u64
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.area.read(offset, out);
        Ok(())
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        self.failing()?;
        write_area(&mut self.area, offset, src);
        Ok(())
    }

    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.failing()?;
        match self.fault {
            DataFault::None => self.area.persist(offset as usize, len as usize),
            DataFault::LatePersist => self.queued.push((offset, len)),
            DataFault::SkippedPersist => {}
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl DataMedia for SimData {
    fn applied_seq(&self) -> io::Result<u64> {
        Ok(self.applied_seq.value())
    }

    /// A store and a write-back of its line, as `RegionFile::set_applied_seq` does.
    fn set_applied_seq(&mut self, seq: u64) -> io::Result<()> {
        self.failing()?;
        self.applied_seq.store(seq);
        if self.fault == DataFault::LatePersist {
            for (offset, len) in std::mem::take(&mut self.late) {
                self.area.persist(offset as usize, len as usize);
            }
            self.late = std::mem::take(&mut self.queued);
        }
        Ok(())
    }
}

/// A simulated lane log: its circular record area in memory, and its tail.
#[derive(Clone, Debug)]
pub(super) struct SimLog {
    pub area: Area,
    pub tail: Word,
}

impl SimLog {
    pub fn new(capacity: usize) -> SimLog {
        SimLog { area: Area::new(capacity, CACHE_LINE), tail: Word::new(0) }
    }

    /// Broken on purpose ([`super::Sabotage::LogsLostOnRestart`]): every record is gone,
    /// written and persistent; the tail stays.
    pub fn lose_records(&mut self) {
        self.area = Area::new(self.area.len(), CACHE_LINE);
    }
}

impl Media for SimLog {
    fn len(&self) -> u64 {
        self.area.len() as u64
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.area.read(offset, out);
        Ok(())
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        write_area(&mut self.area, offset, src);
        Ok(())
    }

    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.area.persist(offset as usize, len as usize);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LogMedia for SimLog {
    fn records(&self) -> Bytes<'_> {
        Bytes::Slice(self.area.bytes())
    }

    fn tail(&self) -> u64 {
        self.tail.value()
    }

    /// Both slots stored and written back, as `LogFile::set_tail` does: one word here.
    fn set_tail(&mut self, pos: u64) -> io::Result<()> {
        self.tail.store(pos);
        Ok(())
    }
}

/// A data area whose process is killed while writing: of what is written from now on, only the
/// first `left` bytes land.
pub(super) struct Torn<'a> {
    pub data: &'a mut SimData,
    pub left: usize,
}

impl Media for Torn<'_> {
    fn len(&self) -> u64 {
        self.data.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.data.read(offset, out)
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        let mut bytes = vec![0; src.len()];
        src.read(0, &mut bytes);
        let n = bytes.len().min(self.left);
        self.left -= n;
        self.data.area.write(offset as usize, &bytes[..n]);
        Ok(())
    }

    fn persist(&mut self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl DataMedia for Torn<'_> {
    fn applied_seq(&self) -> io::Result<u64> {
        self.data.applied_seq()
    }

    fn set_applied_seq(&mut self, _seq: u64) -> io::Result<()> {
        Ok(())
    }
}

fn write_area(area: &mut Area, offset: u64, src: Bytes<'_>) {
    match src {
        Bytes::Slice(s) => area.write(offset as usize, s),
        Bytes::Mapped(m) => area.write(offset as usize, &m.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_cut_keeps_what_was_persisted_and_some_of_the_rest() {
        let mut m = Area::new(1024, CACHE_LINE);
        m.write(0, &[1; 300]);
        m.persist(10, 100); // lines 0 and 1
        assert_eq!(m.unpersisted(), 3);
        let mut rng = Rng::new(3);
        let mut lost_somewhere = false;
        for _ in 0..20 {
            let mut c = m.clone();
            c.power_cut(&mut rng);
            assert!(c.bytes()[..128].iter().all(|&b| b == 1), "persisted lines survive");
            for at in (128..320).step_by(CACHE_LINE) {
                // Whole lines: as written, or as persisted (zero).
                let line = &c.bytes()[at..at + CACHE_LINE];
                assert!(line == &m.bytes()[at..at + CACHE_LINE] || line.iter().all(|&b| b == 0));
                lost_somewhere |= line[0] == 0;
            }
            assert_eq!(c.unpersisted(), 0);
        }
        assert!(lost_somewhere);
        // A process crash keeps everything written: nothing to do but read it.
        assert!(m.bytes()[..300].iter().all(|&b| b == 1));
    }

    #[test]
    fn an_unflushed_word_may_be_lost() {
        let mut rng = Rng::new(5);
        let (mut kept, mut lost) = (0, 0);
        for _ in 0..40 {
            let mut w = Word::new(7);
            w.set(9);
            if w.power_cut(&mut rng) {
                lost += 1;
                assert_eq!(w.value(), 7);
            } else {
                kept += 1;
                assert_eq!(w.value(), 9);
            }
            let mut f = Word::new(7);
            f.store(9);
            assert!(!f.power_cut(&mut rng));
            assert_eq!(f.value(), 9);
        }
        assert!(kept > 0 && lost > 0);
    }
}
