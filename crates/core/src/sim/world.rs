//! One simulated run: a primary, a mirror and the lanes between them, driven step by step by one
//! seeded generator, with the invariants checked as it goes.

use super::mirror::{CrashPoint, Delivered, Mirror};
use super::model::Model;
use super::net::{FieldMutation, Injection, Link, WireFrame};
use super::primary::Primary;
use super::rng::Rng;
use super::{Check, SimConfig, SimReport};
use crate::encode::{max_group_log_bytes, GroupLimits};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::collections::VecDeque;

/// Stale frames kept for replay into later sessions.
const STALE_POOL: usize = 64;
/// Frames of the open session kept per lane for replay.
const STORED_KEPT: usize = 8;
/// Events kept for the failure report.
const TRACE_LEN: usize = 40;
/// Rounds the final drain may take before the run is declared stuck.
const DRAIN_ROUNDS: usize = 100_000;

pub(super) struct World {
    cfg: SimConfig,
    rng: Rng,
    pub now: u64,
    limits: GroupLimits,
    primary: Primary,
    mirror: Mirror,
    links: Vec<Link>,
    model: Model,
    pub report: SimReport,
    pub trace: VecDeque<String>,
    stale: VecDeque<WireFrame>,
    /// Per lane, frames of the open session the mirror has stored, most recent last.
    stored: Vec<VecDeque<WireFrame>>,
    /// The open session's id, if any.
    session: Option<u64>,
    sessions_begun: u64,
    epoch: u64,
    reconnect_at: u64,
}

impl World {
    pub fn new(cfg: SimConfig) -> World {
        let limits = GroupLimits {
            region_size: cfg.region_size,
            max_frame: cfg.max_frame,
            max_ranges: cfg.max_ranges,
            max_group_log_bytes: max_group_log_bytes(cfg.log_capacity, cfg.max_frame),
        };
        World {
            rng: Rng::new(cfg.seed),
            now: 0,
            limits,
            primary: Primary::new(cfg.region_size),
            mirror: Mirror::new(&cfg),
            links: vec![Link::default(); cfg.lanes as usize],
            model: Model::new(cfg.region_size),
            report: SimReport { seed: cfg.seed, lanes: cfg.lanes, ..SimReport::default() },
            trace: VecDeque::with_capacity(TRACE_LEN),
            stale: VecDeque::with_capacity(STALE_POOL),
            stored: vec![VecDeque::with_capacity(STORED_KEPT); cfg.lanes as usize],
            session: None,
            sessions_begun: 0,
            epoch: 1,
            reconnect_at: 0,
            cfg,
        }
    }

    fn note(&mut self, event: String) {
        if self.trace.len() == TRACE_LEN {
            self.trace.pop_front();
        }
        self.trace.push_back(format!("t={} {event}", self.now));
    }

    /// The whole run: random steps, then a final drain, seal, crash and recovery.
    pub fn run(&mut self) -> Check<()> {
        self.begin_session()?;
        for _ in 0..self.cfg.steps {
            self.step()?;
        }
        self.finish()?;
        let (sent, acked, failed, applied) = self.model.counts();
        self.report.steps = self.now;
        self.report.groups_sent = sent as u64;
        self.report.groups_acked = acked as u64;
        self.report.groups_failed = failed as u64;
        self.report.groups_applied = applied as u64;
        Ok(())
    }

    fn step(&mut self) -> Check<()> {
        self.now += 1;
        let rates = self.cfg.faults;
        if self.session.is_none() && self.now >= self.reconnect_at {
            self.begin_session()?;
        }
        if self.rng.chance_ppm(rates.crash_ppm) {
            return self.crash(CrashPoint::Running);
        }
        if self.session.is_some() {
            if self.rng.chance_ppm(rates.disconnect_ppm) {
                let lane = self.rng.index(self.links.len());
                self.report.disconnects += 1;
                return self.end_session(format!("lane {lane} disconnected"));
            }
            if self.rng.chance_ppm(rates.garbage_ppm) {
                self.inject_bad_frame();
            }
            if self.rng.chance_ppm(rates.stale_ppm) {
                self.inject_stale_frame();
            }
            if self.rng.chance_ppm(rates.stale_ppm) {
                self.inject_replayed_frame();
            }
        }
        match self.rng.below(100) {
            0..=29 => self.issue(),
            30..=69 => {
                let lane = self.rng.index(self.links.len());
                for _ in 0..self.rng.between(1, 4) {
                    if !self.deliver_frame(lane)? {
                        break;
                    }
                }
                Ok(())
            }
            70..=87 => {
                let lane = self.rng.index(self.links.len());
                for _ in 0..self.rng.between(1, 4) {
                    if !self.deliver_ack(lane)? {
                        break;
                    }
                }
                Ok(())
            }
            _ => {
                let n = self.mirror.checkpoint(self.now, false, &mut self.model)?;
                if n > 0 {
                    self.note(format!("checkpoint applied {n} groups"));
                }
                self.mirror.check_consistent()
            }
        }
    }

    fn begin_session(&mut self) -> Check<()> {
        self.sessions_begun += 1;
        // Unique per run: the counter in the high bits, randomness below.
        let id = (self.sessions_begun << 40) | (self.rng.next_u64() & ((1 << 40) - 1));
        let next_seq = self.mirror.begin_session(id, self.epoch)?;
        self.primary.begin(id, self.epoch, next_seq, self.cfg.lanes);
        self.session = Some(id);
        self.stored.iter_mut().for_each(VecDeque::clear);
        self.report.sessions += 1;
        self.note(format!("session {id:#x} epoch {} begins at seq {next_seq}", self.epoch));
        Ok(())
    }

    /// Any lane broke: the whole session ends on both sides.
    fn end_session(&mut self, why: String) -> Check<()> {
        self.note(format!("session ends: {why}"));
        if self.session.is_none() {
            return Ok(());
        }
        if self.rng.chance_pct(self.cfg.faults.seal_crash_pct) {
            return self.crash(CrashPoint::Sealing);
        }
        self.session = None;
        self.retire_links();
        self.mirror.end_session(&mut self.model, &mut self.report)?;
        self.model.check_acked_applied("the session was sealed")?;
        self.model.check_data(&self.mirror.durable.data)?;
        self.reconnect_at = self.now + self.rng.between(0, 10);
        Ok(())
    }

    /// Connections close: frames in flight become stale, unacknowledged groups fail.
    fn retire_links(&mut self) {
        let mut stale: Vec<WireFrame> = self.primary.end(&mut self.model);
        for link in &mut self.links {
            stale.extend(link.to_mirror.drain(..).filter(|f| f.injected.is_none()));
            link.to_primary.clear();
        }
        for f in stale {
            if self.stale.len() == STALE_POOL {
                self.stale.pop_front();
            }
            self.stale.push_back(f);
        }
    }

    fn crash(&mut self, point: CrashPoint) -> Check<()> {
        if point != CrashPoint::Clean {
            self.report.crashes += 1;
        }
        if point == CrashPoint::Sealing {
            self.report.seal_crashes += 1;
        }
        self.note(format!("mirror crashes ({point:?})"));
        let fronts: Vec<(usize, WireFrame)> = if point == CrashPoint::Running {
            self.links
                .iter()
                .enumerate()
                .filter_map(|(lane, l)| l.to_mirror.front().map(|f| (lane, f.clone())))
                .collect()
        } else {
            Vec::new()
        };
        let torn = (self.report.torn_writes, self.report.torn_applies);
        self.mirror.crash(point, &fronts, &mut self.rng, &mut self.model, &mut self.report)?;
        if torn != (self.report.torn_writes, self.report.torn_applies) {
            self.note("a record or an apply was torn by the crash".into());
        }
        self.session = None;
        self.retire_links();
        if self.rng.chance_pct(50) {
            self.epoch += 1;
        }
        self.model.check_acked_applied("crash and recovery")?;
        self.model.check_data(&self.mirror.durable.data)?;
        self.reconnect_at = self.now + self.rng.between(0, 10);
        Ok(())
    }

    fn issue(&mut self) -> Check<()> {
        if self.session.is_none() || self.primary.outstanding() >= self.cfg.window {
            return Ok(());
        }
        if let Some(seq) =
            self.primary.issue(&self.cfg, &self.limits, &mut self.rng, &mut self.links, &mut self.model)?
        {
            self.note(format!("issue group {seq}"));
        }
        Ok(())
    }

    /// Delivers the frame at the front of `lane`'s stream. Returns whether it was consumed.
    fn deliver_frame(&mut self, lane: usize) -> Check<bool> {
        if self.session.is_none() {
            return Ok(false);
        }
        let Some(frame) = self.links[lane].to_mirror.front().cloned() else {
            return Ok(false);
        };
        let before = frame.injected.map(|_| self.mirror.snapshot(lane));
        match (self.mirror.deliver(lane, &frame, self.now)?, frame.injected) {
            (Delivered::Rejected(v), None) => {
                Err(format!("mirror rejected a valid frame on lane {lane}: {v}"))
            }
            (Delivered::Rejected(v), Some(kind)) => {
                let after = self.mirror.snapshot(lane);
                if before.as_ref() != Some(&after) {
                    return Err(format!(
                        "a refused {kind:?} frame on lane {lane} changed the mirror: \
                         {before:?} became {after:?}"
                    ));
                }
                self.report.violations_detected += 1;
                self.end_session(format!("lane {lane} closed on a {kind:?} frame: {v}"))?;
                Ok(true)
            }
            (Delivered::Waiting, Some(kind)) if kind != Injection::BodyFlip => {
                Err(format!("mirror accepted the header of a {kind:?} frame on lane {lane}"))
            }
            (Delivered::Waiting, _) => {
                self.report.log_full_waits += 1;
                let n = self.mirror.checkpoint(self.now, false, &mut self.model)?;
                self.note(format!("lane {lane} log full; checkpoint applied {n} groups"));
                Ok(false)
            }
            (Delivered::Stored { .. }, Some(kind)) => {
                Err(format!("mirror stored a {kind:?} frame on lane {lane}"))
            }
            (Delivered::Stored { ack }, None) => {
                let frame = self.links[lane].to_mirror.pop_front().expect("delivered from the front");
                let stored = &mut self.stored[lane];
                if stored.len() == STORED_KEPT {
                    stored.pop_front();
                }
                stored.push_back(frame);
                if let Some(ack) = ack {
                    self.links[lane].to_primary.push_back(ack);
                }
                Ok(true)
            }
        }
    }

    /// Delivers the ack at the front of `lane`'s return stream. Returns whether there was one.
    fn deliver_ack(&mut self, lane: usize) -> Check<bool> {
        let Some(ack) = self.links[lane].to_primary.pop_front() else {
            return Ok(false);
        };
        let seq = self.primary.on_ack(lane, &ack, &mut self.model)?;
        self.note(format!("ack {seq} on lane {lane}"));
        Ok(true)
    }

    /// Corrupts the next frame of a lane in flight, or slips random bytes into its stream.
    fn inject_bad_frame(&mut self) {
        let lane = self.rng.index(self.links.len());
        let kind = match self.rng.below(4) {
            0 => Injection::HeaderFlip,
            1 => Injection::BodyFlip,
            2 => Injection::Field(FieldMutation::ALL[self.rng.index(FieldMutation::ALL.len())]),
            _ => Injection::Garbage,
        };
        let stream = &mut self.links[lane].to_mirror;
        // Corruptions apply to the frame the receiver expects next, so that they are invalid
        // whatever its state; without one, random bytes are sent instead.
        let front_ok = stream.front().is_some_and(|f| f.injected.is_none());
        let kind = if front_ok { kind } else { Injection::Garbage };
        if kind == Injection::Garbage {
            let mut header = [0u8; FRAME_HEADER_SIZE];
            self.rng.fill(&mut header);
            let mut body = vec![0u8; self.rng.index(200)];
            self.rng.fill(&mut body);
            let at = self.rng.index(stream.len() + 1);
            stream.insert(at, WireFrame { header, body, injected: Some(kind) });
        } else {
            let f = stream.front_mut().expect("checked above");
            match kind {
                Injection::HeaderFlip => {
                    let bit = self.rng.index(FRAME_HEADER_SIZE * 8);
                    f.header[bit / 8] ^= 1 << (bit % 8);
                }
                Injection::BodyFlip => {
                    let bit = self.rng.index(f.body.len() * 8);
                    f.body[bit / 8] ^= 1 << (bit % 8);
                }
                Injection::Field(m) => mutate(&mut f.header, m, &self.cfg),
                Injection::Garbage | Injection::Stale | Injection::Replay => unreachable!("not chosen here"),
            }
            f.injected = Some(kind);
        }
        self.report.violations_injected += 1;
        self.note(format!("inject {kind:?} on lane {lane}"));
    }

    /// A frame of an earlier session turns up in the current one.
    fn inject_stale_frame(&mut self) {
        if self.stale.is_empty() {
            return;
        }
        let mut frame = self.stale[self.rng.index(self.stale.len())].clone();
        frame.injected = Some(Injection::Stale);
        // It arrives on the lane it was sent on, as a late segment of an old connection would.
        let lane =
            FrameHeader::decode(&frame.header).map(|h| usize::from(h.lane) % self.links.len()).unwrap_or(0);
        let stream = &mut self.links[lane].to_mirror;
        let at = self.rng.index(stream.len() + 1);
        stream.insert(at, frame);
        self.report.violations_injected += 1;
        self.report.stale_injected += 1;
        self.note(format!("inject a stale frame on lane {lane}"));
    }

    /// A frame this session already stored on a lane arrives there again, next: whatever it was,
    /// the receiver has moved past it.
    fn inject_replayed_frame(&mut self) {
        let lane = self.rng.index(self.links.len());
        if self.stored[lane].is_empty() {
            return;
        }
        let mut frame = self.stored[lane][self.rng.index(self.stored[lane].len())].clone();
        frame.injected = Some(Injection::Replay);
        self.links[lane].to_mirror.push_front(frame);
        self.report.violations_injected += 1;
        self.report.replays_injected += 1;
        self.note(format!("replay a stored frame on lane {lane}"));
    }

    /// The end of a run: deliver everything, check that a few more groups get through, seal,
    /// crash once more and recover, checking the invariants at each point.
    fn finish(&mut self) -> Check<()> {
        self.note("final drain".into());
        self.drain()?;
        if self.session.is_none() {
            self.begin_session()?;
        }
        for _ in 0..3 {
            self.issue()?;
        }
        self.drain()?;
        if self.session.is_none() {
            return Err("the session ended during a fault-free drain".into());
        }
        if self.primary.outstanding() != 0 {
            return Err(format!(
                "{} groups never acknowledged in a fault-free drain",
                self.primary.outstanding()
            ));
        }
        self.end_session("final seal".into())?;
        self.crash(CrashPoint::Clean)?;
        if self.mirror.waiting() != 0 {
            return Err("groups left waiting after the final recovery".into());
        }
        Ok(())
    }

    /// Runs the network and the checkpointer until nothing is in flight.
    fn drain(&mut self) -> Check<()> {
        for _ in 0..DRAIN_ROUNDS {
            self.now += 1;
            let applied_before = self.model.counts().3;
            let mut progress = false;
            for lane in 0..self.links.len() {
                while self.deliver_frame(lane)? {
                    progress = true;
                }
                while self.deliver_ack(lane)? {
                    progress = true;
                }
            }
            self.mirror.checkpoint(self.now, true, &mut self.model)?;
            // Applying (here, or when a full log triggered it during delivery) frees space.
            progress |= self.model.counts().3 != applied_before;
            self.mirror.check_consistent()?;
            if self.links.iter().all(Link::is_idle) {
                return Ok(());
            }
            if !progress {
                let queued: Vec<usize> = self.links.iter().map(|l| l.to_mirror.len()).collect();
                return Err(format!(
                    "stuck: frames queued per lane {queued:?}, lanes blocked {}, {} groups \
                     waiting in the checkpointer, none applicable",
                    self.mirror.any_blocked(),
                    self.mirror.waiting()
                ));
            }
        }
        Err("drain did not finish".into())
    }
}

/// Re-encodes `header` with one field made wrong in a way no receiver state accepts.
fn mutate(header: &mut [u8; FRAME_HEADER_SIZE], m: FieldMutation, cfg: &SimConfig) {
    let mut h = FrameHeader::decode(header).expect("frames the primary built decode");
    match m {
        FieldMutation::Kind => h.kind = FrameKind::Ack,
        FieldMutation::Flags => h.flags |= 0x80,
        FieldMutation::Lane => h.lane ^= 1,
        FieldMutation::Epoch => h.epoch += 1,
        FieldMutation::Session => h.session ^= 1 << 63,
        FieldMutation::BodyLenOverMax => h.body_len = cfg.max_frame + 1,
        FieldMutation::OffsetPastRegion => h.offset = cfg.region_size,
        FieldMutation::OffsetOverflow => h.offset = u64::MAX - 2,
        FieldMutation::SeqZero => h.seq = 0,
        FieldMutation::FrameIndexSkip => h.frame_index += 1,
    }
    h.encode(header);
}
