//! The nodes of a chaos trial and the network between them.
//!
//! A node is a folder (`data.mojim`, lane logs, the primary's files once promoted, its
//! configuration and logs) and a `mojim serve` daemon. With network namespaces each node lives
//! in a namespace of its own, joined by a veth pair to a bridge in the harness's namespace, and
//! a partition is a blackhole route on each side; on loopback all nodes share 127.0.0.1 and a
//! partition can only be emulated by freezing a node. Under the etcd coordinator the etcd gets a
//! namespace of its own on the same bridge (the one after the nodes'), so that a partition can
//! cut a node off from it too.

pub(crate) use crate::netns::Netns;
use mojim::config::{template, ConfigFile, EtcdSettings, Secret};
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Port every daemon listens on inside its namespace.
const NETNS_PORT: u16 = 7420;
/// How long a process may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a node may take to answer an operator (a promotion waits up to 5 s for a session
/// to end).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the nodes run.
pub(crate) enum Net {
    /// One host: TCP ports, or with `shm` set, sockets in that folder (shared-memory links).
    Loopback {
        ports: Vec<u16>,
        shm: Option<PathBuf>,
    },
    Netns(Netns),
}

impl Net {
    /// Loopback with a free port per node (kept for the node's restarts).
    pub fn loopback(nodes: usize) -> Result<Net, String> {
        let held: Vec<std::net::TcpListener> = (0..nodes)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()
            .map_err(|e| format!("find free ports: {e}"))?;
        let ports = held.iter().map(|l| l.local_addr().map(|a| a.port())).collect::<std::io::Result<_>>();
        Ok(Net::Loopback { ports: ports.map_err(|e| format!("find free ports: {e}"))?, shm: None })
    }

    /// One host, the nodes linked through shared memory: node `i` listens on a socket in `dir`.
    pub fn shm(nodes: usize, dir: &Path) -> Result<Net, String> {
        match Net::loopback(nodes)? {
            Net::Loopback { ports, .. } => Ok(Net::Loopback { ports, shm: Some(dir.to_path_buf()) }),
            other => Ok(other),
        }
    }

    pub fn addr(&self, i: usize) -> String {
        match self {
            Net::Loopback { shm: Some(dir), .. } => dir.join(format!("node-{i}.sock")).display().to_string(),
            Net::Loopback { ports, .. } => format!("127.0.0.1:{}", ports[i]),
            Net::Netns(n) => format!("{}:{NETNS_PORT}", n.ip_of(i)),
        }
    }

    /// The IP address of site `i` (a node, or the etcd's namespace after the nodes').
    pub fn host(&self, i: usize) -> String {
        match self {
            Net::Loopback { .. } => "127.0.0.1".into(),
            Net::Netns(n) => n.ip_of(i),
        }
    }

    /// A command that runs `exe` on site `i` (a node, or the etcd's namespace after the nodes').
    pub fn command(&self, i: usize, exe: &Path) -> Command {
        match self {
            Net::Loopback { .. } => Command::new(exe),
            Net::Netns(n) => n.command(i, exe),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Net::Loopback { shm: Some(_), .. } => {
                "shared memory on one host (partitions emulated: the cut-off node is frozen with SIGSTOP, then \
                 SIGCONT)"
                    .into()
            }
            Net::Loopback { .. } => {
                "loopback (partitions emulated: the cut-off node is frozen with SIGSTOP, then SIGCONT)".into()
            }
            Net::Netns(n) => format!(
                "network namespaces on bridge {} ({}.0/24; partitions are blackhole routes on both sides)",
                n.bridge(),
                n.subnet()
            ),
        }
    }
}

/// A child process of the harness; killed when dropped.
pub(crate) struct Proc {
    child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    stdin: Option<ChildStdin>,
    frozen: bool,
    exited: Option<ExitStatus>,
}

impl Proc {
    /// Starts `cmd` with its stderr appended to `log`, and waits for a stdout line starting
    /// with `ready`; returns the rest of that line.
    fn spawn(mut cmd: Command, log: &Path, ready: &str, stdin: bool) -> Result<(Proc, String), String> {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("open {}: {e}", log.display()))?;
        if std::env::var_os("MOJIM_LOG").is_none() {
            cmd.env("MOJIM_LOG", "info");
        }
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(err);
        let mut child = cmd.spawn().map_err(|e| format!("start {cmd:?}: {e}"))?;
        let out = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let (l2, ready) = (lines.clone(), ready.to_string());
        let mut tx = Some(tx);
        super::workload::pump_lines(out, move |line| {
            if let Some(rest) = line.strip_prefix(ready.as_str()) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(rest.trim().to_string());
                }
            }
            l2.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        });
        let mut p = Proc { child, lines, stdin, frozen: false, exited: None };
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(rest) => Ok((p, rest)),
            Err(e) => {
                let said = p.lines.lock().unwrap_or_else(|x| x.into_inner()).join(" | ");
                p.kill();
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => format!("not ready within {READY_TIMEOUT:?}"),
                    mpsc::RecvTimeoutError::Disconnected => "exited before it was ready".into(),
                };
                Err(format!("{cmd:?}: {why} (stdout: {said}; see {})", log.display()))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: rustix::process::Signal) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    pub fn freeze(&mut self) {
        self.signal(rustix::process::Signal::STOP);
        self.frozen = true;
    }

    pub fn thaw(&mut self) {
        self.signal(rustix::process::Signal::CONT);
        self.frozen = false;
    }

    /// Closes the child's stdin (a worker's request to stop).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Its exit status, once it exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits at most `timeout` for it to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Some(s) = self.exited() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }

    /// The last line it printed.
    pub fn last_line(&self) -> String {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).last().cloned().unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.frozen {
            self.thaw();
        }
        self.kill();
    }
}

/// The settings every node of a trial shares.
#[derive(Clone)]
pub(crate) struct Shape {
    pub uuid: [u8; 16],
    pub size: u64,
    pub secret: String,
}

/// What a new worker is told.
pub(crate) struct WorkerPlan<'a> {
    /// The current mirror's address.
    pub mirror: &'a str,
    /// Numbers the worker's files (`acks-N.log`, `worker-N.log`).
    pub number: usize,
    pub start_k: u64,
    pub seed: u64,
    /// It restarts on the copy a killed worker used: finish that worker's last group first.
    pub redo: bool,
}

/// A node: its folder, address and daemon.
pub(crate) struct Node {
    pub name: char,
    pub dir: PathBuf,
    pub addr: String,
    pub daemon: Option<Proc>,
}

impl Node {
    pub fn data_path(&self) -> PathBuf {
        self.dir.join("data.mojim")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("node.toml")
    }
}

/// The nodes of one trial.
pub(crate) struct Cluster {
    pub nodes: Vec<Node>,
    pub shape: Shape,
    pub exe: PathBuf,
    secret: Secret,
    pub dir: PathBuf,
    started: Instant,
    /// The etcd coordinator the nodes use (this trial's key prefix), if not the static one.
    pub etcd: Option<EtcdSettings>,
}

impl Cluster {
    pub fn new(
        dir: &Path,
        net: &Net,
        count: usize,
        shape: Shape,
        exe: PathBuf,
        etcd: Option<EtcdSettings>,
    ) -> Result<Cluster, String> {
        let mut nodes = Vec::new();
        for i in 0..count {
            let name = (b'a' + i as u8) as char;
            let d = dir.join(name.to_string());
            std::fs::create_dir_all(&d).map_err(|e| format!("create {}: {e}", d.display()))?;
            nodes.push(Node { name, dir: d, addr: net.addr(i), daemon: None });
        }
        let secret = Secret(shape.secret.clone().into_bytes());
        Ok(Cluster { nodes, shape, exe, secret, dir: dir.to_path_buf(), started: Instant::now(), etcd })
    }

    /// Writes node `i`'s configuration: it feeds `backups`, and its application's mirror is
    /// `mirror`.
    fn write_config(&self, i: usize, backups: &[String], mirror: &str) -> Result<(), String> {
        let n = &self.nodes[i];
        let mut f: ConfigFile =
            toml::from_str(&template(&self.shape.uuid, self.shape.size, &self.shape.secret, &n.addr))
                .map_err(|e| format!("chaos config: {e}"))?;
        f.region.path = "data.mojim".into();
        f.mirror.dir = ".".into();
        f.mirror.backups = backups.to_vec();
        f.mirror.log_capacity = "2MiB".into();
        f.primary.mirror = mirror.to_string();
        let transport = mojim_transport::transport_of(&n.addr);
        f.primary.transport = transport.into();
        f.mirror.transport = transport.into();
        f.primary.lanes = 2;
        f.primary.connect_timeout_ms = 1000;
        f.cluster.heartbeat_interval_ms = 20;
        f.cluster.heartbeat_timeout_ms = 300;
        f.cluster.reconnect_ms = 50;
        f.cluster.on_mirror_loss = "block".into();
        f.cluster.dirty_chunk = "4KiB".into();
        f.cluster.metadata_log_records = 4096;
        if let Some(e) = &self.etcd {
            f.cluster.coordinator = "etcd".into();
            f.cluster.node = n.name.to_string();
            f.cluster.etcd_endpoints = e.endpoints.clone();
            f.cluster.etcd_prefix = e.prefix.clone();
            f.cluster.lease_ttl_ms = e.lease_ttl.as_millis() as u64;
            f.cluster.lease_renew_ms = e.lease_renew.as_millis() as u64;
            f.cluster.lease_margin_ms = e.lease_margin.as_millis() as u64;
        }
        let text = toml::to_string(&f).map_err(|e| format!("chaos config: {e}"))?;
        mojim::config::write_private(&n.config_path(), &text)
            .map_err(|e| format!("write {}: {e}", n.config_path().display()))
    }

    /// Starts node `i`'s daemon (from its folder, as it is) feeding `backups`.
    pub fn start_daemon(&mut self, net: &Net, i: usize, backups: &[String]) -> Result<(), String> {
        assert!(self.nodes[i].daemon.is_none(), "node {} runs already", self.nodes[i].name);
        self.write_config(i, backups, "")?;
        let n = &self.nodes[i];
        let mut cmd = net.command(i, &self.exe);
        cmd.arg("serve").arg("--config").arg(n.config_path());
        let (p, _) = Proc::spawn(cmd, &n.dir.join("daemon.log"), "serving on ", false)?;
        self.nodes[i].daemon = Some(p);
        Ok(())
    }

    /// SIGKILLs node `i`'s daemon, if it runs.
    pub fn kill_daemon(&mut self, i: usize) {
        if let Some(mut d) = self.nodes[i].daemon.take() {
            d.kill();
        }
    }

    /// Starts a worker on node `i`; returns it, its ack log and the rest of its `running` line.
    pub fn start_worker(
        &mut self,
        net: &Net,
        i: usize,
        plan: &WorkerPlan<'_>,
    ) -> Result<(Proc, PathBuf, String), String> {
        self.write_config(i, &[], plan.mirror)?;
        let n = &self.nodes[i];
        let w = plan.number;
        let ack_log = n.dir.join(format!("acks-{w}.log"));
        let mut cmd = net.command(i, &self.exe);
        cmd.arg("chaos-worker").arg("--config").arg(n.config_path());
        cmd.args(["--mirror", plan.mirror])
            .arg("--ack-log")
            .arg(&ack_log)
            .arg("--intent")
            .arg(n.dir.join("intent"));
        cmd.args(["--start-k", &plan.start_k.to_string(), "--seed", &plan.seed.to_string()]);
        if plan.redo {
            cmd.arg("--redo");
        }
        let (p, said) = Proc::spawn(cmd, &n.dir.join(format!("worker-{w}.log")), "running ", true)?;
        Ok((p, ack_log, said))
    }

    /// Runs `call` on an operator's connection to node `i`, in a thread of its own: a node that
    /// stops answering is reported as a hang (and its threads' stacks saved beside its log when
    /// gdb is at hand) instead of blocking the harness.
    fn call<T: Send + 'static>(
        &self,
        i: usize,
        what: &str,
        call: impl FnOnce(&mut AdminClient) -> mojim::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let (addr, secret) = (self.nodes[i].addr.clone(), self.secret.clone());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let r =
                AdminClient::connect(&addr, &secret, Duration::from_secs(2)).and_then(|mut c| call(&mut c));
            let _ = tx.send(r);
        });
        let name = self.nodes[i].name;
        match rx.recv_timeout(ADMIN_TIMEOUT) {
            Ok(r) => r.map_err(|e| format!("{what} on node {name}: {e}")),
            Err(_) => {
                let stacks = self.save_stacks(i);
                Err(format!("hang: node {name} did not answer {what} within {ADMIN_TIMEOUT:?}{stacks}"))
            }
        }
    }

    /// Saves every thread's stack of node `i`'s daemon (best effort, with gdb).
    fn save_stacks(&self, i: usize) -> String {
        let Some(pid) = self.nodes[i].daemon.as_ref().map(Proc::pid) else { return String::new() };
        let out = self.nodes[i].dir.join("hang-stacks.txt");
        let r = Command::new("gdb")
            .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt"])
            .stdin(Stdio::null())
            .output();
        match r {
            Ok(o) if o.status.success() => match std::fs::write(&out, &o.stdout) {
                Ok(()) => format!(" (its threads' stacks are in {})", out.display()),
                Err(_) => String::new(),
            },
            _ => String::new(),
        }
    }

    pub fn status(&self, i: usize) -> Result<MirrorStatus, String> {
        self.call(i, "status", |c| c.status())
    }

    /// Sends an operator's command to node `i`.
    pub fn command(&self, i: usize, json: &str) -> Result<serde_json::Value, String> {
        let j = json.to_string();
        self.call(i, json, move |c| c.command(&j))
    }

    /// Notes a line in the trial's operator log, with the time since the trial began.
    pub fn note(&self, line: &str) {
        if let Ok(mut f) =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("operator.log"))
        {
            let _ = writeln!(f, "{:>8.3}s {line}", self.started.elapsed().as_secs_f64());
        }
    }

    /// Lines of the nodes' logs that contain `what`.
    pub fn grep_logs(&self, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        for n in &self.nodes {
            let Ok(entries) = std::fs::read_dir(&n.dir) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".log") || name.starts_with("acks-") || name.starts_with("lane-") {
                    continue;
                }
                let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                let plain = |l: &str| {
                    // Without the terminal colours of the log lines.
                    let mut out = String::with_capacity(l.len());
                    let mut escape = false;
                    for c in l.chars() {
                        match (escape, c) {
                            (false, '\x1b') => escape = true,
                            (true, 'm') => escape = false,
                            (true, _) => {}
                            (false, c) => out.push(c),
                        }
                    }
                    out
                };
                out.extend(
                    text.lines()
                        .filter(|l| l.contains(what))
                        .map(|l| format!("{}/{name}: {}", n.name, plain(l))),
                );
            }
        }
        out
    }
}
