//! Unmodified Redis Cluster clients against `mojim kv` shards: `redis-cli -c`, `redis-benchmark
//! --cluster` (Debian redis-tools) and redis-py's `RedisCluster` (python3-redis) on three shards,
//! each a `mojim kv --cluster` primary and a `mojim serve` mirror, every process in a network
//! namespace of its own; `mojim kv cluster status` reporting each shard's replication, and
//! failing when a mirror is down; and TLS clients sent to the shards' TLS addresses.

mod common;

use common::kv::{python_with_redis, wait_for};
use common::kv_cluster::{text, KvCerts, KvShards, Network, Setup};
use mojim_kv::cluster::slot::key_slot;
use std::process::{Command, Output};

/// The slot ranges `mojim kv cluster create` gives three shards, in order.
const THREE: [(u16, u16); 3] = [(0, 5461), (5462, 10922), (10923, 16383)];

/// A key whose slot is in `range`, with `prefix`.
fn key_in(prefix: &str, range: (u16, u16)) -> (String, u16) {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .map(|k| {
            let slot = key_slot(k.as_bytes());
            (k, slot)
        })
        .find(|(_, slot)| (range.0..=range.1).contains(slot))
        .expect("some key hashes there")
}

/// Runs `program args...`; `None` (after [`common::skip`]) when it is not installed.
fn run(program: &str, args: &[&str]) -> Option<Output> {
    match Command::new(program).args(args).output() {
        Ok(o) => Some(o),
        Err(e) => {
            common::skip(&format!("cannot run {program} ({e}): install Debian's redis-tools"));
            None
        }
    }
}

/// `redis-cli -c` at shard 0 sets a key of each shard, following MOVED (redis-cli prints the
/// redirects only when interactive: that each key landed on its shard, which answers it without
/// `-c` where shard 0 answers MOVED, shows it followed them), and reads them all back from
/// shard 2.
fn redis_cli_follows_moved(c: &KvShards) -> Option<()> {
    let (h0, p0) = c.host_port(0);
    let (h2, p2) = c.host_port(2);
    let keys: Vec<(String, u16)> = THREE.iter().map(|&r| key_in("cli", r)).collect();
    for (j, (key, slot)) in keys.iter().enumerate() {
        let value = format!("value of {key}");
        let o = run("redis-cli", &["-c", "-h", h0, "-p", p0, "SET", key, &value])?;
        let out = text(&o);
        assert!(o.status.success() && out.trim_end().ends_with("OK"), "redis-cli -c SET {key}: {out}");
        let (h, p) = c.host_port(j);
        let out = text(&run("redis-cli", &["-h", h, "-p", p, "GET", key])?);
        assert_eq!(out.trim_end(), value, "shard {j} does not hold {key}");
        if j != 0 {
            let out = text(&run("redis-cli", &["-h", h0, "-p", p0, "GET", key])?);
            let moved = format!("MOVED {slot} {}", c.kv_addrs[j]);
            assert!(out.contains(&moved), "shard 0 answers GET {key} with {out:?}, not {moved:?}");
        }
    }
    for (key, _) in &keys {
        let o = run("redis-cli", &["-c", "-h", h2, "-p", p2, "GET", key])?;
        let out = text(&o);
        assert_eq!(out.trim_end(), format!("value of {key}"), "redis-cli -c GET {key} at shard 2");
    }
    Some(())
}

/// The figure of a `redis-benchmark -q` line `NAME: 12345.67 requests per second, ...`.
fn requests_per_second(out: &str, name: &str) -> Option<f64> {
    let line = out.split(['\r', '\n']).rev().find(|l| l.trim_start().starts_with(&format!("{name}: ")))?;
    line.trim_start()[name.len() + 2..].split_whitespace().next()?.parse().ok()
}

/// `redis-benchmark --cluster` reads the shards from CLUSTER NODES and runs SET and GET on all
/// three, with no error.
fn redis_benchmark_runs_on_every_shard(c: &KvShards) -> Option<()> {
    let (h0, p0) = c.host_port(0);
    let dbsize_before: Vec<i64> = (0..3).map(|i| dbsize(c, i)).collect();
    let args = ["--cluster", "-h", h0, "-p", p0, "-t", "set,get", "-n", "20000", "-r", "100000", "-q"];
    let o = run("redis-benchmark", &args)?;
    let out = text(&o);
    assert!(o.status.success(), "redis-benchmark --cluster: {out}");
    assert!(out.contains("Cluster has 3 master nodes"), "{out}");
    for (i, addr) in c.kv_addrs.iter().enumerate() {
        assert!(out.contains(addr.as_str()), "redis-benchmark does not list shard {i} at {addr}: {out}");
    }
    let lower = out.to_ascii_lowercase();
    assert!(!lower.contains("error") && !lower.contains("moved"), "redis-benchmark saw errors: {out}");
    for name in ["SET", "GET"] {
        let rps = requests_per_second(&out, name).unwrap_or_else(|| panic!("no {name} figure: {out}"));
        assert!(rps > 0.0, "{name}: {rps} requests per second: {out}");
        println!("redis-benchmark --cluster {name}: {rps} requests per second");
    }
    for (i, before) in dbsize_before.into_iter().enumerate() {
        let after = dbsize(c, i);
        assert!(after > before, "shard {i} got no key from redis-benchmark ({after} keys)");
    }
    Some(())
}

/// Shard `i`'s key count, by `redis-cli DBSIZE` at its primary.
fn dbsize(c: &KvShards, i: usize) -> i64 {
    let (h, p) = c.host_port(i);
    let o = run("redis-cli", &["-h", h, "-p", p, "DBSIZE"]).expect("redis-cli ran before");
    let out = text(&o);
    out.trim().parse().unwrap_or_else(|_| panic!("DBSIZE at {}: {out}", c.kv_addrs[i]))
}

/// redis-py's `RedisCluster`, told of shard 1 alone, writes and reads 1000 keys over the three.
fn redis_py_cluster(c: &KvShards) -> Option<()> {
    let mut python = python_with_redis()?;
    let (h, p) = c.host_port(1);
    let nodes: Vec<String> =
        (0..3).map(|i| format!("({:?}, {})", c.host_port(i).0, c.host_port(i).1)).collect();
    let script = format!(
        r#"
import redis
from redis.cluster import RedisCluster
rc = RedisCluster(host="{h}", port={p})
for i in range(1000):
    rc.set("py:%d" % i, "value %d" % i)
for i in range(1000):
    assert rc.get("py:%d" % i) == b"value %d" % i, i
sizes = [len(redis.Redis(host=h, port=p).keys("py:*")) for (h, p) in [{nodes}]]
assert sum(sizes) == 1000 and min(sizes) > 200, sizes
print("ok", sizes)
"#,
        nodes = nodes.join(", "),
    );
    let o = python.args(["-c", &script]).output().expect("run python3");
    assert!(o.status.success() && text(&o).contains("ok ["), "redis-py: {}", text(&o));
    Some(())
}

#[test]
fn redis_cli_redis_benchmark_and_redis_py_on_three_shards_in_namespaces() {
    let Some(mut c) = KvShards::start("kvcc", 3, Setup { network: Network::Namespaces, ..Setup::default() })
    else {
        return;
    };
    assert!(c.kv_addrs.iter().all(|a| !a.starts_with("127.")), "{:?}", c.kv_addrs);

    let o = c.mojim(&["kv", "cluster", "status"]);
    let out = text(&o);
    assert!(o.status.success(), "status: {out}");
    assert_eq!(out.matches("ok (PONG)").count(), 3, "{out}");
    assert_eq!(out.matches("replication: mirror ").count(), 3, "{out}");
    assert_eq!(out.matches(" online, mode sync, groups acknowledged ").count(), 3, "{out}");

    if redis_cli_follows_moved(&c).is_none() || redis_benchmark_runs_on_every_shard(&c).is_none() {
        return;
    }
    if redis_py_cluster(&c).is_none() {
        return;
    }

    // Every write was acknowledged by its shard's mirror: status shows no lag.
    let out = text(&c.mojim(&["kv", "cluster", "status"]));
    assert_eq!(out.matches(", lag 0\n").count(), 3, "{out}");

    // Shard 1's mirror stops: status names its primary and the mirror, and fails.
    let mirror = c.shards[1].mirror_addr();
    c.shards[1].kill_mirror();
    let out = wait_for("status to see shard 1's mirror lost", || {
        let o = c.mojim(&["kv", "cluster", "status"]);
        let out = text(&o);
        (!o.status.success() && out.contains(&format!("mirror {mirror} is lost"))).then_some(out)
    });
    assert!(out.contains("[ERR] 1 primaries without their mirror"), "{out}");
    assert!(out.contains("primary p1: mirror"), "{out}");
    assert_eq!(out.matches(" online, mode sync").count(), 2, "{out}");
}

/// Two shards serving TLS beside the clear: a client over TLS is given the TLS addresses in
/// CLUSTER SLOTS and in MOVED (a client in the clear the clear ones), so that redis-py's
/// `RedisCluster(ssl=True)` and `redis-cli --tls -c` work across the shards.
#[test]
fn tls_clients_are_sent_to_the_tls_addresses() {
    let certs = KvCerts::new("kvcc-tls");
    let Some(c) = KvShards::start("kvcc-tls", 2, Setup { certs: Some(&certs), ..Setup::default() }) else {
        return;
    };
    let out = text(&c.mojim(&["kv", "cluster", "status"]));
    assert!(out.contains(&format!("kv {} tls {} serve", c.kv_addrs[1], c.tls_addrs[1])), "{out}");

    // Slots 8192-16383 are shard 1's.
    let (key, slot) = key_in("tls", (8192, 16383));
    let port = |a: &str| a.rsplit_once(':').expect("host:port").1.to_string();
    let tls0 = port(&c.tls_addrs[0]);
    let tls_args = [
        "--tls",
        "--cacert",
        &certs.path("ca.pem"),
        "--cert",
        &certs.path("client.pem"),
        "--key",
        &certs.path("client.key"),
    ];
    let tls1 = port(&c.tls_addrs[1]);
    let cli = |port: &str, cluster: bool, command: &[&str]| {
        let mut args: Vec<&str> = tls_args.to_vec();
        if cluster {
            args.push("-c");
        }
        args.extend(["-h", "127.0.0.1", "-p", port]);
        args.extend_from_slice(command);
        run("redis-cli", &args).map(|o| text(&o))
    };
    let Some(out) = cli(&tls0, true, &["SET", &key, "over tls"]) else { return };
    assert!(out.trim_end().ends_with("OK"), "redis-cli --tls -c SET {key}: {out}");
    // Shard 1 holds it, and shard 0 sends a TLS client to shard 1's TLS address...
    let out = cli(&tls1, false, &["GET", &key]).expect("redis-cli ran");
    assert_eq!(out.trim_end(), "over tls", "shard 1 over TLS");
    let out = cli(&tls0, false, &["GET", &key]).expect("redis-cli ran");
    assert!(out.contains(&format!("MOVED {slot} {}", c.tls_addrs[1])), "shard 0 over TLS: {out}");
    // ... and a client in the clear to the clear one.
    let (h, p) = c.host_port(0);
    let out = text(&run("redis-cli", &["-h", h, "-p", p, "GET", &key]).expect("redis-cli ran"));
    assert!(out.contains(&format!("MOVED {slot} {}", c.kv_addrs[1])), "redis-cli GET in the clear: {out}");

    let Some(mut python) = python_with_redis() else { return };
    let d = certs.dir.path().to_str().expect("utf-8");
    let script = format!(
        r#"
import redis
from redis.cluster import RedisCluster
rc = RedisCluster(host="127.0.0.1", port={tls0}, ssl=True, ssl_ca_certs="{d}/ca.pem",
                  ssl_certfile="{d}/client.pem", ssl_keyfile="{d}/client.key", ssl_cert_reqs="required")
ports = sorted(n.port for n in rc.get_nodes())
assert ports == sorted([{tls0}, {tls1}]), ports
for i in range(200):
    rc.set("py:%d" % i, "value %d" % i)
for i in range(200):
    assert rc.get("py:%d" % i) == b"value %d" % i, i
sizes = [redis.Redis(host="127.0.0.1", port=p).dbsize() for p in ({p0}, {p1})]
assert min(sizes) > 50, sizes
print("ok", sizes)
"#,
        p0 = port(&c.kv_addrs[0]),
        p1 = port(&c.kv_addrs[1]),
    );
    let o = python.args(["-c", &script]).output().expect("run python3");
    assert!(o.status.success() && text(&o).contains("ok ["), "redis-py over TLS: {}", text(&o));
}
