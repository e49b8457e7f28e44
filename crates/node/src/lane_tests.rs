//! A data lane (`lane.rs`) driven by a hand-written primary over the in-memory transport: where
//! a group's frames go, when the group is acknowledged, what a frame of another session or epoch
//! does, and how a full log holds the lane until the checkpointer frees space.

use crate::test_peer::{applied, join, node_options, read, region, serve, shared, wait_for, Scratch};
use crate::{Shared, MAX_FRAME_LIMIT};
use mojim_core::encode::{data_header, FramePlan, SessionTag};
use mojim_format::log::{record_at_verified, record_size};
use mojim_format::FrameKind;
use mojim_transport::MemTransport;
use std::time::Duration;

fn head(s: &Shared, lane: usize) -> u64 {
    s.lanes.with(lane as u16, |l| l.space().head())
}

#[test]
fn a_groups_frames_land_in_the_log_and_the_ack_comes_after_its_end_frame() {
    let scratch = Scratch::new("lane-end");
    let id = region(1 << 20);
    let net = MemTransport::new();
    let node = serve(&net, node_options(&scratch.dir, "node", id, 1 << 20));
    let s = shared(&node);
    let mut l = join(&net, node.addr(), id, 0x1a4e, 0, 1);
    let seq = l.welcome.next_seq;
    let bodies: Vec<Vec<u8>> = [4096usize, 4096, 1000]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|x| (x as u8).wrapping_mul(7) ^ (i as u8 + 1)).collect())
        .collect();

    // Two frames of three: both in the log, the group neither acknowledged nor received.
    l.send_frame(seq, 0, 0, &bodies[0], false);
    l.send_frame(seq, 1, 4096, &bodies[1], false);
    let two = 2 * record_size(4096);
    wait_for("two records in lane 0's log", || head(s, 0) == two);
    assert_eq!(l.next_frame(Duration::from_millis(100)), None, "nothing is acknowledged before END");
    assert_eq!(s.stats.counters().groups_received, 0);
    let log = s.lanes.log_of(0).expect("lane 0's log");
    let area = log.area();
    let mut pos = 0;
    for (i, body) in bodies[..2].iter().enumerate() {
        let rec = record_at_verified(&area, pos, MAX_FRAME_LIMIT).expect("a valid record");
        assert_eq!(
            (rec.header.kind, rec.header.seq, rec.header.frame_index),
            (FrameKind::Data, seq, i as u32)
        );
        assert_eq!(rec.header.offset, 4096 * i as u64);
        assert!(rec.body(&area).to_vec() == *body, "frame {i}'s body is in the log as sent");
        pos = rec.end_pos();
    }
    assert_eq!(read(s, 0, 8192), vec![0u8; 8192], "nothing of an open group reaches the data area");

    // The END frame completes it: acknowledged, then applied.
    l.send_frame(seq, 2, 8192, &bodies[2], true);
    l.wait_ack(seq);
    assert_eq!(head(s, 0), two + record_size(1000));
    assert_eq!(s.stats.counters().groups_received, 1);
    assert_eq!(s.stats.counters().last_received_seq, seq);
    wait_for("the group applied", || applied(s) == seq);
    assert!(read(s, 0, 9192) == bodies.concat(), "the data area holds the group");
    drop(l);
    node.shutdown();
}

#[test]
fn a_frame_of_another_session_or_epoch_is_refused_and_changes_nothing() {
    let scratch = Scratch::new("lane-refuse");
    let id = region(1 << 20);
    let net = MemTransport::new();
    let node = serve(&net, node_options(&scratch.dir, "node", id, 1 << 20));
    let s = shared(&node);
    let body = vec![0x5a; 512];
    let mut l = join(&net, node.addr(), id, 0x5e55_0001, 0, 1);
    let seq = l.welcome.next_seq;
    l.send_group(seq, 0, &body);
    l.wait_ack(seq);
    let after_one = head(s, 0);

    // Another session's frame on this lane: the lane ends, nothing is stored.
    let other = SessionTag { session: 0x5e55_0002, ..l.tag };
    let plan = FramePlan { offset: 4096, len: body.len() as u32, frame_index: 0, end: true };
    l.send_raw(&data_header(other, seq + 1, plan, &body), &body);
    assert!(l.closed_by_node(), "the node ends a lane that sends another session's frame");
    let v = s.stats.counters().last_violation.unwrap_or_default();
    assert!(v.contains("does not match the lane's session"), "{v}");
    assert_eq!(s.stats.counters().violations, 1);
    assert_eq!(head(s, 0), after_one, "nothing of the refused frame is in the log");
    assert_eq!(s.stats.counters().groups_received, 1);

    // The next session resumes after the one group; a frame of another epoch is refused too.
    let mut l = join(&net, node.addr(), id, 0x5e55_0003, 0, 1);
    assert_eq!(l.welcome.next_seq, seq + 1);
    let stale = SessionTag { epoch: l.tag.epoch + 1, ..l.tag };
    l.send_raw(&data_header(stale, seq + 1, plan, &body), &body);
    assert!(l.closed_by_node(), "the node ends a lane that sends another epoch's frame");
    let v = s.stats.counters().last_violation.unwrap_or_default();
    assert!(v.contains("does not match the session's epoch"), "{v}");
    assert_eq!(s.stats.counters().violations, 2);
    assert_eq!(head(s, 0), after_one, "nothing of the refused frame is in the log");
    assert_eq!(s.stats.counters().groups_received, 1);
    wait_for("the one group applied", || applied(s) == seq);
    assert_eq!(read(s, 4096, body.len()), vec![0u8; body.len()], "the refused frames wrote nothing");
    assert_eq!(read(s, 0, body.len()), body);
    node.shutdown();
}

#[test]
fn a_full_log_makes_the_lane_wait_until_the_checkpointer_frees_space() {
    let scratch = Scratch::new("lane-full");
    let id = region(1 << 20);
    let net = MemTransport::new();
    // Three records of a full frame fit a lane's log, a fourth does not.
    let capacity = 16 << 10;
    assert!(3 * record_size(4096) <= capacity && 4 * record_size(4096) > capacity);
    let node = serve(&net, node_options(&scratch.dir, "node", id, capacity));
    let s = shared(&node);
    let session = 0xf011;
    let mut l0 = join(&net, node.addr(), id, session, 0, 2);
    let mut l1 = join(&net, node.addr(), id, session, 1, 2);
    let n = l0.welcome.next_seq;
    let body = |k: u64| vec![k as u8 + 1; 4096];

    // Groups n+1 .. n+3 fill lane 1's log; none can be applied before group n.
    for k in 1..=3 {
        l1.send_group(n + k, 4096 * k, &body(k));
        l1.wait_ack(n + k);
    }
    assert_eq!(head(s, 1), 3 * record_size(4096));
    assert_eq!(applied(s), n - 1);

    // Group n+4 has no room: the lane waits, and says it is alive meanwhile.
    l1.send_group(n + 4, 4096 * 4, &body(4));
    let h = l1.next_frame(Duration::from_secs(10)).expect("a frame while the lane waits");
    assert_eq!(h.kind, FrameKind::Heartbeat, "the lane waits for room instead of acknowledging");
    assert_eq!(head(s, 1), 3 * record_size(4096), "group n+4 is not in the log");
    assert_eq!(s.stats.counters().groups_received, 3);

    // Group n lets the checkpointer apply n .. n+3 and free their space: n+4 goes in.
    l0.send_group(n, 0, &body(0));
    l0.wait_ack(n);
    l1.wait_ack(n + 4);
    wait_for("every group applied", || applied(s) == n + 4);
    for k in 0..=4 {
        assert!(read(s, 4096 * k, 4096) == body(k), "group {}'s bytes", n + k);
    }
    assert!(s.lanes.with(1, |l| l.space().tail()) > 0, "the checkpointer freed lane 1's log");
    drop((l0, l1));
    node.shutdown();
}

#[test]
fn a_copy_frame_outside_a_copy_ends_the_lane_and_lands_nothing() {
    let scratch = Scratch::new("lane-copy-closed");
    let id = region(1 << 20);
    let net = MemTransport::new();
    let node = serve(&net, node_options(&scratch.dir, "node", id, 1 << 20));
    let s = shared(&node);
    let mut l = join(&net, node.addr(), id, 0xc0b1, 0, 1);
    // A well-formed Copy frame of this session, but no CopyBegin came before it.
    let body = vec![0x77; 512];
    let mut h = mojim_format::FrameHeader::new(FrameKind::Copy);
    (h.epoch, h.session, h.lane, h.offset) = (l.tag.epoch, l.tag.session, 0, 4096);
    h.body_len = body.len() as u32;
    h.body_checksum = mojim_format::checksum::crc32c(&body);
    l.send_raw(&h.to_bytes(), &body);
    assert!(l.closed_by_node(), "the node ends a lane that sends a Copy frame outside a copy");
    let v = s.stats.counters().last_violation.unwrap_or_default();
    assert!(v.contains("a Copy frame while the session has no copy open"), "{v}");
    assert_eq!(read(s, 4096, body.len()), vec![0u8; body.len()], "the frame's bytes did not land");
    node.shutdown();
}
