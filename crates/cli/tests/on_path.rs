//! An attacker on the path (common/onpath.rs) between real processes: a primary or `mojim kv`
//! and its mirror, a mirror and its backup, an operator and a node.
//!
//! Every attack is written as `attack(tls)`, returning what happened. Without TLS nothing after
//! the handshake is authenticated (docs/SECURITY.md), and the `_without_tls` test asserts that
//! the attack works: if it stops working, the test fails and says which defence it met. With
//! mutual TLS on every link (`[security] tls = true`, certificates made by
//! `mojim_tools::certs`), the proxy cannot read or make frames; each attack has a counterpart on
//! TLS records, said in its doc comment, and the `_with_tls` test asserts that the session ends
//! (the honest side closes it and logs the TLS failure) and that nothing the attacker sent is
//! applied or acknowledged.

mod common;

use common::kv::{promote, start_kv_on_promoted, Resp};
use common::onpath::{Attack, OnPath, Report};
use common::{exe, Cluster, WAIT};
use mojim::Primary;
use mojim_kv::resp::Value;
use mojim_node::admin_client::AdminClient;
use mojim_tools::child::ChildNode;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What an attack did: whether it worked, whether (on TLS) every defence held, and what was
/// seen, for the failure message.
struct Outcome {
    worked: bool,
    defended: bool,
    seen: String,
}

/// What a process logs when a TLS connection fails, one of: a record that does not verify or
/// is out of place, after the handshake or in it; a connection whose first bytes are not a
/// ClientHello.
const TLS_FAILED: [&str; 2] = ["TLS with", "not a TLS ClientHello"];

/// A cluster whose every link runs over TCP on loopback, so that the proxy can sit on it; with
/// `tls`, over mutual TLS, with a CA and certificates for a node, an operator and an
/// application in `<folder>/tls`.
fn cluster(test: &str, size: u64, tls: bool) -> Cluster {
    // Its own folder: the two variants of a test may run at once.
    let name = if tls { format!("{test}-tls") } else { test.to_string() };
    let c = Cluster::new(&name, size, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        if tls {
            common::tls::configure(f);
        }
    });
    if tls {
        common::tls::make_certs(&c);
    }
    c
}

fn tls(c: &Cluster) -> bool {
    c.cfg.file.security.tls
}

/// Where the process named `name` of `c` writes its log.
fn log(c: &Cluster, name: &str) -> PathBuf {
    c.dir.path().join(format!("{name}.log"))
}

/// The lines of the log at `path` that tell of a failed TLS connection ([`TLS_FAILED`]).
fn tls_failures(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|l| TLS_FAILED.iter().any(|n| l.contains(n))).map(str::to_string).collect()
}

/// Waits until the log at `path` tells of a failed TLS connection ([`TLS_FAILED`]) after the
/// `skip` it told of before, at most [`WAIT`]: the line that does, or the whole log.
fn tls_failure(path: &Path, skip: usize) -> Result<String, String> {
    let t0 = Instant::now();
    loop {
        if let Some(l) = tls_failures(path).into_iter().nth(skip) {
            return Ok(l);
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if t0.elapsed() >= WAIT {
            return Err(format!("no line with one of {TLS_FAILED:?} in {}:\n{text}", path.display()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `mojim serve` of the cluster's configuration in folder `name`, on TCP, feeding `backups`;
/// its log in `name`.log.
fn serve(c: &Cluster, name: &str, backups: &[&str]) -> ChildNode {
    let dir = c.dir.path().join(name);
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let mut args = vec!["serve", "--config", cfg, "--listen", "127.0.0.1:0"];
    args.extend(["--dir", dir.to_str().expect("utf-8")]);
    for b in backups {
        args.extend(["--backup", b]);
    }
    ChildNode::spawn_logged(exe(), &args, &log(c, name)).expect("start a node")
}

/// `mojim kv` of the cluster's configuration replicating to `mirror`; its log in kv.log.
fn start_kv(c: &Cluster, mirror: &str) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8 path");
    let args = ["kv", "--config", cfg, "--listen", "127.0.0.1:0", "--mirror", mirror];
    ChildNode::spawn_logged(exe(), &args, &log(c, "kv")).expect("start mojim kv")
}

/// An operator's connection to `addr`: over TLS with the operator's certificate when the
/// cluster has TLS.
fn admin(c: &Cluster, addr: &str) -> AdminClient {
    if tls(c) {
        return common::tls::operator(c, addr);
    }
    AdminClient::connect(addr, &c.secret(), Duration::from_secs(5)).expect("an operator's connection")
}

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

/// Forged Ack: `mojim kv` sends a `SET` to its mirror through the proxy, which keeps the Data
/// from the mirror and acknowledges the group itself. The client is told OK (durable on the
/// mirror); then the primary's machine is lost (`kill -9`), the mirror is promoted, and the
/// acknowledged write is not there.
///
/// On TLS the proxy can neither read the group nor make an Ack: it keeps the first record
/// toward the mirror back and sends `mojim kv`, in its place, a copy of the mirror's latest
/// record (an earlier Ack or Heartbeat). `mojim kv` finds it out of place (it does not verify
/// under the record's sequence number), logs the TLS failure and ends the session; the `SET`
/// is answered OK only once the mirror has it.
fn forged_ack(tls: bool) -> Outcome {
    let c = cluster("onpath-forged-ack", 16 << 20, tls);
    let backup = serve(&c, "b", &[]);
    let mirror = serve(&c, "m", &[backup.addr()]);
    let path = OnPath::new(mirror.addr());
    let mut kv = start_kv(&c, path.addr());
    let mut client = Resp::connect(kv.addr());
    assert_eq!(client.cmd(&["SET", "before", "replicated"]), ok(), "a SET through an honest path");
    path.set(Attack::ForgeAcks);
    let reply = client.cmd(&["SET", "forged", "acknowledged"]);
    let report = path.report();
    let st = admin(&c, mirror.addr()).status().expect("the mirror's status");
    // The primary's machine is lost.
    kv.kill();
    drop(path);
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &[]);
    let mut after = Resp::connect(promoted.addr());
    assert_eq!(
        after.cmd(&["GET", "before"]),
        Value::bulk("replicated"),
        "the write acknowledged before the attack is on the promoted mirror"
    );
    let got = after.cmd(&["GET", "forged"]);
    let never_received = report.forged_seqs.first().is_some_and(|&s| st.last_received_seq < s);
    let failure = if tls { tls_failure(&log(&c, "kv"), 0) } else { Err("no TLS".into()) };
    let acknowledged_is_there = reply != ok() || got == Value::bulk("acknowledged");
    Outcome {
        worked: reply == ok() && report.forged_acks > 0 && never_received && got == Value::Null,
        defended: report.forged_acks > 0 && failure.is_ok() && acknowledged_is_there,
        seen: format!(
            "SET answered {reply:?}; the proxy forged {} Acks (groups {:?}); the mirror had received up to group {}; \
             the promoted mirror's GET answered {got:?}; mojim kv logged {failure:?}",
            report.forged_acks, report.forged_seqs, st.last_received_seq
        ),
    }
}

#[test]
fn forged_ack_with_tls() {
    let o = forged_ack(true);
    assert!(
        o.defended && !o.worked,
        "over TLS, a record replayed as the mirror's Ack must end the session, and a SET answered OK \
         must be on the promoted mirror. {}",
        o.seen
    );
}

#[test]
fn forged_ack_without_tls() {
    let o = forged_ack(false);
    assert!(
        o.worked,
        "the forged Ack no longer loses an acknowledged write: a defence is in place (authenticated \
         frames?); assert the defence here (and in docs/SECURITY.md). {}",
        o.seen
    );
}

/// Which link the proxy sits on.
#[derive(Clone, Copy, Debug)]
enum Link {
    PrimaryToMirror,
    MirrorToBackup,
}

/// Altered Data: the proxy changes bytes in a Data frame and recomputes both CRC32C checksums.
/// The receiver logs, acknowledges and applies the altered bytes: its copy then differs from
/// the primary's, with no violation counted.
///
/// On TLS the proxy flips a bit in the first record after the handshake toward the receiver
/// ([`Attack::FlipBit`]): the record fails its check, the receiver logs the TLS failure and ends
/// the connection before anything of the record is logged. Then either the sender sends again
/// on a new connection and the receiver holds what the primary wrote, or the sync point fails
/// (the primary's link: `msync` returns `MirrorLost`) and nothing of the group is acknowledged
/// or applied.
fn altered_data(link: Link, tls: bool) -> Outcome {
    let mut c = cluster(&format!("onpath-altered-{link:?}"), 4 << 20, tls);
    let backup = serve(&c, "b", &[]);
    let (path, mirror) = match link {
        Link::PrimaryToMirror => {
            let m = serve(&c, "m", &[backup.addr()]);
            (OnPath::new(m.addr()), m)
        }
        Link::MirrorToBackup => {
            let path = OnPath::new(backup.addr());
            let m = serve(&c, "m", &[path.addr()]);
            (path, m)
        }
    };
    let mirror_addr = mirror.addr().to_string();
    c.mirror = Some(mirror);
    let mut o = c.primary_options();
    if let Link::PrimaryToMirror = link {
        o.mirror = path.addr().to_string();
    }
    let p = Primary::open(&o).expect("open the primary");
    const OFF: u64 = 123_456;
    let (sent, altered) = (b"pay 100 EUR to alice".as_slice(), b"pay 100 EUR to mally".as_slice());
    path.set(match tls {
        true => Attack::FlipBit,
        false => Attack::Alter { from: b"alice".to_vec(), to: b"mally".to_vec() },
    });
    p.write(OFF, sent).expect("write");
    let synced = p.msync(OFF, sent.len() as u64);
    // The group is in the mirror's log once msync returns; the backup has it once it has
    // acknowledged to the mirror every group the mirror received.
    let mut m = admin(&c, &mirror_addr);
    let received = m.status().expect("the mirror's status").last_received_seq;
    common::wait_status(&mut m, "the backup to acknowledge every group", |st| {
        st.backups.iter().all(|b| b.acked_seq >= received && b.lag_groups == 0)
    });
    // The receiver on the attacked link: the mirror, or the backup it feeds.
    let (mut a, receiver) = match link {
        Link::PrimaryToMirror => (m, "m"),
        Link::MirrorToBackup => (admin(&c, backup.addr()), "b"),
    };
    let st = common::wait_applied(&mut a);
    let report = path.report();
    let held = a.read(OFF, sent.len() as u64).expect("read the receiver's copy");
    let mut own = vec![0u8; sent.len()];
    p.read(OFF, &mut own).expect("read the primary's copy");
    p.close().expect("close the primary");
    let failure = if tls { tls_failure(&log(&c, receiver), 0) } else { Err("no TLS".into()) };
    Outcome {
        worked: synced.is_ok() && report.altered > 0 && own == sent && held == altered && st.violations == 0,
        // Either the sender sent again and the receiver holds its bytes, or the sync point
        // failed (nothing acknowledged) and the receiver holds none of the altered ones.
        defended: report.flipped > 0
            && failure.is_ok()
            && if synced.is_ok() { held == sent } else { held != altered },
        seen: format!(
            "msync: {synced:?}; the proxy altered {} Data frames, flipped a bit in {} TLS records; the primary \
             holds {:?}, the {link:?} receiver holds {:?} ({} violations counted) and logged {failure:?}",
            report.altered,
            report.flipped,
            String::from_utf8_lossy(&own),
            String::from_utf8_lossy(&held),
            st.violations
        ),
    }
}

#[test]
fn altered_data_between_primary_and_mirror_with_tls() {
    let o = altered_data(Link::PrimaryToMirror, true);
    assert!(
        o.defended && !o.worked,
        "over TLS, an altered record must end the mirror's session and the mirror must hold what the \
         primary wrote. {}",
        o.seen
    );
}

#[test]
fn altered_data_between_mirror_and_backup_with_tls() {
    let o = altered_data(Link::MirrorToBackup, true);
    assert!(
        o.defended && !o.worked,
        "over TLS, an altered record must end the backup's session and the backup must hold what the \
         primary wrote. {}",
        o.seen
    );
}

#[test]
fn altered_data_between_primary_and_mirror_without_tls() {
    let o = altered_data(Link::PrimaryToMirror, false);
    assert!(
        o.worked,
        "altered Data with a recomputed checksum is no longer applied by the mirror: a defence is in \
         place; assert the defence here (and in docs/SECURITY.md). {}",
        o.seen
    );
}

#[test]
fn altered_data_between_mirror_and_backup_without_tls() {
    let o = altered_data(Link::MirrorToBackup, false);
    assert!(
        o.worked,
        "altered Data with a recomputed checksum is no longer applied by the backup: a defence is in \
         place; assert the defence here (and in docs/SECURITY.md). {}",
        o.seen
    );
}

/// Replayed group: the proxy keeps a group of one session (`balance=100`) and, in a later
/// session of a new primary, sends it in place of that primary's write (`balance=000`),
/// renumbered to the session, epoch and sequence number of the group it replaces. The mirror
/// acknowledges it as that group, the primary's `msync` returns, and the mirror holds the old
/// bytes.
///
/// On TLS a group cannot be cut out of a record, and a record from another connection does not
/// verify: the proxy sends every byte the first primary sent, connection by connection, on new
/// connections of its own to the mirror (another session's frames,
/// [`OnPath::replay_connection`]). The mirror ends each in the handshake and logs the TLS
/// failure; it receives no group and begins no session. Then a record of a second session is
/// sent twice on its own connection ([`Attack::ReplayRecord`]): the copy does not verify under
/// the next record number, and the mirror ends the session, logging the TLS failure, having
/// received the group once at most. A later primary's write is what the mirror holds.
fn replayed_group(tls: bool) -> Outcome {
    let mut c = cluster("onpath-replay", 4 << 20, tls);
    c.mirror = Some(serve(&c, "m", &[]));
    let path = OnPath::new(&c.mirror_addr());
    let mut o = c.primary_options();
    o.mirror = path.addr().to_string();
    const OFF: u64 = 8192;
    let old = b"balance=100".as_slice();
    let new = b"balance=000".as_slice();
    path.set(Attack::Record { needle: old.to_vec() });
    let first = Primary::open(&o).expect("open the first primary");
    first.write(OFF, old).expect("write");
    first.msync(OFF, old.len() as u64).expect("msync through an honest path");
    first.close().expect("close the first primary");
    let mut a = admin(&c, &c.mirror_addr());
    if tls {
        let before = common::wait_applied(&mut a);
        let connections = path.report().connections as usize;
        let replays: Vec<_> = (0..connections).map(|i| path.replay_connection(i, WAIT)).collect();
        let after = a.status().expect("the mirror's status");
        let held_then = a.read(OFF, old.len() as u64).expect("read the mirror's copy");
        let failure = tls_failure(&log(&c, "m"), 0);
        // A record of a second session sent twice on its own connection.
        let earlier = tls_failures(&log(&c, "m")).len();
        let second = Primary::open(&o).expect("open the second primary");
        path.set(Attack::ReplayRecord);
        second.write(OFF, new).expect("write");
        let twice = second.msync(OFF, new.len() as u64);
        let failure_twice = tls_failure(&log(&c, "m"), earlier);
        let st_twice = common::wait_applied(&mut a);
        let held_twice = a.read(OFF, new.len() as u64).expect("read the mirror's copy");
        let closed_twice = second.close();
        let replayed_records = path.report().replayed_records;
        // A later session's write is what the mirror holds.
        let newer = b"balance=050".as_slice();
        let third = Primary::open(&o).expect("open the third primary");
        third.write(OFF, newer).expect("write");
        let synced = third.msync(OFF, newer.len() as u64);
        common::wait_applied(&mut a);
        let held = a.read(OFF, newer.len() as u64).expect("read the mirror's copy");
        third.close().expect("close the third primary");
        return Outcome {
            worked: false,
            defended: connections > 0
                && replays.iter().all(|r| r.sent > 0 && r.closed)
                && after.last_received_seq == before.last_received_seq
                && after.groups_received == before.groups_received
                && after.sessions == before.sessions
                && held_then == old
                && failure.is_ok()
                && replayed_records == 1
                && failure_twice.is_ok()
                && st_twice.groups_received <= after.groups_received + 1
                && (twice.is_err() || held_twice == new)
                && synced.is_ok()
                && held == newer,
            seen: format!(
                "replayed {connections} connections: {replays:?}; the mirror had received up to group {} ({} groups, \
                 {} sessions) before, {} ({} groups, {} sessions) after, held {:?}, logged {failure:?}; a record sent \
                 twice ({replayed_records}): msync {twice:?}, the mirror then received {} groups, held {:?} and \
                 logged {failure_twice:?}, close: {closed_twice:?}; msync of a later session: {synced:?}, then the \
                 mirror held {:?}",
                before.last_received_seq,
                before.groups_received,
                before.sessions,
                after.last_received_seq,
                after.groups_received,
                after.sessions,
                String::from_utf8_lossy(&held_then),
                st_twice.groups_received,
                String::from_utf8_lossy(&held_twice),
                String::from_utf8_lossy(&held)
            ),
        };
    }
    let recorded = path.report().recorded_frames;
    path.set(Attack::Substitute { needle: new.to_vec() });
    let second = Primary::open(&o).expect("open the second primary");
    second.write(OFF, new).expect("write");
    let synced = second.msync(OFF, new.len() as u64);
    let st = common::wait_applied(&mut a);
    let held = a.read(OFF, new.len() as u64).expect("read the mirror's copy");
    let report: Report = path.report();
    second.close().expect("close the second primary");
    Outcome {
        worked: recorded > 0
            && synced.is_ok()
            && report.substituted == 1
            && held == old
            && st.violations == 0,
        defended: false,
        seen: format!(
            "recorded {recorded} frames; msync of the second session: {synced:?}; {} groups substituted; the \
             mirror holds {:?} ({} violations counted, {} sessions)",
            report.substituted,
            String::from_utf8_lossy(&held),
            st.violations,
            st.sessions
        ),
    }
}

#[test]
fn replayed_group_with_tls() {
    let o = replayed_group(true);
    assert!(
        o.defended,
        "over TLS, an earlier connection's bytes replayed on a new connection must be refused in the \
         handshake, with no group received and no session begun. {}",
        o.seen
    );
}

/// Spliced session, on TLS only (on plaintext the proxy rewrites frames instead, above): after
/// the handshake, the proxy sends a primary's records, from the first after `set` on, on a new
/// connection of its own to the mirror ([`Attack::Splice`]): a session's records without its
/// handshake. The mirror refuses that connection (not a ClientHello) and logs it; the primary,
/// answered on its TLS connection by bytes that do not verify, ends its session: its `msync`
/// returns `MirrorLost`. The mirror holds what it held, or the primary's write when its group
/// went on another lane, which the proxy left alone.
fn spliced_session() -> Outcome {
    let mut c = cluster("onpath-splice", 4 << 20, true);
    c.mirror = Some(serve(&c, "m", &[]));
    let path = OnPath::new(&c.mirror_addr());
    let mut o = c.primary_options();
    o.mirror = path.addr().to_string();
    const OFF: u64 = 4096;
    let p = Primary::open(&o).expect("open the primary");
    p.write(OFF, b"first").expect("write");
    p.msync(OFF, 5).expect("msync through an honest path");
    path.set(Attack::Splice);
    p.write(OFF, b"again").expect("write");
    let synced = p.msync(OFF, 5);
    let mut a = admin(&c, &c.mirror_addr());
    let st = common::wait_applied(&mut a);
    let held = a.read(OFF, 5).expect("read the mirror's copy");
    p.close().expect("close the primary");
    let report = path.report();
    let failure = tls_failure(&log(&c, "m"), 0);
    Outcome {
        worked: false,
        // The write reached the mirror on a connection of the primary's own, or the sync point
        // failed: the mirror then holds what it held, or the primary's write if the group went
        // on a lane the proxy left alone; never anything else.
        defended: report.spliced_sessions == 1
            && failure.is_ok()
            && if synced.is_ok() { held == b"again" } else { held == b"first" || held == b"again" },
        seen: format!(
            "{} connections of the proxy's own; msync: {synced:?}; the mirror holds {:?} ({} violations counted) \
             and logged {failure:?}",
            report.spliced_sessions,
            String::from_utf8_lossy(&held),
            st.violations
        ),
    }
}

#[test]
fn spliced_session_with_tls() {
    let o = spliced_session();
    assert!(
        o.defended,
        "over TLS, a session's records sent on another connection must be refused by the mirror, and \
         the primary's write must reach it on a connection of its own. {}",
        o.seen
    );
}

#[test]
fn replayed_group_without_tls() {
    let o = replayed_group(false);
    assert!(
        o.worked,
        "a group replayed into a later session is no longer taken by the mirror: a defence is in \
         place; assert the defence here (and in docs/SECURITY.md). {}",
        o.seen
    );
}

/// Operator hijack: an operator logs in to a mirror through the proxy (proving the secret) and
/// asks its status; the proxy then cuts the operator off, keeps the node's side of the
/// connection, and sends `promote`, then `demote`, of its own. The node obeys both.
///
/// On TLS the proxy can take over the node's side of the connection but not speak TLS on it:
/// its request goes as a plaintext frame inside the TLS stream. The node logs the TLS failure,
/// ends the connection and runs nothing: it is still a mirror at the same epoch.
fn operator_hijack(tls: bool) -> Outcome {
    let c = cluster("onpath-hijack", 1 << 20, tls);
    let node = serve(&c, "m", &[]);
    let path = OnPath::new(node.addr());
    let mut operator = admin(&c, path.addr());
    let before = operator.status().expect("the operator's status request");
    let Some(mut taken) = path.splice(WAIT) else {
        return Outcome {
            worked: false,
            defended: false,
            seen: "no logged-in operator connection to take over".into(),
        };
    };
    let epoch = before.epoch;
    let promoted = taken.command(&format!(r#"{{"op":"promote","epoch":{},"drain_ms":0}}"#, epoch + 1), WAIT);
    let mut own = admin(&c, node.addr());
    let after_promote = own.status().expect("the node's status");
    let demoted = taken.command(&format!(r#"{{"op":"demote","epoch":{}}}"#, epoch + 2), WAIT);
    let after_demote = own.status().expect("the node's status");
    let operator_cut_off = operator.status().is_err();
    let failure = if tls { tls_failure(&log(&c, "m"), 0) } else { Err("no TLS".into()) };
    Outcome {
        defended: promoted.is_err()
            && demoted.is_err()
            && (after_promote.role.as_str(), after_promote.epoch) == (before.role.as_str(), epoch)
            && (after_demote.role.as_str(), after_demote.epoch) == (before.role.as_str(), epoch)
            && failure.is_ok(),
        worked: promoted.is_ok()
            && after_promote.role == "primary"
            && after_promote.epoch == epoch + 1
            && demoted.is_ok()
            && after_demote.role == "mirror"
            && after_demote.epoch == epoch + 2
            && !after_demote.consistent,
        seen: format!(
            "before: {} at epoch {epoch}; promote answered {promoted:?}, then the node was {} at epoch {}; demote \
             answered {demoted:?}, then {} at epoch {} (consistent: {}); the operator was cut off: \
             {operator_cut_off}; the node logged {failure:?}",
            before.role,
            after_promote.role,
            after_promote.epoch,
            after_demote.role,
            after_demote.epoch,
            after_demote.consistent
        ),
    }
}

#[test]
fn operator_hijack_with_tls() {
    let o = operator_hijack(true);
    assert!(
        o.defended && !o.worked,
        "over TLS, a request sent on a taken-over operator connection must end it and change nothing. {}",
        o.seen
    );
}

#[test]
fn operator_hijack_without_tls() {
    let o = operator_hijack(false);
    assert!(
        o.worked,
        "a hijacked operator connection can no longer promote and demote the node: a defence is in \
         place; assert the defence here (and in docs/SECURITY.md). {}",
        o.seen
    );
}

/// An application's credentials used as an operator's: the application's host holds the
/// cluster secret (its configuration gives it to the primary), and with it, from a connection of
/// its own (no proxy needed), it promotes the mirror. The role in a Hello is the peer's own
/// claim.
///
/// On TLS roles follow certificates: the application's (role application, `[primary]
/// cert_file`) reads status but is refused operator commands, the refusal naming its role; the
/// node is still a mirror at its epoch.
fn application_promotes(tls: bool) -> Outcome {
    let mut c = cluster("onpath-app-promotes", 1 << 20, tls);
    c.mirror = Some(serve(&c, "m", &[]));
    let before = admin(&c, &c.mirror_addr()).status().expect("the mirror's status");
    // What the application holds: the options its primary is opened with.
    let app = c.primary_options();
    assert_eq!(app.tls.is_some(), tls, "the application's options carry its certificate when TLS is on");
    let promoted =
        AdminClient::connect_tls(&app.mirror, &app.secret, app.tls.clone(), Duration::from_secs(5)).and_then(
            |mut a| a.command(&format!(r#"{{"op":"promote","epoch":{},"drain_ms":0}}"#, before.epoch + 1)),
        );
    let st = admin(&c, &c.mirror_addr()).status().expect("the mirror's status");
    let refusal = promoted.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
    Outcome {
        worked: promoted.is_ok() && st.role == "primary" && st.epoch == before.epoch + 1,
        defended: refusal.contains("(role application) may not run operator commands")
            && (st.role.as_str(), st.epoch) == (before.role.as_str(), before.epoch),
        seen: format!(
            "the node was {} at epoch {}; promote answered {promoted:?}; the node is then {} at epoch {}",
            before.role, before.epoch, st.role, st.epoch
        ),
    }
}

#[test]
fn application_credentials_promote_with_tls() {
    let o = application_promotes(true);
    assert!(
        o.defended && !o.worked,
        "over TLS, an application's certificate must be refused operator commands, naming its role. {}",
        o.seen
    );
}

#[test]
fn application_credentials_promote_without_tls() {
    let o = application_promotes(false);
    assert!(
        o.worked,
        "the application's credentials no longer promote a node: roles are in place; assert the defence here (and in \
         docs/SECURITY.md). {}",
        o.seen
    );
}
