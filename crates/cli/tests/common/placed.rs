//! Placed records over TLS, by a hostile primary: a cluster with mutual TLS (and
//! `encrypt_placed` or not), a lane whose handshake is driven by hand and that places records
//! from the documented format (docs/FORMAT.md §2.4) into the mirror's log it was offered, and
//! what a test checks after the doorbell: a record acknowledged and applied, or refused with
//! nothing of it logged, applied or acknowledged. `placed_tls.rs` and `placed_encrypted.rs`
//! spoil records with it; [`changed_after_the_check_never_reaches_a_backup`] changes one after
//! the mirror checked it.

use super::{mirror_image, raw, wait_status, Cluster};
use mojim::config::ConfigFile;
use mojim_core::encode::{placed_data_header, FramePlan, SessionTag};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{LogWindow, PeerRole, Welcome};
use mojim_format::log::LOG_HEADER_SIZE;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_node::admin_client::AdminClient;
use mojim_node::MirrorStatus;
use mojim_tools::child::ChildNode;
use mojim_transport::{AnyConn, AnyTransport, Conn, PeerMemory, RecordMac};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Shared memory: a socket in the test's folder.
pub const SHM: &str = "";
pub const UCX: &str = "ucx:127.0.0.1:0";
/// The default TCP address.
pub const TCP: &str = "tcp";
/// Where in the data area the records go.
pub const OFFSET: u64 = 8192;

/// A cluster of 1 MiB with mutual TLS, and `encrypt_placed` as `encrypt`, after `edit`; its
/// mirror not started.
pub fn cluster(test: &str, encrypt: bool, edit: impl FnOnce(&mut ConfigFile)) -> Cluster {
    let c = Cluster::new(test, 1 << 20, |f| {
        super::tls::configure(f);
        f.security.encrypt_placed = encrypt;
        edit(f);
    });
    super::tls::make_certs(&c);
    c
}

/// [`cluster`], its mirror listening on `listen` (see [`start_mirror`]).
pub fn start(test: &str, listen: &str, encrypt: bool, edit: impl FnOnce(&mut ConfigFile)) -> Cluster {
    let mut c = cluster(test, encrypt, edit);
    start_mirror(&mut c, listen);
    c
}

/// Starts `c`'s mirror on `listen`: [`SHM`] (a socket in its folder), [`TCP`], or an address.
pub fn start_mirror(c: &mut Cluster, listen: &str) {
    match listen {
        TCP => c.start_mirror(),
        SHM => {
            let sock = c.dir.path().join("m.sock").to_str().expect("utf-8").to_string();
            c.start_mirror_with(&["--listen", &sock])
        }
        _ => c.start_mirror_with(&["--listen", listen]),
    };
}

/// An operator's connection to `addr`, over TLS.
pub fn operator(c: &Cluster, addr: &str) -> AdminClient {
    super::tls::operator(c, addr)
}

/// The mirror's log of lane 0.
pub fn log_file(c: &Cluster) -> PathBuf {
    c.cfg.resolve(&c.cfg.file.mirror.dir).join("lane-0.log")
}

/// A lane of a hostile primary over TLS that asked to place its records (encrypted or not),
/// with the log it was offered and the key its session gives.
pub struct Lane {
    pub conn: AnyConn,
    pub welcome: Welcome,
    pub window: LogWindow,
    pub mem: PeerMemory,
    pub mac: RecordMac,
    pub tag: SessionTag,
}

/// Joins `c`'s mirror as lane 0 of session `session`, asking to place records, encrypted if
/// `encrypt`.
pub fn join(c: &Cluster, session: u64, encrypt: bool) -> Lane {
    let id = c.cfg.region_id().expect("region id");
    let mut hello = raw::hello(PeerRole::Primary, (id.uuid, id.size), session, 0, 1);
    (hello.place, hello.encrypt_placed) = (true, encrypt);
    let tls = AnyTransport::new(Some(super::tls::context(c.dir.path(), "ca.pem", "application")));
    let (mut conn, welcome) = raw::handshake_over(&tls, &c.mirror_addr(), &hello, &c.secret().0);
    let (h, body) = raw::read_frame(&mut conn).expect("the Log frame after the Welcome");
    assert_eq!(h.kind, FrameKind::Log);
    let (window, token) = LogWindow::decode_offer(&body).expect("a valid Log body");
    assert!(window.capacity > 0, "over TLS the mirror offers its log");
    let mem = conn.take_memory(window.capacity as usize, token).expect("take the offered log");
    let mac =
        conn.record_mac(session, 0).expect("a key").expect("a TLS connection has one").encrypting(encrypt);
    let tag = SessionTag { session, epoch: welcome.epoch, lane: 0 };
    Lane { conn, welcome, window, mem, mac, tag }
}

/// One 4096-byte record at [`OFFSET`], the first of its lane: where it goes, and what follows
/// the doorbell.
pub struct Placing {
    pub c: Cluster,
    pub lane: Lane,
    /// Its group's sequence number and its position in the log.
    pub seq: u64,
    pub pos: u64,
    /// Where its body goes in the offered memory (its header just before).
    pub at: usize,
}

impl Placing {
    /// Joins `c`'s running mirror as lane 0 of session `session`.
    pub fn new(c: Cluster, session: u64, encrypt: bool) -> Placing {
        let lane = join(&c, session, encrypt);
        let (seq, pos) = (lane.welcome.next_seq, lane.window.head);
        let at = (pos % lane.window.capacity) as usize + FRAME_HEADER_SIZE;
        Placing { c, lane, seq, pos, at }
    }

    /// The record's header, its body's checksum `checksum`, neither sealed nor encrypted.
    pub fn header(&self, checksum: u32) -> [u8; FRAME_HEADER_SIZE] {
        let plan = FramePlan { offset: OFFSET, len: 4096, frame_index: 0, end: true };
        placed_data_header(self.lane.tag, self.seq, plan, checksum, self.pos)
    }

    /// Places `body` sealed as its lane does (its tag after it, or encrypted with its tag) and
    /// returns the header that makes it a record.
    pub fn seal(&mut self, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
        if self.lane.mac.encrypts() {
            let checksum = self
                .lane
                .mem
                .write_sealed(self.at, body, &self.lane.mac, self.seq, 0)
                .expect("place the ciphertext");
            assert_eq!(checksum, crc32c(body));
            mojim_core::encode::encrypted(self.header(checksum))
        } else {
            self.lane.mem.write(self.at, body).expect("place the body");
            let tag = self.lane.mac.tag(self.seq, 0, body);
            self.lane.mem.write(self.at + body.len(), &tag).expect("place the tag");
            mojim_core::encode::sealed(self.header(crc32c(body)))
        }
    }

    /// Rings the doorbell `header` (the placed bytes flushed first) and returns the mirror's
    /// answer: an Ack, or an error once it closed the lane.
    pub fn ring(&mut self, header: &[u8; FRAME_HEADER_SIZE]) -> std::io::Result<(FrameHeader, Vec<u8>)> {
        self.lane.mem.flush().expect("the bytes are in the mirror's log");
        self.lane.conn.write_all(header).expect("ring the doorbell");
        raw::read_frame(&mut self.lane.conn)
    }

    /// Checks that `answer` acknowledged the record and that the mirror applied `body`.
    pub fn applied(&self, answer: std::io::Result<(FrameHeader, Vec<u8>)>, body: &[u8]) {
        let (ack, _) = answer.expect("an ack");
        assert_eq!((ack.kind, ack.seq), (FrameKind::Ack, self.seq));
        let mut admin = operator(&self.c, &self.c.mirror_addr());
        super::wait_applied(&mut admin);
        assert_eq!(&mirror_image(&mut admin, self.c.size())[OFFSET as usize..][..4096], body);
    }

    /// Checks that the mirror closed the lane (`answer`) with a violation and that nothing of
    /// the group was logged or applied (`what` names the spoiling in failures); returns the
    /// violation.
    pub fn refused(&self, answer: std::io::Result<(FrameHeader, Vec<u8>)>, what: &str) -> String {
        assert!(answer.is_err(), "{what}: no ack, the lane is closed");
        let mut admin = operator(&self.c, &self.c.mirror_addr());
        let st = wait_status(&mut admin, "the violation is counted", |s| s.last_violation.is_some());
        assert_eq!(st.applied_seq, 0, "{what}: nothing was applied");
        assert!(st.last_received_seq < self.seq, "{what}: nothing of the group was logged: {st:?}");
        let image = mirror_image(&mut admin, self.c.size());
        assert!(image[OFFSET as usize..][..4096].iter().all(|&b| b == 0), "{what}: the bytes never landed");
        st.last_violation.expect("a violation")
    }
}

/// Starts `mojim serve` for a backup of `c` on `addr` from `dir`, again and again until the
/// address is free (a backup killed a moment ago may still hold it).
fn restart_backup(c: &Cluster, addr: &str, dir: &std::path::Path) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let args = ["serve", "--config", cfg, "--listen", addr, "--dir", dir.to_str().expect("utf-8")];
    let t0 = Instant::now();
    loop {
        match ChildNode::spawn(super::exe(), &args) {
            Ok(n) => return n,
            Err(e) if t0.elapsed() < super::WAIT => {
                eprintln!("restarting the backup on {addr}: {e}; trying again");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("restart the backup on {addr}: {e}"),
        }
    }
}

/// A record placed over UCX (encrypted if `encrypt`), checked, acknowledged and applied by the
/// mirror while its backup is down, then changed in the mirror's log by the primary, which still
/// holds the log's memory key, its header's checksum made anew (what a writer without the record
/// key can do): when the backup comes back the mirror does not forward the changed record. It
/// ends the link as a violation naming the group, and the backup gets a full copy of the mirror's
/// data area, which holds what was checked; the changed bytes never reach it.
pub fn changed_after_the_check_never_reaches_a_backup(test: &str, encrypt: bool) {
    let mut c = cluster(test, encrypt, |f| {
        // The hostile lane sends no heartbeats: its connection, and so the memory key, must
        // outlive the wait for the apply.
        f.cluster.heartbeat_timeout_ms = 60_000;
        f.mirror.checkpoint_idle_ms = 20;
    });
    let mut backup = c.start_backup("backup");
    let backup_addr = backup.addr().to_string();
    c.feed(&[&backup], |_| {});
    start_mirror(&mut c, UCX);
    let mut m = operator(&c, &c.mirror_addr());
    wait_status(&mut m, "the backup is fed", |s| s.backups.iter().all(|b| b.connected));
    backup.kill();
    // Started again below from the same file: the backup itself feeds nobody.
    c.feed(&[], |_| {});
    let mut p = Placing::new(c, 0x0009_1ace_7300 | encrypt as u64, encrypt);
    let body: Vec<u8> = (0..4096u32).map(|k| (k * 7) as u8).collect();
    let header = p.seal(&body);
    let answer = p.ring(&header);
    p.applied(answer, &body);
    // The record as the mirror wrote it (over an encrypted body: the plaintext, decrypted in
    // place), changed after its check and its apply.
    let file_at = LOG_HEADER_SIZE + p.at;
    let log = std::fs::read(log_file(&p.c)).expect("read the mirror's log");
    assert_eq!(&log[file_at..][..4096], &body[..], "the log holds the record's plaintext");
    let hb: &[u8; 64] = log[file_at - FRAME_HEADER_SIZE..file_at].try_into().expect("64 bytes");
    let mut h = FrameHeader::decode(hb).expect("the record's header");
    let mut changed = body.clone();
    changed[..16].copy_from_slice(b"CHANGED IN A LOG");
    h.body_checksum = crc32c(&changed);
    p.lane.mem.write(p.at, &changed).expect("change the body");
    p.lane.mem.write(p.at - FRAME_HEADER_SIZE, &h.to_bytes()).expect("and its checksum");
    p.lane.mem.flush().expect("flushed");
    let c = &p.c;
    let dir = c.dir.path().join("backup");
    let backup = restart_backup(c, &backup_addr, &dir);
    let mut m = operator(c, &c.mirror_addr());
    let named = |s: &MirrorStatus| {
        s.last_violation.as_deref().is_some_and(|v| v.contains("was changed in this node's log"))
    };
    let st = wait_status(&mut m, "the changed group is named as a violation", named);
    let v = st.last_violation.expect("a violation");
    assert!(v.contains(&format!("group {} of lane 0", p.seq)) && v.contains(&backup_addr), "{v}");
    let fed = |s: &MirrorStatus| s.backups.iter().all(|b| b.connected && !b.copying && b.acked_seq >= p.seq);
    wait_status(&mut m, "the backup got a full copy instead", fed);
    let mirror = mirror_image(&mut m, c.size());
    assert_eq!(&mirror[OFFSET as usize..][..4096], &body[..], "the mirror applied what it checked");
    let mut b = operator(c, backup.addr());
    let st = super::wait_applied(&mut b);
    assert!(st.last_violation.is_none(), "{st:?}");
    let image = mirror_image(&mut b, c.size());
    assert_eq!(&image[OFFSET as usize..][..16], &body[..16], "the backup holds what the mirror checked");
    super::assert_same_image(test, &mirror, &image);
}
