//! The results of `mojim bench --kv`: one JSON line per run, or a table with each run's ratios
//! against the Redis targets measured in the same invocation.

use super::targets::{Target, ALL_TARGETS};
use serde::Serialize;

/// One run: a tool driving one workload against one target at one size, client count and
/// pipeline depth.
#[derive(Clone, Debug, Serialize)]
pub struct KvResult {
    /// `kv` (the built-in load) or `redis-benchmark`.
    pub tool: &'static str,
    /// `mojim-sync`, `redis-none`, `redis-aof-always`, `redis-wait1`, ...
    pub target: &'static str,
    /// `set`, `get`, `ycsb-a` … `ycsb-f`, `lpush-rpop`, `zadd`, ...
    pub workload: &'static str,
    /// Bytes per value (the workloads on a sorted set or a set: bytes per member).
    pub size: usize,
    /// Connections.
    pub clients: usize,
    /// Operations per batch on a connection.
    pub pipeline: usize,
    /// Whether the clients connected over TLS (`--tls on`).
    pub tls: bool,
    /// Operations done.
    pub ops: u64,
    /// Operations per second over all clients.
    pub ops_per_s: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Reads that found no value (the built-in load only; 0 unless the server lost a write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misses: Option<u64>,
    /// The redis-server's version (the Redis targets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_version: Option<String>,
    /// Seconds of CPU time (user and system) the run used: all the target's processes
    /// (servers, mirrors, a cluster's etcd) and the load's (the built-in load only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// `ops` per second of `cpu_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_cpu_s: Option<f64>,
    /// A cluster target's shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
    /// A cluster target's operations per shard, in its topology's order (the built-in load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_ops: Option<Vec<u64>>,
    /// A cluster target's `-MOVED` answers the load followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved: Option<u64>,
    /// A cluster target's `-ASK` answers the load followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asked: Option<u64>,
}

impl KvResult {
    /// The target, and a cluster's shards (`mojim-cluster/2`).
    pub fn label(&self) -> String {
        match self.shards {
            Some(n) => format!("{}/{n}", self.target),
            None => self.target.to_string(),
        }
    }

    /// The JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn cell(&self) -> (&'static str, &'static str, usize, usize, usize, bool) {
        (self.tool, self.workload, self.size, self.clients, self.pipeline, self.tls)
    }

    /// The same run without TLS: the cell's, with `tls` off.
    fn plain_cell(&self) -> (&'static str, &'static str, usize, usize, usize, bool) {
        (self.tool, self.workload, self.size, self.clients, self.pipeline, false)
    }
}

/// The table: per run its figures (CPU-seconds and operations per CPU-second for the built-in
/// load), then its throughput and median latency divided by those of each Redis target in the
/// same cell (same tool, workload, size, clients, pipeline and TLS), and of mojim-sync when a
/// cluster target ran beside it (the cost of cluster mode); with TLS runs, also each TLS run's
/// divided by the same target's run without TLS.
pub fn table(results: &[KvResult]) -> String {
    let with_tls = results.iter().any(|r| r.tls);
    let with_cluster = results.iter().any(|r| r.shards.is_some());
    let redis: Vec<Target> = ALL_TARGETS
        .into_iter()
        .filter(|t| t.is_redis() || (with_cluster && *t == Target::MojimSync))
        .filter(|t| results.iter().any(|r| r.target == t.name()))
        .collect();
    let mut out = format!(
        "{:<15} {:<10} {:>5} {:>7} {:>4} {:>3} {:<16} {:>10} {:>9} {:>9} {:>7} {:>10}",
        "tool",
        "workload",
        "size",
        "clients",
        "pipe",
        "tls",
        "target",
        "ops/s",
        "p50_us",
        "p99_us",
        "cpu_s",
        "ops/cpu_s"
    );
    for t in &redis {
        out += &format!(" {:>11}", format!("ops÷{}", t.short()));
    }
    for t in &redis {
        out += &format!(" {:>11}", format!("p50÷{}", t.short()));
    }
    if with_tls {
        out += &format!(" {:>11} {:>11}", "ops on÷off", "p50 on÷off");
    }
    out.push('\n');
    // The runs of a cell together, cells in the order they ran.
    let mut cells: Vec<_> = Vec::new();
    for r in results {
        if !cells.contains(&r.cell()) {
            cells.push(r.cell());
        }
    }
    let mut ordered: Vec<&KvResult> = results.iter().collect();
    ordered.sort_by_key(|r| cells.iter().position(|c| *c == r.cell()));
    let mut last_cell = None;
    for r in ordered {
        if last_cell.is_some_and(|c| c != r.cell()) {
            out.push('\n');
        }
        last_cell = Some(r.cell());
        out += &format!(
            "{:<15} {:<10} {:>5} {:>7} {:>4} {:>3} {:<16} {:>10.0} {:>9.1} {:>9.1} {:>7} {:>10}",
            r.tool,
            r.workload,
            r.size,
            r.clients,
            r.pipeline,
            if r.tls { "on" } else { "off" },
            r.label(),
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            r.cpu_s.map_or("-".into(), |c| format!("{c:.2}")),
            r.ops_per_cpu_s.map_or("-".into(), |c| format!("{c:.0}")),
        );
        let base = |t: &Target| {
            results.iter().find(|b| b.cell() == r.cell() && b.target == t.name() && b.shards.is_none())
        };
        for t in &redis {
            out += &match base(t) {
                Some(b) if b.ops_per_s > 0.0 => format!(" {:>11.2}", r.ops_per_s / b.ops_per_s),
                _ => format!(" {:>11}", "-"),
            };
        }
        for t in &redis {
            out += &match base(t) {
                Some(b) if b.p50_us > 0.0 => format!(" {:>11.2}", r.p50_us / b.p50_us),
                _ => format!(" {:>11}", "-"),
            };
        }
        if with_tls {
            let plain = results.iter().find(|b| b.cell() == r.plain_cell() && b.target == r.target);
            out += &match plain {
                Some(b) if r.tls && b.ops_per_s > 0.0 && b.p50_us > 0.0 => {
                    format!(" {:>11.2} {:>11.2}", r.ops_per_s / b.ops_per_s, r.p50_us / b.p50_us)
                }
                _ => format!(" {:>11} {:>11}", "-", "-"),
            };
        }
        out.push('\n');
    }
    let shards: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let per = r.shard_ops.as_ref()?;
            let per: Vec<String> = per.iter().map(u64::to_string).collect();
            Some(format!(
                "{} {} ({} B, clients {}, pipeline {}): ops per shard {}, MOVED {}, ASK {}\n",
                r.label(),
                r.workload,
                r.size,
                r.clients,
                r.pipeline,
                per.join(" "),
                r.moved.unwrap_or(0),
                r.asked.unwrap_or(0)
            ))
        })
        .collect();
    if !shards.is_empty() {
        out.push('\n');
        out += &shards.concat();
    }
    out += "cpu_s: CPU-seconds of every process of the target (servers, mirrors, a cluster's etcd) and of the load\n";
    if results.iter().any(|r| r.workload == "lpush-rpop") {
        out += "lpush-rpop: an LPUSH and the RPOP that follows it are two operations (ops/s counts both)\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &'static str, ops_per_s: f64, p50_us: f64) -> KvResult {
        KvResult {
            tool: "kv",
            target,
            workload: "set",
            size: 64,
            clients: 1,
            pipeline: 1,
            tls: false,
            ops: 10,
            ops_per_s,
            p50_us,
            p99_us: 2.0 * p50_us,
            mean_us: p50_us,
            misses: Some(0),
            redis_version: None,
            cpu_s: Some(0.5),
            ops_per_cpu_s: Some(20.0),
            shards: None,
            shard_ops: None,
            moved: None,
            asked: None,
        }
    }

    #[test]
    fn ratios_are_against_the_redis_targets_of_the_same_cell() {
        let t = table(&[row("redis-none", 1000.0, 10.0), row("redis-wait1", 250.0, 40.0)]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("ops÷none") && lines[0].contains("p50÷wait1"), "{t}");
        assert!(!lines[0].contains("aof"), "no column for a target not run: {t}");
        let wait = lines
            .iter()
            .find(|l| l.contains("redis-wait1") && !l.starts_with("cpu_s"))
            .expect("a wait1 line");
        let cols: Vec<&str> = wait.split_whitespace().collect();
        // ops÷none, ops÷wait1, p50÷none, p50÷wait1
        assert_eq!(&cols[cols.len() - 4..], ["0.25", "1.00", "4.00", "1.00"], "{t}");
    }

    #[test]
    fn json_lines_have_every_key() {
        let v: serde_json::Value = serde_json::from_str(&row("redis-none", 1.0, 1.0).json()).expect("JSON");
        for k in [
            "tool",
            "target",
            "workload",
            "size",
            "clients",
            "pipeline",
            "ops_per_s",
            "p50_us",
            "p99_us",
            "cpu_s",
            "ops_per_cpu_s",
        ] {
            assert!(v.get(k).is_some(), "no {k} in {v}");
        }
    }

    #[test]
    fn cluster_rows_are_divided_by_mojim_sync_and_name_their_shards() {
        let mut c = row("mojim-cluster", 970.0, 10.0);
        (c.shards, c.shard_ops, c.moved, c.asked) = (Some(2), Some(vec![6, 4]), Some(0), Some(0));
        let t = table(&[row("mojim-sync", 1000.0, 10.0), c]);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("ops÷mojim") && lines[0].contains("ops/cpu_s"), "{t}");
        let line =
            lines.iter().find(|l| l.contains("mojim-cluster/2") && l.starts_with("kv")).expect("a row");
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cols[cols.len() - 2..], ["0.97", "1.00"], "{t}");
        assert!(
            t.contains(
                "mojim-cluster/2 set (64 B, clients 1, pipeline 1): ops per shard 6 4, MOVED 0, ASK 0"
            ),
            "{t}"
        );
    }
}
