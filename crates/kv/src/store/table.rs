//! The hash table: buckets of chained entries, found by CRC32C of the key.
//!
//! Every change is copy-on-write at the entry: a new or changed value gets a new block, written
//! fresh, and one in-place store of a link (the bucket word or the previous entry's `next`)
//! publishes it; the old block is freed. In-place stores of an entry are its `next`, its
//! expiry, and a value that fits its block (`APPEND` into the slack; `INCR`), each undo-logged.

use super::error::StoreError;
use super::layout::{EntryHead, ENC_PLAIN, ENC_TREE, ENTRY_HEAD, GEN_MAX, GEN_SHIFT, OFF_MASK};
use super::mem::Mem;
use super::tree::Tree;
use super::Store;

/// An entry found in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Offset of the entry's block.
    pub entry: u64,
    /// Its header.
    pub head: EntryHead,
    /// The word that points at it: a bucket word, or the previous entry's `next`.
    pub link: u64,
    /// Whether `link` is a bucket word (which carries the generation).
    pub link_is_bucket: bool,
}

impl Found {
    /// Offset of the value's first byte.
    pub fn value_off(&self) -> u64 {
        self.entry + ENTRY_HEAD + u64::from(self.head.klen)
    }
}

impl<M: Mem> Store<M> {
    pub(crate) fn read_head(&self, e: u64) -> Result<EntryHead, StoreError> {
        if !self.geo.in_heap(e, ENTRY_HEAD) {
            return Err(StoreError::Corrupt(format!("a link points at {e}, outside the heap")));
        }
        let mut b = [0u8; 32];
        self.mem.read(e, &mut b)?;
        let h = EntryHead::decode(&b);
        let size = self.classes.get(h.class as usize).copied().unwrap_or(0);
        let len = ENTRY_HEAD + u64::from(h.klen) + u64::from(h.vlen);
        if len > size || !self.geo.in_heap(e, size) {
            return Err(StoreError::Corrupt(format!(
                "the entry at {e} says class {} and {len} bytes, which do not fit",
                h.class
            )));
        }
        Ok(h)
    }

    /// The entry of `key` in the selected database, expired or not.
    pub fn find(&mut self, key: &[u8]) -> Result<Option<Found>, StoreError> {
        self.with_key(key, |s, k| s.find_stored(k))
    }

    /// The entry whose stored key (database prefix included) is `key`.
    pub(crate) fn find_stored(&mut self, key: &[u8]) -> Result<Option<Found>, StoreError> {
        let (b, hash) = self.hasher.locate(key, self.geo.buckets);
        let bucket = self.geo.bucket(b);
        let word = self.read_u64(bucket)?;
        if word >> GEN_SHIFT != self.dy.gen {
            return Ok(None);
        }
        let (mut e, mut link, mut link_is_bucket) = (word & OFF_MASK, bucket, true);
        let mut steps = 0u64;
        while e != 0 {
            let head = self.read_head(e)?;
            if head.hash == hash && head.klen as usize == key.len() {
                let mut k = std::mem::take(&mut self.key_buf);
                k.resize(key.len(), 0);
                let r = self.mem.read(e + ENTRY_HEAD, &mut k);
                let same = k == key;
                self.key_buf = k;
                r?;
                if same {
                    return Ok(Some(Found { entry: e, head, link, link_is_bucket }));
                }
            }
            steps += 1;
            if steps > self.dy.keys + 1 {
                return Err(StoreError::Corrupt(format!(
                    "bucket chain at {bucket} is longer than the key count"
                )));
            }
            (link, link_is_bucket, e) = (e, false, head.next);
        }
        Ok(None)
    }

    /// The live (not expired) entry of `key`.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Result<Option<Found>, StoreError> {
        Ok(self.find(key)?.filter(|f| !f.head.expired(now_ms)))
    }

    fn set_link(&mut self, link: u64, is_bucket: bool, target: u64) -> Result<(), StoreError> {
        let word = if is_bucket && target != 0 { self.dy.gen << GEN_SHIFT | target } else { target };
        self.meta(link, &word.to_le_bytes())?;
        if is_bucket && target != 0 {
            self.batch.gen_words.push(link);
        }
        Ok(())
    }

    /// Writes a new entry (the value given in parts, `spare` more bytes of room after it) and
    /// links it in place of `old` (whose value is dropped: a tree it holds is freed, at once or
    /// in the background, as [`Store::remove`] frees it), or at the
    /// head of its bucket. Returns it.
    pub fn put(
        &mut self,
        key: &[u8],
        kind: u8,
        expire_ms: u64,
        value: &[&[u8]],
        spare: u64,
        old: Option<&Found>,
    ) -> Result<Found, StoreError> {
        self.put_encoded(key, kind, ENC_PLAIN, expire_ms, value, spare, old)
    }

    /// As [`Store::put`], with the value's encoding (`ENC_TREE`: `value` is a tree's handle,
    /// which the entry then owns).
    #[allow(clippy::too_many_arguments)]
    pub fn put_encoded(
        &mut self,
        key: &[u8],
        kind: u8,
        encoding: u8,
        expire_ms: u64,
        value: &[&[u8]],
        spare: u64,
        old: Option<&Found>,
    ) -> Result<Found, StoreError> {
        self.with_key(key, |s, k| s.put_stored(k, kind, encoding, expire_ms, value, spare, old))
    }

    #[allow(clippy::too_many_arguments)]
    fn put_stored(
        &mut self,
        key: &[u8],
        kind: u8,
        encoding: u8,
        expire_ms: u64,
        value: &[&[u8]],
        spare: u64,
        old: Option<&Found>,
    ) -> Result<Found, StoreError> {
        let vlen: u64 = value.iter().map(|p| p.len() as u64).sum();
        if key.len() > u32::MAX as usize || vlen > u64::from(u32::MAX) {
            return Err(StoreError::TooLarge(format!(
                "an entry of a {}-byte key and {vlen}-byte value is larger than an entry may be (4 GiB)",
                key.len()
            )));
        }
        let (b, hash) = self.hasher.locate(key, self.geo.buckets);
        let need = ENTRY_HEAD + key.len() as u64 + vlen;
        let block = match self.alloc(need + spare) {
            Ok(b) => b,
            Err(StoreError::Full { .. }) if spare > 0 => self.alloc(need)?,
            Err(e) => return Err(e),
        };
        let (link, link_is_bucket, next) = match old {
            Some(o) => (o.link, o.link_is_bucket, o.head.next),
            None => {
                let bucket = self.geo.bucket(b);
                let word = self.read_u64(bucket)?;
                let next = if word >> GEN_SHIFT == self.dy.gen { word & OFF_MASK } else { 0 };
                (bucket, true, next)
            }
        };
        let head = EntryHead {
            next,
            expire_ms,
            hash,
            klen: key.len() as u32,
            vlen: vlen as u32,
            kind,
            class: block.class,
            encoding,
        };
        let mut buf = std::mem::take(&mut self.key_buf);
        buf.clear();
        buf.extend_from_slice(&head.encode());
        buf.extend_from_slice(key);
        let e = block.off;
        let r = if block.untouched {
            self.fresh(e, &buf)
        } else {
            self.fresh(e + 8, &buf[8..]).and_then(|()| self.meta(e, &next.to_le_bytes()))
        };
        self.key_buf = buf;
        r?;
        let mut at = e + ENTRY_HEAD + key.len() as u64;
        for p in value {
            self.fresh(at, p)?;
            at += p.len() as u64;
        }
        self.set_link(link, link_is_bucket, e)?;
        if let Some(o) = old {
            self.count_key(o.entry, &o.head, -1)?;
            self.release(o)?;
        } else {
            self.dy.keys += 1;
        }
        self.count_key(e, &head, 1)?;
        Ok(Found { entry: e, head, link, link_is_bucket })
    }

    /// Unlinks and frees an entry, and what its value holds (a tree): at once, or in the
    /// background when that is large work (`lazyfree.rs`).
    pub fn remove(&mut self, f: &Found) -> Result<(), StoreError> {
        self.set_link(f.link, f.link_is_bucket, f.head.next)?;
        self.count_key(f.entry, &f.head, -1)?;
        self.release(f)?;
        self.dy.keys = self.dy.keys.saturating_sub(1);
        Ok(())
    }

    /// Unlinks and frees an entry but not what its value holds: its tree goes on, owned by
    /// whatever the caller gives its handle to (RENAME).
    pub fn unlink(&mut self, f: &Found) -> Result<(), StoreError> {
        self.set_link(f.link, f.link_is_bucket, f.head.next)?;
        self.count_key(f.entry, &f.head, -1)?;
        self.free(f.entry, f.head.class)?;
        self.dy.keys = self.dy.keys.saturating_sub(1);
        Ok(())
    }

    /// The tree an entry's value is the handle of, if it is one.
    pub fn tree_of(&self, f: &Found) -> Result<Option<Tree>, StoreError> {
        if f.head.encoding != ENC_TREE {
            return Ok(None);
        }
        let mut b = [0u8; Tree::LEN];
        if f.head.vlen as usize != Tree::LEN {
            return Err(StoreError::Corrupt(format!(
                "the entry at {} holds a tree handle of {} bytes",
                f.entry, f.head.vlen
            )));
        }
        self.read_value(f, 0, &mut b)?;
        Ok(Tree::decode(&b))
    }

    /// Frees what an entry's value holds outside its block.
    pub(super) fn drop_value(&mut self, f: &Found) -> Result<(), StoreError> {
        if let Some(t) = self.tree_of(f)? {
            self.tree_free(&t)?;
        }
        if (f.head.kind, f.head.encoding) == (super::layout::KIND_LIST, super::layout::ENC_QUICKLIST) {
            let ql = self.list_of(f)?;
            self.ql_free(&ql)?;
        }
        if let Some(z) = self.zindex_of(f)? {
            self.zindex_free(&z)?;
        }
        Ok(())
    }

    /// Stores a changed tree's handle in its entry, in place.
    pub fn set_tree(&mut self, f: &mut Found, t: &Tree) -> Result<(), StoreError> {
        debug_assert_eq!(f.head.encoding, ENC_TREE);
        self.meta(f.value_off(), &t.encode())
    }

    /// Sets an entry's expiry (0: never), in place.
    pub fn set_expire(&mut self, f: &mut Found, expire_ms: u64) -> Result<(), StoreError> {
        self.count_expiry(f.entry, &f.head, expire_ms)?;
        self.meta(f.entry + 8, &expire_ms.to_le_bytes())?;
        f.head.expire_ms = expire_ms;
        Ok(())
    }

    /// Room after the value in the entry's block.
    pub fn slack(&self, f: &Found) -> u64 {
        self.class_size(f.head.class) - (ENTRY_HEAD + u64::from(f.head.klen) + u64::from(f.head.vlen))
    }

    /// Appends `more` to the value in the block's slack (the caller checked it fits).
    pub fn append_in_place(&mut self, f: &mut Found, more: &[u8]) -> Result<(), StoreError> {
        debug_assert!(more.len() as u64 <= self.slack(f));
        self.fresh(f.value_off() + u64::from(f.head.vlen), more)?;
        let vlen = f.head.vlen + more.len() as u32;
        self.meta(f.entry + 24, &vlen.to_le_bytes())?;
        f.head.vlen = vlen;
        Ok(())
    }

    /// Replaces a short value with `value` in its block (the caller checked it fits).
    pub fn overwrite_in_place(&mut self, f: &mut Found, value: &[u8]) -> Result<(), StoreError> {
        self.meta(f.value_off(), value)?;
        if value.len() as u32 != f.head.vlen {
            self.meta(f.entry + 24, &(value.len() as u32).to_le_bytes())?;
            f.head.vlen = value.len() as u32;
        }
        Ok(())
    }

    /// Copies `len` value bytes from `at` (relative to the value) into `out`.
    pub fn read_value(&self, f: &Found, at: u64, out: &mut [u8]) -> Result<(), StoreError> {
        self.mem.read(f.value_off() + at, out)
    }

    /// Appends the whole value to `out`.
    pub fn value_into(&self, f: &Found, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let start = out.len();
        out.resize(start + f.head.vlen as usize, 0);
        self.mem.read(f.value_off(), &mut out[start..])
    }

    /// Empties the table: a new bucket generation (every bucket word of the old one reads as
    /// empty), an empty heap. The old words are zeroed later by [`Store::sweep`], between
    /// batches (the caller sweeps after a batch that flushed, before the next one runs).
    ///
    /// The generation moves on at most once a batch: it has 16 bits, and a transaction (or
    /// anything else that runs in one batch) flushing 65 535 times would bring it back to a
    /// value whose words are still there. A second flush in one batch instead zeroes the
    /// words set to the current generation since the first (every one of them was set in
    /// this batch), undo-logged like any store.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        // The users are no keys: their record is written again in the emptied heap.
        let acl = self.acl_record()?;
        if self.batch.flushed {
            for i in self.batch.gen_words_from..self.batch.gen_words.len() {
                let at = self.batch.gen_words[i];
                let word = self.read_u64(at)?;
                if word != 0 && word >> GEN_SHIFT == self.dy.gen {
                    self.meta(at, &0u64.to_le_bytes())?;
                }
            }
        } else {
            self.dy.gen = if self.dy.gen >= GEN_MAX { 1 } else { self.dy.gen + 1 };
        }
        self.batch.gen_words_from = self.batch.gen_words.len();
        self.dy.heap_top = self.geo.heap_off;
        self.dy.keys = 0;
        self.dy.used = 0;
        self.dy.stale = 1;
        let d = &mut self.dy.dbs;
        (d.keys, d.expires, d.stale_keys) = ([0; super::layout::DBS], [0; super::layout::DBS], 0);
        self.dy.heads = [0; super::layout::CLASSES];
        // Values waiting to be freed lay in the heap just emptied.
        (self.dy.lazyfree_head, self.dy.lazyfree_pending) = (0, 0);
        self.batch.frees_from = self.batch.frees.len();
        self.batch.flushed = true;
        self.keep_acl_over_flush(acl)
    }

    /// Calls `f(entry, head)` for every entry of bucket `b` (expired ones too).
    pub fn bucket_entries(
        &mut self,
        b: u64,
        f: impl FnMut(&mut Self, u64, &EntryHead) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let word = self.read_u64(self.geo.bucket(b))?;
        self.chain_entries(b, word, f)
    }

    /// The first bucket of `from .. to` that holds a chain (of the current generation), or
    /// `to` (at most the bucket count) if none does. The words are read 512 at a time into the
    /// stack: most buckets of a large region are empty, and skipping them costs little more
    /// than reading 8 bytes each (`SCAN`, `KEYS`).
    pub fn next_used_bucket(&mut self, from: u64, to: u64) -> Result<u64, StoreError> {
        const SLICE: u64 = 512;
        let to = to.min(self.geo.buckets);
        let mut words = [0u8; 8 * SLICE as usize];
        let mut b = from;
        while b < to {
            let n = SLICE.min(to - b) as usize;
            self.mem.read(self.geo.bucket(b), &mut words[..8 * n])?;
            for (i, w) in words[..8 * n].chunks_exact(8).enumerate() {
                let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                if w != 0 && w >> GEN_SHIFT == self.dy.gen {
                    return Ok(b + i as u64);
                }
            }
            b += n as u64;
        }
        Ok(to)
    }

    /// As [`Store::bucket_entries`], for bucket `b` whose word was read already.
    fn chain_entries(
        &mut self,
        b: u64,
        word: u64,
        mut f: impl FnMut(&mut Self, u64, &EntryHead) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if word >> GEN_SHIFT != self.dy.gen {
            return Ok(());
        }
        let mut e = word & OFF_MASK;
        let mut steps = 0u64;
        while e != 0 {
            let head = self.read_head(e)?;
            f(self, e, &head)?;
            steps += 1;
            if steps > self.dy.keys + 1 {
                return Err(StoreError::Corrupt(format!("bucket {b}'s chain is longer than the key count")));
            }
            e = head.next;
        }
        Ok(())
    }

    /// Whether an expiry pass may find anything: a key with an expiry, or one of a flushed
    /// database.
    pub fn expiring(&self) -> bool {
        self.dy.dbs.stale_keys > 0 || self.dy.dbs.expires.iter().any(|&x| x > 0)
    }

    /// Removes the expired entries (and those of flushed databases) of buckets `from ..` (at
    /// most `max` buckets) while `room`, calling `expired(database, key)` for each key that
    /// expired (not those of flushed databases),
    /// says the batch has room for another removal; returns the next bucket to look at (the
    /// bucket where it stopped, if `room` stopped it; `None` after the last bucket) and how
    /// many were removed. However many keys expire at once, a pass never takes more of the
    /// batch than `room` allows: the rest wait for the next pass.
    pub fn expire_buckets(
        &mut self,
        from: u64,
        max: u64,
        now_ms: u64,
        room: impl Fn(&Self) -> bool,
        mut expired: impl FnMut(usize, &[u8]),
    ) -> Result<(Option<u64>, u64), StoreError> {
        let end = (from + max).min(self.geo.buckets);
        let mut removed = 0;
        let mut victims = Vec::new();
        // The bucket words are read a slice at a time: most buckets are empty, or hold no key
        // that expires, and a pass over them costs little more than a copy of the array.
        const SLICE: u64 = 4096;
        let mut words = vec![0u8; 8 * SLICE.min(end.saturating_sub(from)) as usize];
        for b in from..end {
            let i = ((b - from) % SLICE) as usize;
            if i == 0 {
                let n = SLICE.min(end - b) as usize;
                self.mem.read(self.geo.bucket(b), &mut words[..8 * n])?;
            }
            let word = u64::from_le_bytes(words[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            if word == 0 {
                continue;
            }
            victims.clear();
            let stale = self.dy.dbs.stale_keys > 0;
            self.chain_entries(b, word, |s, e, h| {
                // Expired, or of a database flushed since (its generation is not the current).
                if (h.expired(now_ms) && !s.keeps_expired(e, h)?) || (stale && !s.entry_db(e, h)?.1) {
                    let mut k = Vec::new();
                    s.stored_key_into(e, h, &mut k)?;
                    victims.push(k);
                }
                Ok(())
            })?;
            for k in &victims {
                if !room(self) {
                    return Ok((Some(b), removed));
                }
                if let Some(f) = self.find_stored(k)? {
                    self.remove(&f)?;
                    removed += 1;
                    if let Some((db, key)) = self.logical_key(k) {
                        expired(db, key);
                    }
                }
            }
        }
        Ok(((end < self.geo.buckets).then_some(end), removed))
    }
}
