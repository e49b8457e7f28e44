//! `shm`: a connection between two processes on one host through shared memory.
//!
//! A listener is a Unix socket at a path (`/dev/shm/mojim-m.sock`). The connecting side makes
//! an anonymous shared file (`memfd`) holding two byte rings, one per direction, and passes it
//! over the socket; both sides map it. From then on no byte of the stream goes through the
//! kernel: a sender copies into its ring and publishes the new end with a release store; the
//! receiver polls for it (`set_busy_poll`) and then sleeps on a futex word in the ring, which
//! the sender wakes only when the receiver said it sleeps. The socket stays open so that each
//! side notices the other's end: a process that exits or dies closes it.
//!
//! Layout of the shared file: two rings of [`RING_HEADER`] + capacity bytes each; ring 0
//! carries the connecting side's bytes, ring 1 the accepting side's. A ring's header:
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 8 | `head`: bytes ever written (the writer's) |
//! | 64 | 8 | `tail`: bytes ever read (the reader's) |
//! | 128 | 4 | `data`: bumped after every publish (the reader's futex word) |
//! | 132 | 4 | `reader_sleeps`: 1 while the reader sleeps or is about to |
//! | 192 | 4 | `space`: bumped after every read (the writer's futex word) |
//! | 196 | 4 | `writer_sleeps`: 1 while the writer sleeps or is about to |
//! | 256 | 4 | `closed`: 1 once either side shut the connection down |
//!
//! The peer may be hostile or broken: every byte is copied out of the ring before anything
//! looks at it, and a `head` that claims more bytes than the ring holds ends the connection.
//!
//! Files that cross the socket, and why their receiver is safe from the sender resizing them
//! (a store or load past the end of a shrunk file's mapping is SIGBUS, which kills the process):
//! - **The rings' file** (connecting side to accepting side). The connecting side makes it a
//!   `memfd` of exactly the rings' size and seals it against shrinking and growing
//!   (`F_SEAL_SHRINK | F_SEAL_GROW`, then `F_SEAL_SEAL`) before it sends it. The accepting side
//!   checks with `F_GET_SEALS`, before it maps anything, that both seals are there, that the
//!   file is on tmpfs (a `memfd` of huge pages could lose a page to a hole punched in it and
//!   fault), and that its size is exactly the rings'; anything else refuses that connection
//!   only. Neither side can then change the file's size while either maps it.
//! - **An offered log** (a mirror's, to the primary that asked to place its records:
//!   [`ShmConn::offer_memory`]). A file on disk cannot be sealed. Its sender is a mirror that has
//!   proved the cluster secret before the primary believes anything it says, and a mirror never
//!   resizes a log: a `LogFile` is made at its full length with every block reserved, and
//!   nothing truncates it after. A mirror that wanted to harm its primary would not need to (it
//!   could drop the groups it acknowledges). The other way, the primary receives the log opened
//!   for writing, as a shared writable mapping needs, so it could truncate it: it has proved the
//!   secret, which grants every operator's power over the mirror (docs/SECURITY.md).

use crate::peer_memory::map_file;
use crate::{Conn, PeerMemory, Transport};
use mojim_region::MappedFile;
use rustix::event::{PollFd, PollFlags};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::thread::futex;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of a ring's header.
pub const RING_HEADER: usize = 4096;
/// Bytes a ring holds (a power of two).
pub const RING_BYTES: usize = 4 << 20;
/// What the connecting side sends with the shared file: magic, version (u32), ring capacity
/// (u32), little-endian; the accepting side answers `k` once it has mapped the file.
pub const HELLO_MAGIC: &[u8; 8] = b"MOJIMSHM";
pub const HELLO_VERSION: u32 = 1;
pub const HELLO_LEN: usize = 16;
/// `f_type` of a tmpfs file system (`memfd`s live on one).
const TMPFS_MAGIC: u64 = 0x0102_1994;
/// The byte that comes with an offered memory's file on the socket.
const MEMORY_TAG: &[u8; 1] = b"m";
/// The longest a sleeper sleeps before it looks whether the peer is still there.
const LIVENESS_EVERY: Duration = Duration::from_millis(20);
/// How long the accepting side waits for a connecting side's hello.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(500);

const HEAD: usize = 0;
const TAIL: usize = 64;
const DATA: usize = 128;
const READER_SLEEPS: usize = 132;
const SPACE: usize = 192;
const WRITER_SLEEPS: usize = 196;
const CLOSED: usize = 256;

/// Whether an address names a shared-memory listener: an absolute path.
pub fn is_shm_addr(addr: &str) -> bool {
    addr.starts_with('/')
}

/// One direction of a connection, in the shared file at `base`.
#[derive(Clone, Copy)]
struct Ring {
    base: usize,
    capacity: usize,
}

impl Ring {
    fn head<'m>(&self, m: &'m MappedFile) -> &'m AtomicU64 {
        m.counter(self.base + HEAD)
    }
    fn tail<'m>(&self, m: &'m MappedFile) -> &'m AtomicU64 {
        m.counter(self.base + TAIL)
    }
    fn word<'m>(&self, m: &'m MappedFile, at: usize) -> &'m AtomicU32 {
        m.word(self.base + at)
    }
    fn data_at(&self) -> usize {
        self.base + RING_HEADER
    }
}

/// What both handles of a connection share.
struct Shared {
    map: MappedFile,
    /// The socket: kept to notice the peer's end.
    sock: UnixStream,
    rx: Ring,
    tx: Ring,
    peer: String,
    /// Receive and send timeouts in nanoseconds (0: none), as a socket's are per connection.
    recv_timeout: AtomicU64,
    send_timeout: AtomicU64,
    /// One reader and one writer at a time (the rings are single-producer single-consumer).
    reading: Mutex<()>,
    writing: Mutex<()>,
}

/// A connection through shared memory.
pub struct ShmConn {
    shared: Arc<Shared>,
    busy_poll: Duration,
}

/// Why a wait ended without the bytes or the room it waited for.
enum Ended {
    /// Shut down by either side, or the peer is gone.
    Closed,
    TimedOut,
}

impl Shared {
    fn new(map: MappedFile, sock: UnixStream, accepting: bool, capacity: usize, peer: String) -> Shared {
        let rings = [Ring { base: 0, capacity }, Ring { base: RING_HEADER + capacity, capacity }];
        let (rx, tx) = if accepting { (rings[0], rings[1]) } else { (rings[1], rings[0]) };
        Shared {
            map,
            sock,
            rx,
            tx,
            peer,
            recv_timeout: AtomicU64::new(0),
            send_timeout: AtomicU64::new(0),
            reading: Mutex::new(()),
            writing: Mutex::new(()),
        }
    }

    fn closed(&self) -> bool {
        self.rx.word(&self.map, CLOSED).load(Ordering::Acquire) != 0
            || self.tx.word(&self.map, CLOSED).load(Ordering::Acquire) != 0
    }

    /// Whether the peer's end of the socket is closed (it exited, died, or shut down).
    fn peer_gone(&self) -> bool {
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        let mut fds = [PollFd::new(&self.sock, PollFlags::RDHUP)];
        match rustix::event::poll(&mut fds, Some(&zero)) {
            // Readable is not the end: an offered memory's file may be waiting to be taken.
            Ok(n) => n > 0 && fds[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
            Err(_) => false,
        }
    }

    /// Waits until `ready()` holds: polls for up to `spin`, then sleeps on the futex word
    /// `word` with `sleeps` raised, until `deadline`.
    fn wait(
        &self,
        ring: Ring,
        word: usize,
        sleeps: usize,
        spin: Duration,
        deadline: Option<Instant>,
        ready: impl Fn() -> bool,
    ) -> Result<(), Ended> {
        let start = Instant::now();
        while start.elapsed() < spin {
            if ready() {
                return Ok(());
            }
            if self.closed() {
                return Err(Ended::Closed);
            }
            std::hint::spin_loop();
        }
        let (w, flag) = (ring.word(&self.map, word), ring.word(&self.map, sleeps));
        loop {
            flag.store(1, Ordering::SeqCst);
            let seen = w.load(Ordering::SeqCst);
            if ready() {
                flag.store(0, Ordering::SeqCst);
                return Ok(());
            }
            if self.closed() || self.peer_gone() {
                flag.store(0, Ordering::SeqCst);
                return Err(Ended::Closed);
            }
            let mut nap = LIVENESS_EVERY;
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    flag.store(0, Ordering::SeqCst);
                    return Err(Ended::TimedOut);
                }
                nap = nap.min(left);
            }
            let ts = rustix::thread::futex::Timespec {
                tv_sec: nap.as_secs() as i64,
                tv_nsec: i64::from(nap.subsec_nanos()),
            };
            // Shared (not private) futex: the peer process wakes it. EAGAIN (the word moved)
            // and timeouts only mean: look again.
            let _ = futex::wait(w, futex::Flags::empty(), seen, Some(&ts));
            flag.store(0, Ordering::SeqCst);
        }
    }

    /// Bumps `word` of `ring` and wakes its sleeper, if it said it sleeps.
    fn wake(&self, ring: Ring, word: usize, sleeps: usize) {
        let w = ring.word(&self.map, word);
        w.fetch_add(1, Ordering::SeqCst);
        if ring.word(&self.map, sleeps).load(Ordering::SeqCst) != 0 {
            let _ = futex::wake(w, futex::Flags::empty(), u32::MAX);
        }
    }

    fn deadline(timeout: &AtomicU64) -> Option<Instant> {
        match timeout.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Instant::now() + Duration::from_nanos(ns)),
        }
    }

    /// Bytes held in `ring` (written, not yet read); an error if the peer's counter is not
    /// believable. Each side loads the other side's counter with acquire ordering.
    fn held(&self, ring: Ring, ours_is_head: bool) -> io::Result<usize> {
        let (head_order, tail_order) = if ours_is_head {
            (Ordering::Relaxed, Ordering::Acquire)
        } else {
            (Ordering::Acquire, Ordering::Relaxed)
        };
        let head = ring.head(&self.map).load(head_order);
        let tail = ring.tail(&self.map).load(tail_order);
        match head.checked_sub(tail) {
            Some(n) if n <= ring.capacity as u64 => Ok(n as usize),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the peer {} corrupted the shared ring: {head} bytes written, {tail} read, {} held at most",
                    self.peer, ring.capacity
                ),
            )),
        }
    }

    /// Bytes readable in the receive ring.
    fn readable(&self) -> io::Result<usize> {
        self.held(self.rx, false)
    }

    /// Room in the send ring.
    fn writable(&self) -> io::Result<usize> {
        Ok(self.tx.capacity - self.held(self.tx, true)?)
    }

    fn read(&self, buf: &mut [u8], spin: Duration) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let _one = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Self::deadline(&self.recv_timeout);
        let mut n = self.readable()?;
        if n == 0 {
            let ready = || self.readable().map_or(true, |n| n > 0);
            match self.wait(self.rx, DATA, READER_SLEEPS, spin, deadline, ready) {
                Ok(()) => n = self.readable()?,
                Err(Ended::TimedOut) => return Err(io::ErrorKind::WouldBlock.into()),
                // What the peer wrote before it went is still read.
                Err(Ended::Closed) => n = self.readable()?,
            }
            if n == 0 {
                return Ok(0);
            }
        }
        let n = n.min(buf.len());
        let tail = self.rx.tail(&self.map).load(Ordering::Relaxed);
        let at = (tail % self.rx.capacity as u64) as usize;
        let first = n.min(self.rx.capacity - at);
        self.map.read(self.rx.data_at() + at, &mut buf[..first]);
        self.map.read(self.rx.data_at(), &mut buf[first..n]);
        self.rx.tail(&self.map).store(tail + n as u64, Ordering::Release);
        self.wake(self.rx, SPACE, WRITER_SLEEPS);
        Ok(n)
    }

    fn write(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let _one = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        if self.closed() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut room = self.writable()?;
        if room == 0 {
            let deadline = Self::deadline(&self.send_timeout);
            let ready = || self.writable().map_or(true, |n| n > 0);
            match self.wait(self.tx, SPACE, WRITER_SLEEPS, Duration::ZERO, deadline, ready) {
                Ok(()) => room = self.writable()?,
                Err(Ended::TimedOut) => return Err(io::ErrorKind::WouldBlock.into()),
                Err(Ended::Closed) => return Err(io::ErrorKind::BrokenPipe.into()),
            }
        }
        let head = self.tx.head(&self.map).load(Ordering::Relaxed);
        let mut put = 0;
        for b in bufs {
            let mut b: &[u8] = b;
            while !b.is_empty() && put < room {
                let at = ((head + put as u64) % self.tx.capacity as u64) as usize;
                let n = b.len().min(room - put).min(self.tx.capacity - at);
                self.map.write(self.tx.data_at() + at, &b[..n]);
                put += n;
                b = &b[n..];
            }
            if put == room {
                break;
            }
        }
        self.tx.head(&self.map).store(head + put as u64, Ordering::SeqCst);
        self.wake(self.tx, DATA, READER_SLEEPS);
        Ok(put)
    }

    fn shutdown(&self) {
        for ring in [self.rx, self.tx] {
            ring.word(&self.map, CLOSED).store(1, Ordering::SeqCst);
            self.wake(ring, DATA, READER_SLEEPS);
            self.wake(ring, SPACE, WRITER_SLEEPS);
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl Read for ShmConn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.shared.read(buf, self.busy_poll)
    }
}

impl Write for ShmConn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.shared.write(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.shared.write(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Conn for ShmConn {
    fn try_clone(&self) -> io::Result<Self> {
        Ok(ShmConn { shared: self.shared.clone(), busy_poll: self.busy_poll })
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

    /// Passes `file` over the socket; the peer maps it ([`ShmConn::take_memory`]) and writes
    /// its bytes from `from` on. The token is `from` (u64, little-endian); the file itself is
    /// what the peer needs, and it could write the bytes before `from` too: a peer on this
    /// socket runs as the file's owner (the socket is 0600), who can open the file anyway.
    fn offer_memory(&self, file: &std::fs::File, from: u64) -> io::Result<Option<Vec<u8>>> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        let fds = [file.as_fd()];
        control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        let sent = rustix::net::sendmsg(
            &self.shared.sock,
            &[IoSlice::new(MEMORY_TAG)],
            &mut control,
            rustix::net::SendFlags::empty(),
        )?;
        if sent != MEMORY_TAG.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the offer of memory was cut short"));
        }
        Ok(Some(from.to_le_bytes().to_vec()))
    }

    /// Receives the file the peer offered and maps it. Waits for it as long as a receive may
    /// block, or [`HANDSHAKE_TIMEOUT`] if that is forever.
    fn take_memory(&self, len: usize, token: &[u8]) -> io::Result<PeerMemory> {
        let Ok(from) = <[u8; 8]>::try_from(token) else {
            return Err(invalid(format!(
                "{} offered shared memory with a token of {} bytes; shared memory takes 8 (where in \
                 the file the offer starts: a peer of an older build sends none)",
                self.shared.peer,
                token.len()
            )));
        };
        let from = usize::try_from(u64::from_le_bytes(from)).unwrap_or(usize::MAX);
        let sock = &self.shared.sock;
        let wait = Shared::deadline(&self.shared.recv_timeout)
            .map_or(HANDSHAKE_TIMEOUT, |d| d.saturating_duration_since(Instant::now()));
        sock.set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
        let mut tag = [0u8; 1];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut tag)],
            &mut control,
            rustix::net::RecvFlags::CMSG_CLOEXEC,
        );
        sock.set_read_timeout(None)?;
        let got = got?;
        let mut fd = None;
        for msg in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = msg {
                for f in fds {
                    fd.get_or_insert(f);
                }
            }
        }
        if got.bytes != 1 || tag != *MEMORY_TAG {
            return Err(invalid(format!("{} sent no offer of memory on its socket", self.shared.peer)));
        }
        let fd =
            fd.ok_or_else(|| invalid(format!("{} offered memory without its file", self.shared.peer)))?;
        // A lane's log, on disk: it cannot be sealed, and need not be (the module's doc says
        // why: its sender is a mirror that proved the secret, and never resizes a log).
        PeerMemory::mapped(map_file(fd.as_fd())?, from, len)
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

impl Drop for Shared {
    fn drop(&mut self) {
        // The last handle of this side: the peer sees the end.
        self.shutdown();
    }
}

/// A listening Unix socket; its path is removed when it is dropped.
pub struct ShmListener {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for ShmListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Connections through shared memory between processes of one host.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmTransport;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The seals a rings' file must carry: its size cannot change while it is mapped.
fn ring_seals() -> SealFlags {
    SealFlags::SHRINK | SealFlags::GROW
}

/// Bytes of the rings' file: two rings of `capacity`.
fn rings_len(capacity: usize) -> usize {
    2 * (RING_HEADER + capacity)
}

/// A `memfd` of two rings of `capacity`, sealed against any change of its size.
fn make_rings(capacity: usize) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("mojim-shm", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, rings_len(capacity) as u64)?;
    rustix::fs::fcntl_add_seals(&fd, ring_seals() | SealFlags::SEAL)?;
    Ok(fd)
}

/// Checks that the rings' file `fd`, which the peer sent, cannot change size under this side:
/// sealed against shrinking and growing, on tmpfs, exactly two rings of `capacity` long. Looks
/// at nothing but the descriptor: nothing is mapped yet.
fn check_rings_file(fd: &OwnedFd, capacity: usize) -> io::Result<()> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| {
        invalid(format!(
            "the shared-memory hello's file cannot be sealed ({e}): the rings must be a memfd sealed \
             against resizing"
        ))
    })?;
    if !seals.contains(ring_seals()) {
        return Err(invalid(format!(
            "the shared-memory hello's file is not sealed against resizing (seals {:#x}; F_SEAL_SHRINK \
             and F_SEAL_GROW are required, so that the peer cannot truncate it under this side's \
             mapping): a connector from an older build, or a hostile one",
            seals.bits()
        )));
    }
    let fs = rustix::fs::fstatfs(fd)?;
    if fs.f_type as u64 != TMPFS_MAGIC {
        return Err(invalid(format!(
            "the shared-memory hello's file is on a file system of type {:#x}, not tmpfs (a memfd \
             without MFD_HUGETLB)",
            fs.f_type as u64
        )));
    }
    let len = rustix::fs::fstat(fd)?.st_size as u64;
    let need = rings_len(capacity) as u64;
    if len != need {
        return Err(invalid(format!("the shared file holds {len} bytes, the rings are {need}")));
    }
    Ok(())
}

/// Maps the rings' file `fd` (two rings of `capacity`; checked by [`check_rings_file`] when it
/// came from the peer).
fn map_fd(fd: &OwnedFd, capacity: usize) -> io::Result<MappedFile> {
    let map = map_file(fd.as_fd())?;
    let need = rings_len(capacity);
    if map.len() != need {
        return Err(invalid(format!("the shared file holds {} bytes, the rings are {need}", map.len())));
    }
    Ok(map)
}

impl ShmTransport {
    fn handshake_accepted(sock: UnixStream, path: &Path) -> io::Result<ShmConn> {
        sock.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let mut hello = [0u8; HELLO_LEN];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &sock,
            &mut [IoSliceMut::new(&mut hello)],
            &mut control,
            rustix::net::RecvFlags::CMSG_CLOEXEC | rustix::net::RecvFlags::WAITALL,
        )?;
        let mut fd = None;
        for msg in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = msg {
                for f in fds {
                    fd.get_or_insert(f);
                }
            }
        }
        if got.bytes != HELLO_LEN || &hello[..8] != HELLO_MAGIC {
            return Err(invalid(format!("a connection to {} is not a shared-memory hello", path.display())));
        }
        let version = u32::from_le_bytes(hello[8..12].try_into().expect("4 bytes"));
        if version != HELLO_VERSION {
            return Err(invalid(format!(
                "shared-memory hello version {version}, this build speaks {HELLO_VERSION}"
            )));
        }
        let capacity = u32::from_le_bytes(hello[12..16].try_into().expect("4 bytes")) as usize;
        if capacity != RING_BYTES {
            return Err(invalid(format!("shared rings of {capacity} bytes, this build uses {RING_BYTES}")));
        }
        let fd = fd.ok_or_else(|| invalid("a shared-memory hello without its file".into()))?;
        check_rings_file(&fd, capacity)?;
        let map = map_fd(&fd, capacity)?;
        drop(fd);
        (&sock).write_all(b"k")?;
        sock.set_read_timeout(None)?;
        let peer = format!("shm:{} (accepted)", path.display());
        Ok(ShmConn {
            shared: Arc::new(Shared::new(map, sock, true, capacity, peer)),
            busy_poll: Duration::ZERO,
        })
    }
}

impl Transport for ShmTransport {
    type Conn = ShmConn;
    type Listener = ShmListener;

    fn connect(&self, addr: &str, timeout: Duration) -> io::Result<ShmConn> {
        let sock = UnixStream::connect(addr)?;
        sock.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let fd = make_rings(RING_BYTES)?;
        let map = map_fd(&fd, RING_BYTES)?;
        let mut hello = [0u8; HELLO_LEN];
        hello[..8].copy_from_slice(HELLO_MAGIC);
        hello[8..12].copy_from_slice(&HELLO_VERSION.to_le_bytes());
        hello[12..16].copy_from_slice(&(RING_BYTES as u32).to_le_bytes());
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
        let fds = [fd.as_fd()];
        control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
        let sent = rustix::net::sendmsg(
            &sock,
            &[IoSlice::new(&hello)],
            &mut control,
            rustix::net::SendFlags::empty(),
        )?;
        if sent != HELLO_LEN {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the shared-memory hello was cut short"));
        }
        drop(fd);
        let mut ok = [0u8; 1];
        (&sock).read_exact(&mut ok)?;
        if ok != *b"k" {
            return Err(invalid(format!("{addr} did not take the shared-memory hello")));
        }
        sock.set_read_timeout(None)?;
        let peer = format!("shm:{addr}");
        Ok(ShmConn {
            shared: Arc::new(Shared::new(map, sock, false, RING_BYTES, peer)),
            busy_poll: Duration::ZERO,
        })
    }

    fn listen(&self, addr: &str) -> io::Result<ShmListener> {
        let path = PathBuf::from(addr);
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                // A socket file left by a process that is gone: nobody answers on it.
                if UnixStream::connect(&path).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!("{addr} is in use by a running listener"),
                    ));
                }
                std::fs::remove_file(&path)?;
                UnixListener::bind(&path)?
            }
            Err(e) => return Err(e),
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(ShmListener { listener, path })
    }

    fn accept(&self, listener: &ShmListener) -> io::Result<ShmConn> {
        let (sock, _) = listener.listener.accept()?;
        // A peer that is not a shared-memory connector costs the listener at most the
        // handshake's timeout; the socket file is the owner's only (0600).
        Self::handshake_accepted(sock, &listener.path)
            .map_err(|e| io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string()))
    }

    fn local_addr(&self, listener: &ShmListener) -> io::Result<String> {
        Ok(listener.path.display().to_string())
    }
}

#[cfg(test)]
mod tests;
