//! Simulated persistent media: what the mirror writes is volatile until it persists it.
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

/// Bytes a power cut keeps or loses together in memory.
pub(super) const CACHE_LINE: usize = 64;

/// A byte area with a written and a persisted image.
#[derive(Clone, Debug)]
pub(super) struct Media {
    written: Vec<u8>,
    persisted: Vec<u8>,
    /// Per unit: written since it was last persisted.
    dirty: Vec<bool>,
    unit: usize,
}

impl Media {
    /// `len` zero bytes, persisted, lost or kept in units of `unit` bytes.
    pub fn new(len: usize, unit: usize) -> Media {
        assert!(unit > 0);
        Media { written: vec![0; len], persisted: vec![0; len], dirty: vec![false; len.div_ceil(unit)], unit }
    }

    /// What the process reads: everything written.
    pub fn bytes(&self) -> &[u8] {
        &self.written
    }

    pub fn len(&self) -> usize {
        self.written.len()
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

    /// Stores bytes, volatile until [`Media::persist`] covers them.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        let units = self.units(at, data.len());
        self.written[at..at + data.len()].copy_from_slice(data);
        self.dirty[units].fill(true);
    }

    /// Stores `len` copies of `byte`.
    pub fn fill(&mut self, at: usize, len: usize, byte: u8) {
        let units = self.units(at, len);
        self.written[at..at + len].fill(byte);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_cut_keeps_what_was_persisted_and_some_of_the_rest() {
        let mut m = Media::new(1024, CACHE_LINE);
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
