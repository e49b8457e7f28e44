//! Sequence numbers are checked across the whole session, not only per lane. A peer that holds
//! the secret, driven here by hand from the documented frame format, tries to
//!
//! - crash the mirror: lane 0 sends groups n, n+1 and n+2, then lane 1 sends group n+1 again;
//! - wedge it: a Skip, or a group of data, numbered 2⁶⁴−2, whose acknowledgement would persist
//!   an applied number that leaves no room for any later session.
//!
//! Each attempt ends that session with a violation that names the lane, the number and the
//! numbers expected; nothing of it is persisted, the mirror lives on, and a legitimate primary
//! opens its next session and syncs.

mod common;

use common::{assert_same_image, mirror_image, raw, wait_applied, wait_status, Cluster};
use mojim::{Primary, Range};
use mojim_core::encode::{data_header, FramePlan, SessionTag};
use mojim_format::handshake::{PeerRole, Welcome};
use mojim_format::{FrameHeader, FrameKind};
use mojim_transport::AnyConn;
use std::io::Write;

/// A session driven by hand: its lanes' connections and what the mirror said.
struct RawSession {
    id: u64,
    lanes: Vec<AnyConn>,
    welcome: Welcome,
}

use common::raw::read_frame;

impl RawSession {
    /// Joins every lane of session `id` with the cluster's secret, announcing `generation`.
    fn join(c: &Cluster, id: u64, lanes: u16, generation: u64) -> RawSession {
        let region = c.cfg.region_id().expect("region id");
        let mut conns = Vec::new();
        let mut first = None;
        for lane in 0..lanes {
            let mut hello = raw::hello(PeerRole::Primary, (region.uuid, region.size), id, lane, lanes);
            hello.generation = generation;
            let (s, welcome) = raw::handshake(&c.mirror_addr(), &hello, &c.secret().0);
            first.get_or_insert(welcome);
            conns.push(s);
        }
        RawSession { id, lanes: conns, welcome: first.expect("at least one lane") }
    }

    fn tag(&self, lane: u16) -> SessionTag {
        SessionTag { session: self.id, epoch: self.welcome.epoch, lane }
    }

    /// Sends group `seq` on `lane`: one frame writing `body` at `offset`.
    fn send_group(&mut self, lane: u16, seq: u64, offset: u64, body: &[u8]) {
        let plan = FramePlan { offset, len: body.len() as u32, frame_index: 0, end: true };
        let h = data_header(self.tag(lane), seq, plan, body);
        let s = &mut self.lanes[lane as usize];
        // The mirror may already have closed the lane: what it says is checked by the caller.
        let _ = s.write_all(&h).and_then(|_| s.write_all(body));
    }

    /// Sends a Skip on `lane` voiding `first ..= last`.
    fn send_skip(&mut self, lane: u16, first: u64, last: u64) {
        let mut h = FrameHeader::new(FrameKind::Skip);
        h.lane = lane;
        h.epoch = self.welcome.epoch;
        h.session = self.id;
        h.offset = first;
        h.seq = last;
        let _ = self.lanes[lane as usize].write_all(&h.to_bytes());
    }

    /// Reads `lane` until the mirror acknowledges `seq`; panics if it closes first.
    fn wait_ack(&mut self, lane: u16, seq: u64) {
        loop {
            let (h, _) = read_frame(&mut self.lanes[lane as usize])
                .unwrap_or_else(|e| panic!("lane {lane} ended before group {seq} was acknowledged: {e}"));
            if h.kind == FrameKind::Ack && h.seq >= seq {
                assert_eq!(h.seq, seq, "lane {lane} acknowledged a group it was not sent");
                return;
            }
        }
    }

    /// Reads `lane` until the mirror closes it, and returns every Ack it sent meanwhile.
    fn acks_until_closed(&mut self, lane: u16) -> Vec<u64> {
        let mut acks = Vec::new();
        while let Ok((h, _)) = read_frame(&mut self.lanes[lane as usize]) {
            if h.kind == FrameKind::Ack {
                acks.push(h.seq);
            }
        }
        acks
    }
}

/// A mirror of 1 MiB with a primary that opened, synced `b"before"` at offset 0, and closed;
/// returns the cluster and the generation the mirror took from it.
fn cluster_after_a_first_session(name: &str) -> (Cluster, u64) {
    let mut c = Cluster::new(name, 1 << 20, |f| f.primary.lanes = 2);
    c.start_mirror();
    {
        let p = Primary::open(&c.primary_options()).expect("the first primary opens");
        p.write(0, b"before").expect("write");
        p.msync(0, 6).expect("msync");
    }
    let mut admin = c.admin();
    let st = wait_status(&mut admin, "the first session to end", |st| st.session.is_none());
    let generation =
        u64::from_str_radix(st.generation.trim_start_matches("0x"), 16).expect("a hex generation");
    assert_ne!(generation, 0, "{st:?}");
    (c, generation)
}

/// The mirror is alive and whole after a hostile session: the session ended with a violation
/// that says `expect` (each piece), and a legitimate primary opens, syncs, and the mirror's
/// image equals the primary's.
fn a_legitimate_primary_still_syncs(c: &Cluster, violations_before: u64, expect: &[&str]) {
    let mut admin = c.admin();
    let st = wait_status(&mut admin, "the hostile session to end with a violation", |st| {
        st.session.is_none() && st.violations > violations_before
    });
    let why = st.last_violation.clone().unwrap_or_default();
    println!("violation: {why}");
    for piece in expect {
        assert!(why.contains(piece), "the violation does not say {piece:?}: {why}");
    }
    assert!(st.storage_failed.is_none(), "{st:?}");

    let p =
        Primary::open(&c.primary_options()).expect("a legitimate primary opens after the hostile session");
    p.write(4096, b"after the hostile session").expect("write");
    p.gmsync(&[Range::new(4096, 25), Range::new(p.size() - 1, 1)]).expect("gmsync");
    assert!(p.status().failed.is_none(), "{:?}", p.status());
    wait_applied(&mut admin);
    let mut mine = vec![0u8; p.size() as usize];
    p.read(0, &mut mine).expect("read");
    assert_same_image("mirror vs primary", &mine, &mirror_image(&mut admin, p.size()));
    assert!(c.mirror.as_ref().is_some_and(|m| pid_alive(m.pid())), "the mirror process is gone");
}

/// Whether process `pid` runs (exists and is not a zombie left by a crash).
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

#[test]
fn a_group_sent_again_on_another_lane_ends_the_session_and_the_mirror_lives_on() {
    let (c, generation) = cluster_after_a_first_session("seq-dup");
    let mut admin = c.admin();
    let before = admin.status().expect("status").violations;

    let mut h = RawSession::join(&c, 0x5e9_0000_0000_0001, 2, generation);
    let n = h.welcome.next_seq;
    // Lane 0: groups n, n+1, n+2, acknowledged and applied. They write zeros where the region
    // is zero, so the images still agree afterwards.
    for seq in n..n + 3 {
        h.send_group(0, seq, 65536 + (seq - n) * 64, &[0u8; 64]);
        h.wait_ack(0, seq);
    }
    wait_status(&mut admin, "groups n..=n+2 applied", |st| st.applied_seq >= n + 2);
    // Lane 1: group n+1 again.
    h.send_group(1, n + 1, 65536, &[0u8; 64]);
    let acks = h.acks_until_closed(1);
    assert!(acks.is_empty(), "the mirror acknowledged group {} twice: {acks:?}", n + 1);
    let st = admin.status().expect("the mirror answers after the duplicate");
    assert_eq!(st.applied_seq, n + 2, "{st:?}");

    a_legitimate_primary_still_syncs(
        &c,
        before,
        &["lane 1", &format!("group {}", n + 1), &format!("{}..=", n + 3)],
    );
}

#[test]
fn a_skip_or_a_group_at_the_end_of_the_number_space_is_refused_and_nothing_is_persisted() {
    let (mut c, generation) = cluster_after_a_first_session("seq-wedge");
    let wild = u64::MAX - 1;
    for (round, skip) in [(1u64, true), (2, false)] {
        let mut admin = c.admin();
        let st = wait_status(&mut admin, "the last primary's session to end", |st| st.session.is_none());
        let (before, applied) = (st.violations, st.applied_seq);

        let mut h = RawSession::join(&c, 0x5e9_0000_0000_0010 + round, 1, generation);
        let n = h.welcome.next_seq;
        assert_eq!(n, applied + 1, "round {round}");
        if skip {
            // Void every number from the next one to 2⁶⁴−2: the lane's own check allows it.
            h.send_skip(0, n, wild);
        } else {
            h.send_group(0, wild, 0, b"wedge");
        }
        let acks = h.acks_until_closed(0);
        assert!(acks.is_empty(), "round {round}: the mirror acknowledged {acks:?}");
        let what = if skip { format!("sequence numbers {n}..={wild}") } else { format!("group {wild}") };
        a_legitimate_primary_still_syncs(
            &c,
            before,
            &[
                "lane 0",
                &what,
                "outside the session's window",
                &format!("expected a number not yet received in {n}..="),
            ],
        );

        // Nothing of it was persisted: after a restart the mirror resumes where it was.
        let st = c.admin().status().expect("status");
        assert!(st.applied_seq < wild - 1 && st.applied_seq > applied, "round {round}: {st:?}");
        c.kill_mirror();
        c.start_mirror();
        let st = c.admin().status().expect("status after a restart");
        assert!(st.applied_seq < wild - 1, "round {round}: {st:?}");
        let p = Primary::open(&c.primary_options()).expect("a primary opens after the restart");
        p.write(8, b"x").expect("write");
        p.msync(8, 1).expect("msync after the restart");
    }
}
