//! The region file: a header page followed by the data area.
//!
//! ```text
//! off len field
//!   0   8 magic            "MOJIMRGN"
//!   8   4 version          REGION_VERSION
//!  12   4 header_checksum  CRC32C of bytes 16..64
//!  16  16 region_uuid
//!  32   8 size             bytes in the data area
//!  40   8 map_addr         preferred virtual address, 0 for any
//!  48  16 reserved         0
//!  64   8 applied_seq      highest group applied to the data area (updated in place)
//!  72   8 epoch            highest epoch this copy has seen (updated in place)
//!  80   8 generation       id of the history this copy follows (0: unknown) (updated in place)
//!  88   8 prev_generation  the generation before it (0: none) (updated in place)
//!  96   8 flags            bit 0 INCONSISTENT: a copy into this data area began and is not
//!                          finished; bit 1 PRIMARY: an application writes this copy as
//!                          primary, its node serves no data sessions (updated in place)
//! 104   8 copy_until       the copy is finished once applied_seq reaches this (0: not known
//!                          yet, the sender has not ended it) (updated in place)
//! ```
//! The data area starts at [`REGION_HEADER_SIZE`], so it is page-aligned.

use crate::bytes::{put_u32, put_u64, u32_at, u64_at};
use crate::checksum::crc32c;
use std::fmt;

pub const REGION_MAGIC: [u8; 8] = *b"MOJIMRGN";
pub const REGION_VERSION: u32 = 1;
pub const REGION_HEADER_SIZE: usize = 4096;
pub const APPLIED_SEQ_OFFSET: usize = 64;
pub const EPOCH_OFFSET: usize = 72;
pub const GENERATION_OFFSET: usize = 80;
pub const PREV_GENERATION_OFFSET: usize = 88;
pub const FLAGS_OFFSET: usize = 96;
pub const COPY_UNTIL_OFFSET: usize = 104;
/// Region flag: a copy into the data area began and did not finish.
pub const FLAG_INCONSISTENT: u64 = 1;
/// Region flag: this copy is a primary's (an application writes it); its node serves no
/// data sessions until demoted.
pub const FLAG_PRIMARY: u64 = 2;

/// The static part of a region header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    pub region_uuid: [u8; 16],
    pub size: u64,
    pub map_addr: u64,
}

/// A region file whose header cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionHeaderError {
    Magic,
    Version { found: u32 },
    Checksum { stored: u32, computed: u32 },
}

impl fmt::Display for RegionHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionHeaderError::Magic => write!(f, "not a Mojim region file (bad magic)"),
            RegionHeaderError::Version { found } => {
                write!(f, "region format version {found} is not supported (expected {REGION_VERSION})")
            }
            RegionHeaderError::Checksum { stored, computed } => {
                write!(f, "region header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
        }
    }
}

impl std::error::Error for RegionHeaderError {}

impl RegionHeader {
    /// Writes the static fields and zero counters into `page`.
    pub fn encode(&self, page: &mut [u8]) {
        assert!(page.len() >= COPY_UNTIL_OFFSET + 8);
        page[..COPY_UNTIL_OFFSET + 8].fill(0);
        page[0..8].copy_from_slice(&REGION_MAGIC);
        put_u32(page, 8, REGION_VERSION);
        page[16..32].copy_from_slice(&self.region_uuid);
        put_u64(page, 32, self.size);
        put_u64(page, 40, self.map_addr);
        let crc = crc32c(&page[16..64]);
        put_u32(page, 12, crc);
    }

    pub fn decode(page: &[u8]) -> Result<RegionHeader, RegionHeaderError> {
        if page.len() < EPOCH_OFFSET + 8 || page[0..8] != REGION_MAGIC {
            return Err(RegionHeaderError::Magic);
        }
        let version = u32_at(page, 8);
        if version != REGION_VERSION {
            return Err(RegionHeaderError::Version { found: version });
        }
        let stored = u32_at(page, 12);
        let computed = crc32c(&page[16..64]);
        if stored != computed {
            return Err(RegionHeaderError::Checksum { stored, computed });
        }
        let mut region_uuid = [0u8; 16];
        region_uuid.copy_from_slice(&page[16..32]);
        Ok(RegionHeader { region_uuid, size: u64_at(page, 32), map_addr: u64_at(page, 40) })
    }
}

pub fn applied_seq(page: &[u8]) -> u64 {
    u64_at(page, APPLIED_SEQ_OFFSET)
}

pub fn set_applied_seq(page: &mut [u8], seq: u64) {
    put_u64(page, APPLIED_SEQ_OFFSET, seq);
}

pub fn epoch(page: &[u8]) -> u64 {
    u64_at(page, EPOCH_OFFSET)
}

pub fn set_epoch(page: &mut [u8], epoch: u64) {
    put_u64(page, EPOCH_OFFSET, epoch);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_counters() {
        let mut page = vec![0u8; REGION_HEADER_SIZE];
        let h = RegionHeader { region_uuid: [9; 16], size: 1 << 30, map_addr: 0 };
        h.encode(&mut page);
        set_applied_seq(&mut page, 77);
        set_epoch(&mut page, 3);
        assert_eq!(RegionHeader::decode(&page), Ok(h));
        assert_eq!((applied_seq(&page), epoch(&page)), (77, 3));
        page[0] = b'X';
        assert_eq!(RegionHeader::decode(&page), Err(RegionHeaderError::Magic));
    }
}
