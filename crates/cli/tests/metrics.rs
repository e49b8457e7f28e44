//! `mojim serve`'s metrics listener (`[metrics] listen`): a mirror fed by a primary serves its
//! status as Prometheus metrics that follow the writes and that `promtool check metrics`
//! accepts; `/healthz`, `/readyz`, 404 and 405; hostile clients (a slow one, a 100 KiB header,
//! 500 connections) do not stall the node, whose primary keeps syncing; and a real Prometheus
//! server scrapes it.

mod common;

use common::scrape::{body_of, get, http, outlasts_hostile_clients, promtool_accepts, sample, Prometheus};
use common::{exe, Cluster, WAIT};
use mojim::Primary;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

    promtool_accepts(&page);

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

        let page = outlasts_hostile_clients(&addr, |what| {
            keeps_syncing(what);
            let st = c.admin().status().expect("status while the metrics listener is under attack");
            assert!(st.session.is_some(), "{st:?}");
        });
        assert!(page.contains("mojim_received_groups_total"), "{page}");
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
    let (c, addr) = cluster("metrics_prometheus");
    let Some(prometheus) = Prometheus::scraping("metrics_prometheus_server", "mojim", &[&addr]) else {
        return;
    };
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    write_groups(&p, 30);
    let found =
        prometheus
            .wait_value("mojim_received_groups_total", "mojim_received_groups_total >= 30", |v| v >= 30.0);
    assert!(found >= 30.0);
    drop(p);
}

/// A backup frozen (SIGSTOP) while the primary syncs falls behind in time: its lag in seconds,
/// in status and on the metrics page, grows above 0 while it is frozen, and is 0 again once it
/// runs (SIGCONT) and catches up.
#[test]
fn a_frozen_backups_lag_in_seconds_grows_then_returns_to_zero() {
    let mut c = Cluster::new("metrics_backup_lag", 1 << 20, |f| f.metrics.listen = "127.0.0.1:0".into());
    let backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    let m = c.start_mirror();
    let addr = m.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", m.printed()));
    let addr = addr.to_string();
    let series = format!("mojim_backup_lag_seconds{{backup=\"{}\"}}", backup.addr());
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let mut a = c.admin();
    let caught_up = |st: &mojim_node::MirrorStatus| {
        st.lag_groups == 0
            && st.backups.iter().all(|b| b.connected && b.acked_seq >= st.applied_seq && b.lag_groups == 0)
    };
    write_groups(&p, 10);
    let st = common::wait_status(&mut a, "the backup to follow", caught_up);
    assert_eq!(st.backups[0].lag_seconds, 0.0, "{st:?}");
    assert_eq!(sample(&body_of(&addr, "/metrics"), &series), Some(0.0));

    backup.freeze().expect("SIGSTOP the backup");
    write_groups(&p, 10);
    let behind = common::wait_status(&mut a, "the frozen backup's lag to pass 0.2 s", |st| {
        st.backups[0].lag_seconds > 0.2
    });
    assert!(behind.backups[0].lag_groups > 0, "{behind:?}");
    let was = behind.backups[0].lag_seconds;
    let later =
        common::wait_status(&mut a, "the frozen backup's lag to grow", |st| st.backups[0].lag_seconds > was);
    let page = body_of(&addr, "/metrics");
    let shown = sample(&page, &series).unwrap_or_else(|| panic!("no {series} in\n{page}"));
    assert!(shown >= later.backups[0].lag_seconds, "the page shows {shown} s, status showed {later:?}");
    let text = Command::new(exe())
        .args(["status", "--config", c.cfg_path.to_str().expect("utf-8"), "--addr", &c.mirror_addr()])
        .output()
        .expect("run mojim status");
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text.lines().find(|l| l.starts_with("backup ")).unwrap_or_else(|| panic!("{text}"));
    let secs: f64 = line
        .split(" groups, ")
        .nth(1)
        .and_then(|r| r.split(" s").next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no lag in seconds in {line:?}"));
    assert!(secs > 0.2, "{line}");

    backup.thaw().expect("SIGCONT the backup");
    let st = common::wait_status(&mut a, "the thawed backup to catch up", caught_up);
    assert_eq!(st.backups[0].lag_seconds, 0.0, "{st:?}");
    assert_eq!(sample(&body_of(&addr, "/metrics"), &series), Some(0.0));
    drop(p);
}
