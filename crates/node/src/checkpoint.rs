//! Checkpointing: complete groups from the logs into the data area, in sequence order.
//!
//! Two steps. *Apply* copies a group's records into the data area (readers see it from then
//! on). *Reclaim* makes applied groups persistent in the data area, then records the applied
//! sequence number, then frees their log space; until then the log still holds them, so a crash
//! in between only means recovery applies them again, in order, to the same result.
//!
//! The order is not decided here: `mojim_core::mirror::CheckpointEngine` emits the steps as
//! commands, and `mojim_core::mirror::execute` runs each against the data area and the logs
//! (the simulator runs the same two against media a power cut tears). This file drives them
//! under the node's locks, and adds what only the node has: the inline apply on a lane thread,
//! the copy-then-check of logs a peer can write (`copy_check`), and the node's fail-stop.

use super::checkpoint_state::Applier;
use super::copy_check::{group_ranges, Scratch};
use super::data::Writing;
use super::lane_logs::LaneLogs;
use super::{Shared, MAX_FRAME_LIMIT};
use mojim_core::checkpoint::GroupRef;
use mojim_core::mirror::{execute, Command, Failure};
use std::io;

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
    reclaim_locked(s, &mut applier);
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
        let n = s.ckpt.plan(allow_gaps, applier);
        if n == 0 {
            // Nothing to apply, or the engine stopped: it may still owe its FailStop.
            run(s, applier, None);
            return total;
        }
        let writing = match wait {
            DataWait::Block => Some(s.data.write()),
            DataWait::Never => s.data.try_write(),
        };
        if let Some(w) = &writing {
            run(s, applier, Some(w));
        }
        drop(writing);
        s.forward.sealed(&mut applier.parts().1.seals);
        let done = s.ckpt.applied(applier);
        s.forward.queue_applied(done);
        let written = done.len();
        total += written;
        if written < n {
            return total;
        }
    }
}

/// Persists the groups applied since the last reclaim, records the watermark, and frees the log
/// space of every persistent group that each backup has. A group a backup still lacks is held
/// (`CheckpointEngine`) and not persisted again: while a backup is away, each reclaim costs only
/// what was applied since the last one.
fn reclaim_locked(s: &Shared, applier: &mut Applier<'_>) {
    s.stats.reclaimed();
    let engine = applier.engine();
    // With backups, a group's log space waits until every backup has it.
    let upto = if engine.unreleased() == (0, 0) { 0 } else { s.forward.min_acked() };
    engine.reclaim(upto);
    run(s, applier, None);
    s.ckpt.reclaimed(applier);
}

/// Runs the engine's pass to its end: each command against the node's data area and logs, in
/// the order the engine emits them. `w` holds the data area for writing (an apply pass).
fn run(s: &Shared, applier: &mut Applier<'_>, w: Option<&Writing<'_>>) {
    let (engine, scratch) = applier.parts();
    let mut area = s.data.area();
    let mut logs = LaneLogs(&s.lanes);
    while let Some(cmd) = engine.poll() {
        if let Command::FailStop(f) = &cmd {
            fail_stop(s, f);
            continue;
        }
        // Once the data area failed nothing more goes to it, is persisted or released: the
        // groups stay in the log, and restart recovery applies them from there.
        if let Some(msg) = s.data.failed() {
            engine.stop(Failure::Stopped(msg.clone()));
            continue;
        }
        let result = match cmd {
            Command::WriteGroup(g) if s.lanes.exposed(g.lane) => write_copied(s, &g, scratch),
            Command::PersistGroup(g) if s.lanes.exposed(g.lane) => persist_ranges(s, &g),
            _ => Ok(execute(&cmd, &mut area, &mut logs, MAX_FRAME_LIMIT)),
        };
        let result = match result {
            Ok(result) => result,
            Err(changed) => {
                engine.stop(changed);
                continue;
            }
        };
        if result.is_ok() {
            match cmd {
                Command::WriteGroup(g) => {
                    w.expect("groups are written with the data area held").written(g.seq)
                }
                Command::SetAppliedSeq(_) => {
                    s.data.consistent();
                    s.stats.persisted(engine.reclaiming().len() as u64);
                }
                Command::ReleaseTail { lane, pos } => s.lanes.freed(lane, pos),
                _ => {}
            }
        }
        engine.done(result);
    }
}

/// Writes group `g` from a log a peer can write at any time: copied out and checked first (and
/// what was checked sealed for the forwarder, `group_seal`), and made persistent as it is written (reclaim cannot trust the log's headers to say again which
/// ranges this group wrote). Err: the peer changed the group.
fn write_copied(s: &Shared, g: &GroupRef, scratch: &mut Scratch) -> Result<io::Result<()>, Failure> {
    let log = s.lanes.log_holding(g);
    let area = s.data.area();
    let macs = s.lanes.macs(g.lane);
    match scratch.copy_group(log.area(), g, MAX_FRAME_LIMIT, area.size(), &macs, s.forward.sealer()) {
        // Kept for the forwarder, which sends the backups only what matches it.
        Ok(seal) => scratch.seals.push((g.seq, seal)),
        Err(why) => return Err(Failure::Changed { seq: g.seq, lane: g.lane, why: why.to_string() }),
    }
    for (off, body) in scratch.writes() {
        if let Err(e) = area.write_persistent(off, body) {
            return Ok(Err(io::Error::new(e.kind(), format!("{} bytes at offset {off}: {e}", body.len()))));
        }
    }
    Ok(Ok(()))
}

/// Persists the ranges group `g`'s records name, in a log a peer may have changed since: read
/// without trusting them to still be records. Err: the peer changed the group.
fn persist_ranges(s: &Shared, g: &GroupRef) -> Result<io::Result<()>, Failure> {
    let log = s.lanes.log_holding(g);
    let area = s.data.area();
    let mut result = Ok(());
    let walked = group_ranges(log.area(), g, MAX_FRAME_LIMIT, |off, len| {
        if result.is_ok() {
            result = area.persist(off, len);
        }
    });
    match walked {
        Ok(()) => Ok(result),
        Err(why) => Err(Failure::Changed { seq: g.seq, lane: g.lane, why: why.to_string() }),
    }
}

/// The engine stopped for `f`: the node's storage fail-stops (see `Store::fail`), with a message
/// that names the file. A failure from elsewhere was recorded where it happened.
fn fail_stop(s: &Shared, f: &Failure) {
    match f {
        Failure::Write { .. } | Failure::Persist { .. } => {
            s.data.fail_area(f.to_string());
        }
        Failure::Changed { .. } => {
            s.data.fail_changed(f.to_string());
        }
        // A tail that cannot be made persistent frees nothing more: recovery reads the log from
        // the persistent tail, so the space after it must not be written over.
        Failure::Tail { lane, pos, error } => {
            let path = s.lanes.log(*lane).map(|l| l.path().display().to_string()).unwrap_or_default();
            s.data.fail(format!(
                "the log of lane {lane} ({path}) failed: cannot persist its tail ({pos}): {error}"
            ));
        }
        Failure::Stopped(_) => {}
        // Only restart recovery persists a log's records, and it stops the open instead.
        Failure::Records { .. } => unreachable!("the running engine persists no records: {f}"),
    }
}

/// Applies everything left by an ended session, across gaps (the next session resumes after
/// every sequence number this one used: see `Checkpointer::resume`).
pub(crate) fn seal(s: &Shared) {
    checkpoint(s, true);
}
