//! `mojim kv`'s settings: the `[kv]` section, checked, with the region's and the primary's.

use crate::error::KvError;
use crate::resp::Limits;
use mojim::{Config, PrimaryOptions};

/// Everything `mojim kv` needs, read once at start-up.
#[derive(Clone, Debug)]
pub struct KvOptions {
    /// How to open the region and reach its mirror.
    pub primary: PrimaryOptions,
    /// The address to listen on.
    pub listen: String,
    /// Request limits.
    pub limits: Limits,
    /// Connections served at once.
    pub max_clients: usize,
    /// Most bytes one batch may store: half a lane's log, so that its group always fits.
    pub max_group_bytes: u64,
    /// The address Sentinel answers give for this server ("" : the one listened on).
    pub announce: String,
    /// The Sentinel master name.
    pub sentinel_name: String,
    /// Every node's `mojim kv` address.
    pub sentinels: Vec<String>,
    /// A turn of reads alone waits for a round trip to the mirror before answering.
    pub read_barrier: bool,
}

fn size(key: &str, v: &str, min: u64, max: u64) -> Result<usize, KvError> {
    let n = mojim::size::parse_size(v).map_err(|e| KvError::Config(format!("[kv] {key}: {e}")))?;
    if n < min || n > max {
        return Err(KvError::Config(format!(
            "[kv] {key} = {v:?} is out of range: it must be from {min} to {max} bytes"
        )));
    }
    Ok(n as usize)
}

impl KvOptions {
    /// Reads `cfg`'s `[kv]` section (and what the primary needs); `listen` overrides
    /// `[kv] listen`.
    pub fn from_config(cfg: &Config, insecure: bool, listen: Option<&str>) -> Result<KvOptions, KvError> {
        let primary = PrimaryOptions::from_config(cfg, insecure)?;
        let k = &cfg.file.kv;
        let max_bulk = size("max_bulk", &k.max_bulk, 1, 1 << 30)?;
        let max_inline = size("max_inline", &k.max_inline, 64, 1 << 30)?;
        if k.max_args == 0 || k.max_args > 1 << 24 {
            return Err(KvError::Config(format!(
                "[kv] max_args = {} is out of range: it must be from 1 to {}",
                k.max_args,
                1u64 << 24
            )));
        }
        if k.max_clients == 0 || k.max_clients > 1 << 20 {
            return Err(KvError::Config(format!(
                "[kv] max_clients = {} is out of range: it must be from 1 to {}",
                k.max_clients,
                1u64 << 20
            )));
        }
        let log = cfg.log_capacity()?;
        let max_group_bytes = log / 2;
        if (max_bulk as u64) * 2 + (1 << 20) > max_group_bytes {
            return Err(KvError::Config(format!(
                "[kv] max_bulk = {:?} does not fit a group: one SET of that size needs about twice it, and a \
                 group may carry half of [mirror] log_capacity ({}); lower max_bulk or raise log_capacity",
                k.max_bulk, cfg.file.mirror.log_capacity
            )));
        }
        let listen = listen.unwrap_or(&k.listen).to_string();
        for s in k.sentinels.iter().chain(std::iter::once(&k.announce).filter(|a| !a.is_empty())) {
            if split_host_port(s).is_none() {
                return Err(KvError::Config(format!(
                    "[kv] sentinels/announce: {s:?} is not host:port (e.g. \"10.0.0.2:6379\")"
                )));
            }
        }
        Ok(KvOptions {
            primary,
            listen,
            limits: Limits { max_bulk, max_args: k.max_args as usize, max_inline },
            max_clients: k.max_clients as usize,
            max_group_bytes,
            announce: k.announce.clone(),
            sentinel_name: k.sentinel_name.clone(),
            sentinels: k.sentinels.clone(),
            read_barrier: k.read_barrier,
        })
    }
}

/// `host:port` split at the last colon, the port a number.
pub fn split_host_port(s: &str) -> Option<(String, u16)> {
    let (h, p) = s.rsplit_once(':')?;
    let port = p.parse().ok()?;
    (!h.is_empty()).then(|| (h.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}
