//! Opening a node: the logs of the lanes a primary is expected to open are made then, before
//! any handshake, and a lane beyond them still gets its log at its first handshake.

use crate::test_peer::{join, node_options, region, Scratch};
use crate::Mirror;
use mojim_transport::MemTransport;

#[test]
fn the_logs_of_the_expected_lanes_are_made_when_the_node_opens() {
    let scratch = Scratch::new("logs-at-start");
    let id = region(1 << 20);
    let mut opts = node_options(&scratch.dir, "node", id, 1 << 20);
    opts.logs_at_start = 2;
    let m = Mirror::open(opts.clone()).expect("open the node");
    for lane in 0..2 {
        assert!(opts.log_path(lane).exists(), "lane {lane}'s log is made when the node opens");
        assert!(m.shared.lanes.log(lane).is_some(), "and lane {lane} has it");
    }
    assert!(!opts.log_path(2).exists(), "a lane beyond them waits for its first handshake");

    let net = MemTransport::new();
    let node = m.serve_with(net.clone()).expect("serve the node");
    let lanes: Vec<_> = (0..3).map(|lane| join(&net, node.addr(), id, 0x5e55, lane, 3)).collect();
    assert!(opts.log_path(2).exists(), "lane 2's log is made at its first handshake");
    drop(lanes);
    node.shutdown();

    // Reopened: the logs made earlier are opened again, whatever logs_at_start says now.
    opts.logs_at_start = 0;
    let m = Mirror::open(opts.clone()).expect("reopen the node");
    assert!((0..3).all(|lane| m.shared.lanes.log(lane).is_some()));
}
