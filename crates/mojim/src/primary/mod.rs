//! The primary: the application's side of a region.
//!
//! The application maps the region and uses it with loads and stores; at a sync point
//! (`msync`, `gmsync`) the named bytes go to the mirror as one atomic group, in one round trip,
//! straight from the mapping. Sync points from many threads pipeline: each thread keeps to one
//! lane, a lane's sender lock is held only while its frames are written, and whoever waits on a
//! lane reads its acknowledgements for everyone waiting there.
//!
//! Failures: a beater thread sends a heartbeat on every lane idle for the heartbeat interval
//! (and never waits to hear one, so no lane's heartbeat waits on another lane's answer); a
//! keeper thread reads the answers owed and declares the mirror lost when a lane hears nothing
//! for the heartbeat timeout. On a loss the primary first makes its whole copy persistent (the
//! window of vulnerability ends there), then follows `on_mirror_loss`: `block` fails sync
//! points until the mirror is back, `degrade` keeps going and records changed chunks in a
//! persistent dirty bitmap. The keeper reconnects, and the new session first brings
//! the mirror up to date (see `resync.rs`) while the application keeps syncing.

mod link;
mod link_error;
#[cfg(test)]
mod link_tests;
mod metrics;
mod metrics_page;
#[cfg(test)]
mod options_tests;
mod populate;
mod resync;
mod stage;

pub use link::COPY_FRAME;
pub use metrics::{MirrorState, PrimaryMetrics, SyncHistogram, SYNC_BUCKETS};
pub use metrics_page::render_metrics;
// Shared with the node; kept here too, where they were first.
pub use crate::history::{new_generation, CopyKind, PrimaryFiles};
pub use resync::ResyncStatus;
pub use resync::COPY_GROUP_BYTES;

use crate::config::{Config, Heartbeat, Limits, Mode, NvmmModel, OnMirrorLoss, Secret};
use crate::error::{Error, Result};
use crate::nvmm::NvmmStatus;
use crate::region_lock::RegionLock;
use link::{lock, Link};
use link_error::LinkError;
use mojim_core::encode::{check_group, GroupLimits, RangeError};
use mojim_core::primary::REFUSED_SYNC;
use mojim_core::Range;
use mojim_region::{DirtyMap, MetaRing, Nvmm, RegionFile};
use mojim_transport::{AnyTransport, Transport};
pub use stage::Put;
use stage::Stage;
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the primary does about failures.
#[derive(Clone, Debug)]
pub struct FailurePolicy {
    /// When to send heartbeats and when to declare the mirror lost (`[cluster]
    /// heartbeat_interval_ms` and `heartbeat_timeout_ms`, default 100 and 2000).
    pub heartbeat: Heartbeat,
    /// Whether sync points fail or go on without the mirror (`[cluster] on_mirror_loss`,
    /// default `block`).
    pub on_mirror_loss: OnMirrorLoss,
    /// How often to try to reconnect to a lost mirror (`[cluster] reconnect_ms`, default
    /// 200 ms).
    pub reconnect: Duration,
    /// Bytes per bit of the dirty bitmap (`[cluster] dirty_chunk`, default 64 KiB).
    pub dirty_chunk: u64,
    /// Records of the metadata log, 32 bytes each (`[cluster] metadata_log_records`, default
    /// 65536).
    pub metadata_log_records: u64,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        FailurePolicy {
            heartbeat: Heartbeat::default(),
            on_mirror_loss: OnMirrorLoss::Block,
            reconnect: Duration::from_millis(200),
            dirty_chunk: 64 << 10,
            metadata_log_records: 1 << 16,
        }
    }
}

/// How to open a region as primary.
#[derive(Clone, Debug)]
pub struct PrimaryOptions {
    /// The region file to map (`[region] path`, resolved against the configuration file).
    pub region_path: PathBuf,
    /// When sync points return (`[primary] mode`, default `sync`).
    pub mode: Mode,
    /// The mirror's address (`[primary] mirror`, default `127.0.0.1:7420`).
    pub mirror: String,
    /// Connections to the mirror, 1 to 256; a thread keeps to one lane (`[primary] lanes`,
    /// default 2).
    pub lanes: u16,
    /// The cluster secret; empty: no authentication (always so when the mode does not
    /// replicate).
    pub secret: Secret,
    /// Mutual TLS on the lanes (`[security] tls`), with this application's certificate; `None`:
    /// plain TCP.
    pub tls: Option<std::sync::Arc<mojim_transport::TlsContext>>,
    /// Frame and group limits (`[limits]`).
    pub limits: Limits,
    /// In mode `async`, the groups a lane may have in flight before a sync point waits, 1 to
    /// 65536 (`[primary] async_window`, default 256).
    pub async_window: u32,
    /// To connect to the mirror and finish each lane's handshake (`[primary]
    /// connect_timeout_ms`, default 5 s).
    pub connect_timeout: Duration,
    /// Poll for acknowledgements this long before sleeping (`[primary] busy_poll_us`, default
    /// 0: sleep at once).
    pub busy_poll: Duration,
    /// Over a transport that shares memory, place records' bodies straight into the mirror's
    /// logs (`[primary] place_records`, default true).
    pub place_records: bool,
    /// More mirrors to send every group to and wait for, besides `mirror` (the broadcast
    /// baseline, for comparison only; `[primary] broadcast`, default none).
    pub broadcast: Vec<String>,
    /// What to do about failures (`[cluster]`).
    pub failure: FailurePolicy,
    /// The etcd coordinator, if roles come from it; then `mirror` comes from it too.
    pub coordinator: Option<crate::config::EtcdSettings>,
    /// This node's name (for the coordinator).
    pub node: String,
    /// Emulated slow NVMM under the region, charged whenever the primary persists it locally
    /// (`[region] nvmm_barrier_ns` and `nvmm_write_rate`; default: none, memory speed).
    pub nvmm: NvmmModel,
    /// Where to serve the primary's metrics (`/metrics`, `/healthz`, `/readyz`), `host:port`
    /// (`[primary] metrics_listen`; default none). See [`Primary::serve_metrics`].
    pub metrics_listen: Option<String>,
}

/// The defaults each field names (those of a configuration file that sets nothing), with no
/// region file, no secret (a replicated mode then needs one: set `secret`) and no coordinator:
/// set `region_path` and what differs, `PrimaryOptions { region_path, ..Default::default() }`.
impl Default for PrimaryOptions {
    fn default() -> Self {
        PrimaryOptions {
            region_path: PathBuf::new(),
            mode: Mode::Sync,
            mirror: format!("127.0.0.1:{}", crate::config::DEFAULT_PORT),
            lanes: 2,
            secret: Secret(Vec::new()),
            tls: None,
            limits: Limits::default(),
            async_window: 256,
            connect_timeout: Duration::from_secs(5),
            busy_poll: Duration::ZERO,
            place_records: true,
            broadcast: Vec::new(),
            failure: FailurePolicy::default(),
            coordinator: None,
            node: String::new(),
            nvmm: NvmmModel::default(),
            metrics_listen: None,
        }
    }
}

impl PrimaryOptions {
    /// Options from a configuration file.
    pub fn from_config(cfg: &Config, insecure: bool) -> Result<PrimaryOptions> {
        let p = &cfg.file.primary;
        let mode = cfg.mode()?;
        if mode.replicated() {
            Config::check_transport("primary", &p.transport, "mirror", &p.mirror)?;
        }
        if mode.replicated() && !(1..=256).contains(&p.lanes) {
            return Err(Error::Config(format!("[primary] lanes = {} must be between 1 and 256", p.lanes)));
        }
        if p.async_window == 0 || p.async_window > 65536 {
            return Err(Error::Config(format!(
                "[primary] async_window = {} must be between 1 and 65536",
                p.async_window
            )));
        }
        let records = cfg.file.cluster.metadata_log_records;
        if !(64..=(1 << 26)).contains(&records) {
            return Err(Error::Config(format!(
                "[cluster] metadata_log_records = {records} must be between 64 and 67108864"
            )));
        }
        Ok(PrimaryOptions {
            region_path: cfg.resolve(&cfg.file.region.path),
            mode,
            mirror: p.mirror.clone(),
            lanes: p.lanes,
            secret: if mode.replicated() { cfg.secret(insecure)? } else { Secret(Vec::new()) },
            tls: if mode.replicated() { cfg.application_tls()? } else { None },
            limits: cfg.limits()?,
            async_window: p.async_window,
            connect_timeout: Duration::from_millis(p.connect_timeout_ms),
            busy_poll: Duration::from_micros(p.busy_poll_us),
            place_records: p.place_records,
            broadcast: p.broadcast.clone(),
            failure: FailurePolicy {
                heartbeat: cfg.heartbeat()?,
                on_mirror_loss: cfg.on_mirror_loss()?,
                reconnect: Duration::from_millis(cfg.file.cluster.reconnect_ms.max(1)),
                dirty_chunk: cfg.dirty_chunk()?,
                metadata_log_records: records,
            },
            coordinator: cfg.etcd()?,
            node: cfg.file.cluster.node.clone(),
            nvmm: cfg.region_nvmm()?,
            metrics_listen: crate::config::check_metrics_listen(
                &p.metrics_listen,
                "[primary] metrics_listen",
            )?,
        })
    }

    /// The primary's metadata log, beside the region file.
    pub fn metadata_log_path(&self) -> PathBuf {
        PrimaryFiles::beside(&self.region_path).metadata_log
    }

    /// The primary's dirty bitmap, beside the region file.
    pub fn dirty_map_path(&self) -> PathBuf {
        PrimaryFiles::beside(&self.region_path).dirty_map
    }
}

/// A group queued in order; [`Primary::wait`] returns when it is durable for the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a ticket is only durable once waited for"]
pub struct Ticket {
    session: u64,
    lane: u16,
    seq: u64,
}

impl Ticket {
    const LOCAL: Ticket = Ticket { session: 0, lane: 0, seq: 0 };

    /// The group's sequence number (0 when nothing was sent: an empty group, an unreplicated
    /// mode, or a primary running without its mirror).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The ticket's parts: session id, lane and sequence number. For a binding that hands
    /// tickets to another language and takes them back ([`Ticket::from_parts`]).
    pub fn to_parts(self) -> (u64, u16, u64) {
        (self.session, self.lane, self.seq)
    }

    /// The ticket [`Ticket::to_parts`] took apart. Only the parts of a ticket this primary
    /// issued make sense to [`Primary::wait`]: made-up parts naming a lane the session does not
    /// have are refused ([`RangeError::Ticket`]), and others
    /// may name a group that never comes. A binding must make sure it gets back what it gave
    /// out (the C API checks a keyed tag).
    pub fn from_parts(session: u64, lane: u16, seq: u64) -> Ticket {
        Ticket { session, lane, seq }
    }
}

/// What a primary reports about itself.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrimaryStatus {
    /// The mode's name, e.g. `sync`.
    pub mode: String,
    /// The mirror's address.
    pub mirror: String,
    /// Connected lanes, counting every broadcast mirror's (0 while not connected).
    pub lanes: usize,
    /// The current session's id (0 while not connected).
    pub session: u64,
    /// This primary's epoch.
    pub epoch: u64,
    /// The generation id of the history this copy follows.
    pub generation: u64,
    /// The sequence number the next group will take (0 while not connected).
    pub next_seq: u64,
    /// Per lane (of every mirror, as in `lanes`), the highest sequence number acknowledged.
    pub acked_seq: Vec<u64>,
    /// Why the mirror is lost, while it is.
    pub failed: Option<String>,
    /// Running without the mirror (`degrade`), recording changes in the dirty bitmap.
    pub degraded: bool,
    /// Bytes the dirty bitmap marks as changed since the mirror last had them.
    pub dirty_bytes: u64,
    /// Times the mirror was lost since the primary opened.
    pub mirror_losses: u64,
    /// Microseconds the last loss took to make the primary's own copy persistent: until then
    /// acknowledged groups of `sync` mode had one copy, in volatile caches.
    pub vulnerable_us: Option<u64>,
    /// The last attempt to reconnect, if it failed.
    pub reconnect_error: Option<String>,
    /// The current or last resynchronisation, if one ran.
    pub resync: Option<ResyncStatus>,
    /// The primary's lease, under the etcd coordinator.
    pub lease: Option<LeaseStatus>,
    /// The emulated NVMM under the region, if one is set (`PrimaryOptions::nvmm`).
    pub nvmm: Option<NvmmStatus>,
}

/// The primary's lease in etcd, as [`PrimaryStatus`] reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LeaseStatus {
    /// etcd's id of the lease.
    pub id: i64,
    /// Milliseconds this primary may still acknowledge for, unless the lease is found lost.
    pub valid_ms: u64,
    /// Renewal attempts finished so far, successful or not.
    pub renewals: u64,
    /// Why this primary may no longer acknowledge, once it may not.
    pub lost: Option<String>,
}

#[derive(Default)]
struct Health {
    lost: Option<String>,
    losses: u64,
    vulnerable_us: Option<u64>,
    reconnect_error: Option<String>,
    /// The last session lost, and per lane index the last group its mirror acknowledged: a
    /// sync point whose group was acknowledged just before its session ended is kept, though
    /// its waiter finds the session gone.
    lost_acks: Option<(u64, Vec<u64>)>,
}

pub(crate) struct Inner<T: Transport> {
    transport: T,
    opts: PrimaryOptions,
    region: RegionFile,
    mode: Mode,
    epoch: u64,
    /// Checks a group when no link says how large a group may be.
    local_limits: GroupLimits,
    /// The current session, if connected. Held for writing only to install or drop a link:
    /// a degraded sync point holds it for reading while it marks the dirty bitmap, so the
    /// bitmap a new session copies is never missing a change.
    link: RwLock<Option<Arc<Link<T::Conn>>>>,
    meta: Option<MetaRing>,
    dirty: Option<DirtyMap>,
    health: Mutex<Health>,
    /// What sync points count (see `metrics.rs`).
    counters: metrics::SyncCounters,
    resync: resync::Progress,
    /// The primary's lease (etcd coordinator): nothing is acknowledged once it may have expired.
    lease: Option<crate::coord::Lease>,
    /// No new session: the keeper stops (the beater goes on until `stopped`, so that the
    /// lanes a closing primary still waits on stay alive).
    closing: AtomicBool,
    /// The session is about to be closed: the beater stops.
    stopped: AtomicBool,
    wake: (Mutex<()>, Condvar),
    /// Held by the application across stores the mirror must not see half done
    /// ([`Primary::hold_copies`]), and by a copy into the mirror while it reads the region.
    copy_gate: Mutex<()>,
    /// The threads of the sessions' copies into the mirror (see `resync.rs`), joined when the
    /// primary closes, so that nothing of it touches the region once its lock is let go.
    resyncs: Mutex<Vec<JoinHandle<()>>>,
    /// The address of the first metrics listener ([`Primary::serve_metrics`]).
    metrics_addr: std::sync::OnceLock<std::net::SocketAddr>,
    /// One primary per region: held as long as anything of this one can touch the region.
    _lock: RegionLock,
}

/// Copies into the mirror wait while this lives ([`Primary::hold_copies`]).
#[must_use = "copies are held off only while the guard lives"]
pub struct CopyHold<'a> {
    _gate: std::sync::MutexGuard<'a, ()>,
}

/// A region opened as primary.
pub struct Primary<T: Transport = AnyTransport> {
    inner: Arc<Inner<T>>,
    keeper: Option<JoinHandle<()>>,
    /// Sends the heartbeats (see `Inner::beater_loop`).
    beater: Option<JoinHandle<()>>,
    /// Maps the region's pages after opening (see `populate.rs`).
    populater: Option<JoinHandle<()>>,
    /// Metrics listeners serving this primary ([`Primary::serve_metrics`]): stopped, and their
    /// ports freed, when it closes.
    metrics_serving: Mutex<Vec<mojim_metrics::Serving>>,
}

static THREADS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_NO: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn thread_no() -> usize {
    THREAD_NO.with(|c| {
        if c.get() == usize::MAX {
            c.set(THREADS.fetch_add(1, Ordering::Relaxed));
        }
        c.get()
    })
}

impl Primary<AnyTransport> {
    /// Opens the region at `opts.region_path` and, if the mode replicates, connects every lane:
    /// over TCP, or through shared memory when the mirror's address is a path.
    ///
    /// It first takes the region's lock ([`RegionLock`]), held until the primary is closed or
    /// dropped: while it is held, another open of the region, in this process or another, fails
    /// with [`Error::RegionLocked`].
    pub fn open(opts: &PrimaryOptions) -> Result<Primary<AnyTransport>> {
        Primary::open_with(AnyTransport::new(opts.tls.clone()), opts)
    }

    /// As [`Primary::open`], with the region's lock taken already: for a caller that changes the
    /// region file before the primary maps it (a repair, a replay), under the same lock.
    pub fn open_locked(lock: RegionLock, opts: &PrimaryOptions) -> Result<Primary<AnyTransport>> {
        Primary::open_locked_with(AnyTransport::new(opts.tls.clone()), lock, opts)
    }
}

/// Under the etcd coordinator: checks that this node is the primary in the current roles (or
/// writes the first roles), takes the lease, and returns the epoch and the mirror's address.
fn lead(
    settings: &crate::config::EtcdSettings,
    opts: &PrimaryOptions,
    region: &RegionFile,
) -> Result<(u64, String, crate::coord::Lease)> {
    use crate::coord::{Coordinator, Roles};
    if opts.node.is_empty() {
        return Err(Error::Config(
            "coordinator = \"etcd\" needs this node's name: set [cluster] node (or PrimaryOptions.node)"
                .into(),
        ));
    }
    let coord = Coordinator::new(settings)?;
    let roles = match coord.roles()? {
        Some((r, _)) => r,
        None => {
            let first = Roles {
                epoch: region.epoch().max(1),
                primary: opts.node.clone(),
                mirror: String::new(),
                mirror_addr: opts.mirror.clone(),
                by_takeover: false,
            };
            coord.swap_roles(&first, 0)?;
            coord.roles()?.map(|(r, _)| r).ok_or_else(|| Error::Coordinator("the roles vanished".into()))?
        }
    };
    let check = |r: &Roles| {
        if r.primary != opts.node {
            return Err(Error::Coordinator(format!(
                "node {} is not the primary in epoch {}: node {} is; start the application there",
                opts.node, r.epoch, r.primary
            )));
        }
        Ok(())
    };
    check(&roles)?;
    // A restarted application waits for its previous lease to expire.
    let deadline = Instant::now() + settings.lease_ttl + settings.lease_renew * 2;
    let lease = loop {
        match coord.campaign(&opts.node, roles.epoch) {
            Ok(l) => break l,
            Err(e) if Instant::now() < deadline => {
                tracing::info!(error = %e, "waiting for the previous lease to expire");
                std::thread::sleep(settings.lease_renew / 4);
            }
            Err(e) => return Err(e),
        }
    };
    // The roles may have moved on while the lease was free.
    let now =
        coord.roles()?.map(|(r, _)| r).ok_or_else(|| Error::Coordinator("the roles vanished".into()))?;
    // (The mirror names itself in the roles meanwhile; that changes nothing for this primary.)
    if (now.epoch, &now.primary, &now.mirror_addr) != (roles.epoch, &roles.primary, &roles.mirror_addr) {
        let _ = lease.resign();
        check(&now)?;
        return Err(Error::Coordinator(format!(
            "the roles changed to epoch {} while taking the lease; retry",
            now.epoch
        )));
    }
    if region.epoch() < roles.epoch {
        region.set_epoch(roles.epoch).map_err(Error::io("persist the epoch"))?;
    }
    Ok((roles.epoch, roles.mirror_addr.clone(), lease))
}

impl<T: Transport> Primary<T>
where
    T::Conn: Send + Sync + 'static,
{
    /// As [`Primary::open`], over any transport.
    pub fn open_with(transport: T, opts: &PrimaryOptions) -> Result<Primary<T>> {
        let lock = RegionLock::acquire(&opts.region_path)?;
        Primary::open_locked_with(transport, lock, opts)
    }

    /// As [`Primary::open_locked`], over any transport.
    pub fn open_locked_with(transport: T, lock: RegionLock, opts: &PrimaryOptions) -> Result<Primary<T>> {
        lock.check_covers(&opts.region_path)?;
        // Its pages are mapped by a thread of their own, while the session is set up.
        let mut region = RegionFile::open_unpopulated(&opts.region_path)?;
        region.emulate_nvmm(Nvmm::shared(opts.nvmm));
        let mut opts = opts.clone();
        let (epoch, lease) = match &opts.coordinator {
            Some(settings) => {
                let (epoch, mirror, lease) = lead(settings, &opts, &region)?;
                opts.mirror = mirror;
                (epoch, Some(lease))
            }
            None => (region.epoch().max(1), None),
        };
        let opts = &opts;
        let replicated = opts.mode.replicated();
        let meta = if replicated {
            Some(MetaRing::open_or_create(
                &opts.metadata_log_path(),
                region.uuid(),
                opts.failure.metadata_log_records,
            )?)
        } else {
            None
        };
        // Unreplicated writes are changes a mirror lacks too: they are recorded like a degraded
        // primary's, so that replicating the region later copies them.
        let dirty = DirtyMap::open_or_create(
            &opts.dirty_map_path(),
            region.uuid(),
            region.size(),
            opts.failure.dirty_chunk,
        )?;
        let local_limits = GroupLimits {
            region_size: region.size(),
            max_frame: opts.limits.max_frame,
            max_ranges: opts.limits.max_ranges,
            max_group_log_bytes: u64::MAX,
        };
        let inner = Arc::new(Inner {
            transport,
            opts: opts.clone(),
            mode: opts.mode,
            epoch,
            local_limits,
            link: RwLock::new(None),
            meta,
            dirty: Some(dirty),
            health: Mutex::new(Health::default()),
            counters: metrics::SyncCounters::default(),
            resync: resync::Progress::default(),
            lease,
            closing: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            wake: (Mutex::new(()), Condvar::new()),
            copy_gate: Mutex::new(()),
            resyncs: Mutex::new(Vec::new()),
            metrics_addr: std::sync::OnceLock::new(),
            region,
            _lock: lock,
        });
        // Dropped on an error below: stops and joins the populater.
        let mut p = Primary {
            populater: populate::start(&inner),
            inner,
            keeper: None,
            beater: None,
            metrics_serving: Mutex::new(Vec::new()),
        };
        if !replicated {
            p.inner.start_unreplicated()?;
            p.open_metrics_listener()?;
            return Ok(p);
        }
        match p.inner.connect() {
            Ok(()) => {}
            // Without its mirror a degrading primary starts degraded and keeps trying.
            Err(e) if opts.failure.on_mirror_loss == OnMirrorLoss::Degrade && e.is_peer_unreachable() => {
                p.inner.start_degraded(e.to_string())?;
            }
            Err(e) => return Err(e),
        }
        let k = p.inner.clone();
        let keeper = std::thread::Builder::new()
            .name("mojim-keeper".into())
            .spawn(move || k.keeper_loop())
            .map_err(Error::io("spawn the keeper thread"))?;
        p.keeper = Some(keeper);
        let b = p.inner.clone();
        let beater = std::thread::Builder::new()
            .name("mojim-beat".into())
            .spawn(move || b.beater_loop())
            .map_err(Error::io("spawn the heartbeat thread"))?;
        p.beater = Some(beater);
        p.open_metrics_listener()?;
        Ok(p)
    }

    /// Serves the metrics at `metrics_listen`, if set: last, once nothing else can fail.
    fn open_metrics_listener(&self) -> Result<()> {
        if let Some(addr) = &self.inner.opts.metrics_listen {
            self.serve_metrics(addr)?;
        }
        Ok(())
    }

    /// Bytes in the region.
    pub fn size(&self) -> u64 {
        self.inner.region.size()
    }

    /// The mode the region was opened in.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Address of region byte 0, for loads and stores.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.region.data_ptr()
    }

    /// Copies `data` into the region at `offset` (a store, not a sync point).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len() as u64)?;
        self.inner.region.write(offset, data);
        Ok(())
    }

    /// Copies `src`, bytes of another mapping (a recoverable-memory arena, say), into the
    /// region at `offset` (a store, not a sync point).
    pub fn write_from(&self, offset: u64, src: mojim_region::MapSlice<'_>) -> Result<()> {
        self.check(offset, src.len() as u64)?;
        self.inner.region.write_from(offset, src);
        Ok(())
    }

    /// Whether `ranges` would be accepted as one group by a sync point now, without sending
    /// anything: inside the region, at most `[limits] max_ranges` of them, and (while a mirror
    /// is connected) small enough for one lane's log. The error says which limit and by how
    /// much.
    pub fn check_group(&self, ranges: &[Range]) -> Result<()> {
        let link = self.inner.link.read().unwrap_or_else(|p| p.into_inner()).clone();
        match link {
            Some(link) => check_group(ranges, &link.limits)?,
            None => check_group(ranges, &self.inner.local_limits)?,
        };
        Ok(())
    }

    /// Copies region bytes at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len() as u64)?;
        self.inner.region.read(offset, out);
        Ok(())
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.inner.region.size();
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(Error::Range(RangeError::OutOfBounds { offset, len, region_size: size }));
        }
        Ok(())
    }

    /// Makes `[offset, offset + len)` durable for the mode, atomically.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        self.gmsync(&[Range::new(offset, len)])
    }

    /// Makes all `ranges` durable for the mode as one atomic group: the ordering point and,
    /// in `sync` and `sync-flush`, the durability point.
    pub fn gmsync(&self, ranges: &[Range]) -> Result<()> {
        let t0 = Instant::now();
        let r = self.persist(ranges).and_then(|t| self.durable(t));
        self.inner.counters.sync_point(thread_no(), t0.elapsed(), r.is_ok());
        r
    }

    /// The second half of a sync point: waits for the ticket where the mode waits for the
    /// mirror.
    fn durable(&self, t: Ticket) -> Result<()> {
        if self.inner.mode.waits_for_mirror() {
            self.wait(t)?;
        }
        Ok(())
    }

    /// `msync` of the bytes at `ptr` (which must lie inside the region).
    pub fn msync_ptr(&self, ptr: *const u8, len: usize) -> Result<()> {
        let r = self.range_of(ptr, len)?;
        self.gmsync(&[r])
    }

    /// The region range of a pointer range.
    pub fn range_of(&self, ptr: *const u8, len: usize) -> Result<Range> {
        let base = self.inner.region.data_ptr() as usize;
        let addr = ptr as usize;
        let size = self.inner.region.size();
        match addr.checked_sub(base) {
            Some(off) if (off as u64).checked_add(len as u64).is_some_and(|e| e <= size) => {
                Ok(Range::new(off as u64, len as u64))
            }
            _ => Err(Error::Range(RangeError::Pointer { addr, len, base, size })),
        }
    }

    /// The ordering point: queues `ranges` as one group after every group this thread queued
    /// before, and returns without waiting for the mirror. In `unreplicated` and `async` modes
    /// the ranges are locally persistent when this returns.
    pub fn persist(&self, ranges: &[Range]) -> Result<Ticket> {
        self.inner.persist(ranges, &mut Stage::none())
    }

    /// [`Primary::gmsync`] of `ranges` whose new bytes are not in the region yet: `put(offset,
    /// len)` copies them there, called for every byte of `ranges` once, in order, each part just
    /// before it is sent, so that the copying overlaps the mirror's work. When this returns,
    /// whatever the outcome, every part has been put.
    pub fn gmsync_staged(&self, ranges: &[Range], put: Put<'_>) -> Result<()> {
        let t0 = Instant::now();
        let mut stage = Stage::new(ranges, put);
        let t = self.inner.persist(ranges, &mut stage);
        stage.finish();
        let r = t.and_then(|t| self.durable(t));
        self.inner.counters.sync_point(thread_no(), t0.elapsed(), r.is_ok());
        r
    }

    /// The durability point: returns when the ticket's group (and every group queued before
    /// it on its lane) is in the mirror's log. In `unreplicated` mode it returns at once; a
    /// degraded primary returns once the group is persistent in its own copy.
    pub fn wait(&self, ticket: Ticket) -> Result<()> {
        self.inner.wait(ticket)
    }

    /// Waits until every group sent so far is acknowledged (in `async` mode, the mirror has
    /// caught up), then closes the session.
    pub fn close(mut self) -> Result<()> {
        // No new session from here on; one the keeper is starting right now finishes starting
        // (and starts its copy) before the keeper ends.
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.1.notify_all();
        if let Some(k) = self.keeper.take() {
            let _ = k.join();
        }
        // A copy cut short would leave the mirror inconsistent (not promotable): finish it.
        self.inner.resync.wait_idle(Duration::from_secs(24 * 3600));
        let r = self.inner.drain();
        self.stop();
        r
    }

    /// Holds copies into the mirror off until the returned guard is dropped.
    ///
    /// A copy (a new session's catch-up, or a full copy) reads the region as it is when each
    /// part is sent. An application whose stores make a consistent state only together (a
    /// batch of changes sealed by one group) takes this guard before the first of them and
    /// drops it once the group is queued ([`Primary::persist`] returned): every copy then
    /// reads states whose groups are queued before its own parts, and the mirror, which
    /// applies both in one order, never holds part of a batch. A copy waits for the guard
    /// between its groups of at most [`COPY_GROUP_BYTES`] bytes; the guard waits while one of
    /// those groups is sent. Do not wait for a group's acknowledgement while holding it: a
    /// session's copy may be what stands before it.
    pub fn hold_copies(&self) -> CopyHold<'_> {
        CopyHold { _gate: lock(&self.inner.copy_gate) }
    }

    /// Waits until a resynchronisation in progress has finished (or failed), at most `timeout`.
    /// Returns its final state, if one ran.
    pub fn wait_resync(&self, timeout: Duration) -> Option<ResyncStatus> {
        self.inner.resync.wait_idle(timeout);
        self.inner.resync.status()
    }

    fn stop(&mut self) {
        self.stop_metrics();
        self.inner.closing.store(true, Ordering::SeqCst);
        self.stop_beating();
        if let Some(l) = self.inner.current() {
            l.close();
        }
        self.join_threads();
    }

    /// Stops the metrics listeners, freeing their ports.
    fn stop_metrics(&mut self) {
        self.metrics_serving.get_mut().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// A snapshot of the primary's state: the session, acknowledgements, losses, a
    /// resynchronisation and the lease.
    pub fn status(&self) -> PrimaryStatus {
        self.inner.status()
    }

    /// [`Primary::status`] for another thread (a metrics listener), with the mode: it keeps
    /// nothing of the primary alive, and answers `None` once the primary is dropped.
    pub fn status_source(&self) -> impl Fn() -> Option<(PrimaryStatus, Mode)> + Send + Sync + 'static
    where
        T: 'static,
    {
        let inner = Arc::downgrade(&self.inner);
        move || inner.upgrade().map(|i| (i.status(), i.mode))
    }

    /// A snapshot of what the primary counted since it opened (sync-point latencies, groups
    /// and bytes sent) and where it stands (the mirror's state, groups in flight, losses, a
    /// resynchronisation, the lease). Sync points count themselves without a lock; taking the
    /// snapshot reads the rest as [`Primary::status`] does.
    pub fn metrics(&self) -> PrimaryMetrics {
        self.inner.metrics()
    }

    /// Where the primary's metrics are served, if they are (the first listener's address).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.metrics_addr.get().copied()
    }
}

impl<T: Transport> Primary<T> {
    /// Stops the beater and waits for it: no heartbeat goes to a lane after this (one on a
    /// lane being closed would count as the mirror's loss).
    fn stop_beating(&mut self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        self.inner.wake.1.notify_all();
        if let Some(b) = self.beater.take() {
            let _ = b.join();
        }
    }

    /// Joins the keeper and the populater (`closing` is set), then every copy's thread (the
    /// session is closed: a copy in progress fails at once).
    fn join_threads(&mut self) {
        for t in [self.keeper.take(), self.populater.take()].into_iter().flatten() {
            let _ = t.join();
        }
        let copies = std::mem::take(&mut *lock(&self.inner.resyncs));
        for t in copies {
            let _ = t.join();
        }
    }
}

impl<T: Transport> Drop for Primary<T> {
    fn drop(&mut self) {
        self.inner.closing.store(true, Ordering::SeqCst);
        self.inner.wake.1.notify_all();
        let link = self.inner.link.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(l) = &link {
            if !l.is_failed() {
                let _ = l.drain();
            }
        }
        self.stop_beating();
        if let Some(l) = link {
            l.close();
        }
        self.join_threads();
    }
}

impl<T: Transport> Inner<T>
where
    T::Conn: Send + Sync + 'static,
{
    fn current(&self) -> Option<Arc<Link<T::Conn>>> {
        self.link.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn generation(&self) -> u64 {
        self.region.generation().0
    }

    /// Connects a new session and brings the mirror up to date (in the background).
    fn connect(self: &Arc<Self>) -> Result<()> {
        let link = Link::connect(&self.transport, &self.opts, &self.region, self.epoch, self.generation())?;
        resync::link_up(self, Arc::new(link))
    }

    /// Starts without a mirror (`degrade`): the first loss, as if the mirror had just failed.
    fn start_degraded(&self, reason: String) -> Result<()> {
        let _slot = self.link.write().unwrap_or_else(|p| p.into_inner());
        self.enter_loss(reason, 0).map_err(Error::io("start the dirty bitmap"))
    }

    /// The link failed: drop it, make the local copy persistent, and start recording changes
    /// if the policy degrades. Only the first caller for a link does anything.
    fn on_loss(&self, link: &Arc<Link<T::Conn>>, reason: LinkError) {
        let mut slot = self.link.write().unwrap_or_else(|p| p.into_inner());
        if !slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            return;
        }
        let reason = link.fail(reason);
        // Final: a failed link reads no more Acks. Recorded before the slot empties, so a
        // waiter that finds the session gone finds its acknowledgements.
        lock(&self.health).lost_acks = Some((link.session, link.acked_per_lane()));
        *slot = None;
        tracing::warn!(mirror = %self.opts.mirror, %reason, "mirror lost");
        if let Err(e) = self.enter_loss(reason.to_string(), link.acked_floor()) {
            tracing::error!(error = %e, "cannot record the mirror loss");
        }
        drop(slot);
        self.resync.abort(link.session);
        self.wake.1.notify_all();
    }

    /// With the link slot held for writing.
    fn enter_loss(&self, reason: String, acked: u64) -> std::io::Result<()> {
        let t0 = Instant::now();
        let persisted = self.region.persist(0, self.region.size() as usize);
        let vulnerable = t0.elapsed().as_micros() as u64;
        {
            let mut h = lock(&self.health);
            h.lost = Some(reason);
            h.losses += 1;
            h.vulnerable_us = Some(vulnerable);
        }
        persisted?;
        if self.opts.failure.on_mirror_loss == OnMirrorLoss::Degrade {
            let dirty = self.dirty.as_ref().expect("replicated primaries have a dirty map");
            if dirty.base().is_none() {
                // Changes from here on belong to a new history; the mirror's copy is the old one.
                let (current, _) = self.region.generation();
                let base = if current == 0 { new_generation() } else { current };
                dirty.begin(base, acked)?;
                self.region.set_generation(new_generation(), base)?;
            }
        }
        Ok(())
    }

    /// Under the etcd coordinator: whether this primary may still acknowledge. It may not once
    /// its lease could expire, or as soon as it is known to be lost (the key deleted or held
    /// under another lease, etcd saying the lease is gone); then it never will again: it fails
    /// its session and every later call.
    fn check_lease(&self) -> Result<()> {
        let r = self.lease_held();
        if let (Err(e), Some(link)) = (&r, self.current()) {
            self.on_loss(&link, LinkError::Local(e.to_string()));
        }
        r
    }

    /// As [`Inner::check_lease`], without touching the link (callable with its slot locked).
    fn lease_held(&self) -> Result<()> {
        let Some(lease) = &self.lease else { return Ok(()) };
        let Some(why) = lease.lost() else { return Ok(()) };
        Err(Error::Coordinator(format!(
            "this primary stopped acknowledging: it may no longer hold its lease in etcd ({why}); another \
             node may take over; restart the application on the current primary"
        )))
    }

    fn persist(&self, ranges: &[Range], stage: &mut Stage<'_>) -> Result<Ticket> {
        self.check_lease()?;
        if !self.mode.replicated() {
            stage.finish();
            check_group(ranges, &self.local_limits)?;
            self.mark_dirty(ranges)?;
            self.flush_local(ranges)?;
            return Ok(Ticket::LOCAL);
        }
        loop {
            let slot = self.link.read().unwrap_or_else(|p| p.into_inner());
            let Some(link) = slot.as_ref() else {
                stage.finish();
                return self.persist_degraded(ranges);
            };
            let link = link.clone();
            drop(slot);
            if link.is_failed() {
                stage.finish();
                self.on_loss(&link, link.lost());
                continue;
            }
            let shape = check_group(ranges, &link.limits)?;
            if shape.frames == 0 {
                return Ok(Ticket::LOCAL);
            }
            let lane = thread_no() % link.lanes_per_replica;
            let meta = self.meta.as_ref().expect("replicated primaries have a metadata log");
            let sent = link.send_group(
                &self.region,
                lane,
                ranges,
                shape,
                |seq| meta.append(seq, ranges.iter().map(|r| (r.offset, r.len))),
                stage,
            );
            // A lane lost part-way, or frames that did not cover the ranges: the rest, before
            // the loss makes the copy persistent or the local flush reads it.
            stage.finish();
            match sent {
                Ok((seq, behind)) => {
                    self.counters.sent(thread_no(), ranges.iter().map(|r| r.len).sum());
                    if self.mode.flushes_locally() {
                        // Overlaps the local flush with the network round trip.
                        self.flush_local(ranges)?;
                    }
                    let ticket = Ticket { session: link.session, lane: lane as u16, seq };
                    if self.mode == Mode::Async && behind != 0 {
                        self.wait(Ticket { seq: behind, ..ticket })?;
                    }
                    return Ok(ticket);
                }
                Err(reason) => self.on_loss(&link, reason),
            }
        }
    }

    /// A sync point without a mirror. Called with the link slot read-locked and empty.
    fn persist_degraded(&self, ranges: &[Range]) -> Result<Ticket> {
        let reason = lock(&self.health).lost.clone().unwrap_or_else(|| "not connected".into());
        check_group(ranges, &self.local_limits)?;
        if self.opts.failure.on_mirror_loss == OnMirrorLoss::Block {
            // Refused, but its bytes are in this copy: the next session resends them. (No plan
            // reads or restarts the log while the link slot is read-locked.)
            let meta = self.meta.as_ref().expect("replicated primaries have a metadata log");
            meta.append(REFUSED_SYNC, ranges.iter().map(|r| (r.offset, r.len)));
            return Err(Error::MirrorLost { reason });
        }
        self.mark_dirty(ranges)?;
        self.flush_local(ranges)?;
        // Returning is the acknowledgement: only while this node is still the primary.
        self.lease_held()?;
        Ok(Ticket::LOCAL)
    }

    fn mark_dirty(&self, ranges: &[Range]) -> Result<()> {
        let dirty = self.dirty.as_ref().expect("every primary has a dirty map");
        for r in ranges.iter().filter(|r| r.len > 0) {
            dirty.mark(r.offset, r.len).map_err(Error::io("record the change in the dirty bitmap"))?;
        }
        Ok(())
    }

    /// An unreplicated primary changes the region without a mirror from the start: its history
    /// moves on (as a degraded primary's does) and its changes go to the dirty bitmap.
    fn start_unreplicated(&self) -> Result<()> {
        let dirty = self.dirty.as_ref().expect("every primary has a dirty map");
        if dirty.base().is_none() {
            let (current, _) = self.region.generation();
            let base = if current == 0 { new_generation() } else { current };
            dirty.begin(base, self.region.applied_seq()).map_err(Error::io("start the dirty bitmap"))?;
            self.region
                .set_generation(new_generation(), base)
                .map_err(Error::io("persist the generation"))?;
        }
        Ok(())
    }

    fn wait(&self, ticket: Ticket) -> Result<()> {
        if ticket.seq == 0 {
            return Ok(());
        }
        if let Some(link) = self.current().filter(|l| l.session == ticket.session) {
            if ticket.lane as usize >= link.lanes_per_replica() {
                let lanes = link.lanes_per_replica();
                return Err(Error::Range(RangeError::Ticket { lane: ticket.lane, lanes }));
            }
            match link.wait(ticket.lane as usize, ticket.seq) {
                Ok(()) => {
                    self.note_acked(&link);
                    return self.check_lease();
                }
                Err(reason) => self.on_loss(&link, reason),
            }
        }
        let (acked, reason) = {
            let h = lock(&self.health);
            let acked = h.lost_acks.as_ref().is_some_and(|(session, acked)| {
                *session == ticket.session
                    && acked.get(ticket.lane as usize).is_some_and(|&a| a >= ticket.seq)
            });
            (acked, h.lost.clone().unwrap_or_else(|| "the session ended".into()))
        };
        if acked {
            // The mirror acknowledged the group before its session ended.
            return self.check_lease();
        }
        // The session is gone before the group was acknowledged.
        match self.opts.failure.on_mirror_loss {
            OnMirrorLoss::Block => Err(Error::MirrorLost { reason }),
            // The loss made the whole copy persistent, and the metadata log resends the group;
            // but only a node that is still the primary may say so.
            OnMirrorLoss::Degrade => self.check_lease(),
        }
    }

    fn note_acked(&self, link: &Link<T::Conn>) {
        if let Some(m) = &self.meta {
            m.note_acked(link.acked_floor());
        }
    }

    fn drain(&self) -> Result<()> {
        let Some(link) = self.current() else { return Ok(()) };
        link.drain().map_err(Error::from)
    }

    fn flush_local(&self, ranges: &[Range]) -> Result<()> {
        for r in ranges.iter().filter(|r| r.len > 0) {
            self.region.persist(r.offset, r.len as usize).map_err(Error::io("persist region range"))?;
        }
        Ok(())
    }

    /// Sends a heartbeat on every lane of the current session that has sent nothing for the
    /// heartbeat interval, as soon as it has (`Link::beat`). It reads nothing: the keeper hears
    /// the answers, and a read that waits cannot hold up a heartbeat.
    fn beater_loop(self: Arc<Self>) {
        let interval = self.opts.failure.heartbeat.interval;
        while !self.stopped.load(Ordering::SeqCst) {
            let pause = match self.current() {
                Some(link) => link.beat(interval).unwrap_or_else(|reason| {
                    self.on_loss(&link, reason);
                    interval
                }),
                // The keeper reconnects; a new session is looked at within the interval.
                None => interval,
            };
            let g = lock(&self.wake.0);
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            let _ = self.wake.1.wait_timeout(g, pause);
        }
    }

    /// Hears the mirror while connected (the answers the beater's heartbeats and the groups
    /// are owed); reconnects while not.
    fn keeper_loop(self: Arc<Self>) {
        let hb = self.opts.failure.heartbeat;
        let mut next_try = Instant::now();
        while !self.closing.load(Ordering::SeqCst) {
            {
                let g = lock(&self.wake.0);
                let _ = self.wake.1.wait_timeout(g, hb.interval.min(self.opts.failure.reconnect));
            }
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            if self.lease.is_some() && self.check_lease().is_err() {
                continue;
            }
            match self.current() {
                Some(link) => {
                    self.note_acked(&link);
                    if let Err(reason) = link.hear(hb.timeout) {
                        self.on_loss(&link, reason);
                        next_try = Instant::now() + self.opts.failure.reconnect;
                    }
                }
                None if Instant::now() >= next_try => {
                    next_try = Instant::now() + self.opts.failure.reconnect;
                    match self.connect() {
                        Ok(()) => {
                            lock(&self.health).reconnect_error = None;
                            tracing::info!(mirror = %self.opts.mirror, "mirror reconnected");
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "reconnect failed");
                            lock(&self.health).reconnect_error = Some(e.to_string());
                        }
                    }
                }
                None => {}
            }
        }
    }

    fn mirror_state(&self, online: bool) -> MirrorState {
        match (self.mode.replicated(), online, self.opts.failure.on_mirror_loss) {
            (false, _, _) => MirrorState::Unreplicated,
            (true, true, _) => MirrorState::Online,
            (true, false, OnMirrorLoss::Degrade) => MirrorState::Degraded,
            (true, false, OnMirrorLoss::Block) => MirrorState::Lost,
        }
    }

    fn metrics(&self) -> PrimaryMetrics {
        let link = self.current();
        let (losses, vulnerable_us) = {
            let h = lock(&self.health);
            (h.losses, h.vulnerable_us)
        };
        PrimaryMetrics {
            mode: self.mode.name().into(),
            mirror_state: self.mirror_state(link.is_some()),
            sync_seconds: self.counters.histogram(),
            sync_failures: self.counters.failures(),
            groups_sent: self.counters.groups(),
            bytes_sent: self.counters.bytes(),
            in_flight_groups: link.as_ref().map_or(0, |l| l.in_flight()),
            lanes: link.as_ref().map_or(0, |l| l.lanes.len() as u64),
            mirror_losses: losses,
            vulnerable_seconds: vulnerable_us.map(|us| us as f64 / 1e6),
            dirty_bytes: self.dirty.as_ref().map_or(0, |d| d.dirty_bytes()),
            resync: self.resync.status(),
            lease_renewals: self.lease.as_ref().map(|l| l.renewals()),
            lease_valid_seconds: self
                .lease
                .as_ref()
                .map(|l| l.valid_until().saturating_duration_since(Instant::now()).as_secs_f64()),
        }
    }

    fn status(&self) -> PrimaryStatus {
        let link = self.current();
        let h = lock(&self.health);
        PrimaryStatus {
            mode: self.mode.name().into(),
            mirror: self.opts.mirror.clone(),
            lanes: link.as_ref().map_or(0, |l| l.lanes.len()),
            session: link.as_ref().map_or(0, |l| l.session),
            epoch: self.epoch,
            generation: self.generation(),
            next_seq: link.as_ref().map_or(0, |l| l.next_seq.load(Ordering::Relaxed)),
            acked_seq: link.as_ref().map_or_else(Vec::new, |l| l.acked()),
            failed: if link.is_some() { None } else { h.lost.clone() },
            degraded: link.is_none() && self.opts.failure.on_mirror_loss == OnMirrorLoss::Degrade,
            dirty_bytes: self.dirty.as_ref().map_or(0, |d| d.dirty_bytes()),
            mirror_losses: h.losses,
            vulnerable_us: h.vulnerable_us,
            reconnect_error: h.reconnect_error.clone(),
            resync: self.resync.status(),
            lease: self.lease.as_ref().map(|l| LeaseStatus {
                id: l.lease(),
                valid_ms: l.valid_until().saturating_duration_since(Instant::now()).as_millis() as u64,
                renewals: l.renewals(),
                lost: l.lost(),
            }),
            nvmm: self.region.nvmm().map(|n| NvmmStatus::of(n)),
        }
    }
}
