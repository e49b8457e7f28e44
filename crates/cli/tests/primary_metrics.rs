//! The application's primary serves its metrics (`[primary] metrics_listen`): a primary in
//! this process syncing to a `mojim serve` in a child process; its `mojim_primary_*` families
//! follow the sync points (the histogram's count is the number of sync points), `promtool
//! check metrics` accepts the page, `/readyz` says whether the mirror is online, and the
//! mirror's state turns to lost when the mirror is killed with SIGKILL.

mod common;

use common::{skip, Cluster, WAIT};
use mojim::Primary;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("send the request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    out
}

/// The body of a 200 answer to `GET /metrics`.
fn page(addr: SocketAddr) -> String {
    let r = get(addr, "/metrics");
    assert!(r.starts_with("HTTP/1.1 200 "), "GET /metrics: {r}");
    r.split_once("\r\n\r\n").expect("a head and a body").1.to_string()
}

/// The value of the sample `name` (with its labels, as written).
fn sample(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().expect("a number"))
}

fn promtool_accepts(page: &str) {
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
}

#[test]
fn the_primarys_metrics_follow_its_sync_points_and_see_the_mirror_killed() {
    let mut c = Cluster::new("primary_metrics", 1 << 20, |f| f.primary.metrics_listen = "127.0.0.1:0".into());
    c.start_mirror();
    let opts = c.primary_options();
    assert_eq!(opts.metrics_listen.as_deref(), Some("127.0.0.1:0"), "read from [primary] metrics_listen");
    let p = Primary::open(&opts).expect("open the primary");
    let addr = p.metrics_addr().expect("the primary serves its metrics");

    let before = page(addr);
    assert_eq!(sample(&before, "mojim_primary_mirror_state{state=\"online\"}"), Some(1.0), "{before}");
    assert_eq!(sample(&before, "mojim_primary_sync_seconds_count{mode=\"sync\"}"), Some(0.0));
    assert!(get(addr, "/readyz").ends_with("\r\n\r\nready\n"));
    assert!(get(addr, "/healthz").ends_with("\r\n\r\nok\n"));

    const N: u64 = 40;
    for i in 0..N {
        p.write(i * 64, &i.to_le_bytes()).expect("write");
        p.msync(i * 64, 8).expect("msync");
    }
    let after = page(addr);
    assert_eq!(sample(&after, "mojim_primary_groups_sent_total"), Some(N as f64), "{after}");
    assert_eq!(sample(&after, "mojim_primary_sent_bytes_total"), Some(N as f64 * 8.0));
    assert_eq!(sample(&after, "mojim_primary_sync_seconds_count{mode=\"sync\"}"), Some(N as f64));
    assert_eq!(
        sample(&after, "mojim_primary_sync_seconds_bucket{mode=\"sync\",le=\"+Inf\"}"),
        Some(N as f64)
    );
    assert!(sample(&after, "mojim_primary_sync_seconds_sum{mode=\"sync\"}").is_some_and(|s| s > 0.0));
    assert_eq!(sample(&after, "mojim_primary_sync_failures_total"), Some(0.0));
    assert_eq!(sample(&after, "mojim_primary_in_flight_groups"), Some(0.0), "every sync point returned");
    // The buckets are cumulative: they never fall.
    let buckets: Vec<f64> = after
        .lines()
        .filter(|l| l.starts_with("mojim_primary_sync_seconds_bucket"))
        .map(|l| l.rsplit_once(' ').expect("a value").1.parse().expect("a number"))
        .collect();
    assert_eq!(buckets.len(), mojim::SYNC_BUCKETS + 1);
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    promtool_accepts(&after);

    c.kill_mirror();
    let deadline = Instant::now() + WAIT;
    let lost = loop {
        let now = page(addr);
        if sample(&now, "mojim_primary_mirror_state{state=\"lost\"}") == Some(1.0) {
            break now;
        }
        assert!(Instant::now() < deadline, "the mirror was killed and is still not lost:\n{now}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(sample(&lost, "mojim_primary_mirror_state{state=\"online\"}"), Some(0.0));
    assert_eq!(sample(&lost, "mojim_primary_mirror_losses_total"), Some(1.0));
    assert!(sample(&lost, "mojim_primary_vulnerable_seconds").is_some(), "{lost}");
    let ready = get(addr, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 503 ") && ready.contains("the mirror is lost"), "{ready}");
    assert!(p.msync(0, 8).is_err(), "on_mirror_loss = block");
    assert_eq!(sample(&page(addr), "mojim_primary_sync_failures_total"), Some(1.0));
    promtool_accepts(&lost);

    drop(p);
    let health = get(addr, "/healthz");
    assert!(health.starts_with("HTTP/1.1 503 ") && health.contains("the primary is closed"), "{health}");
}
