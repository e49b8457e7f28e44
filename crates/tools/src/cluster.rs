//! Local clusters for benchmarks: a mirror as a child process, with backups behind it (two-tier
//! or chain), or beside it (broadcast), all on loopback.

use crate::child::ChildNode;
use mojim::config::ConfigFile;
use mojim::error::{Error, Result};
use std::path::Path;

/// How the replicas of a benchmark cluster are arranged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Primary → mirror, acknowledged from its log; backups fed in the background (Mojim).
    TwoTier,
    /// Primary → mirror → backups, acknowledged once every backup has the group (E-chain).
    Chain,
    /// The primary sends to the mirror and to every other replica and waits for all
    /// (E-broadcast).
    Broadcast,
}

impl Topology {
    pub fn name(self) -> &'static str {
        match self {
            Topology::TwoTier => "two-tier",
            Topology::Chain => "chain",
            Topology::Broadcast => "broadcast",
        }
    }
}

/// What to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub topology: Topology,
    /// Replicas besides the mirror: backups (two-tier, chain) or more mirrors (broadcast).
    pub backups: usize,
    /// Cap on each backup link, e.g. `100MiB/s`.
    pub rate_limit: Option<String>,
    /// The mirror's `secondary_tier_thresh`, e.g. `40MiB`.
    pub secondary_tier_thresh: Option<String>,
    pub checkpoint_thresh: Option<usize>,
    pub busy_poll_us: u64,
    /// How replicas connect: "tcp" (loopback), "shm" (a socket path per replica under the
    /// cluster's folder) or "ucx" (a UCX listener on loopback).
    pub transport: &'static str,
}

/// Where a replica named `name` of a benchmark cluster in `dir` listens over `transport`.
pub fn listen_addr(dir: &Path, name: &str, transport: &str) -> String {
    match transport {
        "shm" => dir.join(format!("{name}.sock")).to_str().unwrap_or_default().to_string(),
        "ucx" => "ucx:127.0.0.1:0".into(),
        _ => "127.0.0.1:0".into(),
    }
}

/// A running cluster; its processes are killed when it is dropped.
pub struct LocalCluster {
    pub mirror: ChildNode,
    pub backups: Vec<ChildNode>,
    /// Addresses the primary broadcasts to besides the mirror.
    pub broadcast: Vec<String>,
}

fn serve_args<'a>(
    cfg: &'a str,
    listen: &'a str,
    dir: &'a str,
    poll: &'a str,
    thresh: &'a Option<String>,
) -> Vec<&'a str> {
    let mut v = vec!["serve", "--config", cfg, "--listen", listen, "--dir", dir, "--busy-poll-us", poll];
    if let Some(t) = thresh {
        v.extend(["--checkpoint-thresh", t.as_str()]);
    }
    v
}

impl LocalCluster {
    /// Starts the replicas of `shape` for the region configured in `base` (`mojim init`'s
    /// template), with files under `dir` named after `name`.
    pub fn start(exe: &Path, base: &str, dir: &Path, name: &str, shape: &Shape) -> Result<LocalCluster> {
        let path = |p: &Path| p.to_str().unwrap_or_default().to_string();
        let poll = shape.busy_poll_us.to_string();
        let thresh = shape.checkpoint_thresh.map(|t| t.to_string());
        let base_cfg = dir.join(format!("{name}.toml"));
        mojim::config::write_private(&base_cfg, base).map_err(Error::io("write config"))?;
        let base_cfg = path(&base_cfg);
        let mut backups = Vec::new();
        for i in 0..shape.backups {
            let d = path(&dir.join(format!("{name}-backup-{i}")));
            let listen = listen_addr(dir, &format!("{name}-backup-{i}"), shape.transport);
            backups.push(ChildNode::spawn(exe, &serve_args(&base_cfg, &listen, &d, &poll, &thresh))?);
        }
        let addrs: Vec<String> = backups.iter().map(|b| b.addr().to_string()).collect();
        let (mirror_cfg, broadcast) = match shape.topology {
            Topology::Broadcast => (base_cfg.clone(), addrs),
            Topology::TwoTier | Topology::Chain => {
                let mut f: ConfigFile =
                    toml::from_str(base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
                f.mirror.backups = addrs;
                f.mirror.chain = shape.topology == Topology::Chain;
                if let Some(r) = &shape.rate_limit {
                    f.mirror.secondary_rate_limit = r.clone();
                }
                if let Some(t) = &shape.secondary_tier_thresh {
                    f.mirror.secondary_tier_thresh = t.clone();
                }
                let p = dir.join(format!("{name}-mirror.toml"));
                let text =
                    toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
                mojim::config::write_private(&p, &text).map_err(Error::io("write config"))?;
                (path(&p), Vec::new())
            }
        };
        let d = path(&dir.join(format!("{name}-mirror")));
        let listen = listen_addr(dir, &format!("{name}-mirror"), shape.transport);
        let mirror = ChildNode::spawn(exe, &serve_args(&mirror_cfg, &listen, &d, &poll, &thresh))?;
        Ok(LocalCluster { mirror, backups, broadcast })
    }
}
