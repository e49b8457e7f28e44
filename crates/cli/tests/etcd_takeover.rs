//! Take-over under the etcd coordinator, with a real etcd: the mirror is found by its name, not
//! by how its address is spelled, and a primary frozen past its lease's validity does not delay
//! the take-over when it wakes up.

mod common;

use common::{Cluster, WAIT};
use mojim::coord::Coordinator;
use mojim::{Primary, PrimaryOptions};
use mojim_etcd::testing::EtcdServer;
use mojim_node::admin_client::AdminClient;
use mojim_tools::child::ChildNode;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn etcd_cluster(test: &str, etcd: &EtcdServer, ttl_ms: u64, renew_ms: u64, margin_ms: u64) -> Cluster {
    let endpoint = etcd.endpoint();
    Cluster::new(test, 1 << 20, |f| {
        f.cluster.coordinator = "etcd".into();
        f.cluster.etcd_endpoints = vec![endpoint.clone()];
        f.cluster.lease_ttl_ms = ttl_ms;
        f.cluster.lease_renew_ms = renew_ms;
        f.cluster.lease_margin_ms = margin_ms;
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
    })
}

/// `mojim serve` named `name`, listening on `listen`, feeding `backups`.
fn start_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let mut args = vec!["serve", "--config", c.cfg_path.to_str().unwrap(), "--listen", listen];
    args.extend(["--dir", dir.to_str().unwrap(), "--node", name]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(common::exe(), &args).expect("start a node")
}

fn coordinator(c: &Cluster) -> Coordinator {
    Coordinator::new(&c.cfg.etcd().expect("settings").expect("etcd settings")).expect("coordinator")
}

/// Waits until the roles in etcd are past `epoch`, and returns them.
fn await_takeover(coord: &Coordinator, epoch: u64, deadline: Instant) -> mojim::coord::Roles {
    loop {
        let (r, _) = coord.roles().expect("roles").expect("roles exist");
        if r.epoch > epoch {
            return r;
        }
        assert!(Instant::now() < deadline, "the mirror never took over: the roles stay {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_mirror_on_a_wildcard_address_takes_over_from_a_primary_that_spelt_it_otherwise() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    let c = etcd_cluster("etcd-takeover-names", &etcd, 1500, 300, 300);
    let backup = start_node(&c, "b", "127.0.0.1:0", &[]);
    // The mirror listens on every address; the primary reaches it as localhost.
    let mirror = start_node(&c, "m", "0.0.0.0:0", &[backup.addr()]);
    let port = mirror.addr().rsplit_once(':').expect("host:port").1;
    assert!(mirror.addr().starts_with("0.0.0.0:"), "{}", mirror.addr());
    let mut o = PrimaryOptions::from_config(&c.cfg, false).expect("options");
    o.mirror = format!("localhost:{port}");
    o.node = "a".into();
    let p = Primary::open(&o).expect("the first primary writes the roles and takes the lease");
    let epoch = p.status().epoch;
    p.write(0, b"acknowledged").expect("write");
    p.msync(0, 12).expect("msync");

    // The mirror names itself in the roles once the primary's session reaches it.
    let coord = coordinator(&c);
    let t0 = Instant::now();
    loop {
        let (r, _) = coord.roles().expect("roles").expect("roles exist");
        assert_eq!((r.epoch, r.mirror_addr.as_str()), (epoch, o.mirror.as_str()), "{r:?}");
        if r.mirror == "m" {
            break;
        }
        assert!(t0.elapsed() < WAIT, "the mirror never named itself in the roles: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its status (and metrics) say what it sees of etcd: reachable, the primary's lease held,
    // itself named the mirror.
    let addr = format!("127.0.0.1:{port}");
    let mut m = AdminClient::connect(&addr, &c.secret(), Duration::from_secs(5)).expect("admin");
    let st = common::wait_status(&mut m, "the mirror to see itself named", |st| {
        st.coordinator.as_ref().is_some_and(|c| c.named_mirror && c.primary_lease_held)
    });
    let seen = st.coordinator.expect("a coordinator");
    assert!(seen.reachable && seen.roles_epoch == epoch, "{seen:?}");

    // The primary's application dies; its lease expires.
    drop(p);
    let roles = await_takeover(&coord, epoch, Instant::now() + WAIT);
    assert_eq!((roles.primary.as_str(), roles.mirror_addr.as_str()), ("m", backup.addr()), "{roles:?}");
    common::wait_status(&mut m, "the mirror to be promoted", |st| st.role == "primary");
}

/// A `mojim bench-worker` (a primary in a process of its own, syncing a group every
/// millisecond) and its output lines.
struct Worker {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    fn start(c: &Cluster, mirror: &str, node: &str) -> Worker {
        let region = c.cfg.resolve(&c.cfg.file.region.path);
        let mut child = Command::new(common::exe())
            .args(["bench-worker", "--config", c.cfg_path.to_str().unwrap()])
            .args(["--region", region.to_str().unwrap(), "--mirror", mirror, "--node", node])
            .env("MOJIM_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the worker");
        let out = BufReader::new(child.stdout.take().expect("piped"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Worker { child, lines }
    }

    /// The next line, waiting at most until the deadline.
    fn line(&self) -> String {
        self.lines.recv_timeout(WAIT).expect("the worker said nothing for too long")
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("a pid");
        rustix::process::kill_process(pid, sig).expect("signal the worker");
    }

    /// SIGSTOP, returning once every thread of the worker has stopped.
    fn freeze(&self) {
        self.signal(rustix::process::Signal::STOP);
        mojim_tools::child::wait_stopped(self.child.id()).expect("the worker stops");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A stopped process dies of SIGKILL too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wall_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("after 1970").as_nanos() as u64
}

#[test]
fn a_primary_woken_past_its_lease_validity_lets_the_lease_go_at_once() {
    let Some(etcd) = EtcdServer::start_for_test() else { return };
    // Validity ends at most ttl - margin = 4 s after a freeze begins; etcd cannot expire the
    // lease before ttl - renew = 7.75 s after it (the last keepalive left at most one renewal
    // interval before the freeze). Woken 4.3 s in, the primary has over 3 s to revoke, room for
    // a loaded machine to schedule it (with 1.2 s it failed once under the full suite).
    let (ttl, renew, margin) =
        (Duration::from_millis(8000), Duration::from_millis(250), Duration::from_millis(4000));
    let c = etcd_cluster(
        "etcd-takeover-zombie",
        &etcd,
        ttl.as_millis() as u64,
        renew.as_millis() as u64,
        margin.as_millis() as u64,
    );
    let backup = start_node(&c, "b", "127.0.0.1:0", &[]);
    let mirror = start_node(&c, "m", "127.0.0.1:0", &[backup.addr()]);
    let coord = coordinator(&c);
    let worker = Worker::start(&c, mirror.addr(), "a");
    let first = worker.line();
    assert!(first.starts_with("open "), "{first}");
    let mut acks = 0;
    while acks < 20 {
        let l = worker.line();
        assert!(!l.starts_with("error"), "{l}");
        acks += l.starts_with("ack ") as u32;
    }
    let (roles, _) = coord.roles().expect("roles").expect("roles exist");
    // The mirror named itself, so a take-over can follow.
    let t0 = Instant::now();
    while coord.roles().expect("roles").expect("roles").0.mirror != "m" {
        assert!(t0.elapsed() < WAIT, "the mirror never named itself in the roles");
        std::thread::sleep(Duration::from_millis(20));
    }
    let settings = c.cfg.etcd().unwrap().unwrap();
    let client = etcd.client(Duration::from_secs(1));
    let key = format!("{}/leader", settings.prefix);
    assert!(client.get(&key).unwrap().is_some());

    // Frozen past its validity, woken before etcd could expire the lease. `frozen` is taken
    // before the signal: no keepalive sent before it can let etcd expire the lease before
    // `natural_expiry` below. The sleep counts from when every thread has stopped: SIGSTOP is
    // only queued, and the lease thread may still send a keepalive, extending the validity, in
    // between (on a loaded machine, past the 300 ms the sleep leaves after the validity).
    let frozen = Instant::now();
    worker.freeze();
    std::thread::sleep(ttl - margin + Duration::from_millis(300));
    assert!(
        client.get(&key).unwrap().is_some(),
        "the lease expired during the freeze: the test proves nothing"
    );
    let woken_ns = wall_ns();
    worker.signal(rustix::process::Signal::CONT);

    // A keepalive sent now would be honoured and keep the key for another ttl: the woken
    // primary must revoke its lease instead, before etcd could have expired it by itself.
    let natural_expiry = frozen + ttl - renew;
    while client.get(&key).unwrap().is_some() {
        assert!(
            Instant::now() + Duration::from_millis(250) < natural_expiry,
            "the woken primary kept its leader key: its lease was renewed, or not revoked"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The mirror takes over, and the woken primary acknowledged nothing after it woke. The
    // sync point in flight across the freeze fails either way: on the lease, or on the lane the
    // mirror closed while no heartbeat came (1.5 s into the freeze); which the primary sees
    // first is a race between its reader and its lease thread, and both refuse the group.
    let moved = await_takeover(&coord, roles.epoch, Instant::now() + WAIT);
    assert_eq!(moved.primary, "m", "{moved:?}");
    loop {
        let l = worker.line();
        if let Some(rest) = l.strip_prefix("ack ") {
            let ns: u64 = rest.split(' ').nth(1).and_then(|n| n.parse().ok()).expect("ack K NS");
            assert!(ns < woken_ns, "the woken primary acknowledged a group: {l}");
        } else if l.starts_with("error") {
            assert!(l.contains("lease") || l.contains("the mirror is lost"), "{l}");
            break;
        }
    }
}
