//! Sorted-set commands against a store in the heap: replies as Redis gives them, both
//! encodings answering alike (the same random commands run against a set kept small and one
//! kept large, and against a model), conversions, RESP3's shapes, and what a store error or a
//! crash leaves.

use crate::cmd::strings::tests::{b, err, i, Harness};
use crate::cmd::{execute, Args, Cx, Outcome, Session, Wait};
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Proto, Value};
use crate::store::{Store, StoreError, VecMem, KIND_ZSET};
use std::collections::BTreeMap;

/// What the sorted-set tests add to the shared harness.
trait Z {
    /// Runs one command in a batch of its own, whose group may hold `max_group_bytes`: its
    /// reply, or the fatal store error it met (a simulated crash).
    fn try_cmd(&mut self, args: &[&str], max_group_bytes: u64) -> Result<Value, StoreError>;
    /// Speaks RESP3 from now on.
    fn resp3(&mut self);
    /// Checks the index of `key`, if it has one: both trees' invariants, and that they agree.
    fn check_index(&mut self, key: &str);
}

impl Z for Harness {
    fn try_cmd(&mut self, args: &[&str], max_group_bytes: u64) -> Result<Value, StoreError> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        let mut req = Vec::new();
        encode_request(&a, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
            now_ms: self.now_ms,
            max_ranges: 1024,
            max_group_bytes,
            output_limit: self.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut Default::default(),
            telemetry: &mut Default::default(),
            cluster: None,
        };
        let o = execute(&mut cx, &mut self.session, &Args::Parsed { parser: &p, buf: &req }, &mut out)?;
        assert!(matches!(o, Outcome::Done | Outcome::OverLimit), "{args:?}: {o:?}");
        self.store.seal(1024)?;
        let (v, n) = decode(&out, &Limits::default()).unwrap().expect("a whole reply");
        assert_eq!(n, out.len(), "one reply for {args:?}");
        Ok(v)
    }

    fn resp3(&mut self) {
        self.session.proto = Proto::Resp3;
    }

    fn check_index(&mut self, key: &str) {
        let Some(f) = self.store.find(key.as_bytes()).unwrap() else { return };
        if let Some(z) = self.store.zindex_of(&f).unwrap() {
            self.store.zindex_blocks(&z, |_, _| ()).unwrap_or_else(|e| panic!("{key}: {e}"));
        }
    }
}

fn arr(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| b(s)).collect())
}

#[test]
fn zadd_and_its_options() {
    let mut h = Harness::with_size(8 << 20);
    assert_eq!(h.cmd(&["ZADD", "z", "1", "a", "2", "b"]), i(2));
    assert_eq!(h.cmd(&["ZADD", "z", "1", "a", "3", "c"]), i(1));
    assert_eq!(h.cmd(&["ZADD", "z", "CH", "5", "a", "3", "c", "9", "d"]), i(2));
    assert_eq!(h.cmd(&["ZADD", "z", "NX", "100", "a", "4", "e"]), i(1));
    assert_eq!(h.cmd(&["ZSCORE", "z", "a"]), b("5"));
    assert_eq!(h.cmd(&["ZADD", "z", "XX", "CH", "6", "a", "7", "zz"]), i(1));
    assert_eq!(h.cmd(&["ZSCORE", "z", "zz"]), Value::Null);
    assert_eq!(h.cmd(&["ZADD", "z", "GT", "CH", "1", "a", "10", "b"]), i(1));
    assert_eq!(h.cmd(&["ZADD", "z", "LT", "CH", "1", "a", "20", "b"]), i(1));
    assert_eq!(h.cmd(&["ZADD", "z", "INCR", "2.5", "a"]), b("3.5"));
    assert_eq!(h.cmd(&["ZADD", "z", "NX", "INCR", "1", "a"]), Value::Null);
    assert_eq!(h.cmd(&["ZADD", "z", "GT", "INCR", "-1", "a"]), Value::Null);
    assert_eq!(h.cmd(&["ZINCRBY", "z", "-inf", "a"]), b("-inf"));
    assert_eq!(err(&h.cmd(&["ZINCRBY", "z", "+inf", "a"])), "ERR resulting score is not a number (NaN)");
    assert_eq!(h.cmd(&["ZSCORE", "z", "a"]), b("-inf"));
    assert_eq!(
        err(&h.cmd(&["ZADD", "z", "NX", "XX", "1", "a"])),
        "ERR XX and NX options at the same time are not compatible"
    );
    assert_eq!(
        err(&h.cmd(&["ZADD", "z", "GT", "LT", "1", "a"])),
        "ERR GT, LT, and/or NX options at the same time are not compatible"
    );
    assert_eq!(
        err(&h.cmd(&["ZADD", "z", "INCR", "1", "a", "2", "b"])),
        "ERR INCR option supports a single increment-element pair"
    );
    assert_eq!(err(&h.cmd(&["ZADD", "z", "1", "a", "2"])), "ERR syntax error");
    assert_eq!(err(&h.cmd(&["ZADD", "z", "nan", "a"])), "ERR value is not a valid float");
    assert_eq!(err(&h.cmd(&["ZADD", "z", "1", "a", "x", "b"])), "ERR value is not a valid float");
    assert_eq!(h.cmd(&["ZADD", "new", "XX", "1", "a"]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "new"]), i(0));
    assert_eq!(h.cmd(&["SET", "s", "v"]), Value::Simple(b"OK".to_vec()));
    assert!(err(&h.cmd(&["ZADD", "s", "1", "a"])).starts_with("WRONGTYPE"));
    assert_eq!(h.cmd(&["TYPE", "z"]), Value::Simple(b"zset".to_vec()));
}

#[test]
fn scores_print_as_redis_prints_them() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["ZADD", "z", "0.1", "a", "1e300", "b", "-0", "c", "0x10", "d", "5e-324", "e", "100", "f"]);
    assert_eq!(h.cmd(&["ZSCORE", "z", "a"]), b("0.10000000000000001"));
    assert_eq!(h.cmd(&["ZSCORE", "z", "b"]), b("1.0000000000000001e+300"));
    // A listpack holds -0 as the integer 0; an index keeps it; the reply of the change that
    // made it says -0.
    assert_eq!(h.cmd(&["ZSCORE", "z", "c"]), b("0"));
    assert_eq!(h.cmd(&["ZADD", "n", "INCR", "-0", "x"]), b("-0"));
    assert_eq!(h.cmd(&["ZSCORE", "n", "x"]), b("0"));
    h.cmd(&["ZADD", "big", "1", &"w".repeat(65), "-0", "c"]);
    assert_eq!(h.encoding("big"), "skiplist");
    assert_eq!(h.cmd(&["ZSCORE", "big", "c"]), b("-0"));
    assert_eq!(h.cmd(&["ZSCORE", "z", "d"]), b("16"));
    assert_eq!(h.cmd(&["ZSCORE", "z", "e"]), b("4.9406564584124654e-324"));
    assert_eq!(h.cmd(&["ZSCORE", "z", "f"]), b("100"));
    h.resp3();
    assert_eq!(h.cmd(&["ZSCORE", "z", "a"]), Value::Double(b"0.10000000000000001".to_vec()));
    assert_eq!(h.cmd(&["ZADD", "z", "INCR", "1", "zz"]), Value::Double(b"1".to_vec()));
    assert_eq!(
        h.cmd(&["ZMSCORE", "big", "c", "nope"]),
        Value::Array(vec![Value::Double(b"-0".to_vec()), Value::Null])
    );
}

#[test]
fn ranges_by_rank_score_and_member() {
    for big in [false, true] {
        let mut h = Harness::with_size(8 << 20);
        if big {
            h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
        }
        h.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"]);
        assert_eq!(h.cmd(&["OBJECT", "ENCODING", "z"]), b(if big { "skiplist" } else { "listpack" }));
        assert_eq!(h.cmd(&["ZRANGE", "z", "0", "-1"]), arr(&["a", "b", "c", "d", "e"]));
        assert_eq!(h.cmd(&["ZRANGE", "z", "-2", "100"]), arr(&["d", "e"]));
        assert_eq!(h.cmd(&["ZRANGE", "z", "3", "1"]), arr(&[]));
        assert_eq!(h.cmd(&["ZREVRANGE", "z", "0", "1", "WITHSCORES"]), arr(&["e", "5", "d", "4"]));
        assert_eq!(h.cmd(&["ZRANGE", "z", "0", "1", "REV"]), arr(&["e", "d"]));
        assert_eq!(h.cmd(&["ZRANGEBYSCORE", "z", "(1", "3"]), arr(&["b", "c"]));
        assert_eq!(h.cmd(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "2"]), arr(&["b", "c"]));
        assert_eq!(
            h.cmd(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "-1"]),
            arr(&["b", "c", "d", "e"])
        );
        assert_eq!(h.cmd(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "2"]), arr(&[]));
        assert_eq!(h.cmd(&["ZREVRANGEBYSCORE", "z", "4", "(2", "WITHSCORES"]), arr(&["d", "4", "c", "3"]));
        assert_eq!(h.cmd(&["ZRANGE", "z", "(4", "+inf", "BYSCORE", "REV"]), arr(&[]));
        assert_eq!(h.cmd(&["ZRANGE", "z", "+inf", "(4", "BYSCORE", "REV"]), arr(&["e"]));
        assert_eq!(h.cmd(&["ZCOUNT", "z", "(1", "(5"]), i(3));
        assert_eq!(h.cmd(&["ZCOUNT", "z", "5", "1"]), i(0));
        assert_eq!(h.cmd(&["ZRANK", "z", "c"]), i(2));
        assert_eq!(h.cmd(&["ZREVRANK", "z", "c"]), i(2));
        assert_eq!(h.cmd(&["ZREVRANK", "z", "a"]), i(4));
        assert_eq!(h.cmd(&["ZRANK", "z", "nope"]), Value::Null);
        h.cmd(&["ZADD", "l", "0", "a", "0", "b", "0", "c", "0", "d"]);
        assert_eq!(h.cmd(&["ZRANGEBYLEX", "l", "[b", "(d"]), arr(&["b", "c"]));
        assert_eq!(h.cmd(&["ZRANGEBYLEX", "l", "-", "+", "LIMIT", "1", "1"]), arr(&["b"]));
        assert_eq!(h.cmd(&["ZREVRANGEBYLEX", "l", "+", "(b"]), arr(&["d", "c"]));
        assert_eq!(h.cmd(&["ZRANGE", "l", "[c", "-", "BYLEX", "REV"]), arr(&["c", "b", "a"]));
        assert_eq!(h.cmd(&["ZLEXCOUNT", "l", "(a", "[c"]), i(2));
        assert_eq!(h.cmd(&["ZLEXCOUNT", "l", "+", "-"]), i(0));
        assert_eq!(
            err(&h.cmd(&["ZRANGEBYLEX", "l", "a", "+"])),
            "ERR min or max not valid string range item"
        );
        assert_eq!(err(&h.cmd(&["ZRANGEBYSCORE", "z", "x", "1"])), "ERR min or max is not a float");
        assert_eq!(
            err(&h.cmd(&["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"])),
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        );
        assert_eq!(
            err(&h.cmd(&["ZRANGE", "l", "-", "+", "BYLEX", "WITHSCORES"])),
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX"
        );
        assert_eq!(err(&h.cmd(&["ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX"])), "ERR syntax error");
        assert_eq!(err(&h.cmd(&["ZRANGE", "z", "a", "1"])), "ERR value is not an integer or out of range");
        assert_eq!(h.cmd(&["ZRANGE", "nope", "0", "-1"]), arr(&[]));
        // ZRANGESTORE stores what ZRANGE answers, as a new set.
        assert_eq!(h.cmd(&["ZRANGESTORE", "dst", "z", "1", "3"]), i(3));
        assert_eq!(h.cmd(&["ZRANGE", "dst", "0", "-1", "WITHSCORES"]), arr(&["b", "2", "c", "3", "d", "4"]));
        assert_eq!(h.cmd(&["ZRANGESTORE", "dst", "z", "5", "+inf", "BYSCORE", "REV"]), i(0));
        assert_eq!(h.cmd(&["EXISTS", "dst"]), i(0));
        assert_eq!(h.cmd(&["ZRANGESTORE", "dst", "z", "+inf", "4", "BYSCORE", "REV"]), i(2));
        assert_eq!(h.cmd(&["ZRANGE", "dst", "0", "-1"]), arr(&["d", "e"]));
        assert_eq!(h.cmd(&["OBJECT", "ENCODING", "dst"]), b(if big { "skiplist" } else { "listpack" }));
        h.check_index("z");
    }
}

#[test]
fn removals_and_pops() {
    for big in [false, true] {
        let mut h = Harness::with_size(8 << 20);
        if big {
            h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
        }
        h.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e", "6", "f"]);
        assert_eq!(h.cmd(&["ZREM", "z", "a", "nope", "a"]), i(1));
        assert_eq!(h.cmd(&["ZREMRANGEBYRANK", "z", "-1", "-1"]), i(1));
        assert_eq!(h.cmd(&["ZREMRANGEBYSCORE", "z", "(2", "3"]), i(1));
        assert_eq!(h.cmd(&["ZRANGE", "z", "0", "-1"]), arr(&["b", "d", "e"]));
        assert_eq!(h.cmd(&["ZPOPMIN", "z"]), arr(&["b", "2"]));
        assert_eq!(h.cmd(&["ZPOPMAX", "z", "5"]), arr(&["e", "5", "d", "4"]));
        assert_eq!(h.cmd(&["EXISTS", "z"]), i(0));
        assert_eq!(h.cmd(&["ZPOPMIN", "z"]), arr(&[]));
        assert_eq!(err(&h.cmd(&["ZPOPMIN", "z", "-1"])), "ERR value is out of range, must be positive");
        assert_eq!(err(&h.cmd(&["ZPOPMIN", "z", "abc"])), "ERR value is out of range, must be positive");
        assert_eq!(err(&h.cmd(&["ZPOPMIN", "z", "1", "2"])), "ERR syntax error");
        h.cmd(&["ZADD", "l", "0", "a", "0", "b", "0", "c"]);
        assert_eq!(h.cmd(&["ZREMRANGEBYLEX", "l", "[b", "+"]), i(2));
        assert_eq!(h.cmd(&["ZREMRANGEBYLEX", "l", "-", "+"]), i(1));
        assert_eq!(h.cmd(&["EXISTS", "l"]), i(0));
        h.cmd(&["ZADD", "m", "1", "a", "2", "b"]);
        assert_eq!(
            h.cmd(&["ZMPOP", "3", "nope", "m", "z", "MAX", "COUNT", "10"]),
            Value::Array(vec![b("m"), Value::Array(vec![arr(&["b", "2"]), arr(&["a", "1"])])])
        );
        assert_eq!(h.cmd(&["ZMPOP", "1", "m", "MIN"]), Value::Null);
        assert_eq!(err(&h.cmd(&["ZMPOP", "0", "m", "MIN"])), "ERR numkeys should be greater than 0");
        assert_eq!(
            err(&h.cmd(&["ZMPOP", "1", "m", "MIN", "COUNT", "0"])),
            "ERR count should be greater than 0"
        );
        assert_eq!(err(&h.cmd(&["ZMPOP", "1", "m", "MIDDLE"])), "ERR syntax error");
        // A blocking pop with something to pop answers at once; with nothing it blocks on its
        // keys (each once), or answers a null where the client may not block (in EXEC).
        h.cmd(&["ZADD", "m", "1", "a", "2", "b"]);
        assert_eq!(h.cmd(&["BZPOPMAX", "nope", "m", "0"]), arr(&["m", "b", "2"]));
        assert_eq!(
            h.cmd(&["BZMPOP", "0.5", "2", "nope", "m", "MIN", "COUNT", "3"]),
            Value::Array(vec![b("m"), Value::Array(vec![arr(&["a", "1"])])])
        );
        let now = h.now_ms;
        assert_eq!(
            h.in_batch(&[b"BZPOPMIN", b"m", b"x1", b"m", b"1.5"]),
            (
                Outcome::Block(Wait {
                    keys: vec![b"m".to_vec(), b"x1".to_vec()],
                    kind: KIND_ZSET,
                    deadline_ms: now + 1500
                }),
                None
            )
        );
        assert_eq!(
            h.in_batch(&[b"BZMPOP", b"0", b"2", b"m", b"x1", b"MAX"]).0,
            Outcome::Block(Wait {
                keys: vec![b"m".to_vec(), b"x1".to_vec()],
                kind: KIND_ZSET,
                deadline_ms: 0
            })
        );
        h.cmd(&["MULTI"]);
        h.cmd(&["BZPOPMAX", "m", "0"]);
        h.cmd(&["BZMPOP", "0", "1", "m", "MIN"]);
        assert_eq!(h.cmd(&["EXEC"]), Value::Array(vec![Value::Null, Value::Null]));
        assert_eq!(err(&h.cmd(&["BZPOPMIN", "m", "-1"])), "ERR timeout is negative");
        assert_eq!(err(&h.cmd(&["BZPOPMIN", "m", "x"])), "ERR timeout is not a float or out of range");
        assert_eq!(
            err(&h.cmd(&["BZMPOP", "-1", "1", "m", "MIN", "COUNT", "x"])),
            "ERR count should be greater than 0",
            "BZMPOP reads its timeout last"
        );
        assert_eq!(err(&h.cmd(&["BZMPOP", "-1", "1", "m", "MIN"])), "ERR timeout is negative");
    }
}

#[test]
fn set_operations() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["ZADD", "a", "1", "x", "2", "y", "3", "z"]);
    h.cmd(&["ZADD", "b", "10", "y", "20", "z", "30", "w"]);
    assert_eq!(
        h.cmd(&["ZUNION", "2", "a", "b", "WITHSCORES"]),
        arr(&["x", "1", "y", "12", "z", "23", "w", "30"])
    );
    assert_eq!(
        h.cmd(&["ZINTER", "2", "a", "b", "AGGREGATE", "MAX", "WITHSCORES"]),
        arr(&["y", "10", "z", "20"])
    );
    assert_eq!(
        h.cmd(&["ZINTER", "2", "a", "b", "WEIGHTS", "2", "0.5", "WITHSCORES"]),
        arr(&["y", "9", "z", "16"])
    );
    assert_eq!(h.cmd(&["ZDIFF", "2", "a", "b", "WITHSCORES"]), arr(&["x", "1"]));
    assert_eq!(h.cmd(&["ZINTERCARD", "2", "a", "b"]), i(2));
    assert_eq!(h.cmd(&["ZINTERCARD", "2", "a", "b", "LIMIT", "1"]), i(1));
    assert_eq!(h.cmd(&["ZUNIONSTORE", "u", "3", "a", "b", "nope", "AGGREGATE", "MIN"]), i(4));
    assert_eq!(
        h.cmd(&["ZRANGE", "u", "0", "-1", "WITHSCORES"]),
        arr(&["x", "1", "y", "2", "z", "3", "w", "30"])
    );
    assert_eq!(h.cmd(&["ZINTERSTORE", "a", "2", "a", "b"]), i(2));
    assert_eq!(h.cmd(&["ZRANGE", "a", "0", "-1", "WITHSCORES"]), arr(&["y", "12", "z", "23"]));
    assert_eq!(h.cmd(&["ZDIFFSTORE", "u", "2", "a", "a"]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "u"]), i(0));
    h.cmd(&["ZADD", "inf", "inf", "x"]);
    h.cmd(&["ZADD", "ninf", "-inf", "x"]);
    assert_eq!(h.cmd(&["ZUNION", "2", "inf", "ninf", "WITHSCORES"]), arr(&["x", "0"]));
    assert_eq!(h.cmd(&["ZUNION", "1", "inf", "WEIGHTS", "0", "WITHSCORES"]), arr(&["x", "0"]));
    assert_eq!(
        err(&h.cmd(&["ZUNIONSTORE", "d", "0", "a"])),
        "ERR at least 1 input key is needed for 'zunionstore' command"
    );
    assert_eq!(err(&h.cmd(&["ZUNION", "3", "a", "b"])), "ERR syntax error");
    assert_eq!(
        err(&h.cmd(&["ZUNION", "2", "a", "b", "WEIGHTS", "1", "x"])),
        "ERR weight value is not a float"
    );
    assert_eq!(err(&h.cmd(&["ZDIFF", "2", "a", "b", "WEIGHTS", "1", "2"])), "ERR syntax error");
    assert_eq!(err(&h.cmd(&["ZUNIONSTORE", "d", "1", "a", "WITHSCORES"])), "ERR syntax error");
    assert_eq!(err(&h.cmd(&["ZINTERCARD", "1", "a", "LIMIT", "-1"])), "ERR LIMIT can't be negative");
    h.cmd(&["SET", "s", "v"]);
    assert!(err(&h.cmd(&["ZUNION", "2", "a", "s"])).starts_with("WRONGTYPE"));
    h.resp3();
    assert_eq!(
        h.cmd(&["ZUNION", "1", "a", "WITHSCORES"]),
        Value::Array(vec![
            Value::Array(vec![b("y"), Value::Double(b"12".to_vec())]),
            Value::Array(vec![b("z"), Value::Double(b"23".to_vec())]),
        ])
    );
}

#[test]
fn resp3_shapes() {
    let mut h = Harness::with_size(8 << 20);
    h.resp3();
    h.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
    let pair = |m: &str, s: &str| Value::Array(vec![b(m), Value::Double(s.as_bytes().to_vec())]);
    assert_eq!(h.cmd(&["ZRANGE", "z", "0", "0", "WITHSCORES"]), Value::Array(vec![pair("a", "1")]));
    assert_eq!(h.cmd(&["ZPOPMIN", "z"]), Value::Array(vec![b("a"), Value::Double(b"1".to_vec())]));
    assert_eq!(h.cmd(&["ZPOPMIN", "z", "1"]), Value::Array(vec![pair("b", "2")]));
    assert_eq!(
        h.cmd(&["BZPOPMAX", "z", "0"]),
        Value::Array(vec![b("z"), b("c"), Value::Double(b"3".to_vec())])
    );
    assert_eq!(h.cmd(&["ZSCORE", "z", "a"]), Value::Null);
    h.cmd(&["ZADD", "z", "1", "a"]);
    assert_eq!(
        h.cmd(&["ZRANDMEMBER", "z", "-2", "WITHSCORES"]),
        Value::Array(vec![pair("a", "1"), pair("a", "1")])
    );
    // ZSCAN's scores are bulk strings in either protocol.
    assert_eq!(h.cmd(&["ZSCAN", "z", "0"]), Value::Array(vec![b("0"), arr(&["a", "1"])]));
}

#[test]
fn zrandmember_is_uniform_and_distinct() {
    for big in [false, true] {
        let mut h = Harness::with_size(8 << 20);
        if big {
            h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
        }
        let mut args = vec!["ZADD".to_string(), "z".to_string()];
        for k in 0..20 {
            args.push(k.to_string());
            args.push(format!("m{k}"));
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        h.cmd(&a);
        let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
        for _ in 0..200 {
            let Value::Array(v) = h.cmd(&["ZRANDMEMBER", "z", "-20"]) else { panic!() };
            for m in v {
                let Value::Bulk(m) = m else { panic!() };
                *seen.entry(m).or_default() += 1;
            }
        }
        assert_eq!(seen.len(), 20);
        // 4000 draws of 20: each about 200 (a binomial's deviation is 14).
        assert!(seen.values().all(|&n| (120..=280).contains(&n)), "{seen:?}");
        for count in [1, 5, 15, 19, 20, 30] {
            let Value::Array(v) = h.cmd(&["ZRANDMEMBER", "z", &count.to_string(), "WITHSCORES"]) else {
                panic!()
            };
            assert_eq!(v.len(), 2 * count.min(20));
            let members: std::collections::HashSet<String> =
                v.chunks(2).map(|p| format!("{:?}", p[0])).collect();
            assert_eq!(members.len(), count.min(20), "distinct");
            for p in v.chunks(2) {
                let (Value::Bulk(m), Value::Bulk(s)) = (&p[0], &p[1]) else { panic!() };
                assert_eq!(&m[1..], &s[..], "each member with its score");
            }
        }
        assert_eq!(h.cmd(&["ZRANDMEMBER", "nope", "5"]), arr(&[]));
        assert_eq!(h.cmd(&["ZRANDMEMBER", "nope"]), Value::Null);
        assert_eq!(
            err(&h.cmd(&["ZRANDMEMBER", "z", "-9223372036854775808"])),
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"
        );
        assert_eq!(
            err(&h.cmd(&["ZRANDMEMBER", "z", "-9223372036854770000", "WITHSCORES"])),
            "ERR value is out of range"
        );
    }
}

#[test]
fn zscan_sees_every_member_once() {
    let mut h = Harness::with_size(8 << 20);
    let mut args = vec!["ZADD".to_string(), "z".to_string()];
    for k in 0..1000 {
        args.push(format!("{k}.5"));
        args.push(format!("member:{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    h.cmd(&a);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "z"]), b("skiplist"));
    let mut cursor = "0".to_string();
    let mut seen = BTreeMap::new();
    let mut calls = 0;
    loop {
        let Value::Array(v) = h.cmd(&["ZSCAN", "z", &cursor, "COUNT", "50"]) else { panic!() };
        let (Value::Bulk(c), Value::Array(items)) = (&v[0], &v[1]) else { panic!() };
        for p in items.chunks(2) {
            let (Value::Bulk(m), Value::Bulk(s)) = (&p[0], &p[1]) else { panic!() };
            assert!(seen.insert(m.clone(), s.clone()).is_none(), "seen twice");
        }
        calls += 1;
        cursor = String::from_utf8(c.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 1000);
    assert!(calls > 10, "{calls} calls of 50");
    assert_eq!(seen[&b"member:7".to_vec()], b"7.5");
    let Value::Array(v) = h.cmd(&["ZSCAN", "z", "0", "MATCH", "member:99*", "COUNT", "100000"]) else {
        panic!()
    };
    let Value::Array(items) = &v[1] else { panic!() };
    let got: BTreeMap<String, String> =
        items.chunks(2).map(|p| (format!("{:?}", p[0]), format!("{:?}", p[1]))).collect();
    let want: BTreeMap<String, String> = (0..1000)
        .filter(|k| format!("{k}").starts_with("99"))
        .map(|k| (format!("{:?}", b(&format!("member:{k}"))), format!("{:?}", b(&format!("{k}.5")))))
        .collect();
    assert_eq!(got, want);
    assert_eq!(err(&h.cmd(&["ZSCAN", "z", "x"])), "ERR invalid cursor");
    assert_eq!(h.cmd(&["ZSCAN", "nope", "0", "BADOPT"]), Value::Array(vec![b("0"), arr(&[])]));
    assert_eq!(err(&h.cmd(&["ZSCAN", "z", "0", "COUNT", "0"])), "ERR syntax error");
}

#[test]
fn conversions_follow_the_thresholds_and_never_go_back() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "4"]);
    h.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d"]);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "z"]), b("listpack"));
    h.cmd(&["ZADD", "z", "5", "e"]);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "z"]), b("skiplist"));
    h.cmd(&["ZREM", "z", "a", "b", "c"]);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "z"]), b("skiplist"));
    let long = "x".repeat(65);
    h.cmd(&["ZADD", "v", "1", "a"]);
    h.cmd(&["ZADD", "v", "1", &long]);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "v"]), b("skiplist"));
    h.cmd(&["ZADD", "w", "1", &long]);
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "w"]), b("skiplist"));
    // A new set starts small and moves when a member passes a limit, not by the number of
    // pairs given (a member given twice counts once).
    h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "128"]);
    let mut args = vec!["ZADD".to_string(), "dup".to_string()];
    for k in 0..129 {
        args.extend([k.to_string(), "a".to_string()]);
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(h.cmd(&a), i(1));
    assert_eq!(h.encoding("dup"), "listpack");
    h.cmd(&["ZADD", "first", "1", &long, "2", "b"]);
    assert_eq!(h.encoding("first"), "skiplist");
    h.cmd(&["DEL", "dup", "first"]);
    h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "4"]);
    // Stores get the encoding their size needs.
    assert_eq!(h.cmd(&["ZUNIONSTORE", "u", "1", "z"]), i(2));
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "u"]), b("listpack"));
    assert_eq!(h.cmd(&["ZRANGESTORE", "u", "v", "0", "-1"]), i(2));
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "u"]), b("skiplist"));
    // An expiry stays with changes; RENAME moves the index whole.
    h.cmd(&["PEXPIRE", "z", "100000"]);
    h.cmd(&["ZADD", "z", "9", "q"]);
    assert_eq!(h.cmd(&["PTTL", "z"]), i(100000));
    h.cmd(&["RENAME", "z", "z2"]);
    assert_eq!(h.cmd(&["ZRANGE", "z2", "0", "-1"]), arr(&["d", "e", "q"]));
    h.check_index("z2");
    h.cmd(&["DEL", "z2", "v", "w", "u"]);
    assert_eq!(h.store.used_bytes(), 0, "every block of the indexes freed");
}

struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }

    /// A score, or with `exclusive` possibly a range end with `(`.
    fn score(&mut self, exclusive: bool) -> String {
        const SCORES: [&str; 11] = ["1", "2", "2.5", "-3", "inf", "-inf", "0", "7", "1e10", "(2", "(inf"];
        let s = SCORES[self.next(SCORES.len() as u64) as usize];
        if !exclusive && s.starts_with('(') {
            s[1..].to_string()
        } else {
            s.to_string()
        }
    }

    fn member(&mut self) -> String {
        format!("m{}", self.next(60))
    }

    fn index(&mut self) -> String {
        (self.next(10) as i64 - 5).to_string()
    }

    fn lex(&mut self) -> String {
        let v = self.next(300);
        match v % 5 {
            0 => "-".to_string(),
            1 => "+".to_string(),
            2 => format!("(m{}", v % 60),
            _ => format!("[m{}", v % 60),
        }
    }

    /// A random command of the kinds that change or read a set.
    fn command(&mut self) -> Vec<String> {
        let z = || "z".to_string();
        if self.next(20) == 0 {
            return ["ZRANGESTORE", "copy", "z", "0", "-1"].map(String::from).to_vec();
        }
        match self.next(16) {
            0..=3 => {
                let mut v = vec!["ZADD".into(), z()];
                for o in ["NX", "XX", "GT", "LT", "CH"] {
                    if self.next(5) == 0 {
                        v.push(o.into());
                    }
                }
                for _ in 0..1 + self.next(4) {
                    v.push(self.score(false));
                    v.push(self.member());
                }
                v
            }
            4 => vec!["ZINCRBY".into(), z(), self.score(false), self.member()],
            5 => vec!["ZREM".into(), z(), self.member(), self.member()],
            6 => vec!["ZREMRANGEBYRANK".into(), z(), self.index(), self.index()],
            7 => vec!["ZREMRANGEBYSCORE".into(), z(), self.score(true), self.score(true)],
            8 => vec!["ZPOPMIN".into(), z(), self.next(3).to_string()],
            9 => vec!["ZPOPMAX".into(), z()],
            10 => {
                let (a, b, off, lim) =
                    (self.score(true), self.score(true), self.next(3), self.next(5) as i64 - 1);
                ["ZRANGE", "z", &a, &b, "BYSCORE", "WITHSCORES", "LIMIT", &off.to_string(), &lim.to_string()]
                    .map(String::from)
                    .to_vec()
            }
            11 => {
                vec!["ZREVRANGEBYSCORE".into(), z(), self.score(true), self.score(true), "WITHSCORES".into()]
            }
            12 => vec!["ZCOUNT".into(), z(), self.score(true), self.score(true)],
            13 => vec!["ZRANK".into(), z(), self.member()],
            14 => vec!["ZREVRANGE".into(), z(), self.index(), self.index(), "WITHSCORES".into()],
            // Member ranges over a set of equal scores.
            _ => match self.next(4) {
                0 => vec!["ZADD".into(), "lex".into(), "0".into(), self.member()],
                1 => vec!["ZRANGEBYLEX".into(), "lex".into(), self.lex(), self.lex()],
                2 => vec!["ZLEXCOUNT".into(), "lex".into(), self.lex(), self.lex()],
                _ => vec!["ZREMRANGEBYLEX".into(), "lex".into(), self.lex(), self.lex()],
            },
        }
    }
}

#[test]
fn small_and_large_sets_answer_alike() {
    for seed in 0..4u64 {
        let mut small = Harness::with_size(8 << 20);
        let mut large = Harness::with_size(8 << 20);
        let mut mixed = Harness::with_size(8 << 20);
        small.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "100000"]);
        large.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
        mixed.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "12"]);
        let mut g = Gen(seed);
        for n in 0..1500 {
            let c = g.command();
            let a: Vec<&str> = c.iter().map(String::as_str).collect();
            let want = small.cmd(&a);
            assert_eq!(large.cmd(&a), want, "seed {seed}, command {n}: {a:?}");
            assert_eq!(mixed.cmd(&a), want, "seed {seed}, command {n}: {a:?}");
            // In order: by score, then member.
            let Value::Array(v) = large.cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]) else { panic!() };
            let keys: Vec<(f64, Vec<u8>)> = v
                .chunks(2)
                .map(|p| {
                    let (Value::Bulk(m), Value::Bulk(s)) = (&p[0], &p[1]) else { panic!() };
                    let s = match s.as_slice() {
                        b"inf" => f64::INFINITY,
                        b"-inf" => f64::NEG_INFINITY,
                        s => std::str::from_utf8(s).unwrap().parse().unwrap(),
                    };
                    (s, m.clone())
                })
                .collect();
            assert!(keys.windows(2).all(|w| crate::store::key_cmp(w[0].0, &w[0].1, w[1].0, &w[1].1).is_lt()));
            assert_eq!(large.cmd(&["ZCARD", "z"]), i(keys.len() as i64));
            if n % 100 == 0 {
                large.check_index("z");
                large.check_index("lex");
                mixed.check_index("z");
            }
        }
        large.check_index("z");
        large.check_index("lex");
    }
}

#[test]
fn a_change_too_large_for_a_group_is_refused_and_undone() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["ZADD", "z", "1", "a", "2", "b"]);
    let mut args = vec!["ZADD".to_string(), "big".to_string()];
    for k in 0..3000 {
        args.push(k.to_string());
        args.push(format!("member-{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    h.cmd(&a);
    let v = h.try_cmd(&["ZUNIONSTORE", "z", "2", "big", "z"], 64 << 10).unwrap();
    assert!(err(&v).contains("more than one atomic group may carry"), "{v:?}");
    assert_eq!(h.cmd(&["ZRANGE", "z", "0", "-1"]), arr(&["a", "b"]));
    assert_eq!(h.cmd(&["ZCARD", "big"]), i(3000));
    h.check_index("big");
}

#[test]
fn a_crash_at_any_write_leaves_the_last_sealed_sets() {
    // A run of commands on sets small and large; then the same run crashed at every k-th
    // write: the store reopens, every index is whole (both trees, agreeing), and the sets are
    // as the last command sealed left them (or the one whose seal the crash cut past its
    // commit point).
    const KEYS: [&str; 3] = ["z", "lex", "copy"];
    fn commands() -> Vec<Vec<String>> {
        let mut g = Gen(11);
        (0..150).map(|_| g.command()).collect()
    }
    /// Runs the commands; the number that completed.
    fn run(h: &mut Harness, done: &mut usize) -> Result<(), StoreError> {
        h.settings.encodings.zset_max_entries = 8;
        for c in commands() {
            let a: Vec<&str> = c.iter().map(String::as_str).collect();
            h.try_cmd(&a, 1 << 30)?;
            *done += 1;
        }
        Ok(())
    }
    fn snapshot(h: &mut Harness) -> Vec<Value> {
        KEYS.iter().map(|k| all(h, k)).collect()
    }
    // The sets after each command.
    let mut h = Harness::with_size(8 << 20);
    h.settings.encodings.zset_max_entries = 8;
    let mut after = vec![snapshot(&mut h)];
    for c in commands() {
        let a: Vec<&str> = c.iter().map(String::as_str).collect();
        h.cmd(&a);
        after.push(snapshot(&mut h));
    }
    let total = h.store.mem().writes();
    let step = (total / 150).max(1);
    let (mut at, mut crashes) = (1, 0);
    loop {
        let mut h = Harness::with_size(8 << 20);
        let base = h.store.mem().writes();
        h.store.mem().crash_after(at);
        let mut done = 0;
        // (A store's hash key is its own: runs differ a little in their writes.)
        if run(&mut h, &mut done).is_ok() {
            break;
        }
        crashes += 1;
        let img = VecMem::from_bytes(h.store.mem().image());
        let store = Store::open(img, 1024).unwrap_or_else(|e| panic!("crash at {}: {e}", base + at));
        let mut h = Harness::on(store);
        for k in KEYS {
            h.check_index(k);
        }
        let now = snapshot(&mut h);
        assert!(
            now == after[done] || now == after[(done + 1).min(after.len() - 1)],
            "crash at write {} in command {done}: {now:?}",
            base + at
        );
        at += step;
    }
    assert!(crashes >= 100, "{crashes} crashes");
}

/// `ZRANGE key 0 -1 WITHSCORES`.
fn all(h: &mut Harness, key: &str) -> Value {
    h.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
}

#[test]
fn copy_makes_a_set_that_shares_nothing() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["ZADD", "small", "1", "a", "2", "b"]);
    let mut args = vec!["ZADD".to_string(), "big".to_string()];
    for k in 0..500 {
        args.push(format!("{}", k % 37));
        args.push(format!("member:{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    h.cmd(&a);
    h.cmd(&["PEXPIRE", "big", "50000"]);
    for key in ["small", "big"] {
        let dst = format!("{key}:copy");
        assert_eq!(h.cmd(&["COPY", key, &dst]), i(1));
        assert_eq!(all(&mut h, &dst), all(&mut h, key));
        assert_eq!(h.encoding(&dst), h.encoding(key));
        h.check_index(&dst);
        // Changing the copy leaves the original.
        let before = all(&mut h, key);
        h.cmd(&["ZADD", &dst, "100", "new"]);
        h.cmd(&["ZREM", &dst, "a", "member:3"]);
        assert_eq!(all(&mut h, key), before);
        assert_eq!(h.cmd(&["COPY", key, &dst]), i(0));
        assert_eq!(h.cmd(&["COPY", key, &dst, "DB", "3", "REPLACE"]), i(1));
    }
    assert_eq!(h.cmd(&["PTTL", "big:copy"]), i(50000));
    h.check_index("big");
    h.cmd(&["SELECT", "3"]);
    assert_eq!(h.cmd(&["ZCARD", "big:copy"]), i(500));
    h.cmd(&["FLUSHALL"]);
    assert_eq!(h.store.used_bytes(), 0, "every block of the copies freed");
}

#[test]
fn dump_and_restore_keep_members_scores_and_encoding() {
    let mut h = Harness::with_size(8 << 20);
    h.cmd(&["ZADD", "small", "1", "a", "-0", "b", "inf", "c", "0.1", "d", "-1e300", "e"]);
    let mut args = vec!["ZADD".to_string(), "big".to_string()];
    for k in 0..300 {
        args.push(format!("{}.25", k % 41));
        args.push(format!("member:{k}"));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    h.cmd(&a);
    h.cmd(&["ZADD", "wide", "3", &"w".repeat(100)]);
    for key in ["small", "big", "wide"] {
        let Value::Bulk(payload) = h.cmd(&["DUMP", key]) else { panic!("DUMP {key}") };
        let dst = format!("{key}:r");
        let ok = h.cmd_bytes(&[b"RESTORE", dst.as_bytes(), b"0", &payload]);
        assert_eq!(ok, Value::Simple(b"OK".to_vec()));
        assert_eq!(all(&mut h, &dst), all(&mut h, key), "{key}");
        assert_eq!(h.encoding(&dst), h.encoding(key), "{key}");
        h.check_index(&dst);
        // A restored set follows the thresholds of now.
        h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "2"]);
        h.cmd_bytes(&[b"RESTORE", dst.as_bytes(), b"1000", &payload, b"REPLACE"]);
        assert_eq!(h.encoding(&dst), "skiplist", "{key}");
        assert_eq!(all(&mut h, &dst), all(&mut h, key), "{key}");
        assert_eq!(h.cmd(&["PTTL", &dst]), i(1000));
        h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "128"]);
        h.cmd(&["DEL", &dst]);
    }
    assert_eq!(h.encoding("small"), "listpack");
    // A listpack holds -0 as 0, as Redis's does.
    assert_eq!(h.cmd(&["ZSCORE", "small", "b"]), b("0"));
}

/// Client `h` WATCHes `watch`, client `other` runs `write`, `h` runs MULTI PING EXEC: EXEC's
/// reply.
fn exec_after(h: &mut Harness, other: &mut Session, watch: &str, write: &[&str]) -> Value {
    h.cmd(&["WATCH", watch]);
    std::mem::swap(&mut h.session, other);
    h.cmd(write);
    std::mem::swap(&mut h.session, other);
    h.cmd(&["MULTI"]);
    h.cmd(&["PING"]);
    h.cmd(&["EXEC"])
}

#[test]
fn a_store_touches_its_destination_for_watch_not_its_sources() {
    let mut h = Harness::with_size(8 << 20);
    let mut other = Session::new(8, "other".into(), true);
    h.cmd(&["ZADD", "src", "1", "a", "2", "b"]);
    let ran = Value::Array(vec![Value::Simple(b"PONG".to_vec())]);
    for write in [
        &["ZRANGESTORE", "dst", "src", "0", "-1"][..],
        &["ZUNIONSTORE", "dst", "1", "src"],
        &["ZINTERSTORE", "dst", "2", "src", "src"],
        &["COPY", "src", "dst", "REPLACE"],
    ] {
        assert_eq!(exec_after(&mut h, &mut other, "src", write), ran, "{write:?} read its source");
        assert_eq!(
            exec_after(&mut h, &mut other, "dst", write),
            Value::Null,
            "{write:?} wrote its destination"
        );
    }
    // COPY to another database touches the key there.
    h.cmd(&["SELECT", "2"]);
    let copy = ["COPY", "src", "dst", "DB", "2", "REPLACE"];
    assert_eq!(
        exec_after(&mut h, &mut other, "dst", &copy),
        Value::Null,
        "COPY ... DB 2 wrote dst in database 2"
    );
    h.cmd(&["SELECT", "0"]);
    assert_eq!(exec_after(&mut h, &mut other, "dst", &copy), ran, "not dst of database 0");
    // The pops touch the key they pop, ZMPOP's too (not in its table entry).
    assert_eq!(exec_after(&mut h, &mut other, "src", &["ZMPOP", "1", "src", "MIN"]), Value::Null);
    assert_eq!(exec_after(&mut h, &mut other, "src", &["ZPOPMAX", "src"]), Value::Null);
}

#[test]
fn sort_takes_a_sorted_set() {
    for big in [false, true] {
        let mut h = Harness::with_size(8 << 20);
        if big {
            h.cmd(&["CONFIG", "SET", "zset-max-listpack-entries", "0"]);
        }
        h.cmd(&["ZADD", "z", "3", "10", "1", "2", "2", "abc", "5", "1.5"]);
        // What a redis-server 7.0.15 answers.
        assert_eq!(err(&h.cmd(&["SORT", "z"])), "ERR One or more scores can't be converted into double");
        assert_eq!(h.cmd(&["SORT", "z", "ALPHA"]), arr(&["1.5", "10", "2", "abc"]));
        assert_eq!(h.cmd(&["SORT", "z", "BY", "nosort"]), arr(&["2", "abc", "10", "1.5"]));
        assert_eq!(h.cmd(&["SORT", "z", "BY", "nosort", "DESC"]), arr(&["1.5", "10", "abc", "2"]));
        assert_eq!(h.cmd(&["SORT", "z", "BY", "nosort", "LIMIT", "1", "2"]), arr(&["abc", "10"]));
        assert_eq!(h.cmd(&["SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "2"]), arr(&["10", "abc"]));
        h.cmd(&["ZREM", "z", "abc"]);
        assert_eq!(h.cmd(&["SORT", "z", "DESC"]), arr(&["10", "2", "1.5"]));
    }
}
