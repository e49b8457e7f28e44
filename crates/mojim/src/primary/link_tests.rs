//! The primary's link, and the primary on it, against a mirror written out by hand on the
//! in-memory transport: the peer proves the secret with the real `ServerHandshake`, then
//! reads the frames the link sends and answers what each test needs (or misbehaves).

use super::link::Link;
use super::link_error::LinkError;
use super::stage::Stage;
use super::{FailurePolicy, Primary, PrimaryOptions};
use crate::config::{Heartbeat, Limits, OnMirrorLoss, Secret};
use crate::error::Error;
use mojim_core::encode::{ack_header, check_group, SessionTag};
use mojim_core::handshake::{Identity, ServerHandshake};
use mojim_core::Range;
use mojim_format::handshake::{encode_refuse, Hello, RefuseCode, Welcome, NONCE_SIZE, REFUSE_MAX};
use mojim_format::{FrameHeader, FrameKind};
use mojim_region::RegionFile;
use mojim_transport::frames::{read_frame, write_frame};
use mojim_transport::{Conn, MemConn, MemListener, MemTransport, Transport};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const SECRET: &[u8] = b"the link tests' secret";
const UUID: [u8; 16] = [0x4c; 16];
const SIZE: u64 = 1 << 20;
/// Frames of at most this many bytes, so that a group of a few KiB takes several.
const MAX_FRAME: u32 = 4096;

/// A region file in a folder of its own, removed with everything beside it when dropped.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mojim-link-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("make the scratch folder");
        RegionFile::create(&dir.join("region"), UUID, SIZE).expect("create the region");
        Scratch { dir }
    }

    fn region_path(&self) -> PathBuf {
        self.dir.join("region")
    }

    fn region(&self) -> RegionFile {
        RegionFile::open(&self.region_path()).expect("open the region")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn options(scratch: &Scratch, mirror: &str, lanes: u16) -> PrimaryOptions {
    PrimaryOptions {
        region_path: scratch.region_path(),
        mirror: mirror.to_string(),
        lanes,
        secret: Secret(SECRET.to_vec()),
        limits: Limits { max_frame: MAX_FRAME, max_ranges: 64 },
        async_window: 1,
        connect_timeout: Duration::from_secs(10),
        failure: FailurePolicy {
            heartbeat: Heartbeat { interval: Duration::from_millis(100), timeout: Duration::from_secs(10) },
            on_mirror_loss: OnMirrorLoss::Block,
            ..FailurePolicy::default()
        },
        ..PrimaryOptions::default()
    }
}

/// What the hand-written mirror says when a lane joins: a new, empty copy.
fn welcome() -> Welcome {
    Welcome {
        next_seq: 1,
        log_capacity: 64 << 20,
        max_frame: 1 << 20,
        epoch: 1,
        generation: 0,
        prev_generation: 0,
        inconsistent: false,
    }
}

/// One lane of the hand-written mirror, after its handshake.
struct PeerLane {
    conn: MemConn,
    hello: Hello,
}

impl PeerLane {
    /// Accepts a lane and runs the accepting side of the handshake, then welcomes it.
    fn accept(t: &MemTransport, listener: &MemListener, welcome: &Welcome) -> PeerLane {
        let mut conn = t.accept(listener).expect("accept a lane");
        let mut hs = ServerHandshake::new(SECRET, [0x11; NONCE_SIZE]);
        let mut body = Vec::new();
        let h = read_frame(&mut conn, REFUSE_MAX, &mut body).expect("a Hello");
        let challenge = hs.on_hello(&h, &body).expect("a valid Hello");
        write_frame(&mut conn, &challenge.header, &challenge.body).expect("send the Challenge");
        let h = read_frame(&mut conn, REFUSE_MAX, &mut body).expect("a Proof");
        let me = Identity { region_uuid: UUID, region_size: SIZE, epoch: 1, max_lanes: 8 };
        let accepted = hs.on_proof(&h, &body, &me).expect("the primary proves the secret");
        write_frame(&mut conn, &accepted.proof.header, &accepted.proof.body).expect("send the Proof");
        mojim_transport::frames::send(&mut conn, FrameKind::Welcome, 0, &welcome.encode())
            .expect("send the Welcome");
        // A primary asks to place its records; over memory there is nothing to share: declined.
        assert!(accepted.hello.place, "a primary's lane asks to place its records");
        let declined = mojim_format::handshake::LogWindow::default();
        mojim_transport::frames::send(&mut conn, FrameKind::Log, 0, &declined.encode())
            .expect("send the Log frame");
        PeerLane { conn, hello: accepted.hello }
    }

    fn tag(&self) -> SessionTag {
        SessionTag { session: self.hello.session, epoch: self.hello.epoch, lane: self.hello.lane }
    }

    /// The next frame and its body, both checked.
    fn read(&mut self) -> (FrameHeader, Vec<u8>) {
        let mut body = Vec::new();
        let h = read_frame(&mut self.conn, 1 << 20, &mut body).expect("a frame from the primary");
        (h, body)
    }

    /// The next frame that is not a heartbeat, answering heartbeats meanwhile.
    fn read_skipping_heartbeats(&mut self) -> (FrameHeader, Vec<u8>) {
        loop {
            let (h, body) = self.read();
            if h.kind != FrameKind::Heartbeat {
                return (h, body);
            }
            self.heartbeat();
        }
    }

    fn send(&mut self, header: &[u8; 64]) {
        write_frame(&mut self.conn, header, &[]).expect("send to the primary");
    }

    fn ack(&mut self, seq: u64) {
        let h = ack_header(self.tag(), seq);
        self.send(&h);
    }

    /// Reads a session's start up to the application's next group, acknowledging it: the kind
    /// of the catch-up it began with (CopyBegin's argument), if any, and the Copy frames of its
    /// one copy group, which runs beside the application's group.
    fn catch_up_then_one_group(&mut self) -> (Option<u64>, Vec<(u64, Vec<u8>)>) {
        let (mut began, mut copied, mut caught_up, mut group) = (None, Vec::new(), false, false);
        while !group || began.is_some() && !caught_up {
            let (h, body) = self.read_skipping_heartbeats();
            match h.kind {
                FrameKind::CopyBegin => began = Some(h.offset),
                FrameKind::Copy => copied.push((h.offset, body)),
                FrameKind::Copied => {
                    self.ack(h.seq);
                    caught_up = true;
                }
                FrameKind::Data if h.is_end() => {
                    self.ack(h.seq);
                    group = true;
                }
                FrameKind::Data | FrameKind::CopyEnd => {}
                other => panic!("a {other:?} frame from the primary"),
            }
        }
        (began, copied)
    }

    fn heartbeat(&mut self) {
        let mut h = FrameHeader::new(FrameKind::Heartbeat);
        h.lane = self.hello.lane;
        h.epoch = self.hello.epoch;
        h.session = self.hello.session;
        self.send(&h.to_bytes());
    }
}

/// Connects a link of `lanes` lanes to the hand-written mirror; returns it and the mirror's
/// side of each lane, in lane order.
fn connect(scratch: &Scratch, region: &RegionFile, lanes: u16) -> (Link<MemConn>, Vec<PeerLane>) {
    let t = MemTransport::new();
    let listener = t.listen("mirror:0").expect("listen");
    let addr = t.local_addr(&listener).expect("its name");
    let opts = options(scratch, &addr, lanes);
    thread::scope(|s| {
        let peer = s.spawn(|| (0..lanes).map(|_| PeerLane::accept(&t, &listener, &welcome())).collect());
        let link = Link::connect(&t, &opts, region, 1, 0).expect("the link connects");
        let peers: Vec<PeerLane> = peer.join().expect("the peer's handshakes");
        (link, peers)
    })
}

#[test]
fn a_group_goes_out_as_data_frames_and_returns_when_its_ack_comes() {
    let scratch = Scratch::new("group");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 1);
    let ranges = [Range::new(100, 10_000), Range::new(50_000, 10)];
    for r in &ranges {
        let bytes: Vec<u8> = (0..r.len).map(|i| (r.offset + i) as u8 ^ 0x5a).collect();
        region.write(r.offset, &bytes);
    }
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let (seq, _) =
        link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect("the group goes out");
    assert_eq!(seq, welcome().next_seq, "the first group takes the number the mirror gave");

    let (framed, go) = (mpsc::channel(), mpsc::channel::<()>());
    thread::scope(|s| {
        let peer = &mut peers[0];
        let tag = peer.tag();
        s.spawn(move || {
            // Every frame: a Data frame of this session and lane, numbered, at the next bytes
            // of the group, its body what the region holds there; the last one marks the end.
            let mut covered: Vec<(u64, u64)> = Vec::new();
            for index in 0.. {
                let (h, body) = peer.read();
                assert_eq!(h.kind, FrameKind::Data);
                assert_eq!((h.session, h.epoch, h.lane, h.seq), (tag.session, tag.epoch, 0, seq));
                assert_eq!(h.frame_index, index);
                assert!(body.len() <= MAX_FRAME as usize);
                let expected: Vec<u8> = (0..body.len() as u64).map(|i| (h.offset + i) as u8 ^ 0x5a).collect();
                assert_eq!(body, expected, "the frame at {} carries the region's bytes", h.offset);
                match covered.last_mut() {
                    Some(last) if last.0 + last.1 == h.offset => last.1 += body.len() as u64,
                    _ => covered.push((h.offset, body.len() as u64)),
                }
                if h.is_end() {
                    break;
                }
            }
            framed.0.send(covered).expect("report the frames");
            // Acknowledged only once the test has seen that nothing is acknowledged before.
            go.1.recv().expect("the go-ahead");
            peer.ack(seq);
        });
        let covered = framed.1.recv().expect("the peer read the group");
        assert_eq!(covered, vec![(100, 10_000), (50_000, 10)], "the frames cover the group, in order");
        assert_eq!(shape.frames, 4, "10 000 bytes in 4 KiB frames, and 10 more");
        assert_eq!(link.acked_floor(), seq - 1, "nothing is acknowledged before the Ack");
        go.0.send(()).expect("go");
        link.wait(0, seq).expect("the group is acknowledged");
    });
    assert_eq!(link.acked(), vec![seq]);
    assert!(!link.is_failed());
}

/// The acknowledged floor (where a catch-up starts after a loss) follows the lanes that are
/// owed something: a lane that carried nothing does not pin it at the session's start, and a
/// group owed on any lane holds it below that group.
#[test]
fn an_idle_lane_does_not_hold_the_acknowledged_floor_back() {
    let scratch = Scratch::new("floor");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 2);
    let ranges = [Range::new(0, 10)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let send = |peers: &mut [PeerLane], lane: usize| {
        let (seq, _) =
            link.send_group(&region, lane, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent");
        let (h, _) = peers[lane].read();
        assert_eq!((h.kind, h.seq), (FrameKind::Data, seq));
        seq
    };
    let first = send(&mut peers, 0);
    assert_eq!(link.acked_floor(), first - 1, "group {first} is owed");
    peers[0].ack(first);
    link.wait(0, first).expect("acknowledged");
    assert_eq!(link.acked_floor(), first, "lane 1 carried nothing");
    let second = send(&mut peers, 1);
    let third = send(&mut peers, 0);
    peers[0].ack(third);
    link.wait(0, third).expect("acknowledged");
    assert_eq!(link.acked_floor(), second - 1, "group {second} is still owed on lane 1");
    peers[1].ack(second);
    link.wait(1, second).expect("acknowledged");
    assert_eq!(link.acked_floor(), third, "nothing is owed");
}

#[test]
fn a_staged_group_puts_each_frames_bytes_into_the_region_just_before_sending_it() {
    let scratch = Scratch::new("staged");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 1);
    // The region holds zeros; only the stage puts the group's bytes there.
    let ranges = [Range::new(100, 10_000), Range::new(50_000, 10)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let mut puts = Vec::new();
    let mut put = |o: u64, l: u64| {
        let bytes: Vec<u8> = (0..l).map(|i| (o + i) as u8 ^ 0xa5).collect();
        region.write(o, &bytes);
        puts.push((o, l));
    };
    let mut stage = Stage::new(&ranges, &mut put);
    let (seq, _) = link.send_group(&region, 0, &ranges, shape, |_| {}, &mut stage).expect("sent");
    stage.finish();
    let mut frames = Vec::new();
    loop {
        let (h, body) = peers[0].read();
        let expected: Vec<u8> = (0..body.len() as u64).map(|i| (h.offset + i) as u8 ^ 0xa5).collect();
        assert_eq!(body, expected, "the frame at {} carries the staged bytes", h.offset);
        frames.push((h.offset, body.len() as u64));
        if h.is_end() {
            break;
        }
    }
    assert_eq!(puts, frames, "one put per frame, in the frames' order, and none after");
    peers[0].ack(seq);
    link.wait(0, seq).expect("acknowledged");
}

#[test]
fn an_ack_for_a_group_never_sent_fails_the_session_naming_it() {
    let scratch = Scratch::new("stray-ack");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 1);
    let ranges = [Range::new(0, 64)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let (seq, _) = link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent");
    let (h, _) = peers[0].read();
    assert!(h.is_end());
    peers[0].ack(seq + 5);
    let e = link.wait(0, seq).expect_err("an Ack of a group never sent is a violation");
    let LinkError::PeerMisbehaved(m) = &e else { panic!("blamed on the wrong party: {e:?}") };
    assert!(m.contains(&format!("acknowledged group {} on lane 0", seq + 5)), "{m}");
    assert!(m.contains(&format!("expected a group in {seq}..{}", seq + 1)), "{m}");
    // The session is over: later sends fail with the same reason, and the peer sees it close.
    assert!(link.is_failed());
    assert_eq!(
        link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect_err("failed"),
        e
    );
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut peers[0].conn, &mut rest).expect("the lane ends");
    // The application is told its mirror is lost, with that message.
    let m = m.clone();
    match Error::from(e) {
        Error::MirrorLost { reason } => assert_eq!(reason, m),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refusal_fails_the_session_with_the_mirrors_reason() {
    let scratch = Scratch::new("refuse");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 1);
    let ranges = [Range::new(4096, 100)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let (seq, _) = link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent");
    let _ = peers[0].read();
    let mut body = Vec::new();
    encode_refuse(RefuseCode::Storage, "the log device failed", &mut body);
    mojim_transport::frames::send(&mut peers[0].conn, FrameKind::Refuse, 0, &body).expect("refuse");
    peers[0].conn.shutdown();
    let e = link.wait(0, seq).expect_err("refused");
    assert_eq!(e, LinkError::Refused("mirror refused the session (Storage): the log device failed".into()));
}

#[test]
fn a_frame_the_mirror_may_not_send_is_blamed_on_it() {
    let scratch = Scratch::new("unexpected");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 1);
    let ranges = [Range::new(0, 8)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let (seq, _) = link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent");
    // The mirror echoes a Data frame back.
    let (h, body) = peers[0].read();
    write_frame(&mut peers[0].conn, &h.to_bytes(), &body).expect("echo");
    let e = link.wait(0, seq).expect_err("a Data frame from the mirror is a violation");
    let LinkError::PeerMisbehaved(m) = &e else { panic!("blamed on the wrong party: {e:?}") };
    assert!(m.starts_with("unexpected Data frame from mirror:"), "{m}");
}

#[test]
fn a_peer_that_closes_fails_every_pending_sync_with_the_loss() {
    let scratch = Scratch::new("closed");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 2);
    let ranges = [Range::new(0, 5000)];
    let shape = check_group(&ranges, &link.limits).expect("a valid group");
    let (a, _) =
        link.send_group(&region, 0, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent on lane 0");
    let (b, _) =
        link.send_group(&region, 1, &ranges, shape, |_| {}, &mut Stage::none()).expect("sent on lane 1");
    for p in peers.iter_mut() {
        while !p.read().0.is_end() {}
    }
    let (waiting, results) = mpsc::channel();
    thread::scope(|s| {
        for (lane, seq) in [(0, a), (1, b)] {
            let (link, waiting) = (&link, waiting.clone());
            s.spawn(move || waiting.send(link.wait(lane, seq)).expect("report"));
        }
        // The mirror goes away with both groups unacknowledged.
        drop(peers);
    });
    let results: Vec<_> = results.iter().take(2).collect();
    let first = link.lost();
    assert!(matches!(first, LinkError::Lost(_)), "a closed connection is a loss: {first:?}");
    assert!(first.message().contains(" from mirror:"), "{first}");
    for r in results {
        assert_eq!(r, Err(first.clone()), "every waiter gets the link's first failure");
    }
    assert!(link.is_failed());
}

#[test]
fn a_silent_mirror_fails_the_heartbeat_within_its_timeout() {
    let scratch = Scratch::new("silent");
    let region = scratch.region();
    let t = MemTransport::new();
    let listener = t.listen("mirror:0").expect("listen");
    let addr = t.local_addr(&listener).expect("its name");
    let mut opts = options(&scratch, &addr, 1);
    // A timeout long enough for the answering thread to be scheduled on a loaded machine (at
    // 100 ms the answered round failed under a load of 19 on two cores).
    opts.failure.heartbeat =
        Heartbeat { interval: Duration::from_millis(10), timeout: Duration::from_millis(1500) };
    let (link, mut peer) = thread::scope(|s| {
        let peer = s.spawn(|| PeerLane::accept(&t, &listener, &welcome()));
        let link = Link::connect(&t, &opts, &region, 1, 0).expect("connects");
        (link, peer.join().expect("handshake"))
    });
    // Answered, a heartbeat round passes.
    thread::scope(|s| {
        s.spawn(|| {
            let (h, _) = peer.read();
            assert_eq!(h.kind, FrameKind::Heartbeat);
            peer.heartbeat();
        });
        link.beat(Duration::ZERO).expect("a heartbeat goes out");
        link.hear(Duration::from_secs(10)).expect("the mirror answered");
    });
    // Unanswered, the lane's receive timeout ends it.
    link.beat(Duration::ZERO).expect("a heartbeat goes out");
    let e = link.hear(Duration::from_secs(10)).expect_err("no answer");
    assert!(matches!(e, LinkError::Lost(_)), "{e:?}");
    assert!(e.message().contains("no heartbeat or acknowledgement within the heartbeat timeout"), "{e}");
    drop(peer);
}

/// The keeper waits only for frames the mirror owes: a lane whose last frame has no answer (a
/// `CopyEnd`) and that was not asked anything is not read, where a read would wait for the
/// lane's receive timeout (here 10 s) and fail the link; a lane asked by a heartbeat is read
/// until its answer comes.
#[test]
fn only_a_frame_the_mirror_owes_is_waited_for() {
    let scratch = Scratch::new("owed");
    let region = scratch.region();
    let (link, mut peers) = connect(&scratch, &region, 2);
    link.send_control(1, FrameKind::CopyEnd, 7, 0).expect("CopyEnd on lane 1");
    assert_eq!(peers[1].read().0.kind, FrameKind::CopyEnd);
    // Neither lane has been idle for an hour: no heartbeat, and nothing is owed.
    link.beat(Duration::from_secs(3600)).expect("nothing to send");
    link.hear(Duration::from_secs(3600)).expect("nothing owed, nothing waited for");
    // Asked, each lane is owed an answer, and heard once it comes.
    link.beat(Duration::ZERO).expect("a heartbeat on each lane");
    thread::scope(|s| {
        for peer in peers.iter_mut() {
            s.spawn(move || {
                assert_eq!(peer.read().0.kind, FrameKind::Heartbeat);
                peer.heartbeat();
            });
        }
        link.hear(Duration::from_secs(3600)).expect("both answers heard");
    });
    assert!(!link.is_failed());
}

/// A whole primary on the in-memory transport: it connects, tells the new mirror its
/// generation, syncs, and reports the mirror's loss to the application as `MirrorLost`.
#[test]
fn a_primary_over_memory_syncs_and_reports_a_closed_mirror_as_lost() {
    let scratch = Scratch::new("primary");
    let t = MemTransport::new();
    let listener = t.listen("mirror:0").expect("listen");
    let addr = t.local_addr(&listener).expect("its name");
    let opts = options(&scratch, &addr, 1);
    let (acked, close) = (mpsc::channel(), mpsc::channel::<()>());
    let peer_t = t.clone();
    thread::scope(|s| {
        // The listener goes with the peer: the primary's attempts to reconnect are refused.
        s.spawn(move || {
            let mut lane = PeerLane::accept(&peer_t, &listener, &welcome());
            // A new mirror of a new copy: nothing to copy, only the copy's new generation.
            let (h, _) = lane.read_skipping_heartbeats();
            assert_eq!(h.kind, FrameKind::CopyEnd);
            assert_ne!(h.offset, 0, "the primary's generation");
            let (h, body) = lane.read_skipping_heartbeats();
            assert_eq!((h.kind, h.seq, h.offset, body.as_slice()), (FrameKind::Data, 1, 10, &b"hello"[..]));
            assert!(h.is_end());
            lane.ack(1);
            acked.0.send(()).expect("report");
            close.1.recv().expect("the go-ahead");
            // Gone, with the next group unacknowledged.
            let (h, _) = lane.read_skipping_heartbeats();
            assert_eq!((h.kind, h.seq), (FrameKind::Data, 2));
        });
        let primary = Primary::open_with(t.clone(), &opts).expect("the primary opens over memory");
        primary.write(10, b"hello").expect("store");
        primary.msync(10, 5).expect("acknowledged by the mirror");
        acked.1.recv().expect("the mirror acknowledged");
        let status = primary.status();
        assert_eq!((status.acked_seq.as_slice(), status.failed), (&[1][..], None));
        close.0.send(()).expect("go");
        primary.write(20, b"world").expect("store");
        match primary.msync(20, 5) {
            Err(Error::MirrorLost { reason }) => assert!(reason.contains(" from mirror:"), "{reason}"),
            other => panic!("a sync point whose mirror closed: {other:?}"),
        }
        assert!(primary.status().failed.is_some());
        drop(primary);
    });
}

/// A mirror may apply groups past one it lacks (sealing applies every complete group, across
/// gaps), so its applied number does not prove it holds every group below it. A group whose
/// acknowledgement never came is therefore sent again, as a log catch-up, even to a mirror
/// whose Welcome says it applied it.
#[test]
fn a_group_never_acknowledged_is_caught_up_whatever_the_mirror_says_it_applied() {
    let scratch = Scratch::new("catch-up");
    let (t, listener, opts) = mirror_for(&scratch);
    let (lost, resent) = (mpsc::channel(), mpsc::channel());
    let peer_t = t.clone();
    thread::scope(|s| {
        s.spawn(move || {
            let (mut lane, generation) = first_session(&peer_t, &listener);
            let (h, _) = lane.read_skipping_heartbeats();
            assert_eq!((h.kind, h.seq, h.offset), (FrameKind::Data, 2, 100));
            // Gone before acknowledging group 2.
            drop(lane);
            lost.0.send(()).expect("report");
            // Back, saying it applied group 2 (as a mirror does that applied a later group
            // across a gap where group 2 was).
            let again = Welcome { next_seq: 3, generation, ..welcome() };
            let mut lane = PeerLane::accept(&peer_t, &listener, &again);
            resent.0.send(lane.catch_up_then_one_group()).expect("report");
        });
        let primary = Primary::open_with(t.clone(), &opts).expect("the primary opens over memory");
        primary.write(10, b"first").expect("store");
        primary.msync(10, 5).expect("acknowledged by the mirror");
        primary.write(100, b"second").expect("store");
        assert!(matches!(primary.msync(100, 6), Err(Error::MirrorLost { .. })), "group 2 is lost");
        lost.1.recv().expect("the mirror left");
        wait_reconnected(&primary);
        primary.write(200, b"third").expect("store");
        primary.msync(200, 5).expect("acknowledged once the primary is back");
        assert_log_catch_up(resent.1.recv().expect("the mirror's report"), (100, b"second"));
        drop(primary);
    });
}

/// A group the mirror acknowledged just before its session ended is kept: its waiter, which
/// finds the session already gone, is told so, not that the mirror was lost. (Another thread of
/// the primary, its keeper or a copy, can read the Ack and then the end of the connection, and
/// drop the session, before the application's thread waits for that Ack.)
#[test]
fn a_group_acknowledged_just_before_its_session_ended_is_kept() {
    let scratch = Scratch::new("acked-then-gone");
    let (t, listener, opts) = mirror_for(&scratch);
    let (acked_sent, go) = (mpsc::channel(), mpsc::channel::<()>());
    let peer_t = t.clone();
    thread::scope(|s| {
        s.spawn(move || {
            let (mut lane, _) = first_session(&peer_t, &listener);
            let (h, _) = lane.read_skipping_heartbeats();
            assert_eq!((h.kind, h.seq, h.offset), (FrameKind::Data, 2, 100));
            lane.ack(2);
            acked_sent.0.send(()).expect("report");
            go.1.recv().expect("the go-ahead");
            let (h, _) = lane.read_skipping_heartbeats();
            assert_eq!((h.kind, h.seq, h.offset), (FrameKind::Data, 3, 300));
            // Gone with group 3 unacknowledged, and no session again (the listener goes too).
            drop(lane);
        });
        let primary = Primary::open_with(t.clone(), &opts).expect("the primary opens over memory");
        primary.write(10, b"first").expect("store");
        primary.msync(10, 5).expect("acknowledged by the mirror");
        primary.write(100, b"second").expect("store");
        let acked = primary.persist(&[Range::new(100, 6)]).expect("group 2 goes out");
        acked_sent.1.recv().expect("the mirror acknowledged group 2");
        // The keeper, which hears the mirror, reads the Ack; nobody waits for it yet.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while primary.status().acked_seq != [2] {
            assert!(std::time::Instant::now() < deadline, "the keeper did not read the Ack");
            thread::sleep(Duration::from_millis(10));
        }
        primary.write(300, b"third").expect("store");
        let never = primary.persist(&[Range::new(300, 5)]).expect("group 3 goes out");
        go.0.send(()).expect("go");
        while primary.status().failed.is_none() {
            assert!(std::time::Instant::now() < deadline, "the primary did not notice the mirror leave");
            thread::sleep(Duration::from_millis(10));
        }
        primary.wait(acked).expect("group 2 was acknowledged before the session ended");
        let lost = primary.wait(never);
        assert!(matches!(lost, Err(Error::MirrorLost { .. })), "group 3 was never acknowledged: {lost:?}");
        drop(primary);
    });
}

/// Under `on_mirror_loss = block`, a sync point made while the mirror is away is refused, but
/// its bytes are in the primary's copy, and what the application syncs later may depend on
/// them: the metadata log keeps its ranges, and the next session resends them.
#[test]
fn a_sync_point_refused_without_a_mirror_is_sent_when_it_is_back() {
    let scratch = Scratch::new("refused");
    let (t, listener, opts) = mirror_for(&scratch);
    let (lost, back, resent) = (mpsc::channel(), mpsc::channel::<()>(), mpsc::channel());
    let peer_t = t.clone();
    thread::scope(|s| {
        s.spawn(move || {
            let (lane, generation) = first_session(&peer_t, &listener);
            drop(lane);
            lost.0.send(()).expect("report");
            back.1.recv().expect("the go-ahead");
            let again = Welcome { next_seq: 2, generation, ..welcome() };
            let mut lane = PeerLane::accept(&peer_t, &listener, &again);
            resent.0.send(lane.catch_up_then_one_group()).expect("report");
        });
        let primary = Primary::open_with(t.clone(), &opts).expect("the primary opens over memory");
        primary.write(10, b"first").expect("store");
        primary.msync(10, 5).expect("acknowledged by the mirror");
        lost.1.recv().expect("the mirror left");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while primary.status().failed.is_none() {
            assert!(std::time::Instant::now() < deadline, "the primary did not notice the loss");
            thread::sleep(Duration::from_millis(10));
        }
        primary.write(300, b"refused").expect("store");
        assert!(matches!(primary.msync(300, 7), Err(Error::MirrorLost { .. })), "refused without a mirror");
        back.0.send(()).expect("go");
        wait_reconnected(&primary);
        primary.write(400, b"later").expect("store");
        primary.msync(400, 5).expect("acknowledged once the primary is back");
        assert_log_catch_up(resent.1.recv().expect("the mirror's report"), (300, b"refused"));
        drop(primary);
    });
}

/// Waits until `primary` has its mirror again.
fn wait_reconnected(primary: &Primary<MemTransport>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while primary.status().failed.is_some() {
        assert!(std::time::Instant::now() < deadline, "the primary did not reconnect");
        thread::sleep(Duration::from_millis(10));
    }
}

/// A listener for the hand-written mirror, and the options of a primary of one lane that
/// reaches it.
fn mirror_for(scratch: &Scratch) -> (MemTransport, MemListener, PrimaryOptions) {
    let t = MemTransport::new();
    let listener = t.listen("mirror:0").expect("listen");
    let addr = t.local_addr(&listener).expect("its name");
    let opts = options(scratch, &addr, 1);
    (t, listener, opts)
}

/// The hand-written mirror's side of a new copy's first session: the CopyEnd that names the
/// primary's generation, then group 1, acknowledged. Returns the lane and the generation.
fn first_session(t: &MemTransport, listener: &MemListener) -> (PeerLane, u64) {
    let mut lane = PeerLane::accept(t, listener, &welcome());
    let (h, _) = lane.read_skipping_heartbeats();
    assert_eq!(h.kind, FrameKind::CopyEnd);
    let generation = h.offset;
    let (h, _) = lane.read_skipping_heartbeats();
    assert_eq!((h.kind, h.seq), (FrameKind::Data, 1));
    lane.ack(1);
    (lane, generation)
}

/// What [`PeerLane::catch_up_then_one_group`] read is a log catch-up of exactly `bytes` at
/// `offset`.
fn assert_log_catch_up(read: (Option<u64>, Vec<(u64, Vec<u8>)>), (offset, bytes): (u64, &[u8])) {
    let (began, copied) = read;
    assert_eq!(began, Some(mojim_core::primary::CopyKind::Log as u64), "a log catch-up begins the session");
    assert_eq!(copied, vec![(offset, bytes.to_vec())], "the catch-up sends those bytes, and only those");
}
