//! The mirror's data area: mapped memory (checkpoints are stores, made persistent with cache-line
//! write-back) or a disk file (`sync-disk`: checkpoints are `pwrite`s, made durable with one
//! `fdatasync` per reclaim). Both are the same region file format.

use mojim::error::{Error, Result};
use mojim_format::region::{FLAG_INCONSISTENT, FLAG_PRIMARY};
use mojim_region::{Bytes, DataMedia, DiskRegion, Media, Nvmm, RegionFile};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    type Err = UnknownPlacement;
    fn from_str(s: &str) -> Result<DataPlacement, UnknownPlacement> {
        match s {
            "memory" => Ok(DataPlacement::Memory),
            "disk" => Ok(DataPlacement::Disk),
            _ => Err(UnknownPlacement(s.to_string())),
        }
    }
}

/// A data placement that is neither `memory` nor `disk` (the operator's flag or configuration):
/// the text given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownPlacement(pub String);

impl std::fmt::Display for UnknownPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown data placement {:?}; choose memory or disk", self.0)
    }
}

impl std::error::Error for UnknownPlacement {}

pub(crate) enum DataArea {
    Memory(RegionFile),
    Disk(DiskRegion),
}

impl DataArea {
    /// Opens the region file at `path`, or creates it with `uuid` and `size`; a mapped one
    /// without mapping its pages ([`DataArea::populate`] maps them, and whatever touches a page
    /// first maps that one).
    pub fn open_or_create(
        path: &Path,
        uuid: [u8; 16],
        size: u64,
        placement: DataPlacement,
    ) -> Result<DataArea> {
        let exists = path.exists();
        Ok(match (placement, exists) {
            (DataPlacement::Memory, true) => DataArea::Memory(RegionFile::open_unpopulated(path)?),
            (DataPlacement::Memory, false) => DataArea::Memory(RegionFile::create(path, uuid, size)?),
            (DataPlacement::Disk, true) => DataArea::Disk(DiskRegion::open(path)?),
            (DataPlacement::Disk, false) => DataArea::Disk(DiskRegion::create(path, uuid, size)?),
        })
    }

    /// Maps the pages of data bytes `[offset, offset + len)` of a memory data area now (a disk
    /// one has none): only saves the page faults of a later touch.
    pub fn populate(&self, offset: u64, len: u64) -> io::Result<()> {
        match self {
            DataArea::Memory(r) => r.populate(offset, len),
            DataArea::Disk(_) => Ok(()),
        }
    }

    /// Charges the persists of a memory data area to an emulated NVMM (a disk one pays its
    /// `fdatasync`s, never the model).
    pub fn emulate_nvmm(&mut self, nvmm: Option<Arc<Nvmm>>) {
        if let DataArea::Memory(r) = self {
            r.emulate_nvmm(nvmm);
        }
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

/// The data area as the checkpoint executor (`mojim_core::mirror::execute`) writes and persists
/// it: the mapped region's or the disk file's media.
impl Media for &DataArea {
    fn len(&self) -> u64 {
        self.size()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        DataArea::read(self, offset, out)
    }

    fn write(&mut self, offset: u64, src: Bytes<'_>) -> io::Result<()> {
        match *self {
            DataArea::Memory(r) => Media::write(&mut &*r, offset, src),
            DataArea::Disk(d) => Media::write(&mut &*d, offset, src),
        }
    }

    fn persist(&mut self, offset: u64, len: u64) -> io::Result<()> {
        DataArea::persist(self, offset, len as usize)
    }

    fn write_persistent(&mut self, offset: u64, src: &[u8]) -> io::Result<()> {
        DataArea::write_persistent(self, offset, src)
    }

    fn sync(&mut self) -> io::Result<()> {
        DataArea::sync(self)
    }

    fn persists_ranges(&self) -> bool {
        DataArea::persists_ranges(self)
    }
}

impl DataMedia for &DataArea {
    fn applied_seq(&self) -> io::Result<u64> {
        match *self {
            DataArea::Memory(r) => DataMedia::applied_seq(&r),
            DataArea::Disk(d) => DataMedia::applied_seq(&d),
        }
    }

    fn set_applied_seq(&mut self, seq: u64) -> io::Result<()> {
        DataArea::set_applied_seq(self, seq)
    }
}

/// The data area as the node's threads share it: the area, the lock that keeps readers from
/// seeing part of a group, the last group written, and whether the area failed.
///
/// Locks: `lock`, held for writing while a group is applied or copied bytes land, for reading
/// by readers; nothing is taken under it (see the lock order in lib.rs).
pub(crate) struct Store {
    area: DataArea,
    lock: RwLock<()>,
    /// The last group whose bytes were written to the area (changed with the lock held for
    /// writing): bytes read from the area hold no group after it.
    written_seq: AtomicU64,
    /// Set when the area failed: no log space is freed and no data accepted after it.
    failed: OnceLock<String>,
    /// The area's file, for messages.
    path: PathBuf,
}

/// The data area held for writing.
pub(crate) struct Writing<'a> {
    store: &'a Store,
    _held: RwLockWriteGuard<'a, ()>,
}

/// The data area held for reading: no group is written while it is held.
pub(crate) struct Reading<'a> {
    store: &'a Store,
    _held: RwLockReadGuard<'a, ()>,
}

impl Store {
    pub fn new(area: DataArea, path: PathBuf) -> Store {
        Store { area, lock: RwLock::new(()), written_seq: AtomicU64::new(0), failed: OnceLock::new(), path }
    }

    /// The area itself: its header (epoch, generation, copy state, applied sequence number)
    /// and its persistence. Bytes are read and written through [`Store::read`] and
    /// [`Store::write`].
    pub fn area(&self) -> &DataArea {
        &self.area
    }

    /// Holds the area for writing, waiting for readers.
    pub fn write(&self) -> Writing<'_> {
        Writing { store: self, _held: self.lock.write().unwrap_or_else(|p| p.into_inner()) }
    }

    /// Holds the area for writing, unless a reader or writer holds it.
    pub fn try_write(&self) -> Option<Writing<'_>> {
        let held = self.lock.try_write().ok()?;
        Some(Writing { store: self, _held: held })
    }

    /// Holds the area for reading; refused, with why, once the area failed (a failed write may
    /// have left part of a group in it).
    pub fn read(&self) -> Result<Reading<'_>, &str> {
        let held = self.lock.read().unwrap_or_else(|p| p.into_inner());
        match self.failed() {
            Some(msg) => Err(msg),
            None => Ok(Reading { store: self, _held: held }),
        }
    }

    /// Copies `out.len()` bytes at `offset`: whole groups only, never part of one.
    pub fn read_consistent(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let size = self.area.size();
        if offset.checked_add(out.len() as u64).is_none_or(|e| e > size) {
            return Err(Error::Range(mojim_core::encode::RangeError::OutOfBounds {
                offset,
                len: out.len() as u64,
                region_size: size,
            }));
        }
        // A write that failed may have left part of a group in the data area: nothing is read
        // from it until a restart recovers it from the logs.
        let r =
            self.read().map_err(|msg| Error::io("read the data area")(io::Error::other(msg.to_string())))?;
        r.read(offset, out).map_err(Error::io("read the data area"))
    }

    /// Why the area failed, if it did.
    pub fn failed(&self) -> Option<&String> {
        self.failed.get()
    }

    /// Fail-stops the node's storage: no group is written to the data area, persisted or
    /// released from a log after this, and lanes refuse new data (so nothing more is
    /// acknowledged) with `what` failed, which status shows. Every group acknowledged so far is
    /// in a log, and restart recovery applies it. Returns the message that stands (the first
    /// failure's).
    pub fn fail(&self, what: String) -> String {
        self.set_failed(format!(
            "{what}; free the space or fix the device, then restart the mirror to recover from its logs"
        ))
    }

    /// Stops applying because a peer changed a lane's log after it was checked (`what`): a
    /// protocol violation, which ends the lanes' session like any failure of the data.
    pub fn fail_changed(&self, what: String) -> String {
        self.set_failed(format!(
            "{what}; the primary broke the protocol: restart the mirror to recover from its logs, \
             which checks every record again"
        ))
    }

    fn set_failed(&self, msg: String) -> String {
        if self.failed.set(msg.clone()).is_ok() {
            tracing::error!("{msg}");
        }
        self.failed.get().cloned().unwrap_or(msg)
    }

    /// [`Store::fail`] for a failure of the area itself: `why` it failed.
    pub fn fail_area(&self, why: String) -> String {
        self.fail(format!("the data area {} failed: {why}", self.path.display()))
    }

    /// Whether this node's copy is the primary's (promoted).
    pub fn is_primary(&self) -> bool {
        self.area.copy_state().is_ok_and(|(f, _)| f & FLAG_PRIMARY != 0)
    }

    /// Whether the data area holds a usable copy: no copy into it is unfinished. A finished copy
    /// clears the mark here, once every copy group is applied.
    pub fn consistent(&self) -> bool {
        let Ok((flags, until)) = self.area.copy_state() else { return false };
        let inconsistent = flags & FLAG_INCONSISTENT != 0;
        if !inconsistent {
            return true;
        }
        let applied = self.area.applied_seq().unwrap_or(0);
        if mojim_core::mirror::copy_complete(inconsistent, until, applied) {
            if let Err(e) = self.area.set_copy_state(flags & !FLAG_INCONSISTENT, 0) {
                tracing::error!(error = %e, "cannot clear the inconsistent mark");
                return false;
            }
            tracing::info!(applied, "copy complete: the data area is consistent");
            return true;
        }
        false
    }
}

impl Writing<'_> {
    /// Group `seq`'s bytes are all written.
    pub fn written(&self, seq: u64) {
        self.store.written_seq.store(seq, Ordering::Relaxed);
    }
}

impl Reading<'_> {
    pub fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.store.area.read(offset, out)
    }

    /// The last group whose bytes are in the area (none after it is, while this is held).
    pub fn written_seq(&self) -> u64 {
        self.store.written_seq.load(Ordering::Relaxed)
    }
}
