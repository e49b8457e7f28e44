//! Linearizability across the shards of a `mojim kv` Redis Cluster under faults, checked with
//! Porcupine per key.
//!
//! Clients (`common::kv_workload`, routed by `CLUSTER SLOTS`, following `MOVED` and `ASK`, and
//! reading the slots again after a dead connection, never restarted) run commands on keys of
//! both shards and of the slots being moved ([`routing`]), while faults hit the cluster; an
//! operation whose reply never came is recorded with an unknown outcome. Every shard has `[kv] read_barrier`.
//! Each shard is a primary `p<i>`, its named mirror `m<i>` (feeding a backup) and a standby
//! `mojim kv --cluster --standby` on `m<i>`, which takes the shard over through etcd
//! (`common::kv_cluster::KvShards`).
//!
//! On loopback: kill -9 of shard 0's primary (take-over by its standby); `move-slots` from
//! shard 1 killed -9 mid-move, then resumed; a move from shard 1 during its fail-over (the
//! move started, shard 1's primary killed -9, the move resumed once the standby serves); etcd
//! killed -9 and restarted on its data while the shards serve on their leases, then a move
//! whose epoch every server must reach through its watch. In network namespaces (root): shard
//! 0's primary cut off from its mirror and from etcd, its lease lapsing, the standby taking
//! over, the partition healed. At the end the whole history goes to Porcupine, and every
//! acknowledged key is in exactly one shard, the owner of its slot.

mod common;

use common::edit_kv;
use common::kv_cluster::{KvShards, Mirrors, Network, Setup};
use common::kv_workload::{parse_cluster_slots, progress, progress_until, write_on, Conn, Routing, Workload};
use common::porcupine::{build_checker, go, Kind, Op};
use common::{seed, TempDir, WAIT};
use mojim::config::ConfigFile;
use mojim_kv::cluster::slot::key_slot;
use mojim_kv::cluster::topology::Topology;
use mojim_kv::resp::Value;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Operations answered between two faults (and after the last).
const PHASE_OPS: u64 = 1000;
/// Slots moved from shard 1 to shard 0 by the move killed mid-way, then back after etcd's
/// restart; and those moved during shard 1's fail-over.
const FIRST_MOVE: (u16, u16) = (8192, 8199);
const SECOND_MOVE: (u16, u16) = (8200, 8207);
/// Keys written into each moved slot before the clients start, so that a move takes long
/// enough to be cut short.
const FILLER_PER_SLOT: usize = 150;
/// How long etcd stays down before the shards must still answer.
const ETCD_DOWN: Duration = Duration::from_secs(2);

/// Every shard with the read barrier, and a lease long enough that the shards serve through
/// an etcd restart (validity 7 s after the last renewal).
fn config(f: &mut ConfigFile) {
    edit_kv(f, |k| k.read_barrier = true);
    f.cluster.lease_ttl_ms = 8000;
    f.cluster.lease_renew_ms = 300;
    f.cluster.lease_margin_ms = 1000;
}

/// Shards that fail over (standbys, backups) on `network`, configured by [`config`].
fn failover(network: Network) -> Setup<'static> {
    Setup { network, mirrors: Mirrors::Failover, certs: None, edit: &config }
}

/// A hash tag (`t<n>`, the first such) whose slot is in `lo..=hi`.
fn tag_in(lo: u16, hi: u16, skip: &BTreeSet<String>) -> String {
    (0..)
        .map(|n| format!("t{n}"))
        .find(|t| (lo..=hi).contains(&key_slot(t.as_bytes())) && !skip.contains(t))
        .expect("some tag hashes into any range")
}

/// The workload's keys: strings, lists and sorted sets in shard 0's own slots, in shard 1's,
/// and in the slots of each move. A pop of a collection's last element deletes it: in a moving
/// slot, on the source while the tool moves it, the key must stay one key (the source answers
/// TRYAGAIN while the key is in flight, docs/KV.md "Moving slots").
fn routing() -> Routing {
    let mut used = BTreeSet::new();
    let mut pick = |ranges: &[(u16, u16)]| -> Vec<String> {
        let mut tags: Vec<String> = ranges
            .iter()
            .map(|&(lo, hi)| {
                let t = tag_in(lo, hi, &used);
                used.insert(t.clone());
                t
            })
            .collect();
        tags.sort_by_key(|t| key_slot(t.as_bytes()));
        tags
    };
    let tags = pick(&[(100, 8191), (9000, 16383), FIRST_MOVE, SECOND_MOVE]);
    let collections = pick(&[(100, 8191), (9000, 16383), FIRST_MOVE, SECOND_MOVE]);
    Routing::Cluster { tags, collections }
}

/// Writes `FILLER_PER_SLOT` strings into each slot of `lo..=hi` on `addr` (one `MSET` per
/// slot, the keys sharing a hash tag); returns their names.
fn fill(addr: &str, (lo, hi): (u16, u16)) -> Vec<String> {
    let mut c = Conn::open(addr).expect("connect to shard 1's primary");
    let mut names = Vec::new();
    for slot in lo..=hi {
        let tag = (0..).map(|n| format!("f{n}")).find(|t| key_slot(t.as_bytes()) == slot).expect("a tag");
        let keys: Vec<String> = (0..FILLER_PER_SLOT).map(|j| format!("{{{tag}}}:{j}")).collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in &keys {
            args.extend([k.as_bytes(), b"filler".as_slice()]);
        }
        let reply = c.call(&args).expect("MSET answered");
        assert_eq!(reply, Value::Simple(b"OK".to_vec()), "MSET into slot {slot}");
        names.extend(keys);
    }
    names
}

/// `CLUSTER SLOTS` of the node at `addr`.
fn slots_of(addr: &str) -> Vec<(u16, u16, String)> {
    let mut c = Conn::open(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let reply = c.call(&[b"CLUSTER", b"SLOTS"]).expect("CLUSTER SLOTS answered");
    parse_cluster_slots(&reply).unwrap_or_else(|| panic!("CLUSTER SLOTS of {addr}: {reply:?}"))
}

/// Which shard of `t` owns `slot`, and whether a move of it is recorded.
fn owner(t: &Topology, slot: u16) -> (usize, bool) {
    let shard = t
        .shards
        .iter()
        .position(|s| s.slots.iter().any(|r| (r.start..=r.end).contains(&slot)))
        .unwrap_or_else(|| panic!("no shard owns slot {slot}: {t:?}"));
    (shard, t.moves.iter().any(|m| m.slot == slot))
}

/// Requires every slot of `range` to be shard `shard`'s in etcd, with no move left.
fn assert_owned(shards: &KvShards, (lo, hi): (u16, u16), shard: usize) {
    let (t, _) = shards.topology();
    for slot in lo..=hi {
        assert_eq!(owner(&t, slot), (shard, false), "slot {slot}: {t:?}");
    }
}

/// Runs `move-slots <args>` to its end, again while it fails (a server still catching up
/// with a take-over), within `WAIT`.
fn move_to_end(shards: &KvShards, args: &[&str]) -> String {
    let t0 = Instant::now();
    loop {
        let (ok, err) = shards.move_slots(args).finish();
        if ok {
            return err;
        }
        assert!(t0.elapsed() < WAIT, "move-slots {args:?} kept failing: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kills shard `i`'s primary with SIGKILL and waits for its standby to serve and the topology
/// to name it.
fn fail_over(shards: &mut KvShards, i: usize) -> Duration {
    let t0 = Instant::now();
    shards.primaries[i].take().expect("the primary runs").kill();
    shards.standbys[i].serving(2 * WAIT);
    let took = t0.elapsed();
    let (t, _) = shards.topology();
    assert_eq!(t.shards[i].primary, format!("m{i}"), "the standby took shard {i}: {t:?}");
    took
}

/// The end of a run: the history's check (the workload's and `extra` operations), then every
/// key's place: the workload's keys, and `filler`, strings written before it; `primaries` are
/// the shards' current ones.
fn check_end(
    w: Workload,
    checker: &std::path::Path,
    faults: &str,
    extra: Vec<Op>,
    filler: &[String],
    primaries: &[String],
) {
    let keys = w.sh.all_keys();
    let ops = w.check_with(checker, faults, extra, true);
    let written: BTreeSet<&str> = ops
        .iter()
        .filter(|o| o.ret.is_some() && matches!(o.kind, Kind::Set | Kind::Append))
        .map(|o: &Op| o.key.as_str())
        .collect();
    let slots = slots_of(&primaries[0]);
    let mut conns: Vec<Conn> = primaries.iter().map(|a| Conn::open(a).expect("connect")).collect();
    let mut checked = 0;
    let keys = keys
        .iter()
        .map(|(t, k)| (*t == 'k' && written.contains(k.as_str()), k))
        .chain(filler.iter().map(|k| (true, k)));
    for (acknowledged, key) in keys {
        let holders: Vec<usize> = (0..conns.len())
            .filter(|&s| {
                conns[s].call(&[b"EXISTS", key.as_bytes()]).expect("EXISTS answered") == Value::Int(1)
            })
            .collect();
        let slot = key_slot(key.as_bytes());
        let (_, _, addr) =
            slots.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).expect("every slot has an owner");
        let owner = primaries.iter().position(|p| p == addr).expect("the owner is a current primary");
        assert!(
            holders.len() <= 1 && holders.iter().all(|&h| h == owner),
            "{key} (slot {slot}) is on shards {holders:?}, owner {owner}"
        );
        if acknowledged {
            assert_eq!(holders, [owner], "the acknowledged {key} (slot {slot}) is on shards {holders:?}");
        }
        checked += 1;
    }
    println!(
        "{checked} keys each on at most one shard, its slot's owner ({} acknowledged strings)",
        written.len() + filler.len()
    );
}

fn checker(tools: &TempDir) -> Option<PathBuf> {
    let go = go()?;
    Some(build_checker(&go, tools.path()))
}

/// Kill -9 and take-over, a move killed and resumed, a move during its source's fail-over, and
/// an etcd restart, one after another under one workload, on loopback.
#[test]
fn cluster_histories_under_failover_moves_and_etcd_restart_are_linearizable() {
    let tools = TempDir::new("kv-cluster-lin-tools");
    let Some(checker) = checker(&tools) else { return };
    let Some(mut shards) = KvShards::start("kv-cluster-lin", 2, failover(Network::Loopback)) else {
        return;
    };
    let seed = seed("kv_cluster_linearizable");
    let mut filler = fill(&shards.kv_addrs[1], FIRST_MOVE);
    filler.extend(fill(&shards.kv_addrs[1], SECOND_MOVE));
    let w = Workload::start_routed(seed, vec![shards.kv_addrs[0].clone()], routing());
    progress(&w.sh, PHASE_OPS);

    // 1. Shard 0's primary killed -9: its standby takes the shard over through etcd.
    let took0 = fail_over(&mut shards, 0);
    progress(&w.sh, PHASE_OPS);

    // 2. A move from shard 1 to shard 0 killed -9 once keys moved; clients meet ASK meanwhile;
    //    then resumed.
    let (lo, hi) = (FIRST_MOVE.0.to_string(), FIRST_MOVE.1.to_string());
    let first = format!("{lo}-{hi}");
    let mut m = shards.move_slots(&["--from", "p1", "--to", "m0", "--slots", &first]);
    m.wait_keys_moved();
    m.kill();
    let (t, _) = shards.topology();
    assert!(t.moves.iter().any(|m| m.slot == FIRST_MOVE.1), "the killed move left its moves recorded: {t:?}");
    progress(&w.sh, PHASE_OPS / 2);
    move_to_end(&shards, &[]);
    assert_owned(&shards, FIRST_MOVE, 0);
    progress(&w.sh, PHASE_OPS / 2);

    // 3. A move from shard 1 during shard 1's fail-over: started, shard 1's primary killed -9
    //    once keys moved, resumed when the standby serves.
    let second = format!("{}-{}", SECOND_MOVE.0, SECOND_MOVE.1);
    let mut m = shards.move_slots(&["--from", "p1", "--to", "m0", "--slots", &second]);
    m.wait_keys_moved();
    let took1 = fail_over(&mut shards, 1);
    let (first_ok, said) = m.finish();
    move_to_end(&shards, &[]);
    assert_owned(&shards, SECOND_MOVE, 0);
    progress(&w.sh, PHASE_OPS);

    // 4. etcd killed -9: the shards go on serving on their leases; restarted on its data, it
    //    has every change, and the next change reaches every server through its watch.
    let before = shards.topology();
    let t0 = Instant::now();
    shards.etcd.kill();
    // Past the lease's renewal interval several times over, within its validity (7 s): the
    // operations answered meanwhile are counted until 5 s, so that on a slow machine etcd is
    // back before any lease could lapse.
    std::thread::sleep(ETCD_DOWN);
    let served = progress_until(&w.sh, PHASE_OPS / 4, t0 + Duration::from_secs(5));
    assert!(served > 0, "no operation was answered while etcd was down");
    let without_etcd = t0.elapsed();
    shards.etcd.restart().expect("etcd restarts on its data");
    assert_eq!(shards.topology(), before, "etcd's restart lost a topology change");
    progress(&w.sh, PHASE_OPS / 2);
    // move-slots waits for every server to answer the new epoch: the watches are back.
    move_to_end(&shards, &["--from", "m0", "--to", "m1", "--slots", &first]);
    assert_owned(&shards, FIRST_MOVE, 1);
    progress(&w.sh, PHASE_OPS);
    let (moved, asked) = w.sh.redirects();
    assert!(moved + asked > 0, "the clients met no redirect across two fail-overs and three moves");

    let faults = format!(
        "kill -9 and take-over of shard 0 in {took0:?}; move-slots killed -9 and resumed; move during \
         shard 1's take-over in {took1:?} (the first run {}); etcd down {without_etcd:?}, \
         {served} operations answered after {ETCD_DOWN:?} of it, restarted, a move after",
        if first_ok {
            "ended well".to_string()
        } else {
            format!("failed: {}", said.lines().last().unwrap_or(""))
        },
    );
    check_end(w, &checker, &faults, Vec::new(), &filler, &shards.standby_addrs.clone());
}

/// Shard 0's primary cut off from its mirror and from etcd (network namespaces, root): its
/// lease lapses, the mirror's standby takes the shard over, the clients (which still reach
/// the old primary) follow, and the partition heals. With the read barrier the old primary
/// answers nothing stale.
#[test]
fn cluster_histories_across_a_partitioned_primary_are_linearizable() {
    let tools = TempDir::new("kv-cluster-part-tools");
    let Some(checker) = checker(&tools) else { return };
    let Some(mut shards) = KvShards::start("kv-cluster-part", 2, failover(Network::Namespaces)) else {
        return;
    };
    let seed = seed("kv_cluster_partition");
    let w = Workload::start_routed(seed, shards.all_kv_addrs(), routing());
    progress(&w.sh, PHASE_OPS);
    // A client that keeps its connection to shard 0's primary through the partition.
    let mut stale = Conn::open(&shards.kv_addrs[0]).expect("connect to shard 0's primary");

    let t0 = Instant::now();
    let (p0, m0, etcd) = (shards.site(0, false), shards.site(0, true), shards.etcd_site());
    let net = shards.net.as_mut().expect("namespaces");
    net.partition(p0, m0).expect("cut shard 0's primary off from its mirror");
    net.partition(p0, etcd).expect("cut shard 0's primary off from etcd");
    shards.standbys[0].serving(2 * WAIT);
    let took = t0.elapsed();
    let (t, _) = shards.topology();
    assert_eq!(t.shards[0].primary, "m0", "the standby took shard 0: {t:?}");
    progress(&w.sh, PHASE_OPS);
    // The old primary, cut off, acknowledges no write after the take-over.
    let key = w.sh.key_name('k', 0);
    assert!(key_slot(key.as_bytes()) < 8192, "{key} is shard 0's");
    let late = write_on(&mut stale, &w.sh, &key);
    assert!(late.ret.is_none(), "the cut-off primary acknowledged SET {key} after the take-over");
    shards.net.as_mut().expect("namespaces").heal().expect("heal the partition");
    let old = match shards.primaries[0].as_mut().expect("started").wait_exit(Duration::from_secs(5)) {
        Some(s) => format!("after healing the old primary stopped ({s})"),
        None => "after healing the old primary still runs".to_string(),
    };
    progress(&w.sh, PHASE_OPS);
    let faults =
        format!("shard 0's primary partitioned from its mirror and etcd, taken over in {took:?}; {old}");
    let primaries = [shards.standby_addrs[0].clone(), shards.kv_addrs[1].clone()];
    check_end(w, &checker, &faults, vec![late], &[], &primaries);
}
