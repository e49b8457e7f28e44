//! One-sided record placement, driven by hand over shared memory and over UCX: a primary's lane
//! that asks to place its records gets the lane's log, writes each body into it and sends only
//! the header. The mirror checks every record where it lies before it acknowledges it: the place
//! the lane's log space gives it, and the body's checksum. A record placed anywhere else, or
//! whose body does not match its header, ends the lane as a protocol violation and is never
//! applied. Over UCX the peer can write the log at any time, also after a record was checked:
//! the checkpointer applies only what it copied out of the log and checked on the copy. The
//! mirror offers the log's record area only, never its header page (the tail recovery starts
//! from), and a header whose tail is damaged on disk makes the mirror refuse to start, saying
//! so. Over TCP the mirror declines, and the bodies come on the connection as before.

mod common;

use common::{mirror_image, raw, wait_applied, wait_status, Cluster};
use mojim_core::encode::{placed_data_header, FramePlan, SessionTag};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{LogWindow, PeerRole, Welcome};
use mojim_format::{FrameKind, FRAME_HEADER_SIZE};
use mojim_transport::{AnyConn, Conn, PeerMemory};
use std::io::Write;

const OFFSET: u64 = 8192;

/// A lane of a new session that asked to place its records, and the mirror's answer.
struct PlacedLane {
    conn: AnyConn,
    welcome: Welcome,
    window: LogWindow,
    /// What the transport needs to take the offered log (UCX: its address and key).
    token: Vec<u8>,
    tag: SessionTag,
}

fn join(c: &Cluster, session: u64) -> PlacedLane {
    let id = c.cfg.region_id().expect("region id");
    let mut hello = raw::hello(PeerRole::Primary, (id.uuid, id.size), session, 0, 1);
    hello.place = true;
    let (mut conn, welcome) = raw::handshake(&c.mirror_addr(), &hello, &c.secret().0);
    let (h, body) = raw::read_frame(&mut conn).expect("the Log frame after the Welcome");
    assert_eq!(h.kind, FrameKind::Log, "a lane that asked to place its records is answered with Log");
    let (window, token) = LogWindow::decode_offer(&body).expect("a valid Log body");
    let token = token.to_vec();
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };
    PlacedLane { conn, welcome, window, token, tag }
}

/// Shared memory: a socket in the test's folder.
const SHM: &str = "";
const UCX: &str = "ucx:127.0.0.1:0";

fn start(test: &str, listen: &str) -> Cluster {
    start_with(test, listen, |_| {})
}

fn start_with(test: &str, listen: &str, edit: impl FnOnce(&mut mojim::config::ConfigFile)) -> Cluster {
    let mut c = Cluster::new(test, 1 << 20, edit);
    let listen = if listen.is_empty() {
        c.dir.path().join("m.sock").to_str().expect("utf-8").to_string()
    } else {
        listen.to_string()
    };
    c.start_mirror_with(&["--listen", &listen]);
    c
}

/// The memory of the offered log (its record area), and where the body of the record at
/// `head` goes in it.
fn take(lane: &PlacedLane) -> (PeerMemory, usize) {
    let w = lane.window;
    let mem = lane.conn.take_memory(w.capacity as usize, &lane.token).expect("take the offered log");
    (mem, body_at(w, w.head))
}

/// Where the body of the record at log position `pos` goes in the log's record area.
fn body_at(w: LogWindow, pos: u64) -> usize {
    (pos % w.capacity) as usize + FRAME_HEADER_SIZE
}

/// Places `body` for `offset` as group `seq`'s only record at log position `pos`, rings its
/// doorbell and waits for its acknowledgement.
fn place_acked(lane: &mut PlacedLane, mem: &mut PeerMemory, seq: u64, pos: u64, offset: u64, body: &[u8]) {
    let crc = mem.write(body_at(lane.window, pos), body).expect("place the body");
    mem.flush().expect("the body is in the mirror's log");
    let plan = FramePlan { offset, len: body.len() as u32, frame_index: 0, end: true };
    let header = placed_data_header(lane.tag, seq, plan, crc, pos);
    lane.conn.write_all(&header).expect("ring the doorbell");
    let (ack, _) = raw::read_frame(&mut lane.conn).expect("an ack");
    assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, seq));
}

fn plan(len: u32) -> FramePlan {
    FramePlan { offset: OFFSET, len, frame_index: 0, end: true }
}

fn placed_records_are_applied(test: &str, listen: &str) {
    let c = start(test, listen);
    let mut lane = join(&c, 0x0009_1ace_0001);
    assert!(lane.window.capacity > 0, "the mirror offers its log over {listen:?}");
    let (mut mem, _) = take(&lane);
    let body: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let (seq, head) = (lane.welcome.next_seq, lane.window.head);
    place_acked(&mut lane, &mut mem, seq, head, OFFSET, &body);
    let mut admin = c.admin();
    wait_applied(&mut admin);
    let image = mirror_image(&mut admin, c.size());
    assert_eq!(&image[OFFSET as usize..][..4096], &body[..], "the placed body was applied");
}

#[test]
fn records_placed_in_the_log_are_checked_there_acknowledged_and_applied() {
    placed_records_are_applied("placed_ok", SHM);
}

#[test]
fn records_placed_with_ucx_puts_are_checked_there_acknowledged_and_applied() {
    placed_records_are_applied("placed_ucx_ok", UCX);
}

/// Places one record at `place_at(window)` (its body changed after its checksum was taken, if
/// `corrupt`), rings its doorbell, checks that the lane ends with nothing applied, and returns
/// the violation the mirror reports.
fn refused(test: &str, listen: &str, place_at: impl Fn(&LogWindow) -> u64, corrupt: bool) -> String {
    let c = start(test, listen);
    let mut lane = join(&c, 0x0009_1ace_0002);
    let (mut mem, _) = take(&lane);
    let body = vec![0x5au8; 4096];
    let pos = place_at(&lane.window);
    let at = body_at(lane.window, pos);
    mem.write(at, &body).expect("place the body");
    let header = placed_data_header(lane.tag, lane.welcome.next_seq, plan(4096), crc32c(&body), pos);
    if corrupt {
        // Changed after its checksum was taken, before the doorbell.
        mem.write(at + 100, &[0xa5]).expect("change the body");
    }
    mem.flush().expect("the bytes are in the mirror's log");
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
    for (test, listen) in [("placed_elsewhere", SHM), ("placed_ucx_elsewhere", UCX)] {
        let why = refused(test, listen, |w| w.head + 128, false);
        assert!(why.contains("placed at log position"), "{listen:?}: {why}");
    }
}

#[test]
fn a_placed_body_that_does_not_match_its_header_is_a_violation_and_never_applied() {
    for (test, listen) in [("placed_corrupt", SHM), ("placed_ucx_corrupt", UCX)] {
        let why = refused(test, listen, |w| w.head, true);
        assert!(why.contains("checksum"), "{listen:?}: {why}");
    }
}

/// The hostile peer UCX allows: it holds the key to the log, and puts different bytes over a
/// record's body after the record was checked and acknowledged, before the checkpoint. The
/// checkpointer applies from its own checked copy only: the group is not applied at all, the
/// mirror's data fails with what happened, and the changed bytes never reach the data area
/// (not even through recovery, which checks every record again).
#[test]
fn a_body_changed_after_its_ack_never_reaches_the_data_area() {
    let mut c = start_with("placed_ucx_changed", UCX, |f| {
        // The checkpoint runs once two groups wait, never on idleness.
        f.mirror.checkpoint_thresh = 2;
        f.mirror.checkpoint_idle_ms = 600_000;
    });
    let mut lane = join(&c, 0x0009_1ace_0004);
    let (mut mem, _) = take(&lane);
    let seq = lane.welcome.next_seq;
    let first = lane.window.head;
    place_acked(&mut lane, &mut mem, seq, first, OFFSET, &[0x11; 4096]);
    // Acknowledged and waiting in the log: the peer changes it.
    mem.write(body_at(lane.window, first), &[0xee; 4096]).expect("change the acknowledged body");
    mem.flush().expect("the change is in the mirror's log");
    // The second group makes the checkpoint due.
    let second = first + mojim_format::log::record_size(4096);
    place_acked(&mut lane, &mut mem, seq + 1, second, 2 * OFFSET, &[0x22; 4096]);
    let mut admin = c.admin();
    let st = wait_status(&mut admin, "the checkpoint stops", |s| s.storage_failed.is_some());
    let why = st.storage_failed.expect("a failure");
    assert!(why.contains(&format!("group {seq}")), "{why}");
    assert!(why.contains("a peer changed a record after it was checked"), "{why}");
    assert_eq!(st.applied_seq, 0, "nothing of the group was applied");
    // The lane takes nothing more: its next frame ends it.
    let mut beat = mojim_format::FrameHeader::new(FrameKind::Heartbeat);
    (beat.lane, beat.epoch, beat.session) = (0, lane.tag.epoch, lane.tag.session);
    lane.conn.write_all(&beat.to_bytes()).expect("send a heartbeat");
    let (h, body) = raw::read_frame(&mut lane.conn).expect("the lane's answer");
    assert_eq!(h.kind, FrameKind::Refuse, "the lane ends its session, saying why");
    let (_, said) = mojim_format::handshake::decode_refuse(&body).expect("a Refuse body");
    assert!(said.contains("a peer changed a record after it was checked"), "{said}");
    assert!(raw::read_frame(&mut lane.conn).is_err(), "the session ended");
    drop((admin, mem, lane));
    // The data area as a restarted mirror serves it, after recovery from its logs.
    c.kill_mirror();
    c.start_mirror_with(&["--listen", UCX]);
    let mut admin = c.admin();
    let image = mirror_image(&mut admin, c.size());
    assert!(
        image[OFFSET as usize..][..4096].iter().all(|&b| b == 0),
        "neither the changed bytes nor any of the group reached the data area"
    );
}

/// The offered log is its record area, exactly: byte 0 of the offer is the record area's first
/// byte, and the header page before it (where the tail that recovery starts from is kept) is not
/// in the offer at all. Over UCX it is not registered either, so where the fabric checks
/// registrations (RDMA) a put into it fails. What a peer writes at the offer's first bytes, which
/// were the header's tail slots when the whole file was offered, lands in the record area: the
/// mirror, killed and restarted, recovers from its logs as before.
fn the_header_page_is_out_of_reach(test: &str, listen: &str) {
    let mut c = start(test, listen);
    let mut lane = join(&c, 0x0009_1ace_0005);
    let (mut mem, _) = take(&lane);
    let cap = lane.window.capacity as usize;
    assert_eq!(mem.len(), cap, "{listen:?}: the offer is the record area, exactly");
    assert!(mem.write(cap - 8, &[0xee; 16]).is_err(), "{listen:?}: nothing past the record area");
    // The file's tail slots were at 64..96 of a whole-file offer.
    mem.write(64, &[0xee; 32]).expect("write at the offer's byte 64");
    mem.flush().expect("the bytes are in the mirror's log");
    let body = vec![0x42u8; 4096];
    let (seq, head) = (lane.welcome.next_seq, lane.window.head);
    place_acked(&mut lane, &mut mem, seq, head, OFFSET, &body);
    drop((mem, lane));
    c.kill_mirror();
    c.start_mirror_with(&["--listen", &mirror_listen(&c, listen)]);
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(&mirror_image(&mut admin, c.size())[OFFSET as usize..][..4096], &body[..], "{listen:?}");
}

/// Where a restarted mirror of `c` listens: the same socket over shared memory, a fresh port
/// over UCX.
fn mirror_listen(c: &Cluster, listen: &str) -> String {
    if listen.is_empty() {
        c.dir.path().join("m.sock").to_str().expect("utf-8").to_string()
    } else {
        listen.to_string()
    }
}

#[test]
fn an_offered_log_is_its_record_area_and_the_header_page_is_out_of_reach() {
    the_header_page_is_out_of_reach("placed_header_shm", SHM);
    the_header_page_is_out_of_reach("placed_header_ucx", UCX);
}

/// The mirror's log file of lane 0 in `c`.
fn lane0_log(c: &Cluster) -> std::path::PathBuf {
    let p = c.dir.path().join("mirror").join("lane-0.log");
    assert!(p.exists(), "the mirror's log of lane 0 is at {}", p.display());
    p
}

/// Starts `mojim serve` on `c` and returns its error output once it exits, or fails the test
/// if it starts serving.
fn serve_refused(c: &Cluster, listen: &str) -> String {
    use std::io::{BufRead, Read};
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut child = std::process::Command::new(common::exe())
        .args(["serve", "--config", cfg, "--listen", listen])
        .env("MOJIM_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mojim serve");
    let out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    for line in out.lines() {
        if line.is_ok_and(|l| l.starts_with("serving on")) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the mirror started serving from a log whose tail is damaged");
        }
    }
    let mut err = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut err).expect("read its errors");
    let status = child.wait().expect("wait for it");
    assert!(!status.success(), "{status}: {err}");
    err
}

/// A log header damaged on disk: one tail slot is not enough to lose the tail (the other holds
/// the same one, and the mirror recovers the group); both are, and the mirror refuses to start,
/// naming the log and what it found, rather than guess where its records start.
#[test]
fn a_log_whose_tail_is_damaged_on_disk_recovers_from_the_other_copy_or_is_refused() {
    use std::os::unix::fs::FileExt;
    let mut c = start("placed_tail_damaged", UCX);
    let mut lane = join(&c, 0x0009_1ace_0006);
    let (mut mem, _) = take(&lane);
    let body = vec![0x77u8; 4096];
    let (seq, head) = (lane.welcome.next_seq, lane.window.head);
    place_acked(&mut lane, &mut mem, seq, head, OFFSET, &body);
    drop((mem, lane));
    c.kill_mirror();
    let log = std::fs::OpenOptions::new().read(true).write(true).open(lane0_log(&c)).expect("open the log");
    let flip = |at: u64| {
        let mut b = [0u8; 1];
        log.read_exact_at(&mut b, at).expect("read the header");
        log.write_all_at(&[b[0] ^ 0x5a], at).expect("damage the header");
    };
    // Slot 0's check (file bytes 72..76).
    flip(72);
    c.start_mirror_with(&["--listen", UCX]);
    let mut admin = c.admin();
    wait_applied(&mut admin);
    assert_eq!(&mirror_image(&mut admin, c.size())[OFFSET as usize..][..4096], &body[..]);
    drop(admin);
    c.kill_mirror();
    // The restarted mirror wrote its tail again, into both slots. Now both checks (72, 88).
    flip(72);
    flip(88);
    let err = serve_refused(&c, UCX);
    assert!(err.contains("lane-0.log"), "the error names the log: {err}");
    assert!(err.contains("both copies of the log's tail_pos fail their check"), "{err}");
    assert!(err.contains("slot 0 at byte 64") && err.contains("slot 1 at byte 80"), "{err}");
}

#[test]
fn over_tcp_the_mirror_declines_and_bodies_come_on_the_connection() {
    let c = start("placed_tcp", "127.0.0.1:0");
    let mut lane = join(&c, 0x0009_1ace_0003);
    assert_eq!(lane.window, LogWindow::default(), "TCP shares no memory: declined");
    assert!(lane.conn.take_memory(4096, &[]).is_err(), "nothing to take over TCP");
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
