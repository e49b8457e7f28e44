//! One simulated run: the primary incarnations, the mirror and the connections between them,
//! driven step by step by one seeded generator, with the invariants checked as it goes.
//!
//! This file holds the run, the traffic and the bad frames; [`session`] opens and ends sessions
//! (handshakes, seals, crashes) and [`failover`] holds promotions, partitions and timeouts.

mod failover;
mod session;

use super::mirror::{CrashPoint, Delivered, Mirror, FIRST_GENERATION};
use super::model::Model;
use super::net::{Conn, Cut, FieldMutation, Injection, WireFrame};
use super::primary::Primary;
use super::rng::Rng;
use super::{Check, SimConfig, SimReport};
use crate::encode::{max_group_log_bytes, GroupLimits};
use crate::receive::Violation;
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

/// A node running one primary incarnation, and its path to the mirror.
struct Node {
    primary: Primary,
    /// It still runs: an old incarnation stops some time after a newer one is promoted.
    alive: bool,
    /// When it stops, once a newer incarnation has been promoted.
    stop_at: Option<u64>,
    /// When it next tries to open a session, if it has none.
    reconnect_at: u64,
    /// Per lane, the cuts of its path to the mirror.
    cuts: Vec<Cut>,
    /// It has its copy of the region: the first incarnation from the start, a promoted one from
    /// its first accepted handshake.
    has_copy: bool,
}

impl Node {
    fn new(index: usize, epoch: u64, cfg: &SimConfig, reconnect_at: u64) -> Node {
        Node {
            primary: Primary::new(
                index,
                epoch,
                cfg.region_size,
                if index == 0 { FIRST_GENERATION } else { 0 },
                cfg.meta_records,
            ),
            alive: true,
            stop_at: None,
            reconnect_at,
            cuts: vec![Cut::default(); cfg.lanes as usize],
            has_copy: index == 0,
        }
    }
}

pub(super) struct World {
    cfg: SimConfig,
    rng: Rng,
    pub now: u64,
    limits: GroupLimits,
    /// Every primary incarnation, oldest first. The last is the newest and holds the highest
    /// epoch the coordinator has given.
    nodes: Vec<Node>,
    mirror: Mirror,
    /// Sessions with an end still open.
    conns: Vec<Conn>,
    model: Model,
    pub report: SimReport,
    pub trace: VecDeque<String>,
    stale: VecDeque<WireFrame>,
    /// Per lane, frames of the mirror's open session it has stored, most recent last.
    stored: Vec<VecDeque<WireFrame>>,
    sessions_begun: u64,
    /// A primary refused the mirror's history (split brain): the operator discards the mirror's
    /// copy once it serves no session.
    discard_due: bool,
    /// The CopyEnd frames of the mirror's session delivered so far: the session, its lanes (a
    /// bit each), the highest last copy group named and the generation.
    copy_ends: (u64, u64, u64, u64),
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
            nodes: vec![Node::new(0, 1, &cfg, 0)],
            mirror: Mirror::new(&cfg),
            conns: Vec::new(),
            model: Model::new(cfg.region_size, FIRST_GENERATION),
            report: SimReport { seed: cfg.seed, lanes: cfg.lanes, ..SimReport::default() },
            trace: VecDeque::with_capacity(TRACE_LEN),
            stale: VecDeque::with_capacity(STALE_POOL),
            stored: vec![VecDeque::with_capacity(STORED_KEPT); cfg.lanes as usize],
            sessions_begun: 0,
            discard_due: false,
            copy_ends: (0, 0, 0, 0),
            cfg,
        }
    }

    /// After a primary refused the mirror's history, the operator discards the mirror's copy
    /// once it serves no session.
    fn resolve_split_brain(&mut self) {
        if self.discard_due && self.mirror.session().is_none() && self.nodes.iter().all(|n| n.has_copy) {
            self.discard_due = false;
            self.note("the operator discards the mirror's copy (split brain resolved)".into());
            self.mirror.discard(&mut self.model);
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
        self.connect(0)?;
        if self.nodes[0].primary.session().is_none() {
            return Err("the first session did not open".into());
        }
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
        (self.report.acks_held, self.report.acks_held_chain) = self.mirror.acks_held;
        self.report.copies_begun = self.mirror.copies_begun;
        self.report.copies_completed = self.model.copies_completed();
        Ok(())
    }

    fn step(&mut self) -> Check<()> {
        self.step_once()?;
        self.check_converged_if_quiet()
    }

    fn step_once(&mut self) -> Check<()> {
        self.now += 1;
        let rates = self.cfg.faults;
        if self.restart_if_failed()? {
            return Ok(());
        }
        if self.rng.chance_ppm(rates.media_error_ppm) {
            self.mirror.durable.data.fail_next();
        }
        self.tick_network()?;
        self.tick_backups()?;
        self.stop_due();
        self.reconnect_due()?;
        if self.rng.chance_ppm(rates.crash_ppm) {
            return self.crash(CrashPoint::Running, false);
        }
        if self.rng.chance_ppm(rates.power_cut_ppm) {
            return self.crash(CrashPoint::Running, true);
        }
        if self.rng.chance_ppm(rates.promote_ppm) {
            self.promote();
        }
        if self.rng.chance_ppm(rates.partition_ppm) {
            self.partition();
        }
        if self.rng.chance_ppm(rates.copy_fault_ppm) {
            return self.copy_fault();
        }
        self.resolve_split_brain();
        if let Some(ci) = self.mirror_conn() {
            if self.rng.chance_ppm(rates.disconnect_ppm) {
                let lane = self.rng.index(self.conns[ci].joined);
                self.report.disconnects += 1;
                return self.disconnect(ci, lane);
            }
            if self.rng.chance_ppm(rates.garbage_ppm) {
                self.inject_bad_frame(ci);
            }
            if self.rng.chance_ppm(rates.stale_ppm) {
                self.inject_stale_frame(ci);
            }
            if self.rng.chance_ppm(rates.stale_ppm) {
                self.inject_replayed_frame(ci);
            }
        }
        match self.rng.below(100) {
            0..=29 => self.issue(),
            30..=69 => {
                let lane = self.rng.index(self.cfg.lanes as usize);
                for _ in 0..self.rng.between(1, 4) {
                    if !self.deliver_frame(lane)? {
                        break;
                    }
                }
                Ok(())
            }
            70..=87 => {
                let open: Vec<u64> =
                    self.conns.iter().filter(|c| c.primary_open).map(|c| c.session).collect();
                if open.is_empty() {
                    return Ok(());
                }
                let session = open[self.rng.index(open.len())];
                let lane = self.rng.index(self.cfg.lanes as usize);
                for _ in 0..self.rng.between(1, 4) {
                    if !self.deliver_ack(session, lane)? {
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

    /// The mirror comes to need a copy: its data area is wiped or discarded (the operator ends
    /// its session first), or the newest primary begins a new generation (it lost its mirror:
    /// its session ends), with a dirty bitmap or without one. Not while a promoted incarnation
    /// has yet to take its copy from the mirror.
    fn copy_fault(&mut self) -> Check<()> {
        if self.discard_due || self.nodes.iter().any(|n| !n.has_copy) || self.mirror.failed() {
            return Ok(());
        }
        self.report.copy_faults += 1;
        let newest = self.nodes.len() - 1;
        match self.rng.below(3) {
            0 | 1 => {
                self.mirror_end("the operator stops the mirror's session".into())?;
                if self.mirror.session().is_some() || self.mirror.failed() {
                    return Ok(());
                }
                if self.rng.chance_pct(50) {
                    self.note("the mirror's data area is wiped".into());
                    self.mirror.wipe(&mut self.rng, &mut self.model);
                } else {
                    self.note("the operator discards the mirror's copy".into());
                    self.mirror.discard(&mut self.model);
                }
            }
            _ if self.nodes[newest].alive => {
                let generation = self.rng.next_u64() | 1;
                let bitmap = self.rng.chance_pct(70);
                self.note(format!(
                    "primary {newest} begins generation {generation:#x} (dirty bitmap: {bitmap})"
                ));
                self.primary_end(newest, "it lost its mirror".into(), true);
                self.nodes[newest].primary.new_generation(generation, bitmap);
                // The application goes on storing meanwhile (more may follow until it is back).
                for _ in 0..self.rng.between(1, 8) {
                    self.store_degraded(newest);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A CopyEnd of `session` (of `lanes` lanes) reached the mirror; once every lane's has, the
    /// model knows the copy's last group and generation.
    fn copy_end_delivered(&mut self, session: u64, lanes: usize, h: &FrameHeader) {
        let (s, mask, until, generation) = &mut self.copy_ends;
        if *s != session {
            (*s, *mask, *until) = (session, 0, 0);
        }
        *mask |= 1 << h.lane;
        *until = (*until).max(h.seq);
        *generation = h.offset;
        if mask.count_ones() as usize == lanes {
            let (until, generation) = (*until, *generation);
            self.copy_ends = (0, 0, 0, 0);
            self.note(format!("every lane's CopyEnd is in: the copy ends at group {until}"));
            self.model.copy_ended(until, generation);
        }
    }

    /// A running incarnation with an open session (old or new) issues a group. One without a
    /// session stores into its copy: marked in its dirty bitmap in a degraded period, else
    /// (under `block`) with its sync point refused and its range kept in the metadata log.
    fn issue(&mut self) -> Check<()> {
        let writers: Vec<usize> = (0..self.nodes.len())
            .filter(|&n| {
                let node = &self.nodes[n];
                node.primary.session().is_some() || node.alive && node.has_copy
            })
            .collect();
        if writers.is_empty() {
            return Ok(());
        }
        let node = writers[self.rng.index(writers.len())];
        if self.store_degraded(node) {
            return Ok(());
        }
        if let Some((offset, len)) = self.nodes[node].primary.write_refused(&self.cfg, &mut self.rng) {
            self.report.refused_syncs += 1;
            self.note(format!("primary {node} stores {len} bytes at {offset}; its sync point is refused"));
            return Ok(());
        }
        self.issue_on(node)
    }

    /// Primary `node`, in a degraded period, stores without its mirror. Returns whether it was
    /// in one.
    fn store_degraded(&mut self, node: usize) -> bool {
        let Some((offset, len)) = self.nodes[node].primary.write_degraded(&self.cfg, &mut self.rng) else {
            return false;
        };
        self.report.degraded_writes += 1;
        self.note(format!("primary {node} stores {len} bytes at {offset} without its mirror"));
        true
    }

    fn issue_on(&mut self, node: usize) -> Check<()> {
        let Some(session) = self.nodes[node].primary.session() else {
            return Ok(());
        };
        let ci = self.conn(session).ok_or("a primary's open session has no connections")?;
        let primary = &mut self.nodes[node].primary;
        let links = &mut self.conns[ci].links;
        if self.rng.chance_pct(50) {
            if let Some(seq) = primary.copy_step(&self.cfg, &mut self.rng, links, &mut self.model) {
                if primary.epoch() < self.model.fence() {
                    self.model.issued_fenced((session, seq));
                }
                let what = if seq == 0 { "CopyEnd".to_string() } else { format!("copy group {seq}") };
                self.note(format!("primary {node} sends {what}"));
                return Ok(());
            }
        }
        let Some(seq) = primary.issue(&self.cfg, &self.limits, &mut self.rng, links, &mut self.model)? else {
            return Ok(());
        };
        let epoch = primary.epoch();
        if epoch < self.model.fence() {
            // The mirror has moved on: this group must never be acknowledged or applied.
            self.model.issued_fenced((session, seq));
            self.report.fenced_groups += 1;
            self.note(format!("fenced primary {node} (epoch {epoch}) issues group {seq}"));
        } else {
            self.note(format!("primary {node} issues group {seq}"));
        }
        Ok(())
    }

    /// Delivers the frame at the front of `lane`'s stream to the mirror, or the end of the
    /// stream. Returns whether anything was consumed.
    fn deliver_frame(&mut self, lane: usize) -> Check<bool> {
        let Some(ci) = self.mirror_conn() else {
            return Ok(false);
        };
        let c = &self.conns[ci];
        if lane >= c.joined
            || c.links[lane].broken_to_mirror
            || self.nodes[c.node].cuts[lane].toward_mirror(self.now)
        {
            return Ok(false);
        }
        // A lane whose acknowledgement waits in the ack gate reads nothing (it still sees its
        // stream end).
        if self.mirror.holds(lane) && !c.links[lane].to_mirror.is_empty() {
            return Ok(false);
        }
        let Some(frame) = c.links[lane].to_mirror.front() else {
            if c.links[lane].primary_closed {
                self.mirror_end(format!("the primary closed lane {lane}"))?;
                return Ok(true);
            }
            return Ok(false);
        };
        let injected = frame.injected;
        let before = injected.map(|_| self.mirror.snapshot(lane));
        let delivered = self.mirror.deliver(lane, frame, self.now, &mut self.model)?;
        if let Delivered::Stored { ack } = &delivered {
            // A frame the simulator did not touch carries its sender's epoch.
            let epoch = match injected {
                None => self.nodes[c.node].primary.epoch(),
                Some(_) => epoch_of(&frame.header)?,
            };
            check_fencing(self.model.fence(), lane, epoch, ack.as_ref())?;
        }
        match (delivered, injected) {
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
                let by_window = matches!(v, Violation::SeqTaken { .. } | Violation::SeqAhead { .. });
                let expected = match kind {
                    Injection::SeqResend => matches!(v, Violation::SeqTaken { .. }),
                    Injection::SeqAhead => matches!(v, Violation::SeqAhead { .. }),
                    _ => true,
                };
                if !expected {
                    // The frame was built to keep every rule of its lane: were it refused for
                    // another reason, the window would go untested.
                    return Err(format!(
                        "a {kind:?} frame on lane {lane} was refused for another reason: {v}"
                    ));
                }
                self.report.violations_detected += 1;
                self.report.seq_window_refusals += u64::from(by_window);
                self.mirror_end(format!("lane {lane} closed on a {kind:?} frame: {v}"))?;
                Ok(true)
            }
            (Delivered::Waiting, Some(kind)) if kind != Injection::BodyFlip && !kind.passes_lane_checks() => {
                Err(format!("mirror accepted the header of a {kind:?} frame on lane {lane}"))
            }
            (Delivered::Waiting, _) => {
                self.report.log_full_waits += 1;
                let n = self.mirror.checkpoint(self.now, false, &mut self.model)?;
                self.note(format!("lane {lane} log full; checkpoint applied {n} groups"));
                Ok(false)
            }
            (Delivered::AskedAgain(retry), Some(Injection::BodyFlip)) => {
                // Not refused: the bytes did not land and are asked for again, on this lane.
                let link = &mut self.conns[ci].links[lane];
                link.to_mirror.pop_front();
                link.to_primary.push_back(retry);
                self.report.copy_retries += 1;
                self.note(format!("lane {lane} asks for a corrupted Copy frame again"));
                Ok(true)
            }
            (Delivered::AskedAgain(_), kind) => {
                Err(format!("mirror asked for a {kind:?} Copy frame on lane {lane} again"))
            }
            (Delivered::Stored { .. } | Delivered::StorageFailed(_), Some(kind)) => {
                Err(format!("mirror stored a {kind:?} frame on lane {lane}"))
            }
            (Delivered::StorageFailed(why), None) => {
                // The node's lane ends with a Refuse naming the failure; the session ends.
                self.report.landing_failures += 1;
                self.mirror_end(format!("lane {lane}: storage failure: {why}"))?;
                Ok(true)
            }
            (Delivered::Stored { ack }, None) => {
                let (session, lanes) = (self.conns[ci].session, self.conns[ci].links.len());
                let link = &mut self.conns[ci].links[lane];
                let frame = link.to_mirror.pop_front().expect("delivered from the front");
                if let Some(ack) = ack {
                    link.to_primary.push_back(ack);
                }
                let h = FrameHeader::decode(&frame.header).map_err(|e| format!("a valid frame: {e}"))?;
                if h.kind == FrameKind::CopyEnd {
                    self.copy_end_delivered(session, lanes, &h);
                }
                if !matches!(h.kind, FrameKind::Data | FrameKind::Copied) {
                    // Only records are replayed (a Copy frame lands wherever it is sent).
                    return Ok(true);
                }
                let stored = &mut self.stored[lane];
                if stored.len() == STORED_KEPT {
                    stored.pop_front();
                }
                stored.push_back(frame);
                Ok(true)
            }
        }
    }

    /// Delivers the ack at the front of `lane`'s return stream of `session` to its primary, or
    /// the end of the stream. Returns whether anything was consumed.
    fn deliver_ack(&mut self, session: u64, lane: usize) -> Check<bool> {
        let Some(ci) = self.conn(session) else {
            return Ok(false);
        };
        let c = &mut self.conns[ci];
        let node = c.node;
        let link = &mut c.links[lane];
        if !c.primary_open || link.broken_to_primary || self.nodes[node].cuts[lane].toward_primary(self.now) {
            return Ok(false);
        }
        let Some(ack) = link.to_primary.pop_front() else {
            if link.mirror_closed {
                self.primary_end(node, format!("the mirror closed lane {lane}"), true);
                return Ok(true);
            }
            return Ok(false);
        };
        if let Some((offset, len)) = self.nodes[node].primary.on_copy_retry(lane, &ack)? {
            self.note(format!("primary {node} is asked for {len} bytes at {offset} again on lane {lane}"));
            return Ok(true);
        }
        let seq = self.nodes[node].primary.on_ack(lane, &ack, &mut self.model)?;
        self.note(format!("primary {node} gets ack {seq} on lane {lane}"));
        Ok(true)
    }

    /// One tick of the backups: they may acknowledge groups, and the mirror asks its ack gate
    /// again for every acknowledgement it holds; those it lets out go to the primary. Returns
    /// whether anything moved.
    fn tick_backups(&mut self) -> Check<bool> {
        let advanced = self.mirror.backups.tick();
        let released = self.mirror.release_acks(&mut self.model)?;
        if released.is_empty() {
            return Ok(advanced);
        }
        let ci = self.mirror_conn().ok_or("the ack gate let out acknowledgements outside a session")?;
        for (lane, ack) in released {
            let fence = self.model.fence();
            check_fencing(fence, lane, fence, Some(&ack))?;
            let seq = FrameHeader::decode(&ack).map(|h| h.seq).unwrap_or_default();
            self.conns[ci].links[lane].to_primary.push_back(ack);
            self.note(format!("the ack gate lets out the ack of group {seq} on lane {lane}"));
        }
        Ok(true)
    }

    /// Corrupts the next frame of a lane in flight, or slips random bytes into its stream.
    fn inject_bad_frame(&mut self, ci: usize) {
        let lane = self.rng.index(self.conns[ci].joined);
        let kind = match self.rng.below(7) {
            0 => Injection::HeaderFlip,
            1 => Injection::BodyFlip,
            2 => Injection::Field(FieldMutation::ALL[self.rng.index(FieldMutation::ALL.len())]),
            3 => Injection::StaleHeartbeat,
            4 => Injection::SeqResend,
            5 => Injection::SeqAhead,
            _ => Injection::Garbage,
        };
        if kind.passes_lane_checks() {
            return self.inject_hostile_seq(ci, lane, kind);
        }
        if kind == Injection::StaleHeartbeat {
            // Only the epoch is wrong, so only the epoch check can refuse it, wherever it lands.
            let c = &self.conns[ci];
            let mut h = FrameHeader::new(FrameKind::Heartbeat);
            h.lane = lane as u16;
            h.session = c.session;
            h.epoch = self.nodes[c.node].primary.epoch() - 1;
            let stream = &mut self.conns[ci].links[lane].to_mirror;
            let at = self.rng.index(stream.len() + 1);
            stream.insert(at, WireFrame { header: h.to_bytes(), body: Vec::new(), injected: Some(kind) });
            self.report.violations_injected += 1;
            self.note(format!("inject {kind:?} on lane {lane}"));
            return;
        }
        let stream = &mut self.conns[ci].links[lane].to_mirror;
        // Corruptions apply to the frame the receiver expects next, so that they are invalid
        // whatever its state; without one, random bytes are sent instead.
        // Not a copy's frame, where a field changed may keep every rule (a Copy frame lands
        // wherever it says); a Copy frame's body gets a flipped bit, which is not refused but
        // asked for again.
        let front = stream.front().filter(|f| f.injected.is_none()).map(|f| FrameHeader::decode(&f.header));
        let kind = match front {
            Some(Ok(h)) if h.kind == FrameKind::Copy => Injection::BodyFlip,
            Some(Ok(h))
                if !matches!(h.kind, FrameKind::CopyBegin | FrameKind::CopyEnd | FrameKind::Copied) =>
            {
                kind
            }
            _ => Injection::Garbage,
        };
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
                Injection::Garbage
                | Injection::Stale
                | Injection::Replay
                | Injection::StaleHeartbeat
                | Injection::SeqResend
                | Injection::SeqAhead => {
                    unreachable!("not chosen here")
                }
            }
            f.injected = Some(kind);
        }
        self.report.violations_injected += 1;
        self.note(format!("inject {kind:?} on lane {lane}"));
    }

    /// A peer that authenticated sends, on `lane`, a frame that keeps every rule of the lane but
    /// whose group number the session refuses: a group already received on another lane
    /// ([`Injection::SeqResend`]), or a Data or Skip frame numbered beyond the session's window,
    /// up to 2⁶⁴−2 ([`Injection::SeqAhead`]). It goes first in the lane's stream, where the lane
    /// expects a new group: nothing else is in the stream, or a group's first frame is next.
    fn inject_hostile_seq(&mut self, ci: usize, lane: usize, kind: Injection) {
        let c = &self.conns[ci];
        let stream = &c.links[lane].to_mirror;
        let between_groups = match stream.front() {
            None => true,
            Some(f) => {
                // Not inside a copy group either: its Copy frames wait for their Copied frame.
                f.injected.is_none()
                    && FrameHeader::decode(&f.header).is_ok_and(|h| {
                        h.frame_index == 0
                            && matches!(h.kind, FrameKind::Data | FrameKind::CopyBegin | FrameKind::CopyEnd)
                    })
            }
        };
        let Some(lane_next) = self.mirror.lane_next_seq(lane) else { return };
        if !between_groups {
            return;
        }
        let frame = if kind == Injection::SeqResend {
            // The first frame of a group another lane stored in this session, numbered after
            // this lane's last group.
            let candidates: Vec<(usize, usize)> = (0..c.joined)
                .filter(|&other| other != lane)
                .flat_map(|other| (0..self.stored[other].len()).map(move |i| (other, i)))
                .filter(|&(other, i)| {
                    FrameHeader::decode(&self.stored[other][i].header)
                        .is_ok_and(|h| h.frame_index == 0 && h.kind == FrameKind::Data && h.seq >= lane_next)
                })
                .collect();
            if candidates.is_empty() {
                return;
            }
            let (other, i) = candidates[self.rng.index(candidates.len())];
            let mut frame = self.stored[other][i].clone();
            let mut h = FrameHeader::decode(&frame.header).expect("checked above");
            h.lane = lane as u16;
            h.encode(&mut frame.header);
            self.note(format!("inject group {} of lane {other} again on lane {lane}", h.seq));
            frame
        } else {
            // Beyond the window: it slides as other lanes' groups arrive before this frame is
            // read, but not by several times its length while this lane is live and the primary
            // has a bounded number of groups outstanding. Without a window, a long way past
            // this lane's next number.
            let lo = match self.mirror.seq_window() {
                Some((base, last)) => last.saturating_add(1 + 8 * (last + 1 - base)),
                None => lane_next.saturating_add(1 << 32),
            }
            .min(u64::MAX - 1);
            let far = match self.rng.below(3) {
                0 => u64::MAX - 1,
                1 => lo,
                _ => lo + self.rng.below(u64::MAX - lo),
            };
            let template = (0..c.joined)
                .flat_map(|l| self.stored[l].iter())
                .find(|f| FrameHeader::decode(&f.header).is_ok_and(|h| h.kind == FrameKind::Data));
            match template {
                Some(t) if self.rng.chance_pct(50) => {
                    // A Data frame, its body intact, numbered `far`.
                    let mut frame = t.clone();
                    let mut h = FrameHeader::decode(&frame.header).expect("checked above");
                    (h.lane, h.seq, h.frame_index) = (lane as u16, far, 0);
                    h.encode(&mut frame.header);
                    self.note(format!("inject a Data frame of group {far} on lane {lane}"));
                    frame
                }
                _ => {
                    // A Skip voiding numbers up to `far`: from there, or from this lane's next
                    // number (its first numbers may even lie within the window).
                    let first = if self.rng.chance_pct(50) { far } else { lane_next.min(far) };
                    let mut h = FrameHeader::new(FrameKind::Skip);
                    (h.lane, h.session, h.epoch) =
                        (lane as u16, c.session, self.nodes[c.node].primary.epoch());
                    (h.offset, h.seq) = (first, far);
                    self.note(format!("inject a Skip of {first}..={far} on lane {lane}"));
                    WireFrame { header: h.to_bytes(), body: Vec::new(), injected: None }
                }
            }
        };
        let frame = WireFrame { injected: Some(kind), ..frame };
        self.conns[ci].links[lane].to_mirror.push_front(frame);
        self.report.violations_injected += 1;
        match kind {
            Injection::SeqResend => self.report.seq_resends_injected += 1,
            _ => self.report.seq_ahead_injected += 1,
        }
    }

    /// A frame of an earlier session (perhaps of a primary since fenced) turns up in the current
    /// one.
    fn inject_stale_frame(&mut self, ci: usize) {
        if self.stale.is_empty() {
            return;
        }
        let mut frame = self.stale[self.rng.index(self.stale.len())].clone();
        frame.injected = Some(Injection::Stale);
        // It arrives on the lane it was sent on, as a late segment of an old connection would.
        let joined = self.conns[ci].joined;
        let lane = FrameHeader::decode(&frame.header).map(|h| usize::from(h.lane) % joined).unwrap_or(0);
        let stream = &mut self.conns[ci].links[lane].to_mirror;
        let at = self.rng.index(stream.len() + 1);
        stream.insert(at, frame);
        self.report.violations_injected += 1;
        self.report.stale_injected += 1;
        self.note(format!("inject a stale frame on lane {lane}"));
    }

    /// A frame this session already stored on a lane arrives there again, next: whatever it was,
    /// the receiver has moved past it.
    fn inject_replayed_frame(&mut self, ci: usize) {
        let lane = self.rng.index(self.conns[ci].joined);
        if self.stored[lane].is_empty() {
            return;
        }
        let mut frame = self.stored[lane][self.rng.index(self.stored[lane].len())].clone();
        frame.injected = Some(Injection::Replay);
        self.conns[ci].links[lane].to_mirror.push_front(frame);
        self.report.violations_injected += 1;
        self.report.replays_injected += 1;
        self.note(format!("replay a stored frame on lane {lane}"));
    }

    /// The end of a run: the network heals and only the newest primary keeps running; everything
    /// in flight is delivered, a few more groups must get through without a fault, then a seal, a
    /// stop (a process crash or a power cut) and a recovery, checking the invariants at each
    /// point.
    fn finish(&mut self) -> Check<()> {
        self.note("final drain: the network heals, old primaries stop".into());
        self.mirror.durable.data.disarm();
        self.restart_if_failed()?;
        // A promotion whose incarnation has not taken its copy while a copy into the mirror is
        // unfinished is refused now, before the old primaries stop: the incarnation before it
        // finishes the copy, started again on its copy if it had stopped meanwhile.
        while !self.nodes[self.nodes.len() - 1].has_copy && !self.mirror.reports_consistent() {
            self.withdraw_promotion(self.nodes.len() - 1);
        }
        let newest = self.nodes.len() - 1;
        if !self.nodes[newest].alive {
            self.note(format!("primary {newest} is started again on its copy"));
            self.nodes[newest].alive = true;
        }
        for node in 0..self.nodes.len() {
            self.nodes[node].cuts.fill(Cut::default());
            if node != newest && self.nodes[node].alive {
                self.stop(node, true);
            }
        }
        self.drain()?;
        if self.nodes[newest].primary.session().is_none() {
            self.connect(newest)?;
            if self.nodes[newest].primary.session().is_none() && self.discard_due {
                // The refused session's close reaches the mirror; then the operator discards.
                self.drain()?;
                self.resolve_split_brain();
                self.connect(newest)?;
            }
            if self.nodes[newest].primary.session().is_none() {
                return Err("the newest primary could not open a session on a healed network".into());
            }
        }
        for _ in 0..3 {
            self.issue_on(newest)?;
        }
        self.drain()?;
        // A copy the session began with runs to its end (one piece or group at a time).
        let mut rounds = 0;
        while self.nodes[newest].primary.copying() {
            rounds += 1;
            if rounds > 4 * (self.cfg.region_size / u64::from(self.cfg.max_frame) + 16) {
                return Err("the newest primary's copy did not finish in a fault-free drain".into());
            }
            self.issue_on(newest)?;
            self.drain()?;
        }
        let Some(session) = self.nodes[newest].primary.session() else {
            return Err("the session ended during a fault-free drain".into());
        };
        if self.mirror.session() != Some(session) {
            return Err(format!("the mirror is not in the newest primary's session {session:#x}"));
        }
        if self.nodes[newest].primary.outstanding() != 0 {
            return Err(format!(
                "{} groups never acknowledged in a fault-free drain",
                self.nodes[newest].primary.outstanding()
            ));
        }
        self.primary_end(newest, "final seal".into(), true);
        self.mirror_end("final seal".into())?;
        // A last stop, perhaps by a power cut: every acknowledged group must survive it.
        let power_cut = self.rng.chance_pct(self.cfg.faults.power_cut_pct);
        self.crash(CrashPoint::Clean, power_cut)?;
        if self.mirror.waiting() != 0 {
            return Err("groups left waiting after the final recovery".into());
        }
        self.check_converged(newest)
    }

    /// Whenever the mirror's session is open at both ends, nothing is on its way to the mirror,
    /// every group the mirror has is applied, and the copy the session began with (if any) has
    /// completed, the mirror holds that session's primary's copy (invariant 6).
    fn check_converged_if_quiet(&mut self) -> Check<()> {
        let Some(session) = self.mirror.session() else { return Ok(()) };
        let Some(c) = self.conn(session).map(|ci| &self.conns[ci]) else { return Ok(()) };
        let primary = &self.nodes[c.node].primary;
        let quiet = c.primary_open
            && c.mirror_open
            && c.joined == c.links.len()
            && c.links.iter().all(|l| l.to_mirror.is_empty() && !l.broken_to_mirror)
            && primary.session() == Some(session)
            && !primary.copying()
            && !self.model.copying()
            && self.mirror.waiting() == 0
            && self.mirror.held() == 0;
        if quiet {
            self.check_converged(c.node)?;
            self.report.convergence_checks += 1;
        }
        Ok(())
    }

    /// The mirror holds primary `node`'s copy byte for byte: what its sessions did not get
    /// acknowledged (groups that failed, whose bytes stay in its copy) and what it stored
    /// without a session, a later session sent again, as a catch-up from its metadata log or
    /// as a copy (invariant 6).
    fn check_converged(&self, node: usize) -> Check<()> {
        let (data, region) = (self.mirror.durable.data.area.bytes(), self.nodes[node].primary.region());
        let differ = |(a, b): (&u8, &u8)| a != b;
        let Some(first) = data.iter().zip(region).position(differ) else {
            return Ok(());
        };
        let last = data.iter().zip(region).rposition(differ).unwrap_or(first);
        Err(format!(
            "once caught up and quiet, the mirror's data area differs from primary {node}'s copy at \
             offsets {first}..={last}: bytes of a group it did not acknowledge, or stored while it \
             had no session, were never sent again"
        ))
    }

    /// The mirror's engine fail-stopped on a media error: the operator restarts the mirror, whose
    /// recovery must lose nothing acknowledged. Returns whether it did.
    pub(super) fn restart_if_failed(&mut self) -> Check<bool> {
        if !self.mirror.failed() {
            return Ok(false);
        }
        self.report.fail_stops += 1;
        self.note("the data area failed: the mirror fail-stopped, and is restarted".into());
        self.crash(CrashPoint::Clean, false)?;
        Ok(true)
    }

    /// Runs the network and the checkpointer, without new faults, until nothing is in flight and
    /// every session is either open at both ends or closed at both (an end left alone notices by
    /// the close or by its timeout).
    fn drain(&mut self) -> Check<()> {
        let mut quiet_rounds = 0;
        for _ in 0..DRAIN_ROUNDS {
            self.now += 1;
            let applied_before = self.model.counts().3;
            let ends_before = (self.conns.len(), self.report.timeouts);
            self.tick_network()?;
            let mut progress = (self.conns.len(), self.report.timeouts) != ends_before;
            // Backups with groups still to acknowledge will: slow ones are not stuck.
            progress |= self.tick_backups()? || self.mirror.backups.behind();
            for lane in 0..self.cfg.lanes as usize {
                while self.deliver_frame(lane)? {
                    progress = true;
                }
            }
            let open: Vec<u64> = self.conns.iter().filter(|c| c.primary_open).map(|c| c.session).collect();
            for session in open {
                for lane in 0..self.cfg.lanes as usize {
                    while self.deliver_ack(session, lane)? {
                        progress = true;
                    }
                }
            }
            self.mirror.checkpoint(self.now, true, &mut self.model)?;
            progress |= self.restart_if_failed()?;
            // Applying (here, or when a full log triggered it during delivery) frees space.
            progress |= self.model.counts().3 != applied_before;
            self.mirror.check_consistent()?;
            if self.conns.iter().all(Conn::is_settled) && self.mirror.held() == 0 {
                return Ok(());
            }
            quiet_rounds = if progress { 0 } else { quiet_rounds + 1 };
            // Long enough for any end left alone to time out.
            if quiet_rounds > 2 * self.cfg.dead_ticks + 2 {
                let queued: Vec<usize> = self
                    .mirror_conn()
                    .map(|ci| self.conns[ci].links.iter().map(|l| l.to_mirror.len()).collect())
                    .unwrap_or_default();
                return Err(format!(
                    "stuck: frames queued per lane {queued:?}, lanes blocked {}, {} groups \
                     waiting in the checkpointer, none applicable, {} acknowledgements held by \
                     the ack gate",
                    self.mirror.any_blocked(),
                    self.mirror.waiting(),
                    self.mirror.held()
                ));
            }
        }
        Err("drain did not finish".into())
    }
}

/// Invariant 4 at the mirror: having announced epoch `fence`, it stores a frame of epoch `stored`
/// and sends `ack`; neither may be of a lower epoch.
fn check_fencing(fence: u64, lane: usize, stored: u64, ack: Option<&[u8; FRAME_HEADER_SIZE]>) -> Check<()> {
    if stored < fence {
        return Err(format!(
            "fencing broken: the mirror, having announced epoch {fence}, stored a frame of epoch {stored} \
             on lane {lane}"
        ));
    }
    if let Some(acked) = ack.map(epoch_of).transpose()? {
        if acked < fence {
            return Err(format!(
                "fencing broken: the mirror, having announced epoch {fence}, acknowledged a group in \
                 epoch {acked} on lane {lane}"
            ));
        }
    }
    Ok(())
}

fn epoch_of(header: &[u8; FRAME_HEADER_SIZE]) -> Check<u64> {
    FrameHeader::decode(header)
        .map(|h| h.epoch)
        .map_err(|e| format!("the mirror stored or sent a header that does not decode: {e}"))
}

/// Re-encodes `header` with one field made wrong in a way no receiver state accepts.
fn mutate(header: &mut [u8; FRAME_HEADER_SIZE], m: FieldMutation, cfg: &SimConfig) {
    let mut h = FrameHeader::decode(header).expect("frames the primary built decode");
    match m {
        FieldMutation::Kind => h.kind = FrameKind::Ack,
        FieldMutation::Flags => h.flags |= 0x80,
        FieldMutation::Lane => h.lane ^= 1,
        FieldMutation::Epoch => h.epoch += 1,
        FieldMutation::EpochBelow => h.epoch -= 1,
        FieldMutation::Session => h.session ^= 1 << 63,
        FieldMutation::BodyLenOverMax => h.body_len = cfg.max_frame + 1,
        FieldMutation::OffsetPastRegion => h.offset = cfg.region_size,
        FieldMutation::OffsetOverflow => h.offset = u64::MAX - 2,
        FieldMutation::SeqZero => h.seq = 0,
        FieldMutation::FrameIndexSkip => h.frame_index += 1,
    }
    h.encode(header);
}
