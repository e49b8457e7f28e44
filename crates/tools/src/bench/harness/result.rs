//! What a mode measured ([`BenchResult`]), the median of its rounds, and the table it prints.

use serde::Serialize;

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub mode: String,
    pub size: u64,
    pub threads: usize,
    pub lanes: u16,
    pub ops: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub ops_per_s: f64,
    pub mb_per_s: f64,
    /// Replicas besides the mirror.
    pub backups: usize,
    pub topology: String,
    /// `tcp`, `shm` or `ucx`.
    pub transport: String,
    /// Whether the links ran mutual TLS (`--tls on` or `encrypt`).
    pub tls: bool,
    /// Whether placed records' bodies were encrypted (`--tls encrypt`: `[security]
    /// encrypt_placed`).
    pub encrypt_placed: bool,
    /// Whether the primary served its metrics and was scraped each second (`--metrics on`).
    pub metrics: bool,
    /// CPU time (user + system, µs) per operation of the sending process (the benchmark and the
    /// primary in it; the pinger for tcp-rtt), warm-up included, at the kernel's tick resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_sender: Option<f64>,
    /// The same for the receiving process: the mirror (the echo server for tcp-rtt), if this
    /// benchmark started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_us_receiver: Option<f64>,
}

impl BenchResult {
    /// A result of `mode` with `size`-byte operations on `threads` threads over `lanes` lanes,
    /// before its figures are filled in: no operations, no replicas (topology `none`), over
    /// tcp without TLS or metrics, no CPU times.
    pub fn new(mode: &str, size: u64, threads: usize, lanes: u16) -> BenchResult {
        BenchResult {
            mode: mode.into(),
            size,
            threads,
            lanes,
            ops: 0,
            mean_us: 0.0,
            p50_us: 0.0,
            p99_us: 0.0,
            ops_per_s: 0.0,
            mb_per_s: 0.0,
            backups: 0,
            topology: "none".into(),
            transport: "tcp".into(),
            tls: false,
            encrypt_placed: false,
            metrics: false,
            cpu_us_sender: None,
            cpu_us_receiver: None,
        }
    }
}

/// The result whose p50 is the median of a mode's rounds (all its figures come from that round).
pub(crate) fn median(mut rs: Vec<BenchResult>) -> BenchResult {
    rs.sort_by(|x, y| x.p50_us.total_cmp(&y.p50_us));
    rs.swap_remove(rs.len() / 2)
}

pub(crate) fn cpu_cell(us: Option<f64>) -> String {
    us.map_or("-".into(), |u| format!("{u:.1}"))
}

/// The latency table's header: one label per column of [`table_row`].
fn table_header() -> String {
    format!(
        "{:<18} {:<11} {:>7} {:>7} {:>5} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>15}",
        "mode",
        "transport",
        "size",
        "threads",
        "lanes",
        "ops",
        "mean_us",
        "p50_us",
        "p99_us",
        "ops/s",
        "MB/s",
        "cpu_us_snd/rcv"
    )
}

/// One result as a row of the latency table; the last column is the CPU microseconds per
/// operation of the sender and of the receiver (`-` where not measured).
fn table_row(r: &BenchResult) -> String {
    let mut transport = if r.tls { format!("{}+tls", r.transport) } else { r.transport.clone() };
    if r.encrypt_placed {
        transport.push_str("+enc");
    }
    if r.metrics {
        transport.push_str("+metrics");
    }
    format!(
        "{:<18} {:<11} {:>7} {:>7} {:>5} {:>9} {:>9.2} {:>9.2} {:>9.2} {:>11.0} {:>9.1} {:>15}",
        r.mode,
        transport,
        r.size,
        r.threads,
        r.lanes,
        r.ops,
        r.mean_us,
        r.p50_us,
        r.p99_us,
        r.ops_per_s,
        r.mb_per_s,
        format!("{}/{}", cpu_cell(r.cpu_us_sender), cpu_cell(r.cpu_us_receiver))
    )
}

/// Prints results as a table with side-by-side ratios, or as JSON lines.
pub fn print(results: &[BenchResult], json: bool) {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
        return;
    }
    println!("{}", table_header());
    for r in results {
        println!("{}", table_row(r));
    }
    let on =
        |m: &str, t: &str| results.iter().find(|r| r.mode == m && r.transport == t && !r.tls && !r.metrics);
    let with_metrics = |m: &str| results.iter().find(|r| r.mode == m && r.transport == "tcp" && r.metrics);
    for m in ["sync", "tcp-rtt"] {
        if let (Some(s), Some(p)) = (with_metrics(m), on(m, "tcp")) {
            println!(
                "{m} with metrics scraped / without: p50 {:.3}, ops/s {:.3} ({} threads)",
                s.p50_us / p.p50_us,
                s.ops_per_s / p.ops_per_s,
                s.threads
            );
        }
    }
    let with_tls = |m: &str, t: &str, enc: bool| {
        results.iter().find(|r| r.mode == m && r.transport == t && r.tls && r.encrypt_placed == enc)
    };
    for (m, t) in [("sync", "tcp"), ("tcp-rtt", "tcp"), ("sync", "shm"), ("sync", "ucx")] {
        let over = if t == "tcp" { String::new() } else { format!(" over {t}") };
        if let (Some(s), Some(p)) = (with_tls(m, t, false), on(m, t)) {
            println!(
                "{m}{over} with TLS / without: p50 {:.2}, ops/s {:.2} ({} threads)",
                s.p50_us / p.p50_us,
                s.ops_per_s / p.ops_per_s,
                s.threads
            );
        }
        for (than, base) in [("without TLS", on(m, t)), ("TLS alone", with_tls(m, t, false))] {
            if let (Some(s), Some(p)) = (with_tls(m, t, true), base) {
                println!(
                    "{m}{over} with TLS and encrypt_placed / {than}: p50 {:.2}, ops/s {:.2} ({} threads)",
                    s.p50_us / p.p50_us,
                    s.ops_per_s / p.ops_per_s,
                    s.threads
                );
            }
        }
    }
    if let (Some(s), Some(t)) = (on("sync", "tcp"), on("tcp-rtt", "tcp")) {
        println!("sync p50 / tcp-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("shm-rtt", "shm")) {
        println!("sync p50 over shm / shm-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("ucx-rtt", "ucx")) {
        println!("sync p50 over ucx / ucx-rtt p50 = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("sync", "shm")) {
        println!("sync p50 over ucx / over shm = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("sync", "tcp")) {
        println!("sync p50 over shm / over tcp = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "shm"), on("sync", "shm-rings")) {
        println!("sync p50 placed / through the rings = {:.2}", s.p50_us / t.p50_us);
    }
    if let (Some(s), Some(t)) = (on("sync", "ucx"), on("sync", "ucx-rings")) {
        println!("sync p50 over ucx placed / through the rings = {:.2}", s.p50_us / t.p50_us);
    }
    let find = |m: &str| results.iter().find(|r| r.mode == m);
    if let (Some(s), Some(d)) = (find("sync"), find("unreplicated-disk")) {
        println!("sync p50 / unreplicated-disk p50 = {:.2}", s.p50_us / d.p50_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_of_the_latency_table_has_a_label() {
        let r = BenchResult {
            ops: 1000,
            mean_us: 40.0,
            p50_us: 38.5,
            p99_us: 90.25,
            ops_per_s: 25000.0,
            mb_per_s: 102.4,
            tls: true,
            encrypt_placed: true,
            metrics: true,
            cpu_us_sender: Some(12.5),
            ..BenchResult::new("sync", 4096, 1, 1)
        };
        let (header, row) = (table_header(), table_row(&r));
        let labels: Vec<&str> = header.split_whitespace().collect();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(labels.len(), cells.len(), "\n{header}\n{row}");
        assert_eq!(labels.last(), Some(&"cpu_us_snd/rcv"));
        assert_eq!(cells.last(), Some(&"12.5/-"));
    }
}
