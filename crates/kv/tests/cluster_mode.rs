//! Three `mojim kv` servers in cluster mode, in this process, each the primary of one shard of
//! a topology the test holds (as the etcd watcher would): each serves its own slots and
//! redirects the others' (MOVED), refuses keys of several slots (CROSSSLOT), sends a key not
//! yet moved back from the target (MOVED) and a key gone from the source to the target (ASK),
//! serves a moving slot on the target after ASKING; and an unmodified redis-py `RedisCluster`
//! finds the shards from CLUSTER SLOTS, follows the redirects, and parses CLUSTER NODES and
//! SHARDS. The regions are unreplicated: replication is not what this tests. Needs redis-py
//! (the Debian package python3-redis, which ./scripts/test installs) and fails without it.

use mojim_kv::cluster::slot::key_slot;
use mojim_kv::cluster::topology::{Shard, ShardNode, SlotMove, SlotRange, Topology};
use mojim_kv::cluster::view::ClusterView;
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use mojim_kv::{run_with, Control, KvOptions};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const IDS: [&str; 3] = [
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    "cccccccccccccccccccccccccccccccccccccccc",
];
const RANGES: [(u16, u16); 3] = [(0, 5460), (5461, 10922), (10923, 16383)];

/// One shard's server: its region's folder, the end of the pipe that stops it, its thread.
struct Node {
    stop: UnixStream,
    thread: Option<JoinHandle<()>>,
    view: Arc<ClusterView>,
}

/// The servers, stopped and their folder removed when dropped.
struct Cluster {
    dir: PathBuf,
    nodes: Vec<Node>,
    addrs: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.stop.write_all(b"x");
        }
        for n in &mut self.nodes {
            if let Some(t) = n.thread.take() {
                let _ = t.join();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn topology(addrs: &[String], moves: Vec<SlotMove>) -> Topology {
    Topology {
        epoch: 1,
        shards: (0..3)
            .map(|i| Shard {
                id: IDS[i].into(),
                config_epoch: i as u64 + 1,
                slots: vec![SlotRange { start: RANGES[i].0, end: RANGES[i].1 }],
                nodes: vec![ShardNode {
                    name: format!("n{i}"),
                    kv_addr: addrs[i].clone(),
                    serve_addr: String::new(),
                    zone: String::new(),
                    kv_tls_addr: None,
                }],
                primary: format!("n{i}"),
            })
            .collect(),
        moves,
    }
}

/// An unreplicated region of 8 MiB in `dir`, and `mojim kv`'s options to serve it on `port`.
fn options(dir: &std::path::Path, port: u16) -> KvOptions {
    std::fs::create_dir_all(dir).expect("make the node's folder");
    let uuid = mojim::config::random_uuid();
    let text = mojim::config::template(&uuid, 8 << 20, "test-secret-0123456789abcdef0123", "127.0.0.1:0");
    let mut file: mojim::config::ConfigFile = toml::from_str(&text).expect("the template parses");
    file.primary.mode = "unreplicated".into();
    let path = dir.join("mojim.toml");
    mojim::config::write_private(&path, &toml::to_string(&file).expect("serialise"))
        .expect("write mojim.toml");
    let cfg = mojim::config::Config::load(&path).expect("load the configuration");
    mojim::create_region(&cfg.resolve(&cfg.file.region.path), cfg.region_id().expect("region id"))
        .expect("create the region");
    let mut o = KvOptions::from_config(&cfg, true, Some(&format!("127.0.0.1:{port}")), None)
        .expect("mojim kv's options");
    o.mirror_wait = Duration::ZERO;
    o
}

fn start() -> Cluster {
    let dir = std::env::temp_dir().join(format!("mojim-cluster-mode-{}", std::process::id()));
    let ports: [u16; 3] = mojim_transport::ports::free_loopback_ports().expect("free ports");
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut c = Cluster { dir: dir.clone(), nodes: Vec::new(), addrs: addrs.clone() };
    for (i, port) in ports.into_iter().enumerate() {
        let opts = options(&dir.join(format!("n{i}")), port);
        let view = Arc::new(ClusterView::new(&format!("n{i}"), topology(&addrs, Vec::new())));
        let (stop, theirs) = UnixStream::pair().expect("a socket pair");
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let v = Arc::clone(&view);
        let thread = std::thread::spawn(move || {
            let control = Control {
                stop: Some(theirs.into()),
                ready: Some(Box::new(move |_addr: &str| {
                    let _ = ready_tx.send(());
                })),
                metrics: None,
                cluster: Some(v),
                cluster_store: None,
            };
            run_with(&opts, control).expect("mojim kv runs and stops cleanly");
        });
        c.nodes.push(Node { stop, thread: Some(thread), view });
        ready_rx.recv_timeout(Duration::from_secs(30)).expect("the server serves");
    }
    c
}

/// A client on one connection.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        Client { s, buf: Vec::new() }
    }

    fn cmd(&mut self, args: &[&str]) -> Value {
        self.send(args);
        self.read()
    }

    fn send(&mut self, args: &[&str]) {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        self.s.write_all(&req).expect("send");
    }

    fn read(&mut self) -> Value {
        loop {
            if let Some((v, n)) = decode(&self.buf, &Limits::default()).expect("RESP") {
                self.buf.drain(..n);
                return v;
            }
            let mut chunk = [0u8; 4096];
            let n = self.s.read(&mut chunk).expect("read");
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn err(v: Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

/// A key of `prefix` in shard `shard`'s slots.
fn key_in(shard: usize, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| (RANGES[shard].0..=RANGES[shard].1).contains(&key_slot(k.as_bytes())))
        .expect("some key")
}

#[test]
fn three_shards_redirect_and_serve_redis_cluster_clients() {
    let c = start();
    let a = &c.addrs;
    let mut c0 = Client::connect(&a[0]);
    // foo is in slot 12182, the third shard's.
    assert_eq!(err(c0.cmd(&["SET", "foo", "1"])), format!("MOVED 12182 {}", a[2]));
    let mut c2 = Client::connect(&a[2]);
    assert_eq!(c2.cmd(&["SET", "foo", "1"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(c2.cmd(&["GET", "foo"]), Value::bulk("1"));
    assert_eq!(
        err(c2.cmd(&["MSET", "foo", "1", "bar", "2"])),
        "CROSSSLOT Keys in request don't hash to the same slot"
    );
    assert_eq!(c0.cmd(&["CLUSTER", "MYID"]), Value::bulk(IDS[0]));
    assert_eq!(c0.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "12182"]), Value::Int(0));
    assert_eq!(c2.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "12182"]), Value::Int(1));

    // Slot of "moved" keys on its way from shard 0 to shard 1: one key still on the source,
    // one already on the target.
    let here = key_in(0, "k");
    let slot = key_slot(here.as_bytes());
    let tag = format!("{{{here}}}");
    let gone = format!("{tag}.gone");
    assert_eq!(c0.cmd(&["SET", &here, "v"]), Value::Simple(b"OK".to_vec()));
    for n in &c.nodes {
        n.view.set(topology(
            a,
            vec![SlotMove { slot, from: IDS[0].into(), to: IDS[1].into(), rollback: false }],
        ));
    }
    let mut c1 = Client::connect(&a[1]);
    assert_eq!(c0.cmd(&["GET", &here]), Value::bulk("v"));
    assert_eq!(err(c0.cmd(&["GET", &gone])), format!("ASK {slot} {}", a[1]));
    assert_eq!(err(c1.cmd(&["SET", &gone, "w"])), format!("MOVED {slot} {}", a[0]));
    assert_eq!(c1.cmd(&["ASKING"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(c1.cmd(&["SET", &gone, "w"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(err(c1.cmd(&["GET", &gone])), format!("MOVED {slot} {}", a[0]));
    assert_eq!(c1.cmd(&["ASKING"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(c1.cmd(&["GET", &gone]), Value::bulk("w"));
    // The move ends: the slot is the target's.
    let mut done = topology(a, Vec::new());
    done.shards[0].slots =
        vec![SlotRange { start: 0, end: slot - 1 }, SlotRange { start: slot + 1, end: 5460 }];
    done.shards[1].slots.push(SlotRange { start: slot, end: slot });
    for n in &c.nodes {
        n.view.set(done.clone());
    }
    assert_eq!(c1.cmd(&["GET", &gone]), Value::bulk("w"));
    assert_eq!(err(c0.cmd(&["GET", &here])), format!("MOVED {slot} {}", a[1]));

    // A client parked by BLPOP on a slot that then leaves the shard is redirected, as Redis
    // unblocks it with -MOVED.
    let waiting = key_in(0, "list");
    let wslot = key_slot(waiting.as_bytes());
    let mut blocked = Client::connect(&a[0]);
    blocked.send(&["BLPOP", &waiting, "0"]);
    // Parked: the server answers this connection's next command only after BLPOP's.
    std::thread::sleep(Duration::from_millis(200));
    let mut handed = done.clone();
    handed.shards[0].slots.retain(|r| !(r.start..=r.end).contains(&wslot));
    let rest = |s: u16, e: u16| (s <= e).then_some(SlotRange { start: s, end: e });
    for r in done.shards[0].slots.iter().filter(|r| (r.start..=r.end).contains(&wslot)) {
        handed.shards[0].slots.extend(rest(r.start, wslot.wrapping_sub(1)).filter(|_| wslot > 0));
        handed.shards[0].slots.extend(rest(wslot + 1, r.end));
    }
    handed.shards[2].slots.push(SlotRange { start: wslot, end: wslot });
    for n in &c.nodes {
        n.view.set(handed.clone());
    }
    assert_eq!(err(blocked.read()), format!("MOVED {wslot} {}", a[2]));
    for n in &c.nodes {
        n.view.set(done.clone());
    }

    // redis-py's RedisCluster, told of one node, finds the others from CLUSTER SLOTS.
    let port0 = a[0].rsplit(':').next().expect("a port");
    let script = format!(
        r#"
import redis
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port={port0})
for i in range(200):
    rc.set("py%d" % i, "v%d" % i)
for i in range(200):
    assert rc.get("py%d" % i) == b"v%d" % i, i
# One key per shard at least, and the slot moved above served by its new owner.
assert rc.get("{gone}") == b"w"
nodes = rc.cluster_nodes()
assert len(nodes) == 3, nodes
assert sorted(n["node_id"] for n in nodes.values()) == {ids:?}, nodes
slots = rc.cluster_slots()
assert len(slots) == 5, slots
shards = rc.cluster_shards()
assert len(shards) == 3, shards
assert sum(len(s["slots"]) for s in shards) == 5, shards  # (start, end) pairs
info = rc.cluster_info()
assert info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == 3, info
print("ok", len(nodes), len(slots))
"#,
        ids = IDS.to_vec(),
    );
    // Debian's python3 first: it is the one python3-redis installs into.
    let py = ["/usr/bin/python3", "python3"]
        .into_iter()
        .find(|p| {
            std::process::Command::new(p)
                .args(["-c", "import redis"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("a python3 with redis-py: install the Debian package python3-redis (./scripts/test does)");
    let out = std::process::Command::new(py).arg("-c").arg(&script).output().expect("run python3");
    assert!(
        out.status.success(),
        "redis-py failed (it needs the Debian package python3-redis):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 3 5");
    // The keys redis-py wrote are spread over the shards, each on its slot's owner.
    let counts: Vec<i64> = c
        .addrs
        .iter()
        .map(|x| match Client::connect(x).cmd(&["DBSIZE"]) {
            Value::Int(n) => n,
            other => panic!("DBSIZE: {other:?}"),
        })
        .collect();
    assert!(counts.iter().all(|&n| n > 30), "{counts:?}");
    assert_eq!(counts.iter().sum::<i64>(), 200 + 3, "{counts:?}");
}
