//! The string commands against a store in the heap, replies compared with Redis's; and the
//! harness the key commands' tests use too.

use crate::cmd::{
    client, execute, Args, Auth, Cx, Host, Outcome, Replication, Sentinel, Session, Settings, Stats, Watches,
};
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use crate::store::{Store, VecMem};

/// A server with nothing around it: one mirror, online.
pub(crate) struct TestHost {
    /// `proto-max-bulk-len`.
    pub max_bulk: u64,
}

impl Host for TestHost {
    fn authenticate(&self, _client: &str, _user: &[u8], _password: &[u8]) -> Auth {
        Auth::NoPassword
    }
    fn replication(&self) -> Replication {
        Replication { mode: "sync".into(), state: "online".into(), durable_replicas: 1, ..Default::default() }
    }
    fn connected_clients(&self) -> usize {
        1
    }
    fn listen_addr(&self) -> String {
        "127.0.0.1:6379".into()
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn fixed_setting(&self, name: &str) -> String {
        match name {
            "proto-max-bulk-len" => self.max_bulk.to_string(),
            _ => format!("fixed {name}"),
        }
    }
    fn reset_stats(&self) {}
    fn my_conn(&self) -> client::Conn {
        client::Conn::default()
    }
    fn other_clients(&self, _f: &mut dyn FnMut(&Session, &client::Conn)) {}
    fn kill_clients(&self, _ids: &[u64]) {}
    fn pause(&self, _until_ms: u64, _all: bool) {}
    fn paused(&self, _now_ms: u64, _write: bool) -> bool {
        false
    }
    fn sentinel(&self) -> Sentinel {
        Sentinel::default()
    }
}

/// Commands run as the server runs them, on a store in memory.
pub(crate) struct Harness {
    pub host: TestHost,
    pub settings: Settings,
    pub watches: Watches,
    pub store: Store<VecMem>,
    pub session: Session,
    pub now_ms: u64,
    pub output_limit: usize,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_size(4 << 20)
    }

    pub fn with_size(size: u64) -> Harness {
        Harness::on(Store::open(VecMem::new(size), 1024).unwrap())
    }

    /// On a store opened already (a reopened image).
    pub fn on(store: Store<VecMem>) -> Harness {
        Harness {
            host: TestHost { max_bulk: 1 << 20 },
            settings: Settings::default(),
            watches: Watches::default(),
            store,
            session: Session::new(7, "t".into(), true),
            now_ms: 1_000_000,
            output_limit: 8 << 20,
        }
    }

    /// Runs one command and returns its reply, sealing the batch.
    pub fn cmd(&mut self, args: &[&str]) -> Value {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.cmd_bytes(&a)
    }

    /// As [`Harness::cmd`], with arguments of any bytes.
    pub fn cmd_bytes(&mut self, args: &[&[u8]]) -> Value {
        let (o, v) = self.in_batch(args);
        assert_ne!(o, Outcome::Retry);
        self.store.seal(1024).unwrap();
        v.expect("a reply")
    }

    /// Runs one command in the open batch (not sealed after): its outcome and its reply.
    pub fn in_batch(&mut self, args: &[&[u8]]) -> (Outcome, Option<Value>) {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits { max_bulk: 1 << 30, max_args: 1 << 20, max_inline: 1 << 20 });
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
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
        if out.is_empty() {
            return (o, None);
        }
        let limits = Limits { max_bulk: 1 << 30, max_args: 1 << 24, max_inline: 1 << 20 };
        let (v, n) = decode(&out, &limits).unwrap().expect("a whole reply");
        assert_eq!(n, out.len(), "one reply for {args:?}");
        (o, Some(v))
    }

    /// `OBJECT ENCODING key`, as text.
    pub fn encoding(&mut self, key: &str) -> String {
        match self.cmd(&["OBJECT", "ENCODING", key]) {
            Value::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("OBJECT ENCODING {key}: {other:?}"),
        }
    }
}

pub(crate) fn ok() -> Value {
    Value::Simple(b"OK".to_vec())
}
pub(crate) fn b(s: &str) -> Value {
    Value::bulk(s)
}
pub(crate) fn i(n: i64) -> Value {
    Value::Int(n)
}
pub(crate) fn arr(v: Vec<Value>) -> Value {
    Value::Array(v)
}
pub(crate) fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn getex_sets_and_removes_expiries() {
    let mut h = Harness::new();
    h.cmd(&["SET", "foo", "bar"]);
    assert_eq!(h.cmd(&["GETEX", "foo", "EX", "10"]), b("bar"));
    assert_eq!(h.cmd(&["PTTL", "foo"]), i(10_000));
    assert_eq!(
        h.cmd(&["GETEX", "foo", "PX", "500", "PX", "700"]),
        b("bar"),
        "the same option twice: the last"
    );
    assert_eq!(h.cmd(&["PTTL", "foo"]), i(700));
    let at = (h.now_ms + 2000).to_string();
    assert_eq!(h.cmd(&["GETEX", "foo", "PXAT", &at]), b("bar"));
    assert_eq!(h.cmd(&["PEXPIRETIME", "foo"]), i(h.now_ms as i64 + 2000));
    assert_eq!(h.cmd(&["GETEX", "foo", "PERSIST"]), b("bar"));
    assert_eq!(h.cmd(&["TTL", "foo"]), i(-1));
    assert_eq!(h.cmd(&["GETEX", "foo"]), b("bar"));
    assert_eq!(h.cmd(&["GETEX", "nope", "EX", "-1"]), Value::Null, "no key: nothing is checked");
    assert!(err(&h.cmd(&["GETEX", "foo", "NX"])).contains("syntax"));
    assert!(err(&h.cmd(&["GETEX", "foo", "EX", "1", "PX", "1"])).contains("syntax"));
    assert!(err(&h.cmd(&["GETEX", "foo", "EX"])).contains("syntax"));
    assert!(err(&h.cmd(&["GETEX", "foo", "PERSIST", "EX", "1"])).contains("syntax"));
    assert_eq!(
        err(&h.cmd(&["GETEX", "foo", "EX", "10000000000000000"])),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(
        err(&h.cmd(&["GETEX", "foo", "EX", "-9999999999999999"])),
        "ERR invalid expire time in 'getex' command"
    );
    assert_eq!(err(&h.cmd(&["GETEX", "foo", "EX", "x"])), crate::cmd::NOT_INT);
    // A Unix time already past deletes the key, after answering its value.
    assert_eq!(h.cmd(&["GETEX", "foo", "EXAT", "1"]), b("bar"));
    assert_eq!(h.cmd(&["EXISTS", "foo"]), i(0));
    h.cmd(&["HSET", "h", "f", "v"]);
    assert!(err(&h.cmd(&["GETEX", "h"])).starts_with("WRONGTYPE"));
    assert_eq!(err(&h.cmd(&["GETEX"])), "ERR wrong number of arguments for 'getex' command");
    // SET reads its options as Redis does: a syntax error anywhere comes first.
    assert!(err(&h.cmd(&["SET", "k", "v", "EX", "-1", "BAD"])).contains("syntax"));
    assert_eq!(h.cmd(&["SET", "k", "v", "EX", "5", "EX", "7"]), ok());
    assert_eq!(h.cmd(&["TTL", "k"]), i(7));
    assert!(err(&h.cmd(&["SET", "k", "v", "KEEPTTL", "EX", "7"])).contains("syntax"));
}

#[test]
fn getrange_and_setrange() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["GETRANGE", "nope", "0", "-1"]), b(""));
    h.cmd(&["SET", "k", "Hello World"]);
    for (s, e, want) in [
        ("0", "3", "Hell"),
        ("0", "-1", "Hello World"),
        ("-4", "-1", "orld"),
        ("5", "3", ""),
        ("5", "5000", " World"),
        ("-5000", "10000", "Hello World"),
        ("-1", "-5", ""),
        ("0", "4294967297", "Hello World"),
    ] {
        assert_eq!(h.cmd(&["GETRANGE", "k", s, e]), b(want), "{s} {e}");
    }
    assert_eq!(h.cmd(&["SUBSTR", "k", "6", "-1"]), b("World"));
    assert_eq!(err(&h.cmd(&["GETRANGE", "k", "a", "1"])), crate::cmd::NOT_INT);

    assert_eq!(h.cmd(&["SETRANGE", "new", "0", ""]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "new"]), i(0));
    assert_eq!(h.cmd(&["SETRANGE", "new", "1", "foo"]), i(4));
    assert_eq!(h.cmd(&["GET", "new"]), b("\0foo"));
    assert_eq!(h.encoding("new"), "raw");
    h.cmd(&["SET", "n", "1234"]);
    assert_eq!(h.encoding("n"), "int");
    assert_eq!(h.cmd(&["SETRANGE", "n", "0", ""]), i(4));
    assert_eq!(h.encoding("n"), "int", "nothing written: the encoding stays");
    assert_eq!(h.cmd(&["SETRANGE", "n", "1", "3"]), i(4));
    assert_eq!(h.encoding("n"), "raw");
    assert_eq!(h.cmd(&["GET", "n"]), b("1334"));
    assert_eq!(h.cmd(&["SETRANGE", "n", "6", "2"]), i(7));
    assert_eq!(h.cmd(&["GET", "n"]), b("1334\0\x002"));
    // Past the block: a new entry, the expiry kept.
    h.cmd(&["SET", "t", "abc", "EX", "100"]);
    assert_eq!(h.cmd(&["SETRANGE", "t", "5000", "z"]), i(5001));
    assert_eq!(h.cmd(&["STRLEN", "t"]), i(5001));
    assert_eq!(h.cmd(&["GETRANGE", "t", "0", "3"]), b("abc\0"));
    assert_eq!(h.cmd(&["GETRANGE", "t", "-1", "-1"]), b("z"));
    assert_eq!(h.cmd(&["TTL", "t"]), i(100));
    assert_eq!(err(&h.cmd(&["SETRANGE", "t", "-1", "x"])), "ERR offset is out of range");
    let big = (1u64 << 20).to_string();
    assert_eq!(
        err(&h.cmd(&["SETRANGE", "t", &big, "x"])),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(
        err(&h.cmd(&["SETRANGE", "none", "9223372036854775807", "x"])),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    h.cmd(&["HSET", "h", "f", "v"]);
    assert!(err(&h.cmd(&["SETRANGE", "h", "0", "x"])).starts_with("WRONGTYPE"));
    assert!(err(&h.cmd(&["GETRANGE", "h", "0", "1"])).starts_with("WRONGTYPE"));
}

#[test]
fn object_encoding_of_strings_is_redis_s() {
    let mut h = Harness::new();
    for (v, enc) in [
        ("12345", "int"),
        ("-9223372036854775808", "int"),
        ("9223372036854775808", "embstr"),
        ("012", "embstr"),
        ("-0", "embstr"),
        ("+1", "embstr"),
        ("", "embstr"),
        (&"x".repeat(44), "embstr"),
        (&"x".repeat(45), "raw"),
    ] {
        h.cmd(&["SET", "k", v]);
        assert_eq!(h.encoding("k"), enc, "{v:?}");
    }
    h.cmd(&["SET", "a", "1"]);
    assert_eq!(h.cmd(&["APPEND", "a", ""]), i(1));
    assert_eq!(h.encoding("a"), "raw", "APPEND makes a string raw, even of nothing");
    assert_eq!(h.cmd(&["INCR", "a"]), i(2));
    assert_eq!(h.encoding("a"), "int", "INCR makes an int");
    assert_eq!(h.cmd(&["APPEND", "fresh", "7"]), i(1));
    assert_eq!(h.encoding("fresh"), "int", "APPEND to no key: as SET");
    assert_eq!(h.cmd(&["INCRBYFLOAT", "f", "3"]), b("3"));
    assert_eq!(h.encoding("f"), "embstr", "INCRBYFLOAT never makes an int");
    h.cmd(&["SET", "s", "abc"]);
    assert_eq!(h.cmd(&["SETBIT", "s", "1", "1"]), i(1));
    assert_eq!(h.encoding("s"), "raw", "SETBIT makes a string raw even when the bit was set");
    h.cmd(&["SET", "s", "abc"]);
    assert_eq!(h.encoding("s"), "embstr", "SET makes a string anew");
}

#[test]
fn incrbyfloat_computes_in_long_double() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "1"]), b("1"));
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "0.25"]), b("1.25"));
    h.cmd(&["SET", "n", "0.1", "EX", "100"]);
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "0.2"]), b("0.3"), "a double would say 0.30000000000000004");
    assert_eq!(h.cmd(&["TTL", "n"]), i(100), "the expiry stays");
    h.cmd(&["SET", "n", "17179869184"]);
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "1.5"]), b("17179869185.5"));
    for bad in ["    11", "11    ", " 11 "] {
        h.cmd(&["SET", "n", bad]);
        assert_eq!(err(&h.cmd(&["INCRBYFLOAT", "n", "1.0"])), "ERR value is not a valid float");
    }
    h.cmd(&["SET", "n", "0"]);
    assert_eq!(err(&h.cmd(&["INCRBYFLOAT", "n", "+inf"])), "ERR increment would produce NaN or Infinity");
    assert_eq!(err(&h.cmd(&["INCRBYFLOAT", "n", "abc"])), "ERR value is not a valid float");
    h.cmd(&["SET", "n", "1"]);
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "-1.1"]), b("-0.1"));
    h.cmd(&["SET", "n", "1"]);
    h.cmd(&["SETRANGE", "n", "2", "2"]);
    assert_eq!(err(&h.cmd(&["INCRBYFLOAT", "n", "1"])), "ERR value is not a valid float", "a NUL inside");
    h.cmd(&["DEL", "n"]);
    h.cmd(&["INCRBYFLOAT", "n", "0.024390243902439025"]);
    assert_eq!(h.cmd(&["INCRBYFLOAT", "n", "-0.024390243902439025"]), b("0"), "no negative zero");
    h.cmd(&["HSET", "h", "f", "v"]);
    assert!(err(&h.cmd(&["INCRBYFLOAT", "h", "1"])).starts_with("WRONGTYPE"));
}

/// A value shortened in place and then grown in place in one batch would have had bytes the
/// sealed state still uses written without undo: a crash before the seal then left a value
/// that never was. INCR now writes a shorter number into a new entry.
#[test]
fn a_crash_after_a_shorter_incr_and_an_append_leaves_the_sealed_value() {
    let mut h = Harness::new();
    h.cmd(&["SET", "k", "1000000000"]);
    h.in_batch(&[b"DECRBY", b"k", b"999999990"]);
    h.in_batch(&[b"APPEND", b"k", b"xxxxxxxx"]);
    // The process dies here: the batch is not sealed.
    let image = h.store.mem().image();
    let mut h = Harness::on(Store::open(VecMem::from_bytes(image), 1024).unwrap());
    assert_eq!(h.cmd(&["GET", "k"]), b("1000000000"));
}

#[test]
fn append_keeps_to_proto_max_bulk_len() {
    let mut h = Harness::new();
    h.host.max_bulk = 10;
    assert_eq!(h.cmd(&["APPEND", "k", "12345"]), i(5));
    assert_eq!(h.cmd(&["APPEND", "k", "12345"]), i(10));
    assert_eq!(
        err(&h.cmd(&["APPEND", "k", "1"])),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(h.cmd(&["GET", "k"]), b("1234512345"));
}

fn bits(s: &str) -> Value {
    // "01000000 ..." as bytes.
    let bytes: Vec<u8> = s.split_whitespace().map(|b| u8::from_str_radix(b, 2).unwrap()).collect();
    Value::Bulk(bytes)
}

#[test]
fn setbit_and_getbit() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["SETBIT", "k", "1", "1"]), i(0));
    assert_eq!(h.cmd(&["GET", "k"]), bits("01000000"));
    h.cmd(&["SET", "k", "@"]);
    assert_eq!(h.cmd(&["SETBIT", "k", "2", "1"]), i(0));
    assert_eq!(h.cmd(&["GET", "k"]), bits("01100000"));
    assert_eq!(h.cmd(&["SETBIT", "k", "1", "0"]), i(1));
    assert_eq!(h.cmd(&["GET", "k"]), bits("00100000"));
    assert_eq!(h.cmd(&["SETBIT", "k", "23", "1"]), i(0));
    assert_eq!(h.cmd(&["GET", "k"]), bits("00100000 00000000 00000001"));
    h.cmd(&["SET", "k", "1"]);
    assert_eq!(h.cmd(&["SETBIT", "k", "6", "1"]), i(0));
    assert_eq!(h.cmd(&["GET", "k"]), bits("00110011"));
    assert_eq!(h.cmd(&["GETBIT", "k", "2"]), i(1));
    assert_eq!(h.cmd(&["GETBIT", "k", "0"]), i(0));
    assert_eq!(h.cmd(&["GETBIT", "k", "10000"]), i(0));
    assert_eq!(h.cmd(&["GETBIT", "nope", "0"]), i(0));
    // Far past the block: a new entry.
    assert_eq!(h.cmd(&["SETBIT", "k", "80000", "1"]), i(0));
    assert_eq!(h.cmd(&["STRLEN", "k"]), i(10001));
    assert_eq!(h.cmd(&["GETBIT", "k", "80000"]), i(1));
    for bad in ["-1", "x", &(8u64 << 20).to_string()] {
        assert_eq!(
            err(&h.cmd(&["SETBIT", "k", bad, "1"])),
            "ERR bit offset is not an integer or out of range"
        );
    }
    for bad in ["-1", "2", "10", "x"] {
        assert_eq!(err(&h.cmd(&["SETBIT", "k", "0", bad])), "ERR bit is not an integer or out of range");
    }
    h.cmd(&["HSET", "h", "f", "v"]);
    assert!(err(&h.cmd(&["SETBIT", "h", "0", "1"])).starts_with("WRONGTYPE"));
}

#[test]
fn setbit_matches_a_model() {
    let mut h = Harness::new();
    let mut model = vec![0u8; 0];
    let mut x = 12345u64;
    for _ in 0..600 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let bit = (x >> 33) % 2048;
        let on = (x >> 20) & 1;
        let byte = (bit / 8) as usize;
        if model.len() <= byte {
            model.resize(byte + 1, 0);
        }
        let old = (model[byte] >> (7 - bit % 8)) & 1;
        model[byte] = (model[byte] & !(1 << (7 - bit % 8))) | ((on as u8) << (7 - bit % 8));
        assert_eq!(h.cmd(&["SETBIT", "k", &bit.to_string(), &on.to_string()]), i(i64::from(old)));
    }
    assert_eq!(h.cmd(&["GET", "k"]), Value::Bulk(model));
}

#[test]
fn bitcount_and_bitpos() {
    let mut h = Harness::new();
    h.cmd(&["SET", "k", "foobar"]);
    assert_eq!(h.cmd(&["BITCOUNT", "k"]), i(26));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "0", "0"]), i(4));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "1", "1"]), i(6));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "1", "1", "BYTE"]), i(6));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "5", "30", "BIT"]), i(17));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "-1", "-2"]), i(0));
    assert_eq!(h.cmd(&["BITCOUNT", "k", "-1", "-2", "BAD"]), i(0), "Redis answers before reading the unit");
    assert_eq!(err(&h.cmd(&["BITCOUNT", "k", "0"])), crate::cmd::SYNTAX);
    assert_eq!(err(&h.cmd(&["BITCOUNT", "k", "0", "1", "BAD"])), crate::cmd::SYNTAX);
    // Both indexes are read before the unit, as Redis reads them (BITPOS reads the unit before
    // its end).
    assert_eq!(err(&h.cmd(&["BITCOUNT", "k", "-18", "", "FOO"])), crate::cmd::NOT_INT);
    assert_eq!(err(&h.cmd(&["BITCOUNT", "k", "0", "x", "BIT"])), crate::cmd::NOT_INT);
    assert_eq!(err(&h.cmd(&["BITPOS", "k", "1", "0", "x", "FOO"])), crate::cmd::SYNTAX);
    assert_eq!(h.cmd(&["BITCOUNT", "nope"]), i(0));
    let raw: &[u8] = &[0xff, 0xf0, 0x00];
    h.cmd_bytes(&[b"SET", b"k", raw]);
    assert_eq!(h.cmd(&["BITPOS", "k", "0"]), i(12));
    h.cmd_bytes(&[b"SET", b"k", &[0x00, 0xff, 0xf0]]);
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "0"]), i(8));
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "2"]), i(16));
    h.cmd_bytes(&[b"SET", b"k", &[0x00, 0x00, 0x00]]);
    assert_eq!(h.cmd(&["BITPOS", "k", "1"]), i(-1));
    h.cmd_bytes(&[b"SET", b"k", &[0xff, 0xff, 0xff]]);
    assert_eq!(h.cmd(&["BITPOS", "k", "0"]), i(24), "no end: the bits past the string are zeros");
    assert_eq!(h.cmd(&["BITPOS", "k", "0", "0"]), i(24));
    assert_eq!(h.cmd(&["BITPOS", "k", "0", "0", "-1"]), i(-1), "an end given: none in range");
    h.cmd_bytes(&[b"SET", b"k", &[0x00, 0xff, 0x00]]);
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "7", "15", "BIT"]), i(8));
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "7", "7", "BIT"]), i(-1));
    assert_eq!(h.cmd(&["BITPOS", "k", "0", "8", "15", "BIT"]), i(-1));
    assert_eq!(h.cmd(&["BITPOS", "k", "0", "9", "17", "BIT"]), i(16));
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "-10", "-20"]), i(-1));
    h.cmd_bytes(&[b"SET", b"k", &[0x80]]);
    assert_eq!(h.cmd(&["BITPOS", "k", "1", "-10", "-20"]), i(0), "both clamp to 0, as Redis's BITPOS does");
    assert_eq!(h.cmd(&["BITPOS", "nope", "1"]), i(-1));
    assert_eq!(h.cmd(&["BITPOS", "nope", "0"]), i(0));
    assert_eq!(err(&h.cmd(&["BITPOS", "k", "2"])), "ERR The bit argument must be 1 or 0.");
    assert_eq!(err(&h.cmd(&["BITPOS", "k", "1", "0", "1", "BAD"])), crate::cmd::SYNTAX);
}

#[test]
fn bitop() {
    let mut h = Harness::new();
    h.cmd(&["SET", "a", "foobar"]);
    h.cmd(&["SET", "b", "abcdef"]);
    h.cmd(&["SET", "dest", "old", "EX", "100"]);
    assert_eq!(h.cmd(&["BITOP", "AND", "dest", "a", "b"]), i(6));
    assert_eq!(h.cmd(&["GET", "dest"]), b("`bc`ab"));
    assert_eq!(h.cmd(&["TTL", "dest"]), i(-1), "the destination is set anew");
    assert_eq!(h.encoding("dest"), "raw");
    assert_eq!(h.cmd(&["BITOP", "OR", "dest", "a", "b", "nope"]), i(6));
    assert_eq!(h.cmd(&["GET", "dest"]), b("goofev"));
    h.cmd_bytes(&[b"SET", b"c", &[0x0f]]);
    assert_eq!(h.cmd(&["BITOP", "XOR", "dest", "c", "a"]), i(6));
    assert_eq!(h.cmd(&["GETRANGE", "dest", "0", "1"]), Value::Bulk(vec![b'f' ^ 0x0f, b'o']));
    assert_eq!(h.cmd(&["BITOP", "NOT", "dest", "c"]), Value::Int(1));
    assert_eq!(h.cmd(&["GET", "dest"]), Value::Bulk(vec![0xf0]));
    assert_eq!(h.cmd(&["BITOP", "AND", "dest", "nope", "nope2"]), i(0));
    assert_eq!(h.cmd(&["EXISTS", "dest"]), i(0), "nothing to store: the destination goes");
    assert_eq!(
        err(&h.cmd(&["BITOP", "NOT", "dest", "a", "b"])),
        "ERR BITOP NOT must be called with a single source key."
    );
    assert_eq!(err(&h.cmd(&["BITOP", "NAND", "dest", "a"])), crate::cmd::SYNTAX);
    h.cmd(&["HSET", "h", "f", "v"]);
    assert!(err(&h.cmd(&["BITOP", "AND", "dest", "a", "h"])).starts_with("WRONGTYPE"));
    // Longer than a piece read at a time.
    let long = "x".repeat(200_000);
    h.cmd(&["SET", "l", &long]);
    assert_eq!(h.cmd(&["BITOP", "AND", "dest", "l", "a"]), i(200_000));
    assert_eq!(h.cmd(&["GETRANGE", "dest", "199999", "-1"]), Value::Bulk(vec![0]));
    assert_eq!(h.cmd(&["BITCOUNT", "dest"]), h.cmd(&["BITCOUNT", "dest", "0", "5"]));
}

#[test]
fn lcs() {
    let mut h = Harness::new();
    h.cmd(&["SET", "a", "ohmytext"]);
    h.cmd(&["SET", "b", "mynewtext"]);
    assert_eq!(h.cmd(&["LCS", "a", "b"]), b("mytext"));
    assert_eq!(h.cmd(&["LCS", "a", "b", "LEN"]), i(6));
    let m = |a: (i64, i64), b_: (i64, i64), len: Option<i64>| {
        let mut v = vec![arr(vec![i(a.0), i(a.1)]), arr(vec![i(b_.0), i(b_.1)])];
        v.extend(len.map(i));
        arr(v)
    };
    assert_eq!(
        h.cmd(&["LCS", "a", "b", "IDX"]),
        arr(vec![b("matches"), arr(vec![m((4, 7), (5, 8), None), m((2, 3), (0, 1), None)]), b("len"), i(6)])
    );
    assert_eq!(
        h.cmd(&["LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"]),
        arr(vec![b("matches"), arr(vec![m((4, 7), (5, 8), Some(4))]), b("len"), i(6)])
    );
    assert_eq!(h.cmd(&["LCS", "a", "nope"]), b(""));
    assert_eq!(
        err(&h.cmd(&["LCS", "a", "b", "LEN", "IDX"])),
        "ERR If you want both the length and indexes, please just use IDX."
    );
    assert_eq!(err(&h.cmd(&["LCS", "a", "b", "MINMATCHLEN"])), crate::cmd::SYNTAX);
    h.cmd(&["HSET", "h", "f", "v"]);
    assert_eq!(err(&h.cmd(&["LCS", "a", "h"])), "ERR The specified keys must contain string values");
    // A table larger than the output limit is refused before it is made.
    h.output_limit = 1 << 20;
    let long = "x".repeat(1000);
    h.cmd(&["SET", "l1", &long]);
    h.cmd(&["SET", "l2", &long]);
    assert!(err(&h.cmd(&["LCS", "l1", "l2"]))
        .starts_with("ERR Insufficient memory, transient memory for LCS exceeds"));
}

#[test]
fn decrby_of_the_smallest_integer_is_refused_as_redis_refuses_it() {
    let mut h = Harness::new();
    h.cmd(&["SET", "k", "5"]);
    let e = Value::Error(b"ERR decrement would overflow".to_vec());
    assert_eq!(h.cmd(&["DECRBY", "k", "-9223372036854775808"]), e);
    assert_eq!(h.cmd(&["DECRBY", "nokey", "-9223372036854775808"]), e);
    assert_eq!(h.cmd(&["GET", "k"]), b("5"));
    assert_eq!(
        h.cmd(&["DECRBY", "k", "-9223372036854775807"]),
        Value::Error(b"ERR increment or decrement would overflow".to_vec())
    );
    assert_eq!(
        h.cmd(&["DECRBY", "k", "x"]),
        Value::Error(b"ERR value is not an integer or out of range".to_vec())
    );
}
