//! Lanes in one process: a connection is two bounded byte queues, one per direction, and a
//! listener is a name on a [`MemTransport`]'s network. It behaves as [`TcpConn`](crate::TcpConn)
//! does, so that a primary and a node can run in one process (tests, embedders) with nothing
//! above the trait knowing:
//!
//! - a receive blocks until there is at least one byte, the connection ends (`Ok(0)`), or the
//!   receive timeout passes (`WouldBlock`, as a socket's `SO_RCVTIMEO` reports it);
//! - a send blocks while the queue toward the peer is full (a queue's room is fixed when the
//!   connection is made, like a socket buffer), and fails with `BrokenPipe` once either side has
//!   closed; the send timeout gives `WouldBlock`;
//! - the timeouts are the connection's, shared by every handle [`Conn::try_clone`] makes (as a
//!   socket's options are); the busy poll is the handle's;
//! - [`Conn::shutdown`], or dropping the last handle of one side, closes both directions: a
//!   receiver of either side blocked or not gets the bytes already queued and then `Ok(0)`, a
//!   sender of either side gets `BrokenPipe`.

use crate::{Conn, Transport};
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes a queue holds unless [`MemTransport::with_buffer`] says otherwise: a typical socket
/// buffer.
pub const DEFAULT_BUFFER: usize = 256 << 10;
/// Connections a listener holds before they are accepted; past it, `connect` waits for room
/// up to its timeout.
pub const BACKLOG: usize = 128;

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    // Every critical section here leaves the state whole; a panic elsewhere changes nothing.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` until `deadline` (`None`: without end); returns the guard and whether the
/// deadline has passed.
fn wait_until<'a, X>(
    cv: &Condvar,
    g: MutexGuard<'a, X>,
    deadline: Option<Instant>,
) -> (MutexGuard<'a, X>, bool) {
    match deadline {
        None => (cv.wait(g).unwrap_or_else(|p| p.into_inner()), false),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (g, true);
            }
            let (g, _) = cv.wait_timeout(g, left).unwrap_or_else(|p| p.into_inner());
            (g, false)
        }
    }
}

/// A fixed ring of bytes and whether each end has gone.
struct Ring {
    buf: Box<[u8]>,
    head: usize,
    len: usize,
    /// The receiving side closed: sends fail.
    reader_gone: bool,
    /// The sending side closed: receives end once the queue is empty.
    writer_gone: bool,
}

impl Ring {
    fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Appends as much of `bufs` as fits; returns how much did.
    fn push(&mut self, bufs: &[IoSlice<'_>]) -> usize {
        let cap = self.buf.len();
        let mut put = 0;
        for b in bufs {
            let mut src: &[u8] = b;
            while !src.is_empty() && self.len < cap {
                let tail = (self.head + self.len) % cap;
                let n = src.len().min(cap - self.len).min(cap - tail);
                self.buf[tail..tail + n].copy_from_slice(&src[..n]);
                self.len += n;
                put += n;
                src = &src[n..];
            }
            if self.len == cap {
                break;
            }
        }
        put
    }

    /// Takes up to `out.len()` bytes from the front; returns how many.
    fn pop(&mut self, out: &mut [u8]) -> usize {
        let cap = self.buf.len();
        let mut got = 0;
        while got < out.len() && self.len > 0 {
            let n = (out.len() - got).min(self.len).min(cap - self.head);
            out[got..got + n].copy_from_slice(&self.buf[self.head..self.head + n]);
            self.head = (self.head + n) % cap;
            self.len -= n;
            got += n;
        }
        got
    }
}

/// One direction of a connection.
struct Pipe {
    ring: Mutex<Ring>,
    /// Bytes came, or the pipe closed.
    readable: Condvar,
    /// Room came, or the pipe closed.
    writable: Condvar,
}

impl Pipe {
    fn new(capacity: usize) -> Pipe {
        Pipe {
            ring: Mutex::new(Ring {
                buf: vec![0; capacity.max(1)].into_boxed_slice(),
                head: 0,
                len: 0,
                reader_gone: false,
                writer_gone: false,
            }),
            readable: Condvar::new(),
            writable: Condvar::new(),
        }
    }

    fn close_reader(&self) {
        lock(&self.ring).reader_gone = true;
        self.readable.notify_all();
        self.writable.notify_all();
    }

    fn close_writer(&self) {
        lock(&self.ring).writer_gone = true;
        self.readable.notify_all();
        self.writable.notify_all();
    }
}

/// A connection's options, shared by its handles.
#[derive(Default)]
struct Timeouts {
    recv: Option<Duration>,
    send: Option<Duration>,
}

/// One side of a connection, shared by every handle on it; the last handle to go closes it.
struct Side {
    rx: Arc<Pipe>,
    tx: Arc<Pipe>,
    timeouts: Mutex<Timeouts>,
    peer: String,
}

impl Side {
    fn close(&self) {
        self.rx.close_reader();
        self.tx.close_writer();
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.close();
    }
}

/// One handle on one side of an in-memory connection.
pub struct MemConn {
    side: Arc<Side>,
    busy_poll: Duration,
}

impl std::fmt::Debug for MemConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemConn").field("peer", &self.side.peer).finish_non_exhaustive()
    }
}

/// Two connected sides, each queue `capacity` bytes (at least one); each side's
/// [`Conn::peer`] is the name given for the other.
pub fn pair(capacity: usize, a_name: &str, b_name: &str) -> (MemConn, MemConn) {
    let ab = Arc::new(Pipe::new(capacity));
    let ba = Arc::new(Pipe::new(capacity));
    let side = |rx: &Arc<Pipe>, tx: &Arc<Pipe>, peer: &str| MemConn {
        side: Arc::new(Side {
            rx: rx.clone(),
            tx: tx.clone(),
            timeouts: Mutex::new(Timeouts::default()),
            peer: peer.to_string(),
        }),
        busy_poll: Duration::ZERO,
    };
    (side(&ba, &ab, b_name), side(&ab, &ba, a_name))
}

fn timed_out(what: &str, after: Duration) -> io::Error {
    // A socket's timeouts report EAGAIN.
    io::Error::new(io::ErrorKind::WouldBlock, format!("{what} timed out after {after:?}"))
}

fn check_timeout(timeout: Option<Duration>) -> io::Result<()> {
    if timeout == Some(Duration::ZERO) {
        // As `TcpStream::set_read_timeout` says.
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"));
    }
    Ok(())
}

impl MemConn {
    /// Polls the receive queue for up to `busy_poll` (see [`Conn::set_busy_poll`]).
    fn wait_readable(&self) {
        let start = Instant::now();
        loop {
            if let Ok(r) = self.side.rx.ring.try_lock() {
                if r.len > 0 || r.writer_gone || r.reader_gone {
                    return;
                }
            }
            if start.elapsed() >= self.busy_poll {
                return;
            }
            std::hint::spin_loop();
        }
    }
}

impl Read for MemConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if !self.busy_poll.is_zero() {
            self.wait_readable();
        }
        let timeout = lock(&self.side.timeouts).recv;
        let deadline = timeout.map(|t| Instant::now() + t);
        let pipe = &self.side.rx;
        let mut r = lock(&pipe.ring);
        loop {
            if r.len > 0 {
                let n = r.pop(buf);
                drop(r);
                pipe.writable.notify_all();
                return Ok(n);
            }
            if r.writer_gone || r.reader_gone {
                return Ok(0);
            }
            let (g, late) = wait_until(&pipe.readable, r, deadline);
            r = g;
            if late {
                return Err(timed_out("receive", timeout.unwrap_or_default()));
            }
        }
    }
}

impl Write for MemConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        let timeout = lock(&self.side.timeouts).send;
        let deadline = timeout.map(|t| Instant::now() + t);
        let pipe = &self.side.tx;
        let mut r = lock(&pipe.ring);
        loop {
            if r.writer_gone || r.reader_gone {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the connection is closed"));
            }
            if r.room() > 0 {
                let n = r.push(bufs);
                drop(r);
                pipe.readable.notify_all();
                return Ok(n);
            }
            let (g, late) = wait_until(&pipe.writable, r, deadline);
            r = g;
            if late {
                return Err(timed_out("send", timeout.unwrap_or_default()));
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn for MemConn {
    fn try_clone(&self) -> io::Result<MemConn> {
        Ok(MemConn { side: self.side.clone(), busy_poll: self.busy_poll })
    }

    fn peer(&self) -> String {
        self.side.peer.clone()
    }

    fn shutdown(&self) {
        self.side.close();
    }

    fn set_busy_poll(&mut self, spin: Duration) {
        self.busy_poll = spin;
    }

    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        lock(&self.side.timeouts).recv = timeout;
        Ok(())
    }

    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        lock(&self.side.timeouts).send = timeout;
        Ok(())
    }
}

/// Connections made to a listener, waiting for `accept`.
struct Backlog {
    conns: Mutex<VecDeque<MemConn>>,
    /// A connection came.
    arrived: Condvar,
    /// Room came (one was accepted).
    room: Condvar,
}

/// The names listened on, and what each connection is numbered.
struct Network {
    listeners: Mutex<HashMap<String, Arc<Backlog>>>,
    /// For `name:0` listeners and accepted connections' peer names.
    next: AtomicU64,
}

/// A listener of a [`MemTransport`]: its name is taken until it is dropped; connections not
/// yet accepted are closed then.
pub struct MemListener {
    name: String,
    backlog: Arc<Backlog>,
    net: Arc<Network>,
}

impl Drop for MemListener {
    fn drop(&mut self) {
        let mut names = lock(&self.net.listeners);
        if names.get(&self.name).is_some_and(|b| Arc::ptr_eq(b, &self.backlog)) {
            names.remove(&self.name);
        }
        drop(names);
        lock(&self.backlog.conns).clear();
        self.backlog.room.notify_all();
    }
}

/// A network in one process. Clones share it: a name listened on through one clone is
/// connected to through another. Addresses are any non-empty names; one that ends in `:0`
/// (as `127.0.0.1:0`) is given a fresh number in place of the 0, which
/// [`Transport::local_addr`] tells.
#[derive(Clone)]
pub struct MemTransport {
    net: Arc<Network>,
    buffer: usize,
    host: Arc<str>,
}

impl Default for MemTransport {
    fn default() -> MemTransport {
        MemTransport::new()
    }
}

impl std::fmt::Debug for MemTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTransport").field("host", &self.host).field("buffer", &self.buffer).finish()
    }
}

impl MemTransport {
    /// A new network of its own, with queues of [`DEFAULT_BUFFER`] bytes.
    pub fn new() -> MemTransport {
        MemTransport {
            net: Arc::new(Network { listeners: Mutex::new(HashMap::new()), next: AtomicU64::new(1) }),
            buffer: DEFAULT_BUFFER,
            host: "mem".into(),
        }
    }

    /// The same network; connections made through the result have queues of `bytes` bytes
    /// (at least one) each way.
    pub fn with_buffer(&self, bytes: usize) -> MemTransport {
        MemTransport { buffer: bytes.max(1), ..self.clone() }
    }

    /// The same network; connections made through the result come from `host`: an accepting
    /// side's [`Conn::peer`] is `host#n` (n numbers the connection), as a TCP peer is `ip:port`.
    pub fn on_host(&self, host: &str) -> MemTransport {
        MemTransport { host: host.into(), ..self.clone() }
    }
}

impl Transport for MemTransport {
    type Conn = MemConn;
    type Listener = MemListener;

    /// Queues a connection for the listener named `addr` and returns at once (as a TCP
    /// connection is made before it is accepted); waits up to `timeout` while its backlog is
    /// full. A name nobody listens on is refused.
    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<MemConn> {
        let refused = || {
            io::Error::new(io::ErrorKind::ConnectionRefused, format!("nothing listens on {addr:?} in memory"))
        };
        let backlog = lock(&self.net.listeners).get(addr).cloned().ok_or_else(refused)?;
        let n = self.net.next.fetch_add(1, Ordering::Relaxed);
        let (mine, theirs) = pair(self.buffer, &format!("{}#{n}", self.host), addr);
        let deadline = Instant::now() + timeout;
        let mut q = lock(&backlog.conns);
        loop {
            // A listener that went away refuses, even with this handle on its backlog.
            if !lock(&self.net.listeners).get(addr).is_some_and(|b| Arc::ptr_eq(b, &backlog)) {
                return Err(refused());
            }
            if q.len() < BACKLOG {
                q.push_back(theirs);
                drop(q);
                backlog.arrived.notify_one();
                return Ok(mine);
            }
            let (g, late) = wait_until(&backlog.room, q, Some(deadline));
            q = g;
            if late {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{addr:?} accepted nothing within {timeout:?}: its backlog of {BACKLOG} is full"),
                ));
            }
        }
    }

    /// Takes the name `addr` (`name:0`: a fresh one); `AddrInUse` if it is taken.
    fn listen(&self, addr: &str) -> io::Result<MemListener> {
        if addr.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an in-memory address needs a name"));
        }
        let name = match addr.strip_suffix(":0") {
            Some(host) => format!("{host}:{}", self.net.next.fetch_add(1, Ordering::Relaxed)),
            None => addr.to_string(),
        };
        let mut names = lock(&self.net.listeners);
        if names.contains_key(&name) {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{name:?} is listened on already")));
        }
        let backlog = Arc::new(Backlog {
            conns: Mutex::new(VecDeque::with_capacity(BACKLOG)),
            arrived: Condvar::new(),
            room: Condvar::new(),
        });
        names.insert(name.clone(), backlog.clone());
        Ok(MemListener { name, backlog, net: self.net.clone() })
    }

    /// Waits for a connection, without end (as a TCP listener does).
    fn accept(&self, listener: &MemListener) -> io::Result<MemConn> {
        let mut q = lock(&listener.backlog.conns);
        loop {
            if let Some(c) = q.pop_front() {
                drop(q);
                listener.backlog.room.notify_one();
                return Ok(c);
            }
            q = listener.backlog.arrived.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn local_addr(&self, listener: &MemListener) -> io::Result<String> {
        Ok(listener.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    const LONG: Duration = Duration::from_secs(10);

    fn timed_out(e: &io::Error) -> bool {
        // As the layers above test for a receive timeout.
        matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
    }

    /// A listener and a connected pair through it: (connecting side, accepted side).
    fn connected(t: &MemTransport) -> (MemConn, MemConn) {
        let l = t.listen("node:0").unwrap();
        let addr = t.local_addr(&l).unwrap();
        let c = t.connect(&addr, LONG).unwrap();
        let a = t.accept(&l).unwrap();
        (c, a)
    }

    #[test]
    fn round_trip_both_ways() {
        let (mut a, mut b) = pair(64, "a", "b");
        a.write_all(b"hello").unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        b.write_all(b"back").unwrap();
        let mut got = [0u8; 4];
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"back");
        assert_eq!((a.peer(), b.peer()), ("b".to_string(), "a".to_string()));
    }

    #[test]
    fn vectored_send_larger_than_the_queue_arrives_whole_and_in_order() {
        let (mut a, mut b) = pair(1000, "a", "b");
        let reader = thread::spawn(move || {
            let mut got = vec![0u8; 300_000];
            b.read_exact(&mut got).unwrap();
            got
        });
        let x = vec![1u8; 100_000];
        let y: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        a.send_all_vectored(&mut [IoSlice::new(&x), IoSlice::new(&[]), IoSlice::new(&y)]).unwrap();
        let got = reader.join().unwrap();
        assert!(got[..100_000].iter().all(|&v| v == 1));
        assert_eq!(&got[100_000..], &y[..]);
    }

    #[test]
    fn one_vectored_write_takes_what_fits() {
        let (mut a, mut b) = pair(10, "a", "b");
        assert_eq!(a.write_vectored(&[IoSlice::new(b"abcd"), IoSlice::new(b"efghijklmn")]).unwrap(), 10);
        let mut got = [0u8; 10];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"abcdefghij");
    }

    #[test]
    fn a_blocked_reader_is_woken_by_data() {
        let (mut a, mut b) = pair(64, "a", "b");
        let reader = thread::spawn(move || {
            let mut got = [0u8; 3];
            let n = b.read(&mut got).unwrap();
            (n, got)
        });
        // Whether the reader is asleep yet or not, it gets the bytes.
        thread::sleep(Duration::from_millis(20));
        a.write_all(b"xyz").unwrap();
        let (n, got) = reader.join().unwrap();
        assert_eq!(&got[..n], &b"xyz"[..n]);
        assert!(n > 0);
    }

    #[test]
    fn shutdown_wakes_blocked_readers_on_both_sides_with_end_of_stream() {
        let (a, mut b) = pair(64, "a", "b");
        let mut a2 = a.try_clone().unwrap();
        let far = thread::spawn(move || b.read(&mut [0u8; 8]));
        let near = thread::spawn(move || a2.read(&mut [0u8; 8]));
        thread::sleep(Duration::from_millis(20));
        a.shutdown();
        assert_eq!(far.join().unwrap().unwrap(), 0, "the peer sees the end");
        assert_eq!(near.join().unwrap().unwrap(), 0, "a reader on the closed side sees the end");
    }

    #[test]
    fn bytes_sent_before_a_close_are_read_before_the_end() {
        let (mut a, mut b) = pair(64, "a", "b");
        a.write_all(b"last words").unwrap();
        drop(a);
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
        let e = b.write_all(b"anyone?").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_blocked_reader_times_out_as_a_socket_does() {
        let (_a, mut b) = pair(64, "a", "b");
        b.set_recv_timeout(Some(Duration::from_millis(30))).unwrap();
        let t0 = Instant::now();
        let e = b.read(&mut [0u8; 4]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(timed_out(&e));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        // As TCP: a zero timeout is refused, `None` blocks again.
        assert_eq!(b.set_recv_timeout(Some(Duration::ZERO)).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_timeout_set_on_one_handle_holds_for_its_clones() {
        let (_a, b) = pair(64, "a", "b");
        let mut b2 = b.try_clone().unwrap();
        b.set_recv_timeout(Some(Duration::from_millis(10))).unwrap();
        assert!(timed_out(&b2.read(&mut [0u8; 1]).unwrap_err()));
    }

    #[test]
    fn a_full_queue_blocks_the_writer_until_the_reader_takes_bytes() {
        let (mut a, mut b) = pair(16, "a", "b");
        a.write_all(&[7u8; 16]).unwrap();
        // Full: a send with a timeout gives up as a socket's does...
        a.set_send_timeout(Some(Duration::from_millis(20))).unwrap();
        let e = a.write(&[8u8; 4]).unwrap_err();
        assert!(timed_out(&e), "{e}");
        // ...and without one it waits for the reader.
        a.set_send_timeout(None).unwrap();
        let writer = thread::spawn(move || {
            a.write_all(&[9u8; 8]).unwrap();
            a
        });
        thread::sleep(Duration::from_millis(20));
        assert!(!writer.is_finished(), "the writer waits for room");
        let mut got = [0u8; 24];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got[..16], &[7u8; 16]);
        assert_eq!(&got[16..], &[9u8; 8]);
        writer.join().unwrap();
    }

    #[test]
    fn a_writer_blocked_on_a_full_queue_is_woken_by_a_close() {
        let (mut a, b) = pair(4, "a", "b");
        a.write_all(b"full").unwrap();
        let writer = thread::spawn(move || a.write_all(b"more"));
        thread::sleep(Duration::from_millis(20));
        b.shutdown();
        assert_eq!(writer.join().unwrap().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn clones_share_the_queues_until_the_last_one_goes() {
        let (a, mut b) = pair(64, "a", "b");
        let mut sender = a.try_clone().unwrap();
        let mut receiver = a.try_clone().unwrap();
        drop(a);
        sender.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        b.read_exact(&mut got).unwrap();
        b.write_all(b"pong").unwrap();
        receiver.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
        drop(sender);
        // One handle is left: the connection is open.
        b.set_recv_timeout(Some(Duration::from_millis(10))).unwrap();
        assert!(timed_out(&b.read(&mut got).unwrap_err()));
        drop(receiver);
        assert_eq!(b.read(&mut got).unwrap(), 0);
    }

    #[test]
    fn connecting_to_an_unknown_name_is_refused() {
        let t = MemTransport::new();
        let e = t.connect("nobody:7000", LONG).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        assert!(e.to_string().contains("nobody:7000"), "{e}");
        // A name that was listened on is refused once its listener is gone.
        let l = t.listen("gone").unwrap();
        drop(l);
        assert_eq!(t.connect("gone", LONG).unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
        // Another network does not see this one's names.
        let _l = t.listen("here").unwrap();
        assert!(MemTransport::new().connect("here", LONG).is_err());
    }

    #[test]
    fn accept_gives_connections_in_order_and_names_both_ends() {
        let t = MemTransport::new();
        let l = t.listen("mirror:0").unwrap();
        let addr = t.local_addr(&l).unwrap();
        assert!(addr.starts_with("mirror:") && addr != "mirror:0", "{addr}");
        assert_eq!(t.listen(&addr).err().map(|e| e.kind()), Some(io::ErrorKind::AddrInUse));
        let primary = t.on_host("primary");
        let mut c1 = primary.connect(&addr, LONG).unwrap();
        let mut c2 = primary.connect(&addr, LONG).unwrap();
        assert_eq!(c1.peer(), addr);
        c1.write_all(b"1").unwrap();
        c2.write_all(b"2").unwrap();
        for want in [b"1", b"2"] {
            let mut a = t.accept(&l).unwrap();
            assert!(a.peer().starts_with("primary#"), "{}", a.peer());
            let mut got = [0u8; 1];
            a.read_exact(&mut got).unwrap();
            assert_eq!(&got, want);
        }
        // A blocked accept is woken by the next connection (as a node's acceptor is at shutdown).
        let accepter = thread::scope(|s| {
            let h = s.spawn(|| t.accept(&l).map(|c| c.peer()));
            thread::sleep(Duration::from_millis(20));
            let _c = t.connect(&addr, LONG).unwrap();
            h.join().unwrap()
        });
        assert!(accepter.unwrap().starts_with("mem#"));
    }

    #[test]
    fn a_listener_dropped_with_connections_unaccepted_closes_them() {
        let t = MemTransport::new();
        let l = t.listen("n").unwrap();
        let mut c = t.connect("n", LONG).unwrap();
        drop(l);
        assert_eq!(c.read(&mut [0u8; 1]).unwrap(), 0);
    }

    #[test]
    fn connections_through_the_transport_carry_busy_polled_reads() {
        let t = MemTransport::new().with_buffer(32);
        let (mut c, mut a) = connected(&t);
        a.set_busy_poll(Duration::from_millis(5));
        let h = thread::spawn(move || {
            let mut got = [0u8; 100];
            a.read_exact(&mut got).unwrap();
            got
        });
        c.write_all(&[5u8; 100]).unwrap();
        assert_eq!(h.join().unwrap(), [5u8; 100]);
    }
}
