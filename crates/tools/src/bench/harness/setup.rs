//! The files and processes a benchmark session starts: its region, its local mirrors and their
//! backups, the clusters of the schemes, the disk mirror and the echo server.

use super::kind::Kind;
use super::settings::{exe, tls_on, transport};
use crate::bench::BenchArgs;
use crate::child::ChildNode;
use crate::cluster::{LocalCluster, Shape};
use mojim::config::{random_uuid, template, Config, ConfigFile, Limits, Mode, NvmmModel, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim_transport::TlsContext;
use std::path::PathBuf;
use std::sync::Arc;

/// Files and processes of one benchmark run, removed when dropped.
pub(crate) struct Setup {
    pub(crate) dir: Option<PathBuf>,
    pub(crate) region_path: PathBuf,
    pub(crate) mirror_addr: Option<String>,
    pub(crate) secret: Secret,
    pub(crate) limits: Limits,
    /// The local mirror (and its backups) of the plain modes.
    pub(crate) main: Option<LocalCluster>,
    /// The clusters of the schemes.
    pub(crate) schemes: Vec<(Kind, LocalCluster)>,
    /// A second mirror whose data area is on disk, for `sync-disk`.
    pub(crate) disk_mirror: Option<ChildNode>,
    /// How the disk mirror was started, to restart it.
    pub(crate) disk_args: Vec<String>,
    pub(crate) disk_dir: Option<PathBuf>,
    pub(crate) echo: Option<ChildNode>,
    /// The primary's and pinger's TLS settings (`--tls on`; role application).
    pub(crate) tls: Option<Arc<TlsContext>>,
    /// The benchmark's configuration, for the echo server's TLS settings.
    pub(crate) echo_config: Option<String>,
    /// The emulated NVMM under the primary's region (`--nvmm-*`; the local mirrors have it too).
    pub(crate) nvmm: NvmmModel,
}

impl Setup {
    /// A setup with its region and nothing started yet.
    pub(crate) fn new(dir: Option<PathBuf>, region_path: PathBuf, secret: Secret, limits: Limits) -> Setup {
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

    pub(crate) fn mirror_for(&self, mode: Mode) -> String {
        match (mode, &self.disk_mirror) {
            (Mode::SyncDisk, Some(m)) => m.addr().to_string(),
            _ => self.mirror_addr.clone().unwrap_or_default(),
        }
    }

    pub(crate) fn scheme(&self, k: Kind) -> Option<&LocalCluster> {
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

pub(crate) fn setup(a: &BenchArgs, kinds: &[Kind]) -> Result<Setup> {
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
        if super::settings::tls_settings(a)?[0] == "encrypt" {
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
pub(crate) fn with_mirror_nvmm(base: String, a: &BenchArgs) -> Result<String> {
    if a.nvmm_model()?.is_off() {
        return Ok(base);
    }
    let mut f: ConfigFile =
        toml::from_str(&base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    f.mirror.nvmm_barrier_ns = a.nvmm_barrier_ns;
    f.mirror.nvmm_write_rate = a.nvmm_write_rate.clone().unwrap_or_default();
    toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))
}
