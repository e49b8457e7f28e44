//! One-sided record placement, driven by hand over shared memory: a primary's lane that asks to
//! place its records gets the lane's log, writes each body into it and sends only the header.
//! The mirror checks every record where it lies before it acknowledges it: the place the lane's
//! log space gives it, and the body's checksum. A record placed anywhere else, or whose body
//! does not match its header, ends the lane as a protocol violation and is never applied. Over
//! TCP the mirror declines, and the bodies come on the connection as before.

mod common;

use common::{mirror_image, raw, wait_applied, wait_status, Cluster};
use mojim_core::encode::{placed_data_header, FramePlan, SessionTag};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{LogWindow, PeerRole, Welcome};
use mojim_format::log::LOG_HEADER_SIZE;
use mojim_format::{FrameKind, FRAME_HEADER_SIZE};
use mojim_transport::{AnyConn, Conn, PeerMemory};
use std::io::Write;

const OFFSET: u64 = 8192;

/// A lane of a new session that asked to place its records, and the mirror's answer.
struct PlacedLane {
    conn: AnyConn,
    welcome: Welcome,
    window: LogWindow,
    tag: SessionTag,
}

fn join(c: &Cluster, session: u64) -> PlacedLane {
    let id = c.cfg.region_id().expect("region id");
    let mut hello = raw::hello(PeerRole::Primary, (id.uuid, id.size), session, 0, 1);
    hello.place = true;
    let (mut conn, welcome) = raw::handshake(&c.mirror_addr(), &hello, &c.secret().0);
    let (h, body) = raw::read_frame(&mut conn).expect("the Log frame after the Welcome");
    assert_eq!(h.kind, FrameKind::Log, "a lane that asked to place its records is answered with Log");
    let window = LogWindow::decode(&body).expect("a valid Log body");
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };
    PlacedLane { conn, welcome, window, tag }
}

fn start(test: &str, listen: &str) -> Cluster {
    let mut c = Cluster::new(test, 1 << 20, |_| {});
    let listen = if listen.is_empty() {
        c.dir.path().join("m.sock").to_str().expect("utf-8").to_string()
    } else {
        listen.to_string()
    };
    c.start_mirror_with(&["--listen", &listen]);
    c
}

/// The memory of the offered log, and where the body of the record at `head` goes in it.
fn take(lane: &PlacedLane) -> (PeerMemory, usize) {
    let w = lane.window;
    let mem = lane.conn.take_memory(LOG_HEADER_SIZE + w.capacity as usize).expect("take the offered log");
    (mem, LOG_HEADER_SIZE + (w.head % w.capacity) as usize + FRAME_HEADER_SIZE)
}

fn plan(len: u32) -> FramePlan {
    FramePlan { offset: OFFSET, len, frame_index: 0, end: true }
}

#[test]
fn records_placed_in_the_log_are_checked_there_acknowledged_and_applied() {
    let c = start("placed_ok", "");
    let mut lane = join(&c, 0x91ace_0001);
    assert!(lane.window.capacity > 0, "over shared memory the mirror offers its log");
    let (mem, body_at) = take(&lane);
    let body: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    mem.write(body_at, &body);
    let seq = lane.welcome.next_seq;
    let header = placed_data_header(lane.tag, seq, plan(4096), crc32c(&body), lane.window.head);
    lane.conn.write_all(&header).expect("ring the doorbell");
    let (ack, _) = raw::read_frame(&mut lane.conn).expect("an ack");
    assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, seq));
    assert!(ack.offset <= lane.window.head + 4096 + 64, "the ack's tail is inside the log");
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let image = mirror_image(&mut admin, c.size());
    assert_eq!(&image[OFFSET as usize..][..4096], &body[..], "the placed body was applied");
}

/// Places one record at `place_at(window)` (its body changed after its checksum was taken, if
/// `corrupt`), rings its doorbell, checks that the lane ends with nothing applied, and returns
/// the violation the mirror reports.
fn refused(test: &str, place_at: impl Fn(&LogWindow) -> u64, corrupt: bool) -> String {
    let c = start(test, "");
    let mut lane = join(&c, 0x91ace_0002);
    let (mem, _) = take(&lane);
    let body = vec![0x5au8; 4096];
    let pos = place_at(&lane.window);
    let at = LOG_HEADER_SIZE + (pos % lane.window.capacity) as usize + FRAME_HEADER_SIZE;
    mem.write(at, &body);
    let header = placed_data_header(lane.tag, lane.welcome.next_seq, plan(4096), crc32c(&body), pos);
    if corrupt {
        // Changed after its checksum was taken, before the doorbell.
        mem.write(at + 100, &[0xa5]);
    }
    lane.conn.write_all(&header).expect("ring the doorbell");
    assert!(raw::read_frame(&mut lane.conn).is_err(), "no ack: the lane is closed");
    let mut admin = c.admin();
    let st = wait_status(&mut admin, "the violation is counted", |s| s.last_violation.is_some());
    assert_eq!(st.applied_seq, 0, "nothing was applied");
    let image = mirror_image(&mut admin, c.size());
    assert!(image[OFFSET as usize..][..4096].iter().all(|&b| b == 0), "the refused bytes never landed");
    st.last_violation.expect("a violation")
}

#[test]
fn a_record_placed_anywhere_but_its_place_is_a_violation_and_never_applied() {
    let why = refused("placed_elsewhere", |w| w.head + 128, false);
    assert!(why.contains("placed at log position"), "{why}");
}

#[test]
fn a_placed_body_that_does_not_match_its_header_is_a_violation_and_never_applied() {
    let why = refused("placed_corrupt", |w| w.head, true);
    assert!(why.contains("checksum"), "{why}");
}

#[test]
fn over_tcp_the_mirror_declines_and_bodies_come_on_the_connection() {
    let c = start("placed_tcp", "127.0.0.1:0");
    let mut lane = join(&c, 0x91ace_0003);
    assert_eq!(lane.window, LogWindow::default(), "TCP shares no memory: declined");
    assert!(lane.conn.take_memory(4096).is_err(), "nothing to take over TCP");
    let body = vec![0x33u8; 512];
    let seq = lane.welcome.next_seq;
    let header = mojim_core::encode::data_header(lane.tag, seq, plan(512), &body);
    lane.conn.write_all(&header).and_then(|_| lane.conn.write_all(&body)).expect("send the group");
    let (ack, _) = raw::read_frame(&mut lane.conn).expect("an ack");
    assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, seq));
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(&mirror_image(&mut admin, c.size())[OFFSET as usize..][..512], &body[..]);
}
