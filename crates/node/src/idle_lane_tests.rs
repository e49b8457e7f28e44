//! A real primary's lanes against this node: a lane that the application leaves idle is kept
//! alive by heartbeats while another lane is busy, from the start of a session that began with
//! a copy (whose last frame on the idle lane, `CopyEnd`, has no answer).

use crate::test_peer::{node_options, primary_options, region, region_with_history, serve, Scratch};
use mojim::config::Heartbeat;
use mojim::Primary;
use mojim_transport::MemTransport;
use std::time::{Duration, Instant};

#[test]
fn an_idle_lane_is_kept_alive_while_another_is_busy_after_a_copy() {
    let scratch = Scratch::new("idle-lane");
    // One copy group (at most 1 MiB) for the whole region: it goes on lane 0, and lane 1 gets
    // only CopyBegin and CopyEnd.
    let id = region(1 << 20);
    // A timeout a loaded machine does not reach by itself: the busy lane's thread or the
    // heartbeat's may wait for a core for hundreds of milliseconds, and at 600 ms that alone
    // could end the session. An idle lane without heartbeats still goes silent for three
    // timeouts below, and is lost.
    let heartbeat = Heartbeat { interval: Duration::from_millis(100), timeout: Duration::from_secs(2) };
    let mut node_opts = node_options(&scratch.dir.join("node"), "node", id, 1 << 20);
    node_opts.heartbeat = heartbeat;
    std::fs::create_dir_all(&node_opts.dir).expect("make the node's folder");
    let net = MemTransport::new();
    let node = serve(&net, node_opts);
    let path = scratch.dir.join("region");
    region_with_history(&path, id);

    let p = Primary::open_with(net.clone(), &primary_options(&path, node.addr(), heartbeat))
        .expect("open the primary");
    let copy = p.wait_resync(Duration::from_secs(10)).expect("a new mirror gets a copy");
    assert!(copy.done, "the copy finished: {copy:?}");

    // The busy lane is lane 0 (each thread keeps to one lane): a thread whose first group went
    // there syncs for three heartbeat timeouts, and lane 1 sends nothing of the application's.
    let busy = std::thread::scope(|s| {
        (0..4)
            .map(|_| {
                s.spawn(|| {
                    let (_, lane, _) = p.persist(&[mojim::Range::new(64, 8)]).expect("persist").to_parts();
                    if lane != 0 {
                        return None;
                    }
                    let (t0, mut n) = (Instant::now(), 0u64);
                    while t0.elapsed() < heartbeat.timeout * 3 {
                        p.write(64, &n.to_le_bytes()).expect("store");
                        p.msync(64, 8).expect("the session holds while lane 1 is idle");
                        n += 1;
                    }
                    Some(n)
                })
                .join()
                .expect("the syncing thread")
            })
            .find_map(|n| n)
            .expect("one of four threads keeps to lane 0")
    });
    assert!(busy > 0);
    let status = p.status();
    assert_eq!(status.mirror_losses, 0, "the session was never lost: {status:?}");
    assert_eq!(node.status().sessions, 1, "the node ended no session: {:?}", node.status());
    p.close().expect("close");
    node.shutdown();
}
