//! The cluster's shape as etcd holds it: the shards, the slots each owns, the nodes that serve
//! each shard, and the slots being moved. One value, replaced whole in an etcd transaction
//! (compare the key's modification revision, then put), so a reader never sees half a change.
//!
//! A shard is one region: its primary runs `mojim kv`, its mirror (and backups) run
//! `mojim serve`. Its nodes are listed in preference order; `primary` names the one serving.

use serde::{Deserialize, Serialize};

/// Redis Cluster's hash slots: a key lives in `crc16(key) % SLOTS`.
pub const SLOTS: u16 = 16384;

/// The whole topology. `epoch` grows by one with every change (CLUSTER INFO's
/// `cluster_current_epoch`); each shard keeps its own `config_epoch`, bumped when its slots or
/// its primary change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Grows by one with every change.
    pub epoch: u64,
    /// Every shard, each owning its slot ranges.
    pub shards: Vec<Shard>,
    /// Slots on their way from one shard to another (MIGRATING on the source, IMPORTING on the
    /// target): keys not found on the source are answered with ASK to the target.
    #[serde(default)]
    pub moves: Vec<SlotMove>,
}

/// One shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 40 lowercase hex characters, as Redis node ids are; the shard's id, also given as its
    /// primary's node id in CLUSTER NODES/SHARDS/MYID.
    pub id: String,
    /// Bumped when the shard's slots or its primary change.
    pub config_epoch: u64,
    /// Inclusive ranges, sorted, not overlapping each other or another shard's.
    pub slots: Vec<SlotRange>,
    /// The machines that hold this shard's region, in preference order.
    pub nodes: Vec<ShardNode>,
    /// The name of the node whose `mojim kv` serves the shard now (one of `nodes`).
    pub primary: String,
}

/// A node of a shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardNode {
    /// The node's name (`--node`), unique in the cluster.
    pub name: String,
    /// Where clients reach its `mojim kv` when it is the shard's primary ("host:port").
    pub kv_addr: String,
    /// Where its `mojim serve` listens, for the shard's mirror and backups ("host:port").
    pub serve_addr: String,
    /// A failure domain (rack, zone); placement keeps a shard's nodes in different ones.
    #[serde(default)]
    pub zone: String,
    /// Where clients reach its `mojim kv` over TLS (`[kv] tls_listen`, "host:port"), if it
    /// serves TLS: a client connected over TLS is redirected there, and given it in CLUSTER
    /// SLOTS, SHARDS and NODES, as Redis 7.0 with `tls-cluster yes` gives its TLS port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_tls_addr: Option<String>,
}

/// `start..=end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// The first slot.
    pub start: u16,
    /// The last slot (inclusive).
    pub end: u16,
}

/// A slot moving from shard `from` to shard `to` (shard ids).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMove {
    /// The slot.
    pub slot: u16,
    /// The source shard's id.
    pub from: String,
    /// The target shard's id.
    pub to: String,
    /// The move gives the slot back to the shard it was moving away from (`mojim kv cluster
    /// move-slots --rollback` turned it around): `to` is where it was before. Absent (false)
    /// in the stored value of a move forward.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback: bool,
}

impl Topology {
    /// The shard that owns `slot`, if any, found by a scan of every shard's ranges (the
    /// redirect path asks a [`SlotTable`](super::slot_table::SlotTable) instead).
    pub fn owner(&self, slot: u16) -> Option<&Shard> {
        self.shards.iter().find(|s| s.slots.iter().any(|r| r.start <= slot && slot <= r.end))
    }

    /// The shard with this id.
    pub fn shard(&self, id: &str) -> Option<&Shard> {
        self.shards.iter().find(|s| s.id == id)
    }

    /// The move under way for `slot`, if any.
    pub fn moving(&self, slot: u16) -> Option<&SlotMove> {
        self.moves.iter().find(|m| m.slot == slot)
    }
}

impl Shard {
    /// The node serving the shard now.
    pub fn primary_node(&self) -> Option<&ShardNode> {
        self.nodes.iter().find(|n| n.name == self.primary)
    }
}

impl ShardNode {
    /// Where a client reaches this node's `mojim kv`: its `kv_tls_addr` for a client connected
    /// over TLS (its `kv_addr` when it has none), else its `kv_addr`.
    pub fn client_addr(&self, tls: bool) -> &str {
        match &self.kv_tls_addr {
            Some(a) if tls => a,
            _ => &self.kv_addr,
        }
    }
}
