//! What makes a topology valid, checked before every write to etcd and after every read from
//! it, and the placement rule for a shard's nodes.

use super::topology::{Shard, ShardNode, Topology, SLOTS};
use std::collections::HashMap;
use std::fmt;

/// Why a topology is not valid; each variant names the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// More shards than slots.
    TooManyShards {
        /// How many there are.
        count: usize,
    },
    /// A shard id is not 40 lowercase hex characters.
    BadShardId {
        /// The id.
        id: String,
    },
    /// Two shards have one id.
    DuplicateShardId {
        /// The id.
        id: String,
    },
    /// A slot range is empty (end before start) or past slot 16383.
    SlotRangeOutOfBounds {
        /// The shard.
        shard: String,
        /// The range's first slot.
        start: u16,
        /// The range's last slot.
        end: u16,
    },
    /// A shard's ranges are not sorted, or overlap each other.
    SlotRangesUnsorted {
        /// The shard.
        shard: String,
        /// The range that starts at or before the end of the one before it.
        start: u16,
    },
    /// Two shards claim one slot.
    SlotOwnedTwice {
        /// The slot.
        slot: u16,
        /// One owner.
        first: String,
        /// The other.
        second: String,
    },
    /// A shard has no nodes.
    NoNodes {
        /// The shard.
        shard: String,
    },
    /// A shard's `primary` is not one of its nodes.
    PrimaryNotANode {
        /// The shard.
        shard: String,
        /// The primary named.
        primary: String,
    },
    /// Two nodes (in one shard or two) have one name.
    DuplicateNodeName {
        /// The name.
        name: String,
    },
    /// A node's name is empty or holds characters other than letters, digits, `-`, `_`, `.`.
    BadNodeName {
        /// The name.
        name: String,
    },
    /// A node's address is not `host:port`.
    BadAddress {
        /// The node.
        node: String,
        /// `kv_addr`, `serve_addr` or `kv_tls_addr`.
        field: &'static str,
        /// The address.
        value: String,
    },
    /// A slot move names a shard that is not in the topology, or moves a slot its source does
    /// not own.
    BadMove {
        /// The slot.
        slot: u16,
        /// What is wrong.
        why: String,
    },
    /// Two of a shard's nodes are on one host, or (when every node has a zone) in one zone: one
    /// failure would take both copies of its region.
    Placement {
        /// The shard.
        shard: String,
        /// The two nodes.
        nodes: (String, String),
        /// "host 10.0.0.1" or "zone a".
        shared: String,
    },
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TopologyError as E;
        match self {
            E::TooManyShards { count } => {
                write!(f, "{count} shards is more than the {SLOTS} slots: remove the shards that own none")
            }
            E::BadShardId { id } => write!(f, "shard id {id:?} is not 40 lowercase hex characters"),
            E::DuplicateShardId { id } => write!(f, "shard id {id} is used by two shards"),
            E::SlotRangeOutOfBounds { shard, start, end } => {
                write!(f, "shard {shard}: slot range {start}-{end} is empty or past slot {}", SLOTS - 1)
            }
            E::SlotRangesUnsorted { shard, start } => write!(
                f,
                "shard {shard}: slot range starting at {start} overlaps or precedes the range before it \
                 (ranges must be sorted and disjoint)"
            ),
            E::SlotOwnedTwice { slot, first, second } => {
                write!(f, "slot {slot} is owned by two shards, {first} and {second}")
            }
            E::NoNodes { shard } => write!(f, "shard {shard} has no nodes"),
            E::PrimaryNotANode { shard, primary } => {
                write!(f, "shard {shard}: primary {primary:?} is not one of its nodes")
            }
            E::DuplicateNodeName { name } => write!(f, "node name {name:?} is used twice"),
            E::BadNodeName { name } => write!(
                f,
                "node name {name:?} is empty or has characters other than letters, digits, '-', '_' and '.'"
            ),
            E::BadAddress { node, field, value } => {
                write!(f, "node {node}: {field} {value:?} is not host:port (e.g. \"10.0.0.2:6379\")")
            }
            E::BadMove { slot, why } => write!(f, "the move of slot {slot}: {why}"),
            E::Placement { shard, nodes, shared } => write!(
                f,
                "shard {shard}: nodes {} and {} are on the same {shared}, so one failure would take both \
                 copies of its region; place them on different machines (and zones)",
                nodes.0, nodes.1
            ),
        }
    }
}

impl std::error::Error for TopologyError {}

/// Whether `id` is 40 lowercase hex characters.
pub fn is_shard_id(id: &str) -> bool {
    id.len() == 40 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` may name a node.
fn is_node_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The host of `host:port`, if it is that.
pub fn address_host(addr: &str) -> Option<&str> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    (!host.is_empty() && port.parse::<u16>().is_ok()).then_some(host)
}

impl Topology {
    /// Checks the rules every stored topology keeps: shard ids of 40 hex characters, unique;
    /// each shard's slot ranges in bounds, sorted and disjoint, and no slot owned twice; every
    /// shard has nodes and its primary is one of them; node names unique and addresses
    /// `host:port`; moves between known shards of slots their source owns.
    pub fn check(&self) -> Result<(), TopologyError> {
        let mut owner: Vec<Option<&str>> = vec![None; usize::from(SLOTS)];
        let mut ids = HashMap::new();
        let mut names = HashMap::new();
        if self.shards.len() > usize::from(SLOTS) {
            return Err(TopologyError::TooManyShards { count: self.shards.len() });
        }
        for s in &self.shards {
            if !is_shard_id(&s.id) {
                return Err(TopologyError::BadShardId { id: s.id.clone() });
            }
            if ids.insert(s.id.as_str(), ()).is_some() {
                return Err(TopologyError::DuplicateShardId { id: s.id.clone() });
            }
            let mut previous_end: Option<u16> = None;
            for r in &s.slots {
                if r.end < r.start || r.end >= SLOTS {
                    return Err(TopologyError::SlotRangeOutOfBounds {
                        shard: s.id.clone(),
                        start: r.start,
                        end: r.end,
                    });
                }
                if previous_end.is_some_and(|e| r.start <= e) {
                    return Err(TopologyError::SlotRangesUnsorted { shard: s.id.clone(), start: r.start });
                }
                previous_end = Some(r.end);
                for slot in r.start..=r.end {
                    if let Some(first) = owner[usize::from(slot)] {
                        return Err(TopologyError::SlotOwnedTwice {
                            slot,
                            first: first.to_owned(),
                            second: s.id.clone(),
                        });
                    }
                    owner[usize::from(slot)] = Some(&s.id);
                }
            }
            if s.nodes.is_empty() {
                return Err(TopologyError::NoNodes { shard: s.id.clone() });
            }
            for n in &s.nodes {
                if !is_node_name(&n.name) {
                    return Err(TopologyError::BadNodeName { name: n.name.clone() });
                }
                if names.insert(n.name.as_str(), ()).is_some() {
                    return Err(TopologyError::DuplicateNodeName { name: n.name.clone() });
                }
                let tls = n.kv_tls_addr.iter().map(|a| ("kv_tls_addr", a));
                for (field, value) in
                    [("kv_addr", &n.kv_addr), ("serve_addr", &n.serve_addr)].into_iter().chain(tls)
                {
                    if address_host(value).is_none() {
                        return Err(TopologyError::BadAddress {
                            node: n.name.clone(),
                            field,
                            value: value.clone(),
                        });
                    }
                }
            }
            if s.primary_node().is_none() {
                return Err(TopologyError::PrimaryNotANode {
                    shard: s.id.clone(),
                    primary: s.primary.clone(),
                });
            }
        }
        for m in &self.moves {
            let bad = |why: String| Err(TopologyError::BadMove { slot: m.slot, why });
            if m.slot >= SLOTS {
                return bad(format!("slot {} is past slot {}", m.slot, SLOTS - 1));
            }
            for id in [&m.from, &m.to] {
                if !ids.contains_key(id.as_str()) {
                    return bad(format!("shard {id:?} is not in the topology"));
                }
            }
            if m.from == m.to {
                return bad(format!("its source and target are both {}", m.from));
            }
            if owner[usize::from(m.slot)] != Some(m.from.as_str()) {
                return bad(format!("its source {} does not own it", m.from));
            }
        }
        Ok(())
    }

    /// The slots no shard owns, as inclusive ranges.
    pub fn uncovered(&self) -> Vec<(u16, u16)> {
        let mut covered = vec![false; usize::from(SLOTS)];
        for r in self.shards.iter().flat_map(|s| &s.slots) {
            for slot in r.start..=r.end.min(SLOTS - 1) {
                covered[usize::from(slot)] = true;
            }
        }
        let mut gaps = Vec::new();
        let mut slot = 0;
        while slot < SLOTS {
            if covered[usize::from(slot)] {
                slot += 1;
                continue;
            }
            let start = slot;
            while slot < SLOTS && !covered[usize::from(slot)] {
                slot += 1;
            }
            gaps.push((start, slot - 1));
        }
        gaps
    }
}

/// The hosts of a node's two addresses.
fn hosts(n: &ShardNode) -> Vec<&str> {
    [address_host(&n.kv_addr), address_host(&n.serve_addr)].into_iter().flatten().collect()
}

impl Shard {
    /// The placement rule: no two of the shard's nodes on one host (by the host of their
    /// addresses) and, when every node has a zone, none in one zone.
    pub fn check_placement(&self) -> Result<(), TopologyError> {
        let zoned = self.nodes.iter().all(|n| !n.zone.is_empty());
        for (i, a) in self.nodes.iter().enumerate() {
            for b in &self.nodes[i + 1..] {
                let shared = hosts(a).into_iter().find(|h| hosts(b).contains(h)).map(|h| format!("host {h}"));
                let shared =
                    shared.or_else(|| (zoned && a.zone == b.zone).then(|| format!("zone {}", a.zone)));
                if let Some(shared) = shared {
                    return Err(TopologyError::Placement {
                        shard: self.id.clone(),
                        nodes: (a.name.clone(), b.name.clone()),
                        shared,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::topology::{SlotMove, SlotRange};
    use super::*;

    fn node(name: &str, host: &str, zone: &str) -> ShardNode {
        ShardNode {
            name: name.into(),
            kv_addr: format!("{host}:6379"),
            serve_addr: format!("{host}:7070"),
            zone: zone.into(),
            kv_tls_addr: None,
        }
    }

    fn shard(n: u8, ranges: &[(u16, u16)], nodes: Vec<ShardNode>) -> Shard {
        Shard {
            id: format!("{n:02x}").repeat(20),
            config_epoch: 1,
            slots: ranges.iter().map(|&(start, end)| SlotRange { start, end }).collect(),
            primary: nodes.first().map(|n| n.name.clone()).unwrap_or_default(),
            nodes,
        }
    }

    fn two_shards() -> Topology {
        Topology {
            epoch: 1,
            shards: vec![
                shard(1, &[(0, 8191)], vec![node("a1", "10.0.0.1", ""), node("a2", "10.0.0.2", "")]),
                shard(2, &[(8192, 16383)], vec![node("b1", "10.0.0.2", ""), node("b2", "10.0.0.1", "")]),
            ],
            moves: vec![],
        }
    }

    #[test]
    fn a_good_topology_passes_and_covers_every_slot() {
        let t = two_shards();
        t.check().unwrap();
        assert!(t.uncovered().is_empty());
        let mut half = t.clone();
        half.shards[1].slots =
            vec![SlotRange { start: 8192, end: 9000 }, SlotRange { start: 9002, end: 16000 }];
        half.check().unwrap();
        assert_eq!(half.uncovered(), [(9001, 9001), (16001, 16383)]);
    }

    #[test]
    fn each_broken_rule_is_named() {
        type Breaks = Box<dyn Fn(&mut Topology)>;
        let cases: Vec<(Breaks, &str)> = vec![
            (Box::new(|t| t.shards[0].id = "xyz".into()), "\"xyz\" is not 40"),
            (Box::new(|t| t.shards[1].id = t.shards[0].id.clone()), "used by two shards"),
            (Box::new(|t| t.shards[1].slots[0].end = 16384), "8192-16384"),
            (Box::new(|t| t.shards[1].slots[0] = SlotRange { start: 9, end: 3 }), "9-3 is empty"),
            (
                Box::new(|t| {
                    t.shards[1].slots =
                        vec![SlotRange { start: 9000, end: 16383 }, SlotRange { start: 8192, end: 8999 }]
                }),
                "starting at 8192 overlaps or precedes",
            ),
            (Box::new(|t| t.shards[1].slots[0].start = 8000), "slot 8000 is owned by two shards"),
            (Box::new(|t| t.shards[0].nodes.clear()), "has no nodes"),
            (Box::new(|t| t.shards[0].primary = "b1".into()), "primary \"b1\" is not one of its nodes"),
            (Box::new(|t| t.shards[1].nodes[0].name = "a1".into()), "node name \"a1\" is used twice"),
            (Box::new(|t| t.shards[1].nodes[1].name = "b 2".into()), "node name \"b 2\""),
            (Box::new(|t| t.shards[1].nodes[1].kv_addr = "nowhere".into()), "kv_addr \"nowhere\""),
            (
                Box::new(|t| t.shards[1].nodes[0].kv_tls_addr = Some("10.0.0.2".into())),
                "node b1: kv_tls_addr \"10.0.0.2\" is not host:port",
            ),
            (
                Box::new(|t| {
                    let (from, to) = (t.shards[1].id.clone(), t.shards[0].id.clone());
                    t.moves.push(SlotMove { slot: 5, from, to, rollback: false })
                }),
                "move of slot 5: its source",
            ),
            (
                Box::new(|t| {
                    t.moves.push(SlotMove {
                        slot: 5,
                        from: t.shards[0].id.clone(),
                        to: "ab".into(),
                        rollback: false,
                    })
                }),
                "shard \"ab\" is not in the topology",
            ),
        ];
        for (break_it, says) in cases {
            let mut t = two_shards();
            break_it(&mut t);
            let e = t.check().expect_err(says).to_string();
            assert!(e.contains(says), "{e:?} does not say {says:?}");
        }
    }

    #[test]
    fn placement_keeps_a_shards_nodes_on_different_hosts_and_zones() {
        let ok = shard(1, &[], vec![node("a", "10.0.0.1", ""), node("b", "10.0.0.2", "")]);
        ok.check_placement().unwrap();
        let same_host = shard(1, &[], vec![node("a", "10.0.0.1", ""), node("b", "10.0.0.1", "")]);
        let e = same_host.check_placement().unwrap_err().to_string();
        assert!(e.contains("nodes a and b are on the same host 10.0.0.1"), "{e}");
        let same_zone = shard(1, &[], vec![node("a", "10.0.0.1", "z1"), node("b", "10.0.0.2", "z1")]);
        let e = same_zone.check_placement().unwrap_err().to_string();
        assert!(e.contains("nodes a and b are on the same zone z1"), "{e}");
        // Zones count only when every node has one.
        let half_zoned = shard(1, &[], vec![node("a", "10.0.0.1", "z1"), node("b", "10.0.0.2", "")]);
        half_zoned.check_placement().unwrap();
        let zoned = shard(1, &[], vec![node("a", "10.0.0.1", "z1"), node("b", "10.0.0.2", "z2")]);
        zoned.check_placement().unwrap();
    }
}
