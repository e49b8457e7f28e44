//! One shard of a Redis Cluster for the operations tests: a real etcd, a region with its
//! unnamed `mojim serve` mirror (on 127.0.0.2), and a topology of two shards made by `mojim kv
//! cluster create`: shard A of nodes a1 (this region's primary, on 127.0.0.1) and a2, shard B
//! of b1 and b2 (not started).

use super::edit_kv;
use super::kv_cluster::{free_addr, free_addr_on, ok, read_topology};
use super::{use_etcd, Cluster};
use mojim_etcd::testing::EtcdServer;
use mojim_kv::cluster::topology::Topology;
use std::time::Duration;

/// The shard's etcd, region and mirror, and the topology's addresses.
pub struct OneShard {
    /// Dropped after the shard's folder (and its mirror).
    pub c: Cluster,
    pub etcd: EtcdServer,
    /// a1's `kv_addr` in the topology.
    pub a1_kv: String,
    /// a2's `kv_addr` in the topology (on 127.0.0.2).
    pub a2_kv: String,
    /// The cluster prefix.
    pub prefix: String,
}

impl OneShard {
    /// `None` when the test cannot run here (no etcd), after it said why.
    pub fn start(test: &str) -> Option<OneShard> {
        let etcd = EtcdServer::start_for_test()?;
        let endpoint = etcd.endpoint();
        let prefix = format!("/{test}");
        let mut c = Cluster::new(test, 2 << 20, |f| {
            use_etcd(f, &endpoint);
            edit_kv(f, |k| k.cluster_prefix = prefix.clone());
        });
        c.start_mirror_with(&["--listen", "127.0.0.2:0"]);
        let (a1_kv, a2_kv) = (free_addr(), free_addr_on("127.0.0.2"));
        let shard_a = format!("a1/{a1_kv}/127.0.0.1:1,a2/{a2_kv}/{}", c.mirror_addr());
        let shard_b = "b1/127.0.0.3:6379/127.0.0.3:7001,b2/127.0.0.4:6379/127.0.0.4:7001";
        ok(&c, &["kv", "cluster", "create", "--shard", &shard_a, "--shard", shard_b]);
        Some(OneShard { c, etcd, a1_kv, a2_kv, prefix })
    }

    /// The topology in etcd.
    pub fn topology(&self) -> Topology {
        read_topology(&self.etcd, &self.prefix).0
    }

    /// `mojim kv --config <its> --cluster --node <node> --mirror <its mirror>` and `extra`.
    pub fn kv_args(&self, node: &str, extra: &[&str]) -> Vec<String> {
        let cfg = self.c.cfg_path.to_str().expect("utf-8");
        let mut a: Vec<String> = ["kv", "--config", cfg, "--cluster", "--node", node, "--mirror"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(self.c.mirror_addr());
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }
}

/// Runs `mojim <args> --config <c's>` and requires it to fail within [`super::WAIT`] saying each
/// of `says`; one still running then (it serves, or waits, instead of refusing) is killed and
/// the test fails.
pub fn refused_at_start(c: &Cluster, args: &[&str], says: &[&str]) -> String {
    use std::io::Read;
    let mut child = std::process::Command::new(super::exe())
        .args(args)
        .args(["--config", c.cfg_path.to_str().expect("utf-8")])
        .env("MOJIM_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run mojim");
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("poll") {
            break st;
        }
        if t0.elapsed() > super::WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mojim {args:?} still runs after {:?} instead of refusing to start", super::WAIT);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut t = String::new();
    let _ = child.stdout.take().expect("piped").read_to_string(&mut t);
    let _ = child.stderr.take().expect("piped").read_to_string(&mut t);
    assert!(!status.success(), "mojim {args:?} should have failed: {t}");
    for s in says {
        assert!(t.contains(s), "mojim {args:?} does not say {s:?}: {t}");
    }
    t
}
