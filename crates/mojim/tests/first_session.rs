//! A first session names its generation with one CopyEnd per lane, and the mirror takes it at
//! the first one it reads: that CopyEnd comes before every group of its lane, so no group is
//! acknowledged, on any lane, before the generation is durable. A mirror that waited for every
//! lane's CopyEnd could acknowledge (and apply) a group of a fast lane under generation 0, and,
//! killed then, come back with applied groups and no generation: the primary's next session
//! would call that a split brain. This drives a two-lane session by hand so that the second
//! lane's CopyEnd never comes.

mod common;

use common::{wait_applied, Cluster};
use mojim::Range;
use mojim_core::encode::{check_group, data_header, frames, GroupLimits, SessionTag};
use mojim_core::handshake::ClientHandshake;
use mojim_format::handshake::{Hello, PeerRole, Welcome};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const GENERATION: u64 = 0x5eed_0000_0000_0001;

fn read_frame(s: &mut TcpStream) -> (FrameHeader, Vec<u8>) {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    s.read_exact(&mut hb).expect("a frame header from the mirror");
    let h = FrameHeader::decode(&hb).expect("a valid frame header");
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body).expect("the frame's body");
    (h, body)
}

/// Connects lane `lane` of a two-lane session and completes the handshake.
fn join(c: &Cluster, session: u64, lane: u16) -> (TcpStream, Welcome) {
    let id = c.cfg.region_id().expect("region id");
    let mut s = TcpStream::connect(c.mirror_addr()).expect("connect to the mirror");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("set timeout");
    let hello = Hello {
        role: PeerRole::Primary,
        lane,
        lanes: 2,
        region_uuid: id.uuid,
        region_size: id.size,
        epoch: 1,
        session,
        nonce: [lane as u8 + 1; 32],
        max_frame: 64 << 10,
        generation: GENERATION,
    };
    let hs = ClientHandshake::new(&hello, &c.secret().0);
    let out = hs.hello();
    s.write_all(&out.header).and_then(|_| s.write_all(&out.body)).expect("send Hello");
    let (h, body) = read_frame(&mut s);
    let proof = hs.on_challenge(&h, &body).expect("a challenge");
    s.write_all(&proof.header).and_then(|_| s.write_all(&proof.body)).expect("send Proof");
    let (h, body) = read_frame(&mut s);
    let welcome = hs.on_verdict(&h, &body).expect("welcomed");
    (s, welcome)
}

#[test]
fn the_first_lanes_copy_end_makes_the_generation_durable_before_any_group_is_acknowledged() {
    let mut c = Cluster::new("first_session", 1 << 20, |_| {});
    c.start_mirror();
    let session = 0x00c0_ffee_0000_0001;
    let (mut lane0, welcome) = join(&c, session, 0);
    // Lane 1 joins and then says nothing, as a slow lane would.
    let (_lane1, _) = join(&c, session, 1);
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
    let ranges = [Range::new(8192, 4096)];
    let limits = GroupLimits {
        max_ranges: 16,
        max_frame: welcome.max_frame,
        region_size: c.size(),
        max_group_log_bytes: welcome.log_capacity / 2,
    };
    let shape = check_group(&ranges, &limits).expect("a valid group");
    let body = vec![0x5a; 4096];
    for plan in frames(&ranges, welcome.max_frame, shape) {
        let b = &body[(plan.offset - 8192) as usize..][..plan.len as usize];
        lane0
            .write_all(&data_header(tag, seq, plan, b))
            .and_then(|_| lane0.write_all(b))
            .expect("send the group");
    }
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
