//! Linearizability of `mojim kv` under faults, checked with Porcupine.
//!
//! Several clients run commands one at a time on a few keys of each type (strings: GET, SET,
//! APPEND; lists: RPUSH, LPUSH, LPOP, LRANGE; sorted sets: ZADD,
//! ZINCRBY, ZREM, ZRANGE, ZPOPMIN), recording each operation's invocation and response times
//! and its result (`common::kv_workload`), while
//! faults hit the primary: SIGKILL and a restart on the same region; SIGKILL and a promotion
//! of its mirror (`mojim promote`, then `mojim kv` on the promoted node), twice down a chain
//! of nodes; the primary frozen (SIGSTOP), replaced and let run again; a promotion beside a
//! running primary; and a real partition (network namespaces, as root). Clients whose
//! connection dies find the current primary with `SENTINEL get-master-addr-by-name` and go
//! on; an operation whose reply never came is recorded with an unknown outcome. The history
//! goes to `tools/porcupine-check` (partitioned by key, each key checked with the model of its
//! type: Porcupine's key-value model, a list model, a sorted-set model); a violation fails the
//! test with the seed and the kept history file. Without `[kv]
//! read_barrier` a replaced primary's stale reads must be reported: the check can fail.

mod common;

use common::edit_kv;
use common::kv::{node, promote, start_kv_on_promoted, wait_for};
use common::kv_cluster::free_addr;
use common::kv_workload::{progress, reads_on, Conn, Workload};
use common::porcupine::{build_checker, check, go, to_json, Kind, Op, Output};
use common::{exe, seed, Cluster, TempDir, WAIT};
use mojim_tools::child::ChildNode;
use mojim_tools::netns::Netns;
use std::time::Duration;

/// Operations answered between two faults (and after the last).
const OPS_PER_PHASE: u64 = 3000;
/// Restarts of the primary's server on its own region before the promotion.
const RESTARTS: usize = 8;

/// `mojim kv` on the cluster's own region at `listen`, mirrored to `mirror`.
fn start_primary(c: &Cluster, listen: &str, mirror: &str) -> ChildNode {
    let cfg = c.cfg_path.to_str().expect("utf-8");
    let args = ["kv", "--config", cfg, "--listen", listen, "--mirror", mirror];
    wait_for("mojim kv to start", || ChildNode::spawn(exe(), &args).ok())
}

/// The cluster of the tests: the primary's region, a mirror `m` feeding a backup `b`, which
/// feeds `d` (the mirror of a second promotion). The nodes are returned last first.
fn cluster(test: &str, read_barrier: bool) -> (Cluster, ChildNode, ChildNode, ChildNode) {
    let c = Cluster::new(test, 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        edit_kv(f, |k| {
            k.sentinel_name = "mojim".into();
            k.read_barrier = read_barrier;
        });
    });
    let last = node(&c, "d", &[]);
    let backup = node(&c, "b", &[last.addr()]);
    let mirror = node(&c, "m", &[backup.addr()]);
    (c, last, backup, mirror)
}

#[test]
fn kv_histories_under_kill_9_and_promotion_are_linearizable() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-tools");
    let checker = build_checker(&go, tools.path());
    let seed = seed("kv_linearizable");
    let (first, second, third) = (free_addr(), free_addr(), free_addr());
    let (c, last, backup, mirror) = cluster("kv-linearizable", false);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let w = Workload::start(seed, vec![first.clone(), second.clone(), third.clone()]);

    // The primary's server is killed and restarted on the same region, a few times.
    for _ in 0..RESTARTS {
        progress(&w.sh, OPS_PER_PHASE);
        kv.kill();
        kv = start_primary(&c, &first, mirror.addr());
    }
    // Then the primary's node is lost; the mirror is promoted and serves.
    progress(&w.sh, OPS_PER_PHASE);
    kv.kill();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let mut promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    // And the new primary's is lost too: its mirror, the former backup, is promoted.
    progress(&w.sh, OPS_PER_PHASE);
    promoted.kill();
    promote(&c, backup.addr(), &[last.addr()]);
    let promoted = start_kv_on_promoted(&c, "b", last.addr(), &["--listen", &third]);
    progress(&w.sh, OPS_PER_PHASE);
    w.check(
        &checker,
        &format!("{} faults ({RESTARTS} kill -9 and restart, 2 kill -9 and promotion)", RESTARTS + 2),
    );
    drop(promoted);
    drop(mirror);
    drop(backup);
}

/// The primary is cut off (frozen with SIGSTOP: it holds its connections and answers nothing,
/// as in a partition), the mirror promoted, and the old primary comes back while clients
/// still wait on it: with `[kv] read_barrier` it must answer neither a write nor a read from
/// its old state.
#[test]
fn kv_histories_across_a_cut_off_primary_replaced_by_promotion_are_linearizable() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-cut-tools");
    let checker = build_checker(&go, tools.path());
    let seed = seed("kv_linearizable_cut_off");
    let (first, second) = (free_addr(), free_addr());
    let (c, _last, backup, mirror) = cluster("kv-linearizable-cut", true);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let w = Workload::start(seed, vec![first.clone(), second.clone()]);

    progress(&w.sh, OPS_PER_PHASE);
    kv.freeze().expect("SIGSTOP the primary");
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    // Back before its clients give up on it: what it still answers is in the history.
    kv.thaw().expect("SIGCONT the old primary");
    progress(&w.sh, 2 * OPS_PER_PHASE);
    let old = match kv.wait_exit(Duration::ZERO) {
        Some(s) => format!("the old primary stopped ({s})"),
        None => "the old primary still runs".to_string(),
    };
    w.check(&checker, &format!("1 fault (cut off, promotion, back); {old}"));
    drop(promoted);
    drop(mirror);
}

/// The pipeline can fail: a hand-made history with a stale read, written as the workload
/// writes its own, is reported as a violation, with a visualization.
#[test]
fn the_checker_reports_a_stale_read() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-stale");
    let checker = build_checker(&go, tools.path());
    let op = |client, kind, value: &str, output: Option<&str>, call, ret| Op {
        client,
        kind,
        key: "k0".into(),
        value: value.into(),
        score: None,
        output: output.map(|o| Output::Text(o.into())),
        call,
        ret,
    };
    let history = [
        op(0, Kind::Set, "old", None, 0, Some(10)),
        op(0, Kind::Set, "new", None, 20, Some(30)),
        op(1, Kind::Append, "x", None, 25, None),
        op(1, Kind::Get, "", Some("old"), 40, Some(50)),
    ];
    let path = tools.path().join("stale.json");
    let html = tools.path().join("stale.html");
    std::fs::write(&path, to_json(&history)).expect("write the history");
    let v = check(&checker, &path, &html);
    assert_eq!(v.code, 1, "a stale read was not reported: {}", v.output);
    assert!(html.exists(), "no visualization was written: {}", v.output);
    // The same history without the stale read passes.
    std::fs::write(&path, to_json(&history[..3])).expect("write the history");
    let v = check(&checker, &path, &html);
    assert_eq!(v.code, 0, "a linearizable history was refused: {}", v.output);
}

/// The lists' and sorted sets' part of the pipeline: a hand-made history with every op of
/// both, written as the workload writes its own, passes; with a stale LRANGE, or a ZRANGE
/// that misses an acknowledged ZINCRBY, it is reported as a violation.
#[test]
fn the_checker_reads_list_and_sorted_set_histories() {
    let Some(go) = go() else { return };
    let tools = TempDir::new("kv-linearizable-types");
    let checker = build_checker(&go, tools.path());
    let op = |client, kind, key: &str, value: &str, score, output, call, ret| Op {
        client,
        kind,
        key: key.into(),
        value: value.into(),
        score,
        output,
        call,
        ret,
    };
    let list = |l: &[&str]| Some(Output::List(l.iter().map(|s| s.to_string()).collect()));
    let text = |s: &str| Some(Output::Text(s.into()));
    let history = vec![
        op(0, Kind::Rpush, "l0", "a", None, Some(Output::Int(1)), 0, Some(10)),
        op(1, Kind::Lpush, "l0", "b\"\\", None, Some(Output::Int(2)), 5, Some(15)),
        op(2, Kind::Lrange, "l0", "", None, list(&["b\"\\", "a"]), 20, Some(30)),
        op(0, Kind::Rpush, "l0", "c", None, None, 31, None),
        op(1, Kind::Lpop, "l0", "", None, text("b\"\\"), 40, Some(50)),
        op(3, Kind::Lpop, "l1", "", None, Some(Output::Nil), 0, Some(10)),
        op(4, Kind::Zadd, "z0", "m0", Some(-3), Some(Output::Int(1)), 0, Some(10)),
        op(4, Kind::Zincrby, "z0", "m1", Some(5), text("5"), 11, Some(20)),
        op(4, Kind::Zadd, "z0", "m1", Some(-7), Some(Output::Int(0)), 21, Some(30)),
        op(5, Kind::Zrem, "z0", "m2", None, Some(Output::Int(0)), 0, Some(30)),
        op(5, Kind::Zrange, "z0", "", None, list(&["m1", "-7", "m0", "-3"]), 31, Some(40)),
        op(5, Kind::Zpopmin, "z0", "", None, list(&["m1", "-7"]), 41, Some(50)),
        op(6, Kind::Zincrby, "z0", "m0", Some(4), text("1"), 51, Some(60)),
        op(6, Kind::Zpopmin, "z1", "", None, list(&[]), 0, Some(10)),
    ];
    let path = tools.path().join("types.json");
    let html = tools.path().join("types.html");
    std::fs::write(&path, to_json(&history)).expect("write the history");
    let v = check(&checker, &path, &html);
    assert_eq!(v.code, 0, "a linearizable history was refused: {}", v.output);
    for stale in [
        // The list read after LPOP answered: b is gone.
        op(2, Kind::Lrange, "l0", "", None, list(&["b\"\\", "a"]), 51, Some(60)),
        // The set read after ZINCRBY answered 1.
        op(5, Kind::Zrange, "z0", "", None, list(&["m0", "-3"]), 61, Some(70)),
    ] {
        let mut h = history.clone();
        h.push(stale.clone());
        std::fs::write(&path, to_json(&h)).expect("write the history");
        let v = check(&checker, &path, &html);
        assert_eq!(v.code, 1, "a stale read was not reported ({stale:?}): {}", v.output);
    }
}

/// Split brain: the mirror is promoted while the primary still runs (as when the operator
/// believes it lost behind a partition) and the clients move to the new primary, but one
/// client still reaches the old one and reads every key there after the new primary has taken
/// writes. Returns after checking the history, linearizable or not as `read_barrier` says.
fn split_brain(test: &str, read_barrier: bool) {
    let Some(go) = go() else { return };
    let tools = TempDir::new(&format!("{test}-tools"));
    let checker = build_checker(&go, tools.path());
    let seed = seed(test);
    let (first, second) = (free_addr(), free_addr());
    let (c, _last, backup, mirror) = cluster(test, read_barrier);
    let mut kv = start_primary(&c, &first, mirror.addr());
    let mut stale = Conn::open(&first).expect("connect to the primary");
    // The new primary's address comes first: once it serves, the clients find it there.
    let w = Workload::start(seed, vec![second.clone(), first.clone()]);
    progress(&w.sh, OPS_PER_PHASE);
    w.pause();
    promote(&c, mirror.addr(), &[backup.addr()]);
    let promoted = start_kv_on_promoted(&c, "m", backup.addr(), &["--listen", &second]);
    w.resume();
    progress(&w.sh, OPS_PER_PHASE);
    let reads = reads_on(&mut stale, &w.sh);
    let answered = reads.len();
    // With the barrier, the refused read stops it; without, it runs on.
    let old = match kv.wait_exit(if read_barrier { WAIT } else { Duration::ZERO }) {
        Some(s) => format!("the old primary stopped ({s})"),
        None => "the old primary still runs".to_string(),
    };
    let faults = format!("promotion beside a running primary; {answered} reads answered there, {old}");
    w.check_with(&checker, &faults, reads, read_barrier);
    if read_barrier {
        assert_eq!(answered, 0, "the replaced primary answered reads");
    }
    kv.kill();
    drop(promoted);
    drop(mirror);
}

/// With `[kv] read_barrier`, the replaced primary answers no read: the history is linearizable.
#[test]
fn split_brain_with_the_read_barrier_is_linearizable() {
    split_brain("kv-split-barrier", true);
}

/// Without it, the replaced primary answers reads from its old state, and Porcupine must say
/// so: the check fails on a real server's history, not only on hand-made ones.
#[test]
fn split_brain_without_the_read_barrier_is_caught() {
    split_brain("kv-split-no-barrier", false);
}

/// `mojim args...` in site `i`'s network namespace, ready (retried while a promotion ends).
fn spawn_in(net: &Netns, i: usize, args: &[&str]) -> ChildNode {
    let ns = net.name(i);
    let mut a = vec!["netns", "exec", &ns, exe().to_str().expect("utf-8")];
    a.extend_from_slice(args);
    wait_for("a process in its namespace to start", || ChildNode::spawn(std::path::Path::new("ip"), &a).ok())
}

/// A real partition: the primary (site 0) is cut off from its mirror (site 1) by blackhole
/// routes while the clients, here, still reach both; the operator promotes the mirror, the
/// clients move to it, and one client still reads on the old primary. Checked as
/// [`split_brain`] is; then the partition heals.
fn partitioned(test: &str, read_barrier: bool) {
    let Some(go) = go() else { return };
    let mut net = match Netns::create(3) {
        Ok(n) => n,
        Err(e) => {
            common::skip(&format!("no network namespaces: {e}"));
            return;
        }
    };
    let tools = TempDir::new(&format!("{test}-tools"));
    let checker = build_checker(&go, tools.path());
    let seed = seed(test);
    let c = Cluster::new(test, 16 << 20, |f| {
        f.cluster.heartbeat_interval_ms = 50;
        f.cluster.heartbeat_timeout_ms = 1500;
        edit_kv(f, |k| {
            k.sentinel_name = "mojim".into();
            k.read_barrier = read_barrier;
        });
        // mojim kv listens on its namespace's address, not loopback, and has no password: the
        // test's private network, so protected mode is turned off, as an operator would.
        edit_kv(f, |k| k.protected_mode = false);
    });
    let cfg = c.cfg_path.to_str().expect("utf-8").to_string();
    let dir = |n: &str| c.dir.path().join(n).to_str().expect("utf-8").to_string();
    let ips: Vec<String> = (0..3).map(|i| net.ip_of(i)).collect();
    let node_addr = |i: usize| format!("{}:7420", ips[i]);
    let kv_addr = |i: usize| format!("{}:6379", ips[i]);
    let (b, m) = (dir("b"), dir("m"));
    let _backup = spawn_in(&net, 2, &["serve", "--config", &cfg, "--listen", &node_addr(2), "--dir", &b]);
    let mirror_args =
        ["serve", "--config", &cfg, "--listen", &node_addr(1), "--dir", &m, "--backup", &node_addr(2)];
    let _mirror = spawn_in(&net, 1, &mirror_args);
    let mut kv =
        spawn_in(&net, 0, &["kv", "--config", &cfg, "--listen", &kv_addr(0), "--mirror", &node_addr(1)]);
    let mut stale = Conn::open(&kv_addr(0)).expect("connect to the primary");
    let w = Workload::start(seed, vec![kv_addr(1), kv_addr(0)]);
    progress(&w.sh, OPS_PER_PHASE);
    w.pause();
    net.partition(0, 1).expect("cut the primary off from its mirror");
    promote(&c, &node_addr(1), &[&node_addr(2)]);
    let region = format!("{m}/data.mojim");
    let promoted = spawn_in(
        &net,
        1,
        &["kv", "--config", &cfg, "--region", &region, "--mirror", &node_addr(2), "--listen", &kv_addr(1)],
    );
    w.resume();
    progress(&w.sh, OPS_PER_PHASE);
    let reads = reads_on(&mut stale, &w.sh);
    let answered = reads.len();
    net.heal().expect("heal the partition");
    let old = match kv.wait_exit(if read_barrier { WAIT } else { Duration::ZERO }) {
        Some(s) => format!("after healing the old primary stopped ({s})"),
        None => "after healing the old primary still runs".to_string(),
    };
    let faults = format!("partition and promotion; {answered} reads answered on the cut-off primary, {old}");
    w.check_with(&checker, &faults, reads, read_barrier);
    if read_barrier {
        assert_eq!(answered, 0, "the cut-off primary answered reads");
    }
    kv.kill();
    drop(promoted);
}

/// With `[kv] read_barrier`, the cut-off primary answers no read: linearizable.
#[test]
fn partition_with_the_read_barrier_is_linearizable() {
    partitioned("kv-part-barrier", true);
}

/// Without it, the cut-off primary answers reads from its old state, and Porcupine says so.
#[test]
fn partition_without_the_read_barrier_is_caught() {
    partitioned("kv-part-no-barrier", false);
}
