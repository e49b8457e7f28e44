//! A set as its entry holds it, in one of three encodings, and the changes to it (the commands
//! are in `sets.rs`):
//! - `intset` (`ENC_INTSET`, `store::intset`): every member an integer in Redis's canonical
//!   form, at most `set-max-intset-entries` of them, sorted in the entry's value;
//! - `listpack` (`ENC_LISTPACK`, `store::member_list`): at most `set-max-listpack-entries`
//!   members of at most `set-max-listpack-value` bytes, in the entry's value; only when that
//!   setting is above 0 (Redis 7.2's encoding; Redis 7.0 has none, and 0 is the default);
//! - `hashtable` (`ENC_TREE`): a tree (`store::tree`) of the members with empty values, whose
//!   handle is the entry's value: a change costs O(members changed · log n).
//!
//! A blob-encoded set is written again whole on every change. A change that takes a set past
//! its encoding's limits (or adds a non-integer to an intset) moves it to the next one, and it
//! never moves back, as in Redis.

use super::args::int;
use super::Cx;
use super::Encodings;
use crate::resp::itoa;
use crate::store::intset::{self, IntSet};
use crate::store::{member_list, Found, Mem, StoreError, Tree, ENC_INTSET, ENC_LISTPACK, ENC_TREE, KIND_SET};
use std::collections::HashSet;

/// Redis caps `set-max-intset-entries` at 2^30 (its intsets' own limit).
const INTSET_CAP: usize = 1 << 30;

/// A live set's members, as its entry holds them.
#[derive(Clone, Debug)]
pub(super) enum SetVal {
    /// An intset blob (checked).
    Ints(Vec<u8>),
    /// A member list blob.
    List(Vec<u8>),
    /// A tree of the members.
    Tree(Tree),
}

/// What a key holds, for a set command.
pub(super) enum Fetched {
    /// No live key (the entry of an expired one, if any).
    Missing(Option<Found>),
    /// A live set.
    Set(Found, SetVal),
    /// A live key of another type.
    WrongType,
}

/// The key's set, if it holds one.
pub(super) fn fetch<M: Mem>(cx: &mut Cx<M>, key: &[u8]) -> Result<Fetched, StoreError> {
    let f = cx.store.find(key)?;
    match f {
        Some(f) if !f.head.expired(cx.now_ms) => {
            if f.head.kind != KIND_SET {
                return Ok(Fetched::WrongType);
            }
            let v = read(cx, &f)?;
            Ok(Fetched::Set(f, v))
        }
        other => Ok(Fetched::Missing(other)),
    }
}

/// The value of a set's entry.
pub(super) fn read<M: Mem>(cx: &Cx<M>, f: &Found) -> Result<SetVal, StoreError> {
    match f.head.encoding {
        ENC_TREE => {
            let t = cx.store.tree_of(f)?.ok_or_else(|| {
                StoreError::Corrupt(format!("the set at entry {} has no tree handle", f.entry))
            })?;
            Ok(SetVal::Tree(t))
        }
        ENC_INTSET => {
            let mut b = Vec::new();
            cx.store.value_into(f, &mut b)?;
            IntSet::parse(&b)?;
            Ok(SetVal::Ints(b))
        }
        ENC_LISTPACK => {
            let mut b = Vec::new();
            cx.store.value_into(f, &mut b)?;
            member_list::members(&b)?;
            Ok(SetVal::List(b))
        }
        e => Err(StoreError::Corrupt(format!("the set at entry {} has encoding {e}", f.entry))),
    }
}

impl SetVal {
    /// Members.
    pub(super) fn len(&self) -> u64 {
        match self {
            SetVal::Ints(b) => IntSet::parse(b).map_or(0, |s| s.len() as u64),
            SetVal::List(b) => u64::from(member_list::count(b)),
            SetVal::Tree(t) => t.len,
        }
    }

    /// Whether `m` is a member.
    pub(super) fn contains<M: Mem>(&self, cx: &Cx<M>, m: &[u8]) -> Result<bool, StoreError> {
        match self {
            SetVal::Ints(b) => Ok(int(m).is_some_and(|v| IntSet::parse(b).is_ok_and(|s| s.contains(v)))),
            SetVal::List(b) => {
                for x in member_list::members(b)? {
                    if x? == m {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            SetVal::Tree(t) => cx.store.tree_get(t, m, &mut Vec::new()),
        }
    }

    /// Calls `f` with every member, in the encoding's order, until it returns false.
    pub(super) fn each<M: Mem>(
        &self,
        cx: &Cx<M>,
        mut f: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            SetVal::Ints(b) => {
                let mut tmp = [0u8; 20];
                for v in IntSet::parse(b)?.iter() {
                    if !f(itoa(v, &mut tmp))? {
                        break;
                    }
                }
            }
            SetVal::List(b) => {
                for m in member_list::members(b)? {
                    if !f(m?)? {
                        break;
                    }
                }
            }
            SetVal::Tree(t) => {
                cx.store.tree_each_from(t, 0, |_, k, _| f(k))?;
            }
        }
        Ok(())
    }

    /// Every member, copied.
    pub(super) fn members<M: Mem>(&self, cx: &Cx<M>) -> Result<Vec<Vec<u8>>, StoreError> {
        let mut out = Vec::with_capacity(self.len() as usize);
        self.each(cx, |m| {
            out.push(m.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// Member `i` (of `len`, in the encoding's order) into `out` (cleared first).
    pub(super) fn nth<M: Mem>(&self, cx: &Cx<M>, i: u64, out: &mut Vec<u8>) -> Result<(), StoreError> {
        out.clear();
        match self {
            SetVal::Ints(b) => {
                let s = IntSet::parse(b)?;
                let mut tmp = [0u8; 20];
                out.extend_from_slice(itoa(s.get(i as usize), &mut tmp));
            }
            SetVal::List(b) => {
                let m = member_list::members(b)?
                    .nth(i as usize)
                    .ok_or_else(|| StoreError::Corrupt(format!("a set's member list has no member {i}")))??;
                out.extend_from_slice(m);
            }
            SetVal::Tree(t) => cx.store.tree_nth(t, i, out, &mut Vec::new())?,
        }
        Ok(())
    }
}

/// The encoding a set of `members` gets, coming from encoding `prior` (`None`: a new set).
fn choose<'m>(enc: &Encodings, prior: Option<u8>, members: impl Iterator<Item = &'m [u8]> + Clone) -> u8 {
    let n = members.clone().count();
    if prior.is_none_or(|p| p == ENC_INTSET)
        && n <= enc.set_max_intset_entries.min(INTSET_CAP)
        && members.clone().all(|m| int(m).is_some())
    {
        return ENC_INTSET;
    }
    if prior != Some(ENC_TREE)
        && enc.set_max_entries > 0
        && n <= enc.set_max_entries
        && members.clone().all(|m| m.len() <= enc.set_max_value)
    {
        return ENC_LISTPACK;
    }
    ENC_TREE
}

/// Writes the set `key` of `members` (distinct, at least one) in encoding `enc`, in place of
/// `old` (an entry of any kind, or none), with expiry `ttl`.
fn write<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    old: Option<&Found>,
    ttl: u64,
    enc: u8,
    members: &[&[u8]],
) -> Result<(), StoreError> {
    debug_assert!(!members.is_empty());
    match enc {
        ENC_INTSET => {
            let mut v: Vec<i64> = members.iter().filter_map(|m| int(m)).collect();
            debug_assert_eq!(v.len(), members.len());
            v.sort_unstable();
            cx.store.put_encoded(key, KIND_SET, ENC_INTSET, ttl, &[&intset::encode(&v)], 0, old)?;
        }
        ENC_LISTPACK => {
            let blob = member_list::encode(members.iter().copied());
            cx.store.put_encoded(key, KIND_SET, ENC_LISTPACK, ttl, &[&blob], 0, old)?;
        }
        _ => {
            // At least a hash, two lengths and a slot (14 bytes) and the member for each
            // (FORMAT.md §11.5): refused before it is made when no group can carry it.
            cx.check_room(members.iter().map(|m| 14 + m.len() as u64).sum())?;
            let entries: Vec<(&[u8], &[u8])> = members.iter().map(|m| (*m, &b""[..])).collect();
            let t = cx.store.tree_build(&entries)?;
            cx.store.put_encoded(key, KIND_SET, ENC_TREE, ttl, &[&t.encode()], 0, old)?;
        }
    }
    Ok(())
}

/// Makes `key` the set of `members` (distinct), replacing whatever it held (without its expiry),
/// or removes it when `members` is empty: the *STORE commands.
pub(super) fn store<M: Mem>(cx: &mut Cx<M>, key: &[u8], members: &[&[u8]]) -> Result<(), StoreError> {
    let old = cx.store.find(key)?;
    if members.is_empty() {
        if let Some(f) = old {
            cx.store.remove(&f)?;
        }
        return Ok(());
    }
    let enc = choose(&cx.settings.encodings, None, members.iter().copied());
    write(cx, key, old.as_ref(), 0, enc, members)
}

/// Makes `key` the set of `members` (distinct, at least one) with expiry `ttl`, in place of
/// `old` (an entry of any kind, or none), in the encoding a new set of them gets: RESTORE.
pub(super) fn restore<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    old: Option<&Found>,
    ttl: u64,
    members: &[&[u8]],
) -> Result<(), StoreError> {
    let enc = choose(&cx.settings.encodings, None, members.iter().copied());
    write(cx, key, old, ttl, enc, members)
}

/// Replaces the set `f` at `key` with a new set of `members` (distinct, at least one), in the
/// encoding a new set of them gets, keeping its expiry; the old tree, if any, is freed.
pub(super) fn replace<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    f: &Found,
    members: &[&[u8]],
) -> Result<(), StoreError> {
    restore(cx, key, Some(f), f.head.expire_ms, members)
}

/// Adds `new` to the set at `key` (`live`, or a new one in place of `missing`); returns how many
/// were not members.
pub(super) fn add<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    missing: Option<&Found>,
    live: Option<(Found, SetVal)>,
    new: &[&[u8]],
) -> Result<u64, StoreError> {
    let max_ints = cx.settings.encodings.set_max_intset_entries.min(INTSET_CAP);
    let (entry, val) = match live {
        Some((mut f, SetVal::Tree(mut t))) => {
            let before = t;
            let mut added = 0;
            for m in new {
                added += u64::from(cx.store.tree_set(&mut t, m, b"")?);
            }
            if t != before {
                cx.store.set_tree(&mut f, &t)?;
            }
            return Ok(added);
        }
        Some((f, v)) => (Some(f), Some(v)),
        None => (None, None),
    };
    let ttl = entry.as_ref().map_or(0, |f| f.head.expire_ms);
    let old = entry.as_ref().or(missing);
    // An intset that stays one: merge the sorted integers.
    if let Some(SetVal::Ints(_)) | None = &val {
        let ints: Option<Vec<i64>> = new.iter().map(|m| int(m)).collect();
        if let Some(mut ints) = ints {
            ints.sort_unstable();
            ints.dedup();
            let cur: Vec<i64> = match &val {
                Some(SetVal::Ints(b)) => IntSet::parse(b)?.iter().collect(),
                _ => Vec::new(),
            };
            let mut merged = Vec::with_capacity(cur.len() + ints.len());
            let (mut i, mut j) = (0, 0);
            while i < cur.len() || j < ints.len() {
                if j == ints.len() || (i < cur.len() && cur[i] < ints[j]) {
                    merged.push(cur[i]);
                    i += 1;
                } else {
                    if i < cur.len() && cur[i] == ints[j] {
                        i += 1;
                    }
                    merged.push(ints[j]);
                    j += 1;
                }
            }
            let added = (merged.len() - cur.len()) as u64;
            if added == 0 {
                return Ok(0);
            }
            if merged.len() <= max_ints {
                cx.store.put_encoded(key, KIND_SET, ENC_INTSET, ttl, &[&intset::encode(&merged)], 0, old)?;
                return Ok(added);
            }
        }
    }
    // Any other change to a blob: the members as bytes, then the encoding they need.
    let mut members = match &val {
        Some(v) => v.members(cx)?,
        None => Vec::new(),
    };
    let before = members.len();
    let mut seen: HashSet<Vec<u8>> = members.iter().cloned().collect();
    for m in new {
        if seen.insert(m.to_vec()) {
            members.push(m.to_vec());
        }
    }
    let added = (members.len() - before) as u64;
    if added == 0 {
        return Ok(0);
    }
    let prior = match &val {
        Some(SetVal::Ints(_)) => Some(ENC_INTSET),
        Some(SetVal::List(_)) => Some(ENC_LISTPACK),
        _ => None,
    };
    let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
    let enc = choose(&cx.settings.encodings, prior, refs.iter().copied());
    write(cx, key, old, ttl, enc, &refs)?;
    Ok(added)
}

/// Removes `gone` from the live set `f` at `key` (removing the key once it is empty); returns
/// how many were members. The encoding does not change.
pub(super) fn remove<M: Mem>(
    cx: &mut Cx<M>,
    key: &[u8],
    mut f: Found,
    val: SetVal,
    gone: &[&[u8]],
) -> Result<u64, StoreError> {
    match val {
        SetVal::Tree(mut t) => {
            let mut removed = 0;
            for m in gone {
                removed += u64::from(cx.store.tree_remove(&mut t, m)?);
            }
            if removed > 0 {
                cx.store.set_tree(&mut f, &t)?;
                if t.len == 0 {
                    cx.store.remove(&f)?;
                }
            }
            Ok(removed)
        }
        SetVal::Ints(b) => {
            let s = IntSet::parse(&b)?;
            let drop: HashSet<i64> = gone.iter().filter_map(|m| int(m)).collect();
            let kept: Vec<i64> = s.iter().filter(|v| !drop.contains(v)).collect();
            let removed = (s.len() - kept.len()) as u64;
            if removed > 0 {
                if kept.is_empty() {
                    cx.store.remove(&f)?;
                } else {
                    let blob = intset::encode(&kept);
                    cx.store.put_encoded(
                        key,
                        KIND_SET,
                        ENC_INTSET,
                        f.head.expire_ms,
                        &[&blob],
                        0,
                        Some(&f),
                    )?;
                }
            }
            Ok(removed)
        }
        SetVal::List(b) => {
            let drop: HashSet<&[u8]> = gone.iter().copied().collect();
            let mut kept = Vec::new();
            for m in member_list::members(&b)? {
                let m = m?;
                if !drop.contains(m) {
                    kept.push(m);
                }
            }
            let removed = u64::from(member_list::count(&b)) - kept.len() as u64;
            if removed > 0 {
                if kept.is_empty() {
                    cx.store.remove(&f)?;
                } else {
                    let blob = member_list::encode(kept.iter().copied());
                    cx.store.put_encoded(
                        key,
                        KIND_SET,
                        ENC_LISTPACK,
                        f.head.expire_ms,
                        &[&blob],
                        0,
                        Some(&f),
                    )?;
                }
            }
            Ok(removed)
        }
    }
}
