//! Which complete group to apply next, and when.
//!
//! Complete groups arrive per lane in increasing sequence order; the checkpointer applies them
//! to the data area in global sequence order, one gap-free step at a time while running. Only
//! [`Checkpointer::next_any`] (used when a session is sealed or a log recovered) skips gaps.

use std::collections::VecDeque;

/// A complete group in a lane's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRef {
    /// The group's sequence number; for a void group (see [`GroupRef::void`]) the last of the
    /// numbers it covers.
    pub seq: u64,
    /// The first sequence number it covers: `seq`, or less for a void group.
    pub first_seq: u64,
    pub lane: u16,
    /// Position of its first record.
    pub start_pos: u64,
    /// Position just past its last record.
    pub end_pos: u64,
    /// Bytes of data it writes.
    pub bytes: u64,
}

impl GroupRef {
    /// A group of data: covers just `seq`.
    pub fn data(seq: u64, lane: u16, start_pos: u64, end_pos: u64, bytes: u64) -> GroupRef {
        GroupRef { seq, first_seq: seq, lane, start_pos, end_pos, bytes }
    }

    /// Sequence numbers `first ..= last` that will never carry data, at log position `pos` of
    /// `lane` (no records).
    pub fn void(first: u64, last: u64, lane: u16, pos: u64) -> GroupRef {
        GroupRef { seq: last, first_seq: first, lane, start_pos: pos, end_pos: pos, bytes: 0 }
    }
}

/// When to checkpoint: the paper's `CHECKPOINT_THRESH`, idleness, and full logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Apply once this many complete groups wait.
    pub thresh: usize,
}

impl CheckpointPolicy {
    pub fn due(&self, ready: usize, idle: bool, log_full: bool) -> bool {
        ready > 0 && (ready >= self.thresh || idle || log_full)
    }
}

/// Complete groups waiting to be applied.
#[derive(Clone, Debug)]
pub struct Checkpointer {
    applied_seq: u64,
    lanes: Vec<VecDeque<GroupRef>>,
    waiting: usize,
    /// Per-lane cursors for [`Checkpointer::plan`], allocated once.
    cursors: Vec<usize>,
}

impl Checkpointer {
    /// `queue_capacity` bounds the groups one lane may hold; it is allocated here, once.
    pub fn new(lanes: usize, applied_seq: u64, queue_capacity: usize) -> Checkpointer {
        Checkpointer {
            applied_seq,
            lanes: (0..lanes).map(|_| VecDeque::with_capacity(queue_capacity)).collect(),
            waiting: 0,
            cursors: vec![0; lanes],
        }
    }

    pub fn applied_seq(&self) -> u64 {
        self.applied_seq
    }

    /// Groups waiting, whether or not they can be applied yet.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Bytes the waiting groups write, whether or not they can be applied yet (counted on each
    /// call: the node keeps its own running sum).
    pub fn waiting_bytes(&self) -> u64 {
        self.lanes.iter().flatten().map(|g| g.bytes).sum()
    }

    /// Bytes the gap-free run of waiting groups after the applied prefix writes: what applying
    /// now can take away. Groups after a gap are left out: they wait for a lane to bring the
    /// missing group. Counted on each call, without allocating.
    pub fn ready_bytes(&self) -> u64 {
        let mut at = [0usize; crate::handshake::MAX_LANES as usize];
        assert!(self.lanes.len() <= at.len(), "{} lanes, past the limit", self.lanes.len());
        let (mut seq, mut bytes) = (self.applied_seq, 0);
        loop {
            let next = self.lanes.iter().enumerate().find_map(|(i, q)| {
                q.get(at[i]).filter(|g| g.first_seq == seq + 1).map(|g| (i, g.seq, g.bytes))
            });
            let Some((i, last, b)) = next else { return bytes };
            at[i] += 1;
            seq = last;
            bytes += b;
        }
    }

    /// Highest sequence number waiting, if any.
    pub fn highest_waiting(&self) -> Option<u64> {
        self.lanes.iter().filter_map(|q| q.back().map(|g| g.seq)).max()
    }

    /// Records a complete group. Groups of one lane must come in increasing order.
    pub fn push(&mut self, g: GroupRef) {
        let q = &mut self.lanes[g.lane as usize];
        if let Some(last) = q.back() {
            assert!(
                g.seq > last.seq && g.start_pos >= last.end_pos,
                "lane order broken: {last:?} then {g:?}"
            );
        }
        assert!(
            g.first_seq > self.applied_seq && g.first_seq <= g.seq,
            "group {}..={} already applied (applied_seq {})",
            g.first_seq,
            g.seq,
            self.applied_seq
        );
        q.push_back(g);
        self.waiting += 1;
    }

    /// The group that comes right after the applied prefix, if it is here.
    pub fn next(&self) -> Option<GroupRef> {
        let want = self.applied_seq + 1;
        self.lanes.iter().filter_map(|q| q.front()).find(|g| g.first_seq == want).copied()
    }

    /// The lowest waiting group, gap or not (for sealing and recovery).
    pub fn next_any(&self) -> Option<GroupRef> {
        self.lanes.iter().filter_map(|q| q.front()).min_by_key(|g| g.seq).copied()
    }

    /// Lists, in order, up to `max` groups that would be applied next: the gap-free run after
    /// the applied prefix, or with `allow_gaps` every waiting group. Nothing changes until each
    /// is passed to [`Checkpointer::applied`].
    pub fn plan(&mut self, allow_gaps: bool, max: usize, out: &mut Vec<GroupRef>) {
        out.clear();
        self.cursors.fill(0);
        let mut seq = self.applied_seq;
        while out.len() < max {
            let fronts =
                self.lanes.iter().enumerate().filter_map(|(i, q)| q.get(self.cursors[i]).map(|g| (i, *g)));
            let pick = if allow_gaps {
                fronts.min_by_key(|(_, g)| g.seq)
            } else {
                fronts.into_iter().find(|(_, g)| g.first_seq == seq + 1)
            };
            let Some((i, g)) = pick else { break };
            self.cursors[i] += 1;
            seq = g.seq;
            out.push(g);
        }
    }

    /// Marks `g` (the front of its lane, as returned by `next` or `next_any`) applied.
    pub fn applied(&mut self, g: GroupRef) {
        let front = self.lanes[g.lane as usize].pop_front();
        assert_eq!(front, Some(g), "applied a group that was not at the front of its lane");
        assert!(g.seq > self.applied_seq);
        self.applied_seq = g.seq;
        self.waiting -= 1;
    }

    /// Drops every waiting group.
    pub fn clear(&mut self) {
        for q in &mut self.lanes {
            self.waiting -= q.len();
            q.clear();
        }
    }

    /// The first sequence number of a new session: right after the applied prefix. Nothing
    /// may be waiting (the previous session was sealed, or recovery applied everything), so the
    /// checkpointer waits for exactly that number next. Numbers of groups dropped unfinished are
    /// used again; their stale records belong to another session and recovery never joins them
    /// to new ones.
    pub fn resume(&self) -> u64 {
        assert_eq!(self.waiting, 0, "resume with groups waiting");
        self.applied_seq + 1
    }

    /// Starts over at `seq`, forward or back: the data area was replaced wholesale (a full copy
    /// begins) and the groups before it are no longer this copy's history.
    pub fn reset_to(&mut self, seq: u64) {
        assert_eq!(self.waiting, 0, "reset_to with groups waiting");
        self.applied_seq = seq;
    }

    /// Moves the applied watermark forward over a gap that will never be filled.
    pub fn skip_to(&mut self, seq: u64) {
        assert_eq!(self.waiting, 0, "skip_to with groups waiting");
        self.applied_seq = self.applied_seq.max(seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(seq: u64, lane: u16, pos: u64) -> GroupRef {
        GroupRef::data(seq, lane, pos, pos + 128, 10)
    }

    #[test]
    fn applies_in_global_order_across_lanes() {
        let mut c = Checkpointer::new(2, 0, 8);
        c.push(g(2, 1, 0));
        assert_eq!(c.next(), None, "waits for 1");
        c.push(g(1, 0, 0));
        c.push(g(3, 0, 128));
        assert_eq!(c.waiting(), 3);
        let mut order = vec![];
        while let Some(x) = c.next() {
            c.applied(x);
            order.push(x.seq);
        }
        assert_eq!(order, vec![1, 2, 3]);
        assert_eq!(c.applied_seq(), 3);
    }

    #[test]
    fn plan_follows_order_and_gaps_only_when_allowed() {
        let mut c = Checkpointer::new(2, 0, 8);
        c.push(g(1, 0, 0));
        c.push(g(2, 1, 0));
        c.push(g(4, 1, 128));
        let mut out = Vec::new();
        c.plan(false, 10, &mut out);
        assert_eq!(out.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![1, 2]);
        c.plan(true, 10, &mut out);
        assert_eq!(out.iter().map(|g| g.seq).collect::<Vec<_>>(), vec![1, 2, 4]);
        for x in out.clone() {
            c.applied(x);
        }
        assert_eq!((c.applied_seq(), c.waiting()), (4, 0));
    }

    #[test]
    fn ready_bytes_count_the_gap_free_run_only() {
        let mut c = Checkpointer::new(2, 0, 8);
        assert_eq!(c.ready_bytes(), 0);
        c.push(g(2, 1, 0));
        c.push(g(4, 1, 128));
        assert_eq!((c.ready_bytes(), c.waiting_bytes()), (0, 20), "1 is missing");
        c.push(g(1, 0, 0));
        assert_eq!(c.ready_bytes(), 20, "1 and 2; 4 waits for 3");
        c.push(GroupRef::void(3, 3, 0, 128));
        assert_eq!(c.ready_bytes(), 30);
    }

    #[test]
    fn resume_starts_right_after_the_applied_prefix() {
        let mut c = Checkpointer::new(1, 185, 8);
        assert_eq!(c.resume(), 186);
        c.push(g(186, 0, 0));
        assert_eq!(c.next().map(|g| g.seq), Some(186));
    }

    #[test]
    fn void_groups_are_applied_in_order() {
        let mut c = Checkpointer::new(1, 4, 8);
        c.push(GroupRef::void(5, 7, 0, 0));
        c.push(g(8, 0, 0));
        let mut out = Vec::new();
        c.plan(false, 10, &mut out);
        assert_eq!(out.iter().map(|g| (g.first_seq, g.seq)).collect::<Vec<_>>(), vec![(5, 7), (8, 8)]);
        for x in out.clone() {
            c.applied(x);
        }
        assert_eq!(c.applied_seq(), 8);
    }

    #[test]
    fn policy() {
        let p = CheckpointPolicy { thresh: 4 };
        assert!(!p.due(0, true, true));
        assert!(!p.due(3, false, false));
        assert!(p.due(3, true, false) && p.due(3, false, true) && p.due(4, false, false));
    }
}
