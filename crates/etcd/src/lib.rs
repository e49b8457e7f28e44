//! A small, blocking etcd v3 client and leader election held with a lease.
//!
//! The client speaks etcd's JSON gateway (`POST /v3/kv/range` and friends) over HTTP/1.1, plain
//! or in TLS with a client certificate ([`EtcdTls`], `https://` endpoints), one request per
//! connection, so it needs neither an async runtime nor gRPC. It covers what
//! fail-over and the cluster topology need and nothing more: single-key reads, prefix reads,
//! puts, the two transactions that make a key a lock (create-if-absent and compare-and-swap),
//! deletes, leases, and watches ([`Client::watch`]) that resume where they were after etcd
//! went away.
//!
//! [`Leadership`] holds one key under a lease and renews the lease on a background thread. It
//! tells its holder until when it may act as leader ([`Leadership::valid_until`]): the send time
//! of the last successful renewal plus the lease's TTL less a safety margin, which is always
//! before etcd can let the lease expire and hand the key to someone else.
//!
//! With the `testing` feature, [`testing::EtcdServer`] starts a throw-away etcd for tests and
//! for the tools that need a real one (the fail-over benchmark, the chaos harness).
#![forbid(unsafe_code)]

mod base64;
mod client;
mod error;
mod http;
mod leadership;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod tls;
mod watch;
mod wire;

pub use client::{Client, KeyValue};
pub use error::EtcdError;
pub use leadership::Leadership;
pub use tls::{EtcdTls, TlsFile, TlsFileError};
pub use watch::{Scope, Watch, WatchEvent, WATCH_IDLE};
