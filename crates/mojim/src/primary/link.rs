//! One connected session to the mirror (and, for the broadcast baseline, more mirrors): its
//! lanes, the sending of groups, the reading of acknowledgements, and heartbeats.
//!
//! A link never comes back: once any lane fails, the whole link is failed and every waiter is
//! woken. The primary replaces it with a new link (see `resync.rs`).

use super::stage::Stage;
use crate::error::{Error, Result};
use mojim_core::encode::{
    self, data_header_with_checksum, placed_data_header, GroupLimits, GroupShape, SessionTag,
};
use mojim_core::log_space::LogSpace;
use mojim_core::primary::InFlightWindow;
use mojim_core::Range;
use mojim_format::copied::{COPIED_RANGE_SIZE, MAX_COPIED_RANGES};
use mojim_format::frame::RECORD_TAG_SIZE;
use mojim_format::handshake::{decode_refuse, LogWindow, PeerRole, Welcome, LOG_BODY_MAX, REFUSE_MAX};
use mojim_format::log::record_size;
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::{MapSlice, RegionFile};
use mojim_transport::connect::{connect, Intro};
use mojim_transport::{Conn, PeerMemory, RecordMac, Transport};
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use super::link_error::LinkError;
use super::PrimaryOptions;
use crate::config::RegionId;

/// A group's frames to send: its ranges, their shape, and the region they are read from.
#[derive(Clone, Copy)]
struct Group<'a> {
    ranges: &'a [Range],
    shape: GroupShape,
    region: &'a RegionFile,
}

/// Frames written per `writev`.
const BATCH: usize = 32;
/// Bytes per Copy frame (a receiver takes up to `MAX_COPY_BODY`, whatever `max_frame`): large
/// frames keep the per-frame work of a copy small.
pub const COPY_FRAME: u32 = 256 << 10;
const _: () = assert!(COPY_FRAME <= mojim_format::copied::MAX_COPY_BODY);
/// Copy frames replicas may ask for again (CopyRetry) before the next resend, at most.
const MAX_RETRIES_ASKED: usize = 4096;
/// Most replicas a broadcasting primary sends to.
pub(crate) const MAX_REPLICAS: usize = 8;

pub(crate) fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    // A panic while holding a lane lock leaves only counters behind; keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) struct Tx<C> {
    conn: C,
    headers: Box<[[u8; FRAME_HEADER_SIZE]; BATCH]>,
    /// The last `async_window` groups sent on this lane.
    window: InFlightWindow,
    /// The mirror's log of this lane, when this side places its records there itself.
    placed: Option<Placed>,
}

/// A lane whose records' bodies this side writes into the mirror's log itself (one-sided
/// placement, docs/DESIGN-transport.md): the mirror's log and this side's view of its space.
/// Records go where the mirror's lane puts them (`MirrorLane::on_header` runs the same
/// `LogSpace`), and only into space the mirror said was free.
struct Placed {
    mem: PeerMemory,
    space: LogSpace,
    /// On a TLS connection, the key every record placed here is sealed with (its tag after its
    /// body, docs/FORMAT.md §2.4): the body goes around the session.
    mac: Option<RecordMac>,
}

impl Placed {
    /// Bytes of log a record with a body of `len` takes here (its tag included, if it has one).
    fn record_size(&self, len: u64) -> u64 {
        record_size(len + if self.mac.is_some() { RECORD_TAG_SIZE as u64 } else { 0 })
    }

    /// `header`, a placed record's doorbell, with the flags its placement needs: `MAC` over
    /// TLS, and `ENCRYPTED` too where the bodies are encrypted.
    fn seal(&self, header: [u8; FRAME_HEADER_SIZE]) -> [u8; FRAME_HEADER_SIZE] {
        match &self.mac {
            Some(mac) if mac.encrypts() => encode::encrypted(header),
            Some(_) => encode::sealed(header),
            None => header,
        }
    }

    /// Takes the place of the next record of `size` bytes, which [`Link::room`] made: its log
    /// position, and where in the peer's memory (the log's record area) its body goes.
    fn take(&mut self, size: u64) -> (u64, usize) {
        let pos = self.space.place(size).expect("room was made for it").pos;
        self.space.advance_head(pos + size);
        (pos, (pos % self.space.capacity()) as usize + FRAME_HEADER_SIZE)
    }
}

struct Waiters {
    reader_busy: bool,
}

pub(crate) struct Lane<C> {
    pub index: u16,
    tx: Mutex<Tx<C>>,
    rx: Mutex<C>,
    /// Closes the connection from any thread.
    ctl: C,
    pub acked: AtomicU64,
    /// The mirror's log is free before this position (what its Acks and Heartbeats say): a
    /// placed lane's records may go up to this plus the log's capacity.
    log_tail: AtomicU64,
    waiters: Mutex<Waiters>,
    cv: Condvar,
    /// Milliseconds (on the link's clock) of the last frame sent and received.
    last_tx: AtomicU64,
    last_rx: AtomicU64,
    /// The last group sent on the lane (stored under its sending side's lock): the mirror owes
    /// an Ack for every group up to it.
    last_sent: AtomicU64,
    /// A group is being numbered and sent on the lane (set under its sending side's lock before
    /// the number is taken, cleared once `last_sent` holds it): its number may be in neither
    /// `last_sent` nor `acked` yet. See [`Link::acked_floor`].
    numbering: AtomicBool,
    /// The first group sent on the lane since it last owed nothing (stored under its sending
    /// side's lock before `last_sent`): no group below it on this lane is still owed.
    first_owed: AtomicU64,
    /// A Heartbeat went out ([`Link::beat`], [`Link::room`]) and nothing has been heard on the
    /// lane since: the mirror owes its answer. Set before the Heartbeat is sent, cleared by
    /// every frame read.
    asked: AtomicBool,
    /// The highest probe number the mirror's answers on this lane repeated ([`Link::confirm`]).
    answered: AtomicU64,
}

impl<C> Lane<C> {
    /// Group `seq` went out on the lane (under its sending side's lock).
    fn sent(&self, seq: u64) {
        if self.last_sent.load(Ordering::SeqCst) <= self.acked.load(Ordering::SeqCst) {
            self.first_owed.store(seq, Ordering::SeqCst);
        }
        self.last_sent.store(seq, Ordering::SeqCst);
        self.numbering.store(false, Ordering::SeqCst);
    }

    /// What the lane allows of [`Link::acked_floor`], if it holds it back at all.
    fn floor(&self) -> Option<u64> {
        let numbering = self.numbering.load(Ordering::SeqCst);
        let acked = self.acked.load(Ordering::SeqCst);
        if numbering {
            return Some(acked);
        }
        (self.last_sent.load(Ordering::SeqCst) > acked)
            .then(|| acked.max(self.first_owed.load(Ordering::SeqCst).saturating_sub(1)))
    }

    /// Whether the mirror owes this lane a frame: the answer to a Heartbeat, or the Ack of a
    /// group. Only then does a thread wait to hear the lane; the mirror sends nothing unasked
    /// while it has nothing to hold back (after a `CopyEnd`, say, which has no answer).
    fn owes_answer(&self) -> bool {
        self.asked.load(Ordering::Acquire)
            || self.last_sent.load(Ordering::Acquire) > self.acked.load(Ordering::Acquire)
    }
}

/// When a reader stops reading.
#[derive(Clone, Copy)]
enum Until {
    Acked(u64),
    /// Any frame from the mirror (a heartbeat's answer).
    Heard,
    /// The answer to the Heartbeat with this probe number ([`Link::confirm`]).
    Answered(u64),
}

impl Until {
    /// Whether what the reader waits for has come on `lane`, as far as the lane's counters say.
    /// `Heard` is reached once the lane owes nothing: a frame read since (by any reader) settled
    /// the Heartbeat that was asked, so no read waits for an answer already taken.
    fn reached<C>(self, lane: &Lane<C>) -> bool {
        match self {
            Until::Acked(seq) => lane.acked.load(Ordering::Acquire) >= seq,
            Until::Answered(probe) => lane.answered.load(Ordering::Acquire) >= probe,
            Until::Heard => !lane.owes_answer(),
        }
    }
}

/// One copy group's frames, and the buffers to make them, reused from group to group.
pub(crate) struct CopyScratch {
    /// The group's bytes, read from the region once its number is assigned (for sends from a
    /// snapshot: the resends of frames a replica found changed); empty for sends from the region.
    snapshot: Box<[u8]>,
    /// Each Copy frame's header, region offset and body length (with a snapshot, the bodies
    /// follow one another in `snapshot`).
    headers: Vec<([u8; FRAME_HEADER_SIZE], u64, usize)>,
    /// The Copied frame's body.
    ranges: Vec<u8>,
    /// Bytes the group covers.
    bytes: u64,
}

impl CopyScratch {
    /// Room for groups of up to `bytes` bytes in frames of at most `max_frame`, with a snapshot
    /// buffer if the group is to be sent from one.
    pub fn new(bytes: u64, max_frame: u32, snapshot: bool) -> CopyScratch {
        let frames = bytes.div_ceil(max_frame.max(1) as u64) as usize + 1;
        CopyScratch {
            snapshot: vec![0; if snapshot { bytes as usize } else { 0 }].into_boxed_slice(),
            headers: Vec::with_capacity(frames),
            ranges: Vec::with_capacity(MAX_COPIED_RANGES as usize * COPIED_RANGE_SIZE),
            bytes: 0,
        }
    }

    /// Whether the group is sent from the snapshot (made with one) or from the region.
    fn has_snapshot(&self) -> bool {
        !self.snapshot.is_empty()
    }

    /// Frames `ranges` as Copy frames of `tag`, in frames of at most `COPY_FRAME` bytes, and
    /// lists them for the Copied frame. With a snapshot the bytes are read into it and
    /// checksummed there, frame by frame, so each checksum reads bytes just copied, still in
    /// cache; without, checksummed in the region.
    fn frame(&mut self, region: &RegionFile, tag: SessionTag, ranges: &[Range]) -> Result<(), LinkError> {
        let snapshot = self.has_snapshot();
        let bytes: u64 = ranges.iter().map(|r| r.len).sum();
        if snapshot && bytes > self.snapshot.len() as u64 {
            // Copy groups are cut to fit the room the copy made for them.
            return Err(LinkError::Bug(format!(
                "a copy group of {bytes} bytes does not fit a copy's {} bytes of room",
                self.snapshot.len()
            )));
        }
        self.headers.clear();
        self.ranges.clear();
        self.bytes = bytes;
        let mut filled = 0;
        for r in ranges {
            let mut at = r.offset;
            let end = r.offset + r.len;
            while at < end {
                let n = (end - at).min(COPY_FRAME as u64) as usize;
                let header = if snapshot {
                    let into = &mut self.snapshot[filled..filled + n];
                    region.read(at, into);
                    filled += n;
                    encode::copy_header(tag, at, into)
                } else {
                    encode::copy_header_with_checksum(tag, at, n as u32, region.view(at, n).crc32c())
                };
                self.headers.push((header, at, n));
                at += n as u64;
            }
            mojim_format::copied::push_range(&mut self.ranges, r.offset, r.len);
        }
        Ok(())
    }

    /// Bytes the group covers.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Reads the mirror's answer to this lane's request to place its records (the `Log` frame after
/// its Welcome) and, if the mirror offered the lane's log, maps it.
fn take_log<C: Conn>(
    conn: &mut C,
    target: &str,
    timeout: Duration,
    session: u64,
    lane: u16,
    encrypt: bool,
) -> Result<Option<Placed>> {
    let lost = |what: String| Error::MirrorLost { reason: format!("{target}: {what}") };
    let mut body = Vec::with_capacity(LOG_BODY_MAX);
    let mut by = mojim_transport::frames::ReadBy { conn: &mut *conn, deadline: Instant::now() + timeout };
    let h = mojim_transport::frames::read_frame(&mut by, LOG_BODY_MAX, &mut body)
        .map_err(|e| lost(format!("no Log frame after the Welcome within {timeout:?}: {e}")))?;
    if h.kind == FrameKind::Refuse {
        // The node would not let this lane place its records as it asked (`[security]
        // encrypt_placed` set otherwise there, say): it says why.
        let (code, message) =
            decode_refuse(&body).map_err(|e| lost(format!("sent a bad Refuse frame: {e}")))?;
        return Err(Error::Refused { peer: target.to_string(), code, message });
    }
    if h.kind != FrameKind::Log {
        return Err(lost(format!("sent a {:?} frame where the Log frame after the Welcome goes", h.kind)));
    }
    let (window, token) =
        LogWindow::decode_offer(&body).map_err(|e| lost(format!("sent a bad Log frame: {e}")))?;
    if window.capacity == 0 {
        return Ok(None);
    }
    // The offer is the log's record area (file offsets LOG_HEADER_SIZE and on), exactly.
    let len = window.capacity as usize;
    let mem = conn
        .take_memory(len, token)
        .map_err(|e| lost(format!("take the offered log's record area of {len} bytes: {e}")))?;
    if mem.len() != len {
        return Err(lost(format!(
            "offered {} bytes of its log where the record area is {len}: a mirror of an older build \
             offers the whole file (header page included); upgrade it, or set [primary] \
             place_records = false",
            mem.len()
        )));
    }
    let mac = conn
        .record_mac(session, lane)
        .map_err(|e| lost(format!("lane {lane}: the key of the records placed in its log: {e}")))?
        .map(|m| m.encrypting(encrypt));
    Ok(Some(Placed { mem, space: LogSpace::new(window.capacity, window.tail, window.head), mac }))
}

/// One lane's sending side of every replica (`None` past the link's replicas), locked.
type TxGuards<'a, C> = [Option<MutexGuard<'a, Tx<C>>>; MAX_REPLICAS];

/// A connected session.
pub(crate) struct Link<C> {
    /// `replicas` × `lanes_per_replica` lanes: replica r's lane l at `r * lanes_per_replica + l`.
    pub lanes: Box<[Lane<C>]>,
    pub lanes_per_replica: usize,
    pub replicas: usize,
    pub session: u64,
    pub epoch: u64,
    pub next_seq: AtomicU64,
    pub limits: GroupLimits,
    pub failed: OnceLock<LinkError>,
    /// What the mirror (replica 0) said when the session began.
    pub welcome: Welcome,
    /// Copy frames a replica asked for again (CopyRetry): `(offset, len)`.
    retries: Mutex<Vec<(u64, u64)>>,
    /// The last probe number a Heartbeat carried ([`Link::confirm`]).
    probes: AtomicU64,
    pub mirror: String,
    clock: Instant,
}

impl<C: Conn> Link<C> {
    /// Connects every lane of every replica and checks they agree.
    pub fn connect<T: Transport<Conn = C>>(
        transport: &T,
        opts: &PrimaryOptions,
        region: &RegionFile,
        epoch: u64,
        generation: u64,
    ) -> Result<Link<C>> {
        let id = RegionId { uuid: region.uuid(), size: region.size() };
        let session = mojim_transport::random::u64() | 1;
        let targets: Vec<&String> = std::iter::once(&opts.mirror).chain(&opts.broadcast).collect();
        if targets.len() > MAX_REPLICAS {
            return Err(Error::Config(format!(
                "[primary] broadcast names {} mirrors; at most {} are supported",
                opts.broadcast.len(),
                MAX_REPLICAS - 1
            )));
        }
        let clock = Instant::now();
        let mut max_frame = opts.limits.max_frame;
        let mut log_capacity = u64::MAX;
        let mut first: Option<Welcome> = None;
        let mut lanes = Vec::new();
        let mut sealed = false;
        for (r, target) in targets.iter().enumerate() {
            for lane in 0..opts.lanes {
                let intro = Intro {
                    role: PeerRole::Primary,
                    region: id,
                    epoch,
                    session,
                    lane,
                    lanes: opts.lanes,
                    max_frame: opts.limits.max_frame,
                    generation,
                    place: opts.place_records,
                    encrypt_placed: opts.tls.as_ref().is_some_and(|t| t.encrypt_placed()),
                };
                let (mut conn, welcome) =
                    connect(transport, target, opts.connect_timeout, &opts.secret.0, &intro)?;
                let placed = if intro.place {
                    take_log(&mut conn, target, opts.connect_timeout, session, lane, intro.encrypt_placed)?
                } else {
                    None
                };
                sealed |= placed.as_ref().is_some_and(|p| p.mac.is_some());
                match &first {
                    None => first = Some(welcome),
                    Some(w) if welcome.next_seq != w.next_seq => {
                        return Err(Error::MirrorLost {
                            reason: format!(
                                "{target} lane {lane} was told to start at group {} but {} lane 0 at {}: \
                                 another primary is connecting, or the broadcast mirrors hold different groups",
                                welcome.next_seq, opts.mirror, w.next_seq
                            ),
                        });
                    }
                    Some(_) => {}
                }
                if r == 0 && lane == 0 && welcome.epoch > epoch {
                    return Err(Error::Fenced {
                        epoch,
                        peer: opts.mirror.clone(),
                        peer_epoch: welcome.epoch,
                    });
                }
                max_frame = max_frame.min(welcome.max_frame);
                log_capacity = log_capacity.min(welcome.log_capacity);
                let mut rx = conn.try_clone().map_err(Error::io("clone connection"))?;
                rx.set_busy_poll(opts.busy_poll);
                rx.set_recv_timeout(Some(opts.failure.heartbeat.timeout))
                    .map_err(Error::io("set lane timeout"))?;
                let ctl = conn.try_clone().map_err(Error::io("clone connection"))?;
                let next_seq = first.as_ref().map_or(1, |w| w.next_seq);
                lanes.push(Lane {
                    index: lane,
                    tx: Mutex::new(Tx {
                        conn,
                        headers: Box::new([[0u8; FRAME_HEADER_SIZE]; BATCH]),
                        window: InFlightWindow::new(opts.async_window as usize),
                        placed,
                    }),
                    rx: Mutex::new(rx),
                    ctl,
                    acked: AtomicU64::new(next_seq - 1),
                    log_tail: AtomicU64::new(0),
                    waiters: Mutex::new(Waiters { reader_busy: false }),
                    cv: Condvar::new(),
                    last_tx: AtomicU64::new(0),
                    // Its Welcome was heard just now.
                    last_rx: AtomicU64::new(clock.elapsed().as_millis() as u64),
                    last_sent: AtomicU64::new(0),
                    numbering: AtomicBool::new(false),
                    first_owed: AtomicU64::new(0),
                    asked: AtomicBool::new(false),
                    answered: AtomicU64::new(0),
                });
            }
        }
        let welcome = first.expect("at least one lane");
        let limits = GroupLimits {
            region_size: id.size,
            max_frame,
            max_ranges: opts.limits.max_ranges,
            max_group_log_bytes: if sealed {
                // A sealed record takes up to 64 bytes more than its body's record (its tag, and
                // the padding that rounds it up), and every record takes at least 128: a group
                // measured at two thirds of the bound still fits with its tags.
                encode::max_group_log_bytes(log_capacity, max_frame + RECORD_TAG_SIZE as u32) / 3 * 2
            } else {
                encode::max_group_log_bytes(log_capacity, max_frame)
            },
        };
        Ok(Link {
            lanes: lanes.into_boxed_slice(),
            lanes_per_replica: opts.lanes as usize,
            replicas: targets.len(),
            session,
            epoch,
            next_seq: AtomicU64::new(welcome.next_seq),
            limits,
            failed: OnceLock::new(),
            welcome,
            retries: Mutex::new(Vec::new()),
            probes: AtomicU64::new(0),
            mirror: opts.mirror.clone(),
            clock,
        })
    }

    /// The Copy frames replicas asked for again since the last call.
    pub fn take_retries(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *lock(&self.retries))
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    pub fn is_failed(&self) -> bool {
        self.failed.get().is_some()
    }

    /// Why the link failed (called once it has).
    pub fn lost(&self) -> LinkError {
        self.failed.get().cloned().unwrap_or_else(|| LinkError::Bug("the link has not failed".into()))
    }

    /// Sends a group on lane `l` of every replica; `before_send` runs once its sequence number
    /// is known and before any frame leaves. Returns the group's number and the group
    /// `async_window` groups back on the lane.
    pub fn send_group(
        &self,
        region: &RegionFile,
        l: usize,
        ranges: &[Range],
        shape: GroupShape,
        before_send: impl FnOnce(u64),
        stage: &mut Stage<'_>,
    ) -> Result<(u64, u64), LinkError> {
        let (mut guards, seq) = self.lock_and_number(l)?;
        before_send(seq);
        let mut behind = 0;
        for (r, tx) in guards.iter_mut().enumerate().take(self.replicas) {
            let tx = tx.as_mut().expect("locked above");
            let group = Group { ranges, shape, region };
            behind = self.send_frames(tx, r * self.lanes_per_replica + l, seq, group, stage)?;
            self.lanes[r * self.lanes_per_replica + l].last_tx.store(self.now_ms(), Ordering::Relaxed);
        }
        Ok((seq, behind))
    }

    /// Frames `ranges` as a copy group of lane `l` to be sent straight from the region
    /// ([`Link::send_framed_copy`]): checksummed now, in the region. The bytes may change before
    /// they are sent; the replica then finds the checksum wrong, asks for the frame again
    /// (CopyRetry), and the copy resends it from a snapshot before it ends. Needs no lock, so
    /// another thread can frame the next group while this one is sent.
    pub fn frame_copy(&self, region: &RegionFile, l: usize, ranges: &[Range], scratch: &mut CopyScratch) {
        debug_assert!(!scratch.has_snapshot(), "a copy sent from the region has no snapshot");
        // Cannot fail: without a snapshot there is no room to run out of.
        let _ = scratch.frame(region, self.tag(l), ranges);
    }

    /// Sends a copy group framed by [`Link::frame_copy`] on lane `l` of every replica: Copy
    /// frames, which land straight in the replica's data area, then the Copied frame that
    /// numbers them. Returns the group's number.
    ///
    /// The bytes are read from the region as they are sent, after the number is assigned, so
    /// they hold every group numbered before it (their bytes were stored before they were
    /// numbered), and any later group is applied after it.
    pub fn send_framed_copy(
        &self,
        region: &RegionFile,
        l: usize,
        scratch: &CopyScratch,
    ) -> Result<u64, LinkError> {
        let (mut guards, seq) = self.lock_and_number(l)?;
        self.send_copy_locked(&mut guards, region, l, seq, scratch)?;
        Ok(seq)
    }

    /// Sends `ranges` as a copy group on lane `l` of every replica, read into a snapshot once
    /// the group's number is assigned and sent from there (see [`Link::send_framed_copy`]):
    /// the resends of frames a replica found changed on the way. Returns the group's number.
    pub fn send_copy_snapshot(
        &self,
        region: &RegionFile,
        l: usize,
        ranges: &[Range],
        scratch: &mut CopyScratch,
    ) -> Result<u64, LinkError> {
        let (mut guards, seq) = self.lock_and_number(l)?;
        debug_assert!(scratch.has_snapshot(), "a resend is made with a snapshot");
        scratch.frame(region, self.tag(l), ranges)?;
        self.send_copy_locked(&mut guards, region, l, seq, scratch)?;
        Ok(seq)
    }

    /// Lane `l`'s sending side of every replica, locked, and the next group's number, assigned
    /// under those locks so that a lane's groups go out in sequence order; an error once the
    /// link has failed.
    fn lock_and_number(&self, l: usize) -> Result<(TxGuards<'_, C>, u64), LinkError> {
        let mut guards: TxGuards<'_, C> = Default::default();
        for (r, g) in guards.iter_mut().enumerate().take(self.replicas) {
            *g = Some(lock(&self.lanes[r * self.lanes_per_replica + l].tx));
        }
        if self.is_failed() {
            return Err(self.lost());
        }
        for r in 0..self.replicas {
            self.lanes[r * self.lanes_per_replica + l].numbering.store(true, Ordering::SeqCst);
        }
        Ok((guards, self.next_seq.fetch_add(1, Ordering::SeqCst)))
    }

    /// The tag of this session's frames on lane `l`.
    fn tag(&self, l: usize) -> SessionTag {
        SessionTag { session: self.session, epoch: self.epoch, lane: l as u16 }
    }

    /// Sends the framed copy group `scratch` as group `seq` on the locked lanes `guards`.
    fn send_copy_locked(
        &self,
        guards: &mut TxGuards<'_, C>,
        region: &RegionFile,
        l: usize,
        seq: u64,
        scratch: &CopyScratch,
    ) -> Result<(), LinkError> {
        let from_snapshot = scratch.has_snapshot();
        let marker = encode::copied_header(self.tag(l), seq, &scratch.ranges);
        for (r, tx) in guards.iter_mut().enumerate().take(self.replicas) {
            let tx = tx.as_mut().expect("locked by lock_and_number");
            let mut cursor = 0;
            for batch in scratch.headers.chunks(BATCH) {
                let mut iov = [IoSlice::new(&[]); 2 * BATCH];
                for (i, &(ref h, at, n)) in batch.iter().enumerate() {
                    iov[2 * i] = IoSlice::new(h);
                    iov[2 * i + 1] = if from_snapshot {
                        IoSlice::new(&scratch.snapshot[cursor..cursor + n])
                    } else {
                        region.view(at, n).io_slice()
                    };
                    cursor += n;
                }
                if let Err(e) = tx.conn.send_all_vectored(&mut iov[..2 * batch.len()]) {
                    return Err(
                        self.fail_send(r * self.lanes_per_replica + l, format!("send copy on lane {l}: {e}"))
                    );
                }
            }
            let sent = if tx.placed.is_some() {
                let len = scratch.ranges.len();
                let size = tx.placed.as_ref().expect("a placed lane").record_size(len as u64);
                self.room(tx, r * self.lanes_per_replica + l, || std::iter::once(size))?;
                let p = tx.placed.as_mut().expect("a placed lane");
                let (pos, at) = p.take(size);
                let written = match &p.mac {
                    Some(mac) => p.mem.write_sealed(at, &scratch.ranges, mac, seq, 0),
                    None => p.mem.write(at, &scratch.ranges),
                };
                match written {
                    Ok(checksum) => {
                        let marker =
                            p.seal(encode::placed_copied_header(self.tag(l), seq, len as u32, checksum, pos));
                        tx.conn.send_all_vectored(&mut [IoSlice::new(&marker)])
                    }
                    Err(e) => Err(e),
                }
            } else {
                tx.conn.send_all_vectored(&mut [IoSlice::new(&marker), IoSlice::new(&scratch.ranges)])
            };
            if let Err(e) = sent {
                return Err(
                    self.fail_send(r * self.lanes_per_replica + l, format!("send copy on lane {l}: {e}"))
                );
            }
            let lane = &self.lanes[r * self.lanes_per_replica + l];
            lane.sent(seq);
            lane.last_tx.store(self.now_ms(), Ordering::Relaxed);
        }
        Ok(())
    }

    fn send_frames(
        &self,
        tx: &mut Tx<C>,
        at: usize,
        seq: u64,
        group: Group<'_>,
        stage: &mut Stage<'_>,
    ) -> Result<u64, LinkError> {
        if tx.placed.is_some() {
            self.place_frames(tx, at, seq, group, stage)?;
        } else {
            self.stream_frames(tx, at, seq, group, stage)?;
        }
        self.lanes[at].sent(seq);
        let behind = tx.window.sent(seq);
        Ok(behind)
    }

    /// [`Link::send_frames`] on a lane whose bodies go on the connection: headers and bodies,
    /// the bodies straight from the region, in batches of `writev`.
    fn stream_frames(
        &self,
        tx: &mut Tx<C>,
        at: usize,
        seq: u64,
        group: Group<'_>,
        stage: &mut Stage<'_>,
    ) -> Result<(), LinkError> {
        let lane = self.lanes[at].index;
        let tag = self.tag(lane as usize);
        let Group { ranges, shape, region } = group;
        let mut plans = encode::frames(ranges, self.limits.max_frame, shape);
        let mut bodies = [MapSlice::empty(); BATCH];
        let mut framed = 0;
        loop {
            let mut n = 0;
            while n < BATCH {
                let Some(plan) = plans.next() else { break };
                stage.frame(framed, plan.offset, plan.len as u64);
                framed += plan.len as u64;
                // The application may store into these bytes meanwhile: a view, checksummed
                // and sent from the mapping, never borrowed as a slice.
                let body = region.view(plan.offset, plan.len as usize);
                tx.headers[n] = data_header_with_checksum(tag, seq, plan, body.crc32c());
                bodies[n] = body;
                n += 1;
            }
            if n == 0 {
                break;
            }
            let mut iov = [IoSlice::new(&[]); 2 * BATCH];
            for i in 0..n {
                iov[2 * i] = IoSlice::new(&tx.headers[i]);
                iov[2 * i + 1] = bodies[i].io_slice();
            }
            if let Err(e) = tx.conn.send_all_vectored(&mut iov[..2 * n]) {
                return Err(self.fail_send(at, format!("send on lane {lane}: {e}")));
            }
        }
        Ok(())
    }

    /// [`Link::send_frames`] on a placed lane: each body is copied from the region straight into
    /// the mirror's log and checksummed there, and only the headers are sent, in batches.
    fn place_frames(
        &self,
        tx: &mut Tx<C>,
        at: usize,
        seq: u64,
        group: Group<'_>,
        stage: &mut Stage<'_>,
    ) -> Result<(), LinkError> {
        let lane = self.lanes[at].index;
        let tag = self.tag(lane as usize);
        let Group { ranges, shape, region } = group;
        let tag_len = match &tx.placed.as_ref().expect("a placed lane").mac {
            Some(_) => RECORD_TAG_SIZE as u64,
            None => 0,
        };
        let sizes = || {
            encode::frames(ranges, self.limits.max_frame, shape)
                .map(move |p| record_size(p.len as u64 + tag_len))
        };
        self.room(tx, at, sizes)?;
        let mut framed = 0;
        let mut n = 0;
        for plan in encode::frames(ranges, self.limits.max_frame, shape) {
            stage.frame(framed, plan.offset, plan.len as u64);
            framed += plan.len as u64;
            let p = tx.placed.as_mut().expect("a placed lane");
            let (pos, body_at) = p.take(record_size(plan.len as u64 + tag_len));
            // The application may store into the region meanwhile: the checksum (and the tag)
            // are of exactly the bytes placed.
            let body = region.view(plan.offset, plan.len as usize);
            let placed = match &p.mac {
                Some(mac) => p.mem.place_sealed(body_at, body, mac, seq, plan.frame_index),
                None => p.mem.place(body_at, body),
            };
            let checksum = match placed {
                Ok(c) => c,
                Err(e) => return Err(self.fail_send(at, format!("place a record on lane {lane}: {e}"))),
            };
            tx.headers[n] = p.seal(placed_data_header(tag, seq, plan, checksum, pos));
            n += 1;
            if n == BATCH {
                self.ring(tx, at, &mut n)?;
            }
        }
        self.ring(tx, at, &mut n)
    }

    /// Sends the `n` headers batched in `tx`: the doorbells of records already placed (the
    /// connection's write makes their bodies reach the mirror first: `PeerMemory::place`).
    fn ring(&self, tx: &mut Tx<C>, at: usize, n: &mut usize) -> Result<(), LinkError> {
        if *n == 0 {
            return Ok(());
        }
        let mut iov = [IoSlice::new(&[]); BATCH];
        for (i, h) in tx.headers[..*n].iter().enumerate() {
            iov[i] = IoSlice::new(h);
        }
        let sent = tx.conn.send_all_vectored(&mut iov[..*n]);
        *n = 0;
        sent.map_err(|e| self.fail_send(at, format!("send on lane {}: {e}", self.lanes[at].index)))
    }

    /// Waits until the records of `sizes` (a whole group's, or a Copied frame's) fit in the
    /// mirror's log of placed lane `at`, as far as this side knows: where the mirror said its log
    /// is free. Called between groups only, where a Heartbeat may go: while they do not fit, it
    /// asks the mirror where its log is free now (the Heartbeat's answer says), until the mirror
    /// frees space by applying what it has, or the link fails.
    fn room<I: Iterator<Item = u64>>(
        &self,
        tx: &mut Tx<C>,
        at: usize,
        sizes: impl Fn() -> I,
    ) -> Result<(), LinkError> {
        let lane = &self.lanes[at];
        let mut pause = Duration::from_micros(20);
        loop {
            let p = tx.placed.as_mut().expect("a placed lane");
            let told = lane.log_tail.load(Ordering::Acquire);
            if told > p.space.tail() {
                if told > p.space.head() {
                    return Err(self.fail(LinkError::PeerMisbehaved(format!(
                        "mirror {} said lane {}'s log is free before position {told}, past the last record \
                         placed there, which ends at {}",
                        self.mirror,
                        lane.index,
                        p.space.head()
                    ))));
                }
                p.space.advance_tail(told);
            }
            let mut probe = p.space;
            let fits = sizes()
                .all(|size| probe.place(size).map(|place| probe.advance_head(place.pos + size)).is_some());
            if fits {
                return Ok(());
            }
            // `offset`: the log bytes this side waits for; the mirror makes room, then answers.
            let mut h = FrameHeader::new(FrameKind::Heartbeat);
            (h.lane, h.epoch, h.session) = (lane.index, self.epoch, self.session);
            h.offset = sizes().sum::<u64>().max(1);
            lane.asked.store(true, Ordering::Release);
            if let Err(e) = tx.conn.send_all_vectored(&mut [IoSlice::new(&h.to_bytes())]) {
                return Err(self.fail_send(at, format!("send Heartbeat on lane {}: {e}", lane.index)));
            }
            self.wait_acked(lane, Until::Heard)?;
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    /// Sends a control frame (no body) on lane `l` of every replica.
    pub fn send_control(&self, l: usize, kind: FrameKind, offset: u64, seq: u64) -> Result<(), LinkError> {
        for r in 0..self.replicas {
            let lane = &self.lanes[r * self.lanes_per_replica + l];
            let mut h = FrameHeader::new(kind);
            h.lane = l as u16;
            h.epoch = self.epoch;
            h.session = self.session;
            h.offset = offset;
            h.seq = seq;
            let bytes = h.to_bytes();
            let mut tx = lock(&lane.tx);
            if let Err(e) = tx.conn.send_all_vectored(&mut [IoSlice::new(&bytes)]) {
                return Err(
                    self.fail_send(r * self.lanes_per_replica + l, format!("send {kind:?} on lane {l}: {e}"))
                );
            }
            lane.last_tx.store(self.now_ms(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Returns once the mirror (every replica) has carried out every frame sent on lane `l`
    /// before this call: sends a Heartbeat with a fresh probe number in `seq`, and waits for the
    /// answer that repeats it. A receiver's lane answers a Heartbeat only after the frames
    /// before it, and its Heartbeats sent unasked (while it holds a group back) carry no probe
    /// number, so no other frame is taken for this answer.
    pub fn confirm(&self, l: usize) -> Result<(), LinkError> {
        for r in 0..self.replicas {
            let at = r * self.lanes_per_replica + l;
            let lane = &self.lanes[at];
            let probe = {
                let mut tx = lock(&lane.tx);
                if self.is_failed() {
                    return Err(self.lost());
                }
                let probe = self.probes.fetch_add(1, Ordering::AcqRel) + 1;
                let mut h = FrameHeader::new(FrameKind::Heartbeat);
                (h.lane, h.epoch, h.session, h.seq) = (lane.index, self.epoch, self.session, probe);
                lane.asked.store(true, Ordering::Release);
                if let Err(e) = tx.conn.send_all_vectored(&mut [IoSlice::new(&h.to_bytes())]) {
                    return Err(self.fail_send(at, format!("send Heartbeat on lane {l}: {e}")));
                }
                lane.last_tx.store(self.now_ms(), Ordering::Relaxed);
                probe
            };
            self.wait_acked(lane, Until::Answered(probe))?;
        }
        Ok(())
    }

    /// Lanes to each replica.
    pub fn lanes_per_replica(&self) -> usize {
        self.lanes_per_replica
    }

    /// Waits until `seq` is acknowledged on lane `l` of every replica.
    pub fn wait(&self, l: usize, seq: u64) -> Result<(), LinkError> {
        for r in 0..self.replicas {
            self.wait_acked(&self.lanes[r * self.lanes_per_replica + l], Until::Acked(seq))?;
        }
        Ok(())
    }

    fn wait_acked(&self, lane: &Lane<C>, until: Until) -> Result<(), LinkError> {
        let mut w = lock(&lane.waiters);
        loop {
            if until.reached(lane) {
                return Ok(());
            }
            if self.is_failed() {
                return Err(self.lost());
            }
            if !w.reader_busy {
                break;
            }
            if let Until::Heard = until {
                // Someone else is reading: the lane is being heard.
                return Ok(());
            }
            w = lane.cv.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        w.reader_busy = true;
        drop(w);
        let res = self.read_frames(lane, until);
        lock(&lane.waiters).reader_busy = false;
        lane.cv.notify_all();
        res
    }

    /// Reads frames on `lane` until `until` holds.
    fn read_frames(&self, lane: &Lane<C>, until: Until) -> Result<(), LinkError> {
        let mut rx = lock(&lane.rx);
        loop {
            if until.reached(lane) {
                return Ok(());
            }
            if self.is_failed() {
                return Err(self.lost());
            }
            let mut hb = [0u8; FRAME_HEADER_SIZE];
            if let Err(e) = rx.read_exact(&mut hb) {
                let why = if mojim_transport::frames::timed_out(&e) {
                    "no heartbeat or acknowledgement within the heartbeat timeout".to_string()
                } else {
                    e.to_string()
                };
                return Err(
                    self.fail(LinkError::Lost(format!("lane {} from {}: {why}", lane.index, self.mirror)))
                );
            }
            lane.last_rx.store(self.now_ms(), Ordering::Relaxed);
            lane.asked.store(false, Ordering::Release);
            let h = match FrameHeader::decode(&hb) {
                Ok(h) => h,
                Err(e) => {
                    return Err(self.fail(LinkError::PeerMisbehaved(format!(
                        "bad frame from {} on lane {}: {e}",
                        self.mirror, lane.index
                    ))))
                }
            };
            match h.kind {
                FrameKind::Ack => {
                    let prev = lane.acked.load(Ordering::Acquire);
                    let next = self.next_seq.load(Ordering::Relaxed);
                    if h.session != self.session || h.lane != lane.index || h.seq <= prev || h.seq >= next {
                        return Err(self.fail(LinkError::PeerMisbehaved(format!(
                            "mirror {} acknowledged group {} on lane {} (session {:#x}), expected a group in {}..{} of session {:#x}",
                            self.mirror, h.seq, h.lane, h.session, prev + 1, next, self.session
                        ))));
                    }
                    lane.acked.store(h.seq, Ordering::Release);
                    lane.log_tail.fetch_max(h.offset, Ordering::Release);
                    // Wake threads waiting on earlier groups of this lane.
                    let _w = lock(&lane.waiters);
                    lane.cv.notify_all();
                    if let Until::Heard = until {
                        return Ok(());
                    }
                }
                FrameKind::Heartbeat if h.body_len == 0 && h.session == self.session => {
                    lane.log_tail.fetch_max(h.offset, Ordering::Release);
                    // `seq`: the probe number of the Heartbeat this one answers (0: none).
                    if h.seq != 0 {
                        let sent = self.probes.load(Ordering::Acquire);
                        if h.seq > sent {
                            return Err(self.fail(LinkError::PeerMisbehaved(format!(
                                "mirror {} answered probe {} on lane {}, but the last probe sent was {sent}",
                                self.mirror, h.seq, lane.index
                            ))));
                        }
                        lane.answered.fetch_max(h.seq, Ordering::Release);
                        let _w = lock(&lane.waiters);
                        lane.cv.notify_all();
                    }
                    if let Until::Heard = until {
                        return Ok(());
                    }
                }
                FrameKind::CopyRetry if h.body_len == 0 && h.session == self.session => {
                    // `offset` and `seq` (the length) name a Copy frame this node sent: inside
                    // the region, and not empty.
                    let size = self.limits.region_size;
                    if h.seq == 0 || h.offset.checked_add(h.seq).is_none_or(|end| end > size) {
                        return Err(self.fail(LinkError::PeerMisbehaved(format!(
                            "mirror {} asked again for {} bytes at offset {} on lane {}, outside the region of \
                             {size} bytes",
                            self.mirror, h.seq, h.offset, lane.index
                        ))));
                    }
                    let mut asked = lock(&self.retries);
                    if asked.len() >= MAX_RETRIES_ASKED {
                        drop(asked);
                        return Err(self.fail(LinkError::PeerMisbehaved(format!(
                            "mirror {} asked for more than {MAX_RETRIES_ASKED} Copy frames again",
                            self.mirror
                        ))));
                    }
                    asked.push((h.offset, h.seq));
                }
                FrameKind::Refuse if (h.body_len as usize) <= REFUSE_MAX => {
                    let msg =
                        read_refusal(&mut *rx, &h).unwrap_or_else(|| "mirror refused the session".into());
                    return Err(self.fail(LinkError::Refused(msg)));
                }
                k => {
                    return Err(self.fail(LinkError::PeerMisbehaved(format!(
                        "unexpected {k:?} frame from {} on lane {}",
                        self.mirror, lane.index
                    ))))
                }
            }
        }
    }

    /// Sends a Heartbeat on every lane that has sent nothing for `interval`, and returns how
    /// long until the next lane will have. It never waits for an answer (the keeper reads them,
    /// [`Link::hear`]), so a lane whose answer is slow delays no other lane's Heartbeat.
    ///
    /// A lane whose sending side is held is being sent on (a group, a copy group, a control
    /// frame, or [`Link::room`]'s own Heartbeats): it is skipped, and looked at again after
    /// `interval / 8`, so that a holder that sends nothing more still leaves the lane its
    /// Heartbeat within the interval after it let go.
    pub fn beat(&self, interval: Duration) -> Result<Duration, LinkError> {
        let interval = interval.as_millis() as u64;
        let retry = (interval / 8).max(1);
        let now = self.now_ms();
        let mut next = interval;
        for lane in self.lanes.iter() {
            let idle = now.saturating_sub(lane.last_tx.load(Ordering::Relaxed));
            if idle < interval {
                next = next.min(interval - idle);
                continue;
            }
            let mut tx = match lane.tx.try_lock() {
                Ok(tx) => tx,
                // As `lock`: a panic while holding a lane lock leaves only counters behind.
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    next = next.min(retry);
                    continue;
                }
            };
            let mut h = FrameHeader::new(FrameKind::Heartbeat);
            h.lane = lane.index;
            h.epoch = self.epoch;
            h.session = self.session;
            // Owed from here on: an answer read before this store would clear it too late.
            lane.asked.store(true, Ordering::Release);
            if let Err(e) = tx.conn.send_all_vectored(&mut [IoSlice::new(&h.to_bytes())]) {
                drop(tx);
                return Err(self.fail(LinkError::Lost(format!("send heartbeat on lane {}: {e}", lane.index))));
            }
            lane.last_tx.store(now, Ordering::Relaxed);
        }
        Ok(Duration::from_millis(next.max(1)))
    }

    /// Reads every lane that the mirror owes a frame (a Heartbeat's answer, a group's Ack)
    /// until it is heard, and fails the link if a lane heard nothing for `timeout`.
    ///
    /// A lane owed nothing is not read: the mirror sends nothing unasked while it holds nothing
    /// back, so a read there would wait for the lane's receive timeout (the heartbeat timeout)
    /// for a frame that never comes. [`Link::beat`] asks such a lane once it has been idle for
    /// the interval.
    pub fn hear(&self, timeout: Duration) -> Result<(), LinkError> {
        for lane in self.lanes.iter() {
            if lane.owes_answer() {
                self.wait_acked(lane, Until::Heard)?;
            }
            let silent = self.now_ms().saturating_sub(lane.last_rx.load(Ordering::Relaxed));
            if silent > timeout.as_millis() as u64 {
                return Err(self.fail(LinkError::Lost(format!(
                    "lane {} heard nothing from {} for {silent} ms",
                    lane.index, self.mirror
                ))));
            }
        }
        Ok(())
    }

    /// A send on lane `at` failed. The mirror may have refused the session just before (its
    /// Refuse is still in the receive buffer, perhaps behind acknowledgements and heartbeats):
    /// its reason says more than a broken pipe. A thread reading the lane meanwhile finds the
    /// Refuse itself (the connection is closed, so its read ends at once) and fails the link
    /// with it.
    fn fail_send(&self, at: usize, what: String) -> LinkError {
        let mut rx = lock(&self.lanes[at].rx);
        if self.is_failed() {
            return self.lost();
        }
        for _ in 0..64 {
            let mut hb = [0u8; FRAME_HEADER_SIZE];
            let Some(h) = rx.read_exact(&mut hb).ok().and_then(|_| FrameHeader::decode(&hb).ok()) else {
                break;
            };
            match h.kind {
                FrameKind::Ack | FrameKind::Heartbeat if h.body_len == 0 => continue,
                FrameKind::Refuse if h.body_len as usize <= REFUSE_MAX => {
                    if let Some(msg) = read_refusal(&mut *rx, &h) {
                        return self.fail(LinkError::Refused(msg));
                    }
                    break;
                }
                _ => break,
            }
        }
        drop(rx);
        self.fail(LinkError::Lost(what))
    }

    /// Marks the link failed and closes every lane, so no thread waits forever.
    pub fn fail(&self, reason: LinkError) -> LinkError {
        let _ = self.failed.set(reason);
        for lane in self.lanes.iter() {
            lane.ctl.shutdown();
            let _w = lock(&lane.waiters);
            lane.cv.notify_all();
        }
        self.lost()
    }

    /// Waits until every group sent so far is acknowledged.
    pub fn drain(&self) -> Result<(), LinkError> {
        for lane in self.lanes.iter() {
            // Taken once a send in progress has finished.
            let last = {
                let _tx = lock(&lane.tx);
                lane.last_sent.load(Ordering::Acquire)
            };
            if last != 0 {
                self.wait_acked(lane, Until::Acked(last))?;
            }
        }
        Ok(())
    }

    /// Closes every lane (the mirror seals the session).
    pub fn close(&self) {
        for lane in self.lanes.iter() {
            lane.ctl.shutdown();
        }
    }

    pub fn acked(&self) -> Vec<u64> {
        self.lanes.iter().map(|l| l.acked.load(Ordering::Relaxed)).collect()
    }

    /// Groups sent and not yet known to be acknowledged, at most: from the lowest
    /// acknowledgement a lane still owes to the last group numbered (0 while none is owed).
    pub fn in_flight(&self) -> u64 {
        let last = self.next_seq.load(Ordering::Relaxed).saturating_sub(1);
        let owed = |l: &&Lane<C>| l.last_sent.load(Ordering::Acquire) > l.acked.load(Ordering::Acquire);
        let lowest = self.lanes.iter().filter(owed).map(|l| l.acked.load(Ordering::Acquire)).min();
        lowest.map_or(0, |a| last.saturating_sub(a))
    }

    /// Per lane index, the last group every replica acknowledged on it: what a session that
    /// ended still vouches for (`Inner::wait` reads it once the session is gone).
    pub fn acked_per_lane(&self) -> Vec<u64> {
        (0..self.lanes_per_replica)
            .map(|l| {
                (0..self.replicas)
                    .map(|r| self.lanes[r * self.lanes_per_replica + l].acked.load(Ordering::Acquire))
                    .min()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// A number every group up to which the mirror acknowledged: below the lowest group still
    /// owed an Ack, or the last group numbered when none is. A lane with nothing owed and
    /// nothing being sent holds it back no further, so an idle lane does not pin it at the
    /// session's start.
    ///
    /// Why no unacknowledged group `n` can be at or below it: `n` was numbered before `top` was
    /// read (else `n > top`), after its lane's `numbering` was set. If that lane still reads
    /// `numbering`, its `acked` counts, and is below `n` (a lane's Acks come in order). If not,
    /// `last_sent` already holds `n` or more, so the lane is owed, and both its `acked` and its
    /// `first_owed - 1` are below `n`: `n` went out after the lane last owed nothing.
    pub fn acked_floor(&self) -> u64 {
        let top = self.next_seq.load(Ordering::SeqCst).saturating_sub(1);
        self.lanes.iter().filter_map(|l| l.floor()).fold(top, u64::min)
    }
}

/// Reads the body of the Refuse frame `h` and says why the mirror refused, if it decodes.
fn read_refusal(rx: &mut impl std::io::Read, h: &FrameHeader) -> Option<String> {
    let mut body = vec![0u8; h.body_len as usize];
    rx.read_exact(&mut body).ok()?;
    let (code, m) = decode_refuse(&body).ok()?;
    Some(format!("mirror refused the session ({code:?}): {m}"))
}
