//! HSTRLEN, HINCRBYFLOAT, HRANDFIELD and HSCAN, in both of a hash's encodings.

use super::super::family_harness::*;
use super::super::{NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Value;
use std::collections::BTreeSet;

/// A hash of `n` fields `f0 ..` with values `v0 ..`, in the encoding that many fields get.
fn hash(h: &mut Harness<crate::store::VecMem>, key: &str, n: usize) {
    let mut a = vec!["HSET".to_string(), key.to_string()];
    for j in 0..n {
        a.push(format!("f{j}"));
        a.push(format!("v{j}"));
    }
    h.cmd_owned(&a);
}

#[test]
fn hstrlen_and_hincrbyfloat() {
    let mut h = Harness::new();
    for (key, n, enc) in [("small", 5, "listpack"), ("big", 300, "hashtable")] {
        hash(&mut h, key, n);
        assert_eq!(h.encoding(key), enc);
        assert_eq!(h.cmd(&["HSTRLEN", key, "f3"]), i(2));
        assert_eq!(h.cmd(&["HSTRLEN", key, "nope"]), i(0));
        for v in ["-9223372036854775808", "9223372036854775807", "9223372036854775808", "", "0", "-1", "x"] {
            h.cmd(&["HSET", key, "field", v]);
            assert_eq!(h.cmd(&["HSTRLEN", key, "field"]), i(v.len() as i64));
        }
        assert_eq!(h.cmd(&["HINCRBYFLOAT", key, "tmp", "2.5"]), b("2.5"));
        assert_eq!(h.cmd(&["HINCRBYFLOAT", key, "tmp", "3.5"]), b("6"));
        assert_eq!(h.cmd(&["HGET", key, "tmp"]), b("6"));
        h.cmd(&["HSET", key, "tmp", "17179869184"]);
        assert_eq!(h.cmd(&["HINCRBYFLOAT", key, "tmp", "17179869184"]), b("34359738368"));
        for bad in [" 11", "11 ", "1\u{0}2"] {
            h.cmd(&["HSET", key, "str", bad]);
            assert_eq!(err(&h.cmd(&["HINCRBYFLOAT", key, "str", "1"])), "ERR hash value is not a float");
        }
        assert_eq!(h.encoding(key), enc);
    }
    h.cmd(&["DEL", "f"]);
    assert_eq!(h.cmd(&["HINCRBYFLOAT", "f", "x", "1.23"]), b("1.23"));
    assert_eq!(h.cmd(&["HINCRBYFLOAT", "f", "x", "0.77"]), b("2"));
    assert_eq!(h.cmd(&["HINCRBYFLOAT", "f", "x", "-0.1"]), b("1.9"));
    assert_eq!(err(&h.cmd(&["HINCRBYFLOAT", "g", "x", "+inf"])), "ERR value is NaN or Infinity");
    assert_eq!(h.cmd(&["EXISTS", "g"]), i(0));
    assert_eq!(err(&h.cmd(&["HINCRBYFLOAT", "g", "x", "abc"])), "ERR value is not a valid float");
    h.cmd(&["HSET", "g", "x", "1e4932"]);
    assert_eq!(
        err(&h.cmd(&["HINCRBYFLOAT", "g", "x", "1e4932"])),
        "ERR increment would produce NaN or Infinity"
    );
    h.cmd(&["SET", "s", "1"]);
    assert_eq!(err(&h.cmd(&["HINCRBYFLOAT", "s", "x", "1"])), WRONGTYPE);
    assert_eq!(err(&h.cmd(&["HSTRLEN", "s", "x"])), WRONGTYPE);
    // A value that grows past hash-max-listpack-value moves the hash to a tree.
    h.cmd(&["CONFIG", "SET", "hash-max-listpack-value", "8"]);
    h.cmd(&["HSET", "lp", "tmp", "0"]);
    h.cmd(&["HSET", "ht", "tmp", "0"]);
    assert_eq!(h.cmd(&["HINCRBYFLOAT", "lp", "tmp", "0.000005"]), b("0.000005"));
    assert_eq!(h.cmd(&["HINCRBYFLOAT", "ht", "tmp", "0.0000005"]), b("0.0000005"));
    assert_eq!(h.encoding("lp"), "listpack");
    assert_eq!(h.encoding("ht"), "hashtable");
}

#[test]
fn hrandfield_in_each_encoding() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["HRANDFIELD", "nokey"]), Value::Null);
    assert_eq!(h.cmd(&["HRANDFIELD", "nokey", "100"]), Value::Array(vec![]));
    hash(&mut h, "x", 1);
    assert_eq!(
        err(&h.cmd(&["HRANDFIELD", "x", "-9223372036854770000", "WITHVALUES"])),
        "ERR value is out of range"
    );
    assert!(err(&h.cmd(&["HRANDFIELD", "x", "-9223372036854775808"])).contains("value is out of range"));
    assert_eq!(err(&h.cmd(&["HRANDFIELD", "x", "1", "WITHVALUE"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["HRANDFIELD", "x", "y"])), NOT_INT);
    assert_eq!(h.cmd(&["HRANDFIELD", "x", "0"]), Value::Array(vec![]));
    for (key, n, enc) in [("small", 10, "listpack"), ("big", 10, "hashtable")] {
        if enc == "hashtable" {
            h.cmd(&["CONFIG", "SET", "hash-max-listpack-entries", "4"]);
        }
        hash(&mut h, key, n);
        assert_eq!(h.encoding(key), enc);
        let fields: Vec<String> = (0..n).map(|j| format!("f{j}")).collect();
        let res = strings(&h.cmd(&["HRANDFIELD", key, "-1000"]));
        assert_eq!(res.len(), 1000);
        assert!(chi_square(&res) < 40.0, "{enc}: {}", chi_square(&res));
        let res = strings(&h.cmd(&["HRANDFIELD", key, "-20", "WITHVALUES"]));
        assert_eq!(res.len(), 40);
        for p in res.chunks(2) {
            assert_eq!(p[1], format!("v{}", &p[0][1..]), "a field with its own value");
        }
        for size in ["10", "20"] {
            let mut res = strings(&h.cmd(&["HRANDFIELD", key, size]));
            res.sort();
            let mut want = fields.clone();
            want.sort();
            assert_eq!(res, want);
            assert_eq!(strings(&h.cmd(&["HRANDFIELD", key, size, "WITHVALUES"])).len(), 20);
        }
        for size in [8usize, 2] {
            let mut all = Vec::new();
            for _ in 0..1000 / size {
                let res = strings(&h.cmd(&["HRANDFIELD", key, &size.to_string()]));
                assert_eq!(res.iter().collect::<BTreeSet<_>>().len(), size);
                all.extend(res);
            }
            assert!(chi_square(&all) < 40.0, "{enc} {size}: {}", chi_square(&all));
        }
        assert!(fields.contains(
            &String::from_utf8(match h.cmd(&["HRANDFIELD", key]) {
                Value::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .unwrap()
        ));
    }
    // RESP3: pairs of field and value.
    h.cmd(&["HELLO", "3"]);
    let Value::Array(res) = h.cmd(&["HRANDFIELD", "big", "3", "WITHVALUES"]) else { panic!() };
    assert_eq!(res.len(), 3);
    assert!(res.iter().all(|p| matches!(p, Value::Array(kv) if kv.len() == 2)));
    let Value::Array(res) = h.cmd(&["HRANDFIELD", "big", "-3", "WITHVALUES"]) else { panic!() };
    assert!(res.iter().all(|p| matches!(p, Value::Array(kv) if kv.len() == 2)));
}

#[test]
fn hscan_of_a_blob_and_of_a_tree() {
    let mut h = Harness::new();
    h.cmd(&["HMSET", "p", "foo", "1", "fab", "2", "fiz", "3", "foobar", "10", "1", "a"]);
    let Value::Array(parts) = h.cmd(&["HSCAN", "p", "0", "MATCH", "foo*", "COUNT", "10000"]) else {
        panic!()
    };
    assert_eq!(parts[0], b("0"));
    assert_eq!(strings(&parts[1]), vec!["foo", "1", "foobar", "10"]);
    assert_eq!(h.cmd(&["HSCAN", "nokey", "0"]), Value::Array(vec![b("0"), Value::Array(vec![])]));
    assert_eq!(err(&h.cmd(&["HSCAN", "p", "-x"])), "ERR invalid cursor");
    h.cmd(&["SET", "s", "1"]);
    assert_eq!(err(&h.cmd(&["HSCAN", "s", "0"])), WRONGTYPE);
    hash(&mut h, "t", 1000);
    assert_eq!(h.encoding("t"), "hashtable");
    let (mut cursor, mut seen, mut calls) = ("0".to_string(), Vec::new(), 0);
    loop {
        let Value::Array(parts) = h.cmd(&["HSCAN", "t", &cursor, "COUNT", "50"]) else { panic!() };
        let Value::Bulk(c) = &parts[0] else { panic!() };
        cursor = String::from_utf8(c.clone()).unwrap();
        let got = strings(&parts[1]);
        assert!(got.len() <= 2 * 60, "about COUNT fields a call: {}", got.len());
        for p in got.chunks(2) {
            if p[0].starts_with('f') {
                assert_eq!(p[1], format!("v{}", &p[0][1..]));
            }
            seen.push(p[0].clone());
        }
        calls += 1;
        // Changes between calls: fields f900.. go, new ones come.
        h.cmd(&["HDEL", "t", &format!("f{}", 900 + calls)]);
        h.cmd(&["HSET", "t", &format!("new{calls}"), "x"]);
        if cursor == "0" {
            break;
        }
    }
    assert!(calls >= 18, "{calls} calls");
    let seen: BTreeSet<String> = seen.into_iter().collect();
    for j in 0..900 {
        assert!(seen.contains(&format!("f{j}")), "field f{j} was there throughout");
    }
    // A cursor past every hash ends the scan.
    let Value::Array(p) = h.cmd(&["HSCAN", "t", "18446744073709551615", "COUNT", "1"]) else { panic!() };
    assert_eq!(p[0], b("0"));
}

#[test]
fn a_long_argument_makes_a_tree_even_if_replaced_in_the_same_command() {
    // Redis 7.0 converts before setting, on the arguments' lengths (hashTypeTryConversion).
    let mut h = Harness::new();
    let long = "v".repeat(65);
    h.cmd(&["HSET", "h", "f", &long, "f", "short"]);
    assert_eq!(h.cmd(&["HGET", "h", "f"]), b("short"));
    assert_eq!(h.encoding("h"), "hashtable");
    h.cmd(&["HSET", "small", "f", &"v".repeat(64), "f", "short"]);
    assert_eq!(h.encoding("small"), "listpack");
}
