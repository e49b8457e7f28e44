//! `mojim serve`'s metrics listener (`[metrics] listen`): a mirror fed by a primary serves its
//! status as Prometheus metrics that follow the writes and that `promtool check metrics`
//! accepts; `/healthz`, `/readyz`, 404 and 405; hostile clients (a slow one, a 100 KiB header,
//! 500 connections) do not stall the node, whose primary keeps syncing; and a real Prometheus
//! server scrapes it.

mod common;

use common::{exe, skip, Cluster, TempDir, WAIT};
use mojim::Primary;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Sends `request` and reads the whole answer (the listener closes after each).
fn http(addr: &str, request: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(request.as_bytes()).expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    out
}

fn get(addr: &str, path: &str) -> String {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"))
}

/// The body of a 200 answer to `GET path`.
fn body_of(addr: &str, path: &str) -> String {
    let r = get(addr, path);
    assert!(r.starts_with("HTTP/1.1 200 "), "GET {path}: {r}");
    r.split_once("\r\n\r\n").expect("a head and a body").1.to_string()
}

/// The value of the sample `name` (with its labels, as written, e.g. `x{lane="0"}`).
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().expect("a number"))
}

/// The cluster with a mirror whose metrics listener is on any free port, and its address.
fn cluster(test: &str) -> (Cluster, String) {
    let mut c = Cluster::new(test, 1 << 20, |f| f.metrics.listen = "127.0.0.1:0".into());
    let m = c.start_mirror();
    let addr = m.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", m.printed()));
    let addr = addr.to_string();
    (c, addr)
}

/// Writes and syncs `n` groups of a few bytes each.
fn write_groups(p: &Primary, n: u64) {
    for i in 0..n {
        p.write(i * 64, &i.to_le_bytes()).expect("write");
        p.msync(i * 64, 8).expect("msync");
    }
}

#[test]
fn metrics_follow_the_writes_and_promtool_accepts_them() {
    let (c, addr) = cluster("metrics_follow");
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let before = body_of(&addr, "/metrics");
    let g0 = sample(&before, "mojim_received_groups_total").expect("the groups counter");
    write_groups(&p, 25);
    let page = body_of(&addr, "/metrics");
    let g1 = sample(&page, "mojim_received_groups_total").expect("the groups counter");
    assert!(g1 >= g0 + 25.0, "25 groups written, the counter went from {g0} to {g1}");
    assert!(sample(&page, "mojim_received_bytes_total").expect("bytes") >= 25.0 * 8.0);
    assert_eq!(sample(&page, "mojim_node_role{role=\"mirror\"}"), Some(1.0), "{page}");
    assert_eq!(sample(&page, "mojim_node_role{role=\"primary\"}"), Some(0.0));
    assert_eq!(sample(&page, "mojim_data_area_consistent"), Some(1.0));
    assert_eq!(sample(&page, "mojim_session_active"), Some(1.0));
    assert!(sample(&page, "mojim_lane_log_capacity_bytes{lane=\"0\"}").is_some_and(|v| v > 0.0), "{page}");
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("mojim_"), "{line}");
    }

    // Prometheus's own linter and parser.
    match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Err(e) => skip(&format!("promtool (Debian's prometheus) cannot run: {e}")),
        Ok(mut child) => {
            child.stdin.take().expect("stdin").write_all(page.as_bytes()).expect("feed promtool");
            let out = child.wait_with_output().expect("promtool ran");
            assert!(
                out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
                "promtool check metrics: {}{}\n{page}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    assert!(get(&addr, "/healthz").ends_with("\r\n\r\nok\n"));
    assert!(get(&addr, "/readyz").ends_with("\r\n\r\nready\n"));
    let head = http(&addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"), "{head}");
    assert!(get(&addr, "/").starts_with("HTTP/1.1 404 "));
    assert!(get(&addr, "/metrics/x").starts_with("HTTP/1.1 404 "));
    let post = http(&addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    drop(p);
}

/// Refused connections are counted by reason: an operator with the wrong secret under
/// `secret`, bytes that are no frame under `malformed`, a TLS ClientHello to a node without TLS
/// under `tls`.
#[test]
fn refused_handshakes_are_counted_by_reason() {
    let (c, addr) = cluster("metrics_refused");
    let refused = |reason: &str| {
        sample(&body_of(&addr, "/metrics"), &format!("mojim_refused_handshakes_total{{reason=\"{reason}\"}}"))
            .unwrap_or_else(|| panic!("no count for {reason}"))
    };
    for reason in ["secret", "malformed", "tls", "timeout", "role"] {
        assert_eq!(refused(reason), 0.0, "{reason}");
    }
    let node = c.mirror_addr();
    let out = Command::new(exe())
        .args(["status", "--config", c.cfg_path.to_str().expect("utf-8 path"), "--addr", &node])
        .env(mojim::config::SECRET_ENV, "not-the-cluster-secret-at-all")
        .output()
        .expect("run mojim status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("secret"), "a wrong secret was let in: {err}");
    // Bytes that are no frame header, then a TLS ClientHello's first bytes; each connection
    // ends when the node refuses it.
    for first in [&[0x42u8; 64][..], &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03][..]]
    {
        let mut s = TcpStream::connect(&node).expect("connect to the node");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        s.write_all(first).expect("send");
        let mut rest = [0u8; 64];
        let padded = first.len() < 64;
        if padded {
            s.write_all(&[0u8; 64][first.len()..]).expect("pad to a header");
        }
        let _ = s.read(&mut rest);
    }
    let deadline = Instant::now() + WAIT;
    while (refused("secret"), refused("malformed"), refused("tls")) != (1.0, 1.0, 1.0) {
        assert!(
            Instant::now() < deadline,
            "refusals by reason: secret {}, malformed {}, tls {}",
            refused("secret"),
            refused("malformed"),
            refused("tls")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hostile_metrics_clients_do_not_stall_the_node() {
    let (c, addr) = cluster("metrics_hostile");
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let acked = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let off = (i % 1024) * 64;
                p.write(off, &i.to_le_bytes()).expect("write");
                p.msync(off, 8)
                    .unwrap_or_else(|e| panic!("msync {i} failed while metrics clients misbehave: {e}"));
                acked.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        });
        // Syncs acknowledged from now on, by the time `what` is done.
        let keeps_syncing = |what: &str| {
            let from = acked.load(Ordering::Relaxed);
            let t0 = Instant::now();
            while acked.load(Ordering::Relaxed) < from + 50 {
                assert!(t0.elapsed() < WAIT, "the primary stopped syncing {what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };

        // A slow client: half a request head, then nothing. It is dropped at the listener's
        // deadline (5 s), and others are served meanwhile.
        let mut slow = TcpStream::connect(&addr).expect("connect");
        slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").expect("send half a head");
        assert!(body_of(&addr, "/metrics").contains("mojim_received_groups_total"));
        keeps_syncing("beside a slow metrics client");
        slow.set_read_timeout(Some(WAIT)).expect("timeout");
        let mut out = Vec::new();
        slow.read_to_end(&mut out).expect("the slow client is closed, not left hanging");
        assert!(out.is_empty(), "the slow client got {:?}", String::from_utf8_lossy(&out));

        // A 100 KiB header: 431, and closed.
        let big = format!("GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(100 << 10));
        let r = http(&addr, &big);
        assert!(r.starts_with("HTTP/1.1 431 "), "{}", &r[..r.len().min(200)]);

        // 500 connections held open: the listener serves 64 and closes the rest at once; the
        // node goes on syncing and answering status.
        let crowd: Vec<TcpStream> = (0..500).filter_map(|_| TcpStream::connect(&addr).ok()).collect();
        assert!(!crowd.is_empty());
        keeps_syncing("while 500 metrics connections are held");
        let st = c.admin().status().expect("status while the metrics listener is crowded");
        assert!(st.session.is_some(), "{st:?}");
        drop(crowd);
        // Once they are gone, a scrape is served again.
        let t0 = Instant::now();
        loop {
            let mut s = TcpStream::connect(&addr).expect("connect");
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\n\r\n");
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            if out.ends_with("\r\n\r\nok\n") {
                break;
            }
            assert!(t0.elapsed() < WAIT, "the metrics listener never served again: {out:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        keeps_syncing("after the crowd left");
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("the writer");
    });
}

#[test]
fn an_address_the_listener_cannot_have_stops_the_node_at_start_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken = taken.local_addr().expect("addr").to_string();
    let c = Cluster::new("metrics_bad_address", 1 << 20, |f| f.metrics.listen = taken.clone());
    let serve = |extra: &[&str]| {
        let cfg = c.cfg_path.to_str().expect("utf-8");
        let mut args = vec!["serve", "--config", cfg, "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let out = Command::new(exe()).args(&args).stdin(Stdio::null()).output().expect("run mojim serve");
        assert!(!out.status.success(), "mojim serve {extra:?} started");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("serving on"));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = serve(&[]);
    for needle in [taken.as_str(), "[metrics] listen", "cannot open the metrics listener", "\"\" for none"] {
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
    let e = serve(&["--metrics-listen", "127.0.0.1"]);
    for needle in ["--metrics-listen = \"127.0.0.1\"", "not a host:port", "127.0.0.1:9420"] {
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
}

#[test]
fn a_prometheus_server_scrapes_the_node() {
    if Command::new("prometheus").arg("--version").output().is_err() {
        return skip("prometheus (Debian's prometheus) cannot run");
    }
    let (c, addr) = cluster("metrics_prometheus");
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    write_groups(&p, 30);
    let dir = TempDir::new("metrics_prometheus_server");
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: mojim\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .expect("write prometheus.yml");
    // A port for Prometheus's own API: free when asked, taken by Prometheus at once.
    let web = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr");
    let server = Command::new("prometheus")
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let _server = Killed(server);
    let web = web.to_string();
    let t0 = Instant::now();
    let found = loop {
        // Until Prometheus listens, has scraped, and shows the counter with every group.
        let answer = TcpStream::connect(&web)
            .ok()
            .map(|_| get(&web, "/api/v1/query?query=mojim_received_groups_total"));
        if let Some(v) = answer.as_deref().and_then(|a| a.split("\"value\":[").nth(1)) {
            let v: f64 = v.split('"').nth(1).and_then(|x| x.parse().ok()).expect("a value");
            if v >= 30.0 {
                break v;
            }
        }
        if t0.elapsed() > 2 * WAIT {
            panic!("Prometheus never showed mojim_received_groups_total >= 30: {answer:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(found >= 30.0);
    drop(p);
}

/// A child process killed and reaped when dropped, before the folders it writes are removed.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
