//! Checkpointing: complete groups from the logs into the data area, in sequence order.
//!
//! Two steps. *Apply* copies a group's records into the data area (readers see it from then
//! on). *Reclaim* makes applied groups persistent in the data area, then records the applied
//! sequence number, then frees their log space; until then the log still holds them, so a crash
//! in between only means recovery applies them again, in order, to the same result.

use super::ckpt::Applier;
use super::copy_check::group_ranges;
use super::{Shared, MAX_FRAME_LIMIT};
use mojim_core::checkpoint::GroupRef;
use mojim_core::recovery::for_each_verified_write;

/// Records a complete, acknowledged group.
///
/// When `checkpoint_thresh` groups wait, the lane thread that pushed the last one applies them
/// itself, after its acknowledgement is on the wire: the copy overlaps the primary's round trip
/// and costs no thread wake-up. The checkpointer thread reclaims, and covers idleness and full
/// logs.
/// Returns whether a checkpoint is due: then the caller runs [`apply_inline`].
pub(crate) fn push(s: &Shared, g: GroupRef) -> bool {
    s.ckpt.push(g)
}

/// Applies on the calling lane thread, unless another applier is busy (it will see the work).
pub(crate) fn apply_inline(s: &Shared) {
    if let Some(mut applier) = s.ckpt.try_applier() {
        apply_locked(s, false, DataWait::Never, &mut applier);
        drop(applier);
        s.ckpt.wake_for_reclaim();
    }
}

/// The checkpointer thread.
pub(crate) fn checkpointer_loop(s: &Shared) {
    while s.ckpt.wait_for_work(s.opts.checkpoint_idle, &s.shutdown) {
        checkpoint(s, false);
    }
}

/// Applies what can be applied and reclaims it.
pub(crate) fn checkpoint(s: &Shared, allow_gaps: bool) {
    let mut applier = s.ckpt.applier();
    apply_locked(s, allow_gaps, DataWait::Block, &mut applier);
    reclaim_locked(s, &applier);
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
///
/// A group in a log that a peer can write at any time (offered over UCX) is copied out and
/// checked on the copy first, and written from the copy (`copy_check`); if it no longer checks,
/// nothing of it is written and the node's data fails: its lanes end their session, and the log
/// is left as it is for recovery, which checks every record it finds.
fn apply_locked(s: &Shared, allow_gaps: bool, wait: DataWait, applier: &mut Applier<'_>) -> usize {
    let mut total = 0;
    loop {
        let batch = s.ckpt.plan(allow_gaps, applier);
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
                if s.lanes.exposed(g.lane) {
                    let scratch = applier.scratch();
                    let size = s.data.area().size();
                    let macs = s.lanes.macs(g.lane);
                    if let Err(why) = scratch.copy_group(log.area(), g, MAX_FRAME_LIMIT, size, &macs) {
                        s.data.fail_changed(changed(g, &why));
                        break;
                    }
                    // Made persistent as it is written: reclaim cannot trust the log's headers
                    // to say again which ranges this group wrote.
                    for (off, body) in scratch.writes() {
                        if let Err(e) = w.write_persistent(off, body) {
                            failed = Some((off, body.len(), e));
                            break;
                        }
                    }
                } else {
                    for_each_verified_write(&log.area(), g, MAX_FRAME_LIMIT, |off, body| {
                        if failed.is_none() {
                            if let Err(e) = w.write_from(off, body) {
                                failed = Some((off, body.len(), e));
                            }
                        }
                    });
                }
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
        s.forward.queue_applied(done);
        s.ckpt.applied(batch, written, applier);
        total += written;
        if written < n || n == 0 {
            return total;
        }
    }
}

/// Persists the groups applied since the last reclaim, records the watermark, and frees the log
/// space of every persistent group that each backup has. A group a backup still lacks is held
/// (`Checkpoint::to_reclaim`) and not persisted again: while a backup is away, each reclaim costs only
/// what was applied since the last one.
fn reclaim_locked(s: &Shared, applier: &Applier<'_>) {
    s.stats.reclaimed();
    let (mut fresh, mut held) = s.ckpt.to_reclaim(applier);
    // After a failure nothing is persisted or recorded: the applied number stays where the data
    // area is known good, and every later group stays in the log.
    if let Some(last) = fresh.last().copied().filter(|_| s.data.failed().is_none()) {
        let mut result = Ok(());
        let area = s.data.area();
        if area.persists_ranges() {
            for g in &fresh {
                let log = s.lanes.log_holding(g);
                if s.lanes.exposed(g.lane) {
                    // The peer may have changed the headers since: read without trusting them
                    // to still be records.
                    let walked = group_ranges(log.area(), g, MAX_FRAME_LIMIT, |off, len| {
                        if result.is_ok() {
                            result = area.persist(off, len);
                        }
                    });
                    if let Err(why) = walked {
                        let msg = s.data.fail_changed(changed(g, &why));
                        result = Err(std::io::Error::other(msg));
                        break;
                    }
                    continue;
                }
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
                s.stats.persisted(fresh.len() as u64);
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
        let upto = s.forward.min_acked();
        let n = held.iter().take_while(|g| g.seq <= upto).count();
        release(s, &held[..n]);
        held.drain(..n);
    }
    s.ckpt.reclaimed(fresh, held, applier);
}

/// Why the node stops applying: group `g`'s records in its log changed after its lane checked
/// them (`why`).
fn changed(g: &GroupRef, why: &str) -> String {
    format!(
        "group {} on lane {}: a peer changed a record after it was checked ({why}); nothing of the \
         group was applied",
        g.seq, g.lane
    )
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
