//! Mojim's wire and on-media formats.
//!
//! Every format here is fixed-width little-endian with a version and CRC32C checksums, and is
//! described byte by byte in `docs/FORMAT.md`. One header type, [`FrameHeader`], is used both on
//! the wire and inside the mirror's redo log, so that a log record is self-validating no matter
//! who wrote its bytes.
#![forbid(unsafe_code)]

pub mod checksum;
pub mod copied;
pub mod files;
pub mod frame;
pub mod handshake;
pub mod log;
pub mod region;

mod bytes;

pub use frame::{FrameError, FrameHeader, FrameKind, FRAME_HEADER_SIZE};

/// The protocol version spoken by this build. A peer with another version is refused.
/// Version 3: the connecting side proves the secret first (version 2's Challenge carried the
/// accepting side's proof).
pub const PROTOCOL_VERSION: u8 = 3;

/// The oldest version whose frame header has this build's layout. A log record written under
/// it is read as one of this version's: version 3 changed only the handshake, so a mirror
/// upgraded from version 2 with groups still in its logs recovers them.
pub const OLDEST_RECORD_VERSION: u8 = 2;
