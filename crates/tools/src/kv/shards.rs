//! The `mojim-cluster` target: a Redis Cluster of N shards on loopback, as an operator would
//! run it. Per shard, a region of mode sync with its mirror (`mojim serve --node mI`, on
//! 127.0.0.2 so that placement finds the shard's two nodes on different hosts) and its primary
//! (`mojim kv --cluster --node pI`, on 127.0.0.1); the topology made by `mojim kv cluster
//! create` (the slots spread evenly, in order) in the etcd the benchmark started for every
//! cluster target of the run, under a prefix of the target's own. Stopping the target stops
//! its processes and removes its folders; the etcd (and the topologies in it) goes with the
//! run.
//!
//! A slot move under load needs no more than this: [`ClusterInfo::config`] is a configuration
//! that names the etcd and the topology, which `mojim kv cluster` commands take, and the load
//! follows the MOVED and ASK answers a move brings and counts them ([`super::load`]).

use super::janitor::Janitor;
use super::route::Route;
use super::targets::{free_port, mkdir, prepare_mojim, serve_kv, Env, Server, Target};
use mojim::error::{Error, Result};
use std::path::PathBuf;
use std::process::Command;

/// Most shards `--shards` accepts.
pub const MAX_SHARDS: usize = 16;

/// A running cluster target's shards.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    /// Each shard's primary (`mojim kv`), `host:port`, in the topology's order.
    pub addrs: Vec<String>,
    /// The first shard's configuration: its `[cluster]` names the etcd and its `[kv]
    /// cluster_prefix` the topology (what `mojim kv cluster ... --config` takes).
    pub config: PathBuf,
    /// The etcd's process, whose CPU time each run on the cluster is charged.
    pub etcd_pid: u32,
}

/// Starts a cluster of `shards` shards; its files go under `env.dir`, named after `tag`.
pub fn start(env: &Env, tag: &str, shards: usize, janitor: &mut Janitor) -> Result<Server> {
    assert!((1..=MAX_SHARDS).contains(&shards), "--shards is checked before anything starts");
    let etcd = env.etcd.ok_or_else(|| {
        Error::Config("target mojim-cluster needs the run's etcd, which was not started".into())
    })?;
    let name = format!("{tag}-mojim-cluster{shards}");
    let dir = mkdir(&env.dir.join(&name), janitor)?;
    let mut s = Server {
        target: Target::MojimCluster,
        addr: String::new(),
        tls_addr: None,
        cluster: None,
        procs: Vec::new(),
        dirs: vec![dir.clone()],
    };
    let prefix = format!("/{name}");
    let endpoint = etcd.endpoint();
    let edit = |f: &mut mojim::config::ConfigFile| {
        f.cluster.coordinator = "etcd".into();
        f.cluster.etcd_endpoints = vec![endpoint.clone()];
        // The first to write [kv] (the template has none); the run's own settings follow.
        f.set_section(&mojim_kv::KvSection {
            cluster_prefix: prefix.clone(),
            cluster: true,
            ..Default::default()
        });
    };
    let mut prepared = Vec::with_capacity(shards);
    for i in 0..shards {
        let shard_dir = mkdir(&dir.join(format!("shard{i}")), janitor)?;
        let node = format!("m{i}");
        let p = prepare_mojim(env, &shard_dir, "127.0.0.2:0", &["--node", &node], false, &edit, janitor)?;
        prepared.push((p.cfg_path, p.mirror_addr));
        s.procs.push(p.mirror);
    }
    let addrs =
        (0..shards).map(|_| free_port().map(|p| format!("127.0.0.1:{p}"))).collect::<Result<Vec<_>>>()?;

    // The topology, as an operator makes it. A primary's own serve address is not used (no
    // mirror of another shard runs on it): port 1 stands for it.
    let mut create = Command::new(env.mojim);
    create.args(["kv", "cluster", "create", "--config"]).arg(&prepared[0].0);
    for (i, ((_, mirror), kv)) in prepared.iter().zip(&addrs).enumerate() {
        create.arg("--shard").arg(format!("p{i}/{kv}/127.0.0.1:1,m{i}/127.0.0.2:6379/{mirror}"));
    }
    if std::env::var_os("MOJIM_LOG").is_none() {
        create.env("MOJIM_LOG", "warn");
    }
    let out = create.output().map_err(Error::io(format!("run {} kv cluster create", env.mojim.display())))?;
    if !out.status.success() {
        return Err(Error::Io {
            op: format!("create the topology of {name} at {prefix} in etcd {endpoint}"),
            source: std::io::Error::other(format!(
                "mojim kv cluster create failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
        });
    }

    for (i, ((cfg, _), addr)) in prepared.iter().zip(&addrs).enumerate() {
        let node = format!("p{i}");
        s.procs.push(serve_kv(env, cfg, addr, &["--cluster", "--node", &node], janitor)?);
    }
    s.addr = addrs[0].clone();
    // Every shard serves its slots: CLUSTER SLOTS from the first names them all.
    let route = Route::read(&s.addr)?;
    let mut named = route.addrs.clone();
    named.sort();
    let mut want = addrs.clone();
    want.sort();
    if named != want {
        return Err(Error::Config(format!(
            "{name}: CLUSTER SLOTS on {} names the shards {named:?}, not the {shards} started ({want:?})",
            s.addr
        )));
    }
    s.cluster = Some(ClusterInfo { addrs, config: prepared[0].0.clone(), etcd_pid: etcd.pid() });
    Ok(s)
}
