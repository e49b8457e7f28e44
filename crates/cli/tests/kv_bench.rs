//! `mojim bench --kv` and its parts against a real redis-server: the RESP client, the YCSB
//! load (every key it loaded is found, every key it inserted is removed), the command as a
//! user runs it (its JSON lines), its refusals of bad flags, its clean-up when it is killed,
//! and the mojim-sync target (a clear refusal while this mojim has no `kv` server).
//! The numbers are not checked: a debug build on a shared machine.

mod common;

use common::TempDir;
use mojim_tools::kv::client::RespClient;
use mojim_tools::kv::janitor::Janitor;
use mojim_tools::kv::load::{self, RunSpec};
use mojim_tools::kv::resp::Value;
use mojim_tools::kv::targets::{self, Env, Server, Target};
use mojim_tools::kv::ycsb::ALL_WORKLOADS;
use mojim_tools::kv::{delete_keys, find_program, key_name, load_records};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn redis_server() -> PathBuf {
    find_program(Path::new("redis-server"), "--redis-server", "redis-server")
        .unwrap_or_else(|e| panic!("these tests need redis-server (./scripts/test installs it): {e}"))
}

/// A redis-server started the way `mojim bench --kv` starts its targets.
fn start(target: Target, dir: &Path, janitor: &mut Janitor) -> Server {
    let bin = redis_server();
    let env = Env {
        redis_server: &bin,
        mojim: common::exe(),
        dir,
        disk_dir: dir,
        region_size: 1 << 20,
        kv_args: &[],
        busy_poll_us: 0,
        read_barrier: None,
    };
    targets::start(target, &env, "test", janitor).unwrap_or_else(|e| panic!("start {}: {e}", target.name()))
}

fn ok(v: Value) {
    assert_eq!(v, Value::Simple("OK".into()));
}

#[test]
fn the_resp_client_speaks_to_a_real_redis_server() {
    let dir = TempDir::new("kv-client");
    let mut janitor = Janitor::start();
    let server = start(Target::RedisNone, dir.path(), &mut janitor);
    let mut c = RespClient::connect(&server.addr, Duration::from_secs(10)).expect("connect");
    assert_eq!(c.command(&[b"PING"]).unwrap(), Value::Simple("PONG".into()));
    // Binary-safe values, CRLF inside included, and one spanning many reads.
    let odd = b"a\r\nb\0c$-1\r\n".to_vec();
    ok(c.command(&[b"SET", b"odd", &odd]).unwrap());
    assert_eq!(c.command(&[b"GET", b"odd"]).unwrap(), Value::Bulk(Some(odd.clone())));
    let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    ok(c.command(&[b"SET", b"big", &big]).unwrap());
    assert_eq!(c.command(&[b"GET", b"big"]).unwrap().as_bytes(), Some(&big[..]));
    assert_eq!(c.command(&[b"GET", b"absent"]).unwrap(), Value::Bulk(None));
    assert_eq!(c.command(&[b"INCRBY", b"n", b"-5"]).unwrap(), Value::Int(-5));
    assert_eq!(
        c.command(&[b"MGET", b"odd", b"absent", b"n"]).unwrap(),
        Value::Array(Some(vec![
            Value::Bulk(Some(odd)),
            Value::Bulk(None),
            Value::Bulk(Some(b"-5".to_vec()))
        ]))
    );
    // An error reply is a value, and the connection goes on.
    match c.command(&[b"NOSUCHCOMMAND"]).unwrap() {
        Value::Error(e) => assert!(e.starts_with("ERR unknown command"), "{e}"),
        other => panic!("expected an error reply, got {other}"),
    }
    match c.command(&[b"INCR", b"odd"]).unwrap() {
        Value::Error(e) => assert!(e.contains("not an integer"), "{e}"),
        other => panic!("expected an error reply, got {other}"),
    }
    // A pipeline of 1000 commands: one write, replies in order.
    for i in 0..1000u32 {
        c.queue(&[b"SET", format!("p{i}").as_bytes(), &i.to_le_bytes()]);
    }
    c.queue(&[b"DBSIZE"]);
    let replies = c.exec().expect("pipeline");
    assert_eq!(replies.len(), 1001);
    assert!(replies[..1000].iter().all(|r| *r == Value::Simple("OK".into())));
    assert_eq!(replies[1000], Value::Int(1000 + 3), "odd, big, n and p0..p999");
    // The server going away is an error naming it, not a hang.
    let mut other = RespClient::connect(&server.addr, Duration::from_secs(10)).expect("connect");
    assert_eq!(
        other.command(&[b"CLIENT", b"KILL", b"TYPE", b"normal", b"SKIPME", b"yes"]).unwrap(),
        Value::Int(1)
    );
    let e = c.command(&[b"PING"]).expect_err("the connection was killed");
    assert!(e.to_string().contains(&server.addr), "{e}");
    server.stop(&mut janitor);
}

#[test]
fn every_workload_finds_every_key_and_leaves_the_records_as_loaded() {
    let dir = TempDir::new("kv-load");
    let mut janitor = Janitor::start();
    let server = start(Target::RedisWait1, dir.path(), &mut janitor);
    let records = 300;
    load_records(&server.addr, records, 100, true).expect("load");
    let mut c = RespClient::connect(&server.addr, Duration::from_secs(10)).expect("connect");
    assert_eq!(c.command(&[b"DBSIZE"]).unwrap(), Value::Int(records as i64));
    let v = c.command(&[b"GET", key_name(records - 1).as_bytes()]).unwrap();
    assert_eq!(v.as_bytes().map(<[u8]>::len), Some(100), "{v}");
    for w in ALL_WORKLOADS {
        let spec = RunSpec {
            addr: server.addr.clone(),
            workload: w,
            size: 100,
            clients: 3,
            pipeline: 4,
            ops: 400,
            duration: None,
            records,
            wait_replica: true,
            seed: 7,
        };
        let o = load::run(&spec).unwrap_or_else(|e| panic!("{}: {e}", w.name()));
        assert_eq!(o.ops, 400, "{}", w.name());
        assert_eq!(o.hist.len(), 400, "{}: a latency per operation", w.name());
        assert_eq!(o.misses, 0, "{}: a read found no value", w.name());
        if w.inserts() {
            assert!(!o.inserted.is_empty() && o.inserted.start == records, "{}: {:?}", w.name(), o.inserted);
            let n = o.inserted.end as i64;
            assert_eq!(c.command(&[b"DBSIZE"]).unwrap(), Value::Int(n), "{}", w.name());
            delete_keys(&server.addr, o.inserted).expect("delete");
        } else {
            assert!(o.inserted.is_empty(), "{}", w.name());
        }
        assert_eq!(c.command(&[b"DBSIZE"]).unwrap(), Value::Int(records as i64), "{}", w.name());
    }
    // Every write was followed by WAIT 1 0: the replica has them all.
    let info = c.command(&[b"INFO", b"replication"]).unwrap();
    let info = String::from_utf8_lossy(info.as_bytes().expect("INFO is a bulk string")).into_owned();
    assert!(info.contains("connected_slaves:1"), "{info}");
    server.stop(&mut janitor);
}

#[test]
fn an_error_reply_fails_the_run_naming_the_command_and_the_error() {
    let dir = TempDir::new("kv-refused");
    let mut janitor = Janitor::start();
    let server = start(Target::RedisNone, dir.path(), &mut janitor);
    load_records(&server.addr, 50, 64, false).expect("load");
    let mut c = RespClient::connect(&server.addr, Duration::from_secs(10)).expect("connect");
    // Out of memory: reads go on, every write is refused.
    ok(c.command(&[b"CONFIG", b"SET", b"maxmemory", b"1"]).unwrap());
    let run = |w| {
        load::run(&RunSpec {
            addr: server.addr.clone(),
            workload: w,
            size: 64,
            clients: 2,
            pipeline: 3,
            ops: 100,
            duration: None,
            records: 50,
            wait_replica: false,
            seed: 1,
        })
    };
    assert_eq!(run(mojim_tools::kv::ycsb::Workload::YcsbC).expect("reads are served").misses, 0);
    let e = run(mojim_tools::kv::ycsb::Workload::Set).err().expect("writes are refused").to_string();
    assert!(e.contains(&server.addr) && e.contains("answered SET with -OOM"), "{e}");
    server.stop(&mut janitor);
}

/// Every entry of `dir` (there should be none left).
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read the test folder")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect()
}

#[test]
fn bench_kv_prints_a_json_line_per_run_with_every_key() {
    let dir = TempDir::new("kv-bench");
    let d = dir.path().to_str().expect("utf-8 path");
    let t0 = Instant::now();
    let out = Command::new(common::exe())
        .args(["bench", "--kv", "--targets", "redis-none,redis-wait1", "--ops", "200", "--json"])
        .args(["--records", "500", "--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mojim bench --kv failed ({}):\n{stderr}", out.status);
    println!("took {:.1} s", t0.elapsed().as_secs_f64());
    let rows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    for r in &rows {
        for k in
            ["tool", "target", "workload", "size", "clients", "pipeline", "ops_per_s", "p50_us", "p99_us"]
        {
            assert!(r.get(k).is_some(), "no {k} in {r}");
        }
        for k in ["ops_per_s", "p50_us", "p99_us"] {
            assert!(r[k].as_f64().is_some_and(|x| x > 0.0), "{k} in {r}");
        }
        if r["tool"] == "kv" {
            assert_eq!(r["ops"], 200, "{r}");
            assert_eq!(r["misses"], 0, "{r}");
        }
    }
    // The default cells: sizes 64 and 4096, clients 1 and 50, pipeline 1 and 16.
    let has = |tool: &str, target: &str, w: &str, size: u64, c: u64, p: u64| {
        rows.iter().any(|r| {
            r["tool"] == tool
                && r["target"] == target
                && r["workload"] == w
                && r["size"] == size
                && r["clients"] == c
                && r["pipeline"] == p
        })
    };
    // redis-benchmark's rate counts whole milliseconds: a run of 200 requests that takes less
    // has none, and its line is left out, saying so.
    let rb = |target: &str, w: &str, size: u64, c: u64, p: u64| {
        let said = format!(
            "redis-benchmark {target} {w} ({size} B, clients {c}, pipeline {p}): no round gave a rate"
        );
        assert!(
            has("redis-benchmark", target, w, size, c, p) || stderr.contains(&said),
            "no redis-benchmark {target} {w} {size} {c} {p}"
        );
    };
    for size in [64, 4096] {
        for c in [1, 50] {
            for p in [1, 16] {
                for target in ["redis-none", "redis-wait1"] {
                    for w in ALL_WORKLOADS {
                        assert!(
                            has("kv", target, w.name(), size, c, p),
                            "no kv {target} {} {size} {c} {p}",
                            w.name()
                        );
                    }
                    rb(target, "get", size, c, p);
                }
                rb("redis-none", "set", size, c, p);
                assert!(!has("redis-benchmark", "redis-wait1", "set", size, c, p), "SET without WAIT");
            }
        }
    }
    let left_out = stderr.matches("no round gave a rate").count();
    assert_eq!(rows.len() + left_out, 8 * (2 * 8 + 3), "{stdout}");
    assert!(stderr.contains("kv [152/152]"), "progress on stderr:\n{stderr}");
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

/// With `--password`, mojim kv and redis-server both require it, and every connection of the
/// load and of redis-benchmark authenticates (a connection that did not would be refused and
/// fail the run).
#[test]
fn bench_kv_with_a_password_authenticates_every_connection() {
    let dir = TempDir::new("kv-bench-password");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = Command::new(common::exe())
        .args(["bench", "--kv", "--targets", "mojim-sync,redis-wait1", "--password", "bench password"])
        .args(["--workloads", "set,get", "--sizes", "64", "--clients", "2", "--pipeline", "1,4"])
        .args(["--ops", "100", "--records", "100", "--json", "--region-size", "16MiB"])
        .args(["--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mojim bench --kv --password failed ({}):\n{stderr}", out.status);
    let rows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    for target in ["mojim-sync", "redis-wait1"] {
        assert!(rows.iter().any(|r| r["tool"] == "kv" && r["target"] == target), "no kv {target}: {stdout}");
    }
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

#[test]
fn bench_kv_prints_a_table_of_median_rounds_with_ratios_against_redis() {
    let dir = TempDir::new("kv-table");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = Command::new(common::exe())
        .args(["bench", "--kv", "--targets", "redis-none,redis-aof-always", "--ops", "50", "--records", "50"])
        .args(["--workloads", "set,ycsb-f", "--sizes", "64", "--clients", "2", "--pipeline", "1"])
        .args(["--repeat", "2", "--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Two rounds of each run, interleaved; one line per run in the table (the median round).
    assert!(stderr.contains("(kv, round 2/2)") && stderr.contains("[12/12]"), "{stderr}");
    let header = stdout.lines().next().expect("a header");
    for col in ["target", "ops/s", "p50_us", "p99_us", "ops÷none", "ops÷aof", "p50÷none", "p50÷aof"] {
        assert!(header.contains(col), "no {col} in {header}");
    }
    assert!(!header.contains("wait1"), "a column for a target not run: {header}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.contains("redis-")).collect();
    // kv set, kv ycsb-f and redis-benchmark set (it runs the workloads asked for that it
    // knows), each for both targets.
    assert_eq!(lines.len(), 6, "{stdout}");
    for l in &lines {
        let cols: Vec<&str> = l.split_whitespace().collect();
        // A target against itself is 1.
        let own = if l.contains("redis-none") {
            [cols[cols.len() - 4], cols[cols.len() - 2]]
        } else {
            [cols[cols.len() - 3], cols[cols.len() - 1]]
        };
        assert_eq!(own, ["1.00", "1.00"], "{l}");
    }
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

#[test]
fn bad_flags_are_refused_naming_the_value_before_anything_starts() {
    let dir = TempDir::new("kv-flags");
    let d = dir.path().to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 11] = [
        (&["--targets", "redis-none,redis-fast"], "'redis-fast'"),
        (&["--workloads", "ycsb-a,ycsb-g"], "'ycsb-g'"),
        (&["--sizes", "64,0"], "'0'"),
        (&["--sizes", "4k2"], "'4k2'"),
        (&["--sizes", "128MiB"], "'128MiB'"),
        (&["--clients", "1,0"], "'0'"),
        (&["--pipeline", "2000"], "'2000'"),
        (&["--records", "0"], "'0'"),
        (&["--tools", "ycsb"], "'ycsb'"),
        (&["--ops", "0"], "--ops 0"),
        (&["--repeat", "0"], "--repeat 0"),
    ];
    for (args, named) in cases {
        let out = Command::new(common::exe())
            .args(["bench", "--kv", "--targets", "redis-none", "--dir", d, "--disk-dir", d])
            .args(args)
            .output()
            .expect("run mojim");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(named), "{args:?}: the error does not name {named}:\n{stderr}");
        assert!(!stderr.contains("kv: starting"), "{args:?} started a server:\n{stderr}");
    }
    let out = Command::new(common::exe())
        .args([
            "bench",
            "--kv",
            "--targets",
            "redis-none",
            "--redis-server",
            "/nonexistent/redis-server",
            "--dir",
            d,
        ])
        .output()
        .expect("run mojim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("/nonexistent/redis-server") && stderr.contains("apt-get install redis-server"),
        "{stderr}"
    );
    // The options of --kv without --kv.
    let out =
        Command::new(common::exe()).args(["bench", "--workloads", "ycsb-a"]).output().expect("run mojim");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kv"));
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

#[test]
fn mojim_sync_runs_mojim_kv_with_a_mirror_and_measures_every_workload() {
    let dir = TempDir::new("kv-mojim");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = Command::new(common::exe())
        .args(["bench", "--kv", "--targets", "mojim-sync,redis-none", "--ops", "100", "--records", "100"])
        .args(["--sizes", "64", "--clients", "2", "--pipeline", "2", "--json", "--region-size", "64MiB"])
        .args(["--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for w in ALL_WORKLOADS.iter().map(|w| w.name()) {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("\"target\":\"mojim-sync\"")
                    && l.contains(&format!("\"workload\":\"{w}\""))),
            "no mojim-sync {w} line:\n{stdout}"
        );
    }
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}

#[test]
fn a_killed_bench_leaves_no_server_and_no_folder_behind() {
    let dir = TempDir::new("kv-killed");
    let d = dir.path().to_str().expect("utf-8 path");
    let mut bench = Command::new(common::exe())
        .args(["bench", "--kv", "--targets", "redis-none,redis-aof-always,redis-wait1", "--ops", "100000000"])
        .args(["--workloads", "set", "--sizes", "64", "--clients", "1", "--pipeline", "1", "--tools", "kv"])
        .args(["--records", "10", "--dir", d, "--disk-dir", d])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mojim bench");
    // Read until the servers are up and the first run has begun.
    let mut err = std::io::BufReader::new(bench.stderr.take().expect("piped"));
    let mut addrs = Vec::new();
    let mut line = String::new();
    while addrs.len() < 3 {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut err, &mut line).expect("read stderr") > 0,
            "bench ended early"
        );
        if let Some(a) = line.trim().rsplit_once(" serves on ").map(|x| x.1.to_string()) {
            addrs.push(a);
        }
    }
    assert!(!leftovers(dir.path()).is_empty(), "the servers' folders exist while it runs");
    // SIGTERM to the benchmark alone: its children get nothing from this (unlike a Ctrl-C at a
    // terminal, which reaches the whole process group), so only the janitor can stop them.
    let pid = rustix::process::Pid::from_raw(bench.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("signal the benchmark");
    let status = bench.wait().expect("wait for the benchmark");
    assert!(!status.success());
    let t0 = Instant::now();
    loop {
        let live: Vec<&String> =
            addrs.iter().filter(|a| std::net::TcpStream::connect(a.as_str()).is_ok()).collect();
        let left = leftovers(dir.path());
        if live.is_empty() && left.is_empty() {
            break;
        }
        assert!(t0.elapsed() < common::WAIT, "still serving: {live:?}; left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn redis_benchmark_alone_covers_set_and_get() {
    let dir = TempDir::new("kv-rb");
    let d = dir.path().to_str().expect("utf-8 path");
    let out = Command::new(common::exe())
        .args([
            "bench",
            "--kv",
            "--targets",
            "redis-aof-always",
            "--tools",
            "redis-benchmark",
            "--ops",
            "100",
        ])
        .args(["--records", "20", "--sizes", "4096", "--clients", "2", "--pipeline", "4", "--json"])
        .args(["--dir", d, "--disk-dir", d])
        .output()
        .expect("run mojim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    let workloads: Vec<&str> = rows.iter().map(|r| r["workload"].as_str().expect("a string")).collect();
    assert_eq!(workloads, ["set", "get"], "{stdout}");
    assert!(rows.iter().all(|r| r["tool"] == "redis-benchmark" && r["size"] == 4096 && r["pipeline"] == 4));
    assert!(leftovers(dir.path()).is_empty(), "left behind: {:?}", leftovers(dir.path()));
}
