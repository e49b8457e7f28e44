//! Redis's monitoring on `mojim kv`: the real `redis_exporter` (Debian
//! prometheus-redis-exporter), unmodified, scrapes a `mojim kv` that has a mirror, and its
//! Prometheus metrics say what the server holds: it is up, its clients, the keys written, the
//! commands run (in all and by command), its memory, and its role and replica.

mod common;

use common::kv::{wait_for, KvCluster};
use mojim_transport::ports::free_loopback_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Where Debian installs the exporter.
const EXPORTER: &str = "/usr/bin/prometheus-redis-exporter";
/// Keys written before the scrape.
const KEYS: usize = 25;

/// The exporter, killed when dropped.
struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The body of `GET /metrics` at `addr`, or `None` while nothing answers there.
fn scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(common::WAIT)).ok()?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
    Some(body.to_string())
}

/// The value of the sample named `name` (labels included, as the exporter writes them).
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn redis_exporter_reports_the_server_the_keys_the_commands_and_the_mirror() {
    if !Path::new(EXPORTER).exists() {
        common::skip(&format!("{EXPORTER} is not installed (Debian prometheus-redis-exporter)"));
        return;
    }
    let k = KvCluster::new("kv-exporter", 16 << 20);
    let mut c = k.client();
    for i in 0..KEYS {
        let v = c.cmd(&["SET", &format!("key:{i}"), "value"]);
        assert_eq!(v, mojim_kv::resp::Value::Simple(b"OK".to_vec()));
    }
    let web = format!("127.0.0.1:{}", free_loopback_port().expect("a free port"));
    let child = Command::new(EXPORTER)
        .arg(format!("--redis.addr=redis://{}", k.addr()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the exporter");
    let _exporter = Exporter(child);
    let m = wait_for("the exporter's /metrics", || scrape(&web));
    let get = |name: &str| sample(&m, name).unwrap_or_else(|| panic!("no {name} in the metrics:\n{m}"));
    assert_eq!(get("redis_up"), 1.0);
    assert_eq!(get("redis_exporter_last_scrape_error{err=\"\"}"), 0.0);
    // The test's client and the exporter's.
    assert!(get("redis_connected_clients") >= 2.0);
    assert_eq!(get("redis_db_keys{db=\"db0\"}"), KEYS as f64);
    assert!(get("redis_commands_processed_total") >= KEYS as f64);
    assert_eq!(get("redis_commands_total{cmd=\"set\"}"), KEYS as f64);
    assert!(get("redis_memory_used_bytes") > 0.0);
    // The mirror holds every acknowledged write: one replica.
    assert_eq!(get("redis_connected_slaves"), 1.0);
    let info = m
        .lines()
        .find(|l| l.starts_with("redis_instance_info{"))
        .unwrap_or_else(|| panic!("no redis_instance_info in the metrics:\n{m}"));
    assert!(info.contains("role=\"master\""), "{info}");
    assert!(info.contains(&format!("tcp_port=\"{}\"", k.port())), "{info}");
}
