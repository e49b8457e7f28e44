//! The `mojim` command: initialise a region, run a mirror, inspect it, demo and benchmark.
#![forbid(unsafe_code)]

mod backup;
mod config_load;
mod export;
mod kv_cluster;
mod kv_cluster_move;
mod notify;
mod rejoin;
mod reload;
mod stop;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use mojim::config::{random_uuid, template_with, write_private, Config, Secret, DEFAULT_PORT};
use mojim::size::parse_size;
use mojim::Error;
use mojim_metrics::MetricsListener;
use mojim_node::admin_client::AdminClient;
use mojim_node::{Mirror, MirrorOptions};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Replicated persistent memory: map a region, sync ranges to a mirror at memory speed.
#[derive(Parser)]
#[command(name = "mojim", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create a region file and a commented configuration file beside it.
    Init(InitArgs),
    /// Run a node in the mirror role (the daemon). SIGHUP reloads its [security] TLS files;
    /// SIGTERM or SIGINT stops it cleanly (the logs applied, exit 0).
    Serve(ServeArgs),
    /// Show a node's role, epoch, lanes, log fill, sequence numbers and lag.
    Status(StatusArgs),
    /// Print bytes of a node's data area, never a partly applied group.
    Cat(CatArgs),
    /// Write a node's data area to a plain file, from one consistent snapshot.
    Export(export::ExportArgs),
    /// Make a node the primary's under a new epoch (static coordinator): fence every reachable
    /// peer, then promote; the application then opens the node's data area as its region.
    Promote(PromoteArgs),
    /// Let a former primary's node serve as a replica again (it gets a full copy).
    Demote(PromoteArgs),
    /// Resolve a split brain: discard a node's copy, so its next session copies everything in.
    Resolve(ResolveArgs),
    /// Bring a former primary's node back as a backup of the current mirror: place its region
    /// file as the data area, serve it, demote it, and have the mirror feed it (then serve on).
    #[command(long_about = rejoin::ABOUT)]
    Rejoin(rejoin::RejoinArgs),
    /// Add or remove a backup of a running mirror, without restarting it.
    #[command(subcommand, long_about = backup::ABOUT)]
    Backup(backup::BackupCommand),
    /// Start a mirror on loopback, run the paper's Fig. 1 workload, verify, and clean up.
    Demo(mojim_tools::demo::DemoArgs),
    /// The paper's microbenchmark: persist random ranges and report latency and throughput.
    Bench(Box<mojim_tools::bench::BenchArgs>),
    /// Recoverable memory's example programs (DGEMV, a k-mer table): resume after a crash.
    Rvm(mojim_tools::rvm::RvmArgs),
    /// Fault injection: kill, partition and fail over a local cluster under a self-checking load.
    Chaos(mojim_tools::chaos::ChaosArgs),
    /// A Redis-protocol server whose keys and values live in the region, replicated to its mirror.
    #[command(long_about = KV_ABOUT)]
    Kv(KvArgs),
    /// The application of a `chaos` trial (started by `mojim chaos`).
    #[command(hide = true)]
    ChaosWorker(mojim_tools::chaos::WorkerArgs),
    /// The application of a `bench --mode failover` round (started by `mojim bench`).
    #[command(hide = true)]
    BenchWorker(mojim_tools::bench_failover::WorkerArgs),
    /// Writes the manual pages (mojim.1, and mojim-COMMAND.1 for each command) into a folder,
    /// from the same definitions as --help (scripts/package).
    #[command(hide = true)]
    Man {
        /// Folder to write the pages into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
    /// Raw TCP echo server used by `bench --mode tcp-rtt` (prints `serving on ADDR`).
    #[command(hide = true)]
    Echo {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long, default_value_t = 0)]
        busy_poll_us: u64,
        /// A configuration whose `[security]` settings it uses (mutual TLS when tls = true).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
}

const KV_ABOUT: &str = "A Redis-protocol server (RESP2, and RESP3 after HELLO 3) whose keys and values \
live in the region: a hash table and an allocator laid out in it (docs/FORMAT.md §11), not in the \
process's heap. Every write command's changes are one atomic gmsync group before its reply is sent; \
the commands of one event-loop turn, from every client and pipelined, share one group and one round \
trip. A restart, or mojim kv on a promoted mirror ([region] path = its data.mojim, or --region), \
serves exactly the acknowledged state: opening the region is the whole recovery.

Commands: listed below, by group (COMMAND LIST gives them too). Anything else is answered -ERR \
unknown command; docs/COMPATIBILITY.md says what differs from Redis 7.0 and why. WAIT answers at \
once with the replicas that hold every acknowledged write (1 in sync mode with the mirror online).

Settings: [kv] in mojim.toml (listen, password, protected_mode, max_clients, max_bulk, max_args, \
max_inline, output_limit, read_barrier, sentinel_name, announce, sentinels, and TLS for clients as \
Redis's tls-* settings: tls_listen, tls_cert_file, tls_key_file, tls_ca_cert_file, \
tls_auth_clients, tls_protocols; SIGHUP reads these files and [security]'s again; cluster and \
cluster_prefix for Redis Cluster mode, whose topology `mojim kv cluster` makes, and standby); the region, \
mode and mirror from [region] and [primary]. With a password ([kv] password, or the environment variable \
MOJIM_KV_PASSWORD; mojim init writes a random one) a client must AUTH before anything else \
(-NOAUTH); without one, protected mode refuses any listen address but loopback. A request past a \
limit, or one that breaks the protocol, closes that client with -ERR Protocol error; a reply past \
output_limit closes it with an error, its command undone; nothing else changes. While the mirror is lost (on_mirror_loss = \"block\") writes wait; a primary fenced by a \
promotion stops with an error. Prints \"serving on ADDR\" when ready \
(with tls_listen, \"serving TLS on ADDR\" before it; with listen = \"\", ADDR is the TLS one), and \
tells systemd (READY=1) when NOTIFY_SOCKET is set. SIGTERM or SIGINT stops it cleanly: every request \
read is answered once its group is acknowledged, then the clients and the region are closed (exit 0).";

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct KvArgs {
    /// Operations on a Redis Cluster's topology instead of serving.
    #[command(subcommand)]
    command: Option<KvCommand>,
    #[command(flatten)]
    config: ConfigArgs,
    /// Serve one shard of a Redis Cluster, as [kv] cluster = true: the topology is read from
    /// etcd ([cluster] coordinator = "etcd", [kv] cluster_prefix; written by `mojim kv cluster
    /// create`) and watched; --node (or [cluster] node) names this node in it.
    #[arg(long)]
    cluster: bool,
    /// With --cluster, on a node that is not its shard's primary (as [kv] standby = true):
    /// wait, watching the region's roles in etcd ([cluster] etcd_prefix), until this node's
    /// `mojim serve` has taken the region over (the roles name this node the primary and its
    /// copy is promoted); then serve that copy (--region or [region] path: the mirror's
    /// <dir>/data.mojim) and make this node the shard's primary in the topology. So a shard
    /// fails over with no operator. Refused at start when that path can never hold the promoted
    /// copy (not a data.mojim in an existing folder) or the node is in no shard; SIGTERM or
    /// SIGINT ends the wait (exit 0), SIGHUP reloads the TLS files as when serving.
    #[arg(long)]
    standby: bool,
    /// Address Redis clients connect to, instead of [kv] listen (port 0: any free port; "":
    /// no plaintext listener, TLS only).
    #[arg(long)]
    listen: Option<String>,
    /// Address Redis clients connect to over TLS, instead of [kv] tls_listen (port 0: any free
    /// port); the certificates are [kv] tls_cert_file, tls_key_file and tls_ca_cert_file.
    #[arg(long)]
    tls_listen: Option<String>,
    /// Region file, instead of [region] path (on a promoted node: the mirror's data.mojim).
    #[arg(long)]
    region: Option<PathBuf>,
    /// The mirror's address, instead of [primary] mirror (static coordinator).
    #[arg(long)]
    mirror: Option<String>,
    /// This node's name for the etcd coordinator, instead of [cluster] node.
    #[arg(long)]
    node: Option<String>,
    /// Seconds to wait at start for a mirror that cannot be reached yet (not started, or
    /// restarting), trying again every second and saying so once; 0: fail at once.
    #[arg(long, value_name = "SECONDS", default_value_t = mojim_kv::DEFAULT_MIRROR_WAIT.as_secs())]
    mirror_wait: u64,
    /// Address of the metrics listener (/metrics, /healthz, /readyz), instead of [kv]
    /// metrics_listen (port 0: any free port; "": none).
    #[arg(long)]
    metrics_listen: Option<String>,
}

#[derive(Subcommand)]
enum KvCommand {
    /// Make, check and change the Redis Cluster topology in etcd (create, status, add-shard,
    /// remove-shard) and move slots between shards (move-slots, rebalance).
    #[command(subcommand, long_about = kv_cluster::ABOUT)]
    Cluster(kv_cluster::ClusterCommand),
}

#[derive(Args)]
struct InitArgs {
    /// Folder for mojim.toml and region.mojim (created if missing).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Bytes in the region's data area (B, KiB, MiB, GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    size: u64,
    /// Address the mirror listens on, written as both [mirror] listen and [primary] mirror.
    #[arg(long, default_value_t = format!("127.0.0.1:{DEFAULT_PORT}"))]
    listen: String,
    /// Cluster secret to write into the file (default: 32 random hex digits).
    #[arg(long)]
    secret: Option<String>,
    /// Overwrite an existing mojim.toml (never an existing region file).
    #[arg(long)]
    force: bool,
    /// Make a cluster CA and certificates for a node, an operator and an application in
    /// <dir>/tls (mode 0600), and turn on mutual TLS ([security] tls = true) in mojim.toml.
    #[arg(long)]
    tls: bool,
}

#[derive(Args)]
pub(crate) struct ConfigArgs {
    /// Configuration file.
    #[arg(long, short, default_value = "mojim.toml")]
    pub(crate) config: PathBuf,
    /// Run without a cluster secret (no authentication). Never on a shared network.
    #[arg(long)]
    pub(crate) insecure: bool,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Listen address, instead of [mirror] listen (use port 0 for any free port).
    #[arg(long)]
    listen: Option<String>,
    /// Data folder, instead of [mirror] dir. Relative to the working folder, as every path on
    /// the command line is (a path in the configuration file is relative to the file's folder).
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Log folder, instead of [mirror] log_dir (relative to the working folder).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Checkpoint after this many complete groups, instead of [mirror] checkpoint_thresh.
    #[arg(long)]
    checkpoint_thresh: Option<usize>,
    /// Poll each lane this many microseconds before sleeping, instead of [mirror] busy_poll_us.
    #[arg(long)]
    busy_poll_us: Option<u64>,
    /// Where the data area lives, instead of [mirror] data: memory or disk.
    #[arg(long)]
    data: Option<mojim_node::DataPlacement>,
    /// A backup this node feeds, instead of [mirror] backups (repeat the flag for several).
    /// `mojim backup add|remove` changes the set while the node runs.
    #[arg(long = "backup")]
    pub(crate) backups: Vec<String>,
    /// This node's name for the etcd coordinator, instead of [cluster] node.
    #[arg(long)]
    node: Option<String>,
    /// Address of the metrics listener (/metrics, /healthz, /readyz), instead of [metrics]
    /// listen (port 0: any free port; "": none).
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Check the configuration (and the flags above) as serving would, then exit: 0 and
    /// "configuration OK" when it would start, 1 and the error otherwise. Nothing is created,
    /// bound or changed.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// Feed no backup whatever the configuration names (`mojim rejoin`).
    #[arg(skip)]
    pub(crate) feed_none: bool,
}

#[derive(Args)]
pub(crate) struct AddrArgs {
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Node to ask, instead of [mirror] listen.
    #[arg(long)]
    pub(crate) addr: Option<String>,
}

#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    target: AddrArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Follow the copies in progress (into this node, and from it to its backups) with
    /// progress bars until they finish.
    #[arg(long)]
    progress: bool,
    /// Wait up to this many seconds for the node to answer (one just started), instead of
    /// failing at once when it does not.
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    wait: u64,
}

#[derive(Args)]
struct PromoteArgs {
    #[command(flatten)]
    target: AddrArgs,
    /// Other nodes to fence at the new epoch first (repeat the flag); unreachable ones are
    /// reported and skipped.
    #[arg(long = "peer")]
    peers: Vec<String>,
    /// Most milliseconds to wait for the node's backups to catch up before promoting.
    #[arg(long, default_value_t = 5000)]
    drain_ms: u64,
}

#[derive(Args)]
struct ResolveArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Node whose copy is discarded (it must have no session: fence or stop its primary first).
    #[arg(long)]
    discard: String,
}

#[derive(Args)]
struct CatArgs {
    #[command(flatten)]
    target: AddrArgs,
    /// First byte to print.
    #[arg(long, value_parser = parse_size)]
    offset: u64,
    /// Bytes to print. Any length is one consistent image (whole groups only): the node holds
    /// its data area against checkpoints while it sends, so a long read delays them (not the
    /// primary's acknowledgements, until a lane's log fills).
    #[arg(long, value_parser = parse_size)]
    len: u64,
    /// Print a hex dump instead of raw bytes.
    #[arg(long)]
    hex: bool,
    /// Read even while the data area is inconsistent (a copy into it is unfinished): its bytes
    /// may then mix the copy's with older ones, and need not be any state the primary had.
    #[arg(long)]
    inconsistent: bool,
}

/// How log lines are written (`MOJIM_LOG_FORMAT`).
enum LogFormat {
    /// Lines for people (the default).
    Text,
    /// One JSON object per line.
    Json,
}

/// `MOJIM_LOG_FORMAT`: unset, `text` or `json`.
fn log_format() -> Result<LogFormat, String> {
    match std::env::var("MOJIM_LOG_FORMAT").as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("" | "text") => Ok(LogFormat::Text),
        Ok("json") => Ok(LogFormat::Json),
        Ok(other) => Err(format!("MOJIM_LOG_FORMAT={other:?}: choose text (the default) or json")),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(format!("MOJIM_LOG_FORMAT={v:?} is not UTF-8: choose text (the default) or json"))
        }
    }
}

/// The command line's definition: what parses the arguments, prints --help and makes the
/// manual pages.
fn command() -> clap::Command {
    // `mojim kv --help` lists the commands from the table the server runs them from.
    Cli::command().mut_subcommand("kv", |c| c.after_long_help(mojim_kv::cmd::command_list()))
}

/// `mojim man --out DIR`: a page per command that --help lists (hidden ones left out).
fn man(out: &std::path::Path) -> mojim::Result<()> {
    std::fs::create_dir_all(out)
        .map_err(|e| Error::Io { op: format!("create {}", out.display()), source: e })?;
    clap_mangen::generate_to(command(), out)
        .map_err(|e| Error::Io { op: format!("write the manual pages into {}", out.display()), source: e })?;
    println!("wrote the manual pages into {}", out.display());
    Ok(())
}

fn main() -> ExitCode {
    // Colour only on a terminal: a log written to a file or a pipe stays plain text.
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    // `bench --rvm` opens recoverable memory hundreds of times: its progress lines, not an
    // info line per open, unless MOJIM_LOG asks for them.
    let level = if matches!(&cli.command, Command::Bench(b) if b.rvm.rvm) { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_env("MOJIM_LOG").unwrap_or_else(|_| level.into());
    let log = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match log_format() {
        Ok(LogFormat::Text) => log.with_ansi(colour).init(),
        // One JSON object per line, for log shippers: timestamp, level, target, fields.
        Ok(LogFormat::Json) => log.json().flatten_event(true).init(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match cli.command {
        Command::Init(a) => init(a),
        Command::Serve(a) => serve(a),
        Command::Promote(a) => promote(a, false),
        Command::Demote(a) => promote(a, true),
        Command::Resolve(a) => resolve(a),
        Command::Backup(c) => backup::run(c),
        Command::Rejoin(a) => rejoin::rejoin(a),
        Command::Status(a) => status(a),
        Command::Cat(a) => cat(a),
        Command::Export(a) => export::export(a),
        Command::Demo(a) => mojim_tools::demo::run(&a),
        Command::Bench(a) => mojim_tools::bench::run(&a),
        Command::Rvm(a) => mojim_tools::rvm::run(&a),
        Command::Chaos(a) => mojim_tools::chaos::run(&a),
        Command::Kv(a) => kv(a),
        Command::ChaosWorker(a) => mojim_tools::chaos::worker(&a),
        Command::BenchWorker(a) => mojim_tools::bench_failover::worker(&a),
        Command::Man { out } => man(&out),
        Command::Echo { listen, busy_poll_us, config } => {
            mojim_tools::bench::echo_server(&listen, busy_poll_us, config.as_deref())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mojim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn kv(a: KvArgs) -> mojim::Result<()> {
    if let Some(KvCommand::Cluster(c)) = a.command {
        return kv_cluster::run(c);
    }
    let cfg = Config::load(&a.config.config)?;
    let mut opts = mojim_kv::KvOptions::from_config(
        &cfg,
        a.config.insecure,
        a.listen.as_deref(),
        a.tls_listen.as_deref(),
    )
    .map_err(kv_error)?;
    if let Some(r) = a.region {
        opts.primary.region_path = r;
    }
    opts.mirror_wait = std::time::Duration::from_secs(a.mirror_wait);
    if let Some(m) = a.mirror {
        opts.primary.mirror = m;
    }
    if let Some(n) = a.node {
        opts.primary.node = n;
    }
    let mut sets: Vec<reload::Reloadable> =
        opts.primary.tls.clone().map(|t| security_reload(t, &cfg, true)).into_iter().collect();
    if let Some(t) = opts.tls.clone() {
        sets.push(reload::Reloadable {
            what: "[kv] tls_*",
            reload: Box::new(move || t.reload().map_err(|e| e.to_string())),
        });
    }
    let section = mojim_kv::KvSection::from_config(&cfg).map_err(kv_error)?;
    let metrics = match &a.metrics_listen {
        Some(l) => mojim::config::check_metrics_listen(l, "--metrics-listen")?,
        None => section.metrics_listen().map_err(kv_error)?,
    };
    // Bound before the region opens, so that an address it cannot have stops it at once.
    let metrics = match metrics {
        Some(addr) => Some(MetricsListener::bind(&addr).map_err(|e| {
            Error::Config(format!(
                "cannot open the metrics listener on {addr} ([kv] metrics_listen or --metrics-listen): {e}; \
                 choose a free host:port of this machine, or \"\" for none"
            ))
        })?),
        None => None,
    };
    let cluster_mode = a.cluster || section.cluster;
    let standby = a.standby || section.standby;
    if standby && !cluster_mode {
        return Err(Error::Config(
            "--standby (or [kv] standby = true) waits to serve a shard of a Redis Cluster: it needs \
             --cluster (or [kv] cluster = true) and [cluster] coordinator = \"etcd\""
                .into(),
        ));
    }
    // Kept for as long as the server runs: dropping it stops the watch.
    let (cluster, cluster_store, _watcher) = if cluster_mode {
        let (view, store, watcher) = cluster_view(&cfg, &opts.primary.node)?;
        // Where the topology sends clients must be where this server listens.
        let topology = view.current();
        let node = topology
            .shards
            .iter()
            .flat_map(|s| &s.nodes)
            .find(|n| n.name == opts.primary.node)
            .expect("cluster_view refuses a node in no shard");
        let tls_listen = opts.tls.as_ref().map_or("", |t| t.listen.as_str());
        mojim_kv::cluster::listen::check_listen(store.key(), node, &opts.listen, tls_listen)
            .map_err(kv_error)?;
        (Some(view), Some(store), Some(watcher))
    } else {
        (None, None, None)
    };
    // Before a standby waits: a stop signal ends the wait at once, or the serving server.
    let stop = if standby {
        stop::stop_fd_doing("ending a standby's wait at once, or answering the requests read, then closing")
    } else {
        stop::stop_fd()
    }
    .map_err(|e| Error::Io { op: "install the SIGTERM handler".into(), source: e })?;
    // Before a standby waits too, so that a SIGHUP meanwhile reloads rather than kills it.
    reload::on_sighup(sets).map_err(|e| Error::Io { op: "install the SIGHUP handler".into(), source: e })?;
    if standby {
        use mojim_kv::cluster::failover::{await_promotion, check_standby_region, Waited, MIRROR_DATA_FILE};
        let settings = opts.primary.coordinator.as_ref().ok_or_else(|| {
            Error::Config("--standby (or [kv] standby = true) needs [cluster] coordinator = \"etcd\"".into())
        })?;
        let mirror_data = cfg.resolve(&cfg.file.mirror.dir).join(MIRROR_DATA_FILE);
        check_standby_region(&opts.primary.region_path, &mirror_data).map_err(kv_error)?;
        let client = mojim_kv::cluster::connect::etcd_client(&cfg, "--standby (or [kv] standby = true)")
            .map_err(kv_error)?;
        let roles = format!("{}/roles", settings.prefix);
        let waited = await_promotion(
            &client,
            &roles,
            &opts.primary.node,
            &opts.primary.region_path,
            Some(std::os::fd::AsFd::as_fd(&stop)),
        )
        .map_err(kv_error)?;
        if waited == Waited::Stopped {
            notify::notify("STATUS=stopped");
            return Ok(());
        }
    }
    let control = mojim_kv::Control {
        stop: Some(stop),
        ready: Some(Box::new(|addr: &str| {
            notify::notify(&format!("READY=1\nSTATUS=serving Redis clients on {addr}"));
        })),
        metrics,
        cluster,
        cluster_store,
    };
    let result = mojim_kv::run_with(&opts, control).map_err(kv_error);
    if result.is_ok() {
        // Only a stop signal ends a serving server without an error.
        notify::notify("STATUS=stopped");
    }
    result
}

/// Cluster mode: the topology read from etcd, this node's view of it, the topology's store, and
/// the watch that keeps the view current.
fn cluster_view(
    cfg: &Config,
    node: &str,
) -> mojim::Result<(
    std::sync::Arc<mojim_kv::cluster::view::ClusterView>,
    mojim_kv::cluster::store::TopologyStore,
    mojim_kv::cluster::watcher::TopologyWatcher,
)> {
    use mojim_kv::cluster::{connect, view::ClusterView, watcher::TopologyWatcher};
    let why = "[kv] cluster = true (or mojim kv --cluster)";
    if node.is_empty() {
        return Err(Error::Config(format!(
            "{why} needs this node's name in the cluster topology: pass --node or set [cluster] node"
        )));
    }
    let store = connect::topology_store(cfg, why).map_err(kv_error)?;
    let (topology, revision) = store.read_existing().map_err(|e| kv_error(e.into()))?;
    if !topology.shards.iter().any(|s| s.nodes.iter().any(|n| n.name == node)) {
        let names: Vec<&str> =
            topology.shards.iter().flat_map(|s| s.nodes.iter().map(|n| n.name.as_str())).collect();
        return Err(Error::Config(format!(
            "node {node:?} (--node or [cluster] node) is in no shard of the cluster topology at {} (epoch {};              its nodes: {}): add its shard with `mojim kv cluster add-shard`, or give this node's name",
            store.key(),
            topology.epoch,
            names.join(", ")
        )));
    }
    tracing::info!(epoch = topology.epoch, key = store.key(), "cluster mode: serving as node {node}");
    let view = std::sync::Arc::new(ClusterView::new(node, topology));
    let watcher = TopologyWatcher::start(&store, std::sync::Arc::clone(&view), revision)
        .map_err(|e| Error::Coordinator(format!("watch the cluster topology at {}: {e}", store.key())))?;
    Ok((view, store, watcher))
}

/// Reloading the `[security]` TLS files of `ctx`, a node's or (`application`) an application's,
/// its errors naming each file by where `cfg` sets it.
fn security_reload(
    ctx: std::sync::Arc<mojim_transport::TlsContext>,
    cfg: &Config,
    application: bool,
) -> reload::Reloadable {
    let names: Vec<(&str, String)> = ["ca_file", "cert_file", "key_file", "crl_file"]
        .into_iter()
        .map(|s| (s, cfg.tls_setting(s, application)))
        .collect();
    reload::Reloadable {
        what: "[security]",
        reload: Box::new(move || {
            ctx.reload().map(|l| l.to_string()).map_err(|e| {
                let name = names.iter().find(|(s, _)| *s == e.setting).map_or(e.setting, |(_, n)| n.as_str());
                format!("{name} {}: {}", e.file.display(), e.reason)
            })
        }),
    }
}

pub(crate) fn kv_error(e: mojim_kv::KvError) -> Error {
    match e {
        mojim_kv::KvError::Config(m) => Error::Config(m),
        mojim_kv::KvError::Cluster(e) => Error::Coordinator(e.to_string()),
        mojim_kv::KvError::Mojim(e) => e,
        mojim_kv::KvError::Io { op, source } => Error::Io { op, source },
        e => Error::Io { op: "mojim kv".into(), source: std::io::Error::other(e.to_string()) },
    }
}

fn init(a: InitArgs) -> mojim::Result<()> {
    if let Some(s) = &a.secret {
        Secret(s.clone().into_bytes()).check("--secret").map_err(|e| {
            Error::Config(format!("{e}; or leave out --secret, and `mojim init` makes a random one"))
        })?;
    }
    std::fs::create_dir_all(&a.dir)
        .map_err(|e| Error::Io { op: format!("create {}", a.dir.display()), source: e })?;
    let cfg_path = a.dir.join("mojim.toml");
    if cfg_path.exists() && !a.force {
        return Err(Error::Config(format!("{} exists; pass --force to overwrite it", cfg_path.display())));
    }
    let region_path = a.dir.join("region.mojim");
    if region_path.exists() {
        return Err(Error::Config(format!(
            "{} exists; a region file is never overwritten: remove it or choose another --dir",
            region_path.display()
        )));
    }
    let secret = a.secret.unwrap_or_else(|| {
        let u = random_uuid();
        u.iter().map(|b| format!("{b:02x}")).collect()
    });
    let uuid = random_uuid();
    mojim::create_region(&region_path, mojim::RegionId { uuid, size: a.size })?;
    // The library's sections, and those of the crates that own [rvm] and [kv].
    let owned = [mojim_rvm::config::TEMPLATE, &mojim_kv::config::template()];
    let mut text = template_with(&uuid, a.size, &secret, &a.listen, &owned);
    if a.tls {
        text = init_tls(&a.dir, &text)?;
    }
    // The file holds the secret: readable by its owner only.
    write_private(&cfg_path, &text)
        .map_err(|e| Error::Io { op: format!("write {}", cfg_path.display()), source: e })?;
    println!("created {} and {}", region_path.display(), cfg_path.display());
    println!("copy {} to the mirror and run: mojim serve --config mojim.toml", cfg_path.display());
    Ok(())
}

/// Makes `dir`/tls and returns `config` with TLS on ([`mojim_tools::certs::make_cluster_certs`]).
fn init_tls(dir: &std::path::Path, config: &str) -> mojim::Result<String> {
    let text = mojim_tools::certs::make_cluster_certs(dir, config)?;
    println!(
        "created a CA and certificates for a node, an operator and an application in {}",
        dir.join("tls").display()
    );
    Ok(text)
}

fn serve(a: ServeArgs) -> mojim::Result<()> {
    serve_then(a, |_| Ok(true))
}

/// Serves as `mojim serve` does; `then` runs once the node serves (given its address), and says
/// whether to serve on (until the process is stopped) or stop now. Its error stops the node and
/// is returned.
pub(crate) fn serve_then(a: ServeArgs, then: impl FnOnce(&str) -> mojim::Result<bool>) -> mojim::Result<()> {
    // A panic means a broken invariant: stop the whole daemon; the logs make restart safe.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::abort();
    }));
    let cfg = config_load::load(&a.config.config)?;
    let mut opts = MirrorOptions::from_config(&cfg, a.config.insecure)?;
    if opts.secret.0.is_empty() {
        tracing::warn!("running without a cluster secret (--insecure): any peer may connect");
    }
    if let Some(l) = a.listen {
        opts.listen = l;
    }
    if let Some(d) = a.dir {
        if a.log_dir.is_none() && opts.log_dir == opts.dir {
            opts.log_dir = d.clone();
        }
        opts.dir = d;
    }
    if let Some(d) = a.log_dir {
        opts.log_dir = d;
    }
    if let Some(t) = a.checkpoint_thresh {
        opts.checkpoint_thresh = t.max(1);
    }
    if let Some(us) = a.busy_poll_us {
        opts.busy_poll = Duration::from_micros(us);
    }
    if let Some(d) = a.data {
        opts.data = d;
    }
    if !a.backups.is_empty() || a.feed_none {
        opts.backups = a.backups;
    }
    if let Some(n) = a.node {
        opts.node = n;
    }
    opts.check_backups()?;
    let metrics = match &a.metrics_listen {
        Some(l) => mojim::config::check_metrics_listen(l, "--metrics-listen")?,
        None => cfg.metrics_listen()?,
    };
    if a.check_config {
        check_serve_config(&opts)?;
        println!("configuration OK: {}", a.config.config.display());
        return Ok(());
    }
    // Bound before the node opens, so that an address it cannot have stops it at once.
    let metrics = match metrics {
        Some(addr) => Some(MetricsListener::bind(&addr).map_err(|e| {
            Error::Config(format!(
                "cannot open the metrics listener on {addr} ([metrics] listen or --metrics-listen): {e}; \
                 choose a free host:port of this machine, or \"\" for none"
            ))
        })?),
        None => None,
    };
    let tls = opts.tls.clone().map(|t| security_reload(t, &cfg, false));
    reload::on_sighup(tls.into_iter().collect())
        .map_err(|e| Error::Io { op: "install the SIGHUP handler".into(), source: e })?;
    let signals =
        stop::signals().map_err(|e| Error::Io { op: "install the SIGTERM handler".into(), source: e })?;
    let mirror = Mirror::open(opts)?;
    let handle = mirror.serve()?;
    if let Some(l) = metrics {
        let addr = l.local_addr();
        l.serve(mojim_node::metrics::pages(handle.status_source()), mojim_metrics::Limits::default())
            .map_err(Error::io("start the metrics listener"))?
            .forever();
        println!("metrics on {addr}");
    }
    println!("serving on {}", handle.addr());
    let _ = std::io::stdout().flush();
    let addr = handle.addr().to_string();
    match then(&addr) {
        Ok(true) => {}
        Ok(false) => {
            handle.shutdown();
            return Ok(());
        }
        Err(e) => {
            handle.shutdown();
            return Err(e);
        }
    }
    let st = handle.status();
    notify::notify(&format!(
        "READY=1\nSTATUS=serving on {} (epoch {}, applied up to group {})",
        handle.addr(),
        st.epoch,
        st.applied_seq
    ));
    // The mirror's threads run until it is stopped: wait for a stop signal.
    stop::wait(signals, "ending the session, applying the logs");
    handle.shutdown();
    tracing::info!("stopped");
    Ok(())
}

/// What `mojim serve --check-config` checks beyond loading the configuration (which checks its
/// values and the TLS files): that the listen and backup addresses are host:port, and that the
/// data and log folders are folders where they exist (they are made at start otherwise).
fn check_serve_config(opts: &MirrorOptions) -> mojim::Result<()> {
    for (what, addr) in std::iter::once(("[mirror] listen", &opts.listen))
        .chain(opts.backups.iter().map(|b| ("[mirror] backups", b)))
    {
        // A shared-memory socket's path, or [ucx:]host:port.
        if mojim_transport::shm::is_shm_addr(addr) {
            continue;
        }
        let hp = addr.strip_prefix("ucx:").unwrap_or(addr);
        let port = hp.rsplit_once(':').and_then(|(h, p)| (!h.is_empty()).then_some(p));
        if port.and_then(|p| p.parse::<u16>().ok()).is_none() {
            return Err(Error::Config(format!(
                "{what} {addr:?} is neither host:port (e.g. \"10.0.0.2:7070\"), ucx:host:port, nor a \
                 shared-memory socket's absolute path"
            )));
        }
    }
    for (what, dir) in [("[mirror] dir", &opts.dir), ("[mirror] log_dir", &opts.log_dir)] {
        if dir.exists() && !dir.is_dir() {
            return Err(Error::Config(format!("{what} {} exists and is not a folder", dir.display())));
        }
    }
    Ok(())
}

fn promote(a: PromoteArgs, demote: bool) -> mojim::Result<()> {
    let cfg = config_load::load(&a.target.config.config)?;
    let secret = cfg.secret(a.target.config.insecure)?;
    let addr = a.target.addr.clone().unwrap_or_else(|| cfg.file.mirror.listen.clone());
    let tls = cfg.tls()?;
    let connect = |x: &str| AdminClient::connect_tls(x, &secret, tls.clone(), Duration::from_secs(5));
    let mut node = connect(&addr)?;
    let mut epoch = node.status()?.epoch;
    let mut peers = Vec::new();
    for p in &a.peers {
        match connect(p).and_then(|mut c| c.status().map(|st| (c, st))) {
            Ok((c, st)) => {
                epoch = epoch.max(st.epoch);
                peers.push((p.clone(), c));
            }
            Err(e) => eprintln!(
                "warning: {p} is unreachable ({e}); it is not fenced, but it refuses nothing \
                                 newer than its epoch when it returns"
            ),
        }
    }
    let reply = if demote {
        node.command(&format!(r#"{{"op":"demote","epoch":{epoch}}}"#))?
    } else {
        let new = epoch + 1;
        // The node fences itself first (ending the old primary's session), then lets its
        // backups catch up; only then are the peers fenced, which ends their feeds.
        let reply =
            node.command(&format!(r#"{{"op":"promote","epoch":{new},"drain_ms":{}}}"#, a.drain_ms))?;
        for (p, c) in &mut peers {
            c.command(&format!(r#"{{"op":"fence","epoch":{new}}}"#))?;
            eprintln!("fenced {p} at epoch {new}");
        }
        reply
    };
    println!("{reply}");
    if !demote {
        eprintln!(
            "{addr} is the primary's node at epoch {}: start the application there with [region] path = {}",
            reply["epoch"], reply["region_path"]
        );
    }
    Ok(())
}

fn resolve(a: ResolveArgs) -> mojim::Result<()> {
    let cfg = config_load::load(&a.config.config)?;
    let secret = cfg.secret(a.config.insecure)?;
    let mut node = AdminClient::connect_tls(&a.discard, &secret, cfg.tls()?, Duration::from_secs(5))?;
    println!("{}", node.command(r#"{"op":"discard"}"#)?);
    eprintln!("{}: copy discarded; its next session copies the whole region into it", a.discard);
    Ok(())
}

pub(crate) fn admin(t: &AddrArgs) -> mojim::Result<AdminClient> {
    let cfg = config_load::load(&t.config.config)?;
    let secret = cfg.secret(t.config.insecure)?;
    let addr = t.addr.clone().unwrap_or_else(|| cfg.file.mirror.listen.clone());
    AdminClient::connect_tls(&addr, &secret, cfg.tls()?, Duration::from_secs(5))
}

/// Progress bars of the copies into and from a node, until none is left.
fn follow_copies(node: &mut AdminClient) -> mojim::Result<()> {
    use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
    let style =
        ProgressStyle::with_template("{msg:28} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> ");
    let multi = MultiProgress::new();
    let mut bars: std::collections::HashMap<String, ProgressBar> = std::collections::HashMap::new();
    loop {
        let st = node.status()?;
        let mut live = Vec::new();
        if let Some(c) = &st.copy {
            live.push((
                "copy into this node".to_string(),
                c.received_bytes.min(c.total_bytes),
                c.total_bytes,
            ));
        }
        // A copy sent in whole stays live until the backup confirms it landed; a failed one ends.
        for b in st.backups.iter().filter(|b| b.copying && b.error.is_none()) {
            live.push((format!("copy to backup {}", b.addr), b.copy_sent, b.copy_total));
        }
        for (name, done, total) in &live {
            let bar = bars.entry(name.clone()).or_insert_with(|| {
                let b = multi.add(ProgressBar::new(*total));
                b.set_style(style.clone());
                b.set_message(name.clone());
                b
            });
            bar.set_length(*total);
            bar.set_position(*done);
        }
        bars.retain(|name, bar| {
            let keep = live.iter().any(|(n, _, _)| n == name);
            if !keep {
                bar.finish();
            }
            keep
        });
        if live.is_empty() {
            if st.consistent {
                println!("no copy in progress; the copy is consistent");
            } else {
                println!("no copy in progress, but this copy is inconsistent: it needs a full copy");
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An operator's connection to `t`, tried again for up to `wait` seconds while the node does
/// not answer.
fn admin_waiting(t: &AddrArgs, wait: u64) -> mojim::Result<AdminClient> {
    let deadline = std::time::Instant::now() + Duration::from_secs(wait);
    loop {
        match admin(t).and_then(|mut c| c.status().map(|_| c)) {
            Ok(c) => return Ok(c),
            Err(e @ (Error::Config(_) | Error::Refused { .. })) => return Err(e),
            Err(e) if std::time::Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn status(a: StatusArgs) -> mojim::Result<()> {
    if a.progress {
        return follow_copies(&mut admin_waiting(&a.target, a.wait)?);
    }
    let st = admin_waiting(&a.target, a.wait)?.status()?;
    if a.json {
        println!("{}", serde_json::to_string(&st).unwrap_or_default());
        return Ok(());
    }
    println!("role            {}", st.role);
    println!("listen          {}", st.listen);
    println!(
        "region          {} ({} bytes, data area on {})",
        st.region_uuid, st.region_size, st.data_persistence
    );
    println!("epoch           {}", st.epoch);
    println!(
        "generation      {} (before it {}){}",
        st.generation,
        st.prev_generation,
        if st.consistent { "" } else { ", INCONSISTENT: a copy into it is unfinished" }
    );
    if let Some(c) = &st.copy {
        println!(
            "copy            {} of {} bytes received, {:.1} MB/s, {} bytes remaining",
            c.received_bytes, c.total_bytes, c.mb_per_s, c.remaining_bytes
        );
    }
    for b in &st.backups {
        let copy = if !b.copying {
            String::new()
        } else if b.copy_sent < b.copy_total {
            format!(", full copy {} of {} bytes", b.copy_sent, b.copy_total)
        } else {
            ", full copy sent, not yet confirmed landed by the backup".to_string()
        };
        println!(
            "backup          {} {} acked {} lag {} groups, {:.3} s{}{copy}",
            b.addr,
            if b.connected { "connected" } else { "down" },
            b.acked_seq,
            b.lag_groups,
            b.lag_seconds,
            b.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
        );
    }
    match (&st.session, &st.primary) {
        (Some(s), Some(p)) => println!("session         {s} from {p}, {} lanes", st.session_lanes),
        _ => println!("session         none"),
    }
    println!("last received   {}", st.last_received_seq);
    println!("last applied    {}", st.applied_seq);
    println!("lag             {} groups, {} bytes", st.lag_groups, st.lag_bytes);
    println!("received        {} groups, {} bytes", st.groups_received, st.bytes_received);
    println!("violations      {}", st.violations);
    for l in &st.lanes {
        let pct = if l.log_capacity > 0 { 100.0 * l.log_used as f64 / l.log_capacity as f64 } else { 0.0 };
        println!(
            "lane {:<3}        log {:>12} / {:>12} bytes ({pct:.1}%)",
            l.lane, l.log_used, l.log_capacity
        );
    }
    println!(
        "recovery        {} groups applied, {} discarded, {} µs",
        st.recovery.groups_applied, st.recovery.groups_discarded, st.recovery.micros
    );
    if let Some(n) = &st.nvmm {
        let cap = match n.write_bytes_per_s {
            0 => "no write cap".to_string(),
            r => format!("at most {r} bytes/s"),
        };
        println!(
            "emulated NVMM   {} ns per barrier, {cap}: {} barriers, {} bytes, {:.3} s of delay",
            n.barrier_ns,
            n.barriers,
            n.bytes,
            n.delay_ns as f64 / 1e9
        );
    }
    Ok(())
}

fn cat(a: CatArgs) -> mojim::Result<()> {
    let mut node = admin(&a.target)?;
    let st = node.status()?;
    if !st.consistent {
        let copy = st.copy.as_ref().map_or(String::new(), |c| {
            format!(
                " (a copy into it is under way: {} of {} bytes received)",
                c.received_bytes, c.total_bytes
            )
        });
        let msg = format!("the data area of {} is inconsistent{copy}", st.listen);
        if !a.inconsistent {
            return Err(Error::Io {
                op: format!("read {} bytes at offset {}", a.len, a.offset),
                source: std::io::Error::other(format!(
                    "{msg}; its bytes may mix the copy's with older ones. Wait for the copy to end \
                     (`mojim status`), or pass --inconsistent to read it anyway"
                )),
            });
        }
        eprintln!("warning: {msg}; reading it anyway (--inconsistent): the bytes need not be any state the primary had");
    }
    let bytes = node.read(a.offset, a.len)?;
    let mut out = std::io::stdout().lock();
    let w = if a.hex {
        bytes.chunks(16).enumerate().try_for_each(|(i, c)| {
            let hex: Vec<String> = c.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "{:012x}  {}", a.offset + 16 * i as u64, hex.join(" "))
        })
    } else {
        out.write_all(&bytes)
    };
    w.map_err(|e| Error::Io { op: "write to stdout".into(), source: e })
}
