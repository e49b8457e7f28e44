//! The checkpoint engine: which groups are applied next, and the order of every storage step
//! that makes them durable and frees their log space, as [`Command`]s.
//!
//! A runtime drives it in two passes, each a loop of [`CheckpointEngine::poll`] (the next
//! command), executing it ([`super::execute`]), and [`CheckpointEngine::done`] (its result):
//!
//! 1. **Apply**: [`CheckpointEngine::plan`] takes the next batch from the [`Checkpointer`] (the
//!    gap-free run after the applied prefix while running, every waiting group when sealing), and
//!    emits a [`Command::WriteGroup`] per group; [`CheckpointEngine::applied`] then hands the
//!    groups written back to the checkpointer.
//! 2. **Reclaim**: [`CheckpointEngine::reclaim`] emits, for the groups applied since the last
//!    reclaim, [`Command::PersistGroup`] for each, [`Command::SyncData`], then
//!    [`Command::SetAppliedSeq`], and then, for the persistent groups every backup has,
//!    [`Command::ReleaseTail`] per lane. A group a backup still lacks is held, and not
//!    persisted again.
//!
//! A command that fails is never retried (a failed flush may have marked its pages clean, and a
//! retry would "succeed" without them): the engine emits [`Command::FailStop`] once and nothing
//! after it, ever. The applied number then stays where the data area is known good, and every
//! later group stays in its log, where restart recovery finds it (invariants 1 and 2).
//!
//! The engine allocates only when it is made (and when a backup holds more groups than it was
//! sized for): polling is a match on where it is.

use super::command::{Command, Failure};
use crate::checkpoint::{Checkpointer, GroupRef};
use std::io;

/// Where the engine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing in progress.
    Idle,
    /// Writing the batch: `batch[written]` is next.
    Write,
    /// Persisting `fresh[.0]`.
    Persist(usize),
    Sync,
    Record,
    /// Releasing the first `.0` held groups, lane by lane from `.1`.
    Release(usize, u16),
    /// Failed: nothing more, ever.
    Stopped,
}

/// The checkpoint and reclaim decisions of one mirror.
#[derive(Debug)]
pub struct CheckpointEngine {
    lanes: u16,
    /// Groups one apply pass takes at most.
    max_batch: usize,
    /// The batch being applied, and how many of it are written.
    batch: Vec<GroupRef>,
    written: usize,
    /// Applied, not yet persistent in the data area nor released from the log.
    fresh: Vec<GroupRef>,
    /// Persistent in the data area, kept in the log until every backup has them.
    held: Vec<GroupRef>,
    /// Groups up to this one may be released (every backup has them).
    release_upto: u64,
    step: Step,
    /// A command was polled and its result is awaited.
    in_flight: Option<Command>,
    failure: Option<Failure>,
    /// [`Command::FailStop`] was emitted.
    fail_emitted: bool,
}

impl CheckpointEngine {
    /// An engine for `lanes` lanes, whose batches hold at most `batch` groups and whose reclaims
    /// cover about `reclaim` groups. Restart recovery ([`super::Restart`]) runs it first.
    pub fn new(lanes: u16, batch: usize, reclaim: usize) -> CheckpointEngine {
        assert!(batch > 0, "an apply pass takes at least one group");
        CheckpointEngine {
            lanes,
            max_batch: batch,
            batch: Vec::with_capacity(batch),
            written: 0,
            fresh: Vec::with_capacity(reclaim + batch),
            held: Vec::with_capacity(reclaim + batch),
            release_upto: 0,
            step: Step::Idle,
            in_flight: None,
            failure: None,
            fail_emitted: false,
        }
    }

    /// Holds `g`, a group persistent in the data area that stays in its log until every backup
    /// has it (restart recovery found it at or below the applied number). Groups are held in
    /// sequence order.
    pub(super) fn hold(&mut self, g: GroupRef) {
        self.assert_idle("hold");
        assert!(
            self.fresh.is_empty() && self.held.last().is_none_or(|h| h.seq < g.seq),
            "{g:?} held out of order"
        );
        self.held.push(g);
    }

    /// Forgets the held groups: their logs were freed past them (restart recovery frees each
    /// log to its head).
    pub(super) fn forget_held(&mut self) {
        self.assert_idle("forget_held");
        self.held.clear();
    }

    /// Why the engine stopped, if it did.
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// Groups applied and not yet persistent (`fresh`), and persistent groups held in their logs
    /// for the backups.
    pub fn unreleased(&self) -> (usize, usize) {
        (self.fresh.len(), self.held.len())
    }

    /// The groups the running reclaim makes persistent (until [`Command::SetAppliedSeq`] is
    /// done).
    pub fn reclaiming(&self) -> &[GroupRef] {
        &self.fresh
    }

    /// Starts an apply pass: the next groups, in order, from `cp` (at most the `batch` given to
    /// [`CheckpointEngine::new`]): the gap-free run after the applied prefix, or with
    /// `allow_gaps` (sealing an ended session, recovering) every waiting group. Returns how many;
    /// none once stopped.
    pub fn plan(&mut self, cp: &mut Checkpointer, allow_gaps: bool) -> usize {
        self.assert_idle("plan");
        self.written = 0;
        self.batch.clear();
        if self.step == Step::Stopped {
            return 0;
        }
        cp.plan(allow_gaps, self.max_batch, &mut self.batch);
        if !self.batch.is_empty() {
            self.step = Step::Write;
        }
        self.batch.len()
    }

    /// Ends the apply pass: the groups written are marked applied in `cp` (and wait for the
    /// next reclaim); those not written (after a failure, or when the runtime could not take the
    /// data area) stay waiting. Returns how many were applied: see
    /// [`CheckpointEngine::last_applied`].
    pub fn applied(&mut self, cp: &mut Checkpointer) -> usize {
        assert!(self.in_flight.is_none(), "applied with {:?} in flight", self.in_flight);
        if self.step == Step::Write {
            self.step = Step::Idle;
        }
        let done = &self.batch[..self.written];
        for g in done {
            cp.applied(*g);
        }
        if self.step != Step::Stopped {
            self.fresh.extend_from_slice(done);
        }
        self.written
    }

    /// The batch the running apply pass writes, in order.
    pub fn planned(&self) -> &[GroupRef] {
        &self.batch
    }

    /// The groups the last apply pass applied, in order.
    pub fn last_applied(&self) -> &[GroupRef] {
        &self.batch[..self.written]
    }

    /// Starts a reclaim: the groups applied since the last one are made persistent and
    /// recorded, then the log space of every persistent group up to `release_upto` (what every
    /// backup has; `u64::MAX` without backups) is freed.
    pub fn reclaim(&mut self, release_upto: u64) {
        self.assert_idle("reclaim");
        if self.step == Step::Stopped {
            return;
        }
        self.release_upto = release_upto;
        self.step = if self.fresh.is_empty() { self.start_release() } else { Step::Persist(0) };
    }

    fn start_release(&self) -> Step {
        let n = self.held.iter().take_while(|g| g.seq <= self.release_upto).count();
        if n == 0 {
            Step::Idle
        } else {
            Step::Release(n, 0)
        }
    }

    fn assert_idle(&self, what: &str) {
        assert!(
            matches!(self.step, Step::Idle | Step::Stopped) && self.in_flight.is_none(),
            "{what} while the engine is at {:?} with {:?} in flight",
            self.step,
            self.in_flight
        );
    }

    /// The next command of the pass, or None when the pass is over. Each command but
    /// [`Command::FailStop`] must be answered with [`CheckpointEngine::done`] before the next
    /// poll.
    pub fn poll(&mut self) -> Option<Command> {
        assert!(self.in_flight.is_none(), "polled with {:?} in flight", self.in_flight);
        let cmd = match self.step {
            Step::Idle => return None,
            Step::Stopped => {
                if self.fail_emitted {
                    return None;
                }
                self.fail_emitted = true;
                return self.failure.clone().map(Command::FailStop);
            }
            Step::Write if self.written < self.batch.len() => Command::WriteGroup(self.batch[self.written]),
            Step::Write => {
                self.step = Step::Idle;
                return None;
            }
            Step::Persist(i) => Command::PersistGroup(self.fresh[i]),
            Step::Sync => Command::SyncData,
            Step::Record => Command::SetAppliedSeq(self.fresh.last().expect("a reclaim records groups").seq),
            Step::Release(n, from) => {
                let released = &self.held[..n];
                let next = (from..self.lanes).find_map(|lane| {
                    released.iter().rev().find(|g| g.lane == lane).map(|g| (lane, g.end_pos))
                });
                match next {
                    Some((lane, pos)) => {
                        self.step = Step::Release(n, lane);
                        Command::ReleaseTail { lane, pos }
                    }
                    None => {
                        self.held.drain(..n);
                        self.step = Step::Idle;
                        return None;
                    }
                }
            }
        };
        self.in_flight = Some(cmd.clone());
        Some(cmd)
    }

    /// The result of the command last polled. An error stops the engine: the next poll emits
    /// [`Command::FailStop`], and nothing follows it.
    pub fn done(&mut self, result: io::Result<()>) {
        let cmd = self.in_flight.take().expect("done without a command in flight");
        if let Err(e) = result {
            let error = e.to_string();
            let failure = match cmd {
                Command::WriteGroup(g) => Failure::Write { seq: g.seq, lane: g.lane, error },
                Command::PersistGroup(_) | Command::SyncData | Command::SetAppliedSeq(_) => {
                    Failure::Persist { seq: self.fresh.last().map_or(0, |g| g.seq), error }
                }
                Command::ReleaseTail { lane, pos } => Failure::Tail { lane, pos, error },
                Command::PersistLog { .. } | Command::FailStop(_) => {
                    unreachable!("{cmd:?} is never the engine's in flight")
                }
            };
            return self.stop(failure);
        }
        self.step = match self.step {
            Step::Write => {
                self.written += 1;
                Step::Write
            }
            Step::Persist(i) if i + 1 < self.fresh.len() => Step::Persist(i + 1),
            Step::Persist(_) => Step::Sync,
            Step::Sync => Step::Record,
            Step::Record => {
                // Persistent: from now on only the backups hold them in the logs.
                self.held.append(&mut self.fresh);
                self.start_release()
            }
            // `lane < self.lanes <= u16::MAX`: no overflow.
            Step::Release(n, lane) => Step::Release(n, lane + 1),
            s @ (Step::Idle | Step::Stopped) => unreachable!("a command in flight at {s:?}"),
        };
    }

    /// Stops the engine for `failure` (from a command, or from outside the checkpoint path):
    /// the next poll emits [`Command::FailStop`] with it, unless the engine had stopped already.
    /// Nothing applied since the last reclaim is persisted or released, ever.
    pub fn stop(&mut self, failure: Failure) {
        self.in_flight = None;
        if self.step == Step::Stopped {
            return;
        }
        self.step = Step::Stopped;
        self.failure = Some(failure);
        self.fresh.clear();
        self.held.clear();
    }
}
