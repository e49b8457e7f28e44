//! The client side of the linearizability tests of `mojim kv`: clients that run commands one at
//! a time on a few string keys (GET, SET, APPEND), list keys (RPUSH, LPUSH, LPOP, LRANGE) and
//! sorted-set keys (ZADD, ZINCRBY, ZREM, ZRANGE, ZPOPMIN), follow
//! fail-overs through the Sentinel subset (one primary) or, against a Redis Cluster of `mojim
//! kv` shards, route each key by `CLUSTER SLOTS` and follow `MOVED` and `ASK`, and record a
//! history for Porcupine (`common::porcupine`).

use super::kv::wait_for;
use super::porcupine::{check, to_json, Kind, Op, Output};
use super::{Rng, WAIT};
use mojim_kv::cluster::slot::key_slot;
use mojim_kv::cluster::topology::SLOTS;
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clients of a workload.
pub const CLIENTS: usize = 5;
/// Keys of each type they use: strings `k0`, `k1`, ..., lists `l0`, ..., sorted sets `z0`, ...
/// (the checker goes by the ops, the names are for the reader).
pub const KEYS: u64 = 3;
/// The members the sorted-set commands use, per key: few, so that ZADD updates and ZREM
/// finds members often.
const MEMBERS: u64 = 6;
/// How long a client waits for one reply before it counts the outcome as unknown.
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection that reports every failure instead of panicking.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(addr: &str) -> std::io::Result<Conn> {
        let sa: SocketAddr = addr.parse().map_err(std::io::Error::other)?;
        let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: Vec::new() })
    }

    pub fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Value> {
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

/// How the clients find where a command goes.
pub enum Routing {
    /// One primary among the nodes, found through the Sentinel subset; keys `k0`, `l0`, `z0`,
    /// ... ([`KEYS`] of each type).
    Sentinel,
    /// A Redis Cluster whose nodes the workload was given: each client learns the slots'
    /// owners from `CLUSTER SLOTS`, follows `MOVED` (updating its map) and `ASK` (`ASKING`,
    /// then the command, on the named node), and after a dead connection reads `CLUSTER SLOTS`
    /// again from any node that answers. String `i` carries the hash tag `tags[i]` (`{tag}k0`),
    /// list and sorted set `i` the tag `collections[i]` (`{tag}l0`, `{tag}z0`; as many as
    /// `tags`), so the test chooses each key's slot.
    Cluster { tags: Vec<String>, collections: Vec<String> },
}

/// Shared by the clients and the test.
pub struct Shared {
    t0: Instant,
    routing: Routing,
    /// `MOVED` and `ASK` replies the clients followed.
    moved: AtomicU64,
    asked: AtomicU64,
    /// Error replies other than redirects, by their first word: each counted as an unknown
    /// outcome.
    errors: Mutex<HashMap<String, u64>>,
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

    /// How many keys of each type the clients use.
    pub fn keys(&self) -> u64 {
        match &self.routing {
            Routing::Sentinel => KEYS,
            Routing::Cluster { tags, .. } => tags.len() as u64,
        }
    }

    /// The name of key `i` of type `t`.
    pub fn key_name(&self, t: char, i: u64) -> String {
        match &self.routing {
            Routing::Sentinel => format!("{t}{i}"),
            Routing::Cluster { tags, .. } if t == 'k' => format!("{{{}}}{t}{i}", tags[i as usize]),
            Routing::Cluster { collections, .. } => format!("{{{}}}{t}{i}", collections[i as usize]),
        }
    }

    /// Every key the clients may use, with its type.
    pub fn all_keys(&self) -> Vec<(char, String)> {
        key_types().iter().flat_map(|&t| (0..self.keys()).map(move |i| (t, self.key_name(t, i)))).collect()
    }

    /// The `MOVED` and the `ASK` replies the clients followed so far.
    pub fn redirects(&self) -> (u64, u64) {
        (self.moved.load(Ordering::Relaxed), self.asked.load(Ordering::Relaxed))
    }
}

/// The key types the clients use.
fn key_types() -> &'static [char] {
    &['k', 'l', 'z']
}

/// The operation a client runs next, its times and output not yet filled in. Each key type
/// gets an equal share; within a type, reads are a quarter to a half, and a list's pushes and
/// pops balance so that lists stay short. `value` is unique to the operation (`p<process>n<n>`),
/// but a sorted-set operation's is one of a few members.
fn next_op(sh: &Shared, rng: &mut Rng, process: usize, n: u64) -> Op {
    let types = key_types();
    let t = types[rng.range(0, types.len() as u64 - 1) as usize];
    let key = sh.key_name(t, rng.range(0, sh.keys() - 1));
    let mut value = format!("p{process}n{n}");
    let mut score = None;
    let roll = rng.range(0, 99);
    let kind = match t {
        'k' => match roll {
            0..=49 => Kind::Get,
            50..=79 => Kind::Set,
            _ => {
                value.push(',');
                Kind::Append
            }
        },
        'l' => match roll {
            0..=19 => Kind::Rpush,
            20..=34 => Kind::Lpush,
            35..=69 => Kind::Lpop,
            _ => Kind::Lrange,
        },
        _ => {
            value = format!("m{}", rng.range(0, MEMBERS - 1));
            match roll {
                0..=24 => {
                    score = Some(rng.range(0, 40) as i64 - 20);
                    Kind::Zadd
                }
                25..=44 => {
                    score = Some(rng.range(0, 10) as i64 - 5);
                    Kind::Zincrby
                }
                45..=59 => Kind::Zrem,
                60..=84 => Kind::Zrange,
                _ => Kind::Zpopmin,
            }
        }
    };
    if matches!(kind, Kind::Lpop | Kind::Lrange | Kind::Zrange | Kind::Zpopmin | Kind::Get) {
        value.clear();
    }
    Op { client: process, kind, key, value, score, output: None, call: 0, ret: None }
}

/// The command that runs `op`; `score` is its score's text.
fn command<'a>(op: &'a Op, score: Option<&'a str>) -> Vec<&'a [u8]> {
    let (k, v) = (op.key.as_bytes(), op.value.as_bytes());
    let s = score.unwrap_or_default().as_bytes();
    match op.kind {
        Kind::Get => vec![b"GET", k],
        Kind::Set => vec![b"SET", k, v],
        Kind::Append => vec![b"APPEND", k, v],
        Kind::Rpush => vec![b"RPUSH", k, v],
        Kind::Lpush => vec![b"LPUSH", k, v],
        Kind::Lpop => vec![b"LPOP", k],
        Kind::Lrange => vec![b"LRANGE", k, b"0", b"-1"],
        Kind::Zadd => vec![b"ZADD", k, s, v],
        Kind::Zincrby => vec![b"ZINCRBY", k, s, v],
        Kind::Zrem => vec![b"ZREM", k, v],
        Kind::Zrange => vec![b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"],
        Kind::Zpopmin => vec![b"ZPOPMIN", k],
    }
}

fn text(v: Vec<u8>) -> String {
    String::from_utf8(v).expect("values, members and scores are text")
}

/// `op`'s output from its reply; panics, naming the operation, on a reply of the wrong form (an
/// error reply included: no command here may fail).
fn output(op: &Op, reply: Value) -> Option<Output> {
    let list = |items: Vec<Value>| -> Option<Vec<String>> {
        items.into_iter().map(|i| if let Value::Bulk(b) = i { Some(text(b)) } else { None }).collect()
    };
    match (op.kind, reply) {
        (Kind::Get, Value::Bulk(v)) => Some(Output::Text(text(v))),
        (Kind::Get, Value::Null) => Some(Output::Text(String::new())),
        (Kind::Set, Value::Simple(s)) if s == b"OK" => None,
        (Kind::Append, Value::Int(_)) => None,
        (Kind::Rpush | Kind::Lpush | Kind::Zadd | Kind::Zrem, Value::Int(n)) => Some(Output::Int(n)),
        (Kind::Lpop, Value::Bulk(v)) | (Kind::Zincrby, Value::Bulk(v)) => Some(Output::Text(text(v))),
        (Kind::Lpop, Value::Null) => Some(Output::Nil),
        (Kind::Lrange | Kind::Zrange | Kind::Zpopmin, Value::Array(items)) => match list(items) {
            Some(l) => Some(Output::List(l)),
            None => panic!("{:?} {} answered an array of other than bulk strings", op.kind, op.key),
        },
        (_, other) => panic!("{:?} {} {} answered {other:?}", op.kind, op.key, op.value),
    }
}

/// `CLUSTER SLOTS` as (first slot, last slot, "host:port" of the primary); `None` for an
/// answer of another form.
pub fn parse_cluster_slots(reply: &Value) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = reply else { return None };
    let mut out = Vec::new();
    for r in ranges {
        let Value::Array(f) = r else { return None };
        let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(node))) =
            (f.first(), f.get(1), f.get(2))
        else {
            return None;
        };
        let (Some(Value::Bulk(h)), Some(Value::Int(p))) = (node.first(), node.get(1)) else { return None };
        let (a, b) = (u16::try_from(*a).ok()?, u16::try_from(*b).ok()?);
        out.push((a, b, format!("{}:{p}", String::from_utf8_lossy(h))));
    }
    Some(out)
}

/// A cluster client's view of the slots and its connections, one per node.
struct Router {
    /// Every node heard of: the workload's nodes, then those `CLUSTER SLOTS` and redirects named.
    addrs: Vec<String>,
    /// Each slot's owner, an index in `addrs` (`usize::MAX`: unknown).
    owners: Vec<usize>,
    conns: HashMap<String, Conn>,
    /// Set after a dead connection: `CLUSTER SLOTS` is read again before the next command.
    stale: bool,
    /// The node asked first next time: each reading starts one further, so that a node with an
    /// old topology (cut off from etcd) is not the only one ever asked.
    next: usize,
}

impl Router {
    fn new(nodes: &[String]) -> Router {
        Router {
            addrs: nodes.to_vec(),
            owners: vec![usize::MAX; usize::from(SLOTS)],
            conns: HashMap::new(),
            stale: true,
            next: 0,
        }
    }

    fn index(&mut self, addr: &str) -> usize {
        match self.addrs.iter().position(|a| a == addr) {
            Some(i) => i,
            None => {
                self.addrs.push(addr.to_string());
                self.addrs.len() - 1
            }
        }
    }

    /// Reads `CLUSTER SLOTS` from the first node that answers, retried until one does; `false`
    /// when the workload stops first.
    fn refresh(&mut self, sh: &Shared) -> bool {
        let t0 = Instant::now();
        loop {
            let n = self.addrs.len();
            self.next = (self.next + 1) % n;
            for addr in (0..n).map(|i| self.addrs[(self.next + i) % n].clone()) {
                let Ok(mut c) = Conn::open(&addr) else { continue };
                let Some(slots) = c.call(&[b"CLUSTER", b"SLOTS"]).ok().as_ref().and_then(parse_cluster_slots)
                else {
                    continue;
                };
                self.owners.iter_mut().for_each(|o| *o = usize::MAX);
                for (a, b, owner) in slots {
                    let i = self.index(&owner);
                    self.owners[usize::from(a)..=usize::from(b)].iter_mut().for_each(|o| *o = i);
                }
                self.stale = false;
                return true;
            }
            if sh.stop.load(Ordering::Relaxed) {
                return false;
            }
            assert!(
                t0.elapsed() < WAIT,
                "no node of {:?} answered CLUSTER SLOTS within {WAIT:?}",
                self.addrs
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The connection to `addr`, opened if there is none.
    fn conn(&mut self, addr: &str) -> std::io::Result<&mut Conn> {
        if !self.conns.contains_key(addr) {
            let c = Conn::open(addr)?;
            self.conns.insert(addr.to_string(), c);
        }
        Ok(self.conns.get_mut(addr).expect("inserted above"))
    }

    /// Runs `args` on the owner of `key`'s slot, following redirects; `None` when the outcome
    /// is unknown (the connection died before the reply, or an error other than a redirect
    /// came back), or the workload stopped before the command was sent.
    fn call(&mut self, sh: &Shared, key: &str, args: &[&[u8]]) -> Option<Value> {
        let slot = usize::from(key_slot(key.as_bytes()));
        let mut ask: Option<String> = None;
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < WAIT, "no node served {key} (slot {slot}) within {WAIT:?}");
            if self.stale && !self.refresh(sh) {
                return None;
            }
            let addr = match ask.take() {
                Some(a) => {
                    ask = Some(a.clone());
                    a
                }
                None => match self.owners[slot] {
                    usize::MAX => {
                        self.stale = true;
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    i => self.addrs[i].clone(),
                },
            };
            let Ok(conn) = self.conn(&addr) else {
                // Nothing was sent: read the slots again and retry.
                self.stale = true;
                ask = None;
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            if ask.is_some() {
                match conn.call(&[b"ASKING"]) {
                    Ok(Value::Simple(ok)) if ok == b"OK" => {}
                    Ok(other) => panic!("ASKING on {addr} answered {other:?}"),
                    Err(_) => {
                        self.conns.remove(&addr);
                        self.stale = true;
                        ask = None;
                        continue;
                    }
                }
            }
            // ASK holds for this one command.
            ask = None;
            let reply = match conn.call(args) {
                Ok(v) => v,
                Err(_) => {
                    self.conns.remove(&addr);
                    self.stale = true;
                    return None;
                }
            };
            let Value::Error(e) = reply else { return Some(reply) };
            let e = String::from_utf8_lossy(&e).into_owned();
            let words: Vec<&str> = e.split(' ').collect();
            match words[..] {
                ["MOVED", s, to] if s.parse() == Ok(slot) => {
                    let i = self.index(to);
                    self.owners[slot] = i;
                    sh.moved.fetch_add(1, Ordering::Relaxed);
                }
                ["ASK", s, to] if s.parse() == Ok(slot) => {
                    ask = Some(to.to_string());
                    sh.asked.fetch_add(1, Ordering::Relaxed);
                }
                // Not run: a moment without an owner, or keys on both sides of a move.
                ["TRYAGAIN", ..] | ["CLUSTERDOWN", ..] => {
                    *sh.errors.lock().expect("not poisoned").entry(words[0].to_string()).or_default() += 1;
                    self.stale = true;
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    // Whether it ran is not known (e.g. a primary that lost its lease).
                    *sh.errors.lock().expect("not poisoned").entry(words[0].to_string()).or_default() += 1;
                    self.conns.remove(&addr);
                    self.stale = true;
                    return None;
                }
            }
        }
    }
}

/// Where a client sends its commands.
enum Route {
    /// The primary, found through the Sentinel subset (`None` until found).
    Sentinel(Option<Conn>),
    Cluster(Router),
}

impl Route {
    /// Drops every connection: the next command finds its node again.
    fn forget(&mut self) {
        match self {
            Route::Sentinel(c) => *c = None,
            Route::Cluster(r) => {
                r.conns.clear();
                r.stale = true;
            }
        }
    }

    /// Runs `args` (an operation on `key`); `Err(true)` when its outcome is unknown, `Err(false)`
    /// when the workload stopped before it was sent.
    fn call(&mut self, sh: &Shared, key: &str, args: &[&[u8]]) -> Result<Value, bool> {
        match self {
            Route::Sentinel(conn) => {
                let mut c = match conn.take() {
                    Some(c) => c,
                    None => discover(&sh.nodes, &sh.stop).ok_or(false)?,
                };
                let reply = c.call(args).map_err(|_| true)?;
                *conn = Some(c);
                Ok(reply)
            }
            Route::Cluster(r) => r.call(sh, key, args).ok_or(true),
        }
    }
}

/// One client: runs operations until told to stop; a new process id after each unknown outcome.
fn client(sh: Arc<Shared>, seed: u64) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut route = match &sh.routing {
        Routing::Sentinel => Route::Sentinel(None),
        Routing::Cluster { .. } => Route::Cluster(Router::new(&sh.nodes)),
    };
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
            route.forget();
        }
        let mut op = next_op(&sh, &mut rng, process, n);
        n += 1;
        let score = op.score.map(|s| s.to_string());
        let args = command(&op, score.as_deref());
        let call = sh.now();
        let reply = route.call(&sh, &op.key, &args);
        let ret = sh.now();
        op.call = call;
        match reply {
            Ok(v) => {
                op.output = output(&op, v);
                op.ret = Some(ret);
                sh.answered.fetch_add(1, Ordering::Relaxed);
            }
            // Stopped before it was sent: not an operation.
            Err(false) => break,
            Err(true) => {
                // The connection died before the reply: the outcome is unknown, and this
                // client goes on as a new process (the old one's operation may still take
                // effect).
                process = sh.processes.fetch_add(1, Ordering::Relaxed);
            }
        }
        ops.push(op);
    }
    ops
}

/// Waits for `n` more answered operations.
pub fn progress(sh: &Shared, n: u64) {
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

/// Waits for `n` more answered operations, or until `deadline`, whichever comes first;
/// returns how many were answered meanwhile.
pub fn progress_until(sh: &Shared, n: u64, deadline: Instant) -> u64 {
    let start = sh.answered.load(Ordering::Relaxed);
    while sh.answered.load(Ordering::Relaxed) < start + n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    sh.answered.load(Ordering::Relaxed) - start
}

/// Where a history goes: kept on a violation, removed otherwise.
fn history_path(seed: u64) -> PathBuf {
    std::env::temp_dir().join(format!("mojim-kv-history-{}-{seed}.json", std::process::id()))
}

/// A running workload: the clients' threads and what they share.
pub struct Workload {
    pub sh: Arc<Shared>,
    clients: Vec<std::thread::JoinHandle<Vec<Op>>>,
    seed: u64,
}

impl Workload {
    /// Starts the clients, each seeded from `seed`, against the primary among `nodes`.
    pub fn start(seed: u64, nodes: Vec<String>) -> Workload {
        Workload::start_routed(seed, nodes, Routing::Sentinel)
    }

    /// Starts the clients, each seeded from `seed`, against `nodes` routed as `routing` says.
    pub fn start_routed(seed: u64, nodes: Vec<String>, routing: Routing) -> Workload {
        if let Routing::Cluster { tags, collections } = &routing {
            assert!(!tags.is_empty(), "a cluster workload needs at least one key of each type");
            assert_eq!(tags.len(), collections.len(), "as many collections' tags as strings'");
        }
        let sh = Arc::new(Shared {
            t0: Instant::now(),
            routing,
            moved: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            errors: Mutex::new(HashMap::new()),
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
    pub fn pause(&self) {
        self.sh.paused.store(true, Ordering::Relaxed);
        wait_for("the clients to pause", || {
            (self.sh.parked.load(Ordering::Relaxed) == CLIENTS).then_some(())
        });
    }

    /// Lets the clients go on, each finding the primary again first.
    pub fn resume(&self) {
        self.sh.rediscover.fetch_add(1, Ordering::Relaxed);
        self.sh.paused.store(false, Ordering::Relaxed);
    }

    /// Stops the clients and checks their history with `checker`; `faults` says what was done.
    /// Panics, naming the seed and the kept history, unless it is linearizable. Returns the
    /// history.
    pub fn check(self, checker: &Path, faults: &str) -> Vec<Op> {
        self.check_with(checker, faults, Vec::new(), true)
    }

    /// As [`Workload::check`], with `extra` operations of other clients added; when
    /// `linearizable` is false a violation is what is expected (and the history is removed).
    pub fn check_with(self, checker: &Path, faults: &str, extra: Vec<Op>, linearizable: bool) -> Vec<Op> {
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
        let errors = sh.errors.lock().expect("not poisoned").clone();
        let routing = match sh.routing {
            Routing::Sentinel => String::new(),
            Routing::Cluster { .. } => {
                let (moved, asked) = sh.redirects();
                format!("; redirects followed: {moved} MOVED, {asked} ASK; error replies {errors:?}")
            }
        };
        println!(
            "{} operations ({pending} unknown) by {CLIENTS} clients on {} keys of each type (strings, lists, \
             sorted sets) in {ran:?}, {faults}{routing}; checked in {:?}: {}",
            ops.len(),
            sh.keys(),
            t.elapsed(),
            v.output.trim()
        );
        if !linearizable {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&html);
            assert_eq!(v.code, 1, "expected a violation (seed {seed}): {}", v.output);
            return ops;
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
        ops
    }
}

/// Reads every key, one at a time (GET, LRANGE k 0 -1, ZRANGE k 0 -1 WITHSCORES), on `conn` (a
/// client that still reaches a replaced primary), as a process of its own; a read with no
/// reply, and every read after it, is left out.
pub fn reads_on(conn: &mut Conn, sh: &Shared) -> Vec<Op> {
    let process = sh.processes.fetch_add(1, Ordering::Relaxed);
    let mut ops = Vec::new();
    for &t in key_types() {
        let kind = match t {
            'k' => Kind::Get,
            'l' => Kind::Lrange,
            _ => Kind::Zrange,
        };
        for k in 0..sh.keys() {
            let mut op = Op {
                client: process,
                kind,
                key: sh.key_name(t, k),
                value: String::new(),
                score: None,
                output: None,
                call: sh.now(),
                ret: None,
            };
            let Ok(reply) = conn.call(&command(&op, None)) else { return ops };
            op.ret = Some(sh.now());
            op.output = output(&op, reply);
            ops.push(op);
        }
    }
    ops
}

/// `SET key <unique value>` on `conn` (a client that still reaches a replaced primary), as a
/// process of its own: the operation, with no reply (unknown outcome) when the connection
/// died, timed out or answered an error.
pub fn write_on(conn: &mut Conn, sh: &Shared, key: &str) -> Op {
    let process = sh.processes.fetch_add(1, Ordering::Relaxed);
    let mut op = Op {
        client: process,
        kind: Kind::Set,
        key: key.to_string(),
        value: format!("p{process}stale"),
        score: None,
        output: None,
        call: sh.now(),
        ret: None,
    };
    if let Ok(Value::Simple(ok)) = conn.call(&command(&op, None)) {
        if ok == b"OK" {
            op.ret = Some(sh.now());
        }
    }
    op
}
