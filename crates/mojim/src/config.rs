//! The configuration file (`mojim.toml`) and the settings derived from it.
//!
//! Every limit is read here, once, at start-up; nothing on the data path reads configuration.

use crate::error::{Error, Result};
use crate::size::{format_size, parse_size, SizeError};
pub use mojim_region::NvmmModel;
use mojim_transport::tls::TlsPaths;
use mojim_transport::TlsContext;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

mod owned;
pub use owned::{OwnedSection, SectionError, SectionSchema};

/// Environment variable that names another certificate than `[security] cert_file` (an
/// operator's, with a node's configuration).
pub const CERT_FILE_ENV: &str = "MOJIM_CERT_FILE";
/// Environment variable that names another private key than `[security] key_file`.
pub const KEY_FILE_ENV: &str = "MOJIM_KEY_FILE";

/// Environment variable that supplies the cluster secret (it wins over the file).
pub const SECRET_ENV: &str = "MOJIM_SECRET";
/// Fewest bytes in a cluster secret: a shorter one could be guessed.
pub const MIN_SECRET_LEN: usize = 16;
/// Default port of a mirror.
pub const DEFAULT_PORT: u16 = 7420;

/// When a sync point returns, and which copies it guarantees (DESIGN.md's mode table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Locally persisted; no mirror.
    Unreplicated,
    /// Locally persisted; sent in the background (bounded window); the mirror may lag.
    Async,
    /// In the mirror's log; the primary's own copy is not flushed.
    Sync,
    /// In the mirror's log and locally persisted: survives both failing at once.
    SyncFlush,
    /// As `sync`, against a mirror whose data area is on disk (`[mirror] data = "disk"`).
    SyncDisk,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 5] = [Mode::Unreplicated, Mode::Async, Mode::Sync, Mode::SyncFlush, Mode::SyncDisk];

    /// The mode's name as `[primary] mode` and `--mode` spell it, e.g. `sync-flush`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Unreplicated => "unreplicated",
            Mode::Async => "async",
            Mode::Sync => "sync",
            Mode::SyncFlush => "sync-flush",
            Mode::SyncDisk => "sync-disk",
        }
    }

    /// Whether the mode sends groups to a mirror (every mode but `unreplicated`).
    pub fn replicated(self) -> bool {
        self != Mode::Unreplicated
    }

    /// Whether the primary flushes its own copy at each sync point.
    pub fn flushes_locally(self) -> bool {
        matches!(self, Mode::Unreplicated | Mode::Async | Mode::SyncFlush)
    }

    /// Whether a sync point waits for the mirror's acknowledgement.
    pub fn waits_for_mirror(self) -> bool {
        matches!(self, Mode::Sync | Mode::SyncFlush | Mode::SyncDisk)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Mode, UnknownChoice> {
        Mode::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| UnknownChoice {
            what: "mode",
            value: s.to_string(),
            choices: "one of unreplicated, async, sync, sync-flush, sync-disk",
        })
    }
}

/// A word of the configuration (or a flag) that is none of its choices: a mistake in what
/// someone wrote. Names the value given and the choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownChoice {
    /// What the word is, e.g. `mode`.
    pub what: &'static str,
    /// The word given.
    pub value: String,
    /// The words it may be, as a phrase.
    pub choices: &'static str,
}

impl fmt::Display for UnknownChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}; choose {}", self.what, self.value, self.choices)
    }
}

impl std::error::Error for UnknownChoice {}

/// The file, as written by people (`mojim init` writes a commented one).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[region]`: which region is replicated (required).
    pub region: RegionSection,
    /// `[primary]`: how the primary replicates.
    #[serde(default)]
    pub primary: PrimarySection,
    /// `[mirror]`: where and how the mirror keeps its copy.
    #[serde(default)]
    pub mirror: MirrorSection,
    /// `[limits]`: sizes both roles agree on.
    #[serde(default)]
    pub limits: LimitsSection,
    /// `[security]`: the cluster secret.
    #[serde(default)]
    pub security: SecuritySection,
    /// `[cluster]`: failure detection, mirror loss and the coordinator.
    #[serde(default)]
    pub cluster: ClusterSection,
    /// `[rvm]`: recoverable memory (`rvm_*` in C), as written. Its schema, defaults and checks
    /// are the `mojim-rvm` crate's (`mojim_rvm::RvmSection`); read it with
    /// [`Config::section`] or [`ConfigFile::section`].
    #[serde(default)]
    pub rvm: toml::Table,
    /// `[kv]`: the Redis-protocol server (`mojim kv`), as written. Its schema, defaults and
    /// checks are the `mojim-kv` crate's (`mojim_kv::KvSection`); read it with
    /// [`Config::section`] or [`ConfigFile::section`].
    #[serde(default)]
    pub kv: toml::Table,
    /// `[metrics]`: the Prometheus metrics and health listener.
    #[serde(default)]
    pub metrics: MetricsSection,
}

/// `[metrics]`: an HTTP listener serving Prometheus metrics (`/metrics`), `/healthz` and
/// `/readyz` (docs/METRICS.md). Every field has a default (shown as `key = default`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSection {
    /// `listen = ""`: the `host:port` it listens on (port 0: any free port); empty: no
    /// listener. `mojim serve --metrics-listen` overrides it.
    pub listen: String,
}

/// `[cluster]`: failure detection, what a primary does without its mirror, and who decides
/// roles. Every field has a default (shown as `key = default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// `heartbeat_interval_ms = 100`: a side that sent nothing on a link for this long sends a
    /// heartbeat.
    pub heartbeat_interval_ms: u64,
    /// `heartbeat_timeout_ms = 2000`: a side that heard nothing on a link for this long
    /// declares the peer failed. At least twice the interval.
    pub heartbeat_timeout_ms: u64,
    /// `on_mirror_loss = "block"`: "block": sync points fail while the mirror is lost;
    /// "degrade": they return once the primary's own copy is persistent, and changed chunks go
    /// to a dirty bitmap (see [`OnMirrorLoss`]).
    pub on_mirror_loss: String,
    /// `reconnect_ms = 200`: how often a primary without its mirror tries to reconnect.
    pub reconnect_ms: u64,
    /// `dirty_chunk = "64KiB"`: bytes per bit of the primary's dirty bitmap; a power of two of
    /// at least 4 KiB.
    pub dirty_chunk: String,
    /// `metadata_log_records = 65536`: records in the primary's metadata log (32 bytes each),
    /// which remembers the ranges of recent groups for a fast catch-up; 64 to 2^26.
    pub metadata_log_records: u64,
    /// `node = ""`: this node's name for the etcd coordinator (`--node` overrides it).
    pub node: String,
    /// `coordinator = "static"`: who decides roles: "static" (the configuration and the
    /// operator's `mojim promote`) or "etcd" (leases in etcd; the mirror takes over when the
    /// primary's lease expires).
    pub coordinator: String,
    /// `etcd_endpoints = []`: etcd endpoints (host:port, or https://host:port for TLS), for
    /// `coordinator = "etcd"`.
    pub etcd_endpoints: Vec<String>,
    /// `etcd_ca_file = ""`: with https:// endpoints, the CA that signed etcd's certificate, PEM
    /// (etcdctl's `--cacert`; relative to the configuration file).
    pub etcd_ca_file: String,
    /// `etcd_cert_file = ""`: this node's client certificate for etcd (etcdctl's `--cert`),
    /// for an etcd with `--client-cert-auth`; set with `etcd_key_file`.
    pub etcd_cert_file: String,
    /// `etcd_key_file = ""`: the private key of `etcd_cert_file` (etcdctl's `--key`).
    pub etcd_key_file: String,
    /// `etcd_prefix = ""`: key prefix in etcd; empty means `/mojim/<region uuid>`.
    pub etcd_prefix: String,
    /// `lease_ttl_ms = 3000`: the time to live of the primary's leadership lease in etcd.
    pub lease_ttl_ms: u64,
    /// `lease_renew_ms = 1000`: how often the primary renews its lease.
    pub lease_renew_ms: u64,
    /// `lease_margin_ms = 500`: how long before its lease could expire (counted from when the
    /// last renewal was sent) the primary stops acknowledging. Renew plus margin must stay
    /// below the time to live.
    pub lease_margin_ms: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 2000,
            on_mirror_loss: "block".into(),
            reconnect_ms: 200,
            dirty_chunk: "64KiB".into(),
            metadata_log_records: 1 << 16,
            node: String::new(),
            coordinator: "static".into(),
            etcd_endpoints: Vec::new(),
            etcd_ca_file: String::new(),
            etcd_cert_file: String::new(),
            etcd_key_file: String::new(),
            etcd_prefix: String::new(),
            lease_ttl_ms: 3000,
            lease_renew_ms: 1000,
            lease_margin_ms: 500,
        }
    }
}

/// What a primary does when it loses its mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnMirrorLoss {
    /// Fail closed: sync points fail until the mirror is back and caught up. Their ranges stay
    /// in the metadata log, and the next session sends them (the bytes are in the local copy).
    Block,
    /// Keep going on the local copy and record what changed, to resend later.
    Degrade,
}

impl FromStr for OnMirrorLoss {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<OnMirrorLoss, UnknownChoice> {
        match s {
            "block" => Ok(OnMirrorLoss::Block),
            "degrade" => Ok(OnMirrorLoss::Degrade),
            _ => Err(UnknownChoice { what: "policy", value: s.to_string(), choices: "block or degrade" }),
        }
    }
}

/// The files of TLS to etcd, paths resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTlsFiles {
    /// `[cluster] etcd_ca_file`.
    pub ca_file: PathBuf,
    /// `[cluster] etcd_cert_file` and `etcd_key_file`, if this node presents a certificate.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Where and how the etcd coordinator keeps roles and the primary's lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// The etcd endpoints, host:port or https://host:port (`[cluster] etcd_endpoints`).
    pub endpoints: Vec<String>,
    /// With https:// endpoints, the TLS files (`[cluster] etcd_ca_file`, `etcd_cert_file`,
    /// `etcd_key_file`).
    pub tls: Option<EtcdTlsFiles>,
    /// The key prefix, without a trailing `/` (`[cluster] etcd_prefix`, else
    /// `/mojim/<region uuid>`).
    pub prefix: String,
    /// The lease's time to live (`[cluster] lease_ttl_ms`).
    pub lease_ttl: std::time::Duration,
    /// How often the primary renews the lease (`[cluster] lease_renew_ms`).
    pub lease_renew: std::time::Duration,
    /// How long before the lease could expire the primary stops acknowledging
    /// (`[cluster] lease_margin_ms`).
    pub lease_margin: std::time::Duration,
}

/// Heartbeat settings of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// Send a heartbeat after sending nothing for this long (`[cluster] heartbeat_interval_ms`).
    pub interval: std::time::Duration,
    /// Declare the peer failed after hearing nothing for this long
    /// (`[cluster] heartbeat_timeout_ms`).
    pub timeout: std::time::Duration,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat {
            interval: std::time::Duration::from_millis(100),
            timeout: std::time::Duration::from_millis(2000),
        }
    }
}

/// `[region]`: which region is replicated. The same on every node of the cluster.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSection {
    /// `uuid` (required): the region's identity, 32 hex digits with or without dashes;
    /// replicas refuse a peer with another uuid.
    pub uuid: String,
    /// `size` (required): bytes in the data area, e.g. `"1GiB"` (units: B, KiB, MiB, GiB;
    /// K = KB = KiB).
    pub size: String,
    /// `path = "region.mojim"`: the region file the primary's application maps, relative to
    /// the configuration file.
    #[serde(default = "default_region_path")]
    pub path: String,
    /// `nvmm_barrier_ns = 0`: emulated slow NVMM under the primary's own copy: nanoseconds
    /// added (by spinning) to every persistence barrier when the primary persists locally
    /// (modes `unreplicated`, `async`, `sync-flush`, and a primary without its mirror), as the
    /// paper's PMEP emulator added about 1 µs per barrier. 0 to 1000000 (1 ms); 0: none.
    #[serde(default)]
    pub nvmm_barrier_ns: u64,
    /// `nvmm_write_rate = ""`: emulated slow NVMM under the primary's own copy: most bytes
    /// per second it persists, e.g. `"2GiB/s"`, 1 MiB/s to 1 TiB/s (empty: no cap).
    #[serde(default)]
    pub nvmm_write_rate: String,
}

fn default_region_path() -> String {
    "region.mojim".into()
}

/// `[primary]`: how the primary replicates. Every field has a default (shown as
/// `key = default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrimarySection {
    /// `mirror = "127.0.0.1:7420"`: the address where the mirror listens (a path for
    /// `transport = "shm"`, `ucx:<host>:<port>` for `transport = "ucx"`).
    pub mirror: String,
    /// `transport = "tcp"`: how lanes reach the mirror: `tcp`, `shm` (shared-memory rings
    /// with a mirror on the same host; `mirror` is then the path of its socket), or `ucx` (puts
    /// into the mirror's registered rings through UCX, RDMA where there is some; needs
    /// libucx0; `mirror` is then `ucx:<host>:<port>`).
    pub transport: String,
    /// `place_records = true`: over a transport that shares memory (`shm`, `ucx`), write each
    /// record's body straight into the mirror's log and send only its header (one-sided
    /// placement); `false`: send the bodies through the connection, as over TCP.
    pub place_records: bool,
    /// `mode = "sync"`: when sync points return (see [`Mode`]): `unreplicated`, `async`,
    /// `sync`, `sync-flush` or `sync-disk`.
    pub mode: String,
    /// `lanes = 2`: connections to the mirror; a thread keeps to one lane. A mirror started
    /// with this file makes the logs of this many lanes when it starts.
    pub lanes: u16,
    /// `async_window = 256`: in mode `async`, the groups a lane may have in flight before a
    /// sync point waits.
    pub async_window: u32,
    /// `connect_timeout_ms = 5000`: to connect to the mirror and finish a lane's handshake. A
    /// mirror makes the log of a lane beyond its `[primary] lanes` in the lane's first
    /// handshake, so a `log_capacity` of several GiB may need longer.
    pub connect_timeout_ms: u64,
    /// `busy_poll_us = 0`: poll for the mirror's acknowledgement this long before sleeping
    /// (0: sleep at once). Polling spends a core per waiting thread.
    pub busy_poll_us: u64,
    /// `broadcast = []`: for comparison only (the paper's E-broadcast baseline): more mirrors
    /// to send every group to, each waited for like `mirror`.
    pub broadcast: Vec<String>,
    /// `cert_file = ""`: with `[security] tls = true`, the application's certificate (role
    /// application), when the configuration is shared with a node whose certificate is
    /// `[security] cert_file`; empty: `[security] cert_file`.
    pub cert_file: String,
    /// `key_file = ""`: the private key of `cert_file` (mode 0600).
    pub key_file: String,
    /// `metrics_listen = ""`: the `host:port` where the application's primary serves its
    /// metrics (`/metrics`, `/healthz`, `/readyz`; port 0: any free port); empty: none. Apart
    /// from `[metrics] listen`, the mirror's, because one file often configures both roles.
    pub metrics_listen: String,
}

impl Default for PrimarySection {
    fn default() -> Self {
        PrimarySection {
            mirror: format!("127.0.0.1:{DEFAULT_PORT}"),
            transport: "tcp".into(),
            place_records: true,
            mode: "sync".into(),
            lanes: 2,
            async_window: 256,
            connect_timeout_ms: 5000,
            busy_poll_us: 0,
            broadcast: Vec::new(),
            cert_file: String::new(),
            key_file: String::new(),
            metrics_listen: String::new(),
        }
    }
}

/// `[mirror]`: where and how the mirror (`mojim serve`) keeps its copy. Every field has a
/// default (shown as `key = default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MirrorSection {
    /// `listen = "127.0.0.1:7420"`: the address the mirror listens on (a path for
    /// `transport = "shm"`, `ucx:<host>:<port>` for `transport = "ucx"`).
    pub listen: String,
    /// `transport = "tcp"`: `tcp`, `shm` (a Unix socket at `listen`, through which each
    /// lane of a primary on the same host sets up shared-memory rings), or `ucx` (a UCX
    /// listener at `listen` = `ucx:<host>:<port>`; needs libucx0).
    pub transport: String,
    /// `dir = "mirror"`: folder of the mirror's data area, relative to the configuration file.
    pub dir: String,
    /// `log_dir = ""`: folder of the redo logs; empty means `dir`. On memory (e.g. `/dev/shm`)
    /// for speed.
    pub log_dir: String,
    /// `log_capacity = "64MiB"`: bytes of records per lane's circular log, reserved when the
    /// mirror starts (the first `[primary] lanes` lanes) or when a lane first joins; a multiple
    /// of 4 KiB and at least 64 KiB.
    pub log_capacity: String,
    /// `checkpoint_thresh = 1`: checkpoint after this many complete groups (the paper's
    /// CHECKPOINT_THRESH); also when idle and when a log is full.
    pub checkpoint_thresh: u32,
    /// `checkpoint_idle_ms = 2`: also checkpoint what waits once this long passes without a
    /// new group.
    pub checkpoint_idle_ms: u64,
    /// `max_lanes = 16`: most lanes a primary may open.
    pub max_lanes: u16,
    /// `busy_poll_us = 0`: poll each lane for the next frame this long before sleeping (0:
    /// sleep at once).
    pub busy_poll_us: u64,
    /// `data = "memory"`: where the data area lives: "memory" (mapped; checkpoints are stores
    /// and cache-line write-backs) or "disk" (for `sync-disk`: checkpoints are pwrite and
    /// fdatasync).
    pub data: String,
    /// `backups = []`: addresses of the backups this mirror feeds in the background (the
    /// secondary tier).
    pub backups: Vec<String>,
    /// `secondary_tier_thresh = "40MiB"`: bytes logged here but not yet at every backup above
    /// which this mirror stops acknowledging new groups until forwarding catches up (the
    /// paper's SECONDARY_TIER_THRESH).
    pub secondary_tier_thresh: String,
    /// `secondary_rate_limit = ""`: cap on the bytes per second sent to each backup, e.g.
    /// `"100MiB/s"` (empty: no cap).
    pub secondary_rate_limit: String,
    /// `chain = false`: for comparison only (the paper's E-chain baseline): acknowledge a
    /// group only once every backup has it.
    pub chain: bool,
    /// `nvmm_barrier_ns = 0`: emulated slow NVMM under the mirror's logs and (memory) data
    /// area: nanoseconds added (by spinning) to every persistence barrier, 0 to 1000000 (1 ms);
    /// 0: none. See `[region] nvmm_barrier_ns`.
    pub nvmm_barrier_ns: u64,
    /// `nvmm_write_rate = ""`: emulated slow NVMM under the mirror's logs and (memory) data
    /// area: most bytes per second persisted, e.g. `"2GiB/s"`, 1 MiB/s to 1 TiB/s (empty: no
    /// cap).
    pub nvmm_write_rate: String,
}

impl Default for MirrorSection {
    fn default() -> Self {
        MirrorSection {
            listen: format!("127.0.0.1:{DEFAULT_PORT}"),
            transport: "tcp".into(),
            dir: "mirror".into(),
            log_dir: String::new(),
            log_capacity: "64MiB".into(),
            checkpoint_thresh: 1,
            checkpoint_idle_ms: 2,
            max_lanes: 16,
            busy_poll_us: 0,
            data: "memory".into(),
            backups: Vec::new(),
            secondary_tier_thresh: "40MiB".into(),
            secondary_rate_limit: String::new(),
            chain: false,
            nvmm_barrier_ns: 0,
            nvmm_write_rate: String::new(),
        }
    }
}

/// `[limits]`: sizes both roles agree on. Every field has a default (shown as
/// `key = default`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// `max_frame = "64KiB"`: largest frame body, 64 B to 16 MiB; longer ranges are split into
    /// several frames.
    pub max_frame: String,
    /// `max_ranges = 1024`: most ranges in one `gmsync`.
    pub max_ranges: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection { max_frame: "64KiB".into(), max_ranges: 1024 }
    }
}

/// `[security]`: the cluster secret. See [`Secret::resolve`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecuritySection {
    /// `secret = ""`: the shared cluster secret (HMAC-SHA256 challenge-response), at least
    /// [`MIN_SECRET_LEN`] bytes; the `MOJIM_SECRET` environment variable overrides it.
    pub secret: String,
    /// `insecure = false`: run without a secret (no authentication), as `--insecure` does.
    pub insecure: bool,
    /// `tls = false`: run every link (TCP, shared memory, UCX) over mutual TLS 1.3, with the
    /// three files below; the secret is then optional (its handshake runs inside TLS). Records
    /// placed in a mirror's log then carry a MAC (docs/FORMAT.md §2.4).
    pub tls: bool,
    /// `ca_file`: the cluster CA's certificate, PEM (relative to the configuration file).
    pub ca_file: String,
    /// `cert_file`: this host's certificate, PEM, carrying its role.
    pub cert_file: String,
    /// `key_file`: this certificate's private key, PEM, mode 0600.
    pub key_file: String,
    /// `crl_file = ""`: certificate revocation lists (PEM `X509 CRL` blocks) issued by the
    /// cluster CA; a peer whose certificate one lists is refused at the handshake. Read again
    /// with the other files on SIGHUP.
    pub crl_file: String,
    /// `encrypt_placed = false`: with `tls = true`, encrypt the bodies of the records a primary
    /// places in its mirror's log (shm, ucx) with AES-256-GCM, where they are otherwise only
    /// authenticated (docs/FORMAT.md §2.4). Needs `tls`; no effect on TCP lanes, whose bytes
    /// TLS encrypts already. A primary and its mirror must agree: a lane set otherwise is
    /// refused at its handshake.
    pub encrypt_placed: bool,
}

pub use mojim_format::handshake::RegionId;

/// Settings shared by both roles (`[limits]`, checked).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest frame body in bytes (`[limits] max_frame`, default 64 KiB).
    pub max_frame: u32,
    /// Most ranges in one `gmsync` (`[limits] max_ranges`, default 1024).
    pub max_ranges: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_frame: 64 << 10, max_ranges: 1024 }
    }
}

/// The cluster secret, or the explicit choice to run without one.
#[derive(Clone)]
pub struct Secret(
    /// The secret's bytes; empty means no authentication.
    pub Vec<u8>,
);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// Resolves the secret: `MOJIM_SECRET`, else the file's, else none (allowed only when
    /// `insecure`). A secret shorter than [`MIN_SECRET_LEN`] is refused, from either.
    pub fn resolve(from_file: &str, insecure: bool) -> Result<Secret> {
        let env = std::env::var(SECRET_ENV).unwrap_or_default();
        let (s, from) =
            if !env.is_empty() { (env, SECRET_ENV) } else { (from_file.to_string(), "[security] secret") };
        if s.is_empty() && !insecure {
            return Err(Error::Config(format!(
                "no cluster secret: set `secret` in [security], or the {SECRET_ENV} environment variable, \
                 or pass --insecure to run without authentication"
            )));
        }
        let secret = Secret(s.into_bytes());
        secret.check(from)?;
        Ok(secret)
    }

    /// Refuses a secret shorter than [`MIN_SECRET_LEN`] bytes; `from` says where it came from.
    /// An empty one means no authentication, which `insecure` governs.
    pub fn check(&self, from: &str) -> Result<()> {
        let n = self.0.len();
        if n == 0 || n >= MIN_SECRET_LEN {
            return Ok(());
        }
        Err(Error::Config(format!(
            "the cluster secret from {from} is {n} bytes; it must be at least {MIN_SECRET_LEN}, so that it \
             cannot be guessed: use a random one (`mojim init` without --secret writes one of 32 hex digits \
             into mojim.toml), the same on every node"
        )))
    }
}

/// Writes a file that holds the cluster secret, readable and writable by its owner only (mode
/// 0600, also when it replaces a file with another mode).
pub fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // The mode above applies only to a new file; an existing one is emptied, then restricted.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(contents.as_bytes())
}

/// Warns, naming the file and the fix, when a configuration that holds the cluster secret is
/// readable by its group or by others.
fn warn_if_readable_by_others(path: &Path, file: &ConfigFile) {
    use std::os::unix::fs::PermissionsExt;
    if file.security.secret.is_empty() {
        return;
    }
    let Ok(meta) = std::fs::metadata(path) else { return };
    let mode = meta.permissions().mode() & 0o777;
    let who = match (mode & 0o040 != 0, mode & 0o004 != 0) {
        (true, true) => "its group and by others",
        (true, false) => "its group",
        (false, true) => "others",
        (false, false) => return,
    };
    tracing::warn!(
        "{} holds the cluster secret and is readable by {who} (mode {mode:03o}): run `chmod 600 {}`",
        path.display(),
        path.display()
    );
}

/// Parses a UUID written as 32 hex digits, with or without dashes.
pub fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let bad = || Error::Config(format!("region uuid {s:?} is not 32 hex digits"));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Formats a UUID as `8-4-4-4-12` lowercase hex digits, as `mojim init` writes it.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// A fresh random UUID (version 4).
pub fn random_uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    mojim_transport::random::fill(&mut u);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// Most nanoseconds an emulated NVMM may add to a persistence barrier.
pub const MAX_NVMM_BARRIER_NS: u64 = 1_000_000;
/// Slowest and fastest emulated NVMM write rates, in bytes per second.
pub const NVMM_WRITE_RATES: std::ops::RangeInclusive<u64> = (1 << 20)..=(1 << 40);

/// An emulated NVMM's model from its two settings (`barrier_ns`, `write_rate`), checked;
/// `section` names where they came from in errors (e.g. `[mirror]`, or `--nvmm-*`).
pub fn nvmm_model(section: &str, barrier_ns: u64, write_rate: &str) -> Result<NvmmModel> {
    if barrier_ns > MAX_NVMM_BARRIER_NS {
        return Err(Error::Config(format!(
            "{section} nvmm_barrier_ns = {barrier_ns} is outside 0 ..= {MAX_NVMM_BARRIER_NS} (1 ms): give the \
             nanoseconds to add to each persistence barrier, e.g. 1000 for the paper's 1 µs"
        )));
    }
    let rate = write_rate.trim();
    let write_bytes_per_s = if rate.is_empty() {
        0
    } else {
        let r = parse_rate(rate).map_err(|e| Error::Config(format!("{section} nvmm_write_rate: {e}")))?;
        if !NVMM_WRITE_RATES.contains(&r) {
            return Err(Error::Config(format!(
                "{section} nvmm_write_rate = {rate:?} is outside 1MiB/s ..= 1TiB/s; write e.g. \"2GiB/s\", or \"\" \
                 for no cap"
            )));
        }
        r
    };
    Ok(NvmmModel { barrier: std::time::Duration::from_nanos(barrier_ns), write_bytes_per_s })
}

fn size_field(section: &str, key: &str, v: &str) -> Result<u64> {
    parse_size(v).map_err(|e| Error::Config(format!("[{section}] {key}: {e}")))
}

/// A loaded configuration file with paths resolved against its folder.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file's contents, as written.
    pub file: ConfigFile,
    /// The folder that relative paths in the file are resolved against (the file's own).
    pub base: PathBuf,
    /// The file it was read from ([`Config::load`]), which errors about it name; `None` for a
    /// configuration made in memory.
    pub path: Option<PathBuf>,
}

impl Config {
    /// Reads and checks a configuration file.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
        let file: ConfigFile =
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        warn_if_readable_by_others(path, &file);
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let c = Config { file, base, path: Some(path.to_path_buf()) };
        c.region_id()?;
        c.limits()?;
        Ok(c)
    }

    /// Resolves a path from the file: an absolute one as it is, a relative one against
    /// [`Config::base`].
    pub fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    /// The region's identity from `[region] uuid` and `size`, checked.
    pub fn region_id(&self) -> Result<RegionId> {
        let size = size_field("region", "size", &self.file.region.size)?;
        if size == 0 {
            return Err(Error::Config("[region] size must be more than 0 bytes".into()));
        }
        Ok(RegionId { uuid: parse_uuid(&self.file.region.uuid)?, size })
    }

    /// The `[limits]` section, checked: `max_frame` within 64 B to 16 MiB, `max_ranges` at
    /// least 1.
    pub fn limits(&self) -> Result<Limits> {
        let max_frame = size_field("limits", "max_frame", &self.file.limits.max_frame)?;
        if !(64..=(16 << 20)).contains(&max_frame) {
            return Err(Error::Config(format!(
                "[limits] max_frame {} is outside 64 B .. 16 MiB",
                format_size(max_frame)
            )));
        }
        if self.file.limits.max_ranges == 0 {
            return Err(Error::Config("[limits] max_ranges must be at least 1".into()));
        }
        Ok(Limits { max_frame: max_frame as u32, max_ranges: self.file.limits.max_ranges as usize })
    }

    /// The cluster secret (see [`Secret::resolve`]); `insecure_flag` is `--insecure`, which
    /// allows none as `[security] insecure = true` does.
    pub fn secret(&self, insecure_flag: bool) -> Result<Secret> {
        let sec = &self.file.security;
        Secret::resolve(&sec.secret, insecure_flag || sec.insecure || sec.tls)
    }

    /// The TLS settings (`[security] tls`, `ca_file`, `cert_file`, `key_file`, `crl_file`),
    /// loaded and checked; `None` when `tls = false`. A file that is missing, unreadable, not
    /// PEM, a key readable by others or not the certificate's, a certificate the CA did not sign,
    /// that is not valid now or that a list revokes, a list the CA did not issue: refused,
    /// naming the setting and the file. The context reloads the same files in place
    /// ([`TlsContext::reload`]).
    pub fn tls(&self) -> Result<Option<Arc<TlsContext>>> {
        self.tls_with(None)
    }

    /// As [`Config::tls`], for an application: `[primary] cert_file` and `key_file` when set.
    pub fn application_tls(&self) -> Result<Option<Arc<TlsContext>>> {
        let p = &self.file.primary;
        if p.cert_file.is_empty() != p.key_file.is_empty() {
            return Err(Error::Config(
                "[primary] cert_file and key_file go together: set both, or neither to use [security]'s"
                    .into(),
            ));
        }
        self.tls_with((!p.cert_file.is_empty()).then_some((&p.cert_file, &p.key_file)))
    }

    fn tls_with(&self, files: Option<(&String, &String)>) -> Result<Option<Arc<TlsContext>>> {
        let sec = &self.file.security;
        if !sec.tls {
            if sec.encrypt_placed {
                return Err(Error::Config(
                    "[security] encrypt_placed = true needs [security] tls = true: placed records are \
                     encrypted under keys from the lanes' TLS sessions; turn tls on, or encrypt_placed off"
                        .into(),
                ));
            }
            return Ok(None);
        }
        for (key, v) in
            [("ca_file", &sec.ca_file), ("cert_file", &sec.cert_file), ("key_file", &sec.key_file)]
        {
            if v.is_empty() {
                return Err(Error::Config(format!(
                    "[security] tls = true needs {key}: set ca_file, cert_file and key_file (`mojim init --tls` \
                     makes a CA and certificates)"
                )));
            }
        }
        // An operator's tools may present their own certificate with the node's configuration.
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let application = files.is_some();
        let (cert, key) = files.unwrap_or((&sec.cert_file, &sec.key_file));
        let (cert_env, key_env) = (env(CERT_FILE_ENV), env(KEY_FILE_ENV));
        let cert = cert_env.clone().unwrap_or_else(|| self.resolve(cert));
        let key = key_env.clone().unwrap_or_else(|| self.resolve(key));
        let paths = TlsPaths {
            ca: self.resolve(&sec.ca_file),
            cert,
            key,
            crl: (!sec.crl_file.is_empty()).then(|| self.resolve(&sec.crl_file)),
        };
        let ctx = TlsContext::load(&paths).map_err(|e| {
            Error::Config(format!(
                "{} {}: {}",
                self.tls_setting(e.setting, application),
                e.file.display(),
                e.reason
            ))
        })?;
        Ok(Some(Arc::new(ctx.with_encrypt_placed(sec.encrypt_placed))))
    }

    /// Where the TLS file `setting` (`ca_file`, `cert_file`, `key_file`, `crl_file`) is set,
    /// as errors (at start-up and on a reload) name it: `MOJIM_CERT_FILE` or `MOJIM_KEY_FILE`
    /// when set, `[primary]` for an `application`'s own certificate and key when it has them,
    /// `[security]` otherwise.
    pub fn tls_setting(&self, setting: &str, application: bool) -> String {
        let env = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        let own = application && !self.file.primary.cert_file.is_empty();
        match setting {
            "cert_file" if env(CERT_FILE_ENV) => CERT_FILE_ENV.to_string(),
            "key_file" if env(KEY_FILE_ENV) => KEY_FILE_ENV.to_string(),
            "cert_file" | "key_file" if own => format!("[primary] {setting}"),
            _ => format!("[security] {setting}"),
        }
    }

    /// Checks `[section] transport` against the address `key` it governs: `shm` takes a path
    /// (a Unix socket on this host), `ucx` a `ucx:<host>:<port>`, `tcp` a `host:port`.
    pub fn check_transport(section: &str, transport: &str, key: &str, addr: &str) -> Result<()> {
        let kind = mojim_transport::transport_of(addr);
        match (transport, kind) {
            ("tcp", "tcp") | ("shm", "shm") | ("ucx", "ucx") => Ok(()),
            ("tcp", "shm") => Err(Error::Config(format!(
                "[{section}] {key} = \"{addr}\" is a path, but [{section}] transport = \"tcp\": set transport = \"shm\" \
                 for a mirror on this host, or give a host:port"
            ))),
            ("tcp", _) => Err(Error::Config(format!(
                "[{section}] {key} = \"{addr}\" is a UCX address, but [{section}] transport = \"tcp\": set transport = \"ucx\", \
                 or give a host:port"
            ))),
            ("shm", _) => Err(Error::Config(format!(
                "[{section}] transport = \"shm\" needs [{section}] {key} to be the absolute path of the mirror's \
                 socket (e.g. \"/dev/shm/mojim-mirror.sock\"), not \"{addr}\""
            ))),
            ("ucx", _) => Err(Error::Config(format!(
                "[{section}] transport = \"ucx\" needs [{section}] {key} to be ucx:<host>:<port> \
                 (e.g. \"ucx:127.0.0.1:7420\"), not \"{addr}\""
            ))),
            (other, _) => Err(Error::Config(format!(
                "[{section}] transport = \"{other}\" is not one this build has: use \"tcp\", \"shm\" or \"ucx\""
            ))),
        }
    }

    /// `[primary] mode`, parsed.
    pub fn mode(&self) -> Result<Mode> {
        self.file.primary.mode.parse().map_err(|e| Error::Config(format!("[primary] mode: {e}")))
    }

    /// The heartbeat settings from `[cluster]`, checked: the timeout at least twice the
    /// interval.
    pub fn heartbeat(&self) -> Result<Heartbeat> {
        let c = &self.file.cluster;
        if c.heartbeat_interval_ms == 0 || c.heartbeat_timeout_ms < 2 * c.heartbeat_interval_ms {
            return Err(Error::Config(format!(
                "[cluster] heartbeat_timeout_ms = {} must be at least twice heartbeat_interval_ms = {} (and the \
                 interval more than 0)",
                c.heartbeat_timeout_ms, c.heartbeat_interval_ms
            )));
        }
        Ok(Heartbeat {
            interval: std::time::Duration::from_millis(c.heartbeat_interval_ms),
            timeout: std::time::Duration::from_millis(c.heartbeat_timeout_ms),
        })
    }

    /// `[cluster] on_mirror_loss`, parsed.
    pub fn on_mirror_loss(&self) -> Result<OnMirrorLoss> {
        self.file
            .cluster
            .on_mirror_loss
            .parse()
            .map_err(|e| Error::Config(format!("[cluster] on_mirror_loss: {e}")))
    }

    /// The etcd coordinator's settings, if the configuration asks for it.
    pub fn etcd(&self) -> Result<Option<EtcdSettings>> {
        let c = &self.file.cluster;
        match c.coordinator.as_str() {
            "static" => Ok(None),
            "etcd" => {
                if c.etcd_endpoints.is_empty() {
                    return Err(Error::Config(
                        "[cluster] coordinator = \"etcd\" needs etcd_endpoints, e.g. [\"10.0.0.1:2379\"]"
                            .into(),
                    ));
                }
                if c.lease_renew_ms == 0 || c.lease_margin_ms + c.lease_renew_ms >= c.lease_ttl_ms {
                    return Err(Error::Config(format!(
                        "[cluster] lease_renew_ms = {} plus lease_margin_ms = {} must be below lease_ttl_ms = {} \
                         (and the renewal interval more than 0)",
                        c.lease_renew_ms, c.lease_margin_ms, c.lease_ttl_ms
                    )));
                }
                let tls = self.etcd_tls()?;
                let prefix = if c.etcd_prefix.is_empty() {
                    format!("/mojim/{}", format_uuid(&self.region_id()?.uuid))
                } else {
                    c.etcd_prefix.trim_end_matches('/').to_string()
                };
                Ok(Some(EtcdSettings {
                    endpoints: c.etcd_endpoints.clone(),
                    tls,
                    prefix,
                    lease_ttl: std::time::Duration::from_millis(c.lease_ttl_ms),
                    lease_renew: std::time::Duration::from_millis(c.lease_renew_ms),
                    lease_margin: std::time::Duration::from_millis(c.lease_margin_ms),
                }))
            }
            other => Err(Error::Config(format!(
                "[cluster] coordinator = {other:?} is unknown; choose \"static\" or \"etcd\""
            ))),
        }
    }

    /// The TLS files for etcd, checked against the endpoints: https:// endpoints need
    /// `etcd_ca_file`; TLS files need https:// endpoints, all of them; `etcd_cert_file` and
    /// `etcd_key_file` go together. `[security]`'s files are not used for etcd: etcd is
    /// usually run with its own CA, and the cluster's certificate is its credential to nodes.
    fn etcd_tls(&self) -> Result<Option<EtcdTlsFiles>> {
        let c = &self.file.cluster;
        let https = c.etcd_endpoints.iter().filter(|e| e.trim().starts_with("https://")).count();
        let files = !c.etcd_ca_file.is_empty() || !c.etcd_cert_file.is_empty() || !c.etcd_key_file.is_empty();
        if https > 0 && https < c.etcd_endpoints.len() {
            return Err(Error::Config(format!(
                "[cluster] etcd_endpoints {:?} mixes https:// and plain endpoints: write all of them                  https:// (one etcd cluster, one scheme)",
                c.etcd_endpoints
            )));
        }
        if https == 0 {
            if files {
                return Err(Error::Config(
                    "[cluster] etcd_ca_file, etcd_cert_file and etcd_key_file are for TLS to etcd, but                      etcd_endpoints are plain: write them https://host:port, or clear the files"
                        .into(),
                ));
            }
            return Ok(None);
        }
        if c.etcd_ca_file.is_empty() {
            return Err(Error::Config(format!(
                "[cluster] etcd_endpoints {:?} are https:// but etcd_ca_file is not set: name the CA that                  signed etcd's certificate (etcdctl's --cacert)",
                c.etcd_endpoints
            )));
        }
        let identity = match (c.etcd_cert_file.is_empty(), c.etcd_key_file.is_empty()) {
            (true, true) => None,
            (false, false) => Some((self.resolve(&c.etcd_cert_file), self.resolve(&c.etcd_key_file))),
            (false, true) => {
                return Err(Error::Config(
                    "[cluster] etcd_cert_file is set but etcd_key_file is not: set both (etcdctl's --cert                      and --key), or neither"
                        .into(),
                ))
            }
            (true, false) => {
                return Err(Error::Config(
                    "[cluster] etcd_key_file is set but etcd_cert_file is not: set both (etcdctl's --cert                      and --key), or neither"
                        .into(),
                ))
            }
        };
        Ok(Some(EtcdTlsFiles { ca_file: self.resolve(&c.etcd_ca_file), identity }))
    }

    /// `[cluster] dirty_chunk` in bytes, checked: a power of two of at least 4 KiB.
    pub fn dirty_chunk(&self) -> Result<u64> {
        let c = size_field("cluster", "dirty_chunk", &self.file.cluster.dirty_chunk)?;
        if c < 4096 || !c.is_power_of_two() {
            return Err(Error::Config(format!(
                "[cluster] dirty_chunk {} must be a power of two of at least 4 KiB",
                format_size(c)
            )));
        }
        Ok(c)
    }

    /// `[mirror] secondary_rate_limit` in bytes per second, if set.
    pub fn secondary_rate_limit(&self) -> Result<Option<u64>> {
        let v = self.file.mirror.secondary_rate_limit.trim();
        if v.is_empty() {
            return Ok(None);
        }
        parse_rate(v).map(Some).map_err(|e| Error::Config(format!("[mirror] secondary_rate_limit: {e}")))
    }

    /// The emulated NVMM under the primary's own copy (`[region] nvmm_barrier_ns` and
    /// `nvmm_write_rate`), checked.
    pub fn region_nvmm(&self) -> Result<NvmmModel> {
        let r = &self.file.region;
        nvmm_model("[region]", r.nvmm_barrier_ns, &r.nvmm_write_rate)
    }

    /// The emulated NVMM under the mirror's logs and data area (`[mirror] nvmm_barrier_ns` and
    /// `nvmm_write_rate`), checked.
    pub fn mirror_nvmm(&self) -> Result<NvmmModel> {
        let m = &self.file.mirror;
        nvmm_model("[mirror]", m.nvmm_barrier_ns, &m.nvmm_write_rate)
    }

    /// `[mirror] secondary_tier_thresh` in bytes.
    pub fn secondary_tier_thresh(&self) -> Result<u64> {
        size_field("mirror", "secondary_tier_thresh", &self.file.mirror.secondary_tier_thresh)
    }

    /// `[metrics] listen`, checked to be a `host:port` (whether it can be bound is known only
    /// when it is); `None` when empty (no metrics listener).
    pub fn metrics_listen(&self) -> Result<Option<String>> {
        check_metrics_listen(&self.file.metrics.listen, "[metrics] listen")
    }

    /// `[mirror] log_capacity` in bytes, checked: a multiple of 4 KiB and at least 64 KiB.
    pub fn log_capacity(&self) -> Result<u64> {
        let c = size_field("mirror", "log_capacity", &self.file.mirror.log_capacity)?;
        if c < (64 << 10) || c % 4096 != 0 {
            return Err(Error::Config(format!(
                "[mirror] log_capacity {} must be a multiple of 4 KiB and at least 64 KiB",
                format_size(c)
            )));
        }
        Ok(c)
    }
}

/// Checks a metrics listen address from `from` (a setting or a flag): empty (none), or
/// `host:port` with a port of 0 to 65535.
pub fn check_metrics_listen(addr: &str, from: &str) -> Result<Option<String>> {
    if addr.is_empty() {
        return Ok(None);
    }
    let ok = addr.rsplit_once(':').is_some_and(|(host, port)| {
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        !host.is_empty() && !host.contains(['/', ' ']) && port.parse::<u16>().is_ok()
    });
    if !ok {
        return Err(Error::Config(format!(
            "{from} = \"{addr}\" is not a host:port: write e.g. \"127.0.0.1:9420\" (port 0: any free port), \
             or \"\" for no metrics listener"
        )));
    }
    Ok(Some(addr.to_string()))
}

/// Parses a rate such as `100MiB/s` into bytes per second.
pub fn parse_rate(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let size = t.strip_suffix("/s").ok_or_else(|| SizeError::NotARate(s.to_string()))?;
    match parse_size(size)? {
        0 => Err(SizeError::ZeroRate(s.to_string())),
        n => Ok(n),
    }
}

/// The text `mojim init` writes for the library's own sections, commented: as
/// [`template_with`] with no other section.
pub fn template(uuid: &[u8; 16], size: u64, secret: &str, listen: &str) -> String {
    template_with(uuid, size, secret, listen, &[])
}

/// The text `mojim init` writes: the library's sections, commented, with `owned` between
/// `[security]` and `[metrics]`: the sections other crates define (`[rvm]`, `[kv]`), each as
/// its crate writes it, ending in a blank line.
pub fn template_with(uuid: &[u8; 16], size: u64, secret: &str, listen: &str, owned: &[&str]) -> String {
    let head = format!(
        r#"# Mojim configuration. Every node of the cluster uses a copy of this file:
# [region] and the secret must match on all of them.

[region]
# Identity of the region; replicas refuse a peer with another uuid.
uuid = "{uuid}"
# Bytes in the data area (units: B, KiB, MiB, GiB; K = KB = KiB).
size = "{size}"
# The region file the primary's application maps (relative to this file).
path = "region.mojim"
# Emulated slow NVMM under the primary's own copy, for experiments (the paper's PMEP): nanoseconds
# added to every persistence barrier when the primary persists locally (unreplicated, async,
# sync-flush, or without its mirror), 0 to 1000000; and a cap on the bytes per second it
# persists, e.g. "2GiB/s" (1MiB/s to 1TiB/s). 0 and "": real memory speed.
nvmm_barrier_ns = 0
nvmm_write_rate = ""

[primary]
# Where the mirror listens.
mirror = "{listen}"
# tcp, or shm: shared-memory rings with a mirror on this host (mirror is then the path of its
# socket, e.g. "/dev/shm/mojim-mirror.sock").
transport = "tcp"
# shm, ucx: write each record straight into the mirror's log and send only its header (false:
# send the bytes through the connection's rings).
place_records = true
# When msync/gmsync return: unreplicated | async | sync | sync-flush | sync-disk
# (sync-disk is sync against a mirror with [mirror] data = "disk").
mode = "sync"
# Connections to the mirror; a thread keeps to one lane. A mirror started with this file
# makes the logs of this many lanes when it starts.
lanes = 2
# async: groups a lane may have in flight before a sync point waits.
async_window = 256
# To connect to the mirror and finish a lane's handshake. A mirror makes the log of a lane
# beyond its [primary] lanes in the lane's first handshake: a log_capacity of several GiB may
# need longer.
connect_timeout_ms = 5000
# Poll for the mirror's acknowledgement this long before sleeping (0: sleep at once). Polling
# spends a core per waiting thread to skip the wake-up of a sleeping one.
busy_poll_us = 0
# Baseline for comparison only (the paper's E-broadcast): more mirrors to send every group to,
# each waited for like the mirror above.
broadcast = []
# An HTTP listener for monitoring, opened by the application's primary: its mojim_primary_*
# metrics on /metrics, /healthz and /readyz (ready: the mirror is online; docs/METRICS.md). A
# host:port such as "127.0.0.1:9421" (port 0: any free port); "" opens none. Apart from
# [metrics] listen (mojim serve's), so that both roles can share this file on one host.
metrics_listen = ""

[mirror]
listen = "{listen}"
# tcp, or shm (listen is then a path, e.g. "/dev/shm/mojim-mirror.sock").
transport = "tcp"
# Folder of the mirror's data area (relative to this file).
dir = "mirror"
# Folder of the redo logs; empty means `dir`. Put it on memory (e.g. /dev/shm) for speed.
log_dir = ""
# Bytes of records per lane's circular log, reserved when the mirror starts (the first
# [primary] lanes lanes) or when a lane first joins.
log_capacity = "64MiB"
# Checkpoint after this many complete groups (the paper's CHECKPOINT_THRESH), when idle
# for checkpoint_idle_ms, and when a log is full.
checkpoint_thresh = 1
checkpoint_idle_ms = 2
# Most lanes a primary may open.
max_lanes = 16
# Poll each lane for the next frame this long before sleeping (0: sleep at once).
busy_poll_us = 0
# Where the data area lives: "memory" (mapped; checkpoints are stores and cache-line
# write-backs) or "disk" (sync-disk: checkpoints are pwrite + fdatasync; logs stay in log_dir).
data = "memory"
# Backups this mirror feeds in the background (the secondary tier): each runs `mojim serve`
# with this same configuration file and its own listen address and dir.
backups = []
# Bytes logged here but not yet at every backup above which this mirror stops acknowledging
# new groups until forwarding catches up (the paper's SECONDARY_TIER_THRESH).
secondary_tier_thresh = "40MiB"
# Cap on the bytes per second sent to each backup, e.g. "100MiB/s" (empty: no cap), to model a
# slower secondary network.
secondary_rate_limit = ""
# Baseline for comparison only (the paper's E-chain): acknowledge a group only once every
# backup has it, so the primary waits for the whole chain.
chain = false
# Emulated slow NVMM under this node's logs and data area (data = "memory"), as in [region]:
# nanoseconds added to every persistence barrier, and a cap on the bytes per second persisted.
nvmm_barrier_ns = 0
nvmm_write_rate = ""

[limits]
# Largest frame body; longer ranges are split into several frames.
max_frame = "64KiB"
# Most ranges in one gmsync.
max_ranges = 1024

[cluster]
# A side that sent nothing on a link for heartbeat_interval_ms sends a heartbeat; a side that
# heard nothing for heartbeat_timeout_ms declares its peer failed.
heartbeat_interval_ms = 100
heartbeat_timeout_ms = 2000
# What the primary does when it loses its mirror (it first makes its own copy persistent):
# "block" fails sync points until the mirror is back and caught up; "degrade" keeps going on
# the local copy and records changed chunks in a dirty bitmap, resent when the mirror returns.
on_mirror_loss = "block"
# How often a primary without its mirror tries to reconnect.
reconnect_ms = 200
# Bytes per bit of the dirty bitmap, and records (32 bytes each) of the metadata log that
# remembers the ranges of recent groups for a fast catch-up.
dirty_chunk = "64KiB"
metadata_log_records = 65536
# Who decides roles. "static": this file and the operator's `mojim promote` (like DRBD without a
# cluster manager). "etcd": the primary holds a lease in etcd and stops acknowledging before it
# could expire; when it expires the mirror promotes itself under a new epoch and its first
# backup becomes the mirror. Under etcd every node needs a name (--node, or node below): the
# mirror is known by its name, and a node without one never takes over.
node = ""
coordinator = "static"
etcd_endpoints = []
# TLS to etcd, as etcdctl's --cacert, --cert and --key: with https://host:port endpoints, the
# CA that signed etcd's certificate (which must name the endpoint's host or IP address), and
# this node's client certificate and key for an etcd with --client-cert-auth (PEM, relative to
# this file). [security]'s files are not used for etcd.
etcd_ca_file = ""
etcd_cert_file = ""
etcd_key_file = ""
# Key prefix; empty means /mojim/<region uuid>.
etcd_prefix = ""
# The primary's lease: its time to live; how often the primary renews it; and how long before
# it could expire (counted from when the last renewal was sent) the primary stops acknowledging,
# room for clocks that run at different rates. renew + margin must stay below the ttl.
lease_ttl_ms = 3000
lease_renew_ms = 1000
lease_margin_ms = 500

[security]
# Shared cluster secret (HMAC-SHA256 challenge-response), at least 16 bytes. The MOJIM_SECRET
# environment variable overrides it. With no secret, nodes refuse to start unless
# insecure = true or --insecure is given. Whoever reads it can act as a primary or an operator:
# keep this file readable by its owner only (mode 0600; see docs/SECURITY.md).
secret = "{secret}"
insecure = false
# Mutual TLS 1.3 on every link, TCP, shared memory and UCX (the secret is then optional):
# ca_file, cert_file and key_file name PEM files (relative to this file; the key mode 0600), each
# certificate from the cluster's CA with its role (mojim:role:node, operator or application).
# `mojim init --tls` makes them. Records placed in a mirror's log (shm, ucx) then carry a MAC
# under a key from the lane's TLS session (docs/FORMAT.md §2.4). crl_file (optional) names
# the CA's certificate revocation lists, PEM: a peer whose certificate one lists is refused.
# `mojim serve` and `mojim kv` read these files again on SIGHUP.
tls = false
# With tls = true: encrypt placed records' bodies too (AES-256-GCM; only authenticated without
# it). Set it the same on a primary and its mirror; it has no effect on TCP lanes.
encrypt_placed = false

"#,
        uuid = format_uuid(uuid),
        size = format_size(size),
    );
    let tail = r#"[metrics]
# An HTTP listener for monitoring, opened by `mojim serve`: Prometheus metrics on /metrics,
# /healthz and /readyz (ready: the data area is consistent; docs/METRICS.md). A host:port such
# as "127.0.0.1:9420" (port 0: any free port); "" opens none. It serves anyone who reaches it:
# keep it on a trusted network.
listen = ""
"#;
    let mut text = head;
    for section in owned {
        text.push_str(section);
    }
    text.push_str(tail);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_and_uuid_round_trips() {
        let u = random_uuid();
        let text = template(&u, 1 << 30, "s", "127.0.0.1:7420");
        let file: ConfigFile = toml::from_str(&text).unwrap();
        let c = Config { file, base: PathBuf::from("/x"), path: None };
        assert_eq!(c.region_id().unwrap(), RegionId { uuid: u, size: 1 << 30 });
        assert_eq!(c.mode().unwrap(), Mode::Sync);
        assert_eq!(c.limits().unwrap().max_frame, 65536);
        assert_eq!(c.resolve("region.mojim"), PathBuf::from("/x/region.mojim"));
        assert_eq!(parse_uuid(&format_uuid(&u)).unwrap(), u);
    }

    #[test]
    fn etcd_tls_settings_are_checked_against_the_endpoints() {
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        file.cluster.coordinator = "etcd".into();
        let with = |endpoints: &[&str], ca: &str, cert: &str, key: &str| {
            let mut f = file.clone();
            f.cluster.etcd_endpoints = endpoints.iter().map(|e| e.to_string()).collect();
            (f.cluster.etcd_ca_file, f.cluster.etcd_cert_file, f.cluster.etcd_key_file) =
                (ca.into(), cert.into(), key.into());
            Config { file: f, base: PathBuf::from("/etc/mojim"), path: None }.etcd().map(|s| s.unwrap().tls)
        };
        assert_eq!(with(&["h:1"], "", "", "").unwrap(), None);
        let files = with(&["https://h:1", "https://g:1"], "ca.pem", "c.pem", "/k.pem").unwrap().unwrap();
        assert_eq!(files.ca_file, PathBuf::from("/etc/mojim/ca.pem"));
        assert_eq!(files.identity, Some((PathBuf::from("/etc/mojim/c.pem"), PathBuf::from("/k.pem"))));
        assert_eq!(with(&["https://h:1"], "ca.pem", "", "").unwrap().unwrap().identity, None);
        for (endpoints, ca, cert, key, needle) in [
            (&["https://h:1"][..], "", "", "", "etcd_ca_file is not set"),
            (&["https://h:1", "h:2"][..], "ca.pem", "", "", "mixes https:// and plain"),
            (&["h:1"][..], "ca.pem", "", "", "etcd_endpoints are plain"),
            (&["h:1"][..], "", "c.pem", "k.pem", "etcd_endpoints are plain"),
            (&["https://h:1"][..], "ca.pem", "c.pem", "", "etcd_key_file is not"),
            (&["https://h:1"][..], "ca.pem", "", "k.pem", "etcd_cert_file is not"),
        ] {
            let e = with(endpoints, ca, cert, key).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("[cluster]"), "{needle:?} not in {e}");
        }
    }

    /// `[security] encrypt_placed` needs `tls`: refused at start naming both; off by default.
    #[test]
    fn encrypt_placed_without_tls_is_refused_naming_both_settings() {
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        assert!(!file.security.encrypt_placed, "off by default");
        file.security.encrypt_placed = true;
        let c = Config { file, base: PathBuf::new(), path: None };
        for e in [c.tls().unwrap_err().to_string(), c.application_tls().unwrap_err().to_string()] {
            assert!(e.contains("[security] encrypt_placed = true needs [security] tls = true"), "{e}");
        }
    }

    #[test]
    fn metrics_listen_is_off_by_default_and_a_bad_address_is_named() {
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        assert_eq!(
            Config { file: file.clone(), base: PathBuf::new(), path: None }.metrics_listen().unwrap(),
            None
        );
        for good in ["127.0.0.1:9420", "localhost:0", "[::1]:9420", "0.0.0.0:65535"] {
            file.metrics.listen = good.into();
            let c = Config { file: file.clone(), base: PathBuf::new(), path: None };
            assert_eq!(c.metrics_listen().unwrap().as_deref(), Some(good));
        }
        for bad in ["9420", "127.0.0.1", "127.0.0.1:99999", ":9420", "/run/m.sock:1", "h:x"] {
            file.metrics.listen = bad.into();
            let e = Config { file: file.clone(), base: PathBuf::new(), path: None }
                .metrics_listen()
                .unwrap_err()
                .to_string();
            for needle in ["[metrics] listen", bad, "host:port", "\"\" for no metrics"] {
                assert!(e.contains(needle), "{needle:?} not in {e}");
            }
        }
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100MiB/s"), Ok(100 << 20));
        assert_eq!(parse_rate("100MiB"), Err(SizeError::NotARate("100MiB".into())));
        assert!(parse_rate("100MiB").unwrap_err().to_string().contains("100MiB/s"));
        assert_eq!(parse_rate("0/s"), Err(SizeError::ZeroRate("0/s".into())));
    }

    #[test]
    fn a_bad_primary_cert_file_is_named_under_primary() {
        let dir = std::env::temp_dir().join(format!("mojim-config-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), "not read this far").unwrap();
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        file.security.tls = true;
        file.security.ca_file = "ca.pem".into();
        file.security.cert_file = "node.pem".into();
        file.security.key_file = "node.key".into();
        file.primary.cert_file = "missing-application.pem".into();
        file.primary.key_file = "application.key".into();
        let c = Config { file, base: dir.clone(), path: None };
        let e = c.application_tls().unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(e.contains("[primary] cert_file ") && e.contains("missing-application.pem"), "{e}");
    }

    #[test]
    fn errors_name_the_setting() {
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        file.primary.mode = "fast".into();
        file.limits.max_frame = "1GiB".into();
        let c = Config { file, base: PathBuf::new(), path: None };
        assert!(c.mode().unwrap_err().to_string().contains("\"fast\""));
        assert!(c.limits().unwrap_err().to_string().contains("max_frame 1GiB"));
        assert!(parse_uuid("xyz").unwrap_err().to_string().contains("xyz"));
    }

    #[test]
    fn nvmm_settings_parse_and_bad_ones_are_named() {
        let mut file: ConfigFile = toml::from_str(&template(&[0; 16], 4096, "", "a:1")).unwrap();
        let c = Config { file: file.clone(), base: PathBuf::new(), path: None };
        assert!(c.region_nvmm().unwrap().is_off() && c.mirror_nvmm().unwrap().is_off(), "off by default");
        file.region.nvmm_barrier_ns = 1000;
        file.mirror.nvmm_write_rate = "2GiB/s".into();
        let c = Config { file: file.clone(), base: PathBuf::new(), path: None };
        assert_eq!(c.region_nvmm().unwrap().barrier, std::time::Duration::from_micros(1));
        assert_eq!(c.mirror_nvmm().unwrap().write_bytes_per_s, 2 << 30);
        let text = toml::to_string(&file).unwrap();
        let again: ConfigFile = toml::from_str(&text).unwrap();
        assert_eq!((again.region.nvmm_barrier_ns, again.mirror.nvmm_write_rate.as_str()), (1000, "2GiB/s"));

        let bad = |region_ns: u64, region_rate: &str, mirror_ns: u64, mirror_rate: &str| {
            let mut f = file.clone();
            (f.region.nvmm_barrier_ns, f.region.nvmm_write_rate) = (region_ns, region_rate.into());
            (f.mirror.nvmm_barrier_ns, f.mirror.nvmm_write_rate) = (mirror_ns, mirror_rate.into());
            let c = Config { file: f, base: PathBuf::new(), path: None };
            let r = c.region_nvmm().err().map(|e| e.to_string()).unwrap_or_default();
            let m = c.mirror_nvmm().err().map(|e| e.to_string()).unwrap_or_default();
            (r, m)
        };
        let (r, _) = bad(2_000_000, "", 0, "");
        for needle in ["[region] nvmm_barrier_ns", "2000000", "0 ..= 1000000"] {
            assert!(r.contains(needle), "{needle:?} not in {r}");
        }
        let (_, m) = bad(0, "", 1_000_001, "");
        assert!(m.contains("[mirror] nvmm_barrier_ns = 1000001"), "{m}");
        let (r, _) = bad(0, "fast", 0, "");
        assert!(r.contains("[region] nvmm_write_rate") && r.contains("fast"), "{r}");
        let (_, m) = bad(0, "", 0, "2TiB/s");
        for needle in ["[mirror] nvmm_write_rate", "2TiB/s", "1MiB/s ..= 1TiB/s"] {
            assert!(m.contains(needle), "{needle:?} not in {m}");
        }
        let (_, m) = bad(0, "", 0, "1KiB/s");
        assert!(m.contains("\"1KiB/s\" is outside"), "{m}");
        let (r, _) = bad(0, "0/s", 0, "");
        assert!(r.contains("[region] nvmm_write_rate") && r.contains("0/s"), "{r}");
        assert_eq!(
            bad(1_000_000, "1TiB/s", 0, "1MiB/s"),
            (String::new(), String::new()),
            "the ends are allowed"
        );
    }

    #[test]
    fn each_transport_takes_its_own_address_form() {
        for (t, a) in [("tcp", "127.0.0.1:7420"), ("shm", "/dev/shm/m.sock"), ("ucx", "ucx:127.0.0.1:7420")] {
            Config::check_transport("primary", t, "mirror", a).unwrap();
        }
        let e = Config::check_transport("mirror", "ucx", "listen", "127.0.0.1:7420").unwrap_err().to_string();
        assert!(e.contains("ucx:<host>:<port>") && e.contains("127.0.0.1:7420"), "{e}");
        let e = Config::check_transport("primary", "tcp", "mirror", "ucx:127.0.0.1:7420")
            .unwrap_err()
            .to_string();
        assert!(e.contains("set transport = \"ucx\""), "{e}");
        let e = Config::check_transport("primary", "shm", "mirror", "ucx:127.0.0.1:7420")
            .unwrap_err()
            .to_string();
        assert!(e.contains("absolute path"), "{e}");
        let e = Config::check_transport("primary", "rdma", "mirror", "ucx:127.0.0.1:7420")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"ucx\""), "{e}");
    }
}
