//! The nodes of a round: their configuration, the `mojim serve` children, and their status polled.

use super::{failed, SECRET, STEP};
use crate::child::ChildNode;
use mojim::config::{template, ConfigFile, RegionId, Secret};
use mojim::error::{Error, Result};
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes the configuration every node and worker of a round uses: a new region of `size`
/// bytes, one lane, and the etcd coordinator at `etcd` if given (its lease settings are the
/// defaults).
pub(super) fn write_config(dir: &Path, size: u64, etcd: Option<&str>) -> Result<PathBuf> {
    let id = RegionId { uuid: mojim::config::random_uuid(), size };
    let base = template(&id.uuid, id.size, "mojim-bench-secret", "127.0.0.1:0");
    let mut f: ConfigFile =
        toml::from_str(&base).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    f.primary.lanes = 1;
    if let Some(endpoint) = etcd {
        f.cluster.coordinator = "etcd".into();
        f.cluster.etcd_endpoints = vec![endpoint.to_string()];
    }
    let text = toml::to_string(&f).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
    let p = dir.join("mojim.toml");
    mojim::config::write_private(&p, &text).map_err(Error::io(format!("write {}", p.display())))?;
    Ok(p)
}

/// Starts `mojim serve` as node `node` on a free loopback port with its data under `dir`.
pub(super) fn serve(
    exe: &Path,
    cfg: &Path,
    dir: &Path,
    node: &str,
    busy_poll_us: u64,
    backup: Option<&str>,
) -> Result<ChildNode> {
    let cfg = cfg.to_string_lossy();
    let dir = dir.to_string_lossy();
    let poll = busy_poll_us.to_string();
    let mut args = vec!["serve", "--config", &cfg, "--listen", "127.0.0.1:0", "--dir", &dir, "--node", node];
    args.extend(["--busy-poll-us", &poll]);
    if let Some(b) = backup {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(exe, &args)
}

pub(super) fn admin(addr: &str) -> Result<AdminClient> {
    AdminClient::connect(addr, &Secret(SECRET.to_vec()), Duration::from_secs(5))
}

/// Polls a node's status until `ready` holds, at most [`STEP`].
pub(super) fn wait_status(
    addr: &str,
    stage: &str,
    ready: impl Fn(&MirrorStatus) -> bool,
) -> Result<MirrorStatus> {
    let mut c = admin(addr)?;
    let t0 = Instant::now();
    loop {
        let st = c.status()?;
        if ready(&st) {
            return Ok(st);
        }
        if t0.elapsed() > STEP {
            return Err(failed(stage, format!("waited {} s for {addr}; its status: {st:?}", STEP.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
