//! The 64-byte frame header, used on the wire and as the header of every log record.
//!
//! ```text
//! off len field
//!   0   4 header_checksum  CRC32C of bytes 4..64
//!   4   4 body_checksum    CRC32C of the body (0 for an empty body; unchecked for Pad)
//!   8   2 magic            0x4A4D ("MJ" in memory)
//!  10   1 version          PROTOCOL_VERSION
//!  11   1 kind             FrameKind
//!  12   1 flags            bit 0: END (last frame of a group); bit 1: MAC (Data, Copied: a
//!                         16-byte tag follows the body in the log, docs/FORMAT.md §2.4);
//!                         bit 2: ENCRYPTED (with MAC, on a placed lane's doorbell only: the
//!                         placed body is AES-256-GCM ciphertext)
//!  13   1 reserved         0
//!  14   2 lane             lane index
//!  16   4 body_len         bytes of body that follow the header
//!  20   4 frame_index      index of this frame within its group, from 0
//!  24   8 epoch            configuration number of the sender
//!  32   8 seq              group sequence number (Data, Copied, Ack, Skip); see FrameKind for others
//!  40   8 offset           region offset of the body (Data, Copy); see FrameKind for others
//!  48   8 session          random id of the primary's session
//!  56   8 log_pos          absolute position of this record in its lane's log (0 on the wire)
//! ```

use crate::bytes::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::checksum::crc32c;
use crate::{OLDEST_RECORD_VERSION, PROTOCOL_VERSION};
use std::fmt;

/// Size of a [`FrameHeader`] in bytes, on the wire and in a log.
pub const FRAME_HEADER_SIZE: usize = 64;
// One header, 64 bytes, everywhere: on the wire and as a log record's first cache line.
const _: () =
    assert!(FRAME_HEADER_SIZE == 64 && (FRAME_HEADER_SIZE as u64).is_multiple_of(crate::log::RECORD_ALIGN));

/// The header's magic number.
pub const FRAME_MAGIC: u16 = 0x4A4D;
/// Flag: this frame is the last of its group.
pub const FLAG_END: u8 = 1;
/// Flag (`Data` and `Copied` only): a placed record authenticated by a MAC, whose
/// [`RECORD_TAG_SIZE`]-byte tag lies in the log right after its body (docs/FORMAT.md §2.4).
pub const FLAG_MAC: u8 = 2;
/// Flag (`Data` and `Copied` only, and only with [`FLAG_MAC`]): on a placed lane's doorbell,
/// the body placed in the log is AES-256-GCM ciphertext and its tag the tag of that encryption
/// (`[security] encrypt_placed`, docs/FORMAT.md §2.4). Never in a log: the mirror decrypts the
/// body in place and writes the record's header without it.
pub const FLAG_ENCRYPTED: u8 = 4;
/// Bytes of a placed record's tag.
pub const RECORD_TAG_SIZE: usize = 16;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Bytes of a group, to be written at `offset` in the region.
    Data = 1,
    /// The receiver has the whole group `seq` in its log.
    Ack = 2,
    /// Handshake: the connecting side introduces itself.
    Hello = 3,
    /// Handshake: the accepting side's nonce.
    Challenge = 4,
    /// Handshake: a side's proof of the secret: the connecting side's first; the accepting
    /// side answers a valid one with its own.
    Proof = 5,
    /// Handshake: accepted; the body says where to resume.
    Welcome = 6,
    /// Handshake or session: refused; the body says why.
    Refuse = 7,
    /// Log only: filler up to the end of the log's memory.
    Pad = 8,
    /// Administrative request (status, read).
    Request = 9,
    /// Reply to a [`FrameKind::Request`].
    Reply = 10,
    /// Wire only, no body: sequence numbers `offset ..= seq` will never carry a group (they were
    /// dropped upstream); the receiver's checkpointer moves past them in order.
    Skip = 11,
    /// No body, between groups, both directions: the sender is alive. A receiver that hears
    /// nothing on a lane for its heartbeat timeout declares the peer failed. A receiver of
    /// data answers each Heartbeat with one.
    Heartbeat = 12,
    /// No body, between groups: a resynchronisation of this lane's session starts. `offset` is
    /// the kind (1 log catch-up, 2 bitmap, 3 full copy), `seq` the bytes the whole copy sends.
    /// Until every lane sent CopyEnd the receiver's data area is inconsistent and groups wait.
    CopyBegin = 13,
    /// Between groups, after CopyBegin: `body_len` bytes of the sender's current region content
    /// at `offset`, written straight into the receiver's data area.
    Copy = 14,
    /// No body: this lane's part of the copy is over. `offset` is the generation id the
    /// receiver takes once every lane of the session sent one, `seq` the one before it. The
    /// receiver answers with CopyEnd once the copy is persistent.
    CopyEnd = 15,
    /// A group of one frame, `END` set, `frame_index` 0: group `seq` is the region bytes the
    /// Copy frames just before it on this lane carried (they are already in the receiver's data
    /// area). The body lists their ranges, coalesced (see [`crate::copied`]), so the group can
    /// be forwarded and checked.
    Copied = 16,
    /// No body, receiver to sender on a lane, during a copy: the Copy frame at `offset` of `seq`
    /// bytes failed its body checksum and did not land; send those bytes again before CopyEnd.
    /// (A sender that reads its region as it sends may send bytes the application changed after
    /// the checksum was taken.)
    CopyRetry = 17,
    /// Handshake, receiver to sender, right after a Welcome answering a Hello that asked to
    /// place records: a [`crate::handshake::LogWindow`] body.
    Log = 18,
}

impl FrameKind {
    /// Decodes a kind byte.
    pub fn from_u8(v: u8) -> Option<FrameKind> {
        Some(match v {
            1 => FrameKind::Data,
            2 => FrameKind::Ack,
            3 => FrameKind::Hello,
            4 => FrameKind::Challenge,
            5 => FrameKind::Proof,
            6 => FrameKind::Welcome,
            7 => FrameKind::Refuse,
            8 => FrameKind::Pad,
            9 => FrameKind::Request,
            10 => FrameKind::Reply,
            11 => FrameKind::Skip,
            12 => FrameKind::Heartbeat,
            13 => FrameKind::CopyBegin,
            14 => FrameKind::Copy,
            15 => FrameKind::CopyEnd,
            16 => FrameKind::Copied,
            17 => FrameKind::CopyRetry,
            18 => FrameKind::Log,
            _ => return None,
        })
    }
}

/// A decoded frame header. Encoding computes the header checksum; decoding verifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub body_checksum: u32,
    pub kind: FrameKind,
    pub flags: u8,
    pub lane: u16,
    pub body_len: u32,
    pub frame_index: u32,
    pub epoch: u64,
    pub seq: u64,
    pub offset: u64,
    pub session: u64,
    pub log_pos: u64,
}

/// Why 64 bytes are not a valid frame header. These are the peer's (or the medium's) fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    HeaderChecksum { stored: u32, computed: u32 },
    Magic { found: u16 },
    Version { found: u8, expected: u8 },
    Kind { found: u8 },
    Reserved,
    Flags { found: u8 },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::HeaderChecksum { stored, computed } => {
                write!(f, "frame header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            FrameError::Magic { found } => {
                write!(f, "not a Mojim frame: magic {found:#06x}, expected {FRAME_MAGIC:#06x}")
            }
            FrameError::Version { found, expected } => {
                write!(f, "protocol version {found} is not supported; this build speaks version {expected}")
            }
            FrameError::Kind { found } => write!(f, "unknown frame kind {found}"),
            FrameError::Reserved => write!(f, "reserved frame header bytes are not zero"),
            FrameError::Flags { found } => write!(f, "unknown frame flags {found:#04x}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl FrameHeader {
    /// A header of `kind` with every other field zero.
    pub const fn new(kind: FrameKind) -> FrameHeader {
        FrameHeader {
            body_checksum: 0,
            kind,
            flags: 0,
            lane: 0,
            body_len: 0,
            frame_index: 0,
            epoch: 0,
            seq: 0,
            offset: 0,
            session: 0,
            log_pos: 0,
        }
    }

    /// Whether this frame ends its group.
    pub fn is_end(&self) -> bool {
        self.flags & FLAG_END != 0
    }

    /// Whether this record's tag follows its body in the log ([`FLAG_MAC`]).
    pub fn has_mac(&self) -> bool {
        self.flags & FLAG_MAC != 0
    }

    /// Whether this placed record's body is ciphertext ([`FLAG_ENCRYPTED`]).
    pub fn is_encrypted(&self) -> bool {
        self.flags & FLAG_ENCRYPTED != 0
    }

    /// Bytes after the body that belong to the record: its tag, if it has one.
    pub fn tag_len(&self) -> usize {
        if self.has_mac() {
            RECORD_TAG_SIZE
        } else {
            0
        }
    }

    /// Writes the header, with its checksum, into `out`.
    pub fn encode(&self, out: &mut [u8; FRAME_HEADER_SIZE]) {
        put_u32(out, 4, self.body_checksum);
        put_u16(out, 8, FRAME_MAGIC);
        out[10] = PROTOCOL_VERSION;
        out[11] = self.kind as u8;
        out[12] = self.flags;
        out[13] = 0;
        put_u16(out, 14, self.lane);
        put_u32(out, 16, self.body_len);
        put_u32(out, 20, self.frame_index);
        put_u64(out, 24, self.epoch);
        put_u64(out, 32, self.seq);
        put_u64(out, 40, self.offset);
        put_u64(out, 48, self.session);
        put_u64(out, 56, self.log_pos);
        let crc = crc32c(&out[4..]);
        put_u32(out, 0, crc);
    }

    /// The encoded header.
    pub fn to_bytes(&self) -> [u8; FRAME_HEADER_SIZE] {
        let mut out = [0u8; FRAME_HEADER_SIZE];
        self.encode(&mut out);
        out
    }

    /// Decodes and verifies a header. The body, if any, is checked separately with
    /// [`FrameHeader::check_body`].
    pub fn decode(b: &[u8; FRAME_HEADER_SIZE]) -> Result<FrameHeader, FrameError> {
        Self::decode_versions(b, PROTOCOL_VERSION)
    }

    /// As [`FrameHeader::decode`], for a log record: any version from
    /// [`OLDEST_RECORD_VERSION`] to this one is accepted, as their headers are laid out alike.
    pub fn decode_record(b: &[u8; FRAME_HEADER_SIZE]) -> Result<FrameHeader, FrameError> {
        Self::decode_versions(b, OLDEST_RECORD_VERSION)
    }

    fn decode_versions(b: &[u8; FRAME_HEADER_SIZE], oldest: u8) -> Result<FrameHeader, FrameError> {
        let stored = u32_at(b, 0);
        let computed = crc32c(&b[4..]);
        if stored != computed {
            return Err(FrameError::HeaderChecksum { stored, computed });
        }
        let magic = u16_at(b, 8);
        if magic != FRAME_MAGIC {
            return Err(FrameError::Magic { found: magic });
        }
        if !(oldest..=PROTOCOL_VERSION).contains(&b[10]) {
            return Err(FrameError::Version { found: b[10], expected: PROTOCOL_VERSION });
        }
        let kind = FrameKind::from_u8(b[11]).ok_or(FrameError::Kind { found: b[11] })?;
        let known = match kind {
            FrameKind::Data | FrameKind::Copied => FLAG_END | FLAG_MAC | FLAG_ENCRYPTED,
            _ => FLAG_END,
        };
        // Only a sealed record can be encrypted: its tag is the encryption's.
        let lone_encrypted = b[12] & (FLAG_ENCRYPTED | FLAG_MAC) == FLAG_ENCRYPTED;
        if b[12] & !known != 0 || lone_encrypted {
            return Err(FrameError::Flags { found: b[12] });
        }
        if b[13] != 0 {
            return Err(FrameError::Reserved);
        }
        Ok(FrameHeader {
            body_checksum: u32_at(b, 4),
            kind,
            flags: b[12],
            lane: u16_at(b, 14),
            body_len: u32_at(b, 16),
            frame_index: u32_at(b, 20),
            epoch: u64_at(b, 24),
            seq: u64_at(b, 32),
            offset: u64_at(b, 40),
            session: u64_at(b, 48),
            log_pos: u64_at(b, 56),
        })
    }

    /// Whether `body` matches the header's body length and checksum.
    pub fn check_body(&self, body: &[u8]) -> Result<(), BodyError> {
        if body.len() != self.body_len as usize {
            return Err(BodyError::Length { header: self.body_len, actual: body.len() });
        }
        self.check_checksum(body.len(), crc32c(body))
    }

    /// As [`FrameHeader::check_body`], for a body of `len` bytes whose CRC32C is `computed`
    /// (a body checksummed where it lies, without a slice of it).
    pub fn check_checksum(&self, len: usize, computed: u32) -> Result<(), BodyError> {
        if len != self.body_len as usize {
            return Err(BodyError::Length { header: self.body_len, actual: len });
        }
        if computed != self.body_checksum {
            return Err(BodyError::Checksum { stored: self.body_checksum, computed });
        }
        Ok(())
    }
}

/// Why a body does not match its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyError {
    Length { header: u32, actual: usize },
    Checksum { stored: u32, computed: u32 },
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BodyError::Length { header, actual } => {
                write!(f, "frame body is {actual} bytes, header says {header}")
            }
            BodyError::Checksum { stored, computed } => {
                write!(f, "frame body checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
        }
    }
}

impl std::error::Error for BodyError {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind() -> impl Strategy<Value = FrameKind> {
        (1u8..=18).prop_map(|k| FrameKind::from_u8(k).expect("1..=18 are kinds"))
    }

    prop_compose! {
        fn header()(kind in kind(), end in any::<bool>(), lane in any::<u16>(),
                    body_len in any::<u32>(), frame_index in any::<u32>(), epoch in any::<u64>(),
                    seq in any::<u64>(), offset in any::<u64>(), session in any::<u64>(),
                    log_pos in any::<u64>(), body_checksum in any::<u32>()) -> FrameHeader {
            FrameHeader { body_checksum, kind, flags: if end { FLAG_END } else { 0 }, lane,
                          body_len, frame_index, epoch, seq, offset, session, log_pos }
        }
    }

    proptest! {
        #[test]
        fn round_trip(h in header()) {
            let bytes = h.to_bytes();
            prop_assert_eq!(FrameHeader::decode(&bytes), Ok(h));
        }

        #[test]
        fn any_single_bit_flip_is_caught(h in header(), bit in 0usize..512) {
            let mut bytes = h.to_bytes();
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(FrameHeader::decode(&bytes).is_err());
        }

        #[test]
        fn body_checksum_round_trip(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut h = FrameHeader::new(FrameKind::Data);
            h.body_len = body.len() as u32;
            h.body_checksum = crc32c(&body);
            prop_assert!(h.check_body(&body).is_ok());
            if !body.is_empty() {
                let mut bad = body.clone();
                bad[0] ^= 0x80;
                prop_assert!(h.check_body(&bad).is_err());
            }
        }
    }

    /// The example in docs/FORMAT.md §2, byte for byte.
    #[test]
    fn documented_ack_example() {
        let mut h = FrameHeader::new(FrameKind::Ack);
        h.lane = 1;
        h.epoch = 2;
        h.seq = 3;
        h.session = 0x1122_3344_5566_7788;
        let hex: String = h.to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let doc = include_str!("../../../docs/FORMAT.md");
        let start = doc.find("0000: ").expect("the example is in FORMAT.md");
        let documented: String = doc[start..]
            .lines()
            .take(4)
            .flat_map(|l| {
                l[6..53].split(' ').filter(|x| !x.is_empty()).map(str::to_string).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(hex, documented, "update the Ack example in docs/FORMAT.md");
    }

    /// docs/FORMAT.md §2: flag bit 1 `MAC` is known on `Data` and `Copied` only, and says a
    /// 16-byte tag follows the body in the log.
    #[test]
    fn the_mac_flag_belongs_to_records_only() {
        for kind in [FrameKind::Data, FrameKind::Copied] {
            let mut h = FrameHeader::new(kind);
            (h.flags, h.body_len) = (FLAG_END | FLAG_MAC, 100);
            let back = FrameHeader::decode(&h.to_bytes()).expect("a sealed record's header");
            assert!(back.has_mac() && back.is_end());
            assert_eq!(back.tag_len(), RECORD_TAG_SIZE);
            assert_eq!(h.to_bytes()[12], 0b11, "{kind:?}: END is bit 0, MAC bit 1 of byte 12");
        }
        for kind in [FrameKind::Ack, FrameKind::Copy, FrameKind::Pad, FrameKind::Heartbeat] {
            let mut h = FrameHeader::new(kind);
            h.flags = FLAG_MAC;
            assert_eq!(
                FrameHeader::decode(&h.to_bytes()),
                Err(FrameError::Flags { found: FLAG_MAC }),
                "{kind:?}"
            );
        }
        let mut h = FrameHeader::new(FrameKind::Data);
        h.flags = 8;
        assert_eq!(FrameHeader::decode(&h.to_bytes()), Err(FrameError::Flags { found: 8 }));
        assert_eq!(FrameHeader::new(FrameKind::Data).tag_len(), 0);
    }

    /// docs/FORMAT.md §2: flag bit 2 `ENCRYPTED` is known on `Data` and `Copied` only, and only
    /// with `MAC` (the tag is the encryption's); it does not change the record's size.
    #[test]
    fn the_encrypted_flag_needs_the_mac_flag_on_a_record() {
        for kind in [FrameKind::Data, FrameKind::Copied] {
            let mut h = FrameHeader::new(kind);
            (h.flags, h.body_len) = (FLAG_END | FLAG_MAC | FLAG_ENCRYPTED, 100);
            let back = FrameHeader::decode(&h.to_bytes()).expect("an encrypted record's doorbell");
            assert!(back.is_encrypted() && back.has_mac() && back.is_end());
            assert_eq!(back.tag_len(), RECORD_TAG_SIZE);
            assert_eq!(h.to_bytes()[12], 0b111, "{kind:?}: ENCRYPTED is bit 2 of byte 12");
            h.flags = FLAG_END | FLAG_ENCRYPTED;
            let found = FLAG_END | FLAG_ENCRYPTED;
            assert_eq!(FrameHeader::decode(&h.to_bytes()), Err(FrameError::Flags { found }), "{kind:?}");
        }
        for kind in [FrameKind::Ack, FrameKind::Copy, FrameKind::Pad] {
            let mut h = FrameHeader::new(kind);
            h.flags = FLAG_ENCRYPTED;
            let found = FLAG_ENCRYPTED;
            assert_eq!(FrameHeader::decode(&h.to_bytes()), Err(FrameError::Flags { found }), "{kind:?}");
        }
        assert!(!FrameHeader::new(FrameKind::Data).is_encrypted());
    }

    #[test]
    fn wrong_version_is_named() {
        let mut bytes = FrameHeader::new(FrameKind::Hello).to_bytes();
        bytes[10] = 9;
        let crc = crc32c(&bytes[4..]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
        let err = FrameHeader::decode(&bytes).unwrap_err();
        assert_eq!(err, FrameError::Version { found: 9, expected: PROTOCOL_VERSION });
        assert!(err.to_string().contains("version 9"));
    }
}
