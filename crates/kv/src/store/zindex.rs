//! A large sorted set (Redis's `skiplist` encoding): two trees kept in step. The order tree
//! (`ztree.rs`) holds (score, member) in Redis's order, counted, for ranks and ranges; the
//! member tree (`tree.rs`, by the keyed hash of each member) maps a member to its score, for
//! `ZSCORE` and to find a member's place in the order tree. A change to one member costs
//! O(log n) in each. The entry's value is the index's 32-byte handle (FORMAT.md §11.9).

use super::error::StoreError;
use super::layout::{ENC_ZSET_INDEX, KIND_ZSET};
use super::mem::Mem;
use super::table::Found;
use super::tree::Tree;
use super::Store;

/// The handle of a large sorted set: its two trees (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZIndex {
    /// (score, member) in order, counted.
    pub order: Tree,
    /// member -> score (8 bytes, an f64's bits), by hash.
    pub members: Tree,
}

impl ZIndex {
    /// Bytes of a handle.
    pub const LEN: usize = 32;

    /// The 32 bytes: the order tree's handle, then the member tree's.
    pub fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&self.order.encode());
        b[16..].copy_from_slice(&self.members.encode());
        b
    }

    /// Reads 32 bytes (`None` if there are not 32).
    pub fn decode(b: &[u8]) -> Option<ZIndex> {
        if b.len() != ZIndex::LEN {
            return None;
        }
        Some(ZIndex { order: Tree::decode(&b[..16])?, members: Tree::decode(&b[16..])? })
    }

    /// Members in the set.
    pub fn len(&self) -> u64 {
        self.order.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.order.len == 0
    }
}

fn score_of(v: &[u8]) -> Result<f64, StoreError> {
    let b: [u8; 8] = v.try_into().map_err(|_| {
        StoreError::Corrupt(format!("a sorted set's member holds a score of {} bytes", v.len()))
    })?;
    Ok(f64::from_le_bytes(b))
}

impl<M: Mem> Store<M> {
    /// An empty index.
    pub fn zindex_new(&mut self) -> Result<ZIndex, StoreError> {
        Ok(ZIndex { order: self.zt_new()?, members: self.tree_new()? })
    }

    /// The index an entry's value is the handle of, if it is one.
    pub fn zindex_of(&self, f: &Found) -> Result<Option<ZIndex>, StoreError> {
        if (f.head.kind, f.head.encoding) != (KIND_ZSET, ENC_ZSET_INDEX) {
            return Ok(None);
        }
        let mut b = [0u8; ZIndex::LEN];
        if f.head.vlen as usize != ZIndex::LEN {
            return Err(StoreError::Corrupt(format!(
                "the entry at {} holds a sorted-set handle of {} bytes",
                f.entry, f.head.vlen
            )));
        }
        self.read_value(f, 0, &mut b)?;
        Ok(ZIndex::decode(&b))
    }

    /// Stores a changed index's handle in its entry, in place.
    pub fn set_zindex(&mut self, f: &mut Found, z: &ZIndex) -> Result<(), StoreError> {
        debug_assert_eq!(f.head.encoding, ENC_ZSET_INDEX);
        self.overwrite_in_place(f, &z.encode())
    }

    /// `member`'s score, if the set holds it.
    pub fn zindex_score(&self, z: &ZIndex, member: &[u8]) -> Result<Option<f64>, StoreError> {
        let mut v = Vec::with_capacity(8);
        if !self.tree_get(&z.members, member, &mut v)? {
            return Ok(None);
        }
        score_of(&v).map(Some)
    }

    /// Adds `member`, which the set must not hold, with `score`.
    pub fn zindex_add(&mut self, z: &mut ZIndex, member: &[u8], score: f64) -> Result<(), StoreError> {
        if !self.tree_set(&mut z.members, member, &score.to_le_bytes())? {
            return Err(StoreError::Corrupt(
                "a sorted set's member tree holds a member its order lacks".into(),
            ));
        }
        self.zt_insert(&mut z.order, score, member)
    }

    /// Moves `member` from score `old` to `new`.
    pub fn zindex_rescore(
        &mut self,
        z: &mut ZIndex,
        member: &[u8],
        old: f64,
        new: f64,
    ) -> Result<(), StoreError> {
        if !self.zt_remove(&mut z.order, old, member)? {
            return Err(StoreError::Corrupt(
                "a sorted set's order tree lacks a member its member tree holds".into(),
            ));
        }
        self.zt_insert(&mut z.order, new, member)?;
        self.tree_set(&mut z.members, member, &new.to_le_bytes())?;
        Ok(())
    }

    /// Removes `member`; its score if the set held it.
    pub fn zindex_remove(&mut self, z: &mut ZIndex, member: &[u8]) -> Result<Option<f64>, StoreError> {
        let Some(score) = self.zindex_score(z, member)? else { return Ok(None) };
        self.tree_remove(&mut z.members, member)?;
        if !self.zt_remove(&mut z.order, score, member)? {
            return Err(StoreError::Corrupt(
                "a sorted set's order tree lacks a member its member tree holds".into(),
            ));
        }
        Ok(Some(score))
    }

    /// `member`'s rank (from 0, in ascending order), if the set holds it.
    pub fn zindex_rank(&self, z: &ZIndex, member: &[u8]) -> Result<Option<u64>, StoreError> {
        let Some(score) = self.zindex_score(z, member)? else { return Ok(None) };
        self.zt_rank(&z.order, score, member)
    }

    /// An index of `items` (in order, no member twice): both trees built bottom up.
    pub fn zindex_build(&mut self, items: &[(f64, &[u8])]) -> Result<ZIndex, StoreError> {
        let order = self.zt_build(items.iter().copied())?;
        let scores: Vec<[u8; 8]> = items.iter().map(|(s, _)| s.to_le_bytes()).collect();
        let entries: Vec<(&[u8], &[u8])> =
            items.iter().zip(&scores).map(|((_, m), s)| (*m, &s[..])).collect();
        let members = self.tree_build(&entries)?;
        Ok(ZIndex { order, members })
    }

    /// Calls `f(score, member)` for every member, in order (greatest first with `reverse`),
    /// until it returns false.
    pub fn zindex_each(
        &self,
        z: &ZIndex,
        reverse: bool,
        mut f: impl FnMut(f64, &[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        if z.is_empty() {
            return Ok(());
        }
        let first = if reverse { z.len() - 1 } else { 0 };
        let Some(mut c) = self.zt_at(&z.order, first)? else { return Ok(()) };
        let mut m = Vec::new();
        loop {
            let s = self.zt_read(&c, &mut m)?;
            if !f(s, &m)? {
                return Ok(());
            }
            let more = if reverse { self.zt_prev(&mut c)? } else { self.zt_next(&mut c)? };
            if !more {
                return Ok(());
            }
        }
    }

    /// A copy of `z` that shares no block with it (`COPY`): the order tree built again bottom
    /// up, the member tree copied node by node. O(n).
    pub fn zindex_copy(&mut self, z: &ZIndex) -> Result<ZIndex, StoreError> {
        let mut items: Vec<(f64, Vec<u8>)> = Vec::with_capacity(z.len().min(1 << 20) as usize);
        self.zindex_each(z, false, |s, m| {
            items.push((s, m.to_vec()));
            Ok(true)
        })?;
        if items.len() as u64 != z.len() {
            return Err(StoreError::Corrupt(format!(
                "a sorted set's order tree says {} members and holds {}",
                z.len(),
                items.len()
            )));
        }
        let order = self.zt_build(items.iter().map(|(s, m)| (*s, m.as_slice())))?;
        let members = self.tree_copy(&z.members)?;
        Ok(ZIndex { order, members })
    }

    /// Frees both trees.
    pub fn zindex_free(&mut self, z: &ZIndex) -> Result<(), StoreError> {
        self.zt_free(&z.order)?;
        self.tree_free(&z.members)
    }

    /// Calls `f(offset, bytes)` for every block of both trees and checks them: each tree's
    /// invariants, and that they hold the same members with the same scores.
    pub fn zindex_blocks(&self, z: &ZIndex, mut f: impl FnMut(u64, u64)) -> Result<(), String> {
        self.zt_blocks(&z.order, &mut f)?;
        self.tree_blocks(&z.members, &mut f)?;
        if z.order.len != z.members.len {
            return Err(format!(
                "the order tree holds {} members, the member tree {}",
                z.order.len, z.members.len
            ));
        }
        let mut bad = None;
        self.tree_each(&z.members, |m, v| {
            let s = score_of(v)?;
            if bad.is_none() && self.zt_rank(&z.order, s, m)?.is_none() {
                bad = Some(format!(
                    "member {:?} of score {s} is not in the order tree",
                    String::from_utf8_lossy(m)
                ));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        bad.map_or(Ok(()), Err)
    }
}
