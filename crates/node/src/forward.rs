//! The secondary tier: a mirror feeds its backups in the background.
//!
//! Every group the checkpointer applies joins the forward queue, in sequence order. One thread
//! per backup sends the queue's groups over an authenticated lane, straight from this node's
//! log (the records keep their checksums; only the session fields of their headers change), and
//! sequence numbers that carry no group here go as Skip frames, so the backup applies exactly the
//! groups this node applied, in the same order: its data area is always this node's as of some
//! earlier sequence number. A group leaves the queue, and its log space may be reused, once every
//! backup has acknowledged it. When a lane may acknowledge a group is the core's ack gate
//! (`mojim_core::mirror::ack`): when the queue and the groups not yet applied hold more than
//! `secondary_tier_thresh` bytes, lanes stop acknowledging new groups until forwarding catches
//! up (the paper's stall), and in chain mode a lane acknowledges a group only once every backup
//! has it; [`wait_to_ack`] waits as the gate says.
//!
//! A group in a log a peer can write at any time (offered over UCX) is not sent straight from
//! the log: the peer could have changed it since this node checked it. It goes from a copy of
//! the link's, checked against the seal this node made of what it checked (`group_seal`); a
//! group that no longer matches is never sent: the link ends, the violation is counted, and the
//! backup gets this node's data area (a full copy) instead.

use super::forward_error::ForwardError;
use super::group_seal::{copy_form, records, sealed_header, GroupSealer, Seal};
use super::operator_command_error::BackupError;
use super::Shared;
use mojim::config::RegionId;
use mojim_core::checkpoint::GroupRef;
use mojim_core::encode::{copy_header, SessionTag};
use mojim_core::mirror::{AckDecision, AckGate, AckRule, AckView, Hold, NoAck};
use mojim_format::handshake::PeerRole;
use mojim_format::handshake::Welcome;
use mojim_format::log::record_at_verified;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_transport::connect::{connect, Intro};
use mojim_transport::{Conn, Transport};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Frames written per `writev`.
const BATCH: usize = 32;
/// How long to wait before connecting again to a backup that failed.
const RETRY: Duration = Duration::from_millis(200);
/// Most backups one node feeds (each is a thread, a connection, and log space held for it).
pub const MAX_BACKUPS: usize = 16;

/// One backup link, as status shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BackupStatus {
    pub addr: String,
    pub connected: bool,
    /// Highest sequence number the backup acknowledged.
    pub acked_seq: u64,
    /// Groups and bytes applied here but not yet acknowledged by this backup.
    pub lag_groups: usize,
    pub lag_bytes: u64,
    /// Seconds since the oldest of those groups was applied here (0 when there is none): how
    /// far behind this node the backup's copy is in time.
    #[serde(default)]
    pub lag_seconds: f64,
    pub error: Option<String>,
    /// The backup needs a full copy that waits for this node's own copy (new, wiped, or
    /// inconsistent) to be complete; until then it does not hold back this node's log.
    pub needs_copy: bool,
    /// A full copy to this backup: bytes sent of the total (0 of 0 when none ran).
    #[serde(default)]
    pub copy_sent: u64,
    #[serde(default)]
    pub copy_total: u64,
    /// A full copy to the backup began and the backup has not yet confirmed that all of it
    /// landed: `acked_seq` is the copy's base, which the backup holds only once it has (until then
    /// its copy is inconsistent).
    #[serde(default)]
    pub copying: bool,
}

#[derive(Default)]
struct FwdState {
    /// Applied groups not yet acknowledged by every backup, in sequence order, each with when
    /// it was applied here (a group recovered at start: when the node started) and, for a group
    /// of a log a peer can write at any time, its seal (`group_seal`).
    queue: VecDeque<(GroupRef, Instant, Option<Seal>)>,
    /// Seals of groups being applied, by sequence number, until the groups join the queue.
    seals: Vec<(u64, Seal)>,
    /// Links whose backup must get a full copy on their next connection: a group they were
    /// to be sent was changed in the log after this node checked it.
    resync: Vec<u64>,
    queue_bytes: u64,
    /// The highest sequence number every backup has (groups up to it left the queue).
    base: u64,
    /// Each backup link's id (its thread's, stable while others come and go) and state.
    links: Vec<(u64, BackupStatus)>,
    next_id: u64,
    /// Times a lane waited for forwarding to catch up, and for how long in all.
    stalls: u64,
    stalled_micros: u64,
}

/// The forwarder: the queue of applied groups not yet at every backup, and each backup link's
/// state. Its link threads are this module's; the rest of the node reaches it through its
/// methods and this module's functions.
///
/// Locks (see the lock order in lib.rs): `state`, with `cv` (link threads and stalled lanes
/// wait on it). Under it: the checkpointer's state ([`wait_to_ack`], and whatever
/// [`Forward::report`] is given).
pub(crate) struct Forward {
    state: Mutex<FwdState>,
    cv: Condvar,
    /// How many links there are, read without the lock by lanes that have none to wait for.
    count: AtomicUsize,
    /// Starts a link's thread (set once the node serves, [`start`]).
    spawn: OnceLock<Spawner>,
    /// Every link thread started, joined when the node stops.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The key of groups' seals.
    sealer: GroupSealer,
    /// Groups being sent straight from a log no peer writes ([`UnsealedSend`]).
    unsealed_sends: AtomicUsize,
}

/// Starts the thread of link `id` to the backup at the address given.
type Spawner = Box<dyn Fn(u64, String) -> std::io::Result<std::thread::JoinHandle<()>> + Send + Sync>;

/// The forwarder as status shows it.
pub(crate) struct ForwardReport {
    pub backups: Vec<BackupStatus>,
    /// Times lanes waited for forwarding to catch up, and for how long in all.
    pub stalls: u64,
    pub stalled_micros: u64,
}

fn lock(f: &Forward) -> MutexGuard<'_, FwdState> {
    f.state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Forward {
    /// Forwarding state for `backups`, whose queue starts after `base` and holds `groups`
    /// (recovered from the logs, to send to the backups again).
    pub fn new(backups: &[String], base: u64, groups: &[GroupRef]) -> Forward {
        let links: Vec<(u64, BackupStatus)> = backups
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64, BackupStatus { addr: a.clone(), ..Default::default() }))
            .collect();
        let count = AtomicUsize::new(links.len());
        let mut st = FwdState { base, next_id: links.len() as u64, links, ..Default::default() };
        let now = Instant::now();
        for g in groups {
            st.push(g, now);
        }
        Forward {
            state: Mutex::new(st),
            cv: Condvar::new(),
            count,
            spawn: OnceLock::new(),
            threads: Mutex::new(Vec::new()),
            sealer: GroupSealer::new(),
            unsealed_sends: AtomicUsize::new(0),
        }
    }

    /// The key groups are sealed with.
    pub fn sealer(&self) -> &GroupSealer {
        &self.sealer
    }

    /// Takes `seals`, of groups just applied by sequence number, for when the groups join the
    /// queue (`seals` is left empty, its capacity kept).
    pub fn sealed(&self, seals: &mut Vec<(u64, Seal)>) {
        if !seals.is_empty() {
            lock(self).seals.append(seals);
        }
    }

    /// Queues groups just applied (in sequence order) for the backups.
    pub fn queue_applied(&self, done: &[GroupRef]) {
        if done.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut st = lock(self);
        for g in done {
            st.push(g, now);
        }
        // Seals of groups whose write failed: those stay in the log, for recovery.
        let last = done[done.len() - 1].seq;
        st.seals.retain(|(seq, _)| *seq > last);
        drop(st);
        self.cv.notify_all();
    }

    /// The highest sequence number every backup has acknowledged.
    pub fn min_acked(&self) -> u64 {
        lock(self).min_acked()
    }

    /// The forwarder's status, and what `under` returns, called with the forwarding state held
    /// (so that nothing applied meanwhile joins the queue).
    pub fn report<R>(&self, under: impl FnOnce() -> R) -> (ForwardReport, R) {
        let st = lock(self);
        let r = under();
        let report =
            ForwardReport { backups: st.links(), stalls: st.stalls, stalled_micros: st.stalled_micros };
        (report, r)
    }
}

impl FwdState {
    /// The highest sequence number every backup has acknowledged.
    fn min_acked(&self) -> u64 {
        self.links
            .iter()
            .map(|(_, l)| l)
            .filter(|l| !l.needs_copy)
            .map(|l| l.acked_seq)
            .min()
            .unwrap_or(u64::MAX)
            .max(self.base)
    }

    /// Queues a group applied at `at` for the backups.
    fn push(&mut self, g: &GroupRef, at: Instant) {
        if let Some((last, _, _)) = self.queue.back() {
            assert!(g.first_seq > last.seq, "forward queue out of order: {last:?} then {g:?}");
        }
        let seal = self.seals.iter().position(|(seq, _)| *seq == g.seq).map(|i| self.seals.swap_remove(i).1);
        self.queue_bytes += g.bytes;
        self.queue.push_back((*g, at, seal));
        // A group no backup waits for (all of them need a full copy) leaves at once; a backup
        // that is merely down still holds it.
        self.trim();
    }

    /// Drops the groups every backup has.
    fn trim(&mut self) {
        let min = self.min_acked();
        while self.queue.front().is_some_and(|(g, _, _)| g.seq <= min) {
            let (g, _, _) = self.queue.pop_front().expect("front exists");
            self.queue_bytes -= g.bytes;
            self.base = g.seq;
        }
    }

    /// The groups after `acked`, their bytes, and how long ago the first of them was applied
    /// (zero when there is none), as of `now`.
    fn lag_of(&self, acked: u64, now: Instant) -> (usize, u64, Duration) {
        let at = self.queue.partition_point(|(g, _, _)| g.seq <= acked);
        let behind = self.queue.range(at..);
        let bytes = behind.clone().map(|(g, _, _)| g.bytes).sum();
        let age = self.queue.get(at).map_or(Duration::ZERO, |(_, t, _)| now.saturating_duration_since(*t));
        (behind.len(), bytes, age)
    }

    /// Link `id`'s state; `None` once it was removed.
    fn link(&mut self, id: u64) -> Option<&mut BackupStatus> {
        self.links.iter_mut().find(|(i, _)| *i == id).map(|(_, l)| l)
    }

    /// Status of every link.
    fn links(&self) -> Vec<BackupStatus> {
        let now = Instant::now();
        self.links
            .iter()
            .map(|(_, l)| {
                let (lag_groups, lag_bytes, age) = self.lag_of(l.acked_seq, now);
                BackupStatus { lag_groups, lag_bytes, lag_seconds: age.as_secs_f64(), ..l.clone() }
            })
            .collect()
    }
}

/// Starts one thread per backup named at start; each reaches its backup over `transport`, as do
/// those [`add`]ed later.
pub(crate) fn start<T: Transport>(s: &Arc<Shared>, transport: &Arc<T>) -> std::io::Result<()> {
    let f = &s.forward;
    // The spawner holds the node weakly: the node holds the spawner.
    let (weak, t): (Weak<Shared>, _) = (Arc::downgrade(s), transport.clone());
    let spawner: Spawner = Box::new(move |id, addr| {
        let (s, t) = (weak.clone(), t.clone());
        std::thread::Builder::new().name(format!("mojim-fwd-{id}")).spawn(move || {
            if let Some(s) = s.upgrade() {
                link_loop(&s, &*t, id, &addr);
            }
        })
    });
    let spawner = f.spawn.get_or_init(|| spawner);
    let links: Vec<(u64, String)> = lock(f).links.iter().map(|(i, l)| (*i, l.addr.clone())).collect();
    let mut threads = f.threads.lock().unwrap_or_else(|p| p.into_inner());
    for (id, addr) in links {
        threads.push(spawner(id, addr)?);
    }
    Ok(())
}

/// A group being sent straight from a log no peer writes, counted while it is (so that
/// [`expose`] can wait for it).
struct UnsealedSend<'a>(&'a AtomicUsize);

impl UnsealedSend<'_> {
    /// Counts a send; taken with the forwarding state locked, where the group was picked.
    fn begin(f: &Forward) -> UnsealedSend<'_> {
        f.unsealed_sends.fetch_add(1, Ordering::SeqCst);
        UnsealedSend(&f.unsealed_sends)
    }
}

impl Drop for UnsealedSend<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Marks `lane`'s log as written by a peer at any time (`Lanes::expose`), before it is offered
/// to one. The groups of that lane still queued for the backups were applied while no peer
/// could write the log (or recovered at start): they are sealed first, from the log as this
/// node checked it, and the sends straight from the log that began before are waited for. From
/// then on the checkpointer copies, checks and seals every group of the lane, and the links
/// send only what matches a group's seal.
pub(crate) fn expose(s: &Shared, lane: u16) {
    let f = &s.forward;
    // As the applier: no group is half applied (written unsealed and not yet queued), and none
    // is applied until the lane is marked.
    let _applier = s.ckpt.applier();
    let unsealed: Vec<GroupRef> = {
        let st = lock(f);
        // Marked with the forwarding state held: a link that picks a group of the lane from now
        // on sees the mark, and waits for the group's seal.
        s.lanes.expose(lane);
        st.queue
            .iter()
            .filter(|(g, _, seal)| g.lane == lane && g.bytes > 0 && seal.is_none())
            .map(|e| e.0)
            .collect()
    };
    while f.unsealed_sends.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    if unsealed.is_empty() {
        return;
    }
    let mut form = Vec::new();
    let seals: Vec<(u64, Seal)> = unsealed
        .iter()
        .map(|g| match copy_form(s.lanes.log_holding(g).area(), g, super::MAX_FRAME_LIMIT, &mut form) {
            Ok(()) => (g.seq, f.sealer.seal(g.seq, &form)),
            // No longer whole (damage: no peer could write it yet): a seal nothing matches, so
            // its link finds it changed and gives the backup a full copy instead.
            Err(_) => (g.seq, [0u8; 16]),
        })
        .collect();
    let mut st = lock(f);
    for (g, _, seal) in st.queue.iter_mut() {
        if let Some((_, made)) = seals.iter().find(|(seq, _)| *seq == g.seq) {
            *seal = Some(*made);
        }
    }
    drop(st);
    f.cv.notify_all();
    tracing::info!(
        lane,
        groups = seals.len(),
        "sealed the queued groups of a log offered to a peer that writes at any time"
    );
}

/// Joins every link thread (once the node's `shutdown` is set).
pub(crate) fn join(s: &Shared) {
    let threads = std::mem::take(&mut *s.forward.threads.lock().unwrap_or_else(|p| p.into_inner()));
    s.forward.cv.notify_all();
    for t in threads {
        let _ = t.join();
    }
}

/// Starts feeding the backup at `addr` while the node serves, as one named at start would be
/// fed: it holds this node's log from now on, gets a full copy if it lacks what the log keeps,
/// then follows the groups. Refuses this node's own address, one already fed, and more than
/// [`MAX_BACKUPS`].
pub(crate) fn add(s: &Shared, addr: &str) -> Result<serde_json::Value, BackupError> {
    let f = &s.forward;
    let Some(spawner) = f.spawn.get() else {
        return Err(BackupError::NotServing);
    };
    let listening = s.stats.listen_addr();
    if addr.is_empty() || addr == s.opts.listen || addr == listening {
        return Err(BackupError::OwnAddress(addr.to_string()));
    }
    if !is_address(addr) {
        return Err(BackupError::NotAnAddress(addr.to_string()));
    }
    let mut threads = f.threads.lock().unwrap_or_else(|p| p.into_inner());
    let id = {
        let mut st = lock(f);
        if st.links.iter().any(|(_, l)| l.addr == addr) {
            return Err(BackupError::AlreadyFed(addr.to_string()));
        }
        if st.links.len() >= MAX_BACKUPS {
            return Err(BackupError::TooMany { fed: st.links.len(), max: MAX_BACKUPS });
        }
        if s.data.is_primary() {
            return Err(BackupError::Primary);
        }
        let id = st.next_id;
        st.next_id += 1;
        st.links.push((id, BackupStatus { addr: addr.to_string(), ..Default::default() }));
        f.count.store(st.links.len(), Ordering::SeqCst);
        id
    };
    // Threads of links removed before, finished by now or soon.
    threads.retain(|t| !t.is_finished());
    match spawner(id, addr.to_string()) {
        Ok(t) => threads.push(t),
        Err(e) => {
            drop(threads);
            remove_link(f, addr);
            return Err(BackupError::Start { addr: addr.to_string(), source: e });
        }
    }
    tracing::warn!(backup = %addr, "backup added: feeding it from now on (not kept across a restart)");
    Ok(serde_json::json!({ "added": addr, "backups": backup_addrs(f) }))
}

/// Whether `addr` can be a node's address: a shared-memory socket's absolute path, or
/// `[ucx:]host:port`.
fn is_address(addr: &str) -> bool {
    if mojim_transport::shm::is_shm_addr(addr) {
        return true;
    }
    let hp = addr.strip_prefix("ucx:").unwrap_or(addr);
    hp.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
}

/// Stops feeding the backup at `addr`: its link ends, and the log space held for it alone is
/// released at the next reclaim.
pub(crate) fn remove(s: &Shared, addr: &str) -> Result<serde_json::Value, BackupError> {
    let f = &s.forward;
    if !remove_link(f, addr) {
        return Err(BackupError::NotABackup { addr: addr.to_string(), fed: backup_addrs(f) });
    }
    // Wake the checkpointer: what only this backup held may be released now.
    s.ckpt.wake();
    tracing::warn!(backup = %addr, "backup removed: no longer fed (not kept across a restart)");
    Ok(serde_json::json!({ "removed": addr, "backups": backup_addrs(f) }))
}

fn remove_link(f: &Forward, addr: &str) -> bool {
    let mut st = lock(f);
    let before = st.links.len();
    st.links.retain(|(_, l)| l.addr != addr);
    let removed = st.links.len() < before;
    f.count.store(st.links.len(), Ordering::SeqCst);
    st.trim();
    drop(st);
    f.cv.notify_all();
    removed
}

fn backup_addrs(f: &Forward) -> Vec<String> {
    lock(f).links.iter().map(|(_, l)| l.addr.clone()).collect()
}

/// Waits until the core's ack gate ([`AckGate`]) lets a lane acknowledge group `seq`: under
/// `secondary_tier_thresh`, and in chain mode once every backup has the group. The gate decides;
/// this runs its decisions: applies inline when it asks, and waits on the forwarder's condition
/// variable (a backup's acknowledgement, a group queued) or 10 ms, whichever comes first.
///
/// `beat` runs after each wait, so the lane can send heartbeats; it returns false once the
/// lane's connection is gone (its session ended), and the wait ends with it: nothing will be
/// acknowledged there, and the session cannot be sealed, nor a new one begin, until the lane
/// leaves. A failed storage frees nothing more: the wait ends with its message, and the lane
/// must not acknowledge. The time spent over the threshold is counted as a stall.
pub(crate) fn wait_to_ack(s: &Shared, seq: u64, beat: &mut dyn FnMut() -> bool) -> Result<(), AckRefused> {
    let f = &s.forward;
    let rule = AckRule { secondary_tier_thresh: s.opts.secondary_tier_thresh, chain: s.opts.chain };
    let mut gate = AckGate::new(rule, seq);
    let mut alive = true;
    // With no backup the gate is open: no lock to take.
    if f.count.load(Ordering::SeqCst) == 0 {
        let view = AckView {
            backups: 0,
            queued_bytes: 0,
            waiting_bytes: 0,
            all_acked_seq: 0,
            data_failed: false,
            lane_alive: alive,
            shutting_down: false,
        };
        return match gate.decide(&view) {
            AckDecision::Ack => Ok(()),
            other => unreachable!("the ack gate without backups decided {other:?}"),
        };
    }
    let mut stalled: Option<Instant> = None;
    let mut st = lock(f);
    loop {
        let view = AckView {
            backups: st.links.len(),
            queued_bytes: st.queue_bytes,
            waiting_bytes: s.ckpt.ready_bytes(),
            all_acked_seq: st.min_acked(),
            data_failed: s.data.failed().is_some(),
            lane_alive: alive,
            shutting_down: s.shutdown.load(Ordering::SeqCst),
        };
        let decision = gate.decide(&view);
        let over = matches!(
            decision,
            AckDecision::ApplyInline(Hold::OverThreshold { .. })
                | AckDecision::Wait(Hold::OverThreshold { .. })
        );
        // A stall lasts while the threshold's gate holds the lane.
        if !over {
            if let Some(t0) = stalled.take() {
                st.stalled_micros += t0.elapsed().as_micros() as u64;
            }
        }
        match decision {
            AckDecision::Ack => return Ok(()),
            AckDecision::Refuse(NoAck::LaneGone) => return Err(AckRefused::LaneGone),
            AckDecision::Refuse(NoAck::DataFailed) => {
                let msg = s.data.failed().cloned().unwrap_or_else(|| "the data area failed".into());
                return Err(AckRefused::Storage(ForwardError::Local(msg)));
            }
            AckDecision::ApplyInline(hold) => {
                if matches!(hold, Hold::OverThreshold { .. }) {
                    st.stalls += 1;
                    stalled = Some(Instant::now());
                }
                // What waits to be applied cannot be forwarded yet: apply it now.
                drop(st);
                super::checkpoint::apply_inline(s);
                st = lock(f);
            }
            AckDecision::Wait(_) => {
                st = f.cv.wait_timeout(st, Duration::from_millis(10)).unwrap_or_else(|p| p.into_inner()).0;
                drop(st);
                alive = beat();
                st = lock(f);
            }
        }
    }
}

/// Why a lane's wait at the ack gate ended without an acknowledgement.
#[derive(Debug)]
pub(crate) enum AckRefused {
    /// This node's storage failed (its message).
    Storage(ForwardError),
    /// The lane's connection is gone: its heartbeat failed.
    LaneGone,
}

/// Waits until every backup has acknowledged `seq`, at most `timeout`. Returns whether they all
/// did (a backup that is down, needs a full copy, or has not landed one yet did not).
pub(crate) fn wait_all_acked(s: &Shared, seq: u64, timeout: Duration) -> bool {
    let f = &s.forward;
    let deadline = Instant::now() + timeout;
    let mut st = lock(f);
    loop {
        if st.links.iter().all(|(_, l)| !l.copying && l.acked_seq >= seq) {
            return true;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        st = f.cv.wait_timeout(st, left.min(Duration::from_millis(10))).unwrap_or_else(|p| p.into_inner()).0;
    }
}

/// Edits link `id`'s state; returns false (editing nothing) once the link was removed.
fn set_link(s: &Shared, id: u64, edit: impl FnOnce(&mut BackupStatus)) -> bool {
    lock(&s.forward).link(id).map(edit).is_some()
}

/// Whether link `id` was removed.
fn removed(s: &Shared, id: u64) -> bool {
    lock(&s.forward).link(id).is_none()
}

fn link_loop<T: Transport>(s: &Shared, t: &T, id: u64, addr: &str) {
    while !s.shutdown.load(Ordering::SeqCst) && !removed(s, id) {
        if s.data.is_primary() {
            set_link(s, id, |l| {
                l.connected = false;
                l.error = Some("this node's copy is the primary's: it feeds no backup".into());
            });
            std::thread::sleep(RETRY);
            continue;
        }
        if let Err(e) = serve_link(s, t, id, addr) {
            if removed(s, id) {
                break;
            }
            if let ForwardError::LogChanged(what) = &e {
                s.stats.violation();
                s.stats.set_last_violation(format!("the feed of backup {addr}: {what}"));
                lock(&s.forward).resync.push(id);
            }
            if !s.shutdown.load(Ordering::SeqCst) {
                tracing::warn!(backup = %addr, error = %e, "backup link down; retrying");
            }
            set_link(s, id, |l| {
                l.connected = false;
                l.error = Some(e.to_string());
            });
        }
        std::thread::sleep(RETRY);
    }
}

/// Connects a session to the backup.
fn open_session<T: Transport>(
    s: &Shared,
    t: &T,
    addr: &str,
) -> Result<(T::Conn, Welcome, Intro), ForwardError> {
    let intro = Intro {
        role: PeerRole::Mirror,
        region: RegionId { uuid: s.opts.region.uuid, size: s.opts.region.size },
        epoch: s.session.epoch(),
        session: mojim_transport::random::u64() | 1,
        lane: 0,
        lanes: 1,
        max_frame: super::MAX_FRAME_LIMIT,
        generation: s.data.area().generation().map(|g| g.0).unwrap_or(0),
        place: false,
        encrypt_placed: false,
    };
    let (conn, welcome) = connect(t, addr, Duration::from_secs(5), &s.opts.secret.0, &intro)?;
    Ok((conn, welcome, intro))
}

/// One connection to a backup: handshake, catch up from where it is (from the log, or by a full
/// copy when the log no longer holds what it lacks or its copy follows another history), then
/// follow the queue.
fn serve_link<T: Transport>(s: &Shared, t: &T, id: u64, addr: &str) -> Result<(), ForwardError> {
    let f = &s.forward;
    let (mut conn, mut welcome, mut intro) = open_session(s, t, addr)?;
    let generation = s.data.area().generation().map(|g| g.0).unwrap_or(0);
    let have = welcome.next_seq - 1;
    let has_history = welcome.generation != 0 || have > 0;
    let other_history = has_history && welcome.generation != generation;
    let behind = have < lock(f).base;
    // A group it was to be sent was changed in this node's log after this node checked it: it
    // gets this node's data area, which holds what was checked.
    let changed = {
        let mut st = lock(f);
        let before = st.resync.len();
        st.resync.retain(|&l| l != id);
        st.resync.len() < before
    };
    // A backup's consistent copy is never replaced by a worse one: not by this node's while it
    // has none (new or wiped: generation 0, and its numbers would restart below the backup's),
    // nor while this node's own copy is inconsistent (a copy into it runs). The backup waits,
    // holding nothing back, until this node's copy is complete.
    let replace = welcome.inconsistent || other_history || behind || changed;
    let wait = if generation == 0 && has_history {
        Some("this node has no copy of the region yet (generation 0); the backup keeps its own until it has")
    } else if replace && !s.data.consistent() {
        Some("this node's copy is inconsistent (a copy into it runs); the backup keeps its own until it is complete")
    } else {
        None
    };
    if let Some(why) = wait {
        conn.shutdown();
        {
            let mut st = lock(f);
            if let Some(l) = st.link(id) {
                l.connected = false;
                l.needs_copy = true;
                l.error = Some(why.into());
            }
            st.trim();
        }
        f.cv.notify_all();
        return Ok(());
    }
    let mut feed = Feed { sent_generation: 0, copy: None };
    let have = if replace {
        let why = if changed {
            "a group it was to be sent was changed in this node's log after this node checked it".to_string()
        } else if welcome.inconsistent {
            "its copy is inconsistent".to_string()
        } else if other_history {
            format!("its copy follows generation {:#x}, this node's {generation:#x}", welcome.generation)
        } else {
            format!("it has groups up to {have} but this node keeps groups only after {}", lock(f).base)
        };
        tracing::warn!(backup = %addr, %why, "the backup needs a full copy");
        conn.shutdown();
        let base = pin_for_copy(s, id)?;
        reset_backup(s, t, addr, base)?;
        (conn, welcome, intro) = open_session(s, t, addr)?;
        if welcome.next_seq != base + 1 {
            return Err(ForwardError::BackupMisbehaved(format!(
                "the backup was reset to {base} but resumes at {}",
                welcome.next_seq
            )));
        }
        let tag = Tag { session: intro.session, epoch: intro.epoch, max_frame: welcome.max_frame };
        full_copy(s, id, &mut conn, &tag, generation)?;
        confirm_landed(s, &mut conn, &tag)?;
        feed.sent_generation = generation;
        base
    } else {
        have
    };
    let epoch = intro.epoch;
    {
        let mut st = lock(f);
        let Some(l) = st.link(id) else { return Err(ended_by_removal()) };
        l.connected = true;
        l.error = None;
        l.needs_copy = false;
        l.copying = false;
        l.acked_seq = have;
        st.trim();
    }
    f.cv.notify_all();
    tracing::info!(backup = %addr, from = have + 1, base = lock(f).base, "feeding backup");
    let tag = Tag { session: intro.session, epoch, max_frame: welcome.max_frame };
    let local = |e: std::io::Error| ForwardError::Local(e.to_string());
    let mut acks = conn.try_clone().map_err(local)?;
    acks.set_recv_timeout(Some(s.opts.heartbeat.timeout)).map_err(local)?;
    let closer = conn.try_clone().map_err(local)?;
    let reader_closer = conn.try_clone().map_err(local)?;
    // The side that failed first says why; the other one only saw the connection closed.
    let first_error = std::sync::OnceLock::new();
    std::thread::scope(|scope| {
        let first_error = &first_error;
        let reader = scope.spawn(move || {
            let r = read_acks(s, id, &mut acks);
            if let Err(e) = &r {
                let _ = first_error.set(e.clone());
            }
            // A link whose acknowledgements stopped is down: make the sender notice too.
            reader_closer.shutdown();
            r
        });
        let sent = send_loop(s, id, &mut conn, &tag, have, feed);
        if let Err(e) = &sent {
            let _ = first_error.set(e.clone());
        }
        closer.shutdown();
        let read = reader.join().unwrap_or_else(|_| Err(ForwardError::Bug("ack reader panicked".into())));
        sent.and(read).map_err(|e| first_error.get().cloned().unwrap_or(e))
    })
}

struct Tag {
    session: u64,
    epoch: u64,
    max_frame: u32,
}

/// Keeps every group after what this node has applied until the backup acknowledges it, and
/// returns that number: the copy starts from it.
fn pin_for_copy(s: &Shared, id: u64) -> Result<u64, ForwardError> {
    let f = &s.forward;
    // As the applier, no group is half applied: what is applied is also queued.
    let _applier = s.ckpt.applier();
    let mut st = lock(f);
    let base = st.queue.back().map_or(st.base, |(g, _, _)| g.seq);
    let Some(l) = st.link(id) else { return Err(ended_by_removal()) };
    l.needs_copy = false;
    l.connected = false;
    l.copying = true;
    l.error = None;
    l.acked_seq = base;
    l.copy_total = s.opts.region.size;
    l.copy_sent = 0;
    Ok(base)
}

/// Why a link's work stops when an operator removed the backup.
fn ended_by_removal() -> ForwardError {
    ForwardError::Ended("the backup was removed (`mojim backup remove`)".into())
}

/// Tells the backup (over an operator's connection) to forget its logs and start at `base`.
fn reset_backup<T: Transport>(s: &Shared, t: &T, addr: &str, base: u64) -> Result<(), ForwardError> {
    let mut last = None;
    for _ in 0..50 {
        let r =
            crate::admin_client::AdminClient::connect_with(t, addr, &s.opts.secret, Duration::from_secs(5))
                .and_then(|mut a| a.command(&format!(r#"{{"op":"reset","base":{base}}}"#)));
        match r {
            Ok(_) => return Ok(()),
            // The session just closed may not be sealed yet.
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(match last {
        Some(e) => ForwardError::reaching(&e, format!("cannot reset the backup for a full copy: {e}")),
        None => ForwardError::Bug("cannot reset the backup for a full copy: no attempt made".into()),
    })
}

/// Copies the whole data area of this node (whose copy is consistent) to the backup:
/// CopyBegin, Copy frames, and CopyEnd at the group the backup's copy is complete at. If this
/// node's copy became inconsistent meanwhile (a copy into it began), the link ends and the
/// backup's copy is redone once this node's is complete.
fn full_copy<C: Conn>(
    s: &Shared,
    id: u64,
    conn: &mut C,
    tag: &Tag,
    generation: u64,
) -> Result<(), ForwardError> {
    let size = s.opts.region.size;
    let mut copy = OpenCopy::begin(s, conn, tag)?;
    let t0 = Instant::now();
    copy.send_range(s, conn, tag, 0, size, |sent| set_link(s, id, |l| l.copy_sent = sent))?;
    let until = copy.complete_at(s).ok_or_else(|| {
        ForwardError::Ended(
            "a copy into this node began during the full copy to the backup; it is redone once this node's copy is complete"
                .into(),
        )
    })?;
    send_control(conn, tag, FrameKind::CopyEnd, generation, until)?;
    let secs = t0.elapsed().as_secs_f64();
    tracing::info!(
        bytes = size,
        seconds = secs,
        mb_per_s = size as f64 / 1e6 / secs.max(1e-9),
        until,
        "full copy sent to backup"
    );
    Ok(())
}

/// Waits until the backup has landed everything sent to it. A backup's lane handles frames in
/// order and answers a Heartbeat with one; in a full copy's session it sends nothing by itself
/// (it beats unasked only while a group waits for log room or for its own backups, and this
/// session has no group yet), so the first frame back answers a Heartbeat sent after CopyEnd:
/// every Copy frame has landed and CopyEnd was applied. Sending the frames is not enough: several
/// MiB of them can still wait in the sockets' buffers, and a status that counted the copy's
/// base as acknowledged meanwhile would let a reader compare the backup, or a promotion's drain
/// count on it, before its copy is whole.
fn confirm_landed<C: Conn>(s: &Shared, conn: &mut C, tag: &Tag) -> Result<(), ForwardError> {
    send_control(conn, tag, FrameKind::Heartbeat, 0, 0)?;
    conn.set_recv_timeout(Some(s.opts.heartbeat.timeout)).map_err(|e| ForwardError::Local(e.to_string()))?;
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    conn.read_exact(&mut hb)
        .map_err(|e| ForwardError::Lost(format!("wait for the backup to land the full copy: {e}")))?;
    match FrameHeader::decode(&hb)
        .map_err(|e| ForwardError::BackupMisbehaved(format!("bad frame from backup: {e}")))?
        .kind
    {
        FrameKind::Heartbeat => Ok(()),
        k => Err(ForwardError::BackupMisbehaved(format!(
            "unexpected {k:?} frame from the backup while it landed the full copy"
        ))),
    }
}

/// What a backup link feeds besides groups: the generation id it last sent, and the copy into
/// the backup not yet closed with CopyEnd.
struct Feed {
    sent_generation: u64,
    copy: Option<OpenCopy>,
}

/// Copy frames sent to a backup since its CopyBegin (a full copy, or the bytes of Copied
/// groups, which may be forwarded while this node's own copy runs). The backup's copy is
/// consistent once it has applied every group whose bytes those frames could hold, and the
/// groups of this node's own copy, if one is running.
struct OpenCopy {
    /// The highest group written to this node's data area when it was read for the frames.
    read_through: u64,
    buf: Vec<u8>,
}

impl OpenCopy {
    fn begin<C: Conn>(s: &Shared, conn: &mut C, tag: &Tag) -> Result<OpenCopy, ForwardError> {
        let size = s.opts.region.size;
        send_control(conn, tag, FrameKind::CopyBegin, mojim::history::CopyKind::Full as u64, size)?;
        // A Copy frame is not bound by the backup's max_frame.
        let chunk = (tag.max_frame as u64).max(256 << 10).min(mojim_format::copied::MAX_COPY_BODY as u64);
        Ok(OpenCopy { read_through: 0, buf: vec![0u8; chunk as usize] })
    }

    /// Sends `[off, off + len)` of the data area as Copy frames; `progress` gets the bytes sent,
    /// and returns false to stop the copy (its backup was removed).
    fn send_range<C: Conn>(
        &mut self,
        s: &Shared,
        conn: &mut C,
        tag: &Tag,
        off: u64,
        len: u64,
        mut progress: impl FnMut(u64) -> bool,
    ) -> Result<(), ForwardError> {
        let chunk = self.buf.len() as u64;
        let mut at = off;
        while at < off + len {
            let n = chunk.min(off + len - at) as usize;
            {
                // A failed write may have left part of a group in the data area.
                let held = s
                    .data
                    .read()
                    .map_err(|msg| ForwardError::Local(format!("the data area cannot be copied: {msg}")))?;
                held.read(at, &mut self.buf[..n])
                    .map_err(|e| ForwardError::Local(format!("read the data area: {e}")))?;
                self.read_through = self.read_through.max(held.written_seq());
            }
            let session = SessionTag { session: tag.session, epoch: tag.epoch, lane: 0 };
            let h = copy_header(session, at, &self.buf[..n]);
            conn.send_all_vectored(&mut [IoSlice::new(&h), IoSlice::new(&self.buf[..n])])
                .map_err(|e| ForwardError::Lost(format!("send copy at {at}: {e}")))?;
            at += n as u64;
            if !progress(at - off) {
                return Err(ended_by_removal());
            }
            if s.shutdown.load(Ordering::SeqCst) {
                return Err(ForwardError::Ended("shutting down".into()));
            }
        }
        Ok(())
    }

    /// Where the backup's copy is complete, once that is known: not while this node's own
    /// copy is running and its last group is not yet known.
    fn complete_at(&self, s: &Shared) -> Option<u64> {
        let (flags, until) = s.data.area().copy_state().ok()?;
        let mine = if flags & mojim_format::region::FLAG_INCONSISTENT == 0 {
            s.ckpt.applied_seq()
        } else if until != 0 {
            until
        } else {
            return None;
        };
        Some(mine.max(self.read_through))
    }
}

/// Sends CopyEnd to the backup when its history changes: with the point its open copy is
/// complete at, once known, else just the new generation id.
fn announce<C: Conn>(s: &Shared, conn: &mut C, tag: &Tag, feed: &mut Feed) -> Result<(), ForwardError> {
    let generation = s.data.area().generation().map(|g| g.0).unwrap_or(0);
    if let Some(copy) = &feed.copy {
        if let Some(until) = copy.complete_at(s) {
            send_control(conn, tag, FrameKind::CopyEnd, generation, until)?;
            tracing::info!(until, "copy to backup closed: consistent once it has applied group {until}");
            feed.copy = None;
            feed.sent_generation = generation;
        }
    } else if generation != feed.sent_generation {
        send_control(conn, tag, FrameKind::CopyEnd, generation, 0)?;
        feed.sent_generation = generation;
    }
    Ok(())
}

/// Sends queued groups after `sent`, in order, until the connection fails or the node stops.
fn send_loop<C: Conn>(
    s: &Shared,
    id: u64,
    conn: &mut C,
    tag: &Tag,
    mut sent: u64,
    mut feed: Feed,
) -> Result<(), ForwardError> {
    let f = &s.forward;
    let rate = s.opts.secondary_rate_limit;
    let (mut budget_start, mut budget_bytes) = (Instant::now(), 0u64);
    let mut last_sent = Instant::now();
    // The copy of a sealed group sent from (grown to the largest such group once).
    let mut form = Vec::new();
    // The backup follows this node's history: it takes this node's generation id.
    loop {
        if s.data.is_primary() {
            return Err(ForwardError::Ended("this node was promoted: it feeds no backup".into()));
        }
        announce(s, conn, tag, &mut feed)?;
        let (next, seal, unsealed) = {
            let mut st = lock(f);
            loop {
                if s.shutdown.load(Ordering::SeqCst) {
                    return Ok(());
                }
                if st.link(id).is_none() {
                    return Err(ended_by_removal());
                }
                let at = st.queue.partition_point(|(g, _, _)| g.seq <= sent);
                if let Some((g, _, seal)) = st.queue.get(at) {
                    if g.bytes == 0 || seal.is_some() {
                        break (*g, *seal, None);
                    }
                    if !s.lanes.exposed(g.lane) {
                        // Sent straight from the log: `expose` waits for this send to end
                        // before it offers the log to a peer that writes at any time.
                        break (*g, None, Some(UnsealedSend::begin(f)));
                    }
                    // Its log is being offered to such a peer: `expose` seals it first.
                }
                st = f.cv.wait_timeout(st, Duration::from_millis(20)).unwrap_or_else(|p| p.into_inner()).0;
                if last_sent.elapsed() >= s.opts.heartbeat.interval {
                    drop(st);
                    if s.data.is_primary() {
                        return Err(ForwardError::Ended("this node was promoted: it feeds no backup".into()));
                    }
                    send_control(conn, tag, FrameKind::Heartbeat, 0, 0)?;
                    announce(s, conn, tag, &mut feed)?;
                    last_sent = Instant::now();
                    st = lock(f);
                }
            }
        };
        // Every number between the last one sent and this group has no group here (groups
        // dropped with a session, or passed over when a session was sealed across a gap).
        let first = sent + 1;
        if next.bytes == 0 {
            send_skip(conn, tag, first, next.seq)?;
        } else {
            if first < next.seq {
                send_skip(conn, tag, first, next.seq - 1)?;
            }
            if unsealed.is_some() {
                send_group(s, conn, tag, &next, &mut feed)?;
            } else {
                send_sealed_group(s, conn, tag, &next, seal, &mut form, &mut feed)?;
            }
        }
        drop(unsealed);
        sent = next.seq;
        last_sent = Instant::now();
        if let Some(rate) = rate {
            budget_bytes += next.bytes + FRAME_HEADER_SIZE as u64;
            let due = Duration::from_secs_f64(budget_bytes as f64 / rate as f64);
            let spent = budget_start.elapsed();
            if due > spent {
                std::thread::sleep(due - spent);
            } else if spent > Duration::from_secs(1) {
                // Do not bank more than a second of idle time.
                (budget_start, budget_bytes) = (Instant::now(), 0);
            }
        }
    }
}

/// Sends a frame without a body (Heartbeat, Skip, CopyBegin, CopyEnd) of the link's session.
fn send_control<C: Conn>(
    conn: &mut C,
    tag: &Tag,
    kind: FrameKind,
    offset: u64,
    seq: u64,
) -> Result<(), ForwardError> {
    let mut h = FrameHeader::new(kind);
    h.epoch = tag.epoch;
    h.session = tag.session;
    h.offset = offset;
    h.seq = seq;
    conn.send_all_vectored(&mut [IoSlice::new(&h.to_bytes())])
        .map_err(|e| ForwardError::Lost(format!("send {kind:?}: {e}")))
}

fn send_skip<C: Conn>(conn: &mut C, tag: &Tag, first: u64, last: u64) -> Result<(), ForwardError> {
    send_control(conn, tag, FrameKind::Skip, first, last)
}

/// Sends one group's records straight from this node's log, which no peer writes (`exposed` is
/// false for its lane: the caller holds an [`UnsealedSend`] that keeps it so). A Copied record
/// goes as Copy frames read from this node's data area (opening a copy into the backup first),
/// then the record itself: the group was applied here, so the area holds its bytes or newer
/// ones, and every newer group follows on this link.
fn send_group<C: Conn>(
    s: &Shared,
    conn: &mut C,
    tag: &Tag,
    g: &GroupRef,
    feed: &mut Feed,
) -> Result<(), ForwardError> {
    let log = s.lanes.log_holding(g);
    let area = log.area();
    let mut batch = Batch::new();
    let mut pos = g.start_pos;
    while pos < g.end_pos {
        let Some(rec) = record_at_verified(&area, pos, super::MAX_FRAME_LIMIT) else {
            // Only a log a peer can write at any time changes under a group the node took, and
            // such a group goes by `send_sealed_group`.
            return Err(ForwardError::Bug(format!(
                "the record at {pos} of group {} is no longer one",
                g.seq
            )));
        };
        pos = rec.end_pos();
        if !matches!(rec.header.kind, FrameKind::Data | FrameKind::Copied) {
            continue;
        }
        let header = link_header(&rec.header, tag, g)?;
        let body = rec.body(&area);
        if rec.header.kind == FrameKind::Copied {
            batch.send(conn, g)?;
            // A Copied body is a short list of ranges (at most 16 KiB), read out of the log once.
            send_copied(s, conn, tag, g, &header, &body.to_vec(), feed)?;
        } else {
            batch.add(conn, g, header, body.io_slice())?;
        }
    }
    batch.send(conn, g)
}

/// Sends one group of a log a peer can write at any time (offered over UCX): its records are
/// copied out of the log into `form` (the link's buffer, kept from group to group), checked
/// there against `seal`, the seal this node made of what it checked and applied
/// (`group_seal`), and sent from the copy, so that what reaches the backup is what was checked
/// whatever the peer writes meanwhile. A group that no longer matches is not sent at all:
/// `ForwardError::LogChanged`, naming it.
fn send_sealed_group<C: Conn>(
    s: &Shared,
    conn: &mut C,
    tag: &Tag,
    g: &GroupRef,
    seal: Option<Seal>,
    form: &mut Vec<u8>,
    feed: &mut Feed,
) -> Result<(), ForwardError> {
    let Some(seal) = seal else {
        return Err(ForwardError::Bug(format!(
            "group {} of lane {} is in a log a peer can write but was never sealed",
            g.seq, g.lane
        )));
    };
    let changed = |why: &str| {
        ForwardError::LogChanged(format!(
            "group {} of lane {} (log positions {}..{}) was changed in this node's log after this node \
             checked it: {why}; it was not sent to the backup, which gets a full copy of this node's \
             data area instead (a peer that can write the log over UCX broke the protocol)",
            g.seq, g.lane, g.start_pos, g.end_pos
        ))
    };
    let log = s.lanes.log_holding(g);
    copy_form(log.area(), g, super::MAX_FRAME_LIMIT, form).map_err(|why| changed(&why.to_string()))?;
    if !s.forward.sealer.verify(g.seq, form, &seal) {
        return Err(changed("its records are no longer those this node checked and applied"));
    }
    let mut batch = Batch::new();
    for rec in records(form) {
        let (h, body) = rec.map_err(|at| {
            ForwardError::Bug(format!("the sealed copy of group {} holds no header at byte {at}", g.seq))
        })?;
        let header = link_header(&h, tag, g)?;
        if h.kind == FrameKind::Copied {
            batch.send(conn, g)?;
            send_copied(s, conn, tag, g, &header, body, feed)?;
        } else {
            batch.add(conn, g, header, IoSlice::new(body))?;
        }
    }
    batch.send(conn, g)
}

/// The header of a group's record as its backup's link sends it: of the link's session, lane 0,
/// at no log position, without the `MAC` flag (a placed record's tag stays in this node's log:
/// the backup's lane gets the body alone). Err: the body is over the backup's frame limit.
fn link_header(h: &FrameHeader, tag: &Tag, g: &GroupRef) -> Result<[u8; FRAME_HEADER_SIZE], ForwardError> {
    if h.body_len > tag.max_frame {
        return Err(ForwardError::Config(format!(
            "group {} has a frame of {} bytes but the backup accepts at most {}; \
             give every node the same [limits] max_frame",
            g.seq, h.body_len, tag.max_frame
        )));
    }
    let mut h = sealed_header(*h);
    h.epoch = tag.epoch;
    h.session = tag.session;
    Ok(h.to_bytes())
}

/// Sends a Copied record (`header`, its list of ranges `body`): the ranges as Copy frames read
/// from this node's data area (opening a copy into the backup first), then the record.
fn send_copied<C: Conn>(
    s: &Shared,
    conn: &mut C,
    tag: &Tag,
    g: &GroupRef,
    header: &[u8; FRAME_HEADER_SIZE],
    body: &[u8],
    feed: &mut Feed,
) -> Result<(), ForwardError> {
    if feed.copy.is_none() {
        feed.copy = Some(OpenCopy::begin(s, conn, tag)?);
    }
    let copy = feed.copy.as_mut().expect("opened above");
    for (off, len) in mojim_format::copied::ranges(body) {
        copy.send_range(s, conn, tag, off, len, |_| true)?;
    }
    conn.send_all_vectored(&mut [IoSlice::new(header), IoSlice::new(body)])
        .map_err(|e| ForwardError::Lost(format!("send group {}: {e}", g.seq)))
}

/// A group's records on their way to a backup, up to [`BATCH`] of them sent by one `writev`.
struct Batch<'a> {
    headers: [[u8; FRAME_HEADER_SIZE]; BATCH],
    bodies: [IoSlice<'a>; BATCH],
    n: usize,
}

impl<'a> Batch<'a> {
    fn new() -> Batch<'a> {
        Batch { headers: [[0u8; FRAME_HEADER_SIZE]; BATCH], bodies: [IoSlice::new(&[]); BATCH], n: 0 }
    }

    /// Adds a record, sending those before it first if there are [`BATCH`] of them.
    fn add<C: Conn>(
        &mut self,
        conn: &mut C,
        g: &GroupRef,
        header: [u8; FRAME_HEADER_SIZE],
        body: IoSlice<'a>,
    ) -> Result<(), ForwardError> {
        if self.n == BATCH {
            self.send(conn, g)?;
        }
        self.headers[self.n] = header;
        self.bodies[self.n] = body;
        self.n += 1;
        Ok(())
    }

    /// Sends the records added since the last send.
    fn send<C: Conn>(&mut self, conn: &mut C, g: &GroupRef) -> Result<(), ForwardError> {
        if self.n == 0 {
            return Ok(());
        }
        let mut iov = [IoSlice::new(&[]); 2 * BATCH];
        for k in 0..self.n {
            iov[2 * k] = IoSlice::new(&self.headers[k]);
            iov[2 * k + 1] = self.bodies[k];
        }
        let n = std::mem::take(&mut self.n);
        conn.send_all_vectored(&mut iov[..2 * n])
            .map_err(|e| ForwardError::Lost(format!("send group {}: {e}", g.seq)))
    }
}

/// Reads the backup's acknowledgements; each moves the link forward and may free queue space.
fn read_acks<C: Conn>(s: &Shared, id: u64, conn: &mut C) -> Result<(), ForwardError> {
    let f = &s.forward;
    loop {
        let mut hb = [0u8; FRAME_HEADER_SIZE];
        if let Err(e) = conn.read_exact(&mut hb) {
            f.cv.notify_all();
            return if s.shutdown.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(ForwardError::Lost(format!("read ack: {e}")))
            };
        }
        let h = FrameHeader::decode(&hb)
            .map_err(|e| ForwardError::BackupMisbehaved(format!("bad frame from backup: {e}")))?;
        if h.kind == FrameKind::Heartbeat {
            continue;
        }
        if h.kind != FrameKind::Ack {
            return Err(ForwardError::BackupMisbehaved(format!("unexpected {:?} frame from backup", h.kind)));
        }
        {
            let mut st = lock(f);
            // Nothing after the last queued group was sent: a backup that acknowledges more
            // would free log space it does not hold.
            let queued = st.queue.back().map_or(st.base, |(g, _, _)| g.seq.max(st.base));
            let Some(l) = st.link(id) else { return Err(ended_by_removal()) };
            if h.seq > queued.max(l.acked_seq) {
                return Err(ForwardError::BackupMisbehaved(format!(
                    "the backup acknowledged group {}, but no group after {} was sent to it",
                    h.seq,
                    queued.max(l.acked_seq)
                )));
            }
            if h.seq > l.acked_seq {
                l.acked_seq = h.seq;
            }
            st.trim();
        }
        f.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backup's lag counts the queued groups after what it acknowledged, and its age is the
    /// first of them's: older groups it has, and newer ones, do not count.
    #[test]
    fn the_lag_is_the_groups_after_the_acknowledged_one_and_the_first_ones_age() {
        let t0 = Instant::now();
        let mut st = FwdState::default();
        st.links.push((0, BackupStatus { addr: "b:1".into(), ..Default::default() }));
        for (k, seq) in [3u64, 4, 7].into_iter().enumerate() {
            st.push(&GroupRef::data(seq, 0, 0, 128, 100 * seq), t0 + Duration::from_secs(k as u64));
        }
        let now = t0 + Duration::from_secs(10);
        assert_eq!(st.lag_of(0, now), (3, 1400, Duration::from_secs(10)));
        assert_eq!(st.lag_of(3, now), (2, 1100, Duration::from_secs(9)));
        assert_eq!(st.lag_of(5, now), (1, 700, Duration::from_secs(8)));
        assert_eq!(st.lag_of(7, now), (0, 0, Duration::ZERO));
        // A clock read before the group was queued gives no negative age.
        assert_eq!(st.lag_of(6, t0).2, Duration::ZERO);
        // Once the backup acknowledges them, the groups leave the queue, and so does the lag.
        st.links[0].1.acked_seq = 4;
        st.trim();
        assert_eq!(st.queue.len(), 1);
        let l = &st.links()[0];
        assert_eq!((l.lag_groups, l.lag_bytes), (1, 700), "{l:?}");
    }

    /// A seal made as its group was applied joins that group in the queue; the seal of a group
    /// whose write failed (it never joins) is dropped, and one of a group still to come is kept.
    #[test]
    fn a_seal_joins_its_group_and_one_whose_group_never_came_is_dropped() {
        let f = Forward::new(&["b:1".into()], 0, &[]);
        let mut seals = vec![(2, [2u8; 16]), (3, [3u8; 16]), (5, [5u8; 16])];
        f.sealed(&mut seals);
        assert!(seals.is_empty());
        f.queue_applied(&[GroupRef::data(3, 0, 0, 128, 100)]);
        let st = lock(&f);
        assert_eq!(
            st.queue.iter().map(|(g, _, s)| (g.seq, *s)).collect::<Vec<_>>(),
            vec![(3, Some([3u8; 16]))]
        );
        assert_eq!(st.seals, vec![(5, [5u8; 16])], "2 never came, 5 may");
        drop(st);
        f.queue_applied(&[GroupRef::data(4, 0, 128, 256, 100), GroupRef::data(5, 0, 256, 384, 100)]);
        let st = lock(&f);
        let queued: Vec<_> = st.queue.iter().map(|(g, _, s)| (g.seq, *s)).collect();
        assert_eq!(queued, vec![(3, Some([3u8; 16])), (4, None), (5, Some([5u8; 16]))]);
        assert!(st.seals.is_empty());
    }
}
