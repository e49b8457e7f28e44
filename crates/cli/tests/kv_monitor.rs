//! `MONITOR` on a running `mojim kv`: a monitoring client gets each command the other clients
//! run, after it ran, as Redis writes it (`+<time> [<db> <address>] "CMD" "arg"`), in the order
//! they ran (a script's own commands as `lua`, before the script); admin commands are not
//! shown; a second monitor is fed as the first.

mod common;

use common::kv::{tool, KvCluster};
use mojim_kv::resp::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;

fn line(v: Value) -> String {
    match v {
        Value::Simple(s) => String::from_utf8(s).expect("utf-8"),
        other => panic!("not a monitor line: {other:?}"),
    }
}

/// The line without its time: `[<db> <address>] ...`.
fn rest(l: &str) -> &str {
    let (time, rest) = l.split_once(' ').unwrap_or_else(|| panic!("{l}"));
    let (s, us) = time.split_once('.').unwrap_or_else(|| panic!("{l}"));
    assert!(s.parse::<u64>().is_ok() && us.len() == 6 && us.parse::<u32>().is_ok(), "{l}");
    rest
}

#[test]
fn a_monitor_gets_every_command_the_others_run() {
    let k = KvCluster::new("kv-monitor", 16 << 20);
    let mut m = k.client();
    assert_eq!(m.cmd(&["MONITOR"]), Value::Simple(b"OK".to_vec()));
    let mut c = k.client();
    let me = c.stream.local_addr().expect("local address").to_string();
    assert_eq!(c.cmd(&["SET", "greeting", "hello \"world\""]), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.cmd(&["get", "greeting"]), Value::Bulk(b"hello \"world\"".to_vec()));
    // An admin command is not shown.
    c.cmd(&["CONFIG", "GET", "maxclients"]);
    c.cmd(&["SELECT", "3"]);
    c.cmd(&["RPUSH", "l", "a", "b"]);
    // A script's commands, as `lua`, before the script (each is shown once it ran).
    c.cmd(&["EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", "s"]);
    let want = [
        format!(r#"[0 {me}] "SET" "greeting" "hello \"world\"""#),
        format!(r#"[0 {me}] "get" "greeting""#),
        format!(r#"[3 {me}] "SELECT" "3""#),
        format!(r#"[3 {me}] "RPUSH" "l" "a" "b""#),
        r#"[3 lua] "SET" "s" "x""#.to_string(),
        format!(r#"[3 {me}] "EVAL" "return redis.call('SET', KEYS[1], 'x')" "1" "s""#),
    ];
    for w in &want {
        let l = line(m.read().expect("a monitor line"));
        assert_eq!(rest(&l), w);
    }
    // A second monitor is fed too, once the first is gone as while it was there.
    let mut m2 = k.client();
    assert_eq!(m2.cmd(&["MONITOR"]), Value::Simple(b"OK".to_vec()));
    drop(m);
    c.cmd(&["DEL", "l"]);
    assert_eq!(rest(&line(m2.read().expect("a monitor line"))), format!(r#"[3 {me}] "DEL" "l""#));
}

/// `redis-cli monitor`, the real tool, prints the commands another client runs.
#[test]
fn redis_cli_monitor_prints_the_commands() {
    let Some(mut cli) = tool("redis-cli") else { return };
    let k = KvCluster::new("kv-monitor-cli", 16 << 20);
    let mut child = cli
        .args(["-p", &k.port(), "monitor"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-cli monitor");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("its stdout");
    let reader = std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let next = || rx.recv_timeout(common::WAIT).expect("a line from redis-cli monitor");
    assert_eq!(next(), "OK");
    let mut c = k.client();
    let me = c.stream.local_addr().expect("local address").to_string();
    c.cmd(&["SET", "k", "two words"]);
    assert_eq!(rest(&next()), format!(r#"[0 {me}] "SET" "k" "two words""#));
    let _ = child.kill();
    let _ = child.wait();
    reader.join().expect("the reader thread");
}
