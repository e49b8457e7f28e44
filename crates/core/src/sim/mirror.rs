//! The mirror: per lane a log area run by [`MirrorLane`] whose records the node's record rules
//! ([`RecordRules`]: the executor of a record's storage steps, and the steps its group needs
//! before the acknowledgement) store, a [`Checkpointer`] and the node's
//! checkpoint engine ([`CheckpointEngine`]) whose commands the node's executor
//! ([`crate::mirror::execute`]) runs against the simulated media, the node's restart recovery
//! ([`Restart`], run the same way), and the node's session slot ([`SessionSlot`]), which
//! admits, joins, replaces, ends and seals sessions, adopts the epoch of the primaries it
//! welcomes and keeps the books of their copies, its commands run here as the node runs them
//! (a copy's against the data area's header words: the inconsistent mark with the copy's last
//! group, and the generations); each acknowledgement passes the node's ack gate ([`AckGate`])
//! against the backups' model ([`Backups`]). Split by what a process crash keeps ([`Durable`]: its media, see
//! [`super::media`]) and what it loses ([`Volatile`]), so a process crash is simply dropping the
//! latter, and a power cut also drops what the media did not persist.

use super::backup::Backups;
use super::media::{DataFault, SimData, SimLog, Torn, Word};
use super::model::{GroupId, Model, Writes};
use super::net::WireFrame;
use super::rng::Rng;
use super::{Check, Sabotage, SimConfig, SimReport};
use crate::checkpoint::{CheckpointPolicy, Checkpointer, GroupRef};
use crate::control::{lane_step, LaneStep};
use crate::encode::{ack_header, copy_retry_header, SessionTag};
use crate::handshake::Refusal;
use crate::handshake::{Identity, MAX_LANES};
use crate::lane::{Completed, MirrorLane, Slot};
use crate::log_space::LogSpace;
use crate::mirror::ack::AckFault;
use crate::mirror::record::RecordFault;
use crate::mirror::session::SessionFault;
use crate::mirror::{copy_complete, copy_verdict, generation_after, land, CopyVerdict};
use crate::mirror::{
    execute, persist_positions, AckDecision, AckGate, AckView, Admission, Body, CheckpointEngine, Command,
    EndReason, GroupStep, Hold, NoAck, NodeState, RecordRules, Restart, SessionCommand, SessionSlot,
    StoreError,
};
use crate::receive::Violation;
use crate::recovery::{for_each_write, recover, LaneLog, Recovered};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{Hello, Welcome};
use mojim_format::log::{pad_header, record_at};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::{LogMedia, Media};
use std::io::Read;

/// Complete groups one lane's queue is sized for.
const QUEUE_CAPACITY: usize = 64;
/// The region every node of the simulated cluster serves.
pub(super) const REGION_UUID: [u8; 16] = *b"mojim-sim-region";
/// The generation the first primary and the mirror share at the start (both zero regions, as
/// if replicated from the start).
pub(super) const FIRST_GENERATION: u64 = 0x6d6f_6a69_6d00_0001;

/// What survives a process crash: the logs (record areas and tails), the data area and the
/// sequence number of the last group applied to it, and the epoch. A power cut keeps of these
/// only what was persisted, and a random part of the rest.
pub(super) struct Durable {
    pub logs: Vec<SimLog>,
    pub data: SimData,
    /// The highest epoch of a primary this mirror welcomed (persisted before the Welcome).
    pub epoch: Word,
    /// The data area's generation and the one before it (FORMAT.md, the region header).
    pub generation: Word,
    pub prev_generation: Word,
    /// Its `INCONSISTENT` flag (1: a copy into it is unfinished) and the copy's last group
    /// (`copy_until`, 0: not known yet), stored together.
    pub inconsistent: Word,
    pub copy_until: Word,
}

impl Durable {
    /// The power fails: what was not persisted may be lost. Returns the cache lines and words
    /// whose last writes were.
    fn power_cut(&mut self, rng: &mut Rng) -> u64 {
        let mut lost = 0;
        for log in &mut self.logs {
            lost += log.area.power_cut(rng);
            lost += u64::from(log.tail.power_cut(rng));
        }
        lost += self.data.area.power_cut(rng);
        for w in [
            &mut self.data.applied_seq,
            &mut self.epoch,
            &mut self.generation,
            &mut self.prev_generation,
            &mut self.inconsistent,
            &mut self.copy_until,
        ] {
            lost += u64::from(w.power_cut(rng));
        }
        lost
    }
}

/// What a crash loses.
struct Volatile {
    lanes: Vec<MirrorLane>,
    ckpt: Checkpointer,
    /// The node's checkpoint engine: which groups are applied next, and the order of every
    /// storage step after.
    engine: CheckpointEngine,
    /// The node's session slot: the current session (its lanes, first sequence number and the
    /// numbers its groups took on every lane) and the epoch, rebuilt from the durable epoch on
    /// restart.
    slot: SessionSlot,
    /// Highest sequence number this mirror has seen in a log or a session.
    highest_seq: u64,
    /// Lanes whose next frame waits for log space.
    blocked: Vec<bool>,
    last_activity: u64,
    /// The engine fail-stopped: nothing more is applied until the mirror restarts.
    failed: bool,
    /// Per lane, the acknowledgement the ack gate holds back, if any: the lane reads nothing
    /// more until it is sent (the node's lane thread waits in the gate).
    held: Vec<Option<Held>>,
}

/// An acknowledgement the ack gate holds back.
struct Held {
    gate: AckGate,
    ack: [u8; FRAME_HEADER_SIZE],
}

/// Where a crash interrupts the mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CrashPoint {
    /// During normal running: a record may be half received, a group half applied.
    Running,
    /// While sealing an ended session.
    Sealing,
    /// A clean stop, nothing in progress.
    Clean,
}

/// What the mirror does with a lane's authenticated handshake, as the node's session slot
/// decides.
pub(super) enum Admit {
    /// The lane joined its session: the Welcome to send.
    Joined(Welcome),
    /// Another session is current and the slot ended it: the mirror's end of it is to be closed
    /// and the session sealed ([`Mirror::end_session`]) before the handshake is asked again.
    Replace,
    /// Refused, with the words the node sends.
    Refused(Refusal),
}

/// What became of a delivered frame.
pub(super) enum Delivered {
    /// The log has no room; the frame stays at the front of its stream.
    Waiting,
    /// The record is in the log; `ack` is to be sent back if the frame completed a group.
    Stored { ack: Option<[u8; FRAME_HEADER_SIZE]> },
    /// The frame broke a rule: the lane closes.
    Rejected(Violation),
    /// A Copy frame whose body failed its check: it did not land, and the CopyRetry to send
    /// back asks for its bytes again.
    AskedAgain([u8; FRAME_HEADER_SIZE]),
    /// This node could not store what the frame carried (the data area failed a Copy frame's
    /// landing): the lane ends, telling the primary why, as the node's does.
    StorageFailed(String),
}

/// Everything a refused frame must leave unchanged.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Snapshot {
    data_crc: u32,
    applied_seq: u64,
    tails: Vec<u64>,
    space: LogSpace,
    waiting: usize,
    committed_log_crc: u32,
}

pub(super) struct Mirror {
    cfg: SimConfig,
    pub durable: Durable,
    vol: Volatile,
    /// The backups it feeds: other machines, which its crashes leave as they are.
    pub backups: Backups,
    /// Acknowledgements the ack gate held back, and of them those at the chain's gate.
    pub acks_held: (u64, u64),
    /// Copies begun (CopyBegin opened one).
    pub copies_begun: u64,
    /// The node's rules for storing a record and completing its group.
    rules: RecordRules,
}

impl Mirror {
    pub fn new(cfg: &SimConfig) -> Mirror {
        let n = cfg.lanes as usize;
        let fault = match cfg.sabotage {
            Sabotage::TailBeforeData => DataFault::LatePersist,
            Sabotage::SkippedPersist => DataFault::SkippedPersist,
            _ => DataFault::None,
        };
        let durable = Durable {
            logs: vec![SimLog::new(cfg.log_capacity as usize); n],
            data: SimData::new(cfg.region_size as usize, fault),
            epoch: Word::new(1),
            generation: Word::new(FIRST_GENERATION),
            prev_generation: Word::new(0),
            inconsistent: Word::new(0),
            copy_until: Word::new(0),
        };
        let ckpt = Checkpointer::new(n, 0, QUEUE_CAPACITY);
        let vol = Volatile::fresh(cfg, &durable, &vec![0; n], 0, new_engine(cfg), ckpt);
        Mirror {
            cfg: cfg.clone(),
            durable,
            vol,
            backups: Backups::new(cfg.backups, cfg.seed),
            acks_held: (0, 0),
            copies_begun: 0,
            rules: new_rules(cfg),
        }
    }

    fn policy(&self) -> CheckpointPolicy {
        CheckpointPolicy { thresh: self.cfg.checkpoint_thresh }
    }

    /// What this mirror requires of a primary's handshake.
    pub fn identity(&self) -> Identity {
        let epoch = match self.cfg.sabotage {
            // Broken on purpose: no epoch is too old.
            Sabotage::AcceptStaleEpoch => 0,
            _ => self.vol.slot.epoch(),
        };
        Identity { region_uuid: REGION_UUID, region_size: self.cfg.region_size, epoch, max_lanes: MAX_LANES }
    }

    /// The current session's id, if one is open.
    pub fn session(&self) -> Option<u64> {
        self.vol.slot.current().map(|c| c.id)
    }

    /// The current session's tag for `lane`, if one is open.
    fn tag(&self, lane: usize) -> Option<SessionTag> {
        self.vol.slot.current().map(|c| SessionTag { session: c.id, epoch: c.epoch, lane: lane as u16 })
    }

    /// A lane's handshake passed (`hello` is authenticated): the node's session slot decides
    /// whether it joins its session, begins it (adopting, and persisting before the Welcome goes
    /// out, a higher epoch), must wait for the current one to end, or is refused; its commands
    /// run here.
    pub fn admit(&mut self, hello: &Hello) -> Check<Admit> {
        let node = NodeState {
            shutting_down: false,
            data_failed: self.vol.failed.then_some("failed"),
            promoted: false,
        };
        match self.vol.slot.on_hello(hello, &node) {
            Admission::Refuse(why) => return Ok(Admit::Refused(why.refusal())),
            Admission::WaitForSeal(commands) => {
                if commands.iter().any(|c| !matches!(c, SessionCommand::EndSession(EndReason::Replaced))) {
                    return Err(format!("a replacing handshake emitted {commands:?}"));
                }
                return Ok(Admit::Replace);
            }
            Admission::Begin { persist_epoch } => {
                if let Some(epoch) = persist_epoch {
                    self.durable.epoch.store(epoch);
                }
                self.begin_session(hello)?;
            }
            Admission::Join => {}
        }
        let commands = match self.vol.slot.join_lane(hello) {
            Ok(commands) => commands,
            Err(why) => return Ok(Admit::Refused(why.refusal())),
        };
        let consistent = self.reports_consistent();
        let (generation, prev_generation) = self.generations();
        let cur = self.vol.slot.current().expect("a lane joined");
        for cmd in commands {
            match cmd {
                SessionCommand::BeginLane(tag) => self.vol.lanes[tag.lane as usize].begin(
                    tag,
                    self.cfg.region_size,
                    cur.max_frame,
                    cur.next_seq,
                ),
                other => return Err(format!("joining lane {} emitted {other:?}", hello.lane)),
            }
        }
        Ok(Admit::Joined(Welcome {
            next_seq: cur.next_seq,
            log_capacity: self.cfg.log_capacity,
            max_frame: cur.max_frame,
            epoch: cur.epoch,
            generation,
            prev_generation,
            inconsistent: !consistent,
        }))
    }

    /// Begins `hello`'s session, as the slot admitted it: the primary resumes at the returned
    /// sequence number, right after everything this mirror has applied (as the daemon does,
    /// through `Checkpointer::resume`).
    fn begin_session(&mut self, hello: &Hello) -> Check<u64> {
        let v = &mut self.vol;
        if v.ckpt.waiting() != 0 {
            return Err(format!(
                "session {:#x} begun while {} groups of an earlier one wait to be applied",
                hello.session,
                v.ckpt.waiting()
            ));
        }
        let next_seq = if self.cfg.sabotage == Sabotage::GapAfterRestart {
            // The bug this sabotage stands for: resuming past numbers the checkpointer still
            // waits for.
            v.ckpt.applied_seq().max(v.highest_seq) + 1
        } else {
            v.ckpt.resume()
        };
        v.slot.begin(hello, next_seq, self.cfg.max_frame, (0..hello.lanes).map(|_| self.cfg.log_capacity));
        v.blocked.fill(false);
        Ok(next_seq)
    }

    /// The session ended (a lane disconnected or misbehaved): drop open groups, then apply every
    /// complete group, gaps or not, and move the watermark past everything seen.
    /// Every lane of the session leaves the node's session slot, and the last one out seals it.
    pub fn end_session(&mut self, why: &str, model: &mut Model, report: &mut SimReport) -> Check<()> {
        let cur = self.vol.slot.current().ok_or("the mirror ended a session it does not have")?;
        let (session, epoch, lanes) = (cur.id, cur.epoch, cur.lanes);
        // A lane waiting in the ack gate finds its connection gone: it acknowledges nothing.
        for lane in 0..self.vol.held.len() {
            if let Some(mut h) = self.vol.held[lane].take() {
                let view = AckView { lane_alive: false, ..self.ack_view() };
                let decision = h.gate.decide(&view);
                if decision != AckDecision::Refuse(NoAck::LaneGone) {
                    return Err(format!(
                        "lane {lane}'s connection is gone, and its ack gate decided {decision:?}"
                    ));
                }
            }
        }
        let mut commands = self.vol.slot.end(EndReason::LaneLeft(why.to_string()));
        for lane in 0..lanes {
            commands.extend(self.vol.slot.leave(SessionTag { session, epoch, lane }, why));
        }
        if commands.last() != Some(&SessionCommand::Seal { session, lanes }) {
            return Err(format!(
                "every lane of session {session:#x} left, and the slot emitted {commands:?}"
            ));
        }
        self.seal(model, report)?;
        self.vol.slot.sealed(session);
        Ok(())
    }

    /// The seal: drop open groups, then apply every complete group, gaps or not, and move the
    /// watermark past everything seen.
    fn seal(&mut self, model: &mut Model, report: &mut SimReport) -> Check<()> {
        for lane in &mut self.vol.lanes {
            if let Some(seq) = lane.end_session() {
                self.vol.highest_seq = self.vol.highest_seq.max(seq);
                report.groups_dropped += 1;
            }
        }
        while self.plan(true) > 0 {
            self.apply(model, None)?;
        }
        self.vol.blocked.fill(false);
        self.check_consistent()
    }

    /// Receives one frame on `lane` as the node's lane does: check and place it, then carry out
    /// a control frame or store the record and complete its group by the node's rules.
    pub fn deliver(
        &mut self,
        lane: usize,
        frame: &WireFrame,
        now: u64,
        model: &mut Model,
    ) -> Check<Delivered> {
        if self.vol.held[lane].is_some() {
            return Err(format!("lane {lane} read a frame while its acknowledgement waits in the ack gate"));
        }
        let tag = self.tag(lane).ok_or("frame delivered to the mirror outside a session")?;
        let v = &mut self.vol;
        let header = match self.cfg.sabotage {
            Sabotage::AcceptStaleEpoch => with_epoch_raised(&frame.header, tag.epoch),
            _ => frame.header,
        };
        let slot = match v.lanes[lane].on_header(&header) {
            Err(violation) => return Ok(Delivered::Rejected(violation)),
            Ok(None) => {
                v.blocked[lane] = true;
                return Ok(Delivered::Waiting);
            }
            Ok(Some(slot)) => slot,
        };
        v.blocked[lane] = false;
        v.last_activity = now;
        // A group's numbers are taken for the whole session (every lane) at its first frame,
        // before anything of it touches the log, as the daemon does.
        if let Some((first, last)) = slot.accepted.begins_group() {
            if let Err(violation) = v.slot.take_seqs(tag, first, last) {
                return Ok(Delivered::Rejected(violation));
            }
        }
        // Which frames a lane takes when is the node's rule, against the session's copy as the
        // node's session slot keeps it; the copy's bookkeeping is the slot's too, its commands
        // run here as the node's `session.rs` runs them.
        let h = slot.accepted.header;
        match lane_step(h.kind, || v.slot.copy_phase(tag.session)) {
            Err(violation) => return Ok(Delivered::Rejected(violation)),
            Ok(LaneStep::Record) => {}
            Ok(LaneStep::AnswerHeartbeat) => return Ok(Delivered::Stored { ack: None }),
            Ok(LaneStep::BeginCopy) => {
                let commands = v.slot.copy_begin(tag.session, h.seq);
                self.run_session(commands, model)?;
                return Ok(Delivered::Stored { ack: None });
            }
            Ok(LaneStep::EndCopy) => {
                let commands = v.slot.copy_end(tag.session, tag.lane, h.offset, h.seq);
                if !commands.is_empty() {
                    self.run_session(commands, model)?;
                    let commands = self.vol.slot.generation_adopted(tag.session);
                    self.run_session(commands, model)?;
                }
                return Ok(Delivered::Stored { ack: None });
            }
            Ok(LaneStep::LandCopy) => {
                // The node's verdict and landing (`mirror::landing`), against the simulated
                // data area and its faults.
                let len = h.body_len as u64;
                match copy_verdict(&h, &frame.body) {
                    Err(violation) => return Ok(Delivered::Rejected(violation)),
                    Ok(CopyVerdict::AskAgain) => {
                        // Not landed: asked for again (CopyRetry), and the copy cannot end
                        // before a Copy frame covering it lands.
                        if let Err(violation) = v.slot.copy_rejected(tag.session, h.offset, len) {
                            return Ok(Delivered::Rejected(violation));
                        }
                        return Ok(Delivered::AskedAgain(copy_retry_header(tag, h.offset, len)));
                    }
                    Ok(CopyVerdict::Land) => {}
                }
                // Some of the bytes may be in the area even if landing fails.
                model.disturbed();
                if let Err(e) = land(&mut self.durable.data, h.offset, &frame.body) {
                    return Ok(Delivered::StorageFailed(format!("write copied bytes to the data area: {e}")));
                }
                v.slot.copy_landed(tag.session, h.offset, len);
                if self.reports_consistent() {
                    return Err(format!(
                        "a Copy frame of {len} bytes at {} landed in the data area on lane {lane}, \
                         and the area reads consistent (inconsistent flag {}, copy_until {}, applied \
                         {}): a half-copied area would be served or promoted",
                        h.offset,
                        self.durable.inconsistent.value(),
                        self.durable.copy_until.value(),
                        self.durable.data.applied_seq.value()
                    ));
                }
                return Ok(Delivered::Stored { ack: None });
            }
        }
        if slot.size > 0 {
            check_placement(lane, &slot, self.vol.lanes[lane].space())?;
        }
        // Stored by the node's executor, in the node's order (`mirror::record`). A body shorter
        // than its header says reads as zeros after its end: its check refuses it.
        let h = slot.accepted.header;
        let (len, got) = (h.body_len as usize, frame.body.len().min(h.body_len as usize));
        let mut body = Read::chain(&frame.body[..got], std::io::repeat(0).take((len - got) as u64));
        let log = &mut self.durable.logs[lane];
        match self.rules.store(log, &slot, Body::Receive(&mut body)) {
            Ok(()) => {}
            Err(StoreError::Peer(violation)) => return Ok(Delivered::Rejected(violation)),
            Err(StoreError::Receive(e) | StoreError::Storage(e)) => {
                return Err(format!("lane {lane} could not store a record (its body is all there): {e}"))
            }
        }
        if slot.size > 0 {
            // Paired check: the record reads back as the record just accepted.
            let mut stamped = h;
            stamped.log_pos = slot.placement.pos;
            match record_at(log.area.bytes(), slot.placement.pos, self.cfg.max_frame) {
                Some(rec) if rec.header == stamped && rec.end_pos() == slot.placement.pos + slot.size => {}
                other => {
                    return Err(format!(
                        "record written at {} on lane {lane} reads back as {other:?}",
                        slot.placement.pos
                    ))
                }
            }
        }
        let v = &mut self.vol;
        v.highest_seq = v.highest_seq.max(h.seq);
        let done = v.lanes[lane].commit(&slot);
        if let Some(Completed { group: g, .. }) = done {
            let whole = match h.kind {
                FrameKind::Skip => slot.size == 0,
                _ => {
                    g.seq == h.seq
                        && usize::from(g.lane) == lane
                        && g.end_pos == slot.placement.pos + slot.size
                }
            };
            if !whole {
                return Err(format!("commit of {h:?} returned a wrong group {g:?}"));
            }
            v.highest_seq = v.highest_seq.max(g.seq);
        }
        let mut ack = None;
        for step in self.rules.after(&h, done.as_ref()) {
            match step {
                GroupStep::PersistLog { from, to } => {
                    persist_positions(&mut self.durable.logs[lane], from, to)
                        .map_err(|e| format!("persist the log of lane {lane}: {e}"))?
                }
                GroupStep::SyncData => {
                    self.durable.data.sync().map_err(|e| format!("sync the data area: {e}"))?
                }
                GroupStep::Queue(g) => self.vol.ckpt.push(g),
                GroupStep::Ack(seq) => {
                    ack = self.gate(lane, self.new_gate(seq), ack_header(tag, seq), model, true)?;
                }
            }
        }
        Ok(Delivered::Stored { ack })
    }

    /// Runs the session slot's copy commands against the data area's header words, as the
    /// node's `session.rs` does: the inconsistent mark and the copy's last group stored
    /// together, the generation (with the one before it) stored together.
    fn run_session(&mut self, commands: Vec<SessionCommand>, model: &mut Model) -> Check<()> {
        for cmd in commands {
            let d = &mut self.durable;
            match cmd {
                SessionCommand::CopyStarted { .. } => {
                    self.copies_begun += 1;
                    // The area is in flux (and may take a new generation) until the copy
                    // completes, whether or not any byte lands.
                    model.disturbed();
                }
                SessionCommand::MarkInconsistent { copy_until } => {
                    d.inconsistent.store(1);
                    d.copy_until.store(copy_until);
                }
                SessionCommand::AdoptGeneration(generation) => {
                    let (old, prev) = (d.generation.value(), d.prev_generation.value());
                    if let Some((generation, prev)) = generation_after(old, prev, generation) {
                        d.generation.store(generation);
                        d.prev_generation.store(prev);
                    }
                }
                SessionCommand::CheckConsistent => {
                    self.reports_consistent();
                }
                other => return Err(format!("a copy frame emitted {other:?}")),
            }
        }
        model.check_generation(self.durable.generation.value())
    }

    /// Whether the data area holds a usable copy, by the node's rule ([`copy_complete`]); a
    /// marked area whose copy is complete is marked consistent again, as the node's
    /// `Store::consistent` does. What the Welcome reports, and what the coordinator asks before
    /// it promotes.
    pub fn reports_consistent(&mut self) -> bool {
        let d = &mut self.durable;
        let marked = d.inconsistent.value() != 0;
        let complete = copy_complete(marked, d.copy_until.value(), d.data.applied_seq.value());
        if marked && complete {
            d.inconsistent.store(0);
            d.copy_until.store(0);
        }
        complete
    }

    /// The data area's generation and the one before it.
    pub fn generations(&self) -> (u64, u64) {
        (self.durable.generation.value(), self.durable.prev_generation.value())
    }

    /// An operator discards this copy (`mojim discard`, between sessions): the data area is
    /// marked inconsistent, and the next session copies everything into it.
    pub fn discard(&mut self, model: &mut Model) {
        assert!(self.session().is_none(), "discard during a session");
        self.durable.inconsistent.store(1);
        self.durable.copy_until.store(0);
        model.disturbed();
    }

    /// The data area is wiped (replaced by a new one, between sessions): its bytes are lost,
    /// its generation is 0, and it is marked inconsistent; the logs and the applied number stay.
    pub fn wipe(&mut self, rng: &mut Rng, model: &mut Model) {
        assert!(self.session().is_none(), "wipe during a session");
        let area = &mut self.durable.data.area;
        let mut junk = vec![0u8; area.len()];
        if rng.chance_pct(50) {
            rng.fill(&mut junk);
        }
        area.write(0, &junk);
        area.persist(0, junk.len());
        for w in
            [&mut self.durable.generation, &mut self.durable.prev_generation, &mut self.durable.copy_until]
        {
            w.store(0);
        }
        self.durable.inconsistent.store(1);
        model.disturbed();
    }

    /// The node's ack gate for group `seq`, broken on purpose as the sabotage says.
    fn new_gate(&self, seq: u64) -> AckGate {
        let mut gate = AckGate::new(self.backups.rule(), seq);
        gate.inject(match self.cfg.sabotage {
            Sabotage::AckPastThreshold => AckFault::PastThreshold,
            Sabotage::ChainAckEarly => AckFault::ChainEarly,
            _ => AckFault::None,
        });
        gate
    }

    /// What the node's ack gate sees now.
    fn ack_view(&self) -> AckView {
        AckView {
            backups: self.backups.count(),
            queued_bytes: self.backups.queued_bytes(),
            waiting_bytes: self.vol.ckpt.ready_bytes(),
            all_acked_seq: self.backups.all_acked_seq(),
            data_failed: self.vol.failed,
            lane_alive: true,
            shutting_down: false,
        }
    }

    /// Asks `gate` whether `ack`, on `lane`, goes out now, and does what it says: applies
    /// inline, holds the acknowledgement (asked again by [`Mirror::release_acks`]), or drops it
    /// when the data area failed (the mirror is restarted). Checks, apart from the gate, that an
    /// acknowledgement it lets out keeps to the backups' rule. `fresh`: asked for the first time.
    fn gate(
        &mut self,
        lane: usize,
        mut gate: AckGate,
        ack: [u8; FRAME_HEADER_SIZE],
        model: &mut Model,
        fresh: bool,
    ) -> Check<Option<[u8; FRAME_HEADER_SIZE]>> {
        loop {
            match gate.decide(&self.ack_view()) {
                AckDecision::Ack => {
                    self.backups.check_ack(gate.seq(), self.vol.ckpt.ready_bytes())?;
                    return Ok(Some(ack));
                }
                AckDecision::ApplyInline(_) => {
                    while !self.vol.failed && self.plan(false) > 0 {
                        self.apply(model, None)?;
                    }
                }
                AckDecision::Wait(hold) => {
                    if fresh {
                        self.acks_held.0 += 1;
                        self.acks_held.1 += u64::from(matches!(hold, Hold::NotAtBackups { .. }));
                    }
                    self.vol.held[lane] = Some(Held { gate, ack });
                    return Ok(None);
                }
                AckDecision::Refuse(NoAck::DataFailed) => return Ok(None),
                AckDecision::Refuse(NoAck::LaneGone) => {
                    return Err(format!("lane {lane}'s ack gate found a live connection gone"))
                }
            }
        }
    }

    /// Asks the ack gate again for every acknowledgement it holds; returns those it lets out,
    /// by lane.
    pub fn release_acks(&mut self, model: &mut Model) -> Check<Vec<(usize, [u8; FRAME_HEADER_SIZE])>> {
        let mut out = Vec::new();
        for lane in 0..self.vol.held.len() {
            if let Some(Held { gate, ack }) = self.vol.held[lane].take() {
                if let Some(ack) = self.gate(lane, gate, ack, model, false)? {
                    out.push((lane, ack));
                }
            }
        }
        Ok(out)
    }

    /// Whether `lane`'s acknowledgement waits in the ack gate.
    pub fn holds(&self, lane: usize) -> bool {
        self.vol.held[lane].is_some()
    }

    /// Lanes whose acknowledgement waits in the ack gate.
    pub fn held(&self) -> usize {
        self.vol.held.iter().filter(|h| h.is_some()).count()
    }

    /// Applies every group that may be applied now, if the policy says it is time. Returns how
    /// many were applied.
    pub fn checkpoint(&mut self, now: u64, force_idle: bool, model: &mut Model) -> Check<usize> {
        let idle = force_idle || now.saturating_sub(self.vol.last_activity) >= self.cfg.idle_ticks;
        let log_full = self.vol.blocked.iter().any(|&b| b);
        if !self.policy().due(self.vol.ckpt.waiting(), idle, log_full) {
            return Ok(0);
        }
        let mut applied = 0;
        loop {
            let n = self.plan(false);
            if n == 0 {
                return Ok(applied);
            }
            self.apply(model, None)?;
            applied += n;
        }
    }

    /// Starts the engine on the next groups to apply, in order: the gap-free run while
    /// running, or the lowest waiting ones when sealing or recovering; one at a time, or in
    /// batches, as [`SimConfig::apply_batch`] says. Returns how many; apply them with
    /// [`Mirror::apply`].
    fn plan(&mut self, allow_gaps: bool) -> usize {
        let v = &mut self.vol;
        v.engine.plan(&mut v.ckpt, allow_gaps)
    }

    /// Reads group `g` back from its log, checking it against what the checkpointer claims.
    fn read_group(&self, g: &GroupRef) -> Check<(GroupId, Writes)> {
        let area = self.durable.logs[g.lane as usize].area.bytes();
        let first = record_at(area, g.start_pos, self.cfg.max_frame).ok_or_else(|| {
            format!("group {} on lane {} has no valid record at its start {}", g.seq, g.lane, g.start_pos)
        })?;
        if first.header.seq != g.seq {
            return Err(format!(
                "group {} on lane {} starts with a record of group {}",
                g.seq, g.lane, first.header.seq
            ));
        }
        let mut writes: Writes = Vec::new();
        if first.header.kind == FrameKind::Copied {
            // A copy group's bytes are in the data area already: the ranges its record lists.
            let body = &area[first.body_at..first.body_at + first.header.body_len as usize];
            let data = self.durable.data.area.bytes();
            for (offset, len) in mojim_format::copied::ranges(body) {
                writes.push((offset, data[offset as usize..(offset + len) as usize].to_vec()));
            }
        }
        for_each_write(area, g, self.cfg.max_frame, |offset, body| {
            writes.push((offset, body.to_vec()));
        });
        let bytes: u64 = writes.iter().map(|w| w.1.len() as u64).sum();
        if bytes != g.bytes {
            return Err(format!("group {} claims {} bytes, its records write {bytes}", g.seq, g.bytes));
        }
        Ok(((first.header.session, g.seq), writes))
    }

    /// Applies the batch [`Mirror::plan`] started and reclaims it at once, running the engine's
    /// commands through the node's executor against the simulated media: the data written, then
    /// persisted, the applied number recorded, the tails moved. With `crash`, the process dies
    /// before a random one of those commands, a write of group data perhaps half done; the
    /// caller then restarts it.
    fn apply(&mut self, model: &mut Model, crash: Option<&mut Rng>) -> Check<()> {
        // The model's own reading of the groups, to check each as it becomes durable.
        let mut groups = Vec::new();
        for g in self.vol.engine.planned() {
            groups.push(self.read_group(g)?);
        }
        let forward: Vec<(u64, u64)> = self.vol.engine.planned().iter().map(|g| (g.seq, g.bytes)).collect();
        let lanes =
            (0..self.cfg.lanes).filter(|&l| self.vol.engine.planned().iter().any(|g| g.lane == l)).count();
        // Writes, persists, the sync, the applied number and the tails.
        let commands = 2 * groups.len() + 2 + lanes;
        let mut crash = crash.map(|rng| (rng.index(commands), rng));
        let mut run = 0;
        for pass in 0..2 {
            if pass == 1 {
                let v = &mut self.vol;
                v.engine.applied(&mut v.ckpt);
                v.engine.reclaim(u64::MAX);
            }
            while let Some(cmd) = self.vol.engine.poll() {
                if let Command::FailStop(_) = cmd {
                    // Nothing more is applied, persisted or released; the world restarts it.
                    self.vol.failed = true;
                    continue;
                }
                if let Some((_, rng)) = crash.as_mut().filter(|(at, _)| *at == run) {
                    if let Command::WriteGroup(g) = cmd {
                        let left = rng.index(g.bytes as usize + 1);
                        let mut torn = Torn { data: &mut self.durable.data, left };
                        execute(&cmd, &mut torn, &mut self.durable.logs[..], self.cfg.max_frame)
                            .map_err(|e| format!("torn write of group {}: {e}", g.seq))?;
                    }
                    return Ok(());
                }
                run += 1;
                let result =
                    execute(&cmd, &mut self.durable.data, &mut self.durable.logs[..], self.cfg.max_frame);
                if result.is_err() {
                    self.vol.engine.done(result);
                    continue;
                }
                match cmd {
                    Command::SetAppliedSeq(_) => {
                        for (id, writes) in &groups {
                            model.applied(*id, writes)?;
                        }
                        // Applied: queued for the backups.
                        for &(seq, bytes) in &forward {
                            self.backups.applied(seq, bytes);
                        }
                    }
                    Command::ReleaseTail { lane, pos } => self.vol.lanes[lane as usize].release(pos),
                    _ => {}
                }
                self.vol.engine.done(result);
            }
        }
        if self.vol.failed {
            // No reader sees a failed data area (the node refuses reads): a restart recovers it.
            return Ok(());
        }
        if crash.is_some() {
            return Err(format!("the batch ended before its command {run} of {commands}"));
        }
        model.check_data(self.durable.data.area.bytes())?;
        model.check_generation(self.durable.generation.value())
    }

    /// The mirror crashes at `point`: the record being received, the group being applied, or
    /// the seal in progress may be left half done. A process crash keeps everything written; with
    /// `power_cut` the machine loses power, and what was not persisted may be lost too. Then it
    /// restarts and recovers from its logs.
    pub fn crash(
        &mut self,
        point: CrashPoint,
        power_cut: bool,
        fronts: &[(usize, WireFrame)],
        rng: &mut Rng,
        model: &mut Model,
        report: &mut SimReport,
    ) -> Check<()> {
        let faults = self.cfg.faults;
        match point {
            CrashPoint::Running => {
                if !fronts.is_empty() && rng.chance_pct(faults.torn_write_pct) {
                    let (lane, frame) = &fronts[rng.index(fronts.len())];
                    if self.session().is_some() {
                        // A record only: control frames (Copy among them) take no log room.
                        let record = self.vol.lanes[*lane].on_header(&frame.header);
                        if let Ok(Some(slot)) = record.as_ref().map(|s| s.filter(|s| s.size > 0)) {
                            check_placement(*lane, &slot, self.vol.lanes[*lane].space())?;
                            self.torn_write(*lane, &slot, frame, rng);
                            report.torn_writes += 1;
                        }
                    }
                }
                if rng.chance_pct(faults.torn_apply_pct) && self.plan(false) > 0 {
                    self.apply(model, Some(&mut *rng))?;
                    report.torn_applies += 1;
                }
            }
            CrashPoint::Sealing => {
                // The session ended and the seal got part of the way: open groups dropped, some
                // groups applied across gaps, the next one perhaps half applied.
                for lane in &mut self.vol.lanes {
                    lane.end_session();
                }
                for _ in 0..rng.index(self.vol.ckpt.waiting() + 1) {
                    if self.plan(true) == 0 {
                        break;
                    }
                    self.apply(model, None)?;
                }
                if rng.chance_pct(faults.torn_apply_pct) && self.plan(true) > 0 {
                    self.apply(model, Some(&mut *rng))?;
                    report.torn_applies += 1;
                }
            }
            CrashPoint::Clean => {}
        }
        if power_cut {
            self.power_cut(rng, report);
        }
        self.restart(point != CrashPoint::Clean, rng, model, report)
    }

    fn power_cut(&mut self, rng: &mut Rng, report: &mut SimReport) {
        report.power_cuts += 1;
        report.writes_lost += self.durable.power_cut(rng);
    }

    /// Writes part of a record: a random prefix in write order (pad, body, header), as a process
    /// killed in the middle leaves it (a power cut may then lose any of its cache lines).
    fn torn_write(&mut self, lane: usize, slot: &Slot, frame: &WireFrame, rng: &mut Rng) {
        let area = &mut self.durable.logs[lane].area;
        let cap = area.len() as u64;
        let mut bytes: Vec<(usize, u8)> = Vec::new();
        if let Some(pad) = slot.placement.pad_at {
            let at = (pad % cap) as usize;
            bytes.extend(pad_header(cap, pad).iter().enumerate().map(|(i, &b)| (at + i, b)));
        }
        let at = (slot.placement.pos % cap) as usize;
        let len = slot.accepted.header.body_len as usize;
        bytes.extend(frame.body.iter().take(len).enumerate().map(|(i, &b)| (at + FRAME_HEADER_SIZE + i, b)));
        let mut h = slot.accepted.header;
        h.log_pos = slot.placement.pos;
        bytes.extend(h.to_bytes().iter().enumerate().map(|(i, &b)| (at + i, b)));
        let keep = rng.index(bytes.len() + 1);
        for &(i, b) in &bytes[..keep] {
            area.write(i, &[b]);
        }
    }

    /// Restart: everything volatile is rebuilt from the durable state by the node's recovery
    /// ([`Restart`]: the recovered groups applied by the checkpoint engine, persisted, recorded,
    /// and the logs freed to their heads), run through the node's executor. With `faults`, the
    /// restart itself may crash before any of its commands (a write of group data perhaps half
    /// done), and starts over.
    fn restart(
        &mut self,
        faults: bool,
        rng: &mut Rng,
        model: &mut Model,
        report: &mut SimReport,
    ) -> Check<()> {
        let mut attempts = 0;
        'restart: loop {
            attempts += 1;
            self.durable.data.crashed();
            if self.cfg.sabotage == Sabotage::LogsLostOnRestart {
                // Broken on purpose, in the media: the logs' records do not survive a restart.
                for log in &mut self.durable.logs {
                    log.lose_records();
                }
            }
            let found = self.recover_logs(report)?;
            let n = self.cfg.lanes as usize;
            let tails: Vec<Option<u64>> = self.durable.logs.iter().map(|l| Some(l.tail.value())).collect();
            let ckpt = Checkpointer::new(n, self.durable.data.applied_seq.value(), QUEUE_CAPACITY);
            let mut restart = Restart::new(new_engine(&self.cfg), ckpt, &found, &tails, false);
            // A persist of each lane's records, writes and persists of each group, the sync, the
            // applied number, a tail per lane.
            let commands = 2 * found.groups.len() + 2 + 2 * n;
            let crash = (faults
                && attempts <= 3
                && !found.groups.is_empty()
                && rng.chance_pct(self.cfg.faults.recovery_crash_pct))
            .then(|| rng.index(commands));
            let mut run = 0;
            while let Some(cmd) = restart.poll() {
                if let Command::FailStop(f) = &cmd {
                    // No media error is armed while restarting (`SimData::crashed`).
                    return Err(format!("restart recovery fail-stopped: {f}"));
                }
                if crash == Some(run) {
                    if let Command::WriteGroup(g) = cmd {
                        let left = rng.index(g.bytes as usize + 1);
                        let mut torn = Torn { data: &mut self.durable.data, left };
                        execute(&cmd, &mut torn, &mut self.durable.logs[..], self.cfg.max_frame)
                            .map_err(|e| format!("torn write of recovered group {}: {e}", g.seq))?;
                    }
                    report.torn_applies += 1;
                    report.crashes += 1;
                    report.recovery_crashes += 1;
                    if rng.chance_pct(self.cfg.faults.power_cut_pct) {
                        self.power_cut(rng, report);
                    }
                    continue 'restart;
                }
                run += 1;
                let result =
                    execute(&cmd, &mut self.durable.data, &mut self.durable.logs[..], self.cfg.max_frame);
                if result.is_ok() && matches!(cmd, Command::SetAppliedSeq(_)) {
                    for g in restart.reclaiming() {
                        let (id, writes) = self.read_group(g)?;
                        model.applied(id, &writes)?;
                        // The node queues what recovery applied for its backups.
                        self.backups.applied(g.seq, g.bytes);
                    }
                }
                restart.done(result);
            }
            let (engine, ckpt) = restart.into_parts();
            self.vol = Volatile::fresh(&self.cfg, &self.durable, &found.heads, found.max_seq, engine, ckpt);
            model.check_data(self.durable.data.area.bytes())?;
            model.check_generation(self.durable.generation.value())?;
            return self.check_consistent();
        }
    }

    /// Scans the logs (the production scan, [`recover`]) and checks what it found: where each
    /// lane resumes, and the complete groups to apply, in sequence order.
    fn recover_logs(&self, report: &mut SimReport) -> Check<Recovered> {
        let n = self.cfg.lanes as usize;
        let d = &self.durable;
        let tails: Vec<u64> = d.logs.iter().map(|l| l.tail.value()).collect();
        let applied_seq = d.data.applied_seq.value();
        let logs: Vec<LaneLog<'_>> =
            d.logs.iter().map(|l| LaneLog { area: l.area.bytes(), tail: l.tail.value() }).collect();
        let found = recover(&logs, applied_seq, self.cfg.max_frame, self.cfg.region_size);
        report.groups_recovered += found.groups.len() as u64;
        report.groups_discarded += found.discarded.len() as u64;
        if found.heads.len() != n {
            return Err(format!("recovery returned {} heads for {n} lanes", found.heads.len()));
        }
        for (lane, (&head, &tail)) in found.heads.iter().zip(&tails).enumerate() {
            if head < tail || head - tail > self.cfg.log_capacity {
                return Err(format!("recovery put lane {lane}'s head at {head}, tail is {tail}"));
            }
        }
        if found.max_seq < applied_seq {
            return Err(format!("recovery's max_seq {} is below applied_seq {applied_seq}", found.max_seq));
        }
        let mut last = applied_seq;
        for g in &found.groups {
            if g.seq <= last {
                return Err(format!(
                    "recovery returned group {} after {last} (applied_seq {applied_seq})",
                    g.seq
                ));
            }
            last = g.seq;
        }
        Ok(found)
    }

    /// What a refused frame must not change.
    pub fn snapshot(&self, lane: usize) -> Snapshot {
        let space = *self.vol.lanes[lane].space();
        let area = self.durable.logs[lane].area.bytes();
        let cap = area.len() as u64;
        let (tail, used) = (space.tail() % cap, space.used());
        let first = used.min(cap - tail);
        let crc = crc32c(&area[tail as usize..(tail + first) as usize]);
        let crc = mojim_format::checksum::crc32c_append(crc, &area[..(used - first) as usize]);
        Snapshot {
            data_crc: crc32c(self.durable.data.area.bytes()),
            applied_seq: self.durable.data.applied_seq.value(),
            tails: self.durable.logs.iter().map(|l| l.tail.value()).collect(),
            space,
            waiting: self.vol.ckpt.waiting(),
            committed_log_crc: crc,
        }
    }

    /// Cheap cross-checks between the durable state and the volatile one.
    pub fn check_consistent(&self) -> Check<()> {
        for (lane, l) in self.vol.lanes.iter().enumerate() {
            if l.space().tail() != self.durable.logs[lane].tail() {
                return Err(format!(
                    "lane {lane}: log space tail {} but persisted tail {}",
                    l.space().tail(),
                    self.durable.logs[lane].tail()
                ));
            }
        }
        if self.vol.ckpt.applied_seq() < self.durable.data.applied_seq.value() {
            return Err(format!(
                "checkpointer applied_seq {} behind the persisted {}",
                self.vol.ckpt.applied_seq(),
                self.durable.data.applied_seq.value()
            ));
        }
        Ok(())
    }

    /// The lowest number `lane` accepts for a new group, by its own rules (a group is not open
    /// on it), if a session is open.
    pub fn lane_next_seq(&self, lane: usize) -> Option<u64> {
        let cur = self.vol.slot.current()?;
        Some(cur.next_seq.max(self.vol.lanes[lane].max_seq().saturating_add(1)))
    }

    /// The numbers the session's window admits now, if it has one: `(lowest not yet received,
    /// last admitted)`.
    pub fn seq_window(&self) -> Option<(u64, u64)> {
        let w = self.vol.slot.current()?.seqs();
        (self.cfg.sabotage != Sabotage::NoSeqWindow).then(|| (w.base(), w.last_admitted()))
    }

    /// Whether any lane waits for log space.
    pub fn any_blocked(&self) -> bool {
        self.vol.blocked.iter().any(|&b| b)
    }

    /// Whether the engine fail-stopped (a media error): the mirror must be restarted.
    pub fn failed(&self) -> bool {
        self.vol.failed
    }

    /// Complete groups waiting to be applied.
    pub fn waiting(&self) -> usize {
        self.vol.ckpt.waiting()
    }
}

/// The node's session slot at the durable epoch, broken on purpose as `cfg`'s sabotage says.
fn new_slot(cfg: &SimConfig, d: &Durable) -> SessionSlot {
    let mut slot = SessionSlot::new(d.epoch.value());
    slot.inject(match cfg.sabotage {
        Sabotage::AcceptStaleEpoch => SessionFault::AdmitStaleEpoch,
        Sabotage::EpochNotPersisted => SessionFault::EpochNotPersisted,
        Sabotage::SecondSession => SessionFault::SecondSession,
        Sabotage::CopyCompleteAtBegin => SessionFault::CopyCompleteAtBegin,
        Sabotage::NoSeqWindow => SessionFault::NoSeqWindow,
        _ => SessionFault::None,
    });
    slot
}

/// The node's checkpoint engine, applying and reclaiming [`SimConfig::apply_batch`] groups at a
/// time (0 is a batch of one).
/// The node's record rules, with the fault a sabotage stands for.
fn new_rules(cfg: &SimConfig) -> RecordRules {
    let mut rules = RecordRules::new();
    rules.inject(match cfg.sabotage {
        Sabotage::AckBeforeEnd => RecordFault::AckBeforeEnd,
        Sabotage::PersistGroupOnly => RecordFault::PersistGroupOnly,
        _ => RecordFault::None,
    });
    rules
}

fn new_engine(cfg: &SimConfig) -> CheckpointEngine {
    CheckpointEngine::new(cfg.lanes, cfg.apply_batch.max(1), cfg.apply_batch.max(1))
}

impl Volatile {
    /// The state of a mirror whose lanes resume at `heads`, run by `engine` and `ckpt`.
    fn fresh(
        cfg: &SimConfig,
        d: &Durable,
        heads: &[u64],
        highest_seq: u64,
        engine: CheckpointEngine,
        ckpt: Checkpointer,
    ) -> Volatile {
        let n = cfg.lanes as usize;
        Volatile {
            lanes: (0..n)
                .map(|l| MirrorLane::new(l as u16, cfg.log_capacity, d.logs[l].tail(), heads[l]))
                .collect(),
            ckpt,
            engine,
            slot: new_slot(cfg, d),
            highest_seq,
            blocked: vec![false; n],
            last_activity: 0,
            failed: false,
            held: (0..n).map(|_| None).collect(),
        }
    }
}

/// Broken on purpose ([`Sabotage::AcceptStaleEpoch`]): a frame of a lower epoch passes for one
/// of the session's.
fn with_epoch_raised(header: &[u8; FRAME_HEADER_SIZE], epoch: u64) -> [u8; FRAME_HEADER_SIZE] {
    match FrameHeader::decode(header) {
        Ok(mut h) if h.epoch < epoch => {
            h.epoch = epoch;
            h.to_bytes()
        }
        _ => *header,
    }
}

/// The core placed a record: check, independently of it, that the record (and its pad) lie in
/// free space of one lap, so that nothing unapplied is overwritten.
fn check_placement(lane: usize, slot: &Slot, space: &LogSpace) -> Check<()> {
    let cap = space.capacity();
    let (pos, size) = (slot.placement.pos, slot.size);
    let start = slot.placement.pad_at.unwrap_or(pos);
    let fits_lap = pos % cap + size <= cap;
    let pad_ok = slot.placement.pad_at.is_none_or(|p| p + (cap - p % cap) == pos);
    if start != space.head() || !fits_lap || !pad_ok || pos + size - space.tail() > cap {
        return Err(format!(
            "lane {lane}: record of {size} bytes placed at {pos} (pad {:?}) with head {} tail {} \
             capacity {cap}: it would overwrite unapplied records or wrap",
            slot.placement.pad_at,
            space.head(),
            space.tail()
        ));
    }
    Ok(())
}
