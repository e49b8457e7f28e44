//! What the mirror's checkpoint engine asks its runtime to do, and why it stops.

use crate::checkpoint::GroupRef;
use std::fmt;

/// One storage step of checkpointing, in the order the engine emits them (invariants 1 and 2 of
/// docs/DESIGN.md): a batch's groups are written into the data area; then each is made
/// persistent there, the area is synced, the applied sequence number recorded, and only then is
/// log space freed. A failed step is never retried: the engine emits [`Command::FailStop`] and
/// nothing after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Copy group `.0`'s records from its lane's log into the data area (visible to readers,
    /// not yet persistent).
    WriteGroup(GroupRef),
    /// Make the data-area ranges group `.0`'s records name persistent (cache-line write-back;
    /// nothing on media whose [`Media::sync`](mojim_region::Media::sync) does it all).
    PersistGroup(GroupRef),
    /// Make every write so far durable (`fdatasync` of a disk data area).
    SyncData,
    /// Record, persistently, that every group up to `.0` is in the data area.
    SetAppliedSeq(u64),
    /// Free `lane`'s log before `pos`, persistently (the log's tail).
    ReleaseTail { lane: u16, pos: u64 },
    /// Make `lane`'s log positions `from..to` persistent: at restart, the records recovery found
    /// there, before any of their groups is written into the data area (a crash may have left
    /// them only in the page cache or the CPU's caches, where a power cut would lose them after
    /// the data area took part of a group).
    PersistLog { lane: u16, from: u64, to: u64 },
    /// The storage failed: apply, persist and release nothing more, accept no more data, and
    /// leave every later group in its log for restart recovery.
    FailStop(Failure),
}

/// Why the engine stopped. Each names the group or log, and the error the media returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Writing group `seq` (of `lane`) into the data area failed.
    Write { seq: u64, lane: u16, error: String },
    /// A peer changed group `seq`'s records in `lane`'s log after the lane checked them (a log
    /// offered for one-sided writes): nothing of the group was applied. The peer's fault.
    Changed { seq: u64, lane: u16, why: String },
    /// Making the groups up to `seq` persistent failed: a range's write-back, the sync, or the
    /// store of the applied number.
    Persist { seq: u64, error: String },
    /// `lane`'s log could not make its tail `pos` persistent.
    Tail { lane: u16, pos: u64, error: String },
    /// `lane`'s log could not make its records `from..to` persistent (restart recovery).
    Records { lane: u16, from: u64, to: u64, error: String },
    /// Something outside the checkpoint path stopped the storage (a lane's log failed).
    Stopped(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Write { seq, error, .. } => write!(f, "cannot write group {seq} ({error})"),
            Failure::Changed { seq, lane, why } => write!(
                f,
                "group {seq} on lane {lane}: a peer changed a record after it was checked ({why}); \
                 nothing of the group was applied"
            ),
            Failure::Persist { seq, error } => {
                write!(f, "cannot make groups up to {seq} persistent: {error}")
            }
            Failure::Records { lane, from, to, error } => {
                write!(f, "the log of lane {lane} failed: cannot persist its records {from}..{to} ({error})")
            }
            Failure::Tail { lane, pos, error } => {
                write!(f, "the log of lane {lane} failed: cannot persist its tail ({pos}): {error}")
            }
            Failure::Stopped(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Failure {}
