//! The key commands this module adds, against a store in the heap, replies compared with
//! Redis's.

use crate::cmd::strings::tests::{arr, b, err, i, ok, Harness};
use crate::resp::Value;

fn bulk(v: Value) -> Vec<u8> {
    match v {
        Value::Bulk(b) => b,
        other => panic!("not a bulk string: {other:?}"),
    }
}

#[test]
fn expire_as_redis_reads_it() {
    let mut h = Harness::new();
    // Now, as a Unix time in milliseconds (the overflows below count on it).
    h.now_ms = 1_764_000_000_000;
    h.cmd(&["SET", "foo", "bar"]);
    assert_eq!(err(&h.cmd(&["EXPIRE", "foo", "x", "AB"])), "ERR Unsupported option AB", "options first");
    assert_eq!(err(&h.cmd(&["EXPIRE", "foo", "200", "XX", "AB"])), "ERR Unsupported option AB");
    assert!(err(&h.cmd(&["EXPIRE", "foo", ""])).contains("not an integer"));
    for t in [
        "9223370399119966",
        "9223372036854776",
        "10000000000000000",
        "18446744073709561",
        "-9223372036854776",
    ] {
        assert_eq!(err(&h.cmd(&["EXPIRE", "foo", t])), "ERR invalid expire time in 'expire' command", "{t}");
    }
    assert_eq!(
        err(&h.cmd(&["PEXPIRE", "foo", "9223372036854770000"])),
        "ERR invalid expire time in 'pexpire' command"
    );
    assert_eq!(h.cmd(&["TTL", "foo"]), i(-1));
    assert_eq!(h.cmd(&["PEXPIREAT", "foo", "9223372036854770000"]), i(1));
    assert_eq!(h.cmd(&["PEXPIRETIME", "foo"]), i(9223372036854770000));
    assert_eq!(h.cmd(&["EXPIRETIME", "foo"]), i(9223372036854770));
    assert_eq!(h.cmd(&["PEXPIREAT", "foo", "-9223372036854770000"]), i(1));
    assert_eq!(h.cmd(&["TTL", "foo"]), i(-2));
    // LT on a key without an expiry sets one; a negative time deletes.
    h.cmd(&["SET", "foo", "bar"]);
    assert_eq!(h.cmd(&["EXPIRE", "foo", "100", "LT"]), i(1));
    assert_eq!(h.cmd(&["EXPIRE", "foo", "200", "LT", "XX"]), i(0));
    assert_eq!(h.cmd(&["EXPIRE", "foo", "-10", "LT"]), i(1));
    assert_eq!(h.cmd(&["EXISTS", "foo"]), i(0));
    for o in ["NX", "XX", "GT", "LT"] {
        assert_eq!(h.cmd(&["EXPIRE", "none", "100", o]), i(0));
    }
    // TTL rounds to the nearest second; EXPIRETIME and friends.
    h.cmd(&["SET", "k", "v", "PX", "1499"]);
    assert_eq!(h.cmd(&["TTL", "k"]), i(1));
    h.cmd(&["SET", "k", "v", "PX", "1500"]);
    assert_eq!(h.cmd(&["TTL", "k"]), i(2));
    assert_eq!(h.cmd(&["PEXPIRETIME", "k"]), i(h.now_ms as i64 + 1500));
    assert_eq!(h.cmd(&["EXPIRETIME", "k"]), i((h.now_ms as i64 + 1500 + 500) / 1000), "rounded, as TTL");
    h.cmd(&["SET", "p", "v"]);
    assert_eq!(h.cmd(&["EXPIRETIME", "p"]), i(-1));
    assert_eq!(h.cmd(&["PEXPIRETIME", "nope"]), i(-2));
}

#[test]
fn touch_counts_the_keys_there() {
    let mut h = Harness::new();
    h.cmd(&["SET", "a", "1"]);
    h.cmd(&["SET", "b", "1", "PX", "10"]);
    h.now_ms += 20;
    assert_eq!(h.cmd(&["TOUCH", "a", "b", "c", "a"]), i(2));
}

#[test]
fn randomkey_draws_from_the_selected_database() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["RANDOMKEY"]), Value::Null);
    h.cmd(&["SET", "foo", "x"]);
    h.cmd(&["SET", "bar", "y"]);
    h.cmd(&["SET", "gone", "z", "PX", "5"]);
    h.cmd(&["SELECT", "3"]);
    h.cmd(&["SET", "elsewhere", "z"]);
    h.cmd(&["SELECT", "0"]);
    h.now_ms += 10;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..200 {
        seen.insert(bulk(h.cmd(&["RANDOMKEY"])));
    }
    assert_eq!(seen, [b"bar".to_vec(), b"foo".to_vec()].into_iter().collect());
    h.cmd(&["FLUSHDB"]);
    h.cmd(&["SET", "x", "10"]);
    h.cmd(&["DEL", "x"]);
    assert_eq!(h.cmd(&["RANDOMKEY"]), Value::Null);
}

#[test]
fn copy_strings_and_hashes() {
    let mut h = Harness::new();
    h.cmd(&["SET", "s", "foobar", "EX", "100"]);
    assert_eq!(h.cmd(&["COPY", "s", "t"]), i(1));
    assert_eq!(h.cmd(&["GET", "t"]), b("foobar"));
    assert_eq!(h.cmd(&["TTL", "t"]), i(100));
    assert_eq!(h.cmd(&["COPY", "s", "t"]), i(0), "no REPLACE");
    assert_eq!(h.cmd(&["COPY", "s", "t", "DB", "10"]), i(1));
    h.cmd(&["SET", "s", "other"]);
    assert_eq!(h.cmd(&["COPY", "s", "t", "DB", "10"]), i(0));
    assert_eq!(h.cmd(&["COPY", "s", "t", "DB", "10", "REPLACE"]), i(1));
    h.cmd(&["SELECT", "10"]);
    assert_eq!(h.cmd(&["GET", "t"]), b("other"));
    assert_eq!(h.cmd(&["TTL", "t"]), i(-1));
    h.cmd(&["SET", "t", "changed"]);
    h.cmd(&["SELECT", "0"]);
    assert_eq!(h.cmd(&["GET", "s"]), b("other"), "the copies are independent");
    assert_eq!(err(&h.cmd(&["COPY", "s", "s"])), "ERR source and destination objects are the same");
    assert_eq!(h.cmd(&["COPY", "s", "s", "DB", "1"]), i(1));
    assert_eq!(
        err(&h.cmd(&["COPY", "s", "x", "DB", "notanumber"])),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(err(&h.cmd(&["COPY", "s", "x", "DB", "16"])), "ERR DB index is out of range");
    assert_eq!(err(&h.cmd(&["COPY", "s", "x", "BAD"])), crate::cmd::SYNTAX);
    assert_eq!(h.cmd(&["COPY", "nope", "x"]), i(0));
    // A string's encoding goes with it.
    h.cmd(&["SET", "r", "1"]);
    h.cmd(&["APPEND", "r", "2"]);
    h.cmd(&["COPY", "r", "r2"]);
    assert_eq!(h.encoding("r2"), "raw");

    // A small hash and a large one (a tree, copied node by node).
    h.cmd(&["HSET", "small", "a", "1", "b", "2"]);
    assert_eq!(h.cmd(&["COPY", "small", "small2"]), i(1));
    assert_eq!(h.encoding("small2"), "listpack");
    h.cmd(&["DEL", "small"]);
    assert_eq!(h.cmd(&["HGETALL", "small2"]), arr(vec![b("a"), b("1"), b("b"), b("2")]));
    for n in 0..400 {
        let v = if n % 50 == 0 { "v".repeat(1200) } else { n.to_string() };
        h.cmd(&["HSET", "big", &format!("f{n}"), &v]);
    }
    assert_eq!(h.encoding("big"), "hashtable");
    assert_eq!(h.cmd(&["COPY", "big", "big2"]), i(1));
    assert_eq!(h.encoding("big2"), "hashtable");
    h.cmd(&["HSET", "big", "f1", "changed", "new", "field"]);
    h.cmd(&["HDEL", "big", "f2"]);
    assert_eq!(h.cmd(&["HGET", "big2", "f1"]), b("1"));
    assert_eq!(h.cmd(&["HGET", "big2", "f2"]), b("2"));
    assert_eq!(h.cmd(&["HLEN", "big2"]), i(400));
    h.cmd(&["DEL", "big"]);
    assert_eq!(h.cmd(&["HGET", "big2", "f50"]), b(&"v".repeat(1200)));
    assert_eq!(h.cmd(&["HLEN", "big2"]), i(400));
    // Replacing a hash with a copy frees the old one's tree (the heap does not leak), in the
    // background (as the DEL of big was).
    assert_eq!(h.store.lazyfree_all(1 << 30, 1024), 1);
    let used = h.store.used_bytes();
    for _ in 0..5 {
        assert_eq!(h.cmd(&["COPY", "big2", "big3", "REPLACE"]), i(1));
    }
    h.cmd(&["DEL", "big3"]);
    assert_eq!(h.store.lazyfree_all(1 << 30, 1024), 5);
    assert_eq!(h.store.used_bytes(), used);
}

#[test]
fn dump_and_restore_strings_and_hashes() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["DUMP", "nope"]), Value::Null);
    h.cmd(&["SET", "foo", "bar"]);
    let p = bulk(h.cmd(&["DUMP", "foo"]));
    assert_eq!(p, b"\x00\x03bar\n\x00\xe6\xbeI`\xeef\xfd\x17" as &[u8], "Redis's bytes");
    h.cmd(&["DEL", "foo"]);
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"0", &p]), ok());
    assert_eq!(h.cmd(&["GET", "foo"]), b("bar"));
    assert_eq!(h.cmd(&["TTL", "foo"]), i(-1));
    assert_eq!(err(&h.cmd_bytes(&[b"RESTORE", b"foo", b"0", &p])), "BUSYKEY Target key name already exists.");
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"5000", &p, b"REPLACE"]), ok());
    assert_eq!(h.cmd(&["PTTL", "foo"]), i(5000));
    let at = (h.now_ms + 3000).to_string();
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", at.as_bytes(), &p, b"REPLACE", b"ABSTTL"]), ok());
    assert_eq!(h.cmd(&["PTTL", "foo"]), i(3000));
    // A time already past: OK, and no key (the one replaced goes).
    let past = (h.now_ms - 3000).to_string();
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", past.as_bytes(), &p, b"ABSTTL", b"REPLACE"]), ok());
    assert_eq!(h.cmd(&["EXISTS", "foo"]), i(0));
    // A TTL whose end from now is past the integers: Redis's sum wraps to a time past, so no
    // key (the one replaced goes).
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"0", &p]), ok());
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"9223372036854775807", &p, b"REPLACE"]), ok());
    assert_eq!(h.cmd(&["EXISTS", "foo"]), i(0));
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"9223372036854775807", &p, b"ABSTTL"]), ok());
    assert_eq!(h.cmd(&["PEXPIRETIME", "foo"]), i(i64::MAX));
    h.cmd(&["DEL", "foo"]);
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"0", &p, b"IDLETIME", b"1000"]), ok());
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"foo", b"0", &p, b"REPLACE", b"FREQ", b"100"]), ok());
    for (args, e) in [
        (vec![&b"invalid-option"[..]], crate::cmd::SYNTAX),
        (vec![b"IDLETIME", b"-1"], "ERR Invalid IDLETIME value, must be >= 0"),
        (vec![b"FREQ", b"256"], "ERR Invalid FREQ value, must be >= 0 and <= 255"),
        (vec![b"IDLETIME", b"1", b"FREQ", b"1"], crate::cmd::SYNTAX),
    ] {
        let mut a: Vec<&[u8]> = vec![b"RESTORE", b"new", b"0", &p];
        a.extend(args);
        assert_eq!(err(&h.cmd_bytes(&a)), e);
    }
    assert_eq!(err(&h.cmd_bytes(&[b"RESTORE", b"new", b"-1", &p])), "ERR Invalid TTL value, must be >= 0");
    assert_eq!(
        err(&h.cmd(&["RESTORE", "new", "0", "..."])),
        "ERR DUMP payload version or checksum are wrong"
    );
    let mut bad = p.clone();
    bad[1] = 9;
    assert_eq!(
        err(&h.cmd_bytes(&[b"RESTORE", b"new", b"0", &bad])),
        "ERR DUMP payload version or checksum are wrong"
    );
    let mut body = b"\x00\x09bar".to_vec();
    crate::cmd::rdb::seal(&mut body);
    assert_eq!(err(&h.cmd_bytes(&[b"RESTORE", b"new", b"0", &body])), "ERR Bad data format");
    // A kind not read yet (streams: RDB type 15) is refused by name.
    let mut stream = b"\x0f\x00".to_vec();
    crate::cmd::rdb::seal(&mut stream);
    assert!(err(&h.cmd_bytes(&[b"RESTORE", b"new", b"0", &stream])).contains("cannot RESTORE a stream"));
    assert_eq!(h.cmd(&["EXISTS", "new"]), i(0));

    // Strings encode as SET would make them.
    h.cmd(&["SET", "n", "12345"]);
    let p = bulk(h.cmd(&["DUMP", "n"]));
    h.cmd_bytes(&[b"RESTORE", b"n2", b"0", &p]);
    assert_eq!(h.encoding("n2"), "int");

    // Hashes: a small one as a listpack, a large one as a table; each back in its encoding.
    h.cmd(&["HSET", "h", "a", "1", "b", "hello"]);
    let p = bulk(h.cmd(&["DUMP", "h"]));
    assert_eq!(p[0], 16);
    h.cmd_bytes(&[b"RESTORE", b"h2", b"0", &p]);
    assert_eq!(h.encoding("h2"), "listpack");
    assert_eq!(h.cmd(&["HGETALL", "h2"]), arr(vec![b("a"), b("1"), b("b"), b("hello")]));
    for n in 0..300 {
        h.cmd(&["HSET", "big", &format!("f{n}"), &n.to_string()]);
    }
    let p = bulk(h.cmd(&["DUMP", "big"]));
    assert_eq!(p[0], 4);
    h.cmd_bytes(&[b"RESTORE", b"big2", b"0", &p]);
    assert_eq!(h.encoding("big2"), "hashtable");
    assert_eq!(h.cmd(&["HLEN", "big2"]), i(300));
    assert_eq!(h.cmd(&["HGET", "big2", "f299"]), b("299"));
    // A small hash dumped as a table comes back small; a listpack past the limits, large.
    h.settings.encodings.hash_max_entries = 1000;
    h.cmd_bytes(&[b"RESTORE", b"big3", b"0", &p]);
    assert_eq!(h.encoding("big3"), "listpack");
    h.settings.encodings.hash_max_entries = 1;
    let p = bulk(h.cmd(&["DUMP", "h2"]));
    h.cmd_bytes(&[b"RESTORE", b"h3", b"0", &p]);
    assert_eq!(h.encoding("h3"), "hashtable");
}

/// RESTORE takes a client's bytes: whatever they are, it answers and the store stays sound.
#[test]
fn restore_never_panics_on_damaged_payloads() {
    let mut h = Harness::new();
    for n in 0..200 {
        h.cmd(&["HSET", "big", &format!("f{n}"), &"x".repeat(n % 70)]);
    }
    h.cmd(&["HSET", "small", "a", "1"]);
    h.cmd(&["SET", "s", &"ab".repeat(30)]);
    let payloads: Vec<Vec<u8>> = ["big", "small", "s"].iter().map(|k| bulk(h.cmd(&["DUMP", k]))).collect();
    let mut x = 99u64;
    for p in &payloads {
        for _ in 0..300 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut q = p[..p.len() - 10].to_vec();
            let at = (x >> 33) as usize % q.len();
            q[at] = (x >> 20) as u8;
            crate::cmd::rdb::seal(&mut q);
            match h.cmd_bytes(&[b"RESTORE", b"target", b"0", &q, b"REPLACE"]) {
                Value::Simple(_) | Value::Error(_) => {}
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(h.cmd(&["HLEN", "big"]), i(200));
}

#[test]
fn copy_lists_small_and_chained() {
    let mut h = Harness::new();
    h.cmd(&["RPUSH", "small", "a", "b", "c"]);
    assert_eq!(h.cmd(&["COPY", "small", "small2"]), i(1));
    h.cmd(&["RPUSH", "small", "d"]);
    assert_eq!(h.cmd(&["LRANGE", "small2", "0", "-1"]), arr(vec![b("a"), b("b"), b("c")]));
    let mut want = Vec::new();
    for n in 0..2000 {
        let v = if n % 100 == 0 { "x".repeat(5000) } else { n.to_string() };
        h.cmd(&["RPUSH", "big", &v]);
        want.push(b(&v));
    }
    h.cmd(&["EXPIRE", "big", "50"]);
    assert_eq!(h.cmd(&["COPY", "big", "big2", "DB", "3"]), i(1));
    // The copy is a chain of its own: the source changes and goes, the copy stays.
    h.cmd(&["LPOP", "big", "10"]);
    h.cmd(&["LSET", "big", "5", "changed"]);
    h.cmd(&["DEL", "big"]);
    h.cmd(&["SELECT", "3"]);
    assert_eq!(h.cmd(&["LRANGE", "big2", "0", "-1"]), arr(want));
    assert_eq!(h.cmd(&["TTL", "big2"]), i(50));
    assert_eq!(h.cmd(&["LLEN", "big2"]), i(2000));
}
