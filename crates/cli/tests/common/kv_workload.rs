//! The client side of the linearizability tests of `mojim kv`: clients that run GET, SET and
//! APPEND one at a time on a few keys, follow fail-overs through the Sentinel subset, and
//! record a history for Porcupine (`common::porcupine`).

use super::kv::wait_for;
use super::porcupine::{check, to_json, Kind, Op};
use super::{Rng, WAIT};
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clients of a workload.
pub const CLIENTS: usize = 5;
/// Keys they use: `k0`, `k1`, ...
pub const KEYS: u64 = 3;
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

/// Shared by the clients and the test.
pub struct Shared {
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
    /// Panics, naming the seed and the kept history, unless it is linearizable.
    pub fn check(self, checker: &Path, faults: &str) {
        self.check_with(checker, faults, Vec::new(), true);
    }

    /// As [`Workload::check`], with `extra` operations of other clients added; when
    /// `linearizable` is false a violation is what is expected (and the history is removed).
    pub fn check_with(self, checker: &Path, faults: &str, extra: Vec<Op>, linearizable: bool) {
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

/// Reads every key, one GET at a time, on `conn` (a client that still reaches a replaced
/// primary), as process `process`; a read with no reply is left out.
pub fn reads_on(conn: &mut Conn, sh: &Shared) -> Vec<Op> {
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
