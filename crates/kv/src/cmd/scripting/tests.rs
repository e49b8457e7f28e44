//! Command tests of scripts and functions, against a store in memory, replies decoded and
//! compared with Redis's.

use super::super::scripting::sha1hex;
use super::super::*;
use crate::resp::{decode, encode_request, Limits, Parsed, Parser, Value};
use crate::store::VecMem;
use std::cell::{Cell, RefCell};

/// A host with a scripting engine; while a script is busy it plays the requests of
/// `busy_requests` (another client's), recording the answers.
#[derive(Default)]
struct TestHost {
    scripts: RefCell<Scripts>,
    busy_requests: RefCell<Vec<Vec<&'static str>>>,
    busy_answers: RefCell<Vec<Value>>,
    busy_calls: Cell<u64>,
    others_waiting: Cell<bool>,
}

impl Host for TestHost {
    fn authenticate(&self, _client: &str, _user: &[u8], _password: &[u8]) -> Auth {
        Auth::NoPassword
    }
    fn replication(&self) -> Replication {
        Replication::default()
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
        format!("fixed {name}")
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
    fn scripts(&self) -> Option<&RefCell<Scripts>> {
        Some(&self.scripts)
    }
    fn others_waiting(&self) -> bool {
        self.others_waiting.get()
    }
    fn serve_busy(&self, answer: &mut dyn FnMut(&mut Session, &Args, &mut Reply) -> scripting::Answered) {
        self.busy_calls.set(self.busy_calls.get() + 1);
        let reqs = std::mem::take(&mut *self.busy_requests.borrow_mut());
        let mut other = Session::new(99, "other".into(), true);
        for req in reqs {
            let owned: Vec<Vec<u8>> = req.iter().map(|s| s.as_bytes().to_vec()).collect();
            let mut out = Vec::new();
            let proto = other.proto;
            answer(&mut other, &Args::Owned(&owned), &mut Reply { buf: &mut out, proto });
            let (v, _) = decode(&out, &Limits::default()).unwrap().expect("a whole reply");
            self.busy_answers.borrow_mut().push(v);
        }
    }
}

struct Harness {
    host: TestHost,
    settings: Settings,
    watches: Watches,
    store: Store<VecMem>,
    session: Session,
    output_limit: usize,
    /// Cluster mode, with this view of the topology.
    cluster: Option<crate::cluster::view::CachedView>,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_heap(4 << 20)
    }

    fn with_heap(bytes: u64) -> Harness {
        Harness {
            host: TestHost::default(),
            settings: Settings::default(),
            watches: Watches::default(),
            store: Store::open(VecMem::new(bytes), 1024).unwrap(),
            session: Session::new(7, "t".into(), true),
            output_limit: 1 << 30,
            cluster: None,
        }
    }

    fn cmd(&mut self, args: &[&str]) -> Value {
        let (o, v) = self.outcome(args);
        assert_eq!(o, Outcome::Done, "{args:?}");
        v
    }

    fn outcome(&mut self, args: &[&str]) -> (Outcome, Value) {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.outcome_bytes(&bytes)
    }

    fn outcome_bytes(&mut self, args: &[&[u8]]) -> (Outcome, Value) {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        if let Some(c) = &mut self.cluster {
            let _ = c.refresh();
        }
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
            now_ms: 1_000_000,
            max_ranges: 1024,
            max_group_bytes: 1 << 30,
            output_limit: self.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut Default::default(),
            telemetry: &mut Default::default(),
            cluster: self.cluster.as_ref(),
        };
        let o =
            execute(&mut cx, &mut self.session, &Args::Parsed { parser: &p, buf: &req }, &mut out).unwrap();
        self.store.seal(1024).unwrap();
        let (v, n) = decode(&out, &Limits::default()).unwrap().expect("a whole reply");
        assert_eq!(n, out.len(), "one reply for {args:?}");
        (o, v)
    }

    /// The raw reply of a command.
    fn raw(&mut self, args: &[&str]) -> Vec<u8> {
        self.raw_outcome(args).1
    }

    /// The outcome and raw reply of a command.
    fn raw_outcome(&mut self, args: &[&str]) -> (Outcome, Vec<u8>) {
        let mut req = Vec::new();
        encode_request(args, &mut req);
        let mut p = Parser::new(Limits::default());
        assert!(matches!(p.parse(&req).unwrap(), Parsed::Request { .. }));
        let mut out = Vec::new();
        if let Some(c) = &mut self.cluster {
            let _ = c.refresh();
        }
        let mut cx = Cx {
            store: &mut self.store,
            host: &self.host,
            now_ms: 1_000_000,
            max_ranges: 1024,
            max_group_bytes: 1 << 30,
            output_limit: self.output_limit,
            read_keys: false,
            settings: &mut self.settings,
            databases: 16,
            watches: &mut self.watches,
            errors: &mut Default::default(),
            telemetry: &mut Default::default(),
            cluster: self.cluster.as_ref(),
        };
        let o =
            execute(&mut cx, &mut self.session, &Args::Parsed { parser: &p, buf: &req }, &mut out).unwrap();
        self.store.seal(1024).unwrap();
        (o, out)
    }

    fn eval(&mut self, script: &str, keys_and_args: &[&str]) -> Value {
        let n = keys_and_args.len().to_string();
        let mut a = vec!["EVAL", script];
        let _ = n;
        a.extend_from_slice(keys_and_args);
        self.cmd(&a)
    }
}

fn bulk(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}

fn err_text(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("an error was expected, got {other:?}"),
    }
}

#[test]
fn conversions_both_ways_as_redis() {
    let mut h = Harness::new();
    assert_eq!(h.eval("return 'hello'", &["0"]), bulk("hello"));
    assert_eq!(h.eval("return 100.5", &["0"]), Value::Int(100));
    assert_eq!(h.eval("return true", &["0"]), Value::Int(1));
    assert_eq!(h.eval("return false", &["0"]), Value::Null);
    assert_eq!(h.eval("return {ok='fine'}", &["0"]), Value::Simple(b"fine".to_vec()));
    assert_eq!(err_text(&h.eval("return {err='ERR this is an error'}", &["0"])), "ERR this is an error");
    assert_eq!(
        h.eval("return {1,2,3,'ciao',{1,2}}", &["0"]),
        Value::Array(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(3),
            bulk("ciao"),
            Value::Array(vec![Value::Int(1), Value::Int(2)])
        ])
    );
    assert_eq!(
        h.eval("return {KEYS[1],KEYS[2],ARGV[1],ARGV[2]}", &["2", "a", "b", "c", "d"]),
        Value::Array(vec![bulk("a"), bulk("b"), bulk("c"), bulk("d")])
    );
    assert_eq!(h.eval("return _G", &["0"]), Value::Array(vec![]));
    h.cmd(&["SET", "mykey", "myval"]);
    assert_eq!(h.eval("return redis.call('get',KEYS[1])", &["1", "mykey"]), bulk("myval"));
    assert_eq!(
        h.eval("local foo = redis.pcall('incr',KEYS[1]) return {type(foo),foo['err']}", &["1", "mykey"]),
        Value::Array(vec![bulk("table"), bulk("ERR value is not an integer or out of range")])
    );
    assert_eq!(
        h.eval("local foo = redis.pcall('get','nokey') return {type(foo),foo == false}", &["0"]),
        Value::Array(vec![bulk("boolean"), Value::Int(1)])
    );
    assert_eq!(
        h.eval("redis.call('set','foo',9007199254740991) return redis.call('get','foo')", &["0"]),
        bulk("9007199254740991")
    );
    assert_eq!(
        h.eval("redis.setresp(3) return redis.call('hgetall', 'nohash')", &["0"]),
        Value::Array(vec![]),
        "an empty map in a RESP2 reply"
    );
    h.cmd(&["HSET", "h", "f", "v"]);
    assert_eq!(
        h.eval("redis.setresp(3) return redis.call('hgetall', 'h')", &["0"]),
        Value::Array(vec![bulk("f"), bulk("v")])
    );
    assert!(err_text(&h.eval("redis.call('nosuchcommand')", &["0"]))
        .contains("Unknown Redis command called from script"));
    assert!(err_text(&h.eval("redis.call('get','a','b','c')", &["0"])).contains("Wrong number of args"));
    assert!(err_text(&h.eval("return redis.call()", &["0"])).contains("one argument"));
    assert!(
        err_text(&h.eval("return redis.call('ping', {})", &["0"])).contains("must be strings or integers")
    );
    assert!(err_text(&h.eval("return redis.pcall('blpop','x',0)", &["0"])).contains("not allowed"));
    assert!(err_text(&h.eval("return redis.call('eval','return 1', 0)", &["0"])).contains("not allowed"));
    assert!(err_text(&h.eval("return redis.call('cluster','reset','hard')", &["0"])).contains("not allowed"));
    assert_eq!(err_text(&h.eval("return 1", &["-12"])), "ERR Number of keys can't be negative");
    assert_eq!(
        err_text(&h.eval("return 1", &["2", "a"])),
        "ERR Number of keys can't be greater than number of args"
    );
    assert_eq!(
        err_text(&h.eval("return redis.error_reply('MY_ERR_CODE custom msg')", &["0"])),
        "MY_ERR_CODE custom msg"
    );
    assert_eq!(h.eval("return redis.status_reply('MY_OK')", &["0"]), Value::Simple(b"MY_OK".to_vec()));
    assert_eq!(
        h.eval("return redis.sha1hex('Pizza & Mandolino')", &["0"]),
        bulk("74822d82031af7493c20eefa13bd07ec4fada82f")
    );
}

#[test]
fn the_script_cache() {
    let mut h = Harness::new();
    h.cmd(&["SET", "mykey", "myval"]);
    assert_eq!(h.eval("return redis.call('get',KEYS[1])", &["1", "mykey"]), bulk("myval"));
    let sha = "fd758d1589d044dd850a6f05d52f2eefd27f033f";
    assert_eq!(h.cmd(&["EVALSHA", sha, "1", "mykey"]), bulk("myval"));
    assert_eq!(h.cmd(&["EVALSHA", &sha.to_uppercase(), "1", "mykey"]), bulk("myval"));
    assert!(err_text(&h.cmd(&["EVALSHA", "NotValidShaSUM", "0"])).starts_with("NOSCRIPT"));
    assert_eq!(
        h.cmd(&["SCRIPT", "EXISTS", sha, "ffd632c7d33e571e9f24556ebed26c3479a87130"]),
        Value::Array(vec![Value::Int(1), Value::Int(0)])
    );
    // INFO from inside a script (the engine is in use): no script lines, no panic.
    assert!(matches!(h.eval("return redis.call('info', 'memory')", &["0"]), Value::Bulk(_)));
    assert_eq!(h.cmd(&["SCRIPT", "FLUSH"]), Value::Simple(b"OK".to_vec()));
    assert!(err_text(&h.cmd(&["EVALSHA", sha, "1", "mykey"])).starts_with("NOSCRIPT"));
    assert_eq!(
        h.cmd(&["SCRIPT", "LOAD", "return 'loaded'"]),
        bulk("b534286061d4b9e4026607613b95c06c06015ae8")
    );
    assert_eq!(h.cmd(&["EVALSHA", "b534286061d4b9e4026607613b95c06c06015ae8", "0"]), bulk("loaded"));
    assert!(err_text(&h.cmd(&["SCRIPT", "LOAD", "bad script"])).contains("Error compiling script"));
    let Value::Bulk(info) = h.cmd(&["INFO", "memory"]) else { panic!("INFO answers a bulk string") };
    assert!(String::from_utf8_lossy(&info).contains("number_of_cached_scripts:1\r\n"));
    assert_eq!(err_text(&h.cmd(&["SCRIPT", "KILL"])), "NOTBUSY No scripts in execution right now.");
}

#[test]
fn the_sandbox_keeps_scripts_apart() {
    let mut h = Harness::new();
    for (script, want) in [
        ("return a", "Script attempted to access nonexistent global variable 'a'"),
        ("a = 10", "Attempt to modify a readonly table"),
        ("setmetatable(_G, {})", "Attempt to modify a readonly table"),
        ("local g = getmetatable(_G) g.__index = {}", "Attempt to modify a readonly table"),
        ("redis = function() return 1 end", "Attempt to modify a readonly table"),
        ("_G = {}", "Attempt to modify a readonly table"),
        ("redis.call = function() return 1 end", "Attempt to modify a readonly table"),
        ("cjson.encode = function() return 1 end", "Attempt to modify a readonly table"),
        ("cmsgpack.pack = function() return 1 end", "Attempt to modify a readonly table"),
        ("bit.lshift = function() return 1 end", "Attempt to modify a readonly table"),
        ("rawset(_G, 'x', 1)", "Attempt to modify a readonly table"),
        ("rawset(redis, 'x', 1)", "Attempt to modify a readonly table"),
        ("table.insert(redis, 1)", "Attempt to modify a readonly table"),
        ("getfenv(0).x = 1", "Attempt to modify a readonly table"),
        ("getfenv(tostring).x = 1", "Attempt to modify a readonly table"),
        ("getmetatable('').__index.rep = nil", "a nil value"),
        ("string.rep = nil", "Attempt to modify a readonly table"),
        ("math.random = nil", "Attempt to modify a readonly table"),
        ("return loadstring(string.dump(function() return 1 end))()", "attempt to call a nil value"),
        ("loadfile('x')", "nonexistent global variable 'loadfile'"),
        ("dofile('x')", "nonexistent global variable 'dofile'"),
        ("print('x')", "nonexistent global variable 'print'"),
        ("os.exit()", "nonexistent global variable 'os'"),
        ("io.open('/etc/passwd')", "nonexistent global variable 'io'"),
        ("require('os')", "nonexistent global variable 'require'"),
    ] {
        let e = err_text(&h.eval(script, &["0"]));
        assert!(e.contains(want), "{script}: {e}");
    }
    // Nothing of the attempts above is left for the next script.
    assert_eq!(
        h.eval(
            "return {type(redis.call), tostring(pcall(function() return x end)), string.rep('a', 2), #redis}",
            &["0"]
        ),
        Value::Array(vec![bulk("function"), bulk("false"), bulk("aa"), Value::Int(0)])
    );
    // A chunk loaded at run time has the same environment.
    assert!(err_text(&h.eval("return loadstring('y = 1')()", &["0"])).contains("readonly"));
    assert_eq!(h.eval("local f = loadstring('return 1 + 1') return f()", &["0"]), Value::Int(2));
    // pcall gives Redis's error text.
    assert_eq!(
        h.eval("local s, r = pcall(function() return foo end) return tostring(s) .. ' ' .. r", &["0"]),
        bulk("false user_script:1: Script attempted to access nonexistent global variable 'foo'")
    );
    assert_eq!(
        h.eval("local ok, e = pcall(redis.call, 'incr', 'nokey', 'x') return e", &["0"]),
        bulk("ERR Wrong number of args calling Redis command from script")
    );
}

/// A script's write of a global or of a library's field, and its read of a missing global,
/// are placed at the script's line, as Redis's VM and its `luaL_error` place them; a write
/// through a C function (rawset) is not placed, as in Redis. (redis-server 7.0.15's answers.)
#[test]
fn errors_of_the_globals_are_placed_as_redis_places_them() {
    let mut h = Harness::new();
    let place = |sha: &str, line: u32| format!(" script: {sha}, on @user_script:{line}.");
    for (script, want) in [
        ("x = 1", "ERR user_script:1: Attempt to modify a readonly table"),
        ("local t = redis\n t.y = 2", "ERR user_script:2: Attempt to modify a readonly table"),
        ("local function f() y = 2 end\n\nf()", "ERR user_script:1: Attempt to modify a readonly table"),
        (
            "return nosuch",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'nosuch'",
        ),
        ("rawset(_G, 'x', 1)", "ERR Attempt to modify a readonly table"),
        ("table.insert(redis, 1)", "ERR Attempt to modify a readonly table"),
    ] {
        let sha = sha1hex(script.as_bytes());
        let line = if script.starts_with("local t") { 2 } else { 1 };
        assert_eq!(err_text(&h.eval(script, &["0"])), format!("{want}{}", place(&sha, line)), "{script}");
    }
    assert_eq!(
        h.eval("local s, r = pcall(function() zz = 1 end) return tostring(s) .. ' ' .. r", &["0"]),
        bulk("false user_script:1: Attempt to modify a readonly table")
    );
    // A library's code, when FUNCTION LOAD runs it: placed, and no traceback.
    assert_eq!(
        err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=bad\nlocal x = nosuch"])),
        "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global \
         variable 'nosuch'"
    );
    assert_eq!(
        err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=bad\nxx = 1"])),
        "ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table"
    );
}

/// A script's number that is past the integers, or NaN, becomes the integer a C cast to `long
/// long` gives on x86-64, as Redis's reply (redis-server 7.0.15's answers).
#[test]
fn numbers_past_the_integers_are_cast_as_redis_casts_them() {
    let mut h = Harness::new();
    for (script, want) in [
        ("return 1e20", i64::MIN),
        ("return -1e20", i64::MIN),
        ("return 9223372036854775807", i64::MIN),
        ("return 1/0", i64::MIN),
        ("return 0/0", i64::MIN),
        ("return 9.2e18", 9_200_000_000_000_000_000),
        ("return -3.99", -3),
    ] {
        assert_eq!(h.eval(script, &["0"]), Value::Int(want), "{script}");
    }
    assert_eq!(h.eval("return {1e20, 2.5}", &["0"]), Value::Array(vec![Value::Int(i64::MIN), Value::Int(2)]));
}

/// SCRIPT DEBUG in a transaction is refused, as Redis refuses it while replies wait to be sent
/// (in EXEC they always do); alone, NO is taken.
#[test]
fn script_debug_is_refused_in_a_transaction() {
    let mut h = Harness::new();
    assert_eq!(h.cmd(&["SCRIPT", "DEBUG", "NO"]), Value::Simple(b"OK".to_vec()));
    h.cmd(&["MULTI"]);
    assert_eq!(h.cmd(&["SCRIPT", "DEBUG", "NO"]), Value::Simple(b"QUEUED".to_vec()));
    assert_eq!(
        h.cmd(&["EXEC"]),
        Value::Array(vec![Value::Error(b"ERR SCRIPT DEBUG must be called outside a pipeline".to_vec())])
    );
}

#[test]
fn libraries_of_lua_redis_embeds() {
    let mut h = Harness::new();
    assert_eq!(
        h.eval("return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')", &["0"]),
        bulk("0 -5000 -1 0.0003 1023.2 0")
    );
    assert_eq!(
        h.eval("local e = cmsgpack.pack(0.1) local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h", &["0"]),
        bulk("cb3fb999999999999a")
    );
    assert_eq!(h.eval("return bit.bor(1,2,4,8,16,32,64,128)", &["0"]), Value::Int(255));
    let r1 = h.eval("math.randomseed(10) return tostring(math.random())", &["0"]);
    let r2 = h.eval("math.randomseed(10) return tostring(math.random())", &["0"]);
    let r3 = h.eval("math.randomseed(20) return tostring(math.random())", &["0"]);
    assert_eq!(r1, r2);
    assert_ne!(r2, r3);
    let a = h.eval("return tostring(math.random())", &["0"]);
    let b = h.eval("return tostring(math.random())", &["0"]);
    assert_ne!(a, b, "the sequence goes on from script to script");
}

#[test]
fn read_only_scripts_and_shebangs() {
    let mut h = Harness::new();
    h.cmd(&["SET", "foo", "bar"]);
    assert_eq!(h.cmd(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "foo"]), bulk("bar"));
    assert!(err_text(&h.cmd(&["EVAL_RO", "redis.call('del', KEYS[1])", "1", "foo"]))
        .starts_with("ERR Write commands are not allowed from read-only scripts"));
    assert!(err_text(&h.eval("#!lua flags=no-writes\nredis.call('set','x',1)", &["0"]))
        .contains("Write commands are not allowed"));
    assert!(err_text(&h.cmd(&["EVAL_RO", "#!lua\nreturn 1", "0"]))
        .contains("Can not execute a script with write flag using *_ro command"));
    assert_eq!(h.cmd(&["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"]), Value::Int(1));
    assert!(err_text(&h.eval("#!not-lua\nreturn 1", &["0"])).contains("Unexpected engine in script shebang"));
    assert!(err_text(&h.eval("#!lua badger=data\nreturn 1", &["0"])).contains("Unknown lua shebang option"));
    assert!(err_text(&h.eval("#!lua flags=allow-oom,what?\nreturn 1", &["0"]))
        .contains("Unexpected flag in script shebang"));
    assert_eq!(h.eval("#!lua\nreturn 1", &["0"]), Value::Int(1));
    assert_eq!(h.cmd(&["GET", "foo"]), bulk("bar"));
}

#[test]
fn a_runtime_error_keeps_the_writes_before_it_as_redis() {
    let mut h = Harness::new();
    let e = err_text(&h.eval(
        "redis.call('set', 'a', '1') redis.call('lpush', 'a', 'x') redis.call('set', 'b', '2')",
        &["0"],
    ));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(h.cmd(&["GET", "a"]), bulk("1"));
    assert_eq!(h.cmd(&["EXISTS", "b"]), Value::Int(0));
}

#[test]
fn a_store_error_undoes_the_whole_script() {
    let mut h = Harness::with_heap(1 << 20);
    h.cmd(&["SET", "before", "kept"]);
    let (o, v) = h.outcome(&[
        "EVAL",
        "redis.call('set', 'first', 'x') for i = 1, 100000 do redis.call('set', 'k' .. i, string.rep('v', 1000)) end return 'done'",
        "0",
    ]);
    assert_eq!(o, Outcome::Done);
    assert!(err_text(&v).starts_with("OOM"), "{v:?}");
    assert_eq!(h.cmd(&["EXISTS", "first", "k1", "k2"]), Value::Int(0), "the script's writes are undone");
    assert_eq!(h.cmd(&["GET", "before"]), bulk("kept"));
    // pcall cannot catch it and write on.
    let (_, v) = h.outcome(&[
        "EVAL",
        "for i = 1, 100000 do pcall(redis.call, 'set', 'k' .. i, string.rep('v', 1000)) end redis.call('set', 'after', '1') return 'done'",
        "0",
    ]);
    assert!(err_text(&v).starts_with("OOM"), "{v:?}");
    assert_eq!(h.cmd(&["EXISTS", "k1", "after"]), Value::Int(0));
    assert_eq!(h.cmd(&["SET", "small", "1"]), Value::Simple(b"OK".to_vec()));
}

/// A transaction meets a busy script as in Redis 7.0.15 (its `unit/multi`'s "MULTI and script
/// timeout" and "EXEC and script timeout"): MULTI is let in, a command refused with BUSY fails
/// the transaction, and EXEC, refused, answers EXECABORT and ends it.
#[test]
fn a_transaction_meeting_a_busy_script_is_aborted_whole() {
    let mut h = Harness::new();
    h.settings.busy_reply_ms = 1;
    h.host.busy_requests.borrow_mut().extend([
        vec!["MULTI"],
        vec!["INCR", "xx"],
        vec!["EXEC"],
        vec!["DISCARD"],
        vec!["MULTI"],
        vec!["DISCARD"],
        vec!["UNWATCH"],
        vec!["SCRIPT", "KILL"],
    ]);
    let e = err_text(&h.eval("while 1 do end", &["0"]));
    assert!(e.contains("killed by user"), "{e}");
    let a = h.host.busy_answers.borrow().clone();
    let ok = Value::Simple(b"OK".to_vec());
    assert_eq!(a[0], ok);
    assert!(err_text(&a[1]).starts_with("BUSY"), "{a:?}");
    assert!(err_text(&a[2]).starts_with("EXECABORT Transaction discarded because of: BUSY"), "{a:?}");
    assert_eq!(err_text(&a[3]), "ERR DISCARD without MULTI", "EXEC ended the transaction");
    assert_eq!(a[4..], [ok.clone(), ok.clone(), ok.clone(), ok]);
    assert_eq!(h.cmd(&["EXISTS", "xx"]), Value::Int(0), "nothing of the transaction ran");
}

/// A set has no order: SORT BY a constant gives it to a script sorted (as redis-server 7.0.15
/// does, its `unit/scripting`'s "SORT BY <constant> output gets ordered for scripting").
#[test]
fn a_set_sorted_by_a_constant_reaches_a_script_in_order() {
    let mut h = Harness::new();
    h.cmd(&["SADD", "myset", "c", "aa", "b", "a"]);
    let got = h.eval("return redis.call('sort', KEYS[1], 'by', '_')", &["1", "myset"]);
    let want: Vec<Value> = ["a", "aa", "b", "c"].iter().map(|m| Value::Bulk(m.as_bytes().to_vec())).collect();
    assert_eq!(got, Value::Array(want));
}

#[test]
fn a_busy_read_only_script_is_killed_and_pcall_cannot_keep_it() {
    let mut h = Harness::new();
    h.settings.busy_reply_ms = 1;
    h.host.busy_requests.borrow_mut().extend([vec!["PING"], vec!["SCRIPT", "KILL"]]);
    let e = err_text(
        &h.eval("local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end", &["0"]),
    );
    assert!(e.contains("killed by user"), "{e}");
    let answers = h.host.busy_answers.borrow().clone();
    assert!(err_text(&answers[0]).starts_with("BUSY"), "{answers:?}");
    assert_eq!(answers[1], Value::Simple(b"OK".to_vec()));
    // A function is killed with FUNCTION KILL only.
    h.cmd(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=lib\nredis.register_function('spin', function() while true do end end)",
    ]);
    h.host.busy_requests.borrow_mut().extend([
        vec!["SCRIPT", "KILL"],
        vec!["FUNCTION", "STATS"],
        vec!["FUNCTION", "KILL"],
    ]);
    let e = err_text(&h.cmd(&["FCALL", "spin", "0"]));
    assert!(e.contains("killed by user"), "{e}");
    let answers = h.host.busy_answers.borrow().clone();
    assert!(err_text(&answers[2]).starts_with("BUSY"), "{answers:?}");
    assert!(matches!(&answers[3], Value::Array(a) if a.len() == 4));
    assert_eq!(answers[4], Value::Simple(b"OK".to_vec()));
}

#[test]
fn a_busy_script_that_wrote_cannot_be_killed() {
    let mut h = Harness::new();
    h.settings.busy_reply_ms = 1;
    h.host.busy_requests.borrow_mut().push(vec!["SCRIPT", "KILL"]);
    let v = h.eval(
        "redis.call('set', KEYS[1], 'y') local n = 0 for i = 1, 3000000 do n = n + 1 end return n",
        &["1", "x"],
    );
    assert_eq!(v, Value::Int(3000000));
    assert!(err_text(&h.host.busy_answers.borrow()[0]).starts_with("UNKILLABLE"));
    assert_eq!(h.cmd(&["GET", "x"]), bulk("y"));
}

#[test]
fn hostile_scripts_are_bounded() {
    let mut h = Harness::new();
    let e = err_text(&h.eval("local s = 'x' while true do s = s .. s end", &["0"]));
    assert!(e.contains("not enough memory"), "{e}");
    let e = err_text(&h.eval("local function f(n) return f(n + 1) + 1 end return f(1)", &["0"]));
    assert!(e.contains("stack overflow"), "{e}");
    let raw = h.raw(&["EVAL", "local a = {} a[1] = a return a", "0"]);
    let tail = b"-ERR reached lua stack limit\r\n";
    assert!(raw.ends_with(tail) && raw[..raw.len() - tail.len()].chunks(4).all(|c| c == b"*1\r\n"));
    assert!(err_text(&h.eval("setfenv(tostring, {})", &["0"])).contains("environment"));
    h.output_limit = 64 << 10;
    let (o, _) =
        h.outcome(&["EVAL", "local t = {} for i = 1, 100000 do t[i] = 'xxxxxxxxxx' end return t", "0"]);
    assert_eq!(o, Outcome::OverLimit);
    h.output_limit = 1 << 30;
    // Wide values cost no Lua stack slot each.
    assert_eq!(
        h.eval(
            "local a = {} for i=1,7999 do a[i] = 1 end return redis.call('lpush', 'l', unpack(a))",
            &["0"]
        ),
        Value::Int(7999)
    );
    assert_eq!(
        h.eval("local m = {} for i=1,100000 do m[tostring(i)] = i end return #cmsgpack.pack(m) > 0", &["0"]),
        Value::Int(1)
    );
    // The state is usable after all of it.
    assert_eq!(h.eval("return 1", &["0"]), Value::Int(1));
}

#[test]
fn functions_load_call_list_dump_restore() {
    let mut h = Harness::new();
    let code = "#!lua name=test\nredis.register_function('test', function(KEYS, ARGV)\n return redis.call('set', KEYS[1], ARGV[1]) \nend)";
    assert_eq!(h.cmd(&["FUNCTION", "LOAD", code]), bulk("test"));
    assert_eq!(h.cmd(&["FCALL", "TEST", "1", "x", "1"]), Value::Simple(b"OK".to_vec()));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", code])).contains("already exists"));
    assert!(err_text(&h.cmd(&["FCALL_RO", "test", "1", "x", "1"]))
        .contains("Can not execute a script with write flag"));
    assert!(err_text(&h.cmd(&["FCALL", "test", "bad_arg"])).contains("Bad number of keys provided"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "REPLACE", "#!lua name=test\nbad script"]))
        .contains("Error compiling function"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "#!bad_engine name=t2\nreturn"]))
        .contains("Engine 'bad_engine' not found"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=t3\nreturn 1"]))
        .contains("No functions registered"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=t3\nlocal a = 1 while 1 do a = a + 1 end"]))
        .contains("FUNCTION LOAD timeout"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=t3\na = 1"]))
        .contains("Attempt to modify a readonly table"));
    assert!(err_text(&h.cmd(&["FUNCTION", "LOAD", "#!lua name=t3\nredis.call('ping')"]))
        .contains("nonexistent global variable 'call'"));
    assert!(err_text(&h.cmd(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=t3\nredis.register_function('test', function() end)"
    ]))
    .contains("Function test already exists"));
    let list = h.cmd(&["FUNCTION", "LIST"]);
    assert_eq!(
        list,
        Value::Array(vec![Value::Array(vec![
            bulk("library_name"),
            bulk("test"),
            bulk("engine"),
            bulk("LUA"),
            bulk("functions"),
            Value::Array(vec![Value::Array(vec![
                bulk("name"),
                bulk("test"),
                bulk("description"),
                Value::Null,
                bulk("flags"),
                Value::Array(vec![])
            ])])
        ])])
    );
    let Value::Bulk(dump) = h.cmd(&["FUNCTION", "DUMP"]) else { panic!("a payload") };
    assert_eq!(h.cmd(&["FUNCTION", "FLUSH"]), Value::Simple(b"OK".to_vec()));
    assert!(err_text(&h.cmd(&["FCALL", "test", "1", "x", "2"])).contains("Function not found"));
    assert_eq!(h.outcome_bytes(&[b"FUNCTION", b"RESTORE", &dump]).1, Value::Simple(b"OK".to_vec()));
    assert!(err_text(&h.outcome_bytes(&[b"FUNCTION", b"RESTORE", &dump]).1).contains("already exists"));
    assert_eq!(
        h.outcome_bytes(&[b"FUNCTION", b"RESTORE", &dump, b"REPLACE"]).1,
        Value::Simple(b"OK".to_vec())
    );
    assert!(err_text(&h.cmd(&["FUNCTION", "RESTORE", "bad payload"]))
        .contains("payload version or checksum are wrong"));
    assert_eq!(h.cmd(&["FCALL", "test", "1", "x", "3"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(h.cmd(&["GET", "x"]), bulk("3"));
    // The library API is not there at run time, nor the run-time API at load.
    let lib = "#!lua name=lib2\nlocal lib = redis\nredis.register_function('f1', function() lib.redis = redis end)\nredis.register_function('f2', function() return lib.register_function('f3', function() end) end)";
    h.cmd(&["FUNCTION", "LOAD", lib]);
    assert!(err_text(&h.cmd(&["FCALL", "f1", "0"])).contains("Attempt to modify a readonly table"));
    assert!(err_text(&h.cmd(&["FCALL", "f2", "0"])).contains("can only be called on FUNCTION LOAD command"));
    assert_eq!(h.cmd(&["FUNCTION", "DELETE", "lib2"]), Value::Simple(b"OK".to_vec()));
    assert!(err_text(&h.cmd(&["FUNCTION", "DELETE", "lib2"])).contains("Library not found"));
    let named = "#!lua name=lib3\nredis.register_function{function_name='f1', callback=function() return 'hello' end, description='some desc', flags={'no-writes'}}";
    h.cmd(&["FUNCTION", "LOAD", named]);
    assert_eq!(h.cmd(&["FCALL_RO", "f1", "0"]), bulk("hello"));
}

#[test]
fn a_slow_script_behind_other_clients_replies_runs_again_alone() {
    let mut h = Harness::new();
    h.settings.busy_reply_ms = 1;
    h.host.others_waiting.set(true);
    let script = "redis.call('set', 'x', '1') local i = 0 while i < 3000000 do i = i + 1 end return i";
    let (o, out) = h.raw_outcome(&["EVAL", script, "0"]);
    assert_eq!((o, out.as_slice()), (Outcome::Alone, &b""[..]), "undone and unanswered, to run again");
    assert_eq!(h.cmd(&["EXISTS", "x"]), Value::Int(0));
    assert_eq!(h.host.busy_calls.get(), 0, "nobody was answered -BUSY by the first run");
    // Run again (alone, as the server does it), it does not ask twice.
    assert_eq!(h.cmd(&["EVAL", script, "0"]), Value::Int(3000000));
    assert_eq!(h.cmd(&["GET", "x"]), bulk("1"));
    // Inside a transaction a script never asks.
    h.cmd(&["MULTI"]);
    h.cmd(&["EVAL", script, "0"]);
    assert_eq!(h.cmd(&["EXEC"]), Value::Array(vec![Value::Int(3000000)]));
}

/// Cluster mode: a script's commands may touch only keys this node serves now, as Redis 7.0
/// checks them: another shard's key, one a slot move sends on (ASK) and one in flight between
/// two shards are refused; the caller's ASKING holds for every command of the script.
#[test]
fn a_script_in_cluster_mode_touches_only_the_keys_served_here() {
    use crate::cluster::topology::{Shard, ShardNode, SlotMove, SlotRange, Topology};
    use crate::cluster::view::{CachedView, ClusterView};
    let shard = |id: char, node: &str, port: u16, (start, end): (u16, u16)| Shard {
        id: id.to_string().repeat(40),
        config_epoch: 1,
        slots: vec![SlotRange { start, end }],
        nodes: vec![ShardNode {
            name: node.into(),
            kv_addr: format!("127.0.0.1:{port}"),
            serve_addr: "127.0.0.1:1".into(),
            zone: String::new(),
            kv_tls_addr: None,
        }],
        primary: node.into(),
    };
    // "bar" is in slot 5061 (a's), "foo" in 12182 (b's).
    let mut t = Topology {
        epoch: 2,
        shards: vec![shard('a', "n1", 7001, (0, 5460)), shard('b', "n2", 7002, (5461, 16383))],
        moves: Vec::new(),
    };
    let view = std::sync::Arc::new(ClusterView::new("n1", t.clone()));
    let mut h = Harness::new();
    h.cluster = Some(CachedView::new(std::sync::Arc::clone(&view)));
    let non_local = "ERR Script attempted to access a non local key in a cluster node";
    assert_eq!(
        h.cmd(&["EVAL", "return redis.call('SET', '{bar}k', '10')", "0"]),
        Value::Simple(b"OK".to_vec())
    );
    assert_eq!(err_text(&h.cmd(&["EVAL", "return redis.call('GET', 'foo')", "0"])), non_local);
    // A slot moving away: a key in flight, and one the source no longer holds, are not here.
    t.moves.push(SlotMove { slot: 5061, from: "a".repeat(40), to: "b".repeat(40), rollback: false });
    view.set(t.clone());
    h.cmd(&["CLUSTER", "STAGEKEYS", "1", "{bar}k"]);
    assert_eq!(err_text(&h.cmd(&["EVAL", "return redis.call('INCR', '{bar}k')", "0"])), non_local);
    assert_eq!(err_text(&h.cmd(&["EVAL", "return redis.call('SET', '{bar}new', '1')", "0"])), non_local);
    assert_eq!(h.cmd(&["CLUSTER", "UNSTAGEKEYS", "1", "{bar}k"]), Value::Int(1));
    assert_eq!(h.cmd(&["DBSIZE"]), Value::Int(0), "no second copy was made");
    // The target of a move serves the slot's keys to a script called after ASKING only.
    let target = std::sync::Arc::new(ClusterView::new("n2", t));
    h.cluster = Some(CachedView::new(target));
    let moved = "ERR Script attempted to access a non local key in a cluster node";
    assert_eq!(err_text(&h.cmd(&["EVAL", "return redis.call('SET', '{bar}k', '1')", "0"])), moved);
    assert_eq!(h.cmd(&["ASKING"]), Value::Simple(b"OK".to_vec()));
    let two = "redis.call('SET', '{bar}k', '1'); return redis.call('INCR', '{bar}k')";
    assert_eq!(h.cmd(&["EVAL", two, "0"]), Value::Int(2));
}
