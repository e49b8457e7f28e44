//! The mirror's decisions as a state machine that emits commands, and the executor that runs
//! them against storage media.
//!
//! Today this covers the checkpoint and reclaim path ([`CheckpointEngine`]): which complete
//! groups are applied next, and the order of the storage steps that make them durable and free
//! their log space ([`Command`]), with the failure policy (a failed step fail-stops, never
//! retried). [`execute`] runs one command against any [`mojim_region::DataMedia`] and the lane
//! logs ([`Logs`]). Restart recovery runs the same engine ([`Restart`]): the groups the logs
//! hold are applied, persisted and recorded as the running mirror's are, and then the logs are
//! freed. The node (`mojim-node`'s `checkpoint.rs` and `replay.rs`) and the simulator (`sim`) both
//! drive these engines and this executor, so the order lives here and nowhere else, and the
//! simulator's power cuts test the order the node runs.
//!
//! The session slot ([`SessionSlot`], in [`session`]) decides which handshake opens, joins or
//! replaces the one session a mirror serves, the epoch it adopts, when the session ends and is
//! sealed, and its copies ([`CopyState`]); it emits [`SessionCommand`]s that the node's
//! `session.rs` and the simulator's mirror execute.
//!
//! A lane's received record is stored, and the group it completes persisted, queued and
//! acknowledged, by [`RecordRules`] (in [`record`]): the executor of a record's storage steps,
//! and the steps a group needs before its acknowledgement, in their order. A Copy frame's body
//! is judged and landed in the data area by [`copy_verdict`] and [`land`].
//!
//! The ack gate ([`AckGate`], in [`ack`]) decides when a mirror that feeds backups may
//! acknowledge a group: under the secondary tier's threshold, and in chain mode once every
//! backup has it. The node's `forward.rs` waits as it says; the simulator's mirror asks it
//! against its model of the backups.

pub mod ack;
mod command;
mod copy;
mod engine;
mod execute;
mod landing;
pub mod record;
mod restart;
pub mod session;

pub use ack::{AckDecision, AckGate, AckRule, AckView, Hold, NoAck};
pub use command::{Command, Failure};
pub use copy::{copy_complete, generation_after, CopyState, MAX_COPY_RETRIES};
pub use engine::CheckpointEngine;
pub use execute::{execute, persist_positions, Logs};
pub use landing::{copy_verdict, land, CopyVerdict};
pub use record::{Body, GroupStep, RecordRules, StoreError};
pub use restart::Restart;
pub use session::{Admission, EndReason, NodeState, Refused, SessionCommand, SessionSlot};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{Checkpointer, GroupRef};
    use std::io;

    fn g(seq: u64, lane: u16, pos: u64) -> GroupRef {
        GroupRef::data(seq, lane, pos, pos + 128, 10)
    }

    /// Runs the engine's pass to its end, answering each command with `result(cmd)`; returns
    /// the commands in order.
    fn drive(e: &mut CheckpointEngine, mut result: impl FnMut(&Command) -> io::Result<()>) -> Vec<Command> {
        let mut out = Vec::new();
        while let Some(cmd) = e.poll() {
            if !matches!(cmd, Command::FailStop(_)) {
                e.done(result(&cmd));
            }
            out.push(cmd);
        }
        out
    }

    fn ok(_: &Command) -> io::Result<()> {
        Ok(())
    }

    /// A checkpointer of `lanes` lanes holding `groups`, and an engine that applies them in
    /// batches of at most `batch`.
    fn holding(lanes: u16, batch: usize, groups: &[GroupRef]) -> (Checkpointer, CheckpointEngine) {
        let mut cp = Checkpointer::new(lanes.into(), 0, 8);
        for &x in groups {
            cp.push(x);
        }
        (cp, CheckpointEngine::new(lanes, batch, 8))
    }

    /// Writes the gap-free groups `cp` holds, every write succeeding, and records them applied.
    fn apply_all(cp: &mut Checkpointer, e: &mut CheckpointEngine) {
        e.plan(cp, false);
        drive(e, ok);
        e.applied(cp);
    }

    #[test]
    fn data_is_written_then_persisted_then_recorded_then_the_log_is_freed() {
        let (mut cp, mut e) = holding(2, 8, &[g(1, 0, 0), g(2, 1, 0), g(3, 0, 128), g(5, 1, 128)]);
        assert_eq!(e.plan(&mut cp, false), 3, "the gap-free run: 1, 2, 3");
        let writes = drive(&mut e, ok);
        assert_eq!(
            writes,
            vec![
                Command::WriteGroup(g(1, 0, 0)),
                Command::WriteGroup(g(2, 1, 0)),
                Command::WriteGroup(g(3, 0, 128))
            ]
        );
        assert_eq!(e.applied(&mut cp), 3);
        assert_eq!((cp.applied_seq(), cp.waiting()), (3, 1));
        e.reclaim(u64::MAX);
        assert_eq!(
            drive(&mut e, ok),
            vec![
                Command::PersistGroup(g(1, 0, 0)),
                Command::PersistGroup(g(2, 1, 0)),
                Command::PersistGroup(g(3, 0, 128)),
                Command::SyncData,
                Command::SetAppliedSeq(3),
                // Each lane up to the end of its last released group.
                Command::ReleaseTail { lane: 0, pos: 256 },
                Command::ReleaseTail { lane: 1, pos: 128 },
            ]
        );
        assert_eq!(e.unreleased(), (0, 0));
        // Sealing takes the rest across the gap.
        assert_eq!(e.plan(&mut cp, true), 1);
        assert_eq!(drive(&mut e, ok), vec![Command::WriteGroup(g(5, 1, 128))]);
        e.applied(&mut cp);
        assert_eq!(cp.applied_seq(), 5);
    }

    #[test]
    fn groups_a_backup_lacks_are_persisted_once_and_released_later() {
        let (mut cp, mut e) = holding(1, 8, &[g(1, 0, 0), g(2, 0, 128)]);
        apply_all(&mut cp, &mut e);
        e.reclaim(1);
        let cmds = drive(&mut e, ok);
        assert_eq!(cmds.last(), Some(&Command::ReleaseTail { lane: 0, pos: 128 }), "{cmds:?}");
        assert_eq!(e.unreleased(), (0, 1));
        // Nothing new applied: nothing persisted again, only the release.
        e.reclaim(2);
        assert_eq!(drive(&mut e, ok), vec![Command::ReleaseTail { lane: 0, pos: 256 }]);
        e.reclaim(2);
        assert_eq!(drive(&mut e, ok), vec![]);
    }

    #[test]
    fn a_failed_persist_fail_stops_and_nothing_follows_it_ever() {
        let (mut cp, mut e) = holding(1, 8, &[g(1, 0, 0), g(2, 0, 128)]);
        apply_all(&mut cp, &mut e);
        e.reclaim(u64::MAX);
        let cmds = drive(&mut e, |c| match c {
            Command::PersistGroup(x) if x.seq == 2 => Err(io::Error::other("EIO")),
            _ => Ok(()),
        });
        let stop = Failure::Persist { seq: 2, error: "EIO".into() };
        assert_eq!(
            cmds,
            vec![
                Command::PersistGroup(g(1, 0, 0)),
                Command::PersistGroup(g(2, 0, 128)),
                Command::FailStop(stop.clone())
            ],
            "no sync, no applied number, no release after the failure"
        );
        assert_eq!(e.failure(), Some(&stop));
        assert_eq!(stop.to_string(), "cannot make groups up to 2 persistent: EIO");
        // Never again: not a retry, not a new batch, not a release.
        cp.push(g(3, 0, 256));
        assert_eq!(e.plan(&mut cp, false), 0);
        e.reclaim(u64::MAX);
        assert_eq!(drive(&mut e, ok), vec![]);
        assert_eq!(cp.waiting(), 1, "group 3 stays in its log, for recovery");
    }

    #[test]
    fn a_failed_write_applies_the_groups_before_it_only_and_a_failed_tail_stops_releasing() {
        let (mut cp, mut e) = holding(2, 8, &[g(1, 0, 0), g(2, 1, 0), g(3, 0, 128)]);
        e.plan(&mut cp, false);
        let cmds = drive(&mut e, |c| match c {
            Command::WriteGroup(x) if x.seq == 2 => Err(io::Error::other("ENOSPC")),
            _ => Ok(()),
        });
        assert_eq!(cmds.len(), 3, "{cmds:?}");
        assert!(matches!(&cmds[2], Command::FailStop(Failure::Write { seq: 2, lane: 1, .. })));
        assert_eq!(e.applied(&mut cp), 1);
        assert_eq!(e.last_applied(), &[g(1, 0, 0)]);
        assert_eq!((cp.applied_seq(), cp.waiting()), (1, 2));
        e.reclaim(u64::MAX);
        assert_eq!(drive(&mut e, ok), vec![], "group 1 is neither persisted nor released");

        let (mut cp, mut e) = holding(2, 8, &[g(1, 0, 0), g(2, 1, 0)]);
        apply_all(&mut cp, &mut e);
        e.reclaim(u64::MAX);
        let cmds = drive(&mut e, |c| match c {
            Command::ReleaseTail { lane: 0, .. } => Err(io::Error::other("EIO")),
            _ => Ok(()),
        });
        let last = cmds.last().cloned();
        assert_eq!(last, Some(Command::FailStop(Failure::Tail { lane: 0, pos: 128, error: "EIO".into() })));
        assert!(!cmds.contains(&Command::ReleaseTail { lane: 1, pos: 128 }), "{cmds:?}");
    }

    #[test]
    fn a_stop_from_outside_is_emitted_once_and_ends_the_pass() {
        let (mut cp, mut e) = holding(1, 1, &[g(1, 0, 0), g(2, 0, 128)]);
        assert_eq!(e.plan(&mut cp, false), 1, "batches of one");
        let first = e.poll();
        assert_eq!(first, Some(Command::WriteGroup(g(1, 0, 0))));
        e.stop(Failure::Stopped("lane 0's log failed".into()));
        e.stop(Failure::Stopped("a second failure".into()));
        assert_eq!(e.poll(), Some(Command::FailStop(Failure::Stopped("lane 0's log failed".into()))));
        assert_eq!(e.poll(), None);
        assert_eq!(e.applied(&mut cp), 0);
        assert_eq!(e.unreleased(), (0, 0));
        assert_eq!(cp.waiting(), 2, "both groups stay in the log, for recovery");
    }
}
