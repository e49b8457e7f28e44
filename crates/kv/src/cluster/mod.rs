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
