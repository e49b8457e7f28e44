//! The lane redo log: a file header page followed by a circular record area.
//!
//! Records sit at absolute, ever-growing *positions*, multiples of [`RECORD_ALIGN`]; a record at
//! position `p` lives at byte `p % capacity` of the record area. A record is a [`FrameHeader`]
//! (kind `Data`, `Copied` or `Pad`, with `log_pos == p`) followed by its body, padded to
//! [`RECORD_ALIGN`]. A record never wraps: when one does not fit before the end of the area, a
//! `Pad` record fills the rest. A record is valid iff its header checksum and `log_pos` agree,
//! it is a `Data` or `Copied` record with a body of 1 to `max_body` bytes whose checksum agrees
//! and which fits before the end of the area (a `Copied` body is 1 to
//! [`crate::copied::MAX_COPIED_RANGES`] 16-byte entries, in a frame with `END` and index 0), or
//! a `Pad` record ending exactly at the end of the area. A
//! reader thus finds every record of the current lap by scanning from the log's tail, whoever
//! wrote the bytes, and stale records of an older lap never pass for new ones.
//!
//! File header (first [`LOG_HEADER_SIZE`] bytes):
//! ```text
//! off len field
//!   0   8 magic            "MOJIMLOG"
//!   8   4 version          LOG_VERSION
//!  12   4 header_checksum  CRC32C of bytes 16..64
//!  16  16 region_uuid
//!  32   2 lane
//!  34   6 reserved         0
//!  40   8 capacity         bytes in the record area (multiple of RECORD_ALIGN)
//!  48  16 reserved         0
//!  64  16 tail slot 0      tail_pos (8), check (4), reserved (4)
//!  80  16 tail slot 1      the same; the tail is the larger tail_pos of the slots whose check holds
//! ```
//!
//! The tail (the position of the oldest record not yet applied, where recovery starts) is kept
//! twice, each copy with its own check ([`tail_check`]); a new tail goes into slot 0, made
//! persistent, then into slot 1, made persistent. A write cut short by a crash tears at most one
//! slot, and the other holds either the new tail or the one before it, whose space was not
//! reused yet (that waits until the new tail is persistent); damage to one slot later leaves the
//! other holding the same tail. Version 1 kept the tail once, at 64, with no check: such a log
//! is still read, and rewritten as version 2 when a mirror opens it.

use crate::bytes::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::checksum::{crc32c, crc32c_append};
use crate::frame::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;

pub const LOG_MAGIC: [u8; 8] = *b"MOJIMLOG";
pub const LOG_VERSION: u32 = 2;
/// The version before the tail had its check: read, and rewritten as [`LOG_VERSION`] when a
/// mirror opens the log.
pub const LOG_VERSION_UNCHECKED_TAIL: u32 = 1;
/// The header page; the record area starts right after it.
pub const LOG_HEADER_SIZE: usize = 4096;
/// Records start on multiples of this.
pub const RECORD_ALIGN: u64 = 64;
/// Byte offset of version 1's unchecked `tail_pos` (in version 2, slot 0's `tail_pos`).
pub const TAIL_POS_OFFSET: usize = 64;
/// Byte offsets of the two tail slots in the header page.
pub const TAIL_SLOT_OFFSETS: [usize; 2] = [64, 80];
/// Bytes of a tail slot: `tail_pos` (8), `check` (4), reserved (4).
pub const TAIL_SLOT_SIZE: usize = 16;
/// Bytes of the header page that [`LogHeader::encode`] writes (the rest is 0).
pub const LOG_HEADER_USED: usize = 96;

/// Bytes a record with a body of `body_len` occupies.
pub const fn record_size(body_len: u64) -> u64 {
    FRAME_HEADER_SIZE as u64 + body_len.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// Bytes the record whose header is `h` occupies: its body and, with `MAC`, the tag after it.
pub const fn record_size_of(h: &FrameHeader) -> u64 {
    let tag = if h.flags & crate::frame::FLAG_MAC != 0 { crate::frame::RECORD_TAG_SIZE as u64 } else { 0 };
    record_size(h.body_len as u64 + tag)
}

/// The static part of a log file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    pub region_uuid: [u8; 16],
    pub lane: u16,
    pub capacity: u64,
}

/// One tail slot as found: its `tail_pos`, its stored check and the check its bytes give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TailSlotFound {
    pub tail_pos: u64,
    pub stored: u32,
    pub computed: u32,
}

/// A log file whose header cannot be used: the medium's fault (or the wrong file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogHeaderError {
    Magic,
    Version {
        found: u32,
    },
    Checksum {
        stored: u32,
        computed: u32,
    },
    Capacity {
        capacity: u64,
    },
    /// Neither tail slot's check holds: where recovery starts is not known.
    Tail {
        slots: [TailSlotFound; 2],
    },
}

impl fmt::Display for LogHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogHeaderError::Magic => write!(f, "not a Mojim log file (bad magic)"),
            LogHeaderError::Version { found } => write!(
                f,
                "log format version {found} is not supported (this build reads {LOG_VERSION_UNCHECKED_TAIL} \
                 and {LOG_VERSION})"
            ),
            LogHeaderError::Checksum { stored, computed } => {
                write!(f, "log header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            LogHeaderError::Capacity { capacity } => {
                write!(f, "log capacity {capacity} is not a non-zero multiple of {RECORD_ALIGN}")
            }
            LogHeaderError::Tail { slots } => {
                write!(f, "both copies of the log's tail_pos fail their check (")?;
                for (i, s) in slots.iter().enumerate() {
                    write!(
                        f,
                        "{}slot {i} at byte {}: tail_pos {}, check stored {:#010x}, computed {:#010x}",
                        if i > 0 { "; " } else { "" },
                        TAIL_SLOT_OFFSETS[i],
                        s.tail_pos,
                        s.stored,
                        s.computed
                    )?;
                }
                write!(
                    f,
                    "): the header was damaged after it was written, and where recovery starts is not \
                     known; the groups in this log cannot be recovered from it"
                )
            }
        }
    }
}

impl std::error::Error for LogHeaderError {}

impl LogHeader {
    /// Writes the static header fields and both tail slots at 0 into the first
    /// [`LOG_HEADER_USED`] bytes of `page`.
    pub fn encode(&self, page: &mut [u8]) {
        assert!(page.len() >= LOG_HEADER_USED);
        page[..LOG_HEADER_USED].fill(0);
        page[0..8].copy_from_slice(&LOG_MAGIC);
        put_u32(page, 8, LOG_VERSION);
        page[16..32].copy_from_slice(&self.region_uuid);
        put_u16(page, 32, self.lane);
        put_u64(page, 40, self.capacity);
        let crc = crc32c(&page[16..64]);
        put_u32(page, 12, crc);
        for at in TAIL_SLOT_OFFSETS {
            page[at..at + TAIL_SLOT_SIZE].copy_from_slice(&tail_slot(crc, 0));
        }
    }

    /// Checks and decodes the static fields of a header of either version this build reads
    /// ([`header_version`] says which).
    pub fn decode(page: &[u8]) -> Result<LogHeader, LogHeaderError> {
        if page.len() < LOG_HEADER_USED || page[0..8] != LOG_MAGIC {
            return Err(LogHeaderError::Magic);
        }
        let version = u32_at(page, 8);
        if version != LOG_VERSION && version != LOG_VERSION_UNCHECKED_TAIL {
            return Err(LogHeaderError::Version { found: version });
        }
        let stored = u32_at(page, 12);
        let computed = crc32c(&page[16..64]);
        if stored != computed {
            return Err(LogHeaderError::Checksum { stored, computed });
        }
        let capacity = u64_at(page, 40);
        if capacity == 0 || !capacity.is_multiple_of(RECORD_ALIGN) {
            return Err(LogHeaderError::Capacity { capacity });
        }
        let mut region_uuid = [0u8; 16];
        region_uuid.copy_from_slice(&page[16..32]);
        Ok(LogHeader { region_uuid, lane: u16_at(page, 32), capacity })
    }
}

/// The version field of a header page (after [`LogHeader::decode`] accepted it).
pub fn header_version(page: &[u8]) -> u32 {
    u32_at(page, 8)
}

/// The check of a tail slot holding `pos`: CRC32C of `pos` (8 bytes, little-endian) followed
/// by the header's `header_checksum` (4 bytes, little-endian), which ties the slot to this
/// log's static fields.
pub fn tail_check(header_checksum: u32, pos: u64) -> u32 {
    crc32c_append(crc32c(&pos.to_le_bytes()), &header_checksum.to_le_bytes())
}

/// The bytes of a tail slot holding `pos`, for a header whose checksum is `header_checksum`.
pub fn tail_slot(header_checksum: u32, pos: u64) -> [u8; TAIL_SLOT_SIZE] {
    let mut b = [0u8; TAIL_SLOT_SIZE];
    put_u64(&mut b, 0, pos);
    put_u32(&mut b, 8, tail_check(header_checksum, pos));
    b
}

/// The tail (the position of the oldest record not yet applied) of a header page that
/// [`LogHeader::decode`] accepted: in version 2 the larger `tail_pos` of the slots whose check
/// holds (a tail only grows), an error if neither does; in version 1 the word at
/// [`TAIL_POS_OFFSET`], which has no check.
pub fn tail_of(page: &[u8]) -> Result<u64, LogHeaderError> {
    if header_version(page) == LOG_VERSION_UNCHECKED_TAIL {
        return Ok(u64_at(page, TAIL_POS_OFFSET));
    }
    let header_checksum = u32_at(page, 12);
    let slots = TAIL_SLOT_OFFSETS.map(|at| {
        let tail_pos = u64_at(page, at);
        TailSlotFound {
            tail_pos,
            stored: u32_at(page, at + 8),
            computed: tail_check(header_checksum, tail_pos),
        }
    });
    let valid = |i: usize| slots[i].stored == slots[i].computed;
    match (valid(0), valid(1)) {
        (true, true) => Ok(slots[0].tail_pos.max(slots[1].tail_pos)),
        (true, false) => Ok(slots[0].tail_pos),
        (false, true) => Ok(slots[1].tail_pos),
        (false, false) => Err(LogHeaderError::Tail { slots }),
    }
}

/// One valid record found by [`scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub header: FrameHeader,
    /// Absolute position of the record.
    pub pos: u64,
    /// Byte offset of the body within the record area.
    pub body_at: usize,
}

impl Record {
    /// Position just past this record.
    pub fn end_pos(&self) -> u64 {
        self.pos + record_size_of(&self.header)
    }

    /// The record's body in `area`, the area it was found in.
    pub fn body<'b, A: RecordArea + ?Sized>(&self, area: &'b A) -> A::Body<'b> {
        area.body(self.body_at, self.header.body_len as usize)
    }
}

/// The bytes of a record area as the record parser reads them: a slice, or a view of a
/// mapping that others store into, which is read by copies and checksums and never borrowed.
pub trait RecordArea {
    /// A body, as the caller applies or sends it.
    type Body<'b>: Copy
    where
        Self: 'b;

    /// Bytes in the area.
    fn area_len(&self) -> usize;

    /// The `FRAME_HEADER_SIZE` bytes at `at`, copied out.
    fn header_at(&self, at: usize) -> [u8; FRAME_HEADER_SIZE];

    /// The CRC32C of `len` bytes at `at`.
    fn checksum(&self, at: usize, len: usize) -> u32;

    /// The `len` bytes at `at`.
    fn body(&self, at: usize, len: usize) -> Self::Body<'_>;

    /// Copies the bytes at `at` into `out`.
    fn copy_out(&self, at: usize, out: &mut [u8]);
}

impl RecordArea for [u8] {
    type Body<'b> = &'b [u8];

    fn area_len(&self) -> usize {
        self.len()
    }

    fn header_at(&self, at: usize) -> [u8; FRAME_HEADER_SIZE] {
        self[at..at + FRAME_HEADER_SIZE].try_into().expect("a header's bytes")
    }

    fn checksum(&self, at: usize, len: usize) -> u32 {
        crc32c(&self[at..at + len])
    }

    fn body(&self, at: usize, len: usize) -> &[u8] {
        &self[at..at + len]
    }

    fn copy_out(&self, at: usize, out: &mut [u8]) {
        out.copy_from_slice(&self[at..at + out.len()])
    }
}

/// Checks the record that should start at absolute position `pos` of `area`. Returns `None`
/// when the bytes there are not a valid record of this lap: the end of the log.
pub fn record_at<A: RecordArea + ?Sized>(area: &A, pos: u64, max_body: u32) -> Option<Record> {
    record_at_with(area, pos, max_body, true)
}

/// As [`record_at`], without checking the body's checksum: for a record this process already
/// checked (a receiver checks every body before it writes the header that makes it a record,
/// and recovery checks every record it finds), when it is read again to apply or forward it.
pub fn record_at_verified<A: RecordArea + ?Sized>(area: &A, pos: u64, max_body: u32) -> Option<Record> {
    record_at_with(area, pos, max_body, false)
}

fn record_at_with<A: RecordArea + ?Sized>(
    area: &A,
    pos: u64,
    max_body: u32,
    check_body: bool,
) -> Option<Record> {
    let cap = area.area_len() as u64;
    if cap == 0 || !pos.is_multiple_of(RECORD_ALIGN) {
        return None;
    }
    let at = (pos % cap) as usize;
    let room = cap - pos % cap;
    if room < FRAME_HEADER_SIZE as u64 {
        return None;
    }
    let hb = area.header_at(at);
    let header = FrameHeader::decode_record(&hb).ok()?;
    if header.log_pos != pos {
        return None;
    }
    let size = record_size_of(&header);
    // Positions near the top of the u64 range are corrupt tails, not logs.
    pos.checked_add(size)?;
    match header.kind {
        FrameKind::Pad => {
            if size != room {
                return None;
            }
        }
        FrameKind::Data | FrameKind::Copied => {
            // A body is decrypted before its header is written: an encrypted one is no record.
            if header.body_len == 0 || header.body_len > max_body || size > room || header.is_encrypted() {
                return None;
            }
            if header.kind == FrameKind::Copied && !copied_shape_ok(&header) {
                return None;
            }
            let body_at = at + FRAME_HEADER_SIZE;
            if check_body {
                let len = header.body_len as usize;
                header.check_checksum(len, area.checksum(body_at, len)).ok()?;
            }
        }
        _ => return None,
    }
    Some(Record { header, pos, body_at: at + FRAME_HEADER_SIZE })
}

/// A Copied record is a whole group of one frame whose body is a list of ranges.
fn copied_shape_ok(h: &FrameHeader) -> bool {
    let n = h.body_len as usize / crate::copied::COPIED_RANGE_SIZE;
    h.is_end()
        && h.frame_index == 0
        && (h.body_len as usize).is_multiple_of(crate::copied::COPIED_RANGE_SIZE)
        && n <= crate::copied::MAX_COPIED_RANGES as usize
}

/// Iterates over the valid records (Data and Copied) from `tail` on, stopping at the first invalid one or at one
/// that would end more than a lap after `tail`. Pad records are skipped.
pub fn scan<A: RecordArea + ?Sized>(area: &A, tail: u64, max_body: u32) -> impl Iterator<Item = Record> + '_ {
    let cap = area.area_len() as u64;
    let mut pos = tail;
    std::iter::from_fn(move || loop {
        if pos.wrapping_sub(tail) >= cap {
            return None;
        }
        let rec = record_at(area, pos, max_body)?;
        if rec.end_pos() - tail > cap {
            return None;
        }
        pos = rec.end_pos();
        if rec.header.kind != FrameKind::Pad {
            return Some(rec);
        }
    })
}

/// The pieces `(offset, len)` of a record area of `capacity` bytes that the log positions
/// `[from, to)` occupy, in order: split at the end of the area, where the positions wrap.
pub fn area_pieces(capacity: u64, from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> {
    assert!(capacity > 0);
    let mut pos = from;
    std::iter::from_fn(move || {
        if pos >= to {
            return None;
        }
        let at = pos % capacity;
        let n = (capacity - at).min(to - pos);
        pos += n;
        Some((at, n))
    })
}

/// The header of a Pad record at `pos` filling the rest of the current lap of a record area of
/// `capacity` bytes.
pub fn pad_header(capacity: u64, pos: u64) -> [u8; FRAME_HEADER_SIZE] {
    let room = capacity - pos % capacity;
    assert!(room >= FRAME_HEADER_SIZE as u64 && room.is_multiple_of(RECORD_ALIGN));
    let mut h = FrameHeader::new(FrameKind::Pad);
    h.body_len = (room - FRAME_HEADER_SIZE as u64) as u32;
    h.log_pos = pos;
    h.to_bytes()
}

/// Writes a Pad record at `pos` filling the rest of the area's current lap.
pub fn write_pad(area: &mut [u8], pos: u64) {
    let at = (pos % area.len() as u64) as usize;
    let h = pad_header(area.len() as u64, pos);
    area[at..at + FRAME_HEADER_SIZE].copy_from_slice(&h);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(area: &mut [u8], pos: u64, seq: u64, body: &[u8], end: bool) -> u64 {
        put_kind(area, pos, FrameKind::Data, seq, body, end)
    }

    fn put_kind(area: &mut [u8], pos: u64, kind: FrameKind, seq: u64, body: &[u8], end: bool) -> u64 {
        let cap = area.len() as u64;
        let size = record_size(body.len() as u64);
        let mut pos = pos;
        if cap - pos % cap < size {
            write_pad(area, pos);
            pos += cap - pos % cap;
        }
        let at = (pos % cap) as usize;
        let mut h = FrameHeader::new(kind);
        h.seq = seq;
        h.body_len = body.len() as u32;
        h.body_checksum = crc32c(body);
        h.log_pos = pos;
        h.flags = if end { crate::frame::FLAG_END } else { 0 };
        area[at + 64..at + 64 + body.len()].copy_from_slice(body);
        let hb: &mut [u8; 64] = (&mut area[at..at + 64]).try_into().unwrap();
        h.encode(hb);
        pos.wrapping_add(size)
    }

    /// docs/FORMAT.md §2.4 "Sealed records": a record with `MAC` holds its 16-byte tag right
    /// after its body, and its size counts the tag before rounding up to 64. The scan steps over
    /// it (it checks headers and checksums, not tags: it has no key).
    #[test]
    fn a_sealed_record_holds_its_tag_after_its_body() {
        let mut area = vec![0u8; 4096];
        let body = [0x42u8; 120];
        let mut h = FrameHeader::new(FrameKind::Data);
        (h.seq, h.body_len, h.body_checksum) = (1, 120, crc32c(&body));
        h.flags = crate::frame::FLAG_END | crate::frame::FLAG_MAC;
        assert_eq!(record_size_of(&h), 256, "64 header + 120 body + 16 tag, rounded up to 64");
        assert_eq!(record_size(120), 192, "the same body without a tag");
        h.encode((&mut area[..64]).try_into().unwrap());
        area[64..184].copy_from_slice(&body);
        area[184..200].copy_from_slice(&[0xee; 16]);
        let next = put(&mut area, 256, 2, &[7u8; 10], true);
        let recs: Vec<Record> = scan(&area[..], 0, 1 << 20).collect();
        assert_eq!(recs.len(), 2);
        assert_eq!((recs[0].body_at, recs[0].end_pos()), (64, 256));
        assert_eq!((recs[1].pos, recs[1].end_pos()), (256, next));
        assert_eq!(next, 256 + 128);
    }

    /// docs/FORMAT.md §4.3 rule 5: a record's header is written only after its body was
    /// decrypted, without `ENCRYPTED`; a header that still has it (a torn write, or bytes a peer
    /// put there) is not a record, and the scan ends before it.
    #[test]
    fn a_header_still_marked_encrypted_is_not_a_record() {
        let mut area = vec![0u8; 4096];
        let next = put(&mut area, 0, 1, &[1u8; 10], true);
        let body = [0x42u8; 120];
        let mut h = FrameHeader::new(FrameKind::Data);
        (h.seq, h.body_len, h.body_checksum, h.log_pos) = (2, 120, crc32c(&body), next);
        h.flags = crate::frame::FLAG_END | crate::frame::FLAG_MAC;
        let at = next as usize;
        area[at + 64..at + 184].copy_from_slice(&body);
        h.encode((&mut area[at..at + 64]).try_into().unwrap());
        assert!(record_at(&area[..], next, 1 << 20).is_some(), "decrypted: a record");
        h.flags |= crate::frame::FLAG_ENCRYPTED;
        h.encode((&mut area[at..at + 64]).try_into().unwrap());
        assert!(record_at(&area[..], next, 1 << 20).is_none());
        assert_eq!(scan(&area[..], 0, 1 << 20).count(), 1, "the scan ends before it");
    }

    #[test]
    fn header_round_trip_and_corruption() {
        let mut page = vec![0u8; LOG_HEADER_SIZE];
        let h = LogHeader { region_uuid: [7; 16], lane: 3, capacity: 4096 };
        h.encode(&mut page);
        assert_eq!(LogHeader::decode(&page), Ok(h));
        assert_eq!(tail_of(&page), Ok(0));
        page[20] ^= 1;
        assert!(matches!(LogHeader::decode(&page), Err(LogHeaderError::Checksum { .. })));
    }

    #[test]
    fn the_tail_is_the_larger_of_the_slots_whose_check_holds() {
        let mut page = vec![0u8; LOG_HEADER_SIZE];
        LogHeader { region_uuid: [7; 16], lane: 3, capacity: 4096 }.encode(&mut page);
        let crc = u32_at(&page, 12);
        let set = |page: &mut [u8], slot: usize, pos: u64| {
            let at = TAIL_SLOT_OFFSETS[slot];
            page[at..at + TAIL_SLOT_SIZE].copy_from_slice(&tail_slot(crc, pos));
        };
        // Slot 0 written, the write of slot 1 not yet: the larger one.
        set(&mut page, 0, 640);
        assert_eq!(tail_of(&page), Ok(640));
        set(&mut page, 1, 640);
        assert_eq!(tail_of(&page), Ok(640));
        // A write of slot 0 cut short (its tail_pos without its check): slot 1 holds.
        put_u64(&mut page, 64, 1920);
        assert_eq!(tail_of(&page), Ok(640));
        // Both damaged: no tail, and the error names both slots.
        page[81] ^= 0x40;
        let e = tail_of(&page).unwrap_err();
        assert!(matches!(e, LogHeaderError::Tail { .. }));
        let m = e.to_string();
        assert!(m.contains("slot 0 at byte 64: tail_pos 1920") && m.contains("slot 1 at byte 80"), "{m}");
        // A slot copied from a log with other static fields does not check here.
        let mut other = vec![0u8; LOG_HEADER_SIZE];
        LogHeader { region_uuid: [7; 16], lane: 4, capacity: 4096 }.encode(&mut other);
        page[64..96].copy_from_slice(&other[64..96]);
        assert!(tail_of(&page).is_err());
        // Version 1: the unchecked word at 64.
        put_u32(&mut page, 8, LOG_VERSION_UNCHECKED_TAIL);
        put_u64(&mut page, 64, 4096);
        assert!(LogHeader::decode(&page).is_ok());
        assert_eq!(tail_of(&page), Ok(4096));
        put_u32(&mut page, 8, 3);
        assert_eq!(LogHeader::decode(&page), Err(LogHeaderError::Version { found: 3 }));
    }

    #[test]
    fn scan_wraps_and_ignores_stale_laps() {
        let mut area = vec![0u8; 1024];
        let mut pos = 0;
        for seq in 1..=20u64 {
            pos = put(&mut area, pos, seq, &[seq as u8; 100], true);
        }
        // The last lap holds the newest records; scanning from a tail a lap behind the end finds
        // only records whose positions continue from that tail.
        let tail = pos - 512;
        let found: Vec<u64> = scan(&area[..], tail, 1 << 20).map(|r| r.header.seq).collect();
        assert!(found.is_empty() || found.windows(2).all(|w| w[1] == w[0] + 1));
        let recs: Vec<Record> = scan(&area[..], pos - 3 * record_size(100), 1 << 20).collect();
        assert_eq!(recs.iter().map(|r| r.header.seq).collect::<Vec<_>>(), vec![18, 19, 20]);
    }

    #[test]
    fn a_tail_near_the_top_of_the_range_ends_the_scan() {
        let mut area = vec![0u8; 256];
        let tail = 0xFFFF_FFFF_FFFF_FF00u64;
        let pos = put(&mut area, tail, 1, &[1; 10], true);
        put(&mut area, pos, 2, &[2; 64], true);
        // Whatever is found, nothing overflows.
        assert!(scan(&area[..], tail, 1000).count() <= 2);
    }

    #[test]
    fn a_record_may_not_reach_past_one_lap() {
        // Capacity 128, tail 64: a Pad at 64 and a Data record at 128 whose body would cover
        // the Pad's bytes at the tail.
        let mut area = vec![0u8; 128];
        write_pad(&mut area, 64);
        let pos = put(&mut area, 128, 7, &[9; 64], true);
        assert_eq!(pos, 256);
        // The Data record overwrote the Pad header, so the scan from 64 finds nothing valid at
        // 64; scanning from 128 finds the record, which ends exactly one lap later.
        assert_eq!(scan(&area[..], 128, 1000).count(), 1);
        assert_eq!(scan(&area[..], 64, 1000).count(), 0);
    }

    #[test]
    fn copied_records_are_whole_groups_of_range_lists() {
        let mut body = Vec::new();
        crate::copied::push_range(&mut body, 4096, 8192);
        crate::copied::push_range(&mut body, 0, 512);
        let mut area = vec![0u8; 4096];
        let pos = put_kind(&mut area, 0, FrameKind::Copied, 1, &body, true);
        let recs: Vec<Record> = scan(&area[..], 0, 1000).collect();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].header.kind, FrameKind::Copied);
        // Without END, or with a body that is not a list of 16-byte entries, it is no record.
        put_kind(&mut area, pos, FrameKind::Copied, 2, &body, false);
        assert!(record_at(&area[..], pos, 1000).is_none());
        put_kind(&mut area, pos, FrameKind::Copied, 2, &body[..20], true);
        assert!(record_at(&area[..], pos, 1000).is_none());
        put_kind(&mut area, pos, FrameKind::Copied, 2, &body[..16], true);
        assert!(record_at(&area[..], pos, 1000).is_some());
    }

    #[test]
    fn area_pieces_split_at_the_wrap() {
        let p = |from, to| area_pieces(1024, from, to).collect::<Vec<_>>();
        assert_eq!(p(64, 64), vec![]);
        assert_eq!(p(64, 256), vec![(64, 192)]);
        assert_eq!(p(832, 1344), vec![(832, 192), (0, 320)]);
        assert_eq!(p(2048, 3072), vec![(0, 1024)]);
    }

    /// Rewrites the version byte of the record header at `at` (and its checksum).
    fn set_version(area: &mut [u8], at: usize, version: u8) {
        area[at + 10] = version;
        let crc = crc32c(&area[at + 4..at + 64]);
        area[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn records_of_an_older_version_with_this_layout_are_found() {
        // A mirror upgraded with groups still in its logs: records written by the previous
        // version must not end the scan (that would drop acknowledged groups without a word).
        let mut area = vec![0u8; 1024];
        let next = put(&mut area, 0, 1, &[1; 100], true);
        put(&mut area, next, 2, &[2; 100], true);
        set_version(&mut area, 0, crate::OLDEST_RECORD_VERSION);
        let seqs: Vec<u64> = scan(&area[..], 0, 1000).map(|r| r.header.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
        // A version before that one, or after this build's, is no record.
        for v in [crate::OLDEST_RECORD_VERSION - 1, crate::PROTOCOL_VERSION + 1] {
            set_version(&mut area, 0, v);
            assert!(record_at(&area[..], 0, 1000).is_none(), "version {v}");
        }
        // On the wire, only this build's version is spoken.
        set_version(&mut area, 0, crate::OLDEST_RECORD_VERSION);
        let hb: &[u8; 64] = area[..64].try_into().unwrap();
        assert!(FrameHeader::decode(hb).is_err());
        assert!(FrameHeader::decode_record(hb).is_ok());
    }

    #[test]
    fn unaligned_positions_are_not_records() {
        let mut area = vec![0u8; 1024];
        put(&mut area, 0, 1, &[1; 8], true);
        assert!(record_at(&area[..], 0, 100).is_some());
        assert!(record_at(&area[..], 8, 100).is_none());
    }

    #[test]
    fn bit_flip_ends_the_scan() {
        let mut area = vec![0u8; 4096];
        let mut pos = 0;
        for seq in 1..=5u64 {
            pos = put(&mut area, pos, seq, &[1, 2, 3], true);
        }
        assert_eq!(scan(&area[..], 0, 1 << 20).count(), 5);
        area[(2 * record_size(3) + 64) as usize] ^= 0x10;
        assert_eq!(scan(&area[..], 0, 1 << 20).count(), 2);
    }
}
