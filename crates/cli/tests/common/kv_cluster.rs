//! A Redis Cluster of `mojim kv` shards for the tests: a real etcd, and per shard a region, its
//! `mojim serve` mirror and its `mojim kv --cluster` primary, the topology made by `mojim kv
//! cluster create`. On loopback (the primaries on 127.0.0.1, the mirrors on 127.0.0.2), or
//! every process in a network namespace of its own (root only), etcd too, which every
//! namespace and the test itself reach over the namespaces' bridge. Also `mojim` commands run to their
//! end against a cluster's configuration, free addresses on a loopback host, and named
//! `mojim serve` nodes.

use super::edit_kv;
use super::kv::wait_for;
use super::{exe, use_etcd, Cluster, TempDir};
use mojim::config::write_private;
use mojim_etcd::testing::EtcdServer;
use mojim_kv::cluster::store::TopologyStore;
use mojim_kv::cluster::topology::Topology;
use mojim_tools::child::ChildNode;
use mojim_tools::netns::Netns;
use mojim_transport::tls::pki::{Ca, Validity};
use mojim_transport::Role;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Where the shards' processes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// On this machine's loopback addresses.
    Loopback,
    /// Each process in a network namespace of its own: primary `i` in namespace `2i`, its
    /// mirror's node in `2i + 1`, etcd in `2n`.
    Namespaces,
}

/// A CA, a certificate for the servers and one for the clients (`ca.pem`, `server.pem`,
/// `server.key`, `client.pem`, `client.key`), in a folder of their own.
pub struct KvCerts {
    pub dir: TempDir,
}

impl KvCerts {
    pub fn new(test: &str) -> KvCerts {
        let dir = TempDir::new(&format!("{test}-certs"));
        let write =
            |name: &str, text: &str| write_private(&dir.path().join(name), text).expect("write a PEM file");
        let ca = Ca::new("kv cluster test CA").expect("a CA");
        write("ca.pem", ca.cert_pem());
        for (name, role) in [("server", Role::Node), ("client", Role::Application)] {
            let issued = ca.issue(name, role, Validity::Years(1)).expect("a certificate");
            write(&format!("{name}.pem"), &issued.cert_pem);
            write(&format!("{name}.key"), &issued.key_pem);
        }
        KvCerts { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().expect("utf-8").to_string()
    }
}

/// How each shard's mirror runs ([`Setup::mirrors`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mirrors {
    /// `mojim serve` named by no node: it never takes over, so a shard's primary killed by a
    /// test starts again on its region ([`KvShards::start_primary`]; a named mirror takes over
    /// once the killed primary's lease runs out, and the restart is then refused).
    Unnamed,
    /// Node `m<i>`'s `mojim serve`, named in the topology, in folder `m<i>`.
    Named,
    /// As `Named`, feeding the backup `b<i>` (the mirror after a take-over), and beside it
    /// `m<i>`'s `mojim kv --cluster --standby`, which serves the promoted copy and takes the
    /// shard in the topology once `p<i>`'s lease has lapsed.
    Failover,
}

/// How [`KvShards::start`] runs the shards.
pub struct Setup<'a> {
    pub network: Network,
    pub mirrors: Mirrors,
    /// The primaries serve TLS too with this server certificate (clients' certificates
    /// required).
    pub certs: Option<&'a KvCerts>,
    /// Edits every shard's configuration after the etcd and cluster settings.
    pub edit: &'a dyn Fn(&mut mojim::config::ConfigFile),
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup { network: Network::Loopback, mirrors: Mirrors::Named, certs: None, edit: &|_| {} }
    }
}

/// The addresses of one shard's processes.
struct Addrs {
    /// `p<i>`'s `kv_addr`, and its `kv_tls_addr` (empty without TLS).
    kv: String,
    tls: String,
    /// `m<i>`'s `kv_addr` (its standby's), and where its mirror and backup listen.
    standby: String,
    mirror: String,
    backup: String,
}

/// `n` shards of one Redis Cluster under a real etcd: shard `i` is its own `Cluster`
/// (configuration, region; its mirror is the `Cluster`'s `mirror`), node `p<i>`'s
/// `mojim kv --cluster` its primary, and its mirror node `m<i>` run as [`Mirrors`] says. On
/// loopback (primaries and backups on 127.0.0.1, `m<i>`'s processes on 127.0.0.2), or in network
/// namespaces (root): `p<i>` in site `2i`, `m<i>`'s processes in site `2i + 1`, etcd in site
/// `2n`. Fields drop in order: processes, folders (with the mirrors), etcd, namespaces.
pub struct KvShards {
    pub primaries: Vec<Option<ChildNode>>,
    /// With [`Mirrors::Failover`]; else empty.
    pub standbys: Vec<Standby>,
    pub backups: Vec<ChildNode>,
    /// `p<i>`'s `kv_addr`.
    pub kv_addrs: Vec<String>,
    /// `p<i>`'s `kv_tls_addr` (empty without TLS).
    pub tls_addrs: Vec<String>,
    /// `m<i>`'s `kv_addr` (its standby's).
    pub standby_addrs: Vec<String>,
    pub shards: Vec<Cluster>,
    pub etcd: EtcdServer,
    /// The etcd prefix the topology lives under.
    pub prefix: String,
    pub net: Option<Netns>,
}

impl KvShards {
    /// Starts `n` shards as `setup` says. `None` when the test cannot run here (no etcd;
    /// namespaces without root), after [`super::skip`] said why.
    pub fn start(test: &str, n: usize, setup: Setup) -> Option<KvShards> {
        let net = match setup.network {
            Network::Loopback => None,
            Network::Namespaces => match Netns::create(2 * n + 1) {
                Ok(net) => Some(net),
                Err(e) => {
                    super::skip(&format!("no network namespaces: {e}"));
                    return None;
                }
            },
        };
        if mojim_etcd::testing::skip_without_etcd() {
            return None;
        }
        let etcd = match &net {
            None => EtcdServer::start(),
            Some(net) => {
                let ns = net.name(2 * n);
                EtcdServer::launch()
                    .listen(&net.ip_of(2 * n), 2379, 2380)
                    .command(move |bin| {
                        let mut c = Command::new("ip");
                        c.args(["netns", "exec", &ns]).arg(bin);
                        c
                    })
                    .start()
            }
        };
        let etcd = etcd.unwrap_or_else(|e| panic!("etcd: {e}"));
        let endpoint = etcd.endpoint();
        let prefix = format!("/{test}");
        let certs = setup.certs;
        let addrs: Vec<Addrs> = (0..n)
            .map(|i| match &net {
                Some(net) => {
                    let (p, m) = (net.ip_of(2 * i), net.ip_of(2 * i + 1));
                    Addrs {
                        kv: format!("{p}:6379"),
                        tls: if certs.is_some() { format!("{p}:6380") } else { String::new() },
                        standby: format!("{m}:6379"),
                        mirror: format!("{m}:7070"),
                        backup: format!("{m}:7071"),
                    }
                }
                None => Addrs {
                    kv: free_addr(),
                    tls: if certs.is_some() { free_addr() } else { String::new() },
                    standby: free_addr_on("127.0.0.2"),
                    mirror: "127.0.0.2:0".into(),
                    backup: "127.0.0.1:0".into(),
                },
            })
            .collect();
        let mut shards: Vec<Cluster> = (0..n)
            .map(|i| {
                Cluster::new(&format!("{test}{i}"), 4 << 20, |f| {
                    use_etcd(f, &endpoint);
                    edit_kv(f, |k| {
                        k.cluster_prefix = prefix.clone();
                        // The namespaces' network is the test's own: no password, and clients
                        // from outside loopback, as an operator turns protected mode off.
                        k.protected_mode = net.is_none();
                        if let Some(certs) = certs {
                            k.tls_listen = addrs[i].tls.clone();
                            k.tls_cert_file = certs.path("server.pem");
                            k.tls_key_file = certs.path("server.key");
                            k.tls_ca_cert_file = certs.path("ca.pem");
                            k.tls_auth_clients = "yes".into();
                        }
                    });
                    (setup.edit)(f);
                })
            })
            .collect();
        let mut backups = Vec::new();
        for (i, c) in shards.iter_mut().enumerate() {
            let cfg = c.cfg_path.to_str().expect("utf-8").to_owned();
            let serve = |name: &str, listen: &str, backup: Option<&str>| {
                let mut args = vec!["serve", "--config", &cfg, "--listen", listen];
                let dir = c.dir.path().join(name);
                if setup.mirrors != Mirrors::Unnamed {
                    args.extend(["--node", name, "--dir", dir.to_str().expect("utf-8")]);
                }
                args.extend(backup.map(|b| ["--backup", b]).into_iter().flatten());
                spawn_at(net.as_ref(), 2 * i + 1, &args)
            };
            let backup =
                (setup.mirrors == Mirrors::Failover).then(|| serve(&format!("b{i}"), &addrs[i].backup, None));
            let mirror = serve(&format!("m{i}"), &addrs[i].mirror, backup.as_ref().map(ChildNode::addr));
            backups.extend(backup);
            c.mirror = Some(mirror);
        }
        let mut create = vec!["kv".to_owned(), "cluster".into(), "create".into()];
        for (i, c) in shards.iter().enumerate() {
            let a = &addrs[i];
            // `p<i>` runs no `mojim serve`: on loopback its serve address is one nothing
            // listens on; in a namespace, where its serve would listen.
            let p_host = a.kv.rsplit_once(':').expect("host:port").0;
            let p_serve = if net.is_some() { format!("{p_host}:7070") } else { format!("{p_host}:1") };
            let tls = if certs.is_some() { format!("/tls={}", a.tls) } else { String::new() };
            create.push("--shard".into());
            create.push(format!("p{i}/{}/{p_serve}{tls},m{i}/{}/{}", a.kv, a.standby, c.mirror_addr()));
        }
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        ok(&shards[0], &create);
        let mut s = KvShards {
            primaries: (0..n).map(|_| None).collect(),
            standbys: Vec::new(),
            backups,
            kv_addrs: addrs.iter().map(|a| a.kv.clone()).collect(),
            tls_addrs: addrs.iter().map(|a| a.tls.clone()).collect(),
            standby_addrs: addrs.iter().map(|a| a.standby.clone()).collect(),
            shards,
            etcd,
            prefix,
            net,
        };
        for i in 0..n {
            s.start_primary(i);
        }
        if setup.mirrors == Mirrors::Failover {
            for (i, c) in s.shards.iter().enumerate() {
                let cfg = c.cfg_path.to_str().expect("utf-8");
                let region = c.dir.path().join(format!("m{i}")).join("data.mojim");
                let node = format!("m{i}");
                let args = [
                    "kv",
                    "--config",
                    cfg,
                    "--cluster",
                    "--standby",
                    "--node",
                    &node,
                    "--region",
                    region.to_str().expect("utf-8"),
                    "--listen",
                    &s.standby_addrs[i],
                ];
                s.standbys.push(Standby::launch(s.net.as_ref(), 2 * i + 1, &args));
            }
        }
        Some(s)
    }

    /// Starts shard `i`'s `mojim kv --cluster` on its region; after a kill -9 it is tried again
    /// until the killed one's primary lease in etcd has run out.
    pub fn start_primary(&mut self, i: usize) {
        assert!(self.primaries[i].is_none(), "shard {i}'s primary runs already");
        let c = &self.shards[i];
        let cfg = c.cfg_path.to_str().expect("utf-8");
        let (node, mirror) = (format!("p{i}"), c.mirror_addr());
        let args = [
            "kv",
            "--config",
            cfg,
            "--cluster",
            "--node",
            &node,
            "--mirror",
            &mirror,
            "--listen",
            &self.kv_addrs[i],
        ];
        // The lease of a killed server runs out first: a few seconds, longer on a loaded machine.
        let t0 = std::time::Instant::now();
        let started = loop {
            if let Ok(c) = try_spawn_at(self.net.as_ref(), self.site(i, false), &args) {
                break c;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "mojim kv --cluster of shard {i} did not start in 90 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        self.primaries[i] = Some(started);
    }

    /// `mojim <args> --config <shard 0's>`, run to its end.
    pub fn mojim(&self, args: &[&str]) -> Output {
        mojim(&self.shards[0], args)
    }

    /// Shard `i`'s primary's host and port.
    pub fn host_port(&self, i: usize) -> (&str, &str) {
        self.kv_addrs[i].rsplit_once(':').expect("host:port")
    }

    /// The port of shard `i`'s primary.
    pub fn port(&self, i: usize) -> &str {
        self.host_port(i).1
    }

    /// Every `kv_addr` of the cluster: the primaries', then the standbys'.
    pub fn all_kv_addrs(&self) -> Vec<String> {
        self.kv_addrs.iter().chain(&self.standby_addrs).cloned().collect()
    }

    /// The site of shard `i`'s primary (`mirror`: of its mirror's node) in the namespaces.
    pub fn site(&self, i: usize, mirror: bool) -> usize {
        2 * i + usize::from(mirror)
    }

    /// The site of etcd in the namespaces.
    pub fn etcd_site(&self) -> usize {
        2 * self.shards.len()
    }

    /// The topology in etcd and its mod revision.
    pub fn topology(&self) -> (Topology, i64) {
        read_topology(&self.etcd, &self.prefix)
    }

    /// Starts `mojim kv cluster move-slots <args>`.
    pub fn move_slots(&self, args: &[&str]) -> MoveSlots {
        MoveSlots::start(&self.shards[0], args)
    }
}
/// The topology `etcd` holds under the cluster prefix `prefix`, and its mod revision, read as
/// the servers read it.
pub fn read_topology(etcd: &EtcdServer, prefix: &str) -> (Topology, i64) {
    TopologyStore::new(etcd.client(Duration::from_secs(2)), prefix)
        .read_existing()
        .expect("read the topology")
}

/// `mojim <args> --config <c's>`, run to its end.
pub fn mojim(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(exe());
    cmd.args(args).args(["--config", c.cfg_path.to_str().expect("utf-8")]);
    cmd.env("MOJIM_LOG", "warn");
    cmd.output().expect("run mojim")
}

/// A command's output and errors together.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `mojim <args>` and requires it to succeed; returns its output.
pub fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = mojim(c, args);
    assert!(o.status.success(), "mojim {args:?} failed: {}", text(&o));
    text(&o)
}

/// Runs `mojim <args>` and requires it to fail saying each of `says`.
pub fn refused(c: &Cluster, args: &[&str], says: &[&str]) -> String {
    let o = mojim(c, args);
    let t = text(&o);
    assert!(!o.status.success(), "mojim {args:?} should have failed: {t}");
    for s in says {
        assert!(t.contains(s), "mojim {args:?} does not say {s:?}: {t}");
    }
    t
}

/// A loopback address nothing listens on now.
pub fn free_addr() -> String {
    free_addr_on("127.0.0.1")
}

/// An address on `host` (a loopback address such as 127.0.0.2) nothing listens on now.
pub fn free_addr_on(host: &str) -> String {
    let l = std::net::TcpListener::bind(format!("{host}:0")).expect("bind");
    l.local_addr().expect("address").to_string()
}

/// `mojim serve --node NAME` of the cluster's configuration in folder `name`, listening on
/// `listen`, feeding `backups`.
pub fn named_node(c: &Cluster, name: &str, listen: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut args = vec!["serve", "--config", cfg, "--listen", listen, "--node", name];
    args.extend(["--dir", dir.to_str().expect("utf-8")]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(exe(), &args).expect("start a named node")
}

/// `start(program, args)` for `mojim args...`: in site `site`'s namespace of `net` (through
/// `ip netns exec`), or here on loopback.
fn at_site<R>(net: Option<&Netns>, site: usize, args: &[&str], start: impl FnOnce(&Path, &[&str]) -> R) -> R {
    match net {
        Some(net) => {
            let ns = net.name(site);
            let mut a = vec!["netns", "exec", &ns, exe().to_str().expect("utf-8")];
            a.extend_from_slice(args);
            start(Path::new("ip"), &a)
        }
        None => start(exe(), args),
    }
}

/// `mojim args...` in site `site`'s namespace of `net`, or here on loopback; ready.
fn try_spawn_at(net: Option<&Netns>, site: usize, args: &[&str]) -> mojim::error::Result<ChildNode> {
    at_site(net, site, args, ChildNode::spawn)
}

/// [`try_spawn_at`], tried again until it starts (in a namespace, `ip netns exec` can fail
/// while the machine is busy).
fn spawn_at(net: Option<&Netns>, site: usize, args: &[&str]) -> ChildNode {
    match net {
        Some(_) => wait_for("a process in its namespace to start", || try_spawn_at(net, site, args).ok()),
        None => try_spawn_at(None, site, args).expect("mojim starts"),
    }
}

/// A `mojim kv --cluster --standby` waiting for its node to become the region's primary.
pub struct Standby {
    pid: u32,
    ready: mpsc::Receiver<mojim::error::Result<ChildNode>>,
    node: Option<ChildNode>,
}

impl Standby {
    fn launch(net: Option<&Netns>, site: usize, args: &[&str]) -> Standby {
        let starting = at_site(net, site, args, ChildNode::launch).expect("start a standby");
        let pid = starting.pid();
        let (tx, ready) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(starting.ready());
        });
        Standby { pid, ready, node: None }
    }

    /// Waits until it serves (its node took the region and the shard over).
    pub fn serving(&mut self, timeout: Duration) -> &ChildNode {
        if self.node.is_none() {
            match self.ready.recv_timeout(timeout) {
                Ok(r) => self.node = Some(r.expect("the standby serves the promoted copy")),
                Err(_) => panic!("the standby (pid {}) did not serve within {timeout:?}", self.pid),
            }
        }
        self.node.as_ref().expect("set above")
    }

    /// Whether it serves already, without waiting.
    pub fn serves(&mut self) -> bool {
        if self.node.is_none() {
            if let Ok(r) = self.ready.try_recv() {
                self.node = Some(r.expect("the standby serves the promoted copy"));
            }
        }
        self.node.is_some()
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        // Still starting: its process is held by the thread waiting for its ready line.
        if self.node.is_none() {
            if let Some(p) = rustix::process::Pid::from_raw(self.pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A `mojim kv cluster move-slots` running, and the lines of its stderr so far; killed on drop.
pub struct MoveSlots {
    child: std::process::Child,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stderr, which ends with the pipe.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl MoveSlots {
    pub fn start(c: &Cluster, args: &[&str]) -> MoveSlots {
        let cfg = c.cfg_path.to_str().expect("utf-8");
        let mut child = Command::new(exe())
            .args(["kv", "cluster", "move-slots", "--config", cfg])
            .args(args)
            .env("MOJIM_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start move-slots");
        let stderr = BufReader::new(child.stderr.take().expect("piped"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        // Read to the end, so that the tool never writes to a closed pipe.
        let reader = std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().expect("not poisoned").push(line);
            }
        });
        MoveSlots { child, stderr: lines, reader: Some(reader) }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().expect("not poisoned").clone()
    }

    /// Waits until its progress shows keys moved.
    pub fn wait_keys_moved(&mut self) {
        let moved = |line: &String| {
            let n = line.split(" keys moved").next().and_then(|h| h.rsplit(' ').next()?.parse::<u64>().ok());
            n.is_some_and(|n| n > 0)
        };
        let t0 = std::time::Instant::now();
        while !self.stderr().iter().any(moved) {
            assert!(t0.elapsed() < super::WAIT, "no progress from move-slots: {:?}", self.stderr());
            let ended = self.child.try_wait().expect("poll move-slots");
            assert!(ended.is_none(), "move-slots ended ({ended:?}) before keys moved: {:?}", self.stderr());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills it with SIGKILL.
    pub fn kill(mut self) {
        self.child.kill().expect("kill -9 move-slots");
        self.child.wait().expect("reap move-slots");
    }

    /// Waits for its end: whether it succeeded, and its stderr.
    pub fn finish(mut self) -> (bool, String) {
        let status = self.child.wait().expect("wait for move-slots");
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader ends with the pipe");
        }
        (status.success(), self.stderr().join("\n"))
    }
}

impl Drop for MoveSlots {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
