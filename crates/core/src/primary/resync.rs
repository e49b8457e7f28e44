//! Which resynchronisation a session begins with.
//!
//! The primary compares the mirror's history (its generation id, the one before it, and its
//! applied sequence number, from the Welcome) with its own, as DRBD compares its UUIDs, and
//! picks the cheapest way that is certain to be complete:
//!
//! | mirror | plan |
//! |---|---|
//! | inconsistent (a copy into it did not finish) | full copy |
//! | new (generation 0, nothing applied) and this copy new too | nothing: both are zero |
//! | new, this copy has a history | full copy |
//! | same generation | the ranges of the metadata log after the lower of the mirror's applied number and the last group acknowledged to this copy (log catch-up), else full copy |
//! | this copy's previous generation, and the dirty bitmap starts there | dirty chunks + those ranges (bitmap) |
//! | the mirror's previous generation is this copy's | refuse: the mirror is newer |
//! | this copy new, the mirror's not | refuse: never replicated |
//! | anything else | refuse: split brain |
//!
//! Ranges are `(offset, len)` pairs of region bytes, as the metadata log gives them.

use mojim_format::handshake::Welcome;
use std::fmt;

/// The number under which the metadata log records the ranges of a sync point refused for
/// want of a mirror (`on_mirror_loss = block`): above every group's, so the next session's plan
/// resends them whatever the mirror applied. The application was told the sync point failed,
/// but its bytes are in this copy, and what it syncs later may depend on them.
pub const REFUSED_SYNC: u64 = u64::MAX;

/// How a mirror is brought up to date; the number is CopyBegin's argument on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(rename_all = "kebab-case"))]
pub enum CopyKind {
    /// The ranges of the groups the mirror missed, from the metadata log.
    Log = 1,
    /// The chunks the dirty bitmap recorded while degraded, and the missed groups' ranges.
    Bitmap = 2,
    /// Everything.
    Full = 3,
}

impl CopyKind {
    /// The kind's name as status shows it: `log`, `bitmap` or `full`.
    pub fn name(self) -> &'static str {
        match self {
            CopyKind::Log => "log",
            CopyKind::Bitmap => "bitmap",
            CopyKind::Full => "full",
        }
    }
}

/// This copy's history, as the primary holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryHistory {
    /// This copy's generation id (0: never replicated).
    pub generation: u64,
    /// The generation before it (0: none).
    pub prev: u64,
    /// The generation the dirty bitmap started from, if it is recording.
    pub dirty_base: Option<u64>,
    /// Every group up to this one was acknowledged by the mirror (the metadata log's
    /// acknowledged floor).
    pub acked: u64,
}

/// The mirror's history, as its Welcome states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MirrorHistory {
    /// The mirror copy's generation id (0: new).
    pub generation: u64,
    /// The generation before it (0: none).
    pub prev_generation: u64,
    /// The last group the mirror applied (0: none).
    pub applied: u64,
    /// A copy into the mirror began and did not finish.
    pub inconsistent: bool,
}

impl MirrorHistory {
    /// The history a mirror's Welcome states (it names the next group it expects).
    pub fn of(w: &Welcome) -> MirrorHistory {
        MirrorHistory {
            generation: w.generation,
            prev_generation: w.prev_generation,
            applied: w.next_seq.saturating_sub(1),
            inconsistent: w.inconsistent,
        }
    }

    /// Generation 0 and nothing applied: the mirror holds nothing yet.
    pub fn is_new(&self) -> bool {
        self.generation == 0 && self.applied == 0
    }
}

/// Why a plan was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Neither copy was ever replicated: both are zero.
    BothNew,
    /// Same generation, and the metadata log holds no group after the mirror's applied one.
    NothingMissed,
    /// A copy into the mirror did not finish.
    MirrorInconsistent,
    /// The mirror is new and this copy has a history.
    MirrorNew,
    /// The metadata log no longer holds every group after the mirror's applied one.
    LogOverwritten,
    /// Same generation: the mirror missed the groups the metadata log still holds.
    MissedGroups,
    /// The mirror is at this copy's previous generation, where the dirty bitmap started.
    DegradedSince,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::BothNew => "neither copy was ever replicated",
            Reason::NothingMissed => "the mirror has applied every group",
            Reason::MirrorInconsistent => "a copy into the mirror did not finish",
            Reason::MirrorNew => "the mirror is new",
            Reason::LogOverwritten => "the metadata log no longer holds every group the mirror missed",
            Reason::MissedGroups => "the mirror missed groups the metadata log holds",
            Reason::DegradedSince => "the mirror is at the generation the dirty bitmap records from",
        })
    }
}

/// What to send before the mirror is current, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    InSync(Reason),
    Copy { kind: CopyKind, reason: Reason, ranges: Vec<(u64, u64)> },
}

impl Plan {
    /// The plan's name as the primary logs it: `in sync`, or the copy's kind.
    pub fn name(&self) -> &'static str {
        match self {
            Plan::InSync(_) => "in sync",
            Plan::Copy { kind, .. } => kind.name(),
        }
    }

    pub fn reason(&self) -> Reason {
        match self {
            Plan::InSync(r) | Plan::Copy { reason: r, .. } => *r,
        }
    }

    /// The first group the metadata log answers for once this plan's session begins at
    /// `next_seq`: where the log restarts. In sync, the session's first group. A copy marks the
    /// mirror inconsistent before it gets anything, and a copy that does not finish is redone
    /// in full; one that finishes has had the mirror apply its groups, the first of them
    /// numbered `next_seq` or later, so no record up to `next_seq` is needed again.
    pub fn log_start(&self, next_seq: u64) -> u64 {
        match self {
            Plan::InSync(_) => next_seq,
            Plan::Copy { .. } => next_seq + 1,
        }
    }

    fn full(reason: Reason, region_size: u64) -> Plan {
        Plan::Copy { kind: CopyKind::Full, reason, ranges: vec![(0, region_size)] }
    }
}

/// Why the mirror's copy cannot be brought up to date automatically: the two copies' histories
/// say which to keep is the operator's choice (or that this node must not be primary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// The mirror moved on from this copy's generation `mine` to `theirs`: it was primary
    /// after this node.
    MirrorNewer { mine: u64, theirs: u64 },
    /// This copy was never replicated, but the mirror holds one (generation `theirs`, with
    /// `applied` groups applied).
    NeverReplicated { theirs: u64, applied: u64 },
    /// Both copies changed since they last agreed.
    SplitBrain { mine: u64, mine_prev: u64, theirs: u64, theirs_prev: u64 },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Divergence::MirrorNewer { mine, theirs } => write!(
                f,
                "the mirror's copy is newer than this one: it moved on from this copy's generation {mine:#x} to \
                 {theirs:#x} (it was primary after this node); this node must not be primary: rejoin it as a backup"
            ),
            Divergence::NeverReplicated { theirs, applied } => write!(
                f,
                "this region has never been replicated but the mirror holds a copy (generation {theirs:#x}, \
                 {applied} groups applied); open the mirror's copy instead, or discard the mirror's copy with \
                 `mojim resolve --discard`"
            ),
            Divergence::SplitBrain { mine, mine_prev, theirs, theirs_prev } => write!(
                f,
                "split brain: this copy (generation {mine:#x}, before it {mine_prev:#x}) and the mirror's \
                 (generation {theirs:#x}, before it {theirs_prev:#x}) both changed since they last agreed; choose \
                 the copy to keep and discard the other with `mojim resolve --discard NODE`"
            ),
        }
    }
}

impl std::error::Error for Divergence {}

/// Picks the plan (see the module's table). `ring_after(seq)` gives the ranges of the groups
/// after `seq` if the metadata log still holds them all; `dirty()` the dirty bitmap's chunks.
/// Each is asked at most once, and only when the plan depends on it.
pub fn resync_choice(
    mine: PrimaryHistory,
    mirror: MirrorHistory,
    region_size: u64,
    ring_after: impl FnOnce(u64) -> Option<Vec<(u64, u64)>>,
    dirty: impl FnOnce() -> Vec<(u64, u64)>,
) -> Result<Plan, Divergence> {
    if mirror.inconsistent {
        return Ok(Plan::full(Reason::MirrorInconsistent, region_size));
    }
    if mirror.is_new() {
        return Ok(if mine.generation == 0 {
            Plan::InSync(Reason::BothNew)
        } else {
            Plan::full(Reason::MirrorNew, region_size)
        });
    }
    // A mirror may apply groups past one it lacks (a seal or a recovery applies every complete
    // group), so its applied number does not prove it holds every group below it; the
    // acknowledgements do. The log resends from the lower of the two.
    let missed_after = mirror.applied.min(mine.acked);
    if mine.generation != 0 && mirror.generation == mine.generation {
        return Ok(match ring_after(missed_after) {
            Some(r) if r.is_empty() => Plan::InSync(Reason::NothingMissed),
            Some(ranges) => Plan::Copy { kind: CopyKind::Log, reason: Reason::MissedGroups, ranges },
            None => Plan::full(Reason::LogOverwritten, region_size),
        });
    }
    if mine.prev != 0 && mirror.generation == mine.prev && mine.dirty_base == Some(mirror.generation) {
        return Ok(match ring_after(missed_after) {
            Some(mut ranges) => {
                ranges.extend(dirty());
                Plan::Copy { kind: CopyKind::Bitmap, reason: Reason::DegradedSince, ranges: coalesce(ranges) }
            }
            None => Plan::full(Reason::LogOverwritten, region_size),
        });
    }
    if mine.generation != 0 && mirror.prev_generation == mine.generation {
        return Err(Divergence::MirrorNewer { mine: mine.generation, theirs: mirror.generation });
    }
    if mine.generation == 0 {
        return Err(Divergence::NeverReplicated { theirs: mirror.generation, applied: mirror.applied });
    }
    Err(Divergence::SplitBrain {
        mine: mine.generation,
        mine_prev: mine.prev,
        theirs: mirror.generation,
        theirs_prev: mirror.prev_generation,
    })
}

/// Sorts ranges and merges those that overlap or touch; empty ones go.
pub fn coalesce(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|r| r.1 > 0);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (off, len) in v {
        match out.last_mut() {
            Some(last) if off <= last.0 + last.1 => {
                let end = (last.0 + last.1).max(off + len);
                last.1 = end - last.0;
            }
            _ => out.push((off, len)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 1 << 20;
    const DIRTY: (u64, u64) = (65536, 65536);

    fn mine(generation: u64, prev: u64, dirty_base: Option<u64>) -> PrimaryHistory {
        PrimaryHistory { generation, prev, dirty_base, acked: u64::MAX }
    }

    fn mirror(applied: u64, generation: u64, prev_generation: u64, inconsistent: bool) -> MirrorHistory {
        MirrorHistory { generation, prev_generation, applied, inconsistent }
    }

    /// The choice, and which of the metadata log (with the number asked after) and the dirty
    /// bitmap it asked.
    fn run(
        m: PrimaryHistory,
        w: MirrorHistory,
        ring: Option<Vec<(u64, u64)>>,
    ) -> (Result<Plan, Divergence>, Option<u64>, bool) {
        let mut asked_ring = None;
        let mut asked_dirty = false;
        let plan = resync_choice(
            m,
            w,
            SIZE,
            |s| {
                asked_ring = Some(s);
                ring
            },
            || {
                asked_dirty = true;
                vec![DIRTY]
            },
        );
        (plan, asked_ring, asked_dirty)
    }

    fn full(reason: Reason) -> Plan {
        Plan::Copy { kind: CopyKind::Full, reason, ranges: vec![(0, SIZE)] }
    }

    #[test]
    fn an_inconsistent_mirror_gets_everything_whatever_the_histories() {
        for m in [mine(0, 0, None), mine(7, 0, None), mine(8, 7, Some(7))] {
            for w in [mirror(0, 0, 0, true), mirror(8, 7, 0, true), mirror(8, 9, 7, true)] {
                assert_eq!(run(m, w, Some(vec![])), (Ok(full(Reason::MirrorInconsistent)), None, false));
            }
        }
    }

    #[test]
    fn a_new_mirror_is_in_sync_with_a_new_copy_and_gets_everything_from_one_with_a_history() {
        assert_eq!(
            run(mine(0, 0, None), mirror(0, 0, 0, false), None),
            (Ok(Plan::InSync(Reason::BothNew)), None, false)
        );
        assert_eq!(
            run(mine(7, 0, None), mirror(0, 0, 0, false), Some(vec![])),
            (Ok(full(Reason::MirrorNew)), None, false)
        );
        assert_eq!(
            run(mine(8, 7, Some(7)), mirror(0, 0, 0, false), Some(vec![])),
            (Ok(full(Reason::MirrorNew)), None, false)
        );
    }

    #[test]
    fn the_same_generation_catches_up_from_the_metadata_log() {
        assert_eq!(
            run(mine(7, 0, None), mirror(8, 7, 0, false), Some(vec![])),
            (Ok(Plan::InSync(Reason::NothingMissed)), Some(8), false)
        );
        assert_eq!(
            run(mine(7, 0, None), mirror(8, 7, 0, false), Some(vec![(0, 10)])),
            (
                Ok(Plan::Copy { kind: CopyKind::Log, reason: Reason::MissedGroups, ranges: vec![(0, 10)] }),
                Some(8),
                false
            )
        );
        assert_eq!(
            run(mine(7, 0, None), mirror(8, 7, 0, false), None),
            (Ok(full(Reason::LogOverwritten)), Some(8), false)
        );
    }

    #[test]
    fn a_catch_up_starts_after_the_lower_of_applied_and_acknowledged() {
        // Sealing applied group 8 across a gap at 6, which was never acknowledged: the log
        // resends from after 5, not after 8.
        let acked_to_5 = PrimaryHistory { acked: 5, ..mine(7, 0, None) };
        assert_eq!(
            run(acked_to_5, mirror(8, 7, 0, false), Some(vec![(0, 10)])),
            (
                Ok(Plan::Copy { kind: CopyKind::Log, reason: Reason::MissedGroups, ranges: vec![(0, 10)] }),
                Some(5),
                false
            )
        );
        let bitmap_acked_to_5 = PrimaryHistory { acked: 5, ..mine(8, 7, Some(7)) };
        assert_eq!(run(bitmap_acked_to_5, mirror(8, 7, 0, false), Some(vec![])).1, Some(5));
        // A mirror behind the acknowledgements (they are a lower bound) gets what it lacks.
        let acked_to_9 = PrimaryHistory { acked: 9, ..mine(7, 0, None) };
        assert_eq!(run(acked_to_9, mirror(8, 7, 0, false), Some(vec![])).1, Some(8));
    }

    #[test]
    fn the_log_restarts_at_the_session_and_after_its_first_group_under_a_copy() {
        assert_eq!(Plan::InSync(Reason::NothingMissed).log_start(41), 41);
        assert_eq!(full(Reason::MirrorNew).log_start(41), 42);
    }

    #[test]
    fn the_previous_generation_gets_the_dirty_chunks_and_the_missed_ranges() {
        assert_eq!(
            run(mine(8, 7, Some(7)), mirror(8, 7, 0, false), Some(vec![(0, 10), (65536, 10)])),
            (
                Ok(Plan::Copy {
                    kind: CopyKind::Bitmap,
                    reason: Reason::DegradedSince,
                    ranges: vec![(0, 10), (65536, 65536)]
                }),
                Some(8),
                true
            )
        );
        assert_eq!(
            run(mine(8, 7, Some(7)), mirror(8, 7, 0, false), None),
            (Ok(full(Reason::LogOverwritten)), Some(8), false)
        );
    }

    #[test]
    fn divergence_is_refused_and_named() {
        let (p, ring, dirty) = run(mine(7, 0, None), mirror(8, 8, 7, false), Some(vec![]));
        assert_eq!(
            (p.clone(), ring, dirty),
            (Err(Divergence::MirrorNewer { mine: 7, theirs: 8 }), None, false)
        );
        assert!(p.unwrap_err().to_string().contains("newer"));
        let e = run(mine(7, 5, None), mirror(8, 8, 6, false), Some(vec![])).0.unwrap_err();
        assert_eq!(e, Divergence::SplitBrain { mine: 7, mine_prev: 5, theirs: 8, theirs_prev: 6 });
        assert!(e.to_string().contains("split brain") && e.to_string().contains("resolve"), "{e}");
        let e = run(mine(0, 0, None), mirror(8, 8, 0, false), Some(vec![])).0.unwrap_err();
        assert_eq!(e, Divergence::NeverReplicated { theirs: 8, applied: 8 });
        assert!(e.to_string().contains("never been replicated"), "{e}");
        // A mirror at generation 0 that applied groups is not new.
        let e = run(mine(0, 0, None), mirror(3, 0, 0, false), Some(vec![])).0.unwrap_err();
        assert_eq!(e, Divergence::NeverReplicated { theirs: 0, applied: 3 });
        // A degraded copy whose bitmap started elsewhere, or records nothing, cannot use it.
        for base in [Some(5), None] {
            let e = run(mine(8, 7, base), mirror(8, 7, 0, false), Some(vec![])).0.unwrap_err();
            assert!(matches!(e, Divergence::SplitBrain { mine: 8, mine_prev: 7, theirs: 7, .. }), "{e}");
        }
    }

    #[test]
    fn the_mirror_history_is_read_from_its_welcome() {
        let w = Welcome {
            next_seq: 9,
            generation: 7,
            prev_generation: 5,
            inconsistent: true,
            ..Default::default()
        };
        assert_eq!(MirrorHistory::of(&w), mirror(8, 7, 5, true));
        let w = Welcome { next_seq: 0, ..Default::default() };
        assert!(MirrorHistory::of(&w).is_new(), "next_seq 0 reads as nothing applied");
        assert!(!MirrorHistory::of(&Welcome { next_seq: 2, ..Default::default() }).is_new());
    }

    #[test]
    fn plans_are_named_as_the_primary_logs_them() {
        assert_eq!(Plan::InSync(Reason::BothNew).name(), "in sync");
        assert_eq!(full(Reason::MirrorNew).name(), "full");
        assert_eq!(full(Reason::MirrorNew).reason(), Reason::MirrorNew);
        assert_eq!((CopyKind::Log as u64, CopyKind::Bitmap as u64, CopyKind::Full as u64), (1, 2, 3));
    }

    #[test]
    fn coalesces_ranges() {
        assert_eq!(coalesce(vec![(10, 5), (0, 10), (30, 0), (14, 2), (40, 1)]), vec![(0, 16), (40, 1)]);
    }
}
