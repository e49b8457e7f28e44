//! `mojim kv` with the clients Redis users have: redis-cli scripted sessions (RESP2 and RESP3),
//! redis-py (basic operations, pipelines, transactions), redis-benchmark for every supported
//! command it has, and requests that break the protocol in many ways. Each test runs a mirror
//! and `mojim kv` as child processes, replicated in `sync` mode.

mod common;

use common::edit_kv;
use common::kv::{bulk, python_with_redis, tool, wait_for, KvCluster, Resp};
use common::Rng;
use mojim_kv::resp::Value;
use std::io::Write;
use std::process::Stdio;

fn run_with_stdin(mut cmd: std::process::Command, stdin: &str) -> (bool, String, String) {
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run");
    child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn redis_cli_scripted_sessions() {
    let Some(mut cli) = tool("redis-cli") else { return };
    let k = KvCluster::new("kv-cli", 64 << 20);
    let script =
        "SET greeting hello\nGET greeting\nAPPEND greeting \" world\"\nGET greeting\nINCR n\nINCRBY n 41\n\
                  HSET h a 1 b 2\nHGETALL h\nGET nope\nTTL greeting\nEXPIRE greeting 100\nTTL greeting\n\
                  LPUSH l x\nMSET x 1 y 2\nMGET x nope y\nDEL x y nope\nRENAME n m\nTYPE m\nTYPE h\nDBSIZE\n\
                  MULTI\nSET t 1\nINCR t\nEXEC\nWAIT 1 0\nSELECT 1\nPING\n";
    cli.args(["-p", &k.port()]);
    let (ok, out, err) = run_with_stdin(cli, script);
    assert!(ok, "redis-cli failed: {err}");
    let expected = "OK\nhello\n11\nhello world\n1\n42\n2\na\n1\nb\n2\n\n-1\n1\n100\n\
                    1\nOK\n1\n\n2\n2\nOK\nstring\nhash\n4\n\
                    OK\nQUEUED\nQUEUED\nOK\n2\n1\nOK\nPONG\n";
    assert_eq!(out, expected, "redis-cli's session (stderr: {err})");

    // RESP3: a map, and the null of its own.
    let mut cli = tool("redis-cli").expect("checked above");
    cli.args(["-3", "-p", &k.port()]);
    let (ok, out, err) =
        run_with_stdin(cli, "HELLO 3\nHGETALL h\nGET nope\nCLIENT SETNAME tester\nCLIENT GETNAME\n");
    assert!(ok, "redis-cli -3 failed: {err}");
    assert!(out.contains("proto 3\n"), "HELLO 3 answers proto 3: {out}");
    assert!(out.ends_with("a 1\nb 2\n\nOK\ntester\n"), "redis-cli -3's session: {out:?}");

    // INFO's replication section names the mirror and says it is online.
    let mut cli = tool("redis-cli").expect("checked above");
    let info = cli.args(["-p", &k.port(), "INFO", "replication"]).output().expect("INFO");
    let info = String::from_utf8_lossy(&info.stdout);
    assert!(info.contains("role:master"), "{info}");
    assert!(info.contains(&format!("mirror:{}", k.c.mirror_addr())), "{info}");
    assert!(info.contains("mirror_state:online") && info.contains("mirror_mode:sync"), "{info}");
}

const PY: &str = r#"
import os, sys, redis
r = redis.Redis(host="127.0.0.1", port=int(os.environ["PORT"]), decode_responses=True)
assert r.ping()
assert r.set("a", "1") is True
assert r.get("a") == "1"
assert r.set("a", "2", nx=True) is None
assert r.set("a", "3", xx=True, get=True) == "1"
assert r.setnx("b", "x") is True and r.setnx("b", "y") is False
assert r.incr("c") == 1 and r.incrby("c", 9) == 10 and r.decr("c") == 9 and r.decrby("c", 4) == 5
assert r.append("b", "yz") == 3 and r.strlen("b") == 3
assert r.mset({"m1": "v1", "m2": "v2"}) is True
assert r.mget("m1", "nope", "m2") == ["v1", None, "v2"]
assert r.getset("m1", "w1") == "v1"
assert r.exists("m1", "m2", "nope") == 2
assert r.expire("m1", 100) is True and 0 < r.ttl("m1") <= 100 and r.persist("m1") is True and r.ttl("m1") == -1
assert r.pexpire("m2", 100000) is True and r.pttl("m2") > 0
assert r.hset("h", mapping={"f1": "1", "f2": "2"}) == 2
assert r.hget("h", "f1") == "1" and r.hgetall("h") == {"f1": "1", "f2": "2"}
assert r.hlen("h") == 2 and r.hexists("h", "f2") and r.hincrby("h", "f1", 5) == 6 and r.hdel("h", "f2") == 1
assert r.type("h") == "hash" and r.type("a") == "string" and r.type("nope") == "none"
assert r.rename("a", "a2") is True and r.get("a2") == "3"
assert sorted(r.scan_iter(match="m*", count=2)) == ["m1", "m2"]
assert sorted(r.keys("m*")) == ["m1", "m2"]
try:
    r.hget("a2", "x")
    sys.exit("HGET of a string did not fail")
except redis.ResponseError as e:
    assert str(e).startswith("WRONGTYPE"), e
# Pipelines: plain, then a transaction (MULTI/EXEC).
p = r.pipeline(transaction=False)
for i in range(100):
    p.set(f"p{i}", i)
p.get("p42")
out = p.execute()
assert out[:100] == [True] * 100 and out[100] == "42", out[-3:]
t = r.pipeline(transaction=True)
t.set("tx1", "a").incr("tx2").get("tx1")
assert t.execute() == [True, 1, "a"]
try:
    t = r.pipeline(transaction=True)
    t.set("tx3", "x").incr("tx3")
    t.execute()
    sys.exit("a failing command in a transaction did not raise")
except redis.ResponseError:
    pass
assert r.get("tx3") == "x"
assert r.dbsize() == 109
assert r.info("replication")["role"] == "master"
assert r.wait(1, 0) == 1
assert r.flushdb() is True and r.dbsize() == 0
print("ok")
"#;

#[test]
fn redis_py_basic_operations_pipelines_and_transactions() {
    let Some(mut py) = python_with_redis() else { return };
    let k = KvCluster::new("kv-py", 64 << 20);
    let out = py.args(["-c", PY]).env("PORT", k.port()).output().expect("run python3");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "redis-py: {stdout}{stderr}");
}

#[test]
fn redis_benchmark_runs_every_supported_command_without_errors() {
    let Some(mut bench) = tool("redis-benchmark") else { return };
    let k = KvCluster::new("kv-bench", 64 << 20);
    let port = k.port();
    let out = bench
        .args(["-p", &port, "-t", "ping,set,get,incr,hset,mset", "-n", "2000", "-c", "20", "-P", "4", "-q"])
        .args(["-d", "100", "-r", "500"])
        .output()
        .expect("run redis-benchmark");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-benchmark failed: {stdout}{stderr}");
    // Each test prints its final line after a carriage return.
    let finals: Vec<&str> =
        stdout.split(['\r', '\n']).filter(|l| l.contains("requests per second")).collect();
    for t in ["PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "HSET", "MSET"] {
        assert!(finals.iter().any(|l| l.trim_start().starts_with(t)), "no result for {t}: {stdout}");
    }
    assert!(
        !stdout.contains("ERR") && !stderr.contains("ERR") && !stderr.contains("Error"),
        "{stdout}{stderr}"
    );
    let mut c = k.client();
    let Value::Int(n) = c.cmd(&["DBSIZE"]) else { panic!("DBSIZE") };
    // key:__rand_int__ (500 of them), counter:__rand_int__, myhash, and MSET's key:__rand_int__.
    assert!(n > 400, "DBSIZE {n} after redis-benchmark");
    assert_eq!(bulk(&c.cmd(&["GET", "key:000000000001"])).map(|v| v.len()), Some(100));
}

/// Requests that break the protocol or a limit: each closes its own connection with an error,
/// after the replies to what came before; the server and the data are untouched.
#[test]
fn bad_requests_close_only_their_client_and_change_nothing() {
    let k = KvCluster::new("kv-bad", 64 << 20);
    let mut keeper = k.client();
    for i in 0..50 {
        assert_eq!(keeper.cmd(&["SET", &format!("k{i}"), &format!("v{i}")]), Value::Simple(b"OK".to_vec()));
    }
    let state = |c: &mut Resp| -> Vec<Value> {
        let mut v = vec![c.cmd(&["DBSIZE"])];
        for i in 0..50 {
            v.push(c.cmd(&["GET", &format!("k{i}")]));
        }
        v
    };
    let before = state(&mut keeper);
    let mut rng = Rng::new(common::seed("kv-bad"));
    let mut shapes: Vec<(String, Vec<u8>)> = vec![
        ("a multibulk count that is no number".into(), b"*abc\r\n".to_vec()),
        ("an argument that is no bulk string".into(), b"*2\r\n:1\r\n".to_vec()),
        ("a negative bulk length".into(), b"*1\r\n$-5\r\n".to_vec()),
        ("a bulk longer than max_bulk".into(), b"*2\r\n$3\r\nSET\r\n$99999999999\r\n".to_vec()),
        ("a bulk not followed by CR LF".into(), b"*1\r\n$3\r\nabcXY".to_vec()),
        ("more arguments than max_args".into(), b"*2000000\r\n".to_vec()),
        ("an inline command longer than max_inline".into(), vec![b'a'; 70 << 10]),
        ("a header line longer than max_inline".into(), [b"*".to_vec(), vec![b'1'; 70 << 10]].concat()),
        ("unbalanced quotes".into(), b"SET \"a b\r\n".to_vec()),
        ("a leading zero".into(), b"*01\r\n".to_vec()),
        ("a plus sign".into(), b"*1\r\n$+3\r\nGET\r\n".to_vec()),
    ];
    for n in 0..8 {
        let mut g = vec![b'*'];
        let len = rng.range(1, 64) as usize;
        g.extend(rng.bytes(len).iter().map(|b| if n % 2 == 0 { b % 16 + b'0' } else { *b }));
        g.extend_from_slice(b"\r\n$x\r\n");
        shapes.push((format!("garbage {n}"), g));
    }
    for (what, bytes) in &shapes {
        let mut c = k.client();
        // A good command first: its reply still comes, then the error, then the close.
        c.send(&[b"SET", b"k0", b"v0"]);
        if c.send_raw(bytes).is_err() {
            // The server closed already (it read the error before all was sent): fine.
        }
        let first = c.read();
        assert_eq!(first, Some(Value::Simple(b"OK".to_vec())), "{what}: the reply before the error");
        match c.read() {
            Some(Value::Error(e)) => {
                let e = String::from_utf8_lossy(&e).into_owned();
                assert!(e.starts_with("ERR Protocol error: "), "{what}: {e}");
            }
            other => panic!("{what}: expected a protocol error, got {other:?}"),
        }
        assert!(c.closed(), "{what}: the connection stays open");
        assert_eq!(state(&mut keeper), before, "{what}: the data changed");
    }
    // A request cut off by the client's close, and one that never ends: no effect either.
    for bytes in [&b"*3\r\n$3\r\nSET\r\n$2\r\nk1\r\n$5\r\nxy"[..], b"*1\r\n$1\r\n"] {
        let mut c = k.client();
        c.send_raw(bytes).expect("send");
        drop(c);
    }
    let mut c = k.client();
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$100\r\nonly a few bytes").expect("send");
    wait_for("the server to be serving others", || {
        (keeper.cmd(&["PING"]) == Value::Simple(b"PONG".to_vec())).then_some(())
    });
    assert_eq!(state(&mut keeper), before, "a cut request changed the data");
    let Value::Bulk(info) = keeper.cmd(&["INFO", "stats"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(info.contains(&format!("mojim_protocol_errors:{}", shapes.len())), "{info}");
}

#[test]
fn resp3_after_hello() {
    let k = KvCluster::new("kv-resp3", 16 << 20);
    let mut c = k.client();
    c.cmd(&["HSET", "h", "f", "v"]);
    let Value::Map(hello) = c.cmd(&["HELLO", "3"]) else { panic!("HELLO 3 answers a map") };
    assert!(hello.contains(&(Value::bulk("proto"), Value::Int(3))), "{hello:?}");
    assert_eq!(c.cmd(&["HGETALL", "h"]), Value::Map(vec![(Value::bulk("f"), Value::bulk("v"))]));
    assert_eq!(c.cmd(&["GET", "nope"]), Value::Null);
    let Value::Error(e) = c.cmd(&["HELLO", "4"]) else { panic!("HELLO 4 is refused") };
    assert!(e.starts_with(b"NOPROTO"));
    let Value::Array(a) = c.cmd(&["HELLO", "2"]) else { panic!("HELLO 2 answers an array") };
    assert_eq!(a.len(), 14);
}

/// A request whose every argument is within the limits but which is larger than a connection
/// buffers, and a transaction queueing more than a transaction may: refused, nothing changed.
#[test]
fn requests_and_transactions_larger_than_allowed_are_refused() {
    let k = KvCluster::with("kv-too-large", 16 << 20, |f| {
        edit_kv(f, |k| {
            k.max_bulk = "1KiB".into();
            k.max_inline = "1KiB".into();
        });
    });
    let mut c = k.client();
    let v = "v".repeat(1000);
    let mut args: Vec<&[u8]> = vec![b"MSET"];
    for _ in 0..100 {
        args.extend([&b"key"[..], v.as_bytes()]);
    }
    c.send(&args);
    match c.read() {
        Some(Value::Error(e)) => {
            let e = String::from_utf8_lossy(&e).into_owned();
            assert!(e.starts_with("ERR Protocol error: request larger than"), "{e}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert!(c.closed());
    let mut c = k.client();
    assert_eq!(c.cmd(&["EXISTS", "key"]), Value::Int(0));
    // A bulk past max_bulk is refused as it is announced.
    c.send(&[b"SET", b"k", &[b'x'; 1025]]);
    let Some(Value::Error(e)) = c.read() else { panic!("expected an error") };
    assert!(
        e.starts_with(b"ERR Protocol error: invalid bulk length (1025 bytes; at most 1024"),
        "{}",
        String::from_utf8_lossy(&e)
    );
}

fn stat(c: &mut Resp, name: &str) -> u64 {
    let Value::Bulk(info) = c.cmd(&["INFO", "stats"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name}: {info}"));
    line[name.len() + 1..].trim().parse().expect("a number")
}

/// Group commit: the writes pipelined by each of many clients share groups (one per turn), so
/// far fewer groups are sent than writes are acknowledged.
#[test]
fn pipelined_writes_from_many_clients_share_groups() {
    let k = KvCluster::new("kv-group-commit", 16 << 20);
    let mut probe = k.client();
    let groups_before = stat(&mut probe, "mojim_groups_sent");
    let threads: Vec<_> = (0..20)
        .map(|t| {
            let addr = k.addr();
            std::thread::spawn(move || {
                let mut c = Resp::connect(&addr);
                let mut req = Vec::new();
                for n in 0..50 {
                    let key = format!("c{t}:{n}");
                    mojim_kv::resp::encode_request(&[&b"SET"[..], key.as_bytes(), b"v"], &mut req);
                }
                c.send_raw(&req).expect("send 50 SETs at once");
                for _ in 0..50 {
                    assert_eq!(c.read(), Some(Value::Simple(b"OK".to_vec())));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client failed");
    }
    let groups = stat(&mut probe, "mojim_groups_sent") - groups_before;
    assert_eq!(probe.cmd(&["DBSIZE"]), Value::Int(1000));
    assert!(groups <= 100, "1000 pipelined writes took {groups} groups");
    println!("1000 writes from 20 pipelining clients: {groups} groups");
}

/// `INFO errorstats` counts error replies by their code, a script's own and those inside a
/// transaction included, and `CONFIG RESETSTAT` clears them with `total_error_replies`.
#[test]
fn error_replies_are_counted_by_code_until_resetstat() {
    let k = KvCluster::new("kv-errorstats", 16 << 20);
    let mut c = k.client();
    let errorstats = |c: &mut Resp| {
        let Value::Bulk(info) = c.cmd(&["INFO", "errorstats"]) else { panic!("INFO") };
        String::from_utf8_lossy(&info).into_owned()
    };
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), Value::Simple(b"OK".to_vec()));
    c.cmd(&["SET", "s", "x"]);
    assert!(matches!(c.cmd(&["LPUSH", "s", "x"]), Value::Error(_)));
    assert!(matches!(c.cmd(&["NOSUCHCOMMAND"]), Value::Error(_)));
    assert!(matches!(c.cmd(&["EVAL", "return redis.error_reply('MY_CODE custom')", "0"]), Value::Error(_)));
    assert!(matches!(c.cmd(&["EVAL", "return redis.error_reply('')", "0"]), Value::Error(_)));
    c.cmd(&["MULTI"]);
    c.cmd(&["INCR", "s"]);
    c.cmd(&["LPUSH", "s", "y"]);
    c.cmd(&["EXEC"]);
    let info = errorstats(&mut c);
    assert_eq!(
        info,
        "# Errorstats\r\nerrorstat_ERR:count=3\r\nerrorstat_MY_CODE:count=1\r\n\
         errorstat_WRONGTYPE:count=2\r\n\r\n",
        "after six error replies"
    );
    assert_eq!(stat(&mut c, "total_error_replies"), 6);
    c.cmd(&["CONFIG", "RESETSTAT"]);
    assert_eq!(errorstats(&mut c), "# Errorstats\r\n\r\n");
    assert_eq!(stat(&mut c, "total_error_replies"), 0);
}

/// Requests that arrive a few bytes at a time (each piece its own read on the server) are run
/// once whole, in order.
#[test]
fn requests_arriving_in_pieces_are_run_when_whole() {
    let k = KvCluster::new("kv-pieces", 16 << 20);
    let mut c = k.client();
    let value = "0123456789".repeat(10);
    let mut req = Vec::new();
    mojim_kv::resp::encode_request(&[&b"SET"[..], b"k", value.as_bytes()], &mut req);
    mojim_kv::resp::encode_request(&[&b"GET"[..], b"k"], &mut req);
    req.extend_from_slice(b"PING\r\n");
    for piece in req.chunks(7) {
        c.send_raw(piece).expect("send a piece");
        // Let the server read each piece on its own.
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(c.read(), Some(Value::Simple(b"OK".to_vec())));
    assert_eq!(c.read(), Some(Value::bulk(&value)));
    assert_eq!(c.read(), Some(Value::Simple(b"PONG".to_vec())));
}

/// CLIENT LIST and CLIENT INFO as redis-py parses them; CLIENT KILL closes another connection;
/// CLIENT PAUSE WRITE holds a write back until it ends, and lets reads through.
#[test]
fn client_list_kill_and_pause_across_connections() {
    let Some(mut py) = python_with_redis() else { return };
    let k = KvCluster::new("kv-client-cmds", 16 << 20);
    let script = format!(
        "import redis\n\
         r = redis.Redis(port={port}, decode_responses=True)\n\
         a = redis.Redis(port={port}, client_name='worker', decode_responses=True)\n\
         a.ping()\n\
         clients = r.client_list()\n\
         assert any(c['name'] == 'worker' for c in clients), clients\n\
         for c in clients:\n    assert c['user'] == 'default' and 'omem' in c and 'oll' in c and 'obl' in c, c\n\
         me = r.client_info()\n\
         assert me['id'] == r.client_id() and me['db'] == 0, me\n\
         print('ok')\n",
        port = k.port()
    );
    let out = py.args(["-c", &script]).output().expect("run python");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok"),
        "redis-py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut admin = k.client();
    let mut victim = k.client();
    let Value::Int(id) = victim.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id.to_string()]), Value::Int(1));
    assert!(victim.closed(), "the killed connection is closed");
    // A pause of writes: a SET waits, a GET does not; the SET runs when the pause ends. The
    // clock starts before the pause is asked for, so the pause ends no earlier than `PAUSE`
    // after it, and so does a write held to its end (started at the pause's reply, a reply
    // read late made a held write look short). The pause is long enough for the SET and the
    // GET to reach the server while it lasts on a loaded machine (700 ms was not certain to).
    const PAUSE: std::time::Duration = std::time::Duration::from_secs(2);
    let mut writer = k.client();
    let t0 = std::time::Instant::now();
    let ms = PAUSE.as_millis().to_string();
    assert_eq!(admin.cmd(&["CLIENT", "PAUSE", &ms, "WRITE"]), Value::Simple(b"OK".to_vec()));
    writer.send(&[b"SET", b"paused", b"1"]);
    assert_eq!(admin.cmd(&["GET", "paused"]), Value::Null, "reads go on; the write waits");
    assert_eq!(writer.read(), Some(Value::Simple(b"OK".to_vec())));
    // Less 100 ms: the server counts the pause in whole milliseconds of the wall clock.
    let waited = t0.elapsed();
    assert!(
        waited >= PAUSE - std::time::Duration::from_millis(100),
        "the write did not wait for the pause: {waited:?}"
    );
    assert_eq!(admin.cmd(&["GET", "paused"]), bulk_value("1"));
}

fn bulk_value(s: &str) -> Value {
    Value::Bulk(s.as_bytes().to_vec())
}
