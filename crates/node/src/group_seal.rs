//! A group's seal: what this node checked of a group in a log a peer can write at any time, so
//! that its backups are sent exactly that.
//!
//! A lane's log offered over UCX stays writable by the peer (it holds the memory key) after the
//! lane checked a record, after the checkpointer checked and applied its copy, and while the
//! group waits in the forward queue for a backup that is slow or down. The forwarder reads the
//! group from the log once more to send it; a record changed in between must not reach a
//! backup, whose copy would then differ from this node's without anyone knowing.
//!
//! Why a seal of this node's own, and not the placed records' tags checked again:
//! - **It covers what is sent, header included.** The tag of a placed record binds its body to
//!   its group and frame (docs/FORMAT.md §2.4), not the header's offset, kind or length: those
//!   came through TLS as the doorbell, and the log copy of the header is as writable as the
//!   body. The seal covers the header's fields as the backup gets them.
//! - **Its key never expires.** The keys of placed records are kept for a lane's last four
//!   sessions only; a group can wait longer than that for a backup that is down. The seal's
//!   key is drawn when the node starts and kept until it stops.
//! - **One pass, encrypted or not.** A record placed encrypted lies decrypted in the log, and
//!   its tag can only be checked by encrypting it again and decrypting it back; the seal is a
//!   GMAC over the plaintext, one pass over the bytes that AES-NI and CLMUL make cheap.
//! - **Nothing to keep per record.** One 16-byte seal per group, kept with the group in the
//!   forward queue (this process's memory, which no peer writes).
//!
//! The seal is GMAC (AES-256-GCM with no plaintext) under a key drawn at start, over the
//! group's *sealed form*: each `Data` and `Copied` record in log order, its header as
//! [`sealed_header`] leaves it, then its body. The nonce is the group's sequence number (frame
//! index 0): a group is sealed once under a key (by the checkpointer as it applies it, or when
//! its log is first offered to such a peer), and the seal never leaves the process, so no
//! forger sees one. The forwarder copies the group's sealed form out of the log into a buffer
//! of its link, checks the seal on the copy, and sends from the copy: what it checked is what
//! it sends, whatever the peer writes meanwhile.

use super::log_changed::LogChanged;
use mojim_core::checkpoint::GroupRef;
use mojim_format::log::{record_at_verified, Record, RecordArea};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use mojim_region::MapSlice;
use mojim_transport::record_mac::{RECORD_KEY_SIZE, TAG_SIZE};
use mojim_transport::RecordMac;

/// A group's seal.
pub(crate) type Seal = [u8; TAG_SIZE];

/// The key groups are sealed with, drawn when the node starts, never written anywhere.
pub(crate) struct GroupSealer {
    key: RecordMac,
}

impl GroupSealer {
    /// A sealer with a key from the kernel's randomness.
    pub fn new() -> GroupSealer {
        let mut key = [0u8; RECORD_KEY_SIZE];
        mojim_transport::random::fill(&mut key);
        GroupSealer { key: RecordMac::new(&key) }
    }

    /// The seal of group `seq`'s sealed form `form`.
    pub fn seal(&self, seq: u64, form: &[u8]) -> Seal {
        self.key.tag(seq, 0, form)
    }

    /// Whether `seal` is the seal of group `seq`'s sealed form `form` (compared in constant
    /// time).
    pub fn verify(&self, seq: u64, form: &[u8], seal: &Seal) -> bool {
        self.key.verify(seq, 0, form, seal)
    }
}

/// A record's header as it enters its group's sealed form: without what differs between this
/// node's log and a backup's link (the lane, the session and epoch, the log position), and
/// without the `MAC` flag (the tag stays in this node's log: a backup gets the body alone).
pub(crate) fn sealed_header(mut h: FrameHeader) -> FrameHeader {
    h.lane = 0;
    h.epoch = 0;
    h.session = 0;
    h.log_pos = 0;
    h.flags &= !mojim_format::frame::FLAG_MAC;
    h
}

/// Appends a record to a sealed form: its header as [`sealed_header`] leaves it, then the room
/// for its body, which the caller fills. Returns where the body goes in `form`.
pub(crate) fn push_record(form: &mut Vec<u8>, h: &FrameHeader) -> std::ops::Range<usize> {
    form.extend_from_slice(&sealed_header(*h).to_bytes());
    let start = form.len();
    form.resize(start + h.body_len as usize, 0);
    start..form.len()
}

/// The record at `pos` of group `g` in a log a peer can write, checked again (its header's
/// checksum, and that it still ends within the group). Err: what no longer holds.
pub(crate) fn record_in_group(
    area: &MapSlice<'_>,
    g: &GroupRef,
    pos: u64,
    max_body: u32,
) -> Result<Record, LogChanged> {
    let rec = record_at_verified(area, pos, max_body).ok_or(LogChanged::NotARecord { pos })?;
    if rec.end_pos() > g.end_pos {
        return Err(LogChanged::PastGroupEnd { pos, end: rec.end_pos(), group_end: g.end_pos });
    }
    Ok(rec)
}

/// Copies group `g`'s sealed form out of `area` (its lane's log) into `form`, which is cleared
/// first and keeps its capacity. Err: where the log no longer holds a record of the group (a
/// peer changed it).
pub(crate) fn copy_form(
    area: MapSlice<'_>,
    g: &GroupRef,
    max_body: u32,
    form: &mut Vec<u8>,
) -> Result<(), LogChanged> {
    form.clear();
    let mut pos = g.start_pos;
    while pos < g.end_pos {
        let rec = record_in_group(&area, g, pos, max_body)?;
        pos = rec.end_pos();
        if !matches!(rec.header.kind, FrameKind::Data | FrameKind::Copied) {
            continue;
        }
        let body = push_record(form, &rec.header);
        area.copy_out(rec.body_at, &mut form[body]);
    }
    Ok(())
}

/// The records of a sealed form, in order: each one's header (as sealed) and body. Ends early,
/// with `Err` at the offset, where `form` does not hold a header (not a form [`copy_form`] or
/// the checkpointer made).
pub(crate) fn records(form: &[u8]) -> impl Iterator<Item = Result<(FrameHeader, &[u8]), usize>> + '_ {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= form.len() {
            return None;
        }
        let parsed = form
            .get(at..at + FRAME_HEADER_SIZE)
            .and_then(|hb| <&[u8; FRAME_HEADER_SIZE]>::try_from(hb).ok())
            .and_then(|hb| FrameHeader::decode(hb).ok())
            .and_then(|h| {
                let body = at + FRAME_HEADER_SIZE;
                form.get(body..body + h.body_len as usize).map(|b| (h, b))
            });
        match parsed {
            Some((h, b)) => {
                at += FRAME_HEADER_SIZE + b.len();
                Some(Ok((h, b)))
            }
            None => {
                let bad = at;
                at = form.len();
                Some(Err(bad))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mojim_core::encode::{placed_data_header, FramePlan, SessionTag};
    use mojim_format::checksum::crc32c;
    use mojim_format::log::{record_size, LOG_HEADER_SIZE};
    use mojim_region::MappedFile;

    /// A log holding group 1: two records at data offsets 0 and 4096.
    fn log() -> (crate::test_peer::Scratch, MappedFile, GroupRef) {
        let dir = crate::test_peer::Scratch::new("group-seal");
        let map =
            MappedFile::create(&dir.dir.join("log"), (LOG_HEADER_SIZE + (1 << 16)) as u64).expect("mapped");
        let tag = SessionTag { session: 5, epoch: 2, lane: 3 };
        let mut pos = 0u64;
        for i in 0..2u32 {
            let body = vec![i as u8 + 1; 100];
            let plan = FramePlan { offset: 4096 * i as u64, len: 100, frame_index: i, end: i == 1 };
            map.write(LOG_HEADER_SIZE + pos as usize, &placed_data_header(tag, 1, plan, crc32c(&body), pos));
            map.write(LOG_HEADER_SIZE + pos as usize + 64, &body);
            pos += record_size(100);
        }
        (dir, map, GroupRef::data(1, 3, 0, pos, 200))
    }

    /// The form holds each record's header, without its session, lane and log position, then
    /// its body; the seal holds for it under the key that made it, and not for a form whose
    /// body or header changed, under another group's number, or under another key.
    #[test]
    fn a_form_seals_the_headers_and_bodies_and_nothing_else_checks() {
        let (_dir, map, g) = log();
        let mut form = Vec::new();
        copy_form(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, &mut form).expect("a group");
        let recs: Vec<(FrameHeader, Vec<u8>)> = records(&form)
            .map(|r| r.map(|(h, b)| (h, b.to_vec())))
            .collect::<Result<_, _>>()
            .expect("parses");
        assert_eq!(recs.len(), 2);
        for (i, (h, b)) in recs.iter().enumerate() {
            assert_eq!(
                (h.offset, h.seq, h.lane, h.session, h.epoch, h.log_pos),
                (4096 * i as u64, 1, 0, 0, 0, 0)
            );
            assert_eq!(b, &vec![i as u8 + 1; 100]);
        }
        let sealer = GroupSealer::new();
        let seal = sealer.seal(1, &form);
        assert!(sealer.verify(1, &form, &seal));
        assert!(!sealer.verify(2, &form, &seal), "another group");
        assert!(!GroupSealer::new().verify(1, &form, &seal), "another node's key");
        let mut changed = form.clone();
        *changed.last_mut().expect("a body") ^= 1;
        assert!(!sealer.verify(1, &changed, &seal), "a body changed");
        // The second record's offset moved, its header's checksum made anew: what a writer
        // without any key can do to the log.
        let at = LOG_HEADER_SIZE + record_size(100) as usize;
        let mut hb = [0u8; 64];
        map.read(at, &mut hb);
        let mut h = FrameHeader::decode(&hb).expect("a header");
        h.offset = 8192;
        map.write(at, &h.to_bytes());
        copy_form(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, &mut changed).expect("still records");
        assert!(!sealer.verify(1, &changed, &seal), "a header changed");
        // A header that is no longer one is named by its position.
        map.write(at, &[0xff; 8]);
        let err = copy_form(map.view(LOG_HEADER_SIZE, 1 << 16), &g, 1 << 20, &mut changed).unwrap_err();
        assert_eq!(err, LogChanged::NotARecord { pos: record_size(100) });
        assert_eq!(records(&[0u8; 10]).collect::<Vec<_>>(), vec![Err(0)]);
    }
}
