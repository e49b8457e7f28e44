//! Fail-over of one shard of a Redis Cluster, with a real etcd and real processes: the shard's
//! primary `mojim kv` is killed, its mirror's `mojim serve` takes the region over through the
//! region's lease, the standby `mojim kv --cluster --standby` on the mirror's node serves the
//! promoted copy and takes the shard in the topology; an unmodified redis-py `RedisCluster`
//! follows without a restart, the other shard never notices, and the old primary restarted
//! cannot take the shard back.

mod common;

use common::edit_kv;
use common::kv::{python_with_redis, wait_for, Resp};
use common::kv_cluster::{free_addr, free_addr_on, named_node, ok, read_topology, refused};
use common::{Cluster, WAIT};
use mojim_etcd::testing::EtcdServer;
use mojim_kv::cluster::topology::Topology;
use mojim_kv::resp::Value;
use mojim_tools::child::ChildNode;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Instant;

const PREFIX: &str = "/failover";

/// Writes 500 keys, says `written`, waits for a line on stdin, then (the same client object)
/// reads every key back, writes 500 more and reads them: `ok`.
///
/// redis-py 4.3 (Debian 12's) reloads the slots after a connection error by opening a new
/// connection to a seed node with a deep copy of its connection settings, which hold a bound
/// method of the client, and so its lock: the copy fails ("cannot pickle '_thread.lock'") and
/// the client gives up. Where that copy fails, the client is made to copy as itself; the
/// reload, and everything else, is redis-py's own.
const CLIENT: &str = r#"
import copy, os, sys
from redis.cluster import RedisCluster, ClusterNode
nodes = [ClusterNode(h, int(p)) for h, p in (a.rsplit(":", 1) for a in os.environ["NODES"].split(","))]
rc = RedisCluster(startup_nodes=nodes, socket_timeout=5)
try:
    copy.deepcopy(rc.nodes_manager.connection_kwargs)
except TypeError:
    RedisCluster.__deepcopy__ = lambda self, memo: self
for i in range(500):
    assert rc.set("key:%d" % i, "value %d" % i) is True
print("written", flush=True)
sys.stdin.readline()
for i in range(500):
    assert rc.get("key:%d" % i) == b"value %d" % i, (i, rc.get("key:%d" % i))
for i in range(500, 1000):
    assert rc.set("key:%d" % i, "value %d" % i) is True
for i in range(1000):
    assert rc.get("key:%d" % i) == b"value %d" % i, i
print("ok", flush=True)
"#;

/// The redis-py client process and its output lines.
struct Client {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Client {
    fn start(mut python: std::process::Command, nodes: &str) -> Client {
        let mut child = python
            .args(["-c", CLIENT])
            .env("NODES", nodes)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Client { child, lines }
    }

    /// Waits for the line `want`; on anything else, or the process ending, fails with its exit.
    fn expect(&mut self, want: &str) {
        match self.lines.recv_timeout(WAIT) {
            Ok(l) if l == want => {}
            other => {
                let _ = self.child.kill();
                let status = self.child.wait();
                panic!("redis-py RedisCluster: wanted {want:?}, got {other:?} (exit {status:?}); its error is above");
            }
        }
    }

    fn go_on(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("piped");
        stdin.write_all(b"go\n").and_then(|()| stdin.flush()).expect("tell the client to go on");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn topology(etcd: &EtcdServer) -> (Topology, i64) {
    read_topology(etcd, PREFIX)
}

/// `CLUSTER SLOTS` as (first slot, last slot, "host:port" of the primary).
fn cluster_slots(addr: &str) -> Vec<(i64, i64, String)> {
    let Value::Array(ranges) = Resp::connect(addr).cmd(&["CLUSTER", "SLOTS"]) else {
        panic!("CLUSTER SLOTS is an array")
    };
    ranges
        .iter()
        .map(|r| match r {
            Value::Array(f) => match (&f[0], &f[1], &f[2]) {
                (Value::Int(a), Value::Int(b), Value::Array(node)) => match (&node[0], &node[1]) {
                    (Value::Bulk(h), Value::Int(p)) => {
                        (*a, *b, format!("{}:{p}", String::from_utf8_lossy(h)))
                    }
                    other => panic!("a node is host and port: {other:?}"),
                },
                other => panic!("a slot range: {other:?}"),
            },
            other => panic!("a slot range: {other:?}"),
        })
        .collect()
}

fn dbsize(addr: &str) -> i64 {
    match Resp::connect(addr).cmd(&["DBSIZE"]) {
        Value::Int(n) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// Shard A: a1's `mojim kv --cluster`, a2's `mojim serve` mirror (its backup a3 becomes the
/// mirror after the take-over) and a2's `mojim kv --cluster --standby`. Shard B: b1's `mojim
/// kv --cluster` and b2's `mojim serve`. Needs etcd and redis-py (Debian python3-redis).
#[test]
fn a_standby_takes_its_shard_over_and_a_cluster_client_follows_without_a_restart() {
    let Some(python) = python_with_redis() else { return };
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let endpoint = etcd.endpoint();
    let shard = |name: &str| {
        Cluster::new(name, 4 << 20, |f| {
            common::use_etcd(f, &endpoint);
            edit_kv(f, |k| k.cluster_prefix = PREFIX.into());
        })
    };
    let (a, b) = (shard("kv-failover-a"), shard("kv-failover-b"));
    let a3 = named_node(&a, "a3", "127.0.0.1:0", &[]);
    let a2 = named_node(&a, "a2", "127.0.0.2:0", &[a3.addr()]);
    let b2 = named_node(&b, "b2", "127.0.0.2:0", &[]);
    let (a1_kv, a2_kv) = (free_addr(), free_addr_on("127.0.0.2"));
    let (b1_kv, b2_kv) = (free_addr(), free_addr_on("127.0.0.2"));
    let shard_a = format!("a1/{a1_kv}/127.0.0.1:1,a2/{a2_kv}/{}", a2.addr());
    let shard_b = format!("b1/{b1_kv}/127.0.0.1:2,b2/{b2_kv}/{}", b2.addr());
    ok(&a, &["kv", "cluster", "create", "--shard", &shard_a, "--shard", &shard_b]);

    let serve = |c: &Cluster, node: &str, mirror: &str, listen: &str| {
        let cfg = c.cfg_path.to_str().expect("utf-8");
        let args =
            ["kv", "--config", cfg, "--cluster", "--node", node, "--mirror", mirror, "--listen", listen];
        ChildNode::spawn(common::exe(), &args).expect("mojim kv --cluster starts")
    };
    let mut a1 = serve(&a, "a1", a2.addr(), &a1_kv);
    let _b1 = serve(&b, "b1", b2.addr(), &b1_kv);
    // The standby starts beside a2's mirror and waits: the roles name a1.
    let a2_region = a.dir.path().join("a2").join("data.mojim");
    let cfg = a.cfg_path.to_str().expect("utf-8");
    let standby_args = [
        "kv",
        "--config",
        cfg,
        "--cluster",
        "--standby",
        "--node",
        "a2",
        "--region",
        a2_region.to_str().expect("utf-8"),
        "--listen",
        &a2_kv,
    ];
    let standby = ChildNode::launch(common::exe(), &standby_args).expect("start the standby");
    let (before, _) = topology(&etcd);

    let mut client = Client::start(python, &format!("{a1_kv},{b1_kv}"));
    client.expect("written");
    let (on_a, on_b) = (dbsize(&a1_kv), dbsize(&b1_kv));
    assert!(on_a + on_b == 500 && on_a > 100 && on_b > 100, "keys per shard: {on_a} and {on_b}");
    assert!(
        std::net::TcpStream::connect(&a2_kv).is_err(),
        "the standby serves nothing while a1 holds the region"
    );

    // a1's mojim kv dies; its lease expires, a2's mirror takes over, the standby serves.
    let t0 = Instant::now();
    a1.kill();
    let pid = standby.pid();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(standby.ready());
    });
    let a2_kv_server = match rx.recv_timeout(WAIT) {
        Ok(r) => r.expect("the standby serves the promoted copy"),
        Err(_) => {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            panic!("the standby did not serve within {WAIT:?} of a1's death");
        }
    };
    assert_eq!(a2_kv_server.addr(), a2_kv);
    println!("the standby served {} ms after a1 was killed", t0.elapsed().as_millis());

    let (after, revision) = topology(&etcd);
    assert_eq!(after.epoch, before.epoch + 1, "one change: {after:?}");
    assert_eq!(after.shards[0].primary, "a2");
    assert_eq!(after.shards[0].config_epoch, before.shards[0].config_epoch + 1);
    assert_eq!(after.shards[1], before.shards[1], "shard B never noticed");
    // a2 serves the topology it wrote; b1 gets it through its watch.
    let slots = cluster_slots(&a2_kv);
    assert!(
        slots.contains(&(0, 8191, a2_kv.clone())) && slots.contains(&(8192, 16383, b1_kv.clone())),
        "{slots:?}"
    );
    let slots = wait_for("b1 to name a2 in CLUSTER SLOTS", || {
        let s = cluster_slots(&b1_kv);
        s.contains(&(0, 8191, a2_kv.clone())).then_some(s)
    });
    assert!(!slots.iter().any(|(_, _, addr)| *addr == a1_kv), "{slots:?}");

    // The same client object reads every acknowledged key and writes more.
    client.go_on();
    client.expect("ok");
    assert_eq!(dbsize(&a2_kv) + dbsize(&b1_kv), 1000);

    // The old primary restarted on its region is refused before it touches the topology.
    let a1_args = ["kv", "--cluster", "--node", "a1", "--mirror", a2.addr(), "--listen", &a1_kv];
    refused(&a, &a1_args, &["node a1 is not the primary", "node a2 is"]);
    let (now, now_revision) = topology(&etcd);
    assert_eq!((now_revision, &now), (revision, &after), "the topology still names a2");
}
