//! `mojim kv` as one shard of a Redis Cluster: the topology etcd holds, and the slots.

pub mod check;
pub mod connect;
pub mod store;
pub mod topology;
pub mod view;
pub mod watcher;
