//! What can stop `mojim kv`, and whose fault it is.

use crate::store::StoreError;
use std::fmt;

/// An error that stops the server (a client's bad request never does: it closes that client).
#[derive(Debug)]
pub enum KvError {
    /// The configuration or a flag is wrong; the message names the setting and the fix.
    Config(String),
    /// The region cannot hold a store, or the store in it is damaged.
    Store(StoreError),
    /// As [`KvError::Store`], for the region file at `path` (found when opening it).
    Region {
        /// The region file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        source: StoreError,
    },
    /// The region or its mirror failed (including: another node was promoted).
    Mojim(mojim::Error),
    /// Another node was promoted: this primary must not serve. The message says how it was
    /// found out.
    Replaced(String),
    /// The cluster's topology could not be read from etcd, or is not there.
    Cluster(crate::cluster::store::ClusterStoreError),
    /// A system call failed.
    Io {
        /// What was being done.
        op: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl KvError {
    /// Wraps an I/O error, `op` naming what was being done.
    pub fn io(op: impl Into<String>) -> impl FnOnce(std::io::Error) -> KvError {
        move |source| KvError::Io { op: op.into(), source }
    }
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KvError::Config(m) => write!(f, "configuration: {m}"),
            KvError::Store(e) => write!(f, "{e}"),
            KvError::Region { path, source } => write!(f, "region {}: {source}", path.display()),
            KvError::Mojim(e) => write!(f, "{e}"),
            KvError::Replaced(m) => {
                write!(f, "this primary was replaced ({m}); start mojim kv on the promoted node")
            }
            KvError::Cluster(e) => write!(f, "{e}"),
            KvError::Io { op, source } => write!(f, "{op}: {source}"),
        }
    }
}

impl std::error::Error for KvError {}

impl From<StoreError> for KvError {
    fn from(e: StoreError) -> KvError {
        KvError::Store(e)
    }
}

impl From<crate::cluster::store::ClusterStoreError> for KvError {
    fn from(e: crate::cluster::store::ClusterStoreError) -> KvError {
        KvError::Cluster(e)
    }
}

impl From<mojim::config::SectionError> for KvError {
    fn from(e: mojim::config::SectionError) -> KvError {
        KvError::Config(e.to_string())
    }
}

impl From<mojim::Error> for KvError {
    fn from(e: mojim::Error) -> KvError {
        KvError::Mojim(e)
    }
}
