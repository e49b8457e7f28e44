//! `mojim bench --kv`: Redis-protocol servers measured side by side in one run. The benchmark
//! starts each target itself on loopback ([`targets`]: `mojim kv` in mode sync with its mirror,
//! and redis-server without persistence, with `appendfsync always`, with a replica and
//! `WAIT 1 0` after every write, and with AOFs on both and `WAITAOF 1 1 0` after every write),
//! loads `--records` keys into each, and drives them with two tools:
//!
//! - `kv`: the built-in load ([`load`], over [`resp`]), running plain SET and GET and the YCSB
//!   core workloads A–F ([`ycsb`], key choice in [`keys`]), and workloads on a job queue, a
//!   sorted set and a set ([`collections`], loaded by [`fill`]);
//! - `redis-benchmark`: `-t set,get` ([`redis_benchmark`]).
//!
//! Every cell (tool, workload, size, clients, pipeline) runs against every target one after
//! another, so ratios come from one run. It prints one JSON line per run (`--json`) or a table
//! ([`report`]); progress goes to stderr. On the way out, and through a janitor process if the
//! benchmark itself is killed ([`janitor`]), it stops every server and removes its folders.
//!
//! Two more measurements use the same targets: `--kv-memory` ([`memory`]: bytes per key of
//! each data type, mojim kv's region heap against Redis's `used_memory`) and `--kv-stall`
//! ([`stall`]: the longest PING delay while another client runs one large command).
//!
//! The target `mojim-cluster` is a Redis Cluster of `--shards` shards ([`shards`]); the load
//! sends each key to its slot's owner ([`route`]). Every run of the built-in load is charged
//! the CPU time of all the target's processes (servers, mirrors, a cluster's etcd) and of the
//! load itself, and reports operations per CPU-second beside operations per second.

pub mod client;
pub mod collections;
pub mod fill;
pub mod janitor;
pub mod keys;
pub mod load;
pub mod memory;
mod plan;
pub mod probe;
pub mod redis_benchmark;
pub mod report;
pub mod resp;
pub mod route;
pub mod shards;
pub mod slot_move;
pub mod stall;
pub mod targets;
pub mod tls;
pub mod ycsb;

use crate::bench::BenchArgs;
use client::RespClient;
use janitor::Janitor;
use mojim::error::{Error, Result};
use resp::Value;
use std::path::{Path, PathBuf};
use targets::{Env, RedisVersion, Server, Target, Wait};
use ycsb::Workload;

/// Largest value `--sizes` accepts.
pub const MAX_VALUE_BYTES: u64 = 64 << 20;

/// The modes an option of `--kv` alone cannot go with (clap waives a `requires` of `--kv` when
/// an argument of its group is given instead).
const KV_ONLY: [&str; 3] = ["kv_memory", "kv_stall", "kv_move"];

/// The targets `--kv` and `--kv-stall` run when `--targets` is not given.
pub const DEFAULT_TARGETS: [Target; 4] =
    [Target::MojimSync, Target::RedisNone, Target::RedisAofAlways, Target::RedisWait1];
/// The targets `--kv-memory` measures when `--targets` is not given.
pub const DEFAULT_MEMORY_TARGETS: [Target; 2] = [Target::MojimSync, Target::RedisNone];

/// Options of `mojim bench --kv`, `--kv-memory` and `--kv-stall` (the shared `--ops`,
/// `--duration`, `--repeat`, `--dir`, `--disk-dir`, `--region-size` and `--json` apply too).
/// `Default` is "not asked for".
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KvArgs {
    /// Run the Redis-protocol benchmark: start the --targets, load --records keys into each (and
    /// a sorted set or a set of --members members for the workloads that use one), and drive
    /// them with --tools over --workloads × --sizes × --clients × --pipeline, --ops operations
    /// per run (--duration caps the seconds of a run of the kv tool), --repeat rounds
    /// interleaved.
    #[arg(long, group = "kv_mode")]
    pub kv: bool,
    /// Measure memory instead: per data type of --memory-types, load --members elements of 100
    /// bytes (one per key, and for the collections also 100 per key) into fresh --targets
    /// (default: mojim-sync,redis-none) and report bytes per key: mojim kv's region heap bytes
    /// in use against Redis's used_memory, both from INFO memory.
    #[arg(long, group = "kv_mode")]
    pub kv_memory: bool,
    /// Measure stalls instead: while one client runs a large command of --stall-commands on
    /// collections of --members elements, a second client PINGs in a loop; report the longest
    /// PING delay on each of the --targets.
    #[arg(long, group = "kv_mode")]
    pub kv_stall: bool,
    /// Measure a live slot move instead: a mojim-cluster of 2 shards; --move-bytes of values of
    /// --move-value-size bytes loaded into the first --move-slots slots (the first shard's);
    /// --move-clients clients SET values of that size over 10000 keys for --duration
    /// seconds (default 5), then again while `mojim kv cluster move-slots` moves those slots to
    /// the second shard. Reports the move's MiB/s and keys/s, and the clients' ops/s, p50 and
    /// p99 before and during the move. Needs etcd; --region-size must hold the moved bytes.
    #[arg(long, group = "kv_mode")]
    pub kv_move: bool,
    /// --kv-move: bytes of values loaded into the moving slots (B, KiB, MiB, GiB).
    #[arg(long, default_value = "256MiB", requires = "kv_move", value_parser = mojim::size::parse_size)]
    pub move_bytes: u64,
    /// --kv-move: slots moved (the first N slots, all the first shard's).
    #[arg(long, default_value_t = 16, requires = "kv_move",
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub move_slots: u16,
    /// --kv-move: bytes per value, loaded and SET by the clients.
    #[arg(long, default_value = "4096", requires = "kv_move", value_parser = parse_value_size)]
    pub move_value_size: u64,
    /// --kv-move: the clients writing during the move (1 to 1000).
    #[arg(long, default_value_t = 50, requires = "kv_move",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub move_clients: u32,
    /// --kv-move: the move tool's --pipeline (keys per batch).
    #[arg(long, default_value_t = 100, requires = "kv_move",
          value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub move_pipeline: u32,
    /// Servers to start and measure, comma-separated: mojim-sync, redis-none, redis-aof-always,
    /// redis-wait1 (the default list; --kv-memory's is mojim-sync,redis-none); mojim-sync-shm
    /// (mojim-sync with its mirror reached through shared memory) and redis-waitaof (a
    /// redis-server and a replica, both appendonly yes and appendfsync always, every write
    /// followed by WAITAOF 1 1 0: Redis 7.2 or newer, see --redis-server); mojim-cluster (a
    /// Redis Cluster of --shards shards, each mojim kv --cluster in mode sync with its mirror,
    /// the topology in an etcd the benchmark starts; the built-in load sends each key to its
    /// slot's owner, from CLUSTER SLOTS, and follows MOVED and ASK; --kv only, workloads on one
    /// key per command). --targets mojim-sync,mojim-cluster --shards 1 measures the cost of
    /// cluster mode side by side; --shards 1,2,4 how SET scales.
    #[arg(long, value_enum, value_delimiter = ',', requires = "kv_mode")]
    pub targets: Vec<Target>,
    /// Shards of the mojim-cluster target, comma-separated (1 to 16 each): one cluster of each
    /// size is started and measured like another target.
    #[arg(long, value_delimiter = ',', default_value = "1", requires = "kv",
          value_parser = clap::value_parser!(u32).range(1..=shards::MAX_SHARDS as i64))]
    pub shards: Vec<u32>,
    /// Workloads, comma-separated: set, get, ycsb-a … ycsb-f (the default list), and on
    /// collections lpush-rpop (a job queue: LPUSH then RPOP, counted as two operations), zadd,
    /// zrange (10 members WITHSCORES from a random rank), sadd and sismember (on a sorted set or
    /// a set of --members members).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        requires = "kv", conflicts_with_all = KV_ONLY,
        default_value = "set,get,ycsb-a,ycsb-b,ycsb-c,ycsb-d,ycsb-e,ycsb-f"
    )]
    pub workloads: Vec<Workload>,
    /// Members of the sorted set (zadd, zrange) and the set (sadd, sismember) loaded before
    /// their runs; with --kv-memory, the elements loaded per test; with --kv-stall, the
    /// elements of each large collection.
    #[arg(long, default_value_t = 1_000_000, requires = "kv_mode",
          value_parser = clap::value_parser!(u64).range(100..=100_000_000))]
    pub members: u64,
    /// Data types --kv-memory measures, comma-separated: string, hash, list, set, zset.
    #[arg(long, value_enum, value_delimiter = ',', requires = "kv_memory", conflicts_with_all = ["kv", "kv_stall"],
          default_value = "string,hash,list,set,zset")]
    pub memory_types: Vec<memory::DataType>,
    /// Large commands --kv-stall runs, comma-separated: zunionstore (of two sorted sets of
    /// --members members into a third), del (of a set of --members members) and lrange (0 -1 of
    /// a list of --members elements).
    #[arg(long, value_enum, value_delimiter = ',', requires = "kv_stall", conflicts_with_all = ["kv", "kv_memory"],
          default_value = "zunionstore,del,lrange")]
    pub stall_commands: Vec<stall::StallCommand>,
    /// Value sizes, comma-separated (B, KiB, MiB).
    #[arg(long, value_delimiter = ',', requires = "kv", conflicts_with_all = KV_ONLY, default_value = "64,4096", value_parser = parse_value_size)]
    pub sizes: Vec<u64>,
    /// Client connections, comma-separated (1 to 1000 each).
    #[arg(long, value_delimiter = ',', requires = "kv", conflicts_with_all = KV_ONLY, default_value = "1,50",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clients: Vec<u32>,
    /// Pipeline depths, comma-separated (1 to 1024 each): a client sends this many operations
    /// and waits for all of them before the next batch.
    #[arg(long, value_delimiter = ',', requires = "kv", conflicts_with_all = KV_ONLY, default_value = "1,16",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pipeline: Vec<u32>,
    /// Keys loaded into each target before the runs (YCSB's recordcount).
    #[arg(long, default_value_t = 10_000, requires = "kv", conflicts_with_all = KV_ONLY,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub records: u64,
    /// Load generators, comma-separated: kv (the built-in one: every workload) and
    /// redis-benchmark (SET and GET).
    #[arg(long, value_enum, value_delimiter = ',', requires = "kv", conflicts_with_all = KV_ONLY, default_value = "kv,redis-benchmark")]
    pub tools: Vec<Tool>,
    /// The redis-server to start (a name is looked up in PATH); redis-waitaof needs 7.2 or
    /// newer. The results name its version.
    #[arg(long, default_value = "redis-server", requires = "kv_mode")]
    pub redis_server: PathBuf,
    /// The redis-benchmark to run (a name is looked up in PATH).
    #[arg(long, default_value = "redis-benchmark", requires = "kv", conflicts_with_all = KV_ONLY)]
    pub redis_benchmark: PathBuf,
    /// An extra argument for `mojim kv` (repeat the flag for several).
    #[arg(long = "kv-arg", allow_hyphen_values = true, requires = "kv_mode")]
    pub kv_args: Vec<String>,
    /// A password for every target ([kv] password for mojim kv, requirepass for redis-server):
    /// every connection of the load, redis-benchmark's included, gives it first. Default: none.
    #[arg(long, requires = "kv_mode")]
    pub password: Option<String>,
    /// mojim kv's [kv] read_barrier (true: a turn of reads waits for a round trip to the
    /// mirror; false: reads are answered at once). Default: the configuration's default (true).
    #[arg(long, requires = "kv_mode")]
    pub read_barrier: Option<bool>,
    /// mojim-sync's [mirror] log_capacity (B, KiB, MiB, GiB): bytes of each lane's log, of
    /// which one command's atomic group may take half. Default: the configuration's (64 MiB),
    /// which refuses a ZUNIONSTORE of 1000000 members; 1GiB takes it (within
    /// --region-size).
    #[arg(long, requires = "kv_mode", value_parser = mojim::size::parse_size)]
    pub kv_log_capacity: Option<u64>,
}

/// A load generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    /// The built-in load: SET, GET, YCSB A–F and the workloads on collections.
    Kv,
    /// redis-benchmark -t set,get.
    RedisBenchmark,
}

fn parse_value_size(s: &str) -> std::result::Result<u64, String> {
    let n = mojim::size::parse_size(s).map_err(|e| e.to_string())?;
    if n == 0 || n > MAX_VALUE_BYTES {
        return Err(format!("a value of {n} bytes is out of range: sizes are 1 B to 64 MiB"));
    }
    Ok(n)
}

/// `name` as given if it holds a `/`, else the first match in PATH.
pub fn find_program(name: &Path, flag: &str, package: &str) -> Result<PathBuf> {
    let found = if name.components().count() > 1 || name.is_absolute() {
        name.is_file().then(|| name.to_path_buf())
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
            .unwrap_or_default()
    };
    found.ok_or_else(|| {
        Error::Config(format!(
            "{flag} {}: no such program{}; install it (apt-get install {package}) or pass {flag} PATH",
            name.display(),
            if name.components().count() > 1 { "" } else { " in PATH" }
        ))
    })
}

/// Servers started, stopped (and their folders removed) when dropped.
struct Running {
    servers: Vec<Server>,
    janitor: Janitor,
}

/// The workloads a cluster target runs: those on one key per command.
fn cluster_workload(w: Workload) -> bool {
    w.on_strings() && w != Workload::YcsbE
}

impl Drop for Running {
    fn drop(&mut self) {
        for s in self.servers.drain(..).rev() {
            s.stop(&mut self.janitor);
        }
    }
}

/// The redis-server of a run: where it is and which version it is.
#[derive(Clone, Debug)]
pub struct RedisServer {
    /// The program.
    pub path: PathBuf,
    /// What `--version` says.
    pub version: RedisVersion,
}

impl std::fmt::Display for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redis-server {} ({})", self.version, self.path.display())
    }
}

/// Starts `targets` (named after `tag`), returning them as they run.
fn start_all(env: &Env, tag: &str, targets: &[Target], janitor: Janitor) -> Result<Running> {
    let mut run = Running { servers: Vec::new(), janitor };
    for t in targets {
        if t.is_cluster() {
            for &n in env.shards {
                eprintln!("kv: starting {} of {n} shards", t.name());
                let s = shards::start(env, tag, n, &mut run.janitor)?;
                let addrs = s.cluster.as_ref().map(|c| c.addrs.join(", ")).unwrap_or_default();
                eprintln!("kv: {} serves on {addrs}", s.label());
                run.servers.push(s);
            }
            continue;
        }
        eprintln!("kv: starting {}", t.name());
        let s = targets::start(*t, env, tag, &mut run.janitor)?;
        eprintln!("kv: {} serves on {}", t.name(), s.addr);
        run.servers.push(s);
    }
    Ok(run)
}

/// The etcd of a run's cluster targets, in a folder of `a.dir` named after `tag`.
fn start_etcd(a: &BenchArgs, tag: &str, janitor: &mut Janitor) -> Result<mojim_etcd::testing::EtcdServer> {
    let dir = a.dir.join(format!("{tag}-etcd"));
    janitor.folder(&dir);
    let e = mojim_etcd::testing::EtcdServer::launch().dir(&dir).start().map_err(|e| Error::Io {
        op: "start etcd for target mojim-cluster".into(),
        source: std::io::Error::other(e),
    })?;
    janitor.process(e.pid());
    eprintln!("kv: etcd serves on {}", e.endpoint());
    Ok(e)
}

/// What starting a target needs: the options of `a`, and what the run found or started.
fn env<'a>(
    a: &'a BenchArgs,
    mojim: &'a Path,
    redis_server: &'a Path,
    tls: Option<&'a tls::KvTls>,
    shards: &'a [usize],
    etcd: Option<&'a mojim_etcd::testing::EtcdServer>,
) -> Env<'a> {
    Env {
        redis_server,
        mojim,
        dir: &a.dir,
        disk_dir: &a.disk_dir,
        region_size: a.region_size,
        kv_args: &a.kv.kv_args,
        busy_poll_us: a.busy_poll_us,
        read_barrier: a.kv.read_barrier,
        log_capacity: a.kv.kv_log_capacity,
        tls,
        shards,
        etcd,
    }
}

/// `--kv-move`: a slot move under load ([`slot_move`]).
fn run_move(a: &BenchArgs) -> Result<()> {
    let k = &a.kv;
    let plan = slot_move::Plan::new(a)?;
    if k.targets.iter().any(|t| !t.is_cluster()) {
        return Err(Error::Config(
            "--kv-move measures target mojim-cluster (2 shards) alone: leave --targets out".into(),
        ));
    }
    if crate::bench::harness::tls_settings(a)?.contains(&"on") {
        return Err(Error::Config("--kv-move runs its clients in the clear: leave --tls out".into()));
    }
    let mojim = crate::bench::harness::exe()?;
    targets::check_kv_subcommand(&mojim)?;
    client::set_password(k.password.clone().filter(|p| !p.is_empty()));
    let tag = format!("mojim-bench-kv-move-{}", std::process::id());
    let mut janitor = Janitor::start();
    let etcd = start_etcd(a, &tag, &mut janitor)?;
    let env = env(a, &mojim, Path::new(""), None, &[2], Some(&etcd));
    let server = slot_move::start(&env, &tag, &mut janitor)?;
    let run = Running { servers: vec![server], janitor };
    let outcome = slot_move::run(&plan, &env, &run.servers[0], a);
    drop(run);
    let outcome = outcome?;
    if a.json {
        println!("{}", serde_json::to_string(&outcome).unwrap_or_default());
    } else {
        print!("{}", outcome.table());
    }
    Ok(())
}

/// Runs the benchmark (`--kv`, `--kv-memory`, `--kv-stall` or `--kv-move`) and prints its
/// results.
pub fn run(a: &BenchArgs) -> Result<()> {
    let k = &a.kv;
    // Everything is checked before anything starts.
    if a.ops == 0 {
        return Err(Error::Config("--ops 0: a run needs at least 1 operation".into()));
    }
    if a.repeat == 0 {
        return Err(Error::Config("--repeat 0: give at least 1 round".into()));
    }
    if let Some(d) = a.duration.filter(|d| !(d.is_finite() && *d > 0.0)) {
        return Err(Error::Config(format!("--duration {d}: give a positive number of seconds")));
    }
    if k.kv_move {
        return run_move(a);
    }
    let asked: &[Target] = match (k.targets.is_empty(), k.kv_memory) {
        (false, _) => &k.targets,
        (true, true) => &DEFAULT_MEMORY_TARGETS,
        (true, false) => &DEFAULT_TARGETS,
    };
    let mut targets: Vec<Target> = Vec::new();
    for t in asked {
        if !targets.contains(t) {
            targets.push(*t);
        }
    }
    let mut shard_counts: Vec<usize> = Vec::new();
    for &n in &k.shards {
        if !shard_counts.contains(&(n as usize)) {
            shard_counts.push(n as usize);
        }
    }
    let cluster = targets.iter().any(|t| t.is_cluster());
    if cluster {
        if !k.kv {
            return Err(Error::Config(
                "target mojim-cluster is measured by --kv only: leave it out of --targets with --kv-memory                  and --kv-stall"
                    .into(),
            ));
        }
        let refused: Vec<&str> =
            k.workloads.iter().filter(|w| !cluster_workload(**w)).map(|w| w.name()).collect();
        if !refused.is_empty() {
            return Err(Error::Config(format!(
                "target mojim-cluster runs the workloads on one key per command (set, get, ycsb-a, ycsb-b,                  ycsb-c, ycsb-d, ycsb-f), not {}: leave those out of --workloads, or mojim-cluster out of                  --targets",
                refused.join(", ")
            )));
        }
    } else if k.shards != [1] {
        return Err(Error::Config(format!(
            "--shards {}: shards are those of target mojim-cluster; add it to --targets",
            k.shards.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        )));
    }
    let redis = if targets.iter().any(|t| t.is_redis()) {
        let path = find_program(&k.redis_server, "--redis-server", "redis-server")?;
        let version = targets::redis_version(&path)?;
        targets::check_version(&targets, &path, &version)?;
        let r = RedisServer { path, version };
        eprintln!("kv: {r}");
        Some(r)
    } else {
        None
    };
    let with_rb = k.kv
        && k.tools.contains(&Tool::RedisBenchmark)
        && k.workloads.iter().any(|w| matches!(w, Workload::Set | Workload::Get));
    let redis_benchmark = if with_rb {
        find_program(&k.redis_benchmark, "--redis-benchmark", "redis-tools")?
    } else {
        PathBuf::new()
    };
    let tls: Vec<bool> = crate::bench::harness::tls_settings(a)?.iter().map(|t| *t == "on").collect();
    if tls.contains(&true) {
        if cluster {
            return Err(Error::Config(
                "--tls on: target mojim-cluster serves its clients in the clear (CLUSTER SLOTS names                  plaintext ports): leave it out of --targets, or --tls out"
                    .into(),
            ));
        }
        if !k.kv {
            return Err(Error::Config(
                "--tls on measures clients over TLS with --kv; --kv-memory and --kv-stall run in the clear: \
                 leave --tls out"
                    .into(),
            ));
        }
        if k.tools.contains(&Tool::Kv) || !with_rb {
            return Err(Error::Config(
                "--kv --tls on: the clients over TLS are redis-benchmark's (the built-in load speaks \
                 plaintext only): pass --tools redis-benchmark and --workloads set and/or get"
                    .into(),
            ));
        }
    }
    let mojim = crate::bench::harness::exe()?;
    if targets.iter().any(|t| !t.is_redis()) {
        targets::check_kv_subcommand(&mojim)?;
    }

    client::set_password(k.password.clone().filter(|p| !p.is_empty()));
    let tag = format!("mojim-bench-kv-{}", std::process::id());
    let mut janitor = Janitor::start();
    let certs = match tls.contains(&true) {
        true => Some(tls::KvTls::make(&a.dir.join(format!("{tag}-tls")), &mut janitor)?),
        false => None,
    };
    let etcd = match cluster {
        true => Some(start_etcd(a, &tag, &mut janitor)?),
        false => None,
    };
    let redis_path = redis.as_ref().map(|r| r.path.clone()).unwrap_or_default();
    let env = env(a, &mojim, &redis_path, certs.as_ref(), &shard_counts, etcd.as_ref());
    let footer = redis.as_ref().map(|r| format!("{r}\n")).unwrap_or_default();
    let version = redis.as_ref().map(|r| r.version.text.as_str());

    if k.kv_memory {
        let results = memory::run(&memory::Plan { a, k, env: &env, tag: &tag, targets: &targets, version })?;
        if !a.json {
            print!("{}{footer}", memory::table(&results));
        }
        return Ok(());
    }
    let run = start_all(&env, &tag, &targets, janitor)?;
    if k.kv_stall {
        let needs: Vec<probe::Need> = k.stall_commands.iter().map(|c| c.need()).collect();
        for s in &run.servers {
            probe::require(&s.addr, s.target, &needs)?;
        }
        let results = stall::run(&stall::Plan { a, k, version }, &run.servers)?;
        drop(run);
        if !a.json {
            print!("{}{footer}", stall::table(&results));
        }
        return Ok(());
    }
    let needs: Vec<probe::Need> = k.workloads.iter().filter_map(|w| collections::need(*w)).collect();
    for s in run.servers.iter().filter(|s| !s.target.is_cluster()) {
        probe::require(&s.addr, s.target, &needs)?;
    }
    let plan = plan::Plan {
        a,
        k,
        redis_benchmark: &redis_benchmark,
        with_rb,
        version,
        tls: &tls,
        certs: certs.as_ref(),
    };
    let results = plan.execute(&run.servers)?;
    drop(run);
    if !a.json {
        print!("{}{footer}", report::table(&results));
    }
    Ok(())
}

/// The name of record `n`.
pub fn key_name(n: u64) -> String {
    format!("user{}", keys::fnv64(n))
}

fn expect(addr: &str, what: &str, v: &Value, ok: impl Fn(&Value) -> bool) -> Result<()> {
    if ok(v) {
        Ok(())
    } else {
        Err(Error::Io {
            op: format!("{what} on {addr}"),
            source: std::io::Error::other(format!("answered {v}")),
        })
    }
}

/// Sends `args` on `c` and fails, naming `target`, unless the answer passes `ok`.
pub fn expect_reply(
    c: &mut RespClient,
    target: &str,
    args: &[&[u8]],
    ok: impl Fn(&Value) -> bool,
) -> Result<()> {
    let v = c.command(args)?;
    let what = String::from_utf8_lossy(args[0]).into_owned();
    expect(c.addr(), &format!("{what} ({target})"), &v, ok)
}

/// Waits until the target's replica (and its AOF, for [`Wait::Aof`]) has every write sent on
/// `c` so far: `WAIT 1 0` or `WAITAOF 1 1 0`; nothing for [`Wait::None`].
pub fn wait_for_replica(c: &mut RespClient, target: &str, wait: Wait) -> Result<()> {
    match wait {
        Wait::None => Ok(()),
        Wait::Replica => expect_reply(c, target, &[b"WAIT", b"1", b"0"], |v| wait.met(v)),
        Wait::Aof => expect_reply(c, target, &[b"WAITAOF", b"1", b"1", b"0"], |v| wait.met(v)),
    }
}

/// Sends `command key ...` for each key of `keys` to the shard that serves it (the one server of
/// a standalone target), pipelined, and fails unless every answer passes `ok`.
fn each_key(
    ks: &mut route::Keyspace,
    keys: std::ops::Range<u64>,
    args: &[&[u8]],
    ok: impl Fn(&Value) -> bool,
) -> Result<()> {
    each_named_key(ks, keys, key_name, args, ok, &mut |_| {})
}

/// As [`each_key`], key `i` named `name(i)`; `done` is told how many keys are done after each
/// pipelined round (256 keys).
pub(crate) fn each_named_key(
    ks: &mut route::Keyspace,
    keys: std::ops::Range<u64>,
    name: impl Fn(u64) -> String,
    args: &[&[u8]],
    ok: impl Fn(&Value) -> bool,
    done: &mut dyn FnMut(u64),
) -> Result<()> {
    let what = String::from_utf8_lossy(args[0]).into_owned();
    let mut n = keys.start;
    while n < keys.end {
        let end = (n + 256).min(keys.end);
        for i in n..end {
            let key = name(i);
            let mut full: Vec<&[u8]> = vec![args[0], key.as_bytes()];
            full.extend_from_slice(&args[1..]);
            ks.client_for(key.as_bytes()).queue(&full);
        }
        for c in &mut ks.clients {
            for v in c.exec()? {
                expect(c.addr(), &what, &v, &ok)?;
            }
        }
        n = end;
        done(n - keys.start);
    }
    Ok(())
}

/// Empties the server (every shard of a `cluster`) and stores records 0..records of `size`
/// bytes, each on the shard that serves it, pipelined; then `wait`s.
pub fn load_records(addr: &str, cluster: bool, records: u64, size: usize, wait: Wait) -> Result<()> {
    let mut ks = route::Keyspace::connect(addr, cluster, load::STALL)?;
    for c in &mut ks.clients {
        let v = c.command(&[b"FLUSHDB"])?;
        expect(c.addr(), "FLUSHDB", &v, |v| matches!(v, Value::Simple(s) if s == "OK"))?;
    }
    let value: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    each_key(&mut ks, 0..records, &[b"SET", &value], |v| matches!(v, Value::Simple(s) if s == "OK"))?;
    for c in &mut ks.clients {
        wait_for_replica(c, addr, wait)?;
    }
    Ok(())
}

/// Deletes the records numbered `keys` (a DEL each: a cluster refuses one across slots).
pub fn delete_keys(addr: &str, cluster: bool, keys: std::ops::Range<u64>) -> Result<()> {
    let mut ks = route::Keyspace::connect(addr, cluster, load::STALL)?;
    each_key(&mut ks, keys, &[b"DEL"], |v| matches!(v, Value::Int(_)))
}
