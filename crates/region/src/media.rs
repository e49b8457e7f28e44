//! The storage seam: what the mirror's lanes and checkpoint path write to, as traits.
//!
//! A [`Media`] is a byte area with two states, as redb's storage backend and TigerBeetle's
//! simulated storage see one: what was *written* (visible to reads at once) and what is
//! *persistent* (what a power cut keeps). [`Media::write`] changes the first, and only
//! [`Media::persist`] of a range followed by [`Media::sync`] makes it the second. A
//! [`DataMedia`] is a region's data area with the header's applied sequence number, and a
//! [`LogMedia`] a lane's redo log with its tail: each of those is one aligned 8-byte word (or,
//! for the tail, two checked slots) made persistent on its own.
//!
//! The real media are the mapped files ([`crate::RegionFile`], [`crate::LogFile`]) and the
//! disk data area ([`crate::DiskRegion`]); the simulator (`mojim_core::sim`) implements the
//! same traits over images that a simulated power cut tears. `mojim_core::mirror` runs the
//! mirror's checkpoint commands, a lane's record storage and a Copy frame's landing against any
//! of them, so the order of persistence lives in one place.
//!
//! The methods take `&mut self`, as `std::io::Write` does; the real files persist through
//! shared references, so they implement the traits for `&RegionFile` and so on, as
//! `std::io::Write` is implemented for `&File`.

use crate::map::MapSlice;
use crate::{DiskRegion, LogFile, RegionFile};
use mojim_format::log::RecordArea;
use mojim_format::FRAME_HEADER_SIZE;
use std::io::{self, Read};

/// Bytes to write, or a log's records to read: a plain slice, or a view of a mapping (which
/// safe code reads through copies, never as a slice: see [`MapSlice`]).
#[derive(Clone, Copy, Debug)]
pub enum Bytes<'a> {
    Slice(&'a [u8]),
    Mapped(MapSlice<'a>),
}

impl Bytes<'_> {
    pub fn len(&self) -> usize {
        match self {
            Bytes::Slice(s) => s.len(),
            Bytes::Mapped(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the bytes at `at` into `out`.
    pub fn read(&self, at: usize, out: &mut [u8]) {
        match self {
            Bytes::Slice(s) => out.copy_from_slice(&s[at..at + out.len()]),
            Bytes::Mapped(m) => m.read(at, out),
        }
    }
}

/// A log's record area, read by the record parser whichever media holds it.
impl<'a> RecordArea for Bytes<'a> {
    type Body<'b>
        = Bytes<'a>
    where
        Self: 'b;

    fn area_len(&self) -> usize {
        self.len()
    }

    fn header_at(&self, at: usize) -> [u8; FRAME_HEADER_SIZE] {
        match self {
            Bytes::Slice(s) => s.header_at(at),
            Bytes::Mapped(m) => m.header_at(at),
        }
    }

    fn checksum(&self, at: usize, len: usize) -> u32 {
        match self {
            Bytes::Slice(s) => s.checksum(at, len),
            Bytes::Mapped(m) => m.checksum(at, len),
        }
    }

    fn body(&self, at: usize, len: usize) -> Bytes<'a> {
        match *self {
            Bytes::Slice(s) => Bytes::Slice(&s[at..at + len]),
            Bytes::Mapped(m) => Bytes::Mapped(m.slice(at, len)),
        }
    }

    fn copy_out(&self, at: usize, out: &mut [u8]) {
        self.read(at, out)
    }
}

/// A byte area that is written, then made persistent.
pub trait Media {
    /// Bytes in the area.
    fn len(&self) -> u64;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies bytes at `offset` into `out`: what was written, persistent or not.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;

    /// Stores `src` at `offset`: visible to reads at once, persistent only after
    /// [`Media::persist`] of the range and [`Media::sync`].
    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()>;

    /// Makes the bytes of `[offset, offset + len)` persistent (memory: cache-line write-back,
    /// rounded out to whole lines); nothing where [`Media::persists_ranges`] is false.
    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()>;

    /// [`Media::write`] then [`Media::persist`] of the same bytes (a copy's, landing): by
    /// default in two steps; mapped memory does it in one pass.
    fn write_persistent(&mut self, offset: u64, src: &[u8]) -> io::Result<()> {
        self.write(offset, Bytes::Slice(src))?;
        self.persist(offset, src.len() as u64)
    }

    /// Makes every write so far durable (a disk file: `fdatasync`); nothing for memory, where
    /// [`Media::persist`] did it range by range.
    fn sync(&mut self) -> io::Result<()>;

    /// Whether [`Media::persist`] does anything (else [`Media::sync`] does it all, and a caller
    /// may skip walking the ranges).
    fn persists_ranges(&self) -> bool {
        true
    }
}

/// A region's data area: its bytes and the header's applied sequence number.
pub trait DataMedia: Media {
    /// The last group whose bytes the area holds persistently, as last recorded.
    fn applied_seq(&self) -> io::Result<u64>;

    /// Records `seq` as applied: one aligned 8-byte store, made persistent before this
    /// returns. The groups up to `seq` must be persistent in the area first.
    fn set_applied_seq(&mut self, seq: u64) -> io::Result<()>;
}

/// A lane's redo log: its circular record area and its tail.
pub trait LogMedia: Media {
    /// The record area, for the record parser ([`RecordArea`]).
    fn records(&self) -> Bytes<'_>;

    /// Where the oldest record still needed begins, as last made persistent.
    fn tail(&self) -> u64;

    /// Frees the records before `pos`: persistent before this returns. Their groups must be
    /// persistent in the data area, and the applied number recorded, first.
    fn set_tail(&mut self, pos: u64) -> io::Result<()>;

    /// Reads `len` bytes from `src` into the record area at `offset` (a record's body, as a
    /// lane receives it): visible to reads once this returns, persistent only after
    /// [`Media::persist`]. By default through a buffer on the stack; a mapped log receives
    /// straight into place.
    fn receive(&mut self, offset: u64, len: usize, src: &mut dyn Read) -> io::Result<()> {
        let mut buf = [0u8; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len());
            src.read_exact(&mut buf[..n])?;
            self.write(offset + done as u64, Bytes::Slice(&buf[..n]))?;
            done += n;
        }
        Ok(())
    }
}

impl Media for &RegionFile {
    fn len(&self) -> u64 {
        self.size()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        RegionFile::read(self, offset, out);
        Ok(())
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        match src {
            Bytes::Slice(s) => RegionFile::write(self, offset, s),
            Bytes::Mapped(m) => self.write_from(offset, m),
        }
        Ok(())
    }

    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
        RegionFile::persist(self, offset, len as usize)
    }

    /// Streaming stores for memory and DAX: one pass (see `RegionFile::write_persistent`).
    fn write_persistent(&mut self, offset: u64, src: &[u8]) -> io::Result<()> {
        RegionFile::write_persistent(self, offset, src)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl DataMedia for &RegionFile {
    fn applied_seq(&self) -> io::Result<u64> {
        Ok(RegionFile::applied_seq(self))
    }

    fn set_applied_seq(&mut self, seq: u64) -> io::Result<()> {
        RegionFile::set_applied_seq(self, seq)
    }
}

impl Media for &DiskRegion {
    fn len(&self) -> u64 {
        self.size()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        DiskRegion::read(self, offset, out)
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        match src {
            Bytes::Slice(s) => DiskRegion::write(self, offset, s),
            Bytes::Mapped(m) => self.write_from(offset, m),
        }
    }

    fn persist(&mut self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        DiskRegion::sync(self)
    }

    fn persists_ranges(&self) -> bool {
        false
    }
}

impl DataMedia for &DiskRegion {
    fn applied_seq(&self) -> io::Result<u64> {
        DiskRegion::applied_seq(self)
    }

    fn set_applied_seq(&mut self, seq: u64) -> io::Result<()> {
        DiskRegion::set_applied_seq(self, seq)
    }
}

/// A log as media: offsets are positions in the record area (`0..capacity`), not log
/// positions. A lane stores its records through this (`mojim_core::mirror::record`), and the
/// checkpoint path reads the log ([`LogMedia::records`]) and frees it ([`LogMedia::set_tail`]).
impl Media for &LogFile {
    fn len(&self) -> u64 {
        self.capacity()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.area().read(offset as usize, out);
        Ok(())
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        match src {
            Bytes::Slice(s) => self.write_at(offset, s),
            Bytes::Mapped(m) => self.write_at(offset, &m.to_vec()),
        }
        Ok(())
    }

    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
        LogFile::persist(self, offset, offset + len)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LogMedia for &LogFile {
    fn records(&self) -> Bytes<'_> {
        Bytes::Mapped(self.area())
    }

    fn tail(&self) -> u64 {
        LogFile::tail(self)
    }

    fn set_tail(&mut self, pos: u64) -> io::Result<()> {
        LogFile::set_tail(self, pos)
    }

    /// Straight from `src` into the mapping: no copy on the way.
    fn receive(&mut self, offset: u64, len: usize, src: &mut dyn Read) -> io::Result<()> {
        self.recv_at(offset, len, src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One conformance check every real media passes: what is written reads back, persisted,
    /// and the applied number and tail survive reopening.
    fn conformance(data: &mut impl DataMedia) {
        data.write(100, Bytes::Slice(b"abc")).unwrap();
        data.persist(100, 3).unwrap();
        data.sync().unwrap();
        data.set_applied_seq(9).unwrap();
        let mut out = [0u8; 3];
        data.read(100, &mut out).unwrap();
        assert_eq!(&out, b"abc");
        assert_eq!(data.applied_seq().unwrap(), 9);
    }

    #[test]
    fn the_real_media_keep_what_they_persist() {
        let dir = std::env::temp_dir().join(format!("mojim-media-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = RegionFile::create(&dir.join("r"), [1; 16], 4096).unwrap();
        conformance(&mut &r);
        drop(r);
        let r = RegionFile::open(&dir.join("r")).unwrap();
        assert_eq!(DataMedia::applied_seq(&&r).unwrap(), 9);
        let d = DiskRegion::create(&dir.join("d"), [1; 16], 4096).unwrap();
        conformance(&mut &d);
        assert!(!(&d).persists_ranges());
        drop(d);
        let d = DiskRegion::open(&dir.join("d")).unwrap();
        let mut out = [0u8; 3];
        Media::read(&&d, 100, &mut out).unwrap();
        assert_eq!((&out, DataMedia::applied_seq(&&d).unwrap()), (b"abc", 9));

        // A mapped log's records are copied into a data area straight from the mapping.
        let l = LogFile::create(&dir.join("l"), [1; 16], 0, 1024).unwrap();
        let mut log = &l;
        Media::write(&mut log, 64, Bytes::Slice(b"xyz")).unwrap();
        Media::persist(&mut log, 64, 3).unwrap();
        LogMedia::set_tail(&mut log, 64).unwrap();
        let body = log.records().body(64, 3);
        let mut data = &r;
        Media::write(&mut data, 0, body).unwrap();
        let mut out = [0u8; 3];
        Media::read(&data, 0, &mut out).unwrap();
        assert_eq!((&out, LogMedia::tail(&log)), (b"xyz", 64));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
