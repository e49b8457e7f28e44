//! `mojim kv` in tests: a cluster with a mirror and the server in child processes, and a small
//! RESP client over a plain socket.

use super::{exe, Cluster, WAIT};
use mojim_kv::resp::{decode, encode_request, Limits, Value};
use mojim_tools::child::ChildNode;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// A test cluster (`size` bytes, a mirror running) and `mojim kv` serving its region.
pub struct KvCluster {
    /// Dropped (killed) first.
    pub kv: Option<ChildNode>,
    pub c: Cluster,
}

impl KvCluster {
    pub fn new(test: &str, size: u64) -> KvCluster {
        KvCluster::with(test, size, |_| {})
    }

    /// As [`KvCluster::new`], the configuration changed by `edit` first.
    pub fn with(test: &str, size: u64, edit: impl FnOnce(&mut mojim::config::ConfigFile)) -> KvCluster {
        let mut c = Cluster::new(test, size, |f| {
            f.cluster.heartbeat_interval_ms = 50;
            f.cluster.heartbeat_timeout_ms = 1500;
            edit(f);
        });
        c.start_mirror();
        let mut k = KvCluster { kv: None, c };
        k.start();
        k
    }

    /// Starts `mojim kv` on the cluster's region, aimed at its mirror.
    pub fn start(&mut self) {
        assert!(self.kv.is_none(), "mojim kv is running already");
        let mirror = self.c.mirror_addr();
        self.kv = Some(start_kv(&self.c, &["--mirror", &mirror]));
    }

    pub fn addr(&self) -> String {
        self.kv.as_ref().expect("mojim kv is running").addr().to_string()
    }

    pub fn port(&self) -> String {
        self.addr().rsplit(':').next().expect("host:port").to_string()
    }

    pub fn client(&self) -> Resp {
        Resp::connect(&self.addr())
    }

    /// SIGKILLs `mojim kv`.
    pub fn kill(&mut self) {
        if let Some(mut k) = self.kv.take() {
            k.kill();
        }
    }
}

/// `mojim kv --config <cluster's> --listen 127.0.0.1:0 extra...`, ready.
pub fn start_kv(c: &Cluster, extra: &[&str]) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8 path");
    let mut args = vec!["kv", "--config", cfg, "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    ChildNode::spawn(exe(), &args).expect("start mojim kv")
}

/// `mojim serve` of the cluster's configuration in folder `name`, feeding `backups`.
pub fn node(c: &Cluster, name: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let listen = super::listen_addr(c.dir.path());
    let mut args = vec!["serve", "--config", c.cfg_path.to_str().expect("utf-8"), "--listen", &listen];
    args.extend(["--dir", dir.to_str().expect("utf-8")]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn(exe(), &args).expect("start a node")
}

/// `mojim promote` of the node at `addr`, fencing `peers` first (with TLS on, as the operator
/// whose certificate `super::tls::make_certs` made).
pub fn promote(c: &Cluster, addr: &str, peers: &[&str]) {
    let mut cmd = Command::new(exe());
    cmd.args(["promote", "--config", c.cfg_path.to_str().expect("utf-8"), "--addr", addr]);
    if c.cfg.file.security.tls {
        let tls = c.dir.path().join("tls");
        cmd.env(mojim::config::CERT_FILE_ENV, tls.join("operator.pem"));
        cmd.env(mojim::config::KEY_FILE_ENV, tls.join("operator.key"));
    }
    for p in peers {
        cmd.args(["--peer", p]);
    }
    let out = cmd.output().expect("run mojim promote");
    assert!(out.status.success(), "promote: {}", String::from_utf8_lossy(&out.stderr));
}

/// `mojim kv` on a promoted node: its data area as the region, `mirror` its mirror (retried
/// while the node finishes promoting). `extra` goes on the command line.
pub fn start_kv_on_promoted(c: &Cluster, node: &str, mirror: &str, extra: &[&str]) -> ChildNode {
    let region = c.dir.path().join(node).join("data.mojim");
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut args =
        vec!["kv", "--config", cfg, "--region", region.to_str().expect("utf-8"), "--mirror", mirror];
    if !extra.contains(&"--listen") {
        args.extend(["--listen", "127.0.0.1:0"]);
    }
    args.extend_from_slice(extra);
    wait_for("mojim kv to start on the promoted copy", || ChildNode::spawn(exe(), &args).ok())
}

/// A RESP client over a plain socket.
pub struct Resp {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Resp {
    pub fn connect(addr: &str) -> Resp {
        let stream =
            TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to mojim kv at {addr}: {e}"));
        stream.set_read_timeout(Some(WAIT)).expect("set a read timeout");
        stream.set_nodelay(true).expect("nodelay");
        Resp { stream, buf: Vec::new() }
    }

    /// Sends a request without reading its reply.
    pub fn send(&mut self, args: &[&[u8]]) {
        self.try_send(args).expect("send a request");
    }

    /// Sends a request without reading its reply; an error if the connection is gone.
    pub fn try_send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        self.stream.write_all(&req)
    }

    /// Sends raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// The next reply, or `None` if the server closed the connection first.
    pub fn read(&mut self) -> Option<Value> {
        loop {
            let limits = Limits { max_bulk: 1 << 30, max_args: 1 << 24, max_inline: 1 << 20 };
            if let Some((v, n)) = decode(&self.buf, &limits).expect("the server's reply decodes") {
                self.buf.drain(..n);
                return Some(v);
            }
            let mut chunk = [0u8; 65536];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read a reply: {e}"),
            }
        }
    }

    /// One command and its reply.
    pub fn cmd(&mut self, args: &[&str]) -> Value {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
        self.read()
            .unwrap_or_else(|| panic!("the server closed the connection instead of answering {args:?}"))
    }

    /// Whether the server closed the connection (after any replies still in flight).
    pub fn closed(&mut self) -> bool {
        loop {
            match self.read() {
                None => return true,
                Some(_) => continue,
            }
        }
    }
}

/// Runs a redis tool; `None` (after `skip`) when it is not installed.
pub fn tool(name: &str) -> Option<Command> {
    if Command::new(name).arg("--version").output().is_err() {
        super::skip(&format!("{name} is not installed (Debian redis-tools)"));
        return None;
    }
    Some(Command::new(name))
}

/// A python3 that can `import redis`; `None` (after `skip`) when there is none.
pub fn python_with_redis() -> Option<Command> {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py).args(["-c", "import redis"]).output().is_ok_and(|o| o.status.success());
        if ok {
            return Some(Command::new(py));
        }
    }
    super::skip("no python3 with the redis module (Debian python3-redis)");
    None
}

/// Waits until `f` returns `Some`, at most [`WAIT`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn bulk(v: &Value) -> Option<&[u8]> {
    match v {
        Value::Bulk(b) => Some(b),
        _ => None,
    }
}
