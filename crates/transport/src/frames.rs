//! Whole frames over a connection: for the handshake and administrative traffic. The data path
//! reads headers and bodies itself, straight into log slots.
//!
//! The primary's link, the node's acceptor and lanes, and the operator's tools all speak frames
//! through these functions; an application never needs them, since `mojim::Primary` speaks
//! the protocol itself.

use crate::Conn;
use mojim_format::checksum::crc32c;
use mojim_format::frame::{BodyError, FrameError};
use mojim_format::{FrameHeader, FrameKind, FRAME_HEADER_SIZE};
use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::time::Instant;

/// Whether a receive failed because its timeout passed (a socket's receive timeout reports
/// `WouldBlock`, other readers `TimedOut`).
pub fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// A frame could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The connection failed or timed out (see [`timed_out`]).
    Io(io::Error),
    /// The header is not a valid frame header.
    Frame(FrameError),
    /// The body does not match the header's checksum.
    Body(BodyError),
    /// The header announces a body longer than the caller accepts.
    TooLarge {
        /// The body length the header announced, in bytes.
        len: u32,
        /// The most the caller accepts, in bytes.
        max: usize,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Frame(e) => write!(f, "{e}"),
            ReadError::Body(e) => write!(f, "{e}"),
            ReadError::TooLarge { len, max } => {
                write!(f, "frame body of {len} bytes exceeds the limit of {max}")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// A connection whose receives must all end by `deadline`: each read waits at most for the
/// time left, so a peer that trickles bytes cannot stretch a step past it. Once the deadline
/// has passed, a read fails with `TimedOut`.
pub struct ReadBy<'a, C: Conn> {
    /// The connection read from.
    pub conn: &'a mut C,
    /// When every read must have ended.
    pub deadline: Instant,
}

impl<C: Conn> Read for ReadBy<'_, C> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the deadline passed"));
        }
        self.conn.set_recv_timeout(Some(left))?;
        self.conn.read(buf)
    }
}

/// Writes to `conn` until `deadline` at the latest, however slowly the peer takes the bytes:
/// each send waits at most the time that is left.
pub struct WriteBy<'a, C: Conn> {
    /// The connection written to.
    pub conn: &'a mut C,
    /// When every write must have ended.
    pub deadline: Instant,
}

impl<C: Conn> Write for WriteBy<'_, C> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the deadline passed"));
        }
        self.conn.set_send_timeout(Some(left))?;
        self.conn.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

/// Reads one frame, its body into `body` (at most `max_body` bytes), both checked.
pub fn read_frame(c: &mut impl Read, max_body: usize, body: &mut Vec<u8>) -> Result<FrameHeader, ReadError> {
    let mut hb = [0u8; FRAME_HEADER_SIZE];
    c.read_exact(&mut hb).map_err(ReadError::Io)?;
    let h = FrameHeader::decode(&hb).map_err(ReadError::Frame)?;
    if h.body_len as usize > max_body {
        return Err(ReadError::TooLarge { len: h.body_len, max: max_body });
    }
    body.clear();
    body.resize(h.body_len as usize, 0);
    c.read_exact(body).map_err(ReadError::Io)?;
    h.check_body(body).map_err(ReadError::Body)?;
    Ok(h)
}

/// Sends a header and body as one frame.
pub fn write_frame(c: &mut impl Conn, header: &[u8; FRAME_HEADER_SIZE], body: &[u8]) -> io::Result<()> {
    c.send_all_vectored(&mut [IoSlice::new(header), IoSlice::new(body)])
}

/// The header of a frame of `kind` with `body`, every other field zero but `seq`.
pub fn frame_header(kind: FrameKind, seq: u64, body: &[u8]) -> [u8; FRAME_HEADER_SIZE] {
    let mut h = FrameHeader::new(kind);
    h.body_len = body.len() as u32;
    h.body_checksum = crc32c(body);
    h.seq = seq;
    h.to_bytes()
}

/// Sends a frame of `kind` with `body`, every other header field zero but `seq`.
pub fn send(c: &mut impl Conn, kind: FrameKind, seq: u64, body: &[u8]) -> io::Result<()> {
    write_frame(c, &frame_header(kind, seq, body), body)
}
