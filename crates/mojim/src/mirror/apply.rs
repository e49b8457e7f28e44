//! Checkpointing: complete groups from the logs into the data area, in sequence order.

use super::{Shared, MAX_FRAME_LIMIT};
use mojim_core::checkpoint::GroupRef;
use mojim_core::recovery::for_each_write;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

fn lock<X>(m: &std::sync::Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records a complete, acknowledged-to-be group and wakes the checkpointer when due.
pub(crate) fn push(s: &Shared, g: GroupRef) {
    let mut c = lock(&s.ckpt);
    c.cp.push(g);
    c.waiting_bytes += g.bytes;
    if s.policy.due(c.cp.waiting(), false, c.log_full) {
        s.ckpt_cv.notify_one();
    }
}

/// The checkpointer thread: applies when `checkpoint_thresh` groups wait, when idle, and when
/// a log is full.
pub(crate) fn checkpointer_loop(s: &Shared) {
    let idle = s.opts.checkpoint_idle;
    loop {
        {
            let mut c = lock(&s.ckpt);
            loop {
                if s.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                if s.policy.due(c.cp.waiting(), false, c.log_full) {
                    break;
                }
                let before = c.cp.waiting();
                let (g, timeout) = s
                    .ckpt_cv
                    .wait_timeout(c, idle)
                    .unwrap_or_else(|p| p.into_inner());
                c = g;
                // Idle: nothing new arrived for a whole interval.
                if timeout.timed_out() && c.cp.waiting() == before && before > 0 {
                    break;
                }
            }
            c.log_full = false;
        }
        apply_ready(s, false);
    }
}

/// Applies waiting groups: the gap-free run (running), or all of them (sealing).
pub(crate) fn apply_ready(s: &Shared, allow_gaps: bool) -> usize {
    let _applier = lock(&s.apply_lock);
    let mut total = 0;
    loop {
        let mut batch = {
            let mut c = lock(&s.ckpt);
            let mut batch = std::mem::take(&mut c.batch);
            c.cp.plan(allow_gaps, 256, &mut batch);
            batch
        };
        if batch.is_empty() {
            lock(&s.ckpt).batch = batch;
            return total;
        }
        for g in &batch {
            apply_one(s, g);
        }
        let last = batch.last().expect("non-empty").seq;
        if let Err(e) = s.region.set_applied_seq(last) {
            // The data is applied but the watermark is not persistent: recovery would apply
            // these groups again, which is idempotent in order. Keep going, loudly.
            tracing::error!(error = %e, "cannot persist the applied sequence number");
        }
        {
            let mut c = lock(&s.ckpt);
            for g in &batch {
                c.cp.applied(*g);
                c.waiting_bytes -= g.bytes;
            }
        }
        release(s, &batch);
        total += batch.len();
        batch.clear();
        lock(&s.ckpt).batch = batch;
        s.space_cv.notify_all();
    }
}

fn apply_one(s: &Shared, g: &GroupRef) {
    let log = s.logs[g.lane as usize].get().expect("a group's log exists");
    {
        let _w = s.data_lock.write().unwrap_or_else(|p| p.into_inner());
        for_each_write(log.area(), g, MAX_FRAME_LIMIT, |off, body| {
            s.region.write(off, body)
        });
    }
    for_each_write(log.area(), g, MAX_FRAME_LIMIT, |off, body| {
        if let Err(e) = s.region.persist(off, body.len()) {
            tracing::error!(error = %e, offset = off, "cannot persist the data area");
        }
    });
}

/// Frees log space up to the end of the last applied group of each lane in `batch`.
fn release(s: &Shared, batch: &[GroupRef]) {
    for lane in 0..s.lanes.len() {
        let Some(end) = batch
            .iter()
            .rev()
            .find(|g| g.lane as usize == lane)
            .map(|g| g.end_pos)
        else {
            continue;
        };
        let log = s.logs[lane].get().expect("a group's log exists");
        if let Err(e) = log.set_tail(end) {
            tracing::error!(error = %e, lane, "cannot persist the log tail");
        }
        lock(&s.lanes[lane]).release(end);
    }
}

/// Applies everything left by an ended session, across gaps, and moves the watermark past
/// every sequence number it used.
pub(crate) fn seal(s: &Shared) {
    apply_ready(s, true);
    let max = s.max_seq_seen.load(Ordering::SeqCst);
    let _applier = lock(&s.apply_lock);
    let mut c = lock(&s.ckpt);
    if c.cp.waiting() == 0 {
        c.cp.skip_to(max);
    }
}
