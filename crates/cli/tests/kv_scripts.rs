//! Lua scripts in `mojim kv` with real clients on sockets: a script's writes are one group,
//! there whole or gone whole after `kill -9`; a busy read-only script is killed by `SCRIPT
//! KILL` from a second client (one that connects while it runs), one that wrote is
//! `UNKILLABLE` and its writes vanish with the process; hostile scripts get errors and the
//! server serves on; the script cache and the libraries are the server's, gone after a
//! restart. Each test runs a mirror and `mojim kv` as child processes.

mod common;

use common::edit_kv;
use common::kv::{wait_for, KvCluster, Resp};
use mojim_kv::resp::Value;

fn send(c: &mut Resp, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    c.send(&a);
}

fn err(v: &Value) -> String {
    match v {
        Value::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("an error was expected, got {other:?}"),
    }
}

/// Waits until other clients are answered -BUSY (the script passed its time limit).
fn wait_busy(c: &mut Resp) {
    wait_for("the script to be busy", || match c.cmd(&["PING"]) {
        Value::Error(e) if e.starts_with(b"BUSY") => Some(()),
        _ => None,
    });
}

const SCRIPT_KEYS: usize = 40;
/// Sets `s<n>:0` .. `s<n>:39` to `n`.
const WRITE_MANY: &str =
    "for i = 0, 39 do redis.call('set', 's' .. ARGV[1] .. ':' .. i, ARGV[1]) end return ARGV[1]";

#[test]
fn a_scripts_writes_survive_kill_9_whole_or_vanish_whole() {
    let mut k = KvCluster::new("kv-scripts-kill9", 64 << 20);
    let addr = k.addr();
    let sent = 800;
    let writer = std::thread::spawn(move || {
        let mut c = Resp::connect(&addr);
        for n in 0..sent {
            let n = n.to_string();
            if c.try_send(&[b"EVAL", WRITE_MANY.as_bytes(), b"0", n.as_bytes()]).is_err() {
                break;
            }
        }
        let mut answered = Vec::new();
        while let Some(v) = c.read() {
            answered.push(v);
        }
        answered
    });
    let mut r = k.client();
    wait_for("some scripts to have run", || match r.cmd(&["EXISTS", "s100:0"]) {
        Value::Int(1) => Some(()),
        _ => None,
    });
    k.kill();
    let answered = writer.join().expect("the writer");
    for (n, v) in answered.iter().enumerate() {
        assert_eq!(*v, Value::bulk(n.to_string()), "script {n} answered");
    }
    k.start();
    let mut r = k.client();
    let mut whole = 0;
    for n in 0..sent {
        let keys: Vec<String> = (0..SCRIPT_KEYS).map(|i| format!("s{n}:{i}")).collect();
        let mut args = vec!["EXISTS"];
        args.extend(keys.iter().map(String::as_str));
        let Value::Int(there) = r.cmd(&args) else { panic!("EXISTS answers an integer") };
        assert!(
            there == 0 || there == SCRIPT_KEYS as i64,
            "script {n}: {there} of its {SCRIPT_KEYS} keys after kill -9"
        );
        if n < answered.len() {
            assert_eq!(there, SCRIPT_KEYS as i64, "script {n} was answered: all of it is there");
        }
        whole += usize::from(there > 0);
    }
    assert!(whole >= answered.len() && whole > 100, "{whole} scripts whole, {} answered", answered.len());
}

#[test]
fn script_kill_from_a_second_client_ends_a_busy_read_only_script() {
    let k = KvCluster::new("kv-scripts-kill", 64 << 20);
    let mut before = k.client();
    assert_eq!(before.cmd(&["CONFIG", "SET", "lua-time-limit", "50"]), Value::Simple(b"OK".to_vec()));
    let mut runner = k.client();
    send(
        &mut runner,
        &["EVAL", "local f = function() while true do end end while true do pcall(f) end", "0"],
    );
    wait_busy(&mut before);
    // A client that connects while the script runs is let in, to kill it.
    let mut late = k.client();
    assert!(err(&late.cmd(&["GET", "x"])).starts_with("BUSY Redis is busy running a script"));
    assert!(err(&late.cmd(&["FUNCTION", "KILL"])).starts_with("BUSY"), "an EVAL is killed with SCRIPT KILL");
    assert_eq!(late.cmd(&["SCRIPT", "KILL"]), Value::Simple(b"OK".to_vec()));
    let v = runner.read().expect("the script's reply");
    assert!(err(&v).contains("Script killed by user with SCRIPT KILL"), "{v:?}");
    assert_eq!(late.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(before.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(runner.cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
    assert_eq!(
        late.cmd(&["SCRIPT", "KILL"]),
        Value::Error(b"NOTBUSY No scripts in execution right now.".to_vec())
    );
    // A function, with FUNCTION KILL.
    late.cmd(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=spin\nredis.register_function('spin', function() while true do end end)",
    ]);
    send(&mut runner, &["FCALL", "spin", "0"]);
    wait_busy(&mut before);
    assert!(err(&before.cmd(&["SCRIPT", "KILL"])).starts_with("BUSY"));
    assert_eq!(before.cmd(&["FUNCTION", "KILL"]), Value::Simple(b"OK".to_vec()));
    assert!(err(&runner.read().expect("the function's reply")).contains("killed by user"));
}

#[test]
fn a_busy_script_that_wrote_is_unkillable_and_its_writes_vanish_with_the_process() {
    let mut k = KvCluster::new("kv-scripts-unkillable", 64 << 20);
    let mut c = k.client();
    c.cmd(&["SET", "before", "1"]);
    c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let mut runner = k.client();
    send(&mut runner, &["EVAL", "redis.call('set', KEYS[1], 'y') while true do end", "1", "x"]);
    wait_busy(&mut c);
    assert!(err(&c.cmd(&["SCRIPT", "KILL"])).starts_with("UNKILLABLE"));
    assert!(err(&c.cmd(&["PING"])).starts_with("BUSY"));
    k.kill();
    k.start();
    let mut c = k.client();
    assert_eq!(c.cmd(&["GET", "x"]), Value::Null, "the script's batch was never sealed");
    assert_eq!(c.cmd(&["GET", "before"]), Value::bulk("1"));
}

#[test]
fn hostile_scripts_get_errors_and_the_server_serves_on() {
    let k = KvCluster::with("kv-scripts-hostile", 64 << 20, |f| {
        edit_kv(f, |k| k.output_limit = "32MiB".into());
    });
    let mut c = k.client();
    for (script, want) in [
        ("local s = 'x' while true do s = s .. s end", "not enough memory"),
        ("local function f() return f() + 1 end return f()", "stack overflow"),
        ("return loadstring(string.dump(function() return 1 end))()", "attempt to call a nil value"),
        ("x = 1", "Attempt to modify a readonly table"),
        ("redis.call = nil", "Attempt to modify a readonly table"),
        ("return cjson.decode(string.rep('[', 100000))", "Found too many nested data structures"),
        ("return cmsgpack.unpack(string.rep('\\145', 100000))", "Bad data format"),
        ("return redis.call('eval', 'return 1', 0)", "not allowed"),
    ] {
        let e = err(&c.cmd(&["EVAL", script, "0"]));
        assert!(e.contains(want), "{script}: {e}");
    }
    // A reply past the output limit closes that client, as any command's.
    let mut big = k.client();
    send(
        &mut big,
        &[
            "EVAL",
            "local t = {} local s = string.rep('x', 1000) for i = 1, 40000 do t[i] = s end return t",
            "0",
        ],
    );
    let v = big.read().expect("an error before the close");
    assert!(err(&v).contains("output"), "{v:?}");
    assert!(big.closed());
    // A client that hangs up while its script is busy: the script ends, the server serves on.
    c.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let mut gone = k.client();
    send(&mut gone, &["EVAL", "while true do end", "0"]);
    wait_busy(&mut c);
    drop(gone);
    assert_eq!(c.cmd(&["SCRIPT", "KILL"]), Value::Simple(b"OK".to_vec()));
    wait_for("the server to serve again", || {
        (c.cmd(&["PING"]) == Value::Simple(b"PONG".to_vec())).then_some(())
    });
    assert_eq!(
        c.cmd(&["EVAL", "return redis.call('set', 'after', 'ok')", "0"]),
        Value::Simple(b"OK".to_vec())
    );
}

#[test]
fn scripts_and_libraries_are_gone_after_a_restart() {
    let mut k = KvCluster::new("kv-scripts-restart", 64 << 20);
    let mut c = k.client();
    let Value::Bulk(sha) = c.cmd(&["SCRIPT", "LOAD", "return 'cached'"]) else { panic!("a SHA1") };
    let sha = String::from_utf8(sha).expect("hex");
    let lib = "#!lua name=lib\nredis.register_function('f', function() return 'f' end)";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", lib]), Value::bulk("lib"));
    let Value::Bulk(dump) = c.cmd(&["FUNCTION", "DUMP"]) else { panic!("a payload") };
    k.kill();
    k.start();
    let mut c = k.client();
    assert!(err(&c.cmd(&["EVALSHA", &sha, "0"])).starts_with("NOSCRIPT"));
    assert_eq!(err(&c.cmd(&["FCALL", "f", "0"])), "ERR Function not found");
    c.send(&[b"FUNCTION", b"RESTORE", &dump]);
    assert_eq!(c.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(c.cmd(&["FCALL", "f", "0"]), Value::bulk("f"));
}
