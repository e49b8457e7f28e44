//! `mojim bench --kv`: Redis-protocol servers measured side by side in one run. The benchmark
//! starts each target itself on loopback ([`targets`]: `mojim kv` in mode sync with its mirror,
//! and redis-server without persistence, with `appendfsync always`, and with a replica and
//! `WAIT 1 0` after every write), loads `--records` keys into each, and drives them with two
//! tools:
//!
//! - `kv`: the built-in load ([`load`], over [`resp`]), running plain SET and GET and the YCSB
//!   core workloads A–F ([`ycsb`], key choice in [`keys`]);
//! - `redis-benchmark`: `-t set,get` ([`redis_benchmark`]).
//!
//! Every cell (tool, workload, size, clients, pipeline) runs against every target one after
//! another, so ratios come from one run. It prints one JSON line per run (`--json`) or a table
//! ([`report`]); progress goes to stderr. On the way out, and through a janitor process if the
//! benchmark itself is killed ([`janitor`]), it stops every server and removes its folders.

pub mod client;
pub mod janitor;
pub mod keys;
pub mod load;
mod plan;
pub mod redis_benchmark;
pub mod report;
pub mod resp;
pub mod targets;
pub mod ycsb;

use crate::bench::BenchArgs;
use client::RespClient;
use janitor::Janitor;
use mojim::error::{Error, Result};
use resp::Value;
use std::path::{Path, PathBuf};
use targets::{Env, Server, Target};
use ycsb::Workload;

/// Largest value `--sizes` accepts.
pub const MAX_VALUE_BYTES: u64 = 64 << 20;

/// Options of `mojim bench --kv` (the shared `--ops`, `--duration`, `--dir`, `--disk-dir`,
/// `--region-size` and `--json` apply too). `Default` is "not asked for".
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KvArgs {
    /// Run the Redis-protocol benchmark: start the --targets, load --records keys into each, and
    /// drive them with --tools over --workloads × --sizes × --clients × --pipeline, --ops
    /// operations per run (--duration caps the seconds of a run of the kv tool), --repeat
    /// rounds interleaved.
    #[arg(long)]
    pub kv: bool,
    /// Servers to start and measure, comma-separated: mojim-sync, redis-none, redis-aof-always,
    /// redis-wait1; and mojim-sync-shm (mojim-sync with its mirror reached through shared
    /// memory), which is not in the default list.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        requires = "kv",
        default_value = "mojim-sync,redis-none,redis-aof-always,redis-wait1"
    )]
    pub targets: Vec<Target>,
    /// Workloads, comma-separated: set, get, ycsb-a … ycsb-f.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        requires = "kv",
        default_value = "set,get,ycsb-a,ycsb-b,ycsb-c,ycsb-d,ycsb-e,ycsb-f"
    )]
    pub workloads: Vec<Workload>,
    /// Value sizes, comma-separated (B, KiB, MiB).
    #[arg(long, value_delimiter = ',', requires = "kv", default_value = "64,4096", value_parser = parse_value_size)]
    pub sizes: Vec<u64>,
    /// Client connections, comma-separated (1 to 1000 each).
    #[arg(long, value_delimiter = ',', requires = "kv", default_value = "1,50",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub clients: Vec<u32>,
    /// Pipeline depths, comma-separated (1 to 1024 each): a client sends this many operations
    /// and waits for all of them before the next batch.
    #[arg(long, value_delimiter = ',', requires = "kv", default_value = "1,16",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pipeline: Vec<u32>,
    /// Keys loaded into each target before the runs (YCSB's recordcount).
    #[arg(long, default_value_t = 10_000, requires = "kv",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub records: u64,
    /// Load generators, comma-separated: kv (the built-in one: SET, GET, YCSB) and
    /// redis-benchmark (SET and GET).
    #[arg(long, value_enum, value_delimiter = ',', requires = "kv", default_value = "kv,redis-benchmark")]
    pub tools: Vec<Tool>,
    /// The redis-server to start (a name is looked up in PATH).
    #[arg(long, default_value = "redis-server", requires = "kv")]
    pub redis_server: PathBuf,
    /// The redis-benchmark to run (a name is looked up in PATH).
    #[arg(long, default_value = "redis-benchmark", requires = "kv")]
    pub redis_benchmark: PathBuf,
    /// An extra argument for `mojim kv` (repeat the flag for several).
    #[arg(long = "kv-arg", allow_hyphen_values = true, requires = "kv")]
    pub kv_args: Vec<String>,
    /// A password for every target ([kv] password for mojim kv, requirepass for redis-server):
    /// every connection of the load, redis-benchmark's included, gives it first. Default: none.
    #[arg(long, requires = "kv")]
    pub password: Option<String>,
    /// mojim kv's [kv] read_barrier (true: a turn of reads waits for a round trip to the
    /// mirror; false: reads are answered at once). Default: the configuration's default (true).
    #[arg(long, requires = "kv")]
    pub read_barrier: Option<bool>,
}

/// A load generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    /// The built-in load: SET, GET and YCSB A–F.
    Kv,
    /// redis-benchmark -t set,get.
    RedisBenchmark,
}

fn parse_value_size(s: &str) -> std::result::Result<u64, String> {
    let n = mojim::size::parse_size(s)?;
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

impl Drop for Running {
    fn drop(&mut self) {
        for s in self.servers.drain(..).rev() {
            s.stop(&mut self.janitor);
        }
    }
}

/// Runs the benchmark and prints its results.
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
    let mut targets: Vec<Target> = Vec::new();
    for t in &k.targets {
        if !targets.contains(t) {
            targets.push(*t);
        }
    }
    let redis_server = if targets.iter().any(|t| t.is_redis()) {
        find_program(&k.redis_server, "--redis-server", "redis-server")?
    } else {
        PathBuf::new()
    };
    let with_rb = k.tools.contains(&Tool::RedisBenchmark)
        && k.workloads.iter().any(|w| matches!(w, Workload::Set | Workload::Get));
    let redis_benchmark = if with_rb {
        find_program(&k.redis_benchmark, "--redis-benchmark", "redis-tools")?
    } else {
        PathBuf::new()
    };
    let mojim = crate::bench::exe()?;
    if targets.iter().any(|t| !t.is_redis()) {
        targets::check_kv_subcommand(&mojim)?;
    }

    client::set_password(k.password.clone().filter(|p| !p.is_empty()));
    let tag = format!("mojim-bench-kv-{}", std::process::id());
    let mut run = Running { servers: Vec::new(), janitor: Janitor::start() };
    let env = Env {
        redis_server: &redis_server,
        mojim: &mojim,
        dir: &a.dir,
        disk_dir: &a.disk_dir,
        region_size: a.region_size,
        kv_args: &k.kv_args,
        busy_poll_us: a.busy_poll_us,
        read_barrier: k.read_barrier,
    };
    for t in &targets {
        eprintln!("kv: starting {}", t.name());
        let s = targets::start(*t, &env, &tag, &mut run.janitor)?;
        eprintln!("kv: {} serves on {}", t.name(), s.addr);
        run.servers.push(s);
    }

    let plan = plan::Plan { a, k, redis_benchmark: &redis_benchmark, with_rb };
    let results = plan.execute(&run.servers)?;
    drop(run);
    if !a.json {
        print!("{}", report::table(&results));
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

/// Empties the server and stores records 0..records of `size` bytes, pipelined.
pub fn load_records(addr: &str, records: u64, size: usize, wait_replica: bool) -> Result<()> {
    let mut c = RespClient::connect(addr, load::STALL)?;
    let v = c.command(&[b"FLUSHDB"])?;
    expect(addr, "FLUSHDB", &v, |v| matches!(v, Value::Simple(s) if s == "OK"))?;
    let value: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let mut n = 0;
    while n < records {
        let end = (n + 256).min(records);
        for i in n..end {
            c.queue(&[b"SET", key_name(i).as_bytes(), &value]);
        }
        for v in c.exec()? {
            expect(addr, "SET", &v, |v| matches!(v, Value::Simple(s) if s == "OK"))?;
        }
        n = end;
    }
    if wait_replica {
        let v = c.command(&[b"WAIT", b"1", b"0"])?;
        expect(addr, "WAIT 1 0", &v, |v| matches!(v, Value::Int(n) if *n >= 1))?;
    }
    Ok(())
}

/// Deletes the records numbered `keys`.
pub fn delete_keys(addr: &str, keys: std::ops::Range<u64>) -> Result<()> {
    let mut c = RespClient::connect(addr, load::STALL)?;
    let names: Vec<String> = keys.map(key_name).collect();
    for chunk in names.chunks(256) {
        let mut args: Vec<&[u8]> = vec![b"DEL"];
        args.extend(chunk.iter().map(|s| s.as_bytes()));
        let v = c.command(&args)?;
        expect(addr, "DEL", &v, |v| matches!(v, Value::Int(_)))?;
    }
    Ok(())
}
