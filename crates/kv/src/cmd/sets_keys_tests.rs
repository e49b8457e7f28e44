//! The key commands on sets of each encoding: COPY (the copy shares nothing with its source),
//! DUMP and RESTORE (Redis 7.0's RDB types, the encoding a restored set gets), MOVE, SWAPDB and
//! RENAME (the value moves whole), OBJECT ENCODING.

use super::super::family_harness::*;
use crate::resp::Value;
use crate::store::VecMem;

fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}

fn bulk(v: Value) -> Vec<u8> {
    match v {
        Value::Bulk(b) => b,
        other => panic!("not a bulk string: {other:?}"),
    }
}

/// A harness with listpack sets enabled, and one set of each encoding: `i` (intset), `l`
/// (listpack), `t` (hashtable, several leaves).
fn three_sets() -> Harness<VecMem> {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["CONFIG", "SET", "set-max-listpack-entries", "16"]), ok());
    let mut a = vec!["SADD".to_string(), "i".into()];
    a.extend((-5..300).map(|n| (n * 1000).to_string()));
    h.cmd_owned(&a);
    h.cmd(&["SADD", "l", "a", "1", "bb"]);
    let mut a = vec!["SADD".to_string(), "t".into()];
    a.extend((0..2000).map(|n| format!("member:{n}")));
    h.cmd_owned(&a);
    for (k, e) in [("i", "intset"), ("l", "listpack"), ("t", "hashtable")] {
        assert_eq!(h.encoding(k), e);
    }
    h
}

#[test]
fn copy_of_each_encoding_shares_nothing() {
    let empty = Harness::new().store.used_bytes();
    let mut h = three_sets();
    for k in ["i", "l", "t"] {
        let (before, enc) = (h.members(k), h.encoding(k));
        let d = format!("{k}-copy");
        assert_eq!(h.cmd(&["COPY", k, &d]), i(1));
        assert_eq!(h.members(&d), before);
        assert_eq!(h.encoding(&d), enc);
        assert_eq!(h.cmd(&["COPY", k, &d]), i(0), "the destination exists");
        // Changes to the copy leave the source alone, and the other way round.
        assert_eq!(h.cmd(&["SADD", &d, "new"]), i(1));
        assert_eq!(h.cmd(&["SISMEMBER", k, "new"]), i(0));
        let first = before[0].clone();
        assert_eq!(h.cmd(&["SREM", k, &first]), i(1));
        assert_eq!(h.cmd(&["SISMEMBER", &d, &first]), i(1));
        assert_eq!(h.cmd(&["SADD", k, &first]), i(1));
        assert_eq!(h.cmd(&["DEL", &d]), i(1));
        assert_eq!(h.members(k), before, "deleting the copy leaves the source whole");
        // To another database, replacing what is there.
        h.cmd(&["SELECT", "3"]);
        h.cmd(&["SET", k, "x"]);
        h.cmd(&["SELECT", "0"]);
        assert_eq!(h.cmd(&["COPY", k, k, "DB", "3"]), i(0));
        assert_eq!(h.cmd(&["COPY", k, k, "DB", "3", "REPLACE"]), i(1));
        h.cmd(&["SELECT", "3"]);
        assert_eq!(h.members(k), before);
        assert_eq!(h.cmd(&["DEL", k]), i(1));
        h.cmd(&["SELECT", "0"]);
    }
    // Every block the sets and their copies took is free again once they are gone.
    for k in ["i", "l", "t"] {
        h.cmd(&["DEL", k]);
    }
    assert_eq!(h.cmd(&["DBSIZE"]), i(0));
    // The tree sets (and copies) are freed in the background.
    assert!(h.lazyfree() > 0);
    assert_eq!(h.store.used_bytes(), empty);
}

#[test]
fn dump_and_restore_of_each_encoding() {
    let mut h = three_sets();
    for (k, rdb_type) in [("i", 11u8), ("l", 2), ("t", 2)] {
        let (before, enc) = (h.members(k), h.encoding(k));
        let p = bulk(h.cmd(&["DUMP", k]));
        assert_eq!(p[0], rdb_type, "{k}: Redis 7.0's RDB type for a set of encoding {enc}");
        let d = format!("{k}-restored");
        assert_eq!(h.cmd_bytes(&[b"RESTORE", d.as_bytes(), b"0", &p]), ok());
        assert_eq!(h.members(&d), before);
        assert_eq!(h.encoding(&d), enc, "{k}: the encoding a new set of its members gets");
        assert_eq!(h.cmd(&["TTL", &d]), i(-1));
        assert_eq!(
            err(&h.cmd_bytes(&[b"RESTORE", d.as_bytes(), b"0", &p])),
            "BUSYKEY Target key name already exists."
        );
        assert_eq!(h.cmd_bytes(&[b"RESTORE", d.as_bytes(), b"5000", &p, b"REPLACE"]), ok());
        assert_eq!(h.cmd(&["PTTL", &d]), i(5000));
        assert_eq!(h.members(&d), before);
    }
    // A restored set gets the encoding its members call for now, as Redis loads one.
    let p = bulk(h.cmd(&["DUMP", "i"]));
    assert_eq!(h.cmd(&["CONFIG", "SET", "set-max-intset-entries", "100"]), ok());
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"i2", b"0", &p]), ok());
    assert_eq!(h.encoding("i2"), "hashtable", "305 integers past set-max-intset-entries");
    assert_eq!(h.cmd(&["SADD", "few", "1", "2", "x"]), i(3));
    assert_eq!(h.cmd(&["SREM", "few", "x"]), i(1));
    assert_eq!(h.encoding("few"), "listpack");
    let p = bulk(h.cmd(&["DUMP", "few"]));
    assert_eq!(p[0], 2);
    assert_eq!(h.cmd_bytes(&[b"RESTORE", b"few2", b"0", &p]), ok());
    assert_eq!(h.encoding("few2"), "intset", "a table of integers restores as an intset");
    assert_eq!(h.members("few2"), ["1", "2"]);
    // A damaged payload changes nothing.
    let mut bad = bulk(h.cmd(&["DUMP", "t"]));
    bad[5] ^= 1;
    assert_eq!(
        err(&h.cmd_bytes(&[b"RESTORE", b"t", b"0", &bad, b"REPLACE"])),
        "ERR DUMP payload version or checksum are wrong"
    );
    assert_eq!(h.cmd(&["SCARD", "t"]), i(2000));
}

#[test]
fn move_swapdb_and_rename_carry_each_encoding() {
    let mut h = three_sets();
    let before: Vec<(Vec<String>, String)> =
        ["i", "l", "t"].iter().map(|k| (h.members(k), h.encoding(k))).collect();
    let check = |h: &mut Harness<VecMem>, keys: [&str; 3]| {
        for (k, (m, e)) in keys.iter().zip(&before) {
            assert_eq!(&h.members(k), m, "{k}");
            assert_eq!(&h.encoding(k), e, "{k}");
        }
    };
    for k in ["i", "l", "t"] {
        assert_eq!(h.cmd(&["RENAME", k, &format!("{k}2")]), ok());
    }
    check(&mut h, ["i2", "l2", "t2"]);
    for k in ["i2", "l2", "t2"] {
        assert_eq!(h.cmd(&["MOVE", k, "5"]), i(1));
    }
    assert_eq!(h.cmd(&["DBSIZE"]), i(0));
    assert_eq!(h.cmd(&["SWAPDB", "0", "5"]), ok());
    check(&mut h, ["i2", "l2", "t2"]);
    // The sets still change as sets (a tree moved whole finds its members by their hashes).
    for k in ["i2", "l2", "t2"] {
        assert_eq!(h.cmd(&["SADD", k, "99999"]), i(1));
        assert_eq!(h.cmd(&["SREM", k, "99999"]), i(1));
    }
    assert_eq!(h.cmd(&["SISMEMBER", "t2", "member:1999"]), i(1));
    assert_eq!(h.cmd(&["SMOVE", "t2", "i2", "member:7"]), i(1));
    assert_eq!(h.encoding("i2"), "hashtable");
}
