//! Peers that do not belong: the wrong secret, another region size, another protocol version,
//! no secret at all, and random or truncated bytes. Each is refused with a message that says
//! why, and none of them disturbs the primary that does belong.

mod common;

use common::{assert_same_image, exe, mirror_image, seed, wait_applied, wait_status, Cluster, Rng};
use mojim::config::SECRET_ENV;
use mojim::{Error, Primary, Range, Secret};
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{decode_refuse, Hello, PeerRole, RefuseCode, HELLO_SIZE};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

fn hello_body(c: &Cluster, rng: &mut Rng) -> [u8; HELLO_SIZE] {
    let id = c.cfg.region_id().expect("region id");
    let mut nonce = [0u8; 32];
    rng.fill(&mut nonce);
    Hello {
        role: PeerRole::Primary,
        lane: 0,
        lanes: 1,
        region_uuid: id.uuid,
        region_size: id.size,
        epoch: 1,
        session: rng.next_u64() | 1,
        nonce,
        max_frame: 4096,
        generation: 0,
        place: false,
        encrypt_placed: false,
    }
    .encode()
}

/// A frame header of `kind` for `body`, with a valid checksum.
fn header_for(kind: FrameKind, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(kind);
    h.body_len = body.len() as u32;
    h.body_checksum = crc32c(body);
    h.to_bytes()
}

/// Recomputes the header checksum after a field was patched.
fn reseal(h: &mut [u8; FRAME_HEADER_SIZE]) {
    let crc = crc32c(&h[4..]);
    h[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Splits a byte stream from the mirror into (header, body) frames; stops at the first thing
/// that is not a whole, valid frame.
fn frames(mut b: &[u8]) -> Vec<(FrameHeader, Vec<u8>)> {
    let mut out = Vec::new();
    while b.len() >= FRAME_HEADER_SIZE {
        let hb: [u8; FRAME_HEADER_SIZE] = b[..FRAME_HEADER_SIZE].try_into().expect("64 bytes");
        let Ok(h) = FrameHeader::decode(&hb) else { break };
        let end = FRAME_HEADER_SIZE + h.body_len as usize;
        if b.len() < end {
            break;
        }
        out.push((h, b[FRAME_HEADER_SIZE..end].to_vec()));
        b = &b[end..];
    }
    out
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the mirror");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).expect("set timeout");
    s.set_write_timeout(Some(REPLY_TIMEOUT)).expect("set timeout");
    s
}

/// Everything the mirror sends until it closes (or the timeout; a reset ends it too).
fn read_reply(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn a_primary_with_another_secret_is_refused_and_told_why() {
    let mut c = Cluster::new("secret", 1 << 20, |_| {});
    c.start_mirror();
    let mut o = c.primary_options();
    o.secret = Secret(b"not the cluster secret".to_vec());
    let e = match Primary::open(&o) {
        Ok(_) => panic!("a primary with the wrong secret was accepted"),
        Err(e) => e,
    };
    let m = e.to_string();
    println!("refused: {m}");
    assert!(m.contains("secret"), "the error does not mention the secret: {m}");
    assert!(matches!(e, Error::Handshake { .. } | Error::Refused { code: RefuseCode::Secret, .. }), "{e:?}");
    // The right secret still works.
    let p = Primary::open(&c.primary_options()).expect("open with the right secret");
    p.write(0, b"x").expect("write");
    p.msync(0, 1).expect("msync");
}

#[test]
fn a_primary_with_another_region_size_is_refused_naming_both_sizes() {
    let mirror_size: u64 = 1 << 20;
    let primary_size: u64 = 3 << 19;
    let mut c = Cluster::new("size", mirror_size, |_| {});
    c.start_mirror();
    let mut o = c.primary_options();
    o.region_path = c.dir.path().join("bigger.mojim");
    let uuid = c.cfg.region_id().expect("region id").uuid;
    mojim::create_region(&o.region_path, mojim::RegionId { uuid, size: primary_size }).expect("create");
    let e = match Primary::open(&o) {
        Ok(_) => {
            panic!("a primary with a {primary_size}-byte region was accepted by a {mirror_size}-byte mirror")
        }
        Err(e) => e,
    };
    let m = e.to_string();
    println!("refused: {m}");
    assert!(matches!(e, Error::Refused { code: RefuseCode::Region, .. }), "{e:?}");
    assert!(
        m.contains(&primary_size.to_string()) && m.contains(&mirror_size.to_string()),
        "the error does not name both sizes ({primary_size} and {mirror_size}): {m}"
    );
}

#[test]
fn a_hello_of_another_protocol_version_is_refused_naming_it() {
    let mut c = Cluster::new("version", 1 << 20, |_| {});
    c.start_mirror();
    let mut rng = Rng::new(7);
    let body = hello_body(&c, &mut rng);
    let mut h = header_for(FrameKind::Hello, &body);
    h[10] = 99;
    reseal(&mut h);
    let mut s = connect(&c.mirror_addr());
    s.write_all(&h).expect("send the header");
    // The body may be refused unread; that is the mirror's choice.
    let _ = s.write_all(&body);
    let reply = read_reply(&mut s);
    let got = frames(&reply);
    let Some((rh, rb)) = got.first() else {
        panic!(
            "no whole frame in the mirror's reply ({} bytes: {:02x?})",
            reply.len(),
            &reply[..reply.len().min(80)]
        )
    };
    assert_eq!(rh.kind, FrameKind::Refuse, "expected a Refuse, got {rh:?}");
    let (code, message) = decode_refuse(rb).expect("a Refuse body");
    println!("refused: {message}");
    assert_eq!(code, RefuseCode::Version, "{message}");
    assert!(message.contains("version 99"), "the refusal does not name version 99: {message}");
    let mut admin = c.admin();
    wait_status(&mut admin, "the refusal to count as a violation", |st| st.violations >= 1);
}

#[test]
fn serve_without_a_secret_needs_insecure() {
    let mut c = Cluster::new("nosecret", 1 << 20, |f| f.security.secret = String::new());
    let cfg = c.cfg_path.to_str().expect("utf-8 path").to_string();
    let mut child = Command::new(exe())
        .args(["serve", "--config", &cfg, "--listen", "127.0.0.1:0"])
        .env_remove(SECRET_ENV)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mojim serve");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for mojim serve") {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mojim serve with no secret did not exit within 10 s: it runs unauthenticated");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child.stderr.take().expect("piped").read_to_string(&mut stderr).expect("read stderr");
    assert!(!status.success(), "mojim serve with no secret exited with {status}; stderr: {stderr}");
    assert!(stderr.contains("--insecure"), "stderr does not mention --insecure: {stderr}");

    // With --insecure it serves, and a primary without a secret syncs.
    c.start_mirror_with(&["--insecure"]);
    let mut o = mojim::PrimaryOptions::from_config(&c.cfg, true).expect("options");
    o.mirror = c.mirror_addr();
    let p = Primary::open(&o).expect("open without a secret against an insecure mirror");
    p.write(10, b"open").expect("write");
    p.msync(10, 4).expect("msync");
    p.close().expect("close");
}

/// One connection's worth of bytes that are not a valid session: kind `k` of 10.
fn garbage(c: &Cluster, rng: &mut Rng, k: u64) -> (String, Vec<u8>) {
    let body = hello_body(c, rng);
    let hello_header = header_for(FrameKind::Hello, &body);
    let mut v = Vec::new();
    let what = match k {
        0 => {
            let n = rng.range(1, 300) as usize;
            v = rng.bytes(n);
            "random bytes"
        }
        1 => {
            v.extend_from_slice(&hello_header[..rng.range(1, 63) as usize]);
            "a truncated Hello header"
        }
        2 => {
            v.extend_from_slice(&hello_header);
            v.extend_from_slice(&body);
            let n = rng.range(1, 200) as usize;
            v.extend_from_slice(&rng.bytes(n));
            "a valid Hello, then garbage for a Proof"
        }
        3 => {
            v.extend_from_slice(&hello_header);
            v.extend_from_slice(&body[..rng.range(0, 95) as usize]);
            "a Hello with a truncated body"
        }
        4 => {
            let mut h = hello_header;
            h[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
            reseal(&mut h);
            v.extend_from_slice(&h);
            v.extend_from_slice(&body);
            "a Hello header claiming a 4 GiB body"
        }
        5 => {
            let mut b = body;
            b[rng.range(0, 95) as usize] ^= 0x40;
            v.extend_from_slice(&hello_header);
            v.extend_from_slice(&b);
            "a Hello whose body fails its checksum"
        }
        6 => {
            let data = rng.bytes(100);
            v.extend_from_slice(&header_for(FrameKind::Data, &data));
            v.extend_from_slice(&data);
            "a Data frame before any handshake"
        }
        7 => "nothing at all",
        8 => {
            let proof = rng.bytes(32);
            v.extend_from_slice(&hello_header);
            v.extend_from_slice(&body);
            v.extend_from_slice(&header_for(FrameKind::Proof, &proof));
            v.extend_from_slice(&proof);
            "a Hello, then a well-formed Proof of the wrong secret"
        }
        _ => {
            let mut h = hello_header;
            let bit = rng.range(0, 511) as usize;
            h[bit / 8] ^= 1 << (bit % 8);
            v.extend_from_slice(&h);
            v.extend_from_slice(&body);
            "a Hello header with one bit flipped"
        }
    };
    (what.to_string(), v)
}

#[test]
fn random_and_truncated_bytes_change_nothing_and_the_primary_keeps_syncing() {
    const CONNS: u64 = 50;
    let seed = seed("random_and_truncated_bytes");
    let mut rng = Rng::new(seed);
    let mut c = Cluster::new("garbage", 1 << 20, |f| f.primary.lanes = 2);
    c.start_mirror();
    let p = Primary::open(&c.primary_options()).expect("open the primary");
    let size = p.size();
    let stop = AtomicBool::new(false);
    let syncs = AtomicU64::new(0);
    let addr = c.mirror_addr();

    std::thread::scope(|s| {
        let (p, stop, syncs) = (&p, &stop, &syncs);
        let mut srng = Rng::new(seed ^ 0x5eed);
        s.spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let len = srng.range(1, 8192);
                let off = srng.range(0, size - len);
                let data = srng.bytes(len as usize);
                p.write(off, &data).expect("write");
                if let Err(e) = p.msync(off, len) {
                    stop.store(true, Ordering::SeqCst);
                    panic!("seed {seed}: msync failed while garbage arrived: {e}");
                }
                syncs.fetch_add(1, Ordering::SeqCst);
            }
        });

        let before = syncs.load(Ordering::SeqCst);
        let mut conns = Vec::new();
        for i in 0..CONNS {
            let (what, bytes) = garbage(&c, &mut rng, i % 10);
            let mut s = connect(&addr);
            // The mirror may close early (and reset us): a failed send is its right.
            let _ = s.write_all(&bytes);
            conns.push((what, s));
            // Every few bad connections, wait for a sync to complete: syncs run while the
            // barrage arrives, whatever the machine's speed.
            if i % 8 == 7 {
                let (n, t0) = (syncs.load(Ordering::SeqCst), Instant::now());
                while syncs.load(Ordering::SeqCst) == n && !stop.load(Ordering::SeqCst) {
                    assert!(
                        t0.elapsed() < common::WAIT,
                        "seed {seed}: no sync completed after bad connection {i}"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        for (what, s) in &mut conns {
            let _ = s.shutdown(Shutdown::Write);
            let reply = read_reply(s);
            // Whatever the mirror answers is a handshake frame or a refusal, never a Welcome.
            for (h, b) in frames(&reply) {
                assert!(
                    matches!(h.kind, FrameKind::Challenge | FrameKind::Refuse),
                    "seed {seed}: {what}: the mirror answered with {h:?}"
                );
                if h.kind == FrameKind::Refuse && what.contains("wrong secret") {
                    let (code, m) = decode_refuse(&b).expect("a Refuse body");
                    assert_eq!(code, RefuseCode::Secret, "{m}");
                }
            }
        }
        let during = syncs.load(Ordering::SeqCst) - before;
        assert!(during > 0, "seed {seed}: no sync completed while the garbage arrived");
        // The primary synced on through the barrage and after it.
        let t0 = Instant::now();
        while syncs.load(Ordering::SeqCst) < before + 50 && !stop.load(Ordering::SeqCst) {
            assert!(t0.elapsed() < common::WAIT, "seed {seed}: the primary stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::SeqCst);
    });

    let mut admin = c.admin();
    let st =
        wait_status(&mut admin, "every bad connection to count as a violation", |st| st.violations >= CONNS);
    assert_eq!(st.sessions, 1, "seed {seed}: a bad connection started or replaced a session: {st:?}");
    // And the next sync still works, and the images agree.
    p.write(0, b"after").expect("write");
    p.gmsync(&[Range::new(0, 5), Range::new(size - 1, 1)]).expect("gmsync after the garbage");
    let st = wait_applied(&mut admin);
    assert!(p.status().failed.is_none(), "{:?}", p.status());
    let mut mine = vec![0u8; size as usize];
    p.read(0, &mut mine).expect("read");
    assert_same_image(&format!("seed {seed}: mirror vs primary"), &mine, &mirror_image(&mut admin, size));
    println!("{} syncs; status {st:?}", syncs.load(Ordering::SeqCst));
}
