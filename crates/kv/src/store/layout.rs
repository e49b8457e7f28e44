//! Where everything is in the region (docs/FORMAT.md §11): the superblock, the journal, the
//! bucket array, the heap and its size classes, and an entry's header. All integers are
//! little-endian.

use super::error::StoreError;

/// `magic` at region byte 0.
pub const MAGIC: [u8; 8] = *b"MOJIM-KV";
/// The layout's version: 2 keys its hash with a random key kept in the superblock; stores of
/// version 1 (CRC32C, no key) are still opened, and keep their hash.
pub const VERSION: u32 = 2;
/// Offset of the keyed hash's key (version 2), and of its CRC32C.
pub const HASH_KEY_OFF: usize = 80;
/// Offset of the CRC32C of the keyed hash's key.
pub const HASH_KEY_CRC_OFF: usize = 96;
/// Bytes of the superblock read to open a store: the static part, its CRC, the hash key and its CRC.
pub const HEAD_LEN: usize = 100;
/// Bytes of the superblock (region bytes 0 .. 4096).
pub const SUPER_LEN: u64 = 4096;
/// Bytes of the superblock the CRC covers (the fields fixed at format).
pub const STATIC_LEN: usize = 72;
/// Offset of the static part's CRC32C.
pub const CRC_OFF: u64 = 72;
/// Offset of the dynamic part (what commands change) in the superblock.
pub const DYN_OFF: u64 = 128;
/// Size classes (and free-list heads) at most.
pub const CLASSES: usize = 128;
/// Bytes of the dynamic part: five words, reserved room, a head per class, then the databases.
pub const DYN_LEN: u64 = 128 + 8 * CLASSES as u64 + 512;
/// Offset of the free-list heads inside the dynamic part.
pub const HEADS_AT: usize = 128;
/// Offset of the databases' block inside the dynamic part.
pub const DB_AT: usize = 128 + 8 * CLASSES;
/// Offset of the pending-free list's head and count inside the dynamic part (region bytes
/// 1632 .. 1648; 1624 .. 1632 are kept for another field).
pub const LAZYFREE_AT: usize = DB_AT + 352;
/// Databases a store holds (`SELECT 0` .. `SELECT 15`).
pub const DBS: usize = 16;
/// Where the ACL record's block offset lies in the dynamic part (region byte 1624).
pub const ACL_AT: usize = DB_AT + 344;
/// Bytes before the key in a version 2 entry's key: the physical database (u8) and its
/// generation (u32).
pub const KEY_PREFIX: usize = 5;
/// The journal starts after the superblock.
pub const JOURNAL_OFF: u64 = SUPER_LEN;
/// The journal's header: `undo_len`, `batch`, `ranges`, reserved.
pub const JOURNAL_HEAD: u64 = 64;
/// Ranges the journal's list holds at most.
pub const LIST_MAX: usize = 2048;
/// Offset of the range list in the journal.
pub const LIST_AT: u64 = JOURNAL_HEAD;
/// Offset of the undo area in the journal.
pub const UNDO_AT: u64 = LIST_AT + 16 * LIST_MAX as u64;
/// Bytes of an undo record's header (offset, length).
pub const UNDO_HEAD: u64 = 16;
/// Bytes of an entry's header.
pub const ENTRY_HEAD: u64 = 32;
/// A bucket word: the generation in the top 16 bits, the first entry's offset below.
pub const GEN_SHIFT: u32 = 48;
/// The offset bits of a bucket word.
pub const OFF_MASK: u64 = (1 << GEN_SHIFT) - 1;
/// The highest generation; the next after it is 1.
pub const GEN_MAX: u64 = 0xFFFF;
/// Smallest region a store is made in.
pub const MIN_REGION: u64 = 1 << 20;

/// Entry kinds.
pub const KIND_STRING: u8 = 1;
/// A hash: the value is the field list (see [`crate::store::hash_blob`]), or with
/// [`ENC_TREE`] a tree's handle.
pub const KIND_HASH: u8 = 2;

/// A list.
pub const KIND_LIST: u8 = 3;
/// A set.
pub const KIND_SET: u8 = 4;
/// A sorted set.
pub const KIND_ZSET: u8 = 5;

/// The name `TYPE` gives a kind (and `SCAN ... TYPE` takes).
pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        KIND_STRING => "string",
        KIND_HASH => "hash",
        KIND_LIST => "list",
        KIND_SET => "set",
        KIND_ZSET => "zset",
        _ => "none",
    }
}

/// An entry's value is the whole value (a string's bytes, a small hash's field list).
pub const ENC_PLAIN: u8 = 0;
/// An entry's value is the 16-byte handle of a tree (`tree.rs`) that holds the collection.
pub const ENC_TREE: u8 = 1;
/// A string changed in place (`APPEND`, `SETRANGE`, `SETBIT`), or made whole by a command that
/// makes Redis's `raw` strings: `OBJECT ENCODING` says `raw` whatever it holds. Strings only
/// (a string's value is always whole: its encoding says only how Redis would name it), above
/// 0x7f so that it never reads as a collection's encoding.
pub const ENC_RAW: u8 = 0x80;
/// A string made without a try at Redis's `int` encoding (`INCRBYFLOAT`): `embstr` up to 44
/// bytes, else `raw`. Strings only.
pub const ENC_EMBSTR: u8 = 0x81;
/// A list's value is the 32-byte handle of a chain of nodes (`quicklist.rs`); a list of
/// [`ENC_PLAIN`] holds its elements in its value (`list_pack.rs`).
pub const ENC_QUICKLIST: u8 = 2;
/// A set's value is an intset (`intset.rs`): its members are integers, sorted.
pub const ENC_INTSET: u8 = 3;
/// A set's value is a member list (`member_list.rs`): Redis 7.2's listpack sets.
pub const ENC_LISTPACK: u8 = 4;
/// A sorted set's value is the 32-byte handle of its index (`zindex.rs`): an order tree and a
/// member tree.
pub const ENC_ZSET_INDEX: u8 = 5;

/// The fixed shape of a store, decided at format from the region's size alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Region bytes.
    pub size: u64,
    /// Bytes of the journal (header, range list, undo area).
    pub journal_len: u64,
    /// Offset of the bucket array.
    pub bucket_off: u64,
    /// Buckets (a power of two).
    pub buckets: u64,
    /// First heap byte (a multiple of 64).
    pub heap_off: u64,
    /// One past the last heap byte (a multiple of 16).
    pub heap_end: u64,
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl Geometry {
    /// The geometry a region of `size` bytes gets: a journal of size/64 (256 KiB to 64 MiB), a
    /// bucket per 256 bytes (a power of two, at least 1024), the rest heap.
    pub fn for_size(size: u64) -> Result<Geometry, StoreError> {
        if size < MIN_REGION {
            return Err(StoreError::Layout(format!(
                "a region of {size} bytes is too small for mojim kv: it needs at least {MIN_REGION} \
                 (1 MiB); make a larger one with mojim init --size"
            )));
        }
        let journal_len = round_up((size / 64).clamp(256 << 10, 64 << 20), 4096);
        let buckets = (size / 256).next_power_of_two().clamp(1024, 1 << 32);
        let buckets = if buckets > size / 256 { buckets / 2 } else { buckets }.max(1024);
        let bucket_off = JOURNAL_OFF + journal_len;
        let heap_off = round_up(bucket_off + 8 * buckets, 64);
        let heap_end = size / 16 * 16;
        if heap_off + (64 << 10) > heap_end {
            return Err(StoreError::Layout(format!("a region of {size} bytes leaves no room for a heap")));
        }
        Ok(Geometry { size, journal_len, bucket_off, buckets, heap_off, heap_end })
    }

    /// The static part of the superblock: magic, version, the geometry, then its CRC.
    pub fn encode(&self) -> [u8; STATIC_LEN + 4] {
        let mut b = [0u8; STATIC_LEN + 4];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        for (i, v) in [
            self.size,
            JOURNAL_OFF,
            self.journal_len,
            self.bucket_off,
            self.buckets,
            self.heap_off,
            self.heap_end,
        ]
        .iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..STATIC_LEN]);
        b[STATIC_LEN..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Checks a superblock's static part against a region of `size` bytes; returns the
    /// geometry and the layout version (1 or 2).
    pub fn decode(b: &[u8; STATIC_LEN + 4], size: u64) -> Result<(Geometry, u32), StoreError> {
        let word = |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().expect("8 bytes"));
        if b[0..8] != MAGIC {
            return Err(StoreError::NotKv(format!(
                "region byte 0 holds {:02x?}, not mojim kv's magic \"MOJIM-KV\"",
                &b[0..8]
            )));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version != 1 && version != VERSION {
            return Err(StoreError::Layout(format!(
                "the region holds mojim kv layout version {version}; this build reads versions 1 to {VERSION}"
            )));
        }
        let crc = u32::from_le_bytes(b[STATIC_LEN..].try_into().expect("4 bytes"));
        if crc != crc32c::crc32c(&b[..STATIC_LEN]) {
            return Err(StoreError::Corrupt("the superblock's checksum does not match its fields".into()));
        }
        if word(0) != size {
            return Err(StoreError::Layout(format!(
                "the store was made in a region of {} bytes, but this region has {size}",
                word(0)
            )));
        }
        let g = Geometry::for_size(size)?;
        let found = Geometry {
            size: word(0),
            journal_len: word(2),
            bucket_off: word(3),
            buckets: word(4),
            heap_off: word(5),
            heap_end: word(6),
        };
        if word(1) != JOURNAL_OFF || found != g {
            return Err(StoreError::Corrupt(format!(
                "the superblock's geometry {found:?} is not the one a region of {size} bytes gets ({g:?})"
            )));
        }
        Ok((g, version))
    }

    /// Offset of bucket `b`'s word.
    pub fn bucket(&self, b: u64) -> u64 {
        self.bucket_off + 8 * b
    }

    /// Bytes of undo records the journal holds.
    pub fn undo_capacity(&self) -> u64 {
        self.journal_len - UNDO_AT
    }

    /// Whether `[off, off + len)` lies in the heap.
    pub fn in_heap(&self, off: u64, len: u64) -> bool {
        off >= self.heap_off && off.checked_add(len).is_some_and(|e| e <= self.heap_end)
    }
}

/// Block bytes of each size class: 48, 64, …, 288 in steps of 16, then each a quarter larger
/// than the one before, rounded up to 64.
pub fn class_sizes() -> [u64; CLASSES] {
    let mut s = [0u64; CLASSES];
    for (i, slot) in s.iter_mut().enumerate() {
        *slot = if i < 16 { 48 + 16 * i as u64 } else { 0 };
    }
    for i in 16..CLASSES {
        s[i] = round_up(s[i - 1] + s[i - 1] / 4, 64).min(1 << 56);
    }
    s
}

/// The bucket of a key's hash: the hash's bits mixed (MurmurHash3's finaliser), masked.
pub fn bucket_of(hash: u32, buckets: u64) -> u64 {
    let mut h = hash;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    // Buckets above 2^32 take the high bits from a second mix.
    let wide = (u64::from(h) << 32) | u64::from(h.rotate_left(16) ^ hash);
    wide & (buckets - 1)
}

/// An entry's header (region bytes `e .. e + 32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EntryHead {
    /// The next entry in the bucket's chain (0: none); a free block's next free block.
    pub next: u64,
    /// When the key expires, in Unix milliseconds; 0: never.
    pub expire_ms: u64,
    /// The key's tag ([`super::KeyHasher::locate`]): a chain's other keys are skipped by it.
    pub hash: u32,
    /// Key bytes.
    pub klen: u32,
    /// Value bytes.
    pub vlen: u32,
    /// [`KIND_STRING`], [`KIND_HASH`], [`KIND_LIST`], [`KIND_SET`] or [`KIND_ZSET`].
    pub kind: u8,
    /// The block's size class.
    pub class: u8,
    /// How the value is held: [`ENC_PLAIN`] or [`ENC_TREE`].
    pub encoding: u8,
}

impl EntryHead {
    /// The 32 bytes.
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.next.to_le_bytes());
        b[8..16].copy_from_slice(&self.expire_ms.to_le_bytes());
        b[16..20].copy_from_slice(&self.hash.to_le_bytes());
        b[20..24].copy_from_slice(&self.klen.to_le_bytes());
        b[24..28].copy_from_slice(&self.vlen.to_le_bytes());
        b[28] = self.kind;
        b[29] = self.class;
        b[30] = self.encoding;
        b
    }

    /// Reads 32 bytes.
    pub fn decode(b: &[u8; 32]) -> EntryHead {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        EntryHead {
            next: u64_at(0),
            expire_ms: u64_at(8),
            hash: u32_at(16),
            klen: u32_at(20),
            vlen: u32_at(24),
            kind: b[28],
            class: b[29],
            encoding: b[30],
        }
    }

    /// Whether the key has expired at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expire_ms != 0 && now_ms >= self.expire_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_grow_and_stay_aligned() {
        let s = class_sizes();
        assert_eq!(&s[..3], &[48, 64, 80]);
        assert_eq!(s[15], 288);
        for w in s.windows(2) {
            assert!(w[1] > w[0] && w[1] % 16 == 0, "{w:?}");
        }
        assert!(s[CLASSES - 1] >= 1 << 40);
    }

    #[test]
    fn geometries() {
        let g = Geometry::for_size(64 << 20).unwrap();
        assert_eq!(g.journal_len, 1 << 20);
        assert_eq!(g.buckets, 1 << 18);
        assert!(g.heap_off.is_multiple_of(64) && g.heap_off >= g.bucket_off + 8 * g.buckets);
        let b = g.encode();
        assert_eq!(Geometry::decode(&b, 64 << 20).unwrap(), (g, VERSION));
        assert!(Geometry::decode(&b, 32 << 20).unwrap_err().to_string().contains("67108864"));
        let g = Geometry::for_size(1 << 20).unwrap();
        assert_eq!(g.buckets, 4096);
        assert!(Geometry::for_size(1000).unwrap_err().to_string().contains("1000"));
        let g = Geometry::for_size((1 << 30) + 12345).unwrap();
        assert_eq!(g.buckets, 1 << 22);
    }

    #[test]
    fn buckets_spread() {
        let n = 1 << 12;
        let mut count = vec![0u32; n];
        for i in 0..(n * 4) {
            count[bucket_of(crc32c::crc32c(format!("key:{i:012}").as_bytes()), n as u64) as usize] += 1;
        }
        assert!(*count.iter().max().unwrap() < 20, "max chain {}", count.iter().max().unwrap());
    }

    #[test]
    fn format_md_says_what_the_code_does() {
        let doc = include_str!("../../../../docs/FORMAT.md");
        let sec = &doc[doc.find("## 11. Key-value store").expect("FORMAT.md has section 11")..];
        let row = |field: &str| {
            sec.lines()
                .find(|l| l.contains(&format!("| `{field}` |")))
                .unwrap_or_else(|| panic!("no row {field}"))
        };
        let off = |field: &str| -> u64 { row(field).split('|').nth(1).unwrap().trim().parse().unwrap() };
        assert!(row("magic").contains(std::str::from_utf8(&MAGIC).unwrap()));
        assert!(row("version").contains(&format!("| {VERSION} (1: ")));
        assert_eq!(off("hash_key"), HASH_KEY_OFF as u64);
        assert_eq!(off("hash_key_crc"), HASH_KEY_CRC_OFF as u64);
        assert!(sec.contains(&format!("| {HEAD_LEN} | 28 | reserved |")));
        assert_eq!(off("crc"), CRC_OFF);
        assert_eq!(off("heap_top"), DYN_OFF);
        assert_eq!(off("heads"), DYN_OFF + HEADS_AT as u64);
        assert!(sec.contains(&format!("| {} | 2304 | reserved |", DYN_OFF + DYN_LEN)));
        assert_eq!(off("db_keys"), DYN_OFF + DB_AT as u64);
        assert_eq!(off("db_map"), DYN_OFF + DB_AT as u64 + 320);
        assert_eq!(off("stale_keys"), DYN_OFF + DB_AT as u64 + 336);
        assert_eq!(off("acl"), DYN_OFF + ACL_AT as u64);
        assert_eq!(off("lazyfree_head"), DYN_OFF + LAZYFREE_AT as u64);
        assert_eq!(off("lazyfree_pending"), DYN_OFF + LAZYFREE_AT as u64 + 8);
        assert!(row("heads").contains(&format!("8 × {CLASSES}")));
        assert_eq!(off("undo_len"), 0);
        assert!(sec.contains(&format!("| {UNDO_AT} | J − {UNDO_AT} | undo area |")));
        assert!(sec.contains(&format!("| 64 | 16 × {LIST_MAX} | list |")));
        assert_eq!(off("kind"), 28);
        assert_eq!(off("class"), 29);
        assert_eq!(off("encoding"), 30);
        let e =
            EntryHead { next: 1, expire_ms: 2, hash: 3, klen: 4, vlen: 5, kind: 6, class: 7, encoding: 8 }
                .encode();
        assert_eq!((e[8], e[16], e[20], e[24], e[28], e[29], e[30]), (2, 3, 4, 5, 6, 7, 8));
        let s = class_sizes();
        assert!(sec.contains(&format!("({}, {}, {}, {}, {}, ...", s[15], s[16], s[17], s[18], s[19])));
    }
}
