//! The mirror's data area: mapped memory (checkpoints are stores, made persistent with cache-line
//! write-back) or a disk file (`sync-disk`: checkpoints are `pwrite`s, made durable with one
//! `fdatasync` per reclaim). Both are the same region file format.

use mojim::error::{Error, Result};
use mojim_region::{DiskRegion, MapSlice, RegionFile};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// Where the data area lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataPlacement {
    /// Mapped; the paper's NVMM data area.
    Memory,
    /// An ordinary file written with pwrite + fdatasync; the paper's M-syncdisk.
    Disk,
}

impl std::str::FromStr for DataPlacement {
    type Err = String;
    fn from_str(s: &str) -> Result<DataPlacement, String> {
        match s {
            "memory" => Ok(DataPlacement::Memory),
            "disk" => Ok(DataPlacement::Disk),
            _ => Err(format!("unknown data placement {s:?}; choose memory or disk")),
        }
    }
}

pub(crate) enum DataArea {
    Memory(RegionFile),
    Disk(DiskRegion),
}

impl DataArea {
    /// Opens the region file at `path`, or creates it with `uuid` and `size`.
    pub fn open_or_create(
        path: &Path,
        uuid: [u8; 16],
        size: u64,
        placement: DataPlacement,
    ) -> Result<DataArea> {
        let exists = path.exists();
        Ok(match (placement, exists) {
            (DataPlacement::Memory, true) => DataArea::Memory(RegionFile::open(path)?),
            (DataPlacement::Memory, false) => DataArea::Memory(RegionFile::create(path, uuid, size)?),
            (DataPlacement::Disk, true) => DataArea::Disk(DiskRegion::open(path)?),
            (DataPlacement::Disk, false) => DataArea::Disk(DiskRegion::create(path, uuid, size)?),
        })
    }

    pub fn uuid(&self) -> [u8; 16] {
        match self {
            DataArea::Memory(r) => r.uuid(),
            DataArea::Disk(d) => d.uuid(),
        }
    }

    pub fn size(&self) -> u64 {
        match self {
            DataArea::Memory(r) => r.size(),
            DataArea::Disk(d) => d.size(),
        }
    }

    /// How checkpoints become persistent, for status.
    pub fn persistence(&self) -> &'static str {
        match self {
            DataArea::Memory(r) => r.persistence().name(),
            DataArea::Disk(_) => "disk",
        }
    }

    pub fn applied_seq(&self) -> Result<u64> {
        match self {
            DataArea::Memory(r) => Ok(r.applied_seq()),
            DataArea::Disk(d) => d.applied_seq().map_err(Error::io("read the applied sequence number")),
        }
    }

    pub fn set_applied_seq(&self, seq: u64) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.set_applied_seq(seq),
            DataArea::Disk(d) => d.set_applied_seq(seq),
        }
    }

    pub fn epoch(&self) -> Result<u64> {
        match self {
            DataArea::Memory(r) => Ok(r.epoch()),
            DataArea::Disk(d) => d.epoch().map_err(Error::io("read the epoch")),
        }
    }

    pub fn set_epoch(&self, epoch: u64) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.set_epoch(epoch),
            DataArea::Disk(d) => d.set_epoch(epoch),
        }
    }

    pub fn generation(&self) -> io::Result<(u64, u64)> {
        match self {
            DataArea::Memory(r) => Ok(r.generation()),
            DataArea::Disk(d) => d.generation(),
        }
    }

    pub fn set_generation(&self, current: u64, prev: u64) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.set_generation(current, prev),
            DataArea::Disk(d) => d.set_generation(current, prev),
        }
    }

    /// Header flags and the sequence number that ends a copy (see the region format).
    pub fn copy_state(&self) -> io::Result<(u64, u64)> {
        match self {
            DataArea::Memory(r) => Ok(r.copy_state()),
            DataArea::Disk(d) => d.copy_state(),
        }
    }

    pub fn set_copy_state(&self, flags: u64, copy_until: u64) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.set_copy_state(flags, copy_until),
            DataArea::Disk(d) => d.set_copy_state(flags, copy_until),
        }
    }

    /// Applies bytes of a mapping (a log record's body), copied straight from it: visible to
    /// readers at once; durable after [`DataArea::persist`] of the range and [`DataArea::sync`].
    pub fn write_from(&self, offset: u64, src: MapSlice<'_>) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => {
                r.write_from(offset, src);
                Ok(())
            }
            DataArea::Disk(d) => d.write_from(offset, src),
        }
    }

    /// Writes bytes and makes them persistent (a disk file: at the next [`DataArea::sync`]),
    /// in one pass for mapped memory (see `mojim_region::RegionFile::write_persistent`).
    pub fn write_persistent(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.write_persistent(offset, data),
            DataArea::Disk(d) => d.write(offset, data),
        }
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => {
                r.read(offset, out);
                Ok(())
            }
            DataArea::Disk(d) => d.read(offset, out),
        }
    }

    /// Per-range persistence: cache-line write-back (memory); nothing for a disk file, whose
    /// ranges all become durable at the next [`DataArea::sync`].
    pub fn persist(&self, offset: u64, len: usize) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.persist(offset, len),
            DataArea::Disk(_) => Ok(()),
        }
    }

    /// Makes every write so far durable: `fdatasync` for a disk file.
    pub fn sync(&self) -> io::Result<()> {
        match self {
            DataArea::Memory(_) => Ok(()),
            DataArea::Disk(d) => d.sync(),
        }
    }

    /// Whether per-range persistence does anything (else [`DataArea::sync`] does it all).
    pub fn persists_ranges(&self) -> bool {
        matches!(self, DataArea::Memory(_))
    }
}
