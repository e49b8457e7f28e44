//! Redis Cluster's commands: `CLUSTER` (SLOTS, SHARDS, NODES, MYID, INFO, KEYSLOT,
//! COUNTKEYSINSLOT, GETKEYSINSLOT, HELP), `ASKING`, `READONLY`, `READWRITE`, answered from the
//! topology etcd holds ([`crate::cluster::view`]) in Redis 7.0's formats; and Mojim's own
//! STAGEKEYS, GETSTAGEDKEYS and UNSTAGEKEYS, which a live slot move uses (`cluster_stage.rs`).
//!
//! Each shard is one node in the answers, its primary, and the node's id is the shard's id.
//! The topology is changed in etcd (`mojim kv cluster ...`), never by a client: the CLUSTER
//! subcommands that change Redis's own cluster state are refused, naming that. A standalone
//! server answers every one of these as Redis does without cluster support.

use super::args::{int, is, Args};
use super::spec::{spec, Group, Spec, NO};
use super::{show, Cx, Session, NOT_INT};
use crate::cluster::slot::key_slot;
use crate::cluster::topology::{Shard, Topology, SLOTS};
use crate::cluster::view::CachedView;
use crate::resp::Reply;
use crate::store::{Mem, StoreError};
use std::fmt::Write as _;

/// The commands this module runs.
pub(super) const SPECS: &[Spec] = &[
    spec("ASKING", 1, &["fast"], NO, Group::Cluster),
    spec("CLUSTER", -2, &[], NO, Group::Cluster),
    spec("READONLY", 1, &["fast", "loading", "stale"], NO, Group::Cluster),
    spec("READWRITE", 1, &["fast", "loading", "stale"], NO, Group::Cluster),
];

/// Redis 7.0's `CLUSTER` subcommands and their arities (the name and the subcommand included).
pub(super) const SUBCOMMANDS: &[(&str, i32)] = &[
    ("addslots", -3),
    ("addslotsrange", -4),
    ("bumpepoch", 2),
    ("count-failure-reports", 3),
    ("countkeysinslot", 3),
    ("delslots", -3),
    ("delslotsrange", -4),
    ("failover", -2),
    ("flushslots", 2),
    ("forget", 3),
    ("getkeysinslot", 4),
    ("getstagedkeys", 4),
    ("help", 2),
    ("info", 2),
    ("keyslot", 3),
    ("links", 2),
    ("meet", -4),
    ("movefence", 3),
    ("myid", 2),
    ("nodes", 2),
    ("replicas", 3),
    ("replicate", 3),
    ("reset", -2),
    ("saveconfig", 2),
    ("set-config-epoch", 3),
    ("setslot", -4),
    ("shards", 2),
    ("slaves", 3),
    ("slots", 2),
    ("stagekeys", -4),
    ("unstagekeys", -4),
];

/// Redis's answer without cluster support.
const DISABLED: &str = "ERR This instance has cluster support disabled";

pub(super) fn run<M: Mem>(
    cx: &mut Cx<M>,
    s: &mut Session,
    spec: &Spec,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let Some(view) = cx.cluster else {
        r.error(DISABLED);
        return Ok(());
    };
    match spec.name {
        "ASKING" => {
            s.asking = true;
            r.ok();
        }
        "READONLY" => {
            s.readonly = true;
            r.ok();
        }
        "READWRITE" => {
            s.readonly = false;
            r.ok();
        }
        "CLUSTER" => cluster(cx, view, s.tls, a, r)?,
        other => unreachable!("{other} is not a cluster command"),
    }
    Ok(())
}

/// `tls`: the client is connected over TLS, and is given the shards' TLS addresses where they
/// have them.
fn cluster<M: Mem>(
    cx: &mut Cx<M>,
    view: &CachedView,
    tls: bool,
    a: &Args,
    r: &mut Reply,
) -> Result<(), StoreError> {
    let t = view.topology();
    let sub = a.get(1);
    if super::cluster_stage::run(cx, view, sub, a, r)? {
        return Ok(());
    }
    match () {
        _ if is(sub, "HELP") => help(r),
        _ if is(sub, "SLOTS") => slots(t, tls, r),
        _ if is(sub, "SHARDS") => shards(cx, view, tls, r),
        _ if is(sub, "NODES") => r.bulk(nodes(view, tls).as_bytes()),
        _ if is(sub, "MYID") => r.bulk(my_id(view).as_bytes()),
        _ if is(sub, "INFO") => r.bulk(info(view).as_bytes()),
        _ if is(sub, "KEYSLOT") => r.int(i64::from(key_slot(a.get(2)))),
        _ if is(sub, "COUNTKEYSINSLOT") => match int(a.get(2)) {
            None => r.error(NOT_INT),
            Some(slot) if !(0..i64::from(SLOTS)).contains(&slot) => r.error("ERR Invalid slot"),
            Some(slot) => {
                let mut n = 0i64;
                keys_in_slot(cx, 0, false, slot as u16, usize::MAX, &mut |_| n += 1)?;
                r.int(n);
            }
        },
        _ if is(sub, "GETKEYSINSLOT") => match (int(a.get(2)), int(a.get(3))) {
            (None, _) | (_, None) => r.error(NOT_INT),
            (Some(slot), Some(max)) if !(0..i64::from(SLOTS)).contains(&slot) || max < 0 => {
                r.error("ERR Invalid slot or number of keys")
            }
            (Some(slot), Some(max)) => {
                let mark = r.deferred();
                let mut n = 0;
                let limit = cx.output_limit;
                let mut over = false;
                keys_in_slot(cx, 0, false, slot as u16, max as usize, &mut |k| {
                    over |= r.buf.len().saturating_add(k.len() + 16) > limit;
                    if !over {
                        r.bulk(k);
                        n += 1;
                    }
                })?;
                if over {
                    return Err(StoreError::OutputLimit(limit));
                }
                r.end_deferred(mark, n);
            }
        },
        _ => r.error(&format!(
            "ERR CLUSTER {} is not served here: the topology lives in etcd, change it with `mojim kv cluster` \
             (create, add-shard, remove-shard, move-slots, rebalance)",
            show(sub, 64).to_ascii_uppercase()
        )),
    }
    Ok(())
}

/// Calls `f` with each key of database `db` in `slot` (live ones, and expired ones too with
/// `expired`), up to `max` of them; database 0 is selected after. It walks the whole keyspace: the store keeps no index by slot (a key's slot
/// is computed as it is met), so COUNTKEYSINSLOT and GETKEYSINSLOT cost a scan of every key, as
/// KEYS does.
pub(super) fn keys_in_slot<M: Mem>(
    cx: &mut Cx<M>,
    db: usize,
    expired: bool,
    slot: u16,
    max: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<(), StoreError> {
    cx.store.select(db);
    let r = each_in_slot(cx, expired, slot, max, f);
    cx.store.select(0);
    r
}

fn each_in_slot<M: Mem>(
    cx: &mut Cx<M>,
    expired: bool,
    slot: u16,
    max: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<(), StoreError> {
    let buckets = cx.store.geometry().buckets;
    let now = cx.now_ms;
    let (mut b, mut n) = (0, 0);
    let mut key = Vec::new();
    while b < buckets && n < max {
        b = cx.store.next_used_bucket(b, buckets)?;
        if b >= buckets {
            break;
        }
        cx.store.bucket_entries(b, |st, e, h| {
            if n >= max || (!expired && h.expired(now)) || !st.in_selected(e, h)? {
                return Ok(());
            }
            st.key_into(e, h, &mut key)?;
            if key_slot(&key) == slot {
                f(&key);
                n += 1;
            }
            Ok(())
        })?;
        b += 1;
    }
    Ok(())
}

/// The shard this node serves, or (a node that serves none now) the one it holds a copy of.
fn my_shard(view: &CachedView) -> Option<&Shard> {
    view.my_shard()
        .or_else(|| view.topology().shards.iter().find(|s| s.nodes.iter().any(|n| n.name == view.me())))
}

/// `CLUSTER MYID`: the shard's id (40 zeros for a node in no shard).
fn my_id(view: &CachedView) -> String {
    my_shard(view).map_or_else(|| "0".repeat(40), |s| s.id.clone())
}

/// A shard's primary's host and port, `("?", 0)` when it names none: its `kv_tls_addr` for a
/// client over TLS (`tls`) when it has one, as Redis 7.0 with `tls-cluster yes` gives TLS
/// clients its TLS port, else its `kv_addr`.
fn endpoint(s: &Shard, tls: bool) -> (String, u16) {
    s.primary_node()
        .and_then(|n| crate::split_host_port(n.client_addr(tls)))
        .unwrap_or_else(|| ("?".into(), 0))
}

/// Every owned range, sorted, adjacent ranges of one shard joined (as Redis walks its slots):
/// (start, end, shard).
fn ranges(t: &Topology) -> Vec<(u16, u16, &Shard)> {
    let mut v: Vec<(u16, u16, &Shard)> =
        t.shards.iter().flat_map(|s| s.slots.iter().map(move |r| (r.start, r.end, s))).collect();
    v.sort_by_key(|x| x.0);
    let mut out: Vec<(u16, u16, &Shard)> = Vec::with_capacity(v.len());
    for (start, end, s) in v {
        match out.last_mut() {
            Some(last) if last.2.id == s.id && u32::from(last.1) + 1 == u32::from(start) => last.1 = end,
            _ => out.push((start, end, s)),
        }
    }
    out
}

/// `CLUSTER SLOTS`: per range, its start, end and primary (ip, port, id, no more endpoints).
fn slots(t: &Topology, tls: bool, r: &mut Reply) {
    let rs = ranges(t);
    r.array(rs.len());
    for (start, end, s) in rs {
        r.array(3);
        r.int(i64::from(start));
        r.int(i64::from(end));
        let (host, port) = endpoint(s, tls);
        r.array(4);
        r.bulk(host.as_bytes());
        r.int(i64::from(port));
        r.bulk(s.id.as_bytes());
        r.map(0);
    }
}

/// `CLUSTER SHARDS`: per shard, its ranges and its node.
fn shards<M: Mem>(cx: &Cx<M>, view: &CachedView, tls: bool, r: &mut Reply) {
    let t = view.topology();
    let mine = view.my_shard().map(|s| s.id.as_str());
    r.array(t.shards.len());
    for s in &t.shards {
        r.map(2);
        r.bulk(b"slots");
        let mut own: Vec<(u16, u16)> =
            ranges(t).into_iter().filter(|x| x.2.id == s.id).map(|x| (x.0, x.1)).collect();
        own.sort_unstable();
        r.array(own.len() * 2);
        for (start, end) in own {
            r.int(i64::from(start));
            r.int(i64::from(end));
        }
        r.bulk(b"nodes");
        r.array(1);
        let (host, port) = endpoint(s, tls);
        r.map(7);
        r.bulk(b"id");
        r.bulk(s.id.as_bytes());
        r.bulk(b"port");
        r.int(i64::from(port));
        r.bulk(b"ip");
        r.bulk(host.as_bytes());
        r.bulk(b"endpoint");
        r.bulk(host.as_bytes());
        r.bulk(b"role");
        r.bulk(b"master");
        r.bulk(b"replication-offset");
        // This shard's groups acknowledged by its mirror; the others' are not known here.
        let offset = if mine == Some(s.id.as_str()) { cx.host.replication().acked_seq as i64 } else { 0 };
        r.int(offset);
        r.bulk(b"health");
        r.bulk(b"online");
    }
}

/// `CLUSTER NODES`: a line per shard, `<id> <ip:port@cport> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot> ...`, and on this node's line the slots
/// being moved from it (`[slot->-target]`) or to it (`[slot-<-source]`). There is no cluster
/// bus: its port is given as 0.
fn nodes(view: &CachedView, tls: bool) -> String {
    let t = view.topology();
    let mine = view.my_shard().map(|s| s.id.as_str());
    let all = ranges(t);
    let mut out = String::new();
    for s in &t.shards {
        let (host, port) = endpoint(s, tls);
        let myself = mine == Some(s.id.as_str());
        let flags = if myself { "myself,master" } else { "master" };
        let _ = write!(out, "{} {host}:{port}@0 {flags} - 0 0 {} connected", s.id, s.config_epoch);
        for (start, end, _) in all.iter().filter(|x| x.2.id == s.id) {
            if start == end {
                let _ = write!(out, " {start}");
            } else {
                let _ = write!(out, " {start}-{end}");
            }
        }
        if myself {
            for m in &t.moves {
                if m.from == s.id {
                    let _ = write!(out, " [{}->-{}]", m.slot, m.to);
                } else if m.to == s.id {
                    let _ = write!(out, " [{}-<-{}]", m.slot, m.from);
                }
            }
        }
        out.push('\n');
    }
    out
}

/// `CLUSTER INFO`.
fn info(view: &CachedView) -> String {
    let t = view.topology();
    let assigned: u32 = t.shards.iter().flat_map(|s| &s.slots).map(|r| u32::from(r.end - r.start) + 1).sum();
    let size = t.shards.iter().filter(|s| !s.slots.is_empty()).count();
    let my_epoch = my_shard(view).map_or(0, |s| s.config_epoch);
    let state = if assigned == u32::from(SLOTS) { "ok" } else { "fail" };
    format!(
        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\n\
         cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{size}\r\n\
         cluster_current_epoch:{}\r\ncluster_my_epoch:{my_epoch}\r\ncluster_stats_messages_sent:0\r\n\
         cluster_stats_messages_received:0\r\ntotal_cluster_links_buffer_limit_exceeded:0\r\n",
        t.shards.len(),
        t.epoch,
    )
}

fn help(r: &mut Reply) {
    let lines = [
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "STAGEKEYS <fence> <key> [<key> ...]",
        "    (Mojim) Take keys of slots moving away into the move's stage; return their DUMP and",
        "    PEXPIRETIME. Used by `mojim kv cluster move-slots`.",
        "GETSTAGEDKEYS <slot> <count>",
        "    (Mojim) Return the names of staged keys in a slot.",
        "UNSTAGEKEYS <fence> <key> [<key> ...]",
        "    (Mojim) Drop staged keys once the target holds them.",
        "MOVEFENCE <fence>",
        "    (Mojim) Refuse a slot-move run older than the latest seen here; record a newer one.",
        "The topology lives in etcd: `mojim kv cluster` changes it (the subcommands that change it",
        "    in Redis are refused here).",
        "HELP",
        "    Prints this help.",
    ];
    r.help(&lines);
}
