//! Fail-over for Redis clients: redis-py's `Sentinel`, given the `mojim kv` address of each
//! node, finds the primary by the Sentinel commands `mojim kv` answers, writes through it; the
//! primary's node is lost, the mirror promoted and `mojim kv` started there; the same client
//! code then finds the new primary and reads every acknowledged write. The same over TLS: the
//! links between the nodes and `mojim kv` mutual TLS, and redis-py's Sentinel and master
//! connections TLS to `mojim kv`'s TLS port, which names its own TLS port as the master's.

mod common;

use common::edit_kv;
use common::kv::{node, promote, python_with_redis, start_kv, start_kv_on_promoted, Resp};
use common::Cluster;
use mojim_kv::resp::Value;
use mojim_transport::ports::free_loopback_port;

const PY: &str = r#"
import os, sys
from redis.sentinel import Sentinel
nodes = [tuple(a.rsplit(":", 1)) for a in os.environ["NODES"].split(",")]
nodes = [(h, int(p)) for h, p in nodes]
s = Sentinel(nodes, socket_timeout=2)
host, port = s.discover_master("mojim")
m = s.master_for("mojim", socket_timeout=2, decode_responses=True)
if sys.argv[1] == "write":
    for i in range(200):
        assert m.set(f"k{i}", f"v{i}") is True
    assert m.incr("n") == 1
else:
    for i in range(200):
        assert m.get(f"k{i}") == f"v{i}", (i, m.get(f"k{i}"))
    assert m.get("n") == "1"
    assert m.set("after", "failover") is True
print(f"{host}:{port}")
"#;

fn python(nodes: &str, step: &str) -> String {
    python_with(PY, nodes, step, None)
}

/// Runs `program` with the step as `argv[1]`, `nodes` in NODES and, over TLS, the folder of
/// the certificates in CERTS; its output.
fn python_with(program: &str, nodes: &str, step: &str, certs: Option<&std::path::Path>) -> String {
    let mut py = python_with_redis().expect("checked by the caller");
    py.args(["-c", program, step]).env("NODES", nodes);
    if let Some(d) = certs {
        py.env("CERTS", d);
    }
    let out = py.output().expect("run python3");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-py Sentinel, {step}: {stdout}{stderr}");
    stdout.trim().to_string()
}

#[test]
fn redis_py_sentinel_follows_the_promotion() {
    if python_with_redis().is_none() {
        return;
    }
    let later = format!("127.0.0.1:{}", free_loopback_port().expect("a free port"));
    let c = Cluster::new("kv-sentinel", 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        edit_kv(f, |k| k.sentinel_name = "mojim".into());
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);
    let first = kv.addr().to_string();
    let nodes = format!("{first},{later}");

    // The client asks the nodes in turn: the first answers that it is the master.
    assert_eq!(python(&nodes, "write"), first);
    let mut r = Resp::connect(&first);
    assert_eq!(
        r.cmd(&["SENTINEL", "get-master-addr-by-name", "mojim"]),
        Value::Array(vec![Value::bulk("127.0.0.1"), Value::bulk(first.rsplit(':').next().unwrap())])
    );
    drop(r);

    // The primary's node is lost; the operator promotes the mirror and starts mojim kv there.
    kv.kill();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &later]);
    assert_eq!(promoted.addr(), later);

    // The same client code: the first node does not answer, the second says it is the master.
    assert_eq!(python(&nodes, "read"), later);
    drop(mirror);
}

const PY_TLS: &str = r#"
import os, sys
from redis.sentinel import Sentinel
d = os.environ["CERTS"]
tls = dict(ssl=True, ssl_ca_certs=d + "/ca.pem", ssl_certfile=d + "/application.pem",
           ssl_keyfile=d + "/application.key", ssl_cert_reqs="required")
nodes = [tuple(a.rsplit(":", 1)) for a in os.environ["NODES"].split(",")]
nodes = [(h, int(p)) for h, p in nodes]
s = Sentinel(nodes, socket_timeout=2, sentinel_kwargs=dict(tls, socket_timeout=2))
host, port = s.discover_master("mojim")
m = s.master_for("mojim", socket_timeout=2, decode_responses=True, **tls)
if sys.argv[1] == "write":
    for i in range(200):
        assert m.set(f"k{i}", f"v{i}") is True
else:
    for i in range(200):
        assert m.get(f"k{i}") == f"v{i}", (i, m.get(f"k{i}"))
    assert m.set("after", "failover") is True
# The master connection really is TLS.
assert m.connection_pool.get_connection("PING")._sock.version().startswith("TLS")
print(f"{host}:{port}")
"#;

/// Fail-over over TLS: the cluster's links are mutual TLS (`[security] tls`), each `mojim kv`
/// serves its Redis clients over TLS too, and redis-py's Sentinel, connected over TLS, is named
/// the TLS port of the primary (a client in the clear is named the plaintext one), then the
/// promoted node's after the fail-over.
#[test]
fn redis_py_sentinel_follows_the_promotion_over_tls() {
    if python_with_redis().is_none() {
        return;
    }
    let (first_tls, later_tls) = (
        format!("127.0.0.1:{}", free_loopback_port().expect("a free port")),
        format!("127.0.0.1:{}", free_loopback_port().expect("a free port")),
    );
    let c = Cluster::new("kv-sentinel-tls", 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        edit_kv(f, |k| k.sentinel_name = "mojim".into());
        common::tls::configure(f);
        // mojim kv presents the node's certificate to its clients and asks for theirs.
        edit_kv(f, |k| {
            k.tls_cert_file = "tls/node.pem".into();
            k.tls_key_file = "tls/node.key".into();
            k.tls_ca_cert_file = "tls/ca.pem".into();
            k.tls_auth_clients = "yes".into();
        });
    });
    common::tls::make_certs(&c);
    let certs = c.dir.path().join("tls");
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr(), "--tls-listen", &first_tls]);
    let nodes = format!("{first_tls},{later_tls}");

    assert_eq!(python_with(PY_TLS, &nodes, "write", Some(&certs)), first_tls);
    // In the clear, the same server names its plaintext address.
    let mut r = Resp::connect(kv.addr());
    let (host, port) = kv.addr().rsplit_once(':').expect("host:port");
    assert_eq!(
        r.cmd(&["SENTINEL", "get-master-addr-by-name", "mojim"]),
        Value::Array(vec![Value::bulk(host), Value::bulk(port)])
    );
    drop(r);

    kv.kill();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let _promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--tls-listen", &later_tls]);
    assert_eq!(python_with(PY_TLS, &nodes, "read", Some(&certs)), later_tls);
    drop(mirror);
}

/// With `[kv] read_barrier`, a primary replaced by a promotion answers no further read: its
/// barrier group is refused, and it stops.
#[test]
fn a_replaced_primary_answers_no_read_with_the_read_barrier() {
    let c = Cluster::new("kv-barrier", 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        edit_kv(f, |k| k.read_barrier = true);
    });
    let backup = node(&c, "b", &[]);
    let mirror = node(&c, "m", &[backup.addr()]);
    let mut kv = start_kv(&c, &["--mirror", mirror.addr()]);
    let mut r = Resp::connect(kv.addr());
    assert_eq!(r.cmd(&["SET", "k", "old"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(r.cmd(&["GET", "k"]), Value::bulk("old"));
    // The mirror is promoted while this primary still runs (a partition would look the same
    // to the operator); the new primary takes a write.
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    let mut p = Resp::connect(promoted.addr());
    assert_eq!(p.cmd(&["SET", "k", "new"]), Value::Simple(b"OK".to_vec()));
    // The old primary must not answer the read from its old state.
    r.send(&[b"GET", b"k"]);
    assert_eq!(r.read(), None, "the replaced primary answered a read");
    let status = kv.wait_exit(common::WAIT).expect("the replaced primary's mojim kv stops");
    assert!(!status.success(), "the replaced primary's mojim kv should stop with an error");
    assert_eq!(p.cmd(&["GET", "k"]), Value::bulk("new"));
    drop(mirror);
}

/// A server cut off from its mirror names no master and reports itself down, so that clients
/// look for the new primary instead of writing to one that cannot acknowledge; once the
/// mirror is back it names itself again.
#[test]
fn a_server_without_its_mirror_does_not_name_itself_master() {
    let mut k = common::kv::KvCluster::new("kv-sentinel-cut-off", 16 << 20);
    let mut c = k.client();
    let me = k.addr();
    let (host, port) = me.rsplit_once(':').unwrap();
    let named = Value::Array(vec![Value::bulk(host), Value::bulk(port)]);
    assert_eq!(c.cmd(&["SENTINEL", "get-master-addr-by-name", "mojim"]), named);
    let mirror_addr = k.c.mirror_addr();
    k.c.kill_mirror();
    common::kv::wait_for("the server to stop naming itself master", || {
        (c.cmd(&["SENTINEL", "get-master-addr-by-name", "mojim"]) == Value::Null).then_some(())
    });
    let Value::Array(m) = c.cmd(&["SENTINEL", "masters"]) else { panic!("SENTINEL masters") };
    let Value::Array(fields) = &m[0] else { panic!("a master's fields") };
    let flags = fields.iter().position(|f| *f == Value::bulk("flags")).expect("flags");
    assert_eq!(fields[flags + 1], Value::bulk("master,s_down,o_down,disconnected"));
    k.c.start_mirror_with(&["--listen", &mirror_addr]);
    common::kv::wait_for("the server to name itself master again", || {
        (c.cmd(&["SENTINEL", "get-master-addr-by-name", "mojim"]) == named).then_some(())
    });
}
