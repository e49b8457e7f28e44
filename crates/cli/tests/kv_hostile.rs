//! What a client can send must never stop `mojim kv`, make its store unopenable, or stall the
//! other clients: each test here is a request (or a state) that once did, sent to a real server
//! with its mirror in child processes. After each, the server still answers every client, and a
//! restart (kill -9) still opens the store.

mod common;

use common::edit_kv;
use common::kv::{wait_for, KvCluster, Resp};
use mojim_kv::resp::Value;
use mojim_kv::store::KeyHasher;

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

/// The store's hash key and bucket count, read from the region file as only someone who can
/// read the region could.
fn hasher_and_buckets(k: &KvCluster) -> (KeyHasher, u64) {
    let region = mojim_region::RegionFile::open(&k.c.cfg.resolve(&k.c.cfg.file.region.path)).expect("open");
    let mut head = [0u8; 100];
    region.read(0, &mut head);
    let key: [u8; 16] = head[80..96].try_into().unwrap();
    let buckets = u64::from_le_bytes(head[48..56].try_into().unwrap());
    (KeyHasher::from_bytes(&key), buckets)
}

/// Thousands of keys in the first buckets an expiry pass looks at, expiring together: one
/// pass could not remove them all in one batch (its undo space runs out), and once ended the
/// server, and every restart. The keys are chosen with the store's hash key (which a client
/// cannot read): the pass must be bounded however the keys fall.
#[test]
fn keys_expiring_together_in_one_range_of_buckets_never_stop_the_server() {
    let mut k = KvCluster::new("kv-expiry-flood", 16 << 20);
    let mut c = k.client();
    assert_eq!(c.cmd(&["SET", "warm", "up"]), ok());
    let (hasher, buckets) = hasher_and_buckets(&k);
    let mut keys = Vec::new();
    let mut n = 0u64;
    while keys.len() < 6000 {
        let key = format!("flood:{n}");
        if hasher.locate(key.as_bytes(), buckets).0 < 1024 {
            keys.push(key);
        }
        n += 1;
    }
    for key in &keys {
        c.send(&[b"SET", key.as_bytes(), b"v", b"PX", b"1500"]);
    }
    for _ in &keys {
        assert_eq!(c.read(), Some(ok()));
    }
    assert_eq!(c.cmd(&["SET", "stays", "here"]), ok());
    // The expiry passes go round every bucket; the keys go, a batch's room at a time.
    wait_for("every flood key to be removed", || (c.cmd(&["DBSIZE"]) == Value::Int(2)).then_some(()));
    assert_eq!(c.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    k.kill();
    k.start();
    let mut c = k.client();
    assert_eq!(c.cmd(&["GET", "stays"]), Value::bulk("here"));
    assert_eq!(c.cmd(&["DBSIZE"]), Value::Int(2));
}

/// The next reply must be an error, and the connection closed after it. The reply is read
/// through the client's buffer (an earlier read may hold its bytes already); a reply that is not
/// an error is named by its kind, not printed.
fn closed_after_error(c: &mut Resp, what: &str) -> String {
    let e = match c.read() {
        Some(Value::Error(e)) => String::from_utf8_lossy(&e).into_owned(),
        Some(Value::Bulk(b)) => panic!("{what}: expected an error, got a bulk string of {} bytes", b.len()),
        Some(Value::Array(v)) => panic!("{what}: expected an error, got an array of {} replies", v.len()),
        Some(other) => panic!("{what}: expected an error, got {other:?}"),
        None => panic!("{what}: no reply, the connection closed"),
    };
    assert!(c.closed(), "{what}: the client is closed after the error");
    e
}

#[test]
fn a_reply_past_the_output_limit_closes_that_client_only() {
    let k = KvCluster::with("kv-output-limit", 64 << 20, |f| edit_kv(f, |k| k.output_limit = "32MiB".into()));
    let mut c = k.client();
    let value = vec![b'v'; 1 << 20];
    for i in 0..8 {
        c.send(&[b"SET", format!("big{i}").as_bytes(), &value]);
        assert_eq!(c.read(), Some(ok()));
    }
    let mut other = k.client();
    // A 1.3 KB request whose reply would be 400 MiB.
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    let names: Vec<String> = (0..400).map(|i| format!("big{}", i % 8)).collect();
    mget.extend(names.iter().map(|n| n.as_bytes()));
    let mut attacker = k.client();
    attacker.send(&mget);
    let e = closed_after_error(&mut attacker, "MGET");
    assert!(e.contains("output_limit") && e.contains("33554432"), "{e}");
    // A reply that fits is answered as before, to this client and others.
    assert_eq!(other.cmd(&["STRLEN", "big3"]), Value::Int(1 << 20));
    let Value::Array(v) = c.cmd(&["MGET", "big0", "big1"]) else { panic!("MGET") };
    assert_eq!(v.len(), 2);
    let Value::Bulk(info) = other.cmd(&["INFO", "stats"]) else { panic!("INFO") };
    assert!(String::from_utf8_lossy(&info).contains("client_output_limit_disconnections:1\r\n"));
    // GETSET whose reply does not fit changes nothing.
    let k2 = KvCluster::with("kv-output-limit-write", 16 << 20, |f| {
        edit_kv(f, |k| {
            k.max_bulk = "1MiB".into();
            k.output_limit = "2MiB".into();
        });
    });
    let mut c = k2.client();
    c.send(&[b"SET", b"x", &value[..(1 << 20) - 1]]);
    assert_eq!(c.read(), Some(ok()));
    // Pipelined: two GETs fill the client's output, so the GETSET's reply would pass it.
    c.send(&[b"GET", b"x"]);
    c.send(&[b"GETSET", b"x", b"new"]);
    assert_eq!(c.read().map(|v| matches!(v, Value::Bulk(_))), Some(true), "the GET's reply");
    let e = closed_after_error(&mut c, "GETSET");
    assert!(e.contains("output_limit"), "{e}");
    assert_eq!(k2.client().cmd(&["STRLEN", "x"]), Value::Int((1 << 20) - 1), "the GETSET was undone");
}

/// One HSET of 100 000 fields (2.4 MB), then another client's PING and small changes to the big
/// hash: each answered (a hash rewritten whole on every change, or an HSET quadratic in its
/// fields, held every client for minutes).
#[test]
fn a_huge_hash_is_built_in_one_command_and_changed_a_field_at_a_time() {
    let k = KvCluster::new("kv-huge-hash", 128 << 20);
    let mut c = k.client();
    let names: Vec<String> = (0..100_000).map(|i| format!("field:{i}")).collect();
    let mut args: Vec<&[u8]> = vec![b"HSET", b"big"];
    for n in &names {
        args.push(n.as_bytes());
        args.push(b"value");
    }
    c.send(&args);
    let mut other = k.client();
    assert_eq!(other.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(c.read(), Some(Value::Int(100_000)));
    for i in 0..100 {
        assert_eq!(other.cmd(&["HSET", "big", &format!("field:{i}"), "changed"]), Value::Int(0));
    }
    assert_eq!(other.cmd(&["HGET", "big", "field:99"]), Value::bulk("changed"));
    assert_eq!(other.cmd(&["HLEN", "big"]), Value::Int(100_000));
}

/// Keys that expire leave the keyspace (DBSIZE, INFO's `expired_keys`) within a few passes of
/// the active expiry, whatever the region's size: a pass once looked at 1024 buckets every
/// 100 ms, so that in a region of 256 MiB an expired key was counted for up to 100 s.
#[test]
fn expired_keys_leave_a_large_region_within_seconds() {
    let k = KvCluster::new("kv-active-expiry", 256 << 20);
    let mut c = k.client();
    let (_, buckets) = hasher_and_buckets(&k);
    assert!(buckets >= 1 << 19, "a large table: {buckets} buckets");
    for key in ["x1", "x2", "x3"] {
        assert_eq!(c.cmd(&["SET", key, "v", "PX", "100"]), ok());
    }
    assert_eq!(c.cmd(&["SET", "stays", "here"]), ok());
    let t0 = std::time::Instant::now();
    wait_for("the expired keys to leave DBSIZE", || (c.cmd(&["DBSIZE"]) == Value::Int(1)).then_some(()));
    let took = t0.elapsed();
    assert!(took < std::time::Duration::from_secs(10), "the keys took {took:?} to go");
    assert_eq!(c.cmd(&["GET", "stays"]), Value::bulk("here"));
}

/// A field of INFO `section`.
fn info(c: &mut Resp, section: &str, name: &str) -> u64 {
    let Value::Bulk(info) = c.cmd(&["INFO", section]) else { panic!("INFO answers a bulk string") };
    let info = String::from_utf8(info).expect("INFO is text");
    let line = info.lines().find_map(|l| l.strip_prefix(&format!("{name}:")));
    line.unwrap_or_else(|| panic!("no {name} in INFO {section}: {info}")).parse().expect("a number")
}

/// A user deletes their own large sorted set: `DEL` answers 1 and the key is gone at once,
/// other clients go on being served, and its memory comes back in the background, after a
/// kill -9 too. Freeing every node in the DEL's own group made a group larger than a group may
/// be (half the mirror's log), and the DEL was refused: with the default 64 MiB log, for a
/// sorted set of a million members. Here the log is 4 MiB (groups of 2 MiB), which makes the
/// same situation with 100 000 members (about 1 900 nodes, more than a group's 1 024 ranges:
/// their gaps are joined, some 8 MB).
#[test]
fn a_sorted_set_too_large_to_free_in_one_group_is_deleted_and_freed_in_the_background() {
    let mut k = KvCluster::with("kv-lazyfree", 64 << 20, |f| {
        f.mirror.log_capacity = "4MiB".into();
        edit_kv(f, |k| k.max_bulk = "256KiB".into());
    });
    let mut c = k.client();
    assert_eq!(c.cmd(&["SET", "stays", "here"]), ok());
    let used_before = info(&mut c, "memory", "used_memory");
    // Loaded as the stall bench loads it: pipelined ZADDs of 1000 members each.
    let members = 100_000u64;
    let mut sent = 0;
    for chunk in (0..members).collect::<Vec<_>>().chunks(1000) {
        let mut args = vec!["ZADD".to_string(), "big".to_string()];
        for &j in chunk {
            args.push(j.to_string());
            args.push(format!("m{j:015}"));
        }
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        c.send(&a);
        sent += 1;
    }
    for _ in 0..sent {
        assert_eq!(c.read(), Some(Value::Int(1000)));
    }
    assert_eq!(c.cmd(&["ZCARD", "big"]), Value::Int(members as i64));
    assert!(info(&mut c, "memory", "used_memory") > used_before + (4 << 20));
    let mut other = k.client();
    assert_eq!(c.cmd(&["DEL", "big"]), Value::Int(1));
    assert_eq!(other.cmd(&["EXISTS", "big"]), Value::Int(0));
    assert_eq!(other.cmd(&["DBSIZE"]), Value::Int(1));
    for i in 0..20 {
        assert_eq!(other.cmd(&["SET", &format!("k{i}"), "v"]), ok());
        assert_eq!(other.cmd(&["GET", "stays"]), Value::bulk("here"));
    }
    let freed = |c: &mut Resp| info(c, "memory", "used_memory") <= used_before + 20 * 64;
    wait_for("the sorted set's memory to come back", || freed(&mut other).then_some(()));
    assert_eq!(info(&mut other, "memory", "lazyfree_pending_objects"), 0);
    assert_eq!(info(&mut other, "stats", "lazyfreed_objects"), 1);
    // Again, smaller (still freed in the background), killed right after the DEL: the
    // restarted server finishes whatever freeing is left.
    for chunk in (0..5000u64).collect::<Vec<_>>().chunks(1000) {
        let mut args = vec!["ZADD".to_string(), "big".to_string()];
        for &j in chunk {
            args.push(j.to_string());
            args.push(format!("m{j:015}"));
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(c.cmd(&a), Value::Int(1000));
    }
    assert_eq!(c.cmd(&["DEL", "big"]), Value::Int(1));
    k.kill();
    k.start();
    let mut c = k.client();
    assert_eq!(c.cmd(&["EXISTS", "big"]), Value::Int(0));
    assert_eq!(c.cmd(&["DBSIZE"]), Value::Int(21));
    wait_for("the sorted set's memory to come back after a restart", || freed(&mut c).then_some(()));
    assert_eq!(info(&mut c, "memory", "lazyfree_pending_objects"), 0);
}
