//! The servers `mojim bench --kv` measures, each started by the benchmark on loopback and
//! stopped (its files removed) when dropped:
//!
//! - `redis-none`: redis-server without persistence (`save ""`, `appendonly no`);
//! - `redis-aof-always`: `appendonly yes`, `appendfsync always`, its files on `--disk-dir`
//!   (a disk: an fsync on tmpfs would cost nothing);
//! - `redis-wait1`: a redis-server without persistence and a replica of it (`replicaof`) on
//!   loopback; the load follows every write with `WAIT 1 0`;
//! - `redis-waitaof`: a redis-server and a replica of it, both with `appendonly yes` and
//!   `appendfsync always` on `--disk-dir`; the load follows every write, once its reply is in,
//!   with `WAITAOF 1 1 0` (the write is in the primary's and the replica's fsynced AOF;
//!   [`Wait::pipelined`] says why not at once). WAITAOF came with Redis 7.2: [`check_version`]
//!   refuses an older redis-server;
//! - `mojim-sync`: `mojim kv` on a region in mode `sync`, its mirror (`mojim serve`) on loopback;
//! - `mojim-cluster`: a Redis Cluster of `--shards` such shards, each `mojim kv --cluster` with
//!   its mirror, the topology in an etcd the benchmark starts ([`super::shards`]).

use super::client::RespClient;
use super::janitor::Janitor;
use super::resp::Value;
use crate::child::ChildNode;
use mojim::config::{random_uuid, template, write_private, ConfigFile, RegionId};
use mojim::error::{Error, Result};
use mojim_kv::KvSection;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer PING after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Target {
    /// `mojim kv` in mode sync, its mirror on loopback.
    MojimSync,
    /// The same with its mirror reached through shared memory (`transport = "shm"`).
    MojimSyncShm,
    /// redis-server, no persistence.
    RedisNone,
    /// redis-server, appendonly yes, appendfsync always.
    RedisAofAlways,
    /// redis-server and a replica; `WAIT 1 0` after every write.
    RedisWait1,
    /// redis-server and a replica, both appendonly yes and appendfsync always; `WAITAOF 1 1 0`
    /// after every write (Redis 7.2 or newer).
    RedisWaitaof,
    /// A cluster of `--shards` shards, each `mojim kv --cluster` in mode sync with its mirror.
    MojimCluster,
}

/// Every target, in the order tables show them.
pub const ALL_TARGETS: [Target; 7] = [
    Target::MojimSync,
    Target::MojimCluster,
    Target::MojimSyncShm,
    Target::RedisNone,
    Target::RedisAofAlways,
    Target::RedisWait1,
    Target::RedisWaitaof,
];

/// What the load sends after every write, and waits for, before the write counts as done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing: the write's own reply.
    None,
    /// `WAIT 1 0`: a replica has the write (in its memory).
    Replica,
    /// `WAITAOF 1 1 0`: the write is in the primary's fsynced AOF and in a replica's.
    Aof,
}

impl Wait {
    /// The request, as RESP bytes (empty for [`Wait::None`]).
    pub fn request(self) -> &'static [u8] {
        match self {
            Wait::None => b"",
            Wait::Replica => b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$1\r\n0\r\n",
            Wait::Aof => b"*4\r\n$7\r\nWAITAOF\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\n0\r\n",
        }
    }

    /// Whether the wait is sent right behind its write, or only once the write's reply is in.
    ///
    /// `WAIT 1 0` goes with the write, in one round trip. `WAITAOF 1 1 0` waits: sent with
    /// the write, the primary's request for an acknowledgement (`REPLCONF GETACK`) reaches the
    /// replica in the same read as the write, and Redis 7.2's replica answers it before its
    /// `appendfsync always` fsync of that write (in the event loop's `beforeSleep`), then says
    /// nothing more until its once-a-second acknowledgement: every write took about 1 s
    /// (7.2.6, measured). Sent after the write's reply, it costs a round trip and mostly finds the
    /// replica's fsync done.
    pub fn pipelined(self) -> bool {
        self != Wait::Aof
    }

    /// The command as a user would type it.
    pub fn name(self) -> &'static str {
        match self {
            Wait::None => "",
            Wait::Replica => "WAIT 1 0",
            Wait::Aof => "WAITAOF 1 1 0",
        }
    }

    /// Whether `v` is the answer of a wait that was met.
    pub fn met(self, v: &Value) -> bool {
        match (self, v) {
            (Wait::None, _) => true,
            (Wait::Replica, Value::Int(n)) => *n >= 1,
            (Wait::Aof, Value::Array(Some(a))) => {
                a.len() == 2 && a.iter().all(|x| matches!(x, Value::Int(n) if *n >= 1))
            }
            _ => false,
        }
    }
}

impl Target {
    /// The name used in flags and results.
    pub fn name(self) -> &'static str {
        match self {
            Target::MojimSync => "mojim-sync",
            Target::MojimSyncShm => "mojim-sync-shm",
            Target::RedisNone => "redis-none",
            Target::RedisAofAlways => "redis-aof-always",
            Target::RedisWait1 => "redis-wait1",
            Target::RedisWaitaof => "redis-waitaof",
            Target::MojimCluster => "mojim-cluster",
        }
    }

    /// The short name of a ratio's column (`ops÷wait1`).
    pub fn short(self) -> &'static str {
        match self {
            Target::MojimSync => "mojim",
            Target::MojimSyncShm => "mojim-shm",
            Target::RedisNone => "none",
            Target::RedisAofAlways => "aof",
            Target::RedisWait1 => "wait1",
            Target::RedisWaitaof => "waitaof",
            Target::MojimCluster => "cluster",
        }
    }

    /// Whether this is one of the Redis configurations.
    pub fn is_redis(self) -> bool {
        !matches!(self, Target::MojimSync | Target::MojimSyncShm | Target::MojimCluster)
    }

    /// Whether this is a cluster of shards (the load sends each key to its slot's owner).
    pub fn is_cluster(self) -> bool {
        self == Target::MojimCluster
    }

    /// What the load sends after every write.
    pub fn wait(self) -> Wait {
        match self {
            Target::RedisWait1 => Wait::Replica,
            Target::RedisWaitaof => Wait::Aof,
            _ => Wait::None,
        }
    }

    /// Whether the load follows every write with a wait (which redis-benchmark cannot send).
    pub fn waits(self) -> bool {
        self.wait() != Wait::None
    }
}

/// The version of a redis-server, as `redis-server --version` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisVersion {
    /// `7.2.6`.
    pub text: String,
    /// Major, minor and patch.
    pub parts: (u32, u32, u32),
}

impl std::fmt::Display for RedisVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Reads the version out of `redis-server --version` (`Redis server v=7.2.6 sha=...`).
pub fn parse_version(said: &str) -> Option<RedisVersion> {
    let v = said.split_whitespace().find_map(|w| w.strip_prefix("v="))?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    let parts = (it.next()??, it.next().flatten().unwrap_or(0), it.next().flatten().unwrap_or(0));
    Some(RedisVersion { text: v.to_string(), parts })
}

/// Runs `bin --version` and reads its version.
pub fn redis_version(bin: &Path) -> Result<RedisVersion> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .map_err(Error::io(format!("run {} --version", bin.display())))?;
    let said = String::from_utf8_lossy(&out.stdout);
    parse_version(&said).ok_or_else(|| {
        Error::Config(format!(
            "--redis-server {}: `--version` printed \"{}\", which names no version (v=X.Y.Z): \
             pass --redis-server PATH to a redis-server",
            bin.display(),
            said.trim()
        ))
    })
}

/// Refuses a redis-server too old for `targets`: redis-waitaof needs WAITAOF (Redis 7.2).
pub fn check_version(targets: &[Target], bin: &Path, v: &RedisVersion) -> Result<()> {
    if targets.contains(&Target::RedisWaitaof) && v.parts < (7, 2, 0) {
        return Err(Error::Config(format!(
            "target redis-waitaof needs WAITAOF, which came with Redis 7.2, and --redis-server {} is \
             Redis {v}: pass --redis-server PATH to a redis-server 7.2 or newer, or leave redis-waitaof \
             out of --targets",
            bin.display()
        )));
    }
    Ok(())
}

/// Where the benchmark finds its programs and puts its files.
pub struct Env<'a> {
    /// redis-server.
    pub redis_server: &'a Path,
    /// The mojim executable (for `serve` and `kv`).
    pub mojim: &'a Path,
    /// Memory-backed folder for this run's files.
    pub dir: &'a Path,
    /// Disk folder for this run's files (the AOF).
    pub disk_dir: &'a Path,
    /// Data area of mojim-sync's region.
    pub region_size: u64,
    /// Extra arguments for `mojim kv`.
    pub kv_args: &'a [String],
    /// `[kv] read_barrier` for mojim kv (`None`: the default).
    pub read_barrier: Option<bool>,
    /// `--busy-poll-us`: mojim-sync's primary and mirror poll this long before sleeping.
    pub busy_poll_us: u64,
    /// `--kv-log-capacity`: mojim-sync's [mirror] log_capacity (`None`: the default).
    pub log_capacity: Option<u64>,
    /// `--tls on`: every target also serves clients over TLS with these certificates.
    pub tls: Option<&'a super::tls::KvTls>,
    /// `--shards`: one mojim-cluster target of each of these sizes.
    pub shards: &'a [usize],
    /// The etcd of the mojim-cluster targets' topologies (started when one is asked for).
    pub etcd: Option<&'a mojim_etcd::testing::EtcdServer>,
}

/// A process of a server: killed, reaped and forgotten by the janitor when dropped.
pub(super) enum Proc {
    Plain { child: Child, name: String },
    Node(ChildNode),
}

impl Proc {
    fn pid(&self) -> u32 {
        match self {
            Proc::Plain { child, .. } => child.id(),
            Proc::Node(n) => n.pid(),
        }
    }

    /// Why the process is no longer running, if it is not.
    fn exited(&mut self) -> Option<String> {
        match self {
            Proc::Plain { child, name } => {
                child.try_wait().ok().flatten().map(|s| format!("{name} exited ({s})"))
            }
            Proc::Node(_) => None,
        }
    }

    pub(super) fn stop(self, janitor: &mut Janitor) {
        let pid = self.pid();
        match self {
            Proc::Plain { mut child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Proc::Node(n) => drop(n),
        }
        janitor.reaped(pid);
    }
}

/// A running target: its address, processes and folders.
pub struct Server {
    /// Which target.
    pub target: Target,
    /// Where clients connect.
    pub addr: String,
    /// Where clients connect over TLS (with `--tls on`).
    pub tls_addr: Option<String>,
    /// A mojim-cluster target's shards.
    pub cluster: Option<super::shards::ClusterInfo>,
    pub(super) procs: Vec<Proc>,
    pub(super) dirs: Vec<PathBuf>,
}

impl Server {
    /// The target's name, and for a cluster its shards (`mojim-cluster/2`).
    pub fn label(&self) -> String {
        match &self.cluster {
            Some(c) => format!("{}/{}", self.target.name(), c.addrs.len()),
            None => self.target.name().to_string(),
        }
    }

    /// Every process the target runs (a cluster's etcd too), whose CPU time a run is charged.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.procs.iter().map(Proc::pid).collect();
        pids.extend(self.cluster.as_ref().map(|c| c.etcd_pid));
        pids
    }

    /// Stops the processes (newest first) and removes the folders.
    pub fn stop(mut self, janitor: &mut Janitor) {
        while let Some(p) = self.procs.pop() {
            p.stop(janitor);
        }
        for d in self.dirs.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Reached only on an error path: `stop` emptied both lists otherwise.
        for p in self.procs.drain(..).rev() {
            if let Proc::Plain { mut child, .. } = p {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        for d in self.dirs.drain(..) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A port free on loopback right now.
pub(super) fn free_port() -> Result<u16> {
    mojim_transport::ports::free_loopback_port().map_err(Error::io("find a free port on 127.0.0.1"))
}

pub(super) fn mkdir(dir: &Path, janitor: &mut Janitor) -> Result<PathBuf> {
    janitor.folder(dir);
    std::fs::create_dir_all(dir).map_err(Error::io(format!("create {}", dir.display())))?;
    Ok(dir.to_path_buf())
}

/// Starts `target`; its files go under `env`'s folders, named after `tag`.
pub fn start(target: Target, env: &Env, tag: &str, janitor: &mut Janitor) -> Result<Server> {
    if target.is_cluster() {
        return super::shards::start(env, tag, env.shards.first().copied().unwrap_or(1), janitor);
    }
    let mut s = Server {
        target,
        addr: String::new(),
        tls_addr: None,
        cluster: None,
        procs: Vec::new(),
        dirs: Vec::new(),
    };
    let name = format!("{tag}-{}", target.name());
    match target {
        Target::RedisNone => {
            let dir = mkdir(&env.dir.join(&name), janitor)?;
            s.dirs.push(dir.clone());
            let (p, addr, tls_addr) = redis(env, &dir, &[], janitor)?;
            s.procs.push(p);
            (s.addr, s.tls_addr) = (addr, tls_addr);
        }
        Target::RedisAofAlways => {
            let dir = mkdir(&env.disk_dir.join(&name), janitor)?;
            s.dirs.push(dir.clone());
            let (p, addr, tls_addr) =
                redis(env, &dir, &["--appendonly", "yes", "--appendfsync", "always"], janitor)?;
            s.procs.push(p);
            (s.addr, s.tls_addr) = (addr, tls_addr);
        }
        Target::RedisWait1 | Target::RedisWaitaof => {
            let aof = target == Target::RedisWaitaof;
            // The AOFs on a disk, where an fsync costs what it costs.
            let dir = mkdir(&if aof { env.disk_dir } else { env.dir }.join(&name), janitor)?;
            s.dirs.push(dir.clone());
            let primary_dir = mkdir(&dir.join("primary"), janitor)?;
            let replica_dir = mkdir(&dir.join("replica"), janitor)?;
            let persist: &[&str] =
                if aof { &["--appendonly", "yes", "--appendfsync", "always"] } else { &[] };
            let mut primary = vec!["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"];
            primary.extend(persist);
            let (p, addr, tls_addr) = redis(env, &primary_dir, &primary, janitor)?;
            s.procs.push(p);
            (s.addr, s.tls_addr) = (addr.clone(), tls_addr);
            let port = addr.rsplit(':').next().unwrap_or_default().to_string();
            let mut replica = vec!["--replicaof", "127.0.0.1", &port];
            replica.extend(persist);
            let (r, _, _) = redis(env, &replica_dir, &replica, janitor)?;
            s.procs.push(r);
            wait_for_replica(&addr, target.wait(), &mut s.procs)?;
        }
        Target::MojimSync | Target::MojimSyncShm => {
            let dir = mkdir(&env.dir.join(&name), janitor)?;
            s.dirs.push(dir.clone());
            let shm = target == Target::MojimSyncShm;
            let listen = crate::cluster::listen_addr(&dir, "mirror", if shm { "shm" } else { "tcp" });
            let prepared = prepare_mojim(env, &dir, &listen, &[], shm, &|_| {}, janitor)?;
            s.procs.push(prepared.mirror);
            let addr = format!("127.0.0.1:{}", free_port()?);
            s.procs.push(serve_kv(env, &prepared.cfg_path, &addr, &[], janitor)?);
            (s.addr, s.tls_addr) = (addr, prepared.tls_addr);
        }
        Target::MojimCluster => unreachable!("started by shards::start above"),
    }
    Ok(s)
}

/// Starts a redis-server in `dir` with `extra` settings (and a TLS port with `env.tls`) and
/// waits until it answers; returns it, its address and its TLS address.
fn redis(
    env: &Env,
    dir: &Path,
    extra: &[&str],
    janitor: &mut Janitor,
) -> Result<(Proc, String, Option<String>)> {
    let log = dir.join("redis.log");
    // What it says before its log file is open (a bad setting, say).
    let early = dir.join("redis.stderr");
    let mut last = String::new();
    // A port found free may be taken before the server binds it: try a few.
    for _ in 0..4 {
        let port = free_port()?.to_string();
        let tls_port = match env.tls {
            Some(_) => Some(free_port()?.to_string()),
            None => None,
        };
        let mut cmd = Command::new(env.redis_server);
        cmd.args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]).args([
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]);
        if let Some(p) = super::client::password() {
            // The replica of redis-wait1 authenticates to its primary with it too.
            cmd.args(["--requirepass", p, "--masterauth", p]);
        }
        cmd.arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(extra)
            .args(env.tls.zip(tls_port.as_deref()).map(|(t, p)| t.redis_args(p)).into_iter().flatten())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(&early).map_err(Error::io(format!("create {}", early.display())))?,
            ));
        let child = cmd.spawn().map_err(Error::io(format!("start {}", env.redis_server.display())))?;
        janitor.process(child.id());
        let mut p = Proc::Plain { child, name: format!("{} --port {port}", env.redis_server.display()) };
        let addr = format!("127.0.0.1:{port}");
        match wait_ready(&addr, std::slice::from_mut(&mut p)) {
            Ok(()) => return Ok((p, addr, tls_port.map(|t| format!("127.0.0.1:{t}")))),
            Err(e) => {
                let tail = std::fs::read_to_string(&early).unwrap_or_default()
                    + &std::fs::read_to_string(&log).unwrap_or_default();
                let in_use = tail.contains("Address already in use");
                last = format!("{e}; its output ends:\n{}", last_lines(&tail, 8));
                p.stop(janitor);
                if !in_use {
                    break;
                }
            }
        }
    }
    Err(Error::Io {
        op: format!("start {}", env.redis_server.display()),
        source: std::io::Error::other(last),
    })
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Waits until `addr` answers PING, failing early if one of `procs` exits.
pub(super) fn wait_ready(addr: &str, procs: &mut [Proc]) -> Result<()> {
    let t0 = Instant::now();
    loop {
        for p in procs.iter_mut() {
            if let Some(why) = p.exited() {
                return Err(Error::Io {
                    op: format!("start the server for {addr}"),
                    source: std::io::Error::other(why),
                });
            }
        }
        let ping = RespClient::connect(addr, Duration::from_secs(2)).and_then(|mut c| c.command(&[b"PING"]));
        match ping {
            Ok(Value::Simple(s)) if s == "PONG" => return Ok(()),
            // Redis answers -LOADING while it reads its files: keep waiting.
            Ok(_) | Err(_) if t0.elapsed() < START_TIMEOUT => std::thread::sleep(Duration::from_millis(20)),
            Ok(v) => return Err(Error::Config(format!("{addr} answered PING with {v}"))),
            Err(e) => {
                return Err(Error::Io {
                    op: format!("wait {} s for {addr} to answer PING", START_TIMEOUT.as_secs()),
                    source: std::io::Error::other(e.to_string()),
                })
            }
        }
    }
}

/// Waits until the primary at `addr` has its replica online and a `WAIT 1` (and, for `wait`
/// [`Wait::Aof`], a `WAITAOF 1 1`) is answered.
fn wait_for_replica(addr: &str, wait: Wait, procs: &mut [Proc]) -> Result<()> {
    let t0 = Instant::now();
    let mut c = RespClient::connect(addr, Duration::from_secs(5))?;
    loop {
        for p in procs.iter_mut() {
            if let Some(why) = p.exited() {
                return Err(Error::Io {
                    op: format!("start the replica of {addr}"),
                    source: std::io::Error::other(why),
                });
            }
        }
        if let Value::Bulk(Some(info)) = c.command(&[b"INFO", b"replication"])? {
            let info = String::from_utf8_lossy(&info);
            if info.contains("connected_slaves:1") && info.contains("state=online") {
                if let Value::Int(1) = c.command(&[b"WAIT", b"1", b"1000"])? {
                    if wait != Wait::Aof || wait.met(&c.command(&[b"WAITAOF", b"1", b"1", b"1000"])?) {
                        return Ok(());
                    }
                }
            }
            if t0.elapsed() > START_TIMEOUT {
                return Err(Error::Config(format!(
                    "the replica of {addr} did not come online in {} s; INFO replication says:\n{info}",
                    START_TIMEOUT.as_secs()
                )));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails with a clear message unless `exe` has the `kv` subcommand.
pub fn check_kv_subcommand(exe: &Path) -> Result<()> {
    let out = Command::new(exe)
        .args(["kv", "--help"])
        .output()
        .map_err(Error::io(format!("run {} kv --help", exe.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.lines().next().unwrap_or_default();
    Err(Error::Config(format!(
        "target mojim-sync needs `mojim kv`, the Redis-protocol server, and {} has none ({said}): \
         build a mojim that has it, or leave mojim-sync out of --targets",
        exe.display()
    )))
}

/// A region of mode sync, its configuration written and its mirror running, before its
/// `mojim kv` starts.
pub(super) struct Prepared {
    /// The configuration, with the mirror's address in it.
    pub cfg_path: PathBuf,
    /// The mirror.
    pub mirror: Proc,
    /// Where the mirror listens.
    pub mirror_addr: String,
    /// Where `mojim kv` will serve over TLS (with `--tls on`).
    pub tls_addr: Option<String>,
}

/// Creates a region in `dir` and its configuration (edited by `edit`), and starts its mirror
/// (`mojim serve --listen listen`, with `serve_args`), reached through shared memory if `shm`.
pub(super) fn prepare_mojim(
    env: &Env,
    dir: &Path,
    listen: &str,
    serve_args: &[&str],
    shm: bool,
    edit: &dyn Fn(&mut ConfigFile),
    janitor: &mut Janitor,
) -> Result<Prepared> {
    check_kv_subcommand(env.mojim)?;
    let id = RegionId { uuid: random_uuid(), size: env.region_size };
    mojim::create_region(&dir.join("region.mojim"), id)?;
    let cfg_path = dir.join("mojim.toml");
    let secret = format!("mojim-bench-kv-{}", std::process::id());
    let mut text = template(&id.uuid, id.size, &secret, "127.0.0.1:0")
        .replace("busy_poll_us = 0", &format!("busy_poll_us = {}", env.busy_poll_us));
    if let Some(c) = env.log_capacity {
        // The mirror makes its logs of this size when it starts: it reads it from this text.
        let line = "log_capacity = \"64MiB\"";
        if !text.contains(line) {
            return Err(Error::Config(format!(
                "the configuration template has no `{line}` to set --kv-log-capacity in"
            )));
        }
        text = text.replace(line, &format!("log_capacity = \"{c}\""));
    }
    write_private(&cfg_path, &text).map_err(Error::io("write the configuration"))?;
    let mut cfg = mojim::Config::load(&cfg_path)?;
    // The mirror reads the same file: what `edit` sets (its coordinator, say) is there first.
    edit(&mut cfg.file);
    write_config(&cfg_path, &cfg.file)?;
    let cfg_s =
        cfg_path.to_str().ok_or_else(|| Error::Config(format!("{} is not UTF-8", cfg_path.display())))?;
    let mirror_dir = dir.join("mirror");
    let mirror_s = mirror_dir.to_str().unwrap_or_default();
    let mut args = vec!["serve", "--config", cfg_s, "--listen", listen, "--dir", mirror_s];
    args.extend_from_slice(serve_args);
    let mirror = ChildNode::spawn(env.mojim, &args)?;
    janitor.process(mirror.pid());
    let mirror_addr = mirror.addr().to_string();
    cfg.file.primary.mirror = mirror_addr.clone();
    if shm {
        cfg.file.primary.transport = "shm".into();
    }
    let tls_addr = match env.tls {
        Some(_) => Some(format!("127.0.0.1:{}", free_port()?)),
        None => None,
    };
    cfg.file.edit_section(|kv: &mut KvSection| {
        // The run's password (--password), or none: the load connects on loopback.
        kv.password = super::client::password().unwrap_or_default().to_string();
        if let Some(b) = env.read_barrier {
            kv.read_barrier = b;
        }
        if let (Some(t), Some(a)) = (env.tls, &tls_addr) {
            t.configure(kv, a);
        }
    })?;
    write_config(&cfg_path, &cfg.file)?;
    Ok(Prepared { cfg_path, mirror: Proc::Node(mirror), mirror_addr, tls_addr })
}

fn write_config(path: &Path, file: &ConfigFile) -> Result<()> {
    let text =
        toml::to_string(file).map_err(|e| Error::Config(format!("serialise the configuration: {e}")))?;
    write_private(path, &text).map_err(Error::io("write the configuration"))
}

/// Starts `mojim kv --config cfg_path --listen addr` (with `args`, then `--kv-arg`s) and waits
/// until it answers PING.
pub(super) fn serve_kv(
    env: &Env,
    cfg_path: &Path,
    addr: &str,
    args: &[&str],
    janitor: &mut Janitor,
) -> Result<Proc> {
    let mut cmd = Command::new(env.mojim);
    if std::env::var_os("MOJIM_LOG").is_none() {
        cmd.env("MOJIM_LOG", "warn");
    }
    let child = cmd
        .args(["kv", "--config"])
        .arg(cfg_path)
        .args(["--listen", addr])
        .args(args)
        .args(env.kv_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(Error::io(format!("start {} kv", env.mojim.display())))?;
    janitor.process(child.id());
    let mut p = Proc::Plain { child, name: format!("{} kv --listen {addr}", env.mojim.display()) };
    if let Err(e) = wait_ready(addr, std::slice::from_mut(&mut p)) {
        p.stop(janitor);
        return Err(e);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_redis_server_version() {
        let v =
            parse_version("Redis server v=7.2.6 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=9036cd")
                .expect("a version");
        assert_eq!((v.text.as_str(), v.parts), ("7.2.6", (7, 2, 6)));
        assert_eq!(parse_version("Redis server v=8.0 sha=0").map(|v| v.parts), Some((8, 0, 0)));
        assert_eq!(parse_version("redis-server: command not found"), None);
        assert_eq!(parse_version("Redis server v=x.y"), None);
    }

    #[test]
    fn redis_waitaof_refuses_a_redis_older_than_7_2_naming_it_and_the_fix() {
        let old = parse_version("Redis server v=7.0.15 sha=0").expect("a version");
        let bin = Path::new("/usr/bin/redis-server");
        let e = check_version(&[Target::RedisNone, Target::RedisWaitaof], bin, &old).unwrap_err().to_string();
        assert!(e.contains("7.0.15") && e.contains("/usr/bin/redis-server") && e.contains("7.2"), "{e}");
        assert!(e.contains("--redis-server PATH"), "{e}");
        assert!(check_version(&[Target::RedisWait1], bin, &old).is_ok(), "WAIT is older than 7.2");
        let new = parse_version("Redis server v=7.2.0 sha=0").expect("a version");
        assert!(check_version(&[Target::RedisWaitaof], bin, &new).is_ok());
    }

    #[test]
    fn waits_are_met_only_by_the_answers_that_say_so() {
        assert!(Wait::Replica.met(&Value::Int(1)) && !Wait::Replica.met(&Value::Int(0)));
        let aof = |l, r| Value::Array(Some(vec![Value::Int(l), Value::Int(r)]));
        assert!(Wait::Aof.met(&aof(1, 1)));
        assert!(!Wait::Aof.met(&aof(1, 0)) && !Wait::Aof.met(&aof(0, 1)) && !Wait::Aof.met(&Value::Int(1)));
        let mut out = Vec::new();
        crate::kv::resp::encode_command(&mut out, &[b"WAITAOF", b"1", b"1", b"0"]);
        assert_eq!(out, Wait::Aof.request());
        out.clear();
        crate::kv::resp::encode_command(&mut out, &[b"WAIT", b"1", b"0"]);
        assert_eq!(out, Wait::Replica.request());
    }
}
