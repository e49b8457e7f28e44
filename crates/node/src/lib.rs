//! The mirror: receives groups on its lanes into crash-safe redo logs, acknowledges each group
//! once it is whole in a log, and checkpoints complete groups into its data area in sequence
//! order.
//!
//! Threads: one acceptor; one per connection (handshake, then a data lane or an operator's
//! requests); one checkpointer; one that maps the files' pages after start (`populate`). The
//! replication logic itself is `mojim_core`'s.
#![forbid(unsafe_code)]

// The node is a handful of components, each owning its state and its locks behind methods;
// `Shared` holds them (and the options and the shutdown flag), and the modules that carry out
// the protocol (accept, lane, apply, command, takeover, status) reach them only through their
// methods:
//
//  - `session::SessionSlot`: the current session, the epoch, what roles have reached the node
//  - `checkpoint_state::Checkpoint`: groups waiting to be applied and released, the right to apply
//  - `forward::Forward`: the queue of groups for the backups, each backup link's state
//  - `lane_logs::Lanes`: each lane's log and receiving state
//  - `data::Store`: the data area, its reader/writer lock, whether it failed
//  - `counters::Stats`: counters and facts for status
//
// Lock order. The components' locks, outermost first; a thread that holds one takes only locks
// further down this list.
//
//  1. `SessionSlot::slot` (`SessionSlot::left` waits on it)
//  2. `Checkpoint::applier` (one applier at a time: held as an `ckpt::Applier`)
//  3. `Forward::state` (`Forward::cv` waits on it)
//  4. `Checkpoint::state` (`Checkpoint::work` and `Checkpoint::space` wait on it)
//  5. `Lanes::log_create`
//  6. a lane of `Lanes` (never two lanes at once; `Lanes::with` and `LaneRef::with` hold it
//     only while their closure runs)
//  7. `Store::lock`, `Stats::last_violation`: nothing is taken under them
//  -  the acceptor's pending connections (`accept::PendingConns`): never held with another
//
// The pairs held together, and where (the method that takes the inner lock in brackets):
//  - slot -> applier, and through it everything the appliers take: `session::leave` (it
//    seals with `checkpoint::seal` while the slot is held)
//  - slot -> Checkpoint::state: `session::begin` (`Checkpoint::resume`)
//  - slot -> a lane: `session::session_max_frame` and `session::session_window`
//    (`Lanes::capacities`), `session::execute` of a `BeginLane` (`Lanes::begin`),
//    `session::welcome` (`Lanes::capacity`), all under `session::join`; `session::execute` of
//    a `Seal`, under `session::leave` (`Lanes::end_session`)
//  - applier -> Forward::state: `checkpoint::apply_locked` (`Forward::sealed`,
//    `Forward::queue_applied`), `checkpoint::reclaim_locked` (`Forward::min_acked`),
//    `forward::pin_for_copy`, `forward::expose` (which reads the lane's log with neither held
//    between the two times it takes the state)
//  - applier -> Checkpoint::state: every `Checkpoint` method that asks for the `Applier`
//    (`plan`, `applied`, `reclaimed`, `reset_to`)
//  - applier -> a lane: `checkpoint::run` (`Lanes::freed`, once a `ReleaseTail` command made a
//    log's tail persistent, under `checkpoint::reclaim_locked`)
//  - applier -> Store::lock: `checkpoint::apply_locked` (`Store::write`, or `Store::try_write` from
//    a lane thread, which becomes the applier only with `Checkpoint::try_applier`:
//    `checkpoint::apply_inline`)
//  - Forward::state -> Checkpoint::state: `forward::wait_to_ack`
//    (`Checkpoint::ready_bytes`); `status::status` (`Forward::report` runs
//    `status::status_here`, which takes `Checkpoint::lag`)
//  - Forward::state -> a lane, Stats::last_violation: `status::status` (`Lanes::usage`,
//    `Stats::counters`, under `Forward::report`)
//  - Checkpoint::state -> a lane: `command::reset` (`Lanes::drop_records`, run by
//    `Checkpoint::reset_to`)
//  - log_create -> a lane: `Lanes::log_of`
//
// A lane that waits for log space (`lane::Receiver::take_slot`, `Checkpoint::wait_for_space`)
// holds no lane: the checkpointer's `Lanes::freed` needs it to free the space, and
// `command::reset` takes Checkpoint::state -> a lane. `LaneRef::with` lets go of the lane when
// its closure returns, so the wait cannot happen under it.
//
// Modules: the components' modules (session aside) use none of the modules that use them;
// `session` and `forward` hold both a component and the protocol around it (joining and
// sealing sessions; the backup links' threads), and reach the other components through
// `Shared`.

mod accept;
pub mod admin_client;
mod checkpoint;
mod checkpoint_state;
mod coord_state;
mod copy_check;
mod counters;
mod data;
mod forward;
mod forward_error;
mod group_seal;
mod lane;
mod lane_logs;
mod log_changed;
pub mod metrics;
mod operator_command_error;
mod operator_commands;
mod pending;
mod populate;
mod refused;
mod replay;
mod session;
mod status;
mod takeover;

#[cfg(test)]
mod checkpoint_tests;
#[cfg(test)]
mod copy_end_tests;
#[cfg(test)]
mod forward_tests;
#[cfg(test)]
mod idle_lane_tests;
#[cfg(test)]
mod lane_tests;
#[cfg(test)]
mod open_tests;
#[cfg(test)]
mod test_peer;

pub use coord_state::CoordinatorStatus;
pub use counters::RecoveryReport;
use data::DataArea;
pub use data::{DataPlacement, UnknownPlacement};
pub use forward::{BackupStatus, MAX_BACKUPS};
/// Largest Reply frame of an operator's read (see `mojim_format::handshake::MAX_READ`).
pub use mojim_format::handshake::MAX_READ;
pub use session::CopyProgress;
pub use status::{LaneStatus, MirrorStatus};

use mojim::config::{Config, Limits, NvmmModel, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim_core::lane::MirrorLane;
use mojim_core::recovery::{self, LaneLog};
use mojim_region::{LogFile, MapSlice, Nvmm};
use mojim_transport::{AnyTransport, Transport};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most lanes a mirror serves (a session's lanes are a bit set in one word).
pub use mojim_core::handshake::MAX_LANES;
/// Largest frame body any configuration allows; records are checked against it on recovery,
/// so that a smaller `max_frame` set later does not hide records written before.
pub(crate) const MAX_FRAME_LIMIT: u32 = 16 << 20;
/// How to run a mirror.
#[derive(Clone, Debug)]
pub struct MirrorOptions {
    pub dir: PathBuf,
    pub log_dir: PathBuf,
    pub listen: String,
    pub region: RegionId,
    pub secret: Secret,
    /// Mutual TLS on every TCP link (`[security] tls`), with this node's certificate: lanes,
    /// operators, and the links to its backups.
    pub tls: Option<Arc<mojim_transport::TlsContext>>,
    pub limits: Limits,
    pub log_capacity: u64,
    pub checkpoint_thresh: usize,
    pub checkpoint_idle: Duration,
    pub max_lanes: u16,
    /// Lanes whose logs the node makes when it opens (`[primary] lanes` of its configuration,
    /// at most `max_lanes`), so that a primary's first handshake need not wait while they are
    /// made; any other lane's log is made at its first handshake. A log that cannot be made at
    /// opening is made (or its lane refused) at that handshake instead.
    pub logs_at_start: u16,
    /// Where the data area lives: memory (mapped) or disk (`sync-disk`).
    pub data: DataPlacement,
    /// Backups this node feeds (the secondary tier).
    pub backups: Vec<String>,
    /// Bytes logged but not yet at every backup above which new groups are not acknowledged.
    pub secondary_tier_thresh: u64,
    /// Bytes per second per backup link, if capped.
    pub secondary_rate_limit: Option<u64>,
    /// Acknowledge a group only once every backup has it (the chain baseline).
    pub chain: bool,
    /// Poll each lane this long before its thread sleeps.
    pub busy_poll: Duration,
    /// Liveness of every link: a lane that hears nothing for the timeout ends its session; a
    /// backup link sends a heartbeat when idle for the interval.
    pub heartbeat: mojim::config::Heartbeat,
    /// For the files a promotion prepares for the application (see `PrimaryFiles`).
    pub dirty_chunk: u64,
    pub metadata_log_records: u64,
    /// The etcd coordinator, if roles come from it, and this node's name there.
    pub coordinator: Option<mojim::config::EtcdSettings>,
    pub node: String,
    /// Emulated slow NVMM under the logs and a memory data area: every persist is charged to
    /// it (`[mirror] nvmm_barrier_ns` and `nvmm_write_rate`; default: none, memory speed).
    pub nvmm: NvmmModel,
}

impl MirrorOptions {
    pub fn from_config(cfg: &Config, insecure: bool) -> Result<MirrorOptions> {
        let m = &cfg.file.mirror;
        Config::check_transport("mirror", &m.transport, "listen", &m.listen)?;
        if !(1..=MAX_LANES).contains(&m.max_lanes) {
            return Err(Error::Config(format!(
                "[mirror] max_lanes = {} must be between 1 and {MAX_LANES}",
                m.max_lanes
            )));
        }
        if m.checkpoint_thresh == 0 {
            return Err(Error::Config("[mirror] checkpoint_thresh must be at least 1".into()));
        }
        let dir = cfg.resolve(&m.dir);
        let opts = MirrorOptions {
            log_dir: if m.log_dir.is_empty() { dir.clone() } else { cfg.resolve(&m.log_dir) },
            dir,
            listen: m.listen.clone(),
            region: cfg.region_id()?,
            secret: cfg.secret(insecure)?,
            tls: cfg.tls()?,
            limits: cfg.limits()?,
            log_capacity: cfg.log_capacity()?,
            checkpoint_thresh: m.checkpoint_thresh as usize,
            checkpoint_idle: Duration::from_millis(m.checkpoint_idle_ms.max(1)),
            max_lanes: m.max_lanes,
            logs_at_start: cfg.file.primary.lanes.min(m.max_lanes),
            busy_poll: Duration::from_micros(m.busy_poll_us),
            data: m
                .data
                .parse()
                .map_err(|e: UnknownPlacement| Error::Config(format!("[mirror] data: {e}")))?,
            backups: m.backups.clone(),
            secondary_tier_thresh: cfg.secondary_tier_thresh()?,
            secondary_rate_limit: cfg.secondary_rate_limit()?,
            chain: m.chain,
            heartbeat: cfg.heartbeat()?,
            dirty_chunk: cfg.dirty_chunk()?,
            metadata_log_records: cfg.file.cluster.metadata_log_records,
            coordinator: cfg.etcd()?,
            node: cfg.file.cluster.node.clone(),
            nvmm: cfg.mirror_nvmm()?,
        };
        // Checked once `--backup` flags may have replaced them, and at open.
        Ok(opts)
    }

    /// Refuses more backups than a node feeds ([`MAX_BACKUPS`]; `mojim backup add` refuses one
    /// past it too), a backup named twice (as `mojim backup add` refuses one already fed), and
    /// this node's own listen address (as `mojim backup add` refuses it).
    pub fn check_backups(&self) -> Result<()> {
        let n = self.backups.len();
        if n > MAX_BACKUPS {
            return Err(Error::Config(format!(
                "[mirror] backups (or --backup) names {n} backups, more than the {MAX_BACKUPS} a node feeds \
                 (each is a thread, a connection, and log space held for it); name at most {MAX_BACKUPS}, \
                 {} fewer",
                n - MAX_BACKUPS
            )));
        }
        // Two links to one backup would each displace the other's session, for ever.
        for (i, b) in self.backups.iter().enumerate() {
            if self.backups[..i].contains(b) {
                return Err(Error::Config(format!(
                    "[mirror] backups (or --backup) names {b} twice; a node feeds each backup once: name it once"
                )));
            }
        }
        // A node cannot be its own backup (`mojim backup add` refuses its own address too).
        if self.backups.contains(&self.listen) {
            return Err(Error::Config(format!(
                "this node listens on {} and names itself as its own backup; each node's [mirror] backups \
                 (or --backup) must name other nodes",
                self.listen
            )));
        }
        Ok(())
    }

    pub fn data_path(&self) -> PathBuf {
        self.dir.join("data.mojim")
    }

    pub fn log_path(&self, lane: u16) -> PathBuf {
        lane_logs::log_path(&self.log_dir, lane)
    }
}

pub(crate) struct Shared {
    pub opts: MirrorOptions,
    /// The data area, its lock, and whether it failed.
    pub data: data::Store,
    /// Every lane's log and receiving state.
    pub lanes: lane_logs::Lanes,
    /// Groups waiting to be applied and released, and the right to apply.
    pub ckpt: checkpoint_state::Checkpoint,
    /// The current session and the epoch this node is at.
    pub session: session::SessionSlot,
    /// Counters and facts for status.
    pub stats: counters::Stats,
    /// Feeding backups: those named at start, and those added since (`backup_add`).
    pub forward: forward::Forward,
    /// The emulated NVMM under the data area and the logs, if any (for status).
    pub nvmm: Option<Arc<Nvmm>>,
    /// What the node last saw of the etcd coordinator (unused without one).
    pub coord: coord_state::CoordState,
    /// Set once when the node stops; every thread checks it.
    pub shutdown: AtomicBool,
}

/// A mirror whose files are open and recovered, not yet serving.
pub struct Mirror {
    shared: Arc<Shared>,
}

/// A serving mirror.
pub struct MirrorHandle {
    shared: Arc<Shared>,
    addr: String,
    threads: Vec<JoinHandle<()>>,
    /// Wakes the acceptor, blocked in its transport's accept, with a connection of its own.
    wake_acceptor: Box<dyn Fn() + Send + Sync>,
}

impl Mirror {
    /// Opens (or creates) the data area and the logs, and runs restart recovery.
    pub fn open(opts: MirrorOptions) -> Result<Mirror> {
        let t0 = Instant::now();
        opts.check_backups()?;
        check_log_capacity(&opts)?;
        create_folders(&opts)?;
        // One emulated device under the data area and every log, opened now or made later.
        let nvmm = Nvmm::shared(opts.nvmm);
        let mut region = open_data_area(&opts)?;
        region.emulate_nvmm(nvmm.clone());
        let logs = open_logs(&opts, &nvmm)?;
        let applied_seq = region.applied_seq()?;
        let found = scan_logs(&opts, &logs, applied_seq);
        let mut report = RecoveryReport { groups_discarded: found.discarded.len(), ..Default::default() };
        let keep = !opts.backups.is_empty();
        let (engine, cp) = replay::replay(&opts, &region, &logs, &found, applied_seq, keep, &mut report)?;
        let applied = cp.applied_seq();
        let lanes = lane_states(&opts, &logs, &found);
        // Without backups at start, an empty forwarder (backups may be added while serving).
        let forward = if keep {
            seed_forward(&opts, &found, applied)
        } else {
            forward::Forward::new(&[], applied, &[])
        };
        warn_discarded(&found);
        report.applied_seq = applied;
        report.micros = t0.elapsed().as_micros() as u64;
        if report.groups_applied > 0 || report.groups_discarded > 0 {
            tracing::info!(?report, "recovered logs");
        }
        let epoch = region.epoch()?.max(1);
        let opened = Opened { region, logs, lanes, forward, engine, cp, epoch, report, nvmm };
        Ok(Mirror { shared: Arc::new(Shared::new(opts, opened)) })
    }

    /// What recovery did when this mirror was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        self.shared.stats.recovery()
    }

    /// Starts serving on `opts.listen`: over TCP for a `host:port`, through shared memory for
    /// a path (a Unix socket there, `mojim_transport::shm`). Backups are reached the same way.
    pub fn serve(self) -> Result<MirrorHandle> {
        let transport = AnyTransport::new(self.shared.opts.tls.clone());
        self.serve_with(transport)
    }

    /// Starts serving over any transport.
    pub fn serve_with<T: Transport>(self, transport: T) -> Result<MirrorHandle> {
        let shared = self.shared;
        let transport = Arc::new(transport);
        let listener = transport
            .listen(&shared.opts.listen)
            .map_err(Error::io(format!("listen on {}", shared.opts.listen)))?;
        let addr = transport.local_addr(&listener).map_err(Error::io("local address"))?;
        shared.stats.set_listen_addr(addr.clone());
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name("mojim-checkpoint".into())
                .spawn(move || checkpoint::checkpointer_loop(&s))
                .map_err(Error::io("spawn checkpointer"))?,
        );
        forward::start(&shared, &transport).map_err(Error::io("spawn forwarders"))?;
        threads.extend(populate::start(&shared));
        let s = shared.clone();
        let t = transport.clone();
        threads.push(
            std::thread::Builder::new()
                .name("mojim-accept".into())
                .spawn(move || accept::accept_loop(s, t, listener))
                .map_err(Error::io("spawn acceptor"))?,
        );
        let wake_addr = addr.clone();
        let wake_acceptor = Box::new(move || {
            let _ = transport.connect(&wake_addr, Duration::from_millis(200));
        });
        if let Some(settings) = shared.opts.coordinator.clone() {
            let s = shared.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("mojim-coord".into())
                    .spawn(move || takeover::watch(&s, &settings))
                    .map_err(Error::io("spawn the coordinator watcher"))?,
            );
        }
        tracing::info!(%addr, region = %mojim::config::format_uuid(&shared.opts.region.uuid), "mirror serving");
        Ok(MirrorHandle { shared, addr, threads, wake_acceptor })
    }
}

/// A lane's log must be a multiple of 4 KiB holding at least two full frames.
fn check_log_capacity(opts: &MirrorOptions) -> Result<()> {
    // With a placed record's tag after its body (over TLS), the largest record a lane takes.
    let tag = mojim_format::frame::RECORD_TAG_SIZE as u64;
    let frame_record = mojim_format::log::record_size(opts.limits.max_frame as u64 + tag);
    if opts.log_capacity < 2 * frame_record || !opts.log_capacity.is_multiple_of(4096) {
        return Err(Error::Config(format!(
            "[mirror] log_capacity {} is too small for [limits] max_frame {}: a lane's log must be a \
             multiple of 4 KiB holding at least 2 full frames ({} bytes); raise log_capacity or lower max_frame",
            mojim::size::format_size(opts.log_capacity),
            mojim::size::format_size(opts.limits.max_frame as u64),
            (2 * frame_record).next_multiple_of(4096)
        )));
    }
    Ok(())
}

/// Creates the data area's folder and the logs' folder.
fn create_folders(opts: &MirrorOptions) -> Result<()> {
    for d in [&opts.dir, &opts.log_dir] {
        std::fs::create_dir_all(d).map_err(Error::io(format!("create folder {}", d.display())))?;
    }
    Ok(())
}

/// Opens (or creates) the data area, which must hold the configured region.
fn open_data_area(opts: &MirrorOptions) -> Result<DataArea> {
    let data_path = opts.data_path();
    let region = DataArea::open_or_create(&data_path, opts.region.uuid, opts.region.size, opts.data)?;
    if region.uuid() != opts.region.uuid || region.size() != opts.region.size {
        return Err(Error::Config(format!(
            "{} holds region {} of {} bytes, but the configuration names region {} of {} bytes; \
             point [mirror] dir at this region's folder or remove it",
            data_path.display(),
            mojim::config::format_uuid(&region.uuid()),
            region.size(),
            mojim::config::format_uuid(&opts.region.uuid),
            opts.region.size
        )));
    }
    Ok(region)
}

/// Opens every lane's log that exists, each of which must belong to this region and lane, and
/// makes those of the first `logs_at_start` lanes that do not (any other lane's log is made when
/// a session's lane first joins).
fn open_logs(opts: &MirrorOptions, nvmm: &Option<Arc<Nvmm>>) -> Result<Vec<OnceLock<LogFile>>> {
    let mut logs = Vec::new();
    for lane in 0..opts.max_lanes {
        let cell = OnceLock::new();
        let p = opts.log_path(lane);
        if p.exists() {
            let mut log = LogFile::open_unpopulated(&p)?;
            log.emulate_nvmm(nvmm.clone());
            if log.header().region_uuid != opts.region.uuid || log.header().lane != lane {
                return Err(Error::Config(format!(
                    "{} belongs to another region or lane; move it away",
                    p.display()
                )));
            }
            let _ = cell.set(log);
        } else if lane < opts.logs_at_start {
            match LogFile::create(&p, opts.region.uuid, lane, opts.log_capacity) {
                Ok(mut log) => {
                    log.emulate_nvmm(nvmm.clone());
                    let _ = cell.set(log);
                }
                // Not fatal: the lane's first handshake makes it, or refuses the lane saying why.
                Err(e) => {
                    tracing::warn!(lane, error = %e, "cannot make the lane's log now; its first handshake will")
                }
            }
        }
        logs.push(cell);
    }
    Ok(logs)
}

/// Finds the complete groups in the logs after `applied_seq`, and the incomplete ones.
fn scan_logs(opts: &MirrorOptions, logs: &[OnceLock<LogFile>], applied_seq: u64) -> recovery::Recovered {
    let areas: Vec<(MapSlice<'_>, u64)> =
        logs.iter().map(|c| c.get().map_or((MapSlice::empty(), 0), |l| (l.area(), l.tail()))).collect();
    let views: Vec<LaneLog<'_, MapSlice<'_>>> =
        areas.iter().map(|(area, tail)| LaneLog { area, tail: *tail }).collect();
    // A node with backups keeps applied groups in its logs until every backup has them:
    // find those too, to forward them again.
    let since = if opts.backups.is_empty() { applied_seq } else { 0 };
    recovery::recover(&views, since, MAX_FRAME_LIMIT, opts.region.size)
}

/// Every lane's state after recovery: its log's tail (as recovery left it: the head, or, with
/// backups, where it was) and head.
fn lane_states(
    opts: &MirrorOptions,
    logs: &[OnceLock<LogFile>],
    found: &recovery::Recovered,
) -> Vec<Mutex<MirrorLane>> {
    let lane = |(lane, cell): (usize, &OnceLock<LogFile>)| {
        let (cap, tail, head) = match cell.get() {
            Some(l) => (l.capacity(), l.tail(), found.heads[lane]),
            None => (opts.log_capacity, 0, 0),
        };
        Mutex::new(MirrorLane::new(lane as u16, cap, tail, head))
    };
    logs.iter().enumerate().map(lane).collect()
}

/// Forwarding state whose queue holds every recovered group, to send to the backups again.
fn seed_forward(opts: &MirrorOptions, found: &recovery::Recovered, applied: u64) -> forward::Forward {
    // Everything before the first group still in the logs reached every backup.
    let base = found.groups.first().map_or(applied, |g| g.first_seq - 1);
    forward::Forward::new(&opts.backups, base, &found.groups)
}

fn warn_discarded(found: &recovery::Recovered) {
    for d in &found.discarded {
        tracing::warn!(
            lane = d.lane,
            seq = d.seq,
            frames = d.frames,
            "recovery discarded an incomplete group"
        );
    }
}

/// What [`Mirror::open`] opened and recovered, for [`Shared::new`].
struct Opened {
    region: DataArea,
    logs: Vec<OnceLock<LogFile>>,
    lanes: Vec<Mutex<MirrorLane>>,
    forward: forward::Forward,
    /// The checkpoint engine recovery ran (holding, with backups, the recovered groups until
    /// every backup has them), and its checkpointer, at the applied number.
    engine: mojim_core::mirror::CheckpointEngine,
    cp: mojim_core::checkpoint::Checkpointer,
    epoch: u64,
    report: RecoveryReport,
    /// The emulated NVMM under the data area and the logs, if any.
    nvmm: Option<Arc<Nvmm>>,
}

impl Shared {
    /// A mirror's state, neither serving nor in a session yet.
    fn new(opts: MirrorOptions, r: Opened) -> Shared {
        let lanes = lane_logs::Lanes::new(r.logs, r.lanes, opts.log_dir.clone(), opts.region.uuid)
            .with_nvmm(r.nvmm.clone());
        let data = data::Store::new(r.region, opts.data_path());
        Shared {
            ckpt: checkpoint_state::Checkpoint::new(r.engine, r.cp, opts.checkpoint_thresh),
            opts,
            data,
            lanes,
            session: session::SessionSlot::new(r.epoch),
            stats: counters::Stats::new(r.report),
            forward: r.forward,
            nvmm: r.nvmm,
            coord: coord_state::CoordState::new(),
            shutdown: AtomicBool::new(false),
        }
    }
}

impl MirrorHandle {
    /// The address the mirror listens on.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Copies data-area bytes; never returns bytes of a partly applied group.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.shared.data.read_consistent(offset, out)
    }

    pub fn status(&self) -> MirrorStatus {
        status::status(&self.shared)
    }

    /// What reads this mirror's status from other threads (a metrics listener's) while it
    /// serves, and after.
    pub fn status_source(&self) -> StatusSource {
        StatusSource { shared: self.shared.clone() }
    }

    /// Applies every complete group now (gap-free prefix only).
    pub fn checkpoint(&self) {
        checkpoint::checkpoint(&self.shared, false);
    }

    /// Blocks until the process is asked to stop.
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        forward::join(&self.shared);
    }

    /// Stops serving, seals any session, and returns.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        session::end_current(&self.shared);
        (self.wake_acceptor)();
        self.shared.ckpt.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        forward::join(&self.shared);
        checkpoint::checkpoint(&self.shared, false);
    }
}

/// Reads a mirror's status from any thread, as [`MirrorHandle::status`] does.
#[derive(Clone)]
pub struct StatusSource {
    shared: Arc<Shared>,
}

impl StatusSource {
    pub fn status(&self) -> MirrorStatus {
        status::status(&self.shared)
    }

    /// Whether the mirror still serves (it has not begun to stop).
    pub fn serving(&self) -> bool {
        !self.shared.shutdown.load(Ordering::SeqCst)
    }
}

impl Drop for MirrorHandle {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop();
        }
    }
}
