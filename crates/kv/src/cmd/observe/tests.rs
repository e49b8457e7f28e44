//! INFO's per command sections, CONFIG RESETSTAT, SLOWLOG, LATENCY and MONITOR against a store
//! in the heap, with one set of records kept across the commands as the server keeps it.

use super::*;
use crate::cmd::{client, Auth, Host, Replication, Sentinel, Session, Stats};
use crate::resp::Value;
use crate::store::VecMem;

#[derive(Default)]
struct TestHost {
    /// Clients may connect only over TLS.
    tls_only: bool,
    scripts: std::cell::RefCell<crate::cmd::Scripts>,
}

impl Host for TestHost {
    fn replication(&self) -> Replication {
        Replication { mode: "sync".into(), state: "online".into(), durable_replicas: 1, ..Default::default() }
    }
    fn connected_clients(&self) -> usize {
        1
    }
    fn listen_addr(&self) -> String {
        if self.tls_only { "127.0.0.1:6380" } else { "127.0.0.1:6379" }.into()
    }
    fn plaintext(&self) -> bool {
        !self.tls_only
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn sentinel(&self) -> Sentinel {
        Sentinel::default()
    }
    fn authenticate(&self, _client: &str, _user: &[u8], _password: &[u8]) -> Auth {
        Auth::NoPassword
    }
    fn fixed_setting(&self, name: &str) -> String {
        if name == "maxclients" { "10000" } else { "" }.into()
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
    fn scripts(&self) -> Option<&std::cell::RefCell<crate::cmd::Scripts>> {
        Some(&self.scripts)
    }
}

type Harness = crate::cmd::family_harness::Harness<VecMem, TestHost>;

/// A store in the heap whose client is 10.1.2.3:4567, at a wall clock of 2023.
fn harness() -> Harness {
    let mut h = Harness::with_host(VecMem::new(4 << 20), TestHost::default()).unwrap();
    h.session = Session::new(7, "10.1.2.3:4567".into(), true);
    h.now_ms = 1_700_000_000_000;
    h
}

/// What these tests read of INFO.
trait Info {
    fn text(&mut self, args: &[&str]) -> String;
    /// The value of `field` in INFO's `section`.
    fn info_field(&mut self, section: &str, field: &str) -> Option<String>;
}

impl Info for Harness {
    fn text(&mut self, args: &[&str]) -> String {
        match self.cmd(args) {
            Value::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("{args:?}: not a bulk string: {other:?}"),
        }
    }

    fn info_field(&mut self, section: &str, field: &str) -> Option<String> {
        let t = self.text(&["INFO", section]);
        t.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn items(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

fn is_error(v: &Value, prefix: &str) -> bool {
    matches!(v, Value::Error(e) if e.starts_with(prefix.as_bytes()))
}

/// `calls`, `rejected_calls` and `failed_calls` of a `cmdstat_` line.
fn counts(line: &str) -> (u64, u64, u64) {
    let field = |k: &str| -> u64 {
        line.split([':', ',']).find_map(|f| f.strip_prefix(&format!("{k}="))).unwrap().parse().unwrap()
    };
    (field("calls"), field("rejected_calls"), field("failed_calls"))
}

#[test]
fn commandstats_count_calls_failures_and_refusals_by_command_and_subcommand() {
    let mut h = harness();
    h.cmd(&["SET", "k", "v"]);
    h.cmd(&["SET", "k", "w"]);
    assert!(is_error(&h.cmd(&["INCR", "k"]), "ERR"));
    // Wrong arity: refused before it runs.
    assert!(is_error(&h.cmd(&["GET"]), "ERR wrong number"));
    h.cmd(&["CLIENT", "ID"]);
    h.cmd(&["MULTI"]);
    h.cmd(&["SET", "k", "x"]);
    h.cmd(&["EXEC"]);
    let t = h.text(&["INFO", "commandstats"]);
    assert!(t.starts_with("# Commandstats\r\n"), "{t}");
    let line = |name: &str| {
        t.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("{name}: {t}"))
    };
    assert_eq!(counts(line("set")), (3, 0, 0), "two alone and one in the transaction");
    assert_eq!(counts(line("incr")), (1, 0, 1));
    assert_eq!(counts(line("get")), (0, 1, 0));
    assert_eq!(counts(line("client|id")), (1, 0, 0));
    assert_eq!(counts(line("exec")), (1, 0, 0));
    assert!(line("set").contains(",usec=") && line("set").contains(",usec_per_call="), "{t}");
    // Commands not called are not listed, and the default INFO leaves the section out.
    assert!(!t.contains("cmdstat_hset"), "{t}");
    let default = h.text(&["INFO"]);
    assert!(!default.contains("# Commandstats") && !default.contains("# Latencystats"), "{default}");
    for s in [
        "# Server",
        "# Clients",
        "# Memory",
        "# Stats",
        "# Replication",
        "# CPU",
        "# Errorstats",
        "# Keyspace",
    ] {
        assert!(default.contains(s), "{s} missing: {default}");
    }
    let all = h.text(&["INFO", "all"]);
    assert!(all.contains("# Commandstats\r\ncmdstat_") && all.contains("# Latencystats\r\n"), "{all}");
}

#[test]
fn latencystats_give_percentiles_of_the_commands_called() {
    let mut h = harness();
    for _ in 0..10 {
        h.cmd(&["SET", "k", "v"]);
    }
    let t = h.text(&["INFO", "latencystats"]);
    let line =
        t.lines().find(|l| l.starts_with("latency_percentiles_usec_set:")).unwrap_or_else(|| panic!("{t}"));
    let values: Vec<f64> = line
        .split_once(':')
        .unwrap()
        .1
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            assert!(["p50", "p99", "p99.9"].contains(&k), "{line}");
            v.parse().unwrap()
        })
        .collect();
    assert_eq!(values.len(), 3);
    assert!(values[0] <= values[1] && values[1] <= values[2], "{line}");
}

#[test]
fn latency_histogram_gives_each_command_its_calls_and_cumulative_buckets() {
    let mut h = harness();
    for _ in 0..5 {
        h.cmd(&["SET", "k", "v"]);
    }
    h.cmd(&["CLIENT", "ID"]);
    let v = items(h.cmd(&["LATENCY", "HISTOGRAM", "set", "client", "nosuch"]));
    // A RESP2 map: name, details; client's is its subcommand's.
    assert_eq!(v.len(), 4, "{v:?}");
    assert_eq!(v[0], Value::bulk("set"));
    assert_eq!(v[2], Value::bulk("client|id"));
    let d = items(v[1].clone());
    assert_eq!((&d[0], int(&d[1]), &d[2]), (&Value::bulk("calls"), 5, &Value::bulk("histogram_usec")));
    let buckets: Vec<i64> = items(d[3].clone()).iter().map(int).collect();
    assert!(!buckets.is_empty() && buckets.len().is_multiple_of(2), "{buckets:?}");
    // Bounds grow by powers of two; counts grow and end at every call.
    for w in buckets.chunks(2).collect::<Vec<_>>().windows(2) {
        assert!(w[0][0] < w[1][0] && w[0][1] < w[1][1], "{buckets:?}");
    }
    assert_eq!(*buckets.last().unwrap(), 5);
    // Without names: every command called (these two, and LATENCY itself once it was).
    let all = items(h.cmd(&["LATENCY", "HISTOGRAM"]));
    let names: Vec<&Value> = all.iter().step_by(2).collect();
    assert_eq!(
        names,
        vec![&Value::bulk("client|id"), &Value::bulk("latency|histogram"), &Value::bulk("set")]
    );
}

#[test]
fn config_resetstat_forgets_commandstats_errorstats_and_histograms() {
    let mut h = harness();
    h.cmd(&["SET", "k", "v"]);
    assert!(is_error(&h.cmd(&["INCR", "k"]), "ERR"));
    assert!(h.text(&["INFO", "errorstats"]).contains("errorstat_ERR:count=1"));
    assert_eq!(h.cmd(&["CONFIG", "RESETSTAT"]), Value::Simple(b"OK".to_vec()));
    let t = h.text(&["INFO", "commandstats", "errorstats", "latencystats"]);
    assert!(!t.contains("cmdstat_set") && !t.contains("cmdstat_incr"), "{t}");
    assert!(!t.contains("errorstat_ERR") && !t.contains("latency_percentiles_usec_set"), "{t}");
    // The reset itself is counted, as Redis counts it.
    assert!(t.contains("cmdstat_config|resetstat:calls=1,"), "{t}");
    assert_eq!(items(h.cmd(&["LATENCY", "HISTOGRAM", "set"])), vec![]);
}

#[test]
fn slowlog_logs_what_passes_its_threshold_newest_first_within_its_length() {
    let mut h = harness();
    // The default threshold (10 ms) is far above these commands.
    h.cmd(&["SET", "k", "v"]);
    assert_eq!(int(&h.cmd(&["SLOWLOG", "LEN"])), 0);
    h.cmd(&["CLIENT", "SETNAME", "tool"]);
    h.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0", "slowlog-max-len", "3"]);
    let long = "x".repeat(200);
    h.cmd(&["SET", "k", &long]);
    h.cmd(&["GET", "k"]);
    let e = items(h.cmd(&["SLOWLOG", "GET", "1"]));
    assert_eq!(e.len(), 1);
    let get = items(e[0].clone());
    assert_eq!(get.len(), 6);
    assert_eq!(items(get[3].clone()), vec![Value::bulk("GET"), Value::bulk("k")]);
    assert_eq!(int(&get[1]), 1_700_000_000);
    assert_eq!((&get[4], &get[5]), (&Value::bulk("10.1.2.3:4567"), &Value::bulk("tool")));
    let all = items(h.cmd(&["SLOWLOG", "GET", "-1"]));
    // The CONFIG SET (logged: it ran under the new threshold), the SET, the GET, the SLOWLOG
    // GET: three kept.
    assert_eq!(all.len(), 3);
    let ids: Vec<i64> = all.iter().map(|x| int(&items(x.clone())[0])).collect();
    assert_eq!(ids, vec![3, 2, 1]);
    let set_args = items(items(all[2].clone())[3].clone());
    assert_eq!(set_args[2], Value::bulk(format!("{}... (72 more bytes)", &long[..128])));
    assert!(is_error(&h.cmd(&["SLOWLOG", "GET", "-2"]), "ERR count should be greater than or equal to -1"));
    assert_eq!(h.cmd(&["SLOWLOG", "RESET"]), Value::Simple(b"OK".to_vec()));
    // The RESET itself is logged after it ran.
    assert_eq!(int(&h.cmd(&["SLOWLOG", "LEN"])), 1);
    h.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    h.cmd(&["SLOWLOG", "RESET"]);
    h.cmd(&["SET", "k", "v"]);
    assert_eq!(int(&h.cmd(&["SLOWLOG", "LEN"])), 0, "a negative threshold logs nothing");
    let cfg = items(h.cmd(&["CONFIG", "GET", "slowlog-*"]));
    assert_eq!(
        cfg,
        vec![
            Value::bulk("slowlog-log-slower-than"),
            Value::bulk("-1"),
            Value::bulk("slowlog-max-len"),
            Value::bulk("3")
        ]
    );
}

#[test]
fn latency_latest_history_and_reset_follow_the_monitor() {
    let mut h = harness();
    assert_eq!(items(h.cmd(&["LATENCY", "LATEST"])), vec![]);
    assert!(
        matches!(h.cmd(&["LATENCY", "DOCTOR"]), Value::Bulk(t) if t.starts_with(b"Latency monitoring is disabled"))
    );
    h.cmd(&["CONFIG", "SET", "latency-monitor-threshold", "5"]);
    // Samples as the server records them when a command takes 5 ms or more.
    h.telemetry.monitor.offer(1000, 7, false, 5);
    h.telemetry.monitor.offer(1001, 9, false, 5);
    let latest = items(h.cmd(&["LATENCY", "LATEST"]));
    assert_eq!(latest.len(), 1);
    assert_eq!(
        items(latest[0].clone()),
        vec![Value::bulk("command"), Value::Int(1001), Value::Int(9), Value::Int(9)]
    );
    let hist = items(h.cmd(&["LATENCY", "HISTORY", "command"]));
    assert_eq!(hist.len(), 2);
    assert_eq!(items(hist[0].clone()), vec![Value::Int(1000), Value::Int(7)]);
    assert!(
        matches!(h.cmd(&["LATENCY", "DOCTOR"]), Value::Bulk(t) if String::from_utf8_lossy(&t).contains("- command: 2 samples"))
    );
    assert_eq!(int(&h.cmd(&["LATENCY", "RESET", "command"])), 1);
    assert_eq!(items(h.cmd(&["LATENCY", "LATEST"])), vec![]);
    assert!(is_error(&h.cmd(&["LATENCY", "GRAPH", "command"]), "ERR mojim kv does not draw"));
    assert!(is_error(&h.cmd(&["LATENCY", "NOSUCH"]), "ERR unknown subcommand 'NOSUCH'. Try LATENCY HELP."));
}

#[test]
fn monitor_is_refused_by_a_host_without_monitors() {
    let mut h = harness();
    // A host that keeps no monitors (the server keeps them: pubsub_tests.rs).
    assert_eq!(h.cmd(&["MONITOR"]), Value::Error(NO_MONITOR.as_bytes().to_vec()));
}

#[test]
fn info_server_gives_the_plaintext_port_or_0_when_only_tls_serves() {
    let mut h = harness();
    assert_eq!(h.info_field("server", "tcp_port").as_deref(), Some("6379"));
    h.host.tls_only = true;
    assert_eq!(h.info_field("server", "tcp_port").as_deref(), Some("0"));
    let run_id = h.info_field("server", "run_id").unwrap();
    assert_eq!(run_id.len(), 40, "{run_id}");
    assert_eq!(h.info_field("clients", "maxclients").as_deref(), Some("10000"));
    assert_eq!(h.info_field("replication", "role").as_deref(), Some("master"));
    assert_eq!(h.info_field("replication", "connected_slaves").as_deref(), Some("1"));
    assert!(h.info_field("memory", "used_memory_rss").is_some_and(|v| v.parse::<u64>().unwrap() > 0));
    assert!(h.info_field("cpu", "used_cpu_user").is_some());
    assert_eq!(h.info_field("stats", "total_forks").as_deref(), Some("0"));
}

#[test]
fn the_new_commands_are_in_the_command_table() {
    let mut h = harness();
    let info = items(h.cmd(&["COMMAND", "INFO", "slowlog", "latency", "monitor"]));
    assert_eq!(info.len(), 3);
    for (i, name) in ["slowlog", "latency", "monitor"].iter().enumerate() {
        assert_eq!(items(info[i].clone())[0], Value::bulk(*name));
    }
    assert!(is_error(&h.cmd(&["SLOWLOG", "NOSUCH"]), "ERR unknown subcommand 'NOSUCH'. Try SLOWLOG HELP."));
    assert!(is_error(
        &h.cmd(&["SLOWLOG", "LEN", "x"]),
        "ERR wrong number of arguments for 'slowlog|len' command"
    ));
}

#[test]
fn a_scripts_commands_are_counted_but_not_logged_each() {
    let mut h = harness();
    h.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    h.cmd(&["SLOWLOG", "RESET"]);
    h.cmd(&["EVAL", "redis.call('SET', KEYS[1], 'v'); return redis.pcall('INCR', KEYS[1])", "1", "k"]);
    let t = h.text(&["INFO", "commandstats"]);
    let line = |name: &str| {
        t.lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("{name}: {t}"))
    };
    assert_eq!(counts(line("set")), (1, 0, 0));
    assert_eq!(counts(line("incr")), (1, 0, 1));
    // The script returns INCR's error: EVAL answered an error.
    assert_eq!(counts(line("eval")), (1, 0, 1));
    // The SLOWLOG RESET, the EVAL and the INFO, newest first: not the script's SET and INCR.
    let logged: Vec<Value> = items(h.cmd(&["SLOWLOG", "GET", "-1"]))
        .into_iter()
        .map(|e| items(items(e)[3].clone())[0].clone())
        .collect();
    assert_eq!(logged, vec![Value::bulk("INFO"), Value::bulk("EVAL"), Value::bulk("SLOWLOG")]);
}
