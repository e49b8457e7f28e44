//! A Redis Cluster of `mojim kv` shards for the tests: a real etcd, and per shard a region, its
//! `mojim serve` mirror and its `mojim kv --cluster` primary, the topology made by `mojim kv
//! cluster create`. On loopback (the primaries on 127.0.0.1, the mirrors on 127.0.0.2), or
//! every process in a network namespace of its own (root only), etcd on the namespaces'
//! bridge, which every namespace and the test itself reach. Also `mojim` commands run to their
//! end against a cluster's configuration, free addresses on a loopback host, and named
//! `mojim serve` nodes.

use super::edit_kv;
use super::kv::wait_for;
use super::{exe, use_etcd, Cluster, TempDir};
use mojim::config::write_private;
use mojim_etcd::testing::EtcdServer;
use mojim_kv::cluster::topology::Topology;
use mojim_tools::child::ChildNode;
use mojim_tools::netns::Netns;
use mojim_transport::ports::free_loopback_ports;
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
    /// mirror in `2i + 1`.
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

/// The running cluster. Its fields drop in order: the servers, the shards' folders (with
/// their mirrors), etcd, and last the namespaces.
pub struct KvShards {
    pub servers: Vec<ChildNode>,
    /// Shard `i`'s region and configuration; its mirror is its `mirror`.
    pub shards: Vec<Cluster>,
    /// Shard `i`'s primary's `kv_addr`.
    pub kv_addrs: Vec<String>,
    /// Shard `i`'s primary's `kv_tls_addr` (empty without TLS).
    pub tls_addrs: Vec<String>,
    pub etcd: EtcdServer,
    pub net: Option<Netns>,
}

/// Two ports nothing listens on now.
fn two_ports() -> [u16; 2] {
    free_loopback_ports().expect("free ports")
}

impl KvShards {
    /// Starts `n` shards on `network`, their primaries serving TLS too with `certs`' server
    /// certificate (clients' certificates required) when given. `None` when the test cannot
    /// run here (no etcd, or namespaces without root), after [`super::skip`] said why.
    pub fn start(test: &str, n: usize, network: Network, certs: Option<&KvCerts>) -> Option<KvShards> {
        let net = match network {
            Network::Loopback => None,
            Network::Namespaces => match Netns::create(2 * n) {
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
                let [client, peer] = two_ports();
                EtcdServer::launch().listen(&format!("{}.254", net.subnet()), client, peer).start()
            }
        };
        let etcd = etcd.unwrap_or_else(|e| panic!("etcd: {e}"));
        let endpoint = etcd.endpoint();
        let prefix = format!("/{test}");
        // The addresses of shard i's primary (plain, TLS) and mirror.
        let addrs: Vec<(String, String, String)> = (0..n)
            .map(|i| match &net {
                Some(net) => (
                    format!("{}:6379", net.ip_of(2 * i)),
                    format!("{}:6380", net.ip_of(2 * i)),
                    format!("{}:7070", net.ip_of(2 * i + 1)),
                ),
                None => {
                    let [plain, tls] = two_ports();
                    (format!("127.0.0.1:{plain}"), format!("127.0.0.1:{tls}"), "127.0.0.2:0".into())
                }
            })
            .collect();
        let mut shards: Vec<Cluster> = (0..n)
            .map(|i| {
                Cluster::new(&format!("{test}{i}"), 4 << 20, |f| {
                    super::use_etcd(f, &endpoint);
                    edit_kv(f, |k| {
                        k.cluster_prefix = prefix.clone();
                        // The namespaces' network is the test's own: no password, and clients
                        // from outside loopback, as an operator turns protected mode off.
                        k.protected_mode = net.is_none();
                        if let Some(certs) = certs {
                            k.tls_listen = addrs[i].1.clone();
                            k.tls_cert_file = certs.path("server.pem");
                            k.tls_key_file = certs.path("server.key");
                            k.tls_ca_cert_file = certs.path("ca.pem");
                            k.tls_auth_clients = "yes".into();
                        }
                    });
                })
            })
            .collect();
        for (i, c) in shards.iter_mut().enumerate() {
            let node = format!("m{i}");
            match &net {
                None => {
                    c.start_mirror_with(&["--node", &node, "--listen", &addrs[i].2]);
                }
                Some(net) => {
                    let cfg = c.cfg_path.to_str().expect("utf-8");
                    let args = ["serve", "--config", cfg, "--node", &node, "--listen", &addrs[i].2];
                    c.mirror = Some(spawn_in(net, 2 * i + 1, &args));
                }
            }
        }
        let mut create = vec!["kv".to_owned(), "cluster".into(), "create".into()];
        for (i, c) in shards.iter().enumerate() {
            let (kv, tls) = (&addrs[i].0, &addrs[i].1);
            let tls = if certs.is_some() { format!("/tls={tls}") } else { String::new() };
            let (primary_host, mirror_addr) = (kv.rsplit_once(':').expect("host:port").0, c.mirror_addr());
            let mirror_host = mirror_addr.rsplit_once(':').expect("host:port").0;
            create.push("--shard".into());
            create.push(format!("p{i}/{kv}/{primary_host}:7070{tls},m{i}/{mirror_host}:6379/{mirror_addr}"));
        }
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        let o = mojim(&shards[0], &create);
        assert!(o.status.success(), "mojim kv cluster create: {}", text(&o));
        let servers = shards
            .iter()
            .enumerate()
            .map(|(i, c)| {
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
                    &addrs[i].0,
                ];
                match &net {
                    None => ChildNode::spawn(exe(), &args).expect("mojim kv --cluster starts"),
                    Some(net) => spawn_in(net, 2 * i, &args),
                }
            })
            .collect();
        let kv_addrs = addrs.iter().map(|a| a.0.clone()).collect();
        let tls_addrs =
            addrs.iter().map(|a| if certs.is_some() { a.1.clone() } else { String::new() }).collect();
        Some(KvShards { servers, shards, kv_addrs, tls_addrs, etcd, net })
    }

    /// `mojim <args> --config <shard 0's>`, run to its end.
    pub fn mojim(&self, args: &[&str]) -> Output {
        mojim(&self.shards[0], args)
    }

    /// Shard `i`'s primary's host and port.
    pub fn host_port(&self, i: usize) -> (&str, &str) {
        self.kv_addrs[i].rsplit_once(':').expect("host:port")
    }
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

/// `mojim args...` in site `i`'s network namespace, ready.
fn spawn_in(net: &Netns, i: usize, args: &[&str]) -> ChildNode {
    let ns = net.name(i);
    let mut a = vec!["netns", "exec", &ns, exe().to_str().expect("utf-8")];
    a.extend_from_slice(args);
    wait_for("a process in its namespace to start", || ChildNode::spawn(Path::new("ip"), &a).ok())
}

/// `n` shards, each its own `Cluster` (configuration, region, mirror) so that a shard's server
/// can be killed and started again on its region ([`KvShards`] starts the processes of all
/// shards from one configuration, on loopback or in namespaces): shard i's primary is node
/// `p<i>` (its `mojim kv` on 127.0.0.1), its mirror node `m<i>` in the topology (`mojim serve`
/// on 127.0.0.2, unnamed, so never taking over), the topology under `prefix` in the etcd at
/// `endpoint`.
pub struct Shards {
    /// Dropped (killed) before the shards' folders.
    pub servers: Vec<Option<ChildNode>>,
    pub kv_addrs: Vec<String>,
    pub shards: Vec<Cluster>,
}

impl Shards {
    pub fn start(test: &str, n: usize, endpoint: &str, prefix: &str) -> Shards {
        let shards: Vec<Cluster> = (0..n)
            .map(|i| {
                let mut c = Cluster::new(&format!("{test}{i}"), 4 << 20, |f| {
                    use_etcd(f, endpoint);
                    edit_kv(f, |k| k.cluster_prefix = prefix.into());
                });
                // The mirror is not named: it never takes over, so a shard's server killed by a
                // test is started again on its region (a named mirror took over once the killed
                // server's lease ran out, and the restart was then refused).
                c.start_mirror_with(&["--listen", "127.0.0.2:0"]);
                c
            })
            .collect();
        let kv_addrs: Vec<String> = (0..n).map(|_| free_addr()).collect();
        let mut create = vec!["kv".to_owned(), "cluster".into(), "create".into()];
        for (i, c) in shards.iter().enumerate() {
            create.push("--shard".into());
            create.push(format!("p{i}/{}/127.0.0.1:1,m{i}/127.0.0.2:6379/{}", kv_addrs[i], c.mirror_addr()));
        }
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        ok(&shards[0], &create);
        let mut s = Shards { servers: (0..n).map(|_| None).collect(), kv_addrs, shards };
        for i in 0..n {
            s.start_server(i);
        }
        s
    }

    /// Starts shard `i`'s `mojim kv --cluster` on its region; after a kill -9 it is tried again
    /// until the killed one's primary lease in etcd has run out.
    pub fn start_server(&mut self, i: usize) {
        assert!(self.servers[i].is_none(), "shard {i}'s server runs already");
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
            if let Ok(c) = ChildNode::spawn(exe(), &args) {
                break c;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "mojim kv --cluster of shard {i} did not start in 90 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        self.servers[i] = Some(started);
    }

    /// The port of shard `i`'s `mojim kv`.
    pub fn port(&self, i: usize) -> &str {
        self.kv_addrs[i].rsplit(':').next().expect("a port")
    }
}

/// `mojim` with `args`: in site `site`'s namespace of `net`, or here on loopback; ready.
fn spawn_at(net: Option<&Netns>, site: usize, args: &[&str]) -> ChildNode {
    match net {
        Some(net) => spawn_in(net, site, args),
        None => ChildNode::spawn(exe(), args).expect("mojim starts"),
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
        let starting = match net {
            Some(net) => {
                let ns = net.name(site);
                let mut a = vec!["netns", "exec", &ns, exe().to_str().expect("utf-8")];
                a.extend_from_slice(args);
                ChildNode::launch(Path::new("ip"), &a)
            }
            None => ChildNode::launch(exe(), args),
        };
        let starting = starting.expect("start a standby");
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

/// Shards that fail over through etcd: shard `i` is its own `Cluster` (configuration, region),
/// node `p<i>`'s `mojim kv --cluster` its primary, node `m<i>`'s named `mojim serve` its mirror
/// (feeding the backup `b<i>`, the mirror after a take-over), and `m<i>`'s `mojim kv --cluster
/// --standby`, which serves the promoted copy and takes the shard in the topology once
/// `p<i>`'s lease has lapsed. On loopback (primaries on 127.0.0.1, `m<i>` on 127.0.0.2), or in
/// network namespaces (root): `p<i>` in site `2i`; `m<i>`, `b<i>` and the standby in site
/// `2i + 1`; etcd in site `2n`. Fields drop in order: processes, folders, etcd, namespaces.
pub struct FailoverShards {
    pub primaries: Vec<Option<ChildNode>>,
    pub standbys: Vec<Standby>,
    pub mirrors: Vec<ChildNode>,
    pub backups: Vec<ChildNode>,
    /// `p<i>`'s `kv_addr`.
    pub kv_addrs: Vec<String>,
    /// `m<i>`'s `kv_addr` (the standby's).
    pub standby_addrs: Vec<String>,
    pub shards: Vec<Cluster>,
    pub etcd: EtcdServer,
    pub prefix: String,
    pub net: Option<Netns>,
}

impl FailoverShards {
    /// Starts `n` shards on `network`, each configuration edited by `edit` after the etcd
    /// settings. `None` when the test cannot run here (no etcd; namespaces without root), after
    /// [`super::skip`] said why.
    pub fn start(
        test: &str,
        n: usize,
        network: Network,
        edit: impl Fn(&mut mojim::config::ConfigFile),
    ) -> Option<FailoverShards> {
        let net = match network {
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
        let site = |i: usize, mirror: bool| 2 * i + usize::from(mirror);
        // Per shard: p's kv_addr, m's kv_addr, m's and b's listen addresses.
        let addrs: Vec<[String; 4]> = (0..n)
            .map(|i| match &net {
                Some(net) => {
                    let (p, m) = (net.ip_of(site(i, false)), net.ip_of(site(i, true)));
                    [format!("{p}:6379"), format!("{m}:6379"), format!("{m}:7070"), format!("{m}:7071")]
                }
                None => [free_addr(), free_addr_on("127.0.0.2"), "127.0.0.2:0".into(), "127.0.0.1:0".into()],
            })
            .collect();
        let shards: Vec<Cluster> = (0..n)
            .map(|i| {
                Cluster::new(&format!("{test}{i}"), 4 << 20, |f| {
                    use_etcd(f, &endpoint);
                    edit_kv(f, |k| {
                        k.cluster_prefix = prefix.clone();
                        k.protected_mode = net.is_none();
                    });
                    edit(f);
                })
            })
            .collect();
        let (mut mirrors, mut backups) = (Vec::new(), Vec::new());
        for (i, c) in shards.iter().enumerate() {
            let cfg = c.cfg_path.to_str().expect("utf-8");
            let node = |name: &str, listen: &str, backup: Option<&str>| {
                let dir = c.dir.path().join(name);
                let mut args = vec!["serve", "--config", cfg, "--listen", listen, "--node", name];
                args.extend(["--dir", dir.to_str().expect("utf-8")]);
                args.extend(backup.map(|b| ["--backup", b]).into_iter().flatten());
                spawn_at(net.as_ref(), site(i, true), &args)
            };
            let b = node(&format!("b{i}"), &addrs[i][3], None);
            mirrors.push(node(&format!("m{i}"), &addrs[i][2], Some(b.addr())));
            backups.push(b);
        }
        let mut create = vec!["kv".to_owned(), "cluster".into(), "create".into()];
        for i in 0..n {
            let [p_kv, m_kv, ..] = &addrs[i];
            let p_host = p_kv.rsplit_once(':').expect("host:port").0;
            create.push("--shard".into());
            create.push(format!("p{i}/{p_kv}/{p_host}:1,m{i}/{m_kv}/{}", mirrors[i].addr()));
        }
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        ok(&shards[0], &create);
        let mut primaries = Vec::new();
        let mut standbys = Vec::new();
        for (i, c) in shards.iter().enumerate() {
            let cfg = c.cfg_path.to_str().expect("utf-8");
            let (node, mirror) = (format!("p{i}"), mirrors[i].addr().to_string());
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
                &addrs[i][0],
            ];
            primaries.push(Some(spawn_at(net.as_ref(), site(i, false), &args)));
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
                &addrs[i][1],
            ];
            standbys.push(Standby::launch(net.as_ref(), site(i, true), &args));
        }
        Some(FailoverShards {
            primaries,
            standbys,
            mirrors,
            backups,
            kv_addrs: addrs.iter().map(|a| a[0].clone()).collect(),
            standby_addrs: addrs.iter().map(|a| a[1].clone()).collect(),
            shards,
            etcd,
            prefix,
            net,
        })
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
        let client = self.etcd.client(Duration::from_secs(2));
        let key = format!("{}/kv-cluster/topology", self.prefix);
        let kv = client.get(&key).expect("read the topology").expect("a topology");
        (serde_json::from_slice(&kv.value).expect("a topology"), kv.mod_revision)
    }

    /// `mojim <args> --config <shard 0's>`, run to its end.
    pub fn mojim(&self, args: &[&str]) -> Output {
        mojim(&self.shards[0], args)
    }

    /// Starts `mojim kv cluster move-slots <args>`.
    pub fn move_slots(&self, args: &[&str]) -> MoveSlots {
        MoveSlots::start(&self.shards[0], args)
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
