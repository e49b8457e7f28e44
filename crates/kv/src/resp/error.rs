//! A request that breaks the protocol or a limit: the client's fault.

use std::fmt;

/// What was wrong with a client's bytes. The server answers `-ERR Protocol error: <this>` (the
/// words Redis uses, where Redis has them) and closes that client; nothing else changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// `*` was followed by something that is not a number.
    InvalidMultibulkLength,
    /// `*n` announced more arguments than `[kv] max_args`.
    TooManyArgs {
        /// Arguments announced.
        count: u64,
        /// The limit.
        limit: usize,
    },
    /// `$` was followed by something that is not a non-negative number.
    InvalidBulkLength,
    /// `$n` announced a string longer than `[kv] max_bulk`.
    BulkTooLarge {
        /// Bytes announced.
        len: u64,
        /// The limit.
        limit: usize,
    },
    /// An argument of a multibulk request did not start with `$`.
    ExpectedDollar(u8),
    /// A bulk string's bytes were not followed by CR LF.
    BulkNotTerminated,
    /// A line (an inline command, or a `*`/`$` header) ran past `[kv] max_inline` bytes
    /// without ending.
    LineTooLong {
        /// The limit.
        limit: usize,
    },
    /// An inline command opened a quote it never closed (or a closing quote was followed by
    /// something other than a space).
    UnbalancedQuotes,
    /// One request larger than a connection buffers (2 × `max_bulk` + `max_inline`: many
    /// arguments each within the limits).
    RequestTooLarge {
        /// The most a connection buffers.
        limit: usize,
    },
    /// (Replies only) a nesting deeper than the decoder allows.
    TooDeep,
    /// (Replies only) a type byte that is not RESP2 or RESP3.
    UnknownType(u8),
    /// (Replies only) a number that does not parse.
    InvalidNumber,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            ProtocolError::TooManyArgs { count, limit } => {
                write!(f, "invalid multibulk length ({count} arguments; at most {limit}, [kv] max_args)")
            }
            ProtocolError::InvalidBulkLength => f.write_str("invalid bulk length"),
            ProtocolError::BulkTooLarge { len, limit } => {
                write!(f, "invalid bulk length ({len} bytes; at most {limit}, [kv] max_bulk)")
            }
            ProtocolError::ExpectedDollar(b) => {
                write!(f, "expected '$', got '{}'", char::from(*b).escape_default())
            }
            ProtocolError::BulkNotTerminated => f.write_str("bulk string not followed by CRLF"),
            ProtocolError::LineTooLong { limit } => {
                write!(f, "too big inline request (no line end within {limit} bytes, [kv] max_inline)")
            }
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            ProtocolError::RequestTooLarge { limit } => write!(
                f,
                "request larger than the {limit} bytes a connection buffers (2 x [kv] max_bulk + max_inline): \
                 send fewer or smaller arguments per command"
            ),
            ProtocolError::TooDeep => f.write_str("reply nested too deeply"),
            ProtocolError::UnknownType(b) => {
                write!(f, "unknown type byte '{}'", char::from(*b).escape_default())
            }
            ProtocolError::InvalidNumber => f.write_str("invalid number"),
        }
    }
}

impl std::error::Error for ProtocolError {}
