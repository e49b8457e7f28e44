//! A file mapped shared, read-write, with bounds-checked access.

use crate::flush::{copy_persistent, persist_cache_lines, Persistence};
use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

const TMPFS_MAGIC: u64 = 0x0102_1994;
const PAGE: usize = 4096;

/// Mapping a file failed: names the file and the operation.
#[derive(Debug)]
pub struct MapError {
    pub path: PathBuf,
    pub op: &'static str,
    pub source: io::Error,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.op, self.path.display(), self.source)
    }
}

impl std::error::Error for MapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// A whole file mapped `MAP_SHARED` read-write.
///
/// The mapping is memory shared between threads: methods take `&self` and copy bytes in and
/// out. Callers coordinate who writes which bytes (a lane writes only past its log's head; the
/// checkpointer writes the data area under a lock); two threads writing the same bytes at once
/// leave unspecified bytes, never unsafety in this crate's callers.
pub struct MappedFile {
    ptr: *mut u8,
    len: usize,
    persistence: Persistence,
    path: PathBuf,
    _file: File,
}

// SAFETY: the mapping is plain shared memory owned by this value until drop; every access
// from other threads goes through raw copies bounded by `len`.
unsafe impl Send for MappedFile {}
// SAFETY: as above; `&self` methods never hand out references that outlive a call except
// `bytes`, whose contract is documented there.
unsafe impl Sync for MappedFile {}

pub(crate) fn err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> MapError + 'a {
    move |source| MapError { path: path.to_path_buf(), op, source }
}

impl MappedFile {
    /// Creates `path` (which must not exist) with `len` zero bytes and maps it.
    pub fn create(path: &Path, len: u64) -> Result<MappedFile, MapError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| err(path, "create")(e.into()))?;
        let file = File::from(fd);
        // Reserve every block now, so that a full file system is an error here and not a
        // SIGBUS on a later store into the mapping.
        if let Err(e) = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, len) {
            let _ = std::fs::remove_file(path);
            return Err(err(path, "allocate")(e.into()));
        }
        Self::map(file, path, len)
    }

    /// The file was renamed to `path` (its mapping is unchanged).
    pub(crate) fn renamed(&mut self, path: &Path) {
        self.path = path.to_path_buf();
    }

    /// Opens and maps an existing file.
    pub fn open(path: &Path) -> Result<MappedFile, MapError> {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(err(path, "open"))?;
        let len = file.metadata().map_err(err(path, "stat"))?.len();
        Self::map(file, path, len)
    }

    fn map(file: File, path: &Path, len: u64) -> Result<MappedFile, MapError> {
        let len = usize::try_from(len).map_err(|_| err(path, "map")(io::Error::other("file too large")))?;
        if len == 0 {
            return Err(err(path, "map")(io::Error::other("file is empty")));
        }
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a fresh mapping at an address of the kernel's choosing aliases nothing;
        // MAP_SHARED_VALIDATE makes the kernel refuse MAP_SYNC where it is not supported.
        let dax = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC | MapFlags::POPULATE,
                file.as_fd(),
                0,
            )
        };
        let (ptr, persistence) = match dax {
            Ok(p) => (p, Persistence::Dax),
            Err(_) => {
                // SAFETY: as above.
                let p = unsafe {
                    rustix::mm::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        MapFlags::SHARED | MapFlags::POPULATE,
                        file.as_fd(),
                        0,
                    )
                }
                .map_err(|e| err(path, "map")(e.into()))?;
                let fs = rustix::fs::fstatfs(file.as_fd()).map_err(|e| err(path, "statfs")(e.into()))?;
                let memory = fs.f_type as u64 == TMPFS_MAGIC;
                (p, if memory { Persistence::Memory } else { Persistence::File })
            }
        };
        Ok(MappedFile { ptr: ptr.cast(), len, persistence, path: path.to_path_buf(), _file: file })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    /// Base address of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "access at {offset} len {len} outside mapping of {} bytes ({})",
            self.len,
            self.path.display()
        );
    }

    /// Copies bytes out of the mapping.
    pub fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: bounds checked above; `out` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) }
    }

    /// Copies bytes into the mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: bounds checked above; `data` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) }
    }

    /// Fills bytes of the mapping from `src`, straight from the socket into the mapping.
    pub fn read_exact_from(&self, offset: usize, len: usize, src: &mut impl Read) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: bounds checked above. The caller owns `[offset, offset + len)` for the
        // duration of the call (a lane writes only between its log's head and the next
        // record's end, which no other thread reads until the head is advanced).
        let buf = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) };
        src.read_exact(buf)
    }

    /// A view of bytes of the mapping, for sending them without a copy or reading them in
    /// place. Bytes another thread changes while the view is held read as either value.
    pub fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        self.check(offset, len);
        // SAFETY: bounds checked above; the mapping lives as long as `self`. Concurrent
        // writers are other threads' stores to shared memory, as with any shared mapping.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }

    /// An 8-byte counter inside the mapping, for fields updated in place (log tail, applied
    /// sequence number).
    pub fn counter(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8);
        assert_eq!(offset % 8, 0, "counter at unaligned offset {offset}");
        // SAFETY: in bounds, 8-byte aligned (the mapping is page-aligned), lives as long as
        // `self`; AtomicU64 has the layout of u64.
        unsafe { &*(self.ptr.add(offset) as *const AtomicU64) }
    }

    /// Makes `[offset, offset + len)` persistent according to [`MappedFile::persistence`].
    pub fn persist(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        match self.persistence {
            Persistence::Dax | Persistence::Memory => {
                // SAFETY: in bounds.
                persist_cache_lines(unsafe { self.ptr.add(offset) }, len);
                Ok(())
            }
            Persistence::File => {
                let start = offset & !(PAGE - 1);
                let end = (offset + len).next_multiple_of(PAGE).min(self.len);
                // SAFETY: `[start, end)` lies within the mapping and is page-aligned at start.
                unsafe { rustix::mm::msync(self.ptr.add(start).cast(), end - start, MsyncFlags::SYNC) }
                    .map_err(io::Error::from)
            }
        }
    }

    /// Copies `data` into the mapping at `offset` and makes it persistent: streaming stores
    /// for memory and DAX (see [`crate::flush::copy_persistent`]), a copy and `msync` for a file.
    pub fn write_persistent(&self, offset: usize, data: &[u8]) -> io::Result<()> {
        self.check(offset, data.len());
        match self.persistence {
            Persistence::Dax | Persistence::Memory => {
                // SAFETY: bounds checked above; `data` is a distinct Rust buffer.
                unsafe { copy_persistent(self.ptr.add(offset), data) };
                Ok(())
            }
            Persistence::File => {
                self.write(offset, data);
                self.persist(offset, data.len())
            }
        }
    }

    /// Writes counters back (used after in-place header updates).
    pub fn persist_counter(&self, offset: usize) -> io::Result<()> {
        self.persist(offset, 8)
    }

    pub fn load(&self, offset: usize) -> u64 {
        self.counter(offset).load(Ordering::Acquire)
    }

    pub fn store(&self, offset: usize, v: u64) {
        self.counter(offset).store(v, Ordering::Release)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing borrows the mapping
        // past `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("mojim-region-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        d
    }

    #[test]
    fn create_write_reopen() {
        let p = tmp("a");
        let m = MappedFile::create(&p, 8192).unwrap();
        m.write(100, b"hello");
        m.persist(100, 5).unwrap();
        m.store(8, 77);
        drop(m);
        let m = MappedFile::open(&p).unwrap();
        let mut b = [0u8; 5];
        m.read(100, &mut b);
        assert_eq!(&b, b"hello");
        assert_eq!(m.load(8), 77);
        assert!(MappedFile::create(&p, 8192).is_err(), "create refuses an existing file");
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn shm_is_memory() {
        let p = PathBuf::from(format!("/dev/shm/mojim-region-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        if let Ok(m) = MappedFile::create(&p, 4096) {
            assert_eq!(m.persistence(), Persistence::Memory);
            m.persist(0, 4096).unwrap();
            std::fs::remove_file(&p).unwrap();
        }
    }

    #[test]
    #[should_panic(expected = "outside mapping")]
    fn out_of_bounds_panics() {
        let p = tmp("b");
        let m = MappedFile::create(&p, 4096).unwrap();
        let _ = std::fs::remove_file(&p);
        m.write(4095, b"ab");
    }
}
