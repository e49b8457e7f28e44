//! Set commands against a store in memory: replies compared with Redis 7.0's, the encodings and
//! their conversions, random picks tested for uniformity, SSCAN's guarantee under changes, a
//! model of random commands, and crashes at every write.

use super::super::family_harness::*;
use super::super::{NOT_INT, SYNTAX, WRONGTYPE};
use crate::resp::Value;
use crate::store::{StoreError, VecMem, KIND_SET};
use std::collections::{BTreeMap, BTreeSet};

fn sorted(v: &Value) -> Vec<String> {
    let mut s = strings(v);
    s.sort();
    s
}
fn list(items: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = items.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}
fn sadd(h: &mut Harness<VecMem>, key: &str, members: impl IntoIterator<Item = String>) -> Value {
    let mut a = vec!["SADD".to_string(), key.to_string()];
    a.extend(members);
    h.cmd_owned(&a)
}

#[test]
fn basics_in_each_encoding() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["SADD", "s", "foo"]), i(1));
    assert_eq!(h.encoding("s"), "hashtable");
    assert_eq!(h.cmd(&["SADD", "s", "bar", "bar"]), i(1));
    assert_eq!(h.cmd(&["SADD", "s", "bar"]), i(0));
    assert_eq!(h.cmd(&["SCARD", "s"]), i(2));
    assert_eq!(h.cmd(&["SISMEMBER", "s", "foo"]), i(1));
    assert_eq!(h.cmd(&["SISMEMBER", "s", "bla"]), i(0));
    assert_eq!(h.cmd(&["SMISMEMBER", "s", "bla", "foo"]), Value::Array(vec![i(0), i(1)]));
    assert_eq!(h.members("s"), list(&["bar", "foo"]));
    assert_eq!(h.cmd(&["SADD", "n", "17", "16"]), i(2));
    assert_eq!(h.encoding("n"), "intset");
    assert_eq!(h.cmd(&["SISMEMBER", "n", "16"]), i(1));
    assert_eq!(h.cmd(&["SISMEMBER", "n", "016"]), i(0));
    assert_eq!(h.cmd(&["SMEMBERS", "n"]), Value::Array(vec![b("16"), b("17")]));
    assert_eq!(h.cmd(&["SREM", "n", "16", "99"]), i(1));
    assert_eq!(h.cmd(&["SREM", "n", "17"]), i(1));
    assert_eq!(h.cmd(&["EXISTS", "n"]), i(0), "an emptied set is removed");
    assert_eq!(h.cmd(&["SMISMEMBER", "nokey", "a", "b"]), Value::Array(vec![i(0), i(0)]));
    assert_eq!(h.cmd(&["SCARD", "nokey"]), i(0));
    assert_eq!(h.cmd(&["SMEMBERS", "nokey"]), Value::Array(vec![]));
    assert_eq!(h.cmd(&["SET", "str", "x"]), Value::Simple(b"OK".to_vec()));
    for c in [&["SADD", "str", "a"][..], &["SMEMBERS", "str"], &["SISMEMBER", "str", "a"], &["SCARD", "str"]]
    {
        assert_eq!(err(&h.cmd(c)), WRONGTYPE, "{c:?}");
    }
    assert_eq!(h.cmd(&["TYPE", "s"]), Value::Simple(b"set".to_vec()));
    assert_eq!(err(&h.cmd(&["SMISMEMBER", "s"])), "ERR wrong number of arguments for 'smismember' command");
    // Redis 7.2's listpack sets, when enabled.
    assert_eq!(h.cmd(&["CONFIG", "SET", "set-max-listpack-entries", "4"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.cmd(&["SADD", "l", "a", "1", "b"]), i(3));
    assert_eq!(h.encoding("l"), "listpack");
    assert_eq!(h.cmd(&["SREM", "l", "1"]), i(1));
    assert_eq!(h.members("l"), list(&["a", "b"]));
    assert_eq!(h.cmd(&["SADD", "l", "c", "d", "e"]), i(3));
    assert_eq!(h.encoding("l"), "hashtable");
    assert_eq!(h.cmd(&["SADD", "li", "1", "2"]), i(2));
    assert_eq!(h.cmd(&["SADD", "li", "x"]), i(1));
    assert_eq!(h.encoding("li"), "listpack", "an intset with a string fits a listpack");
}

#[test]
fn intsets_convert_past_their_limit_or_with_a_string_and_never_back() {
    let mut h = Harness::new();
    assert_eq!(sadd(&mut h, "s", (0..512).map(|n| n.to_string())), i(512));
    assert_eq!(h.encoding("s"), "intset");
    assert_eq!(h.cmd(&["SADD", "s", "512"]), i(1));
    assert_eq!(h.encoding("s"), "hashtable");
    assert_eq!(h.cmd(&["SREM", "s", "512", "511"]), i(2));
    assert_eq!(h.encoding("s"), "hashtable", "never back");
    assert_eq!(h.cmd(&["SADD", "t", "1", "2", "3"]), i(3));
    assert_eq!(h.cmd(&["SADD", "t", "a"]), i(1));
    assert_eq!(h.encoding("t"), "hashtable");
    assert_eq!(h.cmd(&["SADD", "big", "213244124402402314402033402"]), i(1));
    assert_eq!(h.encoding("big"), "hashtable");
    assert_eq!(h.cmd(&["SISMEMBER", "big", "213244124402402314402033402"]), i(1));
    // Every width of integer, and the extremes.
    let vals = ["-9223372036854775808", "9223372036854775807", "-70000", "40000", "-3", "0"];
    assert_eq!(h.cmd(&[&["SADD", "w"][..], &vals].concat()), i(6));
    assert_eq!(h.encoding("w"), "intset");
    let mut want: Vec<i64> = vals.iter().map(|v| v.parse().unwrap()).collect();
    want.sort_unstable();
    assert_eq!(strings(&h.cmd(&["SMEMBERS", "w"])), want.iter().map(|v| v.to_string()).collect::<Vec<_>>());
    // A configured lower limit takes effect at the next change.
    h.cmd(&["CONFIG", "SET", "set-max-intset-entries", "3"]);
    assert_eq!(h.cmd(&["SADD", "x", "1", "2", "3"]), i(3));
    assert_eq!(h.encoding("x"), "intset");
    assert_eq!(h.cmd(&["SADD", "x", "4"]), i(1));
    assert_eq!(h.encoding("x"), "hashtable");
}

#[test]
fn inter_union_diff_and_their_stores() {
    let mut h = Harness::new();
    for (large, enc) in [("200", "intset"), ("foo", "hashtable")] {
        h.cmd(&["DEL", "set1", "set2", "set3", "set4", "set5"]);
        sadd(&mut h, "set1", (0..200).map(|n| n.to_string()).chain([large.to_string()]));
        sadd(&mut h, "set2", (195..395).map(|n| n.to_string()).chain([large.to_string()]));
        sadd(&mut h, "set3", ["199", "195", "1000", "2000", large].map(String::from));
        sadd(&mut h, "set4", (5..200).map(|n| n.to_string()).chain([large.to_string()]));
        sadd(&mut h, "set5", ["0".to_string(), large.to_string()]);
        for k in ["set1", "set2", "set3", "set4", "set5"] {
            assert_eq!(h.encoding(k), enc);
        }
        let mut want: Vec<String> = (195..200).map(|n| n.to_string()).chain([large.to_string()]).collect();
        want.sort();
        assert_eq!(sorted(&h.cmd(&["SINTER", "set1", "set2"])), want);
        assert_eq!(h.cmd(&["SINTERCARD", "2", "set1", "set2"]), i(6));
        assert_eq!(h.cmd(&["SINTERCARD", "2", "set1", "set2", "LIMIT", "3"]), i(3));
        assert_eq!(h.cmd(&["SINTERCARD", "2", "set1", "set2", "limit", "0"]), i(6));
        assert_eq!(h.cmd(&["SINTERSTORE", "res", "set1", "set2"]), i(6));
        assert_eq!(h.encoding("res"), enc);
        assert_eq!(h.members("res"), want);
        assert_eq!(sorted(&h.cmd(&["SINTER", "set1", "set2", "set3"])), list(&["195", "199", large]));
        let union: BTreeSet<String> = (0..395).map(|n| n.to_string()).chain([large.to_string()]).collect();
        assert_eq!(
            sorted(&h.cmd(&["SUNION", "nokey", "set1", "set2", "nokey2"])),
            union.iter().cloned().collect::<Vec<_>>()
        );
        assert_eq!(h.cmd(&["SUNIONSTORE", "res", "set1", "set2"]), i(union.len() as i64));
        assert_eq!(h.encoding("res"), enc, "{} members", union.len());
        assert_eq!(sorted(&h.cmd(&["SDIFF", "set1", "set4"])), list(&["0", "1", "2", "3", "4"]));
        assert_eq!(sorted(&h.cmd(&["SDIFF", "set1", "set4", "set5"])), list(&["1", "2", "3", "4"]));
        assert_eq!(h.cmd(&["SDIFFSTORE", "res", "set1", "set4", "set5"]), i(4));
        assert_eq!(h.encoding("res"), "intset");
        assert_eq!(h.cmd(&["SDIFF", "set1", "set1", "set1"]), Value::Array(vec![]));
    }
    // Missing keys are empty sets; a key of another type is refused and changes nothing.
    h.cmd(&["SET", "str", "x"]);
    h.cmd(&["DEL", "set3"]);
    h.cmd(&["SADD", "set3", "e"]);
    for c in [
        &["SINTERSTORE", "set3", "str", "nokey"][..],
        &["SINTERSTORE", "set3", "nokey", "str"],
        &["SUNIONSTORE", "set3", "set1", "str"],
        &["SDIFFSTORE", "set3", "nokey", "str"],
        &["SDIFF", "str", "set1"],
        &["SINTERCARD", "2", "nokey", "str"],
    ] {
        assert_eq!(err(&h.cmd(c)), WRONGTYPE, "{c:?}");
    }
    assert_eq!(h.members("set3"), list(&["e"]));
    assert_eq!(h.cmd(&["SINTERSTORE", "set3", "set1", "nokey"]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "set3"]), i(0), "an empty result removes the destination");
    h.cmd(&["SET", "res", "xxx"]);
    assert_eq!(h.cmd(&["SUNIONSTORE", "res", "nokey1", "nokey2"]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "res"]), i(0));
    // A destination that held a string, with an expiry: a plain set now.
    h.cmd(&["SET", "res", "xxx", "EX", "100"]);
    assert_eq!(h.cmd(&["SUNIONSTORE", "res", "set5"]), i(2));
    assert_eq!(h.cmd(&["TTL", "res"]), i(-1));
    // Errors of SINTERCARD, as Redis words them.
    for (c, e) in [
        (&["SINTERCARD", "0", "s"][..], "ERR numkeys should be greater than 0"),
        (&["SINTERCARD", "a", "s"], "ERR numkeys should be greater than 0"),
        (&["SINTERCARD", "2", "s"], "ERR Number of keys can't be greater than number of args"),
        (&["SINTERCARD", "1", "s", "s2"], SYNTAX),
        (&["SINTERCARD", "1", "s", "LIMIT"], SYNTAX),
        (&["SINTERCARD", "1", "s", "LIMIT", "-1"], "ERR LIMIT can't be negative"),
        (&["SINTERCARD", "1", "s", "LIMIT", "a"], "ERR LIMIT can't be negative"),
    ] {
        assert_eq!(err(&h.cmd(c)), e, "{c:?}");
    }
    assert_eq!(h.cmd(&["SINTERCARD", "1", "nokey", "LIMIT", "10"]), i(0));
}

#[test]
fn smove_between_encodings() {
    let mut h = Harness::new();
    let setup = |h: &mut Harness<VecMem>| {
        h.cmd(&["DEL", "s1", "s2", "s3"]);
        h.cmd(&["SADD", "s1", "1", "a", "b"]);
        h.cmd(&["SADD", "s2", "2", "3", "4"]);
    };
    setup(&mut h);
    assert_eq!(h.cmd(&["SMOVE", "s1", "s2", "a"]), i(1));
    assert_eq!(h.members("s1"), list(&["1", "b"]));
    assert_eq!(h.members("s2"), list(&["2", "3", "4", "a"]));
    assert_eq!(h.encoding("s2"), "hashtable");
    setup(&mut h);
    assert_eq!(h.cmd(&["SMOVE", "s1", "s2", "1"]), i(1));
    assert_eq!(h.encoding("s2"), "intset");
    setup(&mut h);
    assert_eq!(h.cmd(&["SMOVE", "s2", "s3", "2"]), i(1));
    assert_eq!(h.encoding("s3"), "intset");
    assert_eq!(h.cmd(&["SMOVE", "s1", "s2", "foo"]), i(0));
    assert_eq!(h.cmd(&["SMOVE", "s1", "s1", "foo"]), i(0));
    assert_eq!(h.cmd(&["SMOVE", "s1", "s1", "a"]), i(1));
    assert_eq!(h.members("s1"), list(&["1", "a", "b"]));
    assert_eq!(h.cmd(&["SMOVE", "nokey", "s2", "foo"]), i(0));
    h.cmd(&["SET", "x", "10"]);
    assert_eq!(err(&h.cmd(&["SMOVE", "x", "s2", "foo"])), WRONGTYPE);
    assert_eq!(err(&h.cmd(&["SMOVE", "s2", "x", "3"])), WRONGTYPE);
    assert_eq!(h.cmd(&["SMOVE", "nokey", "x", "3"]), i(0), "a missing source is 0 before any type check");
    // The last member moved: the source is gone.
    h.cmd(&["SADD", "one", "z"]);
    assert_eq!(h.cmd(&["SMOVE", "one", "s1", "z"]), i(1));
    assert_eq!(h.cmd(&["EXISTS", "one"]), i(0));
}

#[test]
fn spop_and_srandmember() {
    let mut h = Harness::new();
    for (enc, contents) in [("hashtable", ["a", "b", "c"]), ("intset", ["1", "2", "3"])] {
        h.cmd(&[&["SADD", "s"][..], &contents].concat());
        assert_eq!(h.encoding("s"), enc);
        let mut got: Vec<String> =
            (0..3).map(|_| strings(&Value::Array(vec![h.cmd(&["SPOP", "s"])]))[0].clone()).collect();
        got.sort();
        assert_eq!(got, list(&contents));
        assert_eq!(h.cmd(&["EXISTS", "s"]), i(0));
    }
    let letters: Vec<String> = ('a'..='z').map(|c| c.to_string()).collect();
    let numbers: Vec<String> = (1..=26).map(|n| n.to_string()).collect();
    for contents in [&letters, &numbers] {
        sadd(&mut h, "s", contents.iter().cloned());
        let mut all = Vec::new();
        for n in ["11", "9", "0", "4", "1", "0", "1", "0"] {
            all.extend(strings(&h.cmd(&["SPOP", "s", n])));
        }
        all.sort();
        let mut want = contents.clone();
        want.sort();
        assert_eq!(all, want);
        assert_eq!(h.cmd(&["SCARD", "s"]), i(0));
    }
    sadd(&mut h, "s", (1..=20).map(|n| n.to_string()));
    assert_eq!(strings(&h.cmd(&["SPOP", "s", "30"])).len(), 20);
    assert_eq!(h.cmd(&["SPOP", "nokey", "100"]), Value::Array(vec![]));
    assert_eq!(h.cmd(&["SPOP", "nokey"]), Value::Null);
    assert_eq!(err(&h.cmd(&["SPOP", "s", "-1"])), "ERR value is out of range, must be positive");
    assert_eq!(err(&h.cmd(&["SPOP", "s", "x"])), "ERR value is out of range, must be positive");
    assert_eq!(err(&h.cmd(&["SPOP", "s", "1", "2"])), SYNTAX);
    assert_eq!(h.cmd(&["SRANDMEMBER", "nokey"]), Value::Null);
    assert_eq!(h.cmd(&["SRANDMEMBER", "nokey", "100"]), Value::Array(vec![]));
    h.cmd(&["SADD", "s", "a"]);
    assert_eq!(h.cmd(&["SRANDMEMBER", "s", "0"]), Value::Array(vec![]));
    assert_eq!(
        err(&h.cmd(&["SRANDMEMBER", "s", "-9223372036854775808"])),
        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
    );
    assert_eq!(err(&h.cmd(&["SRANDMEMBER", "s", "x"])), NOT_INT);
    // Uniform: chi-square with 9 degrees of freedom below 40 (a chance of 1e-5), as Redis tests.
    let hashed = ["1", "5", "10", "50", "125", "MARY", "PATRICIA", "LINDA", "BARBARA", "ELIZABETH"];
    let ints = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    for (enc, contents) in [("hashtable", hashed), ("intset", ints)] {
        h.cmd(&["DEL", "s"]);
        h.cmd(&[&["SADD", "s"][..], &contents].concat());
        assert_eq!(h.encoding("s"), enc);
        let res = strings(&h.cmd(&["SRANDMEMBER", "s", "-1000"]));
        assert_eq!(res.len(), 1000);
        assert!(chi_square(&res) < 40.0, "{enc}: {}", chi_square(&res));
        for size in [8, 2] {
            let mut all = Vec::new();
            for _ in 0..1000 / size {
                let res = strings(&h.cmd(&["SRANDMEMBER", "s", &size.to_string()]));
                assert_eq!(res.len(), size);
                assert_eq!(res.iter().collect::<BTreeSet<_>>().len(), size, "distinct");
                all.extend(res);
            }
            assert!(chi_square(&all) < 40.0, "{enc} {size}: {}", chi_square(&all));
        }
        assert_eq!(sorted(&h.cmd(&["SRANDMEMBER", "s", "100"])), list(&contents));
    }
    // A large tree: every member reachable, uniformly.
    h.cmd(&["DEL", "s"]);
    sadd(&mut h, "s", (0..3000).map(|n| format!("m:{n}")));
    let res = strings(&h.cmd(&["SRANDMEMBER", "s", "-30000"]));
    let buckets: Vec<String> =
        res.iter().map(|m| (m[2..].parse::<u32>().unwrap() % 10).to_string()).collect();
    assert!(chi_square(&buckets) < 40.0, "{}", chi_square(&buckets));
    let popped = strings(&h.cmd(&["SPOP", "s", "2990"]));
    assert_eq!(popped.iter().collect::<BTreeSet<_>>().len(), 2990);
    assert_eq!(h.cmd(&["SCARD", "s"]), i(10));
}

#[test]
fn resp3_replies_sets_where_redis_does() {
    let mut h = Harness::new();
    h.cmd(&["HELLO", "3"]);
    h.cmd(&["SADD", "s", "a", "b"]);
    assert!(matches!(h.cmd(&["SMEMBERS", "s"]), Value::Set(_)));
    assert!(matches!(h.cmd(&["SINTER", "s", "s"]), Value::Set(_)));
    assert!(matches!(h.cmd(&["SUNION", "s"]), Value::Set(_)));
    assert!(matches!(h.cmd(&["SPOP", "s", "1"]), Value::Set(_)));
    assert!(matches!(h.cmd(&["SRANDMEMBER", "s", "1"]), Value::Array(_)));
}

/// A full SSCAN of `key`, calling `between` after every call.
fn sscan_all(
    h: &mut Harness<VecMem>,
    key: &str,
    count: &str,
    mut between: impl FnMut(&mut Harness<VecMem>),
) -> Vec<String> {
    let mut cursor = "0".to_string();
    let mut got = Vec::new();
    let mut calls = 0;
    loop {
        let Value::Array(parts) = h.cmd(&["SSCAN", key, &cursor, "COUNT", count]) else { panic!() };
        let Value::Bulk(c) = &parts[0] else { panic!() };
        cursor = String::from_utf8(c.clone()).unwrap();
        got.extend(strings(&parts[1]));
        calls += 1;
        assert!(calls < 100_000);
        if cursor == "0" {
            return got;
        }
        between(h);
    }
}

#[test]
fn sscan_returns_every_member_present_throughout() {
    let mut h = Harness::new();
    // An intset and a small set: all at once, cursor 0.
    h.cmd(&["SADD", "i", "1", "2", "3"]);
    assert_eq!(
        h.cmd(&["SSCAN", "i", "0"]),
        Value::Array(vec![b("0"), Value::Array(vec![b("1"), b("2"), b("3")])])
    );
    assert_eq!(h.cmd(&["SSCAN", "nokey", "0"]), Value::Array(vec![b("0"), Value::Array(vec![])]));
    assert_eq!(err(&h.cmd(&["SSCAN", "i", "x"])), "ERR invalid cursor");
    assert_eq!(err(&h.cmd(&["SSCAN", "i", "0", "COUNT", "0"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["SSCAN", "i", "0", "COUNT", "x"])), NOT_INT);
    assert_eq!(err(&h.cmd(&["SSCAN", "i", "0", "TYPE", "set"])), SYNTAX);
    h.cmd(&["SADD", "p", "foo", "fab", "fiz", "foobar", "1", "2"]);
    assert_eq!(
        sorted(&match h.cmd(&["SSCAN", "p", "0", "MATCH", "foo*", "COUNT", "10000"]) {
            Value::Array(p) => p[1].clone(),
            _ => panic!(),
        }),
        list(&["foo", "foobar"])
    );
    // A tree: its members in hash order, whatever is added and removed between the calls.
    sadd(&mut h, "t", (0..2000).map(|n| n.to_string()).chain(["x".to_string()]));
    let got = sscan_all(&mut h, "t", "7", |_| {});
    assert_eq!(got.len(), 2001, "each member once when nothing changes");
    let mut round = 0;
    let got = sscan_all(&mut h, "t", "10", |h| {
        round += 1;
        // Remove members 1000.. and add others, a few at a time: 0..1000 stay throughout.
        let gone: Vec<String> = (0..5).map(|k| (1000 + (round * 5 + k) % 1000).to_string()).collect();
        let mut a = vec!["SREM".to_string(), "t".to_string()];
        a.extend(gone);
        h.cmd_owned(&a);
        sadd(h, "t", (0..5).map(|k| format!("new:{round}:{k}")));
    });
    let got: BTreeSet<String> = got.into_iter().collect();
    for n in 0..1000 {
        assert!(got.contains(&n.to_string()), "member {n} was present throughout and not returned");
    }
}

#[test]
fn memory_per_member_is_close_to_redis() {
    let mut h = Harness::new();
    let used0 = h.store.used_bytes();
    sadd(&mut h, "i", (0..500).map(|n| n.to_string()));
    let intset = h.store.used_bytes() - used0;
    // 2 bytes a member and the entry.
    assert!(intset <= 500 * 2 + 200, "{intset} bytes for 500 small integers");
    let used0 = h.store.used_bytes();
    for chunk in 0..100 {
        assert_eq!(sadd(&mut h, "t", (0..200).map(|n| format!("m:{}", chunk * 200 + n))), i(200));
    }
    assert_eq!(h.cmd(&["SCARD", "t"]), i(20_000));
    let per = (h.store.used_bytes() - used0) as f64 / 20_000.0;
    eprintln!("an intset of 500 small integers: {intset} bytes; a tree member: {per:.1} bytes");
    // Redis: a dict entry (24), an sds of 16 bytes and a bucket pointer (8), about 48 bytes.
    assert!(per < 40.0, "{per} bytes a member of a tree");
}

/// Random set commands against a model, checked after each.
#[test]
fn random_commands_against_a_model() {
    let mut h = Harness::new();
    h.cmd(&["CONFIG", "SET", "set-max-intset-entries", "20"]);
    let mut model: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let keys = ["a", "b", "c"];
    for step in 0..3000 {
        let k = keys[next(3) as usize];
        let k2 = keys[next(3) as usize];
        let member = |n: u64| if n.is_multiple_of(3) { format!("s{}", n % 40) } else { (n % 40).to_string() };
        match next(6) {
            0 | 1 => {
                let ms: Vec<String> = (0..1 + next(4)).map(|_| member(next(1000))).collect();
                let added =
                    ms.iter().filter(|m| model.entry(k.into()).or_default().insert((*m).clone())).count();
                let mut a = vec!["SADD".to_string(), k.into()];
                a.extend(ms);
                assert_eq!(h.cmd_owned(&a), i(added as i64), "step {step}");
            }
            2 => {
                let ms: Vec<String> = (0..1 + next(4)).map(|_| member(next(1000))).collect();
                let s = model.entry(k.into()).or_default();
                let removed = ms.iter().filter(|m| s.remove(*m)).count();
                let mut a = vec!["SREM".to_string(), k.into()];
                a.extend(ms);
                assert_eq!(h.cmd_owned(&a), i(removed as i64), "step {step}");
            }
            3 => {
                let n = next(4);
                let got = strings(&h.cmd(&["SPOP", k, &n.to_string()]));
                let s = model.entry(k.into()).or_default();
                assert_eq!(got.len() as u64, n.min(s.len() as u64));
                for m in got {
                    assert!(s.remove(&m), "step {step}: {m} popped but not a member");
                }
            }
            4 => {
                let m = member(next(1000));
                let moved = model.get(k).is_some_and(|s| s.contains(&m));
                assert_eq!(h.cmd(&["SMOVE", k, k2, &m]), i(i64::from(moved)), "step {step}");
                if moved {
                    model.get_mut(k).unwrap().remove(&m);
                    model.entry(k2.into()).or_default().insert(m);
                }
            }
            _ => {
                let (a, b2) =
                    (model.get(k).cloned().unwrap_or_default(), model.get(k2).cloned().unwrap_or_default());
                let (cmd, want): (&str, BTreeSet<String>) = match next(3) {
                    0 => ("SINTERSTORE", a.intersection(&b2).cloned().collect()),
                    1 => ("SUNIONSTORE", a.union(&b2).cloned().collect()),
                    _ => ("SDIFFSTORE", a.difference(&b2).cloned().collect()),
                };
                let dst = keys[next(3) as usize];
                assert_eq!(h.cmd(&[cmd, dst, k, k2]), i(want.len() as i64), "step {step}");
                model.insert(dst.into(), want);
            }
        }
        model.retain(|_, s| !s.is_empty());
        if step % 25 == 0 {
            for k in keys {
                let want: Vec<String> = model.get(k).map(|s| s.iter().cloned().collect()).unwrap_or_default();
                assert_eq!(h.members(k), want, "step {step}, key {k}");
                assert_eq!(h.cmd(&["SCARD", k]), i(want.len() as i64));
                if !want.is_empty() {
                    let f = h.store.find(k.as_bytes()).unwrap().unwrap();
                    assert_eq!(f.head.kind, KIND_SET);
                }
            }
        }
    }
}

/// A fixed run of set commands (no random picks, so that every run makes the same changes) and
/// the model's state after each.
/// Each key's members.
type Sets = BTreeMap<String, BTreeSet<String>>;

fn crash_run(mem: &VecMem) -> (Vec<Sets>, Result<(), StoreError>) {
    let mut states = vec![BTreeMap::new()];
    let mut h = match Harness::on(mem) {
        Ok(h) => h,
        Err(e) => return (states, Err(e)),
    };
    let mut model = Sets::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let keys = ["a", "b", "c"];
    for step in 0..160 {
        let (k, k2) = (keys[next(3) as usize], keys[next(3) as usize]);
        let member =
            |n: u64| if n.is_multiple_of(4) { format!("m{}", n % 300) } else { (n % 300).to_string() };
        let mut args: Vec<String>;
        match next(6) {
            0..=2 => {
                args = vec!["SADD".into(), k.into()];
                args.extend((0..1 + next(60)).map(|_| member(next(100_000))));
                let s = model.entry(k.into()).or_default();
                for m in &args[2..] {
                    s.insert(m.clone());
                }
            }
            3 => {
                args = vec!["SREM".into(), k.into()];
                args.extend((0..1 + next(30)).map(|_| member(next(100_000))));
                let s = model.entry(k.into()).or_default();
                for m in &args[2..] {
                    s.remove(m);
                }
            }
            4 => {
                let m = member(next(100_000));
                args = vec!["SMOVE".into(), k.into(), k2.into(), m.clone()];
                if model.get(k).is_some_and(|s| s.contains(&m)) {
                    model.get_mut(k).unwrap().remove(&m);
                    model.entry(k2.into()).or_default().insert(m);
                }
            }
            _ => {
                let (a, b2) =
                    (model.get(k).cloned().unwrap_or_default(), model.get(k2).cloned().unwrap_or_default());
                let (cmd, want): (&str, BTreeSet<String>) = match step % 3 {
                    0 => ("SINTERSTORE", a.intersection(&b2).cloned().collect()),
                    1 => ("SUNIONSTORE", a.union(&b2).cloned().collect()),
                    _ => ("SDIFFSTORE", a.difference(&b2).cloned().collect()),
                };
                let dst = keys[next(3) as usize];
                args = vec![cmd.into(), dst.into(), k.into(), k2.into()];
                model.insert(dst.into(), want);
            }
        }
        model.retain(|_, s| !s.is_empty());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(e) = h.try_cmd(&a) {
            return (states, Err(e));
        }
        states.push(model.clone());
    }
    (states, Ok(()))
}

/// What a reopened store holds: each key's members, and every tree's invariants checked.
fn contents(mem: VecMem) -> Sets {
    let mut h = Harness::on(mem).expect("the store reopens");
    let mut out = BTreeMap::new();
    for k in ["a", "b", "c"] {
        if let Some(f) = h.store.find(k.as_bytes()).unwrap() {
            if let Some(t) = h.store.tree_of(&f).unwrap() {
                h.store.tree_blocks(&t, |_, _| {}).unwrap_or_else(|e| panic!("{k}: {e}"));
            }
            out.insert(k.to_string(), h.members(k).into_iter().collect());
        }
    }
    out
}

/// An empty store under a fixed hash key, so that every run of the same commands makes the same
/// writes (a tree is ordered by its members' keyed hashes).
fn fresh() -> VecMem {
    let mem = VecMem::new(4 << 20);
    crate::store::Store::open(&mem, 1024).unwrap().set_hash_key(1, 2);
    VecMem::from_bytes(mem.image())
}

#[test]
fn a_crash_at_any_write_leaves_the_sets_before_or_after_the_command() {
    let mem = fresh();
    let (states, r) = crash_run(&mem);
    r.unwrap();
    assert_eq!(contents(VecMem::from_bytes(mem.image())), *states.last().unwrap());
    assert!(
        states.iter().any(|s| s.values().any(|m| m.len() > 250)),
        "the run makes trees of several leaves"
    );
    let total = mem.writes();
    let step = (total / 200).max(1);
    let mut at = 1;
    while at < total {
        let mem = fresh();
        mem.crash_after(at);
        let (states, r) = crash_run(&mem);
        assert!(r.is_err(), "the crash at write {at} happened");
        let got = contents(VecMem::from_bytes(mem.image()));
        let n = states.len();
        // The command the crash cut is undone, unless its batch was sealed before it.
        assert!(
            got == states[n - 1] || (n >= 2 && got == states[n - 2]),
            "crash at write {at} of {total}: the store holds neither the state before nor after command {n}"
        );
        at += step;
    }
}

#[test]
fn a_set_command_the_heap_cannot_hold_is_undone_whole() {
    let mut h = Harness::on(VecMem::new(1 << 20)).unwrap();
    sadd(&mut h, "s", (0..300).map(|n| format!("member {n}")));
    sadd(&mut h, "i", (0..100).map(|n| n.to_string()));
    let (before_s, before_i, used) = (h.members("s"), h.members("i"), h.store.used_bytes());
    let big = "x".repeat(20_000);
    let mut a = vec!["SADD".to_string(), "s".to_string()];
    a.extend((0..100).map(|n| format!("{n}{big}")));
    assert!(err(&h.cmd_owned(&a)).starts_with("OOM"), "a set larger than the heap");
    a[1] = "i".into();
    assert!(err(&h.cmd_owned(&a)).starts_with("OOM"), "an intset turned into a tree larger than the heap");
    assert_eq!(h.members("s"), before_s);
    assert_eq!(h.members("i"), before_i);
    assert_eq!(h.encoding("i"), "intset");
    assert_eq!(h.store.used_bytes(), used, "every block the commands took was given back");
}

/// Whether a write of `cmd` makes a client watching `watched` (in database 0) fail its EXEC.
fn touches(h: &mut Harness<VecMem>, watched: &str, cmd: &[&str]) -> bool {
    h.watches.watch(99, 0, watched.as_bytes());
    h.cmd(cmd);
    let dirty = h.watches.is_dirty(99);
    h.watches.unwatch(99);
    dirty
}

#[test]
fn a_set_command_touches_only_the_keys_it_changes() {
    let mut h = Harness::new();
    h.cmd(&["SADD", "src", "a", "b"]);
    h.cmd(&["SADD", "dst", "a"]);
    // SMOVE of a member the destination has: the source changes, the destination does not.
    assert!(!touches(&mut h, "dst", &["SMOVE", "src", "dst", "a"]));
    assert_eq!(h.members("dst"), ["a"]);
    assert!(touches(&mut h, "src", &["SMOVE", "src", "dst", "b"]));
    h.cmd(&["SADD", "src", "c"]);
    assert!(touches(&mut h, "dst", &["SMOVE", "src", "dst", "c"]));
    assert!(!touches(&mut h, "dst", &["SMOVE", "src", "dst", "nope"]));
    // The *STORE commands touch their destination, never their sources.
    h.cmd(&["SADD", "x", "1", "2"]);
    h.cmd(&["SADD", "dst", "1"]);
    for c in ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"] {
        assert!(!touches(&mut h, "x", &[c, "out", "x", "dst"]), "{c}");
        assert!(touches(&mut h, "out", &[c, "out", "x", "dst"]), "{c}");
    }
    // An empty result deletes the destination (a touch), or changes nothing if there was none.
    assert!(touches(&mut h, "out", &["SINTERSTORE", "out", "x", "none"]));
    assert_eq!(h.cmd(&["EXISTS", "out"]), i(0));
    assert!(!touches(&mut h, "out", &["SINTERSTORE", "out", "x", "none"]));
    // Writes that change nothing touch nothing; those that do, their key.
    assert!(!touches(&mut h, "x", &["SADD", "x", "1"]));
    assert!(!touches(&mut h, "x", &["SREM", "x", "7"]));
    assert!(touches(&mut h, "x", &["SADD", "x", "3"]));
    assert!(touches(&mut h, "x", &["SPOP", "x"]));
    assert!(!touches(&mut h, "x", &["SRANDMEMBER", "x"]));
}

#[test]
fn spop_of_most_of_a_tree_makes_the_rest_a_new_set() {
    // Redis 7.0 moves the members that stay into a new set when most go (remaining · 5 <=
    // count), made as a new set of them is: an intset when they are integers.
    let mut h = Harness::new();
    sadd(&mut h, "s", (0..20).map(|n| n.to_string()).chain(["x".to_string()]));
    assert_eq!(h.cmd(&["SREM", "s", "x"]), i(1));
    assert_eq!(h.encoding("s"), "hashtable");
    assert_eq!(h.cmd(&["PEXPIRE", "s", "100000"]), i(1));
    let popped = strings(&h.cmd(&["SPOP", "s", "17"]));
    assert_eq!(popped.len(), 17);
    let rest = h.members("s");
    assert_eq!(rest.len(), 3);
    assert!(rest.iter().all(|m| !popped.contains(m)));
    assert_eq!(h.encoding("s"), "intset");
    assert_eq!(h.cmd(&["PTTL", "s"]), i(100000), "the expiry stays");
    // Fewer going: members are removed where they are, and the encoding stays.
    sadd(&mut h, "t", (0..20).map(|n| format!("m{n}")));
    h.cmd(&["SPOP", "t", "3"]);
    assert_eq!(h.encoding("t"), "hashtable");
}
