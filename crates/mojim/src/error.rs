//! Mojim's errors, typed by whose fault they are.

pub use mojim_core::encode::RangeError;
use mojim_core::handshake::HandshakeError;
use mojim_core::receive::Violation;
use mojim_format::handshake::RefuseCode;
use mojim_region::MapError;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong in Mojim's API and daemon.
#[derive(Debug)]
pub enum Error {
    /// The caller asked for something impossible (bad range, too large a group): nothing was
    /// sent, nothing changed.
    Range(RangeError),
    /// The configuration is wrong; the message names the setting and the fix.
    Config(String),
    /// The peer refused us and said why.
    Refused {
        /// The peer's address.
        peer: String,
        /// Why it refused, as a code.
        code: RefuseCode,
        /// What the peer said.
        message: String,
    },
    /// The handshake with the peer failed.
    Handshake {
        /// The peer's address.
        peer: String,
        /// What went wrong.
        source: HandshakeError,
    },
    /// The peer broke the protocol.
    PeerMisbehaved {
        /// The peer's address.
        peer: String,
        /// The rule it broke.
        violation: Violation,
    },
    /// The replication session is gone; groups not acknowledged before this are not durable on
    /// the mirror. The primary reconnects by itself.
    MirrorLost {
        /// Why the session ended.
        reason: String,
    },
    /// A peer is at a newer epoch: this node was replaced as primary and must not write.
    Fenced {
        /// This node's epoch.
        epoch: u64,
        /// The peer that is at a newer one.
        peer: String,
        /// The peer's epoch.
        peer_epoch: u64,
    },
    /// This copy and the peer's have histories that cannot be reconciled automatically.
    Diverged {
        /// The peer's address.
        peer: String,
        /// How the histories differ, and what to do.
        message: String,
    },
    /// The coordinator (etcd) could not be used, or says this node may not act.
    Coordinator(String),
    /// A system call failed.
    Io {
        /// What was being done, e.g. `open /dev/shm/r`.
        op: String,
        /// The system's error.
        source: io::Error,
    },
    /// A region or log file could not be mapped or is not valid.
    Storage(MapError),
    /// The region is open as primary already, in another process or in this one: one primary
    /// per region (see [`crate::RegionLock`]). Nothing was opened.
    RegionLocked {
        /// The region file.
        path: PathBuf,
        /// The process holding it, where the system says (Linux's `/proc/locks`).
        holder: Option<u32>,
    },
}

impl Error {
    /// Whether the peer cannot serve us for now: it could not be reached, or its storage
    /// failed (as opposed to refusing us for what we are or sent).
    pub fn is_peer_unreachable(&self) -> bool {
        matches!(
            self,
            Error::Io { .. } | Error::MirrorLost { .. } | Error::Refused { code: RefuseCode::Storage, .. }
        )
    }

    /// Wraps an I/O error as [`Error::Io`] with `op` naming what was being done: for
    /// `.map_err(Error::io("open region"))`.
    pub fn io(op: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
        let op = op.into();
        move |source| Error::Io { op, source }
    }
}

impl From<mojim_transport::connect::ConnectError> for Error {
    fn from(e: mojim_transport::connect::ConnectError) -> Error {
        use mojim_transport::connect::ConnectError;
        match e {
            ConnectError::Io { op, source } => Error::Io { op, source },
            ConnectError::Refused { peer, code, message } => Error::Refused { peer, code, message },
            ConnectError::Handshake { peer, source } => Error::Handshake { peer, source },
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Range(e) => write!(f, "{e}"),
            Error::Config(m) => write!(f, "configuration: {m}"),
            Error::Refused { peer, code, message } => {
                write!(f, "{peer} refused the connection ({code:?}): {message}")
            }
            Error::Handshake { peer, source } => write!(f, "handshake with {peer} failed: {source}"),
            Error::PeerMisbehaved { peer, violation } => {
                write!(f, "{peer} broke the protocol: {violation}")
            }
            Error::MirrorLost { reason } => write!(
                f,
                "the mirror is lost ({reason}); groups not acknowledged are not durable on the mirror; \
                 the primary reconnects by itself"
            ),
            Error::Fenced { epoch, peer, peer_epoch } => write!(
                f,
                "fenced: this primary is at epoch {epoch} but {peer} is at epoch {peer_epoch}: another node \
                 was promoted; restart the application on the current primary"
            ),
            Error::Diverged { peer, message } => write!(f, "{peer}: {message}"),
            Error::Coordinator(m) => write!(f, "coordinator: {m}"),
            Error::Io { op, source } => write!(f, "{op}: {source}"),
            Error::Storage(e) => write!(f, "{e}"),
            Error::RegionLocked { path, holder } => match holder {
                Some(pid) if *pid == std::process::id() => write!(
                    f,
                    "the region {} is open as primary in this process already (pid {pid}): one primary per \
                     region; use the open one, or close it first",
                    path.display()
                ),
                Some(pid) => write!(
                    f,
                    "the region {} is open as primary in process {pid}: one primary per region; stop that \
                     process first, or open another region",
                    path.display()
                ),
                None => write!(
                    f,
                    "the region {} is open as primary in another process (or by another open in this one): \
                     one primary per region; stop the other first",
                    path.display()
                ),
            },
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Range(e) => Some(e),
            Error::Handshake { source, .. } => Some(source),
            Error::PeerMisbehaved { violation, .. } => Some(violation),
            Error::Io { source, .. } => Some(source),
            Error::Storage(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RangeError> for Error {
    fn from(e: RangeError) -> Error {
        Error::Range(e)
    }
}

impl From<MapError> for Error {
    fn from(e: MapError) -> Error {
        Error::Storage(e)
    }
}

/// A result whose error is Mojim's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
