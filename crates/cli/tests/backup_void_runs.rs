//! A mirror feeds its backup on one lane, so the backup's session window is that of one log
//! (2 × capacity / 128 numbers). The Skips the mirror forwards after one of its own sessions was
//! sealed across a gap can be longer than that: as long as the groups in flight on the mirror's
//! other lanes, which its own, wider window bounded. A backup that refused them would be sent the
//! same Skip on every reconnection, for ever. Driven here by hand from the documented frame
//! format, a peer that joins as a mirror (role Mirror) sends
//!
//! - a Skip one number longer than the backup's window, from the next number: acknowledged;
//! - a Skip of 2²⁸ numbers (the longest window there is), from the next number: acknowledged;
//! - a Skip of 2²⁸ + 1 numbers: refused, and the session ends with a violation that names it.

mod common;

use common::{raw, wait_status, Cluster};
use mojim_core::seq_window::{window_for_logs, MAX_WINDOW};
use mojim_format::handshake::{PeerRole, Welcome};
use mojim_format::{FrameHeader, FrameKind};
use mojim_transport::AnyConn;
use std::io::Write;

use common::raw::read_frame;

/// One lane of a session `id` that a mirror (role Mirror) opens to feed the node at `c`.
struct MirrorLink {
    id: u64,
    conn: AnyConn,
    welcome: Welcome,
}

impl MirrorLink {
    fn join(c: &Cluster, id: u64) -> MirrorLink {
        let region = c.cfg.region_id().expect("region id");
        let mut hello = raw::hello(PeerRole::Mirror, (region.uuid, region.size), id, 0, 1);
        hello.nonce = [9; 32];
        let (s, welcome) = raw::handshake(&c.mirror_addr(), &hello, &c.secret().0);
        MirrorLink { id, conn: s, welcome }
    }

    /// Sends a Skip voiding `first ..= last`.
    fn send_skip(&mut self, first: u64, last: u64) {
        let mut h = FrameHeader::new(FrameKind::Skip);
        h.epoch = self.welcome.epoch;
        h.session = self.id;
        h.offset = first;
        h.seq = last;
        // The node may already have closed the link: what it says is checked by the caller.
        let _ = self.conn.write_all(&h.to_bytes());
    }

    /// Reads until the node acknowledges `seq`; panics if it closes first.
    fn wait_ack(&mut self, seq: u64) {
        loop {
            let (h, _) = read_frame(&mut self.conn)
                .unwrap_or_else(|e| panic!("the link ended before {seq} was acknowledged: {e}"));
            if h.kind == FrameKind::Ack && h.seq >= seq {
                assert_eq!(h.seq, seq, "the node acknowledged a number it was not sent");
                return;
            }
        }
    }

    /// Reads until the node closes the link, and returns every Ack it sent meanwhile.
    fn acks_until_closed(&mut self) -> Vec<u64> {
        let mut acks = Vec::new();
        while let Ok((h, _)) = read_frame(&mut self.conn) {
            if h.kind == FrameKind::Ack {
                acks.push(h.seq);
            }
        }
        acks
    }
}

#[test]
fn a_mirror_may_void_a_run_longer_than_its_links_window_but_not_longer_than_any_window() {
    let mut c = Cluster::new("void-runs", 1 << 20, |f| f.mirror.log_capacity = "1MiB".into());
    c.start_mirror();
    let mut admin = c.admin();
    let before = admin.status().expect("status").violations;

    let mut link = MirrorLink::join(&c, 0x5e9_0000_0000_0100);
    let window = window_for_logs([link.welcome.log_capacity]);
    assert_eq!(window, 2 * (1 << 20) / 128, "{:?}", link.welcome);
    let n = link.welcome.next_seq;

    // One number longer than the link's window, from the next number.
    link.send_skip(n, n + window);
    link.wait_ack(n + window);
    // The longest run any window allows.
    let from = n + window + 1;
    link.send_skip(from, from + MAX_WINDOW - 1);
    link.wait_ack(from + MAX_WINDOW - 1);
    let applied = from + MAX_WINDOW - 1;
    wait_status(&mut admin, "the runs applied", |st| st.applied_seq == applied);

    // One number longer than that: no mirror's window allows it.
    let from = applied + 1;
    link.send_skip(from, from + MAX_WINDOW);
    let acks = link.acks_until_closed();
    assert!(acks.is_empty(), "the node acknowledged {acks:?}");
    let st = wait_status(&mut admin, "the session to end with a violation", |st| {
        st.session.is_none() && st.violations > before
    });
    let why = st.last_violation.clone().unwrap_or_default();
    for piece in [
        "lane 0".to_string(),
        format!("sequence numbers {from}..={}", from + MAX_WINDOW),
        "outside the session's window".to_string(),
        format!("{from}..={}", from + MAX_WINDOW - 1),
    ] {
        assert!(why.contains(&piece), "the violation does not say {piece:?}: {why}");
    }
    assert_eq!(st.applied_seq, applied, "{st:?}");
    assert!(st.storage_failed.is_none(), "{st:?}");
}
