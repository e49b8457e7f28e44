//! The databases (`SELECT 0` .. `SELECT 15`) and the keys of each. In a store of layout
//! version 2 an entry's stored key is its physical database (u8), that database's generation
//! (u32) and the key (FORMAT.md §11.2): the table is one, shared by all databases, and a key is
//! found under the prefix of the database selected. `FLUSHDB` of one database among others moves
//! its generation on, so that its keys are gone at once and later removed a batch's room at a
//! time (`Store::expire_buckets`); `SWAPDB` swaps two entries of the logical-to-physical map.
//! A store of version 1 has one database and unprefixed keys.

use super::error::StoreError;
use super::layout::{EntryHead, DBS, ENTRY_HEAD, KEY_PREFIX};
use super::mem::Mem;
use super::Store;

impl<M: Mem> Store<M> {
    /// Databases the store holds: 16, or 1 for a store of layout version 1.
    pub fn databases(&self) -> usize {
        if self.prefixed {
            DBS
        } else {
            1
        }
    }

    /// The database commands work in from now on (`SELECT`): keys are found, stored and listed
    /// in it. Panics past [`Store::databases`] (the caller checks the client's number).
    pub fn select(&mut self, db: usize) {
        assert!(db < self.databases(), "database {db} of {}", self.databases());
        self.selected = db;
    }

    /// The database selected.
    pub fn selected(&self) -> usize {
        self.selected
    }

    /// From now on [`Store::expire_buckets`] leaves the expired keys of logical database `db`
    /// where they are (`None`: it removes every expired key). Lookups still see them expired.
    pub fn keep_expired_in(&mut self, db: Option<usize>) {
        self.keep_expired = db.filter(|&d| d < self.databases());
    }

    /// Whether the entry at `e` is of the database whose expired keys stay.
    pub(crate) fn keeps_expired(&self, e: u64, head: &EntryHead) -> Result<bool, StoreError> {
        match self.keep_expired {
            Some(db) => Ok(self.entry_db(e, head)?.0 == self.phys(db)),
            None => Ok(false),
        }
    }

    /// The physical database of logical database `db`.
    fn phys(&self, db: usize) -> usize {
        if self.prefixed {
            self.dy.dbs.map[db] as usize
        } else {
            0
        }
    }

    /// Calls `f` with the stored form of `key` in the selected database.
    pub(crate) fn with_key<R>(&mut self, key: &[u8], f: impl FnOnce(&mut Self, &[u8]) -> R) -> R {
        let mut k = std::mem::take(&mut self.ikey_buf);
        k.clear();
        if self.prefixed {
            let p = self.phys(self.selected);
            k.push(p as u8);
            k.extend_from_slice(&self.dy.dbs.gen[p].to_le_bytes());
        }
        k.extend_from_slice(key);
        let r = f(self, &k);
        self.ikey_buf = k;
        r
    }

    /// The physical database of the entry at `e` and whether its generation is the current
    /// one (else the entry belongs to a flushed database and is garbage).
    pub(crate) fn entry_db(&self, e: u64, head: &EntryHead) -> Result<(usize, bool), StoreError> {
        if !self.prefixed {
            return Ok((0, true));
        }
        if (head.klen as usize) < KEY_PREFIX {
            return Err(StoreError::Corrupt(format!(
                "the entry at {e} has a key of {} bytes, no database",
                head.klen
            )));
        }
        let mut p = [0u8; KEY_PREFIX];
        self.mem.read(e + ENTRY_HEAD, &mut p)?;
        let phys = p[0] as usize;
        if phys >= DBS {
            return Err(StoreError::Corrupt(format!("the entry at {e} names database {phys}")));
        }
        let gen = u32::from_le_bytes(p[1..].try_into().expect("4 bytes"));
        Ok((phys, gen == self.dy.dbs.gen[phys]))
    }

    /// The logical database and the key of a stored key, if it is of its database's current
    /// generation.
    pub(crate) fn logical_key<'k>(&self, stored: &'k [u8]) -> Option<(usize, &'k [u8])> {
        if !self.prefixed {
            return Some((0, stored));
        }
        let (p, rest) = stored.split_first()?;
        let gen = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let phys = *p as usize;
        if phys >= DBS || gen != self.dy.dbs.gen[phys] {
            return None;
        }
        let db = self.dy.dbs.map.iter().position(|&m| m as usize == phys)?;
        Some((db, &rest[4..]))
    }

    /// Whether the entry at `e` is a key of the selected database (of its current generation).
    pub fn in_selected(&self, e: u64, head: &EntryHead) -> Result<bool, StoreError> {
        let (phys, current) = self.entry_db(e, head)?;
        Ok(current && phys == self.phys(self.selected))
    }

    /// The key of an entry, without its database prefix, into `out` (cleared first).
    pub fn key_into(&self, e: u64, head: &EntryHead, out: &mut Vec<u8>) -> Result<(), StoreError> {
        let skip = if self.prefixed { KEY_PREFIX } else { 0 };
        out.clear();
        out.resize((head.klen as usize).saturating_sub(skip), 0);
        self.mem.read(e + ENTRY_HEAD + skip as u64, out)
    }

    /// The stored key of an entry (with its prefix), into `out` (cleared first).
    pub(crate) fn stored_key_into(
        &self,
        e: u64,
        head: &EntryHead,
        out: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        out.clear();
        out.resize(head.klen as usize, 0);
        self.mem.read(e + ENTRY_HEAD, out)
    }

    /// Counts a key that appears (`+1`) or goes (`-1`) in the entry's database, with or
    /// without an expiry; a key of a flushed generation going counts off the stale ones.
    pub(crate) fn count_key(&mut self, e: u64, head: &EntryHead, delta: i64) -> Result<(), StoreError> {
        let (phys, current) = self.entry_db(e, head)?;
        let d = &mut self.dy.dbs;
        if !current {
            d.stale_keys = d.stale_keys.saturating_add_signed(delta);
            return Ok(());
        }
        d.keys[phys] = d.keys[phys].saturating_add_signed(delta);
        if head.expire_ms != 0 {
            d.expires[phys] = d.expires[phys].saturating_add_signed(delta);
        }
        Ok(())
    }

    /// Counts a key whose expiry is set (`from` 0 to `to` not, or back).
    pub(crate) fn count_expiry(&mut self, e: u64, head: &EntryHead, to: u64) -> Result<(), StoreError> {
        let (phys, current) = self.entry_db(e, head)?;
        if current && (head.expire_ms == 0) != (to == 0) {
            let x = &mut self.dy.dbs.expires[phys];
            *x = if to == 0 { x.saturating_sub(1) } else { *x + 1 };
        }
        Ok(())
    }

    /// Keys in logical database `db` (expired ones not yet removed included).
    pub fn db_keys(&self, db: usize) -> u64 {
        if self.prefixed {
            self.dy.dbs.keys[self.phys(db)]
        } else {
            self.dy.keys
        }
    }

    /// Keys with an expiry in logical database `db`.
    pub fn db_expires(&self, db: usize) -> u64 {
        self.dy.dbs.expires[self.phys(db)]
    }

    /// Entries of flushed databases not yet removed.
    pub fn stale_keys(&self) -> u64 {
        self.dy.dbs.stale_keys
    }

    /// Empties logical database `db` (`FLUSHDB`): when no other database holds keys, the whole
    /// table (a new bucket generation, an empty heap: [`Store::flush`]); else the database's
    /// generation moves on, and its keys become garbage that expiry passes remove.
    pub fn flush_db(&mut self, db: usize) -> Result<(), StoreError> {
        let p = self.phys(db);
        let others: u64 = (0..DBS).filter(|&q| q != p).map(|q| self.dy.dbs.keys[q]).sum();
        if !self.prefixed || others == 0 {
            return self.flush();
        }
        let d = &mut self.dy.dbs;
        let gen = d.gen[p].checked_add(1).ok_or_else(|| {
            StoreError::TooLarge(format!(
                "database {db} was flushed 2^32 times while others held keys: flush them all (FLUSHALL)"
            ))
        })?;
        d.stale_keys += d.keys[p];
        d.keys[p] = 0;
        d.expires[p] = 0;
        d.gen[p] = gen;
        Ok(())
    }

    /// Swaps logical databases `a` and `b` (`SWAPDB`).
    pub fn swap_db(&mut self, a: usize, b: usize) {
        assert!(self.prefixed || a == b, "one database");
        self.dy.dbs.map.swap(a, b);
    }

    /// Counts, for a store of version 1 (which kept none), its keys and those with an expiry,
    /// by walking the table once at open.
    pub(crate) fn count_version_1_keys(&mut self) -> Result<(), StoreError> {
        let mut expires = 0;
        for b in 0..self.geo.buckets {
            self.bucket_entries(b, |_, _, h| {
                expires += u64::from(h.expire_ms != 0);
                Ok(())
            })?;
        }
        self.dy.dbs.keys[0] = self.dy.keys;
        self.dy.dbs.expires[0] = expires;
        Ok(())
    }
}
