//! Restart recovery as commands: what [`crate::recovery::recover`] found in the logs is applied
//! by the checkpoint engine, in the order the running mirror uses, and each lane's log is then
//! freed up to where the lane resumes.
//!
//! The commands, in order: [`Command::PersistLog`] for every lane whose log holds records, from
//! its tail to its head (a crash may have left them only in the page cache or the CPU's caches:
//! a group must not reach the data area, even in part, while a power cut could still take it
//! from its log, or the next recovery would not find it to write it whole); then
//! [`Command::WriteGroup`] for every recovered group after the applied
//! number, in sequence order (batch by batch, across gaps: nothing will fill them); then
//! [`Command::PersistGroup`] for each, [`Command::SyncData`] and [`Command::SetAppliedSeq`]; then
//! [`Command::ReleaseTail`] for every lane that has a log, to its head (the end of its last
//! complete group, past any incomplete one and any already applied), or, on a mirror that keeps
//! its groups for backups, to the tail it has (the tail's two slots are written again, so a slot
//! torn by the crash is repaired). A crash anywhere leaves the logs as they were up to the
//! applied number last recorded, and recovery at the next start does the same again (invariants 1
//! and 2 of docs/DESIGN.md). A failed command is not retried: [`Command::FailStop`], and the
//! mirror does not open.
//!
//! The engine and the checkpointer it ran come back with [`Restart::into_parts`]: the running
//! mirror goes on with them (holding, on a mirror with backups, the recovered groups until every
//! backup has them).

use super::command::{Command, Failure};
use super::engine::CheckpointEngine;
use crate::checkpoint::{Checkpointer, GroupRef};
use crate::recovery::Recovered;
use std::io;

/// Where recovery is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Making the recovered records persistent in their logs, lane by lane from `.0`.
    PersistLogs(u16),
    /// Applying the recovered groups, batch by batch; `.0`: a batch is planned.
    Apply(bool),
    /// Persisting them and recording the applied number.
    Reclaim,
    /// Releasing the logs, lane by lane from `.0`.
    Release(u16),
    /// A release failed: [`Command::FailStop`] is next.
    Failed,
    Done,
}

/// Restart recovery of one mirror, as commands for its runtime to execute (as
/// [`CheckpointEngine`]'s: [`Restart::poll`], execute, [`Restart::done`]).
#[derive(Debug)]
pub struct Restart {
    engine: CheckpointEngine,
    cp: Checkpointer,
    /// Per lane, where its log is freed to once the groups are recorded (None: the lane has no
    /// log).
    release: Vec<Option<u64>>,
    /// The groups stay in their logs for the backups.
    keep: bool,
    phase: Phase,
    /// Per lane, the log positions recovery found records in (tail to head), made persistent
    /// first (None: nothing there, or no log).
    records: Vec<Option<(u64, u64)>>,
    /// The persist of a lane's records in flight.
    persisting: Option<(u16, u64, u64)>,
    /// The release in flight.
    releasing: Option<(u16, u64)>,
    failure: Option<Failure>,
}

impl Restart {
    /// Recovery of what `found` holds, run by `engine` and `cp`, both new (`cp` at the applied
    /// number the data area records). `tails` has each lane's log's tail (None: no log).
    ///
    /// `keep`: the mirror keeps groups in its logs until every backup has them, and `found`
    /// was scanned from the tails (not from the applied number): the groups at or below the
    /// applied number are held by the engine, the later ones applied and then held, and no log
    /// is freed.
    pub fn new(
        mut engine: CheckpointEngine,
        mut cp: Checkpointer,
        found: &Recovered,
        tails: &[Option<u64>],
        keep: bool,
    ) -> Restart {
        assert_eq!(engine.unreleased(), (0, 0), "recovery runs a new engine");
        assert_eq!(cp.waiting(), 0, "recovery runs a new checkpointer");
        assert_eq!(found.heads.len(), tails.len(), "a head for every lane");
        let applied = cp.applied_seq();
        for g in &found.groups {
            if g.seq <= applied {
                assert!(keep, "group {} at or below the applied number {applied} recovered", g.seq);
                engine.hold(*g);
            } else {
                cp.push(*g);
            }
        }
        let records = tails
            .iter()
            .zip(&found.heads)
            .map(|(tail, &head)| tail.filter(|&t| head > t).map(|t| (t, head)))
            .collect();
        let release = tails
            .iter()
            .zip(&found.heads)
            .map(|(tail, &head)| tail.map(|t| if keep { t } else { head }))
            .collect();
        Restart {
            engine,
            cp,
            records,
            persisting: None,
            release,
            keep,
            phase: Phase::PersistLogs(0),
            releasing: None,
            failure: None,
        }
    }

    /// The next command, or None when recovery is over (after [`Command::FailStop`], or when
    /// everything is done). Each command but [`Command::FailStop`] must be answered with
    /// [`Restart::done`] before the next poll.
    pub fn poll(&mut self) -> Option<Command> {
        assert!(self.releasing.is_none(), "polled with a release in flight");
        assert!(self.persisting.is_none(), "polled with a persist in flight");
        loop {
            match self.phase {
                Phase::PersistLogs(from) => {
                    let next = (from..self.records.len() as u16)
                        .find_map(|lane| self.records[lane as usize].map(|(a, b)| (lane, a, b)));
                    let Some((lane, from, to)) = next else {
                        self.phase = Phase::Apply(false);
                        continue;
                    };
                    self.phase = Phase::PersistLogs(lane);
                    self.persisting = Some((lane, from, to));
                    return Some(Command::PersistLog { lane, from, to });
                }
                Phase::Apply(planned) => {
                    if planned {
                        if let Some(cmd) = self.engine.poll() {
                            return Some(cmd);
                        }
                        self.engine.applied(&mut self.cp);
                    }
                    if self.engine.failure().is_some() {
                        self.phase = Phase::Done;
                    } else if self.engine.plan(&mut self.cp, true) > 0 {
                        self.phase = Phase::Apply(true);
                    } else {
                        // Nothing is released by the engine: the logs are freed below, to
                        // their heads, or kept for the backups.
                        self.engine.reclaim(0);
                        self.phase = Phase::Reclaim;
                    }
                }
                Phase::Reclaim => {
                    if let Some(cmd) = self.engine.poll() {
                        return Some(cmd);
                    }
                    if self.engine.failure().is_some() {
                        self.phase = Phase::Done;
                        continue;
                    }
                    if !self.keep {
                        // Freed below, with everything else before each lane's head.
                        self.engine.forget_held();
                    }
                    self.phase = Phase::Release(0);
                }
                Phase::Release(from) => {
                    let next = (from..self.release.len() as u16)
                        .find_map(|lane| self.release[lane as usize].map(|pos| (lane, pos)));
                    let Some((lane, pos)) = next else {
                        self.phase = Phase::Done;
                        return None;
                    };
                    self.phase = Phase::Release(lane);
                    self.releasing = Some((lane, pos));
                    return Some(Command::ReleaseTail { lane, pos });
                }
                Phase::Failed => {
                    self.phase = Phase::Done;
                    return self.failure.clone().map(Command::FailStop);
                }
                Phase::Done => return None,
            }
        }
    }

    /// The result of the command last polled. An error stops recovery: the next poll emits
    /// [`Command::FailStop`], and nothing follows it.
    pub fn done(&mut self, result: io::Result<()>) {
        if let Some((lane, from, to)) = self.persisting.take() {
            match result {
                Ok(()) => self.phase = Phase::PersistLogs(lane + 1),
                Err(e) => {
                    self.failure = Some(Failure::Records { lane, from, to, error: e.to_string() });
                    self.phase = Phase::Failed;
                }
            }
            return;
        }
        let Some((lane, pos)) = self.releasing.take() else {
            return self.engine.done(result);
        };
        match result {
            Ok(()) => self.phase = Phase::Release(lane + 1),
            Err(e) => {
                self.failure = Some(Failure::Tail { lane, pos, error: e.to_string() });
                self.phase = Phase::Failed;
            }
        }
    }

    /// Why recovery stopped, if it did.
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref().or(self.engine.failure())
    }

    /// The groups the running reclaim makes persistent (until [`Command::SetAppliedSeq`] is
    /// done).
    pub fn reclaiming(&self) -> &[GroupRef] {
        self.engine.reclaiming()
    }

    /// The applied number once recovery is done.
    pub fn applied_seq(&self) -> u64 {
        self.cp.applied_seq()
    }

    /// The engine and checkpointer, for the running mirror: nothing waits to be applied, and the
    /// engine holds the recovered groups a mirror with backups keeps.
    pub fn into_parts(self) -> (CheckpointEngine, Checkpointer) {
        assert!(
            self.phase == Phase::Done && self.failure().is_none(),
            "recovery handed over at {:?} (failure {:?})",
            self.phase,
            self.failure()
        );
        (self.engine, self.cp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(seq: u64, lane: u16, pos: u64) -> GroupRef {
        GroupRef::data(seq, lane, pos, pos + 128, 10)
    }

    /// Runs recovery to its end, answering each command with `result(cmd)`; returns the
    /// commands in order.
    fn drive(r: &mut Restart, mut result: impl FnMut(&Command) -> io::Result<()>) -> Vec<Command> {
        let mut out = Vec::new();
        while let Some(cmd) = r.poll() {
            if !matches!(cmd, Command::FailStop(_)) {
                r.done(result(&cmd));
            }
            out.push(cmd);
        }
        out
    }

    fn ok(_: &Command) -> io::Result<()> {
        Ok(())
    }

    /// Recovery of what `f` found, for as many lanes as `tails` names, applied up to `applied`,
    /// in batches of `batch` groups, holding the groups for backups with `keep`.
    fn restart(f: &Recovered, tails: &[Option<u64>], applied: u64, batch: usize, keep: bool) -> Restart {
        let lanes = tails.len();
        Restart::new(
            CheckpointEngine::new(lanes as u16, batch, 4),
            Checkpointer::new(lanes, applied, 8),
            f,
            tails,
            keep,
        )
    }

    fn found(groups: &[GroupRef], heads: &[u64]) -> Recovered {
        Recovered { groups: groups.to_vec(), heads: heads.to_vec(), ..Recovered::default() }
    }

    #[test]
    fn recovered_groups_are_applied_in_sequence_then_persisted_recorded_and_the_logs_freed_to_their_heads() {
        // Applied up to 1. Lane 0 holds 2 and 5 (and an incomplete group after them, up to its
        // head 512); lane 1 holds 3; lane 2 has no log.
        let f = found(&[g(2, 0, 0), g(3, 1, 0), g(5, 0, 128)], &[512, 128, 0]);
        let mut r = restart(&f, &[Some(0), Some(0), None], 1, 2, false);
        assert_eq!(
            drive(&mut r, ok),
            vec![
                // The records found, persistent in their logs before any reaches the data area.
                Command::PersistLog { lane: 0, from: 0, to: 512 },
                Command::PersistLog { lane: 1, from: 0, to: 128 },
                // Batches of two, across the gap at 4.
                Command::WriteGroup(g(2, 0, 0)),
                Command::WriteGroup(g(3, 1, 0)),
                Command::WriteGroup(g(5, 0, 128)),
                Command::PersistGroup(g(2, 0, 0)),
                Command::PersistGroup(g(3, 1, 0)),
                Command::PersistGroup(g(5, 0, 128)),
                Command::SyncData,
                Command::SetAppliedSeq(5),
                Command::ReleaseTail { lane: 0, pos: 512 },
                Command::ReleaseTail { lane: 1, pos: 128 },
            ]
        );
        assert_eq!(r.applied_seq(), 5);
        let (engine, cp) = r.into_parts();
        assert_eq!((engine.unreleased(), cp.waiting(), cp.applied_seq()), ((0, 0), 0, 5));
    }

    #[test]
    fn an_empty_log_records_nothing_and_frees_each_log_to_its_head() {
        // Complete groups at or below the applied number, and a torn one: the heads are past them.
        let f = found(&[], &[256, 64]);
        let mut r = restart(&f, &[Some(0), Some(64)], 9, 4, false);
        assert_eq!(
            drive(&mut r, ok),
            vec![
                Command::PersistLog { lane: 0, from: 0, to: 256 },
                Command::ReleaseTail { lane: 0, pos: 256 },
                Command::ReleaseTail { lane: 1, pos: 64 }
            ]
        );
        assert_eq!(r.applied_seq(), 9);
    }

    #[test]
    fn a_mirror_with_backups_applies_the_new_groups_and_holds_them_all_in_their_logs() {
        // Scanned from the tail: 1 and 2 are applied already, 3 is not.
        let f = found(&[g(1, 0, 0), g(2, 0, 128), g(3, 0, 256)], &[384]);
        let mut r = restart(&f, &[Some(0)], 2, 4, true);
        assert_eq!(
            drive(&mut r, ok),
            vec![
                Command::PersistLog { lane: 0, from: 0, to: 384 },
                Command::WriteGroup(g(3, 0, 256)),
                Command::PersistGroup(g(3, 0, 256)),
                Command::SyncData,
                Command::SetAppliedSeq(3),
                // The tail stays where it was, written again.
                Command::ReleaseTail { lane: 0, pos: 0 },
            ]
        );
        let (mut engine, _) = r.into_parts();
        assert_eq!(engine.unreleased(), (0, 3), "held until every backup has them");
        // A backup has 2: the log is freed after it, and nothing is persisted again.
        engine.reclaim(2);
        assert_eq!(engine.poll(), Some(Command::ReleaseTail { lane: 0, pos: 256 }));
    }

    #[test]
    fn a_failed_write_fail_stops_before_anything_is_recorded_or_freed() {
        let f = found(&[g(1, 0, 0), g(2, 1, 0)], &[128, 128]);
        let mut r = restart(&f, &[Some(0), Some(0)], 0, 8, false);
        let cmds = drive(&mut r, |c| match c {
            Command::WriteGroup(x) if x.seq == 2 => Err(io::Error::other("EIO")),
            _ => Ok(()),
        });
        let stop = Failure::Write { seq: 2, lane: 1, error: "EIO".into() };
        assert_eq!(
            cmds,
            vec![
                Command::PersistLog { lane: 0, from: 0, to: 128 },
                Command::PersistLog { lane: 1, from: 0, to: 128 },
                Command::WriteGroup(g(1, 0, 0)),
                Command::WriteGroup(g(2, 1, 0)),
                Command::FailStop(stop.clone())
            ]
        );
        assert_eq!(r.failure(), Some(&stop));
        assert_eq!(r.poll(), None);
    }

    #[test]
    fn a_failed_release_fail_stops_and_frees_no_other_log() {
        let f = found(&[g(1, 0, 0)], &[128, 0, 64]);
        let mut r = restart(&f, &[Some(0), Some(0), Some(0)], 0, 8, false);
        let cmds = drive(&mut r, |c| match c {
            Command::ReleaseTail { lane: 1, .. } => Err(io::Error::other("EIO")),
            _ => Ok(()),
        });
        let stop = Failure::Tail { lane: 1, pos: 0, error: "EIO".into() };
        assert_eq!(
            &cmds[cmds.len() - 3..],
            [
                Command::ReleaseTail { lane: 0, pos: 128 },
                Command::ReleaseTail { lane: 1, pos: 0 },
                Command::FailStop(stop.clone())
            ]
        );
        assert_eq!(r.failure(), Some(&stop));
        assert_eq!(r.poll(), None);
    }

    #[test]
    fn a_log_that_cannot_persist_its_records_fail_stops_before_any_group_is_written() {
        let f = found(&[g(1, 0, 0), g(2, 1, 0)], &[128, 128]);
        let mut r = restart(&f, &[Some(0), Some(0)], 0, 8, false);
        let cmds = drive(&mut r, |c| match c {
            Command::PersistLog { lane: 1, .. } => Err(io::Error::other("EIO")),
            _ => Ok(()),
        });
        let stop = Failure::Records { lane: 1, from: 0, to: 128, error: "EIO".into() };
        assert_eq!(
            cmds,
            vec![
                Command::PersistLog { lane: 0, from: 0, to: 128 },
                Command::PersistLog { lane: 1, from: 0, to: 128 },
                Command::FailStop(stop.clone())
            ]
        );
        assert_eq!(r.failure(), Some(&stop));
        assert_eq!(r.poll(), None);
    }
}
