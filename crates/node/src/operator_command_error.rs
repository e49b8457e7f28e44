//! Why an operator's command to a node failed, by whose fault: the operator's request, the
//! session a peer holds open, or this node's storage. The admin connection sends the message
//! (`Display`) back as the refusal's text; that is the only place it becomes a string.

use std::fmt;
use std::io;
use std::time::Duration;

/// Why a command (`mojim fence`, `promote`, `demote`, `discard`, `reset`, `backup add` and
/// `backup remove`, or a promotion by the coordinator) did not happen.
#[derive(Debug)]
pub enum CommandError {
    /// The operator's request is not a command this node knows.
    BadRequest {
        /// The request as it came.
        json: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The operator asked for something a current session forbids: fence the node first.
    SessionActive {
        /// The session's peer (the primary).
        peer: String,
    },
    /// The operator's epoch is older than the node's.
    OlderEpoch {
        /// The epoch asked for.
        epoch: u64,
        /// The node's.
        current: u64,
    },
    /// A promotion needs an epoch above the node's; the operator gave one that is not.
    EpochNotNew {
        /// The epoch asked for.
        epoch: u64,
        /// The node's.
        current: u64,
    },
    /// This copy is inconsistent (a copy into it did not finish): promoting it would lose data.
    Inconsistent,
    /// The session's peer kept it open past the time given to end it.
    SessionStayed {
        /// The session's peer.
        peer: String,
        /// How long the node waited.
        timeout: Duration,
    },
    /// This node's data area failed before (it takes no more checkpoints).
    DataAreaFailed(String),
    /// This node's storage failed now.
    Storage(StorageError),
    /// Groups are being applied: the reset cannot start now (try again).
    Busy(String),
    /// `backup_add` or `backup_remove` was refused.
    Backup(BackupError),
}

/// A read or write of this node's own storage (its data area, logs, the primary's files) failed.
#[derive(Debug)]
pub struct StorageError {
    /// What was being done, e.g. `persist the epoch`.
    pub op: &'static str,
    /// The system's error, or the library's message.
    pub source: StorageCause,
}

/// What a [`StorageError`] came from.
#[derive(Debug)]
pub enum StorageCause {
    /// A system call's error.
    Io(io::Error),
    /// The library's error (a file it opens or maps).
    Mojim(mojim::Error),
}

impl StorageError {
    /// Wraps an I/O error with `op`: for `.map_err(StorageError::io("persist the epoch"))`.
    pub fn io(op: &'static str) -> impl Fn(io::Error) -> StorageError {
        move |e| StorageError { op, source: StorageCause::Io(e) }
    }

    /// Wraps the library's error with `op`.
    pub fn mojim(op: &'static str) -> impl Fn(mojim::Error) -> StorageError {
        move |e| StorageError { op, source: StorageCause::Mojim(e) }
    }
}

/// Why `backup_add` or `backup_remove` was refused. All but [`BackupError::Start`] are the
/// operator's request; that one is this node's.
#[derive(Debug)]
pub enum BackupError {
    /// The node does not serve yet.
    NotServing,
    /// The address given is this node's own.
    OwnAddress(String),
    /// The address given is not a node's address.
    NotAnAddress(String),
    /// The node feeds that backup already.
    AlreadyFed(String),
    /// The node feeds as many backups as it may.
    TooMany {
        /// How many it feeds.
        fed: usize,
        /// The most it feeds.
        max: usize,
    },
    /// This node's copy is the primary's: it feeds no backup.
    Primary,
    /// The link's thread could not be started.
    Start {
        /// The backup's address.
        addr: String,
        /// The system's error.
        source: io::Error,
    },
    /// The address given is not a backup of this node.
    NotABackup {
        /// The address given.
        addr: String,
        /// The backups the node feeds.
        fed: Vec<String>,
    },
}

impl From<StorageError> for CommandError {
    fn from(e: StorageError) -> CommandError {
        CommandError::Storage(e)
    }
}

impl From<BackupError> for CommandError {
    fn from(e: BackupError) -> CommandError {
        CommandError::Backup(e)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::BadRequest { json, reason } => write!(f, "bad command {json:?}: {reason}"),
            CommandError::SessionActive { peer } => {
                write!(f, "a session from {peer} is active; fence this node first")
            }
            CommandError::OlderEpoch { epoch, current } => {
                write!(f, "epoch {epoch} is older than this node's epoch {current}")
            }
            CommandError::EpochNotNew { epoch, current } => {
                write!(f, "promotion needs a new epoch: {epoch} is not above this node's epoch {current}")
            }
            CommandError::Inconsistent => f.write_str(
                "this copy is inconsistent (a copy into it did not finish): promoting it would lose data; \
                 promote another node",
            ),
            CommandError::SessionStayed { peer, timeout } => {
                write!(f, "the session from {peer} did not end within {timeout:?}")
            }
            CommandError::DataAreaFailed(m) => write!(f, "the data area failed: {m}"),
            CommandError::Storage(e) => write!(f, "{e}"),
            CommandError::Busy(m) => f.write_str(m),
            CommandError::Backup(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            StorageCause::Io(e) => write!(f, "{}: {e}", self.op),
            StorageCause::Mojim(e) => write!(f, "{}: {e}", self.op),
        }
    }
}

impl fmt::Display for BackupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackupError::NotServing => f.write_str("this node is not serving yet; add the backup once it serves"),
            BackupError::OwnAddress(addr) => write!(
                f,
                "{addr:?} is this node's own address: a node cannot be its own backup; name another node's \
                 [mirror] listen"
            ),
            BackupError::NotAnAddress(addr) => write!(
                f,
                "{addr:?} is not a node's address: give host:port (e.g. \"10.0.0.3:7070\"), ucx:host:port, or \
                 a shared-memory socket's absolute path, as in [mirror] listen"
            ),
            BackupError::AlreadyFed(addr) => {
                write!(f, "{addr} is already a backup of this node (`mojim status` lists its link)")
            }
            BackupError::TooMany { fed, max } => {
                write!(f, "this node already feeds {fed} backups, the most it feeds ({max}); remove one first")
            }
            BackupError::Primary => f.write_str(
                "this node's copy is the primary's: it feeds no backup (add backups to the current mirror)",
            ),
            BackupError::Start { addr, source } => write!(f, "cannot start the link to {addr}: {source}"),
            BackupError::NotABackup { addr, fed } => write!(
                f,
                "{addr} is not a backup of this node; it feeds {}",
                if fed.is_empty() { "none".to_string() } else { fed.join(", ") }
            ),
        }
    }
}

impl std::error::Error for CommandError {}
impl std::error::Error for StorageError {}
impl std::error::Error for BackupError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_value_and_the_fix() {
        let e = CommandError::OlderEpoch { epoch: 3, current: 7 };
        assert_eq!(e.to_string(), "epoch 3 is older than this node's epoch 7");
        let e = CommandError::from(StorageError::io("persist the epoch")(io::Error::from_raw_os_error(5)));
        assert!(e.to_string().starts_with("persist the epoch: "), "{e}");
        let e = CommandError::from(BackupError::NotABackup { addr: "h:1".into(), fed: vec![] });
        assert_eq!(e.to_string(), "h:1 is not a backup of this node; it feeds none");
        let e = BackupError::NotABackup { addr: "h:1".into(), fed: vec!["a:1".into(), "b:2".into()] };
        assert_eq!(e.to_string(), "h:1 is not a backup of this node; it feeds a:1, b:2");
    }
}
