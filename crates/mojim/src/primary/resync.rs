//! Bringing a mirror up to date when a session begins.
//!
//! The primary compares the mirror's history (from its Welcome) with its own and picks the
//! cheapest way that is certain to be complete: nothing, the metadata log's ranges, the dirty
//! bitmap's chunks, or everything; or it refuses a mirror whose copy diverged. The choice is
//! [`mojim_core::primary::resync_choice`] (its module has the table); this module runs it.
//!
//! A copy is a stream of copy groups on all lanes, read from the region when sent: Copy frames,
//! which the mirror writes straight into its data area, each group closed by a Copied frame
//! that takes a sequence number like the application's groups, which keep flowing meanwhile.
//! The mirror's log holds only the Copied records, and it applies both kinds in one order (see
//! `Link::send_framed_copy` and the mirror's `lane.rs` for why the early landing gives the same
//! result), so the result is the primary's state. The copy is framed by
//! CopyBegin (the mirror marks its data area inconsistent, persistently) and CopyEnd on every
//! lane (the mirror is consistent again once it has applied the last copy group, and takes this
//! copy's generation id). The copy is done once the mirror has answered a Heartbeat sent after
//! each lane's CopyEnd (`Link::confirm`): [`Primary::close`](super::Primary::close), which waits
//! for a copy in progress, then never ends the session before the mirror has them all.

use super::link::{lock, CopyScratch, Link, COPY_FRAME};
use super::link_error::LinkError;
use super::Inner;
use crate::error::{Error, Result};
use crate::history::{new_generation, CopyKind};
use mojim_core::primary::{coalesce, resync_choice, MirrorHistory, Plan, PrimaryHistory};
use mojim_core::Range;
use mojim_format::copied::{COPIED_RANGE_SIZE, MAX_COPIED_RANGES};
use mojim_format::FrameKind;
use mojim_transport::Transport;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Copy groups in flight per lane before the sender waits for acknowledgements.
const IN_FLIGHT_PER_LANE: usize = 8;
/// Copy groups framed (checksummed) ahead of the one being sent, per lane.
const FRAMED_AHEAD: usize = 2;
/// Rounds of resending Copy frames the mirror found changed before the copy fails: a resend
/// comes from a snapshot, so only a link that corrupts data fails it.
const MAX_RESEND_ROUNDS: usize = 3;
/// Bytes of region content per copy group, at most.
pub const COPY_GROUP_BYTES: u64 = 1 << 20;

/// A resynchronisation, as status shows it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ResyncStatus {
    /// How the mirror is being brought up to date.
    pub kind: CopyKind,
    /// Bytes of region content the copy sends.
    pub total_bytes: u64,
    /// Bytes sent so far.
    pub sent_bytes: u64,
    /// Bytes still to send.
    pub remaining_bytes: u64,
    /// Seconds since the copy began, or that it took once it ended.
    pub seconds: f64,
    /// Bytes sent per second so far, in millions (10^6).
    pub mb_per_s: f64,
    /// Whether the copy finished: the mirror is consistent and current.
    pub done: bool,
    /// Why the copy failed, if it did (the next session starts another).
    pub error: Option<String>,
    /// Bytes sent again because the mirror found them changed (or corrupted) on the way: Copy
    /// frames are read from the region as they are sent, and the application keeps writing.
    #[serde(default)]
    pub resent_bytes: u64,
}

struct State {
    session: u64,
    kind: CopyKind,
    total: u64,
    started: Instant,
    finished: Option<Instant>,
    running: bool,
    error: Option<String>,
}

/// The current or last resynchronisation.
#[derive(Default)]
pub(crate) struct Progress {
    state: Mutex<Option<State>>,
    sent: AtomicU64,
    resent: AtomicU64,
    cv: Condvar,
}

impl Progress {
    fn start(&self, session: u64, kind: CopyKind, total: u64) {
        self.sent.store(0, Ordering::Relaxed);
        self.resent.store(0, Ordering::Relaxed);
        *lock(&self.state) = Some(State {
            session,
            kind,
            total,
            started: Instant::now(),
            finished: None,
            running: true,
            error: None,
        });
    }

    fn finish(&self, error: Option<String>) {
        if let Some(s) = lock(&self.state).as_mut() {
            s.running = false;
            s.finished = Some(Instant::now());
            s.error = error;
        }
        self.cv.notify_all();
    }

    /// The session of a running copy ended.
    pub fn abort(&self, session: u64) {
        let running = lock(&self.state).as_ref().is_some_and(|s| s.session == session && s.running);
        if running {
            self.finish(Some("the session ended before the copy finished".into()));
        }
    }

    pub fn wait_idle(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.state);
        while g.as_ref().is_some_and(|s| s.running) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            g = self.cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    pub fn status(&self) -> Option<ResyncStatus> {
        let g = lock(&self.state);
        let s = g.as_ref()?;
        let sent = self.sent.load(Ordering::Relaxed).min(s.total);
        let seconds = s.finished.unwrap_or_else(Instant::now).duration_since(s.started).as_secs_f64();
        Some(ResyncStatus {
            kind: s.kind,
            total_bytes: s.total,
            sent_bytes: sent,
            remaining_bytes: s.total - sent,
            seconds,
            mb_per_s: if seconds > 0.0 { sent as f64 / 1e6 / seconds } else { 0.0 },
            done: !s.running && s.error.is_none(),
            error: s.error.clone(),
            resent_bytes: self.resent.load(Ordering::Relaxed),
        })
    }
}

/// Installs a freshly connected link: plans, announces the copy, and starts it.
pub(crate) fn link_up<T: Transport>(inner: &Arc<Inner<T>>, link: Arc<Link<T::Conn>>) -> Result<()>
where
    T::Conn: Send + Sync + 'static,
{
    let mut slot = inner.link.write().unwrap_or_else(|p| p.into_inner());
    let meta = inner.meta.as_ref().expect("replicated primaries have a metadata log");
    let dirty = inner.dirty.as_ref().expect("replicated primaries have a dirty map");
    let (generation, prev) = inner.region.generation();
    let mine =
        PrimaryHistory { generation, prev, dirty_base: dirty.base().map(|b| b.0), acked: meta.acked() };
    let chosen = resync_choice(
        mine,
        MirrorHistory::of(&link.welcome),
        inner.region.size(),
        |s| meta.ranges_after(s),
        || {
            let chunk = dirty.chunk_size();
            dirty.dirty_chunks().map(|c| (c * chunk, chunk.min(inner.region.size() - c * chunk))).collect()
        },
    );
    let chosen = match chosen {
        Ok(p) => p,
        Err(d) => {
            link.close();
            return Err(Error::Diverged { peer: link.mirror.clone(), message: d.to_string() });
        }
    };
    let generation = if generation == 0 {
        let g = new_generation();
        inner.region.set_generation(g, 0).map_err(Error::io("persist the generation id"))?;
        g
    } else {
        generation
    };
    let lanes = link.lanes_per_replica;
    match &chosen {
        Plan::InSync(_) => {
            if link.welcome.generation != generation {
                for l in 0..lanes {
                    link.send_control(l, FrameKind::CopyEnd, generation, 0).map_err(Error::from)?;
                }
            }
        }
        Plan::Copy { kind, ranges, .. } => {
            let total = ranges.iter().map(|r| r.1).sum();
            for l in 0..lanes {
                link.send_control(l, FrameKind::CopyBegin, *kind as u64, total).map_err(Error::from)?;
            }
        }
    }
    // Once the session's first frames are out (a copy's CopyBegin marks the mirror
    // inconsistent): should they not go, the log still holds what the plan was made from.
    meta.restart(chosen.log_start(link.next_seq.load(Ordering::Relaxed)))
        .map_err(Error::io("restart the metadata log"))?;
    // Registered before the link is visible, so nobody sees the session without its copy.
    if let Plan::Copy { kind, ranges, .. } = &chosen {
        inner.resync.start(link.session, *kind, ranges.iter().map(|r| r.1).sum());
    }
    *slot = Some(link.clone());
    lock(&inner.health).lost = None;
    drop(slot);
    tracing::info!(
        mirror = %link.mirror,
        session = format!("{:#x}", link.session),
        next_seq = link.next_seq.load(Ordering::Relaxed),
        plan = ?chosen.name(),
        reason = %chosen.reason(),
        "session begins"
    );
    if let Plan::Copy { kind, ranges, .. } = chosen {
        let inner2 = inner.clone();
        let thread = std::thread::Builder::new()
            .name("mojim-resync".into())
            .spawn(move || {
                let res = copy(&inner2, &link, kind, &ranges, generation);
                if let Err(reason) = &res {
                    inner2.on_loss(&link, reason.clone());
                }
                inner2.resync.finish(res.err().map(|e| e.to_string()));
            })
            .map_err(Error::io("spawn the resync thread"))?;
        // Joined when the primary closes; those of earlier sessions that ended are let go.
        let mut threads = lock(&inner.resyncs);
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
    }
    Ok(())
}

/// Sends lane `lane`'s share of `ranges` (every `lanes`-th copy group) and returns the number of
/// its last group (0 if it had none).
///
/// Two threads: one checksums the next groups' frames in the region while this one sends, so
/// the checksums' pass over the bytes overlaps the sending of the groups before.
fn copy_lane<T: Transport>(
    inner: &Inner<T>,
    link: &Link<T::Conn>,
    ranges: &[(u64, u64)],
    lane: usize,
) -> Result<u64, LinkError>
where
    T::Conn: Sync,
{
    let lanes = link.lanes_per_replica;
    // The mirror's log holds only each group's Copied record; the bytes go to its data area.
    let max_ranges = copied_ranges_max(link);
    std::thread::scope(|scope| {
        // Made inside the scope: when the sender stops early (it failed), its ends of both
        // channels go before the scope waits for the framer, which then stops too.
        let (framed_tx, framed) = mpsc::sync_channel::<CopyScratch>(FRAMED_AHEAD);
        let (spare_tx, spare) = mpsc::sync_channel::<CopyScratch>(FRAMED_AHEAD + 1);
        for _ in 0..=FRAMED_AHEAD {
            let _ = spare_tx.send(CopyScratch::new(COPY_GROUP_BYTES, COPY_FRAME, false));
        }
        std::thread::Builder::new()
            .name(format!("mojim-frame-{lane}"))
            .spawn_scoped(scope, move || {
                for group in copy_groups(ranges, COPY_GROUP_BYTES, max_ranges).skip(lane).step_by(lanes) {
                    // The sender stopped (it failed): so does this.
                    let Ok(mut scratch) = spare.recv() else { return };
                    link.frame_copy(&inner.region, lane, &group, &mut scratch);
                    if framed_tx.send(scratch).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| LinkError::Local(format!("spawn the copy framer of lane {lane}: {e}")))?;
        let mut in_flight: VecDeque<u64> = VecDeque::new();
        let mut last = 0;
        for scratch in framed.iter() {
            let seq = {
                // Read from the region as it is sent: only while the application holds no batch.
                let _gate = lock(&inner.copy_gate);
                link.send_framed_copy(&inner.region, lane, &scratch)?
            };
            inner.resync.sent.fetch_add(scratch.bytes(), Ordering::Relaxed);
            let _ = spare_tx.send(scratch);
            last = seq;
            in_flight.push_back(seq);
            if in_flight.len() > IN_FLIGHT_PER_LANE {
                link.wait(lane, in_flight.pop_front().expect("not empty"))?;
            }
        }
        Ok(last)
    })
}

/// Ranges a Copied frame may list in a group of `link`: its body is at most `max_frame` bytes.
fn copied_ranges_max<C>(link: &Link<C>) -> usize {
    (link.limits.max_frame as usize / COPIED_RANGE_SIZE).clamp(1, MAX_COPIED_RANGES as usize)
}

/// The first of `ranges` that does not lie inside a region of `size` bytes.
fn outside(ranges: &[(u64, u64)], size: u64) -> Option<(u64, u64)> {
    ranges.iter().copied().find(|r| r.0.checked_add(r.1).is_none_or(|e| e > size))
}

/// Cuts `ranges` into copy groups of at most `group_bytes` bytes and `max_ranges` ranges.
fn copy_groups(
    ranges: &[(u64, u64)],
    group_bytes: u64,
    max_ranges: usize,
) -> impl Iterator<Item = Vec<Range>> + '_ {
    let mut pieces = ranges.iter().copied().filter(|r| r.1 > 0);
    let mut carry: Option<(u64, u64)> = None;
    std::iter::from_fn(move || {
        let mut group = Vec::new();
        let mut bytes = 0;
        while group.len() < max_ranges && bytes < group_bytes {
            let Some((off, len)) = carry.take().or_else(|| pieces.next()) else { break };
            let take = len.min(group_bytes - bytes);
            group.push(Range::new(off, take));
            bytes += take;
            if take < len {
                carry = Some((off + take, len - take));
            }
        }
        (!group.is_empty()).then_some(group)
    })
}

/// Waits until every lane's copy groups (numbered up to `last`) are acknowledged, so that every
/// CopyRetry the mirror sent for them has been read, then sends the frames it asked for again,
/// from snapshots, on lane 0, until it asks for none. Returns each lane's last copy group.
fn resend<T: Transport>(
    inner: &Inner<T>,
    link: &Link<T::Conn>,
    mut last: Vec<u64>,
) -> Result<Vec<u64>, LinkError> {
    let max_ranges = copied_ranges_max(link);
    let size = inner.region.size();
    let mut rounds = 0;
    loop {
        for (l, &seq) in last.iter().enumerate() {
            if seq != 0 {
                link.wait(l, seq)?;
            }
        }
        let asked = coalesce(link.take_retries());
        let Some(&(first, _)) = asked.first() else { return Ok(last) };
        if let Some((off, len)) = outside(&asked, size) {
            return Err(LinkError::PeerMisbehaved(format!(
                "the mirror asked again for {len} bytes at {off}, outside the region of {size} bytes"
            )));
        }
        let bytes: u64 = asked.iter().map(|r| r.1).sum();
        if rounds == MAX_RESEND_ROUNDS {
            return Err(LinkError::PeerMisbehaved(format!(
                "the mirror still found {bytes} bytes of Copy frames (the first at {first}) changed on the \
                 way after {MAX_RESEND_ROUNDS} resends from snapshots: the link corrupts what it carries"
            )));
        }
        tracing::debug!(bytes, ranges = asked.len(), "resending Copy frames the mirror found changed");
        inner.resync.resent.fetch_add(bytes, Ordering::Relaxed);
        let mut scratch = CopyScratch::new(COPY_GROUP_BYTES, COPY_FRAME, true);
        for group in copy_groups(&asked, COPY_GROUP_BYTES, max_ranges) {
            let _gate = lock(&inner.copy_gate);
            last[0] = link.send_copy_snapshot(&inner.region, 0, &group, &mut scratch)?;
        }
        rounds += 1;
    }
}

/// Sends `ranges` as copy groups over every lane, then CopyEnd, and waits for all of it.
fn copy<T: Transport>(
    inner: &Inner<T>,
    link: &Arc<Link<T::Conn>>,
    kind: CopyKind,
    ranges: &[(u64, u64)],
    generation: u64,
) -> Result<(), LinkError>
where
    T::Conn: Send + Sync + 'static,
{
    let lanes = link.lanes_per_replica;
    let size = inner.region.size();
    // Asked for by an earlier copy of this session, and settled by it or by this one.
    link.take_retries();
    if let Some((off, len)) = outside(ranges, size) {
        // The ranges come from this node's metadata log and dirty bitmap.
        return Err(LinkError::Local(format!(
            "copy range at {off} of {len} bytes is outside the region of {size} bytes"
        )));
    }
    // A sender per lane: reading and checksumming a group overlaps another lane's sending.
    let last = std::thread::scope(|scope| {
        let senders = (0..lanes)
            .map(|l| {
                std::thread::Builder::new()
                    .name(format!("mojim-copy-{l}"))
                    .spawn_scoped(scope, move || copy_lane(inner, link, ranges, l))
                    .map_err(|e| LinkError::Local(format!("spawn the copy sender of lane {l}: {e}")))
            })
            .collect::<Result<Vec<_>, LinkError>>()?;
        senders
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(LinkError::Bug("a copy sender panicked".into()))))
            .collect::<Result<Vec<u64>, LinkError>>()
    })?;
    let last = resend(inner, link, last)?;
    for (l, &seq) in last.iter().enumerate() {
        link.send_control(l, FrameKind::CopyEnd, generation, seq)?;
    }
    for (l, &seq) in last.iter().enumerate() {
        if seq != 0 {
            link.wait(l, seq)?;
        }
    }
    // The copy is over only once the mirror has carried out every lane's CopyEnd: it then holds,
    // durably, the number its copy is complete at. A CopyEnd has no answer, and the mirror's
    // session ends as soon as any one lane ends, so without this a primary closing right away
    // could end the session while a CopyEnd was still on its way on another lane, and leave
    // the mirror inconsistent (never promoted) for good.
    for l in 0..lanes {
        link.confirm(l)?;
    }
    // Every change the bitmap recorded is at the mirror now (a bitmap or a full copy), unless
    // the link failed meanwhile (then the bitmap goes on recording, and the mirror is
    // inconsistent: a full copy follows).
    if kind != CopyKind::Log {
        let slot = inner.link.read().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, link) && !l.is_failed()) {
            let dirty = inner.dirty.as_ref().expect("replicated primaries have a dirty map");
            dirty.clear().map_err(|e| LinkError::Local(format!("clear the dirty bitmap: {e}")))?;
        }
    }
    tracing::info!(
        kind = kind.name(),
        bytes = ranges.iter().map(|r| r.1).sum::<u64>(),
        "mirror resynchronised"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_groups_cover_the_ranges_in_order_within_their_limits() {
        let ranges = [(0, 10), (100, 25), (200, 3), (300, 1), (400, 1)];
        let groups: Vec<Vec<(u64, u64)>> =
            copy_groups(&ranges, 12, 3).map(|g| g.iter().map(|r| (r.offset, r.len)).collect()).collect();
        assert_eq!(
            groups,
            vec![
                vec![(0, 10), (100, 2)],
                vec![(102, 12)],
                vec![(114, 11), (200, 1)],
                vec![(201, 2), (300, 1), (400, 1)],
            ]
        );
    }
}
