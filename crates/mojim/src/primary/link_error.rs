//! Why a link to the mirror failed, by whose fault.
//!
//! Every failure of a link ends its session the same way (the primary drops it, makes its own
//! copy persistent, and reconnects), and the application sees [`Error::MirrorLost`] with the
//! message. The blame is for the code that decides what a failure means: a mirror that breaks
//! the protocol is not a network that broke, and neither is this node's own failure or a bug.

use crate::error::Error;
use std::fmt;

/// Why a link failed. Its message is what [`Error::MirrorLost`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LinkError {
    /// The mirror broke the protocol (a frame it may not send, an acknowledgement of a group
    /// never sent, a resend asked for outside the region), or what it was sent kept arriving
    /// changed.
    PeerMisbehaved(String),
    /// The mirror refused the session and said why.
    Refused(String),
    /// The connection broke or the mirror went silent: a network failure or the mirror's,
    /// nobody's fault on this side.
    Lost(String),
    /// This node failed: its storage, its system resources, or its right to act as primary
    /// (its lease).
    Local(String),
    /// What cannot happen did: a defect in this code.
    Bug(String),
}

impl LinkError {
    /// The message, whatever the blame.
    pub fn message(&self) -> &str {
        match self {
            LinkError::PeerMisbehaved(m)
            | LinkError::Refused(m)
            | LinkError::Lost(m)
            | LinkError::Local(m)
            | LinkError::Bug(m) => m,
        }
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for LinkError {}

impl From<LinkError> for Error {
    /// At the API every link failure is the loss of the mirror: the session is gone, and
    /// groups not acknowledged are not durable there.
    fn from(e: LinkError) -> Error {
        Error::MirrorLost { reason: e.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_error_carries_the_message_unchanged() {
        for e in [
            LinkError::PeerMisbehaved("a".into()),
            LinkError::Refused("b".into()),
            LinkError::Lost("c".into()),
            LinkError::Local("d".into()),
            LinkError::Bug("e".into()),
        ] {
            let m = e.message().to_string();
            match Error::from(e) {
                Error::MirrorLost { reason } => assert_eq!(reason, m),
                other => panic!("{other:?}"),
            }
        }
    }
}
