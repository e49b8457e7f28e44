//! A sorted set as commands see it, whichever way its entry holds it: small (`listpack`: the
//! members in the entry's value, read whole and written whole, at most
//! `zset-max-listpack-entries` of at most `zset-max-listpack-value` bytes) or large
//! (`skiplist`: an index in the region, changed in place, O(log n) a member). A set moves from
//! small to large when an added member takes it past either limit, and stays large.

use super::super::strings::lookup;
use super::super::Cx;
use crate::store::{key_cmp, zset_blob, Found, Mem, StoreError, ZBound, ZIndex, ENC_ZSET_INDEX, KIND_ZSET};
use std::cmp::Ordering;

/// Where the members are.
pub(super) enum Body {
    /// In order, as the entry's value holds them.
    Small(Vec<(f64, Vec<u8>)>),
    /// In the region.
    Big(ZIndex),
}

/// A sorted set being read or changed.
pub(super) struct Zset {
    /// The key's entry (live, or expired and to be replaced), if any.
    found: Option<Found>,
    /// `found` is this live set's entry.
    live: bool,
    body: Body,
    /// Members changed since it was opened.
    dirty: bool,
    /// Moved to an index in this command: the entry does not hold its handle yet.
    converted: bool,
}

/// What a key holds, for a sorted-set command.
pub(super) enum Opened {
    /// Another type (the command answers `WRONGTYPE`).
    WrongType,
    /// No live key; the entry found (an expired one, to be replaced), if any.
    Absent(Option<Found>),
    /// A sorted set.
    Zset(Zset),
}

/// The key's sorted set.
pub(super) fn open<M: Mem>(cx: &mut Cx<M>, key: &[u8]) -> Result<Opened, StoreError> {
    let (found, live) = lookup(cx, key)?;
    let Some(f) = live else { return Ok(Opened::Absent(found)) };
    if f.head.kind != KIND_ZSET {
        return Ok(Opened::WrongType);
    }
    let body = match cx.store.zindex_of(&f)? {
        Some(z) => Body::Big(z),
        None => {
            let mut blob = Vec::new();
            cx.store.value_into(&f, &mut blob)?;
            Body::Small(zset_blob::decode(&blob)?)
        }
    };
    Ok(Opened::Zset(Zset { found: Some(f), live: true, body, dirty: false, converted: false }))
}

impl Zset {
    /// A new, empty set, for a key whose entry (expired) is `found`.
    pub fn create(found: Option<Found>) -> Zset {
        Zset { found, live: false, body: Body::Small(Vec::new()), dirty: false, converted: false }
    }

    /// Members.
    pub fn len(&self) -> u64 {
        match &self.body {
            Body::Small(v) => v.len() as u64,
            Body::Big(z) => z.len(),
        }
    }

    /// The index of a large set.
    pub fn index(&self) -> Option<ZIndex> {
        match self.body {
            Body::Big(z) => Some(z),
            Body::Small(_) => None,
        }
    }

    /// `member`'s score.
    pub fn score<M: Mem>(&self, cx: &Cx<M>, member: &[u8]) -> Result<Option<f64>, StoreError> {
        match &self.body {
            Body::Small(v) => Ok(v.iter().find(|(_, m)| m == member).map(|(s, _)| *s)),
            Body::Big(z) => cx.store.zindex_score(z, member),
        }
    }

    /// `member`'s rank, from 0 in ascending order.
    pub fn rank<M: Mem>(&self, cx: &Cx<M>, member: &[u8]) -> Result<Option<u64>, StoreError> {
        match &self.body {
            Body::Small(v) => Ok(v.iter().position(|(_, m)| m == member).map(|i| i as u64)),
            Body::Big(z) => cx.store.zindex_rank(z, member),
        }
    }

    /// Members below `b` (the rank where the rest begin).
    pub fn count_below<M: Mem>(&self, cx: &Cx<M>, b: &ZBound) -> Result<u64, StoreError> {
        match &self.body {
            Body::Small(v) => Ok(v.partition_point(|(s, m)| b.below(*s, m)) as u64),
            Body::Big(z) => cx.store.zt_count_below(&z.order, b),
        }
    }

    /// Calls `f(score, member)` for the members from rank `from` on, upwards (or downwards
    /// with `reverse`), until it returns false or the set ends.
    pub fn walk<M: Mem>(
        &self,
        cx: &Cx<M>,
        from: u64,
        reverse: bool,
        mut f: impl FnMut(f64, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        match &self.body {
            Body::Small(v) => {
                let mut i = from as usize;
                while i < v.len() {
                    if !f(v[i].0, &v[i].1)? {
                        break;
                    }
                    if reverse {
                        if i == 0 {
                            break;
                        }
                        i -= 1;
                    } else {
                        i += 1;
                    }
                }
                Ok(())
            }
            Body::Big(z) => {
                let Some(mut c) = cx.store.zt_at(&z.order, from)? else { return Ok(()) };
                let mut m = Vec::new();
                loop {
                    let s = cx.store.zt_read(&c, &mut m)?;
                    if !f(s, &m)? {
                        return Ok(());
                    }
                    let more = if reverse { cx.store.zt_prev(&mut c)? } else { cx.store.zt_next(&mut c)? };
                    if !more {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The member of rank `rank` and its score.
    pub fn at<M: Mem>(&self, cx: &Cx<M>, rank: u64) -> Result<Option<(f64, Vec<u8>)>, StoreError> {
        let mut out = None;
        self.walk(cx, rank, false, |s, m| {
            out = Some((s, m.to_vec()));
            Ok(false)
        })?;
        Ok(out)
    }

    /// Adds `member`, which the set does not hold, moving it to an index when it would pass
    /// the small encoding's limits.
    pub fn add<M: Mem>(&mut self, cx: &mut Cx<M>, member: &[u8], score: f64) -> Result<(), StoreError> {
        self.dirty = true;
        let enc = cx.settings.encodings;
        if let Body::Small(v) = &mut self.body {
            if v.len() < enc.zset_max_entries && member.len() <= enc.zset_max_value {
                // As a listpack holds it: -0 is 0.
                let score = score + 0.0;
                let at = v.partition_point(|(s, m)| key_cmp(*s, m, score, member) == Ordering::Less);
                v.insert(at, (score, member.to_vec()));
                return Ok(());
            }
            self.make_big(cx)?;
        }
        let Body::Big(z) = &mut self.body else { unreachable!("made an index above") };
        cx.store.zindex_add(z, member, score)
    }

    /// Moves the members to an index in the region (Redis's `skiplist`), where they stay.
    fn make_big<M: Mem>(&mut self, cx: &mut Cx<M>) -> Result<(), StoreError> {
        if let Body::Small(v) = &self.body {
            let items: Vec<(f64, &[u8])> = v.iter().map(|(s, m)| (*s, m.as_slice())).collect();
            let z = cx.store.zindex_build(&items)?;
            self.body = Body::Big(z);
            self.converted = true;
        }
        Ok(())
    }

    /// Moves `member` (of score `old`) to score `new`.
    pub fn rescore<M: Mem>(
        &mut self,
        cx: &mut Cx<M>,
        member: &[u8],
        old: f64,
        new: f64,
    ) -> Result<(), StoreError> {
        self.dirty = true;
        match &mut self.body {
            Body::Small(v) => {
                if let Some(i) = v.iter().position(|(_, m)| m == member) {
                    let (_, m) = v.remove(i);
                    let new = new + 0.0;
                    let at = v.partition_point(|(s, x)| key_cmp(*s, x, new, &m) == Ordering::Less);
                    v.insert(at, (new, m));
                }
                Ok(())
            }
            Body::Big(z) => cx.store.zindex_rescore(z, member, old, new),
        }
    }

    /// Removes `member`; its score if the set held it.
    pub fn remove<M: Mem>(&mut self, cx: &mut Cx<M>, member: &[u8]) -> Result<Option<f64>, StoreError> {
        let gone = match &mut self.body {
            Body::Small(v) => v.iter().position(|(_, m)| m == member).map(|i| v.remove(i).0),
            Body::Big(z) => cx.store.zindex_remove(z, member)?,
        };
        self.dirty |= gone.is_some();
        Ok(gone)
    }

    /// Removes the members of ranks `lo .. hi`; returns how many.
    pub fn remove_ranks<M: Mem>(&mut self, cx: &mut Cx<M>, lo: u64, hi: u64) -> Result<u64, StoreError> {
        let hi = hi.min(self.len());
        if lo >= hi {
            return Ok(0);
        }
        self.dirty = true;
        match &mut self.body {
            Body::Small(v) => {
                v.drain(lo as usize..hi as usize);
            }
            Body::Big(_) => {
                for _ in lo..hi {
                    let Some((_, m)) = self.at(cx, lo)? else { break };
                    self.remove(cx, &m)?;
                }
            }
        }
        Ok(hi - lo)
    }

    /// Removes and returns the least member (the greatest with `max`).
    pub fn pop<M: Mem>(&mut self, cx: &mut Cx<M>, max: bool) -> Result<Option<(f64, Vec<u8>)>, StoreError> {
        if self.len() == 0 {
            return Ok(None);
        }
        let rank = if max { self.len() - 1 } else { 0 };
        let Some((s, m)) = self.at(cx, rank)? else { return Ok(None) };
        self.remove(cx, &m)?;
        Ok(Some((s, m)))
    }

    /// Stores what changed: the small value written again (its expiry kept), or the index's
    /// handle; an emptied set's key is removed.
    pub fn save<M: Mem>(self, cx: &mut Cx<M>, key: &[u8]) -> Result<(), StoreError> {
        if !self.dirty && !self.converted {
            return Ok(());
        }
        let ttl = if self.live { self.found.map_or(0, |f| f.head.expire_ms) } else { 0 };
        match self.body {
            Body::Small(v) => {
                if v.is_empty() {
                    if let (true, Some(f)) = (self.live, self.found) {
                        cx.store.remove(&f)?;
                    }
                    return Ok(());
                }
                let blob = zset_blob::encode(v.iter().map(|(s, m)| (*s, m.as_slice())));
                cx.store.put(key, KIND_ZSET, ttl, &[&blob], 0, self.found.as_ref())?;
            }
            Body::Big(z) if self.converted => {
                if z.is_empty() {
                    cx.store.zindex_free(&z)?;
                    if let (true, Some(f)) = (self.live, self.found) {
                        cx.store.remove(&f)?;
                    }
                    return Ok(());
                }
                let h = z.encode();
                cx.store.put_encoded(key, KIND_ZSET, ENC_ZSET_INDEX, ttl, &[&h], 0, self.found.as_ref())?;
            }
            Body::Big(z) => {
                let mut f = self.found.expect("a large set was opened from its entry");
                cx.store.set_zindex(&mut f, &z)?;
                if z.is_empty() {
                    // The last member's removal removes the key (and frees its trees).
                    cx.store.remove(&f)?;
                }
            }
        }
        Ok(())
    }
}

/// Stores `items` (in order, no member twice) as a new sorted set at `key`, replacing whatever
/// the key holds, expiring at `expire_ms` (0: never; `ZRANGESTORE`, `ZUNIONSTORE`, ...: 0):
/// small if it fits the small encoding, else an index built bottom up. No items: the key is
/// removed.
pub(super) fn store_new<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    items: &[(f64, Vec<u8>)],
    expire_ms: u64,
) -> Result<(), StoreError> {
    let old = cx.store.find(key)?;
    if items.is_empty() {
        if let Some(f) = old {
            cx.store.remove(&f)?;
        }
        return Ok(());
    }
    let enc = cx.settings.encodings;
    let small =
        items.len() <= enc.zset_max_entries && items.iter().all(|(_, m)| m.len() <= enc.zset_max_value);
    if small {
        let blob = zset_blob::encode(items.iter().map(|(s, m)| (*s, m.as_slice())));
        cx.store.put(key, KIND_ZSET, expire_ms, &[&blob], 0, old.as_ref())?;
    } else {
        cx.check_room(zindex_bytes(items.iter().map(|(_, m)| m.len())))?;
        let refs: Vec<(f64, &[u8])> = items.iter().map(|(s, m)| (*s, m.as_slice())).collect();
        let z = cx.store.zindex_build(&refs)?;
        // The table may have changed (blocks taken): find the key again.
        let old = cx.store.find(key)?;
        cx.store.put_encoded(key, KIND_ZSET, ENC_ZSET_INDEX, expire_ms, &[&z.encode()], 0, old.as_ref())?;
    }
    Ok(())
}

/// Bytes an index of members of these lengths stores at least: in the order tree a score, a
/// length and a slot (12 bytes) and the member; in the member tree a hash, two lengths, the
/// score and a slot (22 bytes) and the member again (FORMAT.md §11.5, §11.9), nodes' heads and
/// free room left out.
pub(super) fn zindex_bytes(members: impl Iterator<Item = usize>) -> u64 {
    members.map(|m| 34 + 2 * m as u64).sum()
}
