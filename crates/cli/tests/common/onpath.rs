//! An attacker on the path between two nodes: a TCP proxy that the connecting side (a primary,
//! `mojim kv`, a mirror feeding its backup, an operator's tool) is pointed at instead of the
//! accepting node, and that forwards each connection to that node.
//!
//! It reads both directions as frames (docs/FORMAT.md §2, with `mojim-format`'s codec), so the
//! test can have it, at any time:
//!
//! - pass every byte through unchanged ([`Attack::Pass`]);
//! - change bytes in the Data frames it forwards and recompute both checksums
//!   ([`Attack::Alter`]);
//! - keep Data frames from the accepting side and answer each group with an `Ack` of its own
//!   ([`Attack::ForgeAcks`]);
//! - keep a copy of a group ([`Attack::Record`]) and later send it in place of another group,
//!   of a later session, renumbered to it ([`Attack::Substitute`]);
//! - take over an operator's connection once it has logged in ([`OnPath::splice`]) and send
//!   its own requests on it.
//!
//! It needs no secret: nothing after the handshake is authenticated.
//!
//! A stream whose first 64 bytes are not a frame header is marked opaque ([`Report::opaque`]).
//! When it is TLS (mutual TLS on the link, `[security] tls`), the proxy reads it as TLS records
//! (RFC 8446 §5.1: a type, a version, a length, then the sealed bytes) and can, once, on the
//! first application-data record toward the acceptor after [`OnPath::set`]:
//!
//! - flip a bit in it ([`Attack::FlipBit`]);
//! - send it twice ([`Attack::ReplayRecord`]);
//! - keep it from the acceptor, and send the connector, as the acceptor's answer, a copy of the
//!   acceptor's latest application-data record ([`Attack::ForgeAcks`]);
//! - send it, and everything after it, on a new connection of its own to the acceptor
//!   ([`Attack::Splice`]).
//!
//! It keeps every byte each connector sent, so that it can also send a whole earlier
//! connection's bytes on a new connection of its own ([`OnPath::replay_connection`]).
//! [`OnPath::splice`] on a TLS stream sends its request as a plaintext frame. Any other stream
//! is passed through as bytes, untouched.

use mojim_format::checksum::crc32c;
use mojim_format::handshake::{PeerRole, Request};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which way a frame travels through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From the side that connected (the primary, the operator) to the node it meant to reach.
    ToAcceptor,
    /// From the node back to the side that connected.
    ToConnector,
}

/// One frame: its decoded header and its body.
#[derive(Clone, Debug)]
pub struct Frame {
    pub header: FrameHeader,
    pub body: Vec<u8>,
}

impl Frame {
    /// A frame of `kind` carrying `body`, every other header field zero.
    pub fn new(kind: FrameKind, body: Vec<u8>) -> Frame {
        let mut header = FrameHeader::new(kind);
        header.body_len = body.len() as u32;
        Frame { header, body }
    }

    /// The frame's bytes as they came: re-encoding a header that decoded gives back its 64
    /// bytes (docs/FORMAT.md §2), and its body checksum is left as it was.
    pub fn unchanged(&self) -> Vec<u8> {
        let mut hb = [0u8; FRAME_HEADER_SIZE];
        self.header.encode(&mut hb);
        let mut out = hb.to_vec();
        out.extend_from_slice(&self.body);
        out
    }

    /// The frame's bytes with `body_len`, the body checksum and the header checksum made to fit
    /// whatever the header and body now hold: what a receiver checks, and all it checks.
    pub fn sealed(&self) -> Vec<u8> {
        let mut h = self.header;
        h.body_len = self.body.len() as u32;
        h.body_checksum = crc32c(&self.body);
        let mut hb = [0u8; FRAME_HEADER_SIZE];
        h.encode(&mut hb);
        let mut out = hb.to_vec();
        out.extend_from_slice(&self.body);
        out
    }
}

/// What the proxy does to the frames it forwards from now on.
#[derive(Clone, Debug)]
pub enum Attack {
    /// Forward every byte unchanged.
    Pass,
    /// TLS: flip the lowest bit of the last byte (in the AEAD tag) of the next
    /// application-data record toward the acceptor; then pass.
    FlipBit,
    /// TLS: send the next application-data record toward the acceptor, then the same record
    /// again; then pass.
    ReplayRecord,
    /// TLS: the next application-data record toward the acceptor goes instead, with all that
    /// follows it from the connector, to a new connection of the proxy's own to the acceptor
    /// (whose replies go to the connector); the connector's first connection to the acceptor
    /// hears no more from it.
    Splice,
    /// In every Data frame toward the acceptor whose body holds `from`, write `to` (as long) in
    /// its place and recompute the body and header checksums.
    Alter { from: Vec<u8>, to: Vec<u8> },
    /// Data frames toward the acceptor are not forwarded; the last frame of each group is
    /// answered, to the connector, with an `Ack` of the group that the proxy makes itself.
    /// On TLS, the proxy cannot make an Ack: it keeps the next application-data record from
    /// the acceptor and sends the connector a copy of the acceptor's latest one (an earlier
    /// Ack or Heartbeat) in its place; then passes.
    ForgeAcks,
    /// Forward everything, and keep a copy of the first Data group (all its frames) whose
    /// first frame holds `needle`.
    Record { needle: Vec<u8> },
    /// The first Data group toward the acceptor whose first frame holds `needle` is not
    /// forwarded: the group kept by [`Attack::Record`] is sent in its place, given the dropped
    /// group's session, epoch, lane and sequence number (so the acceptor acknowledges it as
    /// that group).
    Substitute { needle: Vec<u8> },
}

/// What the proxy has seen and done so far.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Connections accepted.
    pub connections: u64,
    /// Connections whose handshake ended with a Welcome to the connector.
    pub established: u64,
    /// Connections that were not a frame stream (passed through as bytes).
    pub opaque: u64,
    /// Data frames seen toward the acceptor.
    pub data_frames: u64,
    /// Data frames changed by [`Attack::Alter`].
    pub altered: u64,
    /// Data frames kept from the acceptor by [`Attack::ForgeAcks`] or [`Attack::Substitute`].
    pub dropped: u64,
    /// Acks made by the proxy.
    pub forged_acks: u64,
    /// Sequence numbers of the groups the proxy acknowledged itself.
    pub forged_seqs: Vec<u64>,
    /// Frames of the group kept by [`Attack::Record`] (0: none kept yet).
    pub recorded_frames: usize,
    /// Groups sent in another group's place by [`Attack::Substitute`].
    pub substituted: u64,
    /// Connections taken over by [`OnPath::splice`].
    pub spliced: u64,
    /// The first frame stream that broke (a header that does not decode after the first).
    pub broken: Option<String>,
    /// TLS records forwarded (both ways).
    pub tls_records: u64,
    /// TLS records changed by [`Attack::FlipBit`].
    pub flipped: u64,
    /// TLS records sent twice by [`Attack::ReplayRecord`].
    pub replayed_records: u64,
    /// Connections of the proxy's own made by [`Attack::Splice`].
    pub spliced_sessions: u64,
}

/// What [`OnPath::replay_connection`] saw.
#[derive(Clone, Debug)]
pub struct Replayed {
    /// Bytes sent: all the earlier connector's.
    pub sent: usize,
    /// Bytes the acceptor answered with.
    pub answered: usize,
    /// Whether the acceptor closed the connection (rather than the time running out).
    pub closed: bool,
}

/// The proxy. Dropping it closes its listener and every connection through it.
pub struct OnPath {
    addr: String,
    shared: Arc<Shared>,
}

struct Shared {
    upstream: String,
    stop: AtomicBool,
    attack: Mutex<Attack>,
    report: Mutex<Report>,
    changed: Condvar,
    recorded: Mutex<Vec<Frame>>,
    conns: Mutex<Vec<Arc<Link>>>,
}

/// One connection through the proxy: the connector's socket and the acceptor's.
struct Link {
    connector: Mutex<TcpStream>,
    acceptor: Mutex<TcpStream>,
    role: Mutex<Option<PeerRole>>,
    established: AtomicBool,
    opaque: AtomicBool,
    closed: AtomicBool,
    /// Set by [`OnPath::splice`]: frames from the acceptor go here instead of to the connector.
    spliced: Mutex<Option<Sender<Frame>>>,
    /// The largest log tail the acceptor announced (an Ack's or Heartbeat's `offset`).
    tail: Mutex<u64>,
    /// On an opaque stream: every byte the connector sent.
    sent: Mutex<Vec<u8>>,
    /// On TLS: the acceptor's latest application-data record.
    last_reply: Mutex<Option<Vec<u8>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl OnPath {
    /// Listens on a free port of loopback and forwards each connection to `upstream`
    /// (`host:port` of the node the connecting side meant to reach), passing everything through
    /// until told otherwise.
    pub fn new(upstream: &str) -> OnPath {
        let listener = TcpListener::bind("127.0.0.1:0").expect("the proxy listens on loopback");
        let addr = listener.local_addr().expect("the proxy's address").to_string();
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            stop: AtomicBool::new(false),
            attack: Mutex::new(Attack::Pass),
            report: Mutex::new(Report::default()),
            changed: Condvar::new(),
            recorded: Mutex::new(Vec::new()),
            conns: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("onpath-accept".into())
            .spawn(move || accept_loop(listener, s))
            .expect("start the proxy's accept thread");
        OnPath { addr, shared }
    }

    /// Where the connecting side is to connect instead of the node.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Changes what the proxy does to the frames it forwards from now on.
    pub fn set(&self, attack: Attack) {
        *lock(&self.shared.attack) = attack;
    }

    pub fn report(&self) -> Report {
        lock(&self.shared.report).clone()
    }

    /// Waits until the report satisfies `done`, at most `within`; the report then, or `None`.
    pub fn wait(&self, within: Duration, done: impl Fn(&Report) -> bool) -> Option<Report> {
        let t0 = Instant::now();
        let mut r = lock(&self.shared.report);
        loop {
            if done(&r) {
                return Some(r.clone());
            }
            let left = within.checked_sub(t0.elapsed())?;
            r = self.shared.changed.wait_timeout(r, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Takes over an operator's connection: the first open one whose handshake is over (or,
    /// on a stream that is not made of frames, the first open one), waiting at most `within`
    /// for it. The operator is cut off (its socket is shut down) and the node's side of the
    /// connection is the proxy's from then on. Call it between the operator's requests.
    pub fn splice(&self, within: Duration) -> Option<Spliced> {
        let t0 = Instant::now();
        loop {
            let found = lock(&self.shared.conns).iter().find_map(|l| {
                let admin = *lock(&l.role) == Some(PeerRole::Admin) && l.established.load(Ordering::Acquire);
                let usable = admin || l.opaque.load(Ordering::Acquire);
                (usable && !l.closed.load(Ordering::Acquire)).then(|| l.clone())
            });
            if let Some(link) = found {
                let (tx, rx) = channel();
                *lock(&link.spliced) = Some(tx);
                let _ = lock(&link.connector).shutdown(Shutdown::Both);
                bump(&self.shared, |r| r.spliced += 1);
                let acceptor = lock(&link.acceptor).try_clone().expect("clone the node's socket");
                return Some(Spliced { acceptor, replies: rx });
            }
            if t0.elapsed() >= within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl OnPath {
    /// Opens a connection of the proxy's own to the acceptor and sends on it every byte the
    /// connector of connection `index` (0: the first the proxy accepted) sent, as it sent them;
    /// then reads what the acceptor answers until it closes the connection, at most `within`.
    pub fn replay_connection(&self, index: usize, within: Duration) -> Replayed {
        let bytes = {
            let conns = lock(&self.shared.conns);
            let link = conns.get(index).unwrap_or_else(|| panic!("no connection {index} to replay"));
            let sent = lock(&link.sent).clone();
            sent
        };
        let mut own = TcpStream::connect(&self.shared.upstream).expect("the proxy connects to the acceptor");
        own.set_read_timeout(Some(within)).expect("a read timeout");
        // The acceptor may close before it has read everything: that is an answer too.
        let _ = own.write_all(&bytes);
        let (mut answered, mut buf, t0) = (0, [0u8; 65536], Instant::now());
        let closed = loop {
            match own.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => answered += n,
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    break false
                }
                Err(_) => break true,
            }
            if t0.elapsed() >= within {
                break false;
            }
        };
        Replayed { sent: bytes.len(), answered, closed }
    }
}

impl Drop for OnPath {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wake the accept thread, which then sees `stop`.
        let _ = TcpStream::connect(&self.addr);
        for l in lock(&self.shared.conns).iter() {
            l.close();
        }
    }
}

/// An operator's connection taken over after its handshake.
pub struct Spliced {
    acceptor: TcpStream,
    replies: Receiver<Frame>,
}

impl Spliced {
    /// Sends an operator's command (`{"op":"promote",...}`, docs/FORMAT.md §3.6) and returns
    /// the node's JSON reply, or what came instead.
    pub fn command(&mut self, json: &str, within: Duration) -> Result<serde_json::Value, String> {
        let req = Frame::new(FrameKind::Request, Request::Command(json.to_string()).encode());
        self.acceptor.write_all(&req.sealed()).map_err(|e| format!("send the request: {e}"))?;
        let reply = match self.replies.recv_timeout(within) {
            Ok(f) => f,
            Err(RecvTimeoutError::Timeout) => return Err(format!("no reply within {within:?}")),
            Err(RecvTimeoutError::Disconnected) => return Err("the node closed the connection".into()),
        };
        match reply.header.kind {
            FrameKind::Reply => {
                serde_json::from_slice(&reply.body).map_err(|e| format!("a reply that is not JSON: {e}"))
            }
            k => Err(format!("a {k:?} frame: {}", String::from_utf8_lossy(&reply.body))),
        }
    }
}

fn bump(s: &Shared, f: impl FnOnce(&mut Report)) {
    f(&mut lock(&s.report));
    s.changed.notify_all();
}

fn accept_loop(listener: TcpListener, s: Arc<Shared>) {
    for conn in listener.incoming() {
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(connector) = conn else { continue };
        let Ok(acceptor) = TcpStream::connect(&s.upstream) else {
            // The node is not there: the connector sees its connection closed, as it would.
            continue;
        };
        let _ = connector.set_nodelay(true);
        let _ = acceptor.set_nodelay(true);
        let (Ok(cr), Ok(ar)) = (connector.try_clone(), acceptor.try_clone()) else { continue };
        let link = Arc::new(Link {
            connector: Mutex::new(connector),
            acceptor: Mutex::new(acceptor),
            role: Mutex::new(None),
            established: AtomicBool::new(false),
            opaque: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            spliced: Mutex::new(None),
            tail: Mutex::new(0),
            sent: Mutex::new(Vec::new()),
            last_reply: Mutex::new(None),
        });
        lock(&s.conns).push(link.clone());
        bump(&s, |r| r.connections += 1);
        for (dir, from) in [(Dir::ToAcceptor, cr), (Dir::ToConnector, ar)] {
            let (s, link) = (s.clone(), link.clone());
            std::thread::Builder::new()
                .name("onpath-pump".into())
                .spawn(move || pump(&s, &link, dir, from))
                .expect("start a proxy thread");
        }
    }
}

impl Link {
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = lock(&self.connector).shutdown(Shutdown::Both);
        let _ = lock(&self.acceptor).shutdown(Shutdown::Both);
    }

    fn send(&self, to: Dir, bytes: &[u8]) -> std::io::Result<()> {
        match to {
            Dir::ToAcceptor => lock(&self.acceptor).write_all(bytes),
            Dir::ToConnector => lock(&self.connector).write_all(bytes),
        }
    }
}

/// Reads one frame; `Ok(None)` at a clean end of stream. `Err` with the first bytes when they
/// are not a frame header.
fn read_frame(from: &mut TcpStream) -> std::io::Result<Option<Result<Frame, [u8; FRAME_HEADER_SIZE]>>> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    let mut got = 0;
    while got < hb.len() {
        match from.read(&mut hb[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let Ok(header) = FrameHeader::decode(&hb) else { return Ok(Some(Err(hb))) };
    let mut body = vec![0u8; header.body_len as usize];
    from.read_exact(&mut body)?;
    Ok(Some(Ok(Frame { header, body })))
}

/// Forwards one direction of `link` until either side closes.
fn pump(s: &Shared, link: &Link, dir: Dir, mut from: TcpStream) {
    let mut state = GroupState::default();
    let mut first = true;
    loop {
        let frame = match read_frame(&mut from) {
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(raw))) if first => {
                // Not a frame stream: pass it through as bytes, untouched.
                link.opaque.store(true, Ordering::Release);
                bump(s, |r| r.opaque += 1);
                pass_bytes(s, link, dir, &mut from, raw.to_vec());
                break;
            }
            Ok(Some(Err(raw))) => {
                let why = format!("{dir:?}: a header that does not decode: {raw:02x?}");
                bump(s, |r| {
                    r.broken.get_or_insert(why);
                });
                break;
            }
            Ok(None) | Err(_) => break,
        };
        first = false;
        if handle(s, link, dir, frame, &mut state).is_err() {
            break;
        }
    }
    if dir == Dir::ToAcceptor && lock(&link.spliced).is_some() {
        // The operator was cut off; the node's side now belongs to the splice.
        return;
    }
    // A splice waiting for a reply learns that none will come.
    lock(&link.spliced).take();
    link.close();
}

/// TLS record content type of application data (RFC 8446 §5.1): after the ServerHello, every
/// record but a ChangeCipherSpec.
const APPLICATION_DATA: u8 = 23;
/// A TLS record's header: type, version (2 bytes), length (2 bytes, big-endian).
const RECORD_HEADER: usize = 5;

/// The length of the complete TLS record at the start of `buf`, if `buf` holds one.
fn record_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < RECORD_HEADER {
        return None;
    }
    let n = RECORD_HEADER + u16::from_be_bytes([buf[3], buf[4]]) as usize;
    (buf.len() >= n).then_some(n)
}

/// Forwards an opaque stream whose first bytes are `buf`: record by record when it is TLS (a
/// handshake record of version 3.x first), else as bytes.
fn pass_bytes(s: &Shared, link: &Link, dir: Dir, from: &mut TcpStream, mut buf: Vec<u8>) {
    let tls = buf.len() >= 3 && buf[0] == 22 && buf[1] == 3;
    let mut chunk = [0u8; 65536];
    loop {
        if tls {
            while let Some(n) = record_len(&buf) {
                let rec: Vec<u8> = buf.drain(..n).collect();
                if record(s, link, dir, rec).is_err() {
                    return;
                }
            }
        } else if !buf.is_empty() {
            if dir == Dir::ToAcceptor {
                lock(&link.sent).extend_from_slice(&buf);
            }
            if link.send(dir, &buf).is_err() {
                return;
            }
            buf.clear();
        }
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One TLS record, under the attack in force.
fn record(s: &Shared, link: &Link, dir: Dir, mut rec: Vec<u8>) -> std::io::Result<()> {
    bump(s, |r| r.tls_records += 1);
    if dir == Dir::ToAcceptor {
        // Kept for `replay_connection`, as the connector sent it.
        lock(&link.sent).extend_from_slice(&rec);
    }
    if rec[0] != APPLICATION_DATA {
        return link.send(dir, &rec);
    }
    if dir == Dir::ToConnector {
        *lock(&link.last_reply) = Some(rec.clone());
        return link.send(dir, &rec);
    }
    let attack = {
        let mut a = lock(&s.attack);
        match *a {
            Attack::FlipBit | Attack::ReplayRecord | Attack::ForgeAcks | Attack::Splice => {
                std::mem::replace(&mut *a, Attack::Pass)
            }
            _ => Attack::Pass,
        }
    };
    match attack {
        Attack::FlipBit => {
            *rec.last_mut().expect("a record has a header") ^= 1;
            bump(s, |r| r.flipped += 1);
            link.send(dir, &rec)
        }
        Attack::ReplayRecord => {
            link.send(dir, &rec)?;
            bump(s, |r| r.replayed_records += 1);
            link.send(dir, &rec)
        }
        Attack::ForgeAcks => {
            bump(s, |r| r.dropped += 1);
            let Some(reply) = lock(&link.last_reply).clone() else { return Ok(()) };
            // Counted before it is sent: the connector may act on it (answer its client, whose
            // test then reads the report) before this thread runs again.
            bump(s, |r| r.forged_acks += 1);
            link.send(Dir::ToConnector, &reply)
        }
        Attack::Splice => {
            let own = TcpStream::connect(&s.upstream)?;
            let _ = own.set_nodelay(true);
            let replies = own.try_clone()?;
            // From now on the connector's bytes go to the proxy's own connection.
            let old = std::mem::replace(&mut *lock(&link.acceptor), own);
            drop(old);
            bump(s, |r| r.spliced_sessions += 1);
            let connector = lock(&link.connector).try_clone()?;
            std::thread::Builder::new()
                .name("onpath-splice".into())
                .spawn(move || {
                    let (mut from, mut to) = (replies, connector);
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(Shutdown::Both);
                })
                .expect("start a proxy thread");
            link.send(dir, &rec)
        }
        _ => link.send(dir, &rec),
    }
}

/// Per direction: the group being kept back or recorded.
#[derive(Default)]
struct GroupState {
    /// Sequence number of a group whose frames are recorded.
    recording: Option<u64>,
    /// Sequence number of a group whose frames are dropped, to be replaced by the recorded one.
    replacing: Option<u64>,
}

fn handle(s: &Shared, link: &Link, dir: Dir, f: Frame, st: &mut GroupState) -> std::io::Result<()> {
    let h = f.header;
    match (dir, h.kind) {
        (Dir::ToAcceptor, FrameKind::Hello) => {
            let role = match f.body.first() {
                Some(1) => Some(PeerRole::Primary),
                Some(2) => Some(PeerRole::Admin),
                Some(3) => Some(PeerRole::Mirror),
                _ => None,
            };
            *lock(&link.role) = role;
        }
        (Dir::ToConnector, FrameKind::Welcome) => {
            link.established.store(true, Ordering::Release);
            bump(s, |r| r.established += 1);
        }
        (Dir::ToConnector, FrameKind::Ack | FrameKind::Heartbeat) => {
            let mut t = lock(&link.tail);
            *t = (*t).max(h.offset);
        }
        (Dir::ToAcceptor, FrameKind::Data) => {
            bump(s, |r| r.data_frames += 1);
            let attack = lock(&s.attack).clone();
            return data(s, link, f, st, attack);
        }
        _ => {}
    }
    if dir == Dir::ToConnector {
        if let Some(tx) = lock(&link.spliced).as_ref() {
            let _ = tx.send(f);
            return Ok(());
        }
    }
    link.send(dir, &f.unchanged())
}

fn contains(hay: &[u8], needle: &[u8]) -> Option<usize> {
    (!needle.is_empty()).then_some(())?;
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A Data frame toward the acceptor, under `attack`.
fn data(s: &Shared, link: &Link, mut f: Frame, st: &mut GroupState, attack: Attack) -> std::io::Result<()> {
    let h = f.header;
    let forward = |f: &Frame| link.send(Dir::ToAcceptor, &f.unchanged());
    let forward_changed = |f: &Frame| link.send(Dir::ToAcceptor, &f.sealed());
    if st.replacing == Some(h.seq) {
        bump(s, |r| r.dropped += 1);
        if h.is_end() {
            st.replacing = None;
            // Counted before it is sent, as the forged Acks are: the mirror's Ack of the
            // substitute can end the primary's sync point, and the test read the report, before
            // this thread runs again (seen under load: the mirror held the recorded group and
            // the report said none was substituted).
            bump(s, |r| r.substituted += 1);
            let recorded = lock(&s.recorded).clone();
            for mut r in recorded {
                r.header.session = h.session;
                r.header.epoch = h.epoch;
                r.header.lane = h.lane;
                r.header.seq = h.seq;
                forward_changed(&r)?;
            }
        }
        return Ok(());
    }
    if st.recording == Some(h.seq) {
        lock(&s.recorded).push(f.clone());
        if h.is_end() {
            st.recording = None;
            let n = lock(&s.recorded).len();
            bump(s, |r| r.recorded_frames = n);
        }
        return forward(&f);
    }
    match attack {
        // Attacks on TLS records leave frames alone.
        Attack::Pass | Attack::FlipBit | Attack::ReplayRecord | Attack::Splice => forward(&f),
        Attack::Alter { from, to } => {
            assert_eq!(from.len(), to.len(), "Attack::Alter replaces bytes by as many");
            let Some(at) = contains(&f.body, &from) else { return forward(&f) };
            f.body[at..at + to.len()].copy_from_slice(&to);
            bump(s, |r| r.altered += 1);
            forward_changed(&f)
        }
        Attack::ForgeAcks => {
            bump(s, |r| r.dropped += 1);
            if h.is_end() {
                let mut ack = Frame::new(FrameKind::Ack, Vec::new());
                ack.header.lane = h.lane;
                ack.header.epoch = h.epoch;
                ack.header.session = h.session;
                ack.header.seq = h.seq;
                ack.header.offset = *lock(&link.tail);
                // Counted before it is sent: the primary may answer its client on this Ack, and
                // the test read the report, before this thread runs again (a group split over
                // two lanes was seen dropped on one and not yet counted as forged on the other).
                bump(s, |r| {
                    r.forged_acks += 1;
                    r.forged_seqs.push(h.seq);
                });
                link.send(Dir::ToConnector, &ack.sealed())?;
            }
            Ok(())
        }
        Attack::Record { needle } => {
            let none_yet = lock(&s.recorded).is_empty();
            if none_yet && h.frame_index == 0 && contains(&f.body, &needle).is_some() {
                lock(&s.recorded).push(f.clone());
                if h.is_end() {
                    bump(s, |r| r.recorded_frames = 1);
                } else {
                    st.recording = Some(h.seq);
                }
            }
            forward(&f)
        }
        Attack::Substitute { needle } => {
            let have = !lock(&s.recorded).is_empty();
            if have && h.frame_index == 0 && contains(&f.body, &needle).is_some() {
                // Only once: later groups pass.
                *lock(&s.attack) = Attack::Pass;
                st.replacing = Some(h.seq);
                return data(s, link, f, st, Attack::Pass);
            }
            forward(&f)
        }
    }
}
