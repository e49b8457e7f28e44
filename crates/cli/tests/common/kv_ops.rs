//! One shard of a Redis Cluster for the operations tests: a real etcd, a region with its
//! unnamed `mojim serve` mirror (on 127.0.0.2), and a topology of two shards made by `mojim kv
//! cluster create`: shard A of nodes a1 (this region's primary, on 127.0.0.1) and a2, shard B
//! of b1 and b2 (not started).

use super::kv_cluster::{free_addr, ok};
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
            f.kv.cluster_prefix = prefix.clone();
        });
        c.start_mirror_with(&["--listen", "127.0.0.2:0"]);
        let a1_kv = free_addr();
        let shard_a = format!("a1/{a1_kv}/127.0.0.1:1,a2/127.0.0.2:6379/{}", c.mirror_addr());
        let shard_b = "b1/127.0.0.3:6379/127.0.0.3:7001,b2/127.0.0.4:6379/127.0.0.4:7001";
        ok(&c, &["kv", "cluster", "create", "--shard", &shard_a, "--shard", shard_b]);
        Some(OneShard { c, etcd, a1_kv, prefix })
    }

    /// The topology in etcd.
    pub fn topology(&self) -> Topology {
        let client = self.etcd.client(Duration::from_secs(2));
        let key = format!("{}/kv-cluster/topology", self.prefix);
        let kv = client.get(&key).expect("read the topology").expect("a topology");
        serde_json::from_slice(&kv.value).expect("a topology")
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
