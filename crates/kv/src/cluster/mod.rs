//! `mojim kv` as one shard of a Redis Cluster: the topology etcd holds, the slots, and where a
//! command's keys are served.

pub mod check;
pub mod connect;
pub mod failover;
pub mod listen;
pub mod move_lock;
pub mod redirect;
pub mod slot;
pub mod slot_table;
pub mod store;
pub mod topology;
pub mod view;
pub mod watcher;

/// The logical database that holds a live slot move's keys in flight on its source (the last of
/// a store's 16; cluster mode never lets a client select it): `CLUSTER STAGEKEYS`.
pub const STAGE_DB: usize = crate::store::DBS - 1;
