//! The seeded generator: what the two servers are sent, step by step. Every random choice is
//! the seed's; only absolute times are the clock's (filled in when a command is sent).
//!
//! Keys come from a small set, so that commands collide: plain keys (odd names among them:
//! empty, binary, spaces, glob characters, 200 bytes) and, in the main phase, a few *expiring*
//! keys `e:0`..`e:5`, the only ones given expiry times that come due while the test runs (at
//! a whole second, a "tick", shared by the commands that choose one). Any command that names
//! one, or reads or changes the whole keyspace, is *timed*: the harness sends it only away
//! from a tick, so that the servers, which run it milliseconds apart, agree on what has
//! expired. Multi-key commands whose effect on a plain key depends on an expiring key's
//! existence (MSETNX, RENAMENX, RENAME from one) never mix the two kinds.

use super::compare::Cmp;
use crate::common::Rng;

#[path = "hashes.rs"]
mod hashes;
#[path = "keys.rs"]
mod keys;
#[path = "lists.rs"]
mod lists;
#[path = "scripts.rs"]
mod scripts;
#[path = "sort.rs"]
mod sort;
#[path = "strings.rs"]
mod strings;
#[path = "zsets.rs"]
mod zsets;

/// `[kv] max_bulk` of `mojim kv` and `proto-max-bulk-len` of Redis in this test.
pub const MAX_BULK: usize = 1 << 20;

/// Known bugs whose cases are not generated (see `KNOWN_BUGS` in kv_differential.rs).
#[derive(Clone, Copy, Debug, Default)]
pub struct Gates {
    pub decrby_min: bool,
    pub expireat_negative: bool,
    pub hello_setname: bool,
    pub unknown_command_args: bool,
    pub set_options: bool,
    pub expire_option_order: bool,
    pub largest_expiry: bool,
    pub subcommands_queued: bool,
    pub expire_overflow: bool,
    pub subcommand_extra_args: bool,
    pub auth_any_user: bool,
    pub hash_encoding_by_args: bool,
    pub memory_subcommands: bool,
    pub script_tail_call_error: bool,
    pub script_global_errors: bool,
    pub script_number_to_integer: bool,
    pub script_helper_errors: bool,
    pub script_debug_in_exec: bool,
    pub restore_ttl_overflow: bool,
    pub bitcount_argument_order: bool,
    pub db_index_int: bool,
    pub watch_touches_named_keys: bool,
}

/// An argument: bytes, or an absolute time filled in when the command is sent.
#[derive(Clone, Debug)]
pub enum Arg {
    B(Vec<u8>),
    /// A Unix time in units of `unit_ms` milliseconds (1000: seconds).
    At {
        unit_ms: u64,
        when: When,
    },
    /// The payload one server answers to `req` (DUMP, FUNCTION DUMP) just before the command is
    /// sent (`from_redis`: Redis's, else mojim kv's), changed by `mangle`; the same bytes go to
    /// both. When it answers no payload, `NO_PAYLOAD`.
    Dumped {
        req: Vec<Vec<u8>>,
        from_redis: bool,
        mangle: Mangle,
    },
}

/// A payload that neither server takes (no RDB trailer).
pub const NO_PAYLOAD: &[u8] = b"\x00no payload";

/// How a dumped payload is changed before it is sent back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mangle {
    None,
    /// Its last byte cut (a wrong checksum, or no trailer).
    Truncate,
    /// A bit of its checksum flipped.
    Checksum,
    /// A byte of its body (chosen by `at`) xored with `xor`, the checksum made right again.
    Corrupt {
        at: u64,
        xor: u8,
    },
}

#[derive(Clone, Copy, Debug)]
pub enum When {
    /// The next tick: a whole second far enough ahead that a timed step started now ends
    /// before it.
    Tick,
    /// This many milliseconds from now.
    Ahead(u64),
    /// This many milliseconds ago.
    Ago(u64),
    /// 1 (a second or a millisecond after 1970).
    One,
}

/// One request and how its replies are compared.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub args: Vec<Arg>,
    pub cmp: Cmp,
    /// Names an expiring key, or reads or changes the whole keyspace.
    pub timed: bool,
    /// May leave a key that has expired and is not yet removed (which DBSIZE may count).
    pub leaves_expired: bool,
    /// The keys it names.
    pub keys: Vec<Vec<u8>>,
}

impl Cmd {
    fn new(args: Vec<Arg>, cmp: Cmp) -> Cmd {
        Cmd { args, cmp, timed: false, leaves_expired: false, keys: Vec::new() }
    }

    /// The command name, upper case.
    pub fn name(&self) -> String {
        match self.args.first() {
            Some(Arg::B(b)) => String::from_utf8_lossy(b).to_ascii_uppercase(),
            _ => String::new(),
        }
    }

    /// A short rendering for failure messages.
    pub fn show(&self) -> String {
        self.args
            .iter()
            .map(|a| match a {
                Arg::B(b) if b.len() > 40 => {
                    format!("\"{}\"...({} bytes)", b[..40].escape_ascii(), b.len())
                }
                Arg::B(b) => format!("\"{}\"", b.escape_ascii()),
                Arg::At { unit_ms, when } => {
                    format!("<{when:?} in {}>", if *unit_ms == 1 { "ms" } else { "s" })
                }
                Arg::Dumped { req, from_redis, mangle } => format!(
                    "<{} of {}, {mangle:?}>",
                    req.iter().map(|a| a.escape_ascii().to_string()).collect::<Vec<_>>().join(" "),
                    if *from_redis { "redis" } else { "mojim kv" }
                ),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A fault injected at a point where every command sent has been answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` of mojim kv, then a restart on the same region.
    KillKv,
    /// `kill -9` of the mirror, then a restart on its address.
    KillMirror,
    /// Both, then the mirror and mojim kv started again.
    KillBoth,
    /// The mirror killed, a pipeline of writes sent (which waits), the mirror restarted.
    MirrorDownUnderWrites,
}

const FAULTS: [Fault; 4] = [Fault::KillKv, Fault::KillMirror, Fault::MirrorDownUnderWrites, Fault::KillBoth];

/// What the harness does next.
#[derive(Debug)]
pub enum Step {
    /// Requests sent together (one, when alone); transactions among them.
    Pipeline(Vec<Cmd>),
    /// SCAN from cursor 0 to the end on each server with these options; the keys compared.
    Scan(Vec<Vec<u8>>),
    /// Requests, then one with a bulk string past `MAX_BULK`: both servers answer the requests before it, then an error, then close.
    OverLimit(Vec<Cmd>, Vec<Vec<u8>>),
    /// A Redis command outside mojim kv's subset: sent to mojim kv only, which must answer
    /// that it does not know it and change nothing.
    Unsupported(Vec<Vec<u8>>),
    Fault(Fault),
    /// The whole keyspace of both compared.
    Check,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Every kind of step, expiring keys, a region with room.
    Main,
    /// Writes of large values into a small region, until and past `-OOM`.
    Oom,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pool {
    Plain,
    Expiring,
}

/// The keys with expiries that come due during the test.
pub fn expiring_keys() -> Vec<Vec<u8>> {
    (0..6).map(|i| format!("e:{i}").into_bytes()).collect()
}

pub fn is_expiring(key: &[u8]) -> bool {
    key.starts_with(b"e:")
}

/// Integers and almost-integers, for INCRBY and values.
const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "10",
    "-10",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775806",
    "-9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "007",
    "-0",
    "+1",
    " 1",
    "1 ",
    "1.5",
    "1e3",
    "0x10",
    "",
    "12345678901234567890",
    "00000000000000000001",
];

/// Relative expiries that are not far ahead: zero, negative, not numbers, overflowing.
const ODD_SPANS: &[&str] = &[
    "0",
    "-1",
    "-1000",
    "abc",
    "",
    "1.5",
    " 5",
    "9223372036854775807",
    "9223372036854775",
    "9223372036854776",
    "-9223372036854775808",
];

const KEY_PATTERNS: &[&str] = &[
    "*", "k*", "k?", "k[0-3]", "k[^0-3]", "*e*", "e:*", "[a-z]*", "\\*", "*\\?*", "h[", "", "{tag}*",
    "a\\*b*", "*[", "k[1-", "\\", "*:*", "??",
];

/// Channels and patterns for the pub/sub commands (no client subscribes in this test: what
/// they answer is the same on both servers whatever the name).
const CHANNELS: &[&str] = &["news", "chan:1", "", "a*b", "__keyspace@0__:k1", "\x00bin", "[x"];

/// `notify-keyspace-events` values, valid and not (the flags are read and written back as Redis
/// does; with no subscriber no event is seen).
const NOTIFY_FLAGS: &[&str] =
    &["", "KEA", "gKE", "$lshzxeKE", "KA", "EA", "Enm", "AKEmn", "Kq", "xE", "t", "K E"];

/// Redis commands mojim kv does not have (streams, geo, HyperLogLog, BITFIELD, MIGRATE:
/// docs/COMPATIBILITY.md).
const UNSUPPORTED: &[&str] = &[
    "XADD",
    "XLEN",
    "XRANGE",
    "GEOADD",
    "GEODIST",
    "GEOSEARCH",
    "PFADD",
    "PFCOUNT",
    "PFMERGE",
    "BITFIELD",
    "MIGRATE",
];

/// (command, weight) in the main phase.
const MAIN: &[(&str, u64)] = &[
    ("GET", 8),
    ("SET", 12),
    ("SETNX", 2),
    ("SETEX", 2),
    ("PSETEX", 2),
    ("GETSET", 2),
    ("GETDEL", 2),
    ("MGET", 3),
    ("MSET", 3),
    ("MSETNX", 2),
    ("INCR", 3),
    ("DECR", 2),
    ("INCRBY", 3),
    ("DECRBY", 2),
    ("APPEND", 3),
    ("STRLEN", 2),
    ("EXPIRE", 3),
    ("PEXPIRE", 2),
    ("EXPIREAT", 3),
    ("PEXPIREAT", 4),
    ("TTL", 4),
    ("PTTL", 2),
    ("PERSIST", 2),
    ("EXPIRETIME", 1),
    ("PEXPIRETIME", 1),
    ("GETEX", 2),
    ("GETRANGE", 1),
    ("SUBSTR", 1),
    ("SETRANGE", 2),
    ("INCRBYFLOAT", 2),
    ("LCS", 2),
    ("SETBIT", 2),
    ("GETBIT", 1),
    ("BITCOUNT", 1),
    ("BITPOS", 1),
    ("BITOP", 1),
    ("HSET", 9),
    ("HMSET", 2),
    ("HSETNX", 2),
    ("HGET", 4),
    ("HMGET", 2),
    ("HDEL", 3),
    ("HGETALL", 3),
    ("HKEYS", 1),
    ("HVALS", 1),
    ("HLEN", 2),
    ("HEXISTS", 2),
    ("HINCRBY", 3),
    ("HINCRBYFLOAT", 2),
    ("HSTRLEN", 1),
    ("HRANDFIELD", 2),
    ("HSCAN", 1),
    ("ZADD", 10),
    ("ZADDLEX", 3),
    ("ZINCRBY", 2),
    ("ZREM", 3),
    ("ZCARD", 2),
    ("ZSCORE", 2),
    ("ZMSCORE", 1),
    ("ZRANK", 1),
    ("ZREVRANK", 1),
    ("ZCOUNT", 2),
    ("ZLEXCOUNT", 1),
    ("ZRANGE", 5),
    ("ZRANGESTORE", 1),
    ("ZRANGEBYSCORE", 2),
    ("ZREVRANGEBYSCORE", 1),
    ("ZRANGEBYLEX", 1),
    ("ZREVRANGEBYLEX", 1),
    ("ZREVRANGE", 1),
    ("ZREMRANGEBYRANK", 1),
    ("ZREMRANGEBYSCORE", 1),
    ("ZREMRANGEBYLEX", 1),
    ("ZPOPMIN", 1),
    ("ZPOPMAX", 1),
    ("ZMPOP", 1),
    ("BZPOPMIN", 1),
    ("BZPOPMAX", 1),
    ("BZMPOP", 1),
    ("ZUNION", 1),
    ("ZINTER", 1),
    ("ZDIFF", 1),
    ("ZUNIONSTORE", 1),
    ("ZINTERSTORE", 1),
    ("ZDIFFSTORE", 1),
    ("ZINTERCARD", 1),
    ("ZRANDMEMBER", 1),
    ("ZSCAN", 1),
    ("OBJECT", 1),
    ("LPUSH", 4),
    ("RPUSH", 4),
    ("LPUSHX", 1),
    ("RPUSHX", 1),
    ("LPOP", 3),
    ("RPOP", 3),
    ("LLEN", 2),
    ("LINDEX", 2),
    ("LSET", 2),
    ("LRANGE", 3),
    ("LINSERT", 1),
    ("LREM", 2),
    ("LTRIM", 2),
    ("LPOS", 2),
    ("LMOVE", 2),
    ("RPOPLPUSH", 1),
    ("LMPOP", 1),
    ("BLPOP", 1),
    ("BRPOP", 1),
    ("BRPOPLPUSH", 1),
    ("BLMOVE", 1),
    ("BLMPOP", 1),
    ("SADD", 8),
    ("SREM", 3),
    ("SISMEMBER", 2),
    ("SMISMEMBER", 2),
    ("SCARD", 2),
    ("SMEMBERS", 3),
    ("SPOP", 2),
    ("SRANDMEMBER", 2),
    ("SMOVE", 2),
    ("SINTER", 1),
    ("SUNION", 1),
    ("SDIFF", 1),
    ("SINTERSTORE", 1),
    ("SUNIONSTORE", 1),
    ("SDIFFSTORE", 1),
    ("SINTERCARD", 1),
    ("SSCAN", 2),
    ("OBJECT", 2),
    ("DEL", 3),
    ("UNLINK", 1),
    ("EXISTS", 3),
    ("TYPE", 3),
    ("RENAME", 2),
    ("RENAMENX", 2),
    ("COPY", 2),
    ("MOVE", 1),
    ("SWAPDB", 1),
    ("RANDOMKEY", 1),
    ("TOUCH", 1),
    ("MEMORY", 1),
    ("DUMP", 1),
    ("RESTORE", 3),
    ("WATCH", 2),
    ("UNWATCH", 1),
    ("RESET", 1),
    ("SORT", 3),
    ("SORT_RO", 1),
    ("EVAL", 3),
    ("EVAL_RO", 1),
    ("EVALSHA", 2),
    ("EVALSHA_RO", 1),
    ("SCRIPT", 1),
    ("FUNCTION", 2),
    ("FCALL", 2),
    ("FCALL_RO", 1),
    ("KEYS", 1),
    ("DBSIZE", 1),
    ("FLUSH", 1),
    ("PING", 1),
    ("ECHO", 1),
    ("SELECT", 1),
    ("AUTH", 1),
    ("CLIENT", 1),
    ("COMMAND", 1),
    ("CONFIG", 1),
    ("WAIT", 1),
    ("TIME", 1),
    ("INFO", 1),
    ("UNKNOWN", 1),
    ("PUBLISH", 1),
    ("SPUBLISH", 1),
    ("PUBSUB", 1),
    ("UNSUBSCRIBE", 1),
    ("NOTIFY", 1),
];

/// (command, weight) under OOM pressure: mostly writes that allocate, some that free.
const OOM: &[(&str, u64)] = &[
    ("SET", 20),
    ("HSET", 12),
    ("APPEND", 6),
    ("MSET", 4),
    ("GETSET", 3),
    ("SETEX", 2),
    ("HINCRBY", 2),
    ("ZADD", 6),
    ("ZUNIONSTORE", 1),
    ("RPUSH", 4),
    ("LPOP", 2),
    ("SADD", 6),
    ("SUNIONSTORE", 1),
    ("INCR", 2),
    ("RENAME", 2),
    ("SETRANGE", 2),
    ("COPY", 2),
    ("RESTORE", 2),
    ("SORT", 1),
    ("EVAL", 2),
    ("BITOP", 1),
    ("GET", 5),
    ("HGETALL", 2),
    ("DEL", 6),
    ("UNLINK", 2),
    ("HDEL", 3),
    ("SREM", 2),
    ("ZREM", 2),
    ("ZRANGE", 1),
    ("GETDEL", 2),
    ("EXPIRE", 2),
    ("PERSIST", 1),
    ("TTL", 2),
    ("EXISTS", 2),
    ("DBSIZE", 1),
    ("FLUSH", 1),
];

pub struct Gen {
    rng: Rng,
    mode: Mode,
    gates: Gates,
    plain: Vec<Vec<u8>>,
    expiring: Vec<Vec<u8>>,
    fields: Vec<Vec<u8>>,
    /// Bytes of large values the current step may still carry: a request stays under the
    /// `2 x max_bulk + max_inline` that mojim kv buffers for one.
    big_left: usize,
    /// (step, fault), in order.
    faults: Vec<(usize, Fault)>,
    check_every: usize,
}

impl Gen {
    pub fn new(seed: u64, mode: Mode, steps: usize, faults: usize, gates: Gates) -> Gen {
        let mut rng = Rng::new(seed);
        let plain: Vec<Vec<u8>> = match mode {
            Mode::Main => {
                let mut v: Vec<Vec<u8>> = (0..12).map(|i| format!("k{i}").into_bytes()).collect();
                for odd in [
                    &b""[..],
                    b"\x00\xffbin\r\n",
                    b"key with spaces",
                    "ключ".as_bytes(),
                    b"a*b?[c]\\",
                    b"{tag}k",
                ] {
                    v.push(odd.to_vec());
                }
                v.push(vec![b'K'; 200]);
                v
            }
            Mode::Oom => (0..64).map(|i| format!("o{i}").into_bytes()).collect(),
        };
        let mut fields: Vec<Vec<u8>> = (0..10).map(|i| format!("f{i}").into_bytes()).collect();
        fields.extend([b"".to_vec(), b"\x00\r\n".to_vec(), vec![b'F'; 70], b"f with space".to_vec()]);
        let start = rng.range(0, 3) as usize;
        let mut at: Vec<usize> =
            (0..faults).map(|_| rng.range(steps as u64 / 20, steps as u64) as usize).collect();
        at.sort_unstable();
        // One fault a step.
        for i in 1..at.len() {
            at[i] = at[i].max(at[i - 1] + 1);
        }
        let faults =
            at.into_iter().enumerate().map(|(i, s)| (s, FAULTS[(start + i) % FAULTS.len()])).collect();
        let check_every = if mode == Mode::Oom { 150 } else { 300 };
        Gen {
            rng,
            mode,
            gates,
            plain,
            expiring: if mode == Mode::Main { expiring_keys() } else { Vec::new() },
            fields,
            big_left: 0,
            faults,
            check_every,
        }
    }

    /// Step `i`.
    pub fn step(&mut self, i: usize) -> Step {
        if let Some(p) = self.faults.iter().position(|&(s, _)| s == i) {
            return Step::Fault(self.faults.remove(p).1);
        }
        if i % self.check_every == self.check_every - 1 {
            return Step::Check;
        }
        self.big_left = 2 * MAX_BULK - (16 << 10);
        let oom = self.mode == Mode::Oom;
        match self.rng.range(0, 999) {
            0..=449 => Step::Pipeline(self.command()),
            450..=689 => {
                let n = self.rng.range(2, 20);
                let mut v = Vec::new();
                while (v.len() as u64) < n {
                    if self.rng.chance(10) {
                        v.extend(self.transaction());
                    } else {
                        v.extend(self.command());
                    }
                }
                Step::Pipeline(v)
            }
            690..=839 => {
                let mut v = Vec::new();
                if self.rng.chance(4) {
                    v.extend(self.command());
                }
                v.extend(self.transaction());
                if self.rng.chance(4) {
                    v.extend(self.command());
                }
                Step::Pipeline(v)
            }
            840..=869 => self.scan(),
            870..=884 => Step::Pipeline(vec![self.flush()]),
            885..=899 if !oom && self.rng.chance(6) => Step::Pipeline(vec![self.script_debug()]),
            885..=899 if !oom => Step::Pipeline(vec![self.hello()]),
            900..=909 if !oom => self.over_limit(),
            910..=924 if !oom => self.unsupported(),
            925..=944 => {
                // A pipeline that ends with QUIT, and requests after it that neither server
                // may run.
                let mut v = Vec::new();
                for _ in 0..self.rng.range(0, 4) {
                    v.extend(self.command());
                }
                v.push(Cmd::new(vec![self.name("QUIT")], Cmp::Exact));
                // Only while the whole pipeline fits one read of the server's: a server that
                // closes with bytes it has not read resets the connection, and replies still on
                // their way are lost (TCP), which would be no server's fault.
                for _ in 0..self.rng.range(0, 2) {
                    let after = self.command();
                    if size(&v) + size(&after) < 8 << 10 {
                        v.extend(after);
                    }
                }
                Step::Pipeline(v)
            }
            945..=952 => Step::Pipeline(vec![self.big_hash()]),
            953..=958 => Step::Pipeline(vec![self.big_set()]),
            959..=964 => Step::Pipeline(vec![self.big_zset()]),
            965..=972 => Step::Pipeline(vec![self.corrupt_restore()]),
            _ => Step::Pipeline(self.command()),
        }
    }

    /// The writes of `Fault::MirrorDownUnderWrites`: plain keys only (they wait for the mirror,
    /// far longer than a timed step may take).
    pub fn writes(&mut self) -> Vec<Cmd> {
        self.big_left = 2 * MAX_BULK - (16 << 10);
        let mut v = Vec::new();
        while v.len() < 12 {
            let key = self.key(Pool::Plain);
            let c = match self.rng.range(0, 5) {
                0 => vec![self.name("SET"), b(&key), Arg::B(self.value())],
                1 => vec![self.name("HSET"), b(&key), Arg::B(self.field()), Arg::B(self.hvalue())],
                2 => vec![self.name("INCR"), b(&key)],
                3 => vec![self.name("SADD"), b(&key), Arg::B(self.member())],
                4 => vec![self.name("ZADD"), b(&key), b(b"1.5"), Arg::B(self.field())],
                _ => vec![self.name("DEL"), b(&key)],
            };
            v.push(self.finish(Cmd::new(c, Cmp::Exact), vec![key]));
        }
        v
    }

    /// A command name, usually upper case.
    fn name(&mut self, n: &str) -> Arg {
        Arg::B(match self.rng.range(0, 19) {
            0 | 1 => n.to_ascii_lowercase().into_bytes(),
            2 => n
                .bytes()
                .enumerate()
                .map(|(i, c)| if i % 2 == 0 { c.to_ascii_lowercase() } else { c })
                .collect(),
            _ => n.as_bytes().to_vec(),
        })
    }

    /// A channel name for the pub/sub commands.
    fn channel(&mut self) -> Vec<u8> {
        if self.rng.chance(5) {
            let len = self.rng.range(0, 12) as usize;
            return self.bytes(len);
        }
        CHANNELS[self.rng.range(0, CHANNELS.len() as u64 - 1) as usize].as_bytes().to_vec()
    }

    fn pool(&mut self) -> Pool {
        if !self.expiring.is_empty() && self.rng.chance(6) {
            Pool::Expiring
        } else {
            Pool::Plain
        }
    }

    fn key(&mut self, p: Pool) -> Vec<u8> {
        let keys = if p == Pool::Expiring { &self.expiring } else { &self.plain };
        // Most picks among the first few: collisions.
        let n = if self.rng.chance(4) { keys.len() } else { keys.len().min(8) };
        keys[self.rng.range(0, n as u64 - 1) as usize].clone()
    }

    fn keys(&mut self, p: Pool, lo: u64, hi: u64) -> Vec<Vec<u8>> {
        (0..self.rng.range(lo, hi)).map(|_| self.key(p)).collect()
    }

    fn field(&mut self) -> Vec<u8> {
        if self.rng.chance(10) {
            return format!("r{}", self.rng.range(0, 400)).into_bytes();
        }
        let n = if self.rng.chance(3) { self.fields.len() } else { 6 };
        self.fields[self.rng.range(0, n as u64 - 1) as usize].clone()
    }

    /// A set member: mostly small integers (the intset encoding) and a few short strings, so
    /// that members collide; now and then any integer text, binary, past 64 bytes, or any value.
    fn member(&mut self) -> Vec<u8> {
        match self.rng.range(0, 39) {
            0..=15 => (self.rng.range(0, 40) as i64 - 10).to_string().into_bytes(),
            16..=19 => self.int_text(),
            20..=29 => format!("m{}", self.rng.range(0, 9)).into_bytes(),
            30..=32 => format!("r{}", self.rng.range(0, 400)).into_bytes(),
            33..=35 => {
                let n = self.rng.range(0, 16) as usize;
                self.bytes(n)
            }
            36..=37 => {
                let n = self.rng.range(60, 300) as usize;
                self.bytes(n)
            }
            _ => self.value(),
        }
    }

    /// `lo ..= hi` members.
    fn members(&mut self, lo: u64, hi: u64) -> Vec<Arg> {
        (0..self.rng.range(lo, hi)).map(|_| Arg::B(self.member())).collect()
    }

    /// A count for SPOP and SRANDMEMBER whose answer does not depend on the random draw: none
    /// of the members (0), all of them (more than any set here has), or not a count. Draws
    /// that do are compared by their number only (`Cmp::Draw`).
    fn count(&mut self) -> Vec<u8> {
        let c = ["0", "100000", "9223372036854775807", "-1", "-9223372036854775808", "abc", "", "1.5"];
        c[self.rng.range(0, c.len() as u64 - 1) as usize].as_bytes().to_vec()
    }

    fn int_text(&mut self) -> Vec<u8> {
        match self.rng.range(0, 9) {
            0..=4 => (self.rng.range(0, 2000) as i64 - 1000).to_string().into_bytes(),
            5 | 6 => (self.rng.next_u64() as i64).to_string().into_bytes(),
            _ => INTS[self.rng.range(0, INTS.len() as u64 - 1) as usize].as_bytes().to_vec(),
        }
    }

    /// `len` bytes: printable text or any bytes.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.rng.bytes(len);
        if self.rng.chance(2) {
            for c in &mut v {
                *c = b' ' + *c % 95;
            }
        }
        v
    }

    /// A value of any size up to `MAX_BULK`, within what the step may still carry.
    fn value(&mut self) -> Vec<u8> {
        let oom = self.mode == Mode::Oom;
        let len = match self.rng.range(0, 999) {
            _ if oom && self.rng.chance(2) => self.rng.range(1 << 10, 128 << 10) as usize,
            0..=69 => 0,
            70..=339 => self.rng.range(1, 12) as usize,
            340..=489 => return self.int_text(),
            490..=589 => self.rng.range(1, 64) as usize,
            590..=839 => self.rng.range(65, 2048) as usize,
            840..=959 => self.rng.range(2048, 64 << 10) as usize,
            960..=994 => self.rng.range(64 << 10, MAX_BULK as u64 - 1) as usize,
            _ => MAX_BULK,
        };
        let len = if len > (16 << 10) && len > self.big_left { self.rng.range(0, 100) as usize } else { len };
        if len > (16 << 10) {
            self.big_left -= len;
        }
        self.bytes(len)
    }

    /// A hash field's value: mostly small (the small encoding keeps fields of at most 64 bytes).
    /// A list element: one of a few short ones (so that LREM, LPOS and LINSERT find some),
    /// now and then a value of any size.
    fn element(&mut self) -> Vec<u8> {
        if self.rng.chance(6) {
            return self.value();
        }
        format!("e{}", self.rng.range(0, 5)).into_bytes()
    }

    /// An integer in `lo ..= hi` as text (an index, a count).
    fn small_int(&mut self, lo: i64, hi: i64) -> Vec<u8> {
        (lo + self.rng.range(0, (hi - lo) as u64) as i64).to_string().into_bytes()
    }

    fn hvalue(&mut self) -> Vec<u8> {
        match self.rng.range(0, 19) {
            0..=5 => self.int_text(),
            6..=13 => {
                let n = self.rng.range(0, 16) as usize;
                self.bytes(n)
            }
            14..=16 => {
                let n = self.rng.range(60, 300) as usize;
                self.bytes(n)
            }
            _ => self.value(),
        }
    }

    /// A relative expiry in `unit_ms` units: usually far ahead, else odd.
    fn span(&mut self, unit_ms: u64) -> Arg {
        if self.rng.chance(4) {
            let s = ODD_SPANS[self.rng.range(0, ODD_SPANS.len() as u64 - 1) as usize];
            return Arg::B(s.as_bytes().to_vec());
        }
        let ms = self.rng.range(1000, 200_000) * 1000;
        Arg::B((ms / unit_ms).to_string().into_bytes())
    }

    /// An absolute expiry in `unit_ms` units: the next tick (expiring keys only), far ahead,
    /// past, or odd. `negative`: may be before 1970.
    fn at(&mut self, unit_ms: u64, p: Pool, negative: bool) -> Arg {
        if p == Pool::Expiring && self.rng.range(0, 9) < 6 {
            return Arg::At { unit_ms, when: When::Tick };
        }
        match self.rng.range(0, 99) {
            0..=39 => Arg::At { unit_ms, when: When::Ahead(self.rng.range(3_600_000, 86_400_000)) },
            40..=59 => Arg::At { unit_ms, when: When::Ago(self.rng.range(1000, 86_400_000)) },
            60..=67 => Arg::At { unit_ms, when: When::One },
            68..=74 => Arg::B(b"0".to_vec()),
            75..=81 if negative => Arg::B(b"-5".to_vec()),
            75..=89 => Arg::B(b"abc".to_vec()),
            // `BUG_LARGEST_EXPIRY`: not the largest time in milliseconds.
            _ if self.rng.chance(2) && !(unit_ms == 1 && self.gates.largest_expiry) => {
                Arg::B(b"9223372036854775807".to_vec())
            }
            _ => Arg::B(b"9223372036854775".to_vec()),
        }
    }

    /// EXPIRE's conditions.
    fn expire_opts(&mut self) -> Vec<Arg> {
        const O: [&str; 4] = ["NX", "XX", "GT", "LT"];
        match self.rng.range(0, 49) {
            0..=29 => vec![],
            30..=44 => {
                let o = O[self.rng.range(0, 3) as usize];
                vec![self.name(o)]
            }
            45..=48 => {
                let (a, b) = (O[self.rng.range(0, 3) as usize], O[self.rng.range(0, 3) as usize]);
                vec![self.name(a), self.name(b)]
            }
            _ => vec![Arg::B(b"FOO".to_vec())],
        }
    }

    /// `BUG_EXPIRE_OPTION_ORDER`: with bad options, the time is a number.
    /// `BUG_EXPIRE_NEGATIVE_OVERFLOW`: no seconds below the milliseconds' range.
    fn expire_gate(&self, a: &mut [Arg]) {
        let seconds = matches!(&a[0], Arg::B(n) if n.eq_ignore_ascii_case(b"EXPIRE"));
        if self.gates.expire_overflow && seconds && matches!(&a[2], Arg::B(v) if v == b"-9223372036854775808")
        {
            a[2] = Arg::B(b"-1000".to_vec());
        }
        if !self.gates.expire_option_order {
            return;
        }
        let has =
            |w: &str| a[3..].iter().any(|o| matches!(o, Arg::B(b) if b.eq_ignore_ascii_case(w.as_bytes())));
        let bad =
            has("FOO") || (has("NX") && (has("XX") || has("GT") || has("LT"))) || (has("GT") && has("LT"));
        let number = match &a[2] {
            Arg::B(b) => std::str::from_utf8(b).is_ok_and(|s| s.parse::<i64>().is_ok()),
            Arg::At { .. } | Arg::Dumped { .. } => true,
        };
        if bad && !number {
            a[2] = Arg::B(b"100".to_vec());
        }
    }

    /// Marks `c` timed if it names an expiring key, and leaving expired keys if it has a time
    /// that is not far ahead.
    fn finish(&mut self, mut c: Cmd, keys: Vec<Vec<u8>>) -> Cmd {
        c.timed |= keys.iter().any(|k| is_expiring(k));
        c.leaves_expired |=
            c.args.iter().any(|a| matches!(a, Arg::At { when: When::Tick | When::Ago(_) | When::One, .. }));
        c.keys = keys;
        c
    }

    /// An arity error now and then: an argument dropped or added.
    fn maybe_arity(&mut self, mut c: Cmd) -> Cmd {
        if !self.rng.chance(40) || c.args.len() < 2 {
            return c;
        }
        let name = c.name();
        // `BUG_AUTH_ANY_USER`: an argument more or less can make AUTH's password a user.
        if self.gates.auth_any_user && name == "AUTH" {
            return c;
        }
        // `BUG_SET_OPTIONS`, `BUG_EXPIRE_OPTION_ORDER`: an extra argument is a bad option.
        // `BUG_SUBCOMMAND_EXTRA_ARGS`: an extra argument is taken.
        let no_extra = (self.gates.set_options && name == "SET")
            || (self.gates.expire_option_order && name.contains("EXPIRE"))
            || (self.gates.subcommand_extra_args && (name == "CLIENT" || name == "COMMAND"));
        // Not SPOP's count (a random pop), nor SSCAN's COUNT (pages that differ): an extra
        // argument only.
        // Nor of HRANDFIELD's, ZRANDMEMBER's, HSCAN's, SORT's (whose comparison follows its
        // options).
        let no_cut = ["SPOP", "SSCAN", "HSCAN", "HRANDFIELD", "ZRANDMEMBER", "SORT", "SORT_RO"]
            .contains(&name.as_str());
        if (self.rng.chance(2) || no_extra) && !no_cut {
            c.args.truncate(self.rng.range(1, c.args.len() as u64 - 1) as usize);
        } else {
            c.args.push(Arg::B(b"extra".to_vec()));
        }
        c
    }

    fn pick(&mut self, table: &[(&'static str, u64)]) -> &'static str {
        let total: u64 = table.iter().map(|t| t.1).sum();
        let mut x = self.rng.range(0, total - 1);
        for &(n, w) in table {
            if x < w {
                return n;
            }
            x -= w;
        }
        unreachable!("the weights add up")
    }

    /// One command (two for TTL: PTTL then TTL, to check TTL's rounding).
    pub fn command(&mut self) -> Vec<Cmd> {
        let which = self.pick(if self.mode == Mode::Oom { OOM } else { MAIN });
        let p = self.pool();
        let k = self.key(p);
        let n = |g: &mut Gen| g.name(which);
        let (args, cmp, keys): (Vec<Arg>, Cmp, Vec<Vec<u8>>) = match which {
            "GET" | "GETDEL" | "INCR" | "DECR" | "STRLEN" | "PERSIST" | "TYPE" | "HLEN" | "LLEN" => {
                (vec![n(self), b(&k)], Cmp::Exact, vec![k])
            }
            "PTTL" => (vec![n(self), b(&k)], Cmp::Ttl { ms: true }, vec![k]),
            "TTL" => {
                let alone = Cmd::new(vec![n(self), b(&k)], Cmp::Ttl { ms: false });
                let alone = self.finish(alone, vec![k.clone()]);
                if self.rng.chance(4) {
                    return vec![alone];
                }
                let pttl = Cmd::new(vec![self.name("PTTL"), b(&k)], Cmp::Ttl { ms: true });
                let ttl = Cmd::new(vec![self.name("TTL"), b(&k)], Cmp::TtlAfterPttl);
                return vec![self.finish(pttl, vec![k.clone()]), self.finish(ttl, vec![k])];
            }
            "SET" => {
                let mut opts: Vec<Vec<Arg>> = Vec::new();
                match self.rng.range(0, 9) {
                    0 | 1 => opts.push(vec![self.name("NX")]),
                    2 | 3 => opts.push(vec![self.name("XX")]),
                    _ => {}
                }
                if self.rng.chance(5) {
                    opts.push(vec![self.name("GET")]);
                }
                let ttl = match self.rng.range(0, 9) {
                    0 => Some(vec![self.name("KEEPTTL")]),
                    1 => Some(vec![self.name("EX"), self.span(1000)]),
                    2 => Some(vec![self.name("PX"), self.span(1)]),
                    3 | 4 => Some(vec![self.name("EXAT"), self.at(1000, p, true)]),
                    5 | 6 => Some(vec![self.name("PXAT"), self.at(1, p, true)]),
                    _ => None,
                };
                // `BUG_SET_OPTIONS`: no bad option beside an expiry.
                let gated = self.gates.set_options && ttl.is_some();
                opts.extend(ttl);
                if self.rng.chance(12) && !gated {
                    let bad = match self.rng.range(0, 4) {
                        0 => vec![self.name("NX"), self.name("XX")],
                        1 => vec![self.name("EX"), Arg::B(b"100".to_vec()), self.name("KEEPTTL")],
                        2 => vec![self.name("FOO")],
                        3 => vec![self.name("PX"), Arg::B(b"abc".to_vec())],
                        _ => vec![self.name("EX")],
                    };
                    opts.push(bad);
                }
                // Options in any order.
                for i in (1..opts.len()).rev() {
                    let j = self.rng.range(0, i as u64) as usize;
                    opts.swap(i, j);
                }
                let mut a = vec![n(self), b(&k), Arg::B(self.value())];
                a.extend(opts.into_iter().flatten());
                (a, Cmp::Exact, vec![k])
            }
            "SETNX" | "GETSET" | "APPEND" => {
                (vec![n(self), b(&k), Arg::B(self.value())], Cmp::Exact, vec![k])
            }
            "SETEX" | "PSETEX" => {
                let unit = if which == "SETEX" { 1000 } else { 1 };
                (vec![n(self), b(&k), self.span(unit), Arg::B(self.value())], Cmp::Exact, vec![k])
            }
            "MGET" | "EXISTS" | "DEL" | "UNLINK" => {
                let mut keys = self.keys(p, 1, 4);
                if self.rng.chance(8) {
                    let other = if p == Pool::Plain { self.pool() } else { Pool::Plain };
                    keys.push(self.key(other));
                }
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                (a, Cmp::Exact, keys)
            }
            "MSET" | "MSETNX" => {
                let keys = self.keys(p, 1, 4);
                let mut a = vec![n(self)];
                for k in &keys {
                    a.push(b(k));
                    a.push(Arg::B(self.value()));
                }
                if self.rng.chance(20) {
                    a.pop();
                }
                (a, Cmp::Exact, keys)
            }
            "INCRBY" | "DECRBY" => {
                let mut by = self.int_text();
                if which == "DECRBY" && self.gates.decrby_min && by == b"-9223372036854775808" {
                    by = b"-9223372036854775807".to_vec();
                }
                (vec![n(self), b(&k), Arg::B(by)], Cmp::Exact, vec![k])
            }
            "EXPIRE" | "PEXPIRE" => {
                let unit = if which == "EXPIRE" { 1000 } else { 1 };
                let mut a = vec![n(self), b(&k), self.span(unit)];
                a.extend(self.expire_opts());
                self.expire_gate(&mut a);
                (a, Cmp::Exact, vec![k])
            }
            "EXPIREAT" | "PEXPIREAT" => {
                let unit = if which == "EXPIREAT" { 1000 } else { 1 };
                let negative = !self.gates.expireat_negative;
                let mut a = vec![n(self), b(&k), self.at(unit, p, negative)];
                a.extend(self.expire_opts());
                self.expire_gate(&mut a);
                (a, Cmp::Exact, vec![k])
            }
            "HSET" | "HMSET" => {
                let mut a = vec![n(self), b(&k)];
                let mut seen = Vec::new();
                for _ in 0..self.rng.range(1, 4) {
                    let f = self.field();
                    // `BUG_HASH_ENCODING_BY_ARGUMENTS`: no field set twice in one command.
                    if self.gates.hash_encoding_by_args && seen.contains(&f) {
                        continue;
                    }
                    seen.push(f.clone());
                    a.push(Arg::B(f));
                    a.push(Arg::B(self.hvalue()));
                }
                if self.rng.chance(25) {
                    a.pop();
                }
                (a, Cmp::Exact, vec![k])
            }
            "HSETNX" => {
                let mut v = self.hvalue();
                // `BUG_HASH_ENCODING_BY_ARGUMENTS`: no value the small encoding does not take.
                if self.gates.hash_encoding_by_args {
                    v.truncate(64);
                }
                (vec![n(self), b(&k), Arg::B(self.field()), Arg::B(v)], Cmp::Exact, vec![k])
            }
            "HGET" | "HEXISTS" => (vec![n(self), b(&k), Arg::B(self.field())], Cmp::Exact, vec![k]),
            "HMGET" | "HDEL" => {
                let mut a = vec![n(self), b(&k)];
                for _ in 0..self.rng.range(1, 4) {
                    a.push(Arg::B(self.field()));
                }
                (a, Cmp::Exact, vec![k])
            }
            "HGETALL" => (vec![n(self), b(&k)], Cmp::Pairs, vec![k]),
            "HKEYS" | "HVALS" => (vec![n(self), b(&k)], Cmp::Unordered, vec![k]),
            "HINCRBY" => {
                let by = if self.rng.chance(3) {
                    self.int_text()
                } else {
                    self.rng.range(0, 20).to_string().into_bytes()
                };
                (vec![n(self), b(&k), Arg::B(self.field()), Arg::B(by)], Cmp::Exact, vec![k])
            }
            "LPUSH" | "RPUSH" | "LPUSHX" | "RPUSHX" => {
                let mut a = vec![n(self), b(&k)];
                for _ in 0..self.rng.range(1, 5) {
                    a.push(Arg::B(self.element()));
                }
                (a, Cmp::Exact, vec![k])
            }
            "LPOP" | "RPOP" => {
                let mut a = vec![n(self), b(&k)];
                if self.rng.chance(2) {
                    a.push(Arg::B(self.small_int(-1, 6)));
                }
                (a, Cmp::Exact, vec![k])
            }
            "LINDEX" => (vec![n(self), b(&k), Arg::B(self.small_int(-8, 8))], Cmp::Exact, vec![k]),
            "LSET" => (
                vec![n(self), b(&k), Arg::B(self.small_int(-8, 8)), Arg::B(self.element())],
                Cmp::Exact,
                vec![k],
            ),
            "LRANGE" | "LTRIM" => {
                let (from, to) = (self.small_int(-10, 10), self.small_int(-10, 10));
                (vec![n(self), b(&k), Arg::B(from), Arg::B(to)], Cmp::Exact, vec![k])
            }
            "LINSERT" => {
                let side = if self.rng.chance(2) { "BEFORE" } else { "AFTER" };
                let a = vec![n(self), b(&k), self.name(side), Arg::B(self.element()), Arg::B(self.element())];
                (a, Cmp::Exact, vec![k])
            }
            "LREM" => (
                vec![n(self), b(&k), Arg::B(self.small_int(-3, 3)), Arg::B(self.element())],
                Cmp::Exact,
                vec![k],
            ),
            "LPOS" => {
                let mut a = vec![n(self), b(&k), Arg::B(self.element())];
                if self.rng.chance(3) {
                    a.extend([self.name("RANK"), Arg::B(self.small_int(-3, 3))]);
                }
                if self.rng.chance(3) {
                    a.extend([self.name("COUNT"), Arg::B(self.small_int(0, 4))]);
                }
                if self.rng.chance(4) {
                    a.extend([self.name("MAXLEN"), Arg::B(self.small_int(0, 10))]);
                }
                (a, Cmp::Exact, vec![k])
            }
            "LMOVE" | "RPOPLPUSH" => {
                let dst = self.key(p);
                let mut a = vec![n(self), b(&k), b(&dst)];
                if which == "LMOVE" {
                    for _ in 0..2 {
                        let side = if self.rng.chance(2) { "LEFT" } else { "RIGHT" };
                        a.push(self.name(side));
                    }
                }
                (a, Cmp::Exact, vec![k, dst])
            }
            "LMPOP" => {
                let keys = self.keys(p, 1, 3);
                let mut a = vec![n(self), Arg::B(keys.len().to_string().into_bytes())];
                a.extend(keys.iter().map(|k| b(k)));
                let side = if self.rng.chance(2) { "LEFT" } else { "RIGHT" };
                a.push(self.name(side));
                if self.rng.chance(2) {
                    a.extend([self.name("COUNT"), Arg::B(self.small_int(0, 4))]);
                }
                (a, Cmp::Exact, keys)
            }
            "SADD" | "SREM" | "SMISMEMBER" => {
                let mut a = vec![n(self), b(&k)];
                a.extend(self.members(1, 5));
                (a, Cmp::Exact, vec![k])
            }
            "SISMEMBER" => (vec![n(self), b(&k), Arg::B(self.member())], Cmp::Exact, vec![k]),
            "SCARD" => (vec![n(self), b(&k)], Cmp::Exact, vec![k]),
            "SMEMBERS" => (vec![n(self), b(&k)], Cmp::Unordered, vec![k]),
            "SPOP" | "SRANDMEMBER" => match self.rng.range(0, 9) {
                // Without a count: a member at random, compared by kind (SPOP only on a key of
                // another type or none, whose answer is the same on both).
                0 if which == "SRANDMEMBER" => (vec![n(self), b(&k)], Cmp::Draw { distinct: true }, vec![k]),
                0 | 1 => {
                    let other = if self.rng.chance(2) { b"nosuch:set".to_vec() } else { self.key(p) };
                    let a = vec![n(self), b(&other)];
                    if which == "SPOP" {
                        // Unless it is a set, whose member would be drawn: made a string first.
                        let set = Cmd::new(vec![self.name("SET"), b(&other), b(b"x")], Cmp::Exact);
                        let set = self.finish(set, vec![other.clone()]);
                        let pop = self.finish(Cmd::new(a, Cmp::Exact), vec![other]);
                        return vec![set, pop];
                    }
                    (a, Cmp::Draw { distinct: true }, vec![other])
                }
                // SRANDMEMBER with a count within the set: distinct members (positive) or as
                // many as asked (negative), compared by number.
                2 | 3 if which == "SRANDMEMBER" => {
                    let c = self.rng.range(0, 30) as i64 - 15;
                    (
                        vec![n(self), b(&k), Arg::B(c.to_string().into_bytes())],
                        Cmp::Draw { distinct: c > 0 },
                        vec![k],
                    )
                }
                _ => {
                    let c = self.count();
                    // SRANDMEMBER of a negative count draws that many, repeats allowed.
                    let cmp = if which == "SRANDMEMBER" && c == b"-1" {
                        Cmp::Draw { distinct: false }
                    } else {
                        Cmp::Unordered
                    };
                    (vec![n(self), b(&k), Arg::B(c)], cmp, vec![k])
                }
            },
            "SMOVE" => {
                let dst = self.key(p);
                (vec![n(self), b(&k), b(&dst), Arg::B(self.member())], Cmp::Exact, vec![k, dst])
            }
            "SINTER" | "SUNION" | "SDIFF" => {
                let keys = self.keys(p, 1, 4);
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                (a, Cmp::Unordered, keys)
            }
            "SINTERSTORE" | "SUNIONSTORE" | "SDIFFSTORE" => {
                let keys = self.keys(p, 2, 4);
                let mut a = vec![n(self)];
                a.extend(keys.iter().map(|k| b(k)));
                (a, Cmp::Exact, keys)
            }
            "SINTERCARD" => {
                let keys = self.keys(p, 1, 4);
                let numkeys = match self.rng.range(0, 19) {
                    0 => b"0".to_vec(),
                    1 => b"-1".to_vec(),
                    2 => b"abc".to_vec(),
                    3 => (keys.len() + 1).to_string().into_bytes(),
                    4 if keys.len() > 1 => (keys.len() - 1).to_string().into_bytes(),
                    _ => keys.len().to_string().into_bytes(),
                };
                let mut a = vec![n(self), Arg::B(numkeys)];
                a.extend(keys.iter().map(|k| b(k)));
                match self.rng.range(0, 9) {
                    0..=2 => {
                        let l = ["0", "1", "3", "-1", "abc", "100"][self.rng.range(0, 5) as usize];
                        a.extend([self.name("LIMIT"), b(l.as_bytes())]);
                    }
                    3 => a.push(self.name("LIMIT")),
                    4 => a.push(b(b"FOO")),
                    _ => {}
                }
                (a, Cmp::Exact, keys)
            }
            "SSCAN" => {
                // From cursor 0 with a COUNT past any set here: the whole set in one page on
                // both (each server's cursors are its own), or an error for a bad option.
                let cursor: &[u8] = match self.rng.range(0, 19) {
                    0 => b"abc",
                    1 => b"18446744073709551616",
                    2 => b"",
                    _ => b"0",
                };
                let mut a = vec![n(self), b(&k), b(cursor)];
                if self.rng.chance(3) {
                    let pat = ["*", "m*", "1*", "?", "*[0-4]", "-*", ""][self.rng.range(0, 6) as usize];
                    a.extend([self.name("MATCH"), b(pat.as_bytes())]);
                }
                match self.rng.range(0, 19) {
                    0 => a.extend([self.name("COUNT"), b(b"0")]),
                    1 => a.extend([self.name("COUNT"), b(b"abc")]),
                    2 => a.push(self.name("COUNT")),
                    3 => a.extend([b(b"FOO"), b(b"bar")]),
                    _ => a.extend([self.name("COUNT"), b(b"100000")]),
                }
                (a, Cmp::ScanPage, vec![k])
            }
            "RENAME" | "RENAMENX" => {
                // A plain key's fate never hangs on an expiring one's existence.
                let dst_pool =
                    if p == Pool::Plain && which == "RENAME" && self.rng.chance(5) { self.pool() } else { p };
                let dst = self.key(dst_pool);
                (vec![n(self), b(&k), b(&dst)], Cmp::Exact, vec![k, dst])
            }
            "KEYS" => {
                let pat = KEY_PATTERNS[self.rng.range(0, KEY_PATTERNS.len() as u64 - 1) as usize];
                let mut c = Cmd::new(vec![n(self), b(pat.as_bytes())], Cmp::Unordered);
                c.timed = true;
                return vec![c];
            }
            "DBSIZE" => {
                let mut c = Cmd::new(vec![n(self)], Cmp::Dbsize);
                c.timed = true;
                return vec![c];
            }
            "FLUSH" => return vec![self.flush()],
            // CONFIG SET of the keyspace events' flags (a valid value first, then one that may
            // not be), then GET, in one step: mojim kv keeps what CONFIG SET changes until it
            // stops, and a restart comes only between steps.
            "NOTIFY" => {
                let mut v = Vec::new();
                for valid in [true, false] {
                    let f = loop {
                        let f = NOTIFY_FLAGS[self.rng.range(0, NOTIFY_FLAGS.len() as u64 - 1) as usize];
                        if !valid || !f.contains(['q', ' ']) {
                            break f;
                        }
                    };
                    let set = vec![
                        self.name("CONFIG"),
                        self.name("SET"),
                        b(b"notify-keyspace-events"),
                        b(f.as_bytes()),
                    ];
                    v.push(Cmd::new(set, Cmp::Exact));
                }
                let get = vec![self.name("CONFIG"), self.name("GET"), b(b"notify-keyspace-events")];
                v.push(Cmd::new(get, Cmp::Exact));
                return v;
            }
            // One channel at most: one reply, in a transaction too (a push in RESP3 on both).
            "UNSUBSCRIBE" => {
                let which = ["UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE"][self.rng.range(0, 2) as usize];
                let mut a = vec![self.name(which)];
                if self.rng.chance(2) {
                    a.push(Arg::B(self.channel()));
                }
                return vec![Cmd::new(a, Cmp::Exact)];
            }
            z if z.starts_with('Z') || z.starts_with("BZ") => return self.zset(z, p, k),
            "GETEX" | "GETRANGE" | "SUBSTR" | "SETRANGE" | "INCRBYFLOAT" | "LCS" | "SETBIT" | "GETBIT"
            | "BITCOUNT" | "BITPOS" | "BITOP" => return self.string(which, p, k),
            "HINCRBYFLOAT" | "HSTRLEN" | "HRANDFIELD" | "HSCAN" => return self.hash(which, k),
            "BLPOP" | "BRPOP" | "BRPOPLPUSH" | "BLMOVE" | "BLMPOP" => return self.blocking_list(which, p, k),
            "COPY" | "MOVE" | "SWAPDB" | "RANDOMKEY" | "TOUCH" | "EXPIRETIME" | "PEXPIRETIME" | "OBJECT"
            | "MEMORY" | "DUMP" | "RESTORE" | "WATCH" | "UNWATCH" | "RESET" => {
                return self.key_cmd(which, p, k)
            }
            "SORT" | "SORT_RO" => return self.sort(which),
            "EVAL" | "EVAL_RO" | "EVALSHA" | "EVALSHA_RO" | "SCRIPT" | "FUNCTION" | "FCALL" | "FCALL_RO" => {
                return self.scripting(which, p)
            }
            _ => {
                let c = self.server_command(which);
                let before = c.args.len();
                let mut c = self.maybe_arity(c);
                // mojim kv words subcommand errors as Redis 6 did.
                if ["CLIENT", "CONFIG", "COMMAND"].contains(&which) && c.args.len() != before {
                    c.cmp = Cmp::Admin;
                }
                return vec![c];
            }
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        vec![self.finish(c, keys)]
    }

    /// PING ECHO SELECT AUTH CLIENT COMMAND CONFIG WAIT TIME INFO, and unknown commands.
    fn server_command(&mut self, which: &str) -> Cmd {
        let n = self.name(which);
        let word = |g: &mut Gen| {
            let len = g.rng.range(0, 20) as usize;
            g.bytes(len)
        };
        let (rest, cmp): (Vec<Arg>, Cmp) = match which {
            "PING" => match self.rng.range(0, 2) {
                0 => (vec![], Cmp::Exact),
                1 => (vec![Arg::B(word(self))], Cmp::Exact),
                _ => (vec![Arg::B(word(self)), Arg::B(word(self))], Cmp::Exact),
            },
            "ECHO" => (vec![Arg::B(word(self))], Cmp::Exact),
            "SELECT" => {
                let db = ["0", "1", "abc", "-1", "15"][self.rng.range(0, 4) as usize];
                (vec![b(db.as_bytes())], Cmp::Exact)
            }
            "AUTH" => match self.rng.range(0, 3) {
                0 => (vec![Arg::B(word(self))], Cmp::Exact),
                1 => (vec![b(b"default"), Arg::B(word(self))], Cmp::Exact),
                2 if !self.gates.auth_any_user => (vec![Arg::B(word(self)), Arg::B(word(self))], Cmp::Exact),
                _ => (vec![b(b"a"), b(b"b"), b(b"c")], Cmp::Exact),
            },
            "CLIENT" => match self.rng.range(0, 9) {
                0 => (vec![self.name("SETNAME"), b(b"differential")], Cmp::Exact),
                1 => (vec![self.name("SETNAME"), b(b"bad name")], Cmp::Exact),
                2 => (vec![self.name("SETNAME"), b(b"")], Cmp::Exact),
                3 => (vec![self.name("GETNAME")], Cmp::Exact),
                4 => (vec![self.name("ID")], Cmp::Admin),
                5 => (vec![self.name("INFO")], Cmp::Admin),
                6 => (vec![self.name("LIST")], Cmp::Admin),
                7 => (vec![self.name("SETNAME")], Cmp::Admin),
                9 if !self.gates.subcommand_extra_args => (vec![self.name("LIST"), b(b"extra")], Cmp::Admin),
                _ => (vec![b(b"NOSUCH")], Cmp::Admin),
            },
            "COMMAND" => match self.rng.range(0, 4) {
                0 => (vec![self.name("COUNT")], Cmp::Admin),
                1 => (vec![self.name("INFO"), b(b"get"), b(b"nosuch")], Cmp::Admin),
                2 => (vec![self.name("LIST")], Cmp::Admin),
                4 if !self.gates.subcommand_extra_args => (vec![self.name("COUNT"), b(b"extra")], Cmp::Admin),
                _ => (vec![self.name("DOCS"), b(b"get")], Cmp::Admin),
            },
            "CONFIG" => {
                // Settings both have, and the same (Redis is started so): exactly.
                const SAME: [&str; 5] = ["save", "appendonly", "databases", "maxmemory-policy", "timeout"];
                match self.rng.range(0, 3) {
                    0 | 1 => {
                        let s = SAME[self.rng.range(0, 4) as usize];
                        (vec![self.name("GET"), b(s.as_bytes())], Cmp::Exact)
                    }
                    2 => (vec![self.name("GET"), b(b"*max*")], Cmp::Admin),
                    _ => (vec![self.name("GET")], Cmp::Admin),
                }
            }
            // Redis has no replicas, so `WAIT n 0` with n > 0 would block it for ever.
            "WAIT" => {
                let a: [&[u8]; 2] = match self.rng.range(0, 4) {
                    0 => [b"0", b"0"],
                    1 => [b"1", b"5"],
                    2 => [b"a", b"0"],
                    3 => [b"0", b"-1"],
                    _ => [b"0", b"x"],
                };
                (a.iter().map(|x| b(x)).collect(), Cmp::Admin)
            }
            "TIME" => (vec![], Cmp::Time),
            "PUBLISH" | "SPUBLISH" => (vec![Arg::B(self.channel()), Arg::B(word(self))], Cmp::Exact),
            "PUBSUB" => {
                let pattern = |g: &mut Gen| if g.rng.chance(2) { vec![] } else { vec![Arg::B(g.channel())] };
                let channels =
                    |g: &mut Gen| (0..g.rng.range(0, 3)).map(|_| Arg::B(g.channel())).collect::<Vec<_>>();
                let (sub, rest) = match self.rng.range(0, 6) {
                    0 => ("CHANNELS", pattern(self)),
                    1 => ("SHARDCHANNELS", pattern(self)),
                    2 => ("NUMSUB", channels(self)),
                    3 => ("SHARDNUMSUB", channels(self)),
                    4 => ("NUMPAT", vec![]),
                    5 => ("HELP", vec![]),
                    _ => ("NOSUCH", vec![]),
                };
                let mut a = vec![self.name(sub)];
                a.extend(rest);
                (a, Cmp::Exact)
            }
            "INFO" => {
                let s = [
                    "",
                    "server",
                    "clients",
                    "memory",
                    "stats",
                    "replication",
                    "keyspace",
                    "everything",
                    "nosuch",
                ][self.rng.range(0, 8) as usize];
                (if s.is_empty() { vec![] } else { vec![b(s.as_bytes())] }, Cmp::Admin)
            }
            _ => {
                let name = ["FOOBAR", "", "SETX", "GET_", "hsetx", "MULTIX"][self.rng.range(0, 5) as usize];
                let mut a = vec![b(name.as_bytes())];
                // Redis lists arguments in the error, as they are, until they pass 128 bytes.
                let gated = self.gates.unknown_command_args;
                let long = !gated && self.rng.chance(4);
                for _ in 0..self.rng.range(0, 3) {
                    let mut w = if long { self.bytes(100) } else { word(self) };
                    if gated {
                        w.iter_mut().for_each(|c| *c = b'a' + *c % 26);
                    }
                    a.push(Arg::B(w));
                }
                return Cmd::new(a, Cmp::Exact);
            }
        };
        let mut a = vec![n];
        a.extend(rest);
        Cmd::new(a, cmp)
    }

    fn flush(&mut self) -> Cmd {
        let n = if self.rng.chance(2) { self.name("FLUSHALL") } else { self.name("FLUSHDB") };
        let mut a = vec![n];
        match self.rng.range(0, 9) {
            0 | 1 => a.push(self.name("ASYNC")),
            2 => a.push(self.name("SYNC")),
            3 => a.push(b(b"NOW")),
            4 => a.extend([self.name("ASYNC"), self.name("SYNC")]),
            _ => {}
        }
        let mut c = Cmd::new(a, Cmp::Exact);
        c.timed = true;
        c
    }

    fn hello(&mut self) -> Cmd {
        let mut a = vec![self.name("HELLO")];
        match self.rng.range(0, 9) {
            0 => {}
            1..=3 => a.push(b(b"2")),
            4..=6 => a.push(b(b"3")),
            7 => {
                let name: &[u8] =
                    if self.gates.hello_setname || self.rng.chance(2) { b"named" } else { b"bad name" };
                a.extend([b(b"3"), self.name("SETNAME"), b(name)]);
            }
            8 => a.push(b(b"4")),
            _ => a.extend([b(b"2"), b(b"FOO")]),
        }
        Cmd::new(a, Cmp::Hello)
    }

    /// MULTI, commands (some refused while queued, which aborts it), EXEC or DISCARD.
    pub fn transaction(&mut self) -> Vec<Cmd> {
        let mut v = vec![Cmd::new(vec![self.name("MULTI")], Cmp::Exact)];
        let mut queued = Vec::new();
        for _ in 0..self.rng.range(0, 6) {
            // `BUG_SCRIPT_DEBUG_IN_EXEC`: not in a transaction.
            if self.rng.chance(60) && !self.gates.script_debug_in_exec {
                let mut c = self.script_debug();
                queued.push(std::mem::replace(&mut c.cmp, Cmp::Exact));
                v.push(c);
                continue;
            }
            if self.rng.chance(40) {
                // Not queued: an error, and the transaction goes on.
                let n = if self.rng.chance(2) { "MULTI" } else { "WATCH" };
                let mut a = vec![self.name(n)];
                if n == "WATCH" {
                    a.push(Arg::B(self.key(Pool::Plain)));
                }
                v.push(Cmd::new(a, Cmp::Exact));
                continue;
            }
            let mut cmds = self.command();
            // Not WATCH (a step of its own, with its transaction) nor RESET (which would end
            // this one, and the commands after it would run outside, compared as queued ones).
            // `BUG_SUBCOMMANDS_QUEUED`: no subcommands of CLIENT, CONFIG, COMMAND queued.
            while ["WATCH", "RESET"].contains(&cmds[0].name().as_str())
                || (self.gates.subcommands_queued
                    && ["CLIENT", "CONFIG", "COMMAND"].contains(&cmds[0].name().as_str()))
            {
                cmds = self.command();
            }
            for mut c in cmds {
                queued.push(std::mem::replace(&mut c.cmp, Cmp::Exact));
                v.push(c);
            }
        }
        let end = if self.rng.chance(8) {
            Cmd::new(vec![self.name("DISCARD")], Cmp::Exact)
        } else {
            Cmd::new(vec![self.name("EXEC")], Cmp::Exec(queued))
        };
        v.push(end);
        v
    }

    fn scan(&mut self) -> Step {
        let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
        if self.rng.chance(2) {
            let pat = KEY_PATTERNS[self.rng.range(0, KEY_PATTERNS.len() as u64 - 1) as usize];
            opts.push(vec![b"MATCH".to_vec(), pat.as_bytes().to_vec()]);
        }
        // Counts that cover the buckets in few calls (a call looks at 10 buckets per count).
        let count: &[u8] = match self.mode {
            Mode::Main => [&b"2000"[..], b"10000", b"100000"][self.rng.range(0, 2) as usize],
            Mode::Oom => [&b"10"[..], b"100", b"100000"][self.rng.range(0, 2) as usize],
        };
        // Without COUNT (10) only in the small region: mojim kv would take thousands of calls.
        if self.mode == Mode::Main || self.rng.range(0, 9) < 8 {
            opts.push(vec![b"COUNT".to_vec(), count.to_vec()]);
        }
        if self.rng.chance(5) {
            let t = ["string", "hash", "list", "set", "nosuch"][self.rng.range(0, 4) as usize];
            opts.push(vec![b"TYPE".to_vec(), t.as_bytes().to_vec()]);
        }
        if self.rng.chance(15) {
            let bad: [&[u8]; 2] = match self.rng.range(0, 3) {
                0 => [b"COUNT", b"0"],
                1 => [b"COUNT", b"abc"],
                2 => [b"FOO", b"bar"],
                _ => [b"MATCH", b""],
            };
            opts.push(bad.iter().map(|x| x.to_vec()).collect());
            if self.rng.chance(3) {
                opts.push(vec![b"COUNT".to_vec()]);
            }
        }
        for i in (1..opts.len()).rev() {
            let j = self.rng.range(0, i as u64) as usize;
            opts.swap(i, j);
        }
        Step::Scan(opts.into_iter().flatten().collect())
    }

    /// A HSET of many fields: past the small encoding's 128 at once, or close to it.
    fn big_hash(&mut self) -> Cmd {
        let p = self.pool();
        let k = self.key(p);
        let mut a = vec![self.name("HSET"), b(&k)];
        let n = self.rng.range(100, 300);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..n {
            let f = format!("r{}", self.rng.range(0, 400)).into_bytes();
            // `BUG_HASH_ENCODING_BY_ARGUMENTS`: no field set twice in one command.
            if self.gates.hash_encoding_by_args && !seen.insert(f.clone()) {
                continue;
            }
            a.push(Arg::B(f));
            let v = if self.rng.chance(20) {
                let n = self.rng.range(65, 200) as usize;
                self.bytes(n)
            } else {
                self.int_text()
            };
            a.push(Arg::B(v));
        }
        self.finish(Cmd::new(a, Cmp::Exact), vec![k])
    }

    /// A SADD of many members: integers past the intset's 512 at once or close to it, or
    /// strings.
    fn big_set(&mut self) -> Cmd {
        let p = self.pool();
        let k = self.key(p);
        let mut a = vec![self.name("SADD"), b(&k)];
        let ints = self.rng.chance(2);
        for _ in 0..self.rng.range(100, 700) {
            let m = if ints {
                (self.rng.range(0, 1200) as i64 - 100).to_string().into_bytes()
            } else {
                format!("r{}", self.rng.range(0, 800)).into_bytes()
            };
            a.push(Arg::B(m));
        }
        self.finish(Cmd::new(a, Cmp::Exact), vec![k])
    }

    fn over_limit(&mut self) -> Step {
        let mut before = Vec::new();
        for _ in 0..self.rng.range(0, 3) {
            before.extend(self.command());
        }
        let k = self.key(Pool::Plain);
        let len = MAX_BULK + self.rng.range(1, 1000) as usize;
        let big = self.bytes(len);
        let req = match self.rng.range(0, 3) {
            0 => vec![b"SET".to_vec(), k, big],
            1 => vec![b"HSET".to_vec(), k, b"f".to_vec(), big],
            2 => vec![b"GET".to_vec(), big],
            _ => vec![b"APPEND".to_vec(), k, big],
        };
        Step::OverLimit(before, req)
    }

    fn unsupported(&mut self) -> Step {
        let name = UNSUPPORTED[self.rng.range(0, UNSUPPORTED.len() as u64 - 1) as usize];
        let mut k = self.key(Pool::Plain);
        // `BUG_UNKNOWN_COMMAND_ARGS`: a short key of letters and digits.
        while self.gates.unknown_command_args && (k.len() > 32 || !k.iter().all(u8::is_ascii_alphanumeric)) {
            k = self.key(Pool::Plain);
        }
        let mut a = vec![name.as_bytes().to_vec(), k];
        for _ in 0..self.rng.range(0, 2) {
            a.push(self.rng.range(0, 99).to_string().into_bytes());
        }
        Step::Unsupported(a)
    }
}

/// The bytes of the commands' arguments (a payload's, filled in when sent, as the largest).
fn size(cmds: &[Cmd]) -> usize {
    let one = |a: &Arg| match a {
        Arg::B(b) => b.len() + 16,
        Arg::At { .. } => 32,
        Arg::Dumped { .. } => MAX_BULK,
    };
    cmds.iter().flat_map(|c| &c.args).map(one).sum()
}

fn b(x: &[u8]) -> Arg {
    Arg::B(x.to_vec())
}
