//! What a peer that can write a lane's log at any time (a log offered for one-sided writes)
//! changed in a group after this node checked it. The peer's fault, always: this node's own
//! writes to the log are checked when they are made.

use std::fmt;

/// How a record of a group no longer holds; each names the record's log position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LogChanged {
    /// The bytes at `pos` no longer form a record (its header's checksum, or a length past the
    /// log's limit).
    NotARecord { pos: u64 },
    /// The record at `pos` now ends at `end`, past the group's end.
    PastGroupEnd { pos: u64, end: u64, group_end: u64 },
    /// The record at `pos` now names another group, or bytes outside the data area.
    Misplaced { pos: u64, seq: u64, len: u64, offset: u64 },
    /// The body of the record at `pos` no longer matches its header's checksum.
    Checksum { pos: u64, body: Body },
    /// The body of the record at `pos` no longer matches its record MAC.
    Mac { pos: u64, body: Body },
}

/// What a record's body holds, as a message names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    /// `len` bytes for the data area at `offset`.
    Data { len: u64, offset: u64 },
    /// A `Copied` record's list of ranges, `len` bytes.
    CopiedList { len: u64 },
}

impl fmt::Display for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Data { len, offset } => write!(f, "{len} bytes for offset {offset}"),
            Body::CopiedList { len } => write!(f, "a Copied list of {len} bytes"),
        }
    }
}

impl fmt::Display for LogChanged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogChanged::NotARecord { pos } => {
                write!(f, "the record at log position {pos} is no longer a record")
            }
            LogChanged::PastGroupEnd { pos, end, group_end } => write!(
                f,
                "the record at log position {pos} now ends at {end}, past the group's end {group_end}"
            ),
            LogChanged::Misplaced { pos, seq, len, offset } => {
                write!(
                    f,
                    "the record at log position {pos} now says group {seq}, {len} bytes at offset {offset}"
                )
            }
            LogChanged::Checksum { pos, body } => {
                write!(
                    f,
                    "the body of the record at log position {pos} ({body}) no longer matches its checksum"
                )
            }
            LogChanged::Mac { pos, body } => {
                write!(f, "the record MAC of the record at log position {pos} ({body}) no longer checks")
            }
        }
    }
}

impl std::error::Error for LogChanged {}
