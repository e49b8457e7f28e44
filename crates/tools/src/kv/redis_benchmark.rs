//! redis-benchmark, the tool Redis users measure with, run against each target:
//! `redis-benchmark -t set,get -d SIZE -c CLIENTS -P PIPELINE -n OPS -r RECORDS --csv`, its CSV
//! parsed (redis-benchmark 7.0 prints `rps`, `avg_latency_ms`, `p50_latency_ms`,
//! `p99_latency_ms`, ...). It cannot follow a SET with `WAIT 1 0`, so against `redis-wait1` it
//! runs GET only (the SET figures for that target come from the built-in load).

use super::ycsb::Workload;
use mojim::error::{Error, Result};
use std::path::Path;
use std::process::Command;

/// One test's line of redis-benchmark's CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// SET or GET.
    pub workload: Workload,
    /// Requests per second.
    pub rps: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
}

/// What one invocation measures.
pub struct Invocation<'a> {
    /// The redis-benchmark executable.
    pub bin: &'a Path,
    /// `host:port` of the server.
    pub addr: &'a str,
    /// SET and/or GET (SET first: GET then reads its keys).
    pub tests: &'a [Workload],
    /// `-d`.
    pub size: usize,
    /// `-c`.
    pub clients: usize,
    /// `-P`.
    pub pipeline: usize,
    /// `-n`, per test.
    pub ops: u64,
    /// `-r`: keys drawn from this many.
    pub records: u64,
    /// Connect over TLS with these certificates (`addr` is then the TLS port).
    pub tls: Option<&'a super::tls::KvTls>,
    /// `--cluster`: `addr` is one shard of a cluster, each key is sent to its slot's owner.
    pub cluster: bool,
}

/// Runs redis-benchmark once and returns a row per test.
pub fn run(inv: &Invocation) -> Result<Vec<Row>> {
    let (host, port) =
        inv.addr.rsplit_once(':').ok_or_else(|| Error::Config(format!("{} is not host:port", inv.addr)))?;
    let tests: Vec<&str> = inv.tests.iter().map(|w| w.name()).collect();
    let mut cmd = Command::new(inv.bin);
    cmd.args(["-h", host, "-p", port, "-t", &tests.join(",")])
        .args(["-d", &inv.size.to_string(), "-c", &inv.clients.to_string()])
        .args(["-P", &inv.pipeline.to_string(), "-n", &inv.ops.to_string()])
        .args(["-r", &inv.records.to_string(), "--csv"]);
    if let Some(p) = super::client::password() {
        cmd.args(["-a", p]);
    }
    if let Some(t) = inv.tls {
        cmd.args(t.client_args());
    }
    if inv.cluster {
        cmd.arg("--cluster");
    }
    let tls = if inv.tls.is_some() { " --tls" } else { "" };
    let shown = format!("{} -h {host} -p {port}{tls} -t {} ...", inv.bin.display(), tests.join(","));
    let mut out = cmd.output().map_err(Error::io(format!("run {}", inv.bin.display())))?;
    // redis-benchmark gives up when its connections are reset (seen once on a loaded machine,
    // against a server that went on serving): once, it is run again, and says so.
    let gave_up = |o: &std::process::Output| {
        [&o.stdout, &o.stderr].iter().any(|b| String::from_utf8_lossy(b).contains("All clients disconnected"))
    };
    if !out.status.success() && gave_up(&out) {
        eprintln!("kv: {shown}: its clients were disconnected; running it once more");
        out = cmd.output().map_err(Error::io(format!("run {}", inv.bin.display())))?;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stdout.contains("Error") {
        return Err(Error::Io {
            op: shown,
            source: std::io::Error::other(format!("{}: {}{}", out.status, stdout.trim(), stderr.trim())),
        });
    }
    let rows =
        parse_csv(&stdout).map_err(|e| Error::Io { op: shown.clone(), source: std::io::Error::other(e) })?;
    for t in inv.tests {
        if !rows.iter().any(|r| r.workload == *t) {
            return Err(Error::Io {
                op: shown,
                source: std::io::Error::other(format!("no {} line in its output:\n{stdout}", t.name())),
            });
        }
    }
    Ok(rows)
}

/// Parses redis-benchmark's `--csv` output: a header naming the columns, then one line per
/// test. Tests other than SET and GET are ignored. What comes before the header (with
/// `--cluster`, the masters it found) is skipped.
pub fn parse_csv(text: &str) -> std::result::Result<Vec<Row>, String> {
    let all = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let skip = all().position(|l| l.starts_with("\"test\"")).unwrap_or(0);
    let mut lines = all().skip(skip);
    let header: Vec<String> = fields(lines.next().ok_or("redis-benchmark printed nothing")?);
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| {
            format!(
                "redis-benchmark's CSV has no {name} column (redis-benchmark 7.0 or newer prints it); \
                 its header is: {}",
                header.join(",")
            )
        })
    };
    let (test, rps, avg, p50, p99) =
        (col("test")?, col("rps")?, col("avg_latency_ms")?, col("p50_latency_ms")?, col("p99_latency_ms")?);
    let mut rows = Vec::new();
    for line in lines {
        let f = fields(line);
        let num = |i: usize| {
            f.get(i)
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or_else(|| format!("column {} of the line '{line}' is not a number", header[i]))
        };
        let workload = match f.get(test).map(String::as_str) {
            Some("SET") => Workload::Set,
            Some("GET") => Workload::Get,
            _ => continue,
        };
        rows.push(Row {
            workload,
            rps: num(rps)?,
            mean_us: num(avg)? * 1000.0,
            p50_us: num(p50)? * 1000.0,
            p99_us: num(p99)? * 1000.0,
        });
    }
    Ok(rows)
}

/// The fields of one CSV line, their quotes removed (redis-benchmark quotes every field and
/// puts no commas or quotes inside one).
fn fields(line: &str) -> Vec<String> {
    line.split(',').map(|f| f.trim().trim_matches('"').to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// redis-benchmark 7.0.15's output for `-t set,get --csv`.
    const SAMPLE: &str = r#""test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","17241.38","0.055","0.016","0.023","0.071","0.863","4.103"
"GET","8130.08","0.118","0.032","0.055","0.087","3.071","4.607"
"#;

    #[test]
    fn csv_rows_give_throughput_and_percentiles_in_microseconds() {
        let rows = parse_csv(SAMPLE).expect("parses");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].workload, Workload::Set);
        assert!((rows[0].rps - 17241.38).abs() < 1e-9);
        assert!((rows[0].p50_us - 23.0).abs() < 1e-9);
        assert!((rows[0].p99_us - 863.0).abs() < 1e-9);
        assert!((rows[1].mean_us - 118.0).abs() < 1e-9);
        assert_eq!(rows[1].workload, Workload::Get);
    }

    #[test]
    fn the_masters_listed_with_cluster_come_before_the_header_and_are_skipped() {
        let out = format!(
            "Cluster has 3 master nodes:\n\nMaster 0: 0123 127.0.0.1:7001\nMaster 1: 4567 127.0.0.1:7002\n{SAMPLE}"
        );
        assert_eq!(parse_csv(&out).expect("parses"), parse_csv(SAMPLE).expect("parses"));
    }

    #[test]
    fn csv_without_percentiles_is_refused_naming_the_column() {
        let old = "\"SET\",\"17241.38\"\n";
        let e = parse_csv(old).unwrap_err();
        assert!(e.contains("no test column"), "{e}");
        let no_p50 = "\"test\",\"rps\",\"avg_latency_ms\",\"p99_latency_ms\"\n\"SET\",\"1\",\"2\",\"3\"\n";
        let e = parse_csv(no_p50).unwrap_err();
        assert!(e.contains("no p50_latency_ms column"), "{e}");
        let bad = SAMPLE.replace("17241.38", "fast");
        let e = parse_csv(&bad).unwrap_err();
        assert!(e.contains("column rps") && e.contains("fast"), "{e}");
    }
}
