//! Placed records over TLS, between real processes, over shared memory and over UCX: a primary
//! with `[security] tls = true` places its records in the mirror's log, each sealed with a tag
//! under a key both sides derive from the lane's TLS session, and the mirror checks the tag
//! where the record lies before it acknowledges it. The records replicate, and a mirror killed
//! with groups still in its logs recovers them. A hostile primary (the handshake driven by
//! hand, then records built from the documented format) that changes a body after sealing it,
//! forges a tag, or leaves the tag out is refused naming the record MAC: its lane ends and
//! nothing of the group is logged, applied or acknowledged.

mod common;

use common::{mirror_image, raw, wait_status, Cluster};
use mojim_core::encode::{placed_data_header, sealed, FramePlan, SessionTag};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{LogWindow, PeerRole, Welcome};
use mojim_format::{FrameKind, FRAME_HEADER_SIZE};
use mojim_node::admin_client::AdminClient;
use mojim_transport::{AnyConn, AnyTransport, Conn, PeerMemory};
use std::io::Write;

/// Shared memory: a socket in the test's folder.
const SHM: &str = "";
const UCX: &str = "ucx:127.0.0.1:0";
const OFFSET: u64 = 8192;

/// A cluster with mutual TLS whose mirror listens on `listen` (shared memory: a socket in its
/// folder), after `edit`.
fn start(test: &str, listen: &str, edit: impl FnOnce(&mut mojim::config::ConfigFile)) -> Cluster {
    let mut c = Cluster::new(test, 1 << 20, |f| {
        common::tls::configure(f);
        edit(f);
    });
    common::tls::make_certs(&c);
    let listen = where_to_listen(&c, listen);
    c.start_mirror_with(&["--listen", &listen]);
    c
}

fn where_to_listen(c: &Cluster, listen: &str) -> String {
    if listen.is_empty() {
        c.dir.path().join("m.sock").to_str().expect("utf-8").to_string()
    } else {
        listen.to_string()
    }
}

fn operator(c: &Cluster) -> AdminClient {
    common::tls::operator(c, &c.mirror_addr())
}

/// A primary over TLS writes and syncs groups; the mirror, which applies nothing until it is
/// killed, recovers them from its logs (every record sealed, its tag after its body) when it
/// starts again.
fn replicates_and_recovers(test: &str, listen: &str) {
    let mut c = start(test, listen, |f| {
        f.mirror.checkpoint_thresh = 1000;
        f.mirror.checkpoint_idle_ms = 600_000;
    });
    let p = mojim::Primary::open(&c.primary_options()).expect("a primary over TLS");
    let mut expected = vec![0u8; c.size() as usize];
    for i in 0..40u64 {
        let at = (i * 20_011) % (c.size() - 70_000);
        let body: Vec<u8> = (0..(i * 1543 % 65_000 + 1)).map(|k| (k * 31 + i) as u8).collect();
        p.write(at, &body).expect("write");
        p.msync(at, body.len() as u64).expect("sync over TLS");
        expected[at as usize..][..body.len()].copy_from_slice(&body);
    }
    let mut admin = operator(&c);
    let st = admin.status().expect("status");
    assert!(st.last_violation.is_none(), "{st:?}");
    assert!(st.last_received_seq >= 40, "{st:?}");
    drop((admin, p));
    c.kill_mirror();
    let listen = where_to_listen(&c, listen);
    c.start_mirror_with(&["--listen", &listen]);
    let mut admin = operator(&c);
    let st = common::wait_applied(&mut admin);
    assert!(st.applied_seq >= 40, "recovered every group: {st:?}");
    common::assert_same_image(test, &expected, &mirror_image(&mut admin, c.size()));
}

#[test]
fn records_placed_over_tls_on_shared_memory_replicate_and_recover_after_kill_9() {
    replicates_and_recovers("placed_tls_shm", SHM);
}

#[test]
fn records_placed_over_tls_with_ucx_puts_replicate_and_recover_after_kill_9() {
    replicates_and_recovers("placed_tls_ucx", UCX);
}

/// A lane of a hostile primary over TLS that asked to place its records, with the log it was
/// offered and the key its session gives.
struct Lane {
    conn: AnyConn,
    welcome: Welcome,
    window: LogWindow,
    mem: PeerMemory,
    mac: mojim_transport::RecordMac,
    tag: SessionTag,
}

fn join(c: &Cluster, session: u64) -> Lane {
    let id = c.cfg.region_id().expect("region id");
    let mut hello = raw::hello(PeerRole::Primary, (id.uuid, id.size), session, 0, 1);
    hello.place = true;
    let tls = AnyTransport::new(Some(common::tls::context(c.dir.path(), "ca.pem", "application")));
    let (mut conn, welcome) = raw::handshake_over(&tls, &c.mirror_addr(), &hello, &c.secret().0);
    let (h, body) = raw::read_frame(&mut conn).expect("the Log frame after the Welcome");
    assert_eq!(h.kind, FrameKind::Log);
    let (window, token) = LogWindow::decode_offer(&body).expect("a valid Log body");
    assert!(window.capacity > 0, "over TLS the mirror offers its log");
    let mem = conn.take_memory(window.capacity as usize, token).expect("take the offered log");
    let mac = conn.record_mac(session, 0).expect("a key").expect("a TLS connection has one");
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };
    Lane { conn, welcome, window, mem, mac, tag }
}

/// How a hostile primary spoils its record.
#[derive(Clone, Copy, Debug)]
enum Spoil {
    /// Nothing: the record is acknowledged and applied.
    None,
    /// A bit of the body flipped after it was sealed (and checksummed), before the doorbell.
    BodyAfterSealing,
    /// The body and its checksum as placed, the tag made up.
    ForgedTag,
    /// The body, its checksum and its tag all made anew by someone without the key: the tag of
    /// another key.
    OtherKey,
    /// The record placed with no tag and no `MAC` flag, as over a lane without TLS.
    Unsealed,
}

/// Places one 4096-byte record spoiled as `spoil` says and rings its doorbell. Returns the
/// violation the mirror reports, after checking that nothing was acknowledged or applied; for
/// `Spoil::None`, checks that it was and returns "".
fn place(test: &str, listen: &str, spoil: Spoil) -> String {
    let c = start(test, listen, |_| {});
    let mut lane = join(&c, 0x0009_1ace_7100);
    let body = vec![0x5au8; 4096];
    let (seq, pos) = (lane.welcome.next_seq, lane.window.head);
    let at = (pos % lane.window.capacity) as usize + FRAME_HEADER_SIZE;
    let plan = FramePlan { offset: OFFSET, len: 4096, frame_index: 0, end: true };
    let mut header = placed_data_header(lane.tag, seq, plan, crc32c(&body), pos);
    if let Spoil::Unsealed = spoil {
        lane.mem.write(at, &body).expect("place the body");
    } else {
        lane.mem.write(at, &body).expect("place the body");
        let tag = match spoil {
            Spoil::ForgedTag => [0xa5; 16],
            Spoil::OtherKey => mojim_transport::RecordMac::new(&[1; 32]).tag(seq, 0, &body),
            _ => lane.mac.tag(seq, 0, &body),
        };
        lane.mem.write(at + body.len(), &tag).expect("place the tag");
        header = sealed(header);
    }
    if let Spoil::BodyAfterSealing = spoil {
        lane.mem.write(at + 100, &[0xa5]).expect("change the body");
    }
    lane.mem.flush().expect("the bytes are in the mirror's log");
    lane.conn.write_all(&header).expect("ring the doorbell");
    let answer = raw::read_frame(&mut lane.conn);
    let mut admin = operator(&c);
    if let Spoil::None = spoil {
        let (ack, _) = answer.expect("an ack");
        assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, seq));
        common::wait_applied(&mut admin);
        assert_eq!(&mirror_image(&mut admin, c.size())[OFFSET as usize..][..4096], &body[..]);
        return String::new();
    }
    assert!(answer.is_err(), "{spoil:?}: no ack, the lane is closed");
    let st = wait_status(&mut admin, "the violation is counted", |s| s.last_violation.is_some());
    assert_eq!(st.applied_seq, 0, "{spoil:?}: nothing was applied");
    assert!(st.last_received_seq < seq, "{spoil:?}: nothing of the group was logged: {st:?}");
    let image = mirror_image(&mut admin, c.size());
    assert!(image[OFFSET as usize..][..4096].iter().all(|&b| b == 0), "{spoil:?}: the bytes never landed");
    st.last_violation.expect("a violation")
}

#[test]
fn a_sealed_record_is_acknowledged_and_applied() {
    for (test, listen) in [("placed_tls_ok", SHM), ("placed_tls_ucx_ok", UCX)] {
        assert_eq!(place(test, listen, Spoil::None), "");
    }
}

#[test]
fn a_record_changed_after_it_was_sealed_is_refused_naming_the_mac() {
    for (test, listen) in [("placed_tls_changed", SHM), ("placed_tls_ucx_changed", UCX)] {
        let why = place(test, listen, Spoil::BodyAfterSealing);
        assert!(why.contains("record MAC of group"), "{listen:?}: {why}");
        assert!(why.contains("forged or changed"), "{listen:?}: {why}");
    }
}

#[test]
fn a_forged_tag_is_refused_naming_the_mac() {
    for (test, listen) in [("placed_tls_forged", SHM), ("placed_tls_ucx_forged", UCX)] {
        for spoil in [Spoil::ForgedTag, Spoil::OtherKey] {
            let why = place(&format!("{test}_{spoil:?}"), listen, spoil);
            assert!(why.contains("record MAC of group"), "{listen:?} {spoil:?}: {why}");
        }
    }
}

#[test]
fn a_record_without_its_tag_over_tls_is_refused_naming_the_mac() {
    let why = place("placed_tls_unsealed", SHM, Spoil::Unsealed);
    assert!(why.contains("record MAC missing"), "{why}");
}
