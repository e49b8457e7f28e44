//! The primary's metadata ring (the Mojim paper's §4.3 metadata log): one small record per
//! range of each group, written *before* the group is sent, so that when the mirror comes back
//! the primary knows which ranges the mirror may lack and resends only those.

use crate::dirty::{corrupt, create_whole, hex, misuse, open_checked, STATIC_END};
use crate::map::{err, MapError, MappedFile};
use crate::words::{zeroed, Words};
use mojim_format::checksum::crc32c;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub const META_RING_MAGIC: [u8; 8] = *b"MOJIMMLG";
pub const META_RING_VERSION: u32 = 1;
/// The header page; records start right after it.
pub const META_RING_HEADER_SIZE: usize = 4096;
/// Bytes per record.
pub const META_RECORD_SIZE: usize = 32;
/// Byte offsets of the header's updatable fields.
pub const RUN_OFFSET: usize = 64;
pub const HEAD_OFFSET: usize = 72;
pub const FLOOR_OFFSET: usize = 80;
pub const BOOT_ID_OFFSET: usize = 88;
/// Every group of this run up to this seq was acknowledged by the mirror (a lower bound).
pub const ACKED_OFFSET: usize = 104;
/// The largest capacity accepted (a 32 GiB ring).
pub const MAX_CAPACITY: u64 = 1 << 30;

const _: () = assert!(RUN_OFFSET >= STATIC_END && BOOT_ID_OFFSET + 16 <= META_RING_HEADER_SIZE);
const _: () = assert!(HEAD_OFFSET == RUN_OFFSET + 8 && FLOOR_OFFSET == HEAD_OFFSET + 8);
const _: () = assert!(META_RING_HEADER_SIZE.is_multiple_of(META_RECORD_SIZE));

/// The primary's ring of metadata records.
///
/// Records sit at absolute, ever-growing *positions* `0, 1, 2, ...` within a *run* (a run
/// starts at each [`MetaRing::restart`]); the record at position `p` lives in slot
/// `p % capacity`. Appending reserves positions by `fetch_add` on `head`; when a position
/// reuses the slot of position `p - capacity`, that older record is lost and `floor` is raised
/// to its sequence number, so that the ring never claims to hold what it overwrote.
///
/// File layout (all fields little-endian):
/// ```text
/// off  len  field
///   0    8  magic            "MOJIMMLG"
///   8    4  version          META_RING_VERSION (1)
///  12    4  header_checksum  CRC32C of bytes 16..64
///  16   16  region_uuid      the region whose writes are recorded
///  32    8  capacity         records in the ring (at least 1)
///  40   24  reserved         0
///  64    8  run              incremented by each restart; 0 in a new file (updated in place)
///  72    8  head             positions reserved in this run (updated in place)
///  80    8  floor            records with seq <= floor may be missing; u64::MAX: the ring
///                            proves nothing until the next restart (updated in place)
///  88   16  boot_id          the kernel's boot id when the ring was last opened or made
/// 104 3992  reserved         0
/// 4096 32×capacity  records
/// ```
/// Record (32 bytes, in slot `p % capacity` for position `p`):
/// ```text
/// off len field
///   0   8 seq     sequence number of the group the range belongs to
///   8   8 offset  first byte of the range in the region
///  16   8 len     bytes in the range (0: an empty filler, holds nothing)
///  24   8 check   see below
/// ```
/// `check` is `lo | hi << 32` where, over the little-endian u64 fields of the run and the
/// record,
/// `lo = CRC32C(run ‖ p ‖ seq ‖ offset ‖ len)` and `hi = CRC32C(len ‖ offset ‖ seq ‖ p ‖ run)`
/// (40 bytes each). Binding the run and the absolute position `p` (which names both the slot and
/// the lap) makes a record of an older run or an older lap, a slot never written, and a torn
/// record all fail the check for the position a reader expects there.
///
/// # What the ring proves
///
/// [`MetaRing::ranges_after`]`(s)` answers only if it holds every record of the current run
/// with `seq > s`: the live window is positions `[head - capacity, head)` (from 0 while
/// `head < capacity`); every older record of the run was overwritten, and its seq is at most
/// `floor`. So the answer is `None` when `floor > s` or when any record in the window fails
/// its check. An appender that finds in the slot it takes something other than a whole record
/// of position `p - capacity` (it was never written, is being written by a thread a whole lap
/// behind, or is torn) raises `floor` to `u64::MAX`: the ring is too small for that load, and
/// proves nothing until the next restart.
///
/// # Durability
///
/// Records and `head` are plain stores, never flushed: the ring lives on the same memory as the
/// region (tmpfs, or DAX) and needs to survive the *process*, not the machine. A process that
/// dies mid-append leaves a reserved position whose slot fails its check, so the answer is
/// `None`, never a wrong list. Across a machine crash on DAX the stores may be lost in any
/// order, so the ring refuses to be trusted after one: the header keeps the kernel's boot id,
/// and opening the ring under another boot (or when the boot id cannot be read) sets `floor`
/// to `u64::MAX` until the next restart. `restart` persists the header counters, in an order
/// that leaves `floor = u64::MAX` if it is interrupted.
///
/// # Concurrency
///
/// Any number of threads may [`MetaRing::append`] at once (lock-free, no allocation, stores
/// only). The caller guarantees that no `append` runs during [`MetaRing::ranges_after`] or
/// [`MetaRing::restart`]. Sequence numbers within a run need not be appended in order; across
/// runs they may repeat (a run starts at the mirror's applied sequence number + 1), which is
/// why records carry the run.
pub struct MetaRing<W: Words = MappedFile> {
    words: W,
    region_uuid: [u8; 16],
    capacity: u64,
}

/// A record's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    seq: u64,
    offset: u64,
    len: u64,
}

/// The `check` of the record at position `pos` of `run` (see [`MetaRing`]).
fn check(run: u64, pos: u64, r: Record) -> u64 {
    let mut b = [0u8; 40];
    for (i, v) in [run, pos, r.seq, r.offset, r.len].into_iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let lo = crc32c(&b);
    for (i, v) in [r.len, r.offset, r.seq, pos, run].into_iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    let hi = crc32c(&b);
    lo as u64 | (hi as u64) << 32
}

/// The running kernel's boot id, if it can be read.
fn boot_id() -> Option<[u8; 16]> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let digits: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
    if digits.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(id)
}

impl MetaRing<MappedFile> {
    /// Opens the ring at `path`, or creates one of `capacity` records if there is no file
    /// there. An existing file must have been made for the same region and capacity.
    ///
    /// A new ring proves nothing (`floor = u64::MAX`) until its first [`MetaRing::restart`].
    pub fn open_or_create(path: &Path, region_uuid: [u8; 16], capacity: u64) -> Result<MetaRing, MapError> {
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(misuse(path, format!("ring capacity {capacity} is not within 1..={MAX_CAPACITY}")));
        }
        let len = META_RING_HEADER_SIZE as u64 + capacity * META_RECORD_SIZE as u64;
        if !path.exists() {
            let mut page = [0u8; STATIC_END];
            page[16..32].copy_from_slice(&region_uuid);
            page[32..40].copy_from_slice(&capacity.to_le_bytes());
            create_whole(path, len, META_RING_MAGIC, META_RING_VERSION, &mut page)?;
        }
        let map = open_checked(path, META_RING_MAGIC, META_RING_VERSION, "metadata ring")?;
        let mut page = [0u8; STATIC_END];
        map.read(0, &mut page);
        let found_uuid: [u8; 16] = page[16..32].try_into().expect("16 bytes");
        let found_capacity = u64::from_le_bytes(page[32..40].try_into().expect("8 bytes"));
        let mut wrong = Vec::new();
        if found_uuid != region_uuid {
            wrong.push(format!("region uuid {} (expected {})", hex(&found_uuid), hex(&region_uuid)));
        }
        if found_capacity != capacity {
            wrong.push(format!("capacity {found_capacity} records (expected {capacity})"));
        }
        if !wrong.is_empty() {
            return Err(corrupt(
                path,
                format!(
                    "metadata ring belongs elsewhere: it has {}; remove it to start over with a full copy",
                    wrong.join(", ")
                ),
            ));
        }
        if map.len() as u64 != len {
            return Err(corrupt(
                path,
                format!("file is {} bytes but a ring of {capacity} records is {len}", map.len()),
            ));
        }
        let ring = MetaRing { words: map, region_uuid, capacity };
        let boot = boot_id();
        if boot.is_none() || boot.as_ref() != Some(&ring.stored_boot_id()) {
            // Made under another boot (or a new file): what the ring held may have been lost
            // in any order. Distrust it, then record this boot.
            ring.store(FLOOR_OFFSET, u64::MAX);
            ring.words.persist_counter(FLOOR_OFFSET).map_err(err(path, "persist"))?;
            ring.words.write(BOOT_ID_OFFSET, &boot.unwrap_or([0; 16]));
            ring.words.persist(BOOT_ID_OFFSET, 16).map_err(err(path, "persist"))?;
        }
        Ok(ring)
    }

    fn stored_boot_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        self.words.read(BOOT_ID_OFFSET, &mut id);
        id
    }

    pub fn path(&self) -> &Path {
        self.words.path()
    }
}

impl MetaRing<Box<[AtomicU64]>> {
    /// A ring of `capacity` records in memory (see [`crate::words`]), laid out as the file is. Like a new file it
    /// proves nothing (`floor = u64::MAX`) until its first [`MetaRing::restart`].
    ///
    /// # Panics
    /// If `capacity` is not within `1..=`[`MAX_CAPACITY`].
    pub fn in_memory(region_uuid: [u8; 16], capacity: u64) -> MetaRing<Box<[AtomicU64]>> {
        assert!((1..=MAX_CAPACITY).contains(&capacity), "ring capacity {capacity} out of range");
        let words = zeroed(META_RING_HEADER_SIZE + capacity as usize * META_RECORD_SIZE);
        let ring = MetaRing { words, region_uuid, capacity };
        ring.store(FLOOR_OFFSET, u64::MAX);
        ring
    }
}

impl<W: Words> MetaRing<W> {
    fn load(&self, at: usize) -> u64 {
        self.words.word(at).load(Ordering::Acquire)
    }

    fn store(&self, at: usize, v: u64) {
        self.words.word(at).store(v, Ordering::Release)
    }

    pub fn region_uuid(&self) -> [u8; 16] {
        self.region_uuid
    }

    /// Records the ring holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The current run (0 in a new file, until the first restart).
    pub fn run(&self) -> u64 {
        self.load(RUN_OFFSET)
    }

    /// Positions reserved in this run.
    pub fn head(&self) -> u64 {
        self.load(HEAD_OFFSET)
    }

    /// Records of this run with a seq at most this may be missing.
    pub fn floor(&self) -> u64 {
        self.load(FLOOR_OFFSET)
    }

    /// Notes that every group of this run up to `seq` was acknowledged by the mirror. A
    /// mirror may have applied groups after a gap (recovery and sealing apply every complete
    /// group), so its applied number does not prove it has every group below it: a catch-up
    /// starts after the lower of the two.
    pub fn note_acked(&self, seq: u64) {
        self.words.word(ACKED_OFFSET).fetch_max(seq, Ordering::Relaxed);
    }

    /// See [`MetaRing::note_acked`].
    pub fn acked(&self) -> u64 {
        self.load(ACKED_OFFSET)
    }

    fn slot_offset(&self, pos: u64) -> usize {
        META_RING_HEADER_SIZE + (pos % self.capacity) as usize * META_RECORD_SIZE
    }

    /// The record at position `pos` of `run`, or `None` if its slot holds anything else.
    fn read(&self, run: u64, pos: u64) -> Option<Record> {
        let at = self.slot_offset(pos);
        // The check first: a writer stores it last, with release ordering.
        let stored = self.words.word(at + 24).load(Ordering::Acquire);
        let r = Record {
            seq: self.words.word(at).load(Ordering::Relaxed),
            offset: self.words.word(at + 8).load(Ordering::Relaxed),
            len: self.words.word(at + 16).load(Ordering::Relaxed),
        };
        (stored == check(run, pos, r)).then_some(r)
    }

    /// Writes the record at position `pos` (reserved by the caller), first raising `floor` over
    /// the record of the lap before, which it overwrites.
    fn write(&self, run: u64, pos: u64, r: Record) {
        if pos >= self.capacity {
            let lost = self.read(run, pos - self.capacity).map_or(u64::MAX, |old| old.seq);
            self.words.word(FLOOR_OFFSET).fetch_max(lost, Ordering::AcqRel);
        }
        let at = self.slot_offset(pos);
        self.words.word(at).store(r.seq, Ordering::Relaxed);
        self.words.word(at + 8).store(r.offset, Ordering::Relaxed);
        self.words.word(at + 16).store(r.len, Ordering::Relaxed);
        self.words.word(at + 24).store(check(run, pos, r), Ordering::Release);
    }

    /// Records the ranges `(offset, len)` of group `seq`, one record each, before the group is
    /// sent. Lock-free, may run on many threads at once; allocates nothing, flushes nothing.
    ///
    /// An iterator that knows its exact length reserves all its positions at once.
    pub fn append(&self, seq: u64, ranges: impl IntoIterator<Item = (u64, u64)>) {
        let run = self.run();
        let head = self.words.word(HEAD_OFFSET);
        let mut ranges = ranges.into_iter();
        if let (n, Some(m)) = ranges.size_hint() {
            if n == m && n > 0 {
                let first = head.fetch_add(n as u64, Ordering::AcqRel);
                for pos in first..first + n as u64 {
                    // Were the iterator shorter than it said, an empty filler record keeps the
                    // reserved position valid.
                    let (offset, len) = ranges.next().unwrap_or((0, 0));
                    self.write(run, pos, Record { seq, offset, len });
                }
            }
        }
        for (offset, len) in ranges {
            let pos = head.fetch_add(1, Ordering::AcqRel);
            self.write(run, pos, Record { seq, offset, len });
        }
    }

    /// Every range appended in this run by a group with sequence number above `seq`, sorted by
    /// offset, overlapping and adjacent ranges merged; `None` when the ring cannot prove it
    /// holds all of them. No `append` may run meanwhile.
    pub fn ranges_after(&self, seq: u64) -> Option<Vec<(u64, u64)>> {
        let (run, head) = (self.run(), self.head());
        if self.floor() > seq {
            return None;
        }
        let mut ranges = Vec::new();
        for pos in head.saturating_sub(self.capacity)..head {
            let r = self.read(run, pos)?;
            if r.seq > seq && r.len > 0 {
                ranges.push((r.offset, r.offset.saturating_add(r.len)));
            }
        }
        // As (start, end), the end saturating at the top of the address space.
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some((_, last_end)) if start <= *last_end => *last_end = (*last_end).max(end),
                _ => merged.push((start, end)),
            }
        }
        for (start, end) in &mut merged {
            *end -= *start;
        }
        Some(merged)
    }

    /// Starts a new run whose first group is `start_seq`: records of older runs are ignored
    /// from now on, and the ring proves nothing about groups before `start_seq`. The header
    /// counters are persisted. No `append` may run meanwhile.
    pub fn restart(&self, start_seq: u64) -> io::Result<()> {
        // Distrust first, so that an interruption anywhere leaves `floor = u64::MAX`.
        self.store(FLOOR_OFFSET, u64::MAX);
        self.words.persist(FLOOR_OFFSET, 8)?;
        self.store(RUN_OFFSET, self.run() + 1);
        self.store(HEAD_OFFSET, 0);
        self.store(ACKED_OFFSET, start_seq.saturating_sub(1));
        self.words.persist(ACKED_OFFSET, 8)?;
        self.words.persist(RUN_OFFSET, 16)?;
        self.store(FLOOR_OFFSET, start_seq.saturating_sub(1));
        self.words.persist(FLOOR_OFFSET, 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dirty::TestDir;

    const UUID: [u8; 16] = [3; 16];

    fn ring(dir: &TestDir, capacity: u64) -> MetaRing {
        MetaRing::open_or_create(&dir.file("m"), UUID, capacity).unwrap()
    }

    /// Flips one bit of the byte at `at` in the file.
    fn flip(path: &Path, at: usize) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at] ^= 1;
        std::fs::write(path, &bytes).unwrap();
    }

    #[test]
    fn new_ring_proves_nothing_until_restart() {
        let dir = TestDir::new("ring-new");
        let r = ring(&dir, 8);
        assert_eq!((r.run(), r.head(), r.floor(), r.capacity()), (0, 0, u64::MAX, 8));
        assert_eq!(r.ranges_after(0), None);
        r.restart(1).unwrap();
        assert_eq!((r.run(), r.head(), r.floor()), (1, 0, 0));
        assert_eq!(r.ranges_after(0), Some(vec![]));
    }

    #[test]
    fn ranges_after_filters_and_coalesces() {
        let dir = TestDir::new("ring-coalesce");
        let r = ring(&dir, 64);
        r.restart(10).unwrap();
        r.append(10, [(100, 10)]);
        r.append(12, [(0, 10), (10, 5)]); // adjacent
        r.append(11, [(105, 20), (500, 0)]); // overlapping; empty
        r.append(13, [(50, 5)].into_iter().filter(|_| true)); // length not known up front
        assert_eq!(r.head(), 6);
        assert_eq!(r.ranges_after(9), Some(vec![(0, 15), (50, 5), (100, 25)]));
        assert_eq!(r.ranges_after(10), Some(vec![(0, 15), (50, 5), (105, 20)]));
        assert_eq!(r.ranges_after(12), Some(vec![(50, 5)]));
        assert_eq!(r.ranges_after(13), Some(vec![]));
        assert_eq!(r.ranges_after(8), None, "the run began at 10: nothing known about 9");
        r.append(14, [(u64::MAX - 4, 4), (u64::MAX - 10, 20)]);
        assert_eq!(r.ranges_after(13), Some(vec![(u64::MAX - 10, 10)]), "ends saturate");
    }

    #[test]
    fn wrap_raises_the_floor() {
        let dir = TestDir::new("ring-wrap");
        let r = ring(&dir, 4);
        r.restart(1).unwrap();
        for seq in 1..=4 {
            r.append(seq, [(seq * 100, 1)]);
        }
        assert_eq!(r.floor(), 0);
        assert_eq!(r.ranges_after(0).unwrap().len(), 4);
        r.append(5, [(500, 1), (501, 1)]);
        assert_eq!((r.head(), r.floor()), (6, 2), "records of seqs 1 and 2 were overwritten");
        assert_eq!(r.ranges_after(0), None);
        assert_eq!(r.ranges_after(1), None);
        assert_eq!(r.ranges_after(2), Some(vec![(300, 1), (400, 1), (500, 2)]));
        drop(r);
        let r = ring(&dir, 4);
        assert_eq!((r.run(), r.head(), r.floor()), (1, 6, 2), "counters survive a reopen");
        assert_eq!(r.ranges_after(3), Some(vec![(400, 1), (500, 2)]));
    }

    #[test]
    fn restart_ignores_older_runs() {
        let dir = TestDir::new("ring-restart");
        let r = ring(&dir, 8);
        r.restart(1).unwrap();
        r.append(1, [(0, 8)]);
        r.append(2, [(8, 8)]);
        r.restart(2).unwrap();
        assert_eq!(r.ranges_after(1), Some(vec![]), "seq 2 of the old run is not this run's");
        assert_eq!(r.ranges_after(0), None);
        r.append(2, [(64, 8)]);
        assert_eq!(r.ranges_after(1), Some(vec![(64, 8)]));
        // Stale records of the old run in the slots ahead do not count, nor raise the floor.
        for seq in 3..=9 {
            r.append(seq, [(seq * 64, 1)]);
        }
        assert_eq!(r.floor(), 1);
        assert_eq!(r.ranges_after(1).unwrap().len(), 8);
    }

    #[test]
    fn damaged_or_unwritten_record_gives_none() {
        let dir = TestDir::new("ring-damaged");
        let p = dir.file("m");
        let r = ring(&dir, 4);
        r.restart(1).unwrap();
        for seq in 1..=6 {
            r.append(seq, [(seq, 1)]);
        }
        assert!(r.ranges_after(4).is_some());
        drop(r);
        // Slot 1 holds position 5 (seq 6): flip a byte of its offset.
        flip(&p, META_RING_HEADER_SIZE + META_RECORD_SIZE + 8);
        let r = ring(&dir, 4);
        assert_eq!(r.ranges_after(5), None, "a damaged record in the window");
        drop(r);
        flip(&p, META_RING_HEADER_SIZE + META_RECORD_SIZE + 8);
        let r = ring(&dir, 4);
        assert_eq!(r.ranges_after(5), Some(vec![(6, 1)]));
        // A process that died after reserving a position and before writing it.
        r.store(HEAD_OFFSET, 7);
        assert_eq!(r.ranges_after(5), None, "the slot still holds position 3");
    }

    #[test]
    fn another_boot_is_distrusted() {
        let dir = TestDir::new("ring-boot");
        let p = dir.file("m");
        let r = ring(&dir, 4);
        r.restart(1).unwrap();
        r.append(1, [(0, 1)]);
        drop(r);
        let r = ring(&dir, 4);
        assert_eq!(r.ranges_after(0), Some(vec![(0, 1)]), "same boot: trusted");
        drop(r);
        flip(&p, BOOT_ID_OFFSET + 3);
        let r = ring(&dir, 4);
        assert_eq!((r.floor(), r.ranges_after(0)), (u64::MAX, None));
        drop(r);
        let r = ring(&dir, 4);
        assert_eq!(r.ranges_after(0), None, "still distrusted until a restart");
        r.restart(1).unwrap();
        assert_eq!(r.ranges_after(0), Some(vec![]));
    }

    #[test]
    fn mismatched_reopen_and_bad_capacity() {
        let dir = TestDir::new("ring-mismatch");
        drop(ring(&dir, 16));
        let e = MetaRing::open_or_create(&dir.file("m"), [4; 16], 32).err().unwrap().to_string();
        assert!(e.contains(&hex(&[3; 16])) && e.contains(&hex(&[4; 16])), "{e}");
        assert!(e.contains("capacity 16 records (expected 32)"), "{e}");
        let e = MetaRing::open_or_create(&dir.file("x"), UUID, 0).err().unwrap();
        assert_eq!(e.source.kind(), io::ErrorKind::InvalidInput);
        flip(&dir.file("m"), 20);
        let e = MetaRing::open_or_create(&dir.file("m"), UUID, 16).err().unwrap().to_string();
        assert!(e.contains("checksum mismatch"), "{e}");
    }

    /// The range of thread `t`'s `i`-th group, `k`-th range: disjoint and never adjacent.
    fn range(t: u64, i: u64, k: u64) -> (u64, u64) {
        (((t * 10_000 + i) * 2 + k) * 16, 8)
    }

    #[test]
    fn concurrent_appends_survive_reopen() {
        let dir = TestDir::new("ring-threads");
        let r = ring(&dir, 4 * 1000 * 2);
        r.restart(1).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..1000 {
                        r.append(1 + t * 1000 + i, [range(t, i, 0), range(t, i, 1)]);
                    }
                });
            }
        });
        drop(r);
        let r = ring(&dir, 8000);
        assert_eq!((r.head(), r.floor()), (8000, 0));
        let mut want: Vec<_> =
            (0..4).flat_map(|t| (0..1000).flat_map(move |i| [range(t, i, 0), range(t, i, 1)])).collect();
        want.sort_unstable();
        assert_eq!(r.ranges_after(0), Some(want));
    }

    #[test]
    fn concurrent_appends_with_wrap() {
        let dir = TestDir::new("ring-threads-wrap");
        let r = ring(&dir, 256);
        r.restart(1).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..1000 {
                        r.append(1 + i * 4 + t, [range(t, i, 0), range(t, i, 1)]);
                    }
                });
            }
        });
        // Positions 0..7744 were overwritten: 3872 whole groups, of distinct seqs.
        let floor = r.floor();
        assert!(floor >= 3872, "floor {floor} covers the overwritten records");
        if floor != u64::MAX {
            let mut want = Vec::new();
            for t in 0..4 {
                for i in 0..1000 {
                    if 1 + i * 4 + t > floor {
                        want.extend([range(t, i, 0), range(t, i, 1)]);
                    }
                }
            }
            want.sort_unstable();
            assert_eq!(r.ranges_after(floor), Some(want), "every record above the floor is held");
        }
        assert_eq!(r.ranges_after(floor.saturating_sub(1)), None);
    }

    /// A small deterministic generator, so a failing case is replayed from its printed seed.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// What the ring must answer: merged ranges of every record of the run above `seq`, or
    /// `None` exactly when a record above `seq` was overwritten or the run began after `seq + 1`.
    fn model_after(
        run: &[(u64, (u64, u64))],
        capacity: u64,
        start: u64,
        seq: u64,
    ) -> Option<Vec<(u64, u64)>> {
        let lost = run.len().saturating_sub(capacity as usize);
        let floor = run[..lost].iter().map(|r| r.0).max().unwrap_or(0).max(start.saturating_sub(1));
        if floor > seq {
            return None;
        }
        let mut v: Vec<_> = run.iter().filter(|r| r.0 > seq && r.1 .1 > 0).map(|r| r.1).collect();
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (o, l) in v {
            match merged.last_mut() {
                Some((mo, ml)) if o <= *mo + *ml => *ml = (*ml).max(o + l - *mo),
                _ => merged.push((o, l)),
            }
        }
        Some(merged)
    }

    #[test]
    fn matches_a_model() {
        let dir = TestDir::new("ring-model");
        for case in 0..40u64 {
            let path = dir.file(&format!("m{case}"));
            follows_the_model(case, |capacity| MetaRing::open_or_create(&path, UUID, capacity).unwrap());
        }
    }

    #[test]
    fn in_memory_matches_the_model_as_the_file_does() {
        let r = MetaRing::in_memory(UUID, 8);
        assert_eq!((r.run(), r.head(), r.floor(), r.capacity()), (0, 0, u64::MAX, 8));
        assert_eq!(r.ranges_after(0), None, "proves nothing until its first restart");
        for case in 40..80u64 {
            follows_the_model(case, |capacity| MetaRing::in_memory(UUID, capacity));
        }
    }

    /// Random appends, restarts and queries against [`model_after`], on a ring `make` gives.
    fn follows_the_model<W: Words>(case: u64, make: impl FnOnce(u64) -> MetaRing<W>) {
        let seed = 0x9E37_79B9_7F4A_7C15 ^ case.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut g = XorShift(seed);
        let capacity = 1 + g.below(12);
        let r = make(capacity);
        let mut start = 1 + g.below(20);
        r.restart(start).unwrap();
        let mut run: Vec<(u64, (u64, u64))> = Vec::new();
        for step in 0..300 {
            match g.below(20) {
                0 => {
                    start = 1 + g.below(40);
                    r.restart(start).unwrap();
                    run.clear();
                }
                1..=11 => {
                    let seq = start + g.below(30);
                    let n = g.below(4);
                    let ranges: Vec<_> = (0..n).map(|_| (g.below(200), g.below(20))).collect();
                    if g.below(2) == 0 {
                        r.append(seq, ranges.iter().copied());
                    } else {
                        r.append(seq, ranges.iter().copied().filter(|_| true));
                    }
                    run.extend(ranges.into_iter().map(|x| (seq, x)));
                }
                _ => {
                    let seq = g.below(start + 40);
                    assert_eq!(
                        r.ranges_after(seq),
                        model_after(&run, capacity, start, seq),
                        "seed {seed:#x} step {step}: ranges_after({seq}) with capacity {capacity}"
                    );
                }
            }
        }
    }
}
