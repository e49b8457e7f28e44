//! The primary: the application's side of a region.
//!
//! The application maps the region and uses it with loads and stores; at a sync point
//! (`msync`, `gmsync`) the named bytes go to the mirror as one atomic group, in one round trip,
//! straight from the mapping. Sync points from many threads pipeline: each thread keeps to one
//! lane, a lane's sender lock is held only while its frames are written, and whoever waits on a
//! lane reads its acknowledgements for everyone waiting there.

use crate::config::{Config, Limits, Mode, RegionId, Secret};
use crate::connect::{connect, Intro};
use crate::error::{Error, Result};
use mojim_core::encode::{self, check_group, data_header, GroupLimits, GroupShape, RangeError, SessionTag};
use mojim_core::Range;
use mojim_format::handshake::{decode_refuse, PeerRole, REFUSE_MAX};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::RegionFile;
use mojim_transport::{Conn, TcpTransport, Transport};
use std::cell::Cell;
use std::io::{IoSlice, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Frames written per `writev`.
const BATCH: usize = 32;
/// Most replicas a broadcasting primary sends to.
const MAX_REPLICAS: usize = 8;

/// How to open a region as primary.
#[derive(Clone, Debug)]
pub struct PrimaryOptions {
    pub region_path: PathBuf,
    pub mode: Mode,
    pub mirror: String,
    pub lanes: u16,
    pub secret: Secret,
    pub limits: Limits,
    pub async_window: u32,
    pub connect_timeout: Duration,
    /// Poll for acknowledgements this long before sleeping.
    pub busy_poll: Duration,
    /// More mirrors to send every group to and wait for, besides `mirror` (the broadcast
    /// baseline, for comparison only).
    pub broadcast: Vec<String>,
}

impl PrimaryOptions {
    /// Options from a configuration file.
    pub fn from_config(cfg: &Config, insecure: bool) -> Result<PrimaryOptions> {
        let p = &cfg.file.primary;
        let mode = cfg.mode()?;
        if mode.replicated() && !(1..=256).contains(&p.lanes) {
            return Err(Error::Config(format!("[primary] lanes = {} must be between 1 and 256", p.lanes)));
        }
        if p.async_window == 0 || p.async_window > 65536 {
            return Err(Error::Config(format!(
                "[primary] async_window = {} must be between 1 and 65536",
                p.async_window
            )));
        }
        Ok(PrimaryOptions {
            region_path: cfg.resolve(&cfg.file.region.path),
            mode,
            mirror: p.mirror.clone(),
            lanes: p.lanes,
            secret: if mode.replicated() { cfg.secret(insecure)? } else { Secret(Vec::new()) },
            limits: cfg.limits()?,
            async_window: p.async_window,
            connect_timeout: Duration::from_millis(p.connect_timeout_ms),
            busy_poll: Duration::from_micros(p.busy_poll_us),
            broadcast: p.broadcast.clone(),
        })
    }
}

/// A group queued in order; [`Primary::wait`] returns when it is durable for the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a ticket is only durable once waited for"]
pub struct Ticket {
    lane: u16,
    seq: u64,
}

impl Ticket {
    /// The group's sequence number (0 when there was nothing to send).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

struct Tx<C> {
    conn: C,
    headers: Box<[[u8; FRAME_HEADER_SIZE]; BATCH]>,
    /// Sequence numbers of the last `async_window` groups sent on this lane.
    window: Box<[u64]>,
    window_at: usize,
    last_sent: u64,
}

struct Waiters {
    reader_busy: bool,
}

struct Lane<C> {
    index: u16,
    tx: Mutex<Tx<C>>,
    rx: Mutex<C>,
    /// Closes the connection from any thread.
    ctl: C,
    acked: AtomicU64,
    waiters: Mutex<Waiters>,
    cv: Condvar,
}

/// What a primary reports about itself.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrimaryStatus {
    pub mode: String,
    pub mirror: String,
    pub lanes: usize,
    pub session: u64,
    pub epoch: u64,
    pub next_seq: u64,
    pub acked_seq: Vec<u64>,
    pub failed: Option<String>,
}

/// A region opened as primary.
pub struct Primary<T: Transport = TcpTransport> {
    region: RegionFile,
    mode: Mode,
    limits: GroupLimits,
    /// `replicas` × `lanes_per_replica` lanes: replica r's lane l at `r * lanes_per_replica + l`.
    lanes: Box<[Lane<T::Conn>]>,
    lanes_per_replica: usize,
    replicas: usize,
    next_seq: AtomicU64,
    session: u64,
    epoch: u64,
    mirror: String,
    failed: OnceLock<String>,
}

static THREADS: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static THREAD_NO: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn thread_no() -> usize {
    THREAD_NO.with(|c| {
        if c.get() == usize::MAX {
            c.set(THREADS.fetch_add(1, Ordering::Relaxed));
        }
        c.get()
    })
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    // A panic while holding a lane lock leaves only counters behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Primary<TcpTransport> {
    /// Opens the region at `opts.region_path` and, if the mode replicates, connects every lane.
    pub fn open(opts: &PrimaryOptions) -> Result<Primary<TcpTransport>> {
        Primary::open_with(TcpTransport, opts)
    }
}

impl<T: Transport> Primary<T> {
    /// As [`Primary::open`], over any transport.
    pub fn open_with(transport: T, opts: &PrimaryOptions) -> Result<Primary<T>> {
        let region = RegionFile::open(&opts.region_path)?;
        let id = RegionId { uuid: region.uuid(), size: region.size() };
        let epoch = region.epoch().max(1);
        let session = crate::random::u64() | 1;
        let mut max_frame = opts.limits.max_frame;
        let mut lanes = Vec::new();
        let mut next_seq = 1;
        let mut log_capacity = u64::MAX;
        let targets: Vec<&String> = std::iter::once(&opts.mirror).chain(&opts.broadcast).collect();
        if targets.len() > MAX_REPLICAS {
            return Err(Error::Config(format!(
                "[primary] broadcast names {} mirrors; at most {} are supported",
                opts.broadcast.len(),
                MAX_REPLICAS - 1
            )));
        }
        let replicas = if opts.mode.replicated() { targets.len() } else { 0 };
        for (r, target) in targets.iter().take(replicas).enumerate() {
            for lane in 0..opts.lanes {
                let intro = Intro {
                    role: PeerRole::Primary,
                    region: id,
                    epoch,
                    session,
                    lane,
                    lanes: opts.lanes,
                    max_frame: opts.limits.max_frame,
                };
                let (conn, welcome) =
                    connect(&transport, target, opts.connect_timeout, &opts.secret, &intro)?;
                if lane == 0 && r == 0 {
                    next_seq = welcome.next_seq;
                } else if welcome.next_seq != next_seq {
                    return Err(Error::MirrorLost {
                        reason: format!(
                            "{target} lane {lane} was told to start at group {} but {} lane 0 at {next_seq}: \
                             another primary is connecting, or the broadcast mirrors hold different groups",
                            welcome.next_seq, opts.mirror
                        ),
                    });
                }
                max_frame = max_frame.min(welcome.max_frame);
                log_capacity = log_capacity.min(welcome.log_capacity);
                let mut rx = conn.try_clone().map_err(Error::io("clone connection"))?;
                rx.set_busy_poll(opts.busy_poll);
                let ctl = conn.try_clone().map_err(Error::io("clone connection"))?;
                lanes.push(Lane {
                    index: lane,
                    tx: Mutex::new(Tx {
                        conn,
                        headers: Box::new([[0u8; FRAME_HEADER_SIZE]; BATCH]),
                        window: vec![0u64; opts.async_window as usize].into_boxed_slice(),
                        window_at: 0,
                        last_sent: 0,
                    }),
                    rx: Mutex::new(rx),
                    ctl,
                    acked: AtomicU64::new(next_seq - 1),
                    waiters: Mutex::new(Waiters { reader_busy: false }),
                    cv: Condvar::new(),
                });
            }
        }
        let limits = GroupLimits {
            region_size: id.size,
            max_frame,
            max_ranges: opts.limits.max_ranges,
            max_group_log_bytes: if opts.mode.replicated() {
                encode::max_group_log_bytes(log_capacity, max_frame)
            } else {
                u64::MAX
            },
        };
        Ok(Primary {
            region,
            mode: opts.mode,
            limits,
            lanes: lanes.into_boxed_slice(),
            lanes_per_replica: opts.lanes as usize,
            replicas,
            next_seq: AtomicU64::new(next_seq),
            session,
            epoch,
            mirror: opts.mirror.clone(),
            failed: OnceLock::new(),
        })
    }

    /// Bytes in the region.
    pub fn size(&self) -> u64 {
        self.region.size()
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Address of region byte 0, for loads and stores.
    pub fn as_ptr(&self) -> *mut u8 {
        self.region.data_ptr()
    }

    /// Copies `data` into the region at `offset` (a store, not a sync point).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check(offset, data.len() as u64)?;
        self.region.write(offset, data);
        Ok(())
    }

    /// Copies region bytes at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.check(offset, out.len() as u64)?;
        self.region.read(offset, out);
        Ok(())
    }

    fn check(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.region.size();
        if offset.checked_add(len).is_none_or(|e| e > size) {
            return Err(Error::Range(RangeError::OutOfBounds { offset, len, region_size: size }));
        }
        Ok(())
    }

    /// Makes `[offset, offset + len)` durable for the mode, atomically.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        self.gmsync(&[Range::new(offset, len)])
    }

    /// Makes all `ranges` durable for the mode as one atomic group: the ordering point and,
    /// in `sync` and `sync-flush`, the durability point.
    pub fn gmsync(&self, ranges: &[Range]) -> Result<()> {
        let t = self.persist(ranges)?;
        if self.mode.waits_for_mirror() {
            self.wait(t)?;
        }
        Ok(())
    }

    /// `msync` of the bytes at `ptr` (which must lie inside the region).
    pub fn msync_ptr(&self, ptr: *const u8, len: usize) -> Result<()> {
        let r = self.range_of(ptr, len)?;
        self.gmsync(&[r])
    }

    /// The region range of a pointer range.
    pub fn range_of(&self, ptr: *const u8, len: usize) -> Result<Range> {
        let base = self.region.data_ptr() as usize;
        let addr = ptr as usize;
        let size = self.region.size();
        match addr.checked_sub(base) {
            Some(off) if (off as u64).checked_add(len as u64).is_some_and(|e| e <= size) => {
                Ok(Range::new(off as u64, len as u64))
            }
            _ => Err(Error::Range(RangeError::Pointer { addr, len, base, size })),
        }
    }

    /// The ordering point: queues `ranges` as one group after every group this thread queued
    /// before, and returns without waiting for the mirror. In `unreplicated` and `async` modes
    /// the ranges are locally persistent when this returns.
    pub fn persist(&self, ranges: &[Range]) -> Result<Ticket> {
        let shape = check_group(ranges, &self.limits)?;
        if !self.mode.replicated() {
            self.flush_local(ranges)?;
            return Ok(Ticket { lane: 0, seq: 0 });
        }
        if let Some(reason) = self.failed.get() {
            return Err(Error::MirrorLost { reason: reason.clone() });
        }
        if shape.frames == 0 {
            return Ok(Ticket { lane: 0, seq: 0 });
        }
        let lane = thread_no() % self.lanes_per_replica;
        let (ticket, behind) = self.send_group(lane, ranges, shape)?;
        if self.mode.flushes_locally() {
            // Overlaps the local flush with the network round trip.
            self.flush_local(ranges)?;
        }
        if self.mode == Mode::Async && behind != 0 {
            self.wait(Ticket { lane: lane as u16, seq: behind })?;
        }
        Ok(ticket)
    }

    /// The durability point: returns when the ticket's group (and every group queued before
    /// it on its lane) is in the mirror's log. In `unreplicated` mode it returns at once.
    pub fn wait(&self, ticket: Ticket) -> Result<()> {
        if ticket.seq == 0 {
            return Ok(());
        }
        for r in 0..self.replicas {
            self.wait_acked(&self.lanes[r * self.lanes_per_replica + ticket.lane as usize], ticket.seq)?;
        }
        Ok(())
    }

    fn flush_local(&self, ranges: &[Range]) -> Result<()> {
        for r in ranges.iter().filter(|r| r.len > 0) {
            self.region.persist(r.offset, r.len as usize).map_err(Error::io("persist region range"))?;
        }
        Ok(())
    }

    /// Sends a group on lane `l` of every replica.
    fn send_group(&self, l: usize, ranges: &[Range], shape: GroupShape) -> Result<(Ticket, u64)> {
        let mut guards: [Option<MutexGuard<'_, Tx<T::Conn>>>; MAX_REPLICAS] = Default::default();
        for (r, g) in guards.iter_mut().enumerate().take(self.replicas) {
            *g = Some(lock(&self.lanes[r * self.lanes_per_replica + l].tx));
        }
        // Assigned under the lanes' locks: a lane's groups go out in sequence order.
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut behind = 0;
        for tx in guards.iter_mut().take(self.replicas) {
            let tx = tx.as_mut().expect("locked above");
            behind = self.send_frames(tx, l as u16, seq, ranges, shape)?;
        }
        Ok((Ticket { lane: l as u16, seq }, behind))
    }

    /// Writes a group's frames on one lane; returns the group `async_window` groups back.
    fn send_frames(
        &self,
        tx: &mut Tx<T::Conn>,
        lane: u16,
        seq: u64,
        ranges: &[Range],
        shape: GroupShape,
    ) -> Result<u64> {
        let tag = SessionTag { session: self.session, epoch: self.epoch, lane };
        let mut plans = encode::frames(ranges, self.limits.max_frame, shape);
        let mut bodies: [&[u8]; BATCH] = [&[]; BATCH];
        loop {
            let mut n = 0;
            while n < BATCH {
                let Some(plan) = plans.next() else { break };
                let body = self.region.bytes(plan.offset, plan.len as usize);
                tx.headers[n] = data_header(tag, seq, plan, body);
                bodies[n] = body;
                n += 1;
            }
            if n == 0 {
                break;
            }
            let mut iov = [IoSlice::new(&[]); 2 * BATCH];
            for i in 0..n {
                iov[2 * i] = IoSlice::new(&tx.headers[i]);
                iov[2 * i + 1] = IoSlice::new(bodies[i]);
            }
            if let Err(e) = tx.conn.send_all_vectored(&mut iov[..2 * n]) {
                return Err(self.fail(format!("send on lane {lane}: {e}")));
            }
        }
        tx.last_sent = seq;
        let behind = std::mem::replace(&mut tx.window[tx.window_at], seq);
        tx.window_at = (tx.window_at + 1) % tx.window.len();
        Ok(behind)
    }

    fn wait_acked(&self, lane: &Lane<T::Conn>, seq: u64) -> Result<()> {
        let mut w = lock(&lane.waiters);
        loop {
            if lane.acked.load(Ordering::Acquire) >= seq {
                return Ok(());
            }
            if let Some(reason) = self.failed.get() {
                return Err(Error::MirrorLost { reason: reason.clone() });
            }
            if !w.reader_busy {
                break;
            }
            w = lane.cv.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        w.reader_busy = true;
        drop(w);
        let res = self.read_acks(lane, seq);
        lock(&lane.waiters).reader_busy = false;
        lane.cv.notify_all();
        res
    }

    /// Reads acknowledgements on `lane` until `seq` is acknowledged.
    fn read_acks(&self, lane: &Lane<T::Conn>, seq: u64) -> Result<()> {
        let mut rx = lock(&lane.rx);
        while lane.acked.load(Ordering::Acquire) < seq {
            if let Some(reason) = self.failed.get() {
                return Err(Error::MirrorLost { reason: reason.clone() });
            }
            let mut hb = [0u8; FRAME_HEADER_SIZE];
            if let Err(e) = rx.read_exact(&mut hb) {
                return Err(self.fail(format!("lane {} from {}: {e}", lane.index, self.mirror)));
            }
            let h = match FrameHeader::decode(&hb) {
                Ok(h) => h,
                Err(e) => {
                    return Err(
                        self.fail(format!("bad frame from {} on lane {}: {e}", self.mirror, lane.index))
                    )
                }
            };
            match h.kind {
                FrameKind::Ack => {
                    let prev = lane.acked.load(Ordering::Acquire);
                    let next = self.next_seq.load(Ordering::Relaxed);
                    if h.session != self.session || h.lane != lane.index || h.seq <= prev || h.seq >= next {
                        return Err(self.fail(format!(
                            "mirror {} acknowledged group {} on lane {} (session {:#x}), expected a group in {}..{} of session {:#x}",
                            self.mirror, h.seq, h.lane, h.session, prev + 1, next, self.session
                        )));
                    }
                    lane.acked.store(h.seq, Ordering::Release);
                    // Wake threads waiting on earlier groups of this lane.
                    let _w = lock(&lane.waiters);
                    lane.cv.notify_all();
                }
                FrameKind::Refuse if (h.body_len as usize) <= REFUSE_MAX => {
                    let mut body = vec![0u8; h.body_len as usize];
                    let msg = match rx.read_exact(&mut body).ok().and_then(|_| decode_refuse(&body).ok()) {
                        Some((code, m)) => format!("mirror refused the session ({code:?}): {m}"),
                        None => "mirror refused the session".to_string(),
                    };
                    return Err(self.fail(msg));
                }
                k => {
                    return Err(self
                        .fail(format!("unexpected {k:?} frame from {} on lane {}", self.mirror, lane.index)))
                }
            }
        }
        Ok(())
    }

    /// Marks the session failed and closes every lane, so no thread waits forever.
    fn fail(&self, reason: String) -> Error {
        let _ = self.failed.set(reason);
        for lane in self.lanes.iter() {
            lane.ctl.shutdown();
            let _w = lock(&lane.waiters);
            lane.cv.notify_all();
        }
        Error::MirrorLost { reason: self.failed.get().cloned().unwrap_or_default() }
    }

    /// Waits until every group sent so far is acknowledged (in `async` mode, the mirror has
    /// caught up), then closes the session.
    pub fn close(self) -> Result<()> {
        let r = self.drain();
        for lane in self.lanes.iter() {
            lane.ctl.shutdown();
        }
        r
    }

    fn drain(&self) -> Result<()> {
        for lane in self.lanes.iter() {
            let last = lock(&lane.tx).last_sent;
            if last != 0 {
                self.wait_acked(lane, last)?;
            }
        }
        Ok(())
    }

    pub fn status(&self) -> PrimaryStatus {
        PrimaryStatus {
            mode: self.mode.name().into(),
            mirror: self.mirror.clone(),
            lanes: self.lanes.len(),
            session: self.session,
            epoch: self.epoch,
            next_seq: self.next_seq.load(Ordering::Relaxed),
            acked_seq: self.lanes.iter().map(|l| l.acked.load(Ordering::Relaxed)).collect(),
            failed: self.failed.get().cloned(),
        }
    }
}

impl<T: Transport> Drop for Primary<T> {
    fn drop(&mut self) {
        if self.failed.get().is_none() {
            let _ = self.drain();
        }
        for lane in self.lanes.iter() {
            lane.ctl.shutdown();
        }
    }
}
