//! `mojim kv`'s metrics listener (`[kv] metrics_listen`): under a redis-py workload its
//! counters rise by exactly the commands sent, its keys per database are DBSIZE's, `promtool
//! check metrics` accepts the page and a real Prometheus server scrapes it; `/readyz` follows
//! the mirror; hostile HTTP clients (a slow one, a 100 KiB header, 500 connections) do not
//! stall the Redis clients; an address it cannot have stops `mojim kv` at start, naming it.

mod common;

use common::edit_kv;
use common::exe;
use common::kv::{python_with_redis, wait_for, KvCluster, Resp};
use common::scrape::{get, metrics, outlasts_hostile_clients, promtool_accepts, sample, Prometheus};
use mojim_kv::resp::Value;
use std::process::{Command, Stdio};

/// A cluster whose `mojim kv` has a metrics listener on any free port, and its address.
fn cluster(test: &str) -> (KvCluster, String) {
    let k = KvCluster::with(test, 16 << 20, |f| edit_kv(f, |k| k.metrics_listen = "127.0.0.1:0".into()));
    let kv = k.kv.as_ref().expect("mojim kv runs");
    let addr = kv.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", kv.printed()));
    let addr = addr.to_string();
    (k, addr)
}

/// [`sample`], 0 where the page has none (a command not called yet has no row).
fn count(page: &str, name: &str) -> f64 {
    sample(page, name).unwrap_or(0.0)
}

/// Runs `script` in a python3 with redis-py, `ADDR` set to host:port; its stdout.
fn redis_py(addr: &str, script: &str) -> Option<String> {
    let mut py = python_with_redis()?;
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let out =
        py.args(["-c", script]).env("KV_HOST", host).env("KV_PORT", port).output().expect("run python3");
    assert!(
        out.status.success(),
        "the redis-py workload failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).expect("utf-8"))
}

/// 40 SETs in database 0, 7 in database 3, one more, 3 INCRs (INCRBY 1) that fail (not an integer), 2
/// GETs refused (no key), 2 AUTHs with a wrong password; prints DBSIZE of 0 and of 3.
const WORKLOAD: &str = r#"
import os, redis
host, port = os.environ["KV_HOST"], int(os.environ["KV_PORT"])
r0 = redis.Redis(host=host, port=port, db=0)
r3 = redis.Redis(host=host, port=port, db=3)
for i in range(40):
    assert r0.set("metrics:%d" % i, "v%d" % i)
for i in range(7):
    assert r3.set("three:%d" % i, "x", ex=3600)
assert r0.set("s", "not a number")
for _ in range(3):
    try:
        r0.incr("s")
        raise SystemExit("INCR of a string succeeded")
    except redis.ResponseError:
        pass
for _ in range(2):
    try:
        r0.execute_command("GET")
        raise SystemExit("GET without a key succeeded")
    except redis.ResponseError:
        pass
for _ in range(2):
    try:
        r0.execute_command("AUTH", "nosuchuser", "wrong")
        raise SystemExit("AUTH with a wrong password succeeded")
    except redis.exceptions.AuthenticationError:
        pass
    except redis.ResponseError:
        pass
print(r0.dbsize(), r3.dbsize())
"#;

#[test]
fn counters_rise_by_the_commands_sent_and_promtool_accepts_them() {
    let (k, addr) = cluster("kv_metrics_counters");
    let before = metrics(&addr);
    assert_eq!(sample(&before, "mojim_kv_snapshot_fresh"), Some(1.0), "{before}");
    let Some(out) = redis_py(&k.addr(), WORKLOAD) else { return };
    let page = metrics(&addr);
    let rise = |name: &str| count(&page, name) - count(&before, name);
    assert_eq!(rise("mojim_kv_commands_total{cmd=\"set\"}"), 48.0, "{page}");
    assert_eq!(rise("mojim_kv_command_errors_total{cmd=\"set\"}"), 0.0);
    // redis-py's incr() sends INCRBY.
    assert_eq!(rise("mojim_kv_commands_total{cmd=\"incrby\"}"), 3.0, "failed calls ran");
    assert_eq!(rise("mojim_kv_command_errors_total{cmd=\"incrby\"}"), 3.0);
    assert_eq!(rise("mojim_kv_commands_total{cmd=\"get\"}"), 0.0, "refused calls did not run");
    assert_eq!(rise("mojim_kv_command_errors_total{cmd=\"get\"}"), 2.0);
    assert_eq!(rise("mojim_kv_auth_failures_total"), 2.0, "{page}");
    assert!(count(&page, "mojim_kv_command_duration_seconds_total{cmd=\"set\"}") > 0.0);
    // The latency histogram counts the calls that ran, each below one of its bounds.
    let sets = count(&page, "mojim_kv_commands_total{cmd=\"set\"}");
    assert_eq!(sample(&page, "mojim_kv_command_duration_seconds_count{cmd=\"set\"}"), Some(sets));
    assert_eq!(
        sample(&page, "mojim_kv_command_duration_seconds_bucket{cmd=\"set\",le=\"+Inf\"}"),
        Some(sets)
    );
    let buckets: Vec<f64> = page
        .lines()
        .filter(|l| l.starts_with("mojim_kv_command_duration_seconds_bucket{cmd=\"set\","))
        .map(|l| l.rsplit(' ').next().expect("a value").parse().expect("a number"))
        .collect();
    assert_eq!(buckets.len(), 25, "24 bounds and +Inf");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "cumulative: {buckets:?}");
    // Keys per database are DBSIZE's.
    let sizes: Vec<f64> = out.split_whitespace().map(|x| x.parse().expect("DBSIZE")).collect();
    assert_eq!(sizes, [41.0, 7.0], "{out}");
    assert_eq!(sample(&page, "mojim_kv_keys{db=\"0\"}"), Some(sizes[0]));
    assert_eq!(sample(&page, "mojim_kv_keys{db=\"3\"}"), Some(sizes[1]));
    assert_eq!(sample(&page, "mojim_kv_expiring_keys{db=\"3\"}"), Some(7.0));
    assert_eq!(sample(&page, "mojim_kv_keys{db=\"15\"}"), Some(0.0), "every database has its series");
    // Each write turn is one group; the group histogram counts each.
    let groups = count(&page, "mojim_kv_groups_sent_total");
    assert!(groups >= 48.0 / 2.0, "{groups} groups for 48 SETs from two clients in turn");
    assert_eq!(sample(&page, "mojim_kv_group_commands_count"), Some(groups));
    assert!(count(&page, "mojim_kv_group_commands_sum") >= 48.0);
    assert!(count(&page, "mojim_kv_region_used_bytes") > 0.0);
    assert!(count(&page, "mojim_kv_region_free_bytes") > 0.0);
    assert_eq!(
        count(&page, "mojim_kv_region_used_bytes") + count(&page, "mojim_kv_region_free_bytes"),
        count(&page, "mojim_kv_region_heap_bytes")
    );
    assert!(count(&page, "mojim_kv_connections_received_total") >= 2.0);
    assert_eq!(sample(&page, "mojim_kv_connections_rejected_total"), Some(0.0));
    assert_eq!(sample(&page, "mojim_kv_role{role=\"master\"}"), Some(1.0));
    let mirror = k.c.mirror_addr();
    let state = |s: &str| format!("mojim_kv_mirror_state{{state=\"{s}\",mirror=\"{mirror}\",mode=\"sync\"}}");
    assert_eq!(sample(&page, &state("online")), Some(1.0), "{page}");
    assert_eq!(sample(&page, &state("lost")), Some(0.0));
    assert!(count(&page, "mojim_kv_mirror_acked_sequence") >= groups);
    assert_eq!(sample(&page, "mojim_kv_serving"), Some(1.0));
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("mojim_kv_"), "{line}");
    }
    promtool_accepts(&page);

    // A connected client and one blocked: the gauges say so.
    let mut blocked = k.client();
    blocked.send(&[b"BLPOP", b"nothing", b"0"]);
    let page = wait_for("the blocked client in the metrics", || {
        let p = metrics(&addr);
        (count(&p, "mojim_kv_blocked_clients") == 1.0).then_some(p)
    });
    assert!(count(&page, "mojim_kv_connected_clients") >= 1.0);
    let mut c = k.client();
    assert_eq!(c.cmd(&["LPUSH", "nothing", "x"]), Value::Int(1));
    assert!(matches!(blocked.read(), Some(Value::Array(_))));

    assert!(get(&addr, "/healthz").ends_with("\r\n\r\nok\n"));
    assert!(get(&addr, "/readyz").ends_with("\r\n\r\nready\n"));
    assert!(get(&addr, "/").starts_with("HTTP/1.1 404 "));
}

#[test]
fn readyz_answers_503_naming_the_lost_mirror_and_ready_once_it_is_back() {
    let (mut k, addr) = cluster("kv_metrics_readyz");
    assert!(get(&addr, "/readyz").ends_with("\r\n\r\nready\n"));
    let mirror = k.c.mirror_addr();
    k.c.kill_mirror();
    let r = wait_for("/readyz to answer 503", || {
        let r = get(&addr, "/readyz");
        r.starts_with("HTTP/1.1 503 ").then_some(r)
    });
    assert!(r.contains(&format!("mirror {mirror} lost")), "{r}");
    let page = metrics(&addr);
    assert_eq!(sample(&page, "mojim_kv_serving"), Some(0.0), "{page}");
    let lost = format!("mojim_kv_mirror_state{{state=\"lost\",mirror=\"{mirror}\",mode=\"sync\"}}");
    assert_eq!(sample(&page, &lost), Some(1.0), "{page}");
    assert!(get(&addr, "/healthz").ends_with("\r\n\r\nok\n"), "alive while the mirror is away");
    k.c.start_mirror_with(&["--listen", &mirror]);
    wait_for("/readyz to answer ready again", || {
        get(&addr, "/readyz").ends_with("\r\n\r\nready\n").then_some(())
    });
}

#[test]
fn hostile_metrics_clients_do_not_stall_the_redis_clients() {
    let (k, addr) = cluster("kv_metrics_hostile");
    let mut c = k.client();
    let mut n = 0u64;
    let mut answers = |what: &str| {
        for _ in 0..20 {
            n += 1;
            let key = format!("k{n}");
            assert_eq!(c.cmd(&["SET", &key, "v"]), Value::Simple(b"OK".to_vec()), "SET {what}");
        }
    };
    let mut redis_py_answered = false;
    let page = outlasts_hostile_clients(&addr, |what| {
        answers(what);
        let mut other = Resp::connect(&k.addr());
        assert_eq!(
            other.cmd(&["PING"]),
            Value::Simple(b"PONG".to_vec()),
            "a new Redis client is served {what}"
        );
        if what.starts_with("while 500") {
            let py = "import os, redis\nr = redis.Redis(host=os.environ['KV_HOST'], port=int(os.environ['KV_PORT']))\n\
                      assert r.set('py', 'v') and r.get('py') == b'v'\nprint('ok')\n";
            if let Some(out) = redis_py(&k.addr(), py) {
                assert_eq!(out, "ok\n", "redis-py is answered {what}");
                redis_py_answered = true;
            }
        }
    });
    let sets = 80 + u64::from(redis_py_answered);
    assert!(page.contains(&format!("mojim_kv_commands_total{{cmd=\"set\"}} {sets}\n")), "{page}");
}

#[test]
fn a_busy_script_gets_the_last_counters_and_a_fresh_readyz() {
    let (k, addr) = cluster("kv_metrics_busy");
    let mut c = k.client();
    assert_eq!(c.cmd(&["CONFIG", "SET", "lua-time-limit", "50"]), Value::Simple(b"OK".to_vec()));
    assert_eq!(c.cmd(&["SET", "a", "1"]), Value::Simple(b"OK".to_vec()));
    let before = metrics(&addr);
    assert_eq!(sample(&before, "mojim_kv_snapshot_fresh"), Some(1.0));
    let mut runner = k.client();
    runner.send(&[b"EVAL", b"local f = function() while true do end end while true do pcall(f) end", b"0"]);
    wait_for("the script to be busy", || match c.cmd(&["PING"]) {
        Value::Error(e) if e.starts_with(b"BUSY") => Some(()),
        _ => None,
    });
    // The command thread runs the script: the page is the last copy, said to be so; the mirror's
    // state and /readyz are read from the primary now.
    let page = metrics(&addr);
    assert_eq!(sample(&page, "mojim_kv_snapshot_fresh"), Some(0.0), "{page}");
    assert_eq!(sample(&page, "mojim_kv_commands_total{cmd=\"set\"}"), Some(1.0));
    assert_eq!(sample(&page, "mojim_kv_serving"), Some(1.0));
    assert!(get(&addr, "/readyz").ends_with("\r\n\r\nready\n"));
    assert_eq!(c.cmd(&["SCRIPT", "KILL"]), Value::Simple(b"OK".to_vec()));
    assert!(matches!(runner.read(), Some(Value::Error(_))));
    let page = metrics(&addr);
    assert_eq!(sample(&page, "mojim_kv_snapshot_fresh"), Some(1.0), "{page}");
    assert_eq!(sample(&page, "mojim_kv_commands_total{cmd=\"eval\"}"), Some(1.0), "{page}");
}

#[test]
fn an_address_the_listener_cannot_have_stops_mojim_kv_at_start_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken = taken.local_addr().expect("addr").to_string();
    let k = KvCluster::with("kv_metrics_bad_address", 16 << 20, |_| {});
    let kv = |extra: &[&str]| {
        let cfg = k.c.cfg_path.to_str().expect("utf-8");
        let mut args = vec!["kv", "--config", cfg, "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let out = Command::new(exe()).args(&args).stdin(Stdio::null()).output().expect("run mojim kv");
        assert!(!out.status.success(), "mojim kv {extra:?} started");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("serving on"));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = kv(&["--metrics-listen", &taken]);
    for needle in
        [taken.as_str(), "[kv] metrics_listen or --metrics-listen", "cannot open the metrics listener"]
    {
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
    let e = kv(&["--metrics-listen", "127.0.0.1"]);
    for needle in ["--metrics-listen = \"127.0.0.1\"", "not a host:port", "127.0.0.1:9420"] {
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
    // The running server was not disturbed.
    assert_eq!(k.client().cmd(&["PING"]), Value::Simple(b"PONG".to_vec()));
}

#[test]
fn a_prometheus_server_scrapes_mojim_kv() {
    let (k, addr) = cluster("kv_metrics_prometheus");
    let Some(prometheus) = Prometheus::scraping("kv_metrics_prometheus_server", "mojim_kv", &[&addr]) else {
        return;
    };
    let mut c = k.client();
    for i in 0..30 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Value::Simple(b"OK".to_vec()));
    }
    let query = "mojim_kv_commands_total%7Bcmd%3D%22set%22%7D";
    let v = prometheus.wait_value(query, "mojim_kv_commands_total of 30 SETs", |v| {
        assert!(v <= 30.0, "Prometheus shows {v} SETs of 30");
        v == 30.0
    });
    assert_eq!(v, 30.0);
    // The histogram, as Prometheus computes from it.
    let a = prometheus
        .query("histogram_quantile(0.5%2Cmojim_kv_command_duration_seconds_bucket%7Bcmd%3D%22set%22%7D)")
        .expect("Prometheus answers");
    assert!(a.contains("\"status\":\"success\"") && a.contains("\"value\":["), "{a}");
}
