//! The primary's session: which connection carries which lane, where its sequence numbers
//! start, and sealing when it ends.
//!
//! A session is all the lanes of one primary's handshake. When any of them ends (end of
//! stream, error, protocol violation, a newer session, shutdown), the whole session ends: every
//! lane drops its open group, every complete group is applied in sequence order (across gaps,
//! as recovery would), and the next session starts after the highest sequence number seen.

use super::operator_command_error::{CommandError, StorageError};
use super::{checkpoint, Shared};
use mojim_core::control::CopyPhase;
use mojim_core::encode::SessionTag;
use mojim_core::handshake::Refusal;
use mojim_core::mirror::session::OlderEpoch;
use mojim_core::mirror::{self, generation_after, Admission, EndReason, NodeState, Refused, SessionCommand};
use mojim_core::receive::Violation;
use mojim_format::handshake::{Hello, Welcome};
use mojim_format::region::FLAG_INCONSISTENT;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the node keeps of the current session beside the core's state: the handles that close
/// its lanes, its peer, and when its copy began.
struct SessionIo {
    /// Handles to close each joined lane's connection from another thread.
    closers: Vec<Box<dyn Fn() + Send>>,
    peer: String,
    /// When the open copy began, and the bytes received before it.
    copy_started: Option<Instant>,
    copy_base_bytes: u64,
}

/// A copy into this node, as status shows it. `received_bytes` counts everything received
/// since the copy began (the application's groups too, which keep flowing meanwhile).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct CopyProgress {
    pub total_bytes: u64,
    pub received_bytes: u64,
    pub remaining_bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
}

/// The session slot: the core's state machine ([`mirror::SessionSlot`]), which makes every
/// decision, and what this node keeps beside it; the node executes the commands it emits.
///
/// Locks (see the lock order in lib.rs): `slot`, the outermost of the node's locks, with `left`
/// (a new session waits on it for an ended one's lanes to leave). The functions of this module
/// that take other components' locks under it: [`join`] (the checkpointer's, and each lane's in
/// turn) and [`leave`] (each lane's, then the applier's through `checkpoint::seal`).
///
/// The epoch, the latest primary's epoch and whether a mirror feeds this node are published
/// after each decision, for readers that do not take the slot.
pub(crate) struct SessionSlot {
    slot: Mutex<Slot>,
    left: Condvar,
    epoch: AtomicU64,
    /// The latest epoch in which a primary (not a mirror) opened a session here: under the etcd
    /// coordinator, this node is then that epoch's mirror and claims the role by its name.
    primary_epoch: AtomicU64,
    /// A mirror feeds this node: it is a backup.
    is_backup: AtomicBool,
}

struct Slot {
    engine: mirror::SessionSlot,
    /// Present while the engine has a current session.
    io: Option<SessionIo>,
}

impl SessionSlot {
    /// No session yet, at `epoch`.
    pub fn new(epoch: u64) -> SessionSlot {
        SessionSlot {
            slot: Mutex::new(Slot { engine: mirror::SessionSlot::new(epoch), io: None }),
            left: Condvar::new(),
            epoch: AtomicU64::new(epoch),
            primary_epoch: AtomicU64::new(0),
            is_backup: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes what `engine` decided about the epoch and the roles.
    fn publish(&self, engine: &mirror::SessionSlot) {
        self.epoch.store(engine.epoch(), Ordering::SeqCst);
        self.primary_epoch.fetch_max(engine.primary_epoch(), Ordering::SeqCst);
        if engine.is_backup() {
            self.is_backup.store(true, Ordering::SeqCst);
        }
    }

    /// The epoch this node is at.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// The latest epoch in which a primary opened a session here (0: none since the start).
    pub fn primary_epoch(&self) -> u64 {
        self.primary_epoch.load(Ordering::SeqCst)
    }

    /// Whether a mirror feeds this node (it is a backup).
    pub fn is_backup(&self) -> bool {
        self.is_backup.load(Ordering::SeqCst)
    }
}

/// How long a new session waits for an ended one to leave, or a seal takes, before the wait is
/// logged: normally milliseconds, and a primary's handshake gives up after its connect timeout.
const SLOW_LEAVE: Duration = Duration::from_millis(500);

/// Runs the engine's `commands` in order, with the slot held. `peer` is the handshake's that
/// asked, if one did. Returns whether the data area's consistency is to be checked once the slot
/// is released (a copy ended). A storage error stops the rest.
fn execute(
    s: &Shared,
    slot: &mut Slot,
    commands: Vec<SessionCommand>,
    peer: Option<&str>,
) -> Result<bool, StorageError> {
    let mut check_consistent = false;
    for cmd in commands {
        match cmd {
            SessionCommand::EndSession(why) => end_session(slot, &why, peer),
            SessionCommand::BeginLane(tag) => {
                let cur = slot.engine.current().expect("a lane begins in the current session");
                s.lanes.begin(tag, s.data.area().size(), cur.max_frame, cur.next_seq);
            }
            SessionCommand::Seal { session, lanes } => {
                s.lanes.end_session(lanes);
                let t0 = Instant::now();
                checkpoint::seal(s);
                if t0.elapsed() >= SLOW_LEAVE {
                    // New sessions wait meanwhile (the slot is held).
                    tracing::warn!(
                        session = format!("{session:#x}"),
                        ms = t0.elapsed().as_millis() as u64,
                        "sealing the ended session was slow"
                    );
                }
                slot.engine.sealed(session);
                slot.io = None;
                s.session.left.notify_all();
            }
            SessionCommand::CopyStarted { .. } => {
                let io = slot.io.as_mut().expect("a copy begins in the current session");
                io.copy_started = Some(Instant::now());
                io.copy_base_bytes = s.stats.bytes_received();
            }
            SessionCommand::MarkInconsistent { copy_until } => {
                let (flags, _) =
                    s.data.area().copy_state().map_err(StorageError::io("read the copy state"))?;
                let op = if copy_until == 0 {
                    "mark the data area inconsistent"
                } else {
                    "record the end of the copy"
                };
                s.data
                    .area()
                    .set_copy_state(flags | FLAG_INCONSISTENT, copy_until)
                    .map_err(StorageError::io(op))?;
                if copy_until == 0 {
                    let session = slot.engine.current().map_or(0, |c| c.id);
                    tracing::info!(
                        session = format!("{session:#x}"),
                        "a copy begins: the data area is inconsistent until it ends"
                    );
                }
            }
            SessionCommand::AdoptGeneration(generation) => {
                let (old, old_prev) =
                    s.data.area().generation().map_err(StorageError::io("read the generation"))?;
                if let Some((generation, prev)) = generation_after(old, old_prev, generation) {
                    s.data
                        .area()
                        .set_generation(generation, prev)
                        .map_err(StorageError::io("persist the generation"))?;
                }
            }
            SessionCommand::CheckConsistent => check_consistent = true,
        }
    }
    Ok(check_consistent)
}

/// Closes every joined lane of the current session, which the engine ended for `why`.
fn end_session(slot: &Slot, why: &EndReason, new_peer: Option<&str>) {
    let (Some(cur), Some(io)) = (slot.engine.current(), slot.io.as_ref()) else { return };
    match why {
        EndReason::LaneLeft(reason) => {
            tracing::info!(session = format!("{:#x}", cur.id), %reason, "primary session ends")
        }
        EndReason::Replaced => tracing::warn!(
            old = %io.peer,
            new = %new_peer.unwrap_or("?"),
            "a new primary session replaces the current one"
        ),
        EndReason::Fenced { epoch } => tracing::warn!(
            peer = %io.peer,
            session_epoch = cur.epoch,
            epoch,
            "ending a session of an older epoch"
        ),
        EndReason::Stopping => {}
    }
    for close in &io.closers {
        close();
    }
}

/// What admission needs to know of this node now.
fn node_state(s: &Shared) -> NodeState<'_> {
    NodeState {
        shutting_down: s.shutdown.load(Ordering::SeqCst),
        data_failed: s.data.failed().map(String::as_str),
        promoted: s.data.is_primary(),
    }
}

/// Joins lane `hello.lane` to its session, creating the session (and ending another) as the
/// engine decides. `closer` closes this lane's connection.
pub(crate) fn join(
    s: &Shared,
    hello: &Hello,
    peer: &str,
    closer: Box<dyn Fn() + Send>,
) -> Result<(Welcome, SessionTag, u32), Refusal> {
    let mut slot = session_of(s, hello, peer).map_err(|r| r.refusal())?;
    let commands = slot.engine.join_lane(hello).map_err(|r| r.refusal())?;
    s.session.publish(&slot.engine);
    slot.io.as_mut().expect("the session's state").closers.push(closer);
    let tag = commands.iter().find_map(|c| match c {
        SessionCommand::BeginLane(tag) => Some(*tag),
        _ => None,
    });
    // Starting a lane does no I/O that can fail.
    execute(s, &mut slot, commands, Some(peer)).expect("a lane's start");
    let tag = tag.expect("a joined lane begins");
    let cur = slot.engine.current().expect("session present");
    let welcome = welcome(s, cur, hello.lane)?;
    Ok((welcome, tag, cur.max_frame))
}

/// The session slot, locked, with `hello`'s session current: the one already there, or a new
/// one once an ended (or replaced) session's lanes have all left.
fn session_of<'a>(s: &'a Shared, hello: &Hello, peer: &str) -> Result<MutexGuard<'a, Slot>, Refused> {
    let mut slot = s.session.lock();
    // When this handshake began waiting for an ended session's lanes to leave (said once, after
    // a while: the primary's handshake times out meanwhile).
    let mut waiting: Option<(Instant, bool)> = None;
    loop {
        let admission = slot.engine.on_hello(hello, &node_state(s));
        s.session.publish(&slot.engine);
        match admission {
            Admission::Refuse(why) => return Err(why),
            Admission::Join => return Ok(slot),
            Admission::WaitForSeal(commands) => {
                // Ending a session does no I/O that can fail.
                execute(s, &mut slot, commands, Some(peer)).expect("ending a session");
                say_waiting(&slot, peer, &mut waiting);
                slot = s
                    .session
                    .left
                    .wait_timeout(slot, Duration::from_millis(50))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            Admission::Begin { persist_epoch } => {
                if let Some(epoch) = persist_epoch {
                    s.data.area().set_epoch(epoch).map_err(|e| Refused::EpochNotPersisted(e.to_string()))?;
                }
                begin(s, &mut slot, hello, peer);
                return Ok(slot);
            }
        }
    }
}

/// Says once, after a while, that the handshake of `peer` still waits for the ended session's
/// lanes to leave.
fn say_waiting(slot: &Slot, peer: &str, waiting: &mut Option<(Instant, bool)>) {
    let (since, said) = waiting.get_or_insert((Instant::now(), false));
    if *said || since.elapsed() < SLOW_LEAVE {
        return;
    }
    *said = true;
    let Some(cur) = slot.engine.current() else { return };
    tracing::warn!(
        %peer,
        ended = format!("{:#x}", cur.id),
        lanes_in = ?lanes_of(cur.lanes_within()),
        lanes = cur.lanes,
        waited_ms = since.elapsed().as_millis() as u64,
        "a new session waits for the ended one's lanes to leave"
    );
}

/// Makes `hello`'s session the current one (the engine admitted it, and its epoch is
/// persistent): its sequence numbers start right after the applied prefix.
fn begin(s: &Shared, slot: &mut Slot, hello: &Hello, peer: &str) {
    // Start right after the applied prefix: the checkpointer waits for exactly that number
    // (numbers of dropped groups are used again).
    let next_seq = s.ckpt.resume();
    let max_frame = session_max_frame(s, hello.max_frame);
    slot.engine.begin(hello, next_seq, max_frame, s.lanes.capacities(hello.lanes as usize));
    slot.io = Some(SessionIo {
        closers: Vec::new(),
        peer: peer.to_string(),
        copy_started: None,
        copy_base_bytes: 0,
    });
    s.stats.session_began();
    tracing::info!(%peer, session = format!("{:#x}", hello.session), lanes = hello.lanes, next_seq, "primary session begins");
}

/// What the joining lane `lane` of `cur` is told: this node's history and where the session
/// starts.
fn welcome(s: &Shared, cur: &mirror::session::Session, lane: u16) -> Result<Welcome, Refusal> {
    let (generation, prev_generation) = s.data.area().generation().map_err(|e| Refusal {
        code: mojim_format::handshake::RefuseCode::Storage,
        message: format!("cannot read the generation: {e}"),
    })?;
    let welcome = Welcome {
        generation,
        prev_generation,
        inconsistent: !s.data.consistent(),
        next_seq: cur.next_seq,
        log_capacity: s.lanes.capacity(lane),
        max_frame: cur.max_frame,
        epoch: cur.epoch,
    };
    Ok(welcome)
}

/// The largest frame body of a session: what both sides allow, and small enough that a group of
/// one full frame fits every lane's log (a log made earlier may be smaller than configured).
fn session_max_frame(s: &Shared, asked: u32) -> u32 {
    let smallest_log = s.lanes.capacities(s.lanes.count()).min().unwrap_or(s.opts.log_capacity);
    let fits = (smallest_log / 2).saturating_sub(mojim_format::FRAME_HEADER_SIZE as u64) / 64 * 64;
    asked.min(s.opts.limits.max_frame).min(fits.min(u32::MAX as u64) as u32).max(64)
}

/// Takes the sequence numbers `first ..= last` for a group that begins on lane `tag.lane`, before
/// any of it touches a log (see [`mirror::SessionSlot::take_seqs`]). A violation ends the session
/// (the caller closes the lane) and changes nothing.
pub(crate) fn take_seqs(s: &Shared, tag: SessionTag, first: u64, last: u64) -> Result<(), Violation> {
    s.session.lock().engine.take_seqs(tag, first, last)
}

/// The lanes whose bits are set in `mask`.
fn lanes_of(mask: u64) -> Vec<u16> {
    (0..64).filter(|l| mask & (1u64 << l) != 0).collect()
}

/// A lane's connection is done. The last lane out seals the session.
pub(crate) fn leave(s: &Shared, tag: SessionTag, reason: &str) {
    let mut slot = s.session.lock();
    let Some(cur) = slot.engine.current().filter(|c| c.id == tag.session) else {
        return;
    };
    if cur.ended() && !reason.ends_with("end of stream") && !reason.ends_with("shutting down") {
        // A lane that failed on its own (a TLS record that does not verify, say) after another
        // lane ended the session: its reason is not the session's, and is said here.
        tracing::info!(session = format!("{:#x}", tag.session), %reason, "a lane of the ended session ends");
    }
    let commands = slot.engine.leave(tag, reason);
    // Ending and sealing a session do no I/O that can fail (a failed seal fail-stops the
    // node's storage instead).
    execute(s, &mut slot, commands, None).expect("ending and sealing a session");
}

/// Runs `commands` of a lane of `session`'s copy, then checks the data area's consistency once
/// the slot is released if a copy ended.
fn run_copy_commands(
    s: &Shared,
    mut slot: MutexGuard<'_, Slot>,
    commands: Vec<SessionCommand>,
) -> Result<(), StorageError> {
    if execute(s, &mut slot, commands, None)? {
        drop(slot);
        s.data.consistent();
    }
    Ok(())
}

/// A lane of `session` announced a copy: mark the data area inconsistent before any of it lands.
pub(crate) fn copy_begin(s: &Shared, session: u64, total: u64) -> Result<(), StorageError> {
    let mut slot = s.session.lock();
    let commands = slot.engine.copy_begin(session, total);
    run_copy_commands(s, slot, commands)
}

/// A lane of `session` ended its part of a copy (or, without CopyBegin, just names the
/// generation): see [`mojim_core::mirror::CopyState`].
pub(crate) fn copy_end(
    s: &Shared,
    session: u64,
    lane: u16,
    generation: u64,
    last: u64,
) -> Result<(), StorageError> {
    let mut slot = s.session.lock();
    let commands = slot.engine.copy_end(session, lane, generation, last);
    if commands.is_empty() {
        return Ok(());
    }
    execute(s, &mut slot, commands, None)?;
    let commands = slot.engine.generation_adopted(session);
    run_copy_commands(s, slot, commands)
}

/// An operator fences this node at `epoch`: takes it, persistently, if it is newer, and ends a
/// session of an older epoch.
pub(crate) fn fence(s: &Shared, epoch: u64) -> Result<(), CommandError> {
    let mut slot = s.session.lock();
    let current = slot.engine.epoch();
    match slot.engine.fence(epoch) {
        Err(OlderEpoch { epoch, current }) => return Err(CommandError::OlderEpoch { epoch, current }),
        Ok(None) => {}
        Ok(Some(epoch)) => {
            s.data.area().set_epoch(epoch).map_err(StorageError::io("persist the epoch"))?;
            tracing::warn!(from = current, to = epoch, "fenced: sessions below the new epoch are refused");
        }
    }
    let commands = slot.engine.fenced(epoch);
    s.session.publish(&slot.engine);
    execute(s, &mut slot, commands, None).expect("ending a session");
    s.session.left.notify_all();
    Ok(())
}

/// Ends the current session, if any, and not ended yet.
fn end_locked(s: &Shared, slot: &mut Slot) {
    let commands = slot.engine.end(EndReason::Stopping);
    execute(s, slot, commands, None).expect("ending a session");
}

/// Waits until no session is active (its lanes have left and it is sealed).
pub(crate) fn wait_ended(s: &Shared, timeout: Duration) -> Result<(), CommandError> {
    let deadline = Instant::now() + timeout;
    let mut slot = s.session.lock();
    while slot.engine.current().is_some() {
        end_locked(s, &mut slot);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let peer = slot.io.as_ref().map_or_else(String::new, |io| io.peer.clone());
            return Err(CommandError::SessionStayed { peer, timeout });
        }
        slot = s
            .session
            .left
            .wait_timeout(slot, left.min(Duration::from_millis(50)))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    Ok(())
}

/// The copy into this node in progress, if any.
pub(crate) fn copy_progress(s: &Shared) -> Option<CopyProgress> {
    let slot = s.session.lock();
    let cur = slot.engine.current().filter(|c| c.copy().is_open())?;
    let io = slot.io.as_ref()?;
    let total = cur.copy().total_bytes();
    let received = s.stats.bytes_received().saturating_sub(io.copy_base_bytes);
    let seconds = io.copy_started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Some(CopyProgress {
        total_bytes: total,
        received_bytes: received.min(total.max(received)),
        remaining_bytes: total.saturating_sub(received),
        seconds,
        mb_per_s: if seconds > 0.0 { received as f64 / 1e6 / seconds } else { 0.0 },
    })
}

/// The Copy frame `[offset, offset + len)` of `session`'s open copy failed its check and did not
/// land; the sender is asked for it again. A violation when too many wait.
pub(crate) fn copy_rejected(s: &Shared, session: u64, offset: u64, len: u64) -> Result<(), Violation> {
    s.session.lock().engine.copy_rejected(session, offset, len)
}

/// The Copy frame `[offset, offset + len)` landed: it settles what it covers of the rejected
/// frames.
pub(crate) fn copy_landed(s: &Shared, session: u64, offset: u64, len: u64) {
    s.session.lock().engine.copy_landed(session, offset, len);
}

/// Where `session`'s copy stands, for the core's rule on Copy and CopyEnd frames.
pub(crate) fn copy_phase(s: &Shared, session: u64) -> CopyPhase {
    s.session.lock().engine.copy_phase(session)
}

/// Ends the current session, if any (shutdown).
pub(crate) fn end_current(s: &Shared) {
    let mut slot = s.session.lock();
    end_locked(s, &mut slot);
    s.session.left.notify_all();
}

/// The session's id, peer and lane count, for status.
pub(crate) fn describe(s: &Shared) -> Option<(u64, String, u16, u64)> {
    let slot = s.session.lock();
    let cur = slot.engine.current()?;
    let peer = slot.io.as_ref().map_or_else(String::new, |io| io.peer.clone());
    Some((cur.id, peer, cur.lanes, cur.next_seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_of_lists_the_set_bits() {
        assert_eq!(lanes_of(0), Vec::<u16>::new());
        assert_eq!(lanes_of(0b1011), vec![0, 1, 3]);
        assert_eq!(lanes_of(1 << 63), vec![63]);
    }
}
