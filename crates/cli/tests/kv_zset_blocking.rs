//! The blocking sorted-set pops (BZPOPMIN, BZPOPMAX, BZMPOP) in `mojim kv`, with real clients on
//! sockets: parked clients are served in the order they blocked by the write that gave a key
//! members (ZADD, ZUNIONSTORE, a transaction), a list pushed on a key they wait on wakes none of
//! them, timeouts and transactions answer a null, a WATCHed key popped by ZMPOP aborts the
//! transaction, and a pop a client was answered for survives `kill -9`. Each test runs a mirror
//! and `mojim kv` as child processes.

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
fn a_write_serves_the_waiting_clients_in_the_order_they_blocked() {
    let k = KvCluster::new("kv-zblock-fifo", 64 << 20);
    let mut r = k.client();
    let mut waiters: Vec<Resp> = (0..3).map(|_| k.client()).collect();
    send(&mut waiters[0], &["BZPOPMIN", "other", "z", "0"]);
    wait_blocked(&mut r, 1);
    send(&mut waiters[1], &["BZPOPMAX", "z", "0"]);
    wait_blocked(&mut r, 2);
    send(&mut waiters[2], &["BZMPOP", "0", "2", "z", "other", "MIN", "COUNT", "5"]);
    wait_blocked(&mut r, 3);
    // A list on a key they wait on wakes none of them.
    r.cmd(&["LPUSH", "z", "x"]);
    assert_eq!(blocked(&mut r), 3);
    r.cmd(&["DEL", "z"]);
    // Four members: the least to the first, the greatest to the second, the rest to the third.
    assert_eq!(r.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d"]), Value::Int(4));
    assert_eq!(waiters[0].read(), Some(arr(&["z", "a", "1"])));
    assert_eq!(waiters[1].read(), Some(arr(&["z", "d", "4"])));
    assert_eq!(
        waiters[2].read(),
        Some(Value::Array(vec![b("z"), Value::Array(vec![arr(&["b", "2"]), arr(&["c", "3"])])]))
    );
    assert_eq!(r.cmd(&["EXISTS", "z"]), Value::Int(0), "popped empty in the write's batch: deleted");
    assert_eq!(blocked(&mut r), 0);
    // A set made by ZUNIONSTORE, and one made in a transaction, serve too.
    r.cmd(&["ZADD", "src", "5", "e"]);
    send(&mut waiters[0], &["BZPOPMIN", "u", "0"]);
    wait_blocked(&mut r, 1);
    assert_eq!(r.cmd(&["ZUNIONSTORE", "u", "1", "src", "WEIGHTS", "2"]), Value::Int(1));
    assert_eq!(waiters[0].read(), Some(arr(&["u", "e", "10"])));
    send(&mut waiters[1], &["BZPOPMAX", "t", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["MULTI"]);
    r.cmd(&["ZADD", "t", "1", "x"]);
    r.cmd(&["ZADD", "t", "9", "y"]);
    r.cmd(&["EXEC"]);
    assert_eq!(waiters[1].read(), Some(arr(&["t", "y", "9"])));
    assert_eq!(r.cmd(&["ZRANGE", "t", "0", "-1"]), arr(&["x"]));
}

#[test]
fn timeouts_transactions_and_watch() {
    let k = KvCluster::new("kv-zblock-null", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    assert_eq!(w.cmd(&["BZPOPMIN", "z", "0.02"]), Value::Null);
    assert_eq!(w.cmd(&["BZMPOP", "0.01", "1", "z", "MAX"]), Value::Null);
    assert_eq!(blocked(&mut r), 0);
    w.cmd(&["MULTI"]);
    w.cmd(&["BZPOPMAX", "z", "0"]);
    w.cmd(&["BZMPOP", "0", "1", "z", "MIN"]);
    assert_eq!(w.cmd(&["EXEC"]), Value::Array(vec![Value::Null, Value::Null]));
    // ZMPOP's key is not in its table entry: popping it still touches it for WATCH.
    r.cmd(&["ZADD", "z", "1", "a", "2", "b"]);
    w.cmd(&["WATCH", "z"]);
    assert_eq!(
        r.cmd(&["ZMPOP", "1", "z", "MIN"]),
        Value::Array(vec![b("z"), Value::Array(vec![arr(&["a", "1"])])])
    );
    w.cmd(&["MULTI"]);
    w.cmd(&["ZCARD", "z"]);
    assert_eq!(w.cmd(&["EXEC"]), Value::Null, "the watched key was popped");
    assert_eq!(w.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}

#[test]
fn a_pop_a_client_was_answered_for_survives_kill_9() {
    let mut k = KvCluster::new("kv-zblock-durable", 64 << 20);
    let mut r = k.client();
    let mut w = k.client();
    send(&mut w, &["BZPOPMIN", "jobs", "0"]);
    wait_blocked(&mut r, 1);
    r.cmd(&["ZADD", "jobs", "2", "job-2", "1", "job-1"]);
    assert_eq!(w.read(), Some(arr(&["jobs", "job-1", "1"])));
    k.kill();
    k.start();
    let mut r = k.client();
    assert_eq!(r.cmd(&["ZRANGE", "jobs", "0", "-1", "WITHSCORES"]), arr(&["job-2", "2"]));
}
