//! A data lane: frames from the primary go straight into the lane's log, and each group is
//! acknowledged once it is whole there and persistent.

use super::forward::AckRefused;
use super::lane_logs::LaneRef;
use super::Shared;
use mojim_core::control::{lane_step, CopyPhase, LaneStep};
use mojim_core::encode::{ack_header_with_tail, copy_retry_header, heartbeat_answer, SessionTag};
use mojim_core::lane::Slot;
use mojim_core::mirror::{copy_verdict, land, Body, CopyVerdict, GroupStep, RecordRules, StoreError};
use mojim_core::receive::Violation;
use mojim_format::handshake::{encode_refuse, RefuseCode};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::LogFile;
use mojim_transport::record_mac::TAG_SIZE;
use mojim_transport::{Conn, RecordMac};
use std::io::{BufReader, Read};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Bytes a lane reads ahead. A frame's header and a small body, or many small frames (a bitmap
/// copy's chunks, small groups), come in one receive; a body at least this large is read
/// straight into place once what was read ahead is used. A connection that does not read ahead
/// (shared memory) gets a buffer of one header: every read then bypasses it, and a body goes
/// from the ring straight into its log slot.
const READ_AHEAD: usize = 64 << 10;

/// Why a lane stopped.
pub(crate) enum LaneEnd {
    /// The peer closed or the connection failed.
    Closed(String),
    /// The peer broke the protocol.
    Violation(Violation),
    /// This node could not store what it received.
    Storage(String),
}

impl LaneEnd {
    pub fn describe(&self) -> String {
        match self {
            LaneEnd::Closed(m) => m.clone(),
            LaneEnd::Violation(v) => format!("protocol violation: {v}"),
            LaneEnd::Storage(m) => format!("storage failure: {m}"),
        }
    }
}

/// Receives the lane until it ends. On a `placed` lane (`Some`) the primary writes each
/// record's body into the log itself and sends only its header, the doorbell; over TLS each
/// such record is sealed with the key `placed` holds.
pub(crate) fn run<C: Conn>(
    s: &Shared,
    conn: &mut C,
    tag: SessionTag,
    placed: Option<Option<RecordMac>>,
) -> LaneEnd {
    let end = receive(s, conn, tag, placed);
    if let LaneEnd::Violation(v) = &end {
        s.stats.set_last_violation(format!("session {:#x} lane {}: {v}", tag.session, tag.lane));
    }
    if let LaneEnd::Storage(msg) = &end {
        // Tell the primary why before closing: its sync fails with this message.
        let mut body = Vec::new();
        encode_refuse(RefuseCode::Storage, msg, &mut body);
        if mojim_transport::frames::send(conn, FrameKind::Refuse, 0, &body).is_ok() {
            drain(conn);
        }
    }
    end
}

/// Reads and drops what the peer still sends, until it closes (it does once it reads the
/// Refuse) or a few seconds pass. Closing with unread bytes would reset the connection, and a
/// reset can throw away the Refuse before the peer reads it.
fn drain<C: Conn>(conn: &mut C) {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let _ = conn.set_recv_timeout(Some(Duration::from_millis(100)));
    let mut buf = [0u8; 16 << 10];
    while std::time::Instant::now() < deadline {
        match conn.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if mojim_transport::frames::timed_out(&e) => {}
            Err(_) => return,
        }
    }
}

/// A heartbeat, telling the primary where the lane's log is free (`tail`: it places records
/// on a placed lane); `probe`: the probe number of the Heartbeat it answers (0: sent unasked).
fn heartbeat<C: Conn>(conn: &mut C, tag: SessionTag, tail: u64, probe: u64) -> std::io::Result<()> {
    mojim_transport::frames::write_frame(conn, &heartbeat_answer(tag, tail, probe), &[])
}

fn receive<C: Conn>(s: &Shared, conn: &mut C, tag: SessionTag, placed: Option<Option<RecordMac>>) -> LaneEnd {
    let pacer = Pacer { last_beat: Instant::now(), interval: s.opts.heartbeat.interval, tag };
    // Made when the lane joined (see `accept.rs`).
    let log = match s.lanes.log_of(tag.lane) {
        Ok(l) => l,
        Err(e) => return LaneEnd::Storage(e.to_string()),
    };
    let mut r = Receiver {
        s,
        tag,
        lane: s.lanes.lane(tag.lane),
        log,
        rules: RecordRules::new(),
        pacer,
        placed: placed.is_some(),
        mac: placed.flatten(),
        copy_buf: Vec::new(),
        // Reads go through `rx`; replies are written to the connection under it.
        rx: BufReader::with_capacity(if conn.reads_ahead() { READ_AHEAD } else { FRAME_HEADER_SIZE }, conn),
    };
    loop {
        if let Err(end) = r.frame() {
            return end;
        }
    }
}

/// Sends a heartbeat every interval while the lane waits.
struct Pacer {
    last_beat: Instant,
    interval: Duration,
    tag: SessionTag,
}

impl Pacer {
    /// Sends a heartbeat if one is due.
    fn beat<C: Conn>(&mut self, conn: &mut C, lane: &LaneRef<'_>) -> std::io::Result<()> {
        if self.last_beat.elapsed() >= self.interval {
            self.last_beat = Instant::now();
            return heartbeat(conn, self.tag, lane.tail(), 0);
        }
        Ok(())
    }
}

/// A data lane's receiving end: the lane, its log, and the connection it reads.
struct Receiver<'a, C: Conn> {
    s: &'a Shared,
    tag: SessionTag,
    lane: LaneRef<'a>,
    log: &'a LogFile,
    /// How a record is stored and its group completed (the core's order).
    rules: RecordRules,
    pacer: Pacer,
    /// The primary places records' bodies in the log itself (see [`check_placed`]).
    placed: bool,
    /// On a placed lane over TLS, the key every record placed in the log is sealed with (and,
    /// if it encrypts, its body encrypted with).
    mac: Option<RecordMac>,
    /// Where a Copy frame's body is read and checked, and an encrypted body decrypted.
    copy_buf: Vec<u8>,
    rx: BufReader<&'a mut C>,
}

impl<C: Conn> Receiver<'_, C> {
    /// Receives one frame: a record goes into the log (and a group it completes is acknowledged),
    /// a control frame is carried out.
    fn frame(&mut self) -> Result<(), LaneEnd> {
        let mut hb = [0u8; FRAME_HEADER_SIZE];
        self.read_header(&mut hb)?;
        let slot = self.take_slot(&hb)?;
        let h = slot.accepted.header;
        // A group's numbers are checked against the whole session (every lane) before any of
        // it touches the log.
        if let Some((first, last)) = slot.accepted.begins_group() {
            if let Err(v) = super::session::take_seqs(self.s, self.tag, first, last) {
                return Err(LaneEnd::Violation(v));
            }
        }
        if self.control(&h)? {
            return Ok(());
        }
        if slot.size > 0 && h.has_mac() != self.mac.is_some() {
            let (seq, frame_index) = (h.seq, h.frame_index);
            let (sealed, expected) = (h.has_mac(), self.mac.is_some());
            return Err(LaneEnd::Violation(Violation::RecordMac { seq, frame_index, sealed, expected }));
        }
        let encrypts = self.mac.as_ref().is_some_and(RecordMac::encrypts);
        if slot.size > 0 && h.is_encrypted() != encrypts {
            let (seq, frame_index, encrypted) = (h.seq, h.frame_index, h.is_encrypted());
            return Err(LaneEnd::Violation(Violation::RecordEncrypted { seq, frame_index, encrypted }));
        }
        // The record's storage steps and their order are the core's (`mirror::record`).
        let rules = self.rules;
        if slot.size > 0 {
            let mut log = self.log;
            let body = if self.placed {
                check_placed(self.log, &slot, self.mac.as_ref(), &mut self.copy_buf)?;
                Body::InPlace
            } else {
                Body::Receive(&mut self.rx)
            };
            rules.store(&mut log, &slot, body).map_err(|e| match e {
                StoreError::Peer(v) => LaneEnd::Violation(v),
                StoreError::Receive(e) => LaneEnd::Closed(format!("receive frame body: {e}")),
                StoreError::Storage(e) => {
                    LaneEnd::Storage(format!("write a record to the log of lane {}: {e}", self.tag.lane))
                }
            })?;
        }
        let h = &slot.accepted.header;
        self.s.stats.received_bytes(h.body_len as u64);
        let done = self.lane.with(|l| l.commit(&slot));
        let mut due = false;
        for step in rules.after(h, done.as_ref()) {
            match step {
                GroupStep::PersistLog { from, to } => self.persist_log(from, to)?,
                // The Copy frames' bytes are in the data area: durable there before the group
                // is acknowledged (a disk file's writes need a sync; memory was written back
                // as they landed).
                GroupStep::SyncData => {
                    if let Err(e) = self.s.data.area().sync() {
                        return Err(LaneEnd::Storage(format!("sync copied bytes to the data area: {e}")));
                    }
                }
                GroupStep::Queue(g) => {
                    self.s.stats.received_group(g.seq);
                    due = super::checkpoint::push(self.s, g);
                }
                GroupStep::Ack(seq) => self.acknowledge(seq, due)?,
            }
        }
        Ok(())
    }

    /// Reads the next frame's header into `hb`. Nothing more is received once the storage failed.
    fn read_header(&mut self, hb: &mut [u8; FRAME_HEADER_SIZE]) -> Result<(), LaneEnd> {
        if let Err(e) = self.rx.read_exact(hb) {
            return Err(LaneEnd::Closed(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "end of stream".into()
            } else if mojim_transport::frames::timed_out(&e) {
                format!(
                    "the peer sent nothing for the heartbeat timeout ({:?})",
                    self.s.opts.heartbeat.timeout
                )
            } else {
                e.to_string()
            }));
        }
        if let Some(msg) = self.s.data.failed() {
            return Err(LaneEnd::Storage(msg.clone()));
        }
        Ok(())
    }

    /// The lane's verdict on the frame whose header is `hb`, and where its record goes in the
    /// log: while the log has no room for it, the lane waits for the checkpointer to free some,
    /// sending heartbeats.
    fn take_slot(&mut self, hb: &[u8; FRAME_HEADER_SIZE]) -> Result<Slot, LaneEnd> {
        let s = self.s;
        loop {
            // The lane's lock is let go before the match (`with` holds it for its closure only):
            // the wait for space takes the checkpointer's state, and the checkpointer needs this
            // lane to free the space (see the lock order in lib.rs).
            let placed = self.lane.with(|l| l.on_header(hb));
            match placed {
                Err(v) => return Err(LaneEnd::Violation(v)),
                Ok(Some(slot)) => return Ok(slot),
                Ok(None) => {
                    s.ckpt.wait_for_space();
                    if let Err(e) = self.pacer.beat(*self.rx.get_mut(), &self.lane) {
                        return Err(LaneEnd::Closed(format!("send heartbeat: {e}")));
                    }
                }
            }
            if s.shutdown.load(Ordering::SeqCst) {
                return Err(LaneEnd::Closed("shutting down".into()));
            }
            // A failed storage frees no log space: the wait would never end.
            if let Some(msg) = s.data.failed() {
                return Err(LaneEnd::Storage(msg.clone()));
            }
        }
    }

    /// Carries out a control frame. Returns whether `h` was one: Data, Skip and Copied frames
    /// are records for the log instead. Which frames are legal when is the core's rule
    /// (`mojim_core::control`); what they do is the node's.
    fn control(&mut self, h: &FrameHeader) -> Result<bool, LaneEnd> {
        let (s, tag) = (self.s, self.tag);
        match lane_step(h.kind, || copy_phase(s, tag.session)).map_err(LaneEnd::Violation)? {
            LaneStep::Record => Ok(false),
            LaneStep::AnswerHeartbeat => {
                // On a placed lane, `offset` is the log bytes the primary waits for: it sees the
                // log full (as far as the tails it was told go). The lane asks the checkpointer
                // for space, as it does when a record does not fit, before it answers.
                if self.placed && h.offset > 0 {
                    let free = self.lane.with(|l| l.space().capacity() - l.space().used());
                    if free < h.offset.saturating_mul(2) {
                        s.ckpt.wait_for_space();
                    }
                    if let Some(msg) = s.data.failed() {
                        return Err(LaneEnd::Storage(msg.clone()));
                    }
                }
                // Answered after every frame before it: the probe number it carries says which
                // Heartbeat this answer is (a primary confirms a copy's end so).
                if let Err(e) = heartbeat(*self.rx.get_mut(), tag, self.lane.tail(), h.seq) {
                    return Err(LaneEnd::Closed(format!("send heartbeat: {e}")));
                }
                Ok(true)
            }
            LaneStep::BeginCopy => {
                if let Err(e) = super::session::copy_begin(s, tag.session, h.seq) {
                    return Err(LaneEnd::Storage(e.to_string()));
                }
                Ok(true)
            }
            LaneStep::EndCopy => {
                if let Err(e) = super::session::copy_end(s, tag.session, tag.lane, h.offset, h.seq) {
                    return Err(LaneEnd::Storage(e.to_string()));
                }
                Ok(true)
            }
            LaneStep::LandCopy => {
                receive_copy(s, &mut self.rx, tag, h, &mut self.copy_buf)?;
                Ok(true)
            }
        }
    }

    /// Makes the log positions `from..to` persistent: a completed group's records and whatever
    /// the lane wrote before them since its last group (a Pad at the end of a lap), which
    /// recovery's scan must get through.
    fn persist_log(&self, from: u64, to: u64) -> Result<(), LaneEnd> {
        let (s, log) = (self.s, self.log);
        if let Err(e) = log.persist(from, to) {
            // Never retry a failed flush: the core has handed this range out once, and
            // nothing more may be acknowledged from this log until a restart recovers it.
            let what = format!(
                "the log of lane {} ({}) failed: cannot persist its records {from}..{to}: {e}",
                self.tag.lane,
                log.path().display(),
            );
            return Err(LaneEnd::Storage(s.data.fail(what)));
        }
        Ok(())
    }

    /// Group `seq` is whole and persistent in the log, and queued for the checkpointer:
    /// acknowledges it, and only then applies if the queue says so (`due`), off the primary's
    /// critical path.
    fn acknowledge(&mut self, seq: u64, due: bool) -> Result<(), LaneEnd> {
        let s = self.s;
        // A long wait still tells the primary this node is alive.
        let mut beat_failed = None;
        let (pacer, rx, lane) = (&mut self.pacer, &mut self.rx, &self.lane);
        let mut beat_now = || {
            if let Err(e) = pacer.beat(*rx.get_mut(), lane) {
                beat_failed.get_or_insert(e);
            }
            beat_failed.is_none()
        };
        // With backups, the core's ack gate may hold the acknowledgement (the secondary tier's
        // threshold, chain mode). The storage may fail while the group waits: it is whole in the
        // log (recovery may apply it), but it is not acknowledged.
        match super::forward::wait_to_ack(s, seq, &mut beat_now) {
            Ok(()) => {}
            Err(AckRefused::Storage(e)) => return Err(LaneEnd::Storage(e.to_string())),
            Err(AckRefused::LaneGone) => {
                let e = beat_failed.map_or_else(|| "the connection is gone".to_string(), |e| e.to_string());
                return Err(LaneEnd::Closed(format!("send heartbeat: {e}")));
            }
        }
        let ack = ack_header_with_tail(self.tag, seq, self.lane.tail());
        if let Err(e) = mojim_transport::frames::write_frame(*self.rx.get_mut(), &ack, &[]) {
            return Err(LaneEnd::Closed(format!("send ack: {e}")));
        }
        if due {
            super::checkpoint::apply_inline(s);
        }
        Ok(())
    }
}

/// Where `session`'s copy stands, for the core's rule on Copy and CopyEnd frames (the copy is
/// the session's: `session.rs`).
fn copy_phase(s: &Shared, session: u64) -> CopyPhase {
    super::session::copy_phase(s, session)
}

/// A Copy frame: region bytes, checked, then written straight into the data area (not the
/// log). Allowed only after this session's CopyBegin marked the data area inconsistent (the
/// core's rule, checked before this runs). The verdict on the body, and why landing early is
/// the same result, are the core's (`mirror::landing`); a body that fails its checksum does not
/// land and is asked for again with CopyRetry.
fn receive_copy<C: Conn>(
    s: &Shared,
    rx: &mut BufReader<&mut C>,
    tag: SessionTag,
    h: &FrameHeader,
    scratch: &mut Vec<u8>,
) -> Result<(), LaneEnd> {
    scratch.resize(h.body_len as usize, 0);
    if let Err(e) = rx.read_exact(scratch) {
        return Err(LaneEnd::Closed(format!("receive copy body: {e}")));
    }
    s.stats.received_bytes(scratch.len() as u64);
    let len = h.body_len as u64;
    if copy_verdict(h, scratch).map_err(LaneEnd::Violation)? == CopyVerdict::AskAgain {
        super::session::copy_rejected(s, h.session, h.offset, len).map_err(LaneEnd::Violation)?;
        s.stats.copy_retried();
        return mojim_transport::frames::write_frame(
            *rx.get_mut(),
            &copy_retry_header(tag, h.offset, len),
            &[],
        )
        .map_err(|e| LaneEnd::Closed(format!("send copy retry: {e}")));
    }
    {
        // Held for writing while the bytes land: readers see none of them half written.
        let _writing = s.data.write();
        land(&mut s.data.area(), h.offset, scratch)
            .map_err(|e| LaneEnd::Storage(format!("write copied bytes to the data area: {e}")))?;
    }
    super::session::copy_landed(s, h.session, h.offset, len);
    Ok(())
}

/// Before a body the primary placed in the log becomes a record: checks that it is where the
/// lane's log space puts the record, and its seal (`mac`). The core's `RecordRules::store` then
/// writes a Pad if needed, checks the body where it lies and writes the header, as it does for a
/// body received on the connection.
///
/// The body is checked in memory the primary can still write. A primary that changes it after
/// the check changes what is applied, as if it had sent other bytes of its own region; recovery
/// checks every record again. Over shared memory only a process of the mirror's own user on its
/// host can hold the log (it is offered on a socket of mode 0600), and such a process can write
/// the mirror's memory anyway (docs/DESIGN-transport.md).
///
/// Over TLS (`mac`) the record's tag, after its body, is checked first, on the bytes as they lie:
/// a body or tag forged or changed by anyone without the key (over UCX on tcp, anyone who can
/// reach the listener can put into the log) ends the lane before anything of it is logged.
///
/// Where `mac` encrypts (`[security] encrypt_placed`), the body is ciphertext: it is copied into
/// `scratch`, its tag checked and it decrypted there, and the plaintext written back in its place
/// before the header, so that the log (and what reads it: recovery, the checkpointer, the
/// backups) holds plaintext as on any other lane. The copy is this process's own: the peer may
/// write the log meanwhile, and what is written back is exactly what the tag checked.
fn check_placed(
    log: &LogFile,
    slot: &Slot,
    mac: Option<&RecordMac>,
    scratch: &mut Vec<u8>,
) -> Result<(), LaneEnd> {
    let (pos, h) = (slot.placement.pos, slot.accepted.header);
    if h.log_pos != pos {
        return Err(LaneEnd::Violation(Violation::Placed { found: h.log_pos, expected: pos }));
    }
    if let Some(mac) = mac {
        let (len, body_at) = (h.body_len as usize, pos + FRAME_HEADER_SIZE as u64);
        let mut tag = [0u8; TAG_SIZE];
        log.view_at(body_at + len as u64, TAG_SIZE).read(0, &mut tag);
        let checks = if mac.encrypts() {
            scratch.resize(len, 0);
            log.view_at(body_at, len).read(0, scratch);
            let opened = mac.decrypt(h.seq, h.frame_index, scratch, &tag);
            if opened {
                log.write_at(body_at, scratch);
            }
            opened
        } else {
            log.view_at(body_at, len).with_bytes(|b| mac.verify(h.seq, h.frame_index, b, &tag))
        };
        if !checks {
            let (seq, frame_index) = (h.seq, h.frame_index);
            return Err(LaneEnd::Violation(Violation::RecordMac {
                seq,
                frame_index,
                sealed: true,
                expected: true,
            }));
        }
    }
    Ok(())
}
