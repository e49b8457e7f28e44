//! The application's primary serves its metrics (`[primary] metrics_listen`): a primary in
//! this process syncing to a `mojim serve` in a child process; its `mojim_primary_*` families
//! follow the sync points (the histogram's count is the number of sync points), `promtool
//! check metrics` accepts the page, `/readyz` says whether the mirror is online, and the
//! mirror's state turns to lost when the mirror is killed with SIGKILL.

mod common;

use common::scrape::{get, metrics as page, promtool_accepts, sample};
use common::{Cluster, WAIT};
use mojim::Primary;
use std::time::{Duration, Instant};

#[test]
fn the_primarys_metrics_follow_its_sync_points_and_see_the_mirror_killed() {
    let mut c = Cluster::new("primary_metrics", 1 << 20, |f| f.primary.metrics_listen = "127.0.0.1:0".into());
    c.start_mirror();
    let opts = c.primary_options();
    assert_eq!(opts.metrics_listen.as_deref(), Some("127.0.0.1:0"), "read from [primary] metrics_listen");
    let p = Primary::open(&opts).expect("open the primary");
    let addr = p.metrics_addr().expect("the primary serves its metrics").to_string();
    let addr = addr.as_str();

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

    // Dropped, the primary stops its listener and frees the port: a primary opened again (as
    // an application does after a loss) serves on the same address.
    drop(p);
    assert!(std::net::TcpStream::connect(addr).is_err(), "a listener outlived its primary on {addr}");
    c.start_mirror();
    let mut again = c.primary_options();
    again.metrics_listen = Some(addr.to_string());
    let p = Primary::open(&again).expect("a primary opened again binds the address the last one had");
    assert_eq!(p.metrics_addr().map(|a| a.to_string()).as_deref(), Some(addr));
    assert_eq!(sample(&page(addr), "mojim_primary_mirror_state{state=\"online\"}"), Some(1.0));
}
