//! Where a command's keys are served: here, or elsewhere (MOVED, ASK), or nowhere (CROSSSLOT,
//! TRYAGAIN, CLUSTERDOWN). Sans I/O: the topology, this node's name, the keys' slots, whether
//! the keys are here and the client's ASKING flag go in, a [`Route`] comes out. Redis 7.0's
//! `getNodeByQuery`, with etcd's topology in place of the gossip's.

use super::slot_table::SlotTable;
use super::topology::Topology;

/// What becomes of a command with keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Run it here.
    Serve,
    /// Another shard owns the slot: `-MOVED <slot> <addr>`.
    Moved {
        /// The keys' slot.
        slot: u16,
        /// The owner's primary's `kv_addr`.
        addr: String,
    },
    /// The slot is moving from this shard and the keys are not here (moved already, or never
    /// written): `-ASK <slot> <addr>`.
    Ask {
        /// The keys' slot.
        slot: u16,
        /// The target's primary's `kv_addr`.
        addr: String,
    },
    /// The keys are in different slots.
    CrossSlot,
    /// Several keys of a slot being moved, some here and some not, or a key in flight between
    /// the two shards: the client tries later.
    TryAgain,
    /// No shard owns the slot (or its owner names no node to reach it by).
    Down,
}

impl Route {
    /// The error reply, as Redis 7.0 writes it (without the leading `-`); `None` for
    /// [`Route::Serve`].
    pub fn error(&self) -> Option<String> {
        Some(match self {
            Route::Serve => return None,
            Route::Moved { slot, addr } => format!("MOVED {slot} {addr}"),
            Route::Ask { slot, addr } => format!("ASK {slot} {addr}"),
            Route::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".into(),
            Route::TryAgain => "TRYAGAIN Multiple keys request during rehashing of slot".into(),
            Route::Down => "CLUSTERDOWN Hash slot not served".into(),
        })
    }
}

/// The slot of a command's keys, gathered a key at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Slots {
    /// No key yet: the command runs anywhere.
    #[default]
    None,
    /// Every key so far is in this slot.
    One(u16),
    /// Keys of different slots.
    Cross,
}

impl Slots {
    /// Adds a key of slot `slot`.
    pub fn add(&mut self, slot: u16) {
        *self = match *self {
            Slots::None => Slots::One(slot),
            Slots::One(s) if s == slot => Slots::One(s),
            Slots::One(_) | Slots::Cross => Slots::Cross,
        };
    }
}

/// How many of the command's keys this shard holds (asked only of a slot being moved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Presence {
    /// Keys found here.
    pub existing: usize,
    /// Keys not found here.
    pub missing: usize,
    /// Of the missing keys, those in flight to the slot's target (staged by the move on this
    /// shard, not on the target yet).
    pub staged: usize,
    /// The command names more than one distinct key (a key named twice counts once, as in
    /// Redis).
    pub several: bool,
}

/// Where a command whose keys are `slots` is served, on the node named `me`; `table` is
/// `t`'s slot table. A redirect names the shard's `kv_tls_addr` when `tls` (the client is
/// connected over TLS) and the shard has one, its `kv_addr` otherwise. `asking`: the
/// client sent `ASKING` just before (or in its transaction). `presence` is called only when the
/// slot is moving to or from this shard, to count which keys are here; `shard_channels`: the
/// keys are shard channels (SPUBLISH, SSUBSCRIBE), served by the slot's owner until the move
/// ends, whatever keys are where.
#[allow(clippy::too_many_arguments)]
pub fn route(
    t: &Topology,
    table: &SlotTable,
    me: &str,
    tls: bool,
    slots: Slots,
    asking: bool,
    shard_channels: bool,
    presence: impl FnOnce() -> Presence,
) -> Route {
    let slot = match slots {
        Slots::None => return Route::Serve,
        Slots::Cross => return Route::CrossSlot,
        Slots::One(slot) => slot,
    };
    let Some(owner) = table.owner(t, slot) else { return Route::Down };
    let mine = owner.primary == me;
    let moving = t.moving(slot);
    let migrating = moving.filter(|m| mine && m.from == owner.id);
    let importing = moving.filter(|m| t.shard(&m.to).is_some_and(|s| s.primary == me) && !mine);
    let p = if (migrating.is_some() || importing.is_some()) && !shard_channels {
        presence()
    } else {
        Presence::default()
    };
    let addr_of =
        |id: &str| t.shard(id).and_then(|s| s.primary_node()).map(|n| n.client_addr(tls).to_owned());
    if let Some(m) = migrating {
        // A key in flight is served by neither side until the target holds it.
        if p.staged > 0 {
            return Route::TryAgain;
        }
        if p.missing > 0 {
            if p.existing > 0 {
                return Route::TryAgain;
            }
            return match addr_of(&m.to) {
                Some(addr) => Route::Ask { slot, addr },
                None => Route::Down,
            };
        }
    }
    if importing.is_some() && asking {
        return if p.several && p.missing > 0 { Route::TryAgain } else { Route::Serve };
    }
    if mine {
        return Route::Serve;
    }
    match owner.primary_node() {
        Some(n) => Route::Moved { slot, addr: n.client_addr(tls).to_owned() },
        None => Route::Down,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::topology::{Shard, ShardNode, SlotMove, SlotRange};

    fn shard(id: &str, primary: &str, addr: &str, ranges: &[(u16, u16)]) -> Shard {
        Shard {
            id: id.into(),
            config_epoch: 1,
            slots: ranges.iter().map(|&(start, end)| SlotRange { start, end }).collect(),
            nodes: vec![ShardNode {
                name: primary.into(),
                kv_addr: addr.into(),
                serve_addr: String::new(),
                zone: String::new(),
                kv_tls_addr: None,
            }],
            primary: primary.into(),
        }
    }

    /// Three shards: a (0-5460, node n1), b (5461-10922, n2), c (10923-16382, n3); 16383 unowned.
    fn three() -> Topology {
        Topology {
            epoch: 3,
            shards: vec![
                shard("a", "n1", "10.0.0.1:6379", &[(0, 5460)]),
                shard("b", "n2", "10.0.0.2:6379", &[(5461, 10922)]),
                shard("c", "n3", "10.0.0.3:6379", &[(10923, 16382)]),
            ],
            moves: vec![SlotMove { slot: 100, from: "a".into(), to: "b".into(), rollback: false }],
        }
    }

    /// The route for a client in the clear.
    fn plain(
        t: &Topology,
        me: &str,
        slots: Slots,
        asking: bool,
        shard_channels: bool,
        presence: impl FnOnce() -> Presence,
    ) -> Route {
        route(t, &SlotTable::new(t), me, false, slots, asking, shard_channels, presence)
    }

    fn one(slot: u16) -> Slots {
        Slots::One(slot)
    }

    fn here(existing: usize, missing: usize) -> impl FnOnce() -> Presence {
        move || Presence { existing, missing, staged: 0, several: existing + missing > 1 }
    }

    fn never() -> Presence {
        panic!("presence asked of a slot that is not moving")
    }

    #[test]
    fn keyless_runs_anywhere_and_cross_slot_nowhere() {
        let t = three();
        assert_eq!(plain(&t, "n1", Slots::None, false, false, never), Route::Serve);
        assert_eq!(plain(&t, "n9", Slots::None, false, false, never), Route::Serve);
        assert_eq!(plain(&t, "n1", Slots::Cross, false, false, never), Route::CrossSlot);
    }

    #[test]
    fn own_slots_are_served_others_moved_unowned_down() {
        let t = three();
        assert_eq!(plain(&t, "n1", one(0), false, false, never), Route::Serve);
        assert_eq!(plain(&t, "n1", one(5460), false, false, never), Route::Serve);
        assert_eq!(
            plain(&t, "n1", one(12182), false, false, never),
            Route::Moved { slot: 12182, addr: "10.0.0.3:6379".into() }
        );
        assert_eq!(plain(&t, "n1", one(16383), false, false, never), Route::Down);
        // A node that is no shard's primary (a mirror, or one not in the topology yet) serves
        // nothing: everything is MOVED to its owner.
        assert_eq!(
            plain(&t, "n9", one(0), false, false, never),
            Route::Moved { slot: 0, addr: "10.0.0.1:6379".into() }
        );
        // ASKING changes nothing for a slot that is not moving.
        assert_eq!(
            plain(&t, "n1", one(6000), true, false, never),
            Route::Moved { slot: 6000, addr: "10.0.0.2:6379".into() }
        );
    }

    #[test]
    fn a_slot_moving_away_is_served_while_its_keys_are_here() {
        let t = three();
        // Every key here: served by the source.
        assert_eq!(plain(&t, "n1", one(100), false, false, here(1, 0)), Route::Serve);
        assert_eq!(plain(&t, "n1", one(100), false, false, here(3, 0)), Route::Serve);
        // None here: ASK the target.
        let ask = Route::Ask { slot: 100, addr: "10.0.0.2:6379".into() };
        assert_eq!(plain(&t, "n1", one(100), false, false, here(0, 1)), ask);
        assert_eq!(plain(&t, "n1", one(100), false, false, here(0, 2)), ask);
        // Some here, some not: neither side has them all.
        assert_eq!(plain(&t, "n1", one(100), false, false, here(1, 1)), Route::TryAgain);
        assert_eq!(ask.error().unwrap(), "ASK 100 10.0.0.2:6379");
    }

    #[test]
    fn a_key_in_flight_is_served_by_neither_side() {
        let t = three();
        let in_flight =
            |existing, missing, staged| move || Presence { existing, missing, staged, several: false };
        assert_eq!(plain(&t, "n1", one(100), false, false, in_flight(0, 1, 1)), Route::TryAgain);
        assert_eq!(plain(&t, "n1", one(100), true, false, in_flight(1, 1, 1)), Route::TryAgain);
        // The target serves what it holds after ASKING, as before: the key reaches it only
        // once the source no longer stages it.
        assert_eq!(plain(&t, "n2", one(100), true, false, in_flight(1, 0, 0)), Route::Serve);
    }

    #[test]
    fn a_slot_moving_here_is_served_only_after_asking() {
        let t = three();
        let moved = Route::Moved { slot: 100, addr: "10.0.0.1:6379".into() };
        assert_eq!(plain(&t, "n2", one(100), false, false, here(0, 1)), moved);
        assert_eq!(plain(&t, "n2", one(100), true, false, here(0, 1)), Route::Serve);
        assert_eq!(plain(&t, "n2", one(100), true, false, here(1, 0)), Route::Serve);
        assert_eq!(plain(&t, "n2", one(100), true, false, here(2, 0)), Route::Serve);
        assert_eq!(plain(&t, "n2", one(100), true, false, here(1, 1)), Route::TryAgain);
        // A third shard knows nothing of the move: MOVED to the owner.
        assert_eq!(plain(&t, "n3", one(100), true, false, never), moved);
    }

    #[test]
    fn a_tls_client_is_sent_to_the_tls_address_where_there_is_one() {
        let mut t = three();
        t.shards[2].nodes[0].kv_tls_addr = Some("10.0.0.3:6390".into());
        t.shards[1].nodes[0].kv_tls_addr = Some("10.0.0.2:6390".into());
        let table = SlotTable::new(&t);
        let tls = |me, slot, p: fn() -> Presence| route(&t, &table, me, true, one(slot), false, false, p);
        assert_eq!(tls("n1", 12182, never), Route::Moved { slot: 12182, addr: "10.0.0.3:6390".into() });
        assert_eq!(
            tls("n1", 100, || Presence { existing: 0, missing: 1, staged: 0, several: false }),
            Route::Ask { slot: 100, addr: "10.0.0.2:6390".into() }
        );
        // A shard without a TLS address: its kv_addr, the only one there is.
        assert_eq!(tls("n2", 0, never), Route::Moved { slot: 0, addr: "10.0.0.1:6379".into() });
        // A client in the clear is never sent to the TLS port.
        assert_eq!(
            plain(&t, "n1", one(12182), false, false, never),
            Route::Moved { slot: 12182, addr: "10.0.0.3:6379".into() }
        );
    }

    #[test]
    fn shard_channels_stay_with_the_owner_during_a_move() {
        let t = three();
        assert_eq!(plain(&t, "n1", one(100), false, true, never), Route::Serve);
        assert_eq!(
            plain(&t, "n2", one(100), false, true, never),
            Route::Moved { slot: 100, addr: "10.0.0.1:6379".into() }
        );
    }

    #[test]
    fn errors_read_as_redis_writes_them() {
        assert_eq!(Route::Serve.error(), None);
        assert_eq!(
            Route::Moved { slot: 3999, addr: "127.0.0.1:6381".into() }.error().unwrap(),
            "MOVED 3999 127.0.0.1:6381"
        );
        assert_eq!(
            Route::CrossSlot.error().unwrap(),
            "CROSSSLOT Keys in request don't hash to the same slot"
        );
        assert_eq!(
            Route::TryAgain.error().unwrap(),
            "TRYAGAIN Multiple keys request during rehashing of slot"
        );
        assert_eq!(Route::Down.error().unwrap(), "CLUSTERDOWN Hash slot not served");
    }

    #[test]
    fn slots_gather_keys() {
        let mut s = Slots::None;
        s.add(7);
        assert_eq!(s, one(7));
        s.add(7);
        assert_eq!(s, one(7));
        s.add(8);
        assert_eq!(s, Slots::Cross);
        s.add(7);
        assert_eq!(s, Slots::Cross);
    }

    #[test]
    fn a_key_named_twice_is_one_key() {
        // `ASKING` then `RPOPLPUSH k k` on the target, k not there yet: served (Redis counts
        // a repeated key once), where two different keys missing would be TRYAGAIN.
        let t = three();
        let twice = || Presence { existing: 0, missing: 2, staged: 0, several: false };
        assert_eq!(plain(&t, "n2", one(100), true, false, twice), Route::Serve);
    }
}
