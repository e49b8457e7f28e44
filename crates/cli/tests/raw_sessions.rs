//! Sessions driven by hand (a raw connection and the handshake), to reach states a primary
//! reaches only by chance of timing:
//!
//! - A first session names its generation with one CopyEnd per lane, and the mirror takes it at
//!   the first one it reads: that CopyEnd comes before every group of its lane, so no group is
//!   acknowledged, on any lane, before the generation is durable. A mirror that waited for every
//!   lane's CopyEnd could acknowledge (and apply) a group of a fast lane under generation 0, and,
//!   killed then, come back with applied groups and no generation: the primary's next session
//!   would call that a split brain. Here the second lane's CopyEnd never comes.
//! - A lane that holds back an acknowledgement because the backups lag past
//!   `secondary_tier_thresh` leaves when its session ends, so that the next session can begin
//!   while the backup is still away. Here the backup is frozen.

mod common;

use common::{raw, wait_applied, wait_status, Cluster};
use mojim::Range;
use mojim_core::encode::{check_group, data_header, frames, GroupLimits, SessionTag};
use mojim_format::handshake::{PeerRole, Welcome};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_transport::{AnyConn, Conn};
use std::io::{Read, Write};
use std::time::Duration;

const GENERATION: u64 = 0x5eed_0000_0000_0001;

fn read_frame(s: &mut AnyConn) -> (FrameHeader, Vec<u8>) {
    raw::read_frame(s).expect("a frame from the mirror")
}

/// Connects lane `lane` of a two-lane session and completes the handshake.
fn join(c: &Cluster, session: u64, lane: u16, lanes: u16) -> (AnyConn, Welcome) {
    let id = c.cfg.region_id().expect("region id");
    let mut hello = raw::hello(PeerRole::Primary, (id.uuid, id.size), session, lane, lanes);
    hello.generation = GENERATION;
    raw::handshake(&c.mirror_addr(), &hello, &c.secret().0)
}

/// Sends group `seq`: `body` at `offset`, in frames of the session's size.
fn send_group(s: &mut AnyConn, w: &Welcome, size: u64, tag: SessionTag, seq: u64, offset: u64, body: &[u8]) {
    let ranges = [Range::new(offset, body.len() as u64)];
    let limits = GroupLimits {
        max_ranges: 16,
        max_frame: w.max_frame,
        region_size: size,
        max_group_log_bytes: w.log_capacity / 2,
    };
    let shape = check_group(&ranges, &limits).expect("a valid group");
    for plan in frames(&ranges, w.max_frame, shape) {
        let b = &body[(plan.offset - offset) as usize..][..plan.len as usize];
        s.write_all(&data_header(tag, seq, plan, b)).and_then(|_| s.write_all(b)).expect("send the group");
    }
}

#[test]
fn the_first_lanes_copy_end_makes_the_generation_durable_before_any_group_is_acknowledged() {
    let mut c = Cluster::new("first_session", 1 << 20, |_| {});
    c.start_mirror();
    let session = 0x00c0_ffee_0000_0001;
    let (mut lane0, welcome) = join(&c, session, 0, 2);
    // Lane 1 joins and then says nothing, as a slow lane would.
    let (_lane1, _) = join(&c, session, 1, 2);
    assert_eq!(welcome.generation, 0, "a new mirror has no generation yet");
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };

    let mut end = FrameHeader::new(FrameKind::CopyEnd);
    end.lane = 0;
    end.epoch = tag.epoch;
    end.session = session;
    end.offset = GENERATION;
    lane0.write_all(&end.to_bytes()).expect("send CopyEnd on lane 0");

    // One group on lane 0: 4 KiB at offset 8192.
    let seq = welcome.next_seq;
    let body = vec![0x5a; 4096];
    send_group(&mut lane0, &welcome, c.size(), tag, seq, 8192, &body);
    let (ack, _) = read_frame(&mut lane0);
    assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, seq), "lane 0's group is acknowledged");

    // Acknowledged, so the generation is already durable: a crash now keeps both.
    let mut admin = c.admin();
    let st = wait_applied(&mut admin);
    assert_eq!(st.generation, format!("{GENERATION:#x}"), "{st:?}");
    assert!(st.applied_seq >= seq, "{st:?}");
    drop(admin);
    c.kill_mirror();
    c.start_mirror();
    let st = c.admin().status().expect("status after the restart");
    assert_eq!(st.generation, format!("{GENERATION:#x}"), "after a crash: {st:?}");
    assert!(st.applied_seq >= seq, "after a crash: {st:?}");
    assert_eq!(c.admin().read(8192, 4096).expect("read the mirror"), body, "the group is in the data area");
}

/// A mirror of a 1 MiB region (its configuration edited by `edit`) feeding one backup, linked.
fn mirror_with_backup(
    name: &str,
    edit: impl FnOnce(&mut mojim::config::ConfigFile),
) -> (Cluster, mojim_tools::child::ChildNode, mojim_node::admin_client::AdminClient) {
    let mut c = Cluster::new(name, 1 << 20, edit);
    let backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    c.start_mirror();
    let mut admin = c.admin();
    // Linked, and past its first full copy: until then it does not hold back the log or the
    // acknowledgements (a backup that still needs its copy is not waited for).
    wait_status(&mut admin, "the backup linked and copied", |st| {
        st.backups.first().is_some_and(|b| b.connected && !b.needs_copy && !b.copying)
    });
    (c, backup, admin)
}

#[test]
fn a_lane_held_back_by_a_lagging_backup_leaves_when_its_session_ends() {
    let (c, backup, mut admin) = mirror_with_backup("raw-stall-end", |f| {
        f.mirror.log_capacity = "4MiB".into();
        f.mirror.secondary_tier_thresh = "64KiB".into();
    });

    let (mut lane, welcome) = join(&c, 0x5e55_0000_0000_0001, 0, 1);
    let tag = SessionTag { session: 0x5e55_0000_0000_0001, epoch: welcome.epoch, lane: 0 };
    // The backup stops acknowledging; after 64 KiB of groups the mirror holds acks back.
    backup.freeze().expect("freeze the backup");
    let body = vec![0x77; 16 << 10];
    let mut held = None;
    lane.set_recv_timeout(Some(Duration::from_millis(200))).expect("set timeout");
    for i in 0..16u64 {
        let seq = welcome.next_seq + i;
        let stalls = admin.status().expect("status").stalls;
        send_group(&mut lane, &welcome, c.size(), tag, seq, i * body.len() as u64, &body);
        // Each group is acknowledged, or held back: the mirror counted a stall and no ack came
        // for a second after that. Until a stall is counted the ack is awaited however long it
        // takes (a fixed second from the send once called a group that a loaded machine was
        // slow to acknowledge held). A stalled lane still sends heartbeats, so the ack itself
        // is awaited.
        let t0 = std::time::Instant::now();
        let mut stalled_at = None;
        let acked = loop {
            let mut hb = [0u8; FRAME_HEADER_SIZE];
            if lane.read_exact(&mut hb).is_ok() {
                let h = FrameHeader::decode(&hb).expect("a valid frame header");
                if h.kind == FrameKind::Ack && h.seq >= seq {
                    break true;
                }
            }
            let st = admin.status().expect("status");
            if st.stalls > stalls {
                let at = *stalled_at.get_or_insert_with(std::time::Instant::now);
                if at.elapsed() >= Duration::from_secs(1) {
                    break false;
                }
            }
            assert!(
                t0.elapsed() < common::WAIT,
                "group {seq} was neither acknowledged nor held back by a stall within {:?}: {st:?}",
                common::WAIT
            );
        };
        if !acked {
            held = Some(seq);
            break;
        }
    }
    let held = held.expect("the mirror kept acknowledging past secondary_tier_thresh with its backup frozen");

    // A new session replaces the stalled one, while the backup is still frozen.
    drop(lane);
    let t0 = std::time::Instant::now();
    let (_next, w) = join(&c, 0x5e55_0000_0000_0002, 0, 1);
    assert!(w.next_seq > held, "the held group was whole in the log, so it stays: {w:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "the next session waited {:?}", t0.elapsed());
    backup.thaw().expect("thaw the backup");
}

/// Groups a frozen backup lacks stay in the mirror's log after they are applied, and each is
/// made persistent in the data area once, not again at every reclaim while the backup is away
/// (that re-persisting, back to back once the log was full, held the apply lock for seconds
/// and with it the sealing of an ended session).
#[test]
fn groups_a_backup_lacks_are_persisted_once() {
    let (c, backup, mut admin) = mirror_with_backup("raw-held", |f| {
        f.mirror.secondary_tier_thresh = "64MiB".into();
    });

    let session = 0x5e55_0000_0000_0003;
    let (mut lane, welcome) = join(&c, session, 0, 1);
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };
    backup.freeze().expect("freeze the backup");
    let before = admin.status().expect("status").groups_persisted;
    let body = vec![0x5a; 4 << 10];
    let n = 32u64;
    for i in 0..n {
        send_group(&mut lane, &welcome, c.size(), tag, welcome.next_seq + i, i * body.len() as u64, &body);
    }
    let last = welcome.next_seq + n - 1;
    let applied = wait_status(&mut admin, "every group applied", |st| st.applied_seq >= last);
    // The checkpointer reclaims every 2 ms while groups wait in the log: let it do so many times.
    let st = wait_status(&mut admin, "100 reclaims after the last group was applied", |st| {
        st.reclaims >= applied.reclaims + 100
    });
    let lacked = st.backups.first().map(|b| b.acked_seq).expect("a backup link");
    assert!(lacked < last, "the frozen backup acknowledged group {lacked} of {last}: {st:?}");
    assert_eq!(st.groups_persisted - before, n, "each of the {n} groups persisted once: {st:?}");
    backup.thaw().expect("thaw the backup");
}
