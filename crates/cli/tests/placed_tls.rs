//! Placed records over TLS, between real processes, over shared memory and over UCX: a primary
//! with `[security] tls = true` places its records in the mirror's log, each sealed with a tag
//! under a key both sides derive from the lane's TLS session, and the mirror checks the tag
//! where the record lies before it acknowledges it. The records replicate, and a mirror killed
//! with groups still in its logs recovers them. A hostile primary (the handshake driven by
//! hand, then records built from the documented format) that changes a body after sealing it,
//! forges a tag, or leaves the tag out is refused naming the record MAC: its lane ends and
//! nothing of the group is logged, applied or acknowledged.

mod common;

use common::placed::{self, operator, Placing, SHM, UCX};
use common::{mirror_image, Cluster};
use mojim_core::encode::sealed;
use mojim_format::checksum::crc32c;

/// A cluster with mutual TLS whose mirror listens on `listen` (shared memory: a socket in its
/// folder), after `edit`.
fn start(test: &str, listen: &str, edit: impl FnOnce(&mut mojim::config::ConfigFile)) -> Cluster {
    placed::start(test, listen, false, edit)
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
    let mut admin = operator(&c, &c.mirror_addr());
    let st = admin.status().expect("status");
    assert!(st.last_violation.is_none(), "{st:?}");
    assert!(st.last_received_seq >= 40, "{st:?}");
    drop((admin, p));
    c.kill_mirror();
    placed::start_mirror(&mut c, listen);
    let mut admin = operator(&c, &c.mirror_addr());
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
    let mut p = Placing::new(start(test, listen, |_| {}), 0x0009_1ace_7100, false);
    let body = vec![0x5au8; 4096];
    let header = match spoil {
        Spoil::None | Spoil::BodyAfterSealing => p.seal(&body),
        Spoil::Unsealed => {
            p.lane.mem.write(p.at, &body).expect("place the body");
            p.header(crc32c(&body))
        }
        Spoil::ForgedTag | Spoil::OtherKey => {
            p.lane.mem.write(p.at, &body).expect("place the body");
            let tag = match spoil {
                Spoil::ForgedTag => [0xa5; 16],
                _ => mojim_transport::RecordMac::new(&[1; 32]).tag(p.seq, 0, &body),
            };
            p.lane.mem.write(p.at + body.len(), &tag).expect("place the tag");
            sealed(p.header(crc32c(&body)))
        }
    };
    if let Spoil::BodyAfterSealing = spoil {
        p.lane.mem.write(p.at + 100, &[0xa5]).expect("change the body");
    }
    let answer = p.ring(&header);
    if let Spoil::None = spoil {
        p.applied(answer, &body);
        return String::new();
    }
    p.refused(answer, &format!("{spoil:?}"))
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

/// A record changed in the mirror's log after the mirror checked and applied it (over UCX the
/// primary keeps the log's memory key) is never forwarded to a backup: the backup gets the
/// mirror's data area instead. Fails without the forwarder's check of its seal.
#[test]
fn a_record_changed_after_the_mirrors_check_never_reaches_a_backup() {
    placed::changed_after_the_check_never_reaches_a_backup("placed_tls_fwd_changed", false);
}
