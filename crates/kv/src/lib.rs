//! `mojim kv`: a Redis-protocol server whose data lives in a replicated Mojim region.
//!
//! The keys and values are not in the process's heap but in the region: a hash table and an
//! allocator laid out in it (docs/FORMAT.md §11), changed by plain stores and made durable by
//! `gmsync`. Every write command's changes are one atomic group on the mirror before its reply
//! is sent, and the commands of one event-loop turn, from every client, share one group and one
//! round trip (group commit). A restart, or the promoted mirror, serves exactly the
//! acknowledged state: opening the region is the whole recovery.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cluster;
pub mod cmd;
pub mod config;
mod error;
mod options;
pub mod resp;
pub mod server;
pub mod store;
pub mod tls;

pub use config::KvSection;
pub use error::KvError;
pub use options::{split_host_port, KvOptions, DEFAULT_MIRROR_WAIT};
pub use server::{run, run_with, Control};
