//! Checkpointing: complete groups from the logs into the data area, in sequence order.
//!
//! Two steps. *Apply* copies a group's records into the data area (readers see it from then
//! on). *Reclaim* makes applied groups persistent in the data area, then records the applied
//! sequence number, then frees their log space; until then the log still holds them, so a crash
//! in between only means recovery applies them again, in order, to the same result.

use super::{Ckpt, Shared, MAX_FRAME_LIMIT};
use mojim_core::checkpoint::GroupRef;
use mojim_core::recovery::for_each_verified_write;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

/// Applied groups that wait for one reclaim, at most.
pub(crate) const RECLAIM_BATCH: usize = 64;

fn lock<X>(m: &std::sync::Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn reclaim_due(c: &Ckpt) -> bool {
    c.unreleased.len() >= RECLAIM_BATCH || c.log_full
}

/// Groups applied and not yet released from the log: to persist, or held for the backups.
pub(crate) fn unreleased(c: &Ckpt) -> usize {
    c.unreleased.len() + c.held.len()
}

/// Records a complete, acknowledged group.
///
/// When `checkpoint_thresh` groups wait, the lane thread that pushed the last one applies them
/// itself, after its acknowledgement is on the wire: the copy overlaps the primary's round trip
/// and costs no thread wake-up. The checkpointer thread reclaims, and covers idleness and full
/// logs.
/// Returns whether a checkpoint is due: then the caller runs [`apply_inline`].
pub(crate) fn push(s: &Shared, g: GroupRef) -> bool {
    let mut c = lock(&s.ckpt);
    c.cp.push(g);
    c.waiting_bytes += g.bytes;
    if c.parked {
        // The checkpointer sleeps without a timer while nothing is pending; start its timer.
        c.parked = false;
        s.ckpt_cv.notify_one();
    }
    s.policy.due(c.cp.waiting(), false, c.log_full)
}

/// Applies on the calling lane thread, unless another applier is busy (it will see the work).
pub(crate) fn apply_inline(s: &Shared) {
    if let Ok(guard) = s.apply_lock.try_lock() {
        apply_locked(s, false, DataWait::Never, &guard);
        drop(guard);
        let mut c = lock(&s.ckpt);
        if c.sleeping && reclaim_due(&c) {
            c.sleeping = false;
            s.ckpt_cv.notify_one();
        }
    }
}

/// The checkpointer thread.
pub(crate) fn checkpointer_loop(s: &Shared) {
    let idle = s.opts.checkpoint_idle;
    loop {
        {
            let mut c = lock(&s.ckpt);
            loop {
                if s.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                if s.policy.due(c.cp.waiting(), false, c.log_full) || reclaim_due(&c) {
                    break;
                }
                let before = (c.cp.waiting(), unreleased(&c));
                c.sleeping = true;
                c.parked = before == (0, 0);
                let timed_out = if c.parked {
                    c = s.ckpt_cv.wait(c).unwrap_or_else(|p| p.into_inner());
                    false
                } else {
                    let (g, t) = s.ckpt_cv.wait_timeout(c, idle).unwrap_or_else(|p| p.into_inner());
                    c = g;
                    t.timed_out()
                };
                c.sleeping = false;
                c.parked = false;
                // Idle: nothing changed for a whole interval, and something is pending.
                let now = (c.cp.waiting(), unreleased(&c));
                if timed_out && now == before && (now.0 > 0 || now.1 > 0) {
                    break;
                }
            }
            c.log_full = false;
        }
        checkpoint(s, false);
    }
}

/// Applies what can be applied and reclaims it.
pub(crate) fn checkpoint(s: &Shared, allow_gaps: bool) {
    let guard = lock(&s.apply_lock);
    apply_locked(s, allow_gaps, DataWait::Block, &guard);
    reclaim_locked(s, &guard);
}

/// Whether an applier waits for the data area while a reader holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DataWait {
    /// The checkpointer and sealing: they wait.
    Block,
    /// A lane thread: it must go on receiving and answering heartbeats, so it leaves the work to
    /// the checkpointer instead (an operator's long read holds the data area for seconds).
    Never,
}

/// Applies waiting groups: the gap-free run (running), or all of them (sealing). Only groups
/// whose bytes are all in the data area count as applied: after a write fails, the rest stay
/// waiting in the log, for recovery.
fn apply_locked(s: &Shared, allow_gaps: bool, wait: DataWait, _applier: &MutexGuard<'_, ()>) -> usize {
    let mut total = 0;
    loop {
        let mut batch = {
            let mut c = lock(&s.ckpt);
            let mut batch = std::mem::take(&mut c.batch);
            c.cp.plan(allow_gaps, 256, &mut batch);
            batch
        };
        let n = batch.len();
        let mut written = 0;
        let writing = match wait {
            DataWait::Block => Some(s.data.write()),
            DataWait::Never => s.data.try_write(),
        };
        if let Some(w) = writing {
            for g in &batch {
                // Once the data area failed nothing more goes to it: the groups stay in the log,
                // and restart recovery applies them from there.
                if s.data.failed().is_some() {
                    break;
                }
                let log = s.lanes.log_holding(g);
                let mut failed = None;
                for_each_verified_write(&log.area(), g, MAX_FRAME_LIMIT, |off, body| {
                    if failed.is_none() {
                        if let Err(e) = w.write_from(off, body) {
                            failed = Some((off, body.len(), e));
                        }
                    }
                });
                if let Some((off, len, e)) = failed {
                    let why = format!("cannot write group {} ({len} bytes at offset {off}): {e}", g.seq);
                    s.data.fail_area(why);
                    break;
                }
                w.written(g.seq);
                written += 1;
            }
        }
        let done = &batch[..written];
        if let (Some(f), false) = (&s.forward, done.is_empty()) {
            let mut st = super::forward::lock(f);
            for g in done {
                st.push(g);
            }
            drop(st);
            f.cv.notify_all();
        }
        let mut c = lock(&s.ckpt);
        for g in done {
            c.cp.applied(*g);
            c.waiting_bytes -= g.bytes;
            c.unreleased.push(*g);
        }
        batch.clear();
        c.batch = batch;
        total += written;
        if written < n || n == 0 {
            return total;
        }
    }
}

/// Persists the groups applied since the last reclaim, records the watermark, and frees the log
/// space of every persistent group that each backup has. A group a backup still lacks is held
/// (`Ckpt::held`) and not persisted again: while a backup is away, each reclaim costs only
/// what was applied since the last one.
fn reclaim_locked(s: &Shared, _applier: &MutexGuard<'_, ()>) {
    s.stats.reclaims.fetch_add(1, Ordering::Relaxed);
    let (mut fresh, mut held) = {
        let mut c = lock(&s.ckpt);
        (std::mem::take(&mut c.unreleased), std::mem::take(&mut c.held))
    };
    // After a failure nothing is persisted or recorded: the applied number stays where the data
    // area is known good, and every later group stays in the log.
    if let Some(last) = fresh.last().copied().filter(|_| s.data.failed().is_none()) {
        let mut result = Ok(());
        let area = s.data.area();
        if area.persists_ranges() {
            for g in &fresh {
                let log = s.lanes.log_holding(g);
                for_each_verified_write(&log.area(), g, MAX_FRAME_LIMIT, |off, body| {
                    if result.is_ok() {
                        result = area.persist(off, body.len());
                    }
                });
            }
        }
        let result = result.and_then(|_| area.sync()).and_then(|_| area.set_applied_seq(last.seq));
        match result {
            Ok(()) => {
                s.data.consistent();
                s.stats.groups_persisted.fetch_add(fresh.len() as u64, Ordering::Relaxed);
                held.extend_from_slice(&fresh);
            }
            // Never retry a failed flush (the failed pages may be marked clean and a retry
            // "succeed" without them).
            Err(e) => {
                let why = format!("cannot make groups up to {} persistent: {e}", last.seq);
                s.data.fail_area(why);
            }
        }
    }
    fresh.clear();
    if s.data.failed().is_some() {
        held.clear();
    } else if !held.is_empty() {
        // With backups, a group's log space waits until every backup has it.
        let upto = s.forward.as_ref().map_or(u64::MAX, |f| super::forward::lock(f).min_acked());
        let n = held.iter().take_while(|g| g.seq <= upto).count();
        release(s, &held[..n]);
        held.drain(..n);
    }
    // Only appliers push to `unreleased`, and this one holds the apply lock.
    let mut c = lock(&s.ckpt);
    let previous = std::mem::replace(&mut c.unreleased, fresh);
    assert!(previous.is_empty(), "groups applied during a reclaim");
    c.held = held;
    drop(c);
    s.space_cv.notify_all();
}

/// Frees log space up to the end of the last reclaimed group of each lane in `done`. A tail
/// that cannot be made persistent fail-stops the node and frees nothing more: recovery reads
/// the log from the persistent tail, so the space after it must not be written over.
fn release(s: &Shared, done: &[GroupRef]) {
    if let Err(what) = s.lanes.release(done) {
        s.data.fail(what);
    }
}

/// Applies everything left by an ended session, across gaps (the next session resumes after
/// every sequence number this one used: see `Checkpointer::resume`).
pub(crate) fn seal(s: &Shared) {
    checkpoint(s, true);
}
