//! A deterministic, seeded simulator of a primary, its promoted successors, and one mirror.
//!
//! The simulator runs the production core ([`crate::encode`], [`crate::handshake`],
//! [`crate::lane`], [`crate::control`], [`crate::checkpoint`], [`crate::recovery`],
//! [`crate::mirror`], [`crate::primary::resync_choice`]) the way the daemon does, on a
//! simulated network and simulated persistent memory, with faults:
//!
//! - **Network.** Per lane of a session, one connection: an ordered stream each way that loses
//!   nothing while it lives; delays and interleavings across lanes are random. Each lane opens
//!   with the real handshake (Hello, Challenge, Proof, then Welcome or Refuse). A *disconnect*
//!   resets a connection and both ends see it at once. A *partition* cuts a node's path to the
//!   mirror in one or both directions for a while: what crosses the cut is lost, and a stream that
//!   lost something is broken for good in that direction (it cannot skip a hole). Heartbeats cross
//!   every live direction each tick; an end that hears nothing on a lane for
//!   [`SimConfig::dead_ticks`] declares it dead and ends its side of the session. Either end may
//!   thus end a session the other still believes open: the mirror drops open groups and seals
//!   (applies every complete group, across gaps), the primary fails every unacknowledged group,
//!   and the close reaches the other end after what it had queued, unless a cut loses it.
//! - **Fail-over.** The coordinator *promotes*: a new primary incarnation with the next epoch
//!   starts, takes its copy of the region from the mirror's applied state when its handshake is
//!   accepted, and from then on writes. The old incarnation is not told: it keeps running for a
//!   while, keeps writing over whatever links it still has and keeps reconnecting with its old
//!   epoch, often after a partition, until it stops. The mirror adopts the higher epoch when the
//!   new primary's handshake arrives (sealing the old session first) and must then refuse every
//!   handshake and frame of a lower one. Which handshake joins, begins or replaces a session,
//!   the epoch adopted, and when a session ends and is sealed are decided by the node's session
//!   slot ([`crate::mirror::SessionSlot`]), whose commands the simulated mirror runs.
//! - **Mirror crashes and power cuts.** The mirror's media (log areas, data area, and the
//!   metadata: tails, applied sequence number, epoch) are volatile until persisted: see `media`,
//!   which implements the node's storage seam (`mojim_region::Media`). A log range is persisted
//!   before an acknowledgement, as the daemon does; checkpoints run the node's own engine and
//!   executor ([`crate::mirror`]) against these media, so the order of the data, the watermark
//!   and the tails is the node's, not a copy of it. A *process crash* (kill -9) loses the volatile state
//!   and keeps everything written; a *power cut* keeps only what was persisted and a random subset
//!   of the rest, in whole cache lines and whole 8-byte words. The record being received and the
//!   group being applied may be torn. On restart the node's recovery runs
//!   ([`crate::recovery::recover`] scans the logs, [`crate::mirror::Restart`] applies, persists and
//!   records the complete groups and frees the logs, through the same executor), and may itself
//!   crash before any of its commands. The range a group's acknowledgement persists is the one
//!   [`crate::lane::MirrorLane::commit`] returns, the daemon's decision.
//! - **Backups.** In about half the runs the mirror feeds backups (`backup`): the groups it
//!   applies are queued for them, and they acknowledge them on their own schedule. Before the
//!   mirror sends an acknowledgement it asks the node's ack gate ([`crate::mirror::AckGate`]):
//!   over the secondary tier's threshold, or in chain mode until every backup has the group, the
//!   acknowledgement is held (applying inline when the gate asks), and the lane reads nothing
//!   more until it is sent, as the node's lane thread does.
//! - **Copies and generations.** Now and then the mirror comes to need a copy: its data area is
//!   wiped (a new area: generation 0, marked inconsistent) or discarded (`mojim discard`), each
//!   between sessions, or the newest primary begins a new generation (a degraded period), with a
//!   dirty bitmap or without one. The primary's next session plans with the production
//!   [`crate::primary::resync_choice`] against the Welcome (the mirror's generations and its
//!   inconsistent mark): in sync, a full or bitmap copy, or a refusal (split brain), after which
//!   the operator discards the mirror's copy. A copy is CopyBegin on every lane, copy groups
//!   (Copy frames read from the primary's region after the group's number is assigned, closed by
//!   a Copied frame) interleaved with the application's groups, and, once every copy group is
//!   acknowledged, CopyEnd on every lane naming the generation. A Copy frame whose body is
//!   corrupted in flight does not land: the mirror asks for it again (CopyRetry, before the
//!   group's acknowledgement) and the primary sends the range again as a copy group of its own
//!   before its CopyEnd. Which frames a lane takes when is
//!   [`crate::control::lane_step`]; the copy's bookkeeping (the area marked inconsistent, the
//!   generation adopted, the copy's last group recorded) is the node's session slot's
//!   ([`crate::mirror::CopyState`]), its commands run against the data area's header words as
//!   the node runs them, and when the area counts as consistent again is
//!   [`crate::mirror::copy_complete`]. Disconnects, partitions, crashes and power cuts hit a copy
//!   anywhere; the coordinator promotes only a consistent copy (a promotion decided before a
//!   copy began is refused, as `mojim promote` refuses, and withdrawn).
//! - **The metadata log.** Each primary keeps the production metadata log
//!   ([`mojim_region::MetaRing`], in memory, a few dozen records in a quarter of the runs so that it
//!   wraps): a group's ranges are appended once it is numbered and before it is sent, the
//!   acknowledged floor is noted as acks arrive, the plan reads both, and the log restarts
//!   where the plan says ([`crate::primary::Plan::log_start`]). A mirror that sealed across a
//!   gap, or never got a group that failed, thus gets a log catch-up (or a full copy once the
//!   log has wrapped). Likewise the production dirty bitmap ([`mojim_region::DirtyMap`]): a
//!   primary that begins a new generation with one records in it the stores it makes without a
//!   session, and the bitmap copy that follows must bring them. A primary without a session
//!   and not degraded (`block`) stores too, its sync point refused: the log keeps the range
//!   (`REFUSED_SYNC`), and the next session must send it.
//! - **Media errors.** The data area's media fails an operation now and then; the node's
//!   engine must fail-stop (nothing applied, persisted or released after it), and the restart
//!   that follows must lose nothing acknowledged.
//! - **Bad input.** Bit flips, random bytes, wrong fields with valid checksums (a lower epoch
//!   among them), and frames of earlier sessions and fenced primaries are slipped into the
//!   streams; each must be refused and change nothing. So are the frames of a hostile peer that
//!   authenticated and keeps to every rule of its lane, whose group numbers only the session as
//!   a whole can refuse ([`crate::seq_window::SeqWindow`], one per session, taken at a group's
//!   first frame before anything of it touches a log, as the daemon does): a group already
//!   received on another lane of the session, sent again on this one, and a Data or Skip frame
//!   numbered far ahead, up to 2⁶⁴−2. Such a refusal ends the session; no later one may be
//!   wedged by it.
//!
//! Alongside it keeps its own model (every group issued, with its bytes; which were acknowledged,
//! to which incarnation and in which epoch; which were applied; the highest epoch the mirror has
//! announced) and checks the invariants of `DESIGN.md` continuously: the data area is always the
//! fold of whole applied groups in sequence order (2); every acknowledged group, to whichever
//! incarnation, is applied after every seal, every recovery and every promotion (1); the mirror
//! never accepts a handshake, stores a frame or sends an ack of an epoch below the one it has
//! announced, no group a fenced primary sent is ever acknowledged or applied, and only one
//! incarnation is acknowledged in any epoch (4); refused frames change nothing (5). Of copies, the
//! model knows apart from the mirror when its data area may differ from that fold (from a wipe,
//! a discard or the first copied byte until every lane's CopyEnd is in and the copy's last group
//! is applied; a copy group counts as a write of the bytes it copied, at its place in the
//! sequence) and checks that meanwhile the area never reads consistent (when a Copy frame lands,
//! in the Welcome, after a restart, so that the next session copies again) and is never promoted
//! from, and that once the copy ends the area is the fold again and holds the copy's generation.
//! Whenever the mirror's session is quiet (open at both ends, nothing on its way to the mirror,
//! everything applied, no copy unfinished), and at the end of every run, the mirror's data area
//! must equal that session's primary's copy byte for byte (6).
//!
//! Everything is driven by one [`Rng`] seeded from [`SimConfig::seed`] (the backups' schedule by
//! one of their own, seeded from it too); time is a step counter
//! (one tick per step). A failure names the seed, and
//! `MOJIM_SIM_SEED=<seed> cargo test -p mojim-core --test sim` replays it.

mod backup;
mod connect;
mod media;
mod mirror;
mod model;
mod net;
mod primary;
mod rng;
mod world;

pub use rng::Rng;

use crate::handshake::MAX_LANES;
use mojim_format::log::record_size;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};

/// Inside the simulator, a failed check is a message; [`run`] adds the seed and the trace.
type Check<T> = Result<T, String>;

/// A deliberately broken mirror, to prove that the checks catch what they claim to. Never set it
/// outside tests of the simulator itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Sabotage {
    /// The mirror behaves as the daemon does.
    #[default]
    None,
    /// Acknowledges a group as soon as its first frame is in the log (invariant 1 must fail
    /// when the session ends before the group is complete). In the node's record rules it is
    /// [`crate::mirror::record::RecordFault::AckBeforeEnd`].
    AckBeforeEnd,
    /// A fault in the logs' media: their records are lost at every restart, as if kept where a
    /// restart clears them, so the node's recovery finds nothing to replay (acknowledged groups
    /// not yet applied are lost: invariant 1 must fail).
    LogsLostOnRestart,
    /// A reordered persist, injected into the data area's media under the node's executor: the
    /// write-back of the ranges a reclaim persists reaches the media only at the next reclaim,
    /// after this one's applied number and tails. A power cut in between loses data that the
    /// applied number vouches for and whose log space is freed (invariant 2 must fail).
    TailBeforeData,
    /// A skipped persist, injected likewise: the data area's write-back of a range does nothing
    /// and reports success (invariants 1 and 2 must fail after a power cut).
    SkippedPersist,
    /// Leaves the checkpointer's watermark where it was when a session begins after the one
    /// named to the primary. After a restart whose logs held sequence numbers past the last
    /// applied group (dropped or torn groups), the running checkpointer then waits for a number
    /// that never comes: the logs fill and the lanes stall (a liveness failure).
    GapAfterRestart,
    /// Accepts handshakes and frames of an epoch below its own: a primary fenced by a promotion
    /// can open a session again (at its old epoch) and be acknowledged (invariant 4 must fail).
    /// In the node's session slot it is [`crate::mirror::session::SessionFault::AdmitStaleEpoch`];
    /// the handshake's and the lanes' own epoch checks are broken with it.
    AcceptStaleEpoch,
    /// Persists only a completed group's own records before acknowledging it, not the Pad
    /// written at the end of the lap before them. A power cut may then lose the pad, and
    /// recovery's scan from the tail stops there, before acknowledged groups (invariant 1 must
    /// fail). In the node's record rules it is
    /// [`crate::mirror::record::RecordFault::PersistGroupOnly`].
    PersistGroupOnly,
    /// Checks each lane's sequence numbers on their own, without the session's window: a group
    /// number another lane of the session already took, or one far ahead, is stored (the mirror
    /// must refuse such frames, see [`crate::seq_window`]). In the node's session slot it is
    /// [`crate::mirror::session::SessionFault::NoSeqWindow`].
    NoSeqWindow,
    /// A fault in the node's session slot: a higher epoch is adopted without being persisted
    /// ([`crate::mirror::session::SessionFault::EpochNotPersisted`]), so a restart forgets it and
    /// a fenced primary would be accepted again (invariant 4 must fail).
    EpochNotPersisted,
    /// A fault in the node's session slot: a new session begins over a live one, which is
    /// neither ended nor sealed ([`crate::mirror::session::SessionFault::SecondSession`]).
    SecondSession,
    /// A fault in the node's ack gate: the secondary tier's threshold never holds an
    /// acknowledgement ([`crate::mirror::ack::AckFault::PastThreshold`]).
    AckPastThreshold,
    /// A fault in the node's ack gate: in chain mode a group is acknowledged before every backup
    /// has it ([`crate::mirror::ack::AckFault::ChainEarly`]).
    ChainAckEarly,
    /// A fault in the node's session slot: a copy is recorded complete when it begins
    /// ([`crate::mirror::session::SessionFault::CopyCompleteAtBegin`]), so the half-copied data
    /// area reads consistent (it must be reported inconsistent until the copy's end).
    CopyCompleteAtBegin,
    /// A fault in what the primary's metadata log tells the production resync choice: its
    /// acknowledged floor reads as everything, so a log catch-up starts after the mirror's
    /// applied number alone. A group the mirror skipped over when it sealed (the lane that
    /// carried it broke first) and that was never acknowledged is then never sent again
    /// (invariant 6 must fail).
    CatchUpFromApplied,
    /// A fault in the primary's dirty bitmap: a store made without the mirror is not marked, so
    /// the bitmap copy that follows leaves it out (invariant 6 must fail).
    UnmarkedStore,
    /// A fault in the primary's metadata log: a sync point refused for want of a mirror is not
    /// recorded, so the next session does not send its bytes (invariant 6 must fail).
    RefusedSyncUnrecorded,
}

/// The backups the mirror feeds, and the gate its acknowledgements pass (`[mirror]
/// secondary_tier_thresh` and `chain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackupConfig {
    /// 0: none, and no acknowledgement waits.
    pub count: usize,
    pub secondary_tier_thresh: u64,
    pub chain: bool,
    /// Chance per tick that the backups acknowledge the next few queued groups.
    pub pace_pct: u32,
}

/// How often faults happen: per step in parts per million, or per crash in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRates {
    pub disconnect_ppm: u32,
    /// The mirror's process is killed (kill -9): everything it wrote survives.
    pub crash_ppm: u32,
    /// The mirror's machine loses power: what it did not persist may be lost (see
    /// `sim::media`).
    pub power_cut_ppm: u32,
    /// Chance that a crash while sealing or recovering, or the stop at the end of a run, is a
    /// power cut rather than a process crash.
    pub power_cut_pct: u32,
    /// Bit flips, random frames and wrong fields.
    pub garbage_ppm: u32,
    /// Frames of an earlier session delivered to the current one.
    pub stale_ppm: u32,
    /// Chance that a crash tears the record being received.
    pub torn_write_pct: u32,
    /// Chance that a crash interrupts the group being applied.
    pub torn_apply_pct: u32,
    /// Chance that the mirror crashes while sealing an ended session.
    pub seal_crash_pct: u32,
    /// Chance that a restart crashes again while applying recovered groups.
    pub recovery_crash_pct: u32,
    /// The coordinator promotes a new primary incarnation (the old one runs on for a while).
    pub promote_ppm: u32,
    /// A node's path to the mirror is cut, on one lane or all, in one direction or both.
    pub partition_ppm: u32,
    /// The data area's media fails its next operation (a write, a write-back, the store of the
    /// applied number) with an I/O error: the node's engine must fail-stop, and a restart lose
    /// nothing acknowledged.
    pub media_error_ppm: u32,
    /// The mirror comes to need a copy: its data area is wiped (a new area, generation 0) or
    /// discarded (`mojim discard`), or the newest primary begins a new generation (a degraded
    /// period), which its next session resolves by a copy, or, without a dirty bitmap, by a
    /// refusal after which the operator discards the mirror's copy.
    pub copy_fault_ppm: u32,
}

impl FaultRates {
    /// No faults at all.
    pub const NONE: FaultRates = FaultRates {
        disconnect_ppm: 0,
        crash_ppm: 0,
        power_cut_ppm: 0,
        power_cut_pct: 0,
        garbage_ppm: 0,
        stale_ppm: 0,
        torn_write_pct: 0,
        torn_apply_pct: 0,
        seal_crash_pct: 0,
        recovery_crash_pct: 0,
        promote_ppm: 0,
        partition_ppm: 0,
        media_error_ppm: 0,
        copy_fault_ppm: 0,
    };
}

/// The shape of one simulated run. [`SimConfig::new`] derives everything from the seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    pub seed: u64,
    /// Random steps before the final drain.
    pub steps: u64,
    /// Lanes, 1..=[`MAX_LANES`] (the node's limit, which the simulated mirror offers).
    pub lanes: u16,
    pub region_size: u64,
    /// Bytes of each lane's log area (a multiple of 64).
    pub log_capacity: u64,
    pub max_frame: u32,
    pub max_ranges: usize,
    /// Chance that a range is large (up to three frames) rather than small (up to one).
    pub large_range_pct: u32,
    /// The checkpointer applies once this many groups wait (`CHECKPOINT_THRESH`).
    pub checkpoint_thresh: usize,
    /// Steps without a frame after which the mirror counts as idle.
    pub idle_ticks: u64,
    /// Ticks without hearing anything (data or heartbeat) on a lane after which an end declares
    /// the lane dead and ends its side of the session.
    pub dead_ticks: u64,
    /// Groups each lane of a primary may have in flight before the application waits: the
    /// library's `async_window`, run by the production window ([`crate::primary::InFlightWindow`]).
    pub window: usize,
    /// Records of each primary's metadata log (`[primary] metadata_log_records`).
    pub meta_records: u64,
    /// Groups the node's checkpoint engine ([`crate::mirror::CheckpointEngine`]) applies and
    /// reclaims as one batch; 0 (as 1) applies one group at a time.
    pub apply_batch: usize,
    pub faults: FaultRates,
    pub backups: BackupConfig,
    pub sabotage: Sabotage,
}

impl SimConfig {
    /// Random steps per run when nothing else is asked for.
    pub const DEFAULT_STEPS: u64 = 3000;

    /// A configuration drawn from `seed`: lanes, sizes, thresholds and fault rates all vary.
    pub fn new(seed: u64) -> SimConfig {
        let mut r = Rng::new(seed ^ 0x6D6F_6A69_6D2D_7369);
        let lanes = r.between(1, 4) as u16;
        let region_size = [2048u64, 8192, 65536][r.index(3)];
        let max_frame = r.between(64, 1024) as u32;
        let rec = record_size(u64::from(max_frame));
        let min_cap = (8 * rec).max(4096).div_ceil(64);
        // Small logs fill up and push back on the primary; large ones hold many groups.
        let max_cap = if r.chance_pct(50) { 2 * min_cap } else { 16384 / 64 };
        let log_capacity = r.between(min_cap, max_cap) * 64;
        // Some runs are calm (long sessions), some stormy.
        let storm = r.between(0, 4) as u32;
        let mut c = SimConfig {
            seed,
            steps: SimConfig::DEFAULT_STEPS,
            lanes,
            region_size,
            log_capacity,
            max_frame,
            max_ranges: 4,
            large_range_pct: r.between(5, 70) as u32,
            checkpoint_thresh: r.between(1, 10) as usize,
            idle_ticks: r.between(2, 30),
            window: r.between(1, 16) as usize,
            apply_batch: if r.chance_pct(30) { 0 } else { r.between(1, 8) as usize },
            meta_records: 0,
            // Drawn after the others (fields are evaluated in the order written), so that the
            // rest of a seed's configuration is what it was before fail-over was simulated.
            dead_ticks: r.between(8, 40),
            faults: FaultRates {
                disconnect_ppm: 50 + 600 * storm,
                crash_ppm: 30 + 300 * storm,
                power_cut_ppm: 30 + 300 * storm,
                power_cut_pct: 50,
                garbage_ppm: 50 + 700 * storm,
                stale_ppm: 50 + 500 * storm,
                torn_write_pct: 70,
                torn_apply_pct: 50,
                seal_crash_pct: 1 + 4 * storm,
                recovery_crash_pct: 25,
                promote_ppm: 200 + 300 * storm,
                partition_ppm: 300 + 500 * storm,
                media_error_ppm: 20 + 200 * storm,
                copy_fault_ppm: 150 + 150 * storm,
            },
            backups: BackupConfig::default(),
            sabotage: Sabotage::None,
        };
        // A few runs use many lanes, up to the node's limit (a session's lanes are one word's
        // bits). Drawn last, so that the rest of a seed's configuration is what it was.
        if r.chance_pct(5) {
            c.lanes = r.between(5, u64::from(MAX_LANES)) as u16;
        }
        // The primaries' metadata log, from a generator of its own (the rest of a seed's
        // configuration is what it was): in a quarter of the runs a few dozen records, which a session
        // overwrites (the log then answers nothing, and a full copy follows), in the other half
        // enough for a catch-up after most losses.
        let mut m = Rng::new(seed ^ 0x6D6F_6A69_6D2D_6D6C);
        c.meta_records = if m.chance_pct(25) { m.between(4, 64) } else { 4096 };
        // Backups in about half the runs, from a generator of their own (the rest of a seed's
        // configuration is what it was). The threshold is above what the logs can hold in half
        // of them, so that only the backups' lag holds a lane; in the other half a few hundred
        // bytes to a few KiB, below one lane's log, where groups waiting after a gap would hold
        // every lane for good if the gate counted them (DESIGN.md, "The ack gate").
        let mut b = Rng::new(seed ^ 0x6D6F_6A69_6D2D_6263);
        if b.chance_pct(50) {
            let count = b.between(1, 3) as usize;
            let above_logs = u64::from(c.lanes) * c.log_capacity + b.below(8192);
            c.backups = BackupConfig {
                count,
                secondary_tier_thresh: above_logs,
                chain: b.chance_pct(30),
                pace_pct: b.between(5, 60) as u32,
            };
            if b.chance_pct(50) {
                c.backups.secondary_tier_thresh = b.between(256, 4096);
            }
        }
        c
    }

    pub fn with_steps(mut self, steps: u64) -> SimConfig {
        self.steps = steps;
        self
    }

    pub fn with_sabotage(mut self, sabotage: Sabotage) -> SimConfig {
        self.sabotage = sabotage;
        self
    }

    fn validate(&self) -> Result<(), String> {
        let limit = crate::encode::max_group_log_bytes(self.log_capacity, self.max_frame);
        let smallest = self.max_ranges as u64 * record_size(1);
        if !(1..=MAX_LANES).contains(&self.lanes)
            || self.region_size == 0
            || self.max_frame == 0
            || self.max_ranges == 0
            || self.window == 0
            || !(1..=mojim_region::META_RING_MAX_CAPACITY).contains(&self.meta_records)
            || self.checkpoint_thresh == 0
            || self.dead_ticks == 0
            || !self.log_capacity.is_multiple_of(64)
            || limit < smallest
        {
            return Err(format!(
                "invalid simulator configuration {self:?}: a group of {} one-byte ranges needs \
                 {smallest} bytes of log, the limit is {limit}",
                self.max_ranges
            ));
        }
        Ok(())
    }
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub lanes: u16,
    pub steps: u64,
    pub groups_sent: u64,
    pub groups_acked: u64,
    /// Groups the application was told are not durable.
    pub groups_failed: u64,
    pub groups_applied: u64,
    /// Open groups the mirror dropped when a session ended.
    pub groups_dropped: u64,
    pub groups_recovered: u64,
    /// Incomplete groups recovery found and discarded.
    pub groups_discarded: u64,
    pub sessions: u64,
    pub disconnects: u64,
    /// Crashes injected (the clean restart at the end of a run is not counted).
    pub crashes: u64,
    /// Crashes that were power cuts (in `crashes`, but for the end of a run's).
    pub power_cuts: u64,
    /// Cache lines and metadata words whose last writes, never persisted, a power cut lost.
    pub writes_lost: u64,
    /// Crashes during a seal, and during a restart's recovery (both also in `crashes`).
    pub seal_crashes: u64,
    pub recovery_crashes: u64,
    pub torn_writes: u64,
    pub torn_applies: u64,
    pub violations_injected: u64,
    pub violations_detected: u64,
    pub stale_injected: u64,
    pub replays_injected: u64,
    /// Authenticated frames of groups already received on another lane of the session (in
    /// `violations_injected`).
    pub seq_resends_injected: u64,
    /// Authenticated Data and Skip frames numbered beyond the session's window (in
    /// `violations_injected`).
    pub seq_ahead_injected: u64,
    /// Frames the session's window refused (in `violations_detected`).
    pub seq_window_refusals: u64,
    pub log_full_waits: u64,
    /// New primary incarnations started by the coordinator.
    pub promotions: u64,
    pub partitions: u64,
    /// Frames lost to a cut or discarded at an end that had closed.
    pub frames_lost: u64,
    /// Lanes an end declared dead for hearing nothing.
    pub timeouts: u64,
    /// Handshakes of a fenced primary the mirror refused for their epoch.
    pub epoch_refusals: u64,
    /// I/O errors of the data area's media, each of which fail-stopped the mirror's engine
    /// (and the mirror was restarted).
    pub fail_stops: u64,
    /// I/O errors of the data area's media while a Copy frame landed, each of which ended the
    /// session (a lane's Refuse, as the node's).
    pub landing_failures: u64,
    /// Groups a fenced primary issued after the mirror had adopted a higher epoch.
    pub fenced_groups: u64,
    /// Acknowledgements the mirror's ack gate held back for the backups, and of them those
    /// held in chain mode.
    pub acks_held: u64,
    pub acks_held_chain: u64,
    /// Faults that made the mirror need a copy (wipes, discards, new generations), copies the
    /// mirror began (CopyBegin), and copies completed (the generation adopted and the last copy
    /// group applied).
    pub copy_faults: u64,
    pub copies_begun: u64,
    pub copies_completed: u64,
    /// Sync points a primary without a session refused (`block`), whose ranges its metadata log
    /// kept for the next session.
    pub refused_syncs: u64,
    /// Times the mirror's session was quiet (everything acknowledged, applied and caught up)
    /// and its data area was found equal to its primary's copy (invariant 6).
    pub convergence_checks: u64,
    /// Stores a primary without a session made in a degraded period, marked in its dirty
    /// bitmap (which a bitmap copy then brings to the mirror).
    pub degraded_writes: u64,
    /// Sessions that began with a log catch-up: the ranges of the groups the mirror may lack,
    /// from the primary's metadata log (in `copies_begun`).
    pub catch_ups: u64,
    /// Crashes and power cuts of the mirror while a copy into it was unfinished (in `crashes`).
    pub crashes_mid_copy: u64,
    /// Copy frames corrupted in flight that the mirror asked for again (CopyRetry).
    pub copy_retries: u64,
    /// Sessions a primary refused for a split brain (the operator then discarded the mirror's
    /// copy).
    pub split_brains: u64,
}

impl SimReport {
    /// Adds `other`'s counts to these (for totals over many seeds).
    pub fn add(&mut self, other: &SimReport) {
        self.steps += other.steps;
        self.groups_sent += other.groups_sent;
        self.groups_acked += other.groups_acked;
        self.groups_failed += other.groups_failed;
        self.groups_applied += other.groups_applied;
        self.groups_dropped += other.groups_dropped;
        self.groups_recovered += other.groups_recovered;
        self.groups_discarded += other.groups_discarded;
        self.sessions += other.sessions;
        self.disconnects += other.disconnects;
        self.crashes += other.crashes;
        self.power_cuts += other.power_cuts;
        self.writes_lost += other.writes_lost;
        self.seal_crashes += other.seal_crashes;
        self.recovery_crashes += other.recovery_crashes;
        self.torn_writes += other.torn_writes;
        self.torn_applies += other.torn_applies;
        self.violations_injected += other.violations_injected;
        self.violations_detected += other.violations_detected;
        self.stale_injected += other.stale_injected;
        self.replays_injected += other.replays_injected;
        self.seq_resends_injected += other.seq_resends_injected;
        self.seq_ahead_injected += other.seq_ahead_injected;
        self.seq_window_refusals += other.seq_window_refusals;
        self.log_full_waits += other.log_full_waits;
        self.promotions += other.promotions;
        self.partitions += other.partitions;
        self.frames_lost += other.frames_lost;
        self.timeouts += other.timeouts;
        self.epoch_refusals += other.epoch_refusals;
        self.fail_stops += other.fail_stops;
        self.landing_failures += other.landing_failures;
        self.fenced_groups += other.fenced_groups;
        self.acks_held += other.acks_held;
        self.acks_held_chain += other.acks_held_chain;
        self.copy_faults += other.copy_faults;
        self.copies_begun += other.copies_begun;
        self.copies_completed += other.copies_completed;
        self.catch_ups += other.catch_ups;
        self.degraded_writes += other.degraded_writes;
        self.convergence_checks += other.convergence_checks;
        self.refused_syncs += other.refused_syncs;
        self.crashes_mid_copy += other.crashes_mid_copy;
        self.copy_retries += other.copy_retries;
        self.split_brains += other.split_brains;
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} steps: groups sent {} acked {} failed {} applied {} (dropped {}, recovered {}, \
             discarded {}); sessions {}, disconnects {}, crashes {} ({} sealing, {} recovering; {} power \
             cuts losing {} unpersisted writes), torn writes {}, torn applies {}, bad frames injected {} (stale {}, replayed {}, resent on another lane {}, \
             numbered far ahead {}) refused {} ({} by the session's window), log-full waits {}; \
             promotions {}, partitions {} (frames lost {}, lanes timed out {}), stale-epoch handshakes \
             refused {}, groups sent by fenced primaries {}; media errors that fail-stopped the \
             mirror {}, that ended a copy's landing {}; acks held for backups {} ({} in chain mode); copy faults {}, copies begun {} \
             completed {} (log catch-ups {}), stores while degraded {}, sync points refused without a mirror {}, crashes mid-copy {}, quiet sessions found converged {}, copy frames asked again {}, split brains refused {}",
            self.steps,
            self.groups_sent,
            self.groups_acked,
            self.groups_failed,
            self.groups_applied,
            self.groups_dropped,
            self.groups_recovered,
            self.groups_discarded,
            self.sessions,
            self.disconnects,
            self.crashes,
            self.seal_crashes,
            self.recovery_crashes,
            self.power_cuts,
            self.writes_lost,
            self.torn_writes,
            self.torn_applies,
            self.violations_injected,
            self.stale_injected,
            self.replays_injected,
            self.seq_resends_injected,
            self.seq_ahead_injected,
            self.violations_detected,
            self.seq_window_refusals,
            self.log_full_waits,
            self.promotions,
            self.partitions,
            self.frames_lost,
            self.timeouts,
            self.epoch_refusals,
            self.fenced_groups,
            self.fail_stops,
            self.landing_failures,
            self.acks_held,
            self.acks_held_chain,
            self.copy_faults,
            self.copies_begun,
            self.copies_completed,
            self.catch_ups,
            self.degraded_writes,
            self.refused_syncs,
            self.crashes_mid_copy,
            self.convergence_checks,
            self.copy_retries,
            self.split_brains
        )
    }
}

/// A broken invariant (or a panic in the core), with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct SimFailure {
    pub seed: u64,
    /// The configuration of the failed run.
    pub config: Box<SimConfig>,
    /// Simulated time of the failure.
    pub step: u64,
    pub message: String,
    /// The last events before the failure, oldest first.
    pub trace: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "simulation with seed {} failed at step {}: {}", self.seed, self.step, self.message)?;
        let steps = match self.config.steps {
            SimConfig::DEFAULT_STEPS => String::new(),
            steps => format!(" MOJIM_SIM_STEPS={steps}"),
        };
        let sabotage = match self.config.sabotage {
            Sabotage::None => String::new(),
            s => format!(" (with Sabotage::{s:?})"),
        };
        writeln!(
            f,
            "replay: MOJIM_SIM_SEED={}{steps} cargo test -p mojim-core --test sim{sabotage}",
            self.seed
        )?;
        let c = &self.config;
        writeln!(
            f,
            "config: {} lanes, region {} B, log {} B, max_frame {}, thresh {}, idle {}, dead {}, batch {}, \
             window {}, metadata log {} records, {:?}, {:?}",
            c.lanes,
            c.region_size,
            c.log_capacity,
            c.max_frame,
            c.checkpoint_thresh,
            c.idle_ticks,
            c.dead_ticks,
            c.apply_batch,
            c.window,
            c.meta_records,
            c.faults,
            c.backups
        )?;
        write!(f, "last events:")?;
        for event in &self.trace {
            write!(f, "\n  {event}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SimFailure {}

/// Runs one simulation. A panic inside the core (a failed assertion) is reported as a failure
/// too, with the seed.
pub fn run(config: SimConfig) -> Result<SimReport, SimFailure> {
    let seed = config.seed;
    if let Err(message) = config.validate() {
        return Err(SimFailure { seed, config: Box::new(config), step: 0, message, trace: Vec::new() });
    }
    let mut world = world::World::new(config.clone());
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| world.run()));
    let message = match outcome {
        Ok(Ok(())) => return Ok(world.report),
        Ok(Err(message)) => message,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".into());
            format!("panic: {what}")
        }
    };
    Err(SimFailure { seed, config: Box::new(config), step: world.now, message, trace: world.trace.into() })
}
