//! Placed records encrypted (`[security] encrypt_placed = true`), between real processes, over
//! shared memory and over UCX: a primary over TLS places each record's body in the mirror's log
//! as AES-256-GCM ciphertext, and the mirror checks its tag and decrypts it in place before it
//! writes the record's header. The records replicate, recover after `kill -9` (the log holds
//! plaintext once a record is made), and reach a backup. While a record is in flight its bytes
//! in the mirror's log are not the plaintext; ciphertext changed after it was placed is refused
//! naming the record MAC, and nothing of it is applied. A primary and a mirror set otherwise are
//! refused at the lane's handshake naming the setting (not over TCP, where nothing is placed),
//! and `encrypt_placed` without `tls` is refused at start.

mod common;

use common::placed::{self, log_file, operator, start_mirror, Placing, SHM, TCP, UCX};
use common::{mirror_image, wait_status, Cluster};
use mojim_format::log::LOG_HEADER_SIZE;
use mojim_format::FrameHeader;
use std::time::{Duration, Instant};

const OFFSET: u64 = placed::OFFSET;

/// A cluster with mutual TLS and `encrypt_placed` as `encrypt` whose mirror listens on
/// `listen` (shared memory: a socket in its folder; [`TCP`]: the default TCP address), after
/// `edit`.
fn start(
    test: &str,
    listen: &str,
    encrypt: bool,
    edit: impl FnOnce(&mut mojim::config::ConfigFile),
) -> Cluster {
    placed::start(test, listen, encrypt, edit)
}

/// A primary with `encrypt_placed` writes and syncs groups; the mirror, which applies nothing
/// until it is killed, recovers them from its logs when it starts again: they hold the
/// plaintext, with the checksums of the plaintext.
fn replicates_and_recovers(test: &str, listen: &str) {
    let mut c = start(test, listen, true, |f| {
        f.mirror.checkpoint_thresh = 1000;
        f.mirror.checkpoint_idle_ms = 600_000;
    });
    let p = mojim::Primary::open(&c.primary_options()).expect("a primary encrypting its placed records");
    let mut expected = vec![0u8; c.size() as usize];
    for i in 0..40u64 {
        let at = (i * 20_011) % (c.size() - 70_000);
        let body: Vec<u8> = (0..(i * 1543 % 65_000 + 1)).map(|k| (k * 31 + i) as u8).collect();
        p.write(at, &body).expect("write");
        p.msync(at, body.len() as u64).expect("sync with encrypted records");
        expected[at as usize..][..body.len()].copy_from_slice(&body);
    }
    let mut admin = operator(&c, &c.mirror_addr());
    let st = admin.status().expect("status");
    assert!(st.last_violation.is_none(), "{st:?}");
    assert!(st.last_received_seq >= 40, "{st:?}");
    assert_eq!(st.applied_seq, 0, "nothing applied before the kill: recovery applies it all");
    drop((admin, p));
    c.kill_mirror();
    start_mirror(&mut c, listen);
    let mut admin = operator(&c, &c.mirror_addr());
    let st = common::wait_applied(&mut admin);
    assert!(st.applied_seq >= 40, "recovered every group: {st:?}");
    common::assert_same_image(test, &expected, &mirror_image(&mut admin, c.size()));
}

#[test]
fn records_placed_encrypted_on_shared_memory_replicate_and_recover_after_kill_9() {
    replicates_and_recovers("placed_enc_shm", SHM);
}

#[test]
fn records_placed_encrypted_with_ucx_puts_replicate_and_recover_after_kill_9() {
    replicates_and_recovers("placed_enc_ucx", UCX);
}

/// A backup fed by a mirror that received encrypted records gets them as plaintext frames
/// (over its own TLS link) and holds the primary's bytes.
#[test]
fn a_backup_of_a_mirror_of_encrypted_records_holds_the_plaintext() {
    let mut c = placed::cluster("placed_enc_backup", true, |_| {});
    let backup = c.start_backup("backup");
    c.feed(&[&backup], |_| {});
    start_mirror(&mut c, SHM);
    let p = mojim::Primary::open(&c.primary_options()).expect("a primary encrypting its placed records");
    let mut expected = vec![0u8; c.size() as usize];
    for i in 0..20u64 {
        let at = (i * 40_009) % (c.size() - 10_000);
        let body: Vec<u8> = (0..(i * 397 % 9000 + 1)).map(|k| (k * 7 + i) as u8).collect();
        p.write(at, &body).expect("write");
        p.msync(at, body.len() as u64).expect("sync");
        expected[at as usize..][..body.len()].copy_from_slice(&body);
    }
    let last = p.status().acked_seq.into_iter().max().expect("a lane");
    let mut m = operator(&c, &c.mirror_addr());
    let fed = |s: &mojim_node::MirrorStatus| {
        s.applied_seq >= last && s.backups.iter().all(|b| b.connected && b.acked_seq >= last)
    };
    let st = wait_status(&mut m, "the backup acknowledged every group", fed);
    assert!(st.last_violation.is_none(), "{st:?}");
    let mut b = operator(&c, backup.addr());
    let st = common::wait_applied(&mut b);
    assert!(st.last_violation.is_none() && st.applied_seq >= last, "{st:?}");
    common::assert_same_image("placed_enc_backup", &expected, &mirror_image(&mut b, c.size()));
}

/// A recognisable plaintext: a line of text, repeated.
fn pattern() -> Vec<u8> {
    b"CONFIDENTIAL placed body, never in the clear on the way. ".iter().copied().cycle().take(4096).collect()
}

/// Whether `haystack` holds any 16-byte run of `needle`.
fn holds_any_of(haystack: &[u8], needle: &[u8]) -> bool {
    needle.windows(16).step_by(16).any(|w| haystack.windows(16).any(|h| h == w))
}

/// How a hostile primary spoils its encrypted record.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Spoil {
    /// Nothing: the record is decrypted, acknowledged and applied.
    None,
    /// A byte of the ciphertext changed after it was placed, before the doorbell.
    Ciphertext,
    /// The body placed in the clear with a tag of its own (`MAC` alone), on a lane that agreed to
    /// encrypt.
    NotEncrypted,
}

/// Places one 4096-byte encrypted record spoiled as `spoil` says, checks the bytes in the
/// mirror's log before the doorbell, and rings it. Returns the violation the mirror reports,
/// after checking that nothing was acknowledged or applied; for `Spoil::None`, checks that it
/// was, and that the log then holds the plaintext under a header without `ENCRYPTED`, and
/// returns "".
fn place(test: &str, listen: &str, spoil: Spoil) -> String {
    let mut p = Placing::new(start(test, listen, true, |_| {}), 0x0009_1ace_7200, true);
    let body = pattern();
    let header = if spoil == Spoil::NotEncrypted {
        let checksum = p.lane.mem.write(p.at, &body).expect("place the body");
        p.lane.mem.write(p.at + body.len(), &p.lane.mac.tag(p.seq, 0, &body)).expect("place its tag");
        mojim_core::encode::sealed(p.header(checksum))
    } else {
        // What the primary's placement does (`PeerMemory::write_sealed` with a key that
        // encrypts): the checksum returned is the plaintext's.
        p.seal(&body)
    };
    p.lane.mem.flush().expect("the bytes are in the mirror's log");
    let file_at = LOG_HEADER_SIZE + p.at;
    let in_flight = std::fs::read(log_file(&p.c)).expect("read the mirror's log")[file_at..][..4096].to_vec();
    if spoil != Spoil::NotEncrypted {
        assert!(!holds_any_of(&in_flight, &body), "{listen:?}: the placed bytes hold none of the plaintext");
    }
    if spoil == Spoil::Ciphertext {
        p.lane.mem.write(p.at + 100, &[!in_flight[100]]).expect("change the ciphertext");
    }
    let answer = p.ring(&header);
    let log = std::fs::read(log_file(&p.c)).expect("read the mirror's log");
    if spoil == Spoil::None {
        assert!(answer.is_ok(), "{listen:?}: an ack");
        assert_eq!(&log[file_at..][..4096], &body[..], "{listen:?}: decrypted in place");
        let hb: &[u8; 64] = log[file_at - 64..file_at].try_into().expect("64 bytes");
        let h = FrameHeader::decode(hb).expect("the record's header");
        assert!(h.has_mac() && !h.is_encrypted(), "{listen:?}: {h:?}");
        p.applied(answer, &body);
        return String::new();
    }
    let violation = p.refused(answer, &format!("{spoil:?}"));
    if spoil == Spoil::Ciphertext {
        assert!(
            !holds_any_of(&log[file_at..][..4096], &body),
            "{listen:?}: nothing was decrypted into the log"
        );
    }
    violation
}

#[test]
fn an_encrypted_record_is_not_the_plaintext_in_flight_and_is_applied_decrypted() {
    for (test, listen) in [("placed_enc_ok", SHM), ("placed_enc_ucx_ok", UCX)] {
        assert_eq!(place(test, listen, Spoil::None), "");
    }
}

#[test]
fn a_changed_ciphertext_is_refused_naming_the_mac_and_nothing_is_applied() {
    for (test, listen) in [("placed_enc_changed", SHM), ("placed_enc_ucx_changed", UCX)] {
        let why = place(test, listen, Spoil::Ciphertext);
        assert!(why.contains("record MAC of group"), "{listen:?}: {why}");
    }
}

#[test]
fn a_record_in_the_clear_on_a_lane_that_agreed_to_encrypt_is_refused() {
    let why = place("placed_enc_clear", SHM, Spoil::NotEncrypted);
    assert!(why.contains("record not encrypted on group") && why.contains("encrypt_placed"), "{why}");
}

/// Opens a primary of `c` with `encrypt_placed` as `encrypt`; the error, if it fails.
fn open_with(c: &mut Cluster, encrypt: bool) -> Result<mojim::Primary, String> {
    c.cfg.file.security.encrypt_placed = encrypt;
    let mut opts = c.primary_options();
    opts.connect_timeout = Duration::from_secs(5);
    mojim::Primary::open(&opts).map_err(|e| e.to_string())
}

#[test]
fn a_primary_and_a_mirror_set_otherwise_are_refused_at_the_handshake_naming_the_setting() {
    for (listen, test) in [(SHM, "placed_enc_mismatch_shm"), (UCX, "placed_enc_mismatch_ucx")] {
        for mirror in [false, true] {
            let mut c = start(&format!("{test}_{mirror}"), listen, mirror, |_| {});
            let e = open_with(&mut c, !mirror).err().expect("a lane set otherwise is refused");
            let said =
                format!("the primary has [security] encrypt_placed = {} and this node {mirror}", !mirror);
            assert!(e.contains(&said), "{listen:?}: {e}");
            // Set alike, the same mirror takes it.
            let p = open_with(&mut c, mirror).expect("a primary set as its mirror");
            p.write(OFFSET, b"agreed").expect("write");
            p.msync(OFFSET, 6).expect("sync");
        }
    }
    // Over TCP nothing is placed: the setting has no effect, and nothing is refused.
    let mut c = start("placed_enc_mismatch_tcp", TCP, false, |_| {});
    let p = open_with(&mut c, true).expect("over TCP encrypt_placed changes nothing");
    p.write(OFFSET, b"tcp").expect("write");
    p.msync(OFFSET, 3).expect("sync");
}

#[test]
fn encrypt_placed_without_tls_is_refused_at_start_naming_both_settings() {
    let c = Cluster::new("placed_enc_no_tls", 1 << 20, |f| f.security.encrypt_placed = true);
    let mut child = std::process::Command::new(common::exe())
        .args(["serve", "--config", c.cfg_path.to_str().expect("utf-8"), "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mojim serve");
    let t0 = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if t0.elapsed() > common::WAIT {
            let _ = child.kill();
            panic!("mojim serve with encrypt_placed and no TLS kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("read stderr");
    assert!(!status.success(), "{err}");
    assert!(err.contains("[security] encrypt_placed = true needs [security] tls = true"), "{err}");
    let opts = mojim::PrimaryOptions::from_config(&c.cfg, false).expect_err("refused").to_string();
    assert!(opts.contains("[security] encrypt_placed = true needs [security] tls = true"), "{opts}");
}

/// A record placed encrypted, decrypted into the mirror's log, checked and applied, then changed
/// there (the plaintext, its checksum made anew) by the primary, which keeps the log's memory key
/// over UCX, is never forwarded to a backup: the backup gets the mirror's data area instead.
/// Fails without the forwarder's check of its seal.
#[test]
fn a_decrypted_record_changed_after_the_mirrors_check_never_reaches_a_backup() {
    placed::changed_after_the_check_never_reaches_a_backup("placed_enc_fwd_changed", true);
}
