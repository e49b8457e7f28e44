//! The checkpointer's state: complete groups waiting to be applied (`mojim_core`'s
//! `Checkpointer`), the checkpoint engine (`mojim_core::mirror::CheckpointEngine`: the batch
//! being applied, groups applied and not yet released from the logs), and what wakes whom.
//! How the engine's commands are executed is `checkpoint.rs`'s.
//!
//! Locks (see the lock order in lib.rs): `applier`, one applier at a time, held across a whole
//! apply or reclaim (an [`Applier`] guard), which owns the engine; `state`, held briefly (once
//! per batch, not per group), with `work` (the checkpointer waits on it for work) and `space`
//! (lanes wait on it for log space).

use crate::copy_check::Scratch;
use mojim_core::checkpoint::{CheckpointPolicy, Checkpointer, GroupRef};
use mojim_core::mirror::CheckpointEngine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Applied groups that wait for one reclaim, at most.
const RECLAIM_BATCH: usize = 64;
/// Complete groups per lane the checkpointer's queues hold before they grow (a lane's log
/// bounds them in the end: a group takes at least 128 bytes of it).
const QUEUE_PER_LANE: usize = 1024;
/// Groups one apply pass plans at most.
const PLAN_BATCH: usize = 256;

/// A checkpoint engine and checkpointer for `lanes` lanes at applied number `applied`, sized
/// for the node: restart recovery runs them first (`replay.rs`), then [`Checkpoint::new`].
pub(crate) fn parts(lanes: usize, applied: u64) -> (CheckpointEngine, Checkpointer) {
    let engine = CheckpointEngine::new(lanes as u16, PLAN_BATCH, 4 * RECLAIM_BATCH);
    (engine, Checkpointer::new(lanes, applied, QUEUE_PER_LANE))
}

pub(crate) struct Checkpoint {
    /// Serialises appliers (the checkpointer thread, a lane applying inline, session sealing).
    /// The right to apply: the engine, and the applier's buffer for groups copied out of their
    /// log.
    applier: Mutex<Applying>,
    state: Mutex<State>,
    /// The checkpointer waits here for work.
    work: Condvar,
    /// Lanes wait here for log space.
    space: Condvar,
    policy: CheckpointPolicy,
}

struct State {
    cp: Checkpointer,
    log_full: bool,
    /// The checkpointer is waiting for work (only then is it worth a wake-up).
    sleeping: bool,
    /// ... and with no timer, because nothing is pending.
    parked: bool,
    waiting_bytes: u64,
    /// Groups applied, not yet persistent in the data area nor released from the log (the
    /// engine's count, as of the end of the last apply or reclaim).
    fresh: usize,
    /// Persistent in the data area, kept in the log until every backup has them (likewise).
    held: usize,
}

/// What the applier owns.
struct Applying {
    engine: CheckpointEngine,
    scratch: Scratch,
}

/// The right to apply: held by one thread at a time.
pub(crate) struct Applier<'a> {
    held: MutexGuard<'a, Applying>,
}

impl Applier<'_> {
    /// The engine, and where a group from a log that a peer can write at any time is copied
    /// before it is checked and applied.
    pub fn parts(&mut self) -> (&mut CheckpointEngine, &mut Scratch) {
        let a = &mut *self.held;
        (&mut a.engine, &mut a.scratch)
    }

    pub fn engine(&mut self) -> &mut CheckpointEngine {
        &mut self.held.engine
    }
}

/// What the checkpointer has, for status.
pub(crate) struct Lag {
    /// Complete groups not yet applied, and their bytes.
    pub groups: usize,
    pub bytes: u64,
    /// The applied prefix.
    pub applied_seq: u64,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn reclaim_due(&self) -> bool {
        self.fresh >= RECLAIM_BATCH || self.log_full
    }

    /// Groups applied and not yet released from the log: to persist, or held for the backups.
    fn unreleased(&self) -> usize {
        self.fresh + self.held
    }
}

impl Checkpoint {
    /// Checkpointing after recovery, which ran `engine` and `cp` (see [`parts`]): `cp` is at
    /// the applied prefix, and the engine holds the groups kept in the logs for the backups; a
    /// checkpoint is due once `thresh` groups wait.
    pub fn new(engine: CheckpointEngine, cp: Checkpointer, thresh: usize) -> Checkpoint {
        let (fresh, held) = engine.unreleased();
        let state =
            State { cp, log_full: false, sleeping: false, parked: false, waiting_bytes: 0, fresh, held };
        Checkpoint {
            applier: Mutex::new(Applying { engine, scratch: Scratch::default() }),
            state: Mutex::new(state),
            work: Condvar::new(),
            space: Condvar::new(),
            policy: CheckpointPolicy { thresh },
        }
    }

    /// Becomes the applier, waiting for another one to finish.
    pub fn applier(&self) -> Applier<'_> {
        Applier { held: lock(&self.applier) }
    }

    /// Becomes the applier, unless another one is busy.
    pub fn try_applier(&self) -> Option<Applier<'_>> {
        self.applier.try_lock().ok().map(|held| Applier { held })
    }

    /// Records a complete, acknowledged group; returns whether a checkpoint is due.
    pub fn push(&self, g: GroupRef) -> bool {
        let mut c = lock(&self.state);
        c.cp.push(g);
        c.waiting_bytes += g.bytes;
        if c.parked {
            // The checkpointer sleeps without a timer while nothing is pending; start its timer.
            c.parked = false;
            self.work.notify_one();
        }
        self.policy.due(c.cp.waiting(), false, c.log_full)
    }

    /// Wakes the checkpointer if it sleeps and a reclaim is due.
    pub fn wake_for_reclaim(&self) {
        let mut c = lock(&self.state);
        if c.sleeping && c.reclaim_due() {
            c.sleeping = false;
            self.work.notify_one();
        }
    }

    /// Wakes the checkpointer whatever it waits for (it checks `shutdown` under the lock, and
    /// parks atomically).
    pub fn wake(&self) {
        let _c = lock(&self.state);
        self.work.notify_all();
    }

    /// The checkpointer thread's wait: until a checkpoint or a reclaim is due, or, with work
    /// pending, nothing changed for `idle`. Returns false once `shutdown` is set.
    pub fn wait_for_work(&self, idle: Duration, shutdown: &AtomicBool) -> bool {
        let mut c = lock(&self.state);
        loop {
            if shutdown.load(Ordering::SeqCst) {
                return false;
            }
            if self.policy.due(c.cp.waiting(), false, c.log_full) || c.reclaim_due() {
                break;
            }
            let before = (c.cp.waiting(), c.unreleased());
            c.sleeping = true;
            c.parked = before == (0, 0);
            let timed_out = if c.parked {
                c = self.work.wait(c).unwrap_or_else(|p| p.into_inner());
                false
            } else {
                let (g, t) = self.work.wait_timeout(c, idle).unwrap_or_else(|p| p.into_inner());
                c = g;
                t.timed_out()
            };
            c.sleeping = false;
            c.parked = false;
            // Idle: nothing changed for a whole interval, and something is pending.
            let now = (c.cp.waiting(), c.unreleased());
            if timed_out && now == before && (now.0 > 0 || now.1 > 0) {
                break;
            }
        }
        c.log_full = false;
        true
    }

    /// A lane's log is full: wakes the checkpointer and waits a little for space.
    pub fn wait_for_space(&self) {
        let mut c = lock(&self.state);
        c.log_full = true;
        c.sleeping = false;
        self.work.notify_all();
        let _ = self.space.wait_timeout(c, Duration::from_millis(5));
    }

    /// Starts the applier's engine on the next groups to apply in order: the gap-free run, or
    /// every waiting group (`allow_gaps`). Returns how many; end the pass with
    /// [`Checkpoint::applied`].
    pub fn plan(&self, allow_gaps: bool, applier: &mut Applier<'_>) -> usize {
        let mut c = lock(&self.state);
        applier.engine().plan(&mut c.cp, allow_gaps)
    }

    /// Ends the engine's apply pass: returns the groups written (the first of the batch), which
    /// stop waiting.
    pub fn applied<'a>(&self, applier: &'a mut Applier<'_>) -> &'a [GroupRef] {
        let mut c = lock(&self.state);
        let engine = &mut applier.held.engine;
        engine.applied(&mut c.cp);
        c.waiting_bytes -= engine.last_applied().iter().map(|g| g.bytes).sum::<u64>();
        (c.fresh, c.held) = engine.unreleased();
        applier.held.engine.last_applied()
    }

    /// A reclaim is done: wakes the lanes that wait for log space.
    pub fn reclaimed(&self, applier: &mut Applier<'_>) {
        let mut c = lock(&self.state);
        (c.fresh, c.held) = applier.engine().unreleased();
        drop(c);
        self.space.notify_all();
    }

    /// Starts the sequence over after `base`, if nothing waits to be applied or released:
    /// `prepare` runs first, with the state held (so no group is pushed meanwhile), and its
    /// error stops the reset.
    pub fn reset_to<E>(
        &self,
        base: u64,
        _applier: &Applier<'_>,
        prepare: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), ResetRefused<E>> {
        let mut c = lock(&self.state);
        if c.cp.waiting() > 0 || c.unreleased() > 0 {
            return Err(ResetRefused::Busy);
        }
        prepare().map_err(ResetRefused::Prepare)?;
        c.cp.reset_to(base);
        Ok(())
    }

    /// Where a new session's sequence numbers start (see `Checkpointer::resume`).
    pub fn resume(&self) -> u64 {
        lock(&self.state).cp.resume()
    }

    /// The applied prefix.
    pub fn applied_seq(&self) -> u64 {
        lock(&self.state).cp.applied_seq()
    }

    /// Bytes of the complete groups that can be applied now (the gap-free run after the applied
    /// prefix): what the ack gate counts as on its way to the backups.
    pub fn ready_bytes(&self) -> u64 {
        lock(&self.state).cp.ready_bytes()
    }

    pub fn lag(&self) -> Lag {
        let c = lock(&self.state);
        Lag { groups: c.cp.waiting(), bytes: c.waiting_bytes, applied_seq: c.cp.applied_seq() }
    }
}

/// Why [`Checkpoint::reset_to`] did not reset.
#[derive(Debug)]
pub(crate) enum ResetRefused<E> {
    /// Groups are still being applied or released: the operator may try again.
    Busy,
    /// The preparation failed, with its own error.
    Prepare(E),
}
