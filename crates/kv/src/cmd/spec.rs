//! The commands `mojim kv` answers, as `COMMAND` describes them: name, arity (negative: at
//! least), flags, and where the keys are (first, last, step; last -1: to the end).

/// One command.
#[derive(Debug)]
pub struct Spec {
    /// The name, upper case.
    pub name: &'static str,
    /// Arguments with the name: exactly this, or at least -this.
    pub arity: i32,
    /// Redis's flags.
    pub flags: &'static [&'static str],
    /// First key argument (0: none).
    pub first_key: i32,
    /// Last key argument (-1: the last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
}

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const WD: &[&str] = &["write"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];
const A: &[&str] = &["fast"];
const ADM: &[&str] = &["admin", "noscript", "loading", "stale"];
const TX: &[&str] = &["noscript", "loading", "stale", "fast"];

const fn spec(name: &'static str, arity: i32, flags: &'static [&'static str], keys: (i32, i32, i32)) -> Spec {
    Spec { name, arity, flags, first_key: keys.0, last_key: keys.1, step: keys.2 }
}

const NO: (i32, i32, i32) = (0, 0, 0);
const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const PAIRS: (i32, i32, i32) = (1, -1, 2);

/// Every command, sorted by name.
pub const SPECS: &[Spec] = &[
    spec("APPEND", 3, W, ONE),
    spec("AUTH", -2, &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"], NO),
    spec("CLIENT", -2, &["admin", "noscript", "loading", "stale"], NO),
    spec("COMMAND", -1, &["loading", "stale"], NO),
    spec("CONFIG", -2, ADM, NO),
    spec("DBSIZE", 1, RF, NO),
    spec("DECR", 2, WF, ONE),
    spec("DECRBY", 3, WF, ONE),
    spec("DEL", -2, WD, ALL),
    spec("DISCARD", 1, TX, NO),
    spec("ECHO", 2, A, NO),
    spec("EXEC", 1, &["noscript", "loading", "stale", "skip_slowlog"], NO),
    spec("EXISTS", -2, RF, ALL),
    spec("EXPIRE", -3, WF, ONE),
    spec("EXPIREAT", -3, WF, ONE),
    spec("FLUSHALL", -1, WD, NO),
    spec("FLUSHDB", -1, WD, NO),
    spec("GET", 2, RF, ONE),
    spec("GETDEL", 2, WF, ONE),
    spec("GETSET", 3, WF, ONE),
    spec("HDEL", -3, WF, ONE),
    spec("HELLO", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NO),
    spec("HEXISTS", 3, RF, ONE),
    spec("HGET", 3, RF, ONE),
    spec("HGETALL", 2, R, ONE),
    spec("HINCRBY", 4, WF, ONE),
    spec("HKEYS", 2, R, ONE),
    spec("HLEN", 2, RF, ONE),
    spec("HMGET", -3, RF, ONE),
    spec("HMSET", -4, WF, ONE),
    spec("HSET", -4, WF, ONE),
    spec("HSETNX", 4, WF, ONE),
    spec("HVALS", 2, R, ONE),
    spec("INCR", 2, WF, ONE),
    spec("INCRBY", 3, WF, ONE),
    spec("INFO", -1, &["loading", "stale"], NO),
    spec("KEYS", 2, R, NO),
    spec("MGET", -2, RF, ALL),
    spec("MOVE", 3, WF, ONE),
    spec("MSET", -3, W, PAIRS),
    spec("MSETNX", -3, W, PAIRS),
    spec("MULTI", 1, TX, NO),
    spec("PERSIST", 2, WF, ONE),
    spec("PEXPIRE", -3, WF, ONE),
    spec("PEXPIREAT", -3, WF, ONE),
    spec("PING", -1, A, NO),
    spec("PSETEX", 4, W, ONE),
    spec("PTTL", 2, RF, ONE),
    spec("QUIT", -1, &["noscript", "loading", "stale", "fast", "no_auth"], NO),
    spec("RENAME", 3, WD, (1, 2, 1)),
    spec("RENAMENX", 3, WF, (1, 2, 1)),
    spec("SCAN", -2, R, NO),
    spec("SELECT", 2, &["loading", "stale", "fast"], NO),
    spec("SENTINEL", -2, &["admin", "noscript", "loading", "stale"], NO),
    spec("SET", -3, W, ONE),
    spec("SETEX", 4, W, ONE),
    spec("SETNX", 3, WF, ONE),
    spec("STRLEN", 2, RF, ONE),
    spec("SWAPDB", 3, &["write", "fast"], NO),
    spec("TIME", 1, &["loading", "stale", "fast"], NO),
    spec("TTL", 2, RF, ONE),
    spec("TYPE", 2, RF, ONE),
    spec("UNLINK", -2, WF, ALL),
    spec("WAIT", 3, &["noscript"], NO),
];

/// The spec of an upper-case command name.
pub fn find_spec(name: &[u8]) -> Option<&'static Spec> {
    SPECS.binary_search_by(|s| s.name.as_bytes().cmp(name)).ok().map(|i| &SPECS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_and_found() {
        for w in SPECS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for s in SPECS {
            assert_eq!(find_spec(s.name.as_bytes()).map(|f| f.name), Some(s.name));
        }
        assert!(find_spec(b"LPUSH").is_none());
    }
}
