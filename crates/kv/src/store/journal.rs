//! The batch: undo-logged stores, fresh stores, savepoints, sealing, and recovery.
//!
//! A batch is the commands of one event-loop turn. Its stores are of two kinds:
//! - **in place** ([`Store::meta`]): bytes the last committed state uses (a bucket word, a
//!   chain link, the superblock's dynamic part, an expiry). Before the store, the bytes it
//!   replaces are appended to the journal's undo area, and then `undo_len` (one aligned word) is
//!   raised to cover the record: a crash finds the old bytes for every in-place store made.
//! - **fresh** ([`Store::fresh`]): bytes nothing in the committed state uses (a block taken
//!   from a free list or above the heap top, beyond a word the last state reads there, or the
//!   slack after a value). They need no undo.
//!
//! Blocks freed in a batch go back to their free lists only when it is sealed, so no block the
//! committed state uses is written fresh. Sealing writes the allocator's state, the list of the
//! batch's ranges, then sets `undo_len` to 0: that one word is the local commit point. The
//! caller then sends the ranges, the journal's head and list included, as one `gmsync` group.
//!
//! Opening a store after a crash: `undo_len` > 0 means a batch was cut short (it was never
//! sent, and nothing of it was answered): its records are applied backwards, which restores the
//! last committed state byte for byte. `undo_len` = 0 means the last batch was sealed; its list
//! names every range it changed, which are sent again (the mirror may not have them yet).

use super::error::StoreError;
use super::layout::{DYN_LEN, DYN_OFF, JOURNAL_OFF, LIST_AT, LIST_MAX, UNDO_AT, UNDO_HEAD};
use super::mem::Mem;
use super::{Dynamic, Store};
use mojim::Range;

/// A point in a batch to roll back to (the start of a command or a transaction).
#[derive(Clone, Debug)]
pub struct Savepoint {
    undo_len: u64,
    records: usize,
    ranges: usize,
    frees: usize,
    frees_from: usize,
    gen_words: usize,
    gen_words_from: usize,
    bytes: u64,
    flushed: bool,
    dy: Dynamic,
}

/// The batch in progress, in the process.
#[derive(Default)]
pub(crate) struct Batch {
    /// Bytes of undo records (also in the journal's head).
    pub undo_len: u64,
    /// Where each undo record starts, relative to the undo area.
    pub records: Vec<u64>,
    /// Every range stored into, raw.
    pub ranges: Vec<(u64, u64)>,
    /// Bytes stored (the ranges' lengths added up, before merging).
    pub bytes: u64,
    /// Blocks freed in this batch: (offset, class). Those before `frees_from` were freed
    /// before a flush in this batch, so they lie in the emptied heap and join no list; they
    /// stay listed so that rolling back the flush gives them back.
    pub frees: Vec<(u64, u8)>,
    pub frees_from: usize,
    /// Offsets of bucket words this batch set to the current generation; those from
    /// `gen_words_from` on were set since the batch's last flush (a second flush in one batch
    /// zeroes them instead of moving the generation on again). Kept whole for rollbacks, as
    /// `frees`.
    pub gen_words: Vec<u64>,
    pub gen_words_from: usize,
    /// A flush happened in this batch.
    pub flushed: bool,
    /// The highest the heap's top has been in this batch: after a flush, blocks are given out
    /// only above it (and above the sealed top), so that no block a state earlier in the batch
    /// used (one a rollback may bring back) is written over without undo.
    pub top_mark: u64,
    /// Tree nodes made since the last savepoint: nothing but the command making them can
    /// have seen them, and no rollback can need their bytes back, so their changes need no
    /// undo (see `tree.rs`).
    pub young: std::collections::HashSet<u64>,
    /// The batch is being sealed: its last records may use the space kept for them.
    pub sealing: bool,
}

fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Sorts and merges `raw` (joining ranges less than 64 bytes apart), then joins across the
/// smallest gaps until at most `max` remain. Every byte in a gap holds the current state, so
/// sending it again changes nothing.
pub fn coalesce(raw: &mut [(u64, u64)], max: usize, out: &mut Vec<Range>) {
    out.clear();
    raw.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(raw.len());
    for &(o, l) in raw.iter() {
        if l == 0 {
            continue;
        }
        match merged.last_mut() {
            Some((mo, ml)) if o <= *mo + *ml + 64 => *ml = (*ml).max(o + l - *mo),
            _ => merged.push((o, l)),
        }
    }
    if merged.len() > max.max(1) {
        let mut gaps: Vec<(u64, usize)> =
            merged.windows(2).enumerate().map(|(i, w)| (w[1].0 - (w[0].0 + w[0].1), i)).collect();
        gaps.sort_unstable();
        let mut join = vec![false; merged.len() - 1];
        for &(_, i) in &gaps[..merged.len() - max.max(1)] {
            join[i] = true;
        }
        let (mut start, mut end) = merged[0];
        end += start;
        for (i, &(o, l)) in merged.iter().enumerate().skip(1) {
            if !join[i - 1] {
                out.push(Range::new(start, end - start));
                start = o;
            }
            end = o + l;
        }
        out.push(Range::new(start, end - start));
        return;
    }
    out.extend(merged.iter().map(|&(o, l)| Range::new(o, l)));
}

impl<M: Mem> Store<M> {
    pub(crate) fn read_u64(&self, off: u64) -> Result<u64, StoreError> {
        let mut b = [0u8; 8];
        self.mem.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Records a stored range, joined to the last one when they touch (a block's header and
    /// value, its first word and the rest): the count then tracks the group's ranges closely.
    fn note(&mut self, off: u64, len: u64) {
        self.stores += 1;
        self.batch.bytes += len;
        if let Some((lo, ll)) = self.batch.ranges.last_mut() {
            if off == *lo + *ll {
                *ll += len;
                return;
            }
            if off + len == *lo {
                (*lo, *ll) = (off, *ll + len);
                return;
            }
        }
        self.batch.ranges.push((off, len));
    }

    /// Stores `data` at `off` in place: the bytes it replaces go to the undo area first.
    pub(crate) fn meta(&mut self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        let n = data.len() as u64;
        let rec = UNDO_HEAD + pad8(n);
        let reserve = if self.batch.sealing { 0 } else { self.seal_reserve() };
        if self.batch.undo_len + rec + reserve > self.geo.undo_capacity() {
            return Err(StoreError::TooLarge(format!(
                "the command changes more than the journal's {} bytes of undo space hold: split it into \
                 smaller commands, or use a larger region (the journal is 1/64 of it)",
                self.geo.undo_capacity()
            )));
        }
        let buf = &mut self.undo_buf;
        buf.clear();
        buf.extend_from_slice(&off.to_le_bytes());
        buf.extend_from_slice(&n.to_le_bytes());
        buf.resize((UNDO_HEAD + pad8(n)) as usize, 0);
        self.mem.read(off, &mut buf[UNDO_HEAD as usize..(UNDO_HEAD + n) as usize])?;
        let at = self.batch.undo_len;
        self.mem.write(JOURNAL_OFF + UNDO_AT + at, buf)?;
        self.batch.undo_len += rec;
        self.mem.write(JOURNAL_OFF, &self.batch.undo_len.to_le_bytes())?;
        self.batch.records.push(at);
        self.mem.write(off, data)?;
        self.note(off, n);
        Ok(())
    }

    /// Stores `data` at `off`, bytes the committed state does not use.
    pub(crate) fn fresh(&mut self, off: u64, data: &[u8]) -> Result<(), StoreError> {
        self.mem.write(off, data)?;
        self.note(off, data.len() as u64);
        Ok(())
    }

    /// Undo space sealing needs: a record per freed block and one for the dynamic part.
    pub(crate) fn seal_reserve(&self) -> u64 {
        let frees = self.batch.frees.len() - self.batch.frees_from;
        (UNDO_HEAD + DYN_LEN) + (UNDO_HEAD + 8) * (frees as u64 + 1)
    }

    /// The point to roll back to.
    pub fn savepoint(&mut self) -> Savepoint {
        self.batch.young.clear();
        Savepoint {
            undo_len: self.batch.undo_len,
            records: self.batch.records.len(),
            ranges: self.batch.ranges.len(),
            frees: self.batch.frees.len(),
            frees_from: self.batch.frees_from,
            gen_words: self.batch.gen_words.len(),
            gen_words_from: self.batch.gen_words_from,
            bytes: self.batch.bytes,
            flushed: self.batch.flushed,
            dy: self.dy.clone(),
        }
    }

    /// Undoes every store since `sp`, and forgets the ranges stored since: each byte in them
    /// is back to its state at `sp`, which is either in a range listed before `sp` or what the
    /// last sealed group holds, or lies in blocks that are free again (a node the undone
    /// command made), which nothing reads before writing. Keeping them listed sent a refused
    /// command's whole work in the group: a ZUNIONSTORE too large for one group, refused,
    /// then left one too large for the mirror's log.
    pub fn rollback_to(&mut self, sp: &Savepoint) -> Result<(), StoreError> {
        while self.batch.records.len() > sp.records {
            let at = self.batch.records.pop().expect("more records than the savepoint's");
            self.apply_undo(at)?;
        }
        self.batch.undo_len = sp.undo_len;
        self.mem.write(JOURNAL_OFF, &self.batch.undo_len.to_le_bytes())?;
        self.batch.ranges.truncate(sp.ranges);
        self.batch.young.clear();
        self.batch.frees.truncate(sp.frees);
        self.batch.frees_from = sp.frees_from;
        self.batch.gen_words.truncate(sp.gen_words);
        self.batch.gen_words_from = sp.gen_words_from;
        self.batch.bytes = sp.bytes;
        self.batch.flushed = sp.flushed;
        self.dy = sp.dy.clone();
        Ok(())
    }

    /// Puts back the bytes of the undo record at `at`; returns its range.
    fn apply_undo(&mut self, at: u64) -> Result<(u64, u64), StoreError> {
        let base = JOURNAL_OFF + UNDO_AT + at;
        let off = self.read_u64(base)?;
        let n = self.read_u64(base + 8)?;
        let end = off.checked_add(n);
        if end.is_none_or(|e| e > self.geo.size) || at + UNDO_HEAD + pad8(n) > self.geo.undo_capacity() {
            return Err(StoreError::Corrupt(format!(
                "undo record at journal byte {} names bytes {off}+{n} outside the region",
                UNDO_AT + at
            )));
        }
        let mut old = std::mem::take(&mut self.undo_buf);
        old.resize(n as usize, 0);
        self.mem.read(base + UNDO_HEAD, &mut old)?;
        let r = self.mem.write(off, &old);
        self.undo_buf = old;
        r?;
        Ok((off, n))
    }

    /// Stores made so far (it never goes down: a command that made none changed nothing).
    pub fn stores(&self) -> u64 {
        self.stores
    }

    /// Whether the batch stored anything.
    pub fn dirty(&self) -> bool {
        !self.batch.ranges.is_empty() || self.dy != self.committed
    }

    /// Bytes the batch has stored so far (before merging: an upper bound of the group).
    pub fn batch_bytes(&self) -> u64 {
        self.batch.bytes
    }

    /// Ranges the batch has stored into (before merging).
    pub fn batch_ranges(&self) -> usize {
        self.batch.ranges.len()
    }

    /// At most the bytes the group of the batch would carry if it were sealed now (with at
    /// most `max_ranges` ranges, gaps joined as sealing joins them): its ranges, and what the
    /// seal adds, the link stored in each block freed (8 bytes each) and the allocator's
    /// dynamic part.
    pub fn group_bytes(&self, max_ranges: usize) -> u64 {
        use crate::store::layout::{DYN_LEN, DYN_OFF};
        let max = max_ranges.clamp(2, LIST_MAX + 1) - 1;
        let list = LIST_AT + 16 * max as u64;
        let frees = &self.batch.frees[self.batch.frees_from..];
        if self.batch.ranges.len() + frees.len() < max {
            return self.batch.bytes + 8 * frees.len() as u64 + DYN_LEN + list;
        }
        let mut raw = self.batch.ranges.clone();
        raw.extend(frees.iter().map(|&(b, _)| (b, 8)));
        raw.push((DYN_OFF, DYN_LEN));
        let mut group = Vec::new();
        coalesce(&mut raw, max, &mut group);
        group.iter().map(|r| r.len).sum::<u64>() + list
    }

    /// Whether the batch so far leaves room for another command (else the caller seals
    /// first), for groups of at most `max_group_bytes` and `max_ranges`: less than half the
    /// undo space, a quarter of the group bytes, and three quarters of the ranges used.
    pub fn batch_has_room(&self, max_group_bytes: u64, max_ranges: usize) -> bool {
        self.batch.undo_len < self.geo.undo_capacity() / 2
            && self.batch.bytes < max_group_bytes / 4
            && self.batch.ranges.len() < max_ranges / 4 * 3
    }

    /// Bytes of undo space the batch has used, and the journal's capacity.
    pub fn undo_use(&self) -> (u64, u64) {
        (self.batch.undo_len, self.geo.undo_capacity())
    }

    /// Whether a flush happened in this batch (the caller seals it before the next command, so
    /// that the emptied heap is reused from its start).
    pub fn flushed_in_batch(&self) -> bool {
        self.batch.flushed
    }

    /// Ends the batch locally: the freed blocks go to their lists, the allocator's state is
    /// stored, the batch's ranges listed, and `undo_len` set to 0. Returns the group to
    /// `gmsync` (at most `max_ranges` ranges), or `None` when the batch stored nothing. Until
    /// the group is acknowledged no reply of the batch may be sent; the next batch may begin
    /// at once (its stores come after the group's in every copy).
    pub fn seal(&mut self, max_ranges: usize) -> Result<Option<&[Range]>, StoreError> {
        if !self.dirty() {
            return Ok(None);
        }
        self.batch.sealing = true;
        let r = self.seal_allocator();
        self.batch.sealing = false;
        r?;
        // One range for the journal's head and list, the rest for the batch.
        let max = max_ranges.clamp(2, LIST_MAX + 1) - 1;
        let mut group = std::mem::take(&mut self.group);
        coalesce(&mut self.batch.ranges, max, &mut group);
        self.write_list(&group)?;
        self.batch.undo_len = 0;
        self.mem.write(JOURNAL_OFF, &0u64.to_le_bytes())?;
        self.committed = self.dy.clone();
        self.batch.records.clear();
        self.batch.ranges.clear();
        self.batch.bytes = 0;
        self.batch.flushed = false;
        self.batch.top_mark = 0;
        self.batch.gen_words.clear();
        self.batch.gen_words_from = 0;
        self.batch.young.clear();
        group.push(Range::new(JOURNAL_OFF, LIST_AT + 16 * (group.len() as u64)));
        self.group = group;
        Ok(Some(&self.group))
    }

    /// The group of the last batch sealed (empty before the first): sending it again, once a
    /// new session's copy has brought the mirror up to date, makes every sealed batch
    /// durable.
    pub fn last_group(&self) -> &[Range] {
        &self.group
    }

    /// The freed blocks onto their lists, then the dynamic part, in place.
    fn seal_allocator(&mut self) -> Result<(), StoreError> {
        let mut frees = std::mem::take(&mut self.batch.frees);
        let mut r = Ok(());
        for &(b, c) in &frees[self.batch.frees_from..] {
            let head = self.dy.heads[c as usize];
            r = self.meta(b, &head.to_le_bytes());
            if r.is_err() {
                break;
            }
            self.dy.heads[c as usize] = b;
        }
        frees.clear();
        self.batch.frees = frees;
        self.batch.frees_from = 0;
        r?;
        if let Some((at, len)) = self.dy.diff(&self.committed) {
            let bytes = self.dy.encode();
            self.meta(DYN_OFF + at as u64, &bytes[at..at + len])?;
        }
        Ok(())
    }

    /// Writes the journal's list (and its count and the batch number) for `ranges`.
    pub(crate) fn write_list(&mut self, ranges: &[Range]) -> Result<(), StoreError> {
        assert!(ranges.len() <= LIST_MAX, "a list of {} ranges", ranges.len());
        let mut buf = std::mem::take(&mut self.undo_buf);
        buf.clear();
        for r in ranges {
            buf.extend_from_slice(&r.offset.to_le_bytes());
            buf.extend_from_slice(&r.len.to_le_bytes());
        }
        let w = self.mem.write(JOURNAL_OFF + LIST_AT, &buf);
        self.undo_buf = buf;
        w?;
        self.batch_no += 1;
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&self.batch_no.to_le_bytes());
        head[8..].copy_from_slice(&(ranges.len() as u64).to_le_bytes());
        self.mem.write(JOURNAL_OFF + 8, &head)
    }

    /// The group of the last sealed batch, as the journal lists it (with the journal's own
    /// range): what a store just opened sends again.
    pub(crate) fn listed_group(&mut self) -> Result<Vec<Range>, StoreError> {
        let n = self.read_u64(JOURNAL_OFF + 16)?;
        if n > LIST_MAX as u64 {
            return Err(StoreError::Corrupt(format!("the journal lists {n} ranges, more than {LIST_MAX}")));
        }
        let mut out = Vec::with_capacity(n as usize + 1);
        for i in 0..n {
            let off = self.read_u64(JOURNAL_OFF + LIST_AT + 16 * i)?;
            let len = self.read_u64(JOURNAL_OFF + LIST_AT + 16 * i + 8)?;
            if off.checked_add(len).is_none_or(|e| e > self.geo.size) {
                return Err(StoreError::Corrupt(format!(
                    "the journal lists bytes {off}+{len} outside the region"
                )));
            }
            out.push(Range::new(off, len));
        }
        out.push(Range::new(JOURNAL_OFF, LIST_AT + 16 * n));
        Ok(out)
    }

    /// After a crash in a batch: applies its undo records backwards, then records the ranges
    /// it restored as a sealed batch's. Returns how many records were undone.
    pub(crate) fn roll_back_cut_batch(&mut self, max_ranges: usize) -> Result<usize, StoreError> {
        let undo_len = self.read_u64(JOURNAL_OFF)?;
        if undo_len > self.geo.undo_capacity() || !undo_len.is_multiple_of(8) {
            return Err(StoreError::Corrupt(format!(
                "the journal says {undo_len} bytes of undo records, its undo area holds {}",
                self.geo.undo_capacity()
            )));
        }
        let mut starts = Vec::new();
        let mut at = 0;
        while at < undo_len {
            starts.push(at);
            let n = self.read_u64(JOURNAL_OFF + UNDO_AT + at + 8)?;
            at = n.checked_add(UNDO_HEAD + 7).map(|v| at + v / 8 * 8).filter(|&e| e <= undo_len).ok_or_else(
                || StoreError::Corrupt(format!("undo record at {at} runs past undo_len {undo_len}")),
            )?;
        }
        let mut ranges = Vec::with_capacity(starts.len());
        for &s in starts.iter().rev() {
            ranges.push(self.apply_undo(s)?);
        }
        let mut group = Vec::new();
        coalesce(&mut ranges, max_ranges.clamp(2, LIST_MAX + 1) - 1, &mut group);
        self.write_list(&group)?;
        self.mem.write(JOURNAL_OFF, &0u64.to_le_bytes())?;
        Ok(starts.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_merges_then_bridges_the_smallest_gaps() {
        let mut raw = vec![(1000, 8), (0, 8), (8, 8), (100, 8), (5000, 8), (1004, 8)];
        let mut out = Vec::new();
        coalesce(&mut raw, 10, &mut out);
        assert_eq!(
            out,
            vec![Range::new(0, 16), Range::new(100, 8), Range::new(1000, 12), Range::new(5000, 8)]
        );
        // (0,16) and (100,8) are 84 apart; merging within 64 does not join them.
        coalesce(&mut raw, 2, &mut out);
        assert_eq!(out, vec![Range::new(0, 1012), Range::new(5000, 8)]);
        coalesce(&mut raw, 1, &mut out);
        assert_eq!(out, vec![Range::new(0, 5008)]);
    }
}
