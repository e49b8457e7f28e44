//! The layout of recoverable memory, byte by byte (docs/FORMAT.md §10).
//!
//! Recoverable memory is `capacity` bytes of backend storage, mirrored one to one by the
//! program's memory at `base .. base + capacity`: backend byte `o` is the byte at address
//! `base + o`. Its first [`META_LEN`] bytes are the meta block, at backend offset 0 (the
//! report's "first page of the block table, stored with a constant identifier"):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | magic `MOJIMRVM` |
//! | 8 | 4 | version, 1 |
//! | 12 | 4 | page size, 4096 |
//! | 16 | 8 | capacity: backend bytes, the meta block included |
//! | 24 | 8 | base: the address of backend byte 0 |
//! | 32 | 8 | seq: commits made |
//! | 40 | 8 | usr_data: the program's root pointer (0: none) |
//! | 48 | 8 | hwm: backend bytes ever given to blocks, from 0 (the meta block's end at first) |
//! | 56 | 4 | blocks: entries in use in the table |
//! | 60 | 4 | 0 |
//! | 64 | 8 × 9 | free-list heads of the size classes 16, 32, … 4096 bytes (address, 0: empty) |
//! | 136 | 112 | 0 |
//! | 248 | 4 | CRC-32C of bytes 0..248 |
//! | 252 | 4 | 0 |
//! | 256 | 32 × [`TABLE_CAP`] | the block table |
//!
//! A block table entry (32 bytes): the block's address (8), its backend offset (8), its length
//! in bytes (8, whole pages), its kind (4: 0 free, 1 slab, 2 large) and, for a slab, the size
//! of its chunks (4). A slab is [`SLAB_LEN`] bytes cut into chunks of one size class; a free
//! chunk holds the address of the next free chunk of its class in its first 8 bytes. A large
//! block holds one allocation of more than [`MAX_SMALL`] bytes. A free block's bytes are
//! unused and may be given out again.
//!
//! Everything above lives in the tracked memory itself, so the allocator's changes are found
//! written and committed with the data, in the same atomic group.

use crate::error::{Result, RvmError};
use mojim_format::checksum::crc32c;

/// The meta block's first bytes.
pub const MAGIC: [u8; 8] = *b"MOJIMRVM";
/// This layout's version.
pub const VERSION: u32 = 1;
/// The tracking granularity and the unit of every block.
pub const PAGE: u64 = 4096;
/// Bytes of the meta block: header and block table.
pub const META_LEN: u64 = 64 << 10;
/// Bytes of the header, before the table.
pub const HEADER_LEN: u64 = 256;
/// Bytes of a table entry.
pub const ENTRY_LEN: u64 = 32;
/// Entries the table holds.
pub const TABLE_CAP: u32 = ((META_LEN - HEADER_LEN) / ENTRY_LEN) as u32;
/// The size classes: 16 bytes to [`MAX_SMALL`], powers of two.
pub const CLASSES: usize = 9;
/// The largest allocation served from a slab.
pub const MAX_SMALL: u64 = 4096;
/// Bytes of a slab.
pub const SLAB_LEN: u64 = 256 << 10;
/// A free chunk's second word is its address XOR this (`"MOJIMFRE"` little-endian): how a
/// second `rvm_free` of a chunk is told from a first (a match is confirmed on the free list).
pub const FREE_TAG: u64 = u64::from_le_bytes(*b"MOJIMFRE");
/// Where the CRC sits.
const CRC_AT: usize = 248;

/// The size of class `c`.
pub fn class_size(c: usize) -> u64 {
    16 << c
}

/// The class of an allocation of `size` bytes (at most [`MAX_SMALL`]).
pub fn class_of(size: u64) -> usize {
    let s = size.max(16).next_power_of_two();
    s.trailing_zeros() as usize - 4
}

/// The header's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Backend bytes, the meta block included.
    pub capacity: u64,
    /// The address of backend byte 0.
    pub base: u64,
    /// Commits made.
    pub seq: u64,
    /// The program's root pointer (0: none).
    pub usr_data: u64,
    /// Backend bytes ever given to blocks, from 0.
    pub hwm: u64,
    /// Entries in use in the table.
    pub blocks: u32,
    /// Free-list heads of the size classes.
    pub heads: [u64; CLASSES],
}

/// Field offsets, for updating one in place.
#[allow(missing_docs)]
pub mod at {
    pub const SEQ: usize = 32;
    pub const USR_DATA: usize = 40;
    pub const HWM: usize = 48;
    pub const BLOCKS: usize = 56;
    pub const HEADS: usize = 64;
    pub const CRC: usize = super::CRC_AT;
}

impl Header {
    /// The header of empty recoverable memory.
    pub fn new(capacity: u64, base: u64) -> Header {
        Header { capacity, base, seq: 0, usr_data: 0, hwm: META_LEN, blocks: 0, heads: [0; CLASSES] }
    }

    /// The header's bytes, its CRC included.
    pub fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut b = [0u8; HEADER_LEN as usize];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..32].copy_from_slice(&self.base.to_le_bytes());
        b[32..40].copy_from_slice(&self.seq.to_le_bytes());
        b[40..48].copy_from_slice(&self.usr_data.to_le_bytes());
        b[48..56].copy_from_slice(&self.hwm.to_le_bytes());
        b[56..60].copy_from_slice(&self.blocks.to_le_bytes());
        for (i, h) in self.heads.iter().enumerate() {
            b[at::HEADS + 8 * i..at::HEADS + 8 * i + 8].copy_from_slice(&h.to_le_bytes());
        }
        let crc = crc32c(&b[..CRC_AT]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a header: `None` for bytes that were never recoverable memory (all zero),
    /// an error naming what is wrong for anything else that is not a valid header.
    pub fn decode(b: &[u8]) -> Result<Option<Header>> {
        let b = &b[..HEADER_LEN as usize];
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if b[0..8] != MAGIC {
            return Err(RvmError::Layout(format!(
                "the region holds something other than recoverable memory (its first bytes are {:02x?}, \
                 not \"MOJIMRVM\"): use an empty region, or the one this memory was created in",
                &b[0..8]
            )));
        }
        let crc = crc32c(&b[..CRC_AT]);
        if u32_at(CRC_AT) != crc {
            return Err(RvmError::Layout(format!(
                "the recoverable memory's header is damaged (CRC {:#010x}, computed {crc:#010x})",
                u32_at(CRC_AT)
            )));
        }
        if u32_at(8) != VERSION || u64::from(u32_at(12)) != PAGE {
            return Err(RvmError::Layout(format!(
                "recoverable memory of version {} with {}-byte pages; this build reads version {VERSION} \
                 with {PAGE}-byte pages",
                u32_at(8),
                u32_at(12)
            )));
        }
        let mut heads = [0; CLASSES];
        for (i, h) in heads.iter_mut().enumerate() {
            *h = u64_at(at::HEADS + 8 * i);
        }
        let h = Header {
            capacity: u64_at(16),
            base: u64_at(24),
            seq: u64_at(32),
            usr_data: u64_at(40),
            hwm: u64_at(48),
            blocks: u32_at(56),
            heads,
        };
        if h.hwm < META_LEN
            || h.hwm > h.capacity
            || !h.hwm.is_multiple_of(PAGE)
            || h.blocks > TABLE_CAP
            || !h.base.is_multiple_of(PAGE)
            || h.base.checked_add(h.capacity).is_none()
        {
            return Err(RvmError::Layout(format!("the recoverable memory's header is inconsistent: {h:?}")));
        }
        Ok(Some(h))
    }
}

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Unused bytes, to be given out again.
    Free,
    /// Chunks of one class.
    Slab {
        /// The class (its chunk size is [`class_size`]).
        class: usize,
    },
    /// One allocation larger than [`MAX_SMALL`].
    Large,
}

/// A block table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The block's address in the program.
    pub addr: u64,
    /// Its offset in the backend.
    pub offset: u64,
    /// Its bytes, whole pages.
    pub len: u64,
    /// What it holds.
    pub kind: Kind,
}

impl Entry {
    /// Where entry `i` sits in the meta block.
    pub fn at(i: u32) -> usize {
        (HEADER_LEN + u64::from(i) * ENTRY_LEN) as usize
    }

    /// The entry's bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN as usize] {
        let mut b = [0u8; ENTRY_LEN as usize];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        let (kind, chunk) = match self.kind {
            Kind::Free => (0u32, 0u32),
            Kind::Slab { class } => (1, class_size(class) as u32),
            Kind::Large => (2, 0),
        };
        b[24..28].copy_from_slice(&kind.to_le_bytes());
        b[28..32].copy_from_slice(&chunk.to_le_bytes());
        b
    }

    /// Decodes entry `i` of memory whose header is `h`, checking that it lies where the
    /// header says memory is.
    pub fn decode(b: &[u8], i: u32, h: &Header) -> Result<Entry> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let bad = |why: &str| RvmError::Layout(format!("block table entry {i} is damaged: {why}"));
        let kind = match (u32_at(24), u32_at(28)) {
            (0, _) => Kind::Free,
            (1, c) if c >= 16 && u64::from(c) <= MAX_SMALL && c.is_power_of_two() => {
                Kind::Slab { class: class_of(u64::from(c)) }
            }
            (2, _) => Kind::Large,
            (k, c) => return Err(bad(&format!("kind {k} with chunk size {c}"))),
        };
        let e = Entry { addr: u64_at(0), offset: u64_at(8), len: u64_at(16), kind };
        if e.len == 0 || !e.len.is_multiple_of(PAGE) || !e.offset.is_multiple_of(PAGE) {
            return Err(bad(&format!("{e:?} is not whole pages")));
        }
        if e.offset < META_LEN || e.offset.checked_add(e.len).is_none_or(|end| end > h.hwm) {
            return Err(bad(&format!("{e:?} lies outside the blocks in use (up to {})", h.hwm)));
        }
        if e.addr != h.base + e.offset {
            return Err(bad(&format!("{e:?} is not at base {:#x} + its offset", h.base)));
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_damage_is_named() {
        let mut h = Header::new(1 << 20, 0x6000_0000_0000);
        h.seq = 9;
        h.heads[3] = 0x6000_0001_0000;
        let b = h.encode();
        assert_eq!(Header::decode(&b).unwrap(), Some(h));
        assert_eq!(Header::decode(&[0; 256]).unwrap(), None);
        let mut bad = b;
        bad[40] ^= 1;
        assert!(Header::decode(&bad).unwrap_err().to_string().contains("damaged"));
        let mut other = b;
        other[0] = b'X';
        assert!(Header::decode(&other).unwrap_err().to_string().contains("something other"));
    }

    #[test]
    fn classes_cover_16_bytes_to_a_page() {
        assert_eq!(class_of(1), 0);
        assert_eq!(class_of(16), 0);
        assert_eq!(class_of(17), 1);
        assert_eq!(class_of(MAX_SMALL), CLASSES - 1);
        assert_eq!(class_size(CLASSES - 1), MAX_SMALL);
        assert_eq!(TABLE_CAP, 2040);
    }

    #[test]
    fn entries_round_trip_and_must_lie_where_memory_is() {
        let mut h = Header::new(1 << 20, 0x6000_0000_0000);
        h.hwm = META_LEN + SLAB_LEN;
        let e =
            Entry { addr: h.base + META_LEN, offset: META_LEN, len: SLAB_LEN, kind: Kind::Slab { class: 2 } };
        assert_eq!(Entry::decode(&e.encode(), 0, &h).unwrap(), e);
        let moved = Entry { addr: e.addr + PAGE, ..e };
        assert!(Entry::decode(&moved.encode(), 0, &h).is_err());
        let past = Entry { len: SLAB_LEN + PAGE, ..e };
        assert!(Entry::decode(&past.encode(), 0, &h).is_err());
    }
}
