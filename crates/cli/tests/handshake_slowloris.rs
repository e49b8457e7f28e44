//! Slow peers that never finish their handshake: more of them than the mirror holds in
//! handshake, from the operator's own address (loopback) and from several others, each
//! trickling a byte of a Hello every second. While they keep at it, `mojim status`, an admin
//! connection and a primary's session still get in; the crowd past the limits is displaced; and
//! a slow connection that nobody displaces is cut once its whole handshake has taken the
//! deadline (5 s), however its bytes trickle in.

mod common;

use common::{exe, Cluster, WAIT};
use mojim::Primary;
use mojim_format::checksum::crc32c;
use mojim_format::handshake::{Hello, PeerRole};
use mojim_format::{FrameHeader, FrameKind};
use mojim_node::admin_client::AdminClient;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The mirror's whole-handshake deadline (`mojim-node`'s `accept.rs`).
const DEADLINE: Duration = Duration::from_secs(5);
/// What a slow connection may live past the deadline: the mirror's and this test's reaction
/// time, on a loaded machine.
const SLACK: Duration = Duration::from_secs(5);
const QUIET: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Slow peers per source address: more than the per-address limit (16) on loopback, and more
/// than the global limit (64) in all. The few from `QUIET` are never the most from one address,
/// so nobody displaces them: only the deadline cuts them.
const SOURCES: [(Ipv4Addr, usize); 7] = [
    (Ipv4Addr::new(127, 0, 0, 1), 24),
    (QUIET, 4),
    (Ipv4Addr::new(127, 0, 0, 3), 10),
    (Ipv4Addr::new(127, 0, 0, 4), 10),
    (Ipv4Addr::new(127, 0, 0, 5), 10),
    (Ipv4Addr::new(127, 0, 0, 6), 10),
    (Ipv4Addr::new(127, 0, 0, 7), 10),
];

/// A TCP connection to `to` from the address `from`.
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    bind(&fd, &SocketAddrV4::new(from, 0))?;
    connect(&fd, &to)?;
    Ok(TcpStream::from(fd))
}

/// A valid Hello frame: what a slow peer trickles, one byte at a time.
fn hello_frame(c: &Cluster) -> Vec<u8> {
    let id = c.cfg.region_id().expect("region id");
    let body = Hello {
        role: PeerRole::Admin,
        lane: 0,
        lanes: 1,
        region_uuid: id.uuid,
        region_size: id.size,
        epoch: 1,
        session: 1,
        nonce: [7; 32],
        max_frame: 4096,
        generation: 0,
        place: false,
        encrypt_placed: false,
    }
    .encode();
    let mut h = FrameHeader::new(FrameKind::Hello);
    h.body_len = body.len() as u32;
    h.body_checksum = crc32c(&body);
    let mut v = h.to_bytes().to_vec();
    v.extend_from_slice(&body);
    v
}

/// What the slow peers saw.
#[derive(Default)]
struct Seen {
    /// Connections made and given their first byte.
    started: AtomicUsize,
    /// Where each connection the mirror cut came from, and how long it had lived, from
    /// connecting to being cut.
    lifetimes: Mutex<Vec<(Ipv4Addr, Duration)>>,
    /// Peers whose connection the mirror has cut at least once.
    cut_once: AtomicUsize,
}

/// One slow peer: connects from `from`, sends a byte of `hello` every second, notices when the
/// mirror cuts it, and connects again, until `stop`.
fn slow_peer(from: Ipv4Addr, to: SocketAddr, hello: &[u8], seen: &Seen, stop: &AtomicBool) {
    let mut first = true;
    let mut counted_cut = false;
    while !stop.load(Ordering::SeqCst) {
        let Ok(mut s) = connect_from(from, to) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let t0 = Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
        let mut sent = 0;
        let mut last = None::<Instant>;
        let cut = loop {
            if stop.load(Ordering::SeqCst) {
                break false;
            }
            if last.is_none_or(|l| l.elapsed() >= Duration::from_secs(1)) && sent < hello.len() {
                if s.write_all(&hello[sent..sent + 1]).is_err() {
                    break true;
                }
                sent += 1;
                last = Some(Instant::now());
                if first {
                    first = false;
                    seen.started.fetch_add(1, Ordering::SeqCst);
                }
            }
            let mut b = [0u8; 256];
            match s.read(&mut b) {
                Ok(0) => break true,
                // Nothing is sent to a peer that has not finished its Hello; a cut ends it.
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break true,
            }
        };
        if cut {
            seen.lifetimes.lock().expect("lifetimes").push((from, t0.elapsed()));
            if !counted_cut {
                counted_cut = true;
                seen.cut_once.fetch_add(1, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Waits for `done`, at most `WAIT`.
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < WAIT, "waited {WAIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn slow_handshakes_neither_lock_out_the_operator_nor_a_primary_and_are_cut_at_the_deadline() {
    let mut c = Cluster::new("slowloris", 1 << 20, |f| f.primary.lanes = 2);
    c.start_mirror();
    let to: SocketAddr = c.mirror_addr().parse().expect("the mirror's address");
    let hello = hello_frame(&c);
    let peers: usize = SOURCES.iter().map(|(_, n)| n).sum();
    let seen = Seen::default();
    let stop = AtomicBool::new(false);

    std::thread::scope(|scope| {
        for &(from, n) in &SOURCES {
            for _ in 0..n {
                let (hello, seen, stop) = (&hello, &seen, &stop);
                scope.spawn(move || slow_peer(from, to, hello, seen, stop));
            }
        }
        // Ends the slow peers however the checks below end.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop = Stop(&stop);
        wait_for("every slow peer to connect", || seen.started.load(Ordering::SeqCst) == peers);

        // The operator, from loopback like most of the slow peers: `mojim status` ...
        let cfg = c.cfg_path.to_str().expect("utf-8 path");
        let out = Command::new(exe())
            .args(["status", "--json", "--config", cfg, "--addr", &c.mirror_addr()])
            .output()
            .expect("run mojim status");
        assert!(
            out.status.success(),
            "mojim status failed while slow peers were connected: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("\"epoch\""), "no status printed");
        // ... an admin connection ...
        let mut admin = AdminClient::connect(&c.mirror_addr(), &c.secret(), Duration::from_secs(5))
            .expect("an admin connection while slow peers are connected");
        admin.status().expect("status over the admin connection");
        // ... and a primary's session (two lanes, two handshakes), which syncs.
        let p =
            Primary::open(&c.primary_options()).expect("a primary's session while slow peers are connected");
        p.write(0, b"through").expect("write");
        p.msync(0, 7).expect("msync");

        // Every slow peer is cut, and none lived much past the deadline.
        wait_for("the mirror to cut every slow peer at least once", || {
            seen.cut_once.load(Ordering::SeqCst) == peers
        });
        stop.store(true, Ordering::SeqCst);
        let lifetimes = seen.lifetimes.lock().expect("lifetimes");
        let longest = lifetimes.iter().map(|(_, d)| *d).max().unwrap_or_default();
        assert!(
            longest <= DEADLINE + SLACK,
            "a slow connection lived {longest:?}, past the handshake deadline {DEADLINE:?} (+{SLACK:?})"
        );
        let quiet: Vec<Duration> = lifetimes.iter().filter(|(f, _)| *f == QUIET).map(|(_, d)| *d).collect();
        println!(
            "{} slow connections cut, the longest after {longest:?}; those from {QUIET}: {quiet:?}",
            lifetimes.len()
        );
        // Nobody displaces the peers from QUIET: each was cut by the deadline, which runs from
        // the mirror's accept, after this side's connect returned, so none lived less.
        let quiet_peers = SOURCES.iter().filter(|(a, _)| *a == QUIET).map(|(_, n)| n).sum::<usize>();
        assert!(quiet.len() >= quiet_peers, "not every peer from {QUIET} was cut: {quiet:?}");
        for d in &quiet {
            assert!(
                *d >= DEADLINE && *d <= DEADLINE + SLACK,
                "a slow connection from {QUIET} lived {d:?}: not cut by the handshake deadline \
                 {DEADLINE:?} (+{SLACK:?}) but by something else; all from {QUIET}: {quiet:?}"
            );
        }
        p.close().expect("close");
    });
}
