//! The single-member etcd of the `etcd` coordinator's rounds.

use super::failed;
use mojim::error::{Error, Result};
use mojim_transport::ports::free_loopback_ports;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's `etcd-server` puts the binary; `etcd` on `PATH` is the fallback.
pub(super) const ETCD: &str = "/usr/bin/etcd";

pub(super) fn etcd_binary() -> Option<PathBuf> {
    let debian = PathBuf::from(ETCD);
    if debian.is_file() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("etcd")).find(|p| p.is_file())
}

/// A single-member etcd on loopback with its data in a folder of the round; killed on drop.
pub(super) struct Etcd {
    pub(super) child: Child,
    pub(super) endpoint: String,
    pub(super) log: PathBuf,
}

impl Etcd {
    pub(super) fn start(dir: &Path) -> Result<Etcd> {
        let binary =
            etcd_binary().ok_or_else(|| failed("etcd", format!("no etcd binary at {ETCD} or on PATH")))?;
        std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        let [client, peer] = free_loopback_ports().map_err(Error::io("find a free port"))?;
        let log = dir.join("etcd.log");
        let out = std::fs::File::create(&log).map_err(Error::io(format!("create {}", log.display())))?;
        let err = out.try_clone().map_err(Error::io("duplicate the log's handle"))?;
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(&binary);
        // etcd refuses ETCD_* variables that shadow its flags.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        cmd.arg("--name=bench")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=bench={peer_url}"))
            .arg("--initial-cluster-state=new")
            // A single member elects itself after one election timeout: keep start-up short.
            .args(["--heartbeat-interval=10", "--election-timeout=100", "--log-level=warn"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = cmd.spawn().map_err(Error::io(format!("start {}", binary.display())))?;
        let mut e = Etcd { child, endpoint: format!("127.0.0.1:{client}"), log };
        let probe = mojim_etcd::Client::new(std::slice::from_ref(&e.endpoint), Duration::from_millis(500))
            .map_err(|x| failed("etcd", x.to_string()))?;
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = e.child.try_wait() {
                return Err(failed(
                    "etcd",
                    format!("etcd exited at start ({status}); see {}", e.log.display()),
                ));
            }
            match probe.get("mojim-bench-probe") {
                Ok(_) => return Ok(e),
                Err(x) if t0.elapsed() > Duration::from_secs(10) => {
                    let tail = std::fs::read_to_string(&e.log).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(10).collect();
                    return Err(failed(
                        "etcd",
                        format!("etcd did not answer in 10 s ({x}); its log ends: {tail:?}"),
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
