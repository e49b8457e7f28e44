//! Why a link to a backup failed, by whose fault.
//!
//! Every failure of a backup link ends it the same way (the link is marked down with the
//! message, and the forwarder connects again after a pause). The blame is for the code that
//! decides what a failure means: a backup that breaks the protocol is not a network that broke,
//! and neither is this node's storage failing, a configuration that differs between nodes, or a
//! bug.

use mojim::error::Error;
use mojim_core::handshake::HandshakeError;
use std::fmt;

/// Why a backup link failed (or a lane's wait on the backups ended). Its message is what the
/// log and the link's status (`BackupStatus::error`) show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ForwardError {
    /// The backup broke the protocol: a frame it may not send, an acknowledgement of a group
    /// never sent to it, a session that does not resume where it was reset to.
    BackupMisbehaved(String),
    /// The backup refused the session or a command, and said why.
    Refused(String),
    /// The connection broke or the backup could not be reached: a network failure or the
    /// backup's, nobody's fault on this side.
    Lost(String),
    /// This node failed: its storage (its data area cannot be read, or a write to it failed),
    /// or its system resources.
    Local(String),
    /// A group to send was changed in this node's log after this node checked it, by a peer
    /// that can write the log at any time (UCX): the group is not sent, the violation is
    /// counted, and the backup gets a full copy on its next connection.
    LogChanged(String),
    /// The nodes are configured differently (their secrets, their frame limits).
    Config(String),
    /// This node ended the link: it is shutting down, was promoted, or a copy into it began.
    /// Nobody failed.
    Ended(String),
    /// What cannot happen did: a defect in this code.
    Bug(String),
}

impl ForwardError {
    /// The message, whatever the blame.
    pub fn message(&self) -> &str {
        match self {
            ForwardError::BackupMisbehaved(m)
            | ForwardError::Refused(m)
            | ForwardError::Lost(m)
            | ForwardError::Local(m)
            | ForwardError::LogChanged(m)
            | ForwardError::Config(m)
            | ForwardError::Ended(m)
            | ForwardError::Bug(m) => m,
        }
    }

    /// Blames a failure to reach the backup (a handshake, an operator's command): `message` is
    /// what it says.
    pub fn reaching(e: &Error, message: String) -> ForwardError {
        match e {
            Error::Refused { .. } | Error::Fenced { .. } | Error::Diverged { .. } => {
                ForwardError::Refused(message)
            }
            Error::Handshake { source: HandshakeError::PeerSecret, .. } | Error::Config(_) => {
                ForwardError::Config(message)
            }
            Error::Handshake { .. } | Error::PeerMisbehaved { .. } => ForwardError::BackupMisbehaved(message),
            _ => ForwardError::Lost(message),
        }
    }
}

impl fmt::Display for ForwardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ForwardError {}

impl From<mojim_transport::connect::ConnectError> for ForwardError {
    /// A failure to reach the backup, blamed as the library's errors are.
    fn from(e: mojim_transport::connect::ConnectError) -> ForwardError {
        ForwardError::from(Error::from(e))
    }
}

impl From<Error> for ForwardError {
    /// A failure to reach the backup, blamed by its kind, with its message.
    fn from(e: Error) -> ForwardError {
        let message = e.to_string();
        ForwardError::reaching(&e, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_kept_whatever_the_blame() {
        for e in [
            ForwardError::BackupMisbehaved("a".into()),
            ForwardError::Refused("b".into()),
            ForwardError::Lost("c".into()),
            ForwardError::Local("d".into()),
            ForwardError::LogChanged("h".into()),
            ForwardError::Config("e".into()),
            ForwardError::Ended("f".into()),
            ForwardError::Bug("g".into()),
        ] {
            assert_eq!(e.to_string(), e.message());
        }
    }

    #[test]
    fn a_failure_to_reach_the_backup_is_blamed_by_its_kind() {
        let refused = Error::Refused {
            peer: "b:1".into(),
            code: mojim_format::handshake::RefuseCode::Other,
            message: "no".into(),
        };
        let secret = Error::Handshake { peer: "b:1".into(), source: HandshakeError::PeerSecret };
        let io = Error::io("connect to b:1")(std::io::Error::other("down"));
        for (e, want) in [
            (refused, ForwardError::Refused(String::new())),
            (secret, ForwardError::Config(String::new())),
            (io, ForwardError::Lost(String::new())),
        ] {
            let m = e.to_string();
            let got = ForwardError::from(e);
            assert_eq!(got.message(), m);
            assert_eq!(std::mem::discriminant(&got), std::mem::discriminant(&want));
        }
    }
}
