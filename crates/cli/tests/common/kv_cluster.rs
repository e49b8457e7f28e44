//! Redis Cluster tests: `mojim` run with a test cluster's configuration, and shards each a
//! region with its `mojim serve` mirror and its `mojim kv --cluster` primary, the topology made
//! by `mojim kv cluster create` in a real etcd.

use super::{exe, use_etcd, Cluster};
use mojim_tools::child::ChildNode;
use std::process::{Command, Output};

/// `mojim <args>` with the cluster's configuration, run to its end.
pub fn mojim(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe());
    cmd.args(args).args(["--config", c.cfg_path.to_str().expect("utf-8")]);
    cmd.env("MOJIM_LOG", "warn");
    cmd.output().expect("run mojim")
}

pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `mojim <args>` and requires it to succeed; returns its output.
pub fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = mojim(c, args);
    assert!(o.status.success(), "mojim {args:?} failed: {}", text(&o));
    text(&o)
}

/// Runs `mojim <args>` and requires it to fail saying each of `says`.
pub fn refused(c: &Cluster, args: &[&str], says: &[&str]) -> String {
    let o = mojim(c, args);
    let t = text(&o);
    assert!(!o.status.success(), "mojim {args:?} should have failed: {t}");
    for s in says {
        assert!(t.contains(s), "mojim {args:?} does not say {s:?}: {t}");
    }
    t
}

/// A loopback address nothing listens on now.
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address").to_string()
}

/// `n` shards: shard i's primary is node `p<i>` (its `mojim kv` on 127.0.0.1), its mirror node
/// `m<i>` (`mojim serve` on 127.0.0.2), the topology under `prefix` in the etcd at `endpoint`.
pub struct Shards {
    /// Dropped (killed) before the shards' folders.
    pub servers: Vec<Option<ChildNode>>,
    pub kv_addrs: Vec<String>,
    pub shards: Vec<Cluster>,
}

impl Shards {
    pub fn start(test: &str, n: usize, endpoint: &str, prefix: &str) -> Shards {
        let shards: Vec<Cluster> = (0..n)
            .map(|i| {
                let mut c = Cluster::new(&format!("{test}{i}"), 4 << 20, |f| {
                    use_etcd(f, endpoint);
                    f.kv.cluster_prefix = prefix.into();
                });
                c.start_mirror_with(&["--node", &format!("m{i}"), "--listen", "127.0.0.2:0"]);
                c
            })
            .collect();
        let kv_addrs: Vec<String> = (0..n).map(|_| free_addr()).collect();
        let mut create = vec!["kv".to_owned(), "cluster".into(), "create".into()];
        for (i, c) in shards.iter().enumerate() {
            create.push("--shard".into());
            create.push(format!("p{i}/{}/127.0.0.1:1,m{i}/127.0.0.2:6379/{}", kv_addrs[i], c.mirror_addr()));
        }
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        ok(&shards[0], &create);
        let mut s = Shards { servers: (0..n).map(|_| None).collect(), kv_addrs, shards };
        for i in 0..n {
            s.start_server(i);
        }
        s
    }

    /// Starts shard `i`'s `mojim kv --cluster` on its region; after a kill -9 it is tried again
    /// until the killed one's primary lease in etcd has run out.
    pub fn start_server(&mut self, i: usize) {
        assert!(self.servers[i].is_none(), "shard {i}'s server runs already");
        let c = &self.shards[i];
        let cfg = c.cfg_path.to_str().expect("utf-8");
        let (node, mirror) = (format!("p{i}"), c.mirror_addr());
        let args = [
            "kv",
            "--config",
            cfg,
            "--cluster",
            "--node",
            &node,
            "--mirror",
            &mirror,
            "--listen",
            &self.kv_addrs[i],
        ];
        let started =
            super::kv::wait_for("mojim kv --cluster to start", || ChildNode::spawn(exe(), &args).ok());
        self.servers[i] = Some(started);
    }

    /// The port of shard `i`'s `mojim kv`.
    pub fn port(&self, i: usize) -> &str {
        self.kv_addrs[i].rsplit(':').next().expect("a port")
    }
}
