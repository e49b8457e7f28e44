//! Bodies of the handshake and administrative frames. Each follows a [`crate::FrameHeader`]
//! whose kind names it. Layouts are in `docs/FORMAT.md`.

use crate::bytes::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use std::fmt;

/// Bytes in a nonce and in a proof (HMAC-SHA256).
pub const NONCE_SIZE: usize = 32;
pub const PROOF_SIZE: usize = 32;
pub const HELLO_SIZE: usize = 96;
pub const CHALLENGE_SIZE: usize = NONCE_SIZE;
pub const WELCOME_SIZE: usize = 64;
pub const REQUEST_SIZE: usize = 24;
/// Longest JSON body of an operator's command.
pub const COMMAND_MAX: usize = 4096;
/// Longest refusal message accepted.
pub const REFUSE_MAX: usize = 2048;
/// Largest Reply frame of a read: a longer read is answered in several Reply frames, each of
/// this size but the last.
pub const MAX_READ: u64 = 16 << 20;

/// The body length of the next Reply frame of a read of `len` bytes, `sent` of which went out
/// in the frames before it: [`MAX_READ`], or what is left.
pub fn read_reply_len(len: u64, sent: u64) -> usize {
    assert!(sent <= len, "a read of {len} bytes has no bytes after {sent}");
    (len - sent).min(MAX_READ) as usize
}

/// Malformed handshake body: the peer's fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyFormatError {
    Size { kind: &'static str, expected: usize, found: usize },
    Field { kind: &'static str, field: &'static str, value: u64 },
}

impl fmt::Display for BodyFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyFormatError::Size { kind, expected, found } => {
                write!(f, "{kind} body is {found} bytes, expected {expected}")
            }
            BodyFormatError::Field { kind, field, value } => {
                write!(f, "{kind} has an invalid {field}: {value}")
            }
        }
    }
}

impl std::error::Error for BodyFormatError {}

fn exact<'a, const N: usize>(kind: &'static str, b: &'a [u8]) -> Result<&'a [u8; N], BodyFormatError> {
    b.try_into().map_err(|_| BodyFormatError::Size { kind, expected: N, found: b.len() })
}

/// Who is connecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PeerRole {
    /// A primary opening one lane of its session.
    Primary = 1,
    /// An operator's tool (status, reads).
    Admin = 2,
    /// A mirror feeding this node as its backup (the secondary tier); otherwise as `Primary`.
    Mirror = 3,
}

/// Who the region is: shared by every replica, and checked at every handshake (a Hello's
/// `region_uuid` and `region_size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionId {
    /// The region's identity (`[region] uuid`).
    pub uuid: [u8; 16],
    /// Bytes in the data area (`[region] size`).
    pub size: u64,
}

/// The connecting side's introduction.
///
/// ```text
/// off len field
///   0   1 role          PeerRole
///   1   1 reserved      0
///   2   2 lane          lane this connection carries
///   4   2 lanes         lanes in the session
///   6   2 flags         bit 0 (HELLO_PLACE): a primary asks to place its records itself;
///                       bit 1 (HELLO_ENCRYPT, with PLACE): and to encrypt their bodies
///   8  16 region_uuid
///  24   8 region_size   bytes in the data area
///  32   8 epoch
///  40   8 session       random id shared by the session's lanes
///  48  32 nonce         random, fresh per connection
///  80   4 max_frame     largest body the sender will put in a Data frame
///  84   4 reserved      0
///  88   8 generation    id of the history the sender's copy follows (0: unknown)
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub role: PeerRole,
    pub lane: u16,
    pub lanes: u16,
    pub region_uuid: [u8; 16],
    pub region_size: u64,
    pub epoch: u64,
    pub session: u64,
    pub nonce: [u8; NONCE_SIZE],
    pub max_frame: u32,
    pub generation: u64,
    /// A primary asks to place its records in the lane's log itself (one-sided placement); the
    /// receiver answers with a [`LogWindow`] after its Welcome.
    pub place: bool,
    /// With `place`: the primary encrypts the bodies it places (`[security] encrypt_placed`);
    /// the receiver refuses the lane unless it is set to the same (docs/FORMAT.md §2.4).
    pub encrypt_placed: bool,
}

/// Hello flag: the sender asks to place its records in the lane's log itself.
pub const HELLO_PLACE: u16 = 1;
/// Hello flag, with [`HELLO_PLACE`] only: the sender encrypts the bodies it places.
pub const HELLO_ENCRYPT: u16 = 2;

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_SIZE] {
        let mut b = [0u8; HELLO_SIZE];
        b[0] = self.role as u8;
        put_u16(&mut b, 2, self.lane);
        put_u16(&mut b, 4, self.lanes);
        let encrypt = if self.encrypt_placed { HELLO_ENCRYPT } else { 0 };
        put_u16(&mut b, 6, if self.place { HELLO_PLACE } else { 0 } | encrypt);
        b[8..24].copy_from_slice(&self.region_uuid);
        put_u64(&mut b, 24, self.region_size);
        put_u64(&mut b, 32, self.epoch);
        put_u64(&mut b, 40, self.session);
        b[48..80].copy_from_slice(&self.nonce);
        put_u32(&mut b, 80, self.max_frame);
        put_u64(&mut b, 88, self.generation);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Hello, BodyFormatError> {
        let b = exact::<HELLO_SIZE>("Hello", b)?;
        let role = match b[0] {
            1 => PeerRole::Primary,
            2 => PeerRole::Admin,
            3 => PeerRole::Mirror,
            v => return Err(BodyFormatError::Field { kind: "Hello", field: "role", value: v as u64 }),
        };
        if b[1] != 0 || b[84..88].iter().any(|&x| x != 0) {
            return Err(BodyFormatError::Field { kind: "Hello", field: "reserved bytes", value: 0 });
        }
        let flags = u16_at(b, 6);
        // Encryption is of placed bodies: without PLACE it means nothing, and is refused.
        if flags & !(HELLO_PLACE | HELLO_ENCRYPT) != 0 || flags == HELLO_ENCRYPT {
            return Err(BodyFormatError::Field { kind: "Hello", field: "flags", value: flags as u64 });
        }
        let mut region_uuid = [0u8; 16];
        region_uuid.copy_from_slice(&b[8..24]);
        let mut nonce = [0u8; NONCE_SIZE];
        nonce.copy_from_slice(&b[48..80]);
        Ok(Hello {
            role,
            lane: u16_at(b, 2),
            lanes: u16_at(b, 4),
            region_uuid,
            region_size: u64_at(b, 24),
            epoch: u64_at(b, 32),
            session: u64_at(b, 40),
            nonce,
            max_frame: u32_at(b, 80),
            generation: u64_at(b, 88),
            place: flags & HELLO_PLACE != 0,
            encrypt_placed: flags & HELLO_ENCRYPT != 0,
        })
    }
}

/// The body of a `Log` frame: a receiver's answer to a Hello that asked to place records, sent
/// right after its Welcome.
///
/// ```text
/// off len field
///   0   8 capacity   bytes of record space in this lane's log (0: declined; the sender sends
///                    its records' bodies on the connection as usual)
///   8   8 head       position where the next record goes
///  16   8 tail       position before which the log's space is free
///  24   n token      what the sender needs to reach the offered log (0 to LOG_TOKEN_MAX bytes;
///                    none when capacity is 0): empty over shared memory, UCX's remote address
///                    and key over UCX
/// ```
///
/// When `capacity` is not 0 the receiver has offered the log's file through the transport, and
/// the sender writes each record's body at `head` + 64 (the header's place) before it sends the
/// record's header, with `log_pos` set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogWindow {
    pub capacity: u64,
    pub head: u64,
    pub tail: u64,
}

pub const LOG_WINDOW_SIZE: usize = 24;
/// The longest token a `Log` frame carries after its window.
pub const LOG_TOKEN_MAX: usize = 4096;
/// The longest `Log` body: the window and the longest token.
pub const LOG_BODY_MAX: usize = LOG_WINDOW_SIZE + LOG_TOKEN_MAX;

impl LogWindow {
    pub fn encode(&self) -> [u8; LOG_WINDOW_SIZE] {
        let mut b = [0u8; LOG_WINDOW_SIZE];
        put_u64(&mut b, 0, self.capacity);
        put_u64(&mut b, 8, self.head);
        put_u64(&mut b, 16, self.tail);
        b
    }

    /// The whole `Log` body: the window, then `token` (at most [`LOG_TOKEN_MAX`] bytes, and none
    /// with a capacity of 0: [`LogWindow::decode_offer`] rejects anything else).
    pub fn encode_offer(&self, token: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(LOG_WINDOW_SIZE + token.len());
        b.extend_from_slice(&self.encode());
        b.extend_from_slice(token);
        b
    }

    /// Decodes and checks a `Log` body with no token (see [`LogWindow::decode_offer`]).
    pub fn decode(b: &[u8]) -> Result<LogWindow, BodyFormatError> {
        let (w, token) = LogWindow::decode_offer(b)?;
        if !token.is_empty() {
            return Err(BodyFormatError::Size { kind: "Log", expected: LOG_WINDOW_SIZE, found: b.len() });
        }
        Ok(w)
    }

    /// Decodes and checks a `Log` body: the window (positions aligned to records, the tail not
    /// past the head, and no more than the capacity between them), and the token after it (at
    /// most [`LOG_TOKEN_MAX`] bytes, none when the log was declined).
    pub fn decode_offer(b: &[u8]) -> Result<(LogWindow, &[u8]), BodyFormatError> {
        if b.len() < LOG_WINDOW_SIZE || b.len() > LOG_BODY_MAX {
            let expected = if b.len() < LOG_WINDOW_SIZE { LOG_WINDOW_SIZE } else { LOG_BODY_MAX };
            return Err(BodyFormatError::Size { kind: "Log", expected, found: b.len() });
        }
        let (b, token) = b.split_at(LOG_WINDOW_SIZE);
        let w = LogWindow::check(exact::<LOG_WINDOW_SIZE>("Log", b)?)?;
        if w.capacity == 0 && !token.is_empty() {
            return Err(BodyFormatError::Field {
                kind: "Log",
                field: "token length",
                value: token.len() as u64,
            });
        }
        Ok((w, token))
    }

    fn check(b: &[u8; LOG_WINDOW_SIZE]) -> Result<LogWindow, BodyFormatError> {
        let w = LogWindow { capacity: u64_at(b, 0), head: u64_at(b, 8), tail: u64_at(b, 16) };
        let align = crate::log::RECORD_ALIGN;
        let field = |field, value| Err(BodyFormatError::Field { kind: "Log", field, value });
        if w.capacity == 0 {
            return if w.head == 0 && w.tail == 0 { Ok(w) } else { field("head", w.head) };
        }
        if !w.capacity.is_multiple_of(align) {
            return field("capacity", w.capacity);
        }
        if !w.head.is_multiple_of(align) || w.head < w.tail || w.head - w.tail > w.capacity {
            return field("head", w.head);
        }
        if !w.tail.is_multiple_of(align) {
            return field("tail", w.tail);
        }
        Ok(w)
    }
}

/// The accepting side's fresh nonce. It carries nothing that depends on the secret: the
/// accepting side proves the secret only after the connecting side has (see `docs/FORMAT.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: [u8; NONCE_SIZE],
}

impl Challenge {
    pub fn encode(&self) -> [u8; CHALLENGE_SIZE] {
        self.nonce
    }

    pub fn decode(b: &[u8]) -> Result<Challenge, BodyFormatError> {
        Ok(Challenge { nonce: *exact::<CHALLENGE_SIZE>("Challenge", b)? })
    }
}

/// A Proof body: one side's proof of the secret (the connecting side's, then the accepting
/// side's).
pub fn decode_proof(b: &[u8]) -> Result<[u8; PROOF_SIZE], BodyFormatError> {
    Ok(*exact::<PROOF_SIZE>("Proof", b)?)
}

/// Accepted: where the session resumes.
///
/// ```text
/// off len field
///   0   8 next_seq      first sequence number this session assigns
///   8   8 log_capacity  bytes of record space in each lane's log
///  16   4 max_frame     largest Data body the receiver accepts
///  20   4 reserved      0
///  24   8 epoch           the receiver's epoch
///  32   8 generation      id of the history the receiver's copy follows (0: unknown)
///  40   8 prev_generation the generation before it (0: none)
///  48   4 flags           bit 0: the receiver's data area is inconsistent (a copy did not finish)
///  52  12 reserved        0
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    pub next_seq: u64,
    pub log_capacity: u64,
    pub max_frame: u32,
    pub epoch: u64,
    pub generation: u64,
    pub prev_generation: u64,
    pub inconsistent: bool,
}

impl Welcome {
    pub fn encode(&self) -> [u8; WELCOME_SIZE] {
        let mut b = [0u8; WELCOME_SIZE];
        put_u64(&mut b, 0, self.next_seq);
        put_u64(&mut b, 8, self.log_capacity);
        put_u32(&mut b, 16, self.max_frame);
        put_u64(&mut b, 24, self.epoch);
        put_u64(&mut b, 32, self.generation);
        put_u64(&mut b, 40, self.prev_generation);
        put_u32(&mut b, 48, self.inconsistent as u32);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Welcome, BodyFormatError> {
        let b = exact::<WELCOME_SIZE>("Welcome", b)?;
        if u32_at(b, 20) != 0 || b[52..].iter().any(|&x| x != 0) {
            return Err(BodyFormatError::Field { kind: "Welcome", field: "reserved bytes", value: 0 });
        }
        Ok(Welcome {
            next_seq: u64_at(b, 0),
            log_capacity: u64_at(b, 8),
            max_frame: u32_at(b, 16),
            epoch: u64_at(b, 24),
            generation: u64_at(b, 32),
            prev_generation: u64_at(b, 40),
            inconsistent: match u32_at(b, 48) {
                0 => false,
                1 => true,
                v => return Err(BodyFormatError::Field { kind: "Welcome", field: "flags", value: v as u64 }),
            },
        })
    }
}

/// Why a connection was refused. The body of a Refuse frame is a `u32` code followed by a
/// UTF-8 message naming the values involved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RefuseCode {
    Version = 1,
    Secret = 2,
    Region = 3,
    Epoch = 4,
    Busy = 5,
    Malformed = 6,
    Storage = 7,
    Other = 8,
}

impl RefuseCode {
    pub fn from_u32(v: u32) -> RefuseCode {
        match v {
            1 => RefuseCode::Version,
            2 => RefuseCode::Secret,
            3 => RefuseCode::Region,
            4 => RefuseCode::Epoch,
            5 => RefuseCode::Busy,
            6 => RefuseCode::Malformed,
            7 => RefuseCode::Storage,
            _ => RefuseCode::Other,
        }
    }
}

/// Encodes a refusal body into `out`; a message too long is cut at a character boundary.
pub fn encode_refuse(code: RefuseCode, message: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(code as u32).to_le_bytes());
    let mut end = message.len().min(REFUSE_MAX - 4);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&message.as_bytes()[..end]);
}

/// Decodes a refusal body. Unknown codes read as [`RefuseCode::Other`] and bytes that are not
/// UTF-8 as U+FFFD: a refusal is for people to read.
pub fn decode_refuse(b: &[u8]) -> Result<(RefuseCode, String), BodyFormatError> {
    if b.len() < 4 {
        return Err(BodyFormatError::Size { kind: "Refuse", expected: 4, found: b.len() });
    }
    if b.len() > REFUSE_MAX {
        return Err(BodyFormatError::Size { kind: "Refuse", expected: REFUSE_MAX, found: b.len() });
    }
    Ok((RefuseCode::from_u32(u32_at(b, 0)), String::from_utf8_lossy(&b[4..]).into_owned()))
}

/// An administrative request.
///
/// ```text
/// off len field
///   0   4 op        1 = status (reply: JSON), 2 = read (reply: bytes),
///                   3 = command (reply: JSON; the command follows as UTF-8 JSON)
///   4   4 reserved  0
///   8   8 offset    read: region offset; otherwise 0
///  16   8 len       read: bytes; command: bytes of JSON that follow (at most COMMAND_MAX)
///  24   …           command: the JSON
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status,
    Read { offset: u64, len: u64 },
    Command(String),
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; REQUEST_SIZE];
        match self {
            Request::Status => put_u32(&mut b, 0, 1),
            Request::Read { offset, len } => {
                put_u32(&mut b, 0, 2);
                put_u64(&mut b, 8, *offset);
                put_u64(&mut b, 16, *len);
            }
            Request::Command(json) => {
                put_u32(&mut b, 0, 3);
                put_u64(&mut b, 16, json.len() as u64);
                b.extend_from_slice(json.as_bytes());
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Request, BodyFormatError> {
        if b.len() < REQUEST_SIZE {
            return Err(BodyFormatError::Size { kind: "Request", expected: REQUEST_SIZE, found: b.len() });
        }
        let (head, rest) = b.split_at(REQUEST_SIZE);
        if u32_at(head, 4) != 0 {
            return Err(BodyFormatError::Field { kind: "Request", field: "reserved bytes", value: 0 });
        }
        let op = u32_at(head, 0);
        if op != 3 && !rest.is_empty() {
            return Err(BodyFormatError::Size { kind: "Request", expected: REQUEST_SIZE, found: b.len() });
        }
        match op {
            1 if head[8..].iter().all(|&x| x == 0) => Ok(Request::Status),
            1 => Err(BodyFormatError::Field { kind: "Request", field: "status padding", value: 0 }),
            2 => Ok(Request::Read { offset: u64_at(head, 8), len: u64_at(head, 16) }),
            3 => {
                let len = u64_at(head, 16);
                if u64_at(head, 8) != 0 || len > COMMAND_MAX as u64 || len != rest.len() as u64 {
                    return Err(BodyFormatError::Field {
                        kind: "Request",
                        field: "command length",
                        value: len,
                    });
                }
                let json = std::str::from_utf8(rest).map_err(|_| BodyFormatError::Field {
                    kind: "Request",
                    field: "command UTF-8",
                    value: 0,
                })?;
                Ok(Request::Command(json.to_string()))
            }
            op => Err(BodyFormatError::Field { kind: "Request", field: "op", value: op as u64 }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_log_window_that_cannot_be_is_rejected() {
        let ok = LogWindow { capacity: 4096, head: 8192, tail: 4096 };
        assert_eq!(LogWindow::decode(&ok.encode()), Ok(ok));
        assert_eq!(LogWindow::decode(&LogWindow::default().encode()), Ok(LogWindow::default()));
        for (bad, field) in [
            (LogWindow { capacity: 0, head: 64, tail: 0 }, "head"),
            (LogWindow { capacity: 4000, head: 0, tail: 0 }, "capacity"),
            (LogWindow { capacity: 4096, head: 100, tail: 0 }, "head"),
            (LogWindow { capacity: 4096, head: 0, tail: 64 }, "head"),
            (LogWindow { capacity: 4096, head: 8192 + 64, tail: 4096 }, "head"),
        ] {
            match LogWindow::decode(&bad.encode()) {
                Err(BodyFormatError::Field { kind: "Log", field: f, .. }) => assert_eq!(f, field, "{bad:?}"),
                other => panic!("{bad:?} decoded as {other:?}"),
            }
        }
        assert!(LogWindow::decode(&[0u8; 23]).is_err(), "a short body");
    }

    #[test]
    fn a_log_body_carries_a_token_after_its_window() {
        let w = LogWindow { capacity: 4096, head: 8192, tail: 4096 };
        let token = [7u8; 40];
        assert_eq!(LogWindow::decode_offer(&w.encode_offer(&token)), Ok((w, &token[..])));
        assert_eq!(LogWindow::decode_offer(&w.encode()), Ok((w, &[][..])));
        let longest = vec![1u8; LOG_TOKEN_MAX];
        assert_eq!(LogWindow::decode_offer(&w.encode_offer(&longest)), Ok((w, &longest[..])));
        let too_long = vec![1u8; LOG_TOKEN_MAX + 1];
        assert!(
            matches!(LogWindow::decode_offer(&w.encode_offer(&too_long)), Err(BodyFormatError::Size { .. })),
            "a token past LOG_TOKEN_MAX"
        );
        match LogWindow::decode_offer(&LogWindow::default().encode_offer(&token)) {
            Err(BodyFormatError::Field { kind: "Log", field: "token length", value: 40 }) => {}
            other => panic!("a declined log with a token decoded as {other:?}"),
        }
        assert!(LogWindow::decode(&w.encode_offer(&token)).is_err(), "decode takes no token");
    }

    #[test]
    fn a_hello_with_an_unknown_flag_is_rejected() {
        let mut b = [0u8; HELLO_SIZE];
        b[0] = PeerRole::Primary as u8;
        assert!(Hello::decode(&b).is_ok());
        for unknown in [4, 2] {
            // Bit 2 is unknown; bit 1, ENCRYPT, is known only with PLACE.
            b[6] = unknown;
            assert!(matches!(Hello::decode(&b), Err(BodyFormatError::Field { field: "flags", .. })));
        }
        b[6] = 1;
        let h = Hello::decode(&b).expect("PLACE is a flag");
        assert!(h.place && !h.encrypt_placed);
        b[6] = 3;
        let h = Hello::decode(&b).expect("PLACE with ENCRYPT");
        assert!(h.place && h.encrypt_placed);
    }

    proptest! {
        #[test]
        fn hello_round_trip(admin in any::<bool>(), lane in any::<u16>(), lanes in any::<u16>(),
                            uuid in any::<[u8; 16]>(), size in any::<u64>(), epoch in any::<u64>(),
                            session in any::<u64>(), nonce in any::<[u8; 32]>(), mf in any::<u32>(),
                            place in any::<bool>(), encrypt in any::<bool>()) {
            let h = Hello { role: if admin { PeerRole::Admin } else { PeerRole::Primary }, lane,
                            lanes, region_uuid: uuid, region_size: size, epoch, session, nonce,
                            max_frame: mf, generation: size ^ epoch, place,
                            encrypt_placed: place && encrypt };
            prop_assert_eq!(Hello::decode(&h.encode()), Ok(h));
        }

        #[test]
        fn log_window_round_trip(cap in 1u64..1 << 40, head in any::<u64>(), used in any::<u64>()) {
            let capacity = cap * 64;
            let head = (head >> 8) * 64;
            let tail = head - (used % (capacity + 64)).min(head) / 64 * 64;
            let w = LogWindow { capacity, head, tail };
            prop_assert_eq!(LogWindow::decode(&w.encode()), Ok(w));
        }

        #[test]
        fn welcome_round_trip(a in any::<u64>(), b in any::<u64>(), c in any::<u32>(), d in any::<u64>(),
                              g in any::<u64>(), p in any::<u64>(), i in any::<bool>()) {
            let w = Welcome { next_seq: a, log_capacity: b, max_frame: c, epoch: d, generation: g,
                              prev_generation: p, inconsistent: i };
            prop_assert_eq!(Welcome::decode(&w.encode()), Ok(w));
        }

        #[test]
        fn request_round_trip(offset in any::<u64>(), len in any::<u64>(), cmd in ".{0,200}") {
            let r = Request::Read { offset, len };
            prop_assert_eq!(Request::decode(&r.encode()), Ok(r));
            let c = Request::Command(cmd);
            prop_assert_eq!(Request::decode(&c.encode()), Ok(c));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Hello::decode(&bytes);
            let _ = Challenge::decode(&bytes);
            let _ = Welcome::decode(&bytes);
            let _ = Request::decode(&bytes);
            let _ = decode_refuse(&bytes);
            let _ = decode_proof(&bytes);
        }
    }

    #[test]
    fn a_read_is_answered_in_frames_of_max_read_but_the_last() {
        assert_eq!(read_reply_len(0, 0), 0);
        assert_eq!(read_reply_len(10, 0), 10);
        assert_eq!(read_reply_len(MAX_READ, 0), MAX_READ as usize);
        assert_eq!(read_reply_len(MAX_READ + 1, 0), MAX_READ as usize);
        assert_eq!(read_reply_len(MAX_READ + 1, MAX_READ), 1);
        assert_eq!(read_reply_len(3 * MAX_READ, 2 * MAX_READ), MAX_READ as usize);
    }

    #[test]
    fn long_refusals_are_cut_on_a_character_boundary() {
        let mut v = Vec::new();
        encode_refuse(RefuseCode::Other, &("a".to_owned() + &"é".repeat(1100)), &mut v);
        assert!(v.len() <= REFUSE_MAX);
        assert!(std::str::from_utf8(&v[4..]).is_ok());
    }

    #[test]
    fn status_request_padding_must_be_zero() {
        let mut b = Request::Status.encode();
        b[8] = 0xff;
        assert!(Request::decode(&b).is_err());
        let mut c = Request::Command("{}".into()).encode();
        c.push(b' ');
        assert!(Request::decode(&c).is_err(), "length must match");
        let mut long = Request::Command("x".repeat(COMMAND_MAX + 1)).encode();
        assert!(Request::decode(&long).is_err(), "over the limit");
        long.truncate(REQUEST_SIZE);
        assert!(Request::decode(&long).is_err());
    }

    #[test]
    fn refuse_round_trip() {
        let mut v = Vec::new();
        encode_refuse(RefuseCode::Region, "region size 10 != 20", &mut v);
        assert_eq!(decode_refuse(&v).unwrap(), (RefuseCode::Region, "region size 10 != 20".into()));
    }
}
