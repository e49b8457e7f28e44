//! The file table: how `libmojim_preload.so` lays ordinary files out in a region.
//!
//! Page 0 of the region's data area holds the table; each listed file owns a **slot**, a
//! page-aligned stretch of the rest of the region, and its contents are the first `size` bytes
//! of its slot. Byte layout (docs/FORMAT.md §9):
//!
//! ```text
//! off  len field
//!   0    8 magic          "MOJIMFTB"
//!   8    4 version        FILE_TABLE_VERSION
//!  12    4 checksum       CRC32C of bytes 16 .. 32 + 256 × count
//!  16    4 count          files, 1 ..= MAX_FILES
//!  20    4 reserved       0
//!  24    8 region_size    bytes in the data area the table was laid out for
//!  32  256 × count entries:
//!        0  232 name        the path as listed, UTF-8, NUL-padded (no NUL inside)
//!      232    8 slot_offset from data-area byte 0, a multiple of 4096, ≥ 4096
//!      240    8 capacity    bytes in the slot, a multiple of 4096
//!      248    8 size        the file's replicated size, ≤ capacity
//! ```
//! The table is written whole (its `table_len()` bytes) whenever a size changes, in the same
//! group as the file's data, so a copy never shows a size without the bytes it covers.

use crate::bytes::{put_u32, put_u64, u32_at, u64_at};
use crate::checksum::crc32c;
use std::fmt;

pub const FILE_TABLE_MAGIC: [u8; 8] = *b"MOJIMFTB";
pub const FILE_TABLE_VERSION: u32 = 1;
/// The table's page: data-area bytes `0..FILE_TABLE_PAGE`; the first slot starts after it.
pub const FILE_TABLE_PAGE: u64 = 4096;
pub const FILE_TABLE_HEADER_SIZE: usize = 32;
pub const FILE_ENTRY_SIZE: usize = 256;
/// Longest name, in bytes.
pub const FILE_NAME_MAX: usize = 232;
/// Most files in one table (as many entries as fit in the page).
pub const MAX_FILES: usize = (FILE_TABLE_PAGE as usize - FILE_TABLE_HEADER_SIZE) / FILE_ENTRY_SIZE;
/// Slots are aligned to this, so that a slot can be handed out as a mapping.
pub const SLOT_ALIGN: u64 = 4096;

const _: () = assert!(FILE_TABLE_HEADER_SIZE + MAX_FILES * FILE_ENTRY_SIZE <= FILE_TABLE_PAGE as usize);
const _: () = assert!(FILE_NAME_MAX + 24 == FILE_ENTRY_SIZE);

/// One file's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEntry {
    /// The path as listed (in `MOJIM_FILES`).
    pub name: String,
    /// Where the slot starts, from data-area byte 0.
    pub slot_offset: u64,
    /// Bytes in the slot: the most the file may hold.
    pub capacity: u64,
    /// The file's replicated size.
    pub size: u64,
}

/// The table of page 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTable {
    /// The data-area size the slots were laid out for.
    pub region_size: u64,
    pub entries: Vec<FileEntry>,
}

/// A table that cannot be made or used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileTableError {
    /// Page 0 does not start with the magic (and is not blank).
    Magic,
    Version {
        found: u32,
    },
    Checksum {
        stored: u32,
        computed: u32,
    },
    /// `count` is 0 or more than [`MAX_FILES`].
    Count {
        count: usize,
    },
    /// A name is empty, too long, holds a NUL, is not UTF-8, or appears twice.
    Name {
        name: String,
        why: &'static str,
    },
    /// An entry's slot is misaligned, outside the region, overlaps another or the table, or its
    /// size exceeds its capacity.
    Slot {
        name: String,
        why: String,
    },
    /// The region is too small to give every file a slot of at least one page.
    RegionTooSmall {
        region_size: u64,
        files: usize,
    },
    /// The table was laid out for a region of another size.
    RegionSize {
        table: u64,
        region: u64,
    },
    /// Fewer bytes than the table needs.
    Short {
        len: usize,
        need: usize,
    },
}

impl fmt::Display for FileTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileTableError::Magic => write!(f, "the region's page 0 is not a file table (bad magic) and not blank"),
            FileTableError::Version { found } => {
                write!(f, "file table version {found} is not supported (expected {FILE_TABLE_VERSION})")
            }
            FileTableError::Checksum { stored, computed } => {
                write!(f, "file table checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            FileTableError::Count { count } => {
                write!(f, "a file table holds 1 to {MAX_FILES} files, not {count}")
            }
            FileTableError::Name { name, why } => write!(f, "file name {name:?}: {why}"),
            FileTableError::Slot { name, why } => write!(f, "file {name:?}: {why}"),
            FileTableError::RegionTooSmall { region_size, files } => write!(
                f,
                "a region of {region_size} bytes cannot hold the file table page and {files} slot(s) of at least \
                 {SLOT_ALIGN} bytes"
            ),
            FileTableError::RegionSize { table, region } => write!(
                f,
                "the file table was laid out for a region of {table} bytes, but the region has {region}"
            ),
            FileTableError::Short { len, need } => write!(f, "file table: {len} bytes, need {need}"),
        }
    }
}

impl std::error::Error for FileTableError {}

fn check_name(name: &str) -> Result<(), FileTableError> {
    let bad = |why| Err(FileTableError::Name { name: name.to_string(), why });
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > FILE_NAME_MAX {
        return bad("longer than 232 bytes");
    }
    if name.as_bytes().contains(&0) {
        return bad("holds a NUL byte");
    }
    Ok(())
}

impl FileTable {
    /// A new table for `names`, each file given an equal, page-aligned share of the region after
    /// page 0, every size 0.
    pub fn layout(names: &[&str], region_size: u64) -> Result<FileTable, FileTableError> {
        if names.is_empty() || names.len() > MAX_FILES {
            return Err(FileTableError::Count { count: names.len() });
        }
        for (i, n) in names.iter().enumerate() {
            check_name(n)?;
            if names[..i].contains(n) {
                return Err(FileTableError::Name { name: n.to_string(), why: "listed twice" });
            }
        }
        let n = names.len() as u64;
        let share = region_size.saturating_sub(FILE_TABLE_PAGE) / n / SLOT_ALIGN * SLOT_ALIGN;
        if share == 0 {
            return Err(FileTableError::RegionTooSmall { region_size, files: names.len() });
        }
        let entries = names
            .iter()
            .enumerate()
            .map(|(i, name)| FileEntry {
                name: name.to_string(),
                slot_offset: FILE_TABLE_PAGE + i as u64 * share,
                capacity: share,
                size: 0,
            })
            .collect();
        Ok(FileTable { region_size, entries })
    }

    /// Bytes the encoded table takes (from data-area byte 0): what a sync point must send when
    /// a size changes.
    pub fn table_len(&self) -> usize {
        FILE_TABLE_HEADER_SIZE + self.entries.len() * FILE_ENTRY_SIZE
    }

    /// The encoded table, [`FileTable::table_len`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            !self.entries.is_empty() && self.entries.len() <= MAX_FILES,
            "a table of 1..=MAX_FILES files"
        );
        let mut b = vec![0u8; self.table_len()];
        b[0..8].copy_from_slice(&FILE_TABLE_MAGIC);
        put_u32(&mut b, 8, FILE_TABLE_VERSION);
        put_u32(&mut b, 16, self.entries.len() as u32);
        put_u64(&mut b, 24, self.region_size);
        for (i, e) in self.entries.iter().enumerate() {
            let at = FILE_TABLE_HEADER_SIZE + i * FILE_ENTRY_SIZE;
            assert!(e.name.len() <= FILE_NAME_MAX && e.size <= e.capacity, "a valid entry: {e:?}");
            b[at..at + e.name.len()].copy_from_slice(e.name.as_bytes());
            put_u64(&mut b, at + FILE_NAME_MAX, e.slot_offset);
            put_u64(&mut b, at + FILE_NAME_MAX + 8, e.capacity);
            put_u64(&mut b, at + FILE_NAME_MAX + 16, e.size);
        }
        let crc = crc32c(&b[16..]);
        put_u32(&mut b, 12, crc);
        b
    }

    /// Whether `page` holds no table yet (its magic bytes are all zero: a fresh region).
    pub fn is_blank(page: &[u8]) -> bool {
        page.len() >= 8 && page[..8].iter().all(|&b| b == 0)
    }

    /// Decodes and checks a table. `page` is data-area bytes from 0 (at least the table's
    /// length; the whole page is fine).
    pub fn decode(page: &[u8]) -> Result<FileTable, FileTableError> {
        let short = |need| FileTableError::Short { len: page.len(), need };
        if page.len() < FILE_TABLE_HEADER_SIZE {
            return Err(short(FILE_TABLE_HEADER_SIZE));
        }
        if page[0..8] != FILE_TABLE_MAGIC {
            return Err(FileTableError::Magic);
        }
        let version = u32_at(page, 8);
        if version != FILE_TABLE_VERSION {
            return Err(FileTableError::Version { found: version });
        }
        let count = u32_at(page, 16) as usize;
        if count == 0 || count > MAX_FILES {
            return Err(FileTableError::Count { count });
        }
        let len = FILE_TABLE_HEADER_SIZE + count * FILE_ENTRY_SIZE;
        if page.len() < len {
            return Err(short(len));
        }
        let stored = u32_at(page, 12);
        let computed = crc32c(&page[16..len]);
        if stored != computed {
            return Err(FileTableError::Checksum { stored, computed });
        }
        let region_size = u64_at(page, 24);
        let mut entries: Vec<FileEntry> = Vec::with_capacity(count);
        for i in 0..count {
            let at = FILE_TABLE_HEADER_SIZE + i * FILE_ENTRY_SIZE;
            let raw = &page[at..at + FILE_NAME_MAX];
            let end = raw.iter().position(|&b| b == 0).unwrap_or(FILE_NAME_MAX);
            let lossy = String::from_utf8_lossy(&raw[..end]).into_owned();
            if raw[end..].iter().any(|&b| b != 0) {
                return Err(FileTableError::Name { name: lossy, why: "bytes after its NUL padding" });
            }
            let name = String::from_utf8(raw[..end].to_vec())
                .map_err(|_| FileTableError::Name { name: lossy.clone(), why: "not UTF-8" })?;
            check_name(&name)?;
            if entries.iter().any(|e| e.name == name) {
                return Err(FileTableError::Name { name, why: "listed twice" });
            }
            let e = FileEntry {
                name,
                slot_offset: u64_at(page, at + FILE_NAME_MAX),
                capacity: u64_at(page, at + FILE_NAME_MAX + 8),
                size: u64_at(page, at + FILE_NAME_MAX + 16),
            };
            let slot = |why: String| FileTableError::Slot { name: e.name.clone(), why };
            if !e.slot_offset.is_multiple_of(SLOT_ALIGN)
                || !e.capacity.is_multiple_of(SLOT_ALIGN)
                || e.capacity == 0
            {
                return Err(slot(format!(
                    "slot at {} of {} bytes is not a whole number of {SLOT_ALIGN}-byte pages",
                    e.slot_offset, e.capacity
                )));
            }
            if e.slot_offset < FILE_TABLE_PAGE
                || e.slot_offset.checked_add(e.capacity).is_none_or(|x| x > region_size)
            {
                return Err(slot(format!(
                    "slot at {} of {} bytes is not inside the region after the table page ({region_size} bytes)",
                    e.slot_offset, e.capacity
                )));
            }
            if e.size > e.capacity {
                return Err(slot(format!("size {} exceeds the slot's capacity {}", e.size, e.capacity)));
            }
            if let Some(o) = entries.iter().find(|o| {
                e.slot_offset < o.slot_offset + o.capacity && o.slot_offset < e.slot_offset + e.capacity
            }) {
                return Err(slot(format!("slot overlaps the slot of {:?}", o.name)));
            }
            entries.push(e);
        }
        Ok(FileTable { region_size, entries })
    }

    /// Checks that the table was laid out for a data area of `region_size` bytes.
    pub fn check_region_size(&self, region_size: u64) -> Result<(), FileTableError> {
        if self.region_size != region_size {
            return Err(FileTableError::RegionSize { table: self.region_size, region: region_size });
        }
        Ok(())
    }

    /// The names, in table order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// The entry named `name`.
    pub fn file(&self, name: &str) -> Option<&FileEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// A file's contents, cut out of a copy of the data area (`area` from byte 0): its slot's
    /// first `size` bytes. `None` when `area` is too short to hold them.
    pub fn contents<'a>(&self, entry: &FileEntry, area: &'a [u8]) -> Option<&'a [u8]> {
        let start = usize::try_from(entry.slot_offset).ok()?;
        let end = start.checked_add(usize::try_from(entry.size).ok()?)?;
        area.get(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn layout_gives_equal_page_aligned_slots_after_the_table() {
        let t = FileTable::layout(&["/data/db/data.mdb", "/data/other"], 64 * MIB + 4096 * 3).unwrap();
        assert_eq!(t.entries.len(), 2);
        let share = (64 * MIB + 4096 * 2) / 2 / 4096 * 4096;
        assert_eq!(
            t.entries[0],
            FileEntry { name: "/data/db/data.mdb".into(), slot_offset: 4096, capacity: share, size: 0 }
        );
        assert_eq!(t.entries[1].slot_offset, 4096 + share);
        assert!(t.entries[1].slot_offset + t.entries[1].capacity <= t.region_size);
        assert_eq!(t.table_len(), 32 + 2 * 256);
    }

    #[test]
    fn encode_then_decode_is_the_same_table() {
        let mut t = FileTable::layout(&["a", "b", "c"], 16 * MIB).unwrap();
        t.entries[1].size = 12345;
        let b = t.encode();
        assert_eq!(b.len(), t.table_len());
        assert_eq!(&b[0..8], b"MOJIMFTB");
        let mut page = vec![0u8; 4096];
        page[..b.len()].copy_from_slice(&b);
        assert_eq!(FileTable::decode(&page).unwrap(), t);
        assert_eq!(FileTable::decode(&b).unwrap(), t);
        assert!(!FileTable::is_blank(&page));
        assert!(FileTable::is_blank(&[0u8; 4096]));
    }

    #[test]
    fn a_changed_byte_fails_the_checksum() {
        let t = FileTable::layout(&["/x"], MIB).unwrap();
        let b = t.encode();
        for at in 16..b.len() {
            let mut c = b.clone();
            c[at] ^= 0x40;
            assert!(FileTable::decode(&c).is_err(), "byte {at} changed and the table still decodes");
        }
        let mut c = b.clone();
        c[8] = 2;
        assert_eq!(FileTable::decode(&c), Err(FileTableError::Version { found: 2 }));
        let mut c = b;
        c[0] = b'X';
        assert_eq!(FileTable::decode(&c), Err(FileTableError::Magic));
    }

    #[test]
    fn bad_lists_are_refused_by_name() {
        assert_eq!(FileTable::layout(&[], MIB), Err(FileTableError::Count { count: 0 }));
        let many: Vec<String> = (0..=MAX_FILES).map(|i| format!("f{i}")).collect();
        let many: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
        assert_eq!(FileTable::layout(&many, 1 << 30), Err(FileTableError::Count { count: MAX_FILES + 1 }));
        let long = "x".repeat(FILE_NAME_MAX + 1);
        let e = FileTable::layout(&[&long], MIB).unwrap_err();
        assert!(e.to_string().contains("longer than 232 bytes"), "{e}");
        let e = FileTable::layout(&["a", "a"], MIB).unwrap_err();
        assert!(e.to_string().contains("\"a\": listed twice"), "{e}");
        assert!(FileTable::layout(&["a\0b"], MIB).is_err());
        assert!(FileTable::layout(&[""], MIB).is_err());
        let e = FileTable::layout(&["a", "b"], 4096 * 2).unwrap_err();
        assert_eq!(e, FileTableError::RegionTooSmall { region_size: 8192, files: 2 });
        // A name of exactly the maximum has no NUL and still round-trips.
        let max = "y".repeat(FILE_NAME_MAX);
        let t = FileTable::layout(&[&max], MIB).unwrap();
        assert_eq!(FileTable::decode(&t.encode()).unwrap(), t);
    }

    #[test]
    fn slots_that_break_the_rules_are_refused() {
        let good = FileTable::layout(&["a", "b"], MIB).unwrap();
        type Edit = fn(&mut FileTable);
        let cases: [(&str, Edit); 5] = [
            ("not a whole number", |t| t.entries[0].slot_offset += 1),
            ("not inside the region", |t| t.entries[1].capacity += 3 * 4096),
            ("not inside the region", |t| t.entries[0].slot_offset = 0),
            ("exceeds the slot's capacity", |t| t.entries[0].size = t.entries[0].capacity + 1),
            ("overlaps", |t| t.entries[1].slot_offset = t.entries[0].slot_offset),
        ];
        for (why, edit) in cases {
            let mut t = good.clone();
            edit(&mut t);
            // Encoded by hand: `encode` asserts size <= capacity.
            let mut b = good.encode();
            for (i, e) in t.entries.iter().enumerate() {
                let at = FILE_TABLE_HEADER_SIZE + i * FILE_ENTRY_SIZE;
                put_u64(&mut b, at + FILE_NAME_MAX, e.slot_offset);
                put_u64(&mut b, at + FILE_NAME_MAX + 8, e.capacity);
                put_u64(&mut b, at + FILE_NAME_MAX + 16, e.size);
            }
            let crc = crc32c(&b[16..]);
            put_u32(&mut b, 12, crc);
            let e = FileTable::decode(&b).unwrap_err();
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn contents_cut_a_file_out_of_a_data_area() {
        let mut t = FileTable::layout(&["a", "b"], 64 * 1024).unwrap();
        t.entries[1].size = 3;
        let mut area = vec![0u8; 64 * 1024];
        let at = t.entries[1].slot_offset as usize;
        area[at..at + 4].copy_from_slice(b"abcd");
        let b = t.file("b").unwrap().clone();
        assert_eq!(t.contents(&b, &area), Some(&b"abc"[..]));
        assert_eq!(t.contents(&b, &area[..at + 2]), None);
        assert_eq!(t.names(), ["a", "b"]);
        assert!(t.check_region_size(64 * 1024).is_ok());
        assert!(t.check_region_size(1).unwrap_err().to_string().contains("laid out for a region of 65536"));
    }
}
