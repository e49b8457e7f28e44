//! Blocking list commands in `mojim kv`, with real clients on sockets: clients parked by BLPOP,
//! BLMOVE and BLMPOP are served in the order they blocked, by the write that made a key ready;
//! a parked client's later requests wait behind it; a timeout, `CLIENT UNBLOCK` or a transaction
//! answers a null; a client that hangs up stops waiting; a key of another type wakes nobody;
//! and a pop a client was answered for survives `kill -9`. Each test runs a mirror and
//! `mojim kv` as child processes.

mod common;

use common::kv::{wait_for, KvCluster, Resp};
use mojim_kv::resp::Value;

fn b(s: &str) -> Value {
    Value::bulk(s)
}

fn arr(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| b(s)).collect())
}

/// `INFO clients`' blocked_clients.
fn blocked(c: &mut Resp) -> u64 {
    let Value::Bulk(info) = c.cmd(&["INFO", "clients"]) else { panic!("INFO answers a bulk string") };
    let info = String::from_utf8(info).expect("utf-8");
    let line = info.lines().find_map(|l| l.strip_prefix("blocked_clients:")).expect("a blocked_clients line");
    line.trim().parse().expect("a number")
}

/// Waits until `n` clients are parked.
fn wait_blocked(c: &mut Resp, n: u64) {
    wait_for(&format!("{n} blocked clients"), || (blocked(c) == n).then_some(()));
}

fn send(c: &mut Resp, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.send(&a);
}

#[test]
fn a_push_serves_the_waiting_clients_in_the_order_they_blocked() {
    let k = KvCluster::new("kv-block-fifo", 64 << 20);
    let mut r = k.client();
    let mut waiters: Vec<Resp> = (0..3).map(|_| k.client()).collect();
    for (n, w) in waiters.iter_mut().enumerate() {
        send(w, &["BLPOP", "other", "q", "0"]);
        wait_blocked(&mut r, n as u64 + 1);
    }
    // Two elements: the first two clients get one each, in order; the third waits on.
    assert_eq!(r.cmd(&["RPUSH", "q", "a", "b"]), Value::Int(2));
    assert_eq!(waiters[0].read(), Some(arr(&["q", "a"])));
    assert_eq!(waiters[1].read(), Some(arr(&["q", "b"])));
    assert_eq!(r.cmd(&["EXISTS", "q"]), Value::Int(0), "popped empty in the push's batch: deleted");
    assert_eq!(blocked(&mut r), 1);
    // A transaction's pushes are seen whole: the last one pushed is at the head.
    assert_eq!(r.cmd(&["MULTI"]), Value::Simple(b"OK".to_vec()));
    for e in ["x", "y", "z"] {
        r.cmd(&["LPUSH", "other", e]);
    }
    r.cmd(&["EXEC"]);
    assert_eq!(waiters[2].read(), Some(arr(&["other", "z"])));
    assert_eq!(r.cmd(&["LRANGE", "other", "0", "-1"]), arr(&["y", "x"]));
    // BLMOVE: a chain of moves in one push's batch.
    let (mut m1, mut m2) = (k.client(), k.client());
    send(&mut m1, &["BLMOVE", "l1", "l2", "RIGHT", "LEFT", "0"]);
    wait_blocked(&mut r, 1);
    send(&mut m2, &["BLMOVE", "l2", "l3", "LEFT", "RIGHT", "0"]);
    wait_blocked(&mut r, 2);
    r.cmd(&["RPUSH", "l1", "foo"]);
    assert_eq!(r.cmd(&["LRANGE", "l3", "0", "-1"]), arr(&["foo"]), "moved on by the second client");
    assert_eq!(m1.read(), Some(b("foo")));
    assert_eq!(m2.read(), Some(b("foo")));
    assert_eq!(r.cmd(&["EXISTS", "l1", "l2"]), Value::Int(0));
    // BLMPOP with a count takes what there is, up to it.
    send(&mut m1, &["BLMPOP", "0", "2", "a", "b", "RIGHT", "COUNT", "10"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["RPUSH", "b", "1", "2", "3"]);
    assert_eq!(m1.read(), Some(Value::Array(vec![b("b"), arr(&["3", "2", "1"])])));
}

#[test]
fn a_parked_clients_later_requests_wait_behind_it() {
    let k = KvCluster::new("kv-block-pipeline", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    let mut pipeline = Vec::new();
    for c in [&["BLPOP", "k", "0"][..], &["PING"], &["RPUSH", "mine", "1"]] {
        let a: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        mojim_kv::resp::encode_request(&a, &mut pipeline);
    }
    w.send_raw(&pipeline).expect("send");
    wait_blocked(&mut r, 1);
    assert_eq!(r.cmd(&["EXISTS", "mine"]), Value::Int(0), "the request after BLPOP has not run");
    r.cmd(&["RPUSH", "k", "v"]);
    assert_eq!(w.read(), Some(arr(&["k", "v"])));
    assert_eq!(w.read(), Some(Value::Simple(b"PONG".to_vec())));
    assert_eq!(w.read(), Some(Value::Int(1)));
}

#[test]
fn timeouts_unblock_and_transactions_answer_a_null() {
    let k = KvCluster::new("kv-block-null", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    assert_eq!(w.cmd(&["BLPOP", "k", "0.05"]), Value::Null);
    assert_eq!(w.cmd(&["BRPOPLPUSH", "k", "d", "0.01"]), Value::Null);
    assert_eq!(w.cmd(&["BLMPOP", "0.01", "1", "k", "LEFT"]), Value::Null);
    assert_eq!(blocked(&mut r), 0);
    let Value::Int(id) = w.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID answers an integer") };
    send(&mut w, &["BLPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    assert_eq!(r.cmd(&["CLIENT", "UNBLOCK", &id.to_string()]), Value::Int(1));
    assert_eq!(w.read(), Some(Value::Null));
    send(&mut w, &["BLPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    assert_eq!(r.cmd(&["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]), Value::Int(1));
    assert_eq!(w.read(), Some(Value::Error(b"UNBLOCKED client unblocked via CLIENT UNBLOCK".to_vec())));
    assert_eq!(r.cmd(&["CLIENT", "UNBLOCK", &id.to_string()]), Value::Int(0), "not blocked now");
    // In a transaction a blocking command does not block.
    w.cmd(&["MULTI"]);
    w.cmd(&["BLPOP", "k", "0"]);
    w.cmd(&["BLMOVE", "k", "d", "LEFT", "LEFT", "0"]);
    assert_eq!(w.cmd(&["EXEC"]), Value::Array(vec![Value::Null, Value::Null]));
    assert_eq!(w.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}

#[test]
fn a_client_that_hangs_up_or_a_key_of_another_type_wakes_nobody() {
    let k = KvCluster::new("kv-block-gone", 64 << 20);
    let mut r = k.client();
    let mut gone = k.client();
    send(&mut gone, &["BLPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    drop(gone);
    wait_blocked(&mut r, 0);
    r.cmd(&["RPUSH", "k", "kept"]);
    assert_eq!(r.cmd(&["LRANGE", "k", "0", "-1"]), arr(&["kept"]), "nobody popped it");
    r.cmd(&["DEL", "k"]);
    // A list made and replaced by a string in one transaction wakes nobody.
    let mut w = k.client();
    send(&mut w, &["BLPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["MULTI"]);
    r.cmd(&["LPUSH", "k", "a"]);
    r.cmd(&["DEL", "k"]);
    r.cmd(&["SET", "k", "foo"]);
    r.cmd(&["EXEC"]);
    assert_eq!(blocked(&mut r), 1);
    r.cmd(&["DEL", "k"]);
    r.cmd(&["LPUSH", "k", "b"]);
    assert_eq!(w.read(), Some(arr(&["k", "b"])));
}

#[test]
fn move_and_swapdb_wake_a_client_in_the_database_the_list_reaches() {
    let k = KvCluster::new("kv-block-dbs", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    w.cmd(&["SELECT", "1"]);
    send(&mut w, &["BRPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["RPUSH", "k", "from db 0"]);
    assert_eq!(blocked(&mut r), 1, "a key of another database");
    assert_eq!(r.cmd(&["MOVE", "k", "1"]), Value::Int(1));
    assert_eq!(w.read(), Some(arr(&["k", "from db 0"])));
    send(&mut w, &["BRPOP", "k", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["RPUSH", "k", "swapped"]);
    r.cmd(&["SWAPDB", "0", "1"]);
    assert_eq!(w.read(), Some(arr(&["k", "swapped"])));
}

/// SORT ... STORE makes its destination a list (a key its table entry does not name).
#[test]
fn sort_store_wakes_a_client_waiting_on_its_destination() {
    let k = KvCluster::new("kv-block-sort", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    send(&mut w, &["BLPOP", "dst", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["RPUSH", "src", "b", "c", "a"]);
    assert_eq!(r.cmd(&["SORT", "src", "ALPHA", "STORE", "dst"]), Value::Int(3));
    assert_eq!(w.read(), Some(arr(&["dst", "a"])));
}

#[test]
fn a_pop_a_client_was_answered_for_survives_kill_9() {
    let mut k = KvCluster::new("kv-block-durable", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    send(&mut w, &["BRPOPLPUSH", "src", "dst", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["RPUSH", "src", "job-1", "job-2"]);
    assert_eq!(w.read(), Some(b("job-2")));
    k.kill();
    k.start();
    let mut r = k.client();
    assert_eq!(r.cmd(&["LRANGE", "src", "0", "-1"]), arr(&["job-1"]));
    assert_eq!(r.cmd(&["LRANGE", "dst", "0", "-1"]), arr(&["job-2"]));
}
