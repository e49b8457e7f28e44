//! A mirror that holds the secret but does not follow the protocol must not crash the primary:
//! what it sends back (acknowledgements, requests to resend Copy frames) is checked where it
//! arrives, and a wild value fails the session with a message that names it.
//!
//! The hostile mirror is a real mirror behind a small relay that parses the frames (as
//! docs/FORMAT.md lays them out) and adds its own after the handshake.

mod common;

use common::{Cluster, WAIT};
use mojim::Primary;
use mojim_format::handshake::Hello;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::time::{Duration, Instant};

fn read_frame(s: &mut TcpStream) -> std::io::Result<(FrameHeader, [u8; FRAME_HEADER_SIZE], Vec<u8>)> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    s.read_exact(&mut hb)?;
    let h = FrameHeader::decode(&hb).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut body = vec![0u8; h.body_len as usize];
    s.read_exact(&mut body)?;
    Ok((h, hb, body))
}

/// Relays every connection to `mirror`; on each lane, right after the handshake, adds
/// the frames `extra(lane, session)` gives. Returns the relay's address.
fn hostile_relay(mirror: String, extra: fn(u16, u64) -> Vec<FrameHeader>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    let addr = listener.local_addr().expect("relay address").to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut primary) = conn else { return };
            let mirror = mirror.clone();
            std::thread::spawn(move || {
                let Ok(mut up) = TcpStream::connect(&mirror) else { return };
                // The primary's first frame is its Hello: the lane and session.
                let Ok((h, hb, body)) = read_frame(&mut primary) else { return };
                let Ok(hello) = Hello::decode(&body) else { return };
                assert_eq!(h.kind, FrameKind::Hello);
                if up.write_all(&hb).and_then(|_| up.write_all(&body)).is_err() {
                    return;
                }
                let (mut p_rx, mut m_tx) =
                    (primary.try_clone().expect("clone"), up.try_clone().expect("clone"));
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut p_rx, &mut m_tx);
                    let _ = m_tx.shutdown(Shutdown::Write);
                });
                while let Ok((h, hb, body)) = read_frame(&mut up) {
                    if primary.write_all(&hb).and_then(|_| primary.write_all(&body)).is_err() {
                        return;
                    }
                    // A lane that asked to place its records reads the Log frame after the
                    // Welcome: the hostile frames come after the handshake's end.
                    let last = if hello.place { FrameKind::Log } else { FrameKind::Welcome };
                    if h.kind == last {
                        for x in extra(hello.lane, hello.session) {
                            let _ = primary.write_all(&x.to_bytes());
                        }
                    }
                }
                let _ = primary.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

#[test]
fn a_mirror_asking_to_resend_bytes_outside_the_region_fails_the_session_naming_them() {
    let size: u64 = 1 << 20;
    let mut c = Cluster::new("wild-retry", size, |f| f.primary.lanes = 1);
    c.start_mirror();
    {
        // The region gets a history; then the mirror starts over empty, so the next session
        // copies the whole region, and reads what the mirror asks to resend.
        let p = Primary::open(&c.primary_options()).expect("open the primary");
        p.write(0, b"history").expect("write");
        p.msync(0, 7).expect("msync");
    }
    c.kill_mirror();
    std::fs::remove_dir_all(c.cfg.resolve(&c.cfg.file.mirror.dir)).expect("wipe the mirror");
    c.start_mirror();

    // Two requests whose ends lie past the end of the number space.
    let relay = hostile_relay(c.mirror_addr(), |lane, session| {
        [(u64::MAX - 10, 100), (u64::MAX - 5, 1)]
            .map(|(offset, len)| {
                let mut h = FrameHeader::new(FrameKind::CopyRetry);
                h.lane = lane;
                h.session = session;
                h.offset = offset;
                h.seq = len;
                h
            })
            .to_vec()
    });
    let mut o = c.primary_options();
    o.mirror = relay;
    let p = Primary::open(&o).expect("the primary opens");
    let t0 = Instant::now();
    let failed = loop {
        let st = p.status();
        if let Some(f) = st.failed.clone().or_else(|| st.reconnect_error.clone()) {
            break f;
        }
        assert!(t0.elapsed() < WAIT, "the primary did not notice the wild requests: {st:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("failed: {failed}");
    let wild = (u64::MAX - 10).to_string();
    assert!(failed.contains(&wild) && failed.contains("outside the region"), "{failed}");
}

#[test]
fn a_mirror_acknowledging_a_group_never_sent_fails_the_session_naming_it() {
    let mut c = Cluster::new("wild-ack", 1 << 20, |f| f.primary.lanes = 2);
    c.start_mirror();
    // Lane 1 acknowledges group 2⁶⁴−2 before anything was sent.
    let relay = hostile_relay(c.mirror_addr(), |lane, session| {
        if lane != 1 {
            return Vec::new();
        }
        let mut h = FrameHeader::new(FrameKind::Ack);
        h.lane = lane;
        h.session = session;
        h.seq = u64::MAX - 1;
        vec![h]
    });
    let mut o = c.primary_options();
    o.mirror = relay;
    let p = Primary::open(&o).expect("the primary opens");
    let t0 = Instant::now();
    // Lane 1 reads the wild acknowledgement when it next waits for one.
    let failed = loop {
        p.write(0, b"x").expect("write");
        if let Err(e) = p.msync(0, 1) {
            break e.to_string();
        }
        if let Some(f) = p.status().failed {
            break f;
        }
        assert!(t0.elapsed() < WAIT, "the primary took the wild acknowledgement: {:?}", p.status());
    };
    println!("failed: {failed}");
    assert!(failed.contains(&(u64::MAX - 1).to_string()) && failed.contains("lane 1"), "{failed}");
    let acked = p.status().acked_seq;
    assert!(acked.iter().all(|&a| a < u64::MAX - 1), "the wild acknowledgement counted: {acked:?}");
}

/// A mirror is its backups' primary: a backup that acknowledges a group it was never sent ends
/// its link (the acknowledgement would let the mirror free log space the backup does not hold).
#[test]
fn a_backup_acknowledging_a_group_never_sent_ends_its_link_naming_it() {
    let mut c = Cluster::new("wild-backup-ack", 1 << 20, |f| f.primary.lanes = 1);
    let backup = c.start_backup("backup");
    let relay = hostile_relay(backup.addr().to_string(), |lane, session| {
        let mut h = FrameHeader::new(FrameKind::Ack);
        h.lane = lane;
        h.session = session;
        h.seq = u64::MAX - 1;
        vec![h]
    });
    c.feed(&[], |f| f.mirror.backups = vec![relay]);
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    p.write(0, b"fed").expect("write");
    p.msync(0, 3).expect("msync");
    let mut admin = c.admin();
    let t0 = Instant::now();
    let error = loop {
        let st = admin.status().expect("status");
        let link = st.backups.first().cloned().expect("a backup link");
        assert!(link.acked_seq < u64::MAX - 1, "the wild acknowledgement counted: {link:?}");
        if let Some(e) = link.error.filter(|e| e.contains("acknowledged")) {
            break e;
        }
        assert!(t0.elapsed() < WAIT, "the link took the wild acknowledgement: {st:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    println!("link error: {error}");
    assert!(error.contains(&(u64::MAX - 1).to_string()), "{error}");
}
