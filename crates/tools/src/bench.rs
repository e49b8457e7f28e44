//! `mojim bench`: the paper's microbenchmark. Threads persist random `size`-byte ranges of a
//! region and the latency of each sync point is recorded. Several modes run side by side in one
//! invocation (`--mode sync,tcp-rtt,unreplicated`), so that ratios come from one run on the same
//! machine at the same time.

use crate::child::ChildNode;
use crate::cluster::{LocalCluster, Shape, Topology};
use hdrhistogram::Histogram;
use mojim::config::{random_uuid, template, Config, ConfigFile, Limits, Mode, NvmmModel, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim::primary::{Primary, PrimaryOptions};
use mojim::size::{format_size, parse_size};
use mojim_transport::{AnyTransport, Conn, TlsContext, Transport};
use serde::Serialize;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `mojim bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Modes to run, comma-separated, one after another in this run: unreplicated, async,
    /// sync, sync-flush, sync-disk, tcp-rtt (a raw ping-pong of the same size over TCP, no
    /// protocol), and the schemes sync-backup (sync with backups fed in the background),
    /// sync-backup-slow (the same over rate-limited backup links), chain and broadcast, each on a
    /// cluster of its own; or, on its own, resync (how fast a replica that was away is brought
    /// back: tcp baselines, full copy, bitmap, log catch-up); or, on its own, failover (the
    /// primary killed and replaced on the promoted mirror; the window of vulnerability).
    #[arg(long, default_value = "sync", value_delimiter = ',')]
    pub mode: Vec<String>,
    /// Bytes per sync point.
    #[arg(long, default_value = "4096", value_parser = parse_size)]
    pub size: u64,
    /// Bytes in the benchmark region (the paper used 4 GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub region_size: u64,
    /// Application threads, each on its own part of the region.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Lanes (connections to the mirror); default: one per thread.
    #[arg(long)]
    pub lanes: Option<u16>,
    /// Sync points per mode, over all threads.
    #[arg(long, default_value_t = 20000)]
    pub ops: u64,
    /// Run each mode for this many seconds instead of --ops.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Sync points per thread before measuring.
    #[arg(long, default_value_t = 500)]
    pub warmup: u64,
    /// Use this running mirror instead of starting one (needs --config for its region and secret).
    #[arg(long, requires = "config")]
    pub mirror: Option<String>,
    /// Configuration of the region to use with --mirror.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run `unreplicated` on a region file at this path on an ordinary disk (msync(2) to the
    /// disk): the paper's S-unreplicated comparison. Reported as mode `unreplicated-disk`.
    #[arg(long)]
    pub disk_file: Option<PathBuf>,
    /// Folder for the benchmark's region and mirror files (memory-backed by default).
    #[arg(long, default_value = "/dev/shm")]
    pub dir: PathBuf,
    /// Folder on a disk for the `sync-disk` mirror's data area (its logs stay in --dir).
    #[arg(long, default_value = "/var/tmp")]
    pub disk_dir: PathBuf,
    /// Poll for the next message this many microseconds before sleeping, on both ends of every
    /// connection (the primary's lanes, the local mirror's lanes, and tcp-rtt's ping-pong alike).
    #[arg(long, default_value_t = 0)]
    pub busy_poll_us: u64,
    /// Run the whole list of modes this many times, interleaved, and report for each mode the
    /// round with the median p50 (this machine is shared and noisy).
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Start this many local backups behind (two-tier, chain) or beside (broadcast) the local
    /// mirror; the pseudo-modes sync-backup, sync-backup-slow, chain and broadcast use at least 1.
    #[arg(long, default_value_t = 0, conflicts_with = "mirror")]
    pub backups: usize,
    /// How the local mirror and its backups are arranged for the replicated modes.
    #[arg(long, value_enum, default_value = "two-tier")]
    pub topology: Topology,
    /// Cap each backup link at this rate, e.g. 100MiB/s (sync-backup-slow: default 100MiB/s).
    #[arg(long)]
    pub secondary_rate_limit: Option<String>,
    /// The local mirrors' secondary_tier_thresh (bytes not yet at every backup above which the
    /// mirror stalls the primary), e.g. 40MiB.
    #[arg(long)]
    pub secondary_tier_thresh: Option<String>,
    /// Start the local mirror with this checkpoint_thresh (complete groups between checkpoints).
    #[arg(long, conflicts_with = "mirror")]
    pub checkpoint_thresh: Option<usize>,
    /// Emulate slow NVMM (the paper's PMEP, about 1000 ns): add this many nanoseconds, by
    /// spinning, to every persistence barrier of both roles: the primary's own region when it
    /// persists locally (unreplicated, async, sync-flush) and the local mirrors' logs and data
    /// areas ([region] and [mirror] nvmm_barrier_ns). 0 to 1000000; 0: memory speed.
    #[arg(long, default_value_t = 0)]
    pub nvmm_barrier_ns: u64,
    /// Emulate slow NVMM: cap the bytes per second each role persists, e.g. 1600MiB/s (the
    /// paper's PMEP: 1.6 GB/s), on the same files as --nvmm-barrier-ns ([region] and [mirror]
    /// nvmm_write_rate); 1MiB/s to 1TiB/s. Default: no cap.
    #[arg(long)]
    pub nvmm_write_rate: Option<String>,
    #[command(flatten)]
    pub transact: crate::transact::TransactArgs,
    #[command(flatten)]
    pub matrix: crate::matrix::MatrixArgs,
    #[command(flatten)]
    pub whisper: crate::whisper::driver::WhisperArgs,
    #[command(flatten)]
    pub resync: crate::bench_resync::ResyncArgs,
    #[command(flatten)]
    pub failover: crate::bench_failover::FailoverArgs,
    #[command(flatten)]
    pub kv: crate::kv::KvArgs,
    #[command(flatten)]
    pub rvm: crate::rvm::bench::RvmBenchArgs,
    /// Run the LMDB benchmark instead: one unmodified LMDB program (Python's lmdb module)
    /// committing transactions of one --size put each, under libmojim_preload.so (mojim-sync),
    /// on --disk-dir with LMDB's fdatasync (ext4-fdatasync) and on --dir without syncs
    /// (tmpfs-none).
    #[arg(long)]
    pub lmdb: bool,
    /// Transactions per target for --lmdb.
    #[arg(long, default_value_t = 2000)]
    pub lmdb_txns: u64,
    /// The interposer for --lmdb (default: libmojim_preload.so beside the mojim executable).
    #[arg(long)]
    pub preload: Option<PathBuf>,
    /// Compare the C API's sync points (mojim_msync, mojim_msync_at) with the Rust API's
    /// (Primary::msync), taking turns on one primary per mode of --mode.
    #[arg(long)]
    pub c_api: bool,
    /// Transports to run every mode over, comma-separated, one after another: tcp (loopback),
    /// shm (shared memory with the mirror on this host: records placed straight into its logs;
    /// tcp-rtt is then the rings' raw ping-pong, reported as shm-rtt), shm-rings (shm with
    /// `[primary] place_records = false`: records' bytes through the rings), ucx (through UCX, on
    /// loopback: records put straight into the mirror's registered logs; tcp-rtt is then UCX's
    /// raw ping-pong, reported as ucx-rtt) and ucx-rings (ucx with `place_records = false`:
    /// records' bytes through the registered rings).
    #[arg(long, default_value = "tcp", value_delimiter = ',')]
    pub transport: Vec<String>,
    /// Mutual TLS on the links, comma-separated: off, on, encrypt, or several (off,on,encrypt)
    /// to run them side by side (a session each, their rounds interleaved under --repeat) and
    /// print the ratios. With on, the benchmark makes a CA and certificates for its mirrors
    /// (role node) and its primary and pinger (role application); tcp-rtt's echo server speaks
    /// TLS too. Over shm and ucx, TLS runs over the rings or the UCX stream, and placed records
    /// carry their MAC. encrypt is on with `[security] encrypt_placed = true`: placed records'
    /// bodies are encrypted too (reported as +tls+enc; over tcp the same as on).
    /// With --mode resync, on adds the kind full-tls: full with every link over mutual TLS.
    #[arg(long, default_value = "off", value_delimiter = ',', conflicts_with = "mirror")]
    pub tls: Vec<String>,
    /// The primary's metrics listener, comma-separated: off, on, or on,off to run both side by
    /// side (a session each, their rounds interleaved under --repeat) and print the ratios.
    /// With on, each primary serves its metrics on a free loopback port (`[primary]
    /// metrics_listen`) and a thread of the benchmark scrapes `/metrics` once a second while it
    /// runs. Rows of modes without a primary (tcp-rtt) measure the same thing in both settings:
    /// their ratio shows the run's noise.
    #[arg(long, default_value = "off", value_delimiter = ',')]
    pub metrics: Vec<String>,
    /// Print one JSON object per result instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl BenchArgs {
    /// The emulated NVMM of `--nvmm-barrier-ns` and `--nvmm-write-rate`, checked.
    pub fn nvmm_model(&self) -> Result<NvmmModel> {
        let rate = self.nvmm_write_rate.as_deref().unwrap_or("");
        mojim::config::nvmm_model("--nvmm-barrier-ns / --nvmm-write-rate:", self.nvmm_barrier_ns, rate)
    }
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub mode: String,
    pub size: u64,
    pub threads: usize,
    pub lanes: u16,
    pub ops: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    /// Replicas besides the mirror.
    pub backups: usize,
    pub topology: String,
    /// `tcp`, `shm` or `ucx`.
    pub transport: String,
    /// Whether the links ran mutual TLS (`--tls on` or `encrypt`).
    pub tls: bool,
    /// Whether placed records' bodies were encrypted (`--tls encrypt`: `[security]
    /// encrypt_placed`).
    pub encrypt_placed: bool,
    /// Whether the primary served its metrics and was scraped each second (`--metrics on`).
    pub metrics: bool,
    /// CPU time (user + system, µs) per operation of the sending process (the benchmark and the
    /// primary in it; the pinger for tcp-rtt), warm-up included, at the kernel's tick resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_sender: Option<f64>,
    /// The same for the receiving process: the mirror (the echo server for tcp-rtt), if this
    /// benchmark started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_receiver: Option<f64>,
}

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Mode(Mode),
    TcpRtt,
    DiskFile,
    /// `sync` on a cluster of its own: a topology, and whether its backup links are slow.
    Scheme(Topology, bool),
}

/// The pseudo-modes naming a [`Kind::Scheme`].
const SCHEME_NAMES: [(&str, Topology, bool); 4] = [
    ("sync-backup", Topology::TwoTier, false),
    ("sync-backup-slow", Topology::TwoTier, true),
    ("chain", Topology::Chain, false),
    ("broadcast", Topology::Broadcast, false),
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Mode(m) => m.name(),
            Kind::TcpRtt => "tcp-rtt",
            Kind::DiskFile => "unreplicated-disk",
            Kind::Scheme(t, slow) => {
                SCHEME_NAMES.iter().find(|s| s.1 == t && s.2 == slow).map_or("scheme", |s| s.0)
            }
        }
    }
}

fn parse_kinds(a: &BenchArgs) -> Result<Vec<Kind>> {
    let mut out = Vec::new();
    for m in &a.mode {
        let m = m.trim();
        out.push(match m {
            "tcp-rtt" => Kind::TcpRtt,
            _ if SCHEME_NAMES.iter().any(|s| s.0 == m) => {
                let s = SCHEME_NAMES.iter().find(|s| s.0 == m).expect("found");
                Kind::Scheme(s.1, s.2)
            }
            _ => {
                Kind::Mode(m.parse().map_err(|e: String| Error::Config(format!("--mode: {e}; or tcp-rtt")))?)
            }
        });
    }
    if a.disk_file.is_some() {
        out.push(Kind::DiskFile);
    }
    Ok(out)
}

/// A small, fast, seeded generator for offsets.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Files and processes of one benchmark run, removed when dropped.
struct Setup {
    dir: Option<PathBuf>,
    region_path: PathBuf,
    mirror_addr: Option<String>,
    secret: Secret,
    limits: Limits,
    /// The local mirror (and its backups) of the plain modes.
    main: Option<LocalCluster>,
    /// The clusters of the schemes.
    schemes: Vec<(Kind, LocalCluster)>,
    /// A second mirror whose data area is on disk, for `sync-disk`.
    disk_mirror: Option<ChildNode>,
    /// How the disk mirror was started, to restart it.
    disk_args: Vec<String>,
    disk_dir: Option<PathBuf>,
    echo: Option<ChildNode>,
    /// The primary's and pinger's TLS settings (`--tls on`; role application).
    tls: Option<Arc<TlsContext>>,
    /// The benchmark's configuration, for the echo server's TLS settings.
    echo_config: Option<String>,
    /// The emulated NVMM under the primary's region (`--nvmm-*`; the local mirrors have it too).
    nvmm: NvmmModel,
}

impl Setup {
    /// A setup with its region and nothing started yet.
    fn new(dir: Option<PathBuf>, region_path: PathBuf, secret: Secret, limits: Limits) -> Setup {
        Setup {
            dir,
            region_path,
            mirror_addr: None,
            secret,
            limits,
            main: None,
            schemes: Vec::new(),
            disk_mirror: None,
            disk_args: Vec::new(),
            disk_dir: None,
            echo: None,
            tls: None,
            echo_config: None,
            nvmm: NvmmModel::default(),
        }
    }

    fn mirror_for(&self, mode: Mode) -> String {
        match (mode, &self.disk_mirror) {
            (Mode::SyncDisk, Some(m)) => m.addr().to_string(),
            _ => self.mirror_addr.clone().unwrap_or_default(),
        }
    }

    fn scheme(&self, k: Kind) -> Option<&LocalCluster> {
        self.schemes.iter().find(|(s, _)| *s == k).map(|(_, c)| c)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.main.take();
        self.schemes.clear();
        self.disk_mirror.take();
        if let Some(d) = &self.disk_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        self.echo.take();
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub(crate) fn exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(Error::io("find the mojim executable"))
}

fn setup(a: &BenchArgs, kinds: &[Kind]) -> Result<Setup> {
    let nvmm = a.nvmm_model()?;
    let needs_mirror = kinds.iter().any(|k| matches!(k, Kind::Mode(m) if m.replicated()));
    let needs_echo = kinds.contains(&Kind::TcpRtt);
    let mut s = if let (Some(addr), Some(cfg)) = (&a.mirror, &a.config) {
        let cfg = Config::load(cfg)?;
        let mut s = Setup::new(None, cfg.resolve(&cfg.file.region.path), cfg.secret(false)?, cfg.limits()?);
        s.mirror_addr = Some(addr.clone());
        s.tls = cfg.application_tls()?;
        s.echo_config = a.config.as_ref().and_then(|c| c.to_str()).map(str::to_string);
        s
    } else {
        // Named after the process and a count, so that sessions of one process never share one.
        static SESSIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mojim-bench-{}-{n}", std::process::id());
        let dir = a.dir.join(&name);
        std::fs::create_dir_all(&dir).map_err(Error::io(format!("create {}", dir.display())))?;
        let mut s = Setup::new(
            Some(dir.clone()),
            dir.join("region.mojim"),
            Secret(b"mojim-bench-secret".to_vec()),
            Limits::default(),
        );
        let id = RegionId { uuid: random_uuid(), size: a.region_size };
        mojim::create_region(&s.region_path, id)?;
        let mut base = with_mirror_nvmm(template(&id.uuid, id.size, "mojim-bench-secret", "127.0.0.1:0"), a)?;
        if tls_on(a)? {
            base = crate::certs::make_cluster_certs(&dir, &base)?;
        }
        if tls_settings(a)?[0] == "encrypt" {
            let (off, on) = ("encrypt_placed = false\n", "encrypt_placed = true\n");
            if !base.contains(off) {
                return Err(Error::Config(format!(
                    "--tls encrypt: the configuration template has no `{off}`"
                )));
            }
            base = base.replacen(off, on, 1);
        }
        let cfg = dir.join("mojim.toml");
        mojim::config::write_private(&cfg, &base).map_err(Error::io("write config"))?;
        s.tls = Config::load(&cfg)?.application_tls()?;
        let cfg = cfg.to_str().unwrap_or_default().to_string();
        let poll = a.busy_poll_us.to_string();
        let thresh = a.checkpoint_thresh.map(|t| t.to_string());
        let disk_listen = crate::cluster::listen_addr(&dir, "disk-mirror", transport(a));
        let mut serve = vec!["serve", "--config", &cfg, "--listen", &disk_listen, "--busy-poll-us", &poll];
        s.echo_config = Some(cfg.clone());
        if let Some(t) = &thresh {
            serve.extend(["--checkpoint-thresh", t.as_str()]);
        }
        let shape = |topology, backups, rate_limit| Shape {
            topology,
            backups,
            rate_limit,
            secondary_tier_thresh: a.secondary_tier_thresh.clone(),
            checkpoint_thresh: a.checkpoint_thresh,
            busy_poll_us: a.busy_poll_us,
            transport: transport(a),
        };
        if needs_mirror {
            let main = shape(a.topology, a.backups, a.secondary_rate_limit.clone());
            let c = LocalCluster::start(&exe()?, &base, &dir, "main", &main)?;
            s.mirror_addr = Some(c.mirror.addr().to_string());
            s.main = Some(c);
        }
        for &k in kinds {
            if let Kind::Scheme(topology, slow) = k {
                if s.scheme(k).is_some() {
                    continue;
                }
                let rate = slow.then(|| a.secondary_rate_limit.clone().unwrap_or_else(|| "100MiB/s".into()));
                let c = LocalCluster::start(
                    &exe()?,
                    &base,
                    &dir,
                    k.name(),
                    &shape(topology, a.backups.max(1), rate),
                )?;
                s.schemes.push((k, c));
            }
        }
        if kinds.contains(&Kind::Mode(Mode::SyncDisk)) {
            // The data area on disk, the logs on memory beside the other mirror's.
            let disk = a.disk_dir.join(format!("{name}-disk"));
            s.disk_dir = Some(disk.clone());
            let logs = dir.join("disk-mirror-logs");
            let (disk, logs) = (disk.to_str().unwrap_or_default(), logs.to_str().unwrap_or_default());
            let mut args = serve.to_vec();
            args.extend(["--data", "disk", "--dir", disk, "--log-dir", logs]);
            s.disk_mirror = Some(ChildNode::spawn(&exe()?, &args)?);
            s.disk_args = args.iter().map(|a| a.to_string()).collect();
        }
        s
    };
    s.nvmm = nvmm;
    if needs_echo {
        let poll = a.busy_poll_us.to_string();
        let listen = match &s.dir {
            Some(d) => crate::cluster::listen_addr(d, "echo", transport(a)),
            None if transport(a) == "ucx" => "ucx:127.0.0.1:0".into(),
            None => "127.0.0.1:0".into(),
        };
        let mut args = vec!["echo", "--listen", &listen, "--busy-poll-us", &poll];
        if let Some(c) = &s.echo_config {
            args.extend(["--config", c.as_str()]);
        }
        s.echo = Some(ChildNode::spawn(&exe()?, &args)?);
    }
    Ok(s)
}

/// The local mirrors' configuration `base` with `--nvmm-*` in its `[mirror]` section (checked
/// first, so that a bad value is named before anything starts).
fn with_mirror_nvmm(base: String, a: &BenchArgs) -> Result<String> {
    if a.nvmm_model()?.is_off() {
        return Ok(base);
    }
    let mut f: ConfigFile =
        toml::from_str(&base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    f.mirror.nvmm_barrier_ns = a.nvmm_barrier_ns;
    f.mirror.nvmm_write_rate = a.nvmm_write_rate.clone().unwrap_or_default();
    toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))
}

/// Runs the benchmark (or, with `--transact` or `--matrix`, those) and prints its results.
pub fn run(a: &BenchArgs) -> Result<()> {
    if a.rvm.rvm {
        return crate::rvm::bench::run(a);
    }
    if a.matrix.matrix.is_some() {
        return crate::matrix::run(a);
    }
    if a.lmdb {
        return crate::bench_lmdb::run(a);
    }
    if a.kv.kv || a.kv.kv_memory || a.kv.kv_stall {
        return crate::kv::run(a);
    }
    if a.transact.transact {
        return crate::transact::run(a);
    }
    if a.whisper.whisper {
        return crate::whisper::driver::run(a);
    }
    if a.c_api {
        return crate::bench_capi::run(a);
    }
    if a.mode.iter().any(|m| m.trim() == "resync") {
        return crate::bench_resync::run(a);
    }
    if a.mode.iter().any(|m| m.trim() == "failover") {
        return crate::bench_failover::run(a);
    }
    let tls = tls_settings(a)?;
    let metrics = on_off_settings("--metrics", &a.metrics)?;
    if tls.len() > 1 && metrics.len() > 1 {
        return Err(Error::Config(
            "--tls on,off and --metrics on,off: compare one at a time (give the other one setting)".into(),
        ));
    }
    let mut results = Vec::new();
    for t in transports(a)? {
        let mut one = a.clone();
        one.transport = vec![t.to_string()];
        if tls.len() > 1 {
            results.extend(measure_side_by_side(&one, "--tls", &tls, |o, t| o.tls = vec![t.into()])?);
        } else if metrics.len() > 1 {
            results.extend(measure_side_by_side(&one, "--metrics", &metrics, |o, m| {
                o.metrics = vec![m.into()]
            })?);
        } else {
            results.extend(measure(&one)?);
        }
    }
    print(&results, a.json);
    Ok(())
}

/// `--tls`, checked: each of off, on and encrypt at most once; none is off.
pub(crate) fn tls_settings(a: &BenchArgs) -> Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for t in &a.tls {
        let t = match t.trim() {
            "off" => "off",
            "on" => "on",
            "encrypt" => "encrypt",
            other => {
                return Err(Error::Config(format!(
                    "--tls {other}: choose off, on or encrypt, or several comma-separated (off,on,encrypt)"
                )))
            }
        };
        if out.contains(&t) {
            return Err(Error::Config(format!("--tls names {t} twice")));
        }
        out.push(t);
    }
    if out.is_empty() {
        out.push("off");
    }
    Ok(out)
}

/// A flag of on and off (`--metrics`), checked: each at most once; none is off.
fn on_off_settings(flag: &str, given: &[String]) -> Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for t in given {
        let t = match t.trim() {
            "on" => "on",
            "off" => "off",
            other => return Err(Error::Config(format!("{flag} {other}: choose on, off, or on,off"))),
        };
        if out.contains(&t) {
            return Err(Error::Config(format!("{flag} names {t} twice")));
        }
        out.push(t);
    }
    if out.is_empty() {
        out.push("off");
    }
    Ok(out)
}

/// Whether this run's primaries serve their metrics (the first of `--metrics`).
fn metrics_on(a: &BenchArgs) -> Result<bool> {
    Ok(on_off_settings("--metrics", &a.metrics)?[0] == "on")
}

/// Whether this run's links use TLS (the first of `--tls`: on, or encrypt).
fn tls_on(a: &BenchArgs) -> Result<bool> {
    Ok(tls_settings(a)?[0] != "off")
}

/// Runs the modes once per setting of `flag` (`--tls`, `--metrics`; `set` applies one), each in
/// a session of its own started before any is measured, the sessions taking turns round by
/// round (`--repeat`), so that a noisy moment of this machine falls on both; for each setting
/// and mode, the round with the median p50.
fn measure_side_by_side(
    a: &BenchArgs,
    flag: &str,
    settings: &[&str],
    set: impl Fn(&mut BenchArgs, &str),
) -> Result<Vec<BenchResult>> {
    let mut sessions = Vec::new();
    for t in settings {
        let mut one = a.clone();
        set(&mut one, t);
        one.repeat = 1;
        sessions.push((Session::start(&one)?, one));
    }
    let mut rounds: Vec<Vec<Vec<BenchResult>>> = vec![Vec::new(); sessions.len()];
    for round in 0..a.repeat.max(1) {
        for (i, (s, one)) in sessions.iter().enumerate() {
            if !a.json {
                eprintln!("bench: {flag} {} round {} of {}", settings[i], round + 1, a.repeat);
            }
            rounds[i].push(s.measure(one)?);
        }
    }
    let mut out = Vec::new();
    for per_session in rounds {
        let modes = per_session.first().map_or(0, Vec::len);
        for m in 0..modes {
            out.push(median(per_session.iter().map(|r| r[m].clone()).collect()));
        }
    }
    Ok(out)
}

/// `--transport`, checked: tcp, shm, shm-rings, ucx and ucx-rings.
pub fn transports(a: &BenchArgs) -> Result<Vec<&'static str>> {
    a.transport
        .iter()
        .map(|t| match t.trim() {
            "tcp" => Ok("tcp"),
            "shm" => Ok("shm"),
            "shm-rings" => Ok("shm-rings"),
            "ucx" => Ok("ucx"),
            "ucx-rings" => Ok("ucx-rings"),
            other => Err(Error::Config(format!(
                "--transport {other}: choose tcp, shm, shm-rings, ucx or ucx-rings (comma-separated)"
            ))),
        })
        .collect()
}

/// The benchmark's transport as `--transport` names it (the first): tcp, shm, shm-rings, ucx or
/// ucx-rings.
fn transport_name(a: &BenchArgs) -> &'static str {
    match a.transport.first().map(|t| t.trim()) {
        Some("shm") => "shm",
        Some("shm-rings") => "shm-rings",
        Some("ucx") => "ucx",
        Some("ucx-rings") => "ucx-rings",
        _ => "tcp",
    }
}

/// How the benchmark's replicas are reached: tcp, shm or ucx.
fn transport(a: &BenchArgs) -> &'static str {
    match transport_name(a) {
        "shm-rings" => "shm",
        "ucx-rings" => "ucx",
        t => t,
    }
}

/// Runs the benchmark and returns its results.
pub fn measure(a: &BenchArgs) -> Result<Vec<BenchResult>> {
    Session::start(a)?.measure(a)
}

/// A benchmark's region, mirrors and echo server, started once for the modes of `--mode` and
/// measured against as often as wanted (`--matrix` varies size, threads and lanes between
/// measurements); its processes are stopped and its files removed when it is dropped.
pub struct Session {
    setup: Setup,
}

impl Session {
    /// Creates the region and starts what the modes of `a.mode` need.
    pub fn start(a: &BenchArgs) -> Result<Session> {
        let kinds = parse_kinds(a)?;
        Ok(Session { setup: setup(a, &kinds)? })
    }

    /// Measures the modes of `a.mode`, each of which needs what this session started.
    pub fn measure(&self, a: &BenchArgs) -> Result<Vec<BenchResult>> {
        let kinds = parse_kinds(a)?;
        for &k in &kinds {
            self.check_started(k)?;
        }
        measure_with(a, &self.setup, &kinds)
    }

    /// Opens the session's region as a primary in `mode` (lanes as for `a`), for benchmarks
    /// that drive the region themselves, such as Transact.
    pub fn open_primary(&self, a: &BenchArgs, mode: Mode) -> Result<Primary> {
        self.check_started(Kind::Mode(mode))?;
        open_settled(&primary_options(a, &self.setup, mode, &self.setup.region_path))
    }

    /// Opens an unreplicated primary on a region file of its own at `path` (made here, `size`
    /// bytes), for a benchmark that needs one beside the session's primary: a region has one
    /// primary at a time.
    pub fn open_local_primary(&self, a: &BenchArgs, path: &Path, size: u64) -> Result<Primary> {
        let _ = std::fs::remove_file(path);
        mojim::create_region(path, RegionId { uuid: random_uuid(), size })?;
        open_settled(&primary_options(a, &self.setup, Mode::Unreplicated, path))
    }

    /// The session's region file.
    pub fn region_path(&self) -> &Path {
        &self.setup.region_path
    }

    fn check_started(&self, k: Kind) -> Result<()> {
        let s = &self.setup;
        let started = match k {
            Kind::Mode(Mode::SyncDisk) if s.dir.is_some() => s.disk_mirror.is_some(),
            Kind::Mode(m) => !m.replicated() || s.mirror_addr.is_some(),
            Kind::TcpRtt => s.echo.is_some(),
            Kind::DiskFile => true,
            Kind::Scheme(..) => s.scheme(k).is_some(),
        };
        if started {
            Ok(())
        } else {
            Err(Error::Config(format!(
                "mode {} needs a mirror or echo server that this benchmark session did not start; \
                 start the session with that mode in --mode",
                k.name()
            )))
        }
    }
}

fn measure_with(a: &BenchArgs, s: &Setup, kinds: &[Kind]) -> Result<Vec<BenchResult>> {
    if a.threads == 0 || a.threads > 256 {
        return Err(Error::Config(format!("--threads {} must be between 1 and 256", a.threads)));
    }
    if a.size == 0 || a.size.saturating_mul(a.threads as u64) > a.region_size {
        return Err(Error::Config(format!(
            "--size {} times --threads {} must be more than 0 and fit in --region-size {}",
            a.size,
            a.threads,
            format_size(a.region_size)
        )));
    }
    if a.repeat == 0 {
        return Err(Error::Config("--repeat must be at least 1".into()));
    }
    let mut rounds: Vec<Vec<BenchResult>> = vec![Vec::new(); kinds.len()];
    for round in 0..a.repeat {
        for (i, &k) in kinds.iter().enumerate() {
            if !a.json {
                eprintln!(
                    "bench: {} ({} B, {} threads), round {} of {}...",
                    k.name(),
                    a.size,
                    a.threads,
                    round + 1,
                    a.repeat
                );
            }
            rounds[i].push(measure_one(a, s, k)?);
        }
    }
    if kinds.contains(&Kind::Mode(Mode::SyncDisk)) && s.disk_mirror.is_some() && !a.json {
        match disk_recovery(a, s) {
            Ok((micros, groups)) => eprintln!(
                "bench: sync-disk mirror killed (SIGKILL) and restarted: recovery applied {groups} groups \
                 from its logs to the disk data area in {:.1} ms",
                micros as f64 / 1000.0
            ),
            Err(e) => eprintln!("bench: sync-disk recovery not measured: {e}"),
        }
    }
    Ok(rounds.into_iter().map(median).collect())
}

/// The result whose p50 is the median of a mode's rounds (all its figures come from that round).
fn median(mut rs: Vec<BenchResult>) -> BenchResult {
    rs.sort_by(|x, y| x.p50_us.total_cmp(&y.p50_us));
    rs.swap_remove(rs.len() / 2)
}

/// The process that receives what kind `k` sends, if this benchmark started it.
fn receiver_pid(s: &Setup, k: Kind) -> Option<u32> {
    match k {
        Kind::TcpRtt => s.echo.as_ref().map(|e| e.pid()),
        Kind::Mode(Mode::SyncDisk) => s.disk_mirror.as_ref().map(|m| m.pid()),
        Kind::Mode(m) if m.replicated() => s.main.as_ref().map(|c| c.mirror.pid()),
        Kind::Scheme(..) => s.scheme(k).map(|c| c.mirror.pid()),
        _ => None,
    }
}

fn measure_one(a: &BenchArgs, s: &Setup, k: Kind) -> Result<BenchResult> {
    let receiver = receiver_pid(s, k);
    let cpu = |pid: Option<u32>| pid.and_then(|p| crate::cpu_time::process(p).ok());
    let (sender0, receiver0) = (cpu(Some(std::process::id())), cpu(receiver));
    let mut r = match k {
        Kind::TcpRtt => tcp_rtt(a, s, s.echo.as_ref().expect("echo started").addr())?,
        Kind::Mode(m) => sync_points(a, s, m, &s.region_path, k)?,
        Kind::Scheme(..) => sync_points(a, s, Mode::Sync, &s.region_path, k)?,
        Kind::DiskFile => {
            let p = a.disk_file.clone().expect("disk file given");
            // The file is the benchmark's own: so are any files left beside it by an earlier
            // run that was cut short (their region is gone, and they would be refused).
            mojim::remove_region(&p)?;
            mojim::create_region(&p, RegionId { uuid: random_uuid(), size: a.region_size })?;
            let r = sync_points(a, s, Mode::Unreplicated, &p, k);
            mojim::remove_region(&p)?;
            r?
        }
    };
    r.transport = transport_name(a).into();
    r.tls = s.tls.is_some();
    r.encrypt_placed = s.tls.as_ref().is_some_and(|t| t.encrypt_placed());
    r.metrics = metrics_on(a)?;
    let ops = (r.ops + a.warmup * a.threads as u64).max(1) as f64;
    let per_op = |before: Option<Duration>, after: Option<Duration>| match (before, after) {
        (Some(b), Some(e)) => Some(e.saturating_sub(b).as_secs_f64() * 1e6 / ops),
        _ => None,
    };
    r.cpu_us_sender = per_op(sender0, cpu(Some(std::process::id())));
    r.cpu_us_receiver = per_op(receiver0, cpu(receiver));
    if k == Kind::TcpRtt && transport(a) != "tcp" {
        r.mode = format!("{}-rtt", transport(a));
    }
    (r.backups, r.topology) = match k {
        Kind::Scheme(t, _) => (a.backups.max(1), t.name().into()),
        Kind::Mode(m) if m.replicated() && m != Mode::SyncDisk && a.backups > 0 => {
            (a.backups, a.topology.name().into())
        }
        _ => (0, "none".into()),
    };
    Ok(r)
}

/// Kills the disk mirror mid-stream, restarts it from its folders, and reads how long its
/// recovery took and how many groups it re-applied.
fn disk_recovery(a: &BenchArgs, s: &Setup) -> Result<(u64, usize)> {
    let mirror = s.disk_mirror.as_ref().expect("checked").addr().to_string();
    let mut opts = primary_options(a, s, Mode::SyncDisk, &s.region_path);
    opts.mirror = mirror;
    opts.lanes = 1;
    let p = open_settled(&opts)?;
    // Groups the mirror has in its log but has not yet made durable on disk: recovery's work.
    let page = vec![0x5Au8; 4096];
    for i in 0..64u64 {
        p.write(i * 4096, &page)?;
        p.msync(i * 4096, 4096)?;
    }
    // A crash, not a shutdown: SIGKILL. (The session's handle on the process reaps it later.)
    let killed = s.disk_mirror.as_ref().expect("checked").pid();
    let pid = rustix::process::Pid::from_raw(killed as i32).ok_or_else(|| Error::Config("no pid".into()))?;
    rustix::process::kill_process(pid, rustix::process::Signal::KILL)
        .map_err(|e| Error::io("kill the disk mirror")(e.into()))?;
    drop(p);
    // Gone once it is a zombie (its parent, this process, reaps it later).
    let gone = || {
        std::fs::read_to_string(format!("/proc/{killed}/stat"))
            .map_or(true, |st| st.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
    };
    while !gone() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let args: Vec<&str> = s.disk_args.iter().map(String::as_str).collect();
    let restarted = ChildNode::spawn(&exe()?, &args)?;
    let mut admin = mojim_node::admin::AdminClient::connect_tls(
        restarted.addr(),
        &s.secret,
        s.tls.clone(),
        Duration::from_secs(5),
    )?;
    let st = admin.status()?;
    Ok((st.recovery.micros, st.recovery.groups_applied))
}

pub(crate) fn lanes(a: &BenchArgs) -> u16 {
    a.lanes.unwrap_or(a.threads.min(64) as u16).max(1)
}

/// Runs `op` on every thread until the op budget or the duration runs out.
fn drive<S: Send>(
    a: &BenchArgs,
    kind: Kind,
    states: Vec<S>,
    op: impl Fn(&mut S, &mut XorShift) -> Result<()> + Sync,
) -> Result<BenchResult> {
    let per_thread = a.ops.div_ceil(a.threads as u64).max(1);
    let deadline = a.duration.map(Duration::from_secs_f64);
    let start_gate = std::sync::Barrier::new(a.threads);
    let t0 = std::sync::Mutex::new(None::<Instant>);
    let hists: Vec<Result<(Histogram<u64>, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .into_iter()
            .enumerate()
            .map(|(i, mut st)| {
                let op = &op;
                let gate = &start_gate;
                let t0 = &t0;
                scope.spawn(move || -> Result<(Histogram<u64>, u64)> {
                    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ ((i as u64 + 1) * 0x1234_5678_9ABC_DEF1));
                    for _ in 0..a.warmup {
                        op(&mut st, &mut rng)?;
                    }
                    let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
                    gate.wait();
                    let start =
                        *t0.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert_with(Instant::now);
                    let mut n = 0u64;
                    loop {
                        let t = Instant::now();
                        op(&mut st, &mut rng)?;
                        h.record(t.elapsed().as_nanos() as u64).ok();
                        n += 1;
                        match deadline {
                            Some(d) => {
                                if n.is_multiple_of(64) && start.elapsed() >= d {
                                    break;
                                }
                            }
                            None => {
                                if n >= per_thread {
                                    break;
                                }
                            }
                        }
                    }
                    Ok((h, n))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::Config("benchmark thread panicked".into()))))
            .collect()
    });
    let wall = t0.lock().unwrap_or_else(|p| p.into_inner()).map(|t| t.elapsed()).unwrap_or_default();
    let mut all = Histogram::<u64>::new(3).expect("valid");
    let mut ops = 0;
    for r in hists {
        let (h, n) = r?;
        all.add(&h).ok();
        ops += n;
    }
    let secs = wall.as_secs_f64().max(1e-9);
    Ok(BenchResult {
        mode: kind.name().into(),
        size: a.size,
        threads: a.threads,
        lanes: if matches!(kind, Kind::Mode(m) if m.replicated()) || matches!(kind, Kind::Scheme(..)) {
            lanes(a)
        } else {
            0
        },
        ops,
        mean_us: all.mean() / 1000.0,
        p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
        ops_per_s: ops as f64 / secs,
        mb_per_s: ops as f64 * a.size as f64 / secs / 1e6,
        backups: 0,
        topology: "none".into(),
        transport: "tcp".into(),
        tls: false,
        encrypt_placed: false,
        metrics: false,
        cpu_us_sender: None,
        cpu_us_receiver: None,
    })
}

/// Opens a primary and waits until any resynchronisation its session began has finished, so
/// that a measurement never overlaps a copy (a region written unreplicated is copied whole to a
/// new mirror, for example).
fn open_settled(opts: &PrimaryOptions) -> Result<Primary> {
    let p = Primary::open(opts)?;
    if let Some(r) = p.wait_resync(Duration::from_secs(3600)) {
        if !r.done {
            return Err(Error::MirrorLost {
                reason: format!("the resynchronisation before the run failed: {r:?}"),
            });
        }
    }
    Ok(p)
}

fn primary_options(a: &BenchArgs, s: &Setup, mode: Mode, region: &Path) -> PrimaryOptions {
    PrimaryOptions {
        metrics_listen: None,
        region_path: region.to_path_buf(),
        mode,
        mirror: s.mirror_for(mode),
        lanes: lanes(a),
        secret: s.secret.clone(),
        tls: s.tls.clone(),
        limits: s.limits.clone(),
        async_window: 256,
        connect_timeout: Duration::from_secs(5),
        busy_poll: Duration::from_micros(a.busy_poll_us),
        place_records: !transport_name(a).ends_with("-rings"),
        broadcast: Vec::new(),
        failure: Default::default(),
        coordinator: None,
        node: String::new(),
        nvmm: s.nvmm,
    }
}

fn sync_points(a: &BenchArgs, s: &Setup, mode: Mode, region: &Path, kind: Kind) -> Result<BenchResult> {
    let mut opts = primary_options(a, s, mode, region);
    let cluster = match kind {
        Kind::Scheme(..) => s.scheme(kind),
        Kind::Mode(m) if m.replicated() && m != Mode::SyncDisk => s.main.as_ref(),
        _ => None,
    };
    if let Some(c) = cluster {
        opts.mirror = c.mirror.addr().to_string();
        opts.broadcast = c.broadcast.clone();
    }
    if metrics_on(a)? {
        opts.metrics_listen = Some("127.0.0.1:0".into());
    }
    let p = open_settled(&opts)?;
    let scraper = p.metrics_addr().map(crate::bench_scrape::Scraper::start).transpose()?;
    let part = p.size() / a.threads as u64;
    let slots = (part / a.size).max(1);
    let states: Vec<(u64, u64)> = (0..a.threads as u64).map(|t| (t * part, 0u64)).collect();
    let r = drive(a, kind, states, |(base, counter), rng| {
        let off = *base + (rng.next() % slots) * a.size;
        *counter += 1;
        let stamp = counter.to_le_bytes();
        p.write(off, &stamp[..stamp.len().min(a.size as usize)])?;
        p.msync(off, a.size)
    })?;
    if let Some(scraper) = scraper {
        // A scrape that failed fails the run: the setting would not be what it says.
        scraper.finish()?;
    }
    p.close()?;
    Ok(r)
}

fn tcp_rtt(a: &BenchArgs, s: &Setup, addr: &str) -> Result<BenchResult> {
    let mut states = Vec::new();
    for _ in 0..a.threads {
        let mut c = AnyTransport::new(s.tls.clone())
            .connect(addr, Duration::from_secs(5))
            .map_err(Error::io(format!("connect to {addr}")))?;
        c.set_busy_poll(Duration::from_micros(a.busy_poll_us));
        c.write_all(&a.size.to_le_bytes()).map_err(Error::io("send size"))?;
        states.push((c, vec![0x5Au8; a.size as usize], [0u8; 64]));
    }
    drive(a, Kind::TcpRtt, states, |(c, buf, reply), _| {
        c.write_all(buf).map_err(Error::io("ping"))?;
        c.read_exact(reply).map_err(Error::io("pong"))
    })
}

/// The other end of `tcp-rtt`: per connection, reads a size, then for each message of that
/// size answers with 64 bytes (the size of an acknowledgement). Over TCP, UCX (`ucx:` address) or shared memory
/// when `listen` is a path; over mutual TLS when `config` has `[security] tls = true`.
pub fn echo_server(listen: &str, busy_poll_us: u64, config: Option<&Path>) -> Result<()> {
    let tls = match config {
        Some(c) => Config::load(c)?.tls()?,
        None => None,
    };
    let t = AnyTransport::new(tls);
    let l = t.listen(listen).map_err(Error::io(format!("listen on {listen}")))?;
    println!("serving on {}", t.local_addr(&l).map_err(Error::io("local address"))?);
    let _ = std::io::stdout().flush();
    loop {
        let Ok(mut c) = t.accept(&l) else { continue };
        std::thread::spawn(move || -> std::io::Result<()> {
            c.set_busy_poll(Duration::from_micros(busy_poll_us));
            let mut sz = [0u8; 8];
            c.read_exact(&mut sz)?;
            let size = u64::from_le_bytes(sz).min(64 << 20) as usize;
            let mut buf = vec![0u8; size];
            let reply = [0u8; 64];
            loop {
                c.read_exact(&mut buf)?;
                c.write_all(&reply)?;
            }
        });
    }
}

fn cpu_cell(us: Option<f64>) -> String {
    us.map_or("-".into(), |u| format!("{u:.1}"))
}

/// Prints results as a table with side-by-side ratios, or as JSON lines.
pub fn print(results: &[BenchResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<18} {:<11} {:>7} {:>7} {:>5} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}",
        "mode",
        "transport",
        "size",
        "threads",
        "lanes",
        "ops",
        "mean_us",
        "p50_us",
        "p99_us",
        "ops/s",
        "MB/s"
    );
    for r in results {
        let mut transport = if r.tls { format!("{}+tls", r.transport) } else { r.transport.clone() };
        if r.encrypt_placed {
            transport.push_str("+enc");
        }
        if r.metrics {
            transport.push_str("+metrics");
        }
        println!(
            "{:<18} {:<11} {:>7} {:>7} {:>5} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>11.0} {:>9.1} {:>15}",
            r.mode,
            transport,
            r.size,
            r.threads,
            r.lanes,
            r.ops,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.ops_per_s,
            r.mb_per_s,
            format!("{}/{}", cpu_cell(r.cpu_us_sender), cpu_cell(r.cpu_us_receiver))
        );
    }
    let on =
        |m: &str, t: &str| results.iter().find(|r| r.mode == m && r.transport == t && !r.tls && !r.metrics);
    let with_metrics = |m: &str| results.iter().find(|r| r.mode == m && r.transport == "tcp" && r.metrics);
    for m in ["sync", "tcp-rtt"] {
        if let (Some(s), Some(p)) = (with_metrics(m), on(m, "tcp")) {
            println!(
                "{m} with metrics scraped / without: p50 {:.3}, ops/s {:.3} ({} threads)",
                s.p50_us / p.p50_us,
                s.ops_per_s / p.ops_per_s,
                s.threads
            );
        }
    }
    let with_tls = |m: &str, t: &str, enc: bool| {
        results.iter().find(|r| r.mode == m && r.transport == t && r.tls && r.encrypt_placed == enc)
    };
    for (m, t) in [("sync", "tcp"), ("tcp-rtt", "tcp"), ("sync", "shm"), ("sync", "ucx")] {
        let over = if t == "tcp" { String::new() } else { format!(" over {t}") };
        if let (Some(s), Some(p)) = (with_tls(m, t, false), on(m, t)) {
            println!(
                "{m}{over} with TLS / without: p50 {:.2}, ops/s {:.2} ({} threads)",
                s.p50_us / p.p50_us,
                s.ops_per_s / p.ops_per_s,
                s.threads
            );
        }
        for (than, base) in [("without TLS", on(m, t)), ("TLS alone", with_tls(m, t, false))] {
            if let (Some(s), Some(p)) = (with_tls(m, t, true), base) {
                println!(
                    "{m}{over} with TLS and encrypt_placed / {than}: p50 {:.2}, ops/s {:.2} ({} threads)",
                    s.p50_us / p.p50_us,
                    s.ops_per_s / p.ops_per_s,
                    s.threads
                );
            }
        }
    }
    if let (Some(s), Some(t)) = (on("sync", "tcp"), on("tcp-rtt", "tcp")) {
        println!("sync p50 / tcp-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("shm-rtt", "shm")) {
        println!("sync p50 over shm / shm-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("ucx-rtt", "ucx")) {
        println!("sync p50 over ucx / ucx-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("sync", "shm")) {
        println!("sync p50 over ucx / over shm = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("sync", "tcp")) {
        println!("sync p50 over shm / over tcp = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("sync", "shm-rings")) {
        println!("sync p50 placed / through the rings = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("sync", "ucx-rings")) {
        println!("sync p50 over ucx placed / through the rings = {:.2}", s.p50_us / t.p50_us);
    }
    let find = |m: &str| results.iter().find(|r| r.mode == m);
    if let (Some(s), Some(d)) = (find("sync"), find("unreplicated-disk")) {
        println!("sync p50 / unreplicated-disk p50 = {:.2}", s.p50_us / d.p50_us);
    }
}
