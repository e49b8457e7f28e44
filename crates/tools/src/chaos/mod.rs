//! `mojim chaos`: fault injection against real processes.
//!
//! Each trial starts a fresh cluster of `mojim serve` daemons (node a the primary's node, b the
//! mirror, the rest backups), runs a self-checking workload as the application on the primary's
//! node (`mojim chaos-worker`, see `workload.rs`), injects several seeded faults and heals each
//! as an operator of the static coordinator would (`faults.rs`), or lets the etcd coordinator
//! heal them (`--coordinator etcd`: one etcd for the run, `etcd.rs`; a key prefix per trial;
//! the take-overs are followed in `takeover.rs`), then stops the worker, lets the replicas
//! catch up (under etcd: lets the mirror take over from the stopped application) and checks
//! (`check.rs`):
//! 1. every acknowledged group is in the current primary's copy (and in every promoted copy at
//!    the moment of its promotion);
//! 2. no copy holds part of a group;
//! 3. no two nodes acknowledged writes as primary in one epoch, and no primary acknowledged a
//!    write after the roles had moved to a later epoch;
//! 4. the mirror's and the backups' data areas equal the primary's byte for byte, except
//!    backups the mirror reports as needing a full copy (counted as `unconverged`).
//!
//! A trial's seed decides its faults and its workload's slots (timing still varies): a failed
//! trial prints the command that runs it again.

mod check;
mod cluster;
mod etcd;
mod faults;
mod takeover;
mod workload;

pub use workload::{worker, WorkerArgs};

use cluster::{Cluster, Net, Netns, Shape};
use mojim::config::random_uuid;
use mojim::error::{Error, Result};
use mojim_etcd::testing::EtcdServer;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Who decides roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Coordinator {
    /// The harness is the operator: fence, promote, demote over the admin connection.
    Static,
    /// Leases in etcd: the mirror takes over when the primary's lease expires; the harness
    /// only restarts daemons and the application around the new roles.
    Etcd,
}

/// Whether nodes get network namespaces of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetnsMode {
    /// Namespaces when running as root and `ip netns` works, else loopback.
    Auto,
    On,
    Off,
}

/// Options of `mojim chaos`.
#[derive(clap::Args, Clone, Debug)]
pub struct ChaosArgs {
    /// Trials to run, each on a fresh cluster.
    #[arg(long, default_value_t = 20)]
    pub trials: u64,
    /// Seed of the first trial (later trials' seeds derive from it); default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    #[arg(long, value_enum, default_value = "static")]
    pub coordinator: Coordinator,
    /// Nodes in the cluster: the primary's node, the mirror and backups (3 to 9).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    #[arg(long, value_enum, default_value = "auto")]
    pub netns: NetnsMode,
    /// Faults per trial, at most (each trial injects between 2 and this many).
    #[arg(long, default_value_t = 4)]
    pub faults: usize,
    /// With --coordinator etcd: also kill the mirror's daemon as soon as it has claimed the
    /// next epoch in etcd, before or while it promotes itself, and restart it.
    #[arg(long)]
    pub takeover_crashes: bool,
    /// Keep every trial's folder (failed trials' folders are always kept).
    #[arg(long)]
    pub keep: bool,
    /// Folder for the trials' nodes (default: /dev/shm, else the temporary folder).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// How the nodes reach each other: tcp, or shm (shared memory on one host; implies
    /// --netns off, partitions emulated by freezing a node).
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "shm"])]
    pub transport: String,
}

/// SplitMix64's output function.
pub(crate) fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small seeded generator (SplitMix64).
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next_u64() % n
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Trial `i`'s seed: the first trial's is the run's seed, so `--trials 1 --seed S` replays a
/// trial whose seed is S.
fn trial_seed(seed: u64, i: u64) -> u64 {
    if i == 0 {
        seed
    } else {
        mix(seed ^ mix(i))
    }
}

#[derive(Default)]
struct Totals {
    trials: u64,
    faults: u64,
    acked: u64,
    lost: u64,
    torn: u64,
    dual: u64,
    unconverged: u64,
    errors: u64,
    violations: u64,
    /// Each failed trial's seed and its first problem, repeated in the summary: a long run's
    /// output may be cut in the middle, where the trial's own lines are.
    failed: Vec<(u64, String)>,
    takeover_ms: Vec<u64>,
    first_ack_ms: Vec<u64>,
    no_takeover: u64,
    lease_stops: u64,
}

impl Totals {
    fn add(&mut self, r: &faults::Report) {
        self.trials += 1;
        self.faults += r.faults.len() as u64;
        self.acked += r.acked;
        self.lost += r.lost.len() as u64;
        self.torn += r.torn.len() as u64;
        self.dual += r.dual.len() as u64;
        self.unconverged += r.unconverged.len() as u64;
        self.errors += r.errors.len() as u64;
        self.violations += r.violations.len() as u64;
        self.takeover_ms.extend(&r.takeover_ms);
        self.first_ack_ms.extend(&r.first_ack_ms);
        self.no_takeover += r.no_takeover;
        self.lease_stops += r.lease_stops;
    }
}

/// `median M ms, max X ms` of some durations.
fn spread(ms: &[u64]) -> String {
    let mut v = ms.to_vec();
    v.sort_unstable();
    match (v.get(v.len() / 2), v.last()) {
        (Some(m), Some(x)) => format!("median {m} ms, max {x} ms"),
        _ => "none".into(),
    }
}

/// A trial's problems, lost and torn groups, dual primaries, then the harness's errors.
fn problems(r: &faults::Report) -> impl Iterator<Item = &String> {
    r.lost.values().chain(r.torn.values()).chain(&r.dual).chain(&r.errors)
}

/// A trial's problems, at most 20 of them, under its progress line.
fn print_problems(r: &faults::Report) {
    for p in problems(r).take(20) {
        println!("  {p}");
    }
    for u in &r.unconverged {
        println!("  unconverged: {u}");
    }
    if let Some(v) = r.violations.first() {
        println!("  {} protocol violations logged, the first: {v}", r.violations.len());
    }
}

pub fn run(a: &ChaosArgs) -> Result<()> {
    check_args(a)?;
    let seed = a.seed.unwrap_or_else(clock_seed);
    let etcd_mode = a.coordinator == Coordinator::Etcd;
    let root = trials_base(a).join(format!("mojim-chaos-{}", std::process::id()));
    let mut net = network(a, etcd_mode, &root)?;
    let exe = std::env::current_exe().map_err(Error::io("find the mojim binary"))?;
    println!("chaos: {} trials, seed {seed}, {} nodes, {}", a.trials, a.nodes, net.describe());
    println!("chaos: trial folders under {}", root.display());
    let mut etcd = if etcd_mode { Some(start_etcd(&net, a.nodes, &root)?) } else { None };
    let mut t = Totals::default();
    let t0 = Instant::now();
    for i in 0..a.trials {
        let s = trial_seed(seed, i);
        let dir = root.join(format!("trial-{i}"));
        let started = Instant::now();
        let r = run_trial(a, &mut net, etcd.as_ref(), &exe, &dir, i, s)?;
        print_trial(a, i, s, &r, started.elapsed().as_secs_f64());
        t.add(&r);
        if r.failed() {
            let first = problems(&r).next().cloned().unwrap_or_default();
            t.failed.push((s, first));
            println!("  seed {s}: replay with `{}`; files kept in {}", replay(a, s), dir.display());
        } else if !a.keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    if let Some(e) = etcd.as_mut() {
        e.keep_files(a.keep || !t.failed.is_empty());
    }
    drop(etcd);
    if !a.keep && t.failed.is_empty() {
        let _ = std::fs::remove_dir_all(root.join("etcd"));
        // Shared-memory links' sockets, left by nodes that were killed.
        for i in 0..a.nodes {
            let _ = std::fs::remove_file(root.join(format!("node-{i}.sock")));
        }
        let _ = std::fs::remove_dir(&root);
    }
    print_totals(&t, t0.elapsed().as_secs_f64(), etcd_mode);
    verdict(a, &t)
}

/// Refuses options out of range or that do not go together.
fn check_args(a: &ChaosArgs) -> Result<()> {
    if !(3..=9).contains(&a.nodes) {
        return Err(Error::Config(format!("--nodes {} must be between 3 and 9", a.nodes)));
    }
    if a.takeover_crashes && a.coordinator != Coordinator::Etcd {
        return Err(Error::Config("--takeover-crashes needs --coordinator etcd".into()));
    }
    if a.faults < 2 {
        return Err(Error::Config(format!("--faults {} must be at least 2", a.faults)));
    }
    if a.transport == "shm" && a.netns == NetnsMode::On {
        return Err(Error::Config(
            "--transport shm runs on one host's shared memory: leave out --netns on (partitions are then \
             emulated by freezing a node)"
                .into(),
        ));
    }
    Ok(())
}

/// A run's seed when none is given: from the clock and the process id.
fn clock_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    mix(t.as_nanos() as u64 ^ u64::from(std::process::id()))
}

/// The nodes' network as `--netns` asks: a namespace per node (under etcd, and one for the etcd
/// after the nodes'), or loopback.
fn network(a: &ChaosArgs, etcd_mode: bool, root: &std::path::Path) -> Result<Net> {
    let sites = a.nodes + usize::from(etcd_mode);
    if a.transport == "shm" {
        std::fs::create_dir_all(root).map_err(Error::io(format!("create {}", root.display())))?;
        return Net::shm(a.nodes, root).map_err(Error::Config);
    }
    Ok(match a.netns {
        NetnsMode::Off => Net::loopback(a.nodes).map_err(Error::Config)?,
        NetnsMode::On => {
            Net::Netns(Netns::create(sites).map_err(|e| Error::Config(format!("--netns on: {e}")))?)
        }
        NetnsMode::Auto => match Netns::create(sites) {
            Ok(n) => Net::Netns(n),
            Err(why) => {
                println!("no network namespaces ({why}): running on loopback");
                Net::loopback(a.nodes).map_err(Error::Config)?
            }
        },
    })
}

/// The folder the run's folder goes in: `--dir`, else /dev/shm, else the temporary folder.
fn trials_base(a: &ChaosArgs) -> PathBuf {
    a.dir.clone().unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    })
}

/// Starts the run's etcd, its files under `root`, and says where it is and its lease timings.
fn start_etcd(net: &Net, nodes: usize, root: &Path) -> Result<EtcdServer> {
    let e = etcd::start(net, nodes, &root.join("etcd")).map_err(Error::Config)?;
    println!(
        "chaos: etcd coordinator at {} (lease ttl {:?}, renewed every {:?}, margin {:?}; its log: {})",
        e.endpoint(),
        etcd::LEASE_TTL,
        etcd::LEASE_RENEW,
        etcd::LEASE_MARGIN,
        e.log_path().display()
    );
    Ok(e)
}

/// Runs trial `i` of seed `s` on a fresh cluster in `dir` and returns its report.
fn run_trial(
    a: &ChaosArgs,
    net: &mut Net,
    etcd: Option<&EtcdServer>,
    exe: &Path,
    dir: &Path,
    i: u64,
    s: u64,
) -> Result<faults::Report> {
    let shape = Shape { uuid: random_uuid(), size: 1 << 20, secret: format!("chaos-secret-{s:016x}") };
    let coordinator =
        etcd.map(|e| etcd::settings(e, format!("/mojim-chaos/{}/trial-{i}", std::process::id())));
    let cluster =
        Cluster::new(dir, net, a.nodes, shape, exe.to_path_buf(), coordinator).map_err(Error::Config)?;
    let mut trial = faults::Trial::new(s, net, cluster).map_err(Error::Config)?;
    trial.takeover_crashes = a.takeover_crashes;
    let faults = 2 + (mix(s ^ 0xfa) % (a.faults as u64 - 1)) as usize;
    trial.run(faults);
    Ok(std::mem::take(&mut trial.report))
}

/// A trial's progress line and its problems.
fn print_trial(a: &ChaosArgs, i: u64, s: u64, r: &faults::Report, secs: f64) {
    println!(
        "trial {}/{} seed={s} {} acked={} {secs:.1}s: {}",
        i + 1,
        a.trials,
        if r.failed() { "FAILED" } else { "ok" },
        r.acked,
        r.faults.join(", ")
    );
    print_problems(r);
}

/// The run's summary lines; under etcd, the take-overs too.
fn print_totals(t: &Totals, secs: f64, etcd_mode: bool) {
    println!(
        "trials={} faults={} acked={} lost={} torn={} dual_primary={} unconverged={}",
        t.trials, t.faults, t.acked, t.lost, t.torn, t.dual, t.unconverged
    );
    println!("errors={} violations_logged={} time={secs:.1}s", t.errors, t.violations);
    if etcd_mode {
        println!(
            "coordinator: take-overs={} (primary lost -> roles moved in etcd: {}; -> first acknowledgement on \
             the new primary: {}) no_takeover={} lease_stops={}",
            t.takeover_ms.len(),
            spread(&t.takeover_ms),
            spread(&t.first_ack_ms),
            t.no_takeover,
            t.lease_stops
        );
    }
}

/// Ok if every trial passed; else lists the failed trials' replay commands and first problems
/// and fails.
fn verdict(a: &ChaosArgs, t: &Totals) -> Result<()> {
    if t.failed.is_empty() {
        return Ok(());
    }
    for (s, first) in &t.failed {
        println!("failed: seed {s}: {}", replay(a, *s));
        println!("  its first problem: {first}");
    }
    let failed = format!("{} of {} trials failed", t.failed.len(), t.trials);
    Err(Error::Io { op: "chaos".into(), source: std::io::Error::other(failed) })
}

/// The command that runs the trial of seed `s` again.
fn replay(a: &ChaosArgs, s: u64) -> String {
    let mut cmd = format!("mojim chaos --trials 1 --seed {s}");
    if a.coordinator == Coordinator::Etcd {
        cmd += " --coordinator etcd";
    }
    if a.takeover_crashes {
        cmd += " --takeover-crashes";
    }
    if a.nodes != 3 {
        cmd += &format!(" --nodes {}", a.nodes);
    }
    if a.netns != NetnsMode::Auto {
        cmd += &format!(" --netns {}", if a.netns == NetnsMode::On { "on" } else { "off" });
    }
    if a.faults != 4 {
        cmd += &format!(" --faults {}", a.faults);
    }
    if a.transport != "tcp" {
        cmd += &format!(" --transport {}", a.transport);
    }
    cmd + " --keep"
}
