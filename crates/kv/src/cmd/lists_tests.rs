//! List commands against a store in the heap, replies decoded (and, where Redis tells nulls
//! apart, compared byte for byte), and a random run against a model under small fills.

use super::*;
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use crate::store::{VecMem, ENC_QUICKLIST, KIND_LIST};
use std::collections::VecDeque;

use super::strings::tests::TestHost;

struct Harness {
    settings: Settings,
    watches: Watches,
    store: Store<VecMem>,
    session: Session,
    now_ms: u64,
    output_limit: usize,
}

impl Harness {
    fn new() -> Harness {
        Harness::sized(8 << 20)
    }

    fn sized(bytes: u64) -> Harness {
        Harness {
            settings: Settings::default(),
            watches: Watches::default(),
            store: Store::open(VecMem::new(bytes), 1024).unwrap(),
            session: Session::new(7, "t".into(), true),
            now_ms: 1_000_000,
            output_limit: 1 << 30,
        }
    }

    /// Runs one command in a batch of its own: its outcome and raw reply.
    fn raw(&mut self, args: &[&[u8]]) -> (Outcome, Vec<u8>) {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        let mut cx = Cx {
            store: &mut self.store,
            host: &TestHost { max_bulk: 1 << 20 },
            now_ms: self.now_ms,
            max_ranges: 1024,
            max_group_bytes: 1 << 30,
            output_limit: self.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut Default::default(),
            telemetry: &mut Default::default(),
            cluster: None,
        };
        let o =
            execute(&mut cx, &mut self.session, &Args::Parsed { parser: &p, buf: &req }, &mut out).unwrap();
        assert_ne!(o, Outcome::Retry);
        self.store.seal(1024).unwrap();
        (o, out)
    }

    fn cmd(&mut self, args: &[&str]) -> Value {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        let (o, out) = self.raw(&a);
        assert!(!matches!(o, Outcome::Block(_)), "{args:?} blocked");
        let (v, n) = decode(&out, &Limits::default()).unwrap().expect("a whole reply");
        assert_eq!(n, out.len(), "one reply for {args:?}");
        v
    }

    fn bytes(&mut self, args: &[&str]) -> String {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        String::from_utf8_lossy(&self.raw(&a).1).into_owned()
    }

    fn list(&mut self, key: &str) -> Vec<String> {
        match self.cmd(&["LRANGE", key, "0", "-1"]) {
            Value::Array(v) => v.into_iter().map(|x| text(&x)).collect(),
            other => panic!("{other:?}"),
        }
    }

    fn encoding(&mut self, key: &str) -> u8 {
        self.store.find(key.as_bytes()).unwrap().expect("the key").head.encoding
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("not a bulk string: {other:?}"),
    }
}

fn b(s: &str) -> Value {
    Value::bulk(s)
}
fn i(n: i64) -> Value {
    Value::Int(n)
}
fn arr(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| b(s)).collect())
}
fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn pushes_pops_and_reads() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["LPUSH", "l", "a", "b", "c"]), i(3));
    assert_eq!(h.cmd(&["RPUSH", "l", "0", "1"]), i(5));
    assert_eq!(h.list("l"), ["c", "b", "a", "0", "1"]);
    assert_eq!(h.cmd(&["LPUSHX", "nope", "x"]), i(0));
    assert_eq!(h.cmd(&["RPUSHX", "l", "2"]), i(6));
    assert_eq!(h.cmd(&["EXISTS", "nope"]), i(0));
    assert_eq!(h.cmd(&["LLEN", "l"]), i(6));
    assert_eq!(h.cmd(&["LLEN", "nope"]), i(0));
    assert_eq!(h.cmd(&["LINDEX", "l", "0"]), b("c"));
    assert_eq!(h.cmd(&["LINDEX", "l", "-1"]), b("2"));
    assert_eq!(h.cmd(&["LINDEX", "l", "6"]), Value::Null);
    assert_eq!(h.cmd(&["LINDEX", "l", "-7"]), Value::Null);
    assert_eq!(err(&h.cmd(&["LINDEX", "l", "x"])), NOT_INT);
    assert_eq!(h.cmd(&["LINDEX", "nope", "x"]), Value::Null, "the key is looked up first");
    assert_eq!(h.cmd(&["LRANGE", "l", "1", "2"]), arr(&["b", "a"]));
    assert_eq!(h.cmd(&["LRANGE", "l", "-2", "100"]), arr(&["1", "2"]));
    assert_eq!(h.cmd(&["LRANGE", "l", "5", "1"]), arr(&[]));
    assert_eq!(h.cmd(&["LRANGE", "l", "-100", "0"]), arr(&["c"]));
    assert_eq!(err(&h.cmd(&["LRANGE", "nope", "a", "1"])), NOT_INT);
    assert_eq!(h.cmd(&["LPOP", "l"]), b("c"));
    assert_eq!(h.cmd(&["RPOP", "l"]), b("2"));
    assert_eq!(h.cmd(&["LPOP", "l", "2"]), arr(&["b", "a"]));
    assert_eq!(h.cmd(&["RPOP", "l", "5"]), arr(&["1", "0"]));
    assert_eq!(h.cmd(&["EXISTS", "l"]), i(0), "an emptied list is deleted");
    assert_eq!(h.cmd(&["TYPE", "x"]), Value::Simple(b"none".to_vec()));
    h.cmd(&["RPUSH", "l", "x"]);
    assert_eq!(h.cmd(&["TYPE", "l"]), Value::Simple(b"list".to_vec()));
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "l"]), b("quicklist"));
    assert_eq!(h.cmd(&["LPOP", "l", "0"]), arr(&[]));
    assert_eq!(err(&h.cmd(&["LPOP", "l", "-1"])), "ERR value is out of range, must be positive");
    assert_eq!(err(&h.cmd(&["LPOP", "l", "x"])), "ERR value is out of range, must be positive");
    assert_eq!(err(&h.cmd(&["LPOP", "l", "1", "2"])), "ERR wrong number of arguments for 'lpop' command");
    // Nulls: a bulk without a count, an array with one; RESP3's own null.
    assert_eq!(h.bytes(&["LPOP", "nope"]), "$-1\r\n");
    assert_eq!(h.bytes(&["RPOP", "nope", "0"]), "*-1\r\n");
    assert_eq!(h.bytes(&["LPOP", "nope", "1"]), "*-1\r\n");
    h.cmd(&["HELLO", "3"]);
    assert_eq!(h.bytes(&["LPOP", "nope", "1"]), "_\r\n");
    assert_eq!(h.bytes(&["LPOP", "nope"]), "_\r\n");
}

#[test]
fn wrong_types_and_errors() {
    let mut h = Harness::new();
    h.cmd(&["SET", "s", "v"]);
    for c in [
        &["LPUSH", "s", "a"][..],
        &["RPUSHX", "s", "a"],
        &["LPOP", "s"],
        &["LLEN", "s"],
        &["LINDEX", "s", "0"],
        &["LRANGE", "s", "0", "1"],
        &["LSET", "s", "0", "x"],
        &["LINSERT", "s", "BEFORE", "a", "b"],
        &["LREM", "s", "0", "a"],
        &["LTRIM", "s", "0", "1"],
        &["LPOS", "s", "a"],
        &["LMOVE", "s", "d", "LEFT", "LEFT"],
        &["LMPOP", "1", "s", "LEFT"],
        &["BLPOP", "s", "0"],
        &["BLMOVE", "s", "d", "LEFT", "LEFT", "0"],
    ] {
        assert_eq!(err(&h.cmd(c)), WRONGTYPE, "{c:?}");
    }
    h.cmd(&["RPUSH", "l", "a"]);
    assert_eq!(err(&h.cmd(&["LMOVE", "l", "s", "LEFT", "LEFT"])), WRONGTYPE);
    assert_eq!(h.list("l"), ["a"], "nothing moved");
    assert_eq!(err(&h.cmd(&["GET", "l"])), WRONGTYPE);
    assert_eq!(err(&h.cmd(&["LSET", "nope", "0", "x"])), "ERR no such key");
    assert_eq!(err(&h.cmd(&["LSET", "l", "1", "x"])), "ERR index out of range");
    assert_eq!(err(&h.cmd(&["LSET", "l", "x", "x"])), NOT_INT);
    assert_eq!(err(&h.cmd(&["LINSERT", "l", "aft3r", "a", "b"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["LMOVE", "l", "d", "UP", "LEFT"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["LPUSH", "l"])), "ERR wrong number of arguments for 'lpush' command");
    assert_eq!(err(&h.cmd(&["LMPOP", "0", "l", "LEFT"])), "ERR numkeys should be greater than 0");
    assert_eq!(err(&h.cmd(&["LMPOP", "x", "l", "LEFT"])), "ERR numkeys should be greater than 0");
    assert_eq!(err(&h.cmd(&["LMPOP", "5", "l", "LEFT"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["LMPOP", "1", "l", "LEFT", "COUNT", "0"])), "ERR count should be greater than 0");
    assert_eq!(err(&h.cmd(&["LMPOP", "1", "l", "LEFT", "COUNT", "1", "COUNT", "1"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["LMPOP", "1", "l", "MIDDLE"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["LMPOP", "9223372036854775807", "l", "LEFT"])), SYNTAX);
    assert_eq!(err(&h.cmd(&["BLPOP", "l", "-1"])), "ERR timeout is negative");
    assert_eq!(err(&h.cmd(&["BLPOP", "l", "x"])), "ERR timeout is not a float or out of range");
    assert_eq!(err(&h.cmd(&["BLMPOP", "x", "1", "l", "LEFT"])), "ERR timeout is not a float or out of range");
}

#[test]
fn set_insert_remove_trim_position() {
    let mut h = Harness::new();
    h.cmd(&["RPUSH", "l", "a", "b", "c", "b", "a", "b"]);
    assert_eq!(h.cmd(&["LSET", "l", "-1", "z"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.cmd(&["LINSERT", "l", "BEFORE", "b", "x"]), i(7));
    assert_eq!(h.cmd(&["LINSERT", "l", "after", "z", "y"]), i(8));
    assert_eq!(h.cmd(&["LINSERT", "l", "after", "nope", "y"]), i(-1));
    assert_eq!(h.cmd(&["LINSERT", "nope", "after", "a", "y"]), i(0));
    assert_eq!(h.list("l"), ["a", "x", "b", "c", "b", "a", "z", "y"]);
    assert_eq!(h.cmd(&["LPOS", "l", "b"]), i(2));
    assert_eq!(h.cmd(&["LPOS", "l", "b", "RANK", "2"]), i(4));
    assert_eq!(h.cmd(&["LPOS", "l", "b", "RANK", "-1"]), i(4));
    assert_eq!(h.cmd(&["LPOS", "l", "b", "RANK", "3"]), Value::Null);
    assert_eq!(h.cmd(&["LPOS", "l", "a", "COUNT", "0"]), Value::Array(vec![i(0), i(5)]));
    assert_eq!(h.cmd(&["LPOS", "l", "a", "COUNT", "0", "RANK", "-1"]), Value::Array(vec![i(5), i(0)]));
    assert_eq!(h.cmd(&["LPOS", "l", "a", "COUNT", "0", "MAXLEN", "3"]), Value::Array(vec![i(0)]));
    assert_eq!(h.cmd(&["LPOS", "nope", "a", "COUNT", "0"]), Value::Array(vec![]));
    assert_eq!(h.cmd(&["LPOS", "nope", "a"]), Value::Null);
    assert!(err(&h.cmd(&["LPOS", "l", "a", "RANK", "0"])).starts_with("ERR RANK can't be zero: use 1"));
    assert_eq!(err(&h.cmd(&["LPOS", "l", "a", "COUNT", "-1"])), "ERR COUNT can't be negative");
    assert_eq!(err(&h.cmd(&["LPOS", "l", "a", "MAXLEN", "-1"])), "ERR MAXLEN can't be negative");
    assert_eq!(err(&h.cmd(&["LPOS", "l", "a", "RANK"])), SYNTAX);
    assert_eq!(h.cmd(&["LREM", "l", "-1", "b"]), i(1));
    assert_eq!(h.list("l"), ["a", "x", "b", "c", "a", "z", "y"]);
    assert_eq!(h.cmd(&["LREM", "l", "0", "a"]), i(2));
    assert_eq!(h.cmd(&["LREM", "nope", "0", "a"]), i(0));
    assert_eq!(h.cmd(&["LTRIM", "l", "1", "-2"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.list("l"), ["b", "c", "z"]);
    assert_eq!(h.cmd(&["LTRIM", "l", "5", "1"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.cmd(&["EXISTS", "l"]), i(0), "trimmed to nothing: deleted");
    assert_eq!(h.cmd(&["LTRIM", "nope", "0", "1"]), Value::Simple(b"OK".to_vec()));
    h.cmd(&["RPUSH", "l", "a", "a"]);
    assert_eq!(h.cmd(&["LREM", "l", "0", "a"]), i(2));
    assert_eq!(h.cmd(&["EXISTS", "l"]), i(0));
}

#[test]
fn moves_and_multi_pops() {
    let mut h = Harness::new();
    h.cmd(&["RPUSH", "src", "a", "b", "c"]);
    assert_eq!(h.cmd(&["LMOVE", "src", "dst", "LEFT", "RIGHT"]), b("a"));
    assert_eq!(h.cmd(&["RPOPLPUSH", "src", "dst"]), b("c"));
    assert_eq!(h.list("dst"), ["c", "a"]);
    assert_eq!(h.cmd(&["LMOVE", "nope", "dst", "LEFT", "RIGHT"]), Value::Null);
    // A rotation keeps the list and its expiry.
    h.cmd(&["RPUSH", "r", "1", "2", "3"]);
    h.cmd(&["EXPIRE", "r", "100"]);
    assert_eq!(h.cmd(&["LMOVE", "r", "r", "LEFT", "RIGHT"]), b("1"));
    assert_eq!(h.cmd(&["RPOPLPUSH", "r", "r"]), b("1"));
    assert_eq!(h.list("r"), ["1", "2", "3"]);
    assert_eq!(h.cmd(&["TTL", "r"]), i(100));
    h.cmd(&["RPUSH", "one", "x"]);
    assert_eq!(h.cmd(&["RPOPLPUSH", "one", "one"]), b("x"));
    assert_eq!(h.list("one"), ["x"]);
    // LMPOP: the first non-empty key.
    h.cmd(&["RPUSH", "m2", "1", "2", "3"]);
    assert_eq!(
        h.cmd(&["LMPOP", "3", "nope", "m2", "src", "RIGHT", "COUNT", "2"]),
        Value::Array(vec![b("m2"), arr(&["3", "2"])])
    );
    assert_eq!(h.cmd(&["LMPOP", "1", "m2", "LEFT", "COUNT", "10"]), Value::Array(vec![b("m2"), arr(&["1"])]));
    assert_eq!(h.bytes(&["LMPOP", "2", "m2", "nope", "LEFT"]), "*-1\r\n");
    // Blocking forms with data there answer as the plain ones.
    assert_eq!(h.cmd(&["BLPOP", "nope", "src", "0"]), arr(&["src", "b"]));
    h.cmd(&["RPUSH", "bl", "p", "q"]);
    assert_eq!(h.cmd(&["BRPOP", "bl", "1"]), arr(&["bl", "q"]));
    assert_eq!(h.cmd(&["BLMOVE", "bl", "dst", "RIGHT", "LEFT", "0"]), b("p"));
    assert_eq!(
        h.cmd(&["BLMPOP", "0", "1", "dst", "LEFT", "COUNT", "2"]),
        Value::Array(vec![b("dst"), arr(&["p", "c"])])
    );
}

#[test]
fn blocking_commands_block_or_answer_null_in_a_transaction() {
    let mut h = Harness::new();
    let blocks = |h: &mut Harness, a: &[&str]| {
        let a: Vec<&[u8]> = a.iter().map(|s| s.as_bytes()).collect();
        let (o, out) = h.raw(&a);
        assert!(out.is_empty(), "nothing answered");
        match o {
            Outcome::Block(w) => w,
            other => panic!("{other:?}"),
        }
    };
    let w = blocks(&mut h, &["BLPOP", "a", "b", "a", "1.5"]);
    assert_eq!(w, Wait { keys: vec![b"a".to_vec(), b"b".to_vec()], kind: KIND_LIST, deadline_ms: 1_001_500 });
    assert_eq!(blocks(&mut h, &["BRPOPLPUSH", "a", "b", "0"]).keys, vec![b"a".to_vec()]);
    assert_eq!(blocks(&mut h, &["BLMOVE", "a", "b", "LEFT", "LEFT", "0"]).deadline_ms, 0);
    assert_eq!(
        blocks(&mut h, &["BLMPOP", "0", "2", "a", "c", "LEFT"]).keys,
        vec![b"a".to_vec(), b"c".to_vec()]
    );
    assert_eq!(h.cmd(&["EXISTS", "a", "b"]), i(0));
    // In a transaction: the non-blocking answer.
    h.cmd(&["RPUSH", "x", "foo", "bar"]);
    h.cmd(&["MULTI"]);
    for c in [
        &["BRPOPLPUSH", "x", "t", "0"][..],
        &["BRPOPLPUSH", "x", "t", "0"],
        &["BRPOPLPUSH", "x", "t", "0"],
        &["BLPOP", "x", "0"],
        &["BLMPOP", "0", "1", "x", "LEFT"],
        &["LRANGE", "t", "0", "-1"],
    ] {
        h.cmd(c);
    }
    assert_eq!(
        h.bytes(&["EXEC"]),
        "*6\r\n$3\r\nbar\r\n$3\r\nfoo\r\n$-1\r\n*-1\r\n*-1\r\n*2\r\n$3\r\nfoo\r\n$3\r\nbar\r\n"
    );
    assert!(!h.session.deny_blocking, "blocking is allowed again after EXEC");
}

#[test]
fn a_list_past_the_fill_becomes_a_chain_and_keeps_its_expiry() {
    let mut h = Harness::new();
    h.cmd(&["CONFIG", "SET", "list-max-listpack-size", "4"]);
    h.cmd(&["RPUSH", "l", "1", "2", "3", "4"]);
    assert_eq!(h.encoding("l"), 0);
    h.cmd(&["PEXPIRE", "l", "50000"]);
    h.cmd(&["LPUSH", "l", "0"]);
    assert_eq!(h.encoding("l"), ENC_QUICKLIST);
    assert_eq!(h.cmd(&["PTTL", "l"]), i(50000));
    assert_eq!(h.cmd(&["OBJECT", "ENCODING", "l"]), b("quicklist"));
    for n in 5..40 {
        h.cmd(&["RPUSH", "l", &n.to_string()]);
    }
    let want: Vec<String> = (0..40).map(|n| n.to_string()).collect();
    assert_eq!(h.list("l"), want);
    assert_eq!(h.cmd(&["LINDEX", "l", "33"]), b("33"));
    // Emptied, the chain's nodes are freed with the key.
    let used = h.store.used_bytes();
    h.cmd(&["LPOP", "l", "40"]);
    assert_eq!(h.cmd(&["EXISTS", "l"]), i(0));
    assert!(h.store.used_bytes() < used);
    assert_eq!(h.store.used_bytes(), 0, "nothing left in the heap");
    // Deleted, renamed, expired: the chain goes with its key.
    let big: Vec<String> = (0..200).map(|n| format!("e{n}")).collect();
    let mut push = vec!["RPUSH", "a"];
    push.extend(big.iter().map(|s| s.as_str()));
    h.cmd(&push);
    assert_eq!(h.cmd(&["RENAME", "a", "b"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.list("b"), big);
    h.cmd(&["DEL", "b"]);
    assert_eq!(h.store.used_bytes(), 0);
    h.cmd(&push);
    h.cmd(&["PEXPIRE", "a", "10"]);
    h.now_ms += 20;
    assert_eq!(h.cmd(&["LLEN", "a"]), i(0));
    assert_eq!(h.cmd(&["RPUSH", "a", "new"]), i(1), "an expired list is replaced");
    assert_eq!(h.cmd(&["DEL", "a"]), i(1));
    assert_eq!(h.store.used_bytes(), 0);
}

#[test]
fn a_reply_past_the_output_limit_is_undone() {
    let mut h = Harness::new();
    h.output_limit = 4096;
    let e = "e".repeat(1000);
    for _ in 0..10 {
        h.cmd(&["RPUSH", "l", &e]);
    }
    let (o, _) = h.raw(&[b"LPOP", b"l", b"10"]);
    assert_eq!(o, Outcome::OverLimit);
    assert_eq!(h.cmd(&["LLEN", "l"]), i(10), "the pop was undone");
    let (o, _) = h.raw(&[b"LRANGE", b"l", b"0", b"-1"]);
    assert_eq!(o, Outcome::OverLimit);
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Random commands against a model of every key, under fills that make lists change form
/// often; a check of every list now and then.
#[test]
fn commands_agree_with_a_model() {
    for (seed, fill) in [(1u64, "3"), (2, "-1"), (3, "1"), (4, "-2")] {
        let mut h = Harness::sized(32 << 20);
        h.cmd(&["CONFIG", "SET", "list-max-listpack-size", fill]);
        let mut r = Rng(seed);
        let keys = ["k0", "k1", "k2"];
        let mut model: Vec<VecDeque<String>> = vec![VecDeque::new(); 3];
        for step in 0..3000 {
            let k = r.below(3) as usize;
            let key = keys[k];
            let m = &mut model[k];
            let len = m.len() as i64;
            let e = match r.below(5) {
                0 => "x".repeat(r.below(5000) as usize),
                _ => format!("v{}", r.below(8)),
            };
            match r.below(12) {
                0 | 1 => {
                    let n = 1 + r.below(4);
                    let mut c = vec!["LPUSH".to_string(), key.to_string()];
                    for j in 0..n {
                        c.push(format!("{e}{j}"));
                        m.push_front(format!("{e}{j}"));
                    }
                    let c: Vec<&str> = c.iter().map(|s| s.as_str()).collect();
                    assert_eq!(h.cmd(&c), i(m.len() as i64));
                }
                2 | 3 => {
                    m.push_back(e.clone());
                    assert_eq!(h.cmd(&["RPUSH", key, &e]), i(m.len() as i64));
                }
                4 => {
                    let want = m.pop_front();
                    let got = h.cmd(&["LPOP", key]);
                    assert_eq!(got, want.map_or(Value::Null, |x| b(&x)));
                }
                5 => {
                    let n = r.below(4);
                    let got = h.cmd(&["RPOP", key, &n.to_string()]);
                    if m.is_empty() {
                        assert_eq!(got, Value::Null);
                    } else {
                        let want: Vec<Value> = (0..n).filter_map(|_| m.pop_back()).map(|x| b(&x)).collect();
                        assert_eq!(got, Value::Array(want));
                    }
                }
                6 if len > 0 => {
                    let idx = r.below(2 * len as u64) as i64 - len;
                    let at = if idx < 0 { len + idx } else { idx } as usize;
                    assert_eq!(h.cmd(&["LSET", key, &idx.to_string(), &e]), Value::Simple(b"OK".to_vec()));
                    m[at] = e;
                }
                7 if len > 0 => {
                    let pivot = m[r.below(len as u64) as usize].clone();
                    let after = r.below(2) == 0;
                    let at = m.iter().position(|x| *x == pivot).unwrap() + usize::from(after);
                    m.insert(at, e.clone());
                    let w = if after { "AFTER" } else { "BEFORE" };
                    assert_eq!(h.cmd(&["LINSERT", key, w, &pivot, &e]), i(m.len() as i64));
                }
                8 if len > 0 => {
                    let x = m[r.below(len as u64) as usize].clone();
                    let count = r.below(5) as i64 - 2;
                    let idx: Vec<usize> =
                        if count < 0 { (0..m.len()).rev().collect() } else { (0..m.len()).collect() };
                    let mut gone = vec![false; m.len()];
                    let mut n = 0;
                    for j in idx {
                        if (count == 0 || n < count.unsigned_abs()) && m[j] == x {
                            gone[j] = true;
                            n += 1;
                        }
                    }
                    let mut j = 0;
                    m.retain(|_| {
                        j += 1;
                        !gone[j - 1]
                    });
                    assert_eq!(h.cmd(&["LREM", key, &count.to_string(), &x]), i(n as i64));
                }
                9 => {
                    let (s, e) = (r.below(8) as i64 - 2, r.below(20) as i64 - 4);
                    h.cmd(&["LTRIM", key, &s.to_string(), &e.to_string()]);
                    let n = m.len() as i64;
                    let s2 = if s < 0 { n + s } else { s }.max(0);
                    let e2 = (if e < 0 { n + e } else { e }).min(n - 1);
                    *m = if s2 > e2 || s2 >= n {
                        VecDeque::new()
                    } else {
                        m.range(s2 as usize..=e2 as usize).cloned().collect()
                    };
                }
                10 => {
                    let d = (k + 1 + r.below(2) as usize) % 3;
                    let (from, to) = (r.below(2) == 0, r.below(2) == 0);
                    let side = |f: bool| if f { "LEFT" } else { "RIGHT" };
                    let got = h.cmd(&["LMOVE", key, keys[d], side(from), side(to)]);
                    let v = if from { model[k].pop_front() } else { model[k].pop_back() };
                    match v {
                        None => assert_eq!(got, Value::Null),
                        Some(v) => {
                            assert_eq!(got, b(&v));
                            if to {
                                model[d].push_front(v)
                            } else {
                                model[d].push_back(v)
                            }
                        }
                    }
                }
                _ if len > 0 => {
                    let idx = r.below(len as u64);
                    assert_eq!(h.cmd(&["LINDEX", key, &idx.to_string()]), b(&m[idx as usize]));
                }
                _ => {}
            }
            if step % 100 == 0 || step == 2999 {
                for (k, m) in keys.iter().zip(&model) {
                    let want: Vec<String> = m.iter().cloned().collect();
                    assert_eq!(h.list(k), want, "seed {seed} fill {fill} step {step} key {k}");
                    assert_eq!(h.cmd(&["EXISTS", k]), i(i64::from(!m.is_empty())));
                }
            }
        }
        for k in keys {
            h.cmd(&["DEL", k]);
        }
        assert_eq!(h.store.used_bytes(), 0, "seed {seed}: every block given back");
    }
}
