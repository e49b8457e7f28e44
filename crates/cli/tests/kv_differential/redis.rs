//! The reference: a real `redis-server` of the test's own, on a free loopback port, without
//! persistence (`save ""`, `appendonly no`), sixteen databases (as `mojim kv`), and the same
//! longest bulk string as `mojim kv`'s `[kv] max_bulk`; RESTORE checks a payload whole
//! (`sanitize-dump-payload yes`, as `mojim kv` always does: docs/COMPATIBILITY.md), and SORT
//! ALPHA compares in the C locale (`LC_ALL=C`: Redis's `strcoll` follows the environment's
//! locale, `mojim kv` compares bytes as the C locale does). Killed, and its folder removed,
//! when dropped.

use super::resp::{Conn, Reply};
use crate::common::{skip, TempDir};
use mojim_transport::ports::free_loopback_port;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Child,
    pub addr: String,
    pub version: String,
    /// Removed after the server is killed (fields drop in order).
    _dir: TempDir,
}

/// A port nothing listens on (just now).
impl RedisServer {
    /// Starts one; `None` (after `common::skip`, which fails the test under
    /// `MOJIM_TEST_STRICT`) when redis-server is not installed.
    pub fn start(name: &str, max_bulk: usize) -> Option<RedisServer> {
        let version = match Command::new("redis-server").arg("--version").output() {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            _ => {
                skip("redis-server is not installed (Debian redis-server)");
                return None;
            }
        };
        let dir = TempDir::new(name);
        let log = dir.path().join("redis.log");
        // Another process may take the port between choosing and binding it: choose again.
        for _ in 0..5 {
            let port = free_loopback_port().expect("a free port").to_string();
            let max_bulk = max_bulk.to_string();
            let args = [
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--databases",
                "16",
                "--proto-max-bulk-len",
                &max_bulk,
                "--sanitize-dump-payload",
                "yes",
                "--daemonize",
                "no",
                "--dir",
                dir.path().to_str().expect("utf-8"),
                "--logfile",
                log.to_str().expect("utf-8"),
            ];
            let mut child = Command::new("redis-server")
                .args(args)
                .env("LC_ALL", "C")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let addr = format!("127.0.0.1:{port}");
            let t0 = Instant::now();
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let text = std::fs::read_to_string(&log).unwrap_or_default();
                    if text.contains("Address already in use") {
                        break;
                    }
                    panic!("redis-server exited ({status}) at start: {text}");
                }
                let pong = Conn::connect(&addr).and_then(|mut c| c.call(&[vec![b"PING".to_vec()]]));
                if pong.is_ok_and(|r| r.replies == [Reply::Simple(b"PONG".to_vec())]) {
                    return Some(RedisServer { child, addr, version, _dir: dir });
                }
                assert!(t0.elapsed() < Duration::from_secs(30), "redis-server did not answer PING on {addr}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("redis-server found every one of 5 free ports taken");
    }
}

impl RedisServer {
    /// The last lines of its log, and whether it is still running (for a failure's report).
    pub fn last_words(&self) -> String {
        let log = std::fs::read_to_string(self._dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let state =
            if running(self.child.id()) { "redis-server is running" } else { "redis-server has exited" };
        format!("{state}; its log ends:\n{}", lines[lines.len().saturating_sub(8)..].join("\n"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the child process `pid` is running (one that has exited and not been waited for is
/// a zombie, state Z).
pub fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}
