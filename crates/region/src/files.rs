//! Region and log files: a mapped file with its format header checked.

use crate::flush::Persistence;
use crate::map::{MapError, MapSlice, MappedFile};
use crate::nvmm::Nvmm;
use mojim_format::log::{
    header_version, tail_of, tail_slot, LogHeader, LOG_HEADER_SIZE, LOG_HEADER_USED, LOG_VERSION,
    LOG_VERSION_UNCHECKED_TAIL, TAIL_SLOT_OFFSETS, TAIL_SLOT_SIZE,
};
use mojim_format::region::{
    RegionHeader, APPLIED_SEQ_OFFSET, COPY_UNTIL_OFFSET, EPOCH_OFFSET, FLAGS_OFFSET, GENERATION_OFFSET,
    PREV_GENERATION_OFFSET, REGION_HEADER_SIZE,
};
use std::io::{self, Read};
use std::path::Path;
use std::sync::{Arc, Mutex};

fn corrupt(path: &Path, what: impl std::fmt::Display) -> MapError {
    MapError {
        path: path.to_path_buf(),
        op: "validate",
        source: io::Error::new(io::ErrorKind::InvalidData, what.to_string()),
    }
}

/// Creates and maps a file of `len` bytes whose first 128 bytes `encode` fills, persistently.
/// The file is made whole under a temporary name and then renamed, so a crash never leaves a
/// file without its header at `path` (which would stop every later start).
fn create_with_header(path: &Path, len: u64, encode: impl FnOnce(&mut [u8])) -> Result<MappedFile, MapError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut map = MappedFile::create(&tmp, len)?;
    let mut page = [0u8; 128];
    encode(&mut page);
    map.write(0, &page);
    let fail = |op: &'static str| move |source| MapError { path: path.to_path_buf(), op, source };
    map.persist(0, page.len()).map_err(fail("persist"))?;
    if path.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail("create")(io::Error::new(io::ErrorKind::AlreadyExists, "the file exists")));
    }
    std::fs::rename(&tmp, path).map_err(fail("rename"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(fail("sync the folder"))?;
    map.renamed(path);
    Ok(map)
}

/// An existing file's mapping, which must be at least a header page long.
fn long_enough(path: &Path, map: MappedFile, header_size: usize, what: &str) -> Result<MappedFile, MapError> {
    if map.len() < header_size {
        return Err(corrupt(path, format!("file is {} bytes, shorter than the {what} header", map.len())));
    }
    Ok(map)
}

/// A region file: header page, then the data area.
pub struct RegionFile {
    map: MappedFile,
    header: RegionHeader,
}

impl RegionFile {
    /// Creates a zeroed region of `size` data bytes.
    pub fn create(path: &Path, region_uuid: [u8; 16], size: u64) -> Result<RegionFile, MapError> {
        let header = RegionHeader { region_uuid, size, map_addr: 0 };
        let map = create_with_header(path, REGION_HEADER_SIZE as u64 + size, |page| header.encode(page))?;
        Ok(RegionFile { map, header })
    }

    /// Opens a region and checks its header against the file's length.
    pub fn open(path: &Path) -> Result<RegionFile, MapError> {
        Self::checked(path, long_enough(path, MappedFile::open(path)?, REGION_HEADER_SIZE, "region")?)
    }

    /// As [`RegionFile::open`], without mapping the data area's pages yet (see
    /// [`MappedFile::open_unpopulated`]): call [`RegionFile::populate`], from any thread.
    pub fn open_unpopulated(path: &Path) -> Result<RegionFile, MapError> {
        let map = MappedFile::open_unpopulated(path)?;
        Self::checked(path, long_enough(path, map, REGION_HEADER_SIZE, "region")?)
    }

    /// Maps the pages of data bytes `[offset, offset + len)` now (see [`MappedFile::populate`]).
    pub fn populate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.map.populate(REGION_HEADER_SIZE + offset as usize, len as usize)
    }

    fn checked(path: &Path, map: MappedFile) -> Result<RegionFile, MapError> {
        let mut page = [0u8; 128];
        map.read(0, &mut page);
        let header = RegionHeader::decode(&page).map_err(|e| corrupt(path, e))?;
        let expected = REGION_HEADER_SIZE as u64 + header.size;
        if map.len() as u64 != expected {
            return Err(corrupt(
                path,
                format!(
                    "file is {} bytes but its header says {} data bytes (expected {expected})",
                    map.len(),
                    header.size
                ),
            ));
        }
        Ok(RegionFile { map, header })
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.header.region_uuid
    }

    /// Bytes in the data area.
    pub fn size(&self) -> u64 {
        self.header.size
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }

    pub fn persistence(&self) -> Persistence {
        self.map.persistence()
    }

    /// Charges every later persist of this region to an emulated NVMM (see [`Nvmm`]).
    pub fn emulate_nvmm(&mut self, nvmm: Option<Arc<Nvmm>>) {
        self.map.emulate_nvmm(nvmm)
    }

    /// The emulated NVMM this region's persists are charged to, if any.
    pub fn nvmm(&self) -> Option<&Arc<Nvmm>> {
        self.map.nvmm()
    }

    pub fn applied_seq(&self) -> u64 {
        self.map.load(APPLIED_SEQ_OFFSET)
    }

    /// Records that every group up to `seq` is in the data area (after persisting it).
    pub fn set_applied_seq(&self, seq: u64) -> io::Result<()> {
        self.map.store(APPLIED_SEQ_OFFSET, seq);
        self.map.persist_counter(APPLIED_SEQ_OFFSET)
    }

    pub fn epoch(&self) -> u64 {
        self.map.load(EPOCH_OFFSET)
    }

    pub fn set_epoch(&self, epoch: u64) -> io::Result<()> {
        self.map.store(EPOCH_OFFSET, epoch);
        self.map.persist_counter(EPOCH_OFFSET)
    }

    /// The id of the history this copy follows, and the one before it (0: none).
    pub fn generation(&self) -> (u64, u64) {
        (self.map.load(GENERATION_OFFSET), self.map.load(PREV_GENERATION_OFFSET))
    }

    pub fn set_generation(&self, current: u64, prev: u64) -> io::Result<()> {
        self.map.store(PREV_GENERATION_OFFSET, prev);
        self.map.store(GENERATION_OFFSET, current);
        self.map.persist(GENERATION_OFFSET, 16)
    }

    /// Header flags (`mojim_format::region::FLAG_*`) and the sequence number that ends a copy.
    pub fn copy_state(&self) -> (u64, u64) {
        (self.map.load(FLAGS_OFFSET), self.map.load(COPY_UNTIL_OFFSET))
    }

    pub fn set_copy_state(&self, flags: u64, copy_until: u64) -> io::Result<()> {
        self.map.store(COPY_UNTIL_OFFSET, copy_until);
        self.map.store(FLAGS_OFFSET, flags);
        self.map.persist(FLAGS_OFFSET, 16)
    }

    fn at(&self, offset: u64, len: usize) -> usize {
        assert!(
            offset.checked_add(len as u64).is_some_and(|e| e <= self.header.size),
            "data access at {offset} len {len} outside region of {} bytes",
            self.header.size
        );
        REGION_HEADER_SIZE + offset as usize
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) {
        self.map.read(self.at(offset, out.len()), out)
    }

    pub fn write(&self, offset: u64, data: &[u8]) {
        self.map.write(self.at(offset, data.len()), data)
    }

    /// A view of data bytes, which the application may be storing into (see [`MapSlice`]).
    pub fn view(&self, offset: u64, len: usize) -> MapSlice<'_> {
        self.map.view(self.at(offset, len), len)
    }

    /// Copies `src` (bytes of another mapping, such as a log record's body) to data offset
    /// `offset` (see [`MappedFile::write_from`]).
    pub fn write_from(&self, offset: u64, src: MapSlice<'_>) {
        self.map.write_from(self.at(offset, src.len()), src)
    }

    pub fn persist(&self, offset: u64, len: usize) -> io::Result<()> {
        self.map.persist(self.at(offset, len), len)
    }

    /// Writes data bytes and makes them persistent (see [`MappedFile::write_persistent`]).
    pub fn write_persistent(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.map.write_persistent(self.at(offset, data.len()), data)
    }

    /// Address of data byte 0, for the application's own loads and stores (safe to return; any
    /// use of it is the caller's `unsafe`).
    pub fn data_ptr(&self) -> *mut u8 {
        self.map.as_ptr().wrapping_add(REGION_HEADER_SIZE)
    }
}

// The static header is what `RegionHeader::encode` writes; the counters live after it.
const _: () = assert!(APPLIED_SEQ_OFFSET >= 64 && EPOCH_OFFSET + 8 <= 128);
const _: () = assert!(LOG_HEADER_USED <= 128 && TAIL_SLOT_OFFSETS[1] + TAIL_SLOT_SIZE <= LOG_HEADER_USED);

/// One lane's log file: header page, then the circular record area.
pub struct LogFile {
    map: MappedFile,
    header: LogHeader,
    /// The header's checksum, which every tail slot's check covers.
    header_checksum: u32,
    /// The tail as the header held it at open, or as last made persistent; held while a new
    /// one is written (one writer at a time: the two slots are written in order).
    tail: Mutex<u64>,
}

impl LogFile {
    pub fn create(path: &Path, region_uuid: [u8; 16], lane: u16, capacity: u64) -> Result<LogFile, MapError> {
        let header = LogHeader { region_uuid, lane, capacity };
        let map = create_with_header(path, LOG_HEADER_SIZE as u64 + capacity, |page| header.encode(page))?;
        let mut crc = [0u8; 4];
        map.read(12, &mut crc);
        let header_checksum = u32::from_le_bytes(crc);
        Ok(LogFile { map, header, header_checksum, tail: Mutex::new(0) })
    }

    /// Opens a log and checks its header: the static fields, the file's length, and the tail
    /// (a tail whose two copies both fail their check is an error: where recovery starts is
    /// not known). A version 1 log (its tail unchecked) is rewritten as the current version:
    /// its tail into both slots, then the version; a crash in between leaves a version 1 log
    /// with the same tail.
    pub fn open(path: &Path) -> Result<LogFile, MapError> {
        Self::checked(path, long_enough(path, MappedFile::open(path)?, LOG_HEADER_SIZE, "log")?)
    }

    /// As [`LogFile::open`], without mapping the record area's pages yet (see
    /// [`MappedFile::open_unpopulated`]): recovery's scan maps those it reads, and
    /// [`LogFile::populate`], from any thread, the rest.
    pub fn open_unpopulated(path: &Path) -> Result<LogFile, MapError> {
        let map = MappedFile::open_unpopulated(path)?;
        Self::checked(path, long_enough(path, map, LOG_HEADER_SIZE, "log")?)
    }

    /// Maps the pages of record-area bytes `[offset, offset + len)` now (see
    /// [`MappedFile::populate`]).
    pub fn populate(&self, offset: u64, len: u64) -> io::Result<()> {
        self.map.populate(LOG_HEADER_SIZE + offset as usize, len as usize)
    }

    fn checked(path: &Path, map: MappedFile) -> Result<LogFile, MapError> {
        let mut page = [0u8; 128];
        map.read(0, &mut page);
        let header = LogHeader::decode(&page).map_err(|e| corrupt(path, e))?;
        if map.len() as u64 != LOG_HEADER_SIZE as u64 + header.capacity {
            return Err(corrupt(
                path,
                format!("file is {} bytes but its header says capacity {}", map.len(), header.capacity),
            ));
        }
        let tail = tail_of(&page).map_err(|e| corrupt(path, e))?;
        let header_checksum = u32::from_le_bytes(page[12..16].try_into().expect("4 bytes"));
        let persist = |op: &'static str| move |source| MapError { path: path.to_path_buf(), op, source };
        if header_version(&page) == LOG_VERSION_UNCHECKED_TAIL {
            for at in TAIL_SLOT_OFFSETS {
                map.write_persistent(at, &tail_slot(header_checksum, tail))
                    .map_err(persist("persist the tail (version 1 to 2)"))?;
            }
            map.write_persistent(8, &LOG_VERSION.to_le_bytes()).map_err(persist("persist the version"))?;
        }
        Ok(LogFile { map, header, header_checksum, tail: Mutex::new(tail) })
    }

    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    pub fn capacity(&self) -> u64 {
        self.header.capacity
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }

    pub fn persistence(&self) -> Persistence {
        self.map.persistence()
    }

    /// Charges every later persist of this log to an emulated NVMM (see [`Nvmm`]).
    pub fn emulate_nvmm(&mut self, nvmm: Option<Arc<Nvmm>>) {
        self.map.emulate_nvmm(nvmm)
    }

    /// Position of the oldest record not yet applied: as the header held it when the log was
    /// opened, or as this process last made it persistent.
    pub fn tail(&self) -> u64 {
        *self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the records before `pos` (after their groups are persistent in the data area):
    /// writes it, with its check, into tail slot 0 and makes that persistent, then the same into
    /// slot 1. A crash tears at most one slot, and the other holds `pos` or the tail before it,
    /// whose space is not reused until this returns; damage to one slot later leaves the other
    /// holding `pos`. An error leaves the tail before it in force.
    pub fn set_tail(&self, pos: u64) -> io::Result<()> {
        let mut t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        let slot = tail_slot(self.header_checksum, pos);
        for at in TAIL_SLOT_OFFSETS {
            self.map.write_persistent(at, &slot)?;
        }
        *t = pos;
        Ok(())
    }

    /// The whole record area, for scanning, applying and forwarding records (a view: the
    /// lane may be receiving into the free part of it meanwhile).
    pub fn area(&self) -> MapSlice<'_> {
        self.map.view(LOG_HEADER_SIZE, self.header.capacity as usize)
    }

    fn at(&self, pos: u64, len: usize) -> usize {
        let cap = self.header.capacity;
        let off = pos % cap;
        assert!(off + len as u64 <= cap, "record at {pos} len {len} crosses the end of the log");
        LOG_HEADER_SIZE + off as usize
    }

    /// Writes bytes at log position `pos`.
    pub fn write_at(&self, pos: u64, data: &[u8]) {
        self.map.write(self.at(pos, data.len()), data)
    }

    /// Receives `len` bytes from `src` straight into the log at `pos` (see
    /// [`MappedFile::recv_at`]: the caller is the lane, and `pos` is past the log's head).
    pub fn recv_at(&self, pos: u64, len: usize, src: &mut (impl Read + ?Sized)) -> io::Result<()> {
        self.map.recv_at(self.at(pos, len), len, src)
    }

    /// A view of the bytes at log position `pos`.
    pub fn view_at(&self, pos: u64, len: usize) -> MapSlice<'_> {
        self.map.view(self.at(pos, len), len)
    }

    /// Makes the records in `[from, to)` persistent (never across the end of the area: the
    /// range is split at the wrap).
    pub fn persist(&self, from: u64, to: u64) -> io::Result<()> {
        for (at, n) in mojim_format::log::area_pieces(self.header.capacity, from, to) {
            self.map.persist(LOG_HEADER_SIZE + at as usize, n as usize)?;
        }
        Ok(())
    }

    /// Writes a Pad record at `pos`.
    pub fn write_pad(&self, pos: u64) {
        let hb = mojim_format::log::pad_header(self.header.capacity, pos);
        self.write_at(pos, &hb);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_and_log_round_trip() {
        let dir = std::env::temp_dir().join(format!("mojim-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let r = RegionFile::create(&dir.join("r"), [1; 16], 8192).unwrap();
        r.write(8190, b"xy");
        r.set_applied_seq(5).unwrap();
        drop(r);
        let r = RegionFile::open(&dir.join("r")).unwrap();
        assert_eq!((r.size(), r.applied_seq(), r.uuid()), (8192, 5, [1; 16]));
        assert_eq!(r.view(8190, 2).to_vec(), b"xy");

        let l = LogFile::create(&dir.join("l"), [1; 16], 2, 1024).unwrap();
        l.write_pad(960);
        let pad = mojim_format::log::record_at(&l.area(), 960, 1 << 20).unwrap();
        assert_eq!(pad.header.kind, mojim_format::FrameKind::Pad);
        assert_eq!(mojim_format::log::scan(&l.area(), 960, 1 << 20).count(), 0, "pads are skipped");
        l.set_tail(64).unwrap();
        drop(l);
        let l = LogFile::open(&dir.join("l")).unwrap();
        assert_eq!((l.tail(), l.capacity(), l.header().lane), (64, 1024, 2));
        l.set_tail(128).unwrap();
        l.set_tail(192).unwrap();
        drop(l);
        let l = LogFile::open(&dir.join("l")).unwrap();
        assert_eq!(l.tail(), 192);
        drop(l);
        // Opened without its pages mapped: the same header, tail and records.
        let l = LogFile::open_unpopulated(&dir.join("l")).unwrap();
        assert_eq!((l.tail(), l.capacity(), l.header().lane), (192, 1024, 2));
        l.populate(0, 1024).unwrap();
        assert_eq!(mojim_format::log::record_at(&l.area(), 960, 1 << 20).unwrap().pos, 960);
        drop(l);

        // Version 1 (one unchecked tail at 64) is read and rewritten as version 2.
        let path = dir.join("l");
        let mut page = std::fs::read(&path).unwrap();
        page[8..12].copy_from_slice(&1u32.to_le_bytes());
        page[64..96].fill(0);
        page[64..72].copy_from_slice(&320u64.to_le_bytes());
        std::fs::write(&path, &page).unwrap();
        let l = LogFile::open(&path).unwrap();
        assert_eq!(l.tail(), 320);
        drop(l);
        let page = std::fs::read(&path).unwrap();
        assert_eq!(mojim_format::log::header_version(&page), mojim_format::log::LOG_VERSION);
        assert_eq!(mojim_format::log::tail_of(&page), Ok(320));

        // One slot damaged: the other holds the same tail.
        let mut page = page;
        page[72] ^= 1;
        std::fs::write(&path, &page).unwrap();
        assert_eq!(LogFile::open(&path).unwrap().tail(), 320);
        // Both slots damaged: the log is refused, naming the file and the slots.
        page[72] ^= 1;
        page[72] ^= 1;
        page[88] ^= 1;
        std::fs::write(&path, &page).unwrap();
        let e = LogFile::open(&path).err().expect("refused").to_string();
        assert!(e.contains("tail_pos fail their check") && e.contains(path.to_str().unwrap()), "{e}");
        let e = LogFile::open_unpopulated(&path).err().expect("refused unpopulated too").to_string();
        assert!(e.contains("tail_pos fail their check"), "{e}");

        std::fs::write(dir.join("short"), b"MOJIMRGN").unwrap();
        assert!(RegionFile::open(&dir.join("short")).is_err());
        assert!(RegionFile::open_unpopulated(&dir.join("short")).is_err());
        assert!(LogFile::open_unpopulated(&dir.join("short")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn persists_of_memory_regions_and_logs_are_charged_to_their_nvmm() {
        let dir = Path::new("/dev/shm").join(format!("mojim-files-nvmm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let model = crate::NvmmModel { barrier: std::time::Duration::from_nanos(10), write_bytes_per_s: 0 };
        let nvmm = Nvmm::shared(model).unwrap();
        let mut r = RegionFile::create(&dir.join("r"), [1; 16], 8192).unwrap();
        r.persist(0, 100).unwrap();
        assert!(r.nvmm().is_none(), "no model unless asked for");
        r.emulate_nvmm(Some(nvmm.clone()));
        assert_eq!(r.persistence(), Persistence::Memory, "/dev/shm is memory");
        {
            r.persist(0, 100).unwrap();
            r.persist(64, 0).unwrap();
            r.write_persistent(200, &[7; 50]).unwrap();
            assert_eq!((nvmm.counters().barriers, nvmm.counters().bytes), (2, 150), "no barrier, no charge");
            let mut l = LogFile::create(&dir.join("l"), [1; 16], 0, 4096).unwrap();
            l.emulate_nvmm(Some(nvmm.clone()));
            // A range across the end of the area is two barriers.
            l.persist(4000, 4196).unwrap();
            assert_eq!((nvmm.counters().barriers, nvmm.counters().bytes), (4, 346));
            r.emulate_nvmm(None);
            r.persist(0, 100).unwrap();
            assert_eq!(nvmm.counters().barriers, 4);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
