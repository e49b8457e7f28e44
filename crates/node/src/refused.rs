//! Why the node refused a connection at its handshake, or a lane as it joined a session: the
//! reasons `mojim status` counts (`refused_handshakes`) and the metric
//! `mojim_refused_handshakes_total{reason}` labels.

use mojim_format::handshake::RefuseCode;
use mojim_format::FrameError;
use mojim_transport::frames::{timed_out, ReadError};
use std::io::ErrorKind;

/// One reason a connection or lane was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its Hello or Proof did not come whole within the handshake's deadline.
    Timeout,
    /// TLS failed: a certificate refused, a plaintext peer on a TLS node or the other way round.
    Tls,
    /// A protocol version this node does not speak.
    Version,
    /// A frame that does not decode, or a Hello that breaks the handshake's rules.
    Malformed,
    /// It did not prove the cluster's secret.
    Secret,
    /// Another region, or a size or identity that does not match this node's.
    Region,
    /// An epoch older than this node's, or a session this node may not serve in it.
    Epoch,
    /// The node serves another session, or has no room.
    Busy,
    /// The node could not make the lane's log.
    Storage,
    /// A newer connection displaced it while it was in its handshake.
    Displaced,
    /// Its certificate's role may not connect as it asked (an application's as a node).
    Role,
    /// It closed, or its connection failed, before the handshake ended.
    Closed,
    /// Anything else.
    Other,
}

impl Refused {
    pub const ALL: [Refused; 13] = [
        Refused::Timeout,
        Refused::Tls,
        Refused::Version,
        Refused::Malformed,
        Refused::Secret,
        Refused::Region,
        Refused::Epoch,
        Refused::Busy,
        Refused::Storage,
        Refused::Displaced,
        Refused::Role,
        Refused::Closed,
        Refused::Other,
    ];

    /// The label: lower case, one word.
    pub fn name(self) -> &'static str {
        match self {
            Refused::Timeout => "timeout",
            Refused::Tls => "tls",
            Refused::Version => "version",
            Refused::Malformed => "malformed",
            Refused::Secret => "secret",
            Refused::Region => "region",
            Refused::Epoch => "epoch",
            Refused::Busy => "busy",
            Refused::Storage => "storage",
            Refused::Displaced => "displaced",
            Refused::Role => "role",
            Refused::Closed => "closed",
            Refused::Other => "other",
        }
    }

    /// The reason of a refusal this node sends with `code`.
    pub fn of_code(code: RefuseCode) -> Refused {
        match code {
            RefuseCode::Version => Refused::Version,
            RefuseCode::Secret => Refused::Secret,
            RefuseCode::Region => Refused::Region,
            RefuseCode::Epoch => Refused::Epoch,
            RefuseCode::Busy => Refused::Busy,
            RefuseCode::Malformed => Refused::Malformed,
            RefuseCode::Storage => Refused::Storage,
            RefuseCode::Other => Refused::Other,
        }
    }

    /// The reason of a handshake frame that could not be read. `tls`: this node speaks TLS, so
    /// a read that found bad data failed in TLS (its records, or the certificates).
    pub fn of_read(e: &ReadError, tls: bool) -> Refused {
        match e {
            ReadError::Io(io) if timed_out(io) => Refused::Timeout,
            ReadError::Io(io) if io.kind() == ErrorKind::InvalidData && tls => Refused::Tls,
            ReadError::Io(io) if io.kind() == ErrorKind::InvalidData => Refused::Malformed,
            ReadError::Io(_) => Refused::Closed,
            // A TLS ClientHello's first bytes where a frame header was expected.
            ReadError::Frame(FrameError::HeaderChecksum { stored, .. })
                if stored.to_le_bytes()[..2] == [0x16, 0x03] =>
            {
                Refused::Tls
            }
            ReadError::Frame(FrameError::Version { .. }) => Refused::Version,
            ReadError::Frame(_) | ReadError::Body(_) | ReadError::TooLarge { .. } => Refused::Malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_one_word_label() {
        let names: std::collections::BTreeSet<_> = Refused::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Refused::ALL.len());
        assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase())), "{names:?}");
        for (i, r) in Refused::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "ALL is in declaration order, so a reason indexes its counter");
        }
    }

    #[test]
    fn read_errors_name_their_reason() {
        let io = |k| ReadError::Io(std::io::Error::new(k, "x"));
        assert_eq!(Refused::of_read(&io(ErrorKind::TimedOut), false), Refused::Timeout);
        assert_eq!(Refused::of_read(&io(ErrorKind::WouldBlock), true), Refused::Timeout);
        assert_eq!(Refused::of_read(&io(ErrorKind::InvalidData), true), Refused::Tls);
        assert_eq!(Refused::of_read(&io(ErrorKind::InvalidData), false), Refused::Malformed);
        assert_eq!(Refused::of_read(&io(ErrorKind::UnexpectedEof), false), Refused::Closed);
        assert_eq!(Refused::of_code(RefuseCode::Secret), Refused::Secret);
    }
}
