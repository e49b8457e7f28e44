//! Scripts and functions: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (small scripts that call commands
//! on the generated keys through `redis.call` and `redis.pcall`, their errors included, and
//! that return every kind of value), SCRIPT LOAD, EXISTS, FLUSH, KILL, HELP, DEBUG NO, FUNCTION
//! LOAD (with REPLACE, and libraries that are refused), DELETE, LIST, STATS, FLUSH, KILL, DUMP
//! and RESTORE (the payload of one server's FUNCTION DUMP), HELP, FCALL and FCALL_RO.
//!
//! The script cache and the libraries of mojim kv live in its heap and do not survive its
//! restart (docs/COMPATIBILITY.md): the harness flushes Redis's after each. Scripts only return
//! what does not hang on a server's own order, time or version (no HGETALL, no TTL, no
//! `redis.REDIS_VERSION`), and never `error({})`, which crashes redis-server 7.0.15 (a NULL
//! error message).

use super::super::compare::Cmp;
use super::{b, Arg, Cmd, Gen, Mangle, Pool};
use mojim_kv::cmd::scripting::sha1hex;

/// Scripts: (source, keys it uses, arguments it uses). `<(` and `)>` mark a `redis.call` in a
/// tail call (see [`Gen::lua`]).
const SCRIPTS: &[(&str, usize, usize)] = &[
    ("return <(redis.call('GET', KEYS[1]))>", 1, 0),
    ("return <(redis.call('SET', KEYS[1], ARGV[1]))>", 1, 1),
    ("return redis.pcall('INCR', KEYS[1])", 1, 0),
    ("local v = redis.call('INCRBY', KEYS[1], ARGV[1])\nreturn {v, redis.call('TYPE', KEYS[1])}", 1, 1),
    ("return <(redis.call('LPUSH', KEYS[1], ARGV[1]))>", 1, 1),
    (
        "local r = redis.pcall('HSET', KEYS[1], 'f1', ARGV[1])\nif type(r) == 'table' and r.err then return 'caught: ' .. \
         r.err end\nreturn r",
        1,
        1,
    ),
    ("return {redis.call('EXISTS', KEYS[1]), redis.call('DEL', KEYS[2])}", 2, 0),
    ("return <(redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'))>", 1, 0),
    ("return <(redis.call('LRANGE', KEYS[1], 0, -1))>", 1, 0),
    ("redis.setresp(3)\nreturn <(redis.call('ZSCORE', KEYS[1], 'm1'))>", 1, 0),
    ("return <(redis.call('SCARD', KEYS[1]))>", 1, 0),
    ("return tostring(redis.call('INCRBYFLOAT', KEYS[1], ARGV[1]))", 1, 1),
    ("#!lua flags=no-writes\nreturn <(redis.call('GET', KEYS[1]))>", 1, 0),
    ("#!lua flags=no-writes\nreturn <(redis.call('SET', KEYS[1], 'x'))>", 1, 0),
    ("#!lua\nreturn <(redis.call('STRLEN', KEYS[1]))>", 1, 0),
    ("#!lua flags=allow-oom,no-cluster\nreturn <(redis.call('APPEND', KEYS[1], ARGV[1]))>", 1, 1),
    ("#!lua flags=nosuchflag\nreturn 1", 0, 0),
    ("#!notlua\nreturn 1", 0, 0),
    ("return +", 0, 0),
    ("local t = {}\nfor i = 1, 3 do t[i] = redis.call('RPUSH', KEYS[1], i) end\nreturn t", 1, 0),
    ("redis.call('SELECT', ARGV[1])\nreturn <(redis.call('GET', KEYS[1]))>", 1, 1),
    ("return <(redis.call('NOSUCH', KEYS[1]))>", 1, 0),
    ("return <(redis.call('GET'))>", 0, 0),
    ("return <(redis.call('EVAL', 'return 1', 0))>", 0, 0),
    ("error('boom')", 0, 0),
    ("error({err='CUSTOM failure'})", 0, 0),
    ("return redis.error_reply('MY error')", 0, 0),
    ("return redis.status_reply('FINE')", 0, 0),
    ("return {1, 2.9, -0.5, 'x', true, false, {3, {4}}, nil, 5}", 0, 0),
    ("return {err='E1 text'}", 0, 0),
    ("return {ok='fine'}", 0, 0),
    ("return nil", 0, 0),
    ("return cjson.encode({1, 'a', {b = 2}})", 0, 0),
    ("return cmsgpack.unpack(cmsgpack.pack({1, 2, 'x'}))", 0, 0),
    ("return redis.sha1hex(ARGV[1])", 0, 1),
    ("return #KEYS + 10 * #ARGV", 0, 0),
    ("return string.format('%5.2f|%d|%s', 1.5, 3, ARGV[1])", 0, 1),
    ("local ok, e = pcall(redis.call, 'INCR', KEYS[1])\nif ok then return e end\nreturn 'pcall: ' .. e.err", 1, 0),
    ("return <(redis.call('EXPIRE', KEYS[1], 100000))>", 1, 0),
    ("return <(redis.call('HINCRBY', KEYS[1], 'f1', ARGV[1]))>", 1, 1),
    ("return <(redis.call('SADD', KEYS[1], ARGV[1]))>", 1, 1),
];

/// Scripts that meet a known bug while it is open: (the bug, source, keys, arguments).
const BUG_SCRIPTS: &[(&str, &str, usize, usize)] = &[
    ("global_errors", "x = 1", 0, 0),
    ("global_errors", "return nosuchglobal", 0, 0),
    ("global_errors", "rawset(_G, 'y', 1)", 0, 0),
    ("number_to_integer", "return 1e20", 0, 0),
    ("number_to_integer", "return {0/0, 9.5e18}", 0, 0),
    ("helper_errors", "return redis.sha1hex()", 0, 0),
    ("helper_errors", "return redis.setresp(5)", 0, 0),
    ("helper_errors", "return bit.band({})", 0, 0),
    ("helper_errors", "return bit.bxor(ARGV[1], 3)", 0, 1),
];

/// The libraries: (library, its function, its code).
const LIBRARIES: &[(&str, &str, &str)] = &[
    (
        "lib1",
        "f1",
        "#!lua name=lib1\nredis.register_function('f1', function(keys, args) return <(redis.call('GET', keys[1]))> end)",
    ),
    (
        "lib2",
        "f2",
        "#!lua name=lib2\nredis.register_function{function_name='f2', callback=function(keys, args) return \
         <(redis.call('INCR', keys[1]))> end, flags={'no-writes'}}",
    ),
    (
        "lib3",
        "f3",
        "#!lua name=lib3\nredis.register_function{function_name='f3', callback=function(keys, args) return \
         <(redis.call('SET', keys[1], args[1]))> end, description='sets'}",
    ),
    (
        "lib4",
        "f4",
        "#!lua name=lib4\nredis.register_function{function_name='f4', callback=function(keys, args) return \
         {#keys, #args, redis.call('EXISTS', keys[1])} end, flags={'no-writes', 'allow-stale'}}",
    ),
];

/// Libraries that are refused.
const BAD_LIBRARIES: &[&str] = &[
    "#!lua\nredis.register_function('g', function() return 1 end)",
    "#!lua name=bad1\nreturn 1",
    "#!lua name=bad2\nredis.call('GET', 'x')",
    "#!lua name=bad3\nredis.register_function('g', 1)",
    "#!lua name=bad4\nredis.register_function{function_name='g', callback=function() end, flags={'nosuch'}}",
    "#!lua name=bad5\nthis is not lua",
    "#!nosuch name=bad6\n",
    "#!lua name=bad 7\nredis.register_function('g', function() return 1 end)",
    "#!lua name=lib1 name=x\nredis.register_function('g', function() return 1 end)",
    "#!lua name=bad8\nredis.register_function('f1', function() return 1 end)\nredis.register_function('f1', \
     function() return 2 end)",
];

impl Gen {
    /// Lua code with its marks `<(` `)>` around a `redis.call` in a tail call: taken out, or,
    /// with `BUG_SCRIPT_TAIL_CALL_ERROR` gated, made parentheses (`return (redis.call(...))`
    /// is not a tail call), so that an error the call raises is placed alike on both.
    fn lua(&self, s: &str) -> String {
        if self.gates.script_tail_call_error {
            s.replace("<(", "(").replace(")>", ")")
        } else {
            s.replace("<(", "").replace(")>", "")
        }
    }

    /// A script, its keys and arguments.
    fn script(&mut self, p: Pool) -> (String, Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let bugs: Vec<(&str, usize, usize)> = BUG_SCRIPTS
            .iter()
            .filter(|(bug, ..)| match *bug {
                "global_errors" => !self.gates.script_global_errors,
                "number_to_integer" => !self.gates.script_number_to_integer,
                _ => !self.gates.script_helper_errors,
            })
            .map(|&(_, s, k, a)| (s, k, a))
            .collect();
        let (src, nk, na) = if !bugs.is_empty() && self.rng.chance(10) {
            bugs[self.rng.range(0, bugs.len() as u64 - 1) as usize]
        } else {
            SCRIPTS[self.rng.range(0, SCRIPTS.len() as u64 - 1) as usize]
        };
        let keys = (0..nk).map(|_| self.key(p)).collect();
        // `BUG_DB_INDEX_INT`: SELECT's number within a C `int`.
        let small = self.gates.db_index_int && src.contains("SELECT");
        let args = (0..na)
            .map(|_| match self.rng.range(0, 3) {
                _ if small => self.small_int(-1, 17),
                0 => self.int_text(),
                1 => b"1.5".to_vec(),
                2 => self.small_int(0, 2),
                _ => {
                    let len = self.rng.range(0, 8) as usize;
                    self.bytes(len)
                }
            })
            .collect();
        (self.lua(src), keys, args)
    }

    /// `numkeys keys... args...`, now and then a numkeys that does not fit.
    fn key_args(&mut self, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Vec<Arg> {
        let numkeys = match self.rng.range(0, 29) {
            0 => b"-1".to_vec(),
            1 => b"abc".to_vec(),
            2 => (keys.len() + args.len() + 1).to_string().into_bytes(),
            _ => keys.len().to_string().into_bytes(),
        };
        let mut a = vec![Arg::B(numkeys)];
        a.extend(keys.iter().chain(args).map(|x| b(x)));
        a
    }

    /// One script or function command (`which`) on keys of pool `p`.
    pub(super) fn scripting(&mut self, which: &'static str, p: Pool) -> Vec<Cmd> {
        let mut v = Vec::new();
        let (args, cmp, keys): (Vec<Arg>, Cmp, Vec<Vec<u8>>) = match which {
            "EVAL" | "EVAL_RO" => {
                let (src, keys, args) = self.script(p);
                let mut a = vec![self.name(which), b(src.as_bytes())];
                a.extend(self.key_args(&keys, &args));
                (a, Cmp::Exact, keys)
            }
            "EVALSHA" | "EVALSHA_RO" => {
                let (src, keys, args) = self.script(p);
                if self.rng.chance(2) {
                    let load =
                        Cmd::new(vec![self.name("SCRIPT"), self.name("LOAD"), b(src.as_bytes())], Cmp::Exact);
                    v.push(load);
                }
                let mut sha = sha1hex(src.as_bytes());
                match self.rng.range(0, 19) {
                    0 => sha = sha.to_ascii_uppercase(),
                    1 => sha = "ffffffffffffffffffffffffffffffffffffffff".into(),
                    2 => sha.truncate(39),
                    _ => {}
                }
                let mut a = vec![self.name(which), b(sha.as_bytes())];
                a.extend(self.key_args(&keys, &args));
                (a, Cmp::Exact, keys)
            }
            "SCRIPT" => match self.rng.range(0, 9) {
                0..=2 => {
                    let (src, _, _) = self.script(p);
                    (vec![self.name(which), self.name("LOAD"), b(src.as_bytes())], Cmp::Exact, vec![])
                }
                3 | 4 => {
                    let mut a = vec![self.name(which), self.name("EXISTS")];
                    for _ in 0..self.rng.range(1, 3) {
                        let (src, _, _) = self.script(p);
                        a.push(b(sha1hex(src.as_bytes()).as_bytes()));
                    }
                    if self.rng.chance(4) {
                        a.push(b(b"nosuch"));
                    }
                    (a, Cmp::Exact, vec![])
                }
                5 => {
                    let mut a = vec![self.name(which), self.name("FLUSH")];
                    match self.rng.range(0, 5) {
                        0 => a.push(self.name("ASYNC")),
                        1 => a.push(self.name("SYNC")),
                        2 => a.push(b(b"NOW")),
                        _ => {}
                    }
                    (a, Cmp::Exact, vec![])
                }
                6 => (vec![self.name(which), self.name("KILL")], Cmp::Exact, vec![]),
                // (SCRIPT DEBUG NO only alone, or in a transaction: `Gen::script_debug`.)
                8 => (vec![self.name(which), self.name("HELP")], Cmp::Kind, vec![]),
                _ => (vec![self.name(which), b(b"NOSUCH")], Cmp::Exact, vec![]),
            },
            "FUNCTION" => return vec![self.function()],
            "FCALL" | "FCALL_RO" => {
                if self.rng.chance(2) {
                    v.push(self.function_load());
                }
                let f = match self.rng.range(0, 9) {
                    0 => "nosuch",
                    n => LIBRARIES[(n as usize - 1) % LIBRARIES.len()].1,
                };
                let keys = vec![self.key(p)];
                let args = vec![self.int_text()];
                let mut a = vec![self.name(which), b(f.as_bytes())];
                a.extend(self.key_args(&keys, &args));
                (a, Cmp::Exact, keys)
            }
            other => unreachable!("{other} is not a scripting command"),
        };
        let c = self.maybe_arity(Cmd::new(args, cmp));
        v.push(self.finish(c, keys));
        v
    }

    /// `SCRIPT DEBUG NO`: sent alone (Redis refuses it while replies to the client wait to be
    /// sent, as in a pipeline, where that hangs on how the requests were read), or in a
    /// transaction (where they always wait: Redis refuses it). Not YES nor SYNC, with which
    /// Redis's next EVAL would start its debugger (mojim kv has none: docs/COMPATIBILITY.md).
    pub(super) fn script_debug(&mut self) -> Cmd {
        let a = vec![self.name("SCRIPT"), self.name("DEBUG"), self.name("NO")];
        Cmd::new(a, Cmp::Exact)
    }

    /// FUNCTION LOAD of a library (REPLACE now and then), or of one that is refused.
    fn function_load(&mut self) -> Cmd {
        let mut a = vec![self.name("FUNCTION"), self.name("LOAD")];
        if self.rng.chance(3) {
            a.push(self.name("REPLACE"));
        }
        let code = if self.rng.chance(5) {
            BAD_LIBRARIES[self.rng.range(0, BAD_LIBRARIES.len() as u64 - 1) as usize]
        } else {
            LIBRARIES[self.rng.range(0, LIBRARIES.len() as u64 - 1) as usize].2
        };
        a.push(b(self.lua(code).as_bytes()));
        Cmd::new(a, Cmp::Exact)
    }

    /// One FUNCTION subcommand.
    fn function(&mut self) -> Cmd {
        let f = |g: &mut Gen| g.name("FUNCTION");
        let (a, cmp): (Vec<Arg>, Cmp) = match self.rng.range(0, 19) {
            0..=5 => return self.function_load(),
            6 | 7 => {
                let lib = match self.rng.range(0, 4) {
                    0 => "nosuch",
                    n => LIBRARIES[n as usize - 1].0,
                };
                (vec![f(self), self.name("DELETE"), b(lib.as_bytes())], Cmp::Exact)
            }
            // The libraries in each server's order: as a set (one function each).
            8 | 9 => {
                let mut a = vec![f(self), self.name("LIST")];
                if self.rng.chance(3) {
                    let pat = ["lib*", "lib1", "*3", "nosuch", ""][self.rng.range(0, 4) as usize];
                    a.extend([self.name("LIBRARYNAME"), b(pat.as_bytes())]);
                }
                if self.rng.chance(3) {
                    a.push(self.name("WITHCODE"));
                }
                if self.rng.chance(20) {
                    a.push(b(b"FOO"));
                }
                (a, Cmp::Unordered)
            }
            10 => (vec![f(self), self.name("STATS")], Cmp::Exact),
            11 => {
                let mut a = vec![f(self), self.name("FLUSH")];
                match self.rng.range(0, 4) {
                    0 => a.push(self.name("ASYNC")),
                    1 => a.push(self.name("SYNC")),
                    2 => a.push(b(b"NOW")),
                    _ => {}
                }
                (a, Cmp::Exact)
            }
            12 => (vec![f(self), self.name("KILL")], Cmp::Exact),
            13 => (vec![f(self), self.name("DUMP")], Cmp::Kind),
            14..=16 => {
                let mangle = match self.rng.range(0, 9) {
                    0 => Mangle::Truncate,
                    1 => Mangle::Checksum,
                    _ => Mangle::None,
                };
                let payload = Arg::Dumped {
                    req: vec![b"FUNCTION".to_vec(), b"DUMP".to_vec()],
                    from_redis: self.rng.chance(2),
                    mangle,
                };
                let mut a = vec![f(self), self.name("RESTORE"), payload];
                match self.rng.range(0, 5) {
                    0 => a.push(self.name("FLUSH")),
                    1 => a.push(self.name("APPEND")),
                    2 => a.push(self.name("REPLACE")),
                    3 => a.push(b(b"FOO")),
                    _ => {}
                }
                (a, Cmp::FunctionRestore)
            }
            17 => (vec![f(self), self.name("HELP")], Cmp::Kind),
            _ => (vec![f(self), b(b"NOSUCH")], Cmp::Exact),
        };
        self.maybe_arity(Cmd::new(a, cmp))
    }
}
