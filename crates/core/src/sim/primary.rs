//! One incarnation of the primary: the application writes random bytes into its region and
//! issues groups; each group gets the session's next sequence number and goes out on one lane as
//! consecutive Data frames. Acks arrive per lane in order; when the session ends, every
//! unacknowledged group fails (the application is told it is not durable). An incarnation has
//! one epoch for life, given by the coordinator that started it.
//!
//! A session begins with the production resync choice ([`resync_choice`]) against the mirror's
//! Welcome. A copy is CopyBegin on every lane, then copy groups (Copy frames read from the
//! region after the group's number is assigned, closed by a Copied frame) interleaved with the
//! application's groups, and, once every copy group is acknowledged, CopyEnd on every lane
//! naming this copy's generation and the lane's last copy group.
//!
//! It keeps the production metadata log ([`MetaRing`], in memory): each group's ranges are
//! appended once its number is taken and before its frames go out, the acknowledged floor is
//! noted as acks arrive, the resync choice reads it, and it restarts where the plan says
//! ([`Plan::log_start`]), as the library's primary does. A mirror at this copy's generation
//! thus gets again, as a log catch-up, the ranges of groups it may lack (a group that failed
//! is still in this copy).
//!
//! It keeps the production dirty bitmap ([`DirtyMap`], in memory) the same way: a new
//! generation with a bitmap begins recording from the old one at the acknowledged floor, the
//! application's stores while it has no session (a degraded period) are marked before they are
//! made, the resync choice reads the chunks, and a bitmap or full copy clears the bitmap once
//! its CopyEnd goes out.

use super::mirror::REGION_UUID;
use super::model::{Model, Writes};
use super::net::{Link, WireFrame};
use super::rng::Rng;
use super::{Check, Sabotage, SimConfig};
use crate::encode::{
    check_group, copied_header, copy_header, data_header, frames, GroupLimits, RangeError, SessionTag,
};
use crate::primary::{
    resync_choice, CopyKind, Divergence, InFlightWindow, MirrorHistory, Plan, PrimaryHistory, REFUSED_SYNC,
};
use crate::Range;
use mojim_format::handshake::Welcome;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::{DirtyMap, MetaRing};
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

/// Frames of a session kept to be replayed, stale, into a later one.
const RECENT_FRAMES: usize = 16;
/// The dirty bitmap's chunk: the smallest the library allows (`[cluster] dirty_chunk`), so
/// that the larger simulated regions have several.
const DIRTY_CHUNK: u64 = mojim_region::DIRTY_MIN_CHUNK_SIZE;

pub(super) struct Primary {
    /// Which incarnation this is (its node's index in the world).
    node: usize,
    epoch: u64,
    region: Vec<u8>,
    /// This copy's generation (0: none yet) and the one before it (0: none).
    generation: u64,
    prev: u64,
    /// The metadata log: the ranges of the groups sent since it last restarted.
    ring: MetaRing<Box<[AtomicU64]>>,
    /// The dirty bitmap: the chunks changed without the mirror since its base, while recording.
    dirty: DirtyMap<Box<[AtomicU64]>>,
    session: Option<PrimarySession>,
}

/// A copy into the mirror, as one session sends it.
struct CopyJob {
    kind: CopyKind,
    generation: u64,
    /// Region ranges still to send, each as one copy group.
    pieces: VecDeque<(u64, u64)>,
    /// The copy groups sent, and per lane the last one sent on it (0: none).
    sent: Vec<u64>,
    last_on_lane: Vec<u64>,
    /// CopyEnd went out on every lane.
    ended: bool,
}

struct PrimarySession {
    id: u64,
    next_seq: u64,
    /// Per lane, the groups sent and not yet acknowledged, in order.
    unacked: Vec<VecDeque<u64>>,
    /// Per lane, the production in-flight window (`async_window` = `SimConfig::window`), and
    /// the group the last sync point on the lane waits for (0: none): the application sends
    /// nothing more on the lane until it is acknowledged.
    windows: Vec<InFlightWindow>,
    waiting_for: Vec<u64>,
    recent: VecDeque<WireFrame>,
    copy: Option<CopyJob>,
}

impl Primary {
    /// An incarnation at `epoch` whose copy is of `generation` (0: it has none yet), with a
    /// metadata log of `records` records that answers for every group from the first.
    pub fn new(node: usize, epoch: u64, region_size: u64, generation: u64, records: u64) -> Primary {
        let ring = MetaRing::in_memory(REGION_UUID, records);
        ring.restart(1).expect("memory needs no persisting");
        let dirty = DirtyMap::in_memory(REGION_UUID, region_size, DIRTY_CHUNK);
        let region = vec![0; region_size as usize];
        Primary { node, epoch, region, generation, prev: 0, ring, dirty, session: None }
    }

    /// This copy begins a new generation (a degraded period): the old one becomes the one
    /// before it, and with `bitmap` the dirty bitmap records from it.
    pub fn new_generation(&mut self, generation: u64, bitmap: bool) {
        let old = std::mem::replace(&mut self.generation, generation);
        self.prev = old;
        let done = if bitmap { self.dirty.begin(old, self.ring.acked()) } else { self.dirty.clear() };
        done.expect("memory needs no persisting");
    }

    /// Without a session, in a degraded period (the dirty bitmap records): the application
    /// stores random bytes into one range, marked first. Returns the range, or `None` when not
    /// degraded.
    pub fn write_degraded(&mut self, cfg: &SimConfig, rng: &mut Rng) -> Option<(u64, u64)> {
        if self.session.is_some() || self.dirty.base().is_none() {
            return None;
        }
        let (offset, len) = random_range(cfg, rng);
        if cfg.sabotage != Sabotage::UnmarkedStore {
            self.dirty.mark(offset, len).expect("memory needs no persisting");
        }
        rng.fill(&mut self.region[offset as usize..(offset + len) as usize]);
        Some((offset, len))
    }

    /// Without a session and not degraded (`on_mirror_loss = block`): the application stores
    /// random bytes into one range and its sync point is refused; the metadata log keeps the
    /// range under [`REFUSED_SYNC`], as the library's primary does. Returns the range, or `None`
    /// with a session or while degraded.
    pub fn write_refused(&mut self, cfg: &SimConfig, rng: &mut Rng) -> Option<(u64, u64)> {
        if self.session.is_some() || self.dirty.base().is_some() {
            return None;
        }
        let (offset, len) = random_range(cfg, rng);
        rng.fill(&mut self.region[offset as usize..(offset + len) as usize]);
        if cfg.sabotage != Sabotage::RefusedSyncUnrecorded {
            self.ring.append(REFUSED_SYNC, [(offset, len)]);
        }
        Some((offset, len))
    }

    /// The production resync choice against the mirror's Welcome, from the metadata log.
    pub fn plan(&self, welcome: &Welcome, sabotage: Sabotage) -> Result<Plan, Divergence> {
        let size = self.region.len() as u64;
        let acked = match sabotage {
            Sabotage::CatchUpFromApplied => u64::MAX,
            _ => self.ring.acked(),
        };
        let dirty_base = self.dirty.base().map(|(generation, _)| generation);
        resync_choice(
            PrimaryHistory { generation: self.generation, prev: self.prev, dirty_base, acked },
            MirrorHistory::of(welcome),
            size,
            |s| self.ring.ranges_after(s),
            || self.dirty.dirty_chunks().map(|c| self.dirty.chunk_span(c)).collect(),
        )
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The open session's id, if any.
    pub fn session(&self) -> Option<u64> {
        self.session.as_ref().map(|s| s.id)
    }

    /// A promoted incarnation resumes from a copy of the region it was given, with its
    /// generations, whose last group applied was `applied`: its metadata log answers for the
    /// groups after it (as `mojim promote` starts a promoted node's history).
    pub fn take_copy(&mut self, data: &[u8], (generation, prev): (u64, u64), applied: u64) {
        self.region.copy_from_slice(data);
        (self.generation, self.prev) = (generation, prev);
        self.ring.restart(applied + 1).expect("memory needs no persisting");
        self.dirty.clear().expect("memory needs no persisting");
    }

    /// Every lane's handshake is done and `plan` chosen: groups start at `next_seq`, and the
    /// metadata log restarts where the plan says. With a copy, CopyBegin goes out on every lane
    /// first; copy groups are cut `piece` bytes long.
    pub fn begin(
        &mut self,
        id: u64,
        next_seq: u64,
        links: &mut [Link],
        plan: &Plan,
        piece: u64,
        window: usize,
    ) {
        assert!(self.session.is_none(), "primary session begun twice");
        let lanes = links.len();
        self.ring.restart(plan.log_start(next_seq)).expect("memory needs no persisting");
        let copy = match plan {
            Plan::InSync(_) => None,
            Plan::Copy { kind, ranges, .. } => Some((*kind, ranges.as_slice())),
        };
        let copy = copy.map(|(kind, ranges)| {
            let total: u64 = ranges.iter().map(|r| r.1).sum();
            for (lane, link) in links.iter_mut().enumerate() {
                let mut h = FrameHeader::new(FrameKind::CopyBegin);
                (h.lane, h.epoch, h.session) = (lane as u16, self.epoch, id);
                (h.offset, h.seq) = (kind as u64, total);
                link.to_mirror.push_back(WireFrame {
                    header: h.to_bytes(),
                    body: Vec::new(),
                    injected: None,
                });
            }
            let mut pieces = VecDeque::new();
            for &(mut offset, len) in ranges {
                let end = offset + len;
                while offset < end {
                    let n = piece.min(end - offset);
                    pieces.push_back((offset, n));
                    offset += n;
                }
            }
            CopyJob {
                kind,
                generation: self.generation,
                pieces,
                sent: Vec::new(),
                last_on_lane: vec![0; lanes],
                ended: false,
            }
        });
        self.session = Some(PrimarySession {
            id,
            next_seq,
            unacked: vec![VecDeque::new(); lanes],
            windows: vec![InFlightWindow::new(window); lanes],
            waiting_for: vec![0; lanes],
            recent: VecDeque::with_capacity(RECENT_FRAMES),
            copy,
        });
    }

    /// Sends the copy's next group, or, once every copy group is acknowledged, CopyEnd on every
    /// lane. Returns what it sent: a copy group's number, or 0 for CopyEnd.
    pub fn copy_step(
        &mut self,
        cfg: &SimConfig,
        rng: &mut Rng,
        links: &mut [Link],
        model: &mut Model,
    ) -> Option<u64> {
        let s = self.session.as_mut()?;
        let c = s.copy.as_mut().filter(|c| !c.ended)?;
        let Some((offset, len)) = c.pieces.pop_front() else {
            if c.sent.iter().any(|seq| s.unacked.iter().any(|q| q.contains(seq))) {
                return None;
            }
            for (lane, link) in links.iter_mut().enumerate() {
                let mut h = FrameHeader::new(FrameKind::CopyEnd);
                (h.lane, h.epoch, h.session) = (lane as u16, self.epoch, s.id);
                (h.offset, h.seq) = (c.generation, c.last_on_lane[lane]);
                link.to_mirror.push_back(WireFrame {
                    header: h.to_bytes(),
                    body: Vec::new(),
                    injected: None,
                });
            }
            c.ended = true;
            // Every change the bitmap recorded went with a bitmap or full copy.
            if c.kind != CopyKind::Log {
                self.dirty.clear().expect("memory needs no persisting");
            }
            return Some(0);
        };
        // The number first, then the bytes, read from the region as it is now.
        let seq = s.next_seq;
        s.next_seq = seq.checked_add(1)?;
        let lane = rng.index(links.len());
        let tag = SessionTag { session: s.id, epoch: self.epoch, lane: lane as u16 };
        let bytes = self.region[offset as usize..(offset + len) as usize].to_vec();
        let mut listed = Vec::new();
        for (i, chunk) in bytes.chunks(cfg.max_frame as usize).enumerate() {
            let at = offset + (i * cfg.max_frame as usize) as u64;
            let header = copy_header(tag, at, chunk);
            links[lane].to_mirror.push_back(WireFrame { header, body: chunk.to_vec(), injected: None });
            mojim_format::copied::push_range(&mut listed, at, chunk.len() as u64);
        }
        let header = copied_header(tag, seq, &listed);
        links[lane].to_mirror.push_back(WireFrame { header, body: listed, injected: None });
        model.issued_copy((s.id, seq), vec![(offset, bytes)]);
        s.unacked[lane].push_back(seq);
        c.sent.push(seq);
        c.last_on_lane[lane] = seq;
        Some(seq)
    }

    /// The session began with a copy whose CopyEnd has not gone out yet.
    pub fn copying(&self) -> bool {
        self.session.as_ref().and_then(|s| s.copy.as_ref()).is_some_and(|c| !c.ended)
    }

    /// This incarnation's copy of the region.
    pub fn region(&self) -> &[u8] {
        &self.region
    }

    /// Groups sent and not yet acknowledged.
    pub fn outstanding(&self) -> usize {
        self.session.as_ref().map_or(0, |s| s.unacked.iter().map(VecDeque::len).sum())
    }

    /// The application writes and syncs one group of random ranges. Returns its sequence number.
    pub fn issue(
        &mut self,
        cfg: &SimConfig,
        limits: &GroupLimits,
        rng: &mut Rng,
        links: &mut [Link],
        model: &mut Model,
    ) -> Check<Option<u64>> {
        let Some(s) = self.session.as_mut() else {
            return Ok(None);
        };
        // The lane's last sync point still waits for an earlier group: nothing is stored yet.
        let lane = rng.index(links.len());
        let waited = s.waiting_for[lane];
        if s.unacked[lane].front().is_some_and(|&oldest| oldest <= waited) {
            return Ok(None);
        }
        let region_size = cfg.region_size;
        let mf = u64::from(cfg.max_frame);
        let count = rng.between(1, cfg.max_ranges as u64) as usize;
        let mut ranges: Vec<Range> = (0..count)
            .map(|_| {
                let len = if rng.chance_pct(cfg.large_range_pct) {
                    rng.between(mf / 2, 3 * mf)
                } else {
                    match rng.below(10) {
                        0 => 0,
                        1..=6 => rng.between(1, 64),
                        _ => rng.between(1, mf),
                    }
                }
                .min(region_size);
                Range::new(rng.below(region_size - len + 1), len)
            })
            .collect();
        if ranges.iter().all(|r| r.len == 0) {
            ranges[0] = Range::new(rng.below(region_size), 1);
        }
        let shape = loop {
            match check_group(&ranges, limits) {
                Ok(shape) => break shape,
                Err(RangeError::GroupTooLarge { .. }) => {
                    for r in &mut ranges {
                        if r.len > 1 {
                            r.len /= 2;
                        }
                    }
                }
                Err(e) => return Err(format!("check_group refused a valid group: {e}")),
            }
        };
        for r in &ranges {
            rng.fill(&mut self.region[r.offset as usize..(r.offset + r.len) as usize]);
        }
        let seq = s.next_seq;
        s.next_seq = seq.checked_add(1).ok_or_else(|| {
            format!("the mirror resumed session {:#x} at group {seq}: no sequence number is left", s.id)
        })?;
        // Recorded before anything of it is sent, as the library's primary does.
        self.ring.append(seq, ranges.iter().map(|r| (r.offset, r.len)));
        let tag = SessionTag { session: s.id, epoch: self.epoch, lane: lane as u16 };
        let mut writes: Writes = Vec::with_capacity(shape.frames as usize);
        for plan in frames(&ranges, cfg.max_frame, shape) {
            let at = plan.offset as usize;
            let body = self.region[at..at + plan.len as usize].to_vec();
            let header = data_header(tag, seq, plan, &body);
            writes.push((plan.offset, body.clone()));
            let frame = WireFrame { header, body, injected: None };
            if s.recent.len() == RECENT_FRAMES {
                s.recent.pop_front();
            }
            s.recent.push_back(frame.clone());
            links[lane].to_mirror.push_back(frame);
        }
        if writes.len() != shape.frames as usize || writes.is_empty() {
            return Err(format!(
                "frames() cut {} frames, check_group promised {}",
                writes.len(),
                shape.frames
            ));
        }
        model.issued((s.id, seq), writes);
        s.unacked[lane].push_back(seq);
        s.waiting_for[lane] = s.windows[lane].sent(seq);
        Ok(Some(seq))
    }

    /// A CopyRetry arrived on `lane` (else `None`): the copy sends the range again, as a copy
    /// group of its own, before its CopyEnd. Returns the range.
    pub fn on_copy_retry(
        &mut self,
        lane: usize,
        bytes: &[u8; FRAME_HEADER_SIZE],
    ) -> Check<Option<(u64, u64)>> {
        let s = self.session.as_mut().ok_or("a reply delivered outside a session")?;
        let h = FrameHeader::decode(bytes)
            .map_err(|e| format!("primary got a corrupt reply on lane {lane}: {e}"))?;
        if h.kind != FrameKind::CopyRetry {
            return Ok(None);
        }
        let c = s.copy.as_mut().filter(|c| !c.ended && usize::from(h.lane) == lane && h.session == s.id);
        let Some(c) = c else {
            return Err(format!("primary got a CopyRetry on lane {lane} outside an open copy: {h:?}"));
        };
        let range = (h.offset, h.seq);
        if range.0.checked_add(range.1).is_none_or(|end| end > self.region.len() as u64) || range.1 == 0 {
            return Err(format!("primary was asked again for bytes outside its region: {h:?}"));
        }
        c.pieces.push_front(range);
        Ok(Some(range))
    }

    /// An ack arrived on `lane`: it must name the oldest outstanding group of that lane.
    pub fn on_ack(&mut self, lane: usize, bytes: &[u8; FRAME_HEADER_SIZE], model: &mut Model) -> Check<u64> {
        let s = self.session.as_mut().ok_or("ack delivered outside a session")?;
        let h = FrameHeader::decode(bytes)
            .map_err(|e| format!("primary got a corrupt ack on lane {lane}: {e}"))?;
        if h.kind != FrameKind::Ack
            || usize::from(h.lane) != lane
            || h.session != s.id
            || h.epoch != self.epoch
        {
            return Err(format!("primary got a misdirected ack on lane {lane} (session {:#x}): {h:?}", s.id));
        }
        match s.unacked[lane].pop_front() {
            Some(seq) if seq == h.seq => {
                model.acked((s.id, seq), self.node, self.epoch)?;
                // Every group below the lowest one still owed is at the mirror (the library's
                // primary knows a lower bound of this; the simulator knows it exactly).
                let owed = s.unacked.iter().filter_map(|q| q.front()).min();
                self.ring.note_acked(owed.map_or(s.next_seq - 1, |&n| n - 1));
                Ok(seq)
            }
            other => Err(format!(
                "primary got an ack for group {} on lane {lane}, oldest outstanding is {other:?}",
                h.seq
            )),
        }
    }

    /// The session is over: every outstanding group fails. Returns the frames recently sent,
    /// which a later session may see again as stale frames.
    pub fn end(&mut self, model: &mut Model) -> Vec<WireFrame> {
        let Some(s) = self.session.take() else {
            return Vec::new();
        };
        model.failed(s.unacked.iter().map(VecDeque::len).sum());
        s.recent.into()
    }
}

/// A range of one to `max_frame` bytes somewhere in the region, for a store made without a
/// session.
fn random_range(cfg: &SimConfig, rng: &mut Rng) -> (u64, u64) {
    let len = rng.between(1, u64::from(cfg.max_frame)).min(cfg.region_size);
    (rng.below(cfg.region_size - len + 1), len)
}
