//! The nodes of a round: `mojim serve` children that can be killed and restarted on the same
//! address and folder, and their status polled.

use super::{failed, POLL, SECRET};
use crate::child::ChildNode;
use mojim::config::Secret;
use mojim::error::{Error, Result};
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use mojim_transport::ports::free_loopback_port;
use mojim_transport::TlsContext;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A free loopback address (a node started on it right after keeps it across restarts).
pub(super) fn free_addr() -> Result<String> {
    Ok(format!("127.0.0.1:{}", free_loopback_port().map_err(Error::io("find a free port"))?))
}

/// A `mojim serve` child that can be killed and restarted on the same address and folder.
pub(super) struct Node {
    pub(super) exe: PathBuf,
    pub(super) args: Vec<String>,
    pub(super) addr: String,
    pub(super) child: Option<ChildNode>,
    /// The operator's TLS settings, for a node with `[security] tls` on.
    pub(super) operator_tls: Option<Arc<TlsContext>>,
}

impl Node {
    pub(super) fn start(exe: &Path, cfg: &Path, dir: &Path, busy_poll_us: u64) -> Result<Node> {
        let addr = free_addr()?;
        let args = vec![
            "serve".to_string(),
            "--config".into(),
            cfg.to_string_lossy().into_owned(),
            "--listen".into(),
            addr.clone(),
            "--dir".into(),
            dir.to_string_lossy().into_owned(),
            "--busy-poll-us".into(),
            busy_poll_us.to_string(),
        ];
        let mut n = Node { exe: exe.to_path_buf(), args, addr, child: None, operator_tls: None };
        n.restart()?;
        Ok(n)
    }

    /// A crash, not a shutdown: SIGKILL, then reaped.
    pub(super) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill();
        }
    }

    pub(super) fn restart(&mut self) -> Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let child = ChildNode::spawn(&self.exe, &args)?;
        if child.addr() != self.addr {
            return Err(failed(
                "restart",
                format!("node came up on {} instead of {}", child.addr(), self.addr),
            ));
        }
        self.child = Some(child);
        Ok(())
    }

    pub(super) fn admin(&self) -> Result<AdminClient> {
        let secret = Secret(SECRET.to_vec());
        AdminClient::connect_tls(&self.addr, &secret, self.operator_tls.clone(), Duration::from_secs(5))
    }
}

/// Polls a node's status until `ready` holds, at most `timeout`.
pub(super) fn wait_status(
    admin: &mut AdminClient,
    stage: &str,
    timeout: Duration,
    ready: impl Fn(&MirrorStatus) -> bool,
) -> Result<MirrorStatus> {
    let t0 = Instant::now();
    loop {
        let st = admin.status()?;
        if ready(&st) {
            return Ok(st);
        }
        if t0.elapsed() > timeout {
            return Err(failed(
                stage,
                format!("waited {} s for the node; its status: {st:?}", timeout.as_secs()),
            ));
        }
        std::thread::sleep(POLL);
    }
}
