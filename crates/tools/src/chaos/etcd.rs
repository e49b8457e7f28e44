//! The etcd of a chaos run under `--coordinator etcd`: one real etcd (Debian's `etcd-server`)
//! serves every trial of the run, each trial under a key prefix of its own.
//!
//! With network namespaces it runs in a namespace of its own on the nodes' bridge (site
//! `nodes`, after the nodes'), where the nodes and the harness reach it and a partition can cut
//! a node off from it; on loopback it listens on 127.0.0.1. Its raft tick is short (10 ms
//! heartbeats, 100 ms elections) so that etcd grants the 1 s leases the trials use.

use super::cluster::Net;
use mojim::config::EtcdSettings;
use mojim_etcd::Client;
use mojim_transport::ports::free_loopback_ports;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `etcd-server` puts the binary; `etcd` on `PATH` is the fallback.
const DEBIAN_ETCD: &str = "/usr/bin/etcd";
/// How long etcd has to start answering.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Ports inside the etcd's own namespace.
const NETNS_CLIENT_PORT: u16 = 2379;
const NETNS_PEER_PORT: u16 = 2380;

/// The primary's lease in the trials: etcd counts whole seconds, and a take-over follows the
/// expiry of a dead primary's lease by at most the mirror's poll (half the renewal interval)
/// and etcd's expiry sweep (500 ms).
pub const LEASE_TTL: Duration = Duration::from_millis(1000);
pub const LEASE_RENEW: Duration = Duration::from_millis(250);
pub const LEASE_MARGIN: Duration = Duration::from_millis(250);

/// A running etcd, killed on drop (its folder removed unless kept).
pub(crate) struct Etcd {
    child: Child,
    dir: PathBuf,
    endpoint: String,
    /// Keep the folder (etcd's log) when the run failed.
    pub keep: bool,
}

impl Etcd {
    /// Starts etcd at site `site` of `net` with its data and log in `dir`, and waits until it
    /// answers.
    pub fn start(net: &Net, site: usize, dir: &Path) -> Result<Etcd, String> {
        let binary = binary().ok_or_else(|| {
            format!("--coordinator etcd needs etcd: none at {DEBIAN_ETCD} or on PATH (install the Debian package etcd-server)")
        })?;
        let mut last = String::new();
        for attempt in 0..3 {
            match Self::start_once(net, site, &binary, &dir.join(format!("etcd-{attempt}"))) {
                Ok(e) => return Ok(e),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_once(net: &Net, site: usize, binary: &Path, dir: &Path) -> Result<Etcd, String> {
        let host = net.host(site);
        let (client_port, peer_port) = match net {
            Net::Netns(_) => (NETNS_CLIENT_PORT, NETNS_PEER_PORT),
            // Free a moment ago (a start is retried if one was taken since).
            Net::Loopback { .. } => {
                let [client, peer] =
                    free_loopback_ports().map_err(|e| format!("find two free loopback ports: {e}"))?;
                (client, peer)
            }
        };
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let log_path = dir.join("etcd.log");
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("create {}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| format!("duplicate a file handle: {e}"))?;
        let client_url = format!("http://{host}:{client_port}");
        let peer_url = format!("http://{host}:{peer_port}");
        let mut cmd = net.command(site, binary);
        // etcd refuses ETCD_* variables that shadow the flags given here.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg("--name=chaos")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=chaos={peer_url}"))
            .arg("--initial-cluster-state=new")
            .arg("--heartbeat-interval=10")
            .arg("--election-timeout=100")
            .arg("--logger=zap")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = cmd.spawn().map_err(|e| format!("start {}: {e}", binary.display()))?;
        let endpoint = format!("{host}:{client_port}");
        let mut etcd = Etcd { child, dir: dir.to_path_buf(), endpoint, keep: false };
        if let Err(e) = etcd.wait_ready() {
            // Its log is what the error points to.
            etcd.keep = true;
            return Err(e);
        }
        Ok(etcd)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let client = Client::new(std::slice::from_ref(&self.endpoint), Duration::from_millis(500))
            .map_err(|e| format!("etcd client for {}: {e}", self.endpoint))?;
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("etcd exited at start ({status}); see {}", self.log().display()));
            }
            match client.get("mojim-chaos-probe") {
                Ok(_) => return Ok(()),
                Err(e) if t0.elapsed() > START_TIMEOUT => {
                    return Err(format!(
                        "etcd at {} did not answer within {START_TIMEOUT:?} ({e}); see {}",
                        self.endpoint,
                        self.log().display()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    /// A trial's coordinator settings: its own key prefix on this etcd, and the trials' lease.
    pub fn settings(&self, prefix: String) -> EtcdSettings {
        EtcdSettings {
            endpoints: vec![self.endpoint.clone()],
            tls: None,
            prefix,
            lease_ttl: LEASE_TTL,
            lease_renew: LEASE_RENEW,
            lease_margin: LEASE_MARGIN,
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The etcd binary: Debian's, else the first `etcd` on `PATH`.
fn binary() -> Option<PathBuf> {
    let debian = PathBuf::from(DEBIAN_ETCD);
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("etcd")).find(|p| p.is_file())
}
