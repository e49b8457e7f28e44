//! `mojim bench --kv-move`: a live slot move under load. A cluster of two shards (the
//! `mojim-cluster` target, [`super::shards`]) is started, `--move-bytes` of values are loaded
//! into `--move-slots` slots of the first shard, and `--move-clients` clients SET values of the
//! same size all over the keyspace: first for `--duration` seconds (5 by default) before any
//! move, then while `mojim kv cluster move-slots` moves those slots to the second shard, as an
//! operator would run it. The load follows the MOVED and ASK answers the move brings.
//!
//! It reports the move's rate (MiB/s and keys/s of the tool's own wall time) and the clients'
//! throughput, p50 and p99 before and during the move, side by side; afterwards it checks that
//! the second shard owns the slots and holds every key loaded into them.

use super::janitor::Janitor;
use super::load::{self, RunSpec};
use super::resp::Value;
use super::route::Keyspace;
use super::targets::{Env, Server, Wait};
use super::ycsb::Workload;
use crate::bench::BenchArgs;
use hdrhistogram::Histogram;
use mojim::error::{Error, Result};
use mojim_kv::cluster::slot::key_slot;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Region bytes a shard needs beyond the values it holds: keys, entries and the heap's own.
const REGION_SLACK: u64 = 64 << 20;

/// How long the load runs at a time while the move goes on (its histograms are merged).
const LOAD_SLICE: Duration = Duration::from_millis(500);

/// What `--kv-move` asks for, checked before anything starts.
pub struct Plan {
    /// Bytes of values loaded into the moving slots.
    pub bytes: u64,
    /// Slots moved: 0 .. slots, all the first shard's.
    pub slots: u16,
    /// Bytes per value (loaded and SET by the clients).
    pub value: usize,
    /// The clients' connections.
    pub clients: usize,
    /// Seconds of load before the move.
    pub before: Duration,
    /// `--move-pipeline`: keys per batch of the move tool.
    pub pipeline: u32,
}

impl Plan {
    /// The plan of `a`, or the reason it cannot run (naming the option and the fix).
    pub fn new(a: &BenchArgs) -> Result<Plan> {
        let k = &a.kv;
        let plan = Plan {
            bytes: k.move_bytes,
            slots: k.move_slots,
            value: k.move_value_size as usize,
            clients: k.move_clients as usize,
            before: Duration::from_secs_f64(a.duration.unwrap_or(5.0)),
            pipeline: k.move_pipeline,
        };
        let keys = plan.keys();
        if keys < u64::from(plan.slots) {
            return Err(Error::Config(format!(
                "--move-bytes {} holds {keys} values of {} B, fewer than the {} --move-slots: give more bytes or \
                 fewer slots",
                plan.bytes, plan.value, plan.slots
            )));
        }
        let need = plan.bytes + plan.bytes / 4 + REGION_SLACK;
        if a.region_size < need {
            return Err(Error::Config(format!(
                "--region-size {} is too small for --move-bytes {}: each shard's region must hold the moved \
                 values and the clients' keys; give --region-size {}MiB or more",
                a.region_size,
                plan.bytes,
                need.div_ceil(1 << 20)
            )));
        }
        Ok(plan)
    }

    /// Values loaded into the moving slots.
    pub fn keys(&self) -> u64 {
        self.bytes / self.value as u64
    }
}

/// What the run measured.
#[derive(Debug, serde::Serialize)]
pub struct Outcome {
    pub slots: u16,
    pub keys: u64,
    pub bytes: u64,
    pub value_size: usize,
    pub clients: usize,
    pub move_s: f64,
    pub move_mib_per_s: f64,
    pub move_keys_per_s: f64,
    pub before_ops_per_s: f64,
    pub before_p50_us: f64,
    pub before_p99_us: f64,
    pub during_ops_per_s: f64,
    pub during_p50_us: f64,
    pub during_p99_us: f64,
    /// p99 during the move ÷ p99 before.
    pub p99_ratio: f64,
    pub moved: u64,
    pub asked: u64,
    /// TRYAGAIN answers (a key in flight), each operation sent again.
    pub retried: u64,
}

impl Outcome {
    /// The report, as the table and summary lines print it.
    pub fn table(&self) -> String {
        let mib = self.bytes as f64 / f64::from(1 << 20);
        let row = |what: &str, ops: f64, p50: f64, p99: f64| {
            format!("{what:<12} {ops:>10.0} {:>9.3} {:>9.3}\n", p50 / 1000.0, p99 / 1000.0)
        };
        format!(
            "slot move under load: {} slots, {mib:.1} MiB in {} keys of {} B; {} clients SET {} B\n\
             {:<12} {:>10} {:>9} {:>9}\n{}{}\
             move: {:.1} s, {:.1} MiB/s, {:.0} keys/s; p99 during ÷ before {:.2}; MOVED {}, ASK {}, \
             TRYAGAIN {}\n",
            self.slots,
            self.keys,
            self.value_size,
            self.clients,
            self.value_size,
            "",
            "ops/s",
            "p50 ms",
            "p99 ms",
            row("before", self.before_ops_per_s, self.before_p50_us, self.before_p99_us),
            row("during move", self.during_ops_per_s, self.during_p50_us, self.during_p99_us),
            self.move_s,
            self.move_mib_per_s,
            self.move_keys_per_s,
            self.p99_ratio,
            self.moved,
            self.asked,
            self.retried,
        )
    }
}

/// A tag per slot of `0..slots`: `{tag}` keys hash to that slot.
fn tags(slots: u16) -> Vec<String> {
    let mut out: Vec<Option<String>> = vec![None; usize::from(slots)];
    let mut left = usize::from(slots);
    let mut i = 0u64;
    while left > 0 {
        let tag = format!("mv{i}");
        let s = usize::from(key_slot(tag.as_bytes()));
        if s < out.len() && out[s].is_none() {
            out[s] = Some(tag);
            left -= 1;
        }
        i += 1;
    }
    out.into_iter().map(|t| t.expect("every slot found")).collect()
}

/// The name of moved key `n` (in slot `n % slots`).
fn key(tags: &[String], n: u64) -> String {
    format!("{{{}}}:{n}", tags[(n % tags.len() as u64) as usize])
}

/// Runs the move on `server` (a cluster of two shards) and measures it.
pub fn run(plan: &Plan, env: &Env, server: &Server, a: &BenchArgs) -> Result<Outcome> {
    let info = server.cluster.as_ref().expect("a mojim-cluster target");
    let tags = tags(plan.slots);
    let mut ks = Keyspace::connect(&server.addr, true, load::STALL)?;
    for (slot, tag) in tags.iter().enumerate() {
        let owner = &ks.route.addrs[ks.route.shard_of(tag.as_bytes())];
        if *owner != info.addrs[0] {
            return Err(Error::Config(format!(
                "slot {slot} is served by {owner}, not by the first shard ({}): --move-slots must stay within \
                 the first shard's slots",
                info.addrs[0]
            )));
        }
    }
    fill(plan, &tags, &mut ks)?;

    let spec = |duration: Duration, seed: u64| RunSpec {
        addr: server.addr.clone(),
        workload: Workload::Set,
        size: plan.value,
        clients: plan.clients,
        pipeline: 1,
        ops: u64::MAX,
        duration: Some(duration),
        records: a.kv.records,
        members: 0,
        wait: Wait::None,
        seed,
        cluster: true,
    };
    eprintln!("kv-move: {} clients SET for {:.1} s before the move", plan.clients, plan.before.as_secs_f64());
    let before = load::run(&spec(plan.before, 1))?;

    eprintln!("kv-move: moving slots 0-{} from p0 to p1 while the clients SET", plan.slots - 1);
    let mut tool = Command::new(env.mojim)
        .args(["kv", "cluster", "move-slots", "--config"])
        .arg(&info.config)
        .args(["--from", "p0", "--to", "p1", "--slots"])
        .arg(format!("0-{}", plan.slots - 1))
        .args(["--pipeline", &plan.pipeline.to_string()])
        .env("MOJIM_LOG", std::env::var("MOJIM_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io(format!("run {} kv cluster move-slots", env.mojim.display())))?;
    let t0 = Instant::now();
    // The tool's progress (stderr) is passed on; its last lines name a failure.
    let stderr = tool.stderr.take().expect("piped");
    let relay = std::thread::spawn(move || {
        let mut last = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            eprintln!("kv-move: move-slots: {line}");
            last.push(line);
            if last.len() > 5 {
                last.remove(0);
            }
        }
        last
    });
    let mut during = Histogram::<u64>::new(3).expect("a histogram");
    let (mut ops, mut secs, mut moved, mut asked, mut retried) = (0u64, 0f64, 0u64, 0u64, 0u64);
    let mut seed = 2;
    let status = loop {
        if let Some(status) = tool.try_wait().map_err(Error::io("wait for move-slots"))? {
            break status;
        }
        let slice = load::run(&spec(LOAD_SLICE, seed))?;
        seed += 1;
        during.add(&slice.hist).expect("histograms of one shape");
        (ops, secs) = (ops + slice.ops, secs + slice.secs);
        (moved, asked, retried) = (moved + slice.moved, asked + slice.asked, retried + slice.retried);
    };
    let move_s = t0.elapsed().as_secs_f64();
    let last = relay.join().unwrap_or_default();
    if !status.success() {
        return Err(Error::Io {
            op: "move the slots with mojim kv cluster move-slots".into(),
            source: std::io::Error::other(format!("it failed ({status}): {}", last.join(" | "))),
        });
    }
    check_moved(plan, &tags, &server.addr, &info.addrs[1])?;

    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let keys = plan.keys();
    let bytes = keys * plan.value as u64;
    Ok(Outcome {
        slots: plan.slots,
        keys,
        bytes,
        value_size: plan.value,
        clients: plan.clients,
        move_s,
        move_mib_per_s: bytes as f64 / f64::from(1 << 20) / move_s,
        move_keys_per_s: keys as f64 / move_s,
        before_ops_per_s: before.ops as f64 / before.secs.max(1e-9),
        before_p50_us: us(&before.hist, 0.5),
        before_p99_us: us(&before.hist, 0.99),
        during_ops_per_s: ops as f64 / secs.max(1e-9),
        during_p50_us: us(&during, 0.5),
        during_p99_us: us(&during, 0.99),
        p99_ratio: us(&during, 0.99) / us(&before.hist, 0.99).max(1e-9),
        moved,
        asked,
        retried,
    })
}

/// Loads the moved values into their slots on the first shard, pipelined, with progress.
fn fill(plan: &Plan, tags: &[String], ks: &mut Keyspace) -> Result<()> {
    let value: Vec<u8> = (0..plan.value).map(|i| b'a' + (i % 26) as u8).collect();
    let total = plan.keys();
    let (t0, mut shown) = (Instant::now(), Instant::now());
    let mib = |n: u64| (n * plan.value as u64) as f64 / f64::from(1 << 20);
    let is_ok = |v: &Value| matches!(v, Value::Simple(s) if s == "OK");
    super::each_named_key(ks, 0..total, |i| key(tags, i), &[b"SET", &value], is_ok, &mut |n| {
        if shown.elapsed() >= Duration::from_secs(1) || n == total {
            shown = Instant::now();
            eprintln!(
                "kv-move: loaded {:.0} of {:.0} MiB ({:.1} s)",
                mib(n),
                mib(total),
                t0.elapsed().as_secs_f64()
            );
        }
    })
}

/// After the move: the second shard (`target`) owns every moved slot and holds every key loaded
/// into them.
fn check_moved(plan: &Plan, tags: &[String], addr: &str, target: &str) -> Result<()> {
    let ks = Keyspace::connect(addr, true, load::STALL)?;
    let mut c = super::client::RespClient::connect(target, load::STALL)?;
    let mut held = 0u64;
    for (slot, tag) in tags.iter().enumerate() {
        let owner = &ks.route.addrs[ks.route.shard_of(tag.as_bytes())];
        let count = c.command(&[b"CLUSTER", b"COUNTKEYSINSLOT", slot.to_string().as_bytes()])?;
        match (owner == target, count) {
            (true, Value::Int(n)) => held += n as u64,
            (owns, v) => {
                return Err(Error::Io {
                    op: format!("check slot {slot} after the move"),
                    source: std::io::Error::other(format!(
                    "owned by {owner} (target {target}: {owns}); COUNTKEYSINSLOT on the target answered {v}"
                )),
                })
            }
        }
    }
    // The clients' own keys may land in the moved slots too: at least the loaded ones are there.
    if held < plan.keys() {
        return Err(Error::Io {
            op: "check the moved keys".into(),
            source: std::io::Error::other(format!(
                "the target holds {held} keys in the moved slots, fewer than the {} loaded",
                plan.keys()
            )),
        });
    }
    Ok(())
}

/// Starts the cluster of two shards for `--kv-move` (its files named after `tag`).
pub fn start(env: &Env, tag: &str, janitor: &mut Janitor) -> Result<Server> {
    eprintln!("kv-move: starting mojim-cluster of 2 shards");
    super::shards::start(env, tag, 2, janitor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tag_hashes_to_its_slot_and_keys_go_round_the_slots() {
        let t = tags(20);
        for (slot, tag) in t.iter().enumerate() {
            assert_eq!(usize::from(key_slot(tag.as_bytes())), slot);
        }
        assert_eq!(usize::from(key_slot(key(&t, 3).as_bytes())), 3);
        assert_eq!(usize::from(key_slot(key(&t, 23).as_bytes())), 3);
    }
}
