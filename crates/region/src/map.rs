//! A file mapped shared, read-write, with bounds-checked access.
//!
//! # The memory model this crate keeps
//!
//! A mapping is memory that other threads (and, for a file mapped `MAP_SHARED`, other
//! processes) may store into at any time: the application stores into its region, a lane
//! receives into its log while the checkpointer reads older records of it. So no safe function
//! here hands out a Rust reference (`&[u8]`, `&mut [u8]`) to mapped bytes whose lifetime the
//! caller controls. Bytes are copied in and out through raw pointers ([`MappedFile::read`],
//! [`MappedFile::write`]), viewed as [`MapSlice`] (a pointer and a length, never a reference),
//! counters are atomics, and the few operations that need a slice for their duration (a
//! checksum, a receive from a reader straight into the mapping, a positioned write to a file)
//! make one inside this crate, use it once, and drop it before returning. Unsynchronised
//! stores by two parties into the same bytes leave unspecified bytes there; callers coordinate
//! who writes which bytes (a lane writes only past its log's head; the checkpointer writes the
//! data area under a lock).

use crate::flush::{copy_persistent, persist_cache_lines, Persistence};
use crate::nvmm::Nvmm;
use mojim_format::checksum::crc32c;
use mojim_format::log::RecordArea;
use mojim_format::FRAME_HEADER_SIZE;
use rustix::fs::{Mode, OFlags};
use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};
use std::fmt;
use std::fs::File;
use std::io::{self, IoSlice, Read};
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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
/// out, or give a [`MapSlice`] view (see the module's memory model).
pub struct MappedFile {
    /// Start of the mapping: non-null, page-aligned, `len` bytes mapped read-write until drop.
    ptr: *mut u8,
    len: usize,
    persistence: Persistence,
    /// The emulated NVMM every persist is charged to, if any (see `nvmm.rs`).
    nvmm: Option<Arc<Nvmm>>,
    path: PathBuf,
    _file: File,
}

// SAFETY: the mapping is plain shared memory that this value owns until drop (no thread-local
// state); moving the owner to another thread changes nothing about it.
unsafe impl Send for MappedFile {}
// SAFETY: every `&self` method reaches the mapping through bounds-checked raw copies, atomics,
// or a reference it makes and drops within the call; none hands out a reference to mapped
// bytes that outlives the call (views are `MapSlice`, a raw pointer), so sharing `&MappedFile`
// between threads creates no aliasing reference.
unsafe impl Sync for MappedFile {}

/// Opens an existing file for reading and writing, with its length.
fn open_existing(path: &Path) -> Result<(File, u64), MapError> {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(err(path, "open"))?;
    let len = file.metadata().map_err(err(path, "stat"))?.len();
    Ok((file, len))
}

/// A file length as a mapping's: not empty, and addressable.
fn mappable_len(path: &Path, len: u64) -> Result<usize, MapError> {
    let len = usize::try_from(len).map_err(|_| err(path, "map")(io::Error::other("file too large")))?;
    if len == 0 {
        return Err(err(path, "map")(io::Error::other("file is empty")));
    }
    Ok(len)
}

/// How stores into a page-cache (not DAX) mapping of `file` are made persistent: its file
/// system is memory (tmpfs) or a disk.
fn page_cache_persistence(file: &File, path: &Path) -> Result<Persistence, MapError> {
    let fs = rustix::fs::fstatfs(file.as_fd()).map_err(|e| err(path, "statfs")(e.into()))?;
    Ok(if fs.f_type as u64 == TMPFS_MAGIC { Persistence::Memory } else { Persistence::File })
}

/// The first line of /proc/self/maps overlapping `[addr, addr + len)`, if it can be read.
pub(crate) fn holder(addr: usize, len: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .find(|l| {
            let range = l.split(' ').next().unwrap_or("");
            let (lo, hi) = range.split_once('-').unwrap_or(("", ""));
            match (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16)) {
                (Ok(lo), Ok(hi)) => lo < addr + len && addr < hi,
                _ => false,
            }
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
}

pub(crate) fn err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> MapError + 'a {
    move |source| MapError { path: path.to_path_buf(), op, source }
}

impl MappedFile {
    /// Creates `path` (which must not exist) with `len` zero bytes and maps it, without mapping
    /// its pages: each is mapped on first touch, or by [`MappedFile::populate`]. They hold only
    /// zeros, and mapping them all now would read every one into the page cache, zeroed (a
    /// brand-new 1 GiB data area took 0.7 s to 3.7 s to start so), before anything needs one.
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
        Self::map_with(file, path, len, MapFlags::empty())
    }

    /// The file was renamed to `path` (its mapping is unchanged).
    pub(crate) fn renamed(&mut self, path: &Path) {
        self.path = path.to_path_buf();
    }

    /// Opens and maps an existing file, every page mapped before it returns.
    pub fn open(path: &Path) -> Result<MappedFile, MapError> {
        let (file, len) = open_existing(path)?;
        Self::map(file, path, len)
    }

    /// Opens and maps an existing file without mapping its pages yet: each is mapped on first
    /// touch, or by [`MappedFile::populate`] (which another thread may run meanwhile). For a
    /// large file whose pages are in memory already, mapping them all is most of what opening
    /// costs (about 70 ms per GiB on a small VM), and need not hold up the caller.
    pub fn open_unpopulated(path: &Path) -> Result<MappedFile, MapError> {
        let (file, len) = open_existing(path)?;
        Self::map_with(file, path, len, MapFlags::empty())
    }

    /// Maps the pages of `[offset, offset + len)` now (their page-table entries), so that
    /// touching them later takes no page fault; widened to whole pages. Changes no byte.
    pub fn populate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        if len == 0 {
            return Ok(());
        }
        let start = offset / PAGE * PAGE;
        let end = (offset + len).next_multiple_of(PAGE).min(self.len.next_multiple_of(PAGE));
        // SAFETY: `[start, end)` lies within the mapping's pages (the mapping is page-aligned
        // and `len` bytes long, rounded up to a page by the kernel), which live as long as
        // `self`. MADV_POPULATE_READ only faults pages in as a read would: it changes no byte.
        let r = unsafe {
            rustix::mm::madvise(
                self.ptr.add(start).cast(),
                end - start,
                rustix::mm::Advice::LinuxPopulateRead,
            )
        };
        match r {
            Ok(()) => Ok(()),
            // Before Linux 5.14: a read of a byte per page does the same.
            Err(e) if e == rustix::io::Errno::INVAL => {
                let mut at = start;
                while at < end.min(self.len) {
                    // SAFETY: `at` lies in the mapping (below `self.len`); a volatile read of
                    // one mapped byte, no reference made.
                    unsafe { std::ptr::read_volatile(self.ptr.add(at)) };
                    at += PAGE;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Opens and maps an existing file at exactly `addr` (page-aligned), or fails: never
    /// elsewhere, and never over another mapping (`MAP_FIXED_NOREPLACE`). Pointers stored in
    /// the file stay valid across processes that map it so. A range already in use is an error
    /// that names it and what holds it.
    pub fn open_at(path: &Path, addr: usize) -> Result<MappedFile, MapError> {
        let (file, len) = open_existing(path)?;
        let len = mappable_len(path, len)?;
        if !addr.is_multiple_of(rustix::param::page_size()) || addr == 0 || addr.checked_add(len).is_none() {
            return Err(err(path, "map at a fixed address")(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{addr:#x} is not a page-aligned address with room for {len} bytes"),
            )));
        }
        // SAFETY: MAP_FIXED_NOREPLACE maps at `addr` only where nothing is mapped: it replaces
        // and aliases nothing in this process (the kernel answers EEXIST instead).
        let p = unsafe {
            rustix::mm::mmap(
                addr as *mut std::ffi::c_void,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::FIXED_NOREPLACE | MapFlags::POPULATE,
                file.as_fd(),
                0,
            )
        };
        let p = match p {
            Ok(p) if p as usize == addr => p,
            Ok(p) => {
                // A kernel without MAP_FIXED_NOREPLACE treats the address as a hint.
                // SAFETY: the mapping just made, unused.
                let _ = unsafe { rustix::mm::munmap(p, len) };
                return Err(err(path, "map at a fixed address")(io::Error::other(format!(
                    "the kernel mapped it at {:#x} instead of {addr:#x} (no MAP_FIXED_NOREPLACE: Linux 4.17 or later)",
                    p as usize
                ))));
            }
            Err(e) if e == rustix::io::Errno::EXIST => {
                return Err(err(path, "map at a fixed address")(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{addr:#x}..{:#x} is taken in this process{}: map it before anything else \
                         takes the range (and with address space layout randomisation off)",
                        addr + len,
                        holder(addr, len).map_or(String::new(), |h| format!(" (by {h})"))
                    ),
                )))
            }
            Err(e) => return Err(err(path, "map at a fixed address")(e.into())),
        };
        let persistence = page_cache_persistence(&file, path)?;
        Ok(MappedFile { ptr: p.cast(), len, persistence, nvmm: None, path: path.to_path_buf(), _file: file })
    }

    fn map(file: File, path: &Path, len: u64) -> Result<MappedFile, MapError> {
        Self::map_with(file, path, len, MapFlags::POPULATE)
    }

    /// Maps `file`; `populate` is `MapFlags::POPULATE` or empty.
    fn map_with(file: File, path: &Path, len: u64, populate: MapFlags) -> Result<MappedFile, MapError> {
        let len = mappable_len(path, len)?;
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a fresh mapping at an address of the kernel's choosing (null hint, no
        // MAP_FIXED) replaces and aliases nothing in this process; MAP_SHARED_VALIDATE makes
        // the kernel refuse MAP_SYNC where it is not supported.
        let dax = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC | populate,
                file.as_fd(),
                0,
            )
        };
        let (ptr, persistence) = match dax {
            Ok(p) => (p, Persistence::Dax),
            Err(_) => {
                // SAFETY: a fresh mapping at an address of the kernel's choosing, as above.
                let p = unsafe {
                    rustix::mm::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        MapFlags::SHARED | populate,
                        file.as_fd(),
                        0,
                    )
                }
                .map_err(|e| err(path, "map")(e.into()))?;
                (p, page_cache_persistence(&file, path)?)
            }
        };
        Ok(MappedFile {
            ptr: ptr.cast(),
            len,
            persistence,
            nvmm: None,
            path: path.to_path_buf(),
            _file: file,
        })
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

    /// Charges every later persist of memory or DAX bytes to `nvmm` (none: stop charging).
    /// A mapping of an ordinary file pays `msync` instead, and is never charged.
    pub fn emulate_nvmm(&mut self, nvmm: Option<Arc<Nvmm>>) {
        self.nvmm = nvmm;
    }

    /// The emulated NVMM this mapping's persists are charged to, if any.
    pub fn nvmm(&self) -> Option<&Arc<Nvmm>> {
        self.nvmm.as_ref()
    }

    /// After a barrier over `len` bytes: the emulated NVMM's delay, if there is one (one
    /// untaken branch otherwise).
    #[inline]
    fn charge(&self, len: usize) {
        if let Some(n) = &self.nvmm {
            if len > 0 {
                n.charge(len);
            }
        }
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
        self.view(offset, out.len()).read(0, out)
    }

    /// Copies bytes into the mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: `[offset, offset + len)` lies in the mapping (checked above), which is
        // writable and lives as long as `self`; `data` is a Rust buffer, so it is not mapped
        // bytes this crate could have borrowed, and the two do not overlap. Raw copies, not
        // references: a concurrent store by another party leaves unspecified bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) }
    }

    /// Copies `src`, bytes of this or another mapping, into this mapping at `offset`. The
    /// ranges must not overlap (a bug otherwise: it panics).
    pub fn write_from(&self, offset: usize, src: MapSlice<'_>) {
        self.check(offset, src.len);
        let dst = self.ptr.wrapping_add(offset) as usize;
        let from = src.ptr.as_ptr() as usize;
        assert!(
            dst + src.len <= from || from + src.len <= dst,
            "copy of {} bytes within {} onto itself",
            src.len,
            self.path.display()
        );
        // SAFETY: the destination lies in this mapping (checked above) and the source in a
        // live mapping (`src` borrows its owner); both are valid for `src.len` bytes and do not
        // overlap (asserted). Raw copies, no references.
        unsafe { std::ptr::copy_nonoverlapping(src.ptr.as_ptr(), self.ptr.add(offset), src.len) }
    }

    /// Receives exactly `len` bytes from `src` straight into the mapping at `offset`.
    ///
    /// `src.read` gets a `&mut [u8]` over those bytes for the duration of the call: the caller
    /// must be the only party touching them meanwhile (a lane receives only past its log's
    /// head, where no reader looks). This crate makes no other reference to them: every other
    /// access is a raw copy or a [`MapSlice`].
    pub fn recv_at(&self, offset: usize, len: usize, src: &mut (impl Read + ?Sized)) -> io::Result<()> {
        self.check(offset, len);
        // SAFETY: `[offset, offset + len)` lies in the mapping (checked above), which is
        // writable, initialised (mapped file bytes) and lives past this call. No reference to
        // these bytes exists outside this call: the crate hands out none (views are raw
        // pointers, and the slices made inside other calls live only during those calls over
        // bytes the caller is not receiving into). The slice is dropped before returning.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(offset), len) };
        src.read_exact(buf)
    }

    /// A view of bytes of the mapping, for sending them without a copy or reading them in
    /// place (see [`MapSlice`]).
    pub fn view(&self, offset: usize, len: usize) -> MapSlice<'_> {
        self.check(offset, len);
        MapSlice {
            // SAFETY: `offset <= self.len` (checked above), so the sum stays within (or one
            // past the end of) the mapping, and `ptr` is non-null.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.add(offset)) },
            len,
            _map: PhantomData,
        }
    }

    /// An 8-byte counter inside the mapping, for fields updated in place (log tail, applied
    /// sequence number).
    pub fn counter(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8);
        assert_eq!(offset % 8, 0, "counter at unaligned offset {offset}");
        // SAFETY: in bounds, 8-byte aligned (the mapping is page-aligned), lives as long as
        // `self`; AtomicU64 has the size and alignment of u64 and every bit pattern is valid.
        // An atomic is made for memory that others store into; this crate makes no non-atomic
        // reference to these bytes (its other accesses are raw copies).
        unsafe { &*(self.ptr.add(offset) as *const AtomicU64) }
    }

    /// A 4-byte word inside the mapping, for flags and futex words shared with another
    /// process that maps the same file.
    pub fn word(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4);
        assert_eq!(offset % 4, 0, "word at unaligned offset {offset}");
        // SAFETY: in bounds, 4-byte aligned (the mapping is page-aligned), lives as long as
        // `self`; AtomicU32 has the size and alignment of u32 and every bit pattern is valid.
        // As for `counter`: this crate makes no non-atomic reference to these bytes.
        unsafe { &*(self.ptr.add(offset) as *const AtomicU32) }
    }

    /// Makes `[offset, offset + len)` persistent according to [`MappedFile::persistence`].
    pub fn persist(&self, offset: usize, len: usize) -> io::Result<()> {
        self.check(offset, len);
        match self.persistence {
            Persistence::Dax | Persistence::Memory => {
                // SAFETY: `[offset, offset + len)` lies in the mapping (checked above), which
                // stays mapped for the call.
                unsafe { persist_cache_lines(self.ptr.add(offset), len) };
                self.charge(len);
                Ok(())
            }
            Persistence::File => {
                let start = offset & !(PAGE - 1);
                let end = (offset + len).next_multiple_of(PAGE).min(self.len);
                // SAFETY: `[start, end)` lies within the mapping (`start <= offset`, `end` is
                // capped at its length) and `start` is page-aligned, as msync requires; msync
                // writes pages back and does not change memory.
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
                // SAFETY: `[offset, offset + data.len())` lies in the mapping (checked above),
                // which is writable and stays mapped for the call; `data` is a Rust buffer,
                // not mapped bytes, so the two do not overlap.
                unsafe { copy_persistent(self.ptr.add(offset), data) };
                self.charge(data.len());
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

/// A view of `len` bytes of a mapping: a pointer and a length, borrowed from the mapping's
/// owner for `'a`, never a Rust reference.
///
/// Other threads and processes may store into these bytes while the view is held, so it gives
/// no `&[u8]`: bytes are copied out ([`MapSlice::read`]), checksummed in place
/// ([`MapSlice::crc32c`]), copied into a mapping ([`MappedFile::write_from`]), or handed to a
/// vectored write ([`MapSlice::io_slice`]).
#[derive(Clone, Copy)]
pub struct MapSlice<'a> {
    /// Valid for reads and writes of `len` bytes for `'a`, or dangling when `len` is 0.
    ptr: NonNull<u8>,
    len: usize,
    _map: PhantomData<&'a MappedFile>,
}

// SAFETY: a `MapSlice` is a pointer into a mapping that lives for `'a` (or an empty dangling
// one); it reaches the bytes only through raw copies and per-call slices, so moving it to, or
// sharing it with, another thread is the same as sharing `&MappedFile` (which is `Sync`).
unsafe impl Send for MapSlice<'_> {}
// SAFETY: as above.
unsafe impl Sync for MapSlice<'_> {}

impl fmt::Debug for MapSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MapSlice({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl<'a> MapSlice<'a> {
    /// A view of `len` bytes at `ptr`, which the owner `'a` keeps valid for reads and writes.
    pub(crate) fn from_parts(ptr: NonNull<u8>, len: usize, map: PhantomData<&'a MappedFile>) -> MapSlice<'a> {
        MapSlice { ptr, len, _map: map }
    }

    /// A view of no bytes.
    pub fn empty() -> MapSlice<'static> {
        MapSlice { ptr: NonNull::dangling(), len: 0, _map: PhantomData }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, at: usize, len: usize) {
        assert!(
            at.checked_add(len).is_some_and(|e| e <= self.len),
            "access at {at} len {len} outside a view of {} bytes",
            self.len
        );
    }

    /// The view of `len` bytes at `at` of this one.
    pub fn slice(self, at: usize, len: usize) -> MapSlice<'a> {
        self.check(at, len);
        // `wrapping_add` stays in bounds (checked above): no unsafe needed to offset.
        let ptr = NonNull::new(self.ptr.as_ptr().wrapping_add(at)).expect("an offset view is not null");
        MapSlice { ptr, len, _map: PhantomData }
    }

    /// Copies bytes at `at` of the view into `out`.
    pub fn read(self, at: usize, out: &mut [u8]) {
        self.check(at, out.len());
        // SAFETY: `[at, at + out.len())` lies in the view (checked above), which is valid for
        // reads for `'a`; `out` is a Rust buffer the caller holds `&mut`, so it cannot be
        // mapped bytes this crate lent out, and the two do not overlap. A raw copy, not a
        // reference: concurrent stores leave unspecified bytes in `out`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), out.as_mut_ptr(), out.len()) }
    }

    /// The bytes, copied out (for checks and tools, not the hot path).
    pub fn to_vec(self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.read(0, &mut v);
        v
    }

    /// The CRC32C of the bytes as they are read now, computed in place.
    pub fn crc32c(self) -> u32 {
        crc32c(self.transient())
    }

    /// Runs `f` over the bytes as they are read now, in place: for one MAC, which a byte
    /// changed meanwhile fails as it fails a checksum. `f` cannot keep the slice.
    pub fn with_bytes<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.transient())
    }

    /// The bytes for one vectored write: the kernel (or the transport) reads them while
    /// sending. The `IoSlice` dereferences to `&[u8]`; read that way, bytes may change under
    /// the reader (it is for handing to a write, not for inspecting).
    pub fn io_slice(self) -> IoSlice<'a> {
        IoSlice::new(self.transient())
    }

    /// `pwrite`s the bytes to `file` at `offset`, straight from the mapping.
    pub fn write_all_at(self, file: &File, offset: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        file.write_all_at(self.transient(), offset)
    }

    /// A shared slice over the view, for one checksum or MAC, one `pwrite` or one vectored write.
    fn transient(self) -> &'a [u8] {
        // SAFETY: the view is valid for reads of `len` initialised bytes (mapped file bytes)
        // for `'a`, or is empty and dangling (which a zero-length slice allows), and `len` is
        // at most the mapping's length, below `isize::MAX`. The slice serves one checksum or MAC
        // (`with_bytes`), one `pwrite`, or one vectored write (`io_slice`), and is not kept. The only `&mut` this
        // crate makes over mapped bytes is the one `recv_at` lends a reader for one receive,
        // and receives and views are kept apart by where they are: a lane receives past its
        // log's head, views are of records before it or of a data area, which nothing receives
        // into. Stores by other threads or processes through raw pointers, which a shared
        // mapping cannot exclude, change only the bytes read: a checksum then fails, a send
        // carries either value.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// A log's record area, as the record parser reads it: headers copied out, bodies checksummed
/// in place and given as views.
impl<'a> RecordArea for MapSlice<'a> {
    type Body<'b>
        = MapSlice<'a>
    where
        Self: 'b;

    fn area_len(&self) -> usize {
        self.len
    }

    fn header_at(&self, at: usize) -> [u8; FRAME_HEADER_SIZE] {
        let mut h = [0u8; FRAME_HEADER_SIZE];
        self.read(at, &mut h);
        h
    }

    fn checksum(&self, at: usize, len: usize) -> u32 {
        self.slice(at, len).crc32c()
    }

    fn body(&self, at: usize, len: usize) -> MapSlice<'a> {
        self.slice(at, len)
    }

    fn copy_out(&self, at: usize, out: &mut [u8]) {
        self.read(at, out)
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; every view (`MapSlice`,
        // counters) borrows `self`, so none outlives this drop.
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

    /// An address with `len` free bytes in this process: where the kernel put a mapping it
    /// has just taken back.
    fn free_address(len: usize) -> usize {
        // SAFETY: a fresh anonymous mapping, unmapped at once; only its address is kept.
        unsafe {
            let p = rustix::mm::mmap_anonymous(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::PRIVATE)
                .expect("mmap");
            rustix::mm::munmap(p, len).expect("munmap");
            p as usize
        }
    }

    /// A file mapped at a fixed address is there, and there again when mapped anew: the same
    /// bytes at the same addresses.
    #[test]
    fn open_at_maps_at_exactly_the_address() {
        let p = tmp("at");
        drop(MappedFile::create(&p, 3 * 4096).unwrap());
        let addr = free_address(3 * 4096);
        let m = MappedFile::open_at(&p, addr).unwrap();
        assert_eq!(m.ptr as usize, addr);
        m.write(4096, b"same place");
        drop(m);
        let m = MappedFile::open_at(&p, addr).unwrap();
        assert_eq!(m.ptr as usize, addr);
        let mut b = [0u8; 10];
        m.read(4096, &mut b);
        assert_eq!(&b, b"same place");
        drop(m);
        std::fs::remove_file(&p).unwrap();
    }

    /// An address range in use is refused, naming it and what holds it; nothing is mapped
    /// over it. An unaligned address is refused too.
    #[test]
    fn open_at_refuses_a_taken_or_unaligned_address() {
        let p = tmp("taken");
        drop(MappedFile::create(&p, 2 * 4096).unwrap());
        // SAFETY: a fresh anonymous mapping this test owns, unmapped at its end.
        let other = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                4096,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap();
        // SAFETY: inside the test's own mapping.
        unsafe { other.cast::<u8>().write(7) };
        // The file's second page would land on `other`.
        let e = MappedFile::open_at(&p, other as usize - 4096).err().expect("refused");
        assert_eq!(e.source.kind(), io::ErrorKind::AddrInUse, "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("{:#x}", other as usize - 4096)) && msg.contains("is taken"), "{msg}");
        // SAFETY: still the test's mapping, untouched by the refused call.
        assert_eq!(unsafe { other.cast::<u8>().read() }, 7);
        let e = MappedFile::open_at(&p, 4097).err().expect("refused");
        assert_eq!(e.source.kind(), io::ErrorKind::InvalidInput, "{e}");
        // SAFETY: the test's mapping, unused after this.
        unsafe { rustix::mm::munmap(other, 4096).unwrap() };
        std::fs::remove_file(&p).unwrap();
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
    fn views_copy_checksum_and_receive() {
        let (pa, pb) = (tmp("va"), tmp("vb"));
        let a = MappedFile::create(&pa, 4096).unwrap();
        let b = MappedFile::create(&pb, 4096).unwrap();
        a.recv_at(10, 5, &mut &b"hello"[..]).unwrap();
        let v = a.view(10, 5);
        assert_eq!((v.len(), v.to_vec()), (5, b"hello".to_vec()));
        assert_eq!(v.crc32c(), crc32c(b"hello"));
        assert_eq!(&*v.slice(1, 3).io_slice(), b"ell");
        b.write_from(100, v);
        let mut out = [0u8; 5];
        b.read(100, &mut out);
        assert_eq!(&out, b"hello");
        assert!(MapSlice::empty().is_empty());
        let whole = a.view(0, 4096);
        assert!(std::panic::catch_unwind(|| whole.slice(4090, 7)).is_err(), "a view is bounded");
        assert!(
            std::panic::catch_unwind(|| a.write_from(12, a.view(10, 5))).is_err(),
            "an overlapping copy is refused"
        );
        std::fs::remove_file(&pa).unwrap();
        std::fs::remove_file(&pb).unwrap();
    }

    #[test]
    #[should_panic(expected = "outside mapping")]
    fn out_of_bounds_panics() {
        let p = tmp("b");
        let m = MappedFile::create(&p, 4096).unwrap();
        let _ = std::fs::remove_file(&p);
        m.write(4095, b"ab");
    }

    /// Bytes of the mapping at `addr` that have page-table entries (its `Rss` in smaps).
    fn mapped_bytes(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&format!("{addr:x}-")));
        assert!(lines.next().is_some(), "no mapping at {addr:#x} in smaps");
        let rss = lines.find(|l| l.starts_with("Rss:")).expect("an Rss line");
        let kb: u64 = rss.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("Rss in kB");
        kb * 1024
    }

    /// A file created, or opened unpopulated, has no page mapped until it is touched or populated, and
    /// populating maps at least the pages asked for (widened to whole pages; the kernel may map
    /// neighbours along, as a fault does), changing no byte.
    #[test]
    fn an_unpopulated_mapping_maps_pages_only_when_populated() {
        let p = tmp("lazy");
        let len = 64 * PAGE;
        let m = MappedFile::create(&p, len as u64).unwrap();
        assert_eq!(mapped_bytes(m.ptr as usize), 0, "a new file's pages are not mapped before a touch");
        m.write(5 * PAGE + 7, b"kept");
        drop(m);
        let m = MappedFile::open(&p).unwrap();
        assert_eq!(mapped_bytes(m.ptr as usize), len as u64, "open maps every page");
        drop(m);
        let m = MappedFile::open_unpopulated(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(mapped_bytes(m.ptr as usize), 0, "nothing mapped before it is asked for");
        m.populate(PAGE + 1, 2 * PAGE).unwrap();
        assert!(mapped_bytes(m.ptr as usize) >= 3 * PAGE as u64, "pages 1 to 3");
        m.populate(0, len).unwrap();
        assert_eq!(mapped_bytes(m.ptr as usize), len as u64);
        let mut b = [0u8; 4];
        m.read(5 * PAGE + 7, &mut b);
        assert_eq!(&b, b"kept");
        m.populate(len, 0).unwrap();
    }

    #[test]
    #[should_panic(expected = "outside mapping")]
    fn populating_past_the_end_is_a_bug() {
        let p = tmp("lazy-end");
        let m = MappedFile::create(&p, PAGE as u64).unwrap();
        let _ = std::fs::remove_file(&p);
        let _ = m.populate(1, PAGE);
    }
}
