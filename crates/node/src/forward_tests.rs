//! The forwarder (`forward.rs`): a node with a backup, both on one in-memory network, forwards
//! every group it applies, and the backup ends with the same image.

use crate::test_peer::{join, node_options, region, serve, shared, wait_for, Scratch};
use mojim_transport::MemTransport;

#[test]
fn a_node_forwards_every_applied_group_and_its_backup_matches() {
    let scratch = Scratch::new("forward");
    let id = region(256 << 10);
    let net = MemTransport::new();
    let backup = serve(&net, node_options(&scratch.dir.join("backup"), "backup", id, 1 << 20));
    let mut opts = node_options(&scratch.dir.join("mirror"), "mirror", id, 1 << 20);
    opts.backups = vec![backup.addr().to_string()];
    let node = serve(&net, opts);
    let (s, b) = (shared(&node), shared(&backup));

    let session = 0xf0d;
    let mut lanes = [join(&net, node.addr(), id, session, 0, 2), join(&net, node.addr(), id, session, 1, 2)];
    let first = lanes[0].welcome.next_seq;
    let groups = 40u64;
    for k in 0..groups {
        let seq = first + k;
        let lane = &mut lanes[(k % 2) as usize];
        // Overlapping groups of different lengths: only the right order gives the right image.
        let len = 1000 + (k as usize * 397) % 6000;
        let body: Vec<u8> = (0..len).map(|x| (x as u64 * 31 + k) as u8).collect();
        let offset = (k * 3001) % (200 << 10);
        let mut at = 0;
        let mut index = 0;
        while at < len {
            let n = (len - at).min(crate::test_peer::MAX_FRAME as usize);
            lane.send_frame(seq, index, offset + at as u64, &body[at..at + n], at + n == len);
            at += n;
            index += 1;
        }
        lane.wait_ack(seq);
    }
    let last = first + groups - 1;
    wait_for("the backup acknowledged every group", || {
        node.status().backups.first().is_some_and(|l| l.connected && l.acked_seq == last)
    });
    wait_for("the backup applied every group", || backup.status().applied_seq == last);
    assert!(b.session.is_backup());
    assert_eq!(b.stats.counters().groups_received, groups, "each group was forwarded once");
    let image = |x: &crate::Shared| {
        let mut out = vec![0u8; id.size as usize];
        x.data.read_consistent(0, &mut out).expect("read the data area");
        out
    };
    let mine = image(s);
    assert!(mine.iter().any(|&x| x != 0));
    assert!(image(b) == mine, "the backup's image differs from the node's");
    let st = node.status();
    let b0 = &st.backups[0];
    assert_eq!((b0.lag_groups, b0.lag_bytes, b0.lag_seconds), (0, 0, 0.0), "{st:?}");
    drop(lanes);
    node.shutdown();
    backup.shutdown();
}

/// docs/FORMAT.md states the limit on backups the code has.
#[test]
fn the_format_document_states_the_backup_limit() {
    let doc = include_str!("../../../docs/FORMAT.md");
    let says = format!("`MAX_BACKUPS` = {}", crate::MAX_BACKUPS);
    assert!(doc.contains(&says), "FORMAT.md should say {says:?}");
}
