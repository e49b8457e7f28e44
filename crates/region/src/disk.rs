//! A region file used as an ordinary disk file: `pwrite`, `pread` and `fdatasync`, no mapping.
//!
//! The mirror keeps its data area this way in `sync-disk` mode (the paper's M-syncdisk): the
//! redo log stays on memory, and checkpoints go to the disk. The file has the same format as a
//! mapped region file, so one can be opened either way.

use crate::map::{err, MapError, MapSlice};
use mojim_format::region::{
    RegionHeader, APPLIED_SEQ_OFFSET, COPY_UNTIL_OFFSET, EPOCH_OFFSET, FLAGS_OFFSET, GENERATION_OFFSET,
    PREV_GENERATION_OFFSET, REGION_HEADER_SIZE,
};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A region file accessed with positioned reads and writes.
pub struct DiskRegion {
    file: File,
    header: RegionHeader,
    path: PathBuf,
}

impl DiskRegion {
    /// Creates a zeroed region file of `size` data bytes, its blocks reserved, readable and
    /// writable by its owner only. As for a mapped region, the file is made whole under a
    /// temporary name, synced, renamed into place, and the folder synced: a crash never leaves a
    /// file without its header at `path`, and a power cut never loses the name of a file whose
    /// groups were acknowledged.
    pub fn create(path: &Path, region_uuid: [u8; 16], size: u64) -> Result<DiskRegion, MapError> {
        if path.exists() {
            return Err(err(path, "create")(io::Error::new(io::ErrorKind::AlreadyExists, "the file exists")));
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(err(path, "create"))?;
        let len = REGION_HEADER_SIZE as u64 + size;
        let header = RegionHeader { region_uuid, size, map_addr: 0 };
        let mut page = [0u8; 128];
        header.encode(&mut page);
        let made = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len)
            .map_err(|e| err(path, "allocate")(e.into()))
            .and_then(|_| file.write_all_at(&page, 0).map_err(err(path, "write header")))
            .and_then(|_| file.sync_all().map_err(err(path, "sync")))
            .and_then(|_| std::fs::rename(&tmp, path).map_err(err(path, "rename")));
        if let Err(e) = made {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(err(path, "sync the folder"))?;
        Ok(DiskRegion { file, header, path: path.to_path_buf() })
    }

    /// Opens a region file and checks its header against its length.
    pub fn open(path: &Path) -> Result<DiskRegion, MapError> {
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(err(path, "open"))?;
        let len = file.metadata().map_err(err(path, "stat"))?.len();
        let mut page = [0u8; 128];
        file.read_exact_at(&mut page, 0).map_err(err(path, "read header"))?;
        let invalid = |m: String| MapError {
            path: path.to_path_buf(),
            op: "validate",
            source: io::Error::new(io::ErrorKind::InvalidData, m),
        };
        let header = RegionHeader::decode(&page).map_err(|e| invalid(e.to_string()))?;
        if len != REGION_HEADER_SIZE as u64 + header.size {
            return Err(invalid(format!(
                "file is {len} bytes but its header says {} data bytes",
                header.size
            )));
        }
        Ok(DiskRegion { file, header, path: path.to_path_buf() })
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.header.region_uuid
    }

    pub fn size(&self) -> u64 {
        self.header.size
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn at(&self, offset: u64, len: usize) -> u64 {
        assert!(
            offset.checked_add(len as u64).is_some_and(|e| e <= self.header.size),
            "data access at {offset} len {len} outside region of {} bytes",
            self.header.size
        );
        REGION_HEADER_SIZE as u64 + offset
    }

    /// Writes data bytes (to the page cache; [`DiskRegion::sync`] makes them durable).
    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, self.at(offset, data.len()))
    }

    /// Writes `src` (bytes of a mapping, such as a log record's body) at data offset `offset`,
    /// straight from the mapping.
    pub fn write_from(&self, offset: u64, src: MapSlice<'_>) -> io::Result<()> {
        src.write_all_at(&self.file, self.at(offset, src.len()))
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(out, self.at(offset, out.len()))
    }

    /// `fdatasync(2)`: every write so far is on the disk.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn counter(&self, at: usize) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, at as u64)?;
        Ok(u64::from_le_bytes(b))
    }

    pub fn applied_seq(&self) -> io::Result<u64> {
        self.counter(APPLIED_SEQ_OFFSET)
    }

    /// Records the applied watermark durably (after the data it covers was synced).
    pub fn set_applied_seq(&self, seq: u64) -> io::Result<()> {
        self.file.write_all_at(&seq.to_le_bytes(), APPLIED_SEQ_OFFSET as u64)?;
        self.file.sync_data()
    }

    pub fn epoch(&self) -> io::Result<u64> {
        self.counter(EPOCH_OFFSET)
    }

    pub fn set_epoch(&self, epoch: u64) -> io::Result<()> {
        self.file.write_all_at(&epoch.to_le_bytes(), EPOCH_OFFSET as u64)?;
        self.file.sync_data()
    }

    /// See `RegionFile::generation`.
    pub fn generation(&self) -> io::Result<(u64, u64)> {
        Ok((self.counter(GENERATION_OFFSET)?, self.counter(PREV_GENERATION_OFFSET)?))
    }

    /// Two adjacent header counters, durably.
    fn set_pair(&self, at: usize, first: u64, second: u64) -> io::Result<()> {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&first.to_le_bytes());
        b[8..].copy_from_slice(&second.to_le_bytes());
        self.file.write_all_at(&b, at as u64)?;
        self.file.sync_data()
    }

    pub fn set_generation(&self, current: u64, prev: u64) -> io::Result<()> {
        self.set_pair(GENERATION_OFFSET, current, prev)
    }

    /// See `RegionFile::copy_state`.
    pub fn copy_state(&self) -> io::Result<(u64, u64)> {
        Ok((self.counter(FLAGS_OFFSET)?, self.counter(COPY_UNTIL_OFFSET)?))
    }

    pub fn set_copy_state(&self, flags: u64, copy_until: u64) -> io::Result<()> {
        self.set_pair(FLAGS_OFFSET, flags, copy_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_format_as_a_mapped_region() {
        let dir = std::env::temp_dir().join(format!("mojim-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("d");
        let d = DiskRegion::create(&p, [4; 16], 8192).unwrap();
        assert!(DiskRegion::create(&p, [4; 16], 8192).is_err(), "an existing region is never replaced");
        assert!(!dir.join("d.new").exists(), "the temporary name is gone once the file is whole");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "owner only");
        d.write(8000, b"disk").unwrap();
        d.sync().unwrap();
        d.set_applied_seq(9).unwrap();
        drop(d);
        let m = crate::RegionFile::open(&p).unwrap();
        assert_eq!((m.uuid(), m.size(), m.applied_seq()), ([4; 16], 8192, 9));
        assert_eq!(m.view(8000, 4).to_vec(), b"disk");
        drop(m);
        let d = DiskRegion::open(&p).unwrap();
        let mut b = [0u8; 4];
        d.read(8000, &mut b).unwrap();
        assert_eq!(&b, b"disk");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
