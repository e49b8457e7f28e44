//! `mojim kv cluster create | status | add-shard | remove-shard` and `mojim kv --cluster`
//! against a real etcd: the topology written, checked, changed and refused, and a shard's
//! `mojim kv` starting from it.

mod common;

use common::edit_kv;
use common::kv_cluster::{free_addr, mojim, ok, refused, text, KvShards, Setup};
use common::Cluster;
use mojim_etcd::testing::EtcdServer;
use mojim_tools::child::ChildNode;
use std::time::Duration;

#[test]
fn create_status_changes_and_refusals() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let endpoint = etcd.endpoint();
    let mut c = Cluster::new("kv_cluster_ops", 2 << 20, |f| {
        common::use_etcd(f, &endpoint);
        edit_kv(f, |k| k.cluster_prefix = "/ops-test".into());
    });
    c.start_mirror_with(&["--node", "a2"]);
    let mirror = c.mirror_addr();
    let kv_addr = free_addr();

    // No topology yet: the server and status say how to make one.
    let kv_args = ["kv", "--cluster", "--node", "a1", "--mirror", &mirror, "--listen", &kv_addr];
    refused(
        &c,
        &kv_args,
        &["no cluster topology at /ops-test/kv-cluster/topology", "mojim kv cluster create"],
    );
    refused(&c, &["kv", "cluster", "status"], &["mojim kv cluster create"]);

    // Both shards' primaries are this one mojim kv, so that status can reach them both; each
    // shard's second node is on another loopback host.
    let shard_a = format!("a1/{kv_addr}/127.0.0.1:7001,a2/127.0.0.2:6379/127.0.0.2:7001");
    let shard_b = format!("b1/{kv_addr}/127.0.0.1:7002/z1,b2/127.0.0.2:6380/127.0.0.2:7002/z2");
    let out = ok(&c, &["kv", "cluster", "create", "--shard", &shard_a, "--shard", &shard_b]);
    assert!(out.contains("(epoch 1)") && out.contains("slots 0-8191 primary a1"), "{out}");
    assert!(out.contains("slots 8192-16383 primary b1"), "{out}");
    refused(&c, &["kv", "cluster", "create", "--shard", &shard_a], &["already at", "--force"]);

    // The shard's server starts from the topology; one for a node the topology lacks does not.
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let serve =
        ["kv", "--config", cfg, "--cluster", "--node", "a1", "--mirror", &mirror, "--listen", &kv_addr];
    let _kv = ChildNode::spawn(common::exe(), &serve).expect("mojim kv --cluster starts");
    refused(
        &c,
        &["kv", "--cluster", "--node", "zz", "--mirror", &mirror, "--listen", &free_addr()],
        &["node \"zz\"", "is in no shard", "a1, a2, b1, b2"],
    );

    let out = ok(&c, &["kv", "cluster", "status"]);
    assert!(out.contains("epoch 1") && out.contains("2 shards"), "{out}");
    assert!(out.contains("[OK] all 16384 slots covered"), "{out}");
    assert!(out.contains(&format!("primary a1 kv {kv_addr} serve 127.0.0.1:7001: ok (PONG)")), "{out}");
    assert!(out.contains("slots 8192-16383 (8192 slots)"), "{out}");
    assert!(out.contains("replica b2 kv 127.0.0.2:6380 serve 127.0.0.2:7002 zone z2"), "{out}");

    // A hand edit that leaves slots 16001-16383 to no one: status names them and fails.
    let client = etcd.client(Duration::from_secs(2));
    let key = "/ops-test/kv-cluster/topology";
    let mut t: serde_json::Value = serde_json::from_slice(&client.get(key).unwrap().unwrap().value).unwrap();
    t["shards"][1]["slots"][0]["end"] = 16000.into();
    client.put(key, &serde_json::to_vec(&t).unwrap(), None).unwrap();
    let out = refused(&c, &["kv", "cluster", "status"], &["[ERR] 383 slots not covered: 16001-16383"]);
    assert!(out.contains("383 of 16384 slots are not covered (16001-16383)"), "{out}");

    // Shards: one that owns slots is not removed; an empty one is added and removed.
    refused(&c, &["kv", "cluster", "remove-shard", "--shard", "b2"], &["still owns slots 8192-16000"]);
    let shard_c = "c1/127.0.0.3:6379/127.0.0.3:7001,c2/127.0.0.4:6379/127.0.0.4:7001";
    let out = ok(&c, &["kv", "cluster", "add-shard", "--shard", shard_c]);
    assert!(out.contains("with no slots (epoch 2)"), "{out}");
    let out = text(&mojim(&c, &["kv", "cluster", "status"]));
    assert!(out.contains("slots none (0 slots)"), "{out}");
    let out = ok(&c, &["kv", "cluster", "remove-shard", "--shard", "c2"]);
    assert!(out.contains("(epoch 3)"), "{out}");

    // Placement and uniqueness are refused, naming what breaks them; nothing is written.
    let same_host = "d1/127.0.0.5:6379/127.0.0.5:7001,d2/127.0.0.6:6379/127.0.0.5:7002";
    refused(
        &c,
        &["kv", "cluster", "add-shard", "--shard", same_host],
        &["nodes d1 and d2 are on the same host 127.0.0.5"],
    );
    let same_zone = "d1/127.0.0.5:6379/127.0.0.5:7001/r1,d2/127.0.0.6:6379/127.0.0.6:7002/r1";
    refused(
        &c,
        &["kv", "cluster", "add-shard", "--shard", same_zone],
        &["nodes d1 and d2 are on the same zone r1"],
    );
    let taken = "a1/127.0.0.7:6379/127.0.0.7:7001,d2/127.0.0.8:6379/127.0.0.8:7002";
    refused(
        &c,
        &["kv", "cluster", "add-shard", "--shard", taken],
        &["node name \"a1\" is used twice", "nothing written"],
    );
    refused(
        &c,
        &["kv", "cluster", "add-shard", "--shard", "e1/nowhere"],
        &["is not NAME/KV_ADDR/SERVE_ADDR"],
    );
    let after: serde_json::Value = serde_json::from_slice(&client.get(key).unwrap().unwrap().value).unwrap();
    assert_eq!(after["epoch"], 3, "no refused change was written");

    // --force replaces the damaged topology, its epoch going on.
    let out = ok(&c, &["kv", "cluster", "create", "--force", "--shard", &shard_a, "--shard", &shard_b]);
    assert!(out.contains("(epoch 4)"), "{out}");
    ok(&c, &["kv", "cluster", "status"]);
}

#[test]
fn cluster_mode_needs_the_etcd_coordinator() {
    let c = Cluster::new("kv_cluster_static", 1 << 20, |f| {
        edit_kv(f, |k| k.cluster = true);
    });
    refused(&c, &["kv", "--node", "a"], &["[kv] cluster = true", "coordinator = \"etcd\"", "\"static\""]);
    refused(&c, &["kv", "cluster", "status"], &["mojim kv cluster needs the etcd coordinator"]);
    // A standby waits to serve a shard: without cluster mode it is refused, naming both.
    let c = Cluster::new("kv_cluster_standby", 1 << 20, |_| {});
    refused(&c, &["kv", "--standby", "--node", "a"], &["--standby", "[kv] standby", "--cluster"]);
    // The operations are a subcommand: serving flags do not mix with them.
    let o = mojim(&c, &["kv", "--listen", "127.0.0.1:0", "cluster", "status"]);
    assert!(!o.status.success(), "{}", text(&o));
}

/// Three shards, each a region with its `mojim serve` mirror (on 127.0.0.2, apart from its
/// primary's host) and its `mojim kv --cluster` primary, the topology made by `mojim kv cluster
/// create` in a real etcd (`common::kv_cluster`): an unmodified redis-py `RedisCluster` told of
/// one shard writes and reads 1000 keys, and every shard holds some of them. Needs redis-py
/// (Debian python3-redis).
#[test]
fn redis_py_cluster_client_spreads_1000_keys_over_three_shards() {
    let Some(python) = common::kv::python_with_redis() else { return };
    let Some(c) = KvShards::start("kv_cluster_e2e", 3, Setup::default()) else { return };
    let out = text(&c.mojim(&["kv", "cluster", "status"]));
    assert_eq!(out.matches("ok (PONG)").count(), 3, "{out}");

    let ports: Vec<&str> = (0..3).map(|i| c.host_port(i).1).collect();
    let script = format!(
        r#"
import redis
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port={p0})
for i in range(1000):
    rc.set("key:%d" % i, "value %d" % i)
for i in range(1000):
    assert rc.get("key:%d" % i) == b"value %d" % i, i
sizes = [redis.Redis(host="127.0.0.1", port=p).dbsize() for p in ({p0}, {p1}, {p2})]
assert sum(sizes) == 1000 and min(sizes) > 200, sizes
print("ok", sizes)
"#,
        p0 = ports[0],
        p1 = ports[1],
        p2 = ports[2],
    );
    let mut python = python;
    let o = python.args(["-c", &script]).output().expect("run python3");
    assert!(o.status.success() && text(&o).contains("ok ["), "redis-py: {}", text(&o));
}
