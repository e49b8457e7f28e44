//! The stage of a live slot move (`CLUSTER STAGEKEYS` / `UNSTAGEKEYS` / `GETSTAGEDKEYS`) under
//! the sequences a client, expiry or a second run of the tool can bring: each test plays the
//! source and the target as two servers and checks that a key keeps one home, one value.

use super::cluster::shard;
use super::*;
use crate::cluster::topology::{SlotMove, Topology};
use crate::cluster::view::{CachedView, ClusterView};
use std::sync::Arc;

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// The slot of "bar" and of every "{bar}..." key.
const SLOT: u16 = 5061;

/// Two shards, a (n1) and b (n2); with `moving`, slot 5061 moving from a to b.
fn two(moving: bool) -> Topology {
    Topology {
        epoch: 9,
        shards: vec![
            shard(A, "n1", "127.0.0.1:7001", &[(0, 5460)]),
            shard(B, "n2", "127.0.0.1:7002", &[(5461, 16383)]),
        ],
        moves: if moving {
            vec![SlotMove { slot: SLOT, from: A.into(), to: B.into(), rollback: false }]
        } else {
            Vec::new()
        },
    }
}

/// The target of the move, the move recorded.
fn target() -> Harness {
    let mut h = Harness::new();
    h.cluster = Some(CachedView::new(Arc::new(ClusterView::new("n2", two(true)))));
    h
}

/// The source holding `keys` (SET before the move is recorded, with `PX 1000` for a key
/// whose name ends in 'e'), then the move recorded.
fn source(keys: &[(&str, &str)]) -> Harness {
    let view = Arc::new(ClusterView::new("n1", two(false)));
    let mut h = Harness::new();
    h.cluster = Some(CachedView::new(Arc::clone(&view)));
    for (k, v) in keys {
        let set = if k.ends_with('e') { h.cmd(&["SET", k, v, "PX", "1000"]) } else { h.cmd(&["SET", k, v]) };
        assert_eq!(set, ok());
    }
    view.set(two(true));
    h
}

/// `CLUSTER STAGEKEYS 1 key` on the source: the staged payload and PEXPIRETIME.
fn stage_one(h: &mut Harness, key: &str) -> (Vec<u8>, i64) {
    stage_with(h, "1", key)
}

/// `CLUSTER STAGEKEYS fence key` on the source: the staged payload and PEXPIRETIME.
fn stage_with(h: &mut Harness, fence: &str, key: &str) -> (Vec<u8>, i64) {
    match h.cmd(&["CLUSTER", "STAGEKEYS", fence, key]) {
        Value::Array(v) => match v.as_slice() {
            [Value::Array(pair)] => match pair.as_slice() {
                [Value::Bulk(p), Value::Int(at)] => (p.clone(), *at),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// What the tool's restore script does on the target for one key (`RESTORE key at payload
/// REPLACE ABSTTL`, the script's commands not redirected); sent after ASKING, as the target
/// serves the importing slot only then.
fn restore_on_target(t: &mut Harness, key: &str, at: i64, payload: &[u8]) {
    assert_eq!(t.cmd(&["ASKING"]), ok());
    let at = at.max(0).to_string();
    let restore: [&[u8]; 6] = [b"RESTORE", key.as_bytes(), at.as_bytes(), payload, b"REPLACE", b"ABSTTL"];
    let got = t.cmd_bytes(&restore);
    assert_eq!(got, ok());
}

/// A client that followed an ASK: ASKING, then the command, on the target.
fn asked(t: &mut Harness, args: &[&str]) -> Value {
    assert_eq!(t.cmd(&["ASKING"]), ok());
    t.cmd(args)
}

/// A staged key that expires in flight stays staged (TRYAGAIN), even through the active
/// expiry cycle, until the tool drops it: a client cannot write it on the target before the
/// tool's RESTORE ... REPLACE ABSTTL (whose expiry in the past deletes the key) lands there.
#[test]
fn a_key_that_expires_in_flight_stays_staged_until_the_move_drops_it() {
    let mut src = source(&[("{bar}e", "old")]);
    let mut dst = target();
    // The tool stages it and is slow to write it on the target (a long batch, a pause).
    let (payload, at) = stage_one(&mut src, "{bar}e");
    assert_eq!(at, 1_001_000);
    src.now_ms += 1500;
    dst.now_ms += 1500;
    // The active expiry cycle leaves it (the server keeps the stage's expired keys).
    src.store.keep_expired_in(Some(crate::cluster::STAGE_DB));
    let buckets = src.store.geometry().buckets;
    src.store.expire_buckets(0, buckets, src.now_ms, |_| true, |_, _| {}).unwrap();
    src.store.seal(1024).unwrap();
    // A client is told to try again, not sent to the target.
    let again = err(&src.cmd(&["SET", "{bar}e", "new"]));
    assert!(again.starts_with("TRYAGAIN"), "{again}");
    // A run cut short finds it, and staging it again answers nothing to write.
    assert_eq!(
        src.cmd(&["CLUSTER", "GETSTAGEDKEYS", &SLOT.to_string(), "10"]),
        Value::Array(vec![b("{bar}e")])
    );
    assert_eq!(src.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}e"]), Value::Array(vec![Value::Null]));
    // The tool goes on with the batch it staged, then drops it from the stage.
    restore_on_target(&mut dst, "{bar}e", at, &payload);
    assert_eq!(src.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}e"]), i(1));
    // Only now does the client reach the target, which holds no expired value.
    assert_eq!(err(&src.cmd(&["SET", "{bar}e", "new"])), "ASK 5061 127.0.0.1:7002");
    assert_eq!(asked(&mut dst, &["SET", "{bar}e", "new"]), ok());
    assert_eq!(asked(&mut dst, &["GET", "{bar}e"]), b("new"));
}

/// The same with the target's clock behind the source's (two machines): no client writes the
/// key on the target before the restore, so the restore brings nothing back over a write.
#[test]
fn a_key_that_expires_in_flight_meets_no_client_write_on_a_target_whose_clock_lags() {
    let mut src = source(&[("{bar}e", "old")]);
    let mut dst = target();
    let (payload, at) = stage_one(&mut src, "{bar}e");
    src.now_ms += 1500;
    // The target's clock is 1 s behind.
    dst.now_ms += 500;
    let redirect = err(&src.cmd(&["GET", "{bar}e"]));
    assert!(redirect.starts_with("ASK") || redirect.starts_with("TRYAGAIN"), "{redirect}");
    if redirect.starts_with("ASK") {
        assert_eq!(asked(&mut dst, &["SET", "{bar}e", "new"]), ok());
        restore_on_target(&mut dst, "{bar}e", at, &payload);
        assert_eq!(asked(&mut dst, &["GET", "{bar}e"]), b("new"), "the expired value came back");
    }
}

/// INFO keyspace in cluster mode lists database 0 alone, as Redis: the stage is not counted
/// twice over the two shards' answers.
#[test]
fn info_keyspace_in_cluster_mode_shows_no_stage() {
    let mut src = source(&[("{bar}k", "1")]);
    stage_one(&mut src, "{bar}k");
    let info = match src.cmd(&["INFO", "keyspace"]) {
        Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    };
    assert!(!info.contains("db15:"), "{info}");
}

/// A store of layout version 1 (one database) stages nothing: STAGEKEYS is refused, naming
/// why, and GETSTAGEDKEYS answers none, so that moves recorded on it can still be turned back.
#[test]
fn a_store_of_layout_version_1_answers_no_staged_keys() {
    let fresh = VecMem::new(4 << 20);
    drop(Store::open(&fresh, 1024).unwrap());
    let mut img = fresh.image();
    img[8..12].copy_from_slice(&1u32.to_le_bytes());
    img[crate::store::layout::HASH_KEY_OFF..crate::store::layout::HEAD_LEN].fill(0);
    let crc = crc32c::crc32c(&img[..crate::store::layout::STATIC_LEN]);
    img[crate::store::layout::STATIC_LEN..crate::store::layout::STATIC_LEN + 4]
        .copy_from_slice(&crc.to_le_bytes());
    let view = Arc::new(ClusterView::new("n1", two(false)));
    let mut src = Harness::new();
    src.cluster = Some(CachedView::new(Arc::clone(&view)));
    src.store = Store::open(VecMem::from_bytes(img), 1024).unwrap();
    assert_eq!(src.store.databases(), 1);
    assert_eq!(src.cmd(&["SET", "{bar}k", "1"]), ok());
    view.set(two(true));
    assert_eq!(src.cmd(&["GET", "{bar}k"]), b("1"));
    // STAGEKEYS refused with a clear error: the move cannot go on.
    let e = err(&src.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}k"]));
    assert!(e.contains("layout version 1"), "{e}");
    assert_eq!(src.cmd(&["GET", "{bar}k"]), b("1"), "nothing was staged");
    // Turning the move back first asks which keys are in flight: none can be.
    assert_eq!(src.cmd(&["CLUSTER", "GETSTAGEDKEYS", &SLOT.to_string(), "100"]), Value::Array(vec![]));
}

/// Sound: a transaction watching a key sees it staged, and queued commands on a staged key
/// make EXEC answer TRYAGAIN.
#[test]
fn watch_and_exec_see_a_key_staged() {
    let mut src = source(&[("{bar}k", "1"), ("{bar}x", "2")]);
    assert_eq!(src.cmd(&["WATCH", "{bar}k"]), ok());
    assert_eq!(src.cmd(&["MULTI"]), ok());
    assert_eq!(src.cmd(&["INCR", "{bar}k"]), Value::Simple(b"QUEUED".to_vec()));
    // The tool, on a connection of its own.
    let mut tool = Session::new(8, "tool".into(), true);
    std::mem::swap(&mut src.session, &mut tool);
    stage_one(&mut src, "{bar}k");
    std::mem::swap(&mut src.session, &mut tool);
    let exec = src.cmd(&["EXEC"]);
    assert!(
        matches!(&exec, Value::Error(e) if e.starts_with(b"TRYAGAIN")) || exec == Value::Null,
        "{exec:?}"
    );
    // Other commands naming it: TRYAGAIN, never served from an empty database 0.
    for c in [
        &["EXISTS", "{bar}k"][..],
        &["TYPE", "{bar}k"],
        &["OBJECT", "ENCODING", "{bar}k"],
        &["MEMORY", "USAGE", "{bar}k"],
        &["SET", "{bar}k", "x", "NX"],
        &["BLPOP", "{bar}k", "0"],
        &["COPY", "{bar}x", "{bar}k"],
        &["RENAME", "{bar}x", "{bar}k"],
        &["EVAL", "return 1", "1", "{bar}k"],
        &["FCALL", "f", "1", "{bar}k"],
        &["SORT", "{bar}x", "STORE", "{bar}k"],
    ] {
        let got = src.cmd(c);
        assert!(matches!(&got, Value::Error(e) if e.starts_with(b"TRYAGAIN")), "{c:?}: {got:?}");
    }
}

/// The topology once the move of 5061 ended: the slot is b's.
fn given() -> Topology {
    Topology {
        epoch: 10,
        shards: vec![
            shard(A, "n1", "127.0.0.1:7001", &[(0, 5060), (5062, 5460)]),
            shard(B, "n2", "127.0.0.1:7002", &[(5061, 5061), (5461, 16383)]),
        ],
        moves: Vec::new(),
    }
}

/// A STAGEKEYS that reaches the source after the passes (sent by a run frozen past its lease
/// and woken) leaves a key in the stage that no pass of database 0 sees: the tool asks the
/// stage once more just before it gives the slot, and lands it.
#[test]
fn a_key_staged_late_by_a_frozen_run_is_found_before_the_slot_is_given() {
    let mut src = source(&[("{bar}k", "v")]);
    let dst_view = Arc::new(ClusterView::new("n2", two(true)));
    let mut dst = Harness::new();
    dst.cluster = Some(CachedView::new(Arc::clone(&dst_view)));
    // Run 2 starts: nothing in flight.
    assert_eq!(src.cmd(&["CLUSTER", "GETSTAGEDKEYS", &SLOT.to_string(), "100"]), Value::Array(vec![]));
    // Run 1's STAGEKEYS, sent before it froze, arrives; run 1 then finds its lock gone and stops.
    stage_one(&mut src, "{bar}k");
    // Run 2's pass: database 0 holds no key of the slot.
    assert_eq!(src.cmd(&["SCAN", "0", "COUNT", "1000"]), Value::Array(vec![b("0"), Value::Array(vec![])]));
    // Before giving the slot it asks the stage again, and lands what it finds.
    assert_eq!(
        src.cmd(&["CLUSTER", "GETSTAGEDKEYS", &SLOT.to_string(), "100"]),
        Value::Array(vec![b("{bar}k")])
    );
    let (payload, at) = stage_one(&mut src, "{bar}k");
    restore_on_target(&mut dst, "{bar}k", at, &payload);
    assert_eq!(src.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}k"]), i(1));
    dst_view.set(given());
    assert_eq!(dst.cmd(&["GET", "{bar}k"]), b("v"));
}

/// Sound: the three subcommands need cluster mode, refuse bad counts and keys of slots not
/// moving away (nothing staged then), and a key named twice is staged once.
#[test]
fn stage_subcommands_refuse_what_they_do_not_serve() {
    let mut alone = Harness::new();
    let e = err(&alone.cmd(&["CLUSTER", "STAGEKEYS", "1", "k"]));
    assert!(e.contains("cluster support disabled"), "{e}");
    let mut src = source(&[("{bar}k", "v"), ("baz", "w")]);
    let e = err(&src.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "-1"]));
    assert!(e.contains("Invalid slot"), "{e}");
    let e = err(&src.cmd(&["CLUSTER", "GETSTAGEDKEYS", "16384", "1"]));
    assert!(e.contains("Invalid slot"), "{e}");
    let e = err(&src.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}k", "baz"]));
    assert!(e.contains("not moving away"), "{e}");
    let e = err(&src.cmd(&["CLUSTER", "STAGEKEYS"]));
    assert!(e.contains("wrong number of arguments"), "{e}");
    match src.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}k", "{bar}k"]) {
        Value::Array(v) => assert_eq!(v.len(), 2, "{v:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(src.cmd(&["CLUSTER", "GETSTAGEDKEYS", "5061", "10"]), Value::Array(vec![b("{bar}k")]));
    assert_eq!(src.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}k", "{bar}k"]), i(1));
}

/// SORT's BY and GET patterns name keys that are not routed: in cluster mode they are refused,
/// as Redis 7.0 refuses them, so a key in flight (or another shard's) is never read as missing.
#[test]
fn sort_patterns_are_refused_in_cluster_mode() {
    let view = Arc::new(ClusterView::new("n1", two(false)));
    let mut src = Harness::new();
    src.cluster = Some(CachedView::new(Arc::clone(&view)));
    assert_eq!(src.cmd(&["RPUSH", "{bar}l", "a", "b"]), i(2));
    assert_eq!(src.cmd(&["SET", "{bar}h_a", "va"]), ok());
    view.set(two(true));
    stage_one(&mut src, "{bar}h_a");
    let by = err(&src.cmd(&["SORT", "{bar}l", "BY", "{bar}w_*"]));
    assert_eq!(by, "ERR BY option of SORT denied in Cluster mode.");
    let get = err(&src.cmd(&["SORT", "{bar}l", "BY", "nosort", "GET", "{bar}h_*"]));
    assert_eq!(get, "ERR GET option of SORT denied in Cluster mode.");
    // A constant BY names no key: served.
    assert_eq!(src.cmd(&["SORT", "{bar}l", "BY", "nosort", "ALPHA"]), Value::Array(vec![b("a"), b("b")]));
}

/// The slot-move fence: a shard keeps the highest run number it has seen and refuses a lower
/// one in the same group as the step it guards.
#[test]
fn a_run_overtaken_by_a_later_one_is_fenced_off() {
    let mut src = source(&[("{bar}k", "v1")]);
    let mut dst = target();
    let e = err(&src.cmd(&["CLUSTER", "STAGEKEYS", "x", "{bar}k"]));
    assert!(e.contains("slot-move fence 'x' is not a positive integer"), "{e}");
    assert!(err(&src.cmd(&["CLUSTER", "MOVEFENCE", "0"])).contains("not a positive integer"));
    // Run 1 (fence 5) stages the key and is frozen before its RESTORE is sent.
    assert_eq!(src.cmd(&["CLUSTER", "MOVEFENCE", "5"]), ok());
    let (old_payload, old_at) = stage_with(&mut src, "5", "{bar}k");
    // Run 2 (fence 6) lands it end to end; a client then writes it where it lives.
    stage_with(&mut src, "6", "{bar}k");
    assert_eq!(dst.cmd(&["CLUSTER", "MOVEFENCE", "6"]), ok());
    restore_on_target(&mut dst, "{bar}k", old_at, &old_payload);
    assert_eq!(src.cmd(&["CLUSTER", "UNSTAGEKEYS", "6", "{bar}k"]), i(1));
    assert_eq!(asked(&mut dst, &["SET", "{bar}k", "v2"]), ok());
    // Run 1 wakes: its restore script stops at the fence, before any RESTORE; on the source,
    // neither stage nor unstage passes.
    let behind = err(&dst.cmd(&["CLUSTER", "MOVEFENCE", "5"]));
    assert!(behind.contains("slot-move fence 5 is behind this shard's 6"), "{behind}");
    assert!(err(&src.cmd(&["CLUSTER", "STAGEKEYS", "5", "{bar}k"])).contains("is behind"));
    assert!(err(&src.cmd(&["CLUSTER", "UNSTAGEKEYS", "5", "{bar}k"])).contains("is behind"));
    assert_eq!(asked(&mut dst, &["GET", "{bar}k"]), b("v2"), "the client's write stays");
    // The fence is no client's key, and FLUSHALL keeps it.
    assert_eq!(src.cmd(&["DBSIZE"]), i(0));
    assert_eq!(dst.cmd(&["DBSIZE"]), i(1));
    assert_eq!(src.cmd(&["FLUSHALL"]), ok());
    assert!(err(&src.cmd(&["CLUSTER", "MOVEFENCE", "5"])).contains("is behind"));
}
