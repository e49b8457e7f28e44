//! Operating a Redis Cluster of `mojim kv` shards against a real etcd and real processes: the
//! metrics of a shard's server carry its shard.

mod common;

use common::kv_ops::OneShard;
use common::scrape::{metrics, promtool_accepts};
use mojim_tools::child::ChildNode;

/// A cluster node's `/metrics`: every sample carries `shard="<its shard's id>"`, and promtool
/// still accepts the page.
#[test]
fn a_cluster_nodes_metrics_carry_its_shard() {
    let Some(s) = OneShard::start("kv_ops_shard_label") else { return };
    let args = s.kv_args(&["--listen", &s.a1_kv, "--metrics-listen", "127.0.0.1:0"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let kv = ChildNode::spawn(common::exe(), &args).expect("mojim kv --cluster starts");
    let addr = kv.metrics_addr().unwrap_or_else(|| panic!("no \"metrics on\" line in {:?}", kv.printed()));
    // A command, so that the per-command families have samples too.
    common::kv::Resp::connect(&s.a1_kv).cmd(&["SET", "bar", "v"]);
    let page = metrics(addr);
    let shard = &s.topology().shards[0].id;
    let label = format!("shard=\"{shard}\"");
    let samples: Vec<&str> = page.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(samples.len() > 30, "{page}");
    for l in &samples {
        assert!(l.contains(&label), "a sample without {label}: {l}\n{page}");
    }
    assert!(page.contains(&format!("mojim_kv_commands_total{{{label},cmd=\"set\"}} 1")), "{page}");
    assert!(page.contains(&format!("mojim_kv_uptime_seconds{{{label}}} ")), "{page}");
    promtool_accepts(&page);
}
