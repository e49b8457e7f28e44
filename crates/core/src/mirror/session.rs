//! The mirror's session slot as a state machine: which handshake opens, joins or replaces the
//! one session a mirror serves, the epoch it adopts, when a session ends and is sealed, and its
//! copies ([`super::copy`]).
//!
//! A session is all the lanes of one sender's handshake (a primary, or a mirror feeding this
//! node as its backup). A mirror serves one at a time. A handshake of a newer session ends the
//! current one; the new one begins once the old one's lanes have all left and it is sealed. When
//! any lane leaves, the whole session ends; the last lane out seals it. The mirror never serves a
//! session below its epoch, adopts a higher one persistently before it welcomes any lane of it,
//! and serves none at all once its copy is the primary's (promoted).
//!
//! Nothing here does I/O: each input returns a decision and the [`SessionCommand`]s it implies,
//! which the runtime (the node's `session.rs`, the simulator's mirror) executes in order.

use super::copy::CopyState;
use crate::control::CopyPhase;
use crate::encode::SessionTag;
use crate::handshake::Refusal;
use crate::receive::Violation;
use crate::seq_window::{window_for_logs, SeqWindow};
use mojim_format::handshake::{Hello, PeerRole, RefuseCode};
use std::fmt;

/// What the session slot asks its runtime to do, in the order emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionCommand {
    /// Close every joined lane's connection: the session ended. Each lane then leaves
    /// ([`SessionSlot::leave`]), and the last one out seals it.
    EndSession(EndReason),
    /// Start lane `.0` in its session: its log takes frames of this tag, from the session's
    /// first sequence number.
    BeginLane(SessionTag),
    /// The session's last lane left: drop every lane's open group, apply every complete group
    /// (across gaps, as recovery would), and free the lanes. Then [`SessionSlot::sealed`].
    Seal { session: u64, lanes: u16 },
    /// A copy of `total_bytes` began (for its progress).
    CopyStarted { total_bytes: u64 },
    /// Mark the data area inconsistent, persistently, recording `copy_until` as the copy's last
    /// group (0: not known yet). The area is consistent again once that group is applied.
    MarkInconsistent { copy_until: u64 },
    /// Make `.0` the data area's generation, persistently (see [`super::generation_after`]).
    AdoptGeneration(u64),
    /// See whether the data area is consistent now (a copy ended), after the slot is released.
    CheckConsistent,
}

/// Why a session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// A lane left: its connection ended, failed or broke the protocol (the lane's words).
    LaneLeft(String),
    /// A handshake of another session replaces it.
    Replaced,
    /// An operator fenced this node at `epoch`, above the session's.
    Fenced { epoch: u64 },
    /// The node stops, or an operator waits for the session to end.
    Stopping,
}

/// What this node is, as admission needs it; the runtime reads it before each handshake.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeState<'a> {
    pub shutting_down: bool,
    /// The data area failed (its message): it takes nothing more until a restart recovers it.
    pub data_failed: Option<&'a str>,
    /// This node's copy is the primary's: an application writes it.
    pub promoted: bool,
}

/// Why a lane is refused. [`Refused::refusal`] is what the peer is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    ShuttingDown,
    /// The data area failed (its message).
    DataAreaFailed(String),
    /// The peer's epoch is below this node's.
    StaleEpoch {
        peer: u64,
        node: u64,
    },
    /// This node is the primary's copy since `epoch`.
    Promoted {
        epoch: u64,
    },
    /// The lane does not fit the current session: another lane count, or a lane joined twice.
    LaneMismatch {
        lane: u16,
        lanes: u16,
        session: u64,
        session_lanes: u16,
        already_joined: bool,
    },
    /// The adopted epoch could not be persisted (the media's error).
    EpochNotPersisted(String),
}

impl Refused {
    /// The refusal sent to the peer.
    pub fn refusal(&self) -> Refusal {
        let (code, message) = match self {
            Refused::ShuttingDown => (RefuseCode::Busy, "the mirror is shutting down".to_string()),
            Refused::DataAreaFailed(msg) => (RefuseCode::Storage, msg.clone()),
            Refused::StaleEpoch { peer, node } => (
                RefuseCode::Epoch,
                format!("stale epoch: peer is at epoch {peer}, this node is at epoch {node}"),
            ),
            Refused::Promoted { epoch } => (
                RefuseCode::Epoch,
                format!(
                    "this node's copy is the primary's since epoch {epoch} (an application writes it); \
                     demote it before it serves as a replica"
                ),
            ),
            Refused::LaneMismatch { lane, lanes, session, session_lanes, already_joined } => (
                RefuseCode::Malformed,
                format!(
                    "lane {lane} of {lanes} does not fit session {session:#x} ({session_lanes} lanes, \
                     lane already joined: {already_joined})"
                ),
            ),
            Refused::EpochNotPersisted(e) => (RefuseCode::Storage, format!("cannot persist epoch: {e}")),
        };
        Refusal { code, message }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.refusal().message)
    }
}

/// What to do with a lane whose handshake authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Its session is the current one: join the lane ([`SessionSlot::join_lane`]).
    Join,
    /// No session is current: begin the handshake's ([`SessionSlot::begin`]), after persisting
    /// `persist_epoch`, the epoch this node just adopted, if any.
    Begin {
        persist_epoch: Option<u64>,
    },
    /// Another session is current: it has been ended (the commands say so, once). Wait for its
    /// lanes to leave and its seal, then ask again.
    WaitForSeal(Vec<SessionCommand>),
    Refuse(Refused),
}

/// The session a mirror serves.
#[derive(Clone, Debug)]
pub struct Session {
    pub id: u64,
    pub lanes: u16,
    /// The epoch the session runs at (this node's, when it began).
    pub epoch: u64,
    /// Its first sequence number: right after the applied prefix.
    pub next_seq: u64,
    pub max_frame: u32,
    /// Lanes joined (bit per lane), and joined and not yet left: the last to leave seals it.
    joined: u64,
    within: u64,
    ended: bool,
    /// Its sequence numbers across its lanes (see [`crate::seq_window`]).
    seqs: SeqWindow,
    copy: CopyState,
}

impl Session {
    /// Whether the session has ended (its lanes may not all have left yet).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Lanes joined and not yet left, a bit per lane.
    pub fn lanes_within(&self) -> u64 {
        self.within
    }

    /// Its copies.
    pub fn copy(&self) -> &CopyState {
        &self.copy
    }

    /// The sequence numbers it admits now.
    pub fn seqs(&self) -> &SeqWindow {
        &self.seqs
    }
}

/// A fault injected on purpose into the slot, for the simulator to prove it catches it.
#[cfg(feature = "sim")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionFault {
    #[default]
    None,
    /// Adopts a newer epoch without persisting it: a restart forgets it.
    EpochNotPersisted,
    /// Begins a new session over a live one, without ending (and sealing) it.
    SecondSession,
    /// Admits a peer whose epoch is below this node's, and runs its session at that epoch.
    AdmitStaleEpoch,
    /// Records a copy as complete when it begins: CopyBegin marks the data area with a last
    /// copy group of 1, already applied, instead of 0 (not known yet), so the area reads
    /// consistent while the copy runs.
    CopyCompleteAtBegin,
    /// Takes no sequence numbers for the session: each lane checks only its own numbers, so a
    /// group another lane took, or a number far ahead, gets through.
    NoSeqWindow,
}

/// The session slot: the current session, if any, and the epoch this node is at.
#[derive(Clone, Debug)]
pub struct SessionSlot {
    current: Option<Session>,
    epoch: u64,
    /// The latest epoch in which a primary (not a mirror) opened a session here.
    primary_epoch: u64,
    /// A mirror feeds this node: it is a backup.
    is_backup: bool,
    #[cfg(feature = "sim")]
    fault: SessionFault,
}

impl SessionSlot {
    /// No session yet, at `epoch` (what the data area recorded).
    pub fn new(epoch: u64) -> SessionSlot {
        SessionSlot {
            current: None,
            epoch,
            primary_epoch: 0,
            is_backup: false,
            #[cfg(feature = "sim")]
            fault: SessionFault::None,
        }
    }

    /// Breaks the slot on purpose (simulator tests only).
    #[cfg(feature = "sim")]
    pub fn inject(&mut self, fault: SessionFault) {
        self.fault = fault;
    }

    #[cfg(feature = "sim")]
    fn faulty(&self, fault: SessionFault) -> bool {
        self.fault == fault
    }

    #[cfg(not(feature = "sim"))]
    fn faulty(&self, _: ()) -> bool {
        false
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The latest epoch in which a primary opened a session here (0: none since the start):
    /// under the etcd coordinator, this node is then that epoch's mirror.
    pub fn primary_epoch(&self) -> u64 {
        self.primary_epoch
    }

    pub fn is_backup(&self) -> bool {
        self.is_backup
    }

    pub fn current(&self) -> Option<&Session> {
        self.current.as_ref()
    }

    /// The current session if it is `session`.
    fn of(&mut self, session: u64) -> Option<&mut Session> {
        self.current.as_mut().filter(|c| c.id == session)
    }

    /// A lane's handshake authenticated: whether this node takes it, and how. Not while shutting
    /// down, not after its data area failed, not from a stale peer (checked before anything
    /// else: a stale primary must not end the current session), and no new session once
    /// promoted.
    pub fn on_hello(&mut self, hello: &Hello, node: &NodeState<'_>) -> Admission {
        if node.shutting_down {
            return Admission::Refuse(Refused::ShuttingDown);
        }
        if let Some(msg) = node.data_failed {
            return Admission::Refuse(Refused::DataAreaFailed(msg.to_string()));
        }
        #[cfg(feature = "sim")]
        let stale_ok = self.faulty(SessionFault::AdmitStaleEpoch);
        #[cfg(not(feature = "sim"))]
        let stale_ok = self.faulty(());
        if hello.epoch < self.epoch && !stale_ok {
            return Admission::Refuse(Refused::StaleEpoch { peer: hello.epoch, node: self.epoch });
        }
        #[cfg(feature = "sim")]
        let second = self.faulty(SessionFault::SecondSession);
        #[cfg(not(feature = "sim"))]
        let second = self.faulty(());
        match &mut self.current {
            Some(cur) if cur.id == hello.session && !cur.ended => return Admission::Join,
            Some(cur) if !second => {
                let mut out = Vec::new();
                if !cur.ended {
                    cur.ended = true;
                    out.push(SessionCommand::EndSession(EndReason::Replaced));
                }
                return Admission::WaitForSeal(out);
            }
            _ => {}
        }
        if node.promoted {
            return Admission::Refuse(Refused::Promoted { epoch: self.epoch });
        }
        let persist_epoch = (hello.epoch > self.epoch).then_some(hello.epoch);
        if let Some(e) = persist_epoch {
            self.epoch = e;
        }
        #[cfg(feature = "sim")]
        let persist_epoch = persist_epoch.filter(|_| !self.faulty(SessionFault::EpochNotPersisted));
        Admission::Begin { persist_epoch }
    }

    /// Makes `hello`'s session the current one (after [`Admission::Begin`]): it runs at this
    /// node's epoch, from `next_seq` (right after the applied prefix), with frames of at most
    /// `max_frame`. The numbers it may take are a window from `next_seq` sized by the logs of
    /// its lanes (`log_capacities`, see [`window_for_logs`]); when a mirror opened it to feed
    /// this node as its backup, with void runs as long as any mirror's window.
    pub fn begin(
        &mut self,
        hello: &Hello,
        next_seq: u64,
        max_frame: u32,
        log_capacities: impl IntoIterator<Item = u64>,
    ) -> &Session {
        let window = SeqWindow::new(next_seq, window_for_logs(log_capacities));
        let seqs = if hello.role == PeerRole::Mirror { window.with_void_runs() } else { window };
        #[cfg(feature = "sim")]
        let second = self.faulty(SessionFault::SecondSession);
        #[cfg(not(feature = "sim"))]
        let second = self.faulty(());
        assert!(second || self.current.is_none(), "a session begins while {:?} is current", self.current);
        #[cfg(feature = "sim")]
        let epoch = if self.faulty(SessionFault::AdmitStaleEpoch) {
            hello.epoch
        } else {
            hello.epoch.max(self.epoch)
        };
        #[cfg(not(feature = "sim"))]
        let epoch = hello.epoch.max(self.epoch);
        self.current.insert(Session {
            id: hello.session,
            lanes: hello.lanes,
            epoch,
            next_seq,
            max_frame,
            joined: 0,
            within: 0,
            ended: false,
            seqs,
            copy: CopyState::default(),
        })
    }

    /// Joins lane `hello.lane` to the current session, which must be `hello`'s and have room for
    /// it; returns the commands that start it.
    pub fn join_lane(&mut self, hello: &Hello) -> Result<Vec<SessionCommand>, Refused> {
        let cur = self.current.as_mut().expect("join_lane after Admission::Join or begin");
        let bit = 1u64 << hello.lane;
        if hello.lanes != cur.lanes || cur.joined & bit != 0 {
            return Err(Refused::LaneMismatch {
                lane: hello.lane,
                lanes: hello.lanes,
                session: cur.id,
                session_lanes: cur.lanes,
                already_joined: cur.joined & bit != 0,
            });
        }
        match hello.role {
            PeerRole::Mirror => self.is_backup = true,
            PeerRole::Primary => self.primary_epoch = self.primary_epoch.max(cur.epoch),
            PeerRole::Admin => {}
        }
        cur.joined |= bit;
        cur.within |= bit;
        Ok(vec![SessionCommand::BeginLane(SessionTag {
            session: cur.id,
            epoch: cur.epoch,
            lane: hello.lane,
        })])
    }

    /// Takes the sequence numbers `first ..= last` for a group that begins on lane `tag.lane`,
    /// before any of it touches a log. A violation ends the session and changes nothing.
    pub fn take_seqs(&mut self, tag: SessionTag, first: u64, last: u64) -> Result<(), Violation> {
        #[cfg(feature = "sim")]
        let unchecked = self.faulty(SessionFault::NoSeqWindow);
        #[cfg(not(feature = "sim"))]
        let unchecked = self.faulty(());
        if unchecked {
            return Ok(());
        }
        match self.current.as_mut() {
            Some(cur) if cur.id == tag.session => cur.seqs.take(tag.lane, first, last),
            // A lane's session stays current until its last lane has left, so this cannot
            // happen; were it to, the lane ends (its session is not this node's).
            other => Err(Violation::Session { found: tag.session, expected: other.map_or(0, |c| c.id) }),
        }
    }

    /// Lane `tag.lane`'s connection is done (`why`). The first lane out ends the session; the
    /// last one out seals it.
    pub fn leave(&mut self, tag: SessionTag, why: &str) -> Vec<SessionCommand> {
        let Some(cur) = self.of(tag.session) else { return Vec::new() };
        let bit = 1u64 << tag.lane;
        let was_within = cur.within & bit != 0;
        cur.within &= !bit;
        let mut out = Vec::new();
        if !cur.ended {
            cur.ended = true;
            out.push(SessionCommand::EndSession(EndReason::LaneLeft(why.to_string())));
        }
        if was_within && cur.within == 0 {
            out.push(SessionCommand::Seal { session: cur.id, lanes: cur.lanes });
        }
        out
    }

    /// The ended session is sealed: the slot is free.
    pub fn sealed(&mut self, session: u64) {
        assert!(
            self.current.as_ref().is_some_and(|c| c.id == session && c.ended && c.within == 0),
            "session {session:#x} sealed while {:?} is current",
            self.current
        );
        self.current = None;
    }

    /// Ends the current session, if any and not ended yet, for `why`.
    pub fn end(&mut self, why: EndReason) -> Vec<SessionCommand> {
        match self.current.as_mut() {
            Some(cur) if !cur.ended => {
                cur.ended = true;
                vec![SessionCommand::EndSession(why)]
            }
            _ => Vec::new(),
        }
    }

    /// An operator fences this node at `epoch`: refused below its epoch; else the epoch to
    /// persist first, if it is newer ([`SessionSlot::fenced`] once it is).
    pub fn fence(&self, epoch: u64) -> Result<Option<u64>, OlderEpoch> {
        if epoch < self.epoch {
            return Err(OlderEpoch { epoch, current: self.epoch });
        }
        Ok((epoch > self.epoch).then_some(epoch))
    }

    /// The fence's `epoch` is persistent: this node takes it, and a session of an older epoch
    /// ends.
    pub fn fenced(&mut self, epoch: u64) -> Vec<SessionCommand> {
        self.epoch = self.epoch.max(epoch);
        match self.current.as_ref() {
            Some(cur) if cur.epoch < epoch => self.end(EndReason::Fenced { epoch }),
            _ => Vec::new(),
        }
    }

    /// A lane of `session` announced a copy of `total_bytes` (see [`super::copy`]).
    pub fn copy_begin(&mut self, session: u64, total_bytes: u64) -> Vec<SessionCommand> {
        #[cfg(feature = "sim")]
        let early = self.faulty(SessionFault::CopyCompleteAtBegin);
        #[cfg(not(feature = "sim"))]
        let early = self.faulty(());
        let commands = self.of(session).map_or_else(Vec::new, |c| c.copy.begin(total_bytes));
        if !early {
            return commands;
        }
        commands
            .into_iter()
            .map(|c| match c {
                SessionCommand::MarkInconsistent { copy_until: 0 } => {
                    SessionCommand::MarkInconsistent { copy_until: 1 }
                }
                other => other,
            })
            .collect()
    }

    /// Lane `lane` of `session` ended its part of a copy, naming `generation` and its last copy
    /// group `last`.
    pub fn copy_end(&mut self, session: u64, lane: u16, generation: u64, last: u64) -> Vec<SessionCommand> {
        self.of(session).map_or_else(Vec::new, |c| c.copy.end(c.lanes, lane, generation, last))
    }

    /// The generation a CopyEnd of `session` named is persistent: the copy, if one was open, is
    /// complete.
    pub fn generation_adopted(&mut self, session: u64) -> Vec<SessionCommand> {
        self.of(session).map_or_else(Vec::new, |c| c.copy.generation_adopted())
    }

    /// A Copy frame of `session` failed its check: asked for again, or a violation when too
    /// many wait.
    pub fn copy_rejected(&mut self, session: u64, offset: u64, len: u64) -> Result<(), Violation> {
        self.of(session).map_or(Ok(()), |c| c.copy.rejected(offset, len))
    }

    /// A Copy frame of `session` landed.
    pub fn copy_landed(&mut self, session: u64, offset: u64, len: u64) {
        if let Some(c) = self.of(session) {
            c.copy.landed(offset, len);
        }
    }

    /// Where `session`'s copy stands, for its lanes' rule on Copy and CopyEnd frames.
    pub fn copy_phase(&self, session: u64) -> CopyPhase {
        match self.current.as_ref() {
            Some(c) if c.id == session => c.copy.phase(),
            _ => CopyPhase::Closed,
        }
    }
}

/// A fence below this node's epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OlderEpoch {
    pub epoch: u64,
    pub current: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_format::handshake::NONCE_SIZE;
    use SessionCommand::*;

    fn hello(session: u64, epoch: u64, lane: u16, lanes: u16) -> Hello {
        Hello {
            role: PeerRole::Primary,
            lane,
            lanes,
            region_uuid: [1; 16],
            region_size: 1 << 20,
            epoch,
            session,
            nonce: [0; NONCE_SIZE],
            max_frame: 4096,
            generation: 0,
            place: false,
            encrypt_placed: false,
        }
    }

    const IDLE: NodeState<'static> = NodeState { shutting_down: false, data_failed: None, promoted: false };

    /// Admits and joins every lane of `h`'s session, beginning it at `next_seq`.
    fn open(slot: &mut SessionSlot, h: &Hello, next_seq: u64) -> Vec<SessionCommand> {
        let mut out = Vec::new();
        for lane in 0..h.lanes {
            let h = Hello { lane, ..*h };
            match slot.on_hello(&h, &IDLE) {
                Admission::Join => {}
                Admission::Begin { .. } => {
                    slot.begin(&h, next_seq, 1024, []);
                }
                other => panic!("lane {lane}: {other:?}"),
            }
            out.extend(slot.join_lane(&h).expect("fits"));
        }
        out
    }

    fn tag(session: u64, epoch: u64, lane: u16) -> SessionTag {
        SessionTag { session, epoch, lane }
    }

    #[test]
    fn the_first_lane_begins_the_session_and_adopts_a_newer_epoch_to_persist() {
        let mut slot = SessionSlot::new(3);
        let h = hello(0xa, 5, 0, 2);
        assert_eq!(slot.on_hello(&h, &IDLE), Admission::Begin { persist_epoch: Some(5) });
        assert_eq!(slot.epoch(), 5);
        let s = slot.begin(&h, 41, 1024, []);
        assert_eq!((s.epoch, s.next_seq), (5, 41));
        assert_eq!(slot.join_lane(&h), Ok(vec![BeginLane(tag(0xa, 5, 0))]));
        assert_eq!(slot.on_hello(&Hello { lane: 1, ..h }, &IDLE), Admission::Join);
        assert_eq!(slot.join_lane(&Hello { lane: 1, ..h }), Ok(vec![BeginLane(tag(0xa, 5, 1))]));
        assert_eq!(slot.primary_epoch(), 5);
        assert!(!slot.is_backup());
        // Its own epoch again: nothing to persist.
        let mut slot = SessionSlot::new(5);
        assert_eq!(slot.on_hello(&h, &IDLE), Admission::Begin { persist_epoch: None });
    }

    #[test]
    fn refusals_come_in_order_and_keep_their_words() {
        let mut slot = SessionSlot::new(4);
        let h = hello(0xa, 3, 0, 1);
        let failed = NodeState { data_failed: Some("the data area failed: EIO"), ..IDLE };
        let stopping = NodeState { shutting_down: true, ..failed };
        let refused = |a: Admission| match a {
            Admission::Refuse(r) => r.refusal(),
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(slot.on_hello(&h, &stopping)).message, "the mirror is shutting down");
        assert_eq!(refused(slot.on_hello(&h, &failed)).message, "the data area failed: EIO");
        let r = refused(slot.on_hello(&h, &IDLE));
        assert_eq!(r.code, RefuseCode::Epoch);
        assert_eq!(r.message, "stale epoch: peer is at epoch 3, this node is at epoch 4");
        let promoted = NodeState { promoted: true, ..IDLE };
        let r = refused(slot.on_hello(&hello(0xa, 6, 0, 1), &promoted));
        assert!(r.message.starts_with("this node's copy is the primary's since epoch 4"), "{r}");
        assert_eq!(slot.epoch(), 4, "a refused handshake adopts nothing");
        assert_eq!(
            Refused::EpochNotPersisted("ENOSPC".into()).refusal().message,
            "cannot persist epoch: ENOSPC"
        );
    }

    #[test]
    fn a_lane_that_does_not_fit_is_refused_and_changes_nothing() {
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &hello(0xa, 1, 0, 2), 1);
        let again = slot.join_lane(&hello(0xa, 1, 1, 2)).unwrap_err();
        assert_eq!(
            again.refusal().message,
            "lane 1 of 2 does not fit session 0xa (2 lanes, lane already joined: true)"
        );
        let other = slot.join_lane(&hello(0xa, 1, 2, 3)).unwrap_err();
        assert_eq!(other.refusal().code, RefuseCode::Malformed);
        assert_eq!(slot.current().map(|c| c.lanes_within()), Some(0b11));
    }

    #[test]
    fn a_new_session_ends_the_current_one_and_begins_after_its_seal() {
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &hello(0xa, 1, 0, 2), 1);
        let newer = hello(0xb, 2, 0, 1);
        assert_eq!(
            slot.on_hello(&newer, &IDLE),
            Admission::WaitForSeal(vec![EndSession(EndReason::Replaced)])
        );
        assert_eq!(slot.on_hello(&newer, &IDLE), Admission::WaitForSeal(vec![]), "ended once");
        assert_eq!(slot.epoch(), 1, "the new epoch is adopted only when its session begins");
        assert_eq!(slot.leave(tag(0xa, 1, 1), "closed"), []);
        assert_eq!(slot.leave(tag(0xa, 1, 0), "closed"), [Seal { session: 0xa, lanes: 2 }]);
        slot.sealed(0xa);
        assert_eq!(slot.on_hello(&newer, &IDLE), Admission::Begin { persist_epoch: Some(2) });
        // A lane of a session that ended (and not its replacement) is not admitted to it either.
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &hello(0xa, 1, 0, 2), 1);
        assert_eq!(
            slot.leave(tag(0xa, 1, 0), "end of stream"),
            [EndSession(EndReason::LaneLeft("end of stream".into()))]
        );
        assert_eq!(slot.on_hello(&hello(0xa, 1, 1, 2), &IDLE), Admission::WaitForSeal(vec![]));
    }

    #[test]
    fn a_stale_peer_is_refused_before_it_can_end_the_session() {
        let mut slot = SessionSlot::new(2);
        open(&mut slot, &hello(0xa, 2, 0, 1), 1);
        assert!(matches!(
            slot.on_hello(&hello(0xb, 1, 0, 1), &IDLE),
            Admission::Refuse(Refused::StaleEpoch { .. })
        ));
        assert!(!slot.current().expect("current").ended());
    }

    #[test]
    fn leaving_ends_once_and_the_last_lane_out_seals() {
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &hello(0xa, 1, 0, 3), 1);
        assert_eq!(slot.leave(tag(0xb, 1, 0), "x"), [], "another session's lane");
        assert_eq!(slot.leave(tag(0xa, 1, 2), "reset"), [EndSession(EndReason::LaneLeft("reset".into()))]);
        assert_eq!(slot.leave(tag(0xa, 1, 0), "end of stream"), []);
        assert_eq!(slot.leave(tag(0xa, 1, 1), "end of stream"), [Seal { session: 0xa, lanes: 3 }]);
        assert_eq!(slot.leave(tag(0xa, 1, 1), "end of stream"), [], "sealed once");
        slot.sealed(0xa);
        // A session whose handshake stopped after two of its three lanes: sealed when both left.
        let h = hello(0xc, 1, 0, 3);
        slot.on_hello(&h, &IDLE);
        slot.begin(&h, 1, 1024, []);
        slot.join_lane(&h).expect("fits");
        slot.join_lane(&Hello { lane: 1, ..h }).expect("fits");
        assert_eq!(slot.leave(tag(0xc, 1, 2), "never joined").len(), 1, "ends, seals nothing");
        assert_eq!(slot.leave(tag(0xc, 1, 0), "closed"), []);
        assert_eq!(slot.leave(tag(0xc, 1, 1), "closed"), [Seal { session: 0xc, lanes: 3 }]);
        slot.sealed(0xc);
        assert!(slot.current().is_none());
    }

    #[test]
    fn a_fence_takes_a_newer_epoch_after_it_persists_and_ends_older_sessions() {
        let mut slot = SessionSlot::new(3);
        open(&mut slot, &hello(0xa, 3, 0, 1), 1);
        assert_eq!(slot.fence(2), Err(OlderEpoch { epoch: 2, current: 3 }));
        assert_eq!(slot.fence(3), Ok(None));
        assert_eq!(slot.fenced(3), [], "a session of the fence's epoch goes on");
        assert_eq!(slot.fence(4), Ok(Some(4)));
        assert_eq!(slot.epoch(), 3, "not before it is persistent");
        assert_eq!(slot.fenced(4), [EndSession(EndReason::Fenced { epoch: 4 })]);
        assert_eq!(slot.epoch(), 4);
        assert_eq!(slot.fenced(5), [], "already ended");
    }

    #[test]
    fn sequence_numbers_and_copies_belong_to_the_current_session() {
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &hello(0xa, 1, 0, 2), 10);
        assert_eq!(slot.take_seqs(tag(0xa, 1, 0), 10, 10), Ok(()));
        assert!(slot.take_seqs(tag(0xa, 1, 1), 10, 10).is_err(), "taken on lane 0");
        assert_eq!(
            slot.take_seqs(tag(0xb, 1, 0), 11, 11),
            Err(Violation::Session { found: 0xb, expected: 0xa })
        );
        assert_eq!(slot.copy_begin(0xb, 100), [], "not the current session");
        assert_eq!(
            slot.copy_begin(0xa, 100),
            [CopyStarted { total_bytes: 100 }, MarkInconsistent { copy_until: 0 }]
        );
        assert_eq!(slot.copy_phase(0xa), CopyPhase::Open);
        assert_eq!(slot.copy_phase(0xb), CopyPhase::Closed);
        assert_eq!(slot.copy_end(0xa, 0, 7, 20), []);
        assert_eq!(slot.copy_end(0xa, 1, 7, 21), [AdoptGeneration(7)]);
        assert_eq!(slot.generation_adopted(0xa), [MarkInconsistent { copy_until: 21 }, CheckConsistent]);
    }

    #[test]
    fn a_mirror_feeding_this_node_makes_it_a_backup() {
        let mut slot = SessionSlot::new(1);
        open(&mut slot, &Hello { role: PeerRole::Mirror, ..hello(0xa, 1, 0, 1) }, 1);
        assert!(slot.is_backup());
        assert_eq!(slot.primary_epoch(), 0);
    }
}
