//! Cluster mode through `execute`: redirects before a command runs or is queued, ASKING, the
//! CLUSTER commands' replies, and the standalone answers.

use super::*;
use crate::cluster::topology::{Shard, ShardNode, SlotMove, SlotRange, Topology};
use crate::cluster::view::{CachedView, ClusterView};
use std::sync::Arc;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const C: &str = "cccccccccccccccccccccccccccccccccccccccc";

pub(super) fn shard(id: &str, node: &str, addr: &str, ranges: &[(u16, u16)]) -> Shard {
    Shard {
        id: id.into(),
        config_epoch: 7,
        slots: ranges.iter().map(|&(start, end)| SlotRange { start, end }).collect(),
        nodes: vec![ShardNode {
            name: node.into(),
            kv_addr: addr.into(),
            serve_addr: "127.0.0.1:1".into(),
            zone: String::new(),
            kv_tls_addr: None,
        }],
        primary: node.into(),
    }
}

/// Three shards as `redis-cli --cluster create` splits the slots: "bar" (5061) is in a's,
/// "foo" (12182) in c's.
fn three() -> Topology {
    Topology {
        epoch: 9,
        shards: vec![
            shard(A, "n1", "127.0.0.1:7001", &[(0, 5460)]),
            shard(B, "n2", "127.0.0.1:7002", &[(5461, 10922)]),
            shard(C, "n3", "127.0.0.1:7003", &[(10923, 16383)]),
        ],
        moves: Vec::new(),
    }
}

fn on(me: &str, t: Topology) -> (Harness, Arc<ClusterView>) {
    let view = Arc::new(ClusterView::new(me, t));
    let mut h = Harness::new();
    h.cluster = Some(CachedView::new(Arc::clone(&view)));
    (h, view)
}

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

#[test]
fn keys_of_other_shards_are_moved_and_several_slots_refused() {
    let (mut h, _view) = on("n1", three());
    assert_eq!(err(&h.cmd(&["GET", "foo"])), "MOVED 12182 127.0.0.1:7003");
    assert_eq!(err(&h.cmd(&["SET", "foo", "1"])), "MOVED 12182 127.0.0.1:7003");
    assert_eq!(h.cmd(&["SET", "bar", "1"]), ok());
    assert_eq!(h.cmd(&["GET", "bar"]), b("1"));
    let cross = "CROSSSLOT Keys in request don't hash to the same slot";
    assert_eq!(err(&h.cmd(&["MSET", "bar", "1", "foo", "2"])), cross);
    assert_eq!(err(&h.cmd(&["MSET", "foo", "1", "bar", "2"])), cross);
    // Hash tags put keys together.
    assert_eq!(h.cmd(&["MSET", "{bar}.1", "x", "{bar}.2", "y"]), ok());
    assert_eq!(h.cmd(&["MGET", "{bar}.1", "bar", "{bar}.2"]), Value::Array(vec![b("x"), b("1"), b("y")]));
    // Keys after a count, a script's declared keys, SORT's STORE.
    assert_eq!(err(&h.cmd(&["LMPOP", "2", "bar", "foo", "LEFT"])), cross);
    assert_eq!(err(&h.cmd(&["EVAL", "return 1", "2", "bar", "foo"])), cross);
    assert_eq!(err(&h.cmd(&["EVAL", "return 1", "1", "foo"])), "MOVED 12182 127.0.0.1:7003");
    // Without keys: past the check (this host runs no scripts).
    assert_eq!(err(&h.cmd(&["EVAL", "return 1", "0"])), "ERR scripts are not available in this server");
    assert_eq!(err(&h.cmd(&["SORT", "bar", "STORE", "foo"])), cross);
    // Keyless commands and classic pub/sub run anywhere; shard channels go to their slot.
    assert_eq!(h.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(h.cmd(&["PUBLISH", "foo", "m"]), i(0));
    assert_eq!(err(&h.cmd(&["SPUBLISH", "foo", "m"])), "MOVED 12182 127.0.0.1:7003");
    assert_eq!(h.cmd(&["SPUBLISH", "bar", "m"]), i(0));
}

#[test]
fn an_unowned_slot_is_down_and_a_new_topology_is_followed() {
    let mut t = three();
    t.shards[2].slots = vec![SlotRange { start: 10923, end: 16000 }];
    let (mut h, view) = on("n1", t.clone());
    // "somekey" is in 11058 (c's), "{p}x" in 16023 ("p"'s), which no shard owns.
    assert_eq!(err(&h.cmd(&["GET", "{p}x"])), "CLUSTERDOWN Hash slot not served");
    // The slot of "foo" handed to this node's shard: served from the next command on.
    t.shards[2].slots = vec![SlotRange { start: 10923, end: 12181 }, SlotRange { start: 12183, end: 16383 }];
    t.shards[0].slots.push(SlotRange { start: 12182, end: 12182 });
    view.set(t);
    assert_eq!(h.cmd(&["SET", "foo", "1"]), ok());
    assert_eq!(err(&h.cmd(&["GET", "somekey"])), "MOVED 11058 127.0.0.1:7003");
}

#[test]
fn a_slot_moving_away_asks_for_the_keys_not_here() {
    let (mut h, view) = on("n1", three());
    assert_eq!(h.cmd(&["SET", "bar", "1"]), ok());
    let mut t = three();
    t.moves.push(SlotMove { slot: 5061, from: A.into(), to: B.into(), rollback: false });
    view.set(t);
    assert_eq!(h.cmd(&["GET", "bar"]), b("1"));
    assert_eq!(err(&h.cmd(&["GET", "{bar}gone"])), "ASK 5061 127.0.0.1:7002");
    assert_eq!(
        err(&h.cmd(&["MGET", "bar", "{bar}gone"])),
        "TRYAGAIN Multiple keys request during rehashing of slot"
    );
    assert_eq!(h.cmd(&["MGET", "bar", "bar"]), Value::Array(vec![b("1"), b("1")]));
    // CLUSTER NODES shows the move on this node's line.
    let nodes = text(&h.cmd(&["CLUSTER", "NODES"]));
    let mine = nodes.lines().find(|l| l.contains("myself")).expect("a line for this node");
    assert_eq!(mine, format!("{A} 127.0.0.1:7001@0 myself,master - 0 0 7 connected 0-5460 [5061->-{B}]"));
}

#[test]
fn a_slot_moving_here_is_served_after_asking_for_one_command() {
    let mut t = three();
    t.moves.push(SlotMove { slot: 5061, from: A.into(), to: B.into(), rollback: false });
    let (mut h, _view) = on("n2", t);
    let moved = "MOVED 5061 127.0.0.1:7001";
    assert_eq!(err(&h.cmd(&["SET", "bar", "1"])), moved);
    assert_eq!(h.cmd(&["ASKING"]), ok());
    assert_eq!(h.cmd(&["SET", "bar", "1"]), ok());
    assert_eq!(err(&h.cmd(&["GET", "bar"])), moved, "ASKING holds for one command");
    assert_eq!(h.cmd(&["ASKING"]), ok());
    assert_eq!(h.cmd(&["GET", "bar"]), b("1"));
    // Several keys, some not here yet: TRYAGAIN even after ASKING.
    assert_eq!(h.cmd(&["ASKING"]), ok());
    assert_eq!(
        err(&h.cmd(&["MGET", "bar", "{bar}x"])),
        "TRYAGAIN Multiple keys request during rehashing of slot"
    );
    // A refused command uses up the ASKING too.
    assert_eq!(err(&h.cmd(&["GET", "bar"])), moved);
    // In a transaction, ASKING holds until EXEC.
    assert_eq!(h.cmd(&["ASKING"]), ok());
    assert_eq!(h.cmd(&["MULTI"]), ok());
    assert_eq!(h.cmd(&["INCR", "bar"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(h.cmd(&["GET", "bar"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(h.cmd(&["EXEC"]), Value::Array(vec![i(2), b("2")]));
    assert_eq!(err(&h.cmd(&["GET", "bar"])), moved);
}

#[test]
fn transactions_are_refused_at_queue_time_and_checked_again_at_exec() {
    let (mut h, view) = on("n1", three());
    assert_eq!(h.cmd(&["MULTI"]), ok());
    assert_eq!(err(&h.cmd(&["SET", "foo", "1"])), "MOVED 12182 127.0.0.1:7003");
    assert_eq!(h.cmd(&["SET", "bar", "1"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(err(&h.cmd(&["EXEC"])), "EXECABORT Transaction discarded because of previous errors.");
    assert_eq!(h.cmd(&["GET", "bar"]), Value::Null);
    // Each command in one slot, but not the same one: CROSSSLOT at EXEC, the transaction gone.
    assert_eq!(h.cmd(&["MULTI"]), ok());
    assert_eq!(h.cmd(&["SET", "bar", "1"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(h.cmd(&["SET", "baz", "1"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(err(&h.cmd(&["EXEC"])), "CROSSSLOT Keys in request don't hash to the same slot");
    assert_eq!(err(&h.cmd(&["EXEC"])), "ERR EXEC without MULTI");
    assert_eq!(h.cmd(&["GET", "bar"]), Value::Null);
    // The slot handed to another shard between queueing and EXEC: MOVED, nothing written.
    assert_eq!(h.cmd(&["MULTI"]), ok());
    assert_eq!(h.cmd(&["SET", "bar", "1"]), Value::Simple(b"QUEUED".to_vec()));
    let mut t = three();
    t.shards[0].slots = vec![SlotRange { start: 0, end: 5000 }];
    t.shards[1].slots = vec![SlotRange { start: 5001, end: 10922 }];
    view.set(t);
    assert_eq!(err(&h.cmd(&["EXEC"])), "MOVED 5061 127.0.0.1:7002");
    assert_eq!(h.cmd(&["DBSIZE"]), i(0));
}

#[test]
fn cluster_mode_has_database_zero_alone() {
    let (mut h, _view) = on("n1", three());
    assert_eq!(err(&h.cmd(&["SELECT", "1"])), "ERR SELECT is not allowed in cluster mode");
    assert_eq!(err(&h.cmd(&["SELECT", "x"])), NOT_INT);
    assert_eq!(h.cmd(&["SELECT", "0"]), ok());
    assert_eq!(err(&h.cmd(&["SWAPDB", "0", "1"])), "ERR SWAPDB is not allowed in cluster mode");
    assert_eq!(h.cmd(&["SET", "bar", "1"]), ok());
    assert_eq!(err(&h.cmd(&["MOVE", "bar", "1"])), "ERR MOVE is not allowed in cluster mode");
    assert_eq!(
        err(&h.cmd(&["COPY", "bar", "{bar}2", "DB", "1"])),
        "ERR Copying to another database is not allowed in cluster mode"
    );
    let info = text(&h.cmd(&["INFO"]));
    assert!(info.contains("redis_mode:cluster\r\n"), "{info}");
    assert!(info.contains("# Cluster\r\ncluster_enabled:1\r\n"), "{info}");
}

#[test]
fn cluster_commands_answer_from_the_topology() {
    let mut t = three();
    t.shards[1].slots.push(SlotRange { start: 16000, end: 16000 });
    t.shards[2].slots = vec![SlotRange { start: 10923, end: 15999 }, SlotRange { start: 16001, end: 16383 }];
    let (mut h, _view) = on("n1", t);
    assert_eq!(h.cmd(&["CLUSTER", "MYID"]), b(A));
    assert_eq!(h.cmd(&["cluster", "keyslot", "foo"]), i(12182));
    assert_eq!(
        h.cmd(&["CLUSTER", "KEYSLOT", "{user1000}.following"]),
        h.cmd(&["CLUSTER", "KEYSLOT", "user1000"])
    );
    let node =
        |host: &str, port: i64, id: &str| Value::Array(vec![b(host), i(port), b(id), Value::Array(vec![])]);
    let range = |s: i64, e: i64, n: Value| Value::Array(vec![i(s), i(e), n]);
    assert_eq!(
        h.cmd(&["CLUSTER", "SLOTS"]),
        Value::Array(vec![
            range(0, 5460, node("127.0.0.1", 7001, A)),
            range(5461, 10922, node("127.0.0.1", 7002, B)),
            range(10923, 15999, node("127.0.0.1", 7003, C)),
            range(16000, 16000, node("127.0.0.1", 7002, B)),
            range(16001, 16383, node("127.0.0.1", 7003, C)),
        ])
    );
    let nodes = text(&h.cmd(&["CLUSTER", "NODES"]));
    assert_eq!(
        nodes,
        format!(
            "{A} 127.0.0.1:7001@0 myself,master - 0 0 7 connected 0-5460\n\
             {B} 127.0.0.1:7002@0 master - 0 0 7 connected 5461-10922 16000\n\
             {C} 127.0.0.1:7003@0 master - 0 0 7 connected 10923-15999 16001-16383\n"
        )
    );
    let Value::Array(shards) = h.cmd(&["CLUSTER", "SHARDS"]) else { panic!("an array") };
    assert_eq!(shards.len(), 3);
    assert_eq!(
        shards[1],
        Value::Array(vec![
            b("slots"),
            Value::Array(vec![i(5461), i(10922), i(16000), i(16000)]),
            b("nodes"),
            Value::Array(vec![Value::Array(vec![
                b("id"),
                b(B),
                b("port"),
                i(7002),
                b("ip"),
                b("127.0.0.1"),
                b("endpoint"),
                b("127.0.0.1"),
                b("role"),
                b("master"),
                b("replication-offset"),
                i(0),
                b("health"),
                b("online"),
            ])]),
        ])
    );
    let info = text(&h.cmd(&["CLUSTER", "INFO"]));
    assert!(
        info.starts_with("cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n"),
        "{info}"
    );
    assert!(
        info.contains(
            "cluster_known_nodes:3\r\ncluster_size:3\r\ncluster_current_epoch:9\r\ncluster_my_epoch:7\r\n"
        ),
        "{info}"
    );
    // Keys by slot: a scan of the keyspace.
    h.cmd(&["MSET", "{bar}1", "x", "{bar}2", "y", "{bar}3", "z"]);
    h.cmd(&["SET", "other", "v"]);
    assert_eq!(h.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "5061"]), i(3));
    assert_eq!(h.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "0"]), i(0));
    let Value::Array(keys) = h.cmd(&["CLUSTER", "GETKEYSINSLOT", "5061", "2"]) else { panic!("an array") };
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| text(k).starts_with("{bar}")));
    assert_eq!(err(&h.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "16384"])), "ERR Invalid slot");
    assert_eq!(err(&h.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "x"])), NOT_INT);
    assert_eq!(err(&h.cmd(&["CLUSTER", "GETKEYSINSLOT", "1", "-1"])), "ERR Invalid slot or number of keys");
    // Redis's arities, and the subcommands that would change the topology refused, naming why.
    assert_eq!(
        err(&h.cmd(&["CLUSTER", "KEYSLOT"])),
        "ERR wrong number of arguments for 'cluster|keyslot' command"
    );
    assert_eq!(err(&h.cmd(&["CLUSTER", "NOPE"])), "ERR unknown subcommand 'NOPE'. Try CLUSTER HELP.");
    assert!(err(&h.cmd(&["CLUSTER", "ADDSLOTS", "1"])).contains("mojim kv cluster"));
    let Value::Array(help) = h.cmd(&["CLUSTER", "HELP"]) else { panic!("an array") };
    assert!(help.len() > 10);
    assert_eq!(h.cmd(&["READONLY"]), ok());
    assert_eq!(h.cmd(&["READWRITE"]), ok());
}

#[test]
fn a_standalone_server_has_no_cluster_support() {
    let mut h = Harness::new();
    let disabled = "ERR This instance has cluster support disabled";
    for c in [&["CLUSTER", "INFO"][..], &["CLUSTER", "SLOTS"], &["ASKING"], &["READONLY"], &["READWRITE"]] {
        assert_eq!(err(&h.cmd(c)), disabled, "{c:?}");
    }
    assert_eq!(h.cmd(&["SELECT", "1"]), ok());
    assert_eq!(h.cmd(&["MSET", "foo", "1", "bar", "2"]), ok());
    let info = text(&h.cmd(&["INFO"]));
    assert!(info.contains("redis_mode:standalone\r\n") && info.contains("cluster_enabled:0\r\n"), "{info}");
}

#[test]
fn keys_in_flight_are_staged_answered_tryagain_and_unstaged() {
    let (mut h, view) = on("n1", three());
    assert_eq!(h.cmd(&["SET", "bar", "1"]), ok());
    assert_eq!(h.cmd(&["RPUSH", "{bar}l", "a", "b", "c"]), i(3));
    assert_eq!(h.cmd(&["SET", "{bar}e", "v", "PX", "1000"]), ok());
    let not_moving = err(&h.cmd(&["CLUSTER", "STAGEKEYS", "1", "bar"]));
    assert!(not_moving.contains("key 'bar' is in slot 5061, which is not moving away"), "{not_moving}");
    let (dump_bar, dump_list) = (h.cmd(&["DUMP", "bar"]), h.cmd(&["DUMP", "{bar}l"]));
    let mut t = three();
    t.moves.push(SlotMove { slot: 5061, from: A.into(), to: B.into(), rollback: false });
    view.set(t);
    // A key of a slot not moving away from here is refused, and nothing is staged.
    let e = err(&h.cmd(&["CLUSTER", "STAGEKEYS", "1", "bar", "foo"]));
    assert!(e.contains("key 'foo' is in slot 12182"), "{e}");
    assert_eq!(h.cmd(&["GET", "bar"]), b("1"));
    let staged = h.cmd(&["CLUSTER", "STAGEKEYS", "1", "bar", "{bar}l", "{bar}none"]);
    let want = Value::Array(vec![
        Value::Array(vec![dump_bar.clone(), i(-1)]),
        Value::Array(vec![dump_list, i(-1)]),
        Value::Null,
    ]);
    assert_eq!(staged, want);
    // Staged: neither here nor there, so neither side serves them.
    let again = "TRYAGAIN Multiple keys request during rehashing of slot";
    assert_eq!(err(&h.cmd(&["GET", "bar"])), again);
    assert_eq!(err(&h.cmd(&["RPUSH", "{bar}l", "d"])), again);
    assert_eq!(err(&h.cmd(&["MGET", "{bar}e", "bar"])), again);
    assert_eq!(err(&h.cmd(&["GET", "{bar}none"])), "ASK 5061 127.0.0.1:7002");
    assert_eq!(h.cmd(&["DBSIZE"]), i(1), "only {{bar}}e is left in the keyspace");
    // A run cut short finds them, and staging them again answers the same.
    let mut listed = match h.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "10"]) {
        Value::Array(v) => v,
        other => panic!("{other:?}"),
    };
    listed.sort_by_key(|v| format!("{v:?}"));
    let mut want = vec![b("bar"), b("{bar}l")];
    want.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(listed, want);
    assert_eq!(
        h.cmd(&["CLUSTER", "STAGEKEYS", "1", "bar"]),
        Value::Array(vec![Value::Array(vec![dump_bar, i(-1)])])
    );
    // An expiry goes with the key, absolute.
    match h.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}e"]) {
        Value::Array(v) => match v.as_slice() {
            [Value::Array(pair)] => assert_eq!(pair[1], i(1_001_000), "{pair:?}"),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert_eq!(h.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "bar", "{bar}l", "{bar}none"]), i(2));
    assert_eq!(err(&h.cmd(&["GET", "bar"])), "ASK 5061 127.0.0.1:7002");
    assert_eq!(h.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "10"]), Value::Array(vec![b("{bar}e")]));
    // Expired in flight: nothing to write, but held back (TRYAGAIN) until the move drops it.
    h.now_ms += 1500;
    assert_eq!(err(&h.cmd(&["GET", "{bar}e"])), again);
    assert_eq!(h.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}e"]), Value::Array(vec![Value::Null]));
    assert_eq!(h.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "10"]), Value::Array(vec![b("{bar}e")]));
    assert_eq!(h.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}e"]), i(1));
    assert_eq!(err(&h.cmd(&["GET", "{bar}e"])), "ASK 5061 127.0.0.1:7002");
    assert_eq!(h.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "10"]), Value::Array(vec![]));
}
