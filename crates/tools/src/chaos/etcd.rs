//! The etcd of a chaos run under `--coordinator etcd`: one real etcd (Debian's `etcd-server`,
//! started by [`EtcdServer`]) serves every trial of the run, each trial under a key prefix of
//! its own.
//!
//! With network namespaces it runs in a namespace of its own on the nodes' bridge (site
//! `nodes`, after the nodes'), where the nodes and the harness reach it and a partition can cut
//! a node off from it; on loopback it listens on 127.0.0.1. Its raft tick is short (10 ms
//! heartbeats, 100 ms elections) so that etcd grants the 1 s leases the trials use.

use super::cluster::Net;
use mojim::config::EtcdSettings;
use mojim_etcd::testing::EtcdServer;
use std::path::Path;
use std::time::Duration;

/// How long etcd has to start answering (in a namespace of its own, it may take longer than
/// on loopback).
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

/// Starts etcd at site `site` of `net` with its data and log in `dir`, and waits until it
/// answers. It is killed on drop, and its folder removed unless [`EtcdServer::keep_files`].
pub(crate) fn start(net: &Net, site: usize, dir: &Path) -> Result<EtcdServer, String> {
    let mut launch = EtcdServer::launch()
        .dir(dir)
        .start_timeout(START_TIMEOUT)
        .command(|binary| net.command(site, binary));
    if let Net::Netns(_) = net {
        launch = launch.listen(&net.host(site), NETNS_CLIENT_PORT, NETNS_PEER_PORT);
    }
    launch.start().map_err(|e| format!("--coordinator etcd: {e}"))
}

/// A trial's coordinator settings: its own key prefix on `etcd`, and the trials' lease.
pub(crate) fn settings(etcd: &EtcdServer, prefix: String) -> EtcdSettings {
    EtcdSettings {
        endpoints: vec![etcd.endpoint()],
        tls: None,
        prefix,
        lease_ttl: LEASE_TTL,
        lease_renew: LEASE_RENEW,
        lease_margin: LEASE_MARGIN,
    }
}
