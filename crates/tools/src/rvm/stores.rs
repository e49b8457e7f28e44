//! Where the benchmark's recoverable memory lives: a Mojim region with its mirror in a child
//! process, and a Redis server (started as a child, or one already running). Each removes
//! what it made when dropped: the child is killed, its folder removed, or, on a server that
//! was already running, the keys the benchmark wrote are deleted.

use crate::child::ChildNode;
use mojim::config::{random_uuid, template, write_private, ConfigFile, RegionId};
use mojim::error::{Error, Result};
use mojim::Config;
use mojim_rvm::redis::resp::{Conn, Reply};
use mojim_rvm::{Backend, RedisOptions, RvmOptions, WriteTracking, DEFAULT_BASE};
use mojim_transport::ports::free_loopback_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SECRET: &str = "mojim-bench-rvm-secret";

/// A region of `size` bytes and its mirror on loopback, in a folder of their own.
pub struct MojimStore {
    dir: PathBuf,
    mirror: Option<ChildNode>,
    cfg: Config,
}

impl MojimStore {
    /// Creates the region in `dir` (which must not exist) and starts its mirror (`exe serve`).
    /// Both ends poll `busy_poll_us` µs for the next message before sleeping (`--busy-poll-us`).
    pub fn start(exe: &Path, dir: &Path, size: u64, busy_poll_us: u64) -> Result<MojimStore> {
        std::fs::create_dir(dir).map_err(Error::io(format!("create {}", dir.display())))?;
        // From here on, drop removes the folder whatever fails.
        let mut me = MojimStore {
            dir: dir.to_path_buf(),
            mirror: None,
            cfg: Config { file: empty_file()?, base: dir.to_path_buf(), path: None },
        };
        let id = RegionId { uuid: random_uuid(), size };
        mojim::create_region(&dir.join("region.mojim"), id)?;
        let text = template(&id.uuid, size, SECRET, "127.0.0.1:0")
            .replace("busy_poll_us = 0", &format!("busy_poll_us = {busy_poll_us}"));
        let cfg_path = dir.join("mojim.toml");
        write_private(&cfg_path, &text).map_err(Error::io(format!("write {}", cfg_path.display())))?;
        let (cfg_s, mirror_dir) = (path_str(&cfg_path)?, path_str(&dir.join("mirror"))?);
        let mirror = ChildNode::spawn(
            exe,
            &["serve", "--config", &cfg_s, "--listen", "127.0.0.1:0", "--dir", &mirror_dir],
        )?;
        let mut file: ConfigFile =
            toml::from_str(&text).map_err(|e| Error::Config(format!("benchmark config: {e}")))?;
        file.primary.mirror = mirror.addr().to_string();
        me.mirror = Some(mirror);
        me.cfg = Config { file, base: dir.to_path_buf(), path: Some(cfg_path) };
        Ok(me)
    }

    /// Options to open the region as recoverable memory, finding written pages with `tracking`.
    pub fn options(&self, tracking: WriteTracking) -> Result<RvmOptions> {
        let mut o = RvmOptions::from_config(&self.cfg, false).map_err(super::rvm_error)?;
        o.tracking = Some(tracking);
        Ok(o)
    }
}

impl Drop for MojimStore {
    fn drop(&mut self) {
        self.mirror.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn empty_file() -> Result<ConfigFile> {
    let text = template(&[0; 16], 1 << 20, SECRET, "127.0.0.1:0");
    toml::from_str(&text).map_err(|e| Error::Config(format!("benchmark config: {e}")))
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| Error::Config(format!("{} is not UTF-8: use another --dir", p.display())))
}

/// A Redis server for the Redis backend: started here (memory only, no persistence) or one
/// already running.
pub struct RedisServer {
    addr: String,
    /// The server this started, and its folder.
    child: Option<(Child, PathBuf)>,
    /// Key prefixes handed out, deleted on drop from a server this did not start.
    prefixes: Vec<String>,
}

/// Why there is no Redis server to measure: the message says what to do.
#[derive(Debug)]
pub struct NoRedis(pub String);

impl RedisServer {
    /// Starts `redis-server` on a free port of loopback, its files in `dir` (which must not
    /// exist): memory only (`--save "" --appendonly no`), as the Mojim mirror's copy is.
    pub fn start(dir: &Path) -> std::result::Result<RedisServer, NoRedis> {
        let mut last = String::new();
        for _ in 0..5 {
            let port =
                free_loopback_port().map_err(|e| NoRedis(format!("no free port on 127.0.0.1: {e}")))?;
            match Self::spawn(dir, port) {
                Ok(s) => return Ok(s),
                Err(Spawn::Fatal(m)) => return Err(NoRedis(m)),
                Err(Spawn::PortTaken(log)) => last = log,
            }
        }
        Err(NoRedis(format!("redis-server found every port it was given taken: {last}")))
    }

    fn spawn(dir: &Path, port: u16) -> std::result::Result<RedisServer, Spawn> {
        let fatal = |m: String| Spawn::Fatal(m);
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| fatal(format!("create {}: {e}", dir.display())))?;
        let log = dir.join("redis.log");
        let port_s = port.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port_s, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--loglevel", "warning", "--logfile"])
            .arg(&log)
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(dir);
                return Err(fatal(if e.kind() == std::io::ErrorKind::NotFound {
                    "redis-server is not installed: apt-get install redis-server, or pass --rvm-redis \
                     HOST:PORT of a running server"
                        .into()
                } else {
                    format!("cannot start redis-server: {e}")
                }));
            }
        };
        let mut me = RedisServer {
            addr: format!("127.0.0.1:{port}"),
            child: Some((child, dir.to_path_buf())),
            prefixes: Vec::new(),
        };
        // Wait for its PONG: a start-up wait of at most 10 s.
        for _ in 0..1000 {
            let (c, _) = me.child.as_mut().expect("started above");
            if let Ok(Some(status)) = c.try_wait() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                drop(me);
                return Err(if text.contains("Address already in use") {
                    Spawn::PortTaken(text)
                } else {
                    fatal(format!("redis-server exited ({status}): {}", text.trim()))
                });
            }
            if let Ok(mut c) = Conn::connect(&me.addr, Duration::from_secs(1)) {
                if matches!(c.call(&[b"PING"]), Ok(Reply::Status(_))) {
                    return Ok(me);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(me);
        Err(fatal(format!("redis-server did not answer PING on port {port} within 10 s")))
    }

    /// A server already running at `addr`; it must answer PING.
    pub fn existing(addr: &str) -> std::result::Result<RedisServer, NoRedis> {
        let mut c = Conn::connect(addr, Duration::from_secs(5))
            .map_err(|e| NoRedis(format!("--rvm-redis {addr}: cannot connect: {e}")))?;
        match c.call(&[b"PING"]) {
            Ok(Reply::Status(_)) => {
                Ok(RedisServer { addr: addr.to_string(), child: None, prefixes: Vec::new() })
            }
            Ok(other) => Err(NoRedis(format!("--rvm-redis {addr}: PING answered {other} (a password?)"))),
            Err(e) => Err(NoRedis(format!("--rvm-redis {addr}: PING failed: {e}"))),
        }
    }

    /// Where it listens.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Options for recoverable memory of `capacity` bytes under keys `prefix…` (a prefix
    /// per use, so that no use finds another's state). The keys of the uses before are
    /// deleted first: a Redis recovery scans every key of the server, so keys left behind
    /// would slow the next use's.
    pub fn options(&mut self, prefix: &str, capacity: u64) -> Result<RvmOptions> {
        self.purge().map_err(|e| Error::Config(format!("Redis at {}: deleting old keys: {e}", self.addr)))?;
        self.prefixes.clear();
        let o = RedisOptions {
            addr: self.addr.clone(),
            key: prefix.to_string(),
            capacity,
            timeout: RedisOptions::DEFAULT_TIMEOUT,
            password: None,
            tls: None,
        };
        o.check().map_err(super::rvm_error)?;
        self.prefixes.push(prefix.to_string());
        Ok(RvmOptions { backend: Backend::Redis(o), base: DEFAULT_BASE, tracking: None })
    }

    /// Deletes every key under the prefixes handed out.
    fn purge(&self) -> std::result::Result<(), String> {
        let mut c = Conn::connect(&self.addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        for p in &self.prefixes {
            let mut pattern = Vec::new();
            for &b in p.as_bytes() {
                if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                    pattern.push(b'\\');
                }
                pattern.push(b);
            }
            pattern.extend_from_slice(b":*");
            let mut cursor = b"0".to_vec();
            loop {
                let reply = c
                    .call(&[b"SCAN", &cursor, b"MATCH", &pattern, b"COUNT", b"1000"])
                    .map_err(|e| e.to_string())?;
                let Reply::Array(mut parts) = reply else { return Err(format!("SCAN answered {reply}")) };
                let (Some(Reply::Array(keys)), Some(Reply::Bulk(next))) = (parts.pop(), parts.pop()) else {
                    return Err("SCAN answered something else than a cursor and keys".into());
                };
                let mut del: Vec<&[u8]> = vec![b"DEL"];
                del.extend(keys.iter().filter_map(|k| match k {
                    Reply::Bulk(b) => Some(b.as_slice()),
                    _ => None,
                }));
                if del.len() > 1 {
                    c.call(&del).map_err(|e| e.to_string())?;
                }
                if next == b"0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }
}

enum Spawn {
    PortTaken(String),
    Fatal(String),
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        match self.child.take() {
            Some((mut c, dir)) => {
                let _ = c.kill();
                let _ = c.wait();
                let _ = std::fs::remove_dir_all(dir);
            }
            None => {
                if let Err(e) = self.purge() {
                    eprintln!("rvm bench: could not delete the benchmark's keys from {}: {e}", self.addr);
                }
            }
        }
    }
}
