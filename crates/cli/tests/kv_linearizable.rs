//! Linearizability of `mojim kv` under faults, checked with Porcupine.
//!
//! Several clients run GET, SET and APPEND one at a time on a few keys, recording each
//! operation's invocation and response times and its result, while the primary's `mojim kv`
//! is killed with SIGKILL twice: once restarted on the same region, once replaced by a
//! promotion of its mirror (`mojim promote`, then `mojim kv` on the promoted node). Clients
//! whose connection dies find the current primary with `SENTINEL get-master-addr-by-name`
//! and go on. An operation whose reply never came is recorded with an unknown outcome.
//! The history goes to `tools/porcupine-check` (Porcupine's key-value model, partitioned by
//! key); a violation fails the test with the seed and the kept history file.

mod common;

use common::kv::{node, promote, start_kv_on_promoted, wait_for};
use common::netns::Netns;
use common::porcupine::{build_checker, check, go, to_json, Kind, Op};
use common::{exe, seed, Cluster, Rng, TempDir, WAIT};
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use mojim_tools::child::ChildNode;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: usize = 5;
const KEYS: u64 = 3;
/// Operations answered between two faults (and after the last).
const OPS_PER_PHASE: u64 = 3000;
/// Restarts of the primary's server on its own region before the promotion.
const RESTARTS: usize = 8;
/// How long a client waits for one reply before it counts the outcome as unknown.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection that reports every failure instead of panicking.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> std::io::Result<Conn> {
        let sa: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
        let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: Vec::new() })
    }

    fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Value> {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        self.stream.write_all(&req)?;
        let limits = Limits { max_bulk: 1 << 24, max_args: 1 << 10, max_inline: 1 << 16 };
        loop {
            if let Some((v, n)) =
                decode(&self.buf, &limits).map_err(|e| std::io::Error::other(format!("{e:?}")))?
            {
                self.buf.drain(..n);
                return Ok(v);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

/// The current primary, as the Sentinel subset of whichever node answers says; retried until
/// one does.
fn discover(nodes: &[String], stop: &AtomicBool) -> Option<Conn> {
    let t0 = Instant::now();
    loop {
        for n in nodes {
            let Ok(mut c) = Conn::open(n) else { continue };
            let Ok(Value::Array(a)) = c.call(&[b"SENTINEL", b"get-master-addr-by-name", b"mojim"]) else {
                continue;
            };
            let [Value::Bulk(h), Value::Bulk(p)] = &a[..] else { continue };
            let addr = format!("{}:{}", String::from_utf8_lossy(h), String::from_utf8_lossy(p));
            if let Ok(c) = Conn::open(&addr) {
                return Some(c);
            }
        }
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        assert!(t0.elapsed() < WAIT, "no node named a reachable primary within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Shared by the clients and the test.
struct Shared {
    t0: Instant,
    stop: AtomicBool,
    answered: AtomicU64,
    processes: AtomicUsize,
    nodes: Vec<String>,
    /// While set, clients wait between operations (counted in `parked`).
    paused: AtomicBool,
    parked: AtomicUsize,
    /// Raised to make every client drop its connection and find the primary again.
    rediscover: AtomicU64,
}

impl Shared {
    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }
}

/// One client: runs operations until told to stop; a new process id after each unknown outcome.
fn client(sh: Arc<Shared>, seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut process = sh.processes.fetch_add(1, Ordering::Relaxed);
    let mut n = 0u64;
    let mut generation = 0;
    while !sh.stop.load(Ordering::Relaxed) {
        if sh.paused.load(Ordering::Relaxed) {
            sh.parked.fetch_add(1, Ordering::Relaxed);
            while sh.paused.load(Ordering::Relaxed) && !sh.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            sh.parked.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        if sh.rediscover.load(Ordering::Relaxed) != generation {
            generation = sh.rediscover.load(Ordering::Relaxed);
            conn = None;
        }
        let mut c = match conn.take() {
            Some(c) => c,
            None => match discover(&sh.nodes, &sh.stop) {
                Some(c) => c,
                None => break,
            },
        };
        let key = format!("k{}", rng.range(0, KEYS - 1));
        let value = format!("p{process}n{n},");
        n += 1;
        let kind = match rng.range(0, 9) {
            0..=4 => Kind::Get,
            5..=7 => Kind::Set,
            _ => Kind::Append,
        };
        let args: Vec<&[u8]> = match kind {
            Kind::Get => vec![b"GET", key.as_bytes()],
            Kind::Set => vec![b"SET", key.as_bytes(), value.as_bytes()],
            Kind::Append => vec![b"APPEND", key.as_bytes(), value.as_bytes()],
        };
        let call = sh.now();
        let reply = c.call(&args);
        let ret = sh.now();
        let mut op = Op { client: process, kind, key, value, output: None, call, ret: Some(ret) };
        let ok = match (kind, &reply) {
            (Kind::Get, Ok(Value::Bulk(v))) => {
                op.output = Some(String::from_utf8(v.clone()).expect("values are text"));
                true
            }
            (Kind::Get, Ok(Value::Null)) => {
                op.output = Some(String::new());
                true
            }
            (Kind::Set, Ok(Value::Simple(s))) if s == b"OK" => true,
            (Kind::Append, Ok(Value::Int(_))) => true,
            (_, Err(_)) => false,
            (_, Ok(other)) => panic!("{kind:?} {} answered {other:?}", op.key),
        };
        if ok {
            sh.answered.fetch_add(1, Ordering::Relaxed);
            conn = Some(c);
        } else {
            // The connection died before the reply: the outcome is unknown, and this client
            // goes on as a new process (the old one's operation may still take effect).
            op.ret = None;
            process = sh.processes.fetch_add(1, Ordering::Relaxed);
        }
        ops.push(op);
    }
    ops
}

/// A port nothing listens on now, for a `mojim kv` started later.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    format!("127.0.0.1:{}", l.local_addr().expect("addr").port())
}

/// `mojim kv` on the cluster's own region at `listen`, mirrored to `mirror`.
fn start_primary(c: &Cluster, listen: &str, mirror: &str) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let args = ["kv", "--config", cfg, "--listen", listen, "--mirror", mirror];
    wait_for("mojim kv to start", || ChildNode::spawn(exe(), &args).ok())
}

/// Waits for `n` more answered operations.
fn progress(sh: &Shared, n: u64) {
    let goal = sh.answered.load(Ordering::Relaxed) + n;
    let t0 = Instant::now();
    while sh.answered.load(Ordering::Relaxed) < goal {
        assert!(
            t0.elapsed() < 2 * WAIT,
            "the clients got only {} operations answered (goal {goal})",
            sh.answered.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Where a history goes: kept on a violation, removed otherwise.
fn history_path(seed: u64) -> PathBuf {
    std::env::temp_dir().join(format!("mojim-kv-history-{}-{seed}.json", std::process::id()))
}

/// A running workload: the clients' threads and what they share.
struct Workload {
    sh: Arc<Shared>,
    clients: Vec<std::thread::JoinHandle<Vec<Op>>>,
    seed: u64,
}

impl Workload {
    /// Starts the clients, each seeded from `seed`, against the primary among `nodes`.
    fn start(seed: u64, nodes: Vec<String>) -> Workload {
        let sh = Arc::new(Shared {
            t0: Instant::now(),
            stop: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            processes: AtomicUsize::new(0),
            nodes,
            paused: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            rediscover: AtomicU64::new(0),
        });
        let clients = (0..CLIENTS)
            .map(|i| {
                let sh = sh.clone();
                let s = seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                std::thread::spawn(move || client(sh, s))
            })
            .collect();
        Workload { sh, clients, seed }
    }

    /// Stops the clients and checks their history with `checker`; `faults` says what was done.
    /// Waits until every client is parked between two operations.
    fn pause(&self) {
        self.sh.paused.store(true, Ordering::Relaxed);
        wait_for("the clients to pause", || {
            (self.sh.parked.load(Ordering::Relaxed) == CLIENTS).then_some(())
        });
    }

    /// Lets the clients go on, each finding the primary again first.
    fn resume(&self) {
        self.sh.rediscover.fetch_add(1, Ordering::Relaxed);
        self.sh.paused.store(false, Ordering::Relaxed);
    }

    /// Stops the clients and checks their history with `checker`; `faults` says what was done.
    /// Panics, naming the seed and the kept history, unless it is linearizable.
    fn check(self, checker: &std::path::Path, faults: &str) {
        self.check_with(checker, faults, Vec::new(), true);
    }

    /// As [`Workload::check`], with `extra` operations of other clients added; when
    /// `linearizable` is false a violation is what is expected (and the history is removed).
    fn check_with(self, checker: &std::path::Path, faults: &str, extra: Vec<Op>, linearizable: bool) {
        let Workload { sh, clients, seed } = self;
        sh.stop.store(true, Ordering::Relaxed);
        let mut ops: Vec<Op> =
            clients.into_iter().flat_map(|t| t.join().expect("a client panicked")).collect();
        ops.extend(extra);
        let ran = sh.t0.elapsed();
        ops.sort_by_key(|o| o.call);
        let pending = ops.iter().filter(|o| o.ret.is_none()).count();
        let path = history_path(seed);
        std::fs::write(&path, to_json(&ops)).expect("write the history");
        let html = path.with_extension("html");
        let t = Instant::now();
        let v = check(checker, &path, &html);
        println!(
            "{} operations ({pending} unknown) by {CLIENTS} clients on {KEYS} keys in {ran:?}, {faults}; \
             checked in {:?}: {}",
            ops.len(),
            t.elapsed(),
            v.output.trim()
        );
        if !linearizable {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&html);
            assert_eq!(v.code, 1, "expected a violation (seed {seed}): {}", v.output);
            return;
        }
        match v.code {
            0 => {
                let _ = std::fs::remove_file(&path);
            }
            1 => panic!(
                "not linearizable (seed {seed}, replay with MOJIM_TEST_SEED={seed}): history kept in {}, \
                 Porcupine's visualization in {}\n{}",
                path.display(),
                html.display(),
                v.output
            ),
            _ => panic!(
                "porcupine-check could not judge the history {} (seed {seed}): {}",
                path.display(),
                v.output
            ),
        }
    }
}

/// The cluster of the tests: the primary's region, a mirror `m` feeding a backup `b`, which
/// feeds `d` (the mirror of a second promotion). The nodes are returned last first.
fn cluster(test: &str, read_barrier: bool) -> (Cluster, ChildNode, ChildNode, ChildNode) {
    let c = Cluster::new(test, 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        f.kv.sentinel_name = "mojim".into();
        f.kv.read_barrier = read_barrier;
    });
    let last = node(&c, "d", &[]);
    let backup = node(&c, "b", &[last.addr()]);
    let mirror = node(&c, "m", &[backup.addr()]);
    (c, last, backup, mirror)
}

#[test]
fn kv_histories_under_kill_9_and_promotion_are_linearizable() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-tools");
    let checker = build_checker(&go, tools.path());
    let seed = seed("kv_linearizable");
    let (first, second, third) = (free_port(), free_port(), free_port());
    let (c, last, backup, mirror) = cluster("kv-linearizable", false);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let w = Workload::start(seed, vec![first.clone(), second.clone(), third.clone()]);

    // The primary's server is killed and restarted on the same region, a few times.
    for _ in 0..RESTARTS {
        progress(&w.sh, OPS_PER_PHASE);
        kv.kill();
        kv = start_primary(&c, &first, mirror.addr());
    }
    // Then the primary's node is lost; the mirror is promoted and serves.
    progress(&w.sh, OPS_PER_PHASE);
    kv.kill();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let mut promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    // And the new primary's is lost too: its mirror, the former backup, is promoted.
    progress(&w.sh, OPS_PER_PHASE);
    promoted.kill();
    promote(&c, backup.addr(), &[last.addr()]);
    let promoted = start_kv_on_promoted(&c, "b", last.addr(), &["--listen", &third]);
    progress(&w.sh, OPS_PER_PHASE);
    w.check(
        &checker,
        &format!("{} faults ({RESTARTS} kill -9 and restart, 2 kill -9 and promotion)", RESTARTS + 2),
    );
    drop(promoted);
    drop(mirror);
    drop(backup);
}

/// The primary is cut off (frozen with SIGSTOP: it holds its connections and answers nothing,
/// as in a partition), the mirror promoted, and the old primary comes back while clients
/// still wait on it: with `[kv] read_barrier` it must answer neither a write nor a read from
/// its old state.
#[test]
fn kv_histories_across_a_cut_off_primary_replaced_by_promotion_are_linearizable() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-cut-tools");
    let checker = build_checker(&go, tools.path());
    let seed = seed("kv_linearizable_cut_off");
    let (first, second) = (free_port(), free_port());
    let (c, _last, backup, mirror) = cluster("kv-linearizable-cut", true);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let w = Workload::start(seed, vec![first.clone(), second.clone()]);

    progress(&w.sh, OPS_PER_PHASE);
    kv.freeze().expect("SIGSTOP the primary");
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    // Back before its clients give up on it: what it still answers is in the history.
    kv.thaw().expect("SIGCONT the old primary");
    progress(&w.sh, 2 * OPS_PER_PHASE);
    let old = match kv.wait_exit(Duration::ZERO) {
        Some(s) => format!("the old primary stopped ({s})"),
        None => "the old primary still runs".to_string(),
    };
    w.check(&checker, &format!("1 fault (cut off, promotion, back); {old}"));
    drop(promoted);
    drop(mirror);
}

/// The pipeline can fail: a hand-made history with a stale read, written as the workload
/// writes its own, is reported as a violation, with a visualization.
#[test]
fn the_checker_reports_a_stale_read() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-stale");
    let checker = build_checker(&go, tools.path());
    let op = |client, kind, value: &str, output: Option<&str>, call, ret| Op {
        client,
        kind,
        key: "k0".into(),
        value: value.into(),
        output: output.map(String::from),
        call,
        ret,
    };
    let history = [
        op(0, Kind::Set, "old", None, 0, Some(10)),
        op(0, Kind::Set, "new", None, 20, Some(30)),
        op(1, Kind::Append, "x", None, 25, None),
        op(1, Kind::Get, "", Some("old"), 40, Some(50)),
    ];
    let path = tools.path().join("stale.json");
    let html = tools.path().join("stale.html");
    std::fs::write(&path, to_json(&history)).expect("write the history");
    let v = check(&checker, &path, &html);
    assert_eq!(v.code, 1, "a stale read was not reported: {}", v.output);
    assert!(html.exists(), "no visualization was written: {}", v.output);
    // The same history without the stale read passes.
    std::fs::write(&path, to_json(&history[..3])).expect("write the history");
    let v = check(&checker, &path, &html);
    assert_eq!(v.code, 0, "a linearizable history was refused: {}", v.output);
}

/// Reads every key, one GET at a time, on `conn` (a client that still reaches a replaced
/// primary), as process `process`; a read with no reply is left out.
fn reads_on(conn: &mut Conn, sh: &Shared) -> Vec<Op> {
    let process = sh.processes.fetch_add(1, Ordering::Relaxed);
    let mut ops = Vec::new();
    for k in 0..KEYS {
        let key = format!("k{k}");
        let call = sh.now();
        let reply = conn.call(&[b"GET", key.as_bytes()]);
        let ret = sh.now();
        let output = match reply {
            Ok(Value::Bulk(v)) => String::from_utf8(v).expect("values are text"),
            Ok(Value::Null) => String::new(),
            Ok(other) => panic!("GET {key} answered {other:?}"),
            Err(_) => break,
        };
        ops.push(Op {
            client: process,
            kind: Kind::Get,
            key,
            value: String::new(),
            output: Some(output),
            call,
            ret: Some(ret),
        });
    }
    ops
}

/// Split brain: the mirror is promoted while the primary still runs (as when the operator
/// believes it lost behind a partition) and the clients move to the new primary, but one
/// client still reaches the old one and reads every key there after the new primary has taken
/// writes. Returns after checking the history, linearizable or not as `read_barrier` says.
fn split_brain(test: &str, read_barrier: bool) {
    let Some(go) = go() else { return };
    let tools = TempDir::new(&format!("{test}-tools"));
    let checker = build_checker(&go, tools.path());
    let seed = seed(test);
    let (first, second) = (free_port(), free_port());
    let (c, _last, backup, mirror) = cluster(test, read_barrier);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let mut stale = Conn::open(&first).expect("connect to the primary");
    // The new primary's address comes first: once it serves, the clients find it there.
    let w = Workload::start(seed, vec![second.clone(), first.clone()]);
    progress(&w.sh, OPS_PER_PHASE);
    w.pause();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    w.resume();
    progress(&w.sh, OPS_PER_PHASE);
    let reads = reads_on(&mut stale, &w.sh);
    let answered = reads.len();
    // With the barrier, the refused read stops it; without, it runs on.
    let old = match kv.wait_exit(if read_barrier { WAIT } else { Duration::ZERO }) {
        Some(s) => format!("the old primary stopped ({s})"),
        None => "the old primary still runs".to_string(),
    };
    let faults = format!("promotion beside a running primary; {answered} reads answered there, {old}");
    w.check_with(&checker, &faults, reads, read_barrier);
    if read_barrier {
        assert_eq!(answered, 0, "the replaced primary answered reads");
    }
    kv.kill();
    drop(promoted);
    drop(mirror);
}

/// With `[kv] read_barrier`, the replaced primary answers no read: the history is linearizable.
#[test]
fn split_brain_with_the_read_barrier_is_linearizable() {
    split_brain("kv-split-barrier", true);
}

/// Without it, the replaced primary answers reads from its old state, and Porcupine must say
/// so: the check fails on a real server's history, not only on hand-made ones.
#[test]
fn split_brain_without_the_read_barrier_is_caught() {
    split_brain("kv-split-no-barrier", false);
}

/// `mojim args...` in site `i`'s network namespace, ready (retried while a promotion ends).
fn spawn_in(net: &Netns, i: usize, args: &[&str]) -> ChildNode {
    let ns = net.name(i);
    let mut a = vec!["netns", "exec", &ns, exe().to_str().expect("utf-8")];
    a.extend_from_slice(args);
    wait_for("a process in its namespace to start", || ChildNode::spawn(std::path::Path::new("ip"), &a).ok())
}

/// A real partition: the primary (site 0) is cut off from its mirror (site 1) by blackhole
/// routes while the clients, here, still reach both; the operator promotes the mirror, the
/// clients move to it, and one client still reads on the old primary. Checked as
/// [`split_brain`] is; then the partition heals.
fn partitioned(test: &str, read_barrier: bool) {
    let Some(go) = go() else { return };
    let mut net = match Netns::create(3) {
        Ok(n) => n,
        Err(e) => {
            common::skip(&format!("no network namespaces: {e}"));
            return;
        }
    };
    let tools = TempDir::new(&format!("{test}-tools"));
    let checker = build_checker(&go, tools.path());
    let seed = seed(test);
    let c = Cluster::new(test, 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        f.kv.sentinel_name = "mojim".into();
        f.kv.read_barrier = read_barrier;
    });
    let cfg = c.cfg_path.to_str().expect("utf-8").to_string();
    let dir = |n: &str| c.dir.path().join(n).to_str().expect("utf-8").to_string();
    let ips: Vec<String> = (0..3).map(|i| net.ip_of(i)).collect();
    let node_addr = |i: usize| format!("{}:7420", ips[i]);
    let kv_addr = |i: usize| format!("{}:6379", ips[i]);
    let (b, m) = (dir("b"), dir("m"));
    let _backup = spawn_in(&net, 2, &["serve", "--config", &cfg, "--listen", &node_addr(2), "--dir", &b]);
    let mirror_args =
        ["serve", "--config", &cfg, "--listen", &node_addr(1), "--dir", &m, "--backup", &node_addr(2)];
    let _mirror = spawn_in(&net, 1, &mirror_args);
    let mut kv =
        spawn_in(&net, 0, &["kv", "--config", &cfg, "--listen", &kv_addr(0), "--mirror", &node_addr(1)]);
    let mut stale = Conn::open(&kv_addr(0)).expect("connect to the primary");
    let w = Workload::start(seed, vec![kv_addr(1), kv_addr(0)]);
    progress(&w.sh, OPS_PER_PHASE);
    w.pause();
    net.partition(0, 1).expect("cut the primary off from its mirror");
    promote(&c, &node_addr(1), &[&node_addr(2)]);
    let region = format!("{m}/data.mojim");
    let promoted = spawn_in(
        &net,
        1,
        &["kv", "--config", &cfg, "--region", &region, "--mirror", &node_addr(2), "--listen", &kv_addr(1)],
    );
    w.resume();
    progress(&w.sh, OPS_PER_PHASE);
    let reads = reads_on(&mut stale, &w.sh);
    let answered = reads.len();
    net.heal().expect("heal the partition");
    let old = match kv.wait_exit(if read_barrier { WAIT } else { Duration::ZERO }) {
        Some(s) => format!("after healing the old primary stopped ({s})"),
        None => "after healing the old primary still runs".to_string(),
    };
    let faults = format!("partition and promotion; {answered} reads answered on the cut-off primary, {old}");
    w.check_with(&checker, &faults, reads, read_barrier);
    if read_barrier {
        assert_eq!(answered, 0, "the cut-off primary answered reads");
    }
    kv.kill();
    drop(promoted);
}

/// With `[kv] read_barrier`, the cut-off primary answers no read: linearizable.
#[test]
fn partition_with_the_read_barrier_is_linearizable() {
    partitioned("kv-part-barrier", true);
}

/// Without it, the cut-off primary answers reads from its old state, and Porcupine says so.
#[test]
fn partition_without_the_read_barrier_is_caught() {
    partitioned("kv-part-no-barrier", false);
}
