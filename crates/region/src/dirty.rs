//! The dirty map: which fixed-size chunks of a region changed while the primary ran without its
//! mirror, kept in a mapped file so that it outlives the process (and, on DAX, the machine).

use crate::map::{err, MapError, MappedFile};
use crate::words::{zeroed, Words};
use mojim_format::checksum::crc32c;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(not(target_endian = "little"))]
compile_error!("the dirty map and metadata ring store little-endian words through native atomics");

pub const DIRTY_MAGIC: [u8; 8] = *b"MOJIMDRT";
pub const DIRTY_VERSION: u32 = 1;
/// The header page; the bitmap starts right after it.
pub const DIRTY_HEADER_SIZE: usize = 4096;
/// Byte offset of `base_generation` in the header page.
pub const BASE_GENERATION_OFFSET: usize = 64;
/// Byte offset of `base_seq` in the header page.
pub const BASE_SEQ_OFFSET: usize = 72;
/// The smallest chunk: one page.
pub const MIN_CHUNK_SIZE: u64 = 4096;

/// The static header fields end here; the CRC covers `[16, STATIC_END)`.
pub(crate) const STATIC_END: usize = 64;
const _: () = assert!(BASE_GENERATION_OFFSET >= STATIC_END && BASE_SEQ_OFFSET + 8 <= 128);
const _: () = assert!(DIRTY_HEADER_SIZE.is_multiple_of(64), "the bitmap starts on a cache line");

/// A persistent bitmap of a region's chunks.
///
/// When the mirror comes back, the primary sends it only the dirty chunks instead of the whole
/// region. The map records the point the mirror had reached when recording began (its
/// generation id and applied sequence number, the *base*): the dirty chunks bring a copy that
/// is exactly at the base up to date, and no other copy.
///
/// File layout (all fields little-endian):
/// ```text
/// off  len  field
///   0    8  magic            "MOJIMDRT"
///   8    4  version          DIRTY_VERSION (1)
///  12    4  header_checksum  CRC32C of bytes 16..64
///  16   16  region_uuid      the region whose chunks are tracked
///  32    8  region_size      bytes in the region's data area
///  40    8  chunk_size       bytes per chunk: a power of two, at least 4096
///  48   16  reserved         0
///  64    8  base_generation  generation id of the copy the bits are relative to; 0: not
///                            recording (updated in place)
///  72    8  base_seq         applied sequence number of that copy (updated in place)
///  80 4016  reserved         0
/// 4096  8×W bitmap           W = ceil(chunks / 64) words; chunk c is bit c % 64 of word c / 64
/// ```
/// where `chunks = ceil(region_size / chunk_size)`; the last chunk may be shorter than
/// `chunk_size`. Bits past the last chunk are 0. The file is exactly `4096 + 8 × W` bytes.
///
/// # Crash safety
///
/// The caller marks a range *before* it stores into the region, and `mark` returns only once
/// the bits are persistent, so every change that reached the region's media has its chunk
/// marked. A crash can leave:
/// - *during `mark`*: some of the range's bits set and persistent, others not. Their data
///   stores had not begun (they follow `mark`), so no changed chunk is unmarked. A set bit
///   whose write never happened costs one chunk of needless copying: harmless.
/// - *during `begin`*: `base_generation` is written last, after the cleared bitmap and
///   `base_seq` are persistent; before that it is 0, so the map reads as "not recording" and
///   the caller falls back to a full copy.
/// - *during `clear`*: `base_generation` is set to 0 (and persisted) first, then the bits are
///   cleared. A crash after the first step leaves "not recording" with some stale bits, which
///   nothing reads: the bits are meaningful only while [`DirtyMap::base`] is `Some`. A crash
///   before it leaves the old state, still whole.
///
/// The base is trusted only when `base_generation` is non-zero; 0 is never a generation id.
///
/// # Concurrency
///
/// [`DirtyMap::mark`] is lock-free and may run on any number of threads: it sets bits with
/// `fetch_or` on the mapped words. `begin` and `clear` must not run concurrently with `mark`
/// (a mark racing a clear may be lost); the caller arranges that.
///
/// A thread that finds its bits already set in the file cannot tell whether the thread that
/// set them has persisted them yet, and must not return before they are. So a second,
/// in-memory bitmap holds the bits *known* persistent: `mark` returns at once (loads only, no
/// store, no flush, no syscall) when they are all there, and otherwise sets the file's bits,
/// persists the words, and then records them as known persistent. The in-memory bitmap costs
/// as much memory as the file's, allocated once at open.
///
/// After a persist fails, the map refuses `mark`s that would need another persist, and
/// `begin` and `clear`, until it is reopened: a failed flush is never retried.
pub struct DirtyMap<W: Words = MappedFile> {
    map: W,
    region_uuid: [u8; 16],
    region_size: u64,
    chunk_shift: u32,
    chunks: u64,
    /// Bits known to be persistent in the file: a subset of the file's bits.
    known_durable: Box<[AtomicU64]>,
    /// A persist failed; refuse work that needs another until reopened.
    failed: AtomicBool,
}

impl DirtyMap<MappedFile> {
    /// Opens the dirty map at `path`, or creates an empty one (not recording) if there is no
    /// file there. An existing file must have been made for the same region and chunk size.
    ///
    /// `chunk_size` must be a power of two of at least 4096 and `region_size` non-zero.
    pub fn open_or_create(
        path: &Path,
        region_uuid: [u8; 16],
        region_size: u64,
        chunk_size: u64,
    ) -> Result<DirtyMap, MapError> {
        if !chunk_size.is_power_of_two() || chunk_size < MIN_CHUNK_SIZE {
            return Err(misuse(
                path,
                format!("chunk size {chunk_size} is not a power of two of at least {MIN_CHUNK_SIZE}"),
            ));
        }
        if region_size == 0 {
            return Err(misuse(path, "region size 0: there is nothing to track".to_string()));
        }
        let chunks = region_size.div_ceil(chunk_size);
        let words = chunks.div_ceil(64);
        let len = DIRTY_HEADER_SIZE as u64 + words * 8;
        if !path.exists() {
            let mut page = [0u8; STATIC_END];
            page[16..32].copy_from_slice(&region_uuid);
            page[32..40].copy_from_slice(&region_size.to_le_bytes());
            page[40..48].copy_from_slice(&chunk_size.to_le_bytes());
            create_whole(path, len, DIRTY_MAGIC, DIRTY_VERSION, &mut page)?;
        }
        let map = open_checked(path, DIRTY_MAGIC, DIRTY_VERSION, "dirty map")?;
        let mut page = [0u8; STATIC_END];
        map.read(0, &mut page);
        let page = &page;
        let found_uuid: [u8; 16] = page[16..32].try_into().expect("16 bytes");
        let found_size = le64(page, 32);
        let found_chunk = le64(page, 40);
        let mut wrong = Vec::new();
        if found_uuid != region_uuid {
            wrong.push(format!("region uuid {} (expected {})", hex(&found_uuid), hex(&region_uuid)));
        }
        if found_size != region_size {
            wrong.push(format!("region size {found_size} (expected {region_size})"));
        }
        if found_chunk != chunk_size {
            wrong.push(format!("chunk size {found_chunk} (expected {chunk_size})"));
        }
        if !wrong.is_empty() {
            return Err(corrupt(
                path,
                format!(
                    "dirty map belongs elsewhere: it has {}; remove it to start over with a full copy",
                    wrong.join(", ")
                ),
            ));
        }
        if map.len() as u64 != len {
            return Err(corrupt(
                path,
                format!("file is {} bytes but a map of {chunks} chunks is {len}", map.len()),
            ));
        }
        // Bits a crashed process set may still sit unwritten in the page cache: persist them
        // all once, so that every bit in the file is known persistent from here on.
        map.persist(0, map.len()).map_err(err(path, "persist"))?;
        Ok(DirtyMap::over(map, region_uuid, region_size, chunk_size))
    }

    pub fn path(&self) -> &Path {
        self.map.path()
    }
}

impl DirtyMap<Box<[AtomicU64]>> {
    /// An empty map (not recording) of `region_size` bytes in `chunk_size` chunks, in memory
    /// (see [`crate::words`]), laid out as the file is.
    ///
    /// # Panics
    /// If `chunk_size` is not a power of two of at least [`MIN_CHUNK_SIZE`], or `region_size`
    /// is 0.
    pub fn in_memory(region_uuid: [u8; 16], region_size: u64, chunk_size: u64) -> DirtyMap<Box<[AtomicU64]>> {
        assert!(chunk_size.is_power_of_two() && chunk_size >= MIN_CHUNK_SIZE, "chunk size {chunk_size}");
        assert_ne!(region_size, 0, "region size 0");
        let words = region_size.div_ceil(chunk_size).div_ceil(64) as usize;
        DirtyMap::over(zeroed(DIRTY_HEADER_SIZE + words * 8), region_uuid, region_size, chunk_size)
    }
}

impl<W: Words> DirtyMap<W> {
    /// The map laid out in `map` (checked by the caller), every bit in it known persistent.
    fn over(map: W, region_uuid: [u8; 16], region_size: u64, chunk_size: u64) -> DirtyMap<W> {
        let chunks = region_size.div_ceil(chunk_size);
        let known_durable = (0..chunks.div_ceil(64) as usize)
            .map(|w| AtomicU64::new(map.word(DIRTY_HEADER_SIZE + w * 8).load(Ordering::Acquire)))
            .collect();
        DirtyMap {
            map,
            region_uuid,
            region_size,
            chunk_shift: chunk_size.trailing_zeros(),
            chunks,
            known_durable,
            failed: AtomicBool::new(false),
        }
    }

    pub fn region_uuid(&self) -> [u8; 16] {
        self.region_uuid
    }

    /// Bytes in the tracked region.
    pub fn region_size(&self) -> u64 {
        self.region_size
    }

    pub fn chunk_size(&self) -> u64 {
        1 << self.chunk_shift
    }

    /// Chunks in the region; the last may be shorter than [`DirtyMap::chunk_size`].
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The byte range `(offset, len)` of `chunk` in the region.
    pub fn chunk_span(&self, chunk: u64) -> (u64, u64) {
        assert!(chunk < self.chunks, "chunk {chunk} outside a map of {} chunks", self.chunks);
        let offset = chunk << self.chunk_shift;
        (offset, self.chunk_size().min(self.region_size - offset))
    }

    fn word(&self, w: usize) -> &AtomicU64 {
        self.map.word(DIRTY_HEADER_SIZE + w * 8)
    }

    fn load(&self, at: usize) -> u64 {
        self.map.word(at).load(Ordering::Acquire)
    }

    fn store(&self, at: usize, v: u64) {
        self.map.word(at).store(v, Ordering::Release)
    }

    fn words(&self) -> usize {
        self.known_durable.len()
    }

    fn refuse_if_failed(&self) -> io::Result<()> {
        if self.failed.load(Ordering::Acquire) {
            return Err(io::Error::other(format!(
                "dirty map {}: an earlier persist failed; reopen it",
                self.map.place().display()
            )));
        }
        Ok(())
    }

    fn persist(&self, offset: usize, len: usize) -> io::Result<()> {
        self.map.persist(offset, len).inspect_err(|_| self.failed.store(true, Ordering::Release))
    }

    /// Marks every chunk that `[offset, offset + len)` touches as dirty, persistently, before
    /// the caller stores into that range. A zero-length range touches no chunk.
    ///
    /// Lock-free; allocates nothing; when the chunks are already marked it only loads.
    pub fn mark(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.region_size),
            "mark at {offset} len {len} outside a region of {} bytes",
            self.region_size
        );
        let first = offset >> self.chunk_shift;
        let last = (offset + len - 1) >> self.chunk_shift;
        let (w0, w1) = ((first / 64) as usize, (last / 64) as usize);
        let mask = |w: usize| {
            let lo = if w == w0 { first % 64 } else { 0 };
            let hi = if w == w1 { last % 64 } else { 63 };
            (u64::MAX >> (63 - hi)) & (u64::MAX << lo)
        };
        let mut unknown: Option<(usize, usize)> = None;
        for w in w0..=w1 {
            let m = mask(w);
            if self.known_durable[w].load(Ordering::Acquire) & m == m {
                continue;
            }
            // Set the bits even if they look set: another thread may be setting them, and
            // `fetch_or` is the one store that cannot undo its work.
            self.word(w).fetch_or(m, Ordering::AcqRel);
            unknown = Some(unknown.map_or((w, w), |(a, _)| (a, w)));
        }
        let Some((a, b)) = unknown else { return Ok(()) };
        self.refuse_if_failed()?;
        self.persist(DIRTY_HEADER_SIZE + a * 8, (b - a + 1) * 8)?;
        for w in a..=b {
            self.known_durable[w].fetch_or(mask(w), Ordering::Release);
        }
        Ok(())
    }

    /// Whether `chunk` is marked.
    pub fn is_dirty(&self, chunk: u64) -> bool {
        assert!(chunk < self.chunks, "chunk {chunk} outside a map of {} chunks", self.chunks);
        self.word((chunk / 64) as usize).load(Ordering::Acquire) & (1 << (chunk % 64)) != 0
    }

    /// How many chunks are marked.
    pub fn dirty_count(&self) -> u64 {
        (0..self.words()).map(|w| self.word(w).load(Ordering::Acquire).count_ones() as u64).sum()
    }

    /// The marked chunks' indices, in increasing order.
    pub fn dirty_chunks(&self) -> impl Iterator<Item = u64> + '_ {
        let chunks = self.chunks;
        (0..self.words())
            .flat_map(move |w| {
                let mut bits = self.word(w).load(Ordering::Acquire);
                std::iter::from_fn(move || {
                    if bits == 0 {
                        return None;
                    }
                    let b = bits.trailing_zeros() as u64;
                    bits &= bits - 1;
                    Some(w as u64 * 64 + b)
                })
            })
            .take_while(move |&c| c < chunks)
    }

    /// Bytes in the marked chunks (the last chunk counts only its bytes inside the region).
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_chunks().map(|c| self.chunk_span(c).1).sum()
    }

    /// The generation id and applied sequence number the mirror's copy had when recording
    /// began, or `None` when the map is not recording.
    pub fn base(&self) -> Option<(u64, u64)> {
        match self.load(BASE_GENERATION_OFFSET) {
            0 => None,
            generation => Some((generation, self.load(BASE_SEQ_OFFSET))),
        }
    }

    /// Starts recording changes relative to a copy at `base_generation` (non-zero) and
    /// `base_seq`: clears every bit and persists the base. No `mark` may run meanwhile.
    pub fn begin(&self, base_generation: u64, base_seq: u64) -> io::Result<()> {
        assert_ne!(base_generation, 0, "0 is not a generation id");
        self.refuse_if_failed()?;
        self.stop_and_clear_bits()?;
        self.store(BASE_SEQ_OFFSET, base_seq);
        self.persist(BASE_SEQ_OFFSET, 8)?;
        self.store(BASE_GENERATION_OFFSET, base_generation);
        self.persist(BASE_GENERATION_OFFSET, 8)
    }

    /// Stops recording: the base and every bit become 0, persistently. No `mark` may run
    /// meanwhile.
    pub fn clear(&self) -> io::Result<()> {
        self.refuse_if_failed()?;
        self.stop_and_clear_bits()?;
        self.store(BASE_SEQ_OFFSET, 0);
        self.persist(BASE_SEQ_OFFSET, 8)
    }

    /// Sets `base_generation` to 0 (persisted), then every bit (persisted).
    fn stop_and_clear_bits(&self) -> io::Result<()> {
        self.store(BASE_GENERATION_OFFSET, 0);
        self.persist(BASE_GENERATION_OFFSET, 8)?;
        let mut any = false;
        for w in 0..self.words() {
            self.known_durable[w].store(0, Ordering::Release);
            if self.word(w).load(Ordering::Acquire) != 0 {
                self.word(w).store(0, Ordering::Release);
                any = true;
            }
        }
        if any {
            self.persist(DIRTY_HEADER_SIZE, self.words() * 8)?;
        }
        Ok(())
    }
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file's contents cannot be used (wrong format, another region's, damaged).
pub(crate) fn corrupt(path: &Path, what: String) -> MapError {
    MapError {
        path: path.to_path_buf(),
        op: "validate",
        source: io::Error::new(io::ErrorKind::InvalidData, what),
    }
}

/// The caller asked for something that cannot be made.
pub(crate) fn misuse(path: &Path, what: String) -> MapError {
    MapError {
        path: path.to_path_buf(),
        op: "create",
        source: io::Error::new(io::ErrorKind::InvalidInput, what),
    }
}

/// Creates a file of `len` zero bytes at `path` whose first 64 bytes are `page` with `magic`,
/// `version` and the CRC32C of bytes 16..64 filled in, so that the file appears whole or not
/// at all: it is made and persisted under `<path>.new`, then linked to `path`. If `path`
/// appeared meanwhile, that file is kept.
pub(crate) fn create_whole(
    path: &Path,
    len: u64,
    magic: [u8; 8],
    version: u32,
    page: &mut [u8; STATIC_END],
) -> Result<(), MapError> {
    page[0..8].copy_from_slice(&magic);
    page[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c(&page[16..STATIC_END]);
    page[12..16].copy_from_slice(&crc.to_le_bytes());
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let map = MappedFile::create(&tmp, len)?;
    map.write(0, page);
    let persisted = map.persist(0, STATIC_END);
    drop(map);
    let linked =
        persisted.map_err(err(&tmp, "persist")).and_then(|()| match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(err(path, "link")(e)),
            _ => Ok(()),
        });
    let _ = std::fs::remove_file(&tmp);
    linked?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(err(dir, "sync directory"))
}

/// Maps the file at `path` and checks its header page's length, magic, version and checksum.
pub(crate) fn open_checked(
    path: &Path,
    magic: [u8; 8],
    version: u32,
    what: &str,
) -> Result<MappedFile, MapError> {
    let map = MappedFile::open(path)?;
    if map.len() < 4096 {
        return Err(corrupt(path, format!("file is {} bytes, shorter than the {what} header", map.len())));
    }
    let mut page = [0u8; STATIC_END];
    map.read(0, &mut page);
    if page[0..8] != magic {
        return Err(corrupt(path, format!("not a Mojim {what} file (bad magic)")));
    }
    let found = u32::from_le_bytes(page[8..12].try_into().expect("4 bytes"));
    if found != version {
        return Err(corrupt(
            path,
            format!("{what} format version {found} is not supported (expected {version})"),
        ));
    }
    let stored = u32::from_le_bytes(page[12..16].try_into().expect("4 bytes"));
    let computed = crc32c(&page[16..STATIC_END]);
    if stored != computed {
        return Err(corrupt(
            path,
            format!("{what} header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    Ok(map)
}

/// A directory for one test's files, on memory when `/dev/shm` exists, removed on drop.
#[cfg(test)]
pub(crate) struct TestDir(pub std::path::PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new(name: &str) -> TestDir {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
        let d = base.join(format!("mojim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }

    pub(crate) fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: [u8; 16] = [7; 16];
    const CHUNK: u64 = 4096;

    fn dirty<W: Words>(m: &DirtyMap<W>) -> Vec<u64> {
        m.dirty_chunks().collect()
    }

    /// 10 whole chunks and a last one of 100 bytes.
    const EDGES_SIZE: u64 = 10 * CHUNK + 100;

    #[test]
    fn mark_edge_cases() {
        let dir = TestDir::new("dirty-edges");
        edge_cases(DirtyMap::open_or_create(&dir.file("d"), UUID, EDGES_SIZE, CHUNK).unwrap());
    }

    #[test]
    fn in_memory_marks_as_the_file_does() {
        let m = DirtyMap::in_memory(UUID, EDGES_SIZE, CHUNK);
        m.begin(9, 41).unwrap();
        m.mark(0, 1).unwrap();
        assert_eq!((m.base(), dirty(&m)), (Some((9, 41)), vec![0]));
        m.clear().unwrap();
        assert_eq!((m.base(), m.dirty_count()), (None, 0));
        edge_cases(m);
    }

    fn edge_cases<W: Words>(m: DirtyMap<W>) {
        let size = EDGES_SIZE;
        assert_eq!((m.chunks(), m.chunk_size(), m.dirty_count(), m.base()), (11, CHUNK, 0, None));

        m.mark(5 * CHUNK, 0).unwrap();
        assert_eq!(dirty(&m), Vec::<u64>::new(), "a zero-length range touches nothing");
        m.mark(size, 0).unwrap();
        assert_eq!(m.dirty_count(), 0, "zero length at the very end is fine too");

        m.mark(0, CHUNK).unwrap();
        assert_eq!(dirty(&m), [0], "a range ending exactly at a boundary stays in its chunk");
        m.mark(CHUNK, 2 * CHUNK).unwrap();
        assert_eq!(dirty(&m), [0, 1, 2]);
        m.mark(4 * CHUNK - 1, 2).unwrap();
        assert_eq!(dirty(&m), [0, 1, 2, 3, 4], "two bytes straddling a boundary touch both chunks");
        m.mark(size - 1, 1).unwrap();
        assert_eq!(dirty(&m), [0, 1, 2, 3, 4, 10]);
        assert!(m.is_dirty(10) && !m.is_dirty(9));
        assert_eq!(m.chunk_span(10), (10 * CHUNK, 100));
        assert_eq!(m.dirty_bytes(), 5 * CHUNK + 100, "the last chunk counts only its 100 bytes");

        m.mark(0, size).unwrap();
        assert_eq!(m.dirty_count(), 11);
        assert_eq!(m.dirty_bytes(), size, "the whole region");
    }

    #[test]
    fn marks_across_words() {
        let dir = TestDir::new("dirty-words");
        let m = DirtyMap::open_or_create(&dir.file("d"), UUID, 300 * CHUNK, CHUNK).unwrap();
        m.mark(60 * CHUNK + 1, 70 * CHUNK).unwrap();
        assert_eq!(dirty(&m), (60..=130).collect::<Vec<_>>());
        m.mark(299 * CHUNK, CHUNK).unwrap();
        assert_eq!(m.dirty_count(), 72);
        assert_eq!(dirty(&m).last(), Some(&299));
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn mark_past_the_end_panics() {
        let dir = TestDir::new("dirty-past");
        let m = DirtyMap::open_or_create(&dir.file("d"), UUID, 2 * CHUNK, CHUNK).unwrap();
        let _ = m.mark(CHUNK, CHUNK + 1);
    }

    #[test]
    fn survives_reopen_and_begin_clear() {
        let dir = TestDir::new("dirty-reopen");
        let p = dir.file("d");
        let m = DirtyMap::open_or_create(&p, UUID, 1 << 20, 1 << 16).unwrap();
        m.mark(3, 5).unwrap();
        m.begin(9, 41).unwrap();
        assert_eq!((m.base(), m.dirty_count()), (Some((9, 41)), 0), "begin clears the bits");
        m.mark((1 << 20) - 1, 1).unwrap();
        m.mark(1 << 16, 1).unwrap();
        drop(m);

        let m = DirtyMap::open_or_create(&p, UUID, 1 << 20, 1 << 16).unwrap();
        assert_eq!(m.base(), Some((9, 41)));
        assert_eq!(dirty(&m), [1, 15]);
        // Bits found at open are known persistent: marking them again only loads.
        m.mark(1 << 16, 10).unwrap();
        assert_eq!(m.known_durable[0].load(Ordering::Relaxed), (1 << 1) | (1 << 15));

        m.clear().unwrap();
        assert_eq!((m.base(), m.dirty_count()), (None, 0));
        drop(m);
        let m = DirtyMap::open_or_create(&p, UUID, 1 << 20, 1 << 16).unwrap();
        assert_eq!((m.base(), m.dirty_count(), m.map.load(BASE_SEQ_OFFSET)), (None, 0, 0));
        m.mark(0, 1).unwrap();
        assert_eq!(dirty(&m), [0], "marks after a clear are recorded again");
    }

    #[test]
    fn mismatched_reopen_names_both_values() {
        let dir = TestDir::new("dirty-mismatch");
        let p = dir.file("d");
        drop(DirtyMap::open_or_create(&p, UUID, 1 << 20, CHUNK).unwrap());
        let msg = |r: Result<DirtyMap, MapError>| r.err().expect("must fail").to_string();

        let e = msg(DirtyMap::open_or_create(&p, [8; 16], 1 << 20, CHUNK));
        assert!(e.contains(&hex(&[7; 16])) && e.contains(&hex(&[8; 16])), "{e}");
        let e = msg(DirtyMap::open_or_create(&p, UUID, 1 << 21, CHUNK));
        assert!(e.contains("region size 1048576 (expected 2097152)"), "{e}");
        let e = msg(DirtyMap::open_or_create(&p, UUID, 1 << 20, 2 * CHUNK));
        assert!(e.contains("chunk size 4096 (expected 8192)"), "{e}");

        for bad in [0, 1000, 2048, 3 * CHUNK] {
            let e = DirtyMap::open_or_create(&dir.file("x"), UUID, 1 << 20, bad).err().unwrap();
            assert_eq!(e.source.kind(), io::ErrorKind::InvalidInput, "chunk {bad}: {e}");
        }
        assert!(!dir.file("x").exists(), "no file is left behind by a refused create");
    }

    #[test]
    fn damaged_header_is_refused() {
        let dir = TestDir::new("dirty-damaged");
        let p = dir.file("d");
        drop(DirtyMap::open_or_create(&p, UUID, 1 << 20, CHUNK).unwrap());
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[33] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let e = DirtyMap::open_or_create(&p, UUID, 1 << 20, CHUNK).err().unwrap();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        assert!(!dir.file("d.new").exists());
    }

    #[test]
    fn concurrent_marks() {
        let dir = TestDir::new("dirty-threads");
        let p = dir.file("d");
        let m = DirtyMap::open_or_create(&p, UUID, 4096 * CHUNK, CHUNK).unwrap();
        m.begin(1, 0).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let m = &m;
                s.spawn(move || {
                    // Every thread marks every chunk whose index is 0 mod 3 or t mod 4, often
                    // the same words and bits as the others.
                    for c in 0..4096u64 {
                        if c % 3 == 0 || c % 4 == t {
                            m.mark(c * CHUNK + 17, 100).unwrap();
                        }
                    }
                });
            }
        });
        drop(m);
        let m = DirtyMap::open_or_create(&p, UUID, 4096 * CHUNK, CHUNK).unwrap();
        assert_eq!(m.dirty_count(), 4096);
    }
}
