//! The store: a hash table and an allocator laid out in a region (docs/FORMAT.md §11), changed
//! in batches whose every change is named, so that the caller can make each batch one atomic
//! `gmsync` group, and repaired at open from an undo journal inside the region.
//!
//! Use: [`Store::open`] (makes a store in a zeroed region, or repairs a cut batch), send
//! [`Store::take_resend`] as one group, then per turn run commands ([`Store::find`],
//! [`Store::put`], …, each between a [`Store::savepoint`] and, if it fails,
//! [`Store::rollback_to`]), [`Store::seal`], send the group, and only then answer. A [`Found`]
//! is valid until the next change to the table.

pub mod acl;
mod alloc;
mod dynamic;
mod error;
pub mod hash_blob;
pub mod intset;
mod journal;
mod key_hash;
mod keyspace;
pub mod layout;
mod lazyfree;
pub mod list_pack;
mod mem;
pub mod member_list;
mod node;
pub mod quicklist;
mod random;
mod strings;
mod table;
#[cfg(test)]
mod tests;
pub mod tree;
pub mod zindex;
pub mod zset_blob;
pub mod ztree;

pub use dynamic::Dynamic;
pub use error::StoreError;
pub use journal::{coalesce, Savepoint};
pub use key_hash::KeyHasher;
pub use layout::{
    kind_name, EntryHead, Geometry, DBS, ENC_EMBSTR, ENC_INTSET, ENC_LISTPACK, ENC_PLAIN, ENC_QUICKLIST,
    ENC_RAW, ENC_TREE, ENC_ZSET_INDEX, KIND_HASH, KIND_LIST, KIND_SET, KIND_STRING, KIND_ZSET,
};
pub use lazyfree::LAZYFREE_THRESHOLD;
pub use mem::{Mem, VecMem};
pub use quicklist::QuickList;
pub use table::Found;
pub use tree::Tree;
pub use zindex::ZIndex;
pub use ztree::{key_cmp, score_cmp, Lex, ZBound, ZCursor};

use journal::Batch;
use layout::{
    class_sizes, CLASSES, CRC_OFF, DYN_LEN, DYN_OFF, GEN_SHIFT, HASH_KEY_CRC_OFF, HASH_KEY_OFF, HEAD_LEN,
    JOURNAL_HEAD, JOURNAL_OFF, STATIC_LEN, SUPER_LEN, VERSION,
};
use mojim::Range;

/// What opening found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// The region held no store: one was made.
    pub formatted: bool,
    /// Undo records applied: a batch had been cut short by a crash.
    pub undone: usize,
    /// The last batch's number.
    pub batch: u64,
}

/// A store in a memory.
pub struct Store<M: Mem> {
    mem: M,
    geo: Geometry,
    hasher: KeyHasher,
    classes: [u64; CLASSES],
    /// The state as the batch has it.
    dy: Dynamic,
    /// The state as the region holds it (the last sealed batch's).
    committed: Dynamic,
    batch: Batch,
    batch_no: u64,
    /// The group `seal` returns (reused).
    group: Vec<Range>,
    undo_buf: Vec<u8>,
    key_buf: Vec<u8>,
    resend: Vec<Range>,
    opened: Opened,
    /// Layout version 2: keys carry their database (`keyspace.rs`).
    prefixed: bool,
    /// The logical database commands work in.
    selected: usize,
    /// A logical database whose expired keys [`Store::expire_buckets`] leaves in place (the
    /// stage of a live slot move, `cmd::cluster_stage`: its keys go only when the move says so).
    keep_expired: Option<usize>,
    /// A stored key being built (reused).
    ikey_buf: Vec<u8>,
    /// Stores made since the store was opened.
    stores: u64,
    /// A page to read a tree node into, kept between commands so that the hot paths neither
    /// allocate nor zero one (`node.rs`).
    spare_page: std::cell::Cell<Option<Box<node::Page>>>,
}

impl<M: Mem> Store<M> {
    /// Opens the store in `mem`: makes one if the superblock is all zero (or a making of one
    /// was cut short), else checks it and undoes a batch a crash cut short. `max_ranges` is the
    /// most ranges one group may have (`[limits] max_ranges`).
    pub fn open(mem: M, max_ranges: usize) -> Result<Store<M>, StoreError> {
        Store::open_with(mem, max_ranges, true).map(|s| s.expect("opening with format always gives a store"))
    }

    /// Undoes a batch a crash cut short, as [`Store::open`] does, but makes no store where there
    /// is none (`None`): for the region file before the primary opens it, so that bytes are
    /// only ever written there by a process that is the primary.
    pub fn repair(mem: M, max_ranges: usize) -> Result<Option<Opened>, StoreError> {
        Ok(Store::open_with(mem, max_ranges, false)?.map(|s| s.opened.clone()))
    }

    fn open_with(mem: M, max_ranges: usize, format: bool) -> Result<Option<Store<M>>, StoreError> {
        let size = mem.size();
        let mut page = vec![0u8; SUPER_LEN.min(size) as usize];
        mem.read(0, &mut page)?;
        let unfinished =
            page[..8] == [0; 8] && page[8..12] == VERSION.to_le_bytes() && page[16..24] == size.to_le_bytes();
        let mut opened = Opened::default();
        if page.iter().all(|&b| b == 0) || unfinished {
            if !format {
                return Ok(None);
            }
            Store::format(&mem)?;
            opened.formatted = true;
        } else if page[..8] != layout::MAGIC {
            let at = page.iter().position(|&b| b != 0).unwrap_or(0);
            return Err(StoreError::NotKv(format!(
                "the region's first page holds data (byte {at} is {:#04x}) but no mojim kv store (no magic \
                 \"MOJIM-KV\" at byte 0)",
                page[at]
            )));
        }
        let mut head = [0u8; HEAD_LEN];
        mem.read(0, &mut head)?;
        let (geo, version) =
            Geometry::decode(head[..STATIC_LEN + 4].try_into().expect("the static part"), size)?;
        let hasher = match version {
            1 => KeyHasher::Crc32c,
            _ => {
                let key: [u8; 16] = head[HASH_KEY_OFF..HASH_KEY_OFF + 16].try_into().expect("16 bytes");
                let crc = u32::from_le_bytes(head[HASH_KEY_CRC_OFF..].try_into().expect("4 bytes"));
                if crc != crc32c::crc32c(&key) {
                    return Err(StoreError::Corrupt(
                        "the superblock's hash key does not match its checksum (bytes 80 .. 100)".into(),
                    ));
                }
                KeyHasher::from_bytes(&key)
            }
        };
        let mut dyb = [0u8; DYN_LEN as usize];
        mem.read(DYN_OFF, &mut dyb)?;
        let dy = Dynamic::decode(&dyb);
        let mut s = Store {
            mem,
            geo,
            hasher,
            classes: class_sizes(),
            committed: dy.clone(),
            dy,
            batch: Batch::default(),
            batch_no: 0,
            group: Vec::new(),
            undo_buf: Vec::new(),
            key_buf: Vec::new(),
            resend: Vec::new(),
            opened,
            prefixed: version >= 2,
            selected: 0,
            keep_expired: None,
            ikey_buf: Vec::new(),
            stores: 0,
            spare_page: std::cell::Cell::new(None),
        };
        s.batch_no = s.read_u64(JOURNAL_OFF + 8)?;
        if s.read_u64(JOURNAL_OFF)? != 0 {
            s.opened.undone = s.roll_back_cut_batch(max_ranges)?;
            s.mem.read(DYN_OFF, &mut dyb)?;
            s.dy = Dynamic::decode(&dyb);
            s.committed = s.dy.clone();
        }
        s.check_dynamic()?;
        if !s.prefixed && s.dy.dbs.keys[0] != s.dy.keys {
            s.count_version_1_keys()?;
        }
        s.resend = s.listed_group()?;
        s.opened.batch = s.batch_no;
        Ok(Some(s))
    }

    fn check_dynamic(&self) -> Result<(), StoreError> {
        let d = &self.dy;
        let g = &self.geo;
        if d.heap_top < g.heap_off || d.heap_top > g.heap_end || d.gen == 0 || d.gen > layout::GEN_MAX {
            return Err(StoreError::Corrupt(format!(
                "the superblock says heap top {} (heap {}..{}) and generation {}",
                d.heap_top, g.heap_off, g.heap_end, d.gen
            )));
        }
        let mut seen = [false; layout::DBS];
        for &m in &d.dbs.map {
            if self.prefixed && (m as usize >= layout::DBS || std::mem::replace(&mut seen[m as usize], true))
            {
                return Err(StoreError::Corrupt(format!(
                    "the databases' map {:?} is not a permutation",
                    d.dbs.map
                )));
            }
        }
        if (d.lazyfree_head == 0) != (d.lazyfree_pending == 0)
            || (d.lazyfree_head != 0 && !g.in_heap(d.lazyfree_head, layout::ENTRY_HEAD))
        {
            return Err(StoreError::Corrupt(format!(
                "the superblock's pending-free list starts at {} and counts {} values",
                d.lazyfree_head, d.lazyfree_pending
            )));
        }
        for (c, &h) in d.heads.iter().enumerate() {
            if h != 0 && !g.in_heap(h, self.classes[c]) {
                return Err(StoreError::Corrupt(format!(
                    "class {c}'s free list starts at {h}, outside the heap"
                )));
            }
        }
        Ok(())
    }

    /// Writes a new, empty store: the superblock (magic last) and an empty journal that lists
    /// the superblock and itself, so the first open sends them.
    fn format(mem: &M) -> Result<(), StoreError> {
        let size = mem.size();
        let geo = Geometry::for_size(size)?;
        mem.write(0, &[0u8; 8])?;
        let stat = geo.encode();
        mem.write(8, &stat[8..])?;
        let key = KeyHasher::random().to_bytes();
        let mut keyed = [0u8; HEAD_LEN - HASH_KEY_OFF];
        keyed[..16].copy_from_slice(&key);
        keyed[16..].copy_from_slice(&crc32c::crc32c(&key).to_le_bytes());
        mem.write(HASH_KEY_OFF as u64, &keyed)?;
        debug_assert_eq!(CRC_OFF as usize, STATIC_LEN);
        mem.write(DYN_OFF, &Dynamic::fresh(geo.heap_off).encode())?;
        let mut head = [0u8; JOURNAL_HEAD as usize + 16];
        head[16..24].copy_from_slice(&1u64.to_le_bytes());
        head[JOURNAL_HEAD as usize..JOURNAL_HEAD as usize + 8].copy_from_slice(&0u64.to_le_bytes());
        head[JOURNAL_HEAD as usize + 8..].copy_from_slice(&SUPER_LEN.to_le_bytes());
        mem.write(JOURNAL_OFF, &head)?;
        mem.write(0, &stat[..8])?;
        Ok(())
    }

    /// What opening found and did.
    pub fn opened(&self) -> &Opened {
        &self.opened
    }

    /// The group to send before serving: the last batch's ranges, or those a repair restored.
    pub fn take_resend(&mut self) -> Vec<Range> {
        std::mem::take(&mut self.resend)
    }

    /// The memory underneath.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// The store's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// How the store hashes keys (and the members of its collections).
    pub fn hasher(&self) -> KeyHasher {
        self.hasher
    }

    /// Tests: gives an empty store made with version 2 the hash key `k0`, `k1` (so that a run
    /// is the same every time), in its superblock too.
    #[cfg(test)]
    pub(crate) fn set_hash_key(&mut self, k0: u64, k1: u64) {
        assert_eq!(self.keys(), 0);
        let h = KeyHasher::Keyed { k0, k1 };
        let key = h.to_bytes();
        self.mem.write(HASH_KEY_OFF as u64, &key).unwrap();
        self.mem.write(HASH_KEY_CRC_OFF as u64, &crc32c::crc32c(&key).to_le_bytes()).unwrap();
        self.hasher = h;
    }

    /// Keys in the table (expired ones not yet removed included).
    pub fn keys(&self) -> u64 {
        self.dy.keys
    }

    /// Bytes of the blocks holding entries.
    pub fn used_bytes(&self) -> u64 {
        self.dy.used
    }

    /// Bytes of the heap given out so far (the top), from its start.
    pub fn heap_top_bytes(&self) -> u64 {
        self.dy.heap_top - self.geo.heap_off
    }

    /// A range whose sending changes nothing (the journal's `undo_len`, 0 between batches):
    /// a group of it is a barrier, acknowledged only by a mirror that still takes this
    /// primary's groups.
    pub fn barrier(&self) -> Range {
        Range::new(JOURNAL_OFF, 8)
    }

    /// Whether old bucket words remain to be zeroed by [`Store::sweep`].
    pub fn stale(&self) -> bool {
        self.dy.stale != 0
    }

    /// Zeroes the bucket words of older generations among buckets `from .. from + max`
    /// (logically they are empty already, so these stores need no undo and belong to no
    /// batch); returns the next bucket (0 after the last) and the group to send, of at most
    /// `max_ranges` ranges. Call only
    /// between batches. After the last bucket, the next batch records that none remain.
    pub fn sweep(&mut self, from: u64, max: u64, max_ranges: usize) -> Result<(u64, Vec<Range>), StoreError> {
        assert!(!self.dirty(), "sweep inside a batch");
        let end = (from + max).min(self.geo.buckets);
        let mut words = vec![0u8; 8 * (end - from) as usize];
        self.mem.read(self.geo.bucket(from), &mut words)?;
        let mut raw = Vec::new();
        for (i, w) in words.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            if w != 0 && w >> GEN_SHIFT != self.dy.gen {
                let at = self.geo.bucket(from + i as u64);
                self.mem.write(at, &[0u8; 8])?;
                raw.push((at, 8));
            }
        }
        let mut group = Vec::new();
        coalesce(&mut raw, max_ranges.max(1), &mut group);
        if end >= self.geo.buckets {
            self.dy.stale = 0;
            return Ok((0, group));
        }
        Ok((end, group))
    }
}
