//! `ucx`: a connection through UCX (RDMA where the hosts have it; UCX's tcp and shared-memory
//! transports where they do not), built from one-sided puts.
//!
//! An address is `ucx:<host>:<port>` (a UCX listener on that socket address; `ucx:0.0.0.0:0`
//! listens on any port). Each side of a connection owns one byte ring of [`RING_BYTES`], its
//! receive ring, in memory registered with UCX (`ucp_mem_map`); the two exchange the ring's
//! address and packed remote key in a hello (an active message). From then on a sender `put`s
//! its bytes straight into the peer's ring (`ucp_put_nbx`), flushes (`ucp_ep_flush_nbx`: the
//! bytes are in the peer's memory), and rings a doorbell: a 16-byte active message carrying the
//! new end of what it wrote. The receiver copies bytes out of its ring and hands its consumed
//! position back with the same kind of message. A receive polls the worker for up to
//! `set_busy_poll`, then sleeps on the worker's event fd (armed first, so no wake-up is lost).
//!
//! Doorbells (little-endian): `kind: u32` (1 head, 2 tail, 3 closed: sent by the side that
//! shuts down, and answered once by the other, 5 want: the writer found no room and asks for
//! the tail), 4 zero bytes, `value: u64`. A reader sends its tail every
//! [`TAIL_EVERY`] bytes and when asked, not after every read. The hello: kind 4, 4 zero bytes, magic `MOJIMUCX`, `version: u32`, `capacity: u32`,
//! ring address `u64`, key length `u32`, the key.
//!
//! The peer may be hostile or broken: its counters are checked (a head that goes back or claims
//! more than the ring holds, a tail beyond what was sent: `InvalidData`, the connection ends),
//! and every byte is copied out of the ring before anything looks at it. A peer's death fails
//! the endpoint (UCX's peer error handling) and ends the connection.
//!
//! [`UcxConn::register`] and [`UcxConn::remote_region`] expose the same machinery for memory of
//! the caller's: a mapping registered on one side is written at an offset by the other
//! ([`RemoteRegion::put`] + [`RemoteRegion::flush`]); its key travels as bytes. A lane's log is
//! offered that way ([`Conn::offer_memory`]: the log's file mapped and registered while the
//! connection lives, the key as the token) and taken as a [`crate::PeerMemory`]. The peer can
//! put into an offered log at any time: [`Conn::shares_with_remote_writers`] says so, and the
//! node copies such a log's records out before it checks and applies them.

use crate::{Conn, Transport};
use mojim_region::MappedFile;
use mojim_ucx::{Context, Registered, RkeyId, Worker};
use rustix::event::{PollFd, PollFlags};
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes of each side's receive ring (a power of two).
pub const RING_BYTES: usize = 4 << 20;
/// The active-message id of doorbells and hellos.
const AM_ID: u32 = 0x4d4a;
const HELLO_MAGIC: &[u8; 8] = b"MOJIMUCX";
const HELLO_VERSION: u32 = 1;
/// The longest packed remote key a hello may carry.
const MAX_RKEY: usize = 4096;
const KIND_HEAD: u32 = 1;
const KIND_TAIL: u32 = 2;
const KIND_CLOSED: u32 = 3;
const KIND_HELLO: u32 = 4;
const KIND_WANT: u32 = 5;
/// A reader hands its consumed position back once this many bytes were read since it last did,
/// or when the writer asks (it found no room).
const TAIL_EVERY: u64 = RING_BYTES as u64 / 8;
/// The longest a sleeper sleeps before it looks at the connection again (liveness).
const LIVENESS_EVERY: Duration = Duration::from_millis(20);
/// How long a closing side waits for the peer's answer to its `closed` before it closes the
/// endpoint anyway (a peer that is gone or does not progress).
const LINGER: Duration = Duration::from_millis(500);
/// How long the accepting side waits for the connecting side's hello.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
/// The prefix of a UCX address.
pub const PREFIX: &str = "ucx:";

/// Whether an address names a UCX listener: `ucx:<host>:<port>`.
pub fn is_ucx_addr(addr: &str) -> bool {
    addr.starts_with(PREFIX)
}

/// The socket address of a `ucx:<host>:<port>` address.
pub fn socket_addr(addr: &str) -> io::Result<SocketAddr> {
    let rest = addr.strip_prefix(PREFIX).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr:?} is not a UCX address: write ucx:<host>:<port>"),
        )
    })?;
    rest.to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr:?} resolves to nothing")))
}

fn ucx_err(e: mojim_ucx::Error) -> io::Error {
    e.into()
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// What the active-message handler records (it runs inside progress, on whichever thread of
/// this side progressed the worker).
struct Inbox {
    /// Bytes the peer says it wrote into our ring, and the bytes of our ring's peer...
    peer_head: AtomicU64,
    /// ...and the bytes of what we sent that the peer says it consumed.
    peer_tail: AtomicU64,
    peer_closed: AtomicBool,
    /// The peer's writer found no room and waits for our tail.
    peer_wants: AtomicBool,
    /// UCX's status when the endpoint failed (0: it did not).
    failed: AtomicI32,
    /// A doorbell that broke the rules: what it was.
    corrupt: Mutex<Option<String>>,
    hello: Mutex<Option<Vec<u8>>>,
    /// Eventfds that wake a sleeping reader or writer of this side when the handler ran on
    /// another thread, and whether each sleeps.
    wake_rx: OwnedFd,
    wake_tx: OwnedFd,
    rx_sleeps: AtomicU32,
    tx_sleeps: AtomicU32,
    /// Threads of this side waiting in [`Shared::wait`] (they progress the worker themselves),
    /// and the eventfd that tells the progress thread the last of them left.
    waiters: AtomicU32,
    wake_progress: OwnedFd,
    /// The progress thread sleeps until the last waiter leaves (only then is it woken).
    progress_parked: AtomicBool,
}

impl Inbox {
    fn new() -> io::Result<Inbox> {
        let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
        Ok(Inbox {
            peer_head: AtomicU64::new(0),
            peer_tail: AtomicU64::new(0),
            peer_closed: AtomicBool::new(false),
            peer_wants: AtomicBool::new(false),
            failed: AtomicI32::new(0),
            corrupt: Mutex::new(None),
            hello: Mutex::new(None),
            wake_rx: rustix::event::eventfd(0, flags)?,
            wake_tx: rustix::event::eventfd(0, flags)?,
            rx_sleeps: AtomicU32::new(0),
            tx_sleeps: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            wake_progress: rustix::event::eventfd(0, flags)?,
            progress_parked: AtomicBool::new(false),
        })
    }

    fn wake(&self) {
        for (fd, sleeps) in [(&self.wake_rx, &self.rx_sleeps), (&self.wake_tx, &self.tx_sleeps)] {
            if sleeps.load(Ordering::SeqCst) != 0 {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
    }

    /// Marks a thread of this side as one that progresses the worker itself (a read or write
    /// under way), until the guard drops: the progress thread stands aside meanwhile, so that
    /// the two do not take the worker's lock from each other.
    fn waiting(&self) -> Waiting<'_> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(self)
    }

    fn set_corrupt(&self, what: String) {
        let mut c = self.corrupt.lock().unwrap_or_else(|p| p.into_inner());
        c.get_or_insert(what);
    }

    /// One message from the peer (copied out by UCX; `msg` is ours to parse).
    fn on_message(&self, msg: &[u8]) {
        if msg.len() < 16 {
            self.set_corrupt(format!("a {}-byte doorbell", msg.len()));
            self.wake();
            return;
        }
        let kind = u32::from_le_bytes(msg[0..4].try_into().expect("4 bytes"));
        let value = u64::from_le_bytes(msg[8..16].try_into().expect("8 bytes"));
        match kind {
            KIND_HEAD => {
                let old = self.peer_head.swap(value, Ordering::SeqCst);
                if value < old {
                    self.set_corrupt(format!("the ring's end went back from {old} to {value}"));
                }
            }
            KIND_TAIL => {
                let old = self.peer_tail.swap(value, Ordering::SeqCst);
                if value < old {
                    self.set_corrupt(format!("the consumed position went back from {old} to {value}"));
                }
            }
            KIND_CLOSED => self.peer_closed.store(true, Ordering::SeqCst),
            KIND_WANT => self.peer_wants.store(true, Ordering::SeqCst),
            KIND_HELLO => *self.hello.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg.to_vec()),
            other => self.set_corrupt(format!("a doorbell of kind {other}")),
        }
        self.wake();
    }
}

/// See [`Inbox::waiting`].
struct Waiting<'a>(&'a Inbox);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // The last waiter leaving wakes a parked progress thread; the thread raises its flag
        // before it looks at the count, so one of the two sees the other.
        if self.0.waiters.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.progress_parked.load(Ordering::SeqCst)
        {
            let _ = rustix::io::write(&self.0.wake_progress, &1u64.to_ne_bytes());
        }
    }
}

fn doorbell(kind: u32, value: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[0..4].copy_from_slice(&kind.to_le_bytes());
    m[8..16].copy_from_slice(&value.to_le_bytes());
    m
}

/// A memory file of `len` bytes, mapped.
fn anonymous_map(len: usize) -> io::Result<Arc<MappedFile>> {
    let fd = rustix::fs::memfd_create("mojim-ucx", rustix::fs::MemfdFlags::CLOEXEC)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    Ok(Arc::new(crate::peer_memory::map_file(fd.as_fd())?))
}

/// What both handles of a connection share.
struct Shared {
    worker: Mutex<Worker>,
    /// A duplicate of the worker's event fd, slept on without the worker's lock.
    efd: OwnedFd,
    inbox: Arc<Inbox>,
    /// Our receive ring, registered.
    rx: Registered,
    /// Bytes read from `rx` (the reader's), and the last value of it sent to the peer.
    rx_tail: AtomicU64,
    tail_sent: AtomicU64,
    /// Bytes written into the peer's ring (the writer's).
    tx_head: AtomicU64,
    peer_ring: u64,
    peer_rkey: RkeyId,
    /// Shut down on this side; also stops a wait inside UCX (the worker's cancel flag).
    closed: Arc<AtomicBool>,
    /// Our `closed` doorbell went out.
    closed_sent: AtomicBool,
    peer: String,
    recv_timeout: AtomicU64,
    send_timeout: AtomicU64,
    reading: Mutex<()>,
    writing: Mutex<()>,
    /// Memory offered to the peer ([`Conn::offer_memory`]): registered while the connection
    /// lives.
    offered: Mutex<Vec<LocalRegion>>,
}

/// A connection through UCX.
pub struct UcxConn {
    shared: Arc<Shared>,
    busy_poll: Duration,
}

enum Ended {
    Closed,
    TimedOut,
}

#[derive(Clone, Copy)]
enum Side {
    Rx,
    Tx,
}

impl Shared {
    fn worker(&self) -> MutexGuard<'_, Worker> {
        self.worker.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_inbox(&self) -> io::Result<()> {
        if let Some(what) = self.inbox.corrupt.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            self.closed.store(true, Ordering::Release);
            return Err(invalid(format!("the peer {} broke the ring protocol: {what}", self.peer)));
        }
        Ok(())
    }

    fn failed(&self) -> bool {
        self.inbox.failed.load(Ordering::Acquire) != 0
    }

    fn ended(&self) -> bool {
        self.closed.load(Ordering::Acquire) || self.inbox.peer_closed.load(Ordering::Acquire) || self.failed()
    }

    fn reset(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionReset,
            format!(
                "the UCX connection to {} failed (UCX status {})",
                self.peer,
                self.inbox.failed.load(Ordering::Acquire)
            ),
        )
    }

    /// Bytes readable in our ring; an error if the peer's head is not believable.
    fn readable(&self) -> io::Result<usize> {
        self.check_inbox()?;
        let head = self.inbox.peer_head.load(Ordering::Acquire);
        let tail = self.rx_tail.load(Ordering::Relaxed);
        match head.checked_sub(tail) {
            Some(n) if n <= RING_BYTES as u64 => Ok(n as usize),
            _ => {
                self.closed.store(true, Ordering::Release);
                Err(invalid(format!(
                    "the peer {} corrupted the ring: {head} bytes written, {tail} read, {RING_BYTES} held at most",
                    self.peer
                )))
            }
        }
    }

    /// Room in the peer's ring; an error if the peer's tail is not believable.
    fn writable(&self) -> io::Result<usize> {
        self.check_inbox()?;
        let head = self.tx_head.load(Ordering::Relaxed);
        let tail = self.inbox.peer_tail.load(Ordering::Acquire);
        match head.checked_sub(tail) {
            Some(n) if n <= RING_BYTES as u64 => Ok(RING_BYTES - n as usize),
            _ => {
                self.closed.store(true, Ordering::Release);
                Err(invalid(format!(
                    "the peer {} corrupted the ring: it says it read {tail} bytes, {head} were sent",
                    self.peer
                )))
            }
        }
    }

    fn deadline(timeout: &AtomicU64) -> Option<Instant> {
        match timeout.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Instant::now() + Duration::from_nanos(ns)),
        }
    }

    /// Waits until `ready()` holds: progresses the worker for up to `spin`, then sleeps on the
    /// worker's event fd (armed) and this side's wake-up fd (written by the doorbells' handler
    /// when another thread ran it), until `deadline`. While a thread waits here, the progress
    /// thread stands aside.
    fn wait(
        &self,
        side: Side,
        spin: Duration,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
    ) -> Result<(), Ended> {
        let _waiting = self.inbox.waiting();
        let (wake, sleeps) = match side {
            Side::Rx => (&self.inbox.wake_rx, &self.inbox.rx_sleeps),
            Side::Tx => (&self.inbox.wake_tx, &self.inbox.tx_sleeps),
        };
        let start = Instant::now();
        loop {
            {
                let mut w = self.worker();
                w.progress();
                self.answer_want(&mut w);
            }
            if ready() {
                return Ok(());
            }
            if self.ended() {
                return Err(Ended::Closed);
            }
            if start.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            // Say we sleep, then look once more: the handler stores before it reads the flag,
            // so one of the two sees the other (no lost wake-up).
            sleeps.store(1, Ordering::SeqCst);
            let armed = {
                let mut w = self.worker();
                w.progress();
                if ready() || self.ended() {
                    false
                } else {
                    w.arm().unwrap_or(false)
                }
            };
            if armed {
                let mut nap = LIVENESS_EVERY;
                if let Some(d) = deadline {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        sleeps.store(0, Ordering::SeqCst);
                        return Err(Ended::TimedOut);
                    }
                    nap = nap.min(left);
                }
                let ts = rustix::event::Timespec {
                    tv_sec: nap.as_secs() as i64,
                    tv_nsec: i64::from(nap.subsec_nanos()),
                };
                let mut fds = [PollFd::new(&self.efd, PollFlags::IN), PollFd::new(wake, PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, Some(&ts));
                let mut drain = [0u8; 8];
                let _ = rustix::io::read(wake, &mut drain);
            }
            sleeps.store(0, Ordering::SeqCst);
            if deadline.is_some_and(|d| Instant::now() >= d) && !ready() && !self.ended() {
                return Err(Ended::TimedOut);
            }
        }
    }

    fn read(&self, buf: &mut [u8], spin: Duration) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let _one = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let _waiting = self.inbox.waiting();
        let deadline = Self::deadline(&self.recv_timeout);
        let mut n = self.readable()?;
        if n == 0 {
            let ready = || self.readable().map_or(true, |n| n > 0);
            match self.wait(Side::Rx, spin, deadline, ready) {
                Ok(()) => n = self.readable()?,
                Err(Ended::TimedOut) => return Err(io::ErrorKind::WouldBlock.into()),
                // What the peer wrote before it went is still read.
                Err(Ended::Closed) => n = self.readable()?,
            }
            if n == 0 {
                if self.failed() && !self.closed.load(Ordering::Acquire) {
                    return Err(self.reset());
                }
                return Ok(0);
            }
        }
        let n = n.min(buf.len());
        let tail = self.rx_tail.load(Ordering::Relaxed);
        let at = (tail % RING_BYTES as u64) as usize;
        let first = n.min(RING_BYTES - at);
        let map = self.rx.map();
        map.read(at, &mut buf[..first]);
        map.read(0, &mut buf[first..n]);
        let tail = tail + n as u64;
        self.rx_tail.store(tail, Ordering::SeqCst);
        if tail - self.tail_sent.load(Ordering::Relaxed) >= TAIL_EVERY {
            self.send_tail(&mut self.worker(), false);
        } else {
            self.answer_want(&mut self.worker());
        }
        Ok(n)
    }

    /// Hands our consumed position back to the peer's writer. The bytes are ours already: a
    /// failure to send shows on the next call.
    fn send_tail(&self, w: &mut Worker, again: bool) {
        let tail = self.rx_tail.load(Ordering::SeqCst);
        if self.ended() || (!again && tail == self.tail_sent.load(Ordering::Relaxed)) {
            return;
        }
        self.tail_sent.store(tail, Ordering::Relaxed);
        let _ = w.am_send(AM_ID, &doorbell(KIND_TAIL, tail), None);
    }

    /// Sends the tail if the peer's writer asked for it (it waits for room).
    fn answer_want(&self, w: &mut Worker) {
        if self.inbox.peer_wants.swap(false, Ordering::SeqCst) {
            // Sent even if unchanged: the writer may have asked before our last tail arrived.
            self.send_tail(w, true);
        }
        // A peer that closed waits for our `closed` before it closes its endpoint (so that
        // nothing it sent is lost to the endpoint's end): answer it once.
        if self.inbox.peer_closed.load(Ordering::SeqCst)
            && !self.failed()
            && !self.closed_sent.swap(true, Ordering::SeqCst)
        {
            let _ = w.am_send(AM_ID, &doorbell(KIND_CLOSED, 0), Some(Instant::now() + LINGER));
        }
    }

    fn write(&self, bufs: &[IoSlice<'_>], spin: Duration) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let _waiting = self.inbox.waiting();
        let deadline = Self::deadline(&self.send_timeout);
        if self.failed() {
            return Err(self.reset());
        }
        if self.ended() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut room = self.writable()?;
        if room == 0 {
            // The reader hands its tail back only every so often, or when asked.
            self.worker().am_send(AM_ID, &doorbell(KIND_WANT, 0), deadline).map_err(ucx_err)?;
            let ready = || self.writable().map_or(true, |n| n > 0);
            match self.wait(Side::Tx, Duration::ZERO, deadline, ready) {
                Ok(()) => room = self.writable()?,
                Err(Ended::TimedOut) => return Err(io::ErrorKind::WouldBlock.into()),
                Err(Ended::Closed) if self.failed() => return Err(self.reset()),
                Err(Ended::Closed) => return Err(io::ErrorKind::BrokenPipe.into()),
            }
        }
        let head = self.tx_head.load(Ordering::Relaxed);
        let mut put = 0;
        let mut w = self.worker();
        w.set_spin(spin);
        for b in bufs {
            let mut b: &[u8] = b;
            while !b.is_empty() && put < room {
                let at = ((head + put as u64) % RING_BYTES as u64) as usize;
                let n = b.len().min(room - put).min(RING_BYTES - at);
                w.put(&b[..n], self.peer_ring + at as u64, self.peer_rkey, deadline).map_err(ucx_err)?;
                put += n;
                b = &b[n..];
            }
            if put == room {
                break;
            }
        }
        w.flush(deadline).map_err(ucx_err)?;
        let head = head + put as u64;
        self.tx_head.store(head, Ordering::Release);
        w.am_send(AM_ID, &doorbell(KIND_HEAD, head), deadline).map_err(ucx_err)?;
        Ok(put)
    }

    fn shutdown(&self) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // The peer learns it from a doorbell. A thread blocked inside UCX holds the worker: the
        // closed flag (the worker's cancel flag) stops it, and the endpoint's close tells the peer.
        if let Ok(mut w) = self.worker.try_lock() {
            if !self.failed() && !self.closed_sent.swap(true, Ordering::SeqCst) {
                let _ = w.am_send(AM_ID, &doorbell(KIND_CLOSED, 0), Some(Instant::now() + LINGER));
            }
        }
        self.closed.store(true, Ordering::Release);
        for fd in [&self.inbox.wake_rx, &self.inbox.wake_tx] {
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle of this side: the peer sees the end. Closing the endpoint at once
        // could fail it at the peer before the peer took in what was sent last; so wait (up to
        // LINGER) for the peer's own `closed`, which it sends once it processed ours.
        self.shutdown();
        let linger = Instant::now() + LINGER;
        let inbox = self.inbox.clone();
        let w = self.worker.get_mut().unwrap_or_else(|p| p.into_inner());
        while w.has_ep()
            && !inbox.peer_closed.load(Ordering::SeqCst)
            && inbox.failed.load(Ordering::SeqCst) == 0
            && Instant::now() < linger
        {
            if w.progress() == 0 && w.arm().unwrap_or(false) {
                let efd = w.efd();
                let mut fds = [PollFd::new(&efd, PollFlags::IN)];
                let ts = rustix::event::Timespec { tv_sec: 0, tv_nsec: 1_000_000 };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
        }
        w.destroy_rkey(self.peer_rkey);
        w.close_ep();
    }
}

impl Read for UcxConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.shared.read(buf, self.busy_poll)
    }
}

impl Write for UcxConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.shared.write(&[IoSlice::new(buf)], self.busy_poll)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.shared.write(bufs, self.busy_poll)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn for UcxConn {
    fn try_clone(&self) -> io::Result<Self> {
        Ok(UcxConn { shared: self.shared.clone(), busy_poll: self.busy_poll })
    }

    fn peer(&self) -> String {
        self.shared.peer.clone()
    }

    fn shutdown(&self) {
        self.shared.shutdown();
    }

    fn set_busy_poll(&mut self, spin: Duration) {
        self.busy_poll = spin;
    }

    fn reads_ahead(&self) -> bool {
        false
    }

    /// Maps `file` and registers its bytes from `from` to its end (and none before: a lane's
    /// log's header page stays out of the peer's reach where the fabric checks registrations)
    /// for the peer to put into, for as long as the connection lives; the token is the
    /// registration's [`LocalRegion::key`].
    fn offer_memory(&self, file: &std::fs::File, from: u64) -> io::Result<Option<Vec<u8>>> {
        let map = crate::peer_memory::map_file(file.as_fd())?;
        let from = usize::try_from(from).ok().filter(|&f| f < map.len()).ok_or_else(|| {
            invalid(format!("offer bytes from {from} of a file of {} bytes: nothing to offer", map.len()))
        })?;
        let len = map.len() - from;
        let region = self.register_part(Arc::new(map), from, len)?;
        let key = region.key();
        let most = mojim_format::handshake::LOG_TOKEN_MAX;
        if key.len() > most {
            return Err(invalid(format!(
                "the key of an offered log is {} bytes, more than the {most} a Log frame carries",
                key.len()
            )));
        }
        self.shared.offered.lock().unwrap_or_else(|p| p.into_inner()).push(region);
        Ok(Some(key))
    }

    /// The peer's registered memory that `token` ([`LocalRegion::key`]) names, of at least
    /// `len` bytes.
    fn take_memory(&self, len: usize, token: &[u8]) -> io::Result<crate::PeerMemory> {
        crate::PeerMemory::remote(self.remote_region(token)?, len)
    }

    fn shares_with_remote_writers(&self) -> bool {
        true
    }

    fn set_recv_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let ns = timeout.map_or(0, |t| t.as_nanos().clamp(1, u64::MAX as u128) as u64);
        self.shared.recv_timeout.store(ns, Ordering::Relaxed);
        Ok(())
    }

    fn set_send_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        let ns = timeout.map_or(0, |t| t.as_nanos().clamp(1, u64::MAX as u128) as u64);
        self.shared.send_timeout.store(ns, Ordering::Relaxed);
        Ok(())
    }
}

/// Memory of this side registered for the peer to write ([`UcxConn::register`]).
pub struct LocalRegion {
    reg: Registered,
}

impl LocalRegion {
    /// What the peer needs to write here ([`UcxConn::remote_region`]): the address and length
    /// of the registered bytes, then UCX's packed remote key. A handshake carries it as bytes.
    pub fn key(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(16 + self.reg.rkey().len());
        k.extend_from_slice(&self.reg.address().to_le_bytes());
        k.extend_from_slice(&(self.reg.len() as u64).to_le_bytes());
        k.extend_from_slice(self.reg.rkey());
        k
    }

    /// The mapping the registered bytes are part of (read it with copies: the peer writes
    /// them at any time); they start at [`LocalRegion::offset`] of it.
    pub fn map(&self) -> &Arc<MappedFile> {
        self.reg.map()
    }

    /// Where the registered bytes start in [`LocalRegion::map`].
    pub fn offset(&self) -> usize {
        self.reg.offset()
    }
}

/// The peer's registered memory, written at an offset with `put` and made visible with `flush`.
pub struct RemoteRegion {
    shared: Arc<Shared>,
    rkey: RkeyId,
    base: u64,
    len: u64,
}

impl RemoteRegion {
    /// Bytes of the region.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Puts `bufs`, one after another, at `offset` of the region. They are in the peer's memory
    /// once [`RemoteRegion::flush`] returns.
    pub fn put(&self, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if offset.checked_add(total).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a put of {total} bytes at {offset} overruns the peer's region of {} bytes",
                    self.len
                ),
            ));
        }
        if self.shared.ended() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let deadline = Shared::deadline(&self.shared.send_timeout);
        let _waiting = self.shared.inbox.waiting();
        let mut w = self.shared.worker();
        let mut at = self.base + offset;
        for b in bufs {
            if !b.is_empty() {
                w.put(b, at, self.rkey, deadline).map_err(ucx_err)?;
            }
            at += b.len() as u64;
        }
        Ok(())
    }

    /// Waits until every put so far is in the peer's memory.
    pub fn flush(&self) -> io::Result<()> {
        let deadline = Shared::deadline(&self.shared.send_timeout);
        let _waiting = self.shared.inbox.waiting();
        self.shared.worker().flush(deadline).map_err(ucx_err)
    }
}

impl Drop for RemoteRegion {
    fn drop(&mut self) {
        self.shared.worker().destroy_rkey(self.rkey);
    }
}

impl UcxConn {
    /// Registers `map` so that the peer can write it (after it got [`LocalRegion::key`]).
    pub fn register(&self, map: Arc<MappedFile>) -> io::Result<LocalRegion> {
        let len = map.len();
        self.register_part(map, 0, len)
    }

    /// Registers bytes `[offset, offset + len)` of `map` (`offset` a multiple of 4096) so that
    /// the peer can write them, and only them where the fabric checks registrations (see
    /// `mojim_ucx::Registered::part`); the peer addresses them from 0.
    pub fn register_part(&self, map: Arc<MappedFile>, offset: usize, len: usize) -> io::Result<LocalRegion> {
        let ctx = Context::global().map_err(ucx_err)?;
        Ok(LocalRegion { reg: Registered::part(&ctx, map, offset, len).map_err(ucx_err)? })
    }

    /// The peer's region whose [`LocalRegion::key`] is `key`.
    pub fn remote_region(&self, key: &[u8]) -> io::Result<RemoteRegion> {
        if key.len() < 16 || key.len() > 16 + MAX_RKEY {
            return Err(invalid(format!("a remote region key of {} bytes", key.len())));
        }
        let base = u64::from_le_bytes(key[0..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes"));
        let rkey = self.shared.worker().unpack_rkey(&key[16..]).map_err(ucx_err)?;
        Ok(RemoteRegion { shared: self.shared.clone(), rkey, base, len })
    }
}

/// Progresses a connection's worker whenever UCX has an event for it and no thread of this side
/// waits in a read or a write (those progress it themselves): puts and doorbells arrive although
/// no thread of this side is reading (UCX's tcp transport emulates a put with messages that the
/// target's progress applies), as a socket's buffer takes bytes while its reader is busy. Ends
/// with the connection.
fn progress_thread(shared: std::sync::Weak<Shared>, efd: OwnedFd) {
    let nap = rustix::event::Timespec { tv_sec: 0, tv_nsec: LIVENESS_EVERY.as_nanos() as i64 };
    loop {
        let Some(s) = shared.upgrade() else { return };
        let inbox = s.inbox.clone();
        let armed = if inbox.waiters.load(Ordering::SeqCst) > 0 {
            None
        } else {
            let mut w = s.worker();
            while w.progress() > 0 {}
            s.answer_want(&mut w);
            Some(w.arm().unwrap_or(false))
        };
        drop(s);
        match armed {
            // A waiter progresses: sleep until the last one leaves.
            None => {
                inbox.progress_parked.store(true, Ordering::SeqCst);
                let mut fds = [PollFd::new(&inbox.wake_progress, PollFlags::IN)];
                if inbox.waiters.load(Ordering::SeqCst) > 0 {
                    let _ = rustix::event::poll(&mut fds, Some(&nap));
                }
                inbox.progress_parked.store(false, Ordering::SeqCst);
                let mut drain = [0u8; 8];
                let _ = rustix::io::read(&inbox.wake_progress, &mut drain);
            }
            Some(true) => {
                let mut fds =
                    [PollFd::new(&efd, PollFlags::IN), PollFd::new(&inbox.wake_progress, PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, Some(&nap));
                let mut drain = [0u8; 8];
                let _ = rustix::io::read(&inbox.wake_progress, &mut drain);
            }
            Some(false) => {}
        }
    }
}

/// A UCX listener (with its worker); new connections get workers of their own.
pub struct UcxListener {
    listener: Mutex<mojim_ucx::Listener>,
    efd: OwnedFd,
    addr: String,
}

/// Connections through UCX.
#[derive(Clone, Copy, Debug, Default)]
pub struct UcxTransport;

fn hello(ring: &Registered) -> Vec<u8> {
    let mut m = doorbell(KIND_HELLO, 0).to_vec();
    m.truncate(8);
    m.extend_from_slice(HELLO_MAGIC);
    m.extend_from_slice(&HELLO_VERSION.to_le_bytes());
    m.extend_from_slice(&(RING_BYTES as u32).to_le_bytes());
    m.extend_from_slice(&ring.address().to_le_bytes());
    m.extend_from_slice(&(ring.rkey().len() as u32).to_le_bytes());
    m.extend_from_slice(ring.rkey());
    m
}

/// The peer's ring address and packed key, from its hello.
fn parse_hello(m: &[u8], peer: &str) -> io::Result<(u64, Vec<u8>)> {
    if m.len() < 36 || &m[8..16] != HELLO_MAGIC {
        return Err(invalid(format!("{peer} did not send a UCX ring hello")));
    }
    let version = u32::from_le_bytes(m[16..20].try_into().expect("4 bytes"));
    if version != HELLO_VERSION {
        return Err(invalid(format!(
            "{peer} speaks UCX ring hello version {version}, this build {HELLO_VERSION}"
        )));
    }
    let capacity = u32::from_le_bytes(m[20..24].try_into().expect("4 bytes")) as usize;
    if capacity != RING_BYTES {
        return Err(invalid(format!("{peer} has rings of {capacity} bytes, this build {RING_BYTES}")));
    }
    let addr = u64::from_le_bytes(m[24..32].try_into().expect("8 bytes"));
    let klen = u32::from_le_bytes(m[32..36].try_into().expect("4 bytes")) as usize;
    if klen > MAX_RKEY || m.len() != 36 + klen {
        return Err(invalid(format!("{peer} sent a hello with a key of {klen} bytes in {} bytes", m.len())));
    }
    Ok((addr, m[36..].to_vec()))
}

impl UcxTransport {
    /// Sets up a connection on `worker` (its endpoint made): the ring, the hellos.
    fn establish(
        mut worker: Worker,
        inbox: Arc<Inbox>,
        peer: String,
        deadline: Instant,
    ) -> io::Result<UcxConn> {
        let ctx = Context::global().map_err(ucx_err)?;
        let rx = Registered::new(&ctx, anonymous_map(RING_BYTES)?).map_err(ucx_err)?;
        worker.am_send(AM_ID, &hello(&rx), Some(deadline)).map_err(ucx_err)?;
        let theirs = loop {
            worker.progress();
            if let Some(h) = inbox.hello.lock().unwrap_or_else(|p| p.into_inner()).take() {
                break h;
            }
            if inbox.failed.load(Ordering::Acquire) != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!(
                        "no UCX connection to {peer} (UCX status {})",
                        inbox.failed.load(Ordering::Acquire)
                    ),
                ));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{peer} sent no UCX hello in time"),
                ));
            }
            if worker.arm().map_err(ucx_err)? {
                let efd = worker.efd();
                let mut fds = [PollFd::new(&efd, PollFlags::IN)];
                let ts = rustix::event::Timespec { tv_sec: 0, tv_nsec: 1_000_000 };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
        };
        let (peer_ring, key) = parse_hello(&theirs, &peer)?;
        let peer_rkey = worker.unpack_rkey(&key).map_err(ucx_err)?;
        let closed = Arc::new(AtomicBool::new(false));
        worker.set_cancel(closed.clone());
        let efd = worker.efd_dup()?;
        let shared = Arc::new(Shared {
            efd: worker.efd_dup()?,
            worker: Mutex::new(worker),
            inbox,
            rx,
            rx_tail: AtomicU64::new(0),
            tail_sent: AtomicU64::new(0),
            tx_head: AtomicU64::new(0),
            peer_ring,
            peer_rkey,
            closed,
            closed_sent: AtomicBool::new(false),
            peer,
            recv_timeout: AtomicU64::new(0),
            send_timeout: AtomicU64::new(0),
            reading: Mutex::new(()),
            writing: Mutex::new(()),
            offered: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("mojim-ucx-progress".into())
            .spawn(move || progress_thread(weak, efd))?;
        Ok(UcxConn { shared, busy_poll: Duration::ZERO })
    }

    /// A worker whose messages and failures go to a new inbox.
    fn worker() -> io::Result<(Worker, Arc<Inbox>)> {
        let ctx = Context::global().map_err(ucx_err)?;
        let mut worker = Worker::new(&ctx).map_err(ucx_err)?;
        let inbox = Arc::new(Inbox::new()?);
        let i = inbox.clone();
        worker.set_am_handler(AM_ID, Box::new(move |m| i.on_message(m))).map_err(ucx_err)?;
        Ok((worker, inbox))
    }

    fn on_error(inbox: &Arc<Inbox>) -> mojim_ucx::worker::ErrHandler {
        let i = inbox.clone();
        Box::new(move |status| {
            i.failed.store(if status == 0 { -1 } else { status }, Ordering::Release);
            i.wake();
        })
    }
}

impl Transport for UcxTransport {
    type Conn = UcxConn;
    type Listener = UcxListener;

    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<UcxConn> {
        let sa = socket_addr(addr)?;
        let (mut worker, inbox) = Self::worker()?;
        worker.connect(sa, Self::on_error(&inbox)).map_err(ucx_err)?;
        Self::establish(
            worker,
            inbox,
            addr.to_string(),
            Instant::now() + timeout.max(Duration::from_millis(1)),
        )
    }

    fn listen(&self, addr: &str) -> io::Result<UcxListener> {
        let sa = socket_addr(addr)?;
        let ctx = Context::global().map_err(ucx_err)?;
        let listener = mojim_ucx::Listener::new(&ctx, sa).map_err(|e| {
            let e: io::Error = e.into();
            io::Error::new(io::ErrorKind::AddrInUse, format!("cannot listen on {addr}: {e}"))
        })?;
        let bound = listener.local_addr();
        let efd = listener.worker_ref().efd_dup()?;
        Ok(UcxListener { listener: Mutex::new(listener), efd, addr: format!("{PREFIX}{bound}") })
    }

    fn accept(&self, listener: &UcxListener) -> io::Result<UcxConn> {
        let req = loop {
            let armed = {
                let mut l = listener.listener.lock().unwrap_or_else(|p| p.into_inner());
                l.worker().progress();
                if let Some(r) = l.next_request() {
                    break r;
                }
                l.worker().arm().map_err(ucx_err)?
            };
            if armed {
                let mut fds = [PollFd::new(&listener.efd, PollFlags::IN)];
                let ts = rustix::event::Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
        };
        let (mut worker, inbox) = Self::worker()?;
        worker.accept(req, Self::on_error(&inbox)).map_err(ucx_err)?;
        let peer = format!("{} (accepted)", listener.addr);
        Self::establish(worker, inbox, peer, Instant::now() + HANDSHAKE_TIMEOUT)
            .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()))
    }

    fn local_addr(&self, listener: &UcxListener) -> io::Result<String> {
        Ok(listener.addr.clone())
    }
}

impl AsFd for UcxListener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.efd.as_fd()
    }
}

#[cfg(test)]
mod tests;
