//! The primary's session: which connection carries which lane, where its sequence numbers
//! start, and sealing when it ends.
//!
//! A session is all the lanes of one primary's handshake. When any of them ends (end of
//! stream, error, protocol violation, a newer session, shutdown), the whole session ends: every
//! lane drops its open group, every complete group is applied in sequence order (across gaps,
//! as recovery would), and the next session starts after the highest sequence number seen.

use super::operator_command_error::{CommandError, StorageError};
use super::{checkpoint, Shared};
use mojim_core::encode::SessionTag;
use mojim_core::handshake::Refusal;
use mojim_core::receive::Violation;
use mojim_core::seq_window::{window_for_logs, SeqWindow};
use mojim_format::handshake::{Hello, RefuseCode, Welcome};
use mojim_format::region::FLAG_INCONSISTENT;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub(crate) struct Session {
    pub id: u64,
    pub lanes: u16,
    pub epoch: u64,
    pub next_seq: u64,
    pub max_frame: u32,
    joined: u64,
    /// Lanes joined and not yet left (bit per lane): the last to leave seals the session.
    within: u64,
    ended: bool,
    /// Handles to close each joined lane's connection from another thread.
    closers: Vec<Box<dyn Fn() + Send>>,
    pub peer: String,
    /// A copy began in this session and not every lane has ended it (the data area is marked
    /// inconsistent). A session may hold several copies, one after another (a mirror feeding
    /// this backup opens one for each copy it gets).
    copy_open: bool,
    /// Lanes that sent CopyEnd since the last copy or generation was complete, and the highest
    /// copy group among them.
    copy_ended: u64,
    copy_until: u64,
    /// The copy's size (from CopyBegin), when it began, and the bytes received before it.
    copy_total: u64,
    copy_started: Option<std::time::Instant>,
    copy_base_bytes: u64,
    /// Copy frames of the open copy that failed their check, did not land, and were asked for
    /// again (CopyRetry): `(offset, len)`. The copy cannot end until each is covered by a Copy
    /// frame that landed.
    copy_retry: Vec<(u64, u64)>,
    /// The session's sequence numbers across its lanes: each taken once, none applied before,
    /// none too far ahead (see `mojim_core::seq_window`).
    seqs: SeqWindow,
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

/// The session slot: the current session, if any, and the epoch this node is at.
///
/// Locks (see the lock order in lib.rs): `slot`, the outermost of the node's locks, with `left`
/// (a new session waits on it for an ended one's lanes to leave). The functions of this module
/// that take other components' locks under it: [`join`] (the checkpointer's, and each lane's in
/// turn) and [`leave`] (each lane's, then the applier's through `checkpoint::seal`).
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

#[derive(Default)]
struct Slot {
    current: Option<Session>,
}

impl SessionSlot {
    /// No session yet, at `epoch`.
    pub fn new(epoch: u64) -> SessionSlot {
        SessionSlot {
            slot: Mutex::new(Slot::default()),
            left: Condvar::new(),
            epoch: AtomicU64::new(epoch),
            primary_epoch: AtomicU64::new(0),
            is_backup: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The epoch this node is at.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Takes `epoch` (the caller persists it, and never lowers it).
    pub fn set_epoch(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
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

/// Joins lane `hello.lane` to its session, creating the session (and ending another) as
/// needed. `closer` closes this lane's connection.
pub(crate) fn join(
    s: &Shared,
    hello: &Hello,
    peer: &str,
    closer: Box<dyn Fn() + Send>,
) -> Result<(Welcome, SessionTag, u32), Refusal> {
    let mut slot = session_of(s, hello, peer)?;
    let cur = slot.current.as_mut().expect("session present");
    let tag = add_lane(s, cur, hello, closer)?;
    let welcome = welcome(s, cur, hello.lane)?;
    Ok((welcome, tag, cur.max_frame))
}

/// The session slot, locked, with `hello`'s session current: the one already there, or a new
/// one once an ended (or replaced) session's lanes have all left.
fn session_of<'a>(s: &'a Shared, hello: &Hello, peer: &str) -> Result<MutexGuard<'a, Slot>, Refusal> {
    let mut slot = s.session.lock();
    // When this handshake began waiting for an ended session's lanes to leave (said once, after
    // a while: the primary's handshake times out meanwhile).
    let mut waiting: Option<(std::time::Instant, bool)> = None;
    loop {
        admissible(s, hello)?;
        match &mut slot.current {
            Some(cur) if cur.id == hello.session && !cur.ended => return Ok(slot),
            Some(cur) => {
                replace(cur, peer, &mut waiting);
                slot = s
                    .session
                    .left
                    .wait_timeout(slot, Duration::from_millis(50))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            None => {
                begin(s, &mut slot, hello, peer)?;
                return Ok(slot);
            }
        }
    }
}

/// Whether this node takes a lane of `hello`'s session at all: not while shutting down, not
/// after its data area failed, and not from a stale primary.
fn admissible(s: &Shared, hello: &Hello) -> Result<(), Refusal> {
    if s.shutdown.load(Ordering::SeqCst) {
        return Err(Refusal { code: RefuseCode::Busy, message: "the mirror is shutting down".into() });
    }
    // A failed data area takes nothing more until a restart recovers it from the logs.
    if let Some(msg) = s.data.failed() {
        return Err(Refusal { code: RefuseCode::Storage, message: msg.clone() });
    }
    // Checked before anything else: a stale primary must not end the current session.
    let epoch = s.session.epoch();
    if hello.epoch < epoch {
        return Err(Refusal {
            code: RefuseCode::Epoch,
            message: format!("stale epoch: peer is at epoch {}, this node is at epoch {epoch}", hello.epoch),
        });
    }
    Ok(())
}

/// Ends `cur` for the session of a new handshake from `peer`, and says once, after a while,
/// that the handshake still waits for its lanes to leave.
fn replace(cur: &mut Session, peer: &str, waiting: &mut Option<(std::time::Instant, bool)>) {
    if !cur.ended {
        tracing::warn!(old = %cur.peer, new = %peer, "a new primary session replaces the current one");
        end_locked(cur);
    }
    let (since, said) = waiting.get_or_insert((std::time::Instant::now(), false));
    if !*said && since.elapsed() >= SLOW_LEAVE {
        *said = true;
        tracing::warn!(
            %peer,
            ended = format!("{:#x}", cur.id),
            lanes_in = ?lanes_of(cur.within),
            lanes = cur.lanes,
            waited_ms = since.elapsed().as_millis() as u64,
            "a new session waits for the ended one's lanes to leave"
        );
    }
}

/// Makes `hello`'s session the current one (the slot has none): this node takes its epoch, and
/// its sequence numbers start right after the applied prefix.
fn begin(s: &Shared, slot: &mut Slot, hello: &Hello, peer: &str) -> Result<(), Refusal> {
    refuse_if_promoted(s)?;
    let epoch = take_epoch(s, hello.epoch)?;
    // Start right after the applied prefix: the checkpointer waits for exactly that number
    // (numbers of dropped groups are used again).
    let next_seq = s.ckpt.resume();
    slot.current = Some(Session {
        id: hello.session,
        lanes: hello.lanes,
        epoch: hello.epoch.max(epoch),
        next_seq,
        max_frame: session_max_frame(s, hello.max_frame),
        joined: 0,
        within: 0,
        ended: false,
        closers: Vec::new(),
        peer: peer.to_string(),
        copy_open: false,
        copy_ended: 0,
        copy_until: 0,
        copy_total: 0,
        copy_started: None,
        copy_base_bytes: 0,
        copy_retry: Vec::new(),
        seqs: session_window(s, hello, next_seq),
    });
    s.stats.session_began();
    tracing::info!(%peer, session = format!("{:#x}", hello.session), lanes = hello.lanes, next_seq, "primary session begins");
    Ok(())
}

/// A node whose copy is the primary's (promoted) serves no session as a replica.
fn refuse_if_promoted(s: &Shared) -> Result<(), Refusal> {
    if s.data.is_primary() {
        return Err(Refusal {
            code: RefuseCode::Epoch,
            message: format!(
                "this node's copy is the primary's since epoch {} (an application writes it); \
                 demote it before it serves as a replica",
                s.session.epoch()
            ),
        });
    }
    Ok(())
}

/// Takes the peer's epoch, persistently, if it is newer; returns the epoch this node was at.
fn take_epoch(s: &Shared, peer_epoch: u64) -> Result<u64, Refusal> {
    let epoch = s.session.epoch();
    if peer_epoch > epoch {
        s.session.set_epoch(peer_epoch);
        if let Err(e) = s.data.area().set_epoch(peer_epoch) {
            return Err(Refusal { code: RefuseCode::Storage, message: format!("cannot persist epoch: {e}") });
        }
    }
    Ok(epoch)
}

/// Adds lane `hello.lane` to `cur`, which must have room for it, and starts the lane in the
/// session. `closer` closes the lane's connection when the session ends.
fn add_lane(
    s: &Shared,
    cur: &mut Session,
    hello: &Hello,
    closer: Box<dyn Fn() + Send>,
) -> Result<SessionTag, Refusal> {
    let bit = 1u64 << hello.lane;
    if hello.lanes != cur.lanes || cur.joined & bit != 0 {
        return Err(Refusal {
            code: RefuseCode::Malformed,
            message: format!(
                "lane {} of {} does not fit session {:#x} ({} lanes, lane already joined: {})",
                hello.lane,
                hello.lanes,
                cur.id,
                cur.lanes,
                cur.joined & bit != 0
            ),
        });
    }
    if hello.role == mojim_format::handshake::PeerRole::Mirror {
        s.session.is_backup.store(true, Ordering::SeqCst);
    }
    if hello.role == mojim_format::handshake::PeerRole::Primary {
        s.session.primary_epoch.fetch_max(cur.epoch, Ordering::SeqCst);
    }
    cur.joined |= bit;
    cur.within |= bit;
    cur.closers.push(closer);
    let tag = SessionTag { session: cur.id, epoch: cur.epoch, lane: hello.lane };
    s.lanes.begin(tag, s.data.area().size(), cur.max_frame, cur.next_seq);
    Ok(tag)
}

/// What the joining lane `lane` of `cur` is told: this node's history and where the session
/// starts.
fn welcome(s: &Shared, cur: &Session, lane: u16) -> Result<Welcome, Refusal> {
    let (generation, prev_generation) = s.data.area().generation().map_err(|e| Refusal {
        code: RefuseCode::Storage,
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

/// The sequence numbers a session that `hello` opens, from `next_seq`, may take: a group at
/// most twice the groups its lanes' logs hold ahead of the lowest number not yet received, and,
/// when a mirror opened it to feed this node as its backup, a void run from that number as long
/// as any mirror's window (see `mojim_core::seq_window`).
fn session_window(s: &Shared, hello: &Hello, next_seq: u64) -> SeqWindow {
    let len = window_for_logs(s.lanes.capacities(hello.lanes as usize));
    let w = SeqWindow::new(next_seq, len);
    if hello.role == mojim_format::handshake::PeerRole::Mirror {
        w.with_void_runs()
    } else {
        w
    }
}

/// Takes the sequence numbers `first ..= last` for a group that begins on lane `tag.lane`, before
/// any of it touches a log: each number once per session, on any lane, none applied before the
/// session began, none beyond the session's window. A violation ends the session (the caller
/// closes the lane) and changes nothing.
pub(crate) fn take_seqs(s: &Shared, tag: SessionTag, first: u64, last: u64) -> Result<(), Violation> {
    let mut slot = s.session.lock();
    match slot.current.as_mut() {
        Some(cur) if cur.id == tag.session => cur.seqs.take(tag.lane, first, last),
        // A lane's session stays current until its last lane has left, so this cannot happen;
        // were it to, the lane ends (its session is not this node's) rather than the node.
        other => Err(Violation::Session { found: tag.session, expected: other.map_or(0, |c| c.id) }),
    }
}

/// The lanes whose bits are set in `mask`.
fn lanes_of(mask: u64) -> Vec<u16> {
    (0..64).filter(|l| mask & (1u64 << l) != 0).collect()
}

fn end_locked(cur: &mut Session) {
    cur.ended = true;
    for close in &cur.closers {
        close();
    }
}

/// A lane's connection is done. The last lane out seals the session.
pub(crate) fn leave(s: &Shared, tag: SessionTag, reason: &str) {
    let session = tag.session;
    let mut slot = s.session.lock();
    let Some(cur) = slot.current.as_mut().filter(|c| c.id == session) else {
        return;
    };
    cur.within &= !(1u64 << tag.lane);
    if !cur.ended {
        tracing::info!(session = format!("{session:#x}"), %reason, "primary session ends");
        end_locked(cur);
    } else if !reason.ends_with("end of stream") && !reason.ends_with("shutting down") {
        // A lane that failed on its own (a TLS record that does not verify, say) after another
        // lane ended the session: its reason is not the session's, and is said here.
        tracing::info!(session = format!("{session:#x}"), %reason, "a lane of the ended session ends");
    }
    if cur.within != 0 {
        return;
    }
    s.lanes.end_session(cur.lanes);
    let t0 = std::time::Instant::now();
    checkpoint::seal(s);
    if t0.elapsed() >= SLOW_LEAVE {
        // New sessions wait meanwhile (the slot is held).
        tracing::warn!(
            session = format!("{session:#x}"),
            ms = t0.elapsed().as_millis() as u64,
            "sealing the ended session was slow"
        );
    }
    slot.current = None;
    s.session.left.notify_all();
}

/// A lane of `session` announced a copy: mark the data area inconsistent before any of it lands.
pub(crate) fn copy_begin(s: &Shared, session: u64, total: u64) -> Result<(), StorageError> {
    let mut slot = s.session.lock();
    let Some(cur) = slot.current.as_mut().filter(|c| c.id == session) else { return Ok(()) };
    if cur.copy_open {
        // Another lane's announcement of the same copy.
        return Ok(());
    }
    cur.copy_open = true;
    cur.copy_ended = 0;
    cur.copy_until = 0;
    cur.copy_total = total;
    cur.copy_started = Some(std::time::Instant::now());
    cur.copy_base_bytes = s.stats.bytes_received();
    cur.copy_retry.clear();
    let (flags, _) = s.data.area().copy_state().map_err(StorageError::io("read the copy state"))?;
    s.data
        .area()
        .set_copy_state(flags | FLAG_INCONSISTENT, 0)
        .map_err(StorageError::io("mark the data area inconsistent"))?;
    tracing::info!(
        session = format!("{session:#x}"),
        "a copy begins: the data area is inconsistent until it ends"
    );
    Ok(())
}

/// A lane of `session` ended its part of a copy (or, without CopyBegin, just names the
/// generation). Once every lane has, the data area takes `generation` and is consistent as soon
/// as the last copy group is applied. Without a copy the first lane's CopyEnd is enough: it
/// comes before every group of its lane, so no group is acknowledged, on any lane, before the
/// generation is durable (else a crash could leave applied groups under the old generation,
/// which the primary's next session would call a split brain).
pub(crate) fn copy_end(
    s: &Shared,
    session: u64,
    lane: u16,
    generation: u64,
    last: u64,
) -> Result<(), StorageError> {
    let mut slot = s.session.lock();
    let Some(cur) = slot.current.as_mut().filter(|c| c.id == session) else { return Ok(()) };
    cur.copy_ended |= 1u64 << lane;
    cur.copy_until = cur.copy_until.max(last);
    if cur.copy_open && cur.copy_ended.count_ones() < cur.lanes as u32 {
        return Ok(());
    }
    let (old, old_prev) = s.data.area().generation().map_err(StorageError::io("read the generation"))?;
    if generation != old {
        let prev = if old != 0 { old } else { old_prev };
        s.data.area().set_generation(generation, prev).map_err(StorageError::io("persist the generation"))?;
    }
    cur.copy_ended = 0;
    let until = std::mem::take(&mut cur.copy_until);
    if std::mem::take(&mut cur.copy_open) {
        let (flags, _) = s.data.area().copy_state().map_err(StorageError::io("read the copy state"))?;
        s.data
            .area()
            .set_copy_state(flags | FLAG_INCONSISTENT, until.max(1))
            .map_err(StorageError::io("record the end of the copy"))?;
    }
    drop(slot);
    s.data.consistent();
    Ok(())
}

/// Ends the current session if it is older than `epoch` (a fence).
pub(crate) fn end_older(s: &Shared, epoch: u64) {
    let mut slot = s.session.lock();
    if let Some(cur) = slot.current.as_mut().filter(|c| c.epoch < epoch && !c.ended) {
        tracing::warn!(peer = %cur.peer, session_epoch = cur.epoch, epoch, "ending a session of an older epoch");
        end_locked(cur);
    }
    s.session.left.notify_all();
}

/// Waits until no session is active (its lanes have left and it is sealed).
pub(crate) fn wait_ended(s: &Shared, timeout: Duration) -> Result<(), CommandError> {
    let deadline = std::time::Instant::now() + timeout;
    let mut slot = s.session.lock();
    while let Some(cur) = slot.current.as_mut() {
        end_locked(cur);
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(CommandError::SessionStayed { peer: cur.peer.clone(), timeout });
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
    let cur = slot.current.as_ref().filter(|c| c.copy_open)?;
    let received = s.stats.bytes_received().saturating_sub(cur.copy_base_bytes);
    let seconds = cur.copy_started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    Some(CopyProgress {
        total_bytes: cur.copy_total,
        received_bytes: received.min(cur.copy_total.max(received)),
        remaining_bytes: cur.copy_total.saturating_sub(received),
        seconds,
        mb_per_s: if seconds > 0.0 { received as f64 / 1e6 / seconds } else { 0.0 },
    })
}

/// Copy frames a copy may have waiting to be sent again, at most: more means the link corrupts
/// much of what it carries, and the session ends.
const MAX_COPY_RETRIES: usize = 1024;

/// The Copy frame `[offset, offset + len)` of `session`'s open copy failed its check and did not
/// land; the sender is asked for it again. A violation when too many wait.
pub(crate) fn copy_rejected(s: &Shared, session: u64, offset: u64, len: u64) -> Result<(), Violation> {
    let mut slot = s.session.lock();
    let Some(cur) = slot.current.as_mut().filter(|c| c.id == session) else { return Ok(()) };
    if cur.copy_retry.len() >= MAX_COPY_RETRIES {
        return Err(Violation::CopyNotResent {
            frames: cur.copy_retry.len(),
            first_offset: cur.copy_retry[0].0,
        });
    }
    cur.copy_retry.push((offset, len));
    Ok(())
}

/// The Copy frame `[offset, offset + len)` landed: it settles what it covers of the rejected
/// frames (a resend may cut the same bytes into frames differently).
pub(crate) fn copy_landed(s: &Shared, session: u64, offset: u64, len: u64) {
    let mut slot = s.session.lock();
    if let Some(cur) = slot.current.as_mut().filter(|c| c.id == session && !c.copy_retry.is_empty()) {
        cur.copy_retry = subtract(&cur.copy_retry, offset, offset + len);
    }
}

/// `ranges` (offset, len) without `[lo, hi)`.
fn subtract(ranges: &[(u64, u64)], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for &(o, l) in ranges {
        let end = o + l;
        if end <= lo || o >= hi {
            out.push((o, l));
            continue;
        }
        if o < lo {
            out.push((o, lo - o));
        }
        if end > hi {
            out.push((hi, end - hi));
        }
    }
    out
}

/// Why `session`'s copy cannot end yet: rejected Copy frames not sent again.
pub(crate) fn copy_unsettled(s: &Shared, session: u64) -> Option<Violation> {
    let slot = s.session.lock();
    let cur = slot.current.as_ref().filter(|c| c.id == session)?;
    let &(first_offset, _) = cur.copy_retry.first()?;
    Some(Violation::CopyNotResent { frames: cur.copy_retry.len(), first_offset })
}

/// Whether `session` is the current one and announced a copy.
pub(crate) fn copying(s: &Shared, session: u64) -> bool {
    s.session.lock().current.as_ref().is_some_and(|c| c.id == session && c.copy_open)
}

/// Ends the current session, if any (shutdown).
pub(crate) fn end_current(s: &Shared) {
    let mut slot = s.session.lock();
    if let Some(cur) = slot.current.as_mut() {
        end_locked(cur);
    }
    s.session.left.notify_all();
}

/// The session's id, peer and lane count, for status.
pub(crate) fn describe(s: &Shared) -> Option<(u64, String, u16, u64)> {
    s.session.lock().current.as_ref().map(|c| (c.id, c.peer.clone(), c.lanes, c.next_seq))
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

    #[test]
    fn a_landed_frame_settles_what_it_covers_of_rejected_ones() {
        let rejected = [(0, 4096), (4096, 256 << 10), (1 << 20, 100)];
        // A resend cut from offset 0 in 256 KiB frames covers the first whole, the second in part.
        assert_eq!(subtract(&rejected, 0, 256 << 10), [(256 << 10, 4096), (1 << 20, 100)]);
        assert_eq!(subtract(&[(256 << 10, 4096)], 256 << 10, 512 << 10), []);
        // A frame inside a rejected one leaves both sides.
        assert_eq!(subtract(&[(0, 100)], 10, 20), [(0, 10), (20, 80)]);
        assert_eq!(subtract(&[(0, 100)], 100, 200), [(0, 100)]);
    }
}
