//! The monitoring files an operator loads (deploy/prometheus/alerts.yml, deploy/grafana/
//! mojim.json): Prometheus's own checker accepts the rules, their unit tests fire each alert
//! when it should and not before, and every metric a rule or a dashboard panel queries is one
//! that a running Mojim serves (a mirror's, an application's primary's or mojim kv's).

mod common;

use common::edit_kv;
use common::kv::KvCluster;
use common::{skip, Cluster};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(file)
}

/// Runs `promtool` with `args`; `None` (after `skip`) when it is not installed.
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool").args(args).output() {
        Ok(o) => Some(o),
        Err(e) => {
            skip(&format!("promtool (Debian package prometheus) cannot run: {e}"));
            None
        }
    }
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let rules = deploy("prometheus/alerts.yml");
    let Some(out) = promtool(&["check", "rules", rules.to_str().expect("utf-8 path")]) else { return };
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tests = deploy("prometheus/alerts_test.yml");
    let Some(out) = promtool(&["test", "rules", tests.to_str().expect("utf-8 path")]) else { return };
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `mojim_*` names an expression uses.
fn names_in(expr: &str, into: &mut BTreeSet<String>) {
    let mut rest = expr;
    while let Some(at) = rest.find("mojim_") {
        let word_start =
            at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let len =
            rest[at..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len() - at);
        if word_start {
            into.insert(rest[at..at + len].to_string());
        }
        rest = &rest[at + len..];
    }
}

/// Every expression of the alerting rules (one `expr:` per rule, on one line).
fn rule_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("prometheus/alerts.yml")).expect("read alerts.yml");
    let exprs: Vec<String> =
        text.lines().filter_map(|l| l.trim().strip_prefix("expr:")).map(|e| e.trim().to_string()).collect();
    let rules = text.lines().filter(|l| l.trim().starts_with("- alert:")).count();
    assert_eq!(exprs.len(), rules, "each rule has its expr on one line");
    exprs
}

/// Every query of the dashboard's panels.
fn panel_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("grafana/mojim.json")).expect("read mojim.json");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("a target's expr").to_string());
        }
    }
    assert!(out.len() >= 10, "the dashboard has few queries: {out:?}");
    out
}

/// The series names a metrics page serves: every family's name (with a histogram's `_bucket`,
/// `_sum` and `_count`).
fn served(page: &str, into: &mut BTreeSet<String>) {
    for l in page.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let mut w = l.split(' ');
        let (name, kind) = (w.next().expect("a name"), w.next().expect("a type"));
        into.insert(name.to_string());
        if kind == "histogram" || kind == "summary" {
            for suffix in ["_bucket", "_sum", "_count"] {
                into.insert(format!("{name}{suffix}"));
            }
        }
    }
}

#[test]
fn every_metric_the_rules_and_the_dashboard_query_is_served() {
    let mut c = Cluster::new("monitoring_names", 1 << 20, |f| {
        f.metrics.listen = "127.0.0.1:0".into();
        f.primary.metrics_listen = "127.0.0.1:0".into();
    });
    let m = c.start_mirror();
    let addr = m.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", m.printed()));
    let mut have = BTreeSet::new();
    served(&common::scrape::metrics(addr), &mut have);
    assert!(have.contains("mojim_received_groups_total"), "{have:?}");
    let p = mojim::Primary::open(&c.primary_options()).expect("open the primary");
    let addr = p.metrics_addr().expect("the primary serves its metrics").to_string();
    served(&common::scrape::metrics(&addr), &mut have);
    assert!(have.contains("mojim_primary_sync_seconds_bucket"), "{have:?}");
    let k = KvCluster::with("monitoring_names_kv", 16 << 20, |f| {
        edit_kv(f, |k| k.metrics_listen = "127.0.0.1:0".into())
    });
    let kv = k.kv.as_ref().expect("mojim kv runs");
    let addr = kv.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", kv.printed()));
    served(&common::scrape::metrics(addr), &mut have);
    assert!(have.contains("mojim_kv_commands_total"), "{have:?}");

    let mut queried = BTreeSet::new();
    for e in rule_exprs().iter().chain(&panel_exprs()) {
        names_in(e, &mut queried);
    }
    let missing: Vec<&String> = queried.difference(&have).collect();
    assert!(missing.is_empty(), "queried but served by no role: {missing:?}");
}

#[test]
fn names_are_found_in_expressions() {
    let mut n = BTreeSet::new();
    names_in("rate(mojim_a_total{x=\"mojim_not\"}[1m]) / xmojim_b + mojim_c", &mut n);
    assert_eq!(n.into_iter().collect::<Vec<_>>(), ["mojim_a_total", "mojim_c", "mojim_not"]);
}
