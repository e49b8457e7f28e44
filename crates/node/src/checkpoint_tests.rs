//! Apply and checkpoint (`checkpoint.rs`) behind a hand-written primary over the in-memory
//! transport: groups reach the data area in sequence order whatever order their lanes deliver
//! them in, and the applied sequence number survives a restart.

use crate::test_peer::{applied, join, node_options, read, region, serve, shared, wait_for, Scratch};
use crate::Mirror;
use mojim_transport::MemTransport;

#[test]
fn groups_are_applied_in_sequence_order_across_lanes_and_the_applied_number_persists() {
    let scratch = Scratch::new("apply-order");
    let id = region(1 << 20);
    let net = MemTransport::new();
    let opts = node_options(&scratch.dir, "node", id, 1 << 20);
    let node = serve(&net, opts.clone());
    let s = shared(&node);
    let session = 0xa991;
    let mut l0 = join(&net, node.addr(), id, session, 0, 2);
    let mut l1 = join(&net, node.addr(), id, session, 1, 2);
    let n = l0.welcome.next_seq;
    let (a, b, c) = (vec![0xaa; 4096], vec![0xbb; 4096], vec![0xcc; 4096]);

    // Groups n+1 and n+2 arrive first, on lane 1: acknowledged, not applied (n is missing).
    l1.send_group(n + 1, 0, &b);
    l1.wait_ack(n + 1);
    l1.send_group(n + 2, 4096, &c);
    l1.wait_ack(n + 2);
    assert_eq!(applied(s), n - 1);
    assert_eq!(s.ckpt.lag().groups, 2);
    assert_eq!(read(s, 0, 8192), vec![0u8; 8192], "nothing after a gap is applied");

    // Group n, on lane 0, writes under both: applied first, the later groups then write over it.
    l0.send_frame(n, 0, 0, &a, false);
    l0.send_frame(n, 1, 4096, &a, true);
    l0.wait_ack(n);
    wait_for("the three groups applied", || applied(s) == n + 2);
    assert!(read(s, 0, 4096) == b, "group n+1 was applied after group n");
    assert!(read(s, 4096, 4096) == c, "group n+2 was applied after group n");
    wait_for("the applied number persisted", || s.data.area().applied_seq().unwrap() == n + 2);
    drop((l0, l1));
    node.shutdown();

    // Reopened: nothing to replay, the same bytes, and the next session starts after n+2.
    let m = Mirror::open(opts).expect("reopen the node");
    assert_eq!(m.recovery().applied_seq, n + 2);
    assert_eq!(m.recovery().groups_applied, 0, "{:?}", m.recovery());
    assert!(read(&m.shared, 0, 4096) == b && read(&m.shared, 4096, 4096) == c);
    let node = m.serve_with(net.clone()).expect("serve again");
    let l = join(&net, node.addr(), id, session + 1, 0, 1);
    assert_eq!(l.welcome.next_seq, n + 3);
    drop(l);
    node.shutdown();
}
