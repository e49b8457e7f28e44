//! A copy into the mirror (a resync after a lost session): the bookkeeping of one session's
//! copies, as a part of [`super::Session`].
//!
//! A sender announces a copy on its lanes (CopyBegin): the data area is marked inconsistent
//! before any copied byte lands. Copy frames then land straight in the data area; one that fails
//! its check is asked for again (CopyRetry) and the copy cannot end until a frame that landed
//! covers it. Each lane ends its part (CopyEnd, naming the generation and the last copy group);
//! once every lane has, the data area takes the generation and records the copy's last group,
//! and is consistent as soon as that group is applied.

use super::session::SessionCommand;
use crate::control::CopyPhase;
use crate::receive::Violation;

/// Copy frames a copy may have waiting to be sent again, at most: more means the link corrupts
/// much of what it carries, and the session ends.
pub const MAX_COPY_RETRIES: usize = 1024;

/// The copies of one session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyState {
    /// A copy began in this session and not every lane has ended it (the data area is marked
    /// inconsistent). A session may hold several copies, one after another (a mirror feeding
    /// this backup opens one for each copy it gets).
    open: bool,
    /// Lanes that sent CopyEnd since the last copy or generation was complete (bit per lane),
    /// and the highest copy group among them.
    ended_lanes: u64,
    until: u64,
    /// The open copy's size in bytes (from CopyBegin).
    total_bytes: u64,
    /// Copy frames of the open copy that failed their check, did not land, and were asked for
    /// again: `(offset, len)`.
    retry: Vec<(u64, u64)>,
}

impl CopyState {
    /// Whether a copy is open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The open copy's size in bytes (0: none open).
    pub fn total_bytes(&self) -> u64 {
        if self.open {
            self.total_bytes
        } else {
            0
        }
    }

    /// Where the copy stands, for the lane's rule on Copy and CopyEnd frames
    /// ([`crate::control::lane_step`]).
    pub fn phase(&self) -> CopyPhase {
        if !self.open {
            return CopyPhase::Closed;
        }
        match self.unsettled() {
            Some(Violation::CopyNotResent { frames, first_offset }) => {
                CopyPhase::AwaitingResend { frames, first_offset }
            }
            _ => CopyPhase::Open,
        }
    }

    /// A lane announced a copy of `total_bytes`: the data area is marked inconsistent before
    /// any of it lands. Another lane's announcement of the open copy changes nothing.
    pub(super) fn begin(&mut self, total_bytes: u64) -> Vec<SessionCommand> {
        if self.open {
            return Vec::new();
        }
        *self = CopyState { open: true, total_bytes, ..CopyState::default() };
        vec![SessionCommand::CopyStarted { total_bytes }, SessionCommand::MarkInconsistent { copy_until: 0 }]
    }

    /// Lane `lane` of a session of `lanes` ended its part of a copy with `last`, its last copy
    /// group (or, without CopyBegin, just names `generation`). Once every lane has, the data area
    /// takes `generation` ([`CopyState::generation_adopted`] once it has). Without a copy the
    /// first lane's CopyEnd is enough: it comes before every group of its lane, so no group is
    /// acknowledged, on any lane, before the generation is durable (else a crash could leave
    /// applied groups under the old generation, which the primary's next session would call a
    /// split brain).
    pub(super) fn end(&mut self, lanes: u16, lane: u16, generation: u64, last: u64) -> Vec<SessionCommand> {
        self.ended_lanes |= 1u64 << lane;
        self.until = self.until.max(last);
        if self.open && self.ended_lanes.count_ones() < u32::from(lanes) {
            return Vec::new();
        }
        vec![SessionCommand::AdoptGeneration(generation)]
    }

    /// The generation [`CopyState::end`] named is persistent: the copy is complete, and the data
    /// area records its last group (it is consistent once that group is applied). Until then a
    /// failed write of the generation leaves the copy open.
    pub(super) fn generation_adopted(&mut self) -> Vec<SessionCommand> {
        self.ended_lanes = 0;
        let until = std::mem::take(&mut self.until);
        let mut out = Vec::new();
        if std::mem::take(&mut self.open) {
            out.push(SessionCommand::MarkInconsistent { copy_until: until.max(1) });
        }
        out.push(SessionCommand::CheckConsistent);
        out
    }

    /// The Copy frame `[offset, offset + len)` failed its check and did not land; the sender is
    /// asked for it again. A violation when too many wait.
    pub(super) fn rejected(&mut self, offset: u64, len: u64) -> Result<(), Violation> {
        if self.retry.len() >= MAX_COPY_RETRIES {
            return Err(Violation::CopyNotResent { frames: self.retry.len(), first_offset: self.retry[0].0 });
        }
        self.retry.push((offset, len));
        Ok(())
    }

    /// The Copy frame `[offset, offset + len)` landed: it settles what it covers of the rejected
    /// frames (a resend may cut the same bytes into frames differently).
    pub(super) fn landed(&mut self, offset: u64, len: u64) {
        if !self.retry.is_empty() {
            self.retry = subtract(&self.retry, offset, offset + len);
        }
    }

    /// Why the copy cannot end yet: rejected Copy frames not sent again.
    pub fn unsettled(&self) -> Option<Violation> {
        let &(first_offset, _) = self.retry.first()?;
        Some(Violation::CopyNotResent { frames: self.retry.len(), first_offset })
    }
}

/// The generations a data area at `(old, old_prev)` records when it takes `generation`: `None`
/// when it already has it; else the new one, with the old one (or, if it had none, its previous
/// one) as its previous.
pub fn generation_after(old: u64, old_prev: u64, generation: u64) -> Option<(u64, u64)> {
    (generation != old).then_some((generation, if old != 0 { old } else { old_prev }))
}

/// Whether a data area holds a usable copy: no copy into it is unfinished (`inconsistent`
/// clear), or the copy recorded its last group (`copy_until`, 0 while it runs) and the area has
/// applied it (`applied_seq`). Only such an area may be reported consistent, served from or
/// promoted; the runtime clears the mark once this holds of a marked one.
pub fn copy_complete(inconsistent: bool, copy_until: u64, applied_seq: u64) -> bool {
    !inconsistent || (copy_until != 0 && applied_seq >= copy_until)
}

/// `ranges` (offset, len) without `[lo, hi)`.
fn subtract(ranges: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(o, l) in ranges {
        let end = o + l;
        if end <= lo || o >= hi {
            out.push((o, l));
            continue;
        }
        if o < lo {
            out.push((o, lo - o));
        }
        if end > hi {
            out.push((hi, end - hi));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionCommand::*;

    #[test]
    fn a_landed_frame_settles_what_it_covers_of_rejected_ones() {
        let rejected = [(0, 4096), (4096, 256 << 10), (1 << 20, 100)];
        // A resend cut from offset 0 in 256 KiB frames covers the first whole, the second in part.
        assert_eq!(subtract(&rejected, 0, 256 << 10), [(256 << 10, 4096), (1 << 20, 100)]);
        assert_eq!(subtract(&[(256 << 10, 4096)], 256 << 10, 512 << 10), []);
        // A frame inside a rejected one leaves both sides.
        assert_eq!(subtract(&[(0, 100)], 10, 20), [(0, 10), (20, 80)]);
        assert_eq!(subtract(&[(0, 100)], 100, 200), [(0, 100)]);
    }

    #[test]
    fn a_copy_marks_the_area_inconsistent_once_and_ends_when_every_lane_has_ended_it() {
        let mut c = CopyState::default();
        assert_eq!(c.phase(), CopyPhase::Closed);
        assert_eq!(
            c.begin(1 << 20),
            [CopyStarted { total_bytes: 1 << 20 }, MarkInconsistent { copy_until: 0 }]
        );
        assert_eq!(c.begin(1 << 20), [], "another lane's announcement of the same copy");
        assert_eq!((c.phase(), c.total_bytes()), (CopyPhase::Open, 1 << 20));
        assert_eq!(c.end(3, 0, 7, 40), []);
        assert_eq!(c.end(3, 2, 7, 55), []);
        assert_eq!(c.end(3, 2, 7, 50), [], "a lane counts once");
        assert_eq!(c.end(3, 1, 7, 12), [AdoptGeneration(7)]);
        assert_eq!(c.phase(), CopyPhase::Open, "open until the generation is persistent");
        assert_eq!(c.generation_adopted(), [MarkInconsistent { copy_until: 55 }, CheckConsistent]);
        assert_eq!((c.phase(), c.total_bytes()), (CopyPhase::Closed, 0));
        // A second copy in the same session starts from nothing.
        c.begin(10);
        assert_eq!(c.end(1, 0, 8, 0), [AdoptGeneration(8)]);
        assert_eq!(c.generation_adopted(), [MarkInconsistent { copy_until: 1 }, CheckConsistent]);
    }

    #[test]
    fn an_area_is_usable_once_no_copy_runs_or_its_last_group_is_applied() {
        assert!(copy_complete(false, 0, 0));
        assert!(!copy_complete(true, 0, 50), "the copy has not ended");
        assert!(!copy_complete(true, 60, 59));
        assert!(copy_complete(true, 60, 60));
    }

    #[test]
    fn without_a_copy_the_first_lane_end_names_the_generation() {
        let mut c = CopyState::default();
        assert_eq!(c.end(4, 3, 9, 0), [AdoptGeneration(9)]);
        assert_eq!(c.generation_adopted(), [CheckConsistent]);
        assert_eq!(generation_after(0, 0, 9), Some((9, 0)));
        assert_eq!(generation_after(9, 0, 9), None);
        assert_eq!(generation_after(9, 3, 12), Some((12, 9)));
        assert_eq!(generation_after(0, 3, 12), Some((12, 3)), "a wiped area keeps its previous one");
    }

    #[test]
    fn a_rejected_frame_holds_the_copy_open_until_a_landed_one_covers_it() {
        let mut c = CopyState::default();
        c.begin(1 << 20);
        c.rejected(4096, 4096).expect("room");
        let waiting = CopyPhase::AwaitingResend { frames: 1, first_offset: 4096 };
        assert_eq!(c.phase(), waiting);
        c.landed(0, 4096);
        assert_eq!(c.phase(), waiting, "a frame beside it settles nothing");
        c.landed(0, 6000);
        assert_eq!(c.phase(), CopyPhase::AwaitingResend { frames: 1, first_offset: 6000 });
        c.landed(6000, 4096);
        assert_eq!(c.phase(), CopyPhase::Open);
        for i in 0..MAX_COPY_RETRIES as u64 {
            c.rejected(i * 64, 64).expect("room");
        }
        let e = c.rejected(1 << 19, 64).unwrap_err();
        assert_eq!(e, Violation::CopyNotResent { frames: MAX_COPY_RETRIES, first_offset: 0 });
    }
}
