//! Which shard owns each slot, as a table of 16,384 entries built once per topology, so that
//! the redirect before each command finds a slot's owner in one load instead of scanning every
//! shard's ranges.

use super::topology::{Shard, Topology, SLOTS};

/// An entry for a slot no shard owns.
const NONE: u16 = u16::MAX;

/// Each slot's owner, as its index in [`Topology::shards`] ([`NONE`] for an unowned slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotTable {
    owner: Box<[u16]>,
}

impl SlotTable {
    /// The table of `t`. When two shards claim a slot (a topology [`Topology::check`] would
    /// refuse) the first one wins, as [`Topology::owner`] finds it.
    pub fn new(t: &Topology) -> SlotTable {
        let mut owner = vec![NONE; usize::from(SLOTS)].into_boxed_slice();
        for (i, s) in t.shards.iter().enumerate().rev() {
            if s.slots.is_empty() {
                continue;
            }
            // Topology::check allows at most 16,384 shards, and every topology a server holds
            // passed it.
            let index = u16::try_from(i).ok().filter(|&x| x != NONE);
            let index =
                index.unwrap_or_else(|| panic!("shard {} at index {i}: more than 65534 shards", s.id));
            for r in &s.slots {
                for slot in r.start..=r.end.min(SLOTS - 1) {
                    owner[usize::from(slot)] = index;
                }
            }
        }
        SlotTable { owner }
    }

    /// The shard of `t` (the topology the table was built from) that owns `slot`, if any.
    pub fn owner<'t>(&self, t: &'t Topology, slot: u16) -> Option<&'t Shard> {
        match self.owner.get(usize::from(slot)) {
            Some(&i) if i != NONE => t.shards.get(usize::from(i)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::{ShardNode, SlotRange};
    use proptest::prelude::*;

    /// A topology of `cuts.len() + 1` contiguous pieces of the slots, each given to one of
    /// `shards` shards or to none, so that shards own several ranges and some slots no one.
    fn topology(shards: usize, mut cuts: Vec<u16>, owners: Vec<usize>) -> Topology {
        cuts.sort_unstable();
        cuts.dedup();
        let mut t = Topology::default();
        for i in 0..shards {
            t.shards.push(Shard {
                id: format!("{i:040x}"),
                config_epoch: 1,
                slots: Vec::new(),
                nodes: vec![ShardNode {
                    name: format!("n{i}"),
                    kv_addr: format!("10.0.0.{i}:6379"),
                    serve_addr: format!("10.0.0.{i}:7070"),
                    zone: String::new(),
                    kv_tls_addr: None,
                }],
                primary: format!("n{i}"),
            });
        }
        let mut start = 0u16;
        for (k, end) in cuts.into_iter().filter(|&c| c < SLOTS - 1).chain([SLOTS - 1]).enumerate() {
            if let Some(&o) = owners.get(k).filter(|&&o| o < shards) {
                t.shards[o].slots.push(SlotRange { start, end });
            }
            start = end + 1;
        }
        t
    }

    proptest! {
        #[test]
        fn the_table_agrees_with_the_scan(
            shards in 1usize..12,
            cuts in proptest::collection::vec(0u16..SLOTS, 0..40),
            owners in proptest::collection::vec(0usize..14, 0..41),
        ) {
            let t = topology(shards, cuts, owners);
            t.check().expect("the generated topology is valid");
            let table = SlotTable::new(&t);
            for slot in 0..SLOTS {
                prop_assert_eq!(
                    table.owner(&t, slot).map(|s| &s.id),
                    t.owner(slot).map(|s| &s.id),
                    "slot {}", slot
                );
            }
        }
    }

    #[test]
    fn an_empty_topology_owns_nothing() {
        let t = Topology::default();
        let table = SlotTable::new(&t);
        assert!((0..SLOTS).all(|s| table.owner(&t, s).is_none()));
    }
}
